"""The rotary-embedding kernel interface, its call spec and its two implementations."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch

from opspec.kernels.devices import REFERENCE_DEVICES, TRITON_DEVICES
from opspec.kernels.rope import rotary_embedding_reference, rotary_embedding_triton
from opspec.ops.dispatch import CallSpec, Kernel, KernelInterface


@dataclass(frozen=True)
class RotaryEmbeddingCall(CallSpec):
    dtype: str
    cache_dtype: str
    head_size: int
    is_neox: bool


class RotaryEmbeddingFwdInterface(KernelInterface):
    request: ClassVar[type[CallSpec]] = RotaryEmbeddingCall

    @abc.abstractmethod
    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                cos_sin_cache: torch.Tensor) -> None:
        """Rotate `query` and `key` in place by the angles of `positions`.

        positions: [T] int64 in [0, max_position); query: [T, H * head_size] or
        [T, H, head_size] of the call's dtype, key the same form with H_kv heads, any
        strides, on the call's device; cos_sin_cache: [max_position, rotary_dim] of the
        call's cache dtype (rotary_dim / 2 cosines, then as many sines), rotary_dim even and
        at most head_size. The first rotary_dim features of every head are rotated (neox or
        gptj pairing, `is_neox`), the rest are not touched. fp32 math. Returns None.
        """


class RotaryEmbeddingTritonKernel(Kernel, RotaryEmbeddingFwdInterface):
    """One program per (token, block of heads), cos/sin loaded once per program, in place."""

    devices = TRITON_DEVICES

    @classmethod
    def entry_for(cls, call):
        # The kernel object holds nothing shape-specific: one entry per pairing and device.
        return (call.is_neox, call.device), lambda: cls(call)

    def forward(self, positions, query, key, cos_sin_cache):
        rotary_embedding_triton(positions, query, key, cos_sin_cache, self.call.head_size,
                                self.call.is_neox)


class RotaryEmbeddingReferenceKernel(Kernel, RotaryEmbeddingFwdInterface):
    """The torch reference, copied back into the inputs: every device, the general fallback."""

    devices = REFERENCE_DEVICES
    general = True

    def forward(self, positions, query, key, cos_sin_cache):
        q, k = rotary_embedding_reference(positions, query, key, cos_sin_cache,
                                          self.call.head_size, self.call.is_neox)
        query.copy_(q)
        key.copy_(k)
