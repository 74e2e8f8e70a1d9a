"""Pointwise activations (ReLU, SiLU, GELU) as Triton kernels, and their torch references.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.activation_impl`.

* :func:`activation_reference` -- the torch function (fp32 math, cast back).
* :func:`activation_triton` -- writes ``act(x)`` into ``out`` (``out`` may be ``x``: in place).

Each element is read once and written once, so on an H200 these kernels are bound by HBM
bandwidth (about 4.2 TB/s measured for a copy). The layout of the work:

* **flat** (the fast path): when ``x`` and ``out`` cover their storage densely with the
  same strides (contiguous, or any permutation of a contiguous layout, as
  ``torch.empty_like`` preserves it; in place ``out`` is ``x``), the elements are processed
  in memory order as one 1-D array cut into tiles of ``BLOCK`` elements. How the work is
  cut (``BLOCK``, warps, a persistent grid, cache hints) is a :class:`StreamConfig` read
  from :data:`ACTIVATION_TABLE` by element size and count (see the table block). Full
  tiles are never masked (a tile that may run past ``n`` takes a masked copy of the code),
  so the 16-byte vectors survive any ``n``.
* **strided**: otherwise the dimensions are merged where both tensors allow; when two
  remain (a column slice ``x[:, a:b]``, a transposed slice, a broadcast), a 2-D kernel
  reads and writes through the strides, a tile of ``BLOCK_R x BLOCK_C`` per program.
* anything else (more than two dimensions that cannot be merged) goes through a
  contiguous copy of ``x`` (and, in place, a copy back into ``x``): correct, but two more
  passes over memory.

No autotuning at call time: the block sizes are picked in plain Python from the sizes.
Every kernel here is launched dependent where the device allows (:mod:`opspec.kernels.pdl`).
Offsets are computed in int64 only when an offset could pass ``2**31 - 1``. Triton
specialises integer arguments that are multiples of 16, so a length or a row stride
divisible by 16 keeps the loads vectorised although it is a run-time argument.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from opspec.kernels.launch import LaunchMemo, launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import sm_count
from opspec.kernels.tiling import INT32_LIMIT, as_multiple, row_multiple

__all__ = [
    "ACTIVATIONS",
    "ACTIVATION_TABLE",
    "StreamConfig",
    "activation_config",
    "activation_reference",
    "activation_triton",
    "gelu_erf_fp32",
    "merge_dims",
    "pick_config",
    "stream_grid",
]

#: The activations, by name, and the constexpr code the kernels switch on.
ACTIVATIONS = {"relu": 0, "silu": 1, "gelu": 2, "gelu_tanh": 3}
#: The strided kernel's code for no activation: the values as they are (opspec.kernels.
#: row_copy's contiguous copies).
COPY = -1

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_TILE = 2048          # elements per program of the strided kernel
_INT32_LIMIT = INT32_LIMIT
#: Prepared launches of the flat kernel (opspec.kernels.launch), by activation_triton's key.
_PREPARED = LaunchMemo()


class StreamConfig(NamedTuple):
    """How a streaming elementwise kernel cuts its work. Shared by the activation, binary
    (kernels/binary.py) and gated (kernels/silu_and_mul.py) kernels; each family has its
    own table of them."""

    #: Elements one program handles per tile (a power of two). The 2-D kernels (binary
    #: with a broadcast, gated) split it into rows x columns.
    block: int
    num_warps: int
    #: 0: one program per tile, the grid exactly covers the work. k > 0: a persistent grid
    #: of k programs per SM (no more than there are tiles), each looping over tiles.
    persist: int = 0
    #: Loads of streamed operands (every element read once) hint 'evict_first'.
    evict_first: bool = False
    #: Loads of a broadcast operand that other programs read again (a bias, a mask, a norm
    #: weight) hint 'evict_last'. Only the binary kernels have such operands.
    evict_last: bool = False


def _cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` on the host. Triton's own ``cdiv`` is a ConstexprFunction in recent
    Tritons, about 4 us a call from Python, and a launch plan made several."""
    return -(-a // b)


def _pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``), on the host."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def pick_config(table, n: int, elem_bytes: int) -> StreamConfig:
    """The configuration of the first row ``(element bytes, largest n, config)`` of
    ``table`` that fits ``n`` elements of ``elem_bytes`` bytes (element bytes 0 fits any
    size, largest n ``None`` any count)."""
    for eb, max_n, cfg in table:
        if (eb == 0 or eb == elem_bytes) and (max_n is None or n <= max_n):
            return cfg
    raise LookupError(f"no configuration for {n} elements of {elem_bytes} bytes")


def stream_grid(cfg: StreamConfig, n_tiles: int, device: torch.device) -> tuple[int, bool]:
    """``(programs, persistent)`` for ``n_tiles`` tiles: every tile its program, or with
    ``cfg.persist`` a grid of ``persist`` programs per SM when that is fewer."""
    if cfg.persist > 0:
        programs = cfg.persist * sm_count(device)
        if programs < n_tiles:
            return programs, True
    return n_tiles, False


# ---- the configuration table (one row per element size and size class) -------------------
# Set from benchmarks/elementwise_sweep.py on an H200: each sweep row prints the best
# variant; it goes into the row below that the sweep row falls under (element bytes, n).
# Rows: (element bytes, largest element count or None, StreamConfig); the first fit wins.
#
# Why these defaults (opspec bench on an H200, L2 flushed, before this table existed):
# * Two 16-byte vectors in flight per thread, 4 warps: 2048 elements of 2 bytes, 1024 of
#   4. The old kernel took 2048 elements on 4 warps for every dtype, four vectors a thread
#   in fp32, and its fp32 rows were the ones 3-5 % behind eager and torch.compile (Relu
#   [2048, 16384] 71.4 us against 68.0 / 68.7, Silu [4096, 18944] 157.0 against 150.7 /
#   150.5, Gelu [16384, 4096] 133.9 against 130.1 / 130.1), whose kernels keep one (eager)
#   or two (compile, 1024 elements on 4 warps) vectors a thread. With two vectors in 16-bit it matched them
#   within 1 % and beat compile where the math is heavier (Silu bf16 115 us against 117).
# * Decode sizes: one vector a thread, still 4 warps. The old rule shrank the block to
#   256 elements on 1 warp to reach 528 programs, and Gelu [32, 6400] fp16 took 4.7 us
#   against compile's 4.3 with 200 programs of 1024 on 4 warps: at this size every program
#   is resident at once, so smaller programs only add block launches. Below 2**19
#   elements the 2048 block would leave fewer than 256 programs for 132 SMs.
# * No persistent grid and no cache hints: nothing measured says they help; the sweep
#   times both.
# * H200 sweep (elementwise_sweep.py, 2026-11-30), geomean over the sweep rows of each table
#   row, time / that row's best: decode 16-bit 1.017 -> 1.000 with evict_first on the
#   streamed load (gelu gpt2-xl 4.8 us, 1.05x eager, 1.03x compile); large 16-bit 1.010 ->
#   1.003 with 8 warps (relu opt-13b 4.08 TB/s, silu llama3-8b 1.08x eager); fp32 1.008 ->
#   1.000 with 8 warps (gelu bert-large 4.15 TB/s, 1.006x eager, 1.004x compile).
ACTIVATION_TABLE = (
    (2, 1 << 19, StreamConfig(1024, 4, evict_first=True)),
    (2, None, StreamConfig(2048, 8)),
    (4, None, StreamConfig(1024, 8)),
)
# ------------------------------------------------------------------------------------------


def activation_reference(x: torch.Tensor, act: str) -> torch.Tensor:
    """``act(x)`` with torch, computed in float32 (float64 stays float64), cast back."""
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {sorted(ACTIVATIONS)}")
    xf = x if x.dtype == torch.float64 else x.float()
    if act == "relu":
        y = F.relu(xf)
    elif act == "silu":
        y = F.silu(xf)
    else:
        y = F.gelu(xf, approximate="tanh" if act == "gelu_tanh" else "none")
    return y.to(x.dtype)


# gelu(x) = x * Phi(x) with Phi(-|x|) = erfc(a) / 2, a = |x| / sqrt(2), evaluated as
#   erfc(a) ~= t * P(t) * exp(-a^2),  t = 1 / (1 + p * a),  P of degree 5,
# the form of Abramowitz & Stegun 7.1.26 with one more term, refitted (iterated weighted
# least squares in float64, p = 0.39) to |erfc error| <= 8.3e-9 on [0, 6] (A&S: 1.4e-7);
# beyond 6 both are below 2e-17. Relative error of Phi(-|x|): 5e-8 at |x| = 1.4, 1e-6 at
# 2.8, 7e-5 at 4.2, 1e-3 at 8.5, where Phi itself is < 1e-17. The constants below are
# p / sqrt(2) and the coefficients of P halved (Phi = erfc / 2). Why: libdevice's erff
# cost about 35 SASS instructions per element on sm_90 and left the erf rows of
# GeluAndMul compute-bound on an H200 (3.3 TB/s at [4096, 2 * 14336] bf16, where the tanh
# form reached 4.24). Offline sm_90 SASS per element: GeluAndMul bf16 44.6 -> 29.0 (tanh:
# 28.0), Gelu bf16 35.8 -> 19.3, fp32 34.6 -> 18.6 (one MUFU.RSQ, one MUFU.EX2).
# Evaluated in fp32 the alternating coefficients amplify t's rounding about 3x: with
# correctly rounded rsqrt / exp2 (Triton's interpreter) |gelu error| <= 3.6e-7 * |x|,
# and sm_90's approximate MUFU.RSQ / MUFU.EX2 (about 2^-22 each) add at most ~6e-7 * |x|;
# the tests take 2e-6 * |x|, far inside the op's fp32 tolerance (1e-4 * rms + 1e-4 * |ref|).

@triton.jit
def gelu_erf_fp32(x):
    """``gelu(x) = x * Phi(x)`` (the erf form) for fp32 ``x``, within 2e-6 * |x|.

    Torch's special values hold: +-0.0 -> +-0.0, +inf -> +inf, -inf -> nan (as torch's
    ``x * 0.5 * (1 + erf(x / sqrt(2)))``), nan -> nan; very negative x gives -0.0 or a
    tiny negative number where torch's ``1 + erf`` cancels to 0."""
    # t = 1 / d as rsqrt(d)^2 (d >= 1): MUFU.RSQ + FMUL, where '/' (div.full.f32) adds
    # range checks around MUFU.RCP (8 instructions); relative error of t about 3e-7.
    r = tl.math.rsqrt(1.0 + 0.2757716446627535 * tl.abs(x))
    t = r * r
    q = -0.11376860868851053
    q = q * t + 0.4433323735676967
    q = q * t - 0.31770044603013425
    q = q * t + 0.3247799470237059
    q = q * t + 0.04569410789426542
    q = q * t + 0.11766262538302344
    # exp(-x^2 / 2) = exp2(-x^2 * log2(e) / 2); underflows to 0 for |x| > 14.
    h = (q * t) * tl.math.exp2(x * (x * -0.7213475204444817))   # Phi(-|x|)
    return x * tl.where(x > 0, 1.0 - h, h)


@triton.jit
def _activate(x, ACT: tl.constexpr):
    """``act(x)`` in fp32 (ReLU is exact either way: the cast back restores x); ``x`` itself
    for ``COPY``."""
    xf = x.to(tl.float32)
    if ACT == -1:
        y = x
    elif ACT == 0:
        # NaN passes through (xf <= 0 is false for it); -0.0 gives +0.0, as torch.relu on
        # CUDA does (torch's CPU kernel keeps -0.0; this kernel runs on CUDA).
        y = tl.where(xf <= 0, 0.0, xf)
    elif ACT == 1:
        # silu(x) = x / (1 + exp(-x)); exp(-x) -> inf gives -0.0, as torch.
        y = xf / (1.0 + tl.exp(-xf))
    elif ACT == 2:
        # 0.5 * x * (1 + erf(x / sqrt(2))) without libdevice's erf (see gelu_erf_fp32)
        y = gelu_erf_fp32(xf)
    else:
        # 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)), with
        # u = sqrt(2 / pi) * (x + 0.044715 * x^3): one exp and no cancellation in 1 + tanh.
        u = 0.7978845608028654 * (xf + 0.044715 * xf * xf * xf)
        y = xf / (1.0 + tl.exp(-2.0 * u))
    return y


@triton.jit
def _activation_flat_tile(x_ptr, out_ptr, start, n, ACT: tl.constexpr, BLOCK: tl.constexpr,
                          MASKED: tl.constexpr, LOAD_POLICY: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    if MASKED:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, eviction_policy=LOAD_POLICY)
        tl.store(out_ptr + offs, _activate(x, ACT).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        x = tl.load(x_ptr + offs, eviction_policy=LOAD_POLICY)
        tl.store(out_ptr + offs, _activate(x, ACT).to(out_ptr.dtype.element_ty))


@triton.jit
def _activation_flat_step(x_ptr, out_ptr, t, n, ACT: tl.constexpr, BLOCK: tl.constexpr,
                          USE_INT64: tl.constexpr, EVEN: tl.constexpr,
                          LOAD_POLICY: tl.constexpr):
    """Tile ``t``: unmasked unless it runs past ``n``. A mask that Triton cannot prove
    constant over 8 elements (``n`` not a multiple of 16) splits every access into 2-byte
    ones, so only the last tile takes the masked code."""
    if USE_INT64:
        start = tl.cast(t, tl.int64) * BLOCK
    else:
        start = t * BLOCK
    if EVEN:
        _activation_flat_tile(x_ptr, out_ptr, start, n, ACT, BLOCK, False, LOAD_POLICY)
    elif start + BLOCK <= n:
        _activation_flat_tile(x_ptr, out_ptr, start, n, ACT, BLOCK, False, LOAD_POLICY)
    else:
        _activation_flat_tile(x_ptr, out_ptr, start, n, ACT, BLOCK, True, LOAD_POLICY)


@triton.jit
def _activation_flat_kernel(
    x_ptr,
    out_ptr,
    n,
    n_tiles,
    ACT: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_INT64: tl.constexpr,
    EVEN: tl.constexpr,          # n is a multiple of BLOCK: no tile is masked
    PERSIST: tl.constexpr,       # fewer programs than tiles: each loops over tiles
    LOAD_POLICY: tl.constexpr,   # '' or 'evict_first'
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    pid = tl.program_id(0)
    if PERSIST:
        for t in tl.range(pid, n_tiles, tl.num_programs(0)):
            _activation_flat_step(x_ptr, out_ptr, t, n, ACT, BLOCK, USE_INT64, EVEN, LOAD_POLICY)
    else:
        _activation_flat_step(x_ptr, out_ptr, pid, n, ACT, BLOCK, USE_INT64, EVEN, LOAD_POLICY)


@triton.jit
def _activation_2d_kernel(
    x_ptr,
    out_ptr,
    R,
    C,
    n_col_blocks,
    stride_xr,
    stride_xc,
    stride_or,
    stride_oc,
    ACT: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    USE_INT64: tl.constexpr,
    ALIGN: tl.constexpr = 1,     # divides C and the row strides (tiling.row_multiple)
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    if ALIGN > 1:
        C = as_multiple(C, ALIGN)
        stride_xr = as_multiple(stride_xr, ALIGN)
        stride_or = as_multiple(stride_or, ALIGN)
    pid = tl.program_id(0)
    rows = (pid // n_col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = (pid % n_col_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = (rows < R)[:, None] & (cols < C)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xr + cols[None, :] * stride_xc, mask=mask)
    y = _activate(x, ACT)
    tl.store(out_ptr + rows[:, None] * stride_or + cols[None, :] * stride_oc,
             y.to(out_ptr.dtype.element_ty), mask=mask)


def activation_config(n: int, elem_bytes: int) -> StreamConfig:
    """The flat kernel's configuration for ``n`` elements of ``elem_bytes`` bytes (the
    row of :data:`ACTIVATION_TABLE` they fall under)."""
    return pick_config(ACTIVATION_TABLE, n, elem_bytes)


def _is_dense(t: torch.Tensor) -> bool:
    """Whether `t`'s elements fill ``t.numel()`` consecutive storage slots (any order of
    the dimensions): sorted by stride, each stride is the product of the sizes before."""
    expected = 1
    for size, stride in sorted(((s, st) for s, st in zip(t.shape, t.stride()) if s != 1),
                               key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def merge_dims(shape, *strides) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions and merge neighbours ``d, d+1`` wherever every tensor has
    ``stride[d] == stride[d+1] * size[d+1]``; returns the merged sizes and, per tensor, its
    merged strides (at least one dimension)."""
    dims = [(s, [st[i] for st in strides]) for i, s in enumerate(shape) if s != 1]
    if not dims:
        return [1], [[1] for _ in strides]
    sizes = [dims[0][0]]
    strs = [list(dims[0][1])]
    for s, st in dims[1:]:
        if all(strs[-1][k] == st[k] * s for k in range(len(strides))):
            sizes[-1] *= s
            strs[-1] = list(st)
        else:
            sizes.append(s)
            strs.append(list(st))
    return sizes, [[d[k] for d in strs] for k in range(len(strides))]


def _launch_flat(x: torch.Tensor, out: torch.Tensor, code: int,
                 config: StreamConfig | None = None, key=None) -> None:
    n = x.numel()
    cfg = config or pick_config(ACTIVATION_TABLE, n, x.element_size())
    n_tiles = _cdiv(n, cfg.block)
    grid, persist = stream_grid(cfg, n_tiles, x.device)
    _PREPARED.launch(key, 2, _activation_flat_kernel, (grid,), x, out, n, n_tiles,
                     ACT=code, BLOCK=cfg.block, USE_INT64=n + cfg.block > _INT32_LIMIT,
                     EVEN=n % cfg.block == 0, PERSIST=persist,
                     LOAD_POLICY="evict_first" if cfg.evict_first else "",
                     num_warps=cfg.num_warps, **overlap_options(x.device))


def _launch_2d(x: torch.Tensor, out: torch.Tensor, R: int, C: int, sx, so, code: int,
               tile: int = _TILE, num_warps: int = 4) -> None:
    """The strided kernel over ``x`` and ``out`` viewed as ``[R, C]`` with strides ``sx`` and
    ``so`` (``code``: an ACTIVATIONS value, or COPY), in tiles of ``tile`` elements."""
    # Columns are the unit-stride axis when there is one: put it last.
    if sx[1] != 1 and sx[0] == 1:
        R, C, sx, so = C, R, (sx[1], sx[0]), (so[1], so[0])
    block_c = min(_pow2(C), tile)
    block_r = min(_pow2(R), max(1, tile // block_c))
    n_row_blocks, n_col_blocks = _cdiv(R, block_r), _cdiv(C, block_c)
    # The furthest element a (masked-off) lane can address, rows and columns both padded.
    pad_r, pad_c = n_row_blocks * block_r, n_col_blocks * block_c
    reach = max((pad_r - 1) * abs(sx[0]) + (pad_c - 1) * abs(sx[1]),
                (pad_r - 1) * abs(so[0]) + (pad_c - 1) * abs(so[1]))
    launch(_activation_2d_kernel, (n_row_blocks * n_col_blocks,),
           x, out, R, C, n_col_blocks, sx[0], sx[1], so[0], so[1],
           ACT=code, BLOCK_R=block_r, BLOCK_C=block_c, USE_INT64=reach > _INT32_LIMIT,
           ALIGN=(row_multiple(x.element_size(), C, sx[0], so[0])
                  if sx[1] == so[1] == 1 else 1),
           num_warps=num_warps, **overlap_options(x.device))


def activation_triton(x: torch.Tensor, out: torch.Tensor, act: str,
                      config: StreamConfig | None = None) -> torch.Tensor:
    """Write ``act(x)`` into ``out`` and return ``out``.

    ``x`` and ``out`` have the same shape and dtype (fp16, bf16 or fp32), any strides.
    ``out`` may be ``x`` itself (in place; refused for a tensor whose elements share memory,
    as torch refuses it); otherwise the two must not overlap. The math is done in fp32.
    Nothing is launched for an empty tensor. No allocation except on the copy fallback
    described in the module docstring. ``config`` overrides :data:`ACTIVATION_TABLE` for
    the flat kernel (the sweep's variants); the strided kernel ignores it.
    """
    key = None
    if config is None:
        # Everything the flat launch below is decided and computed from: a later call with
        # the same key replays it (shape, dtype and in-place checks included: they passed).
        key = (act, x.shape, x.stride(), out.shape, out.stride(), x.dtype, out.dtype,
               x.get_device(), x.data_ptr() % 16, out.data_ptr() % 16)
        prepared = _PREPARED.get(key)
        if prepared is not None:
            prepared(x, out)
            return out
    code = ACTIVATIONS.get(act)
    if code is None:
        raise ValueError(f"unknown activation {act!r}; expected one of {sorted(ACTIVATIONS)}")
    if x.shape != out.shape:
        raise ValueError(f"out must have x's shape {list(x.shape)}, got {list(out.shape)}")
    if out.dtype != x.dtype or x.dtype not in _SUPPORTED:
        raise TypeError(f"x and out must share a dtype in {_SUPPORTED}, got {x.dtype}, {out.dtype}")
    inplace = out is x or (out.data_ptr() == x.data_ptr() and out.stride() == x.stride())
    if inplace and not x.is_contiguous() and torch._debug_has_internal_overlap(x) == 1:
        # As torch: a broadcast (stride-0) tensor would get the activation applied once per
        # alias of each element.
        raise RuntimeError("cannot apply an activation in place to a tensor in which several "
                           "elements share one memory location; clone it first")
    if x.numel() == 0:
        return out
    # is_contiguous first: it is a flag read, and the common case
    if ((x.is_contiguous() and (inplace or out.is_contiguous()))
            or (x.stride() == out.stride() and _is_dense(x))):
        _launch_flat(x, out, code, config, key)
        return out
    sizes, (sx, so) = merge_dims(x.shape, x.stride(), out.stride())
    if len(sizes) == 1:
        _launch_2d(x, out, 1, sizes[0], (0, sx[0]), (0, so[0]), code)
    elif len(sizes) == 2:
        _launch_2d(x, out, sizes[0], sizes[1], sx, so, code)
    else:
        # More than two dimensions that cannot be merged: compute on a contiguous copy.
        tmp = x.contiguous()
        _launch_flat(tmp, tmp, code, config)
        out.copy_(tmp)
    return out
