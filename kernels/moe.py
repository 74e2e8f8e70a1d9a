"""M-grouped expert GEMM (MoE): ``y[r] = act(x[r] @ w[e(r)]^T)`` with fp32 accumulation.

``w`` is ``[E, N, K]`` (NT: one ``[N, K]`` matrix per expert). Rows belong to experts as
an ``MGroupedLayout`` says (see ``manifest/spec/moe.yaml``):

* contiguous, ``x: [M, K]``, ``metadata`` either ``per_row`` (``[M]`` expert id of each
  row) or ``physical_psum`` (``[E]`` end of each expert's rows; expert ``e`` starts at the
  end of ``e - 1`` rounded up to ``alignment``; rows between an end and the next start,
  and past the last end, belong to no expert and give 0);
* masked, ``x: [E, max_m, K]``, ``metadata = masked_m: [E]`` valid rows per expert; the
  other rows give 0.

``activation='silu_and_mul'`` takes w's rows as ``[gate | up]`` and returns
``silu(gate) * up`` (``N // 2`` columns), computed from the fp32 accumulators.

Plain functions; the dispatch classes are in ``moe_impl.py``.

* :func:`moe_grouped_gemm_reference` -- torch reference: one matmul per expert (fp32 on
  CPU; native dtype with fp32 accumulation on CUDA), the activation in fp32.
* :func:`moe_grouped_gemm_triton` -- the Triton kernels:

  - contiguous: one program per ``BLOCK_M x BLOCK_N`` output tile, grouped program order.
    The program reads the expert of each of its rows on the device (from ``per_row``
    directly; from ``physical_psum`` by a binary search for the ends at or before the
    row). With
    aligned packing ``BLOCK_M`` divides ``alignment``, so a tile holds one expert's rows
    (and padding) and runs one K loop; a tile that spans experts (tight packing) runs one
    K loop per expert it holds and keeps each expert's rows. Rows of no expert keep 0.
  - contiguous, tight packing with ``physical_psum`` ends: tiles start at each expert's
    first row (the tile of each program found from the experts' tile counts on the
    device), so no tile spans experts; extra tiles zero the rows past the last end.
  - masked: a 2-D grid, ``(m tile x n tile, expert)``; a tile past ``masked_m[e]`` runs
    no K step (it reads nothing) and stores zeros.

  These pointer kernels load A and B unmasked in M/N (indices wrap or clamp, the store
  mask drops the extra rows and columns), full K blocks unmasked and one masked K tail,
  like ``kernels/gemm.py``. With silu_and_mul a program holds two accumulators, gate
  (w rows ``n``) and up (rows ``n + N // 2``), and applies the activation before its
  store.

  - on Hopper (compute capability >= 9.0, fp16/bf16, operands TMA can describe) the same
    tiles through TMA tensor descriptors: every masked call, contiguous calls whose tiles
    each hold one expert (aligned packing), and the tight packing with ``physical_psum``
    ends (its tiles from each expert's first row: x's box starts at any row, the rows
    stored by masked pointer stores); the pointer kernels serve the rest.
  - on Hopper, contiguous, a configuration with ``kernel='span'`` (selectable; the table
    leaves it off, see ``_SPAN_SILU``): 128-row TMA tiles that may hold several experts,
    one K loop per expert present, each expert's rows kept by the store;
    ``'span_persistent'``: the same with one program per SM walking the tiles.

Tile choices are plain Python in :func:`moe_config_for` (constants below). fp32 inputs
run with ``input_precision="tf32x3"`` (three TF32 products: float32 accuracy on tensor
cores; plain TF32 is never used). On CPU the Triton interpreter's ``tl.dot`` is wrong
for bf16: test the kernels in fp16/fp32 there. Every kernel here is launched dependent
where the device allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import element_extent as _extent
from opspec.kernels.tiling import INT32_LIMIT
from opspec.kernels.tiling import grouped_tile
from opspec.kernels.tiling import sm_count

__all__ = [
    "MoeConfig",
    "tma_eligible",
    "moe_config_for",
    "moe_grouped_gemm_reference",
    "moe_grouped_gemm_triton",
]

_INT32_LIMIT = INT32_LIMIT
_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


class MoeConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    # Contiguous layouts on the TMA path: "tile" runs the kernel whose tiles each hold one
    # expert (BLOCK_M divides the alignment); "span" the kernel whose tiles may hold several
    # experts (one K loop per expert present); "span_persistent" that kernel with one
    # program per SM walking the tiles. Ignored by the pointer kernels and masked layouts.
    kernel: str = "tile"
    # span kernels: a tile of one expert stores through its TMA descriptor (else, and for
    # tiles of several experts, masked pointer stores).
    tma_store: bool = True


# --- the table (Hopper; H200 sweep, benchmarks/moe_sweep.py, 2026-11-30) -----------------
# Shared memory per stage is (BLOCK_M + BLOCK_N * (2 if silu_and_mul else 1)) * BLOCK_K * 2
# bytes: 48 KB for 128 x 256 x 64 and for 128 x (2 x 128) x 64; 4 stages = 192 KB.
# Four stages on the alignment-128 rows: dsv3-down-prefill 499 -> 421 us (482 -> 571
# TFLOP/s), dsv3-gate-up-prefill 803 -> 747, dsv3-gate-up-ep32 2902 -> 2610 (737 TFLOP/s).
_PREFILL = MoeConfig(128, 256, 64, 8, 8, 4)  # plain GEMM, M tiles of 128
_PREFILL_SILU = MoeConfig(128, 128, 64, 8, 8, 4)  # two accumulators: 2 x 128 weight rows
# The segments kernel (pointer loads, tight packing with expert ends) keeps 3 stages: the
# sweep timed 4 only on the TMA kernels.
_SEGMENTS_STAGES = 3
#: Tight packing with expert ends on the TMA path (Hopper, float16/bfloat16): the segments
#: tiles with x and w read through descriptors (``_moe_segments_tma_kernel``), 4 stages as
#: the prefill tiles. H200 (benchmarks/tie_probe.py, 2026-12-01, us), Qwen3-30B's gate-up
#: (M 32768, 128 experts, silu_and_mul): pointer loads 402.3, TMA 128 x 128 x 64 at 4
#: stages 361.6, 3 stages 375.2, 2 stages 526.4, 64 x 256 x 64 at 3 390.4, 64 x 128 at 4
#: warps 445.5; torch.compile 372.8, eager (torch._grouped_mm) 592.6. In the bench that
#: followed: 396.5 -> 360.7 us (compile 371.2).
_SEGMENTS_TMA = True
_MID = MoeConfig(64, 256, 64, 8, 8, 3)  # alignment 16..64: 64-row tiles, 2 warpgroups on N
# 64 x 256 tiles with silu_and_mul too: mixtral-gate-up-prefill (alignment 64) ran 1946 us
# with 64 x 128 (0.96x eager), 1386 with 64 x 256 (1.34x eager), and 1700 (1.13x) with
# every expert boundary moved 64 rows, where the 128-row span tiles below lost to eager
# (1963-2762 us): tiles of one expert are the robust choice when boundaries fall anywhere.
_MID_SILU = MoeConfig(64, 256, 64, 8, 8, 3)
# Alignment 16..64 on the TMA path: 128-row tiles that may hold two (or, below alignment
# 64, more) experts, one K loop per expert present. Off: on the mixtral row they ran
# 1360-1538 us (persistent with pointer stores best) when no boundary fell inside a tile,
# but 1963-2762 us when every boundary did. Set a MoeConfig(..., "span") to use them.
_SPAN_SILU = None
# Without the activation (qwen3-30b-ep16-down, 256 rows an expert, 64 x 256 tiles 39.9
# us): 256 x 128 span tiles ran 23.7 us, but that row's boundaries are all 256-aligned,
# which routing does not give; off for the reason above.
_SPAN = None
# A span tile across a segment boundary runs a second K loop over all its rows: likely at
# every boundary not on a multiple of 128 rows. That costs under about a quarter (the gain
# of 128-row over 64-row tiles) where the average segment, M / E rows, is at least
# _SPAN_MIN_SEGMENT * (128 - alignment) rows (256 at alignment 64, 448 at 16); shorter
# segments keep the tiles of one expert.
_SPAN_MIN_SEGMENT = 4
_SMALL_TILE = MoeConfig(64, 128, 64, 8, 4, 4)  # tiles that may span experts
_SMALL_TILE_SILU = MoeConfig(64, 64, 64, 8, 4, 4)
# Masked (decode): bound by streaming w; 64-row tiles, BLOCK_N 128 (64 with two
# accumulators) so that E x N / BLOCK_N programs fill the GPU.
_MASKED = MoeConfig(64, 128, 64, 1, 4, 4)
_MASKED_SILU = MoeConfig(64, 64, 64, 1, 4, 4)
# fp32: 3xTF32 on tensor cores (float32 accuracy, about 1e-6 relative, as torch's default
# float32 matmul); ieee FMAs on CUDA cores ran a masked decode row at 0.44x of eager on the
# H200. Shared memory per stage is (BLOCK_M + BLOCK_N) * BLOCK_K * 4 bytes.
_FP32 = MoeConfig(64, 64, 32, 8, 4, 3)
_MIN_BLOCK = 16  # tl.dot's smallest tile
_SPAN_KERNELS = ("span", "span_persistent")


def moe_config_for(kind: str, alignment: int, max_m: int, N_out: int, K: int,
                   dtype: torch.dtype, silu: bool, segments: bool = False,
                   tma: bool = False, rows_per_expert: float | None = None) -> MoeConfig:
    """The tile configuration of one call.

    Contiguous: ``BLOCK_M`` divides ``alignment`` where it can (aligned packing with an
    alignment of 16 or more) so that a tile never spans two experts; tight packing
    (alignment 1) uses 64-row tiles, which may span experts, or, with ``segments`` (tight
    packing with expert ends: tiles start at each expert's first row), the 128-row tiles.
    With ``tma`` (the call can take the TMA kernels), alignments of 16 to 64 take the span
    configurations where the table has one (128-row tiles that may hold several experts)
    and the segments are long enough (``rows_per_expert``, M / E; None: assumed long).
    Masked: ``BLOCK_M`` at most ``max_m`` rounded up to a power of two.
    """
    span = None
    if dtype == torch.float32:
        cfg = _FP32
    elif kind == "masked":
        cfg = _MASKED_SILU if silu else _MASKED
    elif segments:  # the segments kernels whatever the prefill entry's kernel
        cfg = (_PREFILL_SILU if silu else _PREFILL)._replace(kernel="tile")
        if not (tma and _SEGMENTS_TMA):  # pointer loads: 3 stages
            cfg = cfg._replace(num_stages=_SEGMENTS_STAGES)
    elif alignment >= 128:
        cfg = _PREFILL_SILU if silu else _PREFILL
    elif alignment >= _MIN_BLOCK:
        span = _SPAN_SILU if silu else _SPAN
        if (not tma or span is None or (rows_per_expert is not None and rows_per_expert
                                        < _SPAN_MIN_SEGMENT * (span.block_m - alignment))):
            span = None
        cfg = span or (_MID_SILU if silu else _MID)
    else:
        cfg = _SMALL_TILE_SILU if silu else _SMALL_TILE
    bm = cfg.block_m
    if kind == "masked":
        bm = min(bm, max(_MIN_BLOCK, triton.next_power_of_2(max_m)))
    elif alignment >= _MIN_BLOCK and not segments and span is None:
        bm = min(bm, alignment)
    bn = min(cfg.block_n, max(_MIN_BLOCK, triton.next_power_of_2(max(N_out, 1))))
    bk = min(cfg.block_k, max(_MIN_BLOCK, triton.next_power_of_2(max(K, 1))))
    # Smaller tiles do not need 8 warps (silu_and_mul's two accumulators count twice).
    warps = cfg.num_warps if bm * bn * (2 if silu else 1) >= 128 * 128 else min(cfg.num_warps, 4)
    return cfg._replace(block_m=bm, block_n=bn, block_k=bk, num_warps=warps)


# --- reference ---------------------------------------------------------------------------


def _rows_of_experts(metadata: torch.Tensor, kind: str, metadata_kind: str, alignment: int,
                     rows: int, experts: int) -> list[tuple[int, torch.Tensor | slice]]:
    """(expert, its rows) of a contiguous layout: a boolean row mask (per_row) or a slice."""
    meta = metadata.tolist()
    if metadata_kind == "per_row":
        ids = metadata.to(torch.int64)
        return [(e, ids == e) for e in sorted(set(meta)) if 0 <= e < experts]
    out, prev = [], 0
    for e, end in enumerate(meta[:experts]):
        start = -(-prev // alignment) * alignment
        end = min(end, rows)
        if end > start:
            out.append((e, slice(start, end)))
        prev = end
    return out


def _act(h: torch.Tensor, silu: bool) -> torch.Tensor:
    if not silu:
        return h
    n = h.shape[-1] // 2
    g, u = h[..., :n], h[..., n:]
    return g * torch.sigmoid(g) * u


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32, or float64 for float64 operands (the bench's reference runs in float64)."""
    return torch.promote_types(dtype, torch.float32)


def _expert_matmul(xe: torch.Tensor, we: torch.Tensor) -> torch.Tensor:
    """``xe @ we^T`` in fp32 (float64 for float64 operands): on CUDA in the native dtype
    (fp32 accumulation), elsewhere from fp32 copies (CPU half matmuls may accumulate
    differently)."""
    acc = _acc_dtype(xe.dtype)
    if xe.is_cuda:
        return torch.matmul(xe, we.t()).to(acc)
    return torch.matmul(xe.to(acc), we.to(acc).t())


def moe_grouped_gemm_reference(x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor,
                               kind: str, metadata_kind: str = "per_row", alignment: int = 1,
                               activation: str = "none") -> torch.Tensor:
    """The M-grouped GEMM in ``x.dtype`` (see the module docstring), one matmul per expert.

    ``kind`` is ``'contiguous'`` or ``'masked'``; ``metadata_kind`` and ``alignment``
    matter for contiguous layouts. Reads the metadata's contents on the host.
    """
    silu = activation == "silu_and_mul"
    E, N, _ = w.shape
    n_out = N // 2 if silu else N
    if kind == "masked":
        y = torch.zeros((*x.shape[:2], n_out), dtype=_acc_dtype(x.dtype), device=x.device)
        for e, m in enumerate(metadata.tolist()[:E]):
            m = max(0, min(m, x.shape[1]))
            if m:
                y[e, :m] = _act(_expert_matmul(x[e, :m], w[e]), silu)
        return y.to(x.dtype)
    y = torch.zeros((x.shape[0], n_out), dtype=_acc_dtype(x.dtype), device=x.device)
    for e, rows in _rows_of_experts(metadata, kind, metadata_kind, alignment, x.shape[0], E):
        y[rows] = _act(_expert_matmul(x[rows], w[e]), silu)
    return y.to(x.dtype)


# --- kernels -----------------------------------------------------------------------------


@triton.jit
def _expert_dot(a_base, offs_am, stride_am, stride_ak, b_base, offs_bn, stride_bn, stride_bk,
                up_off, k_blocks, k_left, offs_k,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                SILU: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """``A @ B`` over ``k_blocks`` full K blocks then (``not EVEN_K``) a ``k_left`` tail;
    with SILU also ``A @ B_up`` (B_up is B moved by ``up_off`` elements). The pointer
    tiles are formed here from scalar bases and index vectors, so that a caller looping
    over experts keeps no second copy of them live."""
    a_ptrs = a_base + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_base + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, k_blocks):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        if SILU:
            bu = tl.load(b_ptrs + up_off)
            acc_up = tl.dot(a, bu, acc_up, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        if k_blocks >= 0:  # a tile with no K steps (k_blocks < 0) reads nothing
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            if SILU:
                bu = tl.load(b_ptrs + up_off, mask=offs_k[:, None] < k_left, other=0.0)
                acc_up = tl.dot(a, bu, acc_up, input_precision=INPUT_PRECISION)
    return acc, acc_up


@triton.jit
def _epilogue(acc, acc_up, SILU: tl.constexpr):
    if SILU:
        return acc / (1.0 + tl.exp(-acc)) * acc_up
    return acc


@triton.jit
def _row_experts(meta_ptr, offs_m, row_ok, E, ALIGN, BLOCK_M: tl.constexpr,
                 BLOCK_E: tl.constexpr, LOG_E: tl.constexpr, PER_ROW: tl.constexpr):
    """The expert of each row of a contiguous layout's tile; -1 for no expert."""
    if PER_ROW:
        ids = tl.load(meta_ptr + offs_m, mask=row_ok, other=-1)
        ids = tl.where((ids >= 0) & (ids < E), ids, -1)  # never a weight out of range
    else:
        # Expert of row r: the number of experts whose rows end at or before r (the ends
        # never decrease), by a branch-free binary search, steps BLOCK_E, ..., 2, 1 ...
        ids = tl.zeros((BLOCK_M,), dtype=tl.int32)
        for i in tl.static_range(LOG_E + 1):
            cand = ids + (BLOCK_E >> i)
            end = tl.load(meta_ptr + cand - 1, mask=row_ok & (cand <= E), other=2147483647)
            ids = tl.where(end <= offs_m, cand, ids)
        prev_end = tl.load(meta_ptr + ids - 1, mask=row_ok & (ids > 0) & (ids < E), other=0)
        start = (prev_end + ALIGN - 1) // ALIGN * ALIGN
        # ... if r lies at or past that expert's aligned start (else a padding row).
        ids = tl.where(row_ok & (ids < E) & (offs_m >= start), ids, -1)
    return ids


@triton.jit
def _moe_contiguous_kernel(
    x_ptr, w_ptr, meta_ptr, y_ptr,
    M, N_OUT, K, E, ALIGN,
    stride_xm, stride_xk, stride_we, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr, LOG_E: tl.constexpr, GROUP_M: tl.constexpr, PER_ROW: tl.constexpr,
    ONE_EXPERT: tl.constexpr,
    SILU: tl.constexpr, EVEN_K: tl.constexpr, USE_INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # Grouped ordering: GROUP_M row tiles (mostly one expert's) advance together along N,
    # so the programs resident at one time share that expert's weight panels in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N_OUT, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < M

    ids = _row_experts(meta_ptr, offs_m, row_ok, E, ALIGN, BLOCK_M, BLOCK_E, LOG_E, PER_ROW)
    e_lo = tl.min(tl.where(ids >= 0, ids, E), axis=0)
    e_hi = tl.max(ids, axis=0)

    offs_am = offs_m % M
    offs_bn = offs_n % N_OUT
    if USE_INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    up_off = N_OUT * stride_wn

    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    if ONE_EXPERT:
        # BLOCK_M divides the alignment: the tile's rows are one expert's and padding. A
        # tile with no expert runs no K step and stores zeros.
        e = tl.maximum(e_hi, 0)
        acc, acc_up = _expert_dot(x_ptr, offs_am, stride_xm, stride_xk,
                                  w_ptr + e.to(tl.int64) * stride_we, offs_bn, stride_wn,
                                  stride_wk, up_off, tl.where(e_hi >= 0, K // BLOCK_K, -1),
                                  K % BLOCK_K, offs_k,
                                  BLOCK_M, BLOCK_N, BLOCK_K, SILU, EVEN_K, INPUT_PRECISION)
        res = tl.where((ids >= 0)[:, None], _epilogue(acc, acc_up, SILU), 0.0)
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        tl.store(y_ptrs, res.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (offs_n[None, :] < N_OUT))
    else:
        # One K loop per expert present in the tile, each storing its own rows: no third
        # tile of registers beside the accumulators, output pointers formed after the loop.
        b_expert = w_ptr + e_lo.to(tl.int64) * stride_we
        for e in range(e_lo, e_hi + 1):
            acc, acc_up = _expert_dot(x_ptr, offs_am, stride_xm, stride_xk,
                                      b_expert, offs_bn, stride_wn, stride_wk, up_off,
                                      K // BLOCK_K, K % BLOCK_K, offs_k,
                                      BLOCK_M, BLOCK_N, BLOCK_K, SILU, EVEN_K, INPUT_PRECISION)
            res = _epilogue(acc, acc_up, SILU).to(y_ptr.dtype.element_ty)
            y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
            tl.store(y_ptrs, res, mask=(ids == e)[:, None] & (offs_n[None, :] < N_OUT))
            b_expert += stride_we
        # Rows of no expert (padding, past the last end) are 0.
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=y_ptr.dtype.element_ty)
        tl.store(y_ptrs, zeros, mask=(row_ok & (ids < 0))[:, None] & (offs_n[None, :] < N_OUT))


@triton.jit
def _segment_tile(meta_ptr, tile, M, E, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr):
    # Tile `tile` of a tight packing with physical_psum ends, tiles starting at each
    # expert's first row: (expert, first row, end of its rows, live). Tile i of the call is
    # tile t of expert e, found from the experts' tile counts. A live tile holds rows
    # [row0, min(row0 + BLOCK_M, end)) of expert e; the tiles after the last expert's
    # (live False) cover the rows past the last end, which are zeroed.
    offs_e = tl.arange(0, BLOCK_E)
    e_ok = offs_e < E
    ends = tl.load(meta_ptr + offs_e, mask=e_ok, other=0)
    starts = tl.load(meta_ptr + offs_e - 1, mask=e_ok & (offs_e > 0), other=0)
    tiles = tl.where(e_ok, tl.cdiv(tl.maximum(ends - starts, 0), BLOCK_M), 0)
    cum = tl.cumsum(tiles, axis=0)  # inclusive
    total = tl.sum(tiles, axis=0)
    e = tl.sum((cum <= tile).to(tl.int32), axis=0)  # the expert whose tiles hold `tile`
    is_e = offs_e == e
    first = tl.sum(tl.where(is_e, cum - tiles, 0), axis=0)
    start = tl.sum(tl.where(is_e, starts, 0), axis=0)
    end = tl.sum(tl.where(is_e, ends, 0), axis=0)
    last_end = tl.max(tl.where(e_ok, ends, 0), axis=0)
    live = tile < total
    row0 = tl.where(live, start + (tile - first) * BLOCK_M, last_end + (tile - total) * BLOCK_M)
    row_end = tl.where(live, end, M)
    return e, row0, row_end, live


@triton.jit
def _moe_segments_kernel(
    x_ptr, w_ptr, meta_ptr, y_ptr,
    M, N_OUT, K, E,
    stride_xm, stride_xk, stride_we, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr, SILU: tl.constexpr, EVEN_K: tl.constexpr, USE_INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # Tight packing with physical_psum ends: tiles start at each expert's first row (not
    # at multiples of BLOCK_M), so that no tile spans two experts (see _segment_tile).
    # N fastest: consecutive programs share one tile of x.
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N_OUT, BLOCK_N)
    tile = pid // num_pid_n
    pid_n = pid % num_pid_n
    e, row0, row_end, live = _segment_tile(meta_ptr, tile, M, E, BLOCK_M, BLOCK_E)
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_am = tl.minimum(offs_m, M - 1)
    offs_bn = offs_n % N_OUT
    if USE_INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    e_w = tl.minimum(e, E - 1).to(tl.int64)
    acc, acc_up = _expert_dot(x_ptr, offs_am, stride_xm, stride_xk,
                              w_ptr + e_w * stride_we, offs_bn, stride_wn, stride_wk,
                              N_OUT * stride_wn, tl.where(live, K // BLOCK_K, -1), K % BLOCK_K,
                              offs_k, BLOCK_M, BLOCK_N, BLOCK_K, SILU, EVEN_K, INPUT_PRECISION)
    res = _epilogue(acc, acc_up, SILU)  # zeros on a tail tile: no K step ran
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    rows_ok = (offs_m < row_end) & (offs_m < M)
    tl.store(y_ptrs, res.to(y_ptr.dtype.element_ty),
             mask=rows_ok[:, None] & (offs_n[None, :] < N_OUT))


@triton.jit
def _moe_masked_kernel(
    x_ptr, w_ptr, meta_ptr, y_ptr,
    MAX_M, N_OUT, K,
    stride_xe, stride_xm, stride_xk, stride_we, stride_wn, stride_wk,
    stride_ye, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SILU: tl.constexpr, EVEN_K: tl.constexpr, USE_INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # Axis 0: tiles of one expert, M fastest: the m tiles of one block of w's rows run
    # together and share it in L2 (decode streams w; tiles past masked_m exit at once);
    # axis 1: the expert.
    pid = tl.program_id(0)
    e = tl.program_id(1).to(tl.int64)
    num_pid_m = tl.cdiv(MAX_M, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    count = tl.minimum(tl.load(meta_ptr + e), MAX_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_am = offs_m % MAX_M
    offs_bn = offs_n % N_OUT
    if USE_INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)

    # A tile wholly past masked_m runs no K step and stores zeros.
    live = pid_m * BLOCK_M < count
    k_blocks = tl.where(live, K // BLOCK_K, -1)
    acc, acc_up = _expert_dot(x_ptr + e * stride_xe, offs_am, stride_xm, stride_xk,
                              w_ptr + e * stride_we, offs_bn, stride_wn, stride_wk,
                              N_OUT * stride_wn, k_blocks, K % BLOCK_K, offs_k,
                              BLOCK_M, BLOCK_N, BLOCK_K, SILU, EVEN_K, INPUT_PRECISION)
    out = tl.where((offs_m < count)[:, None], _epilogue(acc, acc_up, SILU), 0.0)

    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    y_ptrs = y_ptr + e * stride_ye + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < MAX_M) & (offs_n[None, :] < N_OUT))


# --- TMA kernels (Hopper) -------------------------------------------------------------------
# The same tiles with x, w and y read and written through TMA tensor descriptors (the bulk
# copy engine), as kernels/gemm.py does for the nn.Linear (NT) layout, where it measured
# 0.84-0.94x of cuBLAS against 0.69-0.79x for pointer loads. w is described [E, N, K]
# (3-D: a tile never reads another expert's rows; N and K tails are zero-filled) and the
# masked layout's x and y [E, max_m, .] the same way. The contiguous kernel serves tiles of
# one expert only (aligned packing, BLOCK_M dividing the alignment).


@triton.jit
def _tma_expert_dot(x_desc, w_desc, off_m, e, off_n, N_OUT, k_tiles,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    SILU: tl.constexpr, STAGES: tl.constexpr):
    # x rows [off_m, off_m + BLOCK_M) times expert e's w rows from off_n, over k_tiles K
    # blocks through the descriptors; with SILU also times the up rows (N_OUT further on).
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, k_tiles, num_stages=STAGES):
        off_k = k * BLOCK_K
        a = x_desc.load([off_m, off_k])
        b = w_desc.load([e, off_n, off_k]).reshape(BLOCK_N, BLOCK_K)
        acc = tl.dot(a, b.T, acc)
        if SILU:
            bu = w_desc.load([e, N_OUT + off_n, off_k]).reshape(BLOCK_N, BLOCK_K)
            acc_up = tl.dot(a, bu.T, acc_up)
    return acc, acc_up


@triton.jit
def _moe_contiguous_tma_kernel(
    x_desc, w_desc, meta_ptr, y_desc, M, N_OUT, K, E, ALIGN,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr, LOG_E: tl.constexpr, GROUP_M: tl.constexpr, PER_ROW: tl.constexpr,
    SILU: tl.constexpr, STAGES: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N_OUT, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = off_m + tl.arange(0, BLOCK_M)
    ids = _row_experts(meta_ptr, offs_m, offs_m < M, E, ALIGN, BLOCK_M, BLOCK_E, LOG_E, PER_ROW)
    e_hi = tl.max(ids, axis=0)
    e = tl.maximum(e_hi, 0)
    # A tile of padding rows only runs no K step and stores zeros.
    k_tiles = tl.where(e_hi >= 0, tl.cdiv(K, BLOCK_K), 0)
    acc, acc_up = _tma_expert_dot(x_desc, w_desc, off_m, e, off_n, N_OUT, k_tiles,
                                  BLOCK_M, BLOCK_N, BLOCK_K, SILU, STAGES)
    res = tl.where((ids >= 0)[:, None], _epilogue(acc, acc_up, SILU), 0.0)
    y_desc.store([off_m, off_n], res.to(y_desc.dtype))


@triton.jit
def _moe_masked_tma_kernel(
    x_desc, w_desc, meta_ptr, y_desc, MAX_M, N_OUT, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SILU: tl.constexpr, STAGES: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    pid = tl.program_id(0)
    e = tl.program_id(1)
    num_pid_m = tl.cdiv(MAX_M, BLOCK_M)  # M fastest, as in _moe_masked_kernel
    off_m = (pid % num_pid_m) * BLOCK_M
    off_n = (pid // num_pid_m) * BLOCK_N
    count = tl.minimum(tl.load(meta_ptr + e), MAX_M)
    # A tile wholly past masked_m runs no K step and stores zeros.
    k_tiles = tl.where(off_m < count, tl.cdiv(K, BLOCK_K), 0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, k_tiles, num_stages=STAGES):
        off_k = k * BLOCK_K
        a = x_desc.load([e, off_m, off_k]).reshape(BLOCK_M, BLOCK_K)
        b = w_desc.load([e, off_n, off_k]).reshape(BLOCK_N, BLOCK_K)
        acc = tl.dot(a, b.T, acc)
        if SILU:
            bu = w_desc.load([e, N_OUT + off_n, off_k]).reshape(BLOCK_N, BLOCK_K)
            acc_up = tl.dot(a, bu.T, acc_up)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    res = tl.where((offs_m < count)[:, None], _epilogue(acc, acc_up, SILU), 0.0)
    y_desc.store([e, off_m, off_n], res.reshape(1, BLOCK_M, BLOCK_N).to(y_desc.dtype))


@triton.jit
def _moe_segments_tma_kernel(
    x_desc, w_desc, meta_ptr, y_ptr, stride_ym, M, N_OUT, K, E,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr, SILU: tl.constexpr, STAGES: tl.constexpr, USE_INT64: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # The segments kernel's tiles (each starting at its expert's first row, _segment_tile)
    # with x and w read through descriptors: x's box starts at any row, the rows past the
    # expert's end (the next expert's, or zeros past M) are read and not kept. The rows are
    # stored by masked pointer stores: a descriptor store would write the whole box over
    # the next expert's rows.
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N_OUT, BLOCK_N)
    tile = pid // num_pid_n
    off_n = (pid % num_pid_n) * BLOCK_N
    e, row0, row_end, live = _segment_tile(meta_ptr, tile, M, E, BLOCK_M, BLOCK_E)
    e_w = tl.minimum(e, E - 1)
    # A tail tile (rows past the last end) runs no K step and stores zeros.
    k_tiles = tl.where(live, tl.cdiv(K, BLOCK_K), 0)
    acc, acc_up = _tma_expert_dot(x_desc, w_desc, row0, e_w, off_n, N_OUT, k_tiles,
                                  BLOCK_M, BLOCK_N, BLOCK_K, SILU, STAGES)
    res = _epilogue(acc, acc_up, SILU)
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    rows_ok = (offs_m < row_end) & (offs_m < M)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :],
             res.to(y_ptr.dtype.element_ty), mask=rows_ok[:, None] & (offs_n[None, :] < N_OUT))


# The span kernel: contiguous layouts whose tiles may hold rows of several experts (BLOCK_M
# above the alignment, or tight packing), so that alignment-64 calls get 128-row tiles. A
# tile runs one K loop per expert present in it (the experts between its lowest and
# highest; one absent in between, an empty expert, runs no K step) over all BLOCK_M rows,
# and keeps that expert's rows. A tile of one expert (the usual case: segments are mostly
# far longer than a tile) stores through the descriptor like the tile kernel; a tile of
# several stores each expert's rows by masked pointer stores (a descriptor store writes
# whole tiles), then zeros for rows of no expert. Optionally persistent: one program per
# SM walking the tiles in grouped order.


@triton.jit
def _span_tile(x_desc, w_desc, meta_ptr, y_desc, y_ptr, stride_ym, tile, M, N_OUT, K, E, ALIGN,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               BLOCK_E: tl.constexpr, LOG_E: tl.constexpr, GROUP_M: tl.constexpr,
               PER_ROW: tl.constexpr, SILU: tl.constexpr, STAGES: tl.constexpr,
               TMA_STORE: tl.constexpr):
    pid_m, pid_n = grouped_tile(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N_OUT, BLOCK_N), GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    row_ok = offs_m < M
    ids = _row_experts(meta_ptr, offs_m, row_ok, E, ALIGN, BLOCK_M, BLOCK_E, LOG_E, PER_ROW)
    e_hi = tl.max(ids, axis=0)
    # The experts e_first .. e_hi; a tile of no expert makes one pass for "expert -1" (no
    # K step: its rows, all of no expert, get 0).
    e_first = tl.where(e_hi >= 0, tl.min(tl.where(ids >= 0, ids, E), axis=0), -1)
    n_experts = e_hi - e_first + 1
    k_tiles = tl.cdiv(K, BLOCK_K)
    y_rows = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    out_ok = row_ok[:, None] & (offs_n < N_OUT)[None, :]
    for i in range(0, n_experts):
        e = e_first + i
        mine = ids == e
        live = (e >= 0) & (tl.max(mine.to(tl.int32), axis=0) > 0)
        acc, acc_up = _tma_expert_dot(x_desc, w_desc, off_m, e, off_n, N_OUT,
                                      tl.where(live, k_tiles, 0), BLOCK_M, BLOCK_N, BLOCK_K,
                                      SILU, STAGES)
        res = tl.where(mine[:, None], _epilogue(acc, acc_up, SILU), 0.0).to(y_ptr.dtype.element_ty)
        if TMA_STORE and n_experts == 1:
            # one expert: rows of no expert are 0 in res; the descriptor clips M and N
            y_desc.store([off_m, off_n], res)
        else:
            tl.store(y_rows, res, mask=out_ok & mine[:, None])
    if TMA_STORE:
        zero_rest = n_experts > 1
    else:
        zero_rest = True
    if zero_rest:
        zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=y_ptr.dtype.element_ty)
        tl.store(y_rows, zeros, mask=out_ok & (ids < 0)[:, None])


@triton.jit
def _moe_span_tma_kernel(
    x_desc, w_desc, meta_ptr, y_desc, y_ptr, stride_ym, M, N_OUT, K, E, ALIGN,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr, LOG_E: tl.constexpr, GROUP_M: tl.constexpr, PER_ROW: tl.constexpr,
    SILU: tl.constexpr, STAGES: tl.constexpr, TMA_STORE: tl.constexpr,
    PERSISTENT: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    if PERSISTENT:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N_OUT, BLOCK_N)
        for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0)):
            _span_tile(x_desc, w_desc, meta_ptr, y_desc, y_ptr, stride_ym, tile, M, N_OUT, K,
                       E, ALIGN, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_E, LOG_E, GROUP_M, PER_ROW,
                       SILU, STAGES, TMA_STORE)
    else:
        _span_tile(x_desc, w_desc, meta_ptr, y_desc, y_ptr, stride_ym, tl.program_id(0), M,
                   N_OUT, K, E, ALIGN, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_E, LOG_E, GROUP_M,
                   PER_ROW, SILU, STAGES, TMA_STORE)


def _descriptor_ok(t: torch.Tensor) -> bool:
    """TMA's rules: unit inner stride, every other stride and the base 16-byte aligned."""
    size = t.element_size()
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all((st * size) % 16 == 0 for st in t.stride()[:-1]))


def tma_eligible(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the TMA kernels can run a call: a CUDA device of compute capability 9.0 or
    later, fp16/bf16, and x, w, out as TMA describes them."""
    return (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)
            and _capability(x.device)[0] >= 9
            and _descriptor_ok(x) and _descriptor_ok(w) and _descriptor_ok(out))


@functools.lru_cache(maxsize=16)
def _capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def _launch_tma(x, w, metadata, out, kind, metadata_kind, alignment, silu, cfg,
                segments=False) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    E, N, K = w.shape
    n_out = out.shape[-1]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    w_desc = TensorDescriptor.from_tensor(w, [1, bn, bk])
    opts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SILU=silu, STAGES=cfg.num_stages,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap_options(x.device))
    if kind == "masked":
        max_m = x.shape[1]
        x_desc = TensorDescriptor.from_tensor(x, [1, bm, bk])
        y_desc = TensorDescriptor.from_tensor(out, [1, bm, bn])
        grid = (triton.cdiv(max_m, bm) * triton.cdiv(n_out, bn), E)
        launch(_moe_masked_tma_kernel, grid, x_desc, w_desc, metadata, y_desc, max_m, n_out, K, **opts)
        return
    M = x.shape[0]
    x_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    y_desc = TensorDescriptor.from_tensor(out, [bm, bn])
    tiles = triton.cdiv(M, bm) * triton.cdiv(n_out, bn)
    if segments:
        # at most one partial tile per expert, plus one for the rows past the last end
        grid = ((triton.cdiv(M, bm) + E + 1) * triton.cdiv(n_out, bn),)
        launch(_moe_segments_tma_kernel, grid, x_desc, w_desc, metadata, out, out.stride(0),
               M, n_out, K, E, BLOCK_E=triton.next_power_of_2(E),
               USE_INT64=_extent(out) > _INT32_LIMIT, **opts)
        return
    if cfg.kernel in _SPAN_KERNELS:
        persistent = cfg.kernel == "span_persistent"
        grid = (min(tiles, sm_count(x.device)) if persistent else tiles,)
        launch(_moe_span_tma_kernel, grid,
               x_desc, w_desc, metadata, y_desc, out, out.stride(0), M, n_out, K, E,
               max(alignment, 1), BLOCK_E=triton.next_power_of_2(E),
               LOG_E=triton.next_power_of_2(E).bit_length() - 1, GROUP_M=cfg.group_m,
               PER_ROW=metadata_kind == "per_row", TMA_STORE=cfg.tma_store,
               PERSISTENT=persistent, **opts)
        return
    grid = (tiles,)
    launch(_moe_contiguous_tma_kernel, grid,
        x_desc, w_desc, metadata, y_desc, M, n_out, K, E, max(alignment, 1),
        BLOCK_E=triton.next_power_of_2(E), LOG_E=triton.next_power_of_2(E).bit_length() - 1,
        GROUP_M=cfg.group_m, PER_ROW=metadata_kind == "per_row", **opts)


# --- launcher ----------------------------------------------------------------------------


def moe_grouped_gemm_triton(x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor,
                            out: torch.Tensor, kind: str, metadata_kind: str = "per_row",
                            alignment: int = 1, activation: str = "none",
                            config: MoeConfig | None = None,
                            tma: bool | None = None) -> torch.Tensor:
    """Write the M-grouped GEMM into ``out`` (any strides) and return it.

    x, w, out: any strides, one dtype of float16 / bfloat16 / float32; metadata: int32,
    contiguous. ``config=`` forces a tile configuration. ``tma`` picks the TMA kernels
    (True), the pointer kernels (False), or (None) TMA where :func:`tma_eligible` holds
    and, for a contiguous layout, every tile holds one expert or the configuration is a
    span one (``MoeConfig.kernel``).
    """
    if x.dtype not in _SUPPORTED or w.dtype != x.dtype or out.dtype != x.dtype:
        raise TypeError(f"x, w and out must share a dtype in {_SUPPORTED}; got {x.dtype}, "
                        f"{w.dtype}, {out.dtype}")
    silu = activation == "silu_and_mul"
    E, N, K = w.shape
    n_out = N // 2 if silu else N
    if out.numel() == 0:
        return out
    metadata = metadata.contiguous()
    max_m = x.shape[1] if kind == "masked" else 0
    segments = kind == "contiguous" and alignment <= 1 and metadata_kind == "physical_psum"
    eligible = tma_eligible(x, w, out) if tma is None else tma
    cfg = config or moe_config_for(kind, alignment, max_m, n_out, K, x.dtype, silu, segments,
                                   tma=eligible, rows_per_expert=x.shape[0] / max(E, 1))
    one_expert = kind == "masked" or (alignment >= cfg.block_m and alignment % cfg.block_m == 0)
    span = kind == "contiguous" and cfg.kernel in _SPAN_KERNELS
    # tight packing with expert ends: tiles from each expert's first row (TMA loads too)
    seg_tiles = segments and not one_expert and not span
    if tma is None:
        tma = (one_expert or span or (seg_tiles and _SEGMENTS_TMA)) and eligible
    if tma:
        if not ((one_expert or span or seg_tiles) and x.dtype != torch.float32
                and _descriptor_ok(x) and _descriptor_ok(w) and _descriptor_ok(out)):
            raise ValueError("the TMA kernels need float16/bfloat16, unit inner strides, "
                             "16-byte aligned strides and bases, and tiles of one expert "
                             "(aligned packing, or tight packing with physical_psum ends) "
                             "or a span configuration")
        _launch_tma(x, w, metadata, out, kind, metadata_kind, alignment, silu, cfg,
                    segments=seg_tiles)
        return out
    use_int64 = max(_extent(x), _extent(w), _extent(out)) > _INT32_LIMIT
    precision = "tf32x3" if x.dtype == torch.float32 else "tf32"
    common = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SILU=silu,
                  EVEN_K=K % cfg.block_k == 0, USE_INT64=use_int64, INPUT_PRECISION=precision,
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap_options(x.device))
    if kind == "masked":
        grid = (triton.cdiv(max_m, cfg.block_m) * triton.cdiv(n_out, cfg.block_n), E)
        launch(_moe_masked_kernel, grid,
            x, w, metadata, out, max_m, n_out, K,
            x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
            out.stride(0), out.stride(1), out.stride(2), **common)
        return out
    M = x.shape[0]
    if segments and not one_expert:
        # Tight packing with expert ends: expert-aligned tiles (at most one partial tile
        # per expert, plus one for the rows past the last end).
        tiles = triton.cdiv(M, cfg.block_m) + E + 1
        launch(_moe_segments_kernel, (tiles * triton.cdiv(n_out, cfg.block_n),),
            x, w, metadata, out, M, n_out, K, E,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
            out.stride(0), out.stride(1), BLOCK_E=triton.next_power_of_2(E), **common)
        return out
    grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(n_out, cfg.block_n),)
    launch(_moe_contiguous_kernel, grid,
        x, w, metadata, out, M, n_out, K, E, max(alignment, 1),
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
        out.stride(0), out.stride(1),
        BLOCK_E=triton.next_power_of_2(E), LOG_E=triton.next_power_of_2(E).bit_length() - 1,
        GROUP_M=cfg.group_m,
        PER_ROW=metadata_kind == "per_row",
        ONE_EXPERT=one_expert, **common)
    return out
