"""Bench entries of the softmax family: SoftmaxFwdOp and LogSoftmaxFwdOp.

The reference runs in float64 on the upcast input, after rounding it to the op's `dtype`
when one is given (torch casts the input before the op). The baselines are the torch calls
a model writes, `torch.softmax(x, dim, dtype=dtype)` and `torch.log_softmax(...)`, eager
and under `torch.compile`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.ops.bench_types import torch_entry


def _reference(log: bool) -> Callable[..., torch.Tensor]:
    def reference(op: Any, input: torch.Tensor) -> torch.Tensor:
        x = input
        if op._out_dtype is not None:
            x = x.to(op._out_dtype).to(input.dtype)  # the cast the op makes first
        return torch.log_softmax(x, op.dim) if log else torch.softmax(x, op.dim)
    return reference


def _fn(log: bool) -> Callable[[Any], Callable[..., torch.Tensor]]:
    def fn_of_op(op: Any) -> Callable[..., torch.Tensor]:
        dim, dtype = int(op.dim), op._out_dtype
        if log:
            def log_softmax(input: torch.Tensor) -> torch.Tensor:
                return torch.log_softmax(input, dim, dtype=dtype)
            return log_softmax

        def softmax(input: torch.Tensor) -> torch.Tensor:
            return torch.softmax(input, dim, dtype=dtype)
        return softmax
    return fn_of_op


BENCH = {
    "SoftmaxFwdOp": torch_entry(_reference(False), _fn(False),
                                "torch.softmax(input, dim, dtype=dtype)"),
    "LogSoftmaxFwdOp": torch_entry(_reference(True), _fn(True),
                                   "torch.log_softmax(input, dim, dtype=dtype)"),
}
