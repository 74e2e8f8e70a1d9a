"""Hypothesis strategies for the expression language, and the corpus walker, shared by tests.

`expressions()` draws ASTs that the parser can produce: every node type, bounded depth, none
of the rejected forms (no `.shape`, no comparison with None, no `isinstance`), numeric
constants non-negative (the parser never folds `-3`), generators only as the sole argument of
all, sum, max or min. Import with the tests directory on `sys.path` (pytest runs with
`--import-mode=importlib`, which does not put it there):

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from strategies import expressions

`corpus_strings()` yields every expression-bearing string of the stored spec corpus.
"""

from __future__ import annotations

import keyword
import math
from pathlib import Path

from hypothesis import strategies as st

from opspec.schema.expr import (Attr, BinOp, BoolOp, Call, Compare, Const, FamilyApp, GenExp,
                                IfExp, Name, ShapeList, Slice, Splat, Subscript, TupleExpr,
                                UnaryOp, BINOPS, CMPOPS, children)

# Names the printer must print as they are: Python keywords and the three constant names are
# not names; `shape` as an attribute and `isinstance` as a call are rejected forms.
_RESERVED = set(keyword.kwlist) | {"shape", "isinstance"}

identifiers = st.one_of(
    st.sampled_from(["M", "N", "K", "S", "T", "S_kv", "dim", "inf", "layout", "x", "_", "n0"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
).filter(lambda s: s not in _RESERVED)

_FUNCS = st.one_of(
    st.sampled_from(["present", "len", "ceil_div", "per_axis", "broadcast", "pool.out",
                     "moe.capacity", "category"]),
    st.lists(identifiers, min_size=1, max_size=3).map(".".join),
)

constants = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=0, max_value=2 ** 63 - 1),
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)
    .filter(lambda f: math.copysign(1.0, f) > 0),
    st.text(max_size=8),
).map(Const)

leaves = st.one_of(constants, identifiers.map(Name))


def _compare_ok(c: Compare) -> bool:
    """No link `a == None` / `None != a`: that is a rejected form, not a comparison."""
    operands = (c.left, *c.comparators)
    return not any(op in ("==", "!=") and (_is_none(a) or _is_none(b))
                   for a, op, b in zip(operands, c.ops, operands[1:]))


def _is_none(e) -> bool:
    return isinstance(e, Const) and e.value is None


def _kwargs(sub):
    return st.dictionaries(identifiers, sub, max_size=2).map(lambda d: tuple(d.items()))


def _extend(sub):
    opt = st.none() | sub
    return st.one_of(
        st.builds(BinOp, st.sampled_from(BINOPS), sub, sub),
        st.builds(UnaryOp, st.sampled_from(["-", "not"]), sub),
        st.builds(BoolOp, st.sampled_from(["and", "or"]),
                  st.lists(sub, min_size=2, max_size=3).map(tuple)),
        st.integers(min_value=1, max_value=3).flatmap(lambda n: st.builds(
            Compare, sub, st.lists(st.sampled_from(CMPOPS), min_size=n, max_size=n).map(tuple),
            st.lists(sub, min_size=n, max_size=n).map(tuple))).filter(_compare_ok),
        st.builds(IfExp, sub, sub, sub),
        st.builds(Call, _FUNCS, st.lists(sub, max_size=3).map(tuple), _kwargs(sub)),
        st.builds(Call, st.sampled_from(["all", "sum", "max", "min"]),
                  st.builds(GenExp, sub, identifiers, sub).map(lambda g: (g,)), _kwargs(sub)),
        st.builds(Attr, sub, identifiers),
        st.builds(Subscript, sub, sub | st.builds(Slice, opt, opt, opt)),
        st.lists(sub, max_size=3).map(lambda xs: TupleExpr(tuple(xs))),
    )


def expressions(max_leaves: int = 12):
    """Random ASTs of the expression language (depth bounded through `max_leaves`)."""
    return st.recursive(leaves, _extend, max_leaves=max_leaves)


def shape_terms(max_leaves: int = 8):
    """Random shape terms: axis lists with splats, and family applications."""
    exprs = expressions(max_leaves)
    axes = st.one_of(exprs, exprs.map(Splat))
    return st.one_of(
        st.lists(axes, max_size=4).map(lambda xs: ShapeList(tuple(xs))),
        st.builds(FamilyApp, identifiers, st.lists(exprs, max_size=3).map(tuple)),
    )


def structure(node) -> tuple:
    """A node as nested tuples that also tell `True`, `1` and `1.0` apart (`==` does not)."""
    if isinstance(node, Const):
        return ("Const", type(node.value).__name__, node.value)
    if isinstance(node, ShapeList):
        return ("ShapeList", tuple(structure(a) for a in node.axes))
    if isinstance(node, FamilyApp):
        return ("FamilyApp", node.family, tuple(structure(a) for a in node.args))
    scalars = tuple(getattr(node, f) for f in ("id", "attr", "op", "ops", "func", "var")
                    if hasattr(node, f))
    if isinstance(node, Call):
        scalars += tuple(k for k, _ in node.kwargs)
    if isinstance(node, Slice):  # which of the three parts are present
        scalars += tuple(p is None for p in (node.lower, node.upper, node.step))
    return (type(node).__name__, scalars, tuple(structure(c) for c in children(node)))


# -- the real corpus ---------------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def corpus_strings():
    """(where, text, is_shape) for every expression-bearing string of the spec files."""
    from opspec.schema.yaml_source import load_yaml  # the project's own reader, no PyYAML

    for path in sorted((CORPUS / "tileops" / "spec").glob("*.yaml")):
        for op, entry in (load_yaml(path.read_text(), str(path))[0] or {}).items():
            if not isinstance(entry, dict):
                continue
            where = f"{path.name}:{op}"
            sig = entry.get("signature") or {}
            for group in ("inputs", "outputs"):
                for name, tensor in (sig.get(group) or {}).items():
                    for key in ("shape", "dtype", "optional", "mutated", "nullable", "values"):
                        if isinstance(tensor.get(key), str):
                            yield f"{where}.{name}.{key}", tensor[key], key == "shape"
                    for req in tensor.get("requires") or ():
                        yield f"{where}.{name}.requires", req, False
            for name, value in (sig.get("let") or {}).items():
                yield f"{where}.let.{name}", value, False
            for rule in sig.get("shape_rules") or ():
                yield f"{where}.shape_rules", rule, False
            for fam, decl in (sig.get("types") or {}).items():
                for case in decl.get("cases") or ():
                    yield f"{where}.types.{fam}", case["is"], True
            roofline = entry.get("roofline") or {}
            for key in ("flops", "bytes"):
                if isinstance(roofline.get(key), str):
                    yield f"{where}.roofline.{key}", roofline[key], False
