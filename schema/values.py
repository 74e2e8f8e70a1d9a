"""Concrete values of the expression language, as the evaluator and the primitives see them.

Ints, bools, strs (enum values and dtype names alike, e.g. `'bfloat16'`), floats, tuples and
`None` (an absent `Maybe`) are plain Python values. An ADT value is an `ADTValue`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class ADTValue:
    """A value of a sum type: the ADT's name, its constructor and the field values.

    `fields` is a tuple of `(name, value)` pairs so that the value stays hashable and
    frozen. `layout.kind` gives the constructor; `layout.max_m` (or `field('max_m')`) a field.
    """

    adt: str
    ctor: str
    fields: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, adt: str, ctor: str, fields: Mapping[str, Any] | None = None) -> "ADTValue":
        """Build from a mapping of field values (lists become tuples)."""
        return cls(adt, ctor, tuple((k, to_tuple(v)) for k, v in (fields or {}).items()))

    @property
    def kind(self) -> str:
        return self.ctor

    def has(self, name: str) -> bool:
        return any(k == name for k, _ in self.fields)

    def field(self, name: str) -> Any:
        for k, v in self.fields:
            if k == name:
                return v
        raise AttributeError(f"constructor '{self.ctor}' of {self.adt} has no field '{name}'")

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails, so dataclass internals never land here;
        # dunder and private names must stay AttributeErrors for copy/pickle probing.
        if name.startswith("_"):
            raise AttributeError(name)
        return self.field(name)

    def __str__(self) -> str:
        inner = ", ".join(f"{k}: {v}" for k, v in self.fields)
        return f"{{{self.ctor}: {{{inner}}}}}"


def to_tuple(value: Any) -> Any:
    """`value` with every nested list (and tuple) turned into a tuple; other values as is."""
    if isinstance(value, (list, tuple)):
        return tuple(to_tuple(v) for v in value)
    return value


def is_int(value: Any) -> bool:
    """A Python int that is not a bool (bool is an int subclass, but not an Int value)."""
    return isinstance(value, int) and not isinstance(value, bool)


def field_of(obj: Any, name: str) -> Any:
    """Field `name` of an ADT value, or attribute of a runtime object standing in for one.

    Runtime objects carry enum-valued fields (`ContiguousPacking.tight`); the language sees an
    enum field as its string, so an Enum's `.value` is taken.
    """
    if isinstance(obj, ADTValue):
        return obj.kind if name == "kind" else obj.field(name)
    value = getattr(obj, name)
    # An Enum member: compare by its string value, like a Str literal.
    enum_value = getattr(type(value), "_value2member_map_", None)
    return value.value if enum_value is not None else value
