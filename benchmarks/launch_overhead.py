"""Host time of one Triton launch: Triton's `kernel[grid](...)` against opspec's
`opspec.kernels.launch.launch`, on the very launches some ops make for tiny inputs.

    python benchmarks/launch_overhead.py [--calls 2000] [--rounds 9]

For each op, one call is made under `opspec.kernels.launch.recording()`; each recorded
launch is then replayed both ways, interleaved round by round (median round reported), and
the script says which path `launch` took (the cached fast one, or Triton's) and why not.
CUDA only.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from overhead import _time  # beside this script: the same timed loop


def _cases():
    from opspec.ops import GemmFwdOp, RMSNormFwdOp, SiluAndMulFwdOp, SoftmaxFwdOp
    dev = torch.device("cuda")
    h = torch.float16
    x = torch.randn(4, 16, dtype=h, device=dev)
    a = torch.randn(16, 16, dtype=h, device=dev)
    r = torch.randn(4, 64, dtype=h, device=dev)
    return {
        "SiluAndMulFwdOp": (SiluAndMulFwdOp(), (x,)),
        "GemmFwdOp": (GemmFwdOp(), (a, a)),
        "SoftmaxFwdOp": (SoftmaxFwdOp(-1), (r,)),
        "RMSNormFwdOp": (RMSNormFwdOp([64]), (r,)),
    }


def _path(kernel, grid, args, kwargs) -> str:
    """Which path `launch` takes for this launch now."""
    import opspec.kernels.launch as L
    if not L.fast_launch_enabled():
        return "triton (fast path disabled)"
    if type(kernel) is not L._JITFunction:
        return f"triton ({type(kernel).__name__} is not a JITFunction)"
    import triton
    device = triton.runtime.driver.active.get_current_device()
    caches = kernel.device_caches.get(device)
    if caches is None:
        return "triton (no binder yet)"
    _, key, held = L.lookup(kernel, device, caches[4], args, kwargs)
    if key is None:
        return "triton (unhashable specialization)"
    return "fast" if held is not None else f"triton (no cached kernel for {key})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    from opspec.kernels.launch import launch, recording
    for name, (op, inputs) in _cases().items():
        try:
            for _ in range(3):
                op(*inputs)
            with recording() as launches:
                op(*inputs)
        except Exception as exc:  # report and go on: one op's failure is not the run's
            print(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if not launches:
            print(f"{name}: its kernel does not launch through opspec.kernels.launch")
        for kernel, grid, a, kw in launches:
            fns = {"kernel[grid]": lambda: kernel[grid](*a, **kw),
                   "launch": lambda: launch(kernel, grid, *a, **kw)}
            for fn in fns.values():
                for _ in range(20):
                    fn()
            samples = {k: [] for k in fns}
            for _ in range(args.rounds):
                for k, fn in fns.items():
                    samples[k].append(_time(fn, args.calls, torch.device("cuda")))
            med = {k: statistics.median(v) for k, v in samples.items()}
            print(f"{name} {kernel.fn.__name__ if hasattr(kernel, 'fn') else kernel}: "
                  + ", ".join(f"{k} {v:.2f} us" for k, v in med.items())
                  + f"; path: {_path(kernel, grid, a, kw)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
