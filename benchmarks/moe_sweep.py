"""Offline configuration sweep for the MoE grouped GEMM's contiguous (prefill) kernels
(opspec.kernels.moe) on an H200. Per row (MoeGroupedGemmFwdOp workload cases, the bench's
own inputs): check every candidate's output once against the torch reference (a wrong one
is reported and is never "best"), then time device time as the bench does
(sweep_pool.bench: L2 flushed before each sample, medians), the table's choice, torch eager (the bench's baseline:
torch._grouped_mm over the packed rows, F.silu(gate) * up, rows of no expert zeroed),
torch.compile of that function, and the candidates: the TMA tile kernel (tiles of one
expert), the span kernel (128-row tiles that may hold several experts, one K loop per
expert present), the span kernel persistent (one program per SM), over stages, group sizes,
tile shapes and the store path.

    python benchmarks/moe_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...] [--jobs N]

Rows: mixtral-gate-up-prefill (the target: alignment 64, 0.96x of eager with the old
64-row tiles), the same with segments shifted by 64 rows (every expert boundary inside a
128-row tile: what spanning tiles cost), and as controls qwen3-30b-ep16-down (alignment
64 without the activation), dsv3-gate-up / dsv3-down prefill (alignment 128),
qwen3-30b-gate-up (tight packing) and dsv3-gate-up-ep32.

Prints per row and candidate: us, TFLOP/s (flops from the op's eval_roofline()), TB/s
(its bytes: read + written), speedups over eager and over torch.compile, whether the output
matched; then the best candidate and the table constant it points to (kernels/moe.py, the
table block). --json writes every timing. --budget-s bounds the whole run, compiles
included: candidates are compiled first in --jobs processes (torch.compile warmed there
too), then the budget left is shared out over the rows (the target rows weigh more); the
table, eager and compile are timed first in each row, then the candidates in the order
listed, most promising first; when a row's share is spent the rest are skipped (and said
so).

--smoke runs tiny float16 rows through Triton's interpreter on the CPU (a check of this
script; torch.compile uses its "eager" backend there). Not part of the package.
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

import opspec.kernels.moe as K
from opspec.kernels.moe import MoeConfig, moe_grouped_gemm_reference, moe_grouped_gemm_triton
from opspec.ops import MoeGroupedGemmFwdOp
from opspec.ops.baselines_moe import _grouped_fn
from opspec.ops.moe_layout import as_layout
from opspec.ops.workloads import cases
from opspec.schema.primitives import moe_layout_metadata

from sweep_pool import bench, report_best, run_ahead, sweep_parser  # beside this script

COPY_TBPS = 4.21  # measured device-to-device copy bandwidth (read + written), TB/s
PEAK_TFLOPS = 760.0  # measured cuBLAS bf16 on large GEMMs (730-790)

# (label, workload case id, metadata: None = the case's own, "shift64" = segments moved by
# 64 rows, weight in the budget)
ROWS = [
    ("mixtral-gate-up-prefill", "mixtral-gate-up-prefill-bfloat16", None, 3.0),
    ("mixtral-gate-up-prefill-shift64", "mixtral-gate-up-prefill-bfloat16", "shift64", 1.5),
    ("qwen3-30b-ep16-down", "qwen3-30b-ep16-down-bfloat16", None, 1.0),
    ("dsv3-gate-up-prefill", "dsv3-gate-up-prefill-bfloat16", None, 1.0),
    ("dsv3-down-prefill", "dsv3-down-prefill-bfloat16", None, 1.0),
    ("qwen3-30b-gate-up", "qwen3-30b-gate-up-bfloat16", None, 1.0),
    ("dsv3-gate-up-ep32", "dsv3-gate-up-ep32-bfloat16", None, 0.7),
]
# smoke: the same layouts at tiny sizes (M, E, N, K), float16
SMOKE_SIZE = (1024, 4, 256, 128)

C = MoeConfig


def cfg_name(c: MoeConfig, force_align: int | None = None) -> str:
    kern = {"tile": "tile", "span": "span", "span_persistent": "persistent"}[c.kernel]
    store = "" if c.kernel == "tile" or c.tma_store else " ptr-store"
    extra = f" (as alignment {force_align})" if force_align else ""
    return (f"{kern} {c.block_m}x{c.block_n}x{c.block_k} g{c.group_m} w{c.num_warps} "
            f"s{c.num_stages}{store}{extra}")


def variants(info: dict) -> list[tuple[str, MoeConfig, int | None]]:
    """(name, config, alignment forced on the kernel or None) of a row, most promising first.
    The table's own choice is timed separately."""
    silu, align, mk = info["silu"], info["alignment"], info["metadata_kind"]
    bn = 128 if silu else 256
    span = lambda *a, **kw: C(128, bn, 64, 8, 8, 3, "span")._replace(**kw)  # noqa: E731
    out: list[tuple[MoeConfig, int | None]] = []
    if 16 <= align < 128:  # the span kernel's rows
        out += [
            (span(), None),  # (the table's choice with silu_and_mul: skipped there)
            (span(kernel="span_persistent"), None),
            (span(num_stages=4), None),
            (span(kernel="span_persistent", num_stages=4), None),
            (C(64, bn, 64, 8, 8, 3), None),  # the old table: 64-row tiles of one expert
        ]
        if mk == "per_row" and info["aligned128"]:
            # An upper bound for the span kernel: the tile kernel with 128-row tiles, valid
            # here only because this metadata's segments are 128-aligned.
            out.append((C(128, bn, 64, 8, 8, 3), 128))
        out += [
            (span(tma_store=False), None),
            (span(group_m=16), None),
            (span(group_m=4), None),
            (span(block_k=128, num_stages=2), None),
            (span(block_m=256, block_n=bn // 2), None),
            (span(kernel="span_persistent", tma_store=False), None),
            (span(kernel="span_persistent", group_m=16), None),
        ]
        if silu:  # 64-row tiles of one expert, 2 x 256 weight rows a step
            out += [(C(64, 256, 64, 8, 8, 3), None), (C(64, 256, 64, 8, 8, 2), None)]
        else:
            out += [(span(block_n=128, num_stages=4), None),
                    (span(block_n=128, num_warps=4, num_stages=4), None)]
    elif align >= 128:
        out += [
            (span(), None),
            (span(kernel="span_persistent"), None),
            (C(128, bn, 64, 8, 8, 4), None),
            (span(kernel="span_persistent", num_stages=4), None),
            (C(128, bn, 64, 16, 8, 3), None),
            (C(128, bn, 64, 8, 8, 3), None),
        ]
    else:  # tight packing: the table runs the segments (pointer) kernel
        out += [
            (span(), None),
            (span(kernel="span_persistent"), None),
            (span(num_stages=4), None),
        ]
    seen, res = set(), []
    for c, fa in out:
        if (c, fa) not in seen:
            seen.add((c, fa))
            res.append((cfg_name(c, fa), c, fa))
    return res


def shifted_metadata(layout, M: int, E: int) -> list[int]:
    """per_row ids with every expert boundary at an odd multiple of the alignment (64):
    the first expert takes one tile more and the last one less than the balanced split."""
    a = layout.alignment
    tiles = [M // a // E] * E
    tiles[0] += 1
    tiles[-1] -= 1
    return [e for e, t in enumerate(tiles) for _ in range(a * t)]


def build_row(row, device: str, smoke: bool, zeros: bool = False):
    """(info, op, x, w, metadata) of a row: the workload case's inputs (or tiny float16 ones
    with --smoke), the metadata possibly shifted."""
    label, case_id, meta_kind, _ = row
    case = next(c for c in cases(MoeGroupedGemmFwdOp) if c.id == case_id)
    op = case.construct(MoeGroupedGemmFwdOp)
    lay = as_layout(case.params["layout"])
    v = case.values
    if smoke:
        M, E, N, Kd = SMOKE_SIZE
        gen = torch.Generator().manual_seed(0)
        x = (torch.randn(M, Kd, generator=gen) * 0.5).half()
        w = (torch.randn(E, N, Kd, generator=gen) * 0.5).half()
        meta = torch.tensor(moe_layout_metadata(case.params["layout"], M, E), dtype=torch.int32)
    else:
        M, E, N, Kd = v["M"], v["E"], v["N"], v["K"]
        if zeros:  # compile warm-up: values do not matter, the metadata does
            x = torch.zeros(M, Kd, dtype=torch.bfloat16, device=device)
            w = torch.zeros(E, N, Kd, dtype=torch.bfloat16, device=device)
            meta = torch.tensor(moe_layout_metadata(case.params["layout"], M, E),
                                dtype=torch.int32, device=device)
        else:
            x, w, meta = case.inputs(device)
    if meta_kind == "shift64":
        meta = torch.tensor(shifted_metadata(lay, M, E), dtype=torch.int32, device=meta.device)
    silu = case.params.get("activation", "none") == "silu_and_mul"
    ids = meta.tolist()
    if lay.metadata_kind == "per_row":
        aligned128 = all(ids[r] == ids[r - 1] for r in range(1, len(ids)) if r % 128)
    else:
        aligned128 = False
    info = dict(label=label, case=case_id, M=M, E=E, N=N, K=Kd, silu=silu,
                activation="silu_and_mul" if silu else "none", metadata_kind=lay.metadata_kind,
                alignment=lay.alignment, packing=lay.packing, aligned128=aligned128,
                dtype=str(x.dtype).removeprefix("torch."))
    return info, op, x, w, meta


def table_config(info, dtype) -> MoeConfig:
    n_out = info["N"] // 2 if info["silu"] else info["N"]
    segments = info["alignment"] <= 1 and info["metadata_kind"] == "physical_psum"
    return K.moe_config_for("contiguous", info["alignment"], 0, n_out, info["K"], dtype,
                            info["silu"], segments, tma=True,
                            rows_per_expert=info["M"] / info["E"])


def kernel_fn(info, x, w, meta, out, cfg=None, force_align=None):
    """The call the op makes (cfg None: the table's choice, TMA where eligible), or a
    candidate forced onto the TMA kernels."""
    align = force_align or info["alignment"]
    if cfg is None:
        return lambda: moe_grouped_gemm_triton(x, w, meta, out, "contiguous", info["metadata_kind"],
                                               align, info["activation"])
    return lambda: moe_grouped_gemm_triton(x, w, meta, out, "contiguous", info["metadata_kind"],
                                           align, info["activation"], config=cfg, tma=True)


_WORKER: dict = {}


def _precompile(task) -> int:
    """Worker: launch each candidate once on the row's shapes so that Triton's on-disk cache
    holds its binary when the timing process asks; or run torch.compile of the eager
    function once (inductor's caches)."""
    kind, row, names, smoke = task
    device = "cpu" if smoke else "cuda"
    if _WORKER.get("row") != row[0]:
        _WORKER.clear()
        _WORKER["row"] = row[0]
        info, op, x, w, meta = build_row(row, device, smoke, zeros=True)
        n_out = info["N"] // 2 if info["silu"] else info["N"]
        _WORKER["ops"] = (info, op, x, w, meta, torch.empty(info["M"], n_out, dtype=x.dtype,
                                                            device=device))
    info, op, x, w, meta, out = _WORKER["ops"]
    done = 0
    if kind == "compile":
        try:
            import torch._inductor.config as inductor_config
            inductor_config.compile_threads = 1  # the pool's processes share the CPUs
            torch.compile(_grouped_fn(op), dynamic=False)(x, w, meta)
            done = 1
        except Exception:  # reported by the timing process
            pass
    else:
        by_name = {n: (c, fa) for n, c, fa in variants(info)}
        for n in names:
            try:
                if n == "TABLE":
                    kernel_fn(info, x, w, meta, out)()
                else:
                    c, fa = by_name[n]
                    kernel_fn(info, x, w, meta, out, c, fa)()
                done += 1
            except Exception:  # reported by the timing process
                pass
    if not smoke:
        torch.cuda.synchronize()
    return done


def precompile(rows, jobs: int, timeout_s: float, smoke: bool) -> None:
    """Compile every row's candidates (and warm torch.compile) in `jobs` processes at once:
    the compiles, not the timings, dominate the sweep; whatever is not done by `timeout_s`
    compiles inline later."""
    tasks = [] if smoke else [("compile", r, [], smoke) for r in rows if r[2] is None]
    kernel_tasks = []
    for r in rows:
        if r[2] is not None:  # shares the unshifted row's binaries
            continue
        info = _row_info(r)
        names = ["TABLE"] + [n for n, _, _ in variants(info)]
        if smoke:
            names = names[:2]
        kernel_tasks += [("kernels", r, names[i:i + 3], smoke) for i in range(0, len(names), 3)]
    # torch.compile warm-ups first (the longest), then the kernels, row by row
    run_ahead(_precompile, tasks + kernel_tasks, jobs, timeout_s, what="launches or compiles")


def _row_info(row) -> dict:
    """A row's info without building its tensors (the pool's task lists)."""
    label, case_id, meta_kind, _ = row
    case = next(c for c in cases(MoeGroupedGemmFwdOp) if c.id == case_id)
    lay = as_layout(case.params["layout"])
    v = case.values
    silu = case.params.get("activation", "none") == "silu_and_mul"
    ids = moe_layout_metadata(case.params["layout"], v["M"], v["E"])
    aligned128 = (lay.metadata_kind == "per_row" and meta_kind is None
                  and all(ids[r] == ids[r - 1] for r in range(1, len(ids)) if r % 128))
    return dict(label=label, M=v["M"], E=v["E"], N=v["N"], K=v["K"], silu=silu,
                metadata_kind=lay.metadata_kind, alignment=lay.alignment, aligned128=aligned128)




MIN_GAIN = 1.02  # a change of the table must win by this much


def constant_of(info) -> str:
    """The table constant (kernels/moe.py) that serves a row."""
    a, silu = info["alignment"], info["silu"]
    if 16 <= a < 128:
        return "_SPAN_SILU" if silu else "_SPAN"
    if a >= 128:
        return "_PREFILL_SILU" if silu else "_PREFILL"
    return "(tight packing: the segments kernel)"


def suggestion(info, best: dict, table_ms: float | None) -> str:
    """The table constant (kernels/moe.py) a row's best candidate points to."""
    c = MoeConfig(*best["config"]) if best.get("config") else None
    if c is None or best.get("force_align"):
        return "keep the table (the best is not a configuration the table can take)"
    gain = table_ms / best["ms"] if table_ms else float("nan")
    if gain < MIN_GAIN:
        return f"keep the table ({constant_of(info)}): the best is within {MIN_GAIN:.2f}x of it"
    lit = f"MoeConfig{tuple(c)}"
    a, silu = info["alignment"], info["silu"]
    if 16 <= a < 128:
        name = constant_of(info)
        if c.kernel == "tile":
            return f"{name} = None: the 64-row tiles of one expert win (x{gain:.2f} of the table)"
        need = K._SPAN_MIN_SEGMENT * (c.block_m - a)
        note = ""
        if info["M"] / info["E"] < need:
            note = (f"; NOTE: the table takes span tiles only where M / E >= "
                    f"_SPAN_MIN_SEGMENT * (block_m - alignment) = {need} rows (this row: "
                    f"{info['M'] / info['E']:.0f}): lower _SPAN_MIN_SEGMENT too")
        return f"{name} = {lit}  (x{gain:.2f} of the table's choice{note})"
    if a >= 128:
        name = "_PREFILL_SILU" if silu else "_PREFILL"
        return f"{name} = {lit}  (x{gain:.2f}; kernel='tile' keeps the one-expert TMA kernel)"
    return (f"tight packing: the segments kernel serves it (moe_config_for strips the kernel "
            f"field); best here {lit} x{gain:.2f} (this workload's segments are 256-aligned, "
            f"real routing is not: information only)")


def main() -> None:
    ap = sweep_parser(__doc__, jobs=12)
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    rows = ROWS
    if args.rows:
        rows = [r for r in rows if any(s in r[0] for s in args.rows)]
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1  # as in the warm-up processes (same cache keys)
    # one compile per row of the same eager function: stay under dynamo's recompile limit
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(dynamo_config, knob):
            setattr(dynamo_config, knob, 64)
    t_start = time.perf_counter()
    if smoke:  # fp16 through torch._grouped_mm fails under torch.compile: quiet its log
        import logging
        logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    if args.jobs > 0 and rows:
        precompile(rows[:1] if smoke else rows, min(args.jobs, 1) if smoke else args.jobs,
                   0.45 * args.budget_s, smoke)
    results = []
    for i_row, row in enumerate(rows):
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = left * row[3] / sum(r[3] for r in rows[i_row:])
        row_start = time.perf_counter()
        info, op, x, w, meta = build_row(row, device, smoke)
        label = info["label"]
        y0 = op(x, w, meta)  # the op once: its roofline
        flop, nbytes = (int(v) for v in op.eval_roofline())
        del y0
        ref = moe_grouped_gemm_reference(x, w, meta, "contiguous", info["metadata_kind"],
                                         info["alignment"], info["activation"]).float()
        ref_norm, ref_max = ref.norm().item(), ref.abs().max().item()
        n_out = info["N"] // 2 if info["silu"] else info["N"]
        out = torch.empty(info["M"], n_out, dtype=x.dtype, device=device)
        table = table_config(info, x.dtype)
        cands = variants(info)
        if smoke:
            cands = list({c[0]: c for c in cands[:3] + cands[-2:]}.values())
        elif row[2] == "shift64":  # what spanning costs: the main candidates only
            cands = [c for c in cands if c[1].block_m == 128 and c[1].block_k == 64
                     and c[1].group_m == 8 and c[1].tma_store][:4] + \
                    [c for c in cands if c[1].block_m == 64]
        sol_us = max(nbytes / (COPY_TBPS * 1e12), flop / (PEAK_TFLOPS * 1e12)) * 1e6
        print(f"\n== {label}: {info['metadata_kind']} alignment {info['alignment']} "
              f"{info['activation']} M={info['M']} E={info['E']} N={info['N']} K={info['K']} "
              f"{info['dtype']}  ({flop / 1e12:.3f} TFLOP, {nbytes / 1e6:.0f} MB; "
              f"{sol_us:.0f} us at {PEAK_TFLOPS:.0f} TFLOP/s)",
              flush=True)
        print(f"  {'candidate':52s} {'us':>9s} {'TFLOP/s':>8s} {'TB/s':>6s} {'x eager':>8s} "
              f"{'x compile':>9s}  output", flush=True)
        entries = []
        base = {}

        def record(name, fn, cfg, budgeted=True, force_align=None, check=True):
            if budgeted and time.perf_counter() - row_start > allot:
                entries.append(dict(name=name, config=cfg and list(cfg), skipped=True))
                return None
            try:
                out.fill_(float("nan"))
                got = fn().float()
                err = (got - ref).norm().item() / max(ref_norm, 1e-30)
                max_err = (got - ref).abs().max().item()
                ok = bool(err < 1e-2 and max_err <= 3e-2 * ref_max + 1e-2)
                ms = bench(fn, smoke)
            except Exception as e:  # a configuration that does not build or launch
                print(f"  {name:52s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
                entries.append(dict(name=name, config=cfg and list(cfg),
                                    error=f"{type(e).__name__}: {e}"[:800]))
                return None
            e = dict(name=name, config=cfg and list(cfg), force_align=force_align, ms=ms,
                     us=ms * 1e3, tflops=flop / ms / 1e9, tbps=nbytes / ms / 1e9,
                     rel_err=err, max_err=max_err, ok=ok)
            entries.append(e)
            xe = base["eager"] / ms if "eager" in base else float("nan")
            xc = base["compile"] / ms if "compile" in base else float("nan")
            print(f"  {name:52s} {e['us']:9.1f} {e['tflops']:8.1f} {e['tbps']:6.2f} {xe:8.3f} "
                  f"{xc:9.3f}  {'matched' if ok else f'WRONG (rel err {err:.1e}, max {max_err:.2g})'}",
                  flush=True)
            return e

        eager = _grouped_fn(op)
        e = record(f"torch eager (_grouped_mm{' + silu_and_mul' if info['silu'] else ''})",
                   lambda: eager(x, w, meta), None, False)
        if e:
            base["eager"] = e["ms"]
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(eager, dynamic=False, **({"backend": "eager"} if smoke else {}))
            compiled(x, w, meta)
            ctime = time.perf_counter() - t0
            e = record(f"torch.compile(eager) [{ctime:.0f} s to compile]",
                       lambda: compiled(x, w, meta), None, False)
            if e:
                base["compile"] = e["ms"]
        except Exception as exc:
            print(f"  torch.compile(eager): FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            entries.append(dict(name="torch.compile(eager)", config=None,
                                error=f"{type(exc).__name__}: {exc}"[:800]))
        tight_psum = info["alignment"] <= 1 and info["metadata_kind"] == "physical_psum"
        tname = ("segments kernel (pointer loads) " + cfg_name(table).removeprefix("tile ")
                 if tight_psum else cfg_name(table))
        tab = record(f"TABLE: {tname}", kernel_fn(info, x, w, meta, out), table, False)
        for name, cfg, fa in cands:
            if cfg == table and fa is None:
                continue
            record(name, kernel_fn(info, x, w, meta, out, cfg, fa), cfg, force_align=fa)
        skipped = [e["name"] for e in entries if e.get("skipped")]
        if skipped:
            print(f"  ({len(skipped)} candidates skipped: the row's share of the budget, "
                  f"{allot:.0f} s, was spent: {', '.join(skipped)})", flush=True)
        kernels = [e for e in entries if "ms" in e and e["config"] is not None]
        best, wrong = report_best(kernels, base, lambda b: f"{b['tflops']:.0f} TFLOP/s",
                                  digits=3)
        # the best the table can take (a forced alignment is a diagnostic only)
        best_cfg = min((e for e in kernels if e["ok"] and not e.get("force_align")),
                       key=lambda e: e["ms"], default=None)
        table_ms = tab["ms"] if tab and tab["ok"] else None
        hint = suggestion(info, best_cfg, table_ms) if best_cfg else "no configuration matched"
        if best:
            print(f"  -> {hint}", flush=True)
        results.append(dict(info, flop=flop, bytes=nbytes, sol_us=sol_us, table=list(table),
                            entries=entries, eager_ms=base.get("eager"),
                            compile_ms=base.get("compile"), best=best and best["name"],
                            best_config=best_cfg and best_cfg["config"], hint=hint, wrong=wrong))
        x = w = meta = ref = out = None  # frees the tensors (closures above read them)
        if not smoke:
            torch.cuda.empty_cache()
    summarize(results, time.perf_counter() - t_start)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__,
                           peak_tflops=PEAK_TFLOPS, copy_tbps=COPY_TBPS, rows=results), f, indent=1)
        print(f"wrote {args.json}")


def summarize(results, elapsed: float) -> None:
    print(f"\nsummary ({elapsed:.0f} s): per row the table's choice and the best matched "
          f"candidate (a row fails when slower than both eager and compile)")
    print(f"  {'row':32s} {'table us':>9s} {'TFLOP/s':>8s} {'best':44s} {'us':>8s} "
          f"{'TFLOP/s':>8s} {'x eager':>8s} {'x compile':>9s}")
    for r in results:
        tab = next((e for e in r["entries"] if e["name"].startswith("TABLE") and "ms" in e), None)
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        t_us = f"{tab['us']:9.1f} {tab['tflops']:8.0f}" if tab and tab["ok"] else f"{'-':>9s} {'-':>8s}"
        if not b:
            print(f"  {r['label']:32s} {t_us} no candidate matched")
            continue
        xe = r["eager_ms"] / b["ms"] if r["eager_ms"] else float("nan")
        xc = r["compile_ms"] / b["ms"] if r["compile_ms"] else float("nan")
        print(f"  {r['label']:32s} {t_us} {b['name'][:44]:44s} {b['us']:8.1f} {b['tflops']:8.0f} "
              f"{xe:8.3f} {xc:9.3f}")
    print("\nwhat the rows say about the table (kernels/moe.py):")
    for r in results:
        print(f"  {r['label']}: {r['hint']}")
    # A constant serves several rows: per constant, each configuration's geometric-mean
    # time over the table's choice across the rows it serves (timed on all of them).
    groups: dict[str, list] = {}
    for r in results:
        groups.setdefault(constant_of(r), []).append(r)
    print("\nper table constant: geometric-mean speedup over the table's choice, rows where "
          "every listed candidate matched")
    for const, rs in groups.items():
        ratios: dict[str, list] = {}
        for r in rs:
            tab = next((e for e in r["entries"] if e["name"].startswith("TABLE") and e.get("ok")), None)
            if not tab:
                continue
            for e in r["entries"]:
                if e.get("ok") and e["config"] is not None and not e.get("force_align"):
                    key = "TABLE" if e["name"].startswith("TABLE") else e["name"]
                    ratios.setdefault(key, []).append(tab["ms"] / e["ms"])
        full = {k: v for k, v in ratios.items() if len(v) == len(rs)}
        if not full:
            continue
        ranked = sorted(full.items(), key=lambda kv: -math.prod(kv[1]) ** (1 / len(kv[1])))
        labels = ", ".join(r["label"] for r in rs)
        print(f"  {const} ({labels}):")
        for k, v in ranked[:4]:
            print(f"    x{math.prod(v) ** (1 / len(v)):.3f}  {k}")


if __name__ == "__main__":
    main()
