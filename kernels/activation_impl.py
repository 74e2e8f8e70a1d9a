"""The pointwise-activation kernel interface, its call spec and its two implementations.

One interface serves ReLU, SiLU and GELU: the call spec names the activation, and an
implementation computes whichever it is asked for.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.activation import activation_reference, activation_triton
from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class ActivationCall(CallSpec):
    #: 'relu', 'silu', 'gelu' (erf form) or 'gelu_tanh'
    act: str
    dtype: str


class ActivationFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = ActivationCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out = act(x)` elementwise, computed in fp32, for the call's activation.

        x: any shape and strides, of the call's dtype, on the call's device; out: x's shape
        and dtype, any strides, written in full (not read) -- or `x` itself, which is then
        written in place. Returns `out`.
        """


class ActivationTritonKernel(Kernel, ActivationFwdInterface):
    """A flat 1-D kernel over dense tensors (2-D strided otherwise), fp32 math."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        # Nothing shape-specific is held: one entry per activation, dtype and device.
        return (call.act, call.dtype, call.device), lambda: cls(call)

    def forward(self, x, out):
        return activation_triton(x, out, self.call.act)


class ActivationReferenceKernel(Kernel, ActivationFwdInterface):
    """The torch function: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    @classmethod
    def entry_for(cls, call):
        return (call.act, call.dtype, call.device), lambda: cls(call)

    def forward(self, x, out):
        out.copy_(activation_reference(x, self.call.act))
        return out
