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

from opspec.kernels.silu_and_mul import (  # noqa: E402
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
    # Large prefill shapes: the 2048 cap, 8 warps (8 elements per thread per operand).
    assert silu_and_mul_block(4096, 14336) == (2048, 8)
    # Decode: the block shrinks so the grid still has several programs per SM.
    block, warps = silu_and_mul_block(1, 14336)
    assert block == 256 and warps == 1
    # Never larger than the row needs.
    assert silu_and_mul_block(10_000, 100)[0] == 128
    assert silu_and_mul_block(1, 1)[0] == 1
