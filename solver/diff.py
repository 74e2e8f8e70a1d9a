"""Backward compatibility of two versions of the same ops (`opspec diff OLD NEW`).

A change of an op's spec is backward compatible when every call that the OLD spec accepts
is still accepted by the NEW spec, with outputs of the same type: the same output names,
and the same dtypes and shapes for the same inputs. `diff_manifests` decides it op by op
and returns a `DiffReport`; an incompatibility is a `Finding` (a `Diagnostic` with a
check id of `DIFF_CHECKS`) naming the declaration at fault and, where one exists, a
concrete call that shows it.

The method, for each op present in both (an op missing from NEW is itself incompatible;
an op new in NEW is fine):

1. The two calls' signatures, compared syntactically (exact). The construction call: every
   OLD parameter keeps its name, its position among the positional parameters (or stays
   keyword-only), its default, and a type that accepts every OLD value (no enum literal,
   dtype or `None` removed); a NEW parameter has a default. The forward call: every OLD
   input keeps its name and position; a NEW input is optional; `out=` stays; the outputs
   keep their names and order. A tensor's placement (`device`, `contiguous`) is not
   tightened.
2. Per combination of OLD's discriminant values that OLD does not exclude (its plan
   branches), the NEW combination that the same call selects: the same parameter values,
   a parameter new in NEW at its default, an optional tensor passed iff OLD's call passes
   it, `out=` as in OLD. A NEW domain restriction that excludes it, a NEW type family
   without a case for it, a tensor that one side takes and the other refuses, or an
   output that is None on one side only decides the branch without Z3 (exact).
3. Z3, per pair of branches. Both specs are encoded over one call: the parameter values,
   and for each tensor passed its actual shape `shape(x)` (a sequence of Dims) and dtype
   `dtype(x)`. Each side is encoded *through its solving order* (the Plan's steps): each
   index is defined from the actual shapes as the runtime solves it (`M := shape(a)[0]`,
   `N := (shape(x)[1] - e) // a`, `S := shape(x)[i:len - j]`, `T := dtype(x)`), lets from
   their expressions, and every other step is a check (ranks, checked axes and dtypes, the
   exactness of an affine solve, dtype sets, refinements, ADT invariants, dtype combos,
   non-negative output axes, and each expression evaluating without raising). OLD's checks
   are assumed; the question is whether some NEW check can fail. Because NEW's indices are
   functions of the call, "NEW rejects the call" is the quantifier-free disjunction of its
   checks' negations. The first check that fails, in NEW's runtime order, is the
   declaration that rejects the call; that one is then assumed and the question asked
   again, so every NEW declaration that rejects some OLD call is reported. Last, with
   every check of both sides assumed: can an output's shape or dtype differ? A pair of
   branches whose encodings are the same but for declaration paths (the same steps, dtype
   sets, tensors and output types) needs no question: they accept the same calls and type
   them alike (exact). Each distinct pair is asked once.

What is exact and what is not: steps 1 and 2 are exact. Step 3 is exact where the encoding
is (integer arithmetic, `//` and `%`, comparisons, sequences, dtypes, enums, Maybe values,
the primitives with exact facts) and every model is confirmed by the concrete evaluator
before it is reported. Its approximations: actual ranks are bounded by `MAX_RANK`; a NEW
primitive that *raises* on an OLD call is not found (primitive facts and the CEGAR lemmas
assume each application evaluates), only the domain conditions of the exact encoding
(`//` by zero, an index out of range, `.value` of an absent Maybe) count as rejections;
tensor contents (`values`, `requires`), effects (`mutated`, `alias`) and the device rules
beyond `device`/`contiguous` are not compared; a question Z3 cannot decide within the
resource limit is reported as `undecided` (the op's verdict is then `unknown`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import z3

from opspec.schema import kinds as K
from opspec.schema.check_docs import CHECK_DOCS
from opspec.schema.diagnostics import DIFF_CHECK_IDS, Diagnostic, Severity
from opspec.schema.elaborate import ElaboratedSpec, TensorDecl, elaborate, elaborate_adts
from opspec.schema.expr import (
    BinOp, BoolOp, Call, Compare, Const, Expr, Name, ShapeList, Slice, Splat, Subscript,
    TupleExpr,
)
from opspec.schema.loader import LoadedSpec, Manifest
from opspec.schema.printer import print_expr, print_shape
from opspec.schema.values import ADTValue, to_tuple
from opspec.solver import plan as P
from opspec.solver.discriminants import combinations, describe_value, discriminants
from opspec.solver.encode import MAX_RANK, EncodeError, Encoder, solve
from opspec.solver.fold import Folder, adt_facts
from opspec.solver.order import BranchResult, plan_branch
from opspec.solver.z3env import DEFAULT_RLIMIT, Verdict, fresh_context, make_solver

__all__ = ["DIFF_CHECKS", "COMPATIBLE", "INCOMPATIBLE", "UNKNOWN", "ADDED", "REMOVED",
           "Finding", "OpDiff", "DiffReport", "diff_manifests", "diff_specs"]

COMPATIBLE, INCOMPATIBLE, UNKNOWN = "compatible", "incompatible", "unknown"
ADDED, REMOVED = "added", "removed"
VERDICTS = (COMPATIBLE, INCOMPATIBLE, UNKNOWN, ADDED, REMOVED)

#: The check ids of `opspec diff`, each with what makes it fire: the ids are registered in
#: `opspec.schema.diagnostics.DIFF_CHECK_IDS` (part of `CHECK_IDS`), the meanings are those of
#: the one check table, `opspec.schema.check_docs.CHECK_DOCS`.
DIFF_CHECKS: dict[str, str] = {c: CHECK_DOCS[c][0] for c in DIFF_CHECK_IDS}


@dataclass(frozen=True)
class Finding(Diagnostic):
    """One incompatibility (or undecided question) of `opspec diff`: a `Diagnostic` whose
    `check` is one of `DIFF_CHECKS`, whose `path` and `pos` point into the `side` spec
    ("old" or "new") the declaration belongs to."""

    side: str = "new"

    def __post_init__(self) -> None:
        if self.check not in DIFF_CHECKS:
            raise ValueError(f"unknown diff check {self.check!r}; known: {tuple(DIFF_CHECKS)}")

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["side"] = self.side
        return out


@dataclass
class OpDiff:
    """The comparison of one op: its verdict, the findings, how many OLD combinations of
    discriminant values were compared."""

    op: str
    file: str                 # NEW's file (OLD's when the op was removed)
    old_file: str | None
    new_file: str | None
    status: str
    verdict: str = COMPATIBLE
    diagnostics: list[Finding] = field(default_factory=list)
    combinations: int | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "verdict": self.verdict, "old_file": self.old_file,
                "new_file": self.new_file, "status": self.status,
                "combinations": self.combinations, "seconds": round(self.seconds, 4),
                "diagnostics": [d.to_json() for d in self.diagnostics]}


@dataclass
class DiffReport:
    specs: list[OpDiff] = field(default_factory=list)
    #: problems of no one op (files that do not load)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.all_diagnostics)

    @property
    def all_diagnostics(self) -> list[Diagnostic]:
        return list(self.diagnostics) + [d for s in self.specs for d in s.diagnostics]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ops": len(self.specs)}
        for v in VERDICTS:
            out[v] = sum(s.verdict == v for s in self.specs)
        out["errors"] = sum(d.is_error for d in self.all_diagnostics)
        out["seconds"] = round(self.seconds, 3)
        return out


# -- the driver ------------------------------------------------------------------------------

def diff_manifests(old: Manifest, new: Manifest, *, ops: Iterable[str] | None = None,
                   rlimit: int = DEFAULT_RLIMIT) -> DiffReport:
    """Compare every op of `old` (or those named in `ops`) with the same op of `new`."""
    start = time.perf_counter()
    report = DiffReport()
    wanted = list(dict.fromkeys(ops)) if ops else None
    names = wanted if wanted is not None else list(dict.fromkeys([*old.specs, *new.specs]))
    for m in (old, new):
        for d in m.diagnostics:
            if d.op is None and d.is_error:
                report.diagnostics.append(d)
    adts_old, adiags_old = elaborate_adts(old.adts, old.adt_pos)
    adts_new, adiags_new = elaborate_adts(new.adts, new.adt_pos)
    report.diagnostics.extend(d for d in adiags_old + adiags_new if d.is_error)
    for name in names:
        lo, ln = old.specs.get(name), new.specs.get(name)
        t0 = time.perf_counter()
        if lo is None and ln is None:
            continue
        if lo is None:
            r = OpDiff(name, ln.file, None, ln.file, _status(ln), ADDED)
        elif ln is None:
            r = OpDiff(name, lo.file, lo.file, None, _status(lo), REMOVED)
            r.diagnostics.append(Finding(
                "removed-op", f"op `{name}` is in OLD but not in NEW: every call of it breaks",
                op=name, path=None, pos=lo.key_pos(), side="old"))
        else:
            r = diff_specs(lo, ln, adts_old, adts_new, rlimit=rlimit,
                           load_diags=(_op_diags(old, name), _op_diags(new, name)))
        r.seconds = time.perf_counter() - t0
        report.specs.append(r)
    report.seconds = time.perf_counter() - start
    return report


def _status(loaded: LoadedSpec) -> str:
    return loaded.spec.status if loaded.spec is not None else "?"


def _op_diags(m: Manifest, name: str) -> list[Diagnostic]:
    return [d for d in m.diagnostics if d.op == name]


def diff_specs(lo: LoadedSpec, ln: LoadedSpec, adts_old: Mapping[str, Any],
               adts_new: Mapping[str, Any], *, rlimit: int = DEFAULT_RLIMIT,
               load_diags: tuple[list[Diagnostic], list[Diagnostic]] = ([], [])) -> OpDiff:
    """Compare one op's OLD and NEW spec (both loaded; ADTs elaborated per manifest)."""
    r = OpDiff(ln.name, ln.file, lo.file, ln.file, _status(ln))
    so, do = elaborate(lo, adts_old) if lo.spec is not None else (None, [])
    sn, dn = elaborate(ln, adts_new) if ln.spec is not None else (None, [])
    broken = []
    for side, loaded, spec, diags, extra in (("old", lo, so, do, load_diags[0]),
                                               ("new", ln, sn, dn, load_diags[1])):
        errors = [d for d in list(extra) + list(diags) if d.is_error]
        if spec is None or errors or spec.broken:
            first = errors[0].render() if errors else "required fields are missing"
            broken.append(Finding(
                "broken-spec", f"the {side.upper()} spec of `{loaded.name}` has "
                f"{len(errors) or 'some'} error(s) (run `opspec prove` on it); first: {first}",
                op=loaded.name, pos=loaded.key_pos(), side=side,
                severity=Severity.ERROR if side == "new" else Severity.ADVISORY))
    if broken:
        r.diagnostics.extend(broken)
        r.verdict = INCOMPATIBLE if any(b.is_error for b in broken) else UNKNOWN
        return r
    d = _OpDiffer(lo, ln, so, sn, rlimit)
    with fresh_context():
        d.run()
    r.diagnostics = d.findings
    r.combinations = d.combos
    r.verdict = (INCOMPATIBLE if any(f.is_error for f in d.findings) else
                 UNKNOWN if any(f.check == "undecided" for f in d.findings) else COMPATIBLE)
    return r


# -- parameter types -------------------------------------------------------------------------

_NO_VALUE = object()
#: The largest axis length a counterexample is first looked for with.
_SMALL = 64


def lost_value(old: K.Kind, new: K.Kind, adts_old: Mapping[str, Any] | None = None,
               adts_new: Mapping[str, Any] | None = None) -> tuple[Any, str] | None:
    """None when every value of kind `old` is a value of kind `new`; else (a value OLD
    accepts and NEW does not, or `_NO_VALUE` when none can be named, and why)."""
    if isinstance(old, K.ADTK) and isinstance(new, K.ADTK) and old.name == new.name:
        return _lost_ctor(old.name, adts_old or {}, adts_new or {})
    if isinstance(old, K.MaybeK) and isinstance(new, K.ValueK):
        # `assignable` lets any value into an opaque kind (`float`), None too; a call passing
        # None to `float | None` breaks when it becomes `float`.
        return None, "None is no longer accepted"
    if old == new or K.assignable(old, new):
        return None
    if isinstance(old, K.MaybeK):
        if not isinstance(new, K.MaybeK):
            return None, "None is no longer accepted"
        return lost_value(old.inner, new.inner, adts_old, adts_new)
    if isinstance(new, K.MaybeK):
        return lost_value(old, new.inner, adts_old, adts_new)
    if isinstance(old, K.UnionK):
        for m in old.members:
            lost = lost_value(m, new, adts_old, adts_new)
            if lost is not None:
                return lost
        return None
    if isinstance(new, K.UnionK):
        if any(K.assignable(old, m) for m in new.members):
            return None
        same = [m for m in new.members if type(m) is type(old)]
        if len(same) == 1:
            return lost_value(old, same[0], adts_old, adts_new)
    if isinstance(old, K.StrK) and isinstance(new, K.StrK) and new.literals is not None:
        if old.literals is None:
            return _NO_VALUE, f"any string was accepted; NEW accepts only {new}"
        lost = sorted(old.literals - new.literals)
        return lost[0], f"the literal '{lost[0]}' was removed (NEW: {new})"
    if isinstance(old, K.DTypeK) and isinstance(new, K.DTypeK) and new.members is not None:
        gone = sorted((old.members or frozenset(K.DTYPES)) - new.members)
        return gone[0], f"the dtype {gone[0]} was removed (NEW: {new})"
    if isinstance(old, K.IntK) and isinstance(new, K.IntK):
        return -1, "negative values are no longer accepted (Int became Dim)"
    if isinstance(old, K.SeqK) and isinstance(new, K.SeqK):
        if new.length is not None and old.length != new.length:
            n = new.length + 1 if old.length is None else old.length
            return tuple([0] * n), f"the length is fixed to {new.length} in NEW"
        return lost_value(old.elem, new.elem, adts_old, adts_new)
    return _NO_VALUE, f"the type changed from {old} to {new}"


def _lost_ctor(adt: str, adts_old: Mapping[str, Any], adts_new: Mapping[str, Any]
               ) -> tuple[Any, str] | None:
    a, b = adts_old.get(adt), adts_new.get(adt)
    if a is None or b is None:
        return None
    for cname, c in a.ctors.items():
        nc = b.ctors.get(cname)
        if nc is None:
            return f"{{{cname}: ...}}", f"the constructor `{cname}` of {adt} was removed"
        for f, k in c.fields.items():
            if f not in nc.fields:
                return _NO_VALUE, f"the field `{f}` of {adt}.{cname} was removed"
            lost = lost_value(k, nc.fields[f], adts_old, adts_new)
            if lost is not None:
                return lost[0], f"field `{f}` of {adt}.{cname}: {lost[1]}"
        extra = sorted(set(nc.fields) - set(c.fields))
        if extra:
            return _NO_VALUE, f"{adt}.{cname} has the new field(s) {extra}"
    return None


def _same_default(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_default(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _link_shape(k: K.Kind) -> Any:
    """The representation of a kind's values in the encoder, ignoring literal and member
    sets: two parameters with the same one can be equated across the two encodings."""
    if isinstance(k, K.MaybeK):
        return ("Maybe", _link_shape(k.inner))
    if isinstance(k, K.UnionK):
        return ("Union",) + tuple(_link_shape(m) for m in k.members)
    if isinstance(k, K.SeqK):
        return ("Seq", _link_shape(k.elem), k.length)
    if isinstance(k, K.IntK):
        return "Int"
    if isinstance(k, K.StrK):
        return "Str"
    if isinstance(k, K.DTypeK):
        return "DType"
    if isinstance(k, K.ADTK):
        return ("ADT", k.name)
    return (type(k).__name__, str(k))


def _relax(k: K.Kind) -> K.Kind:
    """An index's or let's kind without the facts the encoder would assume of it (Dim >= 0,
    dtype membership): where the runtime checks them, they are checks here."""
    if isinstance(k, K.IntK):
        return K.INT
    if isinstance(k, K.DTypeK):
        return K.DTYPE
    if isinstance(k, K.MaybeK):
        return K.MaybeK(_relax(k.inner))
    return k


def _member(v: Any, values: Sequence[Any]) -> bool:
    return any(type(v) is type(x) and v == x for x in values)


def _plain(v: Any) -> Any:
    return str(v) if isinstance(v, ADTValue) else v


def _adt_default(spec: ElaboratedSpec, name: str, v: Any) -> Any:
    inner = K.unwrap_maybe(spec.params[name].kind)
    if isinstance(inner, K.ADTK) and isinstance(v, dict) and len(v) == 1:
        (ctor, fields), = v.items()
        return ADTValue.of(inner.name, ctor, fields if isinstance(fields, dict) else {})
    return to_tuple(v)


def _adt_fields(spec: ElaboratedSpec) -> dict[str, K.Kind]:
    """The encoder's `adt_fields` of a spec's ADT parameters (as the prover names them)."""
    out = {}
    for n, p in spec.params.items():
        k = K.unwrap_maybe(p.kind)
        if isinstance(k, K.ADTK) and k.name in spec.adts:
            base = f"{n}.value" if isinstance(p.kind, K.MaybeK) else n
            out[f"{base}.kind"] = K.StrK(frozenset(spec.adts[k.name].ctors))
            for c in spec.adts[k.name].ctors.values():
                for f, fk in c.fields.items():
                    out[f"{base}.{f}"] = fk
    return out


def _fingerprint(spec: ElaboratedSpec, res: BranchResult, invariants: list) -> tuple:
    """Everything the encoding of a branch reads, declaration paths aside: two branches with
    the same fingerprint accept the same calls and give them the same output types."""
    steps = tuple((st.kind, st.target, st.expr, st.axis, st.from_end, st.coeff, st.offset,
                   st.stop, st.rank, st.splats)
                  for st in res.branch.construction + res.branch.call
                  if st.kind not in (P.PRESENCE, P.DOMAIN, P.OUT_BUFFER))
    sets = tuple(sorted((st.expr.id, str(spec.forall.get(st.expr.id)))
                        for st in res.branch.call + res.branch.construction
                        if st.kind == P.SOLVE_DTYPE))
    tensors = tuple((n, spec.tensors[n].role, res.shapes.get(n), res.dtypes.get(n))
                    for n in res.branch.present)
    outputs = tuple((o.name, o.dtype, o.shape) for o in res.branch.outputs)
    unsolved = tuple(sorted((u.name, str(spec.forall.get(u.name))) for u in res.unsolved))
    combos = tuple(tuple(sorted(r.items())) for r in spec.dtype_combos)
    shadowed = tuple(sorted(n for n in K.DTYPES if n in spec.symbols))
    # A Maybe parameter absent on the branch is None in every expression `_Side` encodes,
    # which the plan's steps (`coalesce_dtype(dtype, T)`) do not show.
    absent = tuple(sorted(k for k, v in res.branch.combo if v is False and k.startswith(
        "present(") and k[len("present("):-1] in spec.params))
    return (steps, sets, tensors, outputs, unsolved, combos, shadowed,
            tuple((d, e) for d, _, e in invariants), bool(res.not_discriminant), absent)


# -- one side of a branch, encoded through its solving order ---------------------------------

def _shape_var(n: str) -> str:
    return f"shape({n})"


def _dtype_var(n: str) -> str:
    return f"dtype({n})"


def _out_shape_var(n: str) -> str:
    return f"shape(out:{n})"


def _out_dtype_var(n: str) -> str:
    return f"dtype(out:{n})"


def _add(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(b, Const) and b.value == 0:
        return a
    return BinOp("+", a, b)


def _len(e: Expr) -> Expr:
    return Call("len", (e,))


def _eq(a: Expr, b: Expr) -> Expr:
    return Compare(a, ("==",), (b,))


@dataclass
class _Check:
    decl: str
    what: str
    cond: z3.BoolRef
    index: int = 0


class _Side:
    """One spec's branch as Z3 constraints over the shared call: `defs` (the solved indices,
    lets and output types, always asserted) and `checks` (everything the runtime checks, in
    its order)."""

    def __init__(self, spec: ElaboratedSpec, res: BranchResult, enc: Encoder,
                 invariants: list[tuple[str, str, Expr]], assume_kinds: bool):
        self.spec, self.res, self.enc = spec, res, enc
        self.invariants = invariants
        #: OLD side: unsolved indices keep the facts of their kinds (they are existential)
        self.assume_kinds = assume_kinds
        self.defs: list[z3.BoolRef] = []
        self.checks: list[_Check] = []
        self.solved: set[str] = set()
        self.outputs: dict[str, ShapeList] = {}
        # A dtype name written bare (`dtype: float32`) is the literal 'float32' to the encoder.
        self._folder = Folder(spec, dict(res.branch.combo))
        self._subst: dict[str, Expr] = {n: Const(n) for n in K.DTYPES if n not in spec.symbols}
        # A Maybe parameter absent on this branch is None in every expression: primitives
        # then see a None, whose facts are exact (`per_axis(None, ..., fallback=H)` is H),
        # where an unconstrained payload left only the CEGAR loop, which need not converge.
        for key, v in res.branch.combo:
            name = key[len("present("):-1] if key.startswith("present(") else None
            if v is False and name in spec.params:
                self._subst[name] = Const(None)

    def lit(self, e: Expr) -> Expr:
        return self._folder.expr(e, self._subst)

    def check(self, decl: str, what: str, e: Expr) -> None:
        mark = len(self.enc.domain)
        cond = self.enc.expr(self.lit(e))
        dom = [c for _, c in self.enc.domain[mark:]]
        self.checks.append(_Check(decl, what, z3.And(*dom, cond) if dom else cond,
                                  len(self.checks)))

    def define(self, decl: str, what: str, name: str, e: Expr) -> None:
        mark = len(self.enc.domain)
        self.defs.append(self.enc.equal(Name(name), self.lit(e)))
        dom = [c for _, c in self.enc.domain[mark:]]
        if dom:
            self.checks.append(_Check(decl, what + " cannot be evaluated", z3.And(*dom),
                                      len(self.checks)))
        self.solved.add(name)

    def build(self) -> None:
        for decl, what, e in self.invariants:
            self.check(decl, what or "the parameter's constructor and fields", e)
        for st in self.res.branch.construction + self.res.branch.call:
            self.step(st)
        self.dtype_combos()
        for o in self.res.branch.outputs:
            self.output(o)
        if self.assume_kinds:
            for u in self.res.unsolved:
                kind = self.spec.forall.get(u.name)
                if isinstance(kind, K.IntK) and kind.nonneg:
                    self.defs.append(self.enc.expr(Compare(Name(u.name), (">=",), (Const(0),))))
                elif isinstance(kind, K.DTypeK) and kind.members:
                    self.defs.append(self.enc.expr(self._in_dtypes(Name(u.name), kind.members)))

    @staticmethod
    def _in_dtypes(e: Expr, members: Iterable[str]) -> Expr:
        return Compare(e, ("in",), (TupleExpr(tuple(Const(m) for m in sorted(members))),))

    def _pos(self, shape: ShapeList, i: int) -> Expr:
        """The position of declared axis `i` in the actual shape, from the left."""
        pos: Expr = Const(sum(1 for a in shape.axes[:i] if not isinstance(a, Splat)))
        for a in shape.axes[:i]:
            if isinstance(a, Splat):
                pos = _add(pos, _len(a.value))
        return pos

    def step(self, st: P.Step) -> None:
        spec, res = self.spec, self.res
        if st.kind in (P.PRESENCE, P.DOMAIN, P.OUT_BUFFER, P.BRANCH, P.DEVICE, P.OUTPUT):
            return
        t = st.target
        actual = Name(_shape_var(t))
        role = {"input": "input", "ctensor": "construction-time tensor", "output": "output"}.get(
            spec.tensors[t].role, "") if t in spec.tensors else ""
        if st.kind == P.RANK:
            want: Expr = Const(st.rank)
            for s in st.splats:
                want = _add(want, _len(s))
            op = ">=" if st.axis == -1 else "=="
            declared = print_shape(spec.tensors[t].shape)
            self.check(st.decl, f"{role} `{t}`: the rank of {declared} must be "
                       f"{'at least ' if op == '>=' else ''}{print_expr(want)}",
                       Compare(_len(actual), (op,), (want,)))
            return
        if st.kind == P.SOLVE_DTYPE:
            n = st.expr.id
            self.define(st.decl, f"{role} `{t}`: dtype {n}", n, Name(_dtype_var(t)))
            members = spec.forall[n].members if isinstance(spec.forall.get(n), K.DTypeK) else None
            if members:
                # The set is declared with the index: point there (the runtime's message
                # names the tensor, as `what` does).
                self.check(f"signature.forall.{n}", f"{role} `{t}`: dtype {n} must be one of "
                           f"{' | '.join(sorted(members))}",
                           self._in_dtypes(Name(_dtype_var(t)), members))
            return
        if st.kind == P.CHECK_DTYPE:
            self.check(st.decl, f"{role} `{t}`: its dtype must be `{print_expr(st.expr)}`",
                       _eq(Name(_dtype_var(t)), st.expr))
            return
        if st.kind in (P.SOLVE_AXIS, P.SOLVE_SPLAT, P.CHECK_AXIS):
            self.axis_step(st, res.shapes[t], role, actual)
            return
        if st.kind == P.LET:
            self.define(st.decl, f"let {st.target} = `{print_expr(st.expr)}`", st.target, st.expr)
            return
        if st.kind == P.RULE:
            self.check(st.decl, f"refinement `{print_expr(st.expr)}` must hold", st.expr)
            return
        if st.kind == P.NONNEG:
            self.check(st.decl, f"output `{t}`: axis {st.axis}, `{print_expr(st.expr)}`, must "
                       "be >= 0", Compare(st.expr, (">=",), (Const(0),)))
            return
        raise EncodeError(f"plan step {st.kind} is not covered")

    def axis_step(self, st: P.Step, shape: ShapeList, role: str, actual: Name) -> None:
        t = st.target
        term = print_shape(shape)
        pos = self._pos(shape, st.axis)
        ax = shape.axes[st.axis]
        if st.kind == P.SOLVE_SPLAT:
            after = shape.axes[st.axis + 1:]
            stop: Expr = Const(sum(1 for a in after if not isinstance(a, Splat)))
            for a in after:
                if isinstance(a, Splat):
                    stop = _add(stop, _len(a.value))
            upper = BinOp("-", _len(actual), stop)
            self.define(st.decl, f"{role} `{t}`: *{st.expr.id} of {term}", st.expr.id,
                        Subscript(actual, Slice(pos, upper)))
            return
        if isinstance(ax, Splat):
            self.check(st.decl, f"{role} `{t}`: *{print_expr(ax.value)} of {term} must equal "
                       f"`{print_expr(ax.value)}`",
                       _eq(Subscript(actual, Slice(pos, _add(pos, _len(ax.value)))), ax.value))
            return
        at = Subscript(actual, pos)
        if st.kind == P.CHECK_AXIS:
            self.check(st.decl, f"{role} `{t}`: axis {st.axis} of {term} must equal "
                       f"`{print_expr(ax)}`", _eq(at, ax))
            return
        n = st.expr.id
        if st.coeff is None:
            self.define(st.decl, f"{role} `{t}`: axis {st.axis} of {term}", n, at)
            return
        v: Expr = at if st.offset is None or st.offset == Const(0) else BinOp("-", at, st.offset)
        self.check(st.decl, f"{role} `{t}`: axis {st.axis} of {term} must be "
                   f"`{print_expr(ax)}` for a whole {n} >= 0",
                   BoolOp("and", (_eq(BinOp("%", v, st.coeff), Const(0)),
                                  Compare(v, (">=",), (Const(0),)))))
        self.define(st.decl, f"{role} `{t}`: axis {st.axis} of {term}", n,
                    BinOp("//", v, st.coeff))

    def dtype_combos(self) -> None:
        spec = self.spec
        if not spec.dtype_combos:
            return
        keys = list(spec.dtype_combos[0])
        if not all(k in self.solved or k in spec.params for k in keys):
            return  # the runtime checks the combos only where every key is known
        rows = TupleExpr(tuple(TupleExpr(tuple(Const(r[k]) for k in keys))
                               for r in spec.dtype_combos))
        self.check("signature.dtype_combos", f"the dtypes ({', '.join(keys)}) must be one of "
                   "the dtype_combos rows",
                   Compare(TupleExpr(tuple(Name(k) for k in keys)), ("in",), (rows,)))

    def output(self, o: P.OutputType) -> None:
        enc = self.enc
        mark = len(enc.domain)
        parts = []
        for ax in o.shape.axes:
            if isinstance(ax, Splat):
                parts.append(enc.expr(self.lit(ax.value)))
            else:
                parts.append(z3.Unit(enc.expr(self.lit(ax))))
        seq = (z3.Empty(z3.SeqSort(z3.IntSort())) if not parts else
               parts[0] if len(parts) == 1 else z3.Concat(*parts))
        self.defs.append(enc.var(_out_shape_var(o.name)) == seq)
        self.defs.append(enc.equal(Name(_out_dtype_var(o.name)), self.lit(o.dtype)))
        dom = [c for _, c in enc.domain[mark:]]
        if dom:
            self.checks.append(_Check(o.decl, f"output `{o.name}`: its type "
                                      f"Tensor[{print_expr(o.dtype)}, {print_shape(o.shape)}] "
                                      "cannot be evaluated", z3.And(*dom), len(self.checks)))
        self.outputs[o.name] = o.shape


# -- one op ----------------------------------------------------------------------------------

class _OpDiffer:
    def __init__(self, lo: LoadedSpec, ln: LoadedSpec, so: ElaboratedSpec, sn: ElaboratedSpec,
                 rlimit: int):
        self.lo, self.ln, self.so, self.sn = lo, ln, so, sn
        self.rlimit = rlimit
        self.findings: list[Finding] = []
        self._seen: set[tuple] = set()
        self.combos = 0
        #: NEW declarations already reported as rejecting some call (assumed from then on)
        self.rejecting: set[str] = set()
        #: OLD parameters whose values cannot be carried to NEW (the branch questions skip)
        self.unlinked: set[str] = set()
        self._asked: set[tuple] = set()

    # reporting
    def report(self, check: str, side: str, path: str | None, message: str, *,
               counterexample: Mapping[str, Any] | None = None, hint: str | None = None,
               severity: Severity = Severity.ERROR, dedup: Any = None) -> None:
        key = (check, side, path, dedup)
        if key in self._seen:
            return
        self._seen.add(key)
        loaded = self.lo if side == "old" else self.ln
        pos = loaded.pos(path) if path else loaded.key_pos()
        self.findings.append(Finding(check, message, op=loaded.name, path=path, pos=pos,
                                     severity=severity, side=side, hint=hint,
                                     counterexample=dict(counterexample) if counterexample
                                     else None))

    def run(self) -> None:
        self.params()
        self.inputs()
        self.outputs()
        self.branches()
        # An undecided question about a declaration that another call shows incompatible
        # says nothing more.
        decided = {f.path for f in self.findings if f.is_error}
        self.findings = [f for f in self.findings if f.check != "undecided"
                         or f.path not in decided]

    # -- 1. the signatures ---------------------------------------------------------------

    def _ctor_params(self, loaded: LoadedSpec, spec: ElaboratedSpec) -> list[tuple[str, Any]]:
        """The construction call's parameters in order: (name, ParamDecl or TensorDecl)."""
        out = []
        for n in loaded.spec.signature.params:
            if n in spec.params:
                out.append((n, spec.params[n]))
            elif n in spec.ctensors:
                out.append((n, spec.ctensors[n]))
        return out

    def params(self) -> None:
        so, sn = self.so, self.sn
        old = self._ctor_params(self.lo, so)
        new = self._ctor_params(self.ln, sn)
        old_d, new_d = dict(old), dict(new)
        pos_o = [n for n, p in old if not getattr(p, "kw_only", False)]
        pos_n = [n for n, p in new if not getattr(p, "kw_only", False)]
        renamed: set[str] = set()
        for i, n in enumerate(pos_o):
            call = f"{so.name}(" + ", ".join(["..."] * i + [f"<{n}>"]) + ")"
            if n not in new_d:
                if i < len(pos_n) and pos_n[i] not in old_d:
                    renamed.add(pos_n[i])
                    self.report("param-renamed", "new", new_d[pos_n[i]].path,
                                f"parameter `{n}` (position {i}) was renamed to `{pos_n[i]}`: "
                                f"a call passing `{n}=` breaks",
                                counterexample={"call": f"{so.name}({n}=...)"})
                else:
                    self.report("param-removed", "old", old_d[n].path,
                                f"parameter `{n}` is not in NEW: a call passing it breaks",
                                counterexample={"call": call})
                continue
            if getattr(new_d[n], "kw_only", False):
                self.report("param-moved", "new", new_d[n].path,
                            f"parameter `{n}` (position {i} in OLD) is keyword-only in NEW: a "
                            "call passing it by position breaks", counterexample={"call": call})
            elif i >= len(pos_n) or pos_n[i] != n:
                j = pos_n.index(n)
                other = pos_n[i] if i < len(pos_n) else None
                self.report("param-moved", "new", new_d[n].path,
                            f"parameter `{n}` moved from position {i} to {j}: a call by "
                            f"position binds its value to "
                            + (f"`{other}`" if other else "nothing (too many arguments)"),
                            counterexample={"call": call, f"binds <{n}> to": other})
        for n, p in old:
            if n in new_d or n in pos_o:
                continue
            self.report("param-removed", "old", p.path, f"keyword-only parameter `{n}` is not "
                        "in NEW: a call passing it breaks",
                        counterexample={"call": f"{so.name}({n}=...)"})
        for n, p in new:
            if n in old_d:
                continue
            if self._required(p):
                self.unlinked.add(n)
                if n in renamed:
                    continue  # said with the renaming
                self.report("param-required", "new", p.path, f"the new parameter `{n}` has no "
                            "default: a call that OLD accepts, which does not pass it, breaks",
                            counterexample={"call": f"{so.name}(<OLD's arguments>)"},
                            hint=f"give `{n}` a default (at the end of the parameters)")
        for n, po in old:
            pn = new_d.get(n)
            if pn is None:
                continue
            if isinstance(po, TensorDecl) != isinstance(pn, TensorDecl):
                self.report("param-type", "new", pn.path, f"parameter `{n}` changed between a "
                            "typed parameter and a construction-time tensor")
                self.unlinked.add(n)
                continue
            if self._required(pn) and not self._required(po):
                what = "default" if not isinstance(po, TensorDecl) else "`optional`"
                self.report("param-required", "new", pn.path, f"parameter `{n}` lost its {what}: "
                            "a call that omits it breaks",
                            counterexample={"call": f"{so.name}(<without {n}>)"})
            if isinstance(po, TensorDecl):
                self.placement(n, po, pn)
                continue
            if po.has_default and pn.has_default and not _same_default(po.default, pn.default):
                self.report("param-default", "new", pn.path,
                            f"the default of `{n}` changed from {po.default!r} to "
                            f"{pn.default!r}: a call that omits `{n}` now means `{n}="
                            f"{pn.default!r}`",
                            counterexample={"call": f"{so.name}(<without {n}>)",
                                            f"{n} (OLD default)": po.default,
                                            f"{n} (NEW default)": pn.default})
            lost = lost_value(po.kind, pn.kind, so.adts, sn.adts)
            if lost is not None:
                value, why = lost
                cex = {n: value} if value is not _NO_VALUE else None
                self.report("param-type", "new", pn.path + ".type",
                            f"parameter `{n}`: NEW's type `{pn.type_text}` does not accept every "
                            f"value of OLD's `{po.type_text}`: {why}", counterexample=cex)
            if _link_shape(po.kind) != _link_shape(pn.kind) or (
                    lost is not None and isinstance(K.unwrap_maybe(po.kind), K.ADTK)):
                self.unlinked.add(n)

    @staticmethod
    def _required(p: Any) -> bool:
        if isinstance(p, TensorDecl):
            return p.optional is False
        return not p.has_default

    def placement(self, n: str, to: TensorDecl, tn: TensorDecl) -> None:
        what = "construction-time tensor" if to.role == "ctensor" else "input"
        if tn.contiguous and not to.contiguous:
            self.report("input-placement", "new", tn.path, f"{what} `{n}` must be contiguous in "
                        "NEW: a call passing a non-contiguous tensor breaks",
                        counterexample={f"{n}.contiguous": False})
        if tn.device != to.device:
            self.report("input-placement", "new", tn.path, f"{what} `{n}` is on "
                        f"{tn.device or 'the call device'} in NEW, on "
                        f"{to.device or 'the call device'} in OLD",
                        counterexample={f"{n}.device": to.device or "the call device"})

    def inputs(self) -> None:
        so, sn = self.so, self.sn
        old, new = list(so.inputs), list(sn.inputs)
        for i, n in enumerate(old):
            call = "forward(" + ", ".join(["..."] * i + [f"<{n}>"]) + ")"
            if n not in sn.inputs:
                if n in sn.ctensors:
                    self.report("input-moved", "new", sn.ctensors[n].path, f"input `{n}` moved "
                                "from the call to the construction parameters: a call passing "
                                "it breaks", counterexample={"call": call})
                elif i < len(new) and new[i] not in so.inputs and new[i] not in so.ctensors:
                    self.report("input-renamed", "new", sn.inputs[new[i]].path,
                                f"input `{n}` (position {i}) was renamed to `{new[i]}`: a call "
                                f"passing `{n}=` breaks",
                                counterexample={"call": f"forward({n}=...)"})
                else:
                    self.report("input-removed", "old", so.inputs[n].path, f"input `{n}` is not "
                                "in NEW: a call passing it breaks", counterexample={"call": call})
                continue
            if i >= len(new) or new[i] != n:
                j = new.index(n)
                other = new[i] if i < len(new) else None
                self.report("input-moved", "new", sn.inputs[n].path,
                            f"input `{n}` moved from position {i} to {j}: a call by position "
                            "passes it as " + (f"`{other}`" if other else "nothing"),
                            counterexample={"call": call, f"binds <{n}> to": other})
            self.placement(n, so.inputs[n], sn.inputs[n])
        for n, t in sn.inputs.items():
            if n in so.inputs:
                continue
            if n in so.ctensors:
                self.report("input-moved", "new", t.path, f"construction-time tensor `{n}` moved "
                            "to the call's inputs: a construction passing it breaks")
            elif t.optional is False and not any(f.path == t.path for f in self.findings):
                self.report("input-required", "new", t.path, f"the new input `{n}` is required: "
                            "a call that passes only OLD's inputs breaks",
                            counterexample={"call": "forward(" + ", ".join(
                                f"<{m}>" for m in old) + ")"},
                            hint=f"make `{n}` optional (`optional: true`, after the others)")

    def outputs(self) -> None:
        so, sn = self.so, self.sn
        old, new = list(so.outputs), list(sn.outputs)
        if so.has_out and not sn.has_out:
            path = next(t.path for t in so.outputs.values() if t.buffer == "out")
            self.report("output-changed", "old", path + ".buffer", "NEW takes no `out=` buffer: "
                        "a call passing `out=` breaks", counterexample={"present(out)": True})
        if old != new:
            gone = [n for n in old if n not in sn.outputs]
            extra = [n for n in new if n not in so.outputs]
            parts = []
            if gone:
                parts.append(f"removed {gone}")
            if extra:
                parts.append(f"added {extra}")
            if not parts:
                parts.append("reordered")
            path = sn.outputs[extra[0]].path if extra else "signature.outputs"
            self.report("output-changed", "new", path, f"the outputs changed from {old} to "
                        f"{new} ({'; '.join(parts)}): a caller unpacking OLD's outputs breaks",
                        counterexample={"OLD outputs": tuple(old), "NEW outputs": tuple(new)})

    # -- 2. the branches -------------------------------------------------------------------

    def branches(self) -> None:
        so, sn = self.so, self.sn
        ds_n = discriminants(sn)
        for combo in combinations(discriminants(so)):
            folder = Folder(so, combo)
            if any(isinstance(v, Const) and v.value is False
                   for v in (folder.expr(r.expr) for r in so.rules)):
                continue  # OLD excludes the combination: no call of it to keep
            self.combos += 1
            try:
                ro = plan_branch(so, combo)
            except Exception:  # a family cycle or an ill-kinded fold: `opspec prove` says
                continue
            if ro.family_misses or ro.not_discriminant:
                continue  # OLD itself has no type here (`opspec prove` reports it)
            self.branch(combo, ro, ds_n)

    def branch(self, combo: dict[str, Any], ro: BranchResult, ds_n) -> None:
        so, sn = self.so, self.sn
        shown = {k: _plain(v) for k, v in combo.items()}
        passed = [n for n in ro.branch.present if so.tensors[n].role in ("input", "ctensor")]
        ncombo = self.map_combo(combo, ds_n, passed, shown)
        if ncombo is None:
            return
        fn = Folder(sn, ncombo)
        ok = True
        for n in passed:
            t = sn.tensors.get(n)
            if t is None or t.role not in ("input", "ctensor"):
                ok = False  # removed or moved: reported with the signatures
                continue
            if not fn.exists(n):
                self.report("input-rejected", "new", t.path + (".optional" if t.optional is not
                                                                 False else ""),
                            f"NEW does not take `{n}` on this call (its `optional` is false "
                            "here), but OLD's call passes it", counterexample=shown,
                            dedup=("absent",))
                ok = False
        for n, t in sn.tensors.items():
            if t.role in ("input", "ctensor") and n not in passed and fn.exists(n):
                if n not in so.tensors and t.optional is False:
                    ok = False  # a new required tensor: reported with the signatures
                    continue
                if any(f.path == t.path and f.is_error for f in self.findings):
                    ok = False  # `optional` dropped: reported with the signatures
                    continue
                self.report("input-required", "new", t.path + (".optional" if t.optional
                                                               is not False else ""),
                            f"NEW requires `{n}` on this call, but OLD's call does not pass it",
                            counterexample=shown, dedup=("present",))
                ok = False
        if not ok:
            return
        for r in sn.rules:
            v = fn.expr(r.expr)
            if isinstance(v, Const) and v.value is False:
                self.report("rejected", "new", r.path, f"NEW's restriction `{r.text}` excludes "
                            "this combination, which OLD accepts", counterexample=shown)
                return
        try:
            rn = plan_branch(sn, ncombo)
        except Exception as exc:  # noqa: BLE001 - NEW's own soundness is `opspec prove`'s
            self.report("undecided", "new", "signature", f"NEW's branch for {_show(shown)} "
                        f"cannot be planned ({type(exc).__name__}: {exc})",
                        severity=Severity.ADVISORY, counterexample=shown)
            return
        for path, miss in rn.family_misses:
            values = ", ".join(f"{m}={describe_value(v)}"
                               for m, v in zip(miss.family.match, miss.values))
            what = "no case" if not miss.matching else "more than one case"
            self.report("rejected", "new", miss.family.path, f"{what} of NEW's type family "
                        f"{miss.family.name} covers {values} (applied in {path}), a combination "
                        "OLD accepts", counterexample=shown)
        if rn.family_misses:
            return
        outs_o = {o.name for o in ro.branch.outputs}
        outs_n = {o.name for o in rn.branch.outputs}
        for n in so.outputs:
            if n in sn.outputs and (n in outs_o) != (n in outs_n):
                self.report("output-changed", "new", sn.outputs[n].path,
                            f"output `{n}` is {'a tensor' if n in outs_o else 'None'} in OLD "
                            f"and {'a tensor' if n in outs_n else 'None'} in NEW on this call",
                            counterexample=shown, dedup=("nullable",))
        inv_o = adt_facts(so, combo, Folder(so, combo))
        inv_n = adt_facts(sn, ncombo, Folder(sn, ncombo))
        key = (_fingerprint(so, ro, inv_o), _fingerprint(sn, rn, inv_n))
        if key[0] == key[1]:
            return  # the same checks in the same order, the same output types: exact
        if key in self._asked:
            return  # the same questions were asked on another combination
        self._asked.add(key)
        if rn.not_discriminant or rn.unsolved:
            which = ", ".join(u.name for u in rn.unsolved) or "a family argument"
            self.report("undecided", "new", rn.unsolved[0].decl if rn.unsolved else "signature",
                        f"NEW does not determine {which} from the inputs on this branch "
                        "(`opspec prove` reports it), so its checks cannot be compared",
                        severity=Severity.ADVISORY, counterexample=shown)
            return
        if self.unlinked:
            self.report("undecided", "new", "signature.params", "the questions about shapes "
                        "and dtypes are skipped: the parameter(s) " + ", ".join(sorted(
                            self.unlinked)) + " have no value that carries from OLD's call to "
                        "NEW (reported above)", severity=Severity.ADVISORY, dedup="unlinked")
            return
        self.ask(combo, ncombo, ro, rn, inv_o, inv_n, shown, passed)

    def map_combo(self, combo: dict[str, Any], ds_n, passed: list[str],
                  shown: dict[str, Any]) -> dict[str, Any] | None:
        """NEW's discriminant values for OLD's call; None when the call has no NEW branch
        (reported, or reported with the signatures)."""
        so, sn = self.so, self.sn
        out: dict[str, Any] = {}
        for d in ds_n:
            key = d.key
            if key.startswith("present("):
                name = key[len("present("):-1]
                if name == "out":
                    v: Any = bool(combo.get("present(out)", False))
                elif name in sn.params:
                    if name in so.params:
                        v = combo.get(key, True) if isinstance(so.params[name].kind, K.MaybeK) \
                            else True
                    else:
                        p = sn.params[name]
                        if not p.has_default:
                            return None
                        v = p.default is not None
                else:
                    v = name in passed
            else:
                if key in so.params:
                    if key not in combo:
                        return None  # OLD's parameter was no discriminant: a type change
                    v = combo[key]
                    if v is not None and not _member(v, d.values):
                        self.report("param-type", "new", sn.params[key].path + ".type",
                                    f"NEW does not accept `{key}` = {describe_value(v)}, which "
                                    "OLD accepts", counterexample={**shown, key: _plain(v)})
                        return None
                else:
                    p = sn.params[key]
                    if not p.has_default:
                        return None
                    v = _adt_default(sn, key, p.default)
            out[key] = v
        for key in list(out):
            if key.startswith("present(") and out[key] is False:
                name = key[len("present("):-1]
                if name in out:
                    out[name] = None
        return out

    # -- 3. the Z3 questions ---------------------------------------------------------------

    def _kinds(self, spec: ElaboratedSpec, shared: Mapping[str, K.Kind], passed: list[str],
               outputs: Iterable[str]) -> dict[str, K.Kind]:
        out: dict[str, K.Kind] = {}
        for n, s in spec.symbols.items():
            if s.role in ("tensor", "family"):
                continue
            out[n] = _relax(s.kind) if s.role in ("index", "let") else s.kind
        out.update(shared)
        for n in passed:
            out[_shape_var(n)] = K.SHAPE
            out[_dtype_var(n)] = K.DTYPE
        for n in outputs:
            out[_out_shape_var(n)] = K.SeqK(K.INT)
            out[_out_dtype_var(n)] = K.DTYPE
        return out

    def ask(self, combo: dict, ncombo: dict, ro: BranchResult, rn: BranchResult,
            inv_o: list, inv_n: list, shown: dict[str, Any], passed: list[str]) -> None:
        so, sn = self.so, self.sn
        linked = [n for n in so.params if n in sn.params]
        # Both encodings see the call's parameters with OLD's kinds: what NEW's types no
        # longer accept is a signature finding, not an assumption of these questions.
        shared_kinds = {n: so.params[n].kind for n in linked}
        outs = sorted({o.name for o in ro.branch.outputs} & {o.name for o in rn.branch.outputs})
        e_o = Encoder(self._kinds(so, {}, passed, [o.name for o in ro.branch.outputs]),
                      adt_fields=_adt_fields(so), copy="#old")
        e_n = Encoder(self._kinds(sn, shared_kinds, passed, [o.name for o in rn.branch.outputs]),
                      adt_fields=_adt_fields(sn), copy="#new")
        old = _Side(so, ro, e_o, inv_o, assume_kinds=True)
        new = _Side(sn, rn, e_n, inv_n, assume_kinds=False)
        try:
            old.build()
            new.build()
            base = old.defs + [c.cond for c in old.checks] + new.defs
            base += self._pins(e_o, so, combo) + self._pins(e_n, sn, ncombo)
            for n in linked:
                base.append(e_o.same(e_n, n))
            for n, p in sn.params.items():
                if n not in so.params and p.has_default:
                    try:
                        base.append(e_n.assign(n, _adt_default(sn, n, p.default)))
                    except EncodeError:
                        pass  # a default the encoding cannot hold (an opaque value)
            for n in passed:
                base += [e_o.same(e_n, _shape_var(n)), e_o.same(e_n, _dtype_var(n))]
            same_out = {o: z3.And(e_o.same(e_n, _out_shape_var(o)),
                                  e_o.same(e_n, _out_dtype_var(o))) for o in outs}
        except EncodeError as exc:
            self.report("undecided", "new", "signature", f"the branch {_show(shown)} cannot be "
                        f"encoded: {exc}", severity=Severity.ADVISORY, counterexample=shown,
                        dedup=str(exc))
            return
        base += e_o.side + e_n.side  # last: encoding may have created variables
        # Prefer a call whose axes are small and positive (`x.shape = [9, 20]` reads better
        # than `[0, 113796]`), then one whose axes are positive, then any.
        positive, small = [], []
        for n in passed:
            seq = e_o.var(_shape_var(n))
            for i in range(MAX_RANK):
                positive.append(z3.Implies(i < z3.Length(seq), seq[i] >= 1))
                small.append(z3.Implies(i < z3.Length(seq), seq[i] <= _SMALL))
        levels = [positive + small, positive] if positive else []
        encs = [e_o, e_n]
        held: list[z3.BoolRef] = []

        def ask_z3(question: list[z3.BoolRef]) -> tuple[Verdict, Any, str | None]:
            """Solve `question` with the base and the held checks; a model found is asked
            again with the preferences. A fresh solver each time: a `push` on one that holds
            sequence constraints can take minutes to internalize them, outside any rlimit."""
            def run(extra: list[z3.BoolRef]) -> tuple[Verdict, Any, str | None]:
                solver = make_solver(self.rlimit)
                solver.add(*base, *held, *question, *extra)
                return solve(solver, encs)

            first = run([])
            if first[0] is Verdict.UNSAT:
                return first
            # A model found is asked again for a nicer one; an undecided question too, as
            # small axes often decide a nonlinear one (`pool.out`) the unbounded cannot.
            for extra in levels:
                got = run(extra)
                if got[0] is Verdict.SAT:
                    return got
            return first

        def cex(model) -> dict[str, Any]:
            vals = e_o.values(model)
            out = dict(shown)
            for n in so.params:
                if combo.get(f"present({n})") is False:
                    continue  # shown with the discriminants (an absent Maybe is None)
                if n not in combo and n in vals:
                    out[n] = vals[n]
                # The fields of an ADT value that its discriminant value leaves open.
                v = combo.get(n)
                if isinstance(v, ADTValue):
                    fixed = {f for f, _ in v.fields}
                    for f in so.adts[v.adt].ctors[v.ctor].fields:
                        k = f"{n}.value.{f}" if f"{n}.value.{f}" in vals else f"{n}.{f}"
                        if f not in fixed and k in vals:
                            out[k] = vals[k]
            for n in passed:
                out[f"{n}.shape"] = vals.get(_shape_var(n))
                out[f"{n}.dtype"] = vals.get(_dtype_var(n))
            return out

        # Held: NEW checks whose declaration was already reported (on this branch or another).
        held += [c.cond for c in new.checks if c.decl in self.rejecting]
        remaining = [c for c in new.checks if c.decl not in self.rejecting]
        while remaining:
            verdict, model, reason = ask_z3([z3.Or(*[z3.Not(c.cond) for c in remaining])])
            if verdict is Verdict.UNKNOWN:
                self.report("undecided", "new", "signature", "could not decide whether NEW "
                            f"accepts every call OLD accepts on the branch {_show(shown)} "
                            f"({reason})", severity=Severity.ADVISORY, counterexample=shown,
                            dedup=("reject", tuple(shown.items())))
                return
            if verdict is Verdict.UNSAT:
                break
            values = [model.eval(c.cond, model_completion=True) for c in remaining]
            # The first check the model makes false; one it leaves unevaluated (a recursive
            # function) if none evaluates to false.
            first = next((c for c, v in zip(remaining, values) if z3.is_false(v)), None) or \
                next((c for c, v in zip(remaining, values) if not z3.is_true(v)), None)
            if first is None:
                self.report("rejected", "new", "signature", "a call that OLD accepts fails one "
                            "of NEW's checks (the model does not say which)",
                            counterexample=cex(model))
                return
            self.report("rejected", "new", first.decl, "a call that OLD accepts fails NEW's "
                        f"check: {first.what}", counterexample=cex(model))
            self.rejecting.add(first.decl)
            held += [c.cond for c in remaining if c.decl == first.decl]
            remaining = [c for c in remaining if c.decl != first.decl]
        if not outs:
            return
        held += [c.cond for c in new.checks]
        for o in outs:
            verdict, model, reason = ask_z3([z3.Not(same_out[o])])
            if verdict is Verdict.UNKNOWN:
                self.report("undecided", "new", sn.outputs[o].path, "could not decide whether "
                            f"output `{o}` keeps its type on the branch {_show(shown)} "
                            f"({reason})", severity=Severity.ADVISORY, counterexample=shown,
                            dedup=("output", o, tuple(shown.items())))
                continue
            if verdict is not Verdict.SAT:
                continue
            vo, vn = e_o.values(model), e_n.values(model)
            told = _tensor_type(vo.get(_out_dtype_var(o)), vo.get(_out_shape_var(o)))
            tnew = _tensor_type(vn.get(_out_dtype_var(o)), vn.get(_out_shape_var(o)))
            c = cex(model)
            c[f"{o} (OLD)"] = told
            c[f"{o} (NEW)"] = tnew
            declared_o = (f"Tensor[{print_expr(so.outputs[o].dtype)}, "
                          f"{print_shape(ro.shapes[o])}]")
            declared_n = (f"Tensor[{print_expr(sn.outputs[o].dtype)}, "
                          f"{print_shape(rn.shapes[o])}]")
            self.report("output-type", "new", sn.outputs[o].path,
                        f"output `{o}` has another type under NEW for the same call: OLD "
                        f"{declared_o} is {told}, NEW {declared_n} is {tnew}",
                        counterexample=c, dedup=o)

    def _pins(self, enc: Encoder, spec: ElaboratedSpec, combo: Mapping[str, Any]
              ) -> list[z3.BoolRef]:
        """The discriminant values of the combination, pinned (folding already used them;
        the pins make the parameters' variables, which the two sides share, agree)."""
        out = []
        for key, v in combo.items():
            if key.startswith("present("):
                name = key[len("present("):-1]
                if name in spec.params and isinstance(spec.params[name].kind, K.MaybeK):
                    term = enc.expr(Call("present", (Name(name),)))
                    out.append(term if v else z3.Not(term))
            elif key in spec.params and not isinstance(v, ADTValue):
                try:
                    out.append(enc.assign(key, v))
                except EncodeError:
                    pass
        return out


def _tensor_type(dtype: Any, shape: Any) -> str:
    dims = ", ".join(str(x) for x in shape) if isinstance(shape, (tuple, list)) else "?"
    return f"Tensor[{dtype}, [{dims}]]"


def _show(values: Mapping[str, Any]) -> str:
    if not values:
        return "(no discriminants)"
    return ", ".join(f"{k}={describe_value(v)}" for k, v in values.items())
