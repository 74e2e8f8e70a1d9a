"""The softmax family: SoftmaxFwdOp and LogSoftmaxFwdOp.

Kernels: every Triton kernel (rows, looped, split, strided, strided looped) against the
torch reference in fp32, fp16 and bf16, odd sizes, strided and copied views, casts, special
values, int64 offsets and empty tensors. Without a GPU they run on the CPU through Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported); with one
they run on CUDA. Sizes stay small: the interpreter runs each program through numpy. The
looped kernels are reached with small tensors by lowering the register cap of the plan.
Each kernel is also built for sm_90 (no GPU needed) and its global accesses checked to be
16-byte vectors.

Ops: results through the op, calls that break the spec (pinned to the declaration), the
record and roofline, the empty-write rule, opcheck of the generated operators, one cold
`torch.compile(fullgraph=True)`, and the workload rows (on the meta device).
"""

from __future__ import annotations

import math

import pytest
import torch

from opspec.kernels import softmax as K
from opspec.kernels.softmax import (
    SoftmaxPlan, softmax_plan, softmax_reference, softmax_triton,
)
from opspec.kernels.softmax_impl import SoftmaxCall
from opspec.ops import LogSoftmaxFwdOp, SoftmaxFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu":
    import triton.language as _tl

    if type(_tl.cdiv).__name__ != "InterpretedFunction":
        raise RuntimeError("the softmax kernel tests need TRITON_INTERPRET=1 set before "
                           "triton is imported (tests/conftest.py does it without CUDA)")

# Masked lanes of a tile (past the row, past `inner`) compute exp/log of -inf and NaN in
# numpy under the interpreter; they are never stored.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=2e-5, atol=2e-6),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
H = torch.float16


def _x(shape, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)


def _expected(x, dim, out_dtype=None, log=False):
    """float64 torch on x rounded to the output dtype first (torch's dtype= rule)."""
    dt = out_dtype or x.dtype
    x64 = x.to(dt).double()
    y = torch.log_softmax(x64, dim) if log else torch.softmax(x64, dim)
    return y.to(dt)


def _run(x, dim, out_dtype=None, log=False, **kw):
    out = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
    got = softmax_triton(x, dim, out, log, **kw)
    assert got is out
    return out


def _close(got, want):
    torch.testing.assert_close(got.float().cpu(), want.float().cpu(), equal_nan=True,
                               **TOL[got.dtype])


def _plan(x, dim, **kw):
    """The plan of x's [outer, n, inner] view, with `kw` (max_reg, sm_count) forcing a kernel."""
    d = dim % x.dim()
    outer, n, inner = math.prod(x.shape[:d]), x.shape[d], math.prod(x.shape[d + 1:])
    return softmax_plan(outer, n, inner, x.element_size(), **kw)


# ============================================================================ reference

def test_reference_matches_torch_and_casts_first():
    x = _x((4, 9))
    torch.testing.assert_close(softmax_reference(x, -1), torch.softmax(x, -1))
    torch.testing.assert_close(softmax_reference(x, 0, log=True), torch.log_softmax(x, 0))
    y = softmax_reference(x, 1, torch.bfloat16)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, torch.softmax(x.bfloat16().float(), 1).bfloat16())


# ============================================================================ rows kernel

ROW_SHAPES = [((1,), 0), ((1, 1), -1), ((3, 17), -1), ((5, 1000), 1), ((2, 3, 7), 2),
              ((37, 5), -1)]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim", ROW_SHAPES, ids=str)
def test_rows_kernel(shape, dim, dtype, log):
    x = _x(shape, dtype)
    assert _plan(x, dim).kind == "rows"
    _close(_run(x, dim, log=log), _expected(x, dim, log=log))


def test_rows_kernel_packs_short_rows_into_one_program():
    x = _x((37, 5))
    plan = _plan(x, -1, sm_count=1)
    assert plan.kind == "rows" and plan.rows > 1 and plan.grid == math.ceil(37 / plan.rows)
    _close(_run(x, -1, plan=plan), _expected(x, -1))


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_kernel_unmasked_when_even(dtype, log):
    # Rows of exactly the block, whole tiles: no mask on any load or store (several tiles
    # a program, strided rows too); a plan that would need one is refused.
    x = _x((16, 64), dtype, seed=13)
    for rows, tiles in ((1, 1), (4, 1), (2, 2), (4, 4)):
        plan = SoftmaxPlan("rows", 64, 1, 16 // (rows * tiles), rows=rows, tiles=tiles, even=True)
        _close(_run(x, -1, log=log, plan=plan), _expected(x, -1, log=log))
    v = _x((16, 128), dtype, seed=14)[:, ::2]
    plan = SoftmaxPlan("rows", 64, 1, 4, rows=4, even=True)
    _close(_run(v, -1, log=log, plan=plan), _expected(v, -1, log=log))
    assert _plan(x, -1).even and not _plan(x[:15], -1, sm_count=1).even
    for bad, plan in ((x[:15], SoftmaxPlan("rows", 64, 1, 4, rows=4, even=True)),
                      (x[:, :60], SoftmaxPlan("rows", 64, 1, 4, rows=4, even=True)),
                      (x, SoftmaxPlan("rows", 64, 1, 3, rows=2, tiles=3, even=True))):
        with pytest.raises(ValueError, match=r"an even plan needs rows of exactly 64 elements"):
            _run(bad, -1, plan=plan)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_kernel_takes_several_tiles(dtype, log):
    # Tiles of 4 rows, 3 a program, the next tile loaded ahead: 37 rows leave the last
    # program with one partial tile and one past the rows (all lanes masked).
    x = _x((37, 45), dtype, seed=5)
    plan = SoftmaxPlan("rows", 64, 2, math.ceil(37 / 12), rows=4, tiles=3)
    _close(_run(x, -1, log=log, plan=plan), _expected(x, -1, log=log))
    # strided rows (a column slice, a transposed view), and a cast to another dtype
    base = _x((40, 30), dtype, seed=6)
    for v in (base[:, 3:28], base.t()):
        plan = SoftmaxPlan("rows", 1 << (v.shape[1] - 1).bit_length(), 1,
                           math.ceil(v.shape[0] / 4), rows=2, tiles=2)
        _close(_run(v, -1, log=log, plan=plan), _expected(v, -1, log=log))
        _close(_run(v, -1, torch.float32, log=log, plan=plan),
               _expected(v, -1, torch.float32, log=log))
    # the tuning's tiles reach the launcher's own plan
    plan = softmax_plan(64, 45, 1, x.element_size(), sm_count=1,
                        tuning=K.ROW_TUNING._replace(row_tile=128, row_small=0, row_tiles=4,
                                               row_tiles_min_programs=2))
    assert (plan.rows, plan.tiles, plan.grid) == (2, 4, 8)
    y = _x((64, 45), dtype, seed=7)
    _close(_run(y, -1, log=log, plan=plan), _expected(y, -1, log=log))


# ============================================================================ strided kernel

STRIDED = [((4, 37, 33), 1), ((17, 3), 0), ((3, 5, 2, 7), 1), ((6, 1, 9), 1), ((2, 3, 4), -2)]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim", STRIDED, ids=str)
def test_strided_kernel(shape, dim, dtype, log):
    x = _x(shape, dtype, seed=1)
    plan = _plan(x, dim)
    assert plan.kind == "strided" and not plan.looped
    _close(_run(x, dim, log=log), _expected(x, dim, log=log))


# ============================================================================ looped kernels

# A register cap of 64 elements sends rows of 1000 to the long-row kernels: `sm_count` decides
# between the cooperative one (many rows: 16 programs of 64 elements per row; the table
# keeps it to 4-byte inputs, the test lifts that) and the split one (few rows); the
# persistent looped kernel takes rows of more than 64 chunks.
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind, sms", [("coop", 1), ("looped", 1), ("split", 1000)])
def test_long_row_kernels(kind, sms, dtype, log):
    x = _x((5, 1000), dtype, seed=2)
    if kind == "looped":
        plan = _plan(x, -1, max_reg=8, sm_count=sms)      # 125 chunks of 8: over 64
        assert plan.kind == kind
        # persistent, one program per SM: 5 rows on 1, in chunks of twice the cap
        assert (plan.grid, plan.block) == (1, 16) and plan.vec == 16 // x.element_size()
        _close(_run(x, -1, log=log, plan=plan), _expected(x, -1, log=log))
        plan = SoftmaxPlan("looped", 64, 1, 2, vec=plan.vec)         # 5 rows on 2 programs
    else:
        # coop for every dtype here (the table keeps it to 4-byte inputs)
        anywidth = K.ROW_TUNING._replace(coop_min_in_bytes=1)
        plan = _plan(x, -1, max_reg=64, sm_count=sms, tuning=anywidth)
        assert plan.kind == kind
        assert plan.chunks == math.ceil(1000 / plan.block) and plan.grid == 5 * plan.chunks
    _close(_run(x, -1, log=log, plan=plan), _expected(x, -1, log=log))


def test_coop_kernel_waits_or_reads_the_row_itself():
    # Under the interpreter programs run one after another: every chunk but a row's last
    # finds its peers missing and takes the fallback (reads the whole row); the last finds
    # all partials in. On a GPU the chunks wait for each other. Both must agree with torch.
    x = _x((3, 200), seed=11)
    x[1, :130] = -math.inf                                   # whole chunks of -inf
    for block in (16, 64, 256):
        plan = SoftmaxPlan("coop", block, 1, 3 * math.ceil(200 / block),
                           chunks=math.ceil(200 / block))
        for log in (False, True):
            _close(_run(x, -1, log=log, plan=plan), _expected(x, -1, log=log))


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_strided_looped_kernel(dtype, log):
    x = _x((3, 150, 40), dtype, seed=3)
    plan = _plan(x, 1, max_reg=256, sm_count=2)
    assert plan.kind == "strided" and plan.looped and plan.block * plan.block_inner <= 256
    assert plan.block < 150                              # the column takes several chunks
    _close(_run(x, 1, log=log, plan=plan), _expected(x, 1, log=log))


@pytest.mark.parametrize("n", [1, 3, 64, 65, 129])
def test_looped_kernels_on_chunk_edges(n):
    x = _x((3, n), seed=n)
    for plan in (SoftmaxPlan("looped", 64, 1, 2, vec=4),
                 SoftmaxPlan("coop", 16, 1, 3 * math.ceil(n / 16), chunks=math.ceil(n / 16)),
                 SoftmaxPlan("split", 16, 1, 3 * math.ceil(n / 16), chunks=math.ceil(n / 16))):
        _close(_run(x, -1, plan=plan), _expected(x, -1))
        _close(_run(x, -1, log=True, plan=plan), _expected(x, -1, log=True))


# ============================================================================ layouts

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_views(dtype):
    base = _x((12, 40), dtype, seed=4)
    views = {
        "transposed": (base.t(), -1),                 # the softmax axis has stride 40
        "column slice": (base[:, 3:30], -1),          # row stride 40, not 27
        "step slice": (base[::3, ::2], 1),            # strides (120, 2)
        "transposed dim 0": (base.t(), 0),            # strided kernel with inner stride 40
    }
    for name, (v, dim) in views.items():
        assert not v.is_contiguous(), name
        _close(_run(v, dim), _expected(v, dim))
        _close(_run(v, dim, log=True), _expected(v, dim, log=True))


def test_a_permuted_input_is_copied_and_the_caller_untouched():
    x = _x((2, 3, 4, 5), seed=5).permute(2, 0, 3, 1)  # [4, 2, 5, 3]: axes 0..1 cannot merge
    before = x.clone()
    _close(_run(x, 2), _expected(x, 2))
    assert torch.equal(x, before)


def test_looped_kernels_read_strided_rows():
    base = _x((4, 300), seed=6)
    v = base[:, ::2]                                  # [4, 150], column stride 2
    for cap, sms, kind in ((64, 1, "coop"), (2, 1, "looped"), (64, 1000, "split")):
        plan = softmax_plan(4, 150, 1, 4, max_reg=cap, sm_count=sms)
        assert plan.kind == kind
        _close(_run(v, -1, plan=plan), _expected(v, -1))


# ============================================================================ dtypes and values

@pytest.mark.parametrize("src, dst", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                      (torch.float32, torch.bfloat16), (torch.float32, torch.float16),
                                      (torch.bfloat16, torch.float16)], ids=str)
def test_output_dtype_casts_the_input_first(src, dst):
    x = _x((3, 50), src, seed=7)
    for log in (False, True):
        got = _run(x, -1, dst, log=log)
        assert got.dtype == dst
        _close(got, _expected(x, -1, dst, log=log))
        torch.testing.assert_close(got.cpu(), softmax_reference(x, -1, dst, log).cpu(),
                                   **TOL[dst])


def test_fp32_to_fp16_overflow_behaves_as_torch():
    # 1e5 is inf in fp16: torch casts first, so the row becomes NaN.
    x = torch.tensor([[1e5, 0.0, 1.0], [1.0, 2.0, 3.0]], device=DEV)
    got = _run(x, -1, torch.float16)
    want = torch.softmax(x.half().float(), -1).half()
    torch.testing.assert_close(got.cpu(), want.cpu(), equal_nan=True)
    assert torch.isnan(got[0]).all()


def _special_rows(n):
    x = _x((4, n), seed=8)
    x[0, : n // 2] = -math.inf        # masked logits: half the row is -inf
    x[1, :] = -math.inf               # a fully masked row: NaN, as torch
    x[2, 5] = math.nan                # NaN poisons its row
    return x


@pytest.mark.parametrize("kind", ["rows", "coop", "looped", "split"])
def test_masked_and_special_values(kind):
    n = 200
    x = _special_rows(n)
    cap = {"coop": 64, "looped": 2, "split": 64}.get(kind)   # looped: over 64 chunks
    plan = None if kind == "rows" else _plan(x, -1, max_reg=cap, sm_count=1000 if kind == "split" else 1)
    assert plan is None or plan.kind == kind
    for log in (False, True):
        got = _run(x, -1, log=log, plan=plan)
        want = torch.log_softmax(x.double(), -1) if log else torch.softmax(x.double(), -1)
        torch.testing.assert_close(got.double().cpu(), want.cpu(), equal_nan=True,
                                   rtol=2e-5, atol=2e-6)
        assert torch.isnan(got[1]).all() and torch.isnan(got[2]).all()
        assert torch.isfinite(got[3]).all()
        # the -inf half of row 0 spans whole chunks of the looped kernels: no NaN there
        assert not torch.isnan(got[0]).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_looped_ffma_form_and_its_fallback(dtype):
    """16-bit outputs take the looped kernel's FFMA form of the exponentials for row maxima
    in [-FFMA_LIMIT / 2, FFMA_LIMIT], the exact form for the others (read again): rows of
    each kind, masked ones (-inf, the dtype's lowest value, which the FFMA form clamps),
    an all -inf row and a NaN, several chunks a row, against float64 torch."""
    limit = K.FFMA_LIMIT[dtype]
    assert limit > 0 and K.FFMA_LIMIT[torch.float32] == 0
    n = 200
    x = _x((8, n), torch.float32, seed=21)
    x[1, : n // 2] = -math.inf
    x[2, :] = -math.inf
    x[3, 7] = math.nan
    x[4] += 1.25 * limit                       # max above the limit: exact form
    x[5, ::2] = torch.finfo(dtype).min         # masked by the lowest value: clamped groups
    x[6] -= 0.75 * limit                       # max below -limit / 2: exact form
    x[7, 64:] = -0.6 * limit                   # whole chunks far below the max: clamped
    x = x.to(dtype)
    plan = SoftmaxPlan("looped", 64, 1, 2, vec=4)
    for log in (False, True):
        got = _run(x, -1, log=log, plan=plan)
        _close(got, _expected(x, -1, log=log))
        assert torch.isnan(got[2]).all() and torch.isnan(got[3]).all()
        assert torch.isfinite(got[[0, 4, 5, 6, 7]]).all() and not torch.isnan(got[1]).any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_staggered_looped_plan(dtype):
    """A looped plan whose programs start in steps computes what one without steps does: on
    CUDA the programs spin first (opspec.kernels.stagger), elsewhere the launch drops the
    steps. Rows beyond the FFMA range among them take the exact loop after the row loop."""
    x = _x((23, 300), dtype, seed=5)
    x[6] += 5000.0 if dtype == torch.bfloat16 else 0.0     # beyond FFMA_LIMIT (16-bit only)
    for log in (False, True):
        want = _expected(x, -1, log=log)
        for steps in (0, 2, 4):
            plan = SoftmaxPlan("looped", 64, 1, 3, vec=4, stagger_steps=steps, stagger=0.5)
            _close(_run(x, -1, log=log, plan=plan), want)


def test_extreme_but_finite_values():
    x = torch.tensor([[-1e30, 1e30, 0.0], [88.0, 89.0, -200.0], [3e38, -3e38, 0.0]], device=DEV)
    for plan in (None, SoftmaxPlan("looped", 4, 1, 1, vec=4), SoftmaxPlan("split", 2, 1, 6, chunks=2),
                 SoftmaxPlan("coop", 2, 1, 6, chunks=2)):
        got = _run(x, -1, plan=plan)
        torch.testing.assert_close(got.cpu(), torch.softmax(x, -1).cpu(), equal_nan=True)


def test_int64_offsets(monkeypatch):
    # Lower the int32 limit so that every kernel takes its int64 path on small tensors.
    monkeypatch.setattr(K, "_INT32_LIMIT", 10)
    x = _x((5, 300), seed=9)
    for plan in (None, _plan(x, -1, max_reg=64, sm_count=1), _plan(x, -1, max_reg=4, sm_count=1),
                 _plan(x, -1, max_reg=64, sm_count=1000)):
        _close(_run(x, -1, plan=plan), _expected(x, -1))
    y = _x((3, 40, 9), seed=10)
    for plan in (None, _plan(y, 1, max_reg=64, sm_count=1)):
        _close(_run(y, 1, log=True, plan=plan), _expected(y, 1, log=True))


# ============================================================================ empty and errors

@pytest.mark.parametrize("shape, dim", [((0, 5), -1), ((3, 0), -1), ((2, 0, 4), 0), ((0,), 0)],
                         ids=str)
def test_empty_tensors_launch_nothing(shape, dim):
    x = torch.empty(shape, dtype=H, device=DEV)
    out = torch.empty(shape, dtype=H, device=DEV)
    assert softmax_triton(x, dim, out) is out


def test_launcher_rejects_bad_arguments():
    x = _x((2, 8))
    with pytest.raises(ValueError, match="shape"):
        softmax_triton(x, -1, torch.empty(2, 7, device=DEV))
    with pytest.raises(ValueError, match="contiguous"):
        softmax_triton(x, -1, torch.empty(8, 2, device=DEV).t())
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        softmax_triton(x.double(), -1, torch.empty(2, 8, device=DEV))
    with pytest.raises(IndexError, match=r"\[-2, 2\)"):
        softmax_triton(x, 2, torch.empty(2, 8, device=DEV))


# ============================================================================ plans

def test_plans_of_the_workload_shapes():
    # Attention rows stay in registers, packed to tiles of 8192 elements at 8 warps (rows
    # of up to 1024: 2048 at 2 warps): 32 elements per thread (ROW_TUNING.row_per_thread),
    # unmasked where the rows fill the tiles.
    p = softmax_plan(32 * 1024, 1024, 1, 2)
    assert (p.kind, p.block, p.rows, p.tiles, p.num_warps, p.grid, p.even) == (
        "rows", 1024, 2, 1, 2, 16384, True)
    p = softmax_plan(32 * 2048, 2048, 1, 2)
    assert (p.kind, p.block, p.rows, p.num_warps, p.even) == ("rows", 2048, 4, 8, True)
    p = softmax_plan(4 * 8192, 8192, 1, 2)
    assert (p.kind, p.block, p.rows, p.num_warps) == ("rows", 8192, 1, 8)
    # masked: a row shorter than its block, or a last tile of fewer rows
    assert not softmax_plan(4096, 1000, 1, 2).even
    assert not softmax_plan(4095, 2048, 1, 2).even
    assert not softmax_plan(4096, 2048, 1, 2, tuning=K.ROW_TUNING._replace(row_even=False)).even
    # Fewer rows a program while the grid would hold under 4 programs per SM; two tiles a
    # program where the tuning asks and the grid keeps 8 programs per SM once divided.
    p = softmax_plan(1024, 1024, 1, 2)
    assert (p.rows, p.grid, p.num_warps) == (1, 1024, 1)
    two = K.ROW_TUNING._replace(row_tiles=2, row_small=512)
    p = softmax_plan(32 * 1024, 1024, 1, 2, tuning=two)
    assert (p.rows, p.tiles, p.grid) == (8, 2, 2048)
    p = softmax_plan(8 * 1024, 1024, 1, 2, tuning=two)
    assert (p.rows, p.tiles, p.grid) == (8, 1, 1024)
    # Prefill vocabulary rows: 16-bit logits take the persistent looped kernel (one
    # program of 32 warps per SM, 64 KiB chunks); float32 ones the cooperative kernel, 10
    # programs of 16384 per row.
    p = softmax_plan(4096, 128256, 1, 2)
    assert (p.kind, p.grid, p.block, p.num_warps) == ("looped", 132, 32768, 32)
    # ... its programs starting in 4 steps of an eighth of a row (31 rows a program); with
    # fewer than 8 rows a program, all at once (the delay would not be paid back).
    assert (p.stagger_steps, p.stagger) == (4, 0.125)
    p = softmax_plan(8 * 132 - 1, 128256, 1, 2)
    assert (p.kind, p.stagger_steps, p.stagger) == ("looped", 0, 0.0)
    p = softmax_plan(1024, 151936, 1, 4)
    assert (p.kind, p.block, p.chunks, p.num_warps) == ("coop", 16384, 10, 16)
    coop16 = K.ROW_TUNING._replace(coop_min_in_bytes=1, coop_block=8192, coop_warps=8)
    p = softmax_plan(4096, 128256, 1, 2, tuning=coop16)
    assert (p.kind, p.block, p.chunks, p.grid, p.num_warps) == ("coop", 8192, 16, 4096 * 16, 8)
    # Rows of more than 64 chunks: the looped kernel at any width.
    p = softmax_plan(1024, 65 * 16384, 1, 4)
    assert (p.kind, p.grid, p.vec, p.block, p.num_warps) == ("looped", 132, 4, 16384, 32)
    # Decode vocabulary rows: split so the grid covers the SMs (2 programs each or more).
    p = softmax_plan(32, 128256, 1, 2)
    assert p.kind == "split" and p.grid >= 2 * 132 and p.chunks * p.block >= 128256
    p = softmax_plan(1, 128256, 1, 2)
    assert p.kind == "split" and p.block == 2048


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, sys
import opspec.kernels.softmax as K
import sm90_build as sm90

def build(fn, args, consts, num_warps):
    k = sm90.build(fn, args, consts, num_warps)
    return {"ld": k.loads, "st": k.stores, "local": k.local, "spin": "%clock64" in k.ptx}

B, F = "*bf16", "*fp32"
V = 128256
out = {
    "rows": build(K._rows_kernel, dict(x_ptr=B, out_ptr=B, n_rows=32768, N=1024, sxr=1024, sxn=1,
                                       sor=1024, son=1),
                  dict(ROWS=8, TILES=2, BLOCK_N=1024, LOG=False, USE_INT64=False), 16),
    "looped": build(K._looped_kernel, dict(x_ptr=B, out_ptr=F, n_rows=2048, N=V, sxr=V, sxn=1,
                                           sor=V, son=1),
                    dict(BLOCK_R=4096, VEC=8, LOG=True, USE_INT64=False, FFMA_LIMIT=0.0), 32),
    "staggered": build(K._looped_kernel, dict(x_ptr=B, out_ptr=B, n_rows=4096, N=V, sxr=V, sxn=1,
                                              sor=V, son=1, delay=8016),
                       dict(BLOCK_R=4096, VEC=8, LOG=False, USE_INT64=False, FFMA_LIMIT=4096.0,
                            STAGGER_STEPS=4), 32),
    "coop": build(K._coop_kernel, dict(x_ptr=B, out_ptr=B, ws_ptr=F, cnt_ptr="*i32", n_rows=4096,
                                       N=V, G=16, spin=65536, sxr=V, sxn=1, sor=V, son=1),
                  dict(BLOCK=8192, FB=1024, G_POW2=16, LOG=False, USE_INT64=False), 8),
    "split": build(K._split_partials_kernel, dict(x_ptr=B, out_ptr=B, ws_ptr=F, n_rows=32, N=V, C=16,
                                                  sxr=V, sxn=1),
                   dict(CHUNK=8192, USE_INT64=True), 16),
    "finish": build(K._split_finish_kernel, dict(x_ptr=B, out_ptr=B, ws_ptr=F, n_rows=32, N=V, C=16,
                                                 sxr=V, sxn=1, sor=V, son=1),
                    dict(CHUNK=8192, C_POW2=16, LOG=False, USE_INT64=False), 16),
    "strided": build(K._strided_kernel, dict(x_ptr=F, out_ptr=F, n_outer=1, N=4800, inner=4800,
                                             n_iblk=300, sxo=4800 * 4800, sxn=4800, sxi=1,
                                             soo=4800 * 4800, son=4800, soi=1),
                     dict(BLOCK_N=512, BLOCK_I=16, LOOPED=True, LOG=False, USE_INT64=False), 16),
}
json.dump(out, sys.stdout)
"""


def test_kernels_build_for_sm90_with_16_byte_accesses():
    """Each kernel compiles for sm_90 (ptxas included) the way the launcher specialises it,
    and every global load and store of a contiguous row is one 16-byte vector; the looped
    kernels carry their L2 eviction hints, the coop kernel none on its chunk. Compiled in a
    fresh process: under the interpreter, triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    v4 = lambda ops: [op for op in ops if not op.endswith(".v4.b32")]  # the other accesses
    for name, k in built.items():
        assert k["ld"] and k["st"] and k["local"] == 0, (name, k)
        assert len(v4(k["ld"])) < len(k["ld"]), (name, k)
    for name in ("rows", "looped", "staggered", "strided"):
        assert not v4(built[name]["ld"]) and not v4(built[name]["st"]), built[name]
    # the staggered start is a spin on the cycle counter, built only where asked for
    assert [name for name, k in built.items() if k["spin"]] == ["staggered"]
    # split: a chunk in 16-byte loads, its (max, sum) in two scalar stores; finish: the
    # row's partials in two scalar loads, the chunk in 16-byte loads and stores.
    assert len(v4(built["split"]["st"])) == 2 and len(v4(built["finish"]["ld"])) == 2
    assert not v4(built["finish"]["st"])
    # coop: its chunk in 16-byte loads and stores, its (max, sum) in two scalar stores, the
    # arrival count polled with an acquiring load; the chunk, read once and held in
    # registers, carries no evict_first hint (it measured slower with one).
    assert len(v4(built["coop"]["st"])) == 2
    assert any(op.endswith(".v4.b32") for op in built["coop"]["ld"])
    assert not any("evict_first" in op for op in built["coop"]["ld"]), built["coop"]["ld"]
    for name in ("looped", "staggered", "strided"):
        assert any("evict_last" in op for op in built[name]["ld"]), built[name]
        assert all("evict_first" in op for op in built[name]["st"]), built[name]


# ============================================================================ the ops

@pytest.mark.parametrize("cls, log", [(SoftmaxFwdOp, False), (LogSoftmaxFwdOp, True)],
                         ids=["softmax", "log_softmax"])
def test_ops_compute_torch_softmax(cls, log):
    fn = torch.log_softmax if log else torch.softmax
    x = _x((3, 5, 7), torch.bfloat16, seed=11)
    for dim in (-1, 0, 1, -3):
        y = cls(dim)(x)
        assert y.dtype == torch.bfloat16 and y.shape == x.shape
        _close(y, fn(x.double(), dim))
    for dt in (torch.float32, "float32"):
        op = cls(1, dtype=dt)
        y = op(x)
        assert y.dtype == torch.float32
        _close(y, fn(x.double(), 1))
    # fp32 in, bf16 out: the input is rounded to bf16 first
    xf = _x((4, 33), seed=12)
    _close(cls(-1, dtype=torch.bfloat16)(xf), fn(xf.bfloat16().double(), -1))


def test_op_record_and_roofline():
    x = _x((6, 10, 4), H)
    op = LogSoftmaxFwdOp(-2, dtype=torch.float32)
    op(x)
    rec = op.last_call
    assert rec.indices["axis"] == 1 and rec.indices["rows"] == 24 and rec.indices["S"] == (6, 10, 4)
    assert rec.indices["dtype"] == "float32" and rec.indices["T"] == "float16"
    assert rec.tensors["output"].dtype == "float32"
    assert op.eval_roofline() == (5 * 240 + 24, 240 * 2 + 240 * 4)
    sm = SoftmaxFwdOp(0)
    sm(x)
    assert sm.last_call.indices["axis"] == 0 and sm.eval_roofline() == (5 * 240, 240 * 4)


def test_op_picks_the_triton_kernel():
    op = SoftmaxFwdOp(-1)
    for dev in ("cuda", DEV):
        call = SoftmaxCall("bfloat16", "float32", False, device=torch.device(dev))
        assert op.key_for("softmax", call) == "softmax_triton"
    call = SoftmaxCall("float16", "float16", True, device=torch.device("mps"))
    assert op.key_for("softmax", call) == "softmax_reference"


def test_op_rejects_calls_the_spec_refuses():
    op = SoftmaxFwdOp(2)
    with pytest.raises(SignatureError) as ei:
        op(_x((3, 4)))
    expect_error(ei, SignatureError, "SoftmaxFwdOp", "signature.shape_rules.1",
                 "refinement `-len(S) <= dim < len(S)` does not hold with S=(3, 4), dim=2",
                 "bound so far: T=float32, S=(3, 4), axis=2")
    with pytest.raises(SignatureError) as ei:
        LogSoftmaxFwdOp(-3)(_x((3, 4)))
    expect_error(ei, SignatureError, "LogSoftmaxFwdOp", "signature.shape_rules.1",
                 "refinement `-len(S) <= dim < len(S)`", "S=(3, 4)", "axis=-1")
    with pytest.raises(SignatureError) as ei:
        SoftmaxFwdOp(0)(torch.tensor(1.0, device=DEV))
    expect_error(ei, SignatureError, "SoftmaxFwdOp", "signature.shape_rules.0",
                 "refinement `len(S) >= 1`", "S=()")
    for bad in (torch.float64, torch.int32):
        with pytest.raises(SignatureError) as ei:
            SoftmaxFwdOp(-1)(torch.ones(2, 3, dtype=bad, device=DEV))
        expect_error(ei, SignatureError, "SoftmaxFwdOp", "signature.inputs.input.dtype",
                     "input input, dtype T", "expected bfloat16 | float16 | float32",
                     f"got {str(bad).removeprefix('torch.')}")
    with pytest.raises(SignatureTypeError) as ei:
        SoftmaxFwdOp(-1)([1.0, 2.0])
    expect_error(ei, SignatureTypeError, "SoftmaxFwdOp", "signature.inputs.input",
                 "expected a torch.Tensor, got list")


def test_op_rejects_bad_parameters_at_construction():
    for bad in (torch.float64, "int8"):
        with pytest.raises(SignatureError) as ei:
            SoftmaxFwdOp(1, dtype=bad)
        expect_error(ei, SignatureError, "SoftmaxFwdOp", "signature.params.dtype",
                     "parameter `dtype` has type `float16 | bfloat16 | float32 | None`")
    for bad in (1.5, True, None):
        with pytest.raises(SignatureTypeError) as ei:
            LogSoftmaxFwdOp(bad)
        expect_error(ei, SignatureTypeError, "LogSoftmaxFwdOp", "signature.params.dim",
                     "parameter `dim` has type `int`", f"got {bad!r}")
    with pytest.raises(TypeError):
        SoftmaxFwdOp(1, torch.float32)  # dtype is keyword-only, as in torch.softmax


def test_op_empty_input_runs_no_kernel(monkeypatch):
    op = LogSoftmaxFwdOp(-1, dtype=torch.float32)

    def fail(*args, **kwargs):
        raise AssertionError("a kernel ran on an empty call")

    monkeypatch.setattr(op, "forward", fail)
    y = op(torch.empty(0, 5, dtype=torch.bfloat16, device=DEV))
    assert y.shape == (0, 5) and y.dtype == torch.float32
    assert op.last_call.tensors["output"].dtype == "float32"


def test_op_output_shares_no_storage_and_leaves_the_input():
    x = _x((4, 9), seed=13)
    before = x.clone()
    y = SoftmaxFwdOp(-1)(x)
    assert y.data_ptr() != x.data_ptr() and torch.equal(x, before) and y.is_contiguous()


# ============================================================================ compile boundary

def test_operator_names_and_opcheck():
    assert SoftmaxFwdOp.compile_op_names == ("opspec::softmax_fwd_op",)
    assert LogSoftmaxFwdOp.compile_op_names == ("opspec::softmax_log_softmax_fwd_op",)
    assert str(torch.ops.opspec.softmax_fwd_op.default._schema) == \
        "opspec::softmax_fwd_op(Tensor input, str key) -> Tensor"
    cases_ = [(SoftmaxFwdOp(-1), torch.ops.opspec.softmax_fwd_op.default, _x((3, 8))),
              (SoftmaxFwdOp(0, dtype=torch.float32), torch.ops.opspec.softmax_fwd_op.default,
               _x((5, 2), H)),
              (LogSoftmaxFwdOp(1), torch.ops.opspec.softmax_log_softmax_fwd_op.default,
               _x((2, 6, 3), torch.bfloat16))]
    for op, operator, x in cases_:
        torch.library.opcheck(operator, (x, op._opspec_key))
        torch.testing.assert_close(operator(x, op._opspec_key), op(x))


def test_cold_compile_fullgraph():
    torch._dynamo.reset()
    sm, lsm = SoftmaxFwdOp(-1), LogSoftmaxFwdOp(0, dtype=torch.float32)
    graphs = []

    def backend(gm, example_inputs):  # inductor, keeping Dynamo's graph; no FX graph cache
        from torch._inductor import config
        from torch._inductor.compile_fx import compile_fx

        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    fn = torch.compile(lambda x: sm(x) * 2 + lsm(x), backend=backend, fullgraph=True)
    x = _x((4, 16), H)
    y = fn(x)
    targets = [str(n.target).removesuffix(".default") for g in graphs for n in g.graph.nodes
               if n.op == "call_function"]
    assert targets.count("opspec.softmax_fwd_op") == 1
    assert targets.count("opspec.softmax_log_softmax_fwd_op") == 1
    torch.testing.assert_close(y, sm(x) * 2 + lsm(x))
    assert y.dtype == torch.float32
    with pytest.raises(Exception) as ei:  # the generated checks run while tracing
        fn(torch.tensor(1.0, dtype=H, device=DEV))
    assert "signature.shape_rules.0" in str(ei.value)


# ============================================================================ workloads

def _all_cases():
    return [pytest.param(cls, c, id=f"{cls.__name__}-{c.id}")
            for cls in (SoftmaxFwdOp, LogSoftmaxFwdOp) for c in cases(cls)]


@pytest.mark.parametrize("cls, case", _all_cases())
def test_workload_cases_instantiate_on_meta(cls, case):
    op = case.construct(cls)
    (x,) = case.inputs("meta")
    assert x.device.type == "meta" and x.is_contiguous() and x.dim() >= 1
    ind = op.check_call(x)
    assert ind["S"] == case.values["S"] and ind["T"] == case.dtypes["T"]
    assert op.dim == case.params["dim"]


def test_workloads_cover_large_rows_and_a_non_last_axis():
    for cls in (SoftmaxFwdOp, LogSoftmaxFwdOp):
        traffic, non_last = [], []
        for c in cases(cls):
            (x,) = c.inputs("meta")
            out_dt = c.params.get("dtype") or x.dtype
            traffic.append(x.numel() * (x.element_size() + torch.empty(0, dtype=out_dt).element_size()))
            if c.params["dim"] % x.dim() != x.dim() - 1:
                non_last.append(c.id)
        assert max(traffic) >= 256 * 2**20 and sum(t >= 256 * 2**20 for t in traffic) >= 3
        assert non_last, cls
    ids = [c.id for c in cases(SoftmaxFwdOp)]
    assert "llama3-vocab-decode-bfloat16-float32" in ids and len(ids) == len(set(ids))
