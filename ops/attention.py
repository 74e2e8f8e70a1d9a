"""Attention ops: grouped-query softmax attention, forward, dense (SDPA) and varlen
(flash-attn)."""

from __future__ import annotations

import torch

from opspec.kernels.attention_impl import (
    AttentionCall, AttentionDenseFwdInterface, AttentionDenseReferenceKernel,
    AttentionDenseTritonKernel, AttentionVarlenFwdInterface, AttentionVarlenReferenceKernel,
    AttentionVarlenTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["GroupedQueryAttentionDenseFwdOp", "GroupedQueryAttentionVarlenFwdOp"]


class GroupedQueryAttentionDenseFwdOp(Op):
    """`torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal,
    scale=scale, enable_gqa=True)`: q [B, H, S_q, D], k and v [B, H_kv, S_kv, D] ->
    [B, H, S_q, D]. The causal mask is top-left aligned (query i sees keys 0..i), as SDPA's.
    """

    kernel_types = {"attention_dense_triton": AttentionDenseTritonKernel,
                    "attention_dense_reference": AttentionDenseReferenceKernel}
    interfaces = {"attention_dense": AttentionDenseFwdInterface}

    def __init__(self, is_causal: bool = False, scale: float | None = None, *, target=None):
        self.is_causal = is_causal
        self.scale = scale
        super().__init__(target=target)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = q.new_empty(q.shape)
        call = AttentionCall(DTYPE_NAMES[q.dtype], q.shape[-1], bool(self.is_causal),
                             device=q.device)
        return self.kernel_for("attention_dense", call).forward(q, k, v, out, self.scale)


class GroupedQueryAttentionVarlenFwdOp(Op):
    """flash-attn's `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
    max_seqlen_q, max_seqlen_k, softmax_scale=softmax_scale, causal=causal)`, the output
    only: packed q [total_q, H, D], k and v [total_k, H_kv, D], int32 offsets [B + 1] ->
    [total_q, H, D]. The causal mask is bottom-right aligned (flash-attn >= 2.1); a query
    row that sees no key is zero. The offsets are not read on the host.
    """

    kernel_types = {"attention_varlen_triton": AttentionVarlenTritonKernel,
                    "attention_varlen_reference": AttentionVarlenReferenceKernel}
    interfaces = {"attention_varlen": AttentionVarlenFwdInterface}

    def __init__(self, max_seqlen_q: int, max_seqlen_k: int,
                 softmax_scale: float | None = None, causal: bool = False, *, target=None):
        self.max_seqlen_q = max_seqlen_q
        self.max_seqlen_k = max_seqlen_k
        self.softmax_scale = softmax_scale
        self.causal = causal
        super().__init__(target=target)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor) -> torch.Tensor:
        # every row lies in a sequence (the offsets end at total_q): the kernel writes all
        out = q.new_empty(q.shape)
        call = AttentionCall(DTYPE_NAMES[q.dtype], q.shape[-1], bool(self.causal),
                             device=q.device)
        return self.kernel_for("attention_varlen", call).forward(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(self.max_seqlen_q), out,
            self.softmax_scale, int(self.max_seqlen_k))


def varlen_roofline(call) -> tuple[int, int]:
    """GroupedQueryAttentionVarlenFwdOp's (flops, bytes): 4 * D flops per visible (query,
    key) pair and head, summed over the sequences (bottom-right causal mask); every tensor
    moved once."""
    total_q, H, D = call.tensors["q"].shape
    cq = call.metadata_values("cu_seqlens_q")
    ck = call.metadata_values("cu_seqlens_k")
    causal = bool(call.indices["causal"])
    pairs = 0
    for b in range(len(cq) - 1):
        lq, lk = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        if not causal:
            pairs += lq * lk
            continue
        # query i sees min(lk, max(0, i + lk - lq + 1)) keys
        first = max(0, lq - lk)             # rows before this see nothing
        full = max(0, lq - first)           # rows that see something, i = first..lq-1
        # row i sees i + lk - lq + 1 keys (<= lk since i <= lq - 1)
        lo = first + lk - lq + 1
        pairs += full * (lo + (lo + full - 1)) // 2
    flops = 4 * H * D * pairs
    moved = sum(call.bytes(n) for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k",
                                        "output"))
    return flops, moved
