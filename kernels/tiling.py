"""Host-side helpers the tiled Triton kernels share (GEMM, bmm, grouped and MoE GEMMs,
W4A16): the SM count, how far a kernel may address a tensor, whether Triton can prove
16-byte vectors for it, and tile shapes clipped to a small problem; and the grouped
("swizzled") program order their kernels walk tiles in.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, TypeVar

import torch
import triton
import triton.language as tl

__all__ = ["H200_SMS", "INT32_LIMIT", "aligned_rows", "as_multiple", "byte_aligned",
           "clip_tiles", "contiguous_copy", "element_extent", "grouped_tile", "pow2_dividing",
           "row_multiple", "sm_count", "vector_aligned"]

#: The H200's SM count: tables are written for it, and it stands in off CUDA (the
#: interpreter).
H200_SMS = 132
#: The largest int32 offset. A launcher whose offsets could pass it compiles its kernel with
#: int64 offsets (``USE_INT64``). Each kernel module binds it as its own ``_INT32_LIMIT``,
#: which a test lowers to force that path on small tensors.
INT32_LIMIT = 2**31 - 1

Config = TypeVar("Config", bound=NamedTuple)


@functools.lru_cache(maxsize=16)
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (read once); ``H200_SMS`` elsewhere."""
    if device.type != "cuda":
        return H200_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def element_extent(t: torch.Tensor) -> int:
    """Largest element offset a kernel may form for ``t`` (plus slack for a block)."""
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) + 4096


def vector_aligned(t: torch.Tensor) -> bool:
    """Whether Triton can prove 16-byte vectors for ``t``: a unit stride, every other
    stride (of a dimension longer than 1) a multiple of 16 (what Triton specialises on)
    and a 16-byte aligned base."""
    strides = t.stride()
    return (t.data_ptr() % 16 == 0 and 1 in strides
            and all(s == 1 or s % 16 == 0 or n == 1 for s, n in zip(strides, t.shape)))


def pow2_dividing(values, most: int) -> int:
    """The largest power of two up to ``most`` (a power of two) that divides every one of
    ``values`` (0 divides nothing out; a negative value counts by its magnitude)."""
    bits = 0
    for v in values:
        bits |= v       # the low bits of every value (two's complement: negatives too)
    m = most
    while m > 1 and bits % m:
        m //= 2
    return m


def row_multiple(element_size: int, *values: int) -> int:
    """The power of two, at most a 16-byte vector's elements, that divides every one of
    ``values`` (row lengths and strides, in elements; 0 divides nothing out), where Triton
    cannot see it itself; 1 where it can (every value a multiple of 16, which Triton
    specialises on) or where only 1 divides them all.

    A kernel that takes it as a constexpr rebuilds those values with :func:`as_multiple`,
    and the compiler then vectorises the row loads and stores that its own specialisation
    leaves element by element: rows of 1000 or 4100 elements, or views of rows 8 elements
    longer. (Compiled for sm_90, the LayerNorm of bfloat16 rows 4104 elements apart loads
    them as 32 16-bit words a thread at 128 registers; with the multiple, 4 16-byte vectors
    at 89, as for rows of 4096.) The base addresses are Triton's to check: a base that is
    not 16-byte aligned still gets element loads, correctly."""
    m = pow2_dividing(values, 16)
    return 1 if m == 16 else min(m, max(1, 16 // element_size))


@triton.jit
def as_multiple(value, M: tl.constexpr):
    """``value``, an integer the host checked to be a multiple of ``M`` (:func:`row_multiple`),
    rebuilt as one so that the compiler knows it; ``value`` itself where ``M`` is 1. The
    kernels call it under ``if ALIGN > 1:``: Triton's interpreter pays for every call of a
    jit function, even one that hands its argument back (the CPU tests of the softmax and
    norm kernels ran 18-33 % slower with the calls made at 1)."""
    if M > 1:
        return (value // M) * M
    else:
        return value


def byte_aligned(t: torch.Tensor) -> bool:
    """Whether ``t``'s rows (a unit innermost stride) start on 16-byte boundaries: its base
    and every other stride (of a dimension longer than 1) in bytes are multiples of 16 --
    what a library that checks the addresses themselves (cuBLAS) needs for its vector
    loads, whatever the rows' length in elements."""
    size = t.element_size()
    return (t.data_ptr() % 16 == 0 and t.dim() > 0 and t.stride(-1) == 1
            and all(s * size % 16 == 0 or n == 1 for s, n in zip(t.stride()[:-1], t.shape)))


def aligned_rows(t: torch.Tensor, *, bytes_only: bool = False) -> torch.Tensor:
    """``t``, or a contiguous copy of it where its rows (a unit innermost stride) lie where
    Triton can prove no 16-byte vectors (:func:`vector_aligned`: a view of longer rows, an
    odd offset) and a contiguous copy's would be (rows of a multiple of 16 elements). With
    ``bytes_only``, where the rows are not 16-byte aligned (:func:`byte_aligned`) and a
    copy's would be: the rule for cuBLAS.

    Why: the kernels read such rows element by element, and cuBLAS takes slower kernels
    for them. H200, bfloat16 (benchmarks/layout_probe.py, 2026-12-02), the 4096^3 GEMM with
    both operands views of rows 4 elements longer: 1158 us as views, 272 copied first by
    torch, 222 by :mod:`opspec.kernels.row_copy`, 185 on contiguous operands (cuBLAS on the
    views 544); cuBLAS's batched product of [32, 1024, 128] by [32, 128, 1024] on such views
    70.9 us, 39.2 on such copies, 28.3 on contiguous operands."""
    if t.dim() < 2 or t.stride(-1) != 1:
        return t
    if bytes_only:
        if t.shape[-1] * t.element_size() % 16 or byte_aligned(t):
            return t
    elif t.shape[-1] % 16 or vector_aligned(t):
        return t
    c = contiguous_copy(t)
    return t if c is None else c


def contiguous_copy(t: torch.Tensor) -> torch.Tensor | None:
    """A fresh contiguous copy of ``t`` (16-byte aligned, as the allocator's blocks are), or
    None where the device has no memory for it: the copies the launchers make for speed
    (:func:`aligned_rows`, the attention launcher's keys and values) are dropped then, and
    the kernel reads ``t`` as it is, slower, rather than the call failing. On CUDA, rows of
    unit stride are copied by :func:`opspec.kernels.row_copy.copy_rows` (vectors as wide
    as their strides allow; torch's copy of such a view goes element by element)."""
    try:
        if t.is_cuda:
            from opspec.kernels.row_copy import copy_rows   # (it imports this module)
            c = copy_rows(t)
            if c is not None:
                return c
        return t.clone(memory_format=torch.contiguous_format)
    except torch.cuda.OutOfMemoryError:
        return None


def clip_tiles(cfg: Config, M: int, N: int, K: int) -> Config:
    """``cfg`` (a tile configuration with ``block_m``, ``block_n``, ``block_k`` and
    ``num_warps``) with blocks larger than the power-of-two rounded problem shrunk to it;
    16 is tl.dot's minimum. Tiles smaller than 128 x 128 take at most 4 warps."""
    bm = min(cfg.block_m, max(16, triton.next_power_of_2(M)))
    bn = min(cfg.block_n, max(16, triton.next_power_of_2(N)))
    bk = min(cfg.block_k, max(16, triton.next_power_of_2(K)))
    if (bm, bn, bk) == (cfg.block_m, cfg.block_n, cfg.block_k):
        return cfg
    warps = cfg.num_warps if bm * bn >= 128 * 128 else min(cfg.num_warps, 4)
    return cfg._replace(block_m=bm, block_n=bn, block_k=bk, num_warps=warps)


@triton.jit
def grouped_tile(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """``(pid_m, pid_n)`` of the ``tile``-th program in grouped order: ``GROUP_M``
    consecutive programs walk down one column of tiles, so they share its panel of the
    right-hand operand in L2."""
    in_group = GROUP_M * num_n
    first_m = (tile // in_group) * GROUP_M
    group = min(num_m - first_m, GROUP_M)
    return first_m + ((tile % in_group) % group), (tile % in_group) // group
