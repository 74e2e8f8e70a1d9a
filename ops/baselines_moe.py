"""Bench entries of the moe family: MoeGroupedGemmFwdOp.

The reference is the per-expert torch reference in float64 (one matmul per expert, rows of
no expert 0). The torch baseline, timed eagerly and compiled, is what a PyTorch MoE layer
writes without host synchronisation: `torch._grouped_mm` over the packed rows with the
expert ends as offsets (contiguous; the ends of `per_row` ids found by `searchsorted`),
or one `torch.bmm` over every expert's max_m rows (masked); then vLLM's silu_and_mul in
the input dtype and the rows of no expert set to 0. DeepGEMM's bf16 m-grouped GEMMs are
an extra baseline where DeepGEMM is installed (bfloat16; contiguous only with `per_row`
ids and 128-row alignment, as DeepGEMM takes them; masked).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from opspec.kernels.moe import moe_grouped_gemm_reference
from opspec.ops.bench_types import BaselineUnavailable, torch_entry
from opspec.ops.moe_layout import as_layout

__all__ = ["BENCH"]


def _reference(op: Any, x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor) -> torch.Tensor:
    lay = as_layout(op.layout)
    if lay.kind == "masked":
        return moe_grouped_gemm_reference(x, w, metadata, "masked", activation=op.activation)
    return moe_grouped_gemm_reference(x, w, metadata, "contiguous", lay.metadata_kind,
                                      lay.alignment, op.activation)


def _silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    n = h.shape[-1] // 2
    return F.silu(h[..., :n]) * h[..., n:]


def _grouped_fn(op: Any) -> Callable[..., torch.Tensor]:
    lay = as_layout(op.layout)
    silu = op.activation == "silu_and_mul"

    def moe_grouped_gemm(x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor) -> torch.Tensor:
        E = w.shape[0]
        if lay.kind == "masked":
            h = torch.bmm(x, w.transpose(1, 2))
            rows = torch.arange(x.shape[1], device=x.device, dtype=metadata.dtype)
            valid = rows[None, :] < metadata[:, None]
        else:
            rows = torch.arange(x.shape[0], device=x.device, dtype=metadata.dtype)
            if lay.metadata_kind == "per_row":
                experts = torch.arange(E, device=x.device, dtype=metadata.dtype)
                ends = torch.searchsorted(metadata, experts, right=True).to(torch.int32)
                valid = torch.ones_like(rows, dtype=torch.bool)
            else:
                ends = metadata
                ids = torch.searchsorted(ends, rows, right=True)
                prev = torch.where(ids > 0, ends[(ids - 1).clamp(0, E - 1)], 0)
                start = (prev + lay.alignment - 1) // lay.alignment * lay.alignment
                valid = (ids < E) & (rows >= start)
            h = torch._grouped_mm(x, w.transpose(1, 2), offs=ends)
        y = _silu_and_mul(h) if silu else h
        return torch.where(valid[..., None], y, 0)

    return moe_grouped_gemm


def _deep_gemm_fn(op: Any) -> Callable[..., torch.Tensor]:
    """DeepGEMM's `m_grouped_bf16_gemm_nt_contiguous` (per_row, alignment 128) and
    `m_grouped_bf16_gemm_nt_masked`, then silu_and_mul in bfloat16 where asked."""
    try:
        import deep_gemm
    except ImportError as exc:
        raise BaselineUnavailable(f"DeepGEMM is not installed here ({exc})") from None
    lay = as_layout(op.layout)
    # The bench runs the op once before it builds the baselines: its call gives the dtype.
    if op.last_call.indices.get("T") != "bfloat16":
        raise BaselineUnavailable("DeepGEMM's m-grouped GEMMs take bfloat16")
    if lay.kind == "contiguous" and (lay.metadata_kind != "per_row" or lay.alignment != 128):
        raise BaselineUnavailable("DeepGEMM's contiguous GEMM takes per-row expert ids "
                                  "with 128-row alignment")
    silu = op.activation == "silu_and_mul"

    def moe_grouped_gemm(x: torch.Tensor, w: torch.Tensor, metadata: torch.Tensor) -> torch.Tensor:
        h = torch.empty((*x.shape[:-1], w.shape[1]), dtype=x.dtype, device=x.device)
        if lay.kind == "masked":
            deep_gemm.m_grouped_bf16_gemm_nt_masked(x, w, h, metadata, x.shape[1])
        else:
            deep_gemm.m_grouped_bf16_gemm_nt_contiguous(x, w, h, metadata)
        y = _silu_and_mul(h) if silu else h
        if lay.kind == "masked":
            rows = torch.arange(x.shape[1], device=x.device, dtype=metadata.dtype)
            y = torch.where((rows[None, :] < metadata[:, None])[..., None], y, 0)
        return y

    return moe_grouped_gemm


BENCH = {
    "MoeGroupedGemmFwdOp": torch_entry(
        _reference, _grouped_fn,
        "torch._grouped_mm over the packed rows with the expert ends as offsets (contiguous) "
        "or torch.bmm over max_m rows per expert (masked), then F.silu(gate) * up, rows of "
        "no expert set to 0",
        extra={"deep_gemm": (_deep_gemm_fn, "DeepGEMM's m_grouped_bf16_gemm_nt_contiguous / "
                                            "_masked (+ silu_and_mul in torch), where installed")}),
}
