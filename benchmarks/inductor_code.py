"""The Triton kernels torch.compile generates for an op's `compile` baseline, and the launch
configuration Inductor's autotuner kept for each: what opspec's kernel is measured against.

    python benchmarks/inductor_code.py OP [--cases SUBSTR] [--device cuda] [--out DIR]

For each workload case of OP (those whose id contains SUBSTR), the op's `eager` baseline
(`opspec.ops.bench_baselines.BASELINES`) is compiled as the `compile` baseline is
(`fullgraph=True`, `dynamic=False`) and run once on the case's inputs; the generated
module's source goes to `DIR/<case>.py` (default: printed), followed by every Inductor
kernel that ran with the configuration it kept (`XBLOCK`, `R0_BLOCK`, warps, stages).
Reading another tool's generated kernels is how a gap to it is understood; this copies
nothing into opspec. Not part of the package.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

import torch


def _autotuners() -> list:
    """Inductor's kernel objects alive now (each keeps the launchers its autotuning kept)."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # another torch layout: configurations are not reported
        return []
    found = []
    for o in gc.get_objects():
        try:
            if isinstance(o, CachingAutotuner):
                found.append(o)
        except ReferenceError:  # a dead weak proxy
            pass
    return found


def _kept(tuner) -> str:
    """The launch configuration(s) an Inductor kernel kept, as text."""
    name = getattr(getattr(tuner, "fn", None), "__name__", "?")
    configs = [str(getattr(launcher, "config", "?")) for launcher in getattr(tuner, "launchers", [])]
    return f"{name}: {'; '.join(configs) or 'not launched'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("--cases", default=None, help="keep cases whose id contains this")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None, help="write each case's generated code here")
    args = ap.parse_args(argv)

    from torch._inductor.utils import run_and_get_code

    from opspec.ops import bench_baselines as BB
    from opspec.ops.bench_harness import discover_ops
    from opspec.ops.workloads import cases as workload_cases

    ops = discover_ops()
    if args.op not in ops:
        sys.stderr.write(f"unknown op {args.op!r}; bundled ops: {sorted(ops)}\n")
        return 2
    eager = BB.BASELINES.get(args.op, {}).get("eager")
    if eager is None:
        sys.stderr.write(f"{args.op} has no eager baseline to compile\n")
        return 2
    device = torch.device(args.device)
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    chosen = [c for c in workload_cases(ops[args.op]) if not args.cases or args.cases in c.id]
    if not chosen:
        sys.stderr.write(f"no case of {args.op} matches {args.cases!r}\n")
        return 2
    for case in chosen:
        torch._dynamo.reset()
        inputs = case.inputs(device)
        fn = torch.compile(eager(case.construct(ops[args.op])), fullgraph=True, dynamic=False)
        _, codes = run_and_get_code(fn, *inputs)
        kept = "\n".join(_kept(t) for t in _autotuners())
        text = "\n\n".join(codes) + "\n\n# kernels and the configurations kept:\n# " \
            + kept.replace("\n", "\n# ") + "\n"
        if out_dir:
            path = out_dir / f"{case.id}.py"
            path.write_text(text)
            print(f"{case.id}: {path}\n  " + kept.replace("\n", "\n  "))
        else:
            print(f"==== {case.id}\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
