"""Values of the `MGroupedLayout` ADT (manifest/types.yaml): how the rows of an M-grouped
GEMM belong to experts.

    from opspec.ops.moe_layout import Contiguous, Masked
    MoeGroupedGemmFwdOp(layout=Contiguous(packing='aligned', metadata_kind='per_row',
                                          alignment=128))
    MoeGroupedGemmFwdOp(layout=Masked(max_m=128), activation='silu_and_mul')

The classes only carry the fields; an op taking the layout checks them (field values and
the constructor's `invariant`) when it is constructed. `kind` is the constructor's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from opspec.schema.values import field_of

__all__ = ["Contiguous", "Masked", "as_layout"]


@dataclass(frozen=True)
class Contiguous:
    """Every expert's rows packed into one `[M, K]` array, expert after expert.

    packing: `'aligned'` (each expert's segment starts at a multiple of `alignment`) or
    `'tight'` (no padding; `alignment` must be 1). metadata_kind: `'per_row'` (an expert
    id per row, `[M]`) or `'physical_psum'` (the end of each expert's rows, `[E]`).
    alignment: a power of two up to 1024; 1 exactly for tight packing.
    """

    packing: str
    metadata_kind: str
    alignment: int
    kind: ClassVar[str] = "contiguous"


@dataclass(frozen=True)
class Masked:
    """`max_m` rows reserved per expert, `[E, max_m, K]`; the metadata `[E]` says how many
    of them are valid."""

    max_m: int
    kind: ClassVar[str] = "masked"


_FIELDS = {"contiguous": ("packing", "metadata_kind", "alignment"), "masked": ("max_m",)}
_CLASSES = {"contiguous": Contiguous, "masked": Masked}


def as_layout(value: Any) -> Contiguous | Masked:
    """The layout as one of the classes above, from any form an op accepts: an instance,
    a `{constructor: {field: value}}` mapping, an `opspec.schema.values.ADTValue`, or an
    object with `kind` and field attributes (enum fields by their `.value`)."""
    if isinstance(value, (Contiguous, Masked)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (ctor, fields), = value.items()
        return _CLASSES[ctor](**fields)
    ctor = field_of(value, "kind")
    return _CLASSES[ctor](**{f: field_of(value, f) for f in _FIELDS[ctor]})
