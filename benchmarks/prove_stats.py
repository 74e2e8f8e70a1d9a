"""The prover benchmark: `opspec prove --stats --no-cache` on the bundled manifest and on the
conformance corpus (`../shared/corpus/tileops` beside the checkout, where present), each in a
fresh process, summarised into one JSON file for `benchmarks/make_results.py --prove`.

    python benchmarks/prove_stats.py [--json PATH] [--corpus DIR]

The JSON keeps, per run, the target, the prover's summary (specs, proven, refuted, unknown,
errors, warnings), its wall and summed per-spec seconds and its five slowest specs (name and
seconds), with the machine and the versions; not the specs' diagnostics. A run whose target is
missing is recorded as skipped. Exit status: 0 written, 1 a run failed (its stderr is shown).
Not part of the package.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "prove.json"
DEFAULT_CORPUS = HERE.parent.parent / "shared" / "corpus" / "tileops"
SLOWEST = 5


def run(label: str, target: Path | None) -> dict:
    """One `opspec prove` run in a fresh process, summarised."""
    cmd = [sys.executable, "-m", "opspec.cli", "prove", "--stats", "--format", "json", "--no-cache"]
    if target is not None:
        cmd.insert(4, str(target))
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode not in (0, 1):   # 1: the prover found errors, still a result
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-2000:]}")
    out = json.loads(res.stdout)
    stats = out["stats"]
    return {"label": label, "target": "bundled manifest" if target is None else target.name,
            "summary": out["summary"],
            "wall_seconds": stats["wall_seconds"], "total_seconds": stats["total_seconds"],
            "slowest": [{"op": t["op"], "seconds": t["seconds"]} for t in stats["top"][:SLOWEST]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(DEFAULT_JSON), help=f"output (default {DEFAULT_JSON.name})")
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the corpus directory")
    args = ap.parse_args(argv)
    import z3

    import opspec
    runs = []
    for label, target in (("bundled", None), ("corpus", Path(args.corpus))):
        if target is not None and not target.is_dir():
            runs.append({"label": label, "target": target.name, "skipped": "not present"})
            print(f"{label}: skipped ({target} not present)")
            continue
        try:
            r = run(label, target)
        except RuntimeError as exc:
            sys.stderr.write(f"prove_stats: {exc}\n")
            return 1
        runs.append(r)
        s = r["summary"]
        print(f"{label}: {s['specs']} specs, {s['proven']} proven, {s['errors']} errors, "
              f"{r['wall_seconds']:.2f} s wall")
    doc = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
           "python": platform.python_version(), "z3": z3.get_version_string(),
           "opspec": getattr(opspec, "__version__", "?"),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "runs": runs}
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
