"""The two phases of a call (seed § 1) on user-defined specs and ops outside the repository.

The specs and op classes are written to a temporary folder (`runtime_user_ops`): each class
names its manifest with `manifest = "toy.yaml"`, relative to its own file, and is matched to
its spec by class name. Every failing call is pinned down to the exception type, the op, the
declaration path and the expected/actual values in the message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from opspec.ops import GemmFwdOp
from opspec.schema.errors import OpspecError, SignatureError, SignatureTypeError

from runtime_user_ops import expect_error, load_module, user_ops

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def U(tmp_path_factory):
    return user_ops(tmp_path_factory)


def f32(*shape):
    return torch.randn(*shape, dtype=torch.float32)


# ============================================================================ where specs live

def test_user_class_resolves_its_spec_by_class_name_from_a_relative_manifest(U):
    folder = Path(sys.modules[U.__name__].__file__).parent
    assert not folder.is_relative_to(REPO)
    for name in ("RtAffineFwdOp", "RtPairFwdOp", "RtInplaceFwdOp", "RtDeviceFwdOp"):
        cls = getattr(U, name)
        entry = cls._opspec_entry
        assert entry is not None and entry.spec.name == name
        assert Path(entry.loaded.file) == folder / "toy.yaml"
    # A class named like no spec of its manifest gets none, and no compile boundary; it
    # cannot be constructed, and the error says why.
    assert U.RtNotInManifestFwdOp._opspec_entry is None
    assert U.RtNotInManifestFwdOp.compile_op_names == ()
    with pytest.raises(OpspecError) as ei:
        U.RtNotInManifestFwdOp()
    assert "RtNotInManifestFwdOp has no spec in its manifest" in str(ei.value)


def test_manifest_as_absolute_path_and_as_folder(tmp_path):
    spec = textwrap.dedent("""\
        RtFolderOneFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim}
            inputs:
              x: {dtype: float32, shape: "[M]"}
            outputs:
              y: {dtype: float32, shape: "[M]"}
          workloads:
          - {M: 4, label: small}
          roofline: {flops: "M"}
        RtFolderTwoFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim}
            inputs:
              x: {dtype: float32, shape: "[M, 2]"}
            outputs:
              y: {dtype: float32, shape: "[M]"}
          workloads:
          - {M: 4, label: small}
          roofline: {flops: "M"}
        """)
    lib = tmp_path / "lib"
    (lib / "spec").mkdir(parents=True)
    (lib / "spec" / "toy.yaml").write_text(spec)
    (lib / "types.yaml").write_text("adts: {}\npython_prefixes: []\n")
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    mod = load_module(code_dir, "rt_folder_ops", f'''
        import torch
        from opspec.ops.op import Op

        class RtFolderOneFwdOp(Op):
            manifest = "../lib"              # a manifest folder, relative to this file
            def forward(self, x):
                return x + 1

        class RtFolderTwoFwdOp(Op):
            manifest = {str(lib / "spec" / "toy.yaml")!r}   # an absolute file path
            def forward(self, x):
                return x.sum(1)
        ''')
    one, two = mod.RtFolderOneFwdOp(), mod.RtFolderTwoFwdOp()
    assert torch.equal(one(torch.zeros(3)), torch.ones(3))
    assert two(torch.ones(3, 2)).tolist() == [2.0, 2.0, 2.0]
    # Each class found the spec named like it: the shapes differ.
    with pytest.raises(SignatureError) as ei:
        two(torch.ones(3))
    expect_error(ei, SignatureError, "RtFolderTwoFwdOp", "signature.inputs.x.shape",
                 "the rank of [M, 2]", "expected 2, got 1")


def test_a_user_script_outside_the_repository_runs_standalone(tmp_path):
    """The whole user workflow in a fresh interpreter: a spec, an Op subclass, calls."""
    (tmp_path / "toy.yaml").write_text(textwrap.dedent("""\
        RtScriptFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M, 2]"}
            outputs:
              y: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 4, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """))
    (tmp_path / "script.py").write_text(textwrap.dedent("""\
        import torch
        from opspec.ops.op import Op
        from opspec.schema.errors import SignatureError

        class RtScriptFwdOp(Op):
            manifest = "toy.yaml"
            def forward(self, x):
                return x[:, 0] + x[:, 1]

        op = RtScriptFwdOp()
        print("result", op(torch.ones(3, 2)).tolist())
        print("indices", dict(op.last_call.indices))
        try:
            op(torch.ones(3, 4))
        except SignatureError as e:
            print("error", e)
        """))
    env = {k: v for k, v in os.environ.items()}
    env["TRITON_INTERPRET"] = "1"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()   # the relative manifest path is taken from the script, not the cwd
    r = subprocess.run([sys.executable, str(tmp_path / "script.py")], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "result [2.0, 2.0, 2.0]" in r.stdout
    assert "indices {'M': 3, 'T': 'float32'}" in r.stdout
    assert "error RtScriptFwdOp: input x, axis 1 of [M, 2]: expected 2, got 4" in r.stdout
    assert "[signature.inputs.x.shape at " in r.stdout


# ============================================================================ step 1: presence

def test_step1_optional_input_omitted_or_passed_picks_a_branch(U):
    op = U.RtAffineFwdOp()
    x = f32(8, 3)
    y = op(x)
    assert dict(op.last_call.branch_key)["present(bias)"] is False
    assert op.last_call.present("x") and not op.last_call.present("bias")
    torch.testing.assert_close(y, torch.cat([x, x], 1))
    bias = f32(3)
    y = op(x, bias)
    assert dict(op.last_call.branch_key)["present(bias)"] is True
    assert op.last_call.present("bias")
    torch.testing.assert_close(y, torch.cat([x, x], 1) + torch.cat([bias, bias]))
    # by keyword, and passing None explicitly is omitting it
    op(x, bias=bias)
    assert dict(op.last_call.branch_key)["present(bias)"] is True
    op(x, None)
    assert dict(op.last_call.branch_key)["present(bias)"] is False
    # the branch passed is checked on its own declarations: bias of the wrong length
    with pytest.raises(SignatureError) as ei:
        op(x, f32(4))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.inputs.bias.shape",
                 "input bias, axis 0 of [N]", "expected N = 3 (from input x), got 4")


def test_step1_required_input_passed_as_none_fails(U):
    op = U.RtAffineFwdOp()
    with pytest.raises(SignatureTypeError) as ei:
        op(None)
    expect_error(ei, SignatureTypeError, "RtAffineFwdOp", "signature.inputs.x",
                 "input x: expected a torch.Tensor, got NoneType")
    with pytest.raises(SignatureTypeError) as ei:
        op([[1.0] * 3] * 8)
    expect_error(ei, SignatureTypeError, "RtAffineFwdOp", "signature.inputs.x",
                 "expected a torch.Tensor, got list")
    with pytest.raises(SignatureTypeError) as ei:
        GemmFwdOp()(torch.ones(2, 2, dtype=torch.float16), None)
    expect_error(ei, SignatureTypeError, "GemmFwdOp", "signature.inputs.b",
                 "input b: expected a torch.Tensor, got NoneType")
    assert op.calls == []


def test_step1_unknown_or_extra_arguments_fail_as_type_errors(U):
    op = U.RtAffineFwdOp()
    with pytest.raises(SignatureTypeError) as ei:
        op(f32(8, 3), nope=1)
    assert str(ei.value).startswith("RtAffineFwdOp: ") and "nope" in str(ei.value)
    with pytest.raises(SignatureTypeError):
        op(f32(8, 3), None, None, None)
    assert op.calls == []


# ============================================================================ step 2: domain

def test_step2_domain_restriction_excludes_a_combination(U):
    op = U.RtInplaceFwdOp()
    x = torch.zeros(4)
    with pytest.raises(SignatureError) as ei:
        op(x)
    expect_error(ei, SignatureError, "RtInplaceFwdOp", "signature.shape_rules.0",
                 "this combination of arguments is excluded by `present(a) or present(b)`")
    assert op.calls == [] and torch.equal(x, torch.zeros(4))
    # every other combination is accepted and takes its own branch
    for a, b in ((torch.ones(4), None), (None, torch.ones(4)), (torch.ones(4), torch.ones(4))):
        op(torch.zeros(4), a, b)
        key = dict(op.last_call.branch_key)
        assert (key["present(a)"], key["present(b)"]) == (a is not None, b is not None)


# ============================================================================ step 3: families

@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_step3_family_branch_follows_the_construction_parameters(trans_a, trans_b):
    M, N, K = 2, 3, 5
    op = GemmFwdOp(trans_a=trans_a, trans_b=trans_b)
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    h = torch.float16
    a, b = torch.randn(a_shape, dtype=h), torch.randn(b_shape, dtype=h)
    assert op.check_call(a, b) == {"M": M, "N": N, "K": K, "T": "float16"}
    c = op(a, b)
    assert c.shape == (M, N)
    assert op.last_call.branch_key == (("trans_a", trans_a), ("trans_b", trans_b))
    ref = (a.float().T if trans_a else a.float()) @ (b.float().T if trans_b else b.float())
    torch.testing.assert_close(c.float(), ref, rtol=1e-2, atol=1e-2)
    # the other layout of b is the other family case: rejected, naming the resolved case
    wrong_b = torch.randn(b_shape[::-1], dtype=h)
    with pytest.raises(SignatureError) as ei:
        op(a, wrong_b)
    case = "[N, K]" if trans_b else "[K, N]"
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b.shape",
                 f"Mat[trans_b, K, N] = {case}", f"expected K = {K} (from input a)")


# ============================================================================ step 4: inference

def test_step4_mismatched_k_fails():
    op = GemmFwdOp()
    h = torch.float16
    with pytest.raises(SignatureError) as ei:
        op(torch.ones(2, 4, dtype=h), torch.ones(5, 3, dtype=h))
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b.shape",
                 "input b, axis 0 of Mat[trans_b, K, N] = [K, N]",
                 "expected K = 4 (from input a), got 5", "bound so far: T=float16, M=2, K=4")


def test_rejected_dtype_is_not_reported_as_bound():
    # T is bound after its members are checked: the message names what was bound before
    op = GemmFwdOp()
    with pytest.raises(SignatureError) as ei:
        op(torch.ones(2, 4), torch.ones(4, 3))
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.a.dtype",
                 "input a, dtype T: expected bfloat16 | float16, got float32")
    assert "bound so far" not in str(ei.value)
    # a later mismatch still reports T, bound from the first tensor
    with pytest.raises(SignatureError) as ei:
        op(torch.ones(2, 4, dtype=torch.float16), torch.ones(4, 3))
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b.dtype",
                 "expected T = float16 (from input a), got float32", "bound so far: T=float16")


def test_step4_refinement_failing_names_the_rule(U):
    op = U.RtAffineFwdOp()
    with pytest.raises(SignatureError) as ei:
        op(f32(7, 3))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.shape_rules.0",
                 "refinement `M % 8 == 0`", "M=7")
    assert op.calls == []
    op(f32(16, 3))   # a multiple of 8 passes


def test_step4_odd_axis_of_two_n_fails():
    from opspec.ops import SiluAndMulFwdOp
    op = SiluAndMulFwdOp()
    with pytest.raises(SignatureError) as ei:
        op(f32(2, 5))
    expect_error(ei, SignatureError, "SiluAndMulFwdOp", "signature.inputs.x.shape",
                 "input x, axis 1 of [M, 2 * N]", "a non-negative multiple of 2", "got 5")


def test_step4_let_used_in_an_output_shape(U):
    op = U.RtAffineFwdOp()
    y = op(f32(8, 3))
    assert y.shape == (8, 6)
    assert op.last_call.indices["W"] == 6 and op.last_call.indices["N"] == 3
    assert op.last_call.tensors["y"].shape == (8, 6)
    # forward returning [M, N] breaks [M, W] with W = 2 * N
    op.hook = lambda x, bias, out: torch.zeros(8, 3)
    with pytest.raises(SignatureError) as ei:
        op(f32(8, 3))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y",
                 "output y of forward, Tensor[odt, [M, W]]",
                 "expected shape (8, 6), got shape (8, 3)")


# ============================================================================ step 5: out buffer

@pytest.mark.parametrize("bad, fragments", [
    (lambda: torch.full((8, 5), 7.0), ("expected shape (8, 6), got shape (8, 5)",)),
    (lambda: torch.full((8, 6), 7.0, dtype=torch.float16), ("expected dtype float32", "float16")),
    (lambda: torch.full((6, 8), 7.0), ("expected shape (8, 6), got shape (6, 8)",)),
])
def test_step5_bad_out_fails_before_forward_runs(U, bad, fragments):
    op = U.RtAffineFwdOp()
    x = f32(8, 3)
    x0 = x.clone()
    out = bad()
    out0 = out.clone()
    with pytest.raises(SignatureError) as ei:
        op(x, out=out)
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y.buffer",
                 "out (the buffer of output y, Tensor[odt, [M, W]])", *fragments)
    assert op.calls == []                                    # forward never ran
    assert torch.equal(out, out0) and torch.equal(x, x0)     # nothing was written


def test_step5_out_on_another_device_and_not_a_tensor(U):
    op = U.RtAffineFwdOp()
    with pytest.raises(SignatureError) as ei:
        op(f32(8, 3), out=torch.empty(8, 6, device="meta"))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y.buffer",
                 "expected device cpu, got device meta")
    with pytest.raises(SignatureTypeError) as ei:
        op(f32(8, 3), out=[0.0] * 48)
    expect_error(ei, SignatureTypeError, "RtAffineFwdOp", "signature.outputs.y.buffer",
                 "expected a torch.Tensor, got list")
    assert op.calls == []


def test_step5_good_out_is_written_and_returned(U):
    op = U.RtAffineFwdOp()
    x = f32(8, 3)
    out = torch.empty(8, 6)
    r = op(x, out=out)
    assert r is out and op.calls[-1][2] is out
    torch.testing.assert_close(out, torch.cat([x, x], 1))
    assert op.last_call.has_out and dict(op.last_call.branch_key)["present(out)"] is True
    # `out` follows the inputs in forward's parameters: it may be passed positionally too
    out2 = torch.empty(8, 6)
    r = op(x, None, out2)
    assert r is out2 and op.calls[-1][2] is out2 and op.last_call.has_out


# ============================================================================ step 6: forward

def test_step6_forward_runs_exactly_once_with_the_callers_tensors(U):
    op = U.RtAffineFwdOp()
    x, bias = f32(8, 3), f32(3)
    op(x, bias)
    assert len(op.calls) == 1
    assert op.calls[0][0] is x and op.calls[0][1] is bias and op.calls[0][2] is None
    op(x)
    assert len(op.calls) == 2


# ============================================================================ step 7: outputs

def test_step7_wrong_shape_and_wrong_dtype(U):
    op = U.RtAffineFwdOp()
    op.hook = lambda x, b, o: torch.zeros(8, 7)
    with pytest.raises(SignatureError) as ei:
        op(f32(8, 3))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y",
                 "expected shape (8, 6), got shape (8, 7)")
    op.hook = lambda x, b, o: torch.zeros(8, 6, dtype=torch.float16)
    with pytest.raises(SignatureError) as ei:
        op(f32(8, 3))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y",
                 "expected dtype float32, got dtype torch.float16")
    # the output dtype is the dtype parameter, not the input's
    op16 = U.RtAffineFwdOp(odt=torch.float16)
    assert op16(f32(8, 3)).dtype == torch.float16


def test_step7_wrong_count(U):
    op = U.RtPairFwdOp()
    x = f32(4)
    y, n = op(x)
    assert torch.equal(y, x * 2) and int(n) == 4
    op.hook = lambda x: x * 2
    with pytest.raises(SignatureError) as ei:
        op(x)
    expect_error(ei, SignatureError, "RtPairFwdOp", "signature.outputs",
                 "the result (2 outputs: y, n)", "expected a tuple of 2 tensors, got Tensor")
    op.hook = lambda x: (x * 2, torch.tensor(4), x * 3)
    with pytest.raises(SignatureError) as ei:
        op(x)
    expect_error(ei, SignatureError, "RtPairFwdOp", "signature.outputs",
                 "expected a tuple of 2 tensors, got a tuple of 3 values")
    op.hook = lambda x: [x * 2, torch.tensor(4)]
    with pytest.raises(SignatureError) as ei:
        op(x)
    expect_error(ei, SignatureError, "RtPairFwdOp", "signature.outputs", "got list")
    # a single-output op returning a tuple
    aff = U.RtAffineFwdOp()
    aff.hook = lambda x, b, o: (torch.zeros(8, 6),)
    with pytest.raises(SignatureTypeError) as ei:
        aff(f32(8, 3))
    expect_error(ei, SignatureTypeError, "RtAffineFwdOp", "signature.outputs.y",
                 "expected a torch.Tensor, got tuple")


def test_step7_none_where_an_output_is_required(U):
    op = U.RtPairFwdOp()
    op.hook = lambda x: (x * 2, None)
    with pytest.raises(SignatureTypeError) as ei:
        op(f32(4))
    expect_error(ei, SignatureTypeError, "RtPairFwdOp", "signature.outputs.n",
                 "output n of forward, Tensor[int64, []]", "expected a torch.Tensor, got NoneType")
    aff = U.RtAffineFwdOp()
    aff.hook = lambda x, b, o: None
    with pytest.raises(SignatureTypeError) as ei:
        aff(f32(8, 3))
    expect_error(ei, SignatureTypeError, "RtAffineFwdOp", "signature.outputs.y",
                 "expected a torch.Tensor, got NoneType")


def test_step7_output_sharing_storage_with_an_input(U):
    op = U.RtPairFwdOp()
    op.hook = lambda x: (x, torch.tensor(4))
    with pytest.raises(SignatureError) as ei:
        op(f32(4))
    expect_error(ei, SignatureError, "RtPairFwdOp", "signature.outputs.y",
                 "expected a tensor that shares no storage with the inputs",
                 "got a tensor sharing storage with an input")
    op.hook = lambda x: (x.view(2, 2).view(4), torch.tensor(4))   # a view is no better
    with pytest.raises(SignatureError):
        op(f32(4))
    aff = U.RtAffineFwdOp()
    base = f32(8, 6)
    aff.hook = lambda x, b, o: base                    # x is a view of base
    with pytest.raises(SignatureError) as ei:
        aff(base[:, :3])
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y",
                 "sharing storage with an input")


def test_step7_alias_output_must_be_the_input_object(U):
    op = U.RtInplaceFwdOp()
    x = torch.zeros(4)
    r = op(x, torch.ones(4))
    assert r is x and torch.equal(x, torch.ones(4))
    for wrong in (lambda x, a, b: x.clone(), lambda x, a, b: x[:]):
        op.hook = wrong
        with pytest.raises(SignatureError) as ei:
            op(torch.zeros(4), torch.ones(4))
        expect_error(ei, SignatureError, "RtInplaceFwdOp", "signature.outputs.y",
                     "expected the input object x (alias), got another tensor")
    # without `inplace` x is not written: y is a new tensor and may not share x's storage
    nip = U.RtInplaceFwdOp(inplace=False)
    x = torch.zeros(4)
    r = nip(x, None, torch.ones(4))
    assert r is not x and torch.equal(x, torch.zeros(4))
    nip.hook = lambda x, a, b: x
    with pytest.raises(SignatureError) as ei:
        nip(torch.zeros(4), torch.ones(4))
    expect_error(ei, SignatureError, "RtInplaceFwdOp", "signature.outputs.y",
                 "sharing storage with an input")


def test_step7_out_output_must_be_the_out_tensor(U):
    op = U.RtAffineFwdOp()
    op.hook = lambda x, b, o: torch.zeros(8, 6)
    with pytest.raises(SignatureError) as ei:
        op(f32(8, 3), out=torch.empty(8, 6))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y",
                 "expected the out tensor, got another tensor")


def test_step7_output_on_another_device(U):
    op = U.RtPairFwdOp()
    op.hook = lambda x: (torch.zeros(4), torch.tensor(4, device="meta"))
    with pytest.raises(SignatureError) as ei:
        op(torch.empty(4, device="meta"))
    expect_error(ei, SignatureError, "RtPairFwdOp", "signature.outputs.y",
                 "expected device meta, got device cpu")


# ============================================================================ the order

def test_checks_run_in_the_seed_order(U):
    """A call violating two steps reports the earlier one."""
    aff = U.RtAffineFwdOp()
    # 1 before 4: x missing and bias of a wrong rank
    with pytest.raises(SignatureTypeError) as ei:
        aff(None, f32(2, 2))
    expect_error(ei, SignatureTypeError, "RtAffineFwdOp", "signature.inputs.x")
    # 2 before 4: the excluded combination, and x of a dtype outside T
    inp = U.RtInplaceFwdOp()
    with pytest.raises(SignatureError) as ei:
        inp(torch.zeros(4, dtype=torch.float64))
    expect_error(ei, SignatureError, "RtInplaceFwdOp", "signature.shape_rules.0", "excluded")
    # 4 before 5: the refinement fails and `out` is of a wrong shape
    with pytest.raises(SignatureError) as ei:
        aff(f32(7, 3), out=torch.empty(1))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.shape_rules.0")
    # 5 before 6: a bad `out` stops the call before forward
    with pytest.raises(SignatureError):
        aff(f32(8, 3), out=torch.empty(1))
    assert aff.calls == []
    # 6 before 7: forward runs once, then its result is rejected
    aff.hook = lambda x, b, o: torch.zeros(1)
    with pytest.raises(SignatureError) as ei:
        aff(f32(8, 3))
    expect_error(ei, SignatureError, "RtAffineFwdOp", "signature.outputs.y")
    assert len(aff.calls) == 1


# ============================================================================ empty writes

def test_empty_write_runs_no_forward_and_builds_the_outputs(U):
    op = U.RtAffineFwdOp(odt=torch.float16)
    y = op(f32(0, 3))                         # M = 0: the one written tensor has no elements
    assert op.calls == []
    assert y.shape == (0, 6) and y.dtype == torch.float16 and y.device.type == "cpu"
    y = op(f32(8, 0))                         # W = 2 * N = 0
    assert op.calls == [] and y.shape == (8, 0)
    assert op.last_call.tensors["y"].shape == (8, 0)
    # on the call device: meta inputs give meta outputs, with no forward
    y = op(torch.empty(0, 3, device="meta"))
    assert op.calls == [] and y.device.type == "meta" and y.shape == (0, 6)
    # `out` is returned unchanged, the same object
    out = torch.empty(0, 6, dtype=torch.float16)
    assert op(f32(0, 3), out=out) is out and op.calls == []


def test_empty_write_returns_a_written_input_unchanged(U):
    op = U.RtInplaceFwdOp()
    x = torch.zeros(0)
    assert op(x, torch.zeros(0)) is x
    assert op.calls == [] and op.last_call.written == ("x",)


def test_empty_inputs_with_non_empty_outputs_still_run_forward(U, monkeypatch):
    op = U.RtPairFwdOp()
    y, n = op(f32(0))                         # y is empty, but n (shape []) has one element
    assert len(op.calls) == 1 and int(n) == 0
    gemm = GemmFwdOp()
    seen = []
    real = gemm.forward
    monkeypatch.setattr(gemm, "forward", lambda a, b: seen.append(1) or real(a, b))
    h = torch.float16
    c = gemm(torch.ones(3, 0, dtype=h), torch.ones(0, 5, dtype=h))   # K = 0
    assert seen == [1] and torch.equal(c, torch.zeros(3, 5, dtype=h))
    c = gemm(torch.ones(0, 4, dtype=h), torch.ones(4, 5, dtype=h))   # M = 0: empty write
    assert seen == [1] and c.shape == (0, 5) and c.dtype == h
    # GemmFwdOp has no kernel for meta, yet an empty write on meta succeeds: none runs
    c = gemm(torch.ones(0, 4, dtype=h, device="meta"), torch.ones(4, 5, dtype=h, device="meta"))
    assert seen == [1] and c.device.type == "meta" and c.shape == (0, 5)


# ============================================================================ devices

def test_device_cpu_input_is_checked_and_takes_no_part_in_the_call_device(U):
    op = U.RtDeviceFwdOp(w=torch.ones(2))
    x = f32(3, 2)
    with pytest.raises(SignatureError) as ei:
        op(x, torch.arange(3, device="meta"))
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.inputs.idx.device",
                 "input idx (device: cpu): expected cpu, got meta")
    # x on meta, idx on cpu: accepted, the call device is meta
    y = op(torch.empty(3, 2, device="meta"), torch.arange(3))
    assert y.device.type == "meta" and op.last_call.device == torch.device("meta")


def test_contiguous_input_rejected_when_not_contiguous(U):
    op = U.RtDeviceFwdOp(w=torch.ones(2))
    x = f32(2, 3).t()
    with pytest.raises(SignatureError) as ei:
        op(x, torch.arange(3))
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.inputs.x.contiguous",
                 "input x (contiguous: true): expected a contiguous tensor, got strides (1, 3)")
    assert op.calls == []
    op(x.contiguous(), torch.arange(3))


def test_inputs_on_two_devices_are_rejected(U):
    with pytest.raises(SignatureError) as ei:
        GemmFwdOp()(torch.ones(2, 3, dtype=torch.float16),
                    torch.ones(3, 4, dtype=torch.float16, device="meta"))
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b",
                 "input b, device (all inputs on one device, as input a)",
                 "expected cpu, got meta")
    op = U.RtInplaceFwdOp()
    with pytest.raises(SignatureError) as ei:
        op(torch.zeros(4, device="meta"), torch.ones(4))
    expect_error(ei, SignatureError, "RtInplaceFwdOp", "signature.inputs.a",
                 "expected meta, got cpu")


def test_required_construction_time_tensor_missing_fails_at_construction(U):
    with pytest.raises(SignatureError) as ei:
        U.RtDeviceFwdOp()
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.params.w",
                 "construction-time tensor `w` is required")
    U.RtDeviceFwdOp(w=torch.ones(2))          # the optional one (s) may be left out


def test_construction_time_tensor_is_checked_and_solves_indices_at_construction(U):
    with pytest.raises(SignatureError) as ei:
        U.RtDeviceFwdOp(w=torch.ones(2, dtype=torch.float16))
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.params.w.dtype",
                 "construction-time tensor w, dtype float32", "expected float32, got float16")
    with pytest.raises(SignatureError) as ei:
        U.RtDeviceFwdOp(w=torch.ones(2), s=torch.ones(4))
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.params.s.shape",
                 "expected N = 2 (from construction-time tensor w), got 4")
    # N comes from w: a call with another N names w as its source
    op = U.RtDeviceFwdOp(w=torch.ones(2))
    with pytest.raises(SignatureError) as ei:
        op(f32(3, 4), torch.arange(3))
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.inputs.x.shape",
                 "expected N = 2 (from construction-time tensor w), got 4")
    assert op.check_call(f32(3, 2), torch.arange(3)) == {"M": 3, "N": 2, "T": "float32"}


def test_construction_time_refinement_fails_at_construction(U):
    with pytest.raises(SignatureError) as ei:
        U.RtDeviceFwdOp(w=torch.ones(3))      # N = 3 breaks `N % 2 == 0`, known from w
    expect_error(ei, SignatureError, "RtDeviceFwdOp", "signature.shape_rules.0",
                 "refinement `N % 2 == 0`", "N=3")


def test_construction_time_tensor_is_copied_to_the_call_device(U):
    w = torch.ones(2)
    op = U.RtDeviceFwdOp(w=w)
    y = op(torch.empty(3, 2, device="meta"), torch.arange(3))
    assert y.device.type == "meta"
    assert op.seen_w.device.type == "meta" and op.seen_w.dtype == torch.float32
    assert op.w.device.type == "meta"                  # written back to the instance
    assert op.last_call.tensors["w"].shape == (2,) and op.last_call.traffic["w"] == (1, 0)
    assert w.device.type == "cpu"                      # the caller's tensor is not moved


def test_call_device_from_a_construction_time_tensor_when_no_input_takes_part(U):
    op = U.RtHeldFwdOp(w=torch.ones(4, device="meta"))
    y = op(torch.arange(4))                     # idx is `device: cpu`: it takes no part
    assert y.device.type == "meta" and op.last_call.device == torch.device("meta")
    op.wrong_device = True                      # an output on cpu is now on the wrong device
    with pytest.raises(SignatureError) as ei:
        op(torch.arange(4))
    expect_error(ei, SignatureError, "RtHeldFwdOp", "signature.outputs.y",
                 "expected device meta, got device cpu")


def test_output_declared_on_the_cpu_is_checked_there(U):
    """An output that declares `device: cpu` is on the CPU whatever the call device: the
    check expects it there, and the empty-write path allocates it there."""
    op = U.RtCpuOutFwdOp()
    y, n = op(torch.ones(4, device="meta"))
    assert y.device.type == "meta" and n.device.type == "cpu" and n.shape == (4,)
    y, n = op(torch.ones(0, device="meta"))            # nothing written: no forward
    assert y.device.type == "meta" and n.device.type == "cpu" and n.shape == (0,)
    op.n_on = "meta"                                  # n on the call device: wrong
    with pytest.raises(SignatureError) as ei:
        op(torch.ones(4, device="meta"))
    expect_error(ei, SignatureError, "RtCpuOutFwdOp", "signature.outputs.n",
                 "expected device cpu, got device meta")


def test_default_call_device_is_the_accelerators_current_device(monkeypatch):
    """With no tensor to decide, the call device is the current device of the accelerator
    `torch.accelerator` reports (any backend), None without one; a torch without
    `torch.accelerator` asks CUDA."""
    import types

    from opspec.ops.op import _default_device

    def accelerator(kind, index, available=True, new_name=True):
        ns = types.SimpleNamespace(is_available=lambda: available,
                                   current_accelerator=lambda: kind and torch.device(kind))
        setattr(ns, "current_device_index" if new_name else "current_device_idx",
                lambda: index)
        return ns

    monkeypatch.setattr(torch, "accelerator", accelerator("xpu", 1))
    assert _default_device() == torch.device("xpu", 1)
    monkeypatch.setattr(torch, "accelerator", accelerator("cuda", 2, new_name=False))
    assert _default_device() == torch.device("cuda", 2)          # torch 2.6's name
    monkeypatch.setattr(torch, "accelerator", accelerator("xpu", 0, available=False))
    assert _default_device() is None
    monkeypatch.setattr(torch, "accelerator", accelerator(None, 0))
    assert _default_device() is None
    monkeypatch.delattr(torch, "accelerator")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert _default_device() == torch.device("cuda", 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _default_device() is None


# ============================================================================ construction

def test_parameter_types_are_checked_at_construction(U):
    P = U.RtParamsFwdOp
    P(flag=True)
    with pytest.raises(SignatureTypeError) as ei:
        P(flag=1)
    expect_error(ei, SignatureTypeError, "RtParamsFwdOp", "signature.params.flag",
                 "parameter `flag` has type `bool`; got 1")
    with pytest.raises(SignatureError) as ei:
        P(flag=True, mode="slow")
    expect_error(ei, SignatureError, "RtParamsFwdOp", "signature.params.mode",
                 "parameter `mode` has type `'fast' | 'exact'`; got 'slow'")
    with pytest.raises(SignatureTypeError) as ei:
        P(flag=True, mode=3)
    expect_error(ei, SignatureTypeError, "RtParamsFwdOp", "signature.params.mode", "got 3")
    with pytest.raises(SignatureError) as ei:
        P(flag=True, odt=torch.float64)
    expect_error(ei, SignatureError, "RtParamsFwdOp", "signature.params.odt",
                 "parameter `odt` has type `float16 | float32`; got torch.float64")
    with pytest.raises(SignatureTypeError) as ei:
        P(flag=True, k="2")
    expect_error(ei, SignatureTypeError, "RtParamsFwdOp", "signature.params.k", "got '2'")
    with pytest.raises(SignatureTypeError) as ei:
        P(flag=True, cap=2.5)
    expect_error(ei, SignatureTypeError, "RtParamsFwdOp", "signature.params.cap",
                 "`int | None`", "got 2.5")
    # int | None takes None and an int
    op = P(flag=False, cap=None)
    assert op(f32(3, 2)).shape == (3, 2) and op.last_call.indices["cap"] is None
    op = P(flag=False, cap=4, odt=torch.float16)
    assert op(f32(3, 2)).dtype == torch.float16 and op.last_call.indices["cap"] == 4
    assert op.last_call.indices["odt"] == "float16"


def test_parameter_not_assigned_before_op_init_fails(tmp_path):
    (tmp_path / "toy.yaml").write_text(textwrap.dedent("""\
        RtUnassignedFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim}
            params:
              k: {type: int}
            inputs:
              x: {dtype: float32, shape: "[M, k]"}
            outputs:
              y: {dtype: float32, shape: "[M]"}
          workloads:
          - {M: 4, k: 2, label: small}
          roofline: {flops: "M"}
        """))
    mod = load_module(tmp_path, "rt_unassigned", '''
        from opspec.ops.op import Op
        class RtUnassignedFwdOp(Op):
            manifest = "toy.yaml"
            def __init__(self, k, *, target=None):
                super().__init__(target=target)     # forgot self.k = k
            def forward(self, x):
                return x.sum(1)
        ''')
    with pytest.raises(SignatureTypeError) as ei:
        mod.RtUnassignedFwdOp(2)
    assert "RtUnassignedFwdOp: parameter `k` was not assigned before Op.__init__" in str(ei.value)


def test_construction_time_refinements_fail_at_construction(U):
    P = U.RtParamsFwdOp
    with pytest.raises(SignatureError) as ei:
        P(flag=True, k=0)
    msg = expect_error(ei, SignatureError, "RtParamsFwdOp", "signature.shape_rules.0",
                       "refinement `k > 0` does not hold with k=0")
    # Nothing is bound yet at construction: the value read is the only one shown.
    assert "bound so far" not in msg
    with pytest.raises(SignatureError) as ei:
        P(flag=True, cap=0)
    expect_error(ei, SignatureError, "RtParamsFwdOp", "signature.shape_rules.1",
                 # the rule as folded on this branch (present(cap) is true)
                 "refinement `cap.value >= 1` does not hold with cap=0")
    # a refinement that reads a call-time index is deferred to the call
    op = P(flag=True, cap=2)
    op(f32(2, 2))
    with pytest.raises(SignatureError) as ei:
        op(f32(3, 2))
    expect_error(ei, SignatureError, "RtParamsFwdOp", "signature.shape_rules.2",
                 "refinement `M <= cap.value`", "M=3")
    # an int parameter in a shape is checked, not solved
    with pytest.raises(SignatureError) as ei:
        P(flag=True, k=3)(f32(2, 2))
    expect_error(ei, SignatureError, "RtParamsFwdOp", "signature.inputs.x.shape",
                 "input x, axis 1 of [M, k]", "expected k = 3, got 2")


def test_a_failed_call_keeps_the_previous_record(U):
    op = U.RtAffineFwdOp()
    with pytest.raises(RuntimeError, match="RtAffineFwdOp has completed no call yet"):
        op.last_call
    op(f32(8, 3))
    first = op.last_call
    with pytest.raises(SignatureError):
        op(f32(7, 3))
    op.hook = lambda x, b, o: None
    with pytest.raises(SignatureTypeError):
        op(f32(16, 3))
    assert op.last_call == first and op.last_call.indices["M"] == 8


def test_a_spec_with_errors_imports_but_construction_lists_the_errors(tmp_path):
    """Lenient loading: the class is defined; constructing it names each problem instead of
    running a spec whose broken declaration was dropped."""
    (tmp_path / "toy.yaml").write_text(textwrap.dedent("""\
        RtBrokenShapeFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim}
            inputs:
              x: {dtype: float32, shape: "[M, Q]"}
            outputs:
              y: {dtype: float32, shape: "[M]"}
          workloads:
          - {M: 4, label: small}
          roofline: {flops: "M"}
        RtNoRooflineFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim}
            inputs:
              x: {dtype: float32, shape: "[M]"}
            outputs:
              y: {dtype: float32, shape: "[M]"}
          workloads:
          - {M: 4, label: small}
        """))
    mod = load_module(tmp_path, "rt_broken", '''
        from opspec.ops.op import Op
        class RtBrokenShapeFwdOp(Op):
            manifest = "toy.yaml"
            def forward(self, x):
                return x[:, 0]
        class RtNoRooflineFwdOp(Op):
            manifest = "toy.yaml"
            def forward(self, x):
                return x
        ''')
    with pytest.raises(OpspecError) as ei:
        mod.RtBrokenShapeFwdOp()
    msg = str(ei.value)
    assert msg.startswith("RtBrokenShapeFwdOp: its spec in ") and "has errors" in msg
    assert "signature.inputs.x.shape" in msg and "unknown name `Q`" in msg
    with pytest.raises(OpspecError) as ei:
        mod.RtNoRooflineFwdOp()
    assert "missing required field `roofline`" in str(ei.value)


# -- refused plans, absent inputs, errors' types -------------------------------------------------

def test_an_op_whose_spec_is_refuted_is_not_constructed(tmp_path):
    import textwrap

    from opspec.ops import Op
    from opspec.schema.errors import SpecError

    (tmp_path / "toy.yaml").write_text(textwrap.dedent("""
        RefutedFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, N: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M]"}
            outputs:
              y: {dtype: T, shape: "[N]"}
          workloads:
          - {M: 2, N: 2, dtype_cases: [{T: float32}], label: t}
          roofline: {flops: "M"}
    """))

    class RefutedFwdOp(Op):
        manifest = str(tmp_path / "toy.yaml")

        def forward(self, x):
            return x

    with pytest.raises(SpecError, match=r"(?s)RefutedFwdOp: its spec is refuted.*unsolvable.*`N`"):
        RefutedFwdOp()


def test_last_call_before_any_call_is_an_opspec_error():
    from opspec.ops import SiluAndMulFwdOp
    from opspec.schema.errors import NoCallError, OpspecError

    with pytest.raises(NoCallError) as info:
        SiluAndMulFwdOp().last_call
    assert isinstance(info.value, OpspecError) and isinstance(info.value, RuntimeError)


def test_a_key_lenient_loading_ignored_is_warned_about(tmp_path):
    """An unknown key in a user's spec is ignored at import (lenient mode), so a misspelt
    `contiguous` would drop its check silently: defining the class warns, naming it."""
    from opspec.schema.errors import SpecWarning

    (tmp_path / "toy.yaml").write_text(textwrap.dedent("""\
        RtTypoFwdOp:
          family: toy
          status: implemented
          signature:
            forall: {M: Dim}
            inputs:
              x: {dtype: float32, shape: "[M]", contiguos: true}
            outputs:
              y: {dtype: float32, shape: "[M]"}
          workloads:
          - {M: 4, label: small}
          roofline: {flops: "M"}
        """))
    with pytest.warns(SpecWarning) as rec:
        mod = load_module(tmp_path, "rt_typo", '''
            from opspec.ops.op import Op
            class RtTypoFwdOp(Op):
                manifest = "toy.yaml"
                def forward(self, x):
                    return x + 1
            ''')
    (w,) = [r for r in rec if issubclass(r.category, SpecWarning)]
    msg = str(w.message)
    assert msg.startswith("RtTypoFwdOp: its spec loaded with warnings (an unknown key is "
                          "ignored here; `opspec prove` refuses it):")
    assert ("toy.yaml:7:41: RtTypoFwdOp signature.inputs.x.contiguos: warning[parse]: "
            "unknown field `contiguos` in signature.inputs.x; did you mean `contiguous`?") in msg
    # Pointed at the class statement of the user's module.
    assert w.filename.endswith("rt_typo.py") and w.lineno == 3
    # The op still works, without the check the typo dropped.
    assert mod.RtTypoFwdOp()(torch.arange(4.0)).tolist() == [1.0, 2.0, 3.0, 4.0]
