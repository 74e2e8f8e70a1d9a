"""Bench entries of the binary family: AddFwdOp and MulFwdOp.

The reference is torch.add / torch.mul on the inputs the bench passes (floating inputs
upcast to float64; integer inputs stay as they are, so integer cases are checked exactly).
The baselines are the same call as a model writes it, in the input dtypes (torch promotes
and broadcasts): `eager`, and `torch.compile(fullgraph=True)` of it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]

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
    "AddFwdOp": torch_entry(_add_reference, _add_fn,
                            "torch.add(input, other, alpha=alpha) in the input dtypes"),
    "MulFwdOp": torch_entry(_mul_reference, _mul_fn, "torch.mul(input, other) in the input dtypes"),
}
