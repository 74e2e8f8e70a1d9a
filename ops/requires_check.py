"""`requires` on a call's contents: an opt-in check for debugging (`OPSPEC_CHECK_REQUIRES=1`).

A metadata tensor's `requires` (`prefix_offsets(total_q)`, `sums_to(M)`) constrain its
contents. The caller guarantees them; the op never reads contents to check them, because
that means copying the tensor to the host on every call. A wrong `cu_seqlens` then gives
wrong results, or a fault, far from its cause. With the setting on, each eager call whose
signature checks passed evaluates every predicate of every metadata tensor it was given,
on the tensor's contents and the call's indices and parameters, before any kernel runs,
and raises `SignatureError` naming the tensor, the predicate, the values it read and
where the contents break it. In a compiled graph the operator's implementation checks
them when the graph runs (tracing sees no contents), except while a CUDA graph is
captured, where nothing may be read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.errors import EvaluationError, SignatureError
from opspec.schema.evaluate import evaluate_requires
from opspec.schema.expr import Call, Expr, free_names
from opspec.schema.printer import print_expr
from opspec.schema.value_check import show_value


@dataclass(frozen=True)
class RequiresCheck:
    """One predicate of one input: where it is declared and how it reads."""

    tensor: str
    expr: Expr
    path: str           # `signature.inputs.<tensor>.requires.<j>`
    names: tuple[str, ...] = ()   # the names it reads, sorted

    @property
    def text(self) -> str:
        return print_expr(self.expr)


def requires_checks(spec: ElaboratedSpec) -> tuple[RequiresCheck, ...]:
    """Every `requires` predicate of the spec's call-time inputs, in declaration order."""
    return tuple(RequiresCheck(n, e, f"{t.path}.requires.{j}", tuple(sorted(free_names(e))))
                 for n, t in spec.inputs.items() for j, e in enumerate(t.requires))


def check_requires(op: Any, checks: tuple[RequiresCheck, ...], tensors: Mapping[str, Any],
                   indices: Mapping[str, Any], params: Mapping[str, Any], where) -> None:
    """Raise `SignatureError` at the first predicate the given contents break. `tensors`
    maps each input to its tensor (None when omitted); `where(path)` places a declaration."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    env: dict[str, Any] = {**params, **indices}
    contents: dict[str, Any] = {}

    def read_back(n: str) -> Any:
        if n not in contents:
            t = tensors[n]
            contents[n] = None if t is None or t.device.type == "meta" else \
                t.detach().cpu().tolist()
        return contents[n]

    name = type(op).__name__
    for c in checks:
        t = tensors.get(c.tensor)
        if t is None or t.device.type == "meta":
            continue  # an omitted optional input, or one without contents, has nothing to check
        # Another metadata tensor an argument names is read by its contents (None when
        # omitted, as `present()` reads it).
        for n in c.names:
            if n in tensors:
                env[n] = read_back(n)
        read_back(c.tensor)
        try:
            holds = evaluate_requires(c.expr, contents[c.tensor], env)
        except EvaluationError as exc:
            raise SignatureError(f"{name}: input {c.tensor}: `requires` `{c.text}` cannot be "
                                 f"evaluated on its contents: {exc}{where(c.path)}") from None
        if not holds:
            shown = ", ".join(f"{n}={show_value(env[n])}" for n in c.names
                              if n in env and n not in tensors)
            raise SignatureError(
                f"{name}: input {c.tensor}: `requires` `{c.text}` does not hold"
                + (f" with {shown}" if shown else "")
                + f"; {_breach(c.expr, contents[c.tensor], env)}{where(c.path)}")


def _breach(expr: Expr, contents: Any, env: Mapping[str, Any]) -> str:
    """What about the contents breaks the predicate, as far as a plain reading shows."""
    flat = contents if isinstance(contents, list) else [contents]
    if isinstance(expr, Call) and expr.func in ("prefix_offsets", "max_segment") and \
            all(isinstance(v, int) for v in flat):
        if not flat:
            return "the tensor is empty"
        steps = [b - a for a, b in zip(flat, flat[1:])]
        if expr.func == "prefix_offsets":
            if flat[0] != 0:
                return f"it starts at {flat[0]}, not 0"
            down = next((i for i, s in enumerate(steps) if s < 0), None)
            if down is not None:
                return (f"it decreases from index {down} to {down + 1} ({flat[down]} to "
                        f"{flat[down + 1]})")
            return f"it ends at {flat[-1]}"
        if steps:
            i = max(range(len(steps)), key=lambda k: steps[k])
            return (f"its largest step, {steps[i]}, is from index {i} to {i + 1} ({flat[i]} "
                    f"to {flat[i + 1]})")
    if isinstance(expr, Call) and expr.func == "sums_to" and \
            all(isinstance(v, (int, float)) for v in flat):
        return f"its elements sum to {sum(flat)}"
    return f"contents {show_value(contents)}"
