"""Workload rows: the `workload` check (seed § 6, checks 6 and 7; reference § 5).

`check_workloads(spec, loaded, plan)` is a whole-spec pass (`SPEC_CHECKS`). For every row of
`workloads` it selects the row's branch of the proven Plan from the row's discriminant values
(parameters as given or defaulted, `some`, `out` never passed) and checks, without torch:

1. keys: every parameter without a default is given; every other key is a parameter or an
   index; `some` lists only tensors declared `optional: true`, once each; the row gives
   exactly the `Dim`, `Shape` and `Seq[Int]` indices USED on its branch (`Branch.used`:
   after folding, the shapes and dtypes of the tensors that exist, the refinements that do
   not fold to true, the lets those read, generator arguments, the `requires` of existing
   tensors, the inline roofline), minus those a generator solves on that branch (an index
   in a generated tensor's shape where Table 1 solves it once that generator's arguments
   are known; generators run as soon as their arguments are, so one generator's result may
   give another's argument); lets and indices that are not used are not given. Values have
   their kinds.
2. `dtype_cases` is given iff DType indices are used on the branch; each item assigns
   exactly those, with values in their sets, and (with `dtype_combos`) together with the
   row's dtype parameters equals one combination.
3. labels: non-empty and made of `[A-Za-z0-9._-]` (errors); at most 24 characters (a
   WARNING, see below); rows sharing a label differ only in dtypes; case ids are unique.
4. instantiation, per case (each `dtype_cases` item): generators run with the row's values
   and a private `random.Random` seeded from `WORKLOAD_SEED`, the op and the case id (the
   seed `opspec.ops.workloads` uses, so the runtime generates the same contents); each
   result shape (the primitive's `shape`) is unified with the declared shape, solving the
   indices the row does not give (Table 1: `M`, `a * M + e`, `*S`) and checking the rest;
   then every let the branch reads evaluates, every axis of every tensor that exists is an
   int >= 0, every dtype is a dtype, every refinement holds, the invariant of every ADT
   value holds, and every `requires` holds on the generated contents.
5. spec-wide: each `requires` is well defined on every branch where its tensor exists: a
   tensor it names exists there too and is generated, and the tensors are read at the
   predicate's rank; an implemented op passes each `optional: true` tensor in one row at
   least and omits it in one row at least.

Every diagnostic has the check id `workload`, the path of the row (`workloads.3`), of its
key (`workloads.3.M`, `workloads.3.dtype_cases.0`, `workloads.3.label`) or of the
declaration (`signature.inputs.x.requires.0`), a message naming the row's label and the
values, and as counterexample the row's values (with the dtype case, when one is at fault).
A row that raises anywhere becomes a diagnostic on that row, never a crash. A row whose keys
are wrong is not instantiated (that would only repeat the missing value).

Decisions on the reference's open points (§ 13):

- Item 4, the 24-character label limit. The reference states it, but its own stored
  `convolution.yaml` breaks it (labels of 28-32 characters), so the rule is either newer than
  that file or not enforced. A long label harms nothing the validator protects (case ids stay
  unique, instantiation is unaffected), so it is a WARNING here; an empty label or one with
  other characters (they end up in file names and history keys) is an error.
- Item 9, case ids: the label, then each dtype value of the case in `forall` order, then each
  dtype parameter value the row gives (as written; one left to its default, or None, does not
  appear), in `params` order, joined by `-` — exactly `opspec.ops.workloads.cases`. Enum,
  Bool, integer and ADT values are not part of an id. Rows sharing a label may therefore
  differ in `dtype_cases` and dtype parameters only.
- Item 10, `dtype_cases` against `dtype_combos`: an item assigns DType indices only; a dtype
  parameter is an ordinary row value. The combination checked is the item plus the row's
  dtype parameters (given or defaulted); it is checked when every combos column has a value,
  as the generated call check does.
- Item 11: an index read only by the `requires` (or shape) of an optional tensor that is
  absent on the row's branch is not used there, so the row must not give it.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from typing import Any, Mapping

from opspec.schema import kinds as K
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.elaborate import ElaboratedSpec, TensorDecl
from opspec.schema.evaluate import evaluate, evaluate_requires
from opspec.schema.expr import Call, Const, Expr, Name, ShapeList, Splat, free_names
from opspec.schema.parse import parse_expr
from opspec.schema.primitives import PRIMITIVES, WORKLOAD_SEED
from opspec.schema.printer import print_expr
from opspec.schema.value_check import show_value, value_error, yaml_data
from opspec.schema.values import ADTValue, is_int, to_tuple
from opspec.solver import plan as P
from opspec.solver.fold import Folder
from opspec.solver.generators import (GeneratedAxisError, GeneratorError, branch_program,
                                      generated_tensors, nested_shape, run_generators,
                                      unknown_symbols)
from opspec.solver.order import linear

__all__ = ["check_workloads", "LABEL_MAX", "case_id"]

CHECK = "workload"
#: The longest label the reference allows (a warning beyond it, see the module docstring).
LABEL_MAX = 24
_LABEL_CHARS = re.compile(r"[A-Za-z0-9._-]+")
#: Dtype names evaluate to themselves (a dtype value is its name).
_DTYPE_NAMES = {n: n for n in K.DTYPES}


class _Present:
    """Stands for a tensor that exists but whose contents are not generated."""

    def __repr__(self) -> str:
        return "<tensor>"


_PRESENT = _Present()


def check_workloads(spec: ElaboratedSpec, loaded: Any, plan: P.Plan) -> list[Diagnostic]:
    """The `workload` diagnostics of a spec's rows (see the module docstring)."""
    checker = _Checker(spec, loaded, plan)
    try:
        checker.run()
    except Exception as exc:  # never a crash: the pass reports what stopped it
        checker.report("workloads", f"the workload rows cannot be checked: "
                       f"{type(exc).__name__}: {exc}")
    return checker.diags


def case_id(spec: ElaboratedSpec, label: str, values: Mapping[str, Any],
            dtypes: Mapping[str, str]) -> str:
    """The case id of reference § 5.1 (as `opspec.ops.workloads.cases` builds it)."""
    parts = [label] + [str(dtypes[n]) for n in spec.forall if n in dtypes]
    parts += [str(values[n]) for n, p in spec.params.items()
              if isinstance(K.unwrap_maybe(p.kind), K.DTypeK) and values.get(n) is not None]
    return "-".join(parts)


# ----------------------------------------------------------------------------- values


def _to_value(v: Any, kind: K.Kind) -> Any:
    """A (kind-checked) YAML value as the evaluator sees it."""
    inner = K.unwrap_maybe(kind)
    if v is None:
        return None
    if isinstance(inner, K.ADTK) and isinstance(v, dict) and len(v) == 1:
        (ctor, fields), = v.items()
        return ADTValue.of(inner.name, ctor, fields if isinstance(fields, dict) else {})
    return to_tuple(v)


def _is_seq(kind: K.Kind) -> bool:
    inner = K.unwrap_maybe(kind)
    return isinstance(inner, K.SeqK) or (isinstance(inner, K.UnionK) and any(
        isinstance(m, K.SeqK) for m in inner.members))


def _seq_text(text: str, env: Mapping[str, Any]) -> Any:
    """A list written as a value-primitive call (`"repeat(512, 4)"`)."""
    e = parse_expr(text)
    if not isinstance(e, Call) or PRIMITIVES.get(e.func) is None or \
            PRIMITIVES[e.func].role != "value":
        raise ValueError(f"`{text}` is not a call of a value primitive such as repeat(512, 4)")
    return evaluate(e, env)


# ----------------------------------------------------------------------------- the checker


class _RowError(Exception):
    """Stops a case: its message is already reported."""


class _Checker:
    def __init__(self, spec: ElaboratedSpec, loaded: Any, plan: P.Plan):
        self.spec = spec
        self.loaded = loaded
        self.plan = plan
        self.diags: list[Diagnostic] = []
        self._seen: set[tuple] = set()
        sig = loaded.spec.signature if getattr(loaded, "spec", None) is not None else None
        self.sig = sig
        #: paths of `requires` entries not well defined on some branch (not instantiated)
        self.ill_defined: set[str] = set()
        self.optional_tensors = {n: t for n, t in {**spec.ctensors, **spec.inputs}.items()
                                 if t.optional is True}

    # reporting ------------------------------------------------------------------------------

    def report(self, path: str, message: str, *, severity: Severity = Severity.ERROR,
               cex: Mapping[str, Any] | None = None, hint: str | None = None) -> None:
        key = (path, message)
        if key in self._seen:
            return
        self._seen.add(key)
        pos = None
        try:
            pos = self.loaded.pos(path)
        except Exception:
            pos = None
        self.diags.append(Diagnostic(CHECK, message, op=self.spec.name, path=path, pos=pos,
                                     severity=severity,
                                     counterexample=dict(cex) if cex else None, hint=hint))

    def row_cex(self, row, dtype_case: Mapping[str, str] | None = None) -> dict[str, Any]:
        cex = {k: yaml_data(v) for k, v in row.values.items()}
        if row.some:
            cex["some"] = list(row.some)
        if dtype_case:
            cex.update(dtype_case)
        return cex

    # texts of declarations as written ---------------------------------------------------------

    def values_text(self, t: TensorDecl) -> str:
        raw = self._raw_tensor(t)
        return raw.values if raw is not None and raw.values else print_expr(t.values)

    def requires_text(self, t: TensorDecl, j: int) -> str:
        raw = self._raw_tensor(t)
        if raw is not None and j < len(raw.requires):
            return raw.requires[j]
        return print_expr(t.requires[j])

    def _raw_tensor(self, t: TensorDecl):
        if self.sig is None:
            return None
        table = {"input": self.sig.inputs, "output": self.sig.outputs}.get(t.role)
        return table.get(t.name) if table is not None else None

    # the pass ----------------------------------------------------------------------------------

    def run(self) -> None:
        self.guarded(self.check_requires_defined)
        for i, row in enumerate(self.spec.workloads):
            try:
                self.check_row(i, row)
            except Exception as exc:
                self.report(f"workloads.{i}", f"row `{row.label}` cannot be checked: "
                            f"{type(exc).__name__}: {exc}", cex=self.row_cex(row))
        self.guarded(self.check_labels)
        self.guarded(self.check_optional_coverage)

    def guarded(self, check) -> None:
        """Run a spec-wide part; one that raises is reported, and the others still run."""
        try:
            check()
        except Exception as exc:
            self.report("workloads", f"the workload rows cannot be checked "
                        f"({check.__name__}): {type(exc).__name__}: {exc}")

    # one row ------------------------------------------------------------------------------------

    def check_row(self, i: int, row) -> None:
        spec = self.spec
        path = f"workloads.{i}"
        label = row.label
        cex = self.row_cex(row)
        ok = True

        # keys that are neither parameters nor indices
        for key in row.values:
            if key in spec.params:
                continue
            if key in spec.forall:
                if isinstance(spec.forall[key], K.DTypeK):
                    self.report(f"{path}.{key}", f"row `{label}` gives the DType index `{key}` "
                                f"as a key ({show_value(row.values[key])}); DType indices are given "
                                "in `dtype_cases`", cex=cex,
                                hint=f"dtype_cases: [{{{key}: {show_value(row.values[key])}}}]")
                continue
            if key in spec.lets:
                why = (f"`{key}` is a let, computed from `{spec.lets[key].text}`; a row never "
                       "gives it")
            elif key in spec.tensors:
                why = (f"`{key}` is a tensor; a row lists the optional tensors it passes in "
                       "`some`")
            else:
                why = f"`{key}` is no parameter or index of {spec.name}"
            self.report(f"{path}.{key}", f"row `{label}` has the key `{key}` "
                        f"({show_value(row.values[key])}), but {why}; a row has no other key", cex=cex)

        # parameters
        env: dict[str, Any] = {}
        for n, p in spec.params.items():
            if n in row.values:
                v = row.values[n]
                if isinstance(v, str) and _is_seq(p.kind):
                    try:
                        v = _seq_text(v, {})
                    except Exception as exc:
                        self.report(f"{path}.{n}", f"row `{label}`: parameter `{n}` = {show_value(v)} "
                                    f"does not evaluate: {exc}", cex=cex)
                        ok = False
                        continue
                err = value_error(v, p.kind, spec.adts)
                if err is not None:
                    self.report(f"{path}.{n}", f"row `{label}`: parameter `{n}` ({p.type_text}) "
                                f"= {show_value(v)}: {err}", cex=cex)
                    ok = False
                    continue
                env[n] = _to_value(v, p.kind)
            elif p.has_default:
                env[n] = _to_value(p.default, p.kind)
            else:
                self.report(path, f"row `{label}` does not give the parameter `{n}` "
                            f"({p.type_text}), which has no default", cex=cex,
                            hint=f"add `{n}: <value>` to the row")
                ok = False

        # some
        some: list[str] = []
        for j, t in enumerate(row.some):
            decl = spec.tensors.get(t) if isinstance(t, str) else None
            if decl is None or decl.role == "output":
                self.report(f"{path}.some", f"row `{label}` lists `{t}` in `some`, but {spec.name} "
                            f"has no input or construction-time tensor `{t}`; optional ones: "
                            f"{', '.join(self.optional_tensors) or 'none'}", cex=cex)
                ok = False
            elif decl.optional is not True:
                why = ("is required" if decl.optional is False else
                       "is passed exactly when its `optional` expression holds")
                self.report(f"{path}.some", f"row `{label}` lists `{t}` in `some`, but `{t}` "
                            f"{why}; `some` lists only tensors declared `optional: true`",
                            cex=cex)
                ok = False
            elif t in some:
                self.report(f"{path}.some", f"row `{label}` lists `{t}` twice in `some`", cex=cex)
            else:
                some.append(t)
        if not ok:
            return

        # the branch
        branch = self.branch_of(env, set(some))
        if branch is None:
            self.report(path, f"row `{label}`: no branch of the plan has its discriminant values "
                        f"({self.describe_combo(env, set(some))})", cex=cex)
            return
        if branch.excluded_by is not None:
            rule = next((r for r in spec.rules if r.path == branch.excluded_by), None)
            if rule is None:
                self.report(path, f"row `{label}`: its branch {branch.describe_combo()} is "
                            f"excluded ({branch.excluded_by})", cex=cex)
            elif rule.is_domain:
                self.report(path, f"row `{label}` breaks the domain restriction `{rule.text}` "
                            f"({rule.path}): its branch {branch.describe_combo()} is excluded",
                            cex=cex)
            else:
                self.report(path, f"row `{label}` breaks the refinement `{rule.text}` "
                            f"({rule.path}), which is false on its whole branch "
                            f"{branch.describe_combo()}", cex=cex)
            return
        folder = Folder(spec, dict(branch.combo))
        shapes = {n: sh for n, sh, _ in branch.tensors}
        dtypes = {n: dt for n, _, dt in branch.tensors}
        lets = {n: folder.expr(d.expr) for n, d in spec.lets.items()}

        # indices
        used = set(branch.used)
        solved = self.generator_solved(branch, folder, shapes, lets)
        required = [n for n in spec.forall if n in used and n not in solved
                    and not isinstance(spec.forall[n], K.DTypeK)]
        given = [n for n in row.values if n in spec.forall
                 and not isinstance(spec.forall[n], K.DTypeK)]
        for n in required:
            if n not in row.values:
                where = self.where_used(n, branch, folder, shapes, dtypes, lets)
                self.report(path, f"row `{label}` does not give the index `{n}` "
                            f"({spec.forall[n]}), which is used on its branch ({where})",
                            cex=cex, hint=f"add `{n}: <value>` to the row")
                ok = False
        for n in given:
            if n in required:
                continue
            if n in solved:
                why = (f"the generator of `{solved[n]}` solves it on this branch (from its "
                       f"shape); a row does not give a generator-solved index")
            else:
                why = ("it is not used on this row's branch"
                       + (f" ({branch.describe_combo()})" if branch.combo else ""))
            self.report(f"{path}.{n}", f"row `{label}` gives the index `{n}` = "
                        f"{show_value(row.values[n])}, but {why}; a row gives exactly the used "
                        "indices and no other key", cex=cex)
        for n in required:
            if n not in row.values:
                continue
            v = row.values[n]
            kind = spec.forall[n]
            if isinstance(v, str) and _is_seq(kind):
                try:
                    v = _seq_text(v, env)
                except Exception as exc:
                    self.report(f"{path}.{n}", f"row `{label}`: index `{n}` = {show_value(v)} does "
                                f"not evaluate: {exc}", cex=cex)
                    ok = False
                    continue
            err = value_error(v, kind, spec.adts)
            if err is not None:
                self.report(f"{path}.{n}", f"row `{label}`: index `{n}` ({kind}) = {show_value(v)}: "
                            f"{err}", cex=cex)
                ok = False
                continue
            env[n] = to_tuple(v)

        # dtype cases
        dtype_used = [n for n in spec.forall if n in used
                      and isinstance(spec.forall[n], K.DTypeK)]
        cases = self.dtype_cases(i, row, dtype_used, env, cex)
        if cases is None or not ok:
            return
        self.check_adt_invariants(i, row, env, cex)
        for dc in cases:
            cid = case_id(spec, label, row.values, dc)
            try:
                self.instantiate(i, row, branch, folder, shapes, dtypes, lets, env, dc, cid)
            except _RowError:
                continue

    # branch selection --------------------------------------------------------------------------

    def row_combo(self, env: Mapping[str, Any], some: set[str]) -> dict[str, Any]:
        spec = self.spec
        combo: dict[str, Any] = {}
        for key in self.plan.discriminants:
            if key.startswith("present("):
                n = key[len("present("):-1]
                if n in spec.params:
                    combo[key] = env.get(n) is not None
                elif n == "out":
                    combo[key] = False
                else:
                    combo[key] = n in some
            else:
                v = env.get(key)
                if isinstance(v, ADTValue):
                    info = spec.adts.get(v.adt)
                    finite = sorted(info.finite_fields(v.ctor)) if info else []
                    v = ADTValue(v.adt, v.ctor, tuple((f, v.field(f)) for f in finite
                                                      if v.has(f)))
                combo[key] = v
        return combo

    def branch_of(self, env: Mapping[str, Any], some: set[str]) -> P.Branch | None:
        combo = self.row_combo(env, some)
        for b in self.plan.branches:
            bc = dict(b.combo)
            if all(_same(bc.get(k), v) for k, v in combo.items()):
                return b
        return None

    def describe_combo(self, env, some) -> str:
        from opspec.solver.discriminants import describe_value
        combo = self.row_combo(env, some)
        return ", ".join(f"{k}={describe_value(v)}" for k, v in combo.items()) or "none"

    # used and generator-solved indices -----------------------------------------------------------

    def reads(self, e: Expr, lets: Mapping[str, Expr], seen: set[str] | None = None) -> set[str]:
        """The `forall` indices `e` reads, through lets."""
        spec = self.spec
        out: set[str] = set()
        seen = set() if seen is None else seen
        for n in free_names(e):
            if n in spec.forall:
                out.add(n)
            elif n in lets and n not in seen:
                seen.add(n)
                out |= self.reads(lets[n], lets, seen)
        return out

    def generator_solved(self, branch: P.Branch, folder: Folder, shapes, lets) -> dict[str, str]:
        """The indices a generator solves on this branch, each with the tensor solving it.

        The row gives every used index outside generated shapes. A generator runs once its
        arguments are known; its shape then solves (Table 1: `M`, `a * M + e`, `*S`) the
        indices still unknown, which may let further generators run (`paged_block_table(B,
        W, NP)` after `cu_seqlens_q: [B + 1]` solved B). When generators remain that cannot
        run, the row gives their missing arguments too, and solving goes on."""
        gens = generated_tensors(self.spec, branch)
        if not gens:
            return {}
        args = {t.name: self.reads(folder.expr(t.values), lets) for t in gens}
        in_shapes: set[str] = set()
        for t in gens:
            for ax in shapes[t.name].axes:
                in_shapes |= self.reads(ax.value if isinstance(ax, Splat) else ax, lets)
        # Given by the row: every used index outside generated shapes; then, while some
        # generator cannot run, the arguments it lacks.
        known = set(branch.used) - in_shapes
        solved: dict[str, str] = {}
        ran: list[TensorDecl] = []

        def unknown(e: Expr) -> set[str]:
            return {n for n in self.reads(e, lets) if n not in known and n not in solved}

        while True:
            self._solve_generated(gens, args, shapes, lets, known, solved, ran, unknown)
            blocked = [t for t in gens if t not in ran]
            if not blocked:
                break
            known |= set().union(*(args[t.name] - known - set(solved) for t in blocked))
            # every blocked generator can run now
        # Once more from what the row gives, to name the generator that solves each index
        # the way instantiation runs them (in declaration order, as soon as they can).
        solved.clear()
        ran.clear()
        self._solve_generated(gens, args, shapes, lets, known, solved, ran, unknown)
        return solved

    def _solve_generated(self, gens, args, shapes, lets, known, solved, ran, unknown) -> None:
        spec = self.spec
        progress = True
        while progress:
            progress = False
            for t in gens:
                if t not in ran and not (args[t.name] - known - set(solved)):
                    ran.append(t)
                    progress = True
            for t in ran:
                axes = shapes[t.name].axes
                open_splats = [a for a in axes if isinstance(a, Splat) and unknown(a.value)]
                if len(open_splats) == 1 and isinstance(open_splats[0].value, Name) and \
                        isinstance(spec.forall.get(open_splats[0].value.id), K.SeqK):
                    solved[open_splats[0].value.id] = t.name
                    progress = True
                for ax in axes:
                    if isinstance(ax, Splat):
                        continue
                    unk = unknown(ax)
                    if len(unk) != 1:
                        continue
                    (u,) = unk
                    if u not in free_names(ax) or not isinstance(spec.forall.get(u), K.IntK):
                        continue  # only through a let: a check, not a solve
                    lin = linear(ax, u)
                    if lin is None or not (isinstance(lin[0], Const) and is_int(lin[0].value)
                                           and lin[0].value > 0):
                        continue
                    solved[u] = t.name
                    progress = True

    def where_used(self, n: str, branch, folder, shapes, dtypes, lets) -> str:
        spec = self.spec
        for t in branch.present:
            if t in shapes:
                sh = shapes[t]
                if any(n in self.reads(a.value if isinstance(a, Splat) else a, lets)
                       for a in sh.axes):
                    return f"in the shape of `{t}`"
                if n in self.reads(dtypes[t], lets):
                    return f"in the dtype of `{t}`"
        for t in branch.present:
            d = spec.tensors[t]
            if d.values is not None and n in self.reads(folder.expr(d.values), lets):
                return f"as an argument of the generator of `{t}`"
            if any(n in self.reads(folder.expr(r), lets) for r in d.requires):
                return f"in the `requires` of `{t}`"
        for r in spec.rules:
            e = folder.expr(r.expr)
            if not (isinstance(e, Const) and e.value is True) and n in self.reads(e, lets):
                return f"in the refinement `{r.text}`"
        return "in the roofline"

    # dtype cases --------------------------------------------------------------------------------

    def dtype_cases(self, i: int, row, dtype_used: list[str], env: Mapping[str, Any],
                    cex: dict) -> list[dict[str, str]] | None:
        spec = self.spec
        path = f"workloads.{i}"
        label = row.label
        if not dtype_used:
            if row.dtype_cases is not None:
                self.report(f"{path}.dtype_cases", f"row `{label}` gives `dtype_cases`, but no "
                            "DType index is used on its branch; leave `dtype_cases` out",
                            cex=cex)
                return None
            return [{}]
        if not row.dtype_cases:
            self.report(path if row.dtype_cases is None else f"{path}.dtype_cases",
                        f"row `{label}` gives no `dtype_cases`, but the DType "
                        f"ind{'ices' if len(dtype_used) > 1 else 'ex'} "
                        f"{', '.join(dtype_used)} {'are' if len(dtype_used) > 1 else 'is'} "
                        "used on its branch; `dtype_cases` is a non-empty list of assignments",
                        cex=cex, hint="dtype_cases: [{" + ", ".join(
                            f"{n}: {sorted(spec.forall[n].members or K.DTYPES)[0]}"
                            for n in dtype_used) + "}]")
            return None
        ok = True
        combos = spec.dtype_combos
        dparams = {n: env.get(n) for n, p in spec.params.items()
                   if isinstance(K.unwrap_maybe(p.kind), K.DTypeK)}
        for j, dc in enumerate(row.dtype_cases):
            dpath = f"{path}.dtype_cases.{j}"
            keys = list(dc)
            missing = [n for n in dtype_used if n not in dc]
            extra = [n for n in keys if n not in dtype_used]
            if missing or extra:
                parts = []
                if missing:
                    parts.append(f"misses {', '.join(missing)}")
                if extra:
                    parts.append(f"has {', '.join(extra)}, which "
                                 + ("is" if len(extra) == 1 else "are")
                                 + " no DType index used on its branch")
                self.report(dpath, f"row `{label}`: dtype case {show_value(dc)} {' and '.join(parts)}; "
                            f"each item assigns exactly {', '.join(dtype_used)}",
                            cex={**cex, **{k: v for k, v in dc.items() if isinstance(k, str)}})
                ok = False
                continue
            bad = False
            for n in dtype_used:
                err = value_error(dc[n], spec.forall[n], spec.adts)
                if err is not None:
                    self.report(dpath, f"row `{label}`: dtype case {show_value(dc)}: {n} = "
                                f"{show_value(dc[n])}: {err}", cex={**cex, **dc})
                    bad = True
            if bad:
                ok = False
                continue
            if combos:
                cols = list(combos[0])
                values = {**{k: v for k, v in dparams.items()}, **dc}
                if all(values.get(c) is not None for c in cols):
                    got = tuple(values[c] for c in cols)
                    allowed = [tuple(r[c] for c in cols) for r in combos]
                    if got not in allowed:
                        self.report(dpath, f"row `{label}`: the dtype combination "
                                    + ", ".join(f"{c}={values[c]}" for c in cols)
                                    + " is not one of `dtype_combos` ("
                                    + "; ".join(", ".join(f"{c}={v}" for c, v in zip(cols, a))
                                                for a in allowed) + ")",
                                    cex={**cex, **dc})
                        ok = False
        return [dict(dc) for dc in row.dtype_cases] if ok else None

    # ADT invariants ------------------------------------------------------------------------------

    def check_adt_invariants(self, i: int, row, env: Mapping[str, Any], cex: dict) -> None:
        spec = self.spec
        for n, p in spec.params.items():
            v = env.get(n)
            if not isinstance(v, ADTValue):
                continue
            info = spec.adts.get(v.adt)
            ctor = info.ctors.get(v.ctor) if info else None
            if ctor is None or ctor.invariant is None:
                continue
            where = f"workloads.{i}.{n}" if n in row.values else f"workloads.{i}"
            try:
                holds = evaluate(ctor.invariant, dict(v.fields))
            except Exception as exc:
                self.report(where, f"row `{row.label}`: the invariant `{ctor.invariant_text}` of "
                            f"{v.adt}.{v.ctor} cannot be evaluated on {n} = {v}: {exc}", cex=cex)
                continue
            if holds is not True:
                self.report(where, f"row `{row.label}`: {n} = {v} breaks the invariant "
                            f"`{ctor.invariant_text}` of {v.adt}.{v.ctor}", cex=cex)

    # instantiation ------------------------------------------------------------------------------

    def instantiate(self, i: int, row, branch: P.Branch, folder: Folder, shapes, dtypes,
                    lets: Mapping[str, Expr], env0: Mapping[str, Any], dc: Mapping[str, str],
                    cid: str) -> None:
        """One case of a row, as the validator instantiates it (torch-free: shapes, dtypes and
        generated contents)."""
        spec = self.spec
        path = f"workloads.{i}"
        label = row.label
        cex = self.row_cex(row, dc)
        shown_case = f" (case `{cid}`)" if dc else ""

        def fail(message: str, where: str = path, hint: str | None = None) -> None:
            self.report(where, f"row `{label}`{shown_case}: {message}", cex=cex, hint=hint)

        env: dict[str, Any] = dict(_DTYPE_NAMES)
        env.update(env0)
        env.update(dc)
        present = set(branch.present)
        for t in spec.tensors:
            env[t] = _PRESENT if t in present else None
        env["out"] = None
        rng = random.Random(f"{WORKLOAD_SEED}:{spec.name}:{cid}")

        let_errors: dict[str, str] = {}

        def symbol_unknown(e: Expr) -> set[str]:
            return unknown_symbols(spec, e, env)

        # generators, in declaration order, as soon as their arguments are known
        gens = generated_tensors(self.spec, branch)
        calls, _ = branch_program(spec, branch, folder)
        try:
            run = run_generators(spec, calls, shapes, env, rng, lets, let_errors)
        except GeneratorError as err:
            text = self.values_text(spec.tensors[err.name])
            if err.reason == "unify":
                fail(f"the generator of `{err.name}`, `{text}`, gives shape "
                     f"{show_value(err.actual)}, which does not unify with its declared shape: "
                     f"{err.detail}")
            else:
                msg = str(err.detail)
                prefix = f"{print_expr(err.call)} raises "
                fail(f"the generator of `{err.name}`, `{text}`, raises "
                     f"{msg[len(prefix):] if msg.startswith(prefix) else msg}")
            raise _RowError from err
        except GeneratedAxisError as err:
            self.axis_failed(err, fail)
            raise _RowError from err
        generated = run.generated
        for name in run.never_known:
            t = spec.tensors[name]
            names = ", ".join(sorted(symbol_unknown(folder.expr(t.values))))
            fail(f"the arguments of the generator of `{name}`, `{self.values_text(t)}`, are "
                 f"never known ({names})")
            raise _RowError
        if run.unsolved:
            for t, k, ax, n in run.unsolved:
                fail(f"the generated `{t}` has length {n} at axis {k}, and `{print_expr(ax)}` "
                     f"there cannot be solved ({', '.join(sorted(symbol_unknown(ax)))} unknown)")
            raise _RowError

        # lets the branch reads
        for n, msg in let_errors.items():
            if self.let_is_read(n, branch, folder, shapes, dtypes, lets):
                fail(f"the let `{n}` = `{spec.lets[n].text}` does not evaluate: {msg}")
                raise _RowError

        # every axis and dtype of every tensor that exists
        for t in branch.present:
            if t not in shapes:
                continue
            decl = spec.tensors[t]
            axes = []
            broken = False
            for k, ax in enumerate(shapes[t].axes):
                e = ax.value if isinstance(ax, Splat) else ax
                try:
                    v = evaluate(e, env)
                except Exception as exc:
                    fail(f"axis {k} of `{t}`, `{print_expr(e)}`, does not evaluate: {exc}",
                         where=path)
                    broken = True
                    break
                if isinstance(ax, Splat):
                    if not isinstance(v, (tuple, list)) or not all(is_int(x) for x in v):
                        fail(f"`*{print_expr(e)}` in the shape of `{t}` is {show_value(v)}, not a "
                             "sequence of ints")
                        broken = True
                        break
                    vals = list(v)
                else:
                    if not is_int(v):
                        fail(f"axis {k} of `{t}`, `{print_expr(e)}`, is {show_value(v)}, not an int")
                        broken = True
                        break
                    vals = [v]
                for x in vals:
                    if x < 0:
                        fail(f"axis {k} of `{t}`, `{print_expr(e)}`, is {x}, a negative length "
                             f"(declared shape of {decl.path})")
                        broken = True
                axes.extend(vals)
            if not broken and t in generated:
                got = nested_shape(generated[t], len(axes))
                if got != tuple(axes)[:len(got)]:
                    fail(f"the generated `{t}` has shape {show_value(got)}, but its declared shape "
                         f"evaluates to {show_value(axes)}")
            try:
                dt = evaluate(dtypes[t], env)
            except Exception as exc:
                fail(f"the dtype of `{t}`, `{print_expr(dtypes[t])}`, does not evaluate: {exc}")
                continue
            if not isinstance(dt, str) or dt not in K.DTYPES:
                fail(f"the dtype of `{t}`, `{print_expr(dtypes[t])}`, is {show_value(dt)}, not a "
                     "dtype")

        # refinements
        for r in spec.rules:
            e = folder.expr(r.expr)
            if isinstance(e, Const) and e.value is True:
                continue
            try:
                holds = evaluate(e, env)
            except Exception as exc:
                fail(f"the refinement `{r.text}` ({r.path}) does not evaluate: {exc}")
                continue
            if holds is not True:
                names = sorted(n for n in free_names(r.expr) if n in env
                               and spec.kind_of(n) is not None and spec.tensors.get(n) is None)
                values = ", ".join(f"{n}={show_value(yaml_data(env[n]))}" for n in names)
                fail(f"breaks the refinement `{r.text}` ({r.path})"
                     + (f" with {values}" if values else ""))

        # requires, on the generated contents
        for t in gens:
            for j, req in enumerate(t.requires):
                if f"{t.path}.requires.{j}" in self.ill_defined:
                    continue  # reported once for the spec
                text = self.requires_text(t, j)
                e = folder.expr(req)
                try:
                    holds = evaluate_requires(e, generated[t.name], env)
                except Exception as exc:
                    fail(f"`requires` `{text}` of `{t.name}` does not evaluate on the generated "
                         f"contents: {exc}")
                    continue
                if holds is not True:
                    args = ", ".join(f"{print_expr(a)}={show_value(yaml_data(evaluate(a, env)))}"
                                     for a in e.args if _evaluable(a, env))
                    fail(f"the generated `{t.name}` = {show_value(yaml_data(generated[t.name]))} "
                         f"(from `{self.values_text(t)}`) breaks its `requires` `{text}`"
                         + (f" with {args}" if args else ""))

    @staticmethod
    def axis_failed(err: GeneratedAxisError, fail) -> None:
        """Report a generated axis its declared shape refuses."""
        t, k, ax, n = err.item
        if err.reason == "evaluate":
            fail(f"axis {k} of the generated `{t}`, `{print_expr(ax)}`, does not "
                 f"evaluate: {err.detail}")
        elif err.reason == "mismatch":
            fail(f"the generated `{t}` has length {n} at axis {k}, but its declared "
                 f"shape needs `{print_expr(ax)}` = {show_value(err.detail)} there")
        else:
            fail(f"the generated `{t}` has length {n} at axis {k}, which "
                 f"`{print_expr(ax)}` cannot equal for a non-negative integer "
                 f"`{err.detail}`")

    def let_is_read(self, n: str, branch, folder, shapes, dtypes, lets) -> bool:
        spec = self.spec
        exprs: list[Expr] = []
        for t in branch.present:
            if t in shapes:
                exprs.extend(a.value if isinstance(a, Splat) else a for a in shapes[t].axes)
                exprs.append(dtypes[t])
            d = spec.tensors[t]
            if d.values is not None:
                exprs.append(folder.expr(d.values))
            exprs.extend(folder.expr(r) for r in d.requires)
        for r in spec.rules:
            exprs.append(folder.expr(r.expr))
        seen: set[str] = set()
        stack = exprs
        while stack:
            for m in free_names(stack.pop()):
                if m in lets and m not in seen:
                    seen.add(m)
                    stack.append(lets[m])
        return n in seen

    # spec-wide --------------------------------------------------------------------------------

    def check_requires_defined(self) -> None:
        """Each `requires` is well defined on every branch where its tensor exists: the tensors
        it names exist there and are generated, and every tensor is read at the predicate's
        rank. Each problem is reported once, on the first branch that has it."""
        spec = self.spec
        once: set[tuple] = set()

        def report(key: tuple, path: str, message: str, b: P.Branch, hint: str | None = None):
            self.ill_defined.add(path)
            if key in once:
                return
            once.add(key)
            combo = {k: _plain_combo(v) for k, v in b.combo}
            self.report(path, message, cex=combo or None, hint=hint)

        for t in spec.tensors.values():
            for j, req in enumerate(t.requires):
                path = f"{t.path}.requires.{j}"
                text = self.requires_text(t, j)
                prim = PRIMITIVES.get(req.func) if isinstance(req, Call) else None
                if prim is None:
                    continue
                params = [p for p in prim.params if not p.keyword_only][1:]
                for b in self.plan.branches:
                    if b.excluded_by is not None or t.name not in b.present:
                        continue
                    shapes = {n: sh for n, sh, _ in b.tensors}
                    where = f"on the branch {b.describe_combo()}" if b.combo else ""
                    if prim.rank is not None and t.name in shapes:
                        rank = _rank(shapes[t.name])
                        if rank is not None and rank != prim.rank:
                            report((path, "rank", t.name), path,
                                   f"`requires` `{text}` reads `{t.name}` at rank {prim.rank}, "
                                   f"but `{t.name}` has rank {rank} {where}".rstrip(), b)
                    for a, p in zip(req.args, params):
                        if not (isinstance(a, Name) and a.id in spec.tensors):
                            continue
                        if a.id not in b.present:
                            report((path, "absent", a.id), path,
                                   f"`requires` `{text}` of `{t.name}` reads the tensor "
                                   f"`{a.id}`, which does not exist {where} where `{t.name}` "
                                   "does", b, hint=f"make `{t.name}` exist only where "
                                   f"`{a.id}` does, e.g. optional: \"present({a.id})\"")
                            continue
                        if spec.tensors[a.id].values is None:
                            report((path, "values", a.id), path,
                                   f"`requires` `{text}` of `{t.name}` reads the contents of "
                                   f"`{a.id}`, which has no `values` generator, so they are "
                                   "unknown at instantiation", b)
                            continue
                        if isinstance(p.kind, K.SeqK) and a.id in shapes:
                            rank = _rank(shapes[a.id])
                            if rank is not None and rank != 1:
                                report((path, "rank", a.id), path,
                                       f"`requires` `{text}` reads `{a.id}` as a sequence, but "
                                       f"`{a.id}` has rank {rank} {where}".rstrip(), b)

    def check_labels(self) -> None:
        spec = self.spec
        by_label: dict[str, list[int]] = defaultdict(list)
        ids: dict[str, int] = {}
        dtype_params = {n for n, p in spec.params.items()
                        if isinstance(K.unwrap_maybe(p.kind), K.DTypeK)}
        for i, row in enumerate(spec.workloads):
            label = row.label
            path = f"workloads.{i}.label"
            cex = self.row_cex(row)
            if not isinstance(label, str) or label == "":
                self.report(path, f"row {i} has an empty label; a label names the modelled "
                            "scenario", cex=cex)
                continue
            bad = sorted(set(c for c in label if not _LABEL_CHARS.fullmatch(c)))
            if bad:
                self.report(path, f"label `{label}` contains {', '.join(repr(c) for c in bad)}; "
                            "a label is made of letters, digits, `.`, `_` and `-` only", cex=cex,
                            hint="label: " + re.sub(r"[^A-Za-z0-9._-]+", "-", label))
            if len(label) > LABEL_MAX:
                self.report(path, f"label `{label}` has {len(label)} characters, more than "
                            f"{LABEL_MAX}", severity=Severity.WARNING, cex=cex)
            first = by_label[label]
            differs = False  # a repeated case id is then a consequence, not reported again
            if first:
                j = first[0]
                other = spec.workloads[j]
                diff = sorted(
                    k for k in set(row.values) | set(other.values)
                    if k not in dtype_params and to_tuple(row.values.get(k, _MISSING))
                    != to_tuple(other.values.get(k, _MISSING)))
                if sorted(row.some) != sorted(other.some):
                    diff.append("some")
                if diff:
                    differs = True
                    self.report(f"workloads.{i}", f"rows {j} and {i} share the label `{label}` "
                                f"but differ in {', '.join(diff)} ("
                                + "; ".join(f"{k}: {show_value(_val(other, k))} vs {show_value(_val(row, k))}"
                                            for k in diff)
                                + "); rows sharing a label differ only in dtypes", cex=cex)
            by_label[label].append(i)
            for dc in (row.dtype_cases or [{}]):
                if not isinstance(dc, dict):
                    continue
                cid = case_id(spec, label, row.values, dc)
                if cid in ids and not differs:
                    self.report(f"workloads.{i}", f"case id `{cid}` of row {i} repeats the one of "
                                f"row {ids[cid]}; case ids are unique per spec",
                                cex={**cex, **dc})
                elif cid not in ids:
                    ids[cid] = i

    def check_optional_coverage(self) -> None:
        spec = self.spec
        if spec.status != "implemented":
            return
        for n, t in self.optional_tensors.items():
            passed = [i for i, r in enumerate(spec.workloads) if n in r.some]
            if not passed:
                self.report(t.path + ".optional", f"no workload row passes the optional tensor "
                            f"`{n}`; an implemented op's rows pass each `optional: true` tensor "
                            "at least once", cex={"rows": len(spec.workloads)},
                            hint=f"add a row with `some: [{n}]`")
            elif len(passed) == len(spec.workloads):
                self.report(t.path + ".optional", f"every workload row passes the optional "
                            f"tensor `{n}`; an implemented op's rows omit each `optional: true` "
                            "tensor at least once", cex={"rows": len(spec.workloads)},
                            hint="add a row without it in `some`")


_MISSING = object()


def _val(row, k: str) -> Any:
    if k == "some":
        return list(row.some)
    return row.values.get(k, "(not given)")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    return a == b


def _plain_combo(v: Any) -> Any:
    return str(v) if isinstance(v, ADTValue) else v


def _rank(shape: ShapeList) -> int | None:
    if any(isinstance(a, Splat) for a in shape.axes):
        return None
    return len(shape.axes)


def _evaluable(e: Expr, env: Mapping[str, Any]) -> bool:
    try:
        evaluate(e, env)
        return True
    except Exception:
        return False
