"""The one reporter: a proof report (or a load-only result) as text, JSON, SARIF or JUnit.

A report is anything shaped like `opspec.solver.run.ProofReport`: `specs` (each with `op`,
`file`, `status`, `verdict`, `diagnostics` and, after a proof, `combinations`, `seconds`,
`cached`), `diagnostics` not tied to one spec, and `seconds`. `load_report` builds the
load-only kind from a `Manifest`, so this module never needs the prover.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from opspec import __version__
from opspec.schema.diagnostics import CHECK_IDS, Diagnostic, Severity
from opspec.schema.loader import Manifest

from .checks import example, meaning

FORMATS = ("text", "json", "sarif", "junit")
LOADED = "loaded"
VERDICTS = ("proven", "refuted", "unknown")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.ADVISORY: "note"}


# -- the load-only result -----------------------------------------------------------------

@dataclass
class LoadedRow:
    op: str
    file: str
    status: str
    family: str | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    verdict: str = LOADED


@dataclass
class LoadReport:
    specs: list[LoadedRow] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    seconds: float = 0.0


def load_report(manifest: Manifest, seconds: float = 0.0) -> LoadReport:
    """Every spec of `manifest` as `loaded`, with the diagnostics that name it; the rest
    (the types file, unreadable files) at top level."""
    rows = {name: LoadedRow(name, s.file, s.spec.status if s.spec else "?",
                            s.spec.family if s.spec else None)
            for name, s in manifest.specs.items()}
    report = LoadReport(list(rows.values()), seconds=seconds)
    for d in manifest.diagnostics:
        (rows[d.op].diagnostics if d.op in rows else report.diagnostics).append(d)
    return report


# -- shared pieces --------------------------------------------------------------------------

def all_diagnostics(report: Any) -> list[Diagnostic]:
    out = list(report.diagnostics)
    for s in report.specs:
        out.extend(s.diagnostics)
    return out


def exit_code(report: Any) -> int:
    """0 when no diagnostic is an error, else 1."""
    return 1 if any(d.is_error for d in all_diagnostics(report)) else 0


def summary(report: Any) -> dict[str, Any]:
    diags = all_diagnostics(report)
    out: dict[str, Any] = {"specs": len(report.specs)}
    for v in VERDICTS:
        out[v] = sum(s.verdict == v for s in report.specs)
    out["errors"] = sum(d.severity is Severity.ERROR for d in diags)
    out["warnings"] = sum(d.severity is Severity.WARNING for d in diags)
    out["seconds"] = round(report.seconds, 3)
    return out


def display_path(file: str, cwd: Path | None = None) -> str:
    """`file` relative to the working directory when it lies under it."""
    try:
        rel = Path(file).resolve().relative_to((cwd or Path.cwd()).resolve())
    except (ValueError, OSError):
        return file
    return rel.as_posix()


def render(report: Any, fmt: str, *, stats: bool = False) -> str:
    """The report as a document of format `fmt`; `stats` adds the per-spec timings (a
    table after the text, a `stats` key in JSON; SARIF and JUnit have no place for them)."""
    if fmt == "text":
        text = render_text(report)
        return text + "\n\n" + stats_table(report) if stats else text
    if fmt == "json":
        doc = to_json(report)
        if stats:
            doc["stats"] = stats_json(report)
        return json.dumps(doc, indent=2)
    if fmt == "sarif":
        return json.dumps(to_sarif(report), indent=2)
    if fmt == "junit":
        return to_junit(report)
    raise ValueError(f"unknown format {fmt!r}; known: {FORMATS}")


# -- text -----------------------------------------------------------------------------------

def render_text(report: Any) -> str:
    lines = spec_lines(report.specs)
    diags = list(report.diagnostics) + [d for s in report.specs for d in s.diagnostics]
    if diags:
        lines += [""] * bool(lines) + diagnostics_text(diags)
    lines += [""] * bool(lines) + [summary_line(report)]
    code = code_line(report)
    if code:
        lines.append(code)
    return "\n".join(lines)


def code_line(report: Any) -> str:
    """How many specs had their op's code checked, and why the others did not; then, one
    line each, the parts of a check that were not run (`checked; <note>`)."""
    states = [(s.op, getattr(s, "code_checks", "")) for s in report.specs]
    if not any(st for _, st in states):
        return ""
    run = sum(st == "checked" or st.startswith("checked; ") for _, st in states)
    why: dict[str, int] = {}
    for _, st in states:
        if st.startswith("skipped: "):
            why[st[len("skipped: "):]] = why.get(st[len("skipped: "):], 0) + 1
    parts = [f"{n} skipped ({w})" for w, n in sorted(why.items())]
    notes = [f"  {op}: {st[len('checked; '):]}" for op, st in states
             if st.startswith("checked; ")]
    return "\n".join([f"code checks: {run} run" + ("; " + "; ".join(parts) if parts else ""),
                      *notes])


def spec_lines(specs: Iterable[Any]) -> list[str]:
    specs = list(specs)
    if not specs:
        return []
    vw = max(len(s.verdict) for s in specs)
    ow = max(len(s.op) for s in specs)
    out = []
    for s in specs:
        combos = getattr(s, "combinations", None)
        if s.verdict == LOADED or combos is None:
            facts = [s.status]
        else:
            facts = [f"{combos} combination{'' if combos == 1 else 's'}",
                     f"{getattr(s, 'seconds', 0.0):.2f} s"]
            if getattr(s, "cached", False):
                facts.append("cached")
        out.append(f"{s.verdict:<{vw}}  {s.op:<{ow}}  ({display_path(s.file)})  "
                   f"[{', '.join(facts)}]")
    return out


def summary_line(report: Any) -> str:
    s = summary(report)
    loaded = sum(spec.verdict == LOADED for spec in report.specs)
    if loaded:
        counts = f"{loaded} loaded"
    else:
        counts = ", ".join(f"{s[v]} {v}" for v in VERDICTS)
    return (f"{s['specs']} spec{'' if s['specs'] == 1 else 's'}: {counts}; "
            f"{s['errors']} error{'' if s['errors'] == 1 else 's'}, "
            f"{s['warnings']} warning{'' if s['warnings'] == 1 else 's'} in {s['seconds']:.2f} s")


def headline(d: Diagnostic) -> str:
    """`file:line:col: severity[check]: Op path: message`."""
    parts = []
    if d.pos is not None:
        parts.append(f"{display_path(d.pos.file)}:{d.pos.line}:{d.pos.column}")
    parts.append(f"{d.severity.value}[{d.check}]")
    if d.op:
        parts.append(d.op + (f" {d.path}" if d.path else ""))
    elif d.path:
        parts.append(d.path)
    parts.append(d.message)
    return ": ".join(parts)


def diagnostic_lines(d: Diagnostic, sources: "SourceLines | None" = None) -> list[str]:
    lines = [headline(d)]
    if d.hint:
        lines.append(f"    hint: {d.hint}")
    if d.counterexample:
        lines.append("    counterexample:")
        lines.extend(f"      {k} = {format_value(v)}" for k, v in d.counterexample.items())
    if d.pos is not None:
        lines.extend(_excerpt(d, sources or SourceLines()))
    return lines


def diagnostics_text(diags: Iterable[Diagnostic]) -> list[str]:
    sources = SourceLines()
    return [line for d in diags for line in diagnostic_lines(d, sources)]


def format_value(v: Any) -> str:
    """A counterexample value as a spec would write it: `[4, 8]`, `true`, `bfloat16`."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "None"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {format_value(x)}" for k, x in v.items()) + "}"
    return str(v)


class SourceLines:
    """Source lines, read once per file; a file that cannot be read shows no excerpt."""

    def __init__(self) -> None:
        self._files: dict[str, list[str] | None] = {}

    def line(self, file: str, n: int) -> str | None:
        if file not in self._files:
            try:
                self._files[file] = Path(file).read_text(encoding="utf-8-sig").splitlines()
            except (OSError, UnicodeDecodeError):
                self._files[file] = None
        lines = self._files[file]
        return lines[n - 1] if lines and 1 <= n <= len(lines) else None


def _excerpt(d: Diagnostic, sources: SourceLines) -> list[str]:
    text = sources.line(d.pos.file, d.pos.line)
    if text is None:
        return []
    gutter = f"{d.pos.line:>6} | "
    caret = " " * max(d.pos.column - 1, 0) + "^"
    return [gutter + text.rstrip(), " " * (len(gutter) - 2) + "| " + caret]


# -- stats ----------------------------------------------------------------------------------

def stats_json(report: Any, top: int = 20) -> dict[str, Any]:
    ranked = sorted(report.specs, key=lambda s: -getattr(s, "seconds", 0.0))
    return {
        "top": [{"op": s.op, "seconds": round(getattr(s, "seconds", 0.0), 4),
                 "cached": bool(getattr(s, "cached", False))} for s in ranked[:top]],
        "specs": len(report.specs),
        "cached": sum(bool(getattr(s, "cached", False)) for s in report.specs),
        "total_seconds": round(sum(getattr(s, "seconds", 0.0) for s in report.specs), 4),
        "wall_seconds": round(report.seconds, 4),
    }


def stats_table(report: Any, top: int = 20) -> str:
    st = stats_json(report, top)
    shown = st["top"]
    ow = max([len(r["op"]) for r in shown] + [2])
    lines = [f"slowest specs ({len(shown)} of {st['specs']}):", f"  {'seconds':>9}  op"]
    for r in shown:
        lines.append(f"  {r['seconds']:>9.3f}  {r['op']:<{ow}}{'  (cached)' if r['cached'] else ''}"
                     .rstrip())
    lines.append(f"  {st['total_seconds']:>9.3f}  total over {st['specs']} specs, "
                 f"{st['cached']} from the cache (wall {st['wall_seconds']:.3f} s)")
    return "\n".join(lines)


# -- JSON -----------------------------------------------------------------------------------

def spec_json(s: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"op": s.op, "file": s.file, "status": s.status, "verdict": s.verdict}
    for key in ("combinations", "seconds", "cached", "code_checks"):
        if hasattr(s, key):
            v = getattr(s, key)
            out[key] = round(v, 4) if isinstance(v, float) else v
    out["diagnostics"] = [d.to_json() for d in s.diagnostics]
    return out


def to_json(report: Any) -> dict[str, Any]:
    return {"specs": [spec_json(s) for s in report.specs],
            "diagnostics": [d.to_json() for d in report.diagnostics],
            "summary": summary(report)}


# -- SARIF 2.1.0 ----------------------------------------------------------------------------

def _uri(file: str) -> str:
    shown = display_path(file)
    return shown if not os.path.isabs(shown) else Path(shown).as_uri()


def to_sarif(report: Any) -> dict[str, Any]:
    """SARIF 2.1.0: the driver's `rules` are every registered check id (`CHECK_IDS`, those
    of `opspec prove` first, then the findings of `opspec diff`), each result points at its
    rule by id and index."""
    files = {s.op: s.file for s in report.specs}
    diags = all_diagnostics(report)
    rule_ids = list(dict.fromkeys([*CHECK_IDS, *(d.check for d in diags)]))
    rules = [{"id": c, "name": c, "shortDescription": {"text": meaning(c) or c},
              "help": {"text": f"{meaning(c)}\nbroken example: {example(c)}"}}
             for c in rule_ids]
    results = []
    for d in diags:
        res: dict[str, Any] = {"ruleId": d.check, "ruleIndex": rule_ids.index(d.check),
                               "level": _SARIF_LEVEL[d.severity],
                               "message": {"text": d.message}}
        file = d.pos.file if d.pos else files.get(d.op)
        if file:
            phys: dict[str, Any] = {"artifactLocation": {"uri": _uri(file)}}
            if d.pos:
                phys["region"] = {"startLine": d.pos.line, "startColumn": d.pos.column}
            loc: dict[str, Any] = {"physicalLocation": phys}
            if d.op:
                loc["logicalLocations"] = [{"name": d.op, "kind": "type",
                                            "fullyQualifiedName": ".".join(
                                                p for p in (d.op, d.path) if p)}]
            res["locations"] = [loc]
        props = {k: v for k, v in d.to_json().items()
                 if k in ("op", "path", "hint", "counterexample") and v is not None}
        if props:
            res["properties"] = props
        results.append(res)
    return {
        "version": "2.1.0",
        "$schema": SARIF_SCHEMA,
        "runs": [{
            "tool": {"driver": {"name": "opspec", "version": __version__, "rules": rules}},
            "results": results,
        }],
    }


# -- JUnit XML ------------------------------------------------------------------------------

# Characters XML 1.0 cannot hold at all, not even escaped.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(root: ET.Element) -> None:
    """Replace what XML cannot hold; ElementTree escapes the rest (`<`, `&`, quotes)."""
    for el in root.iter():
        for k, v in el.attrib.items():
            el.set(k, _NOT_XML.sub("\ufffd", v))
        if el.text:
            el.text = _NOT_XML.sub("\ufffd", el.text)


def to_junit(report: Any) -> str:
    s = summary(report)
    suite = ET.Element("testsuite", name="opspec prove", time=f"{report.seconds:.3f}")
    failures = skipped = 0
    for spec in report.specs:
        family = getattr(spec, "family", None) or Path(spec.file).stem
        case = ET.SubElement(suite, "testcase", classname=family, name=spec.op,
                             file=display_path(spec.file),
                             time=f"{getattr(spec, 'seconds', 0.0):.3f}")
        if _junit_outcome(case, spec.verdict, spec.diagnostics) == "failure":
            failures += 1
        elif spec.verdict == "unknown":
            skipped += 1
    if report.diagnostics:  # problems of no one spec: the types file, unreadable files
        case = ET.SubElement(suite, "testcase", classname="opspec", name="(manifest)", time="0")
        if _junit_outcome(case, None, report.diagnostics) == "failure":
            failures += 1
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="opspec", tests=suite.get("tests"),
                      failures=str(failures), errors="0", skipped=str(skipped),
                      time=f"{s['seconds']:.3f}")
    root.append(suite)
    _xml_safe(root)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _junit_outcome(case: ET.Element, verdict: str | None, diags: list[Diagnostic]) -> str:
    body = "\n".join(diagnostics_text(diags))
    errors = [d for d in diags if d.is_error]
    if verdict == "refuted" or errors:
        first = errors[0] if errors else (diags[0] if diags else None)
        el = ET.SubElement(case, "failure", message=first.message if first else verdict or "",
                           type=first.check if first else "refuted")
        el.text = body
        return "failure"
    if verdict == "unknown":
        first = next((d for d in diags if d.check == "unknown"), diags[0] if diags else None)
        ET.SubElement(case, "skipped", message=first.message if first else "undecided")
        ET.SubElement(case, "system-out").text = body
        return "skipped"
    if diags:
        ET.SubElement(case, "system-out").text = body
    return "passed"
