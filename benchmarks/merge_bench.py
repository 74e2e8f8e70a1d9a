"""Merge the JSON results of several `opspec bench` runs (one per op, from
`benchmarks/bench_ops.sh`) into one result that `benchmarks/make_results.py` renders.

    python benchmarks/merge_bench.py OUT.json IN.json [IN.json ...]

Rows are kept as measured, each with the rates its own run computed against its own
ceilings; a later file's row replaces an earlier one of the same (op, case), keeping the
earlier row's baseline times where the later run did not time that baseline (listed in
the row's `carried`). The merged
meta is the first run's, with `ceilings` the median over the runs, `date` the latest, and
`runs` listing each run's date and ceilings (a merged input contributes the runs it was
merged from), so nothing measured is hidden.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from opspec.ops.bench_report import flush_mode


# The measured ceilings whose median over the runs the merged meta keeps (a run from before
# the float32 ceiling has none: the median is over the runs that do).
_CEILINGS = ("bandwidth_tbps", "compute_tflops", "compute_fp32_tflops")


def merge(results: list[dict]) -> dict:
    if not results:
        raise ValueError("no results to merge")
    formats = {r.get("format") for r in results}
    if len(formats) != 1:
        raise ValueError(f"results of different formats: {sorted(map(str, formats))}")
    # Rows timed after different L2 flushes are not comparable (a dirty L2 charges each
    # sample its write-back): such results are not merged.
    modes = {flush_mode(r["meta"]) for r in results}
    if len(modes) != 1:
        raise ValueError("results timed after different L2 flushes "
                         f"({', '.join(sorted(map(str, modes)))}): re-run them with one "
                         "--flush")
    rows: dict[tuple[str, str], dict] = {}
    for r in results:
        for row in r["rows"]:
            key = (row["op"], row["case"])
            earlier = rows.get(key)
            if earlier is not None:
                row = _carry(row, earlier)
            rows[key] = row
    meta = dict(results[0]["meta"])
    # A merged input brings the runs it was merged from, so a merge of merges keeps every
    # run (and the ceilings' median over all of them), not one entry for the lot.
    runs = [run for r in results for run in (r["meta"].get("runs") or [{
        "ops": r["meta"].get("ops"), "date": r["meta"].get("date"),
        "ceilings": {k: r["meta"]["ceilings"].get(k) for k in _CEILINGS}}])]
    for key in _CEILINGS:
        vals = [r["ceilings"][key] for r in runs if r["ceilings"].get(key)]
        if vals:
            meta["ceilings"] = {**meta["ceilings"], key: statistics.median(vals)}
    # the float32 ceiling's description, from a run that measured it
    for r in results:
        desc = r["meta"]["ceilings"].get("compute_fp32")
        if desc and not meta["ceilings"].get("compute_fp32"):
            meta["ceilings"] = {**meta["ceilings"], "compute_fp32": desc}
    meta["date"] = max(r["date"] for r in runs if r["date"])
    meta["runs"] = runs
    meta["ops"] = sorted({op for r in results for op in r["meta"].get("ops", [])})
    meta["baselines"] = sorted({b for r in results for b in r["meta"].get("baselines", [])})
    meta["unavailable_baselines"] = {k: v for r in results
                                     for k, v in r["meta"].get("unavailable_baselines", {}).items()}
    meta["baseline_descriptions"] = {k: v for r in results
                                     for k, v in r["meta"].get("baseline_descriptions", {}).items()}
    merged_rows = list(rows.values())
    failures = [{"op": r["op"], "case": r["case"], "status": r["status"], "error": r["error"]}
                for r in merged_rows if r["status"] != "ok"]
    return {"format": results[0]["format"], "meta": meta, "rows": merged_rows,
            "summary": {"rows": len(merged_rows),
                        "verified": sum(bool(r["verified"]) for r in merged_rows),
                        "failures": failures}}


def _carry(row: dict, earlier: dict) -> dict:
    """A later row timed against fewer baselines (`--baselines eager`) keeps the earlier
    row's times for the others, listed under `carried`: the same function on the same
    inputs, timed by an earlier run."""
    t_op = (row.get("times_us") or {}).get("opspec")
    missing = [n for n, t in (earlier.get("times_us") or {}).items()
               if n != "opspec" and n not in (row.get("times_us") or {})]
    if not missing or not t_op or row.get("status") != "ok":
        return row
    row = json.loads(json.dumps(row))
    for n in missing:
        t = earlier["times_us"][n]
        row["times_us"][n] = t
        row["speedup"][n] = t / t_op
        row["impls"][n] = {**earlier["impls"].get(n, {}), "carried": True}
    row["carried"] = sorted(missing)
    return row


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    out, *ins = argv
    try:
        results = [json.loads(Path(p).read_text()) for p in ins]
        merged = merge(results)
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"merge_bench: {exc}\n")
        return 2
    Path(out).write_text(json.dumps(merged, indent=1) + "\n")
    print(f"merge_bench: {len(merged['rows'])} rows of {len(merged['meta']['ops'])} ops "
          f"from {len(ins)} files -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
