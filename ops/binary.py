"""Broadcasting binary arithmetic: torch.add and torch.mul of two tensors."""

from __future__ import annotations

import torch

from opspec.kernels.binary import broadcast_shape
from opspec.kernels.binary_impl import (
    BinaryFwdInterface, BinaryReferenceKernel, BinaryTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["AddFwdOp", "MulFwdOp"]

_KERNELS = {"binary_triton": BinaryTritonKernel, "binary_reference": BinaryReferenceKernel}
_INTERFACES = {"binary": BinaryFwdInterface}


def _output(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    # The spec's output type: the broadcast shape, and torch's promotion (torch.result_type
    # gives the spec's let T on every call the checks accept, 0-d operands included).
    shape = broadcast_shape(input.shape, other.shape)
    return torch.empty(shape, dtype=torch.result_type(input, other), device=input.device)


class AddFwdOp(Op):
    """`input + alpha * other` (torch.add), broadcast, with torch's type promotion between
    two floating or two integer tensors."""

    kernel_types = _KERNELS
    interfaces = _INTERFACES

    def __init__(self, *, alpha: int | float = 1, target=None):
        self.alpha = alpha
        super().__init__(target=target)

    def forward(self, input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        out = _output(input, other)
        kernel = self.kernel_for_values("binary", input.device, "add", DTYPE_NAMES[input.dtype],
                                        DTYPE_NAMES[other.dtype], DTYPE_NAMES[out.dtype])
        return kernel.forward(input, other, out, self.alpha)


class MulFwdOp(Op):
    """`input * other` (torch.mul), broadcast, with torch's type promotion between two
    floating or two integer tensors."""

    kernel_types = _KERNELS
    interfaces = _INTERFACES

    def __init__(self, *, target=None):
        super().__init__(target=target)

    def forward(self, input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        out = _output(input, other)
        kernel = self.kernel_for_values("binary", input.device, "mul", DTYPE_NAMES[input.dtype],
                                        DTYPE_NAMES[other.dtype], DTYPE_NAMES[out.dtype])
        return kernel.forward(input, other, out, 1)
