"""What `opspec bench` compares an op with: its reference, its tolerances, its baselines.

Four registries, keyed by op class name, built from one `BenchEntry` per op:

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

The GEMM and SiluAndMul entries are written here; every other op's entry is in `BENCH` of
a family module `opspec.ops.baselines_<family>`, found by name when this module is
imported (a family adds its ops without editing this file). `torch_entry` makes the usual
entry: the torch function eagerly and compiled, plus any library kernel.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from opspec.kernels.gemm import gemm_reference
from opspec.kernels.silu_and_mul import silu_and_mul_reference
from opspec.ops.bench_types import (
    DEFAULT_TOLERANCES, REFERENCE_DTYPE, BaselineUnavailable, BenchEntry, Factory, Reference,
    Tolerance, compiled, torch_entry, upcast,
)

__all__ = [
    "BASELINES",
    "BaselineUnavailable",
    "BenchEntry",
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

#: The entries written here; every other op's is in its family module (see above).
_ENTRIES: dict[str, BenchEntry] = {
    "GemmFwdOp": torch_entry(_gemm_reference, _gemm_fn,
                             "torch.matmul on the stored layouts (cuBLAS on CUDA)"),
    "SiluAndMulFwdOp": torch_entry(
        _silu_and_mul_reference, _silu_and_mul_fn,
        "F.silu(x[:, :N]) * x[:, N:] in the input dtype",
        extra={"vllm": (_vllm_silu_and_mul,
                        "vLLM's CUDA kernel torch.ops._C.silu_and_mul, where installed")}),
}


def _family_entries() -> dict[str, BenchEntry]:
    """The `BENCH` entries of every `opspec.ops.baselines_<family>` module."""
    import opspec.ops as ops_pkg

    out: dict[str, BenchEntry] = {}
    for info in sorted(pkgutil.iter_modules(ops_pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("baselines_"):
            continue
        module = importlib.import_module(f"opspec.ops.{info.name}")
        for op_name, entry in getattr(module, "BENCH", {}).items():
            if op_name in out or op_name in _ENTRIES:
                raise RuntimeError(f"{module.__name__}: {op_name} has a bench entry already")
            out[op_name] = entry
    return out


_ENTRIES.update(_family_entries())

REFERENCES: dict[str, Reference] = {n: e.reference for n, e in _ENTRIES.items()}
TOLERANCES: dict[str, dict[torch.dtype, Tolerance]] = {
    n: dict(e.tolerances) for n, e in _ENTRIES.items()}
BASELINES: dict[str, dict[str, Factory]] = {n: dict(e.baselines) for n, e in _ENTRIES.items()}
#: One line per baseline, for the reports (what exactly was timed).
DESCRIPTIONS: dict[str, dict[str, str]] = {
    n: dict(e.descriptions) for n, e in _ENTRIES.items()}


def tolerance_for(op_name: str, dtype: torch.dtype,
                  tolerances: Mapping[str, Mapping[torch.dtype, Tolerance]] | None = None
                  ) -> Tolerance:
    table = TOLERANCES if tolerances is None else tolerances
    tol = table.get(op_name, {}).get(dtype) or DEFAULT_TOLERANCES.get(dtype)
    if tol is None:  # integer or bool outputs: exact
        return Tolerance(0.0, 0.0, 0.0)
    return tol
