"""GEMM and decode-shape GEMV: ``out = op(a) @ op(b)`` with fp32 accumulation.

``op`` transposes an operand stored transposed: ``a`` is ``[M, K]``, or ``[K, M]`` when
``trans_a``; ``b`` is ``[K, N]``, or ``[N, K]`` when ``trans_b`` (the ``nn.Linear``
weight layout).  Both kernels read each operand in its stored layout through its
strides (no transposing copies), accumulate in fp32 and write ``out`` (``[M, N]``,
``a``'s dtype, any strides).

Plain functions; the dispatch classes are built elsewhere.

* :func:`gemm_reference` -- torch reference (fp32 matmul on CPU, ``torch.matmul`` on CUDA).
* :func:`gemm_triton` -- tiled GEMM: one program per ``BLOCK_M x BLOCK_N`` output tile,
  grouped ("swizzled") program order so that ``GROUP_M`` consecutive programs share
  B's column panel in L2, wrap-around row/column indices (``% M``, ``% N``) so that the
  loads need no M/N masks, full K blocks unmasked (so the loads stay on the cp.async
  pipeline) and one masked tail block when ``K % BLOCK_K != 0`` (``EVEN_K``), masked
  stores.  The tile configuration comes from :func:`gemm_config_for`, a small table
  indexed by (M, N, K) in plain Python; :func:`gemm_configs` lists every configuration
  for offline autotuning, and ``config=`` forces one.
* :func:`gemm_tma` -- the same tiling with operands loaded through TMA tensor
  descriptors (Hopper's bulk copy engine) instead of per-thread pointers, and for large
  problems a persistent variant (one program per SM walking the tiles in grouped order,
  128x256x64 tiles).  On an H200 (bf16, ``triton.testing.do_bench``, against cuBLAS) the
  persistent kernel runs the large rows at 0.96-1.10x, NN, TN and NT layouts alike; the
  non-persistent one serves M <= 128 (0.86-0.98x; at 64 < M <= 128 with ``b`` stored
  ``[N, K]`` and enough 128x128 tiles to fill 60 % of the last wave, one 128-row tile
  along M: 0.87-1.02x cuBLAS, 0.87 at M = 96) and problems with too few 128x256
  tiles to fill the last wave (0.97x).  ``gemm_triton`` routes a call to it on CUDA
  devices of compute capability 9.0 or later when the descriptors' rules hold (unit inner
  strides, 16-byte aligned rows and bases) and the table (:func:`tma_config_for`) has an
  entry; otherwise the pointer kernel serves it.
* :func:`gemv_triton` -- the small-M (decode, ``M <= 16``) kernel: one program per
  ``BLOCK_N`` output columns holding all M rows, looping over K with an fp32
  accumulator; ``BLOCK_N`` (at most 64) is chosen so that the grid has a program per SM
  or more, since the kernel is bound by streaming ``b`` from HBM. A single row (``M ==
  1``) whose ``b`` has a contiguous K axis (the ``[N, K]`` weight layout) takes an FMA
  kernel instead: 16 rows of ``b`` a program, the products summed elementwise in fp32 and
  reduced over K once at the end (no MMA padding one row to 16).

Every kernel here is launched dependent where the device allows (:mod:`opspec.kernels.pdl`).

fp32 inputs run with ``input_precision="ieee"`` (no TF32), fp16/bf16 on tensor cores.
On CPU the Triton interpreter's ``tl.dot`` is wrong for bf16: test the kernels in
fp16/fp32 there.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from opspec.kernels.launch import LaunchMemo, launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import H200_SMS as _NUM_SMS
from opspec.kernels.tiling import INT32_LIMIT, aligned_rows
from opspec.kernels.tiling import clip_tiles as _clip
from opspec.kernels.tiling import grouped_tile
from opspec.kernels.tiling import sm_count as _num_sms
from opspec.kernels.tiling import vector_aligned as _is_aligned

__all__ = [
    "GemmConfig",
    "gemm_reference",
    "gemm_tile",
    "gemm_triton",
    "gemv_triton",
    "gemm_configs",
    "gemm_config_for",
    "gemv_config_for",
    "gemm_tma",
    "tma_config_for",
    "tma_persistent",
    "tma_eligible",
    "GEMV_MAX_M",
]

GEMV_MAX_M = 16
_INT32_LIMIT = INT32_LIMIT
#: Prepared launches (opspec.kernels.launch) of the GEMV kernel, by everything its launch
#: is computed from: the sizes, transposes, strides, dtype, device and pointer alignments.
_PREPARED = LaunchMemo()
_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


class GemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


# --- the table ----------------------------------------------------------------------
# Hopper (sm_90) choices for fp16/bf16.  Shared memory per stage is
# (BLOCK_M + BLOCK_N) * BLOCK_K * 2 bytes: 48 KB for 128x256x64 (3 stages = 144 KB),
# 32 KB for 128x128x64 (4 stages = 128 KB), within the 227 KB a block may use.
_LARGE_256 = GemmConfig(128, 256, 64, 8, 8, 3)  # large M and N: 2 warpgroups, 64x256 each
_LARGE_128 = GemmConfig(128, 128, 64, 8, 8, 4)  # large, but too few 128x256 tiles for a wave
_MEDIUM = GemmConfig(64, 128, 64, 8, 4, 4)  # 32 < M <= 64, or mid-sized problems
_MEDIUM_N64 = GemmConfig(64, 64, 64, 8, 4, 4)  # mid-sized with few tiles
_SMALL_32 = GemmConfig(32, 64, 128, 8, 4, 4)  # 16 < M <= 32
_SMALL_16 = GemmConfig(16, 64, 128, 8, 4, 4)  # M <= 16 through the GEMM kernel
# fp32 inputs (ieee dot on CUDA cores): correctness path, smaller K step for shared memory.
_FP32 = GemmConfig(64, 64, 32, 8, 4, 3)

# M > 64: candidates with a guessed relative efficiency per tile (bigger tiles reuse
# more operand bytes per FLOP); to be refined from H200 timings.
_LARGE_CANDIDATES = (
    (_LARGE_256, 1.0),
    (_LARGE_128, 0.9),
    (_MEDIUM, 0.75),
    (_MEDIUM_N64, 0.6),
)

# Offline-autotuning candidates on top of the table.
_EXTRA = (
    GemmConfig(128, 256, 64, 8, 8, 4),
    GemmConfig(128, 128, 64, 8, 4, 4),
    GemmConfig(128, 128, 64, 8, 8, 3),
    GemmConfig(256, 128, 64, 8, 8, 3),
    GemmConfig(128, 64, 64, 8, 4, 4),
    GemmConfig(64, 256, 64, 8, 4, 4),
    GemmConfig(64, 128, 128, 8, 4, 3),
    GemmConfig(32, 128, 128, 8, 4, 4),
    GemmConfig(16, 128, 128, 8, 4, 4),
)

# GEMV (M <= 16): BLOCK_M = 16, BLOCK_N from N, BLOCK_K = 128 (fp16/bf16) or 64 (fp32).
# From an H200 sweep (benchmarks/gemm_sweep.py): 64 columns, 4 stages, one wave of programs
# or more: 0.94x cuBLAS at M = 1, 0.98x at M = 16 (32 columns for two waves: 0.84x / 0.97x).
# Under a wave of 64-column programs, the widest BLOCK_N giving at least half a wave, with
# 6 stages (more bytes in flight a program; over a wave they cost resident programs).
# H200, bf16, b stored [N, K], side by side (benchmarks/gemv_probe.py, 2026-11-30): M = 4,
# 4096 x 14336: 32 columns, 6 stages 44.7 us against the former 16 columns, 4 stages 59.2
# (cuBLAS 42.0; 16 / 6 stages 52.3, 64 / 6 stages 45.8); M = 8, 4096 x 4096: 18.2 against
# 20.4 (cuBLAS 18.8); M = 1, 6144 x 4096 (this kernel, which M = 1 now takes only where b
# is not stored [N, K]): 64 / 6 stages 23.9 against 26.5 at 4. M = 16, 18432 x 7168 (288
# programs) 78.7 us at 4 stages, 88.9 at 6.
_GEMV_BLOCK_N = (64, 32, 16)
_GEMV_TARGET_PROGRAMS = _NUM_SMS
_GEMV_MIN_PROGRAMS = _NUM_SMS // 2
_GEMV_STAGES, _GEMV_STAGES_UNDER_A_WAVE = 4, 6
# M = 1 with op(b)'s K axis contiguous (b stored [N, K], the nn.Linear weight) takes the FMA
# kernel (_gemv_fma_kernel): rows of b a program, bytes of each row a step, warps. It has no
# MMA wasting 15 of 16 rows and no reduction a step (one at the end), and its 16-row
# programs spread even N = 4096 over every SM. H200, bf16, side by side
# (benchmarks/gemv_probe.py, 2026-11-30), FMA / the MMA kernel above / cuBLAS: 14336 x 4096
# 35.8 / 43.7 / 40.5 us, 6144 x 4096 19.3 / 31.2 / 23.6, 57344 x 8192 227.9 / 232.1 / 224.4
# (16 rows x 256 k: 35.2, 19.9, 229.5; 32 x 256: 35.7, 21.1, 233.1; 8 x 512: 37.0, 18.9, 230.7).
_GEMV_FMA_ROWS = 16
_GEMV_FMA_STEP_BYTES = 1024
_GEMV_FMA_WARPS = 4


def gemm_configs() -> list[GemmConfig]:
    """Every GEMM tile configuration: the table's entries first, then extra candidates.

    For an offline autotuner: time ``gemm_triton(..., config=c)`` for each ``c``.
    """
    seen: list[GemmConfig] = []
    for c in (_LARGE_256, _LARGE_128, _MEDIUM, _MEDIUM_N64, _SMALL_32, _SMALL_16, _FP32, *_EXTRA):
        if c not in seen:
            seen.append(c)
    return seen


def _unaligned(cfg: GemmConfig, max_block_k: int) -> GemmConfig:
    """Operands whose rows are not 16-element aligned load element by element, off the
    cp.async pipeline, in registers: smaller K steps (and N <= 128) avoid spills."""
    return cfg._replace(block_n=min(cfg.block_n, 128), block_k=min(cfg.block_k, max_block_k))


@functools.lru_cache(maxsize=1024)
def gemm_config_for(
    M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, aligned: bool = True
) -> GemmConfig:
    """The table: the GEMM configuration used for an ``M x N x K`` problem in ``dtype``.

    ``aligned`` is False when an operand has no unit stride, a non-unit stride that is
    not a multiple of 16 elements, or a base address not 16-byte aligned (see
    :func:`_is_aligned`).
    """
    cfg = _gemm_table(M, N, K, dtype)
    return cfg if aligned else _clip(_unaligned(cfg, 32), M, N, K)


def _gemm_table(M: int, N: int, K: int, dtype: torch.dtype) -> GemmConfig:
    if dtype == torch.float32:
        return _clip(_FP32, M, N, K)

    def tiles(bm: int, bn: int) -> int:
        return triton.cdiv(M, bm) * triton.cdiv(N, bn)

    if M <= 16:
        cfg = _SMALL_16
    elif M <= 32:
        cfg = _SMALL_32
    elif M <= 64:
        cfg = _MEDIUM if tiles(64, 128) >= _NUM_SMS else _MEDIUM_N64
    else:
        # Wave model: time ~ waves * tile area / tile efficiency; the first minimum wins
        # (ties go to the bigger tile).
        def cost(entry: tuple[GemmConfig, float]) -> float:
            c, eff = entry
            waves = triton.cdiv(tiles(c.block_m, c.block_n), _NUM_SMS)
            return waves * c.block_m * c.block_n / eff

        cfg = min(_LARGE_CANDIDATES, key=cost)[0]
    return _clip(cfg, M, N, K)


@functools.lru_cache(maxsize=1024)
def gemv_config_for(
    M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, aligned: bool = True
) -> GemmConfig:
    """The GEMV configuration: all M rows in one 16-row block, BLOCK_N from N.

    ``BLOCK_N`` is 64 with 4 stages where that gives a program per SM (132) or more. Else
    the largest of 64, 32, 16 giving half as many programs (else 16), with 6 stages: fewer
    programs than SMs, each with more bytes in flight.
    ``aligned`` as for :func:`gemm_config_for` (False: BLOCK_K <= 32).
    """
    if M > GEMV_MAX_M:
        raise ValueError(f"gemv_triton handles M <= {GEMV_MAX_M}, got M = {M}")
    if triton.cdiv(N, _GEMV_BLOCK_N[0]) >= _GEMV_TARGET_PROGRAMS:
        block_n, stages = _GEMV_BLOCK_N[0], _GEMV_STAGES
    else:
        block_n = next((bn for bn in _GEMV_BLOCK_N
                        if triton.cdiv(N, bn) >= _GEMV_MIN_PROGRAMS), _GEMV_BLOCK_N[-1])
        stages = _GEMV_STAGES_UNDER_A_WAVE
    block_k = 64 if dtype == torch.float32 else 128
    cfg = GemmConfig(16, block_n, block_k, 1, 4, stages)
    if not aligned:
        cfg = _unaligned(cfg, 32)
    return _clip(cfg, M, N, K)


# --- references ---------------------------------------------------------------------


def gemm_reference(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool) -> torch.Tensor:
    """``op(a) @ op(b)`` in ``a.dtype``, accumulated in fp32.

    On CUDA this is ``torch.matmul`` (cuBLAS accumulates fp16/bf16 in fp32); elsewhere
    the operands are copied to fp32 first, for accuracy and because CPU half matmul
    may accumulate differently.
    """
    A = a.t() if trans_a else a
    B = b.t() if trans_b else b
    if a.is_cuda:
        return torch.matmul(A, B).to(a.dtype)
    return torch.matmul(A.float(), B.float()).to(a.dtype)


# --- kernels ------------------------------------------------------------------------


@triton.jit
def gemm_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk,
              stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, USE_INT64: tl.constexpr,
              INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Output tile (pid_m, pid_n) of ``c = a @ b`` through pointers, fp32 accumulation
    (shared by the GEMM and bmm pointer kernels). UPCAST: the operands are widened to
    float32 before the dot (the interpreter's bfloat16 tl.dot is wrong)."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Wrap out-of-range rows/columns onto valid ones: loads stay in bounds without a
    # mask; those rows/columns are dropped by the store mask.
    offs_am = offs_m % M
    offs_bn = offs_n % N
    if USE_INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Full K blocks without masks (a mask on K defeats the cp.async pipeline), then
    # one masked tail block when K % BLOCK_K != 0.
    for _ in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        k_left = K % BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

    c = acc.to(c_ptr.dtype.element_ty)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def _gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # Grouped ordering: GROUP_M row-blocks advance together along N, so the programs
    # resident at one time reuse both A's row panels and B's column panels in L2.
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N),
                                GROUP_M)

    gemm_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk,
              stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, USE_INT64,
              INPUT_PRECISION, False)


@triton.jit
def _gemv_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # One program per BLOCK_N output columns, all M (<= BLOCK_M) rows; b is streamed
    # once from HBM in its stored layout, a (tiny) is re-read from L2 by each program.
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_am = offs_m % M
    offs_bn = offs_n % N
    if USE_INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs, eviction_policy="evict_first")
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        k_left = K % BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0, eviction_policy="evict_first")
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

    c = acc.to(c_ptr.dtype.element_ty)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def _gemv_fma_kernel(a_ptr, b_ptr, c_ptr, N, K, stride_ak, stride_bn, stride_cn,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                     USE_INT64: tl.constexpr,
                     PDL: tl.constexpr = False):  # launched dependent (opspec.kernels.pdl)
    overlap_start(PDL)
    # M = 1 and op(b)'s K stride 1: BLOCK_N rows of b ([N, K] storage) a program. The
    # products accumulate elementwise in a float32 [BLOCK_N, BLOCK_K] tile, reduced over K
    # once at the end; a is re-read from L2 by each program.
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows_c = rows % N
    if USE_INT64:
        rows_c = rows_c.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    b_ptrs = b_ptr + rows_c[:, None] * stride_bn + offs_k[None, :]
    a_ptrs = a_ptr + offs_k * stride_ak
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for _ in range(0, K // BLOCK_K):
        b = tl.load(b_ptrs, eviction_policy="evict_first").to(tl.float32)
        a = tl.load(a_ptrs).to(tl.float32)
        acc += b * a[None, :]
        b_ptrs += BLOCK_K
        a_ptrs += BLOCK_K * stride_ak
    if not EVEN_K:
        k_mask = offs_k < K % BLOCK_K
        b = tl.load(b_ptrs, mask=k_mask[None, :], other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        a = tl.load(a_ptrs, mask=k_mask, other=0.0).to(tl.float32)
        acc += b * a[None, :]
    if USE_INT64:
        rows = rows.to(tl.int64)
    tl.store(c_ptr + rows * stride_cn, tl.sum(acc, axis=1).to(c_ptr.dtype.element_ty),
             mask=rows < N)


# --- launchers ----------------------------------------------------------------------


def _check(
    a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool, out: torch.Tensor
) -> tuple[int, int, int, tuple[int, int], tuple[int, int]]:
    """Validate; return M, N, K and the (m, k) / (k, n) strides of a and b."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D, got {a.dim()}-D and {b.dim()}-D")
    if trans_a:
        K, M = a.shape
        sa = (a.stride(1), a.stride(0))
    else:
        M, K = a.shape
        sa = (a.stride(0), a.stride(1))
    if trans_b:
        N, Kb = b.shape
        sb = (b.stride(1), b.stride(0))
    else:
        Kb, N = b.shape
        sb = (b.stride(0), b.stride(1))
    if Kb != K:
        raise ValueError(f"inner dimensions differ: op(a) has K = {K}, op(b) has K = {Kb}")
    if a.dtype not in _SUPPORTED or b.dtype != a.dtype or out.dtype != a.dtype:
        raise TypeError(
            f"a, b and out must share a dtype in {_SUPPORTED}; got {a.dtype}, {b.dtype}, {out.dtype}"
        )
    if out.dim() != 2 or out.shape[0] != M or out.shape[1] != N:
        raise ValueError(f"out must have shape [{M}, {N}], got {list(out.shape)}")
    return M, N, K, sa, sb


def _launch(kernel, grid, a, b, out, M, N, K, sa, sb, cfg: GemmConfig, extra: dict,
            memo_key=None) -> None:
    """Launch ``kernel`` on ``(a, b, out)``; with ``memo_key`` (which must fix every other
    argument, see :class:`opspec.kernels.launch.LaunchMemo`), keep its prepared replay."""
    so = out.stride()
    # The largest element offsets of a, b and out (tiling.element_extent, from the sizes
    # in hand rather than re-read from the tensors).
    use_int64 = max((M - 1) * abs(sa[0]) + (K - 1) * abs(sa[1]),
                    (K - 1) * abs(sb[0]) + (N - 1) * abs(sb[1]),
                    (M - 1) * abs(so[0]) + (N - 1) * abs(so[1])) + 4096 > _INT32_LIMIT
    _PREPARED.launch(
        memo_key,
        3,
        kernel,
        grid,
        a,
        b,
        out,
        M,
        N,
        K,
        sa[0],
        sa[1],
        sb[0],
        sb[1],
        so[0],
        so[1],
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        EVEN_K=K % cfg.block_k == 0,
        USE_INT64=use_int64,
        INPUT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **extra,
        **overlap_options(a.device),
    )


def gemm_triton(
    a: torch.Tensor,
    b: torch.Tensor,
    trans_a: bool,
    trans_b: bool,
    out: torch.Tensor,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """Write ``op(a) @ op(b)`` into ``out`` (``[M, N]``, ``a.dtype``) and return ``out``.

    fp16/bf16 (tensor cores) or fp32 (ieee) inputs of one dtype, fp32 accumulation.
    ``K == 0`` zero-fills ``out``; ``M == 0`` or ``N == 0`` launches nothing.
    ``config`` overrides the table (:func:`gemm_config_for`), for autotuning; without it,
    a call :func:`tma_eligible` for and listed in :func:`tma_config_for` runs
    :func:`gemm_tma`, and on CUDA an operand whose rows neither a descriptor nor a 16-byte
    load can take is first copied (:func:`~opspec.kernels.tiling.aligned_rows`).
    """
    M, N, K, sa, sb = _check(a, b, trans_a, trans_b, out)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    if config is None:
        if a.is_cuda:   # (the interpreter's tests keep the strided operands)
            # rows a descriptor takes stay: 8 elements longer ran 246 us as views, 268 copied
            a2, b2 = (t if _descriptor_ok(t) else aligned_rows(t) for t in (a, b))
            if a2 is not a or b2 is not b:     # a copy: its strides
                a, b = a2, b2
                M, N, K, sa, sb = _check(a, b, trans_a, trans_b, out)
        if tma_eligible(a, b, out):
            tma = tma_config_for(M, N, K, trans_b)
            if tma is not None:
                return gemm_tma(a, b, trans_a, trans_b, out, tma)
        config = gemm_config_for(M, N, K, a.dtype, _is_aligned(a) and _is_aligned(b))
    cfg = config
    grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
    _launch(_gemm_kernel, grid, a, b, out, M, N, K, sa, sb, cfg, {"GROUP_M": cfg.group_m})
    return out


def gemv_triton(
    a: torch.Tensor,
    b: torch.Tensor,
    trans_a: bool,
    trans_b: bool,
    out: torch.Tensor,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """Decode-shape ``op(a) @ op(b)`` for ``M <= 16`` (see :func:`gemm_triton`).

    Split over N only (one program per ``BLOCK_N`` columns, all rows at once), fp32
    reduction over K; ``b`` is read once in its stored layout.  ``config`` overrides
    :func:`gemv_config_for` (its ``block_m`` must be >= M; ``group_m`` is unused).
    """
    M, N, K, _, _ = _check(a, b, trans_a, trans_b, out)
    if M > GEMV_MAX_M:
        raise ValueError(f"gemv_triton handles M <= {GEMV_MAX_M}, got M = {M}; use gemm_triton")
    if config is not None and config.block_m < M:
        raise ValueError(f"config.block_m = {config.block_m} < M = {M}")
    return gemv_launch(a, b, out, M, N, K, trans_a, trans_b, config)


def gemv_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, M: int, N: int, K: int,
                trans_a: bool, trans_b: bool, config: GemmConfig | None = None) -> torch.Tensor:
    """:func:`gemv_triton` without its argument checks, for callers that guarantee them
    (the GEMM kernel interface's contract does: 2-D ``a``/``b``/``out`` of one supported
    dtype, ``op(a)`` ``[M, K]``, ``op(b)`` ``[K, N]``, ``out`` ``[M, N]``, ``M <= 16``). A
    decode step's GEMM is a few microseconds of GPU time, so the host time of these
    re-checks (each a tensor attribute read) was most of its latency."""
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    sa = a.stride()
    sb = b.stride()
    key = None
    if config is None:
        so = out.stride()
        key = (M, N, K, trans_a, trans_b, sa, sb, so, a.dtype, a.get_device(),
               a.data_ptr() % 16, b.data_ptr() % 16, out.data_ptr() % 16)
        prepared = _PREPARED.get(key)
        if prepared is not None:  # this very launch ran before: replay it
            prepared(a, b, out)
            return out
    if trans_a:
        sa = (sa[1], sa[0])
    if trans_b:
        sb = (sb[1], sb[0])
    if config is None:
        if M == 1 and sb[0] == 1 and _is_aligned(b):
            _launch_fma(a, b, out, N, K, sa, sb, key)
            return out
        config = gemv_config_for(M, N, K, a.dtype, _is_aligned(a) and _is_aligned(b))
    grid = (triton.cdiv(N, config.block_n),)
    _launch(_gemv_kernel, grid, a, b, out, M, N, K, sa, sb, config, {}, memo_key=key)
    return out


def _launch_fma(a, b, out, N, K, sa, sb, memo_key) -> None:
    """The M = 1 launch of :func:`_gemv_fma_kernel` (op(b)'s K stride is 1; see the table)."""
    block_k = min(_GEMV_FMA_STEP_BYTES // b.element_size(), max(16, triton.next_power_of_2(K)))
    so = out.stride()
    use_int64 = max((K - 1) * abs(sa[1]) + block_k * abs(sa[1]),
                    (N - 1) * abs(sb[1]) + K + block_k, (N - 1) * abs(so[1])) > _INT32_LIMIT
    _PREPARED.launch(memo_key, 3, _gemv_fma_kernel, (triton.cdiv(N, _GEMV_FMA_ROWS),),
                     a, b, out, N, K, sa[1], sb[1], so[1],
                     BLOCK_N=_GEMV_FMA_ROWS, BLOCK_K=block_k, EVEN_K=K % block_k == 0,
                     USE_INT64=use_int64, num_warps=_GEMV_FMA_WARPS, num_stages=1,
                     **overlap_options(a.device))


# --- TMA descriptors ---------------------------------------------------------------------

# bf16/fp16 tile configurations of the TMA kernels, from sweeps on an H200 (bf16,
# do_bench, ratios to cuBLAS; benchmarks/gemm_sweep.py). For M > 128, 128x256x64 tiles in
# the persistent kernel: 0.96-1.10x on the large rows, NN, TN and NT alike (the same tile
# without persistence reached only 0.76x on NT rows). Where those tiles leave the last wave
# mostly empty (few tiles, e.g. N = 1536), 128x128x64 with 5 stages: 0.97x.
_TMA_BIG = GemmConfig(128, 256, 64, 16, 8, 3)
_TMA_NT = GemmConfig(128, 128, 64, 8, 4, 5)
_TMA_M128 = GemmConfig(64, 128, 128, 8, 4, 4)  # 64 < M <= 128: 0.86x cuBLAS (was 0.79x)
_TMA_M64 = GemmConfig(64, 64, 256, 8, 4, 3)    # 16 < M <= 64: 0.98x cuBLAS
# M <= 128 where 64x64 tiles make at most one wave: those, 6 stages (fewer programs than
# SMs, each with more bytes in flight; as for the GEMV). H200, bf16, x @ w.T
# (benchmarks/gemv_probe.py --tma, 2026-11-30): 128 x 4096 x 14336 43.4 us against 56.1
# for _TMA_M128 (cuBLAS 44.6), 64 x 6144 x 4096 22.8 / 23.6 for _TMA_M64 (cuBLAS 23.1);
# over a wave it lost (128 x 6144 x 4096: 29.9 / 26.1; 128 x 14336 x 4096: 54.6 / 45.9).
_TMA_ONE_WAVE = GemmConfig(64, 64, 128, 8, 4, 6)
# 64 < M <= 128 with b stored [N, K] where 128x128 tiles fill at least this share of the
# last wave: one M tile of 128 rows, 128x128x64 at 5 stages (4 warps), each weight block
# read once. H200, bf16, x @ w.T (benchmarks/gemv_probe.py --tma and a probe of the same
# tiles, 2026-12-02, us, the table's 64x128x128 then -> 128x128x64 (cuBLAS)): 128 x 14336 x
# 4096 40.0 -> 35.0 (35.8), 128 x 16384 x 4096 43.3 -> 40.3 (40.2), 128 x 12288 x 4096 37.1
# -> 31.9 (29.9), 96 x 14336 x 4096 50.3 -> 39.0 (33.6), 128 x 28672 x 8192 144.8 -> 128.6
# (130.0), 128 x 14336 x 8192 70.9 -> 63.5 (63.2), 128 x 10240 x 8192 64.3 -> 52.5 (48.5);
# below the share it lost: 112 x 18432 x 7168 (144 tiles, 0.55 of two waves) 94.7 ->
# 101.7, 128 x 6144 x 4096 (48 tiles) 20.1 -> 25.9. 64x128x64 at 4 stages ran between the
# two, 8 warps or 4 stages slower.
_TMA_M128_WIDE = GemmConfig(128, 128, 64, 8, 4, 5)
_M128_WIDE_FILL = 0.6
# Share of the last wave's SM slots a tiling must fill to run 128x256 tiles; within two
# waves, b stored [N, K] (timed only so), a little less will do (each SM then walks at most
# two tiles, and 128x128 tiles would leave the same share idle). H200, bf16, x @ w.T, 0.848
# filled (benchmarks/w4a16_probe.py gemm): 512 x 14336 x 4096 (224 tiles) 100.1 us against
# 128x128's 105.0, 1024 x 3584 x 18944 (112 tiles) 196.8 / 205.8; at 448 tiles (512 x 28672
# x 8192, 1024 x 14336 x 4096) 128x128 stays ahead, 331.7 / 352.9 and 174.7 / 184.5 us.
_MIN_WAVE_FILL = 0.85
_MIN_WAVE_FILL_TWO_WAVES = 0.8


def _wave_fill(M: int, N: int, bm: int, bn: int) -> float:
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    return tiles / (triton.cdiv(tiles, _NUM_SMS) * _NUM_SMS)


@functools.lru_cache(maxsize=1024)
def tma_config_for(M: int, N: int, K: int, trans_b: bool) -> GemmConfig | None:
    """The TMA kernels' configuration for a bf16/fp16 problem, or None where the pointer
    kernel is as fast (M > 128 with b stored [K, N] and too few tiles for 128x256).
    A configuration with 128x256 tiles runs the persistent kernel (:func:`tma_persistent`)."""
    if M <= 128 and triton.cdiv(M, 64) * triton.cdiv(N, 64) <= _NUM_SMS:
        cfg = _TMA_ONE_WAVE
    elif M <= 64:
        cfg = _TMA_M64
    elif M <= 128:
        cfg = (_TMA_M128_WIDE if trans_b and _wave_fill(M, N, 128, 128) >= _M128_WIDE_FILL
               else _TMA_M128)
    elif _wave_fill(M, N, 128, 256) >= (
            _MIN_WAVE_FILL_TWO_WAVES
            if trans_b and triton.cdiv(M, 128) * triton.cdiv(N, 256) <= 2 * _NUM_SMS
            else _MIN_WAVE_FILL):
        cfg = _TMA_BIG
    elif trans_b:
        cfg = _TMA_NT
    else:
        return None
    return _clip(cfg, M, N, K)


def tma_persistent(cfg: GemmConfig) -> bool:
    """Whether a TMA configuration runs the persistent kernel: the 128x256 tiles do (one
    program per SM walking tiles, so the next tile's loads overlap this tile's stores)."""
    return cfg.block_m * cfg.block_n >= 128 * 256


def _descriptor_ok(t: torch.Tensor) -> bool:
    """TMA's rules for a 2-D global tensor: unit inner stride, the outer stride and the
    base 16-byte aligned."""
    return (t.dim() == 2 and t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0
            and t.data_ptr() % 16 == 0)


def tma_eligible(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the TMA kernel can run this call: a CUDA device of compute capability 9.0 or
    later, fp16/bf16 operands that TMA can describe, and a contiguous-row output."""
    return (a.is_cuda and a.dtype in (torch.float16, torch.bfloat16)
            and torch.cuda.get_device_capability(a.device)[0] >= 9
            and _descriptor_ok(a) and _descriptor_ok(b) and _descriptor_ok(out))


@triton.jit
def _gemm_tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr,
                     STAGES: tl.constexpr,
                     PDL: tl.constexpr = False):  # launched dependent (opspec.kernels.pdl)
    overlap_start(PDL)
    # Grouped program order as in _gemm_kernel. Out-of-range tile rows and columns
    # (the M, N and K tails) are zero-filled by the descriptor loads and clipped by the
    # descriptor store: no masks.
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N),
                                GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
        off_k = k * BLOCK_K
        if TRANS_A:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if TRANS_B:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        acc = tl.dot(a, b, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _gemm_tma_persistent_kernel(a_desc, b_desc, c_desc, M, N, K,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                                TRANS_A: tl.constexpr, TRANS_B: tl.constexpr,
                                PROGRAMS: tl.constexpr,
                                PDL: tl.constexpr = False):  # opspec.kernels.pdl
    overlap_start(PDL)
    # One program per SM, each walking the tiles pid, pid + PROGRAMS, ... in the grouped
    # order of _gemm_tma_kernel; tails are handled by the descriptors as there.
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_m * num_n, PROGRAMS):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            off_k = k * BLOCK_K
            if TRANS_A:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if TRANS_B:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def gemm_tma(
    a: torch.Tensor,
    b: torch.Tensor,
    trans_a: bool,
    trans_b: bool,
    out: torch.Tensor,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """``op(a) @ op(b)`` into ``out`` through TMA descriptors (see the module docstring).

    fp16/bf16 only; every operand must satisfy TMA's rules (``ValueError`` otherwise: call
    :func:`gemm_triton`, which checks :func:`tma_eligible` and routes). ``config``
    overrides :func:`tma_config_for`.
    """
    M, N, K, _, _ = _check(a, b, trans_a, trans_b, out)
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"gemm_tma takes float16 or bfloat16 operands, got {a.dtype}")
    if not (_descriptor_ok(a) and _descriptor_ok(b) and _descriptor_ok(out)):
        raise ValueError("gemm_tma needs unit inner strides and 16-byte aligned rows and bases "
                         "for a, b and out")
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    cfg = config or tma_config_for(M, N, K, trans_b) or _clip(_TMA_NT, M, N, K)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    a_desc = TensorDescriptor.from_tensor(a, [bk, bm] if trans_a else [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bn, bk] if trans_b else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    if tma_persistent(cfg):
        programs = min(tiles, _num_sms(a.device))
        launch(_gemm_tma_persistent_kernel, (programs,),
            a_desc, b_desc, c_desc, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
            GROUP_M=cfg.group_m, TRANS_A=trans_a, TRANS_B=trans_b, PROGRAMS=programs,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap_options(a.device))
        return out
    grid = (tiles,)
    launch(_gemm_tma_kernel, grid, a_desc, b_desc, c_desc, M, N, K,
           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, TRANS_A=trans_a,
           TRANS_B=trans_b, STAGES=cfg.num_stages, num_warps=cfg.num_warps,
           num_stages=cfg.num_stages, **overlap_options(a.device))
    return out
