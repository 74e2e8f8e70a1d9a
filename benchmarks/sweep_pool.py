"""What the sweep scripts share: their common options (:func:`sweep_parser`), the
compile-ahead step (:func:`run_ahead`: compile every candidate in worker processes before
the timings, so that the timing loop finds Triton's and Inductor's caches warm), and the
row loop of the launch-table sweeps (:func:`sweep_rows`, with :func:`bench` and
:func:`compile_fn`), and the side-by-side timing of the probes (:func:`time_beside_copy`).
Not part of the package; imported by the scripts beside it."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import multiprocessing as mp
import statistics
import time
from typing import Any, Callable


def sweep_parser(doc: str, *, jobs: int = 12,
                 rows_help: str = "only rows whose label contains one of these"
                 ) -> argparse.ArgumentParser:
    """A parser with the options every sweep takes (``--budget-s``, ``--json``, ``--rows``,
    ``--smoke``, ``--jobs``, at most ``jobs`` compiling processes by default), described by
    the first paragraph of the script's docstring ``doc``; a script adds its own."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=150.0,
                    help="seconds for the whole run, compiles included")
    ap.add_argument("--json", default=None, help="write every timing to this path")
    ap.add_argument("--rows", nargs="*", default=None, help=rows_help)
    ap.add_argument("--smoke", action="store_true", help="tiny rows through the interpreter (CPU)")
    ap.add_argument("--jobs", type=int, default=min(jobs, os.cpu_count() or 1),
                    help="processes compiling the candidates before the timings (0: none)")
    return ap


def run_ahead(worker: Callable[[Any], int], tasks: list, jobs: int, timeout_s: float, *,
              what: str, stop_running: bool = False) -> None:
    """Run ``worker(task)`` (which returns how many launches or compiles it warmed) for every
    task in ``jobs`` spawned processes, for at most ``timeout_s``: tasks not started by then
    are dropped (the timing loop compiles what they would have). Running tasks are waited
    for, or with ``stop_running`` stopped, so that no worker shares the GPU with the
    timings. Prints how many ``what`` were warmed."""
    t0 = time.perf_counter()
    pool = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"))
    futures = [pool.submit(worker, t) for t in tasks]
    done, pending = cf.wait(futures, timeout=timeout_s)
    for f in pending:
        f.cancel()
    if stop_running and pending:
        procs = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
    else:
        pool.shutdown(wait=True, cancel_futures=True)
    n_ok = sum(f.result() for f in done if f.exception() is None)
    print(f"precompiled {n_ok} {what} in {len(done)}/{len(tasks)} tasks with {jobs} processes "
          f"in {time.perf_counter() - t0:.0f} s", flush=True)


# -- the row loop of the table sweeps (norm_sweep, softmax_sweep) -------------------------------

_TIMER = None


def bench(fn, smoke: bool, samples: int = 30) -> float:
    """Median milliseconds a call of device time, as ``opspec bench`` times it (its
    CudaTimer: L2 flushed before each sample, the device kept busy while the host enqueues
    the call, so a launch path slower than the kernel is not what is timed, as it is with
    triton's do_bench); one timed call under ``smoke`` (the interpreter)."""
    global _TIMER
    if smoke:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    if _TIMER is None:
        import torch

        from opspec.ops.bench_harness import CudaTimer
        _TIMER = CudaTimer(torch.device("cuda"), 256 << 20, lead_us=300.0)
    for _ in range(3):
        fn()
    return statistics.median(_TIMER.samples(fn, samples)) * 1e3


def time_beside_copy(name: str, nbytes: int, fns: dict, ref, out, returning=()) -> None:
    """Time each callable of `fns` (name -> call) as :func:`bench` does, beside a
    device-to-device copy of the same `nbytes` (half read, half written), and print per call
    its us, TB/s, time over the copy's and max error against `ref`: of `out` (which the call
    writes; zeroed first), or of the call's own result for the names in `returning`."""
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = bench(lambda: dst.copy_(src), False)
    print(f"{name}: copy {nbytes / copy_ms / 1e9:.2f} TB/s", flush=True)
    for v, fn in fns.items():
        out.zero_()
        ms = bench(fn, False)
        got = fn() if v in returning else out
        err = (got.float() - ref.float()).abs().max().item()
        print(f"  {v:22s} {ms * 1e3:8.2f} us  {nbytes / ms / 1e9:.2f} TB/s  "
              f"({ms / copy_ms:.3f}x copy time)  max error {err:.3g}", flush=True)


def compile_fn(f, smoke: bool):
    """``torch.compile(f, fullgraph=True)``, Dynamo reset first (every row compiles the same
    code objects again); the "eager" backend under ``smoke``."""
    import torch
    import torch._dynamo
    torch._dynamo.reset()
    if smoke:
        return torch.compile(f, fullgraph=True, dynamic=False, backend="eager")
    return torch.compile(f, fullgraph=True, dynamic=False)


def report_best(kernels: list[dict], base: dict, rate: Callable[[dict], str], *,
                table: dict | None | bool = False, digits: int = 2,
                note: Callable[[dict], str] | None = None) -> tuple[dict | None, list[str]]:
    """Print a row's fastest matching candidate among ``kernels`` (entries with ``name``,
    ``ms``, ``us`` and ``ok``) and the ones whose output was wrong, which are never best;
    return ``(best or None, wrong names)``. The line gives the best's time, ``rate(best)``
    and its speedup over each of ``base``'s ``eager`` and ``compile`` milliseconds (to
    ``digits`` places); with ``table`` (the table's own entry, or None where it has none)
    how the table's choice compares; then ``note(best)``."""
    good = [e for e in kernels if e["ok"]]
    wrong = [e["name"] for e in kernels if not e["ok"]]
    best = min(good, key=lambda e: e["ms"]) if good else None
    if best:
        vs = [f"x{base[k] / best['ms']:.{digits}f} vs {k}" if k in base else f"no {k}"
              for k in ("eager", "compile")]
        line = f"  BEST {best['name']}: {best['us']:.1f} us, {rate(best)}, {', '.join(vs)}"
        if table is not False:
            if table is best:
                line += "; the table's choice is the best"
            elif table and table["ok"]:
                line += f"; the table's choice is x{table['ms'] / best['ms']:.2f} slower"
            else:
                line += "; the table's choice is WRONG or failed"
        if note:
            line += f"; {note(best)}"
        print(line, flush=True)
    else:
        print("  BEST: none (no candidate matched the reference)", flush=True)
    if wrong:
        print(f"  WRONG outputs (never best): {', '.join(wrong)}", flush=True)
    return best, wrong


def sweep_rows(args, rows: list, *, make_row, variants_of, precompile, tuning_note: str,
               json_extra: dict, describe=lambda cfg: cfg, table_of=None,
               widths: tuple[int, int, int] = (44, 7, 42)) -> None:
    """Time every selected row (``args`` from :func:`sweep_parser`; ``rows`` of ``(op,
    label, ...)``): eager, compile, the table's launch and the variants, each checked once
    against the reference before it is timed, within the row's share of the budget; then
    the best of each row, a summary and ``args.json``.

    ``make_row(row, device, smoke)`` builds a row object (``op``, ``label``, ``M``, ``N``,
    ``dtype``, ``bytes``, ``reference()``, ``check(got, ref)``, ``eager_fn()``,
    ``results_of(fn, args, what)``, ``kernel(fields)`` -> ``(fn, launch)``);
    ``variants_of(row)`` its ``(name, fields)``; ``precompile(idx, smoke, jobs, timeout_s)``
    warms the caches first. ``describe(launch)`` is what a launch is printed and compared
    as; ``table_of(row, launch)`` what the results record as the row's table (default:
    ``describe``). ``tuning_note`` names the table the fields change; ``json_extra`` goes
    into the JSON; ``widths``: the name, op and label columns."""
    import torch
    import triton
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    idx = list(range(len(rows)))
    if args.rows:
        idx = [i for i in idx if any(s in rows[i][1] or s == rows[i][0] for s in args.rows)]
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1     # no compile pool to start: the caches are warm
    w_name, w_op, w_label = widths
    table_of = table_of or (lambda row, cfg: describe(cfg))
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
            row = make_row(rows[i], device, smoke)
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
                print(f"  {name:{w_name}s} ERROR {type(e).__name__}: {str(e)[:160]}",
                      flush=True)
                entries.append(dict(name=name, fields=fields, config=describe(cfg),
                                    error=f"{type(e).__name__}: {e}"[:500]))
                return
            e = dict(name=name, fields=fields, config=describe(cfg), ms=ms, us=ms * 1e3,
                     tbps=row.bytes / ms / 1e9, rel_err=err, ok=ok)
            entries.append(e)
            line = f"  {name:{w_name}s} {e['us']:9.1f} us {e['tbps']:6.2f} TB/s"
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
            row.results_of(cf_, fargs, "compile")   # compiles here
            print(f"  (torch.compile: {time.perf_counter() - t0:.1f} s)", flush=True)
            record("compile", lambda: cf_(*fargs), None, None,
                   lambda: row.results_of(cf_, fargs, "compile"))
        except Exception as e:  # noqa: BLE001
            print(f"  {'compile':{w_name}s} FAILED {type(e).__name__}: {str(e)[:200]}",
                  flush=True)
            entries.append(dict(name="compile", error=f"{type(e).__name__}: {e}"[:500]))
        fn, cfg = row.kernel()
        print(f"  table's launch: {describe(cfg)}", flush=True)
        record("table", fn, cfg, {}, kernel_results(fn))
        table = table_of(row, cfg)
        seen = {repr(describe(cfg))}
        skipped = 0
        for name, fields in variants_of(row):
            if time.perf_counter() - row_start > allot:
                skipped += 1
                continue
            try:
                fn, cfg = row.kernel(fields)
            except Exception as e:  # noqa: BLE001
                print(f"  {name:{w_name}s} ERROR (plan) {type(e).__name__}: {str(e)[:160]}",
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
                            table=table, entries=entries,
                            best=best and best["name"], best_fields=best and best["fields"],
                            wrong=wrong, seconds=time.perf_counter() - row_start))
        row = ref = None    # free the row's tensors (the closures above hold the names)
        if not smoke:
            torch.cuda.empty_cache()

    print(f"\nsummary ({time.perf_counter() - t_start:.0f} s): best per row "
          f"(fields: the change to {tuning_note})")
    for r in results:
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        tab = next((e for e in r["entries"] if e["name"] == "table" and "ms" in e), None)
        if b:
            print(f"  {r['op']:{w_op}s} {r['label']:{w_label}s} {b['tbps']:5.2f} TB/s "
                  f"(table {tab['tbps'] if tab else float('nan'):5.2f})  {r['best']}  "
                  f"{r['best_fields']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__,
                           budget_s=args.budget_s, **json_extra, rows=results),
                      f, indent=1, default=str)
        print(f"wrote {args.json}")
