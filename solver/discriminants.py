"""Discriminants of a spec and the enumeration of their combinations.

A discriminant is a quantity with finitely many values that selects a family branch or
decides whether a tensor exists: Bool and enum parameters, the constructor and finite
fields of ADT parameters, the presence of Maybe parameters and of optional tensors, and
whether `out` is passed. `mutated`, `nullable` and expression-valued `optional` are
functions of these, so they are evaluated per combination rather than enumerated.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator

from opspec.schema import kinds as K
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.values import ADTValue

#: Above this many combinations a spec gets a `combos-limit` advisory (it is still checked).
COMBOS_LIMIT = 256


@dataclass(frozen=True)
class Discriminant:
    """`key` is what folding looks up: a parameter name, or `present(x)`."""

    key: str
    values: tuple[Any, ...]
    source: str  # declaration path

    def describe(self, v: Any) -> str:
        return describe_value(v)


def describe_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "None"
    if isinstance(v, ADTValue):
        if not v.fields:
            return f"{{{v.ctor}: ...}}"
        return f"{{{v.ctor}: {{" + ", ".join(f"{k}: {x}" for k, x in v.fields) + "}}"
    return str(v)


def discriminants(spec: ElaboratedSpec) -> list[Discriminant]:
    out: list[Discriminant] = []
    for name, p in spec.params.items():
        k = p.kind
        maybe = isinstance(k, K.MaybeK)
        inner = K.unwrap_maybe(k)
        vals: list[Any] | None = None
        if isinstance(inner, K.BoolK):
            vals = [False, True]
        elif isinstance(inner, K.StrK) and inner.literals is not None:
            vals = sorted(inner.literals)
        elif isinstance(inner, K.ADTK) and inner.name in spec.adts:
            vals = adt_values(spec, inner.name)
        if maybe:
            out.append(Discriminant(f"present({name})", (False, True), p.path))
        if vals is not None:
            out.append(Discriminant(name, tuple(vals), p.path))
    for t in list(spec.ctensors.values()) + list(spec.inputs.values()):
        if t.optional is True:
            out.append(Discriminant(f"present({t.name})", (False, True), t.path + ".optional"))
    if spec.has_out:
        path = next(t.path for t in spec.outputs.values() if t.buffer == "out")
        out.append(Discriminant("present(out)", (False, True), path + ".buffer"))
    return out


def adt_values(spec: ElaboratedSpec, adt: str) -> list[ADTValue]:
    """Every constructor with every combination of its finitely-valued fields."""
    info = spec.adts[adt]
    vals = []
    for cname in sorted(info.ctors):
        finite = info.finite_fields(cname)
        names = sorted(finite)
        domains = [_finite_values(finite[n]) for n in names]
        for combo in itertools.product(*domains):
            vals.append(ADTValue(adt, cname, tuple(zip(names, combo))))
    return vals


def _finite_values(k: K.Kind) -> list[Any]:
    inner = K.unwrap_maybe(k)
    if isinstance(inner, K.BoolK):
        vals: list[Any] = [False, True]
    elif isinstance(inner, K.StrK) and inner.literals is not None:
        vals = sorted(inner.literals)
    elif isinstance(inner, K.DTypeK):
        vals = sorted(inner.members or K.DTYPES)
    else:
        vals = []
    return ([None] + vals) if isinstance(k, K.MaybeK) else vals


def count(ds: list[Discriminant]) -> int:
    n = 1
    for d in ds:
        n *= len(d.values)
    return n


def combinations(ds: list[Discriminant]) -> Iterator[dict[str, Any]]:
    """Every assignment of values to the discriminants, in a fixed order.

    A Maybe parameter's value is enumerated only where it is present: where
    `present(p)` is false, `p` is None and its value combinations collapse into one.
    """
    # `present(p)` and `p` (adjacent in `discriminants`) are enumerated as one pair whose
    # absent value is (False, None): the plain product visited every payload value of an
    # absent `p` only to drop it as a duplicate, which for a few Maybe enums of hundreds of
    # literals was billions of skipped tuples before the next combination (a hang, however
    # few combinations the prover asks for). The order of the combinations is unchanged.
    groups: list[tuple[tuple[str, ...], list[tuple]]] = []
    i = 0
    while i < len(ds):
        d, nxt = ds[i], ds[i + 1] if i + 1 < len(ds) else None
        if nxt is not None and d.key == f"present({nxt.key})":
            pairs = [(pv, v) for pv in d.values for v in ((None,) if pv is False else nxt.values)]
            groups.append(((d.key, nxt.key), pairs))
            i += 2
        else:
            groups.append(((d.key,), [(v,) for v in d.values]))
            i += 1
    seen: set[tuple] = set()
    for values in itertools.product(*(g for _, g in groups)):
        combo = {k: v for (keys, _), vs in zip(groups, values) for k, v in zip(keys, vs)}
        for d in ds:
            if d.key.startswith("present(") and combo[d.key] is False:
                name = d.key[len("present("):-1]
                if name in combo:
                    combo[name] = None
        key = tuple(sorted((k, _hashable(v)) for k, v in combo.items()))
        if key in seen:
            continue
        seen.add(key)
        yield combo


def _hashable(v: Any) -> Any:
    return v if not isinstance(v, list) else tuple(v)
