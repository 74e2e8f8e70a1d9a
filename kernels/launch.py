"""One place where opspec's kernels launch Triton kernels: ``launch(kernel, grid, *args, **kw)``
is ``kernel[grid](*args, **kw)``."""

from __future__ import annotations

from typing import Any

__all__ = ["launch"]


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
    """Launch the Triton ``kernel`` on ``grid`` with ``args`` and the constexpr and launch
    options ``kwargs`` (``num_warps``, ``num_stages``, ...), as ``kernel[grid](...)`` does."""
    return kernel[grid](*args, **kwargs)
