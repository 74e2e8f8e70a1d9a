"""The check table for `--help`: `opspec.schema.check_docs` holds what each id means."""

from __future__ import annotations

import textwrap

from opspec.schema.check_docs import CHECK_DOCS, example, meaning

__all__ = ["CHECK_DOCS", "checks_epilog", "example", "meaning"]


def checks_epilog(width: int = 100, ids: "tuple[str, ...] | None" = None,
                  title: str = "checks (every diagnostic names one):") -> str:
    """The table of check ids for `--help` (`ids`, by default those of `opspec prove`): id,
    meaning, and the broken example below it."""
    from opspec.schema.diagnostics import PROVE_CHECK_IDS

    chosen = {c: CHECK_DOCS[c] for c in (ids if ids is not None else PROVE_CHECK_IDS)}
    pad = 2 + max(len(c) for c in chosen) + 2
    lines = [title]
    for check, (text, broken) in chosen.items():
        wrapped = textwrap.wrap(text, width - pad) or [""]
        lines.append(f"  {check:<{pad - 4}}  {wrapped[0]}")
        lines.extend(" " * pad + w for w in wrapped[1:])
        lines.append(" " * pad + "e.g. " + broken)
    return "\n".join(lines)
