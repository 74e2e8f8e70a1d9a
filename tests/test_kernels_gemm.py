"""GEMM / GEMV Triton kernels against the torch reference, on CPU through Triton's interpreter.

TRITON_INTERPRET=1 must be set BEFORE triton (or any opspec.kernels module, whose
``@triton.jit`` decorators read it at import) is imported: this module sets it on its
first lines, so these tests also need no GPU (and fail at collection, saying so, when
triton was imported earlier without it).  Only fp16 and fp32 are tested: the
interpreter's ``tl.dot`` returns wrong results for bf16 inputs (bf16 is checked on the
GPU by ``python -m opspec.kernels.gpu_check``).  Sizes are kept small: the interpreter
runs each program through numpy.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import triton.language as _tl  # noqa: E402

# Triton reads TRITON_INTERPRET when it (and each @triton.jit) is first imported: if
# another module imported triton earlier without it, these CPU tests cannot run.
if type(_tl.cdiv).__name__ != "InterpretedFunction":
    raise RuntimeError(
        "triton was imported before TRITON_INTERPRET=1 was set; set it in the environment "
        "or in a conftest.py to run the kernel tests on CPU"
    )

import torch  # noqa: E402

import opspec.kernels.gemm as G  # noqa: E402
from opspec.kernels.gemm import (  # noqa: E402
    GemmConfig,
    gemm_config_for,
    gemm_configs,
    gemm_reference,
    gemm_triton,
    gemv_config_for,
    gemv_triton,
    gemm_tma,
    tma_config_for,
    tma_eligible,
    tma_persistent,
)

DTYPES = [torch.float32, torch.float16]
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
}
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]
SHAPES = [(1, 7, 5), (17, 33, 65), (64, 64, 64), (3, 130, 257)]


def _operands(m, n, k, trans_a, trans_b, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*((k, m) if trans_a else (m, k)), generator=g) / (max(k, 1) ** 0.25)
    b = torch.randn(*((n, k) if trans_b else (k, n)), generator=g) / (max(k, 1) ** 0.25)
    return a.to(dtype), b.to(dtype)


def _layout_id(layout):
    return "".join("T" if t else "N" for t in layout)


def test_reference_definition():
    a = torch.randn(4, 3)
    b = torch.randn(5, 3)
    torch.testing.assert_close(gemm_reference(a, b, False, True), a @ b.t())
    torch.testing.assert_close(gemm_reference(a.t().contiguous(), b, True, True), a @ b.t())
    got = gemm_reference(a.half(), b.t().contiguous().half(), False, False)
    assert got.dtype == torch.float16 and got.shape == (4, 5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gemm_matches_reference(shape, layout, dtype):
    m, n, k = shape
    trans_a, trans_b = layout
    a, b = _operands(m, n, k, trans_a, trans_b, dtype)
    out = torch.empty(m, n, dtype=dtype)
    assert gemm_triton(a, b, trans_a, trans_b, out) is out
    torch.testing.assert_close(out, gemm_reference(a, b, trans_a, trans_b), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[0] <= 16], ids=str)
def test_gemv_matches_reference(shape, layout, dtype):
    m, n, k = shape
    trans_a, trans_b = layout
    a, b = _operands(m, n, k, trans_a, trans_b, dtype, seed=1)
    out = torch.empty(m, n, dtype=dtype)
    assert gemv_triton(a, b, trans_a, trans_b, out) is out
    torch.testing.assert_close(out, gemm_reference(a, b, trans_a, trans_b), **TOL[dtype])


@pytest.mark.parametrize("m", [2, 16])
@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
def test_gemv_decode_rows(m, layout):
    # A few decode batch sizes up to the 16-row limit, K not a multiple of BLOCK_K.
    trans_a, trans_b = layout
    a, b = _operands(m, 40, 300, trans_a, trans_b, torch.float16, seed=2)
    out = torch.empty(m, 40, dtype=torch.float16)
    gemv_triton(a, b, trans_a, trans_b, out)
    torch.testing.assert_close(out, gemm_reference(a, b, trans_a, trans_b), **TOL[torch.float16])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("nk", [(40, 1024), (33, 1040), (5, 48)], ids=str)
def test_gemv_single_row_takes_the_fma_kernel(nk, dtype, monkeypatch):
    """M = 1 with b stored [N, K] (aligned rows) runs the FMA kernel: whole K steps, a
    masked tail (1040 = 2 x 512 + 16 in fp16, 4 x 256 + 16 in fp32), N not a multiple of
    its 16 rows, a read through its K stride and out written through its strides. Any
    other layout of b keeps the MMA kernel."""
    import opspec.kernels.gemm as G

    ran = []
    real = G._launch_fma
    monkeypatch.setattr(G, "_launch_fma", lambda *args: ran.append(args[3:5]) or real(*args))
    monkeypatch.setattr(G, "_PREPARED", G.LaunchMemo())   # no replay of an earlier launch
    n, k = nk
    a, b = _operands(1, n, k, False, True, dtype, seed=4)
    wide = torch.zeros(1, 2 * k, dtype=dtype)
    wide[:, ::2] = a
    out_t = torch.full((n, 3), float("nan"), dtype=dtype)
    out = out_t[:, 1:2].t()                     # [1, n], column stride 3
    gemv_triton(wide[:, ::2], b, False, True, out)
    torch.testing.assert_close(out, gemm_reference(a, b, False, True), **TOL[dtype])
    assert ran == [(n, k)]
    assert torch.isnan(out_t[:, 0]).all() and torch.isnan(out_t[:, 2]).all()
    # b stored [K, N], or M > 1: the MMA kernel
    ran.clear()
    gemv_triton(a, b.t().contiguous(), False, False, torch.empty(1, n, dtype=dtype))
    gemv_triton(a.expand(2, k), b, False, True, torch.empty(2, n, dtype=dtype))
    assert ran == []


@pytest.mark.parametrize("fn", [gemm_triton, gemv_triton], ids=["gemm", "gemv"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_k_zero_gives_zeros(fn, dtype):
    a = torch.empty(3, 0, dtype=dtype)
    b = torch.empty(0, 5, dtype=dtype)
    out = torch.full((3, 5), 9.0, dtype=dtype)
    fn(a, b, False, False, out)
    assert torch.equal(out, torch.zeros(3, 5, dtype=dtype))
    assert torch.equal(gemm_reference(a, b, False, False), out)


@pytest.mark.parametrize("fn", [gemm_triton, gemv_triton], ids=["gemm", "gemv"])
@pytest.mark.parametrize("mn", [(0, 5), (3, 0)], ids=str)
def test_empty_output(fn, mn):
    m, n = mn
    a = torch.randn(m, 4).half()
    b = torch.randn(4, n).half()
    out = torch.empty(m, n, dtype=torch.float16)
    assert fn(a, b, False, False, out) is out
    assert gemm_reference(a, b, False, False).shape == (m, n)


def test_strided_operands_and_output():
    # Operands that are slices of wider tensors (row strides != row length), and an
    # output that is a slice too: read and written through their strides, no copies.
    g = torch.Generator().manual_seed(3)
    a_big = torch.randn(20, 50, generator=g).half()
    b_big = torch.randn(40, 90, generator=g).half()
    a = a_big[:, 3:40]  # [20, 37]
    b = b_big[2:39, 5:76]  # [37, 71]
    out_big = torch.zeros(20, 80, dtype=torch.float16)
    out = out_big[:, 4:75]
    gemm_triton(a, b, False, False, out)
    torch.testing.assert_close(out, gemm_reference(a, b, False, False), **TOL[torch.float16])
    assert torch.all(out_big[:, :4] == 0) and torch.all(out_big[:, 75:] == 0)
    # The same product with a passed as a transposed view (trans_a: stored [K, M], with
    # unit row stride and column stride 50) and b as a transposed copy (trans_b).
    at = a.t()  # [37, 20]
    bt = b.t().contiguous()  # [71, 37]
    out2 = torch.empty(20, 71, dtype=torch.float16)
    gemm_triton(at, bt, True, True, out2)
    torch.testing.assert_close(out2, out, **TOL[torch.float16])


@pytest.mark.parametrize(
    "config",
    [GemmConfig(128, 256, 64, 8, 8, 3), GemmConfig(32, 16, 16, 2, 4, 2), GemmConfig(16, 32, 32, 1, 4, 2)],
    ids=str,
)
def test_gemm_forced_configs(config):
    # Big tiles on a ragged problem (wrap-around rows/columns, masked K) and small tiles
    # with several groups (the grouped ordering's last, partial group).
    a, b = _operands(70, 45, 70, False, True, torch.float16, seed=4)
    out = torch.empty(70, 45, dtype=torch.float16)
    gemm_triton(a, b, False, True, out, config=config)
    torch.testing.assert_close(out, gemm_reference(a, b, False, True), **TOL[torch.float16])


def test_rejects_bad_arguments():
    a = torch.zeros(4, 8, dtype=torch.float16)
    b = torch.zeros(8, 6, dtype=torch.float16)
    with pytest.raises(ValueError):  # K mismatch
        gemm_triton(a, b, False, True, torch.empty(4, 8, dtype=torch.float16))
    with pytest.raises(ValueError):  # out shape
        gemm_triton(a, b, False, False, torch.empty(4, 5, dtype=torch.float16))
    with pytest.raises(TypeError):  # mixed dtypes
        gemm_triton(a, b.float(), False, False, torch.empty(4, 6, dtype=torch.float16))
    with pytest.raises(ValueError):  # gemv is for M <= 16
        gemv_triton(torch.zeros(17, 8, dtype=torch.float16), b, False, False,
                    torch.empty(17, 6, dtype=torch.float16))


def test_config_table():
    configs = gemm_configs()
    assert len(configs) == len(set(configs))
    # Large Hopper shapes: 128x256x64, 8 warps, 3 stages.
    big = gemm_config_for(4096, 4096, 4096, torch.bfloat16)
    assert big == GemmConfig(128, 256, 64, 8, 8, 3) and big in configs
    assert gemm_config_for(4096, 14336, 4096, torch.float16).block_n == 256
    # Too few 128x256 tiles for one wave -> 128x128.
    assert gemm_config_for(1024, 2048, 4096, torch.bfloat16)[:3] == (128, 128, 64)
    # Small M gets small BLOCK_M.
    assert gemm_config_for(16, 4096, 4096, torch.bfloat16).block_m == 16
    assert gemm_config_for(64, 4096, 4096, torch.bfloat16).block_m == 64
    # Blocks never exceed the (rounded) problem, and stay >= 16 for tl.dot.
    small = gemm_config_for(1, 7, 5, torch.float16)
    assert (small.block_m, small.block_n, small.block_k) == (16, 16, 16)
    # Decode GEMV: up to 64 columns per program, a program per SM (132) or more.
    gv = gemv_config_for(1, 14336, 4096, torch.bfloat16)
    assert gv.block_m == 16 and gv.block_n == 64 and 14336 // gv.block_n >= 132
    assert gv.num_stages == 4
    # Under a wave of 64-column programs: the widest giving half a wave, 6 stages.
    small = gemv_config_for(16, 4096, 4096, torch.bfloat16)
    assert (small.block_n, small.num_stages) == (32, 6)
    assert (gemv_config_for(4, 6144, 4096).block_n, gemv_config_for(4, 1024, 4096).block_n) \
        == (64, 16)
    # Unaligned operands (no 16-element row alignment): smaller K step, N <= 128.
    un = gemm_config_for(4096, 4096, 4095, torch.bfloat16, aligned=False)
    assert un.block_k <= 32 and un.block_n <= 128
    assert gemv_config_for(1, 14336, 4095, torch.bfloat16, aligned=False).block_k <= 32


def test_alignment_detection():
    from opspec.kernels.gemm import _is_aligned

    assert _is_aligned(torch.empty(32, 64, dtype=torch.float16))
    assert _is_aligned(torch.empty(64, 32, dtype=torch.float16).t())
    assert not _is_aligned(torch.empty(32, 65, dtype=torch.float16))  # row stride 65
    assert not _is_aligned(torch.empty(32, 64, dtype=torch.float16)[:, 1:])  # base + 2 bytes
    assert not _is_aligned(torch.empty(32, 64, dtype=torch.float16)[:, ::2])  # no unit stride


def test_aligned_rows_copies_only_rows_a_copy_aligns():
    from opspec.kernels.tiling import aligned_rows, vector_aligned

    x = torch.randn(32, 68).to(torch.bfloat16)
    view = x[:, :64]                         # rows of 68: no 16-byte vectors past the first
    got = aligned_rows(view)
    assert got is not view and got.is_contiguous() and vector_aligned(got)
    assert torch.equal(got, view) and got.data_ptr() != x.data_ptr()
    odd = torch.empty(1000, dtype=torch.float16)[1:641].view(10, 64)   # base + 2 bytes
    assert aligned_rows(odd) is not odd and vector_aligned(aligned_rows(odd))
    for same in (torch.empty(32, 64, dtype=torch.float16),        # aligned already
                 torch.empty(64, 32, dtype=torch.float16).t(),    # no unit row stride
                 torch.empty(32, 24, dtype=torch.float16)[:, :20],  # a copy of 20 neither
                 torch.empty(3, 32, 80, dtype=torch.float16)[:, :, :64]):  # 3-D, aligned
        assert aligned_rows(same) is same


def test_aligned_rows_bytes_only_is_cublas_rule():
    """With ``bytes_only`` (cuBLAS's rule) rows that start on 16-byte boundaries stay, even
    where their stride is not a multiple of 16 elements; rows 4 bf16 elements longer are
    copied; rows whose copy would not be aligned either stay."""
    from opspec.kernels.tiling import aligned_rows, byte_aligned

    x8 = torch.randn(32, 72).to(torch.bfloat16)[:, :64]     # 144-byte rows
    assert byte_aligned(x8) and aligned_rows(x8, bytes_only=True) is x8
    assert aligned_rows(x8) is not x8                        # Triton's rule copies it
    x4 = torch.randn(32, 68).to(torch.bfloat16)[:, :64]     # 136-byte rows
    assert not byte_aligned(x4)
    got = aligned_rows(x4, bytes_only=True)
    assert got is not x4 and got.is_contiguous() and byte_aligned(got) and torch.equal(got, x4)
    short = torch.randn(32, 9).to(torch.bfloat16)[:, :6]    # a copy of 12-byte rows neither
    assert aligned_rows(short, bytes_only=True) is short
    assert not byte_aligned(torch.empty(8, 16, dtype=torch.bfloat16).t())   # no unit rows


def test_aligned_rows_keeps_the_operand_without_memory_for_a_copy(monkeypatch):
    import opspec.kernels.tiling as T
    monkeypatch.setattr(T, "contiguous_copy", lambda t: None)
    view = torch.randn(32, 68).to(torch.bfloat16)[:, :64]
    assert T.aligned_rows(view) is view


# -- the TMA-descriptor kernel (interpreted here; routed to on Hopper GPUs) -----------------

@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
@pytest.mark.parametrize("mnk, config", [
    ((40, 72, 104), GemmConfig(32, 32, 32, 8, 4, 2)),    # tails in M, N and K
    ((24, 24, 48), GemmConfig(16, 16, 64, 1, 4, 2)),     # BLOCK_K past K: zero-filled
    ((72, 48, 40), None),                                # the table's M <= 128 entry
], ids=str)
def test_gemm_tma_matches_reference(layout, mnk, config):
    m, n, k = mnk
    trans_a, trans_b = layout
    a, b = _operands(m, n, k, trans_a, trans_b, torch.float16, seed=7)
    out = torch.full((m, n), float("nan"), dtype=torch.float16)  # every element must be written
    assert gemm_tma(a, b, trans_a, trans_b, out, config) is out
    torch.testing.assert_close(out, gemm_reference(a, b, trans_a, trans_b), **TOL[torch.float16])


@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
def test_persistent_tma_walks_every_tile(layout, monkeypatch):
    # Two programs for 3 x 3 tiles of 128x256: each program walks several tiles, with
    # tails in M, N and K.
    monkeypatch.setattr(G, "_num_sms", lambda device: 2)
    trans_a, trans_b = layout
    a, b = _operands(304, 520, 72, trans_a, trans_b, torch.float16, seed=11)
    out = torch.full((304, 520), float("nan"), dtype=torch.float16)
    cfg = GemmConfig(128, 256, 64, 2, 8, 2)
    assert tma_persistent(cfg)
    assert gemm_tma(a, b, trans_a, trans_b, out, cfg) is out
    torch.testing.assert_close(out, gemm_reference(a, b, trans_a, trans_b), **TOL[torch.float16])


def test_gemm_tma_refuses_what_descriptors_cannot_describe():
    a = torch.zeros(8, 16, dtype=torch.float16)
    b = torch.zeros(16, 8, dtype=torch.float16)
    out = torch.empty(8, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm_tma(torch.zeros(8, 12, dtype=torch.float16), b[:12], False, False, out)  # 24-byte rows
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm_tma(torch.zeros(16, 8, dtype=torch.float16).t(), b, False, False, out)  # no unit stride
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        gemm_tma(a.float(), b.float(), False, False, out.float())
    assert not tma_eligible(a, b, out)  # a CPU tensor: the pointer kernel serves it
    assert torch.equal(gemm_tma(a[:, :0], b[:0], False, False, out.fill_(1)), torch.zeros(8, 8).half())


def test_tma_table():
    # Large problems of any layout: 128x256 tiles, run by the persistent kernel.
    for mnk in [(4096, 4096, 4096), (4096, 14336, 4096), (2048, 28672, 8192)]:
        for trans_b in (False, True):
            cfg = tma_config_for(*mnk, trans_b)
            assert cfg[:3] == (128, 256, 64) and tma_persistent(cfg)
    # 192 tiles of 128x256 leave 72 of 132 SMs idle in the second wave: 128x128 for NT,
    # the pointer kernel for NN.
    assert tma_config_for(4096, 1536, 7168, True)[:3] == (128, 128, 64)
    assert not tma_persistent(tma_config_for(4096, 1536, 7168, True))
    assert tma_config_for(4096, 1536, 7168, False) is None
    # NT, within two waves of 128x256 tiles a last wave 80 % full will do (224 and 112 tiles,
    # 0.848 full); beyond, 85 % (448 tiles, 0.848: 128x128)
    for mnk in [(512, 14336, 4096), (1024, 3584, 18944)]:
        assert tma_persistent(tma_config_for(*mnk, True)), mnk
    for mnk in [(512, 28672, 8192), (1024, 14336, 4096)]:
        assert tma_config_for(*mnk, True)[:3] == (128, 128, 64), mnk
    assert tma_config_for(512, 14336, 4096, False) is None    # NN: the 85 % rule only
    assert tma_config_for(128, 6144, 4096, True)[:3] == (64, 128, 128)
    assert tma_config_for(32, 14336, 4096, False)[:3] == (32, 64, 256)  # clipped to M
    # M <= 128 where 64x64 tiles make at most a wave (128 and 96 here): those, 6 stages.
    assert tma_config_for(128, 4096, 14336, True)[:6] == (64, 64, 128, 8, 4, 6)
    assert tma_config_for(64, 6144, 4096, False)[:6] == (64, 64, 128, 8, 4, 6)
    assert tma_config_for(128, 4288, 4096, True)[:3] == (64, 128, 128)    # 134 tiles: over
    # 64 < M <= 128, NT, where 128x128 tiles fill 60 % of the last wave or more: those, 5
    # stages (112, 96, 224 and 80 tiles); 48 tiles, or 144 (0.55 of two waves), or NN: not
    for mnk in [(128, 14336, 4096), (96, 14336, 4096), (128, 28672, 8192), (128, 10240, 8192)]:
        assert tma_config_for(*mnk, True)[:6] == (128, 128, 64, 8, 4, 5), mnk
        assert not tma_persistent(tma_config_for(*mnk, True))
        assert tma_config_for(*mnk, False)[:3] == (64, 128, 128), mnk
    for mnk in [(128, 6144, 4096), (112, 18432, 7168), (128, 9984, 4096)]:
        assert tma_config_for(*mnk, True)[:3] == (64, 128, 128), mnk


_FMA_BUILD = r"""
import json, sys
import opspec.kernels.gemm as G
import sm90_build as sm90

out = {}
for dt in ("bf16", "fp32"):
    block_k = G._GEMV_FMA_STEP_BYTES // {"bf16": 2, "fp32": 4}[dt]
    args = dict(a_ptr="*" + dt, b_ptr="*" + dt, c_ptr="*" + dt, N=14336, K=4096, stride_ak=1,
                stride_bn=4096, stride_cn=1)
    k = sm90.build(G._gemv_fma_kernel, args,
                   dict(BLOCK_N=G._GEMV_FMA_ROWS, BLOCK_K=block_k, EVEN_K=True, USE_INT64=False),
                   G._GEMV_FMA_WARPS, 1)
    out[dt] = {"local": k.local, "regs": k.registers, "in_flight": k.loads_in_flight(),
               "loads": [sm90.strip_hints(o) for o in k.loads]}
json.dump(out, sys.stdout)
"""


def test_gemv_fma_kernel_builds_for_sm90():
    """The M = 1 kernel's table launch (16 rows x 1 KiB of each a step, 4 warps) compiles
    for sm_90 with no spills, its weight read in 16-byte loads, all 8 of a thread's step
    in flight together (16 KiB a program: the bytes in flight that stream the weight)."""
    from sm90_build import run_script

    built = run_script(_FMA_BUILD)
    for dt, k in built.items():
        assert k["local"] == 0 and k["regs"] <= 168, (dt, k)
        assert k["loads"].count("ld.global.v4.b32") >= 8, (dt, k["loads"])
        assert k["in_flight"] >= 8, (dt, k)
