"""The pool family: MaxPool2dFwdOp, AvgPool2dFwdOp.

Kernels: the Triton kernel against torch's own pooling, on the CPU through Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1 without CUDA), in float32, float16
and bfloat16, odd sizes, padding / dilation / ceil_mode / count_include_pad /
divisor_override combinations, NaN and infinities, both window loops (unrolled and run-time),
several tiles per row and per column, strided inputs and empty batches. Ops: results against
torch.nn.functional, errors naming the declaration they break, the compile boundary
(`opcheck` on both operators, one cold `torch.compile(fullgraph=True)`), and every workload
case instantiated on the meta device. Where CUDA is available the same tests run on the GPU
(every tensor a test makes is made there), so this file is also the family's GPU
correctness check.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opspec.kernels.pool import (
    Pool2dPlan, pool2d_geometry, pool2d_out_size, pool2d_plan, pool2d_reference, pool2d_triton,
)
from opspec.ops import AvgPool2dFwdOp, MaxPool2dFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# The average is summed in float32 and rounded once (the interpreter rounds bfloat16 by
# truncation: one bfloat16 step).
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
# (input shape, kernel_size, stride, padding, dilation, ceil_mode)
WINDOWS = [
    ((2, 3, 9, 11), 3, 2, 1, 1, False),               # ResNet stem shape, odd sizes
    ((1, 2, 17, 13), 3, 2, 0, 1, True),               # ceil_mode: a clipped last window
    ((2, 1, 10, 7), (2, 3), (1, 2), (1, 0), 1, True),  # per-axis values, ceil_mode + padding
    ((1, 3, 8, 8), 2, None, 0, 1, False),             # stride None = kernel_size
    ((3, 5, 5), 3, 1, 1, 1, False),                   # unbatched [C, H, W]
    ((1, 1, 1, 1), 1, 1, 0, 1, False),                # a single pixel
    ((1, 2, 12, 9), 3, (2, 1), 1, (2, 3), True),      # dilation (max only)
    ((2, 2, 6, 40), (1, 3), 1, (0, 1), 1, False),     # wide rows
]
AVG_MODES = [(True, None), (False, None), (True, -3), (False, 5)]


@pytest.fixture(autouse=True)
def _on_device():
    """Tensors the tests make without naming a device are made on DEV."""
    with torch.device(DEV):
        yield


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cpu").to(device=DEV, dtype=dtype)


def _torch_max(x, k, s, p, d, c):
    return F.max_pool2d(x.float(), k, s, p, d, c).to(x.dtype)


def _torch_avg(x, k, s, p, c, cip, div):
    return F.avg_pool2d(x.float(), k, s, p, c, cip, div)


def _run(x, mode, g, cip=True, div=None, plan=None):
    H_out, W_out = pool2d_out_size(x.shape[-2], x.shape[-1], g)
    out = torch.empty((*x.shape[:-2], H_out, W_out), dtype=x.dtype)
    res = pool2d_triton(x, out, mode, g, cip, div, plan)
    assert res is out
    return out


# ============================================================================ geometry, reference

def test_geometry_and_output_size_follow_torch():
    g = pool2d_geometry((2, 3), None, 1, (1, 2), True)
    assert (g.kernel, g.stride, g.padding, g.dilation, g.ceil_mode) == \
        ((2, 3), (2, 3), (1, 1), (1, 2), True)
    assert pool2d_geometry(3, []).stride == (3, 3)
    for shape, k, s, p, d, c in WINDOWS:
        g = pool2d_geometry(k, s, p, d, c)
        want = F.max_pool2d(torch.zeros(shape, device="cpu"), k, s, p, d, c).shape[-2:]
        assert pool2d_out_size(shape[-2], shape[-1], g) == tuple(want)
    with pytest.raises(ValueError, match="pair"):
        pool2d_geometry((1, 2, 3))


def test_reference_matches_torch():
    x = _randn(2, 3, 9, 11, dtype=torch.bfloat16)
    g = pool2d_geometry(3, 2, 1, 1, True)
    got = pool2d_reference(x, "max", g)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, F.max_pool2d(x, 3, 2, 1, 1, True))
    got = pool2d_reference(x, "avg", g, False, None)
    torch.testing.assert_close(got.float(), F.avg_pool2d(x.float(), 3, 2, 1, True, False),
                               **TOL[torch.bfloat16])
    x64 = x.double()
    assert pool2d_reference(x64, "avg", g).dtype == torch.float64
    with pytest.raises(ValueError, match="dilation"):
        pool2d_reference(x, "avg", pool2d_geometry(3, 1, 0, 2))
    with pytest.raises(ValueError, match="mode"):
        pool2d_reference(x, "min", g)


# ============================================================================ Triton kernel

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"{w[0]}-k{w[1]}-s{w[2]}-p{w[3]}-d{w[4]}-c{int(w[5])}")
def test_max_pool_triton(window, dtype):
    shape, k, s, p, d, c = window
    x = _randn(*shape, dtype=dtype)
    got = _run(x, "max", pool2d_geometry(k, s, p, d, c))
    # the maximum is one of the inputs: exact
    assert torch.equal(got, _torch_max(x, k, s, p, d, c))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", [w for w in WINDOWS if w[4] == 1],
                         ids=lambda w: f"{w[0]}-k{w[1]}-s{w[2]}-p{w[3]}-c{int(w[5])}")
def test_avg_pool_triton(window, dtype):
    shape, k, s, p, _, c = window
    x = _randn(*shape, dtype=dtype, seed=1)
    g = pool2d_geometry(k, s, p, 1, c)
    for cip, div in AVG_MODES:
        got = _run(x, "avg", g, cip, div)
        torch.testing.assert_close(got.float(), _torch_avg(x, k, s, p, c, cip, div),
                                   **TOL[dtype], msg=lambda m: f"{cip=} {div=}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_max_propagates_nan_and_keeps_infinities(dtype):
    x = _randn(1, 2, 7, 9, dtype=dtype)
    x[0, 0, 1, 1] = float("nan")          # inside several windows
    x[0, 1, 6, 8] = float("nan")          # the last pixel: a clipped ceil_mode window
    x[0, 0, 5, 0] = float("inf")
    x[0, 1, :3, :3] = float("-inf")       # a window of -inf only
    g = pool2d_geometry(3, 2, 1, 1, True)
    got = _run(x, "max", g)
    want = _torch_max(x, 3, 2, 1, 1, True)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert got.isnan().sum() == want.isnan().sum() > 0
    # NaN propagates through the average too, as a sum does
    got = _run(x, "avg", g)
    assert torch.equal(got.isnan(), _torch_avg(x, 3, 2, 1, True, True, None).isnan())


def test_large_window_loops_at_run_time():
    """A window of more than 32 elements (global pooling) takes the run-time loop: clamped
    (max), masked (dilated max, average)."""
    x = _randn(2, 3, 11, 10)
    g = pool2d_geometry((11, 9), 1, (5, 4), 1, False)
    assert not pool2d_plan(6 * 1, 1, 2, g).unroll
    assert torch.equal(_run(x, "max", g), _torch_max(x, (11, 9), 1, (5, 4), 1, False))
    gd = pool2d_geometry((6, 6), 1, 3, 2, True)
    assert torch.equal(_run(x, "max", gd), _torch_max(x, (6, 6), 1, 3, 2, True))
    torch.testing.assert_close(_run(x, "avg", g, False),
                               _torch_avg(x, (11, 9), 1, (5, 4), False, False, None),
                               **TOL[torch.float32])


# Global pooling (a 1 x 1 output): (input shape, kernel_size, padding, ceil_mode)
GLOBAL_WINDOWS = [
    ((3, 5, 7, 7), 7, 0, False),                 # the ResNet head window; 15 planes: a partial program
    ((2, 3, 5, 3), (5, 3), 0, False),            # an odd plane
    ((2, 2, 5, 5), (5, 6), (2, 3), False),       # padding: the window covers 3 x 3 (not flat)
    ((1, 3, 5, 4), 6, 0, True),                  # ceil_mode: a window past the input
    ((2, 1, 13, 12), (13, 12), 0, False),        # 156 elements: the run-time loop
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", GLOBAL_WINDOWS, ids=lambda w: f"{w[0]}-k{w[1]}-p{w[2]}-c{int(w[3])}")
def test_global_path(window, dtype):
    """A 1 x 1 output reduces each plane's window: max exact (NaN kept, a plane of -inf),
    the average under every divisor rule."""
    shape, k, pad, c = window
    x = _randn(*shape, dtype=dtype, seed=4)
    x[0, 0, 1, 1] = float("nan")
    x[-1, -1] = float("-inf")
    g = pool2d_geometry(k, None, pad, 1, c)
    assert pool2d_out_size(shape[2], shape[3], g) == (1, 1)
    assert pool2d_plan(shape[0] * shape[1], 1, 1, g, shape[2], shape[3]).path == "global"
    got = _run(x, "max", g)
    torch.testing.assert_close(got, _torch_max(x, k, None, pad, 1, c), rtol=0, atol=0,
                               equal_nan=True)
    assert got[0, 0].isnan().all() and got[-1, -1].eq(float("-inf")).all()
    x[0, 0, 1, 1] = 0.0
    x[-1, -1] = 1.0
    for cip, div in AVG_MODES:
        torch.testing.assert_close(_run(x, "avg", g, cip, div).float(),
                                   _torch_avg(x, k, None, pad, c, cip, div), **TOL[dtype],
                                   msg=lambda m: f"{cip=} {div=}: {m}")


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_global_path_layouts(mode, monkeypatch):
    """Global pooling of strided inputs (channels_last: planes contiguous; a transposed
    plane: not flat; sliced channels: N and C not merged), unbatched, an empty batch, and
    int64 offsets (forced with a lower limit)."""
    import opspec.kernels.pool as pool_mod

    base = _randn(3, 6, 7, 5, dtype=torch.bfloat16, seed=5)
    views = {
        "contiguous": base,
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "transposed": base.transpose(2, 3),
        "sliced": base[:, 1::2],
        "unbatched": base[1],
        "empty": base[:0],
    }

    def want(x, k):
        if mode == "max":
            return _torch_max(x, k, None, 0, 1, False)
        return _torch_avg(x, k, None, 0, False, True, None).to(x.dtype)

    def check(names):
        for name in names:
            x = views[name]
            k = tuple(x.shape[-2:])
            got = _run(x, mode, pool2d_geometry(k))
            assert got.shape == want(x, k).shape, name
            torch.testing.assert_close(got, want(x, k), rtol=0 if mode == "max" else 1.6e-2,
                                       atol=0 if mode == "max" else 1.6e-2, msg=name)

    check(views)
    monkeypatch.setattr(pool_mod, "_INT32_LIMIT", 64)
    check(["transposed", "sliced"])


# Stride 1 along H (the rows path): (input shape, kernel_size, stride, padding, dilation, ceil_mode)
ROWS_WINDOWS = [
    ((2, 2, 21, 34), 3, 1, 1, 2, False),          # DeepLab's dilated 3 x 3; 19 rows: a partial block
    ((1, 3, 11, 32), 3, 1, 1, 1, True),           # 3 x 3 stride 1 (Inception, PoolFormer), ceil_mode
    ((1, 2, 10, 32), (4, 3), (1, 1), (2, 1), (1, 1), False),  # an even window height
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", ROWS_WINDOWS, ids=lambda w: f"{w[0]}-k{w[1]}-d{w[4]}-c{int(w[5])}")
def test_rows_path(window, dtype):
    """Stride-1 rows share their input rows: max exact (NaN kept, -inf windows), the average
    under every divisor rule."""
    shape, k, st, pad, d, c = window
    x = _randn(*shape, dtype=dtype, seed=6)
    x[0, 0, 2, 3] = float("nan")
    x[0, -1, :4, :6] = float("-inf")
    g = pool2d_geometry(k, st, pad, d, c)
    H_out, W_out = pool2d_out_size(shape[2], shape[3], g)
    assert pool2d_plan(shape[0] * shape[1] * H_out, H_out, W_out, g).path == "rows"
    got = _run(x, "max", g)
    want = _torch_max(x, k, st, pad, d, c)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert got.isnan().sum() == want.isnan().sum() > 0
    if d == 1 or d == (1, 1):
        x[0, 0, 2, 3] = 0.0
        x[0, -1, :4, :6] = -2.0
        for cip, div in AVG_MODES:
            torch.testing.assert_close(_run(x, "avg", g, cip, div).float(),
                                       _torch_avg(x, k, st, pad, c, cip, div), **TOL[dtype],
                                       msg=lambda m: f"{cip=} {div=}: {m}")


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_rows_path_tiles_and_layouts(mode, monkeypatch):
    """The rows path forced onto small tiles (several column blocks, a column stride of 2,
    8-row blocks) of strided inputs, an empty batch, and int64 offsets."""
    import opspec.kernels.pool as pool_mod

    base = _randn(2, 3, 9, 11, dtype=torch.float16, seed=7)
    views = {
        "contiguous": base[:1],
        "channels_last": base[1:].contiguous(memory_format=torch.channels_last),
        "transposed": base[:1].transpose(2, 3)[:, :, :, 1:],
        "sliced": base[:, ::2],
        "empty": base[:0],
    }
    assert views["sliced"].stride(0) != 2 * views["sliced"].stride(1)   # N, C not merged
    plan = Pool2dPlan(8, 4, 1, True, True, "rows")
    g = pool2d_geometry(3, (1, 2), 1, (1, 1), True)

    def check(names):
        for name in names:
            x = views[name]
            got = _run(x, mode, g, False, None, plan)
            if mode == "max":
                assert torch.equal(got, _torch_max(x, 3, (1, 2), 1, 1, True)), name
            else:
                torch.testing.assert_close(got.float(),
                                           _torch_avg(x, 3, (1, 2), 1, True, False, None),
                                           **TOL[torch.float16], msg=name)

    check(views)
    monkeypatch.setattr(pool_mod, "_INT32_LIMIT", 64)
    check(["transposed"])


@pytest.mark.parametrize("plan", [Pool2dPlan(2, 4, 1, True), Pool2dPlan(1, 2, 1, False),
                                  Pool2dPlan(8, 1, 1, True), Pool2dPlan(2, 4, 1, True, True),
                                  Pool2dPlan(4, 2, 1, False, True)], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_tiles_cover_rows_and_columns(plan, layout):
    """Small tiles: several column blocks per row, a partial last row tile, both loops,
    flattened rows and plane tiles, planes merged (contiguous) or not (channels_last)."""
    x = _randn(2, 2, 5, 9, dtype=torch.float16)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    g = pool2d_geometry(3, (2, 1), 1, 1, True)
    assert torch.equal(_run(x, "max", g, plan=plan), _torch_max(x, 3, (2, 1), 1, 1, True))
    torch.testing.assert_close(_run(x, "avg", g, False, None, plan).float(),
                               _torch_avg(x, 3, (2, 1), 1, True, False, None),
                               **TOL[torch.float16])


def test_plan_shapes():
    stem = pool2d_geometry(3, 2, 1)
    # ResNet stem: 56-wide rows in 64-wide blocks, tiles of 8 rows of one plane (the H200
    # ran it 3.2x faster than with 8-wide blocks)
    p = pool2d_plan(128 * 64 * 56, 56, 56, stem)
    assert (p.block_r, p.block_w, p.num_warps, p.unroll, p.plane_tiles) == (8, 64, 2, True, True)
    # U-Net: 128-wide rows, tiles of 8 rows of one plane
    p = pool2d_plan(16 * 64 * 128, 128, 128, pool2d_geometry(2))
    assert (p.block_r, p.block_w, p.num_warps, p.plane_tiles) == (8, 128, 4, True)
    # Inception: 35-wide rows in one 64-wide block, tiles of 4 rows of one plane
    p = pool2d_plan(32 * 192 * 35, 35, 35, pool2d_geometry(3, 1, 1))
    assert (p.block_r, p.block_w, p.plane_tiles) == (4, 64, True)
    # 28 x 28 planes: a power of two pads 28 rows by more than an eighth: flattened rows
    p = pool2d_plan(128 * 256 * 28, 28, 28, pool2d_geometry(2))
    assert (p.block_r, p.block_w, p.num_warps, p.plane_tiles) == (32, 32, 4, False)
    # ResNet head: one pixel a row; 1024 rows a tile would make 256 programs: 256 rows
    p = pool2d_plan(128 * 2048, 1, 1, pool2d_geometry(7))
    assert (p.block_r, p.block_w, p.plane_tiles, p.unroll) == (256, 1, False, False)
    p = pool2d_plan(3, 3, 300, stem)                             # wide rows: split, few rows
    assert (p.block_r, p.block_w, p.num_warps, p.plane_tiles) == (2, 128, 1, False)
    # the ResNet head as a reduction: 64 planes a program, 7 unrolled passes of 8 lanes
    p = pool2d_plan(128 * 2048, 1, 1, pool2d_geometry(7), 7, 7)
    assert (p.path, p.block_r, p.block_w, p.num_warps, p.unroll) == ("global", 64, 8, 4, True)
    # a long window loops at run time; a small grid takes one plane a program
    p = pool2d_plan(8 * 64, 1, 1, pool2d_geometry(56), 56, 56)
    assert (p.path, p.block_r, p.block_w, p.unroll) == ("global", 1, 1024, False)
    # DeepLab's dilated 3 x 3 (62 x 62 outputs): 16 rows of 64 columns, 20 input rows
    p = pool2d_plan(8 * 256 * 62, 62, 62, pool2d_geometry(3, 1, 1, 2))
    assert (p.path, p.block_r, p.block_w, p.num_warps) == ("rows", 16, 64, 2)
    # 56 x 56 stride 1: 8-row blocks (no padded row); 35 wide pads 64 lanes too much: tiles
    p = pool2d_plan(64 * 64 * 56, 56, 56, pool2d_geometry(3, 1, 1))
    assert (p.path, p.block_r, p.block_w) == ("rows", 8, 64)
    assert pool2d_plan(32 * 192 * 35, 35, 35, pool2d_geometry(3, 1, 1)).path == "tile"


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_strided_inputs(mode):
    """Any strides: channels_last, a transposed view, a sliced view, as torch's results."""
    base = _randn(2, 6, 11, 14, dtype=torch.bfloat16)
    views = {
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "transposed": base.transpose(2, 3),
        "sliced": base[:, 1::2, 1:, ::2],
        "unbatched-permuted": base[0].permute(0, 2, 1),
    }
    g = pool2d_geometry(3, 2, 1, 1, True)
    for name, x in views.items():
        assert not x.is_contiguous() or name == "channels_last"
        got = _run(x, mode, g)
        if mode == "max":
            assert torch.equal(got, _torch_max(x, 3, 2, 1, 1, True)), name
        else:
            torch.testing.assert_close(got.float(), _torch_avg(x, 3, 2, 1, True, True, None),
                                       **TOL[torch.bfloat16], msg=name)


def test_empty_batch_launches_nothing():
    x = torch.empty(0, 3, 8, 8, dtype=torch.float16)
    for mode in ("max", "avg"):
        out = _run(x, mode, pool2d_geometry(2))
        assert out.shape == (0, 3, 4, 4)


def test_launcher_checks():
    x = _randn(1, 2, 6, 6)
    g = pool2d_geometry(2)
    with pytest.raises(ValueError, match="out must have shape"):
        pool2d_triton(x, torch.empty(1, 2, 4, 4), "max", g)
    with pytest.raises(TypeError, match="share a dtype"):
        pool2d_triton(x, torch.empty(1, 2, 3, 3, dtype=torch.float16), "max", g)
    with pytest.raises(ValueError, match="mode"):
        pool2d_triton(x, torch.empty(1, 2, 3, 3), "sum", g)
    with pytest.raises(ValueError, match="contiguous"):
        pool2d_triton(x, torch.empty(1, 2, 3, 6)[..., ::2], "max", g)


# ============================================================================ ops

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ops_match_torch(dtype):
    x = _randn(2, 4, 13, 10, dtype=dtype, seed=3)
    for kw in (dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1),
                    ceil_mode=True),
               dict(kernel_size=2)):
        y = MaxPool2dFwdOp(**kw)(x)
        assert y.is_contiguous() and torch.equal(y, _torch_max(
            x, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
            kw.get("dilation", 1), kw.get("ceil_mode", False)))
    for kw in (dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
               dict(kernel_size=(2, 3), padding=(1, 1), divisor_override=4),
               dict(kernel_size=2)):
        y = AvgPool2dFwdOp(**kw)(x)
        want = F.avg_pool2d(x.float(), kw["kernel_size"], kw.get("stride"),
                            kw.get("padding", 0), kw.get("ceil_mode", False),
                            kw.get("count_include_pad", True), kw.get("divisor_override"))
        torch.testing.assert_close(y.float(), want, **TOL[dtype])
    # global pooling (the 'global' path) through the ops
    assert torch.equal(MaxPool2dFwdOp((13, 10))(x), _torch_max(x, (13, 10), None, 0, 1, False))
    torch.testing.assert_close(AvgPool2dFwdOp((13, 10))(x).float(),
                               F.avg_pool2d(x.float(), (13, 10)), **TOL[dtype])
    # unbatched [C, H, W] and an empty batch
    assert torch.equal(MaxPool2dFwdOp(3, 2, 1)(x[0]), _torch_max(x[0], 3, 2, 1, 1, False))
    assert AvgPool2dFwdOp(2)(x[:0]).shape == (0, 4, 6, 5)


def test_construction_errors():
    bad = [
        (MaxPool2dFwdOp, dict(kernel_size=0), "signature.shape_rules.2", "`kH > 0 and kW > 0`"),
        (MaxPool2dFwdOp, dict(kernel_size=2, stride=(1, 0)), "signature.shape_rules.3",
         "`sH > 0 and sW > 0`"),
        (MaxPool2dFwdOp, dict(kernel_size=2, dilation=0), "signature.shape_rules.4",
         "`dH > 0 and dW > 0`"),
        (MaxPool2dFwdOp, dict(kernel_size=2, padding=-1), "signature.shape_rules.5",
         "`pH >= 0 and pW >= 0`"),
        (MaxPool2dFwdOp, dict(kernel_size=3, padding=(1, 2)), "signature.shape_rules.6",
         "`pH <= kH // 2 and pW <= kW // 2`"),
        (AvgPool2dFwdOp, dict(kernel_size=(3, 4), padding=(2, 0)), "signature.shape_rules.5",
         "`pH <= kH // 2 and pW <= kW // 2`"),
        (AvgPool2dFwdOp, dict(kernel_size=2, divisor_override=0), "signature.shape_rules.7",
         "`divisor_override.value != 0`"),
    ]
    for cls, kw, path, fragment in bad:
        with pytest.raises(SignatureError) as ei:
            cls(**kw)
        expect_error(ei, SignatureError, cls.__name__, path, f"{fragment} does not hold with ")
    with pytest.raises(SignatureTypeError) as ei:
        MaxPool2dFwdOp((3, 3, 3))
    expect_error(ei, SignatureTypeError, "MaxPool2dFwdOp", "signature.params.kernel_size",
                 "parameter `kernel_size` has type `int | tuple[int, int]`", "got (3, 3, 3)")
    with pytest.raises(SignatureTypeError) as ei:
        AvgPool2dFwdOp(2, divisor_override=2.0)
    expect_error(ei, SignatureTypeError, "AvgPool2dFwdOp", "signature.params.divisor_override",
                 "got 2.0")
    with pytest.raises(TypeError, match="dilation"):
        AvgPool2dFwdOp(2, dilation=1)


def test_call_errors():
    op = MaxPool2dFwdOp(3, 2)
    bad = [
        (torch.randn(2, 3, 1, 1), SignatureError, "signature.shape_rules.7",
         ["refinement `H_out >= 1 and W_out >= 1`", "H_out=0"]),
        (torch.randn(2, 2, 3, 5, 5), SignatureError, "signature.shape_rules.0",
         ["refinement `len(B) <= 1`", "B=(2, 2)"]),
        (torch.randn(2, 0, 5, 5), SignatureError, "signature.shape_rules.1",
         ["refinement `C > 0 and H > 0 and W > 0`", "C=0"]),
        (torch.randn(0, 5, 5), SignatureError, "signature.shape_rules.1", ["C=0"]),
        (torch.randn(5, 5), SignatureError, "signature.inputs.input.shape",
         ["the rank of [*B, C, H, W]", "expected at least 3, got 2"]),
        (torch.randn(1, 2, 5, 5, dtype=torch.float64), SignatureError,
         "signature.inputs.input.dtype",
         ["input input, dtype T", "expected bfloat16 | float16 | float32, got float64"]),
    ]
    for x, exc, path, fragments in bad:
        with pytest.raises(exc) as ei:
            op(x)
        expect_error(ei, exc, "MaxPool2dFwdOp", path, *fragments)
    with pytest.raises(SignatureError) as ei:
        AvgPool2dFwdOp(4, 1, 0)(torch.randn(1, 2, 3, 8))
    expect_error(ei, SignatureError, "AvgPool2dFwdOp", "signature.shape_rules.6", "H_out=0")


# ============================================================================ compile boundary

def test_opcheck_every_operator():
    assert MaxPool2dFwdOp.compile_op_names == ("opspec::pool_max_pool2d_fwd_op",)
    assert AvgPool2dFwdOp.compile_op_names == ("opspec::pool_avg_pool2d_fwd_op",)
    mx = MaxPool2dFwdOp(3, 2, 1, ceil_mode=True)
    av = AvgPool2dFwdOp((2, 3), 1, (1, 0), count_include_pad=False)
    assert str(torch.ops.opspec.pool_max_pool2d_fwd_op.default._schema) == \
        "opspec::pool_max_pool2d_fwd_op(Tensor input, str key) -> Tensor"
    for x in (torch.randn(2, 3, 7, 6), torch.randn(3, 5, 5).half()):
        torch.library.opcheck(torch.ops.opspec.pool_max_pool2d_fwd_op.default,
                              (x, mx._opspec_key))
        torch.library.opcheck(torch.ops.opspec.pool_avg_pool2d_fwd_op.default,
                              (x, av._opspec_key))


def test_cold_compile_fullgraph():
    """Both operators in one compiled graph, next to torch code."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    mx, av = MaxPool2dFwdOp(3, 2, 1), AvgPool2dFwdOp(2, count_include_pad=False)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda x: av(mx(x) * 2), backend=backend, fullgraph=True)
    x = _randn(2, 3, 12, 12)
    y = fn(x)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("pool_max_pool2d_fwd_op" in t for t in targets), targets
    assert any("pool_avg_pool2d_fwd_op" in t for t in targets), targets
    torch.testing.assert_close(y, F.avg_pool2d(F.max_pool2d(x, 3, 2, 1) * 2, 2))


# ============================================================================ workloads

@pytest.mark.parametrize("cls", (MaxPool2dFwdOp, AvgPool2dFwdOp), ids=lambda c: c.__name__)
def test_workload_cases_instantiate(cls):
    """Every case builds on the meta device (no data) and passes the op's checks with the
    row's values; each op has a row moving at least 256 MiB (the bandwidth target), and the
    roofline's bytes are the input read and the output written."""
    spec = cls._info().spec
    largest = 0
    all_cases = cases(cls)
    assert len({c.id for c in all_cases}) == len(all_cases)
    for case in all_cases:
        op = case.construct(cls)
        (x,) = case.inputs("meta")
        ind = op.check_call(x)
        for name, v in case.values.items():
            if name in spec.forall:
                assert ind[name] == v, (case.id, name, ind)
        g = op._geometry
        H_out, W_out = pool2d_out_size(x.shape[-2], x.shape[-1], g)
        assert (ind["H_out"], ind["W_out"]) == (H_out, W_out)
        # every input pixel lies in some window: the derived bytes (the whole input) are
        # the minimum traffic
        for axis, (L, n) in enumerate(((x.shape[-2], H_out), (x.shape[-1], W_out))):
            last = (n - 1) * g.stride[axis] - g.padding[axis] + g.dilation[axis] * (g.kernel[axis] - 1)
            assert last >= L - 1, (case.id, axis)
        traffic = (x.numel() + x.numel() // (x.shape[-2] * x.shape[-1]) * H_out * W_out) \
            * x.element_size()
        largest = max(largest, traffic)
    assert largest >= 256 * 2**20, largest


def test_int64_offsets(monkeypatch):
    """The int64 path (inputs past 2**31 - 1 elements), forced with a lower limit."""
    import opspec.kernels.pool as pool_mod

    x = _randn(2, 3, 9, 11, dtype=torch.bfloat16)[:, :, 1:, :]
    g = pool2d_geometry(3, 2, 1, 1, True)
    H_out, W_out = pool2d_out_size(8, 11, g)
    plan = pool2d_plan(6 * H_out, H_out, W_out, g)
    assert not pool_mod._needs_int64(x, 6 * H_out, H_out, W_out, g, plan)
    monkeypatch.setattr(pool_mod, "_INT32_LIMIT", 64)
    assert pool_mod._needs_int64(x, 6 * H_out, H_out, W_out, g, plan)
    assert torch.equal(_run(x, "max", g), _torch_max(x, 3, 2, 1, 1, True))
    torch.testing.assert_close(_run(x, "avg", g, False).float(),
                               _torch_avg(x, 3, 2, 1, True, False, None), **TOL[torch.bfloat16])


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, re, sys
import triton
import opspec.kernels.pool as K
import sm90_build as sm90


def build(shape, dt, mode, g, cip=True, div=None, int64=False, strides=None):
    # The launch the launcher plans for this input (contiguous unless `strides`).
    N, C, H, W = shape
    H_out, W_out = K.pool2d_out_size(H, W, g)
    R = N * C * H_out
    p = K.pool2d_plan(R, H_out, W_out, g, H, W)
    sxn, sxc, sxh, sxw = strides or (C * H * W, H * W, W, 1)
    merge = N == 1 or sxn == C * sxc
    ptrs = dict(x_ptr="*" + dt, out_ptr="*" + dt)
    if p.path == "global":
        hr, wr = K._global_window(H, W, g)
        L = hr * wr
        fn = K._pool2d_global_kernel
        args = dict(ptrs, P=N * C, C=C, L=L, WR=wr, sxn=sxn, sxc=sxc, sxh=sxh, sxw=sxw,
                    divisor=1.0)
        cexpr = dict(IS_MAX=mode == "max", MERGE_NC=merge,
                     FLAT=hr == 1 or (wr == W and sxh == W * sxw),
                     PASSES=triton.cdiv(L, p.block_w) if p.unroll else 0,
                     L_C=L if p.unroll else 0, EVEN_P=N * C % p.block_r == 0,
                     BLOCK_P=p.block_r, BLOCK_L=p.block_w, USE_INT64=int64)
    elif p.path == "rows":
        fn = K._pool2d_rows_kernel
        args = dict(ptrs, C=C, H=H, W=W, H_out=H_out, W_out=W_out,
                    n_col_blocks=triton.cdiv(W_out, p.block_w),
                    n_row_blocks=triton.cdiv(H_out, p.block_r),
                    sxn=sxn, sxc=sxc, sxh=sxh, sxw=sxw, SW=g.stride[1], PH=g.padding[0],
                    PW=g.padding[1], divisor=1.0)
        cexpr = dict(KH=g.kernel[0], KW=g.kernel[1], DH=g.dilation[0], DW=g.dilation[1],
                     ROWS=p.block_r,
                     N_IN=p.block_r + (g.kernel[0] - 1) * g.dilation[0],
                     IS_MAX=mode == "max", MERGE_NC=merge, COUNT_INCLUDE_PAD=cip,
                     HAS_DIVISOR=div is not None, BLOCK_W=p.block_w, USE_INT64=int64)
    else:
        fn = K._pool2d_kernel
        args = dict(ptrs, R=R, C=C, H=H, W=W, H_out=H_out, W_out=W_out,
                    n_col_blocks=triton.cdiv(W_out, p.block_w),
                    n_row_blocks=triton.cdiv(H_out, p.block_r) if p.plane_tiles else 1,
                    sxn=sxn, sxc=sxc, sxh=sxh, sxw=sxw,
                    KH=g.kernel[0], KW=g.kernel[1], SH=g.stride[0], SW=g.stride[1],
                    PH=g.padding[0], PW=g.padding[1], DH=g.dilation[0], DW=g.dilation[1],
                    divisor=1.0)
        cexpr = dict(KH_C=g.kernel[0] if p.unroll else 1, KW_C=g.kernel[1] if p.unroll else 1,
                     UNROLL=p.unroll, IS_MAX=mode == "max",
                     CLAMP=mode == "max" and g.dilation == (1, 1), MERGE_NC=merge,
                     PLANE_TILES=p.plane_tiles, COUNT_INCLUDE_PAD=cip,
                     HAS_DIVISOR=div is not None, BLOCK_R=p.block_r, BLOCK_W=p.block_w,
                     USE_INT64=int64)
    ptx = sm90.build(fn, args, cexpr, p.num_warps).ptx
    return {"plan": [p.block_r, p.block_w, p.num_warps, p.unroll, p.plane_tiles, p.path],
            "ld": len(re.findall(r"ld\.global", ptx)), "local": ptx.count(".local"),
            "shfl": ptx.count("shfl.sync"),
            "nan_max": ptx.count("max.NaN") + ptx.count("max.bf16x2.NaN")
                       + ptx.count("max.NaN.bf16x2")}

G = K.pool2d_geometry
out = {
    "stem": build((128, 64, 112, 112), "bf16", "max", G(3, 2, 1)),
    "googlenet": build((64, 480, 28, 28), "fp16", "max", G(3, 2, 0, 1, True)),
    "deeplab": build((8, 256, 64, 64), "bf16", "max", G(3, 1, 1, 2)),
    "poolformer": build((64, 64, 56, 56), "bf16", "avg", G(3, 1, 1), cip=False),
    "rows-int64": build((8, 256, 64, 64), "fp16", "avg", G(3, 1, 1), int64=True),
    "rows-channels-last": build((8, 64, 64, 64), "fp32", "max", G(3, 1, 1, 2),
                                strides=(64 * 64 * 64, 1, 64 * 64, 64)),
    "resnet-d": build((128, 256, 56, 56), "bf16", "avg", G(2, 2, 0, 1, True), cip=False),
    "inception": build((32, 192, 35, 35), "fp32", "avg", G(3, 1, 1)),
    "head": build((128, 2048, 7, 7), "bf16", "avg", G(7)),
    "head-fp32": build((128, 2048, 7, 7), "fp32", "avg", G(7)),
    "head-max-channels-last": build((128, 2048, 7, 7), "bf16", "max", G(7),
                                    strides=(2048 * 49, 1, 7 * 2048, 2048)),
    "global-max": build((8, 64, 56, 56), "fp32", "max", G(56)),
    "global-int64": build((64, 2048, 7, 7), "fp16", "max", G(7), int64=True),
    "vit": build((1, 768, 14, 14), "fp32", "avg", G(2), div=4),
    "int64": build((256, 64, 112, 112), "bf16", "max", G(3, 2, 1), int64=True),
    "int64-avg": build((256, 64, 112, 112), "fp16", "avg", G(3, 2, 1), int64=True),
    "channels-last": build((32, 64, 112, 112), "bf16", "max", G(3, 2, 1),
                           strides=(64 * 112 * 112, 1, 112 * 64, 64)),
    "channels-last-avg": build((32, 64, 56, 56), "bf16", "avg", G(2),
                               strides=(64 * 56 * 56, 1, 56 * 64, 64)),
    "one-pixel": build((1, 1, 1, 1), "fp32", "max", G(1)),
}
json.dump(out, sys.stdout)
"""


def test_kernel_builds_for_sm90():
    """The three kernels compile for sm_90 (ptxas included) as the launcher plans the
    workload shapes (tile kernel: plane tiles and flattened rows, clamped and masked
    windows, unrolled and looped; global path: unrolled passes and the run-time loop; rows
    path; int64 offsets and channels_last strides), with no local memory (no register
    spills). Loads a thread: the unrolled stem window 72 (8 outputs, 9 each); DeepLab's
    dilated 3 x 3 on the rows path 60 for 16 outputs (20 input rows, 3 loads each, against
    144 for 16 outputs on the tile kernel); the ResNet head 28 (64 planes x 56 lanes over
    128 threads), combined across lanes once (three shuffle steps for 8 lanes, a few rows
    a thread). Compiled in a fresh process: under the interpreter, triton.language is
    patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    for name, k in built.items():
        assert k["ld"] > 0 and k["local"] == 0, (name, k)
    assert built["stem"]["plan"] == [8, 64, 2, True, True, "tile"]
    assert built["stem"]["ld"] == 72
    assert built["deeplab"]["plan"] == [16, 64, 2, True, True, "rows"]
    assert built["deeplab"]["ld"] == 60 and built["deeplab"]["nan_max"] > 0
    assert built["poolformer"]["plan"][5] == built["rows-int64"]["plan"][5] == "rows"
    assert built["rows-channels-last"]["plan"][5] == "rows"
    assert built["inception"]["plan"][5] == "tile"
    for name in ("head", "head-fp32"):
        assert built[name]["plan"] == [64, 8, 4, True, False, "global"], name
        assert built[name]["ld"] == 28 and built[name]["shfl"] <= 16, (name, built[name])
    assert built["head-max-channels-last"]["nan_max"] > 0
    assert built["global-max"]["plan"][3:] == [False, False, "global"]
    assert built["global-int64"]["plan"][5] == "global"
