"""Helpers of the prover's conformance tests (tests/test_prove*.py).

Every spec of those tests is a small YAML text written to a temporary folder, loaded
strictly and proven with `prove_manifest`, as `opspec prove` does. A diagnostic is pinned by
its check id, severity, op, declaration path, the YAML line it points at and its
counterexample; the spec by its verdict.
"""

from __future__ import annotations

import contextlib
import textwrap
from dataclasses import dataclass
from pathlib import Path

from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.loader import load_paths
from opspec.solver.prove import PROVEN, REFUTED, UNKNOWN, SpecResult
from opspec.solver.run import ProofReport, prove_manifest

__all__ = ["OP", "LAYOUT", "MAT", "ERROR", "WARNING", "ADVISORY", "PROVEN", "REFUTED", "UNKNOWN",
           "Proof", "toy", "prove", "expect"]

OP = "ToyFwdOp"
ERROR, WARNING, ADVISORY = Severity.ERROR, Severity.WARNING, Severity.ADVISORY

#: A two-constructor ADT: `contiguous` has a finitely-valued field (`packing`, so it makes two
#: discriminant values) and an unbounded one tied to it by the invariant; `masked` has one.
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

#: The transposable-operand family of the GEMM example (seed § 2.1), as `types:` text.
MAT = """\
types:
  Mat:
    params: {t: Bool, R: Dim, C: Dim}
    match: t
    cases:
    - {when: false, is: "[R, C]"}
    - {when: true, is: "[C, R]"}
"""


def toy(*signature: str, op: str = OP, family: str = "toy",
        workloads: str = "- {label: small}") -> str:
    """A spec `op` around `signature` (the body of its `signature:` mapping, in parts that
    are each dedented); `workloads` is the body of its `workloads:` list (a row is also a
    witness that a branch is alive)."""
    text = "\n".join(textwrap.dedent(part).strip("\n") for part in signature)
    body = textwrap.indent(text, "    ")
    rows = textwrap.indent(textwrap.dedent(workloads).strip("\n"), "  ")
    return (f"{op}:\n  family: {family}\n  status: spec-only\n  signature:\n{body}\n"
            f"  workloads:\n{rows}\n  roofline: {{flops: \"1\"}}\n")


@dataclass
class Proof:
    text: str
    file: Path
    report: ProofReport

    def spec(self, op: str = OP) -> SpecResult:
        (r,) = [s for s in self.report.specs if s.op == op]
        return r

    def line(self, needle: str) -> int:
        """The 1-based line of the one line of the family file that contains `needle`."""
        hits = [i for i, ln in enumerate(self.text.splitlines(), 1) if needle in ln]
        assert len(hits) == 1, f"{needle!r} is on lines {hits}"
        return hits[0]

    def diags(self, check: str | None = None, op: str = OP) -> list[Diagnostic]:
        return [d for d in self.spec(op).diagnostics if check is None or d.check == check]

    def rendered(self) -> list[str]:
        return [d.render() for d in self.report.all_diagnostics]


def prove(tmp_path: Path, *specs: str, types: str | None = None, family: str = "toy") -> Proof:
    """Write `specs` to `<family>.yaml` (and `types` to `types.yaml`) in `tmp_path`, load the
    folder strictly and prove it. Loading itself must report nothing."""
    text = "".join(specs)
    file = tmp_path / f"{family}.yaml"
    file.write_text(text)
    if types is not None:
        (tmp_path / "types.yaml").write_text(textwrap.dedent(types))
    manifest = load_paths([tmp_path], strict=True)
    assert not manifest.diagnostics, [d.render() for d in manifest.diagnostics]
    with without_workload_check():
        report = prove_manifest(manifest)
    assert not report.diagnostics, [d.render() for d in report.diagnostics]
    return Proof(text, file, report)


@contextlib.contextmanager
def without_workload_check():
    """These tests pin the per-combination checks; their specs' rows are placeholders
    (`{label: small}`, a witness of a live branch at most), so the whole-spec `workload`
    pass, which tests/test_workload_check.py covers, is left out while they prove."""
    from opspec.solver import spec_checks
    from opspec.solver.workload_check import check_workloads

    saved = list(spec_checks.SPEC_CHECKS)
    spec_checks.SPEC_CHECKS[:] = [c for c in saved if c is not check_workloads]
    try:
        yield
    finally:
        spec_checks.SPEC_CHECKS[:] = saved


def expect(proof: Proof, check: str, *, path: str, line: int, severity: Severity, verdict: str,
           op: str = OP, contains: str = "", alone: bool = True) -> Diagnostic:
    """The one diagnostic `check` of `op` at `path` (whose message contains `contains`): its
    severity, op, file and line, and the spec's verdict. With `alone`, `op` has no
    diagnostic of another check (no cascade)."""
    found = [d for d in proof.diags(op=op) if d.check == check and d.path == path
             and contains in d.message]
    assert len(found) == 1, (check, path, proof.rendered())
    d = found[0]
    assert d.severity is severity, d.render()
    assert d.op == op, d.render()
    assert d.pos is not None and d.pos.file == str(proof.file), d.render()
    assert d.pos.line == line, (line, d.render())
    assert proof.spec(op).verdict == verdict, proof.rendered()
    if alone:
        others = [x.render() for x in proof.diags(op=op) if x.check != check]
        assert not others, others
    return d
