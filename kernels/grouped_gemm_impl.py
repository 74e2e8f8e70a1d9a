"""The grouped GEMM kernel interface, its call spec and its two implementations.

`grouped_gemm_triton` (one launch, the group sizes read on the device) serves CUDA;
`grouped_gemm_reference` (torch, a loop over the groups that reads the sizes on the host)
is the general fallback for every device.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES, TRITON_INTERPRETED
from opspec.kernels.grouped_gemm import grouped_gemm_reference, grouped_gemm_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class GroupedGemmCall(CallSpec):
    dtype: str
    transpose_a: bool
    transpose_b: bool


class GroupedGemmFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = GroupedGemmCall

    @abc.abstractmethod
    def forward(self, a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor,
                out: torch.Tensor) -> torch.Tensor:
        """`out[rows of g] = op(a)[rows of g] @ op(b[g])` for each group g, fp32 accumulation.

        a: [M, K] ([K, M] when `transpose_a`), b: [G, K, N] ([G, N, K] when `transpose_b`),
        both of the call's dtype, on the call's device, any strides; batch_sizes: [G] int32
        or int64 on the same device, the rows of each group in order, adding up to M (a
        group may be empty); out: [M, N], same dtype, contiguous, written in full (not read).
        Returns `out`.
        """


class GroupedGemmTritonKernel(Kernel, GroupedGemmFwdInterface):
    """One Triton launch over an upper bound of the output tiles; each program finds its
    group from the sizes on the device (no host synchronisation), fp32 accumulation."""

    devices = TRITON_DEVICES

    @classmethod
    def refusal(cls, call):
        # The CPU interpreter's bfloat16 tl.dot is wrong: the reference serves those calls.
        if TRITON_INTERPRETED and call.dtype == "bfloat16" and (
                call.device is None or call.device.type == "cpu"):
            return "the Triton interpreter's bfloat16 tl.dot is wrong on the CPU"
        return super().refusal(call)

    @classmethod
    def entry_for(cls, call):
        # The kernel object holds nothing shape-specific.
        return call, lambda: cls(call)

    def forward(self, a, b, batch_sizes, out):
        return grouped_gemm_triton(a, b, batch_sizes, self.call.transpose_a,
                                   self.call.transpose_b, out)


class GroupedGemmReferenceKernel(Kernel, GroupedGemmFwdInterface):
    """A torch.matmul per group (the sizes read on the host): every device, the general
    fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, a, b, batch_sizes, out):
        out.copy_(grouped_gemm_reference(a, b, batch_sizes, self.call.transpose_a,
                                         self.call.transpose_b))
        return out
