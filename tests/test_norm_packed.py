"""The packed norm kernel: bfloat16 rows held in registers as 32-bit words of two elements,
on a persistent grid whose programs load their next row ahead (opspec.kernels.norm).

On the CPU through Triton's interpreter (on the GPU where CUDA is available): LayerNorm and
RMSNorm against the float32 references with and without the affine parameters, rows of odd
word counts and rows past the grid, an output over the input, the exact pass LayerNorm takes
where its shifted sums would lose precision, the table's choice, the layouts it refuses
(a forced launch raises, the table falls back); and the sm_90 build the table launches
(registers, no spill, 16-byte accesses, one ``cvt.rn.bf16x2.f32`` an output word),
compiled in a fresh process, with the launch's choice of that pack and, on a GPU, its
outputs bit for bit those of the two-conversion pack.
"""

from __future__ import annotations

import pytest
import torch

from opspec.kernels import norm as norm_mod
from opspec.kernels.norm import (
    TUNING, NormConfig, layer_norm_reference, norm_config, norm_fwd_triton, rms_norm_reference,
)

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BF16 = torch.bfloat16
TOL = dict(rtol=1.6e-2, atol=1.6e-2)
# A packed launch of rows of up to 128 elements at one warp, on 3 programs.
FORCED = NormConfig(False, 1, 1, 128, 1, packed=3)
# The table with the packed kernel from rows of 64 elements and 1 row on.
SMALL = TUNING._replace(packed_min_block=64, packed_min_rows=1, packed_per_thread=8,
                        packed_programs_per_sm=1)


@pytest.fixture(autouse=True)
def _on_device():
    with torch.device(DEV):
        yield


def _randn(*shape, dtype=BF16, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, device="cpu") * scale + shift
    return x.to(device=DEV, dtype=dtype)


def _ref(rms, x, n, w, b, eps=1e-5):
    return (rms_norm_reference(x, (n,), w, eps) if rms
            else layer_norm_reference(x, (n,), w, b, eps))


class _Spy:
    """Stands for a kernel and records the launches made through it."""

    def __init__(self, real, seen):
        self.real, self.seen = real, seen

    def __getitem__(self, grid):
        def run(*args, **kw):
            self.seen.append((self.real.fn.__name__, grid))
            return self.real[grid](*args, **kw)
        return run


@pytest.fixture
def launches(monkeypatch):
    """The names and grids of the norm kernels launched during a test."""
    seen = []
    for name in ("_norm_fwd_packed_kernel", "_norm_fwd_rows_kernel", "_norm_fwd_stream_kernel",
                 "_norm_fwd_looped_kernel"):
        monkeypatch.setattr(norm_mod, name, _Spy(getattr(norm_mod, name), seen))
    return seen


@pytest.mark.parametrize("rms", [True, False], ids=["rms", "layer"])
def test_packed_kernel(rms, launches):
    """7 rows on 3 programs (each loads its next row ahead, masked past the last), N = 100
    (50 words in parts of 16: the last part partly masked) and N = 128 (whole parts), with
    and without the affine parameters, and an output over the input."""
    for n in (100, 128):
        x = _randn(7, n, scale=2.0, shift=5.0)
        w, b = _randn(n, seed=1), _randn(n, seed=2)
        for weight, bias in ((w, None if rms else b), (None, None)):
            out = torch.empty_like(x)
            norm_fwd_triton(x, out, n, 1e-5, rms=rms, weight=weight, bias=bias, config=FORCED)
            torch.testing.assert_close(out.float(), _ref(rms, x, n, weight, bias).float(), **TOL)
        xi = x.clone()
        norm_fwd_triton(xi, xi, n, 1e-5, rms=rms, weight=w, config=FORCED)
        torch.testing.assert_close(xi.float(), _ref(rms, x, n, w, None).float(), **TOL)
    assert launches == [("_norm_fwd_packed_kernel", (3,))] * 6


def test_packed_layer_norm_exact_pass():
    """LayerNorm's sums about each row's first element, and the exact pass over the re-read
    row (forced for every row by a shift limit of 0) give the same statistics: both match
    the float64 reference, row 1 with its first element 300 standard deviations out."""
    x = _randn(4, 300, scale=1e-2)
    x[1, 0] = 3.0
    ref = layer_norm_reference(x.double(), (300,), None, None, 1e-6)
    cfg = NormConfig(False, 1, 1, 512, 2, packed=2)
    outs = {}
    for limit in (0.0, TUNING.shift_limit, float("inf")):
        out = torch.empty_like(x)
        norm_fwd_triton(x, out, 300, 1e-6, rms=False, config=cfg,
                        tuning=TUNING._replace(shift_limit=limit))
        torch.testing.assert_close(out.double(), ref, **TOL)
        outs[limit] = out
    # the exact pass and the shifted sums agree to 1/16 (outputs up to about 17 in size)
    assert (outs[0.0].float() - outs[float("inf")].float()).abs().max().item() <= 0.0625


@pytest.mark.parametrize("rms", [True, False], ids=["rms", "layer"])
def test_table_picks_packed_for_bfloat16_only(rms, launches):
    """Under a table that offers it, bfloat16 rows take the packed kernel on a grid of
    min(rows, programs); float16 rows, a residual add and layouts the kernel cannot read as
    words take another kernel, with the same results."""
    n = 200
    x = _randn(5, n, scale=3.0, shift=1.0)
    w, b = _randn(n, seed=1), _randn(n, seed=2)
    bias = None if rms else b
    assert norm_config(5, n, tuning=SMALL, in_bytes=2) == (False, 1, 1, 256, 1, 0, 0, 5, 0)
    out = torch.empty_like(x)
    norm_fwd_triton(x, out, n, 1e-5, rms=rms, weight=w, bias=bias, tuning=SMALL)
    torch.testing.assert_close(out.float(), _ref(rms, x, n, w, bias).float(), **TOL)
    assert launches == [("_norm_fwd_packed_kernel", (5,))]
    launches.clear()

    x16 = x.to(torch.float16)
    out16 = torch.empty_like(x16)
    norm_fwd_triton(x16, out16, n, 1e-5, rms=rms, weight=w.half(), bias=None, tuning=SMALL)
    torch.testing.assert_close(out16.float(), _ref(rms, x16, n, w.half(), None).float(),
                               rtol=2e-3, atol=2e-3)
    xt = _randn(n, 5, seed=4).t()                  # elements of a row 5 apart
    odd = _randn(5, n + 1, seed=5)                 # a row of 201 elements: not whole words
    wo = _randn(n + 1, seed=6)
    off = _randn(5 * n + 1, seed=7)[1:].view(5, n)  # rows at an odd element offset
    for t, weight in ((xt, w), (odd, wo), (off, w)):
        m = t.shape[1]
        got = torch.empty(5, m, dtype=BF16)
        norm_fwd_triton(t, got, m, 1e-5, rms=rms, weight=weight, tuning=SMALL)
        torch.testing.assert_close(got.float(), _ref(rms, t, m, weight, None).float(), **TOL)
    assert [name for name, _ in launches] == ["_norm_fwd_rows_kernel"] * 4


def test_forced_packed_launch_refuses_what_it_cannot_read():
    """A forced packed launch of a layout the kernel cannot read as words, of float16 rows
    or with a residual raises and names what the kernel takes."""
    x = _randn(3, 101)
    cases = [
        (x, dict(rms=False), 101),
        (_randn(128, 3).t(), dict(rms=True), 128),
        (_randn(3, 128, dtype=torch.float16), dict(rms=True), 128),
        (_randn(3, 128), dict(rms=True, weight=_randn(128), residual=_randn(3, 128)), 128),
    ]
    for t, kw, n in cases:
        with pytest.raises(ValueError, match="the packed kernel takes bfloat16 rows of even "
                                             "length"):
            norm_fwd_triton(t, torch.empty(t.shape, dtype=t.dtype), n, 1e-5, config=FORCED,
                            **kw)


_PACKED_BUILD = r"""
import json, sys
from sm90_build import build
import opspec.kernels.norm as K

def packed(N, rms, affine, cvt=K.TUNING.packed_cvt):
    cfg = K.norm_config(2048, N, in_bytes=2, rms=rms)
    args = dict(x_ptr="*i32", w_ptr="*i32", b_ptr="*i32", y_ptr="*i32", M=2048, NW=N // 2,
                N=N, eps=1e-5, stride_xm=N // 2, stride_ym=N // 2)
    c = dict(PART_W=cfg.block // 8, IS_RMS=rms, HAS_WEIGHT=affine, HAS_BIAS=affine and not rms,
             USE_INT64=False, SHIFT_LIMIT=K.TUNING.shift_limit, FB=1024, CVT=cvt)
    b = build(K._norm_fwd_packed_kernel, args, c, cfg.num_warps)
    spills = sum(1 for line in b.sass.splitlines() if "STL" in line or "LDL" in line)
    loop = b.loop_lines()
    return dict(cfg=list(cfg), reg=b.registers, spills=spills, ld=b.loads, st=b.stores,
                loop=len(loop), f2fp=sum("F2FP" in line for line in loop))

json.dump({"layer-affine": packed(32768, False, True), "layer": packed(32768, False, False),
           "rms-weight": packed(32768, True, True), "rms": packed(20000, True, False),
           "layer-affine-two-cvt": packed(32768, False, True, cvt=False)},
          sys.stdout)
"""


def test_packed_kernel_builds_for_sm90_without_spills():
    """The packed kernel as the table launches it (32 warps, two programs an SM: at most 64
    registers a thread) compiles for sm_90 without a spill, its rows in 16-byte loads and
    stores."""
    from sm90_build import strip_hints

    built = _packed_builds()
    for name, k in built.items():
        assert k["cfg"][4] == 32 and k["cfg"][7] == 264, (name, k["cfg"])
        assert k["reg"] is not None and k["reg"] <= 64 and k["spills"] == 0, (name, k)
        assert "ld.global.v4.b32" in {strip_hints(op) for op in k["ld"]}, (name, k)
        assert {strip_hints(op) for op in k["st"]} == {"st.global.v4.b32"}, (name, k)


_BUILT: dict = {}


def _packed_builds() -> dict:
    """The sm_90 builds of _PACKED_BUILD (compiled once for the tests that read them)."""
    from sm90_build import run_script

    if not _BUILT:
        _BUILT.update(run_script(_PACKED_BUILD))
    return _BUILT


def test_packed_kernel_packs_each_output_word_with_one_conversion():
    """With ``CVT`` (the table's ``packed_cvt``) the loop packs each output word with one
    F2FP (``cvt.rn.bf16x2.f32``) and issues fewer instructions than with two conversions,
    masks and shifts a word; without it no F2FP."""
    built = _packed_builds()
    assert TUNING.packed_cvt
    one, two = built["layer-affine"], built["layer-affine-two-cvt"]
    # 32 warps hold 16 words a thread of the row: 16 output words, one F2FP each
    assert one["f2fp"] == 16 and two["f2fp"] == 0, (one, two)
    assert one["loop"] < two["loop"], (one["loop"], two["loop"])
    assert built["rms-weight"]["f2fp"] == 16, built["rms-weight"]


def test_packed_launch_takes_cvt_where_the_device_has_it(monkeypatch):
    """The launch passes ``CVT`` where the table asks for it and the device packs bf16x2
    (``_packs_bf16x2``: never under the interpreter), else not."""
    seen = []
    monkeypatch.setattr(norm_mod, "launch", lambda kernel, grid, *a, **kw: seen.append(kw))
    x = torch.empty(264, 32768, dtype=BF16)
    w = torch.empty(32768, dtype=BF16)

    def cvt(tuning=None):
        seen.clear()
        norm_fwd_triton(x, torch.empty_like(x), 32768, 1e-5, rms=False, weight=w, bias=w,
                        tuning=tuning)
        return seen[0]["CVT"]

    assert cvt() is norm_mod._packs_bf16x2(x.device)
    monkeypatch.setattr(norm_mod, "_packs_bf16x2", lambda device: True)
    assert cvt() is True
    assert cvt(TUNING._replace(packed_cvt=False)) is False
    monkeypatch.setattr(norm_mod, "_packs_bf16x2", lambda device: False)
    assert cvt() is False


def test_no_bf16x2_packing_off_cuda_or_under_the_interpreter():
    """No ``cvt.rn.bf16x2.f32`` pack on the CPU, nor on CUDA under Triton's interpreter."""
    assert not norm_mod._packs_bf16x2(torch.device("cpu"))
    if norm_mod.TRITON_INTERPRETED:
        assert not norm_mod._packs_bf16x2(torch.device("cuda", 0))


@pytest.mark.skipif(not torch.cuda.is_available() or norm_mod.TRITON_INTERPRETED,
                    reason="cvt.rn.bf16x2.f32 runs on a CUDA device")
@pytest.mark.parametrize("rms", [True, False], ids=["rms", "layer"])
def test_packed_cvt_writes_the_same_bits(rms, launches):
    """On the GPU, the one-conversion pack writes the outputs of the two-conversion one bit
    for bit (both round to nearest even), rows of a partial last word-part included."""
    assert norm_mod._packs_bf16x2(DEV)
    for n in (32768, 20002):
        x = _randn(300, n, seed=1, scale=3.0)
        w, b = _randn(n, seed=2), _randn(n, seed=3)
        bias = None if rms else b
        launches.clear()
        one = norm_fwd_triton(x, torch.empty_like(x), n, 1e-5, rms=rms, weight=w, bias=bias,
                              tuning=TUNING._replace(packed_cvt=True))
        two = norm_fwd_triton(x, torch.empty_like(x), n, 1e-5, rms=rms, weight=w, bias=bias,
                              tuning=TUNING._replace(packed_cvt=False))
        assert [k for k, _ in launches] == ["_norm_fwd_packed_kernel"] * 2, launches
        assert torch.equal(one.view(torch.int16), two.view(torch.int16)), n
        torch.testing.assert_close(one.float(), _ref(rms, x, n, w, bias).float(), **TOL)
