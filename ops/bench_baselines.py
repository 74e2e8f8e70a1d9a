"""What `opspec bench` compares an op with: its reference, its tolerances, its baselines.

Three registries, keyed by op class name, each entry next to the others of the same op:

* `REFERENCES[op] = fn(op, *inputs) -> Tensor`: the op's function in plain torch. The bench
  calls it on the case inputs upcast to float64 (`upcast`), so that it is the high-precision
  answer every implementation is checked against; `op` gives the construction parameters.
* `TOLERANCES[op][dtype] = Tolerance(...)`: how far an output of that dtype may be from the
  reference (`DEFAULT_TOLERANCES` where an op names none).
* `BASELINES[op][name] = factory(op) -> fn(*inputs) -> Tensor`: the implementations timed
  against the op on the same inputs: `eager` (the torch function run eagerly), `compile`
  (`torch.compile` of that same function, default mode, `fullgraph=True`) and, where a
  known library kernel exists on the machine, that too. A factory that cannot build its
  baseline here (library missing, no GPU) raises `BaselineUnavailable`: the bench leaves it
  out and says so, which is not a failure.

An op with no `REFERENCES` entry cannot be verified, and the bench counts that as a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from opspec.kernels.gemm import gemm_reference
from opspec.kernels.silu_and_mul import silu_and_mul_reference

__all__ = [
    "BASELINES",
    "BaselineUnavailable",
    "DEFAULT_TOLERANCES",
    "DESCRIPTIONS",
    "REFERENCES",
    "REFERENCE_DTYPE",
    "TOLERANCES",
    "Tolerance",
    "compiled",
    "tolerance_for",
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


def _eager(fn_of_op: Callable[[Any], Callable[..., torch.Tensor]]) -> Factory:
    return fn_of_op


# -- GemmFwdOp: c = op(a) @ op(b) ----------------------------------------------------------------

def _gemm_reference(op: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return gemm_reference(a, b, op.trans_a, op.trans_b)


def _gemm_fn(op: Any) -> Callable[..., torch.Tensor]:
    # torch.matmul on the stored layouts (a transposed view, no copy): cuBLAS on CUDA. This
    # is the library GEMM on the device image, so `eager` doubles as the cuBLAS baseline.
    trans_a, trans_b = bool(op.trans_a), bool(op.trans_b)

    def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return gemm_reference(a, b, trans_a, trans_b)

    return gemm


# -- SiluAndMulFwdOp: silu(x[:, :N]) * x[:, N:] ----------------------------------------------------

def _silu_and_mul_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return silu_and_mul_reference(x)


def _silu_and_mul_fn(op: Any) -> Callable[..., torch.Tensor]:
    # What a model writes in torch: two passes in the input dtype (vLLM's native path).
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1] // 2
        return F.silu(x[..., :n]) * x[..., n:]

    return silu_and_mul


def _vllm_silu_and_mul(op: Any) -> Callable[..., torch.Tensor]:
    """vLLM's CUDA kernel (`torch.ops._C.silu_and_mul(out, x)`), where vLLM is installed."""
    try:
        import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
        kernel = torch.ops._C.silu_and_mul
    except (ImportError, AttributeError, RuntimeError) as exc:
        raise BaselineUnavailable(f"vLLM's silu_and_mul is not available here ({exc})") from None

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
        kernel(out, x)
        return out

    return silu_and_mul


# -- the registries ---------------------------------------------------------------------------------

REFERENCES: dict[str, Reference] = {
    "GemmFwdOp": _gemm_reference,
    "SiluAndMulFwdOp": _silu_and_mul_reference,
}

TOLERANCES: dict[str, dict[torch.dtype, Tolerance]] = {
    "GemmFwdOp": {},
    "SiluAndMulFwdOp": {},
}

BASELINES: dict[str, dict[str, Factory]] = {
    "GemmFwdOp": {
        "eager": _eager(_gemm_fn),
        "compile": compiled(_gemm_fn),
    },
    "SiluAndMulFwdOp": {
        "eager": _eager(_silu_and_mul_fn),
        "compile": compiled(_silu_and_mul_fn),
        "vllm": _vllm_silu_and_mul,
    },
}


#: One line per baseline, for the reports (what exactly was timed).
DESCRIPTIONS: dict[str, dict[str, str]] = {
    "GemmFwdOp": {
        "eager": "torch.matmul on the stored layouts (cuBLAS on CUDA)",
        "compile": "torch.compile(fullgraph=True) of the same function (default mode)",
    },
    "SiluAndMulFwdOp": {
        "eager": "F.silu(x[:, :N]) * x[:, N:] in the input dtype",
        "compile": "torch.compile(fullgraph=True) of the same function (default mode)",
        "vllm": "vLLM's CUDA kernel torch.ops._C.silu_and_mul, where installed",
    },
}


def tolerance_for(op_name: str, dtype: torch.dtype,
                  tolerances: Mapping[str, Mapping[torch.dtype, Tolerance]] | None = None
                  ) -> Tolerance:
    table = TOLERANCES if tolerances is None else tolerances
    tol = table.get(op_name, {}).get(dtype) or DEFAULT_TOLERANCES.get(dtype)
    if tol is None:  # integer or bool outputs: exact
        return Tolerance(0.0, 0.0, 0.0)
    return tol
