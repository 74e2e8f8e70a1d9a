"""Offline tile sweep for the batched GEMM on a Hopper GPU: per BmmFwdOp workload row
behind cuBLAS in benchmarks/bench.json, time `torch.bmm` (cuBLAS), the table's choice and
candidate configurations of the persistent TMA kernel (tiles, stages, the tile stored
whole or in two column strips) and of the pointer kernel.

    python benchmarks/bmm_sweep.py [--json PATH] [--budget-s 120] [--rows SUBSTR,...]

Prints, per row, cuBLAS's time and the best candidates as a ratio to it (> 1: faster);
every candidate's output is checked against cuBLAS's first (a wrong one is reported, never
timed). The JSON holds every timing. Used to fill the tables in kernels/bmm.py; not part of
the package.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import triton
from triton.testing import do_bench

from opspec.kernels.bmm import BmmConfig, bmm_tma, bmm_triton

ROWS = [  # (label, B, M, N, K): row-major contiguous operands, as the workloads draw them
    ("llama3-8b-attn-qk", 256, 2048, 2048, 128),
    ("llama3-8b-qk-s4k", 32, 4096, 4096, 128),
    ("dsv3-expert-down", 64, 256, 7168, 2048),
    ("llama3-8b-attn-pv", 256, 2048, 128, 2048),
    ("llama3-8b-decode-qk", 512, 4, 4096, 128),
]

C = BmmConfig
TMA = [
    C(128, 256, 64, 16, 8, 3, 2), C(128, 256, 64, 16, 8, 4, 2), C(128, 256, 64, 8, 8, 3, 2),
    C(128, 128, 128, 8, 8, 3, 2), C(128, 128, 128, 8, 4, 3, 2), C(128, 128, 64, 8, 4, 5, 2),
    C(256, 128, 64, 16, 8, 3, 2), C(128, 256, 64, 1, 8, 3, 2),
    C(128, 256, 64, 16, 8, 3), C(128, 128, 128, 8, 8, 3), C(128, 128, 64, 8, 4, 5),
    C(256, 128, 64, 16, 8, 3), C(128, 128, 64, 8, 8, 4),
]
POINTER = [C(128, 256, 64, 8, 8, 3), C(128, 128, 64, 8, 8, 4), C(128, 128, 128, 8, 8, 3)]
DECODE = [C(16, 128, 128, 1, 4, 5), C(16, 128, 128, 1, 4, 3), C(16, 256, 128, 1, 4, 3),
          C(16, 64, 128, 1, 4, 4)]


def candidates(M: int):
    if M <= 16:
        for cfg in DECODE:
            yield f"tma {tuple(cfg)}", lambda a, b, o, c=cfg: bmm_tma(a, b, o, c)
        return
    for cfg in TMA:
        yield f"tma {tuple(cfg)}", lambda a, b, o, c=cfg: bmm_tma(a, b, o, c)
    for cfg in POINTER:
        yield f"pointer {tuple(cfg)}", lambda a, b, o, c=cfg: bmm_triton(a, b, o, c)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--rows", default="")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    rows = [r for r in ROWS if not args.rows or any(s in r[0] for s in args.rows.split(","))]
    results = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
               "triton": triton.__version__, "rows": {}}
    t_start = time.time()
    for i, (label, B, M, N, K) in enumerate(rows):
        # an equal share of what is left, so that a slow row does not starve the rest
        t_end = time.time() + (args.budget_s - (time.time() - t_start)) / (len(rows) - i)
        torch.manual_seed(0)
        a = torch.randn(B, M, K, device=dev, dtype=torch.bfloat16) / 8
        b = torch.randn(B, K, N, device=dev, dtype=torch.bfloat16) / 8
        ref = torch.bmm(a, b)
        out = torch.empty_like(ref)
        tol = 0.02 * max(1.0, ref.float().abs().max().item())
        row = {"cublas": do_bench(lambda: torch.bmm(a, b, out=out)),
               "table": do_bench(lambda: bmm_triton(a, b, out))}
        for name, fn in candidates(M):
            if time.time() > t_end:
                row["_truncated"] = True
                break
            try:
                out.fill_(float("nan"))
                fn(a, b, out)
                err = (out.float() - ref.float()).abs().max().item()
                if not err <= tol:  # NaN compares false: unwritten output is wrong too
                    row[name] = f"wrong (max err {err:.3g})"
                    continue
                row[name] = do_bench(lambda: fn(a, b, out), warmup=10, rep=40)
            except Exception as exc:  # an unsupported variant (shared memory): record why
                row[name] = f"error: {type(exc).__name__}: {str(exc)[:160]}"
        results["rows"][label] = row
        gb = (a.numel() + b.numel() + ref.numel()) * 2 / 1e9
        timed = sorted((v, k) for k, v in row.items() if isinstance(v, float))
        print(f"{label}: cuBLAS {row['cublas'] * 1e3:.1f} us ({gb / row['cublas']:.2f} TB/s), "
              f"table {row['cublas'] / row['table']:.3f}x", flush=True)
        for v, k in timed[:5]:
            print(f"   {row['cublas'] / v:.3f}x  {v * 1e3:8.1f} us  {k}", flush=True)
        errs = {k: v for k, v in row.items() if isinstance(v, str)}
        for k, v in list(errs.items())[:3]:
            print(f"   failed: {k}: {v}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
