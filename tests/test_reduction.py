"""SumFwdOp, MeanFwdOp and AmaxFwdOp: the layout collapse and launch plan, the Triton
kernels against the torch reference (on CPU through Triton's interpreter, which
tests/conftest.py turns on without CUDA), the ops end to end (results, refused calls with
the declaration they break), their compile-boundary operators, one cold
`torch.compile(fullgraph=True)`, and their workload rows.

Sizes are small: the interpreter runs each program through numpy. Splits (the 2-stage
reduction) and 64-bit offsets are forced through `reduction_triton`'s test arguments.
"""

from __future__ import annotations

import math

import pytest
import torch

import opspec.kernels.reduction as K
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.launch import recording
from opspec.kernels.pdl import overlap_supported
from opspec.kernels.reduction import (
    REDUCTIONS, Layout, arrival_counts, collapse, normalize_axes, plan_launch, reduced_shape,
    reduction_reference, reduction_triton,
)
from opspec.kernels.reduction_impl import ReductionCall, ReductionReferenceKernel
from opspec.ops import AmaxFwdOp, MeanFwdOp, SumFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float64: dict(rtol=1e-9, atol=1e-9),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    # The interpreter rounds float32 -> bfloat16 toward zero (GPUs to nearest): one ulp.
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
TORCH_FN = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax}

pytestmark = pytest.mark.skipif(not (TRITON_INTERPRETED or torch.cuda.is_available()),
                                reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


def _x(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def _run(x, dim, reduction, out_dtype=None, **kw):
    """The Triton result (keepdim=False) and the reference's, for `dim` read as torch does."""
    axes = normalize_axes(dim, x.dim())
    od = out_dtype or x.dtype
    out = torch.empty(reduced_shape(x.shape, axes, False), dtype=od, device=x.device)
    got = reduction_triton(x, out, axes, reduction, **kw)
    assert got is out
    return out, reduction_reference(reduction, x, axes, od)


def _check(x, dim, reduction, out_dtype=None, **kw):
    got, want = _run(x, dim, reduction, out_dtype, **kw)
    torch.testing.assert_close(got, want, equal_nan=True, **TOL[got.dtype])
    return got


# ============================================================================ axes, layout, plan

def test_normalize_axes_reads_dim_as_torch():
    assert normalize_axes(None, 3) == (0, 1, 2)
    assert normalize_axes([], 3) == normalize_axes((), 3) == (0, 1, 2)
    assert normalize_axes(-1, 3) == (2,)
    assert normalize_axes((2, -3), 3) == (0, 2)
    assert normalize_axes(0, 0) == normalize_axes(-1, 0) == normalize_axes(None, 0) == ()
    with pytest.raises(IndexError, match="out of range for a tensor of rank 2"):
        normalize_axes(2, 2)
    with pytest.raises(ValueError, match="appears more than once"):
        normalize_axes((1, -1), 2)
    with pytest.raises(ValueError, match="appears more than once"):
        normalize_axes((0, -1), 0)
    assert reduced_shape((2, 3, 4), (0, 2), False) == (3,)
    assert reduced_shape((2, 3, 4), (0, 2), True) == (1, 3, 1)


def test_collapse_merges_dropping_size_one_axes():
    # contiguous [4, 5, 6] over the last axis: one kept and one reduced dimension
    assert collapse((4, 5, 6), (30, 6, 1), (2,)) == Layout(((20, 6),), 6, 1)
    # over axes 0 and 1 (adjacent): the reduced axes merge, the column layout
    assert collapse((4, 5, 6), (30, 6, 1), (0, 1)) == Layout(((6, 1),), 20, 6)
    # the middle axis: [outer, R, inner]
    assert collapse((4, 5, 6), (30, 6, 1), (1,)) == Layout(((4, 30), (6, 1)), 5, 6)
    # axes 0 and 2 interleave with the kept axis in memory: not collapsible (copied)
    assert collapse((4, 5, 6), (30, 6, 1), (0, 2)) is None
    # but on a permuted tensor whose reduced axes are adjacent in memory they merge
    assert collapse((6, 4, 5), (1, 30, 6), (0, 2)) == Layout(((4, 30),), 30, 1)
    # size-1 axes vanish; a full reduction keeps nothing
    assert collapse((1, 7, 1), (7, 1, 1), (0, 1, 2)) == Layout((), 7, 1)
    assert collapse((3, 1), (1, 1), (1,)) == Layout(((3, 1),), 1, 0)


def test_plan_for_workload_shapes():
    bf = 2
    # per-token rows of the hidden size: one row per program, the row in registers (no loop)
    lp = plan_launch(Layout(((32768, 8192),), 8192, 1), bf)
    assert (lp.kind, lp.block_m, lp.block_r, lp.num_warps, lp.n_split, lp.one_block) == (
        "row", 1, 8192, 8, 1, True)
    # 8 KiB rows: one per program, 4 warps (64 bytes a thread); 7168 rounds up to 8192
    lp = plan_launch(Layout(((4096, 4096),), 4096, 1), bf)
    assert (lp.kind, lp.block_m, lp.block_r, lp.num_warps, lp.one_block) == ("row", 1, 4096, 4, True)
    assert plan_launch(Layout(((4096, 7168),), 7168, 1), bf).block_r == 8192
    # short rows: several per program (8 KiB), while the grid keeps 4 programs per SM
    lp = plan_launch(Layout(((65536, 256),), 256, 1), bf)
    assert (lp.block_m, lp.block_r, lp.num_warps, lp.one_block) == (16, 256, 4, True)
    # decode: a small grid, but too little work per program to be worth a second launch
    lp = plan_launch(Layout(((32, 4096),), 4096, 1), bf)
    assert (lp.block_m, lp.n_split, lp.one_block) == (1, 1, True)
    # vocabulary rows: a loop over 16 KiB blocks, one row per program
    lp = plan_launch(Layout(((2048, 128256),), 128256, 1), bf)
    assert (lp.block_m, lp.block_r, lp.num_warps, lp.n_split, lp.one_block) == (1, 8192, 8, 1, False)
    # a whole-tensor reduction of 224 MiB is split over up to 4 programs per SM (one wave)
    lp = plan_launch(Layout((), 8192 * 14336, 1), bf)
    assert lp.kind == "row" and 132 * 3 <= lp.n_split <= 132 * 4 and not lp.one_block
    assert lp.r_per_split % lp.block_r == 0 and lp.n_split * lp.r_per_split >= 8192 * 14336
    # the vocabulary rows of decode: 32 rows, each split
    lp = plan_launch(Layout(((32, 128256),), 128256, 1), bf)
    assert lp.n_split == 16
    # column sums over tokens: 4 warps side by side over 2 KiB of each row (1024 bf16
    # columns), 8 rows a step (the next step loaded ahead), R split so that the grid holds
    # about 4 programs per SM while each chunk keeps at least 8 steps
    lp = plan_launch(Layout(((8192, 1),), 16384, 8192), bf)
    assert (lp.kind, lp.block_i, lp.block_r, lp.num_warps, lp.acc_2d) == ("col", 1024, 8, 4, False)
    assert lp.n_split == 64 and (8192 // 1024) * lp.n_split <= 4 * 132
    assert lp.r_per_split == 256 and not lp.one_block
    lp = plan_launch(Layout(((4096, 1),), 16384, 4096), bf)
    assert lp.block_i == 1024 and lp.n_split == 128 and lp.r_per_split == 128
    # float32 columns: 512 per program (one 16-byte vector per thread)
    lp = plan_launch(Layout(((4096, 1),), 16384, 4096), 4)
    assert (lp.block_i, lp.block_r, lp.n_split) == (512, 8, 64)
    # few columns: the strip is narrower than a warp's vectors, rows share the warp and the
    # accumulator is 2-D
    lp = plan_launch(Layout(((40, 1),), 700, 40), 4)
    assert (lp.block_i, lp.num_warps, lp.acc_2d, lp.block_r) == (64, 1, True, 16)
    # the second stage of a column split (64 partial rows): one block, narrow strips
    lp = plan_launch(Layout(((8192, 1),), 64, 8192), 4, num_splits=1, stage2=True)
    assert (lp.block_i, lp.block_r, lp.n_split, lp.one_block) == (64, 64, 1, True)
    # a short R is one block in stage 1 too
    lp = plan_launch(Layout(((8192, 1),), 16, 8192), 4)
    assert (lp.block_r, lp.n_split, lp.one_block) == (16, 1, True)
    # a forced split is clamped to one block of R per chunk
    assert plan_launch(Layout((), 100, 1), 4, num_splits=1000).n_split == 1


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, sys
import torch
import opspec.kernels.reduction as K
import sm90_build as sm90

def build(fn, args, kw):
    num_warps = kw.pop("num_warps")
    named = dict(zip(fn.arg_names, args))
    for name in [n for n, v in kw.items() if isinstance(v, torch.Tensor)]:
        named[name] = kw.pop(name)   # tensors passed by keyword (the finish's counts, result)
    k = sm90.build(fn, named, kw, num_warps)
    return {"ld": k.loads, "local": k.local, "in_flight": k.loads_in_flight(),
            "loop": k.constexprs["ONE_BLOCK"] is False, "bar": k.sass.count("BAR.SYNC"),
            "gdc": [k.ptx.count("griddepcontrol.wait"),
                    k.ptx.count("griddepcontrol.launch_dependents")]}

class Capture:
    def __init__(self, fn):
        self.fn, self.launches = fn, []
    def __getitem__(self, grid):
        return lambda *args, **kw: self.launches.append((self.fn, list(args), kw))

def launches(shape, dtype, dim, reduction, out_dtype=None, **kw):
    saved = K._row_reduce_kernel, K._col_reduce_kernel
    K._row_reduce_kernel, K._col_reduce_kernel = row, col = Capture(saved[0]), Capture(saved[1])
    try:
        x = torch.empty(shape, dtype=dtype, device="meta")
        axes = K.normalize_axes(dim, x.dim())
        out = torch.empty(K.reduced_shape(shape, axes, False), dtype=out_dtype or dtype,
                          device="meta")
        K.reduction_triton(x, out, axes, reduction, **kw)
    finally:
        K._row_reduce_kernel, K._col_reduce_kernel = saved
    return row.launches + col.launches

BF, F = torch.bfloat16, torch.float32
cases = {
    "row-4096": ((4096, 4096), BF, -1, "sum"),
    "row-7168-amax": ((8192, 7168), BF, -1, "amax"),
    "row-vocab": ((2048, 128256), BF, -1, "mean"),
    "whole": ((8192, 14336), BF, None, "sum"),
    "whole-fp32": ((8192, 14336), F, None, "sum"),
    "col": ((16384, 8192), BF, 0, "sum"),
    "col-amax-fp32": ((16384, 4096), F, 0, "amax"),
    # 64-bit offsets: a row split finished in place, a column split and its second stage
    "int64-whole": ((5, 20000), F, None, "mean", None, dict(num_splits=6, force_int64=True)),
    "int64-col": ((300, 20), F, 0, "amax", None, dict(num_splits=3, force_int64=True)),
}
out = {}
for name, case in cases.items():
    for i, (fn, args, kw) in enumerate(launches(*case[:5], **(case[5] if len(case) > 5 else {}))):
        out[f"{name}/{i}"] = build(fn, args, kw)
# the column split's launches as an overlapped pair (a meta tensor's plan has it off)
for i, (fn, args, kw) in enumerate(launches(*cases["col"][:4])):
    out[f"col-pdl/{i}"] = build(fn, args, dict(kw, PDL=True))
json.dump(out, sys.stdout)
"""


def test_kernels_build_for_sm90_with_loads_in_flight():
    """Each launch of the workload shapes compiles for sm_90 (ptxas included) as the launcher
    specialises it, with 16-byte loads only and no local memory; every step of a loop and
    every one-block row has its four 16-byte loads per thread in flight together (ptxas had
    consumed each before issuing the next when the loop carried a whole-block accumulator
    and masked its loads), the column loop its 16 rows. Compiled in a fresh process: under
    the interpreter, triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    # one launch a case, but the column splits' second stage (the whole-tensor splits
    # reduce their partials in place)
    assert sorted(built) == ["col-amax-fp32/0", "col-amax-fp32/1", "col-pdl/0", "col-pdl/1",
                             "col/0", "col/1", "int64-col/0", "int64-col/1", "int64-whole/0",
                             "row-4096/0", "row-7168-amax/0", "row-vocab/0", "whole-fp32/0",
                             "whole/0"], sorted(built)
    for name, k in built.items():
        assert k["local"] == 0, (name, k)
        if name.startswith("int64"):
            continue   # built at all (a return typed int64 in one branch once failed)
        assert set(k["ld"]) == {"ld.global.v4.b32"}, (name, k)
        assert k["in_flight"] >= 4, (name, k)
    assert built["row-vocab/0"]["loop"] and built["col/0"]["loop"] and built["whole/0"]["loop"]
    # the column loop (the table's 8 rows a step, the next step loaded ahead): each
    # thread's 8 rows of a step in flight together, the reduction over R inside each thread
    assert built["col/0"]["in_flight"] >= 8, built["col/0"]
    assert built["col-amax-fp32/0"]["in_flight"] >= 8, built["col-amax-fp32/0"]
    # built as an overlapped pair: one wait and one trigger each, the loop as before; the
    # plain builds have neither
    assert built["col-pdl/0"]["gdc"] == built["col-pdl/1"]["gdc"] == [1, 1], built
    assert built["col/0"]["gdc"] == built["col/1"]["gdc"] == [0, 0], built
    assert built["col-pdl/0"]["in_flight"] >= 8, built["col-pdl/0"]


# ============================================================================ kernels

def test_reference_is_the_torch_function():
    x = _x(6, 7, 8)
    torch.testing.assert_close(reduction_reference("sum", x, (0, 2), torch.float32),
                               x.sum((0, 2)))
    torch.testing.assert_close(reduction_reference("mean", x, (1,), torch.float64),
                               x.double().mean(1))
    assert torch.equal(reduction_reference("amax", x, (0, 1, 2), x.dtype), x.amax())
    xb = x.bfloat16()
    got = reduction_reference("mean", xb, (2,), torch.bfloat16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, xb.float().mean(2).bfloat16())
    with pytest.raises(ValueError, match="reduction must be one of"):
        reduction_reference("prod", x, (0,), x.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_rows_columns_and_whole(reduction, dtype):
    x = _x(17, 1000, dtype=dtype)
    _check(x, -1, reduction)                      # rows
    _check(x, 0, reduction)                       # columns
    _check(x, None, reduction)                    # whole (split in 5 chunks)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_two_stage_split(reduction):
    x = _x(5, 3000, dtype=torch.bfloat16, seed=1)
    _check(x, None, reduction, num_splits=6)      # one row split in 6
    _check(x, 1, reduction, num_splits=3)         # 5 rows, each split in 3
    _check(x.t(), 0, reduction, num_splits=4)     # a transposed input: row kernel, split
    _check(_x(700, 40, seed=2), 0, reduction, num_splits=5)   # columns split over R
    _check(_x(9, 70, 33, seed=3), 1, reduction, num_splits=2)  # [outer, R, inner] split
    # two kept dimensions that do not merge, the reduced one innermost: the looped row kernel
    _check(_x(3, 8, 3000, dtype=torch.bfloat16, seed=13)[:, :4, :], -1, reduction, num_splits=2)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_split_finished_in_place_or_by_a_second_launch(reduction):
    """A row split's partials reduced by each row's last program (the table: one launch)
    or by a second launch (``finish_in_place`` off): the same results, and the arrival
    counts back at zero after every launch, so the next launch on the stream reuses them."""
    x = _x(5, 20000, seed=14)    # rows of 5 blocks of 4096
    x[3, 9000] = math.nan if reduction == "amax" else x[3, 9000]   # a NaN through the finish
    two = K.TUNING._replace(row=K.ROW._replace(finish_in_place=False))
    for dim, splits in ((None, 6), (1, 3), (1, 5)):
        with recording() as one_launch:
            got = _check(x, dim, reduction, num_splits=splits)
        with recording() as two_launches:
            again = _check(x, dim, reduction, num_splits=splits, tuning=two)
        assert [k for k, *_ in one_launch] == [K._row_reduce_kernel]
        assert [k for k, *_ in two_launches] == [K._row_reduce_kernel] * 2
        torch.testing.assert_close(got, again, rtol=1e-6, atol=1e-6, equal_nan=True)
        assert not arrival_counts(x.device, 5).any()
    if reduction == "amax":
        assert math.isnan(_check(x, 1, reduction, num_splits=3)[3])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_column_split_stages_overlap_where_the_device_allows(reduction):
    """A column split's two launches: on a device of sm_90 or later (not the interpreter)
    both are launched dependent (``launch_pdl``) and built with the grid-dependency wait and
    trigger; elsewhere, and with ``overlap_stages`` off, two plain launches. The results
    are the same either way, and the same again from a CUDA graph."""
    x = _x(3000, 300, dtype=torch.bfloat16, seed=15)
    if reduction == "amax":
        x[1234, 77] = math.nan
    overlap = overlap_supported(x.device)
    assert overlap == (x.is_cuda and torch.cuda.get_device_capability() >= (9, 0))
    plain = K.TUNING._replace(col=K.COL._replace(overlap_stages=False))
    with recording() as launches:
        got = _check(x, 0, reduction, num_splits=6)
    with recording() as plain_launches:
        again = _check(x, 0, reduction, num_splits=6, tuning=plain)
    assert [k for k, *_ in launches] == [K._col_reduce_kernel] * 2
    (_, grid1, _, kw1), (_, _, _, kw2) = launches
    assert grid1[1] == 6
    for kw in (kw1, kw2):
        assert (kw["PDL"], kw.get("launch_pdl", False)) == (overlap, overlap)
    assert all(not kw["PDL"] and "launch_pdl" not in kw for *_, kw in plain_launches)
    torch.testing.assert_close(got, again, rtol=0, atol=0, equal_nan=True)
    if reduction == "amax":
        assert math.isnan(got[77]) and not got[76].isnan()
    if x.is_cuda:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _run(x, 0, reduction, num_splits=6)[0]
        for _ in range(3):
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(out, got, rtol=0, atol=0, equal_nan=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="streams and graphs need CUDA")
def test_split_finish_on_two_streams_and_in_a_cuda_graph():
    """The arrival counts are kept per stream: row splits running on two streams at once
    each count their own programs; a CUDA graph captures its own zeroed counts and replays
    them (each replay leaves them at zero)."""
    xs = [_x(7, 40000, seed=20 + i) for i in range(2)]
    outs = [torch.empty(7, device=DEV) for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in range(2)]
    torch.cuda.synchronize()
    for _ in range(20):
        for x, out, st in zip(xs, outs, streams):
            with torch.cuda.stream(st):
                reduction_triton(x, out, (1,), "sum", num_splits=9)
    torch.cuda.synchronize()
    for x, out in zip(xs, outs):
        torch.testing.assert_close(out, x.sum(1), **TOL[torch.float32])
    out = torch.empty(7, device=DEV)
    reduction_triton(xs[0], out, (1,), "amax", num_splits=9)   # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        reduction_triton(xs[0], out, (1,), "amax", num_splits=9)
    for _ in range(3):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, xs[0].amax(1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_several_rows_per_program_with_a_partial_last_block(reduction):
    # 32-byte rows: 4 per program (the grid keeps 4 programs per SM); 2113 rows leave the last
    # program one row, whose missing neighbours are read again and not stored
    assert plan_launch(collapse((2113, 8), (8, 1), (1,)), 4).block_m == 4
    _check(_x(2113, 8, seed=14), -1, reduction)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_odd_sizes(dtype):
    for shape in [(1,), (3,), (17,), (1, 1), (3, 1), (1, 1000), (2, 3, 1), (1023,)]:
        x = _x(*shape, dtype=dtype)
        for reduction in REDUCTIONS:
            _check(x, None, reduction)
            _check(x, -1, reduction)


def test_zero_dim_input_and_size_one_reductions():
    x = torch.tensor(2.5, device=DEV)
    for reduction in REDUCTIONS:
        for dim in (None, 0, -1, []):
            got = _check(x, dim, reduction)
            assert got.shape == () and float(got) == 2.5
    # reducing only size-1 axes copies (and casts) the input
    x = _x(4, 1, 5, dtype=torch.float16)
    got = _check(x, 1, "sum", torch.float32)
    assert got.shape == (4, 5) and torch.equal(got, x.float().view(4, 5))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_non_contiguous_inputs(reduction):
    base = _x(12, 60, dtype=torch.float16, seed=4)
    _check(base.t(), 0, reduction)                # the reduced axis is innermost in memory
    _check(base.t(), 1, reduction)                # a strided column reduction
    _check(base[:, ::3], 1, reduction)            # a step in the reduced axis
    _check(base[::2, 5:], 0, reduction)           # a row stride wider than the row
    x3 = _x(3, 5, 7, seed=5)
    for dim in ((0, 2), (1,), (2, 0), (0, 1), -1):
        _check(x3.permute(2, 0, 1), dim, reduction)
        _check(x3.transpose(0, 1), dim, reduction)
    _check(x3, (0, 2), reduction)                 # interleaved axes: copied, then reduced
    _check(x3[:, ::2, 1:], (0, 2), reduction)
    _check(_x(5, 1).expand(5, 8), 0, reduction)   # a broadcast (stride-0) axis


def test_result_dtype_casts_the_input_first():
    x = _x(9, 300, dtype=torch.float64, seed=6)
    got = _check(x, -1, "sum", torch.float32)     # float64 cast to float32 first
    assert got.dtype == torch.float32
    xb = _x(9, 300, dtype=torch.bfloat16, seed=7)
    _check(xb, -1, "mean", torch.float32)         # widened: exact cast, float32 math
    _check(xb, None, "sum", torch.float64, num_splits=3)   # float64 accumulation
    # float16 -> bfloat16 (a narrowing cast): values exact in both formats
    xh = (torch.arange(80, device=DEV) % 7 - 3).to(torch.float16).view(4, 20)
    got = _check(xh, 1, "sum", torch.bfloat16)
    torch.testing.assert_close(got, xh.float().sum(1).bfloat16(), rtol=0, atol=0)
    _check(xh.float(), 1, "mean", torch.float16)


def test_float64_is_accumulated_in_float64():
    x = torch.full((3, 4000), 1.0 + 2.0**-40, dtype=torch.float64, device=DEV)
    got = _check(x, 1, "sum")
    assert torch.equal(got, torch.full((3,), 4000 * (1.0 + 2.0**-40), dtype=torch.float64,
                                       device=DEV))


def test_amax_propagates_nan_and_handles_infinities():
    x = _x(4, 50, seed=8)
    x[1, 7] = math.nan
    x[2, :] = -math.inf
    x[3, 3] = math.inf
    got = _check(x, 1, "amax")
    assert math.isnan(got[1]) and got[2] == -math.inf and got[3] == math.inf
    assert math.isnan(_check(x, None, "amax", num_splits=3))
    assert math.isnan(_check(x, 0, "amax")[7])
    s = _check(x, 1, "sum")
    assert math.isnan(s[1]) and s[2] == -math.inf


def test_sixty_four_bit_offsets():
    for reduction in REDUCTIONS:
        _check(_x(6, 500, seed=9), 1, reduction, force_int64=True)
        _check(_x(300, 20, seed=10), 0, reduction, force_int64=True, num_splits=3)


def test_empty_tensors():
    # an empty result: nothing to write, nothing launched
    for reduction in REDUCTIONS:
        got, _ = _run(torch.empty(0, 5, device=DEV), 1, reduction)
        assert got.shape == (0,)
    # an empty reduction: 0 for sum, NaN for mean; amax refuses
    got, want = _run(torch.empty(0, 5, device=DEV), 0, "sum")
    assert torch.equal(got, torch.zeros(5, device=DEV))
    got, _ = _run(torch.empty(3, 0, dtype=torch.bfloat16, device=DEV), 1, "mean")
    assert got.dtype == torch.bfloat16 and torch.isnan(got).all()
    with pytest.raises(ValueError, match="amax of an empty reduction is undefined"):
        _run(torch.empty(0, 5, device=DEV), 0, "amax")


def test_rejects_bad_arguments():
    x = _x(4, 6)
    with pytest.raises(ValueError, match="reduction must be one of"):
        reduction_triton(x, torch.empty(4, device=DEV), (1,), "prod")
    with pytest.raises(ValueError, match="out must hold 4 elements"):
        reduction_triton(x, torch.empty(6, device=DEV), (1,), "sum")
    with pytest.raises(TypeError, match="amax keeps the input dtype"):
        reduction_triton(x, torch.empty(4, dtype=torch.float16, device=DEV), (1,), "amax")
    with pytest.raises(TypeError, match="must have a dtype in"):
        reduction_triton(x.int(), torch.empty(4, device=DEV), (1,), "sum")
    with pytest.raises(ValueError, match="contiguous"):
        reduction_triton(x, torch.empty(4, 2, device=DEV)[:, 0], (1,), "sum")


# ============================================================================ ops

def test_op_results():
    x = _x(4, 6, 10, dtype=torch.bfloat16, seed=11)
    for dim in (None, -1, 0, (0, 2), [1], ()):
        for keepdim in (False, True):
            kw = dict(keepdim=keepdim) if dim is None else dict(dim=dim, keepdim=keepdim)
            tdim = dim if dim is not None else None
            got = SumFwdOp(**kw)(x)
            want = torch.sum(x, dim=tdim, keepdim=keepdim)
            assert got.shape == want.shape and got.dtype == torch.bfloat16
            torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
            got = AmaxFwdOp(**kw)(x)
            assert torch.equal(got, torch.amax(x, dim=() if dim is None else dim,
                                                keepdim=keepdim))
    got = MeanFwdOp(dim=-1, keepdim=True, dtype=torch.float32)(x)
    assert got.shape == (4, 6, 1) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.mean(x, dim=-1, keepdim=True, dtype=torch.float32))
    # a dtype given by name
    assert SumFwdOp(dim=0, dtype="float64")(x).dtype == torch.float64
    # amax's default dim () reduces everything, as torch's
    assert AmaxFwdOp()(x).shape == () and AmaxFwdOp(keepdim=True)(x).shape == (1, 1, 1)


def test_op_records_and_roofline():
    op = MeanFwdOp(dim=1)
    x = _x(8, 32, dtype=torch.float16)
    op(x)
    rec = op.last_call
    assert rec.indices["S"] == (8, 32) and rec.indices["T"] == "float16"
    assert rec.tensors["output"].shape == (8,)
    assert op.eval_roofline() == (8 * 32 + 8, (8 * 32 + 8) * 2)
    s = SumFwdOp(dtype=torch.float32)
    s(x)
    assert s.eval_roofline() == (8 * 32, 8 * 32 * 2 + 4)


def test_op_empty_reductions():
    assert torch.equal(SumFwdOp(dim=0)(torch.empty(0, 3, device=DEV)),
                       torch.zeros(3, device=DEV))
    assert torch.isnan(MeanFwdOp(dim=0)(torch.empty(0, 3, device=DEV))).all()
    assert AmaxFwdOp(dim=1)(torch.empty(0, 3, device=DEV)).shape == (0,)


def test_op_refuses_an_axis_out_of_range():
    with pytest.raises(SignatureError) as ei:
        SumFwdOp(dim=3)(_x(2, 3, 4))
    expect_error(ei, SignatureError, "SumFwdOp", "signature.shape_rules.0",
                 "refinement `valid_axes(dim, len(S))`", "S=(2, 3, 4)")
    with pytest.raises(SignatureError) as ei:
        MeanFwdOp(dim=(0, -4))(_x(2, 3, 4))
    expect_error(ei, SignatureError, "MeanFwdOp", "signature.shape_rules.0")
    with pytest.raises(SignatureError) as ei:
        AmaxFwdOp(dim=1)(torch.tensor(1.0, device=DEV))
    expect_error(ei, SignatureError, "AmaxFwdOp", "signature.shape_rules.0", "S=()")


def test_op_refuses_a_repeated_axis():
    with pytest.raises(SignatureError) as ei:
        SumFwdOp(dim=(0, -3))(_x(2, 3, 4))
    expect_error(ei, SignatureError, "SumFwdOp", "signature.shape_rules.1",
                 "refinement `unique_axes(dim, len(S))` does not hold with S=(2, 3, 4), dim=(0, -3)")
    with pytest.raises(SignatureError) as ei:
        AmaxFwdOp(dim=[1, 1])(_x(2, 3))
    expect_error(ei, SignatureError, "AmaxFwdOp", "signature.shape_rules.1")


def test_amax_refuses_an_empty_reduced_axis():
    with pytest.raises(SignatureError) as ei:
        AmaxFwdOp(dim=0)(torch.empty(0, 3, device=DEV))
    expect_error(ei, SignatureError, "AmaxFwdOp", "signature.shape_rules.2", "S=(0, 3)")
    with pytest.raises(SignatureError) as ei:
        AmaxFwdOp()(torch.empty(3, 0, device=DEV))
    expect_error(ei, SignatureError, "AmaxFwdOp", "signature.shape_rules.2")
    # an empty result with an empty reduced axis is still refused, as torch does
    with pytest.raises(SignatureError) as ei:
        AmaxFwdOp(dim=1)(torch.empty(0, 0, device=DEV))
    expect_error(ei, SignatureError, "AmaxFwdOp", "signature.shape_rules.2")


def test_op_refuses_bad_dtypes_and_parameters():
    with pytest.raises(SignatureError) as ei:
        SumFwdOp()(torch.arange(4, device=DEV))
    expect_error(ei, SignatureError, "SumFwdOp", "signature.inputs.input.dtype",
                 "input input, dtype T", "got int64")
    # mean needs a floating result: the spec's dtype parameter takes floating dtypes only
    with pytest.raises(SignatureError) as ei:
        MeanFwdOp(dtype=torch.int32)
    expect_error(ei, SignatureError, "MeanFwdOp", "signature.params.dtype",
                 "has type `float16 | bfloat16 | float32 | float64 | None`", "got torch.int32")
    with pytest.raises(SignatureTypeError) as ei:
        SumFwdOp(dim=1.5)
    expect_error(ei, SignatureTypeError, "SumFwdOp", "signature.params.dim",
                 "has type `int | list[int] | tuple[int, ...] | None`", "got 1.5")
    with pytest.raises(SignatureTypeError) as ei:
        AmaxFwdOp(keepdim=1)
    expect_error(ei, SignatureTypeError, "AmaxFwdOp", "signature.params.keepdim", "got 1")
    with pytest.raises(SignatureTypeError) as ei:
        SumFwdOp()([1.0, 2.0])
    expect_error(ei, SignatureTypeError, "SumFwdOp", "signature.inputs.input",
                 "expected a torch.Tensor, got list")


def test_dispatch_and_the_reference_kernel():
    op = SumFwdOp()
    call = ReductionCall("sum", "bfloat16", "float32", device=torch.device(DEV))
    assert op.key_for("reduce", call) == "reduction_triton"
    xpu = ReductionCall("sum", "bfloat16", "float32", device=torch.device("xpu"))
    assert op.key_for("reduce", xpu) == "reduction_reference"
    ref = ReductionReferenceKernel(ReductionCall("mean", "float16", "float32"))
    x = _x(3, 4, 5, dtype=torch.float16).cpu()
    out = torch.empty(3, 1, 5)
    assert ref.forward(x, out, (1,)) is out
    torch.testing.assert_close(out, x.float().mean(1, keepdim=True))


# ============================================================================ compile boundary

def test_operator_names():
    assert SumFwdOp.compile_op_names == ("opspec::reduction_sum_fwd_op",)
    assert MeanFwdOp.compile_op_names == ("opspec::reduction_mean_fwd_op",)
    assert AmaxFwdOp.compile_op_names == ("opspec::reduction_amax_fwd_op",)
    assert str(torch.ops.opspec.reduction_sum_fwd_op.default._schema) == (
        "opspec::reduction_sum_fwd_op(Tensor input, str key) -> Tensor")


@pytest.mark.parametrize("op", [SumFwdOp(dim=-1, dtype=torch.float32),
                                MeanFwdOp(dim=(0, 2), keepdim=True), AmaxFwdOp(dim=0)],
                         ids=lambda o: type(o).__name__)
def test_opcheck_every_operator(op):
    (name,) = type(op).compile_op_names
    packet = getattr(torch.ops.opspec, name.split("::")[1]).default
    for x in (_x(3, 4, 5), _x(2, 3, 6, dtype=torch.float16)):
        torch.library.opcheck(packet, (x, op._opspec_key))


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    mean, amax = MeanFwdOp(dim=-1, keepdim=True), AmaxFwdOp(dim=-1, keepdim=True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda x: (x - mean(x)) / amax(x), backend=backend, fullgraph=True)
    x = _x(4, 16, seed=12)
    got = fn(x)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("reduction_mean_fwd_op" in t for t in targets), targets
    assert any("reduction_amax_fwd_op" in t for t in targets), targets
    torch.testing.assert_close(got, (x - x.mean(-1, keepdim=True)) / x.amax(-1, keepdim=True))


# ============================================================================ workloads

@pytest.mark.parametrize("cls", [SumFwdOp, MeanFwdOp, AmaxFwdOp])
def test_workload_rows_instantiate_on_meta(cls):
    large = 0
    for case in cases(cls):
        op = case.construct(cls)
        (x,) = case.inputs("meta")
        assert x.device.type == "meta" and list(x.shape) == list(case.values["S"])
        ind = op.check_call(x)
        assert ind["S"] == tuple(case.values["S"]) and ind["T"] == case.dtypes["T"]
        axes = normalize_axes(op.dim, x.dim())
        out_dtype = getattr(op, "_dtype", None) or x.dtype
        n_out = math.prod(reduced_shape(x.shape, axes, op.keepdim))
        traffic = x.numel() * x.element_size() + n_out * out_dtype.itemsize
        large = max(large, traffic)
        assert len(case.label) <= 24
    assert large >= 256 * 2**20


def test_workload_rows_cover_the_brief():
    amax = {c.label: c for c in cases(AmaxFwdOp)}
    # fp8 scaling: per tensor [T, H] -> [] and per token [T, H] -> [T, 1]
    assert amax["dsv3-fp8-tensor"].params.get("dim", ()) in ((), [])
    assert amax["dsv3-fp8-token"].params == {"dim": -1, "keepdim": True}
    mean = {c.label for c in cases(MeanFwdOp)}
    assert {"llama3-logits-row", "llama3-logits-full", "llama3-logits-decode"} <= mean
    s = {c.label: c for c in cases(SumFwdOp)}
    assert s["llama3-70b-colsum"].params["dim"] == 0
    assert s["llama3-70b-large-row"].params["dtype"] == torch.float32
