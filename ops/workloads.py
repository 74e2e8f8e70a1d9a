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
from opspec.schema.errors import OpspecError, SignatureError
from opspec.schema.evaluate import evaluate, evaluate_requires
from opspec.schema.expr import Name, ShapeList, Splat
from opspec.schema.parse import parse_expr
from opspec.schema.printer import print_expr
from opspec.schema.primitives import WORKLOAD_SEED
from opspec.schema.values import ADTValue, to_tuple
from opspec.solver.order import linear


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


def cases(op_cls_or_spec: Any) -> list[Case]:
    """Every case of every workload row of an op class (or an `ElaboratedSpec`)."""
    if hasattr(op_cls_or_spec, "_info"):
        info = op_cls_or_spec._info()
        spec, plan = info.spec, info.plan
    else:
        spec, plan = op_cls_or_spec, None
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
    generated: dict[str, Any] = {}
    # generators first: their results solve the indices the row does not give
    for n in spec.inputs:
        t = spec.inputs[n]
        if n not in shapes or t.values is None:
            continue
        # A generator's arguments may be lets (`moe.layout_metadata(layout, R, E)`): bind
        # those the row and earlier generators already determine.
        _settle_lets(spec, env)
        try:
            vals = evaluate(t.values, env, rng=rng)
        except Exception as exc:
            raise WorkloadError(f"{case.op}: case {case.id}: the generator of `{n}` "
                                f"(`{print_expr(t.values)}`) raises {exc}") from exc
        generated[n] = vals
        _unify_generated(case, n, shapes[n], vals, env)
    _settle_lets(spec, env)
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
            shape = _axes(shapes[n], env)
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


def _axes(shape: ShapeList, env) -> tuple[int, ...]:
    axes: list[int] = []
    for a in shape.axes:
        if isinstance(a, Splat):
            axes.extend(int(x) for x in evaluate(a.value, env))
        else:
            axes.append(int(evaluate(a, env)))
    if any(x < 0 for x in axes):
        raise WorkloadError(f"negative axis in {axes}")
    return tuple(axes)


def _unify_generated(case: Case, name: str, shape: ShapeList, vals: Any, env: dict) -> None:
    actual = []
    v = vals
    while isinstance(v, (list, tuple)):
        actual.append(len(v))
        v = v[0] if v else None
    if any(isinstance(a, Splat) for a in shape.axes):
        return
    if len(actual) < len(shape.axes):
        actual += [0] * (len(shape.axes) - len(actual))
    for ax, n in zip(shape.axes, actual):
        unknown = [x for x in _names(ax) if x not in env and x in case._spec.forall]
        if not unknown:
            if evaluate(ax, env) != n:
                raise WorkloadError(f"{case.op}: case {case.id}: the generator of `{name}` gives "
                                    f"length {n} where its shape needs {ax}")
            continue
        if len(unknown) == 1:
            lin = linear(ax, unknown[0])
            if lin is not None:
                c = evaluate(lin[0], env)
                o = evaluate(lin[1], env)
                if c > 0 and (n - o) % c == 0:
                    env[unknown[0]] = (n - o) // c
                    continue
        raise WorkloadError(f"{case.op}: case {case.id}: cannot solve {unknown} from the "
                            f"generated `{name}`")


def _names(e) -> set[str]:
    from opspec.schema.expr import free_names
    return free_names(e)


def _settle_lets(spec, env: dict) -> None:
    for n, let in spec.lets.items():
        try:
            env[n] = evaluate(let.expr, env)
        except Exception:
            continue


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
