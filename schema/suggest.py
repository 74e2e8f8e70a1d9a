"""The one known name a misspelt one most looks like, for the "did you mean" of a message."""

from __future__ import annotations

import difflib
from typing import Iterable


def closest(name: object, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name closest to `name` (difflib's ratio at least `cutoff`), or None."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=cutoff)
    return close[0] if close else None
