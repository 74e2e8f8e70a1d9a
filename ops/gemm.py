"""GEMM ops."""

from __future__ import annotations

import torch

from opspec.kernels.gemm_impl import (
    GemmFwdInterface, GemmReferenceKernel, GemmTritonKernel, GemvTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["GemmFwdOp"]


class GemmFwdOp(Op):
    """`c = op(a) @ op(b)` (torch.matmul of two 2-D operands), each operand stored as
    written or transposed (`trans_a`, `trans_b`); float16 or bfloat16."""

    kernel_types = {"gemm_triton": GemmTritonKernel, "gemv_triton": GemvTritonKernel,
                    "gemm_reference": GemmReferenceKernel}
    interfaces = {"gemm": GemmFwdInterface}

    def __init__(self, trans_a: bool = False, trans_b: bool = False, *, target=None):
        self.trans_a = trans_a
        self.trans_b = trans_b
        super().__init__(target=target)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        trans_a, trans_b = self.trans_a, self.trans_b
        M, K = a.shape  # one shape read each: every read builds a torch.Size
        if trans_a:
            M, K = K, M
        N = b.shape[0 if trans_b else 1]
        out = a.new_empty((M, N))  # a's dtype and device; cheaper than torch.empty
        kernel = self.kernel_for_values("gemm", a.device,
                                        M, N, K, DTYPE_NAMES[a.dtype], trans_a, trans_b)
        return kernel.forward(a, b, out)
