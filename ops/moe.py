"""Mixture-of-experts ops."""

from __future__ import annotations

import torch

from opspec.kernels.moe_impl import (
    MoeContiguousTritonKernel, MoeGroupedGemmCall, MoeGroupedGemmFwdInterface,
    MoeGroupedGemmReferenceKernel, MoeMaskedTritonKernel,
)
from opspec.ops.moe_layout import Contiguous, Masked, as_layout
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["MoeGroupedGemmFwdOp"]


class MoeGroupedGemmFwdOp(Op):
    """The expert GEMM of an MoE layer over tokens permuted into expert order:
    `y[r] = act(x[r] @ w[e(r)]^T)` with `w: [E, N, K]` (DeepGEMM's m-grouped contiguous
    and masked GEMMs, vLLM's fused_moe kernel).

    `layout` (`opspec.ops.moe_layout.Contiguous` or `Masked`) says how rows belong to
    experts and what `metadata` holds; `activation='silu_and_mul'` fuses vLLM's
    silu_and_mul (w's rows are [gate | up], the output has `N // 2` columns). Rows of no
    expert (padding, rows past `masked_m`) come out 0. `out=` writes into the caller's
    buffer and returns it.
    """

    kernel_types = {"moe_contiguous_triton": MoeContiguousTritonKernel,
                    "moe_masked_triton": MoeMaskedTritonKernel,
                    "moe_grouped_gemm_reference": MoeGroupedGemmReferenceKernel}
    interfaces = {"moe_grouped_gemm": MoeGroupedGemmFwdInterface}

    def __init__(self, layout: Contiguous | Masked, *, activation: str = "none", target=None):
        self.layout = layout
        self.activation = activation
        super().__init__(target=target)
        # Checked against the spec above; one class per constructor from here on.
        self._layout = as_layout(layout)

    def forward(self, x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor,
                out: torch.Tensor | None = None) -> torch.Tensor:
        lay = self._layout
        E, N, K = w.shape
        n_out = N // 2 if self.activation == "silu_and_mul" else N
        if out is None:
            out = torch.empty((*x.shape[:-1], n_out), dtype=x.dtype, device=x.device)
        if lay.kind == "masked":
            call = MoeGroupedGemmCall("masked", "", 1, lay.max_m, E, N, K,
                                      DTYPE_NAMES[x.dtype], self.activation, device=x.device)
        else:
            call = MoeGroupedGemmCall("contiguous", lay.metadata_kind, lay.alignment, 0, E, N,
                                      K, DTYPE_NAMES[x.dtype], self.activation, device=x.device)
        return self.kernel_for("moe_grouped_gemm", call).forward(x, w, metadata, out)
