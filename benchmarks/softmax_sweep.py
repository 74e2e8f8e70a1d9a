"""Offline sweep of the last-axis softmax launch table on an H200: per softmax or
log-softmax workload row, time the table's choice (the launcher with no override), torch
eager, torch.compile of the eager function and candidate variants of the table
(``ROW_TUNING`` in opspec.kernels.softmax), each variant a change of one or two fields.
Every variant's output (the table's too) is checked once against the float32 torch
reference before it is timed; a wrong one is reported and never "best".

    python benchmarks/softmax_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]

Prints per row and variant: us (median, L2 flushed between samples: triton's do_bench),
TB/s (bytes read + written, as the ops' rooflines count them) and the speedup against
eager and against compile; then the best variant of each row and the table fields it
changes. The JSON holds every timing. The budget bounds the whole run, Triton and Inductor
compiles included: the compiles are made first in ``--jobs`` processes (up to 45 % of the
budget), then the rows are timed in order (the failing rows first), each given an equal
share of what is left; in a row the table, eager and compile come first, then the
variants, most promising first, until the row's share is spent. Not part of the package.

``--smoke`` runs tiny rows through Triton's interpreter on the CPU (a check of this
script; compile there is torch.compile with the "eager" backend).
"""

from __future__ import annotations

import json
import os
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton

import opspec.kernels.softmax as SK

from sweep_pool import run_ahead, sweep_parser  # beside this script

TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 1.5e-2}
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}

# -- rows -------------------------------------------------------------------------------------
# (op, label, M rows, N, input dtype, extra). op: softmax | log (log-softmax).
# extra: the output dtype name (None: the input's).
# Order: the rows that fail on the H200 first (below 3.8 TB/s or slower than eager and
# compile), then rows that check the table does not regress elsewhere.
ROWS = [
    ("softmax", "llama3-vocab-prefill-bfloat16", 4096, 128256, "bf16", None),
    ("softmax", "qwen2.5-vocab-prefill-float32", 1024, 151936, "f32", None),
    ("softmax", "llama3-8b-attn-1k-bfloat16", 32 * 1024, 1024, "bf16", None),
    ("softmax", "llama3-8b-attn-2k-bfloat16", 32 * 2048, 2048, "bf16", None),
    ("log", "llama3-vocab-train-bfloat16", 4096, 128256, "bf16", None),
    ("log", "llama3-vocab-prefill-bfloat16-float32", 2048, 128256, "bf16", "f32"),
    ("log", "llama3-8b-attn-1k-bfloat16", 32 * 1024, 1024, "bf16", None),
    # rows that pass: the table must not make them worse
    ("softmax", "llama3-8b-attn-8k-bfloat16", 4 * 8192, 8192, "bf16", None),
    ("log", "llama3-8b-attn-2k-float32", 32 * 2048, 2048, "f32", None),
]
SMOKE_ROWS = [
    ("softmax", "smoke-softmax-rows", 40, 45, "bf16", None),
    ("log", "smoke-log-coop", 6, 700, "bf16", "f32"),
]
#: smoke shrinks the register budget and the SM count so that tiny rows reach coop and looped
SMOKE_SOFTMAX = dict(max_reg=64, sm_count=1)


# -- variants: (name, table fields changed), most promising first ------------------------------

def softmax_variants(M: int, N: int, in_bytes: int, smoke: bool = False
                     ) -> list[tuple[str, dict]]:
    plan = SK.softmax_plan(M, N, 1, in_bytes, **(SMOKE_SOFTMAX if smoke else {}))
    if plan.kind == "rows":
        return [
            ("2 tiles a program", dict(row_tiles=2)),
            ("tiles of 4096", dict(row_tile=4096)),
            ("former table: tiles of 1024", dict(row_tile=1024)),
            ("tiles of 16384", dict(row_tile=16384)),
            ("2 tiles of 4096", dict(row_tile=4096, row_tiles=2)),
            ("32 a thread", dict(row_per_thread=32)),
            ("4 tiles a program", dict(row_tiles=4)),
        ]
    if plan.kind in ("coop", "looped"):
        # coop_min_in_bytes=1: coop for 16-bit inputs too (the table keeps them on looped)
        return [
            ("coop chunks 16384, 16 warps, any dtype",
             dict(coop_block=16384, coop_warps=16, coop_min_in_bytes=1)),
            ("looped, 1 program per SM", dict(coop_max_chunks=0)),
            ("coop chunks 8192, 8 warps, any dtype",
             dict(coop_block=8192, coop_warps=8, coop_min_in_bytes=1)),
            ("coop chunks 4096, 4 warps, any dtype",
             dict(coop_block=4096, coop_warps=4, coop_min_in_bytes=1)),
            ("coop chunks 8192, 16 warps, any dtype",
             dict(coop_block=8192, coop_warps=16, coop_min_in_bytes=1)),
            ("looped, 2 programs per SM", dict(coop_max_chunks=0, loop_programs_per_sm=2.0)),
        ]
    return []


# -- one row ----------------------------------------------------------------------------------

def nbytes_of(op, M, N, dt, extra):
    b = torch.tensor([], dtype=DT[dt]).element_size()
    ob = torch.tensor([], dtype=DT[extra]).element_size() if extra else b
    return M * N * (b + ob)


class Row:
    """Inputs, reference, the callables (table, eager, variants) of one row."""

    def __init__(self, row, device, smoke, seed=0):
        self.op, self.label, self.M, self.N, dt, self.extra = row
        self.dt, self.dtype = dt, DT[dt]
        self.smoke = smoke
        self.device = device
        M, N = self.M, self.N
        g = torch.Generator(device=device).manual_seed(seed)
        self.x = (torch.randn(M, N, generator=g, device=device) * 2 + 0.5).to(self.dtype)
        self.out_dtype = DT[self.extra] if self.extra else self.dtype
        self.out = torch.empty(M, N, dtype=self.out_dtype, device=device)
        self.bytes = nbytes_of(self.op, M, N, dt, self.extra)

    # the op's result(s), as a tuple
    def reference(self):
        return (SK.softmax_reference(self.x, -1, self.out_dtype, self.op == "log"),)

    def kernel(self, fields=None):
        """The launcher: with no fields the table's choice (the launcher's own, except
        under --smoke, where the table's blocks are shrunk), else the table with `fields`
        changed. Returns (fn() -> the written results, the launch it makes)."""
        op, M, N = self.op, self.M, self.N
        own = fields is None and not self.smoke   # the launcher plans for itself
        kw = SMOKE_SOFTMAX if self.smoke else {}
        plan = SK.softmax_plan(M, N, 1, self.x.element_size(),
                               tuning=SK.ROW_TUNING._replace(**(fields or {})), **kw)
        use = None if own else plan
        x, out, log = self.x, self.out, op == "log"

        def fn():
            SK.softmax_triton(x, -1, out, log, plan=use)
            return (out,)
        return fn, plan

    def eager_fn(self):
        dtype = self.out_dtype if self.extra else None
        if self.op == "log":
            def f(x):
                return torch.log_softmax(x, -1, dtype=dtype)
        else:
            def f(x):
                return torch.softmax(x, -1, dtype=dtype)
        return f, (self.x,)

    def results_of(self, fn, args, name):
        """Run `fn(*args)`; the op's results."""
        got = fn(*args)
        return (got,)

    def check(self, got, ref):
        """Largest relative error (norm of the difference over the norm of the reference)
        of the results, and whether every result is within the dtype's tolerance."""
        worst = 0.0
        for g, w in zip(got, ref):
            g, w = g.float(), w.float()
            if not torch.equal(torch.isfinite(g), torch.isfinite(w)):
                return float("inf"), False
            fin = torch.isfinite(w)
            err = ((g - w)[fin].norm() / w[fin].norm().clamp_min(1e-30)).item()
            worst = max(worst, err)
        return worst, worst <= TOL[got[0].dtype]


def bench(fn, smoke):
    """Median milliseconds a call, L2 flushed before each (triton's do_bench)."""
    if smoke:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    from triton.testing import do_bench
    return do_bench(fn, warmup=5, rep=25, return_mode="median")


# -- precompile (Triton's and Inductor's on-disk caches) ---------------------------------------

def _precompile(task):
    """Worker: build the row's inputs, run each named launch once (values do not matter)
    and, if asked, torch.compile the eager function, so that the timing process finds the
    binaries in the on-disk caches."""
    i_row, names, smoke, with_compile = task
    rows = SMOKE_ROWS if smoke else ROWS
    device = "cpu" if smoke else "cuda"
    row = Row(rows[i_row], device, smoke)
    variants = dict(variants_of(row))
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1     # the workers are the parallelism
    done = 0
    for name in names:
        try:
            fn, _ = row.kernel(variants.get(name))
            fn()
            done += 1
        except Exception:  # reported by the timing process
            pass
    if with_compile:
        try:
            f, args = row.eager_fn()
            cf = compile_fn(f, smoke)
            row.results_of(cf, args, "compile")
            done += 1
        except Exception:
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def compile_fn(f, smoke):
    import torch._dynamo
    torch._dynamo.reset()   # every row compiles the same code objects again
    if smoke:
        return torch.compile(f, fullgraph=True, dynamic=False, backend="eager")
    return torch.compile(f, fullgraph=True, dynamic=False)


def variants_of(row):
    return softmax_variants(row.M, row.N, row.x.element_size(), row.smoke)


def precompile(rows_idx, smoke, jobs, timeout_s):
    rows = SMOKE_ROWS if smoke else ROWS
    tasks = []
    for i in rows_idx:
        op, label, M, N, dt, extra = rows[i]
        names = [n for n, _ in softmax_variants(M, N, DT[dt].itemsize, smoke)]
        tasks.append((i, ["table"] + names[:4], smoke, True))
        tasks += [(i, names[k:k + 3], smoke, False) for k in range(4, len(names), 3)]
    # workers still compiling would share the GPU with the timings: stopped
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches and compiles",
              stop_running=True)


# -- main -------------------------------------------------------------------------------------

def describe(cfg):
    if cfg is None:
        return None
    keep = ("kind", "block", "num_warps", "grid", "rows", "tiles", "chunks", "vec")
    return {k: getattr(cfg, k) for k in keep}


def main() -> None:
    ap = sweep_parser(__doc__, jobs=14,
                      rows_help='only rows whose label (or op) contains one of these')
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    rows = SMOKE_ROWS if smoke else ROWS
    idx = list(range(len(rows)))
    if args.rows:
        idx = [i for i in idx if any(s in rows[i][1] or s == rows[i][0] for s in args.rows)]
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1     # no compile pool to start: the caches are warm
    t_start = time.perf_counter()
    if args.jobs > 0 and idx:
        precompile(idx[:1] if smoke else idx, smoke, 1 if smoke else args.jobs,
                   0.45 * args.budget_s)
    results = []
    for k, i in enumerate(idx):
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = left / (len(idx) - k)
        row_start = time.perf_counter()
        try:
            row = Row(rows[i], device, smoke)
        except Exception as e:  # noqa: BLE001  (out of memory, ...)
            print(f"\n== {rows[i][1]}: could not build the row: {e}", flush=True)
            continue
        ref = row.reference()
        print(f"\n== {row.op} {row.label}: [{row.M}, {row.N}] {row.dtype}  "
              f"({row.bytes / 1e6:.0f} MB moved)  budget {allot:.1f} s", flush=True)
        entries = []

        def record(name, fn, cfg, fields, results_fn):
            """Check once, then time; `results_fn()` gives the results of one fresh call."""
            try:
                got = results_fn()
                err, ok = row.check(got, ref)
                del got
                ms = bench(fn, smoke)
            except Exception as e:  # noqa: BLE001  (a variant that does not build or launch)
                print(f"  {name:44s} ERROR {type(e).__name__}: {str(e)[:160]}", flush=True)
                entries.append(dict(name=name, fields=fields, config=describe(cfg),
                                    error=f"{type(e).__name__}: {e}"[:500]))
                return
            e = dict(name=name, fields=fields, config=describe(cfg), ms=ms, us=ms * 1e3,
                     tbps=row.bytes / ms / 1e9, rel_err=err, ok=ok)
            entries.append(e)
            line = f"  {name:44s} {e['us']:9.1f} us {e['tbps']:6.2f} TB/s"
            for base in ("eager", "compile"):
                b = next((x for x in entries if x["name"] == base and "ms" in x), None)
                if b is not None and name not in ("eager", "compile"):
                    line += f"  x{b['ms'] / ms:5.2f} vs {base}"
            print(line + f"  err {err:.1e}{'' if ok else '  WRONG'}", flush=True)

        def kernel_results(fn):
            def results():
                return tuple(t.clone() for t in fn())
            return results

        f, fargs = row.eager_fn()
        record("eager", lambda: f(*fargs), None, None,
               lambda: row.results_of(f, fargs, "eager"))
        try:
            t0 = time.perf_counter()
            cf_ = compile_fn(f, smoke)
            got = row.results_of(cf_, fargs, "compile")   # compiles here
            print(f"  (torch.compile: {time.perf_counter() - t0:.1f} s)", flush=True)
            del got
            record("compile", lambda: cf_(*fargs), None, None,
                   lambda: row.results_of(cf_, fargs, "compile"))
        except Exception as e:  # noqa: BLE001
            print(f"  compile                                      FAILED "
                  f"{type(e).__name__}: {str(e)[:200]}", flush=True)
            entries.append(dict(name="compile", error=f"{type(e).__name__}: {e}"[:500]))
        fn, cfg = row.kernel()
        print(f"  table's launch: {describe(cfg)}", flush=True)
        record("table", fn, cfg, {}, kernel_results(fn))
        table_cfg = describe(cfg)
        seen = {repr(table_cfg)}
        skipped = 0
        for name, fields in variants_of(row):
            if time.perf_counter() - row_start > allot:
                skipped += 1
                continue
            try:
                fn, cfg = row.kernel(fields)
            except Exception as e:  # noqa: BLE001
                print(f"  {name:44s} ERROR (plan) {type(e).__name__}: {str(e)[:160]}",
                      flush=True)
                entries.append(dict(name=name, fields=fields, error=str(e)[:500]))
                continue
            key = repr(describe(cfg))
            if key in seen:     # the same launch as one already timed
                continue
            seen.add(key)
            record(name, fn, cfg, fields, kernel_results(fn))
        if skipped:
            print(f"  ({skipped} variants skipped: the row's share of the budget, "
                  f"{allot:.1f} s, was spent)", flush=True)
        ours = [e for e in entries if "ms" in e and e["ok"] and e.get("fields") is not None]
        best = min(ours, key=lambda e: e["ms"]) if ours else None
        wrong = [e["name"] for e in entries if "ms" in e and not e["ok"]]
        if best:
            tab = next((e for e in entries if e["name"] == "table" and "ms" in e), None)
            base = {b: next((e["ms"] for e in entries if e["name"] == b and "ms" in e), None)
                    for b in ("eager", "compile")}
            ratio = lambda ms: f"{ms / best['ms']:.2f}" if ms else "n/a"  # noqa: E731
            print(f"  BEST {best['name']}: {best['us']:.1f} us, {best['tbps']:.2f} TB/s; "
                  f"x{ratio(tab and tab['ms'])} vs table, x{ratio(base['eager'])} vs eager, "
                  f"x{ratio(base['compile'])} vs compile; fields {best['fields']}", flush=True)
        if wrong:
            print(f"  WRONG (never best): {', '.join(wrong)}", flush=True)
        results.append(dict(op=row.op, label=row.label, M=row.M, N=row.N,
                            dtype=str(row.dtype).replace("torch.", ""), bytes=row.bytes,
                            table=table_cfg, entries=entries,
                            best=best and best["name"], best_fields=best and best["fields"],
                            wrong=wrong, seconds=time.perf_counter() - row_start))
        row = ref = None    # free the row's tensors (the closures above hold the names)
        if not smoke:
            torch.cuda.empty_cache()

    print(f"\nsummary ({time.perf_counter() - t_start:.0f} s): best per row "
          f"(fields: the change to ROW_TUNING)")
    for r in results:
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        tab = next((e for e in r["entries"] if e["name"] == "table" and "ms" in e), None)
        if b:
            print(f"  {r['op']:7s} {r['label']:42s} {b['tbps']:5.2f} TB/s "
                  f"(table {tab['tbps'] if tab else float('nan'):5.2f})  {r['best']}  "
                  f"{r['best_fields']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__,
                           budget_s=args.budget_s, rows_tuning=SK.ROW_TUNING._asdict(),
                           rows=results), f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
