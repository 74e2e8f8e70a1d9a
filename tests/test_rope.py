"""RotaryEmbeddingFwdOp: the Triton kernel against the torch reference, the reference
against HF's definitions, the op's checks, effects, compile boundary and workloads.

Without CUDA the Triton kernel runs through Triton's interpreter on the CPU
(tests/conftest.py sets TRITON_INTERPRET=1 first), so sizes are small; with CUDA the same
tests run the compiled kernel on the GPU (run this file alone there: another test module
may force the interpreter for the whole process).
"""

from __future__ import annotations

import pytest
import torch

from opspec.kernels.devices import TRITON_DEVICES
from opspec.kernels.rope import rope_plan, rotary_embedding_reference, rotary_embedding_triton
from opspec.kernels.rope_impl import (
    RotaryEmbeddingCall, RotaryEmbeddingReferenceKernel, RotaryEmbeddingTritonKernel,
)
from opspec.ops import RotaryEmbeddingFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError
from opspec.schema.evaluate import BYTES_KEY, evaluate

from runtime_user_ops import expect_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=1e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1e-2, atol=2e-2),
}
OP = "RotaryEmbeddingFwdOp"

needs_triton = pytest.mark.skipif(DEVICE not in TRITON_DEVICES,
                                  reason="the Triton kernel needs CUDA or TRITON_INTERPRET=1")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(T, H, H_kv, D, R, P, dtype, cache_dtype=torch.float32, seed=0, layout="flat"):
    """positions, query, key, cos_sin_cache on DEVICE; query/key flat or split into heads."""
    g = _gen(seed)
    pos = torch.randint(0, max(P, 1), (T,), generator=g)
    q = torch.randn(T, H, D, generator=g).to(dtype)
    k = torch.randn(T, H_kv, D, generator=g).to(dtype)
    cache = torch.randn(P, R, generator=g).to(cache_dtype)
    if layout == "flat":
        q, k = q.reshape(T, H * D), k.reshape(T, H_kv * D)
    return tuple(t.to(DEVICE) for t in (pos, q, k, cache))


def _close(got, want, dtype):
    torch.testing.assert_close(got, want, **TOL[dtype])


# ============================================================================ the reference

def _hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _hf_rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("R", [10, 4])  # full and partial rotary (head_size 10)
def test_reference_is_hf_apply_rotary_pos_emb(is_neox, R):
    T, H, H_kv, D, P = 4, 3, 2, 10, 9
    pos, q, k, cache = (t.cpu() for t in _data(T, H, H_kv, D, R, P, torch.float64,
                                                torch.float64, layout="heads"))
    cos, sin = cache[pos].chunk(2, dim=-1)
    if is_neox:  # HF llama: cos/sin repeated as cat(freqs, freqs), rotate_half
        c, s, rot = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1), _hf_rotate_half
    else:  # HF GPT-J: cos/sin repeat_interleave(2), rotate_every_two
        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        rot = _hf_rotate_every_two
    c, s = c.unsqueeze(1), s.unsqueeze(1)

    def hf(x):
        xr, rest = x[..., :R], x[..., R:]
        return torch.cat((xr * c + rot(xr) * s, rest), dim=-1)

    rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
    torch.testing.assert_close(rq, hf(q))
    torch.testing.assert_close(rk, hf(k))
    assert torch.equal(rq[..., R:], q[..., R:])  # the tail is passed through
    # the flat form is the same function
    fq, fk = rotary_embedding_reference(pos, q.flatten(1), k.flatten(1), cache, D, is_neox)
    assert fq.shape == (T, H * D) and torch.equal(fq, rq.flatten(1))


def test_reference_keeps_dtypes_and_leaves_inputs_alone():
    pos, q, k, cache = (t.cpu() for t in _data(3, 2, 1, 8, 8, 5, torch.bfloat16))
    q0, k0 = q.clone(), k.clone()
    rq, rk = rotary_embedding_reference(pos, q, k, cache, 8, True)
    assert rq.dtype == rk.dtype == torch.bfloat16 and rq.shape == q.shape
    assert torch.equal(q, q0) and torch.equal(k, k0)


# ============================================================================ Triton kernel

SHAPES = [  # T, H, H_kv, head_size, rotary_dim, max_position
    (1, 1, 1, 2, 2, 1),
    (3, 5, 1, 10, 6, 7),
    (17, 2, 1, 64, 64, 20),
    (5, 3, 3, 80, 32, 9),
]


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_triton_matches_reference(shape, is_neox, dtype):
    T, H, H_kv, D, R, P = shape
    cache_dtype = torch.float32 if dtype != torch.bfloat16 else torch.bfloat16
    pos, q, k, cache = _data(T, H, H_kv, D, R, P, dtype, cache_dtype)
    rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
    assert rotary_embedding_triton(pos, q, k, cache, D, is_neox) is None
    _close(q, rq, dtype)
    _close(k, rk, dtype)


@needs_triton
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("br", [2, 8, 16], ids=lambda b: f"BR{b}")
def test_triton_rows_straddle_tokens_and_query_key(br, is_neox):
    """Programs of several rows (rope_plan gives small inputs one row a program): the rows
    of a program cross tokens and the query/key boundary (V = 7 heads a token, 5 tokens:
    35 rows), and the last program is partly past the end."""
    from opspec.kernels import rope as RK

    T, H, H_kv, D, R = 5, 5, 2, 8, 6
    for layout in ("flat", "heads"):
        pos, q, k, cache = _data(T, H, H_kv, D, R, 9, torch.float16, torch.float32, seed=br,
                                 layout=layout)
        rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
        _, _, sq = RK._heads_layout(q, D)
        _, _, sk = RK._heads_layout(k, D)
        RK._launch(pos, q, k, cache, is_neox, br, 1, T, (H, sq), (H_kv, sk))
        _close(q, rq, torch.float16)
        _close(k, rk, torch.float16)


@needs_triton
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_triton_heads_layout_and_long_rotary(is_neox):
    # [T, H, D] inputs, a 998-wide rotary part (half 499, padded to 512) of 1000 features.
    pos, q, k, cache = _data(3, 2, 1, 1000, 998, 4, torch.float16, torch.float16,
                             layout="heads")
    rq, rk = rotary_embedding_reference(pos, q, k, cache, 1000, is_neox)
    rotary_embedding_triton(pos, q, k, cache, 1000, is_neox)
    _close(q, rq, torch.float16)
    _close(k, rk, torch.float16)
    assert torch.equal(q[..., 998:], rq[..., 998:])


@needs_triton
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_triton_views_of_a_fused_qkv_tensor(is_neox):
    """q and k are column slices of one [T, (H + 2 H_kv) D] tensor (row stride > width);
    v and the unrotated tails stay bit-identical."""
    T, H, H_kv, D, R = 7, 4, 2, 12, 8
    g = _gen(3)
    qkv = torch.randn(T, (H + 2 * H_kv) * D, generator=g).to(torch.bfloat16).to(DEVICE)
    before = qkv.clone()
    q, k = qkv[:, : H * D], qkv[:, H * D: (H + H_kv) * D]
    assert not q.is_contiguous() and not k.is_contiguous()
    pos = torch.tensor([0, 5, 2, 2, 9, 1, 3]).to(DEVICE)
    cache = torch.randn(10, R, generator=g).to(DEVICE)
    rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
    rotary_embedding_triton(pos, q, k, cache, D, is_neox)
    _close(q, rq, torch.bfloat16)
    _close(k, rk, torch.bfloat16)
    assert torch.equal(qkv[:, (H + H_kv) * D:], before[:, (H + H_kv) * D:])
    tails = qkv[:, : (H + H_kv) * D].view(T, H + H_kv, D)[..., R:]
    assert torch.equal(tails, before[:, : (H + H_kv) * D].view(T, H + H_kv, D)[..., R:])


@needs_triton
@pytest.mark.parametrize("offset, want", [(0, 16), (1, 2), (4, 8), (8, 16)],
                         ids=["offset0", "offset1", "offset4", "offset8"])
def test_triton_row_alignment_hint(monkeypatch, offset, want):
    """The rows are declared aligned (ROW_ALIGN, bytes) to the power of two up to 16 that
    every head row starts on: bf16 views of a fused qkv tensor at element offset 0 or 8 (16
    bytes) on 16, at offset 4 on 8, at offset 1 on 2; all give the reference's result."""
    import opspec.kernels.rope as rope

    seen = []
    real = rope.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append(kwargs["ROW_ALIGN"])
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(rope, "launch", spy)
    T, H, H_kv, D, R = 5, 4, 2, 16, 16
    g = _gen(6)
    buf = torch.randn(T * (H + 2 * H_kv) * D + 8, generator=g).to(torch.bfloat16).to(DEVICE)
    qkv = buf[offset: offset + T * (H + 2 * H_kv) * D].view(T, (H + 2 * H_kv) * D)
    q, k = qkv[:, : H * D], qkv[:, H * D: (H + H_kv) * D]
    pos = torch.tensor([0, 3, 1, 7, 2]).to(DEVICE)
    cache = torch.randn(8, R, generator=g).to(DEVICE)
    for is_neox in (True, False):
        rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
        rotary_embedding_triton(pos, q, k, cache, D, is_neox)
        _close(q, rq, torch.bfloat16)
        _close(k, rk, torch.bfloat16)
    assert seen == [want] * 2
    # a head stride of 24 bytes: the rows of the second head start on 8-byte boundaries
    seen.clear()
    pos, q, k, cache = _data(3, 2, 1, 12, 8, 4, torch.bfloat16)
    rotary_embedding_triton(pos, q, k, cache, 12, True)
    assert seen == [8]


@needs_triton
def test_triton_strided_everything():
    """Transposed heads ([H, T, D] storage), a feature stride of 2, positions every other
    element, a cache that is a column slice of a wider table, and one stored transposed."""
    T, H, H_kv, D, R, P = 6, 3, 2, 8, 6, 11
    g = _gen(4)
    q = torch.randn(H, T, D, generator=g).to(DEVICE).transpose(0, 1)  # strides (D, T * D, 1)
    kw = torch.randn(T, H_kv, 2 * D, generator=g).to(DEVICE)
    k = kw[..., ::2]  # feature stride 2
    pos = torch.randint(0, P, (2 * T,), generator=g).to(DEVICE)[::2]
    wide = torch.randn(P, R + 5, generator=g).to(DEVICE)
    for cache in (wide[:, 2: 2 + R], torch.randn(R, P, generator=g).to(DEVICE).t()):
        for is_neox in (True, False):
            rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
            q_before, kw_before = q.clone(), kw.clone()
            rotary_embedding_triton(pos, q, k, cache, D, is_neox)
            _close(q, rq, torch.float32)
            _close(k, rk, torch.float32)
            assert torch.equal(kw[..., 1::2], kw_before[..., 1::2])  # the gaps stay
            q.copy_(q_before)
            kw.copy_(kw_before)


@needs_triton
@pytest.mark.parametrize("shape", [(0, 4, 2, 8, 8), (3, 0, 2, 8, 8), (3, 4, 0, 8, 8),
                                   (3, 0, 0, 8, 8), (3, 4, 2, 8, 0)], ids=str)
def test_triton_empty(shape):
    T, H, H_kv, D, R = shape
    pos, q, k, cache = _data(T, H, H_kv, D, R, 5, torch.float16)
    rq, rk = rotary_embedding_reference(pos, q, k, cache, D, True)
    rotary_embedding_triton(pos, q, k, cache, D, True)
    assert torch.equal(q, rq) or q.numel() == 0
    _close(k, rk, torch.float16)


@needs_triton
def test_triton_int64_offsets(monkeypatch):
    """The int64 offset path, forced by lowering the int32 limit (real inputs that need it
    hold over 2**31 elements)."""
    import opspec.kernels.rope as rope

    monkeypatch.setattr(rope, "_INT32_LIMIT", 0)
    for is_neox in (True, False):
        pos, q, k, cache = _data(5, 3, 1, 16, 16, 8, torch.bfloat16, torch.bfloat16, seed=5)
        rq, rk = rotary_embedding_reference(pos, q, k, cache, 16, is_neox)
        rotary_embedding_triton(pos, q, k, cache, 16, is_neox)
        _close(q, rq, torch.bfloat16)
        _close(k, rk, torch.bfloat16)


@needs_triton
def test_triton_out_of_range_position_is_identity():
    # Undefined by the spec; the kernel reads nothing outside the cache and turns by 0.
    pos, q, k, cache = _data(2, 2, 1, 8, 8, 4, torch.float32)
    pos = torch.tensor([-1, 4]).to(DEVICE)
    q0, k0 = q.clone(), k.clone()
    rotary_embedding_triton(pos, q, k, cache, 8, False)
    assert torch.equal(q, q0) and torch.equal(k, k0)
    # An empty cache: every position is outside it, nothing is read from it.
    for is_neox in (False, True):
        rotary_embedding_triton(torch.tensor([0, 3]).to(DEVICE), q, k, cache[:0], 8, is_neox)
        assert torch.equal(q, q0) and torch.equal(k, k0)


def test_triton_rejects_bad_arguments():
    pos, q, k, cache = (t.cpu() for t in _data(2, 2, 1, 8, 8, 4, torch.float32))
    with pytest.raises(TypeError, match="share a dtype"):
        rotary_embedding_triton(pos, q, k.half(), cache, 8, True)
    with pytest.raises(TypeError, match="cos_sin_cache"):
        rotary_embedding_triton(pos, q, k, cache.double(), 8, True)
    with pytest.raises(ValueError, match="even"):
        rotary_embedding_triton(pos, q, k, cache[:, :7], 8, True)
    with pytest.raises(ValueError, match="heads \\* 8"):
        rotary_embedding_triton(pos, q[:, :15], k, cache, 8, True)
    with pytest.raises(ValueError, match="T = 2 tokens"):
        rotary_embedding_triton(pos[:1], q, k, cache, 8, True)


def test_launch_plan():
    # Llama-3-8B prefill, bf16: 128-wide rows, 16 features a thread at 4 warps: 16 rows a
    # program, query and key heads alike; float32: 8 a thread, 8 rows.
    assert rope_plan(16384 * 40, 128, 2) == (16, 4)
    assert rope_plan(4096 * 40, 128, 4) == (8, 4)
    # DeepSeek-V3 MLA (rotary 64): 32 rows of 64 features.
    assert rope_plan(16384 * 129, 64, 2) == (32, 4)
    # Decode: rows shrink until the grid has a few programs per SM, the warps with them.
    br, warps = rope_plan(64 * 40, 128, 2)
    assert (br, warps) == (4, 1) and 64 * 40 // br >= 4 * 132
    assert rope_plan(40, 128, 2) == (1, 1)
    # A rotary part of 998 pads to 1024: two rows a program; wider rows, more warps.
    assert rope_plan(10_000 * 48, 998, 2) == (2, 4)
    assert rope_plan(10_000 * 48, 8192, 4) == (1, 16)


# ============================================================================ dispatch

def test_dispatch_and_the_reference_kernel():
    op = RotaryEmbeddingFwdOp(8, True)
    call = RotaryEmbeddingCall("float32", "float32", 8, True, device=torch.device("cpu"))
    want = "rotary_embedding_triton" if "cpu" in TRITON_DEVICES else "rotary_embedding_reference"
    assert op.key_for("rotary_embedding", call) == want
    pos, q, k, cache = (t.cpu() for t in _data(4, 2, 1, 8, 6, 5, torch.float32))
    rq, rk = rotary_embedding_reference(pos, q, k, cache, 8, True)
    assert RotaryEmbeddingReferenceKernel(call).forward(pos, q, k, cache) is None
    torch.testing.assert_close(q, rq)
    torch.testing.assert_close(k, rk)
    assert RotaryEmbeddingTritonKernel.entry_for(call)[0] == (True, torch.device("cpu"))


# ============================================================================ the op

@needs_triton
@pytest.mark.parametrize("layout", ["flat", "heads"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_op_rotates_in_place_and_returns_its_inputs(layout, is_neox):
    T, H, H_kv, D, R, P = 5, 4, 2, 16, 8, 12
    pos, q, k, cache = _data(T, H, H_kv, D, R, P, torch.bfloat16, torch.float32, layout=layout)
    rq, rk = rotary_embedding_reference(pos, q, k, cache, D, is_neox)
    op = RotaryEmbeddingFwdOp(D, is_neox, layout=layout)
    q_out, k_out = op(pos, q, k, cache)
    assert q_out is q and k_out is k  # the outputs alias the written inputs
    _close(q, rq, torch.bfloat16)
    _close(k, rk, torch.bfloat16)
    rec = op.last_call
    assert rec.written == ("query", "key")
    assert rec.traffic == {"positions": (1, 0), "query": (1, 1), "key": (1, 1),
                           "cos_sin_cache": (1, 0)}
    assert (rec.indices["H"], rec.indices["H_kv"], rec.indices["R"], rec.indices["P"]) == \
        (H, H_kv, R, P)
    assert rec.indices["QA"] == (H * D if layout == "flat" else H)
    # flops: 6 per rotated pair; bytes: the rotary part of q and k read and written, the
    # positions, and min(T, P) cache rows.
    flops, nbytes = op.eval_roofline()
    assert flops == 6 * T * (H + H_kv) * (R // 2)
    assert nbytes == T * 8 + 2 * T * (H + H_kv) * R * 2 + T * R * 4


@needs_triton
def test_op_accepts_views_of_one_qkv_tensor():
    T, H, H_kv, D = 3, 2, 1, 8
    qkv = torch.randn(T, (H + 2 * H_kv) * D, generator=_gen(7)).to(DEVICE)
    q, k = qkv[:, : H * D], qkv[:, H * D: (H + H_kv) * D]
    pos, cache = torch.arange(T).to(DEVICE), torch.randn(4, D, generator=_gen(8)).to(DEVICE)
    rq, rk = rotary_embedding_reference(pos, q, k, cache, D, False)
    a, b = RotaryEmbeddingFwdOp(D, False)(pos, q, k, cache)
    assert a is q and b is k
    _close(q, rq, torch.float32)
    _close(k, rk, torch.float32)


def test_op_empty_call_writes_nothing():
    op = RotaryEmbeddingFwdOp(8, True)
    pos, q, k = torch.empty(0, dtype=torch.int64), torch.empty(0, 16), torch.empty(0, 8)
    a, b = op(pos, q, k, torch.randn(4, 8))
    assert a is q and b is k and op.last_call.indices["T"] == 0


def _call_error(op, *args):
    with pytest.raises((SignatureError, SignatureTypeError)) as ei:
        op(*args)
    return ei


def test_op_rejects_calls_that_break_the_spec():
    op = RotaryEmbeddingFwdOp(8, True)
    pos, q, k, cache = (t.cpu() for t in _data(3, 2, 1, 8, 8, 5, torch.float32))
    ei = _call_error(op, pos, q, k, torch.randn(5, 7))
    expect_error(ei, SignatureError, OP, "signature.shape_rules.3", "refinement `R % 2 == 0`",
                 "R=7")
    ei = _call_error(op, pos, q, k, torch.randn(5, 10))
    expect_error(ei, SignatureError, OP, "signature.shape_rules.4",
                 "refinement `R <= head_size`", "R=10")
    ei = _call_error(op, pos, q[:, :12], k, cache)
    expect_error(ei, SignatureError, OP, "signature.shape_rules.1",
                 "refinement `QA % head_size == 0`", "QA=12")
    ei = _call_error(op, pos.int(), q, k, cache)
    expect_error(ei, SignatureError, OP, "signature.inputs.positions.dtype",
                 "input positions, dtype int64", "expected int64, got int32")
    ei = _call_error(op, pos[:2], q, k, cache)
    expect_error(ei, SignatureError, OP, "signature.inputs.positions.shape",
                 "expected T = 3 (from input key), got 2")
    ei = _call_error(op, pos, q.half(), k, cache)
    expect_error(ei, SignatureError, OP, "signature.inputs.query.dtype",
                 "input query, dtype A", "expected A = float32 (from input key), got float16")
    ei = _call_error(op, pos, q.half(), k.half(), cache.bfloat16())
    expect_error(ei, SignatureError, OP, "signature.dtype_combos", "the dtype combination A, C",
                 "got (float16, bfloat16)")
    ei = _call_error(op, pos, q.view(3, 2, 8), k, cache)
    expect_error(ei, SignatureError, OP, "signature.inputs.query.shape", "expected 2, got 3")
    ei = _call_error(op, pos, q.tolist(), k, cache)
    expect_error(ei, SignatureTypeError, OP, "signature.inputs.query",
                 "expected a torch.Tensor, got list")


def test_op_heads_layout_checks_the_head_size():
    op = RotaryEmbeddingFwdOp(8, False, layout="heads")
    pos, q, k, cache = (t.cpu() for t in _data(3, 2, 1, 8, 8, 5, torch.float32, layout="heads"))
    assert op.check_call(pos, q, k, cache)["H"] == 2
    ei = _call_error(op, pos, torch.randn(3, 2, 6), k, cache)
    expect_error(ei, SignatureError, OP, "signature.inputs.query.shape",
                 "axis 2 of Heads[layout, T, QA, head_size]", "expected head_size = 8", "got 6")
    ei = _call_error(op, pos, q.flatten(1), k, cache)
    expect_error(ei, SignatureError, OP, "signature.inputs.query.shape", "expected 3, got 2")


def test_op_construction_checks():
    with pytest.raises(SignatureError) as ei:
        RotaryEmbeddingFwdOp(0, True)
    expect_error(ei, SignatureError, OP, "signature.shape_rules.0", "refinement `head_size >= 1`")
    with pytest.raises(SignatureError) as ei:
        RotaryEmbeddingFwdOp(64, True, layout="bshd")
    expect_error(ei, SignatureError, OP, "signature.params.layout",
                 "parameter `layout` has type `'flat' | 'heads'`; got 'bshd'")
    with pytest.raises(SignatureTypeError) as ei:
        RotaryEmbeddingFwdOp(64, 1)
    expect_error(ei, SignatureTypeError, OP, "signature.params.is_neox",
                 "parameter `is_neox` has type `bool`; got 1")
    with pytest.raises(TypeError):
        RotaryEmbeddingFwdOp(64, True, "heads")  # layout is keyword-only


# ============================================================================ compile boundary

def test_opcheck():
    assert RotaryEmbeddingFwdOp.compile_op_names == (
        "opspec::rope_rotary_embedding_fwd_op_writes_query_writes_key",)
    fn = torch.ops.opspec.rope_rotary_embedding_fwd_op_writes_query_writes_key.default
    # the input `key` is renamed `key_` in the schema: `key` is the operator's own last
    # argument, the string that finds the op instance
    assert str(fn._schema) == (
        "opspec::rope_rotary_embedding_fwd_op_writes_query_writes_key(Tensor positions, "
        "Tensor(a!) query, Tensor(b!) key_, Tensor cos_sin_cache, str key) -> ()")
    # every check on the flat form; the heads form (another op instance, other ranks and
    # dtypes) without the slow AOT-compile check
    for layout, dtype, cdt, tests in (
            ("flat", torch.float32, torch.float32, None),
            ("heads", torch.bfloat16, torch.float32, ("test_schema", "test_faketensor",
                                                      "test_autograd_registration"))):
        op = RotaryEmbeddingFwdOp(8, layout == "flat", layout=layout)
        pos, q, k, cache = (t.cpu() for t in _data(3, 2, 1, 8, 6, 5, dtype, cdt, layout=layout))
        kwargs = {} if tests is None else {"test_utils": tests}
        torch.library.opcheck(fn, (pos, q, k, cache, op._opspec_key), **kwargs)


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = RotaryEmbeddingFwdOp(8, True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    def attend(pos, q, k, cache):
        q2, k2 = op(pos, q, k, cache)
        return q2 @ k2.t()

    fn = torch.compile(attend, backend=backend, fullgraph=True)
    pos, q, k, cache = (t.cpu() for t in _data(4, 2, 2, 8, 8, 6, torch.float32))
    q_e, k_e = q.clone(), k.clone()
    s = fn(pos, q, k, cache)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("rope_rotary_embedding_fwd_op_writes_query_writes_key" in t for t in targets)
    op(pos, q_e, k_e, cache)  # eager
    torch.testing.assert_close(q, q_e)  # the caller's query was written under compile
    torch.testing.assert_close(k, k_e)
    torch.testing.assert_close(s, q_e @ k_e.t())


# ============================================================================ workloads

def _roofline_of(op, inputs):
    """eval_roofline's formulas on a call checked (not run) on meta tensors."""
    spec = type(op)._info().spec
    env = dict(op.check_call(*inputs))
    env.update({p: getattr(op, p) for p in spec.params})
    names = list(spec.inputs)
    sizes = {n: t.numel() * t.element_size() for n, t in zip(names, inputs)}
    env.update({n: True for n in names})
    env[BYTES_KEY] = sizes.__getitem__
    return int(evaluate(spec.roofline.flops, env)), int(evaluate(spec.roofline.bytes, env))


def test_workload_cases_instantiate_on_meta():
    all_cases = cases(RotaryEmbeddingFwdOp)
    ids = [c.id for c in all_cases]
    assert len(ids) == len(set(ids)) == 15
    assert ids[0] == "llama3-8b-prefill-bfloat16-bfloat16"
    large = []
    for c in all_cases:
        op = c.construct(RotaryEmbeddingFwdOp)
        inputs = c.inputs("meta")
        ind = op.check_call(*inputs)
        assert ind["T"] == sum(c.values["seq_lens"])
        flops, nbytes = _roofline_of(op, inputs)
        assert flops == 3 * ind["T"] * ind["R"] * (ind["H"] + ind["H_kv"])
        if nbytes >= 256 * 2**20:
            large.append(c.label)
    assert {"llama3-8b-prefill", "llama3-70b-prefill", "dsv3-mla-prefill"} <= set(large)
    (c,) = [c for c in all_cases if c.id == "dsv3-mla-decode-bfloat16-bfloat16"]
    pos, q, k, cache = c.inputs("meta")
    assert q.shape == (64, 128, 64) and k.shape == (64, 1, 64) and cache.shape == (163840, 64)
    assert c.params == {"head_size": 64, "is_neox": False, "layout": "heads"}


def test_workload_positions_are_packed_sequences():
    (c,) = [c for c in cases(RotaryEmbeddingFwdOp) if c.id == "llama3-8b-decode-bfloat16-bfloat16"]
    pos, q, k, cache = c.inputs("cpu")
    assert pos.tolist() == list(range(64)) and q.shape == (64, 4096) and k.shape == (64, 1024)


# ============================================================================ sm_90 build

_ROWS_BUILD = r"""
import json, sys
import opspec.kernels.rope as K
import sm90_build as sm90


def build(T, H, H_kv, R, dt, cache_dt, neox, int64=False, aligned=16):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[dt]
    br, warps = K.rope_plan(T * (H + H_kv), R, size)
    args = dict(pos_ptr="*i64", q_ptr="*" + dt, k_ptr="*" + dt, cache_ptr="*" + cache_dt,
                n_rows=T * (H + H_kv), V=H + H_kv, H=H, half=R // 2, max_position=8192,
                stride_p=1, stride_qt=H * 128, stride_qh=128, stride_kt=H_kv * 128,
                stride_kh=128, stride_d=1, stride_cp=R, stride_cr=1)
    cexpr = dict(BR=br, HALF=K._pow2(R // 2), IS_NEOX=neox, USE_INT64=int64,
                 ROW_ALIGN=aligned)
    k = sm90.build(K._rope_rows_kernel, args, cexpr, warps)
    return {"local": k.local, "loads": [sm90.strip_hints(o) for o in k.loads],
            "stores": list(k.stores), "regs": k.registers, "br": br, "warps": warps}


out = {
    "llama-neox-bf16": build(16384, 32, 8, 128, "bf16", "bf16", True),
    "llama-neox-fp32-cache": build(16384, 32, 8, 128, "fp16", "fp32", True),
    "llama-fp32": build(4096, 32, 8, 128, "fp32", "fp32", True),
    "mla-gptj-bf16": build(16384, 128, 1, 64, "bf16", "bf16", False),
    "int64": build(16384, 32, 8, 128, "bf16", "bf16", True, int64=True),
    "unaligned-neox-bf16": build(16384, 32, 8, 128, "bf16", "bf16", True, aligned=1),
    "unaligned-gptj-bf16": build(16384, 128, 1, 64, "bf16", "bf16", False, aligned=1),
    "8-byte-neox-bf16": build(16384, 32, 8, 128, "bf16", "bf16", True, aligned=8),
}
json.dump(out, sys.stdout)
"""


def test_rows_kernel_builds_for_sm90():
    """The table's launches of the prefill rows compile for sm_90 with no spills and at most
    96 registers a thread (so 4-warp programs stay many an SM), reading each token's cos/sin
    in 16-byte vectors. With ROW_ALIGN 16 (16-byte row starts, proved on the host) the rows'
    own loads and stores are 16-byte vectors too, with 8 8-byte ones; without (1), the row
    pointer (a select of the query's and the key's) carries no alignment and they are
    2-byte ones."""
    from sm90_build import run_script

    built = run_script(_ROWS_BUILD)
    half = built.pop("8-byte-neox-bf16")
    assert set(half["stores"]) == {"st.global.v2.b32"}, half["stores"]
    assert "ld.global.v2.b32" in half["loads"] and "ld.global.b16" not in half["loads"], half
    for name, k in built.items():
        assert k["local"] == 0 and k["regs"] <= 96, (name, k)
        assert any(op.endswith(".v4.b32") for op in k["loads"]), (name, k["loads"])
        unaligned = name.startswith("unaligned")
        assert set(k["stores"]) == {"st.global.b16" if unaligned else "st.global.v4.b32"}, (
            name, k["stores"])
        assert unaligned == ("ld.global.b16" in k["loads"]), (name, k["loads"])
    assert built["llama-neox-bf16"]["regs"] < built["unaligned-neox-bf16"]["regs"]
    assert (built["llama-neox-bf16"]["br"], built["llama-neox-bf16"]["warps"]) == (16, 4)
    assert (built["llama-fp32"]["br"], built["mla-gptj-bf16"]["br"]) == (8, 32)
