"""The binary family (AddFwdOp, MulFwdOp): the Triton kernel against its torch reference on
CPU through Triton's interpreter, the ops' results and errors, their operators, one cold
`torch.compile`, the workload rows and the bench entries.

Without CUDA, conftest.py sets TRITON_INTERPRET=1 before triton is imported and every
tensor lives on the CPU; sizes are kept small, the interpreter runs each program through
numpy. With CUDA (and no interpreter) the same tests run the compiled kernels on the GPU.
The interpreter converts float32 to bfloat16 by truncation (a GPU rounds to nearest), so
bfloat16 results are compared within a bfloat16 tolerance, never exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

import opspec.kernels.binary as KB
from opspec.kernels.activation import StreamConfig
from opspec.kernels.binary import (
    BINARY_TABLE, binary_blocks, binary_config, binary_reference, binary_triton,
    broadcast_geometry,
)
from opspec.kernels.binary_impl import BinaryCall, BinaryReferenceKernel
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.ops import AddFwdOp, MulFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

#: Where the Triton kernels run in this test process: the GPU, or the CPU through the interpreter.
DEV = torch.device("cuda" if torch.cuda.is_available() and not TRITON_INTERPRETED else "cpu")
F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
FLOATS = [F32, F16, BF16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
TOL = {F64: dict(rtol=1e-12, atol=1e-12), F32: dict(rtol=1e-6, atol=1e-6),
       F16: dict(rtol=1e-3, atol=1e-3), BF16: dict(rtol=1e-2, atol=1e-2)}


def _t(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(dtype)
    else:
        info = torch.iinfo(dtype)
        t = torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)
    return t.to(DEV)


def _e(*shape, dtype=F32):
    return torch.empty(shape, dtype=dtype, device=DEV)


def _triton(op, a, b, alpha=1):
    dt = torch.result_type(a, b)
    out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), dtype=dt, device=DEV)
    assert binary_triton(op, a, b, out, alpha) is out
    return out


def _torch(op, a, b, alpha=1):
    return torch.add(a, b, alpha=alpha) if op == "add" else torch.mul(a, b)


def _close(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.is_floating_point:
        torch.testing.assert_close(got, want, **TOL[got.dtype])
    else:
        assert torch.equal(got, want)


# ============================================================================ geometry, tiles

def test_geometry_collapses_what_stays_affine():
    x = torch.empty(4, 6, 8)
    # same shape, contiguous: one flat axis
    assert broadcast_geometry((4, 6, 8), x, x) == [(192, 1, 1)]
    # [T, H] + [H]: rows of H, the bias row-broadcast
    assert broadcast_geometry((5, 8), torch.empty(5, 8), torch.empty(8)) == [(5, 8, 0), (8, 1, 1)]
    # [B, H, S, S] + [B, 1, S, S]: the S, S axes merge, the heads do not
    assert broadcast_geometry((2, 3, 4, 4), torch.empty(2, 3, 4, 4), torch.empty(2, 1, 4, 4)) \
        == [(2, 48, 16), (3, 16, 0), (16, 1, 1)]
    # [T, H] * [T, 1]: the column axis is broadcast for b
    assert broadcast_geometry((5, 8), torch.empty(5, 8), torch.empty(5, 1)) == [(5, 8, 1), (8, 1, 0)]
    # size-1 axes vanish; a one-element output has no axes
    assert broadcast_geometry((1, 5, 1), torch.empty(1, 5, 1), torch.empty(5, 1)) == [(5, 1, 1)]
    assert broadcast_geometry((), torch.empty(()), torch.empty(())) == []
    # a transposed operand keeps its strides; nothing merges across it
    t = torch.empty(8, 5).t()
    assert broadcast_geometry((5, 8), t, torch.empty(5, 8)) == [(5, 1, 8), (8, 5, 1)]


def test_tiles_follow_the_shape():
    cfg = binary_config(4096 * 4096, 2)
    assert cfg.block == 1024 and cfg.num_warps == 4
    # one row: the whole tile along the columns
    assert binary_blocks(1, 4096 * 4096, cfg) == (1, 1024, 4)
    # rows whose length is a multiple of a power of two: no padded columns
    assert binary_blocks(4096, 7168, cfg) == (1, 1024, 4)
    assert binary_blocks(4096, 14336, cfg) == (1, 1024, 4)
    assert binary_blocks(4096, 4608, cfg) == (2, 512, 4)
    # 4-byte elements: the same 1024 elements; 8-byte ones 512
    assert binary_config(1 << 26, 4).block == 1024 and binary_config(1 << 26, 8).block == 512
    # an odd row length: the fewest padded columns
    assert binary_blocks(4096, 1000, cfg) == (1, 1024, 4)
    assert binary_blocks(4096, 4097, cfg) == (8, 128, 4)
    # a tile clipped to a small problem keeps the elements per thread (fewer warps)
    assert binary_blocks(2, 100, cfg) == (2, 128, 1)
    # a larger tile spreads over the rows
    assert binary_blocks(4096, 4608, StreamConfig(4096, 8)) == (8, 512, 8)
    for eb in (1, 2, 4, 8):                # every element size has a row for every count
        assert binary_config(2**40, eb)
    for eb, max_n, c in BINARY_TABLE:
        assert c.block & (c.block - 1) == 0 and c.num_warps in (1, 2, 4, 8, 16)


def test_plans_pick_the_flat_kernel_for_same_shape_calls():
    flat, tiled = KB._binary_flat_kernel, KB._binary_kernel
    (L,) = KB._plan((64, 48), (64, 48), (48, 1), (64, 48), (48, 1), 2)
    assert L.kernel is flat and L.constexprs["EVEN"] is True and L.constexprs["BLOCK"] == 1024
    (L,) = KB._plan((63, 48), (63, 48), (48, 1), (63, 48), (48, 1), 2)
    assert L.kernel is flat and L.constexprs["EVEN"] is False
    (L,) = KB._plan((1000,), (1000,), (1,), (), (), 4)               # a 0-d operand
    assert L.kernel is flat and L.constexprs["B_SCALAR"] and not L.constexprs["A_SCALAR"]
    (L,) = KB._plan((64, 48), (64, 48), (48, 1), (48,), (1,), 2)     # a bias: 2-D, reused b
    assert L.kernel is tiled and L.constexprs["B_POLICY"] == "evict_last"
    assert L.constexprs["A_POLICY"] == ""
    (L,) = KB._plan((64, 48), (64, 48), (48, 1), (48,), (1,), 2,
                    StreamConfig(1024, 4, evict_first=True))
    assert L.constexprs["A_POLICY"] == "evict_first" and L.constexprs["B_POLICY"] == ""
    (L,) = KB._plan((48, 64), (64, 48), (1, 64), (48, 64), (64, 1), 2)  # transposed a
    assert L.kernel is tiled


# ============================================================================ the kernel

@pytest.mark.parametrize("dtype", FLOATS + [F64], ids=str)
@pytest.mark.parametrize("shapes", [((1,), (1,)), ((3,), (3,)), ((17, 33), (33,)),
                                    ((1000,), ()), ((2, 3, 5, 7), (2, 1, 5, 7))], ids=str)
def test_triton_matches_reference_floats(shapes, dtype):
    a, b = _t(shapes[0], dtype, 1), _t(shapes[1], dtype, 2)
    for op, alpha in (("add", 1), ("add", -0.5), ("mul", 1)):
        got = _triton(op, a, b, alpha)
        _close(got, binary_reference(op, a, b, alpha, dtype))
        _close(got, _torch(op, a, b, alpha))


@pytest.mark.parametrize("pair", [(F16, BF16), (BF16, F32), (F16, F32), (F32, F64),
                                  (BF16, F64)], ids=str)
def test_triton_promotes_like_torch(pair):
    a, b = _t((4, 9), pair[0], 1), _t((9,), pair[1], 2)
    for op, alpha in (("add", 3), ("add", 0.25), ("mul", 1)):
        got = _triton(op, a, b, alpha)
        assert got.dtype == torch.result_type(a, b)
        _close(got, _torch(op, a, b, alpha))
    # a 0-d operand of a wider dtype takes no part: fp16[N] + fp64[] is float16
    s = torch.tensor(1.0 / 3, dtype=F64, device=DEV)
    got = _triton("add", _t((7,), F16), s)
    assert got.dtype == F16
    _close(got, torch.add(_t((7,), F16), s))


@pytest.mark.parametrize("pair", [(torch.uint8, torch.uint8), (torch.int8, torch.int8),
                                  (torch.uint8, torch.int8), (torch.int16, torch.int32),
                                  (torch.int32, torch.int32), (torch.int64, torch.int8)], ids=str)
def test_triton_integers_wrap_like_torch(pair):
    # Full-range operands: the products and sums overflow and wrap, exactly as torch's.
    a, b = _t((5, 11), pair[0], 1), _t((11,), pair[1], 2)
    for op, alpha in (("add", 1), ("add", -3), ("mul", 1)):
        got = _triton(op, a, b, alpha)
        assert torch.equal(got, _torch(op, a, b, alpha)), (op, alpha)
        assert torch.equal(got, binary_reference(op, a, b, alpha, got.dtype))
    # the most negative alpha an unsigned dtype accepts
    u = _t((6,), torch.uint8)
    assert torch.equal(_triton("add", u, u, -255), torch.add(u, u, alpha=-255))


def test_triton_alpha_conversions():
    a, b = _t((33,), F64, 1), _t((33,), F64, 2)
    # float64 math takes alpha at full precision (its IEEE bits), not rounded to fp32
    alpha = 1.0 / 3
    torch.testing.assert_close(_triton("add", a, b, alpha), a + alpha * b, rtol=1e-14, atol=1e-14)
    # an int alpha with float tensors, and a huge one (converted once, as torch does)
    x, y = _t((33,), F32, 1), _t((33,), F32, 2)
    _close(_triton("add", x, y, 7), torch.add(x, y, alpha=7))
    _close(_triton("add", x, y, 2**60 + 1), torch.add(x, y, alpha=2**60 + 1))
    # int64 math with an alpha past int32
    i, j = _t((9,), torch.int64, 1), _t((9,), torch.int64, 2)
    assert torch.equal(_triton("add", i, j, 2**40 + 3), torch.add(i, j, alpha=2**40 + 3))
    with pytest.raises(TypeError, match="alpha must be an int for integer tensors"):
        _triton("add", i, j, 0.5)
    with pytest.raises(ValueError, match="mul takes no alpha"):
        _triton("mul", x, y, 2)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_triton_non_contiguous_operands(dtype):
    base = _t((9, 40), dtype, 3)
    cases_ = [
        (base.t(), _t((40, 9), dtype, 4)),                    # transposed
        (base[:, 3:36], _t((9, 33), dtype, 5)),               # column slice (row stride 40)
        (base[::2, ::3], _t((14,), dtype, 6)),                # strided in both axes
        (_t((9, 1), dtype, 7).expand(9, 40), base),           # an expanded (stride 0) view
        (base[4:], base[:5]),                                 # storage offsets
    ]
    for a, b in cases_:
        for op in ("add", "mul"):
            _close(_triton(op, a, b, 2 if op == "add" else 1), _torch(op, a, b, 2 if op == "add" else 1))


def test_triton_deep_iteration_space_is_split():
    # Eight axes that cannot merge: more row axes than one launch takes (MAX_OUTER).
    a, b = _t((2, 3, 2, 3, 2, 3, 2, 3), F32, 1), _t((2, 1, 2, 1, 2, 1, 2, 1), F32, 2)
    assert len(broadcast_geometry(a.shape, a, b)) - 1 > KB.MAX_OUTER
    _close(_triton("add", a, b, 1.5), torch.add(a, b, alpha=1.5))
    _close(_triton("mul", b, a), b * a)


def test_triton_int64_offsets(monkeypatch):
    # The int64 index path, taken here by lowering the limit it is chosen by.
    monkeypatch.setattr(KB, "_INT32_LIMIT", 64)
    KB._plan.cache_clear()                     # plans made under the real limit
    a, b = _t((6, 50), BF16, 1), _t((6, 1), BF16, 2)
    _close(_triton("add", a, b, -1), torch.add(a, b, alpha=-1))
    _close(_triton("mul", a.t(), _t((50, 6), BF16, 3)), a.t() * _t((50, 6), BF16, 3))
    assert any(p.constexprs["USE_INT64"] for p in KB._plan(
        (6, 50), (6, 50), (50, 1), (6, 1), (1, 1), 2))
    KB._plan.cache_clear()


def test_triton_empty_and_checks():
    # empty: nothing is launched, out comes back as it is
    for a, b in ((_e(0, 5), _e(5)), (_e(3, 0), _e(1, 0))):
        out = _e(*torch.broadcast_shapes(a.shape, b.shape))
        assert binary_triton("add", a, b, out) is out
    out = _e(3, 4)
    with pytest.raises(ValueError, match="do not broadcast to out"):
        binary_triton("add", _e(3, 4), _e(5), out)
    with pytest.raises(ValueError, match="contiguous"):
        binary_triton("add", _e(3, 4), _e(3, 4), _e(4, 3).t())
    with pytest.raises(TypeError, match="all be floating or all integer"):
        binary_triton("add", _e(3), _e(3, dtype=torch.int32), out[0, :3])
    with pytest.raises(TypeError, match="binary kernels support"):
        binary_triton("mul", _e(3, dtype=torch.bool), _e(3, dtype=torch.bool),
                      _e(3, dtype=torch.bool))


def test_reference_kernel_writes_out():
    k = BinaryReferenceKernel(BinaryCall("add", "bfloat16", "float32", "float32"))
    a, b = _t((4, 6), BF16), _t((6,), F32)
    out = _e(4, 6)
    assert k.forward(a, b, out, 2) is out
    _close(out, torch.add(a, b, alpha=2))


# Layouts besides the table's, through the real launcher: small tiles (several rows a
# program, masked tails), a persistent grid with both cache hints, and the table itself.
# The SM count is 2 in these tests (`few_sms`), so that a persistent grid (1 or 3
# programs per SM) loops over many tiles at interpreter sizes.
VARIANTS = [None, StreamConfig(128, 1), StreamConfig(64, 2, persist=1, evict_first=True,
                                                     evict_last=True),
            StreamConfig(128, 4, persist=3, evict_last=True)]
VARIANT_IDS = ["table", "tile128", "persist1", "persist3"]


@pytest.fixture
def few_sms(monkeypatch):
    import opspec.kernels.activation as A
    monkeypatch.setattr(A, "sm_count", lambda device: 2)


@pytest.mark.usefixtures("few_sms")
@pytest.mark.parametrize("config", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("dtype", FLOATS + [F64, torch.int8, torch.int64], ids=str)
def test_variants_match_reference(dtype, config):
    shapes = [((2500,), (2500,)), ((2048,), (2048,)), ((7,), ()), ((), ()),
              ((37, 45), (45,)), ((45,), (37, 45)), ((40, 64), (40, 1)),
              ((2, 3, 5, 17), (2, 1, 5, 17))]
    for i, (sa, sb) in enumerate(shapes):
        a, b = _t(sa, dtype, 2 * i), _t(sb, dtype, 2 * i + 1)
        for op, alpha in (("add", 1), ("add", 3), ("mul", 1)):
            out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), dtype=dtype, device=DEV)
            assert binary_triton(op, a, b, out, alpha, config) is out
            _close(out, binary_reference(op, a, b, alpha, dtype))


@pytest.mark.usefixtures("few_sms")
@pytest.mark.parametrize("config", VARIANTS, ids=VARIANT_IDS)
def test_variants_strided_mixed_empty(config):
    a = _t((60, 50), F32, 1).t()                       # transposed operand
    b = _t((50, 120), BF16, 2)[:, ::2]                 # every other column
    out = torch.empty(50, 60, dtype=F32, device=DEV)
    binary_triton("add", a, b, out, -0.5, config)
    _close(out, torch.add(a, b, alpha=-0.5))
    deep = _t((2, 1, 3, 1, 2, 1, 3), F16, 3)           # more row axes than one launch takes
    other = _t((1, 2, 1, 3, 1, 2, 1), F16, 4)
    out = torch.empty(torch.broadcast_shapes(deep.shape, other.shape), dtype=F16, device=DEV)
    binary_triton("mul", deep, other, out, 1, config)
    _close(out, deep * other)
    e = torch.empty(0, 4, dtype=F16, device=DEV)
    assert binary_triton("add", e, _t((4,), F16), torch.empty(0, 4, dtype=F16, device=DEV),
                         1, config).shape == (0, 4)


@pytest.mark.usefixtures("few_sms")
def test_variants_int64_offsets(monkeypatch):
    monkeypatch.setattr(KB, "_INT32_LIMIT", 100)
    KB._plan.cache_clear()
    try:
        for config in VARIANTS:
            for sa, sb in (((3001,), (3001,)), ((37, 45), (45,))):
                a, b = _t(sa, F32, 5), _t(sb, F32, 6)
                out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), device=DEV)
                binary_triton("add", a, b, out, 2.0, config)
                _close(out, torch.add(a, b, alpha=2.0))
                (L,) = KB._plan(tuple(out.shape), sa, a.stride(), sb, b.stride(), 4, config)
                assert L.constexprs["USE_INT64"]
    finally:
        KB._plan.cache_clear()


# ============================================================================ sm_90 build

_COMPILE_SCRIPT = r"""
import json, sys
import triton.language as tl
import opspec.kernels.binary as K
from opspec.kernels.activation import StreamConfig
import sm90_build as sm90

FLAT = ["n", "n_tiles"]
TILED = ["R", "N", "n_col_blocks", "n_tiles", "O1", "O2", "O3", "a_s0", "a_s1", "a_s2", "a_s3",
         "a_sn", "b_s0", "b_s1", "b_s2", "b_s3", "b_sn"]

def contiguous(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))

def build(shape, a, b, ptrs, alpha, consts, eb, a_stride=None, config=None, persist=False):
    # The launch the op plans for this layout, specialised as the launcher does.
    (L,) = K._plan(shape, a, a_stride or contiguous(a), b, contiguous(b), eb, config)
    fn = L.kernel
    names = FLAT if fn is K._binary_flat_kernel else TILED
    args = dict(zip(names, L.args), a_ptr=ptrs[0], b_ptr=ptrs[1], out_ptr=ptrs[2], alpha=alpha)
    k = sm90.build(fn, args, dict(consts, PERSIST=persist, **L.constexprs), L.num_warps)
    lds = k.loads
    return {"kernel": fn.fn.__name__, "ld": [sm90.strip_hints(x) for x in lds],
            "hints": sm90.evict_hints(lds), "st": k.stores, "local": k.local}

B, F, D, I8, I64 = "*bf16", "*fp32", "*fp64", "*i8", "*i64"
ADD = dict(OP=0, ALPHA=0, COMPUTE=tl.float32)
MUL = dict(OP=1, ALPHA=0, COMPUTE=tl.float32)
HINTS = StreamConfig(1024, 4, evict_first=True, evict_last=True)
out = {
    "flat": build((8192, 8192), (8192, 8192), (8192, 8192), (B, B, B), 0, ADD, 2),
    "flat-odd": build((4097, 4095), (4097, 4095), (4097, 4095), (B, B, B), 0, ADD, 2),
    "flat-persist": build((8192, 8192), (8192, 8192), (8192, 8192), (B, B, B), 0, ADD, 2,
                          config=HINTS._replace(persist=8), persist=True),
    "bias": build((4096, 4608), (4096, 4608), (4608,), (B, B, B), 0, ADD, 2),
    "mixed": build((4096, 8192), (4096, 8192), (4096, 8192), (F, B, F), 0, ADD, 4),
    "col-bcast": build((8192, 4096), (8192, 4096), (8192, 1), (F, F, F), 0, MUL, 4),
    "mask": build((4, 32, 1024, 1024), (4, 32, 1024, 1024), (4, 1, 1024, 1024), (B, B, B), 0,
                  ADD, 2),
    "mask-persist": build((4, 32, 1024, 1024), (4, 32, 1024, 1024), (4, 1, 1024, 1024),
                          (B, B, B), 0, ADD, 2, config=HINTS._replace(persist=8), persist=True),
    "alpha-fp32": build((14336, 4096), (14336, 4096), (14336, 4096), (F, F, F), "fp32",
                        dict(OP=0, ALPHA=2, COMPUTE=tl.float32), 4),
    "alpha-fp64": build((1024, 1024), (1024, 1024), (1024,), (D, D, D), "i64",
                        dict(OP=0, ALPHA=3, COMPUTE=tl.float64), 8),
    "alpha-int8": build((4096, 4096), (4096, 4096), (4096, 4096), (I8, I8, I8), "i32",
                        dict(OP=0, ALPHA=1, COMPUTE=tl.int32), 1),
    "int64-scalar": build((8192,), (8192,), (), (I64, I64, I64), 0,
                          dict(OP=0, ALPHA=0, COMPUTE=tl.int64), 8),
    "transposed": build((4096, 4096), (4096, 4096), (4096, 4096), (B, B, B), 0, ADD, 2,
                        a_stride=(1, 4096)),
}
K._INT32_LIMIT = 1000
K._plan.cache_clear()
out["int64-offsets"] = build((4096, 4608), (4096, 4608), (4608,), (B, B, B), 0, ADD, 2)
out["int64-flat"] = build((4096, 4608), (4096, 4608), (4096, 4608), (B, B, B), 0, ADD, 2,
                          config=HINTS._replace(persist=8), persist=True)
json.dump(out, sys.stdout)
"""


def test_kernel_builds_for_sm90_with_16_byte_accesses():
    """The kernels compile for sm_90 (ptxas included) as the op plans each layout, with no
    local memory; contiguous aligned tiles load and store 16-byte vectors only, one per
    operand and thread in bf16 (1024 elements on 4 warps); an operand constant along the
    columns is one scalar load per row; full tiles stay 16-byte vectors when the length is
    odd (only the last tile's code is masked); a broadcast operand's loads carry
    evict_last, streamed ones evict_first where the configuration asks. Compiled in a
    fresh process: under the interpreter, triton.language is patched."""
    from sm90_build import run_script

    built = run_script(_COMPILE_SCRIPT, timeout=900)
    for name, k in built.items():
        assert k["ld"] and k["st"] and k["local"] == 0, (name, k)
    v4 = "ld.global.v4.b32", "st.global.v4.b32"
    for name in ("flat", "flat-persist", "bias", "mixed", "mask", "mask-persist", "alpha-fp32",
                 "alpha-int8", "int64-offsets", "int64-flat"):
        assert set(built[name]["ld"]) == {v4[0]} and set(built[name]["st"]) == {v4[1]}, built[name]
    assert built["flat"]["kernel"] == "_binary_flat_kernel"
    assert built["mask"]["kernel"] == "_binary_kernel"
    # bf16 with 4 warps and 1024-element tiles: one 16-byte vector per operand and thread
    assert len(built["flat"]["ld"]) == 2 and len(built["flat"]["st"]) == 1
    # an odd length: full tiles in vectors, the last tile's masked code element by element
    assert {v4[0], "ld.global.b16"} <= set(built["flat-odd"]["ld"])
    assert v4[1] in built["flat-odd"]["st"]
    assert sorted(built["col-bcast"]["ld"]) == ["ld.global.b32", v4[0], v4[0]]
    assert "ld.global.v2.b64" in built["int64-scalar"]["ld"]
    # a transposed operand: element loads (uncoalesced), the other operand still vectors
    assert "ld.global.b16" in built["transposed"]["ld"] and v4[0] in built["transposed"]["ld"]
    # hints: the table marks broadcast operands evict_last; the HINTS config both kinds
    assert built["flat"]["hints"] == [] and built["bias"]["hints"] == ["L1::evict_last"]
    assert built["mask-persist"]["hints"] == ["L1::evict_first", "L1::evict_last"]
    assert built["flat-persist"]["hints"] == ["L1::evict_first"]


# ============================================================================ the ops

def test_ops_compute_and_record():
    add, mul = AddFwdOp(alpha=2), MulFwdOp()
    assert add.key_for("binary", BinaryCall("add", "float32", "float32", "float32", device=DEV)) \
        == "binary_triton"
    a, b = _t((8, 16), BF16, 1), _t((16,), F32, 2)
    y = add(a, b)
    _close(y, torch.add(a, b, alpha=2))
    rec = add.last_call
    assert rec.indices["T"] == "float32" and rec.indices["A"] == (8, 16) and rec.indices["B"] == (16,)
    assert add.eval_roofline() == (2 * 8 * 16, 8 * 16 * 2 + 16 * 4 + 8 * 16 * 4)
    z = mul(a, b)
    _close(z, a * b)
    assert mul.eval_roofline() == (8 * 16, 8 * 16 * 2 + 16 * 4 + 8 * 16 * 4)
    # 0-d operands, integer promotion, torch.result_type everywhere
    for x, w in ((_t((), F64), _t((5,), F16)), (_t((), F32), _t((), BF16)),
                 (_t((3, 1), torch.uint8), _t((4,), torch.int8))):
        _close(add(x, w), torch.add(x, w, alpha=2))
        _close(mul(x, w), x * w)
        assert add.last_call.indices["T"] == str(torch.result_type(x, w)).removeprefix("torch.")
    # an empty output: no kernel runs (the empty-write rule), the types are still the spec's
    e = mul(_e(0, 4, dtype=F16), _e(4))
    assert e.shape == (0, 4) and e.dtype == F32


def test_op_errors_name_their_declaration():
    x = torch.ones(2, 3, device=DEV)
    with pytest.raises(SignatureError) as ei:
        AddFwdOp()(x, _e(4))
    expect_error(ei, SignatureError, "AddFwdOp", "signature.outputs.output.shape",
                 "output output, shape [*broadcast(A, B)]", "not broadcastable",
                 "A=(2, 3)", "B=(4,)")
    with pytest.raises(SignatureError) as ei:
        MulFwdOp()(x, _e(3, dtype=torch.int32))
    expect_error(ei, SignatureError, "MulFwdOp", "signature.shape_rules.0",
                 "category(TA) == category(TB)", "TA=float32", "TB=int32")
    i8 = torch.ones(3, dtype=torch.int8, device=DEV)
    with pytest.raises(SignatureError) as ei:
        AddFwdOp(alpha=1.5)(i8, i8)
    expect_error(ei, SignatureError, "AddFwdOp", "signature.shape_rules.1",
                 "category(alpha) == 'int' or category(alpha) == category(T)", "T=int8")
    with pytest.raises(SignatureError) as ei:
        AddFwdOp(alpha=128)(i8, i8)
    expect_error(ei, SignatureError, "AddFwdOp", "signature.shape_rules.2",
                 "representable(alpha, T)", "T=int8")
    with pytest.raises(SignatureError) as ei:
        AddFwdOp(alpha=70000)(x.half(), x.half())
    expect_error(ei, SignatureError, "AddFwdOp", "signature.shape_rules.2", "T=float16")
    # the same alpha is fine once the result is wider (torch checks the result dtype)
    _close(AddFwdOp(alpha=200)(i8, i8.to(torch.int16)), torch.add(i8, i8.to(torch.int16), alpha=200))
    with pytest.raises(SignatureError) as ei:
        AddFwdOp(alpha=2**70)
    expect_error(ei, SignatureError, "AddFwdOp", "signature.shape_rules.3",
                 "representable(alpha, int64)")
    with pytest.raises(SignatureTypeError) as ei:
        AddFwdOp(alpha=True)
    expect_error(ei, SignatureTypeError, "AddFwdOp", "signature.params.alpha", "got True")
    b = _e(3, dtype=torch.bool)
    with pytest.raises(SignatureError) as ei:
        MulFwdOp()(b, b)
    expect_error(ei, SignatureError, "MulFwdOp", "signature.inputs.input.dtype", "got bool")
    with pytest.raises(SignatureTypeError) as ei:
        MulFwdOp()(x, 2.0)
    expect_error(ei, SignatureTypeError, "MulFwdOp", "signature.inputs.other", "got float")
    with pytest.raises(SignatureError) as ei:
        AddFwdOp()(x, torch.ones(3, device="meta"))
    expect_error(ei, SignatureError, "AddFwdOp", "signature.inputs.other",
                 f"expected {x.device}, got meta")


def test_opcheck_every_operator():
    assert AddFwdOp.compile_op_names == ("opspec::binary_add_fwd_op",)
    assert MulFwdOp.compile_op_names == ("opspec::binary_mul_fwd_op",)
    assert str(torch.ops.opspec.binary_add_fwd_op.default._schema) == \
        "opspec::binary_add_fwd_op(Tensor input, Tensor other, str key) -> Tensor"
    add, mul = AddFwdOp(alpha=0.5), MulFwdOp()
    a, b = _t((4, 8), F16, 1), _t((8,), F32, 2)
    torch.library.opcheck(torch.ops.opspec.binary_add_fwd_op.default, (a, b, add._opspec_key))
    torch.library.opcheck(torch.ops.opspec.binary_mul_fwd_op.default, (a, b, mul._opspec_key))


def test_cold_compile_fullgraph():
    torch._dynamo.reset()
    add, mul = AddFwdOp(alpha=-1), MulFwdOp()
    fn = torch.compile(lambda x, w, r: add(mul(x, w), r), fullgraph=True)
    x, w, r = _t((6, 8), BF16, 1), _t((8,), BF16, 2), _t((6, 8), F32, 3)
    y = fn(x, w, r)
    assert y.dtype == F32 and y.shape == (6, 8)
    assert torch.equal(y, add(mul(x, w), r))       # the same kernels as the eager calls
    # (the bfloat16 product: Triton's CPU interpreter truncates fp32 -> bf16, a GPU rounds)
    torch.testing.assert_close(y, torch.add(x * w, r, alpha=-1), rtol=1e-2, atol=5e-2)
    with pytest.raises(Exception) as ei:
        fn(x, _e(5, dtype=BF16), r)
    assert "MulFwdOp: output output, shape [*broadcast(A, B)]" in str(ei.value)


def test_dynamic_shapes_trace_once():
    # The output shape `[*broadcast(A, B)]` runs on SymInts (prove's `symint` warning):
    # broadcasting guards on sizes, and one graph serves rows of any length.
    torch._dynamo.reset()
    add = AddFwdOp()
    graphs = []
    fn = torch.compile(lambda x, y: add(x, y), fullgraph=True, dynamic=True,
                       backend=lambda gm, ex: graphs.append(gm) or gm.forward)
    for m, n in ((8, 3), (16, 5), (4, 7)):
        x, y = _t((m, n), F32, m), _t((n,), F32, n)
        _close(fn(x, y), x + y)
    assert len(graphs) == 1


# ============================================================================ workloads, bench

@pytest.mark.parametrize("cls", [AddFwdOp, MulFwdOp], ids=lambda c: c.__name__)
def test_workload_rows_instantiate_on_meta(cls):
    all_cases = cases(cls)
    assert len({c.id for c in all_cases}) == len(all_cases)
    large = 0
    for c in all_cases:
        op = c.construct(cls)
        inputs = c.inputs("meta")
        ind = op.check_call(*inputs)
        for name, dt in c.dtypes.items():
            assert ind[name] == dt
        a, b = inputs
        out_shape = torch.broadcast_shapes(a.shape, b.shape)
        out_dtype = torch.result_type(a, b)
        assert ind["T"] == str(out_dtype).removeprefix("torch.")
        traffic = (a.numel() * a.element_size() + b.numel() * b.element_size()
                   + math.prod(out_shape) * out_dtype.itemsize)
        large += traffic >= 256 << 20
    assert large >= 3


def test_bench_entries():
    from opspec.ops.bench_baselines import BASELINES, DESCRIPTIONS, REFERENCES

    a, b = _t((4, 6), BF16, 1), _t((4, 1), F32, 2)
    for name, cls, kw in (("AddFwdOp", AddFwdOp, {"alpha": -2}), ("MulFwdOp", MulFwdOp, {})):
        op = cls(**kw)
        assert set(BASELINES[name]) == {"eager", "compile"} == set(DESCRIPTIONS[name])
        ref = REFERENCES[name](op, a.double(), b.double())
        got = op(a, b)
        torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=1e-6)
        eager = BASELINES[name]["eager"](op)
        _close(eager(a, b), got)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["AddFwdOp", "MulFwdOp"])
def test_a_float64_zero_dim_operand_reaches_a_16_bit_result(name, dtype):
    """`bf16[N] + f64[]` is bfloat16 in torch, the 0-d operand converted through float32.
    Found by the bundled differential test: the operand was lost (the result was `a`)."""
    import opspec.ops as O
    a = torch.tensor([1.5391, 2.0, 3.0, -7.25], dtype=dtype)
    b = torch.tensor(-0.2934, dtype=torch.float64)
    op = getattr(O, name)()
    for x, y in ((a, b), (b, a)):
        got = op(x, y)
        want = torch.add(x, y) if name == "AddFwdOp" else torch.mul(x, y)
        assert got.dtype == want.dtype == dtype
        # one ulp: the CPU interpreter truncates where the GPU rounds to nearest
        torch.testing.assert_close(got, want, rtol=8e-3, atol=0)
