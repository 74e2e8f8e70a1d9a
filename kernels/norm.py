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
  row loads. ``num_warps`` sets the elements each thread holds: 32 on large grids (16
  for RMSNorm), where the rows in flight per SM (bounded by its registers) keep HBM busy,
  fewer on decode grids (see :func:`norm_config`). Triton specialises a unit column
  stride and sizes that are multiples of 16, so contiguous rows load and store as 128-bit
  vectors. A row whose length is not a power of two can be held as two tiles, the largest
  power of two below it and a power-of-two remainder (``NormTuning.split_rows``; off, as
  measured slower). On rows of 32768 (one program an SM) the first wave's programs start
  in steps (``NormTuning.rows_stagger``, :mod:`opspec.kernels.stagger`).
* **packed** (bfloat16 rows of 16385 to 32768 elements on grids of a row per SM or more):
  the row held in registers once, as 32-bit words of two elements (half the registers of
  a float32 row; each use converts the words again), on a persistent grid of two programs
  of 32 warps an SM, each loading its next row while it reduces and writes the current
  one. LayerNorm's statistics are one reduction of the sums about the row's first
  element, with an exact pass where they would lose precision (as stream's).
* **stream** (rows longer than the register block, and float16 rows of 16385 to 32768
  elements on grids of a row per SM or more, or bfloat16 ones the packed kernel cannot
  take): a persistent grid of one program of 32
  warps per SM walks its rows in 32 KiB chunks, once from HBM for the statistics (sums
  about the row's first element for LayerNorm, with an exact pass where they would lose
  precision) and once from L2 to write; the next row's first chunk is loaded before the
  statistics are reduced, so HBM reads go on through the reductions and the writes.
* **a looped row** (longer rows with the fused residual add, in 4096-element chunks; and
  RMSNorm's rows on large grids, float32 ones of up to 8192 elements in 2048-element
  chunks and 16-bit ones of 4097 to 8192 in 4096-element chunks, at 16 warps, as
  Inductor's kernels take them): one program per row walks it once for the statistics
  (the sum of squares; for LayerNorm a per-lane Welford mean and sum of squared
  deviations, merged at the end, which stays accurate when the mean is large) and once to
  write the result, re-reading the row mostly from L2. The row length is a compile-time
  constant of this kernel (one compile per length), so that its chunk loops unroll.

* **coop** (off in :data:`TUNING` until measured): a long row cut into chunks, one
  program a chunk; the chunks exchange partial statistics through a small workspace and
  each writes its chunk from registers (one read of HBM, several programs per SM).

LayerNorm's statistics in the register and coop kernels are two reductions in turn (the
mean, then the centred sum of squares) or, as variants, one: sums about each row's first
element with a two-pass fallback, or Chan's merge of per-thread groups (``ln_stats``). The
constants of all of this are one block, :class:`NormTuning` / :data:`TUNING`.

Offsets are computed in int64 when any of them could pass ``2**31 - 1``. Every kernel here is
launched dependent where the device allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import torch
import triton
import triton.language as tl

from opspec.kernels.coop import arrive_and_wait
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.stagger import stagger_cycles, stagger_start, stagger_supported
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple

__all__ = [
    "DEFAULT_RMS_EPS",
    "MAX_REGISTER_BLOCK",
    "NormConfig",
    "NormTuning",
    "TUNING",
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
#: Streaming multiprocessors of an H200, and a grid that gives each a few programs.
_SMS = 132
_TARGET_PROGRAMS = 4 * _SMS
_INT32_LIMIT = INT32_LIMIT

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


class NormTuning(NamedTuple):
    """The launch table's constants (:func:`norm_config` and the launcher follow from these and
    the shape). benchmarks/norm_sweep.py times alternatives on the H200 and prints the fields
    a better variant changes."""

    #: LayerNorm's statistics in the register and coop kernels: ``"twopass"`` (the mean, then
    #: the centred sum of squares: two cross-warp reductions in sequence), ``"shifted"`` (the
    #: sums of ``x - K`` and its square about the row's first element ``K``, one reduction of
    #: the pair; rows whose ``K`` lies more than ``sqrt(shift_limit)`` standard deviations
    #: from the mean take the two reductions afterwards) or ``"chan"`` (exact mean and
    #: squared deviations of each thread's 16-byte groups, merged by Chan's formula in one
    #: reduction of (mean, M2, count)).
    ln_stats: str
    #: ``"shifted"``: the largest ``(mean - K)**2 / var`` kept. The variance from shifted sums
    #: carries about ``(1 + 3 r) c eps`` relative error for ``r = (mean - K)**2 / var`` (c
    #: the summation's error growth, eps float32's), two-pass about ``c eps``: 16 bounds it
    #: at ~50x two-pass, ~1e-5 typical, below bfloat16/float16 rounding and fp32's tolerance.
    #: A Gaussian row passes it unless its first element is beyond 4 sigma (6e-5 of rows).
    shift_limit: float
    #: rows kernel: short rows are packed to tiles of at least ``min_tile`` elements while the
    #: grid keeps ``programs_per_sm`` programs per SM.
    min_tile: int
    programs_per_sm: int
    #: rows kernel: elements a thread holds on a large grid (>= programs_per_sm per SM), a
    #: grid of at least one program per SM, and a smaller one (decode).
    per_thread_large: int
    per_thread_mid: int
    per_thread_small: int
    #: coop kernel (rows cut into chunks, one program a chunk, the chunks of a row exchanging
    #: partial statistics through a workspace): rows with ``next_power_of_2(N) >=
    #: coop_min_block`` (0: never), of at least ``coop_min_programs`` programs in all and at
    #: most ``coop_max_chunks`` chunks a row, and only LayerNorm and RMSNorm (not the fused
    #: residual add, whose fallback could not re-read a residual already overwritten).
    coop_min_block: int
    coop_block: int
    coop_warps: int
    coop_max_chunks: int = 64
    coop_min_programs: int = 4 * 132
    #: ptxas' register cap (``maxnreg``; 0: none) of LayerNorm's rows kernel on large grids
    #: (where its weight and bias load late) and of the coop kernel. Compiled for sm_90 (32
    #: elements a thread): bf16 LayerNorm of 7168 at 8 warps takes 63 registers two-pass
    #: (4 programs an SM), 71 shifted and 73 chan (3 programs), 64 under a cap of 64 with no
    #: spill; fp32 of 3584 at 4 warps 72 two-pass (7 programs), 64 capped (8), no spill. The
    #: coop kernel: 64 (bf16) and 80 (fp32) at 8 warps, 64 capped, no spill.
    ln_maxnreg: int = 0
    coop_maxnreg: int = 64
    #: Large grids (>= programs_per_sm per SM) may take the looped kernel instead of holding
    #: rows in registers: chunks of at most ``reread_block`` elements at ``reread_warps``,
    #: the statistics pass loading with ``evict_last`` so that the normalising pass re-reads
    #: the row from L2. 0: off. Few registers a thread, so many programs an SM.
    reread_block: int = 0
    reread_warps: int = 16
    #: ... and, for RMSNorm without a residual, of inputs of at least
    #: ``rms_reread_min_in_bytes`` bytes an element and rows of ``next_power_of_2(N) <=
    #: rms_reread_max_block``, chunks of ``rms_reread_block`` (0: off).
    rms_reread_block: int = 2048
    rms_reread_min_in_bytes: int = 4
    rms_reread_max_block: int = 8192
    #: ... and of narrower inputs (16-bit), rows of ``rms_reread_narrow_min_block <=
    #: next_power_of_2(N) <= rms_reread_max_block``, chunks of ``rms_reread_narrow_block``
    #: (0: off).
    rms_reread_narrow_block: int = 4096
    rms_reread_narrow_min_block: int = 8192
    #: RMSNorm without a residual: ``per_thread_large`` for it.
    rms_per_thread_large: int = 16
    #: The stream kernel: a persistent grid of ``stream_programs_per_sm`` programs an SM,
    #: each row read twice in chunks of ``stream_chunk_bytes`` at ``stream_warps`` (the
    #: second read from L2), the next row's loads in flight through the statistics. It
    #: takes rows longer than the register block, and rows of ``next_power_of_2(N) >=
    #: stream_min_block`` (0: none) of inputs of at most ``stream_max_in_bytes`` bytes an
    #: element on grids of at least one row per SM; not the fused residual add.
    stream_min_block: int = 32768
    stream_max_in_bytes: int = 2
    stream_chunk_bytes: int = 32 * 1024
    stream_warps: int = 32
    stream_programs_per_sm: int = 1
    #: The packed kernel: bfloat16 rows held in registers as 32-bit words, two elements a
    #: register (converted to float32 where used, once for the statistics and once for the
    #: output), half the registers of the register kernel's float32 row, so that a program
    #: holds its current row and the next one, loaded while it reduces and writes the
    #: current. Rows of ``next_power_of_2(N) >= packed_min_block`` (0: never) up to the
    #: register block, on grids of at least ``packed_min_rows`` rows, at
    #: ``packed_per_thread`` elements a thread; LayerNorm and RMSNorm without a residual,
    #: rows of even length whose elements are contiguous and 4-byte aligned.
    packed_min_block: int = 0
    packed_per_thread: int = 32
    packed_min_rows: int = 132
    #: ... on a persistent grid of this many programs an SM (at most a program a row), each
    #: loading its next row while it reduces and writes the current one.
    packed_programs_per_sm: int = 1
    #: ... packing each pair of outputs into a word with one conversion (PTX's
    #: ``cvt.rn.bf16x2.f32``, CUDA devices of compute capability 8.0 or later; the same
    #: rounding) instead of two conversions, masks and shifts.
    packed_cvt: bool = False
    #: The rows kernel on rows of at least ``rows_stagger_min_block`` elements: the programs
    #: of its first wave (one an SM) start in ``rows_stagger_steps`` steps of
    #: ``rows_stagger`` of a row (its bytes read and written at an SM's share of the copy
    #: rate, :mod:`opspec.kernels.stagger`), where the grid has at least
    #: ``rows_stagger_min_waves`` programs an SM (0 or 1 steps: all at once).
    rows_stagger_steps: int = 0
    rows_stagger: float = 0.0
    rows_stagger_min_block: int = 32768
    rows_stagger_min_waves: int = 8
    #: The rows kernel's cache policy for the rows it loads: ``""`` (none) or
    #: ``"evict_first"``.
    row_load_policy: str = ""
    #: The cache modifier of the rows kernel's row loads ("" or ".cg": past L1, which then
    #: keeps more of the weight and bias the program reads after the statistics), for
    #: rows held in registers of at least ``row_cache_min_block`` elements.
    row_cache: str = ""
    row_cache_min_block: int = 32768
    #: Where the rows kernel takes ``row_cache`` and loads the weight and bias late: the
    #: L1 bytes their leading columns may keep (0: no bound). The largest power of two of
    #: columns whose weight and bias fit is read through L1, the rest past it (``.cg``), so
    #: that L1 keeps the same leading part for every program of the SM instead of cycling
    #: through more than it holds. Rows whose parameters fit take all through L1.
    affine_l1_bytes: int = 0
    #: The rows kernel holds a row whose length is not a power of two as two tiles, the
    #: largest power of two below ``N`` and a power-of-two remainder (4544 = 4096 + 512,
    #: not 8192 with 3648 masked), where the two hold fewer elements than one tile of
    #: ``next_power_of_2(N)``: fewer registers a row (sm_90 build under Triton 3.6, bf16
    #: LayerNorm of 4544 at 8 warps: 64 -> 48), so more rows in flight an SM. RMSNorm, the
    #: fused add and two-pass LayerNorm statistics only. Off: slower on every row it
    #: changed (see the notes below TUNING).
    split_rows: bool = False


#: Why these values (the table as measured before the variants; the variants are off until an
#: H200 sweep shows them ahead):
#: * ln_stats "twopass": LayerNorm dsv3-prefill ran at 3.64 TB/s against RMSNorm's 3.88 with
#:   the same kernel and launch; the difference is the second reduction (a shared-memory
#:   round trip and barrier more, in sequence). "shifted" keeps one reduction of a pair
#:   (for Triton still two shared-memory round trips, but back to back: no elementwise pass
#:   between them) for one scalar load a row and a compare; "chan" the same for a fast
#:   division (``div.full``) a 16-byte group and a merge. Compiled for sm_90 (bf16 LayerNorm
#:   of 7168, 8 warps) the kernel has 544 SASS instructions two-pass, 808 shifted (the
#:   fallback's code included, not run), 848 chan (17 MUFU). Both are exact enough (see
#:   shift_limit; Chan's merge is as accurate as two-pass) and tested; the sweep decides.
#: * rows: 32 elements a thread on large grids, tiles of 4096 (see norm_config).
#: * coop off: the 32k-element rows (LayerNorm [2, 16384]) run one program of 32 warps a
#:   row, one per SM, at 2.84 (bf16) / 3.39 (fp32) TB/s: HBM idles while each row is
#:   reduced and stored. Chunks of 8192 at 8 warps (32 a thread) give 4 programs per SM
#:   that overlap one another's reductions; softmax's coop ran fp32 vocabulary rows at 3.26
#:   TB/s against looped 2.67 (lost on bf16 ones, against a looped kernel that re-read from
#:   L2). Unmeasured here: the sweep times chunks of 4096 to 16384.
#: * ln_maxnreg 0 (no cap, today's build); coop_maxnreg 64, so that coop's 8-warp chunks
#:   keep 4 programs an SM in fp32 too (80 registers uncapped: 3). The one-reduction
#:   statistics need the cap of 64 to keep two-pass's programs per SM (see ln_maxnreg):
#:   switch ln_stats and ln_maxnreg together.
#: * H200 sweep (benchmarks/norm_sweep.py, 2026-11-30), TB/s table -> best variant: every
#:   LayerNorm variant stayed within 4 % of the table, so the table is unchanged. dsv3 bf16
#:   3.58 -> 3.63 (two-pass capped at 64 registers; shifted 3.52, chan 2.26); qwen2.5 bf16
#:   3.35 -> 3.38 (capped); qwen2.5 fp32 3.64 -> 3.78 (shifted; capped 3.60); command-r
#:   3.40 -> 3.46 (16 a thread); dit-xl 3.57 (table best); 32k bf16 2.82 -> 2.84 (shifted;
#:   coop 2.31-2.46); 32k fp32 3.41 (table best; coop 2.50-3.01). The coop kernel lost on
#:   every row it was tried on: its rows wait on one another's partials. torch.compile ran
#:   these rows at 1.33-3.49 TB/s (32k fp32 3.43, command-r 3.49: ties), RMSNorm dsv3 and
#:   qwen2.5 fp32 at 3.90 against the table's 3.68 and 3.63.
#: * reread off: Inductor's kernels for those RMSNorm rows loop over the row twice (chunks
#:   of 2048-8192 at 16 warps, the second pass from L2). Timed in a second sweep, that
#:   layout ran RMSNorm qwen2.5 fp32 at 3.91 TB/s against 3.70, but RMSNorm dsv3 bf16 at
#:   3.44 against 3.68 and every LayerNorm row at 0.59-2.61 TB/s (its first pass is a
#:   Welford update an element). A second run of the first sweep's variants: dsv3 3.59 ->
#:   3.64, command-r 3.28 -> 3.41 (both capped at 64 registers; command-r was 3.40 -> 3.36
#:   capped in the first run), dit-xl 3.68 -> 3.56 capped: the cap stays off.
#: * rms_reread: RMSNorm of float32 rows re-read (chunks of 2048 at 16 warps) on large
#:   grids (H200, norm_sweep.py, 2026-12-01): qwen2.5 [8192, 3584] 3.73 -> 3.94 TB/s, no
#:   weight [8192, 4096] 3.79 -> 4.03 (torch.compile 4.06). bfloat16 rows kept registers
#:   then (70B [16384, 8192]: re-read 3.90 against 3.83, 16 a thread 3.96; dsv3 7168: the
#:   table best; kv-a [16384, 512]: re-read 0.63, 16 a thread 2.79 against 2.52), until the
#:   re-read's row length became a constant (below).
#: * rms_reread_max_block 8192: float32 RMSNorm re-read against the rows held in
#:   registers (H200, side by side, 2026-12-01, us): [8192, 4096] 67.7 / 71.0, [8192, 8192]
#:   131.5 / 141.1, [4096, 16384] 153.6 / 146.4, [2048, 32768] 195.4 / 145.7 (a copy of
#:   the same bytes: 130): longer rows in flight outgrow the L2, and the re-read goes to HBM.
#: * rms_per_thread_large 16 (bf16 RMSNorm, same day, us, 32 -> 16 a thread): 70B [16384,
#:   8192] 140.6 -> 136.0, kv-a [16384, 512] 13.3 -> 12.1, qwen3 q-norm [131072, 128] 22.0
#:   -> 20.3, qwen2.5 [8192, 3584] 33.5 -> 32.8, dsv3 [8192, 7168] 63.3 -> 63.2, Llama-3-8B
#:   [4096, 4096] 20.8 -> 20.7: none slower. LayerNorm keeps 32 (16 a thread, same day:
#:   dsv3 bf16 65.2 -> 74.7 us, dit-xl 41.6 -> 45.3, qwen2.5 bf16 34.5 -> 35.6, command-r
#:   39.6 -> 39.3, qwen2.5 fp32 64.9 -> 64.5); so does the fused add (not measured).
#: * row_load_policy "" and the looped kernel's N a compile-time constant (H200,
#:   benchmarks/norm_sweep.py and a side-by-side probe, clean L2 flush, 2026-12-01, us).
#:   torch.compile ran the bf16 RMSNorm rows [16384, 8192] and [8192, 7168] at 125.0 and
#:   56.2 against the table's 132.8 and 60.2. Its kernel re-reads the row (one chunk of
#:   8192, or chunks of 2048, at 16 warps) with the row length a constant. The same layout
#:   with a run-time length ran 149.5 and 70.7; with a constant 125.1 and 56.2. The rows
#:   kernel without evict_first on its row loads: 129.7-130.7 against 133.5-137.5 (8 or 16
#:   warps), float32 [8192, 3584] 54.5 against 57.8. In the sweep that followed, the table
#:   with both changes against the re-read (now with a constant N): bf16 RMSNorm [16384,
#:   8192] 129.3 / 124.7 (chunks of 4096 at 16 warps; 2048 124.9, 8192 125.0), [8192, 7168]
#:   60.1 / 55.8 (torch.compile 55.8), [8192, 3584] 29.8 / 29.0 (8 warps), [4096, 4096]
#:   18.2 / 18.5: so 16-bit rows of 4097-8192 elements are re-read (rms_reread_narrow_*).
#:   LayerNorm's rows kernel without the hint: [16384, 8192] 136.1 -> 130.3, qwen2.5 fp32
#:   59.3 -> 57.5, the others within 2 % (the bench's figures before, the sweep's after).
#: * stream_max_in_bytes 2: the stream kernel on float32 rows of 32768 (H200, side by side,
#:   2026-12-01, us, table / stream in 32 KiB chunks at 32 warps / the best other stream
#:   shape): LayerNorm 146.5 / 161.0 / 161.1 (64 or 16 KiB chunks, or 16 warps two
#:   programs an SM: 162-166), RMSNorm 136.0 / 145.8 / 142.9 (16 warps, two an SM): float32
#:   rows stay in registers.
#: * stream: LayerNorm of [2048, 32768] bf16 held one row per SM in registers (32 warps,
#:   64 registers) ran at 2.82 TB/s; ncu: 57 % of DRAM peak, 32 of 64 warps, the row's
#:   loads idle while it is reduced and written. The stream kernel, side by side on the
#:   H200 (benchmarks/row_probe.py): 32 KiB chunks at 32 warps, one program per SM, 95.0
#:   -> 86.6 us (3.10 TB/s); 16 KiB chunks 99-101 us; two programs of 16 warps 87.1-88.5;
#:   64 KiB chunks 94.4 (spills); a looped variant, one row a program in 4 KiB chunks (not
#:   kept), 89.9. Float32 rows of 32768 stay in registers (3.39 TB/s; stream 3.27 at
#:   best); so do shorter rows (dsv3 7168: registers 3.60, stream 3.03 at best). The looped
#:   kernel ran 32768 rows at 2.34-2.38 TB/s, so longer rows take stream at any width.
#:   ncu on stream (bf16, 32k): 71 % issue-active, 60 % of DRAM peak; unmasked whole
#:   chunks (EVEN, 896 -> 776 SASS instructions) 86.5 -> 85.3 us (3.15 TB/s); loading
#:   pass 2's next chunk (x, w, b) ahead (a variant, not kept) 86.8 -> 91.2 (64 registers).
#: * packed (bfloat16 rows of 16385 to 32768 elements on grids of 132 rows or more): the
#:   row held once as 32-bit words, each program loading its next row while it reduces and
#:   writes the current one. H200 (norm_sweep.py, 2026-12-01, two runs), LayerNorm of
#:   [2048, 32768] bf16 against the stream kernel's 85.4-85.8 us: 32 a thread (32 warps,
#:   64 registers, no spill in the sm_90 build) on 2 programs an SM 77.9 us (3.45 TB/s), on
#:   1 an SM 80.0-80.1; 64 a thread (16 warps, 103 registers: one program resident an SM)
#:   77.7-78.1 and 80.0. Without the next row in flight (one row a program) it lost: 89.8
#:   us at 32 warps, 98.9 at 16 warps x 2 programs (the programs of an SM load, reduce and
#:   write in step). On shorter rows it lost to the register kernel (8192 to 4544
#:   elements, LayerNorm and RMSNorm: 1-32 % slower, best on falcon's 4544 at 64 a thread,
#:   one row a program, 29.8 against 31.2 us in one run and behind in the other).
#:   Sums that mask no word where the row fills the four parts exactly (830 -> 781 SASS
#:   instructions in the loop of the [2048, 32768] LayerNorm build) ran 71.38 against
#:   71.62 us (H200, row_probe.py, 2026-12-01, side by side; a second run of both was
#:   disturbed): within noise, not kept.
#: * split_rows off (H200, `opspec bench`, 2026-12-01, us, one tile -> two): LayerNorm of
#:   Falcon-7B's [4096, 4544] bf16 27.9 -> 30.6 (4096 + 512), DiT-XL's [32768, 1152] bf16
#:   37.5 -> 42.9 (1024 + 128, two rows a tile), RMSNorm of DeepSeek-V3's q-a [16384, 1536]
#:   bf16 25.3 -> 29.1 (1024 + 512). Each tile's sums are a cross-warp reduction of their
#:   own (LayerNorm: four in place of two), and the registers saved did not pay for them.
#: * Not kept (H200, benchmarks/row_probe.py, 2026-12-02, us): the rows kernel prefetching
#:   into L2 (prefetch.global.L2, a 128-byte line a thread) the rows of the program 66 to
#:   528 programs on, so that HBM streams while the resident programs reduce and write.
#:   LayerNorm [2048, 32768] float32 147.9 against 156.2 (66 ahead) and 178.6-187.1
#:   (132-528); [4096, 32768] 281.4 / 293.4-373.1; [8192, 3584] float32 57.6 / 59.1-59.5;
#:   [8192, 7168] bf16 61.1 / 65.2-65.7.
#: * rows_stagger: the rows kernel's first wave started in steps, as the looped softmax's
#:   programs are (one program an SM, each reading its row, reducing, then writing it, in
#:   step with the others; H200, 2026-12-02, side by side, us, steps x fraction of a row:
#:   none / 2 x 1/4 / 2 x 1/2 / 4 x 1/8 / 4 x 1/4 / 8 x 1/8): LayerNorm [2048, 32768]
#:   float32 147.6 / 147.3 / 149.6 / 145.0 / 144.1 / 144.7, [4096, 32768] 281.8 / 282.6 /
#:   283.7 / 280.0 / 279.8 / 280.5, RMSNorm [2048, 32768] float32 138.7 / 137.2 / 138.4 /
#:   136.0 / 137.3 / 137.3. A 2 % gain where the softmax's was 8 %: later programs start
#:   as earlier ones end, so the offsets of the first wave fade. The bench row moved 146.6
#:   -> 144.2 us (benchmarks/row_probe.py, its rows-stagger variants). The same start on
#:   the packed and stream kernels gained nothing (see opspec.kernels.stagger).
#: * row_cache ".cg" from rows of 32768 (H200, side by side, 2026-12-04, us): LayerNorm of
#:   [2048, 32768] float32 runs at a copy's rate without its weight and bias (129.2, a copy
#:   of the bytes 126.6) and 144.4 with them: each program, one an SM, waits on 256 KiB of
#:   weight and bias from L2 after its statistics. Row loads past L1: 144.4 -> 142.2 and
#:   145.0 -> 141.8 (two runs); RMSNorm of the same shape 134.5 / 134.9 (its weight alone,
#:   within noise). Not kept there: the weight and bias loaded before the statistics
#:   (380 us: spills at 64 registers) and 16 warps a program (two an SM, 64 a thread:
#:   150.7-154.3). The packed kernel's row loads past L1 (bf16 [2048, 32768], same day)
#:   lost: LayerNorm 72.18 / 71.79 -> 73.42 / 73.30, RMSNorm 67.14 / 67.15.
#: * affine_l1_bytes 128 KiB (H200, side by side, 2026-12-04, us, three runs). With the row
#:   loads past L1, the weight and bias (256 KiB of float32 at 32768 columns) still cycle
#:   through an L1 that holds less, so each program finds none of them there. Reading the
#:   first 16384 columns of both through L1 and the rest past it: LayerNorm [2048, 32768]
#:   float32 142.0 -> 137.2, 141.7 -> 137.7, 142.5 -> 138.5 (a copy of the bytes 126-127).
#:   Other splits: 8192 146.0, 12288 141.6, 20480 139.5, 24576 140.4, 28672 142.8; 14336
#:   and 18432 (not whole 4096-column layout repetitions) 151-152. RMSNorm's 128 KiB
#:   weight: 16384 or 24576 through L1 within 0.3 % of all of it (136.4-136.8). The
#:   driver's default already gives this kernel L1's largest share: a carveout preference
#:   of 0 % shared memory timed the same, 25 % 181.7. Not kept either: the packed kernel's
#:   weight and bias of its first 2 or 3 parts (of 4) through L1, the rest past it, with
#:   the row loads through L1 or past it (bf16 [2048, 32768], three runs: 72.2-72.6 all
#:   through L1, 72.3-73.0 three parts, 74.8-74.9 two). Nor the packed LayerNorm's shift
#:   (each row's first element) loaded with the next row's words and carried, where it is
#:   loaded when the row is reduced (same day, four runs of each side by side): 71.9-72.4
#:   against 72.6-73.2.
#: * packed_cvt (H200, side by side, 2026-12-04, us, four runs of each, the outputs bit for
#:   bit the same). The packed kernel's loop spent two conversions, two masks or shifts and
#:   an or on each output word; one ``cvt.rn.bf16x2.f32`` packs it (sm_90 build: the loop
#:   830 -> 766 SASS instructions, 32 F2F -> 16 F2F + 16 F2FP). LayerNorm [2048, 32768]
#:   bf16 72.0-72.6 -> 70.8-71.1, [4096, 32766] 141.1 -> 140.0, RMSNorm [2048, 32768]
#:   67.2-67.4 -> 66.9.
TUNING = NormTuning(ln_stats="twopass", shift_limit=16.0, min_tile=4096, programs_per_sm=4,
                    per_thread_large=32, per_thread_mid=16, per_thread_small=8,
                    coop_min_block=0, coop_block=8192, coop_warps=8,
                    packed_min_block=32768, packed_per_thread=32, packed_programs_per_sm=2,
                    packed_cvt=True,
                    rows_stagger_steps=4, rows_stagger=0.125, row_cache=".cg",
                    affine_l1_bytes=128 * 1024)
_STATS = {"twopass": 0, "shifted": 1, "chan": 2}
#: Polls of a row's arrival count before a coop program reads the row itself (see the kernel).
_COOP_SPIN = 1 << 16
#: Elements a step of the coop kernel's fallback reads.
_COOP_FB = 1024


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
def _add_pair(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """Chan's merge of two (mean, sum of squared deviations, count) partials."""
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _chan_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """:func:`_welford_combine` with the fast division (``div.full``, 2 ulp): it only weighs
    the two means, and the IEEE one costs a dozen instructions a merge."""
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n > 0, tl.fdiv(n_b, tl.maximum(n, 1.0), ieee_rounding=False), 0.0)
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _ln_stats(x, mask, shift, n, STATS: tl.constexpr, SHIFT_LIMIT: tl.constexpr,
              GROUP: tl.constexpr):
    """``(mean, M2)`` of each row of the float32 tile ``x`` ``[R, B]`` (masked lanes hold 0):
    the mean and the sum of squared deviations of its ``n`` valid elements.

    * ``STATS == 0``: the mean, then the centred sum of squares (two reductions in turn).
    * ``STATS == 1``: one reduction of the pair (sum, sum of squares) of ``x - shift`` (a
      value of each row); ``M2 = S2 - S1**2 / n``. That subtraction loses
      ``(mean - shift)**2 / var`` times float32's precision, so a tile holding a row whose
      shift is more than ``sqrt(SHIFT_LIMIT)`` standard deviations from its mean (or whose
      variance vanished in the subtraction) takes the two reductions of ``STATS == 0``.
    * ``STATS == 2``: each thread's ``GROUP`` contiguous elements (one 16-byte vector) give an
      exact (mean, M2, count) in registers, and one reduction merges the groups by Chan's
      formula (as accurate as two passes, for a division per merge).
    """
    if STATS == 1:
        d = tl.where(mask, x - shift[:, None], 0.0)
        s1, s2 = tl.reduce((d, d * d), 1, _add_pair)
        md = s1 / n
        m2 = tl.maximum(s2 - s1 * md, 0.0)
        mean = shift + md
        # (mean - shift)**2 > SHIFT_LIMIT * var, written without a division
        far = md * md * n > SHIFT_LIMIT * m2
        if tl.max(far.to(tl.int32), axis=0) > 0:
            mean = tl.sum(x, axis=1) / n
            xc = tl.where(mask, x - mean[:, None], 0.0)
            m2 = tl.sum(xc * xc, axis=1)
    elif STATS == 2:
        xg = tl.reshape(x, [x.shape[0], x.shape[1] // GROUP, GROUP])
        mg = tl.reshape(mask, [x.shape[0], x.shape[1] // GROUP, GROUP])
        cnt = tl.sum(mg.to(tl.float32), axis=2)
        mean_g = tl.fdiv(tl.sum(xg, axis=2), tl.maximum(cnt, 1.0), ieee_rounding=False)
        dg = tl.where(mg, xg - mean_g[:, :, None], 0.0)
        m2_g = tl.sum(dg * dg, axis=2)
        mean, m2, _ = tl.reduce((mean_g, m2_g, cnt), 1, _chan_combine)
    else:
        mean = tl.sum(x, axis=1) / n
        xc = tl.where(mask, x - mean[:, None], 0.0)
        m2 = tl.sum(xc * xc, axis=1)
    return mean, m2


@triton.jit
def _norm_fwd_rows_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr,
    M, N, eps,
    stride_xm, stride_xn, stride_rm, stride_rn, stride_ym, stride_yn, stride_w, stride_b,
    ROWS: tl.constexpr, TILES: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, USE_INT64: tl.constexpr,
    LATE_AFFINE: tl.constexpr, STATS: tl.constexpr = 0, SHIFT_LIMIT: tl.constexpr = 16.0,
    GROUP: tl.constexpr = 8, ROW_POLICY: tl.constexpr = "", BLOCK_N2: tl.constexpr = 0,
    ROW_CACHE: tl.constexpr = "", AFFINE_L1: tl.constexpr = 0,
    delay=0, STAGGER_STEPS: tl.constexpr = 0, first=0, ALIGN: tl.constexpr = 1,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """``TILES`` tiles of ``ROWS`` whole rows per program, one after the other, each row held
    in registers (``BLOCK_N >= N``, or with ``BLOCK_N2 > 0`` as two tiles: columns [0,
    BLOCK_N) and [BLOCK_N, BLOCK_N + BLOCK_N2), masked past N; see ``norm_config``). The
    weight and bias are loaded once per program, before the rows so that their latency
    overlaps the row loads; or, with ``LATE_AFFINE``, once per tile after its statistics,
    which keeps fewer registers live while the rows load (more programs per SM, for an L2
    round trip per tile). ``STATS`` picks how LayerNorm's statistics are reduced (see
    :class:`NormTuning`; two tiles take the two-pass form only); ``GROUP`` is the elements
    of a 16-byte vector (``STATS == 2``); ``ROW_POLICY`` the cache policy of the row loads
    (``NormTuning.row_load_policy``). ``ALIGN``: a power of two the host checked to divide
    ``N`` and the row strides (:func:`opspec.kernels.tiling.row_multiple`). The programs
    below ``first`` start in ``STAGGER_STEPS`` steps of ``delay`` cycles
    (:mod:`opspec.kernels.stagger`)."""
    overlap_start(PDL)
    stagger_start(delay, STAGGER_STEPS, first)
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        stride_xm = as_multiple(stride_xm, ALIGN)
        stride_rm = as_multiple(stride_rm, ALIGN)
        stride_ym = as_multiple(stride_ym, ALIGN)
    tl.static_assert(BLOCK_N2 == 0 or IS_RMS or STATS == 0,
                     "a row in two tiles takes LayerNorm's two-pass statistics only")
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    if USE_INT64:
        cols = cols.to(tl.int64)
    col_mask = cols < N
    if BLOCK_N2 > 0:
        cols2 = BLOCK_N + tl.arange(0, BLOCK_N2)
        if USE_INT64:
            cols2 = cols2.to(tl.int64)
        col_mask2 = cols2 < N

    if HAS_WEIGHT and not LATE_AFFINE:
        w = _vector_part(w_ptr, cols, stride_w, col_mask)
        if BLOCK_N2 > 0:
            w2 = _vector_part(w_ptr, cols2, stride_w, col_mask2)
    if HAS_BIAS and not LATE_AFFINE:
        b = _vector_part(b_ptr, cols, stride_b, col_mask)
        if BLOCK_N2 > 0:
            b2 = _vector_part(b_ptr, cols2, stride_b, col_mask2)

    for t in tl.static_range(TILES):
        rows = (pid * TILES + t) * ROWS + tl.arange(0, ROWS)
        if USE_INT64:
            rows = rows.to(tl.int64)
        mask = (rows < M)[:, None] & col_mask[None, :]
        x = _row_part(x_ptr, rows, cols, stride_xm, stride_xn, mask, ROW_POLICY, ROW_CACHE)
        if BLOCK_N2 > 0:
            mask2 = (rows < M)[:, None] & col_mask2[None, :]
            x2 = _row_part(x_ptr, rows, cols2, stride_xm, stride_xn, mask2, ROW_POLICY,
                           ROW_CACHE)
        if HAS_RESIDUAL:
            # residual += input, rounded to the stored dtype; the norm is of the stored value.
            x = _add_residual(x, r_ptr, rows, cols, stride_rm, stride_rn, mask, ROW_POLICY)
            if BLOCK_N2 > 0:
                x2 = _add_residual(x2, r_ptr, rows, cols2, stride_rm, stride_rn, mask2,
                                   ROW_POLICY)

        if IS_RMS:
            ss = tl.sum(x * x, axis=1)
            if BLOCK_N2 > 0:
                ss += tl.sum(x2 * x2, axis=1)
            rstd = tl.rsqrt(ss / N + eps)
            y = x * rstd[:, None]
            if BLOCK_N2 > 0:
                y2 = x2 * rstd[:, None]
        elif BLOCK_N2 > 0:
            # the mean, then the centred sum of squares, each summed over both tiles
            mean = (tl.sum(x, axis=1) + tl.sum(x2, axis=1)) / N
            xc = tl.where(mask, x - mean[:, None], 0.0)
            xc2 = tl.where(mask2, x2 - mean[:, None], 0.0)
            rstd = tl.rsqrt((tl.sum(xc * xc, axis=1) + tl.sum(xc2 * xc2, axis=1)) / N + eps)
            y = xc * rstd[:, None]
            y2 = xc2 * rstd[:, None]
        else:
            if STATS == 1:
                # the shift: each row's first element (column offset 0)
                shift = tl.load(x_ptr + rows * stride_xm, mask=rows < M,
                                other=0.0).to(tl.float32)
            else:
                shift = tl.zeros([ROWS], dtype=tl.float32)
            mean, m2 = _ln_stats(x, mask, shift, N, STATS, SHIFT_LIMIT, GROUP)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            rstd = tl.rsqrt(m2 / N + eps)
            y = xc * rstd[:, None]
        if HAS_WEIGHT:
            if LATE_AFFINE:
                w = _vector_part(w_ptr, cols, stride_w, col_mask, AFFINE_L1)
            y = y * w[None, :]
            if BLOCK_N2 > 0:
                if LATE_AFFINE:
                    w2 = _vector_part(w_ptr, cols2, stride_w, col_mask2)
                y2 = y2 * w2[None, :]
        if HAS_BIAS:
            if LATE_AFFINE:
                b = _vector_part(b_ptr, cols, stride_b, col_mask, AFFINE_L1)
            y = y + b[None, :]
            if BLOCK_N2 > 0:
                if LATE_AFFINE:
                    b2 = _vector_part(b_ptr, cols2, stride_b, col_mask2)
                y2 = y2 + b2[None, :]
        y_offs = rows[:, None] * stride_ym + cols[None, :] * stride_yn
        tl.store(y_ptr + y_offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        if BLOCK_N2 > 0:
            y_offs2 = rows[:, None] * stride_ym + cols2[None, :] * stride_yn
            tl.store(y_ptr + y_offs2, y2.to(y_ptr.dtype.element_ty), mask=mask2)


@triton.jit
def _vector_part(ptr, cols, stride, mask, L1_ELEMS: tl.constexpr = 0):
    """The weight's or bias's elements at ``cols``, in float32 (kept in L2: every program
    reads them). With ``L1_ELEMS > 0`` only the columns below it are read through L1, the
    rest past it (``.cg``), so that the part L1 can hold stays there for the next program
    on the SM."""
    if L1_ELEMS > 0:
        lo = tl.load(ptr + cols * stride, mask=mask & (cols < L1_ELEMS), other=0.0,
                     eviction_policy="evict_last")
        hi = tl.load(ptr + cols * stride, mask=mask & (cols >= L1_ELEMS), other=0.0,
                     cache_modifier=".cg")
        return tl.where(cols < L1_ELEMS, lo, hi).to(tl.float32)
    return tl.load(ptr + cols * stride, mask=mask, other=0.0,
                   eviction_policy="evict_last").to(tl.float32)


@triton.jit
def _row_part(ptr, rows, cols, stride_m, stride_n, mask, policy: tl.constexpr,
              cache: tl.constexpr = ""):
    """The ``[rows, cols]`` tile of a row-major view, in float32, 0 where masked."""
    x = tl.load(ptr + rows[:, None] * stride_m + cols[None, :] * stride_n, mask=mask,
                other=0.0, eviction_policy=policy, cache_modifier=cache)
    return x.to(tl.float32)


@triton.jit
def _add_residual(x, r_ptr, rows, cols, stride_m, stride_n, mask, policy: tl.constexpr):
    """``residual += x`` on one tile, stored rounded to the residual's dtype; returns the
    stored sum in float32."""
    r_offs = rows[:, None] * stride_m + cols[None, :] * stride_n
    r = tl.load(r_ptr + r_offs, mask=mask, other=0.0, eviction_policy=policy)
    s = (x + r.to(tl.float32)).to(r_ptr.dtype.element_ty)
    tl.store(r_ptr + r_offs, s, mask=mask)
    return s.to(tl.float32)


@triton.jit
def _norm_fwd_looped_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr,
    N: tl.constexpr, eps,
    stride_xm, stride_xn, stride_rm, stride_rn, stride_ym, stride_yn, stride_w, stride_b,
    BLOCK: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, USE_INT64: tl.constexpr,
    ALIGN: tl.constexpr = 1,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """One row per program, walked in ``BLOCK`` chunks (rows too long for registers, or
    re-read on large grids): one pass for the statistics, one to normalise and write.
    ``N`` is a compile-time constant, as in Inductor's kernels: the chunk loops then have a
    known trip count, so the compiler unrolls them and issues a pass's loads together
    instead of one chunk's at a time, and full chunks drop their masks (H200, RMSNorm
    bfloat16 [16384, 8192] in one 8192 chunk at 16 warps: 149.5 us with ``N`` a run-time
    value, 125.1 as a constant). ``ALIGN`` divides the row strides (see the rows kernel)."""
    overlap_start(PDL)
    if ALIGN > 1:
        stride_xm = as_multiple(stride_xm, ALIGN)
        stride_rm = as_multiple(stride_rm, ALIGN)
        stride_ym = as_multiple(stride_ym, ALIGN)
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
        if HAS_RESIDUAL:  # x is read once; the residual written here is re-read below
            x = tl.load(x_row + cols * stride_xn, mask=m, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            r = tl.load(r_row + cols * stride_rn, mask=m, other=0.0).to(tl.float32)
            s = (x + r).to(r_ptr.dtype.element_ty)
            tl.store(r_row + cols * stride_rn, s, mask=m)
            x = s.to(tl.float32)
        else:  # kept in L2 for pass 2's re-read
            x = tl.load(x_row + cols * stride_xn, mask=m, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
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
            y = y * tl.load(w_ptr + cols * stride_w, mask=m, other=0.0,
                            eviction_policy="evict_last").to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + cols * stride_b, mask=m, other=0.0,
                            eviction_policy="evict_last").to(tl.float32)
        tl.store(y_row + cols * stride_yn, y.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _norm_fwd_coop_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
    M, N, C, spin, eps,
    stride_xm, stride_xn, stride_ym, stride_yn, stride_w, stride_b,
    BLOCK: tl.constexpr, FB: tl.constexpr, C_POW2: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    USE_INT64: tl.constexpr, STATS: tl.constexpr, SHIFT_LIMIT: tl.constexpr,
    GROUP: tl.constexpr, ALIGN: tl.constexpr = 1,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """A row cut into ``C`` chunks of ``BLOCK`` elements, one program a chunk, the row's ``C``
    programs cooperating: each holds its chunk in registers, publishes the chunk's partial
    statistics (RMSNorm: its sum of squares; LayerNorm: its mean and sum of squared
    deviations), waits until the row's ``C`` partials are in, merges them and writes its
    chunk from registers. One read and one write of HBM, several programs per SM.

    Chunks are handed out in arrival order (a ticket from an atomic counter, ``cnt_ptr[0]``),
    not by program id: every smaller ticket belongs to a program that has started, so only
    the row of the newest ticket can wait on programs not yet resident, and those start as
    soon as any other program finishes (no deadlock while ``C`` programs fit on the GPU). A
    program still waiting after ``spin`` polls computes the row's statistics itself from
    global memory (slow, correct: nothing here writes the input). Triton's interpreter runs
    programs one after another; with ``spin == 0`` every chunk but a row's last takes that
    path, so both are tested on the CPU. ``ALIGN`` divides ``N`` and the row strides (see
    the rows kernel)."""
    overlap_start(PDL)
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        stride_xm = as_multiple(stride_xm, ALIGN)
        stride_ym = as_multiple(stride_ym, ALIGN)
    ticket = tl.atomic_add(cnt_ptr, 1)
    row = ticket // C
    c = ticket - row * C
    offs = tl.arange(0, BLOCK)
    k = tl.arange(0, C_POW2)
    if USE_INT64:
        row = row.to(tl.int64)
        c = c.to(tl.int64)
        offs = offs.to(tl.int64)
    slot = row * C + c
    x_row = x_ptr + row * stride_xm
    start = c * BLOCK
    # The chunk as a [1, BLOCK] tile, the rows kernel's shape (its statistics code as is).
    cols = start + offs[None, :]
    cmask = cols < N
    x = tl.load(x_row + cols * stride_xn, mask=cmask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    if IS_RMS:
        p1 = tl.sum(tl.sum(x * x, axis=1), axis=0)
        p2 = 0.0
    else:
        n_c = tl.minimum(N - start, BLOCK).to(tl.float32)
        if STATS == 1:
            shift = tl.load(x_row + (start + tl.arange(0, 1)) * stride_xn).to(tl.float32)
        else:
            shift = tl.zeros([1], dtype=tl.float32)
        mean_c, m2_c = _ln_stats(x, cmask, shift, n_c, STATS, SHIFT_LIMIT, GROUP)
        p1 = tl.sum(mean_c, axis=0)
        p2 = tl.sum(m2_c, axis=0)
    tl.store(ws_ptr + slot, p1)
    if not IS_RMS:
        tl.store(ws_ptr + M * C + slot, p2)
    done = arrive_and_wait(cnt_ptr + 1 + row, C, spin)
    if done >= C:
        # volatile: bypass L1, which may hold an older copy of the workspace line.
        km = k < C
        pm = tl.load(ws_ptr + row * C + k, mask=km, other=0.0, volatile=True)
        if IS_RMS:
            var = tl.sum(pm, axis=0) / N
        else:
            pq = tl.load(ws_ptr + M * C + row * C + k, mask=km, other=0.0, volatile=True)
            nk = tl.minimum(tl.maximum(N - k * BLOCK, 0), BLOCK).to(tl.float32)
            # Chan's formula for C parts at once: M2 = sum M2_c + sum n_c (mean_c - mean)**2
            mean = tl.sum(nk * pm, axis=0) / N
            dm = tl.where(km, pm - mean, 0.0)
            var = (tl.sum(pq, axis=0) + tl.sum(nk * dm * dm, axis=0)) / N
    else:
        # The row from global memory in steps of FB: the sum of squares, or the mean and
        # then the centred sum of squares.
        fo = tl.arange(0, FB)
        if USE_INT64:
            fo = fo.to(tl.int64)
        acc = tl.zeros([FB], dtype=tl.float32)
        for j in range(0, tl.cdiv(N, FB)):
            jc = j * FB + fo
            xj = tl.load(x_row + jc * stride_xn, mask=jc < N, other=0.0).to(tl.float32)
            if IS_RMS:
                acc += xj * xj
            else:
                acc += xj
        if IS_RMS:
            var = tl.sum(acc, axis=0) / N
        else:
            mean = tl.sum(acc, axis=0) / N
            acc2 = tl.zeros([FB], dtype=tl.float32)
            for j in range(0, tl.cdiv(N, FB)):
                jc = j * FB + fo
                jm = jc < N
                xj = tl.load(x_row + jc * stride_xn, mask=jm, other=0.0).to(tl.float32)
                dj = tl.where(jm, xj - mean, 0.0)
                acc2 += dj * dj
            var = tl.sum(acc2, axis=0) / N
    rstd = tl.rsqrt(var + eps)
    if IS_RMS:
        y = x * rstd
    else:
        y = (x - mean) * rstd
    # The affine parameters after the statistics: fewer registers live while the chunk loads.
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols * stride_w, mask=cmask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols * stride_b, mask=cmask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols * stride_yn, y.to(y_ptr.dtype.element_ty),
             mask=cmask)


@triton.jit
def _stream_load(ptrs, cols, N, EVEN: tl.constexpr, policy: tl.constexpr):
    # A chunk of a row; EVEN (N a multiple of the chunk): every chunk is whole, no mask.
    if EVEN:
        return tl.load(ptrs, eviction_policy=policy)
    return tl.load(ptrs, mask=cols < N, other=0.0, eviction_policy=policy)


@triton.jit
def _stream_stats(s1, s2, cur, cols, N, K, IS_RMS: tl.constexpr, EVEN: tl.constexpr):
    # Adds a chunk's per-thread sums: of (x - K) and its square, or of the squares.
    d = cur.to(tl.float32) - K
    if not EVEN:
        d = tl.where(cols < N, d, 0.0)
    if not IS_RMS:
        s1 += tl.sum(d, axis=1)
    s2 += tl.sum(d * d, axis=1)
    return s1, s2


@triton.jit
def _norm_fwd_stream_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, N, eps,
    stride_xm, stride_xn, stride_ym, stride_yn, stride_w, stride_b,
    BLOCK_R: tl.constexpr, VEC: tl.constexpr, EVEN: tl.constexpr,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    USE_INT64: tl.constexpr, SHIFT_LIMIT: tl.constexpr, ALIGN: tl.constexpr = 1,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """A persistent grid (rows ``pid, pid + G, ...``), each row walked twice in chunks of
    ``BLOCK_R x VEC`` elements (``VEC`` contiguous ones a thread, one 16-byte vector).
    Pass 1 reads the row from HBM, the next chunk loaded ahead, and sums per thread: the
    squares (RMSNorm), or ``x - K`` and its square about the row's first element ``K``
    (LayerNorm: one FADD and one FFMA an element, one cross-warp reduction a row). The
    next row's first chunk and ``K`` are loaded before the statistics are reduced, so HBM
    reads go on through the reduction and pass 2, which re-reads the row from L2 (pass 1
    loads with ``evict_last``) in reverse chunk order and writes it. A LayerNorm row whose
    ``K`` lies more than ``sqrt(SHIFT_LIMIT)`` standard deviations from its mean, where
    the shifted sums lose precision, takes one more pass for the centred sum of squares
    (see :class:`NormTuning`). ``EVEN``: ``N`` is a multiple of the chunk, and no access
    but the next row's is masked (the kernel is bound by instruction issue as much as by
    HBM: a mask is two instructions an element). ``ALIGN`` divides ``N`` and the row
    strides (see the rows kernel)."""
    overlap_start(PDL)
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        stride_xm = as_multiple(stride_xm, ALIGN)
        stride_ym = as_multiple(stride_ym, ALIGN)
    BLOCK: tl.constexpr = BLOCK_R * VEC
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_R)[:, None] * VEC + tl.arange(0, VEC)[None, :]
    if USE_INT64:
        offs = offs.to(tl.int64)
    n_chunks = tl.cdiv(N, BLOCK)
    p = pid
    if USE_INT64:
        p = tl.cast(pid, tl.int64)
    # Rows past M are loaded as no columns (their K from the last row, never used).
    first = tl.load(x_ptr + p * stride_xm + offs * stride_xn,
                    mask=offs < tl.where(p < M, N, 0), other=0.0, eviction_policy="evict_last")
    k_next = tl.load(x_ptr + tl.minimum(p, M - 1) * stride_xm)
    for row in range(pid, M, G):
        r = row
        if USE_INT64:
            r = tl.cast(row, tl.int64)
        x_row = x_ptr + r * stride_xm
        y_row = y_ptr + r * stride_ym
        if IS_RMS:
            K = 0.0
        else:
            K = k_next.to(tl.float32)
        s1 = tl.zeros([BLOCK_R], dtype=tl.float32)
        s2 = tl.zeros([BLOCK_R], dtype=tl.float32)
        nxt = first
        # Every chunk but the last, the next one loaded ahead (whole: it is not the last).
        for c in range(0, n_chunks - 1):
            cur = nxt
            ncols = (c + 1) * BLOCK + offs
            nxt = _stream_load(x_row + ncols * stride_xn, ncols, N, EVEN, "evict_last")
            s1, s2 = _stream_stats(s1, s2, cur, c * BLOCK + offs, N, K, IS_RMS, EVEN)
        s1, s2 = _stream_stats(s1, s2, nxt, (n_chunks - 1) * BLOCK + offs, N, K, IS_RMS, EVEN)
        nrow = r + G
        first = tl.load(x_ptr + nrow * stride_xm + offs * stride_xn,
                        mask=offs < tl.where(nrow < M, N, 0), other=0.0,
                        eviction_policy="evict_last")
        k_next = tl.load(x_ptr + tl.minimum(nrow, M - 1) * stride_xm)
        if IS_RMS:
            mean = 0.0
            var = tl.sum(s2, axis=0) / N
        else:
            t1, t2 = tl.reduce((s1, s2), 0, _add_pair)
            md = t1 / N
            m2 = tl.maximum(t2 - t1 * md, 0.0)
            mean = K + md
            # (mean - K)**2 > SHIFT_LIMIT * var, written without a division
            if md * md * N > SHIFT_LIMIT * m2:
                acc = tl.zeros([BLOCK_R], dtype=tl.float32)
                for c in range(0, n_chunks):
                    cols = c * BLOCK + offs
                    x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0)
                    d = tl.where(cols < N, x.to(tl.float32) - mean, 0.0)
                    acc += tl.sum(d * d, axis=1)
                m2 = tl.sum(acc, axis=0)
            var = m2 / N
        rstd = tl.rsqrt(var + eps)
        for k in range(0, n_chunks):
            cols = (n_chunks - 1 - k) * BLOCK + offs
            x = _stream_load(x_row + cols * stride_xn, cols, N, EVEN, "evict_first")
            y = (x.to(tl.float32) - mean) * rstd
            if HAS_WEIGHT:
                y = y * _stream_load(w_ptr + cols * stride_w, cols, N, EVEN,
                                     "evict_last").to(tl.float32)
            if HAS_BIAS:
                y = y + _stream_load(b_ptr + cols * stride_b, cols, N, EVEN,
                                     "evict_last").to(tl.float32)
            if EVEN:
                tl.store(y_row + cols * stride_yn, y.to(y_ptr.dtype.element_ty),
                         eviction_policy="evict_first")
            else:
                tl.store(y_row + cols * stride_yn, y.to(y_ptr.dtype.element_ty), mask=cols < N,
                         eviction_policy="evict_first")


@triton.jit
def _halves(words, ALT: tl.constexpr):
    # The float32 values of the two bfloat16 elements of each int32 word (low half: the
    # element at the even index). ALT spells the conversion differently (a truncation and an
    # extension, against a shift and a mask), so that the compiler does not merge the
    # packed kernel's two conversions and keep a float32 copy of the row live.
    if ALT:
        lo = words.to(tl.int16).to(tl.bfloat16, bitcast=True).to(tl.float32)
        hi = (words >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True).to(tl.float32)
    else:
        lo = (words << 16).to(tl.float32, bitcast=True)
        hi = (words & -65536).to(tl.float32, bitcast=True)
    return lo, hi


@triton.jit
def _packed_load(x_row, cols, NW):
    # No evict_first hint: with it, LayerNorm [2048, 32768] bf16 ran 75.5 us against 72.0
    # (H200, side by side, 2026-12-01), as the rows kernel's row loads ran slower with it.
    return tl.load(x_row + cols, mask=cols < NW, other=0)


@triton.jit
def _packed_sums(words, cols, NW, K, IS_RMS: tl.constexpr):
    # Per word, the sums over its two elements of x - K and of its square (RMSNorm: K = 0,
    # the squares only).
    lo, hi = _halves(words, False)
    if IS_RMS:
        return lo, lo * lo + hi * hi
    dl = tl.where(cols < NW, lo - K, 0.0)
    dh = tl.where(cols < NW, hi - K, 0.0)
    return dl + dh, dl * dl + dh * dh


@triton.jit
def _packed_write(words, cols, NW, w_ptr, b_ptr, y_row, mean, rstd,
                  HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, CVT: tl.constexpr = False):
    # One part of the row normalised and stored; its weight and bias are loaded here, after
    # the previous part's store, so that one part's affine parameters are live at a time.
    mask = cols < NW
    lo, hi = _halves(words, True)
    y_lo = (lo - mean) * rstd
    y_hi = (hi - mean) * rstd
    # With CVT the weight and bias take the shift-and-mask spelling too (timed together).
    if HAS_WEIGHT:
        w_lo, w_hi = _halves(tl.load(w_ptr + cols, mask=mask, other=0,
                                     eviction_policy="evict_last"), not CVT)
        y_lo = y_lo * w_lo
        y_hi = y_hi * w_hi
    if HAS_BIAS:
        b_lo, b_hi = _halves(tl.load(b_ptr + cols, mask=mask, other=0,
                                     eviction_policy="evict_last"), not CVT)
        y_lo = y_lo + b_lo
        y_hi = y_hi + b_hi
    if CVT:
        packed = tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r",
                                           [y_lo, y_hi], tl.int32, True, 1)
    else:
        lo16 = y_lo.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32)
        hi16 = y_hi.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32)
        packed = (lo16 & 65535) | (hi16 << 16)
    tl.store(y_row + cols, packed, mask=mask)


@triton.jit
def _packed_row(x_row, c0, c1, c2, c3, NW):
    # A row's four parts of words (NW: the words a row, 0 for none).
    return (_packed_load(x_row, c0, NW), _packed_load(x_row, c1, NW),
            _packed_load(x_row, c2, NW), _packed_load(x_row, c3, NW))


@triton.jit
def _norm_fwd_packed_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, NW, N, eps, stride_xm, stride_ym,
    PART_W: tl.constexpr, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr, USE_INT64: tl.constexpr, SHIFT_LIMIT: tl.constexpr,
    FB: tl.constexpr, ALIGN: tl.constexpr = 1, CVT: tl.constexpr = False,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """Bfloat16 rows held in registers as ``NW = N / 2`` int32 words, two elements a word,
    in four parts of ``PART_W`` words (``x_ptr``, ``y_ptr``, ``w_ptr`` and ``b_ptr`` point
    at words; strides in words): half the registers of the register kernel's float32 row.
    A grid of ``G`` programs takes rows ``pid, pid + G, ...``, each program loading its
    next row before it reduces and writes the current one, so that HBM reads go on
    through the reductions and the stores (with ``G >= M``, one row a program). Each use
    converts the words again (see :func:`_halves`), so no float32 copy of a row stays
    live. The statistics are one reduction: RMSNorm's sum of squares, or LayerNorm's sums
    of ``x - K`` and its square about the row's first element ``K``; where those lose
    precision (``K`` more than ``sqrt(SHIFT_LIMIT)`` standard deviations from the mean)
    the centred sum of squares is taken again from a re-read of the row in ``FB``-word
    chunks, as the stream kernel does. The parts are written one after the other, each
    with its own weight and bias; with ``CVT`` each output word is packed by one
    ``cvt.rn.bf16x2.f32`` (see :attr:`NormTuning.packed_cvt`). ``ALIGN`` divides ``NW``
    and the row strides, in words (see the rows kernel)."""
    overlap_start(PDL)
    if ALIGN > 1:
        NW = as_multiple(NW, ALIGN)
        stride_xm = as_multiple(stride_xm, ALIGN)
        stride_ym = as_multiple(stride_ym, ALIGN)
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    c0 = tl.arange(0, PART_W)
    p = pid
    if USE_INT64:
        p = tl.cast(pid, tl.int64)
        c0 = c0.to(tl.int64)
    c1 = c0 + PART_W
    c2 = c1 + PART_W
    c3 = c2 + PART_W
    n0, n1, n2, n3 = _packed_row(x_ptr + p * stride_xm, c0, c1, c2, c3, NW)
    for row in range(pid, M, G):
        r = row
        if USE_INT64:
            r = tl.cast(row, tl.int64)
        x_row = x_ptr + r * stride_xm
        w0, w1, w2, w3 = n0, n1, n2, n3
        # the next row (none past M) is in flight while this one is reduced and written
        nrow = r + G
        n0, n1, n2, n3 = _packed_row(x_ptr + nrow * stride_xm, c0, c1, c2, c3,
                                     tl.where(nrow < M, NW, 0))
        K = 0.0
        if not IS_RMS:
            K = _halves(tl.load(x_row), True)[0]
        a0, q0 = _packed_sums(w0, c0, NW, K, IS_RMS)
        a1, q1 = _packed_sums(w1, c1, NW, K, IS_RMS)
        a2, q2 = _packed_sums(w2, c2, NW, K, IS_RMS)
        a3, q3 = _packed_sums(w3, c3, NW, K, IS_RMS)
        if IS_RMS:
            mean = 0.0
            rstd = tl.rsqrt(tl.sum(q0 + q1 + q2 + q3, axis=0) / N + eps)
        else:
            s1, s2 = tl.reduce((a0 + a1 + a2 + a3, q0 + q1 + q2 + q3), 0, _add_pair)
            md = s1 / N
            m2 = tl.maximum(s2 - s1 * md, 0.0)
            mean = K + md
            # (mean - K)**2 > SHIFT_LIMIT * var, written without a division
            if md * md * N > SHIFT_LIMIT * m2:
                acc = tl.zeros([FB], dtype=tl.float32)
                for c in range(0, NW, FB):
                    cols = c + tl.arange(0, FB)
                    cm = cols < NW
                    lo, hi = _halves(tl.load(x_row + cols, mask=cm, other=0), True)
                    dl = tl.where(cm, lo - mean, 0.0)
                    dh = tl.where(cm, hi - mean, 0.0)
                    acc += dl * dl + dh * dh
                m2 = tl.sum(acc, axis=0)
            rstd = tl.rsqrt(m2 / N + eps)
        y_row = y_ptr + r * stride_ym
        _packed_write(w0, c0, NW, w_ptr, b_ptr, y_row, mean, rstd, HAS_WEIGHT, HAS_BIAS,
                      CVT)
        _packed_write(w1, c1, NW, w_ptr, b_ptr, y_row, mean, rstd, HAS_WEIGHT, HAS_BIAS,
                      CVT)
        _packed_write(w2, c2, NW, w_ptr, b_ptr, y_row, mean, rstd, HAS_WEIGHT, HAS_BIAS,
                      CVT)
        _packed_write(w3, c3, NW, w_ptr, b_ptr, y_row, mean, rstd, HAS_WEIGHT, HAS_BIAS,
                      CVT)


# -- launch configuration ---------------------------------------------------------------------

class NormConfig(tuple):
    """``(looped, rows, tiles, block, num_warps, chunks, stream, packed, block2)``: the launch
    for ``[M, N]``.
    The register kernel runs ``cdiv(M, rows * tiles)`` programs, each taking ``tiles``
    tiles of ``rows`` rows in turn; the looped kernel one program per row (``rows ==
    tiles == 1``) walking it in ``block``-element chunks; ``chunks > 0`` is the coop
    kernel, ``M * chunks`` programs of one ``block``-element chunk each (``looped`` False,
    ``rows == tiles == 1``); ``stream > 0`` is the stream kernel, a persistent grid of
    ``stream`` programs walking rows in ``block``-element chunks (``looped`` True);
    ``packed > 0`` is the packed kernel, a persistent grid of ``packed`` programs taking
    bfloat16 rows of up to ``block`` elements held as 32-bit words (``rows == tiles ==
    1``); ``block2 > 0`` (register kernel only) holds each row as two tiles, ``block``
    columns and ``block2`` more (``NormTuning.split_rows``)."""

    __slots__ = ()

    def __new__(cls, looped: bool, rows: int, tiles: int, block: int, num_warps: int,
                chunks: int = 0, stream: int = 0, packed: int = 0, block2: int = 0):
        return super().__new__(cls, (looped, rows, tiles, block, num_warps, chunks, stream,
                                     packed, block2))

    looped = property(lambda self: self[0])
    rows = property(lambda self: self[1])
    tiles = property(lambda self: self[2])
    block = property(lambda self: self[3])
    num_warps = property(lambda self: self[4])
    chunks = property(lambda self: self[5])
    stream = property(lambda self: self[6])
    packed = property(lambda self: self[7])
    block2 = property(lambda self: self[8])


@functools.lru_cache(maxsize=None)
def _packs_bf16x2(device: torch.device) -> bool:
    """Whether the packed kernel can pack its outputs by ``cvt.rn.bf16x2.f32``: a CUDA device
    (not ROCm, not Triton's interpreter) of compute capability 8.0 or later."""
    return (device.type == "cuda" and not TRITON_INTERPRETED and torch.version.hip is None
            and torch.cuda.get_device_capability(device)[0] >= 8)


def _affine_l1(tun: NormTuning, block: int, w: torch.Tensor | None,
               b: torch.Tensor | None) -> int:
    """The rows kernel's ``AFFINE_L1``: the leading columns of the weight and bias read
    through L1 (:attr:`NormTuning.affine_l1_bytes`), or 0 (all of them) where the parameters
    of the whole block fit or there is no bound."""
    elem_bytes = sum(v.element_size() for v in (w, b) if v is not None)
    if not tun.affine_l1_bytes or not elem_bytes:
        return 0
    cols = tun.affine_l1_bytes // elem_bytes
    if cols < 1:
        return 0
    cols = 1 << (cols.bit_length() - 1)
    return cols if cols < block else 0


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=4096)
def norm_config(M: int, N: int, *, max_register_block: int = MAX_REGISTER_BLOCK,
                loop_block: int = _LOOP_BLOCK, tuning: NormTuning = TUNING,
                coop: bool = True, stream: bool = True, in_bytes: int = 4,
                rms: bool = False, packed: bool = True) -> NormConfig:
    """The launch for ``M`` rows of ``N`` elements of ``in_bytes`` bytes under ``tuning``
    (the element size decides only the stream kernel's rows and chunk and RMSNorm's
    re-read: the math is float32 whatever the input dtype). Memoised: a call costs a dict
    lookup. ``coop=False``, ``stream=False`` and ``packed=False`` leave those kernels out
    (calls they cannot serve; the launcher asks for the packed kernel on bfloat16 rows
    only);
    ``rms``: an RMSNorm without a residual (``tuning.rms_reread_block``,
    ``rms_reread_narrow_block`` and ``rms_per_thread_large``).

    With ``tuning.coop_min_block`` set, rows of ``next_power_of_2(N) >= coop_min_block``
    cut into at most ``coop_max_chunks`` chunks of ``coop_block``, on grids of at least
    ``coop_min_programs`` programs, take the coop kernel. With ``tuning.packed_min_block``
    set, 16-bit rows (``in_bytes == 2``) of ``packed_min_block <= next_power_of_2(N) <=
    max_register_block`` on grids of at least ``packed_min_rows`` rows take the packed
    kernel, ``packed_per_thread`` elements a thread, ``packed_programs_per_sm * 132``
    programs (at most ``M``). Then rows longer than the
    register block, and (with ``tuning.stream_min_block`` set) rows of
    ``next_power_of_2(N) >= stream_min_block`` of at most ``stream_max_in_bytes`` bytes an
    element on grids of ``M >= 132`` rows or more, take the stream kernel: chunks of
    ``stream_chunk_bytes``, ``stream_warps`` warps, ``stream_programs_per_sm * 132``
    programs (at most ``M``). Otherwise a row fits in registers when
    ``next_power_of_2(N) <= max_register_block``. Short rows are packed
    ``rows`` to a tile of up to ``min_tile`` (4096) elements, fewer while the grid would
    hold under ``programs_per_sm * 132`` programs. The warp count sets the elements each
    thread holds:

    * a large grid (``>= 4 * 132`` programs): 32 elements a thread (16 for RMSNorm, which
      measured faster so). HBM is kept busy by the rows in flight, and those are bounded by
      the registers of an SM: compiled for sm_90, a bfloat16 RMSNorm of 8192 takes 64
      registers with 8 warps (4 programs, 64 KiB of rows in flight per SM) against 37 with
      16 warps (3 programs, 48 KiB);
    * a smaller grid: 16 elements a thread, and 8 under one program per SM (decode), so
      that the few programs finish sooner;

    between 1 and 32 warps (with ``tuning.split_rows``, a row not a power of two may be two
    tiles, ``block`` and ``block2``, the warps then from their sum). A program takes one
    tile (``tiles == 1``): holding the weight
    across several tiles costs registers (64 -> 80 for two tiles of 8192 in bfloat16) and
    so rows in flight. Longer rows the stream kernel cannot take (``stream=False``) take
    the looped kernel with ``loop_block``-element chunks and 8 warps.
    """
    t = tuning
    block_n = _next_pow2(max(N, 1))
    if coop and t.coop_min_block and block_n >= t.coop_min_block:
        block = min(_next_pow2(max(1, t.coop_block)), block_n, max_register_block)
        chunks = _cdiv(N, block)
        if 1 < chunks <= t.coop_max_chunks and M * chunks >= t.coop_min_programs:
            warps = max(1, min(32, t.coop_warps * block // max(1, t.coop_block)))
            return NormConfig(False, 1, 1, block, warps, chunks)
    if (packed and t.packed_min_block and in_bytes == 2 and M >= t.packed_min_rows
            and t.packed_min_block <= block_n <= max_register_block):
        warps = max(1, min(32, block_n // (32 * max(1, t.packed_per_thread))))
        return NormConfig(False, 1, 1, block_n, warps,
                          packed=max(1, min(M, t.packed_programs_per_sm * _SMS)))
    if stream and (block_n > max_register_block
                   or t.stream_min_block and block_n >= t.stream_min_block
                   and in_bytes <= t.stream_max_in_bytes and M >= _SMS):
        block = max(1, min(block_n, t.stream_chunk_bytes // in_bytes))
        warps = max(1, min(32, t.stream_warps, block // (32 * max(1, 16 // in_bytes))))
        return NormConfig(True, 1, 1, block, warps, 0,
                          max(1, min(M, t.stream_programs_per_sm * _SMS)))
    if block_n > max_register_block:
        block = min(loop_block, block_n)
        return NormConfig(True, 1, 1, block, max(1, min(8, block // (32 * 8))))
    target = t.programs_per_sm * _SMS
    reread = t.reread_block
    if rms and block_n <= t.rms_reread_max_block:
        if in_bytes >= t.rms_reread_min_in_bytes:
            reread = t.rms_reread_block or reread
        elif t.rms_reread_narrow_block and block_n >= t.rms_reread_narrow_min_block:
            reread = t.rms_reread_narrow_block
    if reread and M >= target:
        block = min(_next_pow2(reread), block_n)
        return NormConfig(True, 1, 1, block, max(1, min(32, t.reread_warps)))
    rows = max(1, t.min_tile // block_n)
    rows = min(rows, _next_pow2(max(M, 1)))
    while rows > 1 and _cdiv(M, rows) < target:
        rows //= 2
    programs = _cdiv(M, rows)
    large = t.rms_per_thread_large if rms else t.per_thread_large
    per_thread = (large if programs >= target
                  else t.per_thread_mid if programs >= _SMS else t.per_thread_small)
    head, tail = block_n, 0
    if t.split_rows and N < block_n and (rms or t.ln_stats == "twopass"):
        half = block_n // 2
        if half + _next_pow2(N - half) < block_n:
            head, tail = half, _next_pow2(N - half)
    # a power of two of warps, at most per_thread elements a thread (the two tiles' sum
    # need not be a power of two)
    num_warps = max(1, min(32, _next_pow2(_cdiv(rows * (head + tail), 32 * per_thread))))
    return NormConfig(False, rows, 1, head, num_warps, block2=tail)


# -- launchers --------------------------------------------------------------------------------

def _as_rows(t: torch.Tensor, R: int, N: int) -> tuple[torch.Tensor, bool]:
    """``t`` as ``[R, N]``, and whether that is a copy: a view where the strides allow it,
    else a contiguous copy (which a caller that writes ``t`` copies back)."""
    try:
        return t.view(R, N), False
    except RuntimeError:
        return t.reshape(R, N).contiguous(), True


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _as_vector(t: torch.Tensor, N: int) -> torch.Tensor:
    return t if t.dim() == 1 else t.reshape(N)


def _words(t: torch.Tensor) -> torch.Tensor | None:
    """The 16-bit tensor ``t`` viewed as int32 words (pairs of elements along its last axis),
    or None where it cannot be: another element size, a last axis that is not contiguous or
    of odd length, another stride that is odd, or an address that is not 4-byte aligned."""
    if (t.element_size() != 2 or t.dim() == 0 or t.shape[-1] % 2 or t.stride(-1) != 1
            or t.data_ptr() % 4 or any(st % 2 for st in t.stride()[:-1])):
        return None
    return t.view(torch.int32)


def norm_fwd_triton(x: torch.Tensor, out: torch.Tensor, N: int, eps: float, *,
                    rms: bool, weight: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None,
                    residual: torch.Tensor | None = None,
                    config: NormConfig | None = None,
                    late_affine: bool | None = None,
                    tuning: NormTuning | None = None) -> torch.Tensor:
    """Normalise every row of ``N`` trailing elements of ``x`` into ``out``; return ``out``.

    ``x`` and ``out`` hold ``R * N`` elements each, of one dtype among float16, bfloat16 and
    float32, and any strides (each is viewed as ``[R, N]``; a layout that cannot be viewed
    so is read through a contiguous copy, and ``out`` written through one and copied
    back). ``out`` may be ``x`` itself (rows are read in full before they are written).
    ``rms`` picks RMSNorm (else LayerNorm); ``weight`` and ``bias`` hold ``N`` elements.
    With ``residual`` (same shape as ``x``), ``residual += x`` is stored first and the
    norm is of the new residual. ``config`` overrides :func:`norm_config`, ``late_affine``
    the choice of when the weight and bias are loaded and ``tuning`` the table
    (:data:`TUNING`; tests, benchmarks/norm_sweep.py). Nothing is launched when there is
    nothing to write. No host sync; the coop kernel allocates a small workspace (a zeroed
    counter a row, one fill).

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

    tun = TUNING if tuning is None else tuning
    plain_rms = rms and rv is None
    # the packed kernel: bfloat16 rows of even length, no residual (whether the rows are
    # contiguous 4-byte aligned pairs is asked only of a packed plan, off the hot path)
    can_pack = dtype == torch.bfloat16 and rv is None and N % 2 == 0
    plan = functools.partial(norm_config, R, N, tuning=tun, in_bytes=x.element_size(),
                             rms=plain_rms, packed=can_pack)
    cfg = config if config is not None else plan()
    if cfg.chunks and (rv is not None or _shares_storage(xv, ov)):
        # coop's fallback re-reads the row: not when this call writes over its input
        if config is not None:
            raise ValueError("the coop kernel reads the input while it writes the output: "
                             "it takes neither a residual nor an output over the input")
        cfg = plan(coop=False)
    if cfg.stream and rv is not None:
        # the stream kernel has no residual add (its second read would see the sum)
        if config is not None:
            raise ValueError("the stream kernel does not take a residual")
        cfg = plan(stream=False)
    words = None
    if cfg.packed:
        # x, out, weight and bias as int32 words (None: absent), or None where one cannot be
        words = [None if t is None else _words(t) for t in (xv, ov, w, b)]
        if not can_pack or any(v is None and t is not None
                               for v, t in zip(words, (xv, ov, w, b))):
            if config is not None:
                raise ValueError("the packed kernel takes bfloat16 rows of even length, their "
                                 "elements contiguous and 4-byte aligned (the weight and bias "
                                 "too), and no residual")
            cfg, words = plan(packed=False), None
    looped, rows, tiles, block, num_warps, chunks, stream, packed, block2 = cfg
    # The largest offset of the padded launch (whole tiles of rows, whole blocks of
    # columns, masked lanes included) decides int64 offsets.
    if looped or chunks:
        # (+ 1: the stream kernel loads its next chunk and next row ahead, masked)
        rows_ix, cols_ix = R + (stream > 0), (_cdiv(N, block) + (stream > 0)) * block
        grid = (R * chunks,) if chunks else (stream,) if stream else (R,)
    elif packed:
        # (+ packed: each program loads its next row ahead, masked)
        grid, rows_ix, cols_ix = (packed,), R + packed, block
    else:
        grid = (_cdiv(R, rows * tiles),)
        rows_ix, cols_ix = grid[0] * rows * tiles, block + block2
    row_stride = max(abs(sxm), abs(som), abs(srm))
    col_stride = max(abs(sxn), abs(son), abs(srn), abs(sw), abs(sb))
    use_int64 = (rows_ix - 1) * row_stride + (cols_ix - 1) * col_stride > _INT32_LIMIT

    dummy = xv  # stands for an absent tensor (its flag is off, it is never read)
    args = (xv, dummy if rv is None else rv, dummy if w is None else w,
            dummy if b is None else b, ov)
    strides = (sxm, sxn, srm, srn, som, son, sw, sb)
    flags = dict(IS_RMS=rms, HAS_RESIDUAL=rv is not None, HAS_WEIGHT=w is not None,
                 HAS_BIAS=b is not None, USE_INT64=use_int64, num_warps=num_warps,
                 **overlap_options(device))
    stats = _STATS[tun.ln_stats]
    group = min(block, max(1, 16 // x.element_size()))
    # vectorised row accesses where Triton cannot see the alignment (rows of 1000 elements,
    # views of longer rows): opspec.kernels.tiling.row_multiple
    align = (row_multiple(x.element_size(), N, sxm, som, srm)
             if sxn == son == 1 and srn in (0, 1) else 1)
    if chunks:
        # [ticket counter, arrivals per row] zeroed; then the partials of each chunk.
        cnt = torch.zeros(1 + R, dtype=torch.int32, device=device)
        ws = torch.empty((1 if rms else 2) * R * chunks, dtype=torch.float32, device=device)
        spin = _COOP_SPIN if device.type == "cuda" else 0
        flags.pop("HAS_RESIDUAL")
        launch(_norm_fwd_coop_kernel, grid, xv, args[2], args[3], ov, ws, cnt, R, N, chunks,
               spin, float(eps), sxm, sxn, som, son, sw, sb, BLOCK=block,
               FB=min(block, _COOP_FB), C_POW2=_next_pow2(chunks), STATS=stats,
               SHIFT_LIMIT=float(tun.shift_limit), GROUP=group, ALIGN=align,
               **({"maxnreg": tun.coop_maxnreg} if tun.coop_maxnreg else {}), **flags)
    elif stream:
        vec = max(1, min(block, 16 // x.element_size()))
        flags.pop("HAS_RESIDUAL")
        launch(_norm_fwd_stream_kernel, grid, xv, args[2], args[3], ov, R, N, float(eps),
               sxm, sxn, som, son, sw, sb, BLOCK_R=block // vec, VEC=vec, EVEN=N % block == 0,
               SHIFT_LIMIT=float(tun.shift_limit), ALIGN=align, **flags)
    elif packed:
        xw, ow, ww, bw = words
        launch(_norm_fwd_packed_kernel, grid, xw, xw if ww is None else ww,
               xw if bw is None else bw, ow, R, N // 2, N, float(eps), sxm // 2, som // 2,
               PART_W=max(1, block // 8), IS_RMS=rms, HAS_WEIGHT=w is not None,
               HAS_BIAS=b is not None, USE_INT64=use_int64,
               SHIFT_LIMIT=float(tun.shift_limit), FB=min(max(1, block // 8), _COOP_FB),
               ALIGN=row_multiple(4, N // 2, sxm // 2, som // 2),
               CVT=tun.packed_cvt and _packs_bf16x2(device),
               num_warps=num_warps, **overlap_options(device))
    elif looped:
        launch(_norm_fwd_looped_kernel, grid, *args, N, float(eps), *strides, BLOCK=block,
               ALIGN=align, **flags)
    else:
        # On large grids, LayerNorm and float32 load the weight and bias after the
        # statistics: compiled for sm_90 this frees 15-50 registers a thread and adds
        # programs per SM (bfloat16 LayerNorm of 8192: 80 -> 63 registers, 3 -> 4 programs;
        # float32 LayerNorm of 4096: 126 -> 72, 4 -> 7), while 16-bit RMSNorm keeps its
        # count and gains nothing from the later load.
        late = (block + block2 > _LATE_AFFINE_BLOCK
                or grid[0] >= _TARGET_PROGRAMS and (not rms or dtype == torch.float32)
                if late_affine is None else late_affine)
        extra = {} if rms else dict(STATS=stats, SHIFT_LIMIT=float(tun.shift_limit),
                                    GROUP=group)
        if not rms and late and tun.ln_maxnreg and grid[0] >= _TARGET_PROGRAMS:
            extra["maxnreg"] = tun.ln_maxnreg
        row_cache = tun.row_cache if block + block2 >= tun.row_cache_min_block else ""
        steps, delay = 0, 0
        if (tun.rows_stagger_steps > 1 and block + block2 >= tun.rows_stagger_min_block
                and grid[0] >= tun.rows_stagger_min_waves * _SMS and stagger_supported(device)):
            steps = tun.rows_stagger_steps
            delay = stagger_cycles(2 * N * x.element_size(), tun.rows_stagger)
        launch(_norm_fwd_rows_kernel, grid, *args, R, N, float(eps), *strides, ROWS=rows,
               TILES=tiles, BLOCK_N=block, BLOCK_N2=block2, LATE_AFFINE=late,
               ROW_POLICY=tun.row_load_policy,
               ROW_CACHE=row_cache,
               AFFINE_L1=_affine_l1(tun, block, w, b) if late and row_cache and not block2 else 0,
               delay=delay, STAGGER_STEPS=steps, first=_SMS, ALIGN=align, **extra, **flags)
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
