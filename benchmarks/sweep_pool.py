"""What the sweep scripts share: their common options (:func:`sweep_parser`) and the
compile-ahead step (:func:`run_ahead`: compile every candidate in worker processes before
the timings, so that the timing loop finds Triton's and Inductor's caches warm). Not part
of the package; imported by the scripts beside it."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import multiprocessing as mp
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
