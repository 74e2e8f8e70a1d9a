"""opspec's settings: every `OPSPEC_*` environment variable is read here and nowhere else.

- `OPSPEC_CACHE_DIR`: where the proof and parse caches live (default
  `$XDG_CACHE_HOME/opspec`, else `~/.cache/opspec`).
- `OPSPEC_NO_CACHE`: when set to a non-empty value other than `0`, nothing is cached.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("OPSPEC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opspec"


def caching_enabled() -> bool:
    return os.environ.get("OPSPEC_NO_CACHE", "") in ("", "0")
