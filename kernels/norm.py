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
plain Python from ``N`` and ``R`` (:func:`norm_config`, its constants in
:data:`NORM_TUNING`), with no autotuning at call time:

* **rows in registers** (``rows``): a tile of ``ROWS`` whole rows (``ROWS > 1`` only for
  short rows, so that a tile still moves a few thousand elements) is read once and written
  once; the statistics are summed in float32 across the program's warps, LayerNorm's
  variance from the centred row in registers. On large grids a program takes a few
  consecutive tiles, loading the next while it reduces and writes the current one. The
  weight and bias are loaded once per program before the rows, or per tile after the
  statistics where registers are short. ``num_warps`` sets the elements each thread
  holds: 32 on large grids, where the rows in flight per SM (bounded by its registers)
  keep HBM busy, fewer on decode grids. Triton specialises a unit column stride and sizes
  that are multiples of 16, so contiguous rows load and store as 128-bit vectors.
* **cooperative chunks** (``coop``, rows over 16384 elements, no residual, output apart
  from the input): one program per chunk of 8192, holding it in registers; a row's
  programs exchange their partial statistics through global memory and an arrival count,
  then each writes its chunk. One read and one write, several programs per SM.
* **a looped row** (``looped``, longer rows that may not take ``coop``): one program per
  row walks it in 4096-element chunks, once for the statistics (the sum of squares; for
  LayerNorm a per-lane Welford mean and sum of squared deviations, merged at the end,
  which stays accurate when the mean is large) and once to write the result.

Offsets are computed in int64 when any of them could pass ``2**31 - 1``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch

__all__ = [
    "DEFAULT_RMS_EPS",
    "MAX_REGISTER_BLOCK",
    "NORM_TUNING",
    "NormConfig",
    "NormTuning",
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

# -- launch table -----------------------------------------------------------------------------

class NormTuning(NamedTuple):
    """Every tunable of the family's launches (read by :func:`norm_config` and the launcher;
    no autotuning at call time). benchmarks/normsoftmax_sweep.py times alternatives on an
    H200 and prints the fields a better variant changes. Register counts quoted are ptxas 13
    for sm_90."""

    #: Elements a program of the register kernel covers at least: rows shorter than this
    #: are packed into one tile (fewer while the grid would hold under ``programs`` per SM).
    min_tile: int
    #: Programs per SM below which packing stops (a large grid for the warp choice too).
    programs: int
    #: Elements a thread holds on a large grid, on a grid of at least one program per SM,
    #: and on a smaller one (decode: the few programs should finish soon); on large grids
    #: at most ``max_warps`` warps (more where a thread would hold over 32).
    per_thread: tuple[int, int, int]
    max_warps: int
    #: Consecutive tiles a program takes (a power of two) on a grid that keeps at least
    #: ``tiles_min_programs`` programs per SM once divided; the next tile is loaded while
    #: the current one is reduced and written.
    tiles: int
    tiles_min_programs: int
    #: Whether the register kernel loads the weight and bias after the statistics: None is
    #: the launcher's rule (see :func:`norm_fwd_triton`), True or False forces it.
    late: bool | None
    #: Rows longer than ``coop_min_block`` (as a power of two) are cut into chunks of
    #: ``coop_block`` elements, one program of ``coop_warps`` warps each, at most
    #: ``coop_max_chunks`` a row (all of a row's programs must be resident at once).
    coop_min_block: int
    coop_block: int
    coop_warps: int
    coop_max_chunks: int
    #: The longest row (a power of two) held whole in one program's registers where
    #: ``coop`` may not run, and the chunk of the looped kernel for longer rows.
    max_register_block: int
    loop_block: int


#: Why these values:
#: * Tiles of 8192 elements (two rows of 4096) at 16 warps, 16 a thread, affine parameters
#:   loaded late, on large grids (``per_thread`` 8 applies to tiles under 8192). Measured
#:   on an H200 with tiles of one row at 32 a thread (bf16 RMSNorm of 4096: 4 warps, 64
#:   registers, 8 programs, i.e. 32 warps and 64 KiB of rows per SM), rows of 3584 and
#:   7168 ran at 3.71 and 3.88 TB/s (117 and 235 MB moved) and rows of 8192 at 3.85 (512
#:   MB: 8 warps, 4 programs, 32 warps and 64 KiB of rows per SM), where torch.compile's
#:   reduction reached 4.17 and the softmax rows kernel 4.15 on the same bytes (bf16 rows
#:   of 8192 at 16 warps, 31 registers: 4 programs, 64 warps and 64 KiB per SM). This is
#:   that shape: two rows of 4096 at 16 warps take 32 registers (bf16 RMSNorm, LayerNorm,
#:   the fused op), 4 programs, 64 warps and 64 KiB of rows per SM; rows of 8192 take 16 a
#:   thread, the same counts.
#: * ``tiles=1``: the next tile loaded ahead keeps loads in flight through a program's
#:   reductions, stores and replacement, but costs registers (two tiles of the above: 40,
#:   3 programs); the sweep times 2.
#: * ``coop`` for rows over 16384: a whole 32768 row in registers takes 32 warps at 64
#:   registers, one program per SM, which ran LayerNorm of [2048, 32768] at 2.84 TB/s
#:   (bf16) and 3.39 (fp32) on an H200: nothing overlaps its load, reduction and store.
#:   Chunks of 8192 at 8 warps take 57-64 registers (bf16), 76-80 (fp32): 3-4 programs,
#:   a quarter of a row each, per SM; 64 chunks is far below 132 SMs x 3.
#: * ``max_register_block=32768`` where the row is written in place (no ``coop``): the
#:   looped kernel ran those rows at 2.38 TB/s, its second read mostly from HBM.
#: * H200 sweep (benchmarks/normsoftmax_sweep.py, 2026-11-30): the values above lost to
#:   the former table on most rows (LayerNorm dsv3 74.2 against 64.4 us, DiT-XL 57.0
#:   against 41.8, RMSNorm dsv3-q-a 33.9 against 30.0, fused Llama-3-8B 39.4 against
#:   37.5; RMSNorm qwen2.5 33.5 against 36.7 the one clear gain), and ``coop`` lost to a
#:   whole row in registers on the 32k LayerNorm (124.0 against 92.7 us in bf16). So the
#:   table is the former one again: tiles of at least 4096 elements at 32 a thread on
#:   large grids (16 on one program per SM, 8 below), at most 32 warps, the affine
#:   parameters late for LayerNorm and float32, rows up to 32768 in registers, no
#:   ``coop`` (kept, and timed by the sweep, for a later table).
NORM_TUNING = NormTuning(min_tile=4096, programs=4, per_thread=(32, 16, 8), max_warps=32,
                         tiles=1, tiles_min_programs=8, late=None, coop_min_block=1 << 30,
                         coop_block=8192, coop_warps=8, coop_max_chunks=64,
                         max_register_block=32768, loop_block=4096)
MAX_REGISTER_BLOCK = NORM_TUNING.max_register_block
#: Above this row block, the register kernel always loads the affine parameters late (32
#: warps cap a thread at 64 registers; early loads spill 80-200 bytes).
_LATE_AFFINE_BLOCK = 16384
#: Streaming multiprocessors of an H200 (the tables are written for it).
_SMS = 132
#: Polls of a row's arrival count before a cooperative program reads the row itself.
_COOP_SPIN = 1 << 16
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
def _norm_tile(x_raw, r_raw, w, b, rows, cols, col_mask, M, N, eps,
               r_ptr, w_ptr, b_ptr, y_ptr,
               stride_rm, stride_rn, stride_ym, stride_yn, stride_w, stride_b,
               IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr,
               HAS_BIAS: tl.constexpr, LATE_AFFINE: tl.constexpr):
    """Normalise a tile of whole rows, loaded as ``x_raw`` (and the residual rows as
    ``r_raw``), and store it. ``w`` and ``b`` are the affine parameters, or with
    ``LATE_AFFINE`` are loaded here, after the statistics (fewer registers live while the
    rows load, for an L2 round trip per tile)."""
    mask = (rows < M)[:, None] & col_mask[None, :]
    x = x_raw.to(tl.float32)
    if HAS_RESIDUAL:
        # residual += input, rounded to the stored dtype; the norm is of the stored value.
        s = (x + r_raw.to(tl.float32)).to(r_ptr.dtype.element_ty)
        tl.store(r_ptr + rows[:, None] * stride_rm + cols[None, :] * stride_rn, s, mask=mask)
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
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn,
             y.to(y_ptr.dtype.element_ty), mask=mask)


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
    """``TILES`` consecutive tiles of ``ROWS`` whole rows per program, each row held in
    registers (``BLOCK_N >= N``). With several tiles, the next tile is loaded (as stored:
    16-bit values two to a register) before the current one is reduced and written, so that
    the program keeps row loads in flight through its reductions and stores, and the SM
    through what would otherwise be a program's end and the next one's start. The weight
    and bias are loaded once per program, before the rows so that their latency overlaps
    the row loads, or (``LATE_AFFINE``) per tile after its statistics, which keeps fewer
    registers live (more programs per SM, for an L2 round trip per tile)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    rows = pid * (TILES * ROWS) + tl.arange(0, ROWS)
    if USE_INT64:
        cols = cols.to(tl.int64)
        rows = rows.to(tl.int64)
    col_mask = cols < N
    w = 0.0
    b = 0.0
    if HAS_WEIGHT and not LATE_AFFINE:
        w = tl.load(w_ptr + cols * stride_w, mask=col_mask, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
    if HAS_BIAS and not LATE_AFFINE:
        b = tl.load(b_ptr + cols * stride_b, mask=col_mask, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)

    mask = (rows < M)[:, None] & col_mask[None, :]
    x_next = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask,
                     other=0.0, eviction_policy="evict_first")
    r_next = x_next
    if HAS_RESIDUAL:
        r_next = tl.load(r_ptr + rows[:, None] * stride_rm + cols[None, :] * stride_rn,
                         mask=mask, other=0.0, eviction_policy="evict_first")
    for t in tl.static_range(TILES):
        x = x_next
        r = r_next
        cur = rows
        if t + 1 < TILES:
            # The next tile (past the last row: its lanes masked, no traffic).
            rows = rows + ROWS
            mask = (rows < M)[:, None] & col_mask[None, :]
            x_next = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn,
                             mask=mask, other=0.0, eviction_policy="evict_first")
            if HAS_RESIDUAL:
                r_next = tl.load(r_ptr + rows[:, None] * stride_rm + cols[None, :] * stride_rn,
                                 mask=mask, other=0.0, eviction_policy="evict_first")
        _norm_tile(x, r, w, b, cur, cols, col_mask, M, N, eps, r_ptr, w_ptr, b_ptr, y_ptr,
                   stride_rm, stride_rn, stride_ym, stride_yn, stride_w, stride_b,
                   IS_RMS, HAS_RESIDUAL, HAS_WEIGHT, HAS_BIAS, LATE_AFFINE)


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """Chan's merge of two (mean, sum of squared deviations, count) partials."""
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _norm_fwd_coop_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
    M, N, G, spin, eps,
    stride_xm, stride_xn, stride_ym, stride_yn, stride_w, stride_b,
    BLOCK: tl.constexpr, FB: tl.constexpr, G_POW2: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    USE_INT64: tl.constexpr,
):
    """Long rows (no residual, ``y`` not aliasing ``x``): each row is cut into ``G`` chunks
    of ``BLOCK`` elements, one program per chunk holding it in registers; the ``G`` programs
    of a row publish their chunk's statistics, wait until the row's ``G`` partials are in
    and write their chunk from registers. One read and one write of HBM, and several
    programs per SM (a whole row of 32768 in registers allows one).

    (row, chunk) pairs are handed out in arrival order (a ticket from an atomic counter),
    not by program id: every program holding a smaller ticket has started, so only the row
    of the newest ticket can wait on programs not yet resident, and those start as soon as
    any finished program frees a slot. No deadlock while ``G`` programs fit on the GPU at
    once (the plan keeps ``G`` far below the resident programs), and a program that still
    waits after ``spin`` polls reads the whole row itself for the statistics (correct
    because nothing in the row is written in place; the interpreter, which runs programs
    one after another, takes it with ``spin == 0`` for all but a row's last chunk)."""
    ticket = tl.atomic_add(cnt_ptr, 1)
    row = ticket // G
    c = ticket - row * G
    offs = tl.arange(0, BLOCK)
    k = tl.arange(0, G_POW2)
    if USE_INT64:
        row = tl.cast(row, tl.int64)
        c = tl.cast(c, tl.int64)
        offs = offs.to(tl.int64)
    x_row = x_ptr + row * stride_xm
    cols = c * BLOCK + offs
    cmask = cols < N
    x = tl.load(x_row + cols * stride_xn, mask=cmask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    # Partials: RMSNorm the sum of squares; LayerNorm the chunk's mean and its sum of
    # squared deviations (merged with Chan's formula: accurate when the mean is large).
    if IS_RMS:
        tl.store(ws_ptr + ticket, tl.sum(x * x, axis=0))
    else:
        n_c = tl.minimum(N - c * BLOCK, BLOCK).to(tl.float32)
        p0 = tl.sum(x, axis=0) / n_c
        xc = tl.where(cmask, x - p0, 0.0)
        tl.store(ws_ptr + ticket, p0)
        tl.store(ws_ptr + M * G + ticket, tl.sum(xc * xc, axis=0))
    # Release: the partials above are visible to whoever sees the incremented count.
    done = tl.atomic_add(cnt_ptr + 1 + row, 1, sem="acq_rel") + 1
    polls = 0
    while (done < G) & (polls < spin):
        done = tl.atomic_add(cnt_ptr + 1 + row, 0, sem="acquire")
        polls += 1
    if done >= G:
        # volatile: bypass L1, which may hold an older copy of the workspace line.
        q0 = tl.load(ws_ptr + row * G + k, mask=k < G, other=0.0, volatile=True)
        if IS_RMS:
            rstd = tl.rsqrt(tl.sum(q0, axis=0) / N + eps)
        else:
            q1 = tl.load(ws_ptr + M * G + row * G + k, mask=k < G, other=0.0, volatile=True)
            cnt = tl.minimum(tl.maximum(N - k * BLOCK, 0), BLOCK).to(tl.float32)
            mean, m2, _ = tl.reduce((q0, q1, cnt), 0, _welford_combine)
            rstd = tl.rsqrt(m2 / N + eps)
    else:
        # The whole row in FB-element steps (per lane: a sum of squares, or a running mean
        # and sum of squared deviations), few registers beside the chunk.
        fo = tl.arange(0, FB)
        if USE_INT64:
            fo = fo.to(tl.int64)
        acc = tl.zeros([FB], dtype=tl.float32)
        m2l = tl.zeros([FB], dtype=tl.float32)
        for j in range(0, tl.cdiv(N, FB)):
            jc = j * FB + fo
            jm = jc < N
            xj = tl.load(x_row + jc * stride_xn, mask=jm, other=0.0).to(tl.float32)
            if IS_RMS:
                acc += xj * xj
            else:
                delta = tl.where(jm, xj - acc, 0.0)
                acc += delta / (j + 1.0)
                m2l += delta * (xj - acc)
        if IS_RMS:
            rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        else:
            full = N // FB
            cnt_l = (full + (fo < N - full * FB).to(tl.int32)).to(tl.float32)
            mean, m2, _ = tl.reduce((acc, m2l, cnt_l), 0, _welford_combine)
            rstd = tl.rsqrt(m2 / N + eps)
    if IS_RMS:
        y = x * rstd
    else:
        y = (x - mean) * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols * stride_w, mask=cmask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols * stride_b, mask=cmask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols * stride_yn, y.to(y_ptr.dtype.element_ty),
             mask=cmask)


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

class NormConfig(NamedTuple):
    """The launch for ``[M, N]``.

    ``kind``: ``"rows"`` -- ``cdiv(M, rows * tiles)`` programs, each taking ``tiles``
    consecutive tiles of ``rows`` whole rows held in registers (``block``, a power of two
    ``>= N``, the row block); ``"coop"`` -- ``cdiv(N, block)`` programs a row, each holding
    a ``block``-element chunk (no residual, output not written over the input);
    ``"looped"`` -- one program a row walking it in ``block``-element chunks, twice.
    ``late``: whether the register kernel loads the weight and bias after the statistics
    (``None``: the launcher's rule)."""

    kind: str
    rows: int
    tiles: int
    block: int
    num_warps: int
    late: bool | None = None


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=4096)
def norm_config(M: int, N: int, *, coop: bool = True,
                tuning: NormTuning = NORM_TUNING) -> NormConfig:
    """The launch for ``M`` rows of ``N`` elements under ``tuning`` (the math is float32
    whatever the input dtype, so the element size does not change it). ``coop``: whether
    the cooperative kernel may run (not with a residual, nor with the output written over
    the input). Memoised: a call costs a dict lookup.

    * ``next_power_of_2(N) > coop_min_block`` with ``coop``: chunks of ``coop_block``,
      while a row takes at most ``coop_max_chunks`` of them;
    * else a row that fits ``max_register_block``: the register kernel. Short rows are
      packed ``rows`` to a tile of up to ``min_tile`` elements, fewer while the grid would
      hold under ``programs`` programs per SM. The warp count (1 to 32) sets the elements
      each thread holds (``per_thread``): large grids (``programs`` per SM), grids of at
      least one program per SM, smaller ones. On grids that keep ``tiles_min_programs``
      per SM once divided, a program takes ``tiles`` tiles, the next loaded ahead;
    * else the looped kernel, ``loop_block``-element chunks and 8 warps.
    """
    t = tuning
    block_n = _next_pow2(max(N, 1))
    if coop and block_n > t.coop_min_block and _cdiv(N, t.coop_block) <= t.coop_max_chunks:
        return NormConfig("coop", 1, 1, t.coop_block, t.coop_warps, t.late)
    if block_n > t.max_register_block:
        block = min(t.loop_block, block_n)
        return NormConfig("looped", 1, 1, block, max(1, min(8, block // (32 * 8))), t.late)
    large_grid = t.programs * _SMS
    rows = max(1, t.min_tile // block_n)
    rows = min(rows, _next_pow2(max(M, 1)))
    while rows > 1 and _cdiv(M, rows) < large_grid:
        rows //= 2
    programs = _cdiv(M, rows)
    large, mid, small = t.per_thread
    per_thread = large if programs >= large_grid else mid if programs >= _SMS else small
    tile = rows * block_n
    num_warps = tile // (32 * per_thread)
    if programs >= large_grid:
        num_warps = min(num_warps, t.max_warps)
    num_warps = max(1, min(32, max(num_warps, tile // (32 * 32))))
    tiles = 1
    while tiles < t.tiles and _cdiv(programs, 2 * tiles) >= t.tiles_min_programs * _SMS:
        tiles *= 2
    return NormConfig("rows", rows, tiles, block_n, num_warps, t.late)


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
    norm is of the new residual. ``config`` overrides :func:`norm_config` (a ``coop``
    config is refused with a residual or with ``out`` in ``x``'s storage) and
    ``late_affine`` the choice of when the weight and bias are loaded (tests, sweeps).
    Nothing is launched when there is nothing to write. No host sync; the cooperative
    kernel allocates a small workspace (its counters zeroed: one fill).

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

    # The cooperative kernel reads other chunks of a row when it falls back: nothing of
    # the row may be written in place meanwhile.
    coop_ok = rv is None and ov.untyped_storage().data_ptr() != xv.untyped_storage().data_ptr()
    cfg = config if config is not None else norm_config(R, N, coop=coop_ok)
    kind, rows, tiles, block, num_warps, cfg_late = cfg
    if kind == "coop" and not coop_ok:
        raise ValueError("the cooperative norm kernel takes no residual and an output apart "
                         "from the input")
    # The largest offset of the padded launch (whole tiles of rows, whole blocks of
    # columns, masked lanes included) decides int64 offsets.
    if kind == "rows":
        if block < N:
            raise ValueError(f"the register kernel's row block {block} is shorter than N = {N}")
        grid = (_cdiv(R, rows * tiles),)
        rows_ix, cols_ix = grid[0] * rows * tiles, block
    elif kind in ("looped", "coop"):
        rows_ix, cols_ix = R, _cdiv(N, block) * block
        grid = (R * _cdiv(N, block),) if kind == "coop" else (R,)
    else:
        raise ValueError(f"unknown norm kernel kind {kind!r}")
    row_stride = max(abs(sxm), abs(som), abs(srm))
    col_stride = max(abs(sxn), abs(son), abs(srn), abs(sw), abs(sb))
    use_int64 = (rows_ix - 1) * row_stride + (cols_ix - 1) * col_stride > _INT32_LIMIT

    dummy = xv  # stands for an absent tensor (its flag is off, it is never read)
    wt = dummy if w is None else w
    bt = dummy if b is None else b
    flags = dict(IS_RMS=rms, HAS_WEIGHT=w is not None, HAS_BIAS=b is not None,
                 USE_INT64=use_int64, num_warps=num_warps)
    if kind == "coop":
        G = grid[0] // R
        # [ticket counter, arrivals per row] zeroed; then two float32 partials per chunk.
        cnt = torch.zeros(1 + R, dtype=torch.int32, device=device)
        ws = torch.empty(2 * R * G, dtype=torch.float32, device=device)
        spin = _COOP_SPIN if device.type == "cuda" else 0
        launch(_norm_fwd_coop_kernel, grid, xv, wt, bt, ov, ws, cnt, R, N, G, spin,
               float(eps), sxm, sxn, som, son, sw, sb, BLOCK=block, FB=min(block, 1024),
               G_POW2=_next_pow2(G), **flags)
    else:
        args = (xv, dummy if rv is None else rv, wt, bt, ov)
        strides = (sxm, sxn, srm, srn, som, son, sw, sb)
        flags["HAS_RESIDUAL"] = rv is not None
        if kind == "looped":
            launch(_norm_fwd_looped_kernel, grid, *args, N, float(eps), *strides,
                   BLOCK=block, **flags)
        else:
            # Late affine loads free registers and add programs per SM (compiled for
            # sm_90: two bfloat16 rows of 4096 at 16 warps, 35 -> 32 registers, 3 -> 4
            # programs; bfloat16 LayerNorm of 8192 at 8 warps, 80 -> 63, 3 -> 4; float32
            # LayerNorm of 4096 at 4 warps, 126 -> 72, 4 -> 7) for an L2 round trip per
            # tile, which on a large grid the other programs' loads cover.
            late = late_affine if late_affine is not None else cfg_late
            if late is None:  # LayerNorm and float32 (see NORM_TUNING), and long blocks
                late = block > _LATE_AFFINE_BLOCK or not rms or x.dtype == torch.float32
            launch(_norm_fwd_rows_kernel, grid, *args, R, N, float(eps), *strides,
                   ROWS=rows, TILES=tiles, BLOCK_N=block, LATE_AFFINE=late, **flags)
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
