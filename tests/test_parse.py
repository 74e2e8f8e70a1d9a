"""Tests of `opspec.schema.parse`: the allowlist, the rejected forms, limits, shape terms."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opspec.schema.errors import ExpressionError
from opspec.schema.expr import (Attr, BinOp, BoolOp, Call, Compare, Const, FamilyApp, GenExp,
                                IfExp, Name, ShapeList, Slice, Splat, Subscript, TupleExpr,
                                UnaryOp)
from opspec.schema.parse import MAX_DEPTH, MAX_LENGTH, defining_equality, parse_expr, parse_shape
from opspec.schema.printer import print_expr, print_shape

sys.path.insert(0, str(Path(__file__).resolve().parent))
from strategies import CORPUS, corpus_strings, structure  # noqa: E402

N, C = Name, Const


def _call(func, *args, **kwargs):
    return Call(func, tuple(args), tuple(kwargs.items()))


# -- every allowed construct -------------------------------------------------------------------

ALLOWED = [
    # names and literals
    ("M", N("M")),
    ("inf", N("inf")),
    ("None", C(None)),
    ("True", C(True)),
    ("False", C(False)),
    ("0", C(0)),
    ("268435456", C(268435456)),
    (str(2 ** 63 - 1), C(2 ** 63 - 1)),
    ("1.5", C(1.5)),
    ("1e16", C(1e16)),
    ("'full'", C("full")),
    ('"it\'s"', C("it's")),
    # boolean operators, flat
    ("a and b", BoolOp("and", (N("a"), N("b")))),
    ("a or b or c", BoolOp("or", (N("a"), N("b"), N("c")))),
    ("a or b and c", BoolOp("or", (N("a"), BoolOp("and", (N("b"), N("c")))))),
    ("not is_causal or S_q <= S_kv",
     BoolOp("or", (UnaryOp("not", N("is_causal")), Compare(N("S_q"), ("<=",), (N("S_kv"),))))),
    # unary
    ("-x", UnaryOp("-", N("x"))),
    ("-3", UnaryOp("-", C(3))),  # never folded into Const(-3)
    ("-inf", UnaryOp("-", N("inf"))),
    ("not not p", UnaryOp("not", UnaryOp("not", N("p")))),
    # binary, with Python's precedence and left associativity
    ("a + b", BinOp("+", N("a"), N("b"))),
    ("a - b - c", BinOp("-", BinOp("-", N("a"), N("b")), N("c"))),
    ("a - (b - c)", BinOp("-", N("a"), BinOp("-", N("b"), N("c")))),
    ("2 * M * N", BinOp("*", BinOp("*", C(2), N("M")), N("N"))),
    ("K // 2", BinOp("//", N("K"), C(2))),
    ("D % 2", BinOp("%", N("D"), C(2))),
    ("a + b * c", BinOp("+", N("a"), BinOp("*", N("b"), N("c")))),
    ("(num_heads + 2 * num_kv_heads) * D",
     BinOp("*", BinOp("+", N("num_heads"), BinOp("*", C(2), N("num_kv_heads"))), N("D"))),
    # comparisons and chains
    ("a == b", Compare(N("a"), ("==",), (N("b"),))),
    ("a != 'x'", Compare(N("a"), ("!=",), (C("x"),))),
    ("0.0 <= p <= 1.0", Compare(C(0.0), ("<=", "<="), (N("p"), C(1.0)))),
    ("a < b > c >= d", Compare(N("a"), ("<", ">", ">="), (N("b"), N("c"), N("d")))),
    ("m in ('a', 'b')", Compare(N("m"), ("in",), (TupleExpr((C("a"), C("b"))),))),
    ("m not in s", Compare(N("m"), ("not in",), (N("s"),))),
    ("(a < b) < c", Compare(Compare(N("a"), ("<",), (N("b"),)), ("<",), (N("c"),))),
    ("(T == 'float8_e4m3fn') == present(q_scale)",
     Compare(Compare(N("T"), ("==",), (C("float8_e4m3fn"),)), ("==",),
             (_call("present", N("q_scale")),))),
    # conditional
    ("a if c else b", IfExp(N("c"), N("a"), N("b"))),
    ("a if c else b if d else e", IfExp(N("c"), N("a"), IfExp(N("d"), N("b"), N("e")))),
    # calls: plain, dotted, keyword arguments
    ("present(bias)", _call("present", N("bias"))),
    ("f()", _call("f")),
    ("pool.out(L, k, s, p, 1, ceil_mode)",
     _call("pool.out", N("L"), N("k"), N("s"), N("p"), C(1), N("ceil_mode"))),
    ("per_axis(stride, 0, 1, fallback=kW)",
     _call("per_axis", N("stride"), C(0), C(1), fallback=N("kW"))),
    ("max(s, default=0)", _call("max", N("s"), default=C(0))),
    # tuples
    ("()", TupleExpr(())),
    ("(x,)", TupleExpr((N("x"),))),
    ("(1, 1)", TupleExpr((C(1), C(1)))),
    ("a, b", TupleExpr((N("a"), N("b")))),
    # subscripts and slices
    ("S[1]", Subscript(N("S"), C(1))),
    ("S[-1]", Subscript(N("S"), UnaryOp("-", C(1)))),
    ("S[1:]", Subscript(N("S"), Slice(C(1), None))),
    ("S[:n]", Subscript(N("S"), Slice(None, N("n")))),
    ("S[::2]", Subscript(N("S"), Slice(None, None, C(2)))),
    ("S[a:b:c]", Subscript(N("S"), Slice(N("a"), N("b"), N("c")))),
    ("S[a, b]", Subscript(N("S"), TupleExpr((N("a"), N("b"))))),
    # attributes
    ("rotary_dim.value", Attr(N("rotary_dim"), "value")),
    ("layout.kind == 'masked'", Compare(Attr(N("layout"), "kind"), ("==",), (C("masked"),))),
    ("v.value.max_m", Attr(Attr(N("v"), "value"), "max_m")),
    # generators, only as the sole argument of all, sum, max, min
    ("all(f != 0 for f in s)",
     _call("all", GenExp(Compare(N("f"), ("!=",), (C(0),)), "f", N("s")))),
    ("sum(1 if n == 0 else 0 for n in S)",
     _call("sum", GenExp(IfExp(Compare(N("n"), ("==",), (C(0),)), C(1), C(0)), "n", N("S")))),
    ("max(x for x in s)", _call("max", GenExp(N("x"), "x", N("s")))),
    ("min((x for x in s), default=0)",
     _call("min", GenExp(N("x"), "x", N("s")), default=C(0))),
    # whitespace around the text
    ("  M  ", N("M")),
    ("(a +\n b)", BinOp("+", N("a"), N("b"))),
]


@pytest.mark.parametrize("text,expected", ALLOWED, ids=[t for t, _ in ALLOWED])
def test_allowed(text, expected):
    assert parse_expr(text) == expected


def test_constant_types_are_kept():
    # Const(1) == Const(True) == Const(1.0) under dataclass equality; the types must still be kept.
    assert type(parse_expr("1").value) is int
    assert type(parse_expr("True").value) is bool
    assert type(parse_expr("1.0").value) is float


def test_columns():
    e = parse_expr("a + f(b, k=c)")
    assert e.col == 0 and e.left.col == 0
    assert e.right.col == 4 and e.right.args[0].col == 6 and e.right.kwargs[0][1].col == 11
    # Python counts UTF-8 bytes; `col` counts characters.
    e = parse_expr("'é' + b")
    assert e.right.col == 6
    # Leading whitespace and line breaks are counted.
    assert parse_expr("  a + b").right.col == 6
    assert parse_expr("(a +\n b)").right.col == 6
    assert parse_expr("S[1:2]").index.col == 2


def test_parses_are_cached():
    assert parse_expr("a + b * c") is parse_expr("a + b * c")
    assert parse_shape("[M, N]") is parse_shape("[M, N]")


# -- constructs outside the language -----------------------------------------------------------

OUTSIDE = [
    # text, message part, hint part (or None)
    ("a / b", "true division `/` is outside the expression language", "//"),
    ("a ** 2", "the power operator `**` is outside the expression language", "x * x"),
    ("a @ b", "matrix multiplication `@` is outside", None),
    ("a & b", "the bitwise operator `&` is outside", "and"),
    ("a | b", "the bitwise operator `|` is outside", "or"),
    ("a ^ b", "the bitwise operator `^` is outside", None),
    ("a << 1", "the shift operator `<<` is outside", None),
    ("a >> 1", "the shift operator `>>` is outside", None),
    ("~a", "the bitwise inversion `~` is outside", "not"),
    ("+a", "unary `+` is outside the expression language", None),
    ("a is b", "the identity test `is` is outside", "present(v)"),
    ("a is not b", "the identity test `is not` is outside", None),
    ("[a, b]", "a list display is outside the expression language", "tuple"),
    ("{}", "a dict display is outside", None),
    ("{a: b}", "a dict display is outside", None),
    ("[x for x in s]", "a list comprehension is outside", "all, sum, max or min"),
    ("{k: v for k in s}", "a dict comprehension is outside", None),
    ("lambda: 1", "a lambda is outside the expression language", None),
    ("f'{x}'", "an f-string is outside the expression language", None),
    ("(y := 1)", "an assignment expression `:=` is outside", "let"),
    ("(*a, b)", "a starred expression `*x` is outside", "shape term"),
    ("f(*a)", "`*` argument unpacking is outside", None),
    ("f(**k)", "`**` argument unpacking is outside", None),
    ("(f + g)(x)", "a call of the computed function f + g is outside", None),
    ("f(x)(y)", "a call of the computed function f(x) is outside", None),
    ("S[1:2, 0]", "a multi-axis slice is outside", None),
    ("1j", "literal 1j is outside the expression language", None),
    ("b'x'", "literal b'x' is outside the expression language", None),
    ("...", "literal ... is outside the expression language", None),
    ("1e400", "literal 1e400 is outside the expression language", "inf"),
    (str(2 ** 63), f"literal {2 ** 63} is outside the expression language", "2**63"),
    ("f(x for x in s)", "a comprehension is only an argument of all, sum, max or min", None),
    ("all(x for x in s, y)", None, None),  # Python itself refuses this one: check "parse"
    ("all((x for x in s), y)", "a comprehension is only an argument of all, sum, max or min",
     None),
    ("(x for x in s)", "a comprehension is only an argument of all, sum, max or min", None),
    ("all(x for x in s if x)", "a comprehension is `f(x) for x in s`: one name, no `if`, no "
     "`async`", None),
    ("all(x for x, y in s)", "a comprehension is `f(x) for x in s`", None),
    ("all(x for x in s for y in t)", "a comprehension is `f(x) for x in s`", None),
    ("all(x async for x in s)", "a comprehension is `f(x) for x in s`", None),
    ("await x", "`await` is outside the expression language", None),
    ("(yield)", "`yield` is outside the expression language", None),
]


@pytest.mark.parametrize("text,message,hint", OUTSIDE, ids=[t for t, _, _ in OUTSIDE])
def test_outside_the_language(text, message, hint):
    with pytest.raises(ExpressionError) as info:
        parse_expr(text)
    exc = info.value
    if message is None:
        assert exc.check == "parse"
        return
    assert exc.check == "language"
    assert message in exc.message
    assert exc.col is not None
    if hint is not None:
        assert hint in exc.hint


@pytest.mark.parametrize("text,reason", [
    ("a +", "invalid syntax"),
    ("", "invalid syntax"),
    ("a if b", "expected 'else'"),
    ("x = 1", "invalid syntax"),
    ("\x00", "null bytes"),
    ("'\ud800'", "surrogates"),
])
def test_python_syntax_errors(text, reason):
    with pytest.raises(ExpressionError) as info:
        parse_expr(text)
    assert info.value.check == "parse"
    assert reason in info.value.message


def test_not_a_string():
    with pytest.raises(ExpressionError) as info:
        parse_expr(12)
    assert info.value.check == "parse"
    with pytest.raises(ExpressionError):
        parse_expr(["a"])


# -- the rejected forms of Table 3 -------------------------------------------------------------

REJECTED = [
    # (1) reading a tensor's shape
    ("x.shape == (B, S, H, D)", "x.shape reads a tensor's shape",
     'declare the shape on the tensor: x: {shape: "[B, S, H, D]"}'),
    ("(B, S) == q.shape", "q.shape reads a tensor's shape",
     'declare the shape on the tensor: q: {shape: "[B, S]"}'),
    ("x.shape[0] == B", "x.shape reads a tensor's shape",
     'declare the shape on the tensor: x: {shape: "[...]"}'),
    ("len(x.shape) == 2", "x.shape reads a tensor's shape", "x: {shape:"),
    ("x.shape.numel() > 0", "x.shape reads a tensor's shape", "x: {shape:"),
    # (2) two tensors with the same shape
    ("output.shape == input.shape", "output.shape == input.shape states that two tensors have "
     "the same shape", "use the same shape term, such as [*S], for both tensors"),
    # (4) `x is None` on a tensor, (5) on a value, and `==`/`!=` with None
    ("bias is None or M > 0", "bias compares with None; presence is present(v)",
     "not present(bias)"),
    ("max_seqlen is None", "max_seqlen compares with None; presence is present(v)",
     "not present(max_seqlen)"),
    ("max_seqlen is not None", "max_seqlen compares with None", "present(max_seqlen)"),
    ("x == None", "x compares with None; presence is present(v)", "not present(x)"),
    ("None != x", "x compares with None", "present(x)"),
    ("0 < a != None", "a compares with None", "present(a)"),
    # (6) isinstance
    ("s[0] if isinstance(s, tuple) else s", "isinstance tests a Python type",
     "per_axis(s, 0, 2)"),
    ("k[1] if isinstance(k, tuple) else k", "isinstance", "per_axis(k, 1, 2)"),
    ("isinstance(s, int)", "isinstance", "per_axis(s, 0, 2)"),
    # (7) a set comprehension or display
    ("len({d % n for d in dim}) == len(dim)", "a set comprehension is outside the expression "
     "language", "unique_axes(dim, n)"),
    ("len({a % rank for a in axes}) == len(axes)", "a set comprehension",
     "unique_axes(axes, rank)"),
    ("len({a, b}) == 2", "a set display is outside the expression language",
     "unique_axes(dim, n)"),
]


@pytest.mark.parametrize("text,message,hint", REJECTED, ids=[t for t, _, _ in REJECTED])
def test_rejected_forms(text, message, hint):
    with pytest.raises(ExpressionError) as info:
        parse_expr(text)
    exc = info.value
    assert exc.check == "rejected-form"
    assert message in exc.message
    assert hint in exc.hint
    assert exc.col is not None


def test_defining_equality():
    e = parse_expr("C_in_g == C_in // groups")
    assert defining_equality(e) == ("C_in_g", BinOp("//", N("C_in"), N("groups")))
    assert defining_equality(parse_expr("C_in // groups == C_in_g")) == \
        ("C_in_g", BinOp("//", N("C_in"), N("groups")))
    assert defining_equality(parse_expr("a == b")) == ("a", N("b"))
    for text in ("a != b", "a == b == c", "a + 1 == b + 1", "a < b", "a == b and c == d"):
        assert defining_equality(parse_expr(text)) is None


# -- resource limits ---------------------------------------------------------------------------

def _rejected_quickly(parse, text, check):
    start = time.perf_counter()
    with pytest.raises(ExpressionError) as info:
        parse(text)
    assert time.perf_counter() - start < 1.0
    assert info.value.check == check
    return info.value


def test_length_limit():
    exc = _rejected_quickly(parse_expr, "a" * (MAX_LENGTH + 1), "language")
    assert "4097 characters" in exc.message and "4096" in exc.message
    assert parse_expr("a" * MAX_LENGTH) == N("a" * MAX_LENGTH)


def test_ten_megabytes():
    _rejected_quickly(parse_expr, "(" * 10_000_000, "language")
    _rejected_quickly(parse_shape, "[" + "a, " * 3_000_000 + "]", "language")


@pytest.mark.parametrize("text", [
    "(" * 65 + "x" + ")" * 65,
    "-(" * 65 + "x" + ")" * 65,
    "f(" * 65 + ")" * 65,
    "[" * 65 + "]" * 65,
    "-" * 65 + "x",
    "not " * 65 + "x",
    "x" + ".a" * 65,
    "+".join(["a"] * 66),
    "x" + "[0]" * 65,
])
def test_depth_limit(text):
    exc = _rejected_quickly(parse_expr, text, "language")
    assert str(MAX_DEPTH) in exc.message


def test_depth_at_the_limit_is_accepted():
    parse_expr("(" * 64 + "x" + ")" * 64)
    parse_expr("-" * 63 + "x")


def test_brackets_inside_strings_do_not_count():
    assert parse_expr("'" + "(" * 100 + "'") == C("(" * 100)


@pytest.mark.parametrize("text", ["-" * 4000 + "x", "(" * 3000, "not " * 1000 + "x",
                                  "f(" * 2000 + ")" * 2000, "a" + ".a" * 2000,
                                  "1" + " if 1 else 1" * 300, "'\\N{x}'" * 100])
def test_hostile_input_ends_in_an_expression_error(text):
    text = text[:MAX_LENGTH]
    start = time.perf_counter()
    with pytest.raises(ExpressionError) as info:
        parse_expr(text)
    assert time.perf_counter() - start < 1.0
    assert info.value.check in ("parse", "language")


def test_big_integer():
    exc = _rejected_quickly(parse_expr, "1" * 100, "language")
    assert "literal" in exc.message and "outside the expression language" in exc.message
    _rejected_quickly(parse_expr, "-" + str(2 ** 63), "language")


# -- shape terms -------------------------------------------------------------------------------

SHAPES = [
    ("[M, 2 * N]", ShapeList((N("M"), BinOp("*", C(2), N("N"))))),
    ("[]", ShapeList(())),
    ("[*S]", ShapeList((Splat(N("S")),))),
    ("[*B, *normalized_shape]", ShapeList((Splat(N("B")), Splat(N("normalized_shape"))))),
    ("[B, C, *L]", ShapeList((N("B"), N("C"), Splat(N("L"))))),
    ("[*broadcast(A, B)]", ShapeList((Splat(_call("broadcast", N("A"), N("B"))),))),
    ("[*reduced(S, dim, keepdim, 'full')]",
     ShapeList((Splat(_call("reduced", N("S"), N("dim"), N("keepdim"), C("full"))),))),
    ("Mat[trans_a, M, K]", FamilyApp("Mat", (N("trans_a"), N("M"), N("K")))),
    ("F[x]", FamilyApp("F", (N("x"),))),
    ("[2 * N if present(activation) else N, K]",
     ShapeList((IfExp(_call("present", N("activation")), BinOp("*", C(2), N("N")), N("N")),
                N("K")))),
    ("[B, H, NC + 1, DK, DV]",
     ShapeList((N("B"), N("H"), BinOp("+", N("NC"), C(1)), N("DK"), N("DV")))),
    ("[N, K // 2]", ShapeList((N("N"), BinOp("//", N("K"), C(2))))),
    ("[ceil_div(K, 128), layout.max_m]",
     ShapeList((_call("ceil_div", N("K"), C(128)), Attr(N("layout"), "max_m")))),
]


@pytest.mark.parametrize("text,expected", SHAPES, ids=[t for t, _ in SHAPES])
def test_shape_terms(text, expected):
    assert parse_shape(text) == expected


def test_splat_column():
    term = parse_shape("[M, *S]")
    assert term.axes[1].col == 4 and term.axes[1].value.col == 5


@pytest.mark.parametrize("text,message", [
    ("M, N", "a shape term is `[axis, ...]` or a type family application `F[args]`"),
    ("M", "a shape term is"),
    ("(M, N)", "a shape term is"),
    ("[M][0]", "a shape term is"),
    ("f(x)[0]", "a shape term is"),
    ("F[a:b]", "a shape term is"),
    ("[M, [N]]", "a list display is outside the expression language"),
    ("[M, (*S,)]", "a starred expression `*x` is outside"),
    ("F[*S]", "a starred expression `*x` is outside"),
    ("[M / 2]", "true division `/` is outside"),
])
def test_rejected_shape_terms(text, message):
    with pytest.raises(ExpressionError) as info:
        parse_shape(text)
    assert info.value.check == "language"
    assert message in info.value.message


def test_rejected_form_inside_a_shape():
    with pytest.raises(ExpressionError) as info:
        parse_shape("[x.shape[0]]")
    assert info.value.check == "rejected-form"


# -- every expression of the real corpus -------------------------------------------------------

def test_corpus_parses():
    if not CORPUS.is_dir():
        pytest.skip("the corpus is absent")
    failures, count = [], 0
    for where, text, is_shape in corpus_strings():
        count += 1
        try:
            (parse_shape if is_shape else parse_expr)(text)
        except ExpressionError as e:
            failures.append(f"{where}: {text!r}: {e.check}: {e.message}")
    assert count > 500
    assert not failures, "\n".join(failures)


# -- arbitrary text: a node or an ExpressionError, never anything else ---------------------------

_ALPHABET = "abSx01_ .,:*/%+-<>=!~()[]{}'\"\\\n#@&|^" + "é\x00"
_WORDS = st.sampled_from(["not ", " and ", " or ", " if ", " else ", " for ", " in ", " is ",
                          "None", "True", "lambda", "all(", "sum(", ".shape", "isinstance(",
                          "1e400", "9" * 20, "**", "//", "await ", "yield"])
_TEXTS = st.one_of(st.text(max_size=60),
                   st.text(alphabet=_ALPHABET, max_size=60),
                   st.lists(st.one_of(st.text(alphabet=_ALPHABET, max_size=3), _WORDS),
                            max_size=15).map("".join))


@settings(max_examples=1500, deadline=None)
@given(_TEXTS)
def test_arbitrary_text(text):
    for parse, show in ((parse_expr, print_expr), (parse_shape, print_shape)):
        try:
            node = parse(text)
        except ExpressionError as e:
            assert e.check in ("parse", "language", "rejected-form")
            continue
        # Whatever parses prints to text that parses back to the same node.
        again = parse(show(node))
        assert again == node and structure(again) == structure(node)
