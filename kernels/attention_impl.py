"""The attention kernel interfaces (dense and varlen), their call spec and their
implementations: the Triton flash-attention kernel and the torch references.

Under Triton's interpreter (CPU tests) the Triton kernels refuse bfloat16: the
interpreter's `tl.dot` is wrong in bfloat16, and such calls go to the reference.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.attention import (
    MAX_HEAD_DIM, attention_dense_reference, attention_dense_triton,
    attention_varlen_reference, attention_varlen_triton,
)
from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES, TRITON_INTERPRETED
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class AttentionCall(CallSpec):
    dtype: str
    head_dim: int
    causal: bool


#: The Triton kernels serve float16 and bfloat16 (float32 goes to the reference) up to the
#: kernel's largest head size.
_TRITON_APPLIES = f"(dtype == 'float16' or dtype == 'bfloat16') and head_dim <= {MAX_HEAD_DIM}"


def _interpreter_refusal(call: AttentionCall) -> str | None:
    if TRITON_INTERPRETED and call.dtype == "bfloat16":
        return "Triton's interpreter computes tl.dot wrongly in bfloat16"
    return None


class AttentionDenseFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = AttentionCall

    @abc.abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                scale: float | None) -> torch.Tensor:
        """`out = SDPA(q, k, v, is_causal=call.causal, scale=scale, enable_gqa=True)`.

        q: [B, H, S_q, D], k and v: [B, H_kv, S_kv, D] with H_kv dividing H, all of the
        call's dtype and head size, on the call's device, any strides; causal calls have
        S_q <= S_kv (top-left mask). scale None means 1 / sqrt(D). out: [B, H, S_q, D],
        same dtype, written in full (not read). Returns `out`.
        """


class AttentionDenseTritonKernel(Kernel, AttentionDenseFwdInterface):
    """The Triton flash-attention forward over strided [B, H, S, D] tensors."""

    devices = TRITON_DEVICES
    applies = _TRITON_APPLIES

    @classmethod
    def refusal(cls, call):
        return _interpreter_refusal(call) or super().refusal(call)

    @classmethod
    def entry_for(cls, call):
        # the kernel object holds nothing shape-specific
        return (call.dtype, call.head_dim, call.causal, call.device), lambda: cls(call)

    def forward(self, q, k, v, out, scale):
        return attention_dense_triton(q, k, v, out, self.call.causal, scale)


class AttentionDenseReferenceKernel(Kernel, AttentionDenseFwdInterface):
    """torch: scores, softmax and products in float32; every device, the fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, q, k, v, out, scale):
        out.copy_(attention_dense_reference(q, k, v, self.call.causal, scale))
        return out


class AttentionVarlenFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = AttentionCall

    @abc.abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                out: torch.Tensor, softmax_scale: float | None,
                max_seqlen_k: int | None = None) -> torch.Tensor:
        """`out = flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, ...,
        softmax_scale, causal=call.causal)` (bottom-right causal mask; rows that see no
        key are zero).

        q: [total_q, H, D], k and v: [total_k, H_kv, D] with H_kv dividing H, the call's
        dtype and head size, on the call's device, any strides; cu_seqlens_q and
        cu_seqlens_k: int32 [B + 1] on the same device, offsets into the token axes, no
        sequence longer than max_seqlen_q queries; max_seqlen_k, the longest key
        sequence (None: unknown), sizes work only and is never trusted for results.
        out: [total_q, H, D], same dtype; every row inside a sequence is written.
        Returns `out`.
        """


class AttentionVarlenTritonKernel(Kernel, AttentionVarlenFwdInterface):
    """The Triton flash-attention forward, each program reading its sequence's offsets."""

    devices = TRITON_DEVICES
    applies = _TRITON_APPLIES

    @classmethod
    def refusal(cls, call):
        return _interpreter_refusal(call) or super().refusal(call)

    @classmethod
    def entry_for(cls, call):
        return (call.dtype, call.head_dim, call.causal, call.device), lambda: cls(call)

    def forward(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, out, softmax_scale,
                max_seqlen_k=None):
        return attention_varlen_triton(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                       out, softmax_scale, self.call.causal,
                                       max_seqlen_k=max_seqlen_k)


class AttentionVarlenReferenceKernel(Kernel, AttentionVarlenFwdInterface):
    """torch, one sequence at a time (reads the offsets on the host); the fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, out, softmax_scale,
                max_seqlen_k=None):
        out.copy_(attention_varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                             softmax_scale, self.call.causal))
        return out
