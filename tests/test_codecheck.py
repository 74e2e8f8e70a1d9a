"""`code`: an implemented op's class against its spec."""

from __future__ import annotations

import pytest

from opspec.manifest import load_bundled
from opspec.ops.codecheck import check_class
from opspec.schema.elaborate import elaborate, elaborate_adts


@pytest.fixture(scope="module")
def gemm_spec():
    m = load_bundled(strict=True)
    adts, _ = elaborate_adts(m.adts)
    spec, diags = elaborate(m.specs["GemmFwdOp"], adts)
    assert diags == []
    return spec, m.specs["GemmFwdOp"]


def _fake(name="GemmFwdOp", init=None, forward=None, boundary=("opspec::gemm_fwd_op",)):
    ns = {"compile_op_names": boundary, "injected_parameters": ()}
    ns["__init__"] = init or (lambda self, trans_a=False, trans_b=False, *, target=None: None)
    ns["forward"] = forward or (lambda self, a, b: None)
    return type(name, (), ns)


def test_the_bundled_classes_agree_with_their_specs(gemm_spec):
    from opspec.ops import GemmFwdOp

    spec, loaded = gemm_spec
    assert check_class(GemmFwdOp, spec, loaded.pos) == []


@pytest.mark.parametrize("init, needle", [
    (lambda self, trans_b=False, trans_a=False, *, target=None: None,
     "__init__ takes ['trans_b', 'trans_a'], the spec's params are ['trans_a', 'trans_b']"),
    (lambda self, trans_a, trans_b=False, *, target=None: None,
     "`trans_a` has no default in __init__; the spec's default is False"),
    (lambda self, trans_a=True, trans_b=False, *, target=None: None,
     "`trans_a` defaults to True in __init__, to False in the spec"),
    (lambda self, trans_a=False, *, trans_b=False, target=None: None,
     "`trans_b` is keyword-only in __init__ but positional in the spec"),
    (lambda self, trans_a=False, trans_b=False: None,
     "__init__ must take the keyword-only `target=None`"),
])
def test_init_against_params(gemm_spec, init, needle):
    spec, loaded = gemm_spec
    (d,) = check_class(_fake(init=init), spec, loaded.pos)
    assert d.check == "code" and d.op == "GemmFwdOp" and needle in d.message
    assert d.path.startswith("signature.params")
    assert d.pos is not None and d.pos.file.endswith("gemm.yaml")


def test_forward_against_inputs(gemm_spec):
    spec, loaded = gemm_spec
    (d,) = check_class(_fake(forward=lambda self, b, a: None), spec, loaded.pos)
    assert d.check == "code" and d.path == "signature.inputs"
    assert "forward takes ['b', 'a']" in d.message and "['a', 'b']" in d.message


def test_compile_boundary_names(gemm_spec):
    spec, loaded = gemm_spec
    (d,) = check_class(_fake(boundary=()), spec, loaded.pos)
    assert d.check == "code" and "compile_op_names is empty" in d.message


def test_prove_runs_code_checks_only_for_the_bundled_manifest(capsys):
    from opspec.cli.main import main

    assert main(["prove", "--op", "GemmFwdOp", "--op", "SiluAndMulFwdOp", "--format",
                 "json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    checked = {s["op"]: s["code_checks"].split(";")[0] for s in doc["specs"]}
    assert checked == {"GemmFwdOp": "checked", "SiluAndMulFwdOp": "checked"}
