"""Mutation tests of the bundled ops: every declaration of GemmFwdOp and SiluAndMulFwdOp is
violated alone, and the error must name that declaration (its path, the axis or dtype, the
expected and the actual value); exhaustive sweeps over small shapes show that no violating
call passes and no valid one fails; valid calls agree with the torch reference.

Kernels run through Triton's interpreter on the CPU (tests/conftest.py), so sizes are tiny
and GEMM is checked in float16 (the interpreter's bf16 `tl.dot` is wrong); bfloat16 calls
are checked with `check_call`, which runs the signature checks only.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from opspec.ops import GemmFwdOp, SiluAndMulFwdOp
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

H = torch.float16
ALL_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
              torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64]
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


def _gemm_operands(M, N, K, ta, tb, dtype=H, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn((K, M) if ta else (M, K), generator=g).to(dtype)
    b = torch.randn((N, K) if tb else (K, N), generator=g).to(dtype)
    return a, b


def _ref(a, b, ta, tb):
    return (a.float().T if ta else a.float()) @ (b.float().T if tb else b.float())


# ============================================================================ GEMM: dtypes

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_gemm_allowed_set_of_T(dtype):
    """T ranges over exactly {float16, bfloat16}: a's dtype outside it names the set."""
    op = GemmFwdOp()
    a, b = torch.ones(2, 3).to(dtype), torch.ones(3, 4).to(dtype)
    name = str(dtype).removeprefix("torch.")
    if name in ("float16", "bfloat16"):
        assert op.check_call(a, b) == {"M": 2, "N": 4, "K": 3, "T": name}
        return
    with pytest.raises(SignatureError) as ei:
        op.check_call(a, b)
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.a.dtype",
                 "input a, dtype T", f"expected bfloat16 | float16, got {name}")
    with pytest.raises(SignatureError):
        op(a, b)


@pytest.mark.parametrize("ta, tb", LAYOUTS)
@pytest.mark.parametrize("da, db", [(H, torch.bfloat16), (torch.bfloat16, H), (H, torch.float32)])
def test_gemm_b_dtype_must_equal_a_dtype(ta, tb, da, db):
    a, _ = _gemm_operands(2, 3, 4, ta, tb, da)
    _, b = _gemm_operands(2, 3, 4, ta, tb, db)
    with pytest.raises(SignatureError) as ei:
        GemmFwdOp(ta, tb)(a, b)
    n = lambda d: str(d).removeprefix("torch.")
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b.dtype",
                 "input b, dtype T", f"expected T = {n(da)} (from input a), got {n(db)}")


# ============================================================================ GEMM: shapes

@pytest.mark.parametrize("ta, tb", LAYOUTS)
def test_gemm_each_axis_of_each_branch(ta, tb):
    """Per family case: the axes that solve M, K (of a) and N (of b) take any length and the
    output follows; the axis of b that repeats K is checked against a."""
    M, N, K = 2, 3, 4
    op = GemmFwdOp(ta, tb)
    a, b = _gemm_operands(M, N, K, ta, tb)
    a_axes = {"K": 0, "M": 1} if ta else {"M": 0, "K": 1}
    b_axes = {"N": 0, "K": 1} if tb else {"K": 0, "N": 1}

    def grow(t, axis):
        shape = list(t.shape)
        shape[axis] += 1
        return torch.randn(shape).to(t.dtype)

    # M on a and N on b: solved, so a new length is a new valid call
    assert op.check_call(grow(a, a_axes["M"]), b) == {"M": M + 1, "N": N, "K": K, "T": "float16"}
    assert op.check_call(a, grow(b, b_axes["N"])) == {"M": M, "N": N + 1, "K": K, "T": "float16"}
    # K on b: checked against K solved from a
    kb = b_axes["K"]
    with pytest.raises(SignatureError) as ei:
        op(a, grow(b, kb))
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b.shape",
                 f"input b, axis {kb} of Mat[trans_b, K, N] = {'[N, K]' if tb else '[K, N]'}",
                 f"expected K = {K} (from input a), got {K + 1}")
    # K on a: a is the source of K, so b's axis is the one that no longer agrees
    with pytest.raises(SignatureError) as ei:
        op(grow(a, a_axes["K"]), b)
    expect_error(ei, SignatureError, "GemmFwdOp", "signature.inputs.b.shape",
                 f"input b, axis {kb} of", f"expected K = {K + 1} (from input a), got {K}")


@pytest.mark.parametrize("ta, tb", LAYOUTS)
@pytest.mark.parametrize("which", ["a", "b"])
@pytest.mark.parametrize("rank", [0, 1, 3])
def test_gemm_ranks(ta, tb, which, rank):
    a, b = _gemm_operands(2, 3, 4, ta, tb)
    bad = torch.ones((2,) * rank, dtype=H)
    args = (bad, b) if which == "a" else (a, bad)
    with pytest.raises(SignatureError) as ei:
        GemmFwdOp(ta, tb)(*args)
    mat = f"Mat[trans_{which}, {'M, K' if which == 'a' else 'K, N'}]"
    resolved = {("a", False): "[M, K]", ("a", True): "[K, M]",
                ("b", False): "[K, N]", ("b", True): "[N, K]"}[which, ta if which == "a" else tb]
    expect_error(ei, SignatureError, "GemmFwdOp", f"signature.inputs.{which}.shape",
                 f"input {which}, the rank of {mat} = {resolved}", f"expected 2, got {rank}")


@pytest.mark.parametrize("which", ["a", "b"])
def test_gemm_presence_and_python_types(which):
    a, b = _gemm_operands(2, 3, 4, False, False)
    for bad, tname in ((None, "NoneType"), (a.tolist(), "list"), (1.0, "float")):
        args = (bad, b) if which == "a" else (a, bad)
        with pytest.raises(SignatureTypeError) as ei:
            GemmFwdOp()(*args)
        expect_error(ei, SignatureTypeError, "GemmFwdOp", f"signature.inputs.{which}",
                     f"input {which}: expected a torch.Tensor, got {tname}")


@pytest.mark.parametrize("ta, tb", LAYOUTS)
def test_gemm_no_violating_call_passes(ta, tb):
    """Every pair of shapes of rank 1 to 3 with axes in 1..3: accepted exactly when both are
    2-D and the K axes agree, and then with the indices of the family case."""
    op = GemmFwdOp(ta, tb)
    shapes = [s for r in (1, 2, 3) for s in itertools.product((1, 2, 3), repeat=r)]
    accepted = 0
    for sa, sb in itertools.product(shapes, shapes):
        a, b = torch.empty(sa, dtype=H), torch.empty(sb, dtype=H)
        valid = len(sa) == 2 and len(sb) == 2 and sa[0 if ta else 1] == sb[1 if tb else 0]
        try:
            ind = op.check_call(a, b)
        except SignatureError as e:
            assert not valid, (sa, sb, e)
            continue
        assert valid, (sa, sb)
        accepted += 1
        M, K = (sa[1], sa[0]) if ta else sa
        N = sb[0] if tb else sb[1]
        assert ind == {"M": M, "N": N, "K": K, "T": "float16"}
    assert accepted == 27


def test_gemm_no_violating_dtype_pair_passes():
    """Every pair of dtypes: accepted exactly when both are the same member of T's set; a
    rejection names a's dtype when a is outside the set, else b's."""
    op = GemmFwdOp()
    for da, db in itertools.product(ALL_DTYPES, ALL_DTYPES):
        a, b = torch.ones(2, 3).to(da), torch.ones(3, 4).to(db)
        ok = da == db and da in (torch.float16, torch.bfloat16)
        try:
            op.check_call(a, b)
        except SignatureError as e:
            assert not ok, (da, db)
            which = "a" if da not in (torch.float16, torch.bfloat16) else "b"
            assert f"[signature.inputs.{which}.dtype at " in str(e), (da, db, str(e))
            continue
        assert ok, (da, db)


@pytest.mark.parametrize("ta, tb", LAYOUTS)
@pytest.mark.parametrize("M, N, K", [(3, 5, 7), (17, 9, 33)])
def test_gemm_valid_calls_agree_with_torch(ta, tb, M, N, K):
    op = GemmFwdOp(trans_a=ta, trans_b=tb)
    a, b = _gemm_operands(M, N, K, ta, tb)
    c = op(a, b)
    assert c.shape == (M, N) and c.dtype == H
    torch.testing.assert_close(c.float(), _ref(a, b, ta, tb), rtol=1e-2, atol=1e-2)
    assert op.last_call.indices == {"M": M, "N": N, "K": K, "T": "float16",
                                    "trans_a": ta, "trans_b": tb}


def test_gemm_non_contiguous_operands_are_accepted_and_correct():
    """The spec declares no `contiguous`: a transposed view is a valid operand."""
    a, b = _gemm_operands(3, 5, 4, False, False)
    at = a.t().contiguous().t()      # [M, K] with column-major strides
    c = GemmFwdOp()(at, b)
    torch.testing.assert_close(c.float(), _ref(a, b, False, False), rtol=1e-2, atol=1e-2)


# ============================================================================ SiluAndMul

def _silu_ref(x):
    n = x.shape[-1] // 2
    xf = x.float()
    return (torch.nn.functional.silu(xf[:, :n]) * xf[:, n:]).to(x.dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_silu_allowed_set_of_T(dtype):
    op = SiluAndMulFwdOp()
    x = torch.ones(2, 4).to(dtype)
    name = str(dtype).removeprefix("torch.")
    if name in ("float16", "bfloat16", "float32"):
        assert op.check_call(x) == {"M": 2, "N": 2, "T": name}
        return
    with pytest.raises(SignatureError) as ei:
        op(x)
    expect_error(ei, SignatureError, "SiluAndMulFwdOp", "signature.inputs.x.dtype",
                 "input x, dtype T", f"expected bfloat16 | float16 | float32, got {name}")


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_silu_rank(rank):
    with pytest.raises(SignatureError) as ei:
        SiluAndMulFwdOp()(torch.ones((2,) * rank))
    expect_error(ei, SignatureError, "SiluAndMulFwdOp", "signature.inputs.x.shape",
                 "input x, the rank of [M, 2 * N]", f"expected 2, got {rank}")


@pytest.mark.parametrize("width", [1, 3, 7])
def test_silu_evenness_of_two_n(width):
    with pytest.raises(SignatureError) as ei:
        SiluAndMulFwdOp()(torch.ones(3, width))
    expect_error(ei, SignatureError, "SiluAndMulFwdOp", "signature.inputs.x.shape",
                 "input x, axis 1 of [M, 2 * N]",
                 "expected 2 * N = a non-negative multiple of 2 plus 0", f"got {width}",
                 "bound so far: T=float32, M=3")


def test_silu_axis_0_is_solved():
    op = SiluAndMulFwdOp()
    for m in (0, 1, 5):
        assert op.check_call(torch.ones(m, 4)) == {"M": m, "N": 2, "T": "float32"}


def test_silu_presence():
    for bad, tname in ((None, "NoneType"), ([[1.0, 2.0]], "list")):
        with pytest.raises(SignatureTypeError) as ei:
            SiluAndMulFwdOp()(bad)
        expect_error(ei, SignatureTypeError, "SiluAndMulFwdOp", "signature.inputs.x",
                     f"input x: expected a torch.Tensor, got {tname}")


def test_silu_no_violating_call_passes():
    op = SiluAndMulFwdOp()
    shapes = [s for r in (0, 1, 2, 3) for s in itertools.product(range(0, 5), repeat=r)]
    accepted = 0
    for s in shapes:
        try:
            ind = op.check_call(torch.empty(s))
        except SignatureError:
            assert not (len(s) == 2 and s[1] % 2 == 0), s
            continue
        assert len(s) == 2 and s[1] % 2 == 0, s
        assert ind == {"M": s[0], "N": s[1] // 2, "T": "float32"}
        accepted += 1
    assert accepted == 15


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("M, N", [(1, 1), (3, 5), (4, 33)])
def test_silu_valid_calls_agree_with_torch(dtype, M, N):
    x = torch.randn(M, 2 * N).to(dtype)
    op = SiluAndMulFwdOp()
    y = op(x)
    assert y.shape == (M, N) and y.dtype == dtype
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, _silu_ref(x), **tol)
    assert op.last_call.indices == {"M": M, "N": N, "T": str(dtype).removeprefix("torch.")}


def test_silu_empty_write_runs_no_kernel():
    op = SiluAndMulFwdOp()
    y = op(torch.randn(3, 0))
    assert y.shape == (3, 0) and y.dtype == torch.float32
    y = op(torch.empty(0, 4, dtype=torch.bfloat16, device="meta"))
    assert y.shape == (0, 2) and y.device.type == "meta" and y.dtype == torch.bfloat16
