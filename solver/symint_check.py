"""SymInt safety: the `symint` check (seed § 5 and § 6, check 7; reference §8.5 and §10).

`check_symint(spec, loaded, plan)` is a whole-spec pass (`SPEC_CHECKS`). It applies only to a
spec whose op class gets a compile boundary: one with a call-time tensor input and no
composition. Under `torch.compile` the generated call checks of such an op run on SymInts:
every size the call solves from a call-time tensor is a SymInt, and so is every value
computed from one; comparing two of them gives a SymBool. Parameters, discriminants, dtypes
(also the DType indices a call solves: a dtype is never symbolic), indices solved from
construction-time tensors and lets of those are concrete Python values, because
construction runs eagerly.

What is evaluated at call time: the steps of the plan's `call` phase on every branch that no
domain restriction excludes (axis checks, the offsets of solved axes, rank checks, lets,
refinements, dtype checks, the non-negativity of output axes) and the output types (shapes
and dtypes, which the generated code evaluates for the fake, the `out` check and the output
checks). Construction steps run eagerly and are never reported. A name is *call-time* when a
call step solves it from a tensor's shape (`solve-axis`, `solve-splat`), or when it is a let
bound in the call phase whose expression reads a call-time name. A sub-expression reads
call-time values when it reads a call-time name, except through `len(...)`: the length of a
sequence of sizes is its rank, which is static.

The rule. A generated check converts exactly one SymBool to a Python bool: its own verdict
(a refinement holds, an axis equals its declaration, an output axis is non-negative). Torch
records that conversion as a guard that every passing call satisfies. A condition built from
comparisons with `not`, `and`, `or` and comparison chains (`0 < M <= N`) is such a verdict:
the connectives combine SymBools and have SymBool forms (`torch.sym_not`, and `sym_and` /
`sym_or` of the symbolic-shapes module), so the whole condition stays one SymBool until the
check tests it; a Bool let of such a condition is fine for the same reason. Every other place
where evaluating an expression needs the truth value of a comparison between call-time
sizes converts a SymBool outside the check, and is reported (the expression would have to
be evaluated at construction, which a call-time value cannot be):

1. the test of a conditional `x if c else y` that reads call-time values: the value chosen
   depends on it (also inside a comprehension: `sum(1 if n == 0 else 0 for n in S)`);
2. a membership test `x in s` / `x not in s` that reads call-time values: Python's `in`
   always returns a bool; the container compares each element and converts the result;
3. a comparison between sequences (`S == (M, 1)`, `S != T`, `S < T`) that reads call-time
   values: tuples compare element by element, converting each element comparison to decide
   whether to go on; compare the elements instead (`S[0] == M and S[1] == 1`);
4. a primitive the registry marks not `symint_safe` (`max`, `min`, `all`, `broadcast`,
   `pool.out`, `mhc.expansion`, `balanced_sizes`, `repeat`, generators, predicates)
   applied to an argument that reads call-time values: its implementation compares sizes
   (or hashes them, or needs them as Python ints);
5. a call-time value passed to an argument that a SymInt-safe primitive must know as a
   Python value: the index `i` and length `n` of `per_axis`, the `dim` and `rank` of
   `valid_axes` and `unique_axes`, the `dim`, `keepdim` and `mode` of `reduced`, the value of
   `category` and `representable` (the primitive branches on them or indexes with them;
   the registry's flag covers its size arguments only);
6. a call-time value used as a subscript or slice bound (`S[M]`, `S[:M]`): indexing
   converts the SymInt to a Python int, which specializes the graph on its value.

`+ - * // %`, unary minus, comparisons, `len`, subscripts by concrete indices, tuples,
comprehensions over a shape (its length is static) and SymInt-safe primitives on sizes are
fine. Expressions that read only construction-time values are never reported.

Severity. A conversion torch can guard (rules 1-6 in general) compiles: torch records a
guard, specialises the graph on the outcome and recompiles when a call breaks it; such a
finding is a WARNING. A primitive whose implementation cannot take a SymInt at all
(`UNEVALUABLE`: it only exists at workload instantiation, or needs a whole sequence of
sizes as Python values) makes the compiled call fail; that finding is an ERROR.

Each finding has the check id `symint`, at the declaration whose expression it
is (`signature.let.n`, `signature.shape_rules.1`, `signature.outputs.y.shape`,
`signature.inputs.x.shape`, ...), naming the expression as declared, the unsafe part (as
folded on the branch) and why, with the branch's discriminant values and the call-time
sizes the part reads (and the tensor each is solved from) as counterexample; one finding
per declaration and construct, however many branches share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from opspec.schema import kinds as K
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.expr import (
    Attr, Call, Compare, Expr, GenExp, IfExp, Name, Slice, Splat, Subscript, TupleExpr,
    children,
)
from opspec.schema.printer import print_expr, print_shape
from opspec.schema.primitives import PRIMITIVES
from opspec.solver import plan as P

CHECK = "symint"

#: Arguments a SymInt-safe primitive must receive as Python values (rule 5).
CONCRETE_ARGS: dict[str, frozenset[str]] = {
    "per_axis": frozenset({"i", "n"}),
    "valid_axes": frozenset({"dim", "rank"}),
    "unique_axes": frozenset({"dim", "rank"}),
    "reduced": frozenset({"dim", "keepdim", "mode"}),
    "category": frozenset({"x"}),
    "representable": frozenset({"v", "T"}),
    "moe.capacity": frozenset({"layout"}),
    "promote_int_to_float": frozenset({"T"}),
    "coalesce_dtype": frozenset({"v", "T"}),
}

#: Primitives whose result is a sequence (for rule 3).
_SEQ_RESULTS = frozenset({"reduced", "broadcast", "balanced_sizes", "repeat"})


@dataclass(frozen=True)
class Finding:
    """One unsafe part of an expression evaluated at call time."""

    kind: str          # "conditional" | "membership" | "sequence-compare" | "primitive" |
    #                    "concrete-argument" | "index"
    part: Any          # the unsafe node, as folded on the branch
    reads: tuple[str, ...]  # the call-time names it reads
    func: str = ""     # the primitive ("primitive", "concrete-argument")
    arg: str = ""      # the argument ("concrete-argument")

    @property
    def group(self) -> str:
        """Findings of one declaration in one group are reported together."""
        return f"{self.kind} {self.func} {self.arg}".strip()


class _Taint:
    """Which call-time names a sub-expression reads, on one branch."""

    def __init__(self, spec: ElaboratedSpec, symbolic: set[str]):
        self.spec = spec
        self.symbolic = symbolic

    def reads(self, e: Any, loops: Mapping[str, set[str]] | None = None) -> set[str]:
        """The call-time names `e` reads; a comprehension variable reads what the sequence
        it ranges over reads. `len(...)` reads nothing: a sequence's length is static."""
        out: set[str] = set()

        def go(n: Any, lp: Mapping[str, set[str]]) -> None:
            if n is None:
                return
            if isinstance(n, Name):
                if n.id in lp:
                    out.update(lp[n.id])
                elif n.id in self.symbolic:
                    out.add(n.id)
                return
            if isinstance(n, Call) and n.func == "len":
                return
            if isinstance(n, GenExp):
                before = set(out)
                out.clear()
                go(n.iter, lp)
                it = set(out)
                out.update(before)
                go(n.elt, {**lp, n.var: it})
                return
            for c in children(n):
                go(c, lp)

        go(e, dict(loops or {}))
        return out


class _Scanner:
    def __init__(self, spec: ElaboratedSpec, taint: _Taint):
        self.spec = spec
        self.taint = taint

    def scan(self, e: Any) -> list[Finding]:
        out: list[Finding] = []
        self._scan(e, {}, out)
        return out

    def reads(self, e: Any, loops: Mapping[str, set[str]]) -> set[str]:
        return self.taint.reads(e, loops)

    def _scan(self, e: Any, loops: dict[str, set[str]], out: list[Finding]) -> None:
        if e is None:
            return
        if isinstance(e, GenExp):
            self._scan(e.iter, loops, out)
            self._scan(e.elt, {**loops, e.var: self.reads(e.iter, loops)}, out)
            return
        if isinstance(e, IfExp):
            r = self.reads(e.test, loops)
            if r:  # rule 1
                out.append(Finding("conditional", e, tuple(sorted(r))))
        elif isinstance(e, Compare):
            left = e.left
            for op, right in zip(e.ops, e.comparators):
                r = self.reads(left, loops) | self.reads(right, loops)
                if r and op in ("in", "not in"):  # rule 2
                    out.append(Finding("membership", e, tuple(sorted(r))))
                    break
                if r and (self.is_seq(left) or self.is_seq(right)):  # rule 3
                    out.append(Finding("sequence-compare", e, tuple(sorted(r))))
                    break
                left = right
        elif isinstance(e, Subscript):
            r = self.reads(e.index, loops)
            if r:  # rule 6
                out.append(Finding("index", e, tuple(sorted(r))))
        elif isinstance(e, Call) and e.func in PRIMITIVES:
            prim = PRIMITIVES[e.func]
            bound = self.bind(prim, e)
            r = set().union(*(self.reads(a, loops) for _, a in bound)) if bound else set()
            if r and not prim.symint_safe:  # rule 4
                out.append(Finding("primitive", e, tuple(sorted(r)), func=e.func))
            elif r:  # rule 5
                for pname, arg in bound:
                    ra = self.reads(arg, loops)
                    if ra and pname in CONCRETE_ARGS.get(e.func, ()):
                        out.append(Finding("concrete-argument", e, tuple(sorted(ra)),
                                           func=e.func, arg=pname))
        for c in children(e):
            self._scan(c, loops, out)

    @staticmethod
    def bind(prim, call: Call) -> list[tuple[str, Expr]]:
        positional = [p for p in prim.params if not p.keyword_only]
        out = []
        if prim.variadic:
            return [(positional[0].name, a) for a in call.args] if positional else []
        for p, a in zip(positional, call.args):
            out.append((p.name, a))
        out.extend(call.kwargs)
        return out

    def is_seq(self, e: Any) -> bool:
        if isinstance(e, TupleExpr):
            return True
        if isinstance(e, Name):
            k = self.spec.kind_of(e.id)
            return isinstance(K.unwrap_maybe(k), K.SeqK) if k is not None else False
        if isinstance(e, Attr) and e.attr == "value":
            return self.is_seq(e.value)
        if isinstance(e, Subscript):
            return isinstance(e.index, Slice)
        if isinstance(e, Call):
            return e.func in _SEQ_RESULTS
        if isinstance(e, IfExp):
            return self.is_seq(e.body) or self.is_seq(e.orelse)
        return False


def call_time_names(spec: ElaboratedSpec, b: P.Branch) -> dict[str, str]:
    """The call-time (SymInt) names of branch `b`, each with where its value comes from."""
    sources: dict[str, str] = {}
    roles = {"input": "input", "ctensor": "construction-time tensor", "output": "output"}
    for s in b.call:
        if s.kind in (P.SOLVE_AXIS, P.SOLVE_SPLAT) and s.expr is not None:
            t = spec.tensors.get(s.target)
            role = roles.get(t.role, "tensor") if t is not None else "tensor"
            what = "axes from" if s.kind == P.SOLVE_SPLAT else "axis"
            sources[s.expr.id] = f"solved at call time from {role} {s.target}, {what} {s.axis}"
        elif s.kind == P.LET and s.expr is not None:
            read = _Taint(spec, set(sources)).reads(s.expr)
            if read:
                sources[s.target] = "let computed at call time from " + ", ".join(sorted(read))
    return sources


def call_time_expressions(spec: ElaboratedSpec, b: P.Branch) -> Iterable[tuple[str, str, Any]]:
    """(declaration path, what it is, expression) of everything a call evaluates."""
    roles = {"input": "input", "ctensor": "construction-time tensor", "output": "output"}
    for s in b.call:
        t = spec.tensors.get(s.target)
        role = roles.get(t.role, "tensor") if t is not None else ""
        if s.kind == P.LET:
            yield s.decl, f"let `{s.target}`", s.expr
        elif s.kind in (P.RULE, P.DOMAIN):
            yield s.decl, "refinement", s.expr
        elif s.kind == P.CHECK_AXIS:
            yield s.decl, f"axis {s.axis} of {role} `{s.target}`", s.expr
        elif s.kind == P.SOLVE_AXIS:
            for part, e in (("offset", s.offset), ("coefficient", s.coeff)):
                if e is not None:
                    yield s.decl, f"the {part} of axis {s.axis} of {role} `{s.target}`", e
        elif s.kind == P.RANK:
            for e in s.splats:
                yield s.decl, f"the rank of {role} `{s.target}`", e
        elif s.kind == P.CHECK_DTYPE:
            yield s.decl, f"the dtype of {role} `{s.target}`", s.expr
        elif s.kind == P.NONNEG:
            yield s.decl, f"axis {s.axis} of output `{s.target}`", s.expr
    for o in b.outputs:
        for i, ax in enumerate(o.shape.axes):
            e = ax.value if isinstance(ax, Splat) else ax
            yield o.decl + ".shape", f"the shape of output `{o.name}`", e
        yield o.decl + ".dtype", f"the dtype of output `{o.name}`", o.dtype


def declared_text(spec: ElaboratedSpec, loaded: Any, path: str) -> str | None:
    """The expression a declaration path names, as the spec writes it."""
    parts = path.split(".")
    if parts[:2] == ["signature", "let"] and parts[2] in spec.lets:
        return spec.lets[parts[2]].text
    for r in spec.rules:
        if r.path == path:
            return r.text
    if parts[0] == "signature" and len(parts) >= 4 and parts[1] in ("inputs", "outputs", "params"):
        t = spec.tensors.get(parts[2])
        if t is not None and parts[3] == "shape":
            return print_shape(t.shape)
        if t is not None and parts[3] == "dtype":
            return print_expr(t.dtype)
    return None


def _describe(kind: str, parts: list[str], func: str = "", arg: str = "") -> str:
    ps = ", ".join(f"`{p}`" for p in parts)
    many = len(parts) > 1
    if kind == "conditional":
        return (f"the conditional{'s' if many else ''} {ps} need{'' if many else 's'} the "
                f"truth value of {'their tests' if many else 'its test'}, a SymBool, to "
                f"choose {'their values' if many else 'its value'}")
    if kind == "membership":
        return (f"the membership test{'s' if many else ''} {ps} compare{'' if many else 's'} "
                "call-time sizes element by element and convert each comparison (a SymBool) "
                "to a Python bool: `in` has no symbolic form")
    if kind == "sequence-compare":
        return (f"the comparison{'s' if many else ''} of sequences {ps} convert"
                f"{'' if many else 's'} each element comparison (a SymBool) to a Python bool "
                "to decide whether to go on")
    if kind == "index":
        return (f"{ps} index{'' if many else 'es'} with a call-time size, which must become "
                "a Python int (the graph specializes on its value)")
    if kind == "primitive":
        return (f"{ps} call{'' if many else 's'} `{func}` on call-time sizes, and `{func}` is "
                "not SymInt-safe (the primitive registry: its implementation needs the truth "
                "value of comparisons between sizes, or sizes as Python values)")
    return (f"{ps} pass{'' if many else 'es'} a call-time value as `{arg}`, which `{func}` "
            "tests or indexes with as a Python value")


def check_symint(spec: ElaboratedSpec, loaded: Any, plan: P.Plan) -> list[Diagnostic]:
    """The `symint` check of one spec over its proven plan."""
    if not spec.inputs or spec.composition is not None:
        return []  # no compile boundary
    from opspec.solver.discriminants import describe_value

    # (path, group) -> what, expression, parts, reads, first branch, sources, first finding
    groups: dict[tuple, dict[str, Any]] = {}
    for b in plan.branches:
        if b.excluded_by is not None:
            continue
        sources = call_time_names(spec, b)
        if not sources:
            continue
        taint = _Taint(spec, set(sources))
        scanner = _Scanner(spec, taint)
        for path, what, e in call_time_expressions(spec, b):
            if e is None or not taint.reads(e):
                continue
            for f in scanner.scan(e):
                g = groups.setdefault((path, f.group), {
                    "what": what, "expr": e, "parts": [], "reads": set(), "branch": b,
                    "sources": sources, "finding": f})
                printed = print_expr(f.part)
                if printed not in g["parts"]:
                    g["parts"].append(printed)
                if g["branch"] is b:
                    g["reads"].update(f.reads)
    diags: list[Diagnostic] = []
    for (path, _), g in groups.items():
        f: Finding = g["finding"]
        text = declared_text(spec, loaded, path)
        shown = f"`{text}`" if text is not None else f"`{print_expr(g['expr'])}`"
        cex: dict[str, Any] = {k: describe_value(v) for k, v in g["branch"].combo}
        for n in sorted(g["reads"]):
            if n in g["sources"]:
                cex[n] = g["sources"][n]
        diags.append(Diagnostic(
            CHECK, f"{shown} ({g['what']}) is evaluated at call time, on SymInts under "
            f"torch.compile: {_describe(f.kind, g['parts'], f.func, f.arg)}",
            op=spec.name, path=path, pos=loaded.pos(path) if loaded is not None else None,
            severity=_severity(f), counterexample=cex or None, hint=_hint(f)))
    return diags


#: Primitives whose implementation needs a concrete Python int (or runs only at workload
#: instantiation): on a SymInt they fail instead of adding a guard.
UNEVALUABLE = frozenset({"balanced_sizes", "repeat"} | {
    n for n, p in PRIMITIVES.items() if p.role in ("generator", "requires")})


def _severity(f: Finding) -> Severity:
    if f.kind == "primitive" and f.func in UNEVALUABLE:
        return Severity.ERROR
    return Severity.WARNING


def _roots(names: Iterable[str], sources: Mapping[str, str]) -> list[str]:
    """The call-time names a part reads, in a stable order (lets first, then what they read
    is already in the let's source)."""
    return sorted(n for n in names if n in sources)


def _hint(f: Finding) -> str | None:
    if f.kind == "sequence-compare":
        return "compare element by element, e.g. `S[0] == M and S[1] == 1`"
    if f.kind == "membership":
        return "write the alternatives with `or`, e.g. `M == 1 or M == 2`"
    if f.kind == "primitive":
        return ("keep the expressions of an op with a compile boundary to SymInt-safe "
                "primitives, comparisons, `not`/`and`/`or` and `+ - * // %`")
    return None
