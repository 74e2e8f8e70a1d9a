"""The Z3 questions asked of one branch: uniqueness, satisfiability, sign of axes and divisors.

Each function builds its query from the folded declarations of a `BranchResult`, solves it
through the one solver factory, confirms any model with the concrete evaluator (through
`Encoder.refine`), and returns plain data: a verdict and a counterexample mapping.
"""

from __future__ import annotations

import contextvars
import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import z3

from opspec.schema import kinds as K
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.evaluate import evaluate
from opspec.schema.expr import Expr, ShapeList, Splat
from opspec.schema.printer import print_expr
from opspec.solver.encode import Encoder, solve
from opspec.solver.order import BranchResult, obviously_dim
from opspec.solver.z3env import Verdict, make_solver


@dataclass(frozen=True)
class Answer:
    verdict: Verdict
    counterexample: dict[str, Any] | None = None
    core: tuple[str, ...] = ()
    reason: str | None = None


# -- the Z3 budget of one spec -------------------------------------------------------------

#: Inside `z3_budget`, the questions below may spend BUDGET_FACTOR rlimits of Z3's resource
#: units in all, each charged its own units plus 1/QUESTION_FEE_DIVISOR of an rlimit for its
#: fixed cost (a solver, an encoding): at most 8192 cheap questions, or about 64 undecided
#: ones (each spends a whole rlimit). A question asked after that is undecided. Without it,
#: 4096 combinations that each asked a new nonlinear question took over 20 minutes; with it
#: (the prover opens one per spec, around every pass that asks Z3), about 20 s.
BUDGET_FACTOR = 64
QUESTION_FEE_DIVISOR = 128
BUDGET_SPENT = "the Z3 budget of this spec is spent"


class Z3Budget:
    """The Z3 work left to one spec, in Z3's deterministic resource units."""

    def __init__(self, rlimit: int):
        self.left = BUDGET_FACTOR * rlimit
        self.fee = max(1, rlimit // QUESTION_FEE_DIVISOR)
        self.questions = 0
        self._probe: z3.Solver | None = None
        self._mark = 0

    @property
    def spent_out(self) -> bool:
        return self.left <= 0

    def _spent(self) -> int:
        """Units spent so far in the current Z3 context: the statistic is per context, and an
        idle solver's statistics read it (in microseconds)."""
        stats = self._probe.statistics()
        return stats.get_key_value("rlimit count") if "rlimit count" in stats.keys() else 0

    def start(self) -> None:
        if self._probe is None:  # made in the context the questions are asked in
            self._probe = z3.Solver()
            self._mark = self._spent()

    def charge(self) -> None:
        now = self._spent()
        self.left -= now - self._mark + self.fee
        self._mark = now
        self.questions += 1


_BUDGET: contextvars.ContextVar[Z3Budget | None] = contextvars.ContextVar(
    "opspec_z3_budget", default=None)


@contextmanager
def z3_budget(rlimit: int) -> Iterator[Z3Budget]:
    """Questions asked inside the block share one budget (see BUDGET_FACTOR)."""
    budget = Z3Budget(rlimit)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _budgeted(question):
    @functools.wraps(question)
    def ask(self, *args, **kwargs) -> Answer:
        budget = _BUDGET.get()
        if budget is None:
            return question(self, *args, **kwargs)
        if budget.spent_out:
            return Answer(Verdict.UNKNOWN, reason=BUDGET_SPENT)
        budget.start()
        try:
            return question(self, *args, **kwargs)
        finally:
            budget.charge()
    return ask


def _kinds(spec: ElaboratedSpec) -> dict[str, K.Kind]:
    out = {n: s.kind for n, s in spec.symbols.items() if s.role not in ("tensor", "family")}
    return out


def _adt_fields(spec: ElaboratedSpec) -> dict[str, K.Kind]:
    out = {}
    for n, p in spec.params.items():
        k = K.unwrap_maybe(p.kind)
        if isinstance(k, K.ADTK) and k.name in spec.adts:
            # The encoder names a Maybe's payload `n.value`, so a Maybe ADT's fields are
            # `n.value.<field>` (keyed `n.<field>` they were never found: `ol.value.kind`
            # raised "the constructors of ol.value are unknown" and crashed the spec).
            base = f"{n}.value" if isinstance(p.kind, K.MaybeK) else n
            out[f"{base}.kind"] = K.StrK(frozenset(spec.adts[k.name].ctors))
            for c in spec.adts[k.name].ctors.values():
                for f, fk in c.fields.items():
                    out[f"{base}.{f}"] = fk
    return out


class BranchQueries:
    """Builds encoders and the declarations of one branch for Z3."""

    def __init__(self, spec: ElaboratedSpec, res: BranchResult, invariants: Iterable[tuple[str, Expr]] = ()):
        self.spec = spec
        self.res = res
        self.kinds = _kinds(spec)
        self.adt_fields = _adt_fields(spec)
        self.invariants = list(invariants)
        self.inputs = [n for n in res.branch.present
                       if spec.tensors[n].role in ("input", "ctensor") and n in res.shapes]
        self.outputs = [n for n in res.branch.present
                        if spec.tensors[n].role == "output" and n in res.shapes]

    def encoder(self, copy: str = "") -> Encoder:
        return Encoder(self.kinds, adt_fields=self.adt_fields, copy=copy)

    def declarations(self, enc: Encoder, *, with_outputs: bool = False) -> list[tuple[str, z3.BoolRef]]:
        """(declaration path, constraint) for everything a passing call satisfies."""
        out: list[tuple[str, z3.BoolRef]] = []
        for name, e in self.res.lets.items():
            if name in self.kinds:
                out.append((self.spec.lets[name].path, enc.define(name, e)))
        for path, e in self.invariants + self.res.rules:
            out.append((path, enc.expr(e)))
        tensors = self.inputs + (self.outputs if with_outputs else [])
        for n in tensors:
            path = self.spec.tensors[n].path + ".shape"
            for ax in self.res.shapes[n].axes:
                if not isinstance(ax, Splat) and not obviously_dim(self.spec, ax):
                    out.append((path, enc.expr(ax) >= 0))
        return out

    def actual_shape(self, enc: Encoder, shape: ShapeList) -> z3.SeqRef | list:
        parts = []
        for ax in shape.axes:
            if isinstance(ax, Splat):
                parts.append(enc.expr(ax.value))
            else:
                parts.append(z3.Unit(enc.expr(ax)))
        if not parts:
            return z3.Empty(z3.SeqSort(z3.IntSort()))
        return parts[0] if len(parts) == 1 else z3.Concat(*parts)

    def same_call(self, e1: Encoder, e2: Encoder) -> list[z3.BoolRef]:
        """Both copies see the same parameters and the same actual input shapes and dtypes."""
        eqs = []
        for n in self.spec.params:
            if n in self.kinds and _encodable_param(self.kinds[n]):
                eqs.append(e1.same(e2, n))
        for n in self.inputs:
            sh = self.res.shapes[n]
            if all(not isinstance(a, Splat) for a in sh.axes):
                eqs.extend(e1.expr(a) == e2.expr(a) for a in sh.axes)
            else:
                eqs.append(self.actual_shape(e1, sh) == self.actual_shape(e2, sh))
            eqs.append(e1.same_expr(e2, self.res.dtypes[n]))
        return eqs

    # -- questions --------------------------------------------------------------------------

    @_budgeted
    def two_solutions(self, index: str, rlimit: int, also: Iterable[str] = ()) -> Answer:
        """Two models that see the same call (parameters, input shapes and dtypes) but give
        `index` different values. The counterexample has the input shapes and, for each
        solution, `index` and the names of `also` (the other unknowns of that call, so that
        a reader can check that both solutions satisfy the declarations)."""
        e1, e2 = self.encoder("#1"), self.encoder("#2")
        s = make_solver(rlimit)
        for enc in (e1, e2):
            for _, c in self.declarations(enc):
                s.add(c)
        s.add(*self.same_call(e1, e2))
        s.add(z3.Not(e1.same(e2, index)))
        # Prefer a call whose fixed input axes are all positive: `x.shape=(6,)` with M, N =
        # (2, 3) or (3, 2) says more than the degenerate `(0,)` with (0, 0) or (1, 0).
        prefer = [e1.expr(a) >= 1 for n in self.inputs for a in self.res.shapes[n].axes
                  if not isinstance(a, Splat)]
        for enc in (e1, e2):  # last: encoding the query may have created variables
            s.add(*enc.side)
            s.add(*(c for _, c in enc.domain))  # both calls evaluate without raising
        verdict = Verdict.UNKNOWN
        if prefer:
            s.push()
            s.add(*prefer)
            verdict, model, reason = solve(s, [e1, e2])
            if verdict is not Verdict.SAT:
                s.pop()
        if verdict is not Verdict.SAT:
            verdict, model, reason = solve(s, [e1, e2])
        if verdict is not Verdict.SAT:
            return Answer(verdict, reason=reason)
        v1, v2 = _plain(e1.values(model), "#1"), _plain(e2.values(model), "#2")
        cex = self.shapes_of(v1)
        for k, v in (("1", v1), ("2", v2)):
            for name in (index, *(a for a in also if a != index)):
                if name in v:
                    cex[f"{name} (solution {k})"] = v[name]
        return Answer(verdict, cex)

    @_budgeted
    def satisfiable(self, rlimit: int, extra: z3.BoolRef | None = None,
                    with_outputs: bool = False, track: bool = False,
                    unguarded: str | None = None) -> Answer:
        """Is there a call passing every declaration (and `extra`)? Each declaration must
        also evaluate without raising, except the division by `unguarded` (the divisor a
        query asks about: its own non-zero condition, or the `ceil_div` taking it)."""
        enc = self.encoder()
        s = make_solver(rlimit)
        decls = self.declarations(enc, with_outputs=with_outputs)
        trackers = {}
        for i, (path, c) in enumerate(decls):
            if track:
                b = z3.Bool(f"__track_{i}")
                trackers[str(b)] = path
                s.assert_and_track(c, b)
            else:
                s.add(c)
        if extra is not None:
            s.add(extra(enc) if callable(extra) else extra)
        s.add(*enc.side)  # last: encoding the query may have created variables
        s.add(*(c for text, c in enc.domain if not _guards(text, unguarded)))
        verdict, model, reason = solve(s, [enc])
        if verdict is Verdict.UNSAT and track:
            core = tuple(sorted({trackers[str(c)] for c in s.unsat_core() if str(c) in trackers}))
            return Answer(verdict, core=core)
        if verdict is Verdict.SAT:
            vals = _plain(enc.values(model), "")
            return Answer(verdict, {**_public(vals, self.spec), **self.shapes_of(vals)})
        return Answer(verdict, reason=reason)

    def shapes_of(self, values: dict[str, Any]) -> dict[str, Any]:
        """Concrete input shapes (and dtypes) under a model's values, as plain data."""
        env = dict(values)
        out = {}
        for n in self.inputs:
            axes = []
            try:
                for ax in self.res.shapes[n].axes:
                    if isinstance(ax, Splat):
                        axes.extend(evaluate(ax.value, env))
                    else:
                        axes.append(evaluate(ax, env))
                out[f"{n}.shape"] = tuple(axes)
            except Exception:
                continue
            try:
                out[f"{n}.dtype"] = evaluate(self.res.dtypes[n], env)
            except Exception:
                pass
        return out


    def witness(self, combo: dict[str, Any]) -> dict[str, Any] | None:
        """A workload row that, with this branch's discriminant values, satisfies every
        declaration concretely: a proof by example that the branch is alive."""
        for row in self.spec.workloads:
            env = row_env(self.spec, row, combo)
            if env is None:
                continue
            try:
                for name, e in self.res.lets.items():
                    env[name] = evaluate(e, env)
                if not all(evaluate(e, env) is True for _, e in self.invariants + self.res.rules):
                    continue
                # The row must also give every input axis a length >= 0, as `declarations`
                # asks of Z3: a row whose axis `K - 5` is negative is no call at all, and it
                # used to pass as the witness of a dead branch.
                if all(evaluate(ax, env) >= 0 for n in self.inputs
                       for ax in self.res.shapes[n].axes
                       if not isinstance(ax, Splat) and not obviously_dim(self.spec, ax)):
                    return env
            except Exception:
                continue
        return None


def row_env(spec: ElaboratedSpec, row, combo: dict[str, Any]) -> dict[str, Any] | None:
    """The values a workload row gives, overridden by a combination's discriminants; None
    when the row cannot stand on this branch (a Maybe payload the row does not give)."""
    from opspec.schema.values import ADTValue, to_tuple

    env: dict[str, Any] = {}
    for n, p in spec.params.items():
        if n in row.values:
            v = row.values[n]
        elif p.has_default:
            v = p.default
        else:
            return None
        inner = K.unwrap_maybe(p.kind)
        if isinstance(inner, K.ADTK) and isinstance(v, dict) and len(v) == 1:
            (ctor, fields), = v.items()
            v = ADTValue.of(inner.name, ctor, fields if isinstance(fields, dict) else {})
        env[n] = to_tuple(v)
    for n, v in row.values.items():
        if n in spec.forall:
            env[n] = to_tuple(v)
    for key, v in combo.items():
        if key.startswith("present("):
            name = key[len("present("):-1]
            if name in spec.params:
                if not v:
                    env[name] = None
                elif env.get(name) is None:
                    return None
        elif isinstance(v, ADTValue):
            cur = env.get(key)
            if not isinstance(cur, ADTValue) or cur.ctor != v.ctor or any(
                    not cur.has(f) or cur.field(f) != fv for f, fv in v.fields):
                return None
        elif key in spec.params and v is not None:
            env[key] = v
    for case in (row.dtype_cases or [{}])[:1]:
        env.update(case)
    return env


def _guards(text: str, divisor: str | None) -> bool:
    """Whether a domain condition (keyed by its node's text) is the one of `divisor`."""
    if divisor is None:
        return False
    return text == divisor or (text.startswith("ceil_div(") and text.endswith(f", {divisor})"))


def _encodable_param(k: K.Kind) -> bool:
    inner = K.unwrap_maybe(k)
    return isinstance(inner, (K.IntK, K.BoolK, K.DTypeK, K.StrK, K.SeqK))


def _plain(values: dict[str, Any], suffix: str) -> dict[str, Any]:
    if not suffix:
        return dict(values)
    return {k[:-len(suffix)] if k.endswith(suffix) else k: v for k, v in values.items()
            if k.endswith(suffix) or "#" not in k}


def _public(values: dict[str, Any], spec: ElaboratedSpec) -> dict[str, Any]:
    """The model's values of the spec's own names (indices, params, lets), sorted."""
    return {k: values[k] for k in sorted(values) if k in spec.symbols or "." in k}


def printed(e: Expr) -> str:
    return print_expr(e)
