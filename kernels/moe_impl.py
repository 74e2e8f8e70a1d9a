"""The M-grouped expert GEMM's kernel interface, its call spec and its implementations.

`moe_contiguous_triton` serves contiguous layouts and `moe_masked_triton` masked ones
(each refuses the other layout); `moe_grouped_gemm_reference` (torch) is the general
fallback on every device.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES, TRITON_INTERPRETED
from opspec.kernels.moe import moe_grouped_gemm_reference, moe_grouped_gemm_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class MoeGroupedGemmCall(CallSpec):
    kind: str  # 'contiguous' | 'masked'
    metadata_kind: str  # 'per_row' | 'physical_psum' (contiguous); '' (masked)
    alignment: int  # contiguous; 1 for masked
    max_m: int  # masked; 0 for contiguous
    E: int
    N: int
    K: int
    dtype: str
    activation: str


class MoeGroupedGemmFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = MoeGroupedGemmCall

    @abc.abstractmethod
    def forward(self, x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor,
                out: torch.Tensor) -> torch.Tensor:
        """`out = act(x[r] @ w[e(r)]^T)` per row, 0 for rows of no expert.

        x: [M, K] (contiguous) or [E, max_m, K] (masked); w: [E, N, K]; both of the call's
        dtype, any strides. metadata: int32, per the call's layout ([M] expert ids, [E]
        ends, or [E] valid-row counts). out: [rows..., N // 2 if silu_and_mul else N],
        the call's dtype, any strides, written in full (not read). Returns `out`.
        """


def _interpreted_bf16(call: MoeGroupedGemmCall) -> str | None:
    if TRITON_INTERPRETED and call.dtype == "bfloat16" and (
            call.device is None or call.device.type == "cpu"):
        return "the Triton interpreter's bfloat16 tl.dot is wrong on the CPU"
    return None


class _MoeTritonKernel(Kernel, MoeGroupedGemmFwdInterface):
    devices = TRITON_DEVICES

    @classmethod
    def refusal(cls, call):
        return _interpreted_bf16(call) or super().refusal(call)

    def forward(self, x, w, metadata, out):
        c = self.call
        return moe_grouped_gemm_triton(x, w, metadata, out, c.kind, c.metadata_kind,
                                       c.alignment, c.activation)


class MoeContiguousTritonKernel(_MoeTritonKernel):
    """Output tiles over the packed rows; each tile reads its rows' experts on the device
    and runs one K loop per expert it holds (one where the tile divides the alignment;
    tight packing's tiles, and the span tiles a configuration may select on Hopper, may
    hold several)."""

    applies = "kind == 'contiguous'"


class MoeMaskedTritonKernel(_MoeTritonKernel):
    """A grid over (tile, expert); tiles past the expert's valid rows store zeros."""

    applies = "kind == 'masked'"


class MoeGroupedGemmReferenceKernel(Kernel, MoeGroupedGemmFwdInterface):
    """One torch matmul per expert, fp32 activation: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, x, w, metadata, out):
        c = self.call
        out.copy_(moe_grouped_gemm_reference(x, w, metadata, c.kind, c.metadata_kind,
                                             c.alignment, c.activation))
        return out
