"""The `torch.compile` boundary: one `torch.library` custom op per effect branch.

An op class with a call-time tensor input and no composition gets, at class definition, one
custom op per effect branch (which inputs it writes, whether `out` is passed, which outputs
it returns), named `opspec::<family>_<snake class name>` plus `_writes_<input>`, `_out`,
`_without_<output>`. The operator's arguments are the call-time inputs in signature order,
`out` when passed, and a string key that finds the instance (a string stays a constant under
tracing). Its fake runs the same generated signature checks on fake tensors and builds the
outputs from the signature with `torch.empty`.

Only traced calls go through the operator: an eager call runs the same checked path
directly and never pays the custom-op hop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

_NAMESPACE = "opspec"


@dataclass(frozen=True)
class EffectBranch:
    written: tuple[str, ...]
    has_out: bool
    returned: tuple[str, ...]        # outputs the branch returns (not None)
    new: tuple[str, ...]             # returned outputs that are new tensors (no alias, no out)
    name: str                        # qualified operator name
    schema: str


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def base_name(cls_name: str, family: str) -> str:
    s = snake(cls_name)
    return s if s.startswith(family + "_") or s == family else f"{family}_{s}"


def effect_branches(cls) -> dict[tuple, EffectBranch]:
    from opspec.ops.specs import plan_for

    entry = cls._opspec_entry
    spec = entry.spec
    plan = plan_for(entry)
    out: dict[tuple, EffectBranch] = {}
    base = base_name(cls.__name__, spec.family)
    for b in plan.branches:
        if b.excluded_by is not None:
            continue
        returned = tuple(n for n in spec.outputs if n in b.present)
        key = (tuple(b.written), b.has_out, returned)
        if key in out:
            continue
        new = tuple(n for n in returned
                    if not (spec.outputs[n].alias in b.written and spec.outputs[n].alias)
                    and not (spec.outputs[n].buffer == "out" and b.has_out))
        suffix = "".join(f"_writes_{w}" for w in b.written)
        suffix += "_out" if b.has_out else ""
        suffix += "".join(f"_without_{n}" for n in spec.outputs if n not in returned)
        out[key] = EffectBranch(tuple(b.written), b.has_out, returned, new, base + suffix,
                                _schema(spec, b.written, b.has_out, new))
    return out


def _schema(spec, written, has_out, new) -> str:
    args = []
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    for n, t in spec.inputs.items():
        opt = "?" if t.optional is not False else ""
        mut = f"({next(letters)}!)" if n in written else ""
        args.append(f"Tensor{mut}{opt} {_arg(n)}")
    if has_out:
        args.append(f"Tensor({next(letters)}!) out")
    args.append("str key")
    ret = "()" if not new else ("Tensor" if len(new) == 1 else "(" + ", ".join("Tensor" for _ in new) + ")")
    return "(" + ", ".join(args) + ") -> " + ret


def _arg(n: str) -> str:
    # Schema argument names must not be schema keywords; tensor names are identifiers.
    return n if n not in ("out", "key", "self") else f"{n}_"


def install_boundary(cls) -> None:
    branches = effect_branches(cls)
    names = []
    cls._opspec_effects = {}
    for key, eb in branches.items():
        _register(cls, eb)
        names.append(f"{_NAMESPACE}::{eb.name}")
        cls._opspec_effects[key] = eb
    cls.compile_op_names = tuple(names)


_registered: dict[str, Any] = {}


def _register(cls, eb: EffectBranch) -> None:
    qual = f"{_NAMESPACE}::{eb.name}"
    if qual in _registered:
        return  # a class redefined in the same process (tests): the first registration serves
    from opspec.ops.op import _INSTANCES

    n_inputs = len(cls._opspec_entry.spec.inputs)
    has_out = eb.has_out
    new = eb.new
    outputs = list(cls._opspec_entry.spec.outputs)

    def impl(*args):
        key = args[-1]
        op = _INSTANCES[key]
        inputs = args[:n_inputs]
        kwargs = {"out": args[n_inputs]} if has_out else {}
        result = op._run_call(tuple(inputs), kwargs)
        return _pick_new(result, outputs, new)

    def fake(*args):
        key = args[-1]
        op = _INSTANCES[key]
        inputs = args[:n_inputs]
        out = args[n_inputs] if has_out else None
        br = op._branch_for(tuple(inputs), out)
        # The call device is what the generated checks decided (seed § 4): the first input
        # tensor may be a `device: cpu` one, which takes no part in it.
        ind, device, _ = br.code.call(op, *inputs, out, br.ind)
        types = {t[0]: t for t in br.code.outputs(op, ind)}
        from opspec.ops.op import new_output
        decls = cls._opspec_entry.spec.outputs
        res = [new_output(types[n], decls[n], device) for n in new]
        if not res:
            return None
        return res[0] if len(res) == 1 else tuple(res)

    mutates = tuple(_arg(w) for w in eb.written) + (("out",) if has_out else ())
    op = torch.library.custom_op(qual, impl, mutates_args=mutates, schema=eb.schema)
    op.register_fake(fake)
    _registered[qual] = op


def _pick_new(result, outputs: list[str], new: tuple[str, ...]):
    if not new:
        return None
    seq = (result,) if len(outputs) == 1 else result
    picked = [r for n, r in zip(outputs, seq) if n in new]
    return picked[0] if len(picked) == 1 else tuple(picked)


def call_boundary(op, args: tuple, kwargs: dict) -> Any:
    """The traced path: bind, pick the effect branch, call its operator, assemble outputs."""
    cls = type(op)
    info = cls._opspec_info
    inputs, out = op._bind(args, dict(kwargs))
    br = op._branch_for(inputs, out)
    spec = info.spec
    returned = tuple(n for n in spec.outputs if n in br.present)
    eb = cls._opspec_effects[(tuple(br.written), out is not None, returned)]
    fn = getattr(getattr(torch.ops, _NAMESPACE), eb.name)
    extra = (out,) if eb.has_out else ()
    res = fn(*inputs, *extra, op._opspec_key)
    new_vals = () if res is None else ((res,) if len(eb.new) == 1 else tuple(res))
    new_map = dict(zip(eb.new, new_vals))
    final = []
    for n in spec.outputs:
        o = spec.outputs[n]
        if n not in returned:
            final.append(None)
        elif n in new_map:
            final.append(new_map[n])
        elif o.buffer == "out" and eb.has_out:
            final.append(out)
        else:
            final.append(inputs[info.inputs.index(o.alias)])
    if not spec.outputs:
        return None
    return final[0] if len(final) == 1 else tuple(final)
