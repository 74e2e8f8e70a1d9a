"""Bench entries of the pool family: MaxPool2dFwdOp, AvgPool2dFwdOp.

The reference is `opspec.kernels.pool.pool2d_reference` (torch's own pooling, in float64 on
the float64 inputs the bench passes). The baselines are the torch functions a model calls,
in the input dtype: `F.max_pool2d` / `F.avg_pool2d` eagerly and under
`torch.compile(fullgraph=True)`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from opspec.kernels.pool import pool2d_geometry, pool2d_reference
from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]


def _max_reference(op: Any, input: torch.Tensor) -> torch.Tensor:
    g = pool2d_geometry(op.kernel_size, op.stride, op.padding, op.dilation, op.ceil_mode)
    return pool2d_reference(input, "max", g)


def _max_fn(op: Any) -> Callable[..., torch.Tensor]:
    g = pool2d_geometry(op.kernel_size, op.stride, op.padding, op.dilation, op.ceil_mode)

    def max_pool2d(input: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(input, g.kernel, g.stride, g.padding, g.dilation, g.ceil_mode)

    return max_pool2d


def _avg_reference(op: Any, input: torch.Tensor) -> torch.Tensor:
    g = pool2d_geometry(op.kernel_size, op.stride, op.padding, 1, op.ceil_mode)
    return pool2d_reference(input, "avg", g, op.count_include_pad, op.divisor_override)


def _avg_fn(op: Any) -> Callable[..., torch.Tensor]:
    g = pool2d_geometry(op.kernel_size, op.stride, op.padding, 1, op.ceil_mode)
    count_include_pad, divisor = bool(op.count_include_pad), op.divisor_override

    def avg_pool2d(input: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(input, g.kernel, g.stride, g.padding, g.ceil_mode,
                            count_include_pad, divisor)

    return avg_pool2d


BENCH = {
    "MaxPool2dFwdOp": torch_entry(
        _max_reference, _max_fn,
        "F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode) in the input dtype"),
    "AvgPool2dFwdOp": torch_entry(
        _avg_reference, _avg_fn,
        "F.avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, "
        "divisor_override) in the input dtype"),
}
