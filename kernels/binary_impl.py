"""The broadcasting binary kernel interface (add, mul), its call spec and two implementations."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.binary import binary_reference, binary_triton
from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class BinaryCall(CallSpec):
    op: str          # 'add' or 'mul'
    a_dtype: str
    b_dtype: str
    out_dtype: str


class BinaryFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = BinaryCall

    @abc.abstractmethod
    def forward(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                alpha: int | float) -> torch.Tensor:
        """`out = a + alpha * b` (call.op 'add') or `out = a * b` (call.op 'mul'; alpha is 1).

        a, b: of the call's `a_dtype` / `b_dtype`, on the call's device, any strides,
        shapes that broadcast to `out`'s; both floating or both integer. out: contiguous,
        of the call's `out_dtype` (torch's promotion of a and b), written in full, not
        read. Each operand is converted to `out_dtype`, the math runs in float32 (float16,
        bfloat16, float32 results), float64, int32 (integer results of up to 32 bits,
        wrapping as the result type does) or int64, and the result is cast to `out_dtype`.
        Returns `out`.
        """


class BinaryTritonKernel(Kernel, BinaryFwdInterface):
    """One Triton kernel over the collapsed broadcast iteration space (binary.py)."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        # The kernel object holds nothing shape-specific: one entry per op, dtypes, device.
        return (call.op, call.a_dtype, call.b_dtype, call.out_dtype, call.device), \
            lambda: cls(call)

    def forward(self, a, b, out, alpha):
        return binary_triton(self.call.op, a, b, out, alpha)


class BinaryReferenceKernel(Kernel, BinaryFwdInterface):
    """torch.add / torch.mul in the compute dtype: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, a, b, out, alpha):
        out.copy_(binary_reference(self.call.op, a, b, alpha, out.dtype))
        return out
