"""The differential test over every bundled op (tests/test_differential.py covers GEMM,
SiluAndMul and two user specs in depth): valid calls drawn from Z3 models of the spec are
accepted, run (the Triton kernels through the interpreter on CPU) and agree with the op's
float64 reference from `opspec bench`; for every declaration a call can break, violating
calls are rejected with an error naming it, and write nothing.

The reference of an op that writes its inputs returns the outputs and then the written
inputs (the bench convention), and is compared the same way here. The figures are printed
by the last test of the module.
"""

from __future__ import annotations

import collections

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import opspec.ops as ops
from opspec.ops import bench_baselines as BB
from opspec.ops.bench_harness import results_of
from opspec.ops.testing import SilentPass, assert_rejected, declarations, valid_calls, violating_calls

#: Covered in depth by tests/test_differential.py.
ELSEWHERE = {"GemmFwdOp", "SiluAndMulFwdOp"}
OPS = sorted(n for n in ops.__all__ if n.endswith("FwdOp") and n not in ELSEWHERE)

VALID_EXAMPLES = 6
VIOLATING_EXAMPLES = 2
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])

TALLY: collections.Counter = collections.Counter()
SILENT: list[str] = []


def _hypothesis(strategy, body, max_examples: int) -> None:
    @settings(max_examples=max_examples, **SETTINGS)
    @given(strategy)
    def inner(call):
        body(call)

    inner()


def _accepts(call) -> None:
    op = call.construct()
    got = call.check(op)
    for k, v in got.items():
        if k in call.indices:
            assert v == call.indices[k], (k, v, call.indices[k], call)
    # the reference sees the inputs before the call writes any
    ref = BB.REFERENCES[call.op.__name__](op, *[BB.upcast(t) for t in call.inputs])
    refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    result = call.run(op)
    names = op._info().inputs
    written = tuple(sorted(names.index(n) for n in op.last_call.written))
    got_results = results_of(result, call.inputs, written)
    assert len(got_results) == len(refs), (len(got_results), len(refs), call)
    for g, r in zip(got_results, refs):
        assert tuple(g.shape) == tuple(r.shape), (g.shape, r.shape, call)
        tol = BB.tolerance_for(call.op.__name__, g.dtype)
        torch.testing.assert_close(g.to(torch.float64), r.to(torch.float64),
                                   rtol=max(tol.rtol, 1e-6), atol=max(tol.atol, 1e-6),
                                   equal_nan=True)
    TALLY["valid run"] += 1


def _rejects(call) -> None:
    try:
        assert_rejected(call)
    except SilentPass:
        SILENT.append(repr(call))
        TALLY["silent passes"] += 1
        raise
    TALLY["violating"] += 1


@pytest.mark.parametrize("name", OPS)
def test_valid_calls_run_and_match_the_reference(name):
    _hypothesis(valid_calls(getattr(ops, name)), _accepts, VALID_EXAMPLES)


@pytest.mark.parametrize("name", OPS)
def test_violating_calls_are_rejected(name):
    op = getattr(ops, name)
    decls = declarations(op)
    assert decls, name
    TALLY["declarations"] += len(decls)
    for path in decls:
        _hypothesis(violating_calls(op, path), _rejects, VIOLATING_EXAMPLES)


def test_zz_summary(capsys):
    with capsys.disabled():
        print("\n[differential, bundled] " + ", ".join(f"{k}: {v}" for k, v in sorted(TALLY.items())))
    assert not SILENT, SILENT
    assert TALLY["violating"] > 0 and TALLY["valid run"] > 0
