"""The strided softmax path (kernels/softmax.py, ``dim`` not the last axis) under every plan
its tuning (``StridedTuning``) can make and that benchmarks/reduction_sweep.py times: the
register tile with and without a remainder tile (N not a power of two), whole and masked
strips; long columns cut into chunks, cooperating in one launch or over two (partials,
then the finish), and the former two-pass loop. Through the real launcher
(`softmax_triton`), on CPU through Triton's interpreter (tests/conftest.py): every dtype
and cast, log or not, odd sizes, strided and copied views, special values, 64-bit offsets
and empty tensors.

(The rows / coop / looped / split kernels are tested in tests/test_softmax.py.)
"""

from __future__ import annotations

import math

import pytest
import torch

from opspec.kernels import softmax as K
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.softmax import SoftmaxPlan, softmax_plan, softmax_triton

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=2e-5, atol=2e-6),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}

# Masked lanes compute exp/log of -inf and NaN in numpy under the interpreter; never stored.
pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.skipif(not (TRITON_INTERPRETED or torch.cuda.is_available()),
                       reason="the Triton kernels need CUDA or TRITON_INTERPRET=1"),
]

T = K.STRIDED
TUNINGS = {
    "table": T,
    "32B": T._replace(col_bytes=32),
    "256B-16K": T._replace(col_bytes=256, tile_elems=16384),
    "16el": T._replace(elems_per_thread=16),
    "padded": T._replace(split_remainder=False, tile_elems=16384),
}


def _x(shape, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)


def _expected(x, dim, out_dtype=None, log=False):
    dt = out_dtype or x.dtype
    x64 = x.to(dt).double()
    y = torch.log_softmax(x64, dim) if log else torch.softmax(x64, dim)
    return y.to(dt)


def _view3(shape, dim):
    d = dim % len(shape)
    return math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])


def _plan(x, dim, tuning, *, max_reg=K.MAX_REG_ELEMS, sm=2):
    outer, n, inner = _view3(x.shape, dim)
    return K._strided_plan(outer, n, inner, x.element_size(), sm, max_reg, tuning)


def _run(x, dim, plan=None, out_dtype=None, log=False):
    out = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
    assert softmax_triton(x, dim, out, log, plan=plan) is out
    return out


def _close(x, dim, plan=None, out_dtype=None, log=False):
    got = _run(x, dim, plan, out_dtype, log)
    want = _expected(x, dim, out_dtype, log)
    torch.testing.assert_close(got.float().cpu(), want.float().cpu(), equal_nan=True,
                               **TOL[got.dtype])
    return got


def _split(n, inner, outer, bn, bi, warps=1, coop=False):
    chunks = math.ceil(n / bn)
    return SoftmaxPlan("strided", bn, warps, outer * math.ceil(inner / bi) * chunks,
                       block_inner=bi, chunks=chunks, looped=True, coop=coop)


# ============================================================================ plans

def test_plans_of_the_workload_shapes():
    # 150 classes: a 128-row tile and a 32-row remainder, 128-byte strips, one warp (160
    # elements a thread: the table aims at 128)
    p = softmax_plan(16, 150, 128 * 128, 4)
    assert (p.kind, p.looped, p.block, p.block_inner, p.num_warps, p.grid) == (
        "strided", False, 128, 32, 1, 16 * 512)
    # bf16: 128 + 32 rows of 64-byte strips (160 x 64 would pass the 8192-element tile)
    p = softmax_plan(16, 150, 128 * 128, 2)
    assert (p.block, p.block_inner, p.num_warps) == (128, 32, 1)
    # a power-of-two N: one tile, 128-byte strips
    p = softmax_plan(1, 64, 32 * 4096, 2)
    assert (p.kind, p.looped, p.block, p.block_inner, p.num_warps, p.grid) == (
        "strided", False, 64, 64, 1, 2048)
    # 4800 rows: chunks of 256 rows x 32 columns, 19 per strip cooperating in one launch,
    # 2 warps (128 a thread)
    p = softmax_plan(1, 4800, 4800, 4)
    assert (p.looped, p.coop, p.block, p.block_inner, p.chunks, p.grid, p.num_warps) == (
        True, True, 256, 32, 19, 150 * 19, 2)
    # ... or over two launches; 8 warps where the cooperating chunks aim at 32 a thread
    p = _plan(torch.empty(1, 4800, 4800), 1, T._replace(long_coop=False), sm=132)
    assert (p.coop, p.chunks, p.num_warps) == (False, 19, 2)
    p = _plan(torch.empty(1, 4800, 4800), 1, T._replace(coop_elems_per_thread=32), sm=132)
    assert (p.coop, p.chunks, p.num_warps) == (True, 19, 8)
    # more chunks a strip than may cooperate: two launches
    p = _plan(torch.empty(1, 4800, 4800), 1, T._replace(coop_max_chunks=18), sm=132)
    assert (p.coop, p.chunks) == (False, 19)
    # few programs: strips narrow to 32 bytes
    p = softmax_plan(3, 150, 40, 4)
    assert p.block_inner == 8 and not p.looped
    # the former two-pass loop is a tuning away
    p = _plan(torch.empty(1, 4800, 4800), 1, T._replace(split_long=False), sm=132)
    assert p.looped and p.chunks == 1 and p.block_inner == 16


# ============================================================================ register tile

TILE_SHAPES = [((4, 37, 33), 1), ((17, 3), 0), ((3, 5, 2, 7), 1), ((2, 64, 40), 1),
               ((2, 150, 24), 1), ((5, 9, 130), 1), ((2, 3, 4), -2)]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(TUNINGS))
def test_tile_variants(name, dtype, log):
    for k, (shape, dim) in enumerate(TILE_SHAPES):
        x = _x(shape, dtype, seed=k)
        plan = _plan(x, dim, TUNINGS[name])
        assert plan.kind == "strided" and not plan.looped
        _close(x, dim, plan, log=log)


def test_tile_remainder_and_even_strips():
    # N = a power of two plus 1..pow2-1 rows: the remainder tile; inner a multiple of the
    # strip (no column mask in the first tile) or not
    for n in (2, 3, 5, 17, 31, 33, 96, 150):
        for inner in (16, 24, 64):
            x = _x((2, n, inner), seed=n + inner)
            plan = _plan(x, 1, T)
            assert plan.block == (n if n & (n - 1) == 0 else 1 << (n.bit_length() - 1))
            _close(x, 1, plan)
            _close(x, 1, plan, log=True)


# ============================================================================ long columns

@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("coop", [True, False], ids=["coop", "two-launches"])
def test_long_column_kernels(dtype, log, coop):
    # Under the interpreter (spin 0) every cooperating chunk but a strip's last walks the
    # strip itself for the statistics; the last reads the others' partials.
    x = _x((3, 150, 40), dtype, seed=3)
    plan = _plan(x, 1, T._replace(long_coop=coop), max_reg=256)
    assert plan.looped and plan.coop == coop and plan.chunks > 1
    assert plan.block * plan.block_inner <= 256
    _close(x, 1, plan, log=log)
    # the chunk edges: N a multiple of the chunk, one more, one less
    for n in (63, 64, 65, 129):
        y = _x((2, n, 20), dtype, seed=n)
        _close(y, 1, _split(n, 20, 2, 16, 8, coop=coop), log=log)
        _close(y, 1, _split(n, 20, 2, 32, 16, warps=2, coop=coop), log=log)


def test_coop_counts_and_partials():
    # The launch's tickets and arrival counts: a plan run twice on new tensors gives the
    # same result (the counters are new each call), and one chunk a strip (C = 1) needs
    # no peer.
    x = _x((2, 70, 24), seed=11)
    for plan in (_split(70, 24, 2, 16, 8, coop=True), _split(70, 24, 2, 128, 8, coop=True)):
        first = _close(x, 1, plan)
        torch.testing.assert_close(_run(x, 1, plan), first, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_former_two_pass_loop(dtype):
    x = _x((3, 150, 40), dtype, seed=4)
    plan = _plan(x, 1, T._replace(split_long=False), max_reg=256)
    assert plan.looped and plan.chunks == 1 and plan.block < 150
    _close(x, 1, plan)
    _close(x, 1, plan, log=True)


# ======================================================================= layouts, casts, values

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_views(dtype):
    base = _x((12, 40, 6), dtype, seed=5)
    for x, dim in ((base[:, ::2], 1),                 # a step in the softmax axis
                   (base[::3, 5:, 1:], 1),            # offsets in every axis
                   (base.transpose(0, 1), 1),         # the outer axis is the strided one
                   (base.permute(2, 1, 0), 0),        # a permuted tensor (copied)
                   (base[:, :, :1].expand(12, 40, 5), 0)):  # a broadcast axis
        for plan in (None, _plan(x.contiguous(), dim, T, max_reg=64)):
            if plan is not None and plan.kind != "strided":
                continue
            _close(x, dim, plan)
            _close(x, dim, plan, log=True)


@pytest.mark.parametrize("src, dst", [(torch.float32, torch.bfloat16),
                                      (torch.bfloat16, torch.float32),
                                      (torch.float16, torch.float32),
                                      (torch.float32, torch.float16)])
def test_output_dtype_casts_the_input_first(src, dst):
    x = _x((3, 37, 20), src, seed=6)
    for plan in (None, _plan(x, 1, T, max_reg=128)):
        _close(x, 1, plan, out_dtype=dst)
        _close(x, 1, plan, out_dtype=dst, log=True)


def test_special_values():
    x = _x((2, 40, 12), seed=7)
    x[0, :, 1] = -math.inf              # a column of -inf only: NaN, as torch
    x[0, :20, 2] = -math.inf            # half of one (the whole first chunk in the split)
    x[1, 5, 3] = math.inf               # an inf: NaN in its column
    x[1, 7, 4] = math.nan               # a NaN: NaN in its column
    x[1, :, 5] = 1e30                   # large but finite
    for plan in (None, _plan(x, 1, T, max_reg=128), _split(40, 12, 2, 16, 8),
                 _split(40, 12, 2, 16, 8, coop=True),
                 _plan(x, 1, T._replace(split_long=False), max_reg=128)):
        for log in (False, True):
            got = _run(x, 1, plan, log=log)
            want = _expected(x, 1, log=log)
            torch.testing.assert_close(got, want, equal_nan=True, **TOL[torch.float32])


def test_int64_offsets(monkeypatch):
    monkeypatch.setattr(K, "_INT32_LIMIT", 10)
    x = _x((3, 37, 20), seed=8)
    for plan in (None, _plan(x, 1, T, max_reg=128), _split(37, 20, 3, 16, 8),
                 _split(37, 20, 3, 16, 8, coop=True),
                 _plan(x, 1, T._replace(split_long=False), max_reg=128)):
        _close(x, 1, plan)
        _close(x, 1, plan, log=True)


@pytest.mark.parametrize("shape, dim", [((2, 0, 4), 0), ((0, 3, 4), 1), ((2, 3, 0), 1)])
def test_empty_tensors_launch_nothing(shape, dim):
    x = torch.empty(shape, dtype=torch.bfloat16, device=DEV)
    out = torch.empty(shape, dtype=torch.bfloat16, device=DEV)
    assert softmax_triton(x, dim, out) is out


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, sys
import opspec.kernels.softmax as K
import sm90_build as sm90

def build(fn, args, consts, num_warps):
    k = sm90.build(fn, args, consts, num_warps)
    return {"ld": k.loads, "st": k.stores, "local": k.local, "in_flight": k.loads_in_flight(),
            "regs": k.registers}

B, F = "*bf16", "*fp32"
def tile(dt, N, inner, bn, bn2, bi, warps, log):
    return build(K._strided_tile_kernel,
                 dict(x_ptr=dt, out_ptr=dt, N=N, inner=inner, n_iblk=inner // bi, sxo=N * inner,
                      sxn=inner, sxi=1, soo=N * inner, son=inner, soi=1),
                 dict(BLOCK_N=bn, BLOCK_N2=bn2, BLOCK_I=bi, WHOLE=True, LOG=log,
                      USE_INT64=False), warps)
def split(finish):
    return build(K._strided_split_kernel,
                 dict(x_ptr=F, out_ptr=F, ws_ptr=F, N=4800, inner=4800, n_iblk=150, C=19,
                      ws_half=19 * 4800, sxo=4800 * 4800, sxn=4800, sxi=1, soo=4800 * 4800,
                      son=4800, soi=1),
                 dict(BLOCK_N=256, BLOCK_I=32, C_POW2=32, FINISH=finish, LOG=False,
                      USE_INT64=False), 8)
def coop(log, warps):
    return build(K._strided_coop_kernel,
                 dict(x_ptr=F, out_ptr=F, ws_ptr=F, cnt_ptr="*i32", N=4800, inner=4800,
                      n_iblk=150, C=19, ws_half=19 * 4800, spin="i32", sxo=4800 * 4800,
                      sxn=4800, sxi=1, soo=4800 * 4800, son=4800, soi=1),
                 dict(BLOCK_N=256, BLOCK_I=32, C_POW2=32, FB=32, LOG=log, USE_INT64=False),
                 warps)
out = {
    "ade20k-f32": tile(F, 150, 16384, 128, 32, 32, 4, False),
    "ade20k-bf16-log": tile(B, 150, 16384, 128, 32, 32, 4, True),
    "dim0-bf16-log": tile(B, 64, 131072, 64, 0, 64, 4, True),
    "split-partials": split(False),
    "split-finish": split(True),
    "coop": coop(False, 2),
    "coop-log": coop(True, 2),
}
json.dump(out, sys.stdout)
"""


def test_strided_kernels_build_for_sm90():
    """The workload rows' strided launches compile for sm_90 (ptxas included) as the
    launcher specialises them: 16-byte loads and stores (the partials' per-column stores
    aside), no local memory, a thread's loads in flight together, and few enough registers
    for 4 programs of 4 warps per SM. Compiled in a fresh process (the interpreter patches
    triton.language)."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT)
    for name, k in built.items():
        if name.startswith("coop"):
            continue
        assert k["local"] == 0 and set(k["ld"]) == {"ld.global.v4.b32"}, (name, k)
        if name != "split-partials":
            assert set(k["st"]) == {"st.global.v4.b32"}, (name, k)
        assert k["in_flight"] >= 4, (name, k)
    # The cooperating chunks (the table's 2 warps, 128 fp32 a thread): most of the chunk's
    # 32 vectors a thread in flight together (28 in the Triton 3.9 build; all 32 while the
    # loads carried evict_first, which measured slower on the H200), with no cache hint;
    # the fallback's vectors; one acquiring poll of the arrival count; the chunk stored as
    # vectors beside the two scalar stores of the partials; no spill at up to 255
    # registers (4 programs an SM).
    for name in ("coop", "coop-log"):
        k = built[name]
        assert k["local"] == 0 and k["in_flight"] >= 24, (name, k)
        assert set(k["ld"]) == {"ld.global.v4.b32", "ld.global.gpu.acquire.b32"}, (name, k)
        assert k["ld"].count("ld.global.v4.b32") >= 32, (name, k)
        assert sorted(k["st"]) == ["st.global.b32"] * 2 + ["st.global.v4.b32"] * 32, (name, k)
    # fp32: 8 of a thread's 10 vectors (128 + 32 rows x 32 columns at 4 warps) in flight
    assert built["ade20k-f32"]["in_flight"] >= 8, built["ade20k-f32"]
    for name in ("ade20k-f32", "ade20k-bf16-log", "dim0-bf16-log"):
        assert built[name]["regs"] <= 128, (name, built[name])
