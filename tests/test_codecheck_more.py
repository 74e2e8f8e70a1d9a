"""`code`, continued: composition against delegate_types/kernel_types, `ref_api` against
what is installed, and the family module's `__all__` against the manifest.

Each broken case asserts the check id, the declaration path (and its line in the spec), and
the values the diagnostic reports as its counterexample.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
import types
from pathlib import Path

import pytest

from opspec.ops.codecheck import (
    check_class, check_composition, check_family_exports, check_ref_api, import_family_module,
)
from opspec.schema.elaborate import elaborate, elaborate_adts
from opspec.schema.loader import load_paths

# -- composition vs delegate_types / kernel_types -------------------------------------------

COMPOSITE = """\
PairFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M, 4 * N]"}
    outputs:
      y: {dtype: T, shape: "[M, N]"}
  composition:
    kind: composite
    stages:
    - {name: first, op: SiluAndMulFwdOp}
    - {name: second, op: SiluAndMulFwdOp}
    - {name: fixup, kernel: fixup_kernel, optional: true}
  workloads:
  - {M: 2, N: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M * N"}
PlainFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M"}
"""

# 1-based lines of COMPOSITE: the stages, and the op keys.
LINE = {"composition.stages.0": 13, "composition.stages.1": 14, "composition.stages.2": 15,
        "composition.stages": 12}


class FixupKernel:
    """A stand-in kernel class (only its name is read)."""


class OtherKernel:
    """Another stand-in kernel class."""


def _elaborated(tmp_path: Path, text: str, name: str):
    (tmp_path / "toy.yaml").write_text(text)
    m = load_paths([tmp_path / "toy.yaml"], strict=True)
    adts, _ = elaborate_adts(m.adts)
    spec, diags = elaborate(m.specs[name], adts)
    assert not [d for d in diags if d.is_error], [d.render() for d in diags]
    return spec, m.specs[name]


@pytest.fixture
def pair(tmp_path):
    return _elaborated(tmp_path, COMPOSITE, "PairFwdOp")


def _composite(delegates, kernels=None, name="PairFwdOp"):
    return type(name, (), {
        "__init__": lambda self, *, target=None: None,
        "forward": lambda self, x: None,
        "compile_op_names": (), "injected_parameters": (),
        "delegate_types": delegates,
        "kernel_types": {"fixup_kernel": FixupKernel} if kernels is None else kernels,
    })


def _silu():
    from opspec.ops import SiluAndMulFwdOp
    return SiluAndMulFwdOp


def _gemm():
    from opspec.ops import GemmFwdOp
    return GemmFwdOp


def test_a_conforming_composite_has_no_code_diagnostic(pair):
    spec, loaded = pair
    cls = _composite({"first": _silu(), "second": _silu()})
    assert check_class(cls, spec, loaded.pos) == []


@pytest.mark.parametrize("delegates, kernels, path, needle, values", [
    # an `op:` stage that delegate_types does not declare
    (lambda: {"first": _silu()}, None, "composition.stages.1",
     "stage `second` runs SiluAndMulFwdOp, but delegate_types has no key `second` "
     "(it declares ['first'])",
     {"stage": "second", "stage op": "SiluAndMulFwdOp",
      "delegate_types": {"first": "SiluAndMulFwdOp"}}),
    # an `op:` stage mapped to the class of another spec
    (lambda: {"first": _silu(), "second": _gemm()}, None, "composition.stages.1",
     "stage `second` runs SiluAndMulFwdOp, but delegate_types maps `second` to GemmFwdOp",
     {"stage": "second", "stage op": "SiluAndMulFwdOp", "delegate type": "GemmFwdOp"}),
    # a delegate type that no stage uses
    (lambda: {"first": _silu(), "second": _silu(), "third": _gemm()}, None,
     "composition.stages",
     "delegate_types declares `third` (GemmFwdOp), which no stage of the composition names "
     "(its `op:` stages are ['first', 'second'])",
     {"delegate": "third", "delegate type": "GemmFwdOp", "op stages": ["first", "second"]}),
    # the delegate types in another order than the stages
    (lambda: {"second": _silu(), "first": _silu()}, None, "composition.stages",
     "delegate_types lists the stages in the order ['second', 'first'], but the composition "
     "runs them in the order ['first', 'second'] (delegate_types follows the stage order)",
     {"delegate_types": ["second", "first"], "op stages": ["first", "second"]}),
    # a `kernel:` stage whose kernel kernel_types does not declare
    (lambda: {"first": _silu(), "second": _silu()}, {"other_kernel": OtherKernel},
     "composition.stages.2",
     "stage `fixup` runs the kernel `fixup_kernel`, but kernel_types has no key "
     "`fixup_kernel` (it declares ['other_kernel'])",
     {"stage": "fixup", "stage kernel": "fixup_kernel", "kernel_types": ["other_kernel"]}),
    # a `kernel:` stage declared as a delegate
    (lambda: {"first": _silu(), "second": _silu(), "fixup": _gemm()}, None,
     "composition.stages.2",
     "delegate_types declares `fixup` (GemmFwdOp), but stage `fixup` runs the kernel "
     "`fixup_kernel`, not an op",
     {"stage": "fixup", "stage kernel": "fixup_kernel", "delegate type": "GemmFwdOp"}),
])
def test_composition_against_delegate_and_kernel_types(pair, delegates, kernels, path,
                                                       needle, values):
    spec, loaded = pair
    (d,) = check_class(_composite(delegates(), kernels), spec, loaded.pos)
    assert d.check == "code" and d.op == "PairFwdOp" and d.path == path
    assert d.message == f"PairFwdOp: {needle}"
    assert dict(d.counterexample) == {"class": "PairFwdOp", **values}
    assert d.pos is not None and d.pos.file.endswith("toy.yaml")
    assert d.pos.line == LINE[path]


def test_delegate_types_on_an_op_without_composition(tmp_path):
    spec, loaded = _elaborated(tmp_path, COMPOSITE, "PlainFwdOp")
    cls = type("PlainFwdOp", (), {
        "__init__": lambda self, *, target=None: None, "forward": lambda self, x: None,
        "compile_op_names": ("opspec::toy_plain_fwd_op",), "injected_parameters": (),
        "delegate_types": {"inner": _silu()}})
    (d,) = check_composition(cls, spec, loaded.pos)
    assert d.check == "code" and d.op == "PlainFwdOp" and d.path == "composition"
    assert "delegate_types declares the stages ['inner'], but the spec has no composition" \
        in d.message
    assert dict(d.counterexample) == {"class": "PlainFwdOp", "delegate_types": ["inner"],
                                      "stages": []}
    assert d.pos.line == 19  # the op's key: the spec has no composition to point at


def test_delegate_types_that_is_no_mapping(pair):
    spec, loaded = pair
    diags = check_class(_composite([_silu(), _silu()]), spec, loaded.pos)
    assert [(d.check, d.path) for d in diags] == [
        ("code", "composition"), ("code", "composition.stages.0"),
        ("code", "composition.stages.1")]
    assert "delegate_types is a list, not a mapping of names to classes" in diags[0].message
    assert diags[0].counterexample["delegate_types"].startswith("[<class ")
    assert diags[1].counterexample == {"class": "PairFwdOp", "stage": "first",
                                       "stage op": "SiluAndMulFwdOp", "delegate_types": {}}


def test_kernel_stages_in_another_order_than_kernel_types(tmp_path):
    text = COMPOSITE.replace(
        "    - {name: fixup, kernel: fixup_kernel, optional: true}\n",
        "    - {name: fixup, kernel: fixup_kernel, optional: true}\n"
        "    - {name: tail, kernel: other_kernel}\n")
    spec, loaded = _elaborated(tmp_path, text, "PairFwdOp")
    cls = _composite({"first": _silu(), "second": _silu()},
                     {"other_kernel": OtherKernel, "fixup_kernel": FixupKernel})
    (d,) = check_class(cls, spec, loaded.pos)
    assert d.check == "code" and d.path == "composition.stages"
    assert "kernel_types lists the kernels of the `kernel:` stages in the order " \
           "['other_kernel', 'fixup_kernel'], but the composition uses them in the order " \
           "['fixup_kernel', 'other_kernel']" in d.message
    assert dict(d.counterexample) == {"class": "PairFwdOp",
                                      "kernel_types": ["other_kernel", "fixup_kernel"],
                                      "kernel stages": ["fixup_kernel", "other_kernel"]}


def test_a_composite_with_a_compile_boundary_and_bad_stages(pair):
    """Several disagreements at once: each its own diagnostic, none hides another."""
    spec, loaded = pair
    cls = _composite({"second": _gemm()}, {})
    cls.compile_op_names = ("opspec::toy_pair_fwd_op",)
    found = {(d.path, d.counterexample.get("stage") if d.counterexample else None)
             for d in check_class(cls, spec, loaded.pos)}
    assert found == {("signature.inputs", None), ("composition.stages.0", "first"),
                     ("composition.stages.1", "second"), ("composition.stages.2", "fixup")}


# -- ref_api ---------------------------------------------------------------------------------

REF = """\
RefFwdOp:
  family: toy
  status: implemented
  ref_api: {ref}
  signature:
    forall: {{M: Dim, T: "DType[float32]"}}
    inputs:
      x: {{dtype: T, shape: "[M]"}}
    outputs:
      y: {{dtype: T, shape: "[M]"}}
  workloads:
  - {{M: 2, dtype_cases: [{{T: float32}}], label: tiny}}
  roofline: {{flops: "M"}}
"""


def _ref(tmp_path: Path, ref: str):
    (tmp_path / "toy.yaml").write_text(REF.format(ref=ref))
    m = load_paths([tmp_path / "toy.yaml"], strict=True)
    loaded = m.specs["RefFwdOp"]
    return check_ref_api("RefFwdOp", loaded.spec.ref_api, loaded.pos, prefixes=PREFIXES)


#: As the bundled manifest declares them (manifest/types.yaml), with a package that is not
#: installed.
PREFIXES = ("torch.", "vllm.", "flashinfer.", "opspec.", "opspec_no_such_package.")


@pytest.mark.parametrize("ref", ["torch.matmul", "torch.nn.functional.relu",
                                 "torch.nn.functional.silu", "opspec.ops.gemm.GemmFwdOp",
                                 "opspec.kernels.gemm_impl.GemmCall", "none"])
def test_ref_api_that_exists(tmp_path, ref):
    assert _ref(tmp_path, ref) == ([], None)


@pytest.mark.parametrize("ref, message, values", [
    ("torch.nn.functional.reluu",
     "ref_api `torch.nn.functional.reluu` names no attribute: module torch.nn.functional has "
     "no attribute `reluu`", {"found": "torch.nn.functional", "missing": "reluu"}),
    ("torch.nn.functionl.relu",
     "ref_api `torch.nn.functionl.relu` names no attribute: module torch.nn has no attribute "
     "`functionl`", {"found": "torch.nn", "missing": "functionl"}),
    ("torch.matmull",
     "ref_api `torch.matmull` names no attribute: module torch has no attribute `matmull`",
     {"found": "torch", "missing": "matmull"}),
    ("torch.matmul.forward",
     "ref_api `torch.matmul.forward` names no attribute: builtin_function_or_method "
     "torch.matmul has no attribute `forward`", {"found": "torch.matmul", "missing": "forward"}),
    ("opspec.ops.gemm.GemvFwdOp",
     "ref_api `opspec.ops.gemm.GemvFwdOp` names no attribute: module opspec.ops.gemm has no "
     "attribute `GemvFwdOp`", {"found": "opspec.ops.gemm", "missing": "GemvFwdOp"}),
])
def test_ref_api_naming_nothing(tmp_path, ref, message, values):
    diags, note = _ref(tmp_path, ref)
    (d,) = diags
    assert note is None
    assert d.check == "code" and d.op == "RefFwdOp" and d.path == "ref_api"
    assert d.message == message
    assert dict(d.counterexample) == {"ref_api": ref, **values}
    assert d.pos is not None and d.pos.line == 4 and d.pos.column == 12


@pytest.mark.parametrize("ref", ["matmul", "torch..matmul", '"torch.matmul()"',
                                 '"torch.nn.functional.relu x"'])
def test_ref_api_that_is_no_qualified_name(tmp_path, ref):
    (d,), note = _ref(tmp_path, ref)
    assert note is None and d.check == "code" and d.path == "ref_api" and d.pos.line == 4
    assert "is not a fully qualified name (`module.attribute`" in d.message
    assert dict(d.counterexample) == {"ref_api": ref.strip('"')}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_ref_api_of_a_module_not_installed_is_skipped_with_a_note(tmp_path):
    assert _ref(tmp_path, "vllm._custom_ops.silu_and_mul") == (
        [], "ref_api vllm._custom_ops.silu_and_mul not checked: module vllm is not installed "
            "here")
    assert _ref(tmp_path, "opspec_no_such_package.fn") == (
        [], "ref_api opspec_no_such_package.fn not checked: module opspec_no_such_package is "
            "not installed here")


def test_ref_api_of_a_module_that_fails_to_import_is_skipped_with_a_note():
    def broken(name):
        raise RuntimeError("needs a GPU driver")

    assert check_ref_api("RefFwdOp", "flashinfer.activation.silu_and_mul",
                         import_module=broken, prefixes=PREFIXES) == (
        [], "ref_api flashinfer.activation.silu_and_mul not checked: module flashinfer cannot "
            "be imported here (RuntimeError: needs a GPU driver)")


# -- the family module's __all__ ------------------------------------------------------------

FAMILY = """\
AlphaFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M"}
BetaFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M"}
GammaFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M"}
"""

OTHER = """\
DeltaFwdOp:
  family: other
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M"}
"""


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A manifest of two families, and op classes (Op subclasses, not bound to a spec)."""
    from opspec.ops.op import Op

    root = tmp_path_factory.mktemp("fam")
    (root / "toy.yaml").write_text(FAMILY)
    (root / "other.yaml").write_text(OTHER)
    m = load_paths([root], strict=True)
    classes = {n: type(n, (Op,), {}) for n in ("AlphaFwdOp", "BetaFwdOp", "GammaFwdOp",
                                               "DeltaFwdOp")}

    class StrayFwdOp(Op):  # an op class no spec names
        pass

    classes["StrayFwdOp"] = StrayFwdOp
    return m, classes


def _module(classes, exported, **extra):
    mod = types.ModuleType("opspec.ops.toy")
    for n, c in classes.items():
        setattr(mod, n, c)
    for k, v in extra.items():
        setattr(mod, k, v)
    if exported is not None:
        mod.__all__ = list(exported)
    return mod


def test_a_family_module_that_agrees_with_the_manifest(family):
    m, classes = family
    mod = _module(classes, ["AlphaFwdOp", "BetaFwdOp", "helper"], helper=lambda: None)
    assert check_family_exports(m, "toy", mod) == []


def test_an_implemented_spec_missing_from_all(family):
    m, classes = family
    (d,) = check_family_exports(m, "toy", _module(classes, ["AlphaFwdOp"]))
    assert d.check == "code" and d.op == "BetaFwdOp" and d.path == "family"
    assert d.message == ("the spec is implemented, but the __all__ of opspec.ops.toy (family "
                         "`toy`) does not export BetaFwdOp; it exports ['AlphaFwdOp']")
    assert dict(d.counterexample) == {"family": "toy", "module": "opspec.ops.toy",
                                      "__all__": ["AlphaFwdOp"], "missing": "BetaFwdOp"}
    assert d.pos.file.endswith("toy.yaml") and (d.pos.line, d.pos.column) == (14, 11)


def test_an_exported_class_without_a_spec(family):
    m, classes = family
    (d,) = check_family_exports(m, "toy", _module(classes, ["AlphaFwdOp", "BetaFwdOp",
                                                            "StrayFwdOp"]))
    assert d.check == "code" and d.op is None and d.path is None
    assert d.message == ("opspec.ops.toy (family `toy`) exports the op class StrayFwdOp in its "
                         "__all__, but the manifest has no spec StrayFwdOp: an exported op "
                         "class needs a spec of its family")
    assert dict(d.counterexample) == {"family": "toy", "module": "opspec.ops.toy",
                                      "class": "StrayFwdOp"}
    assert d.pos is not None and d.pos.file == __file__  # where the class is defined
    assert Path(d.pos.file).read_text().splitlines()[d.pos.line - 1].strip() == \
        "class StrayFwdOp(Op):  # an op class no spec names"


def test_a_spec_only_spec_in_all(family):
    m, classes = family
    (d,) = check_family_exports(m, "toy", _module(classes, ["AlphaFwdOp", "BetaFwdOp",
                                                            "GammaFwdOp"]))
    assert d.check == "code" and d.op == "GammaFwdOp" and d.path == "status"
    assert d.message.startswith("opspec.ops.toy (family `toy`) exports GammaFwdOp in its "
                                "__all__, but the spec is spec-only")
    assert dict(d.counterexample) == {"family": "toy", "module": "opspec.ops.toy",
                                      "class": "GammaFwdOp", "status": "spec-only"}
    assert d.pos.line == 27


def test_a_class_of_another_family_in_all(family):
    m, classes = family
    (d,) = check_family_exports(m, "toy", _module(classes, ["AlphaFwdOp", "BetaFwdOp",
                                                            "DeltaFwdOp"]))
    assert d.check == "code" and d.op == "DeltaFwdOp" and d.path == "family"
    assert "opspec.ops.toy exports DeltaFwdOp in its __all__, but the spec's family is " \
           "`other`, not `toy`" in d.message
    assert dict(d.counterexample) == {"family": "toy", "module": "opspec.ops.toy",
                                      "class": "DeltaFwdOp", "spec family": "other"}
    assert d.pos.file.endswith("other.yaml") and d.pos.line == 2


def test_a_name_in_all_the_module_does_not_define(family):
    m, classes = family
    mod = _module({k: v for k, v in classes.items() if k != "BetaFwdOp"},
                  ["AlphaFwdOp", "BetaFwdOp", "GoneFwdOp"])
    diags = check_family_exports(m, "toy", mod)
    assert [(d.op, d.path, d.counterexample["name"]) for d in diags] == [
        ("BetaFwdOp", "family", "BetaFwdOp"), (None, None, "GoneFwdOp")]
    assert diags[1].message == ("the __all__ of opspec.ops.toy (family `toy`) names "
                                "GoneFwdOp, which the module does not define")


def test_a_family_module_that_is_missing_or_has_no_all(family):
    m, classes = family
    diags = check_family_exports(m, "toy", None, "no such module")
    assert [(d.op, d.path) for d in diags] == [("AlphaFwdOp", "family"), ("BetaFwdOp", "family")]
    assert "the family module opspec.ops.toy cannot be imported (no such module); it must " \
           "export AlphaFwdOp in its __all__" in diags[0].message
    assert dict(diags[0].counterexample) == {"family": "toy", "module": "opspec.ops.toy",
                                             "missing": "AlphaFwdOp"}
    diags = check_family_exports(m, "toy", _module(classes, None))
    assert [(d.op, d.path) for d in diags] == [("AlphaFwdOp", "family"), ("BetaFwdOp", "family")]
    assert "has no __all__ list of names" in diags[0].message
    assert diags[0].counterexample["__all__"] is None
    # a family whose specs are all spec-only needs no module
    assert check_family_exports(m, "nothing", None, "no such module") == []


def test_import_family_module():
    mod, why = import_family_module("gemm")
    assert why is None and mod.__name__ == "opspec.ops.gemm"
    assert import_family_module("no_such_family") == (None, "no such module")
    assert import_family_module("bad-name") == (None, "`bad-name` is not a module name")


def test_the_bundled_families_agree_with_their_modules():
    from opspec.manifest import load_bundled

    m = load_bundled(strict=True)
    for family in ("gemm", "elementwise"):
        mod, why = import_family_module(family)
        assert why is None
        found = [d for d in check_family_exports(m, family, mod)
                 if d.op in ("GemmFwdOp", "SiluAndMulFwdOp")]
        assert found == [], [d.render() for d in found]


# -- through `opspec prove` ------------------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_prove_says_which_ref_api_was_not_checked(capsys):
    from opspec.cli.main import main

    assert main(["prove", "--op", "SiluAndMulFwdOp", "--op", "GemmFwdOp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        "code checks: 2 run",
        "  SiluAndMulFwdOp: ref_api vllm._custom_ops.silu_and_mul not checked: module vllm "
        "is not installed here"]
    assert main(["prove", "--op", "SiluAndMulFwdOp", "--op", "GemmFwdOp", "--format",
                 "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {s["op"]: s["code_checks"] for s in doc["specs"]} == {
        "GemmFwdOp": "checked",
        "SiluAndMulFwdOp": "checked; ref_api vllm._custom_ops.silu_and_mul not checked: "
                           "module vllm is not installed here"}


def test_text_code_line_lists_the_notes():
    from opspec.cli.report import code_line

    rows = [types.SimpleNamespace(op="AFwdOp", code_checks="checked"),
            types.SimpleNamespace(op="BFwdOp", code_checks="checked; ref_api x.y not checked: "
                                                          "module x is not installed here"),
            types.SimpleNamespace(op="CFwdOp", code_checks="skipped: spec-only")]
    assert code_line(types.SimpleNamespace(specs=rows)) == textwrap.dedent("""\
        code checks: 2 run; 1 skipped (spec-only)
          BFwdOp: ref_api x.y not checked: module x is not installed here""")


def test_ref_api_outside_the_manifest_prefixes_is_not_imported():
    """Importing runs a module's code: a `ref_api` outside the manifest's ref_api_prefixes
    is neither imported nor looked up (the spec text picks no module to run)."""
    imported = []

    def spy(name):
        imported.append(name)
        raise AssertionError("imported")

    for ref in ("os.system", "antigravity.fly", "torch.matmul"):
        assert check_ref_api("RefFwdOp", ref, import_module=spy, prefixes=("vllm.",)) == (
            [], f"ref_api {ref} not checked: it is under none of the manifest's "
                "ref_api_prefixes ['vllm.']")
    assert imported == []
    # nothing declared: nothing imported
    assert check_ref_api("RefFwdOp", "torch.matmul", import_module=spy)[1].endswith(
        "ref_api_prefixes []")
    assert imported == []


def test_the_bundled_manifest_declares_its_ref_api_prefixes():
    from opspec.manifest import load_bundled
    assert load_bundled().types.ref_api_prefixes == ["torch.", "vllm.", "flashinfer.", "flash_attn.", "opspec."]
