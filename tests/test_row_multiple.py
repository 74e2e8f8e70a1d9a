"""Row alignment hints (``opspec.kernels.tiling.row_multiple`` / ``as_multiple``): the
launchers of the norms, softmax, SiluAndMul, the 2-D binary ops, the strided activations
(and the row copy), the row and column reductions, the pointer BMM kernel and decode
attention pass the power of two that divides a call's row lengths and strides, the
kernels rebuild those values as multiples of it, and the sm_90 builds then read rows 8
elements longer than they hold in 16-byte vectors.

Through the interpreter (or on CUDA where there is a GPU): the value the host derives, the
hint each launch carries, and that the kernels give on padded views the bits they give on
contiguous tensors (a wrong hint would read the wrong elements; on a GPU, up to the last
bit of a reduction). In a fresh process (sm_90 builds): the loads the hint buys."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from opspec.kernels.devices import TRITON_DEVICES
from opspec.kernels.launch import recording
from opspec.kernels.tiling import row_multiple

# the kernels run on CUDA where there is a GPU, else through the interpreter
DEV = "cuda" if torch.cuda.is_available() and "cuda" in TRITON_DEVICES else "cpu"
needs_triton = pytest.mark.skipif(DEV not in TRITON_DEVICES,
                                  reason="Triton kernels need the interpreter or CUDA")


# ============================================================================ the host's value

@pytest.mark.parametrize("element_size, values, want", [
    (2, (4096, 4096, 4096), 1),       # Triton sees multiples of 16 itself
    (2, (4096, 4104, 4104), 8),       # rows 8 elements longer: 16-byte rows
    (2, (4096, 4100, 4100), 4),       # 4 longer: 8-byte rows
    (2, (1000, 1000), 8),             # contiguous rows of 1000
    (2, (48, 50), 2),
    (2, (45, 45), 1),                 # odd: nothing divides
    (4, (1000, 1000), 4),             # float32: 4 elements fill a 16-byte vector
    (4, (4096, 4104), 4),
    (1, (4104,), 8),
    (2, (4104, 0), 8),                # a stride of 0 (an absent tensor) constrains nothing
    (2, (-4104, 4104), 8),            # a negative stride by its magnitude
    (8, (6,), 2),
])
def test_row_multiple_values(element_size, values, want):
    assert row_multiple(element_size, *values) == want


@given(st.sampled_from([1, 2, 4, 8]),
       st.lists(st.integers(-(1 << 20), 1 << 20), min_size=1, max_size=6))
def test_row_multiple_is_the_largest_power_of_two_short_of_triton(element_size, values):
    """1 where every value is a multiple of 16 (Triton's own specialisation); else the
    largest power of two up to a 16-byte vector's elements that divides them all."""
    m = row_multiple(element_size, *values)
    if all(v % 16 == 0 for v in values):
        assert m == 1
        return
    vector = max(1, 16 // element_size)
    assert m & (m - 1) == 0 and 1 <= m <= vector
    assert all(v % m == 0 for v in values)
    assert 2 * m > vector or any(v % (2 * m) for v in values)


@given(st.sampled_from([1, 2, 4, 8, 16]),
       st.lists(st.integers(-(1 << 20), 1 << 20), min_size=1, max_size=6))
def test_pow2_dividing_is_the_largest_power_of_two_up_to_most(most, values):
    """The helper row_multiple, RoPE's byte hint and the pool's alignments share."""
    from opspec.kernels.tiling import pow2_dividing
    m = pow2_dividing(values, most)
    assert m & (m - 1) == 0 and 1 <= m <= most
    assert all(v % m == 0 for v in values)
    assert m == most or any(v % (2 * m) for v in values)


# ============================================================================ the kernels

def _padded(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t``'s values as a view whose last axis lies in rows ``pad`` elements longer."""
    if pad == 0:
        return t.clone()
    buf = torch.full((*t.shape[:-1], t.shape[-1] + pad), float("nan"), dtype=t.dtype,
                     device=t.device)
    buf[..., :t.shape[-1]] = t
    return buf[..., :t.shape[-1]]


def _randn(*shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=DEV, dtype=dtype)


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    """The interpreter gives the same bits on both layouts. On a GPU the vector width a
    layout allows decides how each thread's partial sums are grouped, so a reduction's last
    bit may differ; a wrong read would not be that close (the padding holds NaN)."""
    if got.device.type == "cpu":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-3)


def _aligns(launches, name):
    return [kw.get("ALIGN", 1) for kern, _, _, kw in launches if kern.__name__ == name]


# (N, pad, dtype, the hint): rows of 48 padded by 8, 4, 2; rows of 40 (contiguous, 8 | 40);
# float32 rows 2 longer
ROWS = [(48, 8, torch.float16, 8), (48, 4, torch.float16, 4), (48, 2, torch.float16, 2),
        (40, 0, torch.float16, 8), (48, 0, torch.float16, 1), (48, 2, torch.float32, 2)]


def _norm_configs():
    from opspec.kernels.norm import NormConfig
    return {"_norm_fwd_rows_kernel": None,
            "_norm_fwd_looped_kernel": NormConfig(True, 1, 1, 16, 1),
            "_norm_fwd_coop_kernel": NormConfig(False, 1, 1, 16, 1, chunks=3),
            "_norm_fwd_stream_kernel": NormConfig(True, 1, 1, 16, 1, stream=2)}


@needs_triton
@pytest.mark.parametrize("kernel", list(_norm_configs()))
@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("N, pad, dtype, want", ROWS, ids=str)
def test_norm_on_padded_rows_carries_the_hint(N, pad, dtype, want, rms, kernel):
    """Each norm kernel on rows padded by ``pad`` (the output padded too) launches with the
    hint the strides allow and writes the bits it writes on contiguous rows."""
    from opspec.kernels.norm import norm_fwd_triton
    cfg = _norm_configs()[kernel]
    if cfg is not None and cfg.chunks and N % 16:
        pytest.skip("the forced coop config cuts rows of 48")
    x = _randn(7, N, dtype=dtype, seed=1) * 3 + 1
    w, b = _randn(N, dtype=dtype, seed=2), _randn(N, dtype=dtype, seed=3)
    kw = dict(rms=rms, weight=w, bias=None if rms else b, config=cfg)
    want_y = norm_fwd_triton(x, torch.empty_like(x), N, 1e-5, **kw)
    xp, yp = _padded(x, pad), _padded(torch.zeros_like(x), pad)
    with recording() as launches:
        norm_fwd_triton(xp, yp, N, 1e-5, **kw)
    assert _aligns(launches, kernel) == [want], launches
    _same(yp, want_y)
    ref = (F.rms_norm(x.float(), (N,), w.float(), 1e-5) if rms
           else F.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5))
    torch.testing.assert_close(yp.float(), ref, rtol=2e-2, atol=2e-2)


@needs_triton
@pytest.mark.parametrize("pad, want", [(0, 1), (8, 4), (4, 2), (6, 1)])
def test_norm_packed_kernel_hint_is_in_words(pad, want):
    """The packed kernel reads bfloat16 pairs as 32-bit words: its hint divides the row
    length and strides in words (at most 4 words, one 16-byte vector)."""
    from opspec.kernels.norm import NormConfig, norm_fwd_triton
    cfg = NormConfig(False, 1, 1, 64, 1, packed=3)
    x = _randn(5, 64, dtype=torch.bfloat16, seed=4)
    w = _randn(64, dtype=torch.bfloat16, seed=5)
    want_y = norm_fwd_triton(x, torch.empty_like(x), 64, 1e-5, rms=True, weight=w, config=cfg)
    xp, yp = _padded(x, pad), _padded(torch.zeros_like(x), pad)
    with recording() as launches:
        norm_fwd_triton(xp, yp, 64, 1e-5, rms=True, weight=w, config=cfg)
    assert _aligns(launches, "_norm_fwd_packed_kernel") == [want]
    _same(yp, want_y)


def _softmax_plans(R, N):
    from opspec.kernels.softmax import SoftmaxPlan
    return {"_rows_kernel": None,
            "_looped_kernel": SoftmaxPlan("looped", 16, 1, 2, vec=4),
            "_coop_kernel": SoftmaxPlan("coop", 16, 1, R * -(-N // 16), chunks=-(-N // 16))}


@needs_triton
@pytest.mark.parametrize("kernel", ["_rows_kernel", "_looped_kernel", "_coop_kernel"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("N, pad, dtype, want", ROWS, ids=str)
def test_softmax_on_padded_rows_carries_the_hint(N, pad, dtype, want, log, kernel):
    """Softmax's row kernels on rows padded by ``pad`` launch with the hint the input's
    strides and the row length allow (the output is contiguous) and write the bits they
    write on contiguous rows."""
    from opspec.kernels.softmax import softmax_triton
    R = 5
    plan = _softmax_plans(R, N)[kernel]
    x = _randn(R, N, dtype=dtype, seed=6) * 4
    want_y = softmax_triton(x, -1, torch.empty_like(x), log, plan=plan)
    xp = _padded(x, pad)
    y = torch.empty_like(x)
    with recording() as launches:
        softmax_triton(xp, -1, y, log, plan=plan)
    assert _aligns(launches, kernel) == [want]     # (the output's rows are N long)
    _same(y, want_y)
    ref = (torch.log_softmax if log else torch.softmax)(x.float(), -1)
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2)


@needs_triton
@pytest.mark.parametrize("pad, want", [(0, 1), (8, 8), (4, 4), (2, 2)])
def test_decode_attention_over_a_padded_cache_carries_the_hint(pad, want):
    """The split-key decode kernel over keys and values whose rows are ``pad`` elements
    longer than the head (a view of a padded cache) launches with the hint and gives the
    bits it gives on a contiguous cache."""
    from opspec.kernels.attention import attention_dense_triton
    B, H, H_kv, S, D = 2, 4, 2, 40, 16
    q = _randn(B, H, 1, D, dtype=torch.float16, seed=7)
    k = _randn(B, H_kv, S, D, dtype=torch.float16, seed=8)
    v = _randn(B, H_kv, S, D, dtype=torch.float16, seed=9)
    want_o = attention_dense_triton(q, k, v, torch.empty_like(q))
    kp, vp = _padded(k, pad), _padded(v, pad)
    out = torch.empty_like(q)
    with recording() as launches:
        attention_dense_triton(q, kp, vp, out)
    assert _aligns(launches, "_attn_split_kernel") == [want]
    _same(out, want_o)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)


@needs_triton
@pytest.mark.parametrize("N, pad, want", [(40, 0, 8), (48, 0, 1), (48, 4, 4), (48, 8, 8),
                                          (48, 2, 2)])
def test_silu_and_mul_on_padded_rows_carries_the_hint(N, pad, want):
    """The gated kernel reads ``x[:, :N]`` and ``x[:, N:]``: its hint divides ``N`` (where
    the second half starts) and the row strides."""
    from opspec.kernels.silu_and_mul import silu_and_mul_triton
    x = _randn(6, 2 * N, dtype=torch.float16, seed=10)
    want_y = silu_and_mul_triton(x, torch.empty(6, N, dtype=x.dtype, device=DEV))
    xp = _padded(x, pad)
    y = torch.empty(6, N, dtype=x.dtype, device=DEV)
    with recording() as launches:
        silu_and_mul_triton(xp, y)
    assert _aligns(launches, "_gated_kernel") == [want]
    _same(y, want_y)
    ref = F.silu(x[:, :N].float()) * x[:, N:].float()
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2)


@needs_triton
@pytest.mark.parametrize("reduction", ["sum", "mean", "amax"])
@pytest.mark.parametrize("N, pad, dtype, want", ROWS, ids=str)
@pytest.mark.parametrize("splits", [None, 2], ids=["one-block", "split"])
def test_row_reduction_on_padded_rows_carries_the_hint(N, pad, dtype, want, reduction,
                                                        splits):
    """The row reduction over the last axis of padded rows (and of rows of 40), whole or
    split in two (each split's start a multiple of the hint too)."""
    from opspec.kernels.reduction import reduction_triton
    x = _randn(6, N, dtype=dtype, seed=11)
    want_y = reduction_triton(x, torch.empty(6, dtype=dtype, device=DEV), (1,), reduction,
                              num_splits=splits)
    y = torch.empty(6, dtype=dtype, device=DEV)
    with recording() as launches:
        reduction_triton(_padded(x, pad), y, (1,), reduction, num_splits=splits)
    rows = [(args, kw) for kern, _, args, kw in launches
            if kern.__name__ == "_row_reduce_kernel"]
    assert rows
    for args, kw in rows:    # (x, out, n_rows, R, I, s_o, s_i, s_r, r_per_split, ...)
        assert args[3] == N and args[5] == N + pad and args[7] == 1
        per_split = args[8]
        hint = row_multiple(x.element_size(), N, N + pad, per_split)
        assert kw.get("ALIGN", 1) == hint
        assert hint == want or (splits and per_split % want)
    _same(y, want_y)
    ref = getattr(torch, reduction)(x.float(), 1)
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=5e-2)


@needs_triton
@pytest.mark.parametrize("reduction", ["sum", "amax"])
@pytest.mark.parametrize("C, pad, want", [(40, 0, 8), (48, 4, 4), (48, 8, 8), (48, 0, 1)])
@pytest.mark.parametrize("splits", [None, 3], ids=["one-launch", "split"])
def test_column_reduction_on_padded_rows_carries_the_hint(C, pad, want, reduction, splits):
    """The column reduction (over dim 0 of rows padded by ``pad``, or of rows of 40): the
    hint divides the column count and the row strides, partials' included."""
    from opspec.kernels.reduction import reduction_triton
    x = _randn(70, C, dtype=torch.float16, seed=19)
    want_y = reduction_triton(x, torch.empty(C, dtype=x.dtype, device=DEV), (0,), reduction,
                              num_splits=splits)
    y = torch.empty(C, dtype=x.dtype, device=DEV)
    with recording() as launches:
        reduction_triton(_padded(x, pad), y, (0,), reduction, num_splits=splits)
    cols = [(args, kw) for kern, _, args, kw in launches
            if kern.__name__ == "_col_reduce_kernel"]
    assert cols and cols[0][1].get("ALIGN", 1) == want, launches
    for args, kw in cols[1:]:    # a split's second pass, over the float32 partials
        I, s_o, s_r, os_o, os_s = args[2], args[4], args[6], args[9], args[11]
        assert kw.get("ALIGN", 1) == row_multiple(args[0].element_size(), I, s_o, s_r,
                                                  os_o, os_s)
    _same(y, want_y)
    ref = getattr(torch, reduction)(x.float(), 0)
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=5e-2)


@needs_triton
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("N, pad_a, pad_b, want", [(48, 8, 0, 8), (48, 4, 8, 4), (48, 2, 0, 2),
                                                   (40, 0, 0, 1), (48, 8, 8, 8)])
def test_binary_on_padded_rows_carries_the_hint(N, pad_a, pad_b, want, op):
    """The 2-D binary kernel on operands of padded rows: the hint divides both operands'
    row strides and N. Rows of 40 on both sides go to the flat kernel (no hint)."""
    from opspec.kernels.binary import binary_triton
    a = _randn(5, N, dtype=torch.float16, seed=12)
    b = _randn(5, N, dtype=torch.float32, seed=13)
    want_y = binary_triton(op, a, b, torch.empty(5, N, device=DEV))
    y = torch.empty(5, N, device=DEV)
    with recording() as launches:
        binary_triton(op, _padded(a, pad_a), _padded(b, pad_b), y)
    two_d = _aligns(launches, "_binary_kernel")
    assert two_d == ([want] if pad_a or pad_b else [])
    _same(y, want_y)
    ref = a.float() + b if op == "add" else a.float() * b
    torch.testing.assert_close(y, ref)


@needs_triton
@pytest.mark.parametrize("pad, want", [(0, 1), (4, 4), (8, 8), (2, 2)])
def test_bmm_pointer_kernel_on_padded_rows_carries_the_hint(pad, want):
    """The pointer BMM kernel on operands of rows ``pad`` elements longer: the hint divides
    N, K and the operands' strides (the output is contiguous)."""
    from opspec.kernels.bmm import BmmConfig, bmm_triton
    a = _randn(3, 40, 48, dtype=torch.float16, seed=14)
    b = _randn(3, 48, 32, dtype=torch.float16, seed=15)
    cfg = BmmConfig(16, 16, 16, 1, 1, 1)
    want_y = bmm_triton(a, b, torch.empty(3, 40, 32, dtype=a.dtype, device=DEV), cfg)
    y = torch.empty(3, 40, 32, dtype=a.dtype, device=DEV)
    with recording() as launches:
        bmm_triton(_padded(a, pad), _padded(b, pad), y, cfg)
    assert _aligns(launches, "_bmm_kernel") == [want]
    _same(y, want_y)
    torch.testing.assert_close(y.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


@needs_triton
@pytest.mark.parametrize("shape, pad, want", [((64, 1024), 4, 4), ((3, 40, 128), 8, 8),
                                              ((5, 33), 3, 1), ((2, 3, 7, 16), 0, 1),
                                              ((130, 4100), 4, 4)])
def test_copy_rows_is_a_contiguous_copy(shape, pad, want):
    """The vectorised row copy (the activations' strided kernel with no activation) gives
    the view's values in a fresh contiguous tensor, for row strides that take 16-, 8- or
    2-byte vectors, odd row lengths and tails, with the hint the strides allow."""
    from opspec.kernels.activation import COPY
    from opspec.kernels.row_copy import copy_rows
    x = _padded(_randn(*shape, dtype=torch.float16, seed=16), pad)
    with recording() as launches:
        got = copy_rows(x)
    assert [(kern.__name__, kw["ACT"]) for kern, _, _, kw in launches] == [
        ("_activation_2d_kernel", COPY)]
    assert _aligns(launches, "_activation_2d_kernel") == [want]
    assert got.is_contiguous() and got.data_ptr() != x.data_ptr() and torch.equal(got, x)


@needs_triton
@pytest.mark.parametrize("pad, want", [(8, 8), (4, 4), (0, 1)])
def test_activation_on_padded_rows_carries_the_hint(pad, want):
    """An activation of a view of rows ``pad`` elements longer (out padded the same) runs the
    strided kernel with the hint."""
    from opspec.kernels.activation import activation_triton
    x = _randn(6, 48, dtype=torch.float16, seed=18)
    xp, yp = _padded(x, pad), _padded(torch.zeros_like(x), pad)
    with recording() as launches:
        activation_triton(xp, yp, "silu")
    two_d = _aligns(launches, "_activation_2d_kernel")
    assert two_d == ([want] if pad else [])           # contiguous: the flat kernel
    torch.testing.assert_close(yp.float(), F.silu(x.float()), rtol=1e-2, atol=1e-3)


@needs_triton
def test_copy_rows_declines_what_it_cannot_view_as_rows():
    """No unit innermost stride, or leading dimensions that do not collapse: None, and the
    caller copies another way."""
    from opspec.kernels.row_copy import copy_rows
    x = _randn(4, 6, 8, dtype=torch.bfloat16, seed=17)
    assert copy_rows(x.transpose(1, 2)) is None
    assert copy_rows(x[:, ::2]) is not None                  # rows 16 apart: they collapse
    assert copy_rows(x.transpose(0, 1)) is None              # leading axes out of order


# ============================================================================ sm_90 builds

_BUILD_SCRIPT = r"""
import json, sys
from collections import Counter
import triton.language as tl
from sm90_build import build
import opspec.kernels.norm as NK
import opspec.kernels.softmax as SK
import opspec.kernels.reduction as RK

def norm_rows(stride, align):
    ty = "*bf16"
    args = dict(x_ptr=ty, r_ptr=ty, w_ptr=ty, b_ptr=ty, y_ptr=ty, M=16384, N=4096, eps=1e-5,
                stride_xm=stride, stride_xn=1, stride_rm=0, stride_rn=0, stride_ym=stride,
                stride_yn=1, stride_w=1, stride_b=1)
    c = dict(ROWS=1, TILES=1, BLOCK_N=4096, IS_RMS=False, HAS_RESIDUAL=False,
             HAS_WEIGHT=True, HAS_BIAS=True, USE_INT64=False, LATE_AFFINE=False, STATS=0,
             SHIFT_LIMIT=16.0, GROUP=8, ALIGN=align)
    return build(NK._norm_fwd_rows_kernel, args, c, 4)

def softmax_rows(n, stride, align):
    args = dict(x_ptr="*bf16", out_ptr="*bf16", n_rows=32768, N=n, sxr=stride, sxn=1,
                sor=n, son=1)
    c = dict(ROWS=1, TILES=1, BLOCK_N=1024, LOG=False, USE_INT64=False, EVEN=False,
             ALIGN=align)
    return build(SK._rows_kernel, args, c, 4)

def column_sum(align):
    # the first pass of a float32 sum over dim 0 of a [4096, 1000] bfloat16 tensor
    args = dict(x_ptr="*bf16", out_ptr="*fp32", I=1000, R=4096, s_o=0, s_i=1, s_r=1000,
                n_i_blocks=1, r_per_split=64, os_o=1000, os_i=1, os_s=1000, n_div=4096)
    c = dict(REDUCE=0, FINAL=False, CAST_TY=None, ACC_TY=tl.float32, BLOCK_R=8, BLOCK_I=1024,
             ONE_BLOCK=False, USE_INT64=False, EVEN_I=False, ACC_2D=False, PREFETCH=True,
             ALIGN=align)
    return build(RK._col_reduce_kernel, args, c, 4)

out = {}
for name, b in (("norm-4104-hint", norm_rows(4104, 8)), ("norm-4104-none", norm_rows(4104, 1)),
                ("norm-4100-hint", norm_rows(4100, 4)),
                ("softmax-1000-hint", softmax_rows(1000, 1000, 8)),
                ("softmax-1000-none", softmax_rows(1000, 1000, 1)),
                ("colsum-1000-hint", column_sum(8)), ("colsum-1000-none", column_sum(1))):
    out[name] = dict(Counter(op for op in b.loads if "evict_last" not in op))
json.dump(out, sys.stdout)
"""


def test_hint_vectorises_the_row_loads_in_sm90_builds():
    """Compiled for sm_90 (bfloat16): LayerNorm's rows kernel on rows 4104 elements apart
    loads each thread's 32 elements as 4 16-byte vectors with the hint (8) and as 32 16-bit
    loads without it; rows 4100 apart (hint 4) as 8-byte vectors. Softmax's rows kernel on
    contiguous rows of 1000 likewise, and the column sum over dim 0 of a [4096, 1000]
    tensor. (The weight and bias loads, marked evict_last, are left out: they are vectors
    either way.)"""
    from sm90_build import run_script

    built = run_script(_BUILD_SCRIPT)
    assert built["norm-4104-hint"] == {"ld.global.v4.b32": 4}, built
    assert built["norm-4104-none"] == {"ld.global.b16": 32}, built
    assert built["norm-4100-hint"] == {"ld.global.v2.b32": 8}, built
    assert set(built["softmax-1000-hint"]) == {"ld.global.v4.b32"}, built
    assert set(built["softmax-1000-none"]) == {"ld.global.b16"}, built
    assert set(built["colsum-1000-hint"]) == {"ld.global.v4.b32"}, built
    assert set(built["colsum-1000-none"]) == {"ld.global.b16"}, built
