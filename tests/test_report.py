"""The reporter (opspec.cli.report) on small fake reports: text, JSON, SARIF, JUnit, stats."""

from __future__ import annotations

import io
import json
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from opspec.cli import report as R
from opspec.cli.checks import CHECK_DOCS, checks_epilog
from opspec.cli.progress import ProgressBar
from opspec.schema import (CHECK_IDS, DIFF_CHECK_IDS, PROVE_CHECK_IDS, Diagnostic, Pos,
                           Severity, load_paths)

YAML = """\
BadFwdOp:
  family: bad
  signature:
    types:
      Mat:
        params: {t: Bool, R: Dim, C: Dim}
"""


@dataclass
class FakeSpec:
    """Shaped like opspec.solver.prove.SpecResult."""

    op: str
    file: str
    status: str = "spec-only"
    verdict: str = "proven"
    diagnostics: list = field(default_factory=list)
    plan: object = None
    seconds: float = 0.0
    combinations: int = 1
    cached: bool = False


@dataclass
class FakeReport:
    """Shaped like opspec.solver.run.ProofReport."""

    specs: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)
    seconds: float = 0.0


@pytest.fixture
def fake(tmp_path: Path) -> FakeReport:
    src = tmp_path / "bad.yaml"
    src.write_text(YAML)
    gap = Diagnostic("family-gap", "no case of type family Mat covers t=true",
                     op="BadFwdOp", path="signature.types.Mat", pos=Pos(str(src), 5, 7),
                     counterexample={"trans": True, "a.shape": [4, 8], "T": "bfloat16"},
                     hint="add a case `{when: true, is: ...}`")
    warn = Diagnostic("negative-axis", "axis 0 of output `c`, `N - 4`, can be negative",
                      op="BadFwdOp", path="signature.outputs.c.shape", pos=Pos(str(src), 6, 9),
                      severity=Severity.WARNING)
    note = Diagnostic("unknown", "could not decide <whether> `X` & \"Y\" \x01 is determined",
                      op="SlowFwdOp", path="signature.forall.X", severity=Severity.ADVISORY)
    top = Diagnostic("parse", "cannot read the file: permission denied",
                     pos=Pos(str(tmp_path / "other.yaml"), 1, 1))
    return FakeReport(specs=[
        FakeSpec("GoodFwdOp", str(tmp_path / "good.yaml"), seconds=0.5, combinations=4,
                 cached=True),
        FakeSpec("BadFwdOp", str(src), verdict="refuted", diagnostics=[gap, warn], seconds=2.0,
                 combinations=2),
        FakeSpec("SlowFwdOp", str(tmp_path / "slow.yaml"), verdict="unknown",
                 diagnostics=[note], seconds=1.0),
    ], diagnostics=[top], seconds=3.25)


# -- text -----------------------------------------------------------------------------------

def test_text_spec_lines_are_aligned_and_mark_the_cache(fake: FakeReport) -> None:
    lines = R.render(fake, "text").splitlines()
    assert lines[0].startswith("proven   GoodFwdOp  (")
    assert lines[0].endswith("[4 combinations, 0.50 s, cached]")
    assert lines[1].startswith("refuted  BadFwdOp   (")
    assert lines[1].endswith("[2 combinations, 2.00 s]")
    assert lines[2].startswith("unknown  SlowFwdOp  (")
    assert "[1 combination, 1.00 s]" in lines[2]


def test_text_diagnostic_has_location_hint_counterexample_and_caret(fake: FakeReport) -> None:
    text = R.render(fake, "text")
    file = fake.specs[1].file
    head = (f"{R.display_path(file)}:5:7: error[family-gap]: BadFwdOp signature.types.Mat: "
            "no case of type family Mat covers t=true")
    lines = text.splitlines()
    i = lines.index(head)
    assert lines[i + 1] == "    hint: add a case `{when: true, is: ...}`"
    assert lines[i + 2:i + 6] == ["    counterexample:", "      trans = true",
                                  "      a.shape = [4, 8]", "      T = bfloat16"]
    assert lines[i + 6] == "     5 |       Mat:"
    assert lines[i + 7] == "       |       ^"
    assert lines[i + 7].index("^") == lines[i + 6].index("Mat")


def test_text_without_position_and_summary(fake: FakeReport) -> None:
    text = R.render(fake, "text")
    assert ("advisory[unknown]: SlowFwdOp signature.forall.X: could not decide" in text)
    assert text.splitlines()[-1] == ("3 specs: 1 proven, 1 refuted, 1 unknown; "
                                     "2 errors, 1 warning in 3.25 s")


def test_text_excerpt_skipped_for_an_unreadable_file(fake: FakeReport) -> None:
    top = fake.diagnostics[0]
    assert R.diagnostic_lines(top) == [R.headline(top)]


def test_exit_code(fake: FakeReport) -> None:
    assert R.exit_code(fake) == 1
    assert R.exit_code(FakeReport([FakeSpec("A", "a.yaml")])) == 0


# -- JSON -----------------------------------------------------------------------------------

def test_json_shape(fake: FakeReport) -> None:
    doc = json.loads(R.render(fake, "json"))
    assert set(doc) == {"specs", "diagnostics", "summary"}
    assert set(doc["summary"]) == {"specs", "proven", "refuted", "unknown", "errors",
                                   "warnings", "seconds"}
    assert doc["summary"] == {"specs": 3, "proven": 1, "refuted": 1, "unknown": 1,
                              "errors": 2, "warnings": 1, "seconds": 3.25}
    for s in doc["specs"]:
        assert {"op", "file", "status", "verdict", "diagnostics"} <= set(s)
    bad = doc["specs"][1]
    assert bad["verdict"] == "refuted"
    assert [d["check"] for d in bad["diagnostics"]] == ["family-gap", "negative-axis"]
    assert bad["diagnostics"][0]["counterexample"]["a.shape"] == [4, 8]
    assert [d["message"] for d in doc["diagnostics"]] == ["cannot read the file: permission denied"]


def test_json_stats(fake: FakeReport) -> None:
    doc = json.loads(R.render(fake, "json", stats=True))
    st = doc["stats"]
    assert [r["op"] for r in st["top"]] == ["BadFwdOp", "SlowFwdOp", "GoodFwdOp"]
    assert st["cached"] == 1 and st["specs"] == 3 and st["total_seconds"] == 3.5


def test_stats_table_sorted_top_20() -> None:
    rep = FakeReport([FakeSpec(f"Op{i}FwdOp", "x.yaml", seconds=i / 10) for i in range(30)],
                     seconds=1.0)
    table = R.render(rep, "text", stats=True).split("slowest specs")[1].splitlines()
    rows = [ln for ln in table if ln.strip().endswith("FwdOp")]
    assert len(rows) == 20
    assert rows[0].split()[1] == "Op29FwdOp" and rows[-1].split()[1] == "Op10FwdOp"
    assert "total over 30 specs, 0 from the cache" in table[-1]


# -- SARIF ----------------------------------------------------------------------------------

def test_sarif(fake: FakeReport) -> None:
    doc = json.loads(R.render(fake, "sarif"))
    assert doc["version"] == "2.1.0" and "sarif" in doc["$schema"]
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "opspec"
    ids = [r["id"] for r in driver["rules"]]
    assert ids == list(CHECK_IDS)  # every registered rule, whether it fired or not
    assert {r["ruleId"] for r in run["results"]} == {"parse", "family-gap", "negative-axis",
                                                     "unknown"}
    assert all(r["shortDescription"]["text"] for r in driver["rules"])
    by_rule = {r["ruleId"]: r for r in run["results"]}
    gap = by_rule["family-gap"]
    assert gap["level"] == "error"
    assert gap["message"]["text"] == "no case of type family Mat covers t=true"
    loc = gap["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].endswith("bad.yaml")
    assert loc["region"] == {"startLine": 5, "startColumn": 7}
    assert gap["properties"]["counterexample"] == {"trans": True, "a.shape": [4, 8],
                                                   "T": "bfloat16"}
    assert ids[gap["ruleIndex"]] == "family-gap"
    assert by_rule["negative-axis"]["level"] == "warning"
    note = by_rule["unknown"]
    assert note["level"] == "note"
    # No position: the spec's file still locates it.
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("slow.yaml")
    assert "region" not in note["locations"][0]["physicalLocation"]


# -- JUnit ----------------------------------------------------------------------------------

def test_junit(fake: FakeReport) -> None:
    root = ET.fromstring(R.render(fake, "junit"))
    (suite,) = root.iter("testsuite")
    assert suite.get("name") == "opspec prove"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"GoodFwdOp", "BadFwdOp", "SlowFwdOp", "(manifest)"}
    assert cases["BadFwdOp"].get("classname") == "bad"
    (failure,) = cases["BadFwdOp"].findall("failure")
    assert failure.get("message") == "no case of type family Mat covers t=true"
    assert "negative-axis" in failure.text and "family-gap" in failure.text
    assert cases["GoodFwdOp"].find("failure") is None and cases["GoodFwdOp"].find("skipped") is None
    skipped = cases["SlowFwdOp"].find("skipped")
    assert skipped is not None
    # Markup and a control character in a message survive as text.
    assert "<whether> `X` & \"Y\"" in skipped.get("message")
    assert cases["(manifest)"].find("failure") is not None
    assert suite.get("tests") == "4" and suite.get("failures") == "2"
    assert suite.get("skipped") == "1"


def test_unknown_format(fake: FakeReport) -> None:
    with pytest.raises(ValueError):
        R.render(fake, "yaml")


# -- load-only reports ----------------------------------------------------------------------

def test_load_report(tmp_path: Path) -> None:
    (tmp_path / "toy.yaml").write_text(textwrap.dedent("""\
        ToyFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float16]"}
            inputs:
              x: {dtype: T, shape: "[M]", dtpye: T}
            outputs:
              y: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 4, dtype_cases: [{T: float16}], label: small}
          roofline: {flops: M}
        """))
    rep = R.load_report(load_paths([tmp_path / "toy.yaml"]))
    assert [(s.op, s.verdict) for s in rep.specs] == [("ToyFwdOp", "loaded")]
    assert [d.check for d in rep.specs[0].diagnostics] == ["parse"]
    doc = R.to_json(rep)
    assert doc["specs"][0]["verdict"] == "loaded"
    assert doc["summary"] == {"specs": 1, "proven": 0, "refuted": 0, "unknown": 0,
                              "errors": 1, "warnings": 0, "seconds": 0.0}
    text = R.render(rep, "text")
    assert "did you mean `dtype`?" in text
    assert text.splitlines()[-1].startswith("1 spec: 1 loaded; 1 error, 0 warnings")


# -- the check table and the progress bar ---------------------------------------------------

def test_every_check_id_is_documented() -> None:
    assert set(CHECK_DOCS) == set(CHECK_IDS)
    for check, (meaning, example) in CHECK_DOCS.items():
        assert meaning and example and "\n" not in meaning
    epilog = checks_epilog()
    for check in PROVE_CHECK_IDS:
        assert f"\n  {check} " in epilog
    epilog = checks_epilog(ids=DIFF_CHECK_IDS)
    for check in DIFF_CHECK_IDS:
        assert f"\n  {check} " in epilog


def test_every_check_id_any_command_emits_is_registered() -> None:
    from opspec.solver.diff import DIFF_CHECKS, Finding

    assert set(DIFF_CHECKS) == set(DIFF_CHECK_IDS) and set(DIFF_CHECK_IDS) <= set(CHECK_IDS)
    assert not set(PROVE_CHECK_IDS) & set(DIFF_CHECK_IDS)
    assert DIFF_CHECKS["rejected"] == CHECK_DOCS["rejected"][0]
    assert Finding("removed-op", "m").check == "removed-op"
    with pytest.raises(ValueError, match="unknown diff check 'code'"):
        Finding("code", "m")
    with pytest.raises(ValueError, match="unknown check id 'no-such-check'"):
        Diagnostic("no-such-check", "m")


def test_every_check_id_is_in_the_docs_and_the_readme() -> None:
    from opspec.manifest import MANIFEST_DIR

    root = Path(MANIFEST_DIR).parent
    checks_md = (root / "docs" / "checks.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    for check in CHECK_IDS:
        assert f"### `{check}`" in checks_md or f"| `{check}` |" in checks_md, check
        assert f"| `{check}` |" in readme, check


def test_sarif_rules_list_every_registered_check() -> None:
    d = Diagnostic("rejected", "a call that OLD accepts fails NEW's check", op="ToyFwdOp",
                   path="signature.shape_rules.0")
    rep = R.LoadReport([R.LoadedRow("ToyFwdOp", "toy.yaml", "implemented", diagnostics=[d])])
    driver = R.to_sarif(rep)["runs"][0]["tool"]["driver"]
    ids = [r["id"] for r in driver["rules"]]
    assert ids == list(CHECK_IDS)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] == CHECK_DOCS[rule["id"]][0]
    (res,) = R.to_sarif(rep)["runs"][0]["results"]
    assert ids[res["ruleIndex"]] == res["ruleId"] == "rejected"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    plain = io.StringIO()
    bar = ProgressBar(plain)
    bar(1, 2, FakeSpec("GemmFwdOp", "g.yaml"))
    bar.close()
    assert plain.getvalue() == ""

    tty = _Tty()
    bar = ProgressBar(tty, width=10)
    bar(1, 2, FakeSpec("GemmFwdOp", "g.yaml"))
    assert tty.getvalue() == "\r[#####-----] 1/2 GemmFwdOp"
    bar.close()
    assert tty.getvalue().endswith("\r" + " " * len("[#####-----] 1/2 GemmFwdOp") + "\r")
