"""Proving a whole manifest: elaborate, prove each spec (in processes), cache, collect.

`prove_manifest` is what `opspec prove` runs. Each spec is proven independently, so specs
go to worker processes (one Z3 context each); a worker that crashes is reported against
its spec, and the others are still checked. Results are cached on disk by a key that
covers the spec's content, the types file, the opspec version and the z3 version.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import pickle
import tempfile
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import z3

from opspec import __version__
from opspec.schema.diagnostics import Diagnostic, Severity
from opspec.schema.elaborate import elaborate, elaborate_adts
from opspec.schema.loader import LoadedSpec, Manifest
from opspec.schema.settings import cache_root
from opspec.solver.manifest_checks import stage_op_diagnostics
from opspec.solver.prove import (PROVEN, REFUTED, UNKNOWN, SpecResult, json_keys, prove_spec,
                                 verdict_of)
from opspec.solver.z3env import DEFAULT_RLIMIT, fresh_context


@dataclass
class ProofReport:
    specs: list[SpecResult] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)   # not tied to one spec
    seconds: float = 0.0

    @property
    def all_diagnostics(self) -> list[Diagnostic]:
        out = list(self.diagnostics)
        for s in self.specs:
            out.extend(s.diagnostics)
        return out

    def summary(self) -> dict[str, Any]:
        diags = self.all_diagnostics
        return {
            "specs": len(self.specs),
            "proven": sum(s.verdict == PROVEN for s in self.specs),
            "refuted": sum(s.verdict == REFUTED for s in self.specs),
            "unknown": sum(s.verdict == UNKNOWN for s in self.specs),
            "errors": sum(d.severity is Severity.ERROR for d in diags),
            "warnings": sum(d.severity is Severity.WARNING for d in diags),
            "seconds": round(self.seconds, 3),
        }

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.all_diagnostics)


class ProofCache:
    """Results on disk, one file per key; writes go to a temporary file and are renamed.

    A result and its Plan are kept apart (`<key>.pickle`, `<key>.plan.pickle`): a re-run of
    `opspec prove` reads only verdicts and diagnostics; the runtime and `explain` read plans.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _read(self, name: str) -> Any:
        try:
            with open(self.root / name, "rb") as f:
                return pickle.load(f)
        except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError):
            return None

    def _write(self, name: str, value: Any) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f)
            os.replace(tmp, self.root / name)
        except OSError:
            pass  # a cache that cannot be written only costs time

    def get(self, key: str, *, plan: bool = False) -> SpecResult | None:
        result = self._read(f"{key}.pickle")
        if result is None or not plan:
            return result
        p = self._read(f"{key}.plan.pickle")
        if p is None:
            return None
        result.plan = p
        return result

    def put(self, key: str, result: SpecResult) -> None:
        from dataclasses import replace

        if result.plan is not None:
            self._write(f"{key}.plan.pickle", replace(result.plan, spec=None))
        self._write(f"{key}.pickle", replace(result, plan=None))


def default_cache_dir() -> Path:
    return cache_root() / "proofs"


def _code_fingerprint() -> str:
    """A hash of the prover's own source, so a changed prover never reuses old verdicts."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for sub in ("schema", "solver"):
        for f in sorted((root / sub).glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


_FINGERPRINT: str | None = None


def cache_key(loaded: LoadedSpec, types_raw: Any, rlimit: int) -> str:
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = _code_fingerprint()
    # json_keys: a spec mixing key types (`1:` beside `x:`) made this dumps raise.
    blob = json.dumps({"spec": json_keys(loaded.raw), "name": loaded.name, "file": loaded.file,
                       "where": _positions(loaded),
                       "types": types_raw, "opspec": __version__, "z3": z3.get_version_string(),
                       "code": _FINGERPRINT,
                       "rlimit": rlimit, "broken": sorted(loaded.broken)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _positions(loaded: LoadedSpec) -> str:
    """A digest of where each part of the spec is written: diagnostics carry `file:line:col`,
    and a cached result replayed them at the old lines after a comment was added above."""
    prefix, n = loaded.path_prefix, len(loaded.path_prefix)
    h = hashlib.sha256()
    for table in (loaded.source.values, loaded.source.keys):
        for path in sorted((p for p in table if p[:n] == prefix), key=repr):
            pos = table[path]
            h.update(f"{path!r}:{pos.line}:{pos.column};".encode())
    return h.hexdigest()[:16]


def _types_raw(manifest: Manifest) -> Any:
    return manifest.types.model_dump(mode="json")


#: Held while a spec is proven. `fresh_context` swaps z3py's process-wide default context,
#: so two threads proving at once (prove_manifest called from threads, or op classes first
#: used from several threads) made terms in each other's contexts: wrong verdicts or a
#: segfault. One proof at a time per process; processes (`jobs`) still run side by side.
_PROVING = threading.Lock()


def _fresh_lock_after_fork() -> None:
    # A worker forked while another thread of the parent was proving inherits the lock held.
    global _PROVING
    _PROVING = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_after_fork)


def _prove_one(loaded: LoadedSpec, manifest_types: Any, adt_defs: Any, rlimit: int) -> SpecResult:
    # Each spec in a fresh Z3 context: models then depend on the spec alone, never on what
    # was proven before it in the same process.
    try:
        with _PROVING, fresh_context():
            return _prove_in_context(loaded, adt_defs, rlimit)
    except Exception as exc:
        # Reported here, in the worker: an exception that cannot be pickled back to the
        # parent (one whose __init__ takes other arguments than its args) broke the whole
        # process pool, and was then reported as a dead worker.
        return _crashed(loaded, exc)


def _prove_in_context(loaded: LoadedSpec, adt_defs: Any, rlimit: int) -> SpecResult:
    adts, _ = elaborate_adts(adt_defs)
    start = time.perf_counter()
    spec, diags = elaborate(loaded, adts)
    if spec is None:
        return SpecResult(loaded.name, loaded.file, "?", REFUTED if diags else PROVEN, diags,
                          seconds=time.perf_counter() - start)
    result = prove_spec(spec, loaded, rlimit=rlimit)
    result.diagnostics = diags + result.diagnostics
    result.verdict = verdict_of(result.diagnostics)
    result.seconds = time.perf_counter() - start
    return result


def prove_manifest(manifest: Manifest, *, ops: Iterable[str] | None = None, jobs: int = 1,
                   cache: ProofCache | None = None, rlimit: int = DEFAULT_RLIMIT,
                   progress: Callable[[int, int, SpecResult], None] | None = None,
                   plans: bool = False, across_specs: bool = True) -> ProofReport:
    """Prove the specs of a manifest; `plans=True` when the caller reads each result's
    Plan (a cached result without its plan is then proven again). `across_specs=False`
    leaves out the checks across specs (`manifest_checks`): the runtime proves one spec
    of a manifest at a time, for its plan."""
    start = time.perf_counter()
    report = ProofReport()
    report.diagnostics.extend(manifest.diagnostics)
    adts, adt_diags = elaborate_adts(manifest.adts, manifest.adt_pos)
    report.diagnostics.extend(adt_diags)
    wanted = set(ops) if ops else None
    specs = [s for s in manifest.specs.values() if wanted is None or s.name in wanted]
    if wanted:
        missing = sorted(wanted - {s.name for s in specs})
        for m in missing:
            report.diagnostics.append(Diagnostic("name", f"no spec named {m} in the manifest",
                                                 op=m))
    types_raw = _types_raw(manifest)
    # Diagnostics the loader attached to a spec travel with that spec's result, and so do
    # those of the checks across specs (not cached: they read the other specs).
    by_op: dict[str, list[Diagnostic]] = {}
    chosen = {s.name for s in specs}
    if across_specs:
        report.diagnostics.extend(stage_op_diagnostics(manifest, specs))
    for d in list(report.diagnostics):
        if d.op in chosen:
            by_op.setdefault(d.op, []).append(d)
            report.diagnostics.remove(d)
        elif d.op in manifest.specs and wanted is not None and not d.is_error:
            report.diagnostics.remove(d)  # another spec's notes; its errors still show

    results: dict[str, SpecResult] = {}
    todo: list[LoadedSpec] = []
    keys: dict[str, str] = {}
    for s in specs:
        key = cache_key(s, types_raw, rlimit)
        keys[s.name] = key
        hit = cache.get(key, plan=plans) if cache else None
        if hit is not None:
            hit.cached = True
            results[s.name] = hit
        else:
            todo.append(s)

    done = len(results)
    total = len(specs)
    for r in results.values():
        if progress:
            progress(done, total, r)

    def finish(s: LoadedSpec, r: SpecResult) -> None:
        nonlocal done
        results[s.name] = r
        if cache and not any(d.check == "unknown" and "crash" in d.message for d in r.diagnostics):
            cache.put(keys[s.name], r)
        done += 1
        if progress:
            progress(done, total, r)

    if jobs > 1 and len(todo) > 1:
        args = (types_raw, manifest.adts, rlimit)
        # A worker that dies (os._exit, a signal, the OOM killer) breaks the whole pool:
        # every spec still pending got BrokenProcessPool and was reported as crashed, not
        # only the one whose worker died. Those are proven again, each in a pool of its own,
        # so that only a spec whose own worker dies is reported, and it takes no other down.
        suspects = _pooled(todo, args, jobs, finish)
        if suspects:
            _isolated(suspects, args, jobs, finish)
    else:
        for s in todo:
            try:
                r = _prove_one(s, types_raw, manifest.adts, rlimit)
            except Exception as exc:
                r = _crashed(s, exc)
            finish(s, r)

    for s in specs:
        r = results[s.name]
        extra = by_op.get(s.name, [])
        if extra:
            r.diagnostics = extra + [d for d in r.diagnostics if d not in extra]
            r.verdict = verdict_of(r.diagnostics)
        report.specs.append(r)
    report.seconds = time.perf_counter() - start
    return report


def _pooled(todo: list[LoadedSpec], args: tuple, jobs: int,
            finish: Callable[[LoadedSpec, SpecResult], None]) -> list[LoadedSpec]:
    """Prove `todo` in one pool of `jobs` workers; return the specs the pool lost when a
    worker died (in `todo`'s order), unfinished."""
    lost: set[str] = set()
    with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
        futs: dict[cf.Future, LoadedSpec] = {}
        for s in todo:
            try:
                futs[pool.submit(_prove_one, s, *args)] = s
            except BrokenProcessPool:  # a worker died while specs were still being handed out
                lost.add(s.name)
        for fut in cf.as_completed(futs):
            s = futs[fut]
            try:
                r = fut.result()
            except BrokenProcessPool:
                lost.add(s.name)
                continue
            except Exception as exc:  # a worker crash belongs to its spec, not the run
                r = _crashed(s, exc)
            finish(s, r)
    return [s for s in todo if s.name in lost]


def _isolated(todo: list[LoadedSpec], args: tuple, jobs: int,
              finish: Callable[[LoadedSpec, SpecResult], None]) -> None:
    """Prove each spec of `todo` in a single-worker pool of its own, `jobs` at a time: a
    worker that dies now died of its own spec, which is reported as crashed."""
    pending = list(todo)
    running: dict[cf.Future, tuple[LoadedSpec, cf.ProcessPoolExecutor]] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                s = pending.pop(0)
                pool = cf.ProcessPoolExecutor(max_workers=1)
                running[pool.submit(_prove_one, s, *args)] = (s, pool)
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: todo.index(running[f][0])):
                s, pool = running.pop(fut)
                pool.shutdown(wait=True)
                try:
                    r = fut.result()
                except Exception as exc:  # BrokenProcessPool here names this spec's worker
                    r = _crashed(s, exc)
                finish(s, r)
    finally:
        for _, pool in running.values():
            pool.shutdown(wait=False, cancel_futures=True)


def _crashed(s: LoadedSpec, exc: BaseException) -> SpecResult:
    what = (f"its worker process died ({exc})" if isinstance(exc, BrokenProcessPool)
            else f"{type(exc).__name__}: {exc}")
    d = Diagnostic("unknown", f"the prover crashed on this spec: {what}",
                   op=s.name, pos=s.pos(()), severity=Severity.ERROR)
    return SpecResult(s.name, s.file, s.spec.status if s.spec else "?", REFUTED, [d])
