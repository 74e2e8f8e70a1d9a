"""Pointwise activation ops: ReLU, SiLU and GELU, as torch.nn.functional has them."""

from __future__ import annotations

import torch

from opspec.kernels.activation_impl import (
    ActivationFwdInterface, ActivationReferenceKernel, ActivationTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["GeluFwdOp", "ReluFwdOp", "SiluFwdOp"]

_KERNEL_TYPES = {"activation_triton": ActivationTritonKernel,
                 "activation_reference": ActivationReferenceKernel}


class _ActivationOp(Op):
    """Shared body: `out = act(input)`, in a new tensor laid out like `input` (the strides of
    `torch.empty_like`), or in `input` itself when the op runs in place."""

    kernel_types = _KERNEL_TYPES
    interfaces = {"activation": ActivationFwdInterface}
    #: set by each op: which activation this op computes
    _act: str
    inplace: bool = False

    def _activation(self) -> str:
        return self._act

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = input if self.inplace else torch.empty_like(input)
        kernel = self.kernel_for_values("activation", input.device,
                                        self._activation(), DTYPE_NAMES[input.dtype])
        return kernel.forward(input, out)


class ReluFwdOp(_ActivationOp):
    """`torch.nn.functional.relu(input, inplace)`: max(input, 0) elementwise. In place, the
    input is written and returned."""

    _act = "relu"

    def __init__(self, inplace: bool = False, *, target=None):
        self.inplace = inplace
        super().__init__(target=target)


class SiluFwdOp(_ActivationOp):
    """`torch.nn.functional.silu(input, inplace)`: input * sigmoid(input). In place, the
    input is written and returned."""

    _act = "silu"

    def __init__(self, inplace: bool = False, *, target=None):
        self.inplace = inplace
        super().__init__(target=target)


class GeluFwdOp(_ActivationOp):
    """`torch.nn.functional.gelu(input, approximate)`: input * Phi(input), with the exact
    normal CDF (`approximate='none'`) or its tanh approximation (`'tanh'`)."""

    def __init__(self, approximate: str = "none", *, target=None):
        self.approximate = approximate
        super().__init__(target=target)

    def _activation(self) -> str:
        return "gelu_tanh" if self.approximate == "tanh" else "gelu"
