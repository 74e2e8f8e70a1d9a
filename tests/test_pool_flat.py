"""The pool family's flat kernel (``_pool2d_flat_kernel``): contiguous NCHW inputs, one
output element a lane, the geometry compile-time constant.

Against torch's F.max_pool2d / F.avg_pool2d through the real launch path (``pool2d_triton``
with a ``path='flat'`` plan), on the CPU through Triton's interpreter (tests/conftest.py), in
float32, float16 and bfloat16: odd sizes, padding, dilation, ceil_mode windows past the
edge, every divisor rule, NaN and infinities, unbatched inputs, partial last programs and
int64 offsets; then which inputs the launcher sends to it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import opspec.kernels.pool as PK
from opspec.kernels.pool import (
    Pool2dPlan, flat_fits, pool2d_geometry, pool2d_out_size, pool2d_triton,
)
from opspec.ops import AvgPool2dFwdOp, MaxPool2dFwdOp

# the device, dtypes, tolerances and helpers of the pool tests (tests/ is on sys.path)
from test_pool import DTYPES, TOL, _on_device, _randn  # noqa: F401  (_on_device: a fixture)
from test_pool_variants import AVG_MODES, WINDOWS, _max_input, _want_avg, _want_max, _wid

# (outputs a program, warps): the table's, and a small one (several programs, a partial last)
PLANS = {"512/4w": Pool2dPlan(512, 0, 4, True, False, "flat"),
         "32/1w": Pool2dPlan(32, 0, 1, True, False, "flat")}


def _run(x, mode, g, cip=True, div=None, plan=None):
    H_out, W_out = pool2d_out_size(x.shape[-2], x.shape[-1], g)
    out = torch.empty((*x.shape[:-2], H_out, W_out), dtype=x.dtype)
    assert pool2d_triton(x, out, mode, g, cip, div, plan=plan) is out
    return out


def _spy_flat(monkeypatch, key: str) -> list:
    """The list that each flat-kernel launch, from now on, appends its ``key`` argument
    to (the launch still runs)."""
    taken = []
    real = PK.launch

    def spy(fn, grid, *args, **kw):
        if fn is PK._pool2d_flat_kernel:
            taken.append(kw[key])
        return real(fn, grid, *args, **kw)

    monkeypatch.setattr(PK, "launch", spy)
    return taken


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", WINDOWS, ids=_wid)
def test_flat_max(window, dtype):
    """Exact, NaN kept, an all -inf window -inf, +inf kept; clamped (dilation 1) and masked
    (dilated) windows alike."""
    shape, k, s, p, d, c = window
    g = pool2d_geometry(k, s, p, d, c)
    x = _max_input(shape, dtype)
    assert flat_fits(x if x.dim() == 4 else x[None], g)
    want = _want_max(x, g)
    for name, plan in PLANS.items():
        torch.testing.assert_close(_run(x, "max", g, plan=plan), want, rtol=0, atol=0,
                                   equal_nan=True, msg=name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", [w for w in WINDOWS if w[4] == 1], ids=_wid)
def test_flat_avg(window, dtype):
    """Every divisor rule: count_include_pad, the window clipped to the input, and
    divisor_override."""
    shape, k, s, p, _, c = window
    g = pool2d_geometry(k, s, p, 1, c)
    x = _randn(*shape, dtype=dtype, seed=1)
    for cip, div in AVG_MODES:
        want = _want_avg(x, g, cip, div)
        for name, plan in PLANS.items():
            torch.testing.assert_close(_run(x, "avg", g, cip, div, plan).float(), want,
                                       **TOL[dtype], msg=lambda m: f"{name} {cip=} {div=}: {m}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_flat_pairs(monkeypatch, dtype):
    """Stride-2 windows of 2 or 3 rows and columns over 16-bit inputs through 32-bit words
    (``PAIRS``): the max exact against torch, NaN in either half of a word and in any row
    kept, -inf and +inf, ceil_mode windows past the edge clamped; the average under every
    divisor rule. Taken only where the rows are word-aligned (even W, a 4-byte aligned
    start), for the average only where every window is whole; the elementwise loop
    elsewhere, with equal results."""
    taken = _spy_flat(monkeypatch, "PAIRS")
    # (shape, kernel, ceil_mode, pairs for the max, pairs for the average)
    cases = [((2, 3, 7, 8), 2, False, True, True),       # odd H: its last row in no window
             ((2, 2, 6, 10), 2, True, True, True),       # ceil_mode, even sizes: whole
             ((1, 2, 7, 8), 2, True, True, False),       # ceil_mode past an odd edge
             ((2, 2, 6, 9), 2, False, False, False),     # odd W: rows not word-aligned
             ((3, 6, 8), 2, False, True, True),          # unbatched
             ((2, 2, 13, 14), 3, True, True, False),     # GoogLeNet: ceil_mode past the edge
             ((2, 2, 9, 10), 3, False, True, True),      # whole 3 x 3 windows
             ((1, 3, 8, 12), (2, 3), False, True, True),
             ((1, 3, 10, 8), (3, 2), True, True, False),
             ((1, 2, 9, 11), 3, False, False, False)]    # odd W
    for shape, k, ceil, pairs_max, pairs_avg in cases:
        g = pool2d_geometry(k, 2, 0, 1, ceil)
        x = _max_input(shape, dtype)
        x[..., 2, 4], x[..., 4, 1], x[..., 3, 6] = float("nan"), float("nan"), float("nan")
        want = _want_max(x, g)
        for plan in PLANS.values():
            taken.clear()
            got = _run(x, "max", g, plan=plan)
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True,
                                       msg=f"{shape} k={k} ceil_mode={ceil}")
            assert taken == [pairs_max], (shape, k, ceil, taken)
        xa = _randn(*shape, dtype=dtype, seed=5)
        for cip, div in AVG_MODES:
            taken.clear()
            got = _run(xa, "avg", g, cip, div, plan=PLANS["32/1w"])
            torch.testing.assert_close(got.float(), _want_avg(xa, g, cip, div), **TOL[dtype],
                                       msg=f"{shape} k={k} ceil_mode={ceil} {cip} {div}")
            assert taken == [pairs_avg], (shape, k, ceil, cip, div, taken)
    # a start 2 bytes past a word: the elementwise loop
    x = _max_input((2, 2, 6, 10), dtype)
    shifted = torch.empty(x.numel() + 1, dtype=dtype, device=x.device)[1:].view(x.shape)
    shifted.copy_(x)
    taken.clear()
    g = pool2d_geometry(3, 2, 0, 1, True)
    torch.testing.assert_close(_run(shifted, "max", g, plan=PLANS["512/4w"]), _want_max(x, g),
                               rtol=0, atol=0, equal_nan=True)
    assert taken == [False]
    # switched off, the same windows through the loop
    monkeypatch.setattr(PK, "_FLAT_PAIRS", False)
    taken.clear()
    torch.testing.assert_close(_run(x, "max", g, plan=PLANS["512/4w"]), _want_max(x, g),
                               rtol=0, atol=0, equal_nan=True)
    assert taken == [False]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_flat_whole_windows_divide_by_a_constant(monkeypatch, dtype):
    """An average over an unpadded input whose windows all lie inside it divides by the
    window's size as a compile-time constant (``WHOLE``), under either count_include_pad:
    taken exactly there (not with padding, nor with a ceil_mode window past the edge, nor
    switched off), the result as torch's under every divisor rule."""
    taken = _spy_flat(monkeypatch, "WHOLE")
    # (shape, kernel, stride, padding, ceil_mode, whole)
    cases = [((2, 3, 8, 10), 2, 2, 0, True, True),     # ResNet-D's: ceil_mode, even sizes
             ((2, 3, 7, 9), 2, 2, 0, False, True),     # odd sizes, the last row/column unread
             ((2, 3, 7, 9), 2, 2, 0, True, False),     # ceil_mode past the odd edges
             ((1, 2, 9, 9), 3, 1, 0, False, True),     # stride 1, a divisor of 9
             ((1, 2, 9, 9), 3, 1, 1, False, False),    # padded
             ((3, 8, 8), (2, 3), (2, 1), 0, False, True)]
    for shape, k, s, p, ceil, whole in cases:
        g = pool2d_geometry(k, s, p, 1, ceil)
        x = _randn(*shape, dtype=dtype, seed=9)
        for cip, div in AVG_MODES:
            taken.clear()
            got = _run(x, "avg", g, cip, div, plan=PLANS["32/1w"])
            torch.testing.assert_close(got.float(), _want_avg(x, g, cip, div), **TOL[dtype],
                                       msg=lambda m: f"{shape} k={k} {ceil=} {cip=} {div=}: {m}")
            assert taken == [whole], (shape, k, s, p, ceil, cip, div, taken)
    monkeypatch.setattr(PK, "_FLAT_WHOLE", False)
    taken.clear()
    g = pool2d_geometry(2, 2, 0, 1, True)
    x = _randn(2, 3, 8, 10, dtype=dtype, seed=9)
    torch.testing.assert_close(_run(x, "avg", g, False, None, PLANS["32/1w"]).float(),
                               _want_avg(x, g, False, None), **TOL[dtype])
    assert taken == [False]


def test_flat_pairs_take_wide_2x2_rows(monkeypatch):
    """From _BAND_MIN_OUTPUTS outputs (lowered here), the 16-bit 2x2 stride-2 pools of wide
    rows (more than 16 outputs) whose input pairs_fit go to the flat kernel at
    _FLAT_PAIRS_WIDE, through the ops too, exact against torch; float32, odd widths, other
    windows, below the bound or with the entry off, they stay with the band kernel."""
    seen = []
    real_flat, real_band = PK._launch_flat, PK._launch_band

    def flat(x4, out, mode, g, p, *a):
        seen.append(("flat", mode, p.block_r, p.num_warps))
        return real_flat(x4, out, mode, g, p, *a)

    def band(x4, out, mode, g, *a):
        seen.append(("band", mode))
        return real_band(x4, out, mode, g, *a)

    monkeypatch.setattr(PK, "_launch_flat", flat)
    monkeypatch.setattr(PK, "_launch_band", band)
    monkeypatch.setattr(PK, "_BAND_MIN_OUTPUTS", 256)
    blk, warps = PK._FLAT_PAIRS_WIDE
    g = pool2d_geometry(2)
    x = _max_input((2, 3, 12, 40), torch.bfloat16)          # 20 outputs a row: wide
    torch.testing.assert_close(_run(x, "max", g), _want_max(x, g), rtol=0, atol=0,
                               equal_nan=True)
    xa = _randn(2, 3, 12, 40, dtype=torch.float16, seed=6)
    y = AvgPool2dFwdOp(kernel_size=2, stride=2)(xa)
    torch.testing.assert_close(y.float(), F.avg_pool2d(xa.float(), 2, 2), **TOL[torch.float16])
    assert seen == [("flat", "max", blk, warps), ("flat", "avg", blk, warps)]

    def route(x, g):
        seen.clear()
        torch.testing.assert_close(_run(x, "max", g), _want_max(x, g), rtol=0, atol=0,
                                   equal_nan=True)
        return [k for k, *_ in seen]

    assert route(x.float(), g) == ["band"]                               # float32
    assert route(_randn(2, 3, 12, 42, dtype=torch.bfloat16)[..., :41].contiguous(),
                 g) == ["band"]                                          # odd W
    assert route(x, pool2d_geometry(2, 1)) == []            # stride 1: the older kernels
    assert route(x[:1, :1, :8, :].contiguous(), g) == []    # below the bound: the same
    monkeypatch.setattr(PK, "_FLAT_PAIRS_WIDE", None)
    assert route(x, g) == ["band"]


def test_flat_refuses_what_it_cannot_serve():
    """A non-contiguous input or a window of more than _MAX_UNROLL elements, forced onto the
    flat kernel, is an error that says why; the default path serves both elsewhere."""
    g = pool2d_geometry(2)
    x = _randn(2, 3, 8, 10, dtype=torch.float16)
    for bad, gb in ((x[..., 1:], g), (x.contiguous(memory_format=torch.channels_last), g),
                    (x, pool2d_geometry((6, 6), 1))):
        assert not flat_fits(bad, gb)
        with pytest.raises(ValueError, match="flat kernel needs a contiguous input"):
            _run(bad, "max", gb, plan=PLANS["512/4w"])
        assert torch.equal(_run(bad, "max", gb), _want_max(bad, gb))


def test_flat_empty_and_int64(monkeypatch):
    """An empty batch launches nothing; the int64 offsets (forced with a lower limit) give
    the same results."""
    g = pool2d_geometry(3, 2, 0, 1, True)
    assert _run(torch.empty(0, 3, 9, 9), "max", g, plan=PLANS["32/1w"]).numel() == 0
    monkeypatch.setattr(PK, "_INT32_LIMIT", 64)
    x = _randn(2, 3, 9, 12, dtype=torch.bfloat16, seed=3)
    for plan in PLANS.values():
        assert torch.equal(_run(x, "max", g, plan=plan), _want_max(x, g))
        torch.testing.assert_close(_run(x, "avg", g, False, None, plan).float(),
                                   _want_avg(x, g, False, None), **TOL[torch.bfloat16])


def test_flat_table_routes_narrow_classes(monkeypatch):
    """The launcher sends the classes _FLAT_TABLE names (narrow rows: at most 16 outputs) of
    contiguous inputs to the flat kernel with the table's plan, through the ops too; wide
    rows, non-contiguous inputs and unnamed classes go elsewhere."""
    seen = []
    real = PK._launch_flat

    def spy(x4, out, mode, g, p, *a):
        seen.append((mode, g.kernel, g.stride, p.block_r, p.num_warps))
        return real(x4, out, mode, g, p, *a)

    monkeypatch.setattr(PK, "_launch_flat", spy)
    x = _randn(2, 3, 28, 28, dtype=torch.float16, seed=4)     # 14 x 14 outputs: narrow
    y = MaxPool2dFwdOp(kernel_size=3, stride=2, ceil_mode=True)(x)
    assert torch.equal(y, F.max_pool2d(x.float(), 3, 2, 0, 1, True).half())
    y = AvgPool2dFwdOp(kernel_size=2, stride=2)(x)
    torch.testing.assert_close(y.float(), F.avg_pool2d(x.float(), 2, 2), **TOL[torch.float16])
    assert seen == [("max", (3, 3), (2, 2), 512, 4), ("avg", (2, 2), (2, 2), 512, 4)]
    seen.clear()
    g = pool2d_geometry(2)
    _run(_randn(2, 3, 40, 40, dtype=torch.float16), "max", g)      # 20 outputs a row: wide
    _run(x[:, :, :, 1:], "max", g)                                # not contiguous
    _run(x, "max", pool2d_geometry(3, 1, 1))                      # a class not in the table
    assert seen == []


def test_flat_ops_match_torch_unbatched():
    """An unbatched [C, H, W] input (one image) through the ops' default path."""
    x = _randn(5, 14, 14, dtype=torch.bfloat16, seed=5)
    y = MaxPool2dFwdOp(kernel_size=2)(x)
    assert torch.equal(y, F.max_pool2d(x.float(), 2).to(torch.bfloat16))
    y = AvgPool2dFwdOp(kernel_size=2, divisor_override=3)(x)
    torch.testing.assert_close(y.float(), F.avg_pool2d(x.float(), 2, divisor_override=3),
                               **TOL[torch.bfloat16])


_FLAT_BUILD = r"""
import json, sys
import opspec.kernels.pool as K
import sm90_build as sm90


def build(dt, mode, g, H, W, block, warps, pairs=False):
    H_out, W_out = K.pool2d_out_size(H, W, g)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = g.kernel, g.stride, g.padding, g.dilation
    args = dict(x_ptr="*i32" if pairs else "*" + dt, out_ptr="*" + dt,
                total=64 * 480 * H_out * W_out, divisor=1.0)
    cexpr = dict(H=H, W=W, H_out=H_out, W_out=W_out, KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw,
                 DH=dh, DW=dw, IS_MAX=mode == "max", CLAMP=mode == "max" and dh == dw == 1,
                 NATIVE=True, COUNT_INCLUDE_PAD=True, HAS_DIVISOR=False, BLOCK=block,
                 USE_INT64=False, PAIRS=pairs)
    k = sm90.build(K._pool2d_flat_kernel, args, cexpr, warps)
    loads = [l for l in k.sass.splitlines() if "LDG." in l]
    return {"local": k.local, "shared": k.shared, "stores": k.stores, "regs": k.registers,
            "rcp": "MUFU.RCP" in k.sass, "nan_max": k.ptx.count(".NaN"),
            "loads": len(loads), "loads16": len([l for l in loads if ".U16" in l]),
            "per_thread": block // (32 * warps)}


G = K.pool2d_geometry
block, warps = K._FLAT_TABLE[("max", (3, 3), (2, 2), "narrow")]
out = {
    "inc3-bf16": build("bf16", "max", G(3, 2, 0, 1, True), 28, 28, block, warps),
    "vgg-fp32": build("fp32", "max", G(2), 28, 28, block, warps),
    "avg-bf16": build("bf16", "avg", G(2), 14, 14, block, warps),
    "vgg-bf16": build("bf16", "max", G(2), 28, 28, block, warps),
    "vgg-bf16-pairs": build("bf16", "max", G(2), 28, 28, block, warps, pairs=True),
    "avg-bf16-pairs": build("bf16", "avg", G(2), 14, 14, block, warps, pairs=True),
    "inc3-bf16-pairs": build("bf16", "max", G(3, 2, 0, 1, True), 28, 28, block, warps,
                             pairs=True),
}
json.dump(out, sys.stdout)
"""


def test_flat_kernel_builds_for_sm90():
    """The table's flat launches compile for sm_90 with no spills and no shared memory, the
    outputs stored in vectors; the max keeps NaN with a NaN max instruction and, the plane's
    shape being constexpr, splits the output index without a division routine (no
    reciprocal: the average's MUFU.RCP is its divisor's)."""
    from sm90_build import run_script

    built = run_script(_FLAT_BUILD)
    for name, k in built.items():
        assert k["local"] == 0 and k["shared"] == 0 and k["regs"] <= 64, (name, k)
        assert all(".v2." in op or ".v4." in op for op in k["stores"]), (name, k["stores"])
    for name in ("inc3-bf16", "vgg-fp32"):
        assert not built[name]["rcp"] and built[name]["nan_max"] > 0, (name, built[name])
    # The 16-bit 2x2/2 max and average read a window row as one 32-bit word: two loads an
    # output, none of them 16-bit, against four 16-bit loads an output without.
    plain, pairs = built["vgg-bf16"], built["vgg-bf16-pairs"]
    assert plain["loads"] == plain["loads16"] == 4 * plain["per_thread"], plain
    assert pairs["loads"] == 2 * pairs["per_thread"] and pairs["loads16"] == 0, pairs
    assert not pairs["rcp"] and pairs["nan_max"] > 0, pairs
    plain, pairs = built["avg-bf16"], built["avg-bf16-pairs"]
    assert plain["loads"] == plain["loads16"] == 4 * plain["per_thread"], plain
    assert pairs["loads"] == 2 * pairs["per_thread"] and pairs["loads16"] == 0, pairs
    # 3 x 3: two words a window row (the second for its third column), six loads an output
    # against nine.
    plain, pairs = built["inc3-bf16"], built["inc3-bf16-pairs"]
    assert plain["loads"] == plain["loads16"] == 9 * plain["per_thread"], plain
    assert pairs["loads"] == 6 * pairs["per_thread"] and pairs["loads16"] == 0, pairs
    assert pairs["nan_max"] > 0 and not pairs["rcp"], pairs
