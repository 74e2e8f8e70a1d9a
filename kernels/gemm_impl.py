"""The GEMM kernel interface, its call spec and its three implementations.

`gemv_triton` serves decode shapes (M <= 16) and is preferred over the tiled `gemm_triton`
where both apply; `gemm_reference` (torch) is the general fallback for other devices.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.gemm import GEMV_MAX_M, gemm_reference, gemm_triton, gemv_launch
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class GemmCall(CallSpec):
    M: int
    N: int
    K: int
    dtype: str
    trans_a: bool
    trans_b: bool


class GemmFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = GemmCall

    @abc.abstractmethod
    def forward(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out[M, N] = op(a) @ op(b)`.

        a: [M, K] ([K, M] when `trans_a`), b: [K, N] ([N, K] when `trans_b`), both of the
        call's dtype, on the call's device, any strides; out: [M, N], same dtype, contiguous,
        written in full (not read). Returns `out`.
        """


class GemmTritonKernel(Kernel, GemmFwdInterface):
    """A tiled Triton GEMM with grouped program order, fp32 accumulation."""

    devices = TRITON_DEVICES
    applies = "dtype == 'float16' or dtype == 'bfloat16'"

    def forward(self, a, b, out):
        return gemm_triton(a, b, self.call.trans_a, self.call.trans_b, out)


class GemvTritonKernel(Kernel, GemmFwdInterface):
    """Decode-shape GEMM: all M rows in one program per block of N."""

    devices = TRITON_DEVICES
    applies = f"M <= {GEMV_MAX_M} and (dtype == 'float16' or dtype == 'bfloat16')"
    preferred_over = frozenset({"gemm_triton"})

    def forward(self, a, b, out):
        c = self.call  # the interface's contract holds: no re-checks (see gemv_launch)
        return gemv_launch(a, b, out, c.M, c.N, c.K, c.trans_a, c.trans_b)


class GemmReferenceKernel(Kernel, GemmFwdInterface):
    """torch.matmul with fp32 accumulation: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, a, b, out):
        out.copy_(gemm_reference(a, b, self.call.trans_a, self.call.trans_b))
        return out
