"""cProfile of many eager calls of one op on tiny inputs: where the host time goes, by
function (profiler overhead included, so read the ranking, not the absolute times).

    python benchmarks/profile_host.py [--op SiluAndMulFwdOp|GemmFwdOp] [--calls 20000]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="SiluAndMulFwdOp")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    from opspec.ops import GemmFwdOp, SiluAndMulFwdOp
    dev = torch.device(args.device)
    h = torch.float16
    if args.op == "GemmFwdOp":
        op, inputs = GemmFwdOp(), (torch.randn(16, 16, dtype=h, device=dev),) * 2
    else:
        op, inputs = SiluAndMulFwdOp(), (torch.randn(4, 16, dtype=h, device=dev),)
    for _ in range(100):
        op(*inputs)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        op(*inputs)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
