"""A contiguous copy of a tensor of unit-stride rows, in whatever row stride it comes: the
copies the launchers make of operands in rows no 16-byte load can take
(:func:`opspec.kernels.tiling.contiguous_copy`).

Why not ``Tensor.clone``: torch copies such a view (rows 4 elements longer than they hold)
element by element, at about 1.7 TB/s on an H200 (a [32, 1024, 1024] bf16 view: 77 us,
against 33 for a contiguous clone). The activations' strided kernel with no activation
(``COPY``) reads the rows in the widest vectors their strides allow
(:func:`opspec.kernels.tiling.row_multiple`) and writes 16-byte ones: 35 us.
"""

from __future__ import annotations

import torch

from opspec.kernels.activation import COPY, _launch_2d
from opspec.kernels.devices import TRITON_DEVICES

__all__ = ["copy_rows"]

#: Elements a program copies, and its warps (32 bytes a thread in 16-bit types).
_TILE = 8192
_WARPS = 8


def copy_rows(t: torch.Tensor) -> torch.Tensor | None:
    """A fresh contiguous copy of ``t``, a tensor on a device Triton runs on (CUDA, or the
    CPU through the interpreter) whose innermost stride is 1 and whose other dimensions
    collapse into one row axis (``t.view(-1, t.shape[-1])`` is a view); None where it is
    not such a tensor (the caller copies another way). Raises CUDA's out-of-memory error
    as ``torch.empty`` does."""
    if (t.device.type not in TRITON_DEVICES or t.dim() < 2 or t.stride(-1) != 1
            or t.numel() == 0):
        return None
    C = t.shape[-1]
    try:
        rows = t.view(-1, C)
    except RuntimeError:      # leading dimensions that do not collapse
        return None
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    _launch_2d(rows, out.view(-1, C), rows.shape[0], C, rows.stride(), (C, 1), COPY,
               tile=_TILE, num_warps=_WARPS)
    return out
