"""The concrete evaluator: semantics of every node, calls, errors and size limits."""

from __future__ import annotations

import math
import operator
import random

import pytest
from hypothesis import given, settings, strategies as st

from opspec.schema.errors import EvaluationError
from opspec.schema.evaluate import BYTES_KEY, evaluate, evaluate_axes, evaluate_requires
from opspec.schema.expr import (BinOp, BoolOp, Call, Compare, Const, GenExp, IfExp, Name,
                                ShapeList, Splat, UnaryOp)
from opspec.schema.parse import parse_expr
from opspec.schema.primitives import MAX_INT_BITS, MAX_SEQ_LEN, WORKLOAD_SEED
from opspec.schema.values import ADTValue


def E(text: str, **env):
    return evaluate(parse_expr(text), env)


def raises(text: str, part: str, **env) -> str:
    with pytest.raises(EvaluationError) as info:
        E(text, **env)
    assert part in str(info.value), str(info.value)
    return str(info.value)


# ----------------------------------------------------------------------------- the integer subset

NAMES = ("a", "b", "c", "M", "N")
ENV_INTS = st.integers(-50, 50)


# One grammar through `st.deferred`: leaves come first in each `one_of`, so Hypothesis
# draws small trees and shrinks towards them.
_leaf = st.one_of(st.integers(-20, 20).map(Const), st.sampled_from(NAMES).map(Name))
INTS = st.deferred(lambda: st.one_of(
    _leaf,
    st.builds(BinOp, st.sampled_from(["+", "-", "*", "//", "%"]), INTS, INTS),
    st.builds(UnaryOp, st.just("-"), INTS),
    st.builds(IfExp, BOOLS, INTS, INTS),
))
BOOLS = st.deferred(lambda: st.one_of(
    st.booleans().map(Const),
    st.builds(lambda left, rest: Compare(left, tuple(o for o, _ in rest),
                                         tuple(e for _, e in rest)),
              INTS, st.lists(st.tuples(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
                                       INTS), min_size=1, max_size=3)),
    st.builds(lambda op, vs: BoolOp(op, tuple(vs)), st.sampled_from(["and", "or"]),
              st.lists(BOOLS, min_size=2, max_size=3)),
    st.builds(UnaryOp, st.just("not"), BOOLS),
))


class Undefined(Exception):
    """The reference hit a division by zero: the evaluator must raise there too."""


_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
          "%": operator.mod}
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


def reference(e, env):
    """Python's meaning of the integer subset, applied directly with `operator`."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Name):
        return env[e.id]
    if isinstance(e, BinOp):
        a, b = reference(e.left, env), reference(e.right, env)
        if e.op in ("//", "%") and b == 0:
            raise Undefined
        return _ARITH[e.op](a, b)
    if isinstance(e, UnaryOp):
        v = reference(e.operand, env)
        return operator.neg(v) if e.op == "-" else operator.not_(v)
    if isinstance(e, IfExp):
        return reference(e.body if reference(e.test, env) else e.orelse, env)
    if isinstance(e, BoolOp):
        for v in e.values:
            r = reference(v, env)
            if (e.op == "and") != operator.truth(r):
                return r
        return r
    if isinstance(e, Compare):
        left = reference(e.left, env)
        for op, comp in zip(e.ops, e.comparators):
            right = reference(comp, env)
            if not _CMP[op](left, right):
                return False
            left = right
        return True
    raise AssertionError(e)


@settings(max_examples=400, deadline=None)
@given(st.one_of(INTS, BOOLS), st.fixed_dictionaries({n: ENV_INTS for n in NAMES}))
def test_integer_subset_agrees_with_python(expr, env) -> None:
    try:
        expected = reference(expr, env)
    except Undefined:
        with pytest.raises(EvaluationError, match="by zero"):
            evaluate(expr, env)
        return
    except OverflowError:  # pragma: no cover - ints never overflow
        return
    if isinstance(expected, int) and abs(expected).bit_length() > MAX_INT_BITS:
        with pytest.raises(EvaluationError):
            evaluate(expr, env)
        return
    got = evaluate(expr, env)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, -3), (-1, 5), (5, -1),
                                 (-6, 3), (6, -4)])
def test_floor_division_and_modulo_match_python(a, b) -> None:
    env = {"a": a, "b": b}
    assert evaluate(BinOp("//", Name("a"), Name("b")), env) == a // b
    assert evaluate(BinOp("%", Name("a"), Name("b")), env) == a % b
    assert E("a // b * b + a % b == a", **env) is True


def test_division_by_zero() -> None:
    raises("a // b", "a // b raises integer division or modulo by zero", a=1, b=0)
    raises("a % (b - b)", "a % (b - b) raises integer modulo by zero", a=1, b=3)
    raises("x // 0.0", "raises", x=1.0)


# ----------------------------------------------------------------------------- names, presence


def test_names_and_inf() -> None:
    assert E("M", M=3) == 3
    assert E("inf") == math.inf and E("-inf") == -math.inf
    assert E("inf", inf=5) == 5  # a binding wins
    raises("M + 1", "M is not bound")


def test_present() -> None:
    env = {"bias": object(), "scale": None, "rotary_dim": 64, "act": None, "out": None}
    assert E("present(bias)", **env) is True
    assert E("present(scale)", **env) is False
    assert E("present(rotary_dim)", **env) is True
    assert E("present(act)", **env) is False
    assert E("present(out)", **env) is False
    assert E("present(out)", out=object()) is True
    assert E("present(missing)") is False
    assert E("present(v)", v=0) is True  # zero is given, not absent
    with pytest.raises(EvaluationError, match="names no tensor"):
        evaluate(Call("present", (Const(1),)), {})


def test_maybe_value() -> None:
    assert E("rotary_dim.value if present(rotary_dim) else D", rotary_dim=32, D=64) == 32
    assert E("rotary_dim.value if present(rotary_dim) else D", rotary_dim=None, D=64) == 64
    assert raises("v.value + 1", "v.value: v is absent", v=None)


def test_presence_guards_short_circuit() -> None:
    src = "not present(m) or representable(m.value, T)"
    assert E(src, m=None, T="float16") is True
    assert E(src, m=1e5, T="float16") is False
    assert E("present(m) and m.value > 0", m=None) is False


def test_adt_access() -> None:
    lay = ADTValue.of("MGroupedLayout", "contiguous",
                      {"packing": "aligned", "metadata_kind": "per_row", "alignment": 8})
    env = {"layout": lay, "P": 64, "E": 4}
    assert E("layout.kind", **env) == "contiguous"
    assert E("layout.alignment", **env) == 8
    assert E("layout.kind == 'masked' or layout.packing == 'tight' or P % layout.alignment == 0",
             **env) is True
    raises("layout.max_m", "layout.max_m reads a field constructor 'contiguous' lacks", **env)
    masked = ADTValue.of("MGroupedLayout", "masked", {"max_m": 128})
    assert E("E * layout.max_m if layout.kind == 'masked' else P", layout=masked, P=1, E=4) == 512
    assert E("moe.capacity(layout, P, E)", **env) == 96  # ceil_div(64 + 4 * 7, 8) * 8
    # a Maybe ADT: `.value` is the ADT, whose fields follow
    assert E("v.value.max_m if present(v) else 0", v=masked) == 128


def test_runtime_objects_stand_in_for_adts() -> None:
    import enum

    class Packing(enum.Enum):
        tight = "tight"

    class Spec:
        kind = "contiguous"
        packing = Packing.tight
        alignment = 1

    assert E("layout.packing == 'tight' and layout.kind == 'contiguous'", layout=Spec()) is True
    raises("layout.max_m", "layout.max_m raises", layout=Spec())


# ----------------------------------------------------------------------------- operators


def test_boolean_operators_are_pythons() -> None:
    assert E("a and b", a=True, b=False) is False
    assert E("a or b", a=False, b=True) is True
    assert E("not a", a=False) is True
    assert E("a and b and c", a=True, b=True, c=True) is True
    # short circuit: the right side would divide by zero
    assert E("x == 0 or 1 // x > 0", x=0) is True
    assert E("x != 0 and 1 // x > 0", x=0) is False
    assert E("1 if x == 0 else 1 // x", x=0) == 1


def test_comparisons() -> None:
    assert E("0.0 <= p <= 1.0", p=0.5) is True
    assert E("0.0 <= p <= 1.0", p=1.5) is False
    assert E("a < b < c", a=1, b=3, c=2) is False
    assert E("S == (2, 3)", S=[2, 3]) is True  # a YAML list meets a tuple
    assert E("S == (2, 3)", S=(2, 3)) is True
    assert E("(SA == (1, 1) and SB == (1, 1)) or (SA == (M, ceil_div(K, 128)))",
             SA=[4, 2], SB=[1, 1], M=4, K=200) is True
    assert E("x in (1, 2)", x=2) is True and E("x not in S", x=2, S=[1, 3]) is True
    assert E("S < (2, 4)", S=(2, 3)) is True
    assert E("T == 'bfloat16'", T="bfloat16") is True
    assert E("category(T) == 'float'", T="bfloat16") is True
    assert E("ord == 1 or ord == 2 or ord == inf", ord=math.inf) is True
    raises("a < 'x'", "a < 'x' raises", a=1)


def test_arithmetic_rejects_non_numbers() -> None:
    raises("S + 1", "applies + to", S=(1, 2))
    raises("a * b", "applies * to True", a=True, b=2)
    raises("-s", "applies - to", s="x")
    assert E("2 * eps", eps=0.5) == 1.0


def test_subscripts_and_slices() -> None:
    env = {"S": (2, 3, 4, 5), "W": [7]}
    assert E("S[1]", **env) == 3 and E("S[-1]", **env) == 5
    assert E("S[1:]", **env) == (3, 4, 5)
    assert E("S[:2]", **env) == (2, 3)
    assert E("S[::-1]", **env) == (5, 4, 3, 2)
    assert E("W[0] == 7", **env) is True
    raises("S[9]", "S[9] raises tuple index out of range", **env)
    raises("x[0]", "not a sequence", x=3)
    raises("S[a]", "index 'b' is not an int", S=(1,), a="b")
    raises("S[::0]", "slice step cannot be zero", **env)


def test_tuples() -> None:
    assert E("(a, b + 1)", a=1, b=2) == (1, 3)
    assert E("()") == ()


# ----------------------------------------------------------------------------- generator expressions


def test_generator_expressions() -> None:
    S = (2, 0, 3)
    assert E("sum(1 if n == 0 else 0 for n in S)", S=S) == 1
    assert E("max(n * 2 for n in S)", S=S) == 6
    assert E("min(n for n in S)", S=S) == 0
    assert E("all(n >= 0 for n in S)", S=S) is True
    assert E("all(-inf <= f <= inf and f != 0 for f in (a, b, c))", a=1.0, b=8.0, c=0.5) is True
    src = ("sum(1 if n == 0 else 0 for n in S) == "
           "sum(1 if n == 0 else 0 for n in reduced(S, dim, True, 'full'))")
    assert E(src, S=S, dim=(0,)) is True
    assert E(src, S=S, dim=(1,)) is False  # reducing the empty axis keeps a 1
    assert E("sum(n for n in S)", S=()) == 0
    # nested comprehensions and shadowing of an outer name
    assert E("all(all(m <= n for m in S) for n in (9,))", S=S, n=-1) is True


def test_generator_expressions_are_lazy() -> None:
    # Python's all stops at the first false element: the zero is never divided by
    assert E("all(n > 0 and 4 // n > 0 for n in S)", S=(1, -1, 0)) is False
    assert E("all(4 // n > 0 for n in S)", S=(-1, 0)) is False


def test_generator_expression_errors() -> None:
    message = raises("all(4 // n > 0 for n in S)", "4 // n raises", S=(1, 0))
    assert "all(" not in message  # the element's own failure, not re-wrapped
    raises("sum(n for n in x)", "not a sequence", x=3)
    gen = GenExp(Name("n"), "n", Name("S"))
    with pytest.raises(EvaluationError, match="only an argument of all, sum, max or min"):
        evaluate(gen, {"S": (1,)})
    with pytest.raises(EvaluationError, match="only an argument of all, sum, max or min"):
        evaluate(Call("len", (gen,)), {"S": (1,)})


# ----------------------------------------------------------------------------- calls


def test_calls_dispatch_with_keywords() -> None:
    assert E("ceil_div(K, 128)", K=1000) == 8
    assert E("max(S, default=1)", S=()) == 1
    assert E("max((1, x))", x=5) == 5
    assert E("per_axis(k, 1, 2)", k=(3, 5)) == 5
    assert E("per_axis(d, 0, 2, fallback=1)", d=(None, 2)) == 1
    assert E("pool.out(H, kH, sH, pH, dH, ceil_mode)", H=8, kH=3, sH=2, pH=0, dH=1,
             ceil_mode=True) == 4
    assert E("0 if padding == 'valid' or padding == 'same' else per_axis(padding, 0, 1)",
             padding="same") == 0
    src = "valid_axes(dim, len(S)) and unique_axes(dim, len(S))"
    assert E(src, dim=(0, -1), S=(2, 3)) is True
    assert E(src, dim=(1, -1), S=(2, 3)) is False
    assert E(src, dim=(5, 5), S=(2, 3)) is False  # short circuit: unique_axes would raise
    assert E("promote_int_to_float(T)", T="int32") == "float32"
    assert E("coalesce_dtype(out_dtype, D)", out_dtype=None, D="bfloat16") == "bfloat16"


def test_call_errors() -> None:
    raises("foo(1)", "foo is not a built-in primitive")
    raises("ceil_div(1)", "ceil_div misses argument 2 of 2")
    raises("ceil_div(1, 2, 3)", "ceil_div takes 2 arguments, got 3")
    raises("max(S, fallback=1)", "max takes no keyword 'fallback' here", S=(1,))
    msg = raises("ceil_div(K, b)", "ceil_div needs a positive divisor, got 0", K=3, b=0)
    assert msg == "ceil_div(K, b) raises ceil_div needs a positive divisor, got 0"
    raises("max(S)", "max(S) raises max of an empty sequence needs a default", S=())
    raises("broadcast(A, B)", "shapes (2,), (3,) are not broadcastable", A=(2,), B=(3,))
    raises("reduced(S, 5, False, 'full')", "axis 5 is out of range for rank 2", S=(1, 2))
    raises("per_axis(k, 0, 2)", "expected 2 values, got (1, 2, 3)", k=(1, 2, 3))
    raises("mhc.expansion(Q)", "no positive n satisfies n * n + 2 * n == 5", Q=5)
    raises("in_range(0, 4)", "is a `requires` predicate")
    raises("len(x)", "len(x) raises", x=3)


def test_generators_and_rng() -> None:
    assert E("as_tensor(balanced_sizes(M, G))", M=10, G=3) == [4, 3, 3]
    assert E("prefix_sum(q_lens)", q_lens=[512, 512]) == [0, 512, 1024]
    assert E("full((B, S), S_kv)", B=1, S=2, S_kv=9) == [[9, 9]]
    expr = parse_expr("paged_block_table(B, W, NP)")
    env = {"B": 2, "W": 3, "NP": 64}
    with pytest.raises(EvaluationError, match="is random and needs an rng"):
        evaluate(expr, env)
    a = evaluate(expr, env, rng=random.Random(WORKLOAD_SEED))
    b = evaluate(expr, env, rng=random.Random(WORKLOAD_SEED))
    assert a == b and len(a) == 2 and all(len(r) == 3 for r in a)


def test_evaluate_requires() -> None:
    offsets = [0, 3, 7]
    assert evaluate_requires(parse_expr("prefix_offsets(T_q)"), offsets, {"T_q": 7}) is True
    assert evaluate_requires(parse_expr("prefix_offsets(T_q)"), offsets, {"T_q": 8}) is False
    assert evaluate_requires(parse_expr("in_range(0, W * PS + 1)"), [[3, 4]],
                             {"W": 2, "PS": 2}) is True
    assert evaluate_requires(parse_expr("indices_within(offsets)"), [[1, 3]],
                             {"offsets": offsets}) is True
    with pytest.raises(EvaluationError, match="in_range misses argument 3 of 3"):
        evaluate_requires(parse_expr("in_range(0)"), [1], {})
    with pytest.raises(EvaluationError, match="is not a `requires` predicate call"):
        evaluate_requires(parse_expr("ceil_div(1, 2)"), [1], {})


def test_bytes_is_roofline_only() -> None:
    expr = parse_expr("bytes(a) + bytes(b)")
    sizes = {"a": 1024, "b": 256}
    assert evaluate(expr, {BYTES_KEY: sizes.__getitem__}) == 1280
    with pytest.raises(EvaluationError, match="only available in roofline formulas"):
        evaluate(expr, {})
    with pytest.raises(EvaluationError, match="raises"):
        evaluate(parse_expr("bytes(c)"), {BYTES_KEY: sizes.__getitem__})


# ----------------------------------------------------------------------------- hostile sizes


def test_wide_integers_are_refused() -> None:
    # squaring 12 times gives 2 ** 4096, one bit too many
    expr = Name("x")
    for _ in range(12):
        expr = BinOp("*", expr, expr)
    with pytest.raises(EvaluationError, match=f"wider than {MAX_INT_BITS} bits"):
        evaluate(expr, {"x": 2})
    assert evaluate(BinOp("*", Name("x"), Name("x")), {"x": 2 ** 2000}) == 2 ** 4000


def test_long_sequences_are_refused() -> None:
    raises("repeat(1, n)", "limit", n=MAX_SEQ_LEN + 1)
    raises("sum(1 for x in S)", "not a sequence", S=range(3))  # only tuples and lists
    big = (0,) * (MAX_SEQ_LEN + 1)
    raises("sum(x for x in S)", f"more than {MAX_SEQ_LEN} elements", S=big)


def test_deep_nesting_is_an_evaluation_error() -> None:
    expr = Name("x")
    for _ in range(5000):
        expr = UnaryOp("-", expr)
    with pytest.raises(EvaluationError, match="nests too deeply"):
        evaluate(expr, {"x": 1})


# ----------------------------------------------------------------------------- shapes


def test_evaluate_axes() -> None:
    term = ShapeList((Name("M"), BinOp("*", Const(2), Name("N")), Splat(Name("S"))))
    assert evaluate_axes(term, {"M": 3, "N": 4, "S": (5, 6)}) == (3, 8, 5, 6)
    assert evaluate_axes(ShapeList(()), {}) == ()
    two = ShapeList((Splat(Name("B")), Splat(Name("shape"))))
    assert evaluate_axes(two, {"B": [], "shape": [7]}) == (7,)
    with pytest.raises(EvaluationError, match="not a sequence of ints"):
        evaluate_axes(two, {"B": 3, "shape": ()})
    with pytest.raises(EvaluationError, match="not an int"):
        evaluate_axes(ShapeList((Name("x"),)), {"x": 1.5})
    # negative lengths are the caller's check
    assert evaluate_axes(ShapeList((BinOp("-", Name("W"), Const(1)),)), {"W": 0}) == (-1,)
