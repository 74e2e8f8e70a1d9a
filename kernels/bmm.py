"""Batched matrix multiplication: ``out[b] = input[b] @ mat2[b]`` with fp32 accumulation.

``input`` is ``[B, M, K]``, ``mat2`` ``[B, K, N]``, ``out`` ``[B, M, N]``, all of one dtype
(float16, bfloat16 or float32), each read and written through its own three strides: a
transposed or sliced view (``k.transpose(1, 2)`` as the ``mat2`` of attention scores) is
read in place, with no copy.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.bmm_impl`.

* :func:`bmm_reference` -- the torch reference (``torch.bmm``; on the CPU in float32 and
  cast back, so that 16-bit inputs accumulate in float32 as on the GPU).
* :func:`bmm_triton` -- a tiled Triton kernel. One program per ``BLOCK_M x BLOCK_N`` tile
  of one matrix of the batch: the grid is ``B * tiles`` programs on its first axis (no
  65535 limit on the batch), program ``pid`` taking matrix ``pid // tiles``. Within a
  matrix the tiles go in grouped ("swizzled") order -- ``GROUP_M`` row blocks advance
  along N together, so that programs resident at one time share panels of both operands
  in L2. Out-of-range rows and columns are wrapped (``% M``, ``% N``) onto valid ones, so
  the loads need no M/N masks (the store is masked); full K blocks load unmasked (keeping
  them on the cp.async pipeline) and one masked tail block runs when ``K % BLOCK_K``.
  The batch offset is formed in int64 (``b * stride_b`` passes 2**31 elements on the
  attention shapes); offsets within one matrix are int32 unless a matrix spans more.
* :func:`bmm_tma` -- Hopper (compute capability 9.0 or later), float16/bfloat16: 3-D TMA
  tensor descriptors over the three tensors and a persistent kernel (one program per SM
  walking the batch's (matrix, tile) pairs, tile and K loops flattened into one pipelined
  loop, the output written by descriptor stores that overlap the next tile's work).
  :func:`bmm_triton` routes a call there when :func:`bmm_tma_eligible` holds (each tensor
  has a unit stride on one matrix axis, its other strides are multiples of 16 bytes, its
  base is 16-byte aligned) and :func:`bmm_tma_config_for` lists the shape; the section
  comment above that kernel gives its table and the reasons.

Precision: float16/bfloat16 run on tensor cores with float32 accumulation. float32 keeps
float32 accuracy, as torch.bmm's default (``torch.backends.cuda.matmul.allow_tf32`` is
False) promises, but not through CUDA-core FMAs (``input_precision="ieee"``, which would
make the kernel several times slower than cuBLAS): it runs 3xTF32
(``input_precision="tf32x3"``): each operand is split into a TF32 part and a TF32
remainder and three tensor-core products are accumulated in float32, dropping only the
remainder x remainder term (2**-22 relative), so results agree with an IEEE float32
product to about 1e-6 relative; plain TF32 (1e-3) is never used. ``precision="ieee"``
selects the FMA path. On the CPU, Triton's interpreter computes ``tl.dot`` wrongly in
bfloat16: there (only) the bfloat16 tiles are widened to float32 before the dot
(``UPCAST``), so that everything else of the bfloat16 path -- loads, accumulation, the
rounded store -- is still tested on the CPU; the bfloat16 MMA itself is checked on the GPU.

Tile choice (:func:`bmm_config_for`): a small table in plain Python (no autotuning at call
time), the same shape of rules as the GEMM table of :mod:`opspec.kernels.gemm`: a wave
model over the candidates for M > 64 (counting every matrix's tiles), narrower tiles for
small M (the decode-attention rows, M = 4: 16-row tiles streaming ``mat2``), and one
float32 configuration. Every constant is in the block below, to be retuned from H200
timings. The TMA kernel's table (:func:`bmm_tma_config_for`) is in its own section.

Both kernels are launched dependent where the device allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from opspec.kernels.launch import launch
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.gemm import gemm_tile
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import H200_SMS as _NUM_SMS
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple
from opspec.kernels.tiling import clip_tiles as _clip
from opspec.kernels.tiling import grouped_tile
from opspec.kernels.tiling import sm_count as _num_sms

__all__ = ["BmmConfig", "bmm_config_for", "bmm_configs", "bmm_reference", "bmm_triton",
           "bmm_tma", "bmm_tma_config_for", "bmm_tma_eligible"]

_INT32_LIMIT = INT32_LIMIT
_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


class BmmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    # TMA kernel only: the tile is stored in this many column strips (1 or 2). Two halve
    # the store buffer in shared memory and let the first strip's store run while the
    # second is converted, for problems bound by writing C (attention scores, K = 128).
    store_split: int = 1


# --- the table: every tuning constant ------------------------------------------------
# Shared memory per stage (16-bit): (BLOCK_M + BLOCK_N) * BLOCK_K * 2 bytes: 48 KB for
# 128x256x64 (3 stages 144 KB), 32 KB for 128x128x64 (4 stages 128 KB), within sm_90's 227 KB.
_LARGE_256 = BmmConfig(128, 256, 64, 8, 8, 3)
_LARGE_128 = BmmConfig(128, 128, 64, 8, 8, 4)
_MEDIUM = BmmConfig(64, 128, 64, 8, 4, 4)
_MEDIUM_N64 = BmmConfig(64, 64, 64, 8, 4, 4)
_SMALL_32 = BmmConfig(32, 64, 128, 8, 4, 4)   # 16 < M <= 32
_SMALL_16 = BmmConfig(16, 128, 128, 1, 4, 4)  # M <= 16: stream mat2, 128 columns a program
_ONE_STEP_STAGES = 2  # the most stages for 16-bit problems with K <= BLOCK_K
# float32, 3xTF32 on tensor cores: 32 KB a stage at 128x128x32 (3 stages 96 KB).
_FP32 = BmmConfig(128, 128, 32, 8, 8, 3)
_FP32_IEEE = BmmConfig(64, 64, 32, 8, 4, 3)   # precision="ieee": FMAs on CUDA cores
# M > 64: candidates with a guessed relative efficiency per tile (bigger tiles reuse more
# operand bytes per FLOP).
_LARGE_CANDIDATES = ((_LARGE_256, 1.0), (_LARGE_128, 0.9), (_MEDIUM, 0.75), (_MEDIUM_N64, 0.6))
# Extra candidates for an offline sweep (bmm_configs).
_EXTRA = (
    BmmConfig(128, 128, 64, 8, 4, 4),
    BmmConfig(128, 64, 64, 8, 4, 4),
    BmmConfig(64, 256, 64, 8, 8, 3),
    BmmConfig(128, 128, 128, 8, 8, 3),
    BmmConfig(16, 64, 128, 1, 4, 4),
)


def bmm_configs() -> list[BmmConfig]:
    """Every tile configuration, the table's first: for an offline sweep with ``config=``."""
    out: list[BmmConfig] = []
    for c in (_LARGE_256, _LARGE_128, _MEDIUM, _MEDIUM_N64, _SMALL_32, _SMALL_16, _FP32,
              _FP32_IEEE, *_EXTRA):
        if c not in out:
            out.append(c)
    return out


@functools.lru_cache(maxsize=1024)
def bmm_config_for(B: int, M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16,
                   precision: str = "tf32x3") -> BmmConfig:
    """The tile configuration for ``B`` products of ``M x K`` by ``K x N`` in ``dtype``
    (``precision``: the float32 path, ``"tf32x3"`` or ``"ieee"``)."""
    if dtype == torch.float32:
        return _clip(_FP32 if precision == "tf32x3" else _FP32_IEEE, M, N, K)

    def tiles(bm: int, bn: int) -> int:
        return B * triton.cdiv(M, bm) * triton.cdiv(N, bn)

    if M <= 16:
        cfg = _SMALL_16 if tiles(16, 128) >= 2 * _NUM_SMS else _SMALL_16._replace(block_n=64)
    elif M <= 32:
        cfg = _SMALL_32
    elif M <= 64:
        cfg = _MEDIUM if tiles(64, 128) >= _NUM_SMS else _MEDIUM_N64
    else:
        # Wave model: time ~ waves * tile area / efficiency; the first minimum wins.
        def cost(entry: tuple[BmmConfig, float]) -> float:
            c, eff = entry
            return triton.cdiv(tiles(c.block_m, c.block_n), _NUM_SMS) * c.block_m * c.block_n / eff

        cfg = min(_LARGE_CANDIDATES, key=cost)[0]
    cfg = _clip(cfg, M, N, K)
    if K <= cfg.block_k:
        # One K step: nothing to pipeline within a program, and each stage past two is a
        # buffer of shared memory that keeps other programs off the SM (the decode rows,
        # K = 128: 36 KB a stage at 16x128x128, 2 programs an SM at 4 stages, 6 at 2).
        cfg = cfg._replace(num_stages=min(cfg.num_stages, _ONE_STEP_STAGES))
    return cfg


# --- reference ------------------------------------------------------------------------


def bmm_reference(input: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(input, mat2)`` in ``input.dtype``, accumulated in float32 (float64 stays
    float64). On CUDA this is ``torch.bmm`` itself (cuBLAS accumulates 16-bit inputs in
    float32); elsewhere 16-bit operands are widened to float32 first."""
    if input.is_cuda or input.dtype in (torch.float32, torch.float64):
        return torch.bmm(input, mat2)
    return torch.bmm(input.float(), mat2.float()).to(input.dtype)


# --- kernel ---------------------------------------------------------------------------


@triton.jit
def _bmm_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, USE_INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    ALIGN: tl.constexpr = 1,     # divides N, K and the row and matrix strides
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # rebuilt as multiples the host checked (opspec.kernels.tiling.row_multiple): operands
    # in rows 4 or 8 elements longer than they hold load in 8- or 16-byte vectors
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        K = as_multiple(K, ALIGN)
        stride_ab = as_multiple(stride_ab, ALIGN)
        stride_am = as_multiple(stride_am, ALIGN)
        stride_bb = as_multiple(stride_bb, ALIGN)
        stride_bk = as_multiple(stride_bk, ALIGN)
        stride_cb = as_multiple(stride_cb, ALIGN)
        stride_cm = as_multiple(stride_cm, ALIGN)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    batch = pid // tiles
    tile = pid % tiles
    # Grouped order within one matrix (see the module docstring).
    pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)

    # The matrix's base: int64, since batch * stride passes 2**31 on large batches.
    batch64 = batch.to(tl.int64)
    a_ptr += batch64 * stride_ab
    b_ptr += batch64 * stride_bb
    c_ptr += batch64 * stride_cb

    gemm_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk,
              stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, USE_INT64,
              INPUT_PRECISION, UPCAST)


# --- launcher -------------------------------------------------------------------------


def _matrix_extent(t: torch.Tensor) -> int:
    """Largest element offset within one matrix of ``t`` (plus slack for a block)."""
    return sum((s - 1) * abs(st) for s, st in zip(t.shape[1:], t.stride()[1:])) + 4096


def _check(input: torch.Tensor, mat2: torch.Tensor, out: torch.Tensor) -> tuple[int, int, int, int]:
    """Validate the three tensors' ranks, shapes and dtypes; return B, M, K, N."""
    if input.dim() != 3 or mat2.dim() != 3 or out.dim() != 3:
        raise ValueError(f"input, mat2 and out must be 3-D, got {input.dim()}-D, "
                         f"{mat2.dim()}-D and {out.dim()}-D")
    B, M, K = input.shape
    if mat2.shape[0] != B or mat2.shape[1] != K:
        raise ValueError(f"mat2 must have shape [{B}, {K}, N] for input {list(input.shape)}, "
                         f"got {list(mat2.shape)}")
    N = mat2.shape[2]
    if tuple(out.shape) != (B, M, N):
        raise ValueError(f"out must have shape [{B}, {M}, {N}], got {list(out.shape)}")
    if input.dtype not in _SUPPORTED or mat2.dtype != input.dtype or out.dtype != input.dtype:
        raise TypeError(f"input, mat2 and out must share a dtype of float16, bfloat16 or "
                        f"float32; got {input.dtype}, {mat2.dtype}, {out.dtype}")
    return B, M, K, N


def bmm_triton(input: torch.Tensor, mat2: torch.Tensor, out: torch.Tensor,
               config: BmmConfig | None = None, precision: str = "tf32x3") -> torch.Tensor:
    """Write ``input @ mat2`` (batched) into ``out`` and return ``out``.

    ``input`` ``[B, M, K]``, ``mat2`` ``[B, K, N]``, ``out`` ``[B, M, N]``: one dtype of
    float16, bfloat16, float32; any strides (``out`` must not overlap the inputs). ``K == 0``
    zero-fills ``out``; an empty ``out`` launches nothing. ``config`` overrides the table
    (:func:`bmm_config_for`) and runs the pointer kernel, for offline tuning. Without it, a
    float16/bfloat16 call that :func:`bmm_tma_eligible` admits (Hopper) and
    :func:`bmm_tma_config_for` lists runs :func:`bmm_tma`. ``precision`` is the float32
    path: ``"tf32x3"`` (tensor cores, float32 accuracy) or ``"ieee"`` (CUDA-core FMAs).
    """
    if precision not in ("tf32x3", "ieee"):
        raise ValueError(f"precision must be 'tf32x3' or 'ieee', got {precision!r}")
    B, M, K, N = _check(input, mat2, out)
    if out.numel() == 0:
        return out
    if K == 0:
        return out.zero_()
    if config is None and bmm_tma_eligible(input, mat2, out):
        tma = (bmm_config_for(B, M, N, K, input.dtype, precision)
               if input.dtype == torch.float32 else bmm_tma_config_for(B, M, N, K))
        if tma is not None:
            return bmm_tma(input, mat2, out, tma, precision)
    cfg = config or bmm_config_for(B, M, N, K, input.dtype, precision)
    use_int64 = max(_matrix_extent(input), _matrix_extent(mat2), _matrix_extent(out)) > _INT32_LIMIT
    grid = (B * triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
    upcast = TRITON_INTERPRETED and input.dtype == torch.bfloat16
    (sab, sam, sak), (sbb, sbk, sbn), (scb, scm, scn) = (input.stride(), mat2.stride(),
                                                         out.stride())
    align = (row_multiple(input.element_size(), N, K, sab, sam, sbb, sbk, scb, scm)
             if sak == sbn == scn == 1 else 1)
    launch(_bmm_kernel, grid,
        input, mat2, out, M, N, K,
        input.stride(0), input.stride(1), input.stride(2),
        mat2.stride(0), mat2.stride(1), mat2.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        EVEN_K=K % cfg.block_k == 0, USE_INT64=use_int64,
        INPUT_PRECISION="ieee" if upcast else precision if input.dtype == torch.float32 else "tf32",
        UPCAST=upcast, ALIGN=align, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **overlap_options(input.device),
    )
    return out


# --- Hopper: TMA descriptors, persistent ------------------------------------------------
#
# On CUDA devices of compute capability 9.0 or later, float16/bfloat16 calls whose operands
# TMA can describe (below) run _bmm_tma_kernel: 3-D tensor descriptors over input, mat2 and
# out (blocks [1, rows, columns], reshaped to 2-D tiles in the kernel), so the tails in M, N
# and K are zero-filled by the loads and clipped by the store, never crossing into the next
# matrix of the batch. One program per SM walks the (matrix, tile) pairs of the whole batch,
# matrix by matrix and in grouped order within one, with the tile loop and the K loop
# flattened into one software-pipelined loop: the next tile's operand loads are in flight
# while this tile's dot and its store run, and the store (a TMA bulk copy out of shared
# memory) is waited for only when its buffer is next written. The attention-score rows
# (K = 128: two K steps a tile) are bound by writing the [B, M, N] output; this keeps every
# SM streaming it.
#
# The table, by (B, M, N, K). Starting points are the 2-D GEMM's H200 sweeps
# (opspec.kernels.gemm: the persistent 128x256x64 tile, group 16, 8 warps, 3 stages, at
# 0.96-1.10x cuBLAS on large problems; 128x128x64, 4 warps, 5 stages where 128x256 tiles
# leave the last wave mostly idle). Shared memory: 48 KB a stage for 128x256x64 (3 stages
# 144 KB) plus the 64 KB store buffer, 208 KB of sm_90's 227 KB; 128x256 with BLOCK_K = 128
# (96 KB a stage) would not fit two stages and the store buffer, so K = 128 runs as two
# K steps of 64.
_TMA_BIG = BmmConfig(128, 256, 64, 16, 8, 3)
# N <= 128 (attention PV, N = head dim): 128x128 tiles with 128-wide K steps (64 KB a
# stage), 1.00x cuBLAS in the H200 sweep (benchmarks/bmm_sweep.py) against 0.955x for the
# 256x128x64 tile stood on end that this table had.
# Not kept (H200, benchmarks/bmm_sweep.py, 2026-12-01): two programs an SM on the score
# rows (K = 128), each a 128x128x64 tile at 4 warps with 2-3 stages and the store split in
# two, so that one program's epilogue runs beside the other's products: 705 and 352 us on
# llama3-8b-attn-qk and -qk-s4k against cuBLAS's 654 and 339 (do_bench timing, no L2 flush;
# the table's tile 739 and 369 there, where `opspec bench` times it even with cuBLAS).
_TMA_TALL = BmmConfig(128, 128, 128, 8, 8, 3)
_TMA_128 = BmmConfig(128, 128, 64, 8, 4, 5)     # too few big tiles to fill the last wave
# M <= 16 (decode attention scores): bound by reading mat2. 16-row tiles (the smallest
# tl.dot; TMA zero-fills the rows past M) of 256 columns, a 64 KB mat2 block a K step:
# 3 stages keep two blocks in flight on every SM while one is used (the flattened loop
# prefetches across tiles). The H200 sweep ran the decode-qk row at 0.987x cuBLAS with
# this tile, 0.973x with 128 columns and 5 stages.
_TMA_DECODE = BmmConfig(16, 256, 128, 1, 4, 3)
# 128x256 tiles only when the batch's tiles fill this share of the last wave of SMs.
_TMA_MIN_WAVE_FILL = 0.85
# float32 stays on the pointer kernel (3xTF32, measured 0.93x cuBLAS on llama3-8b-qk-s4k);
# True routes it here too, with the pointer kernel's float32 tile, for comparison.
_TMA_FLOAT32 = False
_TMA_DTYPES = (torch.float16, torch.bfloat16)


@functools.lru_cache(maxsize=1024)
def bmm_tma_config_for(B: int, M: int, N: int, K: int) -> BmmConfig | None:
    """The TMA kernel's configuration for a float16/bfloat16 problem, or None where the
    pointer kernel serves it (16 < M <= 128: no row measured there)."""
    if M <= 16:
        cfg = _TMA_DECODE
    elif M <= 128:
        return None
    else:
        big = _TMA_TALL if N <= 128 else _TMA_BIG
        cfg = big if _wave_fill(B, M, N, big) >= _TMA_MIN_WAVE_FILL else _TMA_128
    return _clip(cfg, M, N, K)


def _wave_fill(B: int, M: int, N: int, cfg: BmmConfig) -> float:
    """The share of the last wave's SM slots that the batch's tiles of ``cfg`` fill."""
    tiles = B * triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n)
    return tiles / (triton.cdiv(tiles, _NUM_SMS) * _NUM_SMS)


def _tma_layout(t: torch.Tensor) -> tuple[bool, tuple[int, int, int], tuple[int, int, int]] | None:
    """How a descriptor views the 3-D tensor ``t`` ([B, R, C]): ``(transposed, shape,
    strides)`` with a unit innermost stride -- [B, R, C] as stored, or [B, C, R] when
    ``t``'s rows are its unit-stride axis -- or None when TMA cannot describe it (no unit
    stride, another stride not a positive multiple of 16 bytes, a base not 16-byte
    aligned). An axis of length 1 takes any stride: it is never stepped along."""
    if t.data_ptr() % 16:
        return None
    B, R, C = t.shape
    sb, sr, sc = t.stride()
    size = t.element_size()
    for transposed, shape, strides in ((False, [B, R, C], [sb, sr, sc]),
                                       (True, [B, C, R], [sb, sc, sr])):
        if strides[2] != 1 and shape[2] != 1:
            continue
        strides[2] = 1
        # Lengths of 1 step nowhere: give them a legal stride (the extent inside, rounded
        # up to 16 bytes).
        for i in (1, 0):
            if shape[i] == 1:
                strides[i] = -(-strides[i + 1] * shape[i + 1] * size // 16) * 16 // size
        if all(s > 0 and s * size % 16 == 0 for s in strides[:2]):
            return transposed, tuple(shape), tuple(strides)
    return None


def bmm_tma_eligible(input: torch.Tensor, mat2: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the TMA kernel can run this call: a CUDA device of compute capability 9.0 or
    later, float16/bfloat16 (float32 too where ``_TMA_FLOAT32``), and three tensors TMA can
    describe (see :func:`_tma_layout`)."""
    dtypes = _TMA_DTYPES + (torch.float32,) if _TMA_FLOAT32 else _TMA_DTYPES
    return (input.is_cuda and input.dtype in dtypes
            and torch.cuda.get_device_capability(input.device)[0] >= 9
            and all(_tma_layout(t) is not None for t in (input, mat2, out)))


@triton.jit
def _bmm_tma_kernel(
    a_desc, b_desc, c_desc,
    B, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr,
    TRANS_C: tl.constexpr, PROGRAMS: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, STORE_SPLIT: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    tiles = num_m * num_n
    k_steps = tl.cdiv(K, BLOCK_K)
    # Program p takes the pairs p, p + PROGRAMS, ...: matrix t // tiles, tile t % tiles of
    # it in the grouped order of _bmm_kernel. flatten: one pipelined loop over both loops.
    for t in tl.range(tl.program_id(0), B * tiles, PROGRAMS, flatten=True):
        batch = t // tiles
        tile = t % tiles
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_steps):
            off_k = k * BLOCK_K
            if TRANS_A:
                a = a_desc.load([batch, off_k, off_m]).reshape(BLOCK_K, BLOCK_M).T
            else:
                a = a_desc.load([batch, off_m, off_k]).reshape(BLOCK_M, BLOCK_K)
            if TRANS_B:
                b = b_desc.load([batch, off_n, off_k]).reshape(BLOCK_N, BLOCK_K).T
            else:
                b = b_desc.load([batch, off_k, off_n]).reshape(BLOCK_K, BLOCK_N)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        c = acc.to(c_desc.dtype)
        if TRANS_C:
            c_desc.store([batch, off_n, off_m], c.T.reshape(1, BLOCK_N, BLOCK_M))
        elif STORE_SPLIT == 2:
            halves = tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            c0, c1 = tl.split(halves)
            c_desc.store([batch, off_m, off_n], c0.reshape(1, BLOCK_M, BLOCK_N // 2))
            c_desc.store([batch, off_m, off_n + BLOCK_N // 2], c1.reshape(1, BLOCK_M, BLOCK_N // 2))
        else:
            c_desc.store([batch, off_m, off_n], c.reshape(1, BLOCK_M, BLOCK_N))


def bmm_tma(input: torch.Tensor, mat2: torch.Tensor, out: torch.Tensor,
            config: BmmConfig | None = None, precision: str = "tf32x3") -> torch.Tensor:
    """``input @ mat2`` (batched) into ``out`` through TMA descriptors, by the persistent
    kernel (see the section comment above); returns ``out``.

    Every tensor must be describable by TMA (``ValueError`` otherwise: :func:`bmm_triton`
    checks :func:`bmm_tma_eligible` and routes). ``config`` overrides
    :func:`bmm_tma_config_for`. float32 (``precision`` as for :func:`bmm_triton`, the pointer
    kernel's float32 tile) runs here when called directly or where ``_TMA_FLOAT32`` is set,
    for comparison; by default :func:`bmm_triton` keeps float32 on the pointer kernel.
    """
    if precision not in ("tf32x3", "ieee"):
        raise ValueError(f"precision must be 'tf32x3' or 'ieee', got {precision!r}")
    B, M, K, N = _check(input, mat2, out)
    if out.numel() == 0:
        return out
    if K == 0:
        return out.zero_()
    layouts = [_tma_layout(t) for t in (input, mat2, out)]
    if any(lay is None for lay in layouts):
        raise ValueError("bmm_tma needs, for input, mat2 and out, a unit stride on one of the "
                         "two matrix axes, the other strides positive multiples of 16 bytes "
                         "and 16-byte aligned bases; bmm_triton runs the others")
    if config is None and input.dtype == torch.float32:
        config = bmm_config_for(B, M, N, K, input.dtype, precision)
    cfg = config or bmm_tma_config_for(B, M, N, K) or _clip(_TMA_128, M, N, K)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    (ta, sha, sta), (tb, shb, stb), (tc, shc, stc) = layouts
    a_desc = TensorDescriptor(input, list(sha), list(sta), [1, bk, bm] if ta else [1, bm, bk])
    b_desc = TensorDescriptor(mat2, list(shb), list(stb), [1, bn, bk] if tb else [1, bk, bn])
    split = 2 if cfg.store_split == 2 and not tc else 1  # a transposed C is stored whole
    c_desc = TensorDescriptor(out, list(shc), list(stc), [1, bn, bm] if tc else [1, bm, bn // split])
    programs = min(B * triton.cdiv(M, bm) * triton.cdiv(N, bn), _num_sms(input.device))
    upcast = TRITON_INTERPRETED and input.dtype == torch.bfloat16
    launch(_bmm_tma_kernel, (programs,),
        a_desc, b_desc, c_desc, B, M, N, K,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m,
        TRANS_A=ta, TRANS_B=tb, TRANS_C=tc, PROGRAMS=programs,
        INPUT_PRECISION="ieee" if upcast else precision if input.dtype == torch.float32 else "tf32",
        UPCAST=upcast, STORE_SPLIT=split, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **overlap_options(input.device),
    )
    return out
