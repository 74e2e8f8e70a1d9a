"""Renderers of an `opspec bench` result: the JSON file, a terminal table, a PNG plot and the
Markdown of `benchmarks/RESULTS.md`. They read only the result dict (`bench_harness.run_bench`,
or its JSON file read back), never an op, and import neither torch nor matplotlib up front.

The result:

    {"format": "opspec-bench/1",
     "meta": {"gpu", "device", "torch", "triton", "date", "timing", "l2_flush_bytes",
              "l2_flush_mode" ("clean" | "dirty"; absent in results from before it: "dirty"),
              "ceilings": {"bandwidth_tbps", "compute_tflops", "bandwidth": {...},
                           "compute": {...}, "compute_fp32_tflops", "compute_fp32": {...}
                           (the float32 product; absent in results from before it)},
              "baselines", "ops", "settings", ...},
     "rows": [{"op", "case", "status", "verified", "error", "max_error", "rel_error",
               "flops", "bytes", "bound", "sol_us", "compute_ceiling" ("compute" or
               "compute_fp32": the ceiling its speed of light used; absent: "compute"),
               "times_us": {"opspec": us, "<baseline>": us, ...},
               "tflops", "tbps", "efficiency", "speedup": {"<baseline>": t_base / t_op},
               "copy_us", "vs_copy": t_copy / t_op (memory-bound rows: a copy of the
               row's roofline bytes, timed beside it; else None; "copy_error" says why
               a memory-bound row has none),
               "impls": {"<name>": {"status", "reason", "median_us", ...}}}],
     "summary": {"rows", "verified", "failures": [...]}}
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

__all__ = [
    "MissingMatplotlib",
    "float32_ceiling",
    "flush_mode",
    "geomean",
    "load_json",
    "op_summaries",
    "plot_png",
    "results_markdown",
    "text_table",
    "write_json",
]

IMPL = "opspec"


class MissingMatplotlib(RuntimeError):
    """matplotlib is needed for the plot and is not installed."""


# -- JSON -------------------------------------------------------------------------------------------

def write_json(result: Mapping[str, Any], path: str | os.PathLike) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(_clean(result), indent=2, allow_nan=False, default=str) + "\n",
                 encoding="utf-8")


def _clean(v: Any) -> Any:
    """NaN and infinities as null (strict JSON); containers walked."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def load_json(path: str | os.PathLike) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "rows" not in data or "meta" not in data:
        raise ValueError(f"{path}: not an opspec bench result (no `meta` and `rows`)")
    return data


# -- numbers ----------------------------------------------------------------------------------------

def flush_mode(meta: Mapping[str, Any]) -> str | None:
    """How a run flushed the L2 before each sample: "clean" (a buffer read), "dirty" (a
    buffer written: runs from before the mode was recorded flushed so) or None (no flush)."""
    if not meta.get("l2_flush_bytes"):
        return None
    return meta.get("l2_flush_mode") or "dirty"


def float32_ceiling(ceilings: Mapping[str, Any]) -> float | None:
    """The float32 compute ceiling (TFLOP/s) where the run measured one beside the compute
    ceiling (CUDA); None where it has none (results from before it) or where the compute
    ceiling is itself the float32 product (the CPU)."""
    value = ceilings.get("compute_fp32_tflops")
    if value is None or ceilings.get("compute_fp32") == ceilings.get("compute"):
        return None
    return value


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the positive values given (None when there are none)."""
    vals = [float(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def baseline_names(result: Mapping[str, Any]) -> list[str]:
    names = list(result.get("meta", {}).get("baselines") or [])
    for r in result["rows"]:
        for n in list(r.get("times_us", {})) + list(r.get("speedup", {})):
            if n != IMPL and n not in names:
                names.append(n)
    # eager and compile first, in that order; others after, as found
    order = {"eager": 0, "compile": 1}
    return sorted(names, key=lambda n: (order.get(n, 2), names.index(n)))


def _ops(result: Mapping[str, Any]) -> list[str]:
    seen: list[str] = []
    for r in result["rows"]:
        if r["op"] not in seen:
            seen.append(r["op"])
    return seen


def op_summaries(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per op (and `overall`): rows, failures, the geometric-mean speedup over each baseline
    (verified rows where both were timed) and the worst verified row (lowest efficiency)."""
    names = baseline_names(result)
    groups: dict[str, list[Mapping[str, Any]]] = {op: [] for op in _ops(result)}
    for r in result["rows"]:
        groups[r["op"]].append(r)
    out: dict[str, dict[str, Any]] = {}
    for key, rows in [*groups.items(), ("overall", list(result["rows"]))]:
        ok = [r for r in rows if r.get("verified") and r.get("times_us", {}).get(IMPL)]
        s: dict[str, Any] = {
            "rows": len(rows),
            "failures": sum(1 for r in rows if r.get("status") != "ok"),
            "geomean_speedup": {n: geomean(r.get("speedup", {}).get(n) for r in ok) for n in names},
            "geomean_efficiency": geomean(r.get("efficiency") for r in ok),
        }
        with_eff = [r for r in ok if r.get("efficiency") is not None]
        s["worst"] = min(with_eff, key=lambda r: r["efficiency"]) if with_eff else None
        out[key] = s
    return out


# -- formatting -------------------------------------------------------------------------------------

def _f(v: Any, fmt: str = "{:.2f}", none: str = "–") -> str:
    if v is None:
        return none
    try:
        return fmt.format(v)
    except (TypeError, ValueError):
        return str(v)


def _us(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}" if v >= 100 else f"{v:.2f}"


def _num(v: Any) -> str:
    """A rate: one decimal from 10 up, three significant digits below."""
    if v is None:
        return "–"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


def _pct(v: Any) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.1f}%" if abs(v) >= 1e-3 else f"{100 * v:.2g}%"


def _x(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}×" if abs(v) >= 0.01 else f"{v:.2g}×"


def _err(v: Any) -> str:
    return _f(v, "{:.2g}")


#: Efficiency above this is physically suspect (reference §6: "anomaly").
ANOMALY = 1.05


def _anomaly(r: Mapping[str, Any]) -> str:
    e = r.get("efficiency")
    return " (!)" if e is not None and e > ANOMALY else ""


def _status(r: Mapping[str, Any]) -> str:
    st = r.get("status", "?")
    return "ok" if st == "ok" else st.upper()


def _has_copy(rows: Iterable[Mapping[str, Any]]) -> bool:
    return any(r.get("vs_copy") is not None for r in rows)


def text_table(result: Mapping[str, Any]) -> str:
    """A plain fixed-width table, one line per row, for the terminal."""
    names = baseline_names(result)
    copy = _has_copy(result["rows"])
    head = (["op", "case", "status", f"{IMPL} us"] + [f"{n} us" for n in names]
            + ["TFLOP/s", "TB/s", "SOL eff"] + (["vs copy"] if copy else [])
            + [f"vs {n}" for n in names])
    lines = []
    for r in result["rows"]:
        t = r.get("times_us", {})
        lines.append([r["op"], r["case"], _status(r), _us(t.get(IMPL))]
                     + [_us(t.get(n)) for n in names]
                     + [_num(r.get("tflops")), _num(r.get("tbps")),
                        _pct(r.get("efficiency"))]
                     + ([_x(r.get("vs_copy"))] if copy else [])
                     + [_x(r.get("speedup", {}).get(n)) for n in names])
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h)
              for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 3 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in lines]
    for r in result["rows"]:
        if r.get("status") != "ok" and r.get("error"):
            out.append(f"{_status(r)}: {r['op']} {r['case']}: {r['error']}")
    return "\n".join(out)


def _ceiling_text(meta: Mapping[str, Any]) -> list[str]:
    c = meta.get("ceilings") or {}
    bw, cp = c.get("bandwidth") or {}, c.get("compute") or {}
    out = []
    if c.get("bandwidth_tbps") is not None:
        out.append(f"bandwidth {_num(c['bandwidth_tbps'])} TB/s ({bw.get('method', 'copy')}"
                   + (f", {bw['bytes_copied'] / 2**20:.0f} MiB copied, bytes read + written"
                      if bw.get("bytes_copied") else "") + ")")
    if c.get("compute_tflops") is not None:
        out.append(f"compute {_num(c['compute_tflops'])} TFLOP/s ({cp.get('method', 'matmul')})")
    fp32 = float32_ceiling(c)
    if fp32 is not None:
        c32 = c.get("compute_fp32") or {}
        out.append(f"float32 compute {_num(fp32)} TFLOP/s "
                   f"({c32.get('method', 'float32 matmul')}; the rows whose floating-point "
                   "inputs are all float32)")
    if c.get("given"):
        out.append("(ceilings given, not measured)")
    return out


def prover_markdown(prove: Mapping[str, Any], source: str | None = None) -> list[str]:
    """The "Prover" section of `benchmarks/RESULTS.md`: one row per `opspec prove --stats`
    run that `benchmarks/prove_stats.py` summarised into `prove`."""
    L = ["## Prover", ""]
    L.append(f"`opspec prove --stats --no-cache`, one process a run, on {prove.get('machine', '?')}"
             f" (Python {prove.get('python', '?')}, z3 {prove.get('z3', '?')}, opspec "
             f"{prove.get('opspec', '?')}), {prove.get('date', '?')}"
             + (f"; from `{source}`" if source else "") + ".")
    L += ["", "| run | specs | proven | refuted | unknown | errors | warnings | wall s | "
          "prover s (sum) | slowest specs |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in prove.get("runs", []):
        if r.get("skipped"):
            L.append(f"| {r['label']} ({r['target']}) | skipped: {r['skipped']} |"
                     + " |" * 8)
            continue
        s = r["summary"]
        slow = ", ".join(f"{t['op']} {t['seconds']:.2f}" for t in r.get("slowest", []))
        L.append(f"| {r['label']} ({r['target']}) | {s['specs']} | {s['proven']} | "
                 f"{s['refuted']} | {s['unknown']} | {s['errors']} | {s['warnings']} | "
                 f"{r['wall_seconds']:.2f} | {r['total_seconds']:.2f} | {slow or '–'} |")
    L.append("")
    return L


def results_markdown(result: Mapping[str, Any], plot: str | None = None,
                     source: str | None = None, prove: Mapping[str, Any] | None = None,
                     prove_source: str | None = None) -> str:
    """The Markdown of `benchmarks/RESULTS.md` (`plot`: the PNG's path relative to it;
    `prove`: the prover benchmark's summary, a section after the summary table)."""
    meta = result["meta"]
    names = baseline_names(result)
    summ = op_summaries(result)
    L: list[str] = ["# opspec benchmark results", ""]
    if source:
        L += [f"Generated by `benchmarks/make_results.py` from `{source}`; do not edit by hand.", ""]
    L += [f"- **device**: {meta.get('gpu') or meta.get('device', '?')} (`{meta.get('device', '?')}`)",
          f"- **torch** {meta.get('torch', '?')}, **Triton** {meta.get('triton') or '–'}, "
          f"**Python** {meta.get('python', '?')}, **opspec** {meta.get('opspec', '?')}",
          f"- **date**: {meta.get('date', '?')}",
          f"- **timing**: {meta.get('timing', '?')}"
          + (f", L2 flushed before every sample ({meta['l2_flush_bytes'] // 2**20} MiB "
             + ("read: the L2 left holding clean lines" if flush_mode(meta) == "clean" else
                "written: the L2 left full of dirty lines, whose write-back each sample pays")
             + ")" if meta.get("l2_flush_bytes") else ", no cache flush")
          + (f", the device kept busy {meta['lead_cycles']:,} cycles before each sample while "
             "the host enqueues the call" if meta.get("lead_cycles") else "")
          + "; median of all samples, passes interleaved A B C C B A",
          ("- **ceilings** (measured in the same run): " if not meta.get("runs") else
           f"- **ceilings** (median over {len(meta['runs'])} runs, one per op; each row's rates "
           "use its own run's ceilings): ") + ("; ".join(_ceiling_text(meta)) or "–"),
          "- SOL time = max(bytes / bandwidth, flops / compute), flops and bytes from "
          "`op.eval_roofline()`; efficiency = SOL time / measured time; speedup = baseline time "
          f"/ {IMPL} time (> 1: {IMPL} is faster)."]
    if _has_copy(result["rows"]):
        L.append(f"- vs copy (memory-bound rows): the time of a device-to-device copy of the "
                 f"row's roofline bytes (half read, half written), timed beside it, / {IMPL} "
                 "time: 1.00× runs at the rate a copy of that size reaches, which for small "
                 "rows is under the bandwidth ceiling above. Rows timed before it was "
                 "measured show –.")
    for name, why in (meta.get("unavailable_baselines") or {}).items():
        L.append(f"- baseline `{name}` not run: {why}")
    L.append("")
    if plot:
        L += [f"![efficiency and speedup per case]({plot})", ""]

    L += ["## Summary", "",
          "| op | cases | failures | geomean efficiency | "
          + " | ".join(f"geomean vs {n}" for n in names) + " |",
          "|---|---:|---:|---:|" + "---:|" * len(names)]
    for key in [*_ops(result), "overall"]:
        s = summ[key]
        label = "**overall**" if key == "overall" else key
        L.append(f"| {label} | {s['rows']} | {s['failures']} | {_pct(s['geomean_efficiency'])} | "
                 + " | ".join(_x(s["geomean_speedup"][n]) for n in names) + " |")
    L.append("")
    if prove is not None:
        L += prover_markdown(prove, prove_source)

    descriptions = meta.get("baseline_descriptions") or {}
    all_names = names
    for op in _ops(result):
        rows = [r for r in result["rows"] if r["op"] == op]
        # an op's table shows the baselines timed for it
        names = [n for n in all_names if any(n in (r.get("times_us") or {}) for r in rows)]
        L += [f"## {op}", ""]
        desc = descriptions.get(op) or {}
        if desc:
            L += ["Baselines: " + "; ".join(f"`{n}` = {d}" for n, d in desc.items()) + ".", ""]
        copy = _has_copy(rows)
        L += [
              "| case | verified | max error | rel error | "
              + f"{IMPL} µs | " + " | ".join(f"{n} µs" for n in names)
              + " | TFLOP/s | TB/s | SOL µs | bound | efficiency | "
              + ("vs copy | " if copy else "")
              + " | ".join(f"vs {n}" for n in names) + " |",
              "|---|---|---:|---:|---:|" + "---:|" * len(names) + "---:|---:|---:|---|---:|"
              + ("---:|" if copy else "") + "---:|" * len(names)]
        for r in rows:
            t = r.get("times_us", {})
            ver = "yes" if r.get("verified") else f"**{r.get('status', 'no').upper()}**"
            L.append(f"| {r['case']} | {ver} | {_err(r.get('max_error'))} | "
                     f"{_err(r.get('rel_error'))} | {_us(t.get(IMPL))} | "
                     + " | ".join(_us(t.get(n)) for n in names)
                     + f" | {_num(r.get('tflops'))} | {_num(r.get('tbps'))} | "
                     f"{_us(r.get('sol_us'))} | {r.get('bound') or '–'} | "
                     f"{_pct(r.get('efficiency'))}{_anomaly(r)} | "
                     + (f"{_x(r.get('vs_copy'))} | " if copy else "")
                     + " | ".join(_x(r.get("speedup", {}).get(n)) for n in names) + " |")
        s = summ[op]
        L.append("")
        L.append("Geometric-mean speedup: " + ", ".join(
            f"{_x(s['geomean_speedup'][n])} over {n}" for n in names) + ".")
        w = s["worst"]
        if w is not None:
            L.append(f"Worst row (lowest efficiency): `{w['case']}`, {_pct(w['efficiency'])} of SOL "
                     f"({_us(w['times_us'].get(IMPL))} µs against {_us(w.get('sol_us'))} µs, "
                     f"{w.get('bound') or '?'}-bound)"
                     + ("".join(f", {_x(w.get('speedup', {}).get(n))} vs {n}" for n in names)) + ".")
        if any(_anomaly(r) for r in rows):
            L.append(f"(!) efficiency above {ANOMALY:.0%}: faster than the measured ceilings. "
                     "The bandwidth ceiling is a copy (half its bytes read, half written), "
                     "which a call that mostly reads can outrun (reads alone reached about "
                     "4.5 TB/s on an H200, a copy 4.2); otherwise the roofline formula or a "
                     "ceiling is suspect.")
        fails = [r for r in rows if r.get("status") != "ok"]
        for r in fails:
            L.append(f"- **{r.get('status', '?').upper()}** `{r['case']}`: {r.get('error') or ''}")
        L.append("")
    return "\n".join(L).rstrip() + "\n"


# -- the plot ---------------------------------------------------------------------------------------

def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MissingMatplotlib(
            "the plot needs matplotlib, which is not installed here "
            "(pip install matplotlib, or leave out --plot)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_png(result: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Efficiency (% of SOL) and speedup over each baseline, one horizontal bar group per
    op/case; failed rows are labelled as such and drawn empty."""
    plt = _pyplot()
    rows = list(result["rows"])
    names = baseline_names(result)
    labels = [f"{r['op'].removesuffix('Op')} · {r['case']}"
              + ("" if r.get("status") == "ok" else f"  [{r.get('status', '?').upper()}]")
              for r in rows]
    n = max(1, len(rows))
    height = max(3.0, 0.42 * n * max(1, len(names)) ** 0.5 + 1.6)
    fig, (ax_e, ax_s) = plt.subplots(1, 2, figsize=(15, height), sharey=True,
                                     gridspec_kw={"width_ratios": [1, 1.3]})
    ys = list(range(n))[::-1]
    eff = [100 * (r.get("efficiency") or 0) for r in rows]
    colors = ["#2b8a3e" if e >= 80 else "#e8a33d" if e >= 50 else "#c92a2a" for e in eff]
    ax_e.barh(ys, eff, color=colors, height=0.7)
    for y, e, r in zip(ys, eff, rows):
        if r.get("efficiency") is not None:
            ax_e.text(e + 1, y, f"{e:.0f}%", va="center", fontsize=8)
    for y, r in zip(ys, rows):
        if r.get("efficiency") is None:
            why = "not timed" if r.get("status") == "ok" else f"{r.get('status', '?')}: not timed"
            ax_e.text(1, y, why, va="center", fontsize=8, color="#c92a2a")
    ax_e.axvline(100, color="black", lw=0.8, ls="--")
    ax_e.set_xlim(0, max(110, max(eff, default=0) + 12))
    ax_e.set_xlabel("efficiency: SOL time / measured time (%)\n"
                    "green >= 80%, orange >= 50%, red < 50%")
    ax_e.set_yticks(ys)
    ax_e.set_yticklabels(labels, fontsize=8)
    ax_e.set_title(f"{IMPL}: share of the speed of light")

    k = max(1, len(names))
    bar_h = 0.8 / k
    palette = ["#1c7ed6", "#ae3ec9", "#f08c00", "#0ca678", "#868e96"]
    all_s = []
    for j, name in enumerate(names):
        sp = [r.get("speedup", {}).get(name) for r in rows]
        off = (k - 1) / 2 * bar_h - j * bar_h
        vals = [s if s else 0 for s in sp]
        all_s += [s for s in sp if s]
        ax_s.barh([y + off for y in ys], vals, height=bar_h, label=f"vs {name}",
                  color=palette[j % len(palette)])
        for y, s in zip(ys, sp):
            if s:
                ax_s.text(s, y + off, " " + _x(s), va="center", fontsize=7)
    ax_s.axvline(1.0, color="black", lw=0.8, ls="--")
    top, low = max(all_s, default=1.0), min(all_s, default=1.0)
    if top / low > 20:  # widely spread ratios: a log axis keeps the small ones visible
        ax_s.set_xscale("log")
        ax_s.set_xlim(low / 1.5, top * 2)
    else:
        ax_s.set_xlim(0, max(1.5, top * 1.2))
    ax_s.set_xlabel(f"speedup: baseline time / {IMPL} time (> 1: {IMPL} faster)")
    ax_s.set_title("speedup over each baseline")
    if names:
        ax_s.legend(loc="lower right", fontsize=8)
    meta = result.get("meta", {})
    fig.suptitle(f"opspec bench on {meta.get('gpu') or meta.get('device', '?')} "
                 f"(torch {meta.get('torch', '?')}, Triton {meta.get('triton') or '–'}, "
                 f"{meta.get('date', '')[:10]})", fontsize=10)
    fig.tight_layout()
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    plt.close(fig)


def relpath_for_link(target: str | os.PathLike, from_file: str | os.PathLike) -> str:
    """`target` relative to the folder of `from_file`, with forward slashes (a Markdown link)."""
    return Path(os.path.relpath(Path(target).resolve(), Path(from_file).resolve().parent)).as_posix()


def failures_text(result: Mapping[str, Any]) -> Sequence[str]:
    return [f"{f['op']} {f['case']}: {f['status']}: {f.get('error') or ''}"
            for f in result.get("summary", {}).get("failures", [])]
