"""The reduction kernels under every launch variant the tuning table can select (and that
benchmarks/reduction_sweep.py times on the H200): the column loop with its per-column
accumulator (warps side by side) and with a 2-D one (narrow strips), with and without the
prefetch (unrolled by two: every parity of the block count), masked and whole strips, the
one-block column path and the second stage (one block, or a loop for many partials); the
row loop with and without prefetch. Through the real launch path (`reduction_triton`), on
CPU through Triton's interpreter (tests/conftest.py), in every dtype, odd sizes, strided
views, 64-bit offsets and empty tensors.

The SM count is lowered to 2 so that split grids stay small under the interpreter.
"""

from __future__ import annotations

import math

import pytest
import torch

import opspec.kernels.reduction as K
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.reduction import (
    COL, ROW, TUNING, Layout, Tuning, normalize_axes, plan_launch, reduced_shape,
    reduction_reference, reduction_triton,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
TOL = {
    torch.float64: dict(rtol=1e-9, atol=1e-9),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}

pytestmark = pytest.mark.skipif(not (TRITON_INTERPRETED or torch.cuda.is_available()),
                                reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


@pytest.fixture(autouse=True)
def _two_sms(monkeypatch):
    if DEV == "cpu":
        monkeypatch.setattr(K, "_sm_count", lambda index: 2)


def _col(**kw) -> Tuning:
    return Tuning(ROW, COL._replace(**kw))


def _row(**kw) -> Tuning:
    return Tuning(ROW._replace(**kw), COL)


# Column variants: the table, the sweep's kinds of candidate, and small ones that put the
# loop, the prefetch's odd and even block counts, and splits on small tensors.
COL_TUNINGS = {
    "table": TUNING,
    "rows8-prefetch": _col(rows_per_step=8, prefetch=True),
    "1warp-rows2-prefetch": _col(warps=1, rows_per_step=2, min_steps=1, prefetch=True),
    "1warp-rows2": _col(warps=1, rows_per_step=2, min_steps=1),
    "2warps-rows4-split": _col(warps=2, rows_per_step=4, programs_per_sm=64, min_steps=1),
    "8warps-rows32": _col(warps=8, rows_per_step=32, programs_per_sm=2),
}
ROW_TUNINGS = {
    "table": TUNING,
    "prefetch-small-tiles": _row(tile_bytes=256, one_block_max_bytes=128, prefetch=True),
    "small-tiles": _row(tile_bytes=256, one_block_max_bytes=128),
    "prefetch-128B": _row(tile_bytes=1024, bytes_per_thread=128, one_block_max_bytes=512,
                          prefetch=True, split_programs_per_sm=64),
}


def _x(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def _check(x, dim, reduction, tuning, out_dtype=None, **kw):
    axes = normalize_axes(dim, x.dim())
    od = out_dtype or x.dtype
    out = torch.empty(reduced_shape(x.shape, axes, False), dtype=od, device=x.device)
    assert reduction_triton(x, out, axes, reduction, tuning=tuning, **kw) is out
    want = reduction_reference(reduction, x, axes, od)
    torch.testing.assert_close(out, want, equal_nan=True, **TOL[od])
    return out


def _plan(x, dim, tuning, **kw):
    lay = K.collapse(x.shape, x.stride(), normalize_axes(dim, x.dim()))
    return plan_launch(lay, x.element_size(), 2, tuning=tuning, **kw)


# ============================================================================ plans

def test_variants_reach_the_kernel_paths():
    x = _x(37, 600)
    lp = _plan(x, 0, COL_TUNINGS["table"])
    assert lp.kind == "col" and not lp.acc_2d and lp.block_i == 512 and not lp.one_block
    lp = _plan(x, 0, COL_TUNINGS["1warp-rows2-prefetch"])
    assert lp.prefetch and lp.block_i == 128 and lp.block_r == 2 and lp.n_split > 1
    lp = _plan(_x(37, 40), 0, COL_TUNINGS["table"])
    assert lp.acc_2d and lp.block_i == 64 and lp.num_warps == 1
    lp = _plan(_x(9, 600), 0, COL_TUNINGS["table"])
    assert lp.one_block and lp.block_r == 16
    lp = _plan(_x(3, 1000), 1, ROW_TUNINGS["prefetch-small-tiles"])
    assert lp.kind == "row" and lp.prefetch and not lp.one_block and lp.block_r == 64
    # the second stage: one block up to stage2_max_rows partials, else the loop
    lay = Layout(((600, 1),), 200, 600)
    assert plan_launch(lay, 4, 2, 1, TUNING, stage2=True).one_block
    lp = plan_launch(lay, 4, 2, 1, _col(stage2_max_rows=64), stage2=True)
    assert not lp.one_block and lp.n_split == 1


# ============================================================================ columns

@pytest.mark.parametrize("name", list(COL_TUNINGS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_column_variants(name, dtype):
    t = COL_TUNINGS[name]
    x = _x(37, 600, dtype=dtype)                                  # a partial last strip
    _check(x, 0, "sum", t)
    _check(x, 0, "mean", t)
    if dtype in (torch.bfloat16, torch.float32) or name == "table":
        _check(x, 0, "amax", t)   # (tl.reduce with a NaN-propagating max is slow interpreted)
    _check(_x(21, 1024, dtype=dtype, seed=1), 0, "mean", t)       # whole strips
    # the middle axis of [outer, R, inner], two kept dimensions
    _check(_x(2, 41, 520, dtype=dtype, seed=2), 1, "sum", t)


@pytest.mark.parametrize("prefetch", [False, True])
def test_column_loop_every_block_count(prefetch):
    # 1 warp (64 float64 columns: one whole strip, one masked), 2 rows a step, no split:
    # R = 2k + t rows give k full blocks (k = 16..22) and a tail of t rows; the prefetch
    # loop is unrolled by two, so both parities matter
    t = _col(warps=1, rows_per_step=2, min_steps=100, prefetch=prefetch)
    for r in range(33, 45):
        x = _x(r, 70, dtype=torch.float64, seed=r)
        lp = _plan(x, 0, t)
        assert lp.n_split == 1 and not lp.one_block and lp.block_r == 2
        for reduction in K.REDUCTIONS:
            _check(x, 0, reduction, t)
    # forced splits: chunks of 1 to 5 blocks, the last chunk shorter
    x = _x(61, 70, dtype=torch.float64, seed=3)
    for n in (2, 3, 5, 7, 13):
        for reduction in K.REDUCTIONS:
            _check(x, 0, reduction, t, num_splits=n)


def test_column_second_stage_loop():
    # more partials than one second-stage block takes: the second stage loops
    t = _col(warps=1, rows_per_step=2, min_steps=1, stage2_max_rows=4)
    x = _x(80, 130, dtype=torch.bfloat16, seed=4)
    for reduction in K.REDUCTIONS:
        _check(x, 0, reduction, t, num_splits=9)
        _check(x, 0, reduction, t, out_dtype=torch.float32 if reduction != "amax" else None,
               num_splits=9)


@pytest.mark.parametrize("name", ["table", "1warp-rows2-prefetch", "2warps-rows4-split"])
def test_column_variants_on_strided_views(name):
    t = COL_TUNINGS[name]
    base = _x(50, 1300, dtype=torch.float16, seed=5)
    _check(base[:, ::2], 0, "sum", t)        # a column stride of 2: no 16-byte vectors
    _check(base[3:47, 7:], 0, "mean", t)     # an offset start, the row stride kept
    _check(base.t(), 1, "sum", t)            # the columns' rows: a column reduction
    _check(base[::3], 0, "amax", t)          # a row stride of 3 rows
    x3 = _x(4, 30, 300, seed=6)
    _check(x3.transpose(0, 1), (0, 1), "sum", t)     # reduced axes merge in memory order
    _check(x3, (0, 1), "mean", t, out_dtype=torch.float64)
    _check(_x(1, 300, seed=7).expand(40, 300), 0, "sum", t)  # a broadcast (stride-0) axis


def test_column_casts_and_special_values():
    t = COL_TUNINGS["1warp-rows2-prefetch"]
    x = _x(30, 260, dtype=torch.float32, seed=8)
    x[3, 5] = math.nan
    x[:, 7] = -math.inf
    x[11, 9] = math.inf
    got = _check(x, 0, "amax", t)
    assert math.isnan(got[5]) and got[7] == -math.inf and got[9] == math.inf
    got = _check(x, 0, "sum", t)
    assert math.isnan(got[5]) and got[7] == -math.inf and got[9] == math.inf
    _check(x.double(), 0, "sum", t, out_dtype=torch.float32)       # narrowing: cast first
    _check(x.bfloat16(), 0, "mean", t, out_dtype=torch.float16)    # narrowing bf16 -> f16
    # float16 -> bfloat16 (narrowing): values exact in both (the interpreter rounds toward
    # zero where GPUs round to nearest)
    xh = (torch.arange(30 * 260, device=DEV) % 7 - 3).to(torch.float16).view(30, 260)
    _check(xh, 0, "sum", t, out_dtype=torch.bfloat16)


def test_column_int64_offsets():
    for name in ("table", "1warp-rows2-prefetch"):
        t = COL_TUNINGS[name]
        for reduction in K.REDUCTIONS:
            _check(_x(45, 600, seed=10), 0, reduction, t, force_int64=True, num_splits=3)
        _check(_x(2, 20, 600, seed=11), 1, "mean", t, force_int64=True)


# ============================================================================ rows

@pytest.mark.parametrize("name", list(ROW_TUNINGS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_variants(name, dtype):
    t = ROW_TUNINGS[name]
    for reduction in K.REDUCTIONS:
        _check(_x(3, 1000, dtype=dtype), -1, reduction, t)          # rows, maybe split
        _check(_x(2, 700, dtype=dtype, seed=1), None, reduction, t)  # the whole tensor
    _check(_x(3, 4, 333, dtype=dtype, seed=2)[:, 1:3], -1, "sum", t)  # kept dims that do not merge


@pytest.mark.parametrize("prefetch", [False, True])
def test_row_loop_every_block_count(prefetch):
    # 64-element blocks (256 bytes of float32), no split: 0 to 5 full blocks and a tail
    t = _row(tile_bytes=256, one_block_max_bytes=128, split_min_steps=1000, prefetch=prefetch)
    for k in range(0, 6):
        for tail in (0, 5):
            r = 64 * k + tail
            if r < 2:
                continue
            x = _x(2, r, seed=r)
            for reduction in K.REDUCTIONS:
                _check(x, -1, reduction, t)
    x = _x(1, 64 * 11 + 3, seed=12)
    for n in (2, 3, 4, 6):
        for reduction in K.REDUCTIONS:
            _check(x, -1, reduction, t, num_splits=n)
            _check(x, -1, reduction, t, num_splits=n, force_int64=True)


def test_row_variants_on_strided_views_and_specials():
    t = ROW_TUNINGS["prefetch-small-tiles"]
    base = _x(6, 900, dtype=torch.bfloat16, seed=13)
    for reduction in K.REDUCTIONS:
        _check(base[:, ::3], -1, reduction, t)
        _check(base.t(), 0, reduction, t)
    x = _x(3, 500, seed=14)
    x[1, 77] = math.nan
    x[2, :] = -math.inf
    got = _check(x, -1, "amax", t)
    assert math.isnan(got[1]) and got[2] == -math.inf


# ============================================================================ empty

@pytest.mark.parametrize("tuning", [COL_TUNINGS["1warp-rows2-prefetch"],
                                    ROW_TUNINGS["prefetch-small-tiles"]])
def test_empty_inputs_under_the_variants(tuning):
    for shape, dim in (((0, 600), 0), ((600, 0), 0), ((0, 600), 1), ((3, 0, 5), 1)):
        x = torch.empty(shape, device=DEV)
        axes = normalize_axes(dim, x.dim())
        out = torch.empty(reduced_shape(shape, axes, False), device=DEV)
        reduction_triton(x, out, axes, "sum", tuning=tuning)
        assert torch.equal(out, torch.zeros_like(out))
