"""The expression language in Z3, and the confirmation of Z3's models (CEGAR).

`Encoder` turns expression ASTs into Z3 terms over one set of unknowns; `solve` runs a
solver and confirms every model with the concrete semantics before calling it SAT. The
encoder knows nothing of reporting: counterexamples leave it as plain dicts (`values`).

How values are represented (one private `_Val` class per shape of value):

- Int / Dim: a Z3 Int (a Dim variable gets the side condition `v >= 0`); Bool: a Z3 Bool.
- Str: an Int *code* (`z3env.str_code`), so strings of any literal sets compare by integer
  equality; an enum kind adds the side condition that the code is one of its literals.
- DType: the one shared enumeration sort `DType` (member sets are side conditions). A string
  literal meeting a dtype (`T == 'bfloat16'`, `coalesce_dtype(v, 'float32')`) becomes the
  enumeration constant; a non-literal string meeting a dtype is compared name by name.
- float: an IEEE-like real, a pair (`isinf(x)`: 0 finite, 1 +inf, -1 -inf, 2 NaN; the Real
  `x`, 0 unless finite), so `-inf < scale < inf`, `ord == inf` and `+ - *` with infinities
  and NaN are exact (rounding is not modelled: reals are exact). `Number` is `int | float`.
- Seq[Int] / Seq[Bool] / Shape: a Z3 sequence. A Shape variable (`Seq[Dim]`) gets
  `Length <= MAX_RANK` and `Implies(i < Length, S[i] >= 0)` for each `i < MAX_RANK`, so its
  elements are Dims wherever they are read. A fixed length (`Seq[Int; 2]`, `fix_length`) is
  the side condition `Length == n`. Sequences of other elements with a fixed length are
  tuples of values; without one they are opaque.
- Maybe[X]: presence Bool `present(x)` and payload `x.value`; a union `A | B`: an Int tag and
  one payload per member (`x.tag`, `x:0`, `x:1`); a surviving ADT: its fields, each the
  variable `adt.field` whose kind `adt_fields` gives, and its constructor `adt.kind` (a Str
  code); other values: the uninterpreted sort `Opaque`.

Exact encodings: `+ - *`, `//` and `%` with Python's floor semantics, comparisons (chains,
`in`), conditionals, `and`/`or`/`not`, indexing and slicing, `len`, `present`, `ceil_div`;
`sum`/`max`/`min`/`all`/`prod` over a sequence of known length (a tuple, a fixed length),
of bounded length (a Shape: unrolled `MAX_RANK` times under `i < Length`), or of unknown
length (a recursive function Z3 unfolds on demand).

Primitives (`broadcast`, `reduced`, `pool.out`, ...) are uninterpreted functions, one per
(primitive, argument shapes), shared by all encoders of a context, so two copies of the
unknowns see the same function. Most also have a *fact* (`_FACTS`): their exact semantics
and domain, asserted in `side` under the application's guard; `Encoder(exact=False)` leaves
them bare. Every application is in `applications`.

A node the encoding cannot express (a fold whose element reads other names over a sequence
of unknown length, ordering of sequences of unknown length, floor division of floats,
comparisons of opaque values) becomes an uninterpreted function of the node's free names,
confirmed with `opspec.schema.evaluate`; such nodes and all applications are in
`abstracted`.

CEGAR: `refine(model)` runs each application that the model evaluates (its guard, the
conditions of the enclosing `if`/`and`/`or`/chains/lazy `all`, holds) with the concrete
semantics, and returns lemmas that pin the function where the model was wrong, or exclude
the arguments where it raises (a model in which an expression raises is no model of its
value). `solve` loops check/refine and answers SAT only with a model every encoder confirmed.

Domain conditions of the exact encodings (index in range, divisor non-zero, `.value` of a
present Maybe, `ceil_div` divisor positive, `max` of a non-empty sequence) are *not*
asserted: they are in `domain` (already under their guards) and `divisors`, for the prover
to assert (queries about valid calls) or to ask about (can a divisor be zero?).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

import z3

from ..schema.errors import OpspecError
from ..schema.evaluate import evaluate
from ..schema.expr import (Attr, BinOp, BoolOp, Call, Compare, Const, Expr, GenExp, IfExp,
                           Name, Slice, Subscript, TupleExpr, UnaryOp, free_names)
from ..schema.kinds import (ADTK, BOOL, DIM, DTYPES, FLOAT, INT, SEQ_INT, BoolK, DTypeK, IntK,
                            Kind, MaybeK, NoneK, SeqK, StrK, TensorK, UnionK, ValueK, join,
                            unwrap_maybe)
from ..schema.primitives import PRIMITIVES, Param, Primitive
from ..schema.printer import print_expr
from ..schema.values import ADTValue, is_int, to_tuple
from .z3env import Verdict, check, shared, str_code, str_decode

__all__ = ["MAX_RANK", "Application", "EncodeError", "Encoder", "Terms", "solve"]

#: The largest rank a Shape may have (the bound of its length, and of unrolled folds).
MAX_RANK = 8
#: The `isinf` code of NaN in a float's representation.
_NAN = 2
_FOLDS = frozenset({"sum", "max", "min", "all", "prod"})
_NUMBER_TAGS = frozenset({"Number", "number"})


class EncodeError(OpspecError, ValueError):
    """An expression (or a name's kind) that the encoding does not cover."""


class Application(NamedTuple):
    """One application of an uninterpreted function: the primitive's name (or, for an
    abstraction, the printed node), the argument terms, the result term (a tuple when the
    result takes several terms) and the AST node."""

    name: str
    args: tuple[z3.ExprRef, ...]
    result: Any
    node: Expr


class Terms(tuple):
    """The terms of a value held by several (a Maybe: presence, payload; a float: isinf,
    real; a union: tag, payloads; an ADT: constructor, fields). `==` and `!=` between two
    `Terms` of the same shape are Z3 formulas of *value* equality: a payload counts only
    where it is present, a union member only under its tag."""

    def __new__(cls, terms: Sequence[z3.ExprRef], normalized: Sequence[z3.ExprRef]):
        obj = super().__new__(cls, terms)
        obj.normalized = tuple(normalized)
        return obj

    def __eq__(self, other: object) -> Any:
        if not isinstance(other, Terms) or len(other.normalized) != len(self.normalized) or \
                any(a.sort() != b.sort() for a, b in zip(self.normalized, other.normalized)):
            raise EncodeError("comparing the terms of values of different shapes")
        return _and([a == b for a, b in zip(self.normalized, other.normalized)])

    def __ne__(self, other: object) -> Any:
        return z3.Not(self.__eq__(other))

    __hash__ = tuple.__hash__


class _Unsupported(Exception):
    """A node the exact encoding cannot express; the caller abstracts it or gives up."""


class _Unconfirmable(Exception):
    """A model value that has no concrete Python counterpart (an opaque value)."""


# ----------------------------------------------------------------------------- z3 helpers


def _and(xs: Sequence[z3.BoolRef]) -> z3.BoolRef:
    xs = [x for x in xs if not z3.is_true(x)]
    return z3.BoolVal(True) if not xs else xs[0] if len(xs) == 1 else z3.And(*xs)


def _or(xs: Sequence[z3.BoolRef]) -> z3.BoolRef:
    xs = [x for x in xs if not z3.is_false(x)]
    return z3.BoolVal(False) if not xs else xs[0] if len(xs) == 1 else z3.Or(*xs)


#: The `cond` of `_Val.leaves` that asks for the terms themselves, none normalized.
_RAW: Any = object()


def _conj(a: z3.BoolRef | None, b: z3.BoolRef | None) -> z3.BoolRef | None:
    if a is _RAW:
        return a
    if a is None:
        return b
    return a if b is None else _and([a, b])


def _default(sort: z3.SortRef) -> z3.ExprRef:
    """The fixed value a leaf takes where it does not matter (an absent payload), so that
    an uninterpreted function sees one representation per concrete value."""
    if sort == z3.IntSort():
        return z3.IntVal(0)
    if sort == z3.BoolSort():
        return z3.BoolVal(False)
    if sort == z3.RealSort():
        return z3.RealVal(0)
    if sort == shared().dtype_sort:
        return next(iter(shared().dtype_consts.values()))
    if isinstance(sort, z3.SeqSortRef):
        return z3.Empty(sort)
    return z3.Const("opaque.default", sort)


def _norm(term: z3.ExprRef, cond: z3.BoolRef | None) -> z3.ExprRef:
    return term if cond is None or cond is _RAW else z3.If(cond, term, _default(term.sort()))


def _seq_lit(values: Sequence[z3.ExprRef], elem: z3.SortRef) -> z3.SeqRef:
    if not values:
        return z3.Empty(z3.SeqSort(elem))
    units = [z3.Unit(v) for v in values]
    return units[0] if len(units) == 1 else z3.Concat(*units)


def _real(value: z3.ExprRef) -> float:
    if z3.is_rational_value(value):
        return float(Fraction(value.numerator_as_long(), value.denominator_as_long()))
    return float(Fraction(value.approx(20).as_fraction()))  # an algebraic number


def _is_const_int(t: z3.ExprRef, value: int | None = None) -> bool:
    return z3.is_int_value(t) and (value is None or t.as_long() == value)


# ----------------------------------------------------------------------------- values


class _Val:
    """An encoded value. `leaves(cond)` lists its terms, each replaced by a fixed default
    where `cond` (or the value's own presence/tag) says it does not matter; `sig` names its
    shape (it keys uninterpreted functions); `py` reads it from a model as plain Python;
    `pin` says it equals a Python value (or raises `_Unconfirmable`)."""

    kind: Kind

    def leaves(self, cond: z3.BoolRef | None = None) -> list[z3.ExprRef]:
        raise NotImplementedError

    def sig(self) -> str:
        raise NotImplementedError

    def py(self, m: z3.ModelRef) -> Any:
        raise NotImplementedError

    def pin(self, value: Any) -> z3.BoolRef:
        raise NotImplementedError

    def raw(self) -> Any:
        """The terms as `Encoder.var` and `Encoder.expr` hand them out: the term of a
        one-term value, else `Terms`."""
        if isinstance(self, _Leaf):
            return self.t
        return Terms(self.leaves(_RAW), self.leaves())


@dataclass(frozen=True)
class _Leaf(_Val):
    """A value held by one term."""

    t: z3.ExprRef
    kind: Kind

    def leaves(self, cond=None):
        return [_norm(self.t, cond)]


class IntV(_Leaf):
    def sig(self):
        return "Int"

    def py(self, m):
        return m.eval(self.t, model_completion=True).as_long()

    def pin(self, value):
        if not is_int(value):
            raise _Unconfirmable(f"{value!r} is not an int")
        return self.t == value


class BoolV(_Leaf):
    def sig(self):
        return "Bool"

    def py(self, m):
        return z3.is_true(m.eval(self.t, model_completion=True))

    def pin(self, value):
        if not isinstance(value, bool):
            raise _Unconfirmable(f"{value!r} is not a bool")
        return self.t == value


@dataclass(frozen=True)
class StrV(_Leaf):
    literal: str | None = None

    def sig(self):
        return "Str"

    def py(self, m):
        return str_decode(m.eval(self.t, model_completion=True).as_long())

    def pin(self, value):
        if not isinstance(value, str):
            raise _Unconfirmable(f"{value!r} is not a string")
        return self.t == str_code(value)


class DTypeV(_Leaf):
    def sig(self):
        return "DType"

    def py(self, m):
        return shared().dtype_names[str(m.eval(self.t, model_completion=True))]

    def pin(self, value):
        if value not in shared().dtype_consts:
            raise _Unconfirmable(f"{value!r} is not a dtype name")
        return self.t == shared().dtype_consts[value]


class OpaqueV(_Leaf):
    def sig(self):
        return f"Opaque[{self.kind}]"

    def py(self, m):
        raise _Unconfirmable(f"an opaque value of kind {self.kind}")

    def pin(self, value):
        raise _Unconfirmable(f"an opaque value of kind {self.kind}")


@dataclass(frozen=True)
class FloatV(_Val):
    """An IEEE-like real: `k` is 0 (finite, the value `r`), 1 (+inf), -1 (-inf) or 2 (NaN);
    `r` is 0 unless finite."""

    k: z3.ArithRef
    r: z3.ArithRef
    kind: Kind = FLOAT

    def leaves(self, cond=None):
        return [_norm(self.k, cond), _norm(self.r, cond)]

    def sig(self):
        return "Float"

    def py(self, m):
        k = m.eval(self.k, model_completion=True).as_long()
        if k == _NAN:
            return math.nan
        return k * math.inf if k else _real(m.eval(self.r, model_completion=True))

    def pin(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Unconfirmable(f"{value!r} is not a number")
        if value != value:
            return self.k == _NAN
        if math.isinf(value):
            return self.k == (1 if value > 0 else -1)
        f = Fraction(value)
        return z3.And(self.k == 0, self.r == z3.Q(f.numerator, f.denominator))


@dataclass(frozen=True)
class SeqV(_Leaf):
    """A Z3 sequence of Ints or Bools. `length`: known exactly; `bound`: at most (a side
    condition the caller asserts); both None: unbounded."""

    length: int | None = None
    bound: int | None = None

    @property
    def elem_sort(self) -> z3.SortRef:
        return self.t.sort().basis()

    def elem(self, i: z3.ArithRef | int) -> "_Val":
        term = self.t[i]
        elem_kind = self.kind.elem if isinstance(self.kind, SeqK) else INT
        return BoolV(term, BOOL) if self.elem_sort == z3.BoolSort() else IntV(term, elem_kind)

    def sig(self):
        return f"Seq[{'Bool' if self.elem_sort == z3.BoolSort() else 'Int'}]"

    def py(self, m):
        value = m.eval(self.t, model_completion=True)
        n = m.eval(z3.Length(value), model_completion=True).as_long()
        items = [z3.simplify(value[i]) for i in range(n)]
        if self.elem_sort == z3.BoolSort():
            return tuple(z3.is_true(x) for x in items)
        return tuple(x.as_long() for x in items)

    def pin(self, value):
        if not isinstance(value, (tuple, list)):
            raise _Unconfirmable(f"{value!r} is not a sequence")
        if self.length is not None and len(value) != self.length:
            raise _Unconfirmable(f"{value!r} does not have length {self.length}")
        boolean = self.elem_sort == z3.BoolSort()
        if not all(isinstance(v, bool) if boolean else is_int(v) for v in value):
            raise _Unconfirmable(f"{value!r} is not a sequence of {self.sig()[4:-1]}")
        lit = [z3.BoolVal(v) if boolean else z3.IntVal(v) for v in value]
        return self.t == _seq_lit(lit, self.elem_sort)


@dataclass(frozen=True)
class TupleV(_Val):
    """A sequence of known length whose elements are values of their own (a tuple literal,
    a fixed-length sequence of non-Int elements)."""

    elts: tuple[_Val, ...]
    kind: Kind = SEQ_INT

    def leaves(self, cond=None):
        return [x for e in self.elts for x in e.leaves(cond)]

    def sig(self):
        return "Tuple[" + ", ".join(e.sig() for e in self.elts) + "]"

    def py(self, m):
        return tuple(e.py(m) for e in self.elts)

    def pin(self, value):
        if not isinstance(value, (tuple, list)) or len(value) != len(self.elts):
            raise _Unconfirmable(f"{value!r} is not a sequence of {len(self.elts)} values")
        return _and([e.pin(v) for e, v in zip(self.elts, value)])


@dataclass(frozen=True)
class NoneV(_Val):
    kind: Kind = NoneK()

    def leaves(self, cond=None):
        return []

    def sig(self):
        return "None"

    def py(self, m):
        return None

    def pin(self, value):
        if value is not None:
            raise _Unconfirmable(f"{value!r} is not None")
        return z3.BoolVal(True)


@dataclass(frozen=True)
class MaybeV(_Val):
    present: z3.BoolRef
    payload: _Val
    kind: Kind

    def leaves(self, cond=None):
        return [_norm(self.present, cond), *self.payload.leaves(_conj(cond, self.present))]

    def sig(self):
        return f"Maybe[{self.payload.sig()}]"

    def py(self, m):
        if not z3.is_true(m.eval(self.present, model_completion=True)):
            return None
        return self.payload.py(m)

    def pin(self, value):
        if value is None:
            return z3.Not(self.present)
        return z3.And(self.present, self.payload.pin(value))


@dataclass(frozen=True)
class UnionV(_Val):
    """A value of one of several kinds: `tag` says which member holds it."""

    tag: z3.ArithRef
    members: tuple[_Val, ...]
    kind: Kind

    def leaves(self, cond=None):
        out = [_norm(self.tag, cond)]
        for i, m in enumerate(self.members):
            out += m.leaves(_conj(cond, self.tag == i))
        return out

    def sig(self):
        return "Union[" + ", ".join(m.sig() for m in self.members) + "]"

    def py(self, m):
        return self.members[m.eval(self.tag, model_completion=True).as_long()].py(m)

    def pin(self, value):
        for i, member in enumerate(self.members):
            if _holds_type(member, value):
                return z3.And(self.tag == i, member.pin(value))
        raise _Unconfirmable(f"{value!r} is none of {self.kind}")


@dataclass(frozen=True)
class ADTV(_Val):
    """A surviving ADT value: its constructor (a Str value, None if unknown) and the fields
    the caller declared in `adt_fields`."""

    path: str
    kind: ADTK
    ctor: _Val | None
    fields: tuple[tuple[str, _Val], ...]

    def leaves(self, cond=None):
        out = [] if self.ctor is None else self.ctor.leaves(cond)
        return out + [x for _, v in self.fields for x in v.leaves(cond)]

    def sig(self):
        return f"{self.kind.name}{{kind, " + ", ".join(n for n, _ in self.fields) + "}"

    def py(self, m):
        if self.ctor is None:
            raise _Unconfirmable(f"the constructor of {self.path} is unknown")
        return ADTValue.of(self.kind.name, self.ctor.py(m), {n: v.py(m) for n, v in self.fields})

    def pin(self, value):
        if not isinstance(value, ADTValue) or self.ctor is None:
            raise _Unconfirmable(f"{value!r} is not a {self.kind.name} value")
        return _and([self.ctor.pin(value.ctor)]
                    + [v.pin(value.field(n)) for n, v in self.fields if value.has(n)])


@dataclass(frozen=True)
class TensorV(_Val):
    """A tensor name: only its presence is seen."""

    present: z3.BoolRef
    kind: Kind = TensorK()

    def leaves(self, cond=None):
        return [_norm(self.present, cond)]

    def sig(self):
        return "Tensor"

    def py(self, m):
        return "<tensor>" if z3.is_true(m.eval(self.present, model_completion=True)) else None

    def pin(self, value):
        raise _Unconfirmable("a tensor")


def _holds_type(val: _Val, value: Any) -> bool:
    """Whether the Python `value` is of the shape `val` represents (union member choice)."""
    if isinstance(val, IntV):
        return is_int(value)
    if isinstance(val, BoolV):
        return isinstance(value, bool)
    if isinstance(val, FloatV):
        return isinstance(value, float)
    if isinstance(val, DTypeV):
        return value in shared().dtype_consts
    if isinstance(val, StrV):
        return isinstance(value, str)
    if isinstance(val, (SeqV, TupleV)):
        return isinstance(value, (tuple, list))
    if isinstance(val, ADTV):
        return isinstance(value, ADTValue)
    return value is None if isinstance(val, NoneV) else False


def _int_const(n: int) -> IntV:
    return IntV(z3.IntVal(n), DIM if n >= 0 else INT)


def _str_const(text: str) -> StrV:
    return StrV(z3.IntVal(str_code(text)), StrK(frozenset({text})), text)


def _float_const(value: float) -> FloatV:
    if value != value:
        return FloatV(z3.IntVal(_NAN), z3.RealVal(0))
    if math.isinf(value):
        return FloatV(z3.IntVal(1 if value > 0 else -1), z3.RealVal(0))
    f = Fraction(value)
    return FloatV(z3.IntVal(0), z3.Q(f.numerator, f.denominator))


# ----------------------------------------------------------------------------- value algebra


def _numeric(v: _Val) -> _Val:
    """Bools count as 0/1 (Python's `True == 1`); Ints and floats as themselves."""
    if isinstance(v, BoolV):
        return IntV(z3.If(v.t, z3.IntVal(1), z3.IntVal(0)), DIM)
    if isinstance(v, (IntV, FloatV)):
        return v
    raise _Unsupported(f"{v.sig()} is not a number")


def _as_float(v: _Val) -> FloatV:
    v = _numeric(v)
    return v if isinstance(v, FloatV) else FloatV(z3.IntVal(0), z3.ToReal(v.t))


def _truth(v: _Val) -> z3.BoolRef:
    if isinstance(v, BoolV):
        return v.t
    if isinstance(v, IntV):
        return v.t != 0
    raise _Unsupported(f"the truth of a {v.sig()}")


def _as_dtype(v: _Val) -> _Val:
    """A string literal that names a dtype, as the dtype constant."""
    if isinstance(v, StrV) and v.literal in shared().dtype_consts:
        return DTypeV(shared().dtype_consts[v.literal], DTypeK(frozenset({v.literal})))
    return v


def _items(v: _Val) -> list[tuple[_Val, z3.BoolRef | None]] | None:
    """The elements of a sequence with the condition under which each exists; None when
    the length is unbounded."""
    if isinstance(v, TupleV):
        return [(e, None) for e in v.elts]
    if isinstance(v, SeqV):
        if v.length is not None:
            return [(v.elem(i), None) for i in range(v.length)]
        if v.bound is not None:
            return [(v.elem(i), z3.IntVal(i) < z3.Length(v.t)) for i in range(v.bound)]
    return None


def _eq(a: _Val, b: _Val) -> z3.BoolRef:
    """Python's `a == b`."""
    wrappers = (NoneV, MaybeV, UnionV)
    if isinstance(b, wrappers) and not isinstance(a, wrappers):
        a, b = b, a
    if isinstance(a, NoneV):
        return (z3.Not(b.present) if isinstance(b, MaybeV)
                else z3.BoolVal(isinstance(b, NoneV)))
    if isinstance(a, MaybeV):
        if isinstance(b, NoneV):
            return z3.Not(a.present)
        if isinstance(b, MaybeV):
            return z3.Or(z3.And(z3.Not(a.present), z3.Not(b.present)),
                         z3.And(a.present, b.present, _eq(a.payload, b.payload)))
        return z3.And(a.present, _eq(a.payload, b))
    if isinstance(a, UnionV):
        return _or([z3.And(a.tag == i, _eq(m, b)) for i, m in enumerate(a.members)])
    numbers = (IntV, BoolV, FloatV)
    if isinstance(a, numbers) and isinstance(b, numbers):
        if isinstance(a, BoolV) and isinstance(b, BoolV):
            return a.t == b.t
        if isinstance(a, FloatV) or isinstance(b, FloatV):
            fa, fb = _as_float(a), _as_float(b)
            return z3.And(fa.k == fb.k, fa.k != _NAN, fa.r == fb.r)
        return _numeric(a).t == _numeric(b).t
    a, b = _as_dtype(a), _as_dtype(b)
    if isinstance(a, StrV) and isinstance(b, DTypeV):
        a, b = b, a
    if isinstance(a, DTypeV) and isinstance(b, DTypeV):
        return a.t == b.t
    if isinstance(a, DTypeV) and isinstance(b, StrV):
        if b.literal is not None:  # a literal that is no dtype name
            return z3.BoolVal(False)
        return _or([z3.And(a.t == c, b.t == str_code(n))
                    for n, c in shared().dtype_consts.items()])
    if isinstance(a, StrV) and isinstance(b, StrV):
        return a.t == b.t
    seqs = (SeqV, TupleV)
    if isinstance(a, seqs) and isinstance(b, seqs):
        return _seq_eq(a, b)
    if isinstance(a, OpaqueV) and isinstance(b, OpaqueV) and a.t.sort() == b.t.sort():
        return a.t == b.t
    if isinstance(a, (OpaqueV, ADTV, TensorV)) or isinstance(b, (OpaqueV, ADTV, TensorV)):
        raise _Unsupported(f"equality of {a.sig()} and {b.sig()}")
    return z3.BoolVal(False)  # values of different kinds are never equal


def _seq_eq(a: _Val, b: _Val) -> z3.BoolRef:
    if isinstance(a, TupleV) and isinstance(b, SeqV):
        a, b = b, a
    if isinstance(a, SeqV) and isinstance(b, SeqV):
        if a.elem_sort != b.elem_sort:
            raise _Unsupported("equality of sequences of different element sorts")
        return a.t == b.t
    if isinstance(a, SeqV):  # b is a tuple
        if a.length is not None and a.length != len(b.elts):
            return z3.BoolVal(False)
        return _and([z3.Length(a.t) == len(b.elts)]
                    + [_eq(a.elem(i), e) for i, e in enumerate(b.elts)])
    if len(a.elts) != len(b.elts):
        return z3.BoolVal(False)
    return _and([_eq(x, y) for x, y in zip(a.elts, b.elts)])


def _lt(a: _Val, b: _Val, strict: bool) -> z3.BoolRef:
    """Python's `a < b` (`a <= b` unless `strict`) on numbers; sequences of known length
    lexicographically; anything else is unsupported here."""
    if isinstance(a, UnionV):
        return _or([z3.And(a.tag == i, _lt(m, b, strict)) for i, m in enumerate(a.members)])
    if isinstance(b, UnionV):
        return _or([z3.And(b.tag == i, _lt(a, m, strict)) for i, m in enumerate(b.members)])
    if isinstance(a, (IntV, BoolV, FloatV)) and isinstance(b, (IntV, BoolV, FloatV)):
        if isinstance(a, FloatV) or isinstance(b, FloatV):
            fa, fb = _as_float(a), _as_float(b)
            # NaN is unordered: every comparison with it is false.
            numbers = z3.And(fa.k != _NAN, fb.k != _NAN)
            below = z3.Or(fa.k < fb.k, z3.And(fa.k == 0, fb.k == 0, fa.r < fb.r))
            if not strict:
                below = z3.Or(below, z3.And(fa.k == fb.k, fa.r == fb.r))
            return z3.And(numbers, below)
        x, y = _numeric(a).t, _numeric(b).t
        return x < y if strict else x <= y
    xs, ys = _known_elems(a), _known_elems(b)
    if xs is None or ys is None:
        raise _Unsupported(f"ordering of {a.sig()} and {b.sig()}")
    # Lexicographic: the first differing position decides, else the shorter is smaller.
    result = z3.BoolVal(len(xs) < len(ys) if strict else len(xs) <= len(ys))
    for x, y in reversed(list(zip(xs, ys))):
        result = z3.If(_eq(x, y), result, _lt(x, y, True))
    return result


def _known_elems(v: _Val) -> list[_Val] | None:
    items = _items(v)
    if items is None or any(c is not None for _, c in items):
        return None
    return [e for e, _ in items]


def _ite(c: z3.BoolRef, a: _Val, b: _Val) -> _Val:
    """The value of `a if c else b`."""
    if isinstance(a, NoneV) and isinstance(b, NoneV):
        return a
    if isinstance(a, NoneV) or isinstance(b, NoneV):
        other, here = (b, z3.Not(c)) if isinstance(a, NoneV) else (a, c)
        if isinstance(other, MaybeV):
            return MaybeV(z3.And(here, other.present), other.payload, other.kind)
        return MaybeV(here, other, MaybeK(other.kind))
    if isinstance(a, MaybeV) or isinstance(b, MaybeV):
        pa, va = (a.present, a.payload) if isinstance(a, MaybeV) else (z3.BoolVal(True), a)
        pb, vb = (b.present, b.payload) if isinstance(b, MaybeV) else (z3.BoolVal(True), b)
        payload = _ite(c, va, vb)
        return MaybeV(z3.If(c, pa, pb), payload, MaybeK(payload.kind))
    if isinstance(a, (IntV, BoolV, FloatV)) and isinstance(b, (IntV, BoolV, FloatV)):
        if isinstance(a, BoolV) and isinstance(b, BoolV):
            return BoolV(z3.If(c, a.t, b.t), BOOL)
        if isinstance(a, FloatV) or isinstance(b, FloatV):
            fa, fb = _as_float(a), _as_float(b)
            return FloatV(z3.If(c, fa.k, fb.k), z3.If(c, fa.r, fb.r))
        x, y = _numeric(a), _numeric(b)
        kind = DIM if x.kind == DIM and y.kind == DIM else INT
        return IntV(z3.If(c, x.t, y.t), kind)
    if isinstance(a, DTypeV) or isinstance(b, DTypeV):
        a, b = _as_dtype(a), _as_dtype(b)
    if type(a) is type(b) and isinstance(a, (StrV, DTypeV, OpaqueV)) and \
            a.t.sort() == b.t.sort():
        return type(a)(z3.If(c, a.t, b.t), join(a.kind, b.kind) or a.kind)
    if isinstance(a, TupleV) and isinstance(b, TupleV) and len(a.elts) == len(b.elts):
        return TupleV(tuple(_ite(c, x, y) for x, y in zip(a.elts, b.elts)), a.kind)
    if isinstance(a, (SeqV, TupleV)) and isinstance(b, (SeqV, TupleV)):
        sa, sb = _as_seq(a), _as_seq(b)
        if sa.elem_sort == sb.elem_sort:
            length = sa.length if sa.length == sb.length else None
            la = sa.length if sa.length is not None else sa.bound
            lb = sb.length if sb.length is not None else sb.bound
            bound = None if length is not None or la is None or lb is None else max(la, lb)
            return SeqV(z3.If(c, sa.t, sb.t), join(sa.kind, sb.kind) or sa.kind, length, bound)
    raise _Unsupported(f"a conditional between {a.sig()} and {b.sig()}")


def _as_seq(v: _Val) -> SeqV:
    """A sequence value as a Z3 sequence (a tuple of Ints or of Bools becomes one)."""
    if isinstance(v, SeqV):
        return v
    elts = v.elts
    if all(isinstance(e, BoolV) for e in elts) and elts:
        return SeqV(_seq_lit([e.t for e in elts], z3.BoolSort()), SeqK(BOOL), len(elts))
    if all(isinstance(e, (IntV, BoolV)) for e in elts):
        terms = [_numeric(e).t for e in elts]
        kind = SeqK(DIM if all(_numeric(e).kind == DIM for e in elts) else INT)
        return SeqV(_seq_lit(terms, z3.IntSort()), kind, len(elts))
    raise _Unsupported(f"{v.sig()} as a sequence of ints")


# ----------------------------------------------------------------------------- applications


@dataclass
class _App:
    """What `refine` needs of one uninterpreted application: the argument values (and the
    keywords they are passed by), the concrete semantics `run`, the result, the guard."""

    label: str
    args: list[tuple[str | None, _Val]]
    leaves: list[z3.ExprRef]
    result: _Val
    guard: z3.BoolRef | None
    run: Callable[[list[tuple[str | None, Any]]], Any]


def _call_primitive(prim: Primitive) -> Callable[[list[tuple[str | None, Any]]], Any]:
    def run(args):
        pos = [v for k, v in args if k is None]
        kw = {k: v for k, v in args if k is not None}
        return prim.evaluate(*pos, **kw)

    return run


def _call_evaluate(node: Expr) -> Callable[[list[tuple[str | None, Any]]], Any]:
    def run(args):
        return evaluate(node, dict(args))

    return run


def _uf_leaf(name: str, args: list[z3.ExprRef]) -> Callable[[str, z3.SortRef], z3.ExprRef]:
    """Leaves of a result: one uninterpreted function per leaf, named after the call."""
    def leaf(part: str, sort: z3.SortRef) -> z3.ExprRef:
        fn = z3.Function(f"{name}{part}", *[a.sort() for a in args], sort)
        return fn(*args)

    return leaf


def _recfold(key: str, f: str, x: z3.ExprRef, elt: z3.ExprRef,
             result: z3.SortRef) -> z3.FuncDeclRef:
    """The recursive function folding `f` over a sequence, `elt` (a term in `x`) giving
    each element's contribution. Defined once per key in Z3's context; `max`/`min` are
    the nonempty folds (the caller handles the empty sequence)."""
    if key in shared().recfuns:
        return shared().recfuns[key]
    seq_sort = z3.SeqSort(x.sort())
    fn = z3.RecFunction(f"fold.{key}", seq_sort, result)
    s = z3.Const(f"fold.{key}.s", seq_sort)
    n = z3.Length(s)
    head = z3.substitute(elt, (x, s[0]))
    rest = fn(z3.Extract(s, 1, n - 1))
    if f == "sum":
        body = z3.If(n == 0, 0, head + rest)
    elif f == "prod":
        body = z3.If(n == 0, 1, head * rest)
    elif f == "all":
        body = z3.If(n == 0, True, z3.And(head, rest))
    else:
        pick = z3.If(head >= rest, head, rest) if f == "max" else \
            z3.If(head <= rest, head, rest)
        body = z3.If(n <= 1, head, pick)
    z3.RecAddDefinition(fn, [s], body)
    shared().recfuns[key] = fn
    return fn


# ----------------------------------------------------------------------------- primitive facts
#
# A fact of a primitive is a formula F(args, result) that holds whenever the primitive
# evaluates without raising, and that fails for arguments where it raises. The encoder
# asserts `Implies(guard, F)` in `side`: where the application is evaluated, its arguments
# are in the domain (as the CEGAR loop would otherwise learn point by point) and its value
# is the one F gives. A fact may be partial (the CEGAR loop still confirms every model);
# most here are exact on the argument shapes they accept and return None on others.


def _axis_ok(d: z3.ArithRef, r: z3.ArithRef) -> z3.BoolRef:
    """`normalize_axis(d, r)` does not raise: `[-r, r)`, or `{-1, 0}` at rank 0."""
    return z3.If(r == 0, z3.And(d >= -1, d <= 0), z3.And(d >= -r, d < r))


def _axis_norm(d: z3.ArithRef, r: z3.ArithRef) -> z3.ArithRef:
    return z3.If(r == 0, 0, z3.If(d < 0, d + r, d))


def _all_axes_ok() -> z3.FuncDeclRef:
    """Recursive: every element of an Int sequence is a valid axis for rank r."""
    key = "axes_ok"
    if key not in shared().recfuns:
        seq = z3.SeqSort(z3.IntSort())
        fn = z3.RecFunction("fold.axes_ok", seq, z3.IntSort(), z3.BoolSort())
        s, r = z3.Const("fold.axes_ok.s", seq), z3.Int("fold.axes_ok.r")
        n = z3.Length(s)
        z3.RecAddDefinition(fn, [s, r], z3.If(n == 0, True, z3.And(
            _axis_ok(s[0], r), fn(z3.Extract(s, 1, n - 1), r))))
        shared().recfuns[key] = fn
    return shared().recfuns[key]


def _all_axes_unique() -> z3.FuncDeclRef:
    """Recursive: valid axes of an Int sequence normalize to distinct axes (r > 0)."""
    key = "axes_unique"
    if key not in shared().recfuns:
        seq = z3.SeqSort(z3.IntSort())
        fn = z3.RecFunction("fold.axes_unique", seq, z3.IntSort(), z3.BoolSort())
        s, r = z3.Const("fold.axes_unique.s", seq), z3.Int("fold.axes_unique.r")
        n = z3.Length(s)
        t = z3.Extract(s, 1, n - 1)
        # Valid axes x, y normalize alike iff x == y or they differ by the rank.
        fresh = z3.And([z3.Not(z3.Contains(t, z3.Unit(s[0] + k))) for k in (0, r, -r)])
        z3.RecAddDefinition(fn, [s, r], z3.If(n == 0, True, z3.And(fresh, fn(t, r))))
        shared().recfuns[key] = fn
    return shared().recfuns[key]


def _axes_ok(dim: _Val, r: z3.ArithRef) -> z3.BoolRef | None:
    """`valid_axes(dim, r)` on each shape `dim` may take; None where unknown."""
    if isinstance(dim, NoneV):
        return z3.BoolVal(True)
    if isinstance(dim, MaybeV):
        inner = _axes_ok(dim.payload, r)
        return None if inner is None else z3.Or(z3.Not(dim.present), inner)
    if isinstance(dim, UnionV):
        parts = [_axes_ok(m, r) for m in dim.members]
        if any(p is None for p in parts):
            return None
        return _or([z3.And(dim.tag == i, p) for i, p in enumerate(parts)])
    if isinstance(dim, IntV):
        return _axis_ok(dim.t, r)
    if isinstance(dim, SeqV) and dim.elem_sort == z3.IntSort():
        return _all_axes_ok()(dim.t, r)
    if isinstance(dim, TupleV) and all(isinstance(x, IntV) for x in dim.elts):
        return _and([_axis_ok(x.t, r) for x in dim.elts])
    return None


def _axes_unique(dim: _Val, r: z3.ArithRef) -> z3.BoolRef | None:
    """`unique_axes(dim, r)` given valid axes; None where unknown."""
    if isinstance(dim, (NoneV, IntV)):
        return z3.BoolVal(True)
    if isinstance(dim, MaybeV):
        inner = _axes_unique(dim.payload, r)
        return None if inner is None else z3.Or(z3.Not(dim.present), inner)
    if isinstance(dim, UnionV):
        parts = [_axes_unique(m, r) for m in dim.members]
        if any(p is None for p in parts):
            return None
        return _or([z3.And(dim.tag == i, p) for i, p in enumerate(parts)])
    if isinstance(dim, (SeqV, TupleV)):
        seq = _as_seq(dim) if isinstance(dim, TupleV) else dim
        if seq.elem_sort != z3.IntSort():
            return None
        # At rank 0 every valid axis is the scalar axis: unique only if at most one.
        return z3.If(r == 0, z3.Length(seq.t) <= 1, _all_axes_unique()(seq.t, r))
    return None


def _unique_domain(dim: _Val, r: z3.ArithRef) -> z3.BoolRef | None:
    """`unique_axes` normalizes the axes of a sequence, which raises on invalid ones."""
    if isinstance(dim, (NoneV, IntV)):
        return z3.BoolVal(True)
    if isinstance(dim, MaybeV):
        inner = _unique_domain(dim.payload, r)
        return None if inner is None else z3.Or(z3.Not(dim.present), inner)
    if isinstance(dim, UnionV):
        parts = [_unique_domain(m, r) for m in dim.members]
        if any(p is None for p in parts):
            return None
        return _or([z3.And(dim.tag == i, p) for i, p in enumerate(parts)])
    return _axes_ok(dim, r)


def _fact_valid_axes(a: dict, res: _Val) -> z3.BoolRef | None:
    ok = _axes_ok(a["dim"], _numeric(a["rank"]).t)
    return None if ok is None else res.t == ok


def _fact_unique_axes(a: dict, res: _Val) -> z3.BoolRef | None:
    r = _numeric(a["rank"]).t
    dom, value = _unique_domain(a["dim"], r), _axes_unique(a["dim"], r)
    return None if dom is None or value is None else z3.And(dom, res.t == value)


def _reduced_axis(dim: _Val, i: int, r: z3.ArithRef, full: z3.BoolRef) -> z3.BoolRef | None:
    """Whether `reduced` reduces axis `i` (given valid axes); `full`: an empty sequence
    means all axes."""
    if isinstance(dim, NoneV):
        return z3.BoolVal(True)
    if isinstance(dim, MaybeV):
        inner = _reduced_axis(dim.payload, i, r, full)
        return None if inner is None else z3.If(dim.present, inner, True)
    if isinstance(dim, UnionV):
        parts = [_reduced_axis(m, i, r, full) for m in dim.members]
        if any(p is None for p in parts):
            return None
        return _or([z3.And(dim.tag == k, p) for k, p in enumerate(parts)])
    if isinstance(dim, IntV):
        return _axis_norm(dim.t, r) == i
    if isinstance(dim, (SeqV, TupleV)):
        seq = _as_seq(dim) if isinstance(dim, TupleV) else dim
        if seq.elem_sort != z3.IntSort():
            return None
        named = z3.Or(z3.Contains(seq.t, z3.Unit(z3.IntVal(i))),
                      z3.Contains(seq.t, z3.Unit(i - r)))
        return z3.If(z3.Length(seq.t) == 0, full, named)
    return None


def _empty_dim(dim: _Val) -> z3.BoolRef:
    if isinstance(dim, MaybeV):
        return z3.And(dim.present, _empty_dim(dim.payload))
    if isinstance(dim, UnionV):
        return _or([z3.And(dim.tag == k, _empty_dim(m)) for k, m in enumerate(dim.members)])
    if isinstance(dim, SeqV):
        return z3.Length(dim.t) == 0
    if isinstance(dim, TupleV):
        return z3.BoolVal(not dim.elts)
    return z3.BoolVal(False)


def _shape_items(v: _Val) -> tuple[SeqV, int] | None:
    """A shape argument as a sequence with a static bound on its length."""
    if isinstance(v, TupleV):
        try:
            v = _as_seq(v)
        except _Unsupported:
            return None
    if not isinstance(v, SeqV) or v.elem_sort != z3.IntSort():
        return None
    bound = v.length if v.length is not None else v.bound
    return None if bound is None else (v, bound)


def _fact_reduced(a: dict, res: _Val) -> z3.BoolRef | None:
    shape, keep, mode = _shape_items(a["S"]), a["keepdim"], a["mode"]
    if shape is None or not isinstance(keep, BoolV) or not isinstance(mode, StrV):
        return None
    S, bound = shape
    r = z3.Length(S.t)
    full = mode.t == str_code("full")
    reds = [_reduced_axis(a["dim"], i, r, full) for i in range(bound)]
    ok = _axes_ok(a["dim"], r)
    if ok is None or any(x is None for x in reds):
        return None
    dom = z3.And(ok, _or([mode.t == str_code(m) for m in ("full", "noop", "reject")]),
                 z3.Not(z3.And(_empty_dim(a["dim"]), mode.t == str_code("reject"))))
    inside = [z3.IntVal(i) < r for i in range(bound)]
    kept = [z3.And(c, z3.Not(x)) for c, x in zip(inside, reds)]
    n_kept = _sum([z3.If(k, 1, 0) for k in kept])
    value = [z3.Length(res.t) == z3.If(r == 0, 0, z3.If(keep.t, r, n_kept))]
    for i in range(bound):
        pos = _sum([z3.If(k, 1, 0) for k in kept[:i]])
        value.append(z3.Implies(inside[i], z3.If(
            keep.t, res.t[i] == z3.If(reds[i], 1, S.t[i]),
            z3.Implies(z3.Not(reds[i]), res.t[pos] == S.t[i]))))
    return z3.And(dom, *value)


def _fact_broadcast(shapes: list[_Val], res: _Val) -> z3.BoolRef | None:
    items = [_shape_items(v) for v in shapes]
    if any(x is None for x in items):
        return None
    bound = max((b for _, b in items), default=0)
    lengths = [z3.Length(s.t) for s, _ in items]
    rank = z3.IntVal(0)
    for n in lengths:
        rank = z3.If(n > rank, n, rank)
    dom, value = [], [z3.Length(res.t) == rank]
    for j in range(bound):  # the j-th axis from the right
        sizes = [z3.If(j < n, s.t[n - 1 - j], 1) for (s, _), n in zip(items, lengths)]
        out = z3.IntVal(1)
        for x in sizes:
            out = z3.If(x != 1, x, out)
        dom += [z3.Or(x == y, x == 1, y == 1)
                for k, x in enumerate(sizes) for y in sizes[k + 1:]]
        value.append(z3.Implies(j < rank, res.t[rank - 1 - j] == out))
    return _and(dom + value)


def _fact_per_axis(a: dict, res: _Val) -> z3.BoolRef | None:
    i, n = _numeric(a["i"]).t, _numeric(a["n"]).t
    fallback = a.get("fallback", NoneV())

    def none_case() -> tuple[z3.BoolRef, z3.ArithRef] | None:
        if isinstance(fallback, NoneV):
            return z3.BoolVal(False), z3.IntVal(0)
        if isinstance(fallback, MaybeV) and isinstance(fallback.payload, IntV):
            return fallback.present, fallback.payload.t
        if isinstance(fallback, IntV):
            return z3.BoolVal(True), fallback.t
        return None

    def item(v: _Val) -> tuple[z3.BoolRef, z3.ArithRef] | None:
        """(domain, value) of a scalar item: an int, or None meaning the fallback."""
        if isinstance(v, IntV):
            return z3.BoolVal(True), v.t
        if isinstance(v, NoneV):
            return none_case()
        if isinstance(v, MaybeV):
            inner, fb = item(v.payload), none_case()
            if inner is None or fb is None:
                return None
            return (z3.If(v.present, inner[0], fb[0]), z3.If(v.present, inner[1], fb[1]))
        return None

    def case(v: _Val) -> tuple[z3.BoolRef, z3.ArithRef] | None:
        if isinstance(v, MaybeV):
            inner, fb = case(v.payload), none_case()
            if inner is None or fb is None:
                return None
            return (z3.If(v.present, inner[0], fb[0]), z3.If(v.present, inner[1], fb[1]))
        if isinstance(v, UnionV):
            parts = [case(m) for m in v.members]
            if any(p is None for p in parts):
                return None
            dom = _or([z3.And(v.tag == k, d) for k, (d, _) in enumerate(parts)])
            val = parts[-1][1]
            for k in range(len(parts) - 2, -1, -1):
                val = z3.If(v.tag == k, parts[k][1], val)
            return dom, val
        if isinstance(v, SeqV) and v.elem_sort == z3.IntSort():
            m = z3.Length(v.t)
            return (z3.And(m == n, i >= -m, i < m), v.t[z3.If(i >= 0, i, m + i)])
        if isinstance(v, TupleV):
            m = len(v.elts)
            parts = [item(x) for x in v.elts]
            if any(p is None for p in parts) or not parts:
                return None if parts else (z3.BoolVal(False), z3.IntVal(0))
            dom, val = parts[-1]
            for k in range(m - 2, -1, -1):
                at = z3.Or(i == k, i == k - m)
                dom, val = z3.If(at, parts[k][0], dom), z3.If(at, parts[k][1], val)
            return z3.And(n == m, i >= -m, i < m, dom), val
        return item(v)

    got = case(a["v"])
    return None if got is None or not isinstance(res, IntV) else z3.And(got[0],
                                                                      res.t == got[1])


def _ints(a: dict, *names: str) -> list[z3.ArithRef] | None:
    vals = [_numeric(a[n]) if isinstance(a.get(n), (IntV, BoolV)) else None for n in names]
    return None if any(v is None for v in vals) else [v.t for v in vals]


def _fact_conv_out(a: dict, res: _Val) -> z3.BoolRef | None:
    xs = _ints(a, "L", "k", "s", "p", "d")
    if xs is None:
        return None
    L, k, s, p, d = xs
    return z3.And(s > 0, res.t == (L + 2 * p - d * (k - 1) - 1) / s + 1)


def _fact_pool_out(a: dict, res: _Val) -> z3.BoolRef | None:
    xs = _ints(a, "L", "k", "s", "p", "d")
    ceil = a.get("ceil_mode")
    if xs is None or not isinstance(ceil, BoolV):
        return None
    L, k, s, p, d = xs
    out = (L + 2 * p - d * (k - 1) - 1 + z3.If(ceil.t, s - 1, 0)) / s + 1
    out = z3.If(z3.And(ceil.t, (out - 1) * s >= L + p), out - 1, out)
    return z3.And(s > 0, res.t == z3.If(out < 0, 0, out))


def _fact_mhc_expansion(a: dict, res: _Val) -> z3.BoolRef | None:
    q = _ints(a, "Q")
    return None if q is None else z3.And(res.t > 0, res.t * res.t + 2 * res.t == q[0])


def _category(x: _Val) -> z3.ArithRef | None:
    """The Str code of `category(x)`; None where unknown."""
    if isinstance(x, BoolV):
        return z3.IntVal(str_code("bool"))
    if isinstance(x, IntV):
        return z3.IntVal(str_code("int"))
    if isinstance(x, FloatV):
        return z3.IntVal(str_code("float"))
    x = _as_dtype(x)
    if isinstance(x, DTypeV):
        out = z3.IntVal(0)
        for name, c in shared().dtype_consts.items():
            out = z3.If(x.t == c, str_code(DTYPES[name][1]), out)
        return out
    if isinstance(x, UnionV):
        parts = [_category(m) for m in x.members]
        if any(p is None for p in parts):
            return None
        out = parts[-1]
        for k in range(len(parts) - 2, -1, -1):
            out = z3.If(x.tag == k, parts[k], out)
        return out
    return None


def _fact_category(a: dict, res: _Val) -> z3.BoolRef | None:
    c = _category(a["x"])
    return None if c is None else res.t == c


def _fact_promote(a: dict, res: _Val) -> z3.BoolRef | None:
    t = _as_dtype(a["T"])
    if not isinstance(t, DTypeV):
        return None
    ints = [t.t == shared().dtype_consts[n] for n, (_, cat) in DTYPES.items() if cat == "int"]
    return res.t == z3.If(_or(ints), shared().dtype_consts["float32"], t.t)


def _fact_coalesce(a: dict, res: _Val) -> z3.BoolRef | None:
    v, t = _as_dtype(a["v"]), _as_dtype(a["T"])
    if not isinstance(t, DTypeV):
        return None
    if isinstance(v, NoneV):
        return res.t == t.t
    if isinstance(v, DTypeV):
        return res.t == v.t
    if isinstance(v, MaybeV) and isinstance(v.payload, DTypeV):
        return res.t == z3.If(v.present, v.payload.t, t.t)
    return None


def _real_range(v: FloatV, lo: Fraction, hi: Fraction) -> z3.BoolRef:
    return z3.And(v.k == 0, v.r >= z3.Q(lo.numerator, lo.denominator),
                  v.r <= z3.Q(hi.numerator, hi.denominator))


def _representable(v: _Val, t: DTypeV) -> z3.BoolRef | None:
    """`representable(v, t)` for a bool, int or float `v` (primitives.representable)."""
    from ..schema.primitives import FLOAT_MAX, NO_INFINITY
    if isinstance(v, BoolV):
        return z3.BoolVal(True)
    if isinstance(v, UnionV):
        parts = [_representable(m, t) for m in v.members]
        if any(p is None for p in parts):
            return None
        return _or([z3.And(v.tag == k, p) for k, p in enumerate(parts)])
    if not isinstance(v, (IntV, FloatV)):
        return None
    cases = []
    for name, (bits, cat) in DTYPES.items():
        if name == "bool":
            fits = z3.BoolVal(True)
        elif cat in ("float", "complex"):
            part = name if cat == "float" else {"complex64": "float32",
                                                 "complex128": "float64"}[name]
            m = Fraction(FLOAT_MAX[part])
            if isinstance(v, IntV):
                fits = z3.And(v.t >= -m, v.t <= m)
            else:  # every floating format has a NaN; not all an infinity
                fits = z3.Or(_real_range(v, -m, m), v.k == _NAN,
                             z3.And(v.k != 0, z3.BoolVal(part not in NO_INFINITY)))
        else:
            lo, hi = (0, 2 ** bits - 1) if name.startswith("uint") else \
                (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            if isinstance(v, IntV):
                fits = z3.And(v.t >= (-hi if lo == 0 else lo), v.t <= hi)
            else:
                fits = _real_range(v, Fraction(lo), Fraction(hi))
        cases.append(z3.And(t.t == shared().dtype_consts[name], fits))
    out = _or(cases)
    if isinstance(v, IntV):  # a torch Scalar holds no int outside [-2**63, 2**64)
        out = z3.If(z3.Or(v.t < -(2 ** 63), v.t >= 2 ** 64),
                    t.t == shared().dtype_consts["bool"], out)
    return out


def _fact_representable(a: dict, res: _Val) -> z3.BoolRef | None:
    t = _as_dtype(a["T"])
    if not isinstance(t, DTypeV):
        return None
    fits = _representable(a["v"], t)
    return None if fits is None else res.t == fits


def _fact_moe_capacity(a: dict, res: _Val) -> z3.BoolRef | None:
    layout, xs = a["layout"], _ints(a, "rows", "experts")
    if not isinstance(layout, ADTV) or not isinstance(layout.ctor, StrV) or xs is None:
        return None
    fields = dict(layout.fields)
    rows, experts = xs
    masked = layout.ctor.t == str_code("masked")
    cases = []
    if isinstance(fields.get("max_m"), IntV):
        cases.append(z3.Implies(masked, res.t == experts * fields["max_m"].t))
    else:
        return None
    packing, align = fields.get("packing"), fields.get("alignment")
    if isinstance(packing, StrV) and isinstance(align, IntV):
        aligned = z3.And(z3.Not(masked), packing.t == str_code("aligned"))
        al = align.t
        cases.append(z3.Implies(aligned, z3.And(
            al > 0, res.t == -_floordiv(-(rows + experts * (al - 1)), al) * al)))
        cases.append(z3.Implies(z3.And(z3.Not(masked), z3.Not(aligned)), res.t == rows))
    return _and(cases)


def _fact_balanced_sizes(a: dict, res: _Val) -> z3.BoolRef | None:
    xs = _ints(a, "total", "count")
    if xs is None or not isinstance(res, SeqV):
        return None
    total, count = xs
    return z3.And(count > 0, total >= 0, z3.Length(res.t) == count)


def _fact_repeat(a: dict, res: _Val) -> z3.BoolRef | None:
    xs = _ints(a, "x", "n")
    if xs is None or not isinstance(res, SeqV):
        return None
    return z3.And(xs[1] >= 0, z3.Length(res.t) == xs[1])


_FACTS: dict[str, Callable[[Any, _Val], z3.BoolRef | None]] = {
    "broadcast": _fact_broadcast, "reduced": _fact_reduced, "valid_axes": _fact_valid_axes,
    "unique_axes": _fact_unique_axes, "per_axis": _fact_per_axis,
    "conv.out": _fact_conv_out, "pool.out": _fact_pool_out,
    "mhc.expansion": _fact_mhc_expansion, "category": _fact_category,
    "promote_int_to_float": _fact_promote, "coalesce_dtype": _fact_coalesce,
    "representable": _fact_representable, "moe.capacity": _fact_moe_capacity,
    "balanced_sizes": _fact_balanced_sizes, "repeat": _fact_repeat,
}


# ----------------------------------------------------------------------------- the encoder


class Encoder:
    """Encodes expressions over one copy of the unknowns.

    `kinds`: the kind of every free name; `adt_fields`: the kind of every surviving ADT
    field read (`layout.max_m`) or passed on (all fields of an ADT given to a primitive),
    and optionally of `layout.kind`; `copy`: a suffix of every variable's Z3 name, so that
    two encoders share no unknowns (uninterpreted functions are shared on purpose).

    After encoding, assert `side` (the facts every variable's kind implies) with the query.
    """

    def __init__(self, kinds: Mapping[str, Kind], *, adt_fields: Mapping[str, Kind] = {},
                 copy: str = "", exact: bool = True):
        self.kinds = dict(kinds)
        #: assert the primitives' facts (`_FACTS`); off, primitives are bare functions that
        #: only the CEGAR loop learns about (tests use that)
        self.exact = exact
        self.adt_fields = dict(adt_fields)
        self.copy = copy
        # Facts of the variables' kinds (Dim >= 0, enum membership, Shape bounds, ...), and
        # of primitive applications (kept apart: an abstraction rolls the latter back).
        self._side: list[z3.BoolRef] = []
        self._facts: list[z3.BoolRef] = []
        #: (printed divisor, its term) for every `//`, `%` and `ceil_div`
        self.divisors: list[tuple[str, z3.ArithRef]] = []
        #: (printed node, condition) that must hold for evaluation not to raise, each
        #: already `Implies(guard, ...)` of the conditions under which the node is evaluated
        self.domain: list[tuple[str, z3.BoolRef]] = []
        #: every uninterpreted application: primitives and abstractions
        self.applications: list[Application] = []
        #: (printed node, term) of every sub-expression not encoded exactly
        self.abstracted: list[tuple[str, Any]] = []
        self._vars: dict[str, _Val] = {}
        self._fixed: dict[str, int] = {}
        self._apps: list[_App] = []
        self._scope: dict[str, _Val] = {}
        self._guard: z3.BoolRef | None = None

    @property
    def side(self) -> list[z3.BoolRef]:
        """Side conditions to assert with the query: the facts of every variable's kind
        (Dim >= 0, enum and dtype membership, Shape length and element bounds, float and
        union representation), and each primitive's fact under its guard (`_FACTS`)."""
        return self._side + self._facts

    # -- variables -------------------------------------------------------------------------

    def var(self, name: str) -> Any:
        """The Z3 unknown(s) of a name: one term, or a tuple for a Maybe (presence,
        payload), a float (isinf, real), a union (tag, payloads...) or an ADT (fields)."""
        return self._var(name).raw()

    def fix_length(self, name: str, n: int) -> None:
        """Fix the length of sequence `name` to `n` (folds over it then unroll exactly)."""
        self._fixed[name] = n
        old = self._vars.get(name)
        if isinstance(old, SeqV):
            self._side.append(z3.Length(old.t) == n)
            self._vars[name] = SeqV(old.t, old.kind, n, None)

    def same(self, other: "Encoder", name: str) -> z3.BoolRef:
        """`name` has the same value in this encoder's copy and in `other`'s."""
        mine, theirs = self._var(name).leaves(), other._var(name).leaves()
        return _and([x == y for x, y in zip(mine, theirs)])

    def same_expr(self, other: "Encoder", e: Expr) -> z3.BoolRef:
        """`e` has the same value in this encoder's copy and in `other`'s (any kind)."""
        return self._equal(self._enc(e), other._enc(e), e)

    def equal(self, a: Expr, b: Expr) -> z3.BoolRef:
        """Python's `a == b` (any kinds: a dtype literal meets a DType, a tuple a Shape)."""
        return self._equal(self._enc(a), self._enc(b), a)

    def define(self, name: str, e: Expr) -> z3.BoolRef:
        """The variable `name` (a let) equals the value of `e`, whatever its kind."""
        return self._equal(self._var(name), self._enc(e), e)

    def _equal(self, a: _Val, b: _Val, e: Expr) -> z3.BoolRef:
        try:
            return _eq(a, b)
        except _Unsupported as exc:
            if a.sig() == b.sig():  # opaque or ADT values: equal representations
                return _and([x == y for x, y in zip(a.leaves(), b.leaves())])
            raise EncodeError(f"{_show(e)}: {exc}") from None

    def assign(self, name: str, value: Any) -> z3.BoolRef:
        """`name` equals the plain Python `value` (an int, a dtype name, a tuple, None...)."""
        try:
            return self._var(name).pin(to_tuple(value))
        except _Unconfirmable as exc:
            raise EncodeError(f"{name} cannot take the value {value!r}: {exc}") from None

    def _var(self, name: str) -> _Val:
        if name in self._vars:
            return self._vars[name]
        kind = self.kinds.get(name, self.adt_fields.get(name))
        if kind is None:
            raise EncodeError(f"{name} is not a known name")
        leaf = self._leaf
        val = self._build(kind, name, leaf, facts=True)
        self._vars[name] = val
        return val

    def _leaf(self, name: str, sort: z3.SortRef) -> z3.ExprRef:
        return z3.Const(name + self.copy, sort)

    def _build(self, kind: Kind, name: str, leaf: Callable[[str, z3.SortRef], z3.ExprRef],
               facts: bool) -> _Val:
        """A value of `kind` whose leaves `leaf` makes. Side conditions that keep the
        representation meaningful (enum codes, tags, infinity flags) always; the facts of a
        variable's kind (Dim >= 0, Shape bounds) only with `facts` (for variables, not for
        primitive results, whose declared kind the encoder does not trust as a lemma)."""
        side = self._side
        if isinstance(kind, IntK):
            t = leaf(name, z3.IntSort())
            if facts and kind.nonneg:
                side.append(t >= 0)
            return IntV(t, kind)
        if isinstance(kind, BoolK):
            return BoolV(leaf(name, z3.BoolSort()), kind)
        if isinstance(kind, StrK):
            t = leaf(name, z3.IntSort())
            if kind.literals is not None:
                side.append(_or([t == str_code(s) for s in sorted(kind.literals)]))
            return StrV(t, kind)
        if isinstance(kind, DTypeK):
            t = leaf(name, shared().dtype_sort)
            if kind.members is not None:
                side.append(_or([t == shared().dtype_consts[m] for m in sorted(kind.members)
                                 if m in shared().dtype_consts]))
            return DTypeV(t, kind)
        if isinstance(kind, SeqK):
            return self._build_seq(kind, name, leaf, facts)
        if isinstance(kind, MaybeK):
            present = leaf(f"present({name})", z3.BoolSort())
            return MaybeV(present, self._build(kind.inner, f"{name}.value", leaf, facts), kind)
        if isinstance(kind, UnionK):
            members = [m for m in kind.members if not isinstance(m, NoneK)]
            if len(members) < len(kind.members):
                inner = members[0] if len(members) == 1 else UnionK(tuple(members))
                return self._build(MaybeK(inner), name, leaf, facts)
            tag = leaf(f"{name}.tag", z3.IntSort())
            side.append(z3.And(tag >= 0, tag < len(members)))
            vals = tuple(self._build(m, f"{name}:{i}", leaf, facts)
                         for i, m in enumerate(members))
            return UnionV(tag, vals, kind)
        if isinstance(kind, ADTK) and facts:
            return self._adt(name, kind)
        if isinstance(kind, NoneK):
            return NoneV()
        if isinstance(kind, ValueK) and kind.tag == "float":
            k, r = leaf(f"isinf({name})", z3.IntSort()), leaf(name, z3.RealSort())
            side.append(z3.And(k >= -1, k <= _NAN, z3.Implies(k != 0, r == 0)))
            return FloatV(k, r, kind)
        if isinstance(kind, ValueK) and kind.tag in _NUMBER_TAGS:
            return self._build(UnionK((INT, FLOAT)), name, leaf, facts)
        if isinstance(kind, TensorK):
            return TensorV(leaf(f"present({name})", z3.BoolSort()))
        return OpaqueV(leaf(name, shared().opaque_sort), kind)

    def _build_seq(self, kind: SeqK, name: str, leaf, facts: bool) -> _Val:
        elem = kind.elem
        length = kind.length if kind.length is not None else (
            self._fixed.get(name) if facts else None)
        if not isinstance(elem, (IntK, BoolK)):
            if length is None:
                return OpaqueV(leaf(name, shared().opaque_sort), kind)
            return TupleV(tuple(self._build(elem, f"{name}[{i}]", leaf, facts)
                                for i in range(length)), kind)
        sort = z3.BoolSort() if isinstance(elem, BoolK) else z3.IntSort()
        t = leaf(name, z3.SeqSort(sort))
        bound = None
        if length is not None:
            self._side.append(z3.Length(t) == length)
        elif facts and elem == DIM:
            bound = MAX_RANK
            self._side.append(z3.Length(t) <= MAX_RANK)
        if facts and elem == DIM:
            for i in range(length if length is not None else MAX_RANK):
                self._side.append(z3.Implies(i < z3.Length(t), t[i] >= 0))
        return SeqV(t, kind, length, bound)

    def _adt(self, path: str, kind: ADTK) -> ADTV:
        prefix = path + "."
        names = sorted(k[len(prefix):] for k in self.adt_fields
                       if k.startswith(prefix) and "." not in k[len(prefix):]
                       and k[len(prefix):] != "kind")
        fields = tuple((n, self._var(prefix + n)) for n in names)
        ctor: _Val | None = None
        if prefix + "kind" in self.adt_fields:
            ctor = self._var(prefix + "kind")
        elif kind.ctors is not None and len(kind.ctors) == 1:
            ctor = _str_const(next(iter(kind.ctors)))
        elif kind.ctors is not None:
            self.adt_fields[prefix + "kind"] = StrK(kind.ctors)
            ctor = self._var(prefix + "kind")
        return ADTV(path, kind, ctor, fields)

    # -- expressions -----------------------------------------------------------------------

    def expr(self, e: Expr) -> Any:
        """The Z3 term of an expression: one term, or `Terms` for a value held by several
        (a Maybe, a float, ...). A tuple of ints (or of bools) is a Z3 sequence, as a Shape
        is, so that `Concat` and `==` with sequences work on it."""
        try:
            val = self._enc(e)
            if isinstance(val, TupleV):
                try:
                    return _as_seq(val).t
                except _Unsupported:
                    pass
            return val.raw()
        except _Unsupported as exc:
            raise EncodeError(f"{_show(e)}: {exc}") from None

    def _enc(self, e: Expr) -> _Val:
        handler = _HANDLERS.get(type(e))
        if handler is None:
            raise EncodeError(f"{_show(e)} is not an expression the encoder knows")
        return handler(self, e)

    @contextmanager
    def _guarded(self, cond: z3.BoolRef | None) -> Iterator[None]:
        """Encode under `cond`: what is encoded inside is evaluated only when it holds."""
        saved = self._guard
        self._guard = _conj(saved, cond)
        try:
            yield
        finally:
            self._guard = saved

    def _require(self, node: Expr, cond: z3.BoolRef) -> None:
        """Record a domain condition of an exact encoding (under the current guard)."""
        text = _show(node)
        self.domain.append((text, cond if self._guard is None else
                            z3.Implies(self._guard, cond)))

    def _or_abstract(self, node: Expr, kind: Kind, encode: Callable[[], _Val]) -> _Val:
        """`encode()`, or, where it is unsupported, an abstraction of `node` of `kind`."""
        lists = (self._apps, self.applications, self.abstracted, self.divisors, self.domain,
                 self._facts)
        marks = [len(x) for x in lists]
        try:
            return encode()
        except _Unsupported:
            # What the attempt recorded belongs to terms that are not in the formula.
            for x, n in zip(lists, marks):
                del x[n:]
            return self._abstract(node, kind)

    # leaves

    def _const(self, e: Const) -> _Val:
        v = e.value
        if v is None:
            return NoneV()
        if isinstance(v, bool):
            return BoolV(z3.BoolVal(v), BOOL)
        if isinstance(v, int):
            return _int_const(v)
        if isinstance(v, float):
            return _float_const(v)
        if isinstance(v, str):
            return _str_const(v)
        raise EncodeError(f"{v!r} is not a literal of the language")

    def _name(self, e: Name) -> _Val:
        return self._lookup(e.id)

    def _lookup(self, name: str) -> _Val:
        if name in self._scope:
            return self._scope[name]
        if name in self.kinds or name in self.adt_fields or name in self._vars:
            return self._var(name)
        if name == "inf":
            return _float_const(math.inf)
        if name in shared().dtype_consts:
            # A bare dtype name (`float64` in a let or a rule, `dtype: int64` of an input)
            # is that dtype; it used to leave the question undecided.
            return DTypeV(shared().dtype_consts[name], DTypeK(frozenset({name})))
        raise EncodeError(f"{name} is not a known name")

    def _tuple(self, e: TupleExpr) -> _Val:
        return TupleV(tuple(self._enc(x) for x in e.elts))

    def _attr(self, e: Attr) -> _Val:
        base = self._enc(e.value)
        if isinstance(base, MaybeV):
            self._require(e, base.present)
            base = base.payload
            if e.attr == "value":
                return base
        elif e.attr == "value":
            return base  # an already narrowed Maybe: `v.value` is `v`
        if isinstance(base, ADTV):
            if e.attr == "kind":
                if base.ctor is None:
                    raise EncodeError(f"{_show(e)}: the constructors of {base.path} are "
                                      "unknown (give its kind in adt_fields)")
                return base.ctor
            for name, val in base.fields:
                if name == e.attr:
                    return val
            raise EncodeError(f"{_show(e)}: {base.path}.{e.attr} is not in adt_fields")
        raise EncodeError(f"{_show(e)}: a {base.sig()} has no attribute {e.attr}")

    # operators

    def _unary(self, e: UnaryOp) -> _Val:
        v = self._enc(e.operand)
        if e.op == "not":
            return BoolV(z3.Not(_truth(v)), BOOL)
        v = _numeric(v)
        # Fold constants, so that `S[-1]` and `-inf` stay recognisable as constants.
        if isinstance(v, FloatV):
            return FloatV(z3.simplify(z3.If(v.k == _NAN, _NAN, -v.k)), z3.simplify(-v.r))
        return IntV(z3.simplify(-v.t) if z3.is_int_value(v.t) else -v.t, INT)

    def _binop(self, e: BinOp) -> _Val:
        a, b = self._enc(e.left), self._enc(e.right)
        floats = isinstance(a, FloatV) or isinstance(b, FloatV)
        return self._or_abstract(e, FLOAT if floats else INT,
                                 lambda: self._arith(e, _numeric(a), _numeric(b)))

    def _arith(self, e: BinOp, a: _Val, b: _Val) -> _Val:
        if isinstance(a, FloatV) or isinstance(b, FloatV):
            if e.op not in _ARITH:
                raise _Unsupported("floor division of floats")
            return _float_arith(e.op, _as_float(a), _as_float(b))
        x, y = a.t, b.t
        if e.op in _ARITH:
            nonneg = e.op != "-" and a.kind == DIM and b.kind == DIM
            t = _ARITH[e.op](x, y)
            return IntV(z3.simplify(t) if _is_const_int(x) and _is_const_int(y) else t,
                        DIM if nonneg else INT)
        self._divisor(e.right, y)
        q = _floordiv(x, y)
        if e.op == "//":
            return IntV(q, INT)
        if _is_const_int(y) and y.as_long() > 0:
            return IntV(x % y, INT)  # SMT-LIB mod is Python's for a positive divisor
        return IntV(x - y * q, INT)

    def _divisor(self, node: Expr, term: z3.ArithRef) -> None:
        self.divisors.append((_show(node), term))
        self._require(node, term != 0)

    def _boolop(self, e: BoolOp) -> _Val:
        parts: list[z3.BoolRef] = []
        for x in e.values:
            # Short circuit: `x` is evaluated only when the operands before it did not
            # already decide the result.
            before = [p if e.op == "and" else z3.Not(p) for p in parts]
            with self._guarded(_and(before) if before else None):
                parts.append(_truth(self._enc(x)))
        return BoolV(_and(parts) if e.op == "and" else _or(parts), BOOL)

    def _compare(self, e: Compare) -> _Val:
        return self._or_abstract(e, BOOL, lambda: self._chain(e))

    def _chain(self, e: Compare) -> _Val:
        left = self._enc(e.left)
        parts: list[z3.BoolRef] = []
        for op, comp in zip(e.ops, e.comparators):
            with self._guarded(_and(parts) if parts else None):
                right = self._enc(comp)
            parts.append(_compare(op, left, right))
            left = right
        return BoolV(_and(parts), BOOL)

    def _ifexp(self, e: IfExp) -> _Val:
        c = _truth(self._enc(e.test))
        with self._guarded(c):
            a = self._enc(e.body)
        with self._guarded(z3.Not(c)):
            b = self._enc(e.orelse)
        try:
            return _ite(c, a, b)
        except _Unsupported as exc:
            raise EncodeError(f"{_show(e)}: {exc}") from None

    def _subscript(self, e: Subscript) -> _Val:
        seq = self._enc(e.value)
        if isinstance(e.index, Slice):
            return self._slice(e, seq)
        idx = _numeric(self._enc(e.index))
        if not isinstance(idx, IntV):
            raise EncodeError(f"{_show(e)}: the index is not an int")
        if isinstance(seq, TupleV):
            n = len(seq.elts)
            self._require(e, z3.And(idx.t >= -n, idx.t < n))
            if z3.is_int_value(idx.t):
                i = idx.t.as_long()
                return seq.elts[i] if -n <= i < n else NoneV()
            out = seq.elts[-1] if seq.elts else NoneV()
            for i in range(n - 1, -1, -1):
                out = _ite(z3.Or(idx.t == i, idx.t == i - n), seq.elts[i], out)
            return out
        if not isinstance(seq, SeqV):
            raise EncodeError(f"{_show(e)}: {_show(e.value)} is not a sequence")
        n = z3.IntVal(seq.length) if seq.length is not None else z3.Length(seq.t)
        self._require(e, z3.And(idx.t >= -n, idx.t < n))
        if z3.is_int_value(idx.t):
            i = idx.t.as_long()
            return seq.elem(i if i >= 0 else z3.simplify(n + i))
        return seq.elem(z3.If(idx.t >= 0, idx.t, n + idx.t))

    def _slice(self, e: Subscript, seq: _Val) -> _Val:
        s = e.index
        bounds = []
        for b in (s.lower, s.upper, s.step):
            v = None if b is None else _numeric(self._enc(b))
            if v is not None and not isinstance(v, IntV):
                raise EncodeError(f"{_show(e)}: a slice bound is not an int")
            bounds.append(v)
        lo, hi, step = bounds
        # Constant bounds (None where omitted); `dynamic` where a bound is an unknown.
        dynamic = any(b is not None and not z3.is_int_value(b.t) for b in bounds)
        consts = [None if b is None or dynamic else b.t.as_long() for b in bounds]
        known = _known_elems(seq)
        if known is not None and not dynamic:
            if step is not None and consts[2] == 0:
                raise EncodeError(f"{_show(e)}: slice step cannot be zero")
            picked = known[slice(*consts)]
            if isinstance(seq, SeqV):
                return SeqV(_seq_lit([v.leaves()[0] for v in picked], seq.elem_sort),
                            seq.kind, len(picked))
            return TupleV(tuple(picked), seq.kind)
        if step is not None and consts[2] != 1:
            raise EncodeError(f"{_show(e)}: a slice with a step needs a known length")
        sv = _as_seq(seq) if isinstance(seq, TupleV) else seq
        if not isinstance(sv, SeqV):
            raise EncodeError(f"{_show(e)}: {_show(e.value)} is not a sequence")
        n = z3.Length(sv.t)

        def clamp(b: IntV | None, default: z3.ArithRef) -> z3.ArithRef:
            # Python: a negative bound counts from the end; both are clamped to [0, n].
            if b is None:
                return default
            x = b.t
            return z3.If(x < 0, z3.If(n + x < 0, 0, n + x), z3.If(x > n, n, x))

        start, stop = clamp(lo, z3.IntVal(0)), clamp(hi, n)
        bound = sv.length if sv.length is not None else sv.bound
        return SeqV(z3.Extract(sv.t, start, stop - start), sv.kind, None, bound)

    # calls

    def _call(self, e: Call) -> _Val:
        f = e.func
        if f == "present":
            if len(e.args) != 1 or e.kwargs or not isinstance(e.args[0], Name):
                raise EncodeError(f"{_show(e)} names no tensor, Maybe parameter or `out`")
            v = self._lookup(e.args[0].id)
            if isinstance(v, (MaybeV, TensorV)):
                return BoolV(v.present, BOOL)
            return BoolV(z3.BoolVal(not isinstance(v, NoneV)), BOOL)
        if any(isinstance(a, GenExp) for a in e.args) and f not in _FOLDS - {"prod"}:
            raise EncodeError(f"{_show(e)}: a comprehension is only an argument of all, sum, "
                              "max or min")
        if f == "len" and len(e.args) == 1 and not e.kwargs:
            v = self._enc(e.args[0])
            if isinstance(v, TupleV):
                return _int_const(len(v.elts))
            if isinstance(v, SeqV):
                return IntV(z3.IntVal(v.length) if v.length is not None
                            else z3.Length(v.t), DIM)
            raise EncodeError(f"{_show(e)}: {_show(e.args[0])} is not a sequence")
        if f in _FOLDS and len(e.args) == 1:
            kind = BOOL if f == "all" else INT
            return self._or_abstract(e, kind, lambda: self._fold(e))
        if f == "ceil_div" and len(e.args) == 2 and not e.kwargs:
            a, b = (_numeric(self._enc(x)) for x in e.args)
            if isinstance(a, IntV) and isinstance(b, IntV):
                self.divisors.append((_show(e.args[1]), b.t))
                self._require(e, b.t > 0)
                kind = DIM if a.kind == DIM and b.kind == DIM else INT
                return IntV(-_floordiv(-a.t, b.t), kind)
        prim = PRIMITIVES.get(f)
        if prim is None or prim.role not in ("value", "roofline"):
            raise EncodeError(f"{_show(e)}: {f} is not a built-in primitive of expressions")
        return self._apply(prim, e)

    def _fold(self, e: Call) -> _Val:
        f, arg = e.func, e.args[0]
        kw = dict(e.kwargs)
        if set(kw) - {"default"} or (kw and f not in ("max", "min")):
            raise EncodeError(f"{_show(e)}: unexpected keywords")
        default = None
        if "default" in kw:
            d = self._enc(kw["default"])
            if not isinstance(d, NoneV):  # `default=None` is no default
                d = _numeric(d)
                if not isinstance(d, IntV):
                    raise _Unsupported("a non-int default")
                default = d.t
        seq = self._enc(arg.iter if isinstance(arg, GenExp) else arg)
        items = _items(seq)
        if items is None:
            return self._rec_fold(e, f, seq, arg, default)
        if isinstance(arg, GenExp):
            elems, seen = [], []
            for elem, cond in items:
                # `all` is lazy: an element is evaluated only while all before it held.
                lazy = list(seen) if f == "all" else []
                with self._guarded(_and([c for c in [cond] if c is not None] + lazy)):
                    v = self._in_scope(arg.var, elem, arg.elt)
                elems.append((v, cond))
                if f == "all":
                    seen.append(_truth(v) if cond is None else z3.Implies(cond, _truth(v)))
        else:
            elems = items
        if f == "all":
            return BoolV(_and([_truth(v) if c is None else z3.Implies(c, _truth(v))
                               for v, c in elems]), BOOL)
        nums = []
        for v, c in elems:
            v = _numeric(v)
            if not isinstance(v, IntV):
                raise _Unsupported("a fold over floats")
            nums.append((v.t, c))
        if f == "sum":
            return IntV(_sum([v if c is None else z3.If(c, v, 0) for v, c in nums]), INT)
        if f == "prod":
            return IntV(_prod([v if c is None else z3.If(c, v, 1) for v, c in nums]), INT)
        return IntV(self._extreme(e, f, nums, default), INT)

    def _in_scope(self, var: str, value: _Val, body: Expr) -> _Val:
        saved = self._scope
        self._scope = {**saved, var: value}
        try:
            return self._enc(body)
        finally:
            self._scope = saved

    def _rec_fold(self, e: Call, f: str, seq: _Val, arg: Expr,
                  default: z3.ArithRef | None) -> _Val:
        """A fold over a sequence of unknown length, as a recursive function Z3 unfolds on
        demand. A generator's element may read only its loop variable (anything else would
        have to become a parameter of the function); otherwise the fold is abstracted."""
        if not isinstance(seq, SeqV):
            raise _Unsupported(f"a fold over a {seq.sig()}")
        elem_sort = seq.elem_sort
        if isinstance(arg, GenExp):
            if free_names(arg.elt) - {arg.var} - ({"inf"} - set(self.kinds)):
                raise _Unsupported("a generator over a sequence of unknown length that reads "
                                   "other names")
            x = z3.Const(f"{_show(arg)}.{arg.var}", elem_sort)
            x_val = BoolV(x, BOOL) if elem_sort == z3.BoolSort() else IntV(x, INT)
            marks = (len(self._apps), len(self.divisors), len(self.domain), len(self._facts))
            body = self._in_scope(arg.var, x_val, arg.elt)
            if (len(self._apps), len(self.divisors), len(self.domain),
                    len(self._facts)) != marks:
                raise _Unsupported("a generator element with its own domain")
            key = f"{f}({_show(arg)}: {seq.sig()})"
        else:
            x = z3.Const(f"{f}.x", elem_sort)
            body = BoolV(x, BOOL) if elem_sort == z3.BoolSort() else IntV(x, INT)
            key = f"{f}(Seq[{'Bool' if elem_sort == z3.BoolSort() else 'Int'}])"
        if f == "all":
            fn = _recfold(key, f, x, _truth(body), z3.BoolSort())
            return BoolV(fn(seq.t), BOOL)
        value = _numeric(body)
        if not isinstance(value, IntV):
            raise _Unsupported("a fold over floats")
        fn = _recfold(key, f, x, value.t, z3.IntSort())
        if f in ("sum", "prod"):
            return IntV(fn(seq.t), INT)
        nonempty = z3.Length(seq.t) > 0
        if default is None:
            self._require(e, nonempty)
            return IntV(fn(seq.t), INT)
        return IntV(z3.If(nonempty, fn(seq.t), default), INT)

    def _extreme(self, e: Call, f: str, nums: list, default: z3.ArithRef | None) -> z3.ArithRef:
        nonempty = z3.BoolVal(False) if not nums else (nums[0][1] if nums[0][1] is not None
                                                       else z3.BoolVal(True))
        if default is None:
            self._require(e, nonempty)
        if not nums:
            return default if default is not None else z3.IntVal(0)
        acc = nums[0][0]
        for v, c in nums[1:]:
            better = v > acc if f == "max" else v < acc
            step = z3.If(better, v, acc)
            acc = step if c is None else z3.If(c, step, acc)
        return acc if default is None else z3.If(nonempty, acc, default)

    def _apply(self, prim: Primitive, e: Call) -> _Val:
        """An uninterpreted application of `prim`, recorded for refinement, with the
        primitive's fact (see `_FACTS`) in `side` under the application's guard."""
        bound = self._bind(prim, e)
        args = [(k, v) for k, _, v in bound]
        kinds = [v.kind for _, v in args]
        try:
            rkind = prim.result_kind(kinds)
        except Exception:  # a kind function that cannot read these kinds
            rkind = ValueK()
        sig = ", ".join((f"{k}=" if k else "") + v.sig() for k, v in args)
        name = f"{prim.name}({sig})"
        leaves = [x for _, v in args for x in v.leaves()]
        result = self._build(rkind, "", _uf_leaf(name, leaves), facts=False)
        fact_of = _FACTS.get(prim.name) if self.exact else None
        if fact_of is not None:
            named = [v for _, _, v in bound] if prim.variadic else \
                {p.name: v for _, p, v in bound}
            try:
                fact = fact_of(named, result)
            except _Unsupported:
                fact = None
            if fact is not None:
                self._facts.append(fact if self._guard is None else
                                   z3.Implies(self._guard, fact))
        return self._record(prim.name, e, args, leaves, result, _call_primitive(prim))

    def _bind(self, prim: Primitive, e: Call) -> list[tuple[str | None, Param, _Val]]:
        """The written arguments in order: (keyword or None, parameter, value)."""
        positional = [p for p in prim.params if not p.keyword_only]
        by_name = {p.name: p for p in prim.params}
        out: list[tuple[str | None, Param, _Val]] = []
        written = [(None, a) for a in e.args] + list(e.kwargs)
        for i, (key, node) in enumerate(written):
            if key is None:
                param = positional[0] if prim.variadic else (
                    positional[i] if i < len(positional) else None)
            else:
                param = by_name.get(key)
            if param is None:
                raise EncodeError(f"{_show(e)}: {prim.name} takes no such argument")
            v = self._enc(node)
            if isinstance(unwrap_maybe(param.kind), DTypeK):
                v = _as_dtype(v)
            out.append((key, param, v))
        return out

    def _abstract(self, node: Expr, kind: Kind) -> _Val:
        """`node` as an uninterpreted function of its free names, confirmed by evaluating
        the node concretely."""
        names = sorted(n for n in free_names(node)
                       if n != "inf" or n in self._scope or n in self.kinds)
        args = [(n, self._lookup(n)) for n in names]
        text = _show(node)
        sig = ", ".join(f"{n}: {v.sig()}" for n, v in args)
        leaves = [x for _, v in args for x in v.leaves()]
        result = self._build(kind, "", _uf_leaf(f"<{text}>({sig})", leaves), facts=False)
        return self._record(text, node, args, leaves, result, _call_evaluate(node))

    def _record(self, label: str, node: Expr, args, leaves, result: _Val, run) -> _Val:
        self._apps.append(_App(label, args, leaves, result, self._guard, run))
        self.applications.append(Application(label, tuple(leaves), result.raw(), node))
        self.abstracted.append((_show(node), result.raw()))
        return result

    # -- models ----------------------------------------------------------------------------

    def values(self, model: z3.ModelRef) -> dict[str, Any]:
        """Every variable created, as plain Python data (names without the copy suffix)."""
        out: dict[str, Any] = {}
        for name, val in self._vars.items():
            if isinstance(val, ADTV):
                continue  # its constructor and fields are variables of their own
            try:
                out[name] = _plain(val.py(model))
            except _Unconfirmable:  # an opaque value: Z3's name for it
                out[name] = str(model.eval(val.leaves()[0], model_completion=True))
        return out

    def refine(self, model: z3.ModelRef) -> list[z3.BoolRef]:
        """Lemmas that the model violates; empty when every evaluated uninterpreted
        application agrees with the concrete semantics (or could not be checked: see
        `confirm`)."""
        return self.confirm(model)[0]

    def confirm(self, model: z3.ModelRef) -> tuple[list[z3.BoolRef], list[str]]:
        """(lemmas, unconfirmable): the lemmas of `refine`, and why some applications could
        not be checked at all (an opaque argument); a model is genuine only when both are
        empty."""
        lemmas: list[z3.BoolRef] = []
        unconfirmable: list[str] = []
        for app in self._apps:
            if app.guard is not None and \
                    not z3.is_true(model.eval(app.guard, model_completion=True)):
                continue  # not evaluated in this model: its value does not matter
            try:
                pyargs = [(k, v.py(model)) for k, v in app.args]
            except _Unconfirmable as exc:
                unconfirmable.append(f"{app.label}: {exc}")
                continue
            at = _and([x == model.eval(x, model_completion=True) for x in app.leaves])
            try:
                concrete = to_tuple(app.run(pyargs))
            except Exception:  # noqa: BLE001 - as the evaluator, any failure is a raise
                # The expression raises here: these arguments are outside the domain.
                lemmas.append(z3.Not(_conj(app.guard, at)))
                continue
            try:
                if _same(app.result.py(model), concrete):
                    continue
                lemmas.append(z3.Implies(at, app.result.pin(concrete)))
            except _Unconfirmable as exc:
                unconfirmable.append(f"{app.label}: {exc}")
        return lemmas, unconfirmable


def _plain(value: Any) -> Any:
    """Model values as plain data: tuples for sequences, a dict for an ADT value."""
    if isinstance(value, ADTValue):
        return {"kind": value.ctor, **{k: _plain(v) for k, v in value.fields}}
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def _same(a: Any, b: Any) -> bool:
    """Python equality that also tells a bool from an int, inside tuples too."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b  # NaN is NaN
    return a == b


def _compare(op: str, a: _Val, b: _Val) -> z3.BoolRef:
    if op == "==":
        return _eq(a, b)
    if op == "!=":
        return z3.Not(_eq(a, b))
    if op in ("<", "<="):
        return _lt(a, b, op == "<")
    if op in (">", ">="):
        return _lt(b, a, op == ">")
    if op in ("in", "not in"):
        holds = _contains(b, a)
        return holds if op == "in" else z3.Not(holds)
    raise EncodeError(f"{op} is not a comparison")


def _contains(container: _Val, x: _Val) -> z3.BoolRef:
    if isinstance(container, TupleV):
        return _or([_eq(x, e) for e in container.elts])
    if isinstance(container, SeqV):
        if isinstance(x, (IntV, BoolV)) and container.elem_sort == z3.IntSort():
            return z3.Contains(container.t, z3.Unit(_numeric(x).t))
        if isinstance(x, BoolV) and container.elem_sort == z3.BoolSort():
            return z3.Contains(container.t, z3.Unit(x.t))
        items = _items(container)
        if items is not None:
            return _or([_eq(x, v) if c is None else z3.And(c, _eq(x, v)) for v, c in items])
    raise _Unsupported(f"membership in a {container.sig()}")


def _floordiv(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """Python's `a // b`. SMT-LIB `div` is Euclidean; it is the floor for a positive
    divisor, and `a // b == (-a) // (-b)`; a constant divisor picks its case statically."""
    if _is_const_int(b):
        c = b.as_long()
        return a / c if c > 0 else (-a) / (-c) if c < 0 else a / b
    return z3.If(b > 0, a / b, (-a) / (-b))


def _float_arith(op: str, a: FloatV, b: FloatV) -> FloatV:
    """IEEE `+ - *` on extended reals (exact reals, no rounding)."""
    if op == "-":
        b = FloatV(z3.If(b.k == _NAN, _NAN, -b.k), -b.r)
    finite = z3.And(a.k == 0, b.k == 0)
    nan = z3.Or(a.k == _NAN, b.k == _NAN)
    if op in ("+", "-"):
        # inf + finite = inf; inf + inf = inf; inf - inf = NaN.
        k = z3.If(nan, _NAN, z3.If(a.k == 0, b.k, z3.If(z3.Or(b.k == 0, b.k == a.k), a.k,
                                                        _NAN)))
        return FloatV(z3.If(finite, 0, k), z3.If(finite, a.r + b.r, 0))

    def sign(v: FloatV) -> z3.ArithRef:
        return z3.If(v.k != 0, v.k, z3.If(v.r > 0, 1, z3.If(v.r < 0, -1, 0)))

    # inf * 0 = NaN; inf * x = the inf of the product's sign.
    k = z3.If(z3.Or(nan, sign(a) == 0, sign(b) == 0), _NAN, sign(a) * sign(b))
    return FloatV(z3.If(finite, 0, k), z3.If(finite, a.r * b.r, 0))


def _sum(xs: list[z3.ArithRef]) -> z3.ArithRef:
    return z3.IntVal(0) if not xs else xs[0] if len(xs) == 1 else z3.Sum(*xs)


def _prod(xs: list[z3.ArithRef]) -> z3.ArithRef:
    return z3.IntVal(1) if not xs else xs[0] if len(xs) == 1 else z3.Product(*xs)


def _show(node: Any) -> str:
    try:
        return print_expr(node)
    except Exception:  # a printer gap must not hide the real message
        return repr(node)


_ARITH = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}

_HANDLERS: dict[type, Callable[[Encoder, Any], _Val]] = {
    Const: Encoder._const, Name: Encoder._name, Attr: Encoder._attr,
    TupleExpr: Encoder._tuple, UnaryOp: Encoder._unary, BinOp: Encoder._binop,
    BoolOp: Encoder._boolop, Compare: Encoder._compare, IfExp: Encoder._ifexp,
    Subscript: Encoder._subscript, Call: Encoder._call,
}


# ----------------------------------------------------------------------------- solving


def solve(solver: z3.Solver, encoders: "Encoder | Sequence[Encoder]", max_rounds: int = 8
          ) -> tuple[Verdict, z3.ModelRef | None, str | None]:
    """Check, confirm the model with every encoder, add the lemmas, check again.

    SAT comes only with a model every encoder confirmed; UNSAT is Z3's proof (the lemmas
    are facts of the primitives, so they exclude no genuine model); UNKNOWN carries the
    reason: Z3's, an application that cannot be checked, or the rounds running out. The
    lemmas stay on `solver`.
    """
    encs = [encoders] if isinstance(encoders, Encoder) else list(encoders)
    for _ in range(max_rounds):
        verdict, reason = check(solver)
        if verdict is not Verdict.SAT:
            return verdict, None, reason
        model = solver.model()
        lemmas: list[z3.BoolRef] = []
        unconfirmable: list[str] = []
        for enc in encs:
            more, bad = enc.confirm(model)
            lemmas += more
            unconfirmable += bad
        if unconfirmable:
            return Verdict.UNKNOWN, None, "cannot confirm the model: " + "; ".join(unconfirmable)
        if not lemmas:
            return Verdict.SAT, model, None
        solver.add(*lemmas)
    return Verdict.UNKNOWN, None, f"no confirmed model after {max_rounds} refinement rounds"
