"""Probes behind the W4A16 decode table's notes (kernels/quant_gemm.py), on a CUDA device.

    python benchmarks/w4a16_probe.py rows      # read ceiling of the decode kernel's access pattern
    python benchmarks/w4a16_probe.py host      # host and device time a call of the decode launcher
    python benchmarks/w4a16_probe.py prefill   # fused prefill kernel against two passes
    python benchmarks/w4a16_probe.py mma [splits]   # the MMA decode kernel's tiles, splits
    python benchmarks/w4a16_probe.py gemm      # TMA GEMM tiles on the two-pass shapes
    python benchmarks/w4a16_probe.py launch [FIELD=VALUE ...]   # one 70B gate-up launch, for ncu:
        ncu --clock-control none -k regex:w4a16_tc -s 2 -c 1 python benchmarks/w4a16_probe.py launch

`rows` reads a [57344, 1024] int32 matrix (the 70B gate-up weight's packed words) as R rows x
C words a step, K split in KS contiguous slices as the tensor-core kernel's warps split it,
and prints TB/s beside a device-to-device copy: how fast the weight can be streamed in the
kernel's own steps with nothing else in the loop. `launch` takes tc_config_for's keyword
arguments to override the table's choice (k_slices=2 row_warps=2 ...), and M=, N=, K= the
shape. Not part of the package.
"""

from __future__ import annotations

import sys
import time

import torch
import triton
import triton.language as tl

import opspec.kernels.quant_gemm as Q
from opspec.kernels.quant_gemm import DecodeConfig

from sweep_pool import bench  # beside this script

G = 128


@triton.jit
def _read_rows(w_ptr, out_ptr, KW, R: tl.constexpr, C: tl.constexpr, KS: tl.constexpr):
    # program = R rows x all of K; KS slices, each a contiguous run of KW // KS words
    rows = tl.program_id(0) * R + tl.arange(0, R)
    kq = KW // KS
    base = (w_ptr + rows[:, None, None] * KW + (tl.arange(0, KS) * kq)[None, :, None]
            + tl.arange(0, C)[None, None, :])
    acc = tl.zeros((R, KS, C), dtype=tl.int32)
    for k in range(0, kq, C):
        acc ^= tl.load(base + k, eviction_policy="evict_first")
    tl.store(out_ptr + rows, tl.sum(tl.sum(acc, axis=2), axis=1))


def _median_s(fn) -> float:
    return bench(fn, False) / 1e3     # sweep_pool.bench: device time, milliseconds


def rows() -> None:
    N, KW = 57344, 1024
    w = torch.randint(-2**31, 2**31 - 1, (N, KW), dtype=torch.int32, device="cuda")
    out = torch.empty(N, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(w)
    nbytes = w.numel() * 4
    print(f"copy (read + write): {2 * nbytes / _median_s(lambda: dst.copy_(w)) / 1e12:.2f} TB/s")
    for R, C, KS, warps in ((16, 16, 4, 4), (16, 16, 1, 4), (16, 32, 4, 4), (16, 64, 1, 4),
                            (16, 128, 1, 8), (4, 256, 1, 4), (1, 1024, 1, 4)):
        def fn(R=R, C=C, KS=KS, warps=warps):
            _read_rows[(N // R,)](w, out, KW, R=R, C=C, KS=KS, num_warps=warps)
        t = _median_s(fn)
        print(f"{R:3d} rows x {C * 4:5d} bytes a step, {KS} slices, {warps} warps: "
              f"{nbytes / t / 1e12:.2f} TB/s")


def _operands(M, N, K, dtype):
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    p, s, z = Q.quantize_int4(torch.randn(N, K, device="cuda") * 0.02, G)
    return x, p, s.to(dtype), z.to(dtype), torch.empty(M, N, dtype=dtype, device="cuda")


def host() -> None:
    for M, N, K in ((1, 57344, 8192), (16, 28672, 8192), (1, 14336, 4096), (1, 4096, 4096)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)

        def call():
            Q.w4a16_decode_triton(x, p, s, z, G, out)
        call()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(50):
            call()
        host_us = (time.perf_counter() - t) / 50 * 1e6
        torch.cuda.synchronize()
        print(f"M={M} N={N} K={K}: host {host_us:.1f} us a call, "
              f"device {_median_s(call) * 1e6:.1f} us")


def prefill() -> None:
    """The fused prefill kernel against two passes (dequantize, then the GEMM kernel) and
    their parts, beside cuBLAS on the dequantized weight, by M."""
    from opspec.kernels.gemm import gemm_triton
    from opspec.kernels.quant_dequant import dequantize_int4_triton
    rows_ = [(m, 14336, 4096) for m in (256, 512, 1024, 2048)]
    rows_ += [(m, 28672, 8192) for m in (512, 1024, 4096)]
    rows_ += [(2048, 4096, 14336), (1024, 3584, 18944)]
    for M, N, K in rows_:
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        w = torch.empty(N, K, dtype=x.dtype, device="cuda")
        fused = Q.prefill_config_for(M, N, K, G, two_pass=False)
        two = Q.prefill_config_for(M, N, K, G, two_pass=True)
        t = {
            "fused": _median_s(lambda: Q.w4a16_prefill_triton(x, p, s, z, G, out, fused)),
            "two-pass": _median_s(lambda: Q.w4a16_prefill_triton(x, p, s, z, G, out, two)),
            "dequant": _median_s(lambda: dequantize_int4_triton(p, s, z, G, w)),
            "gemm": _median_s(lambda: gemm_triton(x, w, False, True, out)),
            "cublas": _median_s(lambda: torch.matmul(x, w.t(), out=out)),
        }
        ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
        Q.w4a16_prefill_triton(x, p, s, z, G, out, two)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        flop = 2 * M * N * K
        print(f"M={M} N={N} K={K}: " + ", ".join(
            f"{k} {v * 1e6:.1f} us" for k, v in t.items())
            + f"; fused {flop / t['fused'] / 1e12:.0f}, two-pass {flop / t['two-pass'] / 1e12:.0f}"
            f" TFLOP/s; dequant {(N * K * 2.5 + 4 * N * K / G * 2) / t['dequant'] / 1e12:.2f}"
            f" TB/s; rel err {err:.2e}", flush=True)


def gemm() -> None:
    """The GEMM kernel's TMA tiles on the two-pass prefill shapes (x @ w.T, w [N, K]
    bfloat16), beside cuBLAS and the GEMM table's choice."""
    from opspec.kernels.gemm import GemmConfig, gemm_tma, gemm_triton, tma_config_for
    cands = [GemmConfig(128, 256, 64, g, 8, 3) for g in (4, 8, 16)]   # 4 stages: too much smem
    cands += [GemmConfig(128, 128, 64, 8, w, st) for w in (4, 8) for st in (4, 5)]
    cands += [GemmConfig(64, 256, 64, 8, 4, 4), GemmConfig(128, 128, 128, 8, 8, 3)]
    for M, N, K in ((512, 14336, 4096), (1024, 14336, 4096), (1024, 3584, 18944),
                    (2048, 4096, 14336), (512, 28672, 8192), (4096, 14336, 8192)):
        x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(N, K, dtype=torch.bfloat16, device="cuda")
        out = torch.empty(M, N, dtype=x.dtype, device="cuda")
        t_cublas = _median_s(lambda: torch.matmul(x, w.t(), out=out))
        t_table = _median_s(lambda: gemm_triton(x, w, False, True, out))
        res = sorted((_median_s(lambda c=c: gemm_tma(x, w, False, True, out, c)), c)
                     for c in cands)
        print(f"M={M} N={N} K={K}: cuBLAS {t_cublas * 1e6:.1f} us, table "
              f"{tma_config_for(M, N, K, True)} {t_table / t_cublas:.3f} of its time")
        for t, c in res[:4]:
            print(f"  {tuple(c)} {t * 1e6:.1f} us, {t / t_cublas:.3f} of cuBLAS's time", flush=True)


def mma(splits: bool) -> None:
    """The MMA decode kernel (the table's choice for M = 9..16) by pipeline depth, tile and
    K split, beside the table and the tensor-core kernel's second token tile; with
    ``splits``, 64-row tiles by K split only, float16 and bfloat16."""
    shapes = ((16, 28672, 8192), (16, 8192, 28672), (12, 14336, 4096))
    for (M, N, K), dtype in ([(s, d) for s in shapes[:2] for d in (torch.float16, torch.bfloat16)]
                             if splits else [(s, torch.bfloat16) for s in shapes]):
        x, p, s, z, out = _operands(M, N, K, dtype)
        ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
        nbytes = N * K // 2
        table = Q.decode_config_for(M, N, K, G, dtype)
        cands = [("table", table)]
        if splits:
            cands += [(f"bn64 split{n}", DecodeConfig(64, 128, n, 4, 4)) for n in range(1, 9)]
            cands += [("bn128 split3", DecodeConfig(128, 128, 3, 4, 4))]
        else:
            cands.append(("tc nt2", Q.tc_config_for(M, N, K, G, dtype)))
            for bn in (64, 128):
                for warps in (4, 8):
                    for stages in (1, 2, 4):
                        for split in (1, 2, 3, 4, 6):
                            cands.append((f"bn{bn} w{warps} st{stages} split{split}",
                                          DecodeConfig(bn, 128, split, warps, stages)))
        res = []
        for name, cfg in cands:
            out.fill_(float("nan"))
            Q.w4a16_decode_triton(x, p, s, z, G, out, cfg)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            t = _median_s(lambda: Q.w4a16_decode_triton(x, p, s, z, G, out, cfg))
            res.append((t, name, err))
        res.sort()
        t_table = next(t for t, n, _ in res if n == "table")
        print(f"M={M} N={N} K={K} {dtype}: table {t_table * 1e6:.1f} us")
        for t, name, err in res[:12 if splits else 8]:
            print(f"  {name:28s} {t * 1e6:7.1f} us {nbytes / t / 1e12:5.2f} TB/s err {err:.1e}",
                  flush=True)


def launch(overrides: list[str]) -> None:
    kw = {k: int(v) for k, v in (a.split("=", 1) for a in overrides)}
    M, N, K, dtype = kw.pop("M", 1), kw.pop("N", 57344), kw.pop("K", 8192), torch.bfloat16
    x, p, s, z, out = _operands(M, N, K, dtype)
    cfg = Q.tc_config_for(M, N, K, G, dtype, **kw) if kw else Q.decode_config_for(M, N, K, G, dtype)
    print(cfg)
    for _ in range(3):
        Q.w4a16_decode_triton(x, p, s, z, G, out, cfg)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    what = sys.argv[1] if len(sys.argv) > 1 else "rows"
    {"rows": lambda: rows(), "host": lambda: host(), "prefill": lambda: prefill(),
     "gemm": lambda: gemm(), "mma": lambda: mma(sys.argv[2:] == ["splits"]),
     "launch": lambda: launch(sys.argv[2:])}[what]()
