"""Bench entries of the binary family: AddFwdOp and MulFwdOp.

The reference is torch.add / torch.mul on the inputs the bench passes (floating inputs
upcast to float64; integer inputs stay as they are, so integer cases are checked exactly).
The baselines are the same call as a model writes it, in the input dtypes (torch promotes
and broadcasts): `eager`, and `torch.compile(fullgraph=True)` of it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.ops.bench_types import BenchEntry, compiled, eager

__all__ = ["BENCH"]

_COMPILE = "torch.compile(fullgraph=True) of the same function (default mode)"


def _add_reference(op: Any, input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return torch.add(input, other, alpha=op.alpha)


def _add_fn(op: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    alpha = op.alpha
    if alpha == 1:
        def add(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
            return torch.add(input, other)
    else:
        def add(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
            return torch.add(input, other, alpha=alpha)

    return add


def _mul_reference(op: Any, input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return torch.mul(input, other)


def _mul_fn(op: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def mul(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        return torch.mul(input, other)

    return mul


BENCH = {
    "AddFwdOp": BenchEntry(
        reference=_add_reference,
        baselines={"eager": eager(_add_fn), "compile": compiled(_add_fn)},
        descriptions={"eager": "torch.add(input, other, alpha=alpha) in the input dtypes",
                      "compile": _COMPILE},
    ),
    "MulFwdOp": BenchEntry(
        reference=_mul_reference,
        baselines={"eager": eager(_mul_fn), "compile": compiled(_mul_fn)},
        descriptions={"eager": "torch.mul(input, other) in the input dtypes",
                      "compile": _COMPILE},
    ),
}
