"""Broadcasting binary arithmetic: ``out = a + alpha * b`` (add) and ``out = a * b`` (mul).

Plain functions; the dispatch classes are in :mod:`opspec.kernels.binary_impl`.

* :func:`binary_reference` -- the torch reference (math in the compute dtype, cast back).
* :func:`binary_triton` -- one Triton kernel for both ops, writing into a contiguous ``out``.
* :func:`broadcast_geometry` -- the collapsed iteration space the kernel walks.

Semantics follow ``torch.add`` / ``torch.mul`` for two inputs of one category (floating or
integer): the inputs broadcast to ``out``'s shape; each is converted to ``out``'s dtype,
as torch's TensorIterator does (exact for every operand except a 0-d one of a wider dtype:
``fp16[N] + fp64[]`` is float16 in torch, the 0-d operand rounded to float16 first), then
to the *compute dtype* of ``out`` (float32 for float16 / bfloat16 / float32 results,
float64 for float64, int32 for integer results of at most 32 bits, int64 for int64); the
arithmetic runs there and the result is cast to ``out``'s dtype once.  For integers,
truncating a wider two's complement result gives exactly the wrap-around of the narrow
type, as torch computes it.

Layout of the work.  ``out`` is contiguous; each input gets its strides over ``out``'s
axes (0 on an axis it is broadcast along).  Axes of size 1 are dropped and neighbouring
axes merged wherever all operands stay affine over the pair, so a same-shape contiguous
call becomes one flat axis, ``[T, H] + [H]`` becomes ``[T, H]`` with strides ``(H, 1)``
and ``(0, 1)``, and ``[B, H, S, S] + [B, 1, S, S]`` becomes ``[B, H, S*S]``.  The last
merged axis (length ``N``) is the *column* axis; all the others together are the ``R``
*rows*.  A program takes a tile of ``BLOCK_R`` rows by ``BLOCK_C`` columns: the row
offsets of each input come from a div/mod per row (never per element), the columns are a
contiguous ``arange``, so unit-stride columns load as 16-byte vectors; an operand that is
constant along the columns (``[T, H] * [T, 1]``, a 0-d operand) is loaded once per row
and broadcast in registers.  Up to :data:`MAX_OUTER` row axes are handled by one launch;
more (which needs more than five axes that cannot merge) are split in Python over the
leading axis.

A same-shape call (one flat axis, unit strides, or a 0-d operand) takes a 1-D kernel
instead: tiles of consecutive elements, no row arithmetic, and no mask on a tile that lies
inside the output (only the last one may be masked).

How the work is cut (elements a program, warps, a persistent grid, cache hints) is a
:class:`~opspec.kernels.activation.StreamConfig` read from :data:`BINARY_TABLE` by the
largest element size and the element count (see the table block). Nothing is autotuned
at call time, and the launches of a call layout (shapes, strides, element sizes) are
planned once and cached. Every launch is a dependent one where the device allows it
(:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass
from typing import Sequence

import torch
import triton
import triton.language as tl

from opspec.kernels.activation import StreamConfig, _cdiv, _pow2, pick_config, stream_grid
from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple

__all__ = [
    "BINARY_OPS",
    "BINARY_TABLE",
    "COMPUTE_DTYPES",
    "MAX_OUTER",
    "SUPPORTED_DTYPES",
    "binary_blocks",
    "binary_config",
    "binary_reference",
    "binary_triton",
    "broadcast_geometry",
    "broadcast_shape",
    "compute_dtype",
]

BINARY_OPS = ("add", "mul")

SUPPORTED_DTYPES = (
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
)

#: Row axes one launch handles; deeper iteration spaces are split over the leading axis.
MAX_OUTER = 4

_INT32_LIMIT = INT32_LIMIT
_MIN_BLOCK_C = 128

# ---- the configuration table (one row per element size) -----------------------------------
# Set from benchmarks/elementwise_sweep.py on an H200: each sweep row prints its best
# variant, which goes into the row below for its largest element size (and, where a row
# needs it, a new row with a largest element count in front of it). Rows: (element
# bytes, largest output element count or None, StreamConfig); the first fit wins. The
# element size is the largest of a, b and out; `block` is elements a program (a 2-D
# tile is split into rows x columns by binary_blocks).
#
# Why these defaults (opspec bench on an H200, L2 flushed, before this table existed):
# * One 16-byte vector per operand and thread on 4 warps (1024 elements of 2 bytes), the
#   shape of both torch's eager kernel (128 threads, one vector each) and torch.compile's
#   (1024 elements, 4 warps). The old tile was 8192 bytes on 8 warps, two vectors per
#   operand, always masked, and it was 1.5-3 % behind both on every same-shape row (Add
#   [4096, 4096] bf16 29.9 us against 29.1; Mul [4096, 14336] 87.0 against 85.7; fp32
#   [14336, 4096] 168.1 against 165.0) and 3-6 % behind compile on the broadcast rows
#   (mask [4, 32, 1024, 1024] 138.0 against 130.9; [8192, 4096] * [8192, 1] fp32 70.2
#   against 67.9). Two loads (a and b) are in flight per thread either way.
# * fp32: 1024 elements too (two vectors per operand), compile's choice, which matched or
#   beat eager's one vector on the fp32 rows (165.3 vs 165.0, 82.6 vs 126 mixed); 8-byte
#   elements the same 4 KB per operand, 1-byte ones one vector.
# * The same at decode sizes: the old tile shrank to 512 elements on 2 warps (or 256 on
#   1) to reach 528 programs, and was 0.2 us behind compile on Add [32, 4608] + [4608]
#   (4.5 against 4.3) and Mul [7168] * [64, 7168] (5.0 against 4.8): every program is
#   resident at once at these sizes, so smaller programs buy nothing but block launches.
# * evict_last on a broadcast operand (a bias, a mask, a norm weight: re-read by other
#   programs), as torch.compile marks such loads; the streamed ones get no hint.
# * H200 sweep (elementwise_sweep.py, 2026-11-30): these rows are within 0.6 % of each
#   row's best variant (geomean of time / best: 16-bit 1.006, fp32 1.003; the best single
#   choices, 2048 elements in 16-bit and 8 warps in fp32, 1.003 and 1.001); same-shape
#   Add/Mul within 0.1 % of eager and compile, resid-prefill 1.02x eager. Kept: 8 warps
#   would halve the vectors of a 16-bit operand in a mixed fp32 call.
BINARY_TABLE = (
    (1, None, StreamConfig(2048, 4, evict_last=True)),
    (2, None, StreamConfig(1024, 4, evict_last=True)),
    (4, None, StreamConfig(1024, 4, evict_last=True)),
    (8, None, StreamConfig(512, 4, evict_last=True)),
)
# ------------------------------------------------------------------------------------------

COMPUTE_DTYPES = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float32,
    torch.float64: torch.float64,
    torch.uint8: torch.int32,
    torch.int8: torch.int32,
    torch.int16: torch.int32,
    torch.int32: torch.int32,
    torch.int64: torch.int64,
}

_TL_DTYPES = {
    torch.float32: tl.float32,
    torch.float64: tl.float64,
    torch.int32: tl.int32,
    torch.int64: tl.int64,
}

# How alpha reaches the kernel (ALPHA constexpr).
_NO_ALPHA = 0      # mul, or add with alpha == 1: nothing to multiply
_ALPHA_INT = 1     # a Python int, converted in the kernel to the compute dtype
_ALPHA_FP32 = 2    # a Python float, passed as an fp32 kernel argument
_ALPHA_FP64 = 3    # a Python float for float64 math, passed as its IEEE bits (int64)


def compute_dtype(out_dtype: torch.dtype) -> torch.dtype:
    """The dtype the arithmetic runs in for a result of `out_dtype`."""
    try:
        return COMPUTE_DTYPES[out_dtype]
    except KeyError:
        raise TypeError(f"binary kernels support the dtypes {list(SUPPORTED_DTYPES)}, "
                        f"got {out_dtype}") from None


def binary_reference(op: str, a: torch.Tensor, b: torch.Tensor, alpha: int | float,
                     out_dtype: torch.dtype) -> torch.Tensor:
    """`a + alpha * b` (op 'add') or `a * b` (op 'mul') with torch, broadcast: both
    operands converted to `out_dtype` (as torch does; exact but for a wider 0-d operand),
    then to its compute dtype; the result cast back to `out_dtype`."""
    ct = compute_dtype(out_dtype)
    x, y = a.to(out_dtype).to(ct), b.to(out_dtype).to(ct)
    if op == "add":
        r = torch.add(x, y, alpha=alpha) if alpha != 1 else torch.add(x, y)
    elif op == "mul":
        r = torch.mul(x, y)
    else:
        raise ValueError(f"op must be one of {BINARY_OPS}, got {op!r}")
    return r.to(out_dtype)


# -- geometry --------------------------------------------------------------------------------

def broadcast_shape(s: Sequence[int], t: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of two shapes (torch's rule); a ValueError when they do not broadcast.
    Plain Python: `torch.broadcast_shapes` costs tens of microseconds a call."""
    n = max(len(s), len(t))
    s = (1,) * (n - len(s)) + tuple(s)
    t = (1,) * (n - len(t)) + tuple(t)
    out = []
    for x, y in zip(s, t):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {list(s)} and {list(t)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def _strides_over(t_shape: Sequence[int], t_stride: Sequence[int], shape: Sequence[int]
                  ) -> list[int]:
    """A tensor's strides over the axes of `shape` it broadcasts to (0 where broadcast)."""
    out = [0] * (len(shape) - len(t_shape))
    for n, st in zip(t_shape, t_stride):
        out.append(0 if n == 1 else st)
    return out


def broadcast_geometry(shape: Sequence[int], a: torch.Tensor, b: torch.Tensor
                       ) -> list[tuple[int, int, int]]:
    """The iteration space of a contiguous output of `shape`: `(size, a_stride, b_stride)`
    per axis, outermost first, with size-1 axes dropped and mergeable neighbours merged
    (an empty list for a one-element output)."""
    return _geometry(tuple(shape), tuple(a.shape), a.stride(), tuple(b.shape), b.stride())


def _geometry(shape, a_shape, a_stride, b_shape, b_stride) -> list[tuple[int, int, int]]:
    sa, sb = _strides_over(a_shape, a_stride, shape), _strides_over(b_shape, b_stride, shape)
    merged: list[list[int]] = []  # innermost first
    for i in range(len(shape) - 1, -1, -1):
        n = shape[i]
        if n == 1:
            continue
        if merged:
            inner = merged[-1]
            if sa[i] == inner[1] * inner[0] and sb[i] == inner[2] * inner[0]:
                inner[0] *= n
                continue
        merged.append([n, sa[i], sb[i]])
    return [tuple(d) for d in reversed(merged)]


def binary_config(numel: int, max_elem_bytes: int) -> StreamConfig:
    """The configuration of a call whose output has ``numel`` elements and whose largest
    element (of a, b and out) has ``max_elem_bytes`` bytes: its row of
    :data:`BINARY_TABLE`."""
    return pick_config(BINARY_TABLE, numel, max_elem_bytes)


def binary_blocks(R: int, N: int, cfg: StreamConfig) -> tuple[int, int, int]:
    """`(BLOCK_R, BLOCK_C, num_warps)` of the 2-D kernel for `R` rows of `N` columns.

    The tile holds `cfg.block` elements. With one row, the columns take the whole tile.
    With several, `BLOCK_C` is the power of two (at least 128, at most the tile) that pads
    a row least, ties going to the larger (with 2048-element tiles: 7168 -> 1024, 14336 ->
    2048, 4608 -> 512), and the rows fill the rest of the tile. A tile clipped to a small problem keeps the elements per thread of
    `cfg` (fewer warps).
    """
    tile = cfg.block
    top = min(_pow2(max(N, 1)), tile)
    if R <= 1:
        block_c = top
    else:
        block_c, best = top, _cdiv(N, top) * top
        c = top // 2
        while c >= _MIN_BLOCK_C:
            padded = _cdiv(N, c) * c
            if padded < best:
                block_c, best = c, padded
            c //= 2
    block_r = max(1, min(tile // block_c, _pow2(max(R, 1))))
    num_warps = max(1, cfg.num_warps * (block_r * block_c) // tile)
    return block_r, block_c, num_warps


# -- the kernels -----------------------------------------------------------------------------

@triton.jit
def _combine(x, y, alpha, a_ptr, b_ptr, out_ptr, OP: tl.constexpr, ALPHA: tl.constexpr,
             COMPUTE: tl.constexpr):
    """`x + alpha * y` (OP 0) or `x * y` (OP 1) of loaded operands, in the compute dtype."""
    # Each operand is first converted to the result dtype, as torch's TensorIterator does
    # (exact for every operand but a wider 0-d one), then to the compute dtype.
    # A float64 operand reaches a 16-bit result through float32, as torch's conversion
    # does (c10's Half and BFloat16 are built from a float); the direct float64 -> bfloat16
    # cast lost the operand altogether in Triton's interpreter (bf16[N] + f64[] gave a).
    if a_ptr.dtype.element_ty != out_ptr.dtype.element_ty:
        if a_ptr.dtype.element_ty == tl.float64 and out_ptr.dtype.element_ty.primitive_bitwidth == 16:
            x = x.to(tl.float32)
        x = x.to(out_ptr.dtype.element_ty)
    if b_ptr.dtype.element_ty != out_ptr.dtype.element_ty:
        if b_ptr.dtype.element_ty == tl.float64 and out_ptr.dtype.element_ty.primitive_bitwidth == 16:
            y = y.to(tl.float32)
        y = y.to(out_ptr.dtype.element_ty)
    x = x.to(COMPUTE)
    y = y.to(COMPUTE)
    if OP == 0:
        # tl.cast, not .to: Triton turns an integer argument equal to 1 into a constant.
        if ALPHA == 1:
            y = y * tl.cast(alpha, COMPUTE)
        elif ALPHA == 2:
            y = y * alpha
        elif ALPHA == 3:
            y = y * tl.cast(tl.cast(alpha, tl.int64), tl.float64, bitcast=True)
        r = x + y
    else:
        r = x * y
    return r


@triton.jit
def _binary_flat_tile(a_ptr, b_ptr, out_ptr, alpha, start, n,
                      OP: tl.constexpr, ALPHA: tl.constexpr, COMPUTE: tl.constexpr,
                      A_SCALAR: tl.constexpr, B_SCALAR: tl.constexpr, BLOCK: tl.constexpr,
                      MASKED: tl.constexpr, A_POLICY: tl.constexpr, B_POLICY: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    if MASKED:
        mask = offs < n
        other = 0
    else:
        mask = None
        other = None
    if A_SCALAR:
        x = tl.load(a_ptr, eviction_policy=A_POLICY)
    else:
        x = tl.load(a_ptr + offs, mask=mask, other=other, eviction_policy=A_POLICY)
    if B_SCALAR:
        y = tl.load(b_ptr, eviction_policy=B_POLICY)
    else:
        y = tl.load(b_ptr + offs, mask=mask, other=other, eviction_policy=B_POLICY)
    r = _combine(x, y, alpha, a_ptr, b_ptr, out_ptr, OP, ALPHA, COMPUTE)
    if A_SCALAR and B_SCALAR:  # a one-element output
        r = tl.broadcast_to(r, (BLOCK,))
    tl.store(out_ptr + offs, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _binary_flat_step(a_ptr, b_ptr, out_ptr, alpha, t, n,
                      OP: tl.constexpr, ALPHA: tl.constexpr, COMPUTE: tl.constexpr,
                      A_SCALAR: tl.constexpr, B_SCALAR: tl.constexpr, BLOCK: tl.constexpr,
                      USE_INT64: tl.constexpr, EVEN: tl.constexpr,
                      A_POLICY: tl.constexpr, B_POLICY: tl.constexpr):
    if USE_INT64:
        start = tl.cast(t, tl.int64) * BLOCK
    else:
        start = t * BLOCK
    if EVEN:
        _binary_flat_tile(a_ptr, b_ptr, out_ptr, alpha, start, n, OP, ALPHA, COMPUTE,
                          A_SCALAR, B_SCALAR, BLOCK, False, A_POLICY, B_POLICY)
    elif start + BLOCK <= n:
        _binary_flat_tile(a_ptr, b_ptr, out_ptr, alpha, start, n, OP, ALPHA, COMPUTE,
                          A_SCALAR, B_SCALAR, BLOCK, False, A_POLICY, B_POLICY)
    else:
        _binary_flat_tile(a_ptr, b_ptr, out_ptr, alpha, start, n, OP, ALPHA, COMPUTE,
                          A_SCALAR, B_SCALAR, BLOCK, True, A_POLICY, B_POLICY)


@triton.jit
def _binary_flat_kernel(
    a_ptr, b_ptr, out_ptr, alpha, n, n_tiles,
    OP: tl.constexpr,                # 0: a + alpha * b, 1: a * b
    ALPHA: tl.constexpr,             # how alpha is passed (see _NO_ALPHA ...)
    COMPUTE: tl.constexpr,           # the compute dtype
    A_SCALAR: tl.constexpr,          # a is one element, read by every program
    B_SCALAR: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_INT64: tl.constexpr,
    EVEN: tl.constexpr,              # n is a multiple of BLOCK: no tile is masked
    PERSIST: tl.constexpr,           # fewer programs than tiles: each loops over tiles
    A_POLICY: tl.constexpr,          # a's eviction hint ('', 'evict_first', 'evict_last')
    B_POLICY: tl.constexpr,
    PDL: tl.constexpr = False,       # launched dependent (opspec.kernels.pdl)
):
    """Same-shape operands in memory order (or a 0-d one): tiles of BLOCK elements, only
    a tile that runs past n masked (a mask Triton cannot prove constant over a vector,
    n not a multiple of 16, turns every access into single elements)."""
    overlap_start(PDL)
    pid = tl.program_id(0)
    if PERSIST:
        for t in tl.range(pid, n_tiles, tl.num_programs(0)):
            _binary_flat_step(a_ptr, b_ptr, out_ptr, alpha, t, n, OP, ALPHA, COMPUTE,
                              A_SCALAR, B_SCALAR, BLOCK, USE_INT64, EVEN, A_POLICY, B_POLICY)
    else:
        _binary_flat_step(a_ptr, b_ptr, out_ptr, alpha, pid, n, OP, ALPHA, COMPUTE,
                          A_SCALAR, B_SCALAR, BLOCK, USE_INT64, EVEN, A_POLICY, B_POLICY)


@triton.jit
def _binary_tile(
    a_ptr, b_ptr, out_ptr, alpha, t,
    R, N, n_col_blocks, O1, O2, O3,
    a_s0, a_s1, a_s2, a_s3, a_sn, b_s0, b_s1, b_s2, b_s3, b_sn,
    OP: tl.constexpr, ALPHA: tl.constexpr, COMPUTE: tl.constexpr, OUTER: tl.constexpr,
    A_BCAST_C: tl.constexpr, B_BCAST_C: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, USE_INT64: tl.constexpr,
    MASK_R: tl.constexpr, MASK_C: tl.constexpr,
    A_POLICY: tl.constexpr, B_POLICY: tl.constexpr,
):
    pid_r = t // n_col_blocks
    pid_c = t % n_col_blocks
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    # Only the axes that the tiles do not divide are masked; a row mask is constant along
    # a row, so the column vectors stay 16 bytes wide.
    if MASK_R:
        row_mask = rows < R
        row_other = 0
        if MASK_C:
            mask = row_mask[:, None] & (cols < N)[None, :]
        else:
            mask = row_mask[:, None]
        other = 0
    else:
        row_mask = None
        row_other = None
        if MASK_C:
            mask = (cols < N)[None, :]
            other = 0
        else:
            mask = None
            other = None

    # Row offsets of each input: one div/mod per row axis and row, none per element.
    rem = rows
    a_row = rows * 0
    b_row = rows * 0
    if OUTER >= 4:
        i = rem % O3
        rem = rem // O3
        a_row += i * a_s3
        b_row += i * b_s3
    if OUTER >= 3:
        i = rem % O2
        rem = rem // O2
        a_row += i * a_s2
        b_row += i * b_s2
    if OUTER >= 2:
        i = rem % O1
        rem = rem // O1
        a_row += i * a_s1
        b_row += i * b_s1
    if OUTER >= 1:
        a_row += rem * a_s0
        b_row += rem * b_s0

    # An operand broadcast along the columns is loaded once per row and broadcast in
    # registers; the others load a [BLOCK_R, BLOCK_C] tile (16-byte vectors at unit stride).
    if A_BCAST_C:
        x = tl.load(a_ptr + a_row, mask=row_mask, other=row_other,
                    eviction_policy=A_POLICY)[:, None]
    else:
        x = tl.load(a_ptr + (a_row[:, None] + cols[None, :] * a_sn), mask=mask, other=other,
                    eviction_policy=A_POLICY)
    if B_BCAST_C:
        y = tl.load(b_ptr + b_row, mask=row_mask, other=row_other,
                    eviction_policy=B_POLICY)[:, None]
    else:
        y = tl.load(b_ptr + (b_row[:, None] + cols[None, :] * b_sn), mask=mask, other=other,
                    eviction_policy=B_POLICY)
    r = _combine(x, y, alpha, a_ptr, b_ptr, out_ptr, OP, ALPHA, COMPUTE)
    if A_BCAST_C and B_BCAST_C:  # a single column
        r = tl.broadcast_to(r, (BLOCK_R, BLOCK_C))
    out_off = rows[:, None] * N + cols[None, :]
    tl.store(out_ptr + out_off, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _binary_kernel(
    a_ptr, b_ptr, out_ptr, alpha,
    R, N, n_col_blocks, n_tiles,
    O1, O2, O3,                      # sizes of row axes 1..3 (axis 0's is implied by R)
    a_s0, a_s1, a_s2, a_s3, a_sn,    # a's strides: row axes 0..3, then the column axis
    b_s0, b_s1, b_s2, b_s3, b_sn,
    OP: tl.constexpr,                # 0: a + alpha * b, 1: a * b
    ALPHA: tl.constexpr,             # how alpha is passed (see _NO_ALPHA ...)
    COMPUTE: tl.constexpr,           # the compute dtype
    OUTER: tl.constexpr,             # number of row axes, 0..4
    A_BCAST_C: tl.constexpr,         # a_sn == 0: a is constant along each row
    B_BCAST_C: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    USE_INT64: tl.constexpr,
    MASK_R: tl.constexpr,            # R % BLOCK_R != 0
    MASK_C: tl.constexpr,            # N % BLOCK_C != 0
    PERSIST: tl.constexpr,           # fewer programs than tiles: each loops over tiles
    A_POLICY: tl.constexpr,          # a's eviction hint ('', 'evict_first', 'evict_last')
    B_POLICY: tl.constexpr,
    ALIGN: tl.constexpr = 1,         # divides N and the row strides (tiling.row_multiple)
    PDL: tl.constexpr = False,       # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        a_s0 = as_multiple(a_s0, ALIGN)
        a_s1 = as_multiple(a_s1, ALIGN)
        a_s2 = as_multiple(a_s2, ALIGN)
        a_s3 = as_multiple(a_s3, ALIGN)
        b_s0 = as_multiple(b_s0, ALIGN)
        b_s1 = as_multiple(b_s1, ALIGN)
        b_s2 = as_multiple(b_s2, ALIGN)
        b_s3 = as_multiple(b_s3, ALIGN)
    pid = tl.program_id(0)
    if PERSIST:
        for t in tl.range(pid, n_tiles, tl.num_programs(0)):
            _binary_tile(a_ptr, b_ptr, out_ptr, alpha, t, R, N, n_col_blocks, O1, O2, O3,
                         a_s0, a_s1, a_s2, a_s3, a_sn, b_s0, b_s1, b_s2, b_s3, b_sn,
                         OP, ALPHA, COMPUTE, OUTER, A_BCAST_C, B_BCAST_C, BLOCK_R, BLOCK_C,
                         USE_INT64, MASK_R, MASK_C, A_POLICY, B_POLICY)
    else:
        _binary_tile(a_ptr, b_ptr, out_ptr, alpha, pid, R, N, n_col_blocks, O1, O2, O3,
                     a_s0, a_s1, a_s2, a_s3, a_sn, b_s0, b_s1, b_s2, b_s3, b_sn,
                     OP, ALPHA, COMPUTE, OUTER, A_BCAST_C, B_BCAST_C, BLOCK_R, BLOCK_C,
                     USE_INT64, MASK_R, MASK_C, A_POLICY, B_POLICY)


def _alpha_arg(op: str, alpha: int | float, ct: torch.dtype) -> tuple[int, int | float]:
    """(ALPHA mode, the kernel argument) for `alpha` in compute dtype `ct`."""
    if op != "add" or alpha == 1:
        return _NO_ALPHA, 0
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be an int or a float, got {type(alpha).__name__}")
    if isinstance(alpha, int):
        if ct.is_floating_point:
            # An int alpha with float math: convert it once, as torch does (int64 -> float).
            # Below 2**53 the int is exact as a Python float; beyond, round it once to fp32.
            alpha = float(alpha) if ct == torch.float64 or abs(alpha) < 2**53 \
                else float(torch.tensor(alpha).float())
        else:
            return _ALPHA_INT, alpha
    if not ct.is_floating_point:
        raise TypeError(f"alpha must be an int for integer tensors, got {alpha!r}")
    if ct == torch.float64:
        return _ALPHA_FP64, struct.unpack("<q", struct.pack("<d", alpha))[0]
    return _ALPHA_FP32, alpha


def _max_offset(geometry: Sequence[tuple[int, int, int]], which: int) -> int:
    return sum((d[0] - 1) * abs(d[which]) for d in geometry)


@dataclass(frozen=True)
class _Launch:
    """One kernel launch: element offsets of its base in a, b and out, the kernel, the
    run-time arguments after `alpha`, the constexprs that depend on the layout, and what
    the grid is made of (`n_tiles` tiles, laid out by `config`)."""

    a_off: int
    b_off: int
    out_off: int
    kernel: object
    n_tiles: int
    args: tuple[int, ...]
    constexprs: dict
    num_warps: int
    config: StreamConfig


def _policy(reused: bool, cfg: StreamConfig) -> str:
    if reused:
        return "evict_last" if cfg.evict_last else ""
    return "evict_first" if cfg.evict_first else ""


def _launch_of(geometry: Sequence[tuple[int, int, int]], offs: tuple[int, int, int],
               cfg: StreamConfig) -> _Launch:
    numel = math.prod(d[0] for d in geometry)
    # an operand with a zero stride is broadcast: other programs read its elements again
    a_reused = not geometry or any(d[1] == 0 for d in geometry)
    b_reused = not geometry or any(d[2] == 0 for d in geometry)
    policies = dict(A_POLICY=_policy(a_reused, cfg), B_POLICY=_policy(b_reused, cfg))
    if len(geometry) <= 1 and all(st in (0, 1) for d in geometry for st in d[1:]):
        # same-shape contiguous operands (or a 0-d one): the 1-D kernel
        n = numel
        block = min(cfg.block, _pow2(n))
        num_warps = max(1, cfg.num_warps * block // cfg.block)
        n_tiles = _cdiv(n, block)
        a_scalar = not geometry or geometry[0][1] == 0
        b_scalar = not geometry or geometry[0][2] == 0
        return _Launch(*offs, kernel=_binary_flat_kernel, n_tiles=n_tiles, args=(n, n_tiles),
                       constexprs=dict(A_SCALAR=a_scalar, B_SCALAR=b_scalar, BLOCK=block,
                                       USE_INT64=n + block > _INT32_LIMIT,
                                       EVEN=n % block == 0, **policies),
                       num_warps=num_warps, config=cfg)
    N, a_sn, b_sn = geometry[-1]
    outer = list(geometry[:-1])
    R = numel // N
    pad = MAX_OUTER - len(outer)
    O = [d[0] for d in outer] + [1] * pad
    sa = [d[1] for d in outer] + [0] * pad
    sb = [d[2] for d in outer] + [0] * pad
    block_r, block_c, num_warps = binary_blocks(R, N, cfg)
    n_col_blocks = _cdiv(N, block_c)
    n_tiles = _cdiv(R, block_r) * n_col_blocks
    # the furthest element a (masked-off) lane can form, rows and columns both padded
    pad_r, pad_c = _cdiv(R, block_r) * block_r, n_col_blocks * block_c
    use_int64 = (pad_r * N + block_c > _INT32_LIMIT
                 or _max_offset(geometry, 1) + pad_c * abs(a_sn) > _INT32_LIMIT
                 or _max_offset(geometry, 2) + pad_c * abs(b_sn) > _INT32_LIMIT)
    return _Launch(*offs, kernel=_binary_kernel, n_tiles=n_tiles,
                   args=(R, N, n_col_blocks, n_tiles, O[1], O[2], O[3], *sa, a_sn, *sb, b_sn),
                   constexprs=dict(OUTER=len(outer), A_BCAST_C=a_sn == 0, B_BCAST_C=b_sn == 0,
                                   BLOCK_R=block_r, BLOCK_C=block_c, USE_INT64=use_int64,
                                   MASK_R=R % block_r != 0, MASK_C=N % block_c != 0,
                                   ALIGN=_row_hint(N, sa, sb, a_sn, b_sn), **policies),
                   num_warps=num_warps, config=cfg)


def _row_hint(N: int, sa: list[int], sb: list[int], a_sn: int, b_sn: int) -> int:
    """The power of two the 2-D kernel rebuilds ``N`` and the row strides as multiples of
    (:func:`opspec.kernels.tiling.row_multiple`; any element size: a multiple of 8 is one
    of 4 too), where both operands' columns are unit-stride or broadcast."""
    if a_sn not in (0, 1) or b_sn not in (0, 1):
        return 1
    return row_multiple(1, N, *sa, *sb)


def _split(geometry, offs: tuple[int, int, int], cfg: StreamConfig, into: list) -> None:
    if len(geometry) - 1 <= MAX_OUTER:
        into.append(_launch_of(geometry, offs, cfg))
        return
    # More row axes than one launch takes: one launch per index of the leading axis.
    (n, sa, sb), rest = geometry[0], geometry[1:]
    step = math.prod(d[0] for d in rest)
    for i in range(n):
        _split(rest, (offs[0] + i * sa, offs[1] + i * sb, offs[2] + i * step), cfg, into)


@functools.lru_cache(maxsize=4096)
def _plan(shape: tuple[int, ...], a_shape: tuple[int, ...], a_stride: tuple[int, ...],
          b_shape: tuple[int, ...], b_stride: tuple[int, ...], max_elem_bytes: int,
          config: StreamConfig | None = None) -> tuple[_Launch, ...]:
    """The launches of one call layout (cached: a model repeats its layouts every step),
    laid out by `config` or else by the call's row of BINARY_TABLE."""
    geometry = _geometry(shape, a_shape, a_stride, b_shape, b_stride)
    cfg = config or binary_config(math.prod(shape), max_elem_bytes)
    launches: list[_Launch] = []
    _split(geometry, (0, 0, 0), cfg, launches)
    return tuple(launches)


def _offset_view(t: torch.Tensor, elements: int) -> torch.Tensor:
    """A one-element view of `t`'s storage starting `elements` past `t`'s first element
    (the kernel takes only base pointers; the launch carries the strides)."""
    return t if elements == 0 else t.as_strided((1,), (1,), t.storage_offset() + elements)


def binary_triton(op: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                  alpha: int | float = 1, config: StreamConfig | None = None) -> torch.Tensor:
    """Write `a + alpha * b` (op 'add') or `a * b` (op 'mul') into `out` and return it.

    `a` and `b` broadcast to `out.shape` and may have any strides and any of the
    supported dtypes (one category: both floating or both integer); `out` is contiguous,
    of the promoted dtype. The math runs in the compute dtype of `out` (see the module
    docstring); `alpha` must be 1 for 'mul'. Nothing is launched when `out` is empty. No
    allocation, no host sync. `config` overrides BINARY_TABLE (the sweep's variants).
    """
    if op not in BINARY_OPS:
        raise ValueError(f"op must be one of {BINARY_OPS}, got {op!r}")
    if op == "mul" and alpha != 1:
        raise ValueError(f"mul takes no alpha, got {alpha!r}")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; binary kernels support "
                            f"{[str(d).removeprefix('torch.') for d in SUPPORTED_DTYPES]}")
    if a.dtype.is_floating_point != out.dtype.is_floating_point or \
            b.dtype.is_floating_point != out.dtype.is_floating_point:
        raise TypeError(f"a ({a.dtype}), b ({b.dtype}) and out ({out.dtype}) must all be "
                        "floating or all integer")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    shape = tuple(out.shape)
    try:
        ok = broadcast_shape(a.shape, b.shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"a {list(a.shape)} and b {list(b.shape)} do not broadcast to "
                         f"out {list(shape)}")
    if out.numel() == 0:
        return out
    ct = compute_dtype(out.dtype)
    alpha_mode, alpha_arg = _alpha_arg(op, alpha, ct)
    max_elem_bytes = max(a.element_size(), b.element_size(), out.element_size())
    plan = _plan(shape, tuple(a.shape), a.stride(), tuple(b.shape), b.stride(), max_elem_bytes,
                 config)
    op_code, compute = BINARY_OPS.index(op), _TL_DTYPES[ct]
    pdl = overlap_options(out.device)   # not in the plan: that is cached without a device
    for L in plan:
        grid, persist = stream_grid(L.config, L.n_tiles, out.device)
        launch(L.kernel, (grid,),
               _offset_view(a, L.a_off), _offset_view(b, L.b_off), _offset_view(out, L.out_off),
               alpha_arg, *L.args, OP=op_code, ALPHA=alpha_mode, COMPUTE=compute,
               PERSIST=persist, **L.constexprs, num_warps=L.num_warps, **pdl)
    return out
