"""Softmax and log-softmax along one axis: ``torch.softmax`` / ``torch.log_softmax``.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.softmax_impl`.

* :func:`softmax_reference` -- the torch reference (fp32 math, cast back).
* :func:`softmax_triton` -- the Triton kernels, writing into a contiguous ``out``.
* :func:`softmax_plan` -- which kernel and which block sizes a shape gets (plain Python,
  no autotuning at call time).

The input is viewed as ``[outer, N, inner]`` around the normalised axis (``N`` its length):
a view when the strides allow it, else ``reshape`` copies it (a tensor whose leading or
trailing axes cannot be merged, e.g. a permuted 4-D tensor). Every kernel reads the
input through its strides and works in fp32; when the output dtype differs from the
input's (the ``dtype`` argument of torch), each loaded value is first rounded to the
output dtype, as torch casts the input before the op. Five kernels:

``rows``
    ``inner == 1`` and a row of at most ``max_reg`` (16384) elements: the row stays in
    registers, one read and one write. Short rows are packed ``ROWS`` to a program, up to
    8192 elements (2048 for rows of up to 1024), about 32 per thread at up to 16 warps; a
    program may take ``TILES`` consecutive tiles, loading the next while it reduces and
    writes the current one; rows that fill their tiles exactly are loaded and stored with
    no mask (``EVEN``). The constants: :data:`ROW_TUNING`.
``coop``
    ``inner == 1``, long 32-bit rows (vocabulary logits) and enough rows to fill the GPU:
    each row is cut into ``C`` chunks of ``BLOCK`` (16384) elements, one program per
    chunk, and the ``C`` programs of a row cooperate: each keeps its chunk's exponentials
    in registers (32 a thread at 16 warps), publishes the chunk's (max, sum), waits on the
    row's arrival count and writes its chunk from registers, rescaled to the row's max.
    One read and one write of HBM: fp32 Qwen2.5 logits (1024 x 151936) ran at 3.37 TB/s
    on an H200 against 2.66 for ``looped``, whose working set of one 594 KiB row per SM
    (78 MB) does not stay in the 50 MB L2. Rows of more than 64 chunks take ``looped``.
``looped``
    ``inner == 1``, 16-bit rows too long for ``rows`` and rows longer than 64 x 16384
    elements, enough rows to fill the GPU: a persistent grid of one program of 32 warps
    per SM, each taking whole rows. Pass 1 streams the row once, keeping a running max and
    sum per group of ``VEC`` contiguous elements (one 16-byte vector, so the group's max is
    a reduction inside one thread and ``exp`` of the rescale runs once per ``VEC``
    elements); pass 2 reads the row again in reverse chunk order and writes it, mostly
    from L2: the first pass loads with ``evict_last``, the second and the stores with
    ``evict_first``. Chunks are 64 KiB of input; each loop loads its next chunk ahead,
    so an SM has up to 128 KiB of loads in flight. On bf16 logits it beats ``coop``
    (:data:`ROW_TUNING`). Where each program takes 8 rows or more, program ``p`` starts
    ``p % 4`` eighths of a row late (:mod:`opspec.kernels.stagger`), so that part of the
    grid writes while the rest reads. Rows whose max lies beyond the FFMA form's range are
    read again in the exact form by a second loop after the first.
``split``
    ``inner == 1``, long rows but too few rows to fill the GPU (decode): each row is cut
    into ``C`` chunks of ``CHUNK`` elements; one kernel writes each chunk's (max, sum)
    to a small fp32 workspace, a second combines a row's partials and rewrites its chunk
    (the re-read hits L2: the whole input is a few MB). On sm_90 and later the two are
    launched dependent (:mod:`opspec.kernels.pdl`): the second's programs are placed
    while the first ends (H200: Llama-3 decode logits 14.2 -> 13.0 us).
``strided``
    ``inner > 1`` (``dim`` is not the last axis, which is contiguous): a program owns a
    strip of ``BLOCK_I`` columns (128 bytes of each row, 8 lanes of 16 bytes; lanes and
    warps stack along ``N``) and, when the strip's whole column fits in registers, holds
    it as a tile of the largest power of two of rows below ``N`` plus a power-of-two
    remainder tile (150 = 128 + 32 rows), one read and one write. Longer columns are cut
    into chunks of ``BLOCK_N`` rows, one program a chunk. Up to 64 chunks a strip, the
    chunks of a strip cooperate as ``coop``'s do: each holds its chunk in registers,
    publishes its per-column max and sum of exponentials, waits for the strip's others
    and writes its chunk (one read and one write). Beyond that, two launches (dependent
    ones, as ``split``'s): the first writes each chunk's per-column max and sum, the
    second combines a strip's partials and rewrites the chunk (in reverse order, so the
    chunks read last come first, from L2). The constants: :data:`STRIDED`.

Masking and special values follow torch: a slice of ``-inf`` only gives NaN (as
``exp(-inf - -inf)`` does in torch), an ``inf`` or NaN in a slice gives NaN there. The
running maxima of the looped kernels start at ``-FLT_MAX`` rather than ``-inf`` so that
a chunk holding only ``-inf`` contributes nothing instead of NaN.

Every kernel here is launched dependent where the device allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from opspec.kernels.coop import arrive_and_wait
from opspec.kernels.launch import LaunchMemo, launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.stagger import stagger_cycles, stagger_start, stagger_supported
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple

__all__ = [
    "SoftmaxPlan",
    "softmax_plan",
    "softmax_reference",
    "softmax_triton",
]

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_INT32_LIMIT = INT32_LIMIT
#: Prepared launches of the ``rows`` kernel (opspec.kernels.launch), by softmax_triton's key.
_PREPARED = LaunchMemo()
#: Elements of one slice a program keeps in registers (fp32 after the load).
MAX_REG_ELEMS = 16384
#: An H200 has 132 SMs; used where the device does not say (the CPU interpreter).
DEFAULT_SM_COUNT = 132
#: Bytes of column strips / rows in flight that the looped kernels plan to keep in L2
#: (60 MB on an H200; the rest is left to the outputs and other traffic).
_L2_BUDGET = 32 * 2**20


class RowTuning(NamedTuple):
    """Launch constants of the last-axis paths (``rows``, ``coop``, ``looped``): every such
    plan follows from these and the shape (:func:`softmax_plan`; ``split`` is fixed).
    benchmarks/softmax_sweep.py times alternatives on the H200 and prints the fields a
    better variant changes."""

    #: rows: short rows are packed into a program until its tile holds ``row_tile``
    #: elements (``row_small_tile`` for rows of at most ``row_small`` elements), while the
    #: grid keeps ``row_programs`` programs per SM.
    row_tile: int
    row_programs: int
    #: rows: elements per thread the warp count aims at (1 to 16 warps).
    row_per_thread: int
    #: rows: consecutive tiles a program takes (a power of two), the next loaded while the
    #: current one is reduced and written, where the grid keeps ``row_tiles_min_programs``
    #: programs per SM once divided.
    row_tiles: int
    row_tiles_min_programs: int
    #: coop: elements of the chunk one program holds in registers, its warps, and the most
    #: chunks a row (all of a row's programs must be resident together).
    coop_block: int
    coop_warps: int
    coop_max_chunks: int
    #: looped: bytes of input a chunk, bytes of it a thread loads (which sets the warps,
    #: up to 32), and programs per SM of its persistent grid (each with one row in flight:
    #: the rows in flight share the L2).
    loop_chunk_bytes: int
    loop_thread_bytes: int
    loop_programs_per_sm: float
    #: coop only for inputs of at least this many bytes an element (else looped).
    coop_min_in_bytes: int = 1
    #: looped: program ``p`` starts ``p % loop_stagger_steps`` times ``loop_stagger`` of a
    #: row late (a row's bytes read and written at an SM's share of the copy rate,
    #: :mod:`opspec.kernels.stagger`), so that part of the grid writes while the rest
    #: reads; only where each program takes at least ``loop_stagger_min_rows`` rows (the
    #: delay is paid once, at the start). ``loop_stagger_steps`` 0 or 1: no delay.
    loop_stagger: float = 0.0
    loop_stagger_steps: int = 0
    loop_stagger_min_rows: int = 8
    #: rows: a row of exactly a power of two elements in whole tiles is loaded and stored
    #: with no mask (the ``even`` plans).
    row_even: bool = True
    row_small: int = 1024
    row_small_tile: int = 2048


#: Why these values:
#: * rows: tiles of 8192 elements at 16 warps (16 a thread). Measured on an H200, rows of
#:   8192 (bf16, 16 a thread) and 4096 (fp32, 8 a thread) at 16 warps ran at 4.15 and
#:   4.09 TB/s: 23-31 registers (ptxas 13, sm_90), 4 programs, 64 warps and 64 KiB of rows
#:   per SM. Rows of 1024 and 2048 (bf16), one per program at 4 and 8 warps, ran at
#:   3.44-3.62: the 64 warps of an SM then hold 16 or 8 programs of 2-4 KiB, 32 KiB of
#:   rows. Packing 8 or 4 such rows into a program of 16 warps restores the former shape
#:   (32 registers). One tile a program: with that shape, loads already overlap the other
#:   programs' reductions; the sweep times 2 tiles (40 registers, 3 programs).
#: * coop: 8192 elements at 8 warps, 32 fp32 a thread (64 registers, 4 programs per SM).
#:   The looped kernel ran bf16 Llama-3 logits (4096 x 128256) and fp32 Qwen2.5 logits
#:   (1024 x 151936) at 2.66 TB/s on an H200, what a second read of the row from HBM gives:
#:   its rows in flight, 132 x 250 KiB (bf16) and 132 x 594 KiB (fp32), do not stay in
#:   the L2 beside the output stream. coop holds the chunks in registers and reads once.
#:   At most 64 chunks a row, far below 132 SMs x 4 resident programs.
#: * looped (16-bit inputs, and rows of more than 64 chunks): chunks of 64 KiB at 32 warps,
#:   one program per SM, each with its next chunk loaded ahead (the last point below).
#: * H200 sweep (benchmarks/softmax_sweep.py, 2026-11-30): 32 a thread ran rows of
#:   1024 and 2048 at 3.58 and 4.00 TB/s against 3.34 and 3.69 at 8 (8192 ones 4.10
#:   against 4.19). coop beat looped on float32 logits (qwen2.5 3.26 TB/s with chunks of
#:   16384 at 16 warps, 3.08 with 8192 at 8, looped 2.67) and lost on bfloat16 ones
#:   (Llama-3 2.50 against 2.69; log-softmax 2.68 against 2.97): 16-bit inputs take looped.
#: * Then exp as exp2 (see _exp) and one exponential an element in coop: bf16 Llama-3
#:   logits 2.66 -> 3.09 TB/s on looped, log-softmax 2.94 -> 3.32, fp32 Qwen2.5 (coop)
#:   3.31 -> 3.37; coop on bf16 2.64-2.82, still behind. Two looped programs per SM: 3.20
#:   and 3.38 (3.28 against 3.25 for bf16 -> fp32 log-softmax).
#: * Then the FFMA form of the looped kernel's exponentials for 16-bit outputs (FFMA_LIMIT;
#:   sm_90 build: 581 -> 495 SASS instructions a thread a 32-element chunk of softmax over
#:   both passes, 484 -> 460 for log-softmax). Side by side on the H200, 4096 x 128256:
#:   softmax bf16 663 -> 640 us (3.17 -> 3.29 TB/s), fp16 656 -> 634; log-softmax
#:   unchanged (623 us). 15 % fewer instructions bought 3.5 %: issue is not the only bound.
#: * Then ncu on that kernel (bf16 softmax, 4096 x 128256): 118 registers a thread at 16
#:   warps, so one program an SM, not two (16 of 64 warps; the grid of 264 ran as two
#:   waves); DRAM read 1.12 GB for 1.05 GB of input (pass 2 hits L2), 71 % of DRAM peak,
#:   stalls mostly on loads. The warps had been capped at 16 where 32 were meant. Side by
#:   side on the H200, one program an SM: chunks of 64 KiB at 32 warps (32 bf16 a thread,
#:   64 registers) 592 us (3.55 TB/s) against 624 for the table; log-softmax 582 against
#:   623; 32 KiB chunks at 32 warps 634, 16 KiB at 32 warps 702 and at 16 warps 736; two
#:   programs of 16 warps an SM (16 KiB chunks, or 32 KiB under a register cap of 64,
#:   which spills) 684-712. Float32 logits: 64 KiB chunks at 32 warps 412 us against
#:   coop's 371 (qwen2.5), so coop stays; no coop chunk and warps beat the table's (4096
#:   at 4 warps 375, 8192 at 8 384, 16384 at 32 537). (benchmarks/row_probe.py)
#:   Triton's software pipeline for the chunk loops instead of the register prefetch
#:   (tl.range num_stages 3-8: 16-64 KiB a stage through shared memory by cp.async, 42-64
#:   registers) ran 689-933 us, every depth and chunk slower: not kept. Neither kept: an
#:   L2 prefetch of the next row's first chunk during pass 2 (softmax 597 -> 590 us,
#:   log-softmax 590 -> 591), and carrying the chunk in flight across passes and rows in
#:   registers (94-207 spilling instructions at 64 KiB chunks).
#: * Float32 logits, a kernel of row parts (each row cut into 2-8 parts of 2-10 chunks,
#:   each part walked twice as looped walks a row, the parts' statistics exchanged as
#:   coop's are; the L2 then holds a part per program, not a row): 382-454 us against
#:   coop's 369 (qwen2.5; bf16 Llama-3 logits 638-1058 against looped's 629). Not kept.
#:   Coop under a register cap of 64 (4 or 8 programs an SM): chunks of 8192 at 8 warps
#:   362.7 us and 4096 at 4 warps 365.0 against the table's 367.2 in one run; 1.2 %, within
#:   what runs differ by, so the table stays until a sweep repeats it. Repeated (H200,
#:   benchmarks/row_probe.py, 2026-12-01): 8192 at 8 warps capped 360.0 us, 4096 at 4 warps
#:   capped 359.2 / 354.0 (two runs), table 361.1 / 361.8: still within 2 %.
#: * Not kept (H200, same day): coop on a persistent grid, pipelined (program p taking
#:   chunks p, p + P, ...; while it waits for a chunk's row, its next chunk is published
#:   and the one after loads). Float32 Qwen2.5 logits 398-2807 us against coop's 361
#:   (chunks of 4096-16384, 4-16 warps, 1-4 programs an SM, registers capped to keep the
#:   grid resident); bf16 Llama-3 logits 832-2716 against looped's 596. A fixed chunk
#:   order ties every program to the slowest of the grid, where coop's tickets hand the
#:   next chunk to whichever program is free. Nor a sleep of 256 ns between the arrival
#:   polls (coop's polls already build to a plain acquiring load, no atomic): within 1.5 %.
#: * row_small_tile 2048 (rows of up to 1024 elements two a program, at 2 warps) and
#:   row_even (H200, benchmarks/tie_probe.py, 2026-12-01, us). [32768, 1024] softmax bf16:
#:   8 rows a program at 8 warps (the table before) 34.53, unmasked 34.46; 2 at 2 warps
#:   33.15; 1 at 1 warp 33.26 (masked 33.36; torch.compile's kernel is that one: a row a
#:   program, 1 warp, no mask); 4 at 4 warps 34.69; 16 at 16 warps 44.70; torch.compile
#:   34.38. float16 34.48 / 34.14 / 33.07 (compile 33.57); log-softmax bf16 35.33 / 35.10 /
#:   33.12 (compile 33.78). Unmasked, 8 rows a program: 0.2-1 % faster on all three. Rows
#:   of 2048 keep 4 a program at 8 warps (bf16 ones ran at 4.16 TB/s; float32 log-softmax
#:   [65536, 2048]: table 259.4, 1 a program at 2 warps 257.6, eager 258.2: within noise).
#: * The looped kernel with its row length a compile-time constant (as the norms' re-read
#:   kernel has it; sm_90 build under Triton 3.9: 4 spilling instructions against 26, 15 %
#:   fewer SASS lines), side by side on the H200 (2026-12-01, two runs each, us): bf16
#:   log-softmax [4096, 128256] 580 -> 556 and [4096, 129280] 593 -> 566, but fp16
#:   log-softmax 557 -> 600, bf16 softmax 589 -> 603, bf16 -> fp32 log-softmax [2048,
#:   128256] 471 -> 477. Mixed, so the length stays a run-time value.
#: * Not kept (H200, benchmarks/row_probe.py, 2026-12-02, us): the two passes one row
#:   apart, each chunk step writing a chunk of row r (read the step before) beside reading
#:   the same chunk of the program's next row from HBM, so that every step reads and
#:   writes as a copy does. [4096, 128256] bf16 softmax 713.6 (64 KiB chunks a row, 32
#:   warps; 32 KiB 717.7, 16 KiB at 16 warps 794.9, two programs an SM 791.2-806.6)
#:   against the table's 590.3; log-softmax 708.2 / 572.0; fp16 softmax 712.2 / 566.5;
#:   bf16 -> fp32 log-softmax [2048, 128256] 525.4 / 467.9.
#: * Where the looped kernel's time goes (H200, 2026-12-02, [4096, 128256] bf16 softmax, one
#:   run, us): the table 588.5; the kernel's first pass alone (every row's statistics, no
#:   output) 270.5, 1.05 GB read at 3.88 TB/s; torch's fill of the 1.05 GB output alone
#:   312.3 (3.36 TB/s written); a copy of the same 2.1 GB 495.5. So the whole is the read
#:   phase plus the write phase, 270.5 + 312.3 = 582.8, as if no SM read while another
#:   wrote. Likely cause (not measured): the 132 programs take rows of one length in
#:   step, so they read together and write together, where a copy overlaps the two; at a
#:   copy's rate the kernel would take about 500.
#: * So the programs start staggered (loop_stagger; H200, 2026-12-02, side by side, us).
#:   A probe kernel (the two passes, no exact re-read) with its odd programs spinning a
#:   quarter of a row first: 546.5 against 597.5 for the table; a tenth 565.3, a half
#:   552.3, quarter steps 548.9. In the table's kernel less (2 steps of a quarter 571.5, 4 of
#:   an eighth 566.2, 8 of a sixteenth 564.1), until the exact re-read of the rows beyond
#:   the FFMA range left the row loop for a second loop after it (inside it, its code cost
#:   the staggered kernel 20-25 us; the probe kernel with the re-read only in the write
#:   branch ran 545-546). Then, unstaggered -> 4 steps of an eighth (the table): bf16
#:   softmax 572.6 -> 544.2, fp16 565.6 -> 539.0, log-softmax bf16 557.2 -> 543.9, DeepSeek-V3
#:   [4096, 129280] 562.5 -> 551.7, bf16 -> fp32 log-softmax [2048, 128256] 469.2 -> 448.9
#:   (2 steps of a quarter 446.3), float32 rows of 65 chunks (1056 of them, 8 a program)
#:   3222 -> 3225 (benchmarks/row_probe.py, its stagger variants; the bench rows:
#:   docs/ops.md). The same start on the norms'
#:   persistent kernels gained nothing: LayerNorm [2048, 32768] bf16 (packed) 71.8 -> 72.0,
#:   float32 through the stream kernel 159.5 -> 159.7. Nor on coop's first wave (two
#:   programs an SM, each spinning before it takes its ticket; float32 Qwen2.5 logits, 2 or
#:   4 steps of 2048-16384 cycles): softmax 360.8 us for the table, 360.7-368.7 staggered,
#:   log-softmax 366.2 / 363.2-371.4. Its programs hold their chunk while they wait for
#:   the row's others, and tickets already hand out work as programs free up.
#: * Not kept (H200, benchmarks/row_probe.py, 2026-12-03, us): coop's chunks sharing a row
#:   evenly (float32 Qwen2.5 logits: 10 chunks of 15200, not 9 of 16384 and one of 4480,
#:   through a run-time chunk length and a second compare in the mask). The kernel then
#:   built to 72 registers a thread (ncu) where it had 64, so one program of 16 warps an
#:   SM instead of two: the table's launch 358.8 -> 507.5, the even chunks 520.1 (every
#:   chunk and warp count ran 0.1-3 % slower even than the uneven ones in that build). The
#:   table's kernel rebuilt: 358.8 / 360.1 (two runs), under register caps of 64 (16384 at
#:   16 warps, 8192 at 8, 4096 at 4) 357.9-361.4, smaller chunks or more warps 365-463.
#:   ncu on the table's launch: DRAM 70.6 % busy, 64 registers, 2 programs an SM, 47 %
#:   achieved occupancy.
#: * Nor (same probe and day, us) coop on a persistent grid whose programs take ticket
#:   after ticket, each loading its next chunk while it waits for the current row's
#:   partials (the wait spans four round trips to L2 -- ticket, arrival, polls, partials --
#:   with nothing of the program's own in flight): float32 Qwen2.5 softmax 420-708 against
#:   the table's 359.5 (8192-16384 at 8-16 warps, 1-4 programs an SM, capped at 64
#:   registers or not), log-softmax 434-715 / 361.8. Flawed as built, besides: the next
#:   ticket, taken before the current chunk's arrival, can lie in the same row, so the
#:   program waits on a chunk it holds itself until its polls run out (one launch took
#:   167 ms). And coop on bf16 logits to float32 log-softmax ([2048, 128256]): 486-795
#:   against looped's 446.4, so 16-bit inputs keep looped.
#: * Nor the looped plan on part of the SMs, so that the rows in flight would stay in L2
#:   for the second pass (same probe and day, us, 33 / 50 / 66 / 82 / 99 / 132 programs):
#:   float32 Qwen2.5 softmax 719 / 511 / 441 / 415 / 409 / 424 against coop's 360.6; bf16
#:   -> float32 log-softmax [2048, 128256] 1187 / 783 / 629 / 524 / 500 / 451; bf16
#:   softmax [4096, 128256] 1553 / 1035 / 840 / 720 / 657 / 548. One program of 32 warps
#:   moves at most about 32 GB/s through its SM (3.2 TB/s on 99 SMs, 3.8 on 132), so the
#:   grid needs every SM; and coop, bound by the bytes the register file holds (64 KiB a
#:   program, two an SM, each held from its load to its store: about 9 us a program at
#:   3.46 TB/s), stays at about 0.82x a copy on float32 logits.
#: * Nor coop holding part of each chunk in L1 instead of registers (H200, a probe kernel,
#:   2026-12-04, us, float32 Qwen2.5 softmax / log-softmax, table 357.9-359.5 / 362.0-363.4):
#:   each program loads part A of its chunk into registers and part B through L1
#:   (evict_last), reduces both, lets B's registers go, and after the row's partials reads B
#:   again for its output; all builds at 64 registers, no spill. A 8192 + B 8192 at 16 warps
#:   399.8 / 387.0, A 8192 + B 16384 505-508 / 472-478 (A past L1, or B's second read
#:   without evict_first, the same), 8 warps A 4096 + B 8192 450.0 / 444.6, A 8192 + B 8192
#:   606.9 / 588.9, 32 warps A 16384 + B 32768 534.1 / 488.6, 16 warps A 16384 + B 16384
#:   647.1 / 629.7. Larger chunks only lengthened each program's hold.
#: * split for decode logits (too few rows for the grid), the table against other chunks
#:   and coop (same probe and day, us): [32, 128256] bf16 -> fp32 softmax 13.73 against
#:   split 4096 at 8 warps 13.04 and coop 14.14-19.07; [64, 129280] bf16 17.22 / 16.37 /
#:   17.60-26.51; [128, 128256] bf16 30.14 / 29.04 / 30.50-45.04; but the [32, 128256] log-
#:   softmax 12.98 / 13.57 and float32 [8, 151936] 9.38 / 10.02: within 5 % either way and
#:   not one direction, so the table stays.
ROW_TUNING = RowTuning(row_tile=8192, row_programs=4, row_per_thread=32, row_tiles=1,
                       row_tiles_min_programs=8, coop_block=16384, coop_warps=16,
                       coop_max_chunks=64, loop_chunk_bytes=64 * 1024, loop_thread_bytes=64,
                       loop_programs_per_sm=1.0, coop_min_in_bytes=4, loop_stagger=0.125,
                       loop_stagger_steps=4)
#: Polls of a row's arrival count before a program reads the row itself (see the kernel).
_COOP_SPIN = 1 << 16
#: Elements of one tile of the former strided plan (benchmarks/reduction_sweep.py times it
#: against the current one).
_STRIDED_TILE = 8192


class StridedTuning(NamedTuple):
    """Launch constants of the ``strided`` path (``dim`` not the last axis); every strided
    plan follows from these and the shape (:func:`_strided_plan`). benchmarks/
    reduction_sweep.py times alternatives on the H200."""

    #: Bytes of each row (of the ``inner`` axis) a tile spans: 128 is one cache line, 8
    #: lanes x 16 bytes; the rest of a warp's lanes and the warps stack along ``N``.
    col_bytes: int
    #: Narrow the strips (down to 32 bytes) until the grid holds this many programs per SM.
    min_programs_per_sm: int
    #: Most elements of one register tile (both tiles of a column together).
    tile_elems: int
    #: Elements per thread the warp count aims at (1 to 16 warps).
    elems_per_thread: int
    #: ``N`` not a power of two: two tiles, the largest power of two below ``N`` and a
    #: power-of-two remainder (150 classes: 128 + 32 rows, not 256 with 106 masked).
    split_remainder: bool
    #: Columns too long for registers: two launches (per-chunk max and sum, then the
    #: finish re-reading its chunk) instead of one program walking the column twice.
    split_long: bool
    #: ... or, at most ``coop_max_chunks`` chunks a strip, one launch whose programs hold
    #: their chunks in registers and exchange the per-column (max, sum) of each chunk (as
    #: the ``coop`` rows do): one read and one write of HBM.
    long_coop: bool = True
    coop_max_chunks: int = 64
    #: Elements per thread the cooperating chunks' warp count aims at (1 to 16 warps).
    coop_elems_per_thread: int = 128


#: Measured on the H200 with the former plan (one tile of next_pow2(N) x 64 bf16 / 32 fp32
#: columns, 16 warps): ade20k [16, 150, 128, 128] over dim 1 at 1.2 (bf16) to 2.4 (fp32)
#: TB/s, a [64, 32, 4096] bf16 log-softmax over dim 0 at 0.71 TB/s, the [1, 4800, 4800]
#: fp32 softmax over dim 1 (two passes in one program over 16-column strips: 300 programs
#: whose strips, 92 MB, all outlive L2 before the second pass) at 1.56 TB/s.
#: Here: few warps a program with many elements a thread (fewer registers, so several
#: programs share an SM and their loads overlap the others' reductions; 16 warps held 2
#: an SM), no padding rows (128 + 32 for 150), and long columns in two launches, 3 passes
#: over HBM at most (the second read partly from L2) instead of a re-read of everything.
#: H200 sweep (benchmarks/reduction_sweep.py, 2026-12-01), 32 -> 128 elements a thread
#: (so 1-2 warps a program on these rows, more programs resident an SM): ade20k [16, 150,
#: 128, 128] bf16 70.6 -> 47.6 us, fp32 83.4 -> 82.1, its log-softmax 84.0 -> 81.9, a
#: [64, 32, 4096] bf16 log-softmax over dim 0 18.0 -> 14.2; 64 a thread ran between the
#: two; the long LoFTR columns (two launches, now 2 warps) stayed at 77-79 us.
#: Then the long columns' chunks cooperating in one launch (long_coop; H200, reduction_sweep
#: .py, 2026-12-01, LoFTR [1, 4800, 4800] fp32 over dim 1, 19 chunks of 256 rows x 32
#: columns a strip): 71.7 us at 2 warps (128 a thread, 248 registers) against 77.3 for the
#: two launches; 77.4 at 4 warps, 82.3 at 8, 118.2 at 16; 64-byte strips 81.4 (8 warps),
#: chunks of 4096 elements 81.7, of 16384 at 8 warps 100.2, 256-byte strips 132.8; at 2
#: warps (a second sweep): chunks of 4096 75.6, 64-byte strips 77.7, 32-byte 95.9. Still
#: 0.67x a copy: the programs in flight together cover a band of ~2.7 KB of each 19 KB row
#: (every row of their strips), where the tile kernels' cover whole rows.
#: Again with the clean L2 flush (reduction_sweep.py, 2026-12-01), ADE20K bf16: the table
#: 44.5 us (32-column strips: its 160 x 64 tile would pass tile_elems), 16K-element tiles
#: (64 columns, 128-byte strips) 54.4, 64 a thread 51.8, 256- and 512-byte strips 54.5-54.9.
#: Not kept (H200, 2026-12-03, a probe of the tile kernel, us): each program taking 2, 4 or 8
#: consecutive strips in turn (fewer, longer programs; 254-255 registers against 228 at
#: bf16, no spills). ADE20K softmax bf16 44.8 (one strip, the table) / 49.7 / 69.8 / 110.8,
#: float32 78.5 / 81.9 / 93.7 / 119.2, log-softmax bf16 43.8 / 47.5 / 83.6 / 142.1; a copy
#: of the bf16 row's bytes 38.8. Nor other strip widths (benchmarks/row_probe.py
#: softmax-ade20k-*, same day, us, 32 / 64 / 128 bytes of each row a program at 1 warp; 2
#: warps slower on every row but the bf16 128-byte one): bf16 softmax 56.3 / 44.6 (the
#: table) / 55.1, float32 108.3 / 83.2 / 78.4 (the table), bf16 log-softmax 56.3 / 44.2
#: (the table) / 74.2.
#: Nor, for the long LoFTR columns (H200, 2026-12-04, [1, 4800, 4800] float32 over dim 1,
#: the table's cooperative launch 66.2-66.4 us, a copy of its bytes 44.6): a lagged
#: pipeline in one launch, with no chunk held while others arrive. Tasks by ticket: each
#: strip's chunks reduced to per-column partials (the last to arrive combining the strip's
#: statistics), then L strips later the same chunks read again, from L2, and written; a
#: task waits only on smaller tickets, so it needs no residency. Best at 128-row x 64-column
#: chunks, 4 warps, L = 16 strips (19.7 MB between a read and its re-read), evict_last on
#: the first read and evict_first on the second and the stores: 67.5 us (no hints 74.0; L
#: 8 / 32 72.1 / 72.3; 32 x 256, 64 x 128, 256 x 64 and 16 x 512 chunks 68.1-163.7; the
#: statistics combined by separate tasks between the two reads instead of by the last
#: chunk 75.9-163.7). ncu at 128 x 64: 112 MB read from DRAM (92 of input: the re-reads
#: hit L2), 68 MB written, 23.5 % of the warp slots (123 registers), 2.77 TB/s: each
#: short program's fixed latency (ticket, load, release), not traffic, bounds it, as in
#: the cooperative kernel (11.7 % of the warp slots there). Persistent programs taking
#: tickets in a loop, each loading its next chunk before working on the current one,
#: were slower still (86.7-144.1 us at 1-6 programs an SM: a program whose current chunk
#: waits holds its next one).
#: Nor (H200, 2026-12-04, side by side, us) ADE20K's bf16 strips held as loaded, two
#: values a register, widened at each use and their exponentials computed twice: 192
#: registers a one-warp program against 228 (10 programs an SM against 8), softmax 44.85
#: against the table's 44.26, log-softmax 43.57 / 43.95 (a copy of the bytes 38.5).
#: Where the ADE20K bf16 tile kernel stops (ncu, H200, Triton 3.6, 2026-12-04, the table's
#: launch: 8192 one-warp programs of 32-column strips): 192 registers a thread, so 8
#: programs (warps) an SM, 12.5 % theoretical occupancy (11.5 % achieved); each scheduler
#: issues every 2.8 cycles with 0.41 of its 1.87 warps eligible, and 42 % of a warp's
#: stalls wait on its L1TEX loads: too few warps to hide each strip's load-then-reduce
#: chain, not traffic or issue.
#: Nor cache hints on the tile kernel (same day, us, ADE20K bf16 softmax / log-softmax,
#: none 44.29-44.53 / 43.98-44.21): loads evict_first 48.35 / 48.40, loads .cg 44.22 /
#: 44.06, stores evict_first 45.14 / 45.14, stores .cs 45.41 / 45.22; float32 within 1 %
#: (.cg) or 1-5 % slower.
STRIDED = StridedTuning(col_bytes=128, min_programs_per_sm=4, tile_elems=8192,
                        elems_per_thread=128, split_remainder=True, split_long=True,
                        long_coop=True, coop_max_chunks=64, coop_elems_per_thread=128)
_NEG_BIG = tl.constexpr(-3.4028234663852886e38)  # -FLT_MAX
_LOG2E = tl.constexpr(1.4426950408889634)
#: Row maxima within [-L / 2, L] take the looped kernel's FFMA form of the exponentials
#: (see _looped_pass1), by output dtype; 0: never (float32 outputs keep the exact form).
FFMA_LIMIT = {torch.float16: 4096.0, torch.bfloat16: 4096.0, torch.float32: 0.0}


@triton.jit
def _exp(x):
    # exp(x) as exp2(x * log2(e)): for sm_90 this builds to one FMUL and one MUFU.EX2 (the
    # flush-to-zero form), where tl.exp also tests for and rescales a subnormal result (an
    # FSETP and two more FMULs). The bf16 vocabulary rows are bound by instruction issue
    # (24 SASS instructions an element in the looped kernel), so the three count. A result
    # below 2**-126 becomes 0: a softmax probability that small is 0 to any dtype's sum.
    return tl.math.exp2(x * _LOG2E)


def softmax_reference(x: torch.Tensor, dim: int, out_dtype: torch.dtype | None = None,
                      log: bool = False) -> torch.Tensor:
    """``torch.softmax`` (``log_softmax`` when ``log``) of ``x`` along ``dim``, computed in
    float32 and returned in ``out_dtype`` (default ``x.dtype``), ``x`` first cast to
    ``out_dtype`` as torch's ``dtype`` argument does."""
    dt = x.dtype if out_dtype is None else out_dtype
    xt = x if dt == x.dtype else x.to(dt)
    fn = torch.log_softmax if log else torch.softmax
    return fn(xt, dim, dtype=torch.float32).to(dt)


# -- kernels ---------------------------------------------------------------------------------

@triton.jit
def _rows_load(x_ptr, rows, cols, n_rows, N, sxr, sxn, EVEN: tl.constexpr):
    ptrs = x_ptr + rows[:, None] * sxr + cols[None, :] * sxn
    if EVEN:
        return tl.load(ptrs)
    else:
        return tl.load(ptrs, mask=(rows < n_rows)[:, None] & (cols < N)[None, :],
                       other=-float("inf"))


@triton.jit
def _rows_kernel(x_ptr, out_ptr, n_rows, N, sxr, sxn, sor, son,
                 ROWS: tl.constexpr, TILES: tl.constexpr, BLOCK_N: tl.constexpr,
                 LOG: tl.constexpr, USE_INT64: tl.constexpr, EVEN: tl.constexpr = False,
                 ALIGN: tl.constexpr = 1, PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    # ALIGN: a power of two the host checked to divide N and the row strides
    # (opspec.kernels.tiling.row_multiple), so that the row accesses vectorise.
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        sxr = as_multiple(sxr, ALIGN)
        sor = as_multiple(sor, ALIGN)
    # TILES consecutive tiles of ROWS whole rows per program, each in registers; with
    # several, the next tile is loaded (as stored) before the current one is reduced and
    # written, so that loads stay in flight through the reductions and stores. EVEN: rows
    # of exactly BLOCK_N elements and whole tiles only, so no access is masked.
    pid = tl.program_id(0)
    rows = pid * (TILES * ROWS) + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    x_next = _rows_load(x_ptr, rows, cols, n_rows, N, sxr, sxn, EVEN)
    for t in tl.static_range(TILES):
        x = x_next
        cur = rows
        if t + 1 < TILES:
            rows = rows + ROWS
            x_next = _rows_load(x_ptr, rows, cols, n_rows, N, sxr, sxn, EVEN)
        # torch casts the input to the output dtype first (a no-op when they agree).
        x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
        m = tl.max(x, axis=1)
        z = x - m[:, None]
        e = _exp(z)
        s = tl.sum(e, axis=1)
        if LOG:
            y = z - tl.log(s)[:, None]
        else:
            y = e * (1.0 / s)[:, None]
        o_ptrs = out_ptr + cur[:, None] * sor + cols[None, :] * son
        if EVEN:
            tl.store(o_ptrs, y.to(out_ptr.dtype.element_ty))
        else:
            tl.store(o_ptrs, y.to(out_ptr.dtype.element_ty),
                     mask=(cur < n_rows)[:, None] & (cols < N)[None, :])


@triton.jit
def _looped_pass1(x_row, offs, N, sxn, BLOCK_R: tl.constexpr, BLOCK: tl.constexpr, out_ty,
                  LIMIT: tl.constexpr):
    # Running max and sum of exponentials per group over a row's chunks, the next chunk
    # loaded ahead; returns (row max, row sum). LIMIT > 0: each exponential as
    # exp2(x log2 e - m log2 e), one FFMA and the MUFU, where exp2((x - m) log2 e) takes
    # an FADD more. Its error is the rounding of m log2 e: a factor of about
    # 1 + 6e-8 |m| on a group's sum, so the caller takes it only for 16-bit outputs and
    # row maxima within [-LIMIT / 2, LIMIT] (2.5e-4 at most, where a 16-bit output rounds
    # at 5e-4 or more). A group whose max is below -LIMIT is shifted by -LIMIT instead
    # (m log2 e could overflow): its terms are then too small by exp(m + LIMIT), but so
    # is its true share of a row sum whose max is at least -LIMIT / 2 (below exp(-LIMIT
    # / 2)).
    n_chunks = tl.cdiv(N, BLOCK)
    m = tl.full([BLOCK_R], _NEG_BIG, tl.float32)
    s = tl.zeros([BLOCK_R], tl.float32)
    nxt = tl.load(x_row + offs * sxn, mask=offs < N, other=-float("inf"),
                  eviction_policy="evict_last")
    for c in range(0, n_chunks):
        cur = nxt
        ncols = (c + 1) * BLOCK + offs
        nxt = tl.load(x_row + ncols * sxn, mask=ncols < N, other=-float("inf"),
                      eviction_policy="evict_last")
        x = cur.to(out_ty).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        if LIMIT > 0:
            ms = tl.maximum(m_new, -LIMIT) * _LOG2E
            e = tl.math.exp2(x * _LOG2E - ms[:, None])
        else:
            e = _exp(x - m_new[:, None])
        s = s * _exp(m - m_new) + tl.sum(e, axis=1)
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * _exp(m - row_max), axis=0)
    return row_max, row_sum


@triton.jit
def _looped_pass2(x_row, o_row, offs, N, sxn, son, shift, BLOCK: tl.constexpr, out_ty,
                  FORM: tl.constexpr, inv=1.0):
    # Writes a row's outputs, the last chunk first (the most recently read, still in L2).
    # FORM 0: x - shift (log-softmax); 1: exp2(x log2 e - shift); 2: exp(x - shift) * inv.
    n_chunks = tl.cdiv(N, BLOCK)
    last = (n_chunks - 1) * BLOCK + offs
    nxt = tl.load(x_row + last * sxn, mask=last < N, other=0.0, eviction_policy="evict_first")
    for k in range(0, n_chunks):
        c = n_chunks - 1 - k
        cur = nxt
        cols = c * BLOCK + offs
        pcols = cols - BLOCK
        nxt = tl.load(x_row + pcols * sxn, mask=(pcols >= 0) & (pcols < N), other=0.0,
                      eviction_policy="evict_first")
        x = cur.to(out_ty).to(tl.float32)
        if FORM == 0:
            y = x - shift
        elif FORM == 1:
            y = tl.math.exp2(x * _LOG2E - shift)
        else:
            y = _exp(x - shift) * inv
        tl.store(o_row + cols * son, y.to(out_ty), mask=cols < N, eviction_policy="evict_first")


@triton.jit
def _looped_kernel(x_ptr, out_ptr, n_rows, N, sxr, sxn, sor, son,
                   BLOCK_R: tl.constexpr, VEC: tl.constexpr, LOG: tl.constexpr,
                   USE_INT64: tl.constexpr, FFMA_LIMIT: tl.constexpr, delay=0,
                   STAGGER_STEPS: tl.constexpr = 0, ALIGN: tl.constexpr = 1,
                   PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    # programs start in steps (opspec.kernels.stagger)
    stagger_start(delay, STAGGER_STEPS, tl.num_programs(0))
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)       # as in _rows_kernel
        sxr = as_multiple(sxr, ALIGN)
        sor = as_multiple(sor, ALIGN)
    BLOCK: tl.constexpr = BLOCK_R * VEC
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    # [BLOCK_R, VEC]: each group of VEC contiguous elements is one thread's vector.
    offs = tl.arange(0, BLOCK_R)[:, None] * VEC + tl.arange(0, VEC)[None, :]
    if USE_INT64:
        offs = offs.to(tl.int64)
    out_ty = out_ptr.dtype.element_ty
    if FFMA_LIMIT > 0:
        # Pass 1 in the FFMA form; a row whose max falls outside [-FFMA_LIMIT / 2,
        # FFMA_LIMIT] is left for the loop below, which reads it again in the exact form.
        # The exact loop stands after this one, not in its body: there, its code slowed the
        # staggered writes of bf16 [4096, 128256] softmax from 545 to 567-572 us (H200,
        # 2026-12-02).
        slow = 0
        for row in range(pid, n_rows, nprog):
            x_row, o_row = _row_ptrs(x_ptr, out_ptr, row, sxr, sor, USE_INT64)
            row_max, row_sum = _looped_pass1(x_row, offs, N, sxn, BLOCK_R, BLOCK, out_ty,
                                             FFMA_LIMIT)
            if (row_max <= FFMA_LIMIT) & (row_max >= -0.5 * FFMA_LIMIT):
                _looped_write(x_row, o_row, offs, N, sxn, son, row_max, row_sum, BLOCK,
                              out_ty, LOG, True)
            else:
                slow += 1
        if slow > 0:
            # Rare (row maxima outside [-FFMA_LIMIT / 2, FFMA_LIMIT]). Which rows they were
            # is not kept, so each row's max is found again, by the FFMA pass already built.
            for row in range(pid, n_rows, nprog):
                x_row, o_row = _row_ptrs(x_ptr, out_ptr, row, sxr, sor, USE_INT64)
                row_max, row_sum = _looped_pass1(x_row, offs, N, sxn, BLOCK_R, BLOCK, out_ty,
                                                 FFMA_LIMIT)
                if not ((row_max <= FFMA_LIMIT) & (row_max >= -0.5 * FFMA_LIMIT)):
                    row_max, row_sum = _looped_pass1(x_row, offs, N, sxn, BLOCK_R, BLOCK,
                                                     out_ty, 0.0)
                    _looped_write(x_row, o_row, offs, N, sxn, son, row_max, row_sum, BLOCK,
                                  out_ty, LOG, False)
    else:
        for row in range(pid, n_rows, nprog):
            x_row, o_row = _row_ptrs(x_ptr, out_ptr, row, sxr, sor, USE_INT64)
            row_max, row_sum = _looped_pass1(x_row, offs, N, sxn, BLOCK_R, BLOCK, out_ty,
                                             0.0)
            _looped_write(x_row, o_row, offs, N, sxn, son, row_max, row_sum, BLOCK, out_ty,
                          LOG, False)


@triton.jit
def _row_ptrs(x_ptr, out_ptr, row, sxr, sor, USE_INT64: tl.constexpr):
    r = row
    if USE_INT64:
        r = tl.cast(row, tl.int64)
    return x_ptr + r * sxr, out_ptr + r * sor


@triton.jit
def _looped_write(x_row, o_row, offs, N, sxn, son, row_max, row_sum, BLOCK: tl.constexpr,
                  out_ty, LOG: tl.constexpr, FAST: tl.constexpr):
    # Pass 2 (the chunks again, written): log-softmax x - (max + log sum); softmax
    # exp2(x log2 e - (max log2 e + log2 sum)) in the FFMA form (FAST), else
    # exp(x - max) / sum.
    if LOG:
        _looped_pass2(x_row, o_row, offs, N, sxn, son, row_max + tl.log(row_sum), BLOCK,
                      out_ty, 0)
    elif FAST:
        _looped_pass2(x_row, o_row, offs, N, sxn, son, row_max * _LOG2E + tl.log2(row_sum),
                      BLOCK, out_ty, 1)
    else:
        _looped_pass2(x_row, o_row, offs, N, sxn, son, row_max, BLOCK, out_ty, 2,
                      1.0 / row_sum)


@triton.jit
def _coop_kernel(x_ptr, out_ptr, ws_ptr, cnt_ptr, n_rows, N, G, spin, sxr, sxn, sor, son,
                 BLOCK: tl.constexpr, FB: tl.constexpr, G_POW2: tl.constexpr,
                 LOG: tl.constexpr, USE_INT64: tl.constexpr, ALIGN: tl.constexpr = 1,
                 PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)       # as in _rows_kernel
        sxr = as_multiple(sxr, ALIGN)
        sor = as_multiple(sor, ALIGN)
    # One program per BLOCK-element chunk of a row, the G chunks of a row cooperating: each
    # holds its chunk in registers, publishes the chunk's (max, sum), waits until the row's
    # G partials are in and writes its chunk from registers. One read and one write of HBM.
    #
    # Rows and chunks are handed out in arrival order (a ticket from an atomic counter),
    # not by program id: every program with a smaller ticket has started, so only the row
    # of the newest ticket can be waiting on programs not yet resident, and those start as
    # soon as any finished program frees a slot (no deadlock while G programs fit on the
    # GPU). A program that still waits after `spin` polls reads the whole row itself for
    # the statistics (a slow but correct fallback; the interpreter, which runs programs
    # one after another, takes it with `spin == 0` for all but a row's last chunk).
    ticket = tl.atomic_add(cnt_ptr, 1)
    row = ticket // G
    c = ticket - row * G
    offs = tl.arange(0, BLOCK)
    k = tl.arange(0, G_POW2)
    if USE_INT64:
        row = tl.cast(row, tl.int64)
        c = tl.cast(c, tl.int64)
        offs = offs.to(tl.int64)
    x_row = x_ptr + row * sxr
    cols = c * BLOCK + offs
    cmask = cols < N
    # No cache hint on the chunk (read once, held in registers): evict_first cost 1.2-1.4 %
    # on the float32 Qwen2.5 logits (H200, 2026-12-01: softmax 365.6 -> 361.1 us without).
    x = tl.load(x_row + cols * sxn, mask=cmask, other=-float("inf"))
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    # -FLT_MAX, not -inf, for a chunk of -inf only: its sum is then 0, not NaN.
    m = tl.maximum(tl.max(x, axis=0), _NEG_BIG)
    # One exponential an element: e is kept, and rescaled to the row's max below (the
    # former second exp(x - row_max) per element cost a subtract, a multiply and an EX2).
    e = _exp(x - m)
    s = tl.sum(e, axis=0)
    tl.store(ws_ptr + ticket, m)
    tl.store(ws_ptr + n_rows * G + ticket, s)
    done = arrive_and_wait(cnt_ptr + 1 + row, G, spin)
    if done >= G:
        # volatile: bypass L1, which may hold an older copy of the workspace line.
        pm = tl.load(ws_ptr + row * G + k, mask=k < G, other=_NEG_BIG, volatile=True)
        ps = tl.load(ws_ptr + n_rows * G + row * G + k, mask=k < G, other=0.0,
                     volatile=True)
        row_max = tl.max(pm, axis=0)
        row_sum = tl.sum(ps * _exp(pm - row_max), axis=0)
    else:
        # Small steps of FB elements with a scalar running (max, sum), so that the fallback
        # holds few registers beside the chunk (the kernel's count is the larger path's).
        fo = tl.arange(0, FB)
        if USE_INT64:
            fo = fo.to(tl.int64)
        row_max = _NEG_BIG
        row_sum = 0.0
        for j in range(0, tl.cdiv(N, FB)):
            jc = j * FB + fo
            xj = tl.load(x_row + jc * sxn, mask=jc < N, other=-float("inf"))
            xj = xj.to(out_ptr.dtype.element_ty).to(tl.float32)
            m_new = tl.maximum(row_max, tl.max(xj, axis=0))
            row_sum = row_sum * _exp(row_max - m_new) + tl.sum(_exp(xj - m_new), axis=0)
            row_max = m_new
    if LOG:
        y = x - (row_max + tl.log(row_sum))
    else:
        # exp(x - row_max) / row_sum = e * exp(m - row_max) / row_sum
        y = e * (_exp(m - row_max) / row_sum)
    tl.store(out_ptr + row * sor + cols * son, y.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _split_partials_kernel(x_ptr, out_ptr, ws_ptr, n_rows, N, C, sxr, sxn,
                           CHUNK: tl.constexpr, USE_INT64: tl.constexpr,
                           PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    pid = tl.program_id(0)
    row = pid // C
    c = pid % C
    cols = c * CHUNK + tl.arange(0, CHUNK)
    if USE_INT64:
        row = row.to(tl.int64)
        cols = cols.to(tl.int64)
    x = tl.load(x_ptr + row * sxr + cols * sxn, mask=cols < N, other=-float("inf"))
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    # -FLT_MAX, not -inf, for a chunk of -inf only: its sum is then 0, not NaN.
    m = tl.maximum(tl.max(x, axis=0), _NEG_BIG)
    s = tl.sum(_exp(x - m), axis=0)
    tl.store(ws_ptr + pid, m)
    tl.store(ws_ptr + n_rows * C + pid, s)


@triton.jit
def _split_finish_kernel(x_ptr, out_ptr, ws_ptr, n_rows, N, C, sxr, sxn, sor, son,
                         CHUNK: tl.constexpr, C_POW2: tl.constexpr, LOG: tl.constexpr,
                         USE_INT64: tl.constexpr, PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    pid = tl.program_id(0)
    row = pid // C
    c = pid % C
    k = tl.arange(0, C_POW2)
    pm = tl.load(ws_ptr + row * C + k, mask=k < C, other=_NEG_BIG)
    ps = tl.load(ws_ptr + n_rows * C + row * C + k, mask=k < C, other=0.0)
    row_max = tl.max(pm, axis=0)
    row_sum = tl.sum(ps * _exp(pm - row_max), axis=0)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    if USE_INT64:
        row = row.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = cols < N
    x = tl.load(x_ptr + row * sxr + cols * sxn, mask=mask, other=0.0)
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    if LOG:
        y = x - (row_max + tl.log(row_sum))
    else:
        y = _exp(x - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * sor + cols * son, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _strided_kernel(x_ptr, out_ptr, n_outer, N, inner, n_iblk, sxo, sxn, sxi, soo, son, soi,
                    BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, LOOPED: tl.constexpr,
                    LOG: tl.constexpr, USE_INT64: tl.constexpr, PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rn = tl.arange(0, BLOCK_N)
    ri = tl.arange(0, BLOCK_I)
    if USE_INT64:
        rn = rn.to(tl.int64)
        ri = ri.to(tl.int64)
    for t in range(pid, n_outer * n_iblk, nprog):
        o = t // n_iblk
        ib = t % n_iblk
        if USE_INT64:
            o = tl.cast(o, tl.int64)
            ib = tl.cast(ib, tl.int64)
        icols = ib * BLOCK_I + ri
        imask = (icols < inner)[None, :]
        xb = x_ptr + o * sxo + icols[None, :] * sxi
        ob = out_ptr + o * soo + icols[None, :] * soi
        if not LOOPED:
            mask = (rn < N)[:, None] & imask
            x = tl.load(xb + rn[:, None] * sxn, mask=mask, other=-float("inf"))
            x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
            m = tl.max(x, axis=0)
            z = x - m[None, :]
            e = _exp(z)
            s = tl.sum(e, axis=0)
            if LOG:
                y = z - tl.log(s)[None, :]
            else:
                y = e * (1.0 / s)[None, :]
            tl.store(ob + rn[:, None] * son, y.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            n_chunks = tl.cdiv(N, BLOCK_N)
            m = tl.full([BLOCK_I], _NEG_BIG, tl.float32)
            s = tl.zeros([BLOCK_I], tl.float32)
            for c in range(0, n_chunks):
                rows = c * BLOCK_N + rn
                mask = (rows < N)[:, None] & imask
                x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=-float("inf"),
                            eviction_policy="evict_last")
                x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=0))
                s = s * _exp(m - m_new) + tl.sum(_exp(x - m_new[None, :]), axis=0)
                m = m_new
            lse = tl.log(s)
            inv = 1.0 / s
            for k in range(0, n_chunks):
                rows = (n_chunks - 1 - k) * BLOCK_N + rn
                mask = (rows < N)[:, None] & imask
                x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=0.0,
                            eviction_policy="evict_first")
                x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
                if LOG:
                    # (x - m) - log(s): log(s) would vanish beside a large m
                    y = (x - m[None, :]) - lse[None, :]
                else:
                    y = _exp(x - m[None, :]) * inv[None, :]
                tl.store(ob + rows[:, None] * son, y.to(out_ptr.dtype.element_ty), mask=mask,
                         eviction_policy="evict_first")


@triton.jit
def _strided_tile_kernel(x_ptr, out_ptr, N, inner, n_iblk, sxo, sxn, sxi, soo, son, soi,
                         BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_I: tl.constexpr,
                         WHOLE: tl.constexpr, LOG: tl.constexpr, USE_INT64: tl.constexpr,
                         PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    # One [N, BLOCK_I] column strip in registers, as two tiles: rows [0, BLOCK_N) and, when
    # BLOCK_N2 > 0, the remainder rows [BLOCK_N, BLOCK_N + BLOCK_N2) masked past N. WHOLE:
    # BLOCK_N <= N and the strip is whole (inner % BLOCK_I == 0): the first tile loads and
    # stores unmasked. One read, one write.
    pid = tl.program_id(0)
    ib = pid % n_iblk
    o = pid // n_iblk
    rn = tl.arange(0, BLOCK_N)
    icols = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    if USE_INT64:
        o = o.to(tl.int64)
        rn = rn.to(tl.int64)
        icols = icols.to(tl.int64)
    imask = (icols < inner)[None, :]
    xb = x_ptr + o * sxo + icols[None, :] * sxi
    ob = out_ptr + o * soo + icols[None, :] * soi
    OUT_TY: tl.constexpr = out_ptr.dtype.element_ty
    if WHOLE:
        x = tl.load(xb + rn[:, None] * sxn)
    else:
        mask = (rn < N)[:, None] & imask
        x = tl.load(xb + rn[:, None] * sxn, mask=mask, other=-float("inf"))
    # torch casts the input to the output dtype first (a no-op when they agree).
    x = x.to(OUT_TY).to(tl.float32)
    m = tl.max(x, axis=0)
    if BLOCK_N2 > 0:
        rn2 = BLOCK_N + tl.arange(0, BLOCK_N2)
        if USE_INT64:
            rn2 = rn2.to(tl.int64)
        mask2 = (rn2 < N)[:, None] & imask
        x2 = tl.load(xb + rn2[:, None] * sxn, mask=mask2, other=-float("inf"))
        x2 = x2.to(OUT_TY).to(tl.float32)
        m = tl.maximum(m, tl.max(x2, axis=0))
    z = x - m[None, :]
    e = _exp(z)
    s = tl.sum(e, axis=0)
    if BLOCK_N2 > 0:
        z2 = x2 - m[None, :]
        e2 = _exp(z2)
        s += tl.sum(e2, axis=0)
    if LOG:
        shift = tl.log(s)[None, :]
        y = z - shift
    else:
        inv = (1.0 / s)[None, :]
        y = e * inv
    if WHOLE:
        tl.store(ob + rn[:, None] * son, y.to(OUT_TY))
    else:
        tl.store(ob + rn[:, None] * son, y.to(OUT_TY), mask=mask)
    if BLOCK_N2 > 0:
        if LOG:
            y2 = z2 - shift
        else:
            y2 = e2 * inv
        tl.store(ob + rn2[:, None] * son, y2.to(OUT_TY), mask=mask2)


@triton.jit
def _chunk(o, c, ib, N, inner, BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr,
           USE_INT64: tl.constexpr):
    # Chunk c of strip ib of outer index o: its rows and columns, the columns' mask and the
    # chunk's (int64 where asked).
    rn = c * BLOCK_N + tl.arange(0, BLOCK_N)
    icols = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    if USE_INT64:
        o = o.to(tl.int64)
        rn = rn.to(tl.int64)
        icols = icols.to(tl.int64)
    imask = icols < inner
    return o, rn, icols, imask, (rn < N)[:, None] & imask[None, :]


@triton.jit
def _strip_stats(ws_ptr, ws_s, o, C, inner, icols, imask, C_POW2: tl.constexpr,
                 VOLATILE: tl.constexpr):
    # The columns' max and sum of exp over a strip's C chunks, from the chunks' partials in
    # ws [outer, C, inner] (maxima at ws_ptr, sums at ws_s).
    k = tl.arange(0, C_POW2)
    pw = (o * C + k)[:, None] * inner + icols[None, :]
    pmask = (k < C)[:, None] & imask[None, :]
    pm = tl.load(ws_ptr + pw, mask=pmask, other=_NEG_BIG, volatile=VOLATILE)
    ps = tl.load(ws_s + pw, mask=pmask, other=0.0, volatile=VOLATILE)
    m = tl.max(pm, axis=0)
    return m, tl.sum(ps * _exp(pm - m[None, :]), axis=0)


@triton.jit
def _strided_split_kernel(x_ptr, out_ptr, ws_ptr, N, inner, n_iblk, C, ws_half,
                          sxo, sxn, sxi, soo, son, soi,
                          BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, C_POW2: tl.constexpr,
                          FINISH: tl.constexpr, LOG: tl.constexpr, USE_INT64: tl.constexpr,
                          PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    # A column too long for registers, cut into C chunks of BLOCK_N rows; program (o, c, ib)
    # owns chunk c of strip ib (the strips of a chunk row adjacent in launch order, so the
    # programs running together read whole rows). Stage 1 (FINISH False) writes the chunk's
    # per-column max and sum of exp to ws [2, outer, C, inner] (ws_half = outer * C *
    # inner); stage 2 (FINISH) combines
    # the strip's C partials, re-reads its chunk and writes it. Stage 2 runs in the reverse
    # order, starting with the chunks stage 1 read last (the ones most likely in L2).
    pid = tl.program_id(0)
    if FINISH:
        pid = tl.num_programs(0) - 1 - pid
    ib = pid % n_iblk
    t = pid // n_iblk
    o, rn, icols, imask, mask = _chunk(t // C, t % C, ib, N, inner, BLOCK_N, BLOCK_I,
                                       USE_INT64)
    c = t % C
    OUT_TY: tl.constexpr = out_ptr.dtype.element_ty
    x = tl.load(x_ptr + o * sxo + rn[:, None] * sxn + icols[None, :] * sxi, mask=mask,
                other=-float("inf"))
    x = x.to(OUT_TY).to(tl.float32)
    ws_s = ws_ptr + ws_half  # the sums follow the maxima
    if not FINISH:
        # -FLT_MAX, not -inf, for a chunk column of -inf only: its sum is then 0, not NaN.
        m = tl.maximum(tl.max(x, axis=0), _NEG_BIG)
        s = tl.sum(_exp(x - m[None, :]), axis=0)
        w = (o * C + c) * inner + icols
        tl.store(ws_ptr + w, m, mask=imask)
        tl.store(ws_s + w, s, mask=imask)
    else:
        m, s = _strip_stats(ws_ptr, ws_s, o, C, inner, icols, imask, C_POW2, False)
        z = x - m[None, :]
        if LOG:
            # (x - m) - log(s), not x - (m + log(s)): log(s) vanishes beside a large m
            y = z - tl.log(s)[None, :]
        else:
            y = _exp(z) * (1.0 / s)[None, :]
        tl.store(out_ptr + o * soo + rn[:, None] * son + icols[None, :] * soi, y.to(OUT_TY),
                 mask=mask)


@triton.jit
def _strided_coop_kernel(x_ptr, out_ptr, ws_ptr, cnt_ptr, N, inner, n_iblk, C, ws_half, spin,
                         sxo, sxn, sxi, soo, son, soi,
                         BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, C_POW2: tl.constexpr,
                         FB: tl.constexpr, LOG: tl.constexpr, USE_INT64: tl.constexpr,
                         PDL: tl.constexpr = False):
    overlap_start(PDL)   # launched dependent (opspec.kernels.pdl)
    # A column strip too long for one program's registers, cut into C chunks of BLOCK_N
    # rows, one program a chunk, the C programs of a strip cooperating (the strided form of
    # _coop_kernel): each holds its chunk in registers, publishes the chunk's per-column
    # (max, sum of exp) to ws [2, outer, C, inner] (ws_half = outer * C * inner), waits on
    # the strip's arrival count and writes its chunk from registers. One read, one write.
    #
    # Tickets from an atomic counter, strip-major, so that only the strip of the newest
    # ticket can wait on programs not yet resident (see _coop_kernel); a program still
    # waiting after `spin` polls walks its strip itself for the statistics.
    ticket = tl.atomic_add(cnt_ptr, 1)
    strip = ticket // C
    c = ticket - strip * C
    o, rn, icols, imask, mask = _chunk(strip // n_iblk, c, strip % n_iblk, N, inner, BLOCK_N,
                                       BLOCK_I, USE_INT64)
    OUT_TY: tl.constexpr = out_ptr.dtype.element_ty
    xb = x_ptr + o * sxo + icols[None, :] * sxi
    # No cache hint (as _coop_kernel): LoFTR's [1, 4800, 4800] over dim 1 ran 69.1 us with
    # evict_first, 67.9 without (H200, 2026-12-01).
    x = tl.load(xb + rn[:, None] * sxn, mask=mask, other=-float("inf"))
    x = x.to(OUT_TY).to(tl.float32)
    # -FLT_MAX, not -inf, for a chunk column of -inf only: its sum is then 0, not NaN.
    m = tl.maximum(tl.max(x, axis=0), _NEG_BIG)
    e = _exp(x - m[None, :])
    s = tl.sum(e, axis=0)
    ws_s = ws_ptr + ws_half  # the sums follow the maxima
    w = (o * C + c) * inner + icols
    tl.store(ws_ptr + w, m, mask=imask)
    tl.store(ws_s + w, s, mask=imask)
    # Every thread's partials are stored before the count's release (one thread
    # increments it): a barrier of the program first.
    tl.debug_barrier()
    done = arrive_and_wait(cnt_ptr + 1 + strip, C, spin)
    if done >= C:
        # volatile: bypass L1, which may hold an older copy of the workspace lines.
        col_max, col_sum = _strip_stats(ws_ptr, ws_s, o, C, inner, icols, imask, C_POW2, True)
    else:
        # FB rows a step with a running (max, sum) per column, few registers beside the
        # chunk.
        fr = tl.arange(0, FB)
        if USE_INT64:
            fr = fr.to(tl.int64)
        col_max = tl.full([BLOCK_I], _NEG_BIG, tl.float32)
        col_sum = tl.zeros([BLOCK_I], tl.float32)
        for j in range(0, tl.cdiv(N, FB)):
            rj = j * FB + fr
            xj = tl.load(xb + rj[:, None] * sxn, mask=(rj < N)[:, None] & imask[None, :],
                         other=-float("inf"))
            xj = xj.to(OUT_TY).to(tl.float32)
            m_new = tl.maximum(col_max, tl.max(xj, axis=0))
            col_sum = (col_sum * _exp(col_max - m_new)
                       + tl.sum(_exp(xj - m_new[None, :]), axis=0))
            col_max = m_new
    if LOG:
        # (x - max) - log(sum): log(sum) would vanish beside a large max
        y = (x - col_max[None, :]) - tl.log(col_sum)[None, :]
    else:
        # exp(x - col_max) / col_sum = e * exp(m - col_max) / col_sum
        y = e * (_exp(m - col_max) / col_sum)[None, :]
    tl.store(out_ptr + o * soo + rn[:, None] * son + icols[None, :] * soi, y.to(OUT_TY),
             mask=mask)


# -- planning ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SoftmaxPlan:
    """One launch configuration. ``kind`` is ``rows``, ``coop``, ``looped``, ``split`` or
    ``strided``; ``block`` is the elements per program along ``N`` (the row block, the
    coop or split chunk, the loop chunk, or ``BLOCK_N``); ``rows`` the rows per tile and
    ``tiles`` the tiles per program (``rows``); ``vec`` the group width (``looped``);
    ``chunks`` the chunks per row (``coop``, ``split``) or column (``strided``);
    ``block_inner`` and ``looped`` the tile width and whether the column is longer than a
    program's registers (``strided``), ``coop`` whether its chunks cooperate in one launch
    (else two); ``even`` that no access needs a mask (``rows``: ``block`` is the row
    length and the tiles cover the rows exactly); ``stagger_steps`` and ``stagger`` the
    start delays of the ``looped`` programs (:data:`RowTuning.loop_stagger`); ``grid`` the
    number of programs."""

    kind: str
    block: int
    num_warps: int
    grid: int
    rows: int = 1
    vec: int = 1
    chunks: int = 1
    block_inner: int = 1
    looped: bool = False
    tiles: int = 1
    coop: bool = False
    even: bool = False
    stagger_steps: int = 0
    stagger: float = 0.0


def _fills_tiles(outer: int, n: int, block: int, tile_rows: int) -> bool:
    """Whether `outer` rows of `n` elements fill whole tiles of `tile_rows` rows of `block`
    elements exactly (the ``rows`` kernel's unmasked form)."""
    return block == n and outer % tile_rows == 0


def _pow2_floor(v: int) -> int:
    return 1 << (max(1, v).bit_length() - 1)


def _warps(elems: int, per_thread: int = 8) -> int:
    """Warps for a tile of `elems` elements, about `per_thread` each, 1 to 16."""
    return max(1, min(16, elems // (32 * per_thread)))


@functools.lru_cache(maxsize=4096)  # a pure function of its arguments, asked every call
def softmax_plan(outer: int, n: int, inner: int, in_bytes: int, *,
                 sm_count: int = DEFAULT_SM_COUNT, max_reg: int = MAX_REG_ELEMS,
                 tuning: RowTuning = ROW_TUNING) -> SoftmaxPlan:
    """The plan for a ``[outer, n, inner]`` view normalised over ``n``, of an input with
    ``in_bytes`` bytes per element, on a device with ``sm_count`` SMs, the last-axis paths
    under ``tuning``. ``max_reg`` (a power of two) caps the elements one program holds in
    registers; tests lower it to reach the looped kernels with small tensors."""
    sm = max(1, sm_count)
    t = tuning
    if inner == 1:
        if n <= max_reg:
            block = triton.next_power_of_2(max(n, 1))
            rows = 1
            # Short rows: several per program, while the grid keeps a few programs per SM.
            tile = t.row_small_tile if block <= t.row_small else t.row_tile
            while rows * block < tile and rows < outer:
                rows *= 2
            while rows > 1 and triton.cdiv(outer, rows) < t.row_programs * sm:
                rows //= 2
            programs = triton.cdiv(outer, rows)
            tiles = 1
            while (tiles < t.row_tiles
                   and triton.cdiv(programs, 2 * tiles) >= t.row_tiles_min_programs * sm):
                tiles *= 2
            even = t.row_even and _fills_tiles(outer, n, block, rows * tiles)
            return SoftmaxPlan("rows", block, _warps(rows * block, t.row_per_thread),
                               triton.cdiv(outer, rows * tiles), rows=rows, tiles=tiles,
                               even=even)
        few_rows = outer < sm or (outer < 4 * sm and outer * n * in_bytes <= _L2_BUDGET)
        if few_rows:
            # Cut rows into chunks so that the grid has about 2 programs per SM.
            chunk = _pow2_floor(n * outer // (2 * sm))
            chunk = max(min(2048, max_reg), min(chunk, max_reg))
            chunks = triton.cdiv(n, chunk)
            return SoftmaxPlan("split", chunk, _warps(chunk, 16), outer * chunks,
                               chunks=chunks)
        block = min(t.coop_block, max_reg)
        chunks = triton.cdiv(n, block)
        if chunks <= t.coop_max_chunks and in_bytes >= t.coop_min_in_bytes:
            warps = max(1, min(t.coop_warps, block * t.coop_warps // t.coop_block))
            return SoftmaxPlan("coop", block, warps, outer * chunks, chunks=chunks)
        vec = max(1, 16 // in_bytes)
        # Up to 32 warps where rows takes 16, so twice max_reg at the same per-thread count.
        block = max(vec, min(t.loop_chunk_bytes // in_bytes, 2 * max_reg))
        grid = min(outer, max(1, round(t.loop_programs_per_sm * sm)))
        warps = max(1, min(32, block * in_bytes // (32 * t.loop_thread_bytes)))
        steps = t.loop_stagger_steps if outer >= t.loop_stagger_min_rows * grid else 0
        return SoftmaxPlan("looped", block, warps, grid, vec=vec, stagger_steps=steps,
                           stagger=t.loop_stagger if steps > 1 else 0.0)
    # dim is not the last axis: the strided kernels (see _strided_plan).
    return _strided_plan(outer, n, inner, in_bytes, sm, max_reg, STRIDED)


@functools.lru_cache(maxsize=1024)
def _strided_plan(outer: int, n: int, inner: int, in_bytes: int, sm: int, max_reg: int,
                  t: StridedTuning) -> SoftmaxPlan:
    """The ``strided`` plan of ``[outer, n, inner]`` (inner > 1) under tuning `t`.

    Strips of ``col_bytes`` of each row (``block_inner`` columns), narrowed (down to 32
    bytes) until the grid holds ``min_programs_per_sm`` programs per SM. A whole column
    strip of at most ``min(max_reg, tile_elems)`` elements stays in registers
    (``looped`` False): ``block`` rows in a first tile and, when ``split_remainder`` and
    ``n`` is not a power of two, the launcher adds a power-of-two tile for the rest.
    Longer columns (``looped`` True): chunks of ``block`` rows, ``chunks`` of them per
    strip, cooperating in one launch (``coop``: ``long_coop`` and at most
    ``coop_max_chunks`` chunks) or in two (``split_long``), or, when ``chunks`` is 1, one
    program walking its strip twice (the kernel ``_strided_kernel``)."""
    budget = max(1, min(max_reg, t.tile_elems))
    i_pow2 = triton.next_power_of_2(inner)
    min_bi = max(1, min(i_pow2, 32 // in_bytes))  # one 32-byte sector of a row
    bi = max(min_bi, min(i_pow2, t.col_bytes // in_bytes))
    while bi > min_bi and outer * triton.cdiv(inner, bi) < t.min_programs_per_sm * sm:
        bi //= 2
    bn = triton.next_power_of_2(max(n, 1))
    if t.split_remainder and bn != n:
        bn //= 2
    rows = bn + (triton.next_power_of_2(n - bn) if n > bn else 0)
    while bi > min_bi and rows * bi > budget:
        bi //= 2
    tiles = outer * triton.cdiv(inner, bi)
    if rows * bi <= budget:
        warps = _pow2_floor(max(1, min(16, rows * bi // (32 * t.elems_per_thread))))
        return SoftmaxPlan("strided", bn, warps, tiles, block_inner=bi)
    if not t.split_long:
        # One program per strip, two passes over N (the kernel _strided_kernel): narrow
        # strips, so that those in flight (about 2 per SM) stay in L2.
        lo = min(16, i_pow2)
        bi = min(i_pow2, 64)
        while bi > lo and 2 * sm * n * bi * in_bytes > _L2_BUDGET:
            bi //= 2
        bn = max(1, min(triton.next_power_of_2(n), budget // bi))
        return SoftmaxPlan("strided", bn, _warps(bn * bi, 16), outer * triton.cdiv(inner, bi),
                           block_inner=bi, looped=True)
    # Chunks of a power of two rows filling the tile budget, at least 2 per column.
    bi = max(min_bi, min(i_pow2, t.col_bytes // in_bytes))
    bn = max(1, min(_pow2_floor(budget // bi), triton.next_power_of_2(n) // 2))
    chunks = triton.cdiv(n, bn)
    coop = t.long_coop and chunks <= t.coop_max_chunks
    per_thread = t.coop_elems_per_thread if coop else t.elems_per_thread
    warps = _pow2_floor(max(1, min(16, bn * bi // (32 * per_thread))))
    return SoftmaxPlan("strided", bn, warps, outer * triton.cdiv(inner, bi) * chunks,
                       block_inner=bi, chunks=chunks, looped=True, coop=coop)


@functools.lru_cache(maxsize=None)
def _device_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _sm_count_of(device: torch.device) -> int:
    if device.type == "cuda":
        return _device_sm_count(device.index if device.index is not None
                                else torch.cuda.current_device())
    return DEFAULT_SM_COUNT


def _span(t: torch.Tensor, pads: tuple[int, int, int]) -> int:
    """The largest element offset a kernel may form over a 3-D view, each axis padded by
    `pads` (blocks rounded up, chunks loaded ahead)."""
    return sum((size + pad) * abs(stride) for size, pad, stride in zip(t.shape, pads, t.stride()))


# -- launcher ----------------------------------------------------------------------------------

def softmax_triton(x: torch.Tensor, dim: int, out: torch.Tensor, log: bool = False, *,
                   sm_count: int | None = None, plan: SoftmaxPlan | None = None) -> torch.Tensor:
    """Write ``softmax(x, dim)`` (``log_softmax`` when ``log``) into ``out`` and return it.

    ``x``: fp16, bf16 or fp32, any rank and strides; ``dim`` in ``[-rank, rank)``.
    ``out``: ``x``'s shape, contiguous, fp16, bf16 or fp32; when its dtype differs from
    ``x``'s, ``x`` is first rounded to it (torch's ``dtype=`` argument). The math is fp32.
    Nothing is launched when ``out`` is empty. ``sm_count`` sizes the grids (default: the
    device's); ``plan`` overrides :func:`softmax_plan` (tests). No host synchronisation;
    the ``split`` and ``coop`` kernels allocate a small workspace (``coop``: zeroed
    counters, one fill).
    """
    key = None
    if sm_count is None and plan is None:
        # Everything a ``rows`` launch is decided and computed from (the checks below
        # included): a later call with the same key replays it.
        key = (x.shape, x.stride(), out.shape, out.stride(), x.dtype, out.dtype, dim, log,
               x.get_device(), out.get_device(), x.data_ptr() % 16, out.data_ptr() % 16)
        prepared = _PREPARED.get(key)
        if prepared is not None:
            prepared(x, out)
            return out
    if x.dtype not in _SUPPORTED or out.dtype not in _SUPPORTED:
        raise TypeError(f"softmax takes float16, bfloat16 or float32 tensors, got x {x.dtype} "
                        f"and out {out.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"out must have x's shape {list(x.shape)}, got {list(out.shape)}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if out.device != x.device:
        raise ValueError(f"x and out must be on one device, got {x.device} and {out.device}")
    rank = max(x.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"dim {dim} is out of range for a tensor of rank {x.dim()}; "
                         f"expected a value in [{-rank}, {rank})")
    if out.numel() == 0:
        return out
    shape = tuple(x.shape) or (1,)
    axis = dim % rank
    outer = 1
    for v in shape[:axis]:
        outer *= v
    n = shape[axis]
    inner = 1
    for v in shape[axis + 1:]:
        inner *= v
    # A view when the strides allow it; otherwise reshape copies (documented above).
    x3 = x.reshape(outer, n, inner)
    o3 = out.view(outer, n, inner)
    if plan is None:
        sms = sm_count if sm_count is not None else _sm_count_of(x.device)
        plan = softmax_plan(outer, n, inner, x.element_size(), sm_count=sms)
    pads = (plan.rows * plan.tiles, 2 * plan.block, plan.block_inner)
    use_int64 = max(_span(x3, pads), _span(o3, pads)) > _INT32_LIMIT
    sxo, sxn, sxi = x3.stride()
    soo, son, soi = o3.stride()
    log = bool(log)
    if plan.even and not (plan.kind == "rows"
                          and _fills_tiles(outer, n, plan.block, plan.rows * plan.tiles)):
        raise ValueError(f"an even plan needs rows of exactly {plan.block} elements in whole "
                         f"tiles of {plan.rows * plan.tiles} rows; got {outer} rows of {n}")
    # every launch dependent where the device allows it (opspec.kernels.pdl)
    pdl = overlap_options(x.device)
    align = row_multiple(x.element_size(), n, sxo, soo) if sxn == 1 and son == 1 else 1
    if plan.kind == "rows":
        # Replayed with x and out themselves, so only where x3 and o3 view them.
        _PREPARED.launch(key if x3.data_ptr() == x.data_ptr() else None, 2, _rows_kernel,
                         (plan.grid,), x3, o3, outer, n, sxo, sxn, soo, son,
                         ROWS=plan.rows, TILES=plan.tiles, BLOCK_N=plan.block, LOG=log,
                         USE_INT64=use_int64, EVEN=plan.even, ALIGN=align,
                         num_warps=plan.num_warps, **pdl)
    elif plan.kind == "looped":
        delay = 0
        if plan.stagger_steps > 1 and stagger_supported(x.device):
            delay = stagger_cycles(n * (x.element_size() + out.element_size()), plan.stagger)
        launch(_looped_kernel, (plan.grid,), x3, o3, outer, n, sxo, sxn, soo, son,
               BLOCK_R=plan.block // plan.vec, VEC=plan.vec, LOG=log,
               USE_INT64=use_int64, FFMA_LIMIT=FFMA_LIMIT[out.dtype], delay=delay,
               STAGGER_STEPS=plan.stagger_steps if delay > 0 else 0, ALIGN=align,
               num_warps=plan.num_warps, **pdl)
    elif plan.kind == "coop":
        # [ticket counter, arrivals per row] zeroed; then (max, sum) per chunk.
        cnt = torch.zeros(1 + outer, dtype=torch.int32, device=x.device)
        ws = torch.empty(2 * outer * plan.chunks, dtype=torch.float32, device=x.device)
        spin = _COOP_SPIN if x.device.type == "cuda" else 0
        launch(_coop_kernel, (plan.grid,), x3, o3, ws, cnt, outer, n, plan.chunks, spin,
               sxo, sxn, soo, son, BLOCK=plan.block, FB=min(plan.block, 1024),
               G_POW2=triton.next_power_of_2(plan.chunks), LOG=log,
               USE_INT64=use_int64, ALIGN=align, num_warps=plan.num_warps, **pdl)
    elif plan.kind == "split":
        ws = torch.empty(2 * outer * plan.chunks, dtype=torch.float32, device=x.device)
        launch(_split_partials_kernel, (plan.grid,), x3, o3, ws, outer, n, plan.chunks, sxo,
               sxn, CHUNK=plan.block, USE_INT64=use_int64, num_warps=plan.num_warps, **pdl)
        launch(_split_finish_kernel, (plan.grid,), x3, o3, ws, outer, n, plan.chunks, sxo,
               sxn, soo, son, CHUNK=plan.block, C_POW2=triton.next_power_of_2(plan.chunks),
               LOG=log, USE_INT64=use_int64, num_warps=plan.num_warps, **pdl)
    elif plan.kind == "strided":
        n_iblk = triton.cdiv(inner, plan.block_inner)
        if not plan.looped:
            bn2 = triton.next_power_of_2(n - plan.block) if n > plan.block else 0
            launch(_strided_tile_kernel, (plan.grid,), x3, o3, n, inner, n_iblk, sxo, sxn, sxi,
                   soo, son, soi, BLOCK_N=plan.block, BLOCK_N2=bn2,
                   BLOCK_I=plan.block_inner,
                   WHOLE=inner % plan.block_inner == 0 and plan.block <= n, LOG=log,
                   USE_INT64=use_int64, num_warps=plan.num_warps, **pdl)
        elif plan.chunks > 1 and plan.coop:
            ws_half = outer * plan.chunks * inner
            # [ticket counter, arrivals per strip] zeroed; then (max, sum) per chunk column.
            cnt = torch.zeros(1 + outer * n_iblk, dtype=torch.int32, device=x.device)
            ws = torch.empty(2 * ws_half, dtype=torch.float32, device=x.device)
            spin = _COOP_SPIN if x.device.type == "cuda" else 0
            launch(_strided_coop_kernel, (plan.grid,), x3, o3, ws, cnt, n, inner, n_iblk,
                   plan.chunks, ws_half, spin, sxo, sxn, sxi, soo, son, soi,
                   BLOCK_N=plan.block, BLOCK_I=plan.block_inner,
                   C_POW2=triton.next_power_of_2(plan.chunks),
                   FB=max(1, min(plan.block, 1024 // plan.block_inner)), LOG=log,
                   USE_INT64=use_int64 or 2 * ws_half > _INT32_LIMIT,
                   num_warps=plan.num_warps, **pdl)
        elif plan.chunks > 1:
            ws_half = outer * plan.chunks * inner
            ws = torch.empty(2 * ws_half, dtype=torch.float32, device=x.device)
            big = use_int64 or 2 * ws_half > _INT32_LIMIT
            for finish in (False, True):
                launch(_strided_split_kernel, (plan.grid,), x3, o3, ws, n, inner, n_iblk,
                       plan.chunks, ws_half, sxo, sxn, sxi, soo, son, soi, BLOCK_N=plan.block,
                       BLOCK_I=plan.block_inner,
                       C_POW2=triton.next_power_of_2(plan.chunks), FINISH=finish, LOG=log,
                       USE_INT64=big, num_warps=plan.num_warps, **pdl)
        else:
            launch(_strided_kernel, (plan.grid,), x3, o3, outer, n, inner, n_iblk, sxo, sxn,
                   sxi, soo, son, soi, BLOCK_N=plan.block, BLOCK_I=plan.block_inner,
                   LOOPED=plan.looped, LOG=log, USE_INT64=use_int64, num_warps=plan.num_warps,
                   **pdl)
    else:
        raise ValueError(f"unknown softmax plan kind {plan.kind!r}")
    return out
