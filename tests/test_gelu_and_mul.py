"""GeluAndMulFwdOp: its Triton kernel against the torch reference (on CPU through Triton's
interpreter, which tests/conftest.py turns on without CUDA), the op end to end, its
compile-boundary operator, one cold `torch.compile(fullgraph=True)`, and its workload rows.
SiluAndMulFwdOp, in the same family, is checked to be unchanged beside it.

Sizes are small: the interpreter runs each program through numpy.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.gelu_and_mul import (
    gelu_and_mul_block, gelu_and_mul_reference, gelu_and_mul_triton,
)
from opspec.ops import GeluAndMulFwdOp, SiluAndMulFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
APPROX = ["none", "tanh"]
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
}
SHAPES = [(1, 2), (3, 14), (17, 2 * 33), (5, 2 * 1000), (40, 2 * 48)]

pytestmark = [
    pytest.mark.skipif(not (TRITON_INTERPRETED or torch.cuda.is_available()),
                       reason="the Triton kernels need CUDA or TRITON_INTERPRET=1"),
    # the interpreter evaluates exp in numpy, which warns where exp(-x) overflows to inf
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _x(m, two_n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, two_n, generator=g) * 3).to(dtype).to(DEV)


def _definition(x, approximate):
    n = x.shape[-1] // 2
    xf = x.float()
    return (F.gelu(xf[:, :n], approximate=approximate) * xf[:, n:]).to(x.dtype)


# ============================================================================ reference

def test_reference_matches_definition():
    x = _x(5, 12)
    for a in APPROX:
        torch.testing.assert_close(gelu_and_mul_reference(x, a),
                                   F.gelu(x[:, :6], approximate=a) * x[:, 6:])
    xb = x.to(torch.bfloat16)
    got = gelu_and_mul_reference(xb, "tanh")
    assert got.dtype == torch.bfloat16 and got.shape == (5, 6)
    assert torch.equal(got, _definition(xb, "tanh"))
    with pytest.raises(ValueError, match="even"):
        gelu_and_mul_reference(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="'none' or 'tanh'"):
        gelu_and_mul_reference(x, "erf")


# ============================================================================ Triton kernel

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("approximate", APPROX)
def test_triton_matches_reference(approximate, dtype):
    for i, (m, two_n) in enumerate(SHAPES):
        x = _x(m, two_n, dtype, seed=i)
        out = torch.empty(m, two_n // 2, dtype=dtype, device=DEV)
        assert gelu_and_mul_triton(x, out, approximate) is out
        torch.testing.assert_close(out, gelu_and_mul_reference(x, approximate), **TOL[dtype])


@pytest.mark.parametrize("approximate", APPROX)
def test_triton_non_contiguous(approximate):
    # a column slice of a wider tensor: row stride 90, not 2N = 66
    wide = _x(9, 90, seed=1)
    x = wide[:, 7:7 + 66]
    out = torch.empty(9, 33, device=DEV)
    gelu_and_mul_triton(x, out, approximate)
    torch.testing.assert_close(out, gelu_and_mul_reference(x, approximate))
    # every other row and column, into a strided out whose neighbours stay untouched
    big = _x(10, 40, seed=2)
    xs = big[::2, ::2]                                   # [5, 20], strides (80, 2)
    out_big = torch.full((5, 30), 7.0, device=DEV)
    outs = out_big[:, 5:15]
    gelu_and_mul_triton(xs, outs, approximate)
    torch.testing.assert_close(outs, gelu_and_mul_reference(xs, approximate))
    assert torch.all(out_big[:, :5] == 7.0) and torch.all(out_big[:, 15:] == 7.0)
    # a transposed tensor (column stride M, row stride 1)
    xt = _x(16, 6, seed=3).t()                           # [6, 16]
    outt = torch.empty(6, 8, device=DEV)
    gelu_and_mul_triton(xt, outt, approximate)
    torch.testing.assert_close(outt, gelu_and_mul_reference(xt, approximate))


def test_triton_several_rows_per_program():
    # short rows: one program covers several rows, the last ones partly masked (the
    # table's decode tile of 512 outputs: 16 rows of 32 columns, 24 of them used)
    assert gelu_and_mul_block(1000, 24)[:2] == (16, 32)
    x = _x(1000, 48, torch.float16, seed=4)
    out = torch.empty(1000, 24, dtype=torch.float16, device=DEV)
    gelu_and_mul_triton(x, out, "none")
    torch.testing.assert_close(out, gelu_and_mul_reference(x, "none"), **TOL[torch.float16])


def test_triton_int64_offsets(monkeypatch):
    # Inputs past 2**31 elements do not fit here: lower the limit so that the int64 path
    # runs on a small input and must give the same result.
    import opspec.kernels.silu_and_mul as S      # the gated kernel's launcher
    monkeypatch.setattr(S, "_INT32_LIMIT", 100)
    x = _x(9, 2 * 40, seed=11)
    out = torch.empty(9, 40, device=DEV)
    gelu_and_mul_triton(x, out, "tanh")
    torch.testing.assert_close(out, gelu_and_mul_reference(x, "tanh"))


def test_triton_three_dim_input():
    x = _x(6, 18, torch.float16, seed=5).view(2, 3, 18)
    out = torch.empty(2, 3, 9, dtype=torch.float16, device=DEV)
    gelu_and_mul_triton(x, out, "tanh")
    torch.testing.assert_close(out, gelu_and_mul_reference(x, "tanh"), **TOL[torch.float16])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("approximate", APPROX)
def test_triton_extreme_values(approximate, dtype):
    vals = torch.tensor([-3e4, -100.0, -20.0, -1.0, -0.0, 0.0, 1.0, 20.0, 100.0, 3e4])
    x = torch.cat([vals, torch.full((10,), 2.0)]).to(dtype).view(1, 20).to(DEV)
    out = torch.empty(1, 10, dtype=dtype, device=DEV)
    gelu_and_mul_triton(x, out, approximate)
    assert torch.isfinite(out.float()).all()
    torch.testing.assert_close(out, gelu_and_mul_reference(x, approximate), **TOL[dtype])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_triton_erf_accuracy_over_the_float_range():
    """The erf path (a cheaper erf form than libdevice's, see activation.gelu_erf_fp32)
    against torch in float64 over fp32's whole range, gate and up alike: within
    2e-6 * |gate * up| for normal gates, torch's special values (+-0.0, +-inf, nan), and
    torch's float32 result at the test tolerance."""
    pos = torch.cat([torch.logspace(-45, 38.5, 2000, dtype=torch.float64),
                     torch.linspace(0, 12, 12001, dtype=torch.float64)]).float()
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45])
    gate = torch.cat([pos, -pos, special])
    for up in (torch.ones_like(gate), torch.linspace(-3, 3, gate.numel())):
        x = torch.stack([gate, up]).t().reshape(-1).view(-1, 2)  # rows [gate, up]
        out = torch.empty(x.shape[0], 1, device=DEV)
        gelu_and_mul_triton(x.to(DEV), out)
        out = out.cpu().view(-1)
        ref = F.gelu(gate.double()) * up.double()
        assert torch.equal(torch.isnan(out), torch.isnan(ref))
        fin = torch.isfinite(ref.float())  # fp32 overflow (|gelu * up| > 3.4e38) -> inf
        inf = ~fin & ~ref.isnan()
        assert torch.equal(out[inf], ref[inf].float())
        err = (out.double() - ref).abs()[fin]
        scale = (gate.double() * up.double()).abs()[fin]
        assert (err <= 2e-6 * scale + 1e-44).all(), (err - 2e-6 * scale).max()
        want = F.gelu(gate) * up
        both = torch.isfinite(want) & fin
        torch.testing.assert_close(out[both], want[both], **TOL[torch.float32])


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0, 0)], ids=str)
def test_triton_empty(shape):
    m, two_n = shape
    x = torch.empty(m, two_n, dtype=torch.float16, device=DEV)
    out = torch.empty(m, two_n // 2, dtype=torch.float16, device=DEV)
    assert gelu_and_mul_triton(x, out) is out


def test_triton_rejects_bad_arguments():
    x = torch.zeros(2, 8, device=DEV)
    with pytest.raises(ValueError, match="shape"):
        gelu_and_mul_triton(x, torch.empty(2, 3, device=DEV))
    with pytest.raises(TypeError, match="dtype"):
        gelu_and_mul_triton(x, torch.empty(2, 4, dtype=torch.float16, device=DEV))
    with pytest.raises(ValueError, match="even"):
        gelu_and_mul_triton(torch.zeros(2, 7, device=DEV), torch.empty(2, 3, device=DEV))
    with pytest.raises(ValueError, match="'none' or 'tanh'"):
        gelu_and_mul_triton(x, torch.empty(2, 4, device=DEV), "exact")


def test_block_choice():
    # long rows: 2048 columns on 4 warps (GATED_TABLE's large tile), one row per program
    assert gelu_and_mul_block(4096, 14336) == (1, 2048, 4)
    # DeepSeek-V3 experts (N = 2048): one program per row, as large as for long rows
    assert gelu_and_mul_block(8192, 2048) == (1, 2048, 4)
    # short rows are stacked until the tile is full
    assert gelu_and_mul_block(8192, 256) == (8, 256, 4)
    assert gelu_and_mul_block(1_000_000, 3) == (512, 4, 4)
    assert gelu_and_mul_block(100_000, 3) == (128, 4, 2)     # the decode tile: 512 on 2 warps
    # a row length 2048 does not divide: 512 columns (the power of two padding least),
    # four rows a program
    assert gelu_and_mul_block(4096, 18944) == (4, 512, 4)
    # fp32: the same tiles
    assert gelu_and_mul_block(4096, 14336, 4) == (1, 2048, 4)
    # decode: the table's small tile
    assert gelu_and_mul_block(32, 14336) == (1, 512, 2)
    assert gelu_and_mul_block(1, 1) == (1, 1, 1)


# ============================================================================ the op

@pytest.mark.parametrize("approximate", APPROX)
def test_op_results(approximate):
    op = GeluAndMulFwdOp(approximate)
    for dtype in DTYPES:
        x = _x(7, 2 * 19, dtype, seed=6)
        before = x.clone()
        y = op(x)
        assert y.shape == (7, 19) and y.dtype == dtype and y.is_contiguous()
        torch.testing.assert_close(y, _definition(x, approximate), **TOL[dtype])
        assert torch.equal(x, before)
    assert op.last_call.indices["flops_per_output"] == (6 if approximate == "none" else 10)
    flops = (6 if approximate == "none" else 10) * 7 * 19
    assert op.eval_roofline() == (flops, 3 * 7 * 19 * 2)     # bf16: x read, output written


def test_op_on_a_column_slice():
    wide = _x(4, 30, seed=7)
    x = wide[:, 3:23]
    y = GeluAndMulFwdOp("tanh")(x)
    torch.testing.assert_close(y, _definition(x, "tanh"))


def test_op_empty_write_and_empty_rows():
    y = GeluAndMulFwdOp()(torch.empty(0, 8, device=DEV))
    assert y.shape == (0, 4)
    assert GeluAndMulFwdOp()(torch.empty(3, 0, device=DEV)).shape == (3, 0)


def test_op_refuses_an_odd_last_axis():
    with pytest.raises(SignatureError) as ei:
        GeluAndMulFwdOp()(torch.zeros(2, 5, device=DEV))
    expect_error(ei, SignatureError, "GeluAndMulFwdOp", "signature.inputs.x.shape",
                 "input x, axis 1 of [M, 2 * N]", "a non-negative multiple of 2", "got 5")


def test_op_refuses_a_wrong_rank_dtype_or_type():
    with pytest.raises(SignatureError) as ei:
        GeluAndMulFwdOp()(torch.zeros(2, 2, 4, device=DEV))
    expect_error(ei, SignatureError, "GeluAndMulFwdOp", "signature.inputs.x.shape",
                 "the rank of [M, 2 * N]", "expected 2, got 3")
    with pytest.raises(SignatureError) as ei:
        GeluAndMulFwdOp("tanh")(torch.zeros(2, 4, dtype=torch.float64, device=DEV))
    expect_error(ei, SignatureError, "GeluAndMulFwdOp", "signature.inputs.x.dtype",
                 "expected bfloat16 | float16 | float32", "got float64")
    with pytest.raises(SignatureTypeError) as ei:
        GeluAndMulFwdOp()(None)
    expect_error(ei, SignatureTypeError, "GeluAndMulFwdOp", "signature.inputs.x",
                 "expected a torch.Tensor, got NoneType")


def test_op_refuses_an_unknown_approximation():
    with pytest.raises(SignatureError) as ei:
        GeluAndMulFwdOp(approximate="exact")
    expect_error(ei, SignatureError, "GeluAndMulFwdOp", "signature.params.approximate",
                 "has type `'none' | 'tanh'`", "got 'exact'")


def test_dispatch_and_entries():
    from opspec.kernels.gelu_and_mul_impl import GeluAndMulCall
    op = GeluAndMulFwdOp("tanh")
    call = GeluAndMulCall("bfloat16", "tanh", device=torch.device(DEV))
    assert op.key_for("gelu_and_mul", call) == "gelu_and_mul_triton"


def test_silu_and_mul_is_unchanged():
    op = SiluAndMulFwdOp()
    x = _x(3, 10, seed=8)
    torch.testing.assert_close(op(x), F.silu(x[:, :5]) * x[:, 5:])
    assert SiluAndMulFwdOp.compile_op_names == ("opspec::elementwise_silu_and_mul_fwd_op",)
    assert len(cases(SiluAndMulFwdOp)) == 7


# ============================================================================ compile boundary

def test_operator_name_and_opcheck():
    assert GeluAndMulFwdOp.compile_op_names == ("opspec::elementwise_gelu_and_mul_fwd_op",)
    packet = torch.ops.opspec.elementwise_gelu_and_mul_fwd_op.default
    assert str(packet._schema) == (
        "opspec::elementwise_gelu_and_mul_fwd_op(Tensor x, str key) -> Tensor")
    for a in APPROX:
        op = GeluAndMulFwdOp(a)
        for x in (_x(3, 8), _x(2, 6, torch.float16)):
            torch.library.opcheck(packet, (x, op._opspec_key))


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = GeluAndMulFwdOp("tanh")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda x: op(x) * 2, backend=backend, fullgraph=True)
    x = _x(3, 8)
    y = fn(x)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert sum("elementwise_gelu_and_mul_fwd_op" in t for t in targets) == 1, targets
    torch.testing.assert_close(y, _definition(x, "tanh") * 2)


# ============================================================================ workloads

def test_workload_rows_instantiate_on_meta():
    all_cases = cases(GeluAndMulFwdOp)
    assert len(all_cases) == 11 and len({c.id for c in all_cases}) == 11
    large = 0
    for case in all_cases:
        op = case.construct(GeluAndMulFwdOp)
        assert op.approximate == case.params.get("approximate", "none")
        (x,) = case.inputs("meta")
        M, N = case.values["M"], case.values["N"]
        assert x.device.type == "meta" and x.shape == (M, 2 * N)
        ind = op.check_call(x)
        assert (ind["M"], ind["N"], ind["T"]) == (M, N, case.dtypes["T"])
        large = max(large, 3 * M * N * x.element_size())
        assert len(case.label) <= 24
    assert large >= 256 * 2**20
    tanh = [c.id for c in all_cases if c.params.get("approximate") == "tanh"]
    assert tanh == ["gemma-7b-prefill-bfloat16", "gemma-7b-prefill-float16",
                    "gemma2-9b-prefill-bfloat16", "gemma2-9b-decode-bfloat16"]
