"""Reduction ops: torch.sum, torch.mean and torch.amax over any set of axes."""

from __future__ import annotations

import torch

from opspec.kernels.reduction import normalize_axes, reduced_shape
from opspec.kernels.reduction_impl import (
    ReductionCall, ReductionFwdInterface, ReductionReferenceKernel, ReductionTritonKernel,
)
from opspec.ops.op import DTYPE_NAMES, DTYPES_BY_NAME, Op

__all__ = ["AmaxFwdOp", "MeanFwdOp", "SumFwdOp"]


class _Reduction:
    """A mixin with what the three ops share: the axes of `dim` per input rank, the output allocation
    and the call of the one reduction interface."""

    kernel_types = {"reduction_triton": ReductionTritonKernel,
                    "reduction_reference": ReductionReferenceKernel}
    interfaces = {"reduce": ReductionFwdInterface}
    reduction = ""

    def _result_dtype(self, x: torch.Tensor) -> torch.dtype:
        # `dtype` (sum, mean): the input is cast to it first; amax has none
        d = getattr(self, "dtype", None)
        return x.dtype if d is None else _as_dtype(d)

    def _axes(self, rank: int) -> tuple[int, ...]:
        # The signature checks have validated `dim` for this rank; the normalized axes
        # only depend on the rank, so they are computed once per rank.
        cache = self.__dict__.setdefault("_axes_by_rank", {})
        axes = cache.get(rank)
        if axes is None:
            axes = cache[rank] = normalize_axes(self.dim, rank)
        return axes

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        axes = self._axes(input.dim())
        dtype = self._result_dtype(input)
        out = torch.empty(reduced_shape(input.shape, axes, self.keepdim), dtype=dtype,
                          device=input.device)
        call = ReductionCall(self.reduction, DTYPE_NAMES[input.dtype], DTYPE_NAMES[dtype],
                             device=input.device)
        return self.kernel_for("reduce", call).forward(input, out, axes)


def _as_dtype(d) -> torch.dtype | None:
    """A dtype parameter given as a torch.dtype or as its name, as a torch.dtype."""
    return DTYPES_BY_NAME[d] if isinstance(d, str) else d


class SumFwdOp(_Reduction, Op):
    """`torch.sum(input, dim, keepdim, dtype=dtype)`: the sum over the axes `dim` (every axis
    when None or empty), in float32 (float64 for a float64 result), the input cast to
    `dtype` first when given."""

    reduction = "sum"

    def __init__(self, dim=None, keepdim: bool = False, *, dtype=None, target=None):
        self.dim = dim
        self.keepdim = keepdim
        self.dtype = dtype
        super().__init__(target=target)


class MeanFwdOp(_Reduction, Op):
    """`torch.mean(input, dim, keepdim, dtype=dtype)`: the sum over the axes `dim` divided by
    the number of elements reduced (NaN for none), as `SumFwdOp` computes it."""

    reduction = "mean"

    def __init__(self, dim=None, keepdim: bool = False, *, dtype=None, target=None):
        self.dim = dim
        self.keepdim = keepdim
        self.dtype = dtype
        super().__init__(target=target)


class AmaxFwdOp(_Reduction, Op):
    """`torch.amax(input, dim, keepdim)`: the maximum over the axes `dim` (every axis for the
    default `()`, as torch, and for None), NaN when a reduced element is NaN. Every reduced
    axis must be non-empty."""

    reduction = "amax"

    def __init__(self, dim=(), keepdim: bool = False, *, target=None):
        self.dim = dim
        self.keepdim = keepdim
        super().__init__(target=target)
