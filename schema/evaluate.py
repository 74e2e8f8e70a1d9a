"""The concrete evaluator: an expression AST and an environment of Python values → a value.

Values are those of `opspec.schema.values`: ints (Python `//` and `%`, floor semantics),
bools, strs (enum values and dtype names alike), floats, tuples (lists, as YAML gives them,
compare equal to tuples), None (an absent `Maybe`, tensor or `out`) and `ADTValue`s.

- `present(x)` is `env[x] is not None`; a name missing from `env` counts as absent.
- `v.value` is `v` itself, or an error when `v` is None; `adt.kind` the constructor name;
  `adt.f` a field (an error when the constructor lacks it). ADT fields therefore must not be
  named `value` or `kind`.
- `inf` is `float('inf')` unless `env` binds it.
- `and`/`or`/`not` and conditionals are Python's, short-circuit and lazy.
- A generator expression is only the sole argument of `all`, `sum`, `max` or `min`, and is
  evaluated lazily (so `all` stops at the first false element, as in Python).
- `bytes(t)` (roofline only) calls `env[BYTES_KEY](name_of_t)`; without that entry it is an
  error. Random generators need the `rng` argument.

Failures are `EvaluationError`s. A Python exception, or a primitive's domain error, raised by
one node becomes `"<that node, printed> raises <exc>"`; the caller prefixes its declaration.
Hostile sizes are refused: integers wider than `MAX_INT_BITS` bits and sequences longer than
`MAX_SEQ_LEN` (generators have their own element budget).
"""

from __future__ import annotations

import math
import operator
import random
from collections import ChainMap
from typing import Any, Callable, Iterator, Mapping

from .errors import EvaluationError
from .expr import (Attr, BinOp, BoolOp, Call, Compare, Const, Expr, GenExp, IfExp, Name,
                   ShapeList, Slice, Splat, Subscript, TupleExpr, UnaryOp)
from .primitives import MAX_INT_BITS, MAX_SEQ_LEN, PRIMITIVES, Primitive
from .values import ADTValue, field_of, is_int, to_tuple

__all__ = ["evaluate", "evaluate_axes", "evaluate_requires", "BYTES_KEY"]

#: The environment entry `bytes(t)` calls with the tensor's name (set in roofline scope).
BYTES_KEY = "__bytes__"

_BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod,
}
_CMPOPS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}
_GEN_FUNCS = frozenset({"all", "sum", "max", "min"})


def evaluate(expr: Expr, env: Mapping[str, Any], *, rng: random.Random | None = None) -> Any:
    """The value of `expr` with names bound by `env`."""
    try:
        return _Evaluator(rng).eval(expr, env)
    except RecursionError as exc:
        # Not printed: printing a tree this deep would recurse just as far.
        raise EvaluationError("the expression nests too deeply to evaluate") from exc


def evaluate_axes(term: ShapeList, env: Mapping[str, Any], *,
                  rng: random.Random | None = None) -> tuple[int, ...]:
    """The axis lengths of a shape term written as a list, splats expanded. Lengths are not
    checked for being non-negative: that is the caller's check, which knows the declaration."""
    ev = _Evaluator(rng)
    out: list[int] = []
    for axis in term.axes:
        if isinstance(axis, Splat):
            value = ev.eval(axis.value, env)
            if not isinstance(value, (tuple, list)) or not all(is_int(v) for v in value):
                raise EvaluationError(f"*{_show(axis.value)} is {value!r}, not a sequence of "
                                      "ints")
            out.extend(value)
        else:
            value = ev.eval(axis, env)
            if not is_int(value):
                raise EvaluationError(f"axis {_show(axis)} is {value!r}, not an int")
            out.append(value)
        if len(out) > MAX_SEQ_LEN:
            raise EvaluationError(f"the shape has more than {MAX_SEQ_LEN} axes")
    return tuple(out)


def evaluate_requires(expr: Expr, contents: Any, env: Mapping[str, Any], *,
                      rng: random.Random | None = None) -> bool:
    """Whether the `requires` predicate call `expr` holds on a tensor's `contents` (nested
    lists or tuples), which are the predicate's implicit first argument."""
    prim = PRIMITIVES.get(expr.func) if isinstance(expr, Call) else None
    if prim is None or prim.role != "requires":
        raise EvaluationError(f"{_show(expr)} is not a `requires` predicate call")
    ev = _Evaluator(rng)
    args, kwargs = ev.arguments(expr, prim, env, implicit=1)
    return bool(ev.apply(expr, prim, [contents, *args], kwargs))


# ----------------------------------------------------------------------------- internals


def _show(node: Any) -> str:
    """The expression as the spec would write it (falls back to `repr`)."""
    try:
        from .printer import print_expr

        return print_expr(node)
    except Exception:  # a printer gap must never hide the real error
        return repr(node)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class _ElementError(Exception):
    """Carries an element's EvaluationError out through a primitive consuming a generator,
    so that it is not re-wrapped as the primitive's own failure."""

    def __init__(self, error: EvaluationError):
        super().__init__(str(error))
        self.error = error


class _Evaluator:
    def __init__(self, rng: random.Random | None):
        self.rng = rng

    def eval(self, node: Any, env: Mapping[str, Any]) -> Any:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise EvaluationError(f"{node!r} is not an expression")
        return handler(self, node, env)

    # -- leaves and structure ---------------------------------------------------------------

    def _const(self, node: Const, env: Mapping[str, Any]) -> Any:
        return node.value

    def _name(self, node: Name, env: Mapping[str, Any]) -> Any:
        if node.id in env:
            return env[node.id]
        if node.id == "inf":
            return math.inf
        raise EvaluationError(f"{node.id} is not bound")

    def _attr(self, node: Attr, env: Mapping[str, Any]) -> Any:
        value = self.eval(node.value, env)
        if value is None:
            raise EvaluationError(f"{_show(node)}: {_show(node.value)} is absent")
        if node.attr == "value":
            return value
        if isinstance(value, ADTValue):
            if node.attr == "kind":
                return value.ctor
            if not value.has(node.attr):
                raise EvaluationError(
                    f"{_show(node)} reads a field constructor '{value.ctor}' lacks")
            return value.field(node.attr)
        try:
            return field_of(value, node.attr)
        except Exception as exc:
            raise EvaluationError(f"{_show(node)} raises {exc}") from exc

    def _subscript(self, node: Subscript, env: Mapping[str, Any]) -> Any:
        seq = self.eval(node.value, env)
        if isinstance(node.index, Slice):
            bounds = [None if b is None else self.eval(b, env)
                      for b in (node.index.lower, node.index.upper, node.index.step)]
            if not all(b is None or is_int(b) for b in bounds):
                raise EvaluationError(f"{_show(node)}: slice bounds {bounds} are not ints")
            index: Any = slice(*bounds)
        else:
            index = self.eval(node.index, env)
            if not is_int(index):
                raise EvaluationError(f"{_show(node)}: index {index!r} is not an int")
        if not isinstance(seq, (tuple, list)):
            raise EvaluationError(f"{_show(node)}: {_show(node.value)} is {seq!r}, not a "
                                  "sequence")
        try:
            return seq[index]
        except Exception as exc:
            raise EvaluationError(f"{_show(node)} raises {exc}") from exc

    def _tuple(self, node: TupleExpr, env: Mapping[str, Any]) -> Any:
        return tuple(self.eval(e, env) for e in node.elts)

    # -- operators ---------------------------------------------------------------------------

    def _unary(self, node: UnaryOp, env: Mapping[str, Any]) -> Any:
        value = self.eval(node.operand, env)
        if node.op == "not":
            return not value
        if node.op != "-" or not _is_number(value):
            raise EvaluationError(f"{_show(node)} applies {node.op} to {value!r}")
        return -value

    def _binop(self, node: BinOp, env: Mapping[str, Any]) -> Any:
        a = self.eval(node.left, env)
        b = self.eval(node.right, env)
        op = _BINOPS.get(node.op)
        for v in (a, b):
            if op is None or not _is_number(v):
                raise EvaluationError(f"{_show(node)} applies {node.op} to {v!r}")
        try:
            result = op(a, b)
        except Exception as exc:  # ZeroDivisionError, OverflowError on floats
            raise EvaluationError(f"{_show(node)} raises {exc}") from exc
        self.limit(node, result)
        return result

    def _boolop(self, node: BoolOp, env: Mapping[str, Any]) -> Any:
        result: Any = node.op == "and"
        for v in node.values:
            result = self.eval(v, env)
            # Python's short circuit: `and` stops at the first falsy, `or` at the first truthy.
            if (node.op == "and") != bool(result):
                return result
        return result

    def _compare(self, node: Compare, env: Mapping[str, Any]) -> bool:
        left = self.eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = self.eval(comp, env)
            fn = _CMPOPS.get(op)
            if fn is None:
                raise EvaluationError(f"{_show(node)}: {op} is not a comparison")
            try:
                # YAML lists meet tuples: compare both as tuples.
                holds = bool(fn(to_tuple(left), to_tuple(right)))
            except Exception as exc:
                raise EvaluationError(f"{_show(node)} raises {exc}") from exc
            if not holds:
                return False
            left = right
        return True

    def _ifexp(self, node: IfExp, env: Mapping[str, Any]) -> Any:
        return self.eval(node.body if self.eval(node.test, env) else node.orelse, env)

    def _genexp(self, node: GenExp, env: Mapping[str, Any]) -> Any:
        raise EvaluationError(f"{_show(node)}: a comprehension is only an argument of all, "
                              "sum, max or min")

    # -- calls -------------------------------------------------------------------------------

    def _call(self, node: Call, env: Mapping[str, Any]) -> Any:
        if node.func == "present":
            return self.present(node, env)
        if node.func == "bytes":
            return self.bytes(node, env)
        prim = PRIMITIVES.get(node.func)
        if prim is None:
            raise EvaluationError(f"{node.func} is not a built-in primitive")
        if prim.role == "requires":
            raise EvaluationError(f"{_show(node)}: {node.func} is a `requires` predicate; it "
                                  "only constrains a tensor's contents")
        args, kwargs = self.arguments(node, prim, env)
        if prim.random:
            if self.rng is None:
                raise EvaluationError(f"{_show(node)}: {node.func} is random and needs an rng")
            kwargs["rng"] = self.rng
        return self.apply(node, prim, args, kwargs)

    def arguments(self, node: Call, prim: Primitive, env: Mapping[str, Any],
                  implicit: int = 0) -> tuple[list, dict]:
        """Evaluated positional and keyword arguments (`implicit` leading ones are not
        written, e.g. a `requires` predicate's contents)."""
        error = prim.arity_error(len(node.args) + implicit, [k for k, _ in node.kwargs])
        if error is not None:
            raise EvaluationError(error)
        args = []
        for a in node.args:
            if isinstance(a, GenExp):
                if prim.name not in _GEN_FUNCS or len(node.args) != 1:
                    raise EvaluationError("a comprehension is only an argument of all, sum, "
                                          "max or min")
                args.append(self.elements(a, env))
            else:
                args.append(self.eval(a, env))
        kwargs = {k: self.eval(v, env) for k, v in node.kwargs}
        return args, kwargs

    def elements(self, node: GenExp, env: Mapping[str, Any]) -> Iterator[Any]:
        """The lazy elements of a generator expression."""
        seq = self.eval(node.iter, env)
        if not isinstance(seq, (tuple, list)):
            raise EvaluationError(f"{_show(node.iter)} is {seq!r}, not a sequence")
        if len(seq) > MAX_SEQ_LEN:
            raise EvaluationError(f"{_show(node.iter)} has more than {MAX_SEQ_LEN} elements")

        def gen() -> Iterator[Any]:
            for x in seq:
                try:
                    yield self.eval(node.elt, ChainMap({node.var: x}, env))
                except EvaluationError as exc:
                    raise _ElementError(exc) from exc

        return gen()

    def apply(self, node: Call, prim: Primitive, args: list, kwargs: dict) -> Any:
        try:
            result = prim.evaluate(*args, **kwargs)
        except _ElementError as exc:
            raise exc.error from exc.error.__cause__
        except Exception as exc:  # domain errors (EvaluationError) and Python's own
            raise EvaluationError(f"{_show(node)} raises {exc}") from exc
        if prim.role != "generator" and isinstance(result, (tuple, list)) and \
                len(result) > MAX_SEQ_LEN:
            raise EvaluationError(f"{_show(node)} has more than {MAX_SEQ_LEN} elements")
        self.limit(node, result)
        return result

    def present(self, node: Call, env: Mapping[str, Any]) -> bool:
        if len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], Name):
            raise EvaluationError(f"{_show(node)} names no tensor, `Maybe` parameter or `out`")
        return env.get(node.args[0].id) is not None

    def bytes(self, node: Call, env: Mapping[str, Any]) -> Any:
        if len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], Name):
            raise EvaluationError(f"{_show(node)}: bytes takes one tensor name")
        count = env.get(BYTES_KEY)
        if count is None:
            raise EvaluationError(f"{_show(node)}: bytes(t) is only available in roofline "
                                  "formulas")
        try:
            result = count(node.args[0].id)
        except Exception as exc:
            raise EvaluationError(f"{_show(node)} raises {exc}") from exc
        self.limit(node, result)
        return result

    def limit(self, node: Any, value: Any) -> None:
        """Refuse integers too wide to be sizes (they would only grow from here)."""
        if is_int(value) and value.bit_length() > MAX_INT_BITS:
            raise EvaluationError(f"{_show(node)} raises an integer wider than {MAX_INT_BITS} "
                                  "bits")


_HANDLERS: dict[type, Callable[[_Evaluator, Any, Mapping[str, Any]], Any]] = {
    Const: _Evaluator._const, Name: _Evaluator._name, Attr: _Evaluator._attr,
    Subscript: _Evaluator._subscript, TupleExpr: _Evaluator._tuple, UnaryOp: _Evaluator._unary,
    BinOp: _Evaluator._binop, BoolOp: _Evaluator._boolop, Compare: _Evaluator._compare,
    IfExp: _Evaluator._ifexp, Call: _Evaluator._call, GenExp: _Evaluator._genexp,
}
