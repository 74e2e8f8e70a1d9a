"""The quant_gemm family: GemmW4A16FwdOp (int4 weight-only GEMM).

Helpers: the nibble order of the packed layout, pack/unpack round trips, min/max
quantization. Kernels: the decode kernel (M <= 16: per-group scaling for group sizes that
are a multiple of its K step, per-weight dequantization otherwise, split-K forced through
`config`) and the tiled prefill kernel against the torch reference, on the CPU through
Triton's interpreter, float16 and bfloat16 activations (under the interpreter bfloat16 dot
operands are widened to float32: its bfloat16 tl.dot is wrong), float16/bfloat16/float32
scales, odd sizes, K tails, strided operands and empty tensors. Op: results, the dispatch
between the kernels (decode refuses M > 16 and is preferred over prefill), errors that name
the declaration they break (dtype_combos, the packed K // 2 axis, the K refinements), the
roofline, the compile boundary (opcheck, one cold fullgraph compile) and every workload
case on the meta device. Where CUDA is available the same tests run on the GPU.
"""

from __future__ import annotations

import pytest
import torch
import triton

import opspec.kernels.quant_gemm as Q
from opspec.kernels.quant_gemm import (
    DecodeConfig, PrefillConfig, decode_config_for, dequantize_int4, gemm_w4a16_reference,
    pack_int4, prefill_config_for, quantize_int4, unpack_int4, w4a16_decode_triton,
    w4a16_prefill_triton,
)
from opspec.kernels.launch import recording
from opspec.kernels.quant_gemm_impl import GemmW4A16Call, W4A16ReferenceKernel
from opspec.ops import GemmW4A16FwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError

from runtime_user_ops import expect_error

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
TOL = {F16: dict(rtol=4e-3, atol=2e-2), BF16: dict(rtol=1.6e-2, atol=1.5e-1)}
FORCED_SPLIT = DecodeConfig(16, 32, 3, 4, 2)       # 3 programs along K, a K tail
SMALL_PREFILL = PrefillConfig(16, 16, 32, 2, 4, 1)  # several tiles in grouped order


@pytest.fixture(autouse=True)
def _on_device():
    with torch.device(DEV):
        yield


def _operands(M, N, K, g, dtype=F16, sdtype=None, seed=0):
    """x, packed weight (every nibble value), scales > 0 and integer zero points."""
    gen = torch.Generator().manual_seed(seed)
    sdtype = sdtype or dtype
    x = torch.randn(M, K, generator=gen, device="cpu")
    q = torch.randint(0, 16, (N, K), generator=gen, dtype=torch.uint8, device="cpu")
    s = torch.rand(N, K // g, generator=gen, device="cpu") * 0.1 + 0.01
    z = torch.randint(0, 16, (N, K // g), generator=gen, device="cpu").float()
    return (x.to(DEV, dtype), pack_int4(q).to(DEV), s.to(DEV, sdtype), z.to(DEV, sdtype))


def _want(x, p, s, z, g):
    return gemm_w4a16_reference(x.double(), p, s.double(), z.double(), g)


def _close(got, want, dtype):
    torch.testing.assert_close(got.double(), want.double(), **TOL[dtype])


# ============================================================================ helpers

def test_nibble_order_and_round_trip():
    q = torch.tensor([[1, 2, 15, 0], [7, 8, 3, 12]], dtype=torch.int32)
    p = pack_int4(q)
    assert p.dtype == torch.uint8 and p.tolist() == [[0x21, 0x0F], [0x87, 0xC3]]
    assert torch.equal(unpack_int4(p), q.to(torch.uint8))
    assert GemmW4A16FwdOp.repack is pack_int4 or GemmW4A16FwdOp.repack(q).equal(p)
    with pytest.raises(ValueError, match="0..15"):
        pack_int4(q + 1)
    with pytest.raises(ValueError, match="K even"):
        pack_int4(q[:, :3])
    with pytest.raises(TypeError, match="integer"):
        pack_int4(q.float())


def test_dequantize_is_the_spec_formula():
    x, p, s, z = _operands(1, 3, 8, 4, F32)
    q = unpack_int4(p).float()
    want = (q - z.repeat_interleave(4, 1)) * s.repeat_interleave(4, 1)
    torch.testing.assert_close(dequantize_int4(p, s, z, 4), want)
    torch.testing.assert_close(GemmW4A16FwdOp.dequantize(p, s, z, 4), want)


def test_quantize_within_half_a_step():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(6, 64, generator=gen, device="cpu").to(DEV)
    p, s, z = GemmW4A16FwdOp.quantize(w, 32)
    assert p.shape == (6, 32) and s.shape == z.shape == (6, 2) and s.dtype == w.dtype
    assert torch.equal(z, z.round()) and int(z.min()) >= 0 and int(z.max()) <= 15
    err = (dequantize_int4(p, s, z, 32) - w).abs()
    assert (err <= s.repeat_interleave(32, 1) / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="multiple of group_size"):
        quantize_int4(w, 48)


# ============================================================================ kernels

DECODE = [(1, 48, 256, 128), (3, 40, 192, 64), (16, 33, 96, 32), (5, 20, 60, 6), (2, 17, 64, 64)]


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("shape", DECODE, ids=str)
def test_decode_kernel(shape, dtype):
    M, N, K, g = shape
    x, p, s, z = _operands(M, N, K, g, dtype)
    out = torch.empty(M, N, dtype=dtype)
    assert w4a16_decode_triton(x, p, s, z, g, out) is out
    _close(out, _want(x, p, s, z, g), dtype)


@pytest.mark.parametrize("sdtype", [F16, F32], ids=str)
def test_decode_split_k_and_strided_operands(sdtype):
    """Three K splits summed by the second kernel; x a transposed view, the packed weight
    a row slice, the scales a transposed view, out transposed."""
    M, N, K, g = 3, 20, 256, 64
    x, p, s, z = _operands(M, N, K, g, F16, sdtype, seed=1)
    xt = x.t().contiguous().t()
    pw = torch.cat([p, p], dim=1)[:, :K // 2]
    st = s.t().contiguous().t()
    out = torch.empty(N, M, dtype=F16).t()
    w4a16_decode_triton(xt, pw, st, z, g, out, config=FORCED_SPLIT)
    _close(out, _want(x, p, s, z, g), F16)
    # a K tail in every split: K = 200 in 32-wide steps over 4 splits, 8-wide groups
    x, p, s, z = _operands(2, 16, 200, 8, F16, sdtype, seed=2)
    out = torch.empty(2, 16, dtype=F16)
    w4a16_decode_triton(x, p, s, z, 8, out, config=DecodeConfig(16, 32, 4, 4, 2))
    _close(out, _want(x, p, s, z, 8), F16)


GEMV = [(1, 48, 256, 128, 128), (2, 40, 512, 64, 64), (3, 17, 384, 128, 32), (4, 33, 256, 256, 128)]


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("shape", GEMV, ids=str)
def test_gemv_kernel(shape, dtype):
    """The FMA decode kernel, M = 1..4, a K split, N tails, scales in float32 for M = 3."""
    M, N, K, g, bk = shape
    x, p, s, z = _operands(M, N, K, g, dtype, F32 if M == 3 else None, seed=M)
    out = torch.empty(M, N, dtype=dtype)
    cfg = DecodeConfig(16, bk, 3, 4, 1 + M % 2, True)   # stages 2: register double-buffering
    assert Q._as_words(p, M, K, g, bk) is not None                 # the FMA kernel runs
    assert w4a16_decode_triton(x, p, s, z, g, out, config=cfg) is out
    _close(out, _want(x, p, s, z, g), dtype)


def test_gemv_strides_and_fallback():
    """Strided x and out, a weight row slice (aligned words: the FMA kernel); a weight
    whose rows are not whole aligned words, a step straddling groups and M = 5 fall back
    to the MMA kernel."""
    M, N, K, g = 2, 20, 256, 64
    x, p, s, z = _operands(M, N, K, g, F16, seed=7)
    cfg = DecodeConfig(16, 64, 2, 4, 2, True)
    xt = x.t().contiguous().t()
    pw = torch.cat([p, p], dim=1)[:, :K // 2]
    out = torch.empty(N, M, dtype=F16).t()
    assert Q._as_words(pw, M, K, g, 64) is not None
    w4a16_decode_triton(xt, pw, s, z, g, out, config=cfg)
    _close(out, _want(x, p, s, z, g), F16)
    odd = torch.cat([p[:, :1], p], dim=1)[:, 1:]             # rows start 1 byte in
    assert Q._as_words(odd, M, K, g, 64) is None
    assert Q._as_words(p, M, K, 32, 64) is None              # 64-wide steps, 32-wide groups
    assert Q._as_words(p, 5, K, g, 64) is None
    for pw, gg in ((odd, g), (p, 32)):
        ss, zz = (s, z) if gg == g else _operands(M, N, K, gg, F16, seed=7)[2:]
        out = torch.empty(M, N, dtype=F16)
        w4a16_decode_triton(x, pw, ss, zz, gg, out, config=cfg)
        _close(out, _want(x, p, ss, zz, gg), F16)


# (M, N, K, group, tc_config_for overrides): N tails, a remainder step per K slice (K = 640
# in 2 slices), every step in the masked tail (3 steps, 4 slices), all 8 MMA columns (M = 8),
# a second token tile (M = 12, 16), 2 steps a group (group 256), biased, the K slices'
# sums as planes (summed by the second kernel) and added in shared memory
TC = [(1, 48, 512, 128, dict(k_slices=2, planes=True)),
      (3, 17, 640, 128, dict(k_slices=2, row_warps=2, planes=True)),
      (8, 33, 384, 128, dict(k_slices=4, planes=False)),
      (8, 33, 384, 128, dict(k_slices=4, planes=True)),
      (12, 20, 768, 256, dict(k_slices=2, biased=True, planes=True)),
      (16, 16, 512, 128, dict(k_slices=1, biased=False))]
DTYPE_PAIRS = [(F16, F16), (BF16, BF16), (F16, F32), (BF16, F32)]


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=str)
@pytest.mark.parametrize("shape", TC, ids=lambda s: str(s[:4]) + str(s[4].get("planes", "")))
def test_tc_kernel(shape, dtypes):
    """The tensor-core decode kernel (its portable model of the asm blocks under the
    interpreter) through the launcher, every dtype pair the spec allows."""
    M, N, K, g, over = shape
    dtype, sdtype = dtypes
    x, p, s, z = _operands(M, N, K, g, dtype, sdtype, seed=M + N)
    cfg = Q.tc_config_for(M, N, K, g, dtype, **over)
    assert cfg.tc and Q._word_view(p, K) is not None
    out = torch.empty(M, N, dtype=dtype)
    assert w4a16_decode_triton(x, p, s, z, g, out, config=cfg) is out
    _close(out, _want(x, p, s, z, g), dtype)


@pytest.mark.parametrize("M,dtype,tokens", [(1, BF16, False), (2, BF16, True),
                                             (6, BF16, True), (7, BF16, False),
                                             (3, F16, False)])
def test_tc_x_token_lanes(M, dtype, tokens):
    """The K-sliced kernel reads x only in the lanes whose MMA column holds a token where
    the table says so (bfloat16, M = 2..6), and the result is the same either way."""
    N, K, g = 40, 512, 128
    x, p, s, z = _operands(M, N, K, g, dtype, seed=M + 5)
    cfg = Q.tc_config_for(M, N, K, g, dtype, tma=False)
    out = torch.empty(M, N, dtype=dtype)
    with recording() as launches:
        w4a16_decode_triton(x, p, s, z, g, out, config=cfg)
    [(_, _, _, kwargs)] = [l for l in launches if l[0] is Q._w4a16_tc_kernel]
    assert kwargs["X_TOKENS"] is tokens
    _close(out, _want(x, p, s, z, g), dtype)


def test_tc_strides_split_and_fallback():
    """Strided x (copied to unit stride), a weight row slice, transposed scales and out, a
    K split summed by the second kernel, fractional zero points; a weight whose rows are
    not aligned words and 64-wide groups fall back to the MMA kernel; empty problems."""
    M, N, K, g = 5, 24, 512, 128
    x, p, s, z = _operands(M, N, K, g, F16, F32, seed=11)
    z = z + 0.375                                            # fractional zero points
    xt = x.t().contiguous().t()
    pw = torch.cat([p, p], dim=1)[:, :K // 2]
    st = s.t().contiguous().t()
    for planes in (False, True):   # 2 or 4 partial sums
        out = torch.empty(N, M, dtype=F16).t()
        cfg = Q.tc_config_for(M, N, K, g, F16, k_slices=2, planes=planes)._replace(split_k=2)
        w4a16_decode_triton(xt, pw, st, z, g, out, config=cfg)
        _close(out, _want(x, p, s, z, g), F16)
    xs = torch.empty(M * K + 1, dtype=BF16)[1:].view(M, K)   # 2-byte aligned: copied
    xs.copy_(x)
    out = torch.empty(M, N, dtype=BF16)
    w4a16_decode_triton(xs, p, s, z, g, out, config=Q.tc_config_for(M, N, K, g, BF16))
    _close(out, _want(xs, p, s, z, g), BF16)
    odd = torch.cat([p[:, :1], p], dim=1)[:, 1:]             # rows start 1 byte in
    assert Q._word_view(odd, K) is None
    out = torch.empty(M, N, dtype=F16)
    w4a16_decode_triton(x, odd, s, z, g, out, config=cfg)
    _close(out, _want(x, p, s, z, g), F16)
    x2, p2, s2, z2 = _operands(2, 20, 256, 64, F16, seed=12)
    out = torch.empty(2, 20, dtype=F16)
    w4a16_decode_triton(x2, p2, s2, z2, 64, out, config=Q.tc_config_for(2, 20, 256, 128))
    _close(out, _want(x2, p2, s2, z2, 64), F16)
    for M0, N0, K0 in ((0, 8, 256), (4, 0, 256), (4, 8, 0)):
        out = torch.full((M0, N0), 3.0, dtype=F16)
        w4a16_decode_triton(torch.ones(M0, K0, dtype=F16), torch.zeros(N0, K0 // 2, dtype=torch.uint8),
                            torch.ones(N0, K0 // 128, dtype=F16), torch.ones(N0, K0 // 128, dtype=F16),
                            128, out, config=cfg)
        assert torch.equal(out, torch.zeros(M0, N0, dtype=F16))


# (M, N, K, group): the TMA kernel: N tails (a box's rows past N read zeros, 100 = 64 + 36),
# 2 steps a group, all 8 MMA columns and the table's 64-row programs
TMA = [(1, 100, 512, 128), (3, 64, 768, 256), (8, 33, 256, 128)]


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=str)
@pytest.mark.parametrize("shape", TMA, ids=str)
def test_tc_tma_kernel(shape, dtypes):
    """The TMA decode kernel (its portable model under the interpreter, the words read
    through the tensor descriptor) through the launcher, every dtype pair the spec allows."""
    M, N, K, g = shape
    dtype, sdtype = dtypes
    x, p, s, z = _operands(M, N, K, g, dtype, sdtype, seed=M + N + 1)
    cfg = Q.tc_config_for(M, N, K, g, dtype, tma=True)
    assert cfg.tma and cfg.tc and (cfg.k_slices, cfg.split_k) == (1, 1)
    assert cfg.block_n == (32 if M == 1 else 64)
    out = torch.empty(M, N, dtype=dtype)
    with recording() as launches:
        assert w4a16_decode_triton(x, p, s, z, g, out, config=cfg) is out
    assert [k for k, *_ in launches] == [Q._w4a16_tc_tma_kernel]
    _close(out, _want(x, p, s, z, g), dtype)


@pytest.mark.parametrize("shape", [(12, 100, 512, 128, 2), (16, 130, 384, 128, 4),
                                   (3, 70, 256, 256, 2), (9, 64, 256, 128, 4)], ids=str)
def test_tc_tma_row_blocks(shape):
    """The TMA kernel with 2 or 4 row blocks a program sharing each step's x (the table's
    choice at M = 9..16 on large weights): N tails inside and past the last block, one and
    two token tiles, two steps a group."""
    M, N, K, g, blocks = shape
    x, p, s, z = _operands(M, N, K, g, BF16, seed=M + N + 7)
    cfg = Q.tc_config_for(M, N, K, g, BF16, tma=True)
    cfg = cfg._replace(block_n=16 * cfg.num_warps * blocks)
    out = torch.empty(M, N, dtype=BF16)
    with recording() as launches:
        w4a16_decode_triton(x, p, s, z, g, out, config=cfg)
    [(_, grid, _, kwargs)] = launches
    assert kwargs["RB"] == blocks and grid == (triton.cdiv(N, cfg.block_n), 1)
    _close(out, _want(x, p, s, z, g), BF16)


@pytest.mark.parametrize("shape", [(16, 130, 1280, 128, 4, 3), (9, 64, 768, 256, 2, 2),
                                   (1, 100, 512, 128, 1, 4), (12, 96, 1024, 128, 4, 8)],
                         ids=str)
def test_tc_tma_k_split(shape):
    """The TMA kernel with K split over programs (the table's choice at M = 9..16 where N
    gives few programs): each split stores a float32 plane that the second kernel adds up;
    a last split shorter than the others (10 steps in 3 splits), two steps a group, N tails,
    one and two token tiles, 1, 2 or 4 row blocks."""
    M, N, K, g, blocks, split = shape
    x, p, s, z = _operands(M, N, K, g, BF16, F32, seed=M + N + 3)
    cfg = Q.tc_config_for(M, N, K, g, BF16, tma=True)
    cfg = cfg._replace(block_n=16 * cfg.num_warps * blocks, split_k=split)
    out = torch.empty(M, N, dtype=BF16)
    with recording() as launches:
        w4a16_decode_triton(x, p, s, z, g, out, config=cfg)
    (kernel, grid, args, _), (summer, _, sum_args, _) = launches
    assert kernel is Q._w4a16_tc_tma_kernel and summer is Q._split_sum_kernel
    steps = K // 128
    assert grid == (triton.cdiv(N, cfg.block_n), triton.cdiv(steps, triton.cdiv(steps, split)))
    assert args[5].dtype == torch.float32 and args[5].shape == (grid[1], M, N)
    assert sum_args[1] is out
    _close(out, _want(x, p, s, z, g), BF16)


def test_tc_tma_strides_and_fallback():
    """Transposed scales and out; x rows that are not 16-byte aligned (copied first); a
    weight whose row stride is not a multiple of 16 bytes (TMA's rule) takes the K-sliced
    kernel."""
    M, N, K, g = 3, 40, 512, 128
    x, p, s, z = _operands(M, N, K, g, F16, F32, seed=21)
    cfg = Q.tc_config_for(M, N, K, g, F16, tma=True)
    st = s.t().contiguous().t()
    xs = torch.empty(M, K + 2, dtype=F16)[:, :K]            # rows 4-byte, not 16-byte, apart
    xs.copy_(x)
    out = torch.empty(N, M, dtype=F16).t()
    with recording() as launches:
        w4a16_decode_triton(xs, p, st, z, g, out, config=cfg)
    assert [k for k, *_ in launches] == [Q._w4a16_tc_tma_kernel]
    _close(out, _want(x, p, s, z, g), F16)
    wide = torch.zeros(N, K // 2 + 4, dtype=torch.uint8)
    wide[:, :K // 2] = p
    pw = wide[:, :K // 2]                                     # rows 260 bytes apart
    assert Q._word_view(pw, K) is not None
    out = torch.empty(M, N, dtype=F16)
    with recording() as launches:
        w4a16_decode_triton(x, pw, s, z, g, out, config=cfg)
    assert Q._w4a16_tc_kernel in [k for k, *_ in launches]
    assert Q._w4a16_tc_tma_kernel not in [k for k, *_ in launches]
    _close(out, _want(x, p, s, z, g), F16)


def test_tc_tma_two_tiles_fall_back_to_the_mma_kernel():
    """At M = 9..16 a weight the TMA kernel cannot read (rows 260 bytes apart) takes the MMA
    kernel, not the K-sliced one (which holds one token tile), split config or not."""
    M, N, K, g = 12, 40, 512, 128
    x, p, s, z = _operands(M, N, K, g, BF16, seed=23)
    wide = torch.zeros(N, K // 2 + 4, dtype=torch.uint8)
    wide[:, :K // 2] = p
    pw = wide[:, :K // 2]
    for split in (1, 2):
        cfg = Q.tc_config_for(M, N, K, g, BF16, tma=True)._replace(split_k=split)
        out = torch.empty(M, N, dtype=BF16)
        with recording() as launches:
            w4a16_decode_triton(x, pw, s, z, g, out, config=cfg)
        kernels = [k for k, *_ in launches]
        assert Q._w4a16_decode_kernel in kernels, kernels
        assert Q._w4a16_tc_tma_kernel not in kernels and Q._w4a16_tc_kernel not in kernels
        _close(out, _want(x, p, s, z, g), BF16)


def test_tc_planes_by_the_table(monkeypatch):
    """The table's planes (here for any weight size) through the launcher's own choice of
    configuration, the path that keeps a replay of both launches where one can be kept."""
    monkeypatch.setattr(Q, "_TC_PLANES_MIN_BYTES", 0)
    Q.decode_config_for.cache_clear()
    try:
        M, N, K, g = 3, 40, 2048, 128
        assert Q.decode_config_for(M, N, K, g, F16).planes
        x, p, s, z = _operands(M, N, K, g, F16, seed=13)
        for _ in range(2):
            out = torch.empty(M, N, dtype=F16)
            w4a16_decode_triton(x, p, s, z, g, out)
            _close(out, _want(x, p, s, z, g), F16)
    finally:
        Q.decode_config_for.cache_clear()


PREFILL = [(1, 48, 256, 128), (17, 40, 192, 64), (40, 33, 96, 32), (20, 20, 60, 6)]


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("shape", PREFILL, ids=str)
def test_prefill_kernel(shape, dtype):
    M, N, K, g = shape
    x, p, s, z = _operands(M, N, K, g, dtype, F32 if M == 17 else None)
    out = torch.empty(M, N, dtype=dtype)
    assert w4a16_prefill_triton(x, p, s, z, g, out) is out
    _close(out, _want(x, p, s, z, g), dtype)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("f32_dequant,swap_ab", [(False, False), (True, True), (False, True)])
def test_prefill_variants(f32_dequant, swap_ab, dtype):
    """16-bit dequantization and the swapped product (y.T's tiles), with several tiles,
    a K tail (K = 96 in 64-wide steps), gathered groups and a transposed out."""
    for M, N, K, g, seed in ((40, 35, 128, 32, 8), (20, 24, 96, 6, 9)):
        x, p, s, z = _operands(M, N, K, g, dtype, seed=seed)
        # 8 warps unswapped: the launcher's register cap (maxnreg) is passed
        cfg = PrefillConfig(16, 16, 64 if K == 96 else 32, 2, 4 if swap_ab else 8, 1,
                            f32_dequant, swap_ab)
        out = torch.empty(N, M, dtype=dtype).t()
        w4a16_prefill_triton(x, p, s, z, g, out, config=cfg)
        _close(out, _want(x, p, s, z, g), dtype)


def test_prefill_many_tiles_and_strides():
    x, p, s, z = _operands(40, 35, 128, 32, F16, seed=4)
    xs = torch.cat([x, x], dim=1)[:, ::2]                   # column stride 2
    xs.copy_(x)
    out = torch.empty(35, 40, dtype=F16).t()
    w4a16_prefill_triton(xs, p, s, z, 32, out, config=SMALL_PREFILL)
    _close(out, _want(x, p, s, z, 32), F16)


def test_int64_offsets(monkeypatch):
    """Operands past 2**31 elements take 64-bit offsets (forced here with a limit of 0)."""
    import opspec.kernels.quant_gemm as quant_mod

    monkeypatch.setattr(quant_mod, "_INT32_LIMIT", 0)
    x, p, s, z = _operands(3, 20, 128, 32, seed=6)
    for fn, cfg in ((w4a16_decode_triton, FORCED_SPLIT), (w4a16_prefill_triton, SMALL_PREFILL),
                    (w4a16_decode_triton, DecodeConfig(16, 32, 2, 4, 1, True))):
        out = torch.empty(3, 20, dtype=F16)
        fn(x, p, s, z, 32, out, config=cfg)
        _close(out, _want(x, p, s, z, 32), F16)
    x, p, s, z = _operands(3, 20, 384, 128, seed=7)           # the tensor-core kernel
    for planes in (False, True):
        out = torch.empty(3, 20, dtype=F16)
        cfg = Q.tc_config_for(3, 20, 384, 128, k_slices=2, planes=planes)
        w4a16_decode_triton(x, p, s, z, 128, out, config=cfg)
        _close(out, _want(x, p, s, z, 128), F16)


@pytest.mark.parametrize("shape", [(0, 8, 64), (4, 0, 64), (4, 8, 0)], ids=str)
def test_empty(shape):
    M, N, K = shape
    x = torch.ones(M, K, dtype=F16)
    p = torch.zeros(N, K // 2, dtype=torch.uint8)
    s = z = torch.ones(N, K // 32, dtype=F16)
    for fn in (w4a16_decode_triton, w4a16_prefill_triton):
        out = torch.full((M, N), 3.0, dtype=F16)
        assert fn(x, p, s, z, 32, out) is out
        assert torch.equal(out, torch.zeros(M, N, dtype=F16))  # K = 0 zero-fills


def test_launchers_reject_bad_arguments():
    x, p, s, z = _operands(2, 8, 64, 32)
    out = torch.empty(2, 8, dtype=F16)
    with pytest.raises(ValueError, match=r"packed_weight must have shape \[8, 32\]"):
        w4a16_prefill_triton(x, p[:, :31], s, z, 32, out)
    with pytest.raises(ValueError, match="multiple of group_size"):
        w4a16_prefill_triton(x, p, s, z, 48, out)
    with pytest.raises(TypeError, match="uint8"):
        w4a16_prefill_triton(x, p.to(torch.int8), s, z, 32, out)
    with pytest.raises(TypeError, match="share a dtype"):
        w4a16_prefill_triton(x, p, s, z.float(), 32, out)
    with pytest.raises(ValueError, match="M <= 16"):
        x17 = torch.zeros(17, 64, dtype=F16)
        w4a16_decode_triton(x17, p, s, z, 32, torch.empty(17, 8, dtype=F16))


def test_config_choice():
    # The tensor-core kernel for every M <= 8 with 128-wide groups: (block_n, block_k,
    # split_k, warps, stages, gemv, tc, k_slices, biased, planes, tma): 16 rows a program, all its
    # warps along K (4 where N / 16 x 4 warps fill 132 SMs x 16, else 8, fewer where a slice
    # would get fewer than 8 steps), no prefetch; bfloat16 biased, float16 exact; each K
    # slice stores its own sums (planes) where there are several and the weight is 64 MiB
    # or more
    bf16, f16 = torch.bfloat16, torch.float16
    assert decode_config_for(1, 28672, 8192, 128, f16) == (16, 128, 1, 4, 1, False, True, 4,
                                                           False, True, False)
    assert decode_config_for(1, 28672, 8192, 128, bf16) == (16, 128, 1, 4, 1, False, True, 4,
                                                            True, True, False)
    # From 160 MiB of weight, the TMA kernel: 64 rows a program (4 warps along the rows, one
    # K slice), 3 boxes in flight; at M = 1, 32 rows (2 warps) and 4 boxes
    assert decode_config_for(2, 57344, 8192, 128, bf16) == (64, 128, 1, 4, 3, False, True, 1,
                                                            True, False, True)
    assert decode_config_for(1, 57344, 8192, 128, bf16) == (32, 128, 1, 2, 4, False, True, 1,
                                                            True, False, True)
    assert decode_config_for(1, 53248, 16384, 128, f16).tma
    assert decode_config_for(1, 40960, 8192, 128, f16).tma         # 160 MiB
    assert not decode_config_for(1, 40896, 8192, 128, f16).tma     # 160 MiB less 64 rows
    # M = 9..16: the TMA kernel with 4 row blocks of 2 warps a program where N gives 64
    # programs or more, K split until the grid holds at most 4 x 132 programs (each split
    # keeping 8 steps); else the MMA kernel
    assert decode_config_for(16, 57344, 8192, 128, f16) == (128, 128, 1, 2, 4, False, True, 1,
                                                            False, False, True)
    assert decode_config_for(9, 53248, 16384, 128, bf16).tma
    assert decode_config_for(16, 28672, 8192, 128, f16) == (128, 128, 2, 2, 4, False, True, 1,
                                                            False, False, True)   # 224 x 2
    assert decode_config_for(16, 8192, 28672, 128, f16).split_k == 8              # 64 x 8
    assert decode_config_for(12, 14336, 4096, 128, bf16).split_k == 4             # 8 steps each
    assert decode_config_for(16, 8192, 65536, 128, f16).split_k == 8              # 64 programs
    assert decode_config_for(16, 8192, 1024, 128, f16).split_k == 1               # 8 steps
    assert not decode_config_for(16, 8064, 8192, 128, f16).tc      # 63 programs
    assert not decode_config_for(16, 57344, 8192, 64, f16).tc      # 64-wide groups
    assert Q.tc_config_for(1, 57344, 8192, 128, f16, k_slices=4).k_slices == 4   # not tma
    assert decode_config_for(1, 4096, 4096, 128, f16) == (16, 128, 1, 4, 1, False, True, 4,
                                                          False, False, False)   # 8 x 4 steps
    assert decode_config_for(1, 16384, 8192, 128, f16).planes       # 64 MiB
    assert not decode_config_for(1, 16384, 8064, 128, f16).planes   # 63 MiB
    assert not decode_config_for(1, 4096, 128, 128).planes          # one slice: nothing to add
    assert decode_config_for(8, 8192, 28672, 128, f16).k_slices == 8
    assert not decode_config_for(16, 4096, 28672, 128, f16).tc   # 32 programs: the MMA kernel
    assert decode_config_for(4, 18944, 3584, 128, bf16).k_slices == 2   # 28 steps: 14 a slice
    assert decode_config_for(4, 4096, 14336, 128, bf16).k_slices == 8   # 112 steps: 14 a slice
    assert decode_config_for(1, 4096, 2048, 128).k_slices == 2     # 16 steps: 8 a slice
    assert decode_config_for(1, 4096, 512, 128).k_slices == 1     # 4 steps: one slice
    assert decode_config_for(1, 4096, 128, 128).k_slices == 1
    assert decode_config_for(1, 4096, 512, 256).tc                # whole 128-wide steps
    assert not decode_config_for(1, 4096, 4096, 64).tc            # a step would straddle groups
    # The MMA and FMA kernels (the fallback): 64 (MMA) or 128 (FMA) weight rows and one
    # 128-wide group a step; K split until about 4 x 132 programs (MMA) or 10 x 132 (FMA)
    # stream the weight. M = 1: the FMA kernel (gemv), 128-wide steps
    legacy = Q.legacy_decode_config
    assert legacy(1, 57344, 8192, 128)[:6] == (128, 128, 3, 4, 2, True)
    assert legacy(16, 28672, 8192, 128)[:6] == (64, 128, 2, 4, 4, False)
    assert legacy(1, 4096, 4096, 128)[:6] == (128, 128, 8, 4, 2, True)
    assert legacy(4, 4096, 14336, 128)[:6] == (64, 128, 8, 4, 4, False)
    assert not decode_config_for(1, 4096, 4096, 64).gemv     # a step would straddle groups
    # few steps: at least 4 a split
    assert legacy(1, 4096, 512, 128).split_k == 1
    # group sizes that are no multiple of 32: per-weight dequantization, 64-wide steps
    assert decode_config_for(1, 4096, 4104, 24).block_k == 64
    # (block_m, block_n, block_k, group_m, warps, stages, f32_dequant, swap_ab, two_pass):
    # from 512 tokens two passes (tests/test_quant_two_pass.py); the fused kernel's tiles:
    # the swapped 256-token tile with 16-bit dequantization where M fills it; below that the
    # unswapped 128x128 tile, float32 dequantization (swapped 128x128 tiles measured wrong)
    assert prefill_config_for(4096, 28672, 8192, 128).two_pass
    assert prefill_config_for(4096, 28672, 8192, 128, two_pass=False) == (
        256, 128, 64, 8, 8, 3, False, True, False)
    assert prefill_config_for(300, 28672, 8192, 128) == (256, 128, 64, 8, 8, 3, False, True, False)
    assert prefill_config_for(100, 256, 256, 128) == (128, 128, 64, 8, 8, 3, True, False, False)
    assert prefill_config_for(300, 14336, 4096, 32).block_k == 32


# ============================================================================ op

@pytest.mark.parametrize("M", [1, 16, 20])
def test_op_matches_reference(M):
    op = GemmW4A16FwdOp(32)
    for dtype, sdtype in ((F16, F16), (BF16, F32)):
        x, p, s, z = _operands(M, 24, 64, 32, dtype, sdtype)
        y = op(x, p, s, z)
        assert y.shape == (M, 24) and y.dtype == dtype and y.is_contiguous()
        _close(y, _want(x, p, s, z, 32), dtype)
    assert op.last_call.indices == {"M": M, "N": 24, "K": 64, "T": "bfloat16",
                                    "S": "float32", "group_size": 32}


def test_quantized_linear_end_to_end():
    """quantize a float weight, then the op is x @ dequant(W).T within quantization error."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(40, 128, generator=gen, device="cpu").to(DEV, F16)
    x = torch.randn(3, 128, generator=gen, device="cpu").to(DEV, F16)
    op = GemmW4A16FwdOp()
    p, s, z = op.quantize(w, 128)
    got = op(x, p, s, z)
    _close(got, x.double() @ dequantize_int4(p, s, z, 128).double().t(), F16)
    rel = (got.double() - x.double() @ w.double().t()).norm() / (x.double() @ w.double().t()).norm()
    assert rel < 0.2


def test_dispatch():
    op = GemmW4A16FwdOp()
    dev = torch.device("cuda")
    call = lambda M: GemmW4A16Call(M, 4096, 4096, 128, "bfloat16", "bfloat16", device=dev)
    assert op.key_for("gemm_w4a16", call(1), arch=90) == "w4a16_decode_triton"
    assert op.key_for("gemm_w4a16", call(16), arch=90) == "w4a16_decode_triton"
    assert op.key_for("gemm_w4a16", call(17), arch=90) == "w4a16_prefill_triton"
    from opspec.kernels.quant_gemm_impl import W4A16DecodeTritonKernel
    assert "at most 16" in W4A16DecodeTritonKernel.refusal(call(17))
    mps = GemmW4A16Call(1, 8, 64, 32, "float16", "float16", device=torch.device("mps"))
    assert op.key_for("gemm_w4a16", mps) == "w4a16_reference"
    x, p, s, z = _operands(2, 8, 64, 32)
    out = torch.empty(2, 8, dtype=F16)
    W4A16ReferenceKernel(GemmW4A16Call(2, 8, 64, 32, "float16", "float16")).forward(x, p, s, z, out)
    _close(out, _want(x, p, s, z, 32), F16)


def test_call_errors():
    op = GemmW4A16FwdOp(32)
    x, p, s, z = _operands(2, 5, 64, 32)
    bad = [
        ((x, p, s.bfloat16(), z.bfloat16()), "signature.dtype_combos",
         ["the dtype combination T, S", "got (float16, bfloat16)"]),
        ((x, p, s.float(), z), "signature.inputs.zeros.dtype",
         ["expected S = float32 (from input scales), got float16"]),
        ((x, p[:, :31], s, z), "signature.inputs.packed_weight.shape",
         ["input packed_weight, axis 1 of [N, K // 2]", "expected K // 2 = 32, got 31"]),
        ((x, p.to(torch.int8), s, z), "signature.inputs.packed_weight.dtype",
         ["expected uint8, got int8"]),
        ((x, p, s[:, :1], z), "signature.inputs.scales.shape",
         ["axis 1 of [N, K // group_size]", "expected K // group_size = 2, got 1"]),
        ((x.float(), p, s, z), "signature.inputs.x.dtype",
         ["expected bfloat16 | float16, got float32"]),
        # K = 63: the packed axis (31) and the groups (1) fit, K is odd
        ((torch.zeros(2, 63, dtype=F16), p[:, :31], s[:, :1], z[:, :1]), "signature.shape_rules.1",
         ["refinement `K % 2 == 0`"]),
        ((torch.zeros(2, 66, dtype=F16), torch.zeros(5, 33, dtype=torch.uint8), s, z),
         "signature.shape_rules.2", ["refinement `K % group_size == 0`"]),
    ]
    for args, path, fragments in bad:
        with pytest.raises(SignatureError) as ei:
            op(*args)
        expect_error(ei, SignatureError, "GemmW4A16FwdOp", path, *fragments)
    with pytest.raises(SignatureError) as ei:
        GemmW4A16FwdOp(0)
    expect_error(ei, SignatureError, "GemmW4A16FwdOp", "signature.shape_rules.0",
                 "refinement `group_size >= 1`")


def test_roofline_counts_the_packed_carrier():
    op = GemmW4A16FwdOp(32)
    x, p, s, z = _operands(3, 8, 64, 32, BF16, F32)
    op(x, p, s, z)
    # x (bf16) + packed (uint8, K / 2 a row) + scales and zeros (f32) + y (bf16)
    assert op.eval_roofline() == (2 * 3 * 8 * 64,
                                  3 * 64 * 2 + 8 * 32 + 2 * 8 * 2 * 4 + 3 * 8 * 2)
    assert op(x[:0], p, s, z).shape == (0, 8)


# ============================================================================ compile boundary

def test_opcheck():
    op = GemmW4A16FwdOp(32)
    assert GemmW4A16FwdOp.compile_op_names == ("opspec::quant_gemm_gemm_w4_a16_fwd_op",)
    for M in (2, 20):   # decode and prefill kernels
        x, p, s, z = _operands(M, 16, 64, 32)
        torch.library.opcheck(torch.ops.opspec.quant_gemm_gemm_w4_a16_fwd_op.default,
                              (x, p, s, z, op._opspec_key))


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = GemmW4A16FwdOp(32)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda x, p, s, z: op(x * 2, p, s, z).relu(), backend=backend,
                       fullgraph=True)
    x, p, s, z = _operands(3, 16, 64, 32)
    y = fn(x, p, s, z)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("quant_gemm_gemm_w4_a16_fwd_op" in t for t in targets), targets
    _close(y, _want(x * 2, p, s, z, 32).relu(), F16)


# ============================================================================ workloads

def test_workload_cases_instantiate():
    """Every case builds on the meta device and passes the op's checks; decode and prefill
    rows exist; the bandwidth row moves at least 256 MiB."""
    all_cases = cases(GemmW4A16FwdOp)
    assert len({c.id for c in all_cases}) == len(all_cases)
    assert any("decode" in c.label for c in all_cases)
    assert any("prefill" in c.label for c in all_cases)
    largest_decode = 0
    for case in all_cases:
        op = case.construct(GemmW4A16FwdOp)
        inputs = case.inputs("meta")
        ind = op.check_call(*inputs)
        for name in ("M", "N", "K"):
            assert ind[name] == case.values[name], (case.id, name)
        assert op.group_size == 128
        if "decode" in case.label:
            assert ind["M"] <= 16
            moved = sum(t.numel() * t.element_size() for t in inputs)
            largest_decode = max(largest_decode, moved)
        else:
            assert ind["M"] >= 512
    assert largest_decode >= 256 * 2**20
    combos = {(str(c.dtypes["T"]), str(c.dtypes["S"])) for c in all_cases}
    assert ("bfloat16", "float32") in combos and ("float16", "float32") in combos


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, re, sys
import torch
import opspec.kernels.quant_gemm as Q
import sm90_build as sm90

def build(fn, ptrs, ints, consts, num_warps, num_stages, **extra):
    k = sm90.build(fn, dict(ints, **ptrs), consts, num_warps, num_stages, **extra)
    ptx = k.ptx
    in_loop = k.loop_lines()
    return {"ld": sorted(set(k.loads)),
            "loop_bar": sum("BAR" in l or "LDS" in l or "STS" in l for l in in_loop),
            "loop_hmma": sum("HMMA" in l for l in in_loop),
            "bar": ptx.count("bar.sync") + ptx.count("barrier.sync"),
            "regs": k.registers,
            "cp_async": ptx.count("cp.async"), "local": ptx.count(".local"),
            "mma": "wgmma" in ptx or "mma.sync" in ptx,
            "i2f": len(re.findall(r"cvt\.rn\.(?:b?f16|f32)\.[su]\d+", ptx))}

M, N, K, g = 16, 28672, 8192, 128
out = {}
for dt, sdt in (("bf16", "bf16"), ("fp16", "fp32")):
    ptrs = dict(x_ptr="*" + dt, w_ptr="*u8", s_ptr="*" + sdt, z_ptr="*" + sdt, out_ptr="*fp32")
    for m, block_k, group in ((1, 128, 128), (16, 128, 128), (4, 64, 24)):
        cfg = Q.legacy_decode_config(max(m, 2), N, K, group)   # the MMA kernel's table entry
        ints = dict(M=m, N=N, KH=K // 2, KH_PER_SPLIT=1408, stride_xm=K, stride_xk=1,
                    stride_wn=K // 2, stride_wk=1, stride_sn=K // group, stride_sg=1,
                    stride_zn=K // group, stride_zg=1, stride_os=m * N, stride_om=N, stride_on=1)
        out[f"decode-{dt}-{sdt}-m{m}-g{group}"] = build(
            Q._w4a16_decode_kernel, ptrs, ints,
            dict(BLOCK_M=16, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP=group,
                 ONE_GROUP=group % cfg.block_k == 0, USE_INT64=False, UPCAST=False),
            cfg.num_warps, cfg.num_stages)
    ints = dict(M=4096, N=N, K=K, stride_xm=K, stride_xk=1, stride_wn=K // 2, stride_wk=1,
                stride_sn=K // g, stride_sg=1, stride_zn=K // g, stride_zg=1, stride_om=N,
                stride_on=1)
    table = Q.prefill_config_for(4096, N, K, g, two_pass=False)   # the fused kernel
    for name, cfg in (("-swap", table), ("-unswapped", Q._PREFILL_UNSWAPPED)):
        out[f"prefill-{dt}-{sdt}{name}"] = build(
            Q._w4a16_prefill_kernel, dict(ptrs, out_ptr="*" + dt), ints,
            dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                 GROUP_M=cfg.group_m, GROUP=g, ONE_GROUP=True, EVEN_K=True, USE_INT64=False,
                 UPCAST=False, F32_DEQUANT=cfg.f32_dequant, SWAP_AB=cfg.swap_ab),
            cfg.num_warps, cfg.num_stages,
            **({} if cfg.swap_ab else {"maxnreg": Q._PREFILL_MAXNREG}))  # as the launcher
    for m in (1, 4):
        cfg = Q.legacy_decode_config(1, N, K, g)._replace(split_k=2)
        ints = dict(M=m, N=N, KW=K // 8, KW_PER_SPLIT=512, stride_xm=K, stride_xk=1,
                    stride_wn=K // 8, stride_sn=K // g, stride_sg=1, stride_zn=K // g,
                    stride_zg=1, stride_os=m * N, stride_om=N, stride_on=1)
        out[f"gemv-{dt}-{sdt}-m{m}"] = build(
            Q._w4a16_gemv_kernel, dict(ptrs, w_ptr="*i32"), ints,
            dict(BLOCK_N=cfg.block_n, BLOCK_W=cfg.block_k // 8, M_ROWS=m, GROUP=g,
                 USE_INT64=False, PREFETCH=cfg.num_stages >= 2), cfg.num_warps, 1)
DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
for dt, sdt, m, ks, biased in (("fp16", "fp16", 1, 4, False), ("bf16", "bf16", 4, 8, True),
                               ("fp16", "fp32", 16, 8, False)):
    asm = dict(Q.tc_asm_options(DT[dt], DT[sdt], m, 128, biased), EMULATE=False)
    ptrs = dict(x_ptr="*i32", xt_ptr="*" + dt, w_ptr="*i32", s_ptr="*" + sdt, z_ptr="*" + sdt,
                out_ptr="*" + dt)
    ints = dict(M=m, N=N, STEPS=K // 128, STEPS_PER_SPLIT=K // 128, stride_xm=K // 2,
                stride_xtm=K, stride_wn=K // 8, stride_sn=K // 128, stride_sg=1,
                stride_zn=K // 128, stride_zg=1, stride_os=0, stride_om=N, stride_on=1)
    out[f"tc-{dt}-{sdt}-m{m}"] = build(
        Q._w4a16_tc_kernel, ptrs, ints,
        dict(WR=1, KS=ks, USE_INT64=False, PLANES=ks > 1, **asm), ks, 1)
for dt, sdt, biased, m in (("bf16", "bf16", True, 1), ("fp16", "fp32", False, 1),
                           ("bf16", "bf16", True, 16)):
    cfg = Q.tc_config_for(m, 57344, 8192, 128, tma=True)
    asm = dict(Q.tc_asm_options(DT[dt], DT[sdt], m, 128, biased), EMULATE=False)
    ptrs = dict(x_ptr="*i32", xt_ptr="*" + dt,
                w_desc=f"tensordesc<i32[{16 * cfg.num_warps}, 16]>",
                s_ptr="*" + sdt, z_ptr="*" + sdt, out_ptr="*" + dt)
    ints = dict(M=m, N=57344, STEPS=64, STEPS_PER_SPLIT=64, stride_xm=4096, stride_xtm=8192,
                stride_sn=64, stride_sg=1, stride_zn=64, stride_zg=1, stride_os=0,
                stride_om=57344, stride_on=1)
    k = sm90.build(Q._w4a16_tc_tma_kernel, dict(ints, **ptrs),
                   dict(W=cfg.num_warps, STAGES=cfg.num_stages, USE_INT64=False,
                        RB=cfg.block_n // (16 * cfg.num_warps), **asm),
                   cfg.num_warps, cfg.num_stages)
    in_loop = k.loop_lines()
    out[f"tma-{dt}-{sdt}-m{m}"] = {
        "tma": k.ptx.count("cp.async.bulk.tensor"), "cp_async": k.ptx.count("cp.async.cg")
        + k.ptx.count("cp.async.ca"), "local": k.local, "ld": sorted(set(k.loads)),
        "loop_hmma": sum("HMMA" in l for l in in_loop), "regs": k.registers,
        "shared": k.shared,
        "shared_limit": cfg.num_stages * cfg.block_n * 64 + 1024}
json.dump(out, sys.stdout)
"""


def test_kernels_build_for_sm90():
    """Both kernels compile for sm_90 (ptxas included) with the table's configurations, on
    tensor cores, with no local memory (no spills) and no int-to-float conversion (a
    quarter-rate instruction on sm_90); the decode kernel reads the packed
    weight in 16-byte vectors and its operand loads are software-pipelined (cp.async), as
    are the prefill kernel's. Compiled in a fresh process: under the interpreter,
    triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    assert len(built) == 20
    for name, k in built.items():
        if name.startswith("tma"):
            # the weight's [16 x warps, 16]-word boxes (one a row block) by TMA into a ring
            # of buffers; x by 16-byte asm loads, not copied through shared memory (no
            # cp.async); no weight word through a register load; tensor cores; no spills
            assert k["tma"] >= 2 and k["cp_async"] == 0 and k["local"] == 0, (name, k)
            assert "ld.global.v4.b32" in k["ld"] and k["loop_hmma"] > 0, (name, k)
            assert not any("evict_first" in ld for ld in k["ld"]), (name, k)
            # at most a box of 64 bytes a row for each stage, plus the barriers
            assert k["shared"] <= k["shared_limit"], (name, k)
            continue
        if name.startswith("tc"):
            # tensor cores, 16-byte vectors of weight words (x too), no spills, and no
            # shared memory or barrier inside the step loop (the tile's layout is the MMA
            # fragments' for every operand)
            assert k["local"] == 0 and k["mma"] and k["i2f"] == 0, (name, k)
            assert "ld.global.L1::evict_first.L2::cache_hint.v4.b32" in k["ld"], (name, k)
            assert "ld.global.v4.b32" in k["ld"], (name, k)
            assert k["loop_bar"] == 0 and k["loop_hmma"] > 0, (name, k)
            # the K slices store their own sums: no barrier anywhere in the program
            assert k["bar"] == 0, (name, k)
            continue
        if name.startswith("gemv"):
            # no MMA and no software pipelining; 16-byte vectors of weight words
            assert k["local"] == 0 and k["i2f"] == 0, (name, k)
            assert "ld.global.L1::evict_first.L2::cache_hint.v4.b32" in k["ld"], (name, k)
            continue
        assert k["local"] == 0 and k["mma"] and k["cp_async"] > 0, (name, k)
        if name.startswith("prefill") and "unswapped" in name and k["regs"] is not None:
            # the unswapped 128x128 tile, 8 warps: two programs an SM need <= 128 registers
            assert k["regs"] <= 128, (name, k["regs"])
        assert k["i2f"] == 0, (name, k)      # nibbles become floats by bit operations
        if name.startswith("decode"):
            # the weight: 16-byte vectors (the masked tail step keeps its evict-first hint)
            assert "ld.global.L1::evict_first.L2::cache_hint.v4.b32" in k["ld"], (name, k)
            assert not any("evict_first" in ld and "v4" not in ld for ld in k["ld"]), (name, k)
