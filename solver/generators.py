"""Running a workload row's generators: the one driver the `workload` check, the `effect`
check's byte sample and the runtime's instantiation (``opspec.ops.workloads``) share, so all
three draw the same contents and solve the same indices.

A generator (`values: prefix_sum(...)`) runs once its arguments are known, in passes over
the generated tensors in declaration order: one generator's result may give another's
argument (`paged_block_table(B, W, NP)` waits for `cache_seqlens: [B]`, declared after it,
to solve B). After each run its result shape is unified with the declared shape (Table 1:
an unknown `Seq[Int]` splat is bound at once, an axis `M` or `a * M + e` in one unknown
index is solved, every other axis is checked); the indices a pass solves are bound after
the pass, so a generator reading one runs in the next. Lets are bound as soon as what they
read is known, before each pass.

Torch-free: contents are plain Python values. Callers turn the exceptions below into their
own reports (a diagnostic on the row, or a ``WorkloadError``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from opspec.schema import kinds as K
from opspec.schema.elaborate import ElaboratedSpec, TensorDecl
from opspec.schema.evaluate import evaluate
from opspec.schema.expr import Call, Expr, Name, ShapeList, Splat, free_names
from opspec.schema.primitives import PRIMITIVES
from opspec.schema.printer import print_expr
from opspec.schema.values import is_int
from opspec.solver import plan as P
from opspec.solver.fold import Folder
from opspec.solver.order import linear

__all__ = [
    "GeneratedAxisError",
    "GeneratorError",
    "GeneratorRun",
    "branch_program",
    "generated_shape",
    "generated_tensors",
    "nested_shape",
    "run_generators",
    "settle_generated_axes",
    "settle_lets",
    "unify_generated",
    "unknown_symbols",
]


def unknown_symbols(spec: ElaboratedSpec, e: Expr, env: Mapping[str, Any]) -> set[str]:
    """The spec's symbols that `e` reads and `env` does not bind yet."""
    return {n for n in free_names(e) if n not in env and spec.kind_of(n) is not None}


def generated_tensors(spec: ElaboratedSpec, branch: P.Branch) -> list[TensorDecl]:
    """The tensors that a generator makes on `branch`: inputs with `values` that exist
    there, in declaration order."""
    present = {n for n, _, _ in branch.tensors}
    return [t for t in spec.tensors.values()
            if t.values is not None and t.name in present and t.role != "output"]


def branch_program(spec: ElaboratedSpec, branch: P.Branch, folder: Folder | None = None
                   ) -> tuple[list[tuple[str, Expr]], dict[str, Expr]]:
    """The generator calls ``(tensor, call)`` and the lets of `branch`, folded for its
    discriminant values: on the branch where `layout.kind == 'masked'`, the let
    ``E * layout.max_m if layout.kind == 'masked' else M`` is ``E * layout.max_m``, so it
    does not wait for an `M` the row does not give."""
    folder = folder if folder is not None else Folder(spec, dict(branch.combo))
    calls = [(t.name, folder.expr(t.values)) for t in generated_tensors(spec, branch)]
    return calls, {n: folder.expr(d.expr) for n, d in spec.lets.items()}


def settle_lets(spec: ElaboratedSpec, env: dict, lets: Mapping[str, Expr],
                errors: dict[str, str] | None = None) -> bool:
    """Bind in `env` every let of `lets` whose symbols `env` binds and that evaluates; True
    when one was bound. A let that raises is recorded in `errors` (and not tried again)
    where the caller gives it, else left unbound."""
    progress = False
    for n, e in lets.items():
        if n in env or (errors is not None and n in errors) or unknown_symbols(spec, e, env):
            continue
        try:
            env[n] = evaluate(e, env)
            progress = True
        except Exception as exc:
            if errors is not None:
                errors[n] = str(exc)
    return progress


def nested_shape(contents: Any, rank: int) -> tuple[int, ...]:
    """The lengths of the first `rank` levels of nested sequences (fewer where a level is
    not a sequence)."""
    out = []
    v = contents
    for _ in range(rank):
        if not isinstance(v, (list, tuple)):
            break
        out.append(len(v))
        v = v[0] if v else None
    return tuple(out)


def generated_shape(call: Expr, env: Mapping[str, Any], contents: Any) -> tuple:
    """The shape of a generator call's result: its primitive's `shape` function of the
    (evaluated) arguments where it has one, else the nesting of the contents."""
    prim = PRIMITIVES.get(call.func) if isinstance(call, Call) else None
    if prim is None or prim.role != "generator":
        raise ValueError(f"`{print_expr(call)}` is not a generator call")
    if prim.shape is not None:
        args = [evaluate(a, env) for a in call.args]
        kwargs = {k: evaluate(v, env) for k, v in call.kwargs}
        return tuple(int(x) for x in prim.shape(*args, **kwargs))
    return nested_shape(contents, prim.rank or 0)


def _ints(v: Sequence[int]) -> str:
    items = [str(x) for x in v[:8]]
    if len(v) > 8:
        items.append(f"... ({len(v)} items)")
    return "[" + ", ".join(items) + "]"


def unify_generated(spec: ElaboratedSpec, name: str, shape: ShapeList, actual: tuple,
                    env: dict, pending: list) -> str | None:
    """Bind or check the declared `shape` of the generated tensor `name` against the
    generated one, `actual` (Table 1): an unknown `Seq[Int]` splat is bound at once; the
    other axes go to `pending` as ``(name, axis, expr, length)`` for
    :func:`settle_generated_axes`. An error message, or None."""
    axes = shape.axes
    splats = [k for k, a in enumerate(axes) if isinstance(a, Splat)]
    lengths: dict[int, int] = {}
    open_splats = []
    for k in splats:
        try:
            v = evaluate(axes[k].value, env)
            lengths[k] = len(v)
        except Exception:
            open_splats.append(k)
    fixed = len(axes) - len(splats) + sum(lengths.values())
    rest = 0
    if not open_splats:
        if fixed != len(actual):
            return (f"rank {len(actual)}, where the declared shape has rank {fixed}")
    elif len(open_splats) == 1 and isinstance(axes[open_splats[0]].value, Name) and \
            isinstance(spec.forall.get(axes[open_splats[0]].value.id), K.SeqK):
        rest = len(actual) - fixed
        if rest < 0:
            return f"rank {len(actual)}, where the declared shape has rank >= {fixed}"
    else:
        return "more than one splat of the declared shape is unknown"
    pos = 0
    for k, ax in enumerate(axes):
        if isinstance(ax, Splat):
            n = lengths.get(k, rest)
            seg = tuple(actual[pos:pos + n])
            pos += n
            if k in lengths:
                v = tuple(evaluate(ax.value, env))
                if v != seg:
                    return (f"`*{print_expr(ax.value)}` is {_ints(v)}, the generated axes "
                            f"{_ints(seg)}")
            else:
                env[ax.value.id] = seg
            continue
        pending.append((name, k, ax, actual[pos]))
        pos += 1
    return None


class GeneratedAxisError(ValueError):
    """An axis of a generated tensor that its declared shape refuses: ``item`` is the pending
    ``(tensor, axis, expr, length)``; ``reason`` is ``evaluate`` (the axis raises;
    ``detail`` the exception), ``mismatch`` (``detail`` the axis's value) or ``divide``
    (no non-negative integer value of the index ``detail`` gives the length)."""

    def __init__(self, item: tuple, reason: str, detail: Any):
        super().__init__(f"{item[0]} axis {item[1]}: {reason} ({detail})")
        self.item, self.reason, self.detail = item, reason, detail


def settle_generated_axes(spec: ElaboratedSpec, pending: list, env: dict) -> bool:
    """Check the ``pending`` generated axes ``(tensor, axis, expr, length)`` whose indices
    `env` binds, and solve those linear in one unknown integer index (Table 1: ``M``,
    ``a * M + e``), binding it in `env`; settled items leave `pending`. True when an index
    was solved. Raises :class:`GeneratedAxisError`."""
    progress = False
    again = True
    while again:
        again = False
        for item in list(pending):
            t, k, ax, n = item
            unk = unknown_symbols(spec, ax, env)
            if not unk:
                pending.remove(item)
                try:
                    v = evaluate(ax, env)
                except Exception as exc:
                    raise GeneratedAxisError(item, "evaluate", exc) from exc
                if v != n:
                    raise GeneratedAxisError(item, "mismatch", v)
                continue
            if len(unk) != 1:
                continue
            (u,) = unk
            if not isinstance(spec.forall.get(u), K.IntK):
                continue
            lin = linear(ax, u)
            if lin is None:
                continue
            try:
                c, o = evaluate(lin[0], env), evaluate(lin[1], env)
            except Exception:
                continue
            if not (is_int(c) and c > 0 and is_int(o)):
                continue
            pending.remove(item)
            if (n - o) % c != 0 or (n - o) // c < 0:
                raise GeneratedAxisError(item, "divide", u)
            env[u] = (n - o) // c
            progress = again = True
    return progress


class GeneratorError(ValueError):
    """A generator that cannot give its tensor: ``reason`` is ``raises`` (the call raised:
    ``detail`` the exception), ``shape`` (its result's shape cannot be taken: ``detail``
    the exception) or ``unify`` (the result's shape, ``actual``, does not unify with the
    declared one: ``detail`` says why)."""

    def __init__(self, name: str, call: Expr, reason: str, detail: Any,
                 actual: tuple | None = None):
        super().__init__(f"generator of {name}: {reason} ({detail})")
        self.name, self.call, self.reason, self.detail = name, call, reason, detail
        self.actual = actual


@dataclass
class GeneratorRun:
    """What :func:`run_generators` leaves: the contents by tensor, in the order they ran;
    the generators whose arguments never became known; the generated axes never solved
    or checked (``(tensor, axis, expr, length)``)."""

    generated: dict[str, Any] = field(default_factory=dict)
    never_known: list[str] = field(default_factory=list)
    unsolved: list[tuple] = field(default_factory=list)


def run_generators(spec: ElaboratedSpec, calls: Sequence[tuple[str, Expr]],
                   shapes: Mapping[str, ShapeList], env: dict, rng: random.Random,
                   lets: Mapping[str, Expr], let_errors: dict[str, str] | None = None
                   ) -> GeneratorRun:
    """Run each generator call ``(tensor, call)`` of `calls` once its arguments are known
    (see the module docstring), binding its contents and the indices its shape solves in
    `env`, and the `lets` (:func:`branch_program`'s) as :func:`settle_lets` can, with
    `let_errors`. Raises :class:`GeneratorError` and :class:`GeneratedAxisError`; leaves
    unmet arguments and unsolved axes to the caller."""
    todo = list(calls)
    run = GeneratorRun()
    progress = True
    while progress:
        progress = settle_lets(spec, env, lets, let_errors)
        for item in list(todo):
            name, call = item
            if unknown_symbols(spec, call, env):
                continue
            todo.remove(item)
            progress = True
            try:
                contents = evaluate(call, env, rng=rng)
            except Exception as exc:
                raise GeneratorError(name, call, "raises", exc) from exc
            try:
                actual = generated_shape(call, env, contents)
            except Exception as exc:
                raise GeneratorError(name, call, "shape", exc) from exc
            run.generated[name] = contents
            env[name] = contents
            err = unify_generated(spec, name, shapes[name], actual, env, run.unsolved)
            if err is not None:
                raise GeneratorError(name, call, "unify", err, actual)
        # The indices this pass's shapes solve are bound now, for the next pass.
        if settle_generated_axes(spec, run.unsolved, env):
            progress = True
    settle_lets(spec, env, lets, let_errors)
    run.never_known = [name for name, _ in todo]
    return run
