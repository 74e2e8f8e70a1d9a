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

The tile holds about ``8192 / max element size`` elements (16 bytes per thread and
operand twice over with 8 warps), so the whole problem streams through HBM once: read
``a`` and ``b`` (the broadcast operand only once when it fits in L2) and write ``out``.
Tile sizes are picked in plain Python from the shape, nothing is autotuned at call time,
and the launches of a call layout (shapes, strides, element sizes) are planned once and
cached.
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

__all__ = [
    "BINARY_OPS",
    "COMPUTE_DTYPES",
    "MAX_OUTER",
    "SUPPORTED_DTYPES",
    "binary_blocks",
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

_INT32_LIMIT = 2**31 - 1
# Enough programs to give each of an H200's 132 SMs a few.
_TARGET_PROGRAMS = 4 * 132
_MIN_TILE = 512
_MIN_BLOCK_C = 128

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


def binary_blocks(R: int, N: int, max_elem_bytes: int) -> tuple[int, int, int]:
    """`(BLOCK_R, BLOCK_C, num_warps)` for `R` rows of `N` columns.

    The tile holds `8192 // max_elem_bytes` elements (4096 for 2-byte dtypes: 16 per
    thread with 8 warps). With one row, the columns take the whole tile. With several,
    `BLOCK_C` is the power of two (at least 128) that pads a row least, ties going to the
    larger (7168 -> 1024, 14336 -> 2048), and the rows fill the rest of the tile. While the
    grid would hold fewer than 4 programs per SM the tile is halved, down to 512 elements,
    so that decode-sized calls still spread over the SMs.
    """
    tile = max(1024, 8192 // max(1, max_elem_bytes))
    top = min(triton.next_power_of_2(max(N, 1)), tile)
    if R <= 1:
        block_c = top
    else:
        block_c, best = top, triton.cdiv(N, top) * top
        c = top // 2
        while c >= _MIN_BLOCK_C:
            padded = triton.cdiv(N, c) * c
            if padded < best:
                block_c, best = c, padded
            c //= 2
    block_r = max(1, min(tile // block_c, triton.next_power_of_2(max(R, 1))))

    def programs() -> int:
        return triton.cdiv(R, block_r) * triton.cdiv(N, block_c)

    while block_r * block_c > _MIN_TILE and programs() < _TARGET_PROGRAMS:
        if block_r > 1:
            block_r //= 2
        else:
            block_c //= 2
    num_warps = max(1, min(8, (block_r * block_c) // 256))
    return block_r, block_c, num_warps


# -- the kernel ------------------------------------------------------------------------------

@triton.jit
def _binary_kernel(
    a_ptr, b_ptr, out_ptr, alpha,
    R, N, n_col_blocks,
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
):
    pid = tl.program_id(0)
    pid_r = pid // n_col_blocks
    pid_c = pid % n_col_blocks
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = (rows < R)[:, None] & (cols < N)[None, :]

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
        x = tl.load(a_ptr + a_row, mask=rows < R, other=0)[:, None]
    else:
        x = tl.load(a_ptr + (a_row[:, None] + cols[None, :] * a_sn), mask=mask, other=0)
    if B_BCAST_C:
        y = tl.load(b_ptr + b_row, mask=rows < R, other=0)[:, None]
    else:
        y = tl.load(b_ptr + (b_row[:, None] + cols[None, :] * b_sn), mask=mask, other=0)
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
    if A_BCAST_C and B_BCAST_C:  # a single column (a one-element output)
        r = tl.broadcast_to(r, (BLOCK_R, BLOCK_C))
    out_off = rows[:, None] * N + cols[None, :]
    tl.store(out_ptr + out_off, r.to(out_ptr.dtype.element_ty), mask=mask)


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
    """One kernel launch: element offsets of its base in a, b and out, the grid, the
    run-time arguments after `alpha` and the constexprs that depend on the shape."""

    a_off: int
    b_off: int
    out_off: int
    grid: int
    args: tuple[int, ...]   # R, N, n_col_blocks, O1..O3, a strides (5), b strides (5)
    outer: int
    a_bcast_c: bool
    b_bcast_c: bool
    block_r: int
    block_c: int
    use_int64: bool
    num_warps: int


def _launch_of(geometry: Sequence[tuple[int, int, int]], offs: tuple[int, int, int],
               max_elem_bytes: int) -> _Launch:
    numel = math.prod(d[0] for d in geometry)
    if geometry:
        N, a_sn, b_sn = geometry[-1]
        outer = list(geometry[:-1])
    else:  # a single element
        N, a_sn, b_sn, outer = 1, 0, 0, []
    R = numel // N
    pad = MAX_OUTER - len(outer)
    O = [d[0] for d in outer] + [1] * pad
    sa = [d[1] for d in outer] + [0] * pad
    sb = [d[2] for d in outer] + [0] * pad
    block_r, block_c, num_warps = binary_blocks(R, N, max_elem_bytes)
    n_col_blocks = triton.cdiv(N, block_c)
    use_int64 = (numel + block_r * block_c > _INT32_LIMIT
                 or _max_offset(geometry, 1) + block_c * abs(a_sn) > _INT32_LIMIT
                 or _max_offset(geometry, 2) + block_c * abs(b_sn) > _INT32_LIMIT)
    return _Launch(*offs, grid=triton.cdiv(R, block_r) * n_col_blocks,
                   args=(R, N, n_col_blocks, O[1], O[2], O[3], *sa, a_sn, *sb, b_sn),
                   outer=len(outer), a_bcast_c=a_sn == 0, b_bcast_c=b_sn == 0,
                   block_r=block_r, block_c=block_c, use_int64=use_int64, num_warps=num_warps)


def _split(geometry, offs: tuple[int, int, int], max_elem_bytes: int, into: list) -> None:
    if len(geometry) - 1 <= MAX_OUTER:
        into.append(_launch_of(geometry, offs, max_elem_bytes))
        return
    # More row axes than one launch takes: one launch per index of the leading axis.
    (n, sa, sb), rest = geometry[0], geometry[1:]
    step = math.prod(d[0] for d in rest)
    for i in range(n):
        _split(rest, (offs[0] + i * sa, offs[1] + i * sb, offs[2] + i * step),
               max_elem_bytes, into)


@functools.lru_cache(maxsize=4096)
def _plan(shape: tuple[int, ...], a_shape: tuple[int, ...], a_stride: tuple[int, ...],
          b_shape: tuple[int, ...], b_stride: tuple[int, ...], max_elem_bytes: int
          ) -> tuple[_Launch, ...]:
    """The launches of one call layout (cached: a model repeats its layouts every step)."""
    geometry = _geometry(shape, a_shape, a_stride, b_shape, b_stride)
    launches: list[_Launch] = []
    _split(geometry, (0, 0, 0), max_elem_bytes, launches)
    return tuple(launches)


def _offset_view(t: torch.Tensor, elements: int) -> torch.Tensor:
    """A one-element view of `t`'s storage starting `elements` past `t`'s first element
    (the kernel takes only base pointers; the launch carries the strides)."""
    return t if elements == 0 else t.as_strided((1,), (1,), t.storage_offset() + elements)


def binary_triton(op: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                  alpha: int | float = 1) -> torch.Tensor:
    """Write `a + alpha * b` (op 'add') or `a * b` (op 'mul') into `out` and return it.

    `a` and `b` broadcast to `out.shape` and may have any strides and any of the
    supported dtypes (one category: both floating or both integer); `out` is contiguous,
    of the promoted dtype. The math runs in the compute dtype of `out` (see the module
    docstring); `alpha` must be 1 for 'mul'. Nothing is launched when `out` is empty. No
    allocation, no host sync.
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
    plan = _plan(shape, tuple(a.shape), a.stride(), tuple(b.shape), b.stride(), max_elem_bytes)
    op_code, compute = BINARY_OPS.index(op), _TL_DTYPES[ct]
    for L in plan:
        _binary_kernel[(L.grid,)](
            _offset_view(a, L.a_off), _offset_view(b, L.b_off), _offset_view(out, L.out_off),
            alpha_arg, *L.args,
            OP=op_code, ALPHA=alpha_mode, COMPUTE=compute, OUTER=L.outer,
            A_BCAST_C=L.a_bcast_c, B_BCAST_C=L.b_bcast_c,
            BLOCK_R=L.block_r, BLOCK_C=L.block_c, USE_INT64=L.use_int64,
            num_warps=L.num_warps,
        )
    return out
