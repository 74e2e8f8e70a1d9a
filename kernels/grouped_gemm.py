"""Grouped GEMM: ``out[rows of g] = op(a)[rows of g] @ op(b[g])`` with fp32 accumulation.

The rows of ``op(a)`` (``[M, K]``; ``a`` is stored ``[M, K]``, or ``[K, M]`` when
``transpose_a``) are split into ``G`` consecutive groups of ``batch_sizes[g]`` rows; group
``g`` is multiplied by ``op(b[g])`` (``b`` stored ``[G, K, N]``, or ``[G, N, K]`` when
``transpose_b``). This is ``torch._grouped_mm(op(a), op(b), offs=cumsum(batch_sizes))``.
Each operand is read through its strides in its stored layout (no transposing copies).

* :func:`grouped_gemm_reference` -- torch reference: a loop over the groups (reads the
  sizes on the host), fp32 products on CPU, ``torch.matmul`` per group on CUDA.
* :func:`grouped_gemm_triton` -- one launch, no host synchronisation. The group sizes stay
  on the device: the grid covers an upper bound of the output tiles,
  ``(cdiv(M, BLOCK_M) + G) * cdiv(N, BLOCK_N)`` (each group wastes less than one row
  tile), and each program reads ``batch_sizes`` (G <= a few hundred values, one vector
  load), finds by prefix sums which group and which row tile of that group its virtual
  row tile is, and returns at once when it lies past the last real tile. Those idle
  programs (at most ``G * cdiv(N, BLOCK_N)``) cost a launch slot each, microseconds in all;
  a persistent kernel would avoid them but needs a work loop per program. Programs are
  ordered as in the dense GEMM (``GROUP_M`` row tiles advance together along N, so that
  the programs resident at one time share ``b[g]``'s column panels in L2). Row tiles never
  straddle two groups: a group's last tile loads rows of the next group (or the clamped
  last row) and masks them at the store, so the loads need no row mask; columns wrap
  (``% N``) the same way; full K blocks are unmasked (cp.async pipelining) and one masked
  tail block handles ``K % BLOCK_K``.

* :func:`grouped_gemm_tma` -- the same tile walk with the operands loaded through TMA
  tensor descriptors (Hopper's bulk copy engine) in a persistent kernel: one program per
  SM walks the real tiles (their count, a device value, bounds its loop) in the grouped
  order above. Every operand layout: each operand is described in its stored order (read
  from the strides, :func:`tma_operands`), ``a`` as ``[M, K]`` or ``[K, M]`` (tiles
  loaded ``[BLOCK_K, BLOCK_M]`` and transposed in shared memory), ``b`` per group as a
  3-D ``[G, K, N]`` or ``[G, N, K]`` box ``[1, ., .]``, so a box past its group's K or N is
  zero-filled, never the next group's weights: any K, any N. TMA needs a 16-byte aligned
  base, strides that are multiples of 16 bytes, and a box start that is 16-byte aligned in
  the innermost dimension (outer-dimension starts are free). K and N tile starts are
  multiples of the blocks; a group's first row is not, which matters only when M is
  ``a``'s inner dimension (``[K, M]``): there a group's row tiles start at its first row
  rounded down to 8 rows (16 bytes), so the first tile also holds up to 7 rows of the
  previous group, computed with the wrong weights and not stored (each group gains at
  most one tile). Rows past a group's end are the next group's tokens (or zeros past M),
  likewise not stored: the output is stored through pointers masked to the group's rows
  (a descriptor store would write the neighbours' rows). The dense GEMM's TMA kernels
  (kernels/gemm.py) measured 0.96-1.10x of cuBLAS with these tiles on an H200, where its
  pointer kernel reached 0.69-0.79x on the nn.Linear (transposed b) layout; this kernel
  reached 757-806 TFLOP/s on Mixtral's w1 with ``a`` stored ``[M, K]``.
  :func:`grouped_gemm_triton` routes a call to it on CUDA devices of compute capability
  9.0 or later for float16/bfloat16 operands that descriptors can describe, when the table
  (:func:`grouped_gemm_tma_config_for`) has an entry (more than 64 rows per group on
  average); everything else (float32, other strides, small groups, CPU) takes the pointer
  kernel, decided on the host before the launch. If the TMA kernel fails to build on a
  device, a warning says so once and the pointer kernel serves every later call.

Tile shapes come from :func:`grouped_gemm_config_for` (a small table in plain Python,
indexed by the mean group size ``M // G``, N, K and the dtype: shapes only, no device
values). Empty groups produce no tile; ``K == 0`` zero-fills ``out``; ``M == 0`` or
``N == 0`` launches nothing.

fp32 inputs run with ``input_precision="ieee"`` (no TF32), fp16/bf16 on tensor cores.
On CPU the Triton interpreter's ``tl.dot`` is wrong for bf16: test in fp16/fp32 there.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import clip_tiles as _clip
from opspec.kernels.tiling import INT32_LIMIT
from opspec.kernels.tiling import element_extent as _extent
from opspec.kernels.tiling import grouped_tile
from opspec.kernels.tiling import sm_count as _num_sms
from opspec.kernels.tiling import vector_aligned as _is_aligned

__all__ = [
    "GroupedGemmConfig",
    "grouped_gemm_config_for",
    "grouped_gemm_reference",
    "grouped_gemm_tma",
    "grouped_gemm_tma_config_for",
    "grouped_gemm_triton",
    "tma_eligible",
    "tma_operands",
    "moe_expert_mlp_reference",
]

_INT32_LIMIT = INT32_LIMIT
_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_SIZE_DTYPES = (torch.int32, torch.int64)


class GroupedGemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


# --- the table (every tile choice is here) --------------------------------------------
# Hopper (sm_90) choices for fp16/bf16, the dense GEMM's pointer-kernel tiles (kernels/gemm.py)
# picked by the mean rows per group instead of M: a group's rows never share a tile with
# another group, so tiles taller than the groups are wasted work. Shared memory per stage is
# (BLOCK_M + BLOCK_N) * BLOCK_K * 2 bytes (48 KB for 128x256x64).
_LARGE_256 = GroupedGemmConfig(128, 256, 64, 8, 8, 3)  # >= 256 rows per group, wide N
_LARGE_128 = GroupedGemmConfig(128, 128, 64, 8, 8, 4)  # > 64 rows per group
_MEDIUM = GroupedGemmConfig(64, 128, 64, 8, 4, 4)  # 33..64 rows per group
_SMALL_32 = GroupedGemmConfig(32, 64, 128, 8, 4, 4)  # 17..32 rows per group
_SMALL_16 = GroupedGemmConfig(16, 64, 128, 8, 4, 4)  # decode: <= 16 rows per group
# fp32 (ieee dot on CUDA cores): a correctness path, smaller K step for shared memory.
_FP32 = GroupedGemmConfig(64, 64, 32, 8, 4, 3)
# Operands without 16-element aligned rows load element-wise, in registers: K steps of at
# most 32 and N tiles of at most 128 avoid spills.
_UNALIGNED_MAX_BLOCK_K = 32
_UNALIGNED_MAX_BLOCK_N = 128
# Wide tiles need enough columns and rows per group to pay off.
_WIDE_MIN_N = 2048
_WIDE_MIN_ROWS = 256


@functools.lru_cache(maxsize=1024)
def grouped_gemm_config_for(M: int, N: int, K: int, G: int,
                            dtype: torch.dtype = torch.bfloat16,
                            aligned: bool = True) -> GroupedGemmConfig:
    """The tile configuration for ``M`` rows in ``G`` groups, ``N`` columns, depth ``K``.

    ``aligned`` is False when an operand has no unit stride, another stride that is not a
    multiple of 16 elements, or a base that is not 16-byte aligned.
    """
    if dtype == torch.float32:
        cfg = _FP32
    else:
        rows = M // max(G, 1)
        if rows <= 16:
            cfg = _SMALL_16
        elif rows <= 32:
            cfg = _SMALL_32
        elif rows <= 64:
            cfg = _MEDIUM
        elif rows >= _WIDE_MIN_ROWS and N >= _WIDE_MIN_N:
            cfg = _LARGE_256
        else:
            cfg = _LARGE_128
    if not aligned:
        cfg = cfg._replace(block_n=min(cfg.block_n, _UNALIGNED_MAX_BLOCK_N),
                           block_k=min(cfg.block_k, _UNALIGNED_MAX_BLOCK_K))
    return _clip(cfg, M, N, K)


# --- references ---------------------------------------------------------------------------


def _logical(a: torch.Tensor, b: torch.Tensor, transpose_a: bool, transpose_b: bool):
    """Views of op(a) as [M, K] and op(b) as [G, K, N]."""
    return (a.t() if transpose_a else a), (b.transpose(1, 2) if transpose_b else b)


def grouped_gemm_reference(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor,
                           transpose_a: bool = False, transpose_b: bool = False) -> torch.Tensor:
    """``op(a)[rows of g] @ op(b[g])`` per group, in ``a.dtype`` (float64 stays float64).

    Reads ``batch_sizes`` on the host. On CUDA each group is a ``torch.matmul`` (fp32
    accumulation in cuBLAS); elsewhere the products are taken in fp32 (float64 for float64
    inputs).
    """
    A, B = _logical(a, b, transpose_a, transpose_b)
    M, N = A.shape[0], B.shape[2]
    out = torch.zeros((M, N), dtype=a.dtype, device=a.device)
    work = a.dtype if (a.is_cuda or a.dtype == torch.float64) else torch.float32
    start = 0
    for g, n in enumerate(batch_sizes.tolist()):
        if n:
            out[start:start + n] = torch.matmul(A[start:start + n].to(work), B[g].to(work))
        start += n
    return out


def moe_expert_mlp_reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                             batch_sizes: torch.Tensor) -> torch.Tensor:
    """The routed-expert MLP per group: ``(silu(h[:, :I]) * h[:, I:]) @ w2[g]`` with
    ``h = x[rows of g] @ w13[g]``, each stage rounded to ``x.dtype`` as the op rounds
    (float64 inputs give the exact float64 math)."""
    I = w2.shape[1]
    work = x.dtype if (x.is_cuda or x.dtype == torch.float64) else torch.float32
    out = torch.zeros_like(x)
    start = 0
    for g, n in enumerate(batch_sizes.tolist()):
        if n:
            h = torch.matmul(x[start:start + n].to(work), w13[g].to(work)).to(x.dtype).to(work)
            act = (torch.nn.functional.silu(h[:, :I]) * h[:, I:]).to(x.dtype).to(work)
            out[start:start + n] = torch.matmul(act, w2[g].to(work))
        start += n
    return out


# --- the kernel ---------------------------------------------------------------------------


@triton.jit
def _grouped_gemm_kernel(
    a_ptr, b_ptr, c_ptr, sizes_ptr,
    M, N, K, G,
    stride_am, stride_ak, stride_bg, stride_bk, stride_bn, stride_cm, stride_cn, stride_s,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_G: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    USE_INT64: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # Grouped program order over the virtual row tiles (an upper bound of the real ones).
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M) + G
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    # Which group owns row tile `tile`: prefix sums of the tiles per group (all on device).
    gi = tl.arange(0, BLOCK_G)
    sizes = tl.load(sizes_ptr + gi * stride_s, mask=gi < G, other=0).to(tl.int32)
    tiles = (sizes + (BLOCK_M - 1)) // BLOCK_M
    tile_end = tl.cumsum(tiles, 0)
    if tile >= tl.sum(tiles, 0):
        return
    g = tl.sum((tile_end <= tile).to(tl.int32), 0)
    row_end_all = tl.cumsum(sizes, 0)
    mine = gi == g
    row_start = tl.sum(tl.where(mine, row_end_all - sizes, 0), 0)
    row_end = tl.sum(tl.where(mine, row_end_all, 0), 0)
    tile_start = tl.sum(tl.where(mine, tile_end - tiles, 0), 0)

    offs_m = row_start + (tile - tile_start) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past the group's end are the next group's (or the last row, clamped), columns
    # past N wrap: in bounds without masks, dropped by the store mask.
    offs_am = tl.minimum(offs_m, M - 1)
    offs_bn = offs_n % N
    if USE_INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = (b_ptr + g.to(tl.int64) * stride_bg
              + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        k_left = K % BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

    c = acc.to(c_ptr.dtype.element_ty)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < row_end) & (offs_n[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


# --- launcher -----------------------------------------------------------------------------


def _check(a, b, batch_sizes, transpose_a, transpose_b, out):
    """Validate; return M, N, K, G and the (m, k) / (g, k, n) strides of a and b."""
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"a must be 2-D and b 3-D, got {a.dim()}-D and {b.dim()}-D")
    if transpose_a:
        K, M = a.shape
        sa = (a.stride(1), a.stride(0))
    else:
        M, K = a.shape
        sa = (a.stride(0), a.stride(1))
    if transpose_b:
        G, N, Kb = b.shape
        sb = (b.stride(0), b.stride(2), b.stride(1))
    else:
        G, Kb, N = b.shape
        sb = (b.stride(0), b.stride(1), b.stride(2))
    if Kb != K:
        raise ValueError(f"inner dimensions differ: op(a) has K = {K}, op(b) has K = {Kb}")
    if a.dtype not in _SUPPORTED or b.dtype != a.dtype or out.dtype != a.dtype:
        raise TypeError(f"a, b and out must share a dtype in {_SUPPORTED}; got {a.dtype}, "
                        f"{b.dtype}, {out.dtype}")
    if batch_sizes.dtype not in _SIZE_DTYPES or tuple(batch_sizes.shape) != (G,):
        raise ValueError(f"batch_sizes must be int32 or int64 of shape [{G}], got "
                         f"{batch_sizes.dtype} of shape {list(batch_sizes.shape)}")
    if out.dim() != 2 or tuple(out.shape) != (M, N):
        raise ValueError(f"out must have shape [{M}, {N}], got {list(out.shape)}")
    return M, N, K, G, sa, sb


def grouped_gemm_triton(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor,
                        transpose_a: bool, transpose_b: bool, out: torch.Tensor,
                        config: GroupedGemmConfig | None = None) -> torch.Tensor:
    """Write the grouped product into ``out`` (``[M, N]``, ``a.dtype``) and return it.

    ``batch_sizes`` (int32 or int64, ``[G]``, on ``a``'s device) must add up to M; it is
    read by the kernel, never on the host. ``config`` overrides the table, for tuning.
    """
    M, N, K, G, sa, sb = _check(a, b, batch_sizes, transpose_a, transpose_b, out)
    if M == 0 or N == 0:
        return out
    if K == 0 or G == 0:
        return out.zero_()
    if config is None:
        tma = grouped_gemm_tma_config_for(M, N, K, G)
        if tma is not None and _TMA_STATE["ok"] and tma_eligible(a, b, transpose_a, transpose_b):
            try:
                return grouped_gemm_tma(a, b, batch_sizes, transpose_a, transpose_b, out, tma)
            except Exception as exc:  # a build failure on this device: fall back, say so once
                _TMA_STATE["ok"] = False
                warnings.warn(f"grouped_gemm_tma failed ({type(exc).__name__}: {exc}); the "
                              f"pointer kernel serves grouped GEMMs from now on", RuntimeWarning)
        config = grouped_gemm_config_for(M, N, K, G, a.dtype, _is_aligned(a) and _is_aligned(b))
    cfg = config
    # b's group offset is formed in int64 in the kernel; the rest needs it only past 2**31.
    b_group = b[0] if G else b
    use_int64 = max(_extent(a), _extent(b_group), _extent(out)) > _INT32_LIMIT
    grid = ((triton.cdiv(M, cfg.block_m) + G) * triton.cdiv(N, cfg.block_n),)
    launch(_grouped_gemm_kernel, grid,
        a, b, out, batch_sizes,
        M, N, K, G,
        sa[0], sa[1], sb[0], sb[1], sb[2], out.stride(0), out.stride(1), batch_sizes.stride(0),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        BLOCK_G=max(16, triton.next_power_of_2(G)), GROUP_M=cfg.group_m,
        EVEN_K=K % cfg.block_k == 0, USE_INT64=use_int64,
        INPUT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap_options(a.device),
    )
    return out


# --- TMA descriptors ------------------------------------------------------------------------

# The dense GEMM's TMA tiles (kernels/gemm.py, measured there on an H200): 128x256x64 in the
# persistent kernel for large problems, 128x128x64 with 5 stages where N is narrow.
_TMA_BIG = GroupedGemmConfig(128, 256, 64, 16, 8, 3)
_TMA_NARROW = GroupedGemmConfig(128, 128, 64, 8, 4, 5)
# Fewer rows per group than this go to the pointer kernel's shorter tiles.
_TMA_MIN_ROWS = 64
_TMA_STATE = {"ok": True}


@functools.lru_cache(maxsize=1024)
def grouped_gemm_tma_config_for(M: int, N: int, K: int, G: int) -> GroupedGemmConfig | None:
    """The TMA kernel's tiles for a float16/bfloat16 problem, or None where the pointer
    kernel's shorter tiles serve it (64 rows per group or fewer). Any operand layout and
    any K: the descriptors zero-fill K tails."""
    if M // max(G, 1) <= _TMA_MIN_ROWS:
        return None
    wide = M // max(G, 1) >= _WIDE_MIN_ROWS and N >= _WIDE_MIN_N
    return _clip(_TMA_BIG if wide else _TMA_NARROW, M, N, K)


def _describable(t: torch.Tensor) -> bool:
    """TMA's rules for a view as its own descriptor: a unit last stride, every other stride
    a multiple of 16 bytes, a 16-byte aligned base. (Box starts must also be 16-byte
    aligned in the last dimension: the kernel sees to that, see ALIGN_M.)"""
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all((st * t.element_size()) % 16 == 0 for st in t.stride()[:-1]))


def tma_operands(a: torch.Tensor, b: torch.Tensor, transpose_a: bool, transpose_b: bool):
    """The views the TMA kernel describes, ``(a_view, trans_a, b_view, trans_b)``, or None.

    The layout is read from the strides, not the flags: ``op(a)`` (``[M, K]``) is described
    as is when its K stride is 1, else as its transpose ``[K, M]`` (``trans_a``: tiles loaded
    ``[BLOCK_K, BLOCK_M]`` and transposed) when its M stride is 1; ``op(b)`` (``[G, K, N]``)
    likewise as ``[G, K, N]`` or ``[G, N, K]`` (``trans_b``). None when neither view meets
    TMA's rules (:func:`_describable`): the pointer kernel serves those calls.
    """
    A, B = _logical(a, b, transpose_a, transpose_b)
    if _describable(A):
        a_view, trans_a = A, False
    elif _describable(A.t()):
        a_view, trans_a = A.t(), True
    else:
        return None
    if _describable(B):
        b_view, trans_b = B, False
    elif _describable(B.transpose(1, 2)):
        b_view, trans_b = B.transpose(1, 2), True
    else:
        return None
    return a_view, trans_a, b_view, trans_b


def _tma_device_ok(device: torch.device) -> bool:
    """A CUDA device with TMA (compute capability 9.0 or later)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def tma_eligible(a: torch.Tensor, b: torch.Tensor, transpose_a: bool, transpose_b: bool) -> bool:
    """Whether the TMA kernel can run this call: a CUDA device of compute capability 9.0 or
    later, float16/bfloat16, and operands TMA can describe (:func:`tma_operands`) in any of
    the four layouts."""
    return (a.dtype in (torch.float16, torch.bfloat16) and _tma_device_ok(a.device)
            and tma_operands(a, b, transpose_a, transpose_b) is not None)


@triton.jit
def _grouped_gemm_tma_kernel(
    a_desc, b_desc, c_ptr, sizes_ptr,
    M, N, K, G, stride_cm, stride_cn, stride_s,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_G: tl.constexpr, GROUP_M: tl.constexpr,
    TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, ALIGN_M: tl.constexpr,
    USE_INT64: tl.constexpr, PROGRAMS: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    # The groups' row tiles, once per program. A group's tiles start at its first row
    # rounded down to a multiple of ALIGN_M (1, or the elements in 16 bytes when M is a's
    # inner dimension: a box's start in the inner dimension must be 16-byte aligned);
    # the rows before the group's first belong to the previous group and are not stored.
    gi = tl.arange(0, BLOCK_G)
    sizes = tl.load(sizes_ptr + gi * stride_s, mask=gi < G, other=0).to(tl.int32)
    row_end_all = tl.cumsum(sizes, 0)
    row_start_all = row_end_all - sizes
    first_row_all = row_start_all - row_start_all % ALIGN_M
    tiles = tl.where(sizes > 0, (row_end_all - first_row_all + (BLOCK_M - 1)) // BLOCK_M, 0)
    tile_end = tl.cumsum(tiles, 0)
    num_m = tl.sum(tiles, 0)
    num_n = tl.cdiv(N, BLOCK_N)
    # Walk the real tiles pid, pid + PROGRAMS, ... in grouped order.
    for t in tl.range(tl.program_id(0), num_m * num_n, PROGRAMS):
        tile, pid_n = grouped_tile(t, num_m, num_n, GROUP_M)
        off_n = pid_n * BLOCK_N
        g = tl.sum((tile_end <= tile).to(tl.int32), 0)
        mine = gi == g
        row_start = tl.sum(tl.where(mine, row_start_all, 0), 0)
        row_end = tl.sum(tl.where(mine, row_end_all, 0), 0)
        first_row = tl.sum(tl.where(mine, first_row_all, 0), 0)
        tile_start = tl.sum(tl.where(mine, tile_end - tiles, 0), 0)
        off_m = first_row + (tile - tile_start) * BLOCK_M
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # a's rows outside the group are the neighbouring groups' tokens (or zeros past M):
        # their output rows are dropped by the store mask. b is described per group
        # ([G, ., .]): boxes past its K or N are zero-filled, never the next group's weights.
        # Every inner-dimension start (off_k; off_n; off_m when TRANS_A) is 16-byte aligned.
        for k in range(tl.cdiv(K, BLOCK_K)):
            off_k = k * BLOCK_K
            if TRANS_A:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if TRANS_B:
                b = b_desc.load([g, off_n, off_k]).reshape(BLOCK_N, BLOCK_K).T
            else:
                b = b_desc.load([g, off_k, off_n]).reshape(BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        mask = ((offs_m[:, None] >= row_start) & (offs_m[:, None] < row_end)
                & (offs_n[None, :] < N))
        if USE_INT64:
            offs_m = offs_m.to(tl.int64)
            offs_n = offs_n.to(tl.int64)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def grouped_gemm_tma(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor,
                     transpose_a: bool, transpose_b: bool, out: torch.Tensor,
                     config: GroupedGemmConfig | None = None) -> torch.Tensor:
    """The grouped product through TMA descriptors (see the module docstring).

    float16/bfloat16 only, operands that :func:`tma_operands` can describe (``ValueError``
    otherwise: :func:`grouped_gemm_triton` checks and routes); any layout, any group sizes,
    any K. ``out`` may have any strides. ``config`` overrides the table.
    """
    M, N, K, G, _, _ = _check(a, b, batch_sizes, transpose_a, transpose_b, out)
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"grouped_gemm_tma takes float16 or bfloat16 operands, got {a.dtype}")
    if M == 0 or N == 0:
        return out
    if K == 0 or G == 0:
        return out.zero_()
    views = tma_operands(a, b, transpose_a, transpose_b)
    if views is None:
        raise ValueError("grouped_gemm_tma needs a and b with a unit stride in one of their "
                         "two matrix dimensions, the other strides multiples of 16 bytes "
                         "and 16-byte aligned bases")
    a_view, trans_a, b_view, trans_b = views
    cfg = config or grouped_gemm_tma_config_for(M, N, K, G) or _clip(_TMA_NARROW, M, N, K)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    a_desc = TensorDescriptor.from_tensor(a_view, [bk, bm] if trans_a else [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b_view, [1, bn, bk] if trans_b else [1, bk, bn])
    # (only caps the programs: each walks the real tiles, counted on the device)
    bound = (triton.cdiv(M, bm) + G) * triton.cdiv(N, bn)
    programs = max(1, min(bound, _num_sms(a.device)))
    launch(_grouped_gemm_tma_kernel, (programs,),
        a_desc, b_desc, out, batch_sizes, M, N, K, G, out.stride(0), out.stride(1),
        batch_sizes.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, BLOCK_G=max(16, triton.next_power_of_2(G)),
        GROUP_M=cfg.group_m, TRANS_A=trans_a, TRANS_B=trans_b,
        ALIGN_M=16 // a.element_size() if trans_a else 1,
        USE_INT64=_extent(out) > _INT32_LIMIT, PROGRAMS=programs,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap_options(a.device))
    return out
