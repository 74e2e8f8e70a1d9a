"""The bundled manifest: `spec/<family>.yaml` files and `types.yaml` in this folder."""

from __future__ import annotations

from pathlib import Path

from opspec.schema.loader import Manifest, load_paths

#: The folder of this package; the bundled specs are in `MANIFEST_DIR / "spec"`.
MANIFEST_DIR = Path(__file__).resolve().parent

__all__ = ["MANIFEST_DIR", "load_bundled"]


def load_bundled(strict: bool = False) -> Manifest:
    """Load the bundled manifest. Lenient by default (import time): it never raises, and
    an empty `spec/` folder or a missing `types.yaml` give an empty manifest."""
    return load_paths([MANIFEST_DIR], strict=strict)
