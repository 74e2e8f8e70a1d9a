"""The norm kernel interfaces, their call specs and their implementations.

Each op has one interface and two implementations: a Triton kernel (CUDA, and the CPU
under Triton's interpreter) and the torch reference, the `general` fallback for every
device. The Triton kernels serve every shape (rows too long for registers take the looped
kernel), so they declare no `applies`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.norm import (
    fused_add_rms_norm_reference, fused_add_rms_norm_triton, layer_norm_reference,
    layer_norm_triton, rms_norm_reference, rms_norm_triton,
)
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class NormCall(CallSpec):
    """One call of RMSNorm or LayerNorm: the dtype, the normalised shape (fixed by the op)
    and the eps actually added (torch's default already resolved)."""

    dtype: str
    normalized_shape: tuple[int, ...]
    eps: float


@dataclass(frozen=True)
class FusedAddRMSNormCall(CallSpec):
    """One call of the fused residual add and RMSNorm: the dtype, the hidden size `D` (the
    last axis) and `epsilon`."""

    dtype: str
    D: int
    eps: float


# -- RMSNorm ----------------------------------------------------------------------------------

class RMSNormFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = NormCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, weight: torch.Tensor | None,
                out: torch.Tensor) -> torch.Tensor:
        """`out = x / sqrt(mean(x**2) + eps) * weight` over the trailing
        `call.normalized_shape` axes, statistics in float32, rounded once to the dtype.

        x: [*B, *normalized_shape] of the call's dtype, on the call's device, any strides;
        weight: [*normalized_shape] of that dtype, or None (no scaling); out: same shape
        and dtype as x, contiguous, written in full (not read). Returns `out`.
        """


class RMSNormTritonKernel(Kernel, RMSNormFwdInterface):
    """Whole rows in registers (several short rows per program); a looped kernel for rows
    longer than 32768 elements."""

    devices = TRITON_DEVICES

    def forward(self, x, weight, out):
        return rms_norm_triton(x, self.call.normalized_shape, weight, self.call.eps, out)


class RMSNormReferenceKernel(Kernel, RMSNormFwdInterface):
    """The torch reference (float32 math): every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, weight, out):
        out.copy_(rms_norm_reference(x, self.call.normalized_shape, weight, self.call.eps))
        return out


# -- LayerNorm --------------------------------------------------------------------------------

class LayerNormFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = NormCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
        """`out = (x - mean) / sqrt(var + eps) * weight + bias` over the trailing
        `call.normalized_shape` axes (biased variance), statistics in float32, rounded
        once to the dtype.

        x: [*B, *normalized_shape] of the call's dtype, on the call's device, any strides;
        weight, bias: [*normalized_shape] of that dtype, each or both None; out: same shape
        and dtype as x, contiguous, written in full (not read). Returns `out`.
        """


class LayerNormTritonKernel(Kernel, LayerNormFwdInterface):
    """Whole rows in registers (mean, then the centred variance, from registers; the
    statistics in one reduction as a variant of the table); a looped kernel of two passes
    (Welford statistics, then the output) for rows longer than 32768 elements; long rows cut
    into cooperating chunks where the table enables it (kernels/norm.py ``TUNING``)."""

    devices = TRITON_DEVICES

    def forward(self, x, weight, bias, out):
        return layer_norm_triton(x, self.call.normalized_shape, weight, bias, self.call.eps,
                                 out)


class LayerNormReferenceKernel(Kernel, LayerNormFwdInterface):
    """The torch reference (float32 math): every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, weight, bias, out):
        out.copy_(layer_norm_reference(x, self.call.normalized_shape, weight, bias,
                                       self.call.eps))
        return out


# -- fused residual add + RMSNorm -------------------------------------------------------------

class FusedAddRMSNormFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = FusedAddRMSNormCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
        """In place: `residual = x + residual` (rounded to the dtype), then
        `x = residual / sqrt(mean(residual**2) + eps) * weight` over the last axis, the
        statistics in float32.

        x, residual: [*B, D] of the call's dtype, on the call's device, any strides, both
        read and written in full (they must not overlap); weight: [D] of that dtype.
        Returns None.
        """


class FusedAddRMSNormTritonKernel(Kernel, FusedAddRMSNormFwdInterface):
    """One pass per row: both rows read once, both written once, the weight once per
    program."""

    devices = TRITON_DEVICES

    def forward(self, x, residual, weight):
        fused_add_rms_norm_triton(x, residual, weight, self.call.eps)


class FusedAddRMSNormReferenceKernel(Kernel, FusedAddRMSNormFwdInterface):
    """The torch reference (float32 math): every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, residual, weight):
        y, s = fused_add_rms_norm_reference(x, residual, weight, self.call.eps)
        residual.copy_(s)
        x.copy_(y)
