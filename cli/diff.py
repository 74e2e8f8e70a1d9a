"""`opspec diff OLD NEW`: prove new versions of specs backward compatible with the old ones
(see `opspec.solver.diff`). Only the parser is built at import; the solver is imported when
the command runs. The finding ids are `opspec.schema.diagnostics.DIFF_CHECK_IDS`, documented
in the one check table (`opspec.schema.check_docs.CHECK_DOCS`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import report as R

EXIT_OK, EXIT_INCOMPATIBLE, EXIT_USAGE = 0, 1, 2

_EPILOG = """\
OLD and NEW are each a family file or a manifest folder (one with a spec/ subfolder, or
holding the family files itself): two versions of the same ops. For every op in both, the
change is backward compatible when every call that OLD accepts -- its construction
parameters, the tensors it passes, their shapes and dtypes -- is still accepted by NEW, with
the same output names and the same output shapes and dtypes. Otherwise a finding names the
declaration at fault and, where one exists, a concrete call (parameter values, input shapes
and dtypes) that NEW rejects or types differently. An op removed in NEW is incompatible; an
op added in NEW is fine.

{checks}

exit status: 0 every op compatible (or undecided), 1 an incompatible change, 2 usage error
or unreadable input.
"""


def _checks_text() -> str:
    from opspec.schema.diagnostics import DIFF_CHECK_IDS

    from .checks import checks_epilog

    return checks_epilog(ids=DIFF_CHECK_IDS,
                         title="checks (every finding names one; each example is an OLD fragment, "
                               "then the NEW one that breaks it):")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Fills in the table of check ids when the help is printed."""

    def add_text(self, text: str | None) -> None:
        if text is not None and "{checks}" in text:
            text = text.replace("{checks}", _checks_text())
        super().add_text(text)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("diff", help="prove new versions of specs backward compatible",
                       description="Prove that the specs in NEW accept every call the specs "
                                   "in OLD accept, with outputs of the same type.",
                       epilog=_EPILOG, formatter_class=_Formatter)
    p.add_argument("old", metavar="OLD", help="the old specs: a family file or a folder")
    p.add_argument("new", metavar="NEW", help="the new specs: a family file or a folder")
    p.add_argument("--op", action="append", dest="ops", metavar="NAME",
                   help="compare only this op (repeatable)")
    p.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    return p


def _usage(msg: str) -> Exception:
    from .main import UsageError
    return UsageError(msg)


def _load(path: str):
    from opspec.schema.errors import SpecError
    from opspec.schema.loader import load_paths

    from .main import _check_paths

    _check_paths([path])
    try:
        return load_paths([path], strict=True)
    except SpecError as exc:
        raise _usage(str(exc)) from None


def cmd_diff(args: argparse.Namespace) -> int:
    old, new = _load(args.old), _load(args.new)
    if args.ops:
        unknown = [n for n in args.ops if n not in old.specs and n not in new.specs]
        if unknown:
            from opspec.schema.suggest import closest
            known = list(dict.fromkeys([*old.specs, *new.specs]))
            close = closest(unknown[0], known)
            raise _usage(f"no op named {unknown[0]} in OLD or NEW"
                         + (f"; did you mean {close}?" if close else ""))
    from opspec.solver.diff import diff_manifests

    report = diff_manifests(old, new, ops=args.ops)
    if args.format == "json":
        text = json.dumps(to_json(report, args.old, args.new), indent=2)
    elif args.format == "sarif":
        text = json.dumps(R.to_sarif(report), indent=2)
    else:
        text = render_text(report)
    sys.stdout.write(text + "\n")
    return EXIT_INCOMPATIBLE if not report.ok else EXIT_OK


def render_text(report: Any) -> str:
    """Per op `verdict  Op  (file)  [N combinations, s]`, then each finding as the prover's
    diagnostics are printed (headline, counterexample, source excerpt), then a summary."""
    lines = R.spec_lines(report.specs)
    diags = list(report.diagnostics) + [d for s in report.specs for d in s.diagnostics]
    if diags:
        lines += [""] * bool(lines) + R.diagnostics_text(diags)
    lines += [""] * bool(lines) + [summary_line(report)]
    return "\n".join(lines)


def summary_line(report: Any) -> str:
    s = report.summary()
    n = s["ops"]
    counts = ", ".join(f"{s[v]} {v}" for v in ("compatible", "incompatible", "unknown", "added",
                                              "removed"))
    return (f"{n} op{'' if n == 1 else 's'}: {counts}; {s['errors']} "
            f"error{'' if s['errors'] == 1 else 's'} in {s['seconds']:.2f} s")


def to_json(report: Any, old: str, new: str) -> dict[str, Any]:
    return {"old": old, "new": new,
            "ops": [s.to_json() for s in report.specs],
            "diagnostics": [d.to_json() for d in report.diagnostics],
            "summary": report.summary()}
