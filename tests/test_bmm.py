"""The bmm family: BmmFwdOp (torch.bmm).

Kernel: the Triton batched GEMM against the torch reference, on the CPU through Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1 without CUDA), in float32, float16
and bfloat16 (under the interpreter bfloat16 tiles are widened before the dot, whose
bfloat16 form the interpreter gets wrong), odd sizes, several tiles and a K tail (forced
small tiles), transposed, sliced and broadcast (stride 0) operands, strided outputs and
empty tensors. Op: results against torch.bmm, the `out=` buffer, errors that name the
declaration they break, the roofline, dispatch, the compile boundary (opcheck on both
operators, one cold fullgraph compile) and every workload case on the meta device. Where
CUDA is available the same tests run on the GPU (the bfloat16 MMA included).
"""

from __future__ import annotations

import pytest
import torch

import opspec.kernels.bmm as bmm_mod
from opspec.kernels.bmm import (
    BmmConfig,
    bmm_config_for,
    bmm_configs,
    bmm_reference,
    bmm_tma,
    bmm_tma_config_for,
    bmm_tma_eligible,
    bmm_triton,
)
from opspec.kernels.bmm_impl import BmmCall, BmmReferenceKernel, cublas_faster
from opspec.ops import BmmFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=4e-3, atol=4e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=3e-2),
}
# (B, M, K, N): one element, odd sizes, more rows than a 16-row tile, a long K.
SHAPES = [(1, 1, 1, 1), (2, 3, 17, 5), (3, 17, 40, 33), (1, 70, 130, 20)]
SMALL_TILES = BmmConfig(16, 16, 16, 2, 4, 1)   # many tiles, grouped order, K tails


@pytest.fixture(autouse=True)
def _on_device():
    with torch.device(DEV):
        yield


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cpu").to(device=DEV, dtype=dtype)


def _close(got, want, dtype):
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def _want(a, b):
    return torch.bmm(a.double(), b.double())


# ============================================================================ kernel

def test_reference_matches_torch():
    a, b = _randn(2, 5, 7), _randn(2, 7, 3, seed=1)
    torch.testing.assert_close(bmm_reference(a, b), torch.bmm(a, b))
    ah, bh = a.half(), b.half()
    got = bmm_reference(ah, bh)
    assert got.dtype == torch.float16
    _close(got, _want(ah, bh), torch.float16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bmm_triton(shape, dtype):
    B, M, K, N = shape
    a, b = _randn(B, M, K, dtype=dtype), _randn(B, K, N, dtype=dtype, seed=1)
    out = torch.empty(B, M, N, dtype=dtype)
    assert bmm_triton(a, b, out) is out
    _close(out, _want(a, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_many_tiles_and_k_tail(dtype):
    """Forced 16x16x16 tiles: 3 x 3 tiles a matrix in grouped order, a K tail of 2."""
    a, b = _randn(3, 40, 50, dtype=dtype), _randn(3, 50, 35, dtype=dtype, seed=1)
    out = torch.full((3, 40, 35), 7.0, dtype=dtype)
    bmm_triton(a, b, out, config=SMALL_TILES)
    _close(out, _want(a, b), dtype)


def test_strided_transposed_and_broadcast_operands():
    # attention scores: q @ k^T with k^T a transposed view; a sliced input; an out of
    # another layout; a batch-broadcast mat2 (stride 0)
    q = _randn(4, 9, 16, dtype=torch.float16)
    k = _randn(4, 11, 16, dtype=torch.float16, seed=1)
    out = torch.empty(4, 11, 9, dtype=torch.float16).transpose(1, 2)
    bmm_triton(q, k.transpose(1, 2), out, config=SMALL_TILES)
    _close(out, _want(q, k.transpose(1, 2)), torch.float16)
    big = _randn(3, 20, 30, seed=2)
    a = big[:, 2:19:2, 5:25]                   # rows every other, a column window
    b = _randn(1, 20, 7, seed=3).expand(3, 20, 7)
    out = torch.empty(3, 9, 7)
    bmm_triton(a, b, out)
    _close(out, _want(a, b), torch.float32)
    # a transposed input (column stride 1 on M)
    at = _randn(2, 13, 6, seed=4).transpose(1, 2)
    out = torch.empty(2, 6, 5)
    bmm_triton(at, _randn(2, 13, 5, seed=5), out)
    _close(out, _want(at, _randn(2, 13, 5, seed=5)), torch.float32)


def test_int64_offsets(monkeypatch):
    """Matrices past 2**31 elements take 64-bit offsets (forced here with a limit of 0)."""
    monkeypatch.setattr(bmm_mod, "_INT32_LIMIT", 0)
    a, b = _randn(2, 20, 24, dtype=torch.float16), _randn(2, 24, 18, dtype=torch.float16, seed=1)
    out = torch.empty(2, 20, 18, dtype=torch.float16)
    bmm_triton(a, b, out, config=SMALL_TILES)
    _close(out, _want(a, b), torch.float16)


def test_float32_paths():
    """float32 through 3xTF32 (the default) and through ieee FMAs: both within float32
    rounding of the float64 product (on the GPU, 3xTF32 drops only a 2**-22 term)."""
    a, b = _randn(2, 33, 70), _randn(2, 70, 21, seed=1)
    for precision in ("tf32x3", "ieee"):
        out = torch.empty(2, 33, 21)
        bmm_triton(a, b, out, precision=precision)
        torch.testing.assert_close(out.double(), _want(a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="precision must be 'tf32x3' or 'ieee'"):
        bmm_triton(a, b, torch.empty(2, 33, 21), precision="tf32")


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 4, 0), (2, 3, 0, 5)], ids=str)
def test_empty(shape):
    B, M, K, N = shape
    a, b = torch.ones(B, M, K, dtype=torch.float16), torch.ones(B, K, N, dtype=torch.float16)
    out = torch.full((B, M, N), 3.0, dtype=torch.float16)
    assert bmm_triton(a, b, out) is out
    assert torch.equal(out, torch.zeros(B, M, N, dtype=torch.float16))   # K = 0 zero-fills


def test_launcher_rejects_bad_arguments():
    a, b = torch.zeros(2, 3, 4), torch.zeros(2, 4, 5)
    with pytest.raises(ValueError, match="3-D"):
        bmm_triton(a[0], b[0], torch.empty(3, 5))
    with pytest.raises(ValueError, match=r"mat2 must have shape \[2, 4, N\]"):
        bmm_triton(a, torch.zeros(2, 3, 5), torch.empty(2, 3, 5))
    with pytest.raises(ValueError, match=r"out must have shape \[2, 3, 5\]"):
        bmm_triton(a, b, torch.empty(2, 3, 6))
    with pytest.raises(TypeError, match="share a dtype"):
        bmm_triton(a, b.half(), torch.empty(2, 3, 5))
    with pytest.raises(TypeError, match="share a dtype"):
        bmm_triton(a.double(), b.double(), torch.empty(2, 3, 5, dtype=torch.float64))


def test_config_choice():
    # MoE and attention prefill: the largest tiles that fill the waves
    assert bmm_config_for(8, 1024, 14336, 4096)[:6] == (128, 256, 64, 8, 8, 3)
    assert bmm_config_for(256, 2048, 2048, 128)[:6] == (128, 256, 64, 8, 8, 3)
    # PV (N = 128): the 128-wide tile, clipped
    assert bmm_config_for(256, 2048, 128, 2048).block_n == 128
    # decode attention (M = 4): 16-row tiles streaming mat2, 128 columns a program
    # (one K step: 2 stages, so that more programs share an SM)
    assert bmm_config_for(512, 4, 4096, 128)[:6] == (16, 128, 128, 1, 4, 2)
    assert bmm_config_for(512, 4, 128, 4096)[:6] == (16, 128, 128, 1, 4, 4)
    assert bmm_config_for(1, 4, 256, 128).block_n == 64
    # float32: 3xTF32 on tensor cores, or the ieee (FMA) configuration
    assert bmm_config_for(32, 4096, 4096, 128, torch.float32)[:6] == (128, 128, 32, 8, 8, 3)
    assert bmm_config_for(32, 4096, 4096, 128, torch.float32, "ieee")[:6] == (64, 64, 32, 8, 4, 3)
    assert len(bmm_configs()) == len(set(bmm_configs()))


# ---------------------------------------------------------------------------- TMA kernel
# Interpreted here (descriptors work under the interpreter); routed to on Hopper GPUs.

def _padded(B, R, C, dtype, transposed=False, seed=0):
    """A [B, R, C] view whose unit-stride axis is padded to 16 bytes (C, or R when
    `transposed`), as TMA needs: a tail inside the descriptor's extent."""
    if transposed:
        return _padded(B, C, R, dtype, seed=seed).transpose(1, 2)
    pad = -(-C // 8) * 8
    return _randn(B, R, pad, dtype=dtype, seed=seed)[:, :, :C]


TMA_SMALL = BmmConfig(32, 32, 32, 2, 4, 2)   # 2 x 3 tiles a matrix, a K tail of 18


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", [(False, False, False), (False, True, False), (True, True, True)],
                         ids=["nn", "q-kT", "all-transposed"])
def test_tma_kernel(layout, dtype):
    """Three matrices with tails in M, N and K, each tensor stored as given or transposed
    (mat2 as k.transpose(1, 2) is the attention-score layout)."""
    ta, tb, tc = layout
    a = _padded(3, 40, 50, dtype, ta)
    b = _padded(3, 50, 72, dtype, tb, seed=1)
    out = _padded(3, 40, 72, dtype, tc, seed=2).fill_(float("nan"))
    assert bmm_tma(a, b, out, TMA_SMALL) is out
    _close(out, _want(a, b), dtype)


def test_tma_persistent_walk(monkeypatch):
    """Two programs for 2 matrices x 2 x 2 tiles of 128x256 (the large-row tile): each
    program walks four (matrix, tile) pairs across both matrices, tails in M, N, K."""
    monkeypatch.setattr(bmm_mod, "_num_sms", lambda device: 2)
    a = _padded(2, 150, 72, torch.float16)
    b = _padded(2, 72, 296, torch.float16, seed=1)
    out = torch.full((2, 150, 296), float("nan"), dtype=torch.float16)
    bmm_tma(a, b, out, BmmConfig(128, 256, 64, 16, 8, 3))
    _close(out, _want(a, b), torch.float16)


@pytest.mark.parametrize("tc", [False, True], ids=["c", "c-transposed"])
def test_tma_split_store(monkeypatch, tc):
    """The tile stored in two column strips (store_split = 2), tails in M and N, two
    programs walking several tiles; a transposed C is stored whole."""
    monkeypatch.setattr(bmm_mod, "_num_sms", lambda device: 2)
    a = _padded(2, 40, 50, torch.float16)
    b = _padded(2, 50, 72, torch.float16, seed=1)
    out = _padded(2, 40, 72, torch.float16, tc, seed=2).fill_(float("nan"))
    bmm_tma(a, b, out, BmmConfig(16, 32, 32, 1, 4, 2, store_split=2))
    _close(out, _want(a, b), torch.float16)


def test_tma_decode_rows(monkeypatch):
    """The table's decode tile (16 rows, zero-filled past M = 4; N tail), three programs."""
    monkeypatch.setattr(bmm_mod, "_num_sms", lambda device: 3)
    a = _randn(5, 4, 128, dtype=torch.float16)
    b = _padded(5, 128, 200, torch.float16, True, seed=1)
    out = torch.empty(5, 4, 200, dtype=torch.float16)
    assert bmm_tma_config_for(5, 4, 200, 128)[:6] == (16, 256, 128, 1, 4, 3)
    bmm_tma(a, b, out)
    _close(out, _want(a, b), torch.float16)
    # one query row, one key: length-1 axes
    a, b = _randn(2, 1, 64, dtype=torch.float16), _randn(2, 64, 1, dtype=torch.float16, seed=1)
    out = torch.empty(2, 1, 8, dtype=torch.float16)[:, :, :1]   # [2, 1, 1], 16-byte batch stride
    bmm_tma(a, b, out)
    _close(out, _want(a, b), torch.float16)


def test_tma_layouts_and_refusals():
    lay = bmm_mod._tma_layout
    h = torch.float16
    assert lay(torch.empty(2, 8, 16, dtype=h)) == (False, (2, 8, 16), (128, 16, 1))
    assert lay(torch.empty(2, 16, 8, dtype=h).transpose(1, 2)) == (True, (2, 16, 8), (128, 8, 1))
    # a length-1 axis takes a legal stride whatever it has (M = 1 decode; B = 1)
    assert lay(torch.empty(1, 1, 24, dtype=h)) == (False, (1, 1, 24), (24, 24, 1))
    assert lay(torch.empty(1, 40, 8, dtype=h)[:, :3]) == (False, (1, 3, 8), (24, 8, 1))
    # a single column (N = 1) is described as one transposed row
    assert lay(torch.empty(2, 16, 1, dtype=h)) == (True, (2, 1, 16), (16, 16, 1))
    refused = [
        torch.empty(2, 8, 12, dtype=h),                        # 24-byte rows
        torch.empty(2, 8, 16, 2, dtype=h)[..., 0],             # no unit stride
        torch.empty(1, 8, 16, dtype=h).expand(2, 8, 16),       # batch stride 0
        torch.empty(2 * 8 * 16 + 1, dtype=h)[1:].view(2, 8, 16),  # 2-byte aligned base
    ]
    for t in refused:
        assert lay(t) is None, t.stride()
    a, b = torch.empty(2, 8, 16, dtype=h), torch.empty(2, 16, 8, dtype=h)
    cpu = [t.to("cpu") for t in (a, b, torch.empty(2, 8, 8, dtype=h))]
    assert not bmm_tma_eligible(*cpu)   # not a CUDA device
    with pytest.raises(ValueError, match="bmm_tma needs, for input, mat2 and out, a unit stride"):
        bmm_tma(a, torch.empty(2, 16, 12, dtype=h), torch.empty(2, 8, 12, dtype=h))


def test_tma_table_and_routing(monkeypatch):
    # attention scores (K = 128: two K steps), values (N = 128), experts: every H200 row
    assert bmm_tma_config_for(256, 2048, 2048, 128)[:6] == (128, 256, 64, 16, 8, 3)
    assert bmm_tma_config_for(32, 4096, 4096, 128)[:6] == (128, 256, 64, 16, 8, 3)
    assert bmm_tma_config_for(256, 2048, 128, 2048)[:6] == (128, 128, 128, 8, 8, 3)
    assert bmm_tma_config_for(8, 1024, 14336, 4096)[:3] == (128, 256, 64)
    assert bmm_tma_config_for(64, 256, 7168, 2048)[:3] == (128, 256, 64)
    assert bmm_tma_config_for(512, 4, 4096, 128)[:6] == (16, 256, 128, 1, 4, 3)
    # 2 x 3 tiles of 128x256 fill 6 of 132 SMs: 128x128; 16 < M <= 128: the pointer kernel
    assert bmm_tma_config_for(1, 256, 768, 4096)[:3] == (128, 128, 64)
    assert bmm_tma_config_for(64, 64, 4096, 128) is None
    # bmm_triton sends what is eligible and listed to bmm_tma, the rest to the pointer kernel
    calls = []
    monkeypatch.setattr(bmm_mod, "bmm_tma_eligible", lambda *t: True)
    monkeypatch.setattr(bmm_mod, "bmm_tma", lambda a, b, out, cfg, p: calls.append(cfg) or out)
    a, b = torch.zeros(2, 4, 16, dtype=torch.float16), torch.zeros(2, 16, 8, dtype=torch.float16)
    bmm_triton(a, b, torch.empty(2, 4, 8, dtype=torch.float16))
    assert [c[:6] for c in calls] == [(16, 16, 16, 1, 4, 3)]
    a = torch.ones(1, 40, 16, dtype=torch.float16)
    out = torch.empty(1, 40, 8, dtype=torch.float16)
    bmm_triton(a, b[:1].fill_(1), out)                        # M = 40: the pointer kernel
    assert len(calls) == 1 and torch.equal(out, torch.full_like(out, 16))
    bmm_triton(torch.zeros(2, 4, 16, dtype=torch.float16), b, torch.empty(2, 4, 8, dtype=torch.float16),
               config=SMALL_TILES)                           # an explicit config: the pointer kernel
    assert len(calls) == 1
    # float32: eligible only where _TMA_FLOAT32 (off: the pointer kernel's 3xTF32 was measured)
    monkeypatch.undo()
    assert not bmm_mod._TMA_FLOAT32
    monkeypatch.setattr(bmm_mod, "_TMA_FLOAT32", True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    a32, b32 = torch.zeros(2, 64, 16), torch.zeros(2, 16, 8)
    assert bmm_tma_eligible(a32, b32, torch.empty(2, 64, 8))
    monkeypatch.setattr(bmm_mod, "_TMA_FLOAT32", False)
    assert not bmm_tma_eligible(a32, b32, torch.empty(2, 64, 8))
    assert bmm_tma_eligible(a32.half(), b32.half(), torch.empty(2, 64, 8).half())
    assert not bmm_tma_eligible(a32.half(), b32.half(), torch.empty(1, 64, 8).half().expand(2, 64, 8))


# ============================================================================ op

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_op_matches_torch(dtype):
    a, b = _randn(3, 17, 24, dtype=dtype), _randn(3, 24, 9, dtype=dtype, seed=1)
    op = BmmFwdOp()
    y = op(a, b)
    assert y.shape == (3, 17, 9) and y.dtype == dtype and y.is_contiguous()
    _close(y, _want(a, b), dtype)
    assert op.last_call.indices == {"B": 3, "M": 17, "K": 24, "N": 9, "T": str(dtype)[6:]}


def test_out_buffer_is_written_and_returned():
    op = BmmFwdOp()
    a, b = _randn(2, 5, 8), _randn(2, 8, 6, seed=1)
    out = torch.empty(2, 6, 5).transpose(1, 2)          # any strides
    assert op(a, b, out=out) is out
    _close(out, _want(a, b), torch.float32)
    assert op.last_call.has_out
    # an out that is an input (torch.bmm accepts it): computed apart, then copied in
    sq, sq2 = _randn(2, 6, 6, seed=2), _randn(2, 6, 6, seed=3)
    want = _want(sq, sq2)
    assert op(sq, sq2, out=sq) is sq
    _close(sq, want, torch.float32)
    with pytest.raises(SignatureError) as ei:
        op(a, b, out=torch.empty(2, 5, 7))
    expect_error(ei, SignatureError, "BmmFwdOp", "signature.outputs.output.buffer",
                 "out (the buffer of output output, Tensor[T, [B, M, N]])",
                 "expected shape (2, 5, 6), got shape (2, 5, 7)")


def test_call_errors():
    op = BmmFwdOp()
    a = torch.randn(2, 3, 4)
    bad = [
        ((a, torch.randn(2, 5, 6)), "signature.inputs.mat2.shape",
         ["input mat2, axis 1 of [B, K, N]", "expected K = 4 (from input input), got 5"]),
        ((a, torch.randn(3, 4, 6)), "signature.inputs.mat2.shape",
         ["input mat2, axis 0 of [B, K, N]", "expected B = 2 (from input input), got 3"]),
        ((a, torch.randn(2, 4, 6).half()), "signature.inputs.mat2.dtype",
         ["input mat2, dtype T", "expected T = float32 (from input input), got float16"]),
        ((torch.randn(3, 4), torch.randn(4, 6)), "signature.inputs.input.shape",
         ["input input, the rank of [B, M, K]", "expected 3, got 2"]),
        ((a.double(), torch.randn(2, 4, 6).double()), "signature.inputs.input.dtype",
         ["expected bfloat16 | float16 | float32, got float64"]),
    ]
    for args, path, fragments in bad:
        with pytest.raises(SignatureError) as ei:
            op(*args)
        expect_error(ei, SignatureError, "BmmFwdOp", path, *fragments)
    with pytest.raises(SignatureTypeError) as ei:
        op(a, None)
    expect_error(ei, SignatureTypeError, "BmmFwdOp", "signature.inputs.mat2",
                 "input mat2: expected a torch.Tensor, got NoneType")


def test_roofline_and_empty_calls():
    op = BmmFwdOp()
    op(torch.ones(2, 3, 4, dtype=torch.float16), torch.ones(2, 4, 5, dtype=torch.float16))
    assert op.eval_roofline() == (2 * 2 * 3 * 5 * 4, (2 * 3 * 4 + 2 * 4 * 5 + 2 * 3 * 5) * 2)
    assert op(torch.ones(0, 3, 4), torch.ones(0, 4, 5)).shape == (0, 3, 5)
    assert torch.equal(op(torch.ones(2, 3, 0), torch.ones(2, 0, 5)), torch.zeros(2, 3, 5))


def test_dispatch():
    op = BmmFwdOp()
    cuda = BmmCall("bfloat16", 8, 1024, 14336, 4096, device=torch.device("cuda"))
    assert op.key_for("bmm", cuda, arch=90) == "bmm_triton"
    # the shape classes where cuBLAS measured faster go to torch.bmm, with the reason
    for shape in ((256, 2048, 2048, 128), (64, 256, 7168, 2048)):
        scores = BmmCall("bfloat16", *shape, device=torch.device("cuda"))
        assert op.key_for("bmm", scores, arch=90) == "bmm_reference"
        assert "runs faster in cuBLAS" in cublas_faster(scores)
    assert cublas_faster(BmmCall("bfloat16", 256, 2048, 128, 2048)) is None  # P @ V
    assert cublas_faster(BmmCall("bfloat16", 512, 4, 4096, 128)) is None     # decode scores
    assert op.key_for("bmm", BmmCall("float32", device=torch.device("mps"))) == "bmm_reference"
    a, b = _randn(2, 3, 4), _randn(2, 4, 5, seed=1)
    out = torch.empty(2, 3, 5)
    BmmReferenceKernel(BmmCall("float32")).forward(a, b, out)
    torch.testing.assert_close(out, torch.bmm(a, b))


# ============================================================================ compile boundary

def test_opcheck_every_operator():
    op = BmmFwdOp()
    assert BmmFwdOp.compile_op_names == ("opspec::bmm_fwd_op", "opspec::bmm_fwd_op_out")
    assert str(torch.ops.opspec.bmm_fwd_op_out.default._schema) == (
        "opspec::bmm_fwd_op_out(Tensor input, Tensor mat2, Tensor(a!) out, str key) -> ()")
    a, b = torch.randn(2, 3, 16).half(), torch.randn(2, 16, 5).half()
    torch.library.opcheck(torch.ops.opspec.bmm_fwd_op.default, (a, b, op._opspec_key))
    torch.library.opcheck(torch.ops.opspec.bmm_fwd_op_out.default,
                          (a, b, torch.empty(2, 3, 5).half(), op._opspec_key))


def test_cold_compile_fullgraph():
    """Scores then values, as attention: two bmm nodes in one graph, the second into `out`."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = BmmFwdOp()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    def attend(q, k, v, out):
        s = op(q, k.transpose(1, 2)).softmax(-1)
        return op(s, v, out=out)

    fn = torch.compile(attend, backend=backend, fullgraph=True)
    q, k, v = _randn(2, 5, 16), _randn(2, 7, 16, seed=1), _randn(2, 7, 16, seed=2)
    out = torch.empty(2, 5, 16)
    y = fn(q, k, v, out)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("bmm_fwd_op_out" in t for t in targets), targets
    want = torch.bmm(torch.bmm(q, k.transpose(1, 2)).softmax(-1), v)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)


# ============================================================================ workloads

def test_workload_cases_instantiate():
    """Every case builds on the meta device and passes the op's checks with the row's
    values; the large rows move at least 256 MiB."""
    largest = 0
    all_cases = cases(BmmFwdOp)
    assert len({c.id for c in all_cases}) == len(all_cases)
    labels = {c.label for c in all_cases}
    assert {"llama3-8b-attn-qk", "mixtral-expert-up", "dsv3-expert-up"} <= labels
    for case in all_cases:
        op = case.construct(BmmFwdOp)
        a, b = case.inputs("meta")
        ind = op.check_call(a, b)
        for name in ("B", "M", "N", "K"):
            assert ind[name] == case.values[name], (case.id, name)
        size = lambda t: t.numel() * t.element_size()
        largest = max(largest, size(a) + size(b) + ind["B"] * ind["M"] * ind["N"] * a.element_size())
    assert largest >= 256 * 2**20
    assert {str(c.dtypes["T"]) for c in all_cases} >= {"bfloat16", "float16", "float32"}


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, re, sys
import opspec.kernels.bmm as K
import sm90_build as sm90

def build(B, M, N, Kd, dt, precision="tf32x3"):
    # The launch the table plans for a contiguous problem, specialised as a launch is.
    cfg = K.bmm_config_for(B, M, N, Kd, {"bf16": K.torch.bfloat16, "fp32": K.torch.float32}[dt],
                           precision)
    fn = K._bmm_kernel
    ints = dict(M=M, N=N, K=Kd, stride_ab=M * Kd, stride_am=Kd, stride_ak=1, stride_bb=Kd * N,
                stride_bk=N, stride_bn=1, stride_cb=M * N, stride_cm=N, stride_cn=1)
    cexpr = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                 GROUP_M=cfg.group_m, EVEN_K=Kd % cfg.block_k == 0, USE_INT64=False,
                 INPUT_PRECISION=precision if dt == "fp32" else "tf32", UPCAST=False)
    ptx = sm90.build(fn, dict(ints, **sm90.pointers(fn, "*" + dt)), cexpr, cfg.num_warps,
                     cfg.num_stages).ptx
    return {"cp_async": ptx.count("cp.async"), "local": ptx.count(".local"),
            "wgmma": "wgmma" in ptx, "mma": "mma.sync" in ptx, "tf32": ".tf32" in ptx}

def tma(B, M, N, Kd, dt="bf16", ta=False, tb=False, tc=False):
    # The TMA kernel with the table's configuration, descriptors of the given layouts.
    cfg = K.bmm_tma_config_for(B, M, N, Kd)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    fn = K._bmm_tma_kernel
    desc = lambda t, r, c: f"tensordesc<{dt}[1, {c}, {r}]>" if t else f"tensordesc<{dt}[1, {r}, {c}]>"
    types = dict(a_desc=desc(ta, bm, bk), b_desc=desc(tb, bk, bn), c_desc=desc(tc, bm, bn))
    ints = dict(B=B, M=M, N=N, K=Kd)
    cexpr = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, TRANS_A=ta,
                 TRANS_B=tb, TRANS_C=tc, PROGRAMS=132, INPUT_PRECISION="tf32", UPCAST=False,
                 STORE_SPLIT=1)
    k = sm90.build(fn, dict(ints, **types), cexpr, cfg.num_warps, cfg.num_stages)
    ptx, ttgir = k.ptx, k.ttgir
    # The store's wait sits in the pipelined loop, before the store buffer is next written.
    deferred = re.search(r"scf\.for.*async_tma_copy_global_to_local.*async_tma_store_wait "
                         r"\{pendings = 0 : i32, read_only\}.*local_to_global", ttgir, re.S)
    return {"tma": ptx.count("cp.async.bulk.tensor"), "local": ptx.count(".local"),
            "wgmma": "wgmma" in ptx, "mma": "mma.sync" in ptx, "smem": k.shared,
            "deferred_store": deferred is not None}

out = {
    "tma-attn-qk": tma(256, 2048, 2048, 128),
    "tma-attn-qk-kT": tma(256, 2048, 2048, 128, tb=True),
    "tma-attn-pv": tma(256, 2048, 128, 2048),
    "tma-decode-qk": tma(512, 4, 4096, 128, tb=True),
    "tma-expert-up": tma(8, 1024, 14336, 4096, "fp16", ta=True, tc=True),
    "attn-qk": build(256, 2048, 2048, 128, "bf16"),
    "attn-pv": build(256, 2048, 128, 2048, "bf16"),
    "decode-qk": build(512, 4, 4096, 128, "bf16"),
    "expert-up": build(8, 1024, 14336, 4096, "bf16"),
    "fp32": build(32, 4096, 4096, 128, "fp32"),
    "fp32-ieee": build(32, 4096, 4096, 128, "fp32", "ieee"),
}
json.dump(out, sys.stdout)
"""


def test_kernel_builds_for_sm90():
    """Both kernels compile for sm_90 (ptxas included) with their tables' configurations of
    the workload shapes. Pointer kernel: pipelined operand loads (cp.async), no local memory
    (no spills), 16-bit tiles of 64 rows or more and float32 (3xTF32) on Hopper's wgmma, the
    ieee float32 path on FMAs. TMA kernel: see the assertions. Compiled in a fresh process:
    under the interpreter, triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    for name, k in built.items():
        if name.startswith("tma"):
            # TMA loads and stores, the store overlapping the next tile, no spills, within
            # sm_90's 227 KB of shared memory; 16-row decode tiles on mma.sync
            assert k["tma"] > 0 and k["local"] == 0 and k["deferred_store"], (name, k)
            assert k["smem"] <= 227 * 1024, (name, k)
            assert k["mma"] if name == "tma-decode-qk" else k["wgmma"], (name, k)
            continue
        assert k["local"] == 0 and k["cp_async"] > 0, (name, k)
        if name == "decode-qk":      # 16-row tiles: Ampere-style mma (wgmma needs 64 rows)
            assert k["mma"], (name, k)
        elif name == "fp32-ieee":    # FMAs, no tensor cores
            assert not (k["wgmma"] or k["mma"] or k["tf32"]), (name, k)
        else:                        # float32: 3xTF32 on wgmma
            assert k["wgmma"] and k["tf32"] == (name == "fp32"), (name, k)
