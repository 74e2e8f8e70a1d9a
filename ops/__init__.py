"""The opspec runtime: the `Op` base class and the bundled operators.

Names are imported on first use, so that kernel modules can import `opspec.ops.dispatch`
(the kernel interface contract) without importing every op class.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Op": "opspec.ops.op",
    "SignatureCall": "opspec.ops.records",
    "GemmFwdOp": "opspec.ops.gemm",
    "SiluAndMulFwdOp": "opspec.ops.elementwise",
    "ReluFwdOp": "opspec.ops.activation",
    "SiluFwdOp": "opspec.ops.activation",
    "GeluFwdOp": "opspec.ops.activation",
    "GeluAndMulFwdOp": "opspec.ops.elementwise",
    "RMSNormFwdOp": "opspec.ops.norm",
    "LayerNormFwdOp": "opspec.ops.norm",
    "FusedAddRMSNormFwdOp": "opspec.ops.norm",
    "RotaryEmbeddingFwdOp": "opspec.ops.rope",
    "AddFwdOp": "opspec.ops.binary",
    "MulFwdOp": "opspec.ops.binary",
    "SoftmaxFwdOp": "opspec.ops.softmax",
    "LogSoftmaxFwdOp": "opspec.ops.softmax",
    "SumFwdOp": "opspec.ops.reduction",
    "MeanFwdOp": "opspec.ops.reduction",
    "AmaxFwdOp": "opspec.ops.reduction",
    "MaxPool2dFwdOp": "opspec.ops.pool",
    "AvgPool2dFwdOp": "opspec.ops.pool",
    "GroupedQueryAttentionDenseFwdOp": "opspec.ops.attention",
    "GroupedQueryAttentionVarlenFwdOp": "opspec.ops.attention",
    "GroupedGemmFwdOp": "opspec.ops.grouped_gemm",
    "MoeExpertMLPFwdOp": "opspec.ops.grouped_gemm",
    "BmmFwdOp": "opspec.ops.bmm",
    "MoeGroupedGemmFwdOp": "opspec.ops.moe",
    "GemmW4A16FwdOp": "opspec.ops.quant_gemm",
    # one line per bundled op class: "ClassName": "opspec.ops.<family>",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opspec.ops' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
