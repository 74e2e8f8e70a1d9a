"""Dequantize a packed int4 weight into a 16-bit (or float32) ``[N, K]`` matrix on the device.

The first pass of the W4A16 prefill kernel's two-pass form (``PrefillConfig.two_pass`` in
:mod:`opspec.kernels.quant_gemm`): where M is large the product is bound by tensor-core
throughput, and a GEMM kernel whose B tile comes straight from memory runs near the
tensor cores' peak, while dequantizing in the GEMM's main loop keeps it far below. Writing
the dequantized weight once (2 bytes an element) and reading it back costs far less than
that gap on large M.

Layout as in :mod:`opspec.kernels.quant_gemm`: byte ``[n, j]`` holds ``q[n, 2j]`` in its low
nibble and ``q[n, 2j + 1]`` in its high one; ``w[n, k] = (q[n, k] - z[n, k // g]) *
s[n, k // g]``, computed in float32 and rounded once to the output's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import element_extent as _extent
from opspec.kernels.tiling import INT32_LIMIT

__all__ = ["dequant_supported", "dequantize_int4_triton"]

_INT32_LIMIT = INT32_LIMIT
# A program: 8 weight rows x up to 512 packed bytes (4 KB read, 16 KB written at 16 bits),
# each row's bytes in whole groups so that a group's scale and zero point are loaded once
# and broadcast over its bytes.
_ROWS = 8
_MAX_BYTES = 512
_WARPS = 4


def dequant_supported(group_size: int) -> bool:
    """Whether :func:`dequantize_int4_triton` takes this group size: whole bytes a group,
    a power of two of them (a group is one block of the tile)."""
    half = group_size // 2
    return group_size % 2 == 0 and half > 0 and half & (half - 1) == 0


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, z_ptr, out_ptr, N, G,
                    stride_wn, stride_wk, stride_sn, stride_sg, stride_zn, stride_zg,
                    stride_on, stride_ok,
                    ROWS: tl.constexpr, GROUPS: tl.constexpr, GB: tl.constexpr,
                    USE_INT64: tl.constexpr,
                    PDL: tl.constexpr = False):   # launched dependent (opspec.kernels.pdl)
    overlap_start(PDL)
    # The tile is [ROWS, GROUPS, GB]: GROUPS whole groups of GB bytes (2 GB weights) a row.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    grp = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    byte = tl.arange(0, GB)
    if USE_INT64:
        rows = rows.to(tl.int64)
        grp = grp.to(tl.int64)
    r3 = rows[:, None, None]
    g3 = grp[None, :, None]
    j3 = g3 * GB + byte[None, None, :]                     # the byte's column
    mask2 = (rows[:, None] < N) & (grp[None, :] < G)
    mask3 = (r3 < N) & (g3 < G)
    p = tl.load(w_ptr + r3 * stride_wn + j3 * stride_wk, mask=mask3, other=0,
                eviction_policy="evict_first")
    s = tl.load(s_ptr + rows[:, None] * stride_sn + grp[None, :] * stride_sg, mask=mask2,
                other=0.0).to(tl.float32)[:, :, None]
    z = tl.load(z_ptr + rows[:, None] * stride_zn + grp[None, :] * stride_zg, mask=mask2,
                other=0.0).to(tl.float32)[:, :, None]
    # A nibble ORed into the mantissa of 2**23 is exactly 2**23 + q: no int-to-float
    # conversion (16 a clock per SM on sm_90).
    lo = ((p & 0xF).to(tl.uint32) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
    hi = ((p >> 4).to(tl.uint32) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
    w = tl.interleave((lo - z) * s, (hi - z) * s)          # [ROWS, GROUPS, 2 GB], k order
    k3 = g3 * (2 * GB) + tl.arange(0, 2 * GB)[None, None, :]
    tl.store(out_ptr + r3 * stride_on + k3 * stride_ok, w.to(out_ptr.dtype.element_ty),
             mask=mask3)


def dequantize_int4_triton(packed_weight: torch.Tensor, scales: torch.Tensor,
                           zeros: torch.Tensor, group_size: int, out: torch.Tensor) -> torch.Tensor:
    """Write ``(q - zeros[:, k // g]) * scales[:, k // g]`` into ``out`` (``[N, K]``,
    float16, bfloat16 or float32, any strides) and return it. ``group_size`` must satisfy
    :func:`dequant_supported`; shapes are the W4A16 launchers' (checked by their caller)."""
    if not dequant_supported(group_size):
        raise ValueError(f"the dequantization kernel takes a group of 2^i bytes, "
                         f"got group_size = {group_size}")
    N, K = out.shape
    if tuple(packed_weight.shape) != (N, K // 2) or K % group_size:
        raise ValueError(f"out [{N}, {K}] needs packed_weight [{N}, {K // 2}] and K a multiple "
                         f"of group_size = {group_size}; got packed_weight "
                         f"{list(packed_weight.shape)}")
    G = K // group_size
    if N == 0 or G == 0:
        return out
    gb = group_size // 2
    groups = max(1, min(_MAX_BYTES // gb, triton.next_power_of_2(G)))
    use_int64 = max(_extent(packed_weight), _extent(scales), _extent(zeros),
                    _extent(out)) > _INT32_LIMIT
    launch(_dequant_kernel, (triton.cdiv(N, _ROWS), triton.cdiv(G, groups)),
           packed_weight, scales, zeros, out, N, G,
           packed_weight.stride(0), packed_weight.stride(1), scales.stride(0), scales.stride(1),
           zeros.stride(0), zeros.stride(1), out.stride(0), out.stride(1),
           ROWS=_ROWS, GROUPS=groups, GB=gb, USE_INT64=use_int64, num_warps=_WARPS,
           **overlap_options(out.device))
    return out
