"""Where the host time of one eager opspec call goes: each piece timed on its own.

`python benchmarks/profile_call.py [--device cuda]`: the SiluAndMul call on a tiny tensor,
split into the pieces `_run_call` performs, each timed in a loop of `--calls` iterations
(median of `--rounds`), so the overhead of `op(x)` over the kernel launch can be read off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _launch_pieces(entry, x, out) -> dict:
    """The Triton launch the entry makes, split up: the launch as Triton does it, as
    opspec.kernels.launch does it, and the pieces (Triton's own runtime internals, named per
    Triton 3.x; skipped where this Triton lays them out otherwise)."""
    import triton
    from opspec.kernels.launch import launch, recording

    with recording() as launches:
        entry.forward(x, out)
    if not launches:
        print("(the entry launched no Triton kernel through opspec.kernels.launch)")
        return {}
    kern, grid, args, kw = launches[0]
    pieces = {"kernel[grid](...) (Triton launch)": lambda: kern[grid](*args, **kw),
              "opspec.kernels.launch.launch(...)": lambda: launch(kern, grid, *args, **kw)}
    try:
        drv = triton.runtime.driver.active
        device = drv.get_current_device()
        compiled = kern[grid](*args, **kw)
        binder = kern.device_caches[device][4]
        bound, _, _ = binder(*args, **kw)
        vals = tuple(bound.values())
        stream = drv.get_current_stream(device)
        g = tuple(grid) + (1,) * (3 - len(grid))
        pieces.update({
            "driver get_current_device + stream": lambda: drv.get_current_stream(drv.get_current_device()),
            "binder (argument specialization)": lambda: binder(*args, **kw),
            "compiled.run (the C launcher alone)": lambda: compiled.run(
                *g, stream, compiled.function, compiled.packed_metadata, None, None, None, *vals),
        })
    except Exception as exc:  # a Triton without these internals: the two launches only
        print(f"(Triton launch internals not split: {type(exc).__name__}: {exc})")
    return pieces


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    from opspec.kernels.silu_and_mul_impl import SiluAndMulCall
    from opspec.ops import SiluAndMulFwdOp

    dev = torch.device(args.device)
    op = SiluAndMulFwdOp()
    x = torch.randn(4, 16, dtype=torch.float16, device=dev)
    y = op(x)
    br = op._branch_for((x,), None)
    ind, d, _ = br.code.call(op, x, None, br.ind)
    call = SiluAndMulCall("float16", device=dev)
    entry = op.kernel_for("silu_and_mul", call)
    out = torch.empty((4, 8), dtype=x.dtype, device=dev)
    pieces = {
        "op(x)": lambda: op(x),
        "torch.compiler.is_compiling()": torch.compiler.is_compiling,
        "_branch_for": lambda: op._branch_for((x,), None),
        "generated call checks": lambda: br.code.call(op, x, None, br.ind),
        "forward (alloc + call spec + kernel_for + launch)": lambda: op.forward(x),
        "torch.empty (output)": lambda: torch.empty((4, 8), dtype=x.dtype, device=dev),
        "SiluAndMulCall(...)": lambda: SiluAndMulCall("float16", device=x.device),
        "kernel_for (hit)": lambda: op.kernel_for("silu_and_mul", call),
        "entry.forward (launch)": lambda: entry.forward(x, out),
        "generated output checks": lambda: br.code.finish(op, y, x, None, ind, d),
        "x.device": lambda: x.device,
    }
    if dev.type == "cuda":
        pieces.update(_launch_pieces(entry, x, out))
    for name, fn in pieces.items():
        for _ in range(50):
            fn()
    res = {}
    for name, fn in pieces.items():
        samples = []
        for _ in range(args.rounds):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) / args.calls * 1e6)
        res[name] = statistics.median(samples)
        print(f"{name:52s} {res[name]:8.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
