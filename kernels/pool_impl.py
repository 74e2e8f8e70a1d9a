"""The 2-D pooling kernel interface, its call spec and its two implementations.

MaxPool2dFwdOp and AvgPool2dFwdOp share one interface: the call spec names the mode ('max'
or 'avg') and the whole window. The Triton kernel serves every window and stride (large
windows loop at run time), so it declares no refusal; the torch reference is the `general`
fallback for every device.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.pool import Pool2dGeometry, pool2d_reference, pool2d_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class Pool2dCall(CallSpec):
    """One pooling call: the dtype, 'max' or 'avg', the window (fixed by the op) and, for
    'avg', count_include_pad and divisor_override."""

    dtype: str
    mode: str
    geometry: Pool2dGeometry
    count_include_pad: bool = True
    divisor_override: int | None = None


class Pool2dFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = Pool2dCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out = max_pool2d(x, ...)` or `avg_pool2d(x, ...)` with the call's window; the
        average summed in float32.

        x: [N, C, H, W] or [C, H, W] of the call's dtype, on the call's device, any strides;
        out: the pooled shape, same dtype, contiguous, written in full (not read).
        Returns `out`.
        """


class Pool2dTritonKernel(Kernel, Pool2dFwdInterface):
    """Rows of unit column stride (contiguous NCHW and its slices): the band kernel, a
    program per (planes, band of output rows), each input row loaded once and reduced in
    registers (see `opspec.kernels.pool.band_fits` and its `BandConfig` table). Other
    inputs (channels_last, global pooling, windows the table sends back): one program per
    tile of output rows x columns, the window unrolled (or looped for windows over 32
    elements), masked loads for padding and ceil_mode windows; a plane reduction for 1 x 1
    outputs and shared input rows for stride 1 along H (see
    `opspec.kernels.pool.pool2d_plan`)."""

    devices = TRITON_DEVICES

    def forward(self, x, out):
        c = self.call
        return pool2d_triton(x, out, c.mode, c.geometry, c.count_include_pad,
                             c.divisor_override)


class Pool2dReferenceKernel(Kernel, Pool2dFwdInterface):
    """The torch reference (float32 math): every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, out):
        c = self.call
        out.copy_(pool2d_reference(x, c.mode, c.geometry, c.count_include_pad,
                                   c.divisor_override))
        return out
