"""Rotary position embedding ops."""

from __future__ import annotations

import torch

from opspec.kernels.rope_impl import (
    RotaryEmbeddingFwdInterface, RotaryEmbeddingReferenceKernel,
    RotaryEmbeddingTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["RotaryEmbeddingFwdOp"]


class RotaryEmbeddingFwdOp(Op):
    """vLLM's `rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)`:
    query and key rotated IN PLACE by the cos/sin row of each token's position, and returned
    (as vLLM's `RotaryEmbedding.forward` returns them).

    `is_neox` picks the pairing (neox: feature i with i + rotary_dim/2; gptj: 2i with 2i+1);
    `layout` says how query and key come: `'flat'` as `[T, H * head_size]` (vLLM's usual
    form), `'heads'` as `[T, H, head_size]`. Only the first `rotary_dim`
    (`cos_sin_cache.shape[1]`) features of each head turn.
    """

    kernel_types = {"rotary_embedding_triton": RotaryEmbeddingTritonKernel,
                    "rotary_embedding_reference": RotaryEmbeddingReferenceKernel}
    interfaces = {"rotary_embedding": RotaryEmbeddingFwdInterface}

    def __init__(self, head_size: int, is_neox: bool, *, layout: str = "flat", target=None):
        self.head_size = head_size
        self.is_neox = is_neox
        self.layout = layout
        super().__init__(target=target)

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kernel = self.kernel_for_values("rotary_embedding", query.device,
                                        DTYPE_NAMES[query.dtype], DTYPE_NAMES[cos_sin_cache.dtype],
                                        self.head_size, self.is_neox)
        kernel.forward(positions, query, key, cos_sin_cache)
        return query, key
