"""The GeluAndMul kernel interface, its call spec and its two implementations."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.gelu_and_mul import gelu_and_mul_reference, gelu_and_mul_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class GeluAndMulCall(CallSpec):
    dtype: str
    #: 'none' (erf) or 'tanh'
    approximate: str


class GeluAndMulFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = GeluAndMulCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out = gelu(x[:, :N], approximate) * x[:, N:]`, computed in fp32.

        x: [M, 2N] of the call's dtype, on the call's device, any strides; out: [M, N],
        same dtype, contiguous, written in full (not read). Returns `out`.
        """


class GeluAndMulTritonKernel(Kernel, GeluAndMulFwdInterface):
    """One program per tile of rows x columns (rows stacked when N is short), vectorised
    loads, fp32 math."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        # The kernel object holds nothing shape-specific: one entry per dtype,
        # approximation and device.
        return (call.dtype, call.approximate, call.device), lambda: cls(call)

    def forward(self, x, out):
        return gelu_and_mul_triton(x, out, self.call.approximate)


class GeluAndMulReferenceKernel(Kernel, GeluAndMulFwdInterface):
    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, out):
        out.copy_(gelu_and_mul_reference(x, self.call.approximate))
        return out
