"""opspec's settings: every `OPSPEC_*` environment variable is read here and nowhere else.

- `OPSPEC_CACHE_DIR`: where the proof and parse caches live (default
  `$XDG_CACHE_HOME/opspec`, else `~/.cache/opspec`).
- `OPSPEC_NO_CACHE`: when set to a non-empty value other than `0`, nothing is cached.
- `OPSPEC_TRITON_LAUNCH`: `triton` launches every kernel through Triton's own
  `kernel[grid](...)` path; otherwise (`fast`, the default) opspec's prepared launch is used
  where it applies (`opspec.kernels.launch`).
- `OPSPEC_PDL`: `0` launches every kernel plainly, without programmatic dependent launch
  (`opspec.kernels.pdl`).
- `OPSPEC_CHECK_REQUIRES`: when set to a non-empty value other than `0`, each eager call
  checks the `requires` predicates of its metadata tensors on their contents (a debugging
  aid: it reads them back to the host).

Each is read when the module that needs it is imported, except `OPSPEC_CHECK_REQUIRES`,
read when an op class is first used.
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


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def triton_launch_prepared() -> bool:
    """Whether kernels may take opspec's prepared launch (`OPSPEC_TRITON_LAUNCH` is not
    `triton`)."""
    return os.environ.get("OPSPEC_TRITON_LAUNCH", "fast") != "triton"


def pdl_enabled() -> bool:
    """Whether kernels launch with programmatic dependent launch (`OPSPEC_PDL` is not `0`)."""
    return os.environ.get("OPSPEC_PDL", "1") != "0"


def check_requires() -> bool:
    """Whether eager calls check `requires` on contents (`OPSPEC_CHECK_REQUIRES`)."""
    return _flag("OPSPEC_CHECK_REQUIRES")
