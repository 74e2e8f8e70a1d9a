"""The static solving order of one branch: seed § 3, Table 1.

Given a spec and a combination of discriminant values, `plan_branch` decides, before any
call, in which order the indices are solved from the shapes and dtypes of the tensors that
exist on the branch: construction-time tensors first, then call-time inputs, repeating
until nothing new is learnt, independent of the order declarations are written in. An
axis is solved when it is a lone unknown index (`M`), or affine in one unknown
(`a * M + e`: a known positive coefficient, e known, exact division and a non-negative
result checked); a splat `*S` is solved when `S` is the only unknown part of its shape; a
dtype is solved when it is an unknown DType index. Everything else is a check, placed
where its names are first known. Indices used on the branch that remain unknown are
returned for the `unsolvable` check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opspec.schema import kinds as K
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.expr import (
    BinOp, Call, Const, Expr, Name, ShapeList, Splat, free_names,
)
from opspec.solver import plan as P
from opspec.solver.fold import FamilyMiss, Folder, NotDiscriminant


@dataclass
class Unsolved:
    name: str
    reason: str          # "no-rule" | "outputs-only" | "no-input"
    decl: str            # a declaration that uses it


@dataclass
class BranchResult:
    branch: P.Branch
    unsolved: list[Unsolved] = field(default_factory=list)
    family_misses: list[tuple[str, FamilyMiss]] = field(default_factory=list)
    not_discriminant: list[tuple[str, NotDiscriminant]] = field(default_factory=list)
    #: folded declarations, for the Z3 checks: (path, expr) of rules; shapes by tensor
    rules: list[tuple[str, Expr]] = field(default_factory=list)
    shapes: dict[str, ShapeList] = field(default_factory=dict)
    dtypes: dict[str, Expr] = field(default_factory=dict)
    lets: dict[str, Expr] = field(default_factory=dict)
    known_at_construction: frozenset[str] = frozenset()


def _is_dim_index(spec: ElaboratedSpec, name: str) -> bool:
    k = spec.forall.get(name)
    return isinstance(k, K.IntK)


def _is_shape_index(spec: ElaboratedSpec, name: str) -> bool:
    k = spec.forall.get(name)
    return isinstance(k, K.SeqK)


def _is_dtype_index(spec: ElaboratedSpec, name: str) -> bool:
    return isinstance(spec.forall.get(name), K.DTypeK)


def _is_seq_int(spec: ElaboratedSpec, name: str) -> bool:
    k = spec.forall.get(name)
    return isinstance(k, K.SeqK) and k.elem == K.INT


def linear(e: Expr, u: str) -> tuple[Expr, Expr] | None:
    """`e` as `coeff * u + offset`, or None when it is not affine in `u`."""
    if isinstance(e, Name) and e.id == u:
        return Const(1), Const(0)
    if u not in free_names(e):
        return Const(0), e
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = linear(e.left, u), linear(e.right, u)
        if a is None or b is None:
            return None
        return _arith(e.op, a[0], b[0]), _arith(e.op, a[1], b[1])
    if isinstance(e, BinOp) and e.op == "*":
        for x, y in ((e.left, e.right), (e.right, e.left)):
            if u not in free_names(y):
                inner = linear(x, u)
                if inner is None:
                    return None
                return _arith("*", inner[0], y), _arith("*", inner[1], y)
    return None


def _arith(op: str, a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and isinstance(b, Const) and isinstance(a.value, int) \
            and isinstance(b.value, int):
        return Const({"+": a.value + b.value, "-": a.value - b.value, "*": a.value * b.value}[op])
    if op == "*" and (a == Const(0) or b == Const(0)):
        return Const(0)
    if op == "*" and a == Const(1):
        return b
    if op == "*" and b == Const(1):
        return a
    if op == "+" and a == Const(0):
        return b
    if op in ("+", "-") and b == Const(0):
        return a
    return BinOp(op, a, b)


def obviously_dim(spec: ElaboratedSpec, e: Expr) -> bool:
    """A cheap syntactic test that an axis expression is non-negative."""
    if isinstance(e, Const):
        return isinstance(e.value, int) and e.value >= 0
    if isinstance(e, Name):
        k = spec.kind_of(e.id)
        return isinstance(k, K.IntK) and k.nonneg
    if isinstance(e, BinOp) and e.op in ("+", "*"):
        return obviously_dim(spec, e.left) and obviously_dim(spec, e.right)
    if isinstance(e, BinOp) and e.op in ("//", "%"):
        return obviously_dim(spec, e.left) and isinstance(e.right, Const) and \
            isinstance(e.right.value, int) and e.right.value > 0
    if isinstance(e, Call) and e.func in ("len", "pool.out", "mhc.expansion", "moe.capacity"):
        return True
    return False


class _Planner:
    def __init__(self, spec: ElaboratedSpec, combo: dict[str, Any]):
        self.spec = spec
        self.combo = combo
        self.folder = Folder(spec, combo)
        self.result = BranchResult(P.Branch(()))
        self.known: set[str] = set()
        self.steps: dict[str, list[P.Step]] = {P.CONSTRUCTION: [], P.CALL: []}
        self.phase = P.CONSTRUCTION

    def pos(self, path: str):
        return None

    def emit(self, kind: str, decl: str, **kw) -> None:
        self.steps[self.phase].append(P.Step(kind, decl, **kw))

    def is_known(self, e: Expr) -> bool:
        return all(n in self.known or self.spec.kind_of(n) is None for n in free_names(e))

    # lets and rules become steps as soon as their names are known
    def settle(self, lets: dict[str, Expr], rules: list[tuple[str, Expr]]) -> None:
        progress = True
        while progress:
            progress = False
            for n, e in list(lets.items()):
                if n not in self.known and self.is_known(e):
                    self.emit(P.LET, self.spec.lets[n].path, target=n, expr=e)
                    self.known.add(n)
                    progress = True
        for path, e in list(rules):
            if self.is_known(e):
                self.emit(P.RULE, path, expr=e)
                rules.remove((path, e))

    def run(self) -> BranchResult:
        spec, folder, res = self.spec, self.folder, self.result
        exists = {n: folder.exists(n) for n in spec.tensors}
        present = [n for n, ok in exists.items() if ok]
        written = [n for n, t in spec.inputs.items() if exists[n] and folder.holds(t.mutated)]

        # params are known at construction; so are Maybe payloads where present
        for n in spec.params:
            self.known.add(n)

        shapes: dict[str, ShapeList] = {}
        dtypes: dict[str, Expr] = {}
        families: list[tuple[str, int]] = []
        for n in present:
            t = spec.tensors[n]
            trail: list[tuple[str, int]] = []
            try:
                shapes[n] = folder.shape(t.shape, trail=trail)
            except FamilyMiss as miss:
                res.family_misses.append((t.path + ".shape", miss))
                continue
            except NotDiscriminant as nd:
                res.not_discriminant.append((t.path + ".shape", nd))
                continue
            dtypes[n] = folder.expr(t.dtype)
            # The cases the fold selected. (Re-folding every case and comparing shapes picked
            # the wrong case when two cases give the same shape, and crashed when an earlier,
            # unselected case applied a family with no case for these values.)
            families.extend(trail)
        res.shapes, res.dtypes = shapes, dtypes

        lets = {n: folder.expr(d.expr) for n, d in spec.lets.items()}
        res.lets = dict(lets)
        rules = []
        for r in spec.rules:
            if r.is_domain:
                continue
            e = folder.expr(r.expr)
            if isinstance(e, Const) and e.value is True:
                continue
            rules.append((r.path, e))
        res.rules = list(rules)

        # construction: construction-time tensors; then the call: inputs
        for phase, role in ((P.CONSTRUCTION, "ctensor"), (P.CALL, "input")):
            self.phase = phase
            for n in present:
                if spec.tensors[n].role == role:
                    self.emit(P.PRESENCE, spec.tensors[n].path, target=n)
            self.settle(lets, rules)
            # Tensors are visited required-first, then by name, not in declaration order:
            # the seed (§ 3) fixes the solving order independently of the order declarations
            # are written in, so swapping two inputs must not change which one solves an
            # index and which checks it. Required tensors first, so that an index is solved
            # from the same tensor on every branch where that tensor exists.
            order = sorted(present, key=lambda n: (spec.tensors[n].optional is not False, n))
            todo = {n: _TensorState(n, shapes[n]) for n in order
                    if spec.tensors[n].role == role and n in shapes}
            progress = True
            while progress:
                progress = False
                for st in todo.values():
                    if self.advance(st, dtypes[st.name]):
                        progress = True
                self.settle(lets, rules)
            for st in todo.values():
                self.finish_checks(st, dtypes[st.name])
            if phase == P.CONSTRUCTION:
                res.known_at_construction = frozenset(self.known)
        self.settle(lets, rules)

        # outputs: every axis and dtype must now be known
        outputs = []
        for n in present:
            t = spec.tensors[n]
            if t.role != "output" or n not in shapes:
                continue
            for i, ax in enumerate(shapes[n].axes):
                e = ax.value if isinstance(ax, Splat) else ax
                if not isinstance(ax, Splat) and not obviously_dim(spec, e):
                    self.emit(P.NONNEG, t.path + ".shape", target=n, expr=e, axis=i)
            outputs.append(P.OutputType(n, dtypes[n], shapes[n], t.alias, t.buffer, t.path))
        has_out = bool(self.combo.get("present(out)", False))
        if has_out:
            self.emit(P.OUT_BUFFER, next(t.path for t in spec.outputs.values() if t.buffer == "out"),
                      target="out")

        used = self.used_indices(present, shapes, dtypes, lets, res.rules)
        for n in sorted(used):
            if n in self.known or _is_seq_int(spec, n):
                continue
            res.unsolved.append(self.why_unsolved(n, present, shapes, dtypes))

        combo_items = tuple(sorted(self.combo.items()))
        res.branch = P.Branch(
            combo=combo_items, present=tuple(present), written=tuple(written),
            families=tuple(families), construction=tuple(self.steps[P.CONSTRUCTION]),
            call=tuple(self.steps[P.CALL]), outputs=tuple(outputs), used=tuple(sorted(used)),
            has_out=has_out,
            tensors=tuple((n, shapes[n], dtypes[n]) for n in present if n in shapes))
        return res

    def advance(self, st: "_TensorState", dtype: Expr) -> bool:
        spec, t = self.spec, self.spec.tensors[st.name]
        progress = False
        if not st.dtype_done:
            if self.is_known(dtype):
                self.emit(P.CHECK_DTYPE, t.path + ".dtype", target=st.name, expr=dtype)
                st.dtype_done = progress = True
            elif isinstance(dtype, Name) and _is_dtype_index(spec, dtype.id):
                self.emit(P.SOLVE_DTYPE, t.path + ".dtype", target=st.name, expr=dtype)
                self.known.add(dtype.id)
                st.dtype_done = progress = True
        axes = st.shape.axes
        splats = [i for i, a in enumerate(axes) if isinstance(a, Splat)]
        unknown_splats = [i for i in splats if not self.is_known(axes[i].value)]
        if not st.rank_done and not unknown_splats:
            fixed = len(axes) - len(splats)
            self.emit(P.RANK, t.path + ".shape", target=st.name, rank=fixed,
                      splats=tuple(axes[i].value for i in splats))
            st.rank_done = progress = True
        if len(unknown_splats) == 1 and not st.rank_done:
            i = unknown_splats[0]
            s = axes[i].value
            if isinstance(s, Name) and _is_shape_index(spec, s.id) and s.id not in self.known:
                fixed = len(axes) - len(splats)
                others = tuple(axes[j].value for j in splats if j != i)
                self.emit(P.RANK, t.path + ".shape", target=st.name, rank=fixed, splats=others,
                          axis=-1)  # axis=-1: a minimum rank, the unknown splat takes the rest
                self.emit(P.SOLVE_SPLAT, t.path + ".shape", target=st.name, expr=s, axis=i)
                self.known.add(s.id)
                st.rank_done = progress = True
        if not st.rank_done:
            return progress
        for i, ax in enumerate(axes):
            if i in st.axes_done:
                continue
            if isinstance(ax, Splat):
                if self.is_known(ax.value):
                    if not (isinstance(ax.value, Name) and self._solved_here(st, i)):
                        self.emit(P.CHECK_AXIS, t.path + ".shape", target=st.name, expr=ax.value,
                                  axis=i)
                    st.axes_done.add(i)
                    progress = True
                continue
            if self.is_known(ax):
                self.emit(P.CHECK_AXIS, t.path + ".shape", target=st.name, expr=ax, axis=i)
                st.axes_done.add(i)
                progress = True
                continue
            unknown = [n for n in free_names(ax) if n not in self.known and spec.kind_of(n) is not None]
            if len(unknown) != 1 or not _is_dim_index(spec, unknown[0]):
                continue
            u = unknown[0]
            if isinstance(ax, Name):
                self.emit(P.SOLVE_AXIS, t.path + ".shape", target=st.name, expr=ax, axis=i)
            else:
                lin = linear(ax, u)
                if lin is None or lin[0] == Const(0):
                    continue
                coeff, offset = lin
                # Table 1, rule 2: `a` is a known positive integer *constant* (`e` need only
                # be known). A known index as coefficient (`M * N` with M solved) used to be
                # solved by division, but M = 0 leaves N undetermined: Z3 decides that axis.
                if not (isinstance(coeff, Const) and isinstance(coeff.value, int)
                        and not isinstance(coeff.value, bool) and coeff.value > 0):
                    continue
                if not self.is_known(coeff) or not self.is_known(offset):
                    continue
                self.emit(P.SOLVE_AXIS, t.path + ".shape", target=st.name, expr=Name(u), axis=i,
                          coeff=coeff, offset=offset)
            self.known.add(u)
            st.axes_done.add(i)
            progress = True
        return progress

    def _solved_here(self, st: "_TensorState", i: int) -> bool:
        return any(s.kind == P.SOLVE_SPLAT and s.target == st.name and s.axis == i
                   for s in self.steps[self.phase])

    def finish_checks(self, st: "_TensorState", dtype: Expr) -> None:
        """Axes left after the fixpoint stay unchecked; `unsolvable` reports their indices."""
        st.pending = [i for i in range(len(st.shape.axes)) if i not in st.axes_done]

    def used_indices(self, present, shapes, dtypes, lets, rules) -> set[str]:
        spec = self.spec
        exprs: list[Expr] = []
        for n in present:
            if n in shapes:
                exprs.extend(a.value if isinstance(a, Splat) else a for a in shapes[n].axes)
                exprs.append(dtypes[n])
            t = spec.tensors[n]
            if t.values is not None:
                exprs.append(self.folder.expr(t.values))
            exprs.extend(self.folder.expr(r) for r in t.requires)
        exprs.extend(e for _, e in rules)
        if spec.roofline is not None:
            exprs.extend(self.folder.expr(x) for x in (spec.roofline.flops, spec.roofline.bytes)
                         if x is not None)
        used: set[str] = set()
        seen_lets: set[str] = set()
        stack = list(exprs)
        while stack:
            e = stack.pop()
            for n in free_names(e):
                if n in spec.forall:
                    used.add(n)
                elif n in lets and n not in seen_lets:
                    seen_lets.add(n)
                    stack.append(lets[n])
        return used

    def why_unsolved(self, n: str, present, shapes, dtypes) -> Unsolved:
        """Why `n` stayed unknown, and the declaration to point at: an input (or
        construction-time tensor) that reads it, through lets too (`no-rule`: Z3 decides
        whether it is ambiguous or merely not solvable by Table 1); else an output
        (`outputs-only`); else a rule or let that reads it (`no-input`)."""
        spec, res = self.spec, self.result
        lets = res.lets

        def reads(e: Expr) -> set[str]:
            out, stack, seen = set(), [e], set()
            while stack:
                for m in free_names(stack.pop()):
                    out.add(m)
                    if m in lets and m not in seen:
                        seen.add(m)
                        stack.append(lets[m])
            return out

        def axes_read(t: str) -> set[str]:
            return set().union(*(reads(a.value if isinstance(a, Splat) else a)
                                 for a in shapes[t].axes))

        # The path names the field that reads the index: `.dtype` for a DType index (it
        # used to say `.shape` whatever the field).
        for reason, outputs in (("no-rule", False), ("outputs-only", True)):
            for t in present:
                tt = spec.tensors[t]
                if (tt.role == "output") != outputs or t not in shapes:
                    continue
                if n in axes_read(t):
                    return Unsolved(n, reason, tt.path + ".shape")
                if n in reads(dtypes[t]):
                    return Unsolved(n, reason, tt.path + ".dtype")
        # In no tensor at all: point at the refinement or let that uses it (it used to
        # point at the `forall` entry, far from the use).
        for path, e in res.rules:
            if n in free_names(e):
                return Unsolved(n, "no-input", path)
        for name, e in lets.items():
            if n in free_names(e):
                return Unsolved(n, "no-input", spec.lets[name].path)
        if spec.roofline is not None:
            for part in ("flops", "bytes"):
                e = getattr(spec.roofline, part)
                if e is not None and n in reads(self.folder.expr(e)):
                    return Unsolved(n, "no-input", f"roofline.{part}")
        return Unsolved(n, "no-input", f"signature.forall.{n}")


@dataclass
class _TensorState:
    name: str
    shape: ShapeList
    dtype_done: bool = False
    rank_done: bool = False
    axes_done: set[int] = field(default_factory=set)
    pending: list[int] = field(default_factory=list)


def plan_branch(spec: ElaboratedSpec, combo: dict[str, Any]) -> BranchResult:
    return _Planner(spec, combo).run()
