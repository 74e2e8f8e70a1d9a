"""The `opspec` command (opspec.cli.main): subcommands, formats and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from opspec.cli.main import main
from opspec.manifest import MANIFEST_DIR
from opspec.schema import CHECK_IDS, DIFF_CHECK_IDS, PROVE_CHECK_IDS, load_paths

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"

GOOD = """\
ToyFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, T: "DType[float16 | bfloat16]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 128, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: M}
"""

# `Mat` has no case for `t: true`: a family gap the prover must report at `Mat`.
GAP = """\
GapFwdOp:
  family: toy
  status: spec-only
  signature:
    types:
      Mat:
        params: {t: Bool, R: Dim, C: Dim}
        match: t
        cases:
        - {when: false, is: "[R, C]"}
    forall: {M: Dim, K: Dim, T: "DType[float16 | bfloat16]"}
    params:
      trans: {type: bool, default: false}
    inputs:
      a: {dtype: T, shape: "Mat[trans, M, K]"}
    outputs:
      c: {dtype: T, shape: "[M, K]"}
  workloads:
  - {M: 4, K: 8, trans: false, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "M * K"}
"""

UNKNOWN_FIELD = GOOD.replace('x: {dtype: T, shape: "[M]"}', 'x: {dtype: T, shape: "[M]", dtpye: T}')


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def prover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prover, with its cache in tmp_path; skipped while its modules are missing."""
    try:
        import opspec.solver.run  # noqa: F401
    except ModuleNotFoundError as exc:
        pytest.skip(f"the prover is not importable yet: {exc}")
    monkeypatch.setenv("OPSPEC_CACHE_DIR", str(tmp_path / "cache"))


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- usage ----------------------------------------------------------------------------------

def test_no_command_is_a_usage_error(capsys) -> None:
    code, out, err = run(capsys)
    assert code == 2 and out == "" and "usage:" in err


def test_unknown_command_is_a_usage_error(capsys) -> None:
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err


def test_help_exits_zero(capsys) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "prove" in out and "explain" in out


def test_prove_help_documents_every_check(capsys) -> None:
    code, out, _ = run(capsys, "prove", "--help")
    assert code == 0
    for check in PROVE_CHECK_IDS:
        assert f"\n  {check} " in out, check
    assert "e.g. Mat: {params: {t: Bool" in out
    assert "opspec diff --help" in out


def test_diff_help_documents_every_finding(capsys) -> None:
    code, out, _ = run(capsys, "diff", "--help")
    assert code == 0
    for check in DIFF_CHECK_IDS:
        assert f"\n  {check} " in out, check
    assert "e.g. OLD shape_rules: [\"N > 0\"]  NEW shape_rules: [\"N % 8 == 0\"]" in out
    assert set(CHECK_IDS) == set(PROVE_CHECK_IDS) | set(DIFF_CHECK_IDS)


def test_bad_jobs_is_a_usage_error(capsys) -> None:
    code, _, err = run(capsys, "prove", "--jobs", "-1", str(MANIFEST_DIR))
    assert code == 2 and "--jobs" in err


# -- load -----------------------------------------------------------------------------------

def test_load_bundled_manifest(capsys) -> None:
    code, out, err = run(capsys, "load", str(MANIFEST_DIR))
    assert code == 0, out + err
    n = len(load_paths([MANIFEST_DIR]).specs)  # families are added to the bundled manifest
    assert "GemmFwdOp" in out
    assert out.splitlines()[-1].startswith(f"{n} specs: {n} loaded; 0 errors")


def test_load_json(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "load", "--format", "json", str(write(tmp_path, "toy.yaml", GOOD)))
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"specs", "diagnostics", "summary"}
    (spec,) = doc["specs"]
    assert {k: spec[k] for k in ("op", "status", "verdict")} == {
        "op": "ToyFwdOp", "status": "spec-only", "verdict": "loaded"}
    assert spec["diagnostics"] == [] and doc["summary"]["errors"] == 0


def test_load_unknown_field_exits_one(capsys, tmp_path: Path) -> None:
    path = write(tmp_path, "toy.yaml", UNKNOWN_FIELD)
    code, out, _ = run(capsys, "load", str(path))
    assert code == 1
    assert "error[parse]: ToyFwdOp signature.inputs.x.dtpye: unknown field `dtpye`" in out
    assert "did you mean `dtype`?" in out
    code, out, _ = run(capsys, "load", "--format", "json", str(path))
    (spec,) = json.loads(out)["specs"]
    assert code == 1 and spec["verdict"] == "loaded"
    assert [d["check"] for d in spec["diagnostics"]] == ["parse"]


def test_load_missing_path_exits_two(capsys, tmp_path: Path) -> None:
    code, out, err = run(capsys, "load", str(tmp_path / "nope.yaml"))
    assert code == 2 and out == "" and "no such file or folder" in err


def test_load_folder_without_yaml_exits_two(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "load", str(tmp_path))
    assert code == 2 and "no .yaml files" in err


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root reads any file")
def test_load_unreadable_file_exits_two(capsys, tmp_path: Path) -> None:
    path = write(tmp_path, "toy.yaml", GOOD)
    path.chmod(0)
    code, _, err = run(capsys, "load", str(path))
    assert code == 2 and "cannot read" in err


def test_load_needs_a_path(capsys) -> None:
    code, _, err = run(capsys, "load")
    assert code == 2 and "PATH" in err


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is absent")
def test_load_corpus(capsys) -> None:
    code, out, _ = run(capsys, "load", "--format", "json", str(CORPUS))
    doc = json.loads(out)
    assert code == 0
    assert len(doc["specs"]) == 168 and doc["summary"]["specs"] == 168
    assert doc["summary"]["errors"] == 0


# -- schema ---------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, title", [((), "opspec family file"),
                                          (("--types",), "opspec types file")])
def test_schema(capsys, extra, title) -> None:
    code, out, _ = run(capsys, "schema", *extra)
    doc = json.loads(out)
    assert code == 0 and doc["$schema"].startswith("https://json-schema.org/")
    assert doc["title"] == title


# -- a subprocess, as users run it ----------------------------------------------------------

def test_python_m_opspec_cli(tmp_path: Path) -> None:
    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "opspec.cli", *argv], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    ok = cli("load", str(MANIFEST_DIR))
    assert ok.returncode == 0, ok.stderr
    assert "GemmFwdOp" in ok.stdout and ok.stderr == ""  # no progress bar off a terminal
    assert cli("load", str(write(tmp_path, "bad.yaml", UNKNOWN_FIELD))).returncode == 1
    missing = cli("load", "missing.yaml")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert cli().returncode == 2


# -- prove and explain (need the prover) ----------------------------------------------------

def test_prove_bundled_manifest(capsys, prover) -> None:
    code, out, err = run(capsys, "prove", "--format", "json", "--stats")
    doc = json.loads(out)
    assert code == 0, out + err
    assert {s["op"] for s in doc["specs"]} >= {"GemmFwdOp", "SiluAndMulFwdOp"}
    assert {s["verdict"] for s in doc["specs"]} == {"proven"}
    assert set(doc["summary"]) >= {"specs", "proven", "refuted", "unknown", "errors",
                                   "warnings", "seconds"}
    assert doc["stats"]["specs"] == len(doc["specs"])
    assert err == ""  # stderr is no terminal here: no progress bar


def test_prove_uses_the_cache(capsys, prover) -> None:
    assert run(capsys, "prove", "--op", "GemmFwdOp")[0] == 0
    code, out, _ = run(capsys, "prove", "--op", "GemmFwdOp", "--stats")
    assert code == 0 and "cached]" in out.splitlines()[0]
    assert "1 from the cache" in out
    code, out, _ = run(capsys, "prove", "--op", "GemmFwdOp", "--no-cache")
    assert code == 0 and "cached" not in out.splitlines()[0]


def test_prove_family_gap_text(capsys, tmp_path: Path, prover) -> None:
    path = write(tmp_path, "toy.yaml", GAP)
    code, out, _ = run(capsys, "prove", str(path))
    assert code == 1
    assert out.startswith("refuted  GapFwdOp  (")
    line = next(ln for ln in out.splitlines() if "error[family-gap]" in ln)
    assert ":6:7: error[family-gap]: GapFwdOp signature.types.Mat: " in line
    assert "    counterexample:" in out and "      trans = true" in out
    assert "     6 |       Mat:\n       |       ^" in out
    assert "1 refuted" in out.splitlines()[-2]
    # a spec outside the bundled manifest has no op class: its code checks are skipped, and
    # the report says so
    assert out.splitlines()[-1] == "code checks: 0 run; 1 skipped (no op class is bound to this manifest)"


def test_a_cached_result_is_not_replayed_at_old_lines(capsys, tmp_path: Path, prover) -> None:
    """The cache key holds where the spec's parts are written: a comment added above a
    declaration moves its diagnostic, and the cached diagnostic at the old line is not used."""
    path = write(tmp_path, "toy.yaml", GAP)
    assert ":6:7: error[family-gap]" in run(capsys, "prove", str(path))[1]
    assert "cached]" in run(capsys, "prove", str(path))[1].splitlines()[0]
    path.write_text("# a comment moves every line down\n" + path.read_text())
    code, out, _ = run(capsys, "prove", str(path))
    assert code == 1 and "cached]" not in out.splitlines()[0]
    assert ":7:7: error[family-gap]" in out and ":6:7:" not in out


def test_prove_family_gap_sarif(capsys, tmp_path: Path, prover) -> None:
    path = write(tmp_path, "toy.yaml", GAP)
    code, out, _ = run(capsys, "prove", "--format", "sarif", str(path))
    doc = json.loads(out)
    assert code == 1 and doc["version"] == "2.1.0" and "$schema" in doc
    run_ = doc["runs"][0]
    assert run_["tool"]["driver"]["name"] == "opspec"
    assert "family-gap" in [r["id"] for r in run_["tool"]["driver"]["rules"]]
    gap = next(r for r in run_["results"] if r["ruleId"] == "family-gap")
    assert gap["level"] == "error" and gap["message"]["text"]
    loc = gap["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].endswith("toy.yaml")
    assert loc["region"] == {"startLine": 6, "startColumn": 7}
    assert gap["properties"]["counterexample"]


def test_prove_junit_one_testcase_per_spec(capsys, tmp_path: Path, prover) -> None:
    write(tmp_path, "toy_a.yaml", GOOD)
    write(tmp_path, "toy_b.yaml", GAP)
    out_file = tmp_path / "out" / "report.xml"
    out_file.parent.mkdir()
    code, out, _ = run(capsys, "prove", "--format", "junit", "--output", str(out_file),
                       str(tmp_path))
    assert code == 1 and out == ""
    suite = next(ET.parse(out_file).getroot().iter("testsuite"))
    assert suite.get("name") == "opspec prove"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"ToyFwdOp", "GapFwdOp"}
    assert cases["ToyFwdOp"].find("failure") is None
    assert cases["GapFwdOp"].find("failure") is not None
    assert cases["GapFwdOp"].get("classname") == "toy_b"


def test_prove_missing_op_is_reported(capsys, prover) -> None:
    code, out, _ = run(capsys, "prove", "--op", "NoSuchFwdOp")
    assert code == 1 and "no spec named NoSuchFwdOp" in out


def test_prove_missing_path_exits_two(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "prove", str(tmp_path / "nope"))
    assert code == 2 and "no such file or folder" in err


def test_explain_gemm(capsys, prover) -> None:
    code, out, _ = run(capsys, "explain", "GemmFwdOp")
    assert code == 0, out
    assert ("GemmFwdOp(trans_a, trans_b : Bool) : ∀ (M N K : Dim) (T : DType[bfloat16 | "
            "float16]). Tensor[T, Mat[trans_a, M, K]] → Tensor[T, Mat[trans_b, K, N]] → "
            "Tensor[T, [M, N]]") in out
    assert "Mat[t: Bool, R: Dim, C: Dim] = match t { false → [R, C]; true → [C, R] }" in out
    assert "plan for GemmFwdOp (4 branch(es))" in out


def test_explain_unknown_op_exits_two(capsys) -> None:
    code, _, err = run(capsys, "explain", "GemmFwOp")
    assert code == 2 and "did you mean GemmFwdOp?" in err


def test_signature_in_mathematical_form() -> None:
    from opspec.cli.explain import describe_spec, explain_extras
    from opspec.manifest import load_bundled
    from opspec.schema.elaborate import elaborate, elaborate_adts

    manifest = load_bundled(strict=True)
    spec, diags = elaborate(manifest.specs["GemmFwdOp"], elaborate_adts(manifest.adts)[0])
    assert diags == []
    assert describe_spec(spec)[:2] == [
        "GemmFwdOp(trans_a, trans_b : Bool) : ∀ (M N K : Dim) (T : DType[bfloat16 | float16]). "
        "Tensor[T, Mat[trans_a, M, K]] → Tensor[T, Mat[trans_b, K, N]] → Tensor[T, [M, N]]",
        "  Mat[t: Bool, R: Dim, C: Dim] = match t { false → [R, C]; true → [C, R] }",
    ]
    extras = explain_extras("GemmFwdOp")
    assert "generated code:" in extras
    assert any(line.strip().startswith("def call_GemmFwdOp") for line in extras)
    assert extras[-1] == "compile boundary: opspec::gemm_fwd_op"


# -- prove and explain over a fake prover (the CLI's own paths) -----------------------------

class _FakeResult:
    def __init__(self, op: str, file: str, diagnostics: list, plan=None):
        self.op, self.file, self.status = op, file, "spec-only"
        self.verdict = "refuted" if any(d.is_error for d in diagnostics) else "proven"
        self.diagnostics, self.plan = diagnostics, plan
        self.seconds, self.combinations, self.cached = 0.25, 2, False


class _FakeReport:
    def __init__(self, specs: list, seconds: float = 0.5):
        self.specs, self.diagnostics, self.seconds = specs, [], seconds


@pytest.fixture
def fake_prover(monkeypatch: pytest.MonkeyPatch) -> list:
    """Replace the prover: every spec proven except `GapFwdOp`, refuted with a family gap."""
    from opspec.cli import main as cli_main
    from opspec.schema import Diagnostic

    calls: list = []

    def prove(manifest, ops, *, jobs, use_cache, progress=None, plans=False):
        calls.append({"ops": ops, "jobs": jobs, "use_cache": use_cache})
        specs = []
        for name, s in manifest.specs.items():
            if ops and name not in ops:
                continue
            diags = list(s.diagnostics)
            if name == "GapFwdOp":
                diags.append(Diagnostic("family-gap", "no case of type family Mat covers t=true",
                                        op=name, path="signature.types.Mat",
                                        pos=s.pos("signature.types.Mat"),
                                        counterexample={"trans": True}))
            specs.append(_FakeResult(name, s.file, diags))
        return _FakeReport(specs)

    monkeypatch.setattr(cli_main, "_prove", prove)
    return calls


def test_fake_prove_options(capsys, tmp_path: Path, fake_prover: list) -> None:
    write(tmp_path, "toy_a.yaml", GOOD)
    path = write(tmp_path, "toy_b.yaml", GAP).parent
    code, out, _ = run(capsys, "prove", str(path), "--jobs", "0", "--no-cache")
    assert code == 1 and fake_prover[-1] == {"ops": None, "jobs": os.cpu_count() or 1,
                                             "use_cache": False}
    assert ":6:7: error[family-gap]: GapFwdOp signature.types.Mat:" in out
    code, out, _ = run(capsys, "prove", str(path), "--op", "ToyFwdOp", "--op", "X", "-j", "3")
    assert code == 0 and fake_prover[-1] == {"ops": ["ToyFwdOp", "X"], "jobs": 3,
                                             "use_cache": True}
    assert out.splitlines()[0].startswith("proven  ToyFwdOp  (")


def test_fake_prove_formats_and_output(capsys, tmp_path: Path, fake_prover: list) -> None:
    write(tmp_path, "toy_a.yaml", GOOD)
    path = write(tmp_path, "toy_b.yaml", GAP).parent
    code, out, err = run(capsys, "prove", "--format", "sarif", "--stats", "-o",
                         str(tmp_path / "r.sarif"), str(path))
    assert code == 1 and out == "" and "slowest specs" in err
    doc = json.loads((tmp_path / "r.sarif").read_text())
    (res,) = doc["runs"][0]["results"]
    assert res["ruleId"] == "family-gap"
    assert res["locations"][0]["physicalLocation"]["region"] == {"startLine": 6,
                                                                "startColumn": 7}
    code, out, _ = run(capsys, "prove", "--format", "junit", str(path))
    cases = list(ET.fromstring(out).iter("testcase"))
    assert [c.get("name") for c in cases] == ["ToyFwdOp", "GapFwdOp"]
    assert [c.find("failure") is not None for c in cases] == [False, True]
    code, out, _ = run(capsys, "prove", "--format", "json", "--stats", str(path))
    doc = json.loads(out)
    assert set(doc) == {"specs", "diagnostics", "summary", "stats"}
    assert doc["summary"]["refuted"] == 1 and doc["summary"]["proven"] == 1
    code, out, _ = run(capsys, "prove", "--stats", str(path))
    assert "slowest specs (2 of 2)" in out and "0.500 s" in out


def test_fake_prove_unwritable_output_exits_two(capsys, tmp_path: Path, fake_prover) -> None:
    path = write(tmp_path, "toy.yaml", GOOD)
    code, _, err = run(capsys, "prove", "-o", str(tmp_path / "no" / "dir" / "r.txt"), str(path))
    assert code == 2 and "cannot write" in err


def test_fake_explain(capsys, fake_prover: list) -> None:
    code, out, _ = run(capsys, "explain", "GemmFwdOp", "--no-cache")
    assert code == 0 and fake_prover[-1]["ops"] == ["GemmFwdOp"]
    assert out.startswith("GemmFwdOp(trans_a, trans_b : Bool) : ∀ (M N K : Dim)")
    assert "proven  GemmFwdOp" in out and "no plan" in out
