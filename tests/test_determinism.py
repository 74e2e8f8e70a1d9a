"""Determinism: the same spec gives the same verdict and counterexample on every run.

A small manifest of broken specs (an ambiguous `[M * N]`, a negative axis, a dead branch, a
family gap, an ADT and enum parameter, a dtype set, a nonlinear refinement that exhausts
Z3's budget) is proven by `python -m opspec.cli prove --format json --no-cache` in separate
processes with different PYTHONHASHSEED values, serially and with `--jobs 2`. The reports,
less their timing fields, must be identical byte for byte: string hashing (set iteration
order), the order specs reach the workers and what a worker proved before must not change
a verdict, a message, a counterexample, or the order of anything in the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Each spec below is broken one way (see the module docstring); together they reach the
# places where order could come from a set or a dict built from one.
SPECS = """\
AmbiguousFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16]"}
    inputs:
      x: {dtype: T, shape: "[M * N]"}
    outputs:
      y: {dtype: T, shape: "[M, N]"}
  workloads:
  - {M: 2, N: 3, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "1"}
NegativeFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, K: Dim, T: "DType[float16 | bfloat16 | float32]"}
    inputs:
      x: {dtype: T, shape: "[M, N, K]"}
    outputs:
      y: {dtype: T, shape: "[M - N, K - 1, ceil_div(M, 2) - 2]"}
  workloads:
  - {M: 4, N: 2, K: 3, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "1"}
DeadFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, T: "DType[float16]"}
    params:
      big: {type: bool}
      mode: {type: "'fast' | 'exact' | 'slow'"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
    shape_rules:
    - "not big or M > 4"
    - "M < 2"
    - "mode != 'slow' or M > 8"
  workloads:
  - {M: 1, big: false, mode: fast, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "1"}
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
      Pick:
        params: {m: "'a' | 'b' | 'c'", R: Dim}
        match: m
        cases:
        - {when: a, is: "[R]"}
        - {when: c, is: "[R, R]"}
    forall: {M: Dim, K: Dim, T: "DType[float16]"}
    params:
      trans_a: {type: bool, default: false}
      m: {type: "'a' | 'b' | 'c'"}
    inputs:
      a: {dtype: T, shape: "Mat[trans_a, M, K]"}
      b: {dtype: T, shape: "Pick[m, K]"}
    outputs:
      c: {dtype: T, shape: "[M, K]"}
  workloads:
  - {M: 2, K: 3, m: a, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "1"}
LayoutFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16]"}
    params:
      layout: {type: Layout}
    inputs:
      x: {dtype: T, shape: "[M, N]"}
    outputs:
      y: {dtype: T, shape: "[M, N - 1]"}
    shape_rules:
    - "layout.kind == 'masked' or layout.alignment == 0"
  workloads:
  - {M: 2, N: 3, layout: {masked: {max_m: 4}}, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "1"}
CubicFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {x: Dim, y: Dim, z: Dim, T: "DType[float16]"}
    params:
      f: {type: bool}
    inputs:
      a: {dtype: T, shape: "[x, y, z]"}
    outputs:
      b: {dtype: T, shape: "[x]"}
    shape_rules:
    - "not f or (x * x * x + y * y * y == z * z * z and x > 0 and y > 0 and z > 0)"
  workloads:
  - {x: 1, y: 1, z: 1, f: false, dtype_cases: [{T: float16}], label: small}
  roofline: {flops: "1"}
"""

TYPES = """\
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

#: (PYTHONHASHSEED, --jobs) of each run; the first is the reference.
RUNS = [("0", 1), ("1", 1), ("4242", 2), ("random", 2)]

#: Keys of the JSON report that hold timings, the only part that may differ between runs.
TIMING_KEYS = {"seconds", "wall_seconds", "total_seconds"}


def _untimed(doc):
    if isinstance(doc, dict):
        return {k: _untimed(v) for k, v in doc.items() if k not in TIMING_KEYS}
    if isinstance(doc, list):
        return [_untimed(v) for v in doc]
    return doc


def _prove(folder: Path, seed: str, jobs: int) -> tuple[str, dict]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    proc = subprocess.run(
        [sys.executable, "-m", "opspec.cli", "prove", str(folder), "--format", "json",
         "--no-cache", "--jobs", str(jobs)],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr  # the specs are broken: errors, exit status 1
    doc = json.loads(proc.stdout)
    # Dumped as the report is (key order kept, not sorted): an order that changes is a change.
    return json.dumps(_untimed(doc), indent=2), doc


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("determinism")
    (folder / "toy.yaml").write_text(SPECS)
    (folder / "types.yaml").write_text(TYPES)
    # The runs are separate processes; running them side by side only saves time.
    with ThreadPoolExecutor(len(RUNS)) as pool:
        return list(pool.map(lambda run: _prove(folder, *run), RUNS))


def test_the_manifest_is_broken_in_every_intended_way(reports):
    _, doc = reports[0]
    by_op = {s["op"]: s for s in doc["specs"]}
    checks = {op: {d["check"] for d in s["diagnostics"]} for op, s in by_op.items()}
    assert "ambiguous" in checks["AmbiguousFwdOp"]
    assert "negative-axis" in checks["NegativeFwdOp"]
    assert "dead-branch" in checks["DeadFwdOp"]
    assert "family-gap" in checks["GapFwdOp"]
    assert checks["LayoutFwdOp"] == {"dead-branch", "negative-axis"}
    assert by_op["CubicFwdOp"]["verdict"] == "unknown"
    # Counterexamples are there to compare, not only verdicts.
    assert all(d["counterexample"] for s in doc["specs"] for d in s["diagnostics"]
               if d["check"] in ("ambiguous", "negative-axis", "dead-branch", "family-gap"))


@pytest.mark.parametrize("i", range(1, len(RUNS)), ids=[f"seed={s},jobs={j}" for s, j in RUNS[1:]])
def test_reports_are_identical_across_processes(reports, i):
    reference, _ = reports[0]
    text, _ = reports[i]
    assert text == reference


def test_only_timings_were_removed(reports):
    # The comparison would be empty if everything were stripped.
    _, doc = reports[0]
    assert set(doc["specs"][0]) - TIMING_KEYS >= {"op", "verdict", "diagnostics", "combinations"}
    assert doc["summary"] == {**doc["summary"], "specs": 6, "unknown": 1}
