"""The pool family's band kernel (``_pool2d_band_kernel``) and its configurations.

Every variant the configuration block selects (rows a program, planes a program, columns a
thread, the pair load, the native max, alignment hints) against torch's F.max_pool2d /
F.avg_pool2d, through the real launch path (``pool2d_triton`` with ``config=``), on the CPU
through Triton's interpreter (tests/conftest.py), in float32, float16 and bfloat16: odd
sizes, padding, dilation, ceil_mode windows past the edge, count_include_pad and
divisor_override, NaN and infinities, unbatched inputs, strided (non-contiguous) inputs,
empty tensors and int64 offsets. Then the choices the launcher makes for the workload
shapes, and an sm_90 build of the kernel (no spills, vector loads, no layout conversions).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import opspec.kernels.pool as PK
from opspec.kernels.pool import (
    BandConfig, band_config_for, band_fits, band_launch, pool2d_geometry, pool2d_out_size,
    pool2d_triton,
)
from opspec.ops import AvgPool2dFwdOp, MaxPool2dFwdOp

# the device, dtypes, tolerances and helpers of the pool tests (tests/ is on sys.path)
from test_pool import DTYPES, TOL, _on_device, _randn  # noqa: F401  (_on_device: a fixture)

# (input shape, kernel_size, stride, padding, dilation, ceil_mode)
WINDOWS = [
    ((2, 3, 11, 13), 3, 2, 1, 1, False),              # ResNet stem window, odd sizes
    ((1, 2, 13, 15), 3, 2, 0, 1, True),               # GoogLeNet: ceil_mode, no padding
    ((2, 2, 9, 11), 2, 2, 0, 1, True),                # ResNet-D average: odd sizes, ceil_mode
    ((1, 3, 8, 12), 2, None, 0, 1, False),            # 2 x 2 stride 2, even
    ((3, 9, 10), 3, 1, 1, 1, False),                  # unbatched, stride 1 (PoolFormer)
    ((1, 2, 12, 17), 3, 1, 1, (2, 2), False),         # DeepLab: dilated stride 1 (max only)
    ((2, 1, 10, 9), (2, 3), (1, 2), (1, 0), 1, True),  # per-axis values
    ((1, 2, 11, 10), 3, (2, 1), 1, (2, 3), True),     # dilation, stride 2 along H (max only)
    ((1, 2, 7, 9), (3, 4), 2, (1, 2), 1, False),      # even window wider than the pair
]
# configurations: the default, then small ones (several bands, plane groups and column
# blocks with partial last ones; no pair; float32 max; one column a thread)
CONFIGS = {
    "default": BandConfig(),
    "small": BandConfig(rows=3, tile=32, max_block_w=4),
    "nopair-f32max": BandConfig(rows=2, tile=16, pair=False, native=False, align=False),
    "cpt1": BandConfig(rows=5, tile=64, cols_per_thread=1, max_block_w=8),
}
AVG_MODES = [(True, None), (False, None), (False, 3)]


def _run(x, mode, g, cip=True, div=None, config=None):
    H_out, W_out = pool2d_out_size(x.shape[-2], x.shape[-1], g)
    out = torch.empty((*x.shape[:-2], H_out, W_out), dtype=x.dtype)
    assert pool2d_triton(x, out, mode, g, cip, div, config=config) is out
    return out


def _want_max(x, g):
    return F.max_pool2d(x.float(), g.kernel, g.stride, g.padding, g.dilation,
                        g.ceil_mode).to(x.dtype)


def _want_avg(x, g, cip, div):
    return F.avg_pool2d(x.float(), g.kernel, g.stride, g.padding, g.ceil_mode, cip, div)


def _max_input(shape, dtype):
    """Random values with a NaN (kept by the max), a corner of -inf (an all -inf window
    gives -inf) and a +inf."""
    x = _randn(*shape, dtype=dtype)
    x[..., 1, 2] = float("nan")
    x[..., -3:, -4:] = float("-inf")
    x[..., 0, -1] = float("inf")
    return x


def _wid(w):
    return f"{w[0]}-k{w[1]}-s{w[2]}-p{w[3]}-d{w[4]}-c{int(w[5])}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", WINDOWS, ids=_wid)
def test_band_max(window, dtype):
    """Every configuration: exact, NaN kept, an all -inf window -inf."""
    shape, k, s, p, d, c = window
    g = pool2d_geometry(k, s, p, d, c)
    x = _max_input(shape, dtype)
    assert band_fits(x if x.dim() == 4 else x[None], g)
    want = _want_max(x, g)
    for name, cfg in CONFIGS.items():
        got = _run(x, "max", g, config=cfg)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", [w for w in WINDOWS if w[4] == 1], ids=_wid)
def test_band_avg(window, dtype):
    """Every configuration under every divisor rule (count_include_pad, divisor_override)."""
    shape, k, s, p, _, c = window
    g = pool2d_geometry(k, s, p, 1, c)
    x = _randn(*shape, dtype=dtype, seed=1)
    for cip, div in AVG_MODES:
        want = _want_avg(x, g, cip, div)
        for name, cfg in CONFIGS.items():
            torch.testing.assert_close(_run(x, "avg", g, cip, div, cfg).float(), want,
                                       **TOL[dtype], msg=lambda m: f"{name} {cip=} {div=}: {m}")


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_band_strided_inputs(mode):
    """Inputs with unit column stride but other strides free: channels sliced (images and
    planes not merged), rows sliced, a column offset (unaligned rows), an unbatched slice;
    all on the band kernel, with alignment hints only where they hold."""
    base = _randn(3, 6, 13, 16, dtype=torch.float16, seed=2)
    views = {
        "channels-sliced": base[:, 1::2],
        "rows-sliced": base[:, :, ::2],
        "column-offset": base[..., 1:],
        "unbatched-slice": base[1, 2:5, 1:, 3:],
        "batch-sliced": base[::2, :3],
    }
    g = pool2d_geometry(3, 2, 1, 1, True)
    for name, x in views.items():
        x4 = x if x.dim() == 4 else x[None]
        assert not x.is_contiguous() and band_fits(x4, g), name
        for cfg in (BandConfig(), CONFIGS["small"]):
            got = _run(x, mode, g, False, None, cfg)
            if mode == "max":
                assert torch.equal(got, _want_max(x, g)), name
            else:
                torch.testing.assert_close(got.float(), _want_avg(x, g, False, None),
                                           **TOL[torch.float16], msg=name)
    # the hints: none for a row of odd length, 8 elements for 16-element rows
    assert band_launch(views["column-offset"], mode, g, BandConfig()).xalign == 1
    assert band_launch(views["channels-sliced"], mode, g, BandConfig()).xalign == 8
    assert band_launch(views["rows-sliced"], mode, g, BandConfig(align=False)).xalign == 1


def test_band_fits_and_table(monkeypatch):
    """Channels-last (column stride != 1) and global pooling stay on the older kernels;
    windows wider than _BAND_MAX_KW and strides skipping rows too; the table's None sends
    a class to the older kernels; a config the kernel cannot serve is an error."""
    x = _randn(2, 4, 9, 10, dtype=torch.bfloat16)
    g = pool2d_geometry(3, 2, 1)
    assert band_fits(x, g)
    assert not band_fits(x.contiguous(memory_format=torch.channels_last), g)
    assert not band_fits(x, pool2d_geometry((9, 10)))                       # global
    assert not band_fits(x, pool2d_geometry((3, 9), 1))                     # wide window
    assert not band_fits(x, pool2d_geometry(2, 3))                          # rows skipped
    with pytest.raises(ValueError, match="band kernel"):
        _run(x.contiguous(memory_format=torch.channels_last), "max", g, config=BandConfig())
    # channels_last through the default path: the older kernels, still right
    xc = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(_run(xc, "max", g), _want_max(xc, g))
    key = PK.band_key("max", g, 5)
    assert band_config_for("max", g, 5) == PK._BAND_DEFAULT
    monkeypatch.setitem(PK._BAND_TABLE, key, None)
    assert band_config_for("max", g, 5) is None
    calls = []
    monkeypatch.setattr(PK, "_launch_band", lambda *a, **k: calls.append(a))
    assert torch.equal(_run(x, "max", g), _want_max(x, g))                  # older kernels
    assert not calls


def test_band_empty_and_tiny():
    """Empty batches and planes launch nothing; a single pixel and 1-wide rows work."""
    g = pool2d_geometry(2)
    for shape in ((0, 3, 8, 8), (2, 0, 8, 8), (0, 5, 5)):
        x = torch.empty(shape, dtype=torch.float16)
        for mode in ("max", "avg"):
            out = _run(x, mode, g, config=BandConfig())
            assert out.numel() == 0
    x = _randn(1, 2, 1, 1)
    g1 = pool2d_geometry(1)
    assert not band_fits(x, g1)                  # a 1 x 1 output: the global path
    g = pool2d_geometry((3, 1), (2, 1), (1, 0))
    x = _randn(2, 3, 7, 1, dtype=torch.bfloat16)
    # 1-wide rows, the second with a column stride other than 1 (the only column read)
    for xv in (x, _randn(2, 3, 1, 7, dtype=torch.bfloat16).transpose(2, 3)):
        assert band_fits(xv, g)
        assert torch.equal(_run(xv, "max", g), _want_max(xv, g))
        torch.testing.assert_close(_run(xv, "avg", g).float(), _want_avg(xv, g, True, None),
                                   **TOL[torch.bfloat16])


def test_band_int64_offsets(monkeypatch):
    """The int64 path (offsets past 2**31 - 1), forced with a lower limit."""
    monkeypatch.setattr(PK, "_INT32_LIMIT", 64)
    x = _randn(2, 3, 9, 12, dtype=torch.bfloat16)[:, :, 1:]
    for g in (pool2d_geometry(3, 2, 1), pool2d_geometry(2, 2, 0, 1, True)):
        for cfg in (BandConfig(), CONFIGS["small"]):
            assert torch.equal(_run(x, "max", g, config=cfg), _want_max(x, g))
            torch.testing.assert_close(_run(x, "avg", g, False, None, cfg).float(),
                                       _want_avg(x, g, False, None), **TOL[torch.bfloat16])


def test_ops_take_the_band_kernel(monkeypatch):
    """The ops' Triton kernel reaches the band kernel for contiguous NCHW (and its result is
    torch's) where the table has a configuration and the input is large enough; small
    inputs keep the older kernels."""
    seen = []
    real = PK._launch_band
    x = _randn(2, 3, 12, 14, dtype=torch.float16, seed=4)
    monkeypatch.setattr(PK, "_launch_band", lambda *a, **k: seen.append(a))
    MaxPool2dFwdOp(kernel_size=3, stride=2, padding=1)(x)     # 252 outputs: the older kernels
    assert seen == []
    monkeypatch.setattr(PK, "_BAND_MIN_OUTPUTS", 0)
    monkeypatch.setattr(PK, "_BAND_DEFAULT", BandConfig())

    def spy(*a, **k):
        seen.append(a[3])
        return real(*a, **k)

    monkeypatch.setattr(PK, "_launch_band", spy)
    y = MaxPool2dFwdOp(kernel_size=3, stride=2, padding=1)(x)
    assert torch.equal(y, F.max_pool2d(x.float(), 3, 2, 1).half())
    y = AvgPool2dFwdOp(kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False)(x)
    torch.testing.assert_close(y.float(), F.avg_pool2d(x.float(), 2, 2, 0, True, False),
                               **TOL[torch.float16])
    assert len(seen) == 2


def test_band_launch_choices():
    """What the default configuration launches for the workload shapes (contiguous NCHW)."""
    meta = dict(device="meta")
    G = pool2d_geometry

    def L(shape, dtype, mode, g):
        return band_launch(torch.empty(shape, dtype=dtype, **meta), mode, g, BandConfig())

    # ResNet stem, bf16: 8-row bands (17 input rows, the register bound), 4 planes of 64
    # columns, 16-byte pair loads, a native max, aligned rows and outputs
    b = L((128, 64, 112, 112), torch.bfloat16, "max", G(3, 2, 1))
    assert (b.rows, b.planes, b.block_w, b.num_warps, b.pair) == (8, 4, 64, 2, True)
    assert b.native == (not PK._INTERPRET)       # (the interpreter's bf16 max is wrong)
    assert L((32, 64, 112, 112), torch.float16, "max", G(3, 2, 1)).native
    assert (b.xalign, b.oalign) == (8, 8)
    # float32: 2 outputs a thread (a 16-byte pair), more rows
    b = L((128, 64, 112, 112), torch.float32, "max", G(3, 2, 1))
    assert (b.rows, b.block_w, b.pair, b.xalign, b.oalign) == (14, 64, True, 4, 4)
    # ResNet-D average (ceil_mode, 28 x 28 outputs): 14-row bands, 4 planes of 32 columns
    b = L((128, 256, 56, 56), torch.bfloat16, "avg", G(2, 2, 0, 1, True))
    assert (b.rows, b.planes, b.block_w, b.pair, b.native) == (14, 4, 32, True, False)
    # 7 x 7 planes (PoolFormer s4): one band a plane, 32 planes a program
    b = L((64, 512, 7, 7), torch.bfloat16, "avg", G(3, 1, 1))
    assert (b.rows, b.planes, b.block_w, b.pair) == (7, 32, 8, False)
    # a small grid (one image): fewer planes a program, then shorter bands
    b = L((1, 64, 112, 112), torch.bfloat16, "max", G(3, 2, 1))
    assert b.planes == 1 and 64 * -(-56 // b.rows) >= PK._TARGET_PROGRAMS // 2


# ============================================================================ sm_90 build

_BAND_BUILD = r"""
import json, re, sys
import torch, triton, triton.language as tl
import opspec.kernels.pool as K
import sm90_build as sm90

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build(shape, dt, mode, g, cip=True, div=None, int64=False):
    N, C, H, W = shape
    x = torch.empty(shape, dtype=DT[dt], device="meta")
    b = K.band_launch(x, mode, g, K.BandConfig())
    H_out, W_out = K.pool2d_out_size(H, W, g)
    args = dict(x_ptr="*" + dt, out_ptr="*" + dt, P=N * C, C=C, H=H, W=W, H_out=H_out,
                W_out=W_out, n_col_blocks=triton.cdiv(W_out, b.block_w),
                n_row_blocks=triton.cdiv(H_out, b.rows), sxn=C * H * W, sxc=H * W, sxh=W,
                out_plane=H_out * W_out, divisor=1.0)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = g.kernel, g.stride, g.padding, g.dilation
    cexpr = dict(KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw, ROWS=b.rows,
                 N_IN=K._band_in_rows(b.rows, g), PLANES=b.planes, BLOCK_W=b.block_w,
                 IS_MAX=mode == "max", CLAMP=mode == "max" and g.dilation == (1, 1),
                 PAIR=b.pair, ACC=K._TL_DTYPES[DT[dt]] if b.native else tl.float32,
                 MERGE_NC=True, COUNT_INCLUDE_PAD=cip, HAS_DIVISOR=div is not None,
                 XALIGN=b.xalign, OALIGN=b.oalign, USE_INT64=int64)
    k = sm90.build(K._pool2d_band_kernel, args, cexpr, b.num_warps)
    return {"local": k.local, "loads": k.loads, "stores": k.stores, "regs": k.registers,
            "convert": k.ttgir.count("convert_layout"), "shared": k.shared,
            "nan_max": k.ptx.count(".NaN")}


G = K.pool2d_geometry
out = {
    "stem": build((128, 64, 112, 112), "bf16", "max", G(3, 2, 1)),
    "stem-fp32": build((128, 64, 112, 112), "fp32", "max", G(3, 2, 1)),
    "resnet-d": build((128, 256, 56, 56), "bf16", "avg", G(2, 2, 0, 1, True), cip=False),
    "poolformer": build((64, 64, 56, 56), "bf16", "avg", G(3, 1, 1), cip=False),
    "s4": build((64, 512, 7, 7), "bf16", "avg", G(3, 1, 1), cip=False),
    "deeplab": build((8, 256, 64, 64), "bf16", "max", G(3, 1, 1, 2)),
    "int64": build((256, 64, 112, 112), "fp16", "max", G(3, 2, 1), int64=True),
}
json.dump(out, sys.stdout)
"""


def test_band_kernel_builds_for_sm90():
    """The default launches of the workload shapes compile for sm_90 with no spills, no
    shared memory and no layout conversions; the stride-2 rows are read with 16-byte loads
    (the pair) and written with vector stores; the max keeps NaN (a NaN max instruction)."""
    from sm90_build import run_script

    built = run_script(_BAND_BUILD)
    for name, k in built.items():
        assert k["local"] == 0 and k["shared"] == 0 and k["convert"] == 0, (name, k)
        assert k["regs"] <= 255, (name, k)
    for name in ("stem", "stem-fp32", "resnet-d", "int64"):
        assert any(".v4." in op for op in built[name]["loads"]), (name, built[name]["loads"][:4])
        assert all(".v2." in op or ".v4." in op for op in built[name]["stores"]), name
    for name in ("stem", "stem-fp32", "deeplab"):
        assert built[name]["nan_max"] > 0, name
