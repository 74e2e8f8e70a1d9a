"""The prover's checks, one broken spec at a time (seed § 3, § 6; spec-language § 2, § 8).

For every check id the prover emits, at least three different small specs break it. Each
test pins the diagnostic's check, severity, op, declaration path and line, the concrete
counterexample (discriminant values of a gap, both solutions of an ambiguity, the value
of a negative axis or a divisor...), and the spec's verdict: `refuted` for an error,
`proven` with warnings and advisories, `unknown` when Z3 could not decide.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prove_support import (  # noqa: E402
    ADVISORY, ERROR, LAYOUT, MAT, OP, PROVEN, REFUTED, UNKNOWN, WARNING, expect, prove, toy,
)

from opspec.solver.discriminants import COMBOS_LIMIT  # noqa: E402


def _sum(*seqs):
    out = ()
    for s in seqs:
        out += tuple(s)
    return out


# ----------------------------------------------------------------------------- family-gap

def test_gap_bool_family_with_only_the_false_case(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          Mat:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "[R, C]"}
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          trans_a: {type: bool, default: false}
        inputs:
          a: {dtype: T, shape: "Mat[trans_a, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    d = expect(p, "family-gap", path="signature.types.Mat", line=p.line("Mat:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"trans_a": True, "Mat.t": True}
    assert "t=true" in d.message and "signature.inputs.a.shape" in d.message
    # The covered branch is still planned.
    (ok,) = [b for b in p.spec().plan.branches if dict(b.combo) == {"trans_a": False}]
    assert ok.families == (("Mat", 0),) and ok.excluded_by is None


def test_gap_enum_family_missing_a_literal(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          Lay:
            params: {m: "'row' | 'col' | 'tile'", R: Dim}
            match: m
            cases:
            - {when: row, is: "[R]"}
            - {when: col, is: "[R, 1]"}
        forall: {M: Dim, T: "DType[float16]"}
        params:
          mode: {type: "'row' | 'col' | 'tile'"}
        inputs:
          x: {dtype: T, shape: "Lay[mode, M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''))
    d = expect(p, "family-gap", path="signature.types.Lay", line=p.line("Lay:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"mode": "tile", "Lay.m": "tile"}
    assert "m=tile" in d.message


def test_gap_adt_family_missing_a_constructor(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          Rows:
            params: {l: Layout, R: Dim}
            match: l
            cases:
            - {when: {masked: _}, is: "[R]"}
        forall: {M: Dim, T: "DType[float16]"}
        params:
          layout: {type: Layout}
        inputs:
          a: {dtype: T, shape: "Rows[layout, M]"}
        outputs:
          c: {dtype: T, shape: "[M]"}
        '''), types=LAYOUT)
    gaps = p.diags("family-gap")
    # `contiguous` has a finitely-valued field, so it is two discriminant values, both uncovered.
    assert sorted(d.counterexample["layout"] for d in gaps) == [
        "{contiguous: {packing: aligned}}", "{contiguous: {packing: tight}}"]
    for d in gaps:
        assert d.counterexample["Rows.l"] == d.counterexample["layout"]
        assert d.path == "signature.types.Rows" and d.pos.line == p.line("Rows:")
        assert d.severity is ERROR and d.op == OP
    assert p.spec().verdict == REFUTED
    assert {d.check for d in p.diags()} == {"family-gap"}


def test_gap_tuple_match_missing_a_row(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          G:
            params: {p: Bool, q: Bool, R: Dim}
            match: [p, q]
            cases:
            - {when: [false, false], is: "[R]"}
            - {when: [false, true], is: "[R, 1]"}
            - {when: [true, false], is: "[1, R]"}
        forall: {M: Dim, T: "DType[float16]"}
        params:
          p: {type: bool}
          q: {type: bool}
        inputs:
          a: {dtype: T, shape: "G[p, q, M]"}
        outputs:
          c: {dtype: T, shape: "[M]"}
        '''))
    d = expect(p, "family-gap", path="signature.types.G", line=p.line("G:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"p": True, "q": True, "G.p": True, "G.q": True}


def test_gap_in_a_nested_family_is_reported_on_that_family(tmp_path):
    # Outer's case `false` applies Inner, which covers only `false`. On the branch t=true,
    # u=true Outer selects its own `[R]` case, so Inner is not applied there: no gap (and no
    # crash: the planner used to re-fold every case of Outer, Inner's missing one included).
    p = prove(tmp_path, toy('''
        types:
          Outer:
            params: {t: Bool, u: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "Inner[u, R]"}
            - {when: true, is: "[R]"}
          Inner:
            params: {u: Bool, R: Dim}
            match: u
            cases:
            - {when: false, is: "[R, 1]"}
        forall: {M: Dim, T: "DType[float16]"}
        params:
          t: {type: bool}
          u: {type: bool}
        inputs:
          a: {dtype: T, shape: "Outer[t, u, M]"}
        outputs:
          c: {dtype: T, shape: "[M]"}
        '''))
    d = expect(p, "family-gap", path="signature.types.Inner", line=p.line("Inner:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"t": False, "u": True, "Inner.u": True}
    branches = {b.combo: b for b in p.spec().plan.branches}
    assert branches[(("t", False), ("u", False))].families == (("Outer", 0), ("Inner", 0))
    assert branches[(("t", True), ("u", True))].families == (("Outer", 1),)


def test_no_gap_on_a_combination_a_domain_restriction_excludes(tmp_path):
    # Seed § 6: excluded combinations skip family coverage.
    p = prove(tmp_path, toy('''
        types:
          Mat:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "[R, C]"}
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          trans: {type: bool, default: false}
        inputs:
          a: {dtype: T, shape: "Mat[trans, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        shape_rules:
        - "not trans"
        '''))
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()
    (b,) = [b for b in p.spec().plan.branches if dict(b.combo) == {"trans": True}]
    assert b.excluded_by == "signature.shape_rules.0"


# ----------------------------------------------------------------------------- family-overlap

def test_overlap_two_cases_with_the_same_when(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          Mat:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "[R, C]"}
            - {when: true, is: "[C, R]"}
            - {when: true, is: "[R, C]"}
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          trans_a: {type: bool, default: false}
        inputs:
          a: {dtype: T, shape: "Mat[trans_a, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    d = expect(p, "family-overlap", path="signature.types.Mat", line=p.line("Mat:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"trans_a": True, "Mat.t": True}
    assert "case 1 (signature.types.Mat.cases.1)" in d.message
    assert "case 2 (signature.types.Mat.cases.2)" in d.message


def test_overlap_tuple_match_with_a_duplicate_row(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          G:
            params: {p: Bool, q: Bool, R: Dim}
            match: [p, q]
            cases:
            - {when: [false, false], is: "[R]"}
            - {when: [false, true], is: "[R]"}
            - {when: [true, false], is: "[R]"}
            - {when: [true, true], is: "[R]"}
            - {when: [false, true], is: "[R, 1]"}
        forall: {M: Dim, T: "DType[float16]"}
        params:
          p: {type: bool}
          q: {type: bool}
        inputs:
          a: {dtype: T, shape: "G[p, q, M]"}
        outputs:
          c: {dtype: T, shape: "[M]"}
        '''))
    d = expect(p, "family-overlap", path="signature.types.G", line=p.line("G:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"p": False, "q": True, "G.p": False, "G.q": True}
    assert "case 1" in d.message and "case 4" in d.message


def test_overlap_adt_wildcard_and_field_pattern(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          Rows:
            params: {l: Layout, R: Dim}
            match: l
            cases:
            - {when: {masked: _}, is: "[R]"}
            - {when: {contiguous: _}, is: "[R]"}
            - {when: {contiguous: {packing: tight}}, is: "[R, 1]"}
        forall: {M: Dim, T: "DType[float16]"}
        params:
          layout: {type: Layout}
        inputs:
          a: {dtype: T, shape: "Rows[layout, M]"}
        outputs:
          c: {dtype: T, shape: "[M]"}
        '''), types=LAYOUT)
    # Only `tight` is covered twice; `aligned` and `masked` are covered once.
    d = expect(p, "family-overlap", path="signature.types.Rows", line=p.line("Rows:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"layout": "{contiguous: {packing: tight}}",
                                "Rows.l": "{contiguous: {packing: tight}}"}
    assert "case 1" in d.message and "case 2" in d.message


def test_overlap_enum_literal_listed_twice(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          Act:
            params: {a: "'silu' | 'gelu'", N: Dim}
            match: a
            cases:
            - {when: silu, is: "[2 * N]"}
            - {when: gelu, is: "[2 * N]"}
            - {when: gelu, is: "[N]"}
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        params:
          act: {type: "'silu' | 'gelu'"}
        inputs:
          x: {dtype: T, shape: "Act[act, N]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        '''))
    d = expect(p, "family-overlap", path="signature.types.Act", line=p.line("Act:"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample == {"act": "gelu", "Act.a": "gelu"}


# ----------------------------------------------------------------------------- family-cycle

_CYCLE_TAIL = '''
forall: {M: Dim, T: "DType[float16]"}
params:
  f: {type: bool}
inputs:
  a: {dtype: T, shape: "A[f, M]"}
outputs:
  c: {dtype: T, shape: "[M]"}
'''


def _cycle_plan_checks(p):
    # The combination that never enters the cycle is still planned; the one that does is
    # marked (it used to crash the whole spec with a KeyError).
    branches = {b.combo: b for b in p.spec().plan.branches}
    assert branches[(("f", False),)].excluded_by is None
    assert branches[(("f", False),)].families == (("A", 0),)
    assert branches[(("f", True),)].excluded_by == "(type family cycle)"


def test_cycle_between_two_families(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          A:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "B[t, R]"}
          B:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "A[t, R]"}
        ''', _CYCLE_TAIL))
    d = expect(p, "family-cycle", path="signature.types.A", line=p.line("A:"),
               severity=ERROR, verdict=REFUTED)
    assert "A -> B -> A" in d.message
    assert d.counterexample is None  # a static property: no values make it
    _cycle_plan_checks(p)


def test_cycle_of_a_family_applying_itself(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          A:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "A[t, R]"}
        ''', _CYCLE_TAIL))
    d = expect(p, "family-cycle", path="signature.types.A", line=p.line("A:"),
               severity=ERROR, verdict=REFUTED)
    assert "A -> A" in d.message
    _cycle_plan_checks(p)


def test_cycle_of_three_families_starts_at_the_first_declared(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          A:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "B[t, R]"}
          C:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "A[t, R]"}
          B:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "C[t, R]"}
        ''', _CYCLE_TAIL))
    d = expect(p, "family-cycle", path="signature.types.A", line=p.line("A:"),
               severity=ERROR, verdict=REFUTED)
    assert "A -> B -> C -> A (each applies the next)" in d.message
    _cycle_plan_checks(p)


# ----------------------------------------------------------------------------- unsolvable

def test_unsolvable_index_only_in_an_output(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M, N]"}
        '''))
    d = expect(p, "unsolvable", path="signature.outputs.y.shape", line=p.line("y: {"),
               severity=ERROR, verdict=REFUTED)
    assert "`N`" in d.message and "only in outputs" in d.message
    cex = d.counterexample
    # One call (x's shape), two values of N that both pass it.
    assert len(cex["x.shape"]) == 1
    assert cex["N (solution 1)"] != cex["N (solution 2)"]


def test_unsolvable_dtype_index_only_in_an_output_points_at_the_dtype(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]", U: "DType[float16 | float32]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: U, shape: "[M]"}
        '''))
    d = expect(p, "unsolvable", path="signature.outputs.y.dtype", line=p.line("y: {"),
               severity=ERROR, verdict=REFUTED)
    cex = d.counterexample
    assert cex["x.dtype"] == "float16"
    assert {cex["U (solution 1)"], cex["U (solution 2)"]} == {"float16", "float32"}


def test_unsolvable_index_only_inside_a_non_affine_axis(tmp_path):
    # `M * M` determines M (it is >= 0), but no rule of Table 1 solves it.
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M * M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''))
    d = expect(p, "unsolvable", path="signature.inputs.x.shape", line=p.line("x: {"),
               severity=ERROR, verdict=REFUTED)
    assert "determined by the inputs, but no unification rule solves it" in d.message
    cex = d.counterexample
    assert cex["M"] >= 2 and cex["x.shape"] == (cex["M"] * cex["M"],)


def test_unsolvable_index_used_in_a_rule_only(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules:
        - "N <= M"
        '''))
    d = expect(p, "unsolvable", path="signature.shape_rules.0", line=p.line('"N <= M"'),
               severity=ERROR, verdict=REFUTED)
    assert "appears in no tensor" in d.message
    cex = d.counterexample
    (m,) = cex["x.shape"]
    assert cex["N (solution 1)"] != cex["N (solution 2)"]
    assert cex["N (solution 1)"] <= m and cex["N (solution 2)"] <= m


def test_unsolvable_index_reaching_an_output_through_a_let(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        let:
          W: "M + N"
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[W]"}
        '''))
    d = expect(p, "unsolvable", path="signature.outputs.y.shape", line=p.line("y: {"),
               severity=ERROR, verdict=REFUTED)
    assert "`N`" in d.message
    assert d.counterexample["N (solution 1)"] != d.counterexample["N (solution 2)"]


def test_unsolvable_on_the_branch_where_its_only_input_is_absent(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
          e: {dtype: T, shape: "[N]", optional: true}
        outputs:
          y: {dtype: T, shape: "[M, N]"}
        '''))
    d = expect(p, "unsolvable", path="signature.outputs.y.shape", line=p.line("y: {"),
               severity=ERROR, verdict=REFUTED)
    assert d.counterexample["present(e)"] is False
    assert d.counterexample["N (solution 1)"] != d.counterexample["N (solution 2)"]


def test_unsolvable_index_used_in_the_roofline_only(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, X: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        ''').replace('flops: "1"', 'flops: "M * X"'))
    d = expect(p, "unsolvable", path="roofline.flops", line=p.line('flops: "M * X"'),
               severity=ERROR, verdict=REFUTED)
    assert "`X`" in d.message and "the roofline" in d.message
    assert d.counterexample["X (solution 1)"] != d.counterexample["X (solution 2)"]


# ----------------------------------------------------------------------------- ambiguous

def _ambiguous(p, name: str):
    return expect(p, "ambiguous", path="signature.inputs.x.shape", line=p.line("x: {"),
                  severity=ERROR, verdict=REFUTED, contains=f"`{name}`")


def test_ambiguous_product_of_two_unknowns(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M * N]"}
        outputs:
          y: {dtype: T, shape: "[M, N]"}
        '''))
    for name in ("M", "N"):
        cex = _ambiguous(p, name).counterexample
        (axis,) = cex["x.shape"]
        s1 = (cex["M (solution 1)"], cex["N (solution 1)"])
        s2 = (cex["M (solution 2)"], cex["N (solution 2)"])
        assert s1[0] * s1[1] == axis == s2[0] * s2[1]
        assert cex[f"{name} (solution 1)"] != cex[f"{name} (solution 2)"]
        assert axis >= 1  # a non-degenerate call is preferred


def test_ambiguous_sum_of_two_unknowns(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M + N]"}
        outputs:
          y: {dtype: T, shape: "[M, N]"}
        '''))
    for name in ("M", "N"):
        cex = _ambiguous(p, name).counterexample
        (axis,) = cex["x.shape"]
        assert cex["M (solution 1)"] + cex["N (solution 1)"] == axis
        assert cex["M (solution 2)"] + cex["N (solution 2)"] == axis
        assert cex[f"{name} (solution 1)"] != cex[f"{name} (solution 2)"]


def test_ambiguous_two_unknown_splats(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {A: Shape, B: Shape, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[*A, *B]"}
        outputs:
          y: {dtype: T, shape: "[*A]"}
        '''))
    for name in ("A", "B"):
        cex = _ambiguous(p, name).counterexample
        shape = tuple(cex["x.shape"])
        a1, b1 = tuple(cex["A (solution 1)"]), tuple(cex["B (solution 1)"])
        a2, b2 = tuple(cex["A (solution 2)"]), tuple(cex["B (solution 2)"])
        assert _sum(a1, b1) == shape == _sum(a2, b2)
        assert (a1, b1) != (a2, b2)


def test_ambiguous_index_read_through_a_let_in_an_input(tmp_path):
    # x's axis is the let `M // 2`: two values of M give every axis length.
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        let:
          H: "M // 2"
        inputs:
          x: {dtype: T, shape: "[H]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''))
    cex = _ambiguous(p, "M").counterexample
    (axis,) = cex["x.shape"]
    m1, m2 = cex["M (solution 1)"], cex["M (solution 2)"]
    assert m1 != m2 and m1 // 2 == axis == m2 // 2


def test_ambiguous_known_index_as_coefficient(tmp_path):
    # Table 1 divides by a positive integer *constant* only: with M solved from `a`, the axis
    # `M * N` still admits many N where M = 0 (it used to be "solved" as len / M).
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          a: {dtype: T, shape: "[M]"}
          x: {dtype: T, shape: "[M * N]"}
        outputs:
          y: {dtype: T, shape: "[M, N]"}
        '''))
    cex = expect(p, "ambiguous", path="signature.inputs.x.shape", line=p.line("x: {"),
                 severity=ERROR, verdict=REFUTED, contains="`N`").counterexample
    assert cex["a.shape"] == (0,) and cex["x.shape"] == (0,)
    assert cex["N (solution 1)"] != cex["N (solution 2)"]


def test_known_index_as_coefficient_is_unsolvable_when_positive(tmp_path):
    # With M > 0 the axis determines N, but only Table 1's rules solve: `unsolvable`.
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          a: {dtype: T, shape: "[M]"}
          x: {dtype: T, shape: "[M * N]"}
        outputs:
          y: {dtype: T, shape: "[M, N]"}
        shape_rules:
        - "M > 0"
        '''))
    cex = expect(p, "unsolvable", path="signature.inputs.x.shape", line=p.line("x: {"),
                 severity=ERROR, verdict=REFUTED).counterexample
    assert cex["x.shape"] == (cex["M"] * cex["N"],) and cex["a.shape"] == (cex["M"],)


# ----------------------------------------------------------------------------- let-cycle

def _let_spec(lets: str) -> str:
    return toy('''
        forall: {M: Dim, T: "DType[float16]"}
        let:
        ''' + lets + '''
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        ''')


def test_let_cycle_of_two(tmp_path):
    p = prove(tmp_path, _let_spec('''  a: "b + 1"
          b: "a + 1"'''))
    d = expect(p, "let-cycle", path="signature.let.a", line=p.line('a: "b + 1"'),
               severity=ERROR, verdict=REFUTED)
    assert "a -> b -> a" in d.message and d.counterexample is None


def test_let_cycle_of_a_let_reading_itself(tmp_path):
    p = prove(tmp_path, _let_spec('''  a: "a + M"'''))
    d = expect(p, "let-cycle", path="signature.let.a", line=p.line('a: "a + M"'),
               severity=ERROR, verdict=REFUTED)
    assert "a -> a" in d.message


def test_let_cycle_of_three_used_by_an_output_and_a_rule(tmp_path):
    # The lets of the cycle are left out; the output and the rule that read them report
    # nothing more (no cascade).
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        let:
          n: "M + m"
          m: "2 * k"
          k: "n - 1"
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[n, m // 2]"}
        shape_rules:
        - "k > 2"
        '''))
    d = expect(p, "let-cycle", path="signature.let.n", line=p.line('n: "M + m"'),
               severity=ERROR, verdict=REFUTED)
    assert "n -> m -> k -> n" in d.message


# ----------------------------------------------------------------------------- kind

def _kind(p, arg: str):
    d = expect(p, "kind", path="signature.inputs.a.shape", line=p.line("a: {"),
               severity=ERROR, verdict=REFUTED)
    assert f"`{arg}`" in d.message and "is not a discriminant" in d.message
    return d


def test_kind_family_matched_on_a_comparison_of_indices(tmp_path):
    p = prove(tmp_path, toy(MAT, '''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        inputs:
          a: {dtype: T, shape: "Mat[M > 2, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    assert _kind(p, "M > 2").counterexample is None  # no discriminants: no values to show


def test_kind_family_matched_on_a_float_parameter(tmp_path):
    p = prove(tmp_path, toy(MAT, '''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          eps: {type: float, default: 0.5}
        inputs:
          a: {dtype: T, shape: "Mat[eps > 0.25, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    _kind(p, "eps > 0.25")


def test_kind_family_matched_on_a_bool_let(tmp_path):
    p = prove(tmp_path, toy(MAT, '''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        let:
          wide: "K > M"
        inputs:
          a: {dtype: T, shape: "Mat[wide, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    _kind(p, "wide")


def test_kind_match_argument_open_on_one_branch_only(tmp_path):
    # `f and M > 2` folds to false where f is false (a discriminant there), to `M > 2` where
    # f is true: the counterexample names that branch.
    p = prove(tmp_path, toy(MAT, '''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          f: {type: bool}
        inputs:
          a: {dtype: T, shape: "Mat[f and M > 2, M, K]"}
        outputs:
          c: {dtype: T, shape: "[M, K]"}
        '''))
    assert _kind(p, "M > 2").counterexample == {"f": True}


# ----------------------------------------------------------------------------- dead-branch

def test_dead_branch_contradictory_refinements(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          big: {type: bool}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules:
        - "not big or M > 4"
        - "M < 2"
        '''))
    d = expect(p, "dead-branch", path="signature.shape_rules.0",
               line=p.line('"not big or M > 4"'), severity=WARNING, verdict=PROVEN)
    assert d.counterexample == {"big": True}
    assert "signature.shape_rules.0, signature.shape_rules.1 cannot all hold" in d.message


def test_dead_branch_invariant_contradicting_a_rule(tmp_path):
    # A contiguous layout has alignment >= 1 (its invariant); the rule wants 0.
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          layout: {type: Layout}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules:
        - "layout.kind == 'masked' or layout.alignment == 0"
        '''), types=LAYOUT)
    d = expect(p, "dead-branch", path="signature.params.layout", line=p.line("layout: {"),
               severity=WARNING, verdict=PROVEN)
    assert d.counterexample["layout"].startswith("{contiguous:")
    assert "signature.params.layout, signature.shape_rules.0" in d.message


def test_dead_branch_odd_length_that_is_twice_an_index(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {K: Dim, N: Dim, T: "DType[float16]"}
        params:
          odd: {type: bool}
        inputs:
          x: {dtype: T, shape: "[K]"}
          w: {dtype: T, shape: "[N]"}
        outputs:
          y: {dtype: T, shape: "[N]"}
        shape_rules:
        - "not odd or K % 2 == 1"
        - "K == 2 * N"
        '''))
    d = expect(p, "dead-branch", path="signature.shape_rules.0",
               line=p.line('"not odd or K % 2 == 1"'), severity=WARNING, verdict=PROVEN)
    assert d.counterexample == {"odd": True}


def test_dead_branch_is_not_hidden_by_a_workload_row_with_a_negative_axis(tmp_path):
    # The row K=2 satisfies the rule, but x's axis `K - 5` would be -3: it is no call, so it
    # is no witness that the branch is alive (it used to be taken as one).
    p = prove(tmp_path, toy('''
        forall: {K: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[K - 5]"}
        outputs:
          y: {dtype: T, shape: "[K]"}
        shape_rules:
        - "K < 3"
        ''', workloads="- {K: 2, dtype_cases: [{T: float16}], label: small}"))
    d = expect(p, "dead-branch", path="signature.inputs.x.shape", line=p.line("x: {"),
               severity=WARNING, verdict=PROVEN)
    assert "signature.inputs.x.shape, signature.shape_rules.0" in d.message


def test_no_dead_branch_when_a_workload_row_is_a_witness(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M - 1]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules:
        - "M % 3 == 1"
        ''', workloads="- {M: 4, dtype_cases: [{T: float16}], label: small}"))
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()


def test_dead_branch_of_a_maybe_adt_whose_invariant_cannot_hold(tmp_path):
    # A present Maybe ADT is read through its payload: the prover used to ask the encoder
    # for `tile.kind` (not `tile.value.kind`) and crashed on every such spec.
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          tile: {type: "Tile | None", default: null}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''), types='''
        adts:
          Tile:
            sum:
              fixed:
                fields: {size: Dim}
                invariant: "size > 4 and size < 2"
              free:
                fields: {}
        ''')
    d = expect(p, "dead-branch", path="signature.params.tile", line=p.line("tile: {"),
               severity=WARNING, verdict=PROVEN)
    assert d.counterexample == {"present(tile)": True, "tile": "{fixed: {}}"}
    assert "signature.params.tile cannot hold" in d.message
    # The branches where tile is absent or `free` are alive.
    assert len(p.spec().plan.branches) == 3


def test_maybe_adt_parameter_with_a_satisfiable_invariant_is_proven(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          ol: {type: "Layout | None", default: null}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules:
        - "not present(ol) or ol.value.kind == 'masked' or M > 0"
        '''), types=LAYOUT)
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()
    assert len(p.spec().plan.branches) == 4  # absent, contiguous tight/aligned, masked


# ----------------------------------------------------------------------------- unknown

_OK = toy('''
    forall: {M: Dim, T: "DType[float16]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
    ''', op="OkFwdOp")


def _others_proven(p):
    assert p.spec("OkFwdOp").verdict == PROVEN and not p.diags(op="OkFwdOp")


def test_unknown_nonlinear_refinement_exhausts_the_budget(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {x: Dim, y: Dim, z: Dim, T: "DType[float16]"}
        params:
          f: {type: bool}
        inputs:
          a: {dtype: T, shape: "[x, y, z]"}
        outputs:
          b: {dtype: T, shape: "[x]"}
        shape_rules:
        - "not f or (x * x * x + y * y * y == z * z * z and x > 0 and y > 0 and z > 0)"
        '''), _OK)
    d = expect(p, "unknown", path="signature.shape_rules", line=p.line("shape_rules:"),
               severity=ADVISORY, verdict=UNKNOWN)
    assert "could not decide whether the refinements of this branch can hold" in d.message
    assert d.counterexample == {"f": True}  # the branch left undecided
    _others_proven(p)


def test_unknown_sign_of_a_nonlinear_output_axis(tmp_path):
    # The row is a witness that the branch is alive; whether the axis can be negative is
    # Fermat's cubic case again. An undecided sign used to pass silently.
    p = prove(tmp_path, toy('''
        forall: {x: Dim, y: Dim, z: Dim, T: "DType[float16]"}
        inputs:
          a: {dtype: T, shape: "[x, y, z]"}
        outputs:
          b: {dtype: T, shape: "[(x * x * x + y * y * y - z * z * z) * (x * x * x + y * y * y - z * z * z) - 1]"}
        shape_rules:
        - "x > 0 and y > 0 and z > 0"
        ''', workloads="- {x: 1, y: 1, z: 1, dtype_cases: [{T: float16}], label: one}"), _OK)
    d = expect(p, "unknown", path="signature.outputs.b.shape", line=p.line("b: {"),
               severity=ADVISORY, verdict=UNKNOWN)
    assert "could not decide whether axis 0 of output `b`" in d.message
    _others_proven(p)


def test_unknown_uniqueness_of_an_index(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {x: Dim, y: Dim, T: "DType[float16]"}
        params:
          g: {type: bool}
        inputs:
          a: {dtype: T, shape: "[x * x * x + 2 * y * y * y]"}
        outputs:
          b: {dtype: T, shape: "[x, y]"}
        shape_rules:
        - "x > 0 and y > 0"
        - "g"
        ''', workloads="- {x: 1, y: 1, g: true, dtype_cases: [{T: float16}], label: one}"), _OK)
    for name in ("x", "y"):
        d = expect(p, "unknown", path="signature.inputs.a.shape", line=p.line("a: {"),
                   severity=ADVISORY, verdict=UNKNOWN, contains=f"`{name}`")
        assert "could not decide whether" in d.message and "determined by the inputs" in d.message
        assert d.counterexample == {"g": True}
    _others_proven(p)


# ----------------------------------------------------------------------------- combos-limit

def _combos(p, n: int):
    d = expect(p, "combos-limit", path="signature", line=p.line("signature:"),
               severity=ADVISORY, verdict=PROVEN)
    assert f"{n} combinations" in d.message and f"limit of {COMBOS_LIMIT}" in d.message
    # Still checked in full: every combination has its branch.
    assert p.spec().combinations == n and len(p.spec().plan.branches) == n
    assert all(b.excluded_by is None for b in p.spec().plan.branches)
    return d


def _bools(n: int, prefix: str = "b") -> str:
    return "\n".join(f"  {prefix}{i}: {{type: bool, default: false}}" for i in range(n))


def test_combos_limit_nine_bool_parameters(tmp_path):
    p = prove(tmp_path, toy(f'''
forall: {{M: Dim, T: "DType[float16]"}}
params:
{_bools(9)}
inputs:
  x: {{dtype: T, shape: "[M]"}}
outputs:
  y: {{dtype: T, shape: "[M]"}}
'''))
    assert _combos(p, 512).counterexample is None


def test_combos_limit_enum_times_bools(tmp_path):
    p = prove(tmp_path, toy(f'''
forall: {{M: Dim, T: "DType[float16]"}}
params:
  mode: {{type: "'a' | 'b' | 'c'", default: a}}
{_bools(7)}
inputs:
  x: {{dtype: T, shape: "[M]"}}
outputs:
  y: {{dtype: T, shape: "[M]"}}
'''))
    _combos(p, 3 * 2 ** 7)


def test_combos_limit_optional_tensors_and_out_buffer(tmp_path):
    opt = "\n".join(f"  o{i}: {{dtype: T, shape: \"[M]\", optional: true}}" for i in range(5))
    p = prove(tmp_path, toy(f'''
forall: {{M: Dim, T: "DType[float16]"}}
params:
{_bools(3)}
inputs:
  x: {{dtype: T, shape: "[M]"}}
{opt}
outputs:
  y: {{dtype: T, shape: "[M]", buffer: out}}
'''))
    _combos(p, 2 ** 9)


def test_no_combos_limit_at_the_limit(tmp_path):
    p = prove(tmp_path, toy(f'''
forall: {{M: Dim, T: "DType[float16]"}}
params:
{_bools(8)}
inputs:
  x: {{dtype: T, shape: "[M]"}}
outputs:
  y: {{dtype: T, shape: "[M]"}}
'''))
    assert p.spec().combinations == COMBOS_LIMIT == 256
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()


# ----------------------------------------------------------------------------- negative-axis

def _negative(p, axis: str):
    d = expect(p, "negative-axis", path="signature.outputs.y.shape", line=p.line("y: {"),
               severity=WARNING, verdict=PROVEN, contains=f"`{axis}`", alone=False)
    assert "can be negative" in d.message
    assert d.counterexample["y.shape[0]"] < 0
    return d


def test_negative_axis_difference_of_indices(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M, N]"}
        outputs:
          y: {dtype: T, shape: "[M - N]"}
        '''))
    cex = _negative(p, "M - N").counterexample
    assert cex["x.shape"] == (cex["M"], cex["N"])
    assert cex["y.shape[0]"] == cex["M"] - cex["N"]
    assert {d.check for d in p.diags()} == {"negative-axis"}


def test_negative_axis_index_minus_one(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {K: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[K]"}
        outputs:
          y: {dtype: T, shape: "[K - 1]"}
        '''))
    cex = _negative(p, "K - 1").counterexample
    assert cex["K"] == 0 and cex["x.shape"] == (0,) and cex["y.shape[0]"] == -1


def test_negative_axis_ceil_div_minus_two(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {K: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[K]"}
        outputs:
          y: {dtype: T, shape: "[ceil_div(K, 128) - 2]"}
        '''))
    cex = _negative(p, "ceil_div(K, 128) - 2").counterexample
    assert cex["K"] <= 128 and cex["y.shape[0]"] == -(-cex["K"] // 128) - 2


def test_negative_axis_floor_division_by_a_negative_parameter(tmp_path):
    # D = 0 would make the call fail, so the counterexample has D < 0 (Python floors).
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          D: {type: int}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M // D]"}
        '''))
    cex = _negative(p, "M // D").counterexample
    assert cex["D"] < 0 and cex["y.shape[0]"] == cex["M"] // cex["D"]


def test_no_negative_axis_when_a_rule_bounds_it(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {K: Dim, M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[K, M]"}
        outputs:
          y: {dtype: T, shape: "[K - 1, M - K]"}
        shape_rules:
        - "K >= 1 and M >= K"
        '''))
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()


# ----------------------------------------------------------------------------- divisor

def test_divisor_parameter_in_an_output_axis(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          D: {type: int}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M // D]"}
        '''))
    d = expect(p, "divisor", path="signature.outputs.y.shape", line=p.line("y: {"),
               severity=WARNING, verdict=PROVEN, alone=False)
    assert "`D` can be <= 0" in d.message and d.counterexample["D"] <= 0


def test_divisor_in_a_refinement_without_a_positive_guard(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {K: Dim, T: "DType[float16]"}
        params:
          group_size: {type: int}
        inputs:
          x: {dtype: T, shape: "[K]"}
        outputs:
          y: {dtype: T, shape: "[K]"}
        shape_rules:
        - "K % group_size == 0"
        '''))
    d = expect(p, "divisor", path="signature.shape_rules.0",
               line=p.line('"K % group_size == 0"'), severity=WARNING, verdict=PROVEN)
    assert d.counterexample["group_size"] <= 0


def test_divisor_of_ceil_div_and_no_spurious_negative_axis(tmp_path):
    # ceil_div raises for b <= 0, so the output axis is never negative for a call that
    # passes: only the divisor is reported (a model with b = -1 used to be shown as a
    # negative axis).
    p = prove(tmp_path, toy('''
        forall: {M: Dim, T: "DType[float16]"}
        params:
          b: {type: int}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[ceil_div(M, b)]"}
        '''))
    d = expect(p, "divisor", path="signature.outputs.y.shape", line=p.line("y: {"),
               severity=WARNING, verdict=PROVEN)
    assert "`b` can be <= 0" in d.message and d.counterexample["b"] <= 0


def test_divisor_compound_expression_shows_its_value(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {M: Dim, N: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M, N]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules:
        - "M % (N - 1) == 0"
        '''))
    d = expect(p, "divisor", path="signature.shape_rules.0", line=p.line('"M % (N - 1)'),
               severity=WARNING, verdict=PROVEN)
    cex = d.counterexample
    assert cex["N - 1"] == cex["N"] - 1 <= 0


def test_no_divisor_warning_with_a_positive_guard(tmp_path):
    p = prove(tmp_path, toy('''
        forall: {K: Dim, T: "DType[float16]"}
        params:
          group_size: {type: int}
        inputs:
          x: {dtype: T, shape: "[K]"}
        outputs:
          y: {dtype: T, shape: "[K // group_size]"}
        shape_rules:
        - "group_size > 0 and K % group_size == 0"
        '''))
    assert p.spec().verdict == PROVEN and not p.diags(), p.rendered()


# ----------------------------------------------------------------------------- name (unused family)

def test_unused_family(tmp_path):
    p = prove(tmp_path, toy(MAT, '''
        forall: {M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''))
    d = expect(p, "name", path="signature.types.Mat", line=p.line("Mat:"), severity=ERROR,
               verdict=REFUTED)
    assert "type family Mat is used by no shape" in d.message


def test_family_applied_only_by_an_unused_family_is_unused(tmp_path):
    p = prove(tmp_path, toy('''
        types:
          A:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "B[t, R]"}
          B:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "[R, R]"}
        forall: {M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''))
    assert sorted(d.path for d in p.diags("name")) == ["signature.types.A", "signature.types.B"]
    assert {d.check for d in p.diags()} == {"name"}


def test_no_unused_family_cascade_from_a_broken_tensor(tmp_path):
    # `a` fails elaboration (unknown dtype Q); Mat, which it applies, is not reported unused.
    p = prove(tmp_path, toy(MAT, '''
        forall: {M: Dim, K: Dim, T: "DType[float16]"}
        params:
          t: {type: bool}
        inputs:
          a: {dtype: Q, shape: "Mat[t, M, K]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        '''))
    assert [(d.check, d.path) for d in p.diags()] == [("name", "signature.inputs.a.dtype")]
    assert p.spec().verdict == REFUTED

