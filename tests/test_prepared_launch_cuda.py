"""Prepared launches (opspec.kernels.launch.Prepared) on a GPU: a launcher's replay of an
earlier launch must compute what a fresh launch does, for new tensors of the memoised
layout, and a tensor of another layout or alignment must not reuse it. Needs CUDA (the
replay calls Triton's native launcher; the interpreter never prepares): skipped elsewhere.
The CPU tests of the memo itself are in test_kernel_launch.py."""

from __future__ import annotations

import pytest
import torch

import opspec.kernels.gemm as gemm
import opspec.kernels.launch as L
import opspec.kernels.silu_and_mul as sm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or not L.fast_launch_enabled(),
                                reason="prepared launches need CUDA and the fast launch path")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gated_replay_matches_fresh_launches(dtype):
    sm._PREPARED.clear()
    M, N = 5, 136
    for _ in range(3):  # the first builds Triton's binder, the second prepares, the third replays
        x = torch.randn(M, 2 * N, dtype=dtype, device="cuda")
        out = torch.empty(M, N, dtype=dtype, device="cuda")
        sm.silu_and_mul_triton(x, out)
        torch.testing.assert_close(out, sm.silu_and_mul_reference(x), rtol=2e-2, atol=2e-2)
    assert len(sm._PREPARED) == 1
    # a column-offset view: another alignment and row stride, so another key
    base = torch.randn(M, 2 * N + 1, dtype=dtype, device="cuda")
    x = base[:, 1:]
    for _ in range(3):
        out = torch.empty(M, N, dtype=dtype, device="cuda")
        sm.silu_and_mul_triton(x, out)
        torch.testing.assert_close(out, sm.silu_and_mul_reference(x), rtol=2e-2, atol=2e-2)
    assert len(sm._PREPARED) == 2


@pytest.mark.parametrize("trans_b", [False, True])
def test_gemv_replay_matches_fresh_launches(trans_b):
    gemm._PREPARED.clear()
    M, N, K = 3, 200, 96
    for _ in range(4):
        a = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(N, K, dtype=torch.bfloat16, device="cuda")
        b = b if trans_b else b.t().contiguous()
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        gemm.gemv_launch(a, b, out, M, N, K, False, trans_b)
        ref = a.float() @ (b.float().t() if trans_b else b.float())
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=1e-1)
    assert len(gemm._PREPARED) == 1


@pytest.mark.parametrize("inplace", [False, True])
def test_activation_replay_matches_fresh_launches(inplace):
    import opspec.kernels.activation as act
    act._PREPARED.clear()
    for _ in range(3):
        x = torch.randn(7, 300, dtype=torch.bfloat16, device="cuda")
        ref = torch.nn.functional.silu(x.float()).to(x.dtype)
        out = x if inplace else torch.empty_like(x)
        act.activation_triton(x, out, "silu")
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    assert len(act._PREPARED) == 1


@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_replay_matches_fresh_launches(log):
    import opspec.kernels.softmax as sf
    sf._PREPARED.clear()
    for _ in range(3):
        x = torch.randn(3, 5, 1000, dtype=torch.float16, device="cuda")
        out = torch.empty_like(x)
        sf.softmax_triton(x, -1, out, log)
        ref = (torch.log_softmax if log else torch.softmax)(x.float(), -1).to(x.dtype)
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    assert len(sf._PREPARED) == 1
    # a transposed input: the rows kernel reads it through its strides (another key)
    xt = torch.randn(1000, 15, dtype=torch.float16, device="cuda").t()
    for _ in range(2):
        out = torch.empty(15, 1000, dtype=torch.float16, device="cuda")
        sf.softmax_triton(xt, -1, out, log)
        ref = (torch.log_softmax if log else torch.softmax)(xt.float(), -1).to(xt.dtype)
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_w4a16_decode_replay_matches_fresh_launches(dtype):
    """The tensor-core decode kernel's replay (x and the packed weight passed for their
    int32 views) against the reference, for new operands of the memoised layout; a weight
    row slice (another row stride) and an x that must be copied (2-byte aligned) do not
    reuse it, and the copy is never memoised."""
    import opspec.kernels.quant_gemm as Q
    Q._PREPARED.clear()
    M, N, K, g = 3, 96, 512, 128

    def run(x, p, s, z):
        out = torch.empty(M, N, dtype=dtype, device="cuda")
        assert Q.w4a16_decode_triton(x, p, s, z, g, out) is out
        ref = Q.gemm_w4a16_reference(x.float(), p, s.float(), z.float(), g)
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)

    def operands(seed, width=K // 2):
        torch.manual_seed(seed)
        p, s, z = Q.quantize_int4(torch.randn(N, K, device="cuda"), g)
        if width != K // 2:
            p = torch.cat([p, p], dim=1)[:, :K // 2]
        return torch.randn(M, K, dtype=dtype, device="cuda"), p, s.to(dtype), z.to(dtype)

    for seed in range(4):   # binder, prepare, then replays on new tensors
        run(*operands(seed))
    assert len(Q._PREPARED) == 1
    for seed in range(3):
        run(*operands(10 + seed, width=K))
    assert len(Q._PREPARED) == 2
    x, p, s, z = operands(20)
    xs = torch.empty(M * K + 1, dtype=dtype, device="cuda")[1:].view(M, K)
    xs.copy_(x)
    for _ in range(3):
        run(xs, p, s, z)
    assert len(Q._PREPARED) == 2


def test_w4a16_decode_planes_replay_matches_fresh_launches(monkeypatch):
    """Where the tensor-core kernel's K slices store planes (two launches: the kernel into a
    float32 buffer, then the planes' sum), the memoised replay runs both, with a new buffer
    each call, and gives the reference's result on new operands."""
    import opspec.kernels.quant_gemm as Q
    monkeypatch.setattr(Q, "_TC_PLANES_MIN_BYTES", 0)
    Q.decode_config_for.cache_clear()
    Q._PREPARED.clear()
    M, N, K, g = 2, 80, 2048, 128
    assert Q.decode_config_for(M, N, K, g, torch.bfloat16).planes
    try:
        for seed in range(4):   # binder, prepare, then replays on new tensors
            torch.manual_seed(seed)
            p, s, z = Q.quantize_int4(torch.randn(N, K, device="cuda"), g)
            x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            Q.w4a16_decode_triton(x, p, s.bfloat16(), z.bfloat16(), g, out)
            ref = Q.gemm_w4a16_reference(x.float(), p, s.bfloat16().float(),
                                         z.bfloat16().float(), g)
            torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
        assert [type(r).__name__ for r in Q._PREPARED.values()] == ["_PlanesReplay"]
    finally:
        Q.decode_config_for.cache_clear()
        Q._PREPARED.clear()
