"""The compile boundary: one `torch.library` custom op per effect branch, its fake, the
traced path under `torch.compile(fullgraph=True)`, and the eager path that never takes it.

Each bundled op is compiled cold exactly once (a compile takes seconds on the CPU).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opspec.ops import GemmFwdOp, SiluAndMulFwdOp
from opspec.schema.errors import SignatureError

from runtime_user_ops import user_ops

H = torch.float16


@pytest.fixture(scope="module")
def U(tmp_path_factory):
    return user_ops(tmp_path_factory)


class _OpLog(TorchDispatchMode):
    """Every operator dispatched while active, by qualified name."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.name())
        return func(*args, **(kwargs or {}))


def _compile_capturing(fn, graphs):
    """torch.compile(fn, fullgraph=True) with inductor, keeping each Dynamo graph. Cold:
    the op instance has served no call yet, and inductor's on-disk graph cache is off."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    return torch.compile(fn, backend=backend, fullgraph=True)


def _targets(graphs) -> list[str]:
    return [str(n.target).removesuffix(".default") for g in graphs for n in g.graph.nodes
            if n.op == "call_function"]


# ============================================================================ operators

def test_operator_names_and_schemas(U):
    assert GemmFwdOp.compile_op_names == ("opspec::gemm_fwd_op",)
    assert SiluAndMulFwdOp.compile_op_names == ("opspec::elementwise_silu_and_mul_fwd_op",)
    assert str(torch.ops.opspec.gemm_fwd_op.default._schema) == \
        "opspec::gemm_fwd_op(Tensor a, Tensor b, str key) -> Tensor"
    assert str(torch.ops.opspec.elementwise_silu_and_mul_fwd_op.default._schema) == \
        "opspec::elementwise_silu_and_mul_fwd_op(Tensor x, str key) -> Tensor"
    # one operator per effect branch: `out` passed or not; x written or not
    assert U.RtAffineFwdOp.compile_op_names == ("opspec::toy_rt_affine_fwd_op",
                                                "opspec::toy_rt_affine_fwd_op_out")
    assert str(torch.ops.opspec.toy_rt_affine_fwd_op_out.default._schema) == \
        "opspec::toy_rt_affine_fwd_op_out(Tensor x, Tensor? bias, Tensor(a!) out, str key) -> ()"
    assert set(U.RtInplaceFwdOp.compile_op_names) == {
        "opspec::toy_rt_inplace_fwd_op", "opspec::toy_rt_inplace_fwd_op_writes_x"}
    assert str(torch.ops.opspec.toy_rt_inplace_fwd_op_writes_x.default._schema) == (
        "opspec::toy_rt_inplace_fwd_op_writes_x(Tensor(a!) x, Tensor? a, Tensor? b, str key) -> ()")


@pytest.mark.parametrize("ta, tb", [(False, False), (True, True)])
def test_opcheck_gemm(ta, tb):
    op = GemmFwdOp(trans_a=ta, trans_b=tb)
    a = torch.randn((4, 3) if ta else (3, 4)).to(H)
    b = torch.randn((5, 4) if tb else (4, 5)).to(H)
    torch.library.opcheck(torch.ops.opspec.gemm_fwd_op.default, (a, b, op._opspec_key))
    c = torch.ops.opspec.gemm_fwd_op(a, b, op._opspec_key)
    torch.testing.assert_close(c, op(a, b))


def test_opcheck_silu_and_mul():
    op = SiluAndMulFwdOp()
    for x in (torch.randn(3, 8), torch.randn(2, 6).to(H)):
        torch.library.opcheck(torch.ops.opspec.elementwise_silu_and_mul_fwd_op.default,
                              (x, op._opspec_key))


def test_opcheck_user_effect_branches(U):
    aff = U.RtAffineFwdOp()
    x = torch.randn(8, 3)
    torch.library.opcheck(torch.ops.opspec.toy_rt_affine_fwd_op.default,
                          (x, torch.randn(3), aff._opspec_key))
    torch.library.opcheck(torch.ops.opspec.toy_rt_affine_fwd_op_out.default,
                          (x, None, torch.empty(8, 6), aff._opspec_key))
    inp = U.RtInplaceFwdOp()
    torch.library.opcheck(torch.ops.opspec.toy_rt_inplace_fwd_op_writes_x.default,
                          (torch.zeros(4), torch.ones(4), None, inp._opspec_key))


def test_operator_runs_the_signature_checks():
    op = GemmFwdOp()
    with pytest.raises(SignatureError, match=r"expected K = 3 \(from input a\), got 4"):
        torch.ops.opspec.gemm_fwd_op(torch.ones(2, 3, dtype=H), torch.ones(4, 5, dtype=H),
                                     op._opspec_key)


def test_fake_allocates_on_the_call_device_not_the_first_inputs(U):
    """RtCpuFirstFwdOp's first input is `device: cpu`: the fake's outputs follow x (meta)."""
    op = U.RtCpuFirstFwdOp()
    idx, x = torch.arange(4), torch.ones(4, device="meta")
    assert op(idx, x).device.type == "meta"
    y = torch.ops.opspec.toy_rt_cpu_first_fwd_op(idx, x, op._opspec_key)  # meta: the fake
    assert y.device.type == "meta" and y.shape == (4,)


def test_fake_allocates_a_cpu_declared_output_on_the_cpu(U):
    """RtCpuOutFwdOp's `n` declares `device: cpu`: the fake puts it there, `y` on meta."""
    op = U.RtCpuOutFwdOp()
    y, n = torch.ops.opspec.toy_rt_cpu_out_fwd_op(torch.ones(4, device="meta"),
                                                  op._opspec_key)
    assert y.device.type == "meta" and n.device.type == "cpu" and n.dtype == torch.int64


# ============================================================================ eager path

def test_eager_call_does_not_go_through_the_custom_op(monkeypatch):
    op = GemmFwdOp()
    a, b = torch.ones(2, 3, dtype=H), torch.ones(3, 4, dtype=H)

    def boundary(*args, **kwargs):
        raise AssertionError("an eager call took the compile boundary")

    monkeypatch.setattr(GemmFwdOp, "_call_boundary", boundary)
    with _OpLog() as log:
        c = op(a, b)
    assert torch.equal(c, torch.full((2, 4), 3.0, dtype=H))
    assert not any(n.startswith("opspec::") for n in log.names), log.names
    # the log does see the operator when it is called (the check above is not vacuous)
    with _OpLog() as log:
        torch.ops.opspec.gemm_fwd_op(a, b, op._opspec_key)
    assert "opspec::gemm_fwd_op" in log.names
    s = SiluAndMulFwdOp()
    monkeypatch.setattr(SiluAndMulFwdOp, "_call_boundary", boundary)
    with _OpLog() as log:
        s(torch.ones(2, 4))
    assert not any(n.startswith("opspec::") for n in log.names), log.names


# ============================================================================ torch.compile

def test_gemm_cold_compile_fullgraph():
    torch._dynamo.reset()
    op = GemmFwdOp(trans_b=True)
    graphs = []
    fn = _compile_capturing(lambda a, b: op(a, b) * 2, graphs)
    a, b = torch.randn(3, 8).to(H), torch.randn(5, 8).to(H)
    c = fn(a, b)
    assert _targets(graphs).count("opspec.gemm_fwd_op") == 1, _targets(graphs)
    torch.testing.assert_close(c, op(a, b) * 2)
    assert op.last_call.indices["K"] == 8
    # a violating call is rejected while tracing, by the same generated checks
    with pytest.raises(Exception) as ei:
        fn(a, torch.randn(5, 7).to(H))
    assert "GemmFwdOp: input b, axis 1 of Mat[trans_b, K, N] = [N, K]" in str(ei.value)
    assert "signature.inputs.b.shape" in str(ei.value)


def test_silu_and_mul_cold_compile_fullgraph():
    torch._dynamo.reset()
    op = SiluAndMulFwdOp()
    graphs = []
    fn = _compile_capturing(lambda x: op(x) + 1, graphs)
    x = torch.randn(3, 8)
    y = fn(x)
    assert _targets(graphs).count("opspec.elementwise_silu_and_mul_fwd_op") == 1
    torch.testing.assert_close(y, op(x) + 1)


def test_user_op_with_a_written_input_compiles(U):
    torch._dynamo.reset()
    op = U.RtInplaceFwdOp()
    graphs = []
    fn = _compile_capturing(lambda x, a: op(x, a), graphs)
    x = torch.zeros(4)
    r = fn(x, torch.ones(4))
    assert "opspec.toy_rt_inplace_fwd_op_writes_x" in _targets(graphs)
    assert torch.equal(x, torch.ones(4))            # the caller's x was written
    assert torch.equal(r, torch.ones(4))


def test_user_op_checks_evaluate_on_symints(U):
    """With dynamic shapes the generated checks (a let, a refinement, the `out` buffer) run
    on SymInts: one graph serves both calls, and a violating call fails while tracing."""
    torch._dynamo.reset()
    op = U.RtAffineFwdOp()
    graphs = []
    fn = torch.compile(lambda x, b, out: op(x, b, out=out), fullgraph=True, dynamic=True,
                       backend=lambda gm, ex: graphs.append(gm) or gm.forward)
    for M, N in ((8, 3), (16, 5)):
        x, bias, out = torch.randn(M, N), torch.randn(N), torch.empty(M, 2 * N)
        assert fn(x, bias, out) is out
        torch.testing.assert_close(out, torch.cat([x, x], 1) + torch.cat([bias, bias]))
    assert len(graphs) == 1
    assert "opspec.toy_rt_affine_fwd_op_out" in _targets(graphs)
    with pytest.raises(Exception) as ei:
        fn(torch.randn(7, 5), torch.randn(5), torch.empty(7, 10))
    assert "RtAffineFwdOp: refinement `M % 8 == 0`" in str(ei.value)
