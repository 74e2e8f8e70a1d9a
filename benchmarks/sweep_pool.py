"""The compile-ahead step the sweep scripts share: compile every candidate in worker
processes before the timings, so that the timing loop finds Triton's and Inductor's caches
warm. Not part of the package; imported by the scripts beside it."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from typing import Any, Callable


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
