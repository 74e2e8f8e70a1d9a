"""Isolation: one spec's trouble stays that spec's.

A spec that exhausts Z3's budget is `unknown`, and every other spec of the manifest is still
checked. A prover exception is reported against the spec it was proving, in-process
(`jobs=1`) and in a worker process (`jobs=2`). A worker that dies outright (`os._exit`, a
fatal signal) breaks `concurrent.futures`' whole pool, failing every pending spec with
BrokenProcessPool: `prove_manifest` proves those again, each in a pool of its own, and
reports only the spec whose worker died.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import signal
import time

import pytest

from opspec.schema.diagnostics import Severity
from opspec.schema.loader import load_paths
from opspec.solver import run as R
from opspec.solver.prove import PROVEN, REFUTED, UNKNOWN
from opspec.solver.run import ProofCache, prove_manifest


def _spec(op: str, signature: str) -> str:
    body = "".join(f"    {line}\n" for line in signature.strip("\n").splitlines())
    row = ROWS[signature]
    return (f"{op}:\n  family: toy\n  status: spec-only\n  signature:\n{body}"
            f"  workloads:\n  - {{{row}, dtype_cases: [{{T: float16}}], label: small}}\n"
            f"  roofline: {{flops: \"1\"}}\n")


GOOD = """\
forall: {M: Dim, T: "DType[float16]"}
inputs:
  x: {dtype: T, shape: "[M]"}
outputs:
  y: {dtype: T, shape: "[M]"}
"""

AMBIGUOUS = """\
forall: {M: Dim, N: Dim, T: "DType[float16]"}
inputs:
  x: {dtype: T, shape: "[M * N]"}
outputs:
  y: {dtype: T, shape: "[M, N]"}
"""

#: Fermat's cubic case over Dims with positivity: no budget decides it.
CUBIC = """\
forall: {x: Dim, y: Dim, z: Dim, T: "DType[float16]"}
params:
  f: {type: bool}
inputs:
  a: {dtype: T, shape: "[x, y, z]"}
outputs:
  b: {dtype: T, shape: "[x]"}
shape_rules:
- "not f or (x * x * x + y * y * y == z * z * z and x > 0 and y > 0 and z > 0)"
"""

#: The workload row of each signature (every index and parameter it uses).
ROWS = {GOOD: "M: 4", AMBIGUOUS: "M: 2, N: 3", CUBIC: "x: 1, y: 1, z: 1, f: false"}

#: The expected verdict of each spec of the manifest, and its checks (diagnostic ids).
EXPECTED = {
    "OneFwdOp": (PROVEN, set()),
    "AmbiguousFwdOp": (REFUTED, {"ambiguous"}),
    "CubicFwdOp": (UNKNOWN, {"unknown"}),
    "TwoFwdOp": (PROVEN, set()),
    "ThreeFwdOp": (PROVEN, set()),
    "FourFwdOp": (PROVEN, set()),
}


@pytest.fixture
def manifest(tmp_path):
    text = (_spec("OneFwdOp", GOOD) + _spec("AmbiguousFwdOp", AMBIGUOUS)
            + _spec("CubicFwdOp", CUBIC) + _spec("TwoFwdOp", GOOD)
            + _spec("ThreeFwdOp", GOOD) + _spec("FourFwdOp", GOOD))
    (tmp_path / "toy.yaml").write_text(text)
    m = load_paths([tmp_path], strict=True)
    assert not m.diagnostics, [d.render() for d in m.diagnostics]
    return m


def _verdicts(report) -> dict[str, tuple[str, set[str]]]:
    return {s.op: (s.verdict, {d.check for d in s.diagnostics}) for s in report.specs}


def _crash_diag(report, op: str):
    (spec,) = [s for s in report.specs if s.op == op]
    assert spec.verdict == REFUTED
    (d,) = spec.diagnostics
    assert d.check == "unknown" and d.severity is Severity.ERROR and d.op == op
    assert "the prover crashed on this spec" in d.message
    assert d.pos is not None and d.pos.file == spec.file  # points into the spec's file
    return d


# -- a spec that exhausts Z3 -----------------------------------------------------------------

@pytest.mark.parametrize("jobs", [1, 2])
def test_a_spec_that_exhausts_z3_is_unknown_and_the_others_are_checked(manifest, jobs):
    start = time.perf_counter()
    report = prove_manifest(manifest, jobs=jobs)
    assert time.perf_counter() - start < 30  # the budget stops Z3, not a wall clock
    assert _verdicts(report) == EXPECTED
    assert [s.op for s in report.specs] == list(EXPECTED)  # manifest order, whatever finished first
    (d,) = [d for s in report.specs for d in s.diagnostics if s.op == "CubicFwdOp"]
    assert d.severity is Severity.ADVISORY and d.counterexample == {"f": True}
    assert "could not decide" in d.message
    assert not report.diagnostics


# -- a prover exception ------------------------------------------------------------------------

_REAL_PROVE_ONE = R._prove_one
_REAL_PROVE_IN_CONTEXT = R._prove_in_context


class _TwoArgError(Exception):
    """An exception pickle cannot rebuild (its __init__ takes two arguments, its args one)."""

    def __init__(self, what: str, where: str):
        super().__init__(f"{what} in {where}")


# The replacements below are module-level functions, so that a worker process can unpickle
# them (the pool is handed `_prove_one` by reference) or inherit them (a forked worker).

def _raising_prove_in_context(loaded, adt_defs, rlimit):
    if loaded.name == "TwoFwdOp":
        raise _TwoArgError("boom", loaded.name)
    return _REAL_PROVE_IN_CONTEXT(loaded, adt_defs, rlimit)


def _raising_prove_one(loaded, *args):
    if loaded.name == "TwoFwdOp":
        raise RuntimeError("boom in TwoFwdOp")
    return _REAL_PROVE_ONE(loaded, *args)


def _dying_prove_one(loaded, *args):
    if loaded.name == "ThreeFwdOp":
        os._exit(3)  # dies without a word, as a worker the OOM killer took
    if loaded.name == "FourFwdOp":
        faulthandler.disable()  # pytest's handler would print this worker's stack
        os.kill(os.getpid(), signal.SIGSEGV)  # as a segfault in Z3's native code
    return _raising_prove_one(loaded, *args)


def test_an_exception_in_process_is_reported_against_its_spec(manifest, monkeypatch):
    monkeypatch.setattr(R, "_prove_in_context", _raising_prove_in_context)
    report = prove_manifest(manifest, jobs=1)
    d = _crash_diag(report, "TwoFwdOp")
    assert "_TwoArgError: boom in TwoFwdOp" in d.message
    assert _verdicts(report) == {**EXPECTED, "TwoFwdOp": (REFUTED, {"unknown"})}
    assert not report.diagnostics  # the crash belongs to the spec, not the run


def test_an_exception_in_a_worker_is_reported_against_its_spec(manifest, monkeypatch):
    monkeypatch.setattr(R, "_prove_one", _raising_prove_one)
    report = prove_manifest(manifest, jobs=2)
    d = _crash_diag(report, "TwoFwdOp")
    assert "RuntimeError: boom in TwoFwdOp" in d.message
    assert _verdicts(report) == {**EXPECTED, "TwoFwdOp": (REFUTED, {"unknown"})}
    assert not report.diagnostics


@pytest.mark.skipif(mp.get_context().get_start_method() != "fork",
                    reason="the patched prover reaches the workers by fork")
def test_an_exception_that_cannot_be_pickled_breaks_no_pool(manifest, monkeypatch):
    # Raised by the prover itself in the worker: it used to break the whole pool (the parent
    # cannot unpickle it), and so every pending spec was reported as crashed.
    monkeypatch.setattr(R, "_prove_in_context", _raising_prove_in_context)
    report = prove_manifest(manifest, jobs=2)
    d = _crash_diag(report, "TwoFwdOp")
    assert "_TwoArgError: boom in TwoFwdOp" in d.message, d.message
    assert _verdicts(report) == {**EXPECTED, "TwoFwdOp": (REFUTED, {"unknown"})}


# -- a worker that dies -----------------------------------------------------------------------

def test_a_dying_worker_is_reported_against_its_spec_only(manifest, monkeypatch, tmp_path):
    monkeypatch.setattr(R, "_prove_one", _dying_prove_one)
    cache = ProofCache(tmp_path / "cache")
    seen = []
    report = prove_manifest(manifest, jobs=2, cache=cache,
                            progress=lambda done, total, r: seen.append((done, total, r.op)))
    for op in ("ThreeFwdOp", "FourFwdOp"):
        d = _crash_diag(report, op)
        assert "its worker process died" in d.message, d.message
    assert "RuntimeError: boom in TwoFwdOp" in _crash_diag(report, "TwoFwdOp").message
    crashed = {"TwoFwdOp", "ThreeFwdOp", "FourFwdOp"}
    assert _verdicts(report) == {**EXPECTED, **{op: (REFUTED, {"unknown"}) for op in crashed}}
    assert not report.diagnostics
    # Each spec is finished once, in a progress line of its own.
    assert [d for d, _, _ in seen] == list(range(1, len(EXPECTED) + 1))
    assert sorted(op for _, _, op in seen) == sorted(EXPECTED)
    # Crashes are not cached; the others are, and a second run proves only the crashed ones.
    again = prove_manifest(manifest, jobs=2, cache=cache)
    assert {s.op for s in again.specs if s.cached} == set(EXPECTED) - crashed
    assert _verdicts(again) == _verdicts(report)


def test_a_dying_worker_with_every_spec_pending(tmp_path, monkeypatch):
    # The killer comes first: every spec still pending when its worker dies is lost with it,
    # and must still be proven.
    text = _spec("ThreeFwdOp", GOOD) + "".join(_spec(f"Ok{i}FwdOp", GOOD) for i in range(5))
    (tmp_path / "toy.yaml").write_text(text)
    m = load_paths([tmp_path], strict=True)
    monkeypatch.setattr(R, "_prove_one", _dying_prove_one)
    report = prove_manifest(m, jobs=2)
    assert "its worker process died" in _crash_diag(report, "ThreeFwdOp").message
    assert {s.op: s.verdict for s in report.specs if s.op != "ThreeFwdOp"} == {
        f"Ok{i}FwdOp": PROVEN for i in range(5)}
