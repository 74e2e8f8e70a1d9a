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

Layout of the work: the heads of all tokens, query and key alike, are ``T * (H + H_kv)``
rows of ``rotary_dim`` features, row ``(t, v)`` being query head ``v`` (``v < H``) or key
head ``v - H`` of token ``t``. A program rotates ``BR`` consecutive rows as a ``[BR,
rotary]`` tile: each row gathers its token's position and cos/sin (fp32 math; the rows of
one token share addresses, so a warp's load of them is one request), then its features.
Every program moves the same bytes whatever the head counts. The neox tile is two
contiguous half-row loads; the gptj tile is one contiguous row load split into (even, odd)
pairs in registers and joined back before one contiguous store. (The rows' accesses compile
to scalar ones, each row's pointer being a select of two: see the kernel.) Only the rotary
part of a head is read and written: the traffic is ``2 * T * (H + H_kv) * rotary_dim``
elements plus one cache row per token.
``BR`` and the warps come from the shape in plain Python (:func:`rope_plan`, no autotuning
at call time). Query and key share a launch when their features have one stride, else
each takes its own. Every launch is a dependent one where the device allows it
(:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import INT32_LIMIT, pow2_dividing

__all__ = [
    "rotary_embedding_reference",
    "rotary_embedding_triton",
    "rope_plan",
]

# -- the launch table (see rope_plan) ----------------------------------------------------------
#: _THREAD_BYTES: bytes of rotated features a thread holds (16 elements in 16-bit types, 8
#: in float32); _WARPS: warps of a program. H200, side by side (benchmarks/rope_probe.py,
#: 2026-11-30): 16 features a thread at 4 warps ran the Llama-3-8B 16k-token bf16 row at
#: 3.96 TB/s (85.7 us), 16 at 8 warps 3.94, 32 at 4 3.91, 8 at 4 or 8 warps 3.57-3.62; the
#: 4k-token fp32 row at 3.80 with 8 a thread (16: 3.77); DeepSeek-V3 MLA (64-wide rows,
#: gptj) at 3.78 (bf16 cache) and 3.97 (fp32 cache) with 16 a thread at 4 warps, against
#: 3.46 and 3.42 for the former layout, one program per token and block of query or key
#: heads, whose key programs moved a quarter (Llama) or a 128th (MLA) of a query program's
#: bytes. The partial-rotary rows (GPT-J's 64 of 256 features, Phi-2's 32 of 80) took 3-7 %
#: longer in the bench than with the former layout (14.1-14.4 against 13.6 us, 18.8-19.2
#: against 17.8).
_THREAD_BYTES = 32
_WARPS = 4
#: Enough programs to give every SM of an H200 (132) a few resident programs.
_TARGET_PROGRAMS = 4 * 132
_INT32_LIMIT = INT32_LIMIT

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
def _rope_rows_kernel(
    pos_ptr, q_ptr, k_ptr, cache_ptr,
    n_rows, V, H, half, max_position,
    stride_p, stride_qt, stride_qh, stride_kt, stride_kh, stride_d,
    stride_cp, stride_cr,
    BR: tl.constexpr, HALF: tl.constexpr, IS_NEOX: tl.constexpr, USE_INT64: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # Row (t, v) of the [T, V] head rows (V = H + H_kv) is query head v (v < H) or key head
    # v - H of token t; BR consecutive rows a program (see the module's docstring). The row
    # pointer, a select of two pointers, carries no alignment of its own: ROW_ALIGN (bytes,
    # the power of two up to 16 the host has proved to divide both bases and the token and
    # head strides) declares it, so the rows' loads and stores are 16-byte vectors in the
    # sm_90 build at 16 (bf16 with an fp32 cache: 64 -> 32 registers), 8-byte ones at 8,
    # and scalar at 1 or 2 (the cos/sin rows' are 16-byte either way). Timed on the H200
    # the 16-byte and scalar forms tie on contiguous rows (benchmarks/rope_probe.py,
    # 2026-12-01: Llama-3-8B 16k tokens 85.9 / 85.8 us, 70B 149.4 / 149.2, MLA 143.7 /
    # 144.1), but on rows 4 elements longer (8-byte starts) the scalar form ran 1.43x the
    # contiguous time (benchmarks/layout_probe.py, 2026-12-02).
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < n_rows
    if USE_INT64:
        rows = rows.to(tl.int64)
    tok = rows // V
    v = rows - tok * V
    base = tl.where(v < H, q_ptr + (tok * stride_qt + v * stride_qh),
                    k_ptr + (tok * stride_kt + (v - H) * stride_kh))
    if ROW_ALIGN > 1:
        base = tl.multiple_of(base, ROW_ALIGN)
    pos = tl.load(pos_ptr + tok * stride_p, mask=rmask, other=0).to(tl.int64)
    # A position outside the cache (undefined by the spec) reads row 0, never past the
    # cache, and turns its token by angle 0 (cos 1, sin 0).
    inside = (pos >= 0) & (pos < max_position)
    crow = cache_ptr + tl.where(inside, pos, 0) * stride_cp
    i = tl.arange(0, HALF)
    cmask = rmask[:, None] & (i < half)[None, :]
    cos = tl.load(crow[:, None] + i[None, :] * stride_cr, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(crow[:, None] + (i + half)[None, :] * stride_cr, mask=cmask,
                  other=0.0).to(tl.float32)
    cos = tl.where(inside[:, None], cos, 1.0)
    sin = tl.where(inside[:, None], sin, 0.0)
    row = base[:, None]
    if IS_NEOX:
        p1 = row + i[None, :] * stride_d
        p2 = row + (i + half)[None, :] * stride_d
        x1 = tl.load(p1, mask=cmask, other=0.0).to(tl.float32)
        x2 = tl.load(p2, mask=cmask, other=0.0).to(tl.float32)
        tl.store(p1, (x1 * cos - x2 * sin).to(q_ptr.dtype.element_ty), mask=cmask)
        tl.store(p2, (x2 * cos + x1 * sin).to(q_ptr.dtype.element_ty), mask=cmask)
    else:
        j = tl.arange(0, 2 * HALF)
        mask = rmask[:, None] & (j < 2 * half)[None, :]
        p = row + j[None, :] * stride_d
        x = tl.load(p, mask=mask, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (BR, HALF, 2)))
        y = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin)
        tl.store(p, tl.reshape(y, (BR, 2 * HALF)).to(q_ptr.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=4096)
def rope_plan(rows: int, rotary_dim: int, elem_size: int) -> tuple[int, int]:
    """The ``(BR, num_warps)`` of a launch over ``rows`` head rows (``T * (H + H_kv)``).

    A row loads ``2 * next_power_of_2(rotary_dim // 2)`` features; a thread holds
    ``_THREAD_BYTES`` of them (16 in 16-bit types, 8 in float32) and a program has
    ``_WARPS`` warps, which sets ``BR``. ``BR`` is halved while the grid would hold fewer
    than ``_TARGET_PROGRAMS`` programs (decode), the warps following it; rows wider than
    a program's threads can hold take one row a program and up to 16 warps.
    """
    width = 2 * _pow2(rotary_dim // 2)
    per_thread = max(1, _THREAD_BYTES // elem_size)
    br = max(1, _WARPS * 32 * per_thread // width)
    while br > 1 and _cdiv(rows, br) < _TARGET_PROGRAMS:
        br //= 2
    return br, max(1, min(16, br * width // (32 * per_thread)))


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

    br, num_warps = rope_plan(T * (H + H_kv), rotary_dim, query.element_size())
    _launch(positions, query, key, cos_sin_cache, is_neox, br, num_warps, T, (H, sq), (H_kv, sk))


def _row_align(x: torch.Tensor, heads: tuple[int, tuple[int, int, int]]) -> int:
    """The power of two, up to 16, of bytes that every head row of ``x`` starts on: it
    divides the base and the token and head strides in bytes (rows of no heads impose
    nothing: 16)."""
    n, (st, sh, _) = heads
    size = x.element_size()
    return 16 if n == 0 else pow2_dividing((x.data_ptr(), st * size, sh * size), 16)


def _launch(positions, query, key, cos_sin_cache, is_neox, br, num_warps, T, q_heads, k_heads,
            aligned=None):
    """Launch the rows kernel with ``br`` rows a program at ``num_warps`` (the probe,
    benchmarks/rope_probe.py, calls it with other values than rope_plan's); ``q_heads`` and
    ``k_heads``: ``(heads, strides)`` from _heads_layout. Query and key rows share one
    launch when their features have one stride, else each has its own. ``aligned``: the
    kernel's ROW_ALIGN in bytes (None: proved here from the bases and strides; the probe
    passes 1 to time the unhinted form)."""
    (H, sq), (H_kv, sk) = q_heads, k_heads
    if H_kv and sq[2] != sk[2]:
        for x, heads in ((query, q_heads), (key, k_heads)):
            if heads[0]:
                _launch(positions, x, x, cos_sin_cache, is_neox, br, num_warps, T, heads,
                        (0, heads[1]), aligned)
        return
    if aligned is None:
        aligned = min(_row_align(query, q_heads), _row_align(key, k_heads))
    max_position, rotary_dim = cos_sin_cache.shape
    half = rotary_dim // 2
    V = H + H_kv
    (sp,), sc = positions.stride(), cos_sin_cache.stride()
    span = 2 * _pow2(half) * abs(sq[2])
    use_int64 = max(_max_offset((T, H, rotary_dim), sq), _max_offset((T, H_kv, rotary_dim), sk),
                    (T - 1) * abs(sp), T * V) + span > _INT32_LIMIT
    launch(_rope_rows_kernel, (_cdiv(T * V, br),),
           positions, query, key, cos_sin_cache, T * V, V, H, half, max_position,
           sp, sq[0], sq[1], sk[0], sk[1], sq[2], sc[0], sc[1],
           BR=br, HALF=_pow2(half), IS_NEOX=bool(is_neox), USE_INT64=use_int64,
           ROW_ALIGN=int(aligned), num_warps=num_warps, **overlap_options(query.device))
