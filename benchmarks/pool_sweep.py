"""Offline configuration sweep for the 2-D pooling kernels (opspec.kernels.pool) on an H200.

Per row (the MaxPool2dFwdOp / AvgPool2dFwdOp workload rows, contiguous NCHW, worst first:
the most microseconds behind torch.compile in the last bench): check every candidate's output
once against the torch reference (float32 math; max exact, average within a rounding of the
dtype; a wrong candidate is reported and is never "best"), then time device time as the
bench does (sweep_pool.bench: L2 flushed before each sample, medians), the table's choice (``pool2d_triton``
with no override), torch eager (F.max_pool2d / F.avg_pool2d in the input dtype: the bench's
baseline), torch.compile of that function (once per row; said if it fails) and the
candidates: the word kernel where it serves the row (``WordsConfig``s: output rows, planes
a program, warps), the flat kernel (outputs a program, warps), band-kernel configurations
(``BandConfig`` fields changed one at a time from the table's, each kept only where it
changes the launch) and the older kernels (``pool2d_plan``: tile / rows / global).

    python benchmarks/pool_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]
                                    [--jobs N] [--smoke]

Prints per row and candidate: us, TB/s (bytes as the op's roofline counts them: the input
read once + the output written), % of the measured 4.21 TB/s copy, speedups over eager and
over compile, whether the output matched; then the best candidate, and at the end a summary
and what to set in the ``_BAND_TABLE`` / ``_BAND_DEFAULT`` block of kernels/pool.py. --json
writes every timing. --budget-s bounds the whole run, compiles included: every row's
candidates are compiled first (and torch.compile's kernels warmed) in --jobs processes, up
to 45 % of the budget; the rest is shared out over the rows in order, the table, eager and
compile first in each row, then the candidates, most promising first; when a row's share is
spent the rest are skipped (and said so). --rows keeps rows whose label contains one of the
given strings.

--smoke runs tiny rows through Triton's interpreter on the CPU (a check of this script;
torch.compile there uses its "eager" backend). Not part of the package.
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
import torch.nn.functional as F
import triton

import opspec.kernels.pool as PK
from opspec.kernels.pool import BandConfig
from opspec.kernels.pool_words import WordsConfig, words_fit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_pool import bench, report_best, run_ahead, sweep_parser  # noqa: E402  (beside this script)

COPY_TBPS = 4.21       # measured device-to-device copy bandwidth (read + written), TB/s
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

# -- rows -------------------------------------------------------------------------------------
# (label, mode, B (None: unbatched [C, H, W]), C, H, W, kernel, stride, padding, dilation,
#  ceil_mode, count_include_pad, divisor_override, dtype, last bench (opspec, eager, compile)
#  us). The workload rows of the two ops (opspec.ops.workloads.cases), ordered by how many
# microseconds the last H200 bench put them behind torch.compile (the largest first), the
# rows already ahead of compile last.
ROWS = [
    ("avg-resnet50d-down1-b256-bf16", "avg", 256, 256, 56, 56, 2, 2, 0, 1, True, False, None, "bf16", (363.4, 580.6, 145.6)),
    ("avg-resnet50d-down1-b128-f32", "avg", 128, 256, 56, 56, 2, 2, 0, 1, True, False, None, "f32", (288.9, 305.3, 123.8)),
    ("max-resnet50-stem-b256-bf16", "max", 256, 64, 112, 112, 3, 2, 1, 1, False, True, None, "bf16", (363.2, 820.7, 210.0)),
    ("max-resnet50-stem-b128-f32", "max", 128, 64, 112, 112, 3, 2, 1, 1, False, True, None, "f32", (289.3, 403.5, 157.7)),
    ("avg-resnet50d-down1-b128-bf16", "avg", 128, 256, 56, 56, 2, 2, 0, 1, True, False, None, "bf16", (186.1, 293.2, 77.8)),
    ("max-resnet50-stem-b128-bf16", "max", 128, 64, 112, 112, 3, 2, 1, 1, False, True, None, "bf16", (185.0, 412.6, 108.6)),
    ("max-googlenet-stem-b64-bf16", "max", 64, 64, 112, 112, 3, 2, 0, 1, True, True, None, "bf16", (98.6, 210.8, 59.2)),
    ("max-googlenet-inc3-b64-bf16", "max", 64, 480, 28, 28, 3, 2, 0, 1, True, True, None, "bf16", (63.5, 100.2, 34.1)),
    ("max-unet-enc1-b16-bf16", "max", 16, 64, 256, 256, 2, 2, 0, 1, False, True, None, "bf16", (77.5, 201.2, 51.7)),
    ("avg-inception3-branch-b32-bf16", "avg", 32, 192, 35, 35, 3, 1, 1, 1, False, True, None, "bf16", (60.6, 96.4, 38.6)),
    ("avg-inception3-branch-b32-f32", "avg", 32, 192, 35, 35, 3, 1, 1, 1, False, True, None, "f32", (57.1, 96.4, 34.4)),
    ("max-resnet50-stem-b32-bf16", "max", 32, 64, 112, 112, 3, 2, 1, 1, False, True, None, "bf16", (51.0, 107.1, 32.8)),
    ("max-resnet50-stem-b32-fp16", "max", 32, 64, 112, 112, 3, 2, 1, 1, False, True, None, "fp16", (51.3, 107.8, 32.9)),
    ("max-vgg16-pool4-b32-f32", "max", 32, 512, 28, 28, 2, 2, 0, 1, False, True, None, "f32", (39.9, 42.4, 22.2)),
    ("avg-densenet121-trans1-b32-bf16", "avg", 32, 128, 56, 56, 2, 2, 0, 1, False, True, None, "bf16", (28.3, 40.6, 16.8)),
    ("avg-densenet121-trans1-b32-fp16", "avg", 32, 128, 56, 56, 2, 2, 0, 1, False, True, None, "fp16", (28.2, 40.3, 17.0)),
    ("max-vgg16-pool4-b32-bf16", "max", 32, 512, 28, 28, 2, 2, 0, 1, False, True, None, "bf16", (21.8, 42.1, 15.6)),
    ("max-resnet50-stem-b1-bf16", "max", 1, 64, 112, 112, 3, 2, 1, 1, False, True, None, "bf16", (5.9, 7.7, 4.5)),
    ("avg-resnet50d-down3-b128-bf16", "avg", 128, 1024, 14, 14, 2, 2, 0, 1, True, False, None, "bf16", (28.1, 74.2, 26.5)),
    ("avg-densenet121-trans3-b32-bf16", "avg", 32, 512, 14, 14, 2, 2, 0, 1, False, True, None, "bf16", (6.6, 12.8, 5.7)),
    ("avg-poolformer-s4-b64-bf16", "avg", 64, 512, 7, 7, 3, 1, 1, 1, False, False, None, "bf16", (11.4, 24.3, 10.8)),
    ("avg-vit-tokpool-unbatched-f32", "avg", None, 768, 14, 14, 2, 2, 0, 1, False, True, 4, "f32", (5.1, 5.9, 4.6)),
    ("max-unbatched-s1-f32", "max", None, 256, 56, 56, 3, 1, 1, 1, False, True, None, "f32", (7.2, 17.8, 6.9)),
    ("max-resnet50-stem-b1-fp16", "max", 1, 64, 112, 112, 3, 2, 1, 1, False, True, None, "fp16", (5.9, 7.8, 6.8)),
    ("avg-poolformer-s1-b64-bf16", "avg", 64, 64, 56, 56, 3, 1, 1, 1, False, False, None, "bf16", (41.1, 162.9, 48.6)),
    ("avg-resnet50-head-b128-f32", "avg", 128, 2048, 7, 7, 7, 7, 0, 1, False, True, None, "f32", (23.1, 44.2, 30.4)),
    ("avg-resnet50-head-b128-bf16", "avg", 128, 2048, 7, 7, 7, 7, 0, 1, False, True, None, "bf16", (15.5, 24.8, 28.7)),
    ("max-deeplab-atrous-b8-bf16", "max", 8, 256, 64, 64, 3, 1, 1, 2, False, True, None, "bf16", (20.8, 129.6, 39.6)),
]


def geometry(row):
    _, _, _, _, _, _, k, s, p, d, c, _, _, _, _ = row
    return PK.pool2d_geometry(k, s, p, d, c)


def eager_fn(row):
    """The bench's baseline: torch's function in the input dtype."""
    label, mode, B, C, H, W, k, s, p, d, c, cip, div, dt, _ = row
    if mode == "max":
        return lambda x: F.max_pool2d(x, k, s, p, d, c)
    return lambda x: F.avg_pool2d(x, k, s, p, c, cip, div)


def make_input(row, device, smoke=False, zeros=False):
    label, mode, B, C, H, W, *_ = row
    dtype = DT[row[13]]
    shape = (C, H, W) if B is None else (B, C, H, W)
    if zeros:
        return torch.zeros(shape, dtype=dtype, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def smoke_row(row):
    """A tiny version of a row: 2 images (or unbatched), 3 planes, the spatial size cut to
    at most 17 x 19 (odd: partial tiles) unless the window needs more."""
    label, mode, B, C, H, W, k, s, p, d, c, cip, div, dt, was = row
    kk = k if isinstance(k, int) else max(k)
    hs = max(min(H, 17), kk + 2)
    ws = max(min(W, 19), kk + 2)
    if H == k:                       # global pooling stays global
        hs = ws = H
    return (label, mode, None if B is None else 2, 3, hs, ws, k, s, p, d, c, cip, div, dt, was)


def candidates(row, x):
    """(name, kwargs of pool2d_triton) of the row, most promising first: band configurations
    that each change one thing from the table's (dropped where the launch comes out the same
    as the table's or an earlier candidate's), then the older kernels."""
    label, mode, *_ = row
    g = geometry(row)
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    N, C, H, W = x4.shape
    H_out, W_out = PK.pool2d_out_size(H, W, g)
    out = []
    fits_words = mode == "max" and words_fit(x4, g.kernel, g.stride, g.padding, g.dilation,
                                             H_out, W_out)
    # the table's word configuration, where its choice is the word kernel (then the band
    # kernel's is a candidate)
    wtable = PK.words_config_for(N * C * H_out * W_out) if fits_words else None
    uses = wtable is not None
    if fits_words:
        # the word kernel: output rows, planes a program, warps (the table's two first)
        for cfg in dict.fromkeys(c for c in (PK._WORDS, PK._WORDS_SMALL, WordsConfig(2, 8, 4),
                                             WordsConfig(1, 16, 4), WordsConfig(2, 16, 4),
                                             WordsConfig(1, 8, 2), WordsConfig(1, 32, 4),
                                             WordsConfig(4, 4, 2), WordsConfig(2, 4, 1))
                                 if c is not None and c != wtable):
            out.append((f"words {cfg.rows} rows {cfg.planes} planes {cfg.num_warps}w",
                        dict(words=cfg), cfg, cfg))
    if PK.flat_fits(x4, g):
        # the flat kernel: outputs a program, warps
        for block, warps in ((1024, 4), (512, 4), (2048, 8), (1024, 8), (512, 2), (4096, 8)):
            plan = PK.Pool2dPlan(block, 0, warps, True, False, "flat")
            out.append((f"flat {block}/{warps}w", dict(plan=plan), None, plan))
    if PK.band_fits(x4, g):
        table = PK.band_config_for(mode, g, W_out)
        # the table's configuration, else its default, else the kernel's own defaults
        base = table or PK._BAND_DEFAULT or BandConfig()
        seen = set() if table is None or uses else {PK.band_launch(x4, mode, g, table)}
        auto_cpt = max(1, 8 // x4.element_size())
        cpt = base.cols_per_thread or auto_cpt
        tries = [
            ("band rows<=16 regs<=240", base._replace(rows=16, row_regs=240)),
            ("band rows<=8", base._replace(rows=8)),
            ("band rows<=4", base._replace(rows=4)),
            ("band tile 4096", base._replace(tile=4096)),
            ("band tile 1024", base._replace(tile=1024)),
            (f"band {cpt // 2} cols/thread", base._replace(cols_per_thread=max(1, cpt // 2))),
            (f"band {cpt * 2} cols/thread", base._replace(cols_per_thread=cpt * 2)),
            ("band no pair load", base._replace(pair=False)),
            ("band max in float32", base._replace(native=False)),
            ("band no align hints", base._replace(align=False)),
            ("band tile 512 rows<=4", base._replace(tile=512, rows=4)),
        ]
        if table is None:
            tries.insert(0, ("band default", base))
        elif uses:
            tries.insert(0, ("band table", table))
        for name, cfg in tries:
            launch = PK.band_launch(x4, mode, g, cfg)
            if launch in seen:
                continue
            seen.add(launch)
            out.append((name, dict(config=cfg), cfg, launch))
        if table is None:
            return out          # the table's choice is the older kernels' own
    else:
        return out              # the older kernels only: the table's choice
    legacy = PK.pool2d_plan(N * C * H_out, H_out, W_out, g, H, W)
    out.append((f"older kernels: {legacy.path}", dict(plan=legacy), None, legacy))
    return out


def run_kernel(row, x, out, kwargs):
    label, mode, B, C, H, W, k, s, p, d, c, cip, div, dt, _ = row
    return PK.pool2d_triton(x, out, mode, geometry(row), cip, div, **kwargs)


def out_shape(row, x):
    H_out, W_out = PK.pool2d_out_size(x.shape[-2], x.shape[-1], geometry(row))
    return (*x.shape[:-2], H_out, W_out)


def check(row, got, ref):
    if row[1] == "max":
        return bool(torch.equal(got, ref)), 0.0 if torch.equal(got, ref) else \
            (got.float() - ref.float()).abs().max().item()
    err = (got.float() - ref.float()).abs().max().item()
    scale = max(ref.float().abs().max().item(), 1.0)
    return bool(err <= TOL[ref.dtype] * scale), err


# -- compile ahead ----------------------------------------------------------------------------
_WORKER: dict = {}


def _precompile(task) -> int:
    """Worker: run each candidate once on the row's shapes (values do not matter), so that
    Triton's on-disk cache holds its binaries when the timing process asks; or torch.compile
    the eager function once (inductor's caches)."""
    kind, row, names = task
    if _WORKER.get("label") != row[0]:
        _WORKER.clear()
        _WORKER["label"] = row[0]
        _WORKER["x"] = make_input(row, "cuda", zeros=True)
    x = _WORKER["x"]
    done = 0
    if kind == "compile":
        try:
            import torch._inductor.config as inductor_config
            inductor_config.compile_threads = 1     # the pool's processes share the CPUs
            torch.compile(eager_fn(row), dynamic=False, fullgraph=True)(x)
            done = 1
        except Exception:  # reported by the timing process
            pass
    else:
        out = torch.empty(out_shape(row, x), dtype=x.dtype, device="cuda")
        for name, kwargs, _, _ in candidates(row, x):
            if name in names:
                try:
                    run_kernel(row, x, out, kwargs)
                    done += 1
                except Exception:  # reported by the timing process
                    pass
        if "TABLE" in names:
            try:
                run_kernel(row, x, out, {})
                done += 1
            except Exception:
                pass
    torch.cuda.synchronize()
    return done


def precompile(rows, jobs: int, timeout_s: float) -> None:
    tasks, tasks_c, tasks_k = [], [], []
    for row in rows:
        x = make_input(row, "meta", zeros=True)
        names = ["TABLE"] + [c[0] for c in candidates(row, x)]
        tasks_c.append(("compile", row, []))
        # a few candidates a task: short tasks keep every worker busy
        tasks_k += [("kernels", row, names[i:i + 4]) for i in range(0, len(names), 4)]
        # in row order (the rows that matter most first), the compile (the longest) first
        tasks += [tasks_c.pop()] + tasks_k
        tasks_k = []
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches and compiles")


def main() -> None:
    ap = sweep_parser(__doc__, jobs=12)
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    rows = list(ROWS)
    if args.rows:
        rows = [r for r in rows if any(s in r[0] for s in args.rows)]
    if smoke:
        keep = ("stem-b1-bf16", "down1-b128-bf16", "inception3-branch-b32-f32", "head-b128-bf16",
                "vit", "unbatched-s1", "deeplab", "googlenet-stem")
        rows = [smoke_row(r) for r in rows if any(k in r[0] for k in keep)]
    t_start = time.perf_counter()
    if not smoke and args.jobs > 0 and rows:
        import torch._inductor.config as inductor_config
        inductor_config.compile_threads = 1   # as in the warm-up processes (same cache keys)
        precompile(rows, args.jobs, 0.45 * args.budget_s)
    results = []
    for i_row, row in enumerate(rows):
        label, mode, B, C, H, W, k, s, p, d, c, cip, div, dt, was = row
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = left / (len(rows) - i_row)
        row_start = time.perf_counter()
        x = make_input(row, device)
        g = geometry(row)
        ref = PK.pool2d_reference(x, mode, g, cip, div)
        out = torch.empty(out_shape(row, x), dtype=x.dtype, device=device)
        nbytes = (x.numel() + out.numel()) * x.element_size()
        sol_us = nbytes / (COPY_TBPS * 1e12) * 1e6
        x4 = x if x.dim() == 4 else x.unsqueeze(0)
        H_out, W_out = out.shape[-2:]
        key = PK.band_key(mode, g, W_out) if PK.band_fits(x4, g) else None
        table = PK.band_config_for(mode, g, W_out) if key else None
        tdesc = (f"band {PK.band_launch(x4, mode, g, table)}" if table is not None
                 else f"older kernels ({PK.pool2d_plan(x4.shape[0] * x4.shape[1] * H_out, H_out, W_out, g, H, W).path})")
        print(f"\n== {label}: {list(x.shape)} {dt} k{k} s{s} p{p} d{d} ceil={c} "
              f"{'' if mode == 'max' else f'cip={cip} div={div} '}({nbytes / 1e6:.1f} MB, "
              f"{sol_us:.1f} us at {COPY_TBPS} TB/s; last bench opspec/eager/compile "
              f"{was[0]}/{was[1]}/{was[2]} us)\n   key={key}  table: {tdesc}", flush=True)
        print(f"  {'candidate':44s} {'us':>9s} {'TB/s':>6s} {'%copy':>6s} {'x eager':>8s} "
              f"{'x compile':>9s}  output", flush=True)
        entries, base = [], {}

        def record(name, fn, cfg, launch, budgeted=True):
            if budgeted and time.perf_counter() - row_start > allot:
                entries.append(dict(name=name, config=cfg and list(cfg), skipped=True))
                return None
            try:
                got = fn()
                ok, err = check(row, got, ref)
                ms = bench(fn, smoke)
            except Exception as e:  # a candidate that does not build or launch
                print(f"  {name:44s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
                entries.append(dict(name=name, config=cfg and list(cfg),
                                    error=f"{type(e).__name__}: {e}"[:800]))
                return None
            e = dict(name=name, config=cfg and list(cfg), launch=launch and str(launch),
                     ms=ms, us=ms * 1e3, tbps=nbytes / ms / 1e9,
                     pct_copy=100 * nbytes / ms / 1e9 / COPY_TBPS, max_err=err, ok=ok)
            entries.append(e)
            xe = base["eager"] / ms if "eager" in base else float("nan")
            xc = base["compile"] / ms if "compile" in base else float("nan")
            print(f"  {name:44s} {e['us']:9.1f} {e['tbps']:6.2f} {e['pct_copy']:5.0f}% {xe:8.2f} "
                  f"{xc:9.2f}  {'matched' if ok else f'WRONG (max err {err:.2g})'}", flush=True)
            return e

        fn_e = eager_fn(row)
        e = record("torch eager", lambda: fn_e(x), None, None, False)
        if e:
            base["eager"] = e["ms"]
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(fn_e, dynamic=False, fullgraph=True,
                                     **({"backend": "eager"} if smoke else {}))
            compiled(x)
            ctime = time.perf_counter() - t0
            e = record(f"torch.compile [{ctime:.0f} s to compile]", lambda: compiled(x), None,
                       None, False)
            if e:
                base["compile"] = e["ms"]
        except Exception as exc:
            print(f"  torch.compile: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            entries.append(dict(name="torch.compile", config=None,
                                error=f"{type(exc).__name__}: {exc}"[:800]))
        record("TABLE", lambda: run_kernel(row, x, out, {}), table, tdesc, False)
        cands = candidates(row, x)
        if smoke:
            cands = cands[:2] + cands[2:][-1:]
        for name, kwargs, cfg, launch in cands:
            record(name, lambda kwargs=kwargs: run_kernel(row, x, out, kwargs), cfg, launch)
        skipped = [e["name"] for e in entries if e.get("skipped")]
        if skipped:
            print(f"  ({len(skipped)} candidates skipped: the row's share of the budget, "
                  f"{allot:.0f} s, was spent: {', '.join(skipped)})", flush=True)
        kernels = [e for e in entries if "ms" in e and not e["name"].startswith("torch")]
        tab = next((e for e in kernels if e["name"] == "TABLE"), None)
        best, wrong = report_best(
            kernels, base, lambda b: f"{b['tbps']:.2f} TB/s ({b['pct_copy']:.0f}% of {COPY_TBPS})",
            table=tab)
        results.append(dict(label=label, mode=mode, shape=list(x.shape), dtype=dt,
                            kernel=k, stride=s, padding=p, dilation=d, ceil_mode=c,
                            count_include_pad=cip, divisor_override=div, bytes=nbytes,
                            sol_us=sol_us, key=key and list(key), table=tdesc,
                            entries=entries, eager_ms=base.get("eager"),
                            compile_ms=base.get("compile"), best=best and best["name"],
                            best_config=best and best["config"], wrong=wrong,
                            last_bench_us=list(was)))
        x = ref = out = None
        if not smoke:
            torch.cuda.empty_cache()
    summarize(results, time.perf_counter() - t_start)
    if args.json:
        default = list(PK._BAND_DEFAULT) if PK._BAND_DEFAULT else None
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__,
                           copy_tbps=COPY_TBPS, band_default=default,
                           band_fields=list(BandConfig._fields), rows=results), f, indent=1)
        print(f"wrote {args.json}")


def summarize(results, elapsed: float) -> None:
    print(f"\nsummary ({elapsed:.0f} s): best matched candidate per row; a row fails if slower "
          f"than both eager and compile, or (SOL >= 20 us) below 90 % of the copy (3.8 TB/s)")
    print(f"  {'row':34s} {'best':30s} {'us':>8s} {'TB/s':>6s} {'%copy':>6s} {'x table':>8s} "
          f"{'x eager':>8s} {'x compile':>9s} {'table x compile':>15s}")
    for r in results:
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        tab = next((e for e in r["entries"] if e["name"] == "TABLE" and "ms" in e), None)
        if not b:
            print(f"  {r['label']:34s} no candidate matched")
            continue
        xt = tab["ms"] / b["ms"] if tab and tab["ok"] else float("nan")
        xe = r["eager_ms"] / b["ms"] if r["eager_ms"] else float("nan")
        xc = r["compile_ms"] / b["ms"] if r["compile_ms"] else float("nan")
        tc = r["compile_ms"] / tab["ms"] if r["compile_ms"] and tab and tab["ok"] else float("nan")
        fails = lambda e: e is not None and (  # noqa: E731
            (r["eager_ms"] and r["compile_ms"] and e["ms"] > max(r["eager_ms"], r["compile_ms"]))
            or (r["sol_us"] >= 20 and e["tbps"] < 0.9 * COPY_TBPS))
        flag = ("FAILS" if fails(b) else "table FAILS" if fails(tab) else "")
        print(f"  {r['label'][:34]:34s} {r['best'][:30]:30s} {b['us']:8.1f} {b['tbps']:6.2f} "
              f"{b['pct_copy']:5.0f}% {xt:8.2f} {xe:8.2f} {xc:9.2f} {tc:15.2f}  {flag}")
    # Per table key: the geometric-mean speedup of each candidate over the table's choice
    # across the key's rows (where both were timed and matched), and what to set.
    print("\nwhat the rows say about the table block of kernels/pool.py (_BAND_TABLE by key):")
    keys = {}
    for r in results:
        keys.setdefault(tuple(map(lambda v: tuple(v) if isinstance(v, list) else v, r["key"]))
                        if r["key"] else ("older kernels only",), []).append(r)
    for key, rs in keys.items():
        geo = {}
        for r in rs:
            tab = next((e for e in r["entries"] if e["name"] == "TABLE" and "ms" in e and e["ok"]), None)
            for e in r["entries"]:
                if tab and "ms" in e and e["ok"] and not e["name"].startswith(("torch", "TABLE")):
                    geo.setdefault(e["name"], []).append((math.log(tab["ms"] / e["ms"]), e))
        print(f"  key {key}: rows {', '.join(r['label'] for r in rs)}")
        ranked = sorted(geo.items(), key=lambda kv: -sum(v for v, _ in kv[1]) / len(kv[1]))
        for name, v in ranked[:4]:
            print(f"    {name:40s} x{math.exp(sum(a for a, _ in v) / len(v)):.3f} over the table "
                  f"({len(v)}/{len(rs)} rows)")
        if ranked:
            name, v = ranked[0]
            gm = math.exp(sum(a for a, _ in v) / len(v))
            if gm > 1.03 and len(v) == len(rs):
                cfg = v[0][1]["config"]
                if cfg is None:
                    print(f"    -> set _BAND_TABLE[{key!r}] = None  (the older kernels)")
                else:
                    print(f"    -> set _BAND_TABLE[{key!r}] = BandConfig(*{tuple(cfg)})")
            else:
                print("    -> keep the table's choice")


if __name__ == "__main__":
    main()
