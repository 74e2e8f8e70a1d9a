"""Lowering of expression ASTs to Python source for the generated checks.

The source uses only local names the code generator binds (`i_<name>` for indices and lets,
`p_<name>` for parameters), helper functions from a fixed namespace (`_prim_*` for the
primitives, `_field`, `_kind`), and literals written with `repr`. Spec text is never pasted
into the source: every identifier comes from the parsed AST (the parser admits only Python
identifiers), and every constant is a Python literal printed by `repr`.
"""

from __future__ import annotations

from typing import Callable

from opspec.schema.expr import (
    Attr, BinOp, BoolOp, Call, Compare, Const, Expr, GenExp, IfExp, Name, Slice, Subscript,
    TupleExpr, UnaryOp,
)
from opspec.schema.primitives import PRIMITIVES

_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "//": 6, "%": 6,
         "neg": 7, "atom": 9, "if": 0}


def prim_name(func: str) -> str:
    """The namespace key of a primitive's evaluator: `pool.out` -> `_prim_pool_out`."""
    return "_prim_" + func.replace(".", "_")


def primitive_namespace() -> dict[str, Callable]:
    return {prim_name(n): p.evaluate for n, p in PRIMITIVES.items() if p.evaluate is not None}


class Lowering:
    """`Lowering(name_of).py(expr)` -> Python source; `name_of(name)` maps a spec name to
    its local variable (or raises KeyError for a name that is not bound here)."""

    def __init__(self, name_of: Callable[[str], str]):
        self.name_of = name_of

    def py(self, e: Expr) -> str:
        return self._py(e, {})[0]

    def _py(self, e, loops: dict[str, str]) -> tuple[str, int]:
        if isinstance(e, Const):
            v = e.value
            if isinstance(v, float) and v in (float("inf"), float("-inf")):
                return ("_INF" if v > 0 else "(-_INF)"), _PREC["atom"]
            return repr(v), _PREC["atom"] if not (isinstance(v, (int, float)) and v < 0) else _PREC["neg"]
        if isinstance(e, Name):
            if e.id in loops:
                return loops[e.id], _PREC["atom"]
            try:
                return self.name_of(e.id), _PREC["atom"]
            except KeyError:
                if e.id == "inf":
                    return "_INF", _PREC["atom"]
                raise
        if isinstance(e, Attr):
            base = self._wrap(e.value, loops, _PREC["atom"])
            if e.attr == "value":
                return base, _PREC["atom"]  # a present Maybe's payload is the value itself
            if e.attr == "kind":
                return f"_kind({base})", _PREC["atom"]
            return f"_field({base}, {e.attr!r})", _PREC["atom"]
        if isinstance(e, Subscript):
            base = self._wrap(e.value, loops, _PREC["atom"])
            if isinstance(e.index, Slice):
                parts = [self._py(p, loops)[0] if p is not None else "" for p in
                         (e.index.lower, e.index.upper)]
                step = f":{self._py(e.index.step, loops)[0]}" if e.index.step is not None else ""
                return f"tuple({base})[{parts[0]}:{parts[1]}{step}]", _PREC["atom"]
            return f"{base}[{self._py(e.index, loops)[0]}]", _PREC["atom"]
        if isinstance(e, TupleExpr):
            items = [self._py(x, loops)[0] for x in e.elts]
            if len(items) == 1:
                return f"({items[0]},)", _PREC["atom"]
            return "(" + ", ".join(items) + ")", _PREC["atom"]
        if isinstance(e, UnaryOp):
            if e.op == "not":
                return f"not {self._wrap(e.operand, loops, _PREC['not'])}", _PREC["not"]
            return f"-{self._wrap(e.operand, loops, _PREC['neg'])}", _PREC["neg"]
        if isinstance(e, BinOp):
            p = _PREC[e.op]
            left = self._wrap(e.left, loops, p)
            right = self._wrap(e.right, loops, p + 1)
            return f"{left} {e.op} {right}", p
        if isinstance(e, BoolOp):
            p = _PREC[e.op]
            return f" {e.op} ".join(self._wrap(v, loops, p + 1) for v in e.values), p
        if isinstance(e, Compare):
            p = _PREC["cmp"]
            parts = [self._wrap(e.left, loops, p + 1)]
            for op, c in zip(e.ops, e.comparators):
                rhs = self._wrap(c, loops, p + 1)
                if op in ("==", "!=", "<", "<=", ">", ">="):
                    parts.append(f"{op} {rhs}")
                else:
                    parts.append(f"{op} {rhs}")
            return " ".join(parts), p
        if isinstance(e, IfExp):
            return (f"({self._py(e.body, loops)[0]} if {self._py(e.test, loops)[0]} "
                    f"else {self._py(e.orelse, loops)[0]})"), _PREC["atom"]
        if isinstance(e, Call):
            if e.func == "present":
                raise KeyError("present() survives only in code the prover did not fold")
            if e.func in ("all", "sum", "max", "min") and len(e.args) == 1 and \
                    isinstance(e.args[0], GenExp):
                g = e.args[0]
                var = f"_l_{g.var}_{len(loops)}"
                inner = {**loops, g.var: var}
                body = self._py(g.elt, inner)[0]
                it = self._py(g.iter, loops)[0]
                kw = "".join(f", {k}={self._py(v, loops)[0]}" for k, v in e.kwargs)
                return f"{prim_name(e.func)}([{body} for {var} in {it}]{kw})", _PREC["atom"]
            args = [self._py(a, loops)[0] for a in e.args]
            args += [f"{k}={self._py(v, loops)[0]}" for k, v in e.kwargs]
            return f"{prim_name(e.func)}({', '.join(args)})", _PREC["atom"]
        raise TypeError(f"cannot lower {type(e).__name__}")

    def _wrap(self, e, loops, need: int) -> str:
        s, p = self._py(e, loops)
        return s if p >= need else f"({s})"
