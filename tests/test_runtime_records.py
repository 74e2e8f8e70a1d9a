"""Call records (`last_call`) and `eval_roofline()` of the bundled ops and of user ops."""

from __future__ import annotations

import pytest
import torch

from opspec.ops import GemmFwdOp, SignatureCall, SiluAndMulFwdOp
from opspec.ops.records import TensorRecord
from opspec.schema.errors import OpspecError, SignatureError

from runtime_user_ops import user_ops

H = torch.float16


@pytest.fixture(scope="module")
def U(tmp_path_factory):
    return user_ops(tmp_path_factory)


def test_last_call_before_any_call_raises():
    for op in (GemmFwdOp(), SiluAndMulFwdOp()):
        with pytest.raises(RuntimeError, match=f"{type(op).__name__} has completed no call yet"):
            op.last_call
        with pytest.raises(RuntimeError):
            op.eval_roofline()


@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_record(ta, tb):
    M, N, K = 3, 5, 4
    op = GemmFwdOp(trans_a=ta, trans_b=tb)
    a = torch.randn((K, M) if ta else (M, K)).to(H)
    b = torch.randn((N, K) if tb else (K, N)).to(H)
    op(a, b)
    rec = op.last_call
    assert isinstance(rec, SignatureCall) and rec.op == "GemmFwdOp"
    assert rec.indices == {"M": M, "N": N, "K": K, "T": "float16", "trans_a": ta, "trans_b": tb}
    assert rec.branch_key == (("trans_a", ta), ("trans_b", tb))
    assert rec.device == torch.device("cpu")
    assert rec.tensors == {"a": TensorRecord(tuple(a.shape), "float16"),
                           "b": TensorRecord(tuple(b.shape), "float16"),
                           "c": TensorRecord((M, N), "float16")}
    assert rec.traffic == {"a": (1, 0), "b": (1, 0), "c": (0, 1)}
    assert rec.written == () and rec.has_out is False and rec.metadata == {} and rec.stages == {}
    assert rec.bytes("a") == M * K * 2 and rec.present("c") and not rec.present("out")
    flops, nbytes = op.eval_roofline()
    assert flops == 2 * M * N * K
    assert nbytes == (M * K + K * N + M * N) * 2


def test_gemm_roofline_of_a_workload_sized_call_on_meta():
    """The roofline reads only the record: an empty-write call on meta (M = 0, so no kernel
    runs) with llama3-8b's N and K is counted from the signature."""
    op = GemmFwdOp(trans_b=True)
    M, N, K = 0, 14336, 4096
    op(torch.empty(M, K, dtype=H, device="meta"), torch.empty(N, K, dtype=H, device="meta"))
    assert op.last_call.device == torch.device("meta")
    assert op.eval_roofline() == (0, (M * K + K * N + M * N) * 2)


@pytest.mark.parametrize("dtype, size", [(torch.float32, 4), (torch.float16, 2)])
def test_silu_record_and_roofline(dtype, size):
    op = SiluAndMulFwdOp()
    M, N = 3, 4
    op(torch.randn(M, 2 * N).to(dtype))
    rec = op.last_call
    name = str(dtype).removeprefix("torch.")
    assert rec.indices == {"M": M, "N": N, "T": name}
    assert rec.branch_key == ()
    assert rec.tensors == {"x": TensorRecord((M, 2 * N), name), "output": TensorRecord((M, N), name)}
    assert rec.traffic == {"x": (1, 0), "output": (0, 1)}
    assert op.eval_roofline() == (6 * M * N, (M * 2 * N + M * N) * size)


def test_records_of_written_inputs_out_and_lets(U):
    inp = U.RtInplaceFwdOp()
    x = torch.zeros(4)
    inp(x, torch.ones(4))
    rec = inp.last_call
    assert rec.written == ("x",)
    # x is read and written; y aliases x, so its write is not counted twice
    assert rec.traffic == {"x": (1, 1), "a": (1, 0)}
    assert rec.tensors["y"] == TensorRecord((4,), "float32")
    assert inp.eval_roofline() == (4, (2 + 1) * 4 * 4)
    nip = U.RtInplaceFwdOp(inplace=False)
    nip(x, None, torch.ones(4))
    assert nip.last_call.written == () and nip.last_call.traffic == {"x": (1, 0), "b": (1, 0),
                                                                     "y": (0, 1)}
    aff = U.RtAffineFwdOp()
    out = torch.empty(8, 6)
    aff(torch.randn(8, 3), out=out)
    rec = aff.last_call
    assert rec.has_out and rec.present("out")
    assert rec.indices == {"M": 8, "N": 3, "W": 6, "T": "float32", "odt": "float32"}
    # the caller's `out` is recorded as the output it is the buffer of
    assert set(rec.tensors) == {"x", "y"} and rec.tensors["y"] == TensorRecord((8, 6), "float32")
    assert aff.eval_roofline() == (8 * 6, (8 * 3 + 8 * 6) * 4)


def test_record_is_not_changed_by_a_failed_call():
    op = GemmFwdOp()
    op(torch.ones(2, 3, dtype=H), torch.ones(3, 4, dtype=H))
    before = op.last_call
    with pytest.raises(SignatureError):
        op(torch.ones(2, 3, dtype=H), torch.ones(4, 4, dtype=H))
    assert op.last_call == before


def test_roofline_func_outside_the_allowlist_is_refused(tmp_path):
    from runtime_user_ops import load_module
    (tmp_path / "toy.yaml").write_text(
        "RtFuncRooflineFwdOp:\n  family: toy\n  status: implemented\n  signature:\n"
        "    forall: {M: Dim}\n    inputs:\n      x: {dtype: float32, shape: \"[M]\"}\n"
        "    outputs:\n      y: {dtype: float32, shape: \"[M]\"}\n"
        "  workloads:\n  - {M: 4, label: small}\n  roofline: {func: os.system}\n")
    (tmp_path / "types.yaml").write_text("adts: {}\npython_prefixes: [opspec.]\n")
    mod = load_module(tmp_path, "rt_funcroof", '''
        from opspec.ops.op import Op
        class RtFuncRooflineFwdOp(Op):
            manifest = "."
            def forward(self, x):
                return x + 1
        ''')
    op = mod.RtFuncRooflineFwdOp()
    op(torch.ones(2))
    with pytest.raises(OpspecError, match="outside the manifest's python_prefixes"):
        op.eval_roofline()
