"""Offline proof of an op's dispatch regions (check id `dispatch`), beyond reference §9.7.

At run time, `DispatchTable._select` refuses a call that no implementation serves ("no
implementation serves this call") or that several serve without precedence ("dispatch is
ambiguous"). `prove_dispatch(op_cls)` proves, with Z3 and without running anything, that
neither can happen for a call the op's spec accepts. Per kernel interface and per device type
`d` in the union of its implementations' `devices`:

1. *no ambiguity*: the regions of any two non-`general` implementations on `d` are disjoint,
   unless `preferred_over` (transitively) orders them. Pairwise suffices: the serving set at
   any call then is a chain of the (acyclic) preference order, which has one greatest key;
   a `general` implementation ranks below all others and there is at most one.
2. *coverage*: the regions of the implementations on `d`, the general one included, cover
   every call the spec accepts. An unrestricted general implementation (no `applies`, no
   `supported_archs`) makes this hold at once.

A finding comes with a counterexample: a concrete call (the call spec's fields, `device`, and
the device facts an implementation reads); `call_of` builds the call spec from it.

**Regions.** An implementation's region on device type `d` is `d in devices` ∧ (on CUDA)
`arch in supported_archs` ∧ its `applies` expression (with the domain conditions its encoding
needs: a call where `applies` raises is served by nobody). Off CUDA the device facts are None,
so `supported_archs` excludes the implementation there, as `_unavailable` does.

**Imperative code is not read.** A `refusal` override (any class in the MRO but `Kernel`
defining it), an `applies` naming a call spec *property* or `calibration`, an `applies` reading
a device fact off CUDA (where it is None), or one the encoder cannot express: the region is
then known only from above (its availability ∧ `applies`, if any) and from below (empty). Each
question is asked with the bound that makes a "yes" certain; where the two bounds disagree the
answer is UNDECIDED: an advisory with check `unknown` naming the class and why, never a silent
pass. So a `refusal` override leaves the proof undecided exactly where it could change the
answer (an unordered overlap it takes part in, a gap only it might fill); an implementation
that is preferred over every neighbour and backed by an unrestricted general one changes
nothing and is proven around.

**Call spec fields and the spec's names.** A field takes its domain from the op's spec when it
maps to a spec name (index, parameter or let), else from its annotation:

- `spec_names: ClassVar[Mapping[str, str | None]]` on the call spec class maps fields
  explicitly (`{"dtype": "T"}`; None: no spec name). Otherwise a field named like a spec name
  maps to it (M, N, K, trans_a), and a field named `dtype` maps to the spec's one DType index
  when it has exactly one (GemmCall.dtype -> T).
- A mapped field has the spec name's kind (`Dim` >= 0, `DType[float16 | bfloat16]`, `Bool`,
  ...) and the same value (one Z3 variable each, equated); the spec's lets, `shape_rules` and
  `dtype_combos` constrain the accepted calls, with every other spec name existentially free.
- An unmapped field: its kind spelling in `field_kinds: ClassVar[Mapping[str, str]]` on the
  call spec class (forall spellings: `"Dim"`, `"DType[float16 | bfloat16]"`), else its
  annotation: `bool` -> Bool, `int` -> Int (signed), `str` -> Str (DType when the field is
  named `dtype` or `*_dtype`: call specs carry dtype names), `torch.dtype` -> DType, tuples
  and `X | None` as `parse_type` reads them. An `int` is a size (>= 0) only when the spec says
  so (it maps to a `Dim`) or `field_kinds` does: a larger domain can add counterexamples,
  never hide one.
- Device facts on CUDA: `arch`, `sm_count`, `smem_budget` are Dims, unconstrained otherwise.

Lets and rules the encoder cannot express are left out of the accepted calls (a larger
domain); a gap found then is reported as a warning that names them, since the spec may
reject the call. Without a spec (a user class without one), fields take their annotations'
domains.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch
import z3

from opspec.schema import kinds as K
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.errors import OpspecError
from opspec.schema.types import parse_kind, parse_type
from opspec.solver.encode import EncodeError, Encoder, solve
from opspec.solver.z3env import DEFAULT_RLIMIT, Verdict, fresh_context, make_solver

from .dispatch import FACT_NAMES, CallSpec, DispatchTable, Kernel, _qualname

__all__ = ["prove_dispatch", "dispatch_checks", "call_of", "field_domains"]

#: Device facts with an integer value on CUDA (`calibration` is opaque: never encoded).
_INT_FACTS = ("arch", "sm_count", "smem_budget")
#: The device type whose facts are known (ints); on every other type they are None.
_FACT_DEVICE = "cuda"


# -- fields: mapping to spec names and domains ------------------------------------------------

@dataclass(frozen=True)
class FieldDomain:
    """How one call spec field is encoded: its kind, the spec name it maps to (or None),
    and where the kind came from (for messages)."""

    name: str
    kind: K.Kind | None        # None: not encodable (an opaque annotation)
    spec_name: str | None
    source: str


def _annotation_kind(field_name: str, annotation: Any) -> tuple[K.Kind | None, str]:
    """The kind of a field from its annotation (a string under `from __future__ import
    annotations`, else a type)."""
    if annotation is torch.dtype:
        return K.DTYPE, "annotation torch.dtype"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = {m.value for m in annotation}
        if all(isinstance(v, str) for v in values):
            return K.StrK(frozenset(values)), f"enum {annotation.__name__}"
        return None, f"enum {annotation.__name__}"
    text = annotation if isinstance(annotation, str) else (
        annotation.__name__ if isinstance(annotation, type) else
        str(annotation).replace("typing.", ""))
    text = text.strip()
    if text in ("torch.dtype", "dtype"):
        return K.DTYPE, f"annotation {text}"
    try:
        kind = parse_type(text)
    except OpspecError:
        return None, f"annotation {text}"
    if isinstance(kind, K.ValueK):
        return None, f"annotation {text}"
    if kind == K.STR and (field_name == "dtype" or field_name.endswith("_dtype")):
        return K.DTYPE, f"annotation {text}, a dtype name"
    return kind, f"annotation {text}"


def _spec_kinds(spec: Any) -> dict[str, K.Kind]:
    """The kinds of the spec's names a call can see: indices, parameters, lets."""
    return {n: s.kind for n, s in spec.symbols.items() if s.role not in ("tensor", "family")}


def _compatible(field_kind: K.Kind | None, spec_kind: K.Kind) -> bool:
    """Whether a field annotated `field_kind` can carry a value of the spec's `spec_kind`."""
    if field_kind is None:
        return True  # an opaque annotation: the spec's kind decides
    a, b = K.unwrap_maybe(field_kind), K.unwrap_maybe(spec_kind)
    groups = ((K.IntK,), (K.BoolK,), (K.StrK, K.DTypeK), (K.SeqK,))
    return any(isinstance(a, g) and isinstance(b, g) for g in groups)


def field_domains(call_cls: type[CallSpec], spec: Any = None
                  ) -> tuple[dict[str, FieldDomain], list[str]]:
    """Each field of `call_cls` (but `device`) with its kind and spec name; and the problems
    of the mapping (an explicit spec name the spec lacks, kinds that disagree)."""
    problems: list[str] = []
    spec_kinds = _spec_kinds(spec) if spec is not None else {}
    explicit = dict(getattr(call_cls, "spec_names", None) or {})
    declared = dict(getattr(call_cls, "field_kinds", None) or {})
    try:
        hints = typing.get_type_hints(call_cls)
    except Exception:  # noqa: BLE001 - a local or unresolvable annotation: read its text
        hints = {}
    names = [f.name for f in fields(call_cls) if f.name != "device"]
    for n in sorted((set(explicit) | set(declared)) - set(names)):
        problems.append(f"{call_cls.__qualname__} declares {n!r} in spec_names/field_kinds, "
                        f"which is not one of its fields {names}")
    dtype_indices = [n for n, k in (spec.forall.items() if spec is not None else ())
                     if isinstance(k, K.DTypeK)]
    out: dict[str, FieldDomain] = {}
    for f in fields(call_cls):
        if f.name == "device":
            continue
        if f.name in declared:
            try:
                kind, source = parse_kind(declared[f.name]), f"field_kinds {declared[f.name]!r}"
            except OpspecError as exc:
                problems.append(f"{call_cls.__qualname__}.field_kinds[{f.name!r}] = "
                                f"{declared[f.name]!r}: {exc}")
                kind, source = None, "field_kinds (unreadable)"
        else:
            kind, source = _annotation_kind(f.name, hints.get(f.name, f.type))
        target: str | None = None
        if f.name in explicit:
            target = explicit[f.name]
            if target is not None and spec is not None and target not in spec_kinds:
                problems.append(f"{call_cls.__qualname__}.spec_names maps {f.name!r} to "
                                f"{target!r}, which the spec does not declare; it has "
                                f"{sorted(spec_kinds)}")
                target = None
        elif f.name in spec_kinds:
            target = f.name
        elif f.name == "dtype" and len(dtype_indices) == 1:
            target = dtype_indices[0]
        if target is not None and spec is not None:
            if not _compatible(kind, spec_kinds[target]):
                problems.append(f"{call_cls.__qualname__}.{f.name} ({source}) cannot carry "
                                f"the spec's {target}: {spec_kinds[target]}")
                target = None
            else:
                kind, source = spec_kinds[target], f"the spec's {target}: {spec_kinds[target]}"
        out[f.name] = FieldDomain(f.name, kind, target, source)
    return out, problems


def call_of(call_cls: type[CallSpec], counterexample: Mapping[str, Any]) -> CallSpec:
    """The call spec a counterexample describes (device facts stated with `with_facts`), so
    that `DispatchTable.key_for` can replay it."""
    hints: dict[str, Any] = {}
    try:
        hints = typing.get_type_hints(call_cls)
    except Exception:  # noqa: BLE001
        pass
    kwargs = {}
    for f in fields(call_cls):
        if f.name == "device":
            continue
        value = counterexample[f.name]
        if hints.get(f.name) is torch.dtype and isinstance(value, str):
            value = getattr(torch, value)
        kwargs[f.name] = value
    device = counterexample.get("device")
    call = call_cls(**kwargs, device=torch.device(device) if device is not None else None)
    facts = {n: counterexample[n] for n in FACT_NAMES if n in counterexample}
    return call.with_facts(**facts) if facts else call


# -- regions --------------------------------------------------------------------------------

@dataclass
class _Region:
    key: str
    cls: type[Kernel]
    upper: z3.BoolRef      # every call it may serve
    lower: z3.BoolRef      # calls it certainly serves
    undecided: str | None  # why upper and lower differ


def _refusal_overridden(cls: type[Kernel]) -> bool:
    owner = next((b for b in cls.__mro__ if "refusal" in vars(b)), Kernel)
    return owner is not Kernel


def _encode_applies(enc: Encoder, cls: type[Kernel], device: str,
                    call_kinds: Mapping[str, K.Kind], call_fields: frozenset[str]
                    ) -> tuple[z3.BoolRef | None, str | None]:
    """(term, None), or (None, why it cannot be encoded)."""
    expr = cls._applies_expr
    if expr is None:
        return z3.BoolVal(True), None
    names = cls._applies_names
    facts = [n for n in names if n in FACT_NAMES]
    if device != _FACT_DEVICE and facts:
        return None, (f"its applies reads device facts {facts}, which are None on {device}")
    opaque = sorted({n for n in names if n not in call_kinds})
    if opaque:
        what = {n: "a device fact with no encoding" if n in FACT_NAMES else
                "a call spec property (code)" if n not in call_fields else
                "a field whose annotation has no encoding (declare field_kinds)"
                for n in opaque}
        return None, ("its applies reads " +
                      ", ".join(f"`{n}`, {w}" for n, w in what.items()))
    mark = len(enc.domain)
    try:
        term = enc.expr(expr)
    except EncodeError as exc:
        return None, f"its applies `{cls.applies}` cannot be encoded: {exc}"
    if not z3.is_bool(term):
        return None, f"its applies `{cls.applies}` is not a Bool"
    domain = [c for _, c in enc.domain[mark:]]
    return (z3.And(term, *domain) if domain else term), None


def _regions(enc: Encoder, table: DispatchTable, keys: tuple[str, ...], device: str,
             call_kinds: Mapping[str, K.Kind], call_fields: frozenset[str]) -> list[_Region]:
    out = []
    for key in keys:
        cls = table.kernel_types[key]
        if device not in cls.devices:
            continue
        archs = cls.supported_archs
        if archs is not None and device != _FACT_DEVICE:
            continue  # arch is None off CUDA: `_unavailable` excludes it
        avail = [] if archs is None else [z3.Or([enc.var("arch") == a for a in sorted(archs)])
                                          if archs else z3.BoolVal(False)]
        term, why = _encode_applies(enc, cls, device, call_kinds, call_fields)
        if why is None and _refusal_overridden(cls):
            why = "its refusal(call) is imperative code the proof does not read"
            if cls._applies_expr is None:
                why += " (and it declares no applies)"
        if term is None:
            upper = z3.And(*avail) if avail else z3.BoolVal(True)
        else:
            upper = z3.And(*avail, term) if avail else term
        lower = upper if why is None else z3.BoolVal(False)
        out.append(_Region(key, cls, upper, lower, why))
    return out


# -- the proof ------------------------------------------------------------------------------

class _Interface:
    """The proof of one interface of one op: builds encoders per device type and asks."""

    def __init__(self, op: str, iface: str, table: DispatchTable, spec: Any,
                 domains: Mapping[str, FieldDomain], rlimit: int):
        self.op, self.iface, self.table, self.spec = op, iface, table, spec
        self.domains = domains
        self.rlimit = rlimit
        self.keys = table.keys_by_interface[iface]
        self.diags: list[Diagnostic] = []

    def report(self, check: str, message: str, *, severity: Severity = Severity.ERROR,
               counterexample: Mapping[str, Any] | None = None, hint: str | None = None) -> None:
        self.diags.append(Diagnostic(check, f"interface {self.iface!r}: {message}", op=self.op,
                                     severity=severity, counterexample=counterexample,
                                     hint=hint))

    def devices(self) -> list[str]:
        return sorted({d for k in self.keys for d in self.table.kernel_types[k].devices})

    def run(self) -> list[Diagnostic]:
        for device in self.devices():
            with fresh_context():
                self._device(device)
        return self.diags

    def _device(self, device: str) -> None:
        call_kinds = {n: d.kind for n, d in self.domains.items() if d.kind is not None}
        if device == _FACT_DEVICE:
            call_kinds.update({n: K.DIM for n in _INT_FACTS})
        call = Encoder(call_kinds, copy="@call")
        base: list[z3.BoolRef] = []
        skipped: list[str] = []
        encoders = [call]
        if self.spec is not None:
            spec_enc = Encoder(_spec_kinds(self.spec), adt_fields=_adt_fields(self.spec))
            encoders.append(spec_enc)
            base += self._accepted(spec_enc, skipped)
            for n, d in self.domains.items():
                if d.spec_name is not None and d.kind is not None:
                    base.append(call.var(n) == spec_enc.var(d.spec_name))
        for n in call_kinds:  # every field appears in counterexamples
            call.var(n)
        regions = _regions(call, self.table, self.keys, device, call_kinds,
                           frozenset(self.domains))
        base += call.side
        if self.spec is not None:
            base += spec_enc.side
        shown = self._shown(regions, device)

        def ask(*query: z3.BoolRef) -> tuple[Verdict, dict | None, str | None]:
            solver = make_solver(self.rlimit)
            solver.add(*base, *query)
            verdict, model, reason = solve(solver, encoders)
            if verdict is not Verdict.SAT:
                return verdict, None, reason
            values = call.values(model)
            cex = {"device": device, **{n: values[n] for n in shown if n in values}}
            return verdict, cex, None

        self._overlaps(regions, device, ask)
        self._coverage(regions, device, ask, skipped)

    def _accepted(self, enc: Encoder, skipped: list[str]) -> list[z3.BoolRef]:
        """The constraints every call the spec accepts satisfies (lets, rules, dtype combos);
        those the encoder cannot express are left out and named in `skipped`."""
        spec = self.spec
        out: list[z3.BoolRef] = []
        kinds = _spec_kinds(spec)

        def add(path: str, build) -> None:
            mark = len(enc.domain)
            try:
                term = build()
            except (EncodeError, OpspecError) as exc:
                del enc.domain[mark:]
                skipped.append(f"{path} ({exc})")
                return
            out.append(term)
            out.extend(c for _, c in enc.domain[mark:])

        for name, let in spec.lets.items():
            if name in kinds:
                add(let.path, lambda e=let.expr, n=name: enc.define(n, e))
        for rule in spec.rules:
            add(rule.path, lambda e=rule.expr: enc.expr(e))
        if spec.dtype_combos:
            add("signature.dtype_combos", lambda: z3.Or([
                z3.And([enc.assign(k, v) for k, v in row.items()]) for row in spec.dtype_combos]))
        return out

    def _shown(self, regions: list[_Region], device: str) -> list[str]:
        """The names a counterexample shows: every encodable field, and the device facts an
        implementation on `device` reads or restricts."""
        names = [n for n, d in self.domains.items() if d.kind is not None]
        if device == _FACT_DEVICE:
            for fact in _INT_FACTS:
                if any(fact in r.cls._applies_names or
                       (fact == "arch" and r.cls.supported_archs is not None) for r in regions):
                    names.append(fact)
        return names

    def _overlaps(self, regions: list[_Region], device: str, ask) -> None:
        beats = self.table._beats
        ranked = [r for r in regions if not r.cls.general]
        for i, a in enumerate(ranked):
            for b in ranked[i + 1:]:
                if b.key in beats[a.key] or a.key in beats[b.key]:
                    continue
                verdict, cex, reason = ask(a.upper, b.upper)
                if verdict is Verdict.UNSAT:
                    continue
                pair = f"{a.key} ({_qualname(a.cls)}) and {b.key} ({_qualname(b.cls)})"
                if verdict is Verdict.UNKNOWN:
                    self.report("unknown", f"on {device}: the solver could not decide whether "
                                f"{pair} overlap: {reason}", severity=Severity.ADVISORY)
                    continue
                if a.undecided is None and b.undecided is None:
                    self.report(
                        "dispatch", f"on {device}: dispatch is ambiguous: {pair} both serve "
                        "some calls the spec accepts, and neither is preferred_over the other",
                        counterexample=cex,
                        hint=f"declare preferred_over = frozenset({{{b.key!r}}}) on {a.key} "
                             f"(or {a.key!r} on {b.key}), or make their applies disjoint")
                    continue
                why = "; ".join(f"{_qualname(r.cls)}: {r.undecided}"
                                for r in (a, b) if r.undecided)
                self.report("unknown", f"on {device}: undecided whether {pair} both serve "
                            f"some call, with no preference between them: {why}",
                            severity=Severity.ADVISORY, counterexample=cex,
                            hint="state the restriction as `applies`, or order the two "
                                 "with preferred_over")

    def _coverage(self, regions: list[_Region], device: str, ask, skipped: list[str]) -> None:
        verdict, cex, reason = ask(z3.Not(z3.Or([r.lower for r in regions] or
                                                [z3.BoolVal(False)])))
        if verdict is Verdict.UNSAT:
            return
        if verdict is Verdict.UNKNOWN:
            self.report("unknown", f"on {device}: the solver could not decide whether every "
                        f"call is served: {reason}", severity=Severity.ADVISORY)
            return
        undecided = [r for r in regions if r.undecided]
        if undecided:
            verdict, certain, reason = ask(z3.Not(z3.Or([r.upper for r in regions])))
            if verdict is Verdict.UNSAT:
                why = "; ".join(f"{r.key} ({_qualname(r.cls)}): {r.undecided}"
                                for r in undecided)
                self.report("unknown", f"on {device}: undecided whether every call the spec "
                            f"accepts is served; the calls the declared regions leave out "
                            f"are left to {why}", severity=Severity.ADVISORY,
                            counterexample=cex,
                            hint="state the restriction as `applies`, or add a general "
                                 "implementation for this device type")
                return
            if verdict is Verdict.UNKNOWN:
                self.report("unknown", f"on {device}: the solver could not decide whether "
                            f"every call is served: {reason}", severity=Severity.ADVISORY)
                return
            cex = certain
        keys = [r.key for r in regions]
        message = (f"on {device}: no implementation serves some calls the spec accepts "
                   f"(implementations on {device}: {keys}; none is an unrestricted general "
                   f"one)")
        if skipped:
            self.report("dispatch", message + "; the spec may reject this call by rules the "
                        "proof could not encode: " + "; ".join(skipped),
                        severity=Severity.WARNING, counterexample=cex)
        else:
            self.report("dispatch", message, counterexample=cex,
                        hint="widen an applies, or declare a general implementation for "
                             f"{device}")


def _adt_fields(spec: Any) -> dict[str, K.Kind]:
    from opspec.solver.queries import _adt_fields as adt_fields

    return adt_fields(spec)


def _default_spec(op_cls: type) -> Any:
    entry = getattr(op_cls, "_opspec_entry", None)
    return entry.spec if entry is not None else None


def prove_dispatch(op_cls: type, spec: Any = None, *, rlimit: int = DEFAULT_RLIMIT
                   ) -> list[Diagnostic]:
    """Diagnostics (check `dispatch`, and `unknown` advisories) for the dispatch regions of
    `op_cls`'s implementation table: empty when every call its spec accepts is served by
    exactly one implementation on every device type its implementations list.

    `spec`: the elaborated spec of the op (default: the one the class was bound to at
    definition, if any; without one, fields take their annotations' domains). The table is
    the one the op would install now: its `kernel_types`, plus kernel types backends have
    registered for it.
    """
    op = spec.name if spec is not None else op_cls.__name__
    if spec is None:
        spec = _default_spec(op_cls)
    kernel_types = dict(getattr(op_cls, "kernel_types", {}) or {})
    interfaces = dict(getattr(op_cls, "interfaces", {}) or {})
    if not kernel_types and not interfaces:
        return []
    try:
        table = DispatchTable(op_cls.__name__, kernel_types, interfaces)
    except OpspecError as exc:
        return [Diagnostic("dispatch", f"the implementation table does not install: {exc}",
                           op=op)]
    diags: list[Diagnostic] = []
    for iface in sorted(table.interfaces):
        request = table.interfaces[iface].request
        domains, problems = field_domains(request, spec)
        if problems:
            diags.extend(Diagnostic("dispatch", f"interface {iface!r}: {p}", op=op)
                         for p in problems)
            continue
        diags.extend(_Interface(op, iface, table, spec, domains, rlimit).run())
    return diags


def dispatch_checks(op_cls: type, spec: Any, pos: Any = None) -> list[Diagnostic]:
    """`prove_dispatch` as `apply_code_checks` runs it: diagnostics without a position are
    placed at `pos` (the op's spec), and a crash of the proof is an `unknown` advisory,
    never a crash of `opspec prove`."""
    try:
        diags = prove_dispatch(op_cls, spec, rlimit=DEFAULT_RLIMIT)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return [Diagnostic("unknown", f"{op_cls.__qualname__}: the dispatch proof crashed: "
                           f"{type(exc).__name__}: {exc}", op=getattr(spec, "name", None),
                           pos=pos, severity=Severity.ADVISORY)]
    return [dataclasses.replace(d, pos=d.pos or pos) for d in diags]
