"""Probe behind the GEMV (decode, M <= 16) launch table of kernels/gemm.py, on a CUDA device.

    python benchmarks/gemv_probe.py           # device time and TB/s of each variant, per row
    python benchmarks/gemv_probe.py --smoke   # tiny rows through the interpreter (CPU)
    python benchmarks/gemv_probe.py --tma [MxNxK ...]   # M = 32..128 rows: TMA GEMM tiles

Per row (the GemmFwdOp decode rows of RESULTS.md and two more shapes; ``b`` stored [N, K],
as the bench rows store it) it times torch.matmul (cuBLAS), the library's GEMV launch, then:
the GEMV kernel under other tiles (``cfg BN/BK/warps/stages``); K split in S parts, each
program writing float32 partial sums that a second launch adds (``split``); and, for M = 1,
the library's FMA kernel (no MMA: b * a summed elementwise in float32, reduced once at the
end) at other tiles (``fma``). ``--tma`` times the TMA GEMM kernel's tiles on decode
batches of 32 to 128 rows instead. Every variant's output is compared with cuBLAS's. Not
part of the package.
"""

from __future__ import annotations

import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
import triton.language as tl

from opspec.kernels import gemm as G
from opspec.kernels.quant_gemm import _split_sum_kernel

from sweep_pool import bench  # beside this script

SMOKE = "--smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
DT = torch.float16 if SMOKE else torch.bfloat16
# (M, N, K)
ROWS = [(1, 14336, 4096), (16, 18432, 7168), (1, 6144, 4096), (4, 4096, 14336),
        (1, 57344, 8192), (8, 4096, 4096)]
SMOKE_ROWS = [(1, 40, 1024), (3, 33, 1024)]   # K a multiple of every BK here


@triton.jit
def _gemv_split_kernel(a_ptr, b_ptr, part_ptr, M, N, K, K_SPLIT,
                       stride_am, stride_ak, stride_bk, stride_bn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # the library's GEMV kernel over K range [pid_k * K_SPLIT, +K_SPLIT) (K_SPLIT a multiple
    # of BLOCK_K), float32 partial sums to part[pid_k]
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * K_SPLIT + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_end = tl.minimum(K - pid_k * K_SPLIT, K_SPLIT)
    for _ in range(0, k_end // BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs, eviction_policy="evict_first")
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    p = part_ptr + pid_k * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(p, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def split_gemv(a, b, out, bn, bk, warps, stages, S):
    M, K = a.shape
    N = b.shape[0]
    k_split = triton.cdiv(triton.cdiv(K, S), bk) * bk
    S = triton.cdiv(K, k_split)
    part = torch.empty((S, M, N), dtype=torch.float32, device=a.device)
    _gemv_split_kernel[(triton.cdiv(N, bn), S)](
        a, b, part, M, N, K, k_split, a.stride(0), a.stride(1), b.stride(1), b.stride(0),
        BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
    _split_sum_kernel[(triton.cdiv(M * N, 1024),)](part, out, M * N, N, S, out.stride(0),
                                                   out.stride(1), BLOCK=1024, num_warps=4)


def fma_gemv(a, b, out, bn, bk, warps, stages):
    # the library's M = 1 kernel (kernels/gemm.py) at other tiles than its table's
    N, K = b.shape
    G._gemv_fma_kernel[(triton.cdiv(N, bn),)](
        a, b, out, N, K, a.stride(1), b.stride(0), out.stride(1), BLOCK_N=bn, BLOCK_K=bk,
        EVEN_K=K % bk == 0, USE_INT64=False, num_warps=warps, num_stages=stages)


def variants(M, N, K):
    out = []
    for bn in (16, 32, 64, 128):
        for bk, warps, stages in ((128, 4, 4), (128, 4, 6), (256, 4, 3), (256, 8, 4), (128, 8, 4)):
            out.append((f"cfg {bn}/{bk}/{warps}w/{stages}s", "cfg",
                        G.GemmConfig(16, bn, bk, 1, warps, stages)))
    for S in (2, 3, 4, 6):
        for bn, bk, warps, stages in ((64, 128, 4, 4), (128, 128, 4, 4), (64, 256, 4, 3)):
            out.append((f"split S={S} {bn}/{bk}/{warps}w/{stages}s", "split",
                        (bn, bk, warps, stages, S)))
    if M == 1:
        for bn, bk, warps, stages in ((8, 512, 4, 1), (16, 512, 4, 1), (16, 256, 4, 1),
                                      (32, 256, 4, 1), (16, 512, 8, 1), (16, 512, 4, 3),
                                      (32, 512, 8, 3), (8, 1024, 4, 3)):
            out.append((f"fma {bn}/{bk}/{warps}w/{stages}s", "fma", (bn, bk, warps, stages)))
    return out


def _row(M, N, K, note):
    """Operands of one row (b stored [N, K]: trans_b), cuBLAS's time, and what each variant
    is checked and timed with: ``check(name, launch)``, ``launch(out)`` writing ``out``."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(M, K, generator=g).to(DEV, DT)
    b = torch.randn(N, K, generator=g).to(DEV, DT)
    ref = a.float() @ b.float().t()
    nbytes = (M * K + N * K + M * N) * a.element_size()
    out = torch.empty(M, N, dtype=DT, device=DEV)
    ms = bench(lambda: torch.matmul(a, b.t(), out=out), SMOKE)
    print(f"M={M} N={N} K={K}: {nbytes / 1e6:.1f} MB; cuBLAS {ms * 1e3:.1f} us "
          f"({nbytes / ms / 1e9:.2f} TB/s){note(M, N, K)}", flush=True)

    def check(name, launch):
        out = torch.full((M, N), float("nan"), dtype=DT, device=DEV)
        fn = lambda: launch(out)  # noqa: E731
        try:
            fn()
        except Exception as e:
            print(f"  {name:32s} failed: {type(e).__name__}: {str(e)[:80]}", flush=True)
            return
        err = ((out.float() - ref).norm() / ref.norm()).item()
        ms = bench(fn, SMOKE)
        print(f"  {name:32s} {ms * 1e3:8.1f} us {nbytes / ms / 1e9:6.2f} TB/s "
              f"{'ok' if err < 1e-2 else f'WRONG ({err:.3g})'}", flush=True)

    return a, b, check


def run() -> None:
    for M, N, K in SMOKE_ROWS if SMOKE else ROWS:
        a, b, check = _row(M, N, K, lambda *_: "")
        cases = [("opspec", "lib", None)] + variants(M, N, K)
        for name, kind, arg in cases:
            if SMOKE and kind != "lib" and name not in (cases[1][0], cases[-1][0]) \
                    and not name.startswith("split S=2 64"):
                continue
            if kind == "lib":
                check(name, lambda o: G.gemv_triton(a, b, False, True, o))
            elif kind == "cfg":
                check(name, lambda o, c=arg: G.gemv_triton(a, b, False, True, o, c))
            elif kind == "split":
                check(name, lambda o, p=arg: split_gemv(a, b, o, *p))
            else:
                check(name, lambda o, p=arg: fma_gemv(a, b, o, *p))


TMA_ROWS = [(128, 6144, 4096), (128, 14336, 4096), (128, 4096, 14336), (64, 6144, 4096),
            (32, 14336, 4096)]
TMA_TILES = [(64, 128, 128, 4, 4), (64, 64, 128, 4, 4), (64, 64, 256, 4, 3), (128, 64, 128, 4, 4),
             (128, 64, 64, 4, 6), (128, 128, 64, 4, 5), (64, 32, 256, 4, 4), (128, 32, 128, 4, 4),
             (64, 64, 128, 4, 6), (128, 64, 128, 8, 4),
             # two programs an SM (96 KB of stages each): 192 64x64 tiles in one wave
             (64, 64, 128, 4, 3), (64, 64, 64, 4, 6), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)]


def run_tma() -> None:
    rows = [r for r in TMA_ROWS if f"{r[0]}x{r[1]}x{r[2]}" in sys.argv] or TMA_ROWS
    for M, N, K in rows:
        a, b, check = _row(M, N, K, lambda m, n, k: f"; table {G.tma_config_for(m, n, k, True)}")
        check("opspec", lambda o: G.gemm_triton(a, b, False, True, o))
        for bm, bn, bk, warps, stages in TMA_TILES:
            cfg = G.GemmConfig(bm, bn, bk, 8, warps, stages)
            check(f"tma {bm}x{bn}x{bk}/{warps}w/{stages}s",
                  lambda o, c=cfg: G.gemm_tma(a, b, False, True, o, c))


if __name__ == "__main__":
    run_tma() if "--tma" in sys.argv else run()
