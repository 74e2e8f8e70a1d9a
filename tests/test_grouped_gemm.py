"""GroupedGemmFwdOp and MoeExpertMLPFwdOp: the Triton kernel against the torch reference,
the reference against torch._grouped_mm, the ops' checks, the composite's stages, the
compile boundary and the workloads.

Without CUDA the Triton kernel runs through Triton's interpreter on the CPU
(tests/conftest.py sets TRITON_INTERPRET=1 first), so sizes are small, and bfloat16 is left
to the reference there (the interpreter's bfloat16 tl.dot is wrong): the kernel tests run
float16 and float32. With CUDA the same tests run the compiled kernel on the GPU, and the
bfloat16 case runs too (run this file alone there).
"""

from __future__ import annotations

import pytest
import torch

import opspec.kernels.grouped_gemm as GG
from opspec.kernels.devices import TRITON_DEVICES, TRITON_INTERPRETED
from opspec.kernels.grouped_gemm import (
    GroupedGemmConfig, grouped_gemm_config_for, grouped_gemm_reference, grouped_gemm_tma,
    grouped_gemm_tma_config_for, grouped_gemm_triton, moe_expert_mlp_reference, tma_eligible,
)
from opspec.kernels.grouped_gemm_impl import GroupedGemmCall, GroupedGemmTritonKernel
from opspec.ops import GroupedGemmFwdOp, MoeExpertMLPFwdOp, SiluAndMulFwdOp
from opspec.ops.bench_baselines import REFERENCES
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNEL_DTYPES = [torch.float32, torch.float16] + ([] if TRITON_INTERPRETED else [torch.bfloat16])
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]
OP = "GroupedGemmFwdOp"
MLP = "MoeExpertMLPFwdOp"

needs_triton = pytest.mark.skipif(DEVICE not in TRITON_DEVICES,
                                  reason="the Triton kernel needs CUDA or TRITON_INTERPRET=1")


def _data(sizes, K, N, dtype, ta=False, tb=False, seed=0, size_dtype=torch.int32):
    """a, b, batch_sizes on DEVICE in the stored layouts; values scaled so that the
    products stay near 1."""
    g = torch.Generator().manual_seed(seed)
    M, G = sum(sizes), len(sizes)
    a = torch.randn((K, M) if ta else (M, K), generator=g) / max(K, 1) ** 0.5
    b = torch.randn((G, N, K) if tb else (G, K, N), generator=g)
    s = torch.tensor(sizes, dtype=size_dtype)
    return a.to(dtype).to(DEVICE), b.to(dtype).to(DEVICE), s.to(DEVICE)


def _want(a, b, s, ta, tb):
    return grouped_gemm_reference(a.double(), b.double(), s, ta, tb)


def _close(got, want, dtype):
    torch.testing.assert_close(got.double(), want.double(), **TOL[dtype])


# ============================================================================ the reference

@pytest.mark.parametrize("ta, tb", LAYOUTS)
def test_reference_is_torch_grouped_mm(ta, tb):
    # (torch._grouped_mm wants 16-byte aligned strides)
    a, b, s = (t.cpu() for t in _data([3, 0, 8, 1], 8, 12, torch.float32, ta, tb))
    A = a.t() if ta else a
    B = b.transpose(1, 2) if tb else b
    want = torch._grouped_mm(A, B, offs=torch.cumsum(s, 0, dtype=torch.int32))
    got = grouped_gemm_reference(a, b, s, ta, tb)
    assert got.dtype == torch.float32 and got.shape == (12, 12)
    torch.testing.assert_close(got, want)
    # float64 stays float64 (the bench's reference precision)
    assert grouped_gemm_reference(a.double(), b.double(), s.long(), ta, tb).dtype == torch.float64


def test_mlp_reference_is_the_stage_math():
    g = torch.Generator().manual_seed(1)
    x, w13, w2 = torch.randn(7, 4, generator=g), torch.randn(2, 4, 6, generator=g), torch.randn(2, 3, 4, generator=g)
    s = torch.tensor([4, 3])
    got = moe_expert_mlp_reference(x.double(), w13.double(), w2.double(), s)
    rows = []
    for lo, hi, e in ((0, 4, 0), (4, 7, 1)):
        h = x[lo:hi].double() @ w13[e].double()
        rows.append((torch.nn.functional.silu(h[:, :3]) * h[:, 3:]) @ w2[e].double())
    torch.testing.assert_close(got, torch.cat(rows))


# ============================================================================ the kernel

@needs_triton
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("ta, tb", LAYOUTS)
def test_triton_matches_reference(dtype, ta, tb):
    # empty groups first, in the middle and last; odd K and N
    sizes, K, N = [0, 5, 0, 17, 1, 3, 0], 19, 24
    a, b, s = _data(sizes, K, N, dtype, ta, tb)
    out = torch.full((sum(sizes), N), float("nan"), dtype=dtype, device=DEVICE)
    assert grouped_gemm_triton(a, b, s.long(), ta, tb, out) is out
    _close(out, _want(a, b, s, ta, tb), dtype)


@needs_triton
@pytest.mark.parametrize("ta, tb", [(False, False), (True, True)])
def test_triton_several_tiles_per_group_and_k_tail(ta, tb):
    # 16-row tiles: groups of 1, 16, 33 and 40 rows span 1..3 tiles; K = 40 leaves a tail
    # of 8 after two 16-deep blocks; 3 column tiles; GROUP_M = 2 reorders the programs.
    sizes, K, N = [1, 16, 0, 33, 40], 40, 48
    a, b, s = _data(sizes, K, N, torch.float16, ta, tb, seed=2)
    out = torch.empty((sum(sizes), N), dtype=torch.float16, device=DEVICE)
    cfg = GroupedGemmConfig(16, 16, 16, 2, 4, 2)
    grouped_gemm_triton(a, b, s, ta, tb, out, config=cfg)
    _close(out, _want(a, b, s, ta, tb), torch.float16)


@needs_triton
def test_triton_many_groups_and_one_group():
    # more groups than the smallest BLOCK_G (16); then every row in a single group
    sizes = [i % 3 for i in range(37)]
    a, b, s = _data(sizes, 16, 16, torch.float32, seed=3)
    out = torch.empty((sum(sizes), 16), device=DEVICE)
    grouped_gemm_triton(a, b, s, False, False, out)
    _close(out, _want(a, b, s, False, False), torch.float32)
    a, b, s = _data([9], 16, 16, torch.float32, seed=4)
    out = torch.empty((9, 16), device=DEVICE)
    grouped_gemm_triton(a, b, s, False, False, out)
    _close(out, _want(a, b, s, False, False), torch.float32)


@needs_triton
def test_triton_strided_operands():
    # a: every other column of a wider tensor; b: a permuted, non-contiguous view;
    # out: rows of a wider tensor
    g = torch.Generator().manual_seed(5)
    sizes, K, N = [4, 0, 7], 16, 12
    a = (torch.randn(11, 2 * K, generator=g) / 4).half().to(DEVICE)[:, ::2]
    b = torch.randn(3, N, K, generator=g).half().to(DEVICE).permute(0, 2, 1)  # [G, K, N]
    assert not a.is_contiguous() and not b.is_contiguous()
    # the sizes: every other element of a longer tensor
    s = torch.tensor([v for n in sizes for v in (n, 99)], dtype=torch.int32, device=DEVICE)[::2]
    assert s.tolist() == sizes and s.stride(0) == 2
    wide = torch.zeros(11, N + 5, dtype=torch.float16, device=DEVICE)
    out = wide[:, :N]
    grouped_gemm_triton(a, b, s, False, False, out)
    _close(out, _want(a, b, s, False, False), torch.float16)
    assert (wide[:, N:] == 0).all()


@needs_triton
def test_triton_empty_problems():
    # no rows: nothing launched
    a, b, s = _data([0, 0], 8, 8, torch.float32)
    out = torch.empty((0, 8), device=DEVICE)
    assert grouped_gemm_triton(a, b, s, False, False, out).shape == (0, 8)
    # K = 0: zeros
    a, b, s = _data([2, 3], 0, 4, torch.float32)
    out = torch.full((5, 4), 7.0, device=DEVICE)
    assert (grouped_gemm_triton(a, b, s, False, False, out) == 0).all()
    # N = 0
    a, b, s = _data([2, 3], 4, 0, torch.float32)
    assert grouped_gemm_triton(a, b, s, False, False, torch.empty((5, 0), device=DEVICE)).numel() == 0


@needs_triton
def test_triton_int64_offsets(monkeypatch):
    # the int64 address path, forced by lowering the limit
    monkeypatch.setattr(GG, "_INT32_LIMIT", 16)
    a, b, s = _data([3, 0, 5], 16, 16, torch.float16, True, True, seed=6)
    out = torch.empty((8, 16), dtype=torch.float16, device=DEVICE)
    grouped_gemm_triton(a, b, s, True, True, out)
    _close(out, _want(a, b, s, True, True), torch.float16)


def test_triton_rejects_bad_arguments():
    a, b, s = _data([2, 2], 8, 4, torch.float32)
    out = torch.empty((4, 4), device=DEVICE)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        grouped_gemm_triton(a, b, s, False, True, out)
    with pytest.raises(TypeError, match="share a dtype"):
        grouped_gemm_triton(a.half(), b, s, False, False, out)
    with pytest.raises(ValueError, match="batch_sizes must be int32 or int64 of shape \\[2\\]"):
        grouped_gemm_triton(a, b, s.float(), False, False, out)
    with pytest.raises(ValueError, match="out must have shape \\[4, 4\\]"):
        grouped_gemm_triton(a, b, s, False, False, out[:3])


# TMA kernel cases: groups of 0, 5, 33, 70 and 4 rows (112 rows, so a stored [K, M] has
# 16-byte aligned rows) start at rows 0, 5, 38 and 108, off any 8-row boundary; 16-row tiles
# give a group up to 5 tiles; K = 40 leaves a tail of 8 after two 16-deep blocks; N = 24 a
# column tail. The last group is empty and its weights are infinite, so any read of b
# across a group's end would show.
TMA_SIZES, TMA_K, TMA_N = [0, 5, 33, 70, 4, 0], 40, 24
TMA_TILES = GroupedGemmConfig(16, 16, 16, 2, 4, 2)


def _tma_data(ta, tb, seed=8):
    dtype = torch.float16 if TRITON_INTERPRETED else torch.bfloat16
    a, b, s = _data(TMA_SIZES, TMA_K, TMA_N, dtype, ta, tb, seed=seed, size_dtype=torch.int64)
    b[-1] = float("inf")
    return a, b, s, dtype


@needs_triton
@pytest.mark.parametrize("ta, tb", LAYOUTS)
def test_tma_matches_reference(ta, tb):
    # the TMA kernel, forced with small tiles, in each layout
    a, b, s, dtype = _tma_data(ta, tb)
    s = torch.stack([s, s]).t()[:, 0]  # a strided view of the sizes
    out = torch.full((sum(TMA_SIZES), TMA_N), float("nan"), dtype=dtype, device=DEVICE)
    assert grouped_gemm_tma(a, b, s, ta, tb, out, TMA_TILES) is out
    _close(out, _want(a, b, s, ta, tb), dtype)


@needs_triton
def test_tma_reads_the_layout_from_the_strides():
    # transpose_a with a whose op(a) is row-major, b a non-contiguous slice of wider
    # weights, out a slice of a wider tensor: described as stored, no copies
    a, b, s, dtype = _tma_data(False, False, seed=10)
    a_t = a.t()  # [K, M] view of a row-major [M, K]
    wide_b = torch.zeros((b.shape[0], TMA_K, 32), dtype=dtype, device=DEVICE)
    wide_b[:, :, :TMA_N] = b
    b_view = wide_b[:, :, :TMA_N]
    assert not b_view.is_contiguous()
    a_view, trans_a, b_desc_view, trans_b = GG.tma_operands(a_t, b_view, True, False)
    assert (trans_a, trans_b) == (False, False) and a_view.data_ptr() == a.data_ptr()
    wide_out = torch.zeros((sum(TMA_SIZES), TMA_N + 3), dtype=dtype, device=DEVICE)
    grouped_gemm_tma(a_t, b_view, s, True, False, wide_out[:, :TMA_N], TMA_TILES)
    _close(wide_out[:, :TMA_N], _want(a, b, s, False, False), dtype)
    assert (wide_out[:, TMA_N:] == 0).all()


@needs_triton
@pytest.mark.parametrize("ta, tb", [(True, False), (False, True)])
def test_triton_routes_to_tma_when_descriptors_hold(monkeypatch, ta, tb):
    # the device check forced: more than 64 rows per group take the TMA kernel with the
    # table's tiles; float32, and a stored [K, M] whose rows are not 16-byte aligned, take
    # the pointer kernel
    monkeypatch.setattr(GG, "_tma_device_ok", lambda device: True)
    taken = []
    real = GG.grouped_gemm_tma
    monkeypatch.setattr(GG, "grouped_gemm_tma", lambda *args: taken.append(args[-1]) or real(*args))
    sizes, K, N = [70, 0, 130], 24, 16
    a, b, s = _data(sizes, K, N, torch.float16, ta, tb, seed=11)
    out = torch.empty((200, N), dtype=torch.float16, device=DEVICE)
    grouped_gemm_triton(a, b, s, ta, tb, out)
    assert [c[:3] for c in taken] == [(128, 16, 32)] and GG._TMA_STATE["ok"]
    _close(out, _want(a, b, s, ta, tb), torch.float16)
    a32, b32 = a.float(), b.float()
    assert not tma_eligible(a32, b32, ta, tb)
    grouped_gemm_triton(a32, b32, s, ta, tb, out.float())
    sizes = [70, 0, 131]  # M = 201
    a, b, s = _data(sizes, K, N, torch.float16, ta, tb, seed=12)
    out = torch.empty((201, N), dtype=torch.float16, device=DEVICE)
    assert tma_eligible(a, b, ta, tb) == (not ta)
    grouped_gemm_triton(a, b, s, ta, tb, out)
    _close(out, _want(a, b, s, ta, tb), torch.float16)
    assert len(taken) == (1 if ta else 2)


@pytest.mark.skipif(not torch.cuda.is_available()
                    or torch.cuda.get_device_capability()[0] < 9, reason="needs an sm_90 GPU")
@pytest.mark.parametrize("ta, tb", LAYOUTS)
def test_sm90_routes_large_groups_to_tma(ta, tb):
    # more than 64 rows per group, group starts off 8-row boundaries, a K tail:
    # grouped_gemm_triton takes the TMA kernel, which builds
    sizes, K, N = [130, 0, 75, 300, 15], 200, 320
    a, b, s = _data(sizes, K, N, torch.bfloat16, ta, tb, seed=9)
    cfg = grouped_gemm_tma_config_for(sum(sizes), N, K, len(sizes))
    assert cfg is not None and tma_eligible(a, b, ta, tb)
    out = torch.empty((sum(sizes), N), dtype=torch.bfloat16, device=DEVICE)
    grouped_gemm_triton(a, b, s, ta, tb, out)
    assert GG._TMA_STATE["ok"], "the TMA kernel failed to build and fell back"
    _close(out, _want(a, b, s, ta, tb), torch.bfloat16)


def test_tma_refuses_what_descriptors_cannot_describe():
    a, b, s = _data([8, 8], 32, 16, torch.float16)
    out = torch.empty((16, 16), dtype=torch.float16, device=DEVICE)
    cfg = GroupedGemmConfig(16, 16, 16, 2, 4, 2)
    # a with no unit stride; a stored [K, M] whose rows are 14 bytes; b off a 16-byte base
    strided = torch.zeros(16, 64, dtype=torch.float16, device=DEVICE)[:, ::2]
    assert GG.tma_operands(strided, b, False, False) is None
    with pytest.raises(ValueError, match="unit stride in one of their two matrix dimensions"):
        grouped_gemm_tma(strided, b, s, False, False, out, cfg)
    a7, b7, s7 = _data([3, 4], 32, 16, torch.float16, True)
    assert a7.shape == (32, 7) and GG.tma_operands(a7, b7, True, False) is None
    odd = torch.zeros(2 * 32 * 16 + 1, dtype=torch.float16, device=DEVICE)[1:].view(2, 32, 16)
    assert GG.tma_operands(a, odd, False, False) is None
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        grouped_gemm_tma(a.float(), b.float(), s, False, False, out.float(), cfg)
    assert not tma_eligible(a.cpu(), b.cpu(), False, False)  # CPU: the pointer kernel
    # every layout of aligned operands is describable
    for ta, tb in LAYOUTS:
        A = a.t().contiguous() if ta else a
        B = b.transpose(1, 2).contiguous() if tb else b
        assert GG.tma_operands(A, B, ta, tb)[1::2] == (ta, tb)


def test_tma_table():
    # more than 64 rows per group: wide tiles for wide N, narrow ones otherwise; any K
    assert grouped_gemm_tma_config_for(16384, 4096, 7168, 32)[:3] == (128, 256, 64)
    assert grouped_gemm_tma_config_for(8192, 1536, 2048, 16)[:3] == (128, 128, 64)
    assert grouped_gemm_tma_config_for(4096, 7168, 2048, 8)[:3] == (128, 256, 64)
    assert grouped_gemm_tma_config_for(8192, 4096, 7200, 8)[:3] == (128, 256, 64)
    # decode rows stay on the pointer kernel
    assert grouped_gemm_tma_config_for(256, 4096, 7168, 32) is None


def test_config_table():
    bf16 = torch.bfloat16
    # decode: a few rows per expert
    assert grouped_gemm_config_for(256, 4096, 7168, 32, bf16)[:3] == (16, 64, 128)
    assert grouped_gemm_config_for(1024, 4096, 7168, 32, bf16)[:3] == (32, 64, 128)
    assert grouped_gemm_config_for(2048, 4096, 7168, 32, bf16)[:3] == (64, 128, 64)
    # prefill: wide tiles when the groups and N are large
    assert grouped_gemm_config_for(16384, 4096, 7168, 32, bf16)[:3] == (128, 256, 64)
    assert grouped_gemm_config_for(16384, 1536, 2048, 128, bf16)[:3] == (128, 128, 64)
    # float32, unaligned operands, and blocks clipped to a small problem
    assert grouped_gemm_config_for(4096, 4096, 4096, 8, torch.float32)[:3] == (64, 64, 32)
    assert grouped_gemm_config_for(16384, 4096, 7168, 32, bf16, False)[:3] == (128, 128, 32)
    assert grouped_gemm_config_for(10, 3, 5, 2, torch.float16)[:3] == (16, 16, 16)


def test_dispatch_refuses_bf16_only_under_the_interpreter():
    call = GroupedGemmCall("bfloat16", False, True, device=torch.device("cpu"))
    refusal = GroupedGemmTritonKernel.refusal(call)
    if TRITON_INTERPRETED:
        assert "bfloat16 tl.dot" in refusal
    else:
        assert refusal is None
    assert GroupedGemmTritonKernel.refusal(GroupedGemmCall("float16", True, True,
                                                            device=torch.device("cpu"))) is None
    op = GroupedGemmFwdOp()
    want = "grouped_gemm_triton" if "cpu" in TRITON_DEVICES else "grouped_gemm_reference"
    assert op.key_for("grouped_gemm", GroupedGemmCall("float16", False, False,
                                                      device=torch.device("cpu"))) == want
    if TRITON_INTERPRETED:
        assert op.key_for("grouped_gemm", call) == "grouped_gemm_reference"


# ============================================================================ the ops

@pytest.mark.parametrize("ta, tb", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_op_matches_reference(ta, tb, dtype):
    sizes, K, N = [3, 0, 10, 2], 16, 8
    a, b, s = _data(sizes, K, N, dtype, ta, tb, size_dtype=torch.int64)
    op = GroupedGemmFwdOp(ta, tb)
    got = op(a, b, s)
    assert got.shape == (15, 8) and got.dtype == dtype
    _close(got, REFERENCES[OP](op, a.double(), b.double(), s), dtype)
    call = op.last_call
    assert call.indices == {"M": 15, "N": 8, "K": 16, "G": 4, "T": str(dtype).split(".")[1],
                            "I": "int64", "transpose_a": ta, "transpose_b": tb}
    assert call.branch_key == (("transpose_a", ta), ("transpose_b", tb))
    assert call.metadata["batch_sizes"] is s
    itemsize = a.element_size()
    assert op.eval_roofline() == (2 * 15 * 8 * 16,
                                  (15 * 16 + 4 * 16 * 8 + 15 * 8) * itemsize + 4 * 8)


def test_op_empty_calls():
    op = GroupedGemmFwdOp()
    a, b, s = _data([0, 0, 0], 8, 4, torch.float32)
    assert op(a, b, s).shape == (0, 4)
    # no groups at all
    out = op(torch.empty(0, 8), torch.empty(0, 8, 4), torch.empty(0, dtype=torch.int32))
    assert out.shape == (0, 4) and op.last_call.indices["G"] == 0


def _call_error(op, *args):
    with pytest.raises((SignatureError, SignatureTypeError)) as ei:
        op(*args)
    return ei


def test_op_rejects_calls_that_break_the_spec():
    op = GroupedGemmFwdOp(transpose_b=True)
    a, b, s = (t.cpu() for t in _data([2, 3], 8, 4, torch.float32, tb=True))
    assert op.check_call(a, b, s) == {"M": 5, "N": 4, "K": 8, "G": 2, "T": "float32",
                                      "I": "int32"}
    # b in the [G, K, N] layout although transpose_b says [G, N, K]
    ei = _call_error(op, a, b.transpose(1, 2).contiguous(), s)
    expect_error(ei, SignatureError, OP, "signature.inputs.b.shape",
                 "Weight[transpose_a, transpose_b, G, K, N] = [G, N, K]", "expected K = 8")
    ei = _call_error(op, a, b, s[:1])
    expect_error(ei, SignatureError, OP, "signature.inputs.batch_sizes.shape",
                 "expected G = 2 (from input b), got 1")
    ei = _call_error(op, a, b, s.float())
    expect_error(ei, SignatureError, OP, "signature.inputs.batch_sizes.dtype",
                 "input batch_sizes, dtype I", "got float32")
    ei = _call_error(op, a, b.half(), s)
    expect_error(ei, SignatureError, OP, "signature.inputs.b.dtype",
                 "expected T = float32 (from input a), got float16")
    ei = _call_error(op, a.double(), b.double(), s)
    expect_error(ei, SignatureError, OP, "signature.inputs.a.dtype", "got float64")
    ei = _call_error(op, a[None], b, s)
    expect_error(ei, SignatureError, OP, "signature.inputs.a.shape", "expected 2, got 3")
    ei = _call_error(op, a, b, s.tolist())
    expect_error(ei, SignatureTypeError, OP, "signature.inputs.batch_sizes",
                 "expected a torch.Tensor, got list")
    # transpose_a: a is [K, M]
    ei = _call_error(GroupedGemmFwdOp(transpose_a=True, transpose_b=True), a, b, s)
    expect_error(ei, SignatureError, OP, "signature.inputs.b.shape",
                 "expected K = 5 (from input a), got 8", "M=8")
    with pytest.raises(SignatureTypeError) as ei:
        GroupedGemmFwdOp(transpose_a=1)
    expect_error(ei, SignatureTypeError, OP, "signature.params.transpose_a",
                 "parameter `transpose_a` has type `bool`; got 1")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_mlp_runs_its_three_stages(dtype):
    g = torch.Generator().manual_seed(7)
    sizes, K, I = [5, 0, 9, 2], 16, 8
    M, G = sum(sizes), len(sizes)
    x = (torch.randn(M, K, generator=g) / 2).to(dtype).to(DEVICE)
    w13 = (torch.randn(G, K, 2 * I, generator=g) / 4).to(dtype).to(DEVICE)
    w2 = (torch.randn(G, I, K, generator=g) / 3).to(dtype).to(DEVICE)
    s = torch.tensor(sizes, device=DEVICE)
    op = MoeExpertMLPFwdOp()
    got = op(x, w13, w2, s)
    assert got.shape == (M, K) and got.dtype == dtype
    _close(got, REFERENCES[MLP](op, x.double(), w13.double(), w2.double(), s), dtype)
    _close(got, moe_expert_mlp_reference(x, w13, w2, s), dtype)  # the same roundings
    stages = op.last_call.stages
    assert list(stages) == ["gate_up", "act", "down"]
    assert [c.op for c in stages["gate_up"] + stages["act"] + stages["down"]] == [
        "GroupedGemmFwdOp", "SiluAndMulFwdOp", "GroupedGemmFwdOp"]
    assert stages["gate_up"][0].indices["N"] == 2 * I and stages["down"][0].indices["N"] == K
    assert [type(d).__name__ for d in op.held_delegates()] == [
        "GroupedGemmFwdOp", "SiluAndMulFwdOp", "GroupedGemmFwdOp"]
    assert op.gate_up is not op.down and isinstance(op.act, SiluAndMulFwdOp)
    flops, nbytes = op.eval_roofline()
    assert flops == 6 * M * K * I + 6 * M * I
    assert nbytes == (M * K + G * K * 2 * I + G * I * K + M * K) * x.element_size() + G * 8
    assert MoeExpertMLPFwdOp.compile_op_names == ()


def test_mlp_rejects_calls_that_break_the_spec():
    op = MoeExpertMLPFwdOp()
    x, w13, w2, s = torch.randn(4, 8), torch.randn(2, 8, 6), torch.randn(2, 3, 8), torch.tensor([1, 3])
    assert op.check_call(x, w13, w2, s)["I"] == 3
    ei = _call_error(op, x, torch.randn(2, 8, 5), w2, s)
    expect_error(ei, SignatureError, MLP, "signature.inputs.w13.shape", "2 * I")
    ei = _call_error(op, x, w13, torch.randn(2, 3, 7), s)
    expect_error(ei, SignatureError, MLP, "signature.inputs.w2.shape", "expected K = 8")
    ei = _call_error(op, x, w13, w2, torch.tensor([4]))
    expect_error(ei, SignatureError, MLP, "signature.inputs.w13.shape",
                 "expected G = 1 (from input batch_sizes), got 2")


# ============================================================================ compile boundary

def test_opcheck():
    assert GroupedGemmFwdOp.compile_op_names == ("opspec::grouped_gemm_fwd_op",)
    fn = torch.ops.opspec.grouped_gemm_fwd_op.default
    assert str(fn._schema) == ("opspec::grouped_gemm_fwd_op(Tensor a, Tensor b, "
                               "Tensor batch_sizes, str key) -> Tensor")
    for (ta, tb), dtype, tests in (((False, True), torch.float32, None),
                                   ((True, False), torch.float16,
                                    ("test_schema", "test_faketensor",
                                     "test_autograd_registration"))):
        op = GroupedGemmFwdOp(ta, tb)
        a, b, s = (t.cpu() for t in _data([2, 0, 3], 8, 4, dtype, ta, tb))
        kwargs = {} if tests is None else {"test_utils": tests}
        torch.library.opcheck(fn, (a, b, s, op._opspec_key), **kwargs)


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = GroupedGemmFwdOp(transpose_b=True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda a, b, s: op(a, b, s) * 2, backend=backend, fullgraph=True)
    a, b, s = (t.cpu() for t in _data([3, 0, 4], 8, 4, torch.float32, tb=True))
    y = fn(a, b, s)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert sum("grouped_gemm_fwd_op" in t for t in targets) == 1, targets
    torch.testing.assert_close(y, op(a, b, s) * 2)


# ============================================================================ workloads

def test_workload_cases_instantiate_on_meta():
    for op_cls, n_cases in ((GroupedGemmFwdOp, 15), (MoeExpertMLPFwdOp, 6)):
        all_cases = cases(op_cls)
        ids = [c.id for c in all_cases]
        assert len(ids) == len(set(ids)) == n_cases, ids
        large = []
        for c in all_cases:
            op = c.construct(op_cls)
            inputs = c.inputs("meta")
            ind = op.check_call(*inputs)
            assert ind["M"] == c.values["M"] and ind["G"] == c.values["G"]
            out_elems = ind["M"] * (ind["N"] if op_cls is GroupedGemmFwdOp else ind["K"])
            nbytes = sum(t.numel() * t.element_size() for t in inputs) + \
                out_elems * inputs[0].element_size()
            if nbytes >= 256 * 2**20:
                large.append(c.label)
        # every row but Qwen3-30B's (small experts) moves at least 256 MiB
        assert {c.label for c in all_cases} - set(large) <= {
            "qwen3-30b-gate-up", "qwen3-30b-down", "qwen3-30b-decode", "qwen3-30b-prefill"}
    (c,) = [c for c in cases(GroupedGemmFwdOp) if c.id == "dsv3-gate-up-ep32-bfloat16-int32"]
    a, b, s = c.inputs("meta")
    assert a.shape == (16384, 7168) and b.shape == (32, 4096, 7168) and s.shape == (32,)
    assert c.params == {"transpose_b": True}
    (c,) = [c for c in cases(GroupedGemmFwdOp) if c.id == "mixtral-w1-tn-bfloat16-int32"]
    a, b, s = c.inputs("meta")
    assert a.shape == (4096, 8192) and b.shape == (8, 4096, 14336)


def test_workload_sizes_are_balanced_and_add_up():
    (c,) = [c for c in cases(MoeExpertMLPFwdOp) if c.id == "qwen3-30b-decode-bfloat16-int32"]
    x, w13, w2, s = c.inputs("cpu")
    assert s.tolist() == [8] * 16 and s.dtype == torch.int32
    assert x.shape == (128, 2048) and w13.shape == (16, 2048, 1536) and w2.shape == (16, 768, 2048)


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, sys, time
import triton
import opspec.kernels.grouped_gemm as GG
import sm90_build as sm90

def build(fn, types, ints, consts, num_warps, num_stages):
    t = time.time()
    ptx = sm90.build(fn, dict(ints, **types), consts, num_warps, num_stages).ptx
    return {"cp_async": ptx.count("cp.async"), "tma": ptx.count("cp.async.bulk.tensor"),
            "local": ptx.count(".local"), "wgmma": "wgmma" in ptx, "s": round(time.time() - t, 1)}

def pointer(M, N, K, G, ta, tb, dt="bf16"):
    torch_dt = {"bf16": GG.torch.bfloat16, "fp16": GG.torch.float16, "fp32": GG.torch.float32}[dt]
    cfg = GG.grouped_gemm_config_for(M, N, K, G, torch_dt)
    sa = (1, M) if ta else (K, 1)
    sb = (N * K, 1, K) if tb else (K * N, N, 1)
    ints = dict(M=M, N=N, K=K, G=G, stride_am=sa[0], stride_ak=sa[1], stride_bg=sb[0],
                stride_bk=sb[1], stride_bn=sb[2], stride_cm=N, stride_cn=1, stride_s=1)
    types = dict(a_ptr="*" + dt, b_ptr="*" + dt, c_ptr="*" + dt, sizes_ptr="*i32")
    consts = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                  BLOCK_G=max(16, triton.next_power_of_2(G)), GROUP_M=cfg.group_m,
                  EVEN_K=K % cfg.block_k == 0, USE_INT64=False,
                  INPUT_PRECISION="ieee" if dt == "fp32" else "tf32")
    return build(GG._grouped_gemm_kernel, types, ints, consts, cfg.num_warps, cfg.num_stages)

def tma(M, N, K, G, ta, tb, dt="bf16"):
    cfg = GG.grouped_gemm_tma_config_for(M, N, K, G)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    types = dict(a_desc=f"tensordesc<{dt}[{bk}, {bm}]>" if ta else f"tensordesc<{dt}[{bm}, {bk}]>",
                 b_desc=f"tensordesc<{dt}[1, {bn}, {bk}]>" if tb else f"tensordesc<{dt}[1, {bk}, {bn}]>",
                 c_ptr="*" + dt, sizes_ptr="*i32")
    ints = dict(M=M, N=N, K=K, G=G, stride_cm=N, stride_cn=1, stride_s=1)
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, BLOCK_G=max(16, triton.next_power_of_2(G)),
                  GROUP_M=cfg.group_m, TRANS_A=ta, TRANS_B=tb, ALIGN_M=8 if ta else 1,
                  USE_INT64=False, PROGRAMS=132)
    return build(GG._grouped_gemm_tma_kernel, types, ints, consts, cfg.num_warps, cfg.num_stages)

out = {
    "ptr-decode-nt": pointer(256, 4096, 7168, 32, False, True),
    "ptr-tn-large": pointer(8192, 14336, 4096, 8, True, False),
    "ptr-fp32": pointer(4096, 4096, 4096, 8, False, False, "fp32"),
    "tma-nt-big": tma(16384, 4096, 7168, 32, False, True),
    "tma-nn-big": tma(32768, 4096, 7168, 8, False, False),
    "tma-nt-narrow": tma(8192, 1536, 2048, 16, False, True),
    "tma-tn-big": tma(8192, 14336, 4096, 8, True, False),
    "tma-tt-big": tma(8192, 14336, 4096, 8, True, True, "fp16"),
}
json.dump(out, sys.stdout)
"""


def test_kernels_build_for_sm90():
    """Both kernels compile for sm_90 (ptxas included) with the tables' configurations of
    workload shapes: pipelined loads (cp.async; TMA bulk tensor copies in the TMA kernel),
    no local memory (no spills), Hopper's wgmma for 16-bit tiles of 64 rows or more.
    Compiled in a fresh process: under the interpreter, triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    for name, k in built.items():
        assert k["local"] == 0 and k["cp_async"] > 0, (name, k)
        if name.startswith("tma"):
            assert k["tma"] > 0 and k["wgmma"], (name, k)
        elif name == "ptr-tn-large":
            assert k["wgmma"], (name, k)
