"""Bench entries of the activation family: ReluFwdOp, SiluFwdOp, GeluFwdOp.

The reference is the torch function on the float64 inputs the bench passes. The baselines
are the same function as a model calls it, in the input dtype: `eager`, and
`torch.compile(fullgraph=True)` of it. With `inplace=True` the op returns its (written)
input; the reference returns that result, and the baselines run in place as the op does.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]

def _relu_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return F.relu(x)


def _relu_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    inplace = bool(op.inplace)

    def relu(x: torch.Tensor) -> torch.Tensor:
        return F.relu(x, inplace=inplace)

    return relu


def _silu_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)


def _silu_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    inplace = bool(op.inplace)

    def silu(x: torch.Tensor) -> torch.Tensor:
        return F.silu(x, inplace=inplace)

    return silu


def _gelu_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate=op.approximate)


def _gelu_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    approximate = str(op.approximate)

    def gelu(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=approximate)

    return gelu


BENCH = {
    "ReluFwdOp": torch_entry(_relu_reference, _relu_fn, "F.relu(x, inplace) in the input dtype"),
    "SiluFwdOp": torch_entry(_silu_reference, _silu_fn, "F.silu(x, inplace) in the input dtype"),
    "GeluFwdOp": torch_entry(_gelu_reference, _gelu_fn,
                             "F.gelu(x, approximate) in the input dtype"),
}
