"""SiluAndMul: ``out = silu(x[..., :N]) * x[..., N:]`` for ``x`` of shape ``[M, 2N]``.

Two plain functions; the dispatch classes are built elsewhere.

* :func:`silu_and_mul_reference` -- the torch reference (fp32 math, cast back).
* :func:`silu_and_mul_triton` -- a memory-bound Triton kernel writing into ``out``.

The kernel reads ``2*M*N`` and writes ``M*N`` elements, so on an H200 it is bound by
HBM bandwidth (about 4.2 TB/s measured for a copy).  Layout of the work: a 1-D grid
of ``M * cdiv(N, BLOCK)`` programs, program ``pid`` taking row ``pid // nblk`` and the
column block ``pid % nblk``.  ``BLOCK`` is a power of two picked from ``N`` in plain
Python (no autotuning at call time), at most 2048, lowered when the grid would be
too small to fill the 132 SMs; with 8 warps a 2048 block gives each thread 8
contiguous elements per operand, one 16-byte vector in fp16/bf16.  Triton
specialises integer arguments that equal 1 or are multiples of 16, so a unit column
stride and 16-aligned ``N`` / row strides keep the loads vectorised although the
strides are passed as run-time arguments.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

__all__ = [
    "silu_and_mul_reference",
    "silu_and_mul_triton",
    "silu_and_mul_block",
    "gated_operands",
]

# Enough programs to give every SM of an H200 (132) a few resident programs.
_TARGET_PROGRAMS = 4 * 132
_MAX_BLOCK = 2048
_MIN_BLOCK = 256
_INT32_LIMIT = 2**31 - 1

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


def gated_operands(x: torch.Tensor, out: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The checks of a gated activation's launcher (`[M, 2N] -> [M, N]`, one dtype of
    ``_SUPPORTED``): ``(x, out, M, N)``, with inputs of more than two dimensions viewed as
    ``[-1, 2N]`` (a copy of ``x`` only if its leading dimensions cannot be flattened)."""
    if x.dim() != 2:
        x = x.reshape(-1, x.shape[-1])
        out = out.view(-1, out.shape[-1])
    M, two_n = x.shape
    N = two_n // 2
    if two_n != 2 * N:
        raise ValueError(f"last dimension of x must be even, got {two_n}")
    if out.shape[0] != M or out.shape[1] != N:
        raise ValueError(f"out must have shape [{M}, {N}], got {list(out.shape)}")
    if out.dtype != x.dtype or x.dtype not in _SUPPORTED:
        raise TypeError(f"x and out must share a dtype in {_SUPPORTED}, got {x.dtype}, {out.dtype}")
    return x, out, M, N


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :N]) * x[..., N:]`` computed in float32, returned in ``x.dtype``."""
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"last dimension of x must be even, got {x.shape[-1]}")
    n = x.shape[-1] // 2
    gate = x[..., :n].float()
    up = x[..., n:].float()
    return (F.silu(gate) * up).to(x.dtype)


@triton.jit
def _silu_and_mul_kernel(
    x_ptr,
    out_ptr,
    N,
    n_col_blocks,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    BLOCK: tl.constexpr,
    USE_INT64: tl.constexpr,
):
    pid = tl.program_id(0)
    row = pid // n_col_blocks
    col_block = pid % n_col_blocks
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    if USE_INT64:
        row = row.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = cols < N

    x_row = x_ptr + row * stride_xm
    gate = tl.load(x_row + cols * stride_xn, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + (cols + N) * stride_xn, mask=mask, other=0.0).to(tl.float32)
    # silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp(-g) -> inf gives -0.0, as torch.
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(
        out_ptr + row * stride_om + cols * stride_on,
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def silu_and_mul_block(M: int, N: int) -> tuple[int, int]:
    """The ``(BLOCK, num_warps)`` the launcher uses for an ``[M, 2N]`` input.

    ``BLOCK`` is ``next_power_of_2(N)`` capped at 2048, halved (down to 256) while the
    grid would hold fewer than ``4 * 132`` programs, so that decode-sized inputs still
    spread over the SMs; ``num_warps`` gives each thread 8 elements per operand.
    """
    block = min(triton.next_power_of_2(max(N, 1)), _MAX_BLOCK)
    while block > _MIN_BLOCK and M * triton.cdiv(N, block) < _TARGET_PROGRAMS:
        block //= 2
    num_warps = max(1, min(8, block // 256))
    return block, num_warps


def silu_and_mul_triton(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Write ``silu(x[:, :N]) * x[:, N:]`` into ``out`` (``[M, N]``) and return ``out``.

    ``x`` is ``[M, 2N]`` of dtype fp16, bf16 or fp32 with any strides (row stride and
    column stride are passed to the kernel); ``out`` has ``x``'s dtype and shape
    ``[M, N]`` (any strides; contiguous is the fast case).  The math is done in fp32.
    Nothing is launched when ``M == 0`` or ``N == 0``.  No allocation, no host sync.
    Inputs with more than two dimensions are viewed as ``[-1, 2N]`` (which copies
    ``x`` only if its leading dimensions cannot be flattened as a view).
    """
    x, out, M, N = gated_operands(x, out)
    two_n = 2 * N
    if M == 0 or N == 0:
        return out

    block, num_warps = silu_and_mul_block(M, N)
    n_col_blocks = triton.cdiv(N, block)
    use_int64 = (
        (M - 1) * abs(x.stride(0)) + (two_n - 1) * abs(x.stride(1)) + block > _INT32_LIMIT
        or (M - 1) * abs(out.stride(0)) + (N - 1) * abs(out.stride(1)) + block > _INT32_LIMIT
    )
    grid = (M * n_col_blocks,)
    _silu_and_mul_kernel[grid](
        x,
        out,
        N,
        n_col_blocks,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK=block,
        USE_INT64=use_int64,
        num_warps=num_warps,
    )
    return out
