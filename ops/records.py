"""Call records: what one completed call of an op was, in the signature's terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class TensorRecord:
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class SignatureCall:
    """A completed call: treat as immutable.

    `indices`: the solved indices, the parameters and the lets; `branch_key`: the
    discriminant values of the branch taken; `tensors`: shape and dtype of every tensor of
    the signature that took part, by signature name; `traffic`: (reads, writes) per tensor
    from the effect rules; `written`: the inputs the call wrote; `stages`: sub-op calls of a
    composite, by stage name, in completion order.
    """

    op: str
    indices: Mapping[str, Any]
    branch_key: tuple[tuple[str, Any], ...]
    device: Any
    tensors: Mapping[str, TensorRecord]
    traffic: Mapping[str, tuple[int, int]]
    written: tuple[str, ...] = ()
    has_out: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)
    stages: Mapping[str, tuple["SignatureCall", ...]] = field(default_factory=dict)

    def present(self, name: str) -> bool:
        if name == "out":
            return self.has_out
        return name in self.tensors

    def bytes(self, name: str) -> int:
        from opspec.schema.kinds import DTYPES

        t = self.tensors[name]
        n = 1
        for d in t.shape:
            n *= int(d)
        return n * DTYPES[t.dtype][0] // 8

    def metadata_values(self, name: str) -> list:
        t = self.metadata[name]
        if getattr(t, "is_meta", False):
            raise ValueError(f"{self.op}: the contents of metadata tensor `{name}` are on the meta "
                             "device and cannot be read")
        return t.tolist()
