"""Offline sweep of the flash-attention kernel's variants on a CUDA GPU, beside torch SDPA
under its default, flash and cuDNN backends (GQA, bf16, D = 128). Not part of the package.

    python benchmarks/attention_sweep.py [--budget-s 200] [--json PATH] [--jobs 8]
                                         [--variants NAME,...] [--rows LABEL,...]
                                         [--kv-pad N]
    TRITON_INTERPRET=1 python benchmarks/attention_sweep.py --smoke   # the script, on a CPU

The variants are compiled first by ``--jobs`` worker processes (Triton's on-disk cache then
serves the timing loop; at most 60% of the budget). For each row it prints SDPA's TFLOP/s
(visible query-key pairs only), then each variant of :data:`VARIANTS` (in that order, most
promising first) on every row: TFLOP/s, microseconds, the first call's seconds (a compile
if the workers did not build it) and the largest absolute difference from SDPA's
default backend (checked once per variant and row; above ``MAX_ERR`` the variant is marked
and never chosen). Variants that fail to compile or launch are reported and skipped. Past
``--budget-s`` seconds (compiles included) the remaining variants are skipped, so the run
ends within the budget plus one variant's work on one row. At the end: a table of rows x variants and
the best variant of each row as an ``AttnConfig(...)`` to put in ``CONFIGS`` /
``SHORT_CAUSAL`` of ``kernels/attention.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

# torch's and Triton's UserWarnings are collected and summarised once at the end
_WARNINGS: dict[str, int] = {}


def _collect_warning(message, category, filename, lineno, file=None, line=None):
    key = f"{category.__name__}: {str(message).splitlines()[0][:160]}"
    _WARNINGS[key] = _WARNINGS.get(key, 0) + 1


warnings.showwarning = _collect_warning
warnings.simplefilter("always")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.testing as tt  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from opspec.kernels.attention import (  # noqa: E402
    AttnConfig, as_launched, attention_config, attention_dense_triton, kv_for_loads)

#: (name, config); None is the package's own choice (attention_config) for the row.
VARIANTS: list[tuple[str, AttnConfig | None]] = [
    ("default", None),
    ("base-128x64-s3", AttnConfig(128, 64, 8, 3)),
    ("base-64x64-w4-s3", AttnConfig(64, 64, 4, 3)),
    ("tma-128x64-s3", AttnConfig(128, 64, 8, 3, "tma")),
    ("tma-lazy-128x64-s2-r128", AttnConfig(128, 64, 8, 2, "tma+lazy", 128)),
    ("tma-lazy-128x64-s3", AttnConfig(128, 64, 8, 3, "tma+lazy")),
    ("tma-128x128-s2", AttnConfig(128, 128, 8, 2, "tma")),
    ("tma-pipe-128x64-s2", AttnConfig(128, 64, 8, 2, "tma+pipe")),
    ("tma-pipe-lazy-128x64-s3", AttnConfig(128, 64, 8, 3, "tma+pipe+lazy")),
    ("lazy-128x64-s3", AttnConfig(128, 64, 8, 3, "lazy")),
    ("gqa-128x64-s3", AttnConfig(128, 64, 8, 3, "gqa")),
    ("tma-64x64-w4-s2", AttnConfig(64, 64, 4, 2, "tma")),
    ("tma-64x64-w4-s3", AttnConfig(64, 64, 4, 3, "tma")),
    ("tma-128x64-s2-r128", AttnConfig(128, 64, 8, 2, "tma", 128)),
    ("tma-lazy-gqa-128x64-s3", AttnConfig(128, 64, 8, 3, "tma+lazy+gqa")),
    ("tma-128x128-s3", AttnConfig(128, 128, 8, 3, "tma")),
    ("tma-lazy-128x128-s2", AttnConfig(128, 128, 8, 2, "tma+lazy")),
    ("prescale-128x64-s3", AttnConfig(128, 64, 8, 3, "prescale")),
    ("tma-prescale-lazy-128x64-s3", AttnConfig(128, 64, 8, 3, "tma+prescale+lazy")),
    ("tma-128x64-s4", AttnConfig(128, 64, 8, 4, "tma")),
    ("tma-64x128-w4-s2", AttnConfig(64, 128, 4, 2, "tma")),
    ("tma-ws-128x64-s3", AttnConfig(128, 64, 8, 3, "tma+ws")),
    ("lazy-64x64-w4-s3", AttnConfig(64, 64, 4, 3, "lazy")),
    ("pipe-128x64-s3", AttnConfig(128, 64, 8, 3, "pipe")),
    ("tma-persist-128x64-s2", AttnConfig(128, 64, 8, 2, "tma+persist")),
    ("tma-persist-64x64-w4-s2", AttnConfig(64, 64, 4, 2, "tma+persist")),
    ("tma-lazy-persist-128x64-s2-r128", AttnConfig(128, 64, 8, 2, "tma+lazy+persist", 128)),
    ("tma-lazy-64x64-w4-s2", AttnConfig(64, 64, 4, 2, "tma+lazy")),
    ("tma-gqa-128x64-s3", AttnConfig(128, 64, 8, 3, "tma+gqa")),
    ("tma-pipe-64x64-w4-s2", AttnConfig(64, 64, 4, 2, "tma+pipe")),
    ("tma-gqa-64x64-w4-s3", AttnConfig(64, 64, 4, 3, "tma+gqa")),
]

#: (label, B, H, H_kv, S, D, causal)
ROWS = [
    ("b8-s1k-causal", 8, 32, 8, 1024, 128, True),
    ("b4-s4k-full", 4, 32, 8, 4096, 128, False),
    ("b1-s8k-causal", 1, 32, 8, 8192, 128, True),
    ("70b-b2-s2k-causal", 2, 64, 8, 2048, 128, True),
]

SDPA_BACKENDS = [("sdpa_default", None), ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                 ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)]

#: a variant whose output differs from SDPA's by more than this is marked and not chosen
#: (bf16 outputs of N(0, 1) inputs; SDPA's backends differ from each other by ~4e-3)
MAX_ERR = 3e-2


_DEVICE, _DTYPE = "cuda", torch.bfloat16


def _as_run(cfg: AttnConfig, k, v) -> AttnConfig:
    """The configuration that runs on these keys and values (kv_for_loads, as_launched)."""
    return as_launched(cfg, kv_for_loads(k, v, 4, "tma" in cfg.flags())[2])


def _bench(fn) -> float:
    """Milliseconds per call (median), kept short: warmup 10 ms, 40 ms of repetitions."""
    if _DEVICE != "cuda":    # --smoke: one timed call
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return tt.do_bench(fn, warmup=10, rep=40, return_mode="median")


def _warm(item):
    """Compile one variant (causal and not) on a tiny row with the rows' specialisation
    (D = 128, sizes and strides multiples of 16, GROUP neither 1 nor a multiple of 16), in
    a worker process: Triton's on-disk cache then serves the main process."""
    name, cfg, device, dtype = item
    t0 = time.perf_counter()
    try:
        q = torch.randn(1, 16, 64, 128, device=device, dtype=dtype)
        k = torch.randn(1, 4, 64, 128, device=device, dtype=dtype)
        v = torch.randn_like(k)
        for causal in (True, False):
            attention_dense_triton(q, k, v, torch.empty_like(q), causal, config=cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        return name, time.perf_counter() - t0, None
    except Exception as exc:   # reported again, per row, by the timing loop
        return name, time.perf_counter() - t0, f"{type(exc).__name__}: {str(exc)[:200]}"


def _precompile(variants, jobs: int, timeout_s: float) -> None:
    import concurrent.futures as cf
    import multiprocessing as mp

    t0 = time.perf_counter()
    todo = [(n, c, _DEVICE, _DTYPE) for n, c in variants if c is not None]
    errors = []
    pool = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"))
    try:
        for name, _, err in pool.map(_warm, todo, timeout=timeout_s):
            if err:
                errors.append(f"{name}: {err[:120]}")
    except Exception as exc:   # a timeout or a broken pool: the timing loop compiles the rest
        errors.append(f"precompile stopped: {type(exc).__name__} {str(exc)[:120]}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    print(f"precompiled {len(todo)} variants in {jobs} processes in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    for e in errors:
        print(f"   {e}", flush=True)


def _sdpa(q, k, v, causal, backend):
    def run():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    if backend is None:
        return run, run()
    with sdpa_kernel([backend]):
        out = run()

    def run_backend():
        with sdpa_kernel([backend]):
            return run()
    return run_backend, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="skip the remaining variants past this many seconds (default 200)")
    ap.add_argument("--json", metavar="PATH", help="write every figure to PATH as JSON")
    ap.add_argument("--variants", help="comma-separated variant names (default: all)")
    ap.add_argument("--rows", help="comma-separated row labels (default: all)")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="processes compiling the variants before the timing (default "
                         "min(8, CPUs); 1: compile in the timing loop)")
    ap.add_argument("--kv-pad", type=int, default=0, metavar="N",
                    help="keys and values as views of rows N elements longer than the head "
                         "(N = 4: 264-byte rows, which neither a TMA descriptor nor the "
                         "pointer loads take: kv_for_loads copies them; N = 8: descriptors "
                         "take them, the pointer form copies; SDPA's default backend only)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny float16 rows on the CPU through Triton's interpreter (run with "
                         "TRITON_INTERPRET=1): checks the script, times nothing meaningful")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    global _DEVICE, _DTYPE
    if args.smoke:
        _DEVICE, _DTYPE = "cpu", torch.float16
    elif not torch.cuda.is_available():
        print("attention_sweep needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2

    variants = VARIANTS
    if args.variants:
        names = args.variants.split(",")
        variants = [v for v in VARIANTS if v[0] in names]
    rows = ROWS if not args.rows else [r for r in ROWS if r[0] in args.rows.split(",")]
    if args.smoke:
        rows = [("smoke-causal", 1, 4, 2, 64, 32, True), ("smoke-full", 1, 4, 1, 48, 32, False)]
        variants = [(n, c if c is None else c._replace(block_m=min(c.block_m, 32),
                                                      block_n=min(c.block_n, 16), maxnreg=0))
                    for n, c in variants]
    dev = torch.cuda.get_device_name() if _DEVICE == "cuda" else "cpu (interpreter)"
    print(f"{dev}; torch {torch.__version__}; triton {triton.__version__}; "
          f"budget {args.budget_s:.0f} s", flush=True)

    if args.jobs > 1 and (not args.smoke or "--jobs" in " ".join(argv or sys.argv)):
        _precompile(variants, args.jobs, timeout_s=0.6 * args.budget_s)

    report: dict = {"device": dev, "torch": torch.__version__, "triton": triton.__version__,
                    "budget_s": args.budget_s, "max_err": MAX_ERR, "rows": [], "variants": []}
    data = {}
    for label, B, H, Hkv, S, D, causal in rows:
        g = torch.Generator(device=_DEVICE).manual_seed(0)
        q = torch.randn(B, H, S, D, device=_DEVICE, dtype=_DTYPE, generator=g)
        Dk = D + args.kv_pad
        k = torch.randn(B, Hkv, S, Dk, device=_DEVICE, dtype=_DTYPE, generator=g)[..., :D]
        v = torch.randn(B, Hkv, S, Dk, device=_DEVICE, dtype=_DTYPE, generator=g)[..., :D]
        pairs = S * (S + 1) / 2 if causal else S * S
        flops = 4 * B * H * D * pairs
        entry = {"label": label, "B": B, "H": H, "H_kv": Hkv, "S": S, "D": D,
                 "causal": causal, "flops": flops, "sdpa": {},
                 "kv_pad": args.kv_pad,
                 "default_config": list(_as_run(attention_config(D, _DEVICE, causal, S),
                                                k, v))}
        print(f"\n{label}: B={B} H={H}/{Hkv} S={S} D={D} causal={causal}"
              f"{f' kv rows padded by {args.kv_pad}' if args.kv_pad else ''}", flush=True)
        ref = None
        outs = {}
        for name, backend in SDPA_BACKENDS:
            if args.kv_pad % 8 and backend is not None:
                # torch 2.11's flash and cuDNN kernels fault on such rows (a misaligned
                # address, which poisons the CUDA context): the default backend only
                entry["sdpa"][name] = {"error": "rows not 16-byte aligned (--kv-pad)"}
                print(f"   {name:<14} skipped (--kv-pad {args.kv_pad})", flush=True)
                continue
            try:
                run, out = _sdpa(q, k, v, causal, backend)
                t = _bench(run)
                outs[name] = out
                entry["sdpa"][name] = {"us": t * 1e3, "tflops": flops / t / 1e9}
                print(f"   {name:<14} {flops / t / 1e9:6.0f} TFLOP/s {t * 1e3:9.1f} us", flush=True)
            except Exception as exc:   # a backend missing on this build
                entry["sdpa"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}
                print(f"   {name:<14} unavailable ({str(exc)[:80]})", flush=True)
        ref = outs.get("sdpa_default")
        if ref is not None and "sdpa_flash" in outs:
            entry["sdpa_flash_vs_default_err"] = (outs["sdpa_flash"].float() - ref.float()).abs().max().item()
        report["rows"].append(entry)
        data[label] = (q, k, v, torch.empty_like(q), flops, causal, ref, entry)

    print(f"\nvariants ({time.perf_counter() - t_start:.0f} s so far):", flush=True)
    for name, cfg in variants:
        vrep = {"name": name, "config": None if cfg is None else list(cfg), "results": {}}
        report["variants"].append(vrep)
        for label, (q, k, v, o, flops, causal, ref, entry) in data.items():
            if time.perf_counter() - t_start > args.budget_s:
                vrep["results"][label] = {"skipped": "budget"}
                continue
            res: dict = {}
            try:
                t0 = time.perf_counter()
                attention_dense_triton(q, k, v, o, causal, config=cfg)
                if _DEVICE == "cuda":
                    torch.cuda.synchronize()
                res["first_call_s"] = time.perf_counter() - t0
                if ref is not None:
                    res["max_err"] = (o.float() - ref.float()).abs().max().item()
                t = _bench(lambda: attention_dense_triton(q, k, v, o, causal, config=cfg))
                res.update(us=t * 1e3, tflops=flops / t / 1e9)
            except Exception as exc:   # a variant that does not build or launch here
                res["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            vrep["results"][label] = res
            sd = entry["sdpa"]
            side = " ".join(f"{n[5:]} {sd[n]['tflops']:.0f}" for n, _ in SDPA_BACKENDS
                            if "tflops" in sd.get(n, {}))
            if "error" in res:
                print(f"   {name:<32} {label:<18} ERROR {res['error'][:150]}", flush=True)
            else:
                bad = "  MISMATCH" if res.get("max_err", 0.0) > MAX_ERR else ""
                print(f"   {name:<32} {label:<18} {res['tflops']:6.0f} TFLOP/s {res['us']:9.1f} us"
                      f"  first {res['first_call_s']:5.1f} s  err {res.get('max_err', float('nan')):.1e}"
                      f"  [sdpa {side}]{bad}", flush=True)
        if all("skipped" in r for r in vrep["results"].values()):
            print(f"   {name:<32} skipped (budget)", flush=True)

    # the table and the best variant of each row
    labels = list(data)
    print(f"\n{'TFLOP/s':<32}" + "".join(f" {lab:>18}" for lab in labels))
    for name, _ in SDPA_BACKENDS:
        cells = [data[lab][7]["sdpa"].get(name, {}).get("tflops") for lab in labels]
        print(f"{name:<32}" + "".join(f" {c:18.0f}" if c else f" {'-':>18}" for c in cells))
    best: dict = {}
    for vrep in report["variants"]:
        cells = []
        for lab in labels:
            r = vrep["results"].get(lab, {})
            ok = "tflops" in r and r.get("max_err", 0.0) <= MAX_ERR
            cells.append(f" {r['tflops']:18.0f}" if ok else
                         f" {'err' if 'error' in r or 'tflops' in r else 'skip':>18}")
            if ok and r["tflops"] > best.get(lab, {}).get("tflops", 0.0):
                cfg = vrep["config"] or data[lab][7]["default_config"]
                best[lab] = {"name": vrep["name"], "config": cfg, "tflops": r["tflops"]}
        print(f"{vrep['name']:<32}" + "".join(cells))
    report["best"] = best
    print("\nbest per row (set CONFIGS / SHORT_CAUSAL in kernels/attention.py):")
    for lab in labels:
        if lab not in best:
            print(f"   {lab}: none measured")
            continue
        b = best[lab]
        sd = data[lab][7]["sdpa"]
        vs = " ".join(f"{b['tflops'] / sd[n]['tflops']:.2f}x {n[5:]}" for n, _ in SDPA_BACKENDS
                      if "tflops" in sd.get(n, {}))
        print(f"   {lab}: {b['name']} {b['tflops']:.0f} TFLOP/s ({vs}) -> "
              f"{AttnConfig(*b['config'])!r}")
    # the table entries these picks make (causal rows: SHORT_CAUSAL, first match by the
    # longest query length; full rows: CONFIGS by head size)
    print("\nsuggested entries (kernels/attention.py):")
    for lab in labels:
        if lab in best:
            e = data[lab][7]
            cfg = AttnConfig(*best[lab]["config"])
            if e["causal"]:
                print(f"   SHORT_CAUSAL: ({e['S']}, {e['D']}, {cfg!r}),   # {lab}")
            else:
                print(f"   CONFIGS:      ({e['D']}, {cfg!r}),   # {lab}")
    if _WARNINGS:
        print(f"\n{sum(_WARNINGS.values())} warnings (collected):")
        for key, n in sorted(_WARNINGS.items(), key=lambda kv: -kv[1])[:8]:
            print(f"   {n} x {key}")
    report["warnings"] = _WARNINGS
    report["elapsed_s"] = time.perf_counter() - t_start
    print(f"\ndone in {report['elapsed_s']:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
