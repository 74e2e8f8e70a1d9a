"""2-D max and average pooling: ``torch.nn.functional.max_pool2d`` / ``avg_pool2d`` forward.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.pool_impl`.

* :func:`pool2d_reference` -- the torch reference (float32 math for 16-bit inputs, float64
  inputs kept in float64, the result cast back to the input dtype).
* :func:`pool2d_triton` -- the Triton kernels writing into a contiguous ``out``.
* :func:`pool2d_geometry` / :func:`pool2d_out_size` -- the per-axis window numbers and the
  output size (torch's rules, ceil_mode included).

The band kernel (for the window classes ``_BAND_TABLE`` names, on inputs of at least
``_BAND_MIN_OUTPUTS`` outputs whose rows have unit column stride, i.e. contiguous NCHW and
its slices; see :func:`band_fits` and the ``BandConfig`` block at the top). The
input is viewed as ``[N, C, H, W]`` (an unbatched ``[C, H, W]`` is one image). A program
takes a few planes, a band of output rows and a block of output columns. Each input row the
band needs is loaded once and reduced along the window's columns in registers; each output
row then combines its KH reduced rows, so the rows two windows share (the third row of a
3 x 3 stride-2 window) are not read twice. Stride 2 along W reads an output's two aligned
window columns as one contiguous run of the row (16-byte loads where the host proved the
rows aligned) and splits it, the third column of a 3-wide window coming from strided loads
of lines already in L1. A max runs in the input's dtype (bf16x2 / half2 NaN-propagating
max). On the H200 the older tile kernel below ran 1.1-1.8 TB/s on the workload rows (sm_90:
~76 SASS instructions an output for the ResNet stem, 9 scalar loads, float32 conversions,
scalar stores) against ~2.5-3.5 implied by torch.compile; the band kernel's sm_90 build of
the stem is ~20 instructions an output with 16-byte loads and 8-byte stores.

The word kernel (:mod:`opspec.kernels.pool_words`; the 16-bit 3x3 stride-2 max pools of
the CNN stems, from ``_BAND_MIN_OUTPUTS`` outputs, see ``words_fit`` and
``words_config_for``) reads a row as 32-bit words, two input columns each, a lane taking
four outputs from one 16-byte load and one 4-byte load a row; its third window columns are
halves of words it already holds, where the band kernel loads them again by 2-byte loads:
0.92-1.01x a copy on the stems against the band kernel's 0.79-0.85x.

The flat kernel (the classes ``_FLAT_TABLE`` names: narrow rows, at most 16 outputs, of
contiguous NCHW inputs; see :func:`flat_fits`). The output is one flat index space; a
program takes a run of consecutive outputs, splits each into (plane, row, column) by
divisions by compile-time constants (the plane's shape and the window are ``constexpr``,
one build per layer shape, as torch.compile's kernels have) and gathers its window element
by element, neighbouring outputs sharing cache lines. No lane pads a 14-wide row to 16, and
there is no per-row work to amortise: on 14 x 14 outputs it ran twice as fast as the tile
kernel on the H200. Stride-2 windows of 2 or 3 columns over 16-bit inputs (VGG's and
GoogLeNet's max, DenseNet's and ResNet-D's averages) read a window row as one or two 32-bit
words (``_FLAT_PAIRS``): two loads an output instead of four, six instead of nine. With
them it also takes the 16-bit 2x2 stride-2 pools of wide rows from the band kernel
(``_FLAT_PAIRS_WIDE``: U-Net's and DenseNet's, ResNet-D's averages). Averages over an
unpadded input whose windows all lie inside it divide by the window's size, a compile-time
constant, rather than by a count worked out per output (``_FLAT_WHOLE``).

The older kernels (``pool2d_plan``; channels_last and other strided rows, global pooling,
and any window class neither table sends elsewhere). The input is viewed as
``[N, C, H, W]`` with any strides. The output ``[N, C, H_out, W_out]`` (contiguous) is seen as a
matrix of ``R = N * C * H_out`` rows of ``W_out`` pixels; each program takes a tile of
``BLOCK_R`` rows by ``BLOCK_W`` columns (see :func:`pool2d_plan`): rows of one plane
(``n``, ``c``) when planes are tall enough (plane tiles: no division per row), else
consecutive rows of the flattened output, each split into ``(n, c, oh)`` once per row (a
``[BLOCK_R]`` vector), never per pixel. The window loop then works on a row vector over
``kh`` and a column vector over ``kw``, combined by broadcasting. Windows up to
``_MAX_UNROLL`` elements are unrolled (window sizes are compile-time constants); larger
ones loop at run time.

Two shapes take kernels of their own (see :func:`pool2d_plan`):

* a 1 x 1 output (global pooling, e.g. the 7 x 7 average of a ResNet head): a reduction of
  each plane's window, ``_pool2d_global_kernel``. A program reads ``[planes, lanes]``
  passes (consecutive window elements of each plane along the lanes: coalesced for
  contiguous planes), accumulates them lane by lane and combines a plane's lanes once at
  the end. The tile kernel gave such an output one thread and a run-time window loop.
* stride 1 along H with rows of at least 32 outputs (e.g. DeepLab's dilated 3 x 3): in the
  tile kernel every output loads its KH x KW window, so each input row is loaded KH times
  by the rows of a tile. ``_pool2d_rows_kernel`` reduces each input row along the window
  once and combines KH such row results per output row: 3.75 loads an output instead of
  9 for DeepLab's 16-row blocks.

Max with dilation 1 clamps each window row and column into the input instead of masking:
the clamped element lies in the same window (the window meets the input, as torch's
output-size rule guarantees), so the maximum is unchanged and no load is masked; lanes past
the output are clamped onto the last output and not stored. Otherwise (the average, dilated
max) padding and the part of a ceil_mode window past the input are masked: ``-inf`` for
max, ``0`` for the sum. Max propagates NaN as torch does (a NaN is taken and then kept:
a NaN-propagating maximum); the average sums in float32 and divides by torch's divisor:
``divisor_override``, else the window clipped to the padded input (count_include_pad), else
the window clipped to the input.

The op reads the input about once (neighbouring windows share cache lines, so the
overlapping reads of a 3x3 stride-2 window come from L1/L2) and writes the output once: it
is bound by HBM bandwidth on the H200 (about 4.2 TB/s measured for a copy), with the
instruction issue close behind for overlapping windows (sm_90 build of the ResNet stem
tile: about 76 SASS instructions per output), so the per-element work is kept to an
address, a load and a max or add. The tile is about ``_TILE`` output pixels; all tuning
constants are at the top of this module. Offsets are int64 when an address can pass
``2**31 - 1``. channels_last inputs are read through their strides (correct, not
coalesced along ``W``: the fast case is contiguous NCHW).

Every kernel here is launched dependent where the device allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.pool_words import WordsConfig, max_pool3x3s2_words, words_fit
from opspec.kernels.tiling import INT32_LIMIT, pow2_dividing

__all__ = [
    "BandConfig",
    "Pool2dGeometry",
    "band_config_for",
    "band_fits",
    "band_key",
    "band_launch",
    "flat_fits",
    "pairs_fit",
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
#: Windows with at most this many elements are unrolled; larger ones loop at run time
#: (a 7x7 window unrolled over 8 outputs a thread spills registers on sm_90).
_MAX_UNROLL = 32
#: Enough programs to give each of the H200's 132 SMs a few: tiles shrink to reach it.
_TARGET_PROGRAMS = 4 * 132
#: Planes with at least this many output rows are tiled plane by plane (see pool2d_plan).
_MIN_PLANE_ROWS = 8
#: Global pooling (a 1 x 1 output): lanes of one pass of a program (planes x window
#: elements), and the longest window read in one pass (longer ones loop).
_GLOBAL_TILE = 4096
_GLOBAL_MAX_L = 1024
#: Windows up to this many elements are read in unrolled passes (see _global_plan).
_GLOBAL_STATIC_L = 128
_GLOBAL_NUM_WARPS = 4
#: Stride-1 rows (see pool2d_plan): output rows a program computes from shared input rows,
#: the most input rows it holds, the widest window row, and the idle lanes allowed (a
#: fraction of W_out) when the row is padded to a power of two.
_ROWS_CHOICES = (16, 8)
_ROWS_MAX_IN = 40
_ROWS_MAX_KW = 8
_ROWS_MAX_IDLE = 1 / 7
_INT32_LIMIT = INT32_LIMIT

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}
# Triton's interpreter compares bfloat16 by its bits (a NaN-propagating maximum of two
# bfloat16 tensors comes out wrong there): a bfloat16 max runs in float32 under it.
_INTERPRET = TRITON_INTERPRETED


# -- band kernel configuration (the only place; see band_launch) ---------------------------
class BandConfig(NamedTuple):
    """A configuration of the band kernel (``_pool2d_band_kernel``): inputs with rows of
    unit stride (contiguous NCHW and its slices), a program per (planes, band of output
    rows, column block).

    ``rows``: the most output rows a program; ``band_launch`` takes the count up to it
    that reads the fewest input rows a plane (halo and padded rows counted), so a 56-row
    stem output takes 14-row bands (29 input rows each, 116 a plane against 168 for the
    tile kernel's loads). ``tile``: about this many outputs a program; the planes a program
    (a power of two) make it up, so that 7 x 7 and 14 x 14 planes still give a program
    work. ``cols_per_thread``: outputs a thread holds for one row and plane: sets the warps
    (0: 16 bytes of input row a thread, 4 outputs in 16-bit types, 2 in float32).
    ``pair``: stride 2 along W reads each output's two aligned window columns as one
    contiguous run of the row (16-byte loads where aligned) and the rest of the window
    (the third column of a 3-wide window) as strided loads of lines already in L1.
    ``native``: a max in the input's dtype (no float32 conversions; half2 / bf16x2 max).
    ``align``: the host checks which power of two divides the strides and row lengths and
    tells the kernel (vector loads and stores; none without it). ``row_regs``: a bound on
    the registers a thread's loads of a band hold (ptxas issues them all up front; about
    ``rows`` x the registers of one input row): fewer rows where a row is wide or the
    window long. ``max_block_w``: the widest
    column block; ``max_warps``: the most warps a program."""

    rows: int = 16
    tile: int = 2048
    cols_per_thread: int = 0
    pair: bool = True
    native: bool = True
    align: bool = True
    row_regs: int = 200
    max_block_w: int = 128
    max_warps: int = 8


#: Why the band kernel: each input row of a band is loaded once (a 3 x 3 stride-2 band of
#: 8 rows reads 17, one of them its neighbour's too: an L2 hit), 16 bytes a load where
#: aligned, and the max needs no conversions: the sm_90 builds take 11-20 SASS
#: instructions an output for the stride-2 max rows, 25-35 for the averages and the
#: stride-1 windows, against ~76 for the tile kernel on the stem (about the ~80 an output
#: the issue rate allows at 4.2 TB/s for bf16: that kernel is issue-bound).
#: H200 sweep (benchmarks/pool_sweep.py, 2026-11-30), us, older kernels -> band, compile:
#: ResNet-50 stem max 3x3/2 at batch 256 363 -> 191 (207), 128 186 -> 102 (109), 32 52.6
#: -> 31.5 (33.6); GoogLeNet stem 98.6 -> 66.8 (60.7); U-Net 2x2/2 max 78 -> 45 (53);
#: ResNet-D avg 2x2/2 at batch 128 186 -> 68 (79), batch 256 363 -> 127 (148): with bands
#: of at most 4 (max) or 8 (avg) rows and tiles of 512 / 2048 outputs. It lost, often by
#: several times, on small inputs (the stem at batch 1: 7.3 -> 130), on DenseNet's 2x2/2
#: average of [32, 128, 56, 56] (28.4 -> 82), on 3x3 stride-1 windows (PoolFormer 41 ->
#: 68; Inception's 35 x 35 planes gained, 60 -> 37) and on narrow rows: so no default,
#: the classes it won only, and only from _BAND_MIN_OUTPUTS outputs (the smallest input it
#: won on had 6.4 M; DenseNet's, lost, 3.2 M).
#: A second H200 sweep (same script, 2026-11-30, with the flat kernel among the candidates),
#: us, table then -> now (compile): the stem's bands of at most 8 rows, not 4: batch 256
#: 189 -> 148 (208), 128 bf16 98 -> 76 (109), fp32 148 -> 126 (156), 32 30.4 -> 24.9 (33.0),
#: GoogLeNet stem 52.9 -> 42.4 (59.3). The band kernel now ahead where it had lost: 3x3
#: stride-1 averages (Inception 60.3 -> 27.2 (38.4), fp32 57.4 -> 29.4 (40.7), PoolFormer
#: s1 41.2 -> 27.2, s4 11.3 -> 10.2 with 2 columns a thread) and DenseNet's 2x2/2 average
#: with bands of at most 4 rows, tiles of 512 (28.2 -> 12.7 (16.0); the ResNet-D rows
#: within 1 % of the former 8-row bands); the ResNet-50 stem at batch 1 (200 k outputs)
#: 7.1 -> 5.5. Narrow rows (at most 16 outputs) take the flat kernel (_FLAT_TABLE).
_BAND_DEFAULT = None
#: Per-class choices, keyed by ``band_key``: (mode, kernel, stride, "narrow" | "wide"); a
#: class not here takes ``_BAND_DEFAULT`` (None: the flat kernel where ``_FLAT_TABLE`` names
#: the class, else the older kernels, ``pool2d_plan``: tile, rows, global).
_BAND_TABLE: dict[tuple, BandConfig | None] = {
    ("max", (3, 3), (2, 2), "wide"): BandConfig(rows=8, tile=512),
    ("max", (2, 2), (2, 2), "wide"): BandConfig(rows=4, tile=512),
    ("avg", (2, 2), (2, 2), "wide"): BandConfig(rows=4, tile=512),
    ("avg", (3, 3), (1, 1), "wide"): BandConfig(rows=8),
    ("avg", (3, 3), (1, 1), "narrow"): BandConfig(cols_per_thread=2),
}
#: A third H200 sweep (pool_sweep.py, 2026-12-02) put tiles of 1024 outputs ahead of the
#: 2x2/2 averages' 512 (ResNet-D bf16 batch 128 61.8 against 72.9 us), but `opspec bench
#: AvgPool2dFwdOp --flush clean` with 1024 timed 61.3 / 120.1 / 11.9 us (ResNet-D bf16
#: batch 128, 256, DenseNet bf16) where its last run with 512 had 60.5 / 118.3 / 11.8: the
#: sweep's reading of the table was off there, and 512 stays.
#: Tried in that sweep and not kept: (a) programs taking 2, 4 or 8 (planes, band, column block)
#: tasks in turn (a loop around the kernel's body; the same per-task SASS): -2..+1 % on the
#: 3x3/2 stems, up to 15 % slower on float32 and at 8 tasks; (b) two planes a program for
#: the 16-bit stems, so that each lane of the warp has its own 16-byte column pair
#: (one plane of 64 columns holds 32 lanes x 8-byte loads, float32 32 x 16-byte): Triton
#: then lays the rows out [2 x 16] lanes and moves the third window column through shared
#: memory (136 registers, barriers): 2.2x slower (ResNet-50 stem bf16 batch 128 163.6
#: against 73.8 us). The 16-bit stems stayed at 0.82-0.86x a copy (float32 at 1.0x) until
#: the word kernel took them (``_WORDS`` below).
#: Why (ncu, H200, 2026-12-02, ResNet-50 stem at batch 128, the table's launch: 57344
#: one-warp programs of 72 registers, so at most 28 resident an SM, 28 warps of 64):
#: bfloat16 74.3 us, DRAM 70 % busy, 42.5 M warp instructions, issue active 59 %, a warp
#: issuing every 8.4 cycles (3.8 of them waiting on L1); float32 118.4 us, DRAM 89 % busy,
#: 37.2 M instructions, issue active 32 %, every 20 cycles (17 waiting on L1). The 16-bit
#: kernel issues about as many instructions for half the bytes (its third window column,
#: four 2-byte loads a thread and row where float32 has two 4-byte ones), and its
#: one-warp programs leave too few warps to cover their latency: more warps a program, or
#: the third column taken from the pair loads, not more bytes in flight, is what it lacks
#: (the word kernel has both).
#: Outputs below which every class takes the older kernels (the smallest input measured
#: since, the stem at batch 1, 200 k outputs, is above it).
_BAND_MIN_OUTPUTS = 1 << 17
#: The word kernel (:mod:`opspec.kernels.pool_words`: 16-bit 3x3 stride-2 max pools whose
#: rows ``words_fit`` accepts, the CNN stems) and the outputs from which it serves them.
#: H200, benchmarks/pool_words_probe.py (2026-12-04), us, the band kernel above -> words
#: (a device-to-device copy of the same bytes): ResNet-50 stem bf16 batch 256 143.9 ->
#: 120.7 (121.7), 128 74.7 -> 62.7 (61.7), 32 22.5 -> 19.2 (17.7), fp16 batch 32 22.1 ->
#: 19.2 (18.0), GoogLeNet's ceil-mode stem at batch 64 39.8 -> 33.6 (31.8): from 0.79-0.85x
#: a copy to 0.92-1.01x. Per program 2 output rows of 8 planes on 4 warps; 16 planes within
#: 0.5 %, 4 planes 15-18 % slower, bands of 4 rows 1-4 %, of 7, 8 or 14 rows 20-70 % (their
#: programs hold more rows in registers: 96 registers at 8 rows, 156 at 14) and one warp
#: a program 3-60 %. At batch 1 (200 k outputs) the band kernel's 5.25 us stays ahead of
#: these bands (5.41), but not of one-row bands of 16 or 32 planes (5.02; pool_sweep.py,
#: same day: the band kernel 4.8, 32 planes 4.6, torch.compile 4.8-4.9, both dtypes), which
#: at batch 256 trail the 2-row bands by 5 % (126.5 us): so below _WORDS_MIN_OUTPUTS, and
#: from _BAND_MIN_OUTPUTS, ``_WORDS_SMALL``.
_WORDS: WordsConfig | None = WordsConfig(rows=2, planes=8, num_warps=4)
_WORDS_MIN_OUTPUTS = 1 << 20
_WORDS_SMALL: WordsConfig | None = WordsConfig(rows=1, planes=32, num_warps=4)
#: The flat kernel's classes (contiguous inputs, see ``flat_fits``), by ``band_key``:
#: (outputs a program, warps). Same sweep, us, the tile kernel -> flat (compile): GoogLeNet's
#: 3x3/2 max on 28 x 28 planes 63.4 -> 32.1 (34.0); VGG's 2x2/2 max bf16 22.2 -> 16.3, fp32
#: 39.6 -> 24.4; 2x2/2 averages on 14 x 14 planes 28.0 -> 24.0 (26.7) and 8.0 -> 7.3.
_FLAT_TABLE: dict[tuple, tuple[int, int]] = {
    ("max", (3, 3), (2, 2), "narrow"): (512, 4),
    ("max", (2, 2), (2, 2), "narrow"): (512, 4),
    ("avg", (2, 2), (2, 2), "narrow"): (512, 4),
}
#: The flat kernel's stride-2 max and average of 16-bit elements over windows of 2 or 3 rows
#: and columns read each window row as one or two 32-bit words (``PAIRS``; W even, no
#: padding, dilation 1; the average's windows whole). H200 (2026-12-04, us, the element
#: loop -> words (torch.compile)): VGG-16's 2x2 max on 28 x 28 planes, batch 32, bf16 12.66
#: -> 11.41 (11.90), fp16 12.74 -> 11.44 (11.90), batch 64 21.20 -> 18.98 (20.19); on 14 x
#: 14 planes 6.34 -> 6.14; GoogLeNet's ceil-mode 3x3 max, [64, 480, 28, 28] bf16 30.61 ->
#: 22.85 (33.38), fp16 30.62 -> 22.94, [64, 832, 14, 14] 13.74 -> 11.52; ResNet-D's 2x2
#: average on [128, 1024, 14, 14] 20.42 -> 18.94.
_FLAT_PAIRS = True
#: (outputs a program, warps) of the flat kernel for 2x2 stride-2 pools of wide rows whose
#: input ``pairs_fit``, from ``_BAND_MIN_OUTPUTS`` outputs, ahead of the band kernel; None:
#: the band kernel. H200 (2026-12-04, us, the band kernel -> flat with word reads at 1024
#: outputs / 8 warps (512 / 4, 1024 / 4, 2048 / 8), a copy of the same bytes): U-Net's max
#: [16, 64, 256, 256] bf16 43.31 -> 40.22 (43.25, 41.02, 41.34; 40.29), [32, 256, 56, 56]
#: 21.25 -> 18.05 (18.93-19.34; 17.65); DenseNet's average [32, 128, 56, 56] bf16 12.58 ->
#: 11.23 (11.41-12.14; 10.95), fp16 12.62 -> 11.23; ResNet-D's ceil-mode average [128, 256,
#: 56, 56] bf16 72.83 -> 69.39 (68.22-68.88; 61.30); with ``_FLAT_WHOLE`` 60.74 against the
#: band table's 73.17 and 61.78 at tiles of 1024 (a second probe, same day; the max on that
#: shape 60.85 against 62.70 at best, U-Net's [32, 64, 256, 256] max 77.82 against 78.43).
_FLAT_PAIRS_WIDE: tuple[int, int] | None = (1024, 8)
#: The flat kernel's averages over unpadded inputs whose windows all lie inside the input
#: divide by the window's size as a compile-time constant (``WHOLE``), not by a count
#: worked out per output. Under count_include_pad=False that count cost ResNet-D's word
#: reads their lead over the band kernel (H200, 2026-12-04, side by side, us, per-output
#: count -> constant, a copy of the same bytes): [128, 256, 56, 56] bf16 ceil-mode average
#: 68.86 -> 60.74 (60.2), batch 256 137.04 -> 118.14 (116.5); the count_include_pad=True
#: rows within 0.3 % (the same shape 60.85 / 60.77, DenseNet's [32, 128, 56, 56] 11.42 /
#: 11.46, U-Net's shape 40.53 / 40.42).
_FLAT_WHOLE = True
#: Output rows of at most this many columns are "narrow" in ``band_key``.
_BAND_NARROW = 16
#: The widest window row and the most input rows a band may read (unrolled: code size and
#: registers).
_BAND_MAX_KW = 8
_BAND_MAX_IN = 40


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
def _window_len(start, K, size, pad, COUNT_INCLUDE_PAD: tl.constexpr):
    """The length along one axis that torch's avg_pool2d divides by: the window from
    ``start`` clipped to the padded input (count_include_pad), or to the input itself."""
    end = tl.minimum(start + K, size + pad)
    if COUNT_INCLUDE_PAD:
        return end - start
    return tl.minimum(end, size) - tl.maximum(start, 0)


@triton.jit
def _window_step(acc, tile_ptrs, step, row_ok, iw, W, IS_MAX: tl.constexpr):
    """Accumulate one window element of every output of the tile: the input at
    `tile_ptrs + step` (`tile_ptrs` points at each window's first element, `step` is the
    scalar offset of this element), masked by the row mask `row_ok` ([BLOCK_R, 1]) and
    the input column `iw` ([BLOCK_W])."""
    ok = row_ok & ((iw >= 0) & (iw < W))[None, :]
    if IS_MAX:
        v = tl.load(tile_ptrs + step, mask=ok, other=float("-inf")).to(tl.float32)
        # torch takes a NaN and keeps it (`val > maxval || isnan(val)`): a NaN-propagating max
        acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    else:
        v = tl.load(tile_ptrs + step, mask=ok, other=0.0).to(tl.float32)
        acc = acc + v
    return acc


@triton.jit
def _clamped_max_row(acc, row_ptrs, w0, W, sxw, KW_C: tl.constexpr):
    """The max over one window row of every output of the tile, the input column clamped
    into [0, W): a clamped column is another element of the same window (dilation 1), so
    no load is masked."""
    for kw in tl.static_range(KW_C):
        iw = tl.minimum(tl.maximum(w0 + kw, 0), W - 1)
        v = tl.load(row_ptrs[:, None] + (iw * sxw)[None, :]).to(tl.float32)
        acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    return acc


@triton.jit
def _pool2d_kernel(
    x_ptr, out_ptr,
    R, C, H, W, H_out, W_out, n_col_blocks, n_row_blocks,
    sxn, sxc, sxh, sxw,
    KH, KW, SH, SW, PH, PW, DH, DW,
    divisor,
    KH_C: tl.constexpr, KW_C: tl.constexpr,
    UNROLL: tl.constexpr, IS_MAX: tl.constexpr, CLAMP: tl.constexpr, MERGE_NC: tl.constexpr,
    PLANE_TILES: tl.constexpr,
    COUNT_INCLUDE_PAD: tl.constexpr, HAS_DIVISOR: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, USE_INT64: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    pid = tl.program_id(0)
    if USE_INT64:
        pid = pid.to(tl.int64)
        # int64 strides (adding an int64 zero: a stride equal to 1 is a constexpr)
        zero = pid * 0
        sxh = sxh + zero
        sxw = sxw + zero
    cb = pid % n_col_blocks
    cols = cb * BLOCK_W + tl.arange(0, BLOCK_W)
    col_in = cols < W_out
    # Lanes past the output compute the last output again (valid addresses; not stored).
    cols_c = tl.minimum(cols, W_out - 1)
    if PLANE_TILES:
        # the tile's rows are BLOCK_R output rows of one plane (n, c): no per-row division
        t = pid // n_col_blocks
        plane = t // n_row_blocks
        oh = (t % n_row_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
        row_in = oh < H_out
        oh = tl.minimum(oh, H_out - 1)
        rows = plane * H_out + oh                      # output rows (n, c, oh) flattened
        if MERGE_NC:
            base = plane * sxc
        else:
            base = (plane // C) * sxn + (plane % C) * sxc
    else:
        # the tile's rows are BLOCK_R consecutive rows (n, c, oh) of the flattened output,
        # split once per row (small planes: several per tile)
        rows = (pid // n_col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
        row_in = rows < R
        rows_c = tl.minimum(rows, R - 1)
        if USE_INT64:
            oh = rows_c % H_out
            nc = rows_c // H_out
        else:
            # unsigned division: the row index is non-negative (no sign fix-ups; sm_90 stem
            # tile 608 instructions against 640). H_out goes through a tensor: an argument
            # equal to 1 is a constexpr, which has no `.to`.
            rows_u = rows_c.to(tl.uint32)
            h_out_u = (rows_c * 0 + H_out).to(tl.uint32)
            oh = (rows_u % h_out_u).to(tl.int32)
            nc = (rows_u // h_out_u).to(tl.int32)
        # a plane (n, c) is one stride away from the next when the layout merges them
        # (MERGE_NC: sxn == C * sxc, e.g. contiguous NCHW)
        if MERGE_NC:
            base = nc * sxc
        else:
            base = (nc // C) * sxn + (nc % C) * sxc
    h0 = oh * SH - PH                                  # [BLOCK_R] first window row
    w0 = cols_c * SW - PW                              # [BLOCK_W] first window column

    if IS_MAX:
        acc = tl.full((BLOCK_R, BLOCK_W), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_R, BLOCK_W), tl.float32)

    if CLAMP:
        # max, dilation 1: rows and columns clamped into the input, no masks
        if UNROLL:
            for kh in tl.static_range(KH_C):
                ih = tl.minimum(tl.maximum(h0 + kh, 0), H - 1)
                acc = _clamped_max_row(acc, x_ptr + (base + ih * sxh), w0, W, sxw, KW_C)
        else:
            for kh in range(0, KH):
                ih = tl.minimum(tl.maximum(h0 + kh, 0), H - 1)
                row_ptrs = x_ptr + (base + ih * sxh)
                for kw in range(0, KW):
                    iw = tl.minimum(tl.maximum(w0 + kw, 0), W - 1)
                    v = tl.load(row_ptrs[:, None] + (iw * sxw)[None, :]).to(tl.float32)
                    acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    else:
        # each output's window origin; a window element is then one scalar offset away
        tile_ptrs = x_ptr + ((base + h0 * sxh)[:, None] + (w0 * sxw)[None, :])
        if UNROLL:
            for kh in tl.static_range(KH_C):
                ih = h0 + kh * DH
                row_ok = ((ih >= 0) & (ih < H))[:, None]
                for kw in tl.static_range(KW_C):
                    acc = _window_step(acc, tile_ptrs, kh * DH * sxh + kw * DW * sxw, row_ok,
                                       w0 + kw * DW, W, IS_MAX)
        else:
            for kh in range(0, KH):
                ih = h0 + kh * DH
                row_ok = ((ih >= 0) & (ih < H))[:, None]
                for kw in range(0, KW):
                    acc = _window_step(acc, tile_ptrs, kh * DH * sxh + kw * DW * sxw, row_ok,
                                       w0 + kw * DW, W, IS_MAX)

    if IS_MAX:
        res = acc
    else:
        if HAS_DIVISOR:
            res = acc / divisor
        else:
            # avg_pool2d has no dilation
            hs = _window_len(h0, KH, H, PH, COUNT_INCLUDE_PAD)
            ws = _window_len(w0, KW, W, PW, COUNT_INCLUDE_PAD)
            # at least one for the lanes past the output (0 / 0 there otherwise)
            cnt = tl.maximum(hs[:, None] * ws[None, :], 1)
            res = acc / cnt.to(tl.float32)

    out_off = rows[:, None] * W_out + cols[None, :]
    tl.store(out_ptr + out_off, res.to(out_ptr.dtype.element_ty),
             mask=row_in[:, None] & col_in[None, :])


@triton.jit
def _pool2d_flat_kernel(
    x_ptr, out_ptr, total, divisor,
    H: tl.constexpr, W: tl.constexpr, H_out: tl.constexpr, W_out: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
    PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    IS_MAX: tl.constexpr, CLAMP: tl.constexpr, NATIVE: tl.constexpr,
    COUNT_INCLUDE_PAD: tl.constexpr, HAS_DIVISOR: tl.constexpr,
    BLOCK: tl.constexpr, USE_INT64: tl.constexpr, PAIRS: tl.constexpr = False,
    WHOLE: tl.constexpr = False,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # WHOLE (average only): no padding and every window inside the input, so every
    # divisor is KH * KW, under either count_include_pad, and known at compile time.
    # Contiguous NCHW: BLOCK consecutive outputs of the flattened [N * C * H_out * W_out]
    # output a program, each split into (plane, oh, ow) by divisions by compile-time
    # constants (the geometry and the plane's shape are constexpr: one build per layer
    # shape), then its window gathered element by element (neighbouring outputs share the
    # lines, from L1). No padded tile lanes: narrow planes (14 x 14 outputs) waste none.
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if USE_INT64:
        o = o.to(tl.int64)
    o_in = o < total
    oc = tl.minimum(o, total - 1)
    ow = oc % W_out
    t = oc // W_out
    oh = t % H_out
    base = x_ptr + (t // H_out) * (H * W)
    h0 = oh * SH - PH
    w0 = ow * SW - PW
    # The output's dtype is the input's (the PAIRS view of x_ptr is int32).
    ET: tl.constexpr = out_ptr.dtype.element_ty
    if IS_MAX:
        acc = tl.full((BLOCK,), float("-inf"), ET if NATIVE else tl.float32)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
    if PAIRS:
        # Stride-2 windows of 2 or 3 columns over 16-bit elements, x_ptr viewing the input
        # as 32-bit words (W even): word ow of a row holds columns 2 ow and 2 ow + 1, and the
        # low half of word ow + 1 column 2 ow + 2, so a window row takes one or two 4-byte
        # loads where the loop below makes two or three 2-byte ones. Rows and the right word
        # are clamped to the input as CLAMP does (the max's windows past a ceil_mode edge;
        # the average takes whole windows only).
        plane = x_ptr + (t // H_out) * (H * W // 2)
        right = tl.minimum(ow + 1, W // 2 - 1)
        for kh in tl.static_range(KH):
            row = plane + tl.minimum(oh * 2 + kh, H - 1) * (W // 2)
            pair = tl.load(row + ow)
            if IS_MAX:
                acc = _nan_max(acc, _halves_max(pair, ET, NATIVE))
            else:
                acc += _halves_sum(pair, ET)
            if KW == 3:
                third, _ = _halves(tl.load(row + right), ET)
                if IS_MAX:
                    acc = _nan_max(acc, third if NATIVE else third.to(tl.float32))
                else:
                    acc += third.to(tl.float32)
    else:
        for kh in tl.static_range(KH):
            ih = h0 + kh * DH
            for kw in tl.static_range(KW):
                iw = w0 + kw * DW
                if CLAMP:
                    # max, dilation 1: a clamped element lies in the same window
                    v = tl.load(base + (tl.minimum(tl.maximum(ih, 0), H - 1) * W
                                        + tl.minimum(tl.maximum(iw, 0), W - 1)))
                else:
                    ok = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                    v = tl.load(base + (ih * W + iw), mask=ok,
                                other=float("-inf") if IS_MAX else 0.0)
                if IS_MAX:
                    if not NATIVE:
                        v = v.to(tl.float32)
                    acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
                else:
                    acc = acc + v.to(tl.float32)
    if IS_MAX:
        res = acc
    elif HAS_DIVISOR:
        res = acc / divisor
    elif WHOLE:
        res = acc / (KH * KW)
    else:
        cnt = (_window_len(h0, KH, H, PH, COUNT_INCLUDE_PAD)
               * _window_len(w0, KW, W, PW, COUNT_INCLUDE_PAD))
        res = acc / cnt.to(tl.float32)
    tl.store(out_ptr + o, res.to(ET), mask=o_in)


@triton.jit
def _nan_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _halves(w, ET: tl.constexpr):
    # The two 16-bit values of dtype ET in 32-bit words w (which is which column does not
    # matter to a max or a sum).
    return w.to(tl.int16).to(ET, bitcast=True), (w >> 16).to(tl.int16).to(ET, bitcast=True)


@triton.jit
def _halves_max(w, ET: tl.constexpr, NATIVE: tl.constexpr):
    # The larger (NaN first) of the two halves of w, in ET (float32 where not NATIVE).
    lo, hi = _halves(w, ET)
    if not NATIVE:
        lo = lo.to(tl.float32)
        hi = hi.to(tl.float32)
    return _nan_max(lo, hi)


@triton.jit
def _halves_sum(w, ET: tl.constexpr):
    # The sum of the two halves of w, in float32.
    lo, hi = _halves(w, ET)
    return lo.to(tl.float32) + hi.to(tl.float32)


@triton.jit
def _global_pass(acc, ptrs, ok, MASKED: tl.constexpr, IS_MAX: tl.constexpr):
    """Accumulate one pass of window elements (``ptrs``, [BLOCK_P, BLOCK_L]) into ``acc``
    lane by lane (no reduction across lanes here); ``ok`` is read only when MASKED."""
    if IS_MAX:
        if MASKED:
            v = tl.load(ptrs, mask=ok, other=float("-inf"))
        else:
            v = tl.load(ptrs)
        acc = tl.maximum(acc, v.to(tl.float32), propagate_nan=tl.PropagateNan.ALL)
    else:
        if MASKED:
            v = tl.load(ptrs, mask=ok, other=0.0)
        else:
            v = tl.load(ptrs)
        acc = acc + v.to(tl.float32)
    return acc


@triton.jit
def _pool2d_global_kernel(
    x_ptr, out_ptr,
    P, C, L, WR,
    sxn, sxc, sxh, sxw,
    divisor,
    IS_MAX: tl.constexpr, MERGE_NC: tl.constexpr, FLAT: tl.constexpr, PASSES: tl.constexpr,
    L_C: tl.constexpr, EVEN_P: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_L: tl.constexpr, USE_INT64: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """A 1 x 1 output: each of the program's BLOCK_P planes (n, c) reduced over its window,
    the first ``L = HR * WR`` elements of the plane (rows and columns from 0; padding adds
    nothing), read as [BLOCK_P, BLOCK_L] tiles: ``PASSES`` of them unrolled (the window
    length ``L_C`` then a constant: only the last pass is masked, and no pass when
    ``EVEN_P``, the planes filling every program), or (0) a run-time loop over the window.
    The passes accumulate lane by lane; the lanes of a plane are combined once at the end
    (shuffles across a warp cost about ten instructions a row). ``FLAT``: the window is one
    run of stride ``sxw`` (whole rows of a row-contiguous plane), else element j is at row
    ``j // WR``, column ``j % WR``."""
    overlap_start(PDL)
    pid = tl.program_id(0)
    planes = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    j = tl.arange(0, BLOCK_L)
    if USE_INT64:
        planes = planes.to(tl.int64)
        j = j.to(tl.int64)
    p_in = planes < P
    if MERGE_NC:
        base = planes * sxc
    else:
        base = (planes // C) * sxn + (planes % C) * sxc
    if IS_MAX:
        acc = tl.full((BLOCK_P, BLOCK_L), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_P, BLOCK_L), tl.float32)
    if PASSES > 0:
        if FLAT:
            ptrs0 = x_ptr + (base[:, None] + (j * sxw)[None, :])
        for t in tl.static_range(PASSES):
            jj = t * BLOCK_L + j
            if FLAT:
                # a constant step from the first pass (an immediate offset of the load)
                ptrs = ptrs0 + t * BLOCK_L * sxw
            else:
                ptrs = x_ptr + (base[:, None] + ((jj // WR) * sxh + (jj % WR) * sxw)[None, :])
            tail = (t + 1) * BLOCK_L > L_C
            ok = p_in[:, None] & (jj < L_C)[None, :]
            acc = _global_pass(acc, ptrs, ok, tail or not EVEN_P, IS_MAX)
    else:
        for start in range(0, L, BLOCK_L):
            jj = start + j
            if FLAT:
                off = jj * sxw
            else:
                off = (jj // WR) * sxh + (jj % WR) * sxw
            ok = p_in[:, None] & (jj < L)[None, :]
            acc = _global_pass(acc, x_ptr + (base[:, None] + off[None, :]), ok, True, IS_MAX)
    if IS_MAX:
        # torch keeps a NaN: a NaN-propagating maximum across the lanes too
        res = tl.reduce(acc, 1, _nan_max)
    else:
        res = tl.sum(acc, axis=1) / divisor
    tl.store(out_ptr + planes, res.to(out_ptr.dtype.element_ty), mask=p_in)


@triton.jit
def _pool2d_rows_kernel(
    x_ptr, out_ptr,
    C, H, W, H_out, W_out, n_col_blocks, n_row_blocks,
    sxn, sxc, sxh, sxw,
    SW, PH, PW,
    divisor,
    KH: tl.constexpr, KW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    ROWS: tl.constexpr,
    N_IN: tl.constexpr,
    IS_MAX: tl.constexpr, MERGE_NC: tl.constexpr,
    COUNT_INCLUDE_PAD: tl.constexpr, HAS_DIVISOR: tl.constexpr,
    BLOCK_W: tl.constexpr, USE_INT64: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """Stride 1 along H: ROWS consecutive output rows of one plane, BLOCK_W columns (the
    window and its dilation constants: a window column is an immediate offset). Each of
    the ``N_IN = ROWS + (KH - 1) * DH`` input rows they read is reduced along its window
    row once (KW loads); output row r then combines the KH row results r + kh * DH. A tile
    of output rows computed one by one would load every input row KH times. The row
    index is the same for the whole program: a row outside the input is read clamped and
    replaced by the identity (no per-element row mask); columns outside it are masked."""
    overlap_start(PDL)
    pid = tl.program_id(0)
    if USE_INT64:
        pid = pid.to(tl.int64)
        zero = pid * 0
        sxh = sxh + zero
        sxw = sxw + zero
    cb = pid % n_col_blocks
    t = pid // n_col_blocks
    oh0 = (t % n_row_blocks) * ROWS
    plane = t // n_row_blocks
    if MERGE_NC:
        base = plane * sxc
    else:
        base = (plane // C) * sxn + (plane % C) * sxc
    cols = cb * BLOCK_W + tl.arange(0, BLOCK_W)
    col_in = cols < W_out
    w0 = cols * SW - PW                                # [BLOCK_W] first window column
    if IS_MAX:
        ident = float("-inf")
    else:
        ident = 0.0

    # the input rows, each reduced along its window row
    hrow = ()
    for i in tl.static_range(N_IN):
        ih = oh0 - PH + i
        ih_c = tl.minimum(tl.maximum(ih, 0), H - 1)
        row_ptrs = x_ptr + (base + ih_c * sxh)
        h = tl.full((BLOCK_W,), ident, tl.float32)
        for kw in tl.static_range(KW):
            iw = w0 + kw * DW
            v = tl.load(row_ptrs + iw * sxw, mask=(iw >= 0) & (iw < W), other=ident)
            if IS_MAX:
                h = tl.maximum(h, v.to(tl.float32), propagate_nan=tl.PropagateNan.ALL)
            else:
                h = h + v.to(tl.float32)
        h = tl.where((ih >= 0) & (ih < H), h, ident)
        hrow = hrow + (h,)

    if not IS_MAX and not HAS_DIVISOR:
        ws = _window_len(w0, KW, W, PW, COUNT_INCLUDE_PAD)
    out_row = out_ptr + plane * H_out * W_out
    for r in tl.static_range(ROWS):
        acc = hrow[r]
        for kh in tl.static_range(1, KH):
            if IS_MAX:
                acc = tl.maximum(acc, hrow[r + kh * DH], propagate_nan=tl.PropagateNan.ALL)
            else:
                acc = acc + hrow[r + kh * DH]
        oh = oh0 + r
        if IS_MAX:
            res = acc
        elif HAS_DIVISOR:
            res = acc / divisor
        else:
            hs = _window_len(oh - PH, KH, H, PH, COUNT_INCLUDE_PAD)
            # at least one for the lanes and rows past the output (0 / 0 there otherwise)
            res = acc / tl.maximum(hs * ws, 1).to(tl.float32)
        # (the row test as a vector: the interpreter takes no scalar in a mask)
        tl.store(out_row + oh * W_out + cols, res.to(out_ptr.dtype.element_ty),
                 mask=col_in & ((oh + cols * 0) < H_out))


# -- band kernel (contiguous rows) ------------------------------------------------------------

@triton.jit
def _combine(a, b, IS_MAX: tl.constexpr):
    if IS_MAX:
        # torch takes a NaN and keeps it: a NaN-propagating maximum
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    else:
        return a + b


@triton.jit
def _band_col(row_ptrs, ih, H, iw, W, ident, CLAMP: tl.constexpr, ACC: tl.constexpr):
    """The input columns ``iw`` ([1, BLOCK_W]) of the rows ``row_ptrs`` ([PLANES, 1]) in ``ACC``:
    clamped into the row (``CLAMP``: max with dilation 1, the clamped column lies in the same
    window; the row is valid or clamped too), else masked to ``ident`` by the column and
    the row ``ih`` (inside the input or not; tested as a vector: the interpreter takes no
    scalar in a mask)."""
    if CLAMP:
        v = tl.load(row_ptrs + tl.minimum(tl.maximum(iw, 0), W - 1))
    else:
        ih_v = ih + iw * 0
        v = tl.load(row_ptrs + iw, mask=(iw >= 0) & (iw < W) & (ih_v >= 0) & (ih_v < H),
                    other=ident)
    return v.to(ACC)


@triton.jit
def _band_row(row_ptrs, ih, H, pcols, w0, W, ident,
              KW: tl.constexpr, PW: tl.constexpr, DW: tl.constexpr,
              PLANES: tl.constexpr, BLOCK_W: tl.constexpr,
              IS_MAX: tl.constexpr, CLAMP: tl.constexpr, PAIR: tl.constexpr,
              ACC: tl.constexpr):
    """One input row of the program's planes (``row_ptrs``: [PLANES, 1] row starts) reduced
    along the window of every output column: [PLANES, BLOCK_W] in ``ACC``. ``PAIR`` (stride 2
    along W, dilation 1, window columns PW and PW + 1 inside the window): those columns of
    output ``ow`` are input columns 2 ow and 2 ow + 1, read as one contiguous
    [PLANES, 2 BLOCK_W] run (``pcols``: vector loads) and split; the other window columns are
    strided loads of the same lines (L1 hits)."""
    if PAIR:
        if CLAMP:
            pmask = pcols < W
        else:
            ih_v = ih + pcols * 0
            pmask = (pcols < W) & (ih_v >= 0) & (ih_v < H)
        v = tl.load(row_ptrs + pcols, mask=pmask, other=ident)
        a, b = tl.split(tl.reshape(v.to(ACC), (PLANES, BLOCK_W, 2)))
        h = _combine(a, b, IS_MAX)
        for kw in tl.static_range(KW):
            if kw < PW or kw >= PW + 2:
                v = _band_col(row_ptrs, ih, H, w0 + kw * DW, W, ident, CLAMP, ACC)
                h = _combine(h, v, IS_MAX)
    else:
        h = _band_col(row_ptrs, ih, H, w0, W, ident, CLAMP, ACC)
        for kw in tl.static_range(1, KW):
            v = _band_col(row_ptrs, ih, H, w0 + kw * DW, W, ident, CLAMP, ACC)
            h = _combine(h, v, IS_MAX)
    return h


@triton.jit
def _pool2d_band_kernel(
    x_ptr, out_ptr,
    P, C, H, W, H_out, W_out, n_col_blocks, n_row_blocks,
    sxn, sxc, sxh, out_plane,
    divisor,
    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
    PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    ROWS: tl.constexpr, N_IN: tl.constexpr, PLANES: tl.constexpr, BLOCK_W: tl.constexpr,
    IS_MAX: tl.constexpr, CLAMP: tl.constexpr, PAIR: tl.constexpr, ACC: tl.constexpr,
    MERGE_NC: tl.constexpr, COUNT_INCLUDE_PAD: tl.constexpr, HAS_DIVISOR: tl.constexpr,
    XALIGN: tl.constexpr, OALIGN: tl.constexpr, USE_INT64: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """Rows of unit column stride: a program takes PLANES planes, ROWS consecutive output
    rows and BLOCK_W output columns. Each of the ``N_IN = (ROWS - 1) * SH + (KH - 1) * DH + 1``
    input rows the band needs is loaded once and reduced along the window columns
    (``_band_row``); output row r then combines the KH row results ``r * SH + kh * DH``. An
    input row's index is the same for the whole program: a row outside the input is read
    clamped, and replaced by the identity unless ``CLAMP`` (max with dilation 1: the clamped
    row lies in the same window). ``ACC``: the type of the reductions (float32, or the
    input's for a max). ``XALIGN`` / ``OALIGN``: powers of two the host checked to divide
    the input's row, plane and image strides and W / the output's row and plane lengths
    (rebuilt below as multiples of them: the compiler then knows the rows are aligned and
    vectorises loads and stores; Triton itself only marks multiples of 16)."""
    overlap_start(PDL)
    pid = tl.program_id(0)
    if XALIGN > 1:
        sxn = (sxn // XALIGN) * XALIGN
        sxc = (sxc // XALIGN) * XALIGN
        sxh = (sxh // XALIGN) * XALIGN
        W = (W // XALIGN) * XALIGN
    if OALIGN > 1:
        W_out = (W_out // OALIGN) * OALIGN
        out_plane = (out_plane // OALIGN) * OALIGN
    cb = pid % n_col_blocks
    t = pid // n_col_blocks
    oh0 = (t % n_row_blocks) * ROWS
    pg = t // n_row_blocks
    planes = pg * PLANES + tl.arange(0, PLANES)[:, None]     # [PLANES, 1]
    plane_ok = planes < P
    planes = tl.minimum(planes, P - 1)
    if USE_INT64:
        # int64 strides and lengths (adding an int64 zero: an argument equal to 1 is a
        # constexpr)
        zero = pid.to(tl.int64) * 0
        planes = planes.to(tl.int64)
        sxh = sxh + zero
        W_out = W_out + zero
    if MERGE_NC:
        base = planes * sxc
    else:
        base = (planes // C) * sxn + (planes % C) * sxc
    # column vectors as [1, BLOCK_W] (2-D from the start: no layout conversions when they
    # meet the [PLANES, BLOCK_W] rows)
    cols = cb * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    col_in = cols < W_out
    w0 = cols * SW - PW                                # first window column
    zero_cols = cols * 0
    pcols = cb * (2 * BLOCK_W) + tl.arange(0, 2 * BLOCK_W)[None, :]
    if IS_MAX:
        ident = float("-inf")
    else:
        ident = 0.0

    # the band's input rows, each reduced along the window columns
    ih0 = oh0 * SH - PH
    hrow = ()
    for i in tl.static_range(N_IN):
        ih = ih0 + i
        ih_c = tl.minimum(tl.maximum(ih, 0), H - 1)
        # (a row outside the input: its loads masked to the identity, unless CLAMP)
        h = _band_row(x_ptr + (base + ih_c * sxh), ih, H, pcols, w0,
                      W, ident, KW, PW, DW, PLANES, BLOCK_W, IS_MAX, CLAMP, PAIR, ACC)
        hrow = hrow + (h,)

    if not IS_MAX:
        if HAS_DIVISOR:
            inv_w = tl.full((1, BLOCK_W), 1.0, tl.float32) / divisor
        else:
            # a reciprocal a column here, one a row below
            ws = _window_len(w0, KW, W, PW, COUNT_INCLUDE_PAD)
            # at least one for the lanes past the output (0 / 0 there otherwise)
            inv_w = 1.0 / tl.maximum(ws, 1).to(tl.float32)
    obase = planes * out_plane
    for r in tl.static_range(ROWS):
        acc = hrow[r * SH]
        for kh in tl.static_range(1, KH):
            acc = _combine(acc, hrow[r * SH + kh * DH], IS_MAX)
        oh = oh0 + r
        if IS_MAX:
            res = acc
        elif HAS_DIVISOR:
            res = acc * inv_w
        else:
            hs = _window_len(oh * SH - PH, KH, H, PH, COUNT_INCLUDE_PAD)
            inv_h = 1.0 / tl.maximum(hs, 1).to(tl.float32)
            res = acc * (inv_w * inv_h)
        ok = plane_ok & col_in & ((oh + zero_cols) < H_out)
        tl.store(out_ptr + (obase + (oh * W_out + cols)),
                 res.to(out_ptr.dtype.element_ty), mask=ok)


@dataclass(frozen=True)
class Pool2dPlan:
    """How the launcher splits the output.

    ``path`` 'flat' (:func:`_launch_flat`; never from ``pool2d_plan``, only from
    ``_FLAT_TABLE`` or a caller): ``block_r`` outputs a program, ``num_warps``.
    ``path`` 'tile' (the general kernel): tiles of ``block_r`` rows by ``block_w`` columns,
    ``num_warps``, whether the window is unrolled, and whether a tile's rows are rows of
    one plane (``plane_tiles``) or consecutive rows of the flattened output. 'global' (a
    1 x 1 output): ``block_r`` planes a program, ``block_w`` window elements a pass. 'rows'
    (stride 1 along H): ``block_r`` output rows of one plane by ``block_w`` columns, the
    input rows shared."""

    block_r: int
    block_w: int
    num_warps: int
    unroll: bool
    plane_tiles: bool = False
    path: str = "tile"


def _global_window(H: int, W: int, g: Pool2dGeometry) -> tuple[int, int]:
    """The rows and columns of the input a 1 x 1 output's window covers (dilation 1): the
    window starts at ``-padding``, so it covers rows ``[0, min(kH - pH, H))``."""
    return (min(g.kernel[0] - g.padding[0], H), min(g.kernel[1] - g.padding[1], W))


def _global_plan(P: int, L: int) -> Pool2dPlan:
    """``P`` planes reduced over ``L`` elements. A window of at most ``_GLOBAL_STATIC_L``
    elements is read in unrolled passes of 8, 16 or 32 lanes (the fewest padded lanes, the
    wider on a tie: 49 -> 7 passes of 8); a longer one loops over passes of up to
    ``_GLOBAL_MAX_L``. A program takes about ``_GLOBAL_TILE`` window elements (a power of
    two of planes), fewer while the grid holds fewer than ``_TARGET_PROGRAMS`` programs.
    ``block_w`` is the pass width, ``unroll`` whether the passes are unrolled."""
    if L <= _GLOBAL_STATIC_L:
        block_l = min((32, 16, 8), key=lambda b: triton.cdiv(L, b) * b)
        block_l = min(block_l, triton.next_power_of_2(L))
        span = triton.cdiv(L, block_l) * block_l
    else:
        block_l = min(triton.next_power_of_2(L), _GLOBAL_MAX_L)
        span = block_l
    block_p = max(1, triton.next_power_of_2(_GLOBAL_TILE // span + 1) // 2)
    while block_p > 1 and triton.cdiv(P, block_p) < _TARGET_PROGRAMS:
        block_p //= 2
    # about 32 elements a thread
    num_warps = min(_GLOBAL_NUM_WARPS, triton.next_power_of_2(max(1, block_p * span // 1024)))
    return Pool2dPlan(block_p, block_l, num_warps, L <= _GLOBAL_STATIC_L, False, "global")


def _rows_plan(H_out: int, W_out: int, g: Pool2dGeometry) -> Pool2dPlan | None:
    """The stride-1 rows plan, or None where it does not fit (see pool2d_plan)."""
    (kh, kw), (dh, _) = g.kernel, g.dilation
    if g.stride[0] != 1 or kh < 2 or kw > _ROWS_MAX_KW or H_out < min(_ROWS_CHOICES) \
            or W_out < 32:
        return None
    block_w = min(triton.next_power_of_2(W_out), _MAX_BLOCK_W)
    if triton.cdiv(W_out, block_w) * block_w - W_out > W_out * _ROWS_MAX_IDLE:
        return None
    # the fewest padded rows, the larger block on a tie
    fits = [r for r in _ROWS_CHOICES if r + (kh - 1) * dh <= _ROWS_MAX_IN]
    if not fits:
        return None
    rows = min(fits, key=lambda r: (triton.cdiv(H_out, r) * r, -r))
    return Pool2dPlan(rows, block_w, max(1, min(_NUM_WARPS, block_w // 32)), True, True,
                      "rows")


def pool2d_plan(R: int, H_out: int, W_out: int, g: Pool2dGeometry,
                H: int | None = None, W: int | None = None) -> Pool2dPlan:
    """The plan for ``R = N * C * H_out`` output rows of ``W_out`` pixels (an input of
    ``H`` x ``W`` where known).

    A 1 x 1 output with dilation 1 (global pooling, e.g. the 7 x 7 average of a ResNet
    head) is a reduction of each plane's window: the 'global' path (see _global_plan).
    Stride 1 along H with rows of at least 32 outputs padded to a power of two by at most
    ``_ROWS_MAX_IDLE`` (e.g. DeepLab's dilated 3 x 3 on 64 x 64 planes) takes the 'rows'
    path: ``_ROWS_CHOICES`` output rows a program (the fewest padded rows), each input row
    reduced along the window once instead of KH times. Otherwise the 'tile' kernel:

    ``block_w`` is the next power of two of ``W_out``, at most ``_MAX_BLOCK_W``. Planes of
    at least ``_MIN_PLANE_ROWS`` output rows take plane tiles when a
    power of two
    ``block_r`` (from ``_TILE / block_w`` down to a quarter of it) pads ``H_out`` by at most
    an eighth; other outputs take ``_TILE / block_w`` consecutive flattened rows (each row
    split into (n, c, oh) in the kernel), fewer (down to 256 outputs a tile) while the grid
    holds fewer than ``_TARGET_PROGRAMS`` programs. ``num_warps`` gives each thread about 8
    outputs.
    """
    if H_out == 1 and W_out == 1 and g.dilation == (1, 1) and H is not None and W is not None:
        hr, wr = _global_window(H, W, g)
        return _global_plan(R, hr * wr)
    rows = _rows_plan(H_out, W_out, g)
    if rows is not None:
        return rows
    # The next power of two of the row (at most _MAX_BLOCK_W): on the H200 the ResNet stem
    # (56 outputs a row, stride 2) ran 52.6 us at batch 32 with 64-wide tiles and 166.9 us
    # with 8-wide ones, which pad less but spread a warp's loads over 4 rows.
    block_w = min(triton.next_power_of_2(max(W_out, 1)), _MAX_BLOCK_W)
    unroll = g.kernel[0] * g.kernel[1] <= _MAX_UNROLL
    cap = max(1, _TILE // block_w)
    plane, block_r = False, max(1, min(cap, triton.next_power_of_2(max(R, 1))))
    if H_out >= _MIN_PLANE_ROWS:
        top = min(cap, triton.next_power_of_2(H_out))
        for b in (top, top // 2, top // 4):
            if b >= 1 and triton.cdiv(H_out, b) * b - H_out <= H_out // 8:
                plane, block_r = True, b
                break
    if not plane:
        while block_r > 1 and block_r * block_w > 256 \
                and triton.cdiv(R, block_r) * triton.cdiv(W_out, block_w) < _TARGET_PROGRAMS:
            block_r //= 2
    num_warps = max(1, min(_NUM_WARPS, (block_r * block_w) // 256))
    return Pool2dPlan(block_r, block_w, num_warps, unroll, plane)


def _needs_int64(x4: torch.Tensor, R: int, H_out: int, W_out: int, g: Pool2dGeometry,
                 p: Pool2dPlan) -> bool:
    """Whether an offset the kernel forms (masked lanes of the last tiles included) can
    pass ``2**31 - 1``: a generous bound on the input and output offsets."""
    N, C = x4.shape[0], x4.shape[1]
    sn, sc, sh, sw = (abs(s) for s in x4.stride())
    x_bound = ((N + 1) * sn + (C + 1) * sc
               + (g.stride[0] * (H_out + 1) + g.dilation[0] * g.kernel[0] + g.padding[0] + 1) * sh
               + (g.stride[1] * (W_out + p.block_w) + g.dilation[1] * g.kernel[1]
                  + g.padding[1] + 1) * sw)
    out_bound = (R + p.block_r + 1) * W_out + p.block_w
    return max(x_bound, out_bound) > _INT32_LIMIT


def _launch_global(x4: torch.Tensor, out: torch.Tensor, mode: str, g: Pool2dGeometry,
                   p: Pool2dPlan, merge_nc: bool, count_include_pad: bool,
                   divisor_override: int | None) -> torch.Tensor:
    """The 'global' path (a 1 x 1 output, dilation 1)."""
    N, C, H, W = x4.shape
    if g.dilation != (1, 1) or pool2d_out_size(H, W, g) != (1, 1):
        raise ValueError("the global plan needs a 1 x 1 output and dilation 1")
    sn, sc, sh, sw = x4.stride()
    hr, wr = _global_window(H, W, g)
    L = hr * wr
    if divisor_override is not None:
        divisor = float(divisor_override)
    else:
        # torch's divisor: the window (from -padding) clipped to the padded input
        # (count_include_pad), or to the input: the covered rows and columns
        (kh, kw), (ph, pw) = g.kernel, g.padding
        if count_include_pad:
            divisor = float((min(kh - ph, H + ph) + ph) * (min(kw - pw, W + pw) + pw))
        else:
            divisor = float(L)
    P = N * C
    # the masked lanes of the last program reach block_r planes and block_w elements past
    # the input (their offsets must not wrap either)
    bound = (N + p.block_r + 1) * abs(sn) + (C + p.block_r + 1) * abs(sc) \
        + (hr + p.block_w + 1) * abs(sh) + (wr + p.block_w + 1) * abs(sw) + P + p.block_r
    launch(_pool2d_global_kernel, (triton.cdiv(P, p.block_r),),
        x4, out, P, C, L, wr, sn, sc, sh, sw, divisor,
        IS_MAX=(mode == "max"), MERGE_NC=merge_nc,
        FLAT=(hr == 1 or (wr == W and sh == W * sw)),
        PASSES=triton.cdiv(L, p.block_w) if p.unroll else 0, L_C=L if p.unroll else 0,
        EVEN_P=P % p.block_r == 0,
        BLOCK_P=p.block_r, BLOCK_L=p.block_w, USE_INT64=bound > _INT32_LIMIT,
        num_warps=p.num_warps,
        **overlap_options(x4.device),
    )
    return out


def _launch_rows(x4: torch.Tensor, out: torch.Tensor, mode: str, g: Pool2dGeometry,
                 p: Pool2dPlan, merge_nc: bool, count_include_pad: bool,
                 divisor_override: int | None) -> torch.Tensor:
    """The 'rows' path (stride 1 along H)."""
    N, C, H, W = x4.shape
    if g.stride[0] != 1:
        raise ValueError("the rows plan needs stride 1 along H")
    H_out, W_out = pool2d_out_size(H, W, g)
    sn, sc, sh, sw = x4.stride()
    n_col_blocks = triton.cdiv(W_out, p.block_w)
    n_row_blocks = triton.cdiv(H_out, p.block_r)
    # input rows are clamped; columns reach past the input by at most a window and a block
    x_bound = (N + 1) * abs(sn) + (C + 1) * abs(sc) + (H + 1) * abs(sh) \
        + (g.stride[1] * (W_out + p.block_w) + g.dilation[1] * g.kernel[1] + g.padding[1]
           + 1) * abs(sw)
    out_bound = (N * C + 1) * H_out * W_out + (p.block_r + 1) * W_out + p.block_w
    launch(_pool2d_rows_kernel, (N * C * n_row_blocks * n_col_blocks,),
        x4, out, C, H, W, H_out, W_out, n_col_blocks, n_row_blocks,
        sn, sc, sh, sw, g.stride[1], g.padding[0], g.padding[1],
        float(divisor_override) if divisor_override is not None else 1.0,
        KH=g.kernel[0], KW=g.kernel[1], DH=g.dilation[0], DW=g.dilation[1], ROWS=p.block_r,
        N_IN=p.block_r + (g.kernel[0] - 1) * g.dilation[0],
        IS_MAX=(mode == "max"), MERGE_NC=merge_nc,
        COUNT_INCLUDE_PAD=bool(count_include_pad), HAS_DIVISOR=divisor_override is not None,
        BLOCK_W=p.block_w, USE_INT64=max(x_bound, out_bound) > _INT32_LIMIT,
        num_warps=p.num_warps,
        **overlap_options(x4.device),
    )
    return out


# -- band launcher ----------------------------------------------------------------------------

def band_key(mode: str, g: Pool2dGeometry, W_out: int) -> tuple:
    """The key of ``_BAND_TABLE``: the mode, the window and stride, and whether the output
    rows are narrow (at most ``_BAND_NARROW`` columns: several planes a program)."""
    return (mode, g.kernel, g.stride, "narrow" if W_out <= _BAND_NARROW else "wide")


def band_fits(x: torch.Tensor, g: Pool2dGeometry) -> bool:
    """Whether the band kernel serves this input and window: rows of unit column stride, an
    output that is not a single pixel with dilation 1 (the global path's), window rows at
    most ``_BAND_MAX_KW`` wide, at most ``_BAND_MAX_IN`` input rows for one output row, and
    windows that meet or overlap along H (every input row the band reads is used)."""
    H, W = x.shape[-2], x.shape[-1]
    (kh, kw), (sh, _), (dh, _) = g.kernel, g.stride, g.dilation
    H_out, W_out = pool2d_out_size(H, W, g)
    if x.stride(-1) != 1 and W > 1:
        return False
    if H_out == 1 and W_out == 1 and g.dilation == (1, 1):
        return False
    span = (kh - 1) * dh + 1
    return kw <= _BAND_MAX_KW and span <= _BAND_MAX_IN and sh <= span


def band_config_for(mode: str, g: Pool2dGeometry, W_out: int) -> BandConfig | None:
    """The table's choice: ``_BAND_TABLE`` by ``band_key``, else ``_BAND_DEFAULT``; None
    means the older kernels (tile / rows / global, ``pool2d_plan``)."""
    return _BAND_TABLE.get(band_key(mode, g, W_out), _BAND_DEFAULT)


def _band_in_rows(rows: int, g: Pool2dGeometry) -> int:
    return (rows - 1) * g.stride[0] + (g.kernel[0] - 1) * g.dilation[0] + 1


def _band_rows(H_out: int, g: Pool2dGeometry, most: int, max_in: int) -> int:
    """Output rows a program: at most ``most`` (and ``max_in`` input rows), the fewest
    input rows read for a plane (halo and padded rows included), the more rows on a tie."""
    fits = [r for r in range(1, max(1, min(most, H_out)) + 1)
            if _band_in_rows(r, g) <= max_in] or [1]
    return min(fits, key=lambda r: (triton.cdiv(H_out, r) * _band_in_rows(r, g), -r))


def _band_row_regs(g: Pool2dGeometry, cpt: int, elsize: int, pair: bool) -> int:
    """About the registers one input row's loads take a thread (``cpt`` outputs a row):
    the pair's vector (4 bytes a register) and a register for each strided element."""
    strided = g.kernel[1] - 2 if pair else g.kernel[1]
    return (cpt * 2 * elsize // 4 if pair else 0) + cpt * strided


@dataclass(frozen=True)
class BandLaunch:
    """What ``_launch_band`` runs: rows a program, planes a program, the column block, warps,
    the pair load, the reduction type (native max) and the alignments."""

    rows: int
    planes: int
    block_w: int
    num_warps: int
    pair: bool
    native: bool
    xalign: int
    oalign: int


def band_launch(x4: torch.Tensor, mode: str, g: Pool2dGeometry, cfg: BandConfig) -> BandLaunch:
    """The band launch of ``cfg`` for the 4-D input ``x4`` (see ``BandConfig``)."""
    N, C, H, W = x4.shape
    H_out, W_out = pool2d_out_size(H, W, g)
    P = N * C
    block_w = min(triton.next_power_of_2(max(W_out, 1)), cfg.max_block_w)
    n_cb = triton.cdiv(W_out, block_w)
    (kw, sw, pw, dw) = (g.kernel[1], g.stride[1], g.padding[1], g.dilation[1])
    pair = cfg.pair and sw == 2 and dw == 1 and pw + 2 <= kw
    # auto: a 16-byte load of the input row per thread, i.e. 8 pair elements (4 outputs) in
    # 16-bit types and 4 (2 outputs) in float32, so that the split pair lands in the
    # layout of the rest of the row (no layout conversions)
    cpt = cfg.cols_per_thread or max(1, 8 // x4.element_size())
    # ptxas issues all of a band's loads up front: bound the registers they hold
    max_in = max(1, min(_BAND_MAX_IN,
                        cfg.row_regs // _band_row_regs(g, cpt, x4.element_size(), pair)))
    rows = _band_rows(H_out, g, cfg.rows, max_in)
    planes = max(1, triton.next_power_of_2(cfg.tile // (rows * block_w) + 1) // 2)
    planes = min(planes, triton.next_power_of_2(P))
    # enough programs for every SM: fewer planes, then fewer rows a program
    while planes > 1 and triton.cdiv(P, planes) * triton.cdiv(H_out, rows) * n_cb \
            < _TARGET_PROGRAMS:
        planes //= 2
    while rows > 4 and P * triton.cdiv(H_out, rows) * n_cb < _TARGET_PROGRAMS:
        rows = _band_rows(H_out, g, rows // 2, max_in)
    threads = planes * block_w // cpt
    num_warps = max(1, min(cfg.max_warps, triton.next_power_of_2(max(1, threads // 32))))
    native = cfg.native and mode == "max" and not (
        x4.dtype == torch.bfloat16 and _INTERPRET)
    most = max(1, 16 // x4.element_size())
    sn, sc, sh, _ = x4.stride()
    merge = N == 1 or sn == C * sc
    xvals = [sc, sh, W] + ([] if merge else [sn])
    xalign = pow2_dividing(xvals, most) if cfg.align else 1
    oalign = pow2_dividing([W_out, H_out * W_out], most) if cfg.align else 1
    return BandLaunch(rows, planes, block_w, num_warps, pair, native, xalign, oalign)


def _launch_band(x4: torch.Tensor, out: torch.Tensor, mode: str, g: Pool2dGeometry,
                 cfg: BandConfig, count_include_pad: bool,
                 divisor_override: int | None) -> torch.Tensor:
    """The band kernel (see ``_pool2d_band_kernel`` and ``band_fits``)."""
    N, C, H, W = x4.shape
    H_out, W_out = pool2d_out_size(H, W, g)
    b = band_launch(x4, mode, g, cfg)
    sn, sc, sh, _ = x4.stride()
    P = N * C
    n_cb = triton.cdiv(W_out, b.block_w)
    n_rb = triton.cdiv(H_out, b.rows)
    merge = N == 1 or sn == C * sc
    (kh, kw), (s_h, s_w), (ph, pw), (dh, dw) = g.kernel, g.stride, g.padding, g.dilation
    # planes are clamped, rows clamped into the input; columns reach past the row by at
    # most a window and a (pair) block
    x_bound = (N + 1) * abs(sn) + (C + 1) * abs(sc) + (H + 1) * abs(sh) \
        + s_w * (W_out + 2 * b.block_w) + dw * kw + pw + 1
    out_bound = (P + 1) * H_out * W_out + (b.rows + 1) * W_out + b.block_w
    acc = _TL_DTYPES[x4.dtype] if b.native else tl.float32
    launch(_pool2d_band_kernel, (triton.cdiv(P, b.planes) * n_rb * n_cb,),
        x4, out, P, C, H, W, H_out, W_out, n_cb, n_rb,
        sn, sc, sh, H_out * W_out,
        float(divisor_override) if divisor_override is not None else 1.0,
        KH=kh, KW=kw, SH=s_h, SW=s_w, PH=ph, PW=pw, DH=dh, DW=dw,
        ROWS=b.rows, N_IN=_band_in_rows(b.rows, g), PLANES=b.planes, BLOCK_W=b.block_w,
        IS_MAX=(mode == "max"), CLAMP=(mode == "max" and g.dilation == (1, 1)),
        PAIR=b.pair, ACC=acc, MERGE_NC=merge,
        COUNT_INCLUDE_PAD=bool(count_include_pad), HAS_DIVISOR=divisor_override is not None,
        XALIGN=b.xalign, OALIGN=b.oalign,
        USE_INT64=max(x_bound, out_bound) > _INT32_LIMIT,
        num_warps=b.num_warps,
        **overlap_options(x4.device),
    )
    return out


def flat_fits(x4: torch.Tensor, g: Pool2dGeometry) -> bool:
    """Whether the flat kernel serves ``x4`` ([N, C, H, W]) and the window: a contiguous
    input and a window it unrolls."""
    return x4.is_contiguous() and g.kernel[0] * g.kernel[1] <= _MAX_UNROLL


def _launch_flat(x4: torch.Tensor, out: torch.Tensor, mode: str, g: Pool2dGeometry,
                 p: Pool2dPlan, count_include_pad: bool,
                 divisor_override: int | None) -> torch.Tensor:
    """The flat kernel (see ``_pool2d_flat_kernel``; ``p.block_r`` outputs a program)."""
    if not flat_fits(x4, g):
        raise ValueError("the flat kernel needs a contiguous input and a window of at most "
                         f"{_MAX_UNROLL} elements")
    N, C, H, W = x4.shape
    H_out, W_out = pool2d_out_size(H, W, g)
    total = N * C * H_out * W_out
    (kh, kw), (s_h, s_w), (ph, pw), (dh, dw) = g.kernel, g.stride, g.padding, g.dilation
    pairs = pairs_fit(x4, mode, g, H_out, W_out)
    whole = _FLAT_WHOLE and mode == "avg" and windows_inside(g, H, W, H_out, W_out)
    launch(_pool2d_flat_kernel, (triton.cdiv(total, p.block_r),),
        x4.view(torch.int32) if pairs else x4, out, total,
        float(divisor_override) if divisor_override is not None else 1.0,
        H=H, W=W, H_out=H_out, W_out=W_out, KH=kh, KW=kw, SH=s_h, SW=s_w, PH=ph, PW=pw,
        DH=dh, DW=dw, IS_MAX=(mode == "max"), CLAMP=(mode == "max" and g.dilation == (1, 1)),
        NATIVE=not _INTERPRET, COUNT_INCLUDE_PAD=bool(count_include_pad),
        HAS_DIVISOR=divisor_override is not None, BLOCK=p.block_r,
        USE_INT64=max(x4.numel(), total) + p.block_r > _INT32_LIMIT, PAIRS=pairs,
        WHOLE=whole, num_warps=p.num_warps,
        **overlap_options(x4.device),
    )
    return out


def pairs_fit(x4: torch.Tensor, mode: str, g: Pool2dGeometry, H_out: int, W_out: int) -> bool:
    """Whether the flat kernel reads ``x4``'s window rows as 32-bit words (``PAIRS``, while
    ``_FLAT_PAIRS``): a contiguous 16-bit input, 4-byte aligned, of even width; windows of
    2 or 3 rows and columns, stride 2, no padding, dilation 1; for the average, every
    window whole (the max clamps a ceil_mode window to the input)."""
    H, W = x4.shape[-2:]
    kh, kw = g.kernel
    return (_FLAT_PAIRS and kh in (2, 3) and kw in (2, 3) and g.stride == (2, 2)
            and g.padding == (0, 0) and g.dilation == (1, 1) and x4.element_size() == 2
            and x4.is_contiguous() and W % 2 == 0 and x4.data_ptr() % 4 == 0
            and (mode == "max" or windows_inside(g, H, W, H_out, W_out)))


def windows_inside(g: Pool2dGeometry, H: int, W: int, H_out: int, W_out: int) -> bool:
    """Whether no padding is asked for and every window of the ``H_out x W_out`` output
    lies inside the ``H x W`` input (so an average's divisor is the window's size under
    either count_include_pad)."""
    (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.stride, g.dilation
    return (g.padding == (0, 0) and (H_out - 1) * sh + (kh - 1) * dh < H
            and (W_out - 1) * sw + (kw - 1) * dw < W)


def _takes_wide_pairs(x4: torch.Tensor, mode: str, g: Pool2dGeometry, H_out: int,
                      W_out: int) -> bool:
    """Whether a 2x2 stride-2 pool of wide rows goes to the flat kernel's word reads
    (``_FLAT_PAIRS_WIDE``) instead of the band kernel."""
    N, C = x4.shape[:2]
    return (_FLAT_PAIRS_WIDE is not None and g.kernel == (2, 2) and W_out > _BAND_NARROW
            and N * C * H_out * W_out >= _BAND_MIN_OUTPUTS
            and pairs_fit(x4, mode, g, H_out, W_out))


def words_config_for(outputs: int) -> WordsConfig | None:
    """The word kernel's configuration for a max pool of ``outputs`` outputs that
    ``words_fit`` accepts: ``_WORDS`` from ``_WORDS_MIN_OUTPUTS``, ``_WORDS_SMALL`` from
    ``_BAND_MIN_OUTPUTS``; None (not the word kernel) below."""
    if outputs >= _WORDS_MIN_OUTPUTS:
        return _WORDS
    return _WORDS_SMALL if outputs >= _BAND_MIN_OUTPUTS else None


def pool2d_triton(x: torch.Tensor, out: torch.Tensor, mode: str, g: Pool2dGeometry,
                  count_include_pad: bool = True, divisor_override: int | None = None,
                  plan: Pool2dPlan | None = None,
                  config: BandConfig | None = None,
                  words: WordsConfig | None = None) -> torch.Tensor:
    """Write max_pool2d / avg_pool2d (``mode`` 'max' or 'avg') of ``x`` into ``out`` and
    return ``out``.

    ``x``: [N, C, H, W] or [C, H, W] of fp16, bf16 or fp32, any strides; ``out``: the
    output shape, ``x``'s dtype, contiguous. ``plan`` forces the older kernels with
    that plan (``path='flat'``: the flat kernel), ``config`` the band kernel and ``words``
    the word kernel with that configuration (tests, the sweep); by default the word kernel
    (:mod:`opspec.kernels.pool_words`) serves the 16-bit 3x3 stride-2 max pools it fits
    from ``_BAND_MIN_OUTPUTS`` outputs (``words_config_for``), and from there on
    the flat kernel's word reads the 2x2 stride-2 pools of wide rows that ``pairs_fit``
    (``_FLAT_PAIRS_WIDE``), and ``band_config_for`` picks for the others (the band kernel
    where it names a configuration and ``band_fits``), else the flat kernel where
    ``_FLAT_TABLE`` names the class and ``flat_fits``, else the older kernels. Nothing is
    launched for an empty output. No allocation, no host sync.
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
    if words is not None:
        if mode != "max" or not words_fit(x4, g.kernel, g.stride, g.padding, g.dilation,
                                          H_out, W_out):
            raise ValueError(
                f"the word kernel does not serve a {mode} pool of {x.dtype} input "
                f"{list(x.shape)} (strides {list(x.stride())}) with kernel {g.kernel}, "
                f"stride {g.stride}, padding {g.padding}, dilation {g.dilation} to "
                f"[{H_out}, {W_out}]: it takes 16-bit max pools, 3x3 stride 2, H = 2 H_out, "
                f"W = 2 W_out with W_out a multiple of 4, unit column stride and 16-byte "
                f"aligned rows (opspec.kernels.pool_words.words_fit)")
        return max_pool3x3s2_words(x4, out, g.padding, words)
    if plan is None:
        wcfg = words_config_for(R * W_out) if config is None and mode == "max" else None
        if wcfg is not None and words_fit(x4, g.kernel, g.stride, g.padding, g.dilation,
                                          H_out, W_out):
            return max_pool3x3s2_words(x4, out, g.padding, wcfg)
        if config is None and _takes_wide_pairs(x4, mode, g, H_out, W_out):
            plan = Pool2dPlan(_FLAT_PAIRS_WIDE[0], 0, _FLAT_PAIRS_WIDE[1], True, False, "flat")
    if plan is None:
        cfg = config
        if cfg is None and R * W_out >= _BAND_MIN_OUTPUTS:
            cfg = band_config_for(mode, g, W_out)
        if cfg is not None and band_fits(x4, g):
            return _launch_band(x4, out, mode, g, cfg, count_include_pad, divisor_override)
        if config is not None:
            raise ValueError("the band kernel does not serve this input and window "
                             "(see band_fits)")
        flat = _FLAT_TABLE.get(band_key(mode, g, W_out))
        if flat is not None and flat_fits(x4, g):
            plan = Pool2dPlan(flat[0], 0, flat[1], True, False, "flat")
    p = plan or pool2d_plan(R, H_out, W_out, g, H, W)
    merge_nc = N == 1 or x4.stride(0) == C * x4.stride(1)
    if p.path == "global":
        return _launch_global(x4, out, mode, g, p, merge_nc, count_include_pad,
                              divisor_override)
    if p.path == "rows":
        return _launch_rows(x4, out, mode, g, p, merge_nc, count_include_pad, divisor_override)
    if p.path == "flat":
        return _launch_flat(x4, out, mode, g, p, count_include_pad, divisor_override)
    n_col_blocks = triton.cdiv(W_out, p.block_w)
    n_row_blocks = triton.cdiv(H_out, p.block_r) if p.plane_tiles else 1
    use_int64 = _needs_int64(x4, R, H_out, W_out, g, p)
    kh, kw = g.kernel
    if p.plane_tiles:
        grid = (N * C * n_row_blocks * n_col_blocks,)
    else:
        grid = (triton.cdiv(R, p.block_r) * n_col_blocks,)
    launch(_pool2d_kernel, grid,
        x4, out,
        R, C, H, W, H_out, W_out, n_col_blocks, n_row_blocks,
        x4.stride(0), x4.stride(1), x4.stride(2), x4.stride(3),
        kh, kw, g.stride[0], g.stride[1], g.padding[0], g.padding[1],
        g.dilation[0], g.dilation[1],
        float(divisor_override) if divisor_override is not None else 1.0,
        KH_C=kh if p.unroll else 1, KW_C=kw if p.unroll else 1,
        UNROLL=p.unroll, IS_MAX=(mode == "max"),
        CLAMP=(mode == "max" and g.dilation == (1, 1)),
        MERGE_NC=merge_nc, PLANE_TILES=p.plane_tiles,
        COUNT_INCLUDE_PAD=bool(count_include_pad), HAS_DIVISOR=divisor_override is not None,
        BLOCK_R=p.block_r, BLOCK_W=p.block_w, USE_INT64=use_int64,
        num_warps=p.num_warps,
        **overlap_options(x4.device),
    )
    return out
