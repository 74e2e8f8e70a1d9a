"""Bench entries of the reduction family: SumFwdOp, MeanFwdOp, AmaxFwdOp.

The reference is the torch reduction on the float64 inputs the bench passes, after the
cast to `dtype` that torch.sum and torch.mean make first (a narrowing `dtype` rounds the
input). The baselines are the same torch call as a model writes it, in the input dtype:
`eager`, and `torch.compile(fullgraph=True)` of it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]

def _dtype_of(op: Any) -> torch.dtype | None:
    d = op.dtype
    return getattr(torch, d) if isinstance(d, str) else d


def _dim_of(op: Any):
    d = op.dim
    return list(d) if isinstance(d, (list, tuple)) else d


def _cast_first(op: Any, x: torch.Tensor) -> torch.Tensor:
    d = _dtype_of(op)
    return x if d is None else x.to(d).to(x.dtype)


def _sum_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.sum(_cast_first(op, x), dim=_dim_of(op), keepdim=bool(op.keepdim))


def _sum_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    dim, keepdim, dtype = _dim_of(op), bool(op.keepdim), _dtype_of(op)

    def sum_(x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=dim, keepdim=keepdim, dtype=dtype)

    return sum_


def _mean_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.mean(_cast_first(op, x), dim=_dim_of(op), keepdim=bool(op.keepdim))


def _mean_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    dim, keepdim, dtype = _dim_of(op), bool(op.keepdim), _dtype_of(op)

    def mean(x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=dim, keepdim=keepdim, dtype=dtype)

    return mean


def _amax_reference(op: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.amax(x, dim=_dim_of(op), keepdim=bool(op.keepdim))


def _amax_fn(op: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    dim, keepdim = _dim_of(op), bool(op.keepdim)

    def amax(x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=dim, keepdim=keepdim)

    return amax


BENCH = {
    "SumFwdOp": torch_entry(_sum_reference, _sum_fn,
                            "torch.sum(x, dim, keepdim, dtype=dtype) in the input dtype"),
    "MeanFwdOp": torch_entry(_mean_reference, _mean_fn,
                             "torch.mean(x, dim, keepdim, dtype=dtype) in the input dtype"),
    "AmaxFwdOp": torch_entry(_amax_reference, _amax_fn,
                             "torch.amax(x, dim, keepdim) in the input dtype"),
}
