"""Offline configuration sweep for the W4A16 GEMM kernels (opspec.kernels.quant_gemm) on an
H200: per row, time the table's choice, the eager baseline (dequantize, then torch.matmul),
and candidate configurations of the decode kernels (the MMA kernel and the FMA kernel,
``DecodeConfig.gemv``) and of the prefill kernel (tiles, warps, stages, float32 or 16-bit
dequantization, ``swap_ab``). Every variant's output is checked once against a float32
torch reference (a wrong one is reported and never "best").

    python benchmarks/w4a16_sweep.py [--budget-s 240] [--json PATH] [--rows SUBSTR ...]

Prints us, GB/s (packed weight + scales/zeros + x + y) and TFLOP/s per variant and the best
per row; the JSON holds every timing. The budget is shared out among the rows (the table
and eager first in each row, then the candidates in the order listed, most promising first)
so that the run, Triton compiles included, ends in about --budget-s seconds. Used to fill the
tables in kernels/quant_gemm.py; not part of the package.

``--smoke`` runs tiny rows through Triton's interpreter on the CPU (a check of this script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
from triton.testing import do_bench

import opspec.kernels.quant_gemm as Q
from opspec.kernels.quant_gemm import DecodeConfig, PrefillConfig

SMS = 132
G = 128  # group size of every row (the workloads' choice)

# (label, M, N, K); decode rows use the decode launcher, prefill rows the prefill one.
DECODE_ROWS = [
    ("llama3-70b-gu-decode", 1, 57344, 8192),
    ("llama3-405b-up-decode", 1, 53248, 16384),
    ("llama3-70b-up-decode-m1", 1, 28672, 8192),
    ("llama3-8b-o-decode", 1, 4096, 4096),
    ("llama3-8b-down-decode-m4", 4, 4096, 14336),
    ("llama3-70b-gu-decode-m16", 16, 57344, 8192),
    ("llama3-70b-up-decode", 16, 28672, 8192),
    ("llama3-405b-up-decode-m16", 16, 53248, 16384),
    ("llama3-8b-o-decode-m16", 16, 4096, 4096),
]
PREFILL_ROWS = [
    ("llama3-70b-up-prefill-4096", 4096, 28672, 8192),
    ("llama3-8b-up-prefill-4096", 4096, 14336, 4096),
    ("llama3-8b-down-prefill-4096", 4096, 4096, 14336),
]


def split_for(N: int, K: int, block_n: int, block_k: int, programs: int) -> int:
    """K splits so that about `programs` programs run (at least 4 steps a split)."""
    n_blocks = triton.cdiv(N, block_n)
    steps = triton.cdiv(K, block_k)
    if n_blocks >= programs:
        return 1
    split = min(triton.cdiv(programs, n_blocks), max(1, steps // 4))
    return triton.cdiv(steps, triton.cdiv(steps, split))


def decode_variants(M: int, N: int, K: int) -> list[tuple[str, DecodeConfig]]:
    out = []
    if M <= Q.GEMV_MAX_M:
        # FMA kernel: (rows a program, warps, programs as multiples of the SMs, K a step,
        # stages: 2 = the weight double-buffered in registers, 1 = not)
        for bn, w, waves, bk, st in ((128, 4, 4, 128, 2), (128, 4, 4, 128, 1), (128, 4, 8, 128, 2),
                                     (64, 4, 8, 128, 2), (128, 4, 16, 128, 2), (64, 4, 8, 128, 1),
                                     (256, 8, 4, 128, 2), (64, 2, 8, 128, 2), (128, 8, 8, 128, 2),
                                     (256, 4, 4, 128, 2), (64, 4, 16, 128, 2), (128, 4, 6, 128, 2),
                                     (32, 4, 16, 128, 2), (128, 4, 8, 64, 2)):
            s = split_for(N, K, bn, bk, waves * SMS)
            out.append((f"gemv bn{bn} bk{bk} w{w} {'prefetch' if st > 1 else 'no-prefetch'} split{s}",
                        DecodeConfig(bn, bk, s, w, st, True)))
    # MMA kernel: (rows, K a step, warps, stages, programs as multiples of the SMs)
    for bn, bk, w, st, waves in ((128, 128, 8, 4, 4), (64, 128, 4, 4, 8), (128, 128, 4, 4, 8),
                                 (64, 128, 4, 6, 8), (128, 128, 8, 3, 8), (256, 128, 8, 4, 4),
                                 (128, 128, 4, 6, 4), (64, 64, 4, 8, 8), (128, 64, 4, 6, 8),
                                 (32, 128, 4, 6, 16), (128, 128, 4, 4, 16)):
        s = split_for(N, K, bn, bk, waves * SMS)
        out.append((f"mma bn{bn} bk{bk} w{w} st{st} split{s}", DecodeConfig(bn, bk, s, w, st)))
    return out


def prefill_variants() -> list[tuple[str, PrefillConfig]]:
    out = []
    # (block_m, block_n, block_k, group_m, warps, stages, f32_dequant, swap_ab). With swap_ab
    # block_n (weight rows) is the wgmma M side (64 a warpgroup), block_m (tokens) its N.
    for c in ((128, 128, 64, 8, 8, 3, False, True), (128, 128, 64, 8, 8, 3, True, True),
              (256, 128, 64, 8, 8, 3, False, True), (128, 256, 64, 8, 8, 3, False, True),
              (256, 128, 64, 8, 8, 4, False, True), (128, 128, 128, 8, 8, 3, False, True),
              (256, 64, 64, 8, 4, 4, False, True), (128, 128, 64, 8, 4, 4, False, True),
              (256, 128, 64, 8, 8, 3, True, True), (128, 128, 64, 8, 8, 4, False, True),
              (128, 128, 64, 8, 8, 3, False, False), (128, 128, 64, 8, 8, 4, True, False),
              (128, 256, 64, 8, 8, 3, True, False), (128, 128, 128, 8, 8, 3, True, False),
              (128, 128, 64, 8, 4, 3, True, False), (64, 128, 64, 8, 4, 4, True, False),
              (256, 128, 64, 8, 8, 3, True, False), (128, 64, 64, 8, 4, 4, True, False)):
        cfg = PrefillConfig(*c)
        name = (f"{'swap ' if cfg.swap_ab else ''}{cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
                f"w{cfg.num_warps} st{cfg.num_stages} {'f32' if cfg.f32_dequant else '16bit'}")
        out.append((name, cfg))
    return out


def operands(M, N, K, dtype, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = (torch.randn(M, K, generator=gen, device=device) * 0.5).to(dtype)
    packed = torch.randint(0, 256, (N, K // 2), generator=gen, device=device, dtype=torch.uint8)
    scales = (torch.rand(N, K // G, generator=gen, device=device) * 0.01 + 0.005).to(dtype)
    zeros = torch.randint(0, 16, (N, K // G), generator=gen, device=device).to(dtype)
    return x, packed, scales, zeros


_WORKER_OPERANDS: dict = {}


def _precompile(task) -> int:
    """Worker: launch each configuration once on the row's shapes (values do not matter),
    so that Triton's on-disk cache holds its binaries when the timing process asks."""
    kind, M, N, K, dtype_name, device, cfgs = task
    dtype = getattr(torch, dtype_name)
    key = (M, N, K, dtype_name)
    if key not in _WORKER_OPERANDS:
        _WORKER_OPERANDS.clear()
        x = torch.zeros(M, K, dtype=dtype, device=device)
        p = torch.zeros(N, K // 2, dtype=torch.uint8, device=device)
        s = torch.ones(N, K // G, dtype=dtype, device=device)
        _WORKER_OPERANDS[key] = (x, p, s, s.clone(), torch.empty(M, N, dtype=dtype, device=device))
    x, p, s, z, out = _WORKER_OPERANDS[key]
    launch = Q.w4a16_decode_triton if kind == "decode" else Q.w4a16_prefill_triton
    done = 0
    for cfg in cfgs:
        try:
            launch(x, p, s, z, G, out, config=cfg)
            done += 1
        except Exception:  # reported by the timing process
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def precompile(rows, dtype_name: str, device: str, jobs: int, timeout_s: float) -> None:
    """Compile every row's candidates in `jobs` processes at once (the compiles, not the
    timings, dominate the sweep); whatever is not done by `timeout_s` compiles inline."""
    import concurrent.futures as cf
    import multiprocessing as mp

    tasks, seen = [], set()
    # prefill first (the slowest compiles), then decode; a binary serves every row with the
    # same specialization, so each (kernel, M, configuration, split or not) is built once
    for kind, label, M, N, K in sorted(rows, key=lambda r: r[0] != "prefill"):
        cfgs = [c for _, c in (decode_variants(M, N, K) if kind == "decode" else prefill_variants())]
        cfgs.append(Q.decode_config_for(M, N, K, G) if kind == "decode" else Q.prefill_config_for(M, N, K, G))
        todo = []
        for c in cfgs:
            key = (kind, c) if kind == "prefill" else (kind, M, c._replace(split_k=c.split_k > 1))
            if key not in seen:
                seen.add(key)
                todo.append(c)
        # a few configurations a task: short tasks keep every worker busy
        tasks += [(kind, M, N, K, dtype_name, device, todo[i:i + 3]) for i in range(0, len(todo), 3)]
    t0 = time.perf_counter()
    pool = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"))
    futures = [pool.submit(_precompile, t) for t in tasks]
    done, pending = cf.wait(futures, timeout=timeout_s)
    for f in pending:
        f.cancel()
    pool.shutdown(wait=True, cancel_futures=True)   # running tasks end (a few launches each)
    n_ok = sum(f.result() for f in done if f.exception() is None)
    print(f"precompiled {n_ok} launches in {len(done)}/{len(tasks)} tasks with {jobs} processes "
          f"in {time.perf_counter() - t0:.0f} s", flush=True)


def bench(fn, smoke: bool) -> float:
    """Milliseconds a call."""
    if smoke:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return do_bench(fn, warmup=10, rep=40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--json", default=None, help="write every timing to this path")
    ap.add_argument("--rows", nargs="*", default=None, help="only rows whose label contains one of these")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--smoke", action="store_true", help="tiny rows through the interpreter (CPU)")
    ap.add_argument("--jobs", type=int, default=min(12, os.cpu_count() or 1),
                    help="processes compiling the candidates before the timings (0: none)")
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    dtype = getattr(torch, args.dtype)
    rows = [("decode",) + r for r in DECODE_ROWS] + [("prefill",) + r for r in PREFILL_ROWS]
    if args.rows:
        rows = [r for r in rows if any(s in r[1] for s in args.rows)]
    if smoke:  # tiny shapes, two candidates a row
        rows = [(kind, label, min(M, 64), 256, 512)
                for kind, label, M, N, K in (rows[:2] + rows[-1:] if len(rows) > 3 else rows)]
    t_start = time.perf_counter()
    if args.jobs > 0:
        precompile(rows[:1] if smoke else rows, args.dtype, device, args.jobs, 0.4 * args.budget_s)
    results = []
    for i_row, (kind, label, M, N, K) in enumerate(rows):
        # the remaining budget shared by the remaining rows, prefill rows weighing 1.5
        weight = lambda r: 1.5 if r[0] == "prefill" else 1.0  # noqa: E731
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = left * weight(rows[i_row]) / sum(weight(r) for r in rows[i_row:])
        row_start = time.perf_counter()
        x, p, s, z = operands(M, N, K, dtype, device)
        ref = Q.gemm_w4a16_reference(x.float(), p, s.float(), z.float(), G)   # float32
        ref_norm = ref.norm().item()
        flop = 2.0 * M * N * K
        nbytes = (N * K // 2 + 2 * N * (K // G) * s.element_size()
                  + M * K * x.element_size() + M * N * x.element_size())
        out = torch.empty(M, N, dtype=dtype, device=device)
        if kind == "decode":
            launch, variants = Q.w4a16_decode_triton, decode_variants(M, N, K)
            table = Q.decode_config_for(M, N, K, G)
        else:
            launch, variants = Q.w4a16_prefill_triton, prefill_variants()
            table = Q.prefill_config_for(M, N, K, G)
        if smoke:
            variants = variants[::7][:3]
        print(f"\n== {label}: M={M} N={N} K={K} {args.dtype} g={G}  "
              f"({nbytes / 2**20:.0f} MiB, {flop / 1e9:.1f} GFLOP)  table={tuple(table)}", flush=True)

        def eager():
            w = Q.dequantize_int4(p, s, z, G, dtype=dtype)
            return x @ w.t()

        entries = []

        def record(name, fn, cfg, check):
            try:
                got = fn()
                if check:
                    err = (got.float() - ref).norm().item() / max(ref_norm, 1e-30)
                    ok = err < 1e-2
                else:
                    err, ok = 0.0, True
                ms = bench(fn, smoke)
            except Exception as e:  # a configuration that does not build or launch
                print(f"  {name:44s} ERROR {type(e).__name__}: {str(e)[:160]}", flush=True)
                entries.append(dict(name=name, config=cfg, error=f"{type(e).__name__}: {e}"[:500]))
                return
            e = dict(name=name, config=cfg, ms=ms, us=ms * 1e3, gbps=nbytes / ms / 1e6,
                     tflops=flop / ms / 1e9, rel_err=err, ok=ok)
            entries.append(e)
            print(f"  {name:44s} {e['us']:9.1f} us {e['gbps']:8.0f} GB/s {e['tflops']:7.1f} TFLOP/s"
                  f"  err {err:.1e}{'' if ok else '  WRONG'}", flush=True)

        record("eager (dequantize + matmul)", eager, None, True)
        if kind == "prefill":
            w = Q.dequantize_int4(p, s, z, G, dtype=dtype)
            record("cuBLAS on a dequantized weight", lambda: x @ w.t(), None, True)
            del w
        record("table", lambda: launch(x, p, s, z, G, out), list(table), True)
        if kind == "prefill" and Q._PREFILL_MAXNREG:
            def uncapped():
                # the table's tile without the launcher's register cap (_PREFILL_MAXNREG)
                cap, Q._PREFILL_MAXNREG = Q._PREFILL_MAXNREG, None
                try:
                    return launch(x, p, s, z, G, out)
                finally:
                    Q._PREFILL_MAXNREG = cap
            record("table without the register cap", uncapped, list(table), True)
        skipped = 0
        for name, cfg in variants:
            if cfg == table:
                continue
            if time.perf_counter() - row_start > allot:
                skipped += 1
                continue
            record(name, lambda cfg=cfg: launch(x, p, s, z, G, out, config=cfg), list(cfg), True)
        if skipped:
            print(f"  ({skipped} candidates skipped: the row's share of the budget, "
                  f"{allot:.0f} s, was spent)", flush=True)
        kernels = [e for e in entries if "ms" in e and e["ok"] and e["config"] is not None]
        eager_ms = next((e["ms"] for e in entries if e["name"].startswith("eager") and "ms" in e), None)
        best = min(kernels, key=lambda e: e["ms"]) if kernels else None
        if best:
            tab = next((e for e in entries if e["name"] == "table" and "ms" in e), None)
            print(f"  BEST {best['name']}: {best['us']:.1f} us, {best['gbps']:.0f} GB/s, "
                  f"{best['tflops']:.1f} TFLOP/s; x{(tab['ms'] / best['ms']) if tab else float('nan'):.2f} "
                  f"vs table, x{(eager_ms / best['ms']) if eager_ms else float('nan'):.2f} vs eager; "
                  f"config={tuple(best['config'])}", flush=True)
        results.append(dict(label=label, kind=kind, M=M, N=N, K=K, dtype=args.dtype, group_size=G,
                            bytes=nbytes, flop=flop, table=list(table), entries=entries,
                            best=best and best["name"], best_config=best and best["config"]))
        if not smoke:
            torch.cuda.empty_cache()
    print(f"\nsummary ({time.perf_counter() - t_start:.0f} s):")
    for r in results:
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        if b:
            print(f"  {r['label']:30s} {b['us']:9.1f} us {b['gbps']:7.0f} GB/s {b['tflops']:6.1f} TFLOP/s"
                  f"  {r['best']}  {tuple(r['best_config'])}")
    print("\nwhere the best configurations go (kernels/quant_gemm.py, the table block):")
    for r in results:
        c = r["best_config"]
        if c is None:
            continue
        if r["kind"] == "prefill":
            nocap = "; _PREFILL_MAXNREG = None" if "register cap" in r["best"] else ""
            print(f"  {r['label']}: _PREFILL_LARGE = PrefillConfig{tuple(c)}  (every M > 64){nocap}")
            continue
        bn, bk, split, w, st, gemv = c
        programs = triton.cdiv(r["N"], bn) * split
        if gemv:
            print(f"  {r['label']}: FMA kernel: _GEMV_DEFAULT_MAX_M >= {r['M']}; _GEMV_BLOCK_N = {bn}, "
                  f"_GEMV_BLOCK_K = {bk}, _GEMV_WARPS, _GEMV_STAGES = {w}, {st}; "
                  f"_GEMV_TARGET_PROGRAMS ~ {programs} ({programs / SMS:.1f} x 132)")
        else:
            not_fma = f": _GEMV_DEFAULT_MAX_M < {r['M']}" if r["M"] <= Q.GEMV_MAX_M else ""
            print(f"  {r['label']}: MMA kernel{not_fma}; "
                  f"_DECODE_BLOCK_N = {bn}, block_k {bk} (_DECODE_BLOCK_K), _DECODE_WARPS, "
                  f"_DECODE_STAGES = {w}, {st}; _DECODE_TARGET_PROGRAMS ~ {programs} ({programs / SMS:.1f} x 132)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__, rows=results), f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
