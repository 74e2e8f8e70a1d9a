"""The SiluAndMul kernel interface, its call spec and its two implementations."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.silu_and_mul import silu_and_mul_reference, silu_and_mul_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class SiluAndMulCall(CallSpec):
    dtype: str


class SiluAndMulFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = SiluAndMulCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out = silu(x[:, :N]) * x[:, N:]`, computed in fp32.

        x: [M, 2N] of the call's dtype, on the call's device, any row stride (unit column
        stride not required); out: [M, N], same dtype, contiguous, written in full.
        Returns `out`.
        """


class SiluAndMulTritonKernel(Kernel, SiluAndMulFwdInterface):
    """One program per (row, block of columns), vectorised loads, fp32 math."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        # The kernel object holds nothing shape-specific: one entry per dtype and device.
        return (call.dtype, call.device), lambda: cls(call)

    def forward(self, x, out):
        return silu_and_mul_triton(x, out)


class SiluAndMulReferenceKernel(Kernel, SiluAndMulFwdInterface):
    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, out):
        out.copy_(silu_and_mul_reference(x))
        return out
