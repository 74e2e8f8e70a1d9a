"""The expression language's own small AST.

Spec strings are parsed (by `opspec.schema.parse`) into these frozen nodes; nothing else
ever sees spec text. Every node can be printed back (`opspec.schema.printer`) to a string
that parses to an equal node. `col` is the 0-based offset in the source string, kept for
diagnostics and ignored by equality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

BINOPS = ("+", "-", "*", "//", "%")
CMPOPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")


@dataclass(frozen=True)
class Const:
    """A literal: int, bool, str, finite float, or None."""

    value: int | bool | str | float | None
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Name:
    """A name: an index, parameter, let, tensor, loop variable, `inf` or `out`."""

    id: str
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Attr:
    """`value.attr`: a Maybe payload (`.value`), an ADT tag (`.kind`) or field."""

    value: "Expr"
    attr: str
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Slice:
    lower: "Expr | None"
    upper: "Expr | None"
    step: "Expr | None" = None
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Subscript:
    """`value[index]` on a sequence; `index` may be a `Slice`."""

    value: "Expr"
    index: "Expr | Slice"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TupleExpr:
    elts: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class UnaryOp:
    """`-x` or `not x`."""

    op: str  # "-" | "not"
    operand: "Expr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class BinOp:
    op: str  # one of BINOPS
    left: "Expr"
    right: "Expr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    values: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Compare:
    """A comparison chain: `left ops[0] comparators[0] ops[1] comparators[1] ...`."""

    left: "Expr"
    ops: tuple[str, ...]
    comparators: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class IfExp:
    """`body if test else orelse`."""

    test: "Expr"
    body: "Expr"
    orelse: "Expr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Call:
    """A call of `present` or a built-in primitive; `func` is dotted (`pool.out`)."""

    func: str
    args: tuple["Expr", ...]
    kwargs: tuple[tuple[str, "Expr"], ...] = ()
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class GenExp:
    """`elt for var in iter`; only as the sole argument of all, sum, max or min."""

    elt: "Expr"
    var: str
    iter: "Expr"
    col: int = field(default=0, compare=False)


Expr = Union[Const, Name, Attr, Subscript, TupleExpr, UnaryOp, BinOp, BoolOp, Compare, IfExp,
             Call, GenExp]


@dataclass(frozen=True)
class Splat:
    """`*value` inside a shape term: expands a Shape/sequence into axes."""

    value: Expr
    col: int = field(default=0, compare=False)


Axis = Union[Expr, Splat]


@dataclass(frozen=True)
class ShapeList:
    """A shape term written as a list of axes, `[M, 2 * N, *S]`; `[]` is rank 0."""

    axes: tuple[Axis, ...]


@dataclass(frozen=True)
class FamilyApp:
    """A type-family application `Mat[trans_a, M, K]`; arguments bind positionally."""

    family: str
    args: tuple[Expr, ...]


ShapeTerm = Union[ShapeList, FamilyApp]


def children(node: Expr | Splat | Slice) -> tuple:
    """The direct sub-expressions of a node, in source order."""
    if isinstance(node, (Const, Name)):
        return ()
    if isinstance(node, Attr):
        return (node.value,)
    if isinstance(node, Subscript):
        return (node.value, node.index)
    if isinstance(node, Slice):
        return tuple(x for x in (node.lower, node.upper, node.step) if x is not None)
    if isinstance(node, TupleExpr):
        return node.elts
    if isinstance(node, UnaryOp):
        return (node.operand,)
    if isinstance(node, BinOp):
        return (node.left, node.right)
    if isinstance(node, BoolOp):
        return node.values
    if isinstance(node, Compare):
        return (node.left, *node.comparators)
    if isinstance(node, IfExp):
        return (node.test, node.body, node.orelse)
    if isinstance(node, Call):
        return (*node.args, *(v for _, v in node.kwargs))
    if isinstance(node, GenExp):
        return (node.iter, node.elt)
    if isinstance(node, Splat):
        return (node.value,)
    raise TypeError(f"not an expression node: {node!r}")


def walk(node):
    """Every node of a tree, pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def free_names(node) -> set[str]:
    """Names read by an expression, excluding generator-expression loop variables."""
    out: set[str] = set()

    def go(n, bound: frozenset[str]) -> None:
        if isinstance(n, Name):
            if n.id not in bound:
                out.add(n.id)
            return
        if isinstance(n, GenExp):
            go(n.iter, bound)
            go(n.elt, bound | {n.var})
            return
        for c in children(n):
            go(c, bound)

    go(node, frozenset())
    return out


def shape_exprs(term: ShapeTerm) -> tuple[Expr, ...]:
    """The expressions inside a shape term (splat bodies unwrapped)."""
    if isinstance(term, FamilyApp):
        return term.args
    return tuple(a.value if isinstance(a, Splat) else a for a in term.axes)
