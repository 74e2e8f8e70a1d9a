"""The W4A16 prefill kernel's two-pass form: the dequantization kernel
(opspec.kernels.quant_dequant) against the spec's formula, and two passes (dequantize a slice
of weight rows, then the GEMM kernel) against the torch reference: group sizes, scale dtypes,
strided operands, several slices of a bounded scratch matrix, the table's choice by M, and the
errors. On the CPU through Triton's interpreter (bfloat16 GEMMs widened to float32 there, as
the fused kernel's are); on the GPU where CUDA is available.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import opspec.kernels.quant_gemm as Q
from opspec.kernels.quant_dequant import dequant_supported, dequantize_int4_triton
from opspec.kernels.quant_gemm import (
    dequantize_int4, gemm_w4a16_reference, pack_int4, prefill_config_for, w4a16_prefill_triton,
)

import test_quant_gemm as base
from test_quant_gemm import BF16, DEV, F16, F32, TOL

_on_device = base._on_device   # the autouse fixture that makes DEV the default device

TWO_PASS = prefill_config_for(1, 1, 128, 128, two_pass=True)


def _operands(M, N, K, g, dtype=F16, sdtype=None, seed=0):
    """x, packed weight (every nibble value), scales > 0 and fractional zero points."""
    gen = torch.Generator().manual_seed(seed)
    cpu = dict(generator=gen, device="cpu")
    span = torch.tensor([0.1, 15.0], device="cpu")[:, None, None]
    s, z = torch.rand(2, N, K // g, **cpu) * span
    return (torch.randn(M, K, **cpu).to(DEV, dtype),
            pack_int4(torch.randint(0, 16, (N, K), dtype=torch.uint8, **cpu)).to(DEV),
            (s + 0.01).to(DEV, sdtype or dtype), z.to(DEV, sdtype or dtype))


def _formula(p, s, z, g, dtype):
    """The spec's dequantization in float32, rounded once to ``dtype``."""
    return dequantize_int4(p, s.float(), z.float(), g).to(dtype)


def _assert_dequantized(got, p, s, z, g):
    want = _formula(p, s, z, g, got.dtype)
    if got.dtype == BF16 and DEV.type == "cpu":
        # Triton's interpreter rounds float32 to bfloat16 toward zero, the GPU to nearest:
        # within one bfloat16 step of the float32 value and no farther from zero than it
        want32 = _formula(p, s, z, g, F32)
        step = want32.abs() * 2.0**-7
        assert ((got.float() - want32).abs() <= step).all()
        assert (got.float().abs() <= want32.abs()).all()
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("g", [2, 32, 64, 128, 256])
@pytest.mark.parametrize("dtype,sdtype", [(F16, F16), (F32, F32), (BF16, BF16), (F16, F32)],
                         ids=str)
def test_dequantize_matches_the_formula(g, dtype, sdtype):
    # 19 rows (a partial block of 8), 5 groups (a partial block of groups)
    N, K = 19, 5 * g
    _, p, s, z = _operands(1, N, K, g, F16, sdtype, seed=g)
    out = torch.empty(N, K, dtype=dtype)
    assert dequantize_int4_triton(p, s, z, g, out) is out
    _assert_dequantized(out, p, s, z, g)


def test_dequantize_strided_operands():
    g, N, K = 32, 12, 256
    _, p, s, z = _operands(1, N, K, g, F16, seed=3)
    pw = torch.zeros(N, K, dtype=torch.uint8)[:, ::2]          # row stride K, column stride 2
    pw.copy_(p)
    st_ = torch.empty(K // g, N, dtype=F16).t()                 # scales column-major
    st_.copy_(s)
    out = torch.full((K, N), 7.0, dtype=F16).t()                # a transposed output
    dequantize_int4_triton(pw, st_, z, g, out)
    _assert_dequantized(out, p, s, z, g)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 20), groups=st.integers(1, 6), log_gb=st.integers(0, 6),
       seed=st.integers(0, 2**16))
def test_dequantize_property(n, groups, log_gb, seed):
    """Any row count, group count and 2^i-byte group: exactly the formula in float16."""
    g = 2 << log_gb
    _, p, s, z = _operands(1, n, groups * g, g, F16, seed=seed)
    out = torch.empty(n, groups * g, dtype=F16)
    dequantize_int4_triton(p, s, z, g, out)
    _assert_dequantized(out, p, s, z, g)


def test_dequantize_rejects_bad_arguments():
    assert [g for g in range(1, 40) if dequant_supported(g)] == [2, 4, 8, 16, 32]
    _, p, s, z = _operands(1, 4, 96, 96, F16)
    with pytest.raises(ValueError, match=r"group of 2\^i bytes, got group_size = 96"):
        dequantize_int4_triton(p, s, z, 96, torch.empty(4, 96, dtype=F16))
    _, p, s, z = _operands(1, 4, 64, 32, F16)
    want = (r"out \[4, 32\] needs packed_weight \[4, 16\] and K a multiple of "
            r"group_size = 32; got packed_weight \[4, 32\]")
    with pytest.raises(ValueError, match=want):
        dequantize_int4_triton(p, s, z, 32, torch.empty(4, 32, dtype=F16))


def _want(x, p, s, z, g):
    return gemm_w4a16_reference(x.double(), p, s.double(), z.double(), g)


@pytest.mark.parametrize("dtype,sdtype", [(F16, F16), (BF16, BF16), (F16, F32)], ids=str)
@pytest.mark.parametrize("shape", [(20, 48, 256, 128), (33, 40, 192, 64), (5, 24, 96, 32)],
                         ids=str)
def test_two_pass_matches_reference(shape, dtype, sdtype):
    M, N, K, g = shape
    x, p, s, z = _operands(M, N, K, g, dtype, sdtype, seed=M)
    out = torch.empty(M, N, dtype=dtype)
    assert w4a16_prefill_triton(x, p, s, z, g, out, config=TWO_PASS) is out
    torch.testing.assert_close(out.double(), _want(x, p, s, z, g), **TOL[dtype])


def test_two_pass_slices_and_strides(monkeypatch):
    """A scratch bound of one slice's worth of rows: N = 600 runs as 256 + 256 + 88 rows,
    each written into its own columns of a transposed out, from a strided x."""
    monkeypatch.setattr(Q, "_TWO_PASS_SCRATCH_BYTES", 256 * 128 * 2)
    calls = []
    real = Q.dequantize_int4_triton
    monkeypatch.setattr(Q, "dequantize_int4_triton",
                        lambda p, *a: calls.append(p.shape[0]) or real(p, *a))
    M, N, K, g = 9, 600, 128, 32
    x, p, s, z = _operands(M, N, K, g, F16, seed=11)
    xs = torch.zeros(M, 2 * K, dtype=F16)[:, ::2]
    xs.copy_(x)
    out = torch.empty(N, M, dtype=F16).t()
    w4a16_prefill_triton(xs, p, s, z, g, out, config=TWO_PASS)
    assert calls == [256, 256, 88]
    torch.testing.assert_close(out.double(), _want(x, p, s, z, g), **TOL[F16])


def test_two_pass_choice_and_errors():
    # the table: two passes from 512 tokens where the group is 2^i bytes, else the fused tiles
    assert prefill_config_for(4096, 28672, 8192, 128).two_pass
    assert prefill_config_for(512, 14336, 4096, 128).two_pass
    assert not prefill_config_for(511, 14336, 4096, 128).two_pass
    assert not prefill_config_for(4096, 4096, 4104, 24).two_pass     # 12-byte groups
    fused = prefill_config_for(4096, 28672, 8192, 128, two_pass=False)
    assert fused == (256, 128, 64, 8, 8, 3, False, True, False)
    x, p, s, z = _operands(4, 8, 48, 24, F16)
    with pytest.raises(ValueError, match="two-pass prefill needs a group of 2\\^i bytes, "
                                         "got group_size = 24"):
        w4a16_prefill_triton(x, p, s, z, 24, torch.empty(4, 8, dtype=F16), config=TWO_PASS)


_BUILD_SCRIPT = """
import json, sys
from sm90_build import build, strip_hints
from opspec.kernels.quant_dequant import _dequant_kernel, _ROWS, _WARPS
out = {}
for odt in ("bf16", "fp16", "fp32"):
    b = build(_dequant_kernel,
              dict(w_ptr="*u8", s_ptr="*bf16", z_ptr="*bf16", out_ptr="*" + odt, N=28672, G=64,
                   stride_wn=4096, stride_wk=1, stride_sn=64, stride_sg=1, stride_zn=64,
                   stride_zg=1, stride_on=8192, stride_ok=1),
              dict(ROWS=_ROWS, GROUPS=8, GB=64, USE_INT64=False), _WARPS)
    out[odt] = dict(local=b.local, ld=sorted(set(map(strip_hints, b.loads))),
                    st=sorted(set(map(strip_hints, b.stores))),
                    i2f=len([ln for ln in b.sass.splitlines() if "I2F" in ln]))
json.dump(out, sys.stdout)
"""


def test_dequantize_builds_for_sm90():
    """The dequantization kernel (a streaming pass, 4 bytes written a byte read at 16 bits)
    compiles for sm_90 with no spills, no int-to-float conversion, and the packed weight
    read and the output written in 16-byte vectors (the scales: one 2-byte load a group)."""
    from sm90_build import run_script

    built = run_script(_BUILD_SCRIPT)
    for odt, k in built.items():
        assert k["local"] == 0 and k["i2f"] == 0, (odt, k)
        assert k["ld"] == ["ld.global.b16", "ld.global.v4.b32"], (odt, k)
        assert k["st"] == ["st.global.v4.b32"], (odt, k)


def test_op_takes_two_passes(monkeypatch):
    """Through the op (dispatch, custom-op boundary, opcheck): 512 tokens take two passes."""
    from opspec.ops import GemmW4A16FwdOp

    taken = []
    real = Q._two_pass
    monkeypatch.setattr(Q, "_two_pass", lambda *a: taken.append(a[0].shape) or real(*a))
    op = GemmW4A16FwdOp(32)
    x, p, s, z = _operands(512, 24, 64, 32, F16, seed=5)
    y = op(x, p, s, z)
    assert taken == [(512, 64)] and y.shape == (512, 24) and y.dtype == F16
    torch.testing.assert_close(y.double(), _want(x, p, s, z, 32), **TOL[F16])
    torch.library.opcheck(torch.ops.opspec.quant_gemm_gemm_w4_a16_fwd_op.default,
                          (x, p, s, z, op._opspec_key))
