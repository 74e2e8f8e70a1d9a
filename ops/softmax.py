"""Softmax ops: torch.softmax and torch.log_softmax along one axis."""

from __future__ import annotations

from typing import ClassVar

import torch

from opspec.kernels.softmax_impl import (
    SoftmaxFwdInterface, SoftmaxReferenceKernel, SoftmaxTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, DTYPES_BY_NAME, Op

__all__ = ["LogSoftmaxFwdOp", "SoftmaxFwdOp"]


class _SoftmaxOp(Op):
    """What the two ops share: the parameters, the kernels and `forward`."""

    kernel_types = {"softmax_triton": SoftmaxTritonKernel,
                    "softmax_reference": SoftmaxReferenceKernel}
    interfaces = {"softmax": SoftmaxFwdInterface}
    _log: ClassVar[bool] = False

    def __init__(self, dim: int, *, dtype: torch.dtype | str | None = None, target=None):
        self.dim = dim
        self.dtype = dtype
        super().__init__(target=target)
        # The parameter was checked above; keep it as a torch.dtype for forward.
        self._out_dtype = (None if dtype is None else
                           dtype if isinstance(dtype, torch.dtype) else DTYPES_BY_NAME[dtype])

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out_dtype = input.dtype if self._out_dtype is None else self._out_dtype
        out = torch.empty(input.shape, dtype=out_dtype, device=input.device)
        kernel = self.kernel_for_values("softmax", input.device,
                                        DTYPE_NAMES[input.dtype], DTYPE_NAMES[out_dtype], self._log)
        return kernel.forward(input, self.dim, out)


class SoftmaxFwdOp(_SoftmaxOp):
    """`torch.softmax(input, dim, dtype=dtype)`: `exp(x - max) / sum(exp(x - max))` along
    `dim` (negative counts from the end); with `dtype`, the input is cast to it first and
    the result has that dtype. float16, bfloat16 or float32; fp32 math."""

    _log = False


class LogSoftmaxFwdOp(_SoftmaxOp):
    """`torch.log_softmax(input, dim, dtype=dtype)`: `x - max - log(sum(exp(x - max)))`
    along `dim`, with the same `dim` and `dtype` rules as `SoftmaxFwdOp`."""

    _log = True
