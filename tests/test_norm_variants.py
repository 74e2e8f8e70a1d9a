"""The norm family's launch-table variants (kernels/norm.py ``NormTuning``), through the real
launch path (``norm_fwd_triton`` with ``tuning=`` or ``config=``), on the CPU through Triton's
interpreter, or on the GPU where CUDA is available:

* LayerNorm's statistics in one reduction: ``"shifted"`` (sums about each row's first
  element, with the two-pass fallback for rows whose first element is far from the mean) and
  ``"chan"`` (per-thread groups merged by Chan's formula), against the references in all
  dtypes, odd sizes, packed rows, strided inputs, large means and outliers;
* the coop kernel (a row cut into chunks, one program a chunk, partials exchanged through a
  workspace): LayerNorm and RMSNorm, a partial last chunk, strides, every statistics kind,
  its fallback path (the interpreter runs programs in turn: every chunk but a row's last
  reads the row itself), and the calls it must not serve (a residual, an output over the
  input);
* the register caps (``maxnreg``) and an sm_90 build of the variants (no spills, at most 64
  registers at 32 elements a thread).
"""

from __future__ import annotations

import pytest
import torch

from opspec.kernels import norm as K
from opspec.kernels.launch import recording
from opspec.kernels.norm import (
    TUNING, NormConfig, layer_norm_reference, norm_config, norm_fwd_triton, rms_norm_reference,
)

# the device, dtypes, tolerances and helpers of the norm tests (tests/ is on sys.path)
from test_norm import DTYPES, _close, _on_device, _randn  # noqa: F401  (_on_device: a fixture)

STATS = ["shifted", "chan"]
#: coop on every row of at least 64 elements (power of two), chunks of 32, any grid
COOP = TUNING._replace(coop_min_block=64, coop_block=32, coop_warps=1, coop_min_programs=1)


def _ln(x, N, tuning=None, config=None, weight=None, bias=None, eps=1e-5, out=None):
    out = torch.empty_like(x) if out is None else out
    assert norm_fwd_triton(x, out, N, eps, rms=False, weight=weight, bias=bias, config=config,
                           tuning=tuning) is out
    return out


# ============================================================================ statistics

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (4, 100), (2, 1000)], ids=str)
@pytest.mark.parametrize("stats", STATS)
def test_layer_norm_stats_variants(stats, shape, dtype):
    tun = TUNING._replace(ln_stats=stats)
    x = _randn(*shape, dtype=dtype, scale=0.5, shift=40.0)
    w, b = _randn(shape[1], dtype=dtype, seed=1), _randn(shape[1], dtype=dtype, seed=2)
    for weight, bias in ((w, b), (w, None), (None, b), (None, None)):
        got = _ln(x, shape[1], tun, weight=weight, bias=bias)
        _close(got, layer_norm_reference(x, (shape[1],), weight, bias, 1e-5), dtype)


@pytest.mark.parametrize("stats", STATS)
@pytest.mark.parametrize("cfg", [NormConfig(False, 4, 1, 32, 1), NormConfig(False, 2, 3, 32, 2)],
                         ids=["packed", "tiled"])
def test_stats_variants_on_packed_rows(cfg, stats):
    """Several rows a tile (the last tile partly past the rows); the shifted fallback is taken
    by a tile holding one far row and ordinary ones."""
    x = _randn(10, 24, dtype=torch.bfloat16, scale=2.0)
    x[3, 0] = 200.0            # row 3's shift is far from its mean: the tile's fallback
    w, b = _randn(24, dtype=torch.bfloat16, seed=1), _randn(24, dtype=torch.bfloat16, seed=2)
    got = _ln(x, 24, TUNING._replace(ln_stats=stats), cfg, w, b, 1e-6)
    _close(got, layer_norm_reference(x, (24,), w, b, 1e-6), torch.bfloat16)


@pytest.mark.parametrize("stats", ["twopass"] + STATS)
def test_large_mean_small_spread(stats):
    """Rows of mean 1e4 and standard deviation 1 in float32 (E[x^2] - E[x]^2 on the raw values
    would lose every digit: 1e8 against 1 in float32), and rows whose first element is an
    outlier of 1e4 among values of spread 1 (the shifted sums' fallback), against a float64
    reference of the same float32 inputs. The mean itself carries float32's rounding at 1e4
    (ulp 1e-3), which bounds every method's error."""
    tun = TUNING._replace(ln_stats=stats)
    x = _randn(6, 777, scale=1.0, shift=1e4, seed=3)
    y = _randn(6, 777, seed=4)
    y[:, 0] = 1e4
    for t in (x, y):
        want = layer_norm_reference(t.double(), (777,), None, None, 1e-5)
        got = _ln(t, 777, tun).double()
        torch.testing.assert_close(got, want, rtol=0, atol=5e-3)
        for cfg in (NormConfig(False, 1, 1, 1024, 2, 0), NormConfig(False, 1, 1, 256, 2, 4)):
            got = _ln(t, 777, tun, cfg).double()
            torch.testing.assert_close(got, want, rtol=0, atol=5e-3)


def test_shifted_fallback_matches_two_pass_exactly():
    """A tile that falls back computes what two-pass computes, bit for bit."""
    x = _randn(4, 300, shift=3.0, seed=5)
    x[:, 0] = 500.0
    a = _ln(x, 300, TUNING._replace(ln_stats="shifted"))
    b = _ln(x, 300, TUNING)
    assert torch.equal(a, b)


@pytest.mark.parametrize("stats", STATS)
def test_stats_variants_strided_and_special_values(stats):
    tun = TUNING._replace(ln_stats=stats)
    big = _randn(8, 40, seed=6, dtype=torch.float16)
    x = big[::2, 5:5 + 27]
    _close(_ln(x, 27, tun), layer_norm_reference(x, (27,), None, None, 1e-5), torch.float16)
    xt = _randn(13, 9, seed=7).t()              # column stride 9
    _close(_ln(xt, 13, tun), layer_norm_reference(xt, (13,), None, None, 1e-5), torch.float32)
    # constant rows (zero variance), float16 values whose squares overflow float16, NaN
    z = torch.tensor([[2.5] * 8, [6e4, -6e4, 3e4, 1.0, 0.0, 5.0, -1.0, 2.0],
                      [1.0, float("nan"), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float16)
    got = _ln(z, 8, tun)
    want = layer_norm_reference(z, (8,), None, None, 1e-5)
    _close(got[:2], want[:2], torch.float16)
    assert torch.isnan(got[2]).all() and torch.isnan(want[2]).all()


def test_stats_empty_and_in_place():
    tun = TUNING._replace(ln_stats="shifted")
    x = torch.empty(0, 8)
    assert _ln(x, 8, tun).shape == (0, 8)
    x = _randn(5, 33, shift=2.0)
    want = layer_norm_reference(x, (33,), None, None, 1e-5)
    _ln(x, 33, tun, out=x)                       # out over the input: rows kernel reads first
    _close(x, want, torch.float32)


def test_register_cap_on_large_grids():
    """``ln_maxnreg`` applies to LayerNorm's rows kernel on large grids (a compile option: the
    interpreter ignores it); the results are the same."""
    x = _randn(600, 8, shift=1.0, seed=8)
    for stats in ("twopass", "shifted"):
        got = _ln(x, 8, TUNING._replace(ln_stats=stats, ln_maxnreg=64))
        _close(got, layer_norm_reference(x, (8,), None, None, 1e-5), torch.float32)


# ============================================================================ coop

def test_coop_config_choice():
    # off in the table as measured: [2048, 32768] stays in registers
    assert norm_config(2048, 32768).chunks == 0
    on = TUNING._replace(coop_min_block=32768, coop_block=8192, coop_warps=8)
    assert norm_config(2048, 32768, tuning=on) == (False, 1, 1, 8192, 8, 4, 0, 0, 0)
    assert norm_config(2048, 16384, tuning=on).chunks == 0          # shorter rows: not coop
    assert norm_config(16, 32768, tuning=on).chunks == 0            # 64 programs: too few
    assert norm_config(2048, 32768, tuning=on._replace(coop_block=16384, coop_warps=16)) == \
        (False, 1, 1, 16384, 16, 2, 0, 0, 0)
    assert norm_config(2048, 32768, tuning=on._replace(coop_block=4096, coop_warps=4)) == \
        (False, 1, 1, 4096, 4, 8, 0, 0, 0)
    # chunks no longer than the register block; the warps scale with a chunk cut short
    assert norm_config(4096, 40000, tuning=on._replace(coop_block=65536, coop_warps=16)) == \
        (False, 1, 1, 65536 // 2, 8, 2, 0, 0, 0)
    # rows longer than the register block, within coop_max_chunks: coop, else looped
    assert norm_config(512, 65536, tuning=on) == (False, 1, 1, 8192, 8, 8, 0, 0, 0)
    assert norm_config(512, 2**20, tuning=on).looped
    assert norm_config(2048, 32768, tuning=on, coop=False) == (False, 1, 1, 32768, 32, 0, 0, 0, 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stats", ["twopass"] + STATS)
def test_coop_layer_norm(stats, dtype):
    """N = 100 in chunks of 32 (the last chunk 4 elements), through the table (``tuning``)."""
    tun = COOP._replace(ln_stats=stats)
    assert norm_config(5, 100, tuning=tun) == (False, 1, 1, 32, 1, 4, 0, 0, 0)
    x = _randn(5, 100, dtype=dtype, scale=2.0, shift=7.0)
    w, b = _randn(100, dtype=dtype, seed=1), _randn(100, dtype=dtype, seed=2)
    for weight, bias in ((w, b), (None, b), (w, None), (None, None)):
        got = _ln(x, 100, tun, weight=weight, bias=bias)
        _close(got, layer_norm_reference(x, (100,), weight, bias, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_coop_rms_norm(dtype):
    x = _randn(3, 70, dtype=dtype, scale=3.0)
    w = _randn(70, dtype=dtype, seed=1)
    for weight in (w, None):
        out = torch.empty_like(x)
        norm_fwd_triton(x, out, 70, 1e-6, rms=True, weight=weight, tuning=COOP)
        _close(out, rms_norm_reference(x, (70,), weight, 1e-6), dtype)


def test_coop_strided_large_mean_and_one_chunk_rows():
    cfg = NormConfig(False, 1, 1, 64, 2, 3)      # 3 chunks of 64 for N = 150
    big = _randn(6, 200, seed=9, shift=1e4)
    x = big[::2, 10:160]                          # row stride 400, unit columns
    want = layer_norm_reference(x.double(), (150,), None, None, 1e-5)
    for stats in ("twopass", "shifted", "chan"):
        got = _ln(x, 150, TUNING._replace(ln_stats=stats), cfg).double()
        torch.testing.assert_close(got, want, rtol=0, atol=5e-3)
    xt = _randn(150, 4, seed=10, dtype=torch.bfloat16).t()   # column stride 4
    w = _randn(300, seed=11, dtype=torch.bfloat16)[::2]      # a strided weight
    got = _ln(xt, 150, None, cfg, weight=w)
    _close(got, layer_norm_reference(xt, (150,), w, None, 1e-5), torch.bfloat16)


def test_coop_is_not_used_over_its_input():
    """A residual (the fused op) or an output over the input: the table falls back to the
    other kernels; an explicit coop config is refused."""
    x = _randn(4, 100, dtype=torch.bfloat16, shift=1.0)
    r = _randn(4, 100, dtype=torch.bfloat16, seed=1)
    w = _randn(100, dtype=torch.bfloat16, seed=2)
    want_y, want_s = K.fused_add_rms_norm_reference(x, r, w, 1e-6)
    xf, rf = x.clone(), r.clone()
    norm_fwd_triton(xf, xf, 100, 1e-6, rms=True, weight=w, residual=rf, tuning=COOP)
    _close(xf, want_y, torch.bfloat16)
    torch.testing.assert_close(rf.float(), want_s.float(), rtol=2**-7, atol=0.0)
    xi = x.clone()
    want = layer_norm_reference(x, (100,), w, None, 1e-5)
    _ln(xi, 100, COOP, weight=w, out=xi)
    _close(xi, want, torch.bfloat16)
    with pytest.raises(ValueError, match="coop kernel"):
        _ln(xi, 100, None, NormConfig(False, 1, 1, 32, 1, 4), out=xi)


def test_coop_empty():
    x = torch.empty(0, 100)
    assert _ln(x, 100, COOP).shape == (0, 100)


# ============================================================================ re-read

def test_reread_config_choice():
    # off in the table; on, large grids take the looped kernel in chunks of reread_block
    assert not norm_config(8192, 7168).looped
    on = TUNING._replace(reread_block=2048)
    assert norm_config(8192, 3584, tuning=on) == (True, 1, 1, 2048, 16, 0, 0, 0, 0)
    assert norm_config(8192, 1000, tuning=on) == (True, 1, 1, 1024, 16, 0, 0, 0, 0)  # the row's block
    assert not norm_config(64, 3584, tuning=on).looped                     # a small grid
    assert norm_config(8192, 3584, tuning=on._replace(reread_warps=8)).num_warps == 8


def test_rms_norm_holds_16_a_thread_on_large_grids():
    # RMSNorm (no residual) on large grids: 16 elements a thread (where the row is not
    # re-read); LayerNorm keeps 32
    no_reread = TUNING._replace(rms_reread_narrow_block=0)
    assert norm_config(16384, 8192, in_bytes=2, rms=True,
                       tuning=no_reread) == (False, 1, 1, 8192, 16, 0, 0, 0, 0)
    assert norm_config(16384, 8192, in_bytes=2) == (False, 1, 1, 8192, 8, 0, 0, 0, 0)
    assert norm_config(131072, 128, in_bytes=2, rms=True) == (False, 32, 1, 128, 8, 0, 0, 0, 0)
    assert norm_config(16384, 512, in_bytes=2, rms=True).num_warps == 8      # 8 rows a tile
    assert norm_config(200, 8192, in_bytes=2, rms=True).num_warps == 16      # a mid grid


def test_rms_reread_of_float32_rows():
    # The table: RMSNorm (no residual) of float32 rows of up to 8192 elements on large grids
    # re-reads them in chunks of 2048 at 16 warps, and 16-bit rows of 4097-8192 elements in
    # chunks of 4096; longer rows, shorter 16-bit rows, LayerNorm and small grids keep
    # registers
    assert norm_config(16384, 8192, in_bytes=2, rms=True) == (True, 1, 1, 4096, 16, 0, 0, 0, 0)
    assert norm_config(8192, 7168, in_bytes=2, rms=True) == (True, 1, 1, 4096, 16, 0, 0, 0, 0)
    assert not norm_config(4096, 4096, in_bytes=2, rms=True).looped
    assert not norm_config(16384, 8192, in_bytes=2).looped
    assert not norm_config(16384, 8192, in_bytes=2, rms=True,
                           tuning=TUNING._replace(rms_reread_narrow_block=0)).looped
    assert norm_config(8192, 3584, in_bytes=4, rms=True) == (True, 1, 1, 2048, 16, 0, 0, 0, 0)
    assert norm_config(8192, 8192, in_bytes=4, rms=True) == (True, 1, 1, 2048, 16, 0, 0, 0, 0)
    assert norm_config(4096, 8193, in_bytes=4, rms=True) == (False, 1, 1, 16384, 32, 0, 0, 0, 0)
    assert norm_config(2048, 32768, in_bytes=4, rms=True) == (False, 1, 1, 32768, 32, 0, 0, 0, 0)
    assert not norm_config(8192, 3584, in_bytes=2, rms=True).looped
    assert not norm_config(8192, 3584, in_bytes=4).looped
    assert not norm_config(64, 3584, in_bytes=4, rms=True).looped
    assert not norm_config(8192, 3584, in_bytes=4, rms=True,
                           tuning=TUNING._replace(rms_reread_block=0)).looped
    # through the launcher: which kernel each call takes (chunks of 128 here, so that a
    # 600 x 300 grid is large and its rows are three chunks)
    tun = TUNING._replace(rms_reread_block=128, reread_warps=4)
    x = _randn(600, 300, dtype=torch.float32, scale=2.0, shift=3.0)
    w = _randn(300, dtype=torch.float32, seed=1)
    out = torch.empty_like(x)
    with recording() as launches:
        norm_fwd_triton(x, out, 300, 1e-6, rms=True, weight=w, tuning=tun)
    assert [k for k, *_ in launches] == [K._norm_fwd_looped_kernel]
    _close(out, rms_norm_reference(x, (300,), w, 1e-6), torch.float32)
    xb = x.bfloat16()
    with recording() as launches:
        norm_fwd_triton(xb, torch.empty_like(xb), 300, 1e-6, rms=True, weight=w.bfloat16(),
                        tuning=tun)
    assert [k for k, *_ in launches] == [K._norm_fwd_rows_kernel]
    r = _randn(600, 300, dtype=torch.float32, seed=3)
    want_y, want_s = K.fused_add_rms_norm_reference(x, r, w, 1e-6)
    xf, rf = x.clone(), r.clone()
    with recording() as launches:
        norm_fwd_triton(xf, xf, 300, 1e-6, rms=True, weight=w, residual=rf, tuning=tun)
    assert [k for k, *_ in launches] == [K._norm_fwd_rows_kernel]   # the fused add keeps registers
    _close(xf, want_y, torch.float32)
    _close(rf, want_s, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reread_rms_layer_and_fused_norms(dtype):
    """600 rows (a large grid) of 300 in chunks of 128: every op through the looped kernel,
    the statistics pass loading with an eviction hint the interpreter ignores."""
    tun = TUNING._replace(reread_block=128, reread_warps=4)
    assert norm_config(600, 300, tuning=tun).looped
    x = _randn(600, 300, dtype=dtype, scale=2.0, shift=3.0)
    w, b = _randn(300, dtype=dtype, seed=1), _randn(300, dtype=dtype, seed=2)
    _close(_ln(x, 300, tun, weight=w, bias=b), layer_norm_reference(x, (300,), w, b, 1e-5),
           dtype)
    out = torch.empty_like(x)
    norm_fwd_triton(x, out, 300, 1e-6, rms=True, weight=w, tuning=tun)
    _close(out, rms_norm_reference(x, (300,), w, 1e-6), dtype)
    r = _randn(600, 300, dtype=dtype, seed=3)
    want_y, want_s = K.fused_add_rms_norm_reference(x, r, w, 1e-6)
    xf, rf = x.clone(), r.clone()
    norm_fwd_triton(xf, xf, 300, 1e-6, rms=True, weight=w, residual=rf, tuning=tun)
    _close(xf, want_y, dtype)
    _close(rf, want_s, dtype)


# ============================================================================ sm_90 builds

_BUILD_SCRIPT = r"""
import json, sys
from sm90_build import build
import opspec.kernels.norm as K

def rows(N, ty, stats, warps, cap):
    args = dict(x_ptr=ty, r_ptr=ty, w_ptr=ty, b_ptr=ty, y_ptr=ty, M=8192, N=N, eps=1e-5,
                stride_xm=N, stride_xn=1, stride_rm=0, stride_rn=0, stride_ym=N, stride_yn=1,
                stride_w=1, stride_b=1)
    c = dict(ROWS=1, TILES=1, BLOCK_N=K._next_pow2(N), IS_RMS=False, HAS_RESIDUAL=False,
             HAS_WEIGHT=True, HAS_BIAS=True, USE_INT64=False, LATE_AFFINE=True, STATS=stats,
             SHIFT_LIMIT=16.0, GROUP=16 // (2 if ty == "*bf16" else 4))
    return build(K._norm_fwd_rows_kernel, args, c, warps, **({"maxnreg": cap} if cap else {}))

def coop(ty, stats, rms):
    args = dict(x_ptr=ty, w_ptr=ty, b_ptr=ty, y_ptr=ty, ws_ptr="*fp32", cnt_ptr="*i32", M=2048,
                N=32768, C=4, spin=65536, eps=1e-5, stride_xm=32768, stride_xn=1,
                stride_ym=32768, stride_yn=1, stride_w=1, stride_b=1)
    c = dict(BLOCK=8192, FB=1024, C_POW2=4, IS_RMS=rms, HAS_WEIGHT=True, HAS_BIAS=not rms,
             USE_INT64=False, STATS=stats, SHIFT_LIMIT=16.0, GROUP=16 // (2 if ty == "*bf16" else 4))
    return build(K._norm_fwd_coop_kernel, args, c, 8, maxnreg=64)

out = {}
for stats in (0, 1, 2):
    for name, b in ((f"rows-7168-bf16/{stats}", rows(7168, "*bf16", stats, 8, 64)),
                    (f"rows-3584-fp32/{stats}", rows(3584, "*fp32", stats, 4, 64)),
                    (f"coop-bf16/{stats}", coop("*bf16", stats, False)),
                    (f"coop-fp32/{stats}", coop("*fp32", stats, False))):
        out[name] = dict(reg=b.registers, local=b.local, ld=sorted(set(K2 for K2 in b.loads)))
out["coop-rms"] = dict(reg=(b := coop("*bf16", 0, True)).registers, local=b.local,
                       ld=sorted(set(b.loads)))
json.dump(out, sys.stdout)
"""


def test_variants_build_for_sm90_within_64_registers():
    """Every statistics kind of the rows kernel (32 elements a thread under the cap of 64) and
    of the coop kernel compiles for sm_90 with no local memory, at most 64 registers and
    16-byte row loads. Compiled in a fresh process (the interpreter patches triton.language)."""
    from sm90_build import run_script, strip_hints

    built = run_script(_BUILD_SCRIPT)
    assert len(built) == 13, sorted(built)
    for name, k in built.items():
        assert k["local"] == 0 and k["reg"] is not None and k["reg"] <= 64, (name, k)
        assert "ld.global.v4.b32" in {strip_hints(op) for op in k["ld"]}, (name, k)


# The rows kernel's arguments for an [M, N] contiguous launch of dtype dt (sm_90 scripts).
_ROWS_ARGS = r"""
def rows_args(dt, M, N):
    p = "*" + dt
    return dict(x_ptr=p, r_ptr=p, w_ptr=p, b_ptr=p, y_ptr=p, M=M, N=N, eps=1e-5,
                stride_xm=N, stride_xn=1, stride_rm=N, stride_rn=1, stride_ym=N,
                stride_yn=1, stride_w=1, stride_b=1)
"""

_POLICY_SCRIPT = r"""
import json, sys
from sm90_build import build, evict_hints
import opspec.kernels.norm as K
""" + _ROWS_ARGS + r"""
out = {}
for policy in ("", "evict_first"):
    args = rows_args("bf16", 16384, 8192)
    c = dict(ROWS=1, TILES=1, BLOCK_N=8192, IS_RMS=True, HAS_RESIDUAL=True, HAS_WEIGHT=True,
             HAS_BIAS=False, USE_INT64=False, LATE_AFFINE=False, ROW_POLICY=policy)
    b = build(K._norm_fwd_rows_kernel, args, c, 16)
    # the row loads (x, then the residual) are the v4 loads of the two row tensors; the
    # weight is loaded once with evict_last
    out[policy or "none"] = [evict_hints([op]) for op in b.loads]
json.dump(out, sys.stdout)
"""


def test_rows_kernel_row_load_policy_reaches_the_loads():
    """``NormTuning.row_load_policy`` is the cache hint of the rows kernel's row loads (the
    input and the residual), and nothing else's: none by default, evict_first when set;
    the weight keeps its evict_last either way (sm_90 builds in a fresh process)."""
    from sm90_build import run_script

    assert K.TUNING.row_load_policy == ""
    built = run_script(_POLICY_SCRIPT)
    none, first = built["none"], built["evict_first"]
    assert len(none) == len(first) and len(none) >= 3, built
    assert ["L1::evict_last"] in none and ["L1::evict_last"] in first, built
    assert none.count([]) == first.count(["L1::evict_first"]) >= 2, built
    assert ["L1::evict_first"] not in none, built


_ROW_CACHE_SCRIPT = r"""
import json, sys
from sm90_build import build
import opspec.kernels.norm as K
""" + _ROWS_ARGS + r"""
out = {}
for name, cache, l1 in (("none", "", 0), (".cg", ".cg", 0), ("split", ".cg", 16384)):
    args = rows_args("fp32", 2048, 32768)
    c = dict(ROWS=1, TILES=1, BLOCK_N=32768, IS_RMS=False, HAS_RESIDUAL=False,
             HAS_WEIGHT=True, HAS_BIAS=True, USE_INT64=False, LATE_AFFINE=True,
             ROW_CACHE=cache, AFFINE_L1=l1)
    b = build(K._norm_fwd_rows_kernel, args, c, 32)
    out[name] = dict(loads=b.loads, local=b.local)
json.dump(out, sys.stdout)
"""


def test_rows_kernel_row_cache_reaches_the_row_loads():
    """``NormTuning.row_cache`` is the cache modifier of the rows kernel's row loads and
    nothing else's: with ".cg" the input's loads go past L1 and the weight's and bias's
    (evict_last) still go through it (sm_90 builds in a fresh process)."""
    from sm90_build import run_script

    built = run_script(_ROW_CACHE_SCRIPT)
    none, cg = built["none"]["loads"], built[".cg"]["loads"]
    assert len(none) == len(cg) >= 3, built
    assert not any(".cg" in op for op in none), built
    row = [op for op in cg if ".cg" in op]
    affine = [op for op in cg if "L1::evict_last" in op]
    assert row and affine and not any(".cg" in op for op in affine), built
    assert len(row) + len(affine) == len(cg), built


def test_rows_kernel_affine_l1_splits_the_parameter_loads():
    """With ``AFFINE_L1`` the weight's and bias's loads split in two: the leading columns
    through L1 (evict_last) and the rest past it (.cg), as many of each, no spill; without
    it every parameter load goes through L1 (sm_90 builds in a fresh process). The split is
    by predicate, not by code: both parts load every vector, each masked to its columns."""
    from sm90_build import run_script

    built = run_script(_ROW_CACHE_SCRIPT)
    cg, split = built[".cg"], built["split"]
    assert split["local"] == 0 == cg["local"], built
    through_l1 = [op for op in split["loads"] if "L1::evict_last" in op]
    past_l1 = [op for op in split["loads"] if ".cg" in op]
    assert len(through_l1) + len(past_l1) == len(split["loads"]), built
    # the row's loads past L1 are those of the unsplit build; the rest are the parameters'
    rows = sum(".cg" in op for op in cg["loads"])
    params_past = len(past_l1) - rows
    assert params_past > 0 and params_past == len(through_l1), built
    # each part is one predicated load of every parameter vector the unsplit build loads
    assert len(through_l1) == sum("L1::evict_last" in op for op in cg["loads"]), built


@pytest.mark.parametrize("n, cache", [(32768, ".cg"), (16384, "")])
def test_rows_launch_takes_row_cache_on_the_longest_rows(monkeypatch, n, cache):
    """The launch passes ``row_cache`` to the rows kernel for rows of at least
    ``row_cache_min_block`` elements (one program an SM), and no modifier below."""
    seen = {}

    def capture(kernel, grid, *args, **kw):
        seen.update(kernel=kernel, **kw)

    monkeypatch.setattr(K, "launch", capture)
    assert K.TUNING.row_cache == ".cg" and K.TUNING.row_cache_min_block == 32768
    x = torch.empty(264, n, dtype=torch.float32)
    w = torch.empty(n, dtype=torch.float32)
    K.norm_fwd_triton(x, torch.empty_like(x), n, 1e-5, rms=False, weight=w, bias=w)
    assert seen["kernel"] is K._norm_fwd_rows_kernel and seen["ROW_CACHE"] == cache


@pytest.mark.parametrize("n, dtype, bias, rms, expected", [
    (32768, torch.float32, True, False, 16384),   # 256 KiB of weight and bias: split
    (20000, torch.float32, True, False, 16384),   # a 32768 block, masked past N
    (32768, torch.float32, False, False, 0),      # the weight alone fits: all through L1
    (32768, torch.float32, False, True, 0),       # RMSNorm, likewise
    (32768, torch.bfloat16, True, False, 0),      # 16-bit parameters fit
    (16384, torch.float32, True, False, 0),       # below row_cache_min_block
])
def test_rows_launch_reads_leading_parameters_through_l1(monkeypatch, n, dtype, bias, rms,
                                                         expected):
    """The launch passes ``AFFINE_L1`` (the power-of-two columns whose weight and bias fit
    ``affine_l1_bytes``) to the rows kernel where its rows load past L1 and the parameters
    of the block do not fit; 0 otherwise."""
    seen = {}

    def capture(kernel, grid, *args, **kw):
        seen.update(kernel=kernel, **kw)

    monkeypatch.setattr(K, "launch", capture)
    assert K.TUNING.affine_l1_bytes == 128 * 1024
    x = torch.empty(40, n, dtype=dtype)
    w = torch.empty(n, dtype=dtype)
    K.norm_fwd_triton(x, torch.empty_like(x), n, 1e-5, rms=rms, weight=w,
                      bias=w if bias else None, late_affine=True)
    assert seen["kernel"] is K._norm_fwd_rows_kernel, seen["kernel"]
    assert seen["AFFINE_L1"] == expected, seen
    # no bound: every parameter through L1
    K.norm_fwd_triton(x, torch.empty_like(x), n, 1e-5, rms=rms, weight=w,
                      bias=w if bias else None, late_affine=True,
                      tuning=K.TUNING._replace(affine_l1_bytes=0))
    assert seen["AFFINE_L1"] == 0


@pytest.mark.parametrize("n", [32768, 20001])
def test_rows_kernel_split_parameter_loads_match_the_reference(n):
    """LayerNorm of long float32 rows with the weight and bias read in two parts (through L1
    and past it) equals the reference, and equals the unsplit launch bit for bit, signed
    zeros and the masked tail included."""
    x = _randn(3, n, seed=1)
    w = _randn(n, seed=2)
    b = _randn(n, seed=3)
    # signed zeros on both sides of the split, and at the row's end
    for i in (0, 16383, 16384, n - 1):
        w[i] = -0.0
        b[i] = -0.0
    split = K.TUNING._replace(affine_l1_bytes=128 * 1024)
    whole = K.TUNING._replace(affine_l1_bytes=0)
    with recording() as launches:
        got = _ln(x, n, tuning=split, weight=w, bias=b)
    assert [kw["AFFINE_L1"] for _, _, _, kw in launches] == [16384], launches
    ref = _ln(x, n, tuning=whole, weight=w, bias=b)
    assert torch.equal(got, ref)
    assert torch.equal(torch.signbit(got), torch.signbit(ref))
    _close(got, layer_norm_reference(x, (n,), w, b, 1e-5), torch.float32)
