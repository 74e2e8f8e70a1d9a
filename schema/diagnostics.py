"""Diagnostics: problems are records, collected per spec, then rendered by one reporter."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: Stable check ids of `opspec load` and `opspec prove` (the loader, the elaborator, the
#: prover, and the code checks of the bundled ops).
PROVE_CHECK_IDS: tuple[str, ...] = (
    "parse", "name", "kind", "language", "rejected-form", "family-gap", "family-overlap",
    "family-cycle", "unsolvable", "ambiguous", "let-cycle", "workload", "symint", "effect",
    "dead-branch", "code", "unknown", "combos-limit",
    # Warnings beyond the reference: an output axis that can be negative, a divisor that can be <= 0.
    "negative-axis", "divisor",
    # Beyond the reference: an op's dispatch regions overlap without precedence, or miss calls.
    "dispatch",
)

#: Stable check ids of `opspec diff` findings (`opspec.solver.diff.Finding`): each names
#: how a NEW spec breaks calls that the OLD one accepts.
DIFF_CHECK_IDS: tuple[str, ...] = (
    "removed-op", "param-removed", "param-renamed", "param-moved", "param-required",
    "param-default", "param-type", "input-removed", "input-renamed", "input-moved",
    "input-required", "input-rejected", "input-placement", "output-changed", "rejected",
    "output-type", "broken-spec", "undecided",
)

#: Every check id any command emits. A diagnostic's `check` is always one of these.
CHECK_IDS: tuple[str, ...] = PROVE_CHECK_IDS + DIFF_CHECK_IDS

class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    ADVISORY = "advisory"


@dataclass(frozen=True)
class Pos:
    """A place in a source file: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a spec.

    `path` is the declaration path inside the op, e.g. `signature.inputs.b.shape`.
    `counterexample` maps names to concrete values (plain data: ints, strings, lists).
    """

    check: str
    message: str
    op: str | None = None
    path: str | None = None
    pos: Pos | None = None
    severity: Severity = Severity.ERROR
    counterexample: Mapping[str, Any] | None = field(default=None, compare=False)
    hint: str | None = None

    def __post_init__(self) -> None:
        if self.check not in CHECK_IDS:
            raise ValueError(f"unknown check id {self.check!r}; known: {CHECK_IDS}")

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def where(self) -> str:
        parts = []
        if self.pos is not None:
            parts.append(str(self.pos))
        if self.op:
            parts.append(self.op + (f" {self.path}" if self.path else ""))
        elif self.path:
            parts.append(self.path)
        return ": ".join(parts)

    def render(self) -> str:
        head = f"{self.where()}: " if self.where() else ""
        text = f"{head}{self.severity.value}[{self.check}]: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        if self.counterexample:
            text += "\n    counterexample: " + ", ".join(
                f"{k}={_fmt(v)}" for k, v in self.counterexample.items())
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "check": self.check,
            "op": self.op,
            "path": self.path,
            "file": self.pos.file if self.pos else None,
            "line": self.pos.line if self.pos else None,
            "column": self.pos.column if self.pos else None,
            "message": self.message,
            "hint": self.hint,
            "counterexample": _jsonable(self.counterexample) if self.counterexample else None,
        }


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def errors(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.is_error]
