"""W4A16 GEMM: ``y = x @ dequant(W).T`` for int4 weights packed two to a byte.

Layout (the spec, ``manifest/spec/quant_gemm.yaml``, is the authority):

* ``x``: ``[M, K]`` float16 or bfloat16 activations, any strides;
* ``packed_weight``: ``[N, K // 2]`` uint8; byte ``[n, j]`` holds ``q[n, 2j]`` in its low
  nibble and ``q[n, 2j + 1]`` in its high nibble, ``q`` in ``0..15``;
* ``scales``, ``zeros``: ``[N, K // group_size]``, float16, bfloat16 or float32 (zero
  points are floats: integer ones are exact, fractional ones allowed);
* ``dequant(W)[n, k] = (q[n, k] - zeros[n, k // g]) * scales[n, k // g]``;
* ``y``: ``[M, N]`` in ``x``'s dtype, accumulated in float32.

Helpers: :func:`pack_int4` / :func:`unpack_int4` (``[N, K]`` integers 0..15 <-> the packed
layout), :func:`quantize_int4` (float ``[N, K]`` -> ``(packed, scales, zeros)``,
asymmetric min/max per group), :func:`dequantize_int4`.

Kernels (plain functions; the dispatch classes are in :mod:`opspec.kernels.quant_gemm_impl`):

* :func:`gemm_w4a16_reference` -- torch: dequantize in float32 (float64 for float64
  operands), matmul, cast back.
* :func:`w4a16_decode_triton` -- ``M <= 16``, the GEMV regime, bound by streaming the
  packed weight (``N * K / 2`` bytes) from HBM. Where the groups are whole 128-wide steps
  (``DecodeConfig.tc``, the table's choice) the tensor-core kernel runs
  (:func:`_w4a16_tc_kernel`): its tile is laid out so that each lane's registers already
  hold the ``mma.sync.m16n8k16`` fragments -- two weight rows (A rows g and g + 8) x 16
  bytes of a 128-wide step, and the 64 bytes of x those words multiply for token g (B
  column g) -- so no operand passes through shared memory. Two asm blocks do the work a
  step: one turns a lane's x words into B fragments (PRMT) and takes the sum of x per token
  with MMAs against an all-ones A; the other dequantizes each weight word into four 16-bit
  pairs (nibbles i and i + 4 cut out by one LOP3 into the bits of 1024.0 or 128.0, exactly
  b + q, less 8 + b unless ``biased``) and runs two MMAs a word (float32 accumulation; the
  K order inside an MMA is free as long as A and B agree). Then ``s * (P - (z - 8) X)`` per
  group in float32. Up to 8 tokens ride in the MMA's N columns (M = 9..16 use a second
  token tile). A program's warps split the rows and K (K slices: contiguous runs of steps),
  so N / 16 small programs fill the GPU without a split-K grid. The slices' sums are added
  in shared memory at the end of the program, or, for large weights
  (``DecodeConfig.planes``), each slice stores its own into a float32 ``[slices, M, N]``
  buffer (an asm store in the tile's layout, so no barrier anywhere in the program) that
  the split-K sum kernel adds up in a fixed order: the program's warps no longer wait for
  its slowest. On sm_90 the largest weights (``DecodeConfig.tma``) take a form of it with
  its warps along the rows only (:func:`_w4a16_tc_tma_kernel`): a step's word tile is
  then one ``[16 x warps rows, 64 bytes]`` box of the weight, brought in by TMA a few
  steps ahead through shared memory instead of loaded into registers a step at a time
  (6-8 % faster on the 70B and 405B rows), and x is read only by the lanes whose MMA
  column holds a token (5-8 % faster at M = 1). At M = 9..16 it serves the largest
  weights too (``_TC_TMA_WIDE``), each warp taking its rows of four such blocks so that a
  step's x fragments serve all of them (18-21 % faster than the MMA kernel on the 70B
  gate-up row), and every weight whose N gives enough programs: K is split over programs
  until about one wave runs (each split storing a float32 plane that the split-K sum
  kernel adds up), 6-19 % faster than the MMA kernel on the 70B up and down and 8B up
  rows; there narrower weights take the MMA kernel. Scales and zero points are
  loaded through a small asm block so that they take the tile's layout under every
  Triton version. Under the interpreter (no PTX) a portable model of the asm blocks runs
  in their place;
  tests/test_quant_gemm_warp.py checks the asm text itself against a model of one warp.
  Where the TMA kernel does not apply (a device before sm_90, a weight whose base or row
  stride is not a multiple of 16 bytes) the K-sliced kernel runs. Where the groups are not
  whole 128-wide steps, or the operands do not allow the tensor-core kernels (a weight
  whose rows are not aligned 4-byte words, a device without sm_80 MMAs), the MMA or FMA
  kernel below runs. The MMA kernel computes ``y.T``: each program owns
  ``BLOCK_N`` weight rows and a range of K (split-K when ``N`` alone gives too few
  programs for the 132 SMs; the partial sums go to a float32 ``[split, M, N]`` buffer that
  a second small kernel adds up in a fixed order, so results are deterministic). Per step
  it loads a ``[BLOCK_N, BLOCK_K / 2]`` byte tile (16-byte vectors along K), splits the
  nibbles in registers into the even-k and odd-k halves, and the ``x`` tile
  ``[16, BLOCK_K]`` (rows wrapped for M < 16) into its even and odd columns, then
  ``acc[n, m] += dot(q_even, x_even.T) + dot(q_odd, x_odd.T)`` on tensor cores (the weight
  is the wide operand, so each MMA covers 16 weight rows, not 16 tokens).
  When a tile lies within one quantization group (``group_size % BLOCK_K == 0``, the usual
  128-wide groups) the dequantization is applied per group rather than per weight:
  ``sum_k (q - z) s x = s * (sum_k q x - z * sum_k x)``. A nibble becomes a 16-bit float
  without an int-to-float conversion (16 a clock per SM on sm_90, which alone would cap
  the kernel near 45 % of HBM bandwidth): ORed into the mantissa of ``b`` = 1024.0
  (float16) or 128.0 (bfloat16) it is exactly ``b + q``, and the bias goes out with the
  zero point, ``s * (sum_k (b + q) x - (z + b) * sum_k x)`` in float32. So a weight byte
  costs a few integer operations, and the scale and zero point a few float32 operations
  per ``(row, token)`` per tile. Other group sizes dequantize each weight in registers
  (``(q - z) * s`` in x's dtype, gathered scales) before the dot.
  With ``DecodeConfig.gemv`` (the table's choice for M = 1) and ``M <= GEMV_MAX_M``,
  one-group steps and a weight whose rows are whole aligned 4-byte words, the FMA
  formulation runs instead (:func:`_w4a16_gemv_kernel`): the weight read as int32 words
  (word ``w`` holds ``q[8w + i]`` in bits ``4i..4i+3``), each nibble moved by a shift and
  a mask into the mantissa of 1.0 (``1 + q / 16``, exact, no conversion), multiplied
  into float32 partial sums with ``x`` (loaded once a step a thread, shared by the
  thread's rows), ``s * (16 S - (16 + z) X)`` per group. No shared memory, MMA waits or
  layout shuffles a step; its FMAs grow with M. Triton does not software-pipeline these
  loads, so with ``num_stages >= 2`` the kernel requests the next step's words before it
  computes the current one (two steps in flight a thread).
* :func:`w4a16_prefill_triton` -- any M, tiled like a GEMM: one program per ``BLOCK_M x
  BLOCK_N`` tile of y in grouped order, loading ``x`` ``[BLOCK_M, BLOCK_K]`` and the packed
  ``[BLOCK_N, BLOCK_K / 2]`` bytes per step, dequantizing the weight tile in registers
  (nibbles interleaved back to ``[BLOCK_N, BLOCK_K]``, made exact floats by bit operations,
  ``(q - z) * s`` in float32 and rounded once to x's dtype, or, with
  ``PrefillConfig.f32_dequant`` off, in x's dtype) and ``tl.dot`` into a float32
  accumulator. With ``PrefillConfig.swap_ab`` the program computes its tile of ``y.T``,
  ``dot(dequant(W), x.T)``: on sm_90 the dequantized weight is then wgmma's A operand,
  taken from registers, rather than stored to shared memory for the B operand.
  From ``_PREFILL_TWO_PASS_MIN_M`` tokens (``PrefillConfig.two_pass``) the product is bound
  by tensor-core throughput, which dequantizing in the main loop keeps far below the GEMM
  kernel's: there it runs in two passes instead, the weight dequantized into a scratch
  ``[rows, K]`` matrix in x's dtype (:mod:`opspec.kernels.quant_dequant`; float32, one
  rounding) and ``x @ scratch.T`` by :func:`opspec.kernels.gemm.gemm_triton` (its own
  table, TMA on sm_90), N in slices of at most ``_TWO_PASS_SCRATCH_BYTES`` of scratch.

Every tuning constant is in the block below (plain Python, no autotuning at call time), to
be retuned from H200 timings. On the CPU, Triton's interpreter computes ``tl.dot`` wrongly in
bfloat16: there (only) bfloat16 operands are widened to float32 before the dot
(``UPCAST``), so the rest of the bfloat16 path is still tested on the CPU; the bfloat16 MMA
itself is checked on the GPU. Every kernel here is launched dependent where the device
allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.gemm import gemm_triton
from opspec.kernels.launch import LaunchMemo, launch, prepare
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.quant_dequant import dequant_supported, dequantize_int4_triton
from opspec.kernels.tiling import H200_SMS as _NUM_SMS
from opspec.kernels.tiling import INT32_LIMIT
from opspec.kernels.tiling import element_extent as _extent
from opspec.kernels.tiling import grouped_tile

__all__ = [
    "DECODE_MAX_M",
    "GEMV_MAX_M",
    "DecodeConfig",
    "PrefillConfig",
    "decode_config_for",
    "legacy_decode_config",
    "tc_config_for",
    "dequantize_int4",
    "gemm_w4a16_reference",
    "pack_int4",
    "prefill_config_for",
    "quantize_int4",
    "unpack_int4",
    "w4a16_decode_triton",
    "w4a16_prefill_triton",
]

DECODE_MAX_M = 16
GEMV_MAX_M = 4     # the FMA decode kernel's rows (its FMAs grow with M, the MMA's do not)
_INT32_LIMIT = INT32_LIMIT
_PREPARED = LaunchMemo()   # the tensor-core decode launches, by w4a16_decode_triton's key
_ACTIVATIONS = (torch.float16, torch.bfloat16)
_SCALES = (torch.float16, torch.bfloat16, torch.float32)


class DecodeConfig(NamedTuple):
    block_n: int      # weight rows per program
    block_k: int      # K per step (the byte tile is block_k // 2 wide)
    split_k: int      # programs along K
    num_warps: int
    num_stages: int
    # The FMA formulation (:func:`_w4a16_gemv_kernel`, M <= GEMV_MAX_M, no tensor cores)
    # instead of the MMA one; where its conditions fail (see w4a16_decode_triton) the MMA
    # kernel runs. For it num_stages >= 2 means register double-buffering of the weight
    # (its loads are not software-pipelined by Triton), 1 none.
    gemv: bool = False
    # The tensor-core decode kernel (:func:`_w4a16_tc_kernel`, M <= 16, 128-wide steps
    # inside one group; takes precedence over ``gemv``): block_k = 128; a program has
    # ``k_slices`` warps along K times num_warps // k_slices along the rows, two rows a lane,
    # so block_n = 16 * (num_warps // k_slices); num_stages is 1 (no step requested ahead).
    # ``biased`` leaves the dequantized nibbles as b + q (b = 1024 or 128; fewer
    # instructions a word, the bias removed with the zero point in float32,
    # s * (P - (z + b) X)); else they are q - 8, and every product is exact.
    tc: bool = False
    k_slices: int = 1
    biased: bool = False
    # The tensor-core kernel's K slices each store their own partial sums (a float32
    # [split * k_slices, M, N] buffer that a second small kernel adds up in a fixed order)
    # instead of adding them in shared memory at the end of the program, where a program's
    # warps wait for its slowest.
    planes: bool = False
    # The tensor-core kernel with its weight steps brought in by TMA (sm_90+;
    # :func:`_w4a16_tc_tma_kernel`): k_slices 1, so that a program's [16 * num_warps rows,
    # 64 bytes] word tile is one box of the weight, num_stages boxes in flight through
    # shared memory (Triton's loop pipeliner), none in registers; block_n // (16 *
    # num_warps) row blocks a program; split_k programs along K, each storing a float32
    # plane of partial sums that the split-K sum kernel adds up.
    tma: bool = False


class PrefillConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    # The weight tile is dequantized in float32 ((q - z) * s, one rounding to x's dtype)
    # when true, in x's 16-bit dtype (two roundings, fewer instructions) when false.
    f32_dequant: bool = True
    # When true the program computes y.T's tile, dot(dequant(W) [BLOCK_N, BLOCK_K],
    # x.T): the dequantized weight is the MMA's A operand, which sm_90 (wgmma) can take
    # from registers, so it need not go through shared memory.
    swap_ab: bool = False
    # Two passes instead of the fused kernel: the weight dequantized into a scratch
    # [N, K] matrix in x's dtype (:func:`opspec.kernels.quant_dequant.dequantize_int4_triton`,
    # at most _TWO_PASS_SCRATCH_BYTES a pass, so N in slices), then the GEMM kernel
    # (:func:`opspec.kernels.gemm.gemm_triton`, its own table) on each slice. The tile fields
    # are unused.
    two_pass: bool = False


# --- the table: every tuning constant ------------------------------------------------
# Decode: enough programs to keep every SM streaming (several resident per SM, each with
# num_stages - 1 byte tiles in flight), a split of K only where N gives too few.
# With 64-row tiles (below) the split that gave about 4 programs an SM measured best, and
# the split one past it (5 on the 8192 x 28672 row: 640 programs) up to 16 % slower than
# it, so the target is a little under 4 x 132 (H200, M = 16, float16 and bfloat16 alike:
# 8192 x 28672 split 4 90.7 us, 8 92.2, 6 93.5, 3 93.0, 5 105.1, 2 102.8; 28672 x 8192
# split 2 92.5, 4 94.0, 1 99.0).
_DECODE_TARGET_PROGRAMS = 512
_DECODE_MIN_STEPS_PER_SPLIT = 4
_DECODE_BLOCK_K = (256, 128, 64, 32)  # the largest dividing group_size (one group a tile)
_DECODE_GATHER_BLOCK_K = 64           # group sizes that are not a multiple of 32
_DECODE_WARPS, _DECODE_STAGES = 4, 4
# Weight rows a program. A step's fixed work (the x tile: loaded, split into even and odd
# columns, summed, staged for the MMA; the scale and zero point) is shared by its rows:
# in the sm_90 build a step of 32 rows issues 356 instructions a warp for 2 KB of weight
# (1.4 bytes an instruction), 128 rows 509 for 8 KB (4.0); HBM at 75 % of 4.2 TB/s needs
# about 3.4 at 1.75 GHz (4 instructions a clock per SM). It also amortizes the re-read of
# x from L2 (4 KB a step at M = 16). Split-K makes up the programs for small N.
# H200 (benchmarks/w4a16_probe.py mma, bfloat16, 2026-11-30), the rows this kernel serves
# (M = 9..16): 64 rows, 4 warps, 4 stages, K split to about 4 programs an SM was best or
# within 2 % of it on each, against the table's 128 rows then: 28672 x 8192 (M = 16) 93.7
# us against 104.2, 8192 x 28672 92.9 / 103.8, 14336 x 4096 (M = 12) 30.8 / 34.0 (though
# the 3-way split the target above gives that row ran above 33). Every candidate (64 or
# 128 rows, 4 or 8 warps, 1, 2 or 4 stages, 1-6 splits) ran at 0.9-1.26 TB/s: the step's
# fixed work, not the pipeline or the split, bounds this kernel.
_DECODE_BLOCK_N = 64
# The FMA decode kernel (DecodeConfig.gemv) for M <= _GEMV_DEFAULT_MAX_M: no shared memory
# or MMA waits a step; in the sm_90 build its loop issues 658 instructions a warp for 2 KB
# of weight at M = 1 (3.1 bytes an instruction: 1 shift, 1 LOP3, 1 FFMA a nibble), 2.2 at
# M = 2 and 1.4 at M = 4 (its FMAs grow with M). Against the MMA kernel on the H200: the
# sweep below (benchmarks/w4a16_sweep.py).
_GEMV_DEFAULT_MAX_M = 1
_GEMV_BLOCK_N = 128                   # weight rows a program (4 a thread at 4 warps)
_GEMV_BLOCK_K = 128                   # K per step: 16 int32 words of each row
# H200 sweep (benchmarks/w4a16_sweep.py), M = 1: split-K to about 10 programs an SM ran the
# 70B gate-up row (57344 x 8192) at 1.77 TB/s with 3 splits and the 405B up row at 1.97
# with 6, against 1.57 and 1.75 at 4 programs an SM; the MMA kernel reached 1.34 / 1.42.
_GEMV_TARGET_PROGRAMS = 10 * _NUM_SMS
# Its loads are not software-pipelined by Triton: stages = 2 double-buffers the weight
# words in registers (two steps in flight a thread; 80 registers in the sm_90 build).
_GEMV_WARPS, _GEMV_STAGES = 4, 2
# Prefill: GEMM tiles; 128-wide K steps would straddle 64-wide groups, so block_k <= group.
# H200 timings: 128x128 tiles, 8 warps, 3 stages, float32 dequantization measured 341
# TFLOP/s on the 4096 x 28672 x 8192 row; 128x256 tiles with the dequantization in
# 16-bit arithmetic measured 245 (both changed at once; the 128x256 tile takes 220
# registers a thread in the sm_90 build, so one program an SM, against two at 128x128).
# So the 128x128 tile for every M > 64, and float32 dequantization. The swapped product
# (swap_ab: the dequantized weight as wgmma's register A operand) is untimed: its
# 256-token x 128-row tile issues 1949 FLOP of MMA a warp instruction against 865 for
# this tile (sm_90 build, 211 registers, one program an SM).
# H200 sweep, M = 4096: the swapped 256-token x 128-row tile with 16-bit dequantization
# ran 439 TFLOP/s on 4096 x 28672 x 8192 (eager, dequantize + cuBLAS: 306), 485 on
# 4096 x 14336 x 4096 and 429 on 4096 x 4096 x 14336; the 128x128 tile above 333, 321, 307.
# The same sweep found the swapped 128x128 tiles wrong on the GPU (NaN outputs), so a
# problem too small for 256 tokens a tile takes the unswapped 128x128 tile, float32
# dequantization (333 TFLOP/s above).
_PREFILL_LARGE = PrefillConfig(256, 128, 64, 8, 8, 3, False, True)
_PREFILL_UNSWAPPED = PrefillConfig(128, 128, 64, 8, 8, 3)
# Two 8-warp programs an SM need <= 128 registers a thread: the bfloat16 and float16 builds
# of the 128x128 tile take 128, float16 activations with float32 scales 130 (one program
# an SM) unless capped (then 16 bytes of stack). Applied to
# unswapped tiles of at most 128x128 at 8 warps; None disables the cap.
_PREFILL_MAXNREG = 128
_PREFILL_MEDIUM = PrefillConfig(64, 128, 64, 8, 4, 3)
# Two passes (PrefillConfig.two_pass) from this many tokens, where the group is 2^i bytes:
# the fused tiles above stay near 380-490 TFLOP/s, the GEMM kernel on the 16-bit weight
# runs at 560-740, and the dequantization pass streams 2.5 bytes an element at 3.4-3.6
# TB/s. H200, bfloat16 (benchmarks/w4a16_probe.py prefill), fused against two passes:
# N x K = 14336 x 4096: M = 256 80 against 102 us, 512 150 / 145, 1024 280 / 213, 2048
# 492 / 352; 28672 x 8192: M = 512 630 / 487, 1024 1089 / 764, 4096 4358 / 2588 (cuBLAS
# on the dequantized weight 2535); 4096 x 14336, M = 2048: 588 / 342; 3584 x 18944,
# M = 1024: 373 / 251.
_PREFILL_TWO_PASS_MIN_M = 512
_PREFILL_TWO_PASS = PrefillConfig(0, 0, 0, 0, 0, 0, True, False, True)
# The scratch matrix's bound: N is dequantized and multiplied in slices of whole
# _TWO_PASS_ROW_ALIGN rows (16-byte aligned output columns for the GEMM's TMA path).
_TWO_PASS_SCRATCH_BYTES = 256 << 20
_TWO_PASS_ROW_ALIGN = 256
_PREFILL_SMALL = PrefillConfig(32, 64, 64, 8, 4, 3)
# Tensor-core decode kernel (DecodeConfig.tc) for every M <= _TC_MAX_M with 128-wide
# groups; set _TC_MAX_M = 0 and _TC_TMA_WIDE = None to fall back to the MMA / FMA kernels
# everywhere. The instruction counts first are from its sm_90 builds under Triton 3.9 and
# 3.6 (the device's), within 12 % of each other; the H200 timings
# (benchmarks/w4a16_sweep.py, w4a16_probe.py) follow. A lane's step (two weight rows x 128
# k) issues 2 16-byte weight loads, 9 instructions a word to dequantize (float16: LOP3s
# into the bits of 1024.0 and one packed subtract or FMA a pair, exact q - 8; bfloat16:
# 11, or 7 biased) and 2 MMAs a word and token tile; the x side (4 16-byte loads, 16
# PRMTs, 8 MMAs with an all-ones A for the zero point's sum of x), the scale loads and 8
# float32 FMAs for s * (P - (z - 8) X): 152-170 SASS instructions a step (float16;
# bfloat16 biased 140-147, exact 172-181) for 64 weights a lane, 6.0-6.7 bytes of weight a
# warp instruction against 3.1 for the FMA kernel above: about 6 TB/s of issue at 4 warp
# instructions a clock per SM, so the HBM, not issue, should bound it. No shared memory or
# barrier in its loop under either Triton (under 3.6 the FMA kernel's loop has 7
# shared-memory instructions and barriers, and the MMA kernel reads the weight bytewise
# with ~80 of them: likely why they reach 1.8 and 0.9-1.2 TB/s). Tokens ride in the MMA's
# 8 columns: M <= 8 issues the MMAs M = 1 does (its x requests grow with M: see
# _TC_X_TOKENS and the TMA notes); M = 9..16 a second token tile (2 more MMAs a word,
# 205-214 instructions a step, ~145 registers).
# H200 sweep (benchmarks/w4a16_sweep.py, 2026-11-30): M = 1 rows 2.06-2.11 TB/s with no
# prefetch (70B gate-up 121 us, 405B up 219 us, against 180 / 245 for the FMA kernel;
# 8B up 31 us against 49), M = 4 35.7 us against the MMA kernel's 40.2; M = 16 lost to
# the MMA kernel (124-137 us against 100-101), so M > 8 (a second token tile) keeps it.
# Again with the planes (w4a16_probe.py tc16, H200, 2026-12-01; 106-110 registers): 70B up
# M = 16 best 112.9 us (8 K slices, planes) against the MMA kernel's 93.8, 70B down 101.3
# against 90.0, M = 12 14336 x 4096 30.2 against 32.2 (2 slices): still the MMA kernel.
# (That sweep timed with do_bench, which counts the host's launch where it outlasts the
# kernel: about 65 us a call on that host. Timed since as the bench does, device time,
# the bench run of 2026-11-30 had this kernel at M = 16 still behind: 70B up 112 against
# 102 us, 70B down 105 against 100.)
# Then for M = 9..16 (H200, 2026-12-01, a probe before _TC_TMA_WIDE: the TMA kernel with
# each warp taking 2 or 4 16-row blocks of its box, the step's x fragments shared by
# them, tokens 8..15 read by their lanes only; 138-210 registers): 57344 x 8192 at M = 16
# 138.6 us (4 blocks, 2 warps) against the MMA kernel's 165.6; 28672 x 8192 92.7 (2
# blocks) against 89.5; 8192 x 28672 270-370 against 87.5 (64-256 programs, no K split).
# The x side of a second token tile, not its MMAs, is what costs: the same loop with the
# first tile's x standing in for the second's ran 74.7 us on 28672 x 8192.
# Where the M = 1 rows stop (ncu, 70B gate-up bfloat16, 2.2 TB/s, 46 % of DRAM): the L1's
# LSU wavefronts 89 % busy, warps stalled on L1 loads most of the time, 0.39 instructions
# issued a cycle per scheduler. A step's loads make 56 L1 tag requests a warp: 16 for
# the weight, 8 for x and 32 for the scales and zero points (each load touches 8 rows'
# scales, a row of the [N, G] tensor apart). A plain kernel reading the same weight in the
# same [16 rows x 64 bytes] steps ran at 3.6 TB/s, so the access pattern is not the bound
# (benchmarks/w4a16_probe.py rows; its `launch` is the ncu target).
# Tried on the H200 and not kept, each within -4..+4 % of this table in the bench (or
# slower): the scales of 4 steps from one 8-byte load a row (4x fewer scale requests; its
# unrolled loop needs a register cap), the weight steps pipelined through shared memory
# (Triton's cp.async pipeline, 2-5 stages, with x and the scales as register loads and
# the scales a step ahead), L2 prefetch-size hints (128 / 256 bytes) on the weight loads,
# bulk L2 prefetches (cp.async.bulk.prefetch) of each row 2-16 steps ahead, a
# 64-register cap, and 32 weight rows a warp (two MMA row pairs sharing the step's x
# fragments: 22 % fewer instructions a byte and 2 KB in flight a warp, but 112 registers
# a thread; 2-10 % slower on every row).
# Since then (benchmarks/w4a16_probe.py `ablate`, H200, 2026-12-01, M = 1 bfloat16, the
# loop with its parts switched off one at a time, each slice storing its own sums): 70B
# gate-up 105.7 us in full, 102.7 without the x loads, 98.6 without the scale and zero-point
# loads, 106.2 without the x block's asm, 82.0 with the weight loads alone (the loop's
# consumers of the words kept). Storing the scales column-major (strides (1, N): one sector
# a load instead of 8; `layouts`) was slower: 141.8 against 125.1 us. Triton's cp.async
# pipeline of the weight (x loaded by asm so that it stays out of shared memory, 2-6
# stages) ran 110.7-127.5 against 110.2 with none, the weight alone 100.0 against 87.4.
# So the bound is each warp's step -- its loads, then its MMAs -- not the requests a step
# makes, the end of a program (the planes above removed that) or a missing pipeline.
_TC_MAX_M = 8
#: Tokens one MMA token tile holds (the n of m16n8k16: lane group g is token g); M above it
#: takes two tiles.
_TC_TILE_TOKENS = 8
# The K-sliced kernel's x loads, in the lanes whose B column holds a token (g < M) only,
# for these M by x dtype (the others read a token again, as the note below found best at
# M = 1). H200 (benchmarks/w4a16_probe.py `xtokens`, 2026-12-01, us, every lane against
# token lanes), bfloat16:
# 14336 x 4096 M = 2 22.4 / 20.0, M = 4 22.4 / 20.2, M = 6 22.6 / 21.2, M = 8 22.8 /
# 23.0; 4096 x 14336 M = 2..6 24.4-24.9 / 23.5-24.4; 18944 x 3584 M = 2..6 22.4-22.7 /
# 21.5-21.9; M = 1 12.9 / 13.0, 20.2 / 19.7, 53.0 / 55.6. float16 only gained on the first
# shape (M = 2..6, 4-8 %) and lost 1-6 % on the other two, so it reads x in every lane.
_TC_X_TOKENS = {torch.bfloat16: (2, 6)}
# ptxas' register cap for the tensor-core decode kernel (None: its own choice). A cap of 72
# (the registers ptxas takes uncapped on the device's Triton 3.6) moved the bench's decode
# rows by -2..+1 % (H200, 2026-12-01: 70B gate-up 109.9 -> 108.5 us, 405B up 212.4 ->
# 209.9, 8B down 26.1 -> 26.3); not kept.
_TC_MAXNREG: int | None = None
# No step is requested ahead in registers (num_stages is 1 in every tensor-core config).
# The kernel had such a prefetch, one or two steps ahead (90-94 and ~138 registers a
# thread, against 64-72): on the H200 one step ahead was 16 % slower than none on the
# M = 1 rows, and it gave wrong outputs where a slice's step count was not a multiple of
# the depth + 1 (qwen2.5-7b: 28 steps over 4 slices, one ahead), which the interpreter's
# model did not show. It was removed. Issuing two steps' loads before computing either (an
# unrolled pair, no registers carried across iterations; 76-80 registers) did not help
# either (H200, 2026-11-30): 4096 x 4096 13.7 against 13.8 us, 4096 x 14336 (M = 4) 25.9 /
# 26.5, 18944 x 3584 (M = 4) 29.3 / 29.6, and 6-15 % slower on the large M = 1 rows; ptxas
# issues the second step's weight loads after the first step's MMAs anyway. Nor did more
# warps a program or a register cap on the small-N rows (16 K slices: 19-76 us against
# 14-29; caps of 64, 56, 48 registers: equal or slower). There (ncu, 4096 x 4096, M = 1,
# 11.8 us) 3.6 warps a scheduler issue once every 5 cycles, stalled on the MMA and load
# chains of each step, DRAM 16 % busy: few warps and much work a warp, not bytes in flight.
# Loading x only in the lanes whose token is < M (the others' B columns zero) cost 2-7 %
# on every M = 1 and M = 4 row (the extra predicates) when first tried; timed again since
# (_TC_X_TOKENS above), it pays on bfloat16 at M = 2..6, so only there.
# Warps of a program: all along K by default (programs of 16 rows x all of K; the slices'
# sums meet in shared memory once a program, or as planes), so that N / 16 short programs
# give every SM work without a split-K launch, even for N = 4096, and the last wave's tail
# is a small part of the run. 4 slices where N / 16 x 4 warps fill the SMs
# (_TC_WARPS_WANTED: 132 SMs x 16), else 8; halved while a slice would get fewer than
# _TC_MIN_STEPS steps. H200 (w4a16_probe.py tc, 2026-12-01, bfloat16, slices' sums in
# shared memory), by K slices: 4096 x 4096 (M = 1, 32 steps) 8: 14.7 us, 4: 13.7; 18944 x
# 3584 (M = 4, 28 steps) 4: 29.1, 2: 24.6; while 4096 x 14336 (M = 4, 112 steps) 8: 26.2,
# 4: 33.0 and 14336 x 4096 (M = 1, 32 steps) 4: 22.1, 2: 23.2: a slice of fewer than 8
# steps loses, so _TC_MIN_STEPS went from 2 to 8.
_TC_ROW_WARPS = 1
_TC_SLICES = (4, 8)
# N below which programs are also split along K (2 splits, summed by _split_sum_kernel: a
# second launch); 0: never (the slices above should give small N enough warps).
_TC_SPLIT_BELOW_N = 0
# DecodeConfig.planes for the table's tensor-core configs with k_slices > 1 and at least
# _TC_PLANES_MIN_BYTES of packed weight. H200 (benchmarks/w4a16_probe.py, 2026-12-01,
# bfloat16): the kernel's loop alone (`ablate`, M = 1, 4 K slices) ran 121.5 us with the
# slices' sums added in shared memory at the end and 106.7 with each slice storing its
# own (70B gate-up; 405B up 217.7 / 204.3; 8B up 21.7 / 18.8); the kernel itself (`tc`),
# planes and their sum against one launch: 70B gate-up 107.4 / 122.0 us, 405B up 201.4 /
# 218.2, 8B up 21.2 / 22.0, M = 4 18944 x 3584 27.6 / 29.1, 4096 x 4096 13.0 / 14.7. The
# second launch costs host time (`host`: 24-27 us a call against 12-13, the planes buffer's
# torch.empty 3.5 of it), which an eager call of a small weight waits on: below 64 MiB
# (device time under ~25 us) the slices add up in shared memory.
_TC_PLANES = True
_TC_PLANES_MIN_BYTES = 64 << 20
_TC_WARPS_WANTED = 16 * _NUM_SMS
_TC_MIN_STEPS = 8
# bfloat16: biased (b = 128: the float32 cancellation of 128 X costs ~1e-5 of a group's
# sum, against bfloat16's 4e-3 rounding; 7 instructions a word, not 11). float16: exact
# (with b = 1024 the cancellation would cost ~2e-4, near float16's own rounding, to save 2).
_TC_BIASED = {torch.float16: False, torch.bfloat16: True}
# DecodeConfig.tma for weights of at least _TC_TMA_MIN_BYTES: _TC_TMA_WARPS warps along the
# rows (64 rows a program), _TC_TMA_STAGES boxes in flight (at M = 1, _TC_TMA_ONE_TOKEN:
# see below). H200 (benchmarks/w4a16_probe.py
# `tma`, 2026-12-01, bfloat16, M = 1, one K split), against the table's planes: 70B gate-up
# 104.6 us (4 warps, 3 stages; 105.9 at 4 stages, 108.7 at 2 warps) against 111.5, 405B up
# 201.2 (197.2 at 2 warps and 4 stages) against 213.2. Where N / 64 programs are too few
# (14336 x 4096: 30.6 against 22.2; 4096 x 4096 27.2 against 14.0; M = 4 18944 x 3584 33.2
# against 24.7) the K-sliced kernel stays, and a K split of the TMA kernel over programs
# (2 or 4 planes) did not catch it up on those rows (22.9-35.7) and lost on the large ones
# (115.6-123.3 on the 70B gate-up). The x words go through an asm load: as a tl.load the
# pipeliner copied them into shared memory too, for every row of the tile (10x slower).
# Where it stops (ncu, 70B gate-up bfloat16, 98.9 us): DRAM 56 % busy, L1/TEX 82 %, warps
# stalled on L1 loads 44 % of the time, 8 programs an SM (62 registers). The loop with its
# parts replaced by constants (w4a16_probe.py `tmablate`, us): 100.6 in full, 81.9 without
# the scale and zero-point loads, 75.4 without x, 64.3 without both (405B up: 195.9,
# 158.7, 144.5, 122.6): a step's x and scale loads, not the weight's boxes, bound it.
# Since then the x words are read only by the lanes whose B column holds a token (g < M):
# 8x fewer requests at M = 1 (H200, `tmacfg`, 2026-12-01: 70B gate-up 101 -> 96.1 us, 405B
# up 200 -> 187.8, bfloat16). Then, by warps and stages: M = 1 ran best at 2 warps and 4
# boxes (bfloat16 91.6 and 178.7 us, float16 92.3 and 180.3, against 96.1 / 187.8 and 93.6
# / 181.2 at 4 warps, 3 boxes); M = 4 and 8 at 4 warps and 3 boxes (2 warps: 2-6 %
# slower). Also tried there, not kept: two 64-row boxes a warp sharing the step's x
# (+0..-5 %, 86 registers), two or four steps an iteration (+20 %), the scales of 2, 4 or
# 8 steps from one load (shuffled across the quad or selected in registers: -4..+28 %),
# x's fragments and sums prepared by a first launch (+4 %), register caps of 56-40
# (spills, +5..+140 %), x and the scales through the non-coherent path (ld.global.nc: x
# -0.5..-1 %, the scales +1..+2 %).
# Nor (H200, 2026-12-04, side by side, us, table / with it): the one-block loop requesting
# step i + 1's scales, zero points and x words during step i (a step's latency hidden, as
# the GEMV kernel's words are): 57344 x 8192 M = 1 bfloat16 92.9 / 94.8, float16 93.4 /
# 92.4, 53248 x 16384 M = 1 181.7 / 180.0; M = 4 106.1 / 130.1, M = 8 float16 140.8 / 169.0.
_TC_TMA = True
_TC_TMA_MIN_BYTES = 160 << 20
_TC_TMA_WARPS = 4
_TC_TMA_STAGES = 3
_TC_TMA_ONE_TOKEN = (2, 4)     # (warps, stages) at M = 1
# M = 9..16 (two token tiles) on weights of at least _TC_TMA_MIN_BYTES whose N gives at least
# _TC_TMA_WIDE_MIN_PROGRAMS programs: the TMA kernel with (warps, stages, row blocks a
# program), each warp taking its rows of every block so that the step's x fragments serve
# all of them (the tensor-core note's probe: 57344 x 8192 at M = 16 138.6 us against the
# MMA kernel's 165.6; 1 warp 138.1, 2 blocks 214.4). In the library (w4a16_probe.py
# `tma16`, H200, 2026-12-01, bfloat16): 57344 x 8192 M = 12 130.2 us, M = 16 136.5 (the
# MMA kernel 164-166); 53248 x 16384 M = 16 270.1 (1 warp 265.5, 6 stages 269.7). Below
# the bound (8192 x 28672: 64 programs, 284-366 us against 88.0) and on smaller weights
# (28672 x 8192: 93.7-111.4 against 89.7) the MMA kernel stays.
# Tried for M = 9..16 and not kept (H200, 2026-12-01, bfloat16): x held still. Warp i of a
# program kept one step's x fragments and sums (prepared once) and the program walked
# blocks of 16 weight rows; each block's K-slice sums met in shared memory (tl.sum over
# the warps), and each program's K range went to a float32 plane. At M = 16 it ran
# 2.2-5.5x slower than this table (28672 x 8192: 198-376 us against 90.7), M = 1 rows
# 1.7-7.7x. The loop held 10 barriers and 24 shuffles a block for the cross-warp
# sum. ncu (4 warps, 3 stages): L1/shared 90 % busy, 6-7-way bank conflicts on the
# reduction's shared stores and loads, DRAM 16 % busy. At 2 warps (little to sum, 32
# planes) it still took 198 us, at 94-114 registers a thread.
# Nor (H200, 2026-12-02, bfloat16, us): the prefill kernel's swapped product at M = 16 (the
# dequantized weight as wgmma's register A operand, x.T from shared memory as a 16-column
# B), with a K split over programs added, the product in two halves (low nibbles against
# x's even columns, high ones against its odd columns, so no byte permute a weight
# interleaves them back: 794 -> 613 SASS instructions a 128 x 128 step) and the nibbles
# taken out by inline PTX (-> 575). Best against the table: 28672 x 8192 94.5 (64 x 128
# tiles) / 83.3, 8192 x 28672 84.3 (64 x 128, 4 splits) / 77.6, 57344 x 8192 167.0 /
# 143.1, 14336 x 4096 30.0 / 28.3; the two halves gained 15-25 % on the swapped kernel,
# the inline PTX -4..+6 %. At 3.6 bytes of weight a warp instruction, against 4.9 for
# this kernel and 6.0-6.7 for the M = 1 one, it is issue that bounds it.
_TC_TMA_WIDE: tuple[int, int, int] | None = (2, 4, 4)     # None: the MMA kernel at M > 8
# ... where N gives at least _TC_TMA_WIDE_MIN_PROGRAMS such programs, K split over programs
# (float32 planes, summed by the second kernel) up to _TC_TMA_WIDE_PROGRAMS programs in all
# (within one wave: 5 two-warp programs fit an SM at the 174 registers of the Triton 3.9
# build), each split keeping _TC_TMA_WIDE_MIN_STEPS
# steps. H200 (w4a16_probe.py `tmasplit`, 2026-12-01, us, bfloat16 / float16, splits
# against the table then, which had the MMA kernel on the first three): 28672 x 8192 at
# M = 16 2 splits (448 programs) 82.4 / 80.2 against 90.0 / 88.4 (3 splits, 672 programs
# and a second wave: 106.9 / 98.1), M = 12 80.0 / 77.2 against 90.5 / 88.4; 8192 x 28672
# 7 splits 84.4 / 80.0 against 87.8 / 87.3; 14336 x 4096 4 splits 28.3 / 28.6 against 32.2
# / 30.4; 57344 x 8192 unsplit still best (141.9 against 159.1 at 2). 4096 x 14336 (32
# programs; 7 splits 40.3 against the MMA kernel's 28.9) keeps the MMA kernel.
# At M = 1..8 below _TC_TMA_MIN_BYTES the same split did not pay (`tmasmall`, same day, us,
# bfloat16, best split against the K-sliced table): 4096 x 4096 12.8 / 13.0, 14336 x 4096
# 21.3 / 20.2, M = 4 4096 x 14336 23.2 / 23.9 and 18944 x 3584 24.3 / 21.8, 28672 x 8192
# 52.7 / 54.0 and at M = 8 72.9 / 75.6 (float16 76.1 / 69.1).
_TC_TMA_WIDE_MIN_PROGRAMS = 64
_TC_TMA_WIDE_PROGRAMS = 4 * _NUM_SMS
_TC_TMA_WIDE_MIN_STEPS = 8
# ptxas' register cap for the TMA kernel (None: its own choice; 174 registers a thread in
# the M = 9..16 build under Triton 3.9, so 5 two-warp programs an SM). Caps of 168 and
# 128, at the table's split and twice it, were 1-110 % slower on every M = 16 row
# (`widecap`, H200, 2026-12-01: 28672 x 8192 bfloat16 83.6 us uncapped, 87.6 at 168,
# 126.4-129.9 at 128).
#: Where M = 16 stops (ncu, H200, 2026-12-02, 28672 x 8192 bfloat16, the table's launch: 224 x
#: 2 programs of 2 warps, 77.7 us): DRAM 35 % busy, L1/TEX 51 %, issue active 32 %, a warp
#: issuing every 5.2 cycles (1.7 of them waiting on L1), 21.5 M warp instructions. 448
#: two-warp programs are 6.8 warps an SM, under 2 a scheduler: the kernel waits on its own
#: chains (MMA, then the scale FMAs) with too few warps to cover them, and registers (the
#: caps above spill) and the one-wave split (above) keep it from more.
_TC_TMA_MAXNREG: int | None = None


def _wide_programs(N: int) -> int:
    """Programs along N of the TMA kernel at M = 9..16 (_TC_TMA_WIDE's rows a program)."""
    warps, _, blocks = _TC_TMA_WIDE
    return triton.cdiv(N, 16 * warps * blocks)


def _pow2_divisor(n: int, choices: tuple[int, ...]) -> int | None:
    return next((c for c in choices if n % c == 0), None)


@functools.lru_cache(maxsize=1024)
def decode_config_for(M: int, N: int, K: int, group_size: int,
                      dtype: torch.dtype | None = None) -> DecodeConfig:
    """The decode kernel's configuration (``M <= 16``; ``dtype``: x's): the tensor-core
    kernel where the groups are whole 128-wide steps, else the MMA or FMA kernel
    (:func:`legacy_decode_config`)."""
    if group_size % 128 == 0 and K > 0:
        if M <= _TC_MAX_M:
            return tc_config_for(M, N, K, group_size, dtype)
        if (_TC_TMA and _TC_TMA_WIDE is not None and _TC_TILE_TOKENS < M <= DECODE_MAX_M
                and _wide_programs(N) >= _TC_TMA_WIDE_MIN_PROGRAMS):
            return tc_config_for(M, N, K, group_size, dtype, tma=True)
    return legacy_decode_config(M, N, K, group_size)


def tc_config_for(M: int, N: int, K: int, group_size: int, dtype: torch.dtype | None = None,
                  k_slices: int | None = None, row_warps: int = _TC_ROW_WARPS,
                  biased: bool | None = None, planes: bool | None = None,
                  tma: bool | None = None) -> DecodeConfig:
    """The tensor-core decode kernel's configuration by the table's rules (the keyword
    arguments override them; ``tma=True`` gives the TMA kernel's, whose warps, stages and
    row blocks -- block_n = 16 x warps x blocks -- and, at M = 9..16, K split are the
    table's)."""
    if biased is None:
        biased = _TC_BIASED.get(dtype, False)
    if tma is None:
        tma = (_TC_TMA and k_slices is None and planes is None
               and N * (K // 2) >= _TC_TMA_MIN_BYTES)
    if tma:
        split = 1
        if M > _TC_TILE_TOKENS and _TC_TMA_WIDE is not None:     # two token tiles
            warps, stages, blocks = _TC_TMA_WIDE
            split = max(1, min(_TC_TMA_WIDE_PROGRAMS // _wide_programs(N),
                               (K // 128) // _TC_TMA_WIDE_MIN_STEPS))
        else:
            warps, stages = _TC_TMA_ONE_TOKEN if M == 1 else (_TC_TMA_WARPS, _TC_TMA_STAGES)
            blocks = 1
        return DecodeConfig(16 * warps * blocks, 128, split, warps, stages, False, True, 1,
                            biased, False, True)
    steps = max(1, K // 128)
    if k_slices is None:
        k_slices = next((s for s in _TC_SLICES if triton.cdiv(N, 16 * row_warps) * s * row_warps
                         >= _TC_WARPS_WANTED), _TC_SLICES[-1])
        while k_slices > 1 and steps // k_slices < _TC_MIN_STEPS:
            k_slices //= 2
    split = 2 if N < _TC_SPLIT_BELOW_N and steps >= 2 * k_slices else 1
    if planes is None:
        planes = _TC_PLANES and k_slices > 1 and N * (K // 2) >= _TC_PLANES_MIN_BYTES
    return DecodeConfig(16 * row_warps, 128, split, k_slices * row_warps, 1, False, True,
                        k_slices, biased, planes)


@functools.lru_cache(maxsize=1024)
def legacy_decode_config(M: int, N: int, K: int, group_size: int) -> DecodeConfig:
    """The MMA or FMA decode kernel's configuration (the tensor-core kernel's fallback)."""
    block_k = _pow2_divisor(group_size, _DECODE_BLOCK_K) or _DECODE_GATHER_BLOCK_K
    block_k = min(block_k, max(32, triton.next_power_of_2(K)))
    gemv = M <= _GEMV_DEFAULT_MAX_M and group_size % _GEMV_BLOCK_K == 0 and K % 8 == 0
    if gemv:
        block_k = _GEMV_BLOCK_K
    block_n = min(_GEMV_BLOCK_N if gemv else _DECODE_BLOCK_N, max(16, triton.next_power_of_2(N)))
    target = _GEMV_TARGET_PROGRAMS if gemv else _DECODE_TARGET_PROGRAMS
    n_blocks = triton.cdiv(N, block_n)
    steps = triton.cdiv(K, block_k)
    split = 1
    if n_blocks < target:
        split = min(triton.cdiv(target, n_blocks),
                    max(1, steps // _DECODE_MIN_STEPS_PER_SPLIT))
        split = triton.cdiv(steps, triton.cdiv(steps, split))  # no empty split
    if gemv:
        return DecodeConfig(block_n, block_k, split, _GEMV_WARPS, _GEMV_STAGES, True)
    return DecodeConfig(block_n, block_k, split, _DECODE_WARPS, _DECODE_STAGES)


@functools.lru_cache(maxsize=1024)
def prefill_config_for(M: int, N: int, K: int, group_size: int,
                       two_pass: bool | None = None) -> PrefillConfig:
    """The prefill kernel's configuration: two passes (from _PREFILL_TWO_PASS_MIN_M tokens,
    where the group allows) or the fused kernel's tiles; ``two_pass`` overrides the choice
    (True where the group does not allow it is an error at launch)."""
    if two_pass is None:
        two_pass = M >= _PREFILL_TWO_PASS_MIN_M and dequant_supported(group_size)
    if two_pass:
        return _PREFILL_TWO_PASS
    cfg = _PREFILL_LARGE if M > 64 else _PREFILL_MEDIUM if M > 32 else _PREFILL_SMALL
    if cfg.swap_ab and M < cfg.block_m:
        cfg = _PREFILL_UNSWAPPED
    block_k = min(cfg.block_k, _pow2_divisor(group_size, (64, 32)) or cfg.block_k)
    bm = min(cfg.block_m, max(16, triton.next_power_of_2(M)))
    bn = min(cfg.block_n, max(16, triton.next_power_of_2(N)))
    bk = min(block_k, max(32, triton.next_power_of_2(K)))
    warps = cfg.num_warps if bm * bn >= 128 * 128 else min(cfg.num_warps, 4)
    return cfg._replace(block_m=bm, block_n=bn, block_k=bk, num_warps=warps)


# --- packing helpers -------------------------------------------------------------------


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack integers ``0..15`` of shape ``[N, K]`` (K even, any integer dtype) into the
    ``[N, K // 2]`` uint8 layout: ``q[:, 2j]`` in the low nibble of byte ``j``,
    ``q[:, 2j + 1]`` in its high nibble."""
    if q.dim() != 2 or q.shape[1] % 2 != 0:
        raise ValueError(f"pack_int4 takes an [N, K] tensor with K even, got shape {list(q.shape)}")
    if q.dtype.is_floating_point or q.dtype.is_complex or q.dtype == torch.bool:
        raise TypeError(f"pack_int4 takes an integer tensor, got {q.dtype}")
    if q.numel() and (int(q.min()) < 0 or int(q.max()) > 15):
        raise ValueError(f"pack_int4 takes values in 0..15, got {int(q.min())}..{int(q.max())}")
    q = q.to(torch.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The ``[N, K]`` uint8 values ``0..15`` of a ``[N, K // 2]`` packed weight."""
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise TypeError(f"unpack_int4 takes a 2-D uint8 tensor, got {packed.dim()}-D {packed.dtype}")
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], 2 * packed.shape[1])


def dequantize_int4(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                    group_size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``(q - zeros[:, k // g]) * scales[:, k // g]`` as an ``[N, K]`` tensor, computed in
    float32 (float64 when the scales are float64) and returned in ``dtype`` (default: that
    compute dtype)."""
    q = unpack_int4(packed)
    work = torch.float64 if scales.dtype == torch.float64 else torch.float32
    s = scales.to(work).repeat_interleave(group_size, dim=1)
    z = zeros.to(work).repeat_interleave(group_size, dim=1)
    w = (q.to(work) - z) * s
    return w if dtype is None else w.to(dtype)


def quantize_int4(w: torch.Tensor, group_size: int = 128
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric min/max int4 quantization of a float ``[N, K]`` weight per group of
    ``group_size`` along K: ``(packed_weight, scales, zeros)``, the scales and (integer
    valued) zero points in ``w``'s dtype. ``dequantize_int4`` of the result is within half a
    scale step of ``w`` (ranges that include 0 are widened to do so)."""
    if w.dim() != 2 or not w.dtype.is_floating_point:
        raise TypeError(f"quantize_int4 takes a 2-D float tensor, got {w.dim()}-D {w.dtype}")
    N, K = w.shape
    if group_size < 1 or K % group_size != 0 or K % 2 != 0:
        raise ValueError(f"K = {K} must be even and a multiple of group_size = {group_size}")
    g = w.float().reshape(N, K // group_size, group_size)
    lo = g.amin(dim=2).clamp(max=0.0)
    hi = g.amax(dim=2).clamp(min=0.0)
    scale = ((hi - lo) / 15.0).clamp(min=1e-8)
    zero = torch.round(-lo / scale).clamp(0, 15)
    q = torch.clamp(torch.round(g / scale[..., None]) + zero[..., None], 0, 15)
    packed = pack_int4(q.reshape(N, K).to(torch.uint8))
    return packed, scale.to(w.dtype), zero.to(w.dtype)


# --- reference ------------------------------------------------------------------------


def gemm_w4a16_reference(x: torch.Tensor, packed_weight: torch.Tensor, scales: torch.Tensor,
                         zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """``x @ dequant(W).T`` in ``x.dtype``: the weight dequantized in float32 (float64 for
    float64 operands), the product accumulated in that dtype."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = dequantize_int4(packed_weight, scales.to(work), zeros.to(work), group_size)
    return (x.to(work) @ w.t()).to(x.dtype)


# --- kernels ----------------------------------------------------------------------------


@triton.jit
def _nibbles(p, QT: tl.constexpr, AT: tl.constexpr, BIASED: tl.constexpr):
    """The low and high nibbles of the uint8 tile ``p`` as exact values of type ``AT``
    (``QT``, the activations' 16-bit type, except under the interpreter), without an
    int-to-float conversion (16 a clock per SM on sm_90, which would cap the decode kernel
    near 45 % of HBM bandwidth): a nibble ORed into the mantissa of 1024.0 (float16,
    0x6400) or 128.0 (bfloat16, 0x4300) is that number plus the nibble, exactly. With
    ``BIASED`` the values are returned so (1024 + q or 128 + q; the caller takes the bias
    out of its sums), else the number is subtracted, leaving q. (Triton's interpreter gets
    bfloat16 arithmetic wrong, so there ``AT`` is float32.)"""
    p16 = p.to(tl.uint16)
    if QT == tl.bfloat16:
        lo = ((p16 & 0xF) | 0x4300).to(tl.bfloat16, bitcast=True).to(AT)
        hi = ((p16 >> 4) | 0x4300).to(tl.bfloat16, bitcast=True).to(AT)
        if not BIASED:
            lo = lo - 128.0
            hi = hi - 128.0
    else:
        lo = ((p16 & 0xF) | 0x6400).to(tl.float16, bitcast=True).to(AT)
        hi = ((p16 >> 4) | 0x6400).to(tl.float16, bitcast=True).to(AT)
        if not BIASED:
            lo = lo - 1024.0
            hi = hi - 1024.0
    return lo, hi


@triton.jit
def _decode_step(acc, x_ptr, w_ptr, s_ptr, z_ptr, j0, j_end, offs_m, offs_n, offs_k, offs_j,
                 stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sg,
                 stride_zn, stride_zg,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP: tl.constexpr, ONE_GROUP: tl.constexpr, MASKED: tl.constexpr,
                 UPCAST: tl.constexpr):
    # One step of the decode kernel over bytes [j0, j0 + BLOCK_K // 2) of each weight row,
    # i.e. k in [2 j0, 2 j0 + BLOCK_K): acc[n, m] += sum_k dequant(W)[n, k] * x[m, k].
    # Offsets are formed from the byte index j0 (a multiple of BLOCK_K // 2 on unmasked
    # steps), so that the compiler sees aligned, contiguous 16-byte runs of the weight.
    k0 = 2 * j0
    kk = k0 + offs_k                       # [BLOCK_K] logical k
    kh = j0 + offs_j                       # [BLOCK_K // 2] byte column
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + kh[None, :] * stride_wk
    if MASKED:
        x = tl.load(x_ptrs, mask=kk[None, :] < 2 * j_end, other=0.0)
        p = tl.load(w_ptrs, mask=kh[None, :] < j_end, other=0, eviction_policy="evict_first")
    else:
        x = tl.load(x_ptrs)
        p = tl.load(w_ptrs, eviction_policy="evict_first")
    if UPCAST:
        x = x.to(tl.float32)
    # x's even and odd columns, transposed to [BLOCK_K // 2, BLOCK_M] (the dot's B operand).
    x_even, x_odd = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_K // 2, 2)))
    x_even = tl.trans(x_even)
    x_odd = tl.trans(x_odd)
    if ONE_GROUP:
        # The tile is inside group k0 // GROUP: s * (sum q x - z * sum x), in float32, with
        # the nibbles biased (b + q, exact in 16 bits: b = 1024 for float16, 128 for
        # bfloat16), the bias taken out with the zero point: s * (sum (b + q) x - (z + b) sum x).
        QT: tl.constexpr = x_ptr.dtype.element_ty
        q_even, q_odd = _nibbles(p, QT, x.dtype, True)   # b + q[n, 2j], b + q[n, 2j + 1]
        part = tl.dot(q_even, x_even)
        part = tl.dot(q_odd, x_odd, part)
        g = k0 // GROUP
        s = tl.load(s_ptr + offs_n * stride_sn + g * stride_sg).to(tl.float32)
        z = tl.load(z_ptr + offs_n * stride_zn + g * stride_zg).to(tl.float32)
        z = z + (128.0 if QT == tl.bfloat16 else 1024.0)
        x_sum = tl.sum(x.to(tl.float32), axis=1)  # [BLOCK_M]
        acc += s[:, None] * (part - z[:, None] * x_sum[None, :])
    else:
        # q[n, 2j], q[n, 2j + 1], exact, in x's (compute) dtype
        q_even, q_odd = _nibbles(p, x_ptr.dtype.element_ty, x.dtype, False)
        # Groups change within the tile: dequantize each weight with its gathered group.
        g_even = (k0 + 2 * offs_j) // GROUP
        g_odd = (k0 + 2 * offs_j + 1) // GROUP
        if MASKED:
            gm = (kh < j_end)[None, :]
            s_e = tl.load(s_ptr + offs_n[:, None] * stride_sn + g_even[None, :] * stride_sg, mask=gm, other=0.0)
            z_e = tl.load(z_ptr + offs_n[:, None] * stride_zn + g_even[None, :] * stride_zg, mask=gm, other=0.0)
            s_o = tl.load(s_ptr + offs_n[:, None] * stride_sn + g_odd[None, :] * stride_sg, mask=gm, other=0.0)
            z_o = tl.load(z_ptr + offs_n[:, None] * stride_zn + g_odd[None, :] * stride_zg, mask=gm, other=0.0)
        else:
            s_e = tl.load(s_ptr + offs_n[:, None] * stride_sn + g_even[None, :] * stride_sg)
            z_e = tl.load(z_ptr + offs_n[:, None] * stride_zn + g_even[None, :] * stride_zg)
            s_o = tl.load(s_ptr + offs_n[:, None] * stride_sn + g_odd[None, :] * stride_sg)
            z_o = tl.load(z_ptr + offs_n[:, None] * stride_zn + g_odd[None, :] * stride_zg)
        w_even = (q_even - z_e.to(x.dtype)) * s_e.to(x.dtype)
        w_odd = (q_odd - z_o.to(x.dtype)) * s_o.to(x.dtype)
        acc = tl.dot(w_even, x_even, acc)
        acc = tl.dot(w_odd, x_odd, acc)
    return acc


@triton.jit
def _w4a16_decode_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, out_ptr,
    M, N, KH, KH_PER_SPLIT,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sg, stride_zn, stride_zg,
    stride_os, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, ONE_GROUP: tl.constexpr, USE_INT64: tl.constexpr,
    UPCAST: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # KH = K // 2 bytes a weight row; program (pid_n, pid_k) owns rows
    # [pid_n * BLOCK_N, +BLOCK_N) and bytes [pid_k * KH_PER_SPLIT, +KH_PER_SPLIT).
    BLOCK_J: tl.constexpr = BLOCK_K // 2
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, BLOCK_J)
    # Wrapped rows (M < 16, N tails) load valid data; the store drops them.
    offs_wn = offs_n % N
    offs_xm = offs_m % M
    if USE_INT64:
        offs_wn = offs_wn.to(tl.int64)
        offs_xm = offs_xm.to(tl.int64)
    j_begin = pid_k * KH_PER_SPLIT
    j_end = tl.minimum(j_begin + KH_PER_SPLIT, KH)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for i in range(0, (j_end - j_begin) // BLOCK_J):
        j0 = tl.multiple_of(j_begin + i * BLOCK_J, BLOCK_J)
        acc = _decode_step(acc, x_ptr, w_ptr, s_ptr, z_ptr, j0, j_end,
                           offs_xm, offs_wn, offs_k, offs_j,
                           stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sg,
                           stride_zn, stride_zg, BLOCK_M, BLOCK_N, BLOCK_K, GROUP, ONE_GROUP,
                           False, UPCAST)
    j_tail = j_end - (j_end - j_begin) % BLOCK_J
    if j_tail < j_end:
        acc = _decode_step(acc, x_ptr, w_ptr, s_ptr, z_ptr, j_tail, j_end,
                           offs_xm, offs_wn, offs_k, offs_j,
                           stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sg,
                           stride_zn, stride_zg, BLOCK_M, BLOCK_N, BLOCK_K, GROUP, ONE_GROUP,
                           True, UPCAST)
    # out[(split,) m, n] = acc[n, m]: contiguous along n.
    out_ptrs = (out_ptr + pid_k * stride_os + offs_m[None, :] * stride_om
                + offs_n[:, None] * stride_on)
    mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_nibble(words, I: tl.constexpr):
    # Nibble I of each int32 word (k = 8 * word + I) as the float32 1 + q / 16, exactly:
    # moved to mantissa bits 19..22 and ORed into the bits of 1.0 (no int-to-float
    # conversion; a shift and a LOP3).
    if I < 5:
        bits = ((words << (19 - 4 * I)) & 0x780000) | 0x3F800000
    else:
        bits = ((words >> (4 * I - 19)) & 0x780000) | 0x3F800000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _gemv_words(w_ptr, offs_wn, offs_w, stride_wn, w0, w_end, MASKED: tl.constexpr):
    # The [BLOCK_N, BLOCK_W] int32 words of step w0 (16-byte vectors when unmasked).
    wp = w_ptr + offs_wn[:, None] * stride_wn + (w0 + offs_w)[None, :]
    if MASKED:
        return tl.load(wp, mask=((w0 + offs_w) < w_end)[None, :], other=0,
                       eviction_policy="evict_first")
    return tl.load(wp, eviction_policy="evict_first")


@triton.jit
def _gemv_step(acc0, acc1, acc2, acc3, words, x_ptr, s_ptr, z_ptr, w0, w_end,
               offs_wn, offs_w, stride_xm, stride_xk, stride_sn, stride_sg,
               stride_zn, stride_zg, M_ROWS: tl.constexpr, GROUP: tl.constexpr,
               MASKED: tl.constexpr):
    # `words`: words [w0, w0 + BLOCK_W) of each weight row (k in [8 w0, 8 w0 + 8 BLOCK_W),
    # inside one quantization group): acc_m[n] += s * (16 S - (16 + z) X), where
    # S = sum_k (1 + q / 16) x[m, k] and X = sum_k x[m, k], so 16 S - 16 X = sum_k q x.
    if MASKED:
        wmask = (w0 + offs_w) < w_end
    g = (8 * w0) // GROUP
    s = tl.load(s_ptr + offs_wn * stride_sn + g * stride_sg).to(tl.float32)
    z = tl.load(z_ptr + offs_wn * stride_zn + g * stride_zg).to(tl.float32) + 16.0
    kk = 8 * (w0 + offs_w)
    S0 = tl.zeros(words.shape, dtype=tl.float32)
    S1 = tl.zeros(words.shape, dtype=tl.float32)
    S2 = tl.zeros(words.shape, dtype=tl.float32)
    S3 = tl.zeros(words.shape, dtype=tl.float32)
    X0 = tl.zeros(offs_w.shape, dtype=tl.float32)
    X1 = tl.zeros(offs_w.shape, dtype=tl.float32)
    X2 = tl.zeros(offs_w.shape, dtype=tl.float32)
    X3 = tl.zeros(offs_w.shape, dtype=tl.float32)
    for i in tl.static_range(8):
        f = _gemv_nibble(words, i)
        xp = x_ptr + (kk + i) * stride_xk
        if MASKED:
            xi = tl.load(xp, mask=wmask, other=0.0).to(tl.float32)
        else:
            xi = tl.load(xp).to(tl.float32)
        S0 += f * xi[None, :]
        X0 += xi
        if M_ROWS > 1:
            if MASKED:
                xi = tl.load(xp + stride_xm, mask=wmask, other=0.0).to(tl.float32)
            else:
                xi = tl.load(xp + stride_xm).to(tl.float32)
            S1 += f * xi[None, :]
            X1 += xi
        if M_ROWS > 2:
            if MASKED:
                xi = tl.load(xp + 2 * stride_xm, mask=wmask, other=0.0).to(tl.float32)
            else:
                xi = tl.load(xp + 2 * stride_xm).to(tl.float32)
            S2 += f * xi[None, :]
            X2 += xi
        if M_ROWS > 3:
            if MASKED:
                xi = tl.load(xp + 3 * stride_xm, mask=wmask, other=0.0).to(tl.float32)
            else:
                xi = tl.load(xp + 3 * stride_xm).to(tl.float32)
            S3 += f * xi[None, :]
            X3 += xi
    acc0 += s * (16.0 * tl.sum(S0, axis=1) - z * tl.sum(X0, axis=0))
    if M_ROWS > 1:
        acc1 += s * (16.0 * tl.sum(S1, axis=1) - z * tl.sum(X1, axis=0))
    if M_ROWS > 2:
        acc2 += s * (16.0 * tl.sum(S2, axis=1) - z * tl.sum(X2, axis=0))
    if M_ROWS > 3:
        acc3 += s * (16.0 * tl.sum(S3, axis=1) - z * tl.sum(X3, axis=0))
    return acc0, acc1, acc2, acc3


@triton.jit
def _w4a16_gemv_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, out_ptr,
    M, N, KW, KW_PER_SPLIT,
    stride_xm, stride_xk, stride_wn, stride_sn, stride_sg, stride_zn, stride_zg,
    stride_os, stride_om, stride_on,
    BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, M_ROWS: tl.constexpr, GROUP: tl.constexpr,
    USE_INT64: tl.constexpr, PREFETCH: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # The FMA decode kernel: w_ptr is the packed weight read as int32 words (KW = K // 8
    # a row, stride_wn in words; word w of a row holds q[8 w + i] in bits 4i..4i+3).
    # Program (pid_n, pid_k) owns rows [pid_n * BLOCK_N, +BLOCK_N) and words
    # [pid_k * KW_PER_SPLIT, +KW_PER_SPLIT); every thread holds 16-byte runs of weight rows
    # and the matching x values (loaded once a step, shared by its rows), float32 FMAs.
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_w = tl.arange(0, BLOCK_W)
    offs_wn = offs_n % N
    if USE_INT64:
        offs_wn = offs_wn.to(tl.int64)
    w_begin = pid_k * KW_PER_SPLIT
    w_end = tl.minimum(w_begin + KW_PER_SPLIT, KW)
    acc0 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    n_full = (w_end - w_begin) // BLOCK_W
    if PREFETCH:
        # Register double-buffering: step i + 1's words are requested before step i is
        # computed (the last step's are requested again, not past the range), so two
        # steps of weight are in flight a thread.
        w_last = tl.multiple_of(w_begin + tl.maximum(n_full - 1, 0) * BLOCK_W, BLOCK_W)
        cur = _gemv_words(w_ptr, offs_wn, offs_w, stride_wn,
                          tl.multiple_of(w_begin, BLOCK_W), w_end, False)
        for i in range(0, n_full):
            w0 = tl.multiple_of(w_begin + i * BLOCK_W, BLOCK_W)
            nxt = _gemv_words(w_ptr, offs_wn, offs_w, stride_wn,
                              tl.multiple_of(tl.minimum(w0 + BLOCK_W, w_last), BLOCK_W),
                              w_end, False)
            acc0, acc1, acc2, acc3 = _gemv_step(
                acc0, acc1, acc2, acc3, cur, x_ptr, s_ptr, z_ptr, w0, w_end, offs_wn, offs_w,
                stride_xm, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg,
                M_ROWS, GROUP, False)
            cur = nxt
    else:
        for i in range(0, n_full):
            w0 = tl.multiple_of(w_begin + i * BLOCK_W, BLOCK_W)
            words = _gemv_words(w_ptr, offs_wn, offs_w, stride_wn, w0, w_end, False)
            acc0, acc1, acc2, acc3 = _gemv_step(
                acc0, acc1, acc2, acc3, words, x_ptr, s_ptr, z_ptr, w0, w_end, offs_wn, offs_w,
                stride_xm, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg,
                M_ROWS, GROUP, False)
    w_tail = w_begin + n_full * BLOCK_W
    if w_tail < w_end:
        words = _gemv_words(w_ptr, offs_wn, offs_w, stride_wn, w_tail, w_end, True)
        acc0, acc1, acc2, acc3 = _gemv_step(
            acc0, acc1, acc2, acc3, words, x_ptr, s_ptr, z_ptr, w_tail, w_end, offs_wn, offs_w,
            stride_xm, stride_xk, stride_sn, stride_sg, stride_zn, stride_zg,
            M_ROWS, GROUP, True)
    if USE_INT64:
        offs_n = offs_n.to(tl.int64)
    optr = out_ptr + pid_k * stride_os + offs_n * stride_on
    nmask = offs_n < N
    tl.store(optr, acc0.to(out_ptr.dtype.element_ty), mask=nmask)
    if M_ROWS > 1:
        tl.store(optr + stride_om, acc1.to(out_ptr.dtype.element_ty), mask=nmask)
    if M_ROWS > 2:
        tl.store(optr + 2 * stride_om, acc2.to(out_ptr.dtype.element_ty), mask=nmask)
    if M_ROWS > 3:
        tl.store(optr + 3 * stride_om, acc3.to(out_ptr.dtype.element_ty), mask=nmask)


# --- the tensor-core decode kernel (DecodeConfig.tc) -----------------------------------------
#
# Written for the mma.sync.m16n8k16 fragment layout, which the Triton layout of its operand
# tiles is arranged to match, so that no operand goes through shared memory. The tiles are
# [16 W, 16] int32 (W warps): Triton lays such a 16-byte-vector load out as lane 4 g + t of
# warp w holding columns 4t..4t+3 (j = 0..3) of rows g + 8 w and g + 8 w + 8 W (h = 0, 1),
# in register order j + 4 h -- the same under Triton 3.6 and 3.9 (a tile of more dimensions
# is not: 3.6 orders the dimensions of equal contiguity the other way). Rows h = 0, 1 are
# two weight rows (the MMA's A rows g and g + 8), the columns the 16 words of a 128-wide K
# step; the x tiles hold, in the same places, the 64 bytes of x that the lane's words
# multiply, for token g (the B column g). Inside an MMA the order of the 16 K slots is free
# as long as A and B agree: slot 2t / 2t+1 / 2t+8 / 2t+9 of MMA (c, lo) takes k = 0 / 4 / 1 /
# 5 of word 4t + c, MMA (c, hi) k = 2 / 6 / 3 / 7, the pairs that one LOP3 cuts out of a
# word (nibbles i and i + 4 land in the two halves of a 32-bit register). The C fragment
# then holds, per lane, rows g, g + 8 for tokens 2t, 2t + 1: tile element (row, j) is token
# 2t + j (j < 2; 8 + 2t + j - 2 for j >= 2 with a second token tile, M > 8). The asm blocks
# are generated below for each (x dtype, token tiles, biased) combination and passed to the
# kernel as constexprs; tests/test_quant_gemm_warp.py runs them on a model of one warp.

_TC_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"


def _tc_prep_asm(bf16: bool, nt: int) -> tuple[str, str]:
    """The per-step x block (pack 8: one lane's 2 rows x 4 j elements; the x words are read
    for the first row only): for each token tile and word c, the lane's x words (x0 x1,
    x2 x3, x4 x5, x6 x7) become the B fragments (x0 x4), (x1 x5), (x2 x6), (x3 x7) (PRMT),
    and MMAs with an all-ones A give each column's sum of x over the step (the zero point's
    term). Outputs: 4 nt fragment tensors (element j = fragment j, repeated for the second
    row), then the sums (element j: tokens 2t, 2t + 1, 8 + 2t, 9 + 2t); inputs: 4 nt x-word
    tensors."""
    ty = "bf16" if bf16 else "f16"
    mma = _TC_MMA.format(t=ty)
    n_frag = 16 * nt
    xs_out = 8 * 4 * nt
    first_in = xs_out + 8
    body = ["{", f".reg .b32 f<{n_frag}>, one;", ".reg .f32 u<16>;",
            f"mov.b32 one, {'0x3f803f80' if bf16 else '0x3c003c00'};"]
    for tile in range(nt):
        for c in range(4):
            e = [f"${first_in + 8 * (4 * tile + c) + i}" for i in range(4)]
            f = 16 * tile + 4 * c
            body += [f"prmt.b32 f{f}, {e[0]}, {e[2]}, 0x5410;",
                     f"prmt.b32 f{f + 1}, {e[0]}, {e[2]}, 0x7632;",
                     f"prmt.b32 f{f + 2}, {e[1]}, {e[3]}, 0x5410;",
                     f"prmt.b32 f{f + 3}, {e[1]}, {e[3]}, 0x7632;"]
    xs = ["0f00000000"] * 4
    for tile in range(nt):
        # four independent chains (one a word), summed at the end
        body += [f"mov.f32 u{i}, 0f00000000;" for i in range(16)]
        for c in range(4):
            f = 16 * tile + 4 * c
            u = ",".join(f"u{4 * c + i}" for i in range(4))
            body += [f"{mma} {{{u}}}, {{one,one,one,one}}, {{f{f},f{f + 1}}}, {{{u}}};",
                     f"{mma} {{{u}}}, {{one,one,one,one}}, {{f{f + 2},f{f + 3}}}, {{{u}}};"]
        for col in range(2):
            body += [f"add.f32 u{col}, u{col}, u{4 + col};", f"add.f32 u{8 + col}, u{8 + col}, u{12 + col};",
                     f"add.f32 ${xs_out + 2 * tile + col}, u{col}, u{8 + col};"]
            xs[2 * tile + col] = f"${xs_out + 2 * tile + col}"
    for jj in range(4):
        if nt == 1 and jj >= 2:
            body.append(f"mov.f32 ${xs_out + jj}, 0f00000000;")
        body.append(f"mov.f32 ${xs_out + 4 + jj}, {xs[jj] if not (nt == 1 and jj >= 2) else '0f00000000'};")
    for tile in range(nt):
        for c in range(4):
            o = 4 * tile + c
            for jj in range(4):
                body += [f"mov.b32 ${8 * o + jj}, f{16 * tile + 4 * c + jj};",
                         f"mov.b32 ${8 * o + 4 + jj}, f{16 * tile + 4 * c + jj};"]
    body.append("}")
    cons = ",".join(["=r"] * (8 * 4 * nt) + ["=f"] * 8 + ["r"] * (8 * 4 * nt))
    return "\n".join(body), cons


def _tc_main_asm(bf16: bool, nt: int, biased: bool) -> tuple[str, str]:
    """The per-step weight block (pack 8: one lane's two rows x 4 words): each word becomes
    four 16-bit pairs (q_i, q_i+4) by LOP3s on the bits of 1024.0 (float16) or 128.0
    (bfloat16), so b + q exactly, less 8 + b (exact) unless ``biased``; two MMAs a word and
    token tile accumulate in float32. Outputs (element j + 4 half): row `half`, token 2t + j
    (j < 2) or 8 + 2t + j - 2; inputs: the words, then the fragment tensors (broadcast over
    the pair: the first 4 of each 8 registers are used)."""
    ty = "bf16" if bf16 else "f16"
    mma = _TC_MMA.format(t=ty)
    magic = "0x43004300" if bf16 else "0x64006400"
    body = ["{", ".reg .b32 a<4>, b<4>, sa, sb, k0, k1, k2;", ".reg .f32 c<16>;"]
    if not biased:
        # float16: the low pairs b + q (mask 0x000f000f) less b + 8; the high pairs, cut out
        # in place (mask 0x00f000f0: b + 16 q, saving two shifts a word), times 1/16 less
        # b / 16 + 8, one FMA; bfloat16 (7 mantissa bits: no room for 16 q): (b + q) * 1 - (b + 8)
        body += (["mov.b32 k0, 0x3f803f80;", "mov.b32 k1, 0xc308c308;"] if bf16 else
                 ["mov.b32 k0, 0x2c002c00;", "mov.b32 k1, 0xd480d480;", "mov.b32 k2, 0x64086408;"])
    body += [f"mov.f32 c{i}, 0f00000000;" for i in range(8 * nt)]

    def dequant(r: str, w: str) -> list[str]:
        if not bf16 and not biased:
            return [f"lop3.b32 {r}0, {w}, 0x000f000f, {magic}, 0xea;",
                    f"lop3.b32 {r}1, {w}, 0x00f000f0, {magic}, 0xea;",
                    f"shr.u32 s{r}, {w}, 8;",
                    f"lop3.b32 {r}2, s{r}, 0x000f000f, {magic}, 0xea;",
                    f"lop3.b32 {r}3, s{r}, 0x00f000f0, {magic}, 0xea;",
                    f"sub.f16x2 {r}0, {r}0, k2;",
                    f"fma.rn.f16x2 {r}1, {r}1, k0, k1;",
                    f"sub.f16x2 {r}2, {r}2, k2;",
                    f"fma.rn.f16x2 {r}3, {r}3, k0, k1;"]
        out = [f"lop3.b32 {r}0, {w}, 0x000f000f, {magic}, 0xea;"]
        for i in range(1, 4):
            out += [f"shr.u32 s{r}, {w}, {4 * i};", f"lop3.b32 {r}{i}, s{r}, 0x000f000f, {magic}, 0xea;"]
        if bf16 and not biased:
            out += [f"fma.rn.bf16x2 {r}{i}, {r}{i}, k0, k1;" for i in range(4)]
        return out

    first_frag = 8 + 8
    for c in range(4):
        body += dequant("a", f"${8 + c}") + dequant("b", f"${12 + c}")
        for tile in range(nt):
            f = first_frag + 8 * (4 * tile + c)
            acc = 8 * tile
            body += [f"{mma} {{c{acc},c{acc + 1},c{acc + 2},c{acc + 3}}}, {{a0,b0,a1,b1}}, "
                     f"{{${f},${f + 1}}}, {{c{acc},c{acc + 1},c{acc + 2},c{acc + 3}}};",
                     f"{mma} {{c{acc + 4},c{acc + 5},c{acc + 6},c{acc + 7}}}, {{a2,b2,a3,b3}}, "
                     f"{{${f + 2},${f + 3}}}, {{c{acc + 4},c{acc + 5},c{acc + 6},c{acc + 7}}};"]
    for tile in range(2):
        for half in range(2):
            for col in range(2):
                dst = 4 * half + 2 * tile + col
                if tile < nt:
                    i = 8 * tile + 2 * half + col
                    body.append(f"add.f32 ${dst}, c{i}, c{i + 4};")
                else:
                    body.append(f"mov.f32 ${dst}, 0f00000000;")
    body.append("}")
    cons = ",".join(["=f"] * 8 + ["r"] * (8 + 32 * nt))
    return "\n".join(body), cons


def _tc_scale_asm(kind: str, masked: bool) -> tuple[str, str]:
    """A row's scale or zero point as float32 bits (pack 4: one lane's 4 j elements of the
    row share it; one load). A load through asm takes the layout of the tile it feeds,
    where a tl.load of these broadcast addresses is laid out by Triton 3.6 across lanes (and
    then moved through shared memory every step). ``kind``: the scales' dtype."""
    body = ["{", ".reg .pred p;", ".reg .b16 h, zero;", ".reg .b32 v;", ".reg .f32 f;"]
    pred = ""
    if masked:
        body += ["setp.ne.b32 p, $8, 0;"]
        pred = "@p "
    if kind == "float32":
        body += ["mov.b32 v, 0;", f"{pred}ld.global.b32 v, [$4];"]
    else:
        body += ["mov.b16 h, 0;", f"{pred}ld.global.b16 h, [$4];"]
        if kind == "float16":
            body += ["cvt.f32.f16 f, h;", "mov.b32 v, f;"]
        else:   # bfloat16: the float32 with these 16 high bits
            body += ["mov.b16 zero, 0;", "mov.b32 v, {zero, h};"]
    body += [f"mov.b32 ${i}, v;" for i in range(4)] + ["}"]
    cons = ",".join(["=r"] * 4 + ["l"] * 4 + (["r"] * 4 if masked else []))
    return "\n".join(body), cons


_TC_ASM = {(bf16, nt, biased): (_tc_prep_asm(bf16, nt), _tc_main_asm(bf16, nt, biased))
           for bf16 in (False, True) for nt in (1, 2) for biased in (False, True)}
_TC_SCALE_ASM = {(kind, masked): _tc_scale_asm(kind, masked)
                 for kind in ("float16", "bfloat16", "float32") for masked in (False, True)}


@triton.jit
def _tc_scale(ptrs, valid, MASKED: tl.constexpr, EMULATE: tl.constexpr, LD: tl.constexpr,
              LD_CONS: tl.constexpr, LDM: tl.constexpr, LDM_CONS: tl.constexpr):
    # The rows' scale or zero point of a step, float32 (see _tc_scale_asm).
    if EMULATE:
        if MASKED:
            v = tl.load(ptrs, mask=valid, other=0.0)
        else:
            v = tl.load(ptrs)
        return v.to(tl.float32)
    elif MASKED:
        bits = tl.inline_asm_elementwise(LDM, LDM_CONS, [ptrs.to(tl.int64, bitcast=True),
                                                         valid.to(tl.int32)], tl.int32, True, 4)
        return bits.to(tl.float32, bitcast=True)
    else:
        bits = tl.inline_asm_elementwise(LD, LD_CONS, [ptrs.to(tl.int64, bitcast=True)],
                                         tl.int32, True, 4)
        return bits.to(tl.float32, bitcast=True)


_TC_STORE_ASM = tl.constexpr("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p st.global.b32 [$1], $3; "
                              "mov.b32 $0, 0; }")


@triton.jit
def _tc_store_f32(ptrs, values, mask, EMULATE: tl.constexpr):
    # Store float32 values where mask holds, in the tile's own layout: a tl.store would be
    # laid out for 16-byte stores along the rows, through shared memory and a barrier of
    # the whole program, which is what the planes are there to avoid.
    if EMULATE:
        tl.store(ptrs, values, mask=mask)
    else:
        tl.inline_asm_elementwise(_TC_STORE_ASM, "=r,l,r,r",
                                  [ptrs.to(tl.int64, bitcast=True), mask.to(tl.int32),
                                   values.to(tl.int32, bitcast=True)], tl.int32, False, 1)


@triton.jit
def _tc_load(w_ptrs, x_ptrs, y_ptrs, s_ptrs, z_ptrs, w_off, x_off, s_off, z_off, valid, xvalid,
             NT: tl.constexpr, MASKED: tl.constexpr, EMULATE: tl.constexpr,
             LD: tl.constexpr, LD_CONS: tl.constexpr, LDM: tl.constexpr, LDM_CONS: tl.constexpr):
    # One step's operands: the weight words, 4 x-word tensors a token tile (read for the
    # first row of a lane's pair only, which the asm uses; the second tile's are the
    # first's again when NT == 1, unused), the scales and zero points in float32.
    if MASKED:
        words = tl.load(w_ptrs + w_off, mask=valid, other=0, eviction_policy="evict_first")
    else:
        words = tl.load(w_ptrs + w_off, eviction_policy="evict_first")
    x0 = tl.load(x_ptrs + x_off, mask=xvalid, other=0)
    x1 = tl.load(x_ptrs + (x_off + 4), mask=xvalid, other=0)
    x2 = tl.load(x_ptrs + (x_off + 8), mask=xvalid, other=0)
    x3 = tl.load(x_ptrs + (x_off + 12), mask=xvalid, other=0)
    y0, y1, y2, y3 = x0, x1, x2, x3
    if NT == 2:
        y0 = tl.load(y_ptrs + x_off, mask=xvalid, other=0)
        y1 = tl.load(y_ptrs + (x_off + 4), mask=xvalid, other=0)
        y2 = tl.load(y_ptrs + (x_off + 8), mask=xvalid, other=0)
        y3 = tl.load(y_ptrs + (x_off + 12), mask=xvalid, other=0)
    s = _tc_scale(s_ptrs + s_off, valid, MASKED, EMULATE, LD, LD_CONS, LDM, LDM_CONS)
    z = _tc_scale(z_ptrs + z_off, valid, MASKED, EMULATE, LD, LD_CONS, LDM, LDM_CONS)
    return words, x0, x1, x2, x3, y0, y1, y2, y3, s, z


@triton.jit
def _tc_emulate(w_ptrs, xt_ptrs, w_off, x_off, valid, xmask, BIAS: tl.constexpr):
    # The portable model of the two asm blocks (Triton's interpreter runs no PTX): for each
    # tile element, sum over the step of (b + q - bias) * x[token], and the sum of x, in
    # float32. w_ptrs: word 0 of each row's step; xt_ptrs: x (its own dtype) at the step's
    # k = 0 for each element's token.
    p = tl.zeros(xt_ptrs.shape, dtype=tl.float32)
    xs = tl.zeros(xt_ptrs.shape, dtype=tl.float32)
    for wi in tl.static_range(16):
        word = tl.load(w_ptrs + (w_off + wi), mask=valid, other=0)
        p, xs = _tc_emulate_word(p, xs, word, xt_ptrs, x_off + 8 * wi, valid & xmask, BIAS)
    return p, xs


@triton.jit
def _tc_emulate_word(p, xs, word, xt_ptrs, x_off, mask, BIAS: tl.constexpr):
    # p and xs plus one word's 8 products (q_i - BIAS) x[k0 + i] and x values, x from
    # xt_ptrs + x_off (k0); the portable model's inner step.
    for i in tl.static_range(8):
        q = ((word >> (4 * i)) & 15).to(tl.float32) - BIAS
        xv = tl.load(xt_ptrs + (x_off + i), mask=mask, other=0.0).to(tl.float32)
        p += q * xv
        xs += xv
    return p, xs


@triton.jit
def _tc_step(acc, ops, we_ptrs, xt_ptrs, w_off, xt_off, valid, xmask, tmask,
             PREP: tl.constexpr, PREP_CONS: tl.constexpr, MAIN: tl.constexpr,
             MAIN_CONS: tl.constexpr, NT: tl.constexpr, EMULATE: tl.constexpr,
             BIAS: tl.constexpr):
    # acc[row, token] += s * (sum_k (q - 8) x - (z - 8) sum_k x)  (or with b + q, z + b);
    # ops: a step's operands from _tc_load.
    words, x0, x1, x2, x3, y0, y1, y2, y3, s, z = ops
    if EMULATE:
        p, xs = _tc_emulate(we_ptrs, xt_ptrs, w_off, xt_off, valid, xmask, BIAS)
    else:
        if NT == 1:
            f0, f1, f2, f3, xs = tl.inline_asm_elementwise(
                PREP, PREP_CONS, [x0, x1, x2, x3],
                (tl.int32, tl.int32, tl.int32, tl.int32, tl.float32), True, 8)
            p = tl.inline_asm_elementwise(MAIN, MAIN_CONS, [words, f0, f1, f2, f3],
                                          tl.float32, True, 8)
        else:
            f0, f1, f2, f3, g0, g1, g2, g3, xs = tl.inline_asm_elementwise(
                PREP, PREP_CONS, [x0, x1, x2, x3, y0, y1, y2, y3],
                (tl.int32, tl.int32, tl.int32, tl.int32, tl.int32, tl.int32, tl.int32,
                 tl.int32, tl.float32), True, 8)
            p = tl.inline_asm_elementwise(MAIN, MAIN_CONS, [words, f0, f1, f2, f3, g0, g1, g2, g3],
                                          tl.float32, True, 8)
    return acc + tl.where(tmask, s * (p - (z - BIAS) * xs), 0.0)


@triton.jit
def _tc_coords(WR: tl.constexpr, KS: tl.constexpr):
    # The [16 W, 16] tile's coordinates (W = WR * KS warps; see _w4a16_tc_kernel): for row r
    # and column col, the lane's group g = r % 8, the MMA row half h, the warp's row block
    # wr and K slice ks, the column col itself, its lane t = col // 4 and word j = col % 4.
    W: tl.constexpr = WR * KS
    r = tl.arange(0, 16 * W)[:, None]
    col = tl.arange(0, 16)[None, :]
    warp = (r // 8) % W
    return r % 8, r // (8 * W), warp % WR, warp // WR, col, col // 4, col % 4


@triton.jit
def _tc_tile(pid_n, N, M, WR: tl.constexpr, KS: tl.constexpr, NT: tl.constexpr,
             USE_INT64: tl.constexpr):
    # What both tensor-core kernels derive from the tile's coordinates (_tc_coords) for
    # program pid_n of 16 WR rows: each row's weight row (rows; rows_c wrapped into [0, N)
    # for loads), the tokens of a lane's x words (tok; tok2 for a second token tile), each
    # element's token m and whether its column holds one (tmask); int64 where asked.
    g, h, wr, ks, col, t, j = _tc_coords(WR, KS)
    rows = pid_n * (16 * WR) + (h * WR + wr) * 8 + g                # [R, 1]
    rows_c = rows % N
    tok = g % M
    tok2 = (g + 8) % M
    m = 2 * t + (j % 2) + 8 * (j // 2)                              # the element's token
    tmask = j < 2 * NT
    if USE_INT64:
        rows = rows.to(tl.int64)
        rows_c = rows_c.to(tl.int64)
        tok = tok.to(tl.int64)
        tok2 = tok2.to(tl.int64)
        m = m.to(tl.int64)
    return h, ks, col, t, j, rows, rows_c, tok, tok2, m, tmask


@triton.jit
def _w4a16_tc_kernel(
    x_ptr, xt_ptr, w_ptr, s_ptr, z_ptr, out_ptr,
    M, N, STEPS, STEPS_PER_SPLIT,
    stride_xm, stride_xtm, stride_wn, stride_sn, stride_sg, stride_zn, stride_zg,
    stride_os, stride_om, stride_on,
    WR: tl.constexpr, KS: tl.constexpr, NT: tl.constexpr, STEP_G: tl.constexpr,
    BIAS: tl.constexpr, USE_INT64: tl.constexpr, PLANES: tl.constexpr,
    EMULATE: tl.constexpr, PREP: tl.constexpr, PREP_CONS: tl.constexpr, MAIN: tl.constexpr,
    MAIN_CONS: tl.constexpr, LD: tl.constexpr, LD_CONS: tl.constexpr, LDM: tl.constexpr,
    LDM_CONS: tl.constexpr, X_TOKENS: tl.constexpr = False,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # x_ptr: x as int32 words (pairs of x values; stride_xm in words), xt_ptr: x itself
    # (read only when EMULATE); w_ptr: the packed weight as int32 words (stride_wn in words).
    # A step is 128 k (16 words a row) inside one group (STEP_G steps a group). The tile is
    # [16 W, 16] (W = WR * KS warps): row r = g + 8 (warp + W h) of lane 4 g + t holds words
    # 4t..4t+3 (columns) of weight row (h WR + wr) 8 + g, wr = warp % WR, in K slice
    # ks = warp // WR; h = 0, 1 are the MMA's rows g and g + 8. Program (pid_n, pid_k) owns
    # rows [pid_n * 16 WR, +16 WR) and steps [pid_k * STEPS_PER_SPLIT, +STEPS_PER_SPLIT);
    # a K slice takes a contiguous run of Q steps, then the remainder one step a slice
    # (masked). BIAS: 8 (centered dequantization: q - 8) or -b (biased: b + q).
    R: tl.constexpr = 16 * WR * KS
    BLOCK_N: tl.constexpr = 16 * WR
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    h, ks, col, t, j, rows, rows_c, tok, tok2, m, tmask = _tc_tile(pid_n, N, M, WR, KS, NT,
                                                                   USE_INT64)
    s_begin = pid_k * STEPS_PER_SPLIT
    n_steps = tl.minimum(STEPS_PER_SPLIT, STEPS - s_begin)
    Q = n_steps // KS
    rem = n_steps - Q * KS
    step0 = s_begin + ks * Q                                        # [R, 1]
    w_ptrs = w_ptr + rows_c * stride_wn + step0 * 16 + col
    xcol = tl.max_contiguous(tl.multiple_of(16 * t + j, [1, 4]), [1, 4])
    x_ptrs = x_ptr + tok * stride_xm + step0 * 64 + xcol
    y_ptrs = x_ptr + tok2 * stride_xm + step0 * 64 + xcol
    s_ptrs = s_ptr + rows_c * stride_sn + 0 * col
    z_ptrs = z_ptr + rows_c * stride_zn + 0 * col
    # the portable model's pointers (EMULATE only)
    we_ptrs = w_ptr + rows_c * stride_wn + step0 * 16
    xt_ptrs = xt_ptr + (m % M) * stride_xtm + step0 * 128
    one = ks >= 0
    xone = h == 0
    if X_TOKENS:
        xone = xone & (rows % 8 < M)
    acc = tl.zeros((R, 16), dtype=tl.float32)
    for i in range(0, Q):
        cur = _tc_load(w_ptrs, x_ptrs, y_ptrs, s_ptrs, z_ptrs, i * 16, i * 64,
                       (step0 + i) // STEP_G * stride_sg, (step0 + i) // STEP_G * stride_zg,
                       one, xone, NT, False, EMULATE, LD, LD_CONS, LDM, LDM_CONS)
        acc = _tc_step(acc, cur, we_ptrs, xt_ptrs, i * 16, i * 128, one, one, tmask,
                       PREP, PREP_CONS, MAIN, MAIN_CONS, NT, EMULATE, BIAS)
    if rem > 0:
        # the remaining steps, one a slice: slice ks takes step s_begin + KS * Q + ks
        tail = ks < rem
        dq = KS * Q + ks - ks * Q                                   # from step0 to it
        cur = _tc_load(w_ptrs, x_ptrs, y_ptrs, s_ptrs, z_ptrs, dq * 16, dq * 64,
                       (step0 + dq) // STEP_G * stride_sg, (step0 + dq) // STEP_G * stride_zg,
                       tail, tail & xone, NT, True, EMULATE, LD, LD_CONS, LDM, LDM_CONS)
        acc = _tc_step(acc, cur, we_ptrs, xt_ptrs, dq * 16, dq * 128, tail, one, tmask,
                       PREP, PREP_CONS, MAIN, MAIN_CONS, NT, EMULATE, BIAS)
    if PLANES:
        # each K slice stores its sums as plane pid_k KS + ks of out (float32 [planes, M, N])
        plane = pid_k * KS + ks
        if USE_INT64:
            plane = plane.to(tl.int64)
        optr = out_ptr + plane * stride_os + m * stride_om + rows * stride_on
        _tc_store_f32(optr, acc, tmask & (m < M) & (rows < N), EMULATE)
    else:
        # the K slices' sums: [2, KS, 8 WR, 16] -> [2, 8 WR, 16]; row (h WR + wr) 8 + g
        tot = tl.sum(tl.reshape(acc, (2, KS, 8 * WR, 16)), axis=1)
        oh = tl.arange(0, 2)[:, None, None]
        orr = tl.arange(0, 8 * WR)[None, :, None]
        ocol = tl.arange(0, 16)[None, None, :]
        orows = pid_n * BLOCK_N + oh * (8 * WR) + orr
        oj = ocol % 4
        om = 2 * (ocol // 4) + (oj % 2) + 8 * (oj // 2)
        if USE_INT64:
            orows = orows.to(tl.int64)
            om = om.to(tl.int64)
        optr = out_ptr + pid_k * stride_os + om * stride_om + orows * stride_on
        tl.store(optr, tot.to(out_ptr.dtype.element_ty),
                 mask=(oj < 2 * NT) & (om < M) & (orows < N))


_LD_X4_ASM = tl.constexpr("{ .reg .pred p; setp.ne.b32 p, $8, 0; mov.b32 $0, 0; mov.b32 $1, 0; "
                           "mov.b32 $2, 0; mov.b32 $3, 0; "
                           "@p ld.global.v4.b32 {$0, $1, $2, $3}, [$4]; }")


@triton.jit
def _ld_x4(ptrs, valid):
    # 4 consecutive int32 words a lane where valid, zeros elsewhere (pack 4: the first
    # element's address, 16-byte aligned), loaded by asm in the tile's own layout: as a
    # tl.load inside the TMA kernel's loop, Triton's pipeliner copies x through shared
    # memory with the weight. A lane left out makes no request.
    return tl.inline_asm_elementwise(_LD_X4_ASM, "=r,=r,=r,=r,l,l,l,l,r,r,r,r",
                                     [ptrs.to(tl.int64, bitcast=True), valid.to(tl.int32)],
                                     tl.int32, True, 4)


@triton.jit
def _tma_x(x_ptrs, y_ptrs, i, xvalid, yvalid, NT: tl.constexpr):
    # Step i's x words for the TMA kernel: 4 of the first token tile, and 4 of the second
    # (NT == 2; else the first's again), each lane reading only where its token is < M.
    x0 = _ld_x4(x_ptrs + i * 64, xvalid)
    x1 = _ld_x4(x_ptrs + (i * 64 + 4), xvalid)
    x2 = _ld_x4(x_ptrs + (i * 64 + 8), xvalid)
    x3 = _ld_x4(x_ptrs + (i * 64 + 12), xvalid)
    y0, y1, y2, y3 = x0, x1, x2, x3
    if NT == 2:
        y0 = _ld_x4(y_ptrs + i * 64, yvalid)
        y1 = _ld_x4(y_ptrs + (i * 64 + 4), yvalid)
        y2 = _ld_x4(y_ptrs + (i * 64 + 8), yvalid)
        y3 = _ld_x4(y_ptrs + (i * 64 + 12), yvalid)
    return x0, x1, x2, x3, y0, y1, y2, y3


@triton.jit
def _tma_emulate(words, col, xt_ptrs, i, one, R: tl.constexpr, BIAS: tl.constexpr):
    # The TMA kernel's step i for the portable model: each element's sum of (b + q - bias)
    # x over the step and the sum of x, from the [R, 16] words of its box.
    p = tl.zeros((R, 16), dtype=tl.float32)
    xs = tl.zeros((R, 16), dtype=tl.float32)
    for wi in tl.static_range(16):
        # column wi of the row's words, for every element of the row
        word = tl.sum(tl.where(col == wi, words, 0), axis=1)[:, None]
        p, xs = _tc_emulate_word(p, xs, word, xt_ptrs, i * 128 + 8 * wi, one, BIAS)
    return p, xs


@triton.jit
def _tma_block(acc, w_desc, row0, i, frags, xs, s_ptrs, z_ptrs, stride_sg, stride_zg, one,
               tmask, col, xt_ptrs, R: tl.constexpr, NT: tl.constexpr, STEP_G: tl.constexpr,
               BIAS: tl.constexpr, EMULATE: tl.constexpr, MAIN: tl.constexpr,
               MAIN_CONS: tl.constexpr, LD: tl.constexpr, LD_CONS: tl.constexpr,
               LDM: tl.constexpr, LDM_CONS: tl.constexpr):
    # acc plus step i of one [16 W, 16] row block of the TMA kernel: its box of words (rows
    # row0.. of the weight), scales and zero points (s_ptrs, z_ptrs: the block's rows), and
    # the step's x fragments and sums (frags, xs: shared by the program's blocks; under
    # EMULATE the block sums its own products from xt_ptrs).
    words = w_desc.load([row0, i * 16])
    s = _tc_scale(s_ptrs + i // STEP_G * stride_sg, one, False, EMULATE, LD, LD_CONS, LDM,
                  LDM_CONS)
    z = _tc_scale(z_ptrs + i // STEP_G * stride_zg, one, False, EMULATE, LD, LD_CONS, LDM,
                  LDM_CONS)
    if EMULATE:
        p, xe = _tma_emulate(words, col, xt_ptrs, i, one, R, BIAS)
        return acc + tl.where(tmask, s * (p - (z - BIAS) * xe), 0.0)
    else:
        f0, f1, f2, f3, g0, g1, g2, g3 = frags
        if NT == 2:
            p = tl.inline_asm_elementwise(MAIN, MAIN_CONS,
                                          [words, f0, f1, f2, f3, g0, g1, g2, g3],
                                          tl.float32, True, 8)
        else:
            p = tl.inline_asm_elementwise(MAIN, MAIN_CONS, [words, f0, f1, f2, f3],
                                          tl.float32, True, 8)
        return acc + tl.where(tmask, s * (p - (z - BIAS) * xs), 0.0)


@triton.jit
def _w4a16_tc_tma_kernel(
    x_ptr, xt_ptr, w_desc, s_ptr, z_ptr, out_ptr,
    M, N, STEPS, STEPS_PER_SPLIT,
    stride_xm, stride_xtm, stride_sn, stride_sg, stride_zn, stride_zg, stride_os, stride_om,
    stride_on,
    W: tl.constexpr, NT: tl.constexpr, STEP_G: tl.constexpr, BIAS: tl.constexpr,
    STAGES: tl.constexpr, USE_INT64: tl.constexpr, EMULATE: tl.constexpr,
    PREP: tl.constexpr, PREP_CONS: tl.constexpr, MAIN: tl.constexpr,
    MAIN_CONS: tl.constexpr, LD: tl.constexpr, LD_CONS: tl.constexpr, LDM: tl.constexpr,
    LDM_CONS: tl.constexpr, RB: tl.constexpr = 1,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # _w4a16_tc_kernel with its W warps along the rows only (one K slice): row r = g +
    # 8 (warp + W h) of the [16 W, 16] tile is then weight row (RB pid_n + b) 16 W + r of
    # block b, so a step's word tile is one [16 W, 16] box of the [N, K // 8] words, loaded
    # by TMA, STAGES steps in flight through shared memory (Triton's loop pipeliner). A
    # program has RB (1, 2 or 4) such blocks, which share the step's x fragments (loaded
    # and prepared once a warp). x is read as int32 words (16-byte aligned rows), the
    # scales as in _w4a16_tc_kernel; the sums go to out, or to a plane (below). Rows past
    # N: the box reads zeros, the store is masked. Program (pid_n, pid_k) takes steps [pid_k
    # STEPS_PER_SPLIT, +STEPS_PER_SPLIT) and stores plane pid_k of out (float32 [splits, M,
    # N] where K is split, else out itself: stride_os 0).
    R: tl.constexpr = 16 * W
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    s_begin = pid_k * STEPS_PER_SPLIT
    s_end = tl.minimum(STEPS, s_begin + STEPS_PER_SPLIT)
    h, ks, col, t, j, rows, rows_c, tok, tok2, m, tmask = _tc_tile(pid_n * RB, N, M, W, 1, NT,
                                                                   USE_INT64)
    xcol = tl.max_contiguous(tl.multiple_of(16 * t + j, [1, 4]), [1, 4])
    x_ptrs = x_ptr + tok * stride_xm + xcol
    y_ptrs = x_ptr + tok2 * stride_xm + xcol
    # Only the lanes of a token < M read x (B column g of a token tile is token g, or
    # g + 8); the others' columns are zeros, and their sums are never stored.
    xvalid = rows % 8 < M
    yvalid = rows % 8 + 8 < M
    s_ptrs = s_ptr + rows_c * stride_sn + 0 * col
    z_ptrs = z_ptr + rows_c * stride_zn + 0 * col
    xt_ptrs = xt_ptr + (m % M) * stride_xtm                         # EMULATE only
    one = ks >= 0
    dt = out_ptr.dtype.element_ty
    ok = tmask & (m < M)
    optr = out_ptr + pid_k * stride_os + m * stride_om
    acc = tl.zeros((R, 16), dtype=tl.float32)
    if RB == 1:
        # one block: its own loop (the row-block loop below, run with one block, ran the
        # M = 1 rows 3-4 % slower on the H200: 96.3 against 93.4 us on the 70B gate-up)
        for i in tl.range(s_begin, s_end, num_stages=STAGES):
            words = w_desc.load([pid_n * R, i * 16])
            s = _tc_scale(s_ptrs + i // STEP_G * stride_sg, one, False, EMULATE, LD, LD_CONS,
                          LDM, LDM_CONS)
            z = _tc_scale(z_ptrs + i // STEP_G * stride_zg, one, False, EMULATE, LD, LD_CONS,
                          LDM, LDM_CONS)
            if EMULATE:
                p, xs = _tma_emulate(words, col, xt_ptrs, i, one, R, BIAS)
                acc += tl.where(tmask, s * (p - (z - BIAS) * xs), 0.0)
            else:
                x0, x1, x2, x3, y0, y1, y2, y3 = _tma_x(x_ptrs, y_ptrs, i, xvalid, yvalid, NT)
                acc = _tc_step(acc, (words, x0, x1, x2, x3, y0, y1, y2, y3, s, z), 0, 0, 0, 0,
                               one, one, tmask, PREP, PREP_CONS, MAIN, MAIN_CONS, NT, False,
                               BIAS)
        tl.store(optr + rows * stride_on, acc.to(dt), mask=ok & (rows < N))
    else:
        rows1 = rows + R
        rows2 = rows + 2 * R
        rows3 = rows + 3 * R
        s1_ptrs = s_ptr + rows1 % N * stride_sn + 0 * col
        z1_ptrs = z_ptr + rows1 % N * stride_zn + 0 * col
        s2_ptrs = s_ptr + rows2 % N * stride_sn + 0 * col
        z2_ptrs = z_ptr + rows2 % N * stride_zn + 0 * col
        s3_ptrs = s_ptr + rows3 % N * stride_sn + 0 * col
        z3_ptrs = z_ptr + rows3 % N * stride_zn + 0 * col
        row0 = pid_n * (RB * R)
        acc1 = tl.zeros((R, 16), dtype=tl.float32)
        acc2 = tl.zeros((R, 16), dtype=tl.float32)
        acc3 = tl.zeros((R, 16), dtype=tl.float32)
        for i in tl.range(s_begin, s_end, num_stages=STAGES):
            if EMULATE:
                frags = (one, one, one, one, one, one, one, one)
                xs = acc
            else:
                # the step's x fragments and sums, once for every block
                x0, x1, x2, x3, y0, y1, y2, y3 = _tma_x(x_ptrs, y_ptrs, i, xvalid, yvalid, NT)
                if NT == 2:
                    f0, f1, f2, f3, g0, g1, g2, g3, xs = tl.inline_asm_elementwise(
                        PREP, PREP_CONS, [x0, x1, x2, x3, y0, y1, y2, y3],
                        (tl.int32, tl.int32, tl.int32, tl.int32, tl.int32, tl.int32,
                         tl.int32, tl.int32, tl.float32), True, 8)
                    frags = (f0, f1, f2, f3, g0, g1, g2, g3)
                else:
                    f0, f1, f2, f3, xs = tl.inline_asm_elementwise(
                        PREP, PREP_CONS, [x0, x1, x2, x3],
                        (tl.int32, tl.int32, tl.int32, tl.int32, tl.float32), True, 8)
                    frags = (f0, f1, f2, f3, f0, f1, f2, f3)
            acc = _tma_block(acc, w_desc, row0, i, frags, xs, s_ptrs, z_ptrs, stride_sg,
                             stride_zg, one, tmask, col, xt_ptrs, R, NT, STEP_G, BIAS, EMULATE,
                             MAIN, MAIN_CONS, LD, LD_CONS, LDM, LDM_CONS)
            acc1 = _tma_block(acc1, w_desc, row0 + R, i, frags, xs, s1_ptrs, z1_ptrs,
                              stride_sg, stride_zg, one, tmask, col, xt_ptrs, R, NT, STEP_G,
                              BIAS, EMULATE, MAIN, MAIN_CONS, LD, LD_CONS, LDM, LDM_CONS)
            if RB == 4:
                acc2 = _tma_block(acc2, w_desc, row0 + 2 * R, i, frags, xs, s2_ptrs, z2_ptrs,
                                  stride_sg, stride_zg, one, tmask, col, xt_ptrs, R, NT,
                                  STEP_G, BIAS, EMULATE, MAIN, MAIN_CONS, LD, LD_CONS, LDM,
                                  LDM_CONS)
                acc3 = _tma_block(acc3, w_desc, row0 + 3 * R, i, frags, xs, s3_ptrs, z3_ptrs,
                                  stride_sg, stride_zg, one, tmask, col, xt_ptrs, R, NT,
                                  STEP_G, BIAS, EMULATE, MAIN, MAIN_CONS, LD, LD_CONS, LDM,
                                  LDM_CONS)
        tl.store(optr + rows * stride_on, acc.to(dt), mask=ok & (rows < N))
        tl.store(optr + rows1 * stride_on, acc1.to(dt), mask=ok & (rows1 < N))
        if RB == 4:
            tl.store(optr + rows2 * stride_on, acc2.to(dt), mask=ok & (rows2 < N))
            tl.store(optr + rows3 * stride_on, acc3.to(dt), mask=ok & (rows3 < N))


@triton.jit
def _split_sum_kernel(part_ptr, out_ptr, MN, N, SPLIT, stride_om, stride_on,
                      BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    # out[m, n] = sum over s of part[s, m, n] (part contiguous), in a fixed order. PDL:
    # launched dependent on the kernel that stored the planes (opspec.kernels.pdl).
    overlap_start(PDL)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, SPLIT):
        acc += tl.load(part_ptr + s * MN + offs, mask=mask, other=0.0)
    m = offs // N
    n = offs % N
    tl.store(out_ptr + m * stride_om + n * stride_on, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _w4a16_prefill_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sg, stride_zn, stride_zg,
    stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    GROUP: tl.constexpr, ONE_GROUP: tl.constexpr, EVEN_K: tl.constexpr, USE_INT64: tl.constexpr,
    UPCAST: tl.constexpr, F32_DEQUANT: tl.constexpr, SWAP_AB: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, BLOCK_K // 2)
    offs_xm = offs_m % M
    offs_wn = offs_n % N
    if USE_INT64:
        offs_xm = offs_xm.to(tl.int64)
        offs_wn = offs_wn.to(tl.int64)
    x_ptrs = x_ptr + offs_xm[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_wn[:, None] * stride_wn + offs_j[None, :] * stride_wk

    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs)
            p = tl.load(w_ptrs)
        else:
            x = tl.load(x_ptrs, mask=(k0 + offs_k)[None, :] < K, other=0.0)
            p = tl.load(w_ptrs, mask=(k0 + 2 * offs_j)[None, :] < K, other=0)
        if UPCAST:
            x = x.to(tl.float32)
        if F32_DEQUANT:
            # Interleave the nibbles back into k order, w[n, 2j + t] = (p >> 4t) & 0xF, then
            # exact float32 values without an int-to-float conversion: ORed into the
            # mantissa of 2**23 a nibble is 2**23 + q; (q - z) * s in float32, one rounding.
            q8 = tl.reshape(tl.join(p & 0xF, p >> 4), (BLOCK_N, BLOCK_K))
            q = (q8.to(tl.uint32) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
            CT: tl.constexpr = tl.float32
        else:
            # Nibbles to exact values in x's dtype; (q - z) * s is computed in it (16-bit
            # arithmetic, two roundings).
            lo, hi = _nibbles(p, x_ptr.dtype.element_ty, x.dtype, False)
            q = tl.reshape(tl.join(lo, hi), (BLOCK_N, BLOCK_K))
            CT: tl.constexpr = x.dtype
        if ONE_GROUP:
            g = k0 // GROUP
            s = tl.load(s_ptr + offs_wn * stride_sn + g * stride_sg).to(CT)
            z = tl.load(z_ptr + offs_wn * stride_zn + g * stride_zg).to(CT)
            w = (q - z[:, None]) * s[:, None]
        else:
            gk = (k0 + offs_k) // GROUP
            gmask = (k0 + offs_k)[None, :] < K
            s = tl.load(s_ptr + offs_wn[:, None] * stride_sn + gk[None, :] * stride_sg,
                        mask=gmask, other=0.0).to(CT)
            z = tl.load(z_ptr + offs_wn[:, None] * stride_zn + gk[None, :] * stride_zg,
                        mask=gmask, other=0.0).to(CT)
            w = (q - z) * s
        w = w.to(x.dtype)
        if SWAP_AB:
            acc = tl.dot(w, tl.trans(x), acc)     # acc[n, m]
        else:
            acc = tl.dot(x, tl.trans(w), acc)     # acc[m, n]
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += (BLOCK_K // 2) * stride_wk

    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    if SWAP_AB:
        out_ptrs = out_ptr + offs_n[:, None] * stride_on + offs_m[None, :] * stride_om
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty),
                 mask=(offs_n[:, None] < N) & (offs_m[None, :] < M))
    else:
        out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# --- launchers ----------------------------------------------------------------------------


def _check(x, packed_weight, scales, zeros, group_size, out):
    """The launchers' operand checks: ``(M, N, K)``."""
    if x.dim() != 2 or packed_weight.dim() != 2 or scales.dim() != 2 or zeros.dim() != 2:
        raise ValueError("x, packed_weight, scales and zeros must be 2-D")
    M, K = x.shape
    N = packed_weight.shape[0]
    if group_size < 1 or K % 2 != 0 or K % group_size != 0:
        raise ValueError(f"K = {K} must be even and a multiple of group_size = {group_size}")
    if packed_weight.shape[1] != K // 2:
        raise ValueError(f"packed_weight must have shape [{N}, {K // 2}] (K = {K}), "
                         f"got {list(packed_weight.shape)}")
    G = K // group_size
    if tuple(scales.shape) != (N, G) or tuple(zeros.shape) != (N, G):
        raise ValueError(f"scales and zeros must have shape [{N}, {G}], got "
                         f"{list(scales.shape)} and {list(zeros.shape)}")
    if x.dtype not in _ACTIVATIONS or out.dtype != x.dtype:
        raise TypeError(f"x and out must share a dtype of float16 or bfloat16, got {x.dtype}, {out.dtype}")
    if packed_weight.dtype != torch.uint8:
        raise TypeError(f"packed_weight must be uint8, got {packed_weight.dtype}")
    if scales.dtype not in _SCALES or zeros.dtype != scales.dtype:
        raise TypeError(f"scales and zeros must share a dtype of float16, bfloat16 or float32, "
                        f"got {scales.dtype}, {zeros.dtype}")
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out must have shape [{M}, {N}], got {list(out.shape)}")
    return M, N, K


def _upcast(x: torch.Tensor) -> bool:
    # Triton's interpreter computes tl.dot wrongly in bfloat16: there only, the dot's
    # operands are widened to float32 (see the module docstring).
    return TRITON_INTERPRETED and x.dtype == torch.bfloat16


def _strides(x, w, s, z):
    return (x.stride(0), x.stride(1), w.stride(0), w.stride(1), s.stride(0), s.stride(1),
            z.stride(0), z.stride(1))


def _k_splits(steps: int, split_k: int) -> tuple[int, int]:
    """``(steps a split, splits)`` for K cut into at most ``split_k`` splits of whole steps,
    none of them empty."""
    per_split = triton.cdiv(steps, max(1, min(split_k, steps)))
    return per_split, triton.cdiv(steps, per_split)


def _split_dest(out: torch.Tensor, split: int) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """Where a decode kernel writes its sums and their (split, m, n) strides: ``out`` itself
    when K is not split, else a float32 ``[split, M, N]`` buffer that :func:`_sum_splits`
    adds up."""
    if split == 1:
        return out, (0, out.stride(0), out.stride(1))
    dest = torch.empty((split, *out.shape), dtype=torch.float32, device=out.device)
    return dest, dest.stride()


def _sum_splits(dest: torch.Tensor, out: torch.Tensor, split: int, block: int = 1024
                ) -> tuple | None:
    """``out = dest.sum(0)`` in a fixed order (deterministic) where K was split; returns the
    launch's ``(grid, args, options)`` (for :func:`prepare`), or None where nothing ran."""
    if split > 1:
        M, N = out.shape
        grid = (triton.cdiv(M * N, block),)
        args = (dest, out, M * N, N, split, out.stride(0), out.stride(1))
        options = dict(BLOCK=block, num_warps=4, **overlap_options(out.device))
        launch(_split_sum_kernel, grid, *args, **options)
        return grid, args, options
    return None


def w4a16_decode_triton(x: torch.Tensor, packed_weight: torch.Tensor, scales: torch.Tensor,
                        zeros: torch.Tensor, group_size: int, out: torch.Tensor,
                        config: DecodeConfig | None = None) -> torch.Tensor:
    """Write ``x @ dequant(W).T`` into ``out`` (``[M, N]``, x's dtype, any strides) for
    ``M <= 16`` and return it (see the module docstring). ``config`` overrides
    :func:`decode_config_for`."""
    M, N, K = _check(x, packed_weight, scales, zeros, group_size, out)
    if M > DECODE_MAX_M:
        raise ValueError(f"the decode kernel handles M <= {DECODE_MAX_M}, got M = {M}; "
                         f"use w4a16_prefill_triton")
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    key = None
    if config is None:
        # The table's launch for these shapes, strides, dtypes and alignments, if one ran:
        # replayed with these tensors (see kernels/launch.py; _launch_tc keeps only launches
        # whose other arguments all follow from this key).
        key = (M, N, K, group_size, x.dtype, scales.dtype, x.stride(), packed_weight.stride(),
               scales.stride(), zeros.stride(), out.stride(), x.get_device(),
               x.data_ptr() % 16, packed_weight.data_ptr() % 16, scales.data_ptr() % 16,
               zeros.data_ptr() % 16, out.data_ptr() % 16)
        prepared = _PREPARED.get(key)
        if prepared is not None:
            # x and packed_weight stand for their int32 views: a launch reads only the
            # address, which a view shares
            prepared(x, x, packed_weight, scales, zeros, out)
            return out
    cfg = config or decode_config_for(M, N, K, group_size, x.dtype)
    if cfg.tc:
        if _launch_tc(x, packed_weight, scales, zeros, group_size, out, cfg, M, N, K, key):
            return out
        cfg = legacy_decode_config(M, N, K, group_size)
    if cfg.block_k % 32 or cfg.block_k < 32:
        raise ValueError(f"config.block_k must be a multiple of 32, got {cfg.block_k}")
    if cfg.gemv:
        words = _as_words(packed_weight, M, K, group_size, cfg.block_k)
        if words is not None:
            return _launch_gemv(x, words, scales, zeros, group_size, out, cfg, M, N, K)
    per_split, split = _k_splits(triton.cdiv(K, cfg.block_k), cfg.split_k)
    k_per_split = per_split * cfg.block_k
    use_int64 = max(_extent(x), _extent(packed_weight), _extent(scales), _extent(zeros),
                    _extent(out), split * M * N) > _INT32_LIMIT
    dest, dstrides = _split_dest(out, split)
    grid = (triton.cdiv(N, cfg.block_n), split)
    launch(
        _w4a16_decode_kernel, grid,
        x, packed_weight, scales, zeros, dest, M, N, K // 2, k_per_split // 2,
        *_strides(x, packed_weight, scales, zeros), *dstrides,
        BLOCK_M=16, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP=group_size,
        ONE_GROUP=group_size % cfg.block_k == 0, USE_INT64=use_int64,
        UPCAST=_upcast(x), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **overlap_options(x.device),
    )
    _sum_splits(dest, out, split)
    return out


def _as_words(packed_weight: torch.Tensor, M: int, K: int, group_size: int,
              block_k: int) -> torch.Tensor | None:
    """The packed weight as ``[N, K // 8]`` int32 words for the FMA kernel, or None where
    that kernel does not apply (more than GEMV_MAX_M rows, a step straddling groups, or a
    weight whose rows are not whole aligned words)."""
    if M > GEMV_MAX_M or group_size % block_k or K % 8:
        return None
    return _word_view(packed_weight, K)


def _word_view(pw: torch.Tensor, K: int) -> torch.Tensor | None:
    """The packed weight as ``[N, K // 8]`` int32 words (K % 8 == 0), or None where its rows
    are not whole aligned 4-byte words."""
    if (pw.stride(1) != 1 and pw.shape[1] > 1) or pw.stride(0) % 4 or pw.data_ptr() % 4:
        return None
    # An int32 view of the same storage: word w of row n is bytes 4w..4w+3 (little endian).
    return torch.as_strided(pw, (pw.shape[0], K // 2), (pw.stride(0), 1)).view(torch.int32)


def tc_supported(device: torch.device) -> bool:
    """Whether the tensor-core decode kernel can run on ``device``: its asm blocks are PTX
    for sm_80 or newer (mma.sync m16n8k16, bfloat16 FMAs); under Triton's interpreter its
    portable model runs instead."""
    if TRITON_INTERPRETED:
        return True
    if device.type != "cuda" or getattr(torch.version, "hip", None):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 0)


def tc_asm_options(x_dtype: torch.dtype, scales_dtype: torch.dtype, M: int, group_size: int,
                   biased: bool) -> dict:
    """The constexprs both tensor-core kernels take for these dtypes, tokens and groups:
    token tiles, steps a group, the dequantization's bias, the asm blocks (or, under the
    interpreter, their portable model)."""
    bf16 = x_dtype == torch.bfloat16
    nt = 1 if M <= _TC_TILE_TOKENS else 2
    (prep, prep_cons), (main, main_cons) = _TC_ASM[(bf16, nt, biased)]
    skind = str(scales_dtype).removeprefix("torch.")
    (ld, ld_cons), (ldm, ldm_cons) = _TC_SCALE_ASM[(skind, False)], _TC_SCALE_ASM[(skind, True)]
    return dict(NT=nt, STEP_G=group_size // 128,
                BIAS=-(128 if bf16 else 1024) if biased else 8, EMULATE=TRITON_INTERPRETED,
                PREP=prep, PREP_CONS=prep_cons, MAIN=main, MAIN_CONS=main_cons, LD=ld,
                LD_CONS=ld_cons, LDM=ldm, LDM_CONS=ldm_cons)


def _launch_tc(x, packed_weight, scales, zeros, group_size, out, cfg, M, N, K,
               memo_key=None) -> bool:
    """Run the tensor-core decode kernel if it applies (else False: the caller falls back).
    With ``memo_key``, keep the launch's prepared replay under it where one launch on the
    caller's own tensors did the work."""
    if group_size % 128 or K % 128 or not tc_supported(x.device):
        return False
    if M > (DECODE_MAX_M if cfg.tma else _TC_MAX_M):
        return False
    ks = cfg.k_slices
    if ks < 1 or cfg.num_warps % ks or cfg.block_k != 128:
        raise ValueError(f"a tensor-core config needs block_k = 128 and num_warps a multiple "
                         f"of k_slices, got {tuple(cfg)}")
    wr = cfg.num_warps // ks
    if cfg.tma and (ks != 1 or cfg.block_n not in (16 * wr, 32 * wr, 64 * wr)):
        raise ValueError(f"a TMA config has one K slice and block_n = 16 x num_warps x 1, 2 "
                         f"or 4 row blocks, got {tuple(cfg)}")
    if not cfg.tma and cfg.block_n != 16 * wr:
        raise ValueError(f"a tensor-core config has block_n = 16 x (num_warps // k_slices) "
                         f"= {16 * wr}, got {cfg.block_n}")
    words = _word_view(packed_weight, K)
    if words is None:
        return False
    # x read as int32 words (pairs of values): unit stride along K, 4-byte aligned rows
    if x.stride(1) != 1 or (M > 1 and x.stride(0) % 2) or x.data_ptr() % 4:
        x = torch.empty((M, K), dtype=x.dtype, device=x.device).copy_(x)
        memo_key = None   # a replay would read the caller's x, not the copy
    x32 = torch.as_strided(x, (M, K), (x.stride(0) if M > 1 else K, 1)).view(torch.int32)
    if cfg.tma:
        if _launch_tc_tma(x, x32, words, scales, zeros, group_size, out, cfg, M, N, K):
            return True
        if M > _TC_MAX_M:
            return False      # no TMA here: the MMA kernel, as for the smaller weights
        # no TMA here (the device, or the weight's alignment): the K-sliced kernel
        cfg = tc_config_for(M, N, K, group_size, x.dtype, tma=False)
        ks = cfg.k_slices
        wr = cfg.num_warps // ks
    steps = K // 128
    per_split, split = _k_splits(steps, cfg.split_k)
    planes_on = bool(cfg.planes) and ks > 1
    planes = split * (ks if planes_on else 1)
    use_int64 = max(_extent(x), _extent(words) * 4, _extent(scales), _extent(zeros),
                    _extent(out), planes * M * N) > _INT32_LIMIT
    dest, dstrides = _split_dest(out, planes)
    grid = (triton.cdiv(N, cfg.block_n), split)
    args = (x32, x, words, scales, zeros, dest, M, N, steps, per_split,
            x32.stride(0), x.stride(0), words.stride(0), scales.stride(0), scales.stride(1),
            zeros.stride(0), zeros.stride(1), *dstrides)
    lo, hi = _TC_X_TOKENS.get(x.dtype, (0, -1))
    kwargs = dict(WR=wr, KS=ks, USE_INT64=use_int64, PLANES=planes_on, X_TOKENS=lo <= M <= hi,
                  **tc_asm_options(x.dtype, scales.dtype, M, group_size, bool(cfg.biased)),
                  num_warps=cfg.num_warps, num_stages=1, **overlap_options(x.device),
                  **({} if _TC_MAXNREG is None else {"maxnreg": _TC_MAXNREG}))
    if planes == 1:
        _PREPARED.launch(memo_key, 6, _w4a16_tc_kernel, grid, *args, **kwargs)
        return True
    # planes: the kernel and the planes' sum, an overlapped pair where the device allows it
    launch(_w4a16_tc_kernel, grid, *args, **kwargs)
    sum_grid, sum_args, sum_options = _sum_splits(dest, out, planes)
    if memo_key is not None and split == 1:
        # the two launches replayed together, with a new planes buffer a call
        kernel_replay = prepare(6, _w4a16_tc_kernel, grid, *args, **kwargs)
        sum_replay = prepare(2, _split_sum_kernel, sum_grid, *sum_args, **sum_options)
        if kernel_replay is not None and sum_replay is not None:
            _PREPARED.keep(memo_key, _PlanesReplay(kernel_replay, sum_replay, dest.shape))
    return True


def tma_supported(device: torch.device) -> bool:
    """Whether the TMA decode kernel can run on ``device`` (sm_90 or newer; the interpreter
    runs its portable model)."""
    if TRITON_INTERPRETED:
        return True
    return tc_supported(device) and torch.cuda.get_device_capability(device) >= (9, 0)


def _launch_tc_tma(x, x32, words, scales, zeros, group_size, out, cfg, M, N, K) -> bool:
    """Run the TMA decode kernel (``cfg.tma``), or return False where it does not apply:
    a device without TMA, or a weight whose base or row stride is not a multiple of 16
    bytes (TMA's rule)."""
    if not tma_supported(x.device) or words.data_ptr() % 16 or (words.stride(0) * 4) % 16:
        return False
    if x32.data_ptr() % 16 or (M > 1 and x32.stride(0) % 4):
        # x is read 16 bytes a lane
        x = torch.empty((M, K), dtype=x.dtype, device=x.device).copy_(x)
        x32 = x.view(torch.int32)
    w = cfg.num_warps
    desc = TensorDescriptor(words, list(words.shape), list(words.stride()), [16 * w, 16])
    steps = K // 128
    per_split, split = _k_splits(steps, cfg.split_k)
    use_int64 = max(_extent(x), _extent(scales), _extent(zeros), _extent(out),
                    split * M * N) > _INT32_LIMIT
    dest, dstrides = _split_dest(out, split)
    launch(_w4a16_tc_tma_kernel, (triton.cdiv(N, cfg.block_n), split),
           x32, x, desc, scales, zeros, dest, M, N, steps, per_split,
           x32.stride(0), x.stride(0), scales.stride(0), scales.stride(1), zeros.stride(0),
           zeros.stride(1), *dstrides,
           W=w, STAGES=cfg.num_stages, USE_INT64=use_int64, RB=cfg.block_n // (16 * w),
           **tc_asm_options(x.dtype, scales.dtype, M, group_size, bool(cfg.biased)),
           num_warps=w, num_stages=cfg.num_stages, **overlap_options(x.device),
           **({} if _TC_TMA_MAXNREG is None else {"maxnreg": _TC_TMA_MAXNREG}))
    _sum_splits(dest, out, split)
    return True


class _PlanesReplay:
    """The prepared replay of a tensor-core decode launch whose K slices store planes: a
    new float32 ``[planes, M, N]`` buffer, the kernel into it, the planes' sum into out."""

    __slots__ = ("main", "total", "shape")

    def __init__(self, main, total, shape) -> None:
        self.main, self.total, self.shape = main, total, shape

    def __call__(self, x, x_again, packed_weight, scales, zeros, out) -> None:
        dest = torch.empty(self.shape, dtype=torch.float32, device=out.device)
        self.main(x, x_again, packed_weight, scales, zeros, dest)
        self.total(dest, out)


def _launch_gemv(x, words, scales, zeros, group_size, out, cfg, M, N, K):
    block_w = cfg.block_k // 8
    kw = K // 8
    per_split, split = _k_splits(triton.cdiv(kw, block_w), cfg.split_k)
    w_per_split = per_split * block_w
    use_int64 = max(_extent(x), _extent(words) * 4, _extent(scales), _extent(zeros),
                    _extent(out), split * M * N) > _INT32_LIMIT
    dest, dstrides = _split_dest(out, split)
    launch(
        _w4a16_gemv_kernel, (triton.cdiv(N, cfg.block_n), split),
        x, words, scales, zeros, dest, M, N, kw, w_per_split,
        x.stride(0), x.stride(1), words.stride(0), scales.stride(0), scales.stride(1),
        zeros.stride(0), zeros.stride(1), *dstrides,
        BLOCK_N=cfg.block_n, BLOCK_W=block_w, M_ROWS=M, GROUP=group_size,
        USE_INT64=use_int64, PREFETCH=cfg.num_stages >= 2, num_warps=cfg.num_warps,
        num_stages=1, **overlap_options(x.device),
    )
    _sum_splits(dest, out, split)
    return out


def w4a16_prefill_triton(x: torch.Tensor, packed_weight: torch.Tensor, scales: torch.Tensor,
                         zeros: torch.Tensor, group_size: int, out: torch.Tensor,
                         config: PrefillConfig | None = None) -> torch.Tensor:
    """Write ``x @ dequant(W).T`` into ``out`` (``[M, N]``, x's dtype, any strides), any M,
    and return it (see the module docstring). ``config`` overrides
    :func:`prefill_config_for`."""
    M, N, K = _check(x, packed_weight, scales, zeros, group_size, out)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    cfg = config or prefill_config_for(M, N, K, group_size)
    if cfg.two_pass:
        return _two_pass(x, packed_weight, scales, zeros, group_size, out)
    use_int64 = max(_extent(x), _extent(packed_weight), _extent(scales), _extent(zeros),
                    _extent(out)) > _INT32_LIMIT
    grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
    extra = {}
    if (_PREFILL_MAXNREG and cfg.num_warps == 8 and not cfg.swap_ab
            and cfg.block_m * cfg.block_n <= 128 * 128):
        extra["maxnreg"] = _PREFILL_MAXNREG
    launch(
        _w4a16_prefill_kernel, grid, x, packed_weight, scales, zeros, out, M, N, K,
        *_strides(x, packed_weight, scales, zeros), out.stride(0), out.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        GROUP=group_size, ONE_GROUP=group_size % cfg.block_k == 0,
        EVEN_K=K % cfg.block_k == 0, USE_INT64=use_int64, UPCAST=_upcast(x),
        F32_DEQUANT=bool(cfg.f32_dequant), SWAP_AB=bool(cfg.swap_ab),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **extra,
        **overlap_options(x.device),
    )
    return out


def _two_pass(x, packed_weight, scales, zeros, group_size, out):
    """``PrefillConfig.two_pass``: dequantize a slice of weight rows into scratch, then
    ``x @ slice.T`` into the slice's columns of ``out`` with the GEMM kernel."""
    if not dequant_supported(group_size):
        raise ValueError(f"two-pass prefill needs a group of 2^i bytes, got group_size = "
                         f"{group_size}")
    M, K = x.shape
    N = packed_weight.shape[0]
    # Under the interpreter bfloat16 tl.dot is wrong (see _upcast): float32 there.
    work = torch.float32 if _upcast(x) else x.dtype
    row_bytes = K * torch.finfo(work).bits // 8
    rows = max(_TWO_PASS_ROW_ALIGN, _TWO_PASS_SCRATCH_BYTES // row_bytes
               // _TWO_PASS_ROW_ALIGN * _TWO_PASS_ROW_ALIGN)
    rows = min(rows, N)
    scratch = torch.empty((rows, K), dtype=work, device=x.device)
    a = x if work == x.dtype else x.to(work)
    for n0 in range(0, N, rows):
        n1 = min(N, n0 + rows)
        w = dequantize_int4_triton(packed_weight[n0:n1], scales[n0:n1], zeros[n0:n1],
                                   group_size, scratch[:n1 - n0])
        if work == x.dtype:
            gemm_triton(a, w, False, True, out[:, n0:n1])
        else:
            out[:, n0:n1].copy_(gemm_triton(a, w, False, True,
                                            torch.empty((M, n1 - n0), dtype=work,
                                                        device=x.device)))
    return out
