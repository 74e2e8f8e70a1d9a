"""`opspec bench`: verify and time the bundled ops on their workloads (see
`opspec.ops.bench_harness`). Only the parser is built at import: torch, the ops and the
harness are imported when the command runs."""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace

from opspec.schema.suggest import closest

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_EPILOG = """\
For every workload case of each OP (default: every bundled op) the op and each baseline are
first checked against the op's reference; a wrong result is a failure, never a timing. Then
all are timed in one process, passes interleaved A B C C B A: on CUDA with CUDA events and
the L2 flushed before every sample (--flush), on the CPU with time.perf_counter. TFLOP/s
and TB/s come from op.eval_roofline(); efficiency = max(bytes / bandwidth, flops / compute)
/ time, the ceilings being measured in the same run (a device-to-device copy, a large
matrix product; for cases whose floating-point inputs are all float32, a float32 one).

exit status: 0 every case verified, 1 a wrong or failing implementation, 2 usage error.
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("bench", help="verify and time ops against torch baselines",
                       description="Verify each op against its reference, then time it "
                                   "against its baselines on every workload case.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ops", nargs="*", metavar="OP", help="op class name (default: all bundled)")
    p.add_argument("--device", metavar="DEV",
                   help="cuda, cuda:N or cpu (default: cuda when available, else cpu)")
    p.add_argument("--baselines", metavar="LIST",
                   help="comma-separated baseline names, e.g. eager,compile; 'none' times "
                        "the op alone (default: every baseline registered for the op)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--plot", metavar="PATH", help="draw efficiency and speedup as a PNG "
                                                  "(needs matplotlib)")
    p.add_argument("--cases", metavar="SUBSTR[,SUBSTR...]",
                   help="only cases whose id contains one of these substrings")
    p.add_argument("--max-elems", type=int, metavar="N",
                   help="skip cases whose inputs hold more than N elements")
    p.add_argument("--quick", action="store_true",
                   help="fewer and shorter timing passes, smaller ceiling measurements")
    p.add_argument("--flush", choices=("clean", "dirty"), default="clean",
                   help="CUDA: flush the L2 before each sample by reading a 256 MiB buffer "
                        "(clean, the default) or by writing it (dirty: each sample then also "
                        "pays the write-back of the buffer's lines)")
    return p


def _usage(msg: str) -> Exception:
    from .main import UsageError
    return UsageError(msg)


def cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from opspec.ops import bench_baselines as BB
    from opspec.ops import bench_harness as H
    from opspec.ops import bench_report as R

    from .progress import ProgressBar

    known = H.discover_ops()
    for name in args.ops:
        if name not in known:
            close = closest(name, list(known))
            raise _usage(f"no bundled op named {name}"
                         + (f"; did you mean {close}?" if close else "")
                         + f" (known: {', '.join(known)})")
    ops = [known[n] for n in (args.ops or known)]

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise _usage(f"bad --device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise _usage("--device cuda: no CUDA device is available (use --device cpu)")

    baselines = None
    if args.baselines is not None:
        names = [n.strip() for n in args.baselines.split(",") if n.strip()]
        if names == ["none"]:
            names = []
        registered = {n for op in ops for n in BB.BASELINES.get(op.__name__, {})}
        unknown = [n for n in names if n not in registered]
        if unknown:
            raise _usage(f"unknown baseline(s) {', '.join(unknown)} for these ops "
                         f"(registered: {', '.join(sorted(registered)) or 'none'})")
        baselines = tuple(names)
    if args.plot:  # fail before the run, not after it
        try:
            R._pyplot()
        except R.MissingMatplotlib as exc:
            raise _usage(str(exc)) from None

    settings = H.Settings.for_device(device, quick=args.quick, baselines=baselines,
                                     case_filter=args.cases, max_elems=args.max_elems,
                                     flush_mode=args.flush)
    if not any(H.select_cases(op, settings) for op in ops):  # before measuring anything
        raise _usage("no case matched"
                     + (f" --cases {args.cases!r}" if args.cases else "")
                     + (f" --max-elems {args.max_elems}" if args.max_elems is not None else ""))
    bar = ProgressBar(sys.stderr)

    def progress(done: int, total: int, label: str) -> None:
        bar(done, total, SimpleNamespace(op=label))

    try:
        result = H.run_bench(ops, settings, progress=progress if bar.enabled else None)
    finally:
        bar.close()
    meta = result["meta"]
    c = meta["ceilings"]
    fp32 = R.float32_ceiling(c)
    fp32_note = f" ({R._num(fp32)} in float32)" if fp32 is not None else ""
    sys.stdout.write(f"{meta.get('gpu') or meta['device']}: torch {meta['torch']}, Triton "
                     f"{meta.get('triton') or '-'}; timing {meta['timing']}; ceilings "
                     f"{R._num(c['bandwidth_tbps'])} TB/s, {R._num(c['compute_tflops'])} "
                     f"TFLOP/s{fp32_note}\n")
    sys.stdout.write(R.text_table(result) + "\n")
    for name, why in (meta.get("unavailable_baselines") or {}).items():
        sys.stderr.write(f"opspec bench: baseline {name} not run: {why}\n")
    if args.json:
        R.write_json(result, args.json)
        sys.stderr.write(f"wrote {args.json}\n")
    if args.plot:
        R.plot_png(result, args.plot)
        sys.stderr.write(f"wrote {args.plot}\n")
    code = H.exit_code(result)
    if code:
        sys.stderr.write(f"opspec bench: {len(result['summary']['failures'])} case(s) failed\n")
    return code
