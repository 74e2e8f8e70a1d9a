"""Workloads: rows of a spec become cases, and cases become input tensors.

A row fixes parameter values, index values, which optional tensors are passed and (per
`dtype_cases` item) the dtype indices; one `Case` per dtype case, with the id of reference
§5.1 (label, then each dtype value in `forall` order, then dtype parameters in `params`
order, joined by `-`). `Case.inputs(device)` instantiates the call: metadata tensors from
their generators (deterministic, seeded), the other indices they determine solved from the
generated shapes, `requires` checked on the generated values, and random contiguous data
for every other tensor. On the meta device only shapes and dtypes are made.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch

from opspec.schema import kinds as K
from opspec.schema.errors import OpspecError
from opspec.schema.evaluate import evaluate, evaluate_axes, evaluate_requires
from opspec.schema.parse import parse_expr
from opspec.schema.printer import print_expr
from opspec.schema.primitives import WORKLOAD_SEED
from opspec.schema.values import ADTValue, to_tuple
from opspec.solver.generators import (GeneratedAxisError, GeneratorError, branch_program,
                                      run_generators, unknown_symbols)


_DTYPE_CONSTANTS = {n: n for n in K.DTYPES}


class WorkloadError(OpspecError, ValueError):
    """A workload row cannot be instantiated."""


@dataclass(frozen=True)
class Case:
    op: str
    id: str
    label: str
    params: dict[str, Any]            # constructor keyword arguments (dtype names as torch dtypes)
    values: dict[str, Any]            # indices and parameters as the row gives them
    dtypes: dict[str, str]            # dtype indices of this case
    some: tuple[str, ...] = ()
    row: int = 0
    _spec: Any = field(default=None, repr=False, compare=False)
    _plan: Any = field(default=None, repr=False, compare=False)

    def construct(self, op_cls: type) -> Any:
        return op_cls(**self.params)

    def inputs(self, device: str | torch.device = "cpu", *, seed: int = WORKLOAD_SEED) -> tuple:
        return instantiate(self, torch.device(device), seed)


def cases(op_cls_or_spec: Any, plan: Any = None) -> list[Case]:
    """Every case of every workload row of an op class, or of an `ElaboratedSpec` with the
    `Plan` the prover gave it (`SpecResult.plan`; without one the cases have ids and values
    but cannot be instantiated)."""
    if hasattr(op_cls_or_spec, "_info"):
        info = op_cls_or_spec._info()
        spec, plan = info.spec, info.plan
    else:
        spec = op_cls_or_spec
    out: list[Case] = []
    dtype_params = [n for n, p in spec.params.items() if isinstance(K.unwrap_maybe(p.kind), K.DTypeK)]
    for r, row in enumerate(spec.workloads):
        values = {k: _row_value(spec, k, v) for k, v in row.values.items()}
        params = {}
        for n, p in spec.params.items():
            if n in values:
                params[n] = _param_value(values[n], p.kind)
        for dc in (row.dtype_cases or [{}]):
            parts = [row.label] + [dc[n] for n in spec.forall if n in dc]
            parts += [str(values[n]) for n in dtype_params if n in values and values[n] is not None]
            out.append(Case(spec.name, "-".join(parts), row.label, params, values, dict(dc),
                            tuple(row.some), r, spec, plan))
    return out


def _row_value(spec, name: str, v: Any) -> Any:
    """A row value as the language sees it: a sequence written as a value primitive call
    (`"repeat(512, 8)"`) is evaluated; lists become tuples."""
    kind = spec.forall.get(name) or (spec.params[name].kind if name in spec.params else None)
    if isinstance(v, str) and isinstance(K.unwrap_maybe(kind), K.SeqK):
        try:
            return to_tuple(evaluate(parse_expr(v), {}))
        except Exception as exc:
            raise WorkloadError(f"{spec.name}: workload value {name}: `{v}` raises {exc}") from exc
    return to_tuple(v)


def _param_value(v: Any, kind: K.Kind) -> Any:
    inner = K.unwrap_maybe(kind)
    if v is None:
        return None
    if isinstance(inner, K.DTypeK) and isinstance(v, str):
        return getattr(torch, v)
    if isinstance(inner, K.ADTK) and isinstance(v, dict) and len(v) == 1:
        (ctor, fields), = v.items()
        return ADTValue.of(inner.name, ctor, fields if isinstance(fields, dict) else {})
    if isinstance(v, tuple) and isinstance(inner, K.SeqK):
        return list(v)
    return v


def _combo_of(case: Case, spec, plan) -> dict[str, Any]:
    combo = {}
    for key in plan.discriminants:
        if key.startswith("present("):
            n = key[len("present("):-1]
            if n in spec.params:
                v = case.values.get(n, spec.params[n].default)
                combo[key] = v is not None
            elif n == "out":
                combo[key] = False
            else:
                combo[key] = n in case.some
        else:
            p = spec.params[key]
            v = case.values.get(key, p.default)
            combo[key] = _param_value(v, p.kind) if isinstance(v, dict) else v
    return combo


def branch_of(case: Case):
    spec, plan = case._spec, case._plan
    if plan is None:
        raise WorkloadError(f"{case.op}: case {case.id} has no proven plan to instantiate from")
    combo = _combo_of(case, spec, plan)
    for b in plan.branches:
        bc = dict(b.combo)
        if all(_eq(bc.get(k), v) for k, v in combo.items()):
            if b.excluded_by is not None:
                raise WorkloadError(f"{case.op}: workload row {case.row} ({case.label}) is excluded "
                                    f"by {b.excluded_by}")
            return b
    raise WorkloadError(f"{case.op}: no branch of the plan matches workload row {case.row} "
                        f"({case.label}): {combo}")


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, ADTValue) and isinstance(b, ADTValue):
        return a.ctor == b.ctor and all(b.has(f) and b.field(f) == v for f, v in a.fields)
    return a == b and type(a) is type(b) if isinstance(a, bool) or isinstance(b, bool) else a == b


def instantiate(case: Case, device: torch.device, seed: int = WORKLOAD_SEED) -> tuple:
    spec = case._spec
    b = branch_of(case)
    env: dict[str, Any] = {}
    for n, p in spec.params.items():
        v = case.values.get(n, p.default if p.has_default else None)
        env[n] = ADTValue.of(K.unwrap_maybe(p.kind).name, *next(iter(v.items()))) \
            if isinstance(v, dict) and len(v) == 1 else v
    for n in spec.forall:
        if n in case.values:
            env[n] = case.values[n]
    env.update(case.dtypes)
    shapes = {n: sh for n, sh, _ in b.tensors}
    dtypes = {n: dt for n, _, dt in b.tensors}
    rng = random.Random(f"{seed}:{case.op}:{case.id}")
    gens: dict[torch.device, torch.Generator] = {}
    # Generators first: their results solve the indices the row does not give. They run as
    # the prover's `workload` check runs them (the same driver), so both draw the same
    # contents from the seeded `rng`.
    calls, lets = branch_program(spec, b)
    where = f"{case.op}: case {case.id}"
    try:
        run = run_generators(spec, calls, shapes, env, rng, lets)
    except GeneratorError as err:
        raise WorkloadError(f"{where}: {_generator_failure(err)}") from err
    except GeneratedAxisError as err:
        name, k, ax, n = err.item
        why = {"evaluate": f"`{print_expr(ax)}` raises {err.detail}",
               "mismatch": f"its shape needs `{print_expr(ax)}` = {err.detail}",
               "divide": f"`{print_expr(ax)}` cannot equal for a non-negative integer "
                         f"`{err.detail}`"}[err.reason]
        raise WorkloadError(f"{where}: the generator of `{name}` gives length {n} at axis {k}, "
                            f"where {why}") from err
    generated = run.generated
    for n in run.never_known:
        call = dict(calls)[n]
        names = ", ".join(sorted(unknown_symbols(spec, call, env)))
        raise WorkloadError(f"{where}: the arguments of the generator of `{n}` "
                            f"(`{print_expr(call)}`) are never known "
                            f"({names}): give them in the row")
    for n, k, ax, length in run.unsolved:
        raise WorkloadError(f"{where}: the generated `{n}` has length {length} at axis {k}, "
                            f"and `{print_expr(ax)}` there cannot be solved "
                            f"({', '.join(sorted(unknown_symbols(spec, ax, env)))} unknown)")
    for n, vals in generated.items():
        for r in spec.inputs[n].requires:
            try:
                ok = evaluate_requires(r, vals, {**env, **generated})
            except Exception as exc:
                raise WorkloadError(f"{case.op}: case {case.id}: `requires` of `{n}` raises "
                                    f"{exc}") from exc
            if ok is not True:
                raise WorkloadError(f"{case.op}: case {case.id}: the generated `{n}` breaks its "
                                    f"`requires` {print_expr(r)}")
    out = []
    for n in spec.inputs:
        if n not in shapes:
            out.append(None)
            continue
        try:
            shape = evaluate_axes(shapes[n], env)
            if any(a < 0 for a in shape):
                raise WorkloadError(f"negative axis in {list(shape)}")
            # A constant dtype (`dtype: int64`) is a name the environment must bind: dtype
            # values are their names, as in generated code.
            dtype = getattr(torch, evaluate(dtypes[n], {**_DTYPE_CONSTANTS, **env}))
        except Exception as exc:
            raise WorkloadError(f"{case.op}: case {case.id}: input `{n}` cannot be built: "
                                f"{exc}") from exc
        dev = torch.device("cpu") if spec.inputs[n].device == "cpu" else device
        if n in generated:
            if dev.type == "meta":
                out.append(torch.empty(shape, dtype=dtype, device=dev))
            else:
                out.append(torch.tensor(generated[n], dtype=dtype).reshape(shape).to(dev))
        else:
            out.append(_random(shape, dtype, dev, _generator(gens, dev, seed)))
    return tuple(out)


def _generator_failure(err: GeneratorError) -> str:
    call = print_expr(err.call)
    if err.reason == "raises":
        return f"the generator of `{err.name}` (`{call}`) raises {err.detail}"
    if err.reason == "shape":
        return (f"the shape of the generated `{err.name}` (`{call}`) cannot be taken: "
                f"{err.detail}")
    return (f"the generator of `{err.name}` gives shape {list(err.actual)}, which does not "
            f"unify with its declared shape: {err.detail}")


def _generator(gens: dict, device: torch.device, seed: int) -> torch.Generator | None:
    """One seeded generator per device of a case. CUDA tensors are drawn on the GPU: a
    workload's weights reach gigabytes, which the CPU takes minutes to draw. The values
    then differ from a CPU draw of the same case, but are as deterministic."""
    if device.type == "meta":
        return None
    where = device if device.type == "cuda" else torch.device("cpu")
    g = gens.get(where)
    if g is None:
        g = gens[where] = torch.Generator(device=where).manual_seed(seed)
    return g


def _random(shape: tuple, dtype: torch.dtype, device: torch.device, gen) -> torch.Tensor:
    if device.type == "meta":
        return torch.empty(shape, dtype=dtype, device=device)
    at = gen.device
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=gen, dtype=torch.float32, device=at)
        t = t.to(dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=gen, device=at).bool()
    elif dtype.is_complex:
        t = torch.randn(shape, generator=gen, dtype=dtype, device=at)
    else:
        t = torch.randint(0, 8, shape, generator=gen, device=at).to(dtype)
    return t.to(device)
