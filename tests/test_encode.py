"""The Z3 encoding of the expression language, the solver factory and the CEGAR loop."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opspec.schema.errors import EvaluationError
from opspec.schema.evaluate import evaluate
from opspec.schema.expr import BinOp, Compare, Const, Name, Subscript, TupleExpr, UnaryOp
from opspec.schema.kinds import (ADTK, BOOL, DIM, DTYPE, DTYPES, FLOAT, INT, SEQ_INT, SHAPE,
                                 DTypeK, MaybeK, SeqK, StrK, UnionK, ValueK)
from opspec.schema.parse import parse_expr
from opspec.schema.primitives import PRIMITIVES
from opspec.solver.encode import MAX_RANK, EncodeError, Encoder, Terms, solve
from opspec.solver.z3env import (DEFAULT_RLIMIT, Verdict, check, fresh_context, make_solver,
                                 str_code, str_decode)

AXES = MaybeK(UnionK((INT, SEQ_INT)))
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _own_context():
    """Each test in a fresh Z3 context: the models of later tests elsewhere must not depend
    on the queries asked here."""
    with fresh_context():
        yield


def query(kinds, *texts, exact=True, rlimit=DEFAULT_RLIMIT, assign=None, adt_fields=None,
          max_rounds=8):
    """Solve the conjunction of `texts`; (verdict, values or None, reason, encoder)."""
    enc = Encoder(kinds, adt_fields=adt_fields or {}, exact=exact)
    s = make_solver(rlimit)
    for t in texts:
        s.add(enc.expr(parse_expr(t)))
    for name, value in (assign or {}).items():
        s.add(enc.assign(name, value))
    s.add(*enc.side)
    verdict, model, reason = solve(s, enc, max_rounds=max_rounds)
    return verdict, (enc.values(model) if model is not None else None), reason, enc


def sat(kinds, *texts, **kw):
    verdict, values, reason, _ = query(kinds, *texts, **kw)
    assert verdict is Verdict.SAT, reason
    return values


def unsat(kinds, *texts, **kw):
    verdict, _, reason, _ = query(kinds, *texts, **kw)
    assert verdict is Verdict.UNSAT, reason


def holds(text, values):
    """The model really satisfies `text` under the concrete evaluator."""
    return evaluate(parse_expr(text), values) is True


# ----------------------------------------------------------------------------- factory


def test_make_solver_sets_rlimit_and_seed_only():
    s = make_solver(12345)
    x = z3.Int("x")
    s.add(x > 3)
    assert check(s) == (Verdict.SAT, None)
    s2 = make_solver()
    s2.add(x > 3, x < 3)
    assert check(s2) == (Verdict.UNSAT, None)


def test_str_codes_round_trip_and_are_injective():
    for text in ["", "a", "full", "\x00a", "é", "float8_e4m3fn"]:
        assert str_decode(str_code(text)) == text
    assert len({str_code(t) for t in ["", "a", "\x00a", "\x00"]}) == 4
    assert str_decode(0) == "<str #0>"


def test_nonlinear_blowup_is_unknown_not_a_verdict():
    kinds = {"x": INT, "y": INT, "z": INT}
    text = "x * x * x + y * y * y == z * z * z and x > 0 and y > 0 and z > 0"
    verdict, values, reason, _ = query(kinds, text, rlimit=200_000)
    assert verdict is Verdict.UNKNOWN and values is None
    assert reason


def test_default_rlimit_stops_a_blowup():
    x, y, z = z3.Ints("bx by bz")
    s = make_solver()
    s.add(x * x * x + y * y * y == z * z * z, x > 0, y > 0, z > 0)
    verdict, reason = check(s)
    assert verdict is Verdict.UNKNOWN and reason


# ----------------------------------------------------------------------------- arithmetic


def _force_division(a: int, b_node, b: int | None):
    kinds = {"a": INT, "b": INT}
    enc = Encoder(kinds)
    a_node = Name("a")
    q = enc.expr(BinOp("//", a_node, b_node))
    r = enc.expr(BinOp("%", a_node, b_node))
    s = make_solver()
    s.add(enc.var("a") == a, *enc.side)
    if b is not None:
        s.add(enc.var("b") == b)
    assert check(s)[0] is Verdict.SAT
    m = s.model()
    return m.eval(q, True).as_long(), m.eval(r, True).as_long()


@FAST
@given(st.integers(-10**12, 10**12), st.integers(-10**6, 10**6).filter(bool))
def test_floor_division_and_modulo_are_pythons(a, b):
    assert _force_division(a, Name("b"), b) == (a // b, a % b)


@FAST
@given(st.integers(-10**6, 10**6), st.integers(-50, 50).filter(bool))
def test_floor_division_by_constants_is_pythons(a, b):
    node = Const(b) if b > 0 else UnaryOp("-", Const(-b))
    assert _force_division(a, node, None) == (a // b, a % b)


def test_divisors_and_domain_are_recorded():
    enc = Encoder({"a": INT, "b": INT})
    enc.expr(parse_expr("a // b + a % 3 + ceil_div(a, b + 1)"))
    assert [d for d, _ in enc.divisors] == ["b", "3", "b + 1"]
    assert len(enc.domain) == 3


def test_ceil_div_is_exact():
    values = sat({"K": DIM, "N": DIM}, "ceil_div(K, 128) * 128 == N", "N - K == 127")
    assert values["N"] == -(-values["K"] // 128) * 128
    unsat({"K": DIM, "N": DIM}, "ceil_div(K, 128) * 128 == N", "N - K > 127")


# ----------------------------------------------------------------------------- sequences


def test_sequence_reads_and_length():
    values = sat({"S": SHAPE}, "S[1] == 5", "len(S) == 3", "S[-1] == 7")
    assert values["S"][1:] == (5, 7) and len(values["S"]) == 3


def test_sequence_equals_tuple_and_tuple_concatenation():
    assert sat({"S": SHAPE}, "S == (1, 1)")["S"] == (1, 1)
    values = sat({"S": SHAPE, "T": SHAPE, "M": DIM}, "T == (M, S[0], S[1])", "len(S) == 2",
                 "S[0] == 3", "M == 2", "S[1] == 4")
    assert values["T"] == (2, 3, 4)
    # A shape term `[M, *S]` as the prover builds it: Concat(Unit(M), S).
    enc = Encoder({"S": SHAPE, "M": DIM, "T": SHAPE})
    s = make_solver()
    s.add(enc.var("T") == z3.Concat(z3.Unit(enc.var("M")), enc.var("S")),
          enc.expr(parse_expr("S == (5, 6) and M == 4")), *enc.side)
    verdict, model, _ = solve(s, enc)
    assert verdict is Verdict.SAT and enc.values(model)["T"] == (4, 5, 6)


def test_built_nodes_encode_like_parsed_ones():
    node = Compare(Subscript(Name("S"), UnaryOp("-", Const(1))), ("==",), (Const(9),))
    enc = Encoder({"S": SHAPE})
    s = make_solver()
    s.add(enc.expr(node), enc.expr(parse_expr("len(S) == 2")), *enc.side)
    verdict, model, _ = solve(s, enc)
    assert verdict is Verdict.SAT and enc.values(model)["S"][-1] == 9


def test_slices_follow_python():
    kinds = {"L": SEQ_INT, "n": INT}
    values = sat(kinds, "L[1:] == (2, 3)", "L[:n] == (1,)")
    assert values["L"] == (1, 2, 3) and values["L"][:values["n"]] == (1,)
    values = sat(kinds, "L[-2:] == (8, 9)", "len(L) == 4", "L[:-3] == (7,)")
    assert values["L"][0] == 7 and values["L"][-2:] == (8, 9)
    unsat(kinds, "L[5:] == (1,)", "len(L) <= 5")


def test_shape_facts():
    unsat({"S": SHAPE}, "S[0] < 0", "len(S) > 0")
    unsat({"S": SHAPE}, f"len(S) > {MAX_RANK}")
    sat({"L": SEQ_INT}, f"len(L) > {MAX_RANK}", "L[0] < 0")


def test_folds_over_shapes_unroll_exactly():
    values = sat({"S": SHAPE}, "sum(S) == 10", "len(S) == 3", "all(x > 2 for x in S)")
    assert sum(values["S"]) == 10 and all(x > 2 for x in values["S"])
    values = sat({"S": SHAPE}, "max(S) == 10", "min(S, default=0) == 2")
    assert max(values["S"]) == 10 and min(values["S"]) == 2
    values = sat({"S": SHAPE}, "prod(S) == 24", "len(S) == 3", "min(S) > 1")
    assert math.prod(values["S"]) == 24
    unsat({"S": SHAPE}, "prod(S) == 0", "min(S) > 0")
    unsat({"S": SHAPE}, "max(S, default=3) < 0")


def test_folds_over_unbounded_sequences_are_recursive_functions():
    values = sat({"L": SEQ_INT}, "sum(L) == 5", "len(L) == 2")
    assert sum(values["L"]) == 5 and len(values["L"]) == 2
    values = sat({"L": SEQ_INT}, "sum(x * x for x in L) == 5", "len(L) == 2", "max(L) == 2")
    assert sum(x * x for x in values["L"]) == 5 and max(values["L"]) == 2
    unsat({"L": SEQ_INT}, "sum(L) != sum(L)")
    unsat({"L": SEQ_INT}, "len(L) == 3", "all(x >= 0 for x in L)", "sum(L) < 0")


def test_fold_reading_other_names_is_abstracted_and_confirmed():
    verdict, values, reason, enc = query({"L": SEQ_INT, "n": INT}, "all(x > n for x in L)",
                                         "len(L) == 2")
    assert verdict is Verdict.SAT, reason
    assert enc.abstracted
    assert all(x > values["n"] for x in values["L"])


def test_fix_length_unrolls_exactly():
    enc = Encoder({"L": SEQ_INT})
    enc.fix_length("L", 3)
    s = make_solver()
    s.add(enc.expr(parse_expr("sum(L) == 6 and L[0] == 1 and L[1] == 2")), *enc.side)
    verdict, model, _ = solve(s, enc)
    assert verdict is Verdict.SAT and enc.values(model)["L"] == (1, 2, 3)
    assert not enc.abstracted


# ----------------------------------------------------------------------------- enums, dtypes


def test_dtype_comparisons():
    T = DTypeK(frozenset({"float16", "bfloat16"}))
    assert sat({"T": T}, "T != 'bfloat16'")["T"] == "float16"
    unsat({"T": T}, "T != 'bfloat16'", "T != 'float16'")
    unsat({"T": T}, "T == 'float32'")
    assert sat({"T": DTYPE, "U": DTYPE}, "T == U", "U == 'int8'")["T"] == "int8"


def test_enum_comparisons():
    mode = StrK(frozenset({"full", "noop"}))
    assert sat({"mode": mode}, "mode != 'full'")["mode"] == "noop"
    unsat({"mode": mode}, "mode == 'reject'")
    values = sat({"a": mode, "b": StrK(frozenset({"noop", "x"}))}, "a == b")
    assert values == {"a": "noop", "b": "noop"}


def test_dtype_meets_a_string():
    values = sat({"T": DTYPE}, "category(T) == 'complex'")
    assert values["T"] in ("complex64", "complex128")
    unsat({"T": DTypeK(frozenset({"float16", "int8"}))}, "category(T) == 'bool'")


def test_conditional_merges_literal_and_dtype():
    values = sat({"T": DTYPE, "c": BOOL}, "('float32' if c else T) == 'int8'")
    assert values["c"] is False and values["T"] == "int8"


# ----------------------------------------------------------------------------- Maybe, floats


def test_maybe_presence_and_value():
    kinds = {"x": MaybeK(INT)}
    assert sat(kinds, "present(x)", "x.value > 3")["x"] > 3
    assert sat(kinds, "not present(x)")["x"] is None
    assert sat(kinds, "x == 5")["x"] == 5
    # `x == None` is a rejected form of the parser; the encoder still gives it its meaning.
    enc = Encoder(kinds)
    s = make_solver()
    s.add(enc.expr(Compare(Name("x"), ("==",), (Const(None),))), *enc.side)
    verdict, model, _ = solve(s, enc)
    assert verdict is Verdict.SAT and enc.values(model)["x"] is None
    s.add(enc.expr(parse_expr("present(x)")))
    assert solve(s, enc)[0] is Verdict.UNSAT


def test_maybe_dtype_and_coalesce():
    kinds = {"dt": MaybeK(DTYPE), "T": DTypeK(frozenset({"float16", "int8"}))}
    values = sat(kinds, "coalesce_dtype(dt, T) == 'int8'", "promote_int_to_float(T) == 'float32'")
    assert values["T"] == "int8" and values["dt"] in (None, "int8")
    assert sat(kinds, "coalesce_dtype(dt, T) == 'float64'")["dt"] == "float64"


def test_extended_reals():
    assert sat({"s": MaybeK(FLOAT)}, "present(s)", "not (-inf < s.value < inf)")["s"] in (
        math.inf, -math.inf)
    unsat({"s": FLOAT}, "s > inf")
    ord_ = UnionK((INT, FLOAT))
    assert sat({"ord": ord_}, "ord == inf")["ord"] == math.inf
    unsat({"ord": ord_}, "ord == 1 or ord == 2 or ord == inf", "ord > 1", "ord < 2")
    values = sat({"ord": ord_}, "ord != 1", "ord != 2", "ord > 0", "ord < 3")
    assert isinstance(values["ord"], (int, float)) and values["ord"] not in (1, 2)


def test_float_arithmetic_is_ieee_on_exact_reals():
    values = sat({"a": FLOAT}, "a * 2 > 3", "a < 10")
    assert 1.5 < values["a"] < 10
    values = sat({"a": FLOAT}, "a - a != 0")  # inf - inf and NaN - NaN are NaN
    assert math.isinf(values["a"]) or math.isnan(values["a"])
    values = sat({"a": FLOAT}, "not (a == a)")
    assert math.isnan(values["a"])
    unsat({"a": FLOAT}, "a * 0 == 1")
    assert sat({"a": FLOAT, "b": FLOAT}, "a + b == inf", "b < 0")["a"] == math.inf


@FAST
@given(st.one_of(st.integers(-10**6, 10**6).map(lambda n: n / 4),  # exact: no rounding
                 st.sampled_from([math.inf, -math.inf, 0.0, math.nan])),
    st.sampled_from([math.inf, -math.inf, 0.0, 2.5, -1.0, math.nan]),
    st.sampled_from(["a + b", "a - b", "a * b", "-a", "a < b", "a <= b", "a == b", "a != b",
                     "a > b"]))
def test_float_operations_agree(a, b, op):
    agree({"a": FLOAT, "b": FLOAT}, op, {"a": a, "b": b})


def test_number_is_int_or_float():
    values = sat({"alpha": ValueK("Number"), "T": DTYPE},
                 "not representable(alpha, T)", "T == 'int8'", "category(alpha) == 'int'")
    assert isinstance(values["alpha"], int) and not -128 <= values["alpha"] <= 127
    values = sat({"alpha": ValueK("Number"), "T": DTYPE},
                 "not (category(alpha) == 'int' or category(alpha) == category(T))")
    assert holds("not (category(alpha) == 'int' or category(alpha) == category(T))", values)


def test_opaque_values_cannot_be_confirmed():
    verdict, _, reason, _ = query({"dev": ValueK("torch.device")}, "category(dev) == 'int'")
    assert verdict is Verdict.UNKNOWN and "opaque" in reason


# ----------------------------------------------------------------------------- ADTs

LAYOUT = ADTK("MGroupedLayout", frozenset({"masked", "contiguous"}))
LAYOUT_FIELDS = {
    "layout.max_m": DIM, "layout.packing": StrK(frozenset({"tight", "aligned"})),
    "layout.alignment": DIM, "layout.metadata_kind": StrK(frozenset({"per_row",
                                                                     "physical_psum"})),
}


def test_adt_fields_and_kind():
    kinds = {"layout": LAYOUT, "R": INT, "E": DIM}
    values = sat(kinds, "moe.capacity(layout, R, E) == 128", "layout.kind != 'masked'",
                 "E == 3", "layout.packing == 'aligned'", "layout.alignment == 64",
                 adt_fields=LAYOUT_FIELDS)
    a = values["layout.alignment"]
    assert values["layout.kind"] == "contiguous"
    assert -(-(values["R"] + 3 * (a - 1)) // a) * a == 128
    values = sat(kinds, "moe.capacity(layout, R, E) == 12", "layout.kind == 'masked'",
                 "layout.max_m > 1", adt_fields=LAYOUT_FIELDS)
    assert values["E"] * values["layout.max_m"] == 12


def test_unknown_names_and_fields_are_errors():
    with pytest.raises(EncodeError):
        Encoder({}).expr(parse_expr("x + 1"))
    with pytest.raises(EncodeError):
        Encoder({"layout": LAYOUT}, adt_fields=LAYOUT_FIELDS).expr(parse_expr("layout.nope"))


# ----------------------------------------------------------------------------- CEGAR


BROADCAST = ("broadcast(A, B) == (3, 4)", "len(A) == 2", "len(B) == 2", "A[0] == 3",
             "B[1] == 4")


@pytest.mark.parametrize("exact", [False, True])
def test_broadcast_model_is_confirmed(exact):
    verdict, values, reason, enc = query({"A": SHAPE, "B": SHAPE}, *BROADCAST, exact=exact)
    assert verdict is Verdict.SAT, reason
    assert PRIMITIVES["broadcast"].evaluate(values["A"], values["B"]) == (3, 4)
    assert [a.name for a in enc.applications] == ["broadcast"]


def test_refine_pins_a_wrong_application():
    enc = Encoder({"A": SHAPE, "B": SHAPE}, exact=False)
    s = make_solver()
    s.add(*[enc.expr(parse_expr(t)) for t in BROADCAST], *enc.side)
    # Force a spurious first model: B == (1, 4) broadcast with A == (3, 9) is (3, 9).
    s.push()
    s.add(enc.assign("A", (3, 9)), enc.assign("B", (1, 4)))
    assert check(s)[0] is Verdict.SAT
    lemmas = enc.refine(s.model())
    assert len(lemmas) == 1
    s.pop()
    s.add(*lemmas)
    s.add(enc.assign("A", (3, 9)), enc.assign("B", (1, 4)))
    assert check(s)[0] is Verdict.UNSAT


def test_domain_errors_exclude_models():
    # Where the primitive raises, the expression has no value: no model.
    unsat({"Q": INT}, "mhc.expansion(Q) >= 0", "Q == 5", exact=False)
    unsat({"Q": INT}, "mhc.expansion(Q) >= 0", "Q == 5")
    assert sat({"Q": INT}, "mhc.expansion(Q) == 4")["Q"] == 24
    # ... but only where the application is evaluated.
    assert sat({"Q": INT}, "Q == 5", "mhc.expansion(Q) == 1 if Q > 10 else True",
               exact=False)["Q"] == 5
    assert sat({"Q": INT}, "Q == 5", "Q < 10 or mhc.expansion(Q) == 1")["Q"] == 5


def test_rounds_running_out_is_unknown():
    verdict, values, reason, _ = query({"A": SHAPE, "B": SHAPE},
                                       "broadcast(A, B) == (2, 3)", "A != B",
                                       "len(A) == len(B)", exact=False, max_rounds=2)
    assert verdict is not Verdict.UNSAT
    if verdict is Verdict.UNKNOWN:
        assert "rounds" in reason
    else:
        assert PRIMITIVES["broadcast"].evaluate(values["A"], values["B"]) == (2, 3)


# ----------------------------------------------------------------------------- primitive facts


def _literal(value):
    if isinstance(value, tuple):
        return TupleExpr(tuple(_literal(v) for v in value))
    if isinstance(value, float) and math.isinf(value):
        return Name("inf") if value > 0 else UnaryOp("-", Name("inf"))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return UnaryOp("-", Const(-value))
    return Const(value)


def agree(kinds, text, env):
    """The encoding of `text` under `env` has exactly the concrete value, or no model when
    the concrete evaluation raises."""
    node = parse_expr(text)
    enc = Encoder(kinds)
    s = make_solver()
    for name, value in env.items():
        s.add(enc.assign(name, value))
    try:
        expected = evaluate(node, env)
    except EvaluationError:
        s.add(enc.expr(Compare(node, ("==",), (node,))), *enc.side)
        verdict, _, reason = solve(s, enc)
        assert verdict is Verdict.UNSAT, (text, env, reason)
        return
    if isinstance(expected, float) and expected != expected:  # NaN equals nothing
        s.add(enc.expr(Compare(node, ("!=",), (node,))), *enc.side)
    else:
        s.add(enc.expr(Compare(node, ("==",), (_literal(expected),))), *enc.side)
    verdict, _, reason = solve(s, enc)
    assert verdict is Verdict.SAT, (text, env, expected, reason)


shapes = st.lists(st.integers(0, 4), max_size=4).map(tuple)
axes = st.one_of(st.none(), st.integers(-5, 5),
                 st.lists(st.integers(-5, 5), max_size=3).map(tuple))


@FAST
@given(shapes, axes, st.booleans(), st.sampled_from(["full", "noop", "reject"]))
def test_reduced_valid_unique_axes_facts(S, dim, keepdim, mode):
    kinds = {"S": SHAPE, "dim": AXES, "keepdim": BOOL,
             "mode": StrK(frozenset({"full", "noop", "reject"}))}
    env = {"S": S, "dim": dim, "keepdim": keepdim, "mode": mode}
    agree(kinds, "reduced(S, dim, keepdim, mode)", env)
    agree(kinds, "valid_axes(dim, len(S))", env)
    agree(kinds, "unique_axes(dim, len(S))", env)


@FAST
@given(shapes, shapes)
def test_broadcast_fact(A, B):
    agree({"A": SHAPE, "B": SHAPE}, "broadcast(A, B)", {"A": A, "B": B})
    agree({"A": SHAPE, "B": SHAPE}, "broadcast(A, B, (1, 1))", {"A": A, "B": B})


@FAST
@given(*[st.integers(-3, 12)] * 5, st.booleans())
def test_pool_and_conv_facts(L, k, s, p, d, ceil_mode):
    kinds = {n: INT for n in "Lkspd"} | {"c": BOOL}
    env = {"L": L, "k": k, "s": s, "p": p, "d": d, "c": ceil_mode}
    agree(kinds, "pool.out(L, k, s, p, d, c)", env)
    agree(kinds, "conv.out(L, k, s, p, d)", env)


@FAST
@given(st.one_of(st.none(), st.integers(-3, 9),
                 st.tuples(st.one_of(st.none(), st.integers(0, 9)),
                           st.one_of(st.none(), st.integers(0, 9)))),
       st.integers(-3, 2), st.integers(1, 3), st.one_of(st.none(), st.integers(0, 9)))
def test_per_axis_fact(v, i, n, fallback):
    kinds = {"v": MaybeK(UnionK((INT, SeqK(MaybeK(INT), 2)))), "i": INT, "n": INT,
             "f": MaybeK(INT)}
    agree(kinds, "per_axis(v, i, n, fallback=f)", {"v": v, "i": i, "n": n, "f": fallback})


@FAST
@given(st.one_of(st.booleans(), st.integers(-2**65, 2**65), st.integers(-300, 70000),
                 st.floats(allow_nan=False, min_value=-1e40, max_value=1e40),
                 st.sampled_from([math.inf, -math.inf, 448.0, 65504.0, 65505.0])),
       st.sampled_from(sorted(DTYPES)))
def test_representable_and_category_facts(v, T):
    kind = BOOL if isinstance(v, bool) else INT if isinstance(v, int) else FLOAT
    kinds = {"v": kind, "T": DTYPE}
    agree(kinds, "representable(v, T)", {"v": v, "T": T})
    agree(kinds, "category(v) == category(T)", {"v": v, "T": T})
    agree(kinds, "promote_int_to_float(T)", {"T": T})


@FAST
@given(st.integers(-5, 200))
def test_mhc_expansion_fact(q):
    agree({"Q": INT}, "mhc.expansion(Q)", {"Q": q})


@FAST
@given(st.integers(-2, 12), st.integers(-2, 5), st.one_of(st.none(),
                                                          st.sampled_from(sorted(DTYPES))))
def test_sequence_and_dtype_primitive_facts(total, count, v):
    kinds = {"t": INT, "c": INT, "v": MaybeK(DTYPE), "T": DTYPE}
    env = {"t": total, "c": count, "v": v, "T": "int8"}
    agree(kinds, "balanced_sizes(t, c)", env)
    agree(kinds, "repeat(t, c)", env)
    agree(kinds, "coalesce_dtype(v, T)", env)
    agree(kinds, "coalesce_dtype(v, 'float16')", env)


def test_expression_equalities_of_any_kind():
    kinds = {"v": MaybeK(DTYPE), "T": DTYPE, "S": SHAPE, "n": MaybeK(INT)}
    e1, e2 = Encoder(kinds, copy="#1"), Encoder(kinds, copy="#2")
    s = make_solver()
    s.add(e1.equal(parse_expr("coalesce_dtype(v, T)"), Const("float16")))
    s.add(e1.same_expr(e2, parse_expr("(S[0], 2)")), e2.equal(parse_expr("S"),
                                                               parse_expr("(7, 1)")))
    s.add(e1.same(e2, "n"), e2.expr(parse_expr("present(n)")))
    # Reading S[0] of an empty S raises: the domain conditions exclude that.
    s.add(*e1.side, *e2.side, *[c for _, c in e1.domain + e2.domain])
    verdict, model, _ = solve(s, [e1, e2])
    assert verdict is Verdict.SAT
    v1, v2 = e1.values(model), e2.values(model)
    assert (v1["v"] or v1["T"]) == "float16" and v1["S"][0] == 7
    assert v1["n"] == v2["n"] is not None


# ----------------------------------------------------------------------------- copies


def test_two_copies_find_two_solutions():
    kinds = {"M": DIM, "N": DIM, "P": DIM}
    e1, e2 = Encoder(kinds, copy="#1"), Encoder(kinds, copy="#2")
    s = make_solver()
    for enc in (e1, e2):
        s.add(enc.expr(parse_expr("M * N == P")), *enc.side)
    s.add(e1.same(e2, "P"), e1.var("P") == 6)
    s.add(z3.Or(e1.var("M") != e2.var("M"), e1.var("N") != e2.var("N")))
    verdict, model, _ = solve(s, [e1, e2])
    assert verdict is Verdict.SAT
    v1, v2 = e1.values(model), e2.values(model)
    assert v1["M"] * v1["N"] == 6 == v2["M"] * v2["N"]
    assert (v1["M"], v1["N"]) != (v2["M"], v2["N"])


def test_two_copies_prove_uniqueness():
    kinds = {"N": DIM, "X": DIM}
    e1, e2 = Encoder(kinds, copy="#1"), Encoder(kinds, copy="#2")
    s = make_solver()
    for enc in (e1, e2):
        s.add(enc.expr(parse_expr("2 * N == X")), *enc.side)
    s.add(e1.same(e2, "X"), e1.var("N") != e2.var("N"))
    assert solve(s, [e1, e2])[0] is Verdict.UNSAT


def test_terms_of_compound_values_compare_by_value():
    kinds = {"d": MaybeK(DTypeK(frozenset({"float16", "bfloat16"}))), "f": FLOAT, "n": INT}
    e1, e2 = Encoder(kinds, copy="#1"), Encoder(kinds, copy="#2")
    d1, d2 = e1.var("d"), e2.var("d")
    assert isinstance(d1, Terms) and [str(t) for t in d1] == ["present(d)#1", "d.value#1"]
    s = make_solver()
    # Equal values: both absent, whatever their (irrelevant) payloads.
    s.add(d1 == d2, z3.Not(d1[0]), d1[1] != d2[1], e1.var("f") != e2.var("f"))
    s.add(*e1.side, *e2.side)
    assert solve(s, [e1, e2])[0] is Verdict.SAT
    with pytest.raises(EncodeError):
        _ = d1 == e1.var("f")
    # A tuple of ints is a sequence term.
    assert isinstance(e1.expr(parse_expr("(n, 2)")), z3.SeqRef)
    assert isinstance(e1.expr(parse_expr("()")), z3.SeqRef)


def test_copies_share_primitives_but_not_unknowns():
    kinds = {"S": SHAPE, "dim": AXES}
    e1, e2 = Encoder(kinds, copy="#1", exact=False), Encoder(kinds, copy="#2", exact=False)
    s = make_solver()
    r1 = e1.expr(parse_expr("reduced(S, dim, False, 'full')"))
    r2 = e2.expr(parse_expr("reduced(S, dim, False, 'full')"))
    s.add(e1.same(e2, "S"), e1.same(e2, "dim"), r1 != r2, *e1.side, *e2.side)
    assert solve(s, [e1, e2])[0] is Verdict.UNSAT
    assert str(e1.var("S")) == "S#1" and str(e2.var("S")) == "S#2"


# ----------------------------------------------------------------------------- determinism


QUERY = ("sum(S) == 17", "len(S) == 3", "S[0] != S[1]", "T != 'bfloat16'",
         "not present(x) or x.value > ceil_div(S[2], 4)")
QUERY_KINDS = {"S": SHAPE, "T": DTypeK(frozenset({"float16", "bfloat16", "float32"})),
               "x": MaybeK(INT)}


def fresh_model():
    with fresh_context():
        return sorted(sat(QUERY_KINDS, *QUERY).items())


def test_same_query_same_model():
    # In one context the model may depend on what ran before; in a fresh one it does not.
    first = fresh_model()
    sat({"M": DIM, "N": DIM}, "M * N == 12", "M > N")  # other work in the default context
    assert fresh_model() == first


def test_same_query_same_model_across_processes():
    code = ("from tests.test_encode import fresh_model, sat, QUERY, QUERY_KINDS; "
            "sat(QUERY_KINDS, *QUERY); print(fresh_model())")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=__file__.rsplit("/tests/", 1)[0]).stdout
            for _ in range(2)}
    assert runs == {f"{fresh_model()}\n"}


def test_values_are_plain_data():
    values = sat({"S": SHAPE, "T": DTYPE, "x": MaybeK(INT), "b": BOOL, "f": FLOAT,
                  "m": StrK(frozenset({"a", "b"}))},
                 "len(S) == 2", "not present(x)", "b", "f == 0.5", "T != 'int8'", "m != 'c'")
    assert values == {"S": values["S"], "T": values["T"], "x": None, "b": True, "f": 0.5,
                      "m": values["m"]}
    assert isinstance(values["S"], tuple) and all(type(v) is int for v in values["S"])
    assert isinstance(values["T"], str) and values["m"] in ("a", "b")
