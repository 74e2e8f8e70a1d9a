"""What the L2 flush before each sample charges the timed call (CUDA only).

    python benchmarks/flush_probe.py

Times, with the bench harness's own timer (`opspec.ops.bench_harness.CudaTimer`), a few
memory-bound calls and a device-to-device copy of the same bytes (half read, half written,
as the bench's `vs copy` does) under each flush mode and without a flush:

* ``dirty``: the 256 MiB buffer written before each sample (what `triton.testing.do_bench`
  does): the L2 is left full of modified lines, and the timed call writes them back to
  HBM as it brings its own data in;
* ``clean``: the buffer read instead: none of the call's data in the L2, nothing to write
  back;
* ``none``: no flush (the call's inputs partly in the L2 from the previous sample).

A read-only call (a reduction) pays the write-back in full; a copy, whose own writes keep
HBM turning between reads and writes anyway, pays less of it. Not part of the package.
"""

from __future__ import annotations

import torch

import opspec.kernels.reduction as R
from opspec.kernels.softmax import softmax_triton
from opspec.ops.bench_harness import CudaTimer

FLUSH = 256 << 20
LEAD_US = 300.0


def median_us(timer: CudaTimer, fn, flush: bool, n: int = 40) -> float:
    for _ in range(3):
        fn()
    s = sorted(timer.samples(fn, n, flush=flush))
    return s[n // 2] * 1e6


def main() -> None:
    dev = torch.device("cuda")
    timers = {"dirty": CudaTimer(dev, FLUSH, LEAD_US, "dirty"),
              "clean": CudaTimer(dev, FLUSH, LEAD_US, "clean")}
    cases = []
    for shape, axes in (((16384, 4096), (0, 1)), ((16384, 4096), (0,)), ((8192, 7168), (1,)),
                        ((8192, 14336), (0, 1))):
        x = torch.randn(shape, device=dev).bfloat16()
        out = torch.empty([n for i, n in enumerate(shape) if i not in axes], device=dev,
                          dtype=torch.bfloat16)
        cases.append((f"sum {list(shape)} over {list(axes)} bf16",
                      lambda x=x, out=out, axes=axes: R.reduction_triton(x, out, axes, "sum"),
                      x.numel() * 2))
    s = torch.randn(4096, 32768, device=dev).bfloat16()
    so = torch.empty_like(s)
    cases.append(("softmax [4096, 32768] bf16", lambda: softmax_triton(s, -1, so), 4 * s.numel()))
    for label, fn, nbytes in cases:
        src = torch.empty(nbytes // 4, dtype=torch.bfloat16, device=dev)
        dst = torch.empty_like(src)
        for mode in ("dirty", "clean", "none"):
            timer = timers["clean" if mode == "none" else mode]
            t_op = median_us(timer, fn, mode != "none")
            t_cp = median_us(timer, lambda: dst.copy_(src), mode != "none")
            print(f"{label:34s} {mode:5s}  op {t_op:7.1f} us ({nbytes / t_op / 1e6:4.2f} TB/s)  "
                  f"copy {t_cp:7.1f} us  vs copy {t_cp / t_op:4.2f}", flush=True)


if __name__ == "__main__":
    main()
