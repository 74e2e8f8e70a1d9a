"""Offline configuration sweep for the W4A16 GEMM kernels (opspec.kernels.quant_gemm) on an
H200. Per row (the GemmW4A16FwdOp decode workloads, each in its own dtypes): check every
candidate's output once against a float32 torch reference (a wrong one is reported and is
never "best"), then time device time as the bench does (sweep_pool.bench: L2 flushed
before each sample, the host's launch hidden behind a sleep kernel; medians) of
the table's choice, torch eager (unpack, dequantize, matmul: the bench's eager baseline),
torch.compile of that eager function, and the candidates: configurations of the
tensor-core decode kernel (DecodeConfig.tc: K slices, row warps,
biased or exact dequantization, a K split) and the table's choice of the older MMA / FMA
decode kernels (the fallback).

    python benchmarks/w4a16_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]
                                     [--dtype float16|bfloat16] [--prefill] [--jobs N]

Prints per row and candidate: us, TB/s (bytes as the op's roofline counts them: packed
weight + scales + zeros + x + y), % of the measured 4.21 TB/s copy bandwidth, speedups over
eager and over torch.compile, whether the output matched; then the best candidate, a
summary and which constants of the table block in kernels/quant_gemm.py the results point
to. --json writes every timing. --budget-s bounds the whole run, compiles included: the
candidates are compiled first in --jobs processes (and torch.compile's kernels warmed in
them), then the budget left is shared out over the rows, the table, eager and compile first
in each row, then the candidates in the order listed, most promising first; when a row's
share is spent the rest are skipped (and said so). --prefill adds prefill rows (at 4096
tokens and around the two-pass bound; candidates: two passes and the fused kernel's tiles;
they need a larger budget). --rows keeps rows whose label contains one of the given strings.

--smoke runs tiny rows through Triton's interpreter on the CPU (a check of this script; the
tensor-core kernel runs its portable model there, torch.compile its "eager" backend).
Not part of the package.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton

import opspec.kernels.quant_gemm as Q
from opspec.kernels.quant_gemm import DecodeConfig, PrefillConfig

from sweep_pool import bench, report_best, run_ahead, sweep_parser  # beside this script

SMS = 132
COPY_TBPS = 4.21       # measured device-to-device copy bandwidth (read + written), TB/s
G = 128                # group size of every row (the workloads' choice)
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32

# (label, M, N, K, x dtype, scale dtype): the op's decode workloads (manifest/spec/quant_gemm.yaml)
DECODE_ROWS = [
    ("llama3-70b-gu-decode-f16", 1, 57344, 8192, F16, F16),
    ("llama3-405b-up-decode-bf16", 1, 53248, 16384, BF16, BF16),
    ("llama3-70b-gu-decode-bf16", 1, 57344, 8192, BF16, BF16),
    ("llama3-70b-up-decode-m16-bf16", 16, 28672, 8192, BF16, BF16),
    ("llama3-70b-down-decode-m16-f16", 16, 8192, 28672, F16, F16),
    ("qwen2.5-7b-up-decode-m4-bf16-f32", 4, 18944, 3584, BF16, F32),
    ("llama3-8b-down-decode-m4-bf16", 4, 4096, 14336, BF16, BF16),
    ("llama3-8b-up-decode-f16", 1, 14336, 4096, F16, F16),
    ("llama3-8b-o-decode-f16", 1, 4096, 4096, F16, F16),
    ("llama3-8b-o-decode-bf16", 1, 4096, 4096, BF16, BF16),
]
PREFILL_ROWS = [
    ("llama3-70b-up-prefill-4096", 4096, 28672, 8192, BF16, BF16),
    ("llama3-8b-up-prefill-4096", 4096, 14336, 4096, BF16, BF16),
    ("llama3-8b-down-prefill-4096", 4096, 4096, 14336, BF16, BF16),
    ("llama3-8b-up-prefill-512", 512, 14336, 4096, BF16, BF16),      # near the two-pass bound
    ("llama3-8b-up-prefill-256", 256, 14336, 4096, BF16, BF16),
]


def tc_name(cfg: DecodeConfig) -> str:
    rw = cfg.num_warps // cfg.k_slices
    return (f"tc ks{cfg.k_slices} rw{rw}{' biased' if cfg.biased else ' exact'}"
            f"{f' split{cfg.split_k}' if cfg.split_k > 1 else ''}")


def decode_variants(M: int, N: int, K: int, dtype: torch.dtype) -> list[tuple[str, DecodeConfig]]:
    """The candidates of a decode row, most promising first (the table's own choice is timed
    separately): the tensor-core kernel around its table entry, then the older kernels."""
    table = Q.tc_config_for(M, N, K, G, dtype)
    ks, b = table.k_slices, table.biased
    other_ks = 8 if ks <= 4 else 4
    tc = lambda **kw: Q.tc_config_for(M, N, K, G, dtype, **kw)  # noqa: E731
    cands = [
        tc(k_slices=2),
        tc(k_slices=other_ks),                      # the other K split of the program
        tc(k_slices=ks, biased=not b),              # the other dequantization
        tc(k_slices=2, row_warps=2),                # 32 rows a program, 4 warps
        tc(k_slices=4, row_warps=2),                # 32 rows, 8 warps
        tc(k_slices=2),
        tc(k_slices=1, row_warps=4),                # 64 rows a program, all of K a warp
        tc(k_slices=other_ks, biased=not b),
    ]
    if N <= 8192:
        cands.append(tc(k_slices=8)._replace(split_k=2))   # a K split (second kernel)
    out, seen = [], {table}
    for c in cands:
        steps = K // 128
        if c not in seen and c.k_slices <= steps:
            seen.add(c)
            out.append((tc_name(c), c))
    legacy = Q.legacy_decode_config(M, N, K, G)
    out.append((f"old table: {'fma' if legacy.gemv and M <= Q.GEMV_MAX_M else 'mma'} "
                f"bn{legacy.block_n} bk{legacy.block_k} w{legacy.num_warps} st{legacy.num_stages} "
                f"split{legacy.split_k}", legacy))
    return out


def prefill_variants() -> list[tuple[str, PrefillConfig]]:
    # two passes (dequantize, then the GEMM kernel; the table's choice from 512 tokens) and
    # the fused kernel's tiles
    out = [("two passes", Q.prefill_config_for(1, 1, 128, G, two_pass=True))]
    # (block_m, block_n, block_k, group_m, warps, stages, f32_dequant, swap_ab)
    for c in ((256, 128, 64, 8, 8, 3, False, True), (128, 128, 64, 8, 8, 3, True, False),
              (256, 128, 64, 8, 8, 4, False, True), (128, 256, 64, 8, 8, 3, True, False),
              (128, 128, 64, 8, 8, 4, True, False), (256, 128, 64, 8, 8, 3, True, True)):
        cfg = PrefillConfig(*c)
        name = (f"{'swap ' if cfg.swap_ab else ''}{cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
                f"w{cfg.num_warps} st{cfg.num_stages} {'f32' if cfg.f32_dequant else '16bit'}")
        out.append((name, cfg))
    return out


def eager_fn(x, p, s, z):
    """The bench's eager baseline: unpack, (q - z) * s in the scales' dtype, cast, x @ w.T."""
    n, half_k = p.shape
    q = torch.stack((p & 0xF, p >> 4), dim=-1).reshape(n, 2 * half_k)
    w = ((q.to(s.dtype) - z.repeat_interleave(G, dim=1)) * s.repeat_interleave(G, dim=1))
    return x @ w.to(x.dtype).t()


def operands(M, N, K, dtype, sdtype, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = (torch.randn(M, K, generator=gen, device=device) * 0.5).to(dtype)
    packed = torch.randint(0, 256, (N, K // 2), generator=gen, device=device, dtype=torch.uint8)
    scales = (torch.rand(N, K // G, generator=gen, device=device) * 0.01 + 0.005).to(sdtype)
    # integer zero points plus a half: exact in every scale dtype, and they exercise the
    # kernels' handling of fractional ones
    zeros = (torch.randint(0, 16, (N, K // G), generator=gen, device=device) + 0.5).to(sdtype)
    return x, packed, scales, zeros


_WORKER: dict = {}


def _precompile(task) -> int:
    """Worker: launch each configuration once on the row's shapes (values do not matter), so
    that Triton's on-disk cache holds its binaries when the timing process asks; or run
    torch.compile of the eager function once, so that inductor's caches hold it."""
    kind, M, N, K, dname, sname, device, cfgs = task
    dtype, sdtype = getattr(torch, dname), getattr(torch, sname)
    key = (M, N, K, dname, sname)
    if _WORKER.get("key") != key:
        _WORKER.clear()
        _WORKER["key"] = key
        x = torch.zeros(M, K, dtype=dtype, device=device)
        p = torch.zeros(N, K // 2, dtype=torch.uint8, device=device)
        s = torch.ones(N, K // G, dtype=sdtype, device=device)
        _WORKER["ops"] = (x, p, s, s.clone(), torch.empty(M, N, dtype=dtype, device=device))
    x, p, s, z, out = _WORKER["ops"]
    done = 0
    if kind == "compile":
        try:
            import torch._inductor.config as inductor_config
            inductor_config.compile_threads = 1     # the pool's processes share the CPUs
            torch.compile(eager_fn, dynamic=False)(x, p, s, z)
            done = 1
        except Exception:  # reported by the timing process
            pass
    else:
        launch = Q.w4a16_decode_triton if kind == "decode" else Q.w4a16_prefill_triton
        for cfg in cfgs:
            try:
                launch(x, p, s, z, G, out, config=cfg)
                done += 1
            except Exception:  # reported by the timing process
                pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def precompile(rows, device: str, jobs: int, timeout_s: float, smoke: bool) -> None:
    """Compile every row's candidates (and warm torch.compile) in `jobs` processes at once:
    the compiles, not the timings, dominate the sweep; whatever is not done by `timeout_s`
    compiles inline later."""
    tasks, seen = [], set()
    for r in rows:
        kind, label, M, N, K, dt, sdt = r
        dn, sn = str(dt).removeprefix("torch."), str(sdt).removeprefix("torch.")
        if not smoke:
            tasks.append(("compile", M, N, K, dn, sn, device, []))
        cfgs = [c for _, c in (variants_of(r) if kind == "decode" else prefill_variants())]
        cfgs.insert(0, table_of(r))
        todo = []
        for c in cfgs:
            # a binary serves every row with the same specialization: (kernel, M class,
            # dtypes, configuration, split or not)
            mcls = M if M in (1, 16) else ("<=8" if M <= 8 else ">8")
            key = (kind, mcls, dn, sn, c._replace(split_k=c.split_k > 1) if kind == "decode" else c)
            if key not in seen:
                seen.add(key)
                todo.append(c)
        # a few configurations a task: short tasks keep every worker busy
        tasks += [(kind, M, N, K, dn, sn, device, todo[i:i + 3]) for i in range(0, len(todo), 3)]
    # torch.compile warm-ups first (the longest), then prefill, then decode
    tasks.sort(key=lambda t: {"compile": 0, "prefill": 1, "decode": 2}[t[0]])
    # running tasks end (a few launches each)
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches")


def variants_of(row):
    kind, label, M, N, K, dt, sdt = row
    return decode_variants(M, N, K, dt) if kind == "decode" else prefill_variants()


# The table's own bound on the tensor-core kernel's M; the sweep lifts the launcher's, so
# that tensor-core candidates of rows above it run (else they would fall back).
TABLE_TC_MAX_M = Q._TC_MAX_M
Q._TC_MAX_M = Q.DECODE_MAX_M


def table_of(row):
    kind, label, M, N, K, dt, sdt = row
    if kind == "decode":
        # the table's choice under its own bound (the sweep lifted it above)
        lifted, Q._TC_MAX_M = Q._TC_MAX_M, TABLE_TC_MAX_M
        Q.decode_config_for.cache_clear()
        try:
            return Q.decode_config_for(M, N, K, G, dt)
        finally:
            Q._TC_MAX_M = lifted
            Q.decode_config_for.cache_clear()
    return Q.prefill_config_for(M, N, K, G)


def main() -> None:
    ap = sweep_parser(__doc__, jobs=12)
    ap.add_argument("--dtype", default=None, choices=["bfloat16", "float16"],
                    help="run every row in this activation dtype (default: each row's own)")
    ap.add_argument("--prefill", action="store_true", help="add the prefill rows")
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    rows = [("decode",) + r for r in DECODE_ROWS]
    if args.prefill:
        rows += [("prefill",) + r for r in PREFILL_ROWS]
    if args.dtype:
        dt = getattr(torch, args.dtype)
        rows = [(k, l, M, N, K, dt, dt if s != F32 else F32) for k, l, M, N, K, _, s in rows]
    if args.rows:
        rows = [r for r in rows if any(s in r[1] for s in args.rows)]
    if smoke:  # tiny shapes: M kept (1, 4, 16 tokens), 3 programs of rows, 4 steps of K
        keep = {"llama3-70b-gu-decode-f16", "llama3-70b-up-decode-m16-bf16",
                "qwen2.5-7b-up-decode-m4-bf16-f32"}
        rows = [(kind, label, M if kind == "decode" else 40, 48, 512, dt, sdt)
                for kind, label, M, N, K, dt, sdt in rows if label in keep or kind == "prefill"][:4]
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1   # as in the warm-up processes (same cache keys)
    t_start = time.perf_counter()
    if args.jobs > 0 and rows:
        precompile(rows[:1] if smoke else rows, device, args.jobs, 0.45 * args.budget_s, smoke)
    results = []
    weight = lambda r: 2.0 if r[0] == "prefill" else 1.0  # noqa: E731
    for i_row, row in enumerate(rows):
        kind, label, M, N, K, dtype, sdtype = row
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = left * weight(row) / sum(weight(r) for r in rows[i_row:])
        row_start = time.perf_counter()
        x, p, s, z = operands(M, N, K, dtype, sdtype, device)
        ref = Q.gemm_w4a16_reference(x.float(), p, s.float(), z.float(), G)   # float32
        ref_norm, ref_max = ref.norm().item(), ref.abs().max().item()
        flop = 2.0 * M * N * K
        nbytes = (N * K // 2 + 2 * N * (K // G) * s.element_size()
                  + M * K * x.element_size() + M * N * x.element_size())
        out = torch.empty(M, N, dtype=dtype, device=device)
        launch = Q.w4a16_decode_triton if kind == "decode" else Q.w4a16_prefill_triton
        table = table_of(row)
        variants = variants_of(row)
        if smoke:
            variants = variants[:2] + variants[-1:]
        sol_us = nbytes / (COPY_TBPS * 1e12) * 1e6
        dn = f"{str(dtype)[6:]}/{str(sdtype)[6:]}"
        print(f"\n== {label}: M={M} N={N} K={K} {dn} g={G}  ({nbytes / 1e6:.1f} MB, "
              f"{flop / 1e9:.1f} GFLOP; {sol_us:.1f} us at {COPY_TBPS} TB/s)  table={tuple(table)}",
              flush=True)
        print(f"  {'candidate':40s} {'us':>9s} {'TB/s':>6s} {'%copy':>6s} {'x eager':>8s} "
              f"{'x compile':>9s}  output", flush=True)
        entries = []
        base = {}

        def record(name, fn, cfg, budgeted=True):
            if budgeted and time.perf_counter() - row_start > allot:
                entries.append(dict(name=name, config=cfg and list(cfg), skipped=True))
                return None
            try:
                got = fn()
                err = (got.float() - ref).norm().item() / max(ref_norm, 1e-30)
                max_err = (got.float() - ref).abs().max().item()
                ok = bool(err < 5e-3 and max_err <= 2e-2 * ref_max + 1e-3)
                ms = bench(fn, smoke)
            except Exception as e:  # a configuration that does not build or launch
                print(f"  {name:40s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
                entries.append(dict(name=name, config=cfg and list(cfg),
                                    error=f"{type(e).__name__}: {e}"[:800]))
                return None
            e = dict(name=name, config=cfg and list(cfg), ms=ms, us=ms * 1e3,
                     tbps=nbytes / ms / 1e9, pct_copy=100 * nbytes / ms / 1e9 / COPY_TBPS,
                     tflops=flop / ms / 1e9, rel_err=err, max_err=max_err, ok=ok)
            entries.append(e)
            xe = base["eager"] / ms if "eager" in base else float("nan")
            xc = base["compile"] / ms if "compile" in base else float("nan")
            print(f"  {name:40s} {e['us']:9.1f} {e['tbps']:6.2f} {e['pct_copy']:5.0f}% {xe:8.2f} "
                  f"{xc:9.2f}  {'matched' if ok else f'WRONG (rel err {err:.1e}, max {max_err:.2g})'}",
                  flush=True)
            return e

        e = record("torch eager (dequantize + matmul)", lambda: eager_fn(x, p, s, z), None, False)
        if e:
            base["eager"] = e["ms"]
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(eager_fn, dynamic=False, **({"backend": "eager"} if smoke else {}))
            compiled(x, p, s, z)
            ctime = time.perf_counter() - t0
            e = record(f"torch.compile(eager) [{ctime:.0f} s to compile]",
                       lambda: compiled(x, p, s, z), None, False)
            if e:
                base["compile"] = e["ms"]
        except Exception as exc:
            print(f"  torch.compile(eager): FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            entries.append(dict(name="torch.compile(eager)", config=None,
                                error=f"{type(exc).__name__}: {exc}"[:800]))
        if kind == "prefill":
            tname = "TABLE: two passes" if table.two_pass else "TABLE: prefill tile"
        else:
            tname = f"TABLE: {tc_name(table) if table.tc else 'older decode kernel'}"
        record(tname, lambda: launch(x, p, s, z, G, out), table, False)
        for name, cfg in variants:
            if cfg == table:
                continue
            record(name, lambda cfg=cfg: launch(x, p, s, z, G, out, config=cfg), cfg)
        skipped = [e["name"] for e in entries if e.get("skipped")]
        if skipped:
            print(f"  ({len(skipped)} candidates skipped: the row's share of the budget, "
                  f"{allot:.0f} s, was spent: {', '.join(skipped)})", flush=True)
        kernels = [e for e in entries if "ms" in e and e["config"] is not None]
        tab = next((e for e in kernels if e["name"].startswith("TABLE")), None)
        best, wrong = report_best(
            kernels, base, lambda b: f"{b['tbps']:.2f} TB/s ({b['pct_copy']:.0f}% of {COPY_TBPS})",
            table=tab, note=lambda b: f"config={tuple(b['config'])}")
        results.append(dict(label=label, kind=kind, M=M, N=N, K=K, dtype=str(dtype), scale_dtype=str(sdtype),
                            group_size=G, bytes=nbytes, flop=flop, sol_us=sol_us,
                            table=list(table), entries=entries, eager_ms=base.get("eager"),
                            compile_ms=base.get("compile"), best=best and best["name"],
                            best_config=best and best["config"], wrong=wrong))
        x = p = s = z = ref = out = None  # frees the tensors (closures above read them)
        if not smoke:
            torch.cuda.empty_cache()
    summarize(results, time.perf_counter() - t_start)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__,
                           copy_tbps=COPY_TBPS, rows=results), f, indent=1)
        print(f"wrote {args.json}")


def summarize(results, elapsed: float) -> None:
    print(f"\nsummary ({elapsed:.0f} s): best matched candidate per row; target >= 3.16 TB/s "
          f"(75 % of the HBM roofline) on decode rows")
    print(f"  {'row':34s} {'best':34s} {'us':>8s} {'TB/s':>6s} {'%copy':>6s} {'x table':>8s} "
          f"{'x eager':>8s} {'x compile':>9s}")
    for r in results:
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        tab = next((e for e in r["entries"] if e["name"].startswith("TABLE") and "ms" in e), None)
        if not b:
            print(f"  {r['label']:34s} no candidate matched")
            continue
        xt = tab["ms"] / b["ms"] if tab and tab["ok"] else float("nan")
        xe = r["eager_ms"] / b["ms"] if r["eager_ms"] else float("nan")
        xc = r["compile_ms"] / b["ms"] if r["compile_ms"] else float("nan")
        print(f"  {r['label']:34s} {r['best'][:34]:34s} {b['us']:8.1f} {b['tbps']:6.2f} "
              f"{b['pct_copy']:5.0f}% {xt:8.2f} {xe:8.2f} {xc:9.2f}")
    # Which table constants the decode results point to (kernels/quant_gemm.py, the table
    # block): the tensor-core candidates' knobs, each row's best against the table.
    dec = [r for r in results if r["kind"] == "decode" and r["best_config"]]
    if not dec:
        return
    print("\nwhat the decode rows say about the table (kernels/quant_gemm.py):")
    tc_wrong = sorted({n for r in dec for n in r["wrong"] if n.startswith(("tc", "TABLE"))})
    if tc_wrong:
        print(f"  !! tensor-core candidates with WRONG output: {tc_wrong}: if the table's are among "
              f"them, set _TC_MAX_M = 0 and _TC_TMA_WIDE = None (the older kernels everywhere) "
              f"until fixed")
    geo = {}
    for r in dec:
        tab = next((e for e in r["entries"] if e["name"].startswith("TABLE") and "ms" in e and e["ok"]), None)
        for e in r["entries"]:
            if "ms" in e and e["ok"] and tab and e["config"] is not None:
                key = e["name"] if not e["name"].startswith("TABLE") else "table"
                geo.setdefault(key, []).append(math.log(tab["ms"] / e["ms"]))
    print("  geometric-mean speedup over the table's choice, across the rows where timed:")
    for name, v in sorted(geo.items(), key=lambda kv: -sum(kv[1]) / len(kv[1])):
        print(f"    {name:40s} x{math.exp(sum(v) / len(v)):.3f} ({len(v)} rows)")
    for r in dec:
        c = DecodeConfig(*r["best_config"])
        if c.tc:
            rw = c.num_warps // c.k_slices
            print(f"  {r['label']}: k_slices {c.k_slices} (_TC_SLICES: N = {r['N']}), row warps {rw} "
                  f"(_TC_ROW_WARPS), biased {c.biased} "
                  f"(_TC_BIASED[{r['dtype']}]), split {c.split_k} (_TC_SPLIT_BELOW_N > {r['N']} if 2)")
        else:
            print(f"  {r['label']}: the older kernel is best: _TC_MAX_M < {r['M']} (M = {r['M']})")


if __name__ == "__main__":
    main()
