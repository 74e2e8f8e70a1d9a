"""Kind inference of expressions: name resolution, operand kinds and narrowing.

`KindChecker.infer(expr, scope)` returns the kind of an expression or raises an
`ExpressionError` whose `check` is `name`, `kind` or `language`. Narrowing follows the
reference: in the branch where `present(v)` holds, `v.value` may be read; where `x == 'a'`
(or `x in ('a', 'b')`) holds, `x` narrows to those literals; `adt.kind == 'c'` narrows the
constructor. Narrowing flows through `not`, `and`, `or` and conditional expressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from opspec.schema import kinds as K
from opspec.schema.errors import ExpressionError
from opspec.schema.expr import (
    Attr, BinOp, BoolOp, Call, Compare, Const, Expr, GenExp, IfExp, Name, Slice, Subscript,
    TupleExpr, UnaryOp,
)
from opspec.schema.printer import print_expr
from opspec.schema.suggest import closest

#: Roles of names in a spec's scope.
INDEX, PARAM, LET, TENSOR, FAMILY, LOOP, ADT_FIELD = (
    "index", "param", "let", "tensor", "family", "loop", "field")


@dataclass(frozen=True)
class Symbol:
    name: str
    role: str
    kind: K.Kind


@dataclass(frozen=True)
class CtorInfo:
    """One constructor of an ADT: its fields' kinds and optional invariant."""

    name: str
    fields: Mapping[str, K.Kind]
    python: str | None = None
    invariant: "Expr | None" = None
    invariant_text: str | None = None


@dataclass(frozen=True)
class ADTInfo:
    name: str
    ctors: Mapping[str, CtorInfo]

    def finite_fields(self, ctor: str) -> dict[str, K.Kind]:
        return {f: k for f, k in self.ctors[ctor].fields.items() if K.is_finite(k)}


@dataclass(frozen=True)
class Scope:
    """What names mean at one place of a spec.

    `roles` restricts which primitive roles may be called here: every place allows value
    primitives; `values` allows generators, `requires` predicates, roofline `bytes`.
    """

    symbols: Mapping[str, Symbol]
    adts: Mapping[str, ADTInfo] = field(default_factory=dict)
    roles: frozenset[str] = frozenset({"value"})
    has_out: bool = False
    #: narrowed kinds by name, and names known present, valid in the current branch
    narrowed: Mapping[str, K.Kind] = field(default_factory=dict)
    present: frozenset[str] = frozenset()

    def with_facts(self, facts: "Facts") -> "Scope":
        if not facts.narrowed and not facts.present:
            return self
        return replace(self, narrowed={**self.narrowed, **facts.narrowed},
                       present=self.present | facts.present)

    def bind(self, name: str, kind: K.Kind) -> "Scope":
        return replace(self, symbols={**self.symbols, name: Symbol(name, LOOP, kind)})


@dataclass(frozen=True)
class Facts:
    narrowed: Mapping[str, K.Kind] = field(default_factory=dict)
    present: frozenset[str] = frozenset()

    def __or__(self, other: "Facts") -> "Facts":
        return Facts({**self.narrowed, **other.narrowed}, self.present | other.present)


NO_FACTS = Facts()


#: YAML 1.1 spellings of booleans, which YAML 1.2 (and so a spec) reads as strings (not
#: `y` and `n`, which are more often an undeclared index).
_YAML11_BOOLS = {"yes": "true", "no": "false", "on": "true", "off": "false"}


def _name_hint(name: str, scope) -> str | None:
    """A rewrite for an unknown name: a boolean spelt as in YAML 1.1, or a declared name
    that looks like it."""
    if name.lower() in _YAML11_BOOLS:
        return f"write {_YAML11_BOOLS[name.lower()]} (a boolean)"
    close = next((n for n in sorted(scope.symbols) if n.lower() == name.lower()), None) or \
        closest(name, sorted(scope.symbols))
    return f"did you mean `{close}`?" if close else None


def _err(msg: str, node, check: str = "kind", hint: str | None = None) -> ExpressionError:
    return ExpressionError(msg, check=check, hint=hint, col=getattr(node, "col", None))


def _p(node) -> str:
    return f"`{print_expr(node)}`"


def _truth_ok(k: K.Kind) -> bool:
    """Whether `k` may be tested for truth (`not`, `and`, `or`, a conditional's test). An
    opaque value passes, but not a float: `not 0.5` reached the encoder, which has no truth
    for a float, and crashed the prover."""
    return K.assignable(k, K.BOOL) and not (isinstance(k, K.ValueK) and k.tag == "float")


class KindChecker:
    """Infers kinds; one instance per spec (it keeps no state between calls)."""

    def infer(self, e: Expr, scope: Scope) -> K.Kind:
        method = getattr(self, "_" + type(e).__name__)
        return method(e, scope)

    def expect(self, e: Expr, scope: Scope, expected: K.Kind, what: str = "") -> K.Kind:
        k = self.infer(e, scope)
        if not K.assignable(k, expected):
            raise _err(f"{_p(e)} has kind {k}, expected {expected}{what}", e)
        return k

    # -- leaves ---------------------------------------------------------------------------

    def _Const(self, e: Const, scope: Scope) -> K.Kind:
        v = e.value
        if isinstance(v, bool):
            return K.BOOL
        if isinstance(v, int):
            return K.IntK(v >= 0)
        if isinstance(v, str):
            return K.StrK(frozenset({v}))
        if isinstance(v, float):
            return K.FLOAT
        return K.NONE

    def _Name(self, e: Name, scope: Scope) -> K.Kind:
        if e.id in scope.narrowed:
            return scope.narrowed[e.id]
        sym = scope.symbols.get(e.id)
        if sym is None:
            if e.id == "inf":
                return K.FLOAT
            if e.id in K.DTYPES:
                return K.DTypeK(frozenset({e.id}))
            if e.id == "out":
                raise _err("`out` names the output buffer; only present(out) reads it", e,
                           check="name")
            raise _err(f"unknown name `{e.id}`", e, check="name", hint=_name_hint(e.id, scope))
        if sym.role == FAMILY:
            raise _err(f"type family {e.id} is not a value", e, check="kind")
        return sym.kind

    # -- operators ------------------------------------------------------------------------

    def _UnaryOp(self, e: UnaryOp, scope: Scope) -> K.Kind:
        k = self.infer(e.operand, scope)
        if e.op == "not":
            if not _truth_ok(k):
                raise _err(f"{_p(e.operand)} has kind {k}, expected Bool", e.operand)
            return K.BOOL
        if isinstance(k, K.ValueK):
            return k
        if not isinstance(k, K.IntK):
            raise _err(f"{_p(e.operand)} has kind {k}, expected Int", e.operand)
        return K.INT

    def _BinOp(self, e: BinOp, scope: Scope) -> K.Kind:
        a = self.infer(e.left, scope)
        b = self.infer(e.right, scope)
        for side, k in ((e.left, a), (e.right, b)):
            if not isinstance(k, (K.IntK, K.ValueK)):
                raise _err(f"{_p(side)} has kind {k}, expected Int", side)
        if isinstance(a, K.ValueK) or isinstance(b, K.ValueK):
            return K.ValueK(a.tag if isinstance(a, K.ValueK) else b.tag)
        if e.op in ("+", "*"):
            return K.IntK(a.nonneg and b.nonneg)
        if e.op == "-":
            return K.INT
        positive_const = isinstance(e.right, Const) and isinstance(e.right.value, int) \
            and e.right.value > 0
        return K.IntK(a.nonneg and positive_const)

    def _BoolOp(self, e: BoolOp, scope: Scope) -> K.Kind:
        inner = scope
        for v in e.values:
            k = self.infer(v, inner)
            if not _truth_ok(k):
                raise _err(f"{_p(v)} has kind {k}, expected Bool", v)
            facts = facts_when(v, True, inner) if e.op == "and" else facts_when(v, False, inner)
            inner = inner.with_facts(facts)
        return K.BOOL

    def _IfExp(self, e: IfExp, scope: Scope) -> K.Kind:
        k = self.infer(e.test, scope)
        if not _truth_ok(k):
            raise _err(f"{_p(e.test)} has kind {k}, expected Bool", e.test)
        a = self.infer(e.body, scope.with_facts(facts_when(e.test, True, scope)))
        b = self.infer(e.orelse, scope.with_facts(facts_when(e.test, False, scope)))
        j = K.join(a, b)
        if j is None:
            raise _err(f"{_p(e)} has arms of kinds {a} and {b}", e)
        return j

    def _Compare(self, e: Compare, scope: Scope) -> K.Kind:
        left = e.left
        lk = self.infer(left, scope)
        for op, right in zip(e.ops, e.comparators):
            rk = self.infer(right, scope)
            self._check_compare(op, left, lk, right, rk, scope)
            left, lk = right, rk
        return K.BOOL

    def _check_compare(self, op: str, a: Expr, ak: K.Kind, b: Expr, bk: K.Kind,
                       scope: Scope) -> None:
        if op in ("in", "not in"):
            if K.may_be_sequence(bk):
                return
            if not isinstance(bk, K.SeqK):
                raise _err(f"`{print_expr(b)}` has kind {bk}, expected a sequence after `{op}`", b)
            if isinstance(b, TupleExpr):
                for ex in b.elts:
                    self._check_compare("==", a, ak, ex, self.infer(ex, scope), scope)
            else:
                self._check_compare("==", a, ak, b, bk.elem, scope)
            return
        if op in ("<", "<=", ">", ">=") and K.FLOAT in (ak, bk) and not all(
                isinstance(k, (K.IntK, K.BoolK, K.ValueK, K.UnionK, K.MaybeK)) for k in (ak, bk)):
            # a float orders against numbers only (opaque values are left to the evaluator)
            raise _err(f"`{print_expr(a)} {op} {print_expr(b)}` compares {ak} with {bk}", a)
        if isinstance(ak, K.ValueK) or isinstance(bk, K.ValueK):
            return
        if op in ("<", "<=", ">", ">="):
            if isinstance(ak, K.IntK) and isinstance(bk, K.IntK):
                return
            if isinstance(ak, K.SeqK) and isinstance(bk, K.SeqK):
                return
            raise _err(f"`{print_expr(a)} {op} {print_expr(b)}` compares {ak} with {bk}", a)
        # == and !=
        if isinstance(ak, K.NoneK) or isinstance(bk, K.NoneK):
            raise _err(f"`{print_expr(a)} {op} {print_expr(b)}` compares with None; presence "
                       "is present(v)", a, check="rejected-form",
                       hint=f"not present({print_expr(a if isinstance(bk, K.NoneK) else b)})")
        for lit_node, lit_kind, other_kind, other_node in ((a, ak, bk, b), (b, bk, ak, a)):
            if isinstance(lit_node, Const) and isinstance(lit_node.value, str):
                _check_literal(lit_node.value, self._declared(other_node, other_kind, scope),
                               other_node, lit_node)
                return
        if _comparable(ak, bk):
            return
        raise _err(f"`{print_expr(a)} {op} {print_expr(b)}` compares {ak} with {bk}", a)

    def infer_const_kind(self, e: Expr) -> K.Kind:
        return self._Const(e, Scope({})) if isinstance(e, Const) else K.VALUE

    def _declared(self, node: Expr, kind: K.Kind, scope: Scope) -> K.Kind:
        """The kind of `node` before narrowing. A string literal is checked against the
        declared enum (or constructor set), not the narrowed one: `m == 'a' or m != 'a'`
        repeats a test that narrowing has decided, which is redundant but no typo."""
        if isinstance(node, Name) and node.id in scope.narrowed:
            sym = scope.symbols.get(node.id)
            return sym.kind if sym is not None else kind
        if isinstance(node, Attr) and node.attr == "kind" and isinstance(kind, K.StrK):
            base = K.unwrap_maybe(self.infer(node.value, scope))
            if isinstance(base, K.ADTK) and base.name in scope.adts:
                return K.StrK(frozenset(scope.adts[base.name].ctors))
        return kind

    def _TupleExpr(self, e: TupleExpr, scope: Scope) -> K.Kind:
        if not e.elts:
            return K.SeqK(K.INT, 0)
        ks = [self.infer(x, scope) for x in e.elts]
        j = ks[0]
        for x, k in zip(e.elts[1:], ks[1:]):
            nj = K.join(j, k)
            if nj is None:
                nj = K.VALUE
            j = nj
        return K.SeqK(j, len(ks))

    def _Subscript(self, e: Subscript, scope: Scope) -> K.Kind:
        k = self.infer(e.value, scope)
        if K.may_be_sequence(k):
            return k
        if not isinstance(k, K.SeqK):
            raise _err(f"{_p(e.value)} has kind {k}, expected a sequence to subscript", e.value)
        if isinstance(e.index, Slice):
            for part in (e.index.lower, e.index.upper, e.index.step):
                if part is not None:
                    self._expect_index(part, scope)
            return K.SeqK(k.elem)
        self._expect_index(e.index, scope)
        return k.elem

    def _expect_index(self, e: Expr, scope: Scope) -> None:
        # an index is an Int; an opaque value may be one, a float never is
        if self.expect(e, scope, K.INT) == K.FLOAT:
            raise _err(f"{_p(e)} has kind float, expected Int (an index)", e)

    def _Attr(self, e: Attr, scope: Scope) -> K.Kind:
        if e.attr == "value":
            base = e.value
            bk = self.infer(base, scope)
            if isinstance(bk, K.ValueK):
                return bk
            if not isinstance(bk, K.MaybeK):
                raise _err(f"{_p(e)} reads `.value` of {_p(base)}, which has kind {bk}, not a "
                           "Maybe", e)
            if not (isinstance(base, Name) and base.id in scope.present):
                raise _err(f"{_p(e)} is read where present({print_expr(base)}) is not known to "
                           "hold", e, hint=f"guard it: `present({print_expr(base)}) and ...` or "
                           f"`... if present({print_expr(base)}) else ...`")
            return bk.inner
        bk = self.infer(e.value, scope)
        if isinstance(bk, K.ValueK):
            return bk
        if not isinstance(bk, K.ADTK):
            hint = ("a dtype has no fields; the bytes of a tensor `x` are `bytes(x)` (in a "
                    "roofline)") if isinstance(bk, K.DTypeK) else None
            raise _err(f"attribute {_p(e)} is not a declared field ({_p(e.value)} has kind {bk})",
                       e, hint=hint)
        adt = scope.adts.get(bk.name)
        if adt is None:
            raise _err(f"unknown ADT {bk.name}", e, check="name")
        possible = bk.ctors if bk.ctors is not None else frozenset(adt.ctors)
        if e.attr == "kind":
            return K.StrK(frozenset(possible))
        if not possible:
            # A branch that narrowing proved dead (`x.kind != 'a' and x.kind != 'b'`): any
            # declared field may be read there.
            possible = frozenset(c for c in adt.ctors if e.attr in adt.ctors[c].fields)
            if not possible:
                raise _err(f"attribute {_p(e)} is not a declared field", e)
        kinds = []
        for c in sorted(possible):
            f = adt.ctors[c].fields.get(e.attr)
            if f is None:
                if any(e.attr in adt.ctors[o].fields for o in adt.ctors):
                    raise _err(f"{_p(e)} reads a field constructor '{c}' lacks", e,
                               hint=f"read it where the constructor is known, e.g. "
                                    f"`{print_expr(e.value)}.kind == '...' and ...`")
                raise _err(f"attribute {_p(e)} is not a declared field", e)
            kinds.append(f)
        out = kinds[0]
        for k in kinds[1:]:
            out = K.join(out, k) or K.VALUE
        return out

    def _GenExp(self, e: GenExp, scope: Scope) -> K.Kind:
        raise _err("a comprehension is only an argument of all, sum, max or min", e,
                   check="language")

    # -- calls ----------------------------------------------------------------------------

    def _Call(self, e: Call, scope: Scope) -> K.Kind:
        if e.func == "present":
            return self._present(e, scope)
        from opspec.schema.primitives import PRIMITIVES

        prim = PRIMITIVES.get(e.func)
        if prim is None:
            close = closest(e.func, sorted(PRIMITIVES), cutoff=0.7)
            raise _err(f"{e.func} is not a built-in primitive", e, check="language",
                       hint=f"did you mean `{close}`?" if close else
                       "the primitives are listed in docs/primitives.md")
        if prim.role not in scope.roles and prim.role != "value":
            where = {"generator": "a tensor's `values`", "requires": "a tensor's `requires`",
                     "roofline": "a roofline formula", "workload": "a workload row"}
            raise _err(f"{e.func} may only be used in {where.get(prim.role, prim.role)}", e,
                       check="language")
        arity = prim.arity_error(len(e.args), [k for k, _ in e.kwargs])
        if arity is not None:
            raise _err(arity, e)
        arg_kinds = []
        params = list(prim.params)
        if len(e.args) == 1 and isinstance(e.args[0], GenExp) and e.func in ("all", "sum", "max", "min"):
            g = e.args[0]
            it = self.infer(g.iter, scope)
            if not (isinstance(it, K.SeqK) or K.may_be_sequence(it)):
                raise _err(f"{_p(g.iter)} has kind {it}, expected a sequence", g.iter)
            elem = it.elem if isinstance(it, K.SeqK) else K.VALUE
            ek = self.infer(g.elt, scope.bind(g.var, elem))
            arg_kinds.append(K.SeqK(ek))
        else:
            positional = [p for p in params if not p.keyword_only]
            if not prim.variadic and len(e.args) > len(positional):
                raise _err(f"{e.func} takes {len(positional)} arguments, got {len(e.args)}", e)
            for i, a in enumerate(e.args):
                if isinstance(a, GenExp):
                    raise _err("a comprehension is only an argument of all, sum, max or min", a,
                               check="language")
                k = self.infer(a, scope)
                expected = positional[min(i, len(positional) - 1)].kind if positional else K.VALUE
                if not K.assignable(k, expected):
                    raise _err(f"{_p(a)} has kind {k}, expected {expected} (argument {i + 1} of "
                               f"{e.func})", a)
                arg_kinds.append(k)
            required = [p for p in positional if not p.optional]
            if len(e.args) < len(required) and not prim.variadic:
                raise _err(f"{e.func} misses argument {len(e.args) + 1} of {len(positional)}", e)
        by_name = {p.name: p for p in params}
        for kw, v in e.kwargs:
            p = by_name.get(kw)
            if p is None or not (p.keyword_only or p.optional):
                raise _err(f"{e.func} takes no keyword '{kw}' here", e)
            k = self.infer(v, scope)
            if not K.assignable(k, p.kind):
                raise _err(f"{_p(v)} has kind {k}, expected {p.kind} (keyword {kw} of {e.func})", v)
        return prim.result_kind(arg_kinds)

    def _present(self, e: Call, scope: Scope) -> K.Kind:
        if len(e.args) != 1 or e.kwargs or not isinstance(e.args[0], Name):
            raise _err(f"{_p(e)}: present takes one name", e)
        n = e.args[0].id
        if n == "out":
            if not scope.has_out:
                raise _err(f"{_p(e)}: no output declares `buffer: out`", e, check="name")
            return K.BOOL
        sym = scope.symbols.get(n)
        if sym is None:
            raise _err(f"unknown name `{n}`", e.args[0], check="name")
        if sym.role == TENSOR or isinstance(sym.kind, K.MaybeK):
            return K.BOOL
        raise _err(f"{_p(e)} names no tensor, `Maybe` parameter or `out`", e)


def _check_literal(lit: str, kind: K.Kind, node: Expr, lit_node: Expr) -> None:
    k = K.unwrap_maybe(kind)
    if isinstance(k, K.ValueK):
        return
    if isinstance(k, K.UnionK):
        # `int | tuple[int] | 'valid' | 'same'`: the literal meets the enum (or dtype) member.
        members = [m for m in k.members if isinstance(m, (K.StrK, K.DTypeK, K.ValueK))]
        error = None
        for m in members:
            try:
                _check_literal(lit, m, node, lit_node)
                return
            except ExpressionError as exc:
                error = exc
        if error is not None:
            raise error
    if isinstance(k, K.StrK):
        if k.literals is not None and lit not in k.literals:
            raise _err(f"`{print_expr(node)}` compares with '{lit}', which is not one of "
                       f"{sorted(k.literals)}", lit_node)
        return
    if isinstance(k, K.DTypeK):
        if lit not in K.DTYPES:
            raise _err(f"'{lit}' is not a dtype name", lit_node)
        if k.members is not None and lit not in k.members:
            raise _err(f"`{print_expr(node)}` compares with '{lit}', which is not one of "
                       f"{sorted(k.members)}", lit_node)
        return
    raise _err(f"`{print_expr(node)}` tests a {kind} against '{lit}'", lit_node)


def _comparable(a: K.Kind, b: K.Kind) -> bool:
    a, b = K.unwrap_maybe(a), K.unwrap_maybe(b)
    if isinstance(a, K.UnionK):
        return any(_comparable(m, b) for m in a.members)
    if isinstance(b, K.UnionK):
        return any(_comparable(a, m) for m in b.members)
    if isinstance(a, K.ValueK) or isinstance(b, K.ValueK):
        return True
    if isinstance(a, K.IntK) and isinstance(b, K.IntK):
        return True
    if type(a) is type(b) and not isinstance(a, K.IntK):
        if isinstance(a, K.ADTK):
            return a.name == b.name
        return True
    return isinstance(a, K.SeqK) and isinstance(b, K.SeqK)


# -- narrowing ----------------------------------------------------------------------------

def facts_when(test: Expr, truth: bool, scope: Scope) -> Facts:
    """The narrowing facts that hold where `test` evaluates to `truth`."""
    if isinstance(test, UnaryOp) and test.op == "not":
        return facts_when(test.operand, not truth, scope)
    if isinstance(test, BoolOp):
        if (test.op == "and") == truth:
            out = NO_FACTS
            inner = scope
            for v in test.values:
                f = facts_when(v, truth, inner)
                out = out | f
                inner = inner.with_facts(f)
            return out
        return NO_FACTS
    if isinstance(test, Call) and test.func == "present" and len(test.args) == 1 \
            and isinstance(test.args[0], Name):
        return Facts(present=frozenset({test.args[0].id})) if truth else NO_FACTS
    if isinstance(test, Compare) and len(test.ops) == 1:
        op = test.ops[0]
        a, b = test.left, test.comparators[0]
        if isinstance(a, Const) and not isinstance(b, Const):
            a, b = b, a
        lits = None
        if op in ("==", "!=") and isinstance(b, Const) and isinstance(b.value, str):
            lits = frozenset({b.value})
            positive = (op == "==") == truth
        elif op in ("in", "not in") and isinstance(b, TupleExpr) and all(
                isinstance(x, Const) and isinstance(x.value, str) for x in b.elts):
            lits = frozenset(x.value for x in b.elts)
            positive = (op == "in") == truth
        if lits is None:
            return NO_FACTS
        return _narrow_literal(a, lits, positive, scope)
    return NO_FACTS


def _narrow_literal(target: Expr, lits: frozenset[str], positive: bool, scope: Scope) -> Facts:
    if isinstance(target, Name):
        sym = scope.symbols.get(target.id)
        k = scope.narrowed.get(target.id, sym.kind if sym else None)
        if isinstance(k, K.StrK) and k.literals is not None:
            keep = k.literals & lits if positive else k.literals - lits
            return Facts({target.id: K.StrK(frozenset(keep))})
        if isinstance(k, K.UnionK):
            # `padding == 'valid'` narrows `int | tuple[int] | 'valid' | 'same'` to the
            # literal; `padding != 'valid'` drops it from the enum member.
            enum = next((m for m in k.members if isinstance(m, K.StrK)
                         and m.literals is not None), None)
            if enum is None:
                return NO_FACTS
            if positive:
                return Facts({target.id: K.StrK(enum.literals & lits)})
            rest = enum.literals - lits
            members = tuple(m if m is not enum else K.StrK(rest) for m in k.members
                            if m is not enum or rest)
            return Facts({target.id: members[0] if len(members) == 1 else K.UnionK(members)})
        return NO_FACTS
    if isinstance(target, Attr) and target.attr == "kind":
        # `layout.kind == 'c'`, or `layout.value.kind == 'c'` for a Maybe ADT parameter
        base = target.value
        maybe = isinstance(base, Attr) and base.attr == "value"
        if maybe:
            base = base.value
        if not isinstance(base, Name):
            return NO_FACTS
        name = base.id
        sym = scope.symbols.get(name)
        k = scope.narrowed.get(name, sym.kind if sym else None)
        inner = K.unwrap_maybe(k) if maybe else k
        if isinstance(inner, K.ADTK) and inner.name in scope.adts:
            possible = inner.ctors if inner.ctors is not None else \
                frozenset(scope.adts[inner.name].ctors)
            keep = possible & lits if positive else possible - lits
            narrowed = K.ADTK(inner.name, frozenset(keep))
            return Facts({name: K.MaybeK(narrowed) if maybe and isinstance(k, K.MaybeK)
                          else narrowed})
    return NO_FACTS
