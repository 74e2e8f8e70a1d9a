"""Bench entries of the norm family: RMSNormFwdOp, LayerNormFwdOp, FusedAddRMSNormFwdOp.

The references are the float32-math torch references of `opspec.kernels.norm`, which
compute in float64 on the float64 inputs the bench passes. The baselines are the torch
functions a model calls, in the input dtype: `eager` and `torch.compile(fullgraph=True)` of
the same function, plus vLLM's CUDA kernels where vLLM is installed.

`FusedAddRMSNormFwdOp` writes both `input` and `residual` and returns None (as vLLM's
`fused_add_rms_norm`): its reference returns `(new input, new residual)`, and its
baselines write the two tensors in place and return None, as the op does.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from opspec.kernels.norm import (
    DEFAULT_RMS_EPS, fused_add_rms_norm_reference, layer_norm_reference, rms_norm_reference,
)
from opspec.ops.bench_types import (
    COMPILE_DESCRIPTION, BaselineUnavailable, BenchEntry, compiled, eager, torch_entry,
)

__all__ = ["BENCH"]

def _vllm_ops() -> Any:
    """`torch.ops._C` with vLLM's norm kernels registered, or BaselineUnavailable."""
    try:
        import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
        ops = torch.ops._C
        ops.rms_norm, ops.fused_add_rms_norm  # noqa: B018  (both must exist)
    except (ImportError, AttributeError, RuntimeError) as exc:
        raise BaselineUnavailable(f"vLLM's norm kernels are not available here ({exc})") from None
    return ops


# -- RMSNormFwdOp -----------------------------------------------------------------------------

def _rms_reference(op: Any, input: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    eps = DEFAULT_RMS_EPS if op.eps is None else op.eps
    return rms_norm_reference(input, tuple(op.normalized_shape), weight, eps)


def _rms_fn(op: Any) -> Callable[..., torch.Tensor]:
    shape, eps = tuple(int(n) for n in op.normalized_shape), op.eps

    def rms_norm(input: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        return F.rms_norm(input, shape, weight, eps)

    return rms_norm


def _vllm_rms(op: Any) -> Callable[..., torch.Tensor]:
    """vLLM's `rms_norm(out, input, weight, epsilon)` (last axis only; a weight of ones
    stands in for a missing weight)."""
    kernel = _vllm_ops().rms_norm
    if len(op.normalized_shape) != 1:
        raise BaselineUnavailable("vLLM's rms_norm normalises the last axis only")
    eps = DEFAULT_RMS_EPS if op.eps is None else float(op.eps)
    ones: dict[tuple, torch.Tensor] = {}

    def rms_norm(input: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        if weight is None:
            key = (input.shape[-1], input.dtype, input.device)
            weight = ones.get(key)
            if weight is None:
                weight = ones[key] = torch.ones(input.shape[-1], dtype=input.dtype,
                                                device=input.device)
        out = torch.empty_like(input)
        kernel(out, input, weight, eps)
        return out

    return rms_norm


# -- LayerNormFwdOp ---------------------------------------------------------------------------

def _ln_reference(op: Any, input: torch.Tensor, weight: torch.Tensor | None,
                  bias: torch.Tensor | None) -> torch.Tensor:
    return layer_norm_reference(input, tuple(op.normalized_shape), weight, bias, op.eps)


def _ln_fn(op: Any) -> Callable[..., torch.Tensor]:
    shape, eps = tuple(int(n) for n in op.normalized_shape), float(op.eps)

    def layer_norm(input: torch.Tensor, weight: torch.Tensor | None,
                   bias: torch.Tensor | None) -> torch.Tensor:
        return F.layer_norm(input, shape, weight, bias, eps)

    return layer_norm


# -- FusedAddRMSNormFwdOp ---------------------------------------------------------------------

def _fused_reference(op: Any, input: torch.Tensor, residual: torch.Tensor,
                     weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # The op returns nothing: its results are the written input, then the written residual.
    return fused_add_rms_norm_reference(input, residual, weight, op.epsilon)


def _fused_fn(op: Any) -> Callable[..., None]:
    eps = float(op.epsilon)

    # What a model writes in torch: the add in place, then rms_norm copied into input.
    def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor,
                           weight: torch.Tensor) -> None:
        residual.add_(input)
        input.copy_(F.rms_norm(residual, (residual.shape[-1],), weight, eps))

    return fused_add_rms_norm


def _fused_compiled(op: Any) -> Callable[..., None]:
    """`compiled(_fused_fn)`, except on the CPU: there Inductor's C++ backend (torch 2.13)
    fails on this graph (a KeyError in its outer-loop fusion, whatever form the in-place
    writes take), so CPU calls use the same `torch.compile` with fusion limited
    (`max_fusion_size=1`). CUDA calls take the default compile."""
    default = compiled(_fused_fn)(op)
    cpu = torch.compile(_fused_fn(op), fullgraph=True, dynamic=False,
                        options={"max_fusion_size": 1})

    def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor,
                           weight: torch.Tensor) -> None:
        if input.device.type == "cpu":
            return cpu(input, residual, weight)
        return default(input, residual, weight)

    return fused_add_rms_norm


def _vllm_fused(op: Any) -> Callable[..., None]:
    """vLLM's `fused_add_rms_norm(input, residual, weight, epsilon)`, in place."""
    kernel = _vllm_ops().fused_add_rms_norm
    eps = float(op.epsilon)

    def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor,
                           weight: torch.Tensor) -> None:
        kernel(input, residual, weight, eps)

    return fused_add_rms_norm


BENCH = {
    "RMSNormFwdOp": torch_entry(
        _rms_reference, _rms_fn,
        "F.rms_norm(input, normalized_shape, weight, eps) in the input dtype",
        extra={"vllm": (_vllm_rms, "vLLM's CUDA kernel torch.ops._C.rms_norm, where installed "
                                   "(last axis only)")}),
    "LayerNormFwdOp": torch_entry(
        _ln_reference, _ln_fn,
        "F.layer_norm(input, normalized_shape, weight, bias, eps) in the input dtype"),
    # Its compile baseline is `_fused_compiled` (an Inductor C++ bug on the CPU).
    "FusedAddRMSNormFwdOp": BenchEntry(
        reference=_fused_reference,
        baselines={"eager": eager(_fused_fn), "compile": _fused_compiled,
                   "vllm": _vllm_fused},
        descriptions={
            "eager": "residual.add_(input); input.copy_(F.rms_norm(residual, [D], weight, eps))",
            "compile": COMPILE_DESCRIPTION + "; on the CPU with max_fusion_size=1 (an Inductor "
                                             "C++ bug)",
            "vllm": "vLLM's CUDA kernel torch.ops._C.fused_add_rms_norm, where installed",
        },
    ),
}
