"""Bench entry of the bmm family: BmmFwdOp.

The reference is `torch.bmm` on the float64 inputs the bench passes. The baselines are
`torch.bmm` in the input dtype (`eager`: cuBLAS on CUDA, float32 without TF32 as torch's
default) and its `torch.compile(fullgraph=True)` (`compile`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opspec.kernels.bmm import bmm_reference
from opspec.ops.bench_types import torch_entry

__all__ = ["BENCH"]


def _bmm_reference(op: Any, input: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    return bmm_reference(input, mat2)


def _bmm_fn(op: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def bmm(input: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
        return torch.bmm(input, mat2)

    return bmm


BENCH = {
    "BmmFwdOp": torch_entry(_bmm_reference, _bmm_fn,
                            "torch.bmm(input, mat2) in the input dtype (cuBLAS on CUDA)"),
}
