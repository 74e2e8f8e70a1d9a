"""A spec with a part that failed to load is still proven where that part is not read.

A workload row or the roofline that fails to parse is left out of the spec (it is broken),
and the prover still runs every check of the signature: a typo in one row used to hide the
signature's gaps and unsolvable indices until the row was fixed and the prover run again.
A broken declaration of the signature itself still stops the questions that would read it.
"""

from __future__ import annotations

import pytest

from opspec.schema.diagnostics import Severity
from opspec.schema.errors import SpecError
from opspec.schema.loader import load_paths
from opspec.solver.prove import REFUTED
from opspec.solver.run import prove_manifest

from runtime_user_ops import load_module

#: `K` is in no input (`unsolvable`); the second row misspells `label`; the third row lacks
#: `N`, and so has a `workload` error of its own.
UNSOLVABLE = """\
PartFwdOp:
  family: part
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, K: Dim, T: "DType[float16 | bfloat16]"}
    inputs:
      x: {dtype: T, shape: "[M, N]"}
    outputs:
      y: {dtype: T, shape: "[M, K]"}
  workloads:
  - {M: 4, N: 8, K: 2, dtype_cases: [{T: float16}], label: tiny}
  - {M: 4, N: 8, K: 2, dtype_cases: [{T: float16}], lable: tiny2}
  - {M: 4, K: 2, dtype_cases: [{T: float16}], label: tiny3}
  roofline: {flops: "M"}
"""

#: The family `V` has no case for `mode == 'col'` (`family-gap`); the roofline gives no
#: `flops`.
GAP = """\
PartFwdOp:
  family: part
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16 | bfloat16]"}
    params:
      mode: {type: "'row' | 'col'", default: row}
    types:
      V:
        params: {m: "'row' | 'col'", R: Dim}
        match: m
        cases:
        - {when: row, is: "[R]"}
    inputs:
      x: {dtype: T, shape: "[M, N]"}
      s: {dtype: T, shape: "V[mode, M]"}
    outputs:
      y: {dtype: T, shape: "[M, N]"}
  workloads:
  - {M: 4, N: 8, dtype_cases: [{T: float16}], label: tiny}
  roofline: {bytes: "2 * M * N"}
"""


def _prove(tmp_path, text):
    path = tmp_path / "part.yaml"
    path.write_text(text)
    manifest = load_paths([tmp_path], strict=True)
    report = prove_manifest(manifest)
    (result,) = report.specs
    diags = list(manifest.diagnostics) + list(result.diagnostics)
    return result, {(d.check, d.path): d for d in diags}, text.splitlines()


def _line(lines, needle):
    (hit,) = [i for i, ln in enumerate(lines, 1) if needle in ln]
    return hit


def test_a_broken_row_does_not_hide_the_signature_or_the_other_rows(tmp_path):
    result, found, lines = _prove(tmp_path, UNSOLVABLE)
    assert result.verdict == REFUTED
    assert set(found) == {("parse", "workloads.1.label"),
                          ("unsolvable", "signature.outputs.y.shape"),
                          ("workload", "workloads.2")}
    parse = found["parse", "workloads.1.label"]
    assert parse.pos.line == _line(lines, "lable: tiny2")
    assert parse.message.endswith("is `lable` a misspelling of it?")
    unsolvable = found["unsolvable", "signature.outputs.y.shape"]
    assert unsolvable.severity is Severity.ERROR
    assert unsolvable.pos.line == _line(lines, 'y: {dtype: T, shape: "[M, K]"}')
    assert "index `K` is used on this branch but appears in no input" in unsolvable.message
    assert unsolvable.counterexample["K (solution 1)"] != unsolvable.counterexample["K (solution 2)"]
    # The third row of the file is the second row kept: reported under its file index.
    row = found["workload", "workloads.2"]
    assert row.pos.line == _line(lines, "label: tiny3")
    assert "row `tiny3` does not give the index `N` (Dim)" in row.message
    assert row.counterexample == {"M": 4, "K": 2}


def test_a_broken_roofline_does_not_hide_a_family_gap(tmp_path):
    result, found, lines = _prove(tmp_path, GAP)
    assert result.verdict == REFUTED
    assert set(found) == {("parse", "roofline"), ("family-gap", "signature.types.V")}
    gap = found["family-gap", "signature.types.V"]
    assert gap.pos.line == _line(lines, "V:")
    assert gap.message == ("no case of type family V covers m=col "
                           "(applied in signature.inputs.s.shape)")
    assert gap.counterexample == {"mode": "col", "V.m": "col"}


def test_a_broken_signature_declaration_still_stops_the_questions_that_read_it(tmp_path):
    # `x` fails to load: `M` and `N` are then in no input, but that is an echo of the parse
    # error, not a finding, and no Z3 question is asked.
    text = UNSOLVABLE.replace('x: {dtype: T, shape: "[M, N]"}', 'x: {dtype: T, shap: "[M, N]"}')
    result, found, _ = _prove(tmp_path, text)
    assert result.verdict == REFUTED
    checks = {check for check, _ in found}
    assert checks == {"parse"}, sorted(found)
    assert ("parse", "signature.inputs.x.shap") in found


def _identity_op(name: str, rows: str, roofline: str) -> tuple[str, str]:
    """A one-input identity op's spec (its `workloads` rows and `roofline`) and class."""
    spec = (f"{name}:\n  family: part\n  status: implemented\n  signature:\n"
            "    forall: {M: Dim}\n    inputs:\n      x: {dtype: float32, shape: \"[M]\"}\n"
            "    outputs:\n      y: {dtype: float32, shape: \"[M]\"}\n"
            f"  workloads:\n{rows}  roofline: {roofline}\n")
    cls = (f"class {name}(Op):\n    manifest = \"part.yaml\"\n"
           "    def forward(self, x):\n        return x\n")
    return spec, cls


def test_the_runtime_refuses_a_spec_with_a_broken_row(tmp_path):
    row = _identity_op("PartRowFwdOp", "  - {M: 4, label: small}\n  - {M: 8, lable: big}\n",
                       '{flops: "M"}')
    roof = _identity_op("PartRooflineFwdOp", "  - {M: 4, label: small}\n", '{bytes: "M"}')
    (tmp_path / "part.yaml").write_text(row[0] + roof[0])
    mod = load_module(tmp_path, "part_ops", "from opspec.ops.op import Op\n" + row[1] + roof[1])
    # Not run without the row: the spec is what the user wrote, or nothing.
    with pytest.raises(SpecError) as ei:
        mod.PartRowFwdOp()
    msg = str(ei.value)
    assert msg.startswith("PartRowFwdOp: its spec in ") and "has errors" in msg
    assert "error[parse]" in msg and "workloads.1.label" in msg
    with pytest.raises(SpecError) as ei:
        mod.PartRooflineFwdOp()
    assert "roofline needs `flops`" in str(ei.value)


def test_a_case_that_failed_is_no_gap_of_its_family(tmp_path):
    # The second case's `when` is no Bool: it is reported once, and the combination it
    # would have covered is not reported again as a gap.
    text = GAP.replace("- {when: row, is: \"[R]\"}",
                       "- {when: row, is: \"[R]\"}\n        - {when: column, is: \"[R]\"}")
    text = text.replace('roofline: {bytes: "2 * M * N"}', 'roofline: {flops: "M"}')
    result, found, lines = _prove(tmp_path, text)
    assert result.verdict == REFUTED
    assert set(found) == {("kind", "signature.types.V.cases.1.when")}, sorted(found)
    d = found["kind", "signature.types.V.cases.1.when"]
    assert d.message == "`when: 'column'` is not one of ['col', 'row']"
    assert d.pos.line == _line(lines, "when: column")
    # Mended, the same family is proven: the check that stayed silent still runs.
    result, found, _ = _prove(tmp_path, text.replace("when: column", "when: col"))
    assert result.verdict != REFUTED and not [k for k in found if k[0] == "family-gap"]


def test_an_op_stage_names_a_spec_of_the_manifest(tmp_path):
    # Checked across specs, after the proofs and outside the proof cache: the second run
    # (cached) still reports it, and the mended stage proves.
    from opspec.solver.run import ProofCache

    text = GAP.replace("- {when: row, is: \"[R]\"}",
                       "- {when: row, is: \"[R]\"}\n        - {when: col, is: \"[R]\"}")
    text = text.replace('roofline: {bytes: "2 * M * N"}', 'roofline: {flops: "M"}')
    text += ("  composition:\n    kind: composite\n    stages:\n"
             "    - {name: first, op: PartFwdOp}\n    - {name: second, op: PartFwOp}\n"
             "    - {name: third, kernel: tail}\n")
    (tmp_path / "part.yaml").write_text(text)
    lines = text.splitlines()
    cache = ProofCache(tmp_path / "cache")
    for _ in range(2):
        report = prove_manifest(load_paths([tmp_path / "part.yaml"], strict=True), cache=cache)
        (result,) = report.specs
        assert result.verdict == REFUTED
        (d,) = result.diagnostics
        assert (d.check, d.path) == ("name", "composition.stages.1.op")
        assert d.message == "stage `second` runs `PartFwOp`, which no spec of the manifest defines"
        assert d.hint == "did you mean `PartFwdOp`?"
        assert d.pos.line == _line(lines, "op: PartFwOp")
    assert report.specs[0].cached
    (tmp_path / "part.yaml").write_text(text.replace("PartFwOp", "PartFwdOp"))
    report = prove_manifest(load_paths([tmp_path / "part.yaml"], strict=True), cache=cache)
    assert report.specs[0].verdict != REFUTED and not report.specs[0].diagnostics
    # A user's composite may run a bundled op.
    (tmp_path / "part.yaml").write_text(text.replace("PartFwOp", "SiluAndMulFwdOp"))
    report = prove_manifest(load_paths([tmp_path / "part.yaml"], strict=True), cache=cache)
    assert report.specs[0].verdict != REFUTED and not report.specs[0].diagnostics
    # The runtime proves one spec at a time, for its plan: it leaves the check out.
    (tmp_path / "part.yaml").write_text(text)
    report = prove_manifest(load_paths([tmp_path / "part.yaml"], strict=True),
                            across_specs=False)
    assert not report.specs[0].diagnostics


def test_a_broken_stage_does_not_hide_the_signature(tmp_path):
    # Stage 1 fails to load; the family gap is still found, the other stages are still
    # checked (stage 2 under its index in the file), and the whole-spec passes, which
    # read the composition, are left out: the row's missing `N` is reported only once
    # the stage is mended.
    text = GAP.replace('roofline: {bytes: "2 * M * N"}', 'roofline: {flops: "M"}')
    text = text.replace("- {M: 4, N: 8,", "- {M: 4,")
    text += ("  composition:\n    kind: composite\n    stages:\n"
             "    - {name: first, op: PartFwdOp}\n    - {name: second, opp: PartFwdOp}\n"
             "    - {name: third, op: PartFwOp}\n")
    result, found, lines = _prove(tmp_path, text)
    assert result.verdict == REFUTED
    assert set(found) == {("parse", "composition.stages.1.opp"),
                          ("family-gap", "signature.types.V"),
                          ("name", "composition.stages.2.op")}, sorted(found)
    assert found["name", "composition.stages.2.op"].pos.line == _line(lines, "op: PartFwOp")
    assert found["family-gap", "signature.types.V"].counterexample == {"mode": "col",
                                                                       "V.m": "col"}
    _, found, _ = _prove(tmp_path, text.replace("opp: PartFwdOp", "op: PartFwdOp"))
    assert ("workload", "workloads.0") in found and ("parse", "composition.stages.1.opp") \
        not in found
