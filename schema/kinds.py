"""Kinds: the sorts of type indices, parameters and expressions.

`Dim` is a non-negative `Int`; `Shape` is `Seq[Dim]`; an enum is `Str` with a literal set;
`DType[a | b]` is `DType` with a member set. Kinds are frozen values and print back to the
spelling a spec uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

#: Every dtype name the language knows, with its size in bits and its category.
DTYPES: dict[str, tuple[int, str]] = {
    "bool": (8, "bool"),
    "uint8": (8, "int"), "int8": (8, "int"), "int16": (16, "int"), "int32": (32, "int"),
    "int64": (64, "int"), "uint16": (16, "int"), "uint32": (32, "int"), "uint64": (64, "int"),
    "float16": (16, "float"), "bfloat16": (16, "float"), "float32": (32, "float"),
    "float64": (64, "float"),
    "float8_e4m3fn": (8, "float"), "float8_e4m3": (8, "float"), "float8_e5m2": (8, "float"),
    "float8_e4m3fnuz": (8, "float"), "float8_e5m2fnuz": (8, "float"),
    "complex64": (64, "complex"), "complex128": (128, "complex"),
}


@dataclass(frozen=True)
class IntK:
    nonneg: bool = False

    def __str__(self) -> str:
        return "Dim" if self.nonneg else "Int"


@dataclass(frozen=True)
class BoolK:
    def __str__(self) -> str:
        return "Bool"


@dataclass(frozen=True)
class StrK:
    """A string; with `literals` it is an enum of those values."""

    literals: frozenset[str] | None = None

    def __str__(self) -> str:
        if self.literals is None:
            return "Str"
        return " | ".join(f"'{x}'" for x in sorted(self.literals))


@dataclass(frozen=True)
class DTypeK:
    members: frozenset[str] | None = None

    def __str__(self) -> str:
        if self.members is None:
            return "DType"
        return "DType[" + " | ".join(sorted(self.members)) + "]"


@dataclass(frozen=True)
class SeqK:
    elem: "Kind"
    length: int | None = None

    def __str__(self) -> str:
        if self.elem == IntK(True) and self.length is None:
            return "Shape"
        if self.length is not None:
            return f"Seq[{self.elem}; {self.length}]"
        return f"Seq[{self.elem}]"


@dataclass(frozen=True)
class MaybeK:
    inner: "Kind"

    def __str__(self) -> str:
        return f"Maybe[{self.inner}]"


@dataclass(frozen=True)
class UnionK:
    """A union that is not a plain Maybe, e.g. `int | tuple[int, int]`."""

    members: tuple["Kind", ...]

    def __str__(self) -> str:
        return " | ".join(str(m) for m in self.members)


@dataclass(frozen=True)
class ADTK:
    name: str
    #: constructors still possible here (narrowed by patterns or `x.kind == 'c'`); None = all
    ctors: frozenset[str] | None = None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class NoneK:
    def __str__(self) -> str:
        return "None"


@dataclass(frozen=True)
class ValueK:
    """An opaque value: floats, numbers, objects. Arithmetic on it is not kind-checked."""

    tag: str = "Value"

    def __str__(self) -> str:
        return self.tag


@dataclass(frozen=True)
class TensorK:
    """The kind of a tensor name (only `present()` and `bytes()` take one)."""

    def __str__(self) -> str:
        return "Tensor"


Kind = Union[IntK, BoolK, StrK, DTypeK, SeqK, MaybeK, UnionK, ADTK, NoneK, ValueK, TensorK]

INT = IntK(False)
DIM = IntK(True)
BOOL = BoolK()
STR = StrK()
DTYPE = DTypeK()
SHAPE = SeqK(DIM)
SEQ_INT = SeqK(INT)
NONE = NoneK()
VALUE = ValueK()
FLOAT = ValueK("float")
TENSOR = TensorK()
AXES = UnionK((INT, SEQ_INT, NONE))


def is_int(k: Kind) -> bool:
    return isinstance(k, IntK)


def is_finite(k: Kind) -> bool:
    """True for kinds with finitely many values (discriminants)."""
    if isinstance(k, BoolK):
        return True
    if isinstance(k, StrK):
        return k.literals is not None
    if isinstance(k, DTypeK):
        return True
    if isinstance(k, ADTK):
        return True
    if isinstance(k, MaybeK):
        return is_finite(k.inner)
    return False


def unwrap_maybe(k: Kind) -> Kind:
    return k.inner if isinstance(k, MaybeK) else k


def may_be_sequence(k: Kind) -> bool:
    """Whether `k` is an opaque kind whose values may be sequences (checked when evaluated):
    any but a float, which never is."""
    return isinstance(k, ValueK) and k != FLOAT


def assignable(actual: Kind, expected: Kind) -> bool:
    """Whether a value of kind `actual` may be used where `expected` is required."""
    if isinstance(expected, SeqK) and isinstance(actual, ValueK):
        return may_be_sequence(actual)
    if isinstance(expected, ValueK) or isinstance(actual, ValueK):
        return True
    if actual == expected:
        return True
    if isinstance(actual, UnionK):
        return all(assignable(m, expected) for m in actual.members)
    if isinstance(expected, UnionK):
        return any(assignable(actual, m) for m in expected.members)
    if isinstance(expected, MaybeK):
        return isinstance(actual, NoneK) or assignable(unwrap_maybe(actual), expected.inner)
    if isinstance(expected, IntK):
        return isinstance(actual, IntK) and (actual.nonneg or not expected.nonneg)
    if isinstance(expected, StrK):
        if not isinstance(actual, StrK):
            return False
        if expected.literals is None:
            return True
        return actual.literals is not None and actual.literals <= expected.literals
    if isinstance(expected, DTypeK):
        if not isinstance(actual, DTypeK):
            return False
        if expected.members is None:
            return True
        return actual.members is not None and actual.members <= expected.members
    if isinstance(expected, SeqK):
        if not isinstance(actual, SeqK):
            return False
        if expected.length is not None and actual.length != expected.length:
            return False
        return assignable(actual.elem, expected.elem)
    if isinstance(expected, ADTK):
        return isinstance(actual, ADTK) and actual.name == expected.name
    return False


def join(a: Kind, b: Kind) -> Kind | None:
    """The least kind that holds both `a` and `b` (conditional arms); None if none."""
    if a == b:
        return a
    if isinstance(a, ValueK):
        return a
    if isinstance(b, ValueK):
        return b
    if isinstance(a, NoneK):
        return b if isinstance(b, MaybeK) else MaybeK(b)
    if isinstance(b, NoneK):
        return a if isinstance(a, MaybeK) else MaybeK(a)
    if isinstance(a, MaybeK) or isinstance(b, MaybeK):
        inner = join(unwrap_maybe(a), unwrap_maybe(b))
        return None if inner is None else MaybeK(inner)
    if isinstance(a, IntK) and isinstance(b, IntK):
        return IntK(a.nonneg and b.nonneg)
    if isinstance(a, StrK) and isinstance(b, StrK):
        if a.literals is None or b.literals is None:
            return STR
        return StrK(a.literals | b.literals)
    if isinstance(a, DTypeK) and isinstance(b, DTypeK):
        if a.members is None or b.members is None:
            return DTYPE
        return DTypeK(a.members | b.members)
    if isinstance(a, SeqK) and isinstance(b, SeqK):
        elem = join(a.elem, b.elem)
        if elem is None:
            return None
        return SeqK(elem, a.length if a.length == b.length else None)
    if isinstance(a, ADTK) and isinstance(b, ADTK) and a.name == b.name:
        if a.ctors is None or b.ctors is None:
            return ADTK(a.name)
        return ADTK(a.name, a.ctors | b.ctors)
    return None
