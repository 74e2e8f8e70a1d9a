"""Bench entries of the elementwise family added beside SiluAndMulFwdOp (whose entry stays
in `opspec.ops.bench_baselines`): GeluAndMulFwdOp.

The reference is `gelu(x[:, :N], approximate) * x[:, N:]` on the float64 inputs the bench
passes. The baselines: vLLM's native path in the input dtype (`eager`), its
`torch.compile(fullgraph=True)` (`compile`), and vLLM's CUDA kernel where vLLM is installed.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from opspec.kernels.gelu_and_mul import gelu_and_mul_reference
from opspec.ops.bench_types import BaselineUnavailable, torch_entry

__all__ = ["BENCH"]


def _gelu_and_mul_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return gelu_and_mul_reference(x, op.approximate)


def _gelu_and_mul_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    # vLLM's GeluAndMul.forward_native: two passes in the input dtype.
    approximate = str(op.approximate)

    def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1] // 2
        return F.gelu(x[..., :n], approximate=approximate) * x[..., n:]

    return gelu_and_mul


def _vllm_gelu_and_mul(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """vLLM's CUDA kernel (`torch.ops._C.gelu_and_mul(out, x)`, or `gelu_tanh_and_mul`),
    where vLLM is installed."""
    name = "gelu_tanh_and_mul" if op.approximate == "tanh" else "gelu_and_mul"
    try:
        import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
        kernel = getattr(torch.ops._C, name)
    except (ImportError, AttributeError, RuntimeError) as exc:
        raise BaselineUnavailable(f"vLLM's {name} is not available here ({exc})") from None

    def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
        kernel(out, x)
        return out

    return gelu_and_mul


BENCH = {
    "GeluAndMulFwdOp": torch_entry(
        _gelu_and_mul_reference, _gelu_and_mul_fn,
        "F.gelu(x[:, :N], approximate) * x[:, N:] in the input dtype",
        extra={"vllm": (_vllm_gelu_and_mul, "vLLM's CUDA kernel torch.ops._C.gelu_and_mul / "
                                            "gelu_tanh_and_mul, where installed")}),
}
