"""Sum, mean and amax over any set of axes: a strided Triton reduction and its torch reference.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.reduction_impl`.

* :func:`reduction_reference` -- torch, fp32 accumulation (fp64 for a float64 result).
* :func:`reduction_triton` -- the Triton kernels, writing into a caller-given ``out``.

**Layout.** The input ``x`` (any strides) and the reduced axes are first collapsed in
Python (:func:`collapse`): axes of size 1 are dropped, kept axes that are adjacent in
memory order merge (``stride[a] == stride[b] * size[b]``), and so do reduced axes (in
decreasing stride order: the order of a sum does not matter). What remains is described by
at most two kept dimensions (``outer``, ``inner``) and one reduced dimension ``R``, each
with its element stride, so every element is at ``o * s_o + i * s_i + r * s_r``.  A layout
that does not collapse that far (reduced axes interleaved with kept ones in memory, e.g.
axes 0 and 2 of a contiguous ``[A, B, C]``) is copied once into ``[kept..., reduced...]``
order (``permute(...).contiguous()``), which does collapse.

Two kernels cover the collapsed layouts:

* **row** (``_row_reduce_kernel``): the reduced dimension is the innermost in memory (the
  per-token reductions over the hidden size or the vocabulary, and whole-tensor
  reductions).  A row of up to 32 KiB (16384 bf16 elements) is one block: a program loads
  its ``BLOCK_M`` rows whole, with no loop, and reduces them (a persistent reduction, as
  torch.compile's).  A longer row (or a chunk of a split one) is walked by one program in
  blocks of ``BLOCK_R`` elements, each read as an ``[UNROLL, BLOCK_R // UNROLL]`` tile
  (one 16-byte vector per thread and tile row) reduced within each thread into an
  accumulator of one tile row; every block but the last loads unmasked.
* **column** (``_col_reduce_kernel``): a kept dimension is the innermost in memory (column
  sums over tokens).  A program owns a strip of ``BLOCK_I`` contiguous columns of one
  outer index -- its warps side by side, each lane one 16-byte vector of every row -- and
  walks ``R`` in blocks of ``BLOCK_R`` rows, each thread adding its own rows into one
  accumulator per column (no shared memory, no barrier in the loop; a strip narrower than
  a warp's vectors keeps a 2-D ``[BLOCK_R, BLOCK_I]`` accumulator instead).  A short
  ``R`` is one block, no loop.

The row forms exist for ptxas: with a whole-block loop-carried accumulator and masked
loads it consumed each 16-byte load before issuing the next (one vector in flight per
thread; the bf16 row reductions ran at 1.7 to 3.4 TB/s on the H200); the loop-free blocks
and the small accumulators compile to all four loads of a step in flight (checked on
sm_90 builds by tests/test_reduction.py) and ran at 2.2 to 4.2 TB/s. The column loop's
former form (8 warps stacked over R, a 2-D accumulator) ran the bf16 [16384, 8192] column
sum in 102.7 us (eager 81.9 us); its sm_90 build now has a thread's 16 loads of a step in
flight. Both loops can load their next block ahead (``prefetch``, unrolled by two).

**Split reduction.** When the output is too small to give every one of the 132 SMs work
(a whole-tensor reduction has one output element) and a program would walk ``R`` in
several blocks, ``R`` is split into ``n_split`` chunks: each program writes one partial per
(output, chunk) into a float32 (float64) workspace. A row split finishes in the same
launch: each program then counts itself in on its row's arrival count, and the row's last
program reduces the row's partials in a fixed order, divides (mean), casts and writes the
result, and sets the count back to zero (the counts are kept per stream, so no launch
fills them; :func:`arrival_counts`). A column split, whose partials are a whole row of
columns per chunk, takes a second launch -- the same kernel, on the workspace; on sm_90
and later both launches are dependent ones (:mod:`opspec.kernels.pdl`), so the second
stage's programs are placed while the first stage ends and wait there for its writes
(every other launch here is a dependent one too, where the device allows it).
Either way the partials are added in a fixed order: deterministic, no atomics on the
values. The launch sizes follow in plain Python from the shape and one table of constants
(:data:`TUNING`; no autotuning at call time; :func:`plan_launch` says how).

**Numerics.** As torch: the input is cast to the result dtype first (``dtype=`` of sum and
mean), then accumulated in float32, or float64 for a float64 result; mean divides the sum
by the number of reduced elements.  amax is exact and propagates NaN.  An empty reduction
gives 0 (sum) or NaN (mean) without a launch; amax refuses it.  Offsets are computed in
int64 when an offset could reach ``2**31``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple

__all__ = [
    "REDUCTIONS",
    "Layout",
    "COL",
    "ColTuning",
    "Launch",
    "ROW",
    "RowTuning",
    "TUNING",
    "Tuning",
    "accumulate_dtype",
    "arrival_counts",
    "collapse",
    "normalize_axes",
    "plan_launch",
    "reduced_shape",
    "reduction_reference",
    "reduction_triton",
]

#: The reductions these kernels compute.
REDUCTIONS = ("sum", "mean", "amax")

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
              torch.float32: tl.float32, torch.float64: tl.float64}
_REDUCE_CODE = {"sum": 0, "mean": 1, "amax": 2}

# -- tuning: the one block of launch constants ---------------------------------------------------
#
# Every launch size below is derived from these constants and the shape, in plain Python (no
# autotuning at call time). benchmarks/reduction_sweep.py times alternatives on the H200 and
# says which field to change. Background for the choices: an H200 needs about 40 KB of loads
# outstanding per SM to keep HBM busy (4.2 TB/s times a loaded DRAM latency of ~1.2 us,
# over 132 SMs); a program holds at most 255 registers a thread, an SM 64K.

class RowTuning(NamedTuple):
    """The row kernel: the reduced dimension is the innermost in memory."""

    #: Input bytes a loop step loads (one program): 16 KiB at 8 warps and 64 bytes a thread.
    tile_bytes: int
    #: Bytes a thread loads per step (one 16-byte vector per tile row): sets the warps.
    bytes_per_thread: int
    #: Rows up to this many bytes (rounded up to a power of 2) are one block, no loop.
    one_block_max_bytes: int
    #: A one-block program takes several short rows until it holds this many bytes.
    one_block_min_bytes: int
    #: A split (2-stage) grid holds at most this many programs per SM, all resident at once.
    split_programs_per_sm: int
    #: A split is worth its second launch only when a program would walk R in this many
    #: steps or more.
    split_min_steps: int
    #: Loop steps load the next block before reducing the current one (two blocks in flight
    #: per thread instead of one).
    prefetch: bool
    #: A split's partials are reduced by the last of a row's programs to finish (an arrival
    #: count a row), in the same launch, instead of by a second launch.
    finish_in_place: bool = True
    #: Unsplit looped rows of 4-byte elements step through tiles of this many bytes at
    #: ``wide_bytes_per_thread`` a thread instead (0: as 16-bit rows).
    wide_tile_bytes: int = 0
    wide_bytes_per_thread: int = 0


class ColTuning(NamedTuple):
    """The column kernel: a kept dimension is the innermost in memory ([R, C] reduced over R)."""

    #: Warps side by side across the columns: a program owns a strip of warps * 512 bytes of
    #: every row (32 lanes x 16 bytes a warp), and the reduction over R stays inside each
    #: thread (no shared memory, no barrier in the loop).
    warps: int
    #: Rows a loop step loads: 16-byte loads per thread issued together.
    rows_per_step: int
    #: R is split (2 stages) until the grid holds about this many programs per SM.
    programs_per_sm: int
    #: ... but a split chunk keeps at least this many steps (partials cost a write and a read).
    min_steps: int
    #: Loop steps load the next rows before adding the current ones.
    prefetch: bool
    #: R up to this many rows (rounded up to a power of 2) is one block, no loop.
    one_block_max_rows: int
    #: Elements of a one-block tile (the block's width follows from its height).
    one_block_elems: int
    #: The second stage (the partials of a split, n_split rows) is one block up to this many.
    stage2_max_rows: int
    #: A split's second launch overlaps the first's end where the device allows it
    #: (opspec.kernels.pdl), instead of starting after it.
    overlap_stages: bool = True


class Tuning(NamedTuple):
    row: RowTuning
    col: ColTuning


#: Rows: the plan measured on the H200 ([2048, 128256] bf16 rows at 4.2 TB/s; one-block rows
#: of up to 32 KiB beat torch.compile's persistent reduction; whole-tensor reductions of
#: 537 MB at 4.1 TB/s). The prefetch was off at first: on the sm_90 build it raises the
#: split loop's 8-warp program from 40 to 72 registers a thread, so 3 programs fit an SM
#: instead of the 4 the split grid is sized for (a partial second wave); timed since, it
#: wins anyway (below).
#: Open: rows of 7168 (DeepSeek-V3's hidden size; a one-block row padded to 8192) trail
#: torch.compile (mean of [8192, 7168] bf16 -> f32: 37.6 against 31.8 us; sum of
#: [4096, 7168]: 22.4 / 19.2), whose kernel there loops one row a program in 2048-element
#: blocks at 16 warps (benchmarks/inductor_code.py); no variant of this table beat it, nor
#: did that layout here (looped 2048- or 4096-element blocks at 16 warps: 49.9 and 44.0 us
#: on the mean row) or one block at 16 warps (37.7 against the table's 38.0). Nor is it the
#: padding: the row read as 7 unmasked pieces of 1024 combined elementwise (4 warps, one
#: 16-byte vector a thread and piece) ran the amax of [8192, 7168] rows in 37.5 us, as the
#: padded block does (compile 36.8), and the [8192, 3584] sum in 22.4 against 22.2 (H200,
#: benchmarks/reduction_sweep.py, 2026-11-30); not kept.
#: A row split finished in place by each row's last program, against a second launch
#: (H200, benchmarks/reduction_sweep.py, 2026-12-01, side by side): amax of [8192, 7168]
#: bf16 40.9 against 41.9 us, of [32768, 8192] 134.8 / 135.5, of [16, 4096] 6.5 / 7.1; mean
#: of [32, 1, 128256] bf16 rows 9.2 / 10.3; sum of [128, 4096] fp32 7.1 / 7.6.
#: prefetch on (H200, benchmarks/tie_probe.py, 2026-12-01, us, two runs of the first row):
#: amax of [32768, 8192] bf16 123.0 / 125.4 against 125.9 / 128.1 without (torch.compile
#: 123.7 / 125.2), of [8192, 7168] 32.5 / 33.7 (compile 33.7); sum of [8192, 14336] bf16
#: 58.1 / 58.2, float32 109.5 / 109.6; mean of [2048, 128256] rows bf16 120.5 / 121.0,
#: float32 237.0 / 237.3: never slower. Smaller tiles on more programs (4 or 8 KiB, 8 or 16
#: programs an SM, as torch.compile's 2048 programs of 4 KiB steps) won the amax rows by
#: as much and lost 1-3 % on the sums.
#: Unsplit float32 rows looped in 32 KiB tiles at 128 bytes a thread (wide_tile_bytes;
#: H200, benchmarks/reduction_sweep.py and the bench, 2026-12-01): the mean of [2048,
#: 128256] float32 rows took 257.5 us in 16 KiB tiles (eager 239.2, compile 236.0; 237.1
#: in an earlier run of the same build on another H200), 233.6-233.9 in 32 KiB ones. Those
#: tiles for every dtype lost up to 7 % on small and 16-bit rows (decode [16, 4096] amax
#: 5.7 -> 6.1 us, [4096, 4096] sum 11.8 -> 12.1), and on the float32 whole-tensor splits
#: (the mean of [2048, 128256] 231.1 -> 249.5, the sum of [8192, 14336] 107.7 -> 113.4),
#: so only unsplit 4-byte rows take them.
ROW = RowTuning(tile_bytes=16384, bytes_per_thread=64, one_block_max_bytes=32768,
                one_block_min_bytes=8192, split_programs_per_sm=4, split_min_steps=4,
                prefetch=True, finish_in_place=True, wide_tile_bytes=32768,
                wide_bytes_per_thread=128)
#: Columns: the former kernel (a [32, 256] bf16 tile, 8 warps stacked over R, a 2-D fp32
#: accumulator of 32 registers a thread, about 8 programs an SM) ran the [16384, 8192] bf16
#: column sum at 2.6 TB/s, 0.8x eager. Here 4 warps sit side by side over 2 KiB of each row
#: and each thread adds its own 16 rows x 16 bytes a step: on the sm_90 build all 16 loads
#: are in flight together (14 for float32) at 95 (76) registers a thread, no shared memory
#: in the loop; 32 KiB a program, 4 programs an SM, 128 KiB in flight per SM (about 3x what
#: HBM needs). The prefetch variant reached only 8 loads in flight in bf16 at 8 rows a
#: step (ptxas reuses the registers) and 148 registers at 16. Chunks of at least 8 steps
#: (128 rows) keep the partials (fp32, one row per chunk) at most ~1.6 % of the input bytes.
#: H200 sweep (benchmarks/reduction_sweep.py, 2026-11-30): 8 rows a step with the next
#: step loaded ahead beat 16 without on all 6 column rows (geomean 1.165x; none slower):
#: [16384, 8192] bf16 sum 76.1 us (3.53 TB/s) against eager 82.6 and compile 78.1,
#: [4, 2048, 4096] bf16 -> f32 over (0, 1) 29.2 against 37.2 / 87.6, [16384, 4096] bf16
#: amax 45.8 against 70.8 / 46.3. Again with the clean L2 flush (same script, 2026-12-01),
#: the [16384, 4096] bf16 column mean: the table 36.7 us (compile 40.4), the best variant
#: within 0.3 % (8 warps, 2 programs an SM), the others 2-11 % slower.
#: The second stage costs: the [16384, 4096] bf16 column mean took 38.1-38.7 us where its
#: first stage alone took 33.7-34.2 (ncu: 33.3 us, then 3.4 us for the second kernel). Its
#: launch made dependent on the first (overlap_stages; H200, benchmarks/col_probe.py,
#: 2026-12-01, two runs, us): mean 38.7 / 36.9 -> 35.3 / 35.8, amax 37.0 / 38.6 -> 36.3 /
#: 35.4, [8192, 4096] bf16 -> f32 sum 24.1 -> 21.0, [16384, 8192] bf16 sum 67.0 -> 65.6,
#: float32 amax of [16384, 4096] 66.0 -> 65.0. Not kept: the split finished in place by
#: each strip's last program (as the row split is; one launch): with the table's strips
#: (128 chunks of 1 KiB columns) that program reads 512 KiB of partials, 50 us against
#: 38; in two levels (groups of 4-16 chunks, then the groups) 38.3-43.5; with strips of
#: 128-1024 bytes, whose finish reads little, the first stage itself ran 3-20 % slower.
COL = ColTuning(warps=4, rows_per_step=8, programs_per_sm=4, min_steps=8, prefetch=True,
                one_block_max_rows=32, one_block_elems=4096, stage2_max_rows=256)
TUNING = Tuning(ROW, COL)

_INT32_LIMIT = INT32_LIMIT


# -- axes and shapes --------------------------------------------------------------------------

def normalize_axes(dim, rank: int) -> tuple[int, ...]:
    """The reduced axes of `dim` for an input of rank `rank`, sorted and non-negative.

    `None` and an empty list or tuple reduce every axis (torch.sum's and torch.amax's
    reading); at rank 0, `0` and `-1` name the scalar's axis and the result is `()`.
    An axis out of range raises IndexError, an axis named twice ValueError (as torch).
    """
    if dim is None:
        return tuple(range(rank))
    listed = (dim,) if isinstance(dim, int) else tuple(dim)
    if not listed:
        return tuple(range(rank))
    lo, hi = (-1, 1) if rank == 0 else (-rank, rank)
    seen = []
    for a in listed:
        if isinstance(a, bool) or not isinstance(a, int) or not lo <= a < hi:
            raise IndexError(f"dimension {a!r} is out of range for a tensor of rank {rank} "
                             f"(expected an int in [{lo}, {hi - 1}])")
        a = a % rank if rank else 0
        if a in seen:
            raise ValueError(f"dimension {a} appears more than once in dim={dim!r}")
        seen.append(a)
    return tuple(sorted(seen)) if rank else ()


def reduced_shape(shape, axes: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    """`shape` with `axes` removed, or set to 1 when `keepdim`."""
    red = set(axes)
    return tuple(1 if i in red else n for i, n in enumerate(shape) if keepdim or i not in red)


def _narrowing(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether casting `src` to `dst` can change a value (then torch's cast-first matters)."""
    if src == dst:
        return False
    wider = {torch.float16: (torch.float32, torch.float64),
             torch.bfloat16: (torch.float32, torch.float64),
             torch.float32: (torch.float64,)}
    return dst not in wider.get(src, ())


def accumulate_dtype(reduction: str, in_dtype: torch.dtype, out_dtype: torch.dtype) -> torch.dtype:
    """float64 for a float64 result (amax: a float64 input), else float32."""
    wide = in_dtype if reduction == "amax" else out_dtype
    return torch.float64 if wide == torch.float64 else torch.float32


# -- the torch reference ----------------------------------------------------------------------

def reduction_reference(reduction: str, x: torch.Tensor, axes: tuple[int, ...],
                        out_dtype: torch.dtype) -> torch.Tensor:
    """`reduction` of `x` over `axes` (keepdim=False), computed as the kernels do.

    sum and mean cast `x` to `out_dtype`, accumulate in float32 (float64 for a float64
    result) and cast the result to `out_dtype`; amax is exact (`out_dtype` is x's dtype).
    `axes` are normalized (:func:`normalize_axes`); `()` at rank 0 is the scalar itself.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    dims = list(axes)
    if reduction == "amax":
        if x.dim() == 0:
            return x.clone()
        return torch.amax(x, dim=dims)
    acc = accumulate_dtype(reduction, x.dtype, out_dtype)
    xs = x.to(out_dtype) if _narrowing(x.dtype, out_dtype) else x
    xs = xs.to(acc)
    if x.dim() == 0:
        return xs.to(out_dtype)
    r = torch.sum(xs, dim=dims) if reduction == "sum" else torch.mean(xs, dim=dims)
    return r.to(out_dtype)


# -- collapsing the layout --------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """The input as `x[o, r, i] = base[o * s_o + r * s_r + i * s_i]` (element strides), with
    the output row-major over the kept dimensions: `kept` holds one `(size, stride)` per
    kept dimension after merging, in output order (0, 1 or 2 of them)."""

    kept: tuple[tuple[int, int], ...]
    R: int
    s_r: int

    @property
    def n_out(self) -> int:
        return math.prod(n for n, _ in self.kept)


def _merge(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge neighbours `(n1, s1), (n2, s2)` into `(n1 * n2, s2)` where `s1 == s2 * n2`."""
    out: list[tuple[int, int]] = []
    for n, s in dims:
        if out and out[-1][1] == s * n:
            out[-1] = (out[-1][0] * n, s)
        else:
            out.append((n, s))
    return out


def collapse(shape, strides, axes: tuple[int, ...]) -> Layout | None:
    """The collapsed layout of a tensor of `shape` and `strides` reduced over `axes`, or
    None when more than two kept or one reduced dimension remain (the caller copies)."""
    red_set = set(axes)
    kept = [(n, s) for i, (n, s) in enumerate(zip(shape, strides)) if i not in red_set and n != 1]
    red = [(n, s) for i, (n, s) in enumerate(zip(shape, strides)) if i in red_set and n != 1]
    kept = _merge(kept)
    red = _merge(sorted(red, key=lambda t: -t[1]))
    if len(kept) > 2 or len(red) > 1:
        return None
    R, s_r = red[0] if red else (1, 0)
    return Layout(tuple(kept), R, s_r)


# -- launch sizes -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """One stage-1 launch: `kind` 'row' or 'col', block sizes, warps, and the split of R
    (`n_split` chunks of `r_per_split`; 1 chunk: no second stage). `one_block`: R fits in
    one block and is not split, so the kernel reduces a register-resident block without a
    loop (a persistent reduction). `unroll`: the row loop's sub-blocks per step.
    `acc_2d`: the column loop keeps a whole-tile accumulator (its tile is narrower than a
    warp's 16-byte vectors, so rows share a warp), else one per column. `prefetch`: the loop
    loads its next block ahead."""

    kind: str
    block_m: int  # rows per program (row kernel); unused by the column kernel
    block_r: int
    block_i: int  # columns per program (column kernel); unused by the row kernel
    num_warps: int
    n_split: int
    r_per_split: int
    one_block: bool = False
    unroll: int = 1
    acc_2d: bool = False
    prefetch: bool = False


@functools.lru_cache(maxsize=None)
def _sm_count(index: int | None) -> int:
    if index is None or not torch.cuda.is_available():
        return 132  # the interpreter: size as for an H200
    return torch.cuda.get_device_properties(index).multi_processor_count


def plan_launch(layout: Layout, elem_size: int, sm_count: int = 132,
                num_splits: int | None = None, tuning: Tuning | None = None, *,
                stage2: bool = False) -> Launch:
    """The stage-1 launch for `layout` (R >= 2), from the shape and `tuning` (default
    :data:`TUNING`) alone. `num_splits` forces a split count (clamped to one block per
    chunk); `stage2`: the layout is the partials of a split (one block when it fits)."""
    return _plan(layout, elem_size, sm_count, num_splits, tuning or TUNING, stage2)


@functools.lru_cache(maxsize=4096)
def _plan(layout: Layout, elem_size: int, sm_count: int, num_splits: int | None,
          tuning: Tuning, stage2: bool) -> Launch:
    """See :func:`plan_launch` (cached: asked at every call).

    Row kernel (the reduced stride is the smallest, or nothing is kept):

    * R of at most `one_block_max_bytes` (16384 bf16 elements): one block holds the whole
      row, no loop. Measured on the H200 (an earlier looped kernel): [4096, 4096] bf16
      rows took 19.9 us against torch.compile's 14.8 us (one row per program, the row in
      registers); the loop's carried accumulator and masked loads made ptxas consume each
      16-byte load before issuing the next, where the loop-free form issues all of a
      thread's loads first. One row per program (several when a row is under
      `one_block_min_bytes`, as long as the grid keeps 4 programs per SM).
    * Longer rows: a loop over `tile_bytes` blocks, unmasked but for the last block, so
      that a thread's loads of a step are in flight together (the bf16 vocabulary rows
      [2048, 128256] ran at 3.3 TB/s with serialised loads, 4.2 TB/s without).

    Column kernel (a kept dimension is innermost): `warps` warps side by side over a strip
    of `warps * 512` bytes of each row, `rows_per_step` rows a step; a strip narrower than
    a warp's vectors (few columns) puts several rows in a warp and keeps a 2-D
    accumulator. R of at most `one_block_max_rows` (or a second stage of at most
    `stage2_max_rows` partial rows) is one block of about `one_block_elems` elements: one
    load round trip, many narrow programs.

    Split: R is split into chunks of whole blocks when the unsplit grid would leave SMs
    idle: rows up to `split_programs_per_sm` programs per SM when a program would walk R
    in `split_min_steps` blocks or more; columns up to `programs_per_sm` programs per SM,
    keeping `min_steps` blocks a chunk and at most `stage2_max_rows` chunks.
    """
    R = layout.R
    kept_strides = [s for _, s in layout.kept]
    n_out = layout.n_out
    forced = num_splits is not None
    if not kept_strides or layout.s_r <= min(kept_strides):
        t = tuning.row
        target = t.split_programs_per_sm * sm_count
        tile = max(16, t.tile_bytes // elem_size)
        block_i = 1
        row_elems = triton.next_power_of_2(R)
        one = row_elems * elem_size <= t.one_block_max_bytes and (num_splits or 1) == 1
        if one:
            block_r, block_m = row_elems, 1
            cap = triton.next_power_of_2(n_out)
            while (block_m * row_elems * elem_size < t.one_block_min_bytes and block_m < cap
                   and triton.cdiv(n_out, 2 * block_m) >= 4 * sm_count):
                block_m *= 2
        else:
            block_r, block_m = min(row_elems, tile), 1
        n_base = triton.cdiv(n_out, block_m)
        steps = triton.cdiv(R, block_r)
        if forced:
            n_split = max(1, min(num_splits, steps))
        elif n_base < 2 * sm_count and steps >= t.split_min_steps:
            n_split = max(2, min(target // n_base, steps))
        else:
            n_split = 1
        per_thread = t.bytes_per_thread
        if n_split == 1 and not one and elem_size == 4 and t.wide_tile_bytes:
            # unsplit looped rows of 4-byte elements: the wider tile (see ROW)
            block_r = min(row_elems, t.wide_tile_bytes // elem_size)
            per_thread = t.wide_bytes_per_thread
        tile_bytes = block_m * block_r * elem_size
        # `per_thread` bytes a thread (a 32 KiB one-block row: 128), 1 to 8 warps.
        num_warps = max(1, min(8, tile_bytes // (per_thread * 32)))
        r_per_split = triton.cdiv(triton.cdiv(R, n_split), block_r) * block_r
        n_split = triton.cdiv(R, r_per_split)
        unroll = max(1, min(per_thread // 16, block_r))
        return Launch("row", block_m, block_r, block_i, num_warps, n_split, r_per_split,
                      one_block=n_split == 1 and block_r >= R, unroll=unroll,
                      prefetch=t.prefetch)

    t = tuning.col
    vec = max(1, 16 // elem_size)
    inner = min(range(len(layout.kept)), key=lambda k: layout.kept[k][1])
    I = layout.kept[inner][0]
    n_outer = n_out // I
    i_pow2 = triton.next_power_of_2(I)
    width = t.warps * 32 * vec
    r_pow2 = triton.next_power_of_2(R)
    if (num_splits or 1) == 1 and (r_pow2 <= t.one_block_max_rows
                                   or (stage2 and R <= t.stage2_max_rows)):
        # One block of R: [r_pow2, block_i] in one load round trip, cut narrow so that many
        # programs share the columns (a second stage of 64 x 8192 partials: 128 programs).
        block_i = max(min(i_pow2, vec), min(i_pow2, width, t.one_block_elems // r_pow2))
        tile = r_pow2 * block_i
        num_warps = max(1, min(8, tile // (32 * 16)))  # about 16 elements a thread
        return Launch("col", 1, r_pow2, block_i, num_warps, 1, R, one_block=True)
    block_i = min(i_pow2, width)
    num_warps = max(1, block_i // (32 * vec))
    # Narrow strips (fewer columns than a warp's lanes x vectors) stack rows in a warp: the
    # tile keeps warps * 32 * vec * rows_per_step elements, reduced over R at the end.
    acc_2d = block_i < 32 * vec
    block_r = t.rows_per_step * max(1, (num_warps * 32 * vec) // block_i)
    steps = triton.cdiv(R, block_r)
    n_base = n_outer * triton.cdiv(I, block_i)
    target = t.programs_per_sm * sm_count
    if forced:
        n_split = max(1, min(num_splits, steps))
    elif n_base < target and steps >= 2 * t.min_steps:
        n_split = min(triton.cdiv(target, n_base), steps // t.min_steps, t.stage2_max_rows)
    else:
        n_split = 1
    r_per_split = triton.cdiv(triton.cdiv(R, n_split), block_r) * block_r
    n_split = triton.cdiv(R, r_per_split)
    return Launch("col", 1, block_r, block_i, num_warps, n_split, r_per_split,
                  one_block=n_split == 1 and block_r >= R, acc_2d=acc_2d, prefetch=t.prefetch)


# -- the kernels ------------------------------------------------------------------------------

@triton.jit
def _max_nan(a, b):
    # torch.amax propagates NaN: max.NaN (tl.max alone would drop a NaN).
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _load_raw(ptrs, mask, REDUCE: tl.constexpr, MASKED: tl.constexpr):
    """A block of x in its own dtype; masked-off elements are the identity."""
    if MASKED:
        if REDUCE == 2:
            v = tl.load(ptrs, mask=mask, other=float("-inf"))
        else:
            v = tl.load(ptrs, mask=mask, other=0.0)
    else:
        v = tl.load(ptrs)
    return v


@triton.jit
def _to_acc(v, REDUCE: tl.constexpr, CAST_TY: tl.constexpr, ACC_TY: tl.constexpr):
    """A loaded block as ACC_TY, cast to CAST_TY first (sum and mean's result dtype)."""
    if REDUCE != 2:
        if CAST_TY is not None:
            v = v.to(CAST_TY)  # rounds to nearest even on GPUs
    return v.to(ACC_TY)


@triton.jit
def _load_acc(ptrs, mask, REDUCE: tl.constexpr, CAST_TY: tl.constexpr, ACC_TY: tl.constexpr,
              MASKED: tl.constexpr):
    return _to_acc(_load_raw(ptrs, mask, REDUCE, MASKED), REDUCE, CAST_TY, ACC_TY)


@triton.jit
def _combine(acc, v, REDUCE: tl.constexpr):
    if REDUCE == 2:
        return _max_nan(acc, v)
    return acc + v


@triton.jit
def _reduce(v, AXIS: tl.constexpr, REDUCE: tl.constexpr):
    if REDUCE == 2:
        return tl.reduce(v, AXIS, _max_nan)
    return tl.sum(v, axis=AXIS)


@triton.jit
def _step(acc, v, REDUCE: tl.constexpr, CAST_TY: tl.constexpr, ACC_TY: tl.constexpr,
          ACC_2D: tl.constexpr):
    """acc combined with a raw block v: elementwise (a whole-block accumulator) or after
    reducing v over its axis 0 (which the plans keep inside each thread)."""
    v = _to_acc(v, REDUCE, CAST_TY, ACC_TY)
    if ACC_2D:
        return _combine(acc, v, REDUCE)
    return _combine(acc, _reduce(v, 0, REDUCE), REDUCE)


@triton.jit
def _block_stride(s_r, BLOCK_R: tl.constexpr, USE_INT64: tl.constexpr):
    """BLOCK_R * s_r, in int64 when offsets may pass 2**31."""
    # One return: Triton types every return of a function, a constexpr branch's too
    # (int64 and int32 returns failed to compile; the interpreter does not check).
    if USE_INT64:
        stride = (tl.zeros([], tl.int64) + s_r) * BLOCK_R
    else:
        stride = s_r * BLOCK_R
    return stride


@triton.jit
def _stream(acc, ptrs, mask, stride, n_blocks, REDUCE: tl.constexpr, CAST_TY: tl.constexpr,
            ACC_TY: tl.constexpr, ACC_2D: tl.constexpr, MASKED: tl.constexpr,
            PREFETCH: tl.constexpr):
    """acc combined with the n_blocks blocks at ptrs, ptrs + stride, ... (mask: the same
    for every block, used when MASKED).

    PREFETCH: two blocks in flight per thread. The loop is unrolled by two so that each
    load writes registers whose previous value is already consumed: a block carried from
    one iteration to the next as `v = nxt` needs a register copy at the loop's end, and
    that copy waits for the load (ptxas did so: one block in flight, as without prefetch).
    """
    if PREFETCH:
        if n_blocks > 0:
            a = _load_raw(ptrs, mask, REDUCE, MASKED)
            for k in range(1, n_blocks - 1, 2):
                b = _load_raw(ptrs + k * stride, mask, REDUCE, MASKED)
                acc = _step(acc, a, REDUCE, CAST_TY, ACC_TY, ACC_2D)
                a = _load_raw(ptrs + (k + 1) * stride, mask, REDUCE, MASKED)
                acc = _step(acc, b, REDUCE, CAST_TY, ACC_TY, ACC_2D)
            if n_blocks % 2 == 0:
                b = _load_raw(ptrs + (n_blocks - 1) * stride, mask, REDUCE, MASKED)
                acc = _step(acc, a, REDUCE, CAST_TY, ACC_TY, ACC_2D)
                a = b
            acc = _step(acc, a, REDUCE, CAST_TY, ACC_TY, ACC_2D)
    else:
        for k in range(0, n_blocks):
            v = _load_raw(ptrs + k * stride, mask, REDUCE, MASKED)
            acc = _step(acc, v, REDUCE, CAST_TY, ACC_TY, ACC_2D)
    return acc


@triton.jit
def _row_reduce_kernel(
    x_ptr, out_ptr,
    n_rows, R, I, s_o, s_i, s_r,
    r_per_split, os_m, os_s, n_div,
    REDUCE: tl.constexpr,      # 0 sum, 1 mean, 2 max
    FINAL: tl.constexpr,       # divide (mean) and write the result, else a partial
    CAST_TY: tl.constexpr,     # the result dtype the input is cast to first, or None
    ACC_TY: tl.constexpr,
    HAS_INNER: tl.constexpr,   # two kept dimensions: row m is (m // I, m % I)
    BLOCK_M: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ONE_BLOCK: tl.constexpr,   # R <= BLOCK_R, not split: no loop
    UNROLL: tl.constexpr,      # sub-blocks per step of the loop
    EVEN_M: tl.constexpr,      # n_rows % BLOCK_M == 0
    USE_INT64: tl.constexpr,
    PREFETCH: tl.constexpr = False,  # the loop loads its next block before adding this one
    cnt_ptr=None, fin_ptr=None,      # FINISH: arrival counts a row (zero), the result
    FINISH: tl.constexpr = False,    # the row's last program reduces its partials
    NS_POW2: tl.constexpr = 1,       # FINISH: the split count rounded up to a power of 2
    FIN_MEAN: tl.constexpr = False,  # FINISH: divide the total by n_div
    ALIGN: tl.constexpr = 1,         # divides R, the split and the row strides (s_r == 1)
    PDL: tl.constexpr = False,       # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # rebuilt as multiples the host checked (opspec.kernels.tiling.row_multiple), so that
    # rows of 1000 elements, or views of longer rows, load in vectors
    if ALIGN > 1:
        R = as_multiple(R, ALIGN)
        s_o = as_multiple(s_o, ALIGN)
        s_i = as_multiple(s_i, ALIGN)
        r_per_split = as_multiple(r_per_split, ALIGN)
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    if USE_INT64:
        pid_m = pid_m.to(tl.int64)
        pid_s = pid_s.to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    # Rows past the end read the last row again (loads stay unmasked); their store is masked.
    src = rows if EVEN_M else tl.minimum(rows, n_rows - 1)
    if HAS_INNER:
        base = (src // I) * s_o + (src % I) * s_i
    else:
        base = src * s_o
    cols = tl.arange(0, BLOCK_R)
    if USE_INT64:
        cols = cols.to(tl.int64)
    if ONE_BLOCK:
        # The whole row in registers: every load issued before the first add.
        v = _load_acc(x_ptr + base[:, None] + cols[None, :] * s_r, (cols < R)[None, :],
                      REDUCE, CAST_TY, ACC_TY, True)
        res = _reduce(v, 1, REDUCE)
    else:
        # One row per program (the plan's loop layouts are long rows).
        tl.static_assert(BLOCK_M == 1)
        if HAS_INNER:
            base1 = (pid_m // I) * s_o + (pid_m % I) * s_i
        else:
            base1 = pid_m * s_o
        r_start = pid_s * r_per_split
        r_stop = tl.minimum(r_start + r_per_split, R)
        # Chunks are whole blocks: only the last block of R can be partial. A block is read
        # as an [UNROLL, BLOCK_R // UNROLL] tile (one 16-byte vector per thread and row of
        # the tile), reduced over its rows within each thread into an accumulator of one
        # row: full blocks load unmasked, and the small accumulator lets ptxas issue every
        # load of a step before the first add (with a whole-block accumulator and masked
        # loads it consumed each load before issuing the next).
        r_full = r_start + (r_stop - r_start) // BLOCK_R * BLOCK_R
        blk = (tl.arange(0, UNROLL)[:, None] * (BLOCK_R // UNROLL)
               + tl.arange(0, BLOCK_R // UNROLL)[None, :])
        if USE_INT64:
            blk = blk.to(tl.int64)
        if REDUCE == 2:
            acc = tl.full([BLOCK_R // UNROLL], float("-inf"), ACC_TY)
        else:
            acc = tl.zeros([BLOCK_R // UNROLL], ACC_TY)
        acc = _stream(acc, x_ptr + base1 + (r_start + blk) * s_r, None,
                      _block_stride(s_r, BLOCK_R, USE_INT64), (r_full - r_start) // BLOCK_R,
                      REDUCE, CAST_TY, ACC_TY, False, False, PREFETCH)
        if r_full < r_stop:
            rc = r_full + blk
            v = _load_acc(x_ptr + base1 + rc * s_r, rc < r_stop, REDUCE, CAST_TY, ACC_TY, True)
            acc = _combine(acc, _reduce(v, 0, REDUCE), REDUCE)
        res = _reduce(acc, 0, REDUCE)
    if FINAL:
        if REDUCE == 1:
            res = res / n_div
    tl.store(out_ptr + rows * os_m + pid_s * os_s, res.to(out_ptr.dtype.element_ty), mask=row_mask)
    if FINISH:
        # A split of one row a program (BLOCK_M 1): count this program in once its partial
        # is stored (the barrier orders every thread's store before the count's release);
        # the row's last arrival reduces the row's partials in a fixed order, writes the
        # result and sets the count back to 0 for the next launch.
        tl.debug_barrier()
        n_split = tl.num_programs(1)
        arrived = tl.atomic_add(cnt_ptr + pid_m, 1, sem="acq_rel")
        if arrived == n_split - 1:
            k = tl.arange(0, NS_POW2)
            if USE_INT64:
                k = k.to(tl.int64)
            # volatile: bypass L1, which may hold an older copy of the partials' lines
            if REDUCE == 2:
                part = tl.load(out_ptr + pid_m * os_m + k * os_s, mask=k < n_split,
                               other=float("-inf"), volatile=True)
            else:
                part = tl.load(out_ptr + pid_m * os_m + k * os_s, mask=k < n_split, other=0.0,
                               volatile=True)
            tot = _reduce(part, 0, REDUCE)
            if FIN_MEAN:
                tot = tot / n_div
            tl.store(fin_ptr + pid_m, tot.to(fin_ptr.dtype.element_ty))
            tl.atomic_xchg(cnt_ptr + pid_m, 0)


@triton.jit
def _col_reduce_kernel(
    x_ptr, out_ptr,
    I, R, s_o, s_i, s_r, n_i_blocks,
    r_per_split, os_o, os_i, os_s, n_div,
    REDUCE: tl.constexpr,
    FINAL: tl.constexpr,
    CAST_TY: tl.constexpr,
    ACC_TY: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_I: tl.constexpr,
    ONE_BLOCK: tl.constexpr,   # R <= BLOCK_R, not split: no loop
    USE_INT64: tl.constexpr,
    EVEN_I: tl.constexpr = False,    # I % BLOCK_I == 0: no column mask
    ACC_2D: tl.constexpr = True,     # a [BLOCK_R, BLOCK_I] accumulator, else [BLOCK_I]
    PREFETCH: tl.constexpr = False,  # the loop loads its next rows before adding these
    ALIGN: tl.constexpr = 1,         # divides I and the row strides (s_i == os_i == 1)
    PDL: tl.constexpr = False,       # one of an overlapped launch pair (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # as in the row kernel: columns of 1000, or rows of a view of longer ones, in vectors
    if ALIGN > 1:
        I = as_multiple(I, ALIGN)
        s_o = as_multiple(s_o, ALIGN)
        s_r = as_multiple(s_r, ALIGN)
        os_o = as_multiple(os_o, ALIGN)
        os_s = as_multiple(os_s, ALIGN)
    pid = tl.program_id(0)
    pid_s = tl.program_id(1)
    if USE_INT64:
        pid = pid.to(tl.int64)
        pid_s = pid_s.to(tl.int64)
    o = pid // n_i_blocks
    cols = (pid % n_i_blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_mask = cols < I
    base = o * s_o + cols * s_i
    rr = tl.arange(0, BLOCK_R)
    if USE_INT64:
        rr = rr.to(tl.int64)
    if ONE_BLOCK:
        v = _load_acc(x_ptr + rr[:, None] * s_r + base[None, :],
                      (rr < R)[:, None] & col_mask[None, :], REDUCE, CAST_TY, ACC_TY, True)
        res = _reduce(v, 0, REDUCE)
    else:
        # The plan makes BLOCK_I = num_warps * 32 lanes * one 16-byte vector (unless I is
        # narrower), so Triton lays the warps side by side along the contiguous columns and
        # each thread holds its vector of every row of the block: the reduction over the
        # block's rows is a few adds inside each thread, and the loop needs no shared memory
        # and no barrier. (A 3-D [UNROLL, BLOCK_R // UNROLL, BLOCK_I] tile, tried before,
        # put the contiguous axis off the fast lanes: 10x slower on the H200.)
        r_start = pid_s * r_per_split
        r_stop = tl.minimum(r_start + r_per_split, R)
        r_full = r_start + (r_stop - r_start) // BLOCK_R * BLOCK_R
        # Full blocks: unmasked when the strip is whole (every row of a chunk but the last
        # block of R), else masked on the columns only.
        full_mask = tl.broadcast_to(col_mask[None, :], [BLOCK_R, BLOCK_I])
        if ACC_2D:
            if REDUCE == 2:
                acc = tl.full([BLOCK_R, BLOCK_I], float("-inf"), ACC_TY)
            else:
                acc = tl.zeros([BLOCK_R, BLOCK_I], ACC_TY)
        else:
            if REDUCE == 2:
                acc = tl.full([BLOCK_I], float("-inf"), ACC_TY)
            else:
                acc = tl.zeros([BLOCK_I], ACC_TY)
        ptrs = x_ptr + (r_start + rr)[:, None] * s_r + base[None, :]
        acc = _stream(acc, ptrs, full_mask, _block_stride(s_r, BLOCK_R, USE_INT64),
                      (r_full - r_start) // BLOCK_R, REDUCE, CAST_TY, ACC_TY, ACC_2D,
                      not EVEN_I, PREFETCH)
        if r_full < r_stop:
            rows = r_full + rr
            v = _load_raw(x_ptr + rows[:, None] * s_r + base[None, :],
                          (rows < r_stop)[:, None] & col_mask[None, :], REDUCE, True)
            acc = _step(acc, v, REDUCE, CAST_TY, ACC_TY, ACC_2D)
        if ACC_2D:
            res = _reduce(acc, 0, REDUCE)
        else:
            res = acc
    if FINAL:
        if REDUCE == 1:
            res = res / n_div
    tl.store(out_ptr + pid_s * os_s + o * os_o + cols * os_i, res.to(out_ptr.dtype.element_ty),
             mask=col_mask)


# -- the launcher -----------------------------------------------------------------------------

#: The most partials a row's last program reduces in place (more: a second launch).
_FINISH_MAX_SPLIT = 4096
#: Arrival counts of the in-place finish, by (device, stream): zero between launches (each
#: row's last program sets its count back), so one buffer serves every launch on a stream,
#: one after another, with no fill launch.
_ARRIVALS: dict[tuple, torch.Tensor] = {}


def arrival_counts(device: torch.device, n: int) -> torch.Tensor:
    """At least ``n`` int32 arrival counts, all zero, for a launch on ``device``'s current
    stream. Kept per stream (launches on one stream run one after another); while a CUDA
    graph is being captured, a new zeroed buffer (its fill is part of the graph)."""
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return torch.zeros(n, dtype=torch.int32, device=device)
        key = (device.type, device.index, torch.cuda.current_stream(device).cuda_stream)
    else:
        key = (device.type, device.index, 0)
    buf = _ARRIVALS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _ARRIVALS[key] = buf
    return buf


def _max_offset(shape, strides) -> int:
    return sum((n - 1) * abs(s) for n, s in zip(shape, strides) if n > 0)


def _row(x, out_flat, lay: Layout, lp: Launch, *, reduce_code, final, cast_ty, acc_ty,
         os_m, os_s, n_div, use_int64, finish=None):
    """Launch the row kernel; ``finish``: ``(counts, result, mean)`` for a split whose
    last program a row reduces the partials (``out_flat``) into ``result``."""
    (O, s_o), (I, s_i) = (lay.kept + ((1, 0), (1, 0)))[:2]
    n_rows = O * I
    grid = (triton.cdiv(n_rows, lp.block_m), lp.n_split)
    extra = {}
    if finish is not None:
        counts, result, mean = finish
        extra = dict(cnt_ptr=counts, fin_ptr=result, FINISH=True,
                     NS_POW2=triton.next_power_of_2(lp.n_split), FIN_MEAN=mean)
    launch(
        _row_reduce_kernel, grid,
        x, out_flat, n_rows, lay.R, I, s_o, s_i, lay.s_r,
        lp.r_per_split, os_m, os_s, n_div,
        REDUCE=reduce_code, FINAL=final, CAST_TY=cast_ty, ACC_TY=acc_ty,
        HAS_INNER=I > 1, BLOCK_M=lp.block_m, BLOCK_R=lp.block_r, ONE_BLOCK=lp.one_block,
        UNROLL=lp.unroll, EVEN_M=n_rows % lp.block_m == 0, USE_INT64=use_int64,
        PREFETCH=lp.prefetch and not lp.one_block, num_warps=lp.num_warps,
        ALIGN=(row_multiple(x.element_size(), lay.R, s_o, s_i, lp.r_per_split)
               if lay.s_r == 1 else 1), **extra,
        **overlap_options(x.device),
    )


def _col_dims(lay: Layout):
    """(O, s_o, os_o), (I, s_i, os_i): the inner dimension is the kept one of smallest
    stride; output strides are those of a row-major output over the kept dimensions."""
    if len(lay.kept) == 1:
        (n, s), = lay.kept
        return (1, 0, 0), (n, s, 1)
    (n0, s0), (n1, s1) = lay.kept
    if s1 <= s0:
        return (n0, s0, n1), (n1, s1, 1)
    return (n1, s1, 1), (n0, s0, n1)


def _col(x, out_flat, lay: Layout, lp: Launch, *, reduce_code, final, cast_ty, acc_ty,
         dims, os_s, n_div, use_int64, pdl=None):
    """Launch the column kernel; `pdl`: :func:`opspec.kernels.pdl.overlap_options` to launch
    it dependent on the kernel before it (None: a plain launch)."""
    (O, s_o, os_o), (I, s_i, os_i) = dims
    n_i_blocks = triton.cdiv(I, lp.block_i)
    grid = (O * n_i_blocks, lp.n_split)
    launch(
        _col_reduce_kernel, grid,
        x, out_flat, I, lay.R, s_o, s_i, lay.s_r, n_i_blocks,
        lp.r_per_split, os_o, os_i, os_s, n_div,
        REDUCE=reduce_code, FINAL=final, CAST_TY=cast_ty, ACC_TY=acc_ty,
        BLOCK_R=lp.block_r, BLOCK_I=lp.block_i, ONE_BLOCK=lp.one_block, USE_INT64=use_int64,
        EVEN_I=I % lp.block_i == 0, ACC_2D=lp.acc_2d or lp.one_block,
        PREFETCH=lp.prefetch and not lp.one_block, num_warps=lp.num_warps,
        ALIGN=(row_multiple(x.element_size(), I, s_o, lay.s_r, os_o, os_s)
               if s_i == 1 and os_i == 1 else 1),
        **(pdl or {"PDL": False}),
    )


def reduction_triton(x: torch.Tensor, out: torch.Tensor, axes: tuple[int, ...], reduction: str,
                     *, num_splits: int | None = None, force_int64: bool = False,
                     tuning: Tuning | None = None) -> torch.Tensor:
    """Write `reduction` ('sum', 'mean' or 'amax') of `x` over `axes` into `out`; return `out`.

    `x`: float16, bfloat16, float32 or float64, any strides. `axes`: normalized (sorted,
    distinct, non-negative; see :func:`normalize_axes`). `out`: contiguous, with the
    reduced shape (keepdim or not: only its element count and order matter) and the result
    dtype (sum/mean: any supported dtype, the input cast to it first; amax: x's dtype).
    No host sync; a split allocates a small workspace (a row split also the stream's arrival
    counts, once: :func:`arrival_counts`). `num_splits` and `force_int64` are
    for tests: they force a split count and 64-bit offsets; `tuning` replaces
    :data:`TUNING` (the sweep's candidates).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if x.dtype not in _SUPPORTED or out.dtype not in _SUPPORTED:
        raise TypeError(f"x and out must have a dtype in {_SUPPORTED}, got {x.dtype}, {out.dtype}")
    if reduction == "amax" and out.dtype != x.dtype:
        raise TypeError(f"amax keeps the input dtype: out is {out.dtype}, x is {x.dtype}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    kept_shape = reduced_shape(x.shape, axes, False)
    if out.numel() != math.prod(kept_shape):
        raise ValueError(f"out must hold {math.prod(kept_shape)} elements (the shape "
                         f"{list(kept_shape)}), got {list(out.shape)}")
    if out.numel() == 0:
        return out
    R_total = math.prod(x.shape[a] for a in axes)
    if R_total == 0:
        if reduction == "amax":
            raise ValueError("amax of an empty reduction is undefined: every reduced axis "
                             "must have a non-zero size")
        return out.fill_(0.0 if reduction == "sum" else math.nan)
    if R_total == 1:
        # Nothing to reduce (every reduced axis has size 1): the result is the input, cast.
        out.view(-1).copy_(x.reshape(-1))
        return out
    lay = collapse(x.shape, x.stride(), axes)
    if lay is None:
        # Reduced axes interleaved with kept ones: one copy into [kept..., reduced...].
        kept_axes = [i for i in range(x.dim()) if i not in set(axes)]
        x = x.permute(*kept_axes, *axes).contiguous()
        axes = tuple(range(len(kept_axes), x.dim()))
        lay = collapse(x.shape, x.stride(), axes)

    tuning = tuning or TUNING
    out_flat = out.view(-1)
    acc = accumulate_dtype(reduction, x.dtype, out.dtype)
    cast_ty = _TL_DTYPES[out.dtype] if reduction != "amax" and _narrowing(x.dtype, out.dtype) else None
    acc_ty = _TL_DTYPES[acc]
    code = _REDUCE_CODE[reduction]
    lp = _plan(lay, x.element_size(), _sm_count(x.device.index if x.is_cuda else None),
               num_splits, tuning, False)
    n_out = lay.n_out
    reach = _max_offset(x.shape, x.stride()) + lp.block_m * lp.block_r * lp.block_i + lp.r_per_split
    big = force_int64 or reach > _INT32_LIMIT or n_out * lp.n_split > _INT32_LIMIT
    if lp.n_split == 1:
        if lp.kind == "row":
            _row(x, out_flat, lay, lp, reduce_code=code, final=True, cast_ty=cast_ty,
                 acc_ty=acc_ty, os_m=1, os_s=0, n_div=R_total, use_int64=big)
        else:
            _col(x, out_flat, lay, lp, reduce_code=code, final=True, cast_ty=cast_ty,
                 acc_ty=acc_ty, dims=_col_dims(lay), os_s=0, n_div=R_total, use_int64=big,
                 pdl=overlap_options(x.device))
        return out

    # Stage 1: partial sums (maxima) per (output, chunk); stage 2 reduces the partials.
    partial_code = 2 if reduction == "amax" else 0
    ws = torch.empty(n_out * lp.n_split, dtype=acc, device=x.device)
    sms = _sm_count(x.device.index if x.is_cuda else None)
    big2 = force_int64 or 2 * n_out * lp.n_split > _INT32_LIMIT
    if lp.kind == "row" and tuning.row.finish_in_place and lp.n_split <= _FINISH_MAX_SPLIT:
        # Partials laid out [n_out, n_split], reduced by each row's last program.
        _row(x, ws, lay, lp, reduce_code=partial_code, final=False, cast_ty=cast_ty,
             acc_ty=acc_ty, os_m=lp.n_split, os_s=1, n_div=R_total, use_int64=big or big2,
             finish=(arrival_counts(x.device, n_out), out_flat, reduction == "mean"))
    elif lp.kind == "row":
        # Partials laid out [n_out, n_split]: stage 2 is a row reduction over contiguous rows.
        _row(x, ws, lay, lp, reduce_code=partial_code, final=False, cast_ty=cast_ty,
             acc_ty=acc_ty, os_m=lp.n_split, os_s=1, n_div=R_total, use_int64=big)
        lay2 = Layout(((n_out, lp.n_split),) if n_out > 1 else (), lp.n_split, 1)
        lp2 = _plan(lay2, ws.element_size(), sms, 1, tuning, True)
        _row(ws, out_flat, lay2, lp2, reduce_code=code, final=True, cast_ty=None,
             acc_ty=acc_ty, os_m=1, os_s=0, n_div=R_total, use_int64=big2)
    else:
        # Partials laid out [n_split, O, I]: stage 2 is a column reduction over the chunks.
        dims = _col_dims(lay)
        (O, s_o, _), (I, s_i, _) = dims
        ws_dims = ((O, s_o, I), (I, s_i, 1))
        # The second stage's programs are placed while the first stage ends (see TUNING).
        pdl = overlap_options(x.device) if tuning.col.overlap_stages else None
        _col(x, ws, lay, lp, reduce_code=partial_code, final=False, cast_ty=cast_ty,
             acc_ty=acc_ty, dims=ws_dims, os_s=n_out, n_div=R_total, use_int64=big, pdl=pdl)
        lay2 = Layout(((O, I), (I, 1)) if O > 1 else ((I, 1),), lp.n_split, n_out)
        lp2 = _plan(lay2, ws.element_size(), sms, 1, tuning, True)
        (_, _, os_o), (_, _, os_i) = dims
        _col(ws, out_flat, lay2, lp2, reduce_code=code, final=True, cast_ty=None,
             acc_ty=acc_ty, dims=((O, I, os_o), (I, 1, os_i)), os_s=0, n_div=R_total,
             use_int64=big2, pdl=pdl)
    return out
