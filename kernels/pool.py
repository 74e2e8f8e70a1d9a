"""2-D max and average pooling: ``torch.nn.functional.max_pool2d`` / ``avg_pool2d`` forward.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.pool_impl`.

* :func:`pool2d_reference` -- the torch reference (float32 math for 16-bit inputs, float64
  inputs kept in float64, the result cast back to the input dtype).
* :func:`pool2d_triton` -- a Triton kernel writing into a contiguous ``out``.
* :func:`pool2d_geometry` / :func:`pool2d_out_size` -- the per-axis window numbers and the
  output size (torch's rules, ceil_mode included).

Layout of the work. The input is viewed as ``[N, C, H, W]`` with any strides (an unbatched
``[C, H, W]`` is one image). The output ``[N, C, H_out, W_out]`` (contiguous) is seen as a
matrix of ``R = N * C * H_out`` rows of ``W_out`` pixels; each program takes a tile of
``BLOCK_R`` rows by ``BLOCK_W`` columns. The row index is split into ``(n, c, oh)`` once per
row (a ``[BLOCK_R]`` vector), never per pixel, so the window loop costs only an add, a mask
and a load per element: over ``kh`` the row address and row mask, over ``kw`` the column
offset and column mask, combined by broadcasting. Windows up to ``_MAX_UNROLL`` elements are
unrolled (window sizes are compile-time constants); larger ones (global pooling) loop at run
time. Padding and the part of a ceil_mode window past the input are masked: ``-inf`` for
max (never selected), ``0`` for the sum. Max propagates NaN as torch does (a NaN is taken
and then kept); the average sums in float32 and divides by torch's divisor:
``divisor_override``, else the window clipped to the padded input (count_include_pad), else
the window clipped to the input.

The op reads the input about once (neighbouring windows share cache lines, so the
overlapping reads of a 3x3 stride-2 window come from L1/L2) and writes the output once: it
is bound by HBM bandwidth on the H200 (about 4.2 TB/s measured for a copy). The tile is
about ``_TILE`` output pixels, ``BLOCK_W`` the next power of two of ``W_out`` up to
``_MAX_BLOCK_W``, ``BLOCK_R`` the rest; all tuning constants are at the top of this module.
Offsets are int64 when an address can pass ``2**31 - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

__all__ = [
    "Pool2dGeometry",
    "pool2d_geometry",
    "pool2d_out_size",
    "pool2d_plan",
    "pool2d_reference",
    "pool2d_triton",
]

# -- tuning constants (the only place) ----------------------------------------------------
#: Output pixels per program (the tile is BLOCK_R x BLOCK_W of about this many).
_TILE = 1024
#: Widest tile row: W_out beyond it is split over several programs.
_MAX_BLOCK_W = 128
#: Threads: _TILE / (32 * _NUM_WARPS) = 8 output pixels per thread.
_NUM_WARPS = 4
#: Windows with at most this many elements are unrolled; larger ones loop at run time.
_MAX_UNROLL = 64
_INT32_LIMIT = 2**31 - 1

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


@dataclass(frozen=True)
class Pool2dGeometry:
    """The window of a 2-D pooling, per axis as ``(H, W)`` pairs."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    ceil_mode: bool


def pool2d_geometry(kernel_size, stride=None, padding=0, dilation=1,
                    ceil_mode: bool = False) -> Pool2dGeometry:
    """The window numbers of torch's arguments: each an int or a pair; stride None (or an
    empty sequence, as torch) is the kernel size."""
    kernel = _pair(kernel_size, "kernel_size")
    strides = kernel if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) \
        else _pair(stride, "stride")
    return Pool2dGeometry(kernel, strides, _pair(padding, "padding"),
                          _pair(dilation, "dilation"), bool(ceil_mode))


def _out_len(length: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    # torch's pooling_output_shape: the last window must start inside the (left-padded) input
    out = (length + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1
    return max(out, 0)


def pool2d_out_size(H: int, W: int, g: Pool2dGeometry) -> tuple[int, int]:
    """``(H_out, W_out)`` as torch computes them."""
    return (_out_len(H, g.kernel[0], g.stride[0], g.padding[0], g.dilation[0], g.ceil_mode),
            _out_len(W, g.kernel[1], g.stride[1], g.padding[1], g.dilation[1], g.ceil_mode))


# -- reference ------------------------------------------------------------------------------

def pool2d_reference(x: torch.Tensor, mode: str, g: Pool2dGeometry,
                     count_include_pad: bool = True,
                     divisor_override: int | None = None) -> torch.Tensor:
    """torch's max_pool2d / avg_pool2d (``mode`` 'max' or 'avg') of ``x`` ([N, C, H, W] or
    [C, H, W]) computed in float32 (float64 stays float64) and returned in ``x.dtype``."""
    xf = x if x.dtype == torch.float64 else x.float()
    if mode == "max":
        y = F.max_pool2d(xf, g.kernel, g.stride, g.padding, g.dilation, g.ceil_mode)
    elif mode == "avg":
        if g.dilation != (1, 1):
            raise ValueError("avg_pool2d has no dilation")
        y = F.avg_pool2d(xf, g.kernel, g.stride, g.padding, g.ceil_mode, count_include_pad,
                         divisor_override)
    else:
        raise ValueError(f"mode must be 'max' or 'avg', got {mode!r}")
    return y.to(x.dtype).contiguous()


# -- Triton kernel ----------------------------------------------------------------------------

@triton.jit
def _window_step(acc, x_ptr, row_off, row_ok, iw, W, sxw, IS_MAX: tl.constexpr):
    """Accumulate one window column: the element at row offset `row_off` ([BLOCK_R, 1])
    and input column `iw` ([1, BLOCK_W]), masked outside the input."""
    ok = row_ok & (iw >= 0) & (iw < W)
    ptrs = x_ptr + (row_off + iw * sxw)
    if IS_MAX:
        v = tl.load(ptrs, mask=ok, other=float("-inf")).to(tl.float32)
        # torch: `val > maxval || isnan(val)`: a NaN is taken, and nothing replaces it
        acc = tl.where((v > acc) | (v != v), v, acc)
    else:
        v = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
        acc = acc + v
    return acc


@triton.jit
def _pool2d_kernel(
    x_ptr, out_ptr,
    R, C, H, W, H_out, W_out, n_col_blocks,
    sxn, sxc, sxh, sxw,
    KH, KW, SH, SW, PH, PW, DH, DW,
    divisor,
    KH_C: tl.constexpr, KW_C: tl.constexpr,
    UNROLL: tl.constexpr, IS_MAX: tl.constexpr,
    COUNT_INCLUDE_PAD: tl.constexpr, HAS_DIVISOR: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, USE_INT64: tl.constexpr,
):
    pid = tl.program_id(0)
    if USE_INT64:
        pid = pid.to(tl.int64)
    rb = pid // n_col_blocks
    cb = pid % n_col_blocks
    rows = rb * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = cb * BLOCK_W + tl.arange(0, BLOCK_W)
    row_in = rows < R
    col_in = cols < W_out
    # row -> (n, c, oh): once per row, not per pixel
    oh = rows % H_out
    nc = rows // H_out
    c = nc % C
    n = nc // C
    base = n * sxn + c * sxc
    h0 = oh * SH - PH                                  # [BLOCK_R]
    w0 = cols * SW - PW                                # [BLOCK_W]

    if IS_MAX:
        acc = tl.full((BLOCK_R, BLOCK_W), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_R, BLOCK_W), tl.float32)

    if UNROLL:
        for kh in tl.static_range(KH_C):
            ih = h0 + kh * DH
            row_ok = (row_in & (ih >= 0) & (ih < H))[:, None] & col_in[None, :]
            row_off = (base + ih * sxh)[:, None]
            for kw in tl.static_range(KW_C):
                acc = _window_step(acc, x_ptr, row_off, row_ok, (w0 + kw * DW)[None, :], W,
                                   sxw, IS_MAX)
    else:
        for kh in range(0, KH):
            ih = h0 + kh * DH
            row_ok = (row_in & (ih >= 0) & (ih < H))[:, None] & col_in[None, :]
            row_off = (base + ih * sxh)[:, None]
            for kw in range(0, KW):
                acc = _window_step(acc, x_ptr, row_off, row_ok, (w0 + kw * DW)[None, :], W,
                                   sxw, IS_MAX)

    if IS_MAX:
        res = acc
    else:
        if HAS_DIVISOR:
            res = acc / divisor
        else:
            # torch: the window clipped to the padded input (count_include_pad), or to the
            # input itself; avg_pool2d has no dilation
            h1 = tl.minimum(h0 + KH, H + PH)
            w1 = tl.minimum(w0 + KW, W + PW)
            if COUNT_INCLUDE_PAD:
                hs = h1 - h0
                ws = w1 - w0
            else:
                hs = tl.minimum(h1, H) - tl.maximum(h0, 0)
                ws = tl.minimum(w1, W) - tl.maximum(w0, 0)
            # at least one for the lanes past the output (0 / 0 there otherwise)
            cnt = tl.maximum(hs[:, None] * ws[None, :], 1)
            res = acc / cnt.to(tl.float32)

    out_off = rows[:, None] * W_out + cols[None, :]
    tl.store(out_ptr + out_off, res.to(out_ptr.dtype.element_ty),
             mask=row_in[:, None] & col_in[None, :])


@dataclass(frozen=True)
class Pool2dPlan:
    """How the launcher splits the output: tile ``BLOCK_R`` x ``BLOCK_W``, ``num_warps``,
    whether the window is unrolled."""

    block_r: int
    block_w: int
    num_warps: int
    unroll: bool


def pool2d_plan(R: int, W_out: int, g: Pool2dGeometry) -> Pool2dPlan:
    """The plan for ``R`` output rows of ``W_out`` pixels (see the module docstring)."""
    block_w = min(triton.next_power_of_2(max(W_out, 1)), _MAX_BLOCK_W)
    block_r = max(1, min(_TILE // block_w, triton.next_power_of_2(max(R, 1))))
    num_warps = max(1, min(_NUM_WARPS, (block_r * block_w) // 256))
    unroll = g.kernel[0] * g.kernel[1] <= _MAX_UNROLL
    return Pool2dPlan(block_r, block_w, num_warps, unroll)


def pool2d_triton(x: torch.Tensor, out: torch.Tensor, mode: str, g: Pool2dGeometry,
                  count_include_pad: bool = True, divisor_override: int | None = None,
                  plan: Pool2dPlan | None = None) -> torch.Tensor:
    """Write max_pool2d / avg_pool2d (``mode`` 'max' or 'avg') of ``x`` into ``out`` and
    return ``out``.

    ``x``: [N, C, H, W] or [C, H, W] of fp16, bf16 or fp32, any strides; ``out``: the
    output shape, ``x``'s dtype, contiguous. ``plan`` overrides the launcher's choice
    (tests). Nothing is launched for an empty output. No allocation, no host sync.
    """
    if mode not in ("max", "avg"):
        raise ValueError(f"mode must be 'max' or 'avg', got {mode!r}")
    if x.dim() not in (3, 4):
        raise ValueError(f"input must be [N, C, H, W] or [C, H, W], got shape {list(x.shape)}")
    if x.dtype not in _SUPPORTED or out.dtype != x.dtype:
        raise TypeError(f"x and out must share a dtype in {_SUPPORTED}, got {x.dtype}, {out.dtype}")
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    N, C, H, W = x4.shape
    H_out, W_out = pool2d_out_size(H, W, g)
    want = (N, C, H_out, W_out) if x.dim() == 4 else (C, H_out, W_out)
    if tuple(out.shape) != want:
        raise ValueError(f"out must have shape {list(want)}, got {list(out.shape)}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if mode == "avg" and g.dilation != (1, 1):
        raise ValueError("avg_pool2d has no dilation")
    R = N * C * H_out
    if R == 0 or W_out == 0:
        return out
    p = plan or pool2d_plan(R, W_out, g)
    n_col_blocks = triton.cdiv(W_out, p.block_w)
    x_span = sum((s - 1) * abs(st) for s, st in zip(x4.shape, x4.stride()))
    use_int64 = (max(x_span, R * W_out) + (p.block_r + 1) * max(p.block_w, W_out)
                 + abs(x4.stride(2)) * (g.kernel[0] * g.dilation[0] + g.padding[0])
                 + abs(x4.stride(3)) * (g.kernel[1] * g.dilation[1] + g.padding[1])
                 > _INT32_LIMIT)
    kh, kw = g.kernel
    grid = (triton.cdiv(R, p.block_r) * n_col_blocks,)
    _pool2d_kernel[grid](
        x4, out,
        R, C, H, W, H_out, W_out, n_col_blocks,
        x4.stride(0), x4.stride(1), x4.stride(2), x4.stride(3),
        kh, kw, g.stride[0], g.stride[1], g.padding[0], g.padding[1],
        g.dilation[0], g.dilation[1],
        float(divisor_override) if divisor_override is not None else 1.0,
        KH_C=kh if p.unroll else 1, KW_C=kw if p.unroll else 1,
        UNROLL=p.unroll, IS_MAX=(mode == "max"),
        COUNT_INCLUDE_PAD=bool(count_include_pad), HAS_DIVISOR=divisor_override is not None,
        BLOCK_R=p.block_r, BLOCK_W=p.block_w, USE_INT64=use_int64,
        num_warps=p.num_warps,
    )
    return out
