"""The pieces a bench entry is made of: tolerances, baselines, the entry of one op.

Kept apart from `bench_baselines` (which gathers every op's entry) so that the family
modules that define entries (`opspec.ops.baselines_<family>`) import only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

__all__ = [
    "BaselineUnavailable",
    "BenchEntry",
    "COMPILE_DESCRIPTION",
    "DEFAULT_TOLERANCES",
    "Factory",
    "REFERENCE_DTYPE",
    "Reference",
    "Tolerance",
    "compiled",
    "eager",
    "torch_entry",
    "upcast",
]

Reference = Callable[..., torch.Tensor]
Factory = Callable[[Any], Callable[..., torch.Tensor]]

#: The dtype floating-point inputs are upcast to before the reference runs.
REFERENCE_DTYPE = torch.float64


class BaselineUnavailable(Exception):
    """A baseline that cannot be built on this machine (a library or device is missing)."""


@dataclass(frozen=True)
class Tolerance:
    """An output passes when ‖out − ref‖ / ‖ref‖ <= `rel_l2` and every element satisfies
    |out − ref| <= `atol` · rms(ref) + `rtol` · |ref| (so one bad row cannot hide in a
    good norm); a NaN or infinity where the reference is finite never passes."""

    rel_l2: float
    rtol: float
    atol: float


#: By output dtype. float32 math lands far under 1e-4; fp16 rounds at 2^-11, bf16 at 2^-8
#: (an output rounded twice, as `F.silu(g) * u` in bf16 does, stays under 2^-7).
DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(1e-12, 1e-10, 1e-10),
    torch.float32: Tolerance(1e-4, 1e-4, 1e-4),
    torch.float16: Tolerance(3e-3, 4e-3, 4e-3),
    torch.bfloat16: Tolerance(1e-2, 1.6e-2, 1.6e-2),
}


def upcast(t: Any) -> Any:
    """A floating-point tensor in `REFERENCE_DTYPE`; anything else unchanged."""
    if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
        return t.to(REFERENCE_DTYPE)
    return t


def compiled(fn_of_op: Callable[[Any], Callable[..., torch.Tensor]]) -> Factory:
    """The `compile` baseline of a function: `torch.compile(fn, fullgraph=True)`, default mode,
    shapes static. Dynamo's caches are cleared first: every case compiles the same code object
    again, and past the recompile limit Dynamo would quietly fall back to eager."""

    def factory(op: Any) -> Callable[..., torch.Tensor]:
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(fn_of_op(op), fullgraph=True, dynamic=False)

    return factory


def eager(fn_of_op: Callable[[Any], Callable[..., torch.Tensor]]) -> Factory:
    return fn_of_op


@dataclass(frozen=True)
class BenchEntry:
    """What `opspec bench` needs of one op: the reference (`fn(op, *inputs)`, called on
    float64 inputs), the baselines timed against the op (`name -> factory(op) -> fn`), one
    line per baseline saying exactly what is timed, and tolerances by output dtype where
    the defaults do not fit."""

    reference: Reference
    baselines: Mapping[str, Factory]
    descriptions: Mapping[str, str]
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = set(self.baselines) - set(self.descriptions)
        if missing:
            raise ValueError(f"baselines {sorted(missing)} have no description")


#: What the `compile` baseline times, for every op whose baselines come from `torch_entry`.
COMPILE_DESCRIPTION = "torch.compile(fullgraph=True) of the same function (default mode)"


def torch_entry(reference: Reference, fn_of_op: Callable[[Any], Callable[..., Any]],
                eager_description: str, *, extra: Mapping[str, tuple[Factory, str]] | None = None,
                tolerances: Mapping[torch.dtype, Tolerance] | None = None) -> BenchEntry:
    """The usual entry: the op's torch function timed eagerly (`eager`) and compiled
    (`compile`, `COMPILE_DESCRIPTION`), plus `extra` baselines as `name -> (factory,
    description)` (a library kernel, where installed)."""
    baselines = {"eager": eager(fn_of_op), "compile": compiled(fn_of_op)}
    descriptions = {"eager": eager_description, "compile": COMPILE_DESCRIPTION}
    for name, (factory, description) in (extra or {}).items():
        baselines[name], descriptions[name] = factory, description
    return BenchEntry(reference, baselines, descriptions, dict(tolerances or {}))
