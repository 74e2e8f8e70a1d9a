"""Print expression ASTs back to canonical text.

`parse_expr(print_expr(e)) == e` for every AST the parser can produce, and the printed text is
a fixpoint: printing its parse gives it back. Parentheses are minimal under Python's
precedence (`if`-`else` < `or` < `and` < `not` < comparisons < `+ -` < `* // %` < unary `-` <
call, subscript, attribute), with left-associative binary operators (`a - (b - c)`) and
comparison chains (`a < b < c` is one `Compare`; a nested comparison prints in parentheses).

Canonical choices:

- Negative numbers. The parser never folds `-3` into a constant, so a numeric `Const` with a
  negative value (built by a caller, e.g. a folder) prints as unary minus of its magnitude,
  `-3`, with unary-minus precedence (`x * -3`, `(-3).real`); it parses back as
  `UnaryOp('-', Const(3))`, the same value but not the same node. Every other AST round-trips
  exactly.
- A float prints by `repr` (round-trips exactly); an infinite one prints as the name `inf`
  (the language's infinity); NaN cannot be printed.
- Strings print in single quotes with Python's escapes.
- Tuples always carry parentheses, `()`, `(x,)`, `(a, b)`, except as a subscript index with two
  or more items, `x[a, b]`.
- Minus of a minus prints as `-(-x)`, not `--x`.
- A generator prints bare as the sole argument of a call without keywords (`all(p for p in s)`),
  and in parentheses anywhere else.
"""

from __future__ import annotations

import math

from opspec.schema.expr import (Attr, BinOp, BoolOp, Call, Compare, Const, Expr, FamilyApp,
                                GenExp, IfExp, Name, ShapeList, ShapeTerm, Slice, Splat,
                                Subscript, TupleExpr, UnaryOp)

# Precedence levels, loosest first.
_IFEXP, _OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY, _ATOM = range(1, 10)

_BINOP_PREC = {"+": _ADD, "-": _ADD, "*": _MUL, "//": _MUL, "%": _MUL}


def print_expr(e: Expr) -> str:
    """The canonical text of an expression."""
    return _fmt(e)[0]


def print_shape(t: ShapeTerm) -> str:
    """The canonical text of a shape term."""
    if isinstance(t, ShapeList):
        # A splat's operand is a `bitwise_or` in Python's grammar: arithmetic binds, `<` does not.
        return "[" + ", ".join("*" + _sub(a.value, _ADD) if isinstance(a, Splat)
                               else _sub(a, _IFEXP) for a in t.axes) + "]"
    if isinstance(t, FamilyApp):
        return f"{t.family}[{_index_items(t.args)}]"
    raise TypeError(f"not a shape term: {t!r}")


def _sub(e: Expr, least: int) -> str:
    """`e` printed where its precedence must be at least `least`."""
    text, prec = _fmt(e)
    return f"({text})" if prec < least else text


def _fmt(e: Expr) -> tuple[str, int]:
    """The text of `e` and the precedence of its outermost operator."""
    if isinstance(e, Const):
        return _const(e.value)
    if isinstance(e, Name):
        return e.id, _ATOM
    if isinstance(e, Attr):
        value = e.value
        # `1.real` is a malformed number; an int or float needs parentheses before a dot.
        if isinstance(value, Const) and type(value.value) in (int, float):
            return f"({_fmt(value)[0]}).{e.attr}", _ATOM
        return f"{_sub(value, _ATOM)}.{e.attr}", _ATOM
    if isinstance(e, Subscript):
        index = e.index
        if isinstance(index, Slice):
            inner = _slice(index)
        elif isinstance(index, TupleExpr) and len(index.elts) >= 2:
            inner = _index_items(index.elts)
        else:
            inner = _sub(index, _IFEXP)
        return f"{_sub(e.value, _ATOM)}[{inner}]", _ATOM
    if isinstance(e, TupleExpr):
        items = [_sub(x, _IFEXP) for x in e.elts]
        return ("(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"), _ATOM
    if isinstance(e, UnaryOp):
        if e.op == "not":
            return "not " + _sub(e.operand, _NOT), _NOT
        inner = _sub(e.operand, _UNARY)
        return "-" + (f"({inner})" if inner.startswith("-") else inner), _UNARY
    if isinstance(e, BinOp):
        prec = _BINOP_PREC[e.op]
        return f"{_sub(e.left, prec)} {e.op} {_sub(e.right, prec + 1)}", prec
    if isinstance(e, BoolOp):
        prec = _OR if e.op == "or" else _AND
        return f" {e.op} ".join(_sub(v, prec + 1) for v in e.values), prec
    if isinstance(e, Compare):
        parts = [_sub(e.left, _ADD)]
        for op, c in zip(e.ops, e.comparators):
            parts += [op, _sub(c, _ADD)]
        return " ".join(parts), _CMP
    if isinstance(e, IfExp):
        return (f"{_sub(e.body, _OR)} if {_sub(e.test, _OR)} else {_sub(e.orelse, _IFEXP)}",
                _IFEXP)
    if isinstance(e, Call):
        return _call(e), _ATOM
    if isinstance(e, GenExp):
        return f"({_generator(e)})", _ATOM
    raise TypeError(f"not an expression node: {e!r}")


def _const(v: object) -> tuple[str, int]:
    if v is None or isinstance(v, bool):
        return repr(v), _ATOM
    if isinstance(v, str):
        # repr picks double quotes for a string with a `'` and no `"`; adding a `"` forces single
        # quotes (escaping any `'`), and the added character is cut off again.
        return repr(v + '"')[:-2] + "'", _ATOM
    if isinstance(v, int):
        return (str(v), _ATOM) if v >= 0 else ("-" + str(-v), _UNARY)
    if isinstance(v, float):
        if math.isnan(v):
            raise ValueError("NaN has no text in the expression language")
        text = "inf" if math.isinf(v) else repr(abs(v))
        return (text, _ATOM) if math.copysign(1.0, v) > 0 else ("-" + text, _UNARY)
    raise TypeError(f"not a literal of the expression language: {v!r}")


def _slice(s: Slice) -> str:
    def part(x: Expr | None) -> str:
        return "" if x is None else _sub(x, _IFEXP)

    text = f"{part(s.lower)}:{part(s.upper)}"
    return text if s.step is None else f"{text}:{part(s.step)}"


def _index_items(items: tuple[Expr, ...]) -> str:
    """The items of a subscript `x[...]` so that they parse back as exactly these items."""
    if not items:
        return "()"
    if len(items) == 1:
        # A lone tuple item needs a trailing comma, or its own items would become the index.
        text = _sub(items[0], _IFEXP)
        return text + "," if isinstance(items[0], TupleExpr) else text
    return ", ".join(_sub(x, _IFEXP) for x in items)


def _call(c: Call) -> str:
    if len(c.args) == 1 and isinstance(c.args[0], GenExp) and not c.kwargs:
        return f"{c.func}({_generator(c.args[0])})"
    args = [_sub(a, _IFEXP) for a in c.args]
    args += [f"{k}={_sub(v, _IFEXP)}" for k, v in c.kwargs]
    return f"{c.func}({', '.join(args)})"


def _generator(g: GenExp) -> str:
    # The iterable is a `disjunction` in Python's grammar: a conditional there needs parentheses.
    return f"{_sub(g.elt, _IFEXP)} for {g.var} in {_sub(g.iter, _OR)}"
