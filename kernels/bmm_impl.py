"""The batched-GEMM kernel interface, its call spec and its two implementations."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.bmm import bmm_reference, bmm_triton
from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class BmmCall(CallSpec):
    dtype: str


class BmmFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = BmmCall

    @abc.abstractmethod
    def forward(self, input: torch.Tensor, mat2: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out[b] = input[b] @ mat2[b]` for every b, accumulated in float32 (float32 inputs
        with float32 accuracy: no plain TF32).

        input: [B, M, K], mat2: [B, K, N], both of the call's dtype, on the call's device, any
        strides; out: [B, M, N], same dtype and device, any strides, not overlapping the
        inputs, written in full (not read). Returns `out`.
        """


class BmmTritonKernel(Kernel, BmmFwdInterface):
    """Tiled Triton batched GEMM: batch x tiles grid, grouped tile order, fp32 accumulation,
    float32 as 3xTF32 (float32 accuracy on tensor cores). On Hopper, float16/bfloat16 calls
    whose tensors TMA can describe run the persistent TMA-descriptor kernel instead (the
    choice is made per call, in `bmm_triton`)."""

    devices = TRITON_DEVICES

    @classmethod
    def refusal(cls, call):
        if call.dtype == "float32" and call.device is not None and call.device.type == "cuda":
            # 3xTF32 ran the float32 row at 0.73x of cuBLAS on the H200: torch.bmm serves.
            return "float32 on CUDA runs faster in cuBLAS (the reference kernel)"
        return super().refusal(call)

    @classmethod
    def entry_for(cls, call):
        # Nothing shape-specific is held: one entry per dtype and device.
        return (call.dtype, call.device), lambda: cls(call)

    def forward(self, input, mat2, out):
        return bmm_triton(input, mat2, out)


class BmmReferenceKernel(Kernel, BmmFwdInterface):
    """torch.bmm (16-bit inputs accumulated in float32): every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, input, mat2, out):
        if input.is_cuda or input.dtype in (torch.float32, torch.float64):
            return torch.bmm(input, mat2, out=out)  # straight into out: no copy
        out.copy_(bmm_reference(input, mat2))
        return out
