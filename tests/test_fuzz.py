"""Property tests over generated specs (tests/spec_strategies.py): load → elaborate → prove.

- A spec drawn from the language (indices, parameters of every kind, families, affine axes,
  splats, lets, refinements, effects, consistent workload rows, roofline) proves without
  an error.
- The same spec mutated (keys dropped, renamed or duplicated, names swapped, expressions
  replaced by random tokens, kinds changed, values of other types, text truncated or
  spliced) ends in diagnostics: never an exception, never a crash reported by the prover,
  and within a generous time (a hang guard; speed is not asserted).

The CI profile is small and deterministic (`derandomize=True`); `benchmarks/fuzz.py` runs the
same generator on many more seeds, in processes, with a per-spec timeout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_strategies import (FAMILY, OP, Crash, mutated_cases, random_case,  # noqa: E402
                             run_case, to_yaml, valid_cases)

#: Seconds one spec may take before the test calls it a hang (not a speed requirement).
HANG_GUARD = 20.0

CI = settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _run(case, folder: Path):
    try:
        out = run_case(case, folder)
    except Crash as exc:  # the prover caught it, but it is a crash all the same
        pytest.fail(f"crash on {case.mutations}: {exc}\n{case.files()}")
    assert out.seconds < HANG_GUARD, (out.seconds, case.files())
    return out


def test_valid_specs_prove_without_errors(folder):
    @CI
    @given(valid_cases())
    def check(case):
        out = _run(case, folder)
        assert out.verdicts == {OP: "proven"} or (
            out.verdicts == {OP: "unknown"} and not out.errors), out.diagnostics
        assert not out.errors, (out.errors, case.files()[f"{FAMILY}.yaml"])

    check()


def test_mutated_specs_end_in_diagnostics(folder):
    @CI
    @given(mutated_cases())
    def check(case):
        out = _run(case, folder)
        assert set(out.verdicts.values()) <= {"proven", "refuted", "unknown"}

    check()


def test_generated_text_is_the_data():
    """The emitter writes YAML that the project's reader reads back as the same data."""
    from opspec.schema.yaml_source import load_yaml

    for seed in range(40):
        case = random_case(seed, mutate_p=0.0)
        data, _ = load_yaml(to_yaml(case.spec), "f.yaml")
        assert data == case.spec
        if case.types is not None:
            assert load_yaml(to_yaml(case.types), "t.yaml")[0] == case.types


def test_a_seed_is_one_case():
    """`benchmarks/fuzz.py` saves a crash by its seed: a seed must always make the same case."""
    for seed in (0, 1, 12345):
        a, b = random_case(seed), random_case(seed)
        assert a.files() == b.files() and a.mutations == b.mutations
