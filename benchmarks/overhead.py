"""Host overhead of an eager opspec call, side by side with what a caller could run instead.

For tiny tensors (so the kernel itself costs nothing), the per-call wall time of:

- `opspec`: the op, `op(x)` -- generated checks, kernel lookup, launch, output checks;
- `launcher`: allocating the output and calling the Triton launcher directly,
  `kernel[grid](*args, **kwargs)`, with the very kernel, grid and arguments the op's call
  launches (recorded from one call through `opspec.kernels.launch.recording`), so no
  argument handling or configuration choice is timed; on a CPU, where no Triton kernel
  runs, the torch reference kernel the op selects;
- `native`: allocating the output and replaying those launches through Triton's native
  launcher of the compiled kernel (`opspec.kernels.launch.prepare`): the least host time a
  launch takes, the floor under every other variant (on a CPU, as `launcher`);
- `entry`: allocating the output and calling the kernel entry the op's dispatch selects
  (`entry.forward(x, out)`: the kernel library's own argument handling and configuration
  choice, then opspec's launch path, `opspec.kernels.launch`);
- `custom_op`: that entry behind a `torch.library.custom_op`, called eagerly;
- `torch`: the torch function the op follows.

`opspec - launcher` is the overhead over a bare Triton launch, `opspec - native` over the
cheapest launch there is; `opspec - entry` is what the op's checks and dispatch add to the
kernel entry. Each variant runs `--calls` times per
round; rounds are interleaved and the median round is reported, with the device
synchronised at the end of each round. `--clock thread` times this thread's CPU time
instead of the wall clock (a CPU shared with other work then reads the same). Run
(benchmarks are not packaged):
`python benchmarks/overhead.py [--device cuda] [--clock thread] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, calls: int, device: torch.device, clock=time.perf_counter) -> float:
    _sync(device)
    t0 = clock()
    for _ in range(calls):
        fn()
    _sync(device)
    return (clock() - t0) / calls * 1e6


def variants(device: torch.device):
    """The six variants per op (see the module docstring). `entry` calls the very kernel
    entry the op's dispatch selects for this call (Triton on CUDA; on a CPU without
    Triton's interpreter, the torch reference); `launcher` replays its Triton launches."""
    from opspec.kernels.gemm_impl import GemmCall
    from opspec.kernels.silu_and_mul_impl import SiluAndMulCall
    from opspec.ops import GemmFwdOp, SiluAndMulFwdOp

    dt = torch.float16
    x = torch.randn(4, 16, dtype=dt, device=device)
    a = torch.randn(16, 16, dtype=dt, device=device)
    b = torch.randn(16, 16, dtype=dt, device=device)

    silu = SiluAndMulFwdOp()
    silu_entry = silu.kernel_for("silu_and_mul", SiluAndMulCall("float16", device=device))

    def silu_launcher():
        out = torch.empty((x.shape[0], x.shape[1] // 2), dtype=x.dtype, device=x.device)
        return silu_entry.forward(x, out)

    @torch.library.custom_op("opspec_bench::silu_and_mul", mutates_args=())
    def silu_custom(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((x.shape[0], x.shape[1] // 2), dtype=x.dtype, device=x.device)
        return silu_entry.forward(x, out)

    gemm = GemmFwdOp()
    gemm_entry = gemm.kernel_for("gemm", GemmCall(16, 16, 16, "float16", False, False,
                                                  device=device))

    def gemm_launcher():
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
        return gemm_entry.forward(a, b, out)

    @torch.library.custom_op("opspec_bench::gemm", mutates_args=())
    def gemm_custom(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
        return gemm_entry.forward(a, b, out)

    return {
        "SiluAndMulFwdOp": {
            "opspec": lambda: silu(x),
            "launcher": _bare(silu_launcher, (x.shape[0], x.shape[1] // 2), x),
            "native": _bare(silu_launcher, (x.shape[0], x.shape[1] // 2), x, native=True),
            "entry": silu_launcher,
            "custom_op": lambda: silu_custom(x),
            "torch": lambda: F.silu(x[:, :8]) * x[:, 8:],
        },
        "GemmFwdOp": {
            "opspec": lambda: gemm(a, b),
            "launcher": _bare(gemm_launcher, (a.shape[0], b.shape[1]), a),
            "native": _bare(gemm_launcher, (a.shape[0], b.shape[1]), a, native=True),
            "entry": gemm_launcher,
            "custom_op": lambda: gemm_custom(a, b),
            "torch": lambda: torch.matmul(a, b),
        },
    }, {"SiluAndMulFwdOp": type(silu_entry).__name__, "GemmFwdOp": type(gemm_entry).__name__}


def _bare(entry_call, out_shape, like: torch.Tensor, native: bool = False):
    """The Triton launches `entry_call` makes, replayed as bare `kernel[grid](...)` calls
    (`native`: as prepared replays, Triton's native launcher called directly) after
    allocating an output like the op's; `entry_call` itself where it launches none (a
    torch reference kernel) or where a launch cannot be prepared."""
    from opspec.kernels.launch import prepare, recording

    entry_call()  # compile first, so the recorded call is a plain launch
    with recording() as launches:
        entry_call()
    if not launches:
        return entry_call
    if native:
        replays = []
        for kernel, grid, args, kwargs in launches:
            n = 0
            while n < len(args) and isinstance(args[n], torch.Tensor):
                n += 1
            prepared = prepare(n, kernel, grid, *args, **kwargs)
            if prepared is None:
                return entry_call
            replays.append((prepared, args[:n]))

        def replay():
            torch.empty(out_shape, dtype=like.dtype, device=like.device)
            for prepared, tensors in replays:
                prepared(*tensors)
        return replay

    def bare():
        torch.empty(out_shape, dtype=like.dtype, device=like.device)
        for kernel, grid, args, kwargs in launches:
            kernel[grid](*args, **kwargs)
    return bare


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall: perf_counter; thread: this thread's CPU time, which other "
                         "processes on a shared CPU do not inflate (host cost only)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    results = {}
    table, kernels = variants(device)
    for op, fns in table.items():
        for fn in fns.values():  # warm up: compile kernels, fill caches
            for _ in range(20):
                fn()
        samples = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, fn in fns.items():
                samples[k].append(_time(fn, args.calls, device, clock))
        med = {k: statistics.median(v) for k, v in samples.items()}
        results[op] = med
        print(f"{op} on {device} ({kernels[op]}): " + ", ".join(f"{k} {v:.2f} us" for k, v in med.items())
              + f"; opspec - launcher = {med['opspec'] - med['launcher']:+.2f} us"
              + f", opspec - native = {med['opspec'] - med['native']:+.2f} us"
              + f", opspec - entry = {med['opspec'] - med['entry']:+.2f} us")
    meta = {"device": str(device), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
            "calls": args.calls, "rounds": args.rounds, "clock": args.clock}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results_us": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
