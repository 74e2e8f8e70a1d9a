"""Staggered starts for persistent grids whose programs alternate a read phase and a write
phase on rows of one length.

Such a grid (the looped softmax kernel: a row's statistics read from HBM, then the row
written) starts every program together, and since every row costs the same the programs stay
in step: all of them read, then all of them write, and HBM never sees the mix of reads and
writes a copy gives it. On an H200 the looped softmax of [4096, 128256] bfloat16 took the
read phase plus the write phase (270.5 + 312.3 us for 588.5), where a copy of the same bytes
took 495.5. Starting program ``p`` ``p % S`` steps late keeps the parts of the grid out of
phase for the rest of the launch: four steps of an eighth of a row gave 544.2 us (H200,
2026-12-02, side by side; kernels/softmax.py quotes the variants). The norms' rows kernel
on rows of 32768, one program an SM, gained 2 % from starting its first wave so (the later
programs start as earlier ones end, so the offsets fade); their persistent packed and
stream kernels, which load their next row while they write the current one, nothing.

:func:`stagger_start` is the kernel side (a spin on the SM's cycle counter, sm_70 and later),
:func:`stagger_cycles` the launcher side: the delay of one step in cycles, for a row of so
many bytes. Under Triton's interpreter and off CUDA there is no delay
(:func:`stagger_supported`): the spin has no effect on what a kernel computes, only on when
its programs start.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opspec.kernels.devices import TRITON_INTERPRETED

__all__ = ["SM_BYTES_PER_CYCLE", "stagger_cycles", "stagger_start", "stagger_supported"]

#: Bytes an SM moves a cycle when the whole GPU copies at its measured rate: H200, 4.24 TB/s
#: read + written over 132 SMs at 1.98 GHz is 16.2. Used only to turn a fraction of a row
#: into cycles, which need not be exact (a quarter of a row and a half measured within about
#: 1 %).
SM_BYTES_PER_CYCLE = 16

# Spin until the cycle counter has advanced by $1 cycles; $0 is a dummy result.
_SPIN = tl.constexpr("""{
.reg .u64 t0, t1, d;
.reg .pred p;
mov.u64 t0, %clock64;
SPIN:
mov.u64 t1, %clock64;
sub.u64 d, t1, t0;
setp.lt.u64 p, d, $1;
@p bra SPIN;
mov.u32 $0, 0;
}""")


@triton.jit
def stagger_start(delay, STEPS: tl.constexpr, first):
    """A kernel's first statement after its launch wait: program ``p < first`` spins
    ``(p % STEPS) * delay`` cycles before it begins (``STEPS <= 1``: no spin at all). A
    persistent grid passes its size; a grid of waves the programs of its first wave (the
    later ones start as those end, so they inherit the offsets)."""
    if STEPS > 1:
        pid = tl.program_id(0)
        step = pid % STEPS
        if (step > 0) & (pid < first):
            tl.inline_asm_elementwise(_SPIN, "=r,l", [delay.to(tl.int64) * step],
                                      dtype=tl.int32, is_pure=False, pack=1)


def stagger_supported(device: torch.device) -> bool:
    """Whether a launch on `device` spins: a CUDA device, not Triton's interpreter."""
    return device.type == "cuda" and not TRITON_INTERPRETED


def stagger_cycles(row_bytes: int, fraction: float) -> int:
    """The delay of one step, in cycles: `fraction` of the time an SM takes to move
    `row_bytes` (a row read and written) at its share of the copy rate."""
    return max(0, round(fraction * row_bytes / SM_BYTES_PER_CYCLE))

