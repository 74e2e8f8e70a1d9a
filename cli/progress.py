"""A one-line progress bar on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import shutil
import sys
from typing import Any, TextIO


class ProgressBar:
    """`[#####-----] 12/168 GemmFwdOp`, redrawn in place and cleared by `close`."""

    def __init__(self, stream: TextIO | None = None, width: int = 24):
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.enabled = _isatty(self.stream)
        self._shown = 0

    def __call__(self, done: int, total: int, result: Any) -> None:
        if not self.enabled:
            return
        filled = self.width * done // total if total else self.width
        text = f"[{'#' * filled}{'-' * (self.width - filled)}] {done}/{total} {result.op}"
        text = text[:shutil.get_terminal_size().columns - 1]  # a wrapped line cannot be redrawn
        self.stream.write("\r" + text.ljust(self._shown))
        self.stream.flush()
        self._shown = len(text)

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
