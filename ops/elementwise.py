"""Elementwise ops."""

from __future__ import annotations

import torch

from opspec.kernels.gelu_and_mul_impl import (
    GeluAndMulFwdInterface, GeluAndMulReferenceKernel, GeluAndMulTritonKernel,
)
from opspec.kernels.silu_and_mul_impl import (
    SiluAndMulFwdInterface, SiluAndMulReferenceKernel, SiluAndMulTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["GeluAndMulFwdOp", "SiluAndMulFwdOp"]


class SiluAndMulFwdOp(Op):
    """`silu(x[:, :N]) * x[:, N:]` for x of shape [M, 2N] (vLLM's silu_and_mul)."""

    kernel_types = {"silu_and_mul_triton": SiluAndMulTritonKernel,
                    "silu_and_mul_reference": SiluAndMulReferenceKernel}
    interfaces = {"silu_and_mul": SiluAndMulFwdInterface}

    def __init__(self, *, target=None):
        super().__init__(target=target)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        M, two_n = x.shape
        out = x.new_empty((M, two_n // 2))  # x's dtype and device; cheaper than torch.empty
        kernel = self.kernel_for_values("silu_and_mul", x.device, DTYPE_NAMES[x.dtype])
        return kernel.forward(x, out)


class GeluAndMulFwdOp(Op):
    """`gelu(x[:, :N], approximate) * x[:, N:]` for x of shape [M, 2N] (vLLM's GeluAndMul:
    gelu_and_mul, or gelu_tanh_and_mul with `approximate='tanh'`)."""

    kernel_types = {"gelu_and_mul_triton": GeluAndMulTritonKernel,
                    "gelu_and_mul_reference": GeluAndMulReferenceKernel}
    interfaces = {"gelu_and_mul": GeluAndMulFwdInterface}

    def __init__(self, approximate: str = "none", *, target=None):
        self.approximate = approximate
        super().__init__(target=target)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        M, two_n = x.shape
        out = x.new_empty((M, two_n // 2))
        kernel = self.kernel_for_values("gelu_and_mul", x.device,
                                        DTYPE_NAMES[x.dtype], self.approximate)
        return kernel.forward(x, out)
