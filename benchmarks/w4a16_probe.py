"""Probes behind the W4A16 decode table's notes (kernels/quant_gemm.py), on a CUDA device.

    python benchmarks/w4a16_probe.py rows      # read ceiling of the decode kernel's access pattern
    python benchmarks/w4a16_probe.py host      # host and device time a call of the decode launcher
    python benchmarks/w4a16_probe.py prefill   # fused prefill kernel against two passes
    python benchmarks/w4a16_probe.py mma [splits]   # the MMA decode kernel's tiles, splits
    python benchmarks/w4a16_probe.py gemm      # TMA GEMM tiles on the two-pass shapes
    python benchmarks/w4a16_probe.py layouts   # decode with row- or column-major scales
    python benchmarks/w4a16_probe.py ablate    # the decode loop with its parts switched off
    python benchmarks/w4a16_probe.py regs      # the tensor-core decode kernel by register cap
    python benchmarks/w4a16_probe.py tc        # ... by warps along K and along the rows
    python benchmarks/w4a16_probe.py tc16      # ... at M = 9..16 (two token tiles)
    python benchmarks/w4a16_probe.py tma       # ... with the weight steps brought in by TMA
    python benchmarks/w4a16_probe.py tma16     # the library's TMA kernel at M = 9..16 (blocks)
    python benchmarks/w4a16_probe.py tmasplit  # ... with K split over programs (planes)
    python benchmarks/w4a16_probe.py wide      # the table at M = 9..16 against the MMA kernel
    python benchmarks/w4a16_probe.py widecap   # ... under register caps of the TMA kernel
    python benchmarks/w4a16_probe.py tmasmall  # the TMA kernel, K split, at M = 1..8, < 160 MiB
    python benchmarks/w4a16_probe.py tmacfg    # ... by warps and stages at M = 1..8
    python benchmarks/w4a16_probe.py tmablate  # its loop with x or the scales left out
    python benchmarks/w4a16_probe.py xtokens   # K-sliced kernel: x read by token lanes only
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
    """Host time a call (the launcher's prepared replays) and device time, with the tensor-core
    kernel's K slices storing planes (two launches) and without (one)."""
    for M, N, K in ((1, 57344, 8192), (16, 28672, 8192), (1, 14336, 4096), (1, 4096, 4096)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)

        def call():
            Q.w4a16_decode_triton(x, p, s, z, G, out)
        line = f"M={M} N={N} K={K}:"
        for planes in (True, False):
            Q._TC_PLANES = planes
            Q.decode_config_for.cache_clear()
            Q._PREPARED.clear()
            call()
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(200):
                call()
            host_us = (time.perf_counter() - t) / 200 * 1e6
            torch.cuda.synchronize()
            line += (f" planes {planes}: host {host_us:.1f} us a call, "
                     f"device {_median_s(call) * 1e6:.1f} us;")
        Q._TC_PLANES = True
        Q.decode_config_for.cache_clear()
        t = time.perf_counter()
        for _ in range(200):
            torch.empty((4, M, N), dtype=torch.float32, device=out.device)
        line += f" torch.empty {(time.perf_counter() - t) / 200 * 1e6:.1f} us"
        print(line, flush=True)


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


def layouts() -> None:
    """The table's decode launch with the scales and zero points stored as the [N, G]
    tensor (row-major, the spec's default layout) and as a column-major view of the same
    values (strides (1, N): the 8 rows a load instruction touches share one sector): what
    the scale and zero-point requests cost the decode rows."""
    for M, N, K in ((1, 57344, 8192), (1, 53248, 16384), (1, 14336, 4096), (1, 4096, 4096),
                    (4, 4096, 14336), (4, 18944, 3584)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
        cfg = Q.decode_config_for(M, N, K, G, x.dtype)
        sc, zc = s.t().contiguous().t(), z.t().contiguous().t()
        nbytes = N * K // 2 + 2 * N * (K // G) * 2
        line = f"M={M} N={N} K={K} {tuple(cfg)[:5]}:"
        for name, (ss, zz) in (("row-major", (s, z)), ("column-major", (sc, zc))):
            out.fill_(float("nan"))
            Q.w4a16_decode_triton(x, p, ss, zz, G, out, cfg)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            t = _median_s(lambda: Q.w4a16_decode_triton(x, p, ss, zz, G, out, cfg))
            line += f" {name} {t * 1e6:.1f} us {nbytes / t / 1e12:.2f} TB/s (err {err:.1e});"
        print(line, flush=True)


@triton.jit
def _ablate_kernel(x_ptr, w_ptr, s_ptr, z_ptr, out_ptr, N, STEPS,
                   stride_wn, stride_sn, stride_sg, stride_zn, stride_zg,
                   WR: tl.constexpr, KS: tl.constexpr, STEP_G: tl.constexpr, BIAS: tl.constexpr,
                   PREP: tl.constexpr, PREP_CONS: tl.constexpr, MAIN: tl.constexpr,
                   MAIN_CONS: tl.constexpr, LD: tl.constexpr, LD_CONS: tl.constexpr,
                   DO_X: tl.constexpr, DO_SCALE: tl.constexpr, DO_PREP: tl.constexpr,
                   DO_MAIN: tl.constexpr, X_MASK: tl.constexpr = False,
                   EPILOGUE: tl.constexpr = 0, STAGES: tl.constexpr = 1,
                   X_ASM: tl.constexpr = False):
    # The tensor-core decode kernel's loop (M = 1, STEPS a multiple of KS, no split; the
    # loop's loads software-pipelined by Triton with STAGES > 1), each part but the weight
    # loads switchable: x's loads (else constant words), the scale and
    # zero-point loads (else 1 and 0), the x block's asm (else the words as fragments) and
    # the weight block's asm (else an XOR of the words). Per-row sums only, to keep the
    # loop's results alive; not a product.
    R: tl.constexpr = 16 * WR * KS
    pid_n = tl.program_id(0)
    g, h, wr, ks, col, t, j = Q._tc_coords(WR, KS)
    rows = (pid_n * 16 * WR + (h * WR + wr) * 8 + g) % N
    n_steps = STEPS // KS
    step0 = ks * n_steps
    w_ptrs = w_ptr + rows * stride_wn + step0 * 16 + col
    xcol = tl.max_contiguous(tl.multiple_of(16 * t + j, [1, 4]), [1, 4])
    x_ptrs = x_ptr + step0 * 64 + xcol
    s_ptrs = s_ptr + rows * stride_sn + 0 * col
    z_ptrs = z_ptr + rows * stride_zn + 0 * col
    tmask = j < 2
    one = ks >= 0
    acc = tl.zeros((R, 16), dtype=tl.float32)
    for i in tl.range(0, n_steps, num_stages=STAGES):
        words = tl.load(w_ptrs + i * 16, eviction_policy="evict_first")
        if DO_X and X_ASM:   # loads Triton does not pipeline: x stays out of shared memory
            x0 = Q._ld_x4(x_ptrs + i * 64, one)
            x1 = Q._ld_x4(x_ptrs + (i * 64 + 4), one)
            x2 = Q._ld_x4(x_ptrs + (i * 64 + 8), one)
            x3 = Q._ld_x4(x_ptrs + (i * 64 + 12), one)
        elif DO_X and X_MASK:   # as the kernel: the second row of a lane's pair loads none
            x0 = tl.load(x_ptrs + i * 64, mask=h == 0, other=0)
            x1 = tl.load(x_ptrs + (i * 64 + 4), mask=h == 0, other=0)
            x2 = tl.load(x_ptrs + (i * 64 + 8), mask=h == 0, other=0)
            x3 = tl.load(x_ptrs + (i * 64 + 12), mask=h == 0, other=0)
        elif DO_X:
            x0 = tl.load(x_ptrs + i * 64)
            x1 = tl.load(x_ptrs + (i * 64 + 4))
            x2 = tl.load(x_ptrs + (i * 64 + 8))
            x3 = tl.load(x_ptrs + (i * 64 + 12))
        else:
            x0 = col + i + 0 * g
            x1 = x0 + 1
            x2 = x0 + 2
            x3 = x0 + 3
        if DO_SCALE:
            grp = (step0 + i) // STEP_G
            s = Q._tc_scale(s_ptrs + grp * stride_sg, one, False, False, LD, LD_CONS, LD, LD_CONS)
            z = Q._tc_scale(z_ptrs + grp * stride_zg, one, False, False, LD, LD_CONS, LD, LD_CONS)
        else:
            s = 1.0
            z = 0.0
        if DO_PREP:
            f0, f1, f2, f3, xs = tl.inline_asm_elementwise(
                PREP, PREP_CONS, [x0, x1, x2, x3],
                (tl.int32, tl.int32, tl.int32, tl.int32, tl.float32), True, 8)
        else:
            f0, f1, f2, f3 = x0, x1, x2, x3
            xs = 1.0
        if DO_MAIN:
            p = tl.inline_asm_elementwise(MAIN, MAIN_CONS, [words, f0, f1, f2, f3],
                                          tl.float32, True, 8)
        else:
            p = (words ^ f0 ^ f1 ^ f2 ^ f3).to(tl.float32)
        acc = acc + tl.where(tmask, s * (p - (z - BIAS) * xs), 0.0)
    if EPILOGUE == 2:   # the slices' sums meet in shared memory, stored contiguously
        tot = tl.sum(tl.reshape(acc, (2, KS, 8 * WR, 16)), axis=1)
        tl.store(out_ptr + pid_n * 16 * WR + tl.arange(0, 16 * WR),
                 tl.sum(tl.reshape(tot, (16 * WR, 16)), axis=1))
    elif EPILOGUE == 3:   # each slice stores its own sums ([KS, N] partials), no reduction
        m = 2 * t + (j % 2) + 8 * (j // 2)
        tl.store(out_ptr + ks * N + rows + 0 * col, acc, mask=(j < 2) & (m < 1))
    elif EPILOGUE:   # as the kernel: the K slices' sums meet in shared memory
        tot = tl.sum(tl.reshape(acc, (2, KS, 8 * WR, 16)), axis=1)
        oh = tl.arange(0, 2)[:, None, None]
        orr = tl.arange(0, 8 * WR)[None, :, None]
        ocol = tl.arange(0, 16)[None, None, :]
        orows = pid_n * 16 * WR + oh * (8 * WR) + orr
        oj = ocol % 4
        om = 2 * (ocol // 4) + (oj % 2) + 8 * (oj // 2)
        tl.store(out_ptr + om * N + orows, tot, mask=(oj < 2) & (om < 1) & (orows < N))
    else:
        tl.store(out_ptr + pid_n * R + tl.arange(0, R), tl.sum(acc, axis=1))


def ablate() -> None:
    """The tensor-core decode loop with its parts switched off one at a time (M = 1,
    bfloat16, the table's warps and K slices): how much each part costs beside the weight
    stream alone."""
    # (x loads, scale loads, x asm, weight asm, register cap, x mask, epilogue, stages);
    # x mask 2: x loaded by asm (not pipelined)
    variants = {"full": (1, 1, 1, 1, None, 0, 3, 1),
                "full, 2 stages": (1, 1, 1, 1, None, 0, 3, 2),
                "full, 3 stages": (1, 1, 1, 1, None, 0, 3, 3),
                "full, x asm": (1, 1, 1, 1, None, 2, 3, 1),
                "full, x asm, 2 stages": (1, 1, 1, 1, None, 2, 3, 2),
                "full, x asm, 3 stages": (1, 1, 1, 1, None, 2, 3, 3),
                "full, x asm, 4 stages": (1, 1, 1, 1, None, 2, 3, 4),
                "full, x asm, 6 stages": (1, 1, 1, 1, None, 2, 3, 6),
                "full, sums in shared memory": (1, 1, 1, 1, None, 0, 1, 1),
                "full, cap 72": (1, 1, 1, 1, 72, 0, 3, 1),
                "no x loads": (0, 1, 1, 1, None, 0, 3, 1),
                "no scale loads": (1, 0, 1, 1, None, 0, 3, 1),
                "no scale loads, 3 stages": (1, 0, 1, 1, None, 0, 3, 3),
                "weight loads only": (0, 0, 0, 0, None, 0, 3, 1),
                "weight loads only, 3 stages": (0, 0, 0, 0, None, 0, 3, 3)}
    for M, N, K in ((1, 57344, 8192), (1, 53248, 16384), (1, 14336, 4096)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        cfg = Q.decode_config_for(M, N, K, G, x.dtype)
        ks, wr = cfg.k_slices, cfg.num_warps // cfg.k_slices
        words = p.view(torch.int32)
        (prep, prep_c), (main, main_c) = Q._TC_ASM[(True, 1, bool(cfg.biased))]
        ld, ld_c = Q._TC_SCALE_ASM[("bfloat16", False)]
        grid = (triton.cdiv(N, 16 * wr),)
        sink = torch.empty(max(grid[0] * 16 * cfg.num_warps, N * ks), device="cuda")
        nbytes = N * K // 2
        t_table = _median_s(lambda: Q.w4a16_decode_triton(x, p, s, z, G, out))
        line = f"M={M} N={N} K={K} (KS {ks}, WR {wr}): table {t_table * 1e6:.1f} us;"
        for name, (dx, ds, dp, dm, cap, xm, epi, st) in variants.items():
            def fn(dx=dx, ds=ds, dp=dp, dm=dm, cap=cap, xm=xm, epi=epi, st=st):
                return _ablate_kernel[grid](x.view(torch.int32), words, s, z, sink, N, K // 128,
                                     words.stride(0), s.stride(0), s.stride(1), z.stride(0),
                                     z.stride(1), WR=wr, KS=ks, STEP_G=G // 128,
                                     BIAS=-128 if cfg.biased else 8, PREP=prep,
                                     PREP_CONS=prep_c, MAIN=main, MAIN_CONS=main_c, LD=ld,
                                     LD_CONS=ld_c, DO_X=bool(dx), DO_SCALE=bool(ds),
                                     DO_PREP=bool(dp), DO_MAIN=bool(dm), X_MASK=xm == 1,
                                     X_ASM=xm == 2,
                                     EPILOGUE=epi, STAGES=st, num_warps=cfg.num_warps,
                                     num_stages=st,
                                     **({} if cap is None else {"maxnreg": cap}))
            k = fn()
            asm = k.asm.get("ptx", "")
            t = _median_s(fn)
            line += (f" {name} ({k.n_regs} regs, {asm.count('cp.async.cg') + asm.count('cp.async.ca')}"
                     f" cp.async, {k.metadata.shared} B smem) {t * 1e6:.1f} us"
                     f" {nbytes / t / 1e12:.2f} TB/s;")
        print(line, flush=True)


def tc() -> None:
    """The tensor-core decode kernel by warps along K (k_slices) and along the rows
    (row_warps), beside the table's choice, M = 1 and 4, bfloat16."""
    layouts = ((1, 4), (2, 2), (4, 2), (8, 1), (4, 1), (2, 1))
    for M, N, K in ((1, 57344, 8192), (1, 53248, 16384), (1, 14336, 4096), (4, 18944, 3584),
                    (4, 4096, 14336), (1, 4096, 4096)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
        table = Q.decode_config_for(M, N, K, G, x.dtype)
        cands = [("table", table), ("no planes", table._replace(planes=False))] + [
            (f"ks{ks} rw{rw}", Q.tc_config_for(M, N, K, G, x.dtype, k_slices=ks, row_warps=rw))
            for ks, rw in layouts]
        line = f"M={M} N={N} K={K}:"
        for name, cfg in cands:
            out.fill_(float("nan"))
            Q.w4a16_decode_triton(x, p, s, z, G, out, cfg)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            t = _median_s(lambda: Q.w4a16_decode_triton(x, p, s, z, G, out, cfg))
            tag = f"(ks{cfg.k_slices} rw{cfg.num_warps // cfg.k_slices})" if name == "table" else ""
            line += f" {name}{tag} {t * 1e6:.1f}{'' if err < 1e-2 else ' WRONG'};"
        print(line, flush=True)


def tc16() -> None:
    """The tensor-core decode kernel at M = 16 (a second token tile; the table gives these
    rows the MMA kernel) by K slices, row warps and planes, beside the table's launch."""
    for dtype in (torch.bfloat16, torch.float16):
        for M, N, K in ((16, 28672, 8192), (16, 8192, 28672), (12, 14336, 4096)):
            x, p, s, z, out = _operands(M, N, K, dtype)
            ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
            cands = [("table", None)]
            for ks, rw in ((4, 1), (8, 1), (2, 1), (4, 2), (2, 2)):
                for planes in (True, False):
                    cands.append((f"ks{ks} rw{rw}{' planes' if planes else ''}",
                                  Q.tc_config_for(M, N, K, G, dtype, k_slices=ks, row_warps=rw,
                                                  planes=planes)))
            line = f"{str(dtype)[6:]} M={M} N={N} K={K}:"
            saved = Q._TC_MAX_M
            for name, cfg in cands:
                Q._TC_MAX_M = saved if cfg is None else 16
                try:
                    out.fill_(float("nan"))
                    Q.w4a16_decode_triton(x, p, s, z, G, out, cfg)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    t = _median_s(lambda: Q.w4a16_decode_triton(x, p, s, z, G, out, cfg))
                finally:
                    Q._TC_MAX_M = saved
                line += f" {name} {t * 1e6:.1f}{'' if err < 1e-2 else ' WRONG'};"
            print(line, flush=True)
    for cache in Q._w4a16_tc_kernel.device_caches.values():
        for compiled in cache[0].values():
            print(f"build: {compiled.n_regs} registers, {compiled.n_spills} spilled")


@triton.jit
def _tc_tma_kernel(x_ptr, w_desc, s_ptr, z_ptr, out_ptr, M, N, STEPS,
                   stride_xm, stride_sn, stride_sg, stride_zn, stride_zg, stride_os, stride_om,
                   stride_on,
                   W: tl.constexpr, NT: tl.constexpr, STEP_G: tl.constexpr, BIAS: tl.constexpr,
                   STAGES: tl.constexpr, PREP: tl.constexpr, PREP_CONS: tl.constexpr,
                   MAIN: tl.constexpr, MAIN_CONS: tl.constexpr, LD: tl.constexpr,
                   LD_CONS: tl.constexpr, LDM: tl.constexpr, LDM_CONS: tl.constexpr,
                   DROP_S: tl.constexpr = False, DROP_X: tl.constexpr = False):
    # The tensor-core decode kernel with its W warps along the rows (no K slices: the
    # program's [16 W, 16] word tile is then one [16 W rows, 64 bytes] box of the weight)
    # and the weight steps brought in by TMA, pipelined STAGES deep by Triton's loop
    # pipeliner through shared memory, where the table's kernel loads them into registers.
    R: tl.constexpr = 16 * W
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)      # K split over programs: plane pid_k of out
    per = tl.cdiv(STEPS, tl.num_programs(1))
    g, h, wr, ks, col, t, j = Q._tc_coords(W, 1)
    rows = pid_n * R + (h * W + wr) * 8 + g
    rows_c = rows % N
    tok = g % M
    m = 2 * t + (j % 2) + 8 * (j // 2)
    tmask = j < 2 * NT
    xcol = tl.max_contiguous(tl.multiple_of(16 * t + j, [1, 4]), [1, 4])
    x_ptrs = x_ptr + tok * stride_xm + xcol
    s_ptrs = s_ptr + rows_c * stride_sn + 0 * col
    z_ptrs = z_ptr + rows_c * stride_zn + 0 * col
    one = ks >= 0
    acc = tl.zeros((R, 16), dtype=tl.float32)
    for i in tl.range(pid_k * per, tl.minimum(STEPS, pid_k * per + per), num_stages=STAGES):
        words = w_desc.load([pid_n * R, i * 16])
        # x by asm, which the pipeliner leaves out of shared memory (every row's lanes
        # read their token's words; the asm uses the first row's)
        if DROP_X:   # (ablation) constant x words: the x block's asm leaves the loop too
            x0 = tl.full((R, 16), 0x3F803F80, tl.int32) + pid_n * 0
            x1, x2, x3 = x0, x0, x0
        else:
            x0 = Q._ld_x4(x_ptrs + i * 64, one)
            x1 = Q._ld_x4(x_ptrs + (i * 64 + 4), one)
            x2 = Q._ld_x4(x_ptrs + (i * 64 + 8), one)
            x3 = Q._ld_x4(x_ptrs + (i * 64 + 12), one)
        if DROP_S:   # (ablation) constant scales and zero points
            s = tl.full((R, 16), 0.01, tl.float32) + pid_n * 0.0
            z = tl.full((R, 16), 8.0, tl.float32) + pid_n * 0.0
        else:
            s = Q._tc_scale(s_ptrs + i // STEP_G * stride_sg, one, False, False, LD, LD_CONS,
                            LDM, LDM_CONS)
            z = Q._tc_scale(z_ptrs + i // STEP_G * stride_zg, one, False, False, LD, LD_CONS,
                            LDM, LDM_CONS)
        acc = Q._tc_step(acc, (words, x0, x1, x2, x3, x0, x1, x2, x3, s, z), 0, 0, 0, 0, one,
                         one, tmask, PREP, PREP_CONS, MAIN, MAIN_CONS, NT, False, BIAS)
    optr = out_ptr + pid_k * stride_os + m * stride_om + rows * stride_on
    tl.store(optr, acc.to(out_ptr.dtype.element_ty), mask=tmask & (m < M) & (rows < N))


def _tma_call(x, p, s, z, out, W, stages, split=1, **drop):
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, K = x.shape
    N = p.shape[0]
    words = Q._word_view(p, K)
    x32 = x.view(torch.int32)
    desc = TensorDescriptor(words, list(words.shape), list(words.stride()), [16 * W, 16])
    opts = Q.tc_asm_options(x.dtype, s.dtype, M, G, Q._TC_BIASED[x.dtype])
    opts.pop("EMULATE")   # this probe's kernel runs on the GPU only
    grid = (triton.cdiv(N, 16 * W), split)

    def call():
        dest, dstrides = Q._split_dest(out, split)
        _tc_tma_kernel[grid](x32, desc, s, z, dest, M, N, K // 128, x32.stride(0), s.stride(0),
                             s.stride(1), z.stride(0), z.stride(1), *dstrides,
                             W=W, STAGES=stages, **opts, **drop, num_warps=W,
                             num_stages=stages)
        Q._sum_splits(dest, out, split)
    return call


def tma() -> None:
    """The tensor-core decode kernel with the weight brought in by TMA through a pipelined
    shared-memory ring (_tc_tma_kernel), by warps a program and stages, beside the table."""
    for M, N, K in ((1, 57344, 8192), (1, 53248, 16384), (1, 14336, 4096), (4, 18944, 3584),
                    (4, 4096, 14336), (1, 4096, 4096)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
        line = f"M={M} N={N} K={K}:"
        t = _median_s(lambda: Q.w4a16_decode_triton(x, p, s, z, G, out))
        line += f" table {t * 1e6:.1f};"
        for W, stages, split in ((4, 4, 1), (2, 4, 1), (2, 5, 1), (4, 3, 1), (2, 3, 1),
                                 (2, 4, 2), (4, 4, 2), (2, 4, 4), (4, 4, 4), (1, 4, 4)):
            if True:
                try:
                    call = _tma_call(x, p, s, z, out, W, stages, split)
                    out.fill_(float("nan"))
                    call()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    t = _median_s(call)
                    line += (f" w{W} s{stages} k{split} {t * 1e6:.1f}"
                             f"{'' if err < 1e-2 else ' WRONG'};")
                except Exception as e:   # a probe: report and go on
                    line += f" w{W} s{stages} k{split} failed ({type(e).__name__}: {str(e)[:80]});"
        print(line, flush=True)
    for cache in _tc_tma_kernel.device_caches.values():
        for compiled in cache[0].values():
            ptx = compiled.asm.get("ptx", "")
            print(f"build: {compiled.metadata.shared} B shared, "
                  f"{ptx.count('cp.async.bulk.tensor')} TMA loads, "
                  f"{ptx.count('bar.sync')} bar.sync")


def tmablate() -> None:
    """The TMA decode loop (every lane reading x, 4 warps, 3 boxes) with its x loads, its
    scale and zero-point loads, or both replaced by constants (wrong outputs; the time each
    part costs), M = 1, bfloat16."""
    for M, N, K in ((1, 57344, 8192), (1, 53248, 16384)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        line = f"M={M} N={N} K={K}:"
        for name, drop in (("full", {}), ("no scales", dict(DROP_S=True)),
                           ("no x", dict(DROP_X=True)),
                           ("neither", dict(DROP_S=True, DROP_X=True))):
            t = _median_s(_tma_call(x, p, s, z, out, 4, 3, **drop))
            line += f" {name} {t * 1e6:.1f};"
        print(line, flush=True)


def _tma_configs(rows, configs) -> None:
    """The library's TMA decode kernel on ``rows`` ((M, N, K)) at each (warps, stages[, row
    blocks a program]) of ``configs``, beside the table's launch, both dtypes."""
    for dtype in (torch.bfloat16, torch.float16):
        for M, N, K in rows:
            x, p, s, z, out = _operands(M, N, K, dtype)
            ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
            words = Q._word_view(p, K)
            x32 = x.view(torch.int32)
            line = f"{str(dtype)[6:]} M={M} N={N} K={K}:"
            t = _median_s(lambda: Q.w4a16_decode_triton(x, p, s, z, G, out))
            line += f" table {t * 1e6:.1f};"
            for W, stages, *more in configs:
                rb = more[0] if more else 1
                split = more[1] if len(more) > 1 else 1
                cfg = Q.tc_config_for(M, N, K, G, dtype, tma=True)._replace(
                    block_n=16 * W * rb, num_warps=W, num_stages=stages, split_k=split)

                def call():
                    Q._launch_tc_tma(x, x32, words, s, z, G, out, cfg, M, N, K)
                out.fill_(float("nan"))
                call()
                err = ((out.float() - ref).norm() / ref.norm()).item()
                t = _median_s(call)
                line += (f" w{W} s{stages}{f' b{rb}' if rb > 1 else ''}"
                         f"{f' k{split}' if split > 1 else ''} {t * 1e6:.1f}"
                         f"{'' if err < 1e-2 else ' WRONG'};")
            print(line, flush=True)


def tma16() -> None:
    """The library's TMA decode kernel at M = 9..16 (two token tiles), by warps, stages and
    row blocks a program, beside the table's launch (the MMA kernel below 160 MiB)."""
    _tma_configs(((16, 28672, 8192), (16, 8192, 28672), (12, 57344, 8192),
                  (16, 57344, 8192), (16, 53248, 16384)),
                 ((4, 3), (2, 4), (2, 4, 2), (2, 4, 4), (1, 4, 4), (4, 3, 2), (2, 6, 4)))


def tmasplit() -> None:
    """The library's TMA decode kernel at M = 9..16 with K split over programs (planes
    summed by the second kernel), by warps, stages, row blocks and splits, beside the
    table's launch."""
    _tma_configs(((16, 28672, 8192), (16, 8192, 28672), (16, 57344, 8192), (12, 28672, 8192),
                  (16, 14336, 4096), (16, 4096, 14336)),
                 ((2, 4, 4, 1), (2, 4, 4, 2), (2, 4, 4, 3), (2, 4, 4, 4), (2, 4, 4, 7),
                  (2, 4, 2, 2), (2, 4, 2, 4), (4, 3, 2, 2), (1, 4, 4, 4)))


def tmasmall() -> None:
    """The library's TMA decode kernel at M = 1..8 on weights under 160 MiB with K split over
    programs, beside the table's launch (the K-sliced kernel there)."""
    _tma_configs(((1, 4096, 4096), (1, 14336, 4096), (4, 4096, 14336), (4, 18944, 3584),
                  (1, 28672, 8192), (8, 28672, 8192)),
                 ((4, 3, 1, 2), (4, 3, 1, 4), (4, 3, 1, 8), (2, 4, 1, 2), (2, 4, 1, 4),
                  (2, 4, 1, 8), (1, 4, 1, 4), (1, 4, 1, 8)))


def _checked_us(call, out, ref) -> str:
    """``call`` (which writes ``out``) run once on a NaN-filled ``out`` and checked against
    ``ref``, then timed: its microseconds, marked WRONG past 1 % relative error."""
    out.fill_(float("nan"))
    call()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    return f"{_median_s(call) * 1e6:.1f}{'' if err < 1e-2 else ' WRONG'}"


def wide() -> None:
    """The table's launch at M = 9..16 beside the MMA kernel (legacy_decode_config) and the
    TMA kernel with one split fewer and one more than the table's, both dtypes."""
    for dtype in (torch.bfloat16, torch.float16):
        for M, N, K in ((16, 28672, 8192), (16, 8192, 28672), (12, 28672, 8192),
                        (16, 14336, 4096), (16, 18944, 3584), (10, 57344, 8192),
                        (16, 4096, 14336)):
            x, p, s, z, out = _operands(M, N, K, dtype)
            ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
            cfg = Q.decode_config_for(M, N, K, G, dtype)
            cands = {"table": cfg, "mma": Q.legacy_decode_config(M, N, K, G)}
            if cfg.tma:
                for d in (-1, 1):
                    if cfg.split_k + d >= 1:
                        cands[f"k{cfg.split_k + d}"] = cfg._replace(split_k=cfg.split_k + d)
            line = f"{str(dtype)[6:]} M={M} N={N} K={K} (table: tma {cfg.tma} k{cfg.split_k}):"
            for name, c in cands.items():
                def call(c=c):
                    Q.w4a16_decode_triton(x, p, s, z, G, out, c)
                line += f" {name} {_checked_us(call, out, ref)};"
            print(line, flush=True)


def widecap() -> None:
    """The table's launch at M = 16 under register caps of the TMA kernel
    (Q._TC_TMA_MAXNREG), at the table's K split and twice it (a capped build fits more
    programs an SM), both dtypes."""
    for dtype in (torch.bfloat16, torch.float16):
        for M, N, K in ((16, 28672, 8192), (16, 8192, 28672), (16, 57344, 8192),
                        (16, 14336, 4096)):
            x, p, s, z, out = _operands(M, N, K, dtype)
            ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
            cfg = Q.decode_config_for(M, N, K, G, dtype)
            line = f"{str(dtype)[6:]} M={M} N={N} K={K} (k{cfg.split_k}):"
            for cap in (None, 168, 128):
                for mult in (1, 2):
                    Q._TC_TMA_MAXNREG = cap
                    c = cfg._replace(split_k=cfg.split_k * mult)

                    def call(c=c):
                        Q.w4a16_decode_triton(x, p, s, z, G, out, c)
                    line += f" cap {cap} k{c.split_k} {_checked_us(call, out, ref)};"
            Q._TC_TMA_MAXNREG = None
            print(line, flush=True)


def tmacfg() -> None:
    """The library's TMA decode kernel at M = 1..8 by warps a program and boxes in flight,
    beside the table's launch."""
    _tma_configs(((1, 57344, 8192), (1, 53248, 16384), (4, 57344, 8192), (8, 57344, 8192),
                  (1, 28672, 8192)),
                 ((4, 3), (4, 4), (2, 4), (2, 6), (2, 8), (1, 6), (1, 8)))


def xtokens() -> None:
    """The K-sliced tensor-core kernel with x read in every lane against only in the lanes
    whose MMA column holds a token (Q._TC_X_TOKENS switched for every M), twice each, both
    dtypes."""
    saved = dict(Q._TC_X_TOKENS)
    try:
        for dtype in (torch.bfloat16, torch.float16):
            for M in (1, 2, 3, 4, 6, 8):
                for N, K in ((14336, 4096), (4096, 14336), (18944, 3584)):
                    x, p, s, z, out = _operands(M, N, K, dtype)
                    ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
                    cfg = Q.tc_config_for(M, N, K, G, dtype, tma=False)
                    line = f"{str(dtype)[6:]} M={M} {N}x{K} ({cfg.k_slices} slices):"
                    times = {False: [], True: []}
                    for _ in range(2):
                        for tokens in (False, True):
                            Q._TC_X_TOKENS.clear()
                            Q._TC_X_TOKENS.update({dtype: (1, 8)} if tokens else {})
                            out.fill_(float("nan"))
                            Q.w4a16_decode_triton(x, p, s, z, G, out, cfg)
                            err = ((out.float() - ref).norm() / ref.norm()).item()
                            if err > 1e-2:
                                line += f" WRONG ({'tokens' if tokens else 'all'});"
                            times[tokens].append(_median_s(
                                lambda: Q.w4a16_decode_triton(x, p, s, z, G, out, cfg)))
                    for tokens, ts in times.items():
                        line += (f" {'token lanes' if tokens else 'every lane'} "
                                 f"{' / '.join(f'{t * 1e6:.1f}' for t in ts)};")
                    print(line, flush=True)
    finally:
        Q._TC_X_TOKENS.clear()
        Q._TC_X_TOKENS.update(saved)


def regs() -> None:
    """The table's tensor-core decode launch under register caps (Q._TC_MAXNREG), with the
    registers and spill bytes of each build on this device's Triton and ptxas."""
    for M, N, K in ((1, 57344, 8192), (1, 53248, 16384), (1, 14336, 4096), (4, 18944, 3584),
                    (1, 4096, 4096)):
        x, p, s, z, out = _operands(M, N, K, torch.bfloat16)
        ref = Q.gemm_w4a16_reference(x, p, s, z, G).float()
        cfg = Q.decode_config_for(M, N, K, G, x.dtype)
        line = f"M={M} N={N} K={K}:"
        for cap in (None, 64, 72, 80, 96, 128):
            Q._TC_MAXNREG = cap
            out.fill_(float("nan"))
            Q._launch_tc(x, p, s, z, G, out, cfg, M, N, K)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            t = _median_s(lambda: Q._launch_tc(x, p, s, z, G, out, cfg, M, N, K))
            line += f" cap {cap}: {t * 1e6:.1f} us (err {err:.0e});"
        Q._TC_MAXNREG = None
        print(line, flush=True)
    for cache in Q._w4a16_tc_kernel.device_caches.values():
        for compiled in cache[0].values():
            print(f"build: maxnreg {compiled.metadata.maxnreg}, {compiled.n_regs} registers, "
                  f"{compiled.n_spills} spilled")


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
     "layouts": lambda: layouts(), "ablate": lambda: ablate(), "regs": lambda: regs(),
     "tc": lambda: tc(), "tc16": lambda: tc16(), "tma": lambda: tma(),
     "tma16": lambda: tma16(), "tmasplit": lambda: tmasplit(), "wide": lambda: wide(),
     "widecap": lambda: widecap(), "tmasmall": lambda: tmasmall(), "tmacfg": lambda: tmacfg(),
     "tmablate": lambda: tmablate(), "xtokens": lambda: xtokens(),
     "launch": lambda: launch(sys.argv[2:])}[what]()
