"""The reduction kernel interface, its call spec and its two implementations.

One interface serves `SumFwdOp`, `MeanFwdOp` and `AmaxFwdOp`: the call spec names the
reduction and the dtypes; the reduced axes are an argument of `forward` (the kernels plan
their launch from the shape at each call, so entries are shared across shapes).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Mapping

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.reduction import reduction_reference, reduction_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class ReductionCall(CallSpec):
    reduction: str  # 'sum' | 'mean' | 'amax'
    in_dtype: str
    out_dtype: str

    # `in_dtype` is the spec's T; the others name no spec index.
    spec_names: ClassVar[Mapping[str, str | None]] = {
        "reduction": None, "in_dtype": "T", "out_dtype": None}


class ReductionFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = ReductionCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, out: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
        """`out = reduction(x, axes)` for the call's reduction.

        x: the call's `in_dtype`, on the call's device, any shape and strides. axes: the
        reduced axes, sorted, distinct and non-negative (every axis for a full reduction;
        `()` for a 0-d x). out: the call's `out_dtype`, contiguous, holding the reduced
        elements in row-major order of the kept axes (with or without the size-1 axes of
        keepdim), written in full (not read). sum and mean cast x to `out_dtype` first and
        accumulate in float32 (float64 for a float64 result); amax keeps x's dtype. An
        empty reduction gives 0 (sum) or NaN (mean). Returns `out`.
        """


class ReductionTritonKernel(Kernel, ReductionFwdInterface):
    """The strided row / column Triton reductions, split in two stages when the output is
    too small to fill the SMs."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        # Nothing shape-specific is held: one entry per reduction, dtypes and device.
        return (call.reduction, call.in_dtype, call.out_dtype, call.device), lambda: cls(call)

    def forward(self, x, out, axes):
        return reduction_triton(x, out, axes, self.call.reduction)


class ReductionReferenceKernel(Kernel, ReductionFwdInterface):
    """torch with fp32 accumulation: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, out, axes):
        if out.numel():
            out.view(-1).copy_(reduction_reference(self.call.reduction, x, axes, out.dtype).reshape(-1))
        return out
