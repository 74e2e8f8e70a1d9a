"""Whether a YAML value is a value of a kind: a parameter's default, a workload row's value.

Used where values are written in a spec rather than computed: the elaborator checks each
parameter's `default` against its `type`, the workload pass each value a row gives. A value
is plain YAML data (ints, floats, bools, strings, lists, mappings, null); an ADT value is
written `{constructor: {field: value, ...}}`.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import kinds as K
from .values import ADTValue, is_int
from .yaml_source import resolve_plain

#: Opaque kinds of parameter types whose values a spec can still check: a `float` or
#: `Number` is a number, a `dict` a mapping. Others (`torch.Tensor`) are taken as written.
_NUMBER_TAGS = frozenset({"float", "Number"})


def show_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        if len(v) > 8:
            return "[" + ", ".join(show_value(x) for x in v[:8]) + f", ... ({len(v)} items)]"
        return "[" + ", ".join(show_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {show_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, str) and not isinstance(resolve_plain(v), str):
        return repr(v)  # a quoted '4' in the row: shown quoted, not as the number
    return str(v)


def yaml_data(v: Any) -> Any:
    """An ADT value as the YAML data that writes it; other values as they are."""
    if isinstance(v, ADTValue):
        return {v.ctor: {k: yaml_data(x) for k, x in v.fields}}
    if isinstance(v, dict):
        return {str(k): yaml_data(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [yaml_data(x) for x in v]
    return v


def _opaque_error(v: Any, kind: K.ValueK) -> str | None:
    if kind.tag in _NUMBER_TAGS:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{show_value(v)} is not a number"
        return None
    if kind.tag == "dict" and not isinstance(v, dict):
        return f"{show_value(v)} is not a mapping"
    return None


def value_error(v: Any, kind: K.Kind, adts: Mapping[str, Any]) -> str | None:
    """Why the YAML value `v` is not a value of `kind`, or None when it is. `adts` maps
    ADT names to their elaborated declarations (their constructors and fields)."""
    if isinstance(kind, K.ValueK):
        return _opaque_error(v, kind)
    if isinstance(kind, K.MaybeK):
        return None if v is None else value_error(v, kind.inner, adts)
    if isinstance(kind, K.NoneK):
        return None if v is None else f"{show_value(v)} is not None"
    if v is None:
        return f"null is not a value of {kind}"
    if isinstance(kind, K.UnionK):
        errors = [value_error(v, m, adts) for m in kind.members]
        return None if any(e is None for e in errors) else f"{show_value(v)} is not a value of {kind}"
    if isinstance(kind, K.BoolK):
        return None if isinstance(v, bool) else f"{show_value(v)} is not a bool"
    if isinstance(kind, K.IntK):
        if not is_int(v):
            return f"{show_value(v)} is not an int"
        if kind.nonneg and v < 0:
            return f"{v} is negative, but a Dim is >= 0"
        return None
    if isinstance(kind, K.StrK):
        if not isinstance(v, str):
            return f"{show_value(v)} is not a string"
        if kind.literals is not None and v not in kind.literals:
            return f"{v} is not one of {', '.join(sorted(kind.literals))}"
        return None
    if isinstance(kind, K.DTypeK):
        allowed = kind.members if kind.members is not None else frozenset(K.DTYPES)
        if not isinstance(v, str) or v not in allowed:
            return f"{show_value(v)} is not one of the dtypes {', '.join(sorted(allowed))}"
        return None
    if isinstance(kind, K.SeqK):
        if not isinstance(v, (list, tuple)):
            return f"{show_value(v)} is not a list"
        if kind.length is not None and len(v) != kind.length:
            return f"{show_value(v)} has {len(v)} items, expected {kind.length}"
        for x in v:
            e = value_error(x, kind.elem, adts)
            if e is not None:
                return f"item {e}"
        return None
    if isinstance(kind, K.ADTK):
        adt = adts.get(kind.name)
        if adt is None:
            return None
        if isinstance(v, ADTValue):
            v = yaml_data(v)
        if not isinstance(v, dict) or len(v) != 1:
            return (f"{show_value(v)} is not a value of {kind.name}; write "
                    "`{constructor: {field: value, ...}}`")
        (ctor, fields), = v.items()
        if ctor not in adt.ctors:
            return f"{kind.name} has no constructor `{ctor}`; it has {', '.join(sorted(adt.ctors))}"
        fields = {} if fields in (None, "_") else fields
        if not isinstance(fields, dict):
            return f"the fields of `{ctor}` are not a mapping: {show_value(fields)}"
        want = adt.ctors[ctor].fields
        missing = [f for f in want if f not in fields]
        extra = [f for f in fields if f not in want]
        if missing or extra:
            return (f"{kind.name}.{ctor} has the fields {', '.join(want) or 'none'}; "
                    + (f"missing {', '.join(missing)}" if missing else "")
                    + ("; " if missing and extra else "")
                    + (f"unknown {', '.join(map(str, extra))}" if extra else ""))
        for f, fk in want.items():
            e = value_error(fields[f], fk, adts)
            if e is not None:
                return f"field `{f}` of {kind.name}.{ctor}: {e}"
        return None
    return None
