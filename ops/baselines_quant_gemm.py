"""Bench entry of the quant_gemm family: GemmW4A16FwdOp.

The reference dequantizes the weight in float64 (the bench passes float64 activations,
scales and zeros; the packed uint8 weight as it is) and multiplies in float64. The
baselines are what a model without a fused kernel runs: unpack the nibbles, dequantize
`(q - zeros) * scales` in the scales' dtype, cast to the activations' dtype and
`x @ w.T` (`eager`), and `torch.compile(fullgraph=True)` of that function (`compile`),
which fuses the dequantization into one kernel before the matmul.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.kernels.quant_gemm import gemm_w4a16_reference
from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]


def _w4a16_reference(op: Any, x: torch.Tensor, packed_weight: torch.Tensor,
                     scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    return gemm_w4a16_reference(x, packed_weight, scales, zeros, int(op.group_size))


def _w4a16_fn(op: Any) -> Callable[..., torch.Tensor]:
    group_size = int(op.group_size)

    def gemm_w4a16(x: torch.Tensor, packed_weight: torch.Tensor, scales: torch.Tensor,
                   zeros: torch.Tensor) -> torch.Tensor:
        n, half_k = packed_weight.shape
        q = torch.stack((packed_weight & 0xF, packed_weight >> 4), dim=-1).reshape(n, 2 * half_k)
        s = scales.repeat_interleave(group_size, dim=1)
        z = zeros.repeat_interleave(group_size, dim=1)
        w = ((q.to(scales.dtype) - z) * s).to(x.dtype)
        return x @ w.t()

    return gemm_w4a16


BENCH = {
    "GemmW4A16FwdOp": torch_entry(
        _w4a16_reference, _w4a16_fn,
        "unpack, (q - zeros) * scales in the scales' dtype, cast to x's dtype, x @ w.T"),
}
