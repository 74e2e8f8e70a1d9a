"""Parse spec strings into the expression AST of `opspec.schema.expr`.

Text is parsed by `ast.parse(text, mode="eval")` only (it is never evaluated or compiled to
code), then converted through an allowlist: every Python node without a rule below is
rejected with an `ExpressionError`. Checks:

- `parse`: Python cannot parse the text (the message carries Python's reason);
- `language`: a construct outside the closed language, or a resource limit;
- `rejected-form`: a form of the reference's Table 3 (reading `.shape`, comparing with None,
  `isinstance`, a set), with the rewrite in `hint`.

The parser never folds: `-3` is `UnaryOp('-', Const(3))`, so every numeric `Const` it
produces is non-negative (see `opspec.schema.printer` for the converse rule).

Hostile text is bounded before Python's parser sees it (length, bracket nesting) and after
(tree depth, integer size), so a parse always ends quickly in a node or an `ExpressionError`.
"""

from __future__ import annotations

import ast
import functools
import io
import math
import re
import tokenize
import warnings

from opspec.schema.errors import ExpressionError
from opspec.schema.expr import (Attr, BinOp, BoolOp, Call, Compare, Const, Expr, FamilyApp,
                                GenExp, IfExp, Name, ShapeList, ShapeTerm, Slice, Splat,
                                Subscript, TupleExpr, UnaryOp)

MAX_LENGTH = 4096
MAX_DEPTH = 64
INT_LIMIT = 2 ** 63

AGGREGATES = ("all", "sum", "max", "min")

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
           ast.GtE: ">=", ast.In: "in", ast.NotIn: "not in"}

# Constructs outside the language: (what the message calls them, the hint).
_OUTSIDE: dict[type, tuple[str, str | None]] = {
    ast.Div: ("true division `/`", "use floor division `//`, or ceil_div(a, b)"),
    ast.Pow: ("the power operator `**`", "write the product out, such as `x * x`"),
    ast.MatMult: ("matrix multiplication `@`", None),
    ast.BitAnd: ("the bitwise operator `&`", "use `and` on booleans"),
    ast.BitOr: ("the bitwise operator `|`", "use `or` on booleans"),
    ast.BitXor: ("the bitwise operator `^`", "use `!=` on booleans"),
    ast.LShift: ("the shift operator `<<`", None),
    ast.RShift: ("the shift operator `>>`", None),
    ast.Invert: ("the bitwise inversion `~`", "use `not` on booleans"),
    ast.UAdd: ("unary `+`", "drop the `+`"),
    ast.Is: ("the identity test `is`", "use `==`; presence is present(v)"),
    ast.IsNot: ("the identity test `is not`", "use `!=`; presence is present(v)"),
    ast.List: ("a list display", "use a tuple `(a, b)`; a shape's `[...]` is only its outer list"),
    ast.Dict: ("a dict display", None),
    ast.ListComp: ("a list comprehension", "use a generator as the sole argument of all, sum, "
                   "max or min"),
    ast.DictComp: ("a dict comprehension", None),
    ast.Lambda: ("a lambda", None),
    ast.JoinedStr: ("an f-string", None),
    ast.FormattedValue: ("an f-string", None),
    ast.NamedExpr: ("an assignment expression `:=`", "use a let"),
    ast.Starred: ("a starred expression `*x`", "a splat `*S` is only an axis of a shape term"),
    ast.Await: ("`await`", None),
    ast.Yield: ("`yield`", None),
    ast.YieldFrom: ("`yield from`", None),
}

# The allowlist: Python node types with a conversion rule `_Converter._<type>`. Set, SetComp and
# GeneratorExp have rules only to reject them with a precise message.
_RULES = frozenset({"Constant", "Name", "Attribute", "Tuple", "Subscript", "UnaryOp", "BinOp",
                    "BoolOp", "IfExp", "Compare", "Call", "GeneratorExp", "Set", "SetComp"})

_SHAPE_TERM = "a shape term is `[axis, ...]` or a type family application `F[args]`"


def parse_expr(text: str) -> Expr:
    """Parse one expression of the language; raise `ExpressionError` if it is not one."""
    _check_text(text)
    return _parse_expr(text)


def parse_shape(text: str) -> ShapeTerm:
    """Parse a shape term: `[axis, ...]` (axes may be splats `*e`) or `Family[args]`."""
    _check_text(text)
    return _parse_shape(text)


def defining_equality(expr: Expr) -> tuple[str, Expr] | None:
    """`(name, rhs)` when `expr` is exactly `name == rhs` or `rhs == name`, else None.

    The elaborator asks this of a shape rule: when `name` is not declared, the rule defines a
    name and is a rejected form (rewrite: `let: {name: "rhs"}`). When both sides are names, the
    left one is returned; the elaborator decides which of the two is new.
    """
    if not (isinstance(expr, Compare) and expr.ops == ("==",)):
        return None
    left, right = expr.left, expr.comparators[0]
    if isinstance(left, Name):
        return left.id, right
    if isinstance(right, Name):
        return right.id, left
    return None


# -- bounds checked before Python's parser runs ------------------------------------------------

def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise ExpressionError(f"an expression is a string, not {type(text).__name__}",
                              check="parse")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is {len(text)} characters long; the limit is "
                              f"{MAX_LENGTH}", check="language")
    depth = _bracket_depth(text)
    if depth > MAX_DEPTH:
        raise ExpressionError(f"the expression nests brackets {depth} deep; the limit is "
                              f"{MAX_DEPTH}", check="language")


def _bracket_depth(text: str) -> int:
    """The deepest bracket nesting outside strings (an estimate if it cannot be tokenized)."""
    # A naive count over-estimates only through brackets inside strings; tokenize just then.
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    if deepest <= MAX_DEPTH:
        return deepest
    depth = deepest = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
                deepest = max(deepest, depth)
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
    except Exception:  # noqa: BLE001 - only an estimate: `ast.parse` reports the real error,
        pass  # and bracket pairs add no tree depth, so an under-count is harmless.
    return deepest


#: `=` that is not part of `==`, `<=`, `>=` or `!=` (nor a keyword argument's, which
#: parses): the usual slip in a refinement, `N = 2 * G`.
_LONE_EQUALS = re.compile(r"(?<![<>=!])=(?!=)")


def _python_ast(text: str) -> tuple[ast.expr, "_Converter"]:
    # Python refuses leading indentation in eval mode; strip it and shift columns back.
    stripped = text.lstrip(" \t\f\r\n")
    conv = _Converter(stripped, len(text) - len(stripped))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. invalid escape sequences in strings
            tree = ast.parse(stripped, mode="eval")
    except SyntaxError as e:
        col = conv.offset(e.lineno or 1, (e.offset or 1) - 1, chars=True)
        shown = f" {text!r}" if len(text) <= 80 else ""
        hint = ("compare with `==`; a single `=` assigns, which an expression cannot"
                if _LONE_EQUALS.search(stripped) else None)
        raise ExpressionError(f"cannot parse{shown}: {e.msg}", check="parse", col=col,
                              hint=hint) from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as e:
        raise ExpressionError(f"cannot parse the expression: {e}", check="parse") from None
    return tree.body, conv


@functools.lru_cache(maxsize=8192)
def _parse_expr(text: str) -> Expr:
    body, conv = _python_ast(text)
    return conv.expr(body, 1)


@functools.lru_cache(maxsize=8192)
def _parse_shape(text: str) -> ShapeTerm:
    body, conv = _python_ast(text)
    if isinstance(body, ast.List):
        return ShapeList(tuple(
            Splat(conv.expr(elt.value, 3), conv.col(elt)) if isinstance(elt, ast.Starred)
            else conv.expr(elt, 2)
            for elt in body.elts))
    if isinstance(body, ast.Subscript) and isinstance(body.value, ast.Name):
        index = body.slice
        elts = index.elts if isinstance(index, ast.Tuple) else [index]
        if any(isinstance(e, ast.Slice) for e in elts):
            raise ExpressionError(_SHAPE_TERM, check="language", col=conv.col(body))
        return FamilyApp(body.value.id, tuple(conv.expr(e, 2) for e in elts))
    raise ExpressionError(_SHAPE_TERM, check="language", col=conv.col(body))


# -- the allowlist -----------------------------------------------------------------------------

class _Converter:
    """Converts one parsed Python expression; knows the text for columns and messages."""

    def __init__(self, text: str, indent: int):
        self.text = text
        self.indent = indent
        # Python counts lines at \n, \r\n and \r only (str.splitlines knows more breaks).
        self.lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", text) or [""]
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    # positions and source text

    def offset(self, lineno: int, col: int, *, chars: bool = False) -> int:
        """The 0-based character offset in the original text of a (line, column) pair."""
        i = min(max(lineno, 1), len(self.lines)) - 1
        line = self.lines[i]
        if not chars and not line.isascii():  # Python's AST columns count UTF-8 bytes
            col = len(line.encode("utf-8")[:col].decode("utf-8", "replace"))
        return self.indent + self.starts[i] + col

    def col(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)

    def src(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def error(self, message: str, node: ast.AST, *, check: str = "language",
              hint: str | None = None) -> ExpressionError:
        return ExpressionError(message, check=check, hint=hint, col=self.col(node))

    def outside(self, node: ast.AST, key: object = None) -> ExpressionError:
        what, hint = _OUTSIDE.get(key or type(node), (f"a {type(node).__name__} expression", None))
        return self.error(f"{what} is outside the expression language", node, hint=hint)

    # conversion

    def expr(self, node: ast.AST, depth: int) -> Expr:
        if depth > MAX_DEPTH:
            raise self.error(f"the expression nests deeper than {MAX_DEPTH} levels", node)
        kind = type(node).__name__
        if kind not in _RULES:
            raise self.outside(node)
        return getattr(self, "_" + kind)(node, depth + 1)

    def _Constant(self, node: ast.Constant, depth: int) -> Expr:
        v = node.value
        ok = (v is None or isinstance(v, (bool, str))
              or (type(v) is int and abs(v) < INT_LIMIT)
              or (type(v) is float and math.isfinite(v)))
        if not ok:
            shown = self.src(node)
            if len(shown) > 40:
                shown = shown[:20] + "..." + shown[-10:]
            hint = "integers are below 2**63 in magnitude" if type(v) is int else None
            if type(v) is float:
                hint = "the name `inf` is infinity"
            raise self.error(f"literal {shown} is outside the expression language", node,
                             hint=hint)
        return Const(v, self.col(node))

    def _Name(self, node: ast.Name, depth: int) -> Expr:
        return Name(node.id, self.col(node))

    def _Attribute(self, node: ast.Attribute, depth: int) -> Expr:
        if node.attr == "shape":
            raise self._reads_shape(node)
        return Attr(self.expr(node.value, depth), node.attr, self.col(node))

    def _Tuple(self, node: ast.Tuple, depth: int) -> Expr:
        return TupleExpr(tuple(self.expr(e, depth) for e in node.elts), self.col(node))

    def _Subscript(self, node: ast.Subscript, depth: int) -> Expr:
        value = self.expr(node.value, depth)
        index = node.slice
        if isinstance(index, ast.Slice):
            parts = (None if p is None else self.expr(p, depth + 1)
                     for p in (index.lower, index.upper, index.step))
            return Subscript(value, Slice(*parts, col=self.col(index)), self.col(node))
        if isinstance(index, ast.Tuple) and any(isinstance(e, ast.Slice) for e in index.elts):
            raise self.error("a multi-axis slice is outside the expression language", index)
        return Subscript(value, self.expr(index, depth), self.col(node))

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> Expr:
        op = {ast.USub: "-", ast.Not: "not"}.get(type(node.op))
        if op is None:
            raise self.outside(node, type(node.op))
        return UnaryOp(op, self.expr(node.operand, depth), self.col(node))

    def _BinOp(self, node: ast.BinOp, depth: int) -> Expr:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.outside(node, type(node.op))
        return BinOp(op, self.expr(node.left, depth), self.expr(node.right, depth),
                     self.col(node))

    def _BoolOp(self, node: ast.BoolOp, depth: int) -> Expr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        return BoolOp(op, tuple(self.expr(v, depth) for v in node.values), self.col(node))

    def _IfExp(self, node: ast.IfExp, depth: int) -> Expr:
        if _is_isinstance(node.test):
            raise self._isinstance(node.test, node.body)
        return IfExp(self.expr(node.test, depth), self.expr(node.body, depth),
                     self.expr(node.orelse, depth), self.col(node))

    def _Compare(self, node: ast.Compare, depth: int) -> Expr:
        operands = [node.left, *node.comparators]
        for lhs, op, rhs in zip(operands, node.ops, operands[1:]):
            self._check_pair(node, lhs, op, rhs)
        ops = tuple(_CMPOPS[type(op)] for op in node.ops)
        return Compare(self.expr(node.left, depth), ops,
                       tuple(self.expr(c, depth) for c in node.comparators), self.col(node))

    def _check_pair(self, node: ast.Compare, lhs: ast.AST, op: ast.cmpop, rhs: ast.AST) -> None:
        """Reject the Table 3 forms visible in one link `lhs op rhs` of a comparison chain."""
        equality = isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))
        if equality and (_is_none(lhs) or _is_none(rhs)):
            subject = self.src(rhs if _is_none(lhs) else lhs)
            absent = isinstance(op, (ast.Eq, ast.Is))
            raise self.error(f"{subject} compares with None; presence is present(v)", node,
                             check="rejected-form",
                             hint=f"not present({subject})" if absent else f"present({subject})")
        if isinstance(op, (ast.Is, ast.IsNot)):
            raise self.outside(node, type(op))
        if not isinstance(op, (ast.Eq, ast.NotEq)):
            return
        if _is_shape(lhs) and _is_shape(rhs):
            raise self.error(f"{self.src(lhs)} == {self.src(rhs)} states that two tensors have "
                             "the same shape; shapes are declared, not compared", node,
                             check="rejected-form",
                             hint="use the same shape term, such as [*S], for both tensors")
        for shape, other in ((lhs, rhs), (rhs, lhs)):
            if _is_shape(shape) and isinstance(other, ast.Tuple):
                raise self._reads_shape(shape, ", ".join(self.src(e) for e in other.elts))

    def _reads_shape(self, node: ast.Attribute, axes: str = "...") -> ExpressionError:
        tensor = self.src(node.value)
        return self.error(f"{self.src(node)} reads a tensor's shape; shapes are declared, "
                          "not read", node, check="rejected-form",
                          hint=f'declare the shape on the tensor: {tensor}: '
                               f'{{shape: "[{axes}]"}}')

    def _isinstance(self, call: ast.Call, body: ast.AST | None = None) -> ExpressionError:
        subject = self.src(call.args[0]) if call.args else "s"
        index = "0"
        if (isinstance(body, ast.Subscript) and isinstance(body.slice, ast.Constant)
                and type(body.slice.value) is int):
            index = str(body.slice.value)
        return self.error("isinstance tests a Python type, which is outside the expression "
                          "language", call, check="rejected-form",
                          hint=f"per_axis({subject}, {index}, 2): item {index} of a length-2 "
                               f"sequence, or {subject} itself when it is a scalar")

    def _Call(self, node: ast.Call, depth: int) -> Expr:
        func = _dotted(node.func)
        if func is None:
            raise self.error(f"a call of the computed function {self.src(node.func)} is outside "
                             "the expression language", node)
        if _is_isinstance(node):
            raise self._isinstance(node)
        if "shape" in func.split(".")[1:]:
            raise self._reads_shape(_find_shape(node.func))
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.error("`*` argument unpacking is outside the expression language",
                                 arg)
            if isinstance(arg, ast.GeneratorExp):
                if func not in AGGREGATES or len(node.args) != 1:
                    raise self._misplaced(arg)
                args.append(self._generator(arg, depth))
            else:
                args.append(self.expr(arg, depth))
        kwargs = []
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error("`**` argument unpacking is outside the expression language",
                                 kw.value)
            kwargs.append((kw.arg, self.expr(kw.value, depth)))
        return Call(func, tuple(args), tuple(kwargs), self.col(node))

    def _generator(self, node: ast.GeneratorExp, depth: int) -> GenExp:
        gens = node.generators
        if (len(gens) != 1 or not isinstance(gens[0].target, ast.Name) or gens[0].ifs
                or gens[0].is_async):
            raise self.error("a comprehension is `f(x) for x in s`: one name, no `if`, "
                             "no `async`", node)
        g = gens[0]
        return GenExp(self.expr(node.elt, depth + 1), g.target.id, self.expr(g.iter, depth + 1),
                      self.col(node))

    def _GeneratorExp(self, node: ast.GeneratorExp, depth: int) -> Expr:
        # Reached only for a generator outside the one position `_Call` accepts.
        raise self._misplaced(node)

    def _misplaced(self, node: ast.GeneratorExp) -> ExpressionError:
        return self.error("a comprehension is only an argument of all, sum, max or min", node)

    def _SetComp(self, node: ast.SetComp, depth: int) -> Expr:
        g = node.generators[0]
        seq = self.src(g.iter)
        n = "n"
        if isinstance(node.elt, ast.BinOp) and isinstance(node.elt.op, ast.Mod):
            n = self.src(node.elt.right)
        raise self.error("a set comprehension is outside the expression language", node,
                         check="rejected-form", hint=f"unique_axes({seq}, {n})")

    def _Set(self, node: ast.Set, depth: int) -> Expr:
        raise self.error("a set display is outside the expression language", node,
                         check="rejected-form", hint="unique_axes(dim, n)")


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _find_shape(node: ast.AST) -> ast.Attribute:
    while not (isinstance(node, ast.Attribute) and node.attr == "shape"):
        node = node.value
    return node


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_shape(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def _is_isinstance(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance")
