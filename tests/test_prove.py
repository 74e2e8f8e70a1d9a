"""The prover on specs that hold: the bundled manifest, the solving order of the Plan
(seed § 3, Table 1 and Table 2), domain restrictions, the Plan as data, determinism, and
the real corpus (every spec gets a verdict, no errors, every warning pinned and explained).

The broken specs, one check id at a time, are in tests/test_prove_checks.py.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prove_support import MAT, PROVEN, REFUTED, UNKNOWN, prove, toy  # noqa: E402

from opspec.manifest import load_bundled  # noqa: E402
from opspec.schema.diagnostics import Severity  # noqa: E402
from opspec.schema.expr import Const, Name  # noqa: E402
from opspec.schema.loader import load_paths  # noqa: E402
from opspec.schema.printer import print_expr  # noqa: E402
from opspec.solver import plan as P  # noqa: E402
from opspec.solver.run import prove_manifest  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"


def solving(steps) -> list[tuple]:
    """The steps that solve or check, as (kind, tensor, printed expression, axis)."""
    return [(s.kind, s.target, print_expr(s.expr) if s.expr is not None else None, s.axis)
            for s in steps if s.kind != P.PRESENCE]


def gemm_expected(trans_a: bool, trans_b: bool) -> list[tuple]:
    """T, M and K from `a`; then `b`: its dtype and K checked, N solved (axis positions as the
    transposition puts them)."""
    a = [(P.SOLVE_DTYPE, "a", "T", None), (P.RANK, "a", None, None)]
    a += ([(P.SOLVE_AXIS, "a", "K", 0), (P.SOLVE_AXIS, "a", "M", 1)] if trans_a else
          [(P.SOLVE_AXIS, "a", "M", 0), (P.SOLVE_AXIS, "a", "K", 1)])
    b = [(P.CHECK_DTYPE, "b", "T", None), (P.RANK, "b", None, None)]
    b += ([(P.SOLVE_AXIS, "b", "N", 0), (P.CHECK_AXIS, "b", "K", 1)] if trans_b else
          [(P.CHECK_AXIS, "b", "K", 0), (P.SOLVE_AXIS, "b", "N", 1)])
    return a + b


@pytest.fixture(scope="module")
def bundled():
    report = prove_manifest(load_bundled(strict=True))
    return {s.op: s for s in report.specs}, report


# ----------------------------------------------------------------------------- bundled manifest

def test_bundled_manifest_proves_without_errors(bundled):
    specs, report = bundled
    assert report.ok, [d.render() for d in report.all_diagnostics]
    assert {"GemmFwdOp", "SiluAndMulFwdOp"} <= set(specs)
    for s in specs.values():
        assert s.verdict == PROVEN, [d.render() for d in s.diagnostics]
        assert s.plan is not None and s.plan.branches


def test_gemm_plan_has_a_branch_per_transposition(bundled):
    plan = bundled[0]["GemmFwdOp"].plan
    assert plan.discriminants == ("trans_a", "trans_b")
    assert len(plan.branches) == 4
    for b in plan.branches:
        combo = dict(b.combo)
        assert b.excluded_by is None
        assert b.construction == ()
        assert solving(b.call) == gemm_expected(combo["trans_a"], combo["trans_b"]), \
            P.format_plan(plan)
        # The families selected follow the transpositions.
        assert b.families == (("Mat", int(combo["trans_a"])), ("Mat", int(combo["trans_b"])))
        assert [o.describe() for o in b.outputs] == ["c: Tensor[T, [M, N]]"]
        kinds = [s.kind for s in b.call]
        # M and K from a, before anything on b; then N from b and K checked on b.
        first_b = min(i for i, s in enumerate(b.call) if s.target == "b" and s.kind != P.PRESENCE)
        solved_on_a = {print_expr(s.expr) for s in b.call[:first_b] if s.kind == P.SOLVE_AXIS}
        assert solved_on_a == {"M", "K"} and kinds.count(P.SOLVE_DTYPE) == 1
    assert plan.branch_for({"trans_a": True, "trans_b": False}).families == (("Mat", 1), ("Mat", 0))


_GEMM_B_FIRST = (MAT, '''
    forall: {M: Dim, N: Dim, K: Dim, T: "DType[float16 | bfloat16]"}
    params:
      trans_b: {type: bool, default: false}
      trans_a: {type: bool, default: false}
    inputs:
      b: {dtype: T, shape: "Mat[trans_b, K, N]"}
      a: {dtype: T, shape: "Mat[trans_a, M, K]"}
    outputs:
      c: {dtype: T, shape: "[M, N]"}
    ''')


def test_gemm_solving_order_does_not_depend_on_declaration_order(tmp_path, bundled):
    # Inputs (and params) declared b-then-a: the same indices are solved from the same
    # tensors, in the same order (it used to solve T, K and N from b because b came first).
    p = prove(tmp_path, toy(*_GEMM_B_FIRST, op="GemmFwdOp", family="gemm"), family="gemm")
    ours, theirs = p.spec("GemmFwdOp"), bundled[0]["GemmFwdOp"]
    assert ours.verdict == PROVEN and not ours.diagnostics
    assert len(ours.plan.branches) == 4
    for b in ours.plan.branches:
        combo = dict(b.combo)
        assert solving(b.call) == gemm_expected(combo["trans_a"], combo["trans_b"])
        assert solving(b.call) == solving(theirs.plan.branch_for(combo).call)


def test_silu_and_mul_solves_n_from_twice_n(bundled):
    plan = bundled[0]["SiluAndMulFwdOp"].plan
    (b,) = plan.branches
    (n,) = [s for s in b.call if s.kind == P.SOLVE_AXIS and s.expr == Name("N")]
    assert n.target == "x" and n.axis == 1
    assert n.coeff == Const(2) and n.offset == Const(0)
    assert "N := x axis 1 / 2   [exact, >= 0]" in n.describe()
    assert [print_expr(s.expr) for s in b.call if s.kind == P.SOLVE_AXIS] == ["M", "N"]
    assert not [s for s in b.call if s.kind == P.CHECK_AXIS]


def test_shared_splat_solved_from_one_tensor_and_checked_on_the_other(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {S: Shape, T: "DType[float16 | float32]"}
        inputs:
          x: {dtype: T, shape: "[*S]"}
          y: {dtype: T, shape: "[*S]"}
        outputs:
          z: {dtype: T, shape: "[*S]"}
        '''))
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()
    (b,) = p.spec().plan.branches
    assert solving(b.call) == [
        (P.SOLVE_DTYPE, "x", "T", None), (P.RANK, "x", None, -1), (P.SOLVE_SPLAT, "x", "S", 0),
        (P.CHECK_DTYPE, "y", "T", None), (P.RANK, "y", None, None), (P.CHECK_AXIS, "y", "S", 0)]
    (rank_y,) = [s for s in b.call if s.kind == P.RANK and s.target == "y"]
    assert rank_y.rank == 0 and rank_y.splats == (Name("S"),)


def test_offset_axis_is_solved_and_a_halved_axis_only_checked(tmp_path):
    # Table 2: `[B + 1]` solves B; `K // 2` beside a tensor that solves K is only checked.
    p = prove(tmp_path, toy('''
        forall: {B: Dim, N: Dim, K: Dim, T: "DType[float16]"}
        inputs:
          activation: {dtype: T, shape: "[B, K]"}
          packed: {dtype: uint8, shape: "[N, K // 2]"}
          offsets: {dtype: int32, shape: "[B + 1]"}
        outputs:
          y: {dtype: T, shape: "[B, N]"}
        shape_rules:
        - "K % 2 == 0"
        '''))
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()
    (b,) = p.spec().plan.branches
    steps = solving(b.call)
    assert (P.SOLVE_AXIS, "activation", "K", 1) in steps
    assert (P.CHECK_AXIS, "packed", "K // 2", 1) in steps
    assert (P.CHECK_AXIS, "offsets", "B + 1", 0) in steps  # B is known from activation


def test_required_inputs_solve_before_optional_ones(tmp_path):
    # `a` sorts before `x` but is optional: x solves M and K on every branch.
    p = prove(tmp_path, toy('''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M, K]"}
          a: {dtype: T, shape: "[M, K]", optional: true}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    for b in p.spec().plan.branches:
        solved = [(s.target, print_expr(s.expr)) for s in b.call if s.kind == P.SOLVE_AXIS]
        assert solved == [("x", "M"), ("x", "K")]


def test_family_case_recorded_is_the_one_selected(tmp_path):
    # Both cases give `[R, C]`; the branch records case 1 where t is true (comparing folded
    # shapes used to record the first case with that shape).
    p = prove(tmp_path, toy('''
        types:
          Same:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "[R, C]"}
            - {when: true, is: "[R, C]"}
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          t: {type: bool}
        inputs:
          a: {dtype: T, shape: "Same[t, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    assert p.spec().verdict == PROVEN
    assert p.spec().plan.branch_for({"t": True}).families == (("Same", 1),)
    assert p.spec().plan.branch_for({"t": False}).families == (("Same", 0),)


def test_construction_time_tensors_solve_at_construction(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          w: {dtype: T, shape: "[K, M]"}
        inputs:
          x: {dtype: T, shape: "[K]"}
        outputs:
          c: {dtype: T, shape: "[M]"}
        '''))
    (b,) = p.spec().plan.branches
    assert solving(b.construction) == [
        (P.SOLVE_DTYPE, "w", "T", None), (P.RANK, "w", None, None),
        (P.SOLVE_AXIS, "w", "K", 0), (P.SOLVE_AXIS, "w", "M", 1)]
    assert solving(b.call) == [
        (P.CHECK_DTYPE, "x", "T", None), (P.RANK, "x", None, None), (P.CHECK_AXIS, "x", "K", 0)]


# ----------------------------------------------------------------------------- domain restrictions

def test_domain_restriction_excludes_a_combination(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
          a: {dtype: T, shape: "[M]", optional: true}
          b: {dtype: T, shape: "[M]", optional: true}
        outputs:
          z: {dtype: T, shape: "[M]"}
        shape_rules:
        - "present(a) or present(b)"
        '''))
    spec = p.spec()
    assert spec.verdict == PROVEN and not p.diags(), p.rendered()
    assert spec.plan.discriminants == ("present(a)", "present(b)")
    assert len(spec.plan.branches) == 4
    for b in spec.plan.branches:
        combo = dict(b.combo)
        if combo == {"present(a)": False, "present(b)": False}:
            assert b.excluded_by == "signature.shape_rules.0"
            assert b.call == () and b.outputs == ()
        else:
            assert b.excluded_by is None
            assert set(b.present) == {"x", "z"} | {n for n in "ab" if combo[f"present({n})"]}
    assert "excluded by signature.shape_rules.0" in P.format_plan(spec.plan)


# ----------------------------------------------------------------------------- the Plan as data

def test_plan_pickles_and_prints(bundled):
    for s in bundled[0].values():
        again = pickle.loads(pickle.dumps(s.plan))
        assert again == s.plan
        assert P.format_plan(again) == P.format_plan(s.plan)
    text = P.format_plan(bundled[0]["GemmFwdOp"].plan)
    assert text.startswith("plan for GemmFwdOp (4 branch(es))")
    assert "branch trans_a=true, trans_b=false:" in text
    assert "[solve-axis] N := b axis 1    (signature.inputs.b.shape)" in text
    assert "[check-axis] b axis 0 == K    (signature.inputs.b.shape)" in text
    assert "output c: Tensor[T, [M, N]]" in text


def test_proving_twice_gives_identical_diagnostics(tmp_path):
    # A spec with a gap, an ambiguity, a negative axis and a divisor: Z3's models, and so the
    # counterexamples, come from fixed seeds and a deterministic resource limit.
    text = toy('''
        types:
          Mat:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "[R, C]"}
        forall: {M: Dim, N: Dim, K: Dim, T: "DType[float16]"}
        params:
          trans: {type: bool}
          d: {type: int}
        inputs:
          a: {dtype: T, shape: "Mat[trans, M, K]"}
          x: {dtype: T, shape: "[M * N]"}
        outputs:
          y: {dtype: T, shape: "[K - N, M // d]"}
        ''')
    runs = []
    for i in range(2):
        folder = tmp_path / str(i)
        folder.mkdir()
        p = prove(folder, text)
        runs.append([(d.render().replace(str(folder), "<dir>"), d.counterexample)
                     for d in p.report.all_diagnostics])
    assert runs[0] == runs[1]
    checks = {r.split("[", 1)[1].split("]", 1)[0] for r, _ in runs[0]}
    assert checks == {"family-gap", "ambiguous", "negative-axis", "divisor"}


# ----------------------------------------------------------------------------- the corpus

#: Every diagnostic the corpus gets today: (op, check, path, severity). None is an error.
#:
#: - The dead branches of the three GroupedQueryAttention forward ops are right: each says
#:   `(T == 'float8_e4m3fn') == present(q_scale)` and `present(out_dtype) if T ==
#:   'float8_e4m3fn' else ...`, so passing q_scale forces the FP8 dtype, which in turn
#:   requires out_dtype. The combinations with q_scale present and out_dtype absent admit no
#:   call: the spec deliberately forbids FP8 input without a 16-bit out_dtype, and the
#:   prover says those combinations are dead (a warning, not an error). The paths are the
#:   first declaration of the unsat core (the q_scale rule).
#: - The combos-limit advisories are counts: the GQA varlen and paged ops have 9 two-valued
#:   discriminants (Bool and enum params, Maybe params, optional tensors) = 512, GatedDeltaNet
#:   512 and KimiDeltaAttention 2048, above the limit of 256; all are still checked in full.
CORPUS_DIAGNOSTICS = {
    ("GroupedQueryAttentionDenseFwdOp", "dead-branch", "signature.shape_rules.4", "warning"),
    ("GroupedQueryAttentionVarlenFwdOp", "dead-branch", "signature.shape_rules.3", "warning"),
    ("GroupedQueryAttentionPagedFwdOp", "dead-branch", "signature.shape_rules.2", "warning"),
    ("GroupedQueryAttentionVarlenFwdOp", "combos-limit", "signature", "advisory"),
    ("GroupedQueryAttentionPagedFwdOp", "combos-limit", "signature", "advisory"),
    ("GatedDeltaNetFwdOp", "combos-limit", "signature", "advisory"),
    ("KimiDeltaAttentionFwdOp", "combos-limit", "signature", "advisory"),
}

#: The second rule of each dead core: the out_dtype rule.
_DEAD_CORE = {
    "GroupedQueryAttentionDenseFwdOp": "signature.shape_rules.5",
    "GroupedQueryAttentionVarlenFwdOp": "signature.shape_rules.4",
    "GroupedQueryAttentionPagedFwdOp": "signature.shape_rules.4",
}
_COMBOS = {"GroupedQueryAttentionVarlenFwdOp": 512, "GroupedQueryAttentionPagedFwdOp": 512,
           "GatedDeltaNetFwdOp": 512, "KimiDeltaAttentionFwdOp": 2048}


@pytest.fixture(scope="module")
def corpus():
    if not CORPUS.is_dir():
        pytest.skip("the reference corpus is not present")
    return prove_manifest(load_paths([CORPUS], strict=True))


def test_corpus_every_spec_gets_a_verdict_and_no_error(corpus):
    assert len(corpus.specs) == 168
    assert {s.verdict for s in corpus.specs} <= {PROVEN, REFUTED, UNKNOWN}
    errors = [d.render() for d in corpus.all_diagnostics if d.is_error]
    assert not errors, errors
    assert not corpus.diagnostics  # nothing outside a spec
    for s in corpus.specs:
        assert s.plan is not None and len(s.plan.branches) == s.combinations


def test_corpus_warnings_and_advisories_are_the_pinned_ones(corpus):
    # The whole-spec `symint` warnings are pinned, each explained, in test_symint_check.py.
    diags = [d for d in corpus.all_diagnostics if d.check != "symint"]
    got = {(d.op, d.check, d.path, d.severity.value) for d in diags}
    assert got == CORPUS_DIAGNOSTICS, sorted(got ^ CORPUS_DIAGNOSTICS)
    assert len(diags) == len(CORPUS_DIAGNOSTICS)  # each once
    # No `unknown`: every spec is decided, so every verdict is `proven`.
    assert {s.verdict for s in corpus.specs} == {PROVEN}


def test_corpus_dead_branches_are_q_scale_without_out_dtype(corpus):
    by_op = {s.op: s for s in corpus.specs}
    for op, second in _DEAD_CORE.items():
        (d,) = [d for d in by_op[op].diagnostics if d.check == "dead-branch"]
        assert d.severity is Severity.WARNING
        assert f"{d.path}, {second} cannot all hold" in d.message
        assert d.counterexample["present(q_scale)"] is True
        assert d.counterexample["present(out_dtype)"] is False
        # Every combination with q_scale and out_dtype is alive (not reported).
        assert by_op[op].verdict == PROVEN


def test_corpus_combination_counts(corpus):
    by_op = {s.op: s for s in corpus.specs}
    for op, n in _COMBOS.items():
        assert by_op[op].combinations == n
        (d,) = [d for d in by_op[op].diagnostics if d.check == "combos-limit"]
        assert f"{n} combinations" in d.message
