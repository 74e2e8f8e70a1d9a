"""The norm family: RMSNormFwdOp, LayerNormFwdOp, FusedAddRMSNormFwdOp.

Kernels: the Triton kernels against the torch references, on the CPU through Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1 without CUDA), in float32, float16
and bfloat16, odd sizes, both kernels (rows in registers, several short rows per program,
the looped kernel for long rows, forced here through `config`), strided and non-viewable
inputs and empty tensors. Ops: results against torch.nn.functional, errors that name the
declaration they break, the in-place effects of the fused op, the compile boundary
(`opcheck` on every operator, one cold `torch.compile(fullgraph=True)`), and every workload
case instantiated on the meta device. Sizes are small: the interpreter runs programs
through numpy. Where CUDA is available the same tests run on the GPU (every tensor a test
makes is made there), so this file is also the GPU correctness check of the family.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opspec.kernels import norm as norm_mod
from opspec.kernels.norm import (
    DEFAULT_RMS_EPS, MAX_REGISTER_BLOCK, NormConfig, fused_add_rms_norm_reference,
    fused_add_rms_norm_triton, layer_norm_reference, layer_norm_triton, norm_config,
    norm_fwd_triton, rms_norm_reference, rms_norm_triton,
)
from opspec.kernels.norm_impl import (
    FusedAddRMSNormCall, FusedAddRMSNormReferenceKernel, LayerNormReferenceKernel, NormCall,
    RMSNormReferenceKernel,
)
from opspec.ops import FusedAddRMSNormFwdOp, LayerNormFwdOp, RMSNormFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
# (rows, N): a single element, odd sizes, a row wider than a power of two.
SHAPES = [(1, 1), (3, 17), (4, 100), (2, 1000)]
LOOPED = NormConfig(True, 1, 1, 16, 1)    # 16-element chunks: several per row
PACKED = NormConfig(False, 4, 1, 32, 1)   # four short rows per program
TILED = NormConfig(False, 2, 3, 32, 1)    # three tiles of two rows per program


@pytest.fixture(autouse=True)
def _on_device():
    """Tensors the tests make without naming a device are made on DEV."""
    with torch.device(DEV):
        yield


def _randn(*shape, dtype=torch.float32, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, device="cpu") * scale + shift
    return x.to(device=DEV, dtype=dtype)


def _close(got, want, dtype):
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def _assert_sum(got, want):
    """The stored residual sum: exact, except that Triton's interpreter converts float32 to
    bfloat16 by truncation (the GPU rounds to nearest even): within one bfloat16 step."""
    if got.dtype == torch.bfloat16:
        torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=0.0)
    else:
        assert torch.equal(got, want)


# ============================================================================ references

def test_references_match_torch():
    x = _randn(5, 3, 24)
    w, b = _randn(3, 24, seed=1), _randn(3, 24, seed=2)
    torch.testing.assert_close(rms_norm_reference(x, (3, 24), w, 1e-6),
                               F.rms_norm(x, (3, 24), w, 1e-6))
    torch.testing.assert_close(rms_norm_reference(x, (24,)), F.rms_norm(x, (24,)))
    torch.testing.assert_close(layer_norm_reference(x, (3, 24), w, b, 1e-5),
                               F.layer_norm(x, (3, 24), w, b, 1e-5))
    torch.testing.assert_close(layer_norm_reference(x, (24,)), F.layer_norm(x, (24,)))
    # bfloat16: float32 math, one rounding (as torch's own rms_norm/layer_norm)
    xh, wh = x.bfloat16(), w.bfloat16()
    got = rms_norm_reference(xh, (3, 24), wh)
    assert got.dtype == torch.bfloat16
    _close(got, F.rms_norm(xh, (3, 24), wh), torch.bfloat16)


def test_reference_default_eps_is_torchs():
    """torch's eps=None is float32's machine epsilon for all three dtypes (not the input
    dtype's): tiny rows show the difference."""
    assert DEFAULT_RMS_EPS == torch.finfo(torch.float32).eps
    for dt in DTYPES:
        x = torch.full((2, 8), 1e-3).to(dt)
        torch.testing.assert_close(rms_norm_reference(x, (8,)), F.rms_norm(x, (8,)))


def test_reference_fused_add():
    x, r, w = _randn(3, 10, dtype=torch.bfloat16), _randn(3, 10, dtype=torch.bfloat16, seed=1), \
        _randn(10, dtype=torch.bfloat16, seed=2)
    y, s = fused_add_rms_norm_reference(x, r, w, 1e-6)
    assert torch.equal(s, x + r)     # the sum rounded to bfloat16, as stored
    torch.testing.assert_close(y, F.rms_norm(s, (10,), w, 1e-6))
    with pytest.raises(ValueError, match="at least one axis"):
        rms_norm_reference(x, ())
    with pytest.raises(ValueError, match="does not end in"):
        layer_norm_reference(x, (9,))


# ============================================================================ Triton kernels

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm_triton(shape, dtype):
    x = _randn(*shape, dtype=dtype, scale=3.0)
    w = _randn(shape[1], dtype=dtype, seed=1)
    for weight, eps in ((w, 1e-6), (None, None)):
        out = torch.empty_like(x)
        assert rms_norm_triton(x, (shape[1],), weight, eps, out) is out
        _close(out, rms_norm_reference(x, (shape[1],), weight, eps), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm_triton(shape, dtype):
    # a large mean next to a small spread: the centred variance keeps its accuracy
    x = _randn(*shape, dtype=dtype, scale=0.5, shift=40.0)
    w, b = _randn(shape[1], dtype=dtype, seed=1), _randn(shape[1], dtype=dtype, seed=2)
    for weight, bias in ((w, b), (w, None), (None, b), (None, None)):
        out = torch.empty_like(x)
        layer_norm_triton(x, (shape[1],), weight, bias, 1e-5, out)
        _close(out, layer_norm_reference(x, (shape[1],), weight, bias, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (2, 1000)], ids=str)
def test_fused_add_rms_norm_triton(shape, dtype):
    x, r = _randn(*shape, dtype=dtype), _randn(*shape, dtype=dtype, seed=1)
    w = _randn(shape[1], dtype=dtype, seed=2)
    want_y, want_s = fused_add_rms_norm_reference(x, r, w, 1e-5)
    assert fused_add_rms_norm_triton(x, r, w, 1e-5) is None
    _assert_sum(r, want_s)                  # the sum is rounded once, as torch does
    _close(x, want_y, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_looped_kernel(dtype):
    """Rows longer than the register block: chunked passes (forced with 16-element chunks)."""
    x = _randn(3, 50, dtype=dtype, scale=2.0, shift=5.0)
    w, b = _randn(50, dtype=dtype, seed=1), _randn(50, dtype=dtype, seed=2)
    for rms in (True, False):
        for weight, bias in ((w, b if not rms else None), (None, None)):
            out = torch.empty_like(x)
            norm_fwd_triton(x, out, 50, 1e-5, rms=rms, weight=weight, bias=bias, config=LOOPED)
            ref = (rms_norm_reference(x, (50,), weight, 1e-5) if rms
                   else layer_norm_reference(x, (50,), weight, bias, 1e-5))
            _close(out, ref, dtype)
    r = _randn(3, 50, dtype=dtype, seed=3)
    want_y, want_s = fused_add_rms_norm_reference(x, r, w, 1e-5)
    norm_fwd_triton(x, x, 50, 1e-5, rms=True, weight=w, residual=r, config=LOOPED)
    _assert_sum(r, want_s)
    _close(x, want_y, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rms", [True, False], ids=["rms", "layer"])
def test_stream_kernel(rms, dtype):
    """The persistent stream kernel, forced with 32-element chunks: 7 rows on 3 programs
    (each program's next row and next chunk loaded ahead, masked past the end), N = 100
    (the last chunk 4 elements), with and without the affine parameters, a strided input
    and an output over the input; and N = 128, whole chunks only (no masks)."""
    cfg = NormConfig(True, 1, 1, 32, 1, 0, 3)
    x = _randn(7, 100, dtype=dtype, scale=2.0, shift=5.0)
    w, b = _randn(100, dtype=dtype, seed=1), _randn(100, dtype=dtype, seed=2)
    ref = ((lambda t, wt, bs: rms_norm_reference(t, (100,), wt, 1e-5)) if rms else
           (lambda t, wt, bs: layer_norm_reference(t, (100,), wt, bs, 1e-5)))
    for weight, bias in ((w, None if rms else b), (None, None)):
        out = torch.empty_like(x)
        norm_fwd_triton(x, out, 100, 1e-5, rms=rms, weight=weight, bias=bias, config=cfg)
        _close(out, ref(x, weight, bias), dtype)
    xt = _randn(100, 7, dtype=dtype, seed=4).t()               # rows of stride 1, columns 7
    out = torch.empty(7, 100, dtype=dtype)
    norm_fwd_triton(xt, out, 100, 1e-5, rms=rms, weight=w, config=cfg)
    _close(out, ref(xt, w, None), dtype)
    xi = x.clone()
    norm_fwd_triton(xi, xi, 100, 1e-5, rms=rms, weight=w, config=cfg)
    _close(xi, ref(x, w, None), dtype)
    # N a multiple of the chunk (128 = 4 x 32): the unmasked specialisation
    x4 = _randn(7, 128, dtype=dtype, seed=9, scale=2.0, shift=5.0)
    w4, b4 = _randn(128, dtype=dtype, seed=10), _randn(128, dtype=dtype, seed=11)
    out = torch.empty_like(x4)
    norm_fwd_triton(x4, out, 128, 1e-5, rms=rms, weight=w4, bias=None if rms else b4, config=cfg)
    want = (rms_norm_reference(x4, (128,), w4, 1e-5) if rms
            else layer_norm_reference(x4, (128,), w4, b4, 1e-5))
    _close(out, want, dtype)


def test_stream_layer_norm_far_shift_takes_the_exact_pass():
    """LayerNorm's shifted sums are about each row's first element. Row 1's first element
    lies 300 standard deviations out, where those sums lose the variance to cancellation:
    it takes the centred pass (error about 1e-5 against float64); with that pass switched
    off (an unbounded shift_limit) its error is 2e-2 to 5e-2. Row 0 keeps the shifted
    sums either way."""
    cfg = NormConfig(True, 1, 1, 1024, 1, 0, 2)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 4096, generator=g, device="cpu") * 1e-3).to(DEV)
    x[1, 0] = 0.3
    ref = layer_norm_reference(x.double(), (4096,), None, None, 0.0)
    errs = {}
    for limit in (norm_mod.TUNING.shift_limit, float("inf")):
        out = torch.empty_like(x)
        norm_fwd_triton(x, out, 4096, 0.0, rms=False, config=cfg,
                        tuning=norm_mod.TUNING._replace(shift_limit=limit))
        errs[limit] = [(out[i].double() - ref[i]).abs().max().item() for i in range(2)]
    table, off = errs[norm_mod.TUNING.shift_limit], errs[float("inf")]
    assert max(table) < 1e-4 and abs(off[0] - table[0]) < 1e-6, errs
    assert off[1] > 1e-3, errs


def test_stream_kernel_takes_no_residual():
    """The fused residual add never runs on the stream kernel: the table falls back to the
    register or looped kernel, and a forced stream config is refused."""
    x, r = _randn(3, 40000, seed=6), _randn(3, 40000, seed=7)
    w = _randn(40000, seed=8)
    assert norm_config(3, 40000).stream == 3
    want_y, want_s = fused_add_rms_norm_reference(x, r, w, 1e-5)
    norm_fwd_triton(x, x, 40000, 1e-5, rms=True, weight=w, residual=r)
    _assert_sum(r, want_s)
    _close(x, want_y, torch.float32)
    with pytest.raises(ValueError, match="the stream kernel does not take a residual"):
        norm_fwd_triton(x, x, 40000, 1e-5, rms=True, weight=w, residual=r,
                        config=NormConfig(True, 1, 1, 1024, 4, 0, 3))


_STREAM_BUILD = r"""
import json, sys
from sm90_build import build
import opspec.kernels.norm as K

def stream(ty, N, block, rms):
    vec = 16 // (2 if ty == "*bf16" else 4)
    args = dict(x_ptr=ty, w_ptr=ty, b_ptr=ty, y_ptr=ty, M=2048, N=N, eps=1e-5, stride_xm=N,
                stride_xn=1, stride_ym=N, stride_yn=1, stride_w=1, stride_b=1)
    c = dict(BLOCK_R=block // vec, VEC=vec, EVEN=N % block == 0, IS_RMS=rms, HAS_WEIGHT=True,
             HAS_BIAS=not rms, USE_INT64=False, SHIFT_LIMIT=16.0)
    b = build(K._norm_fwd_stream_kernel, args, c, 32)
    spills = sum(1 for line in b.sass.splitlines() if "STL" in line or "LDL" in line)
    return dict(reg=b.registers, spills=spills, ld=b.loads, st=b.stores)

json.dump({"bf16-32k-layer": stream("*bf16", 32768, 16384, False),
           "bf16-32k-rms": stream("*bf16", 32768, 16384, True),
           "fp32-40000-layer": stream("*fp32", 40000, 8192, False)}, sys.stdout)
"""


def test_stream_kernel_builds_for_sm90_without_spills():
    """The stream kernel as the table launches it (32 warps: at most 64 registers a thread)
    compiles for sm_90 without a spill, its rows in 16-byte loads and stores: pass 1's loads
    keep the row in L2 (evict_last) for pass 2, whose loads and stores are evict_first.
    Compiled in a fresh process (the interpreter patches triton.language)."""
    from sm90_build import evict_hints, run_script, strip_hints

    built = run_script(_STREAM_BUILD)
    for name, k in built.items():
        assert k["reg"] is not None and k["reg"] <= 64 and k["spills"] == 0, (name, k)
        assert "ld.global.v4.b32" in {strip_hints(op) for op in k["ld"]}, (name, k)
        assert {strip_hints(op) for op in k["st"]} == {"st.global.v4.b32"}, (name, k)
        assert {"L1::evict_last", "L1::evict_first"} <= set(evict_hints(k["ld"])), (name, k)
        assert evict_hints(k["st"]) == ["L1::evict_first"], (name, k)


# (rows, N, config): a row held as two tiles, the second masked past N; with several rows
# and tiles a program, and a tail of one element.
SPLIT = [(3, 150, NormConfig(False, 1, 1, 128, 1, block2=32)),
         (5, 100, NormConfig(False, 2, 3, 64, 2, block2=64)),
         (4, 257, NormConfig(False, 4, 1, 256, 4, block2=1)),
         (2, 1152, NormConfig(False, 2, 1, 1024, 2, block2=128))]


@pytest.mark.parametrize("late", [False, True], ids=["early", "late"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("R, N, cfg", SPLIT, ids=lambda v: str(v) if isinstance(v, int) else "")
def test_rows_in_two_tiles(R, N, cfg, dtype, late):
    """All three norms with a row as two tiles (NormTuning.split_rows) match the references:
    the statistics summed over both tiles, the weight, bias and residual of both, the
    output stored from both; rows strided apart (a column slice of a wider tensor)."""
    wide = _randn(R, N + 24, dtype=dtype, scale=2.0, shift=1.5)
    x = wide[:, 3:N + 3]
    w, b = _randn(N, dtype=dtype, seed=1), _randn(N, dtype=dtype, seed=2)
    out = torch.empty(R, N, dtype=dtype)
    norm_fwd_triton(x, out, N, 1e-5, rms=False, weight=w, bias=b, config=cfg, late_affine=late)
    _close(out, layer_norm_reference(x, (N,), w, b, 1e-5), dtype)
    norm_fwd_triton(x, out, N, 1e-6, rms=True, weight=w, config=cfg, late_affine=late)
    _close(out, rms_norm_reference(x, (N,), w, 1e-6), dtype)
    norm_fwd_triton(x, out, N, 1e-6, rms=True, config=cfg, late_affine=late)
    _close(out, rms_norm_reference(x, (N,), None, 1e-6), dtype)
    xs, r = x.clone(), _randn(R, N, dtype=dtype, seed=3)
    want_x, want_r = fused_add_rms_norm_reference(xs, r, w, 1e-6)
    norm_fwd_triton(xs, xs, N, 1e-6, rms=True, weight=w, residual=r, config=cfg,
                    late_affine=late)
    _assert_sum(r, want_r)
    _close(xs, want_x, dtype)


def test_table_with_split_rows_runs_two_tiles():
    """Under NormTuning.split_rows the launcher's own plan takes the two tiles for a length
    like Falcon-7B's 4544 (4096 + 512) and gives the reference's output."""
    x = _randn(3, 4544, dtype=torch.float16, shift=0.5)
    w, b = _randn(4544, dtype=torch.float16, seed=1), _randn(4544, dtype=torch.float16, seed=2)
    split = norm_mod.TUNING._replace(split_rows=True)
    assert norm_config(3, 4544, in_bytes=2, tuning=split)[3::5] == (4096, 512)
    out = torch.empty_like(x)
    norm_fwd_triton(x, out, 4544, 1e-5, rms=False, weight=w, bias=b, tuning=split)
    _close(out, layer_norm_reference(x, (4544,), w, b, 1e-5), torch.float16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_of_32k_stay_in_registers(dtype, monkeypatch):
    """A row of 16385 to 32768 elements takes the register kernel (32 warps), its affine
    parameters loaded late whatever the grid (the register cap of 32 warps); so does it as
    two tiles (NormTuning.split_rows: 16384 + 4096 for 20000)."""
    x = _randn(2, 20000, dtype=dtype, scale=0.5, shift=3.0)
    w, b = _randn(20000, dtype=dtype, seed=1), _randn(20000, dtype=dtype, seed=2)
    assert norm_config(2, 20000) == (False, 1, 1, 32768, 32, 0, 0, 0, 0)
    split = norm_mod.TUNING._replace(split_rows=True)
    assert norm_config(2, 20000, tuning=split) == (False, 1, 1, 16384, 32, 0, 0, 0, 4096)
    seen = []
    real = norm_mod._norm_fwd_rows_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append(kw["LATE_AFFINE"])
                return real[grid](*args, **kw)
            return launch

    monkeypatch.setattr(norm_mod, "_norm_fwd_rows_kernel", Spy())
    out = torch.empty_like(x)
    layer_norm_triton(x, (20000,), w, b, 1e-5, out)
    _close(out, layer_norm_reference(x, (20000,), w, b, 1e-5), dtype)
    norm_fwd_triton(x, out, 20000, 1e-5, rms=False, weight=w, bias=b, tuning=split)
    _close(out, layer_norm_reference(x, (20000,), w, b, 1e-5), dtype)
    assert seen == [True, True]


@pytest.mark.parametrize("cfg", [PACKED, TILED], ids=["packed", "tiled"])
@pytest.mark.parametrize("rms", [True, False], ids=["rms", "layer"])
def test_packed_short_rows(rms, cfg):
    """Several rows per program, as one tile or as tiles in turn, the last program partly
    past the rows (M = 10: 4 or 6 rows a program)."""
    x = _randn(10, 24, dtype=torch.bfloat16, scale=2.0)
    w, b = _randn(24, dtype=torch.bfloat16, seed=1), _randn(24, dtype=torch.bfloat16, seed=2)
    out = torch.full_like(x, 7.0)
    norm_fwd_triton(x, out, 24, 1e-6, rms=rms, weight=w, bias=None if rms else b, config=cfg)
    ref = (rms_norm_reference(x, (24,), w, 1e-6) if rms
           else layer_norm_reference(x, (24,), w, b, 1e-6))
    _close(out, ref, torch.bfloat16)
    if rms:
        r = _randn(10, 24, dtype=torch.bfloat16, seed=3)
        want_y, want_s = fused_add_rms_norm_reference(x, r, w, 1e-6)
        norm_fwd_triton(x, x, 24, 1e-6, rms=True, weight=w, residual=r, config=cfg)
        _assert_sum(r, want_s)
        _close(x, want_y, torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_affine_parameters_loaded_late(dtype):
    """`LATE_AFFINE` (chosen on large grids for LayerNorm and float32): the weight and bias
    are loaded after the statistics; the results are the same."""
    assert norm_fwd_triton.__kwdefaults__["late_affine"] is None
    x = _randn(10, 24, dtype=dtype, shift=2.0)
    r = _randn(10, 24, dtype=dtype, seed=3)
    w, b = _randn(24, dtype=dtype, seed=1), _randn(24, dtype=dtype, seed=2)
    for cfg in (None, TILED):
        out = torch.empty_like(x)
        norm_fwd_triton(x, out, 24, 1e-5, rms=False, weight=w, bias=b, config=cfg,
                        late_affine=True)
        _close(out, layer_norm_reference(x, (24,), w, b, 1e-5), dtype)
    xf, rf = x.clone(), r.clone()
    want_y, want_s = fused_add_rms_norm_reference(x, r, w, 1e-5)
    norm_fwd_triton(xf, xf, 24, 1e-5, rms=True, weight=w, residual=rf, late_affine=True)
    _assert_sum(rf, want_s)
    _close(xf, want_y, dtype)


def test_strided_and_transposed_inputs():
    # every other row and a column slice of a wider tensor: row stride 2 * 40, unit columns
    big = _randn(8, 40, seed=4)
    x = big[::2, 5:5 + 27]
    w = _randn(54, seed=5)[::2]             # a strided weight
    out = torch.empty(4, 27)
    rms_norm_triton(x, (27,), w, 1e-6, out)
    _close(out, rms_norm_reference(x, (27,), w, 1e-6), torch.float32)
    # a transposed view: column stride 9, row stride 1
    xt = _randn(13, 9, seed=6, dtype=torch.float16).t()
    out = torch.empty(9, 13, dtype=torch.float16)
    layer_norm_triton(xt, (13,), None, None, 1e-5, out)
    _close(out, layer_norm_reference(xt, (13,), None, None, 1e-5), torch.float16)
    # leading axes that cannot be flattened into one row stride: read through a copy
    x3 = _randn(3, 4, 6, seed=7).permute(1, 0, 2)
    out = torch.empty(4, 3, 6)
    rms_norm_triton(x3, (6,), None, None, out)
    _close(out, rms_norm_reference(x3, (6,)), torch.float32)
    # an `out` of that layout too: written through a copy, copied back
    out3 = torch.empty(3, 4, 6).permute(1, 0, 2)
    assert rms_norm_triton(x3, (6,), None, None, out3) is out3
    _close(out3, rms_norm_reference(x3, (6,)), torch.float32)


def test_multi_axis_normalized_shape():
    x = _randn(2, 3, 4, 5, dtype=torch.bfloat16)
    w, b = _randn(4, 5, dtype=torch.bfloat16, seed=1), _randn(4, 5, dtype=torch.bfloat16, seed=2)
    out = torch.empty_like(x)
    layer_norm_triton(x, (4, 5), w, b, 1e-5, out)
    _close(out, F.layer_norm(x, (4, 5), w, b, 1e-5), torch.bfloat16)
    rms_norm_triton(x, (4, 5), w, None, out)
    _close(out, F.rms_norm(x, (4, 5), w), torch.bfloat16)


def test_fused_add_on_strided_and_non_viewable_tensors():
    """Written tensors that are views of wider ones are written in place through their
    strides; one whose leading axes cannot be flattened is computed in a copy and copied
    back. Elements outside the views are untouched."""
    xb, rb = _randn(6, 20, seed=1), _randn(6, 20, seed=2)
    x, r = xb[:, 2:14], rb[:, 4:16]        # row stride 20, not 12
    x0, r0, xb0, rb0 = x.clone(), r.clone(), xb.clone(), rb.clone()
    w = _randn(12, seed=3)
    fused_add_rms_norm_triton(x, r, w, 1e-6)
    want_y, want_s = fused_add_rms_norm_reference(x0, r0, w, 1e-6)
    torch.testing.assert_close(r, want_s)
    _close(x, want_y, torch.float32)
    assert torch.equal(xb[:, :2], xb0[:, :2]) and torch.equal(xb[:, 14:], xb0[:, 14:])
    assert torch.equal(rb[:, :4], rb0[:, :4]) and torch.equal(rb[:, 16:], rb0[:, 16:])
    # [B0, B1, D] permuted: no single row stride
    x3 = _randn(3, 4, 8, seed=4).permute(1, 0, 2)
    r3 = _randn(4, 3, 8, seed=5)
    x30, r30 = x3.clone(), r3.clone()
    fused_add_rms_norm_triton(x3, r3, w[:8], 1e-6)
    want_y, want_s = fused_add_rms_norm_reference(x30, r30, w[:8], 1e-6)
    torch.testing.assert_close(r3, want_s)
    _close(x3, want_y, torch.float32)


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0, 0)], ids=str)
def test_empty(shape):
    x = torch.empty(shape, dtype=torch.float16)
    out = torch.empty_like(x)
    assert rms_norm_triton(x, (shape[1],), None, None, out) is out
    assert layer_norm_triton(x, (shape[1],), None, None, 1e-5, out) is out
    r = torch.empty_like(x)
    fused_add_rms_norm_triton(x, r, torch.empty(shape[1], dtype=torch.float16), 1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_extreme_values():
    """float16 values whose squares overflow float16: the sums are float32."""
    x = torch.tensor([[6e4, -6e4, 3e4, 1.0], [1e-4, -2e-4, 0.0, 3e-4]], dtype=torch.float16)
    out = torch.empty_like(x)
    rms_norm_triton(x, (4,), None, 1e-6, out)
    assert torch.isfinite(out.float()).all()
    _close(out, rms_norm_reference(x, (4,), None, 1e-6), torch.float16)
    layer_norm_triton(x, (4,), None, None, 1e-5, out)
    assert torch.isfinite(out.float()).all()
    _close(out, layer_norm_reference(x, (4,), None, None, 1e-5), torch.float16)


def test_launcher_rejects_bad_arguments():
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="elements"):
        norm_fwd_triton(x, torch.empty(2, 7), 8, 1e-5, rms=True)
    with pytest.raises(TypeError, match="dtype"):
        norm_fwd_triton(x, torch.empty(2, 8, dtype=torch.float16), 8, 1e-5, rms=True)
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        norm_fwd_triton(x.double(), x.double(), 8, 1e-5, rms=True)
    with pytest.raises(ValueError, match="not rows of N = 3"):
        norm_fwd_triton(x, torch.empty(2, 8), 3, 1e-5, rms=True)
    with pytest.raises(ValueError, match=r"weight must hold 8 elements \(N = 8\), got 4"):
        norm_fwd_triton(x, torch.empty(2, 8), 8, 1e-5, rms=True, weight=torch.ones(4))


def test_config_choice():
    # (looped, rows, tiles, block, num_warps). Prefill-sized grids: a row in registers, 32
    # elements a thread (more rows in flight per SM).
    assert norm_config(4096, 4096) == (False, 1, 1, 4096, 4, 0, 0, 0, 0)
    assert norm_config(16384, 8192) == (False, 1, 1, 8192, 8, 0, 0, 0, 0)
    assert norm_config(8192, 7168) == (False, 1, 1, 8192, 8, 0, 0, 0, 0)
    assert norm_config(8192, 3584) == (False, 1, 1, 4096, 4, 0, 0, 0, 0)
    assert norm_config(2048, 16384) == (False, 1, 1, 16384, 16, 0, 0, 0, 0)
    # Short rows are packed to a 4096-element tile while the grid stays large.
    assert norm_config(131072, 128) == (False, 32, 1, 128, 4, 0, 0, 0, 0)
    assert norm_config(16384, 512) == (False, 8, 1, 512, 4, 0, 0, 0, 0)
    assert norm_config(16384, 1536) == (False, 2, 1, 2048, 4, 0, 0, 0, 0)
    assert norm_config(4096, 4544) == (False, 1, 1, 8192, 8, 0, 0, 0, 0)
    # With NormTuning.split_rows, a row whose length is not a power of two takes two tiles
    # (1024 + 512, not 2048 with 512 masked), warps for at most 32 a thread ...
    split = norm_mod.TUNING._replace(split_rows=True)
    assert norm_config(16384, 1536, tuning=split) == (False, 2, 1, 1024, 4, 0, 0, 0, 512)
    assert norm_config(4096, 4544, tuning=split) == (False, 1, 1, 4096, 8, 0, 0, 0, 512)
    assert norm_config(4, 16385, tuning=split) == (False, 1, 1, 16384, 32, 0, 0, 0, 1)
    # ... not where the two would not be smaller (3072 + 1024 is no better than 4096)
    assert norm_config(8192, 3584, tuning=split)[8] == 0
    assert norm_config(8192, 7168, tuning=split)[8] == 0
    # ... and not for LayerNorm's one-reduction statistics
    assert norm_config(4096, 4544, tuning=split._replace(ln_stats="shifted"))[8] == 0
    assert norm_config(4096, 4544, rms=True, in_bytes=2,
                       tuning=split._replace(ln_stats="shifted", rms_reread_narrow_block=0)
                       )[8] == 512
    # Smaller grids: fewer elements a thread, so that the few programs finish sooner.
    assert norm_config(256, 4096) == (False, 1, 1, 4096, 8, 0, 0, 0, 0)
    assert norm_config(64, 128) == (False, 1, 1, 128, 1, 0, 0, 0, 0)
    assert norm_config(1, 4096) == (False, 1, 1, 4096, 16, 0, 0, 0, 0)
    assert norm_config(32, 8192) == (False, 1, 1, 8192, 32, 0, 0, 0, 0)
    assert norm_config(1, 16384) == (False, 1, 1, 16384, 32, 0, 0, 0, 0)
    # Rows of 32768 (LayerNorm of [2, 16384]) still in registers: 32 warps, 32 a thread.
    assert norm_config(2048, 32768) == (False, 1, 1, 32768, 32, 0, 0, 0, 0)
    assert norm_config(4, 16385) == (False, 1, 1, 32768, 32, 0, 0, 0, 0)
    # Longer than the register block: the stream kernel, one program a row up to one per
    # SM, 32 KiB chunks at 32 warps; without it (a residual), the looped kernel.
    assert MAX_REGISTER_BLOCK == 32768
    assert norm_config(4, 32768).looped is False
    assert norm_config(4, 32769) == (True, 1, 1, 8192, 32, 0, 4, 0, 0)
    assert norm_config(4, 32769, in_bytes=2) == (True, 1, 1, 16384, 32, 0, 4, 0, 0)
    assert norm_config(640, 196608) == (True, 1, 1, 8192, 32, 0, 132, 0, 0)
    assert norm_config(4, 32769, stream=False) == (True, 1, 1, 4096, 8, 0, 0, 0, 0)
    # Rows of 16385 to 32768 of 16-bit inputs on a grid of a row per SM or more: bfloat16
    # ones take the packed kernel (two programs of 32 warps an SM, at most one a row), the
    # others (float16; packed=False) the stream kernel; 32-bit ones, and fewer rows, stay in
    # registers.
    assert norm_config(2048, 32768, in_bytes=2) == (False, 1, 1, 32768, 32, 0, 0, 264, 0)
    assert norm_config(200, 20000, in_bytes=2) == (False, 1, 1, 32768, 32, 0, 0, 200, 0)
    assert norm_config(2048, 32768, in_bytes=2, packed=False) == (True, 1, 1, 16384, 32, 0,
                                                                  132, 0, 0)
    assert norm_config(132, 20000, in_bytes=2, packed=False) == (True, 1, 1, 16384, 32, 0,
                                                                 132, 0, 0)
    for kw in ({}, {"packed": False}):
        assert norm_config(131, 32768, in_bytes=2, **kw)[6:] == (0, 0, 0)
        assert norm_config(2048, 16384, in_bytes=2, **kw)[6:] == (0, 0, 0)
    assert norm_config(2048, 32768, in_bytes=4).packed == 0
    assert norm_config(2048, 32768, in_bytes=2, stream=False, packed=False).stream == 0


# ============================================================================ ops

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_op_matches_torch(dtype):
    x = _randn(2, 3, 4, 6, dtype=dtype)
    w = _randn(4, 6, dtype=dtype, seed=1)
    for op, args, want in (
        (RMSNormFwdOp([4, 6], eps=1e-6), (x, w), F.rms_norm(x, (4, 6), w, 1e-6)),
        (RMSNormFwdOp((6,)), (x,), F.rms_norm(x, (6,))),
    ):
        y = op(*args)
        assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
        _close(y, want, dtype)
    assert op.last_call.indices["eps_value"] == DEFAULT_RMS_EPS
    assert op.last_call.indices["B"] == (2, 3, 4) and op.last_call.indices["R"] == 24
    # a transposed input: read through its strides, the output is contiguous
    xt = _randn(6, 5, dtype=dtype).t()
    y = op(xt)
    assert y.is_contiguous() and y.shape == (5, 6)
    _close(y, F.rms_norm(xt, (6,)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm_op_matches_torch(dtype):
    x = _randn(5, 33, dtype=dtype, shift=3.0)
    w, b = _randn(33, dtype=dtype, seed=1), _randn(33, dtype=dtype, seed=2)
    op = LayerNormFwdOp([33], eps=1e-6)
    for args in ((x,), (x, w), (x, None, b), (x, w, b)):
        full = list(args) + [None] * (3 - len(args))
        _close(op(*args), F.layer_norm(x, (33,), full[1], full[2], 1e-6), dtype)
    _close(LayerNormFwdOp([33])(x, w, b), F.layer_norm(x, (33,), w, b), dtype)


def test_fused_add_rms_norm_op_writes_both_in_place():
    x, r = _randn(2, 5, 48, dtype=torch.bfloat16), _randn(2, 5, 48, dtype=torch.bfloat16, seed=1)
    w = _randn(48, dtype=torch.bfloat16, seed=2)
    x0, r0, w0 = x.clone(), r.clone(), w.clone()
    xp, rp = x.data_ptr(), r.data_ptr()
    op = FusedAddRMSNormFwdOp(1e-6)
    assert op(x, r, w) is None                       # as vLLM: nothing returned
    assert x.data_ptr() == xp and r.data_ptr() == rp  # the caller's tensors were written
    assert torch.equal(w, w0)
    _assert_sum(r, x0 + r0)
    _close(x, F.rms_norm(x0 + r0, (48,), w, 1e-6), torch.bfloat16)
    rec = op.last_call
    assert rec.written == ("input", "residual")
    assert rec.traffic == {"input": (1, 1), "residual": (1, 1), "weight": (1, 0)}
    # flops 5 per element + 3 per row; bytes: input and residual read and written, weight read
    assert op.eval_roofline() == (5 * 10 * 48 + 3 * 10, (4 * 10 * 48 + 48) * 2)


def test_rooflines():
    op = RMSNormFwdOp([64])
    op(torch.ones(3, 64), torch.ones(64))
    assert op.eval_roofline() == (3 * 64 * 4 + 3 * 3, (2 * 3 * 64 + 64) * 4)
    op(torch.ones(3, 64))
    assert op.eval_roofline() == (3 * 64 * 3 + 3 * 3, 2 * 3 * 64 * 4)
    ln = LayerNormFwdOp([64])
    ln(torch.ones(2, 64, dtype=torch.float16), torch.ones(64, dtype=torch.float16),
       torch.ones(64, dtype=torch.float16))
    assert ln.eval_roofline() == (2 * 64 * 7 + 4 * 2, (2 * 2 * 64 + 2 * 64) * 2)


def test_empty_calls_run_no_kernel():
    y = RMSNormFwdOp([8])(torch.empty(0, 8))
    assert y.shape == (0, 8)
    y = LayerNormFwdOp([0])(torch.empty(3, 0), torch.empty(0), torch.empty(0))
    assert y.shape == (3, 0)
    x, r = torch.empty(0, 8), torch.empty(0, 8)
    assert FusedAddRMSNormFwdOp(1e-6)(x, r, torch.ones(8)) is None


def test_reference_kernels_serve_other_devices():
    """The torch references are the general fallback: other devices dispatch to them, and
    their forward computes the same results."""
    op = RMSNormFwdOp([8])
    call = NormCall("float32", (8,), DEFAULT_RMS_EPS, device=torch.device("mps"))
    assert op.key_for("rms_norm", call) == "rms_norm_reference"
    cuda = NormCall("bfloat16", (8,), 1e-6, device=torch.device("cuda"))
    assert op.key_for("rms_norm", cuda, arch=90) == "rms_norm_triton"
    fa = FusedAddRMSNormFwdOp(1e-6)
    fcall = FusedAddRMSNormCall("bfloat16", 8, 1e-6, device=torch.device("cuda"))
    assert fa.key_for("fused_add_rms_norm", fcall, arch=90) == "fused_add_rms_norm_triton"
    x, w, b = _randn(3, 8), _randn(8, seed=1), _randn(8, seed=2)
    out = torch.empty_like(x)
    RMSNormReferenceKernel(NormCall("float32", (8,), 1e-6)).forward(x, w, out)
    torch.testing.assert_close(out, F.rms_norm(x, (8,), w, 1e-6))
    LayerNormReferenceKernel(NormCall("float32", (8,), 1e-5)).forward(x, w, b, out)
    torch.testing.assert_close(out, F.layer_norm(x, (8,), w, b, 1e-5))
    r, x0 = _randn(3, 8, seed=3), x.clone()
    r0 = r.clone()
    FusedAddRMSNormReferenceKernel(FusedAddRMSNormCall("float32", 8, 1e-6)).forward(x, r, w)
    torch.testing.assert_close(r, x0 + r0)
    torch.testing.assert_close(x, F.rms_norm(x0 + r0, (8,), w, 1e-6))


# ============================================================================ spec violations

def test_construction_errors():
    with pytest.raises(SignatureError) as ei:
        RMSNormFwdOp([])
    expect_error(ei, SignatureError, "RMSNormFwdOp", "signature.shape_rules.0",
                 "refinement `len(normalized_shape) >= 1` does not hold with normalized_shape=[]")
    with pytest.raises(SignatureError) as ei:
        LayerNormFwdOp([4, -1])
    expect_error(ei, SignatureError, "LayerNormFwdOp", "signature.shape_rules.1",
                 "refinement `all(n >= 0 for n in normalized_shape)`")
    for bad, shown in (("abc", "'abc'"), (4, "4"), ([4.0], "[4.0]")):
        with pytest.raises(SignatureTypeError) as ei:
            RMSNormFwdOp(bad)
        expect_error(ei, SignatureTypeError, "RMSNormFwdOp", "signature.params.normalized_shape",
                     "parameter `normalized_shape` has type `list[int] | tuple[int, ...]`",
                     f"got {shown}")
    with pytest.raises(SignatureTypeError) as ei:
        RMSNormFwdOp([4], eps="x")
    expect_error(ei, SignatureTypeError, "RMSNormFwdOp", "signature.params.eps",
                 "parameter `eps` has type `float | None`", "got 'x'")
    with pytest.raises(SignatureTypeError) as ei:
        LayerNormFwdOp([4], eps=None)
    expect_error(ei, SignatureTypeError, "LayerNormFwdOp", "signature.params.eps",
                 "parameter `eps` has type `float`", "got None")
    with pytest.raises(TypeError, match="epsilon"):
        FusedAddRMSNormFwdOp()


def test_rms_norm_call_errors():
    op = RMSNormFwdOp([2, 4])
    cases_ = [
        ((torch.randn(3, 2, 5),), "signature.inputs.input.shape",
         ["input input, *normalized_shape of [*B, *normalized_shape]",
          "expected normalized_shape = (2, 4), got (2, 5)"]),
        ((torch.randn(4),), "signature.inputs.input.shape",
         ["input input, the rank of [*B, *normalized_shape]", "expected at least 2, got 1"]),
        ((torch.randn(3, 2, 4, dtype=torch.float64),), "signature.inputs.input.dtype",
         ["input input, dtype T", "expected bfloat16 | float16 | float32, got float64"]),
        ((torch.randn(3, 2, 4), torch.randn(8)), "signature.inputs.weight.shape",
         ["input weight, the rank of [*normalized_shape]", "expected 2, got 1"]),
        ((torch.randn(3, 2, 4), torch.randn(2, 3)), "signature.inputs.weight.shape",
         ["expected normalized_shape = (2, 4), got (2, 3)"]),
        ((torch.randn(3, 2, 4), torch.randn(2, 4, dtype=torch.float16)),
         "signature.inputs.weight.dtype",
         ["input weight, dtype T", "expected T = float32 (from input input), got float16"]),
    ]
    for args, path, fragments in cases_:
        with pytest.raises(SignatureError) as ei:
            op(*args)
        expect_error(ei, SignatureError, "RMSNormFwdOp", path, *fragments)
    with pytest.raises(SignatureTypeError) as ei:
        op([1.0, 2.0])
    expect_error(ei, SignatureTypeError, "RMSNormFwdOp", "signature.inputs.input",
                 "input input: expected a torch.Tensor, got list")


def test_layer_norm_call_errors():
    op = LayerNormFwdOp([8])
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    with pytest.raises(SignatureError) as ei:
        op(x, None, torch.randn(7, dtype=torch.bfloat16))
    expect_error(ei, SignatureError, "LayerNormFwdOp", "signature.inputs.bias.shape",
                 "input bias, *normalized_shape of [*normalized_shape]",
                 "expected normalized_shape = (8,), got (7,)")
    with pytest.raises(SignatureError) as ei:
        op(x, torch.ones(8, dtype=torch.bfloat16), torch.ones(8))
    expect_error(ei, SignatureError, "LayerNormFwdOp", "signature.inputs.bias.dtype",
                 "expected T = bfloat16 (from input input), got float32")


def test_fused_call_errors_leave_the_tensors_unwritten():
    op = FusedAddRMSNormFwdOp(1e-6)
    x, r, w = torch.randn(2, 8), torch.randn(2, 8), torch.randn(8)
    x0, r0 = x.clone(), r.clone()
    bad = [
        ((x, torch.randn(3, 8), w), SignatureError, "signature.inputs.residual.shape",
         ["input residual, *B of [*B, D]", "expected B = (2,) (from input input), got (3,)"]),
        ((x, r, torch.randn(9)), SignatureError, "signature.inputs.weight.shape",
         ["input weight, axis 0 of [D]", "expected D = 8 (from input input), got 9"]),
        ((x, r.half(), w), SignatureError, "signature.inputs.residual.dtype",
         ["expected T = float32 (from input input), got float16"]),
        ((torch.randn(()), torch.randn(()), w), SignatureError, "signature.inputs.input.shape",
         ["input input, the rank of [*B, D]", "expected at least 1, got 0"]),
        ((x, None, w), SignatureTypeError, "signature.inputs.residual",
         ["input residual: expected a torch.Tensor, got NoneType"]),
    ]
    for args, exc, path, fragments in bad:
        with pytest.raises(exc) as ei:
            op(*args)
        expect_error(ei, exc, "FusedAddRMSNormFwdOp", path, *fragments)
    assert torch.equal(x, x0) and torch.equal(r, r0)


# ============================================================================ compile boundary

def test_operator_names_and_schemas():
    assert RMSNormFwdOp.compile_op_names == ("opspec::norm_rms_norm_fwd_op",)
    assert LayerNormFwdOp.compile_op_names == ("opspec::norm_layer_norm_fwd_op",)
    assert FusedAddRMSNormFwdOp.compile_op_names == (
        "opspec::norm_fused_add_rms_norm_fwd_op_writes_input_writes_residual",)
    assert str(torch.ops.opspec.norm_rms_norm_fwd_op.default._schema) == \
        "opspec::norm_rms_norm_fwd_op(Tensor input, Tensor? weight, str key) -> Tensor"
    assert str(torch.ops.opspec.norm_fused_add_rms_norm_fwd_op_writes_input_writes_residual
               .default._schema) == (
        "opspec::norm_fused_add_rms_norm_fwd_op_writes_input_writes_residual(Tensor(a!) input, "
        "Tensor(b!) residual, Tensor weight, str key) -> ()")


def test_opcheck_every_operator():
    rms = RMSNormFwdOp([6], eps=1e-6)
    x = torch.randn(3, 6)
    for w in (torch.randn(6), None):
        torch.library.opcheck(torch.ops.opspec.norm_rms_norm_fwd_op.default,
                              (x, w, rms._opspec_key))
    ln = LayerNormFwdOp([2, 3])
    xh = torch.randn(4, 2, 3).half()
    torch.library.opcheck(torch.ops.opspec.norm_layer_norm_fwd_op.default,
                          (xh, torch.randn(2, 3).half(), None, ln._opspec_key))
    fa = FusedAddRMSNormFwdOp(1e-5)
    torch.library.opcheck(
        torch.ops.opspec.norm_fused_add_rms_norm_fwd_op_writes_input_writes_residual.default,
        (torch.randn(2, 5), torch.randn(2, 5), torch.randn(5), fa._opspec_key))


def test_cold_compile_fullgraph():
    """The fused op writes its inputs inside a compiled graph, and RMSNorm reads the result:
    one graph, both operators, the caller's tensors written."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    fa, rms = FusedAddRMSNormFwdOp(1e-6), RMSNormFwdOp([8])
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda x, r, w: (fa(x, r, w), rms(x, w) * 2)[1], backend=backend,
                       fullgraph=True)
    x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8)
    x0, r0 = x.clone(), r.clone()
    y = fn(x, r, w)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("norm_fused_add_rms_norm_fwd_op_writes_input_writes_residual" in t
               for t in targets), targets
    assert any("norm_rms_norm_fwd_op" in t for t in targets), targets
    torch.testing.assert_close(r, x0 + r0)
    want = F.rms_norm(x0 + r0, (8,), w, 1e-6)
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(y, F.rms_norm(want, (8,), w) * 2)


# ============================================================================ workloads

_OPS = (RMSNormFwdOp, LayerNormFwdOp, FusedAddRMSNormFwdOp)


def _traffic_bytes(cls, inputs, some) -> int:
    """The derived bytes of a case, from its meta tensors: inputs read, the output (or the
    written inputs) written."""
    size = lambda t: t.numel() * t.element_size()
    read = sum(size(t) for t in inputs if t is not None)
    return read + (size(inputs[0]) + size(inputs[1]) if cls is FusedAddRMSNormFwdOp
                   else size(inputs[0]))


@pytest.mark.parametrize("cls", _OPS, ids=lambda c: c.__name__)
def test_workload_cases_instantiate(cls):
    """Every case builds on the meta device (no data) and passes the op's checks with the
    row's values; each op has a row moving at least 256 MiB (the bandwidth target)."""
    spec = cls._info().spec
    largest = 0
    all_cases = cases(cls)
    assert len({c.id for c in all_cases}) == len(all_cases)
    for case in all_cases:
        op = case.construct(cls)
        inputs = case.inputs("meta")
        ind = op.check_call(*inputs)
        for name, v in case.values.items():
            if name in spec.forall:
                assert ind[name] == v, (case.id, name, ind)
        assert {ind[n] for n in case.dtypes} == set(case.dtypes.values())
        largest = max(largest, _traffic_bytes(cls, inputs, case.some))
    assert largest >= 256 * 2**20, largest


def test_optional_inputs_are_passed_and_omitted_by_some_row():
    some = {c.label: set(c.some) for c in cases(RMSNormFwdOp)}
    assert any("weight" in s for s in some.values()) and any(not s for s in some.values())
    ln = [set(c.some) for c in cases(LayerNormFwdOp)]
    for name in ("weight", "bias"):
        assert any(name in s for s in ln) and any(name not in s for s in ln)
