"""Rotary position embedding, in place, as vLLM's ``rotary_embedding``.

``query`` (``[T, H * head_size]`` or ``[T, H, head_size]``) and ``key`` (the same with
``H_kv`` heads) are rotated in place by the angles of each token's position:
``cos_sin_cache[positions[t]]`` holds ``rotary_dim / 2`` cosines then as many sines.
Only the first ``rotary_dim`` features of each head turn; the rest of the head is left as
it is. Two pairings of the rotated features:

* neox (``is_neox=True``, HF ``rotate_half``): feature ``i`` pairs with ``i + rotary_dim/2``;
* gptj (``is_neox=False``, HF GPT-J ``rotate_every_two``): feature ``2i`` pairs with ``2i+1``.

Pair ``(x1, x2)`` with angle ``i`` becomes ``(x1 cos - x2 sin, x2 cos + x1 sin)``.

Two plain functions; the dispatch classes are built elsewhere.

* :func:`rotary_embedding_reference` -- the torch reference (fp32 math, or the input's
  precision when wider), returning new tensors.
* :func:`rotary_embedding_triton` -- a memory-bound Triton kernel writing the inputs in place.

Layout of the work: a 2-D grid ``(T, nq + nk)``: program ``(t, b)`` loads token ``t``'s
position and its cos/sin row once (fp32), then rotates block ``b`` of ``BLOCK_HQ`` query
heads (``b < nq``) or block ``b - nq`` of ``BLOCK_HK`` key heads, as a ``[heads, rotary]``
tile. The neox tile is two contiguous half-row loads; the gptj tile is one contiguous
row load split into (even, odd) pairs in registers and joined back before one contiguous
store, so both pairings keep vectorised 16-byte accesses. Only the rotary part of a head
is read and written: the traffic is ``2 * T * (H + H_kv) * rotary_dim`` elements plus one
cache row per token. Block sizes and warps are picked from the shape in plain Python (no
autotuning at call time): a tile of at most 4096 elements, halved while the grid would
hold fewer than ``4 * 132`` programs (decode), 8 elements per thread and operand.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch

__all__ = [
    "rotary_embedding_reference",
    "rotary_embedding_triton",
    "rope_blocks",
]

# Enough programs to give every SM of an H200 (132) a few resident programs.
_TARGET_PROGRAMS = 4 * 132
# Elements of one [heads, rotary] tile: 8 KiB of bf16 read and written per program.
_MAX_TILE = 4096
_INT32_LIMIT = 2**31 - 1

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1); plain Python, as `triton.cdiv` and
    `triton.next_power_of_2` cost microseconds per host call."""
    return 1 << max(n - 1, 0).bit_length()


def _heads_view(x: torch.Tensor, head_size: int) -> torch.Tensor:
    """``x`` as ``[T, heads, head_size]``: a view of ``[T, heads * head_size]`` (no copy,
    whatever the strides: only the last axis is split)."""
    if x.dim() == 3:
        return x
    if x.dim() != 2 or x.shape[1] % head_size:
        raise ValueError(
            f"expected [T, heads * {head_size}] or [T, heads, {head_size}], got {list(x.shape)}")
    return x.unflatten(1, (x.shape[1] // head_size, head_size))


def rotary_embedding_reference(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                               cos_sin_cache: torch.Tensor, head_size: int, is_neox: bool
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """New tensors holding ``query`` and ``key`` rotated (HF ``apply_rotary_pos_emb``
    semantics), in the inputs' shapes and dtypes; the math runs in float32, or in the
    inputs' precision when that is wider (float64)."""
    rotary_dim = cos_sin_cache.shape[1]
    half = rotary_dim // 2
    compute = torch.promote_types(torch.promote_types(query.dtype, cos_sin_cache.dtype),
                                  torch.float32)
    rows = cos_sin_cache.index_select(0, positions.reshape(-1)).to(compute)
    cos = rows[:, :half].unsqueeze(1)  # [T, 1, half]: broadcast over heads
    sin = rows[:, half:rotary_dim].unsqueeze(1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        h = _heads_view(x, head_size).to(compute)
        rot, rest = h[..., :rotary_dim], h[..., rotary_dim:]
        if is_neox:
            # HF: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin)
            x1, x2 = rot[..., :half], rot[..., half:]
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            # GPT-J: features (2i, 2i + 1) turn by angle i
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        return torch.cat((out, rest), dim=-1).to(x.dtype).reshape(x.shape)

    return rotate(query), rotate(key)


@triton.jit
def _rotate_heads(x_ptr, tok_off, head0, n_heads, stride_h, stride_d, cos, sin, half,
                  BLOCK_H: tl.constexpr, HALF: tl.constexpr, IS_NEOX: tl.constexpr,
                  USE_INT64: tl.constexpr):
    """Rotate heads [head0, head0 + BLOCK_H) of one token in place; `cos`/`sin` are the
    token's [HALF] angles in fp32 (zero past `half`)."""
    heads = head0 + tl.arange(0, BLOCK_H)
    hmask = heads < n_heads
    if USE_INT64:
        heads = heads.to(tl.int64)
    row = x_ptr + tok_off + heads[:, None] * stride_h
    c = cos[None, :]
    s = sin[None, :]
    if IS_NEOX:
        i = tl.arange(0, HALF)
        mask = hmask[:, None] & (i < half)[None, :]
        p1 = row + i[None, :] * stride_d
        p2 = row + (i + half)[None, :] * stride_d
        x1 = tl.load(p1, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(p2, mask=mask, other=0.0).to(tl.float32)
        tl.store(p1, (x1 * c - x2 * s).to(x_ptr.dtype.element_ty), mask=mask)
        tl.store(p2, (x2 * c + x1 * s).to(x_ptr.dtype.element_ty), mask=mask)
    else:
        j = tl.arange(0, 2 * HALF)
        mask = hmask[:, None] & (j < 2 * half)[None, :]
        p = row + j[None, :] * stride_d
        x = tl.load(p, mask=mask, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (BLOCK_H, HALF, 2)))
        y = tl.join(x1 * c - x2 * s, x2 * c + x1 * s)
        tl.store(p, tl.reshape(y, (BLOCK_H, 2 * HALF)).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    pos_ptr, q_ptr, k_ptr, cache_ptr,
    n_q_heads, n_k_heads, n_q_blocks, half, max_position,
    stride_p,
    stride_qt, stride_qh, stride_qd,
    stride_kt, stride_kh, stride_kd,
    stride_cp, stride_cr,
    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, HALF: tl.constexpr,
    IS_NEOX: tl.constexpr, USE_INT64: tl.constexpr,
):
    tok = tl.program_id(0)
    blk = tl.program_id(1)
    if USE_INT64:
        tok = tok.to(tl.int64)
    pos = tl.load(pos_ptr + tok * stride_p).to(tl.int64)
    i = tl.arange(0, HALF)
    # A position outside the cache never reads past it: it reads row 0 (the launcher
    # returns early on an empty cache) and turns by angle 0 (cos 1, sin 0) instead; the
    # spec leaves such a call undefined. (Loading the heads before the position, so that
    # their loads do not wait on it, ran 4-9 % slower on the H200's bf16 rows; masking the
    # cache loads by the position's range instead of selecting after them, -1 to +12 % a
    # row in another run: neither kept.)
    inside = (pos >= 0) & (pos < max_position)
    crow = cache_ptr + tl.where(inside, pos, 0) * stride_cp
    cmask = i < half
    cos = tl.load(crow + i * stride_cr, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(crow + (i + half) * stride_cr, mask=cmask, other=0.0).to(tl.float32)
    cos = tl.where(inside, cos, 1.0)
    sin = tl.where(inside, sin, 0.0)
    if blk < n_q_blocks:
        _rotate_heads(q_ptr, tok * stride_qt, blk * BLOCK_HQ, n_q_heads, stride_qh, stride_qd,
                      cos, sin, half, BLOCK_HQ, HALF, IS_NEOX, USE_INT64)
    else:
        _rotate_heads(k_ptr, tok * stride_kt, (blk - n_q_blocks) * BLOCK_HK, n_k_heads,
                      stride_kh, stride_kd, cos, sin, half, BLOCK_HK, HALF, IS_NEOX, USE_INT64)


@functools.lru_cache(maxsize=4096)
def rope_blocks(T: int, H: int, H_kv: int, rotary_dim: int) -> tuple[int, int, int]:
    """The ``(BLOCK_HQ, BLOCK_HK, num_warps)`` the launcher uses.

    A tile is ``[BLOCK_H, 2 * HALF]`` with ``HALF = next_power_of_2(rotary_dim // 2)``; the
    query block takes every head up to a ``4096``-element tile, and is halved while the grid
    (``T`` times the query and key blocks) would hold fewer than ``4 * 132`` programs; the
    key block is the query block capped by the key heads. ``num_warps`` gives each thread
    about 16 elements of the query tile (one 16-byte vector per half in fp16/bf16).
    """
    width = 2 * _pow2(rotary_dim // 2)
    bq = min(_pow2(H), max(1, _MAX_TILE // width))

    def programs(b: int) -> int:
        return T * (_cdiv(H, b) + _cdiv(H_kv, min(b, _pow2(H_kv))))

    while bq > 1 and programs(bq) < _TARGET_PROGRAMS:
        bq //= 2
    bk = min(bq, _pow2(H_kv))
    num_warps = max(1, min(8, bq * width // 512))
    return bq, bk, num_warps


def _heads_layout(x: torch.Tensor, head_size: int) -> tuple[int, int, tuple[int, int, int]]:
    """``(T, heads, (token, head, feature) strides)`` of ``[T, heads * head_size]`` or
    ``[T, heads, head_size]``, without building a view (the launch stays cheap on the host)."""
    shape, strides = x.shape, x.stride()
    if len(shape) == 2 and shape[1] % head_size == 0:
        return shape[0], shape[1] // head_size, (strides[0], head_size * strides[1], strides[1])
    if len(shape) == 3 and shape[2] == head_size:
        return shape[0], shape[1], strides
    raise ValueError(
        f"expected [T, heads * {head_size}] or [T, heads, {head_size}], got {list(shape)}")


def _max_offset(shape, strides) -> int:
    return sum((n - 1) * abs(s) for n, s in zip(shape, strides) if n > 0)


def rotary_embedding_triton(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                            cos_sin_cache: torch.Tensor, head_size: int, is_neox: bool) -> None:
    """Rotate ``query`` and ``key`` in place; returns nothing.

    ``positions``: ``[T]`` integers in ``[0, max_position)`` (any stride; a position out of
    range turns its token by angle 0 and reads nothing outside the cache). ``query``:
    ``[T, H * head_size]`` or ``[T, H, head_size]``, ``key`` the same form with ``H_kv``
    heads, both fp16, bf16 or fp32 of one dtype, any strides (views of a fused qkv tensor are
    the usual case; the fast case has a unit feature stride). ``cos_sin_cache``:
    ``[max_position, rotary_dim]``, fp32 or the activations' dtype, ``rotary_dim`` even and at
    most ``head_size``. fp32 math. Nothing is launched when there is nothing to rotate. No
    allocation, no host sync.
    """
    if query.dtype != key.dtype or query.dtype not in _SUPPORTED:
        raise TypeError(f"query and key must share a dtype in {_SUPPORTED}, got "
                        f"{query.dtype}, {key.dtype}")
    if cos_sin_cache.dtype not in _SUPPORTED:
        raise TypeError(f"cos_sin_cache must have a dtype in {_SUPPORTED}, "
                        f"got {cos_sin_cache.dtype}")
    if cos_sin_cache.dim() != 2:
        raise ValueError("cos_sin_cache must be [max_position, rotary_dim], "
                         f"got {list(cos_sin_cache.shape)}")
    max_position, rotary_dim = cos_sin_cache.shape
    if rotary_dim % 2 or rotary_dim > head_size:
        raise ValueError(f"rotary_dim (cos_sin_cache.shape[1]) must be even and at most "
                         f"head_size {head_size}, got {rotary_dim}")
    T, H, sq = _heads_layout(query, head_size)
    T_k, H_kv, sk = _heads_layout(key, head_size)
    if positions.dim() != 1 or positions.shape[0] != T or T_k != T:
        raise ValueError(f"positions, query and key must have T = {T} tokens, got "
                         f"{list(positions.shape)}, {list(query.shape)}, {list(key.shape)}")
    half = rotary_dim // 2
    # An empty cache turns every position by angle 0: nothing to do (and no row to read).
    if T == 0 or half == 0 or H + H_kv == 0 or max_position == 0:
        return

    bq, bk, num_warps = rope_blocks(T, H, H_kv, rotary_dim)
    n_q_blocks = _cdiv(H, bq)
    n_k_blocks = _cdiv(H_kv, bk)
    (sp,), sc = positions.stride(), cos_sin_cache.stride()
    use_int64 = max(_max_offset((T, H, rotary_dim), sq), _max_offset((T, H_kv, rotary_dim), sk),
                    (T - 1) * abs(sp)) + _MAX_TILE > _INT32_LIMIT
    launch(_rope_kernel, (T, n_q_blocks + n_k_blocks),
        positions, query, key, cos_sin_cache,
        H, H_kv, n_q_blocks, half, max_position,
        sp, sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sc[0], sc[1],
        BLOCK_HQ=bq, BLOCK_HK=bk, HALF=_pow2(half),
        IS_NEOX=bool(is_neox), USE_INT64=use_int64,
        num_warps=num_warps,
    )
