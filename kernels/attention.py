"""Grouped-query softmax attention, forward: one Triton flash-attention kernel shared by
the dense (`[B, H, S, D]`, SDPA) and the varlen (packed `[total, H, D]` with cu_seqlens,
flash-attn) layouts, and torch references for both.

* :func:`attention_dense_reference`, :func:`attention_varlen_reference` -- torch, the
  scores and softmax in float32 (or the inputs' dtype when wider), cast back.
* :func:`attention_dense_triton`, :func:`attention_varlen_triton` -- the Triton kernel,
  writing into ``out``.

The kernel (FlashAttention-2's schedule): program ``(m, b * H + h)`` holds ``BLOCK_M``
query rows of head ``h`` of sequence ``b`` in registers and streams that head's key/value
head ``h // (H // H_kv)`` in blocks of ``BLOCK_N`` rows, keeping an online softmax: the
running row maximum ``m_i``, the running sum ``l_i`` and the unnormalised output ``acc``,
all float32, rescaled by ``exp2(m_old - m_new)`` when the maximum grows. ``log2(e)`` is
folded into the scale so each score costs one FMA and one ``exp2``. Key blocks that every
query row of the program sees in full run without masks; only the blocks that cross the
sequence end or the causal diagonal are masked, and blocks wholly above the diagonal are
never visited (causal block skipping). Causal programs run heaviest first (the query block
order is reversed), so the longest programs start early.

A query row may see a key iff ``key <= row + shift``: ``shift = 0`` for SDPA's top-left
mask, ``len_k - len_q`` for flash-attn's bottom-right one. A row that sees no key keeps
``l_i = 0`` and is written as zeros (flash-attn's convention; the maximum of such a row
stays ``-inf``, and the masked step subtracts 0 instead, so no NaN appears).

Layouts: dense tensors are addressed through their four strides (any strides; a unit
stride on the feature axis D is specialised by Triton, which keeps loads vectorised); varlen
programs read their sequence's start and end from ``cu_seqlens_q`` / ``cu_seqlens_k`` on
the device and run an empty program when their query block lies past the sequence's end
(the grid is sized by ``max_seqlen_q``). Sequence and head offsets are int64.

Head sizes up to 256: the head axis is padded to ``BLOCK_D = max(16, next_pow2(D))``
(``tl.dot`` needs 16) with masked loads. Tile choices are in :data:`CONFIGS` (Hopper, from
the Triton fused-attention tutorial's starting points, checked for register spills by an
sm_90 build; one place to change them): for D <= 128, ``BLOCK_M = 128``, ``BLOCK_N = 64``,
8 warps, 3 stages; for D <= 256 a 64 x 32 tile; ``BLOCK_N = 128`` is the first alternative
to measure for D = 64 (for D = 128 it spills); causal calls with at most 1024 query rows
take :data:`SHORT_CAUSAL`'s 64 x 64, 4-warp tile. The launchers take ``config`` (an
:class:`AttnConfig`, or a ``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` tuple) to try
others without editing the table, including the kernel variants of :data:`VARIANTS` (TMA
key/value loads, a prescaled q, a lazy rescale, a GQA launch order, warp-specialized or
source-pipelined key loops; ``benchmarks/attention_sweep.py`` times them). float32 inputs
(tests only; the ops take float16 / bfloat16) use ``input_precision="ieee"`` products.

Decode (at most :data:`DECODE_MAX_Q` queries a sequence, as :func:`decode_plan` decides):
two kernels instead, ``_attn_split_kernel`` and ``_attn_combine_kernel``. A program of the
first takes one key/value head of one sequence with its GROUP query heads stacked in one
tile (GROUP x queries rows, each key block read once for the group) and a chunk of the
keys (the last chunk of a head runs to the sequence's end, so a ``max_seqlen_k`` below
the real lengths costs time, never keys); it writes the chunk's running max, sum and
unnormalised output in float32 to a workspace, and the second kernel rescales a head's
chunks to their common max and sums them. The section comment above ``decode_plan``
gives the sizing and its measurements. Every kernel here is launched dependent where the
device allows (:mod:`opspec.kernels.pdl`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import as_multiple, contiguous_copy, row_multiple
from triton.tools.tensor_descriptor import TensorDescriptor

__all__ = [
    "CONFIGS",
    "DECODE_MAX_Q",
    "DecodePlan",
    "SHORT_CAUSAL",
    "VARIANTS",
    "AttnConfig",
    "INTERPRETER_CONFIG",
    "as_config",
    "attention_config",
    "attention_dense_reference",
    "attention_dense_triton",
    "attention_varlen_reference",
    "attention_varlen_triton",
    "as_launched",
    "decode_plan",
    "kv_for_loads",
]

_LOG2E = 1.4426950408889634

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)

#: Kernel variants (flags, combined with "+" in :attr:`AttnConfig.variant`; "base" is none):
#:
#: * ``tma``: key/value blocks loaded through TMA tensor descriptors (host descriptors over
#:   ``[B, H_kv, S_kv, D]``, box ``[1, 1, BLOCK_N, BLOCK_D]``, or for varlen over the packed
#:   ``[total_k, H_kv, D]``, box ``[BLOCK_N, 1, BLOCK_D]``; boxes past the tensor are
#:   zero-filled, so no load masks; a varlen box that runs into the next sequence has those
#:   rows zeroed in its masked block). Only where the strides allow (unit feature stride,
#:   other strides multiples of 16 bytes, 16-byte aligned bases, sizes below 2**31);
#:   elsewhere the pointer loads run. The dense D = 128 config caps registers at 128 for
#:   the TMA form; the pointer form under that cap spills (44 stores to local memory in the
#:   sm_90 build under Triton 3.6; 42 in varlen's), as varlen calls did before they had
#:   descriptors and their own tile (VARLEN_CONFIGS); so a call whose key or value strides
#:   a descriptor cannot take runs the pointer form without the cap (:func:`as_launched`),
#:   on aligned rows, else on a contiguous copy of the keys and values (:func:`kv_for_loads`).
#: * ``prescale``: ``q * scale * log2(e)`` rounded to q's dtype once before the loop, so a
#:   score costs a subtraction, not an FMA (one more rounding of q: about 2**-9 relative in
#:   bfloat16).
#: * ``lazy``: the running maximum is moved only when a row's maximum grows by more than
#:   ``2**LAZY_TAU``-fold (``LAZY_TAU = 8``: probabilities stay <= 256, exact in fp16/bf16
#:   scaling), and the accumulator rescale is skipped when no row of the block moved.
#: * ``gqa``: the grid is ``(GROUP * query blocks, B * H_kv)`` with the GROUP query heads of
#:   one key/value head adjacent in launch order, so they stream the same K/V blocks
#:   together from L2.
#: * ``ws``: the key loops as ``tl.range(..., warp_specialize=True)`` (a Triton feature that
#:   may not compile for every target; the sweep reports it).
#: * ``pipe``: the unmasked key loop software-pipelined by one block in the source (the
#:   next block's ``q k^T`` issued before this block's softmax), for the tensor cores to
#:   overlap the exponentials; one more score tile in registers.
#: * ``persist``: a persistent grid (one program an SM, two for 4-warp tiles or a register
#:   cap of 128) walking the tiles query block by query block (heaviest first when causal)
#:   over every (sequence, head), the query heads of a kv head adjacent; ``gqa`` is then
#:   moot.
VARIANTS = ("tma", "prescale", "lazy", "gqa", "ws", "pipe", "persist")

LAZY_TAU = 8.0


class AttnConfig(NamedTuple):
    """A kernel configuration: the tile, the launch options and the variant flags
    (``"base"`` or names of :data:`VARIANTS` joined by ``"+"``). A plain 4-tuple
    ``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` means the base variant. ``maxnreg``
    (0: none) caps the registers a thread gets, for two 8-warp programs an SM (128 with
    the TMA loads: no spill in the sm_90 build of 128 x 64, 2 stages); a ``tma`` config's
    cap is dropped with its descriptors where the strides rule them out
    (:func:`as_launched`)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    variant: str = "base"
    maxnreg: int = 0

    def flags(self) -> frozenset[str]:
        if self.variant in ("", "base"):
            return frozenset()
        names = frozenset(self.variant.split("+"))
        unknown = names - set(VARIANTS)
        if unknown:
            raise ValueError(f"unknown attention kernel variant(s) {sorted(unknown)}; "
                             f"known: {', '.join(VARIANTS)}")
        return names


def as_config(config) -> AttnConfig:
    """:class:`AttnConfig` of a config or a 4- or 5-tuple."""
    return config if isinstance(config, AttnConfig) else AttnConfig(*config)


#: (largest head size, config), for CUDA, first match.
#: Built for sm_90 (ptxas -v, 8 warps: two warpgroups of 64 query rows each, wgmma):
#: D = 128: 128 x 64 tiles, 3 stages, 242 registers, no spill, 128 KiB shared memory (the
#: 128 x 128 tile spills 104 bytes); D = 64: 128 x 64, 117 registers (128 x 128: 221);
#: D = 256: 64 x 32, 2 stages, 194 registers (64 x 32 with 4 warps spills).
#: H200, bf16, D = 128, GQA 32/8: (128, 64, 8, 3) 485 TFLOP/s at B=4 S=4096 non-causal,
#: the best of the tiles measured there.
CONFIGS: tuple[tuple[int, AttnConfig], ...] = (
    (64, AttnConfig(128, 64, 8, 3)),
    # H200 sweep (benchmarks/attention_sweep.py), bf16, B=4 S=4096 full: tma+lazy with a
    # 128-register cap (two programs an SM) 517 TFLOP/s; base 128x64 3 stages 490.
    (128, AttnConfig(128, 64, 8, 2, "tma+lazy", 128)),
    (256, AttnConfig(64, 32, 8, 2)),
)

#: (longest query length, largest head size, config), first match: causal calls with at
#: most that many query rows (dense S_q, varlen max_seqlen_q) and head size take the config
#: (entries by increasing length); other calls take CONFIGS. The smaller tile keeps more
#: programs per SM busy where the causal triangle is short. H200 sweep, bf16, D = 128,
#: TFLOP/s over visible pairs: B=8 S=1024 tma 64x64 348 (base 64x64 314, base 128x64 296);
#: 70B B=2 S=2048 tma 64x64 400 (base 128x64 369); B=1 S=8192 gqa 128x64 476 (base 461).
SHORT_CAUSAL: tuple[tuple[int, int, AttnConfig], ...] = (
    (2048, 128, AttnConfig(64, 64, 4, 3, "tma")),
    (8192, 128, AttnConfig(128, 64, 8, 3, "gqa")),
)

#: (largest head size, config), first match: varlen calls (dense ones take the tables
#: above). H200 (benchmarks/varlen_probe.py, 2026-12-01, bf16, D = 128, the bench's six
#: varlen prefill rows, two runs; us, this tile against the tables' choice): Llama-3-8B
#: mixed lengths (causal) 1599.8 against 1756.4, 8 x 1k 285.4 / 294.7 (the first run had
#: the tables' tile, with descriptors, at 222.7: a short row, within what runs differ by),
#: chunked prefill 962.7 / 983.5, packed non-causal 868.4 / 903.2 (the 128 x 64 pointer
#: tile 896.4; with descriptors under its cap of 128 registers it spills), Llama-3-70B mixed
#: 3220.4 / 3477.2, Qwen2.5-7B mixed 433.3 / 429.2. 64 x 64 with 2 or 4 stages, 64 x 128,
#: 64 x 32, and the lazy or prescale flags ran slower on every row.
VARLEN_CONFIGS: tuple[tuple[int, AttnConfig], ...] = (
    (128, AttnConfig(64, 64, 4, 3, "tma+gqa")),
)

#: Under Triton's interpreter (CPU tests): small tiles, so that small tests cross blocks.
INTERPRETER_CONFIG = AttnConfig(32, 16, 4, 1)

MAX_HEAD_DIM = 256


def attention_config(head_dim: int, device_type: str, causal: bool = False,
                     seqlen_q: int | None = None, varlen: bool = False) -> AttnConfig:
    """The kernel configuration for a head size on a device type: varlen calls take
    :data:`VARLEN_CONFIGS` where it covers the head size; causal calls with at most
    :data:`SHORT_CAUSAL`'s query rows take its tile; others :data:`CONFIGS`."""
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head size {head_dim} is over the kernel's limit {MAX_HEAD_DIM}")
    if device_type != "cuda":
        return INTERPRETER_CONFIG
    if varlen:
        for limit, config in VARLEN_CONFIGS:
            if head_dim <= limit:
                return config
    if causal and seqlen_q is not None:
        for max_q, max_d, config in SHORT_CAUSAL:
            if seqlen_q <= max_q and head_dim <= max_d:
                return config
    for limit, config in CONFIGS:
        if head_dim <= limit:
            return config
    raise AssertionError("CONFIGS covers every head size up to MAX_HEAD_DIM")


# -- references ------------------------------------------------------------------------------

def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


#: Score elements the references hold at once (the float64 scores of an 8k x 8k head are
#: 512 MiB; a whole Llama-3-70B batch would be 68 GiB): heads are taken in slices.
_REFERENCE_SCORES = 1 << 27


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            causal: bool, shift: int) -> torch.Tensor:
    """Attention of ``q [..., Lq, D]`` over ``k, v [..., Lk, D]`` (heads already matched),
    key j visible to row i iff ``j <= i + shift`` when causal; rows seeing no key are zero.
    Computed in slices of the leading axes (flattened) to bound the scores' memory."""
    cd = _compute_dtype(q.dtype)
    lead = q.shape[:-2]
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    n = math.prod(lead)
    qf = q.reshape(n, lq, q.shape[-1])
    kf = k.reshape(n, lk, k.shape[-1])
    vf = v.reshape(n, lk, dv)
    out = torch.empty((qf.shape[0], lq, dv), dtype=cd, device=q.device)
    hidden = None
    if causal:
        i = torch.arange(lq, device=q.device).unsqueeze(1)
        j = torch.arange(lk, device=q.device).unsqueeze(0)
        hidden = j > i + shift
    step = max(1, _REFERENCE_SCORES // max(1, lq * lk))
    for h0 in range(0, qf.shape[0], step):
        s = torch.matmul(qf[h0:h0 + step].to(cd), kf[h0:h0 + step].to(cd).transpose(-1, -2))
        s = s * scale
        if hidden is not None:
            s = s.masked_fill(hidden, float("-inf"))
        p = torch.softmax(s, dim=-1)
        # a row of -inf scores gives NaN probabilities: such a row sees no key and is zero
        p = torch.nan_to_num(p, nan=0.0)
        out[h0:h0 + step] = torch.matmul(p, vf[h0:h0 + step].to(cd))
    return out.reshape(*lead, lq, dv)


def _expand_kv(x: torch.Tensor, heads: int, axis: int) -> torch.Tensor:
    # query head h reads key/value head h // (H // H_kv), as SDPA's enable_gqa
    return x.repeat_interleave(heads // x.shape[axis], dim=axis)


def attention_dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              is_causal: bool = False, scale: float | None = None
                              ) -> torch.Tensor:
    """SDPA with ``enable_gqa=True`` on ``q [B, H, S_q, D]``, ``k, v [B, H_kv, S_kv, D]``:
    top-left causal mask; float32 math (float64 inputs stay float64); in ``q.dtype``."""
    H, D = q.shape[1], q.shape[-1]
    sc = 1.0 / math.sqrt(D) if scale is None else float(scale)
    out = _attend(q, _expand_kv(k, H, 1), _expand_kv(v, H, 1), sc, is_causal, 0)
    return out.to(q.dtype)


def attention_varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                               softmax_scale: float | None = None, causal: bool = False
                               ) -> torch.Tensor:
    """flash_attn_varlen_func on packed ``q [total_q, H, D]``, ``k, v [total_k, H_kv, D]``,
    one sequence at a time: bottom-right causal mask; float32 math; in ``q.dtype``."""
    H, D = q.shape[1], q.shape[-1]
    sc = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    out = torch.zeros(q.shape, dtype=_compute_dtype(q.dtype), device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0:
            continue
        qs = q[q0:q1].transpose(0, 1)                       # [H, lq, D]
        ks = _expand_kv(k[k0:k1].transpose(0, 1), H, 0)     # [H, lk, D]
        vs = _expand_kv(v[k0:k1].transpose(0, 1), H, 0)
        out[q0:q1] = _attend(qs, ks, vs, sc, causal, (k1 - k0) - (q1 - q0)).transpose(0, 1)
    return out.to(q.dtype)


# -- the Triton kernel -----------------------------------------------------------------------

@triton.jit
def _load_kv(ptrs, start_n, kv_b, kvh, n_ok, d_ok, MASKED: tl.constexpr, EVEN_D: tl.constexpr,
             KV_TMA: tl.constexpr, VARLEN: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_D: tl.constexpr):
    """One [BLOCK_N, BLOCK_D] key or value block: through the descriptor ``ptrs`` (KV_TMA)
    or through pointers, masked where needed. The descriptors: dense ones over [B, H_kv,
    S_kv, D] at batch ``kv_b``, zero-filled past S_kv and D; varlen ones over [total_k, H_kv,
    D] from key row ``kv_b + start_n`` (``kv_b`` the sequence's first key), zero-filled past
    total_k and D. A varlen box runs on into the next sequence's keys: its masked blocks zero
    those rows, so that a value there (even inf or NaN) never meets a zero probability."""
    if KV_TMA:
        if VARLEN:
            x = ptrs.load([(kv_b + start_n).to(tl.int32), kvh, 0]).reshape(BLOCK_N, BLOCK_D)
            if MASKED:
                x = tl.where(n_ok, x, 0.0)
        else:
            x = ptrs.load([kv_b, kvh, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
    elif MASKED:
        if EVEN_D:
            x = tl.load(ptrs, mask=n_ok, other=0.0)
        else:
            x = tl.load(ptrs, mask=n_ok & d_ok, other=0.0)
    else:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=d_ok, other=0.0)
    return x


@triton.jit
def _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, kv_b, kvh, offs_m, offs_n, offs_d, lo, hi,
                len_k, shift, qk_scale, stride_kn, stride_vn, HEAD_DIM,
                MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                NEG_SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                PRECISION: tl.constexpr, KV_TMA: tl.constexpr, PRESCALE: tl.constexpr,
                LAZY: tl.constexpr, LAZY_TAU: tl.constexpr, WARP_SPEC: tl.constexpr,
                VARLEN: tl.constexpr):
    """Key blocks [lo, hi) of one program: the online-softmax update. MASKED blocks mask
    keys past len_k and, when CAUSAL, keys above the diagonal. PRESCALE: q already holds
    the scale (times log2 e). ``kv_b``: see :func:`_load_kv`."""
    if not KV_TMA:
        k_ptrs += lo * stride_kn
        v_ptrs += lo * stride_vn
    d_ok = offs_d[None, :] < HEAD_DIM
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        cols = start_n + offs_n
        n_ok = cols[:, None] < len_k
        k = _load_kv(k_ptrs, start_n, kv_b, kvh, n_ok, d_ok, MASKED, EVEN_D, KV_TMA, VARLEN,
                     BLOCK_N, BLOCK_D)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASKED:
            visible = cols[None, :] < len_k
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + shift)
            if PRESCALE:
                qk = tl.where(visible, qk, float("-inf"))
            else:
                qk = tl.where(visible, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            if LAZY:
                m_ij = tl.where(m_ij > m_i + LAZY_TAU, m_ij, m_i)
            # a row with nothing visible yet keeps m = -inf: subtract 0 so exp2 gives 0
            m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            p = tl.math.exp2(qk - m_sub[:, None])
            alpha = tl.math.exp2(m_i - m_sub)
        else:
            p, alpha, m_ij = _unmasked_probs(qk, m_i, qk_scale, NEG_SCALE, PRESCALE, LAZY,
                                             LAZY_TAU)
        acc, l_i = _rescale(acc, l_i, p, alpha, LAZY)
        v = _load_kv(v_ptrs, start_n, kv_b, kvh, n_ok, d_ok, MASKED, EVEN_D, KV_TMA, VARLEN,
                     BLOCK_N, BLOCK_D)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_ij
        if not KV_TMA:
            k_ptrs += BLOCK_N * stride_kn
            v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def _unmasked_probs(qk, m_i, qk_scale, NEG_SCALE: tl.constexpr, PRESCALE: tl.constexpr,
                    LAZY: tl.constexpr, LAZY_TAU: tl.constexpr):
    """An unmasked block's probabilities ``p`` (unnormalised), the running maximum's
    rescale ``alpha`` and the new maximum."""
    if PRESCALE:
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
    elif NEG_SCALE:
        # the maximum of the scaled scores, from the unscaled ones
        m_ij = tl.maximum(m_i, tl.min(qk, 1) * qk_scale)
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if LAZY:
        m_ij = tl.where(m_ij > m_i + LAZY_TAU, m_ij, m_i)
    if PRESCALE:
        p = tl.math.exp2(qk - m_ij[:, None])
    else:
        # one FMA per score
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    return p, tl.math.exp2(m_i - m_ij), m_ij


@triton.jit
def _rescale(acc, l_i, p, alpha, LAZY: tl.constexpr):
    """The row sums and the accumulator moved to the new running maximum."""
    l_i = l_i * alpha + tl.sum(p, 1)
    if LAZY:
        # alpha is exactly 1 on rows whose maximum stayed
        if tl.min(alpha, 0) < 1.0:
            acc = acc * alpha[:, None]
    else:
        acc = acc * alpha[:, None]
    return acc, l_i


@triton.jit
def _full_update(acc, l_i, m_i, qk, v, qk_scale, NEG_SCALE: tl.constexpr,
                 PRESCALE: tl.constexpr, LAZY: tl.constexpr, LAZY_TAU: tl.constexpr,
                 PRECISION: tl.constexpr):
    """The online-softmax update of an unmasked block's scores ``qk`` and values ``v``."""
    p, alpha, m_ij = _unmasked_probs(qk, m_i, qk_scale, NEG_SCALE, PRESCALE, LAZY, LAZY_TAU)
    acc, l_i = _rescale(acc, l_i, p, alpha, LAZY)
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc, l_i, m_ij


@triton.jit
def _attn_block_pipe(acc, l_i, m_i, q, k_ptrs, v_ptrs, kv_b, kvh, offs_d, lo, hi,
                     qk_scale, stride_kn, stride_vn, HEAD_DIM,
                     EVEN_D: tl.constexpr, NEG_SCALE: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr, PRECISION: tl.constexpr, KV_TMA: tl.constexpr,
                     PRESCALE: tl.constexpr, LAZY: tl.constexpr, LAZY_TAU: tl.constexpr,
                     VARLEN: tl.constexpr):
    """The unmasked key blocks [lo, hi), software-pipelined by one block: the scores of
    block j + 1 are issued before the softmax of block j, so the tensor cores work on the
    next product while the exponentials of this one run (FlashAttention-3's intra-warpgroup
    overlap, written in the source)."""
    if lo < hi:
        d_ok = offs_d[None, :] < HEAD_DIM
        n_ok = d_ok   # unused: unmasked blocks
        if not KV_TMA:
            k_ptrs += lo * stride_kn
            v_ptrs += lo * stride_vn
        k = _load_kv(k_ptrs, lo, kv_b, kvh, n_ok, d_ok, False, EVEN_D, KV_TMA, VARLEN,
                     BLOCK_N, BLOCK_D)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        for start_n in range(lo + BLOCK_N, hi, BLOCK_N):
            if not KV_TMA:
                k_ptrs += BLOCK_N * stride_kn
            k = _load_kv(k_ptrs, start_n, kv_b, kvh, n_ok, d_ok, False, EVEN_D, KV_TMA,
                         VARLEN, BLOCK_N, BLOCK_D)
            qk_next = tl.dot(q, tl.trans(k), input_precision=PRECISION)
            v = _load_kv(v_ptrs, start_n - BLOCK_N, kv_b, kvh, n_ok, d_ok, False, EVEN_D,
                         KV_TMA, VARLEN, BLOCK_N, BLOCK_D)
            acc, l_i, m_i = _full_update(acc, l_i, m_i, qk, v, qk_scale, NEG_SCALE, PRESCALE,
                                         LAZY, LAZY_TAU, PRECISION)
            if not KV_TMA:
                v_ptrs += BLOCK_N * stride_vn
            qk = qk_next
        v = _load_kv(v_ptrs, hi - BLOCK_N, kv_b, kvh, n_ok, d_ok, False, EVEN_D, KV_TMA,
                     VARLEN, BLOCK_N, BLOCK_D)
        acc, l_i, m_i = _full_update(acc, l_i, m_i, qk, v, qk_scale, NEG_SCALE, PRESCALE,
                                     LAZY, LAZY_TAU, PRECISION)
    return acc, l_i, m_i


@triton.jit(do_not_specialize=["BATCH", "N_M"])
def _attn_fwd_kernel(
    Q, K, V, O, CU_Q, CU_K,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    S_q, S_kv, H, GROUP, HEAD_DIM, qk_scale, BATCH, N_M,
    VARLEN: tl.constexpr, CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
    EVEN_D: tl.constexpr, NEG_SCALE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    KV_TMA: tl.constexpr = False, PRESCALE: tl.constexpr = False, LAZY: tl.constexpr = False,
    LAZY_TAU: tl.constexpr = 8.0, GQA_ORDER: tl.constexpr = False,
    WARP_SPEC: tl.constexpr = False, PIPE: tl.constexpr = False, PERSIST: tl.constexpr = False,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    overlap_start(PDL)
    if PERSIST:
        # a fixed number of programs walking the tiles t = query block * (B * H) + b * H + h:
        # the query blocks slowest (heaviest first when causal), the GROUP query heads of a
        # kv head adjacent
        bh = BATCH * H
        for t in range(tl.program_id(0), N_M * bh, tl.num_programs(0)):
            m_idx = t // bh
            b = (t % bh) // H
            h = t % H
            _attn_tile(Q, K, V, O, CU_Q, CU_K,
                       stride_qb, stride_qh, stride_qs, stride_qd,
                       stride_kb, stride_kh, stride_ks, stride_kd,
                       stride_vb, stride_vh, stride_vs, stride_vd,
                       stride_ob, stride_oh, stride_os, stride_od,
                       S_q, S_kv, HEAD_DIM, qk_scale, b, h, h // GROUP, m_idx, N_M,
                       VARLEN, CAUSAL, BOTTOM_RIGHT, EVEN_D, NEG_SCALE, PRECISION,
                       BLOCK_M, BLOCK_N, BLOCK_D, KV_TMA, PRESCALE, LAZY, LAZY_TAU,
                       WARP_SPEC, PIPE)
    else:
        if GQA_ORDER:
            # grid (GROUP * query blocks, B * H_kv): the query heads of a kv head adjacent
            pid0 = tl.program_id(0)
            g = pid0 % GROUP
            m_idx = pid0 // GROUP
            H_kv = H // GROUP
            b = tl.program_id(1) // H_kv
            kvh = tl.program_id(1) % H_kv
            h = kvh * GROUP + g
        else:
            pid_bh = tl.program_id(1)
            b = pid_bh // H
            h = pid_bh % H
            kvh = h // GROUP
            m_idx = tl.program_id(0)
        _attn_tile(Q, K, V, O, CU_Q, CU_K,
                   stride_qb, stride_qh, stride_qs, stride_qd,
                   stride_kb, stride_kh, stride_ks, stride_kd,
                   stride_vb, stride_vh, stride_vs, stride_vd,
                   stride_ob, stride_oh, stride_os, stride_od,
                   S_q, S_kv, HEAD_DIM, qk_scale, b, h, kvh, m_idx, N_M,
                   VARLEN, CAUSAL, BOTTOM_RIGHT, EVEN_D, NEG_SCALE, PRECISION,
                   BLOCK_M, BLOCK_N, BLOCK_D, KV_TMA, PRESCALE, LAZY, LAZY_TAU,
                   WARP_SPEC, PIPE)


@triton.jit
def _sequence_rows(CU_Q, CU_K, b, S_q, S_kv, VARLEN: tl.constexpr):
    """(first query row, queries, first key, keys) of sequence ``b``: read from the offsets
    (varlen) or the dense sizes."""
    if VARLEN:
        q_start = tl.load(CU_Q + b).to(tl.int64)
        len_q = (tl.load(CU_Q + b + 1) - tl.load(CU_Q + b)).to(tl.int32)
        k_start = tl.load(CU_K + b).to(tl.int64)
        len_k = (tl.load(CU_K + b + 1) - tl.load(CU_K + b)).to(tl.int32)
    else:
        q_start = 0
        k_start = 0
        len_q = S_q
        len_k = S_kv
    return q_start, len_q, k_start, len_k


@triton.jit
def _attn_tile(
    Q, K, V, O, CU_Q, CU_K,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    S_q, S_kv, HEAD_DIM, qk_scale, b, h, kvh, m_idx, n_m,
    VARLEN: tl.constexpr, CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
    EVEN_D: tl.constexpr, NEG_SCALE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    KV_TMA: tl.constexpr, PRESCALE: tl.constexpr, LAZY: tl.constexpr,
    LAZY_TAU: tl.constexpr, WARP_SPEC: tl.constexpr, PIPE: tl.constexpr,
):
    """Query block ``m_idx`` (of ``n_m``; reversed when causal) of head ``h`` of sequence
    ``b``."""
    q_start, len_q, k_start, len_k = _sequence_rows(CU_Q, CU_K, b, S_q, S_kv, VARLEN)
    if CAUSAL:
        # heaviest query blocks first
        pid_m = n_m - 1 - m_idx
    else:
        pid_m = m_idx
    start_m = pid_m * BLOCK_M
    if start_m < len_q:
        if BOTTOM_RIGHT:
            shift = len_k - len_q
        else:
            shift = 0
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        b64 = b.to(tl.int64)
        q_base = (Q + b64 * stride_qb + h.to(tl.int64) * stride_qh
                  + (q_start + start_m) * stride_qs)
        rows = tl.arange(0, BLOCK_M)
        q_ptrs = q_base + rows[:, None] * stride_qs + offs_d[None, :] * stride_qd
        if KV_TMA:
            # K and V are descriptors: over [B, H_kv, S_kv, D] (dense) or [total_k, H_kv, D]
            k_ptrs = K
            v_ptrs = V
        else:
            k_base = K + b64 * stride_kb + kvh.to(tl.int64) * stride_kh + k_start * stride_ks
            v_base = V + b64 * stride_vb + kvh.to(tl.int64) * stride_vh + k_start * stride_vs
            k_ptrs = k_base + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd
            v_ptrs = v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd
        m_ok = offs_m[:, None] < len_q
        if EVEN_D:
            q = tl.load(q_ptrs, mask=m_ok, other=0.0)
        else:
            q = tl.load(q_ptrs, mask=m_ok & (offs_d[None, :] < HEAD_DIM), other=0.0)
        if PRESCALE:
            q = (q.to(tl.float32) * qk_scale).to(q.dtype)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        # keys every row of the block sees: below the first row's diagonal, inside len_k
        full_end = (len_k // BLOCK_N) * BLOCK_N
        if CAUSAL:
            diag = start_m + shift + 1          # keys [0, diag) visible to the first row
            diag = tl.maximum(diag, 0)
            full_end = tl.minimum(full_end, (diag // BLOCK_N) * BLOCK_N)
            # the last row sees keys up to start_m + BLOCK_M - 1 + shift
            end = tl.minimum(len_k, tl.maximum(start_m + BLOCK_M + shift, 0))
        else:
            end = len_k
        # the descriptors' batch coordinate (dense) or first key row (varlen): see _load_kv
        if VARLEN:
            kv_b = k_start
        else:
            kv_b = b
        if PIPE:
            acc, l_i, m_i = _attn_block_pipe(
                acc, l_i, m_i, q, k_ptrs, v_ptrs, kv_b, kvh, offs_d, 0, full_end,
                qk_scale, stride_ks, stride_vs, HEAD_DIM,
                EVEN_D, NEG_SCALE, BLOCK_N, BLOCK_D, PRECISION,
                KV_TMA, PRESCALE, LAZY, LAZY_TAU, VARLEN)
        else:
            acc, l_i, m_i = _attn_block(
                acc, l_i, m_i, q, k_ptrs, v_ptrs, kv_b, kvh, offs_m, offs_n, offs_d, 0,
                full_end, len_k, shift, qk_scale, stride_ks, stride_vs, HEAD_DIM,
                False, CAUSAL, EVEN_D, NEG_SCALE, BLOCK_N, BLOCK_D, PRECISION,
                KV_TMA, PRESCALE, LAZY, LAZY_TAU, WARP_SPEC, VARLEN)
        acc, l_i, m_i = _attn_block(
            acc, l_i, m_i, q, k_ptrs, v_ptrs, kv_b, kvh, offs_m, offs_n, offs_d, full_end, end,
            len_k, shift, qk_scale, stride_ks, stride_vs, HEAD_DIM,
            True, CAUSAL, EVEN_D, NEG_SCALE, BLOCK_N, BLOCK_D, PRECISION,
            KV_TMA, PRESCALE, LAZY, LAZY_TAU, WARP_SPEC, VARLEN)

        # rows that saw no key: l_i == 0 and acc == 0, written as zeros
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        out = acc / l_safe[:, None]
        o_base = (O + b64 * stride_ob + h.to(tl.int64) * stride_oh
                  + (q_start + start_m) * stride_os)
        o_ptrs = o_base + rows[:, None] * stride_os + offs_d[None, :] * stride_od
        if EVEN_D:
            tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=m_ok)
        else:
            tl.store(o_ptrs, out.to(O.dtype.element_ty),
                     mask=m_ok & (offs_d[None, :] < HEAD_DIM))


# -- decode: the key axis split over programs ------------------------------------------------
#
# With a few query rows a sequence (decode), the tile kernel above runs one program per
# query head and sequence, each walking all of its keys alone: Llama-3-8B at one token and
# 1024 cached keys is 32 programs on a 132-SM GPU, each reading its key/value head again
# (30 us on an H200 for 4 MiB of keys and values). Here a program takes one key/value head
# of one sequence with all GROUP query heads that share it (their rows stacked into one
# tile: each key block is read once for the group) and a chunk of its keys; a second kernel
# combines the chunks' partial results (running max, sum and unnormalised output, as the
# online softmax keeps them). Chunks are sized so that the grid holds about
# DECODE_PROGRAMS_PER_SM programs an SM.

#: Most query rows a sequence (``max_seqlen_q`` / ``S_q``) the split path takes.
DECODE_MAX_Q = 16
#: Most rows of a program's tile (GROUP query heads x the query rows, padded to powers of
#: two; at least 16, the MMA's M).
DECODE_MAX_ROWS = 64
#: Programs an SM the chunking aims at, and the fewest key blocks a chunk.
#: More programs an SM (finer chunks, more of them to combine) lost on every decode row
#: (H200, 2026-12-04, side by side, us, bf16, 2 / 3 / 4 / 6 an SM): the bench's varlen
#: decode of 16 mixed sequences 58.6 / 60.2 / 63.0 / 62.0 (8: 64.6, 12: 69.9), 32 x 4096
#: keys 126.9 / 143.8 / 143.4 / 131.3, 8 x 8192 69.9 / 72.8 / 81.1 / 79.7.
DECODE_PROGRAMS_PER_SM = 2
DECODE_MIN_BLOCKS = 1
#: Under Triton's interpreter: blocks of 16 keys, so that small tests cross blocks and chunks.
_DECODE_INTERPRETER_BLOCK_N = 16


class DecodePlan(NamedTuple):
    """A split launch: ``splits`` chunks of ``chunk`` keys a key/value head (the last chunk
    runs to the sequence's end, however long), tiles of ``block_g`` query heads x
    ``block_q`` query rows and ``block_n`` keys."""

    splits: int
    chunk: int
    block_g: int
    block_q: int
    block_n: int
    num_warps: int


def decode_plan(max_q: int, max_k: int, group: int, head_dim: int, heads_kv: int,
                device: torch.device, total_k: int | None = None) -> DecodePlan | None:
    """The split launch of a call with at most ``max_q`` queries and ``max_k`` keys a
    sequence, ``total_k`` keys over all sequences (default ``max_k``: one sequence) and
    ``heads_kv`` key/value heads a sequence; None where the tile kernel takes it (more
    query rows than :data:`DECODE_MAX_Q`, or a tile over :data:`DECODE_MAX_ROWS` rows, 32
    for head sizes over 128). Chunks come from the keys of all sequences together, so that
    a long sequence among short ones is cut as finely as the grid needs (its programs, not
    the others', would otherwise take longest), into the number of even chunks that
    brings the grid nearest the target."""
    if max_q < 1 or max_q > DECODE_MAX_Q or max_k < 1:
        return None
    block_q = triton.next_power_of_2(max_q)
    block_g = triton.next_power_of_2(group)
    rows = max(16, block_g * block_q)
    if rows > (DECODE_MAX_ROWS if head_dim <= 128 else 32):
        return None
    if device.type != "cuda":
        block_n = _DECODE_INTERPRETER_BLOCK_N
    else:
        block_n = 64 if head_dim <= 128 else 32
    target = DECODE_PROGRAMS_PER_SM * _num_sms(device)
    work = (max_k if total_k is None else max(total_k, max_k)) * max(1, heads_kv)
    least = DECODE_MIN_BLOCKS * block_n
    # the split count nearest the target: 32 Llama-3-8B sequences of 4k (3972 keys a program
    # wanted) as 256 programs ran at 125 us on an H200, as 512 (chunks of 2048) at 148; 16
    # of mixed lengths, the longest 8192 (1484 wanted), in 6 chunks of it 60.9, in 2 81.3
    splits = max(1, min((2 * max_k * target + work) // (2 * work), triton.cdiv(max_k, least)))
    chunk = max(least, triton.cdiv(triton.cdiv(max_k, splits), block_n) * block_n)
    return DecodePlan(triton.cdiv(max_k, chunk), chunk, block_g, block_q, block_n,
                      4 if rows * max(16, triton.next_power_of_2(head_dim)) <= 8192 else 8)


@triton.jit
def _attn_split_kernel(
    Q, K, V, PART, STATS, CU_Q, CU_K,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    S_q, S_kv, H_kv, GROUP, HEAD_DIM, qk_scale, SPLITS, CHUNK,
    VARLEN: tl.constexpr, CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ALIGN: tl.constexpr = 1,
    HEADS_FIRST: tl.constexpr = False,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """Chunk ``split`` of the keys of key/value head ``kvh`` of sequence ``b`` (``bk = b *
    H_kv + kvh``) against the GROUP query heads of that head: the chunk's running max and
    sum (log2 domain) and unnormalised output, float32, into ``STATS`` / ``PART`` at row
    ``bk * SPLITS + split``. ``HEADS_FIRST``: ``bk`` is ``program_id(0)`` and ``split``
    ``program_id(1)`` (see DECODE_HEADS_FIRST), else the other way. ``ALIGN``: a power of
    two the host checked to divide the query, key and value strides but the features'
    (:func:`opspec.kernels.tiling.row_multiple`: a cache of rows 8 elements longer than
    the head is then read in 16-byte vectors)."""
    overlap_start(PDL)
    if ALIGN > 1:
        stride_qb = as_multiple(stride_qb, ALIGN)
        stride_qh = as_multiple(stride_qh, ALIGN)
        stride_qs = as_multiple(stride_qs, ALIGN)
        stride_kb = as_multiple(stride_kb, ALIGN)
        stride_kh = as_multiple(stride_kh, ALIGN)
        stride_ks = as_multiple(stride_ks, ALIGN)
        stride_vb = as_multiple(stride_vb, ALIGN)
        stride_vh = as_multiple(stride_vh, ALIGN)
        stride_vs = as_multiple(stride_vs, ALIGN)
    if HEADS_FIRST:
        split = tl.program_id(1)
        bk = tl.program_id(0)
    else:
        split = tl.program_id(0)
        bk = tl.program_id(1)
    b = bk // H_kv
    kvh = bk % H_kv
    q_start, len_q, k_start, len_k = _sequence_rows(CU_Q, CU_K, b, S_q, S_kv, VARLEN)
    lo = split * CHUNK
    if lo < len_k and len_q > 0:
        hi = tl.minimum(lo + CHUNK, len_k)
        if split == SPLITS - 1:
            hi = len_k   # the last chunk runs to the end, whatever max_seqlen_k promised
        if BOTTOM_RIGHT:
            shift = len_k - len_q
        else:
            shift = 0
        r = tl.arange(0, BLOCK_M)
        g = r // BLOCK_Q
        i = r % BLOCK_Q
        row_ok = (g < GROUP) & (i < len_q)
        h = (kvh * GROUP + tl.where(g < GROUP, g, 0)).to(tl.int64)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        b64 = b.to(tl.int64)
        q_ptrs = (Q + b64 * stride_qb + h[:, None] * stride_qh
                  + (q_start + i[:, None]) * stride_qs + offs_d[None, :] * stride_qd)
        if EVEN_D:
            q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
        else:
            q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        k_base = K + b64 * stride_kb + kvh.to(tl.int64) * stride_kh + k_start * stride_ks
        v_base = V + b64 * stride_vb + kvh.to(tl.int64) * stride_vh + k_start * stride_vs
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        for start in tl.range(lo, hi, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            n_ok = offs_n < hi
            kv_mask = n_ok[:, None] if EVEN_D else n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd,
                        mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
            seen = n_ok[None, :]
            if CAUSAL:
                seen = seen & (offs_n[None, :] <= (i + shift)[:, None])
            s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows that saw no key yet
            p = tl.math.exp2(s - m_ref[:, None])
            alpha = tl.math.exp2(m_i - m_ref)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                        mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new
        row = (bk * SPLITS + split).to(tl.int64) * BLOCK_M + r
        tl.store(STATS + row * 2, m_i, mask=row_ok)
        tl.store(STATS + row * 2 + 1, l_i, mask=row_ok)
        tl.store(PART + row[:, None] * BLOCK_D + offs_d[None, :], acc, mask=row_ok[:, None])


@triton.jit
def _attn_combine_kernel(
    O, PART, STATS, CU_Q, CU_K,
    stride_ob, stride_oh, stride_os, stride_od,
    S_q, S_kv, H_kv, GROUP, HEAD_DIM, SPLITS, CHUNK,
    VARLEN: tl.constexpr, EVEN_D: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """The output rows of key/value head ``kvh`` of sequence ``b`` (``program_id(0) = b *
    H_kv + kvh``): its chunks' partial results rescaled to their common max and summed;
    rows that saw no key are zeros."""
    overlap_start(PDL)
    bk = tl.program_id(0)
    b = bk // H_kv
    kvh = bk % H_kv
    q_start, len_q, k_start, len_k = _sequence_rows(CU_Q, CU_K, b, S_q, S_kv, VARLEN)
    if len_q > 0:
        r = tl.arange(0, BLOCK_M)
        g = r // BLOCK_Q
        i = r % BLOCK_Q
        row_ok = (g < GROUP) & (i < len_q)
        offs_d = tl.arange(0, BLOCK_D)
        m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        chunks = tl.minimum(tl.cdiv(len_k, CHUNK), SPLITS)
        for c in range(0, chunks):
            row = (bk * SPLITS + c).to(tl.int64) * BLOCK_M + r
            m_c = tl.load(STATS + row * 2, mask=row_ok, other=float("-inf"))
            l_c = tl.load(STATS + row * 2 + 1, mask=row_ok, other=0.0)
            a_c = tl.load(PART + row[:, None] * BLOCK_D + offs_d[None, :],
                          mask=row_ok[:, None], other=0.0)
            m_new = tl.maximum(m, m_c)
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
            old = tl.math.exp2(m - m_ref)
            new = tl.math.exp2(m_c - m_ref)
            l = l * old + l_c * new
            acc = acc * old[:, None] + a_c * new[:, None]
            m = m_new
        out = acc / tl.where(l == 0.0, 1.0, l)[:, None]
        h = (kvh * GROUP + tl.where(g < GROUP, g, 0)).to(tl.int64)
        o_ptrs = (O + b.to(tl.int64) * stride_ob + h[:, None] * stride_oh
                  + (q_start + i[:, None]) * stride_os + offs_d[None, :] * stride_od)
        mask = row_ok[:, None] if EVEN_D else row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=mask)


def _split_plan(config, q_name: str, max_q: int, max_k: int, group: int, head_dim: int,
                heads_kv: int, device: torch.device, total_k: int) -> DecodePlan | None:
    """The split launch a launcher's call takes (:func:`decode_plan`): only with no
    ``config`` or ``config="split"``, which raises where the split path cannot take the
    call (``q_name``: the launcher's name for the query count)."""
    if config is not None and config != "split":
        return None
    plan = decode_plan(max_q, max_k, group, head_dim, heads_kv, device, total_k)
    if plan is None and config == "split":
        raise ValueError(f"the split path takes at most {DECODE_MAX_Q} query rows and "
                         f"tiles of at most {DECODE_MAX_ROWS} rows; got {q_name}={max_q}, "
                         f"{group} query heads a key/value head")
    return plan


class _Head(NamedTuple):
    """What both launchers derive from the head size and dtype: the padded head block, the
    softmax scale (``1 / sqrt(D)`` unless given) and the products' precision."""

    block_d: int
    scale: float
    precision: str


def _head(q: torch.Tensor, scale: float | None) -> _Head:
    D = q.shape[-1]
    return _Head(max(16, triton.next_power_of_2(D)),
                 1.0 / math.sqrt(D) if scale is None else float(scale),
                 "ieee" if q.dtype == torch.float32 else "tf32")


#: The split kernel's grid is (sequences x kv heads, chunks): programs launched together take
#: the same chunk of adjacent heads, so they read neighbouring rows of the same tokens of a
#: [tokens, kv heads, D] cache, where (chunks, sequences x kv heads) runs the chunks of one
#: head together. H200 (benchmarks/decode_order_probe.py, bf16, 32 / 8 heads of 128, two
#: runs on 2026-12-02, us, chunks first -> heads first): 16 x 4096 keys 68.46 -> 68.43,
#: its cache rows 8 elements longer 92.02 -> 87.98 (4 longer: 99.02 both), the bench's
#: varlen decode of 16 mixed sequences 59.31 -> 58.64, 64 x 2048 141.49 -> 141.74, 4 x
#: 16384 71.84 -> 71.55. The first run gave the same ratios within 0.2 %.
DECODE_HEADS_FIRST = True


def _launch_decode(q, k, v, out, cu_q, cu_k, strides, S_q, S_kv, batch, H, H_kv,
                   scale, causal, bottom_right, varlen, plan: DecodePlan):
    D = q.shape[-1]
    block_d, sc, precision = _head(q, scale)
    block_m = max(16, plan.block_g * plan.block_q)
    group = H // H_kv
    rows = batch * H_kv * plan.splits * block_m
    part = torch.empty(rows * block_d, dtype=torch.float32, device=q.device)
    stats = torch.empty(rows * 2, dtype=torch.float32, device=q.device)
    pdl = overlap_options(q.device)
    even_d = block_d == D
    qkv = strides[:12]
    align = (row_multiple(q.element_size(), *qkv[0:3], *qkv[4:7], *qkv[8:11])
             if qkv[3] == qkv[7] == qkv[11] == 1 else 1)
    grid = ((batch * H_kv, plan.splits) if DECODE_HEADS_FIRST
            else (plan.splits, batch * H_kv))
    launch(_attn_split_kernel, grid,
           q, k, v, part, stats, cu_q, cu_k, *strides[:12],
           S_q, S_kv, H_kv, group, D, sc * _LOG2E, plan.splits, plan.chunk,
           VARLEN=varlen, CAUSAL=bool(causal), BOTTOM_RIGHT=bottom_right, EVEN_D=even_d,
           PRECISION=precision, BLOCK_G=plan.block_g, BLOCK_Q=plan.block_q, BLOCK_M=block_m,
           BLOCK_N=plan.block_n, BLOCK_D=block_d, ALIGN=align, HEADS_FIRST=DECODE_HEADS_FIRST,
           num_warps=plan.num_warps, num_stages=3, **pdl)
    launch(_attn_combine_kernel, (batch * H_kv,),
           out, part, stats, cu_q, cu_k, *strides[12:],
           S_q, S_kv, H_kv, group, D, plan.splits, plan.chunk,
           VARLEN=varlen, EVEN_D=even_d, BLOCK_Q=plan.block_q, BLOCK_M=block_m,
           BLOCK_D=block_d, num_warps=4, **pdl)
    return out


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
    if not (q.dtype == k.dtype == v.dtype == out.dtype) or q.dtype not in _SUPPORTED:
        raise TypeError(f"q, k, v and out must share a dtype in {_SUPPORTED}, got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}, {out.dtype}")
    if out.shape != q.shape:
        raise ValueError(f"out must have q's shape {list(q.shape)}, got {list(out.shape)}")
    D = q.shape[-1]
    if k.shape[-1] != D or v.shape != k.shape:
        raise ValueError(f"k and v must have one shape with head size {D}, got "
                         f"{list(k.shape)} and {list(v.shape)}")
    if D > MAX_HEAD_DIM or D < 1:
        raise ValueError(f"head size must be in [1, {MAX_HEAD_DIM}], got {D}")


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4     # the interpreter: a few programs, each walking several tiles
    return torch.cuda.get_device_properties(device).multi_processor_count


def _tma_ok(t: torch.Tensor, rank: int = 4) -> bool:
    """A key or value tensor of ``rank`` dims (4: dense ``[B, H_kv, S_kv, D]``; 3: varlen
    ``[total_k, H_kv, D]``) a TMA descriptor can address: unit feature stride, the other
    strides multiples of 16 bytes, a 16-byte aligned base, and (its coordinates are 32-bit)
    every size below 2**31."""
    es = t.element_size()
    last = rank - 1
    return (t.dim() == rank and t.stride(last) == 1 and t.data_ptr() % 16 == 0
            and t.shape[last] * es >= 16 and max(t.shape) < 2**31
            and all(t.stride(i) * es % 16 == 0 and t.stride(i) > 0 for i in range(last)))


def as_launched(cfg: AttnConfig, descriptors_ok: bool) -> AttnConfig:
    """The configuration that runs: where the ``tma`` variant was asked for but a
    descriptor cannot take the keys or values (``descriptors_ok`` False, see
    :func:`_tma_ok`), their loads fall back to pointers and the register cap goes with
    ``tma``: the cap is sized for the descriptor form, and the pointer form spills under it
    (44 stores to local memory in the sm_90 build of the D = 128 default under Triton 3.6,
    none uncapped)."""
    flags = cfg.flags()
    if "tma" not in flags or descriptors_ok:
        return cfg
    rest = sorted(flags - {"tma"}, key=VARIANTS.index)
    return cfg._replace(variant="+".join(rest) or "base", maxnreg=0)


def _pointer_ok(t: torch.Tensor, rank: int) -> bool:
    """A key or value tensor whose rows the pointer loads can read 16 bytes at a time: unit
    feature stride, a 16-byte aligned base and the other strides multiples of 16 elements.
    Triton marks an integer argument divisible by 16 or nothing, so a row stride of 132 or
    136 elements leaves it no alignment to prove, and the loads go element by element."""
    last = rank - 1
    return (t.stride(last) == 1 and t.data_ptr() % 16 == 0
            and all(t.stride(i) % 16 == 0 for i in range(last)))


def kv_for_loads(k: torch.Tensor, v: torch.Tensor, rank: int,
                 tma: bool) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The keys and values the prefill kernel reads, and whether through descriptors
    (``tma``: the configuration asks for them). Descriptors where both tensors allow them
    (:func:`_tma_ok`); else the pointer loads where both rows are aligned (:func:`_pointer_ok`;
    an expanded, stride-0 head axis included); else a tensor that is neither is copied into
    a fresh contiguous one, where the copy's rows are aligned for the form asked for (16
    elements for the pointer loads, 16 bytes for descriptors) and the device has memory for
    it (:func:`~opspec.kernels.tiling.contiguous_copy`).

    Why copy: the pointer form on rows it cannot prove aligned ran 3.3x slower than a copy
    followed by the descriptor form (H200, bf16, B = 4, 32 / 8 heads, 4096 keys, D = 128,
    keys and values as views of 132-element rows: 7400 us against 2232, the copies 86 us of
    it; contiguous inputs 2102). Under the descriptor form's register cap, as such calls ran
    before, the pointer form took 30.8 ms."""
    if tma and _tma_ok(k, rank) and _tma_ok(v, rank):
        return k, v, True
    if _pointer_ok(k, rank) and _pointer_ok(v, rank):
        return k, v, False

    def fixed(t):
        if _pointer_ok(t, rank) or (tma and _tma_ok(t, rank)):
            return t
        row = t.shape[-1]
        if row % 16 and not (tma and row * t.element_size() % 16 == 0):
            return t        # a contiguous copy's rows would not be aligned either
        c = contiguous_copy(t)
        return t if c is None else c     # (no memory for a copy: the element loads)

    k, v = (fixed(k),) * 2 if v is k else (fixed(k), fixed(v))   # one tensor: one copy
    return k, v, tma and _tma_ok(k, rank) and _tma_ok(v, rank)


def _kv_strides(t: torch.Tensor, varlen: bool) -> tuple[int, ...]:
    """The kernel's (batch, head, token, feature) strides of a key or value tensor: varlen
    packs tokens along the first axis, with no batch stride (the offsets place sequences)."""
    if varlen:
        return (0, t.stride(1), t.stride(0), t.stride(2))
    return tuple(t.stride())


def _launch(q, k, v, out, cu_q, cu_k, strides, S_q, S_kv, batch, H, H_kv, grid_m,
            scale, causal, bottom_right, varlen, config):
    D = q.shape[-1]
    cfg = (attention_config(D, q.device.type, bool(causal), grid_m, varlen) if config is None
           else as_config(config))
    rank = 3 if varlen else 4
    k2, v2, descriptors = kv_for_loads(k, v, rank, "tma" in cfg.flags())
    if k2 is not k or v2 is not v:     # a copy: its strides
        k, v = k2, v2
        strides = (*strides[:4], *_kv_strides(k, varlen), *_kv_strides(v, varlen),
                   *strides[12:])
    cfg = as_launched(cfg, descriptors)
    flags = cfg.flags()
    block_m, block_n = cfg.block_m, cfg.block_n
    block_d, sc, precision = _head(q, scale)
    group = H // H_kv
    kv_tma = "tma" in flags
    if kv_tma:
        box = [block_n, 1, block_d] if varlen else [1, 1, block_n, block_d]
        k_arg = TensorDescriptor(k, list(k.shape), list(k.stride()), box)
        v_arg = TensorDescriptor(v, list(v.shape), list(v.stride()), box)
    else:
        k_arg, v_arg = k, v
    n_m = triton.cdiv(grid_m, block_m)
    if "gqa" in flags:
        grid = (n_m * group, batch * H_kv)
    else:
        grid = (n_m, batch * H)
    launch(_attn_fwd_kernel, grid,
        q, k_arg, v_arg, out, cu_q, cu_k, *strides,
        S_q, S_kv, H, group, D, sc * _LOG2E, batch, n_m,
        VARLEN=varlen, CAUSAL=bool(causal), BOTTOM_RIGHT=bottom_right,
        EVEN_D=(block_d == D), NEG_SCALE=(sc < 0),
        PRECISION=precision, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        KV_TMA=kv_tma, PRESCALE="prescale" in flags, LAZY="lazy" in flags,
        LAZY_TAU=LAZY_TAU, GQA_ORDER="gqa" in flags, WARP_SPEC="ws" in flags,
        PIPE="pipe" in flags, PERSIST="persist" in flags,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap_options(q.device),
        **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))
    return out


def attention_dense_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           out: torch.Tensor, is_causal: bool = False,
                           scale: float | None = None, *, config=None) -> torch.Tensor:
    """SDPA (``enable_gqa=True``, top-left causal mask) of ``q [B, H, S_q, D]`` over
    ``k, v [B, H_kv, S_kv, D]`` (any strides) into ``out [B, H, S_q, D]``; returns out.
    ``config`` (an :class:`AttnConfig` or a tuple) overrides :func:`attention_config`."""
    _check(q, k, v, out)
    B, H, S_q, _ = q.shape
    H_kv, S_kv = k.shape[1], k.shape[2]
    if k.shape[0] != B or H_kv < 1 or H % H_kv != 0:
        raise ValueError(f"k must be [B={B}, H_kv, S_kv, D] with H_kv dividing H={H}, got "
                         f"{list(k.shape)}")
    if out.numel() == 0:
        return out
    if S_kv == 0:   # no key: every row is zero
        return out.zero_()
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
    plan = _split_plan(config, "S_q", S_q, S_kv, H // H_kv, q.shape[-1], H_kv, q.device,
                       B * S_kv)
    if plan is not None:
        return _launch_decode(q, k, v, out, q, k, strides, S_q, S_kv, B, H, H_kv, scale,
                              is_causal, False, False, plan)
    return _launch(q, k, v, out, q, k, strides, S_q, S_kv, B, H, H_kv, S_q, scale,
                   is_causal, False, False, config)


def attention_varlen_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                            max_seqlen_q: int, out: torch.Tensor,
                            softmax_scale: float | None = None, causal: bool = False,
                            *, config=None, max_seqlen_k: int | None = None) -> torch.Tensor:
    """flash_attn_varlen_func (bottom-right causal mask) of packed ``q [total_q, H, D]``
    over ``k, v [total_k, H_kv, D]`` (any strides), ``cu_seqlens_q`` / ``cu_seqlens_k``
    int32 ``[B + 1]`` on q's device, every sequence at most ``max_seqlen_q`` queries; into
    ``out [total_q, H, D]``; returns out. The offsets are read on the device only."""
    _check(q, k, v, out)
    _, H, _ = q.shape
    H_kv = k.shape[1]
    if H_kv < 1 or H % H_kv != 0:
        raise ValueError(f"H_kv={H_kv} must divide H={H}")
    batch = cu_seqlens_q.shape[0] - 1
    if cu_seqlens_k.shape[0] != batch + 1:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must have the same length")
    if out.numel() == 0 or batch <= 0 or max_seqlen_q <= 0:
        return out
    if k.shape[0] == 0:   # no key in any sequence: every row is zero
        return out.zero_()
    # the token axis plays the sequence axis; the batch stride is 0 (offsets do the rest)
    strides = (0, q.stride(1), q.stride(0), q.stride(2),
               *_kv_strides(k, True), *_kv_strides(v, True),
               0, out.stride(1), out.stride(0), out.stride(2))
    max_k = k.shape[0] if max_seqlen_k is None else min(int(max_seqlen_k), k.shape[0])
    plan = _split_plan(config, "max_seqlen_q", int(max_seqlen_q), max_k, H // H_kv,
                       q.shape[-1], H_kv, q.device, k.shape[0])
    if plan is not None:
        return _launch_decode(q, k, v, out, cu_seqlens_q, cu_seqlens_k, strides, 0, 0, batch,
                              H, H_kv, softmax_scale, causal, True, True, plan)
    return _launch(q, k, v, out, cu_seqlens_q, cu_seqlens_k, strides, 0, 0, batch, H, H_kv,
                   int(max_seqlen_q), softmax_scale, causal, True, True, config)
