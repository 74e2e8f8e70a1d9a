"""Grouped GEMM ops: torch._grouped_mm's 2-D x 3-D case, and the MoE expert MLP built on it."""

from __future__ import annotations

import torch

from opspec.kernels.grouped_gemm_impl import (
    GroupedGemmCall, GroupedGemmFwdInterface, GroupedGemmReferenceKernel, GroupedGemmTritonKernel,
)
from opspec.ops.elementwise import SiluAndMulFwdOp
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["GroupedGemmFwdOp", "MoeExpertMLPFwdOp"]


class GroupedGemmFwdOp(Op):
    """`out[rows of g] = op(a)[rows of g] @ op(b[g])`: the rows of `a` (tokens sorted by
    group) split into `G` consecutive groups of `batch_sizes[g]` rows, each multiplied by
    its own matrix; `torch._grouped_mm(op(a), op(b), offs=cumsum(batch_sizes))`.

    `a` is `[M, K]`, or `[K, M]` stored transposed (`transpose_a`); `b` is `[G, K, N]`, or
    `[G, N, K]` (`transpose_b`, the stacked nn.Linear weight layout). `batch_sizes` (int32
    or int64, on `a`'s device) must add up to M; a group may be empty. The sizes are not
    read on the host: the Triton kernel reads them on the device.
    """

    kernel_types = {"grouped_gemm_triton": GroupedGemmTritonKernel,
                    "grouped_gemm_reference": GroupedGemmReferenceKernel}
    interfaces = {"grouped_gemm": GroupedGemmFwdInterface}

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False, *, target=None):
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b
        super().__init__(target=target)

    def forward(self, a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        M = a.shape[1] if self.transpose_a else a.shape[0]
        N = b.shape[1] if self.transpose_b else b.shape[2]
        out = a.new_empty((M, N))
        call = GroupedGemmCall(DTYPE_NAMES[a.dtype], self.transpose_a, self.transpose_b,
                               device=a.device)
        return self.kernel_for("grouped_gemm", call).forward(a, b, batch_sizes, out)


class MoeExpertMLPFwdOp(Op):
    """The routed-expert MLP over tokens permuted by expert: for the rows of group g,
    `(silu(h[:, :I]) * h[:, I:]) @ w2[g]` with `h = x[rows of g] @ w13[g]`.

    `x` is `[M, K]`, `w13` `[G, K, 2I]` ([gate | up]), `w2` `[G, I, K]`, `batch_sizes` `[G]`
    (adding up to M). Three stages: `gate_up` and `down` are GroupedGemmFwdOp, `act` is
    SiluAndMulFwdOp; the intermediates ([M, 2I] and [M, I]) are rounded to x's dtype between
    stages.
    """

    delegate_types = {"gate_up": GroupedGemmFwdOp, "act": SiluAndMulFwdOp,
                      "down": GroupedGemmFwdOp}

    def __init__(self, *, target=None):
        super().__init__(target=target)
        self.gate_up = self.delegate_for("gate_up", None)
        self.act = self.delegate_for("act", None)
        self.down = self.delegate_for("down", None)

    def forward(self, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                batch_sizes: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate_up(x, w13, batch_sizes)), w2, batch_sizes)
