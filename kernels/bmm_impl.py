"""The batched-GEMM kernel interface, its call spec and its two implementations."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.bmm import bmm_reference, bmm_triton
from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.tiling import aligned_rows
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class BmmCall(CallSpec):
    dtype: str
    # The problem's sizes: selection reads them (cuBLAS serves shapes it runs faster).
    B: int = 0
    M: int = 0
    N: int = 0
    K: int = 0


def cublas_faster(call: BmmCall) -> str | None:
    """Why cuBLAS (torch.bmm, the reference kernel) serves a 16-bit CUDA call: the shape
    classes where no configuration of the Triton kernels came within 5 % of it in the H200
    sweep (benchmarks/bmm_sweep.py, 2026-11-30), else None."""
    if call.K <= 128 and call.M >= 1024 and call.N >= 1024:
        # attention scores (K = head dim): bound by writing C; the best Triton tiles ran
        # [256 x 2048 x 2048 x 128] at 0.905x and [32 x 4096 x 4096 x 128] at 0.926x cuBLAS
        return (f"a score-like product (K = {call.K} <= 128, M, N >= 1024) runs faster in "
                "cuBLAS (the reference kernel)")
    if 128 < call.M <= 256 and call.K >= 1024 and call.N >= 4096:
        # a MoE expert's down projection: [64 x 256 x 7168 x 2048] at best 0.917x cuBLAS
        return (f"M = {call.M} in (128, 256] with K = {call.K} >= 1024 and N = {call.N} >= "
                "4096 runs faster in cuBLAS (the reference kernel)")
    return None


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
        if call.device is not None and call.device.type == "cuda":
            if call.dtype == "float32":
                # 3xTF32 ran the float32 row at 0.73x of cuBLAS on the H200: torch.bmm serves.
                return "float32 on CUDA runs faster in cuBLAS (the reference kernel)"
            reason = cublas_faster(call)
            if reason is not None:
                return reason
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
        if input.is_cuda and input.dtype in (torch.float16, torch.bfloat16):
            # rows cuBLAS cannot read in 16-byte vectors are copied first (tiling.aligned_rows)
            input, mat2 = (aligned_rows(t, bytes_only=True) for t in (input, mat2))
        if input.is_cuda or input.dtype in (torch.float32, torch.float64):
            return torch.bmm(input, mat2, out=out)  # straight into out: no copy
        out.copy_(bmm_reference(input, mat2))
        return out
