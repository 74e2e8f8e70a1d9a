"""Bench entries of the softmax family: SoftmaxFwdOp and LogSoftmaxFwdOp.

The reference runs in float64 on the upcast input, after rounding it to the op's `dtype`
when one is given (torch casts the input before the op). The baselines are the torch calls
a model writes, `torch.softmax(x, dim, dtype=dtype)` and `torch.log_softmax(...)`, eager
and under `torch.compile`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.ops.bench_types import BenchEntry, compiled, eager


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
    "SoftmaxFwdOp": BenchEntry(
        reference=_reference(False),
        baselines={"eager": eager(_fn(False)), "compile": compiled(_fn(False))},
        descriptions={
            "eager": "torch.softmax(input, dim, dtype=dtype)",
            "compile": "torch.compile(fullgraph=True) of the same function (default mode)",
        },
    ),
    "LogSoftmaxFwdOp": BenchEntry(
        reference=_reference(True),
        baselines={"eager": eager(_fn(True)), "compile": compiled(_fn(True))},
        descriptions={
            "eager": "torch.log_softmax(input, dim, dtype=dtype)",
            "compile": "torch.compile(fullgraph=True) of the same function (default mode)",
        },
    ),
}
