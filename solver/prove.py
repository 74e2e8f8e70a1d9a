"""The prover: every check of seed § 6 (1-5) on every combination of discriminant values.

`prove_spec` takes one elaborated spec and returns a `SpecResult` with its verdict
(`proven`, `refuted` or `unknown`), its diagnostics (each with the declaration, its
position and, where one exists, a concrete counterexample) and its `Plan`.
"""

from __future__ import annotations

import graphlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import z3

from opspec.schema import kinds as K
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.expr import (
    BinOp, Call, Const, Expr, FamilyApp, Name, Splat, walk,
)
from opspec.schema.loader import LoadedSpec
from opspec.schema.evaluate import evaluate
from opspec.schema.primitives import element_budget
from opspec.schema.printer import print_expr
from opspec.schema.values import ADTValue
from opspec.solver import plan as P
from opspec.solver.discriminants import (
    COMBOS_LIMIT, combinations, count, describe_value, discriminants,
)
from opspec.solver.encode import EncodeError, _Unsupported
from opspec.solver.fold import (MAX_FOLDED_NODES, FamilyCycle, Folder, ShapeTooLarge,
                                adt_invariants)
from opspec.solver.order import BranchResult, obviously_dim, plan_branch
from opspec.solver.queries import BUDGET_FACTOR, Answer, BranchQueries, z3_budget
from opspec.solver.spec_checks import SPEC_CHECKS
from opspec.solver.z3env import DEFAULT_RLIMIT, Verdict

PROVEN, REFUTED, UNKNOWN = "proven", "refuted", "unknown"

#: Hard caps on the work of one spec, so that no spec text makes the prover run unbounded
#: (40 optional inputs are 2**40 combinations; a nonlinear rule read on every combination
#: spends a whole rlimit per question). Past a cap the rest is not checked and one `unknown`
#: advisory says so: the verdict is then `unknown`, never `proven`.
#: - at most COMBOS_HARD_LIMIT combinations are enumerated (the stored corpus's largest spec
#:   has 2048; 4096 combinations that each ask Z3 one cheap question take about 40 s);
#: - the Z3 questions of the spec (the prover's and its whole-spec passes') share one
#:   budget, `queries.z3_budget` (64 rlimits: at most 8192 cheap questions, or about 64
#:   undecided ones, about 20 s);
#: - the workload rows may generate WORKLOAD_ELEMENTS elements in all.
COMBOS_HARD_LIMIT = 4096
Z3_BUDGET_FACTOR = BUDGET_FACTOR
#: Elements the workload rows of one spec may generate in all while the prover checks them
#: (4x the limit of one generator; about 30 s of Python lists).
WORKLOAD_ELEMENTS = 1 << 26


class _Guarded:
    """A branch's queries, where a declaration the encoder cannot express (an opaque value
    where it needs a number: `ceil_div(K, q.group)` with a `Value` field) leaves the
    question undecided; the EncodeError used to escape and crash the whole spec."""

    def __init__(self, queries: BranchQueries):
        self._q = queries

    def __getattr__(self, name: str) -> Any:
        return getattr(self._q, name)

    def _ask(self, question, *args, **kwargs) -> Answer:
        try:
            return question(*args, **kwargs)
        except (EncodeError, _Unsupported) as exc:
            # _Unsupported: a node the exact encoding cannot express, where the encoder
            # gives up instead of abstracting (`not 0.5` in a let).
            return Answer(Verdict.UNKNOWN, reason=f"cannot encode {exc}")

    def two_solutions(self, *args, **kwargs) -> Answer:
        return self._ask(self._q.two_solutions, *args, **kwargs)

    def satisfiable(self, *args, **kwargs) -> Answer:
        return self._ask(self._q.satisfiable, *args, **kwargs)


@dataclass
class SpecResult:
    op: str
    file: str
    status: str
    verdict: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    plan: P.Plan | None = None
    seconds: float = 0.0
    combinations: int = 0
    cached: bool = False
    #: "checked", or "skipped: <why>" — whether the op's code was checked against the spec
    code_checks: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "file": self.file, "status": self.status, "verdict": self.verdict,
                "combinations": self.combinations, "seconds": round(self.seconds, 4),
                "cached": self.cached,
                "diagnostics": [d.to_json() for d in self.diagnostics]}


def verdict_of(diags: list[Diagnostic]) -> str:
    if any(d.is_error for d in diags):
        return REFUTED
    if any(d.check == "unknown" for d in diags):
        return UNKNOWN
    return PROVEN


class _Prover:
    def __init__(self, spec: ElaboratedSpec, loaded: LoadedSpec, rlimit: int):
        self.spec = spec
        self.loaded = loaded
        self.rlimit = rlimit
        self.diags: list[Diagnostic] = []
        self._seen: set[tuple] = set()
        self._z3_cache: dict[tuple, Any] = {}
        self.budget = None  # the spec's Z3 budget, while `run` holds it open
        self.unasked = 0  # combinations whose Z3 questions the spent budget left unasked

    def report(self, check: str, path: str, message: str, *, severity=Severity.ERROR,
               counterexample: dict | None = None, hint: str | None = None, dedup=None) -> None:
        key = (check, path, dedup if dedup is not None else message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.diags.append(Diagnostic(check, message, op=self.spec.name,
                                     path=self.loaded.file_decl(path) if path else path,
                                     pos=self.loaded.pos(path), severity=severity,
                                     counterexample=counterexample, hint=hint))

    def run(self) -> tuple[list[Diagnostic], P.Plan, int]:
        with z3_budget(self.rlimit) as self.budget:
            return self._run()

    def _run(self) -> tuple[list[Diagnostic], P.Plan, int]:
        spec = self.spec
        self.check_family_graph()
        ds = discriminants(spec)
        n = count(ds)
        if COMBOS_LIMIT < n <= COMBOS_HARD_LIMIT:  # above the hard cap, the advisory below
            self.report("combos-limit", "signature", f"{n} combinations of discriminant values "
                        f"exceed the limit of {COMBOS_LIMIT}; every one is still checked",
                        severity=Severity.ADVISORY)
        branches = []
        combos = 0
        for combo in combinations(ds):
            if combos == COMBOS_HARD_LIMIT:
                # A hard cap (see COMBOS_HARD_LIMIT): enumerating 2**40 combinations never
                # ends. The plan holds only the combinations checked.
                # A count like 2**5000 is shown by its size, not its 1500 digits.
                shown_n = str(n) if n < 10 ** 12 else f"about 2**{n.bit_length() - 1}"
                self.report("unknown", "signature", f"{shown_n} combinations of discriminant values "
                            f"exceed the hard cap of {COMBOS_HARD_LIMIT}: only the first "
                            f"{COMBOS_HARD_LIMIT} were checked, and calls on the others have "
                            "no branch", severity=Severity.ADVISORY, dedup="combos-hard-cap",
                            hint="make fewer parameters discriminants (a Bool, enum, Maybe or "
                                 "optional tensor each doubles the count or more)")
                break
            combos += 1
            branches.append(self.check_combo(combo))
        if self.unasked:
            self.report("unknown", "signature", f"the Z3 budget of this spec "
                        f"({Z3_BUDGET_FACTOR} x rlimit resource units) was spent after "
                        f"{self.budget.questions} questions; the questions of {self.unasked} "
                        f"of {combos} combinations were not asked", severity=Severity.ADVISORY,
                        dedup="z3-budget",
                        hint="look for nonlinear refinements or axes (a product of two "
                             "unknowns), and for combinations that each ask new questions")
        plan = P.Plan(spec.name, spec.file, "", tuple(d.key for d in ds), tuple(branches), spec)
        if not spec.signature_broken and not spec.broken_under("composition"):
            # Whole-spec passes over the proven plan (workloads, effects, SymInt safety),
            # over the rows that loaded and the roofline parts that elaborated. They decide
            # from the composition whether the op gets a compile boundary.
            # The element budget bounds what workload rows generate in all (each generator
            # call has its own limit, but rows are unbounded in number).
            with element_budget(WORKLOAD_ELEMENTS):
                diags = [d for check in SPEC_CHECKS for d in check(spec, self.loaded, plan)]
            for d in diags:
                self.report(d.check, d.path or "", d.message, severity=d.severity,
                            counterexample=dict(d.counterexample) if d.counterexample else None,
                            hint=d.hint)
        return self.diags, plan, combos

    # -- static checks -----------------------------------------------------------------------

    def check_family_graph(self) -> None:
        spec = self.spec
        graph = {}
        for name, fam in spec.families.items():
            graph[name] = {c.shape.family for c in fam.cases if isinstance(c.shape, FamilyApp)}
        try:
            list(graphlib.TopologicalSorter(graph).static_order())
        except graphlib.CycleError as exc:
            # graphlib lists each family before the ones that apply it; print the references
            # (each applies the next), starting from the first family declared, so the
            # report does not depend on graphlib's traversal.
            cyc = list(reversed(exc.args[1][:-1]))
            names = list(spec.families)
            first = min(range(len(cyc)), key=lambda i: names.index(cyc[i]))
            cyc = cyc[first:] + cyc[:first]
            self.report("family-cycle", spec.families[cyc[0]].path,
                        "type families refer to each other in a cycle: "
                        + " -> ".join(cyc + [cyc[0]]) + " (each applies the next)")
        # A family is used when a tensor applies it, or a used family's case does: reached
        # from the tensors (a family applied only by an unused one was counted as used).
        # A tensor that failed elaboration is missing here, and so would be the families it
        # applies: then nothing is reported (it used to add a cascade of "used by no shape").
        sig = self.loaded.spec.signature if self.loaded.spec is not None else None
        declared = set() if sig is None else (
            set(sig.inputs) | set(sig.outputs) | {n for n, p in sig.params.items() if p.is_tensor})
        if declared - set(spec.tensors):
            return
        used: set[str] = set()
        todo = [t.shape.family for t in spec.tensors.values() if isinstance(t.shape, FamilyApp)]
        while todo:
            name = todo.pop()
            if name in used or name not in spec.families:
                continue
            used.add(name)
            todo.extend(c.shape.family for c in spec.families[name].cases
                        if isinstance(c.shape, FamilyApp))
        for name, fam in spec.families.items():
            if name not in used:
                self.report("name", fam.path, f"type family {name} is used by no shape")

    # -- one combination --------------------------------------------------------------------

    def check_combo(self, combo: dict[str, Any]) -> P.Branch:
        spec = self.spec
        folder = Folder(spec, combo)
        shown = {k: plain_value(v) for k, v in combo.items()}
        for r in spec.rules:
            # A domain restriction, or any refinement that this combination's discriminant
            # values make false on its own, excludes the combination.
            v = folder.expr(r.expr)
            if isinstance(v, Const) and v.value is False:
                return P.Branch(tuple(sorted(combo.items())), excluded_by=r.path)
        try:
            res = plan_branch(spec, combo)
        except FamilyCycle:
            # The shapes of this combination never resolve; `family-cycle` already reported
            # the cycle (statically, once), and no other check can run here. It used to
            # escape as a KeyError and crash the whole spec.
            return P.Branch(tuple(sorted(combo.items())), excluded_by="(type family cycle)")
        except ShapeTooLarge as big:
            # Families that grow their arguments at each application (`F[t, R + R]` nested
            # 30 deep) made shapes of 2**30 nodes: refused here, as a hard limit, instead
            # of hanging every later pass.
            self.report("language", big.family.path, f"applying type family {big.family.name} "
                        f"(`{print_expr_short(big.app)}`) makes an argument of more than "
                        f"{MAX_FOLDED_NODES} nodes: the families grow their arguments at each "
                        "application", counterexample=shown or None, dedup=big.family.name,
                        hint="pass the argument as its own index or a let, not a growing "
                             "expression")
            return P.Branch(tuple(sorted(combo.items())), excluded_by="(shape too large)")
        except Exception:  # a fold of an ill-kinded declaration; elaboration reported it
            if spec.signature_broken:
                return P.Branch(tuple(sorted(combo.items())), excluded_by="(broken declarations)")
            raise
        for path, miss in res.family_misses:
            values = ", ".join(f"{m}={describe_value(v)}" for m, v in zip(miss.family.match, miss.values))
            cex = {**shown, **{f"{miss.family.name}.{m}": plain_value(v)
                               for m, v in zip(miss.family.match, miss.values)}}
            if not miss.matching:
                if spec.broken_under(f"{miss.family.path}.cases"):
                    continue  # a case that failed to elaborate is missing: an echo, not a gap
                self.report("family-gap", miss.family.path,
                            f"no case of type family {miss.family.name} covers {values} "
                            f"(applied in {path})", counterexample=cex,
                            dedup=(miss.family.name, miss.values))
            else:
                cases = " and ".join(f"case {i} ({miss.family.cases[i].path})" for i in miss.matching)
                self.report("family-overlap", miss.family.path,
                            f"{cases} of type family {miss.family.name} both cover {values}",
                            counterexample=cex, dedup=(miss.family.name, miss.values))
        for path, nd in res.not_discriminant:
            # The counterexample: the discriminant values on which the argument stays open.
            self.report("kind", path, f"the argument `{print_expr(nd.arg)}` of {nd.family.name} "
                        "that its cases match on is not a discriminant",
                        counterexample=shown or None)
        if res.family_misses or res.not_discriminant:
            return res.branch
        if spec.signature_broken:
            # Declarations that failed to load or elaborate are left out; solving and Z3
            # questions over what remains would only echo those errors. (A broken workload
            # row or roofline is not read here: the signature is still proven.)
            return res.branch
        if self.budget.spent_out:
            self.unasked += 1
            return res.branch
        invariants = self.invariants(combo, folder)
        queries = _Guarded(BranchQueries(spec, res, invariants))
        # Combinations that fold to the same declarations ask Z3 the same questions.
        key = problem_key(res, invariants)
        unknowns = tuple(u.name for u in res.unsolved)
        for u in res.unsolved:
            if (key, u.name) not in self._z3_cache:
                self._z3_cache[(key, u.name)] = True
                self.unsolved(queries, u, shown, unknowns)
        if key not in self._z3_cache:
            self._z3_cache[key] = True
            self.dead_branch(queries, shown, combo)
            self.signs(queries, res, shown)
        return res.branch

    def invariants(self, combo: dict[str, Any], folder: Folder) -> list[tuple[str, Expr]]:
        return adt_invariants(self.spec, combo, folder)

    def unsolved(self, q: BranchQueries, u, shown: dict, others: tuple[str, ...] = ()) -> None:
        """`u` stayed unknown after the solving order. `unsolvable` when it is in no input
        (seed § 3: such an index must be a parameter or a let, whatever Z3 says about it) or
        when Z3 proves it unique though Table 1 cannot solve it; `ambiguous` when Z3 finds
        two solutions for the same inputs. `others`: the branch's other unknowns, shown in
        both solutions of an ambiguity."""
        ans = q.two_solutions(u.name, self.rlimit, also=others)
        if u.reason in ("outputs-only", "no-input"):
            # Decided before looking at Z3's verdict: an undecided uniqueness query used to
            # turn this error into an `unknown` advisory.
            where = ("appears in no input that exists on it; an index that appears only in "
                     "outputs must be a parameter or a let") if u.reason == "outputs-only" else \
                ("appears in no tensor that exists on it, only in refinements, lets or the "
                 "roofline, so no call can determine it")
            cex = {**shown, **(ans.counterexample or {})}
            self.report("unsolvable", u.decl, f"index `{u.name}` is used on this branch but "
                        + where, counterexample=cex or None, dedup=u.name,
                        hint=f"make `{u.name}` a parameter, or define it with `let`")
            return
        if ans.verdict is Verdict.UNKNOWN:
            self.report("unknown", u.decl, f"could not decide whether `{u.name}` is determined by "
                        f"the inputs ({ans.reason})", severity=Severity.ADVISORY, dedup=u.name,
                        counterexample=shown or None)
            return
        if ans.verdict is Verdict.SAT:
            self.report("ambiguous", u.decl, f"the inputs admit more than one value of `{u.name}`: "
                        "the same shapes satisfy every declaration with two different solutions",
                        counterexample={**shown, **ans.counterexample}, dedup=u.name,
                        hint="name the axis with its own index and compute the rest with `let`")
            return
        # Unique but not solvable by Table 1: show a call that determines it (preferring a
        # value of at least 2, where 0 and 1 would make the example look degenerate).
        example = None
        kind = self.spec.forall.get(u.name)
        if isinstance(kind, K.IntK):
            example = q.satisfiable(self.rlimit, extra=lambda enc: enc.var(u.name) >= 2)
        if example is None or example.verdict is not Verdict.SAT:
            example = q.satisfiable(self.rlimit)
        cex = {**shown, **(example.counterexample if example.verdict is Verdict.SAT else {})}
        self.report("unsolvable", u.decl, f"index `{u.name}` is determined by the inputs, but no "
                    "unification rule solves it (an axis must be `M`, `a * M + e` with M the "
                    "only unknown, or a splat `*S`)", counterexample=cex or None, dedup=u.name,
                    hint="name the axis with its own index and compute the rest with `let`")

    def dead_branch(self, q: BranchQueries, shown: dict, combo: dict) -> None:
        if q.witness(combo) is not None:
            return
        ans = q.satisfiable(self.rlimit, track=True)
        if ans.verdict is Verdict.UNSAT:
            core = ", ".join(ans.core) if ans.core else "the declarations"
            self.report("dead-branch", ans.core[0] if ans.core else "signature",
                        f"no call can pass on this branch: {core} cannot "
                        f"{'hold' if len(ans.core) == 1 else 'all hold'}",
                        severity=Severity.WARNING, counterexample=shown,
                        dedup=ans.core)
        elif ans.verdict is Verdict.UNKNOWN:
            self.report("unknown", "signature.shape_rules", "could not decide whether the "
                        f"refinements of this branch can hold ({ans.reason})",
                        severity=Severity.ADVISORY, dedup="dead",
                        counterexample=shown or None)  # the branch left undecided

    def signs(self, q: BranchQueries, res: BranchResult, shown: dict) -> None:
        spec = self.spec
        for n in q.outputs:
            t = spec.tensors[n]
            for i, ax in enumerate(res.shapes[n].axes):
                if isinstance(ax, Splat) or obviously_dim(spec, ax):
                    continue
                ans = q.satisfiable(self.rlimit, extra=lambda enc, ax=ax: _evaluates_to(
                    enc, ax, lambda v: v < 0))
                if ans.verdict is Verdict.SAT:
                    cex = {**shown, **ans.counterexample}
                    value = _value_of(ax, cex)
                    if value is not None:
                        cex[f"{n}.shape[{i}]"] = value
                    self.report("negative-axis", t.path + ".shape",
                                f"axis {i} of output `{n}`, `{print_expr(ax)}`, can be negative "
                                "for a call that passes every check", severity=Severity.WARNING,
                                counterexample=cex, dedup=print_expr(ax))
                elif ans.verdict is Verdict.UNKNOWN:
                    # An undecided sign used to pass silently, as if proven non-negative.
                    self.report("unknown", t.path + ".shape", f"could not decide whether axis "
                                f"{i} of output `{n}`, `{print_expr(ax)}`, can be negative "
                                f"({ans.reason})", severity=Severity.ADVISORY,
                                counterexample=shown or None, dedup=("sign", print_expr(ax)))
        for path, divisor in self.divisors(res):
            ans = q.satisfiable(self.rlimit, extra=lambda enc, d=divisor: enc.expr(d) <= 0,
                                unguarded=print_expr(divisor))
            if ans.verdict is Verdict.SAT:
                cex = {**shown, **ans.counterexample}
                if not isinstance(divisor, Name):
                    value = _value_of(divisor, cex)
                    if value is not None:
                        cex[print_expr(divisor)] = value
                self.report("divisor", path, f"the divisor `{print_expr(divisor)}` can be <= 0 for "
                            "a call that passes every other check", severity=Severity.WARNING,
                            counterexample=cex, dedup=print_expr(divisor))
            elif ans.verdict is Verdict.UNKNOWN:
                self.report("unknown", path, f"could not decide whether the divisor "
                            f"`{print_expr(divisor)}` can be <= 0 ({ans.reason})",
                            severity=Severity.ADVISORY, counterexample=shown or None,
                            dedup=("divisor", print_expr(divisor)))

    def divisors(self, res: BranchResult) -> list[tuple[str, Expr]]:
        spec = self.spec
        exprs: list[tuple[str, Expr]] = []
        for n, sh in res.shapes.items():
            for ax in sh.axes:
                exprs.append((spec.tensors[n].path + ".shape", ax.value if isinstance(ax, Splat) else ax))
        for name, e in res.lets.items():
            exprs.append((spec.lets[name].path, e))
        exprs.extend(res.rules)
        out = []
        seen = set()
        for path, e in exprs:
            for node in walk(e):
                d = None
                if isinstance(node, BinOp) and node.op in ("//", "%"):
                    d = node.right
                elif isinstance(node, Call) and node.func == "ceil_div" and len(node.args) == 2:
                    d = node.args[1]
                if d is None or (isinstance(d, Const) and isinstance(d.value, int) and d.value > 0):
                    continue
                if _has_opaque(spec, d):
                    continue
                key = print_expr(d)
                if key not in seen:
                    seen.add(key)
                    out.append((path, d))
        return out


def print_expr_short(e: Any, limit: int = 200) -> str:
    """A family application as written, cut to `limit` characters."""
    from opspec.schema.printer import print_shape

    try:
        text = print_shape(e)
    except Exception:  # a printer gap must not hide the diagnostic
        text = repr(e)
    return text if len(text) <= limit else text[:limit] + "..."


def plain_value(v: Any) -> Any:
    """A discriminant value as plain data for a counterexample (an ADT value as text)."""
    return str(v) if isinstance(v, ADTValue) else v


def _evaluates_to(enc, e: Expr, test) -> Any:
    """`test(value of e)`, and `e` evaluates without raising: a model where an output axis
    divides by zero or calls `ceil_div` with a divisor <= 0 is a call that fails, not one
    with a negative axis (those spurious models were reported as `negative-axis`)."""
    mark = len(enc.domain)
    value = enc.expr(e)
    return z3.And(test(value), *(c for _, c in enc.domain[mark:]))


def _value_of(e: Expr, values: dict[str, Any]) -> Any:
    """`e` under a counterexample's values, or None when they do not determine it."""
    try:
        v = evaluate(e, {k: (tuple(x) if isinstance(x, list) else x) for k, x in values.items()})
    except Exception:  # a name the model left out: the value is not shown
        return None
    return v if isinstance(v, int) else None


def problem_key(res: BranchResult, invariants) -> tuple:
    """What the Z3 questions of a branch depend on, as text."""
    shapes = tuple(sorted((n, tuple(print_expr(a.value if isinstance(a, Splat) else a)
                                     + ("*" if isinstance(a, Splat) else "") for a in sh.axes))
                          for n, sh in res.shapes.items()))
    return (tuple(sorted(print_expr(e) for _, e in res.rules)),
            tuple(sorted((n, print_expr(e)) for n, e in res.lets.items())),
            tuple(sorted(print_expr(e) for _, e in invariants)),
            shapes, tuple(sorted((n, print_expr(e)) for n, e in res.dtypes.items())),
            tuple(u.name for u in res.unsolved))


def _has_opaque(spec: ElaboratedSpec, e: Expr) -> bool:
    """Whether `e` may be other than an int: a name of another kind, `inf`, a float literal
    (the fuzzer's `0.5 // inf` reached the divisor check, whose `<= 0` needs a number)."""
    for n in walk(e):
        if isinstance(n, Const) and isinstance(n.value, float):
            return True
        if isinstance(n, Name):
            k = spec.kind_of(n.id)
            if k is None and n.id in ("inf", "nan"):
                return True
            if k is not None and not isinstance(K.unwrap_maybe(k), (K.IntK, K.BoolK)):
                return True
        if isinstance(n, Call):
            return True
    return False


def prove_spec(spec: ElaboratedSpec, loaded: LoadedSpec, *, rlimit: int = DEFAULT_RLIMIT) -> SpecResult:
    start = time.perf_counter()
    diags, plan, combos = _Prover(spec, loaded, rlimit).run()
    plan = P.Plan(plan.op, plan.file, spec_hash(loaded), plan.discriminants, plan.branches, spec)
    return SpecResult(spec.name, spec.file, spec.status, verdict_of(diags), diags, plan,
                      time.perf_counter() - start, combos)


def json_keys(v: Any) -> Any:
    """`v` with every mapping key a string, so that `json.dumps(sort_keys=True)` can sort it:
    a spec whose YAML mixes key types (`1: a` beside `x: b`, or a `null` key) crashed the
    hashing of `spec_hash` and of the proof cache's key with a TypeError. A key that is not
    a string is tagged with its type (YAML's reader refuses NUL, so no written key is one);
    all-string data comes out unchanged, and so do the hashes of ordinary specs."""
    if isinstance(v, dict):
        return {(k if isinstance(k, str) else f"\0{type(k).__name__}:{k!r}"): json_keys(x)
                for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_keys(x) for x in v]
    return v


def spec_hash(loaded: LoadedSpec) -> str:
    raw = json.dumps(json_keys(loaded.raw), sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
