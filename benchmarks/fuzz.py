"""Fuzz the spec pipeline: generated and mutated specs through load → elaborate → prove.

    python benchmarks/fuzz.py -n 100000 [--jobs 8] [--timeout 60] [--seed 0] [--out DIR]

Each seed makes one case (`tests/spec_strategies.random_case`: a valid spec drawn from the
language, mutated with probability `--mutate`). Worker processes run the cases; the parent
gives each case `--timeout` seconds and, past it, kills the worker and starts a new one; a
case that times out twice (the second time in a fresh worker) is a *hang*. A *crash* is any exception out of the pipeline, a diagnostic saying the prover
crashed, or a worker that died. Every crash and hang is saved under `--out` (the spec files,
the seed, the mutations and the traceback); a case is reproduced from its seed alone:

    python benchmarks/fuzz.py --replay SEED

The last line is the summary:

    fuzz: 100000 specs, 0 crashes, 0 hangs in 1234.5 s (81.0 specs/s, 8 jobs); verdicts ...
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _run_seed(seed: int, mutate_p: float, folder: Path) -> dict:
    from spec_strategies import random_case, run_case

    case = random_case(seed, mutate_p)
    try:
        out = run_case(case, folder)
    except BaseException as exc:  # noqa: BLE001 - everything that is not a diagnostic
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"seed": seed, "status": "crash", "error": f"{type(exc).__name__}: {exc}"[:2000],
                "traceback": traceback.format_exc()}
    return {"seed": seed, "status": "ok", "seconds": out.seconds,
            "verdicts": sorted(out.verdicts.values()), "errors": len(out.errors)}


def _worker(conn, mutate_p: float) -> None:
    # Each worker proves in its own folder; the parent only sends seeds.
    folder = Path(tempfile.mkdtemp(prefix="opspec-fuzz-"))
    while True:
        try:
            seed = conn.recv()
        except EOFError:
            return
        if seed is None:
            return
        conn.send(_run_seed(seed, mutate_p, folder))


class _Slot:
    def __init__(self, ctx, mutate_p: float):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, mutate_p), daemon=True)
        self.proc.start()
        child.close()
        self.seed: int | None = None
        self.since = 0.0

    def give(self, seed: int) -> None:
        self.seed, self.since = seed, time.perf_counter()
        self.conn.send(seed)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def save(out: Path, seed: int, kind: str, mutate_p: float, info: dict) -> Path:
    from spec_strategies import random_case

    case = random_case(seed, mutate_p)
    folder = out / f"{kind}-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in case.files().items():
        (folder / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    info = {**info, "seed": seed, "kind": kind, "mutations": case.mutations,
            "mutate_p": mutate_p}
    (folder / "info.json").write_text(json.dumps(info, indent=1))
    return folder


def fuzz(n: int, jobs: int, timeout: float, seed0: int, mutate_p: float, out: Path,
         progress: float = 30.0) -> dict:
    ctx = mp.get_context("spawn")  # no state shared with the parent (z3 contexts, caches)
    slots = [_Slot(ctx, mutate_p) for _ in range(min(jobs, n))]
    pending = iter(range(seed0, seed0 + n))
    retried: set[int] = set()  # seeds given a second chance after a timeout
    counts = collections.Counter()
    verdicts = collections.Counter()
    crashes: list[int] = []
    hangs: list[int] = []
    slow: list[int] = []  # timed out once, then finished in time
    slowest = (0.0, None)
    start = last = time.perf_counter()
    done = 0
    for s in slots:
        seed = next(pending, None)
        if seed is not None:
            s.give(seed)
    while any(s.seed is not None for s in slots):
        active = [s for s in slots if s.seed is not None]
        mp.connection.wait([s.conn for s in active] + [s.proc.sentinel for s in active],
                           timeout=1.0)
        now = time.perf_counter()
        for idx, s in enumerate(slots):
            if s.seed is None:
                continue
            result = None
            if s.conn.poll():
                try:
                    result = s.conn.recv()
                except (EOFError, OSError):
                    result = None
            if result is None and not s.proc.is_alive():
                result = {"seed": s.seed, "status": "crash",
                          "error": f"the worker died (exit code {s.proc.exitcode})"}
            elif result is None and now - s.since > timeout:
                if s.seed not in retried:
                    # A first timeout may be the machine's load: the seed runs once more, in
                    # a fresh worker, before it counts as a hang.
                    seed = s.seed
                    retried.add(seed)
                    s.kill()
                    slots[idx] = s = _Slot(ctx, mutate_p)
                    s.give(seed)
                    continue
                result = {"seed": s.seed, "status": "hang",
                          "error": f"no answer within {timeout} s, twice"}
            if result is None:
                continue
            done += 1
            status = result["status"]
            if result["seed"] in retried and status == "ok":
                slow.append(result["seed"])
            counts[status] += 1
            if status == "ok":
                verdicts.update(result["verdicts"] or ["(no spec)"])
                if result["seconds"] > slowest[0]:
                    slowest = (result["seconds"], result["seed"])
            else:
                (crashes if status == "crash" else hangs).append(result["seed"])
                where = save(out, result["seed"], status, mutate_p, result)
                print(f"{status}: seed {result['seed']}: {result['error'][:300]} -> {where}",
                      flush=True)
                if status == "hang" or not s.proc.is_alive():  # replace the worker
                    s.kill()
                    slots[idx] = s = _Slot(ctx, mutate_p)
            nxt = next(pending, None)
            if nxt is None:
                s.seed = None
            else:
                s.give(nxt)
        if progress and now - last > progress:
            last = now
            el = now - start
            print(f"... {done}/{n} specs, {len(crashes)} crashes, {len(hangs)} hangs, "
                  f"{done / el:.1f} specs/s", flush=True)
    for s in slots:
        try:
            s.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        s.proc.join(timeout=5)
        if s.proc.is_alive():
            s.kill()
    seconds = time.perf_counter() - start
    return {"specs": done, "crashes": len(crashes), "hangs": len(hangs), "seconds": seconds,
            "rate": done / seconds if seconds else 0.0, "jobs": len(slots),
            "verdicts": dict(verdicts), "crash_seeds": crashes, "hang_seeds": hangs,
            "slow_seeds": slow,
            "slowest": {"seconds": round(slowest[0], 2), "seed": slowest[1]}}


def replay(seed: int, mutate_p: float) -> int:
    from spec_strategies import random_case, run_case

    case = random_case(seed, mutate_p)
    print("mutations:", case.mutations)
    for name, text in case.files().items():
        print(f"--- {name}\n{text}")
    folder = Path(tempfile.mkdtemp(prefix="opspec-replay-"))
    out = run_case(case, folder)  # raises on a crash, with the traceback
    print("\n".join(out.diagnostics))
    print(f"verdicts {out.verdicts} in {out.seconds:.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=100_000, help="number of specs (default 100000)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds one spec may take before it counts as a hang (default 60)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--mutate", type=float, default=0.8,
                    help="probability that a generated spec is mutated (default 0.8)")
    ap.add_argument("--out", type=Path, default=Path("fuzz-findings"),
                    help="where crashes and hangs are saved (default ./fuzz-findings)")
    ap.add_argument("--json", type=Path, help="also write the summary as JSON here")
    ap.add_argument("--replay", type=int, metavar="SEED", help="run one seed and print it")
    args = ap.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay, args.mutate)
    res = fuzz(args.n, args.jobs, args.timeout, args.seed, args.mutate, args.out)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    v = ", ".join(f"{k} {c}" for k, c in sorted(res["verdicts"].items()))
    print(f"fuzz: {res['specs']} specs, {res['crashes']} crashes, {res['hangs']} hangs in "
          f"{res['seconds']:.1f} s ({res['rate']:.1f} specs/s, {res['jobs']} jobs); "
          f"verdicts: {v}; slowest {res['slowest']['seconds']} s (seed {res['slowest']['seed']}); "
          f"{len(res['slow_seeds'])} timed out once and passed on a retry")
    return 1 if res["crashes"] or res["hangs"] else 0


if __name__ == "__main__":
    sys.exit(main())
