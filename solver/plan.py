"""The Plan: the prover's output for one spec, the one object the runtime lowers.

Per combination of discriminant values (a `Branch`), the ordered steps of construction and
of a call, each carrying the declaration it enforces. Plans are plain frozen data: they
print (`format_plan`), pickle, and compare equal when built from equal specs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opspec.schema.diagnostics import Pos
from opspec.schema.expr import Expr, ShapeList, Splat
from opspec.schema.printer import print_expr

# Step kinds, in the order a call runs them (seed § 1).
PRESENCE = "presence"        # which optional tensors are passed (call) / held (construction)
DOMAIN = "domain"            # a refinement over discriminants only
BRANCH = "branch"            # a type-family case selected
RANK = "rank"                # a tensor's rank equals the declared rank (or a minimum)
SOLVE_AXIS = "solve-axis"    # index := axis length (optionally (len - e) / a)
SOLVE_SPLAT = "solve-splat"  # Shape index := a slice of the actual shape
SOLVE_DTYPE = "solve-dtype"  # DType index := actual dtype
CHECK_AXIS = "check-axis"    # axis length equals the declared expression
CHECK_DTYPE = "check-dtype"  # dtype equals the declared dtype expression
NONNEG = "nonneg"            # an axis expression that is not a Dim is >= 0
LET = "let"                  # a let becomes known
RULE = "rule"                # a refinement holds
DEVICE = "device"            # device rules (`device: cpu`, `contiguous: true`)
OUT_BUFFER = "out-buffer"    # a passed `out` has the output's type
OUTPUT = "output"            # an output's type

CONSTRUCTION, CALL = "construction", "call"


@dataclass(frozen=True)
class Step:
    kind: str
    decl: str                       # declaration path it enforces
    target: str = ""                # the tensor or name it reads or binds
    expr: Expr | None = None        # the declared expression (axis, dtype, rule, let)
    axis: int | None = None         # axis position (from the left; see `from_end`)
    from_end: bool = False          # axis counted from the end (after a splat)
    coeff: Expr | None = None       # SOLVE_AXIS: index := (len - offset) // coeff
    offset: Expr | None = None
    stop: int | None = None         # SOLVE_SPLAT: slice [axis, rank - stop)
    rank: int | None = None         # RANK: number of fixed axes
    splats: tuple[Expr, ...] = ()   # RANK: splat expressions whose lengths add to it
    pos: Pos | None = None

    def describe(self, shape: ShapeList | None = None) -> str:
        """The step as one line. `shape`, the target's declared shape on the branch, places
        the axes that follow a splat (`input.shape[len(B):]`); without it an axis is its
        position among the declared terms."""
        e = print_expr(self.expr) if self.expr is not None else ""
        where = ""
        if self.axis is not None:
            where = f" axis {'-' if self.from_end else ''}{self.axis + (1 if self.from_end else 0)}"
        if shape is not None and self.axis is not None and self.axis >= 0 and \
                self.kind in (SOLVE_AXIS, SOLVE_SPLAT, CHECK_AXIS) and \
                self.axis < len(shape.axes) and (
                    isinstance(shape.axes[self.axis], Splat) or
                    any(isinstance(a, Splat) for a in shape.axes[:self.axis])):
            return self._describe_placed(e, shape)
        if self.kind == SOLVE_AXIS:
            if self.coeff is None and self.offset is None:
                return f"{e} := {self.target}{where}"
            return f"{e} := {self._solved(f'{self.target}{where}')}"
        if self.kind == SOLVE_SPLAT:
            return f"{e} := {self.target}.shape[{self.axis}:{'' if not self.stop else -self.stop}]"
        if self.kind == SOLVE_DTYPE:
            return f"{e} := {self.target}.dtype"
        if self.kind == CHECK_AXIS:
            return f"{self.target}{where} == {e}"
        if self.kind == CHECK_DTYPE:
            return f"{self.target}.dtype == {e}"
        if self.kind == RANK:
            total = length_text(self.rank, _lens(self.splats))
            # axis == -1 marks a minimum: an unknown splat takes the remaining axes
            return f"{self.target}.dim() {'>=' if self.axis == -1 else '=='} {total}"
        if self.kind == LET:
            return f"{self.target} = {e}"
        if self.kind in (RULE, DOMAIN, NONNEG):
            return f"{e}" if self.kind != NONNEG else f"{e} >= 0"
        if self.kind == PRESENCE:
            return f"{self.target} {'passed' if self.expr is None else print_expr(self.expr)}"
        return f"{self.kind} {self.target} {e}".strip()


    def _describe_placed(self, e: str, shape: ShapeList) -> str:
        """An axis or a splat of `shape` at its place in the actual shape: after a splat
        the place is a length (`input.shape[len(B)]`)."""
        axes, i, t = shape.axes, self.axis, self.target
        term = axes[i]
        before, after = axes[:i], axes[i + 1:]
        start = _terms_length(before)
        if isinstance(term, Splat):
            if self.kind == SOLVE_SPLAT:  # all the axes the others leave
                rest = _terms_length(after)
                stop = "" if rest == "0" else f"{t}.dim() - {_paren(rest)}"
            else:
                stop = f"{start} + len({print_expr(term.value)})" if start != "0" else \
                    f"len({print_expr(term.value)})"
            part = f"{t}.shape[{'' if start == '0' else start}:{stop}]"
            part = f"{t}.shape" if part.endswith("[:]") else part
            return f"{e} := {part}" if self.kind == SOLVE_SPLAT else f"{part} == {e}"
        part = f"{t}.shape[{start}]"
        if self.kind == SOLVE_AXIS:
            if self.coeff is None and self.offset is None:
                return f"{e} := {part}"
            return f"{e} := {self._solved(part)}"
        return f"{part} == {e}"

    def _solved(self, length: str) -> str:
        """`(length - offset) / coeff`, exact: an index solved from `a * M + e`."""
        o = print_expr(self.offset) if self.offset is not None else "0"
        c = print_expr(self.coeff) if self.coeff is not None else "1"
        num = length if o == "0" else f"({length} - {o})"
        return (num if c == "1" else f"{num} / {c}") + "   [exact, >= 0]"


def length_text(fixed: int, lens: list[str]) -> str:
    """`2 + len(B) + len(S)`: a count of fixed axes plus the lengths of splats, as source
    (a zero count left out when a length follows). The plan's text and the generated code
    both write their axis positions with it."""
    return " + ".join(([str(fixed)] if fixed or not lens else []) + lens)


def _lens(splats) -> list[str]:
    return [f"len({print_expr(s)})" for s in splats]


def _terms_length(terms) -> str:
    """How many axes the shape terms `terms` span."""
    return length_text(sum(not isinstance(a, Splat) for a in terms),
                       _lens(a.value for a in terms if isinstance(a, Splat)))


def _paren(text: str) -> str:
    return f"({text})" if " " in text else text


@dataclass(frozen=True)
class OutputType:
    name: str
    dtype: Expr
    shape: ShapeList
    alias: str | None = None
    buffer: str | None = None
    decl: str = ""

    def describe(self) -> str:
        axes = ", ".join(("*" + print_expr(a.value)) if isinstance(a, Splat) else print_expr(a)
                         for a in self.shape.axes)
        return f"{self.name}: Tensor[{print_expr(self.dtype)}, [{axes}]]"


@dataclass(frozen=True)
class Branch:
    """One combination of discriminant values and what construction and a call do on it."""

    combo: tuple[tuple[str, Any], ...]
    excluded_by: str | None = None          # declaration of a domain restriction excluding it
    present: tuple[str, ...] = ()           # tensors that exist on this branch
    written: tuple[str, ...] = ()           # inputs written on this branch
    families: tuple[tuple[str, int], ...] = ()  # (family name, case index) selected
    construction: tuple[Step, ...] = ()
    call: tuple[Step, ...] = ()
    outputs: tuple[OutputType, ...] = ()
    used: tuple[str, ...] = ()              # indices used on this branch
    has_out: bool = False
    #: every tensor that exists on the branch: (name, resolved shape, folded dtype)
    tensors: tuple[tuple[str, ShapeList, Expr], ...] = ()

    @property
    def key(self) -> tuple:
        return self.combo

    def describe_combo(self) -> str:
        from opspec.solver.discriminants import describe_value
        if not self.combo:
            return "(no discriminants)"
        return ", ".join(f"{k}={describe_value(v)}" for k, v in self.combo)


@dataclass(frozen=True)
class Plan:
    op: str
    file: str
    spec_hash: str
    discriminants: tuple[str, ...]
    branches: tuple[Branch, ...] = field(default_factory=tuple)
    #: the elaborated spec the plan was proven from (declarations, kinds, effects)
    spec: Any = field(default=None, repr=False, compare=False)

    def branch_for(self, combo: dict[str, Any]) -> Branch | None:
        key = tuple((k, combo.get(k)) for k in self.discriminants)
        for b in self.branches:
            if tuple((k, dict(b.combo).get(k)) for k in self.discriminants) == key:
                return b
        return None


def format_plan(plan: Plan) -> str:
    lines = [f"plan for {plan.op} ({len(plan.branches)} branch(es))"]
    for b in plan.branches:
        head = f"  branch {b.describe_combo()}"
        if b.excluded_by:
            lines.append(f"{head}: excluded by {b.excluded_by}")
            continue
        lines.append(head + ":")
        if b.families:
            lines.append("    families: " + ", ".join(f"{f} case {i}" for f, i in b.families))
        for phase, steps in ((CONSTRUCTION, b.construction), (CALL, b.call)):
            if steps:
                lines.append(f"    {phase}:")
                shapes = {n: shape for n, shape, _ in b.tensors}
                for i, s in enumerate(steps, 1):
                    lines.append(f"      {i:2d}. [{s.kind}] {s.describe(shapes.get(s.target))}"
                                 f"    ({s.decl})")
        for o in b.outputs:
            lines.append(f"    output {o.describe()}")
    return "\n".join(lines)
