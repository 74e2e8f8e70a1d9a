"""The `symint` check (seed § 5 and § 6, check 7): every expression an op with a compile
boundary evaluates at call time must be evaluable on SymInts.

Broken specs are written to a temporary folder as `toy.yaml` and proven with
`prove_manifest(load_paths([dir], strict=True))`; each test pins the check id, the op, the
declaration path and the values (the unsafe part, the call-time sizes it reads and where each
comes from). The corpus findings are pinned at the end, each group with why it is a defect.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from opspec.schema.diagnostics import Severity
from opspec.schema.loader import load_paths
from opspec.solver.run import prove_manifest
from opspec.solver.symint_check import call_time_names

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"

ROW = "- {N: 8, dtype_cases: [{T: float32}], label: small}"


def spec(op: str, signature: str, rows: str = ROW, status: str = "spec-only",
         extra: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(signature).strip("\n"), "    ")
    rows = textwrap.indent(textwrap.dedent(rows).strip("\n"), "  ")
    return (f"{op}:\n  family: toy\n  status: {status}\n  signature:\n{body}\n"
            f"  workloads:\n{rows}\n  roofline: {{flops: \"1\"}}\n{extra}")


def prove(tmp_path: Path, *specs: str):
    (tmp_path / "toy.yaml").write_text("".join(specs))
    manifest = load_paths([tmp_path], strict=True)
    assert not manifest.diagnostics, [d.render() for d in manifest.diagnostics]
    return prove_manifest(manifest, plans=True)


def symint(report, op: str | None = None):
    return [d for d in report.all_diagnostics if d.check == "symint" and (op is None or d.op == op)]


def only(report, op: str, path: str):
    found = [d for d in symint(report, op) if d.path == path]
    assert len(found) == 1, [d.render() for d in symint(report)]
    assert len(symint(report, op)) == 1, [d.render() for d in symint(report, op)]
    d = found[0]
    # a conversion torch can guard compiles (a warning); see test_unevaluable_primitive
    assert d.severity is Severity.WARNING and d.op == op
    return d


# ============================================================================ broken specs

def test_max_in_a_let_of_call_time_sizes(tmp_path):
    # The docs' example: `max` compares N with 64; N is solved from x at call time.
    rep = prove(tmp_path, spec("PadToFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[P]"}
        let:
          P: "max((N, 64))"
        """))
    d = only(rep, "PadToFwdOp", "signature.let.P")
    assert d.message.startswith("`max((N, 64))` (let `P`) is evaluated at call time, on "
                                "SymInts under torch.compile: `max((N, 64))` calls `max` on "
                                "call-time sizes, and `max` is not SymInt-safe")
    assert d.counterexample == {"N": "solved at call time from input x, axis 0"}
    assert rep.specs[0].verdict == "proven"  # a warning: the compiled call guards it


def test_conditional_on_call_time_sizes_in_an_output_shape(tmp_path):
    rep = prove(tmp_path, spec("ClampLenFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        params:
          cap: {type: int, default: 64}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[N if N < cap else cap]"}
        shape_rules:
        - "cap > 0"
        """))
    d = only(rep, "ClampLenFwdOp", "signature.outputs.y.shape")
    # the non-negativity check of the axis is its first evaluation on a call
    assert "`[N if N < cap else cap]` (axis 0 of output `y`)" in d.message
    assert "the conditional `N if N < cap else cap` needs the truth value of its test, a " \
           "SymBool, to choose its value" in d.message
    assert d.counterexample == {"N": "solved at call time from input x, axis 0"}


def test_membership_test_over_call_time_sizes(tmp_path):
    rep = prove(tmp_path, spec("BlockFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        shape_rules:
        - "N in (8, 16, 32)"
        """))
    d = only(rep, "BlockFwdOp", "signature.shape_rules.0")
    assert "`N in (8, 16, 32)` (refinement)" in d.message
    assert "the membership test `N in (8, 16, 32)` compares call-time sizes" in d.message
    assert d.hint == "write the alternatives with `or`, e.g. `M == 1 or M == 2`"
    assert d.counterexample == {"N": "solved at call time from input x, axis 0"}


def test_comparison_of_sequences_of_call_time_sizes(tmp_path):
    rep = prove(tmp_path, spec("ScaleShapeFwdOp", """\
        forall: {N: Dim, S: Shape, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
          s: {dtype: float32, shape: "[*S]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        shape_rules:
        - "S == (1,) or S == (N,)"
        """, rows="- {N: 8, S: [1], dtype_cases: [{T: float32}], label: small}"))
    d = only(rep, "ScaleShapeFwdOp", "signature.shape_rules.0")
    assert "the comparisons of sequences `S == (1,)`, `S == (N,)` convert each element " \
           "comparison (a SymBool) to a Python bool" in d.message
    assert d.counterexample == {"N": "solved at call time from input x, axis 0",
                                "S": "solved at call time from input s, axes from 0"}


def test_unsafe_primitive_inside_a_comprehension(tmp_path):
    rep = prove(tmp_path, spec("PositiveFwdOp", """\
        forall: {S: Shape, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[*S]"}
        outputs:
          y: {dtype: T, shape: "[*S]"}
        shape_rules:
        - "all(n > 0 for n in S)"
        """, rows="- {S: [2, 3], dtype_cases: [{T: float32}], label: small}"))
    d = only(rep, "PositiveFwdOp", "signature.shape_rules.0")
    assert "`all(n > 0 for n in S)` calls `all` on call-time sizes" in d.message
    assert d.counterexample == {"S": "solved at call time from input x, axes from 0"}


def test_call_time_size_as_a_primitive_argument_it_must_know(tmp_path):
    # valid_axes normalizes `dim` against `rank`: with a SymInt rank it compares sizes.
    rep = prove(tmp_path, spec("AxisFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        params:
          dim: {type: int, default: 0}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        shape_rules:
        - "valid_axes(dim, N)"
        """))
    d = only(rep, "AxisFwdOp", "signature.shape_rules.0")
    assert "`valid_axes(dim, N)` passes a call-time value as `rank`, which `valid_axes` " \
           "tests or indexes with as a Python value" in d.message


def test_call_time_size_as_an_index(tmp_path):
    rep = prove(tmp_path, spec("PickFwdOp", """\
        forall: {N: Dim, S: Shape, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
          s: {dtype: T, shape: "[*S]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        shape_rules:
        - "len(S) > N and S[N] > 0"
        """, rows="- {N: 1, S: [2, 3], dtype_cases: [{T: float32}], label: small}"))
    d = only(rep, "PickFwdOp", "signature.shape_rules.0")
    assert "`S[N]` indexes with a call-time size, which must become a Python int" in d.message
    assert d.counterexample == {"N": "solved at call time from input x, axis 0"}


def test_unsafe_let_reached_through_another_let(tmp_path):
    # `W` reads only `P`, a call-time let: the finding is in P, where `max` is; W is fine.
    rep = prove(tmp_path, spec("TwoLetsFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[W]"}
        let:
          P: "max((N, 64))"
          W: "2 * P"
        """))
    d = only(rep, "TwoLetsFwdOp", "signature.let.P")
    assert "`max((N, 64))` calls `max`" in d.message
    (r,) = rep.specs
    (b,) = r.plan.branches
    assert call_time_names(r.plan.spec, b) == {
        "N": "solved at call time from input x, axis 0",
        "P": "let computed at call time from N",
        "W": "let computed at call time from P"}


# ============================================================================ sound specs

def test_expressions_a_compile_boundary_can_evaluate(tmp_path):
    rep = prove(tmp_path,
                # connectives, chains, arithmetic, ceil_div and len of a shape are SymInt-safe
                spec("SafeFwdOp", """\
        forall: {N: Dim, S: Shape, T: "DType[float16 | float32]"}
        params:
          k: {type: int, default: 4}
          dim: {type: int, default: -1}
        inputs:
          x: {dtype: T, shape: "[N, *S]"}
        outputs:
          y: {dtype: T, shape: "[ceil_div(N, k), *reduced(S, dim, True, 'full')]"}
        let:
          P: "max((k, 64))"
        shape_rules:
        - "k > 0 and (N % k == 0 or N < P) and not N == 3"
        - "0 < N <= 4096"
        - "valid_axes(dim, len(S)) and len(S) >= 1"
        - "T in ('float16', 'float32')"
        """, rows="- {N: 8, S: [2, 3], dtype_cases: [{T: float32}], label: small}"),
                # max over an index solved from a construction-time tensor: concrete
                spec("HeldFwdOp", """\
        forall: {N: Dim, M: Dim}
        params:
          w: {dtype: float32, shape: "[N]"}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[P]"}
        let:
          P: "max((N, 64))"
        """, rows="- {N: 8, M: 4, label: small}"),
                # no call-time tensor input: no compile boundary
                spec("NoInputFwdOp", """\
        forall: {N: Dim}
        params:
          w: {dtype: float32, shape: "[N]"}
        outputs:
          y: {dtype: float32, shape: "[P]"}
        let:
          P: "max((N, 64))"
        """, rows="- {N: 8, label: small}"))
    assert symint(rep) == [], [d.render() for d in symint(rep)]


def test_a_composite_gets_no_compile_boundary(tmp_path):
    rep = prove(tmp_path, spec("LeafFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        """), spec("CompositeFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[P]"}
        let:
          P: "max((N, 64))"
        """, extra="  composition:\n    kind: composite\n    stages:\n"
                   "    - {name: leaf, op: LeafFwdOp}\n"))
    assert symint(rep, "CompositeFwdOp") == []


# ============================================================================ the runtime

_RUNTIME_SPECS = """\
SyMhcFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {Q: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[Q]"}
    outputs:
      y: {dtype: T, shape: "[n]"}
    let: {n: "mhc.expansion(Q)"}
  workloads:
  - {Q: 8, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "Q"}
"""

_RUNTIME_MODULE = '''\
from opspec.ops.op import Op


class SyMhcFwdOp(Op):
    manifest = "toy.yaml"

    def forward(self, x):
        return x[:2].clone()
'''


def test_a_warned_expression_compiles_with_a_guard(tmp_path, tmp_path_factory):
    """What a warning means: `mhc.expansion` of a SymInt takes its value, so torch records a
    guard; the op compiles with dynamic shapes and computes the same result as eagerly."""
    import torch

    from runtime_user_ops import load_module

    rep = prove(tmp_path, _RUNTIME_SPECS)
    d = only(rep, "SyMhcFwdOp", "signature.let.n")
    assert "`mhc.expansion(Q)` calls `mhc.expansion` on call-time sizes" in d.message
    folder = tmp_path_factory.mktemp("symint_ops")
    (folder / "toy.yaml").write_text(_RUNTIME_SPECS)
    mod = load_module(folder, "symint_check_ops", _RUNTIME_MODULE)
    op = mod.SyMhcFwdOp()
    assert op(torch.ones(8)).shape == (2,)                 # eager: Q = 8 gives n = 2
    torch._dynamo.reset()
    fn = torch.compile(lambda x: op(x), fullgraph=True, dynamic=True, backend="eager")
    assert fn(torch.ones(8)).shape == (2,)


# ============================================================================ the corpus

#: Every `symint` finding on the reference corpus, (op, declaration). Each is a defect by
#: the rule of `opspec.solver.symint_check`: the op has a compile boundary (call-time tensor
#: inputs, no composition), and the declaration is evaluated at call time on SymInts.
_BROADCAST_OPS = (
    # The output shape is `broadcast` of the inputs' shapes: it compares sizes with 1 and
    # with each other, each comparison a guard under torch.compile(dynamic=True).
    "MaskedFillFwdOp", "MaskedFillScalarFwdOp", "AddFwdOp", "SubFwdOp", "MulFwdOp", "DivFwdOp",
    "RemainderFwdOp", "PowFwdOp", "FloorDivideFwdOp", "LerpFwdOp", "MaximumFwdOp",
    "MinimumFwdOp", "EqFwdOp", "NeFwdOp", "GtFwdOp", "LtFwdOp", "GeFwdOp", "LeFwdOp",
    "LogicalAndFwdOp", "LogicalOrFwdOp", "BitwiseAndFwdOp", "BitwiseOrFwdOp",
    "BitwiseXorFwdOp", "WhereFwdOp", "LerpTensorFwdOp", "ClampTensorFwdOp",
)
_POOL_LETS = {
    # The output lengths are `pool.out` of call-time input lengths: not SymInt-safe (it
    # clamps with max(out, 0) and, with ceil_mode, tests where the last window starts).
    "AvgPool1dFwdOp": ("L_out",), "AvgPool2dFwdOp": ("H_out", "W_out"),
    "AvgPool3dFwdOp": ("D_out", "H_out", "W_out"), "MaxPool1dFwdOp": ("L_out",),
    "MaxPool1dIndicesFwdOp": ("L_out",), "MaxPool2dFwdOp": ("H_out", "W_out"),
    "MaxPool2dIndicesFwdOp": ("H_out", "W_out"), "MaxPool3dFwdOp": ("D_out", "H_out", "W_out"),
    "MaxPool3dIndicesFwdOp": ("D_out", "H_out", "W_out"),
}
CORPUS_SYMINT = {
    *((op, "signature.outputs.output.shape") for op in _BROADCAST_OPS),
    *((op, f"signature.let.{n}") for op, ns in _POOL_LETS.items() for n in ns),
    # The expansion width is `mhc.expansion` of a call-time axis: an integer square root,
    # which needs Q as a Python int (opspec's evaluator raises on a SymInt: see
    # test_a_finding_fails_torch_compile_with_dynamic_shapes).
    ("MHCPreFwdOp", "signature.let.n"),
    # The scale tensors' shapes (Shape indices solved at call time) are compared with
    # tuples: tuple comparison converts each element comparison to a Python bool. The
    # elements could be compared with `and` instead.
    ("GemmFp8FwdOp", "signature.shape_rules.0"),
    ("GemmInt8W8A8FwdOp", "signature.shape_rules.0"),
    ("GemmInt8W8A8FwdOp", "signature.shape_rules.1"),
    # Counting zero-length axes with `1 if n == 0 else 0` over the call-time shape: each
    # conditional needs the truth value of `n == 0`, a SymBool.
    ("AmaxFwdOp", "signature.shape_rules.1"), ("AminFwdOp", "signature.shape_rules.1"),
    ("ArgmaxFwdOp", "signature.shape_rules.1"), ("ArgminFwdOp", "signature.shape_rules.1"),
    ("VectorNormFwdOp", "signature.shape_rules.3"),
}


@pytest.fixture(scope="module")
def corpus():
    if not CORPUS.is_dir():
        pytest.skip("the shared corpus is not present")
    return prove_manifest(load_paths([CORPUS], strict=True), jobs=4, plans=True)


def test_corpus_symint_findings_are_the_pinned_ones(corpus):
    found = symint(corpus)
    got = {(d.op, d.path) for d in found}
    assert got == CORPUS_SYMINT, sorted(got ^ CORPUS_SYMINT)
    assert len(found) == len(CORPUS_SYMINT)  # one per declaration
    assert all(d.severity is Severity.WARNING for d in found)
    by = {(d.op, d.path): d for d in found}
    d = by[("AddFwdOp", "signature.outputs.output.shape")]
    assert "`broadcast(A, B)` calls `broadcast` on call-time sizes" in d.message
    assert d.counterexample["A"] == "solved at call time from input input, axes from 0"
    assert d.counterexample["B"] == "solved at call time from input other, axes from 0"
    d = by[("AvgPool1dFwdOp", "signature.let.L_out")]
    # both ceil_mode branches, in one finding of the declaration
    assert "`pool.out(L_in, kW, sW, pW, 1, False)`, `pool.out(L_in, kW, sW, pW, 1, True)` " \
           "call `pool.out`" in d.message


def test_corpus_reads_no_other_call_time_construct(corpus):
    # Every other implemented op evaluates only SymInt-safe expressions at call time
    # (reductions' `reduced`, quantization's `ceil_div`, adaptive pooling's `per_axis` with
    # a constant index, MoE's `moe.capacity`, refinements joined by `and`/`or`).
    flagged = {s.op for s in corpus.specs if any(d.check == "symint" for d in s.diagnostics)}
    assert flagged == {op for op, _ in CORPUS_SYMINT}
    for s in corpus.specs:
        if s.op not in flagged:
            assert not any(d.check == "symint" for d in s.diagnostics)


def test_unevaluable_primitive_is_an_error(tmp_path):
    # `balanced_sizes` needs its sizes as Python ints: on a SymInt the compiled call fails.
    rep = prove(tmp_path, spec("RepeatLenFwdOp", """\
        forall: {N: Dim, T: "DType[float32]"}
        inputs:
          x: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[L]"}
        let:
          L: "balanced_sizes(N, 2)[0]"
        """))
    found = [d for d in symint(rep, "RepeatLenFwdOp") if d.path == "signature.let.L"]
    assert len(found) == 1 and found[0].severity is Severity.ERROR
    assert "`balanced_sizes`" in found[0].message
    assert rep.specs[0].verdict == "refuted"
