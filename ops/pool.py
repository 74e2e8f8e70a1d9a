"""Pooling ops: torch.nn.functional.max_pool2d and avg_pool2d, forward."""

from __future__ import annotations

import torch

from opspec.kernels.pool import pool2d_geometry, pool2d_out_size
from opspec.kernels.pool_impl import (
    Pool2dCall, Pool2dFwdInterface, Pool2dReferenceKernel, Pool2dTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["AvgPool2dFwdOp", "MaxPool2dFwdOp"]


class _Pool2d:
    """What the two ops share: the output allocation and the call of the one interface."""

    kernel_types = {"pool2d_triton": Pool2dTritonKernel,
                    "pool2d_reference": Pool2dReferenceKernel}
    interfaces = {"pool2d": Pool2dFwdInterface}

    def _pool(self, input: torch.Tensor, call: Pool2dCall) -> torch.Tensor:
        H_out, W_out = pool2d_out_size(input.shape[-2], input.shape[-1], call.geometry)
        out = input.new_empty((*input.shape[:-2], H_out, W_out))
        return self.kernel_for("pool2d", call).forward(input, out)


class MaxPool2dFwdOp(_Pool2d, Op):
    """`torch.nn.functional.max_pool2d(input, kernel_size, stride, padding, dilation,
    ceil_mode)` on [N, C, H, W] or [C, H, W]: the maximum of each window (padding never
    selected; NaN when the window holds a NaN). Values only (no `return_indices`). The
    output is a new contiguous tensor."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 ceil_mode: bool = False, *, target=None):
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.ceil_mode = ceil_mode
        super().__init__(target=target)
        # The signature checks have validated the parameters (per axis, positive ...).
        self._geometry = pool2d_geometry(kernel_size, stride, padding, dilation, ceil_mode)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        call = Pool2dCall(DTYPE_NAMES[input.dtype], "max", self._geometry,
                          device=input.device)
        return self._pool(input, call)


class AvgPool2dFwdOp(_Pool2d, Op):
    """`torch.nn.functional.avg_pool2d(input, kernel_size, stride, padding, ceil_mode,
    count_include_pad, divisor_override)` on [N, C, H, W] or [C, H, W]: the float32 sum of
    each window divided by `divisor_override` when given, else by the window's size clipped
    to the padded input (`count_include_pad`) or to the input. The output is a new
    contiguous tensor."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None, *, target=None):
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override
        super().__init__(target=target)
        self._geometry = pool2d_geometry(kernel_size, stride, padding, 1, ceil_mode)
        self._divisor = None if divisor_override is None else int(divisor_override)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        call = Pool2dCall(DTYPE_NAMES[input.dtype], "avg", self._geometry,
                          bool(self.count_include_pad), self._divisor, device=input.device)
        return self._pool(input, call)
