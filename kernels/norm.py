"""Row normalisations: RMSNorm, LayerNorm and vLLM's fused residual-add RMSNorm.

Plain functions; the dispatch classes are built in :mod:`opspec.kernels.norm_impl`.

* :func:`rms_norm_reference`, :func:`layer_norm_reference`,
  :func:`fused_add_rms_norm_reference` -- the torch references (float32 math, or float64
  for float64 inputs, one rounding back to the input dtype).
* :func:`norm_fwd_triton` -- the Triton launcher behind all three, writing into ``out``
  (and, for the fused op, into ``residual``).

Every op here views its input as ``[R, N]``: ``R`` rows of ``N`` elements, each row
normalised on its own. The work is bound by HBM bandwidth (``R * N`` elements read and
written once, the weight and bias once per program), so the launcher picks the layout in
plain Python from ``N`` and ``R``, with no autotuning at call time:

* **a row in registers** (``next_power_of_2(N) <= 32768``): a tile of ``ROWS`` whole rows
  (``ROWS > 1`` only for short rows, so that a tile still moves a few thousand elements)
  is read once and written once; the statistics are summed in float32 across the
  program's warps, LayerNorm's variance from the centred row in registers. The weight and
  bias are loaded once per program, before the rows, so that their latency overlaps the
  row loads. ``num_warps`` sets the elements each thread holds: 32 on large grids, where
  the rows in flight per SM (bounded by its registers) keep HBM busy, fewer on decode
  grids (see :func:`norm_config`). Triton specialises a unit column stride and sizes that
  are multiples of 16, so contiguous rows load and store as 128-bit vectors.
* **a looped row** (longer rows): one program per row walks it in 4096-element chunks,
  once for the statistics (the sum of squares; for LayerNorm a per-lane Welford mean and
  sum of squared deviations, merged at the end, which stays accurate when the mean is large)
  and once to write the result, re-reading the row mostly from L2.

Offsets are computed in int64 when any of them could pass ``2**31 - 1``.
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch

__all__ = [
    "DEFAULT_RMS_EPS",
    "MAX_REGISTER_BLOCK",
    "NormConfig",
    "fused_add_rms_norm_reference",
    "fused_add_rms_norm_triton",
    "layer_norm_reference",
    "layer_norm_triton",
    "norm_config",
    "norm_fwd_triton",
    "rms_norm_reference",
    "rms_norm_triton",
]

#: torch's eps when ``rms_norm`` gets ``eps=None``: the machine epsilon of the computation
#: dtype, float32 for float16, bfloat16 and float32 inputs.
DEFAULT_RMS_EPS = torch.finfo(torch.float32).eps

#: The longest row (as a power of two) held in registers; longer rows take the looped kernel.
#: 32768 at 32 warps is 32 fp32 values a thread, one program per SM (63-64 registers for
#: sm_90 with the affine parameters loaded late; no spill in bf16, 24-48 bytes of stack in
#: fp32). Measured on an H200, the looped kernel ran LayerNorm of [2048, 32768] at 2.38
#: TB/s (bf16) and 2.34 TB/s (fp32): its second read of 2048 x 64-128 KiB rows, 128-256 MiB
#: in all, comes mostly from HBM; in registers the row is read once.
MAX_REGISTER_BLOCK = 32768
#: Above this row block, the register kernel always loads the affine parameters late (32
#: warps cap a thread at 64 registers; early loads spill 80-200 bytes).
_LATE_AFFINE_BLOCK = 16384
#: Chunk of the looped kernel.
_LOOP_BLOCK = 4096
#: Elements a program of the register kernel covers at least (short rows are packed).
_MIN_TILE = 4096
#: Streaming multiprocessors of an H200, and a grid that gives each a few programs.
_SMS = 132
_TARGET_PROGRAMS = 4 * _SMS
_INT32_LIMIT = 2**31 - 1

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


# -- references -------------------------------------------------------------------------------

def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _norm_dims(x: torch.Tensor, normalized_shape: Sequence[int]) -> tuple[int, ...]:
    k = len(normalized_shape)
    if k < 1:
        raise ValueError("normalized_shape must have at least one axis")
    if tuple(x.shape[x.dim() - k:]) != tuple(normalized_shape) or x.dim() < k:
        raise ValueError(f"input of shape {list(x.shape)} does not end in normalized_shape "
                         f"{list(normalized_shape)}")
    return tuple(range(x.dim() - k, x.dim()))


def rms_norm_reference(x: torch.Tensor, normalized_shape: Sequence[int],
                       weight: torch.Tensor | None = None,
                       eps: float | None = None) -> torch.Tensor:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the trailing ``normalized_shape`` axes,
    in float32 (float64 for float64 input), rounded once to ``x.dtype``. ``eps=None`` is
    torch's default, :data:`DEFAULT_RMS_EPS`."""
    dims = _norm_dims(x, normalized_shape)
    eps = DEFAULT_RMS_EPS if eps is None else float(eps)
    xc = x.to(_compute_dtype(x.dtype))
    if xc.numel() == 0:
        return torch.empty_like(x)
    y = xc * torch.rsqrt(xc.square().mean(dim=dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(xc.dtype)
    return y.to(x.dtype)


def layer_norm_reference(x: torch.Tensor, normalized_shape: Sequence[int],
                         weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                         eps: float = 1e-5) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing
    ``normalized_shape`` axes (biased variance), in float32 (float64 for float64 input),
    rounded once to ``x.dtype``."""
    dims = _norm_dims(x, normalized_shape)
    xc = x.to(_compute_dtype(x.dtype))
    if xc.numel() == 0:
        return torch.empty_like(x)
    mean = xc.mean(dim=dims, keepdim=True)
    centred = xc - mean
    var = centred.square().mean(dim=dims, keepdim=True)
    y = centred * torch.rsqrt(var + float(eps))
    if weight is not None:
        y = y * weight.to(xc.dtype)
    if bias is not None:
        y = y + bias.to(xc.dtype)
    return y.to(x.dtype)


def fused_add_rms_norm_reference(x: torch.Tensor, residual: torch.Tensor,
                                 weight: torch.Tensor,
                                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``fused_add_rms_norm`` without writing: returns ``(new_input, new_residual)``
    where ``new_residual = x + residual`` rounded to the dtype (as it is stored) and
    ``new_input = rms_norm(new_residual, [D], weight, eps)``."""
    s = (x.to(_compute_dtype(x.dtype)) + residual.to(_compute_dtype(x.dtype))).to(x.dtype)
    return rms_norm_reference(s, (x.shape[-1],), weight, eps), s


# -- kernels ----------------------------------------------------------------------------------

@triton.jit
def _norm_fwd_rows_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr,
    M, N, eps,
    stride_xm, stride_xn, stride_rm, stride_rn, stride_ym, stride_yn, stride_w, stride_b,
    ROWS: tl.constexpr, TILES: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, USE_INT64: tl.constexpr,
    LATE_AFFINE: tl.constexpr,
):
    """``TILES`` tiles of ``ROWS`` whole rows per program, one after the other, each row held
    in registers (``BLOCK_N >= N``). The weight and bias are loaded once per program, before
    the rows so that their latency overlaps the row loads; or, with ``LATE_AFFINE``, once
    per tile after its statistics, which keeps fewer registers live while the rows load
    (more programs per SM, for an L2 round trip per tile)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    if USE_INT64:
        cols = cols.to(tl.int64)
    col_mask = cols < N

    if HAS_WEIGHT and not LATE_AFFINE:
        w = tl.load(w_ptr + cols * stride_w, mask=col_mask, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
    if HAS_BIAS and not LATE_AFFINE:
        b = tl.load(b_ptr + cols * stride_b, mask=col_mask, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)

    for t in tl.static_range(TILES):
        rows = (pid * TILES + t) * ROWS + tl.arange(0, ROWS)
        if USE_INT64:
            rows = rows.to(tl.int64)
        mask = (rows < M)[:, None] & col_mask[None, :]

        x_offs = rows[:, None] * stride_xm + cols[None, :] * stride_xn
        x = tl.load(x_ptr + x_offs, mask=mask, other=0.0, eviction_policy="evict_first")
        x = x.to(tl.float32)
        if HAS_RESIDUAL:
            # residual += input, rounded to the stored dtype; the norm is of the stored value.
            r_offs = rows[:, None] * stride_rm + cols[None, :] * stride_rn
            r = tl.load(r_ptr + r_offs, mask=mask, other=0.0, eviction_policy="evict_first")
            s = (x + r.to(tl.float32)).to(r_ptr.dtype.element_ty)
            tl.store(r_ptr + r_offs, s, mask=mask)
            x = s.to(tl.float32)

        if IS_RMS:
            rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
            y = x * rstd[:, None]
        else:
            mean = tl.sum(x, axis=1) / N
            xc = tl.where(mask, x - mean[:, None], 0.0)
            rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
            y = xc * rstd[:, None]
        if HAS_WEIGHT:
            if LATE_AFFINE:
                w = tl.load(w_ptr + cols * stride_w, mask=col_mask, other=0.0,
                            eviction_policy="evict_last").to(tl.float32)
            y = y * w[None, :]
        if HAS_BIAS:
            if LATE_AFFINE:
                b = tl.load(b_ptr + cols * stride_b, mask=col_mask, other=0.0,
                            eviction_policy="evict_last").to(tl.float32)
            y = y + b[None, :]
        y_offs = rows[:, None] * stride_ym + cols[None, :] * stride_yn
        tl.store(y_ptr + y_offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """Chan's merge of two (mean, sum of squared deviations, count) partials."""
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _norm_fwd_looped_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr,
    N, eps,
    stride_xm, stride_xn, stride_rm, stride_rn, stride_ym, stride_yn, stride_w, stride_b,
    BLOCK: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, USE_INT64: tl.constexpr,
):
    """One row per program, walked in ``BLOCK`` chunks (rows too long for registers): one
    pass for the statistics, one to normalise and write."""
    row = tl.program_id(0)
    base = tl.arange(0, BLOCK)
    if USE_INT64:
        row = row.to(tl.int64)
        base = base.to(tl.int64)
    x_row = x_ptr + row * stride_xm
    r_row = r_ptr + row * stride_rm
    y_row = y_ptr + row * stride_ym

    # Pass 1: the sum of squares (RMSNorm), or per lane a running mean and sum of squared
    # deviations (LayerNorm, Welford: accurate when the mean is large against the spread).
    # A lane takes one element of each chunk, so after chunk k an active lane has seen k + 1
    # elements; only the last chunk has inactive lanes, and it leaves them as they were.
    # The fused op also writes the new residual here and reads it back in pass 2.
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    m2 = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(0, tl.cdiv(N, BLOCK)):
        cols = k * BLOCK + base
        m = cols < N
        x = tl.load(x_row + cols * stride_xn, mask=m, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            r = tl.load(r_row + cols * stride_rn, mask=m, other=0.0).to(tl.float32)
            s = (x + r).to(r_ptr.dtype.element_ty)
            tl.store(r_row + cols * stride_rn, s, mask=m)
            x = s.to(tl.float32)
        if IS_RMS:
            acc += x * x
        else:
            inv_n = 1.0 / (k + 1.0)
            delta = tl.where(m, x - acc, 0.0)
            acc += delta * inv_n
            m2 += delta * (x - acc)
    if HAS_RESIDUAL:
        tl.debug_barrier()  # the residual just written is read back below

    if IS_RMS:
        mean = 0.0
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    else:
        # Elements each lane saw: one per full chunk, one more where the last chunk reached.
        full = N // BLOCK
        cnt = (full + (base < N - full * BLOCK).to(tl.int32)).to(tl.float32)
        mean, m2_row, _ = tl.reduce((acc, m2, cnt), 0, _welford_combine)
        rstd = tl.rsqrt(m2_row / N + eps)

    # Pass 2: normalise and write.
    for start in range(0, N, BLOCK):
        cols = start + base
        m = cols < N
        if HAS_RESIDUAL:
            x = tl.load(r_row + cols * stride_rn, mask=m, other=0.0).to(tl.float32)
        else:
            x = tl.load(x_row + cols * stride_xn, mask=m, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        y = (x - mean) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols * stride_w, mask=m, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + cols * stride_b, mask=m, other=0.0).to(tl.float32)
        tl.store(y_row + cols * stride_yn, y.to(y_ptr.dtype.element_ty), mask=m)


# -- launch configuration ---------------------------------------------------------------------

class NormConfig(tuple):
    """``(looped, rows, tiles, block, num_warps)``: the launch for ``[M, N]``. The register
    kernel runs ``cdiv(M, rows * tiles)`` programs, each taking ``tiles`` tiles of ``rows``
    rows in turn; the looped kernel one program per row (``rows == tiles == 1``) walking it
    in ``block``-element chunks."""

    __slots__ = ()

    def __new__(cls, looped: bool, rows: int, tiles: int, block: int, num_warps: int):
        return super().__new__(cls, (looped, rows, tiles, block, num_warps))

    looped = property(lambda self: self[0])
    rows = property(lambda self: self[1])
    tiles = property(lambda self: self[2])
    block = property(lambda self: self[3])
    num_warps = property(lambda self: self[4])


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=4096)
def norm_config(M: int, N: int, *, max_register_block: int = MAX_REGISTER_BLOCK,
                loop_block: int = _LOOP_BLOCK) -> NormConfig:
    """The launch for ``M`` rows of ``N`` elements (the element size does not change it: the
    math is float32 whatever the input dtype). Memoised: a call costs a dict lookup.

    A row fits in registers when ``next_power_of_2(N) <= max_register_block``. Short rows
    are packed ``rows`` to a tile of up to 4096 elements, fewer while the grid would hold
    under ``4 * 132`` programs. The warp count sets the elements each thread holds:

    * a large grid (``>= 4 * 132`` programs): 32 elements a thread. HBM is kept busy by the
      rows in flight, and those are bounded by the registers of an SM: compiled for sm_90,
      a bfloat16 RMSNorm of 8192 takes 64 registers with 8 warps (4 programs, 64 KiB of
      rows in flight per SM) against 37 with 16 warps (3 programs, 48 KiB);
    * a smaller grid: 16 elements a thread, and 8 under one program per SM (decode), so
      that the few programs finish sooner;

    between 1 and 32 warps. A program takes one tile (``tiles == 1``): holding the weight
    across several tiles costs registers (64 -> 80 for two tiles of 8192 in bfloat16) and
    so rows in flight. Longer rows take the looped kernel with ``loop_block``-element
    chunks and 8 warps.
    """
    block_n = _next_pow2(max(N, 1))
    if block_n > max_register_block:
        block = min(loop_block, block_n)
        return NormConfig(True, 1, 1, block, max(1, min(8, block // (32 * 8))))
    rows = max(1, _MIN_TILE // block_n)
    rows = min(rows, _next_pow2(max(M, 1)))
    while rows > 1 and _cdiv(M, rows) < _TARGET_PROGRAMS:
        rows //= 2
    programs = _cdiv(M, rows)
    per_thread = 32 if programs >= _TARGET_PROGRAMS else 16 if programs >= _SMS else 8
    num_warps = max(1, min(32, rows * block_n // (32 * per_thread)))
    return NormConfig(False, rows, 1, block_n, num_warps)


# -- launchers --------------------------------------------------------------------------------

def _as_rows(t: torch.Tensor, R: int, N: int) -> tuple[torch.Tensor, bool]:
    """``t`` as ``[R, N]``, and whether that is a copy: a view where the strides allow it,
    else a contiguous copy (which a caller that writes ``t`` copies back)."""
    try:
        return t.view(R, N), False
    except RuntimeError:
        return t.reshape(R, N).contiguous(), True


def _as_vector(t: torch.Tensor, N: int) -> torch.Tensor:
    return t if t.dim() == 1 else t.reshape(N)


def norm_fwd_triton(x: torch.Tensor, out: torch.Tensor, N: int, eps: float, *,
                    rms: bool, weight: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None,
                    residual: torch.Tensor | None = None,
                    config: NormConfig | None = None,
                    late_affine: bool | None = None) -> torch.Tensor:
    """Normalise every row of ``N`` trailing elements of ``x`` into ``out``; return ``out``.

    ``x`` and ``out`` hold ``R * N`` elements each, of one dtype among float16, bfloat16 and
    float32, and any strides (each is viewed as ``[R, N]``; a layout that cannot be viewed
    so is read through a contiguous copy, and ``out`` written through one and copied
    back). ``out`` may be ``x`` itself (rows are read in full before they are written).
    ``rms`` picks RMSNorm (else LayerNorm); ``weight`` and ``bias`` hold ``N`` elements.
    With ``residual`` (same shape as ``x``), ``residual += x`` is stored first and the
    norm is of the new residual. ``config`` overrides :func:`norm_config` and
    ``late_affine`` the choice of when the weight and bias are loaded (tests). Nothing is
    launched when there is nothing to write. No host sync.

    The host work is kept small (decode calls are bound by it): the launch is memoised by
    ``(R, N)`` and every check reads only shapes, strides, dtypes and devices.
    """
    numel = x.numel()
    dtype, device = x.dtype, x.device
    if dtype not in _SUPPORTED:
        raise TypeError(f"input must be float16, bfloat16 or float32, got {dtype}")
    if N < 0 or (N == 0 and numel != 0) or (N and numel % N):
        raise ValueError(f"the input's {numel} elements are not rows of N = {N}")
    for name, t, n in (("out", out, numel), ("residual", residual, numel),
                       ("weight", weight, N), ("bias", bias, N)):
        if t is None:
            continue
        if t.dtype != dtype:
            raise TypeError(f"{name} must have the input's dtype {dtype}, got {t.dtype}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, the input on {device}")
        if t.numel() != n:
            raise ValueError(f"{name} must hold {n} elements (N = {N}), got {t.numel()}")
    if numel == 0:
        return out
    R = numel // N

    xv, x_copied = _as_rows(x, R, N)
    if out is x:
        ov, out_copied = xv, x_copied
    else:
        ov, out_copied = _as_rows(out, R, N)
    sxm, sxn = xv.stride()
    som, son = ov.stride()
    srm = srn = sw = sb = 0
    rv, res_copied = None, False
    if residual is not None:
        rv, res_copied = _as_rows(residual, R, N)
        srm, srn = rv.stride()
    w = b = None
    if weight is not None:
        w = _as_vector(weight, N)
        sw = w.stride(0)
    if bias is not None:
        b = _as_vector(bias, N)
        sb = b.stride(0)

    cfg = config if config is not None else norm_config(R, N)
    looped, rows, tiles, block, num_warps = cfg
    # The largest offset of the padded launch (whole tiles of rows, whole blocks of
    # columns, masked lanes included) decides int64 offsets.
    if looped:
        rows_ix, cols_ix = R, _cdiv(N, block) * block
        grid = (R,)
    else:
        grid = (_cdiv(R, rows * tiles),)
        rows_ix, cols_ix = grid[0] * rows * tiles, block
    row_stride = max(abs(sxm), abs(som), abs(srm))
    col_stride = max(abs(sxn), abs(son), abs(srn), abs(sw), abs(sb))
    use_int64 = (rows_ix - 1) * row_stride + (cols_ix - 1) * col_stride > _INT32_LIMIT

    dummy = xv  # stands for an absent tensor (its flag is off, it is never read)
    args = (xv, dummy if rv is None else rv, dummy if w is None else w,
            dummy if b is None else b, ov)
    strides = (sxm, sxn, srm, srn, som, son, sw, sb)
    flags = dict(IS_RMS=rms, HAS_RESIDUAL=rv is not None, HAS_WEIGHT=w is not None,
                 HAS_BIAS=b is not None, USE_INT64=use_int64, num_warps=num_warps)
    if looped:
        launch(_norm_fwd_looped_kernel, grid, *args, N, float(eps), *strides, BLOCK=block, **flags)
    else:
        # On large grids, LayerNorm and float32 load the weight and bias after the
        # statistics: compiled for sm_90 this frees 15-50 registers a thread and adds
        # programs per SM (bfloat16 LayerNorm of 8192: 80 -> 63 registers, 3 -> 4 programs;
        # float32 LayerNorm of 4096: 126 -> 72, 4 -> 7), while 16-bit RMSNorm keeps its
        # count and gains nothing from the later load.
        late = (block > _LATE_AFFINE_BLOCK
                or grid[0] >= _TARGET_PROGRAMS and (not rms or dtype == torch.float32)
                if late_affine is None else late_affine)
        launch(_norm_fwd_rows_kernel, grid, *args, R, N, float(eps), *strides, ROWS=rows,
                                    TILES=tiles, BLOCK_N=block, LATE_AFFINE=late, **flags)
    # A written tensor that could not be viewed as rows was computed in a copy.
    if res_copied:
        residual.copy_(rv.view(residual.shape))
    if out_copied:
        out.copy_(ov.view(out.shape))
    return out


def rms_norm_triton(x: torch.Tensor, normalized_shape: Sequence[int],
                    weight: torch.Tensor | None, eps: float | None,
                    out: torch.Tensor) -> torch.Tensor:
    """``F.rms_norm(x, normalized_shape, weight, eps)`` written into ``out``."""
    N = _prod(normalized_shape)
    return norm_fwd_triton(x, out, N, DEFAULT_RMS_EPS if eps is None else eps, rms=True,
                           weight=weight)


def layer_norm_triton(x: torch.Tensor, normalized_shape: Sequence[int],
                      weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                      out: torch.Tensor) -> torch.Tensor:
    """``F.layer_norm(x, normalized_shape, weight, bias, eps)`` written into ``out``."""
    N = _prod(normalized_shape)
    return norm_fwd_triton(x, out, N, eps, rms=False, weight=weight, bias=bias)


def fused_add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float) -> None:
    """vLLM's ``fused_add_rms_norm``: ``residual += x`` then ``x = rms_norm(residual) *
    weight``, both in place, in one pass over each row."""
    norm_fwd_triton(x, x, x.shape[-1] if x.dim() else 1, eps, rms=True, weight=weight,
                    residual=residual)


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
