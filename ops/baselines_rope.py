"""Bench entries of the rope family: RotaryEmbeddingFwdOp.

The op writes `query` and `key` in place and returns them: the reference returns the new
`(query, key)`, and the baselines write the two inputs in place and return them, as the op
does.

The baselines are vLLM's `RotaryEmbedding.forward_native` (index_select of the cache rows,
then the neox or gptj rotation of the first rotary_dim features of each head) with the
products taken in float32, the op's precision, and the result copied back into the rotary
part of each head: `eager`, and `torch.compile(fullgraph=True)` of the same function.
forward_native itself multiplies in the activations' dtype; in bfloat16 that rounds each
product and, on the workloads' caches (random normal values, not unit cosines and sines),
misses the bfloat16 tolerance on a few elements of the large rows, which would make the
baseline fail verification rather than time it. vLLM's CUDA kernel
(`torch.ops._C.rotary_embedding`) rounds the same way, so it is not registered here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.kernels.rope import rotary_embedding_reference
from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]


def _reference(op: Any, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
               cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return rotary_embedding_reference(positions, query, key, cos_sin_cache,
                                      int(op.head_size), bool(op.is_neox))


def _rope_fn(op: Any) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    head_size, is_neox = int(op.head_size), bool(op.is_neox)

    def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                         cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rotary_dim = cos_sin_cache.shape[1]
        rows = cos_sin_cache.index_select(0, positions).float().unsqueeze(-2)
        cos, sin = rows.chunk(2, dim=-1)  # [T, 1, rotary_dim / 2] each
        for x in (query, key):
            heads = x if x.dim() == 3 else x.unflatten(-1, (-1, head_size))
            rot = heads[..., :rotary_dim]
            r = rot.float()
            if is_neox:
                x1, x2 = r.chunk(2, dim=-1)
            else:
                x1, x2 = r[..., 0::2], r[..., 1::2]
            o1 = x1 * cos - x2 * sin
            o2 = x2 * cos + x1 * sin
            if is_neox:
                rot.copy_(torch.cat((o1, o2), dim=-1))
            else:
                rot.copy_(torch.stack((o1, o2), dim=-1).flatten(-2))
        return query, key

    return rotary_embedding


BENCH = {
    "RotaryEmbeddingFwdOp": torch_entry(
        _reference, _rope_fn,
        "vLLM's forward_native rotation (index_select, chunk, rotate) with float32 products, "
        "copied back into the rotary part of query and key"),
}
