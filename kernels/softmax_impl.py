"""The softmax kernel interface, its call spec and its two implementations.

Both ops (`SoftmaxFwdOp`, `LogSoftmaxFwdOp`) call the one interface; the call spec says
which function (`log`), the input dtype and the output dtype.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.softmax import softmax_reference, softmax_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface
from opspec.ops.op import DTYPES_BY_NAME


@dataclass(frozen=True)
class SoftmaxCall(CallSpec):
    dtype: str
    out_dtype: str
    log: bool


class SoftmaxFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = SoftmaxCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, dim: int, out: torch.Tensor) -> torch.Tensor:
        """`out = softmax(x, dim)`, or `log_softmax(x, dim)` when the call's `log` is set.

        x: any shape of rank >= 1, the call's `dtype`, on the call's device, any strides;
        dim: an axis in [-rank, rank). out: x's shape, the call's `out_dtype`, contiguous,
        written in full (not read). When `out_dtype` differs from `dtype`, x is cast to it
        first (torch's `dtype=` argument); the math is float32. Returns `out`.
        """


class SoftmaxTritonKernel(Kernel, SoftmaxFwdInterface):
    """Row-in-registers, cooperative, looped, split-row and strided Triton kernels (see
    kernels/softmax.py)."""

    devices = TRITON_DEVICES

    def __init__(self, call: SoftmaxCall) -> None:
        super().__init__(call)
        # The SM count sizes the grids; None off CUDA (the launcher then assumes an H200).
        self._sm_count = call.sm_count

    @classmethod
    def entry_for(cls, call):
        # Nothing shape-specific is held: one entry per dtype pair, function and device.
        return (call.dtype, call.out_dtype, call.log, call.device), lambda: cls(call)

    def forward(self, x, dim, out):
        return softmax_triton(x, dim, out, self.call.log, sm_count=self._sm_count)


class SoftmaxReferenceKernel(Kernel, SoftmaxFwdInterface):
    """torch.softmax / torch.log_softmax in float32: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, dim, out):
        out.copy_(softmax_reference(x, dim, DTYPES_BY_NAME[self.call.out_dtype], self.call.log))
        return out
