"""Batched matrix multiplication."""

from __future__ import annotations

import torch

from opspec.kernels.bmm_impl import BmmCall, BmmFwdInterface, BmmReferenceKernel, BmmTritonKernel
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["BmmFwdOp"]


class BmmFwdOp(Op):
    """`torch.bmm(input, mat2, out=out)`: `output[b] = input[b] @ mat2[b]` for input
    [B, M, K] and mat2 [B, K, N], float16, bfloat16 or float32.

    16-bit inputs accumulate in float32; float32 inputs keep float32 accuracy (torch's
    default, no plain TF32), computed on tensor cores as three TF32 products (3xTF32,
    about 1e-6 relative to an IEEE float32 product). Transposed and sliced views are read through their strides, and
    an `out=` buffer of any strides is written in place (it must not overlap the inputs).
    """

    kernel_types = {"bmm_triton": BmmTritonKernel, "bmm_reference": BmmReferenceKernel}
    interfaces = {"bmm": BmmFwdInterface}

    def __init__(self, *, target=None):
        super().__init__(target=target)

    def forward(self, input: torch.Tensor, mat2: torch.Tensor,
                out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            out = torch.empty((input.shape[0], input.shape[1], mat2.shape[2]),
                              dtype=input.dtype, device=input.device)
        call = BmmCall(DTYPE_NAMES[input.dtype], device=input.device)
        return self.kernel_for("bmm", call).forward(input, mat2, out)
