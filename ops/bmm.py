"""Batched matrix multiplication."""

from __future__ import annotations

import torch

from opspec.kernels.bmm_impl import BmmFwdInterface, BmmReferenceKernel, BmmTritonKernel
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["BmmFwdOp"]


class BmmFwdOp(Op):
    """`torch.bmm(input, mat2, out=out)`: `output[b] = input[b] @ mat2[b]` for input
    [B, M, K] and mat2 [B, K, N], float16, bfloat16 or float32.

    16-bit inputs accumulate in float32; float32 inputs keep float32 accuracy (torch's
    default, no plain TF32), computed on tensor cores as three TF32 products (3xTF32, about
    1e-6 relative to an IEEE float32 product). Transposed and sliced views are read through
    their strides, and an `out=` buffer of any strides is written in place (an `out` that
    shares storage with an input, as torch.bmm allows, is computed apart and copied in).
    """

    kernel_types = {"bmm_triton": BmmTritonKernel, "bmm_reference": BmmReferenceKernel}
    interfaces = {"bmm": BmmFwdInterface}

    def __init__(self, *, target=None):
        super().__init__(target=target)

    def forward(self, input: torch.Tensor, mat2: torch.Tensor,
                out: torch.Tensor | None = None) -> torch.Tensor:
        shape = (input.shape[0], input.shape[1], mat2.shape[2])
        kernel = self.kernel_for_values("bmm", input.device, DTYPE_NAMES[input.dtype],
                                        *shape, input.shape[2])
        if out is None:
            out = torch.empty(shape, dtype=input.dtype, device=input.device)
        elif _shares_storage(out, input) or _shares_storage(out, mat2):
            # torch.bmm accepts an `out` that is one of its inputs: the kernels read while
            # they write, so compute into a fresh tensor and copy.
            return out.copy_(kernel.forward(input, mat2, torch.empty(
                shape, dtype=input.dtype, device=input.device)))
        return kernel.forward(input, mat2, out)


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two non-empty tensors view one storage (a conservative overlap test)."""
    return (a.numel() > 0 and b.numel() > 0
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
