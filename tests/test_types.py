"""`parse_type` (parameter `type:` strings) and `parse_kind` (kind spellings)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from opspec.schema.errors import ExpressionError
from opspec.schema.kinds import (ADTK, AXES, BOOL, DIM, DTYPE, DTYPES, INT, NONE, SEQ_INT, SHAPE,
                                 STR, VALUE, DTypeK, Kind, MaybeK, SeqK, StrK, UnionK, ValueK)
from opspec.schema.types import parse_kind, parse_type

ADTS = ("MGroupedLayout",)


def lits(*xs: str) -> StrK:
    return StrK(frozenset(xs))


def dts(*xs: str) -> DTypeK:
    return DTypeK(frozenset(xs))


# ----------------------------------------------------------------------------- §2.3 table

TABLE = [
    ("int", INT),
    ("bool", BOOL),
    ("None", NONE),
    ("str", STR),
    ("torch.dtype", DTYPE),
    ("float", ValueK("float")),
    ("Number", ValueK("Number")),
    ("dict", ValueK("dict")),
    ("torch.Tensor", ValueK("torch.Tensor")),
    ("'a'", lits("a")),
    ("'a' | 'b'", lits("a", "b")),
    ("float16", dts("float16")),
    ("bfloat16", dts("bfloat16")),
    ("float8_e4m3fn", dts("float8_e4m3fn")),
    ("int8", dts("int8")),
    ("float16 | bfloat16", dts("float16", "bfloat16")),
    ("MGroupedLayout", ADTK("MGroupedLayout")),
    ("list[int]", SEQ_INT),
    ("tuple[int, ...]", SEQ_INT),
    ("tuple[int, int, int]", SeqK(INT, 3)),
    ("torch.device", ValueK("torch.device")),
    ("RoutingEpilogueSpec", ValueK("RoutingEpilogueSpec")),
    ("int | None", MaybeK(INT)),
]


@pytest.mark.parametrize("text,kind", TABLE)
def test_table_rows(text: str, kind: Kind) -> None:
    assert parse_type(text, ADTS) == kind


# Every type string §2.3 lists under "Types used in real specs".
REAL = [
    ("bool", BOOL),
    ("int", INT),
    ("float", ValueK("float")),
    ("int | float", UnionK((INT, ValueK("float")))),
    ("Number", ValueK("Number")),
    ("Number | None", MaybeK(ValueK("Number"))),
    ("float | None", MaybeK(ValueK("float"))),
    ("int | None", MaybeK(INT)),
    ("torch.dtype", DTYPE),
    ("torch.device | str | None", MaybeK(UnionK((ValueK("torch.device"), STR)))),
    ("'none' | 'tanh'", lits("none", "tanh")),
    ("'trunc' | 'floor' | None", MaybeK(lits("trunc", "floor"))),
    ("'silu_and_mul' | 'gelu_and_mul' | None", MaybeK(lits("silu_and_mul", "gelu_and_mul"))),
    ("'silu' | None", MaybeK(lits("silu"))),
    ("float16 | bfloat16 | float32", dts("float16", "bfloat16", "float32")),
    ("float16 | bfloat16 | None", MaybeK(dts("float16", "bfloat16"))),
    ("float32 | None", MaybeK(dts("float32"))),
    ("float8_e4m3fn | int8", dts("float8_e4m3fn", "int8")),
    ("list[int] | tuple[int, ...]", SEQ_INT),
    ("int | tuple[int, int]", UnionK((INT, SeqK(INT, 2)))),
    ("int | tuple[int, int] | None", MaybeK(UnionK((INT, SeqK(INT, 2))))),
    ("int | tuple[int] | 'valid' | 'same'",
     UnionK((INT, SeqK(INT, 1), lits("valid", "same")))),
    ("int | None | tuple[int | None, int | None] | list[int | None]",
     MaybeK(UnionK((INT, SeqK(MaybeK(INT), 2), SeqK(MaybeK(INT)))))),
    ("int | list[int] | tuple[int, ...] | None", MaybeK(UnionK((INT, SEQ_INT)))),
    ("MGroupedLayout", ADTK("MGroupedLayout")),
    ("RoutingEpilogueSpec | None", MaybeK(ValueK("RoutingEpilogueSpec"))),
]


@pytest.mark.parametrize("text,kind", REAL)
def test_real_spec_types(text: str, kind: Kind) -> None:
    assert parse_type(text, ADTS) == kind


def test_yaml_double_quotes_and_spacing() -> None:
    assert parse_type('"a"|"b"') == lits("a", "b")
    assert parse_type("  tuple[ int|None , int ]  ") == SeqK(MaybeK(INT), 2)


def test_union_merging() -> None:
    assert parse_type("'a' | int | 'b'") == UnionK((lits("a", "b"), INT))
    assert parse_type("str | 'a'") == STR  # an unconstrained Str absorbs literals
    assert parse_type("torch.dtype | float16") == DTYPE
    assert parse_type("int | int") == INT
    assert parse_type("None | int") == MaybeK(INT)
    assert parse_type("None | None") == NONE
    assert parse_type("tuple[int | None, int]") == SeqK(MaybeK(INT), 2)


def test_bool_is_the_python_type_not_the_dtype() -> None:
    assert parse_type("bool") == BOOL
    assert "bool" in DTYPES


def test_adt_names_only_when_declared() -> None:
    assert parse_type("MGroupedLayout") == ValueK("MGroupedLayout")
    assert parse_type("MGroupedLayout | None", ADTS) == MaybeK(ADTK("MGroupedLayout"))


@pytest.mark.parametrize("text,part", [
    ("", "empty"),
    ("int |", "expected a type"),
    ("| int", "expected a type"),
    ("int int", "unexpected 'int'"),
    ("list", "needs an element type"),
    ("tuple", "needs an element type"),
    ("list[float]", "'float'"),
    ("list[str]", "'str'"),
    ("tuple[int, float]", "'float'"),
    ("list[list[int]]", "'list[int]'"),
    ("list[int, int]", "exactly one"),
    ("tuple[int, int, ...]", "one element type"),
    ("list[int", "expected ']'"),
    ("dict[str, int]", "dict[...]"),
    ("Optional[int]", "Optional[...]"),
    ("Dim", "kind spelling"),
    ("Seq", "kind spelling"),
    ("int & str", "'&'"),
    ("'unterminated", "unexpected"),
    ("3", "expected a type"),
])
def test_type_errors(text: str, part: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_type(text, ADTS)
    assert info.value.check == "kind"
    assert part in info.value.message


def test_type_error_hints() -> None:
    with pytest.raises(ExpressionError) as info:
        parse_type("Optional[int]")
    assert info.value.hint == "write X | None"
    with pytest.raises(ExpressionError) as info:
        parse_type("Dim")
    assert info.value.hint == "write int"


@pytest.mark.parametrize("text,hint", [
    ("Literal['row', 'col']", "write 'row' | 'col' (an enum)"),
    ('typing.Literal["a"]', "write 'a' (an enum)"),
    ("Literal[1, 2]", None),  # no enum of ints: no rewrite to offer
])
def test_literal_names_the_enum_spelling(text: str, hint: str | None) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_type(text)
    assert info.value.check == "kind" and "takes no arguments" in info.value.message
    assert info.value.hint == hint
    kind_text = text.replace("typing.", "")
    with pytest.raises(ExpressionError) as info:
        parse_kind(kind_text, ADTS)
    assert info.value.check == "kind" and "takes no arguments" in info.value.message
    assert info.value.hint == hint
    if hint is not None:  # and the rewrite it offers is a spelling that parses
        rewrite = hint.removeprefix("write ").removesuffix(" (an enum)")
        assert parse_kind(rewrite) == parse_type(rewrite)


def test_error_column() -> None:
    with pytest.raises(ExpressionError) as info:
        parse_type("int | list[float]")
    assert info.value.col == 11


# ----------------------------------------------------------------------------- parse_kind

KINDS = [
    ("Int", INT), ("Dim", DIM), ("Bool", BOOL), ("Str", STR), ("DType", DTYPE),
    ("None", NONE), ("Value", VALUE), ("Shape", SHAPE), ("Seq", SeqK(VALUE)),
    ("Seq[Int]", SEQ_INT), ("Seq[Dim]", SHAPE), ("Seq[Int; 2]", SeqK(INT, 2)),
    ("Maybe[Int]", MaybeK(INT)), ("Maybe[Seq[Int]]", MaybeK(SEQ_INT)),
    ("DType[float16 | bfloat16]", dts("float16", "bfloat16")),
    ("DType[float8_e4m3fn]", dts("float8_e4m3fn")),
    ("'1d' | '2d'", lits("1d", "2d")), ("'tight'", lits("tight")),
    ("MGroupedLayout", ADTK("MGroupedLayout")), ("Axes", AXES),
    ("Int | Seq[Int] | None", MaybeK(UnionK((INT, SEQ_INT)))),
    ("Int | Seq[Maybe[Int]] | None", MaybeK(UnionK((INT, SeqK(MaybeK(INT)))))),
    ("'a' | None", MaybeK(lits("a"))),
]


@pytest.mark.parametrize("text,kind", KINDS)
def test_kind_spellings(text: str, kind: Kind) -> None:
    assert parse_kind(text, ADTS) == kind


@pytest.mark.parametrize("text,part,hint", [
    ("int", "is not a kind", "write Int"),
    ("float16", "is not a kind", "write DType[float16]"),
    ("Foo", "is not a kind", None),
    ("DType[float99]", "is not a dtype name", None),
    ("DType[]", "is not a dtype name", None),
    ("Maybe", "needs an argument", "write Maybe[Int]"),
    ("Seq[Int; x]", "integer length", None),
    ("Int[3]", "takes no arguments", None),
    ("Seq[Int", "expected ']'", None),
])
def test_kind_errors(text: str, part: str, hint: str | None) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_kind(text, ADTS)
    assert info.value.check == "kind"
    assert part in info.value.message
    assert info.value.hint == hint


# Kinds that print back to a spelling: generated, printed, parsed again.
_base = st.sampled_from([INT, DIM, BOOL, STR, DTYPE, VALUE, ADTK("MGroupedLayout")])
_lits = st.frozensets(st.sampled_from(["a", "b", "1d", "tight"]), min_size=1).map(StrK)
_dts = st.frozensets(st.sampled_from(sorted(DTYPES)), min_size=1).map(DTypeK)
_leaf = st.one_of(_base, _lits, _dts)


def _wrap(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(inner.map(SeqK), st.tuples(inner, st.integers(0, 4)).map(lambda t: SeqK(*t)),
                     inner.filter(lambda k: not isinstance(k, MaybeK)).map(MaybeK))


@given(st.recursive(_leaf, _wrap, max_leaves=4))
def test_printed_kinds_parse_back(kind: Kind) -> None:
    assert parse_kind(str(kind), ADTS) == kind
