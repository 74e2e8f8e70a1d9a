"""`opspec diff OLD NEW` (opspec.solver.diff, opspec.cli.diff): backward compatibility.

Every spec here is a small YAML text written to `old/` and `new/` folders of a temporary
directory. A change is pinned by the op's verdict, the check id and declaration path of
its finding, and the values of the counterexample (the call NEW rejects or types
differently); a compatible change by the verdict and no finding at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opspec.cli.main import main
from opspec.schema.loader import load_paths
from opspec.solver.diff import (
    ADDED, COMPATIBLE, DIFF_CHECKS, INCOMPATIBLE, REMOVED, DiffReport, Finding, OpDiff,
    diff_manifests,
)
from prove_support import toy

OP = "ToyFwdOp"

#: The signature every change below starts from, in parts (the body of each field).
BASE = {
    "types": None,
    "forall": '{M: Dim, N: Dim, T: "DType[float16 | bfloat16 | float32]"}',
    "params": """
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1}""",
    "inputs": """
      x: {dtype: T, shape: "[M, 2 * N]"}
      bias: {dtype: T, shape: "[N]", optional: true}""",
    "outputs": """
      y: {dtype: T, shape: "[M, N]"}""",
    "let": '{Mp: "M + 1"}',
    "shape_rules": '["Mp > 1", "g > 0"]',
}

#: A GEMM with a transposable `b`: the family case of `trans_b: true` is what changes.
GEMM = {
    "types": """
      Mat:
        params: {t: Bool, R: Dim, C: Dim}
        match: t
        cases:
        - {when: false, is: "[R, C]"}
        - {when: true, is: "[C, R]"}""",
    "forall": '{M: Dim, N: Dim, K: Dim, T: "DType[float16 | bfloat16]"}',
    "params": """
      trans_b: {type: bool, default: false}""",
    "inputs": """
      a: {dtype: T, shape: "[M, K]"}
      b: {dtype: T, shape: "Mat[trans_b, K, N]"}""",
    "outputs": """
      c: {dtype: T, shape: "[M, N]"}""",
    "let": None,
    "shape_rules": None,
}


def signature(parts: dict[str, str | None], **changes: str | None) -> str:
    """The `signature:` body of `parts` with `changes` applied (None drops a field)."""
    merged = {**parts, **changes}
    out = []
    for key in ("types", "forall", "params", "inputs", "outputs", "let", "shape_rules"):
        body = merged.get(key)
        if body is None:
            continue
        body = body.strip("\n")
        out.append(f"{key}:\n{body}" if body.startswith("  ") else f"{key}: {body}")
    return "\n".join(out)


def op_text(parts: dict, op: str = OP, **changes: str | None) -> str:
    return toy(signature(parts, **changes), op=op)


def run_diff(tmp_path: Path, old: str, new: str) -> DiffReport:
    for side, text in (("old", old), ("new", new)):
        folder = tmp_path / side
        folder.mkdir(exist_ok=True)
        (folder / "toy.yaml").write_text(text)
    mo = load_paths([tmp_path / "old"], strict=True)
    mn = load_paths([tmp_path / "new"], strict=True)
    assert not [d for d in (*mo.diagnostics, *mn.diagnostics) if d.is_error]
    return diff_manifests(mo, mn)


def diff_op(tmp_path: Path, old_parts: dict, **changes: str | None) -> OpDiff:
    report = run_diff(tmp_path, op_text(old_parts), op_text(old_parts, **changes))
    (r,) = report.specs
    return r


def only(r: OpDiff, check: str, path: str | None = None) -> Finding:
    """The one error finding of `r` (its check and path), the op incompatible."""
    errors = [f for f in r.diagnostics if f.is_error]
    assert r.verdict == INCOMPATIBLE, [f.render() for f in r.diagnostics]
    assert len(errors) == 1, [f.render() for f in errors]
    f = errors[0]
    assert f.check == check, f.render()
    if path is not None:
        assert f.path == path, f.render()
    assert f.check in DIFF_CHECKS
    return f


def compatible(r: OpDiff) -> None:
    assert r.verdict == COMPATIBLE, [f.render() for f in r.diagnostics]
    assert r.diagnostics == [], [f.render() for f in r.diagnostics]


# -- incompatible changes ---------------------------------------------------------------------

def test_removed_dtype_is_the_input_dtype_of_the_counterexample(tmp_path):
    r = diff_op(tmp_path, BASE,
                forall='{M: Dim, N: Dim, T: "DType[float16 | bfloat16]"}')
    f = only(r, "rejected", "signature.forall.T")
    assert f.counterexample["x.dtype"] == "float32"
    assert len(f.counterexample["x.shape"]) == 2
    assert f.counterexample["x.shape"][1] % 2 == 0          # a call OLD accepts
    assert "bfloat16 | float16" in f.message
    assert f.side == "new" and f.pos.line == 5               # the forall line of NEW


def test_tightened_refinement(tmp_path):
    r = diff_op(tmp_path, BASE, shape_rules='["Mp > 9", "g > 0"]')   # M > 0 -> M > 8
    f = only(r, "rejected", "signature.shape_rules.0")
    m = f.counterexample["x.shape"][0]
    assert 1 <= m <= 8                                       # OLD accepts it, NEW does not
    assert f.counterexample["g"] > 0
    assert "Mp > 9" in f.message


def test_tightened_parameter_refinement_names_the_parameter_value(tmp_path):
    r = diff_op(tmp_path, BASE, shape_rules='["Mp > 1", "g > 2"]')
    f = only(r, "rejected", "signature.shape_rules.1")
    assert f.counterexample["g"] in (1, 2)


def test_new_required_input(tmp_path):
    r = diff_op(tmp_path, BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}
      scale: {dtype: T, shape: "[M]"}
      bias: {dtype: T, shape: "[N]", optional: true}""")
    kinds = {f.check for f in r.diagnostics if f.is_error}
    assert r.verdict == INCOMPATIBLE
    # A new required input; and `bias` moved from position 1 to 2.
    assert kinds == {"input-required", "input-moved"}, [f.render() for f in r.diagnostics]
    f = next(f for f in r.diagnostics if f.check == "input-required")
    assert f.path == "signature.inputs.scale"
    assert f.counterexample == {"call": "forward(<x>, <bias>)"}


def test_new_required_input_at_the_end(tmp_path):
    old = op_text(BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}""")
    new = op_text(BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}
      scale: {dtype: T, shape: "[M]"}""")
    (r,) = run_diff(tmp_path, old, new).specs
    f = only(r, "input-required", "signature.inputs.scale")
    assert "scale" in f.message


def test_optional_input_made_required(tmp_path):
    r = diff_op(tmp_path, BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}
      bias: {dtype: T, shape: "[N]"}""")
    f = only(r, "input-required", "signature.inputs.bias")
    assert f.counterexample["present(bias)"] is False        # the call that omits it


def test_reordered_parameters(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      g: {type: int, default: 1}
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}""")
    errors = [f for f in r.diagnostics if f.is_error]
    assert r.verdict == INCOMPATIBLE
    assert {f.check for f in errors} == {"param-moved"}
    moved = {f.path: f for f in errors}
    f = moved["signature.params.act"]
    assert "position 0 to 1" in f.message
    assert f.counterexample["binds <act> to"] == "g"          # ToyFwdOp('gelu') sets g


def test_parameter_made_keyword_only(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1, kw_only: true}""")
    f = only(r, "param-moved", "signature.params.g")
    assert "keyword-only" in f.message


def test_renamed_parameter(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      groups: {type: int, default: 1}""",
                shape_rules='["Mp > 1", "groups > 0"]')
    f = only(r, "param-renamed", "signature.params.groups")
    assert "`g`" in f.message and "`groups`" in f.message
    assert f.counterexample == {"call": "ToyFwdOp(g=...)"}


def test_removed_parameter(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}""",
                shape_rules='["Mp > 1"]')
    f = only(r, "param-removed", "signature.params.g")
    assert f.side == "old"


def test_changed_default(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: gelu}
      g: {type: int, default: 1}""")
    f = only(r, "param-default", "signature.params.act")
    assert f.counterexample["act (OLD default)"] == "silu"
    assert f.counterexample["act (NEW default)"] == "gelu"


def test_new_parameter_without_default(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1}
      eps: {type: int}""")
    f = only(r, "param-required", "signature.params.eps")
    assert "no default" in f.message


def test_removed_enum_literal(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu'", default: silu}
      g: {type: int, default: 1}""")
    f = only(r, "param-type", "signature.params.act.type")
    assert f.counterexample == {"act": "tanh"}
    assert "'tanh' was removed" in f.message


def test_removed_dtype_of_a_dtype_parameter(tmp_path):
    old = op_text(BASE, params="""
      out_dtype: {type: "float16 | float32", default: float32}""", outputs="""
      y: {dtype: out_dtype, shape: "[M, N]"}""", shape_rules='["Mp > 1"]')
    new = old.replace('"float16 | float32"', '"float32"')
    (r,) = run_diff(tmp_path, old, new).specs
    f = only(r, "param-type", "signature.params.out_dtype.type")
    assert f.counterexample == {"out_dtype": "float16"}


def test_changed_output_shape(tmp_path):
    r = diff_op(tmp_path, BASE, outputs="""
      y: {dtype: T, shape: "[N, M]"}""")
    f = only(r, "output-type", "signature.outputs.y")
    m, two_n = f.counterexample["x.shape"]
    assert m != two_n // 2                                   # a square call types alike
    assert f.counterexample["y (OLD)"] == f"Tensor[{f.counterexample['x.dtype']}, [{m}, {two_n // 2}]]"
    assert f.counterexample["y (NEW)"] == f"Tensor[{f.counterexample['x.dtype']}, [{two_n // 2}, {m}]]"


def test_changed_output_dtype(tmp_path):
    r = diff_op(tmp_path, BASE, outputs="""
      y: {dtype: float32, shape: "[M, N]"}""")
    f = only(r, "output-type", "signature.outputs.y")
    assert f.counterexample["x.dtype"] != "float32"
    assert f.counterexample["y (NEW)"].startswith("Tensor[float32, ")
    assert f.counterexample["y (OLD)"].startswith(f"Tensor[{f.counterexample['x.dtype']}, ")


def test_changed_family_case(tmp_path):
    new_types = GEMM["types"].replace('{when: true, is: "[C, R]"}', '{when: true, is: "[R, C]"}')
    r = diff_op(tmp_path, GEMM, types=new_types)
    f = only(r, "rejected", "signature.inputs.b.shape")
    cex = f.counterexample
    assert cex["trans_b"] is True                             # only the changed case breaks
    (_, k), (rows, cols) = cex["a.shape"], cex["b.shape"]
    assert rows != cols and cols == k                        # OLD's [N, K]; NEW wants [K, N]


def test_removed_family_case(tmp_path):
    new_types = GEMM["types"].replace('\n        - {when: true, is: "[C, R]"}', "")
    r = diff_op(tmp_path, GEMM, types=new_types)
    f = only(r, "rejected", "signature.types.Mat")
    assert f.counterexample == {"trans_b": True}
    assert "no case" in f.message


def test_new_domain_restriction(tmp_path):
    r = diff_op(tmp_path, GEMM, shape_rules='["not trans_b"]')
    f = only(r, "rejected", "signature.shape_rules.0")
    assert f.counterexample == {"trans_b": True}


def test_removed_op_and_added_op(tmp_path):
    old = op_text(BASE)
    new = op_text(BASE, op="OtherFwdOp")
    report = run_diff(tmp_path, old, new)
    by_op = {r.op: r for r in report.specs}
    assert by_op[OP].verdict == REMOVED
    (f,) = by_op[OP].diagnostics
    assert f.check == "removed-op" and f.is_error and f.side == "old"
    assert by_op["OtherFwdOp"].verdict == ADDED and not by_op["OtherFwdOp"].diagnostics
    assert not report.ok


def test_removed_and_renamed_outputs(tmp_path):
    r = diff_op(tmp_path, BASE, outputs="""
      z: {dtype: T, shape: "[M, N]"}""")
    f = only(r, "output-changed", "signature.outputs.z")
    assert f.counterexample == {"OLD outputs": ("y",), "NEW outputs": ("z",)}


def test_tightened_placement(tmp_path):
    r = diff_op(tmp_path, BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]", contiguous: true}
      bias: {dtype: T, shape: "[N]", optional: true}""")
    only(r, "input-placement", "signature.inputs.x")


def test_new_input_shape_through_a_let(tmp_path):
    # NEW reads the optional bias as [2 * N]: every call passing OLD's [N] bias is refused.
    r = diff_op(tmp_path, BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}
      bias: {dtype: T, shape: "[H]", optional: true}""", let='{Mp: "M + 1", H: "2 * N"}')
    f = only(r, "rejected", "signature.inputs.bias.shape")
    cex = f.counterexample
    assert cex["present(bias)"] is True
    assert cex["bias.shape"] == (cex["x.shape"][1] // 2,) and cex["bias.shape"] != (0,)


def test_every_rejecting_declaration_is_reported(tmp_path):
    r = diff_op(tmp_path, BASE,
                forall='{M: Dim, N: Dim, T: "DType[float16 | bfloat16]"}',
                shape_rules='["Mp > 9", "g > 0"]')
    assert r.verdict == INCOMPATIBLE
    paths = sorted(f.path for f in r.diagnostics if f.check == "rejected")
    assert paths == ["signature.forall.T", "signature.shape_rules.0"]
    by = {f.path: f.counterexample for f in r.diagnostics}
    # The refinement's call is one the dtype check lets through.
    assert by["signature.shape_rules.0"]["x.dtype"] in ("float16", "bfloat16")


def test_dtype_combos_row_removed(tmp_path):
    parts = dict(BASE, forall='{M: Dim, N: Dim, T: "DType[float16 | bfloat16]", '
                              'U: "DType[float16 | bfloat16]"}', inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}
      w: {dtype: U, shape: "[N]"}""")
    old = op_text(parts).replace("    shape_rules:", "    dtype_combos: [{T: float16, U: float16}, "
                                          "{T: bfloat16, U: float16}]\n    shape_rules:")
    new = old.replace(", {T: bfloat16, U: float16}", "")
    (r,) = run_diff(tmp_path, old, new).specs
    f = only(r, "rejected", "signature.dtype_combos")
    assert (f.counterexample["x.dtype"], f.counterexample["w.dtype"]) == ("bfloat16", "float16")


# -- compatible changes -----------------------------------------------------------------------

@pytest.mark.parametrize("parts", [BASE, GEMM], ids=["base", "gemm"])
def test_identical_specs(tmp_path, parts):
    compatible(diff_op(tmp_path, parts))


def test_loosened_refinement(tmp_path):
    old = op_text(BASE, shape_rules='["Mp > 9", "g > 0"]')
    new = op_text(BASE)
    (r,) = run_diff(tmp_path, old, new).specs
    compatible(r)
    assert r.combinations == 6    # 3 activations x bias passed or not


def test_added_dtype(tmp_path):
    compatible(diff_op(tmp_path, BASE, forall='{M: Dim, N: Dim, '
                                              'T: "DType[float16 | bfloat16 | float32 | float64]"}'))


def test_added_enum_literal(tmp_path):
    compatible(diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh' | 'relu'", default: silu}
      g: {type: int, default: 1}"""))


def test_new_optional_input_at_the_end(tmp_path):
    compatible(diff_op(tmp_path, BASE, inputs="""
      x: {dtype: T, shape: "[M, 2 * N]"}
      bias: {dtype: T, shape: "[N]", optional: true}
      residual: {dtype: T, shape: "[M, N]", optional: true}"""))


def test_new_parameter_with_a_default_at_the_end(tmp_path):
    # The default keeps OLD's behaviour: the new flag selects OLD's family case.
    new_types = GEMM["types"]
    r = diff_op(tmp_path, GEMM, types=new_types, params="""
      trans_b: {type: bool, default: false}
      trans_a: {type: bool, default: false}""", inputs="""
      a: {dtype: T, shape: "Mat[trans_a, M, K]"}
      b: {dtype: T, shape: "Mat[trans_b, K, N]"}""")
    compatible(r)


def test_new_parameter_whose_default_changes_the_type(tmp_path):
    r = diff_op(tmp_path, GEMM, params="""
      trans_b: {type: bool, default: false}
      trans_a: {type: bool, default: true}""", inputs="""
      a: {dtype: T, shape: "Mat[trans_a, M, K]"}
      b: {dtype: T, shape: "Mat[trans_b, K, N]"}""")
    # NEW reads a as [K, M]: K comes from a's axis 0, so b's axis 0 (OLD's K) disagrees.
    f = only(r, "rejected", "signature.inputs.b.shape")
    (m, k), (k_b, _) = f.counterexample["a.shape"], f.counterexample["b.shape"]
    assert k == k_b and m != k


def test_renamed_let(tmp_path):
    compatible(diff_op(tmp_path, BASE, let='{Mplus: "M + 1"}', shape_rules='["Mplus > 1", "g > 0"]'))


def test_reordered_forall(tmp_path):
    compatible(diff_op(tmp_path, BASE, forall='{T: "DType[float16 | bfloat16 | float32]", '
                                              'N: Dim, M: Dim}'))


def test_equivalent_rewrites(tmp_path):
    # `M + 1 > 1` is `M >= 1`; `[M, N]` through a let is the same shape.
    compatible(diff_op(tmp_path, BASE, let='{Mp: "M + 1", Nout: "N"}',
                       shape_rules='["M >= 1", "g >= 1"]', outputs="""
      y: {dtype: T, shape: "[M, Nout]"}"""))


def test_added_op(tmp_path):
    report = run_diff(tmp_path, op_text(BASE), op_text(BASE) + op_text(BASE, op="NewFwdOp"))
    verdicts = {r.op: r.verdict for r in report.specs}
    assert verdicts == {OP: COMPATIBLE, "NewFwdOp": ADDED}
    assert report.ok


# -- the command line -------------------------------------------------------------------------

def write_pair(tmp_path: Path, old: str, new: str) -> tuple[str, str]:
    for side, text in (("old", old), ("new", new)):
        (tmp_path / side).mkdir(exist_ok=True)
        (tmp_path / side / "toy.yaml").write_text(text)
    return str(tmp_path / "old"), str(tmp_path / "new")


def test_cli_compatible_exits_0(tmp_path, capsys):
    old, new = write_pair(tmp_path, op_text(BASE), op_text(BASE, shape_rules='["Mp > 0", "g > 0"]'))
    assert main(["diff", old, new]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compatible  ToyFwdOp")
    assert "1 op: 1 compatible, 0 incompatible" in out


def test_cli_incompatible_exits_1_with_the_counterexample(tmp_path, capsys):
    old, new = write_pair(tmp_path, op_text(BASE), op_text(
        BASE, forall='{M: Dim, N: Dim, T: "DType[float16 | bfloat16]"}'))
    assert main(["diff", old, new]) == 1
    out = capsys.readouterr().out
    assert "error[rejected]: ToyFwdOp signature.forall.T" in out
    assert "x.dtype = float32" in out
    assert "toy.yaml:5:" in out                              # NEW's file and line


def test_cli_json(tmp_path, capsys):
    old, new = write_pair(tmp_path, op_text(BASE), op_text(BASE, outputs="""
      y: {dtype: T, shape: "[N, M]"}""") + op_text(BASE, op="NewFwdOp"))
    assert main(["diff", old, new, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"old", "new", "ops", "diagnostics", "summary"}
    assert doc["old"] == old and doc["new"] == new
    ops = {o["op"]: o for o in doc["ops"]}
    assert ops["NewFwdOp"]["verdict"] == "added"
    toy_op = ops[OP]
    assert set(toy_op) == {"op", "verdict", "old_file", "new_file", "status", "combinations",
                           "seconds", "diagnostics"}
    assert toy_op["verdict"] == "incompatible" and toy_op["combinations"] == 6
    (d,) = toy_op["diagnostics"]
    assert d["check"] == "output-type" and d["severity"] == "error" and d["side"] == "new"
    assert d["path"] == "signature.outputs.y" and d["file"].endswith("toy.yaml")
    assert isinstance(d["counterexample"]["x.shape"], list)
    assert doc["summary"] == {**doc["summary"], "ops": 2, "compatible": 0, "incompatible": 1,
                              "added": 1, "removed": 0, "unknown": 0, "errors": 1}


def test_cli_sarif(tmp_path, capsys):
    old, new = write_pair(tmp_path, op_text(BASE), op_text(BASE, outputs="""
      y: {dtype: T, shape: "[N, M]"}"""))
    assert main(["diff", old, new, "--format", "sarif"]) == 1
    run_ = json.loads(capsys.readouterr().out)["runs"][0]
    rules = [r["id"] for r in run_["tool"]["driver"]["rules"]]
    assert set(DIFF_CHECKS) <= set(rules)
    (res,) = run_["results"]
    assert res["ruleId"] == "output-type" and rules[res["ruleIndex"]] == "output-type"
    assert res["level"] == "error" and res["properties"]["path"] == "signature.outputs.y"
    assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("toy.yaml")
    assert "x.shape" in res["properties"]["counterexample"]


def test_cli_op_filter(tmp_path, capsys):
    old, new = write_pair(tmp_path, op_text(BASE) + op_text(BASE, op="OtherFwdOp"),
                          op_text(BASE) + op_text(BASE, op="OtherFwdOp", outputs="""
      y: {dtype: T, shape: "[N, M]"}"""))
    assert main(["diff", old, new, "--op", OP]) == 0
    assert "OtherFwdOp" not in capsys.readouterr().out
    assert main(["diff", old, new, "--op", "OtherFwdOp"]) == 1


@pytest.mark.parametrize("argv", [
    ["diff", "{tmp}/nosuch", "{tmp}/new"],
    ["diff", "{tmp}/old"],
    ["diff", "{tmp}/old", "{tmp}/new", "--op", "NoSuchFwdOp"],
    ["diff", "{tmp}/old", "{tmp}/new", "--format", "junit"],
])
def test_cli_usage_errors_exit_2(tmp_path, capsys, argv):
    write_pair(tmp_path, op_text(BASE), op_text(BASE))
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2


def test_cli_bundled_manifest_against_itself(capsys):
    from opspec.manifest import MANIFEST_DIR
    assert main(["diff", str(MANIFEST_DIR), str(MANIFEST_DIR)]) == 0
    out = capsys.readouterr().out
    assert "compatible  GemmFwdOp" in out and "0 incompatible" in out


# -- more of the language -------------------------------------------------------------------

def test_splat_output_shape_changed(tmp_path):
    parts = dict(BASE, forall='{S: Shape, D: Dim, T: "DType[float16 | bfloat16]"}', params=None,
                 inputs="""
      x: {dtype: T, shape: "[*S, D]"}""", outputs="""
      y: {dtype: T, shape: "[*S, D]"}""", let=None, shape_rules=None)
    r = diff_op(tmp_path, parts, outputs="""
      y: {dtype: T, shape: "[D, *S]"}""")
    f = only(r, "output-type", "signature.outputs.y")
    shape = f.counterexample["x.shape"]
    assert len(shape) >= 2 and shape[-1] != shape[0]
    dims = ", ".join(map(str, shape))
    assert f.counterexample["y (OLD)"].endswith(f"[{dims}]]")


def test_splat_renamed_is_compatible(tmp_path):
    parts = dict(BASE, forall='{S: Shape, D: Dim, T: "DType[float16 | bfloat16]"}', params=None,
                 inputs="""
      x: {dtype: T, shape: "[*S, D]"}""", outputs="""
      y: {dtype: T, shape: "[*S, D]"}""", let=None, shape_rules='["len(S) <= 2"]')
    compatible(diff_op(tmp_path, parts,
                       forall='{Batch: Shape, D: Dim, T: "DType[float16 | bfloat16]"}',
                       inputs="""
      x: {dtype: T, shape: "[*Batch, D]"}""", outputs="""
      y: {dtype: T, shape: "[*Batch, D]"}""", shape_rules='["len(Batch) < 3"]'))


def test_maybe_parameter_refinement_tightened(tmp_path):
    parts = dict(BASE, params="""
      rd: {type: "int | None", default: null}""",
                 shape_rules='["not present(rd) or (rd.value > 0 and rd.value <= N)"]', let=None)
    r = diff_op(tmp_path, parts,
                shape_rules='["not present(rd) or (rd.value > 0 and 2 * rd.value <= N)"]')
    f = only(r, "rejected", "signature.shape_rules.0")
    cex = f.counterexample
    n = cex["x.shape"][1] // 2
    assert cex["present(rd)"] is True and 0 < cex["rd"] <= n < 2 * cex["rd"]


LAYOUT = """\
adts:
  Layout:
    sum:
      contiguous:
        fields:
          packing: {type: "'tight' | 'aligned'"}
          alignment: Dim
        invariant: "(packing == 'tight') == (alignment == 1) and alignment >= 1"
      masked:
        fields: {max_m: Dim}
"""


def test_adt_invariant_tightened(tmp_path):
    text = op_text(BASE, params="""
      layout: {type: Layout}""", let=None, shape_rules=None)
    for side, types in (("old", LAYOUT), ("new", LAYOUT.replace(
            "alignment >= 1\"", "alignment >= 1 and alignment <= 64\""))):
        (tmp_path / side).mkdir()
        (tmp_path / side / "types.yaml").write_text(types)
    (r,) = run_diff(tmp_path, text, text).specs
    f = only(r, "rejected", "signature.params.layout")
    assert f.counterexample["layout"] == "{contiguous: {packing: aligned}}"
    assert f.counterexample["layout.alignment"] > 64


def test_removed_adt_constructor(tmp_path):
    text = op_text(BASE, params="""
      layout: {type: Layout}""", let=None, shape_rules=None)
    for side, types in (("old", LAYOUT), ("new", LAYOUT.replace(
            "      masked:\n        fields: {max_m: Dim}\n", ""))):
        (tmp_path / side).mkdir()
        (tmp_path / side / "types.yaml").write_text(types)
    (r,) = run_diff(tmp_path, text, text).specs
    f = only(r, "param-type", "signature.params.layout.type")
    assert "`masked`" in f.message


def test_construction_tensor_made_required(tmp_path):
    r = diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1}
      table: {dtype: float32, shape: "[N]", optional: true}""")
    compatible(r)    # a new optional construction-time tensor at the end
    old = op_text(BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1}
      table: {dtype: float32, shape: "[N]", optional: true}""")
    new = old.replace('float32, shape: "[N]", optional: true}', 'float32, shape: "[N]"}')
    (tmp_path / "x").mkdir()
    (r,) = run_diff(tmp_path / "x", old, new).specs
    f = only(r, "param-required", "signature.params.table")
    assert "optional" in f.message


def test_out_buffer_removed_and_output_made_nullable(tmp_path):
    r = diff_op(tmp_path, BASE, outputs="""
      y: {dtype: T, shape: "[M, N]", nullable: "act != 'tanh'"}""")
    f = only(r, "output-changed", "signature.outputs.y")
    assert f.counterexample["act"] == "tanh" and "None in NEW" in f.message
    old = op_text(BASE, outputs="""
      y: {dtype: T, shape: "[M, N]", buffer: out}""")
    (tmp_path / "b").mkdir()
    (r,) = run_diff(tmp_path / "b", old, op_text(BASE)).specs
    f = only(r, "output-changed", "signature.outputs.y.buffer")
    assert f.side == "old" and "out=" in f.message


def test_undecided_question_gives_unknown(tmp_path):
    # No positive cubes add up to a cube: NEW rejects nothing OLD accepts, but Z3 cannot
    # prove it within its resource limit.
    parts = dict(BASE, forall='{A: Dim, B: Dim, C: Dim, T: "DType[float16]"}', params=None,
                 inputs="""
      x: {dtype: T, shape: "[A, B, C]"}""", outputs="""
      y: {dtype: T, shape: "[A]"}""", let=None, shape_rules='["A > 0 and B > 0 and C > 0"]')
    r = diff_op(tmp_path, parts, shape_rules='["A > 0 and B > 0 and C > 0", '
                                             '"A * A * A + B * B * B != C * C * C"]')
    assert r.verdict == "unknown", [f.render() for f in r.diagnostics]
    (f,) = r.diagnostics
    assert f.check == "undecided" and not f.is_error


def test_renamed_input(tmp_path):
    r = diff_op(tmp_path, BASE, inputs="""
      inp: {dtype: T, shape: "[M, 2 * N]"}
      bias: {dtype: T, shape: "[N]", optional: true}""")
    f = only(r, "input-renamed", "signature.inputs.inp")
    assert f.counterexample == {"call": "forward(x=...)"}


def test_new_int_parameter_with_default_in_a_refinement(tmp_path):
    compatible(diff_op(tmp_path, BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1}
      block: {type: int, default: 64}""", shape_rules='["Mp > 1", "g > 0", "block > 0"]'))
    # A default that OLD's calls do not satisfy rejects them all.
    (tmp_path / "bad").mkdir()
    r = diff_op(tmp_path / "bad", BASE, params="""
      act: {type: "'silu' | 'gelu' | 'tanh'", default: silu}
      g: {type: int, default: 1}
      block: {type: int, default: 64}""", shape_rules='["Mp > 1", "g > 0", "M % block == 0"]')
    f = only(r, "rejected", "signature.shape_rules.2")
    assert f.counterexample["x.shape"][0] % 64 != 0
