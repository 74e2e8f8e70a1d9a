"""ReluFwdOp, SiluFwdOp and GeluFwdOp: the Triton kernels against the torch reference (on
CPU through Triton's interpreter, which tests/conftest.py turns on without CUDA), the ops
end to end (results, in-place effects, refused calls), their compile-boundary operators,
one cold `torch.compile(fullgraph=True)`, and their workload rows.

Sizes are small: the interpreter runs each program through numpy.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opspec.kernels.activation import (
    ACTIVATION_TABLE, ACTIVATIONS, StreamConfig, activation_config, activation_reference,
    activation_triton, merge_dims, pick_config, stream_grid,
)
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.ops import GeluFwdOp, ReluFwdOp, SiluFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
}
ACTS = list(ACTIVATIONS)
TORCH_FN = {
    "relu": F.relu,
    "silu": F.silu,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}

pytestmark = [
    pytest.mark.skipif(not (TRITON_INTERPRETED or torch.cuda.is_available()),
                       reason="the Triton kernels need CUDA or TRITON_INTERPRET=1"),
    # the interpreter evaluates exp in numpy, which warns where exp(-x) overflows to inf
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _x(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 3).to(dtype).to(DEV)


def _check(got, x, act):
    torch.testing.assert_close(got, activation_reference(x, act), **TOL[x.dtype])


# ============================================================================ reference

def test_reference_is_the_torch_function():
    x = _x(4, 9)
    for act in ACTS:
        torch.testing.assert_close(activation_reference(x, act), TORCH_FN[act](x))
    xb = x.to(torch.bfloat16)
    got = activation_reference(xb, "gelu_tanh")
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, F.gelu(xb.float(), approximate="tanh").bfloat16())
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        activation_reference(x, "swish")


# ============================================================================ Triton kernels

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", ACTS)
def test_flat_kernel_matches_reference(act, dtype):
    # odd, non-power-of-2 and multi-block lengths, as one launch each; 4096 fills its
    # blocks exactly (the unmasked EVEN path)
    for n in (1, 3, 17, 1000, 5000, 4096):
        x = _x(n, dtype=dtype, seed=n)
        out = torch.empty_like(x)
        assert activation_triton(x, out, act) is out
        _check(out, x, act)


@pytest.mark.parametrize("act", ACTS)
def test_in_place_writes_the_input(act):
    x = _x(7, 33, dtype=torch.float16)
    want = activation_reference(x, act)
    assert activation_triton(x, x, act) is x
    torch.testing.assert_close(x, want, **TOL[torch.float16])


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_non_contiguous_inputs(act):
    big = _x(12, 40, seed=3)
    views = {
        "transposed (dense, flat path)": big.t(),
        "column slice (2-D strided)": big[:, 5:30],
        "every other row and column": big[::2, ::3],
        "broadcast (stride 0)": big[0].expand(6, 40),
        "3-D, not mergeable (copy)": _x(4, 6, 10, seed=4).permute(1, 0, 2)[:, :, 1:9],
    }
    for name, x in views.items():
        out = torch.empty_like(x)
        activation_triton(x, out, act)
        torch.testing.assert_close(out, activation_reference(x, act), **TOL[x.dtype], msg=name)


def test_transposed_output_keeps_the_input_layout():
    # empty_like keeps a dense layout, so the flat kernel walks both in memory order
    x = _x(5, 8, seed=5).t()
    out = torch.empty_like(x)
    assert out.stride() == x.stride()
    activation_triton(x, out, "relu")
    assert torch.equal(out, F.relu(x))
    # a contiguous out for a transposed x goes through the strided kernel
    out2 = torch.empty(x.shape, device=DEV)
    activation_triton(x, out2, "relu")
    assert torch.equal(out2, F.relu(x))


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_in_place_on_strided_views(act):
    base = _x(9, 20, seed=6)
    keep = base.clone()
    view = base[:, 3:13]                  # 2-D strided, written through its strides
    want = activation_reference(view, act)
    activation_triton(view, view, act)
    torch.testing.assert_close(view, want, **TOL[torch.float32])
    # the columns outside the view are untouched
    assert torch.equal(base[:, :3], keep[:, :3]) and torch.equal(base[:, 13:], keep[:, 13:])
    base3 = _x(4, 6, 10, seed=7)
    view3 = base3.permute(1, 0, 2)[:, :, 1:9]   # not mergeable: computed on a copy, copied back
    want3 = activation_reference(view3, act)
    activation_triton(view3, view3, act)
    torch.testing.assert_close(view3, want3, **TOL[torch.float32])


def test_int64_offsets(monkeypatch):
    # Tensors past 2**31 elements do not fit here: lower the limit so that the int64 paths
    # of both kernels run on small tensors and must give the same results.
    import opspec.kernels.activation as A
    monkeypatch.setattr(A, "_INT32_LIMIT", 100)
    x = _x(1000, seed=9)
    out = torch.empty_like(x)
    activation_triton(x, out, "gelu")
    _check(out, x, "gelu")
    xs = _x(30, 40, seed=10)[:, 3:33]
    outs = torch.empty_like(xs)
    activation_triton(xs, outs, "silu")
    _check(outs, xs, "silu")


def test_in_place_on_a_broadcast_tensor_is_refused():
    x = torch.zeros(3, device=DEV).expand(4, 3)
    with pytest.raises(RuntimeError, match="several elements share one memory location"):
        activation_triton(x, x, "silu")


@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0, 2)], ids=str)
def test_empty_tensors_launch_nothing(shape):
    x = torch.empty(shape, dtype=torch.float16, device=DEV)
    out = torch.empty_like(x)
    assert activation_triton(x, out, "gelu") is out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", ACTS)
def test_extreme_values(act, dtype):
    vals = [-3e4, -100.0, -20.0, -1.0, -0.0, 0.0, 1e-3, 1.0, 20.0, 100.0, 3e4]
    x = torch.tensor(vals, dtype=dtype, device=DEV)
    out = torch.empty_like(x)
    activation_triton(x, out, act)
    assert torch.isfinite(out.float()).all()
    _check(out, x, act)


def _float_range():
    """fp32 values over the whole range, both signs: a log sweep from the smallest
    subnormal to the largest finite, a dense sweep of [-12, 12], and the specials."""
    pos = torch.cat([torch.logspace(-45, 38.5, 4000, dtype=torch.float64),
                     torch.linspace(0, 12, 24001, dtype=torch.float64)]).float()
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                            3.4028235e38, -3.4028235e38, 1e-45, -1e-45, 1.17549435e-38])
    return torch.cat([pos, -pos, special])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_gelu_erf_accuracy_over_the_float_range():
    """The erf form (gelu_erf_fp32, not libdevice's erf) against torch in float64: within
    2e-6 * |x| (fp32 rounding and sm_90's approximate rsqrt / exp2; the form's own error
    in Phi is below 1e-8) for
    normal x, and torch's special values: +-0.0 keep their sign, +inf -> +inf, -inf and
    nan -> nan, large negative x -> -0.0 or a negative number below 1e-37 in magnitude."""
    x = _float_range()
    out = torch.empty_like(x, device=DEV)
    activation_triton(x.to(DEV), out, "gelu")
    out = out.cpu()
    ref = F.gelu(x.double())
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    fin = torch.isfinite(ref)
    assert torch.equal(out[~fin & ~torch.isnan(ref)], ref[~fin & ~torch.isnan(ref)].float())
    err = (out.double() - ref).abs()
    normal = fin & (x.abs() >= 1.17549435e-38)
    assert (err[normal] <= 2e-6 * x.double().abs()[normal]).all(), err[normal].max()
    assert (err[fin] <= 2e-6 * x.double().abs()[fin] + 1e-45).all()
    # signs: gelu(x) has x's sign (or is a zero of x's sign)
    nonnan = ~torch.isnan(out)
    assert torch.equal(torch.signbit(out[nonnan]), torch.signbit(x[nonnan]))
    # x below -14: exp(-x^2 / 2) underflows and the result is a zero of x's sign
    assert (out[(x < -14) & torch.isfinite(x)] == 0).all()
    # against torch's float32 result at the test tolerance
    want = F.gelu(x)
    both = torch.isfinite(want) & fin
    torch.testing.assert_close(out[both], want[both], **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gelu_erf_every_half_precision_value(dtype):
    """Every finite fp16 / bf16 value: the result is the correctly rounded gelu but for
    one unit in the last place, or 1e-6 * |x| in the far negative tail (x < -4, where
    gelu(x) < 1e-4 and the form keeps Phi within 1e-8 absolute but not relatively)."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = bits.view(dtype)
    x = x[torch.isfinite(x.float())]
    out = torch.empty_like(x, device=DEV)
    activation_triton(x.to(DEV), out, "gelu")
    out = out.cpu().float()
    want = F.gelu(x.double()).to(dtype).float()
    ulp = torch.where(want == 0, torch.zeros_like(want),
                      (want.abs().to(dtype).view(torch.int16) + 1).view(dtype).float()
                      - want.abs())
    tiny = torch.finfo(dtype).smallest_normal
    bound = torch.maximum(ulp, torch.full_like(ulp, tiny)) + 1e-6 * x.float().abs()
    assert ((out - want).abs() <= bound).all()


def test_relu_keeps_nan_and_zeroes_negative_zero_as_torch_on_cuda():
    """NaN passes through; -0.0 gives +0.0, as torch.relu on CUDA does (the kernel's
    device; torch's CPU kernel keeps -0.0, so the expectation is written out)."""
    x = torch.tensor([float("nan"), -0.0, 0.0, -2.0, 3.0, -float("inf")], device=DEV)
    out = torch.empty_like(x)
    activation_triton(x, out, "relu")
    assert torch.isnan(out[0])
    assert out[1:].tolist() == [0.0, 0.0, 0.0, 3.0, 0.0]
    assert not torch.signbit(out[1:]).any()
    if x.is_cuda:
        assert torch.equal(torch.signbit(out), torch.signbit(torch.relu(x)))


def test_rejects_bad_arguments():
    x = torch.zeros(2, 8, device=DEV)
    with pytest.raises(ValueError, match="unknown activation"):
        activation_triton(x, torch.empty_like(x), "tanh")
    with pytest.raises(ValueError, match="shape"):
        activation_triton(x, torch.empty(2, 7, device=DEV), "relu")
    with pytest.raises(TypeError, match="dtype"):
        activation_triton(x, torch.empty_like(x, dtype=torch.float16), "relu")


def test_block_choice():
    # large tensors: one 16-byte vector per thread on 8 warps
    assert activation_config(8192 * 14336, 2) == StreamConfig(2048, 8)
    assert activation_config(2048 * 16384, 4) == StreamConfig(1024, 8)
    # decode: one vector per thread on 4 warps, the streamed load marked evict_first
    assert activation_config(32 * 6400, 2) == StreamConfig(1024, 4, evict_first=True)
    assert activation_config(1, 2) == StreamConfig(1024, 4, evict_first=True)
    for eb, max_n, cfg in ACTIVATION_TABLE:
        assert eb in (0, 2, 4) and (max_n is None or max_n > 0)
        assert cfg.block & (cfg.block - 1) == 0 and cfg.num_warps in (1, 2, 4, 8, 16)
    for eb in (2, 4):                      # every size of every dtype has a row
        assert pick_config(ACTIVATION_TABLE, 2**40, eb)


def test_pick_config_and_stream_grid():
    table = ((2, 100, StreamConfig(64, 1)), (0, None, StreamConfig(128, 2)))
    assert pick_config(table, 100, 2) == StreamConfig(64, 1)
    assert pick_config(table, 101, 2) == StreamConfig(128, 2)
    assert pick_config(table, 5, 4) == StreamConfig(128, 2)
    with pytest.raises(LookupError):
        pick_config(table[:1], 101, 2)
    cpu = torch.device("cpu")              # off CUDA the SM count is the H200's, 132
    assert stream_grid(StreamConfig(64, 1), 1000, cpu) == (1000, False)
    assert stream_grid(StreamConfig(64, 1, persist=2), 1000, cpu) == (264, True)
    # no more programs than tiles: then one program per tile, no loop
    assert stream_grid(StreamConfig(64, 1, persist=2), 200, cpu) == (200, False)


# Layouts of the flat kernel besides the table's, through the real launcher: a small
# block, a persistent grid with the evict_first hint, and the table itself. The SM count
# is 2 in these tests (`few_sms`), so that a persistent grid (1 or 3 programs per SM)
# loops over many tiles at interpreter sizes.
VARIANTS = [None, StreamConfig(128, 1), StreamConfig(64, 2, persist=1, evict_first=True),
            StreamConfig(128, 4, persist=3, evict_first=True)]
VARIANT_IDS = ["table", "block128", "persist1", "persist3"]


@pytest.fixture
def few_sms(monkeypatch):
    import opspec.kernels.activation as A
    monkeypatch.setattr(A, "sm_count", lambda device: 2)


@pytest.mark.usefixtures("few_sms")
@pytest.mark.parametrize("config", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_variants_match_reference(dtype, config):
    # odd lengths (the masked last tile, n not a multiple of 16), exact multiples, one
    for n in (1, 7, 1000, 2048, 2500):
        x = _x(n, dtype=dtype, seed=n)
        for act in ACTS:
            out = torch.empty_like(x)
            assert activation_triton(x, out, act, config) is out
            _check(out, x, act)


@pytest.mark.usefixtures("few_sms")
@pytest.mark.parametrize("config", VARIANTS, ids=VARIANT_IDS)
def test_variants_in_place_dense_strided_empty(config):
    x = _x(50, 61, dtype=torch.bfloat16, seed=21)
    want = activation_reference(x, "silu")
    activation_triton(x, x, "silu", config)                 # in place, flat
    torch.testing.assert_close(x, want, **TOL[torch.bfloat16])
    t = _x(61, 50, seed=22).t()                             # dense, transposed: flat
    out = torch.empty_like(t)
    activation_triton(t, out, "gelu", config)
    _check(out, t, "gelu")
    s = _x(30, 70, dtype=torch.float16, seed=23)[:, 3:66]   # strided: the 2-D kernel
    outs = torch.empty_like(s)
    activation_triton(s, outs, "relu", config)
    _check(outs, s, "relu")
    e = torch.empty(0, 3, device=DEV)
    assert activation_triton(e, torch.empty_like(e), "silu", config).shape == (0, 3)


@pytest.mark.usefixtures("few_sms")
def test_variants_int64_offsets(monkeypatch):
    import opspec.kernels.activation as A
    monkeypatch.setattr(A, "_INT32_LIMIT", 100)
    x = _x(3001, seed=24)
    for config in VARIANTS:
        out = torch.empty_like(x)
        activation_triton(x, out, "gelu_tanh", config)
        _check(out, x, "gelu_tanh")


_COMPILE_SCRIPT = r"""
import json, sys
import triton
import opspec.kernels.activation as A
import opspec.kernels.silu_and_mul as S
from opspec.kernels.activation import StreamConfig
from sm90_build import build, evict_hints, pointers, strip_hints

def compile_(fn, ptr, ints, cexpr, warps):
    k = build(fn, dict(ints, **pointers(fn, ptr)), cexpr, warps)
    lds = k.loads
    return {"ld": sorted(set(strip_hints(x) for x in lds)), "n_ld": len(lds),
            "hints": evict_hints(lds), "st": sorted(set(k.stores)), "local": k.local}

def flat(n, eb, act, config=None, persist=False):
    cfg = config or A.activation_config(n, eb)
    tiles = triton.cdiv(n, cfg.block)
    cexpr = dict(ACT=A.ACTIVATIONS[act], BLOCK=cfg.block, USE_INT64=False, EVEN=n % cfg.block == 0,
                 PERSIST=persist, LOAD_POLICY="evict_first" if cfg.evict_first else "")
    return compile_(A._activation_flat_kernel, {2: "*bf16", 4: "*fp32"}[eb],
                    dict(n=n, n_tiles=tiles), cexpr, cfg.num_warps)

def gated(M, N, eb, act, config=None, persist=False):
    cfg = config or S.gated_config(M, N, eb)
    bm, bn, warps = S.gated_blocks(M, N, cfg)
    ncb = triton.cdiv(N, bn)
    ints = dict(M=M, N=N, n_col_blocks=ncb, n_tiles=triton.cdiv(M, bm) * ncb,
                stride_xm=2 * N, stride_xn=1, stride_om=N, stride_on=1)
    cexpr = dict(ACT=A.ACTIVATIONS[act], BLOCK_M=bm, BLOCK_N=bn, MASK_M=M % bm != 0,
                 MASK_N=N % bn != 0, USE_INT64=False, PERSIST=persist,
                 LOAD_POLICY="evict_first" if cfg.evict_first else "")
    return compile_(S._gated_kernel, {2: "*bf16", 4: "*fp32"}[eb], ints, cexpr, warps)

P = StreamConfig(2048, 4, persist=8, evict_first=True)
out = {
    "silu-bf16": flat(8192 * 14336, 2, "silu"),
    "relu-fp32": flat(2048 * 16384, 4, "relu"),
    "gelu-decode": flat(32 * 6400, 2, "gelu"),
    "silu-odd": flat(4097 * 4095, 2, "silu"),
    "silu-persist": flat(8192 * 14336, 2, "silu", P, True),
    "gated-silu": gated(8192, 2048, 2, "silu"),
    "gated-gelu-18944": gated(4096, 18944, 2, "gelu"),
    "gated-tanh-fp32": gated(4096, 18944, 4, "gelu_tanh"),
    "gated-odd-rows": gated(1000, 24, 2, "silu"),
    "gated-persist": gated(8192, 2048, 2, "gelu",
                           StreamConfig(1024, 4, persist=8, evict_first=True), True),
}
json.dump(out, sys.stdout)
"""


def test_flat_and_gated_kernels_build_for_sm90_with_16_byte_accesses():
    """The flat activation kernel and the gated kernel (SiluAndMul, GeluAndMul) compile
    for sm_90 (ptxas included) as their launchers plan the table's rows, with no local
    memory and 16-byte vectors only: one per thread for a 2048-element bf16 block on 8
    warps (and a 1024-element fp32 one), two each of gate and up in the gated kernel's
    2048 outputs on 4 warps; a length that is not a multiple of
    16 keeps the vectors on full tiles (only the last tile's code is element-wise); a
    persistent grid and the evict_first hint build too. Compiled in a fresh process:
    under the interpreter, triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT, timeout=900)
    v4 = ["ld.global.v4.b32"], ["st.global.v4.b32"]
    for name, k in built.items():
        assert k["local"] == 0, (name, k)
        if name not in ("silu-odd", "gated-odd-rows"):
            assert (k["ld"], k["st"]) == v4, (name, k)
    assert built["silu-bf16"]["n_ld"] == 1 and built["relu-fp32"]["n_ld"] == 1
    assert built["gelu-decode"]["n_ld"] == 1 and built["gated-silu"]["n_ld"] == 4
    assert built["gelu-decode"]["hints"] == ["L1::evict_first"]  # the decode row's hint
    assert set(built["silu-odd"]["ld"]) == {"ld.global.v4.b32", "ld.global.b16"}
    # rows of 24: a row mask, the columns (24 of 32) masked too: element-wise
    assert built["gated-odd-rows"]["ld"]
    assert built["silu-persist"]["hints"] == ["L1::evict_first"]
    assert built["gated-persist"]["hints"] == ["L1::evict_first"]
    assert built["silu-bf16"]["hints"] == [] and built["gated-silu"]["hints"] == []


def test_merge_dims():
    x = torch.empty(4, 6, 10)
    assert merge_dims(x.shape, x.stride(), x.stride()) == ([240], [[1], [1]])
    v = x[:, :, 1:9]
    assert merge_dims(v.shape, v.stride(), (48, 8, 1)) == ([24, 8], [[10, 1], [8, 1]])
    assert merge_dims((1, 1), (5, 1)) == ([1], [[1]])
    s = x[:, ::2, 1:9]                    # rows of a strided slice still merge
    assert merge_dims(s.shape, s.stride(), (24, 8, 1)) == ([12, 8], [[20, 1], [8, 1]])
    t = x.permute(1, 0, 2)[:, :, 1:9]     # nothing merges
    assert merge_dims(t.shape, t.stride(), (32, 8, 1)) == ([6, 4, 8], [[10, 60, 1], [32, 8, 1]])


# ============================================================================ the ops

@pytest.mark.parametrize("op, act", [(ReluFwdOp(), "relu"), (SiluFwdOp(), "silu"),
                                     (GeluFwdOp(), "gelu"), (GeluFwdOp("tanh"), "gelu_tanh")],
                         ids=["relu", "silu", "gelu", "gelu_tanh"])
def test_op_results(op, act):
    for dtype in DTYPES:
        x = _x(3, 5, 7, dtype=dtype, seed=11)
        before = x.clone()
        y = op(x)
        assert y is not x and y.shape == x.shape and y.dtype == dtype
        torch.testing.assert_close(y, TORCH_FN[act](x.float()).to(dtype), **TOL[dtype])
        assert torch.equal(x, before)          # not in place: the input is left alone
        assert op.last_call.written == ()
    # a 0-d tensor is a valid `[*S]` with S = ()
    s = torch.tensor(-1.5, device=DEV)
    torch.testing.assert_close(op(s), TORCH_FN[act](s))
    assert op.last_call.indices["S"] == ()


@pytest.mark.parametrize("cls, act", [(ReluFwdOp, "relu"), (SiluFwdOp, "silu")])
def test_op_in_place_returns_the_written_input(cls, act):
    op = cls(inplace=True)
    x = _x(6, 10, dtype=torch.bfloat16, seed=12)
    want = activation_reference(x, act)
    y = op(x)
    assert y is x                                        # alias: input
    torch.testing.assert_close(x, want, **TOL[torch.bfloat16])
    assert op.last_call.written == ("input",)
    assert op.last_call.traffic == {"input": (1, 1)}
    flops = 60 if act == "relu" else 300
    assert op.eval_roofline() == (flops, 60 * 2 * 2)   # read and written once, no copy
    # through a non-contiguous view, the caller's storage is written
    base = _x(4, 12, seed=13)
    view = base[:, 2:9]
    want = activation_reference(view, act)
    assert op(view) is view
    torch.testing.assert_close(base[:, 2:9], want)


def test_op_out_of_place_keeps_the_input_layout():
    x = _x(6, 4, seed=14).t()
    y = SiluFwdOp()(x)
    assert y.stride() == x.stride()
    torch.testing.assert_close(y, F.silu(x))


def test_gelu_flops_follow_the_approximation():
    x = _x(4, 8)
    exact, tanh = GeluFwdOp(), GeluFwdOp(approximate="tanh")
    exact(x)
    tanh(x)
    assert exact.eval_roofline() == (5 * 32, 2 * 32 * 4)
    assert tanh.eval_roofline() == (9 * 32, 2 * 32 * 4)
    assert exact.last_call.indices["flops_per_element"] == 5
    assert tanh.last_call.branch_key == (("approximate", "tanh"),)


def test_op_empty_write_returns_without_a_launch():
    x = torch.empty(0, 7, dtype=torch.float16, device=DEV)
    y = GeluFwdOp()(x)
    assert y.shape == (0, 7) and y.dtype == torch.float16 and y is not x
    assert ReluFwdOp(inplace=True)(x) is x


def test_op_refuses_a_dtype_outside_the_spec():
    with pytest.raises(SignatureError) as ei:
        ReluFwdOp()(torch.zeros(3, dtype=torch.float64))
    expect_error(ei, SignatureError, "ReluFwdOp", "signature.inputs.input.dtype",
                 "input input, dtype T", "expected bfloat16 | float16 | float32", "got float64")
    with pytest.raises(SignatureError) as ei:
        GeluFwdOp()(torch.zeros(3, dtype=torch.int32))
    expect_error(ei, SignatureError, "GeluFwdOp", "signature.inputs.input.dtype", "got int32")


def test_op_refuses_a_non_tensor():
    with pytest.raises(SignatureTypeError) as ei:
        SiluFwdOp()([1.0, 2.0])
    expect_error(ei, SignatureTypeError, "SiluFwdOp", "signature.inputs.input",
                 "expected a torch.Tensor, got list")


def test_op_refuses_bad_parameters():
    with pytest.raises(SignatureError) as ei:
        GeluFwdOp(approximate="fast")
    expect_error(ei, SignatureError, "GeluFwdOp", "signature.params.approximate",
                 "has type `'none' | 'tanh'`", "got 'fast'")
    with pytest.raises(SignatureTypeError) as ei:
        ReluFwdOp(inplace=1)
    expect_error(ei, SignatureTypeError, "ReluFwdOp", "signature.params.inplace",
                 "has type `bool`", "got 1")


def test_dispatch_picks_the_triton_kernel():
    from opspec.kernels.activation_impl import ActivationCall
    op = GeluFwdOp("tanh")
    call = ActivationCall("gelu_tanh", "bfloat16", device=torch.device(DEV))
    assert op.key_for("activation", call) == "activation_triton"
    meta = ActivationCall("gelu", "float32", device=torch.device("meta"))
    with pytest.raises(Exception, match="do not run on meta"):
        op.key_for("activation", meta)


# ============================================================================ compile boundary

def test_operator_names():
    assert ReluFwdOp.compile_op_names == ("opspec::activation_relu_fwd_op",
                                          "opspec::activation_relu_fwd_op_writes_input")
    assert SiluFwdOp.compile_op_names == ("opspec::activation_silu_fwd_op",
                                          "opspec::activation_silu_fwd_op_writes_input")
    assert GeluFwdOp.compile_op_names == ("opspec::activation_gelu_fwd_op",)
    assert str(torch.ops.opspec.activation_silu_fwd_op_writes_input.default._schema) == (
        "opspec::activation_silu_fwd_op_writes_input(Tensor(a!) input, str key) -> ()")


@pytest.mark.parametrize("cls", [ReluFwdOp, SiluFwdOp, GeluFwdOp])
def test_opcheck_every_operator(cls):
    for name in cls.compile_op_names:
        writes = name.endswith("_writes_input")
        kwargs = {"inplace": True} if writes else {}
        op = cls(**kwargs)
        packet = getattr(torch.ops.opspec, name.split("::")[1]).default
        for x in (_x(3, 8), _x(2, 6, dtype=torch.float16)):
            torch.library.opcheck(packet, (x, op._opspec_key))


def test_cold_compile_fullgraph():
    from torch._inductor import config

    torch._dynamo.reset()
    gelu, silu_ = GeluFwdOp("tanh"), SiluFwdOp(inplace=True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)

    def f(x, h):
        silu_(h)                 # writes h
        return gelu(x) + h

    fn = torch.compile(f, backend=backend, fullgraph=True)
    x, h = _x(3, 8), _x(3, 8, seed=1)
    h_eager = h.clone()
    got = fn(x, h)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("activation_gelu_fwd_op" in t for t in targets), targets
    assert any("activation_silu_fwd_op_writes_input" in t for t in targets), targets
    torch.testing.assert_close(h, F.silu(h_eager))           # the caller's h was written
    torch.testing.assert_close(got, F.gelu(x, approximate="tanh") + h)


# ============================================================================ workloads

@pytest.mark.parametrize("cls", [ReluFwdOp, SiluFwdOp, GeluFwdOp])
def test_workload_rows_instantiate_on_meta(cls):
    large = 0
    for case in cases(cls):
        op = case.construct(cls)
        (x,) = case.inputs("meta")
        assert x.device.type == "meta" and list(x.shape) == list(case.values["S"])
        ind = op.check_call(x)
        assert ind["S"] == tuple(case.values["S"]) and ind["T"] == case.dtypes["T"]
        traffic = 2 * x.numel() * x.element_size()       # read once, written once
        large = max(large, traffic)
        assert len(case.label) <= 24
    assert large >= 256 * 2**20


def test_workload_effects_and_parameters():
    inpl = [c for c in cases(SiluFwdOp) if c.params.get("inplace")]
    assert [c.id for c in inpl] == ["llama3-70b-prefill-inpl-bfloat16",
                                    "dsv3-expert-decode-inpl-bfloat16"]
    assert any(c.params.get("inplace") for c in cases(ReluFwdOp))
    tanh = [c.id for c in cases(GeluFwdOp) if c.params.get("approximate") == "tanh"]
    assert tanh == ["gemma-7b-prefill-bfloat16", "gemma2-9b-decode-bfloat16"]
    (vit,) = [c for c in cases(GeluFwdOp) if c.id == "vit-h14-mlp-float16"]
    assert vit.values["S"] == (64, 257, 5120) and math.prod(vit.values["S"]) == 84_213_760
