"""The W4A16 GEMM kernel interface, its call spec and its three implementations.

`w4a16_decode_triton` serves M <= 16 (it refuses larger M) and is preferred over the tiled
`w4a16_prefill_triton`, which serves every M; `w4a16_reference` (torch) is the general
fallback for other devices.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.quant_gemm import (
    DECODE_MAX_M, gemm_w4a16_reference, w4a16_decode_triton, w4a16_prefill_triton,
)
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class GemmW4A16Call(CallSpec):
    M: int
    N: int
    K: int
    group_size: int
    dtype: str
    scale_dtype: str


class GemmW4A16FwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = GemmW4A16Call

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, packed_weight: torch.Tensor, scales: torch.Tensor,
                zeros: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out = x @ dequant(W).T`, accumulated in float32, where
        `dequant(W)[n, k] = (q[n, k] - zeros[n, k // g]) * scales[n, k // g]`, g the call's
        `group_size`, and byte `packed_weight[n, j]` holds q[n, 2j] (low nibble) and
        q[n, 2j + 1] (high nibble).

        x: [M, K] of the call's dtype (float16 | bfloat16); packed_weight: [N, K // 2] uint8;
        scales, zeros: [N, K // g] of the call's scale_dtype; all on the call's device, any
        strides. out: [M, N], x's dtype, contiguous, written in full (not read). Returns `out`.
        """


class W4A16DecodeTritonKernel(Kernel, GemmW4A16FwdInterface):
    """Decode (M <= 16): streams the packed weight. With 128-wide groups (the workloads')
    at M <= 8, or at M <= 16 on weights of 160 MiB or more (by TMA, sm_90), the
    tensor-core kernel (`DecodeConfig.tc`): operand tiles laid out as mma.sync
    fragments, nibbles dequantized by asm into 16-bit pairs, float32 MMAs, scale and zero
    point per group; else the MMA kernel (BLOCK_N rows a program, split-K when N is small)
    or, where the table says so (small M), float32 FMAs on CUDA cores (`DecodeConfig.gemv`)."""

    devices = TRITON_DEVICES
    preferred_over = frozenset({"w4a16_prefill_triton"})

    @classmethod
    def refusal(cls, call):
        if call.M > DECODE_MAX_M:
            return f"M = {call.M} rows: the decode kernel holds at most {DECODE_MAX_M}"
        return super().refusal(call)

    @classmethod
    def entry_for(cls, call):
        # Nothing shape-specific is held: one entry per dtype pair, group size and device.
        return (call.dtype, call.scale_dtype, call.group_size, call.device), lambda: cls(call)

    def forward(self, x, packed_weight, scales, zeros, out):
        return w4a16_decode_triton(x, packed_weight, scales, zeros, self.call.group_size, out)


class W4A16PrefillTritonKernel(Kernel, GemmW4A16FwdInterface):
    """Tiled (any M): a [BLOCK_N, BLOCK_K] weight tile dequantized in registers per step,
    tl.dot with the x tile, float32 accumulation, grouped program order; from 512 tokens
    (groups of 2^i bytes) two passes: the weight dequantized into a bounded scratch matrix
    in x's dtype, then the GEMM kernel on it, a slice of rows at a time."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        return (call.dtype, call.scale_dtype, call.group_size, call.device), lambda: cls(call)

    def forward(self, x, packed_weight, scales, zeros, out):
        return w4a16_prefill_triton(x, packed_weight, scales, zeros, self.call.group_size, out)


class W4A16ReferenceKernel(Kernel, GemmW4A16FwdInterface):
    """torch: dequantize in float32, matmul, cast: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, packed_weight, scales, zeros, out):
        out.copy_(gemm_w4a16_reference(x, packed_weight, scales, zeros, self.call.group_size))
        return out
