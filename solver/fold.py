"""Folding: specialise expressions and shape terms to one combination of discriminants.

`Folder(spec, combo).expr(e)` replaces every discriminant read (`present(x)`, Bool and enum
parameters, ADT constructors and finite fields) by its value in the combination and
simplifies what became constant (`and`/`or`/`not`, conditionals, comparisons and
arithmetic of constants). `Folder.shape(term)` also selects type-family branches and
returns a plain `ShapeList`, or raises `FamilyMiss` when no case (or more than one) applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from opspec.schema import kinds as K
from opspec.schema.elaborate import ElaboratedSpec, FamilyDecl, Pattern
from opspec.schema.expr import (
    Attr, BinOp, BoolOp, Call, Compare, Const, Expr, FamilyApp, GenExp, IfExp, Name, ShapeList,
    ShapeTerm, Slice, Splat, Subscript, TupleExpr, UnaryOp, children,
)
from opspec.schema.primitives import MAX_INT_BITS
from opspec.schema.printer import print_expr
from opspec.schema.values import ADTValue


class FamilyMiss(Exception):
    """No case, or several cases, of a family apply to the discriminant values given."""

    def __init__(self, family: FamilyDecl, values: tuple, matching: list[int], app: FamilyApp):
        super().__init__(family.name)
        self.family = family
        self.values = values
        self.matching = matching
        self.app = app


class FamilyCycle(KeyError):
    """Family applications nest deeper than any acyclic spec can: the families refer to
    each other in a cycle (`family-cycle` reports it once, statically)."""

    def __init__(self, family: str):
        super().__init__(family)
        self.family = family


class ShapeTooLarge(Exception):
    """A family argument grew past MAX_FOLDED_NODES nodes while families applied one
    another: `F_i` whose case is `F_{i+1}[t, R + R]` doubles its argument at each level, so
    30 such families made a shape of 2**30 nodes that every later pass walked (a hang)."""

    def __init__(self, family: FamilyDecl, app: FamilyApp):
        super().__init__(family.name)
        self.family = family
        self.app = app


#: The most nodes a folded family argument may have (counted as a tree, shared subtrees
#: once per use, as the passes that walk it see it); written specs stay far below.
MAX_FOLDED_NODES = 10_000


def _too_large(e: Any, limit: int = MAX_FOLDED_NODES) -> bool:
    todo, seen = [e], 0
    while todo:
        seen += 1
        if seen > limit:
            return True
        todo.extend(children(todo.pop()))
    return False


class NotDiscriminant(Exception):
    """A family's match argument does not fold to a constant."""

    def __init__(self, family: FamilyDecl, arg: Expr):
        super().__init__(family.name)
        self.family = family
        self.arg = arg


def is_const(e: Any) -> bool:
    return isinstance(e, Const)


def const_value(e: Any) -> Any:
    return e.value


@dataclass
class Folder:
    spec: ElaboratedSpec
    combo: Mapping[str, Any]

    # -- expressions ----------------------------------------------------------------------

    def expr(self, e: Expr, subst: Mapping[str, Expr] | None = None) -> Expr:
        return self._fold(e, subst or {})

    def _fold(self, e, s: Mapping[str, Expr]):
        f = self._fold
        if isinstance(e, Const):
            return e
        if isinstance(e, Name):
            if e.id in s:
                return s[e.id]
            if e.id in self.combo and not isinstance(self.combo[e.id], ADTValue):
                v = self.combo[e.id]
                return Const(v, e.col)
            return e
        if isinstance(e, Call) and e.func == "present":
            arg = e.args[0]
            if isinstance(arg, Name) and arg.id in s:
                # a family parameter bound to an argument: fold the argument's presence
                inner = s[arg.id]
                if isinstance(inner, Name):
                    return self._present(inner.id, e)
                return e
            return self._present(arg.id, e) if isinstance(arg, Name) else e
        if isinstance(e, Attr):
            base = f(e.value, s)
            adt = self._adt_of(base)
            if e.attr == "value":
                if isinstance(base, Const):
                    return base
                if isinstance(base, Name) and base.id in self.combo and \
                        self.combo[base.id] is not None and not isinstance(self.combo[base.id], ADTValue):
                    return Const(self.combo[base.id])
                return Attr(base, e.attr, e.col)
            if adt is not None:
                if e.attr == "kind":
                    return Const(adt.ctor, e.col)
                if adt.has(e.attr):
                    return Const(adt.field(e.attr), e.col)
            return Attr(base, e.attr, e.col)
        if isinstance(e, UnaryOp):
            x = f(e.operand, s)
            if isinstance(x, Const):
                if e.op == "not" and isinstance(x.value, bool):
                    return Const(not x.value, e.col)
                if e.op == "-" and isinstance(x.value, (int, float)) and not isinstance(x.value, bool):
                    return Const(-x.value, e.col)
            return UnaryOp(e.op, x, e.col)
        if isinstance(e, BoolOp):
            vals = []
            for v in e.values:
                x = f(v, s)
                if isinstance(x, Const) and isinstance(x.value, bool):
                    if x.value == (e.op == "or"):
                        return Const(x.value, e.col)
                    continue
                vals.append(x)
            if not vals:
                return Const(e.op == "and", e.col)
            if len(vals) == 1:
                return vals[0]
            return BoolOp(e.op, tuple(vals), e.col)
        if isinstance(e, IfExp):
            t = f(e.test, s)
            if isinstance(t, Const) and isinstance(t.value, bool):
                return f(e.body if t.value else e.orelse, s)
            return IfExp(t, f(e.body, s), f(e.orelse, s), e.col)
        if isinstance(e, Compare):
            left = f(e.left, s)
            comps = tuple(f(c, s) for c in e.comparators)
            if isinstance(left, Const) and all(isinstance(c, Const) for c in comps):
                try:
                    return Const(_compare_consts(left.value, e.ops, [c.value for c in comps]),
                                 e.col)
                except TypeError:  # constants that do not compare (`1 in 0.5`, `'a' < 0.5`):
                    pass           # left to the encoder, which says it cannot decide them
            if len(e.ops) == 1 and e.ops[0] in ("in", "not in") and isinstance(left, Const) \
                    and isinstance(comps[0], TupleExpr) and all(isinstance(x, Const) for x in comps[0].elts):
                hit = left.value in [x.value for x in comps[0].elts]
                return Const(hit if e.ops[0] == "in" else not hit, e.col)
            return Compare(left, e.ops, comps, e.col)
        if isinstance(e, BinOp):
            a, b = f(e.left, s), f(e.right, s)
            if isinstance(a, Const) and isinstance(b, Const) and _is_int(a.value) and _is_int(b.value):
                v = _binop(e.op, a.value, b.value)
                if v is not None:
                    return Const(v, e.col)
            return BinOp(e.op, a, b, e.col)
        if isinstance(e, TupleExpr):
            return TupleExpr(tuple(f(x, s) for x in e.elts), e.col)
        if isinstance(e, Subscript):
            idx = e.index
            if isinstance(idx, Slice):
                idx = Slice(*(None if p is None else f(p, s) for p in (idx.lower, idx.upper, idx.step)), idx.col)
            else:
                idx = f(idx, s)
            return Subscript(f(e.value, s), idx, e.col)
        if isinstance(e, Call):
            return Call(e.func, tuple(f(a, s) for a in e.args),
                        tuple((k, f(v, s)) for k, v in e.kwargs), e.col)
        if isinstance(e, GenExp):
            inner = {k: v for k, v in s.items() if k != e.var}
            return GenExp(self._fold(e.elt, inner), e.var, f(e.iter, s), e.col)
        raise TypeError(f"cannot fold {e!r}")

    def _present(self, name: str, e: Call) -> Expr:
        key = f"present({name})"
        if key in self.combo:
            return Const(bool(self.combo[key]), e.col)
        if name in self.spec.tensors and name != "out":
            t = self.spec.tensors[name]
            if t.role == "output":
                return self.truth(t.nullable, default=True) if t.nullable is not False else Const(True)
            if t.optional is False:
                return Const(True, e.col)
            if not isinstance(t.optional, bool):
                return self.expr(t.optional)
        return e

    def _adt_of(self, base) -> ADTValue | None:
        if isinstance(base, Attr) and base.attr == "value":
            base = base.value  # a present Maybe ADT: `p.value.kind` folds like `p.kind`
        if isinstance(base, Name) and isinstance(self.combo.get(base.id), ADTValue):
            return self.combo[base.id]
        return None

    def truth(self, flag: Expr | bool, default: bool = False) -> Expr:
        """A discriminant flag (`optional`, `mutated`, `nullable`) folded to a Const."""
        if isinstance(flag, bool):
            return Const(flag)
        return self.expr(flag)

    def holds(self, flag: Expr | bool) -> bool:
        v = self.truth(flag)
        if not (isinstance(v, Const) and isinstance(v.value, bool)):
            raise ValueError("a discriminant flag did not fold to a constant")
        return v.value

    # -- tensors and shapes ---------------------------------------------------------------

    def exists(self, name: str) -> bool:
        """Whether the tensor exists on this combination (passed, held or returned)."""
        t = self.spec.tensors[name]
        if t.role == "output":
            return True if t.nullable is False else self.holds(t.nullable)
        if t.optional is True:
            return bool(self.combo.get(f"present({name})", True))
        return self.holds(t.optional) if t.optional is not False else True

    def shape(self, term: ShapeTerm, subst: Mapping[str, Expr] | None = None,
              _depth: int = 0, trail: list[tuple[str, int]] | None = None) -> ShapeList:
        """The plain shape of `term` on this combination; `trail`, when given, receives the
        (family, case index) of every case selected on the way, outermost first."""
        s = subst or {}
        if isinstance(term, ShapeList):
            return ShapeList(tuple(Splat(self.expr(a.value, s), a.col) if isinstance(a, Splat)
                                   else self.expr(a, s) for a in term.axes))
        fam = self.spec.families.get(term.family)
        if fam is None:
            raise KeyError(term.family)
        if _depth > len(self.spec.families):
            # Each nesting level applies another family; more levels than families means
            # a cycle. A distinct exception, so the prover can tell it from a crash.
            raise FamilyCycle(term.family)
        args = tuple(self.expr(a, s) for a in term.args)
        if any(_too_large(a) for a in args):
            raise ShapeTooLarge(fam, term)
        binding = {p: a for (p, _), a in zip(fam.params, args)}
        values = []
        for m in fam.match:
            v = binding[m]
            if isinstance(v, Const):
                values.append(v.value)
            elif isinstance(v, Name) and isinstance(self.combo.get(v.id), ADTValue):
                values.append(self.combo[v.id])
            else:
                raise NotDiscriminant(fam, v)
        matching = [i for i, c in enumerate(fam.cases) if _matches(c.when, values)]
        if len(matching) != 1:
            raise FamilyMiss(fam, tuple(values), matching, term)
        if trail is not None:
            trail.append((fam.name, matching[0]))
        return self.shape(fam.cases[matching[0]].shape, binding, _depth + 1, trail)


def _matches(pats: tuple[Pattern, ...], values: list[Any]) -> bool:
    for p, v in zip(pats, values):
        if p.ctor is None:
            if p.value != v or isinstance(p.value, bool) != isinstance(v, bool):
                return False
        else:
            if not isinstance(v, ADTValue) or v.ctor != p.ctor:
                return False
            for fname, fv in p.fields:
                if not v.has(fname) or v.field(fname) != fv:
                    return False
    return True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _binop(op: str, a: int, b: int) -> int | None:
    # A product is not folded past MAX_INT_BITS (the evaluator's own cap): constants squared
    # at each level of nested family applications reached 2**(2**30) and never finished.
    if op == "*" and a.bit_length() + b.bit_length() > MAX_INT_BITS:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None
    return a // b if op == "//" else a % b


def _compare_consts(left: Any, ops: tuple[str, ...], rights: list[Any]) -> bool:
    a = left
    for op, b in zip(ops, rights):
        if op == "==":
            ok = a == b
        elif op == "!=":
            ok = a != b
        elif op == "<":
            ok = a < b
        elif op == "<=":
            ok = a <= b
        elif op == ">":
            ok = a > b
        elif op == ">=":
            ok = a >= b
        elif op == "in":
            ok = a in b
        else:
            ok = a not in b
        if not ok:
            return False
        a = b
    return True


def family_refs(term: ShapeTerm) -> set[str]:
    return {term.family} if isinstance(term, FamilyApp) else set()


def index_kind(spec: ElaboratedSpec, name: str) -> K.Kind | None:
    return spec.forall.get(name)


def adt_facts(spec: ElaboratedSpec, combo: Mapping[str, Any], folder: Folder
              ) -> list[tuple[str, str, Expr]]:
    """(declaration path, description, condition) of each ADT parameter value of `combo`, as
    the prover asserts them on its branch: the constructor and the finite fields the
    combination fixes (description ""), then the constructor's invariant on the value's
    fields, folded (described for messages). A present `Maybe` ADT is read through its
    payload, `p.value`."""
    out: list[tuple[str, str, Expr]] = []
    for pname, v in combo.items():
        if not isinstance(v, ADTValue):
            continue
        path = spec.params[pname].path
        base: Expr = Name(pname)
        if isinstance(spec.params[pname].kind, K.MaybeK):
            base = Attr(base, "value")
        out.append((path, "", Compare(Attr(base, "kind"), ("==",), (Const(v.ctor),))))
        for f, fv in v.fields:
            out.append((path, "", Compare(Attr(base, f), ("==",), (Const(fv),))))
        ctor = spec.adts[v.adt].ctors[v.ctor]
        if ctor.invariant is not None:
            subst = {f: Attr(base, f) for f in ctor.fields}
            text = ctor.invariant_text or print_expr(ctor.invariant)
            out.append((path, f"the invariant of {v.adt}.{v.ctor}, `{text}`, must hold",
                        folder.expr(folder.expr(ctor.invariant, subst))))
    return out


def adt_invariants(spec: ElaboratedSpec, combo: Mapping[str, Any], folder: Folder
                   ) -> list[tuple[str, Expr]]:
    """(declaration path, condition) of :func:`adt_facts`."""
    return [(path, e) for path, _, e in adt_facts(spec, combo, folder)]
