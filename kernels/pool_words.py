"""3 x 3 stride-2 max pooling of 16-bit rows read as 32-bit words (the CNN stems).

The band kernel (:mod:`opspec.kernels.pool`) reads an output's two aligned window columns
as one vector run and its third column by strided 2-byte loads, one an output; each lane
then holds four outputs of one plane, so a 56-wide stem row fills half a warp. Here the row
is a run of 32-bit words, word ``ow`` holding input columns ``2 ow`` and ``2 ow + 1``: a lane
takes a *quad*, four consecutive outputs, and reads words ``4q .. 4q + 3`` with one 16-byte
load and the one word the quad's third columns reach outside it (word ``4q - 1`` for a left
padding of 1, ``4q + 4`` for none) with one 4-byte load. Every third column is then a half
of a word the lane holds: with padding 1 output ``ow``'s window is ``{hi(w[ow - 1]),
lo(w[ow]), hi(w[ow])}``, without it ``{lo(w[ow]), hi(w[ow]), lo(w[ow + 1])}``. The halves are
paired by byte permutes (``prmt``) and reduced by NaN-propagating ``bf16x2`` / ``f16x2``
maxima, two outputs an instruction; an output row so costs, a quad, the loads of two new
input rows (2 each), 6 permutes, 7 three-input maxima (sm_90 fuses two ``max`` into one
``VHMNMX``) and one 8-byte store. The window's rows combine as the band kernel's do:
each input row of a band is reduced once, each output row takes the maximum of its three
(packed) row results, and rows outside the input are clamped into it (the clamped row lies
in the same window).

Served: max, a 3 x 3 window, stride 2, dilation 1, paddings 0 or 1 with ``H = 2 H_out``
and ``W = 2 W_out`` (ResNet's padding 1, GoogLeNet's 0 with ceil_mode, on even sizes),
16-bit inputs whose rows have unit stride, ``W_out`` a multiple of 4
(whole quads, so no quad straddles the row's end), and 16-byte aligned rows and planes
(:func:`words_fit`). The per-word work is PTX; under Triton's interpreter
(``EMULATE``) the same loads and word layout go through portable code that unpacks each half
to float32, so the CPU tests follow the kernel's indexing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.launch import launch
from opspec.kernels.pdl import overlap_options, overlap_start
from opspec.kernels.tiling import INT32_LIMIT

__all__ = ["WordsConfig", "words_fit", "max_pool3x3s2_words"]


class WordsConfig(NamedTuple):
    """The launch: ``rows`` output rows a program (a band reads ``2 rows + 1`` input rows),
    ``planes`` planes a program (a power of two), ``num_warps``; the quads of a row are one
    block of ``next_power_of_2(W_out / 4)`` lanes."""

    rows: int = 8
    planes: int = 2
    num_warps: int = 1


#: Offsets from which the kernel computes in int64 (a name of its own: tests lower it).
_INT32_LIMIT = INT32_LIMIT

#: -inf in both halves of a word, by dtype (the identity of the max for a missing column).
_NEG_INF_WORD = {torch.bfloat16: 0xFF80FF80, torch.float16: 0xFC00FC00}


def _load_asm(kind: str, pad: int) -> tuple[str, str]:
    """One input row of a quad: ``$0..$3`` words 4q .. 4q + 3 (undefined where the quad is
    not read, and never stored), ``$4`` the outside word (padding 1: word 4q - 1; padding 0:
    word 4q + 4), -inf where it is not read. ``$5`` word 4q's address, ``$6`` whether the
    quad is read, ``$7`` whether its outside word is."""
    ninf = _NEG_INF_WORD[torch.bfloat16 if kind == "bf16" else torch.float16]
    off = -4 if pad == 1 else 16
    body = ["{", ".reg .pred pq, pe;", "setp.ne.b32 pq, $6, 0;", "setp.ne.b32 pe, $7, 0;",
            "@pq ld.global.v4.b32 {$0, $1, $2, $3}, [$5];",
            f"@pe ld.global.b32 $4, [$5+{off}];", f"@!pe mov.b32 $4, {ninf};", "}"]
    return "\n".join(body), "=r,=r,=r,=r,=r,l,r,r"


def _max_asm(kind: str, pad: int) -> tuple[str, str]:
    """One output row of a quad from its three input rows' words (``$2..$16``: rows 0, 1, 2,
    five words each as :func:`_load_asm` gives them): the rows' maxima word by word, then
    each output's three columns; ``$0, $1`` the packed outputs (0, 1) and (2, 3)."""
    mx = f"max.NaN.{kind}x2"
    body = ["{", ".reg .b32 v0, v1, v2, v3, e, a, b, t;"]
    for w, name in enumerate(("v0", "v1", "v2", "v3", "e")):
        body += [f"{mx} {name}, ${2 + w}, ${7 + w};", f"{mx} {name}, {name}, ${12 + w};"]
    # (lo, hi) pairs of two words: 0x5410 = (lo x, lo y), 0x7632 = (hi x, hi y)
    for out, (x, y) in enumerate((("v0", "v1"), ("v2", "v3"))):
        if pad == 1:   # third columns: hi of the word before each output's
            third = ("e", "v0") if out == 0 else ("v1", "v2")
            sel = "0x7632"
        else:          # lo of the word after
            third = ("v1", "v2") if out == 0 else ("v3", "e")
            sel = "0x5410"
        body += [f"prmt.b32 a, {x}, {y}, 0x5410;", f"prmt.b32 b, {x}, {y}, 0x7632;",
                 f"{mx} a, a, b;", f"prmt.b32 t, {third[0]}, {third[1]}, {sel};",
                 f"{mx} ${out}, a, t;"]
    body.append("}")
    return "\n".join(body), ",".join(["=r", "=r"] + ["r"] * 15)


_STORE_ASM = ("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p st.global.v2.b32 [$1], {$3, $4}; "
              "mov.b32 $0, 0; }")
_ASM = {(kind, pad): _load_asm(kind, pad) + _max_asm(kind, pad)
        for kind in ("bf16", "f16") for pad in (0, 1)}


@triton.jit
def _unpack(w, BF16: tl.constexpr):
    # the two halves of words w as float32 (the portable model)
    lo = w & 0xFFFF
    hi = (w >> 16) & 0xFFFF
    if BF16:
        return (lo << 16).to(tl.float32, bitcast=True), (hi << 16).to(tl.float32, bitcast=True)
    else:
        lo16 = lo.to(tl.int16).to(tl.float16, bitcast=True)
        hi16 = hi.to(tl.int16).to(tl.float16, bitcast=True)
        return lo16.to(tl.float32), hi16.to(tl.float32)


@triton.jit
def _pack(lo, hi, BF16: tl.constexpr):
    # float32 values that are exact in the 16-bit type, as words (the portable model)
    if BF16:
        lo_b = lo.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
        hi_b = hi.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    else:
        lo_b = lo.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
        hi_b = hi.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return lo_b | (hi_b << 16)


@triton.jit
def _nan_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max3(a, b, c):
    return _nan_max(_nan_max(a, b), c)


@triton.jit
def _load_row(ptrs, qf, ef, quad_ok, out_ok, NEG: tl.constexpr, PAD: tl.constexpr,
              EMULATE: tl.constexpr, LOAD: tl.constexpr, LOAD_CONS: tl.constexpr):
    # the five words of each quad of one input row (see _load_asm)
    if EMULATE:
        c0 = tl.load(ptrs, mask=quad_ok, other=NEG)
        c1 = tl.load(ptrs + 1, mask=quad_ok, other=NEG)
        c2 = tl.load(ptrs + 2, mask=quad_ok, other=NEG)
        c3 = tl.load(ptrs + 3, mask=quad_ok, other=NEG)
        if PAD == 1:
            e = tl.load(ptrs - 1, mask=out_ok, other=NEG)
        else:
            e = tl.load(ptrs + 4, mask=out_ok, other=NEG)
        return c0, c1, c2, c3, e
    else:
        return tl.inline_asm_elementwise(LOAD, LOAD_CONS, [ptrs.to(tl.int64, bitcast=True), qf, ef],
                                         (tl.int32, tl.int32, tl.int32, tl.int32, tl.int32),
                                         True, 1)


@triton.jit
def _emulated_max(r0, r1, r2, PAD: tl.constexpr, BF16: tl.constexpr):
    # the portable model of _max_asm
    c = ()
    for w in tl.static_range(5):
        l0, h0 = _unpack(r0[w], BF16)
        l1, h1 = _unpack(r1[w], BF16)
        l2, h2 = _unpack(r2[w], BF16)
        c = c + ((_max3(l0, l1, l2), _max3(h0, h1, h2)),)
    if PAD == 1:
        m0 = _max3(c[4][1], c[0][0], c[0][1])
        m1 = _max3(c[0][1], c[1][0], c[1][1])
        m2 = _max3(c[1][1], c[2][0], c[2][1])
        m3 = _max3(c[2][1], c[3][0], c[3][1])
    else:
        m0 = _max3(c[0][0], c[0][1], c[1][0])
        m1 = _max3(c[1][0], c[1][1], c[2][0])
        m2 = _max3(c[2][0], c[2][1], c[3][0])
        m3 = _max3(c[3][0], c[3][1], c[4][0])
    return _pack(m0, m1, BF16), _pack(m2, m3, BF16)


@triton.jit
def _pool_words_kernel(
    x_ptr, out_ptr,
    P, C, H, H_out, NQ, n_row_blocks,
    sxn, sxc, out_plane,
    SXH: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, ROWS: tl.constexpr,
    PLANES: tl.constexpr, BLOCK_Q: tl.constexpr, MERGE_NC: tl.constexpr, BF16: tl.constexpr,
    EMULATE: tl.constexpr, NEG: tl.constexpr, LOAD: tl.constexpr, LOAD_CONS: tl.constexpr,
    MAX: tl.constexpr, MAX_CONS: tl.constexpr, STORE: tl.constexpr,
    USE_INT64: tl.constexpr,
    PDL: tl.constexpr = False,   # launched dependent (opspec.kernels.pdl)
):
    """x and out as int32 words; strides and ``out_plane`` in words, the row stride ``SXH``
    a constant (the rows' offsets then fold into the loads' addresses). A program takes
    ``PLANES`` planes, ``ROWS`` output rows (``ROWS`` divides ``H_out``) and every quad of
    them: element (p, q) of the [PLANES, BLOCK_Q] tile is quad q of plane p. ``H = 2
    H_out``, so of a band's ``2 ROWS + 1`` input rows only the first (padding 1, the top
    band: row -1) and the last (no padding, the bottom band: row H) can fall outside the
    input; each is replaced by its neighbour, which lies in the same window."""
    overlap_start(PDL)
    pid = tl.program_id(0)
    oh0 = (pid % n_row_blocks) * ROWS
    pg = pid // n_row_blocks
    planes = pg * PLANES + tl.arange(0, PLANES)[:, None]     # [PLANES, 1]
    q = tl.arange(0, BLOCK_Q)[None, :]                         # [1, BLOCK_Q]
    quad_ok = (planes < P) & (q < NQ)
    if PW == 1:
        out_ok = quad_ok & (q > 0)                 # word 4q - 1 is in the row
    else:
        out_ok = quad_ok & (q < NQ - 1)            # word 4q + 4 is
    planes = tl.minimum(planes, P - 1)
    if USE_INT64:
        planes = planes.to(tl.int64)
    if MERGE_NC:
        base = planes * sxc
    else:
        base = (planes // C) * sxn + (planes % C) * sxc
    ih0 = 2 * oh0 - PH
    band = x_ptr + (base + ih0 * SXH + 4 * q)      # row i of the band: band + i * SXH
    qf = quad_ok.to(tl.int32)
    ef = out_ok.to(tl.int32)
    # the band's first and last rows, moved inside the input where they fall outside it
    first = band + tl.where(ih0 + q * 0 < 0, SXH, 0)
    last = band + tl.where(ih0 + 2 * ROWS + q * 0 >= H, (2 * ROWS - 1) * SXH, 2 * ROWS * SXH)
    prev = _load_row(first, qf, ef, quad_ok, out_ok, NEG, PW, EMULATE, LOAD, LOAD_CONS)
    obase = out_ptr + (planes * out_plane + oh0 * (2 * NQ) + 2 * q)
    for r in tl.static_range(ROWS):
        mid = _load_row(band + (2 * r + 1) * SXH, qf, ef, quad_ok, out_ok, NEG, PW, EMULATE,
                        LOAD, LOAD_CONS)
        if r == ROWS - 1:
            nxt = _load_row(last, qf, ef, quad_ok, out_ok, NEG, PW, EMULATE, LOAD, LOAD_CONS)
        else:
            nxt = _load_row(band + (2 * r + 2) * SXH, qf, ef, quad_ok, out_ok, NEG, PW,
                            EMULATE, LOAD, LOAD_CONS)
        optr = obase + r * (2 * NQ)
        if EMULATE:
            m01, m23 = _emulated_max(prev, mid, nxt, PW, BF16)
            tl.store(optr, m01, mask=quad_ok)
            tl.store(optr + 1, m23, mask=quad_ok)
        else:
            m01, m23 = tl.inline_asm_elementwise(
                MAX, MAX_CONS, [prev[0], prev[1], prev[2], prev[3], prev[4], mid[0], mid[1],
                                mid[2], mid[3], mid[4], nxt[0], nxt[1], nxt[2], nxt[3], nxt[4]],
                (tl.int32, tl.int32), True, 1)
            tl.inline_asm_elementwise(STORE, "=r,l,r,r,r",
                                      [optr.to(tl.int64, bitcast=True), qf, m01, m23],
                                      tl.int32, False, 1)
        prev = nxt


def words_fit(x4: torch.Tensor, kernel, stride, padding, dilation, H_out: int,
              W_out: int) -> bool:
    """Whether :func:`max_pool3x3s2_words` serves ``x4`` ([N, C, H, W]) and the window (see
    the module's docstring): also ``H = 2 H_out``, so that only a band's first or last input
    row can fall outside the input."""
    N, C, H, W = x4.shape
    if x4.dtype not in _NEG_INF_WORD or tuple(kernel) != (3, 3) or tuple(stride) != (2, 2) \
            or tuple(dilation) != (1, 1) or any(p not in (0, 1) for p in padding):
        return False
    if W_out * 2 != W or W_out % 4 or H_out * 2 != H or N * C == 0:
        return False
    sn, sc, sh, sw = x4.stride()
    aligned = x4.data_ptr() % 16 == 0 and x4.storage_offset() % 8 == 0 \
        and all(s % 8 == 0 for s in (sc, sh)) and (N == 1 or sn % 8 == 0)
    return sw == 1 and aligned


def words_rows(H_out: int, most: int) -> int:
    """Output rows a program: the largest divisor of ``H_out`` up to ``most``."""
    return max(r for r in range(1, max(1, min(most, H_out)) + 1) if H_out % r == 0)


def max_pool3x3s2_words(x4: torch.Tensor, out: torch.Tensor, padding, cfg: WordsConfig
                        ) -> torch.Tensor:
    """``max_pool2d(x4, 3, 2, padding)`` into the contiguous ``out`` ([N, C, H_out, W_out]),
    for inputs :func:`words_fit` accepts (the caller checks it)."""
    N, C, H, W = x4.shape
    H_out, W_out = out.shape[-2], out.shape[-1]
    P = N * C
    NQ = W_out // 4
    rows = words_rows(H_out, cfg.rows)
    # words of the rows (unit column stride, even strides and offset: words_fit's checks)
    xw = x4.view(torch.int32)
    ow = out.view(torch.int32)
    sn, sc, sh, _ = xw.stride()
    merge = N == 1 or sn == C * sc
    bound = max((N + 1) * abs(sn) + (C + 1) * abs(sc) + (H + 1) * abs(sh) + W,
                (P + cfg.planes) * H_out * W_out)
    bf16 = x4.dtype == torch.bfloat16
    load, load_cons, mx, mx_cons = _ASM[("bf16" if bf16 else "f16", padding[1])]
    launch(_pool_words_kernel, (triton.cdiv(P, cfg.planes) * (H_out // rows),),
        xw, ow, P, C, H, H_out, NQ, H_out // rows, sn, sc, H_out * W_out // 2,
        SXH=sh, PH=padding[0], PW=padding[1], ROWS=rows, PLANES=cfg.planes,
        BLOCK_Q=triton.next_power_of_2(NQ), MERGE_NC=merge, BF16=bf16,
        EMULATE=TRITON_INTERPRETED, NEG=_NEG_INF_WORD[x4.dtype] - (1 << 32), LOAD=load,
        LOAD_CONS=load_cons, MAX=mx, MAX_CONS=mx_cons, STORE=_STORE_ASM,
        USE_INT64=bound > _INT32_LIMIT, num_warps=cfg.num_warps,
        **overlap_options(x4.device),
    )
    return out
