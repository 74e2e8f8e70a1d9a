"""Offline tile sweep for the GEMM kernels on a Hopper GPU: per workload row of GemmFwdOp,
time `torch.matmul` (cuBLAS), the table's choice, and candidate configurations of the TMA
kernel, a persistent TMA kernel (optionally warp-specialized) and the GEMV kernel.

`python benchmarks/gemm_sweep.py [--json PATH] [--budget-s 420]`. Prints, per row, the best
candidates as a ratio to cuBLAS; the JSON holds every timing. Used to fill the tables in
kernels/gemm.py; not part of the package.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench
from triton.tools.tensor_descriptor import TensorDescriptor

from opspec.kernels.gemm import GemmConfig, _gemm_tma_kernel, gemm_triton, gemv_triton
from opspec.kernels.tiling import grouped_tile

ROWS = [  # (label, M, N, K, trans_a, trans_b, dtype)
    ("llama3-8b-mlp-up", 4096, 14336, 4096, False, True, torch.bfloat16),
    ("llama3-8b-mlp-down", 4096, 4096, 14336, False, True, torch.bfloat16),
    ("llama3-8b-qkv-decode", 128, 6144, 4096, False, True, torch.bfloat16),
    ("llama3-70b-mlp-up", 2048, 28672, 8192, False, True, torch.bfloat16),
    ("dsv3-q-a-prefill", 4096, 1536, 7168, False, True, torch.bfloat16),
    ("dsv3-mlp-up", 4096, 18432, 7168, False, True, torch.bfloat16),
    ("llama3-8b-decode-m1", 1, 14336, 4096, False, True, torch.bfloat16),
    ("dsv3-decode-m16", 16, 18432, 7168, False, True, torch.bfloat16),
    ("square-4k-nn", 4096, 4096, 4096, False, False, torch.float16),
    ("wgrad-tn", 4096, 4096, 8192, True, False, torch.bfloat16),
]


@triton.jit
def _persistent_tma(a_desc, b_desc, c_desc, M, N, K,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr,
                    NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, WS: tl.constexpr,
                    SUBTILE: tl.constexpr):
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_m * num_n
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WS):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_tiles):
            off_k = k * BLOCK_K
            if TRANS_A:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if TRANS_B:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)
        if SUBTILE:
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            c0, c1 = tl.split(acc)
            c_desc.store([off_m, off_n], c0.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], c1.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def persistent(a, b, ta, tb, out, cfg: GemmConfig, flatten: bool, ws: bool, subtile: bool):
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    N = b.shape[0] if tb else b.shape[1]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    a_desc = TensorDescriptor.from_tensor(a, [bk, bm] if ta else [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bn, bk] if tb else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn // 2] if subtile else [bm, bn])
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    grid = (min(sms, tiles),)
    _persistent_tma[grid](a_desc, b_desc, c_desc, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                          GROUP_M=cfg.group_m, TRANS_A=ta, TRANS_B=tb, NUM_SMS=min(sms, tiles),
                          FLATTEN=flatten, WS=ws, SUBTILE=subtile,
                          num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def tma(a, b, ta, tb, out, cfg: GemmConfig):
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    N = b.shape[0] if tb else b.shape[1]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    a_desc = TensorDescriptor.from_tensor(a, [bk, bm] if ta else [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bn, bk] if tb else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _gemm_tma_kernel[grid](a_desc, b_desc, c_desc, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                           GROUP_M=cfg.group_m, TRANS_A=ta, TRANS_B=tb, STAGES=cfg.num_stages,
                           num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


C = GemmConfig
BIG = [C(128, 256, 64, 8, 8, 3), C(128, 256, 64, 8, 8, 4), C(128, 128, 64, 8, 4, 4),
       C(128, 128, 64, 8, 4, 5), C(128, 128, 64, 8, 8, 4), C(256, 128, 64, 8, 8, 3),
       C(128, 128, 128, 8, 8, 3), C(128, 256, 64, 16, 8, 3)]
SMALL_M = [C(128, 64, 64, 8, 4, 5), C(64, 128, 64, 8, 4, 5), C(64, 64, 128, 8, 4, 4),
           C(128, 32, 128, 8, 4, 4), C(64, 64, 256, 8, 4, 3), C(128, 64, 128, 8, 4, 4),
           C(64, 128, 128, 8, 4, 4)]
GEMV = [C(16, bn, bk, 1, w, s) for bn in (16, 32, 64) for bk in (128, 256, 512)
        for w in (4, 8) for s in (3, 4, 6)]


def candidates(M):
    if M <= 16:
        for cfg in GEMV:
            yield f"gemv {tuple(cfg)}", lambda a, b, ta, tb, o, c=cfg: gemv_triton(a, b, ta, tb, o, config=c)
        for cfg in SMALL_M[:3]:
            yield f"tma {tuple(cfg)}", lambda a, b, ta, tb, o, c=cfg: tma(a, b, ta, tb, o, c)
        return
    for cfg in (SMALL_M if M <= 256 else BIG):
        yield f"tma {tuple(cfg)}", lambda a, b, ta, tb, o, c=cfg: tma(a, b, ta, tb, o, c)
        variants = [(False, False, False), (True, True, False)]
        if cfg.block_n >= 256:
            variants.append((False, False, True))
        for flat, ws, sub in variants:
            yield (f"persistent {tuple(cfg)} flatten={flat} ws={ws} subtile={sub}",
                   lambda a, b, ta, tb, o, c=cfg, f=flat, w=ws, s=sub:
                   persistent(a, b, ta, tb, o, c, f, w, s))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--rows", default="")
    args = ap.parse_args(argv)
    t_end = time.time() + args.budget_s
    dev = torch.device("cuda")
    results = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
               "triton": triton.__version__, "rows": {}}
    for label, M, N, K, ta, tb, dt in ROWS:
        if args.rows and not any(r in label for r in args.rows.split(",")):
            continue
        torch.manual_seed(0)
        a = torch.randn((K, M) if ta else (M, K), device=dev, dtype=dt) / 8
        b = torch.randn((N, K) if tb else (K, N), device=dev, dtype=dt) / 8
        ref = torch.matmul(a.T if ta else a, b.T if tb else b)
        out = torch.empty_like(ref)
        row = {}
        t = do_bench(lambda: torch.matmul(a.T if ta else a, b.T if tb else b))
        row["cublas"] = t
        row["table"] = do_bench(lambda: gemm_triton(a, b, ta, tb, out))
        for name, fn in candidates(M):
            if time.time() > t_end:
                row["_truncated"] = True
                break
            try:
                fn(a, b, ta, tb, out)
                err = (out.float() - ref.float()).abs().max().item()
                if err > 0.05 * max(1.0, ref.float().abs().max().item()):
                    row[name] = f"wrong (max err {err:.3g})"
                    continue
                row[name] = do_bench(lambda: fn(a, b, ta, tb, out), warmup=10, rep=40)
            except Exception as exc:  # an unsupported variant: record why
                row[name] = f"error: {type(exc).__name__}: {str(exc)[:160]}"
        results["rows"][label] = row
        flops = 2 * M * N * K
        timed = sorted((v, k) for k, v in row.items() if isinstance(v, float))
        print(f"{label}: cuBLAS {row['cublas'] * 1e3:.1f} us ({flops / row['cublas'] / 1e9:.0f} TFLOP/s), "
              f"table {row['cublas'] / row['table']:.3f}x", flush=True)
        for v, k in timed[:4]:
            print(f"   {row['cublas'] / v:.3f}x  {k}", flush=True)
        errs = {k: v for k, v in row.items() if isinstance(v, str)}
        if errs:
            print(f"   {len(errs)} failed, e.g. {next(iter(errs.items()))}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
