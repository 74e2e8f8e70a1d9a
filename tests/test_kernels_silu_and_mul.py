"""SiluAndMul's Triton kernel against its torch reference, on CPU through Triton's interpreter.

TRITON_INTERPRET=1 must be set BEFORE triton (or any opspec.kernels module, whose
``@triton.jit`` decorators read it at import) is imported: this module sets it on its
first lines, so these tests also need no GPU (and fail at collection, saying so, when
triton was imported earlier without it).  Sizes are kept small: the interpreter
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
import torch.nn.functional as F  # noqa: E402

from opspec.kernels.activation import StreamConfig  # noqa: E402
from opspec.kernels.silu_and_mul import (  # noqa: E402
    GATED_TABLE,
    gated_blocks,
    gated_config,
    silu_and_mul_block,
    silu_and_mul_reference,
    silu_and_mul_triton,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
}
SHAPES = [(1, 2), (3, 14), (17, 2 * 33), (64, 2 * 1000)]


def _x(m: int, two_n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, two_n, generator=g) * 3).to(dtype)


def test_reference_matches_definition():
    x = _x(5, 12, torch.float32)
    expected = F.silu(x[:, :6]) * x[:, 6:]
    torch.testing.assert_close(silu_and_mul_reference(x), expected)
    xh = x.to(torch.bfloat16)
    got = silu_and_mul_reference(xh)
    assert got.dtype == torch.bfloat16 and got.shape == (5, 6)
    torch.testing.assert_close(got, (F.silu(xh[:, :6].float()) * xh[:, 6:].float()).bfloat16())


def test_reference_rejects_odd_width():
    with pytest.raises(ValueError):
        silu_and_mul_reference(torch.zeros(2, 3))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_triton_matches_reference(shape, dtype):
    m, two_n = shape
    x = _x(m, two_n, dtype)
    out = torch.empty(m, two_n // 2, dtype=dtype)
    got = silu_and_mul_triton(x, out)
    assert got is out
    torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_non_contiguous_rows(dtype):
    # x is a column slice of a wider tensor: row stride 90, not 2N = 66.
    wide = _x(9, 90, dtype, seed=1)
    x = wide[:, 7 : 7 + 66]
    assert not x.is_contiguous()
    out = torch.empty(9, 33, dtype=dtype)
    silu_and_mul_triton(x, out)
    torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[dtype])


def test_triton_strided_rows_and_columns():
    # Every other row and every other column of a bigger tensor; out also strided.
    big = _x(10, 40, torch.float32, seed=2)
    x = big[::2, ::2]  # [5, 20], strides (80, 2)
    out_big = torch.full((5, 30), 7.0)
    out = out_big[:, 5:15]  # [5, 10], row stride 30
    silu_and_mul_triton(x, out)
    torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[torch.float32])
    assert torch.all(out_big[:, :5] == 7.0) and torch.all(out_big[:, 15:] == 7.0)


def test_triton_three_dim_input():
    x = _x(6, 18, torch.float16, seed=3).view(2, 3, 18)
    out = torch.empty(2, 3, 9, dtype=torch.float16)
    silu_and_mul_triton(x, out)
    torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[torch.float16])


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_extreme_values(dtype):
    vals = torch.tensor([-1e4, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0])
    if dtype == torch.float16:
        vals = vals.clamp(-6e4, 6e4)
    x = torch.cat([vals, torch.full((8,), 2.0)]).to(dtype).view(1, 16)
    out = torch.empty(1, 8, dtype=dtype)
    silu_and_mul_triton(x, out)
    assert torch.isfinite(out.float()).all()
    torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[dtype])


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0, 0)], ids=str)
def test_triton_empty(shape):
    m, two_n = shape
    x = torch.empty(m, two_n, dtype=torch.float16)
    out = torch.empty(m, two_n // 2, dtype=torch.float16)
    assert silu_and_mul_triton(x, out) is out
    assert silu_and_mul_reference(x).shape == out.shape


def test_triton_rejects_bad_arguments():
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError):
        silu_and_mul_triton(x, torch.empty(2, 3))
    with pytest.raises(TypeError):
        silu_and_mul_triton(x, torch.empty(2, 4, dtype=torch.float16))
    with pytest.raises(ValueError):
        silu_and_mul_triton(torch.zeros(2, 7), torch.empty(2, 3))


def test_block_choice():
    # Large prefill shapes: GATED_TABLE's 2048 outputs on 4 warps (two 16-byte vectors of
    # gate and two of up per thread in 16-bit).
    assert silu_and_mul_block(4096, 14336) == (2048, 4)
    assert gated_blocks(4096, 14336, gated_config(4096, 14336, 2)) == (1, 2048, 4)
    # A row length that 2048 does not divide: the power of two that pads least, rows stacked.
    assert gated_blocks(4096, 18944, gated_config(4096, 18944, 2)) == (4, 512, 4)
    # Decode: the table's small tile, 512 outputs on 2 warps.
    assert silu_and_mul_block(1, 14336) == (512, 2)
    # Short rows are stacked, never more rows than there are.
    assert gated_blocks(10_000, 100, gated_config(10_000, 100, 2)) == (16, 128, 4)
    assert gated_blocks(3, 100, StreamConfig(1024, 4)) == (4, 128, 2)
    assert silu_and_mul_block(1, 1)[0] == 1


# A few layouts of the gated kernel besides the table's, through the real launcher: small
# tiles (many programs, several rows a tile), a persistent grid with the cache hints, and
# the table itself. The SM count is 2 in these tests (`few_sms`), so that a persistent
# grid (1 or 3 programs per SM) loops over many tiles at interpreter sizes.
VARIANTS = [None, StreamConfig(64, 2), StreamConfig(64, 2, persist=1, evict_first=True),
            StreamConfig(128, 4, persist=3, evict_first=True, evict_last=True)]
VARIANT_IDS = ["table", "tile64", "persist1", "persist3"]


@pytest.fixture
def few_sms(monkeypatch):
    import opspec.kernels.activation as A
    monkeypatch.setattr(A, "sm_count", lambda device: 2)


@pytest.mark.usefixtures("few_sms")
@pytest.mark.parametrize("config", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_variants_match_reference(dtype, config):
    # exact tiles (no mask), a masked row tail, a masked column tail, both, one element
    for m, n in ((64, 32), (37, 32), (16, 50), (9, 333), (1, 1), (150, 16)):
        x = _x(m, 2 * n, dtype, seed=m + n)
        out = torch.empty(m, n, dtype=dtype)
        assert silu_and_mul_triton(x, out, config) is out
        torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[dtype], msg=(m, n))


@pytest.mark.usefixtures("few_sms")
@pytest.mark.parametrize("config", VARIANTS, ids=VARIANT_IDS)
def test_variants_strided_and_empty(config):
    big = _x(40, 130, torch.bfloat16, seed=5)
    x = big[::2, 1:1 + 2 * 63]                        # row stride 260, an odd row length
    out_big = torch.full((20, 70), 7.0, dtype=torch.bfloat16)
    out = out_big[:, 3:66]
    silu_and_mul_triton(x, out, config)
    torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[torch.bfloat16])
    assert torch.all(out_big[:, :3] == 7.0) and torch.all(out_big[:, 66:] == 7.0)
    xt = _x(24, 300, torch.float32, seed=6).t()       # column stride 300
    outt = torch.empty(300, 12)
    silu_and_mul_triton(xt, outt, config)
    torch.testing.assert_close(outt, silu_and_mul_reference(xt), **TOL[torch.float32])
    e = torch.empty(0, 8, dtype=torch.float16)
    assert silu_and_mul_triton(e, torch.empty(0, 4, dtype=torch.float16), config).shape == (0, 4)


@pytest.mark.usefixtures("few_sms")
def test_variants_int64_offsets(monkeypatch):
    # Past 2**31 elements does not fit here: lower the limit so that the int64 path runs.
    import opspec.kernels.silu_and_mul as S
    monkeypatch.setattr(S, "_INT32_LIMIT", 100)
    for config in VARIANTS:
        x = _x(33, 2 * 40, torch.float16, seed=7)
        out = torch.empty(33, 40, dtype=torch.float16)
        silu_and_mul_triton(x, out, config)
        torch.testing.assert_close(out, silu_and_mul_reference(x), **TOL[torch.float16])


def test_table_rows_are_well_formed():
    for eb, max_n, cfg in GATED_TABLE:
        assert eb in (0, 2, 4) and (max_n is None or max_n > 0)
        assert cfg.block & (cfg.block - 1) == 0 and cfg.num_warps in (1, 2, 4, 8, 16)
    assert GATED_TABLE[-1][1] is None          # every size has a row
