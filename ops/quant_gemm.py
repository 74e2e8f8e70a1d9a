"""Quantized GEMM ops."""

from __future__ import annotations

import torch

from opspec.kernels.quant_gemm import dequantize_int4, pack_int4, quantize_int4, unpack_int4
from opspec.kernels.quant_gemm_impl import (
    GemmW4A16Call, GemmW4A16FwdInterface, W4A16DecodeTritonKernel, W4A16PrefillTritonKernel,
    W4A16ReferenceKernel,
)
from opspec.ops.op import DTYPE_NAMES, Op

__all__ = ["GemmW4A16FwdOp"]


class GemmW4A16FwdOp(Op):
    """Weight-only int4 GEMM (W4A16, AWQ/GPTQ-style asymmetric groups): `y = x @ dequant(W).T`.

    Operands (W is [N, K], nn.Linear's layout):

    * `x`: [M, K] float16 or bfloat16 activations;
    * `packed_weight`: [N, K // 2] uint8, two 4-bit values q in 0..15 per byte along K: byte
      `[n, j]` holds `q[n, 2j]` in its low nibble and `q[n, 2j + 1]` in its high nibble;
    * `scales`, `zeros`: [N, K // group_size], both in x's dtype or both float32 (allowed
      pairs: float16/float16, bfloat16/bfloat16, float16/float32, bfloat16/float32); zero
      points are floats (integer values 0..15 for AWQ/GPTQ checkpoints);
    * `dequant(W)[n, k] = (q[n, k] - zeros[n, k // group_size]) * scales[n, k // group_size]`;
    * `y`: [M, N] in x's dtype, the products accumulated in float32.

    K must be even and a multiple of `group_size`. Decode calls (M <= 16) run a kernel that
    streams the packed weight; larger M a tiled kernel that dequantizes weight tiles in
    registers.

    Building the operands: `GemmW4A16FwdOp.repack(q)` packs an integer [N, K] weight with
    values 0..15 into `packed_weight`; `GemmW4A16FwdOp.quantize(w, group_size)` quantizes a
    float [N, K] weight into `(packed_weight, scales, zeros)` (min/max per group, scales and
    zeros in w's dtype); `unpack` and `dequantize` invert them.
    """

    kernel_types = {"w4a16_decode_triton": W4A16DecodeTritonKernel,
                    "w4a16_prefill_triton": W4A16PrefillTritonKernel,
                    "w4a16_reference": W4A16ReferenceKernel}
    interfaces = {"gemm_w4a16": GemmW4A16FwdInterface}

    repack = staticmethod(pack_int4)
    unpack = staticmethod(unpack_int4)
    quantize = staticmethod(quantize_int4)
    dequantize = staticmethod(dequantize_int4)

    def __init__(self, group_size: int = 128, *, target=None):
        self.group_size = group_size
        super().__init__(target=target)

    def forward(self, x: torch.Tensor, packed_weight: torch.Tensor, scales: torch.Tensor,
                zeros: torch.Tensor) -> torch.Tensor:
        M, K = x.shape
        N = packed_weight.shape[0]
        out = x.new_empty((M, N))
        call = GemmW4A16Call(M, N, K, self.group_size, DTYPE_NAMES[x.dtype],
                             DTYPE_NAMES[scales.dtype], device=x.device)
        return self.kernel_for("gemm_w4a16", call).forward(x, packed_weight, scales, zeros, out)
