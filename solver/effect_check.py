"""Effects: the `effect` check (seed § 6, check 9; reference §4, §6 and §10).

`check_effects(spec, loaded, plan)` is a whole-spec pass (`SPEC_CHECKS`). It reads the
proven Plan only (never torch, never `opspec.ops`): on each plan branch the inputs written
(`Branch.written`: `mutated` folded on that branch, for the inputs that exist there),
whether `out` is passed (`Branch.has_out`) and the tensors that exist (`Branch.present`).

Effect branches. An *effect branch* is one distinct `(written inputs, out passed, outputs
returned)` over the branches that no domain restriction excludes. `effect_branches(spec,
plan)` derives, for each, exactly what the runtime's compile boundary registers
(`opspec.ops.boundary.effect_branches`; a test compares the two): one `torch.library`
operator named `<family>_<snake class name>` (the family written once when the snake name
already starts with it) plus `_writes_<input>` per written input, `_out` when `out` is
passed and `_without_<output>` per absent output, in that order; its schema takes the
call-time inputs in signature order (`Tensor?` when optional; `Tensor(a!)` when written),
then `Tensor(x!) out` when passed, then `str key`, and returns the *new* outputs: those
returned that are neither an `alias` of a written input nor the `buffer: out` output with
`out` passed (those are the caller's tensors and never cross the operator). Its
`mutates_args` are the written inputs plus `out`.

What is checked, and where it is reported (every diagnostic has the check id `effect`):

1. The operator of each effect branch (only for a spec that gets a compile boundary: a
   call-time tensor input and no composition), at `signature.inputs.<n>` or the
   declaration that selects the branch:
   - its schema argument names are distinct and are no keyword of torch's schema language
     (`class`, `in`, `None`, ...: torch refuses to parse the schema, so the class cannot be
     defined); the runtime renames inputs called `key` and `self` to `key_` and `self_`,
     which can collide with an input of that name;
   - the arguments the schema marks written are exactly the inputs written on the branch,
     plus `out` when it is passed;
   - two effect branches never get the same operator name (`_writes_a_out` is both "writes
     `a`, `out` passed" and "writes `a_out`"): the second would silently reuse the first's
     schema.
2. A branch that writes no input and returns no tensor does nothing a caller can observe:
   a WARNING (at the `mutated` that makes the input unwritten, else `signature.outputs`).
3. `alias` (an output that IS a written input object):
   - the input must be written on at least one branch (elaboration already refuses an input
     that is never `mutated`; this catches a `mutated` expression that no live branch makes
     true);
   - on every branch where the input is written and the output exists, the output's shape
     and dtype equal the input's (syntactically after folding, else Z3 searches a call that
     passes every check with different ones: the counterexample); an output declared
     `contiguous: true` needs the input declared so too (the caller's tensor is returned
     as passed); the input may not be `device: cpu` (outputs are checked on the call
     device, which `device: cpu` tensors take no part in).
   On a branch where the input is NOT written (its `mutated` is false there, or it is not
   passed) the alias output is a new tensor: the runtime returns it from the operator
   (`EffectBranch.new`), checks that it shares no storage with any input, and counts its own
   write in the derived roofline. Nothing more is required of it.
4. `buffer: out`: on every branch where `out` is passed the output exists (the generated
   `out` check needs the output's type; a `nullable` that is false there leaves it none).
5. Roofline traffic (`derived_traffic`, the runtime's `SignatureCall.traffic`): an unwritten
   input or construction-time tensor is read once; an output written once; a mutated input
   read and written; a `write_only` input written only; an `alias` output on a branch where
   its input is written shares that input's storage (no traffic of its own); `out` shares
   the output's. When the roofline gives an inline `bytes` formula, each effect branch is
   sampled on a workload row whose discriminants select one of its plan branches (a branch
   with `out` passed uses a row of its twin without `out`: rows never pass `out`; a branch
   no row selects is not sampled), with the row's first dtype case; indices a generator
   determines are solved from the generator's result shape. If the formula's value is less
   than the bytes of the tensors the call writes, that is a WARNING at `roofline.bytes`
   (writes cannot be free); a formula that cannot be evaluated on the sample is a WARNING
   too (the comparison cannot be made; `eval_roofline` would raise on such a call).

Rules elaboration already reports with the id `effect` (at most one `buffer: out`,
`write_only` without `mutated: true`, `alias` of a non-input or of an input never
`mutated`, `alias` together with `buffer`) are not repeated: a spec with such an error is
broken, and whole-spec passes do not run on it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from opspec.schema import kinds as K
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.evaluate import BYTES_KEY, evaluate, evaluate_axes
from opspec.schema.expr import Compare, Const, Expr, Name, ShapeList
from opspec.schema.printer import print_expr, print_shape
from opspec.schema.primitives import WORKLOAD_SEED
from opspec.schema.values import ADTValue, to_tuple
from opspec.solver import plan as P
from opspec.solver.generators import branch_program, run_generators

CHECK = "effect"
NAMESPACE = "opspec"

#: Identifiers torch's schema lexer takes as keywords (probed on torch 2.x: the Python
#: keywords it refuses as argument names; `lambda`, `from`, `try`, ... are accepted).
SCHEMA_KEYWORDS = frozenset({
    "False", "None", "True", "and", "as", "assert", "break", "class", "continue", "def",
    "del", "elif", "else", "for", "global", "if", "import", "in", "is", "not", "or", "pass",
    "raise", "return", "while", "with",
})


# -- effect branches, derived from the Plan -------------------------------------------------

@dataclass(frozen=True)
class EffectBranch:
    """The operator the compile boundary registers for one effect branch."""

    written: tuple[str, ...]
    has_out: bool
    returned: tuple[str, ...]        # outputs the branch returns (not None)
    new: tuple[str, ...]             # returned outputs that are new tensors (no alias, no out)
    name: str                        # operator name, without the namespace
    schema: str
    args: tuple[str, ...] = ()       # schema argument names, in order
    mutates: tuple[str, ...] = ()    # schema argument names of `mutates_args`
    #: the plan branches on this effect branch
    branches: tuple[P.Branch, ...] = field(default=(), compare=False, repr=False)

    @property
    def key(self) -> tuple:
        return (self.written, self.has_out, self.returned)

    def describe(self) -> str:
        parts = [("writes " + ", ".join(self.written)) if self.written else "writes no input",
                 "out passed" if self.has_out else "out not passed",
                 ("returns " + ", ".join(self.returned)) if self.returned else "returns nothing"]
        return "; ".join(parts)


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def base_name(cls_name: str, family: str) -> str:
    s = snake(cls_name)
    return s if s.startswith(family + "_") or s == family else f"{family}_{s}"


def schema_arg(name: str) -> str:
    """The schema argument name of an input (schema keywords of the runtime renamed)."""
    return name if name not in ("out", "key", "self") else f"{name}_"


def gets_boundary(spec: ElaboratedSpec) -> bool:
    """Whether an op class of this spec gets a compile boundary (seed § 5)."""
    return bool(spec.inputs) and spec.composition is None


def live_branches(plan: P.Plan) -> list[P.Branch]:
    return [b for b in plan.branches if b.excluded_by is None]


def returned_outputs(spec: ElaboratedSpec, b: P.Branch) -> tuple[str, ...]:
    return tuple(n for n in spec.outputs if n in b.present)


def new_outputs(spec: ElaboratedSpec, b: P.Branch) -> tuple[str, ...]:
    """Returned outputs the call creates: not the object of a written input (`alias`), not
    the caller's `out`."""
    out = []
    for n in returned_outputs(spec, b):
        o = spec.outputs[n]
        if o.alias is not None and o.alias in b.written:
            continue
        if o.buffer == "out" and b.has_out:
            continue
        out.append(n)
    return tuple(out)


def effect_branches(spec: ElaboratedSpec, plan: P.Plan) -> dict[tuple, EffectBranch]:
    """Every effect branch of the plan, keyed `(written, has_out, returned)`, in the order
    of the first plan branch of each (the runtime registers them in this order)."""
    base = base_name(spec.name, spec.family)
    groups: dict[tuple, list[P.Branch]] = {}
    for b in live_branches(plan):
        key = (tuple(b.written), b.has_out, returned_outputs(spec, b))
        groups.setdefault(key, []).append(b)
    out: dict[tuple, EffectBranch] = {}
    for key, bs in groups.items():
        written, has_out, returned = key
        b = bs[0]
        new = new_outputs(spec, b)
        suffix = "".join(f"_writes_{w}" for w in written)
        suffix += "_out" if has_out else ""
        suffix += "".join(f"_without_{n}" for n in spec.outputs if n not in returned)
        schema, args, mutates = _schema(spec, written, has_out, new)
        out[key] = EffectBranch(written, has_out, returned, new, base + suffix, schema, args,
                                mutates, tuple(bs))
    return out


def _schema(spec: ElaboratedSpec, written, has_out: bool, new) -> tuple[str, tuple, tuple]:
    parts, args, mutates = [], [], []
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    for n, t in spec.inputs.items():
        opt = "?" if t.optional is not False else ""
        mut = ""
        if n in written:
            mut = f"({next(letters)}!)"
            mutates.append(schema_arg(n))
        parts.append(f"Tensor{mut}{opt} {schema_arg(n)}")
        args.append(schema_arg(n))
    if has_out:
        parts.append(f"Tensor({next(letters)}!) out")
        args.append("out")
        mutates.append("out")
    parts.append("str key")
    args.append("key")
    ret = "()" if not new else ("Tensor" if len(new) == 1 else
                                "(" + ", ".join("Tensor" for _ in new) + ")")
    return "(" + ", ".join(parts) + ") -> " + ret, tuple(args), tuple(mutates)


def schema_mutated(schema: str) -> tuple[str, ...]:
    """The argument names a schema text marks written (`Tensor(a!) x`)."""
    inner = schema[schema.index("(") + 1:schema.rindex(") ->")]
    return tuple(a.split()[-1] for a in inner.split(", ") if "!)" in a)


def derived_traffic(spec: ElaboratedSpec, b: P.Branch) -> dict[str, tuple[int, int]]:
    """(reads, writes) of each tensor of a call on plan branch `b`, in full tensors: the
    derived roofline's counts, as the runtime records them (`SignatureCall.traffic`)."""
    traffic: dict[str, tuple[int, int]] = {}
    for n, t in spec.inputs.items():
        if n not in b.present:
            continue
        traffic[n] = ((0 if t.write_only else 1), 1) if n in b.written else (1, 0)
    for n in spec.ctensors:
        if n in b.present:
            traffic[n] = (1, 0)
    for n, o in spec.outputs.items():
        if n not in b.present:
            continue
        if o.alias is not None and o.alias in b.written:
            continue  # the aliased input's storage: its write is counted there
        traffic[n] = (0, 1)  # `buffer: out`: the output's storage is the caller's `out`
    return traffic


# -- the check -----------------------------------------------------------------------------

class _Checker:
    def __init__(self, spec: ElaboratedSpec, loaded: Any, plan: P.Plan):
        self.spec = spec
        self.loaded = loaded
        self.plan = plan
        self.diags: list[Diagnostic] = []
        self._seen: set[tuple] = set()

    def report(self, path: str, message: str, *, key: Any = None,
               severity: Severity = Severity.ERROR, counterexample: dict | None = None,
               hint: str | None = None) -> None:
        k = (path, key if key is not None else message)
        if k in self._seen:
            return
        self._seen.add(k)
        pos = self.loaded.pos(path) if self.loaded is not None else None
        self.diags.append(Diagnostic(CHECK, message, op=self.spec.name, path=path, pos=pos,
                                     severity=severity, counterexample=counterexample,
                                     hint=hint))

    def combo(self, b: P.Branch) -> dict[str, Any]:
        from opspec.solver.discriminants import describe_value
        return {k: describe_value(v) for k, v in b.combo}

    def run(self) -> list[Diagnostic]:
        spec = self.spec
        ebs = effect_branches(spec, self.plan)
        if gets_boundary(spec):
            self.check_operators(ebs)
        self.check_no_effect(ebs)
        self.check_aliases()
        self.check_out_buffer()
        if spec.roofline is not None and spec.roofline.bytes is not None:
            self.check_bytes(ebs)
        return self.diags

    # 1. operators
    def check_operators(self, ebs: Mapping[tuple, EffectBranch]) -> None:
        spec = self.spec
        by_arg: dict[str, list[str]] = {}
        for n in spec.inputs:
            by_arg.setdefault(schema_arg(n), []).append(n)
        for arg, names in by_arg.items():
            if len(names) > 1:
                self.report(f"signature.inputs.{names[-1]}",
                            f"inputs {' and '.join(f'`{n}`' for n in names)} both become the "
                            f"compile-boundary schema argument `{arg}` (the runtime renames "
                            "`key` and `self`); the operator schema cannot name them apart",
                            key=("arg", arg), hint="rename one of the inputs")
        for n in spec.inputs:
            if schema_arg(n) in SCHEMA_KEYWORDS:
                self.report(f"signature.inputs.{n}",
                            f"input `{n}` is a keyword of torch's operator-schema language: "
                            f"the compile-boundary operator `{NAMESPACE}::"
                            f"{base_name(spec.name, spec.family)}` cannot be registered, so "
                            "the op class cannot be defined", key=("keyword", n),
                            hint="rename the input")
        names: dict[str, EffectBranch] = {}
        for eb in ebs.values():
            expected = tuple(schema_arg(w) for w in eb.written) + (("out",) if eb.has_out else ())
            marked = schema_mutated(eb.schema)
            if set(marked) != set(expected) or set(eb.mutates) != set(expected):
                self.report(self.branch_path(eb),
                            f"operator `{NAMESPACE}::{eb.name}` ({eb.describe()}) marks "
                            f"{list(marked)} written in its schema `{eb.schema}`, but the "
                            f"branch writes {list(expected)}",
                            key=("mutates", eb.name),
                            counterexample=self.combo(eb.branches[0]))
            other = names.get(eb.name)
            if other is not None:
                self.report(self.branch_path(eb),
                            f"two effect branches get the operator name `{NAMESPACE}::"
                            f"{eb.name}`: ({other.describe()}) and ({eb.describe()}); the "
                            "runtime would register the first and reuse its schema for the "
                            "second", key=("name", eb.name),
                            counterexample=self.combo(eb.branches[0]),
                            hint="rename the inputs or outputs whose names end like the "
                                 "suffixes `_writes_<input>`, `_out`, `_without_<output>`")
            else:
                names[eb.name] = eb

    def branch_path(self, eb: EffectBranch) -> str:
        spec = self.spec
        for w in eb.written:
            return f"signature.inputs.{w}.mutated"
        if eb.has_out:
            o = next(n for n, t in spec.outputs.items() if t.buffer == "out")
            return f"signature.outputs.{o}.buffer"
        for n in spec.outputs:
            if n not in eb.returned:
                return f"signature.outputs.{n}.nullable"
        return "signature"

    # 2. a branch with no observable effect
    def check_no_effect(self, ebs: Mapping[tuple, EffectBranch]) -> None:
        spec = self.spec
        for eb in ebs.values():
            if eb.written or eb.returned:
                continue
            mutable = [n for n, t in spec.inputs.items() if t.mutated is not False]
            path = f"signature.inputs.{mutable[0]}.mutated" if mutable else "signature.outputs"
            self.report(path, "on this branch the op writes no input and returns no tensor: "
                        "a call does nothing a caller can observe (and a compiler may drop "
                        "the operator)", key="no-effect", severity=Severity.WARNING,
                        counterexample=self.combo(eb.branches[0]))

    # 3. alias
    def check_aliases(self) -> None:
        spec = self.spec
        live = live_branches(self.plan)
        for n, o in spec.outputs.items():
            if o.alias is None or o.alias not in spec.inputs:
                continue
            src = spec.inputs[o.alias]
            path = f"signature.outputs.{n}.alias"
            writing = [b for b in live if o.alias in b.written]
            if not writing and src.mutated is not False and live:
                self.report(path, f"output `{n}` aliases input `{o.alias}`, but no branch "
                            f"writes `{o.alias}` (its `mutated: "
                            f"{_show_flag(src.mutated)}` is false on every branch that no "
                            "domain restriction excludes), so the output is never that input",
                            key="never-written")
                continue
            for b in writing:
                if n not in b.present:
                    continue
                self.alias_type(n, o.alias, b, path)
            if writing and any(n in b.present for b in writing):
                if spec.outputs[n].contiguous and not src.contiguous:
                    self.report(f"signature.outputs.{n}.contiguous",
                                f"output `{n}` declares `contiguous: true` but is input "
                                f"`{o.alias}` itself where it is written, and `{o.alias}` does "
                                "not declare `contiguous: true`: a caller's strided input "
                                "fails the output check", key="contiguous",
                                counterexample=self.combo(writing[0]),
                                hint=f"declare `contiguous: true` on input `{o.alias}` too")
                if src.device == "cpu":
                    self.report(path, f"output `{n}` is input `{o.alias}` itself where it is "
                                f"written, but `{o.alias}` is `device: cpu` while outputs are "
                                "checked on the call device, which `device: cpu` tensors take "
                                "no part in", key="device",
                                counterexample=self.combo(writing[0]))

    def alias_type(self, out: str, inp: str, b: P.Branch, path: str) -> None:
        shapes = {n: (sh, dt) for n, sh, dt in b.tensors}
        if out not in shapes or inp not in shapes:
            return
        (so, do), (si, di) = shapes[out], shapes[inp]
        if print_shape(so) == print_shape(si) and print_expr(do) == print_expr(di):
            return
        ans = _differ(self.spec, b, so, do, si, di)
        if ans is None:
            return
        from opspec.solver.z3env import Verdict
        combo = self.combo(b)
        if ans.verdict is Verdict.SAT:
            cex = {**combo, **(ans.counterexample or {})}
            self.report(path, f"output `{out}` is input `{inp}` itself on branches that write "
                        f"`{inp}`, but its type Tensor[{print_expr(do)}, {print_shape(so)}] "
                        f"can differ from the input's Tensor[{print_expr(di)}, "
                        f"{print_shape(si)}] for a call that passes every check",
                        key="type", counterexample=cex,
                        hint=f"declare output `{out}` with the shape and dtype of `{inp}`")
        elif ans.verdict is Verdict.UNKNOWN:
            self.diags.append(Diagnostic(
                "unknown", f"could not decide whether output `{out}` (the object of written "
                f"input `{inp}`) always has the input's shape and dtype ({ans.reason})",
                op=self.spec.name, path=path, pos=self.loaded.pos(path) if self.loaded else None,
                severity=Severity.ADVISORY, counterexample=combo))

    # 4. buffer: out
    def check_out_buffer(self) -> None:
        spec = self.spec
        outs = [n for n, t in spec.outputs.items() if t.buffer == "out"]
        if not outs:
            return
        n = outs[0]
        for b in live_branches(self.plan):
            if b.has_out and n not in b.present:
                self.report(f"signature.outputs.{n}.nullable",
                            f"`out` may be passed where output `{n}` (its `buffer: out`) does "
                            f"not exist: its `nullable` is false on this branch, so the "
                            "buffer has no type to be checked against and nothing to hold",
                            key="out-absent", counterexample=self.combo(b),
                            hint=f"make `{n}` exist whenever `present(out)`")

    # 5. roofline bytes
    def check_bytes(self, ebs: Mapping[tuple, EffectBranch]) -> None:
        spec = self.spec
        formula = spec.roofline.bytes
        for eb in ebs.values():
            sample = None
            for b in eb.branches:
                sample = _sample(spec, self.plan, b)
                if sample is not None:
                    break
            if sample is None:
                continue
            b, label, env, nbytes = sample
            traffic = derived_traffic(spec, b)
            writes = {n: nbytes[n] for n, (_, w) in traffic.items() if w and n in nbytes}
            if len(writes) < sum(1 for _, w in traffic.values() if w):
                continue  # a written tensor's size did not evaluate: no comparison
            fenv = dict(env)
            for t in spec.tensors:
                fenv[t] = True if t in b.present else None
            fenv["out"] = True if b.has_out else None
            fenv[BYTES_KEY] = lambda name: nbytes[name]
            shown = {**self.combo(b), "row": label,
                     **{k: _plain(v) for k, v in env.items()
                        if k in spec.forall or k in spec.lets}}
            try:
                value = evaluate(formula, fenv)
            except Exception as exc:
                self.report("roofline.bytes", f"the `bytes` formula cannot be evaluated on "
                            f"workload row `{label}` ({eb.describe()}): {exc}; its value "
                            "cannot be compared with the bytes the call writes",
                            key=("raises", eb.key), severity=Severity.WARNING,
                            counterexample=shown)
                continue
            total = sum(writes.values())
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < total:
                cex = {**shown, "bytes": value, "bytes written": total,
                       **{f"bytes({n}) written": v for n, v in writes.items()}}
                each = ", ".join(f"{n}: {v}" for n, v in writes.items())
                self.report("roofline.bytes", f"the `bytes` formula gives {value} on workload "
                            f"row `{label}` ({eb.describe()}), less than the {total} bytes "
                            f"the call writes ({each}): writes cannot be free",
                            key=("less", eb.key),
                            severity=Severity.WARNING, counterexample=cex,
                            hint="count every tensor the call writes, once each")


def _show_flag(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else f'"{print_expr(v)}"'


def _plain(v: Any) -> Any:
    if isinstance(v, ADTValue):
        return str(v)
    if isinstance(v, tuple):
        return list(v)
    return v


# -- the alias type query -----------------------------------------------------------------

def _dtype_term(e: Expr) -> Expr:
    """A dtype expression for the encoder: dtype names as string literals."""
    if isinstance(e, Name) and e.id in K.DTYPES:
        return Const(e.id)
    return e


def _differ(spec: ElaboratedSpec, b: P.Branch, so: ShapeList, do: Expr, si: ShapeList,
            di: Expr):
    """Z3's answer to: does a call that passes every check give the two types different
    shapes or dtypes? None when the question cannot be encoded."""
    import z3

    from opspec.solver.fold import Folder, adt_invariants
    from opspec.solver.order import plan_branch
    from opspec.solver.queries import BranchQueries
    from opspec.solver.z3env import DEFAULT_RLIMIT

    combo = dict(b.combo)
    try:
        res = plan_branch(spec, combo)
        q = BranchQueries(spec, res, adt_invariants(spec, combo, Folder(spec, combo)))

        def extra(enc):
            parts = [q.actual_shape(enc, so) != q.actual_shape(enc, si)]
            if print_expr(do) != print_expr(di):
                parts.append(enc.expr(Compare(_dtype_term(do), ("!=",), (_dtype_term(di),))))
            return z3.Or(*parts)

        return q.satisfiable(DEFAULT_RLIMIT, extra=extra)
    except Exception:
        return None


# -- a sample call from a workload row ----------------------------------------------------

def _row_value(spec: ElaboratedSpec, row, name: str) -> Any:
    p = spec.params[name]
    v = row.values.get(name, p.default if p.has_default else None)
    inner = K.unwrap_maybe(p.kind)
    if isinstance(inner, K.ADTK) and isinstance(v, dict) and len(v) == 1:
        (ctor, fields), = v.items()
        return ADTValue.of(inner.name, ctor, fields if isinstance(fields, dict) else {})
    return to_tuple(v)


def _matches(spec: ElaboratedSpec, row, b: P.Branch) -> bool:
    """Whether the row's discriminant values are those of branch `b` (`out` aside)."""
    for key, want in b.combo:
        if key == "present(out)":
            continue
        if key.startswith("present("):
            n = key[len("present("):-1]
            if n in spec.params:
                got = _row_value(spec, row, n) is not None
            else:
                got = n in row.some
        elif key in spec.params:
            got = _row_value(spec, row, key)
            if isinstance(want, ADTValue):
                if not (isinstance(got, ADTValue) and got.ctor == want.ctor and all(
                        got.has(f) and got.field(f) == fv for f, fv in want.fields)):
                    return False
                continue
        else:
            return False
        if isinstance(want, bool) or isinstance(got, bool):
            if not (type(got) is type(want) and got == want):
                return False
        elif got != want:
            return False
    return True


def _sample(spec: ElaboratedSpec, plan: P.Plan, b: P.Branch):
    """(branch, row label, environment, bytes of each tensor) of the first workload row on
    branch `b`, or None when no row selects it or its tensors' sizes do not evaluate."""
    shapes = {n: sh for n, sh, _ in b.tensors}
    dtypes = {n: dt for n, _, dt in b.tensors}
    calls, lets = branch_program(spec, b)
    for row in spec.workloads:
        if not _matches(spec, row, b):
            continue
        env: dict[str, Any] = {}
        for n in spec.params:
            env[n] = _row_value(spec, row, n)
        for n, v in row.values.items():
            if n in spec.forall:
                env[n] = to_tuple(v)
        for case in (row.dtype_cases or [{}])[:1]:
            env.update(case)
        rng = random.Random(f"{WORKLOAD_SEED}:{spec.name}:{row.label}")
        try:
            # The generators run as the `workload` check runs them (the same driver), so a
            # row whose indices a later generator solves is sized too.
            run_generators(spec, calls, shapes, env, rng, lets)
            consts = {d: d for d in K.DTYPES}
            nbytes = {}
            for n in b.present:
                if n not in shapes:
                    continue
                axes = evaluate_axes(shapes[n], env)
                if any(a < 0 for a in axes):
                    raise ValueError(f"negative axis in {list(axes)}")
                dt = evaluate(dtypes[n], {**consts, **env})
                count = 1
                for a in axes:
                    count *= a
                nbytes[n] = count * K.DTYPES[dt][0] // 8
        except Exception:
            continue
        return b, row.label, env, nbytes
    return None


def check_effects(spec: ElaboratedSpec, loaded: Any, plan: P.Plan) -> list[Diagnostic]:
    """The `effect` check of one spec over its proven plan."""
    return _Checker(spec, loaded, plan).run()
