"""MoeGroupedGemmFwdOp: the Triton kernels against the torch reference, the reference against
a row-by-row definition, the MGroupedLayout classes, the op's checks, its `out` buffer,
compile boundary and workloads.

Without CUDA the Triton kernels run through Triton's interpreter on the CPU
(tests/conftest.py sets TRITON_INTERPRET=1 first), in float32 and float16 (the
interpreter's bfloat16 `tl.dot` is wrong); sizes are small. With CUDA the same tests run
the compiled kernels on the GPU, bfloat16 included (run this file alone there).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opspec.kernels.devices import TRITON_DEVICES, TRITON_INTERPRETED
from opspec.kernels.moe import (
    MoeConfig, moe_config_for, moe_grouped_gemm_reference, moe_grouped_gemm_triton,
)
from opspec.kernels.moe_impl import MoeGroupedGemmCall
from opspec.ops import MoeGroupedGemmFwdOp
from opspec.ops.moe_layout import Contiguous, Masked, as_layout
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError
from opspec.schema.values import ADTValue

from runtime_user_ops import expect_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OP = "MoeGroupedGemmFwdOp"
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
# float16 / float32 everywhere; bfloat16 tl.dot only on a GPU.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])

needs_triton = pytest.mark.skipif(DEVICE not in TRITON_DEVICES,
                                  reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _t(*shape, dtype=torch.float32, seed=0):
    # Scaled so that fp16 products stay well inside range.
    return (torch.randn(*shape, generator=_gen(seed)) * 0.5).to(dtype).to(DEVICE)


def _ids(*counts: int) -> torch.Tensor:
    """per_row metadata: expert e repeated counts[e] times."""
    return torch.tensor([e for e, n in enumerate(counts) for _ in range(n)],
                        dtype=torch.int32, device=DEVICE)


def _i32(*v: int) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32, device=DEVICE)


def _by_rows(x, w, expert_of_row, activation):
    """The definition, one row at a time: act(x[r] @ w[e]^T), 0 where e is None."""
    n = w.shape[1] // 2 if activation == "silu_and_mul" else w.shape[1]
    y = torch.zeros(x.shape[0], n, dtype=torch.float64)
    for r, e in enumerate(expert_of_row):
        if e is None:
            continue
        h = x[r].double().cpu() @ w[e].double().cpu().t()
        y[r] = F.silu(h[:n]) * h[n:] if activation == "silu_and_mul" else h
    return y


# ============================================================================ the reference

@pytest.mark.parametrize("activation", ["none", "silu_and_mul"])
def test_reference_is_the_row_by_row_definition(activation):
    K, N, E = 12, 8, 3
    x, w = _t(10, K, seed=1).cpu(), _t(E, N, K, seed=2).cpu()
    # per_row: every row computed with its expert (expert 1 has no rows)
    ids = [0, 0, 0, 0, 2, 2, 2, 2, 2, 2]
    got = moe_grouped_gemm_reference(x, w, torch.tensor(ids, dtype=torch.int32), "contiguous",
                                     "per_row", 2, activation)
    torch.testing.assert_close(got.double(), _by_rows(x, w, ids, activation), rtol=1e-5, atol=1e-5)
    # physical_psum, alignment 4: ends 3, 4, 9 -> expert 0 rows 0..2, expert 1 none
    # (its aligned start 4 is its end), expert 2 rows 4..8; rows 3 and 9 belong to none
    got = moe_grouped_gemm_reference(x, w, torch.tensor([3, 4, 9], dtype=torch.int32),
                                     "contiguous", "physical_psum", 4, activation)
    rows = [0, 0, 0, None, 2, 2, 2, 2, 2, None]
    torch.testing.assert_close(got.double(), _by_rows(x, w, rows, activation), rtol=1e-5, atol=1e-5)
    # masked: masked_m = 2, 0, 3 of max_m = 3
    xm = _t(E, 3, K, seed=3).cpu()
    got = moe_grouped_gemm_reference(xm, w, torch.tensor([2, 0, 3], dtype=torch.int32), "masked",
                                     activation=activation)
    for e, m in enumerate((2, 0, 3)):
        want = _by_rows(xm[e], w, [e] * m + [None] * (3 - m), activation)
        torch.testing.assert_close(got[e].double(), want, rtol=1e-5, atol=1e-5)


def test_reference_keeps_the_dtype_and_float64():
    x, w = _t(4, 8, dtype=torch.float16).cpu(), _t(2, 6, 8, dtype=torch.float16).cpu()
    assert moe_grouped_gemm_reference(x, w, _ids(2, 2).cpu(), "contiguous").dtype == torch.float16
    y = moe_grouped_gemm_reference(x.double(), w.double(), _ids(2, 2).cpu(), "contiguous")
    assert y.dtype == torch.float64


# ============================================================================ the kernels

# (name, kind, metadata_kind, alignment, x shape, metadata, E): empty experts, tiles that
# hold several experts (tight packing, alignment below the 16-row tile), padding rows,
# rows past the last end, masked_m of 0 and of max_m.
LAYOUTS = [
    ("per-row-a16", "contiguous", "per_row", 16, (64,), lambda: _ids(32, 0, 32), 3),
    ("per-row-tight", "contiguous", "per_row", 1, (37,), lambda: _ids(5, 0, 17, 15), 4),
    ("psum-a16-padding", "contiguous", "physical_psum", 16, (80,), lambda: _i32(10, 16, 16, 70), 4),
    ("psum-tight", "contiguous", "physical_psum", 1, (50,), lambda: _i32(7, 7, 33, 50), 4),
    # tight with rows past the last end (zeroed) and empty first experts
    ("psum-tight-tail", "contiguous", "physical_psum", 1, (45,), lambda: _i32(0, 0, 20, 38), 4),
    ("masked", "masked", "", 1, (3, 20), lambda: _i32(20, 0, 5), 3),
    ("masked-m1", "masked", "", 1, (2, 1), lambda: _i32(1, 0), 2),
]


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ["none", "silu_and_mul"])
@pytest.mark.parametrize("name,kind,mk,align,rows,meta,E", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_triton_matches_reference(name, kind, mk, align, rows, meta, E, activation, dtype):
    K, N = 40, 34  # K: one full block and a tail; N_out 17 or 34, not a power of two
    x, w, metadata = _t(*rows, K, dtype=dtype, seed=4), _t(E, N, K, dtype=dtype, seed=5), meta()
    want = moe_grouped_gemm_reference(x, w, metadata, kind, mk, align, activation)
    out = torch.full_like(want, 7.0)  # every element is written
    got = moe_grouped_gemm_triton(x, w, metadata, out, kind, mk, align, activation)
    assert got is out
    torch.testing.assert_close(got, want, **TOL[dtype])


@needs_triton
def test_triton_strided_operands_and_output():
    K, N, E = 24, 16, 2
    base = _t(32, 2 * K, seed=6)
    x = base[:, ::2]  # column stride 2
    w = _t(E, K, N, seed=7).transpose(1, 2)  # stored [E, K, N]: w[e] is [N, K] with K strided
    out_base = torch.zeros(N, 32, device=DEVICE)
    out = out_base.t()  # [32, N], column-major
    ids = _ids(16, 16)
    want = moe_grouped_gemm_reference(x, w, ids, "contiguous", "per_row", 16)
    moe_grouped_gemm_triton(x, w, ids, out, "contiguous", "per_row", 16)
    torch.testing.assert_close(out, want, **TOL[torch.float32])
    xm = _t(E, 8, 2 * K, seed=8)[:, :, K:]  # a slice of a wider tensor
    cnt = _i32(3, 8)
    want = moe_grouped_gemm_reference(xm, w, cnt, "masked", activation="silu_and_mul")
    got = moe_grouped_gemm_triton(xm, w, cnt, torch.empty_like(want), "masked",
                                  activation="silu_and_mul")
    torch.testing.assert_close(got, want, **TOL[torch.float32])


@needs_triton
def test_triton_zero_k_and_empty_outputs():
    w0 = _t(2, 6, 0)
    out = torch.full((4, 6), 7.0, device=DEVICE)
    moe_grouped_gemm_triton(_t(4, 0), w0, _ids(2, 2), out, "contiguous", "per_row", 2)
    assert torch.count_nonzero(out) == 0  # an empty sum is 0
    empty = torch.empty(0, 6, device=DEVICE)
    assert moe_grouped_gemm_triton(_t(0, 8), _t(2, 6, 8), _ids(), empty, "contiguous") is empty


@needs_triton
def test_triton_forced_configs_and_tiles_spanning_experts():
    # 32-row tiles over alignment-8 segments: each tile holds up to 4 experts.
    K, N, E = 32, 32, 6
    x, w, ids = _t(48, K, seed=9), _t(E, N, K, seed=10), _ids(8, 8, 0, 16, 8, 8)
    want = moe_grouped_gemm_reference(x, w, ids, "contiguous", "per_row", 8, "silu_and_mul")
    for cfg in (MoeConfig(32, 16, 16, 2, 4, 2), MoeConfig(16, 16, 32, 1, 4, 2)):
        got = moe_grouped_gemm_triton(x, w, ids, torch.empty_like(want), "contiguous", "per_row",
                                      8, "silu_and_mul", config=cfg)
        torch.testing.assert_close(got, want, **TOL[torch.float32])


def test_triton_rejects_mixed_dtypes():
    with pytest.raises(TypeError, match="share a dtype"):
        moe_grouped_gemm_triton(torch.zeros(4, 8), torch.zeros(2, 6, 8, dtype=torch.float16),
                                _ids(2, 2).cpu(), torch.zeros(4, 6), "contiguous")


def test_config_table():
    bf = torch.bfloat16
    # aligned packing: the tile never spans experts
    for align in (16, 32, 64, 128, 256, 1024):
        cfg = moe_config_for("contiguous", align, 0, 4096, 7168, bf, False)
        assert align % cfg.block_m == 0
    assert moe_config_for("contiguous", 128, 0, 2048, 7168, bf, True).block_m == 128
    assert moe_config_for("contiguous", 128, 0, 7168, 2048, bf, False).block_n == 256
    assert moe_config_for("contiguous", 1, 0, 768, 2048, bf, True).block_m == 64
    assert moe_config_for("contiguous", 64, 0, 4096, 14336, bf, False)[:3] == (64, 256, 64)
    assert moe_config_for("contiguous", 64, 0, 14336, 4096, bf, True).num_warps == 8
    assert moe_config_for("contiguous", 1, 0, 768, 2048, bf, True, segments=True).block_m == 128
    # the TMA path: the table's span tiles are off, so alignment 16..64 keeps 64 x 256
    # tiles of one expert; tight packing with expert ends keeps the segments kernel's
    # tiles at 3 stages, the alignment-128 TMA tiles take 4
    mid = moe_config_for("contiguous", 64, 0, 14336, 4096, bf, True, tma=True)
    assert (mid.kernel, mid[:3]) == ("tile", (64, 256, 64))
    seg = moe_config_for("contiguous", 1, 0, 768, 2048, bf, True, True)
    assert (seg.kernel, seg.num_stages) == ("tile", 3)
    seg = moe_config_for("contiguous", 1, 0, 768, 2048, bf, True, True, tma=True)
    assert (seg.kernel, seg.block_m, seg.num_stages) == ("tile", 128, 4)
    big = moe_config_for("contiguous", 128, 0, 2048, 7168, bf, True, tma=True)
    assert (big.block_m, big.num_stages) == (128, 4)


def test_config_table_span_tiles(monkeypatch):
    # With span tiles in the table, alignment 16..64 with silu_and_mul on the TMA path takes
    # them where segments are long enough; short segments (M / E rows) keep the 64-row
    # tiles of one expert, and so does every call off the TMA path.
    import opspec.kernels.moe as moe
    monkeypatch.setattr(moe, "_SPAN_SILU", MoeConfig(128, 128, 64, 8, 8, 3, "span"))
    bf = torch.bfloat16
    span = moe_config_for("contiguous", 64, 0, 14336, 4096, bf, True, tma=True)
    assert span.kernel in ("span", "span_persistent") and span.block_m == 128
    assert moe_config_for("contiguous", 64, 0, 14336, 4096, bf, True).kernel == "tile"
    for rows, kernel in ((512, "span"), (256, "span"), (128, "tile")):
        cfg = moe_config_for("contiguous", 64, 0, 14336, 4096, bf, True, tma=True,
                             rows_per_expert=rows)
        assert (cfg.kernel != "tile") == (kernel == "span"), (rows, cfg)
    assert moe_config_for("contiguous", 16, 0, 14336, 4096, bf, True, tma=True,
                          rows_per_expert=256).kernel == "tile"
    # masked: at most max_m rounded up to a power of two (16 at least)
    assert moe_config_for("masked", 1, 8, 4096, 7168, bf, False).block_m == 16
    assert moe_config_for("masked", 1, 256, 4096, 7168, bf, False).block_m == 64
    assert moe_config_for("contiguous", 128, 0, 64, 7168, torch.float32, False).block_n == 64  # fp32: 3xTF32 tiles


# ============================================================================ the layout classes

def test_layout_classes_and_conversions():
    c = Contiguous(packing="aligned", metadata_kind="per_row", alignment=128)
    m = Masked(max_m=64)
    assert (c.kind, m.kind) == ("contiguous", "masked")
    with pytest.raises(AttributeError):
        c.alignment = 64  # frozen
    assert as_layout(c) is c
    assert as_layout({"masked": {"max_m": 64}}) == m
    assert as_layout(ADTValue.of("MGroupedLayout", "contiguous", {
        "packing": "aligned", "metadata_kind": "per_row", "alignment": 128})) == c


def test_op_takes_every_form_of_the_layout():
    for layout in (Masked(4), {"masked": {"max_m": 4}},
                   ADTValue.of("MGroupedLayout", "masked", {"max_m": 4})):
        op = MoeGroupedGemmFwdOp(layout)
        y = op(_t(2, 4, 8).cpu(), _t(2, 6, 8).cpu(), _i32(1, 4).cpu())
        assert y.shape == (2, 4, 6) and op._layout == Masked(4)


# ============================================================================ the op

def test_dispatch():
    op = MoeGroupedGemmFwdOp(Masked(8))
    cpu = torch.device("cpu")
    tri = "cpu" in TRITON_DEVICES
    for kind, key in (("contiguous", "moe_contiguous_triton"), ("masked", "moe_masked_triton")):
        call = MoeGroupedGemmCall(kind, "", 1, 8, 2, 8, 8, "float16", "none", device=cpu)
        assert op.key_for("moe_grouped_gemm", call) == (key if tri else "moe_grouped_gemm_reference")
    # the interpreter's bfloat16 tl.dot is wrong: the reference serves bfloat16 there
    call = MoeGroupedGemmCall("masked", "", 1, 8, 2, 8, 8, "bfloat16", "none", device=cpu)
    bf16 = "moe_masked_triton" if tri and not TRITON_INTERPRETED else "moe_grouped_gemm_reference"
    assert op.key_for("moe_grouped_gemm", call) == bf16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout,rows,meta", [
    (Contiguous("aligned", "per_row", 16), (48,), lambda: _ids(16, 0, 32)),
    (Contiguous("aligned", "physical_psum", 16), (48,), lambda: _i32(5, 16, 40)),
    (Contiguous("tight", "physical_psum", 1), (21,), lambda: _i32(0, 9, 21)),
    (Masked(max_m=12), (3, 12), lambda: _i32(12, 0, 7)),
], ids=["per-row", "psum-aligned", "psum-tight", "masked"])
def test_op_results_and_the_out_buffer(layout, rows, meta, dtype):
    K, N, E = 20, 12, 3
    x, w, metadata = _t(*rows, K, dtype=dtype, seed=11), _t(E, N, K, dtype=dtype, seed=12), meta()
    lay = as_layout(layout)
    args = (("masked", "", 1) if lay.kind == "masked"
            else ("contiguous", lay.metadata_kind, lay.alignment))
    op = MoeGroupedGemmFwdOp(layout, activation="silu_and_mul")
    want = moe_grouped_gemm_reference(x, w, metadata, *args, activation="silu_and_mul")
    y = op(x, w, metadata)
    assert y.shape == (*rows, N // 2) and y.dtype == dtype
    torch.testing.assert_close(y, want, **TOL[dtype])
    # out=: the result is written there and the very object comes back
    out = torch.full((*rows, N // 2), 7.0, dtype=dtype, device=DEVICE)
    assert op(x, w, metadata, out=out) is out
    torch.testing.assert_close(out, want, **TOL[dtype])
    rec = op.last_call
    assert rec.has_out and rec.written == ()
    R = rows[0] * rows[1] if lay.kind == "masked" else rows[0]
    assert rec.indices["R"] == R and rec.indices["N_out"] == N // 2
    flops, nbytes = op.eval_roofline()
    assert flops == 2 * R * N * K + 6 * R * (N // 2)
    size = dtype.itemsize
    assert nbytes == (x.numel() + w.numel() + R * (N // 2)) * size + metadata.numel() * 4


def test_op_out_buffer_may_be_a_strided_view():
    op = MoeGroupedGemmFwdOp(Contiguous("aligned", "per_row", 4))
    x, w, ids = _t(8, 8), _t(2, 6, 8), _ids(4, 4)
    base = torch.zeros(6, 8, device=DEVICE)
    out = base.t()
    assert op(x, w, ids, out=out) is out
    torch.testing.assert_close(out, moe_grouped_gemm_reference(x, w, ids, "contiguous", "per_row", 4),
                               **TOL[torch.float32])


def test_op_empty_calls():
    op = MoeGroupedGemmFwdOp(Contiguous("aligned", "per_row", 16))
    y = op(torch.empty(0, 8), torch.randn(2, 6, 8), torch.empty(0, dtype=torch.int32))
    assert y.shape == (0, 6)
    out = torch.empty(0, 6)
    assert op(torch.empty(0, 8), torch.randn(2, 6, 8), torch.empty(0, dtype=torch.int32),
              out=out) is out
    # masked with no valid rows anywhere: zeros
    y = MoeGroupedGemmFwdOp(Masked(4))(_t(2, 4, 8), _t(2, 6, 8), _i32(0, 0))
    assert torch.count_nonzero(y) == 0


def _call_error(op, *args, **kwargs):
    with pytest.raises((SignatureError, SignatureTypeError)) as ei:
        op(*args, **kwargs)
    return ei


def test_op_rejects_calls_that_break_the_spec():
    op = MoeGroupedGemmFwdOp(Contiguous("aligned", "per_row", 4), activation="silu_and_mul")
    x, w, ids = _t(8, 8).cpu(), _t(2, 6, 8).cpu(), _ids(4, 4).cpu()
    ei = _call_error(op, x[:6], w, ids[:6])
    expect_error(ei, SignatureError, OP, "signature.shape_rules.2",
                 "refinement `M % layout.alignment == 0`", "M=6")
    ei = _call_error(op, x, _t(2, 5, 8).cpu(), ids)
    expect_error(ei, SignatureError, OP, "signature.shape_rules.1", "refinement `N % 2 == 0`",
                 "N=5")
    ei = _call_error(op, x, _t(0, 6, 8).cpu(), ids)
    expect_error(ei, SignatureError, OP, "signature.shape_rules.0", "refinement `E >= 1`", "E=0")
    ei = _call_error(op, x, w, ids.long())
    expect_error(ei, SignatureError, OP, "signature.inputs.metadata.dtype",
                 "expected int32, got int64")
    ei = _call_error(op, x, w, ids[:4])
    expect_error(ei, SignatureError, OP, "signature.inputs.x.shape",
                 "axis 0 of Rows[layout, M, E, K]", "expected M = 4", "got 8")
    ei = _call_error(op, x, w.half(), ids)
    expect_error(ei, SignatureError, OP, "signature.inputs.x.dtype",
                 "expected T = float16 (from input w), got float32")
    ei = _call_error(op, x, w, ids, out=torch.empty(8, 6))
    expect_error(ei, SignatureError, OP, "signature.outputs.y.buffer",
                 "expected shape (8, 3), got shape (8, 6)")
    masked = MoeGroupedGemmFwdOp(Masked(4))
    ei = _call_error(masked, _t(2, 3, 8).cpu(), w, _i32(1, 1).cpu())
    expect_error(ei, SignatureError, OP, "signature.inputs.x.shape",
                 "expected layout.max_m = 4, got 3")
    ei = _call_error(masked, _t(2, 4, 8).cpu(), w, _i32(1, 1, 1).cpu())
    expect_error(ei, SignatureError, OP, "signature.inputs.w.shape",
                 "expected E = 3 (from input metadata), got 2")
    ei = _call_error(masked, _t(8, 8).cpu(), w, _i32(1, 1).cpu())
    expect_error(ei, SignatureError, OP, "signature.inputs.x.shape", "expected 3, got 2")


@pytest.mark.parametrize("layout,broken", [
    (Contiguous("aligned", "per_row", 3), "constructor `contiguous`"),  # not a power of two
    (Contiguous("aligned", "per_row", 1), "constructor `contiguous`"),  # aligned needs > 1
    (Contiguous("tight", "physical_psum", 128), "constructor `contiguous`"),  # tight is 1
    (Contiguous("aligned", "per_row", 2048), "constructor `contiguous`"),  # over 1024
    (Masked(0), "invariant `max_m >= 1` of constructor `masked`"),
])
def test_op_construction_checks_the_layout_invariant(layout, broken):
    with pytest.raises(SignatureError) as ei:
        MoeGroupedGemmFwdOp(layout)
    expect_error(ei, SignatureError, OP, "signature.params.layout",
                 "parameter `layout` has type `MGroupedLayout`", "which breaks the invariant",
                 broken)


def test_op_construction_checks():
    with pytest.raises(SignatureError) as ei:
        MoeGroupedGemmFwdOp(Contiguous("padded", "per_row", 128))  # not a packing
    msg = expect_error(ei, SignatureError, OP, "signature.params.layout",
                       "parameter `layout` has type `MGroupedLayout`")
    assert "invariant" not in msg
    with pytest.raises(SignatureError) as ei:
        MoeGroupedGemmFwdOp(Masked(4), activation="gelu")
    expect_error(ei, SignatureError, OP, "signature.params.activation",
                 "parameter `activation` has type `'none' | 'silu_and_mul'`; got 'gelu'")
    with pytest.raises(SignatureTypeError):
        MoeGroupedGemmFwdOp("masked")
    with pytest.raises(TypeError):
        MoeGroupedGemmFwdOp(Masked(4), "silu_and_mul")  # activation is keyword-only


# ============================================================================ compile boundary

def test_opcheck():
    assert MoeGroupedGemmFwdOp.compile_op_names == (
        "opspec::moe_grouped_gemm_fwd_op", "opspec::moe_grouped_gemm_fwd_op_out")
    plain = torch.ops.opspec.moe_grouped_gemm_fwd_op.default
    with_out = torch.ops.opspec.moe_grouped_gemm_fwd_op_out.default
    op = MoeGroupedGemmFwdOp(Contiguous("aligned", "physical_psum", 4), activation="silu_and_mul")
    x, w, ends = _t(8, 8).cpu(), _t(2, 6, 8).cpu(), _i32(3, 8).cpu()
    torch.library.opcheck(plain, (x, w, ends, op._opspec_key))
    masked = MoeGroupedGemmFwdOp(Masked(4))
    xm, cnt = _t(2, 4, 8).cpu(), _i32(2, 4).cpu()
    torch.library.opcheck(with_out, (xm, w, cnt, torch.empty(2, 4, 6), masked._opspec_key),
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = MoeGroupedGemmFwdOp(Contiguous("aligned", "per_row", 4), activation="silu_and_mul")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    def layer(x, w, ids, out):
        return op(x, w, ids, out=out) * 2.0

    fn = torch.compile(layer, backend=backend, fullgraph=True)
    x, w, ids = _t(8, 8).cpu(), _t(2, 6, 8).cpu(), _ids(4, 4).cpu()
    out = torch.zeros(8, 3)
    got = fn(x, w, ids, out)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("moe_grouped_gemm_fwd_op_out" in t for t in targets)
    want = moe_grouped_gemm_reference(x, w, ids, "contiguous", "per_row", 4, "silu_and_mul")
    torch.testing.assert_close(out, want, **TOL[torch.float32])  # the caller's buffer
    torch.testing.assert_close(got, 2 * want, **TOL[torch.float32])


# ============================================================================ workloads

def test_workload_cases_instantiate_on_meta():
    all_cases = cases(MoeGroupedGemmFwdOp)
    ids = [c.id for c in all_cases]
    assert len(ids) == len(set(ids)) == 13
    large = []
    for c in all_cases:
        op = c.construct(MoeGroupedGemmFwdOp)
        x, w, metadata = c.inputs("meta")
        ind = op.check_call(x, w, metadata)
        lay = op._layout
        R = ind["E"] * lay.max_m if lay.kind == "masked" else ind["M"]
        assert ind["R"] == R and tuple(w.shape) == (ind["E"], ind["N"], ind["K"])
        nbytes = (x.numel() + w.numel() + R * ind["N_out"]) * 2 + metadata.numel() * 4
        if nbytes >= 256 * 2**20:
            large.append(c.label)
    assert {"dsv3-gate-up-prefill", "dsv3-down-prefill", "dsv3-gate-up-decode",
            "mixtral-gate-up-prefill"} <= set(large)


def test_workload_metadata_follows_the_layout():
    by_id = {c.id: c for c in cases(MoeGroupedGemmFwdOp)}
    x, w, ids = by_id["dsv3-gate-up-prefill-bfloat16"].inputs("meta")
    assert ids.shape == (8192,) and ids.dtype == torch.int32  # per_row: one id per row
    c = by_id["qwen3-30b-ep16-down-bfloat16"]
    x, w, ends = c.inputs("cpu")
    assert x.shape == (2048, 768) and ends.shape == (8,) and ends.dtype == torch.int32
    ends = ends.tolist()
    assert ends == sorted(ends) and ends[-1] <= 2048
    x, w, cnt = by_id["qwen3-30b-ep16-decode-float32"].inputs("cpu")
    assert x.shape == (8, 64, 2048) and all(0 <= m <= 64 for m in cnt.tolist())


# ============================================================================ TMA kernels, sm_90 build

@needs_triton
@pytest.mark.parametrize("activation", ["none", "silu_and_mul"])
def test_tma_kernels_match_reference(activation):
    # Interpreted here (fp16); routed to on Hopper GPUs. N_OUT and K not multiples of the
    # tiles (zero-filled loads, clipped stores); max_m 20 over 16-row tiles.
    K, N, E = 40, 48, 3
    cfg = MoeConfig(16, 16, 16, 2, 4, 2)
    x, w = _t(64, K, dtype=torch.float16, seed=13), _t(E, N, K, dtype=torch.float16, seed=14)
    for mk, meta in (("per_row", _ids(32, 0, 32)), ("physical_psum", _i32(10, 32, 60))):
        want = moe_grouped_gemm_reference(x, w, meta, "contiguous", mk, 16, activation)
        got = moe_grouped_gemm_triton(x, w, meta, torch.full_like(want, 7.0), "contiguous", mk,
                                      16, activation, config=cfg, tma=True)
        torch.testing.assert_close(got, want, **TOL[torch.float16])
    xm, cnt = _t(E, 20, K, dtype=torch.float16, seed=15), _i32(20, 0, 17)
    want = moe_grouped_gemm_reference(xm, w, cnt, "masked", activation=activation)
    got = moe_grouped_gemm_triton(xm, w, cnt, torch.full_like(want, 7.0), "masked",
                                  activation=activation, config=cfg, tma=True)
    torch.testing.assert_close(got, want, **TOL[torch.float16])


def _record_launches(monkeypatch) -> list:
    """The kernels opspec.kernels.moe launches from now on, in order (each still runs)."""
    import opspec.kernels.moe as moe_mod

    launched, real_launch = [], moe_mod.launch

    def spy(kernel, grid, *args, **kwargs):
        launched.append(kernel)
        return real_launch(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(moe_mod, "launch", spy)
    return launched


@needs_triton
@pytest.mark.parametrize("activation", ["none", "silu_and_mul"])
def test_segments_tma_kernel_matches_reference(activation, monkeypatch):
    # Tight packing with expert ends (the segments tiles, x and w through descriptors):
    # segments of 10, 0 (an empty expert), 23 and 1 rows over 16-row tiles, rows past the
    # last end zeroed; N_OUT and K not multiples of the tiles; x and out row-strided views.
    import opspec.kernels.moe as moe_mod
    K, N, E = 40, 48, 4
    x = _t(70, K + 8, dtype=torch.float16, seed=21)[:, 8:]
    w = _t(E, N, K, dtype=torch.float16, seed=22)
    meta = _i32(10, 10, 33, 34)
    cfg = MoeConfig(16, 16, 16, 2, 4, 2)
    want = moe_grouped_gemm_reference(x, w, meta, "contiguous", "physical_psum", 1, activation)
    out_base = torch.full((70, want.shape[1] + 8), 7.0, dtype=torch.float16, device=DEVICE)
    out = out_base[:, 8:]
    launched = _record_launches(monkeypatch)
    got = moe_grouped_gemm_triton(x, w, meta, out, "contiguous", "physical_psum", 1,
                                  activation, config=cfg, tma=True)
    assert launched == [moe_mod._moe_segments_tma_kernel] and got is out
    torch.testing.assert_close(got, want, **TOL[torch.float16])
    assert (out[34:] == 0).all() and (out_base[:, :8] == 7).all()


# Span kernel: TMA tiles that may hold rows of several experts (the table's choice for
# alignments 16..64 with silu_and_mul on Hopper). Interpreted here in float16.
SPAN_LAYOUTS = [  # (name, metadata_kind, alignment, rows, metadata)
    # 32-row tiles over 16-aligned segments: tiles of two experts, an empty expert between
    ("per_row-16", "per_row", 16, 96, lambda: _ids(16, 48, 0, 32)),
    # ends with padding rows between experts and rows of no expert past the last end
    ("psum-16", "physical_psum", 16, 96, lambda: _i32(10, 40, 40, 70)),
    # tight packing: segments anywhere, up to 3 experts in a tile
    ("psum-tight", "physical_psum", 1, 90, lambda: _i32(7, 30, 30, 61)),
    ("per_row-tight", "per_row", 1, 90, lambda: _ids(5, 20, 0, 65)),
    # one expert only: every tile of one expert (the descriptor store)
    ("per_row-one", "per_row", 16, 96, lambda: _ids(0, 0, 96, 0)),
]


@needs_triton
@pytest.mark.parametrize("kernel", ["span", "span_persistent"])
@pytest.mark.parametrize("tma_store", [True, False])
@pytest.mark.parametrize("activation", ["none", "silu_and_mul"])
@pytest.mark.parametrize("name,mk,align,rows,meta", SPAN_LAYOUTS, ids=[c[0] for c in SPAN_LAYOUTS])
def test_span_kernels_match_reference(name, mk, align, rows, meta, activation, tma_store,
                                      kernel, monkeypatch):
    import opspec.kernels.moe as moe_mod
    # persistent: 3 programs walk the tiles (the tile loop runs several times)
    monkeypatch.setattr(moe_mod, "sm_count", lambda device: 3)
    K, N, E = 40, 48, 4  # K: full blocks and a tail; N_out 24 or 48: a partial N tile
    x = _t(rows, K, dtype=torch.float16, seed=16)
    w = _t(E, N, K, dtype=torch.float16, seed=17)
    metadata = meta()
    cfg = MoeConfig(32, 16, 16, 2, 4, 2, kernel, tma_store)
    want = moe_grouped_gemm_reference(x, w, metadata, "contiguous", mk, align, activation)
    got = moe_grouped_gemm_triton(x, w, metadata, torch.full_like(want, 7.0), "contiguous", mk,
                                  align, activation, config=cfg, tma=True)
    torch.testing.assert_close(got, want, **TOL[torch.float16])


@needs_triton
def test_span_kernel_table_choice_strided_views_and_fallbacks(monkeypatch):
    # A span configuration in the table (off by default: see _SPAN_SILU) chosen for
    # 128-row tiles over alignment-64 segments of 256 rows on average, a boundary inside a
    # tile; x and out row-strided views of wider buffers.
    import opspec.kernels.moe as moe_mod
    monkeypatch.setattr(moe_mod, "_SPAN_SILU", MoeConfig(128, 128, 64, 8, 8, 3, "span"))
    K, N, E = 72, 96, 2
    base = _t(512, K + 8, dtype=torch.float16, seed=18)
    x = base[:, 8:]  # row stride K + 8 (16-byte aligned), offset base
    w = _t(E, N, K, dtype=torch.float16, seed=19)
    ids = _ids(192, 320)
    want = moe_grouped_gemm_reference(x, w, ids, "contiguous", "per_row", 64, "silu_and_mul")
    out_base = torch.full((512, 64), 7.0, dtype=torch.float16, device=DEVICE)
    out = out_base[:, 8:56]
    cfg = moe_config_for("contiguous", 64, 0, N // 2, K, torch.float16, True, tma=True,
                         rows_per_expert=512 / E)
    assert cfg.kernel == "span" and cfg.block_m == 128
    launched = _record_launches(monkeypatch)
    got = moe_grouped_gemm_triton(x, w, ids, out, "contiguous", "per_row", 64,
                                  "silu_and_mul", tma=True)
    assert launched == [moe_mod._moe_span_tma_kernel]
    assert got is out
    torch.testing.assert_close(got, want, **TOL[torch.float16])
    assert (out_base[:, :8] == 7).all() and (out_base[:, 56:] == 7).all()
    # A span configuration off the TMA path (float32, a column-strided x): the pointer
    # kernel with the same tiles, one K loop per expert of a tile.
    span = MoeConfig(32, 16, 16, 2, 4, 2, "span")
    for xx, ww in ((x.float(), w.float()), (_t(512, 2 * K, seed=20)[:, ::2], w.float())):
        want = moe_grouped_gemm_reference(xx, ww, ids, "contiguous", "per_row", 16, "silu_and_mul")
        got = moe_grouped_gemm_triton(xx, ww, ids, torch.empty_like(want), "contiguous",
                                      "per_row", 16, "silu_and_mul", config=span)
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    with pytest.raises(ValueError, match="float16/bfloat16"):
        moe_grouped_gemm_triton(x.float(), w.float(), ids, torch.empty_like(want), "contiguous",
                                "per_row", 16, config=span, tma=True)
    # empty: no rows
    empty = torch.empty(0, 48, dtype=torch.float16, device=DEVICE)
    assert moe_grouped_gemm_triton(_t(0, K, dtype=torch.float16), w, _ids(), empty, "contiguous",
                                   "per_row", 64, config=span, tma=True) is empty


def test_tma_refuses_what_it_cannot_serve():
    x, w = torch.zeros(32, 8, dtype=torch.float16), torch.zeros(2, 8, 8, dtype=torch.float16)
    out = torch.zeros(32, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="one expert"):  # tight packing: tiles span experts
        moe_grouped_gemm_triton(x, w, _ids(16, 16).cpu(), out, "contiguous", "per_row", 1,
                                tma=True)
    with pytest.raises(ValueError, match="16-byte aligned"):  # 6-byte rows
        moe_grouped_gemm_triton(torch.zeros(32, 3, dtype=torch.float16),
                                torch.zeros(2, 8, 3, dtype=torch.float16), _ids(16, 16).cpu(),
                                out, "contiguous", "per_row", 16, tma=True)


_SM90_SCRIPT = r"""
import json, triton, torch
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import opspec.kernels.moe as K

def ptx(fn, sig, cexpr, cfg):
    # PDL left at its default, as a launch off sm_90+ CUDA (opspec.kernels.pdl)
    cexpr = {"PDL": False, **cexpr}
    # as a launch specialises them: pointers and the (multiple of 16) strides 16-divisible
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if sig.get(n, "").startswith("*") or (n.startswith("stride") and n in sig)}
    sig = {**sig, **{k: "constexpr" for k in cexpr}}
    src = ASTSource(fn=fn, signature=sig, constexprs=cexpr, attrs=attrs)
    text = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg.num_warps,
                                   "num_stages": cfg.num_stages}).asm["ptx"]
    return {"wgmma": text.count("wgmma.mma_async"), "bulk": text.count("cp.async.bulk.tensor"),
            "cp_async": text.count("cp.async.cg.shared.global"), "local": text.count(".local")}

bf = torch.bfloat16
c = K.moe_config_for("contiguous", 128, 0, 2048, 7168, bf, True)
out = {"contiguous-tma": ptx(K._moe_contiguous_tma_kernel, dict(
    x_desc=f"tensordesc<bf16[{c.block_m},{c.block_k}]>",
    w_desc=f"tensordesc<bf16[1,{c.block_n},{c.block_k}]>", meta_ptr="*i32",
    y_desc=f"tensordesc<bf16[{c.block_m},{c.block_n}]>", M="i32", N_OUT="i32", K="i32",
    E="i32", ALIGN="i32"), dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
                                BLOCK_E=32, LOG_E=5, GROUP_M=c.group_m, PER_ROW=True,
                                SILU=True, STAGES=c.num_stages), c)}
c = K.moe_config_for("contiguous", 64, 0, 14336, 4096, bf, True, tma=True)
for kern in ("span", "span_persistent"):
    out[kern] = ptx(K._moe_span_tma_kernel, dict(
        x_desc=f"tensordesc<bf16[{c.block_m},{c.block_k}]>",
        w_desc=f"tensordesc<bf16[1,{c.block_n},{c.block_k}]>", meta_ptr="*i32",
        y_desc=f"tensordesc<bf16[{c.block_m},{c.block_n}]>", y_ptr="*bf16", stride_ym="i32",
        M="i32", N_OUT="i32", K="i32", E="i32", ALIGN="i32"),
        dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, BLOCK_E=8, LOG_E=3,
             GROUP_M=c.group_m, PER_ROW=True, SILU=True, STAGES=c.num_stages,
             TMA_STORE=c.tma_store, PERSISTENT=kern == "span_persistent"), c)
c = K.moe_config_for("contiguous", 1, 0, 768, 2048, bf, True)
out["contiguous-tight"] = ptx(K._moe_contiguous_kernel, dict(
    x_ptr="*bf16", w_ptr="*bf16", meta_ptr="*i32", y_ptr="*bf16", M="i32", N_OUT="i32",
    K="i32", E="i32", ALIGN="i32", stride_xm="i32", stride_we="i32", stride_wn="i32",
    stride_ym="i32"), dict(stride_xk=1, stride_wk=1, stride_yn=1, BLOCK_M=c.block_m,
    BLOCK_N=c.block_n, BLOCK_K=c.block_k, BLOCK_E=128, LOG_E=7, GROUP_M=c.group_m,
    PER_ROW=False, ONE_EXPERT=False, SILU=True, EVEN_K=True, USE_INT64=False,
    INPUT_PRECISION="tf32"), c)
c = K.moe_config_for("contiguous", 1, 0, 768, 2048, bf, True, True)
out["segments"] = ptx(K._moe_segments_kernel, dict(
    x_ptr="*bf16", w_ptr="*bf16", meta_ptr="*i32", y_ptr="*bf16", M="i32", N_OUT="i32",
    K="i32", E="i32", stride_xm="i32", stride_we="i32", stride_wn="i32", stride_ym="i32"),
    dict(stride_xk=1, stride_wk=1, stride_yn=1, BLOCK_M=c.block_m, BLOCK_N=c.block_n,
         BLOCK_K=c.block_k, BLOCK_E=128, SILU=True, EVEN_K=True, USE_INT64=False,
         INPUT_PRECISION="tf32"), c)
c = K.moe_config_for("contiguous", 1, 0, 768, 2048, bf, True, True, tma=True)
out["segments-tma"] = ptx(K._moe_segments_tma_kernel, dict(
    x_desc=f"tensordesc<bf16[{c.block_m},{c.block_k}]>",
    w_desc=f"tensordesc<bf16[1,{c.block_n},{c.block_k}]>", meta_ptr="*i32", y_ptr="*bf16",
    stride_ym="i32", M="i32", N_OUT="i32", K="i32", E="i32"),
    dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, BLOCK_E=128, SILU=True,
         STAGES=c.num_stages, USE_INT64=False), c)
m = K.moe_config_for("masked", 1, 128, 2048, 7168, bf, True)
out["masked"] = ptx(K._moe_masked_kernel, dict(
    x_ptr="*bf16", w_ptr="*bf16", meta_ptr="*i32", y_ptr="*bf16", MAX_M="i32",
    N_OUT="i32", K="i32", stride_xe="i32", stride_xm="i32", stride_we="i32",
    stride_wn="i32", stride_ye="i32", stride_ym="i32"),
    dict(stride_xk=1, stride_wk=1, stride_yn=1, BLOCK_M=m.block_m, BLOCK_N=m.block_n,
         BLOCK_K=m.block_k, SILU=True, EVEN_K=True, USE_INT64=False,
         INPUT_PRECISION="tf32"), m)
print(json.dumps(out))
"""


def test_sm90_build_uses_wgmma_and_no_local_memory():
    """The table's prefill and decode configurations compile for sm_90 (no GPU needed):
    tensor-core wgmma, bulk tensor copies (TMA) or cp.async, no local memory. Compiled in
    a fresh process: under the interpreter, triton.language is patched."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _SM90_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    built = json.loads(res.stdout)
    for name, k in built.items():
        assert k["wgmma"] and k["local"] == 0, (name, k)
    for name in ("contiguous-tma", "span", "span_persistent", "segments-tma"):
        assert built[name]["bulk"], (name, built[name])
    for name in ("contiguous-tight", "segments", "masked"):
        assert built[name]["cp_async"], (name, built[name])
