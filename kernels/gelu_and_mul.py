"""GeluAndMul: ``out = gelu(x[..., :N], approximate) * x[..., N:]`` for ``x`` of shape ``[M, 2N]``.

Two plain functions; the dispatch classes are in :mod:`opspec.kernels.gelu_and_mul_impl`.

* :func:`gelu_and_mul_reference` -- the torch reference (fp32 math, cast back).
* :func:`gelu_and_mul_triton` -- a memory-bound Triton kernel writing into ``out``.

The kernel reads ``2*M*N`` and writes ``M*N`` elements, so on an H200 it is bound by
HBM bandwidth (about 4.2 TB/s measured for a copy). It is the gated kernel of
:mod:`opspec.kernels.silu_and_mul` (:func:`~opspec.kernels.silu_and_mul.gated_triton`)
with the GELU in place of the SiLU: tiles of rows by columns, column blocks fastest, laid
out by that module's ``GATED_TABLE``. The erf form is not libdevice's ``erff``, which
made this kernel compute-bound (3.3 TB/s on an H200 where the tanh form reached 4.24),
but :func:`~opspec.kernels.activation.gelu_erf_fp32`: 29 SASS instructions per element
here against 44.6, within ``2e-6 * |gate|`` of gelu.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from opspec.kernels.activation import StreamConfig
from opspec.kernels.silu_and_mul import gated_blocks, gated_config, gated_triton

__all__ = [
    "gelu_and_mul_block",
    "gelu_and_mul_reference",
    "gelu_and_mul_triton",
]

_APPROXIMATIONS = ("none", "tanh")


def gelu_and_mul_reference(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(x[..., :N], approximate) * x[..., N:]`` computed in float32 (float64 stays
    float64), returned in ``x.dtype``."""
    if approximate not in _APPROXIMATIONS:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"last dimension of x must be even, got {x.shape[-1]}")
    n = x.shape[-1] // 2
    xf = x if x.dtype == torch.float64 else x.float()
    return (F.gelu(xf[..., :n], approximate=approximate) * xf[..., n:]).to(x.dtype)


def gelu_and_mul_block(M: int, N: int, elem_bytes: int = 2) -> tuple[int, int, int]:
    """The ``(BLOCK_M, BLOCK_N, num_warps)`` the launcher uses for an ``[M, 2N]`` input of
    ``elem_bytes``-byte elements (the ``GATED_TABLE`` row, split by ``gated_blocks``)."""
    return gated_blocks(M, N, gated_config(M, N, elem_bytes))


def gelu_and_mul_triton(x: torch.Tensor, out: torch.Tensor, approximate: str = "none",
                        config: StreamConfig | None = None) -> torch.Tensor:
    """Write ``gelu(x[:, :N], approximate) * x[:, N:]`` into ``out`` (``[M, N]``); return it.

    ``x`` is ``[M, 2N]`` of dtype fp16, bf16 or fp32 with any strides (row and column
    strides are passed to the kernel); ``out`` has ``x``'s dtype and shape ``[M, N]``, any
    strides (contiguous is the fast case), and does not overlap ``x``. ``approximate`` is
    ``'none'`` (erf) or ``'tanh'``. The math is done in fp32. Nothing is launched when
    ``M == 0`` or ``N == 0``. No allocation, no host sync. Inputs with more than two
    dimensions are viewed as ``[-1, 2N]`` (a copy of ``x`` only if its leading dimensions
    cannot be flattened as a view). ``config`` overrides ``GATED_TABLE``.
    """
    if approximate not in _APPROXIMATIONS:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return gated_triton(x, out, "gelu_tanh" if approximate == "tanh" else "gelu", config)
