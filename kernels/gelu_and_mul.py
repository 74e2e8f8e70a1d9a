"""GeluAndMul: ``out = gelu(x[..., :N], approximate) * x[..., N:]`` for ``x`` of shape ``[M, 2N]``.

Two plain functions; the dispatch classes are in :mod:`opspec.kernels.gelu_and_mul_impl`.

* :func:`gelu_and_mul_reference` -- the torch reference (fp32 math, cast back).
* :func:`gelu_and_mul_triton` -- a memory-bound Triton kernel writing into ``out``.

The kernel reads ``2*M*N`` and writes ``M*N`` elements, so on an H200 it is bound by HBM
bandwidth (about 4.2 TB/s measured for a copy). Layout of the work: each program takes a
tile of ``BLOCK_M`` rows by ``BLOCK_N`` columns of the output (and the matching gate and
up tiles of ``x``); a 1-D grid of ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)`` programs, column
blocks fastest, so that neighbouring programs stream neighbouring memory.

The tile holds about ``TILE = 1024`` outputs on 4 warps, 8 contiguous outputs per thread
per operand (one 16-byte vector in fp16/bf16). A long row is cut into column blocks of
1024; a short row is not left to a small program: ``BLOCK_M`` rows are stacked until the
tile is full (``N = 2048`` gives two programs per row, ``N = 256`` four rows per
program). SiluAndMul's kernel, with one row per program and up to 2048 columns on 8
warps, reached about 4.1 TB/s on long rows but 1.6 TB/s on rows of 2048, where
``torch.compile``'s flat 1024-element blocks on 4 warps did 2.9 TB/s; this kernel takes
that block and warp count for every row length. When the grid would be too small to
fill the 132 SMs a few times (decode), the tile is halved down to 256 outputs.

Block sizes are picked in plain Python from the shape (no autotuning at call time).
Triton specialises integer arguments that equal 1 or are multiples of 16, so a unit
column stride and 16-aligned ``N`` / row strides keep the loads vectorised although the
strides are run-time arguments. Offsets are int64 only when one could pass ``2**31 - 1``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from opspec.kernels.activation import gelu_erf_fp32
from opspec.kernels.silu_and_mul import gated_operands

__all__ = [
    "gelu_and_mul_block",
    "gelu_and_mul_reference",
    "gelu_and_mul_triton",
]

_TARGET_PROGRAMS = 4 * 132
_TILE = 1024
_MIN_TILE = 256
_INT32_LIMIT = 2**31 - 1
_APPROXIMATIONS = ("none", "tanh")


def gelu_and_mul_reference(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(x[..., :N], approximate) * x[..., N:]`` computed in float32 (float64 stays
    float64), returned in ``x.dtype``."""
    if approximate not in _APPROXIMATIONS:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"last dimension of x must be even, got {x.shape[-1]}")
    n = x.shape[-1] // 2
    xf = x if x.dtype == torch.float64 else x.float()
    return (F.gelu(xf[..., :n], approximate=approximate) * xf[..., n:]).to(x.dtype)


@triton.jit
def _gelu_and_mul_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    n_col_blocks,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    TANH: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_INT64: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = (pid // n_col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = (rows < M)[:, None] & (cols < N)[None, :]

    gate_ptrs = x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + N * stride_xn, mask=mask, other=0.0).to(tl.float32)
    if TANH:
        # 0.5 * g * (1 + tanh(u)) = g * sigmoid(2u) = g / (1 + exp(-2u)), with
        # u = sqrt(2 / pi) * (g + 0.044715 * g^3): one exp, no cancellation in 1 + tanh.
        u = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        act = gate / (1.0 + tl.exp(-2.0 * u))
    else:
        # libdevice's erff made this path compute-bound (3.3 TB/s on an H200 where tanh
        # reached 4.24): gelu_erf_fp32 is a cheaper form, 29 SASS instructions per
        # element here against 44.6, within 2e-6 * |gate| of gelu.
        act = gelu_erf_fp32(gate)
    tl.store(
        out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on,
        (act * up).to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def gelu_and_mul_block(M: int, N: int) -> tuple[int, int, int]:
    """The ``(BLOCK_M, BLOCK_N, num_warps)`` the launcher uses for an ``[M, 2N]`` input.

    The tile holds ``TILE = 1024`` outputs (halved down to 256 while the grid would have
    fewer than ``4 * 132`` programs): ``BLOCK_N = min(next_power_of_2(N), tile)`` and
    ``BLOCK_M`` the rows that fill the rest, never more than ``M`` needs; ``num_warps``
    gives each thread 8 outputs (4 warps for a full tile).
    """
    tile = _TILE
    while tile > _MIN_TILE:
        bn = min(triton.next_power_of_2(max(N, 1)), tile)
        bm = min(triton.next_power_of_2(max(M, 1)), tile // bn)
        if triton.cdiv(M, bm) * triton.cdiv(N, bn) >= _TARGET_PROGRAMS:
            break
        tile //= 2
    block_n = min(triton.next_power_of_2(max(N, 1)), tile)
    block_m = min(triton.next_power_of_2(max(M, 1)), tile // block_n)
    num_warps = max(1, min(4, block_m * block_n // 256))
    return block_m, block_n, num_warps


def gelu_and_mul_triton(x: torch.Tensor, out: torch.Tensor, approximate: str = "none"
                        ) -> torch.Tensor:
    """Write ``gelu(x[:, :N], approximate) * x[:, N:]`` into ``out`` (``[M, N]``); return it.

    ``x`` is ``[M, 2N]`` of dtype fp16, bf16 or fp32 with any strides (row and column
    strides are passed to the kernel); ``out`` has ``x``'s dtype and shape ``[M, N]``, any
    strides (contiguous is the fast case), and does not overlap ``x``. ``approximate`` is
    ``'none'`` (erf) or ``'tanh'``. The math is done in fp32. Nothing is launched when
    ``M == 0`` or ``N == 0``. No allocation, no host sync. Inputs with more than two
    dimensions are viewed as ``[-1, 2N]`` (a copy of ``x`` only if its leading dimensions
    cannot be flattened as a view).
    """
    if approximate not in _APPROXIMATIONS:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    x, out, M, N = gated_operands(x, out)
    if M == 0 or N == 0:
        return out

    block_m, block_n, num_warps = gelu_and_mul_block(M, N)
    n_col_blocks = triton.cdiv(N, block_n)
    # The furthest element a (masked-off) lane can address, rows and columns both padded.
    pad_m, pad_n = triton.cdiv(M, block_m) * block_m, n_col_blocks * block_n
    use_int64 = (
        (pad_m - 1) * abs(x.stride(0)) + (pad_n + N - 1) * abs(x.stride(1)) > _INT32_LIMIT
        or (pad_m - 1) * abs(out.stride(0)) + (pad_n - 1) * abs(out.stride(1)) > _INT32_LIMIT
    )
    grid = (triton.cdiv(M, block_m) * n_col_blocks,)
    _gelu_and_mul_kernel[grid](
        x,
        out,
        M,
        N,
        n_col_blocks,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        TANH=approximate == "tanh",
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        USE_INT64=use_int64,
        num_warps=num_warps,
    )
    return out
