"""Normalisation ops: RMSNorm and LayerNorm (torch.nn.functional), and vLLM's fused
residual add with RMSNorm."""

from __future__ import annotations

import torch

from opspec.kernels.norm import DEFAULT_RMS_EPS
from opspec.kernels.norm_impl import (
    FusedAddRMSNormFwdInterface, FusedAddRMSNormReferenceKernel,
    FusedAddRMSNormTritonKernel, LayerNormFwdInterface, LayerNormReferenceKernel,
    LayerNormTritonKernel, RMSNormFwdInterface, RMSNormReferenceKernel,
    RMSNormTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["RMSNormFwdOp", "LayerNormFwdOp", "FusedAddRMSNormFwdOp"]


class RMSNormFwdOp(Op):
    """`torch.nn.functional.rms_norm(input, normalized_shape, weight, eps)`: each row of the
    trailing `normalized_shape` axes divided by its root mean square (plus `eps`), then
    scaled by `weight` when given. `eps=None` is torch's default,
    `torch.finfo(torch.float32).eps` (the computation dtype's epsilon). The output is a new
    contiguous tensor."""

    kernel_types = {"rms_norm_triton": RMSNormTritonKernel,
                    "rms_norm_reference": RMSNormReferenceKernel}
    interfaces = {"rms_norm": RMSNormFwdInterface}

    def __init__(self, normalized_shape, eps=None, *, target=None):
        self.normalized_shape = normalized_shape
        self.eps = eps
        super().__init__(target=target)
        # Fixed for the instance: the normalised shape as a tuple and the eps actually added.
        self._shape = tuple(int(n) for n in normalized_shape)
        self._eps = DEFAULT_RMS_EPS if eps is None else float(eps)

    def forward(self, input: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(input, memory_format=torch.contiguous_format)
        kernel = self.kernel_for_values("rms_norm", input.device,
                                        DTYPE_NAMES[input.dtype], self._shape, self._eps)
        return kernel.forward(input, weight, out)


class LayerNormFwdOp(Op):
    """`torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps)`: each row
    of the trailing `normalized_shape` axes centred and divided by its standard deviation
    (biased variance, plus `eps`), then scaled by `weight` and shifted by `bias` when given.
    The output is a new contiguous tensor."""

    kernel_types = {"layer_norm_triton": LayerNormTritonKernel,
                    "layer_norm_reference": LayerNormReferenceKernel}
    interfaces = {"layer_norm": LayerNormFwdInterface}

    def __init__(self, normalized_shape, eps=1e-5, *, target=None):
        self.normalized_shape = normalized_shape
        self.eps = eps
        super().__init__(target=target)
        self._shape = tuple(int(n) for n in normalized_shape)
        self._eps = float(eps)

    def forward(self, input: torch.Tensor, weight: torch.Tensor | None = None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(input, memory_format=torch.contiguous_format)
        kernel = self.kernel_for_values("layer_norm", input.device,
                                        DTYPE_NAMES[input.dtype], self._shape, self._eps)
        return kernel.forward(input, weight, bias, out)


class FusedAddRMSNormFwdOp(Op):
    """vLLM's `fused_add_rms_norm(input, residual, weight, epsilon)`, in place:
    `residual += input` (rounded to the dtype), then `input = rms_norm(residual) * weight`
    over the last axis. Like vLLM it returns None; the results are the two written
    tensors. `input` and `residual` must not overlap."""

    kernel_types = {"fused_add_rms_norm_triton": FusedAddRMSNormTritonKernel,
                    "fused_add_rms_norm_reference": FusedAddRMSNormReferenceKernel}
    interfaces = {"fused_add_rms_norm": FusedAddRMSNormFwdInterface}

    def __init__(self, epsilon, *, target=None):
        self.epsilon = epsilon
        super().__init__(target=target)
        self._eps = float(epsilon)

    def forward(self, input: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> None:
        kernel = self.kernel_for_values("fused_add_rms_norm", input.device,
                                        DTYPE_NAMES[input.dtype], input.shape[-1], self._eps)
        kernel.forward(input, residual, weight)
