"""Parsing of parameter `type:` strings and of kind spellings into `Kind`s.

Two small languages share one tokenizer and one union rule:

- `parse_type` reads a construction parameter's Python-style `type:` (`int | None`,
  `'trunc' | 'floor' | None`, `float16 | bfloat16`, `tuple[int, int]`, an ADT name, ...);
- `parse_kind` reads a kind as `forall`, family `params` and ADT fields write it (`Dim`,
  `Shape`, `Seq[Int]`, `Maybe[Int]`, `DType[a | b]`, `'1d' | '2d'`, `Axes`, an ADT name).

Union rule (both): string literals merge into one enum, dtype names into one dtype set, a
`None` member turns the rest into `Maybe[...]`, and equal members collapse. Nothing is
evaluated: the text is tokenized and parsed by recursive descent. Every error is an
`ExpressionError` with `check="kind"` naming the offending part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Collection

from .errors import ExpressionError
from .kinds import (ADTK, AXES, BOOL, DIM, DTYPE, DTYPES, INT, NONE, SHAPE, STR, VALUE, DTypeK,
                    Kind, MaybeK, NoneK, SeqK, StrK, UnionK, ValueK, join)
from .suggest import closest

__all__ = ["parse_type", "parse_kind"]

# ----------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class _Tok:
    kind: str  # "name" | "str" | "int" | "op" | "end"
    text: str
    col: int


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<str>'[^'\\]*'|"[^"\\]*")
  | (?P<int>[0-9]+)
  | (?P<op>\.\.\.|[|\[\],;])
""", re.VERBOSE)


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExpressionError(f"type {text!r}: unexpected {text[pos]!r} at column {pos}",
                                  check="kind", col=pos)
        if m.lastgroup != "ws":
            value = m.group()
            if m.lastgroup == "str":
                value = value[1:-1]
            toks.append(_Tok(m.lastgroup, value, pos))
        pos = m.end()
    toks.append(_Tok("end", "", len(text)))
    return toks


# ----------------------------------------------------------------------------- unions


def _union(members: list[Kind]) -> Kind:
    """Combine union members: literals and dtype sets merge, `None` makes `Maybe`."""
    maybe = False
    rest: list[Kind] = []

    def add(m: Kind) -> None:
        nonlocal maybe
        if isinstance(m, NoneK):
            maybe = True
        elif isinstance(m, MaybeK):
            maybe = True
            add(m.inner)
        elif isinstance(m, UnionK):
            for x in m.members:
                add(x)
        elif isinstance(m, (StrK, DTypeK)):
            # One enum and one dtype set per union, at the place of the first occurrence.
            for i, r in enumerate(rest):
                if type(r) is type(m):
                    rest[i] = join(r, m)
                    return
            rest.append(m)
        elif m not in rest:
            rest.append(m)

    for m in members:
        add(m)
    if not rest:
        return NONE
    core = rest[0] if len(rest) == 1 else UnionK(tuple(rest))
    return MaybeK(core) if maybe else core


# ----------------------------------------------------------------------------- parser


class _Parser:
    """Recursive descent over `union := member ('|' member)*`; `atom` maps a member."""

    def __init__(self, text: str, atom: Callable[["_Parser", _Tok], Kind], what: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.atom = atom
        self.what = what

    # -- helpers
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, op: str) -> bool:
        tok = self.peek()
        if tok.kind == "op" and tok.text == op:
            self.i += 1
            return True
        return False

    def error(self, message: str, col: int, hint: str | None = None) -> ExpressionError:
        return ExpressionError(f"{self.what} {self.text!r}: {message}", check="kind",
                               hint=hint, col=col)

    def expect(self, op: str) -> None:
        if not self.accept(op):
            tok = self.peek()
            found = "the end" if tok.kind == "end" else repr(tok.text)
            raise self.error(f"expected {op!r} at column {tok.col}, found {found}", tok.col)

    def span(self, start: int) -> str:
        """The source text from token `start` up to the current token."""
        lo = self.toks[start].col
        hi = self.toks[self.i].col if self.i < len(self.toks) else len(self.text)
        return self.text[lo:hi].strip()

    # -- grammar
    def parse(self) -> Kind:
        if self.peek().kind == "end":
            raise self.error("is empty", 0)
        kind = self.union()
        tok = self.peek()
        if tok.kind != "end":
            raise self.error(f"unexpected {tok.text!r} at column {tok.col}", tok.col)
        return kind

    def union(self) -> Kind:
        members = [self.member()]
        while self.accept("|"):
            members.append(self.member())
        # A lone member stays as written (`Axes` is `kinds.AXES`, not a rebuilt Maybe).
        return members[0] if len(members) == 1 else _union(members)

    def member(self) -> Kind:
        tok = self.next()
        if tok.kind == "str":
            return StrK(frozenset({tok.text}))
        if tok.kind == "name":
            return self.atom(self, tok)
        found = "the end" if tok.kind == "end" else repr(tok.text)
        raise self.error(f"expected a type at column {tok.col}, found {found}", tok.col)

    def has_args(self) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text == "["


# ----------------------------------------------------------------------------- parse_type

_PY_TYPES: dict[str, Kind] = {
    "int": INT, "bool": BOOL, "None": NONE, "str": STR, "torch.dtype": DTYPE,
    "float": ValueK("float"), "Number": ValueK("Number"), "dict": ValueK("dict"),
    "torch.Tensor": ValueK("torch.Tensor"),
}
# Kind spellings and typing constructs that a `type:` must not use, with the rewrite.
_TYPE_HINTS = {
    "Int": "int", "Dim": "int", "Bool": "bool", "Str": "str", "DType": "torch.dtype or a "
    "union of dtype names", "Shape": "tuple[int, ...]", "Seq": "list[int]", "Maybe": "X | None",
    "Axes": "int | list[int] | None", "Optional": "X | None", "Union": "A | B",
    "typing.Optional": "X | None", "typing.Union": "A | B", "List": "list[X]",
    "Tuple": "tuple[X, ...]",
}
_SEQ_ELEMS = (INT, MaybeK(INT))
_LITERALS = ("Literal", "typing.Literal")


def _literal_hint(text: str) -> str | None:
    """`'row' | 'col'` for `Literal['row', 'col']`: an enum is its quoted members joined by
    `|`. None where the members are not all quoted strings."""
    inner = text[text.find("[") + 1:text.rfind("]")]
    members = [m.strip() for m in inner.split(",") if m.strip()]
    if not members or not all(len(m) >= 2 and m[0] == m[-1] and m[0] in "'\"" for m in members):
        return None
    return " | ".join("'" + m[1:-1] + "'" for m in members) + " (an enum)"


def parse_type(text: str, adts: Collection[str] = ()) -> Kind:
    """The kind of a construction parameter's `type:` text (reference §2.3).

    `adts` are the ADT names in scope. Sequence element types may only be `int` or
    `int | None`; `tuple[A, B]` is a fixed-length sequence of the members' join.
    """
    adt_names = frozenset(adts)

    def atom(p: _Parser, tok: _Tok) -> Kind:
        name = tok.text
        if name in ("list", "tuple"):
            return _py_seq(p, tok)
        if p.has_args():
            hint = _literal_hint(p.text) if name in _LITERALS else _TYPE_HINTS.get(name)
            raise p.error(f"{name}[...] takes no arguments; only list[...] and tuple[...] do",
                          tok.col, hint=f"write {hint}" if hint else None)
        if name in _PY_TYPES:
            return _PY_TYPES[name]
        if name in DTYPES:
            return DTypeK(frozenset({name}))
        if name in adt_names:
            return ADTK(name)
        if name in _TYPE_HINTS:
            raise p.error(f"{name} is a kind spelling, not a Python type", tok.col,
                          hint=f"write {_TYPE_HINTS[name]}")
        # Any other (dotted) identifier names an opaque Python class.
        return ValueK(name)

    return _Parser(text, atom, "type").parse()


def _py_seq(p: _Parser, tok: _Tok) -> Kind:
    """`list[X]`, `tuple[X, ...]` or `tuple[A, B, ...]` after its name token."""
    if not p.has_args():
        raise p.error(f"{tok.text} needs an element type", tok.col,
                      hint=f"write {tok.text}[int" + (", ...]" if tok.text == "tuple" else "]"))
    p.expect("[")
    elems: list[Kind] = []
    open_ended = False
    while True:
        start = p.i
        elem = p.union()
        if elem not in _SEQ_ELEMS:
            raise p.error(f"sequence element type {p.span(start)!r} is not int or int | None",
                          p.toks[start].col)
        elems.append(elem)
        if not p.accept(","):
            break
        if p.accept("..."):
            open_ended = True
            break
    p.expect("]")
    if tok.text == "list":
        if len(elems) != 1 or open_ended:
            raise p.error("list[...] takes exactly one element type", tok.col)
        return SeqK(elems[0])
    if open_ended:
        if len(elems) != 1:
            raise p.error("tuple[X, ...] takes one element type before '...'", tok.col)
        return SeqK(elems[0])
    elem = elems[0]
    for e in elems[1:]:
        elem = join(elem, e)
    return SeqK(elem, length=len(elems))


# ----------------------------------------------------------------------------- parse_kind

_KINDS: dict[str, Kind] = {
    "Int": INT, "Dim": DIM, "Bool": BOOL, "Str": STR, "DType": DTYPE, "None": NONE,
    "Value": VALUE, "Shape": SHAPE, "Seq": SeqK(VALUE), "Axes": AXES,
}
_KIND_HINTS = {"int": "Int", "bool": "Bool", "str": "Str", "torch.dtype": "DType",
               "float": "Value", "list": "Seq[Int]", "tuple": "Seq[Int]", "Optional": "Maybe[X]"}


def parse_kind(text: str, adts: Collection[str] = ()) -> Kind:
    """The kind a `forall` entry, family parameter or ADT field spells (reference §2.2).

    Spellings: `Int, Dim, Bool, Str, DType, None, Value, Shape, Seq, Seq[X], Seq[X; n],
    Maybe[X], DType[a | b], 'lit' | 'lit'`, `Axes` (= `kinds.AXES`) and ADT names; unions of
    these follow the union rule. Every kind prints (`str`) to a spelling this reads back.
    """
    adt_names = frozenset(adts)

    def atom(p: _Parser, tok: _Tok) -> Kind:
        name = tok.text
        if name == "Seq" and p.has_args():
            p.expect("[")
            elem = p.union()
            length = None
            if p.accept(";"):
                n = p.next()
                if n.kind != "int":
                    raise p.error(f"Seq[X; n] needs an integer length at column {n.col}", n.col)
                length = int(n.text)
            p.expect("]")
            return SeqK(elem, length)
        if name == "Maybe":
            if not p.has_args():
                raise p.error("Maybe needs an argument", tok.col, hint="write Maybe[Int]")
            p.expect("[")
            inner = p.union()
            p.expect("]")
            return _union([inner, NONE])
        if name == "DType" and p.has_args():
            return _dtype_set(p)
        if p.has_args():
            hint = _literal_hint(p.text) if name in _LITERALS else None
            raise p.error(f"{name}[...] takes no arguments", tok.col,
                          hint=f"write {hint}" if hint else None)
        if name in _KINDS:
            return _KINDS[name]
        if name in adt_names:
            return ADTK(name)
        hint = _KIND_HINTS.get(name)
        if hint is None and name in DTYPES:
            hint = f"DType[{name}]"
        if hint is None:  # a misspelt kind or ADT name: `Dimm`
            hint = closest(name, [*_KINDS, "Maybe", *sorted(adt_names)])
        raise p.error(f"{name} is not a kind", tok.col, hint=f"write {hint}" if hint else None)

    return _Parser(text, atom, "kind").parse()


def _dtype_set(p: _Parser) -> Kind:
    """`DType[a | b | ...]` after the `DType` token: a set of dtype names."""
    p.expect("[")
    names: set[str] = set()
    while True:
        tok = p.next()
        if tok.kind != "name" or tok.text not in DTYPES:
            raise p.error(f"{tok.text or 'the end'!s} is not a dtype name (column {tok.col})",
                          tok.col)
        names.add(tok.text)
        if not p.accept("|"):
            break
    p.expect("]")
    return DTypeK(frozenset(names))
