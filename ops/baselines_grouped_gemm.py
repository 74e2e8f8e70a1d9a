"""Bench entries of the grouped_gemm family: GroupedGemmFwdOp and MoeExpertMLPFwdOp.

References: the per-group products on the float64 inputs the bench passes (the group sizes
stay integers), and for the MLP the float64 gate_up, SiluAndMul and down of each group.

Baselines:

* `eager`: what a model does without a grouped kernel: read the sizes on the host
  (`batch_sizes.tolist()`, a device synchronisation), one `torch.matmul` per group (cuBLAS)
  on the row slice, results concatenated; for the MLP, gate_up, `F.silu(h[:, :I]) * h[:, I:]`
  and down per group.
* `compile`: `torch.compile(fullgraph=True)` of that same loop. The sizes are data: Dynamo
  captures `tolist()` as unbacked sizes (the `torch._check`s bound them for Inductor) and the
  graph holds one matmul per group. Whether a given torch build compiles it is settled when
  the baseline is built, by running it once on the case's shapes; if that fails the
  baseline is reported unavailable with the error, rather than failing the row.
* `grouped_mm`: PyTorch's own grouped kernel, `torch._grouped_mm(op(a), op(b),
  offs=cumsum(batch_sizes).int())` (for the MLP: two of them around the same SiluAndMul);
  unavailable where this torch build or device does not run it for the case's dtype and
  layout (it is probed on a tiny problem when the baseline is built).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from opspec.kernels.grouped_gemm import grouped_gemm_reference, moe_expert_mlp_reference
from opspec.ops.bench_types import BaselineUnavailable, BenchEntry, Tolerance

__all__ = ["BENCH"]


# --- references ---------------------------------------------------------------------------


def _grouped_gemm_reference(op: Any, a: torch.Tensor, b: torch.Tensor,
                            batch_sizes: torch.Tensor) -> torch.Tensor:
    return grouped_gemm_reference(a, b, batch_sizes, bool(op.transpose_a), bool(op.transpose_b))


def _moe_expert_mlp_reference(op: Any, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                              batch_sizes: torch.Tensor) -> torch.Tensor:
    return moe_expert_mlp_reference(x, w13, w2, batch_sizes)


# --- the per-group loops ------------------------------------------------------------------


def _grouped_gemm_loop(op: Any) -> Callable[..., torch.Tensor]:
    transpose_a, transpose_b = bool(op.transpose_a), bool(op.transpose_b)

    def grouped_gemm(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        A = a.t() if transpose_a else a
        B = b.transpose(1, 2) if transpose_b else b
        outs = []
        start = 0
        for g, n in enumerate(batch_sizes.tolist()):
            # Bounds for the compiled form's unbacked sizes; no-ops in eager.
            torch._check(n >= 0)
            torch._check(start + n <= A.shape[0])
            outs.append(torch.matmul(A.narrow(0, start, n), B[g]))
            start += n
        return torch.cat(outs) if outs else A.new_empty((A.shape[0], B.shape[2]))

    return grouped_gemm


def _moe_expert_mlp_loop(op: Any) -> Callable[..., torch.Tensor]:
    def moe_expert_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                       batch_sizes: torch.Tensor) -> torch.Tensor:
        inter = w2.shape[1]
        outs = []
        start = 0
        for g, n in enumerate(batch_sizes.tolist()):
            torch._check(n >= 0)
            torch._check(start + n <= x.shape[0])
            h = torch.matmul(x.narrow(0, start, n), w13[g])
            outs.append(torch.matmul(F.silu(h[:, :inter]) * h[:, inter:], w2[g]))
            start += n
        return torch.cat(outs) if outs else torch.empty_like(x)

    return moe_expert_mlp


# --- compile: built and run once on the case's shapes ----------------------------------


def _probe_inputs(op: Any) -> tuple:
    """Inputs of the op's last call's shapes and dtypes (contiguous, as workloads make
    them), with its real group sizes."""
    call = op.last_call
    names = op._info().inputs
    out = []
    for name in names:
        if name in call.metadata:
            out.append(call.metadata[name])
            continue
        rec = call.tensors[name]
        out.append(torch.zeros(rec.shape, dtype=getattr(torch, rec.dtype), device=call.device))
    return tuple(out)


def _compiled(fn_of_op: Callable[[Any], Callable[..., torch.Tensor]]):
    def factory(op: Any) -> Callable[..., torch.Tensor]:
        import torch._dynamo

        torch._dynamo.reset()
        fn = torch.compile(fn_of_op(op), fullgraph=True, dynamic=False)
        try:
            fn(*_probe_inputs(op))
        except Exception as exc:  # any compile failure: report it, time nothing
            raise BaselineUnavailable(
                f"torch.compile(fullgraph=True) of the per-group loop fails here: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        return fn

    return factory


# --- torch._grouped_mm --------------------------------------------------------------------


def _offs(batch_sizes: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(batch_sizes, 0, dtype=torch.int32)


def _check_grouped_mm(device: torch.device, dtype: torch.dtype, transpose_a: bool,
                      transpose_b: bool) -> None:
    """Raise BaselineUnavailable unless torch._grouped_mm runs this dtype and layout here."""
    if not hasattr(torch, "_grouped_mm"):
        raise BaselineUnavailable("this torch build has no torch._grouped_mm")
    try:
        a = torch.zeros((32, 16) if transpose_a else (16, 32), dtype=dtype, device=device)
        b = torch.zeros((2, 32, 32), dtype=dtype, device=device)
        A = a.t() if transpose_a else a
        B = b.transpose(1, 2) if transpose_b else b
        torch._grouped_mm(A, B, offs=torch.tensor([8, 16], dtype=torch.int32, device=device))
    except Exception as exc:
        raise BaselineUnavailable(f"torch._grouped_mm does not run {dtype} here "
                                  f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


def _grouped_mm_gemm(op: Any) -> Callable[..., torch.Tensor]:
    transpose_a, transpose_b = bool(op.transpose_a), bool(op.transpose_b)
    call = op.last_call
    _check_grouped_mm(call.device, getattr(torch, call.indices["T"]), transpose_a, transpose_b)

    def grouped_gemm(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        A = a.t() if transpose_a else a
        B = b.transpose(1, 2) if transpose_b else b
        return torch._grouped_mm(A, B, offs=_offs(batch_sizes))

    return grouped_gemm


def _grouped_mm_mlp(op: Any) -> Callable[..., torch.Tensor]:
    call = op.last_call
    _check_grouped_mm(call.device, getattr(torch, call.indices["T"]), False, False)

    def moe_expert_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                       batch_sizes: torch.Tensor) -> torch.Tensor:
        inter = w2.shape[1]
        offs = _offs(batch_sizes)
        h = torch._grouped_mm(x, w13, offs=offs)
        return torch._grouped_mm(F.silu(h[:, :inter]) * h[:, inter:], w2, offs=offs)

    return moe_expert_mlp


# --- entries --------------------------------------------------------------------------------

_COMPILE = ("torch.compile(fullgraph=True) of the same per-group loop (sizes captured as "
            "unbacked; unavailable where it does not compile)")
_GROUPED_MM = "torch._grouped_mm with offs = cumsum(batch_sizes) (int32), where it runs"

#: The MLP rounds [M, 2I] and [M, I] intermediates to the input dtype between its stages,
#: which the float64 reference does not: a wider per-element bound than one GEMM's.
_MLP_TOLERANCES = {
    torch.float16: Tolerance(5e-3, 1e-2, 1e-2),
    torch.bfloat16: Tolerance(1.5e-2, 3e-2, 3e-2),
}

BENCH = {
    "GroupedGemmFwdOp": BenchEntry(
        _grouped_gemm_reference,
        {"eager": _grouped_gemm_loop, "compile": _compiled(_grouped_gemm_loop),
         "grouped_mm": _grouped_mm_gemm},
        {"eager": "a torch.matmul per group on its row slice (sizes read on the host), "
                  "concatenated",
         "compile": _COMPILE, "grouped_mm": _GROUPED_MM}),
    "MoeExpertMLPFwdOp": BenchEntry(
        _moe_expert_mlp_reference,
        {"eager": _moe_expert_mlp_loop, "compile": _compiled(_moe_expert_mlp_loop),
         "grouped_mm": _grouped_mm_mlp},
        {"eager": "per group (sizes read on the host): x_g @ w13[g], F.silu(gate) * up, "
                  "@ w2[g]; concatenated",
         "compile": _COMPILE,
         "grouped_mm": "torch._grouped_mm for gate_up and down around F.silu(gate) * up, "
                       "where it runs"},
        _MLP_TOLERANCES),
}
