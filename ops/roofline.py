"""`eval_roofline()`: the (flops, bytes) of an op's last completed call, from its spec.

Inline formulas are evaluated on the call's indices, parameters and lets, with
`present(t)` and `bytes(t)` answered from the call record. When `bytes` is omitted it is
derived from the signature (reference §6): every tensor of the call is read and written in
full as its effects say — an unwritten input once read, an output once written, a mutated
input read and written, a write-only input written — each tensor name counted as its own
storage, except declared aliases (`alias`, `buffer: out`), which share one.
A `func` roofline names a function `f(call) -> (flops, bytes)` inside the manifest's
allowlisted package prefixes.
"""

from __future__ import annotations

import importlib
import keyword

from opspec.schema.errors import SpecError
from opspec.schema.evaluate import BYTES_KEY, evaluate


def derived_bytes(call) -> int:
    total = 0
    for name, (reads, writes) in call.traffic.items():
        total += (reads + writes) * call.bytes(name)
    return total


def eval_roofline(op) -> tuple[int, int]:
    call = op.last_call
    info = type(op)._info()
    spec = info.spec
    r = spec.roofline
    if r is None:
        raise SpecError(f"{type(op).__name__}: its spec declares no roofline")
    if r.func is not None:
        fn = resolve_func(r.func, info.entry.manifest.types.python_prefixes)
        flops, nbytes = fn(call)
        return int(flops), int(nbytes)
    env = dict(call.indices)
    for name in spec.tensors:
        env[name] = True if call.present(name) else None
    env["out"] = True if call.has_out else None
    env[BYTES_KEY] = call.bytes
    flops = int(evaluate(r.flops, env))
    nbytes = int(evaluate(r.bytes, env)) if r.bytes is not None else derived_bytes(call)
    return flops, nbytes


def resolve_func(path: str, prefixes) -> object:
    """Import `module.function`, only inside an allowlisted package prefix."""
    if not any(path == p.rstrip(".") or path.startswith(p if p.endswith(".") else p + ".")
               for p in prefixes):
        raise SpecError(f"roofline func `{path}` is outside the manifest's python_prefixes "
                          f"{list(prefixes)}; opspec imports nothing else a spec names")
    module, _, attr = path.rpartition(".")
    # Every dotted part is a public identifier: `opspec..x` used to reach import_module as
    # `opspec.` (a ModuleNotFoundError, not this error), and a private part such as
    # `opspec.cli.__main__.main` imported a module that runs the CLI on import.
    parts = path.split(".")
    if not module or not all(p.isidentifier() and not keyword.iskeyword(p)
                             and not p.startswith("_") for p in parts):
        raise SpecError(f"roofline func `{path}` is not `package.module.function` (public "
                        "identifiers only)")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise SpecError(f"roofline func `{path}`: cannot import `{module}`: {exc}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise SpecError(f"roofline func `{path}` is not a function")
    return fn
