"""SiluAndMul: ``out = silu(x[..., :N]) * x[..., N:]`` for ``x`` of shape ``[M, 2N]``.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.silu_and_mul_impl`.

* :func:`silu_and_mul_reference` -- the torch reference (fp32 math, cast back).
* :func:`silu_and_mul_triton` -- a memory-bound Triton kernel writing into ``out``.
* :func:`gated_triton` -- the same kernel for any gate activation (SiLU, GELU erf / tanh).

The kernel reads ``2*M*N`` and writes ``M*N`` elements, so on an H200 it is bound by
HBM bandwidth (about 4.2 TB/s measured for a copy).  The kernel is shared by the gated
activations (:func:`gated_triton`; GeluAndMul's launcher calls it too): each program
takes a tile of ``BLOCK_M`` rows by ``BLOCK_N`` columns of the output (and the matching
gate and up tiles of ``x``), column blocks fastest so that neighbouring programs stream
neighbouring memory.  ``BLOCK_N`` is the power of two that pads a row least (14336 ->
1024, 18944 -> 512), and short rows are stacked until the tile is full; an axis the
tiles divide is not masked.  How much a tile holds, the warps, a persistent grid and
cache hints are a :class:`~opspec.kernels.activation.StreamConfig` from
:data:`GATED_TABLE` (see the table block), picked in plain Python (no autotuning at call
time).  Triton specialises integer arguments that equal 1 or are multiples of 16, so a
unit column stride and 16-aligned ``N`` / row strides keep the loads vectorised although
the strides are passed as run-time arguments.  Offsets are int64 only when one could
pass ``2**31 - 1``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from opspec.kernels.activation import (
    ACTIVATIONS, StreamConfig, _activate, _cdiv, _pow2, pick_config, stream_grid,
)
from opspec.kernels.launch import LaunchMemo
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple

__all__ = [
    "GATED_TABLE",
    "gated_blocks",
    "gated_config",
    "gated_operands",
    "gated_triton",
    "silu_and_mul_block",
    "silu_and_mul_reference",
    "silu_and_mul_triton",
]

_INT32_LIMIT = INT32_LIMIT
_MIN_BLOCK_N = 128

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
#: Prepared launches of 2-D calls, by (act, shapes, strides, dtypes, device, pointer
#: alignments): everything the launch below is computed from (GATED_TABLE is fixed).
_PREPARED = LaunchMemo()

# ---- the configuration table (SiluAndMul and GeluAndMul) ---------------------------------
# Set from benchmarks/elementwise_sweep.py on an H200: each sweep row prints its best
# variant, which goes into the row below that the sweep row falls under. Rows: (element
# bytes of x or 0 for any, largest output count M * N or None, StreamConfig); the first
# fit wins. `block` is the outputs of one tile (rows x columns, see gated_blocks).
#
# Why these defaults (opspec bench on an H200, L2 flushed, before this table existed):
# * 1024 outputs on 4 warps: one 16-byte vector of gate and one of up per thread in
#   16-bit (two loads in flight), two each in fp32. GeluAndMul's kernel had this tile and
#   SiluAndMul's 2048 outputs on 8 warps (the same vector per thread); both ran at 4.07-
#   4.28 TB/s on the large rows, level with torch.compile (1024 elements, 4 warps), and
#   both at 3.3 TB/s on dsv3-expert [8192, 2 * 2048] bf16 (30 us), as did compile (30.0)
#   and the same-sized Add [4096, 4096] (eager 29.1). Eager Add at 96 and 384 MiB (29.1,
#   97.3 us) fits 6.4 us + bytes / 4.43 TB/s: at ~100 MB a fixed ~6 us of the timed
#   interval is not streaming, for every kernel; the sweep times a plain copy of the same
#   bytes beside the variants to show how much of it a layout can recover.
# * Decode (at most 2**19 outputs): 512 outputs on 2 warps, the tile GeluAndMul already
#   chose there ([32, 14336]: 5.3 us against compile's 5.7 and eager's 12.1).
# * No persistent grid and no cache hints: nothing measured says they help; the sweep
#   times both on every row.
# * H200 sweep (elementwise_sweep.py, 2026-11-30): large rows 1.012 -> 1.008 (geomean of
#   time / each row's best) with 2048 outputs on 4 warps; dsv3-expert [8192, 2 * 4096] bf16
#   29.3 us, 3.44 TB/s, where a plain copy of the same 96 MiB took 28.9 us (3.50 TB/s).
GATED_TABLE = (
    (0, 1 << 19, StreamConfig(512, 2)),
    (0, None, StreamConfig(2048, 4)),
)
# ------------------------------------------------------------------------------------------


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
def _gated_tile(x_ptr, out_ptr, t, M, N, n_col_blocks, stride_xm, stride_xn, stride_om,
                stride_on, ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                MASK_M: tl.constexpr, MASK_N: tl.constexpr, USE_INT64: tl.constexpr,
                LOAD_POLICY: tl.constexpr):
    rows = (t // n_col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (t % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    # Only an axis the tiles do not divide is masked (a row mask is constant along the
    # columns: the vectors stay 16 bytes wide).
    if MASK_M:
        if MASK_N:
            mask = (rows < M)[:, None] & (cols < N)[None, :]
        else:
            mask = (rows < M)[:, None]
        other = 0.0
    elif MASK_N:
        mask = (cols < N)[None, :]
        other = 0.0
    else:
        mask = None
        other = None
    x_rows = x_ptr + rows[:, None] * stride_xm
    gate = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=other,
                   eviction_policy=LOAD_POLICY)
    up = tl.load(x_rows + (cols + N)[None, :] * stride_xn, mask=mask, other=other,
                 eviction_policy=LOAD_POLICY)
    y = _activate(gate, ACT) * up.to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on,
             y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gated_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    n_col_blocks,
    n_tiles,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    ACT: tl.constexpr,           # activation.ACTIVATIONS code: 1 silu, 2 gelu, 3 gelu_tanh
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASK_M: tl.constexpr,        # M % BLOCK_M != 0
    MASK_N: tl.constexpr,        # N % BLOCK_N != 0
    USE_INT64: tl.constexpr,
    PERSIST: tl.constexpr,       # fewer programs than tiles: each loops over tiles
    LOAD_POLICY: tl.constexpr,   # '' or 'evict_first'
    ALIGN: tl.constexpr = 1,     # divides N and the row strides (tiling.row_multiple)
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """``out = act(x[:, :N]) * x[:, N:]`` with the math in fp32."""
    overlap_start(PDL)
    if ALIGN > 1:
        N = as_multiple(N, ALIGN)
        stride_xm = as_multiple(stride_xm, ALIGN)
        stride_om = as_multiple(stride_om, ALIGN)
    pid = tl.program_id(0)
    if PERSIST:
        for t in tl.range(pid, n_tiles, tl.num_programs(0)):
            _gated_tile(x_ptr, out_ptr, t, M, N, n_col_blocks, stride_xm, stride_xn,
                        stride_om, stride_on, ACT, BLOCK_M, BLOCK_N, MASK_M, MASK_N,
                        USE_INT64, LOAD_POLICY)
    else:
        _gated_tile(x_ptr, out_ptr, pid, M, N, n_col_blocks, stride_xm, stride_xn,
                    stride_om, stride_on, ACT, BLOCK_M, BLOCK_N, MASK_M, MASK_N,
                    USE_INT64, LOAD_POLICY)


def gated_config(M: int, N: int, elem_bytes: int) -> StreamConfig:
    """The configuration of an ``[M, 2N]`` input of ``elem_bytes``-byte elements: its row
    of :data:`GATED_TABLE`."""
    return pick_config(GATED_TABLE, M * N, elem_bytes)


@functools.lru_cache(maxsize=1024)
def gated_blocks(M: int, N: int, cfg: StreamConfig) -> tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_N, num_warps)`` for ``M`` rows of ``N`` outputs.

    The tile holds ``cfg.block`` outputs. ``BLOCK_N`` is the power of two (at least 128,
    or the row rounded up when shorter) that pads a row least, ties to the larger
    (14336 -> 1024, 18944 -> 512 rather than 1024 with 2.7 % of the lanes idle), and
    ``BLOCK_M`` the rows that fill the rest of the tile, never more than ``M`` needs. A
    tile clipped to a small problem keeps the outputs per thread of ``cfg`` (fewer warps).
    """
    tile = cfg.block
    top = min(_pow2(max(N, 1)), tile)
    block_n, best = top, _cdiv(N, top) * top
    c = top // 2
    while c >= _MIN_BLOCK_N:
        padded = _cdiv(N, c) * c
        if padded < best:
            block_n, best = c, padded
        c //= 2
    block_m = max(1, min(tile // block_n, _pow2(max(M, 1))))
    num_warps = max(1, cfg.num_warps * (block_m * block_n) // tile)
    return block_m, block_n, num_warps


def silu_and_mul_block(M: int, N: int) -> tuple[int, int]:
    """``(outputs a program, num_warps)`` the launcher uses for an ``[M, 2N]`` 16-bit
    input (its :data:`GATED_TABLE` row, clipped to the problem by :func:`gated_blocks`)."""
    block_m, block_n, num_warps = gated_blocks(M, N, gated_config(M, N, 2))
    return block_m * block_n, num_warps


def gated_triton(x: torch.Tensor, out: torch.Tensor, act: str,
                 config: StreamConfig | None = None) -> torch.Tensor:
    """Write ``act(x[:, :N]) * x[:, N:]`` into ``out`` (``[M, N]``) and return ``out``;
    ``act`` is 'silu', 'gelu' (erf form) or 'gelu_tanh', the math in fp32.

    ``x`` is ``[M, 2N]`` (more dimensions are viewed as ``[-1, 2N]``) of dtype fp16, bf16
    or fp32 with any strides; ``out`` has ``x``'s dtype and shape ``[M, N]``, any strides,
    and does not overlap ``x``. Nothing is launched when ``M == 0`` or ``N == 0``. No
    allocation, no host sync. ``config`` overrides :data:`GATED_TABLE` (the sweep's
    variants).
    """
    key = None
    if config is None and x.dim() == 2:
        key = (act, x.shape, x.stride(), out.shape, out.stride(), x.dtype, out.dtype,
               x.get_device(), x.data_ptr() % 16, out.data_ptr() % 16)
        prepared = _PREPARED.get(key)
        if prepared is not None:  # this very launch ran before: replay it
            prepared(x, out)
            return out
    code = ACTIVATIONS[act]
    x, out, M, N = gated_operands(x, out)
    if M == 0 or N == 0:
        return out
    cfg = config or pick_config(GATED_TABLE, M * N, x.element_size())
    block_m, block_n, num_warps = gated_blocks(M, N, cfg)
    n_row_blocks, n_col_blocks = _cdiv(M, block_m), _cdiv(N, block_n)
    n_tiles = n_row_blocks * n_col_blocks
    # The furthest element a (masked-off) lane can address, rows and columns both padded.
    pad_m, pad_n = n_row_blocks * block_m, n_col_blocks * block_n
    use_int64 = (
        (pad_m - 1) * abs(x.stride(0)) + (pad_n + N - 1) * abs(x.stride(1)) > _INT32_LIMIT
        or (pad_m - 1) * abs(out.stride(0)) + (pad_n - 1) * abs(out.stride(1)) > _INT32_LIMIT
    )
    grid, persist = stream_grid(cfg, n_tiles, x.device)
    _PREPARED.launch(key, 2, _gated_kernel, (grid,), x, out, M, N, n_col_blocks, n_tiles,
                     x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                     ACT=code, BLOCK_M=block_m, BLOCK_N=block_n, MASK_M=M % block_m != 0,
                     MASK_N=N % block_n != 0, USE_INT64=use_int64, PERSIST=persist,
                     LOAD_POLICY="evict_first" if cfg.evict_first else "",
                     ALIGN=(row_multiple(x.element_size(), N, x.stride(0), out.stride(0))
                            if x.stride(1) == out.stride(1) == 1 else 1),
                     num_warps=num_warps, **overlap_options(x.device))
    return out


def silu_and_mul_triton(x: torch.Tensor, out: torch.Tensor,
                        config: StreamConfig | None = None) -> torch.Tensor:
    """Write ``silu(x[:, :N]) * x[:, N:]`` into ``out`` (``[M, N]``) and return ``out``.

    ``x`` is ``[M, 2N]`` of dtype fp16, bf16 or fp32 with any strides (row stride and
    column stride are passed to the kernel); ``out`` has ``x``'s dtype and shape
    ``[M, N]`` (any strides; contiguous is the fast case).  The math is done in fp32.
    Nothing is launched when ``M == 0`` or ``N == 0``.  No allocation, no host sync.
    Inputs with more than two dimensions are viewed as ``[-1, 2N]`` (which copies
    ``x`` only if its leading dimensions cannot be flattened as a view).  ``config``
    overrides :data:`GATED_TABLE`.
    """
    return gated_triton(x, out, "silu", config)
