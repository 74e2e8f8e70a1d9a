"""Elaboration: from a loaded spec to parsed, name-resolved and kind-checked declarations.

`elaborate(loaded, adts)` parses every expression of a spec once, resolves its names,
infers and checks kinds, and returns an `ElaboratedSpec` (plain frozen data that the prover
and the runtime read) together with the diagnostics found. A field that fails is reported
and left out; the rest of the spec is still elaborated, so one bad field costs only the
checks that depend on it.
"""

from __future__ import annotations

import graphlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from opspec.schema import kinds as K
from opspec.schema.checker import (
    FAMILY, INDEX, LET, PARAM, TENSOR, ADTInfo, CtorInfo, KindChecker, Scope, Symbol,
)
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.errors import ExpressionError
from opspec.schema.expr import (
    Attr, Call, Const, Expr, FamilyApp, Name, ShapeList, ShapeTerm, Splat, free_names,
    shape_exprs, walk,
)
from opspec.schema.loader import LoadedSpec, path_under
from opspec.schema.models import ADTDef, ADTField, OpSpec, TensorSpec, WorkloadRow
from opspec.schema.parse import defining_equality, parse_expr, parse_shape
from opspec.schema.types import parse_kind, parse_type
from opspec.schema.value_check import value_error

RESERVED = frozenset({"out"})


# -- elaborated declarations ----------------------------------------------------------------

@dataclass(frozen=True)
class ParamDecl:
    name: str
    kind: K.Kind
    type_text: str
    has_default: bool
    default: Any
    kw_only: bool
    path: str


@dataclass(frozen=True)
class TensorDecl:
    """A tensor of the signature: an input, an output or a construction-time tensor."""

    name: str
    role: str  # "input" | "output" | "ctensor"
    dtype: Expr
    shape: ShapeTerm
    optional: Expr | bool = False   # inputs and construction-time tensors
    nullable: Expr | bool = False   # outputs: None where this is false... see `exists`
    mutated: Expr | bool = False
    write_only: bool = False
    buffer: str | None = None
    alias: str | None = None
    contiguous: bool = False
    device: str | None = None
    values: Expr | None = None
    requires: tuple[Expr, ...] = ()
    path: str = ""


@dataclass(frozen=True)
class Pattern:
    """One component of a family case's `when`: a bool, an enum literal, or an ADT
    constructor with constraints on finitely-valued fields (`{masked: _}`)."""

    value: Any = None             # bool or str for Bool/enum matches
    ctor: str | None = None       # ADT constructor; None for Bool/enum patterns
    fields: tuple[tuple[str, Any], ...] = ()

    def describe(self) -> str:
        if self.ctor is None:
            return str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        if not self.fields:
            return f"{{{self.ctor}: _}}"
        return f"{{{self.ctor}: {{" + ", ".join(f"{k}: {v}" for k, v in self.fields) + "}}"


@dataclass(frozen=True)
class FamilyCaseDecl:
    when: tuple[Pattern, ...]
    shape: ShapeTerm
    path: str


@dataclass(frozen=True)
class FamilyDecl:
    name: str
    params: tuple[tuple[str, K.Kind], ...]
    match: tuple[str, ...]          # family parameter names matched on
    cases: tuple[FamilyCaseDecl, ...]
    path: str


@dataclass(frozen=True)
class RuleDecl:
    expr: Expr
    text: str
    path: str
    #: reads only discriminants: checked before a branch is selected
    is_domain: bool = False


@dataclass(frozen=True)
class LetDecl:
    name: str
    expr: Expr
    text: str
    kind: K.Kind
    path: str


@dataclass(frozen=True)
class RooflineDecl:
    flops: Expr | None = None
    bytes: Expr | None = None
    func: str | None = None
    path: str = "roofline"


@dataclass(frozen=True)
class ElaboratedSpec:
    name: str
    file: str
    family: str
    status: str
    ref_api: str | None
    forall: Mapping[str, K.Kind]
    params: Mapping[str, ParamDecl]
    ctensors: Mapping[str, TensorDecl]
    inputs: Mapping[str, TensorDecl]
    outputs: Mapping[str, TensorDecl]
    families: Mapping[str, FamilyDecl]
    lets: Mapping[str, LetDecl]          # in a dependency order
    rules: tuple[RuleDecl, ...]
    dtype_combos: tuple[Mapping[str, str], ...]
    workloads: tuple[WorkloadRow, ...]
    roofline: RooflineDecl | None
    composition: Any
    adts: Mapping[str, ADTInfo]
    symbols: Mapping[str, Symbol]
    #: declaration paths that failed to load or elaborate; checks reading them are skipped
    broken: frozenset[str] = frozenset()

    @property
    def signature_broken(self) -> bool:
        """Whether a declaration the signature's checks read failed: anything broken but a
        workload row, the roofline or the composition. Those are read only by the
        whole-spec passes (and the roofline by the search for unknowns, which reads what
        elaborated), so a typo in one row no longer hides the signature's gaps, overlaps
        and unsolvable indices."""
        return any(not _outside_signature(b) for b in self.broken)

    def broken_under(self, head: str) -> bool:
        """Whether a declaration at or inside `head` (`composition`, a family's `cases`)
        failed to load or elaborate."""
        return any(path_under(b, head) for b in self.broken)

    @property
    def tensors(self) -> dict[str, TensorDecl]:
        return {**self.ctensors, **self.inputs, **self.outputs}

    @property
    def has_out(self) -> bool:
        return any(t.buffer == "out" for t in self.outputs.values())

    def kind_of(self, name: str) -> K.Kind | None:
        s = self.symbols.get(name)
        return s.kind if s else None


# -- ADTs -----------------------------------------------------------------------------------

def elaborate_adts(defs: Mapping[str, ADTDef], where: Callable[[str, str], Any] | None = None
                   ) -> tuple[dict[str, ADTInfo], list[Diagnostic]]:
    """The ADTs' constructors with their fields' kinds and invariants, and the problems
    found. `where(name, path)` (`Manifest.adt_pos`) places a problem in its types file."""
    diags: list[Diagnostic] = []

    def report(check: str, message: str, path: str, hint: str | None = None) -> None:
        name, _, inner = path.removeprefix("adts.").partition(".")
        diags.append(Diagnostic(check, message, path=path, hint=hint,
                                pos=where(name, inner) if where is not None else None))

    names = set(defs)
    out: dict[str, ADTInfo] = {}
    for name, d in defs.items():
        ctors = {}
        for cname, c in d.sum.items():
            fields: dict[str, K.Kind] = {}
            for fname, f in c.fields.items():
                try:
                    fields[fname] = (parse_type(f.type, names) if isinstance(f, ADTField)
                                     else parse_kind(f, names))
                except ExpressionError as exc:
                    report("kind", f"ADT {name}.{cname}.{fname}: {exc.message}",
                           f"adts.{name}.sum.{cname}.fields.{fname}", exc.hint)
                    fields[fname] = K.VALUE
            inv = None
            if c.invariant is not None:
                ipath = f"adts.{name}.sum.{cname}.invariant"
                try:
                    inv = parse_expr(c.invariant)
                    scope = Scope({f: Symbol(f, PARAM, k) for f, k in fields.items()})
                    if isinstance(KindChecker().expect(inv, scope, K.BOOL), K.ValueK):
                        # An opaque invariant (`group % .0`) reached Z3 as a non-Boolean.
                        raise ExpressionError("it has an opaque kind, expected Bool",
                                              check="kind")
                except ExpressionError as exc:
                    report(exc.check, f"ADT {name}.{cname} invariant `{c.invariant}`: "
                           f"{exc.message}", ipath, exc.hint)
                    inv = None
            n = 1
            for k in fields.values():
                n *= _finite_size(k)
            if n > MAX_ADT_VALUES:
                # Every combination of finite fields is a discriminant value, built eagerly:
                # 26 Bool fields were 67M values (minutes and gigabytes before any check).
                # The fields stay, as opaque values the prover does not enumerate.
                report("kind", f"ADT {name}.{cname}: its finitely-valued fields have {n} "
                       f"combinations, more than {MAX_ADT_VALUES}; they are treated as opaque "
                       "values", f"adts.{name}.sum.{cname}.fields",
                       "split the constructor, or make some fields Int")
                fields = {f: (K.VALUE if K.is_finite(k) else k) for f, k in fields.items()}
            ctors[cname] = CtorInfo(cname, fields, c.python, inv, c.invariant)
        out[name] = ADTInfo(name, ctors)
    return out, diags


#: The most values one ADT constructor may make from its finitely-valued fields (each value
#: is a discriminant value the prover enumerates; the prover's own hard cap is 4096 combos).
MAX_ADT_VALUES = 4096


def _finite_size(k: K.Kind) -> int:
    """How many values a field of kind `k` gives an ADT constructor (1: not enumerated)."""
    inner = K.unwrap_maybe(k)
    if isinstance(inner, K.BoolK):
        n = 2
    elif isinstance(inner, K.StrK) and inner.literals is not None:
        n = len(inner.literals)
    elif isinstance(inner, K.DTypeK):
        n = len(inner.members or K.DTYPES)
    else:
        return 1
    return n + 1 if isinstance(k, K.MaybeK) else n


# -- the elaborator -------------------------------------------------------------------------

class _Elaborator:
    def __init__(self, loaded: LoadedSpec, adts: Mapping[str, ADTInfo]):
        self.loaded = loaded
        self.spec: OpSpec = loaded.spec
        self.adts = adts
        self.diags: list[Diagnostic] = []
        self.broken: set[str] = set(loaded.broken)
        self._where: dict[str, str] = {}
        self.checker = KindChecker()
        #: family cases whose shape applies a family: checked once all families are known
        self._nested_apps: list[tuple[FamilyApp, str, str, Scope]] = []
        self._broken_lets: frozenset[str] = frozenset()

    # diagnostics
    def report(self, check: str, path: str, message: str, *, hint: str | None = None,
               severity: Severity = Severity.ERROR) -> None:
        self.broken.add(path)
        self.diags.append(Diagnostic(check, message, op=self.loaded.name, path=path,
                                     pos=self.loaded.pos(path), severity=severity, hint=hint))

    def report_exc(self, path: str, text: str, exc: ExpressionError) -> None:
        self.report(exc.check, path, f"`{text}`: {exc.message}", hint=exc.hint)

    def parse(self, text: Any, path: str) -> Expr | None:
        if not isinstance(text, str):
            if isinstance(text, bool):
                return Const(text)
            self.report("parse", path, f"expected an expression string, got {text!r}")
            return None
        try:
            return parse_expr(text)
        except ExpressionError as exc:
            self.report_exc(path, text, exc)
            return None

    def parse_shape(self, text: str, path: str) -> ShapeTerm | None:
        try:
            return parse_shape(text)
        except ExpressionError as exc:
            self.report_exc(path, text, exc)
            return None

    def check(self, e: Expr, text: str, path: str, scope: Scope, expected: K.Kind | None,
              what: str = "", part: str | None = None) -> K.Kind | None:
        """The kind of `e` (the whole of `text`, or the `part` of it named so in messages,
        e.g. "axis `flag`"), or None after reporting why it fails or is not `expected`."""
        try:
            k = self.checker.infer(e, scope)
        except ExpressionError as exc:
            self.report_exc(path, text, exc)
            return None
        if expected is not None and not K.assignable(k, expected):
            subject = f"`{text}`: {part}" if part else f"`{text}`"
            self.report("kind", path, f"{subject} has kind {k}, expected {expected}{what}")
            return None
        return k

    # main
    def run(self) -> ElaboratedSpec:
        sig = self.spec.signature
        symbols: dict[str, Symbol] = {}
        where: dict[str, str] = {}
        self._where = where  # declaration path of each name (`not_opaque` reads it)

        def declare(name: str, role: str, kind: K.Kind, path: str) -> bool:
            """Add `name` to the scope; False (after reporting) when it cannot be: the
            declaration is then left out, and the first one of the name stands."""
            if name in RESERVED:
                self.report("name", path, f"`{name}` is reserved for the output buffer; "
                            "choose another name")
                return False
            if name in symbols:
                self.report("name", path, f"`{name}` is declared twice: at {where[name]} and "
                            f"here; indices, parameters, lets and tensors need distinct names")
                return False
            if name in K.DTYPES or name == "inf":
                self.report("name", path, f"`{name}` shadows a built-in name")
            symbols[name] = Symbol(name, role, kind)
            where[name] = path
            return True

        adt_names = set(self.adts)
        forall: dict[str, K.Kind] = {}
        for name, text in sig.forall.items():
            path = f"signature.forall.{name}"
            try:
                kind = parse_kind(text, adt_names)
            except ExpressionError as exc:
                self.report_exc(path, text, exc)
                declare(name, INDEX, K.VALUE, path)  # opaque: its uses report nothing more
                continue
            if declare(name, INDEX, kind, path):
                forall[name] = kind

        params: dict[str, ParamDecl] = {}
        ctensor_specs: dict[str, TensorSpec] = {}
        for name, p in sig.params.items():
            path = f"signature.params.{name}"
            if p.is_tensor:
                if declare(name, TENSOR, K.TENSOR, path):
                    ctensor_specs[name] = TensorSpec(dtype=p.dtype, shape=p.shape,
                                                     optional=p.optional, device=p.device,
                                                     contiguous=p.contiguous)
                continue
            try:
                kind = parse_type(p.type, adt_names)
            except ExpressionError as exc:
                self.report_exc(path + ".type", p.type, exc)
                declare(name, PARAM, K.VALUE, path)  # opaque: its uses report nothing more
                continue
            if declare(name, PARAM, kind, path):
                params[name] = ParamDecl(name, kind, p.type, p.has_default, p.default,
                                         p.kw_only, path)
                if p.has_default:
                    self.check_default(params[name])

        declared_tensors: dict[str, set[str]] = {"input": set(), "output": set()}
        for role, table in (("input", sig.inputs), ("output", sig.outputs)):
            for name in table:
                if declare(name, TENSOR, K.TENSOR, f"signature.{role}s.{name}"):
                    declared_tensors[role].add(name)
        declared_families = {name for name in sig.types
                             if declare(name, FAMILY, K.VALUE, f"signature.types.{name}")}

        has_out = any(t.buffer == "out" for t in sig.outputs.values())
        base = Scope(symbols, self.adts, has_out=has_out)

        # lets: parse, order by dependencies, infer kinds in that order
        let_exprs: dict[str, Expr] = {}
        let_names: set[str] = set()
        for name, text in sig.let.items():
            path = f"signature.let.{name}"
            if not declare(name, LET, K.VALUE, path):
                continue
            let_names.add(name)
            e = self.parse(text, path)
            if e is not None:
                let_exprs[name] = e
        lets = self.elaborate_lets(let_exprs, let_names, symbols, base)
        base = Scope(symbols, self.adts, has_out=has_out)
        #: lets that failed: a declaration reading one is left out without another report
        self._broken_lets = frozenset(n for n in let_names if n not in lets)

        families = {n: f for n, fam in sig.types.items() if n in declared_families
                    and (f := self.elaborate_family(n, fam, base)) is not None}
        # A case whose shape applies another family is checked once every family is known.
        for shape, text, path, scope in self._nested_apps:
            self.check_shape(shape, text, path, scope, families)

        def tensor(name: str, t: TensorSpec, role: str, path: str) -> TensorDecl | None:
            # A tensor whose dtype or shape fails is left out (its path is in `broken`).
            dtype = self.parse(t.dtype, f"{path}.dtype")
            shape = self.parse_shape(t.shape, f"{path}.shape")
            if dtype is not None and (self.reads_broken(dtype, f"{path}.dtype") or not
                                      self.check_dtype(dtype, t.dtype, f"{path}.dtype", base)):
                dtype = None
            if shape is not None and (self.reads_broken(shape, f"{path}.shape") or not
                                      self.check_shape(shape, t.shape, f"{path}.shape", base,
                                                       families)):
                shape = None
            flags = {}
            for flag in ("optional", "nullable", "mutated"):
                v = getattr(t, flag)
                if isinstance(v, str):
                    e = self.parse(v, f"{path}.{flag}")
                    if e is not None:
                        self.check_discriminant(e, v, f"{path}.{flag}", base)
                    flags[flag] = e if e is not None else False
                else:
                    flags[flag] = v
            values = None
            if t.values is not None:
                values = self.parse(t.values, f"{path}.values")
                if values is not None and self.check_values(values, t.values, f"{path}.values",
                                                            base) is None:
                    values = None
            requires = []
            for i, r in enumerate(t.requires):
                e = self.parse(r, f"{path}.requires.{i}")
                if e is not None:
                    self.check_requires(e, r, f"{path}.requires.{i}", base)
                    requires.append(e)
            if t.requires and t.values is None:
                self.report("workload", f"{path}.requires",
                            f"tensor `{name}` declares `requires` but no `values` generator")
            if dtype is None or shape is None:
                return None
            return TensorDecl(name, role, dtype, shape, flags["optional"], flags["nullable"],
                              flags["mutated"], t.write_only, t.buffer, t.alias, t.contiguous,
                              t.device, values, tuple(requires), path)

        ctensors = {n: d for n, t in ctensor_specs.items()
                    if (d := tensor(n, t, "ctensor", f"signature.params.{n}")) is not None}
        inputs = {n: d for n, t in sig.inputs.items() if n in declared_tensors["input"]
                  and (d := tensor(n, t, "input", f"signature.inputs.{n}")) is not None}
        outputs = {n: d for n, t in sig.outputs.items() if n in declared_tensors["output"]
                   and (d := tensor(n, t, "output", f"signature.outputs.{n}")) is not None}
        self.check_tensor_rules(sig)
        ctensors, inputs, outputs = self.presence_cycles(ctensors, inputs, outputs)

        rules = []
        for i, text in enumerate(sig.shape_rules):
            path = f"signature.shape_rules.{i}"
            e = self.parse(text, path)
            if e is None or self.reads_broken(e, path):
                continue
            d = defining_equality(e)
            if d is not None and not _is_new(d[0], symbols) and isinstance(d[1], Name) and \
                    _is_new(d[1].id, symbols):
                d = (d[1].id, e.left)  # `M == C_in_g`: the new name is on the right
            if d is not None and _is_new(d[0], symbols):
                self.report("rejected-form", path,
                            f"`{text}` defines the new name `{d[0]}` with an equality; "
                            "shape_rules holds only refinements",
                            hint=f'let: {{{d[0]}: "{_print(d[1])}"}}')
                continue
            k = self.check(e, text, path, base, K.BOOL)
            if k is None or not self.not_opaque(e, k, K.BOOL, text, path, f"`{text}`",
                                                what="a refinement"):
                continue
            rules.append(RuleDecl(e, text, path, is_domain=self.is_discriminant_only(e, base)))

        combos = self.check_dtype_combos(sig.dtype_combos, forall, params)
        roofline = self.elaborate_roofline(base)

        return ElaboratedSpec(
            name=self.loaded.name, file=self.loaded.file, family=self.spec.family,
            status=self.spec.status, ref_api=self.spec.ref_api, forall=forall, params=params,
            ctensors=ctensors, inputs=inputs, outputs=outputs, families=families, lets=lets,
            rules=tuple(rules), dtype_combos=combos, workloads=tuple(self.spec.workloads),
            roofline=roofline, composition=self.spec.composition, adts=self.adts,
            symbols=dict(symbols), broken=frozenset(self.broken))

    # pieces
    def check_default(self, p: ParamDecl) -> None:
        """A parameter's default is a value of its type: `eps: {type: float, default: x}`
        used to load, and a call that omitted `eps` ran with the string."""
        err = value_error(p.default, p.kind, self.adts)
        if err is not None:
            self.report("kind", f"{p.path}.default", f"the default of `{p.name}` is not a "
                        f"value of its type `{p.type_text}`: {err}",
                        hint="write a value of the type, or `null` with `| None` in the type"
                        if p.default is None else None)

    def reads_broken(self, node: Expr | ShapeTerm, path: str) -> bool:
        """Whether `node` reads a let that failed; `path` is then broken too (the let's own
        diagnostic already says why)."""
        exprs = shape_exprs(node) if isinstance(node, (ShapeList, FamilyApp)) else (node,)
        if any(free_names(x) & self._broken_lets for x in exprs):
            self.broken.add(path)
            return True
        return False

    def elaborate_lets(self, exprs: dict[str, Expr], names: set[str],
                       symbols: dict[str, Symbol], base: Scope) -> dict[str, LetDecl]:
        """Kinds of the lets that parsed (`exprs`), in a dependency order. Each cycle is
        reported once and its members left out; so is every let that reads a let that failed
        (one of `names`, the declared lets, that is broken)."""
        deps = {n: {m for m in free_names(e) if m in names} for n, e in exprs.items()}
        graph = {n: d & exprs.keys() for n, d in deps.items()}
        declared = list(self.spec.signature.let)
        while True:
            try:
                order = list(graphlib.TopologicalSorter(graph).static_order())
                break
            except graphlib.CycleError as exc:
                # graphlib lists each node before the lets that read it; print the reads.
                cycle = list(reversed(exc.args[1][:-1]))
                first = min(range(len(cycle)), key=lambda i: declared.index(cycle[i]))
                cycle = cycle[first:] + cycle[:first]
                self.report("let-cycle", f"signature.let.{cycle[0]}",
                            "lets depend on each other in a cycle: "
                            + " -> ".join(cycle + [cycle[0]]) + " (each reads the next)")
                for m in cycle:
                    self.broken.add(f"signature.let.{m}")
                    graph.pop(m, None)
                for d in graph.values():
                    d.difference_update(cycle)
        out = {}
        for n in order:
            if n not in graph:
                continue
            e = exprs[n]
            path = f"signature.let.{n}"
            text = self.spec.signature.let[n]
            if any(f"signature.let.{m}" in self.broken for m in deps[n]):
                self.broken.add(path)
                continue
            k = self.check(e, text, path, Scope(symbols, self.adts, has_out=base.has_out), None)
            if k is None:
                continue
            symbols[n] = Symbol(n, LET, k)
            out[n] = LetDecl(n, e, text, k, path)
        return out

    def elaborate_family(self, name: str, fam, base: Scope) -> FamilyDecl | None:
        path = f"signature.types.{name}"
        params: dict[str, K.Kind] = {}
        for pname, ktext in fam.params.items():
            try:
                params[pname] = parse_kind(ktext, set(self.adts))
            except ExpressionError as exc:
                self.report_exc(f"{path}.params.{pname}", ktext, exc)
                return None
        match = (fam.match,) if isinstance(fam.match, str) else tuple(fam.match)
        for m in match:
            if m not in params:
                self.report("name", f"{path}.match", f"family {name} matches on `{m}`, which is "
                            f"not one of its params {list(params)}")
                return None
            if not K.is_finite(params[m]) or isinstance(params[m], K.DTypeK):
                self.report("kind", f"{path}.match", f"family {name} matches on `{m}` of kind "
                            f"{params[m]}; a match needs a Bool, enum or ADT discriminant")
                return None
        fam_symbols = {**base.symbols, **{p: Symbol(p, PARAM, k) for p, k in params.items()}}
        cases = []
        for i, case in enumerate(fam.cases):
            cpath = f"{path}.cases.{i}"
            when = case.when if isinstance(fam.match, list) else [case.when]
            if not isinstance(when, list) or len(when) != len(match):
                self.report("kind", f"{cpath}.when", f"family {name} matches on {list(match)}; "
                            f"`when` must give {len(match)} value(s), got {case.when!r}")
                continue
            pats = []
            narrowed = {}
            for m, w in zip(match, when):
                pat = self.pattern(w, params[m], f"{cpath}.when")
                if pat is None:
                    break
                pats.append(pat)
                if pat.ctor is not None:
                    narrowed[m] = K.ADTK(params[m].name, frozenset({pat.ctor}))
            else:
                shape = self.parse_shape(case.is_, f"{cpath}.is")
                if shape is None:
                    continue
                scope = Scope(fam_symbols, self.adts, has_out=base.has_out, narrowed=narrowed)
                if isinstance(shape, FamilyApp):
                    self._nested_apps.append((shape, case.is_, f"{cpath}.is", scope))
                else:
                    self.check_shape(shape, case.is_, f"{cpath}.is", scope, {})
                cases.append(FamilyCaseDecl(tuple(pats), shape, cpath))
        return FamilyDecl(name, tuple(params.items()), match, tuple(cases), path)

    def pattern(self, w: Any, kind: K.Kind, path: str) -> Pattern | None:
        k = K.unwrap_maybe(kind)
        if isinstance(k, K.BoolK):
            if isinstance(w, bool):
                return Pattern(value=w)
            self.report("kind", path, f"`when: {w!r}` is not a Bool")
            return None
        if isinstance(k, K.StrK):
            if isinstance(w, str) and w in (k.literals or ()):
                return Pattern(value=w)
            self.report("kind", path, f"`when: {w!r}` is not one of {sorted(k.literals or ())}")
            return None
        if isinstance(k, K.ADTK):
            adt = self.adts.get(k.name)
            if adt is None or not isinstance(w, dict) or len(w) != 1:
                # `when: packed` names a constructor: the rewrite is its pattern.
                named = w if isinstance(w, str) and adt is not None and w in adt.ctors else None
                self.report("kind", path, f"`when: {w!r}` is not a pattern of {k.name}; write "
                            "`{constructor: _}` or `{constructor: {field: value}}`",
                            hint=f"when: {{{named}: _}}" if named else None)
                return None
            (ctor, body), = w.items()
            if ctor not in adt.ctors:
                self.report("kind", path, f"{k.name} has no constructor `{ctor}`; it has "
                            f"{sorted(adt.ctors)}")
                return None
            if body == "_" or body is None:
                return Pattern(ctor=ctor)
            if not isinstance(body, dict):
                self.report("kind", path, f"constructor pattern `{ctor}` takes `_` or a mapping "
                            "of fields")
                return None
            finite = adt.finite_fields(ctor)
            fields = []
            for fname, fv in body.items():
                fk = finite.get(fname)
                if fk is None:
                    self.report("kind", path, f"`{fname}` is not a finitely-valued field of "
                                f"{k.name}.{ctor}; patterns constrain only those: {sorted(finite)}")
                    return None
                lits = getattr(fk, "literals", None)
                if lits is not None and fv not in lits:
                    self.report("kind", path, f"{fname}: {fv!r} is not one of {sorted(lits)}")
                    return None
                fields.append((fname, fv))
            return Pattern(ctor=ctor, fields=tuple(fields))
        self.report("kind", path, f"cannot match on kind {kind}")
        return None

    def check_dtype(self, e: Expr, text: str, path: str, scope: Scope) -> bool:
        return self.check(e, text, path, scope, K.DTYPE, " (a dtype expression)") is not None

    def check_shape(self, shape: ShapeTerm, text: str, path: str, scope: Scope,
                    families: Mapping[str, FamilyDecl]) -> bool:
        """Whether every axis (or family argument) of `shape` has its kind; reports the first
        failure. An application of a family that failed itself is broken but not reported
        again."""
        if isinstance(shape, FamilyApp):
            sym = scope.symbols.get(shape.family)
            if sym is None or sym.role != FAMILY:
                self.report("name", path, f"`{text}`: `{shape.family}` is not a type family of "
                            "this spec")
                return False
            fam = families.get(shape.family)
            if fam is None:
                self.broken.add(path)
                return False
            if len(shape.args) != len(fam.params):
                self.report("kind", path, f"`{text}`: {fam.name} takes {len(fam.params)} "
                            f"arguments ({', '.join(p for p, _ in fam.params)}), got "
                            f"{len(shape.args)}")
                return False
            for a, (pname, pkind) in zip(shape.args, fam.params):
                # An Int where a Dim is expected is allowed: its non-negativity is a runtime check.
                expected = K.INT if pkind == K.DIM else pkind
                part = f"argument `{_print(a)}`"
                k = self.check(a, text, path, scope, expected, f" (family {fam.name} param "
                               f"{pname})", part=part)
                if k is None or not self.not_opaque(a, k, expected, text, path, part):
                    return False
            return True
        for ax in shape.axes:
            if isinstance(ax, Splat):
                part = f"splat `*{_print(ax.value)}`"
                k = self.check(ax.value, text, path, scope, K.SEQ_INT, " (a splat `*` expands a "
                               "sequence of ints)", part=part)
                ok = k is not None and self.not_opaque(ax.value, k, K.SEQ_INT, text, path, part)
            else:
                part = f"axis `{_print(ax)}`"
                k = self.check(ax, text, path, scope, K.INT, " (an axis)", part=part)
                ok = k is not None and self.not_opaque(ax, k, K.INT, text, path, part)
            if not ok:
                return False
        return True

    def not_opaque(self, e: Expr, k: K.Kind, expected: K.Kind, text: str, path: str,
                   part: str, what: str | None = None) -> bool:
        """An opaque value (a `float` parameter, a `Value` index, `inf`, a `Seq` of values)
        passes every kind check, but an axis is an int, a splat a sequence of ints and a
        discriminant a Bool: such an axis reached the prover, whose encoding of shapes
        crashed on it (`[N, scale]`), `optional: inf` crashed its fold of flags, and the
        refinement `H % .0` (a float) reached Z3 as a non-Boolean.
        Refused here, except when the value is opaque only because its own declaration
        failed (that error is reported already, and only once)."""
        if expected not in (K.INT, K.SEQ_INT, K.BOOL):
            return True
        if not (isinstance(k, K.ValueK) or (isinstance(k, K.SeqK) and isinstance(k.elem, K.ValueK))):
            return True
        if any(self._where.get(n) in self.broken for n in free_names(e)):
            return True  # as before: the spec is broken, and the prover asks Z3 nothing
        what = what or ("a discriminant" if expected == K.BOOL else "an axis")
        subject = f"`{text}`: {part}" if part != f"`{text}`" else f"`{text}`"
        self.report("kind", path, f"{subject} has kind {k}, expected {expected}: an opaque "
                    f"value cannot be {what}")
        return False

    def check_discriminant(self, e: Expr, text: str, path: str, scope: Scope) -> None:
        k = self.check(e, text, path, scope, K.BOOL)
        if k is None or not self.not_opaque(e, k, K.BOOL, text, path, f"`{text}`"):
            return
        if not self.is_discriminant_only(e, scope):
            self.report("kind", path, f"`{text}` must read only discriminants (Bool and enum "
                        "parameters, ADT constructors and finite fields, present(...))")

    def is_discriminant_only(self, e: Expr, scope: Scope) -> bool:
        """Whether `e` reads only discriminants: Bool and enum parameters, presence, and of
        an ADT parameter only its constructor (`.kind`) and finitely-valued fields. A
        `Maybe` parameter counts through `present(v)`, and through `v.value` when its payload
        is itself one of those (`'trunc' | 'floor' | None`)."""
        for n in walk(e):
            if isinstance(n, Call) and n.func != "present":
                return False
            if isinstance(n, Name):
                sym = scope.symbols.get(n.id)
                if sym is None:
                    continue
                if sym.role == TENSOR:
                    continue  # only reachable as present(t)
                if sym.role != PARAM:
                    return False
                k = K.unwrap_maybe(sym.kind)
                if isinstance(sym.kind, K.MaybeK) and _only_presence(e, n.id):
                    continue
                if isinstance(k, K.ADTK):
                    if not _only_finite_fields(e, n.id, self.adts.get(k.name)):
                        return False
                    continue
                if not (isinstance(k, K.BoolK) or
                        (isinstance(k, K.StrK) and k.literals is not None)):
                    return False
        return True

    def check_values(self, e: Expr, text: str, path: str, scope: Scope) -> K.Kind | None:
        """A metadata tensor's `values`: one call of a generator (its arguments may call
        value primitives, `as_tensor(balanced_sizes(M, G))`)."""
        from opspec.schema.primitives import PRIMITIVES

        prim = PRIMITIVES.get(e.func) if isinstance(e, Call) else None
        if prim is None or prim.role != "generator":
            self.report("language", path, f"`{text}` is not a generator call; `values` is one "
                        "call of a generator such as prefix_sum(seq_lens)")
            return None
        return self.check(e, text, path, _with_roles(scope, "generator"), None)

    def check_requires(self, e: Expr, text: str, path: str, scope: Scope) -> None:
        from opspec.schema.primitives import PRIMITIVES

        if not isinstance(e, Call) or PRIMITIVES.get(e.func) is None or \
                PRIMITIVES[e.func].role != "requires":
            self.report("language", path, f"`{text}` is not a `requires` predicate call")
            return
        prim = PRIMITIVES[e.func]
        # The constrained tensor's contents are the implicit first argument.
        params = [p for p in prim.params if not p.keyword_only][1:]
        req = [p for p in params if not p.optional]
        if not (len(req) <= len(e.args) <= len(params)):
            self.report("kind", path, f"`{text}`: {e.func} takes {len(params)} argument(s) after "
                        f"the implicit tensor, got {len(e.args)}")
            return
        for a, p in zip(e.args, params):
            if isinstance(a, Name) and scope.symbols.get(a.id) is not None and \
                    scope.symbols[a.id].role == TENSOR and isinstance(p.kind, K.SeqK):
                continue  # another metadata tensor's contents, read as a sequence
            self.check(a, text, path, scope, p.kind, f" (argument {p.name} of {e.func})",
                       part=f"`{_print(a)}`")

    def check_tensor_rules(self, sig) -> None:
        outs = [n for n, t in sig.outputs.items() if t.buffer == "out"]
        if len(outs) > 1:
            self.report("effect", f"signature.outputs.{outs[1]}.buffer",
                        f"at most one output has `buffer: out`; {outs} all do")
        for n, t in sig.inputs.items():
            path = f"signature.inputs.{n}"
            if t.write_only and t.mutated is not True:
                self.report("effect", f"{path}.write_only",
                            f"`{n}` is write_only but not `mutated: true`")
            for f in ("nullable", "buffer", "alias"):
                if getattr(t, f) not in (None, False):
                    self.report("parse", f"{path}.{f}", f"`{f}` is a field of outputs, not of "
                                f"input `{n}`")
        for n, t in sig.outputs.items():
            path = f"signature.outputs.{n}"
            for f in ("optional", "mutated", "write_only", "values"):
                if getattr(t, f) not in (None, False):
                    self.report("parse", f"{path}.{f}", f"`{f}` is a field of inputs, not of "
                                f"output `{n}`")
            if t.requires:
                self.report("parse", f"{path}.requires", f"`requires` is a field of inputs, not "
                            f"of output `{n}`")
            if t.alias is not None:
                src = sig.inputs.get(t.alias)
                if src is None:
                    self.report("effect", f"{path}.alias", f"output `{n}` aliases `{t.alias}`, "
                                f"which is not an input; inputs: {list(sig.inputs)}")
                elif src.mutated is False:
                    self.report("effect", f"{path}.alias", f"output `{n}` aliases input "
                                f"`{t.alias}`, which is never written (declare `mutated`)")
                if t.buffer is not None:
                    self.report("effect", f"{path}.alias", f"output `{n}` has both `alias` and "
                                "`buffer`")
        seen_optional = None
        for n, t in sig.inputs.items():
            if t.optional is not False:  # `true` or a discriminant expression
                seen_optional = seen_optional or n
            elif seen_optional is not None:
                self.report("name", f"signature.inputs.{n}", f"required input `{n}` comes after "
                            f"optional input `{seen_optional}`; optional inputs come last")

    def presence_cycles(self, *groups: dict[str, TensorDecl]) -> tuple[dict[str, TensorDecl], ...]:
        """An `optional` (an output's `nullable`) that reads its own tensor's presence, or
        another's whose flag reads it back (`bias: {optional: "present(bias)"}`), never
        folds to a value: the prover recursed until RecursionError. Each such flag is
        reported and dropped (the tensor is then always present)."""
        from dataclasses import replace

        decls = {n: d for g in groups for n, d in g.items()}
        flag = {n: (d.nullable if d.role == "output" else d.optional) for n, d in decls.items()}
        graph = {n: {a.args[0].id for a in walk(f) if isinstance(a, Call)
                     and a.func == "present" and a.args and isinstance(a.args[0], Name)
                     and not isinstance(flag.get(a.args[0].id, False), bool)}
                 for n, f in flag.items() if not isinstance(f, bool)}
        cyclic: dict[str, list[str]] = {}  # tensor -> the cycle it is on
        while True:
            try:
                list(graphlib.TopologicalSorter(graph).static_order())
                break
            except graphlib.CycleError as exc:
                cycle = sorted(set(exc.args[1]))
                for n in cycle:
                    cyclic[n] = cycle
                    graph[n] = set()
        out = []
        for g in groups:
            new = dict(g)
            for n in [n for n in g if n in cyclic]:
                d = g[n]
                field_ = "nullable" if d.role == "output" else "optional"
                self.report("kind", f"{d.path}.{field_}", f"`{field_}` of `{n}` depends on the "
                            f"presence of `{n}` itself (the presence of "
                            f"{', '.join(cyclic[n])} is read in a cycle)")
                new[n] = replace(d, **{field_: False})
            out.append(new)
        return tuple(out)

    def check_dtype_combos(self, combos, forall, params) -> tuple[Mapping[str, str], ...]:
        out = []
        keys = None
        for i, row in enumerate(combos):
            path = f"signature.dtype_combos.{i}"
            if keys is None:
                keys = tuple(row)
            elif tuple(row) != keys:
                self.report("kind", path, f"every dtype_combos row has the keys {list(keys)}; "
                            f"this one has {list(row)}")
                continue
            ok = True
            for k, v in row.items():
                kind = forall.get(k) or (params[k].kind if k in params else None)
                kind = K.unwrap_maybe(kind) if kind is not None else None
                if not isinstance(kind, K.DTypeK):
                    self.report("kind", path, f"`{k}` is not a DType index or dtype parameter")
                    ok = False
                elif kind.members is not None and v not in kind.members:
                    self.report("kind", path, f"{k}: {v} is not one of {sorted(kind.members)}")
                    ok = False
            if ok:
                if row in out:
                    self.report("kind", path, f"dtype_combos row {dict(row)} is repeated")
                out.append(dict(row))
        return tuple(out)

    def elaborate_roofline(self, base: Scope) -> RooflineDecl | None:
        r = self.spec.roofline
        if r is None:
            return None
        if r.func is not None:
            return RooflineDecl(func=r.func)
        scope = _with_roles(base, "roofline")
        parts = {}
        for f in ("flops", "bytes"):
            text = getattr(r, f)
            if text is None:
                parts[f] = None
                continue
            e = self.parse(text, f"roofline.{f}")
            if e is not None and (self.reads_broken(e, f"roofline.{f}") or
                                  self.check(e, text, f"roofline.{f}", scope, K.INT) is None):
                e = None
            parts[f] = e
        return RooflineDecl(flops=parts["flops"], bytes=parts["bytes"])


def _outside_signature(path: str) -> bool:
    head = path.split(".", 1)[0]
    return head in ("workloads", "roofline", "composition")


def _is_new(name: str, symbols: Mapping[str, Symbol]) -> bool:
    """A name that nothing declares and that is not built in (`inf`, dtypes, `out`)."""
    return name not in symbols and name not in K.DTYPES and name not in ("inf", "out")


def _with_roles(scope: Scope, *roles: str) -> Scope:
    from dataclasses import replace
    return replace(scope, roles=scope.roles | frozenset(roles))


def _only_presence(e: Expr, name: str) -> bool:
    """Whether every read of `name` in `e` is `present(name)`."""
    inside = 0
    total = 0
    for n in walk(e):
        if isinstance(n, Call) and n.func == "present" and n.args and \
                isinstance(n.args[0], Name) and n.args[0].id == name:
            inside += 1
        if isinstance(n, Name) and n.id == name:
            total += 1
    return total == inside


def _only_finite_fields(e: Expr, name: str, adt: ADTInfo | None) -> bool:
    """Whether every field that `e` reads of the ADT value `name` is its constructor
    (`.kind`) or a field with finitely many values in every constructor that has it."""
    def reads(base: Expr) -> bool:
        return isinstance(base, Name) and base.id == name or (
            isinstance(base, Attr) and base.attr == "value" and isinstance(base.value, Name)
            and base.value.id == name)  # `v.value.<field>` of a Maybe ADT

    for n in walk(e):
        if isinstance(n, Attr) and reads(n.value):
            if n.attr == "kind" or (n.attr == "value" and isinstance(n.value, Name)):
                continue
            if adt is None:
                return False
            kinds = [c.fields[n.attr] for c in adt.ctors.values() if n.attr in c.fields]
            if not kinds or not all(K.is_finite(k) for k in kinds):
                return False
    return True


def _print(e: Expr) -> str:
    from opspec.schema.printer import print_expr
    return print_expr(e)


#: The most entries one field of a signature may have. Some passes compare declarations
#: pairwise (the workload check looks up every index in every declaration): 6000 inputs
#: took over two minutes, and a 2 MiB file holds 20,000. Written specs have tens.
MAX_DECLARATIONS = 1000


def elaborate(loaded: LoadedSpec, adts: Mapping[str, ADTInfo]) -> tuple[ElaboratedSpec | None, list[Diagnostic]]:
    """Elaborate one loaded spec; None when its top-level fields did not load (or one of
    them is over MAX_DECLARATIONS entries)."""
    if loaded.spec is None:
        return None, []
    sig = loaded.spec.signature
    for name in ("types", "forall", "params", "inputs", "outputs", "let", "shape_rules",
                 "dtype_combos"):
        n = len(getattr(sig, name))
        if n > MAX_DECLARATIONS:
            path = f"signature.{name}"
            return None, [Diagnostic("language", f"{path} has {n} entries, more than the "
                                     f"{MAX_DECLARATIONS} a spec may declare", op=loaded.name,
                                     path=path, pos=loaded.pos(path))]
    el = _Elaborator(loaded, adts)
    result = el.run()
    return result, el.diags
