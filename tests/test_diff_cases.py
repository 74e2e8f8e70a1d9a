"""`opspec diff`, check by check: at least three incompatible changes per id of
`DIFF_CHECK_IDS`, each pinned by the check id, the op, the declaration path (and side) of
its finding, and the concrete counterexample it reports: the call, the parameter values,
the positions and names, or the tensor shapes and dtypes (checked to be a call OLD accepts
and NEW rejects, or types differently).

Every change starts from a small spec modelled on a bundled op (a GEMM with a transposable
`b`, an RMSNorm with an optional weight, a softmax over one axis, a broadcasting add; for
`undecided`, an op whose refinements are nonlinear), written to `old/` and `new/` folders
of a temporary directory. Two misses of `opspec diff` are pinned here too: a `float | None`
parameter narrowed to `float` (None no longer accepted), and a change of what an output's
type reads from a `Maybe` parameter (`coalesce_dtype(dtype, T)`), which only the branch
passing the parameter shows.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from opspec.cli.main import main
from opspec.schema.diagnostics import DIFF_CHECK_IDS
from opspec.schema.loader import load_paths
from opspec.solver.diff import (
    COMPATIBLE, INCOMPATIBLE, REMOVED, UNKNOWN, DiffReport, Finding, diff_manifests,
)
from prove_support import toy

FIELDS = ("types", "forall", "params", "inputs", "outputs", "let", "shape_rules")


def build(op: str, parts: dict[str, str | None], changes: dict[str, str | None]) -> str:
    """The family-file text of `op` whose `signature:` is `parts` with `changes` applied
    (a field set to None is dropped)."""
    merged = {**parts, **changes}
    out = []
    for key in FIELDS:
        body = merged.get(key)
        if body is None:
            continue
        body = textwrap.dedent(body).strip("\n")
        flow = body.startswith(("{", "[", '"'))
        out.append(f"{key}: {body}" if flow else f"{key}:\n" + textwrap.indent(body, "  "))
    return toy("\n".join(out), op=op)


# -- the ops the changes start from ----------------------------------------------------------

GEMM_OP, NORM_OP, SOFTMAX_OP, ADD_OP = "GemmFwdOp", "RmsNormFwdOp", "SoftmaxFwdOp", "AddFwdOp"

#: c = a @ b (b transposed with `trans_b`), an optional bias over the columns.
GEMM = {
    "types": """
        Mat:
          params: {t: Bool, R: Dim, C: Dim}
          match: t
          cases:
          - {when: false, is: "[R, C]"}
          - {when: true, is: "[C, R]"}
        """,
    "forall": '{M: Dim, N: Dim, K: Dim, T: "DType[float16 | bfloat16]"}',
    "params": """
        trans_b: {type: bool, default: false}
        """,
    "inputs": """
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]"}
        bias: {dtype: T, shape: "[N]", optional: true}
        """,
    "outputs": """
        c: {dtype: T, shape: "[M, N]"}
        """,
}

#: y = x / rms(x) * weight over the last axis; `affine` says whether a weight is used.
NORM = {
    "forall": '{S: Shape, N: Dim, T: "DType[float16 | bfloat16 | float32]"}',
    "params": """
        eps: {type: float, default: 1.0e-6}
        affine: {type: bool, default: true}
        """,
    "inputs": """
        x: {dtype: T, shape: "[*S, N]"}
        weight: {dtype: T, shape: "[N]", optional: true}
        """,
    "outputs": """
        y: {dtype: T, shape: "[*S, N]"}
        """,
    "shape_rules": '["len(S) <= 3"]',
}

#: torch.softmax: `dim` counted from the end when negative, `dtype` the result's dtype.
SOFTMAX = {
    "forall": '{S: Shape, T: "DType[float16 | bfloat16 | float32]"}',
    "params": """
        dim: {type: int}
        dtype: {type: "float16 | bfloat16 | float32 | None", default: null, kw_only: true}
        """,
    "inputs": """
        input: {dtype: T, shape: "[*S]"}
        """,
    "outputs": """
        output: {dtype: "coalesce_dtype(dtype, T)", shape: "[*S]"}
        """,
    "shape_rules": '["1 <= len(S) <= 3", "-len(S) <= dim < len(S)"]',
}

#: torch.add of two same-dtype tensors, broadcast.
ADD = {
    "forall": '{A: Shape, B: Shape, T: "DType[float16 | bfloat16 | float32]"}',
    "inputs": """
        input: {dtype: T, shape: "[*A]"}
        other: {dtype: T, shape: "[*B]"}
        """,
    "outputs": """
        output: {dtype: T, shape: "[*broadcast(A, B)]"}
        """,
    "shape_rules": '["len(A) <= 3", "len(B) <= 3"]',
}

def gemm(**changes: str | None) -> str:
    return build(GEMM_OP, GEMM, changes)


def norm(**changes: str | None) -> str:
    return build(NORM_OP, NORM, changes)


def softmax(**changes: str | None) -> str:
    return build(SOFTMAX_OP, SOFTMAX, changes)


def add(**changes: str | None) -> str:
    return build(ADD_OP, ADD, changes)


# -- what a counterexample must be -----------------------------------------------------------

def torch_broadcast(a: tuple, b: tuple) -> tuple:
    """torch's broadcast of two shapes (None when they do not broadcast)."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def tensor(dtype: str, shape) -> str:
    return f"Tensor[{dtype}, [{', '.join(map(str, shape))}]]"


# -- the table ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    check: str
    name: str
    old: str
    new: str
    op: str
    path: str | None
    #: asserts the counterexample (and what else the finding pins: message parts, ...)
    expect: Callable[[Finding], None]
    side: str = "new"
    verdict: str = INCOMPATIBLE
    rlimit: int | None = None
    #: how many findings of `check` at `path` (one per branch where a branch is reported)
    count: int = 1

    @property
    def id(self) -> str:
        return f"{self.check}:{self.name}"


CASES: list[Case] = []


def case(check: str, name: str, old: str, new: str, op: str, path: str | None, **kw: Any):
    """Register a case; its `expect` is the decorated function."""
    def register(expect: Callable[[Finding], None]) -> Callable[[Finding], None]:
        CASES.append(Case(check, name, old, new, op, path, expect, **kw))
        return expect
    return register


# removed-op: an op of OLD that NEW lacks (the finding points at OLD's op key).

@case("removed-op", "norm-dropped-from-the-family", gemm() + norm(), gemm(), NORM_OP, None,
      side="old", verdict=REMOVED)
def _(f):
    assert f.counterexample is None and "`RmsNormFwdOp` is in OLD but not in NEW" in f.message


@case("removed-op", "softmax-renamed", softmax(), build("SoftmaxOp", SOFTMAX, {}), SOFTMAX_OP,
      None, side="old", verdict=REMOVED)
def _(f):
    assert f.counterexample is None and "`SoftmaxFwdOp` is in OLD but not in NEW" in f.message


@case("removed-op", "add-replaced-by-gemm", add(), gemm(), ADD_OP, None, side="old",
      verdict=REMOVED)
def _(f):
    assert f.counterexample is None and "`AddFwdOp` is in OLD but not in NEW" in f.message


# param-removed: a parameter of OLD not in NEW (the finding points at OLD's declaration).

@case("param-removed", "norm-affine-dropped", norm(), norm(params="""
        eps: {type: float, default: 1.0e-6}
        """), NORM_OP, "signature.params.affine", side="old")
def _(f):
    assert f.counterexample == {"call": "RmsNormFwdOp(..., <affine>)"}     # position 1


@case("param-removed", "softmax-kw-only-dtype-dropped", softmax(), softmax(params="""
        dim: {type: int}
        """, outputs="""
        output: {dtype: T, shape: "[*S]"}
        """), SOFTMAX_OP, "signature.params.dtype", side="old")
def _(f):
    assert f.counterexample == {"call": "SoftmaxFwdOp(dtype=...)"}       # keyword-only
    assert "keyword-only parameter `dtype`" in f.message


@case("param-removed", "gemm-trans-b-dropped", gemm(), gemm(params=None, inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "[K, N]"}
        bias: {dtype: T, shape: "[N]", optional: true}
        """), GEMM_OP, "signature.params.trans_b", side="old")
def _(f):
    assert f.counterexample == {"call": "GemmFwdOp(<trans_b>)"}           # position 0


# param-renamed: a positional parameter under another name (at NEW's declaration).

@case("param-renamed", "norm-eps-to-epsilon", norm(), norm(params="""
        epsilon: {type: float, default: 1.0e-6}
        affine: {type: bool, default: true}
        """), NORM_OP, "signature.params.epsilon")
def _(f):
    assert f.counterexample == {"call": "RmsNormFwdOp(eps=...)"}
    assert "`eps` (position 0) was renamed to `epsilon`" in f.message


@case("param-renamed", "softmax-dim-to-axis", softmax(), softmax(params="""
        axis: {type: int}
        dtype: {type: "float16 | bfloat16 | float32 | None", default: null, kw_only: true}
        """, shape_rules='["1 <= len(S) <= 3", "-len(S) <= axis < len(S)"]'),
      SOFTMAX_OP, "signature.params.axis")
def _(f):
    assert f.counterexample == {"call": "SoftmaxFwdOp(dim=...)"}
    assert "`dim` (position 0) was renamed to `axis`" in f.message


@case("param-renamed", "gemm-trans-b-to-transpose-b", gemm(), gemm(params="""
        transpose_b: {type: bool, default: false}
        """, inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[transpose_b, K, N]"}
        bias: {dtype: T, shape: "[N]", optional: true}
        """), GEMM_OP, "signature.params.transpose_b")
def _(f):
    assert f.counterexample == {"call": "GemmFwdOp(trans_b=...)"}
    assert "`trans_b` (position 0) was renamed to `transpose_b`" in f.message


# param-moved: a positional parameter at another position, or made keyword-only.

@case("param-moved", "norm-eps-and-affine-swapped", norm(), norm(params="""
        affine: {type: bool, default: true}
        eps: {type: float, default: 1.0e-6}
        """), NORM_OP, "signature.params.eps")
def _(f):
    # RmsNormFwdOp(1e-5) now sets `affine`.
    assert f.counterexample == {"call": "RmsNormFwdOp(<eps>)", "binds <eps> to": "affine"}
    assert "moved from position 0 to 1" in f.message


@case("param-moved", "softmax-dim-keyword-only", softmax(), softmax(params="""
        dim: {type: int, kw_only: true}
        dtype: {type: "float16 | bfloat16 | float32 | None", default: null, kw_only: true}
        """), SOFTMAX_OP, "signature.params.dim")
def _(f):
    assert f.counterexample == {"call": "SoftmaxFwdOp(<dim>)"}
    assert "(position 0 in OLD) is keyword-only in NEW" in f.message


@case("param-moved", "gemm-new-parameter-in-front", gemm(), gemm(params="""
        split_k: {type: int, default: 1}
        trans_b: {type: bool, default: false}
        """), GEMM_OP, "signature.params.trans_b")
def _(f):
    # GemmFwdOp(True) now means split_k=True.
    assert f.counterexample == {"call": "GemmFwdOp(<trans_b>)", "binds <trans_b> to": "split_k"}
    assert "moved from position 0 to 1" in f.message


# param-required: a new parameter without a default, or one that lost its default.

@case("param-required", "gemm-new-split-k-without-default", gemm(), gemm(params="""
        trans_b: {type: bool, default: false}
        split_k: {type: int}
        """), GEMM_OP, "signature.params.split_k")
def _(f):
    assert f.counterexample == {"call": "GemmFwdOp(<OLD's arguments>)"}
    assert f.hint == "give `split_k` a default (at the end of the parameters)"


@case("param-required", "norm-eps-lost-its-default", norm(), norm(params="""
        eps: {type: float}
        affine: {type: bool, default: true}
        """), NORM_OP, "signature.params.eps")
def _(f):
    assert f.counterexample == {"call": "RmsNormFwdOp(<without eps>)"}
    assert "lost its default" in f.message


@case("param-required", "norm-construction-weight-made-required", norm(params="""
        eps: {type: float, default: 1.0e-6}
        weight: {dtype: T, shape: "[N]", optional: true}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        """), norm(params="""
        eps: {type: float, default: 1.0e-6}
        weight: {dtype: T, shape: "[N]"}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        """), NORM_OP, "signature.params.weight")
def _(f):
    assert f.counterexample == {"call": "RmsNormFwdOp(<without weight>)"}
    assert "lost its `optional`" in f.message


# param-default: a default that changed (a call that omits the parameter means another one).

@case("param-default", "gemm-trans-b-default-flipped", gemm(), gemm(params="""
        trans_b: {type: bool, default: true}
        """), GEMM_OP, "signature.params.trans_b")
def _(f):
    assert f.counterexample == {"call": "GemmFwdOp(<without trans_b>)",
                                "trans_b (OLD default)": False, "trans_b (NEW default)": True}


@case("param-default", "norm-eps-default-raised", norm(), norm(params="""
        eps: {type: float, default: 1.0e-5}
        affine: {type: bool, default: true}
        """), NORM_OP, "signature.params.eps")
def _(f):
    assert f.counterexample == {"call": "RmsNormFwdOp(<without eps>)",
                                "eps (OLD default)": 1e-6, "eps (NEW default)": 1e-5}


@case("param-default", "softmax-dtype-default-float32", softmax(), softmax(params="""
        dim: {type: int}
        dtype: {type: "float16 | bfloat16 | float32 | None", default: float32, kw_only: true}
        """), SOFTMAX_OP, "signature.params.dtype")
def _(f):
    assert f.counterexample == {"call": "SoftmaxFwdOp(<without dtype>)",
                                "dtype (OLD default)": None, "dtype (NEW default)": "float32"}


# param-type: NEW's type accepts fewer values (at NEW's `type`), the value it lost.

@case("param-type", "norm-dims-fixed-to-one-axis", norm(params="""
        eps: {type: float, default: 1.0e-6}
        dims: {type: "list[int]", default: [-1]}
        """), norm(params="""
        eps: {type: float, default: 1.0e-6}
        dims: {type: "tuple[int]", default: [-1]}
        """), NORM_OP, "signature.params.dims.type")
def _(f):
    assert f.counterexample == {"dims": (0, 0)}            # rmsnorm over two axes
    assert "the length is fixed to 1 in NEW" in f.message


@case("param-type", "softmax-dtype-lost-float16", softmax(), softmax(params="""
        dim: {type: int}
        dtype: {type: "bfloat16 | float32 | None", default: null, kw_only: true}
        """), SOFTMAX_OP, "signature.params.dtype.type")
def _(f):
    assert f.counterexample == {"dtype": "float16"}
    assert "the dtype float16 was removed" in f.message


@case("param-type", "norm-mode-lost-a-literal", norm(params="""
        eps: {type: float, default: 1.0e-6}
        mode: {type: "'rms' | 'layer'", default: rms}
        """), norm(params="""
        eps: {type: float, default: 1.0e-6}
        mode: {type: "'rms'", default: rms}
        """), NORM_OP, "signature.params.mode.type")
def _(f):
    assert f.counterexample == {"mode": "layer"}
    assert "the literal 'layer' was removed" in f.message


@case("param-type", "norm-eps-lost-none", norm(params="""
        eps: {type: "float | None", default: 1.0e-6}
        affine: {type: bool, default: true}
        """), norm(), NORM_OP, "signature.params.eps.type")
def _(f):
    assert f.counterexample == {"eps": None}              # RmsNormFwdOp(eps=None)
    assert "None is no longer accepted" in f.message


# input-removed: an input of OLD not in NEW (at OLD's declaration), the call passing it.

@case("input-removed", "add-other-dropped", add(), add(inputs="""
        input: {dtype: T, shape: "[*A]"}
        """, outputs="""
        output: {dtype: T, shape: "[*A]"}
        """, forall='{A: Shape, T: "DType[float16 | bfloat16 | float32]"}',
      shape_rules='["len(A) <= 3"]'), ADD_OP, "signature.inputs.other", side="old")
def _(f):
    assert f.counterexample == {"call": "forward(..., <other>)"}


@case("input-removed", "norm-weight-dropped", norm(), norm(inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        """), NORM_OP, "signature.inputs.weight", side="old")
def _(f):
    assert f.counterexample == {"call": "forward(..., <weight>)"}


@case("input-removed", "gemm-bias-dropped", gemm(), gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]"}
        """), GEMM_OP, "signature.inputs.bias", side="old")
def _(f):
    assert f.counterexample == {"call": "forward(..., ..., <bias>)"}


# input-renamed: an input under another name at the same position (at NEW's declaration).

@case("input-renamed", "softmax-input-to-x", softmax(), softmax(inputs="""
        x: {dtype: T, shape: "[*S]"}
        """), SOFTMAX_OP, "signature.inputs.x")
def _(f):
    assert f.counterexample == {"call": "forward(input=...)"}
    assert "`input` (position 0) was renamed to `x`" in f.message


@case("input-renamed", "add-other-to-y", add(), add(inputs="""
        input: {dtype: T, shape: "[*A]"}
        y: {dtype: T, shape: "[*B]"}
        """), ADD_OP, "signature.inputs.y")
def _(f):
    assert f.counterexample == {"call": "forward(other=...)"}
    assert "`other` (position 1) was renamed to `y`" in f.message


@case("input-renamed", "gemm-b-to-mat2", gemm(), gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        mat2: {dtype: T, shape: "Mat[trans_b, K, N]"}
        bias: {dtype: T, shape: "[N]", optional: true}
        """), GEMM_OP, "signature.inputs.mat2")
def _(f):
    assert f.counterexample == {"call": "forward(b=...)"}
    assert "`b` (position 1) was renamed to `mat2`" in f.message


# input-moved: an input at another position, or moved to the construction parameters.

@case("input-moved", "add-operands-swapped", add(), add(inputs="""
        other: {dtype: T, shape: "[*B]"}
        input: {dtype: T, shape: "[*A]"}
        """), ADD_OP, "signature.inputs.input")
def _(f):
    assert f.counterexample == {"call": "forward(<input>)", "binds <input> to": "other"}
    assert "moved from position 0 to 1" in f.message


@case("input-moved", "norm-weight-to-construction", norm(), norm(params="""
        eps: {type: float, default: 1.0e-6}
        affine: {type: bool, default: true}
        weight: {dtype: T, shape: "[N]", optional: true}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        """), NORM_OP, "signature.params.weight")
def _(f):
    assert f.counterexample == {"call": "forward(..., <weight>)"}
    assert "moved from the call to the construction parameters" in f.message


@case("input-moved", "gemm-scale-inserted-before-bias", gemm(), gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]"}
        scale: {dtype: float32, shape: "[N]", optional: true}
        bias: {dtype: T, shape: "[N]", optional: true}
        """), GEMM_OP, "signature.inputs.bias")
def _(f):
    # forward(a, b, bias) now passes the bias as the scale.
    assert f.counterexample == {"call": "forward(..., ..., <bias>)", "binds <bias> to": "scale"}
    assert "moved from position 2 to 3" in f.message


# input-required: NEW requires a tensor OLD's call does not pass.

@case("input-required", "gemm-new-required-scale", gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]"}
        """), gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]"}
        scale: {dtype: float32, shape: "[N]"}
        """), GEMM_OP, "signature.inputs.scale")
def _(f):
    assert f.counterexample == {"call": "forward(<a>, <b>)"}
    assert f.hint == "make `scale` optional (`optional: true`, after the others)"


@case("input-required", "norm-weight-made-required", norm(), norm(inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        weight: {dtype: T, shape: "[N]"}
        """), NORM_OP, "signature.inputs.weight")
def _(f):
    # rmsnorm(x), without a weight (on the first combination of the flag `affine`)
    assert f.counterexample == {"affine": False, "present(weight)": False}


@case("input-required", "norm-weight-required-when-affine", norm(), norm(inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        weight: {dtype: T, shape: "[N]", optional: "affine"}
        """), NORM_OP, "signature.inputs.weight.optional")
def _(f):
    assert f.counterexample == {"affine": True, "present(weight)": False}


# input-rejected: NEW refuses a tensor OLD's call passes (an `optional` condition).

@case("input-rejected", "norm-bias-only-for-layer-norm", norm(params="""
        eps: {type: float, default: 1.0e-6}
        mode: {type: "'rms' | 'layer'", default: rms}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        bias: {dtype: T, shape: "[N]", optional: true}
        """), norm(params="""
        eps: {type: float, default: 1.0e-6}
        mode: {type: "'rms' | 'layer'", default: rms}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        bias: {dtype: T, shape: "[N]", optional: "mode == 'layer'"}
        """), NORM_OP, "signature.inputs.bias.optional")
def _(f):
    # RmsNormFwdOp(mode='rms')(x, bias): NEW takes a bias only for a layer norm.
    assert f.counterexample == {"mode": "rms", "present(bias)": True}


@case("input-rejected", "gemm-bias-refused-when-transposed", gemm(), gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]"}
        bias: {dtype: T, shape: "[N]", optional: "not trans_b"}
        """), GEMM_OP, "signature.inputs.bias.optional")
def _(f):
    assert f.counterexample == {"trans_b": True, "present(bias)": True}


@case("input-rejected", "norm-weight-behind-a-new-flag", norm(params="""
        eps: {type: float, default: 1.0e-6}
        """), norm(params="""
        eps: {type: float, default: 1.0e-6}
        elementwise_affine: {type: bool, default: false}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        weight: {dtype: T, shape: "[N]", optional: "elementwise_affine"}
        """), NORM_OP, "signature.inputs.weight.optional")
def _(f):
    # OLD's rmsnorm(x, weight): NEW's default elementwise_affine=False refuses the weight.
    assert f.counterexample == {"present(weight)": True}


# input-placement: a tensor's placement tightened (`contiguous`, `device`).

@case("input-placement", "norm-x-made-contiguous", norm(), norm(inputs="""
        x: {dtype: T, shape: "[*S, N]", contiguous: true}
        weight: {dtype: T, shape: "[N]", optional: true}
        """), NORM_OP, "signature.inputs.x")
def _(f):
    assert f.counterexample == {"x.contiguous": False}
    assert "input `x` must be contiguous in NEW" in f.message


@case("input-placement", "gemm-b-moved-to-cpu", gemm(), gemm(inputs="""
        a: {dtype: T, shape: "[M, K]"}
        b: {dtype: T, shape: "Mat[trans_b, K, N]", device: cpu}
        bias: {dtype: T, shape: "[N]", optional: true}
        """), GEMM_OP, "signature.inputs.b")
def _(f):
    assert f.counterexample == {"b.device": "the call device"}
    assert "is on cpu in NEW, on the call device in OLD" in f.message


@case("input-placement", "add-cpu-operand-moved-to-the-call-device", add(inputs="""
        input: {dtype: T, shape: "[*A]"}
        other: {dtype: T, shape: "[*B]", device: cpu}
        """), add(), ADD_OP, "signature.inputs.other")
def _(f):
    assert f.counterexample == {"other.device": "cpu"}


@case("input-placement", "norm-construction-weight-made-contiguous", norm(params="""
        eps: {type: float, default: 1.0e-6}
        weight: {dtype: T, shape: "[N]", optional: true}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        """), norm(params="""
        eps: {type: float, default: 1.0e-6}
        weight: {dtype: T, shape: "[N]", optional: true, contiguous: true}
        """, inputs="""
        x: {dtype: T, shape: "[*S, N]"}
        """), NORM_OP, "signature.params.weight")
def _(f):
    assert f.counterexample == {"weight.contiguous": False}
    assert "construction-time tensor `weight` must be contiguous" in f.message


# output-changed: outputs renamed, added, made None on a call, or `out=` removed.

@case("output-changed", "softmax-output-renamed", softmax(), softmax(outputs="""
        probs: {dtype: "coalesce_dtype(dtype, T)", shape: "[*S]"}
        """), SOFTMAX_OP, "signature.outputs.probs")
def _(f):
    assert f.counterexample == {"OLD outputs": ("output",), "NEW outputs": ("probs",)}


@case("output-changed", "norm-rstd-output-added", norm(), norm(outputs="""
        y: {dtype: T, shape: "[*S, N]"}
        rstd: {dtype: float32, shape: "[*S]"}
        """), NORM_OP, "signature.outputs.rstd")
def _(f):
    assert f.counterexample == {"OLD outputs": ("y",), "NEW outputs": ("y", "rstd")}
    assert "added ['rstd']" in f.message


@case("output-changed", "gemm-out-buffer-removed", gemm(outputs="""
        c: {dtype: T, shape: "[M, N]", buffer: out}
        """), gemm(), GEMM_OP, "signature.outputs.c.buffer", side="old")
def _(f):
    assert f.counterexample == {"present(out)": True}
    assert "NEW takes no `out=` buffer" in f.message


@case("output-changed", "gemm-output-none-when-transposed", gemm(), gemm(outputs="""
        c: {dtype: T, shape: "[M, N]", nullable: "not trans_b"}
        """), GEMM_OP, "signature.outputs.c")
def _(f):
    assert f.counterexample["trans_b"] is True
    assert "`c` is a tensor in OLD and None in NEW" in f.message


# rejected: a NEW declaration rejects a call OLD accepts; the call is checked to be one.

@case("rejected", "softmax-float32-dropped", softmax(),
      softmax(forall='{S: Shape, T: "DType[float16 | bfloat16]"}'),
      SOFTMAX_OP, "signature.forall.T")
def _(f):
    cex = f.counterexample
    assert cex["input.dtype"] == "float32"
    rank = len(cex["input.shape"])
    assert 1 <= rank <= 3 and -rank <= cex["dim"] < rank       # OLD accepts the call
    assert "dtype T must be one of bfloat16 | float16" in f.message


@case("rejected", "gemm-k-multiple-of-8", gemm(), gemm(shape_rules='["K % 8 == 0"]'),
      GEMM_OP, "signature.shape_rules.0")
def _(f):
    cex = f.counterexample
    (_, k), b = cex["a.shape"], cex["b.shape"]
    assert b[1 if cex["trans_b"] else 0] == k                  # OLD accepts the call
    assert k % 8 != 0                                          # NEW does not
    assert cex["a.dtype"] == cex["b.dtype"] in ("float16", "bfloat16")


@case("rejected", "gemm-transposed-case-removed", gemm(), gemm(types="""
        Mat:
          params: {t: Bool, R: Dim, C: Dim}
          match: t
          cases:
          - {when: false, is: "[R, C]"}
        """), GEMM_OP, "signature.types.Mat")
def _(f):
    assert f.counterexample == {"trans_b": True, "present(bias)": False}
    assert "no case of NEW's type family Mat covers t=true" in f.message


@case("rejected", "add-operands-must-match", add(), add(shape_rules='["len(A) <= 3", "A == B"]'),
      ADD_OP, "signature.shape_rules.1")
def _(f):
    a, b = tuple(f.counterexample["input.shape"]), tuple(f.counterexample["other.shape"])
    assert a != b and torch_broadcast(a, b) is not None      # a broadcast OLD accepts


@case("rejected", "norm-hidden-size-capped", norm(),
      norm(shape_rules='["len(S) <= 3", "N <= 8192"]'), NORM_OP, "signature.shape_rules.1")
def _(f):
    shape = f.counterexample["x.shape"]
    assert 1 <= len(shape) <= 4 and shape[-1] > 8192


# output-type: the same call, another output shape or dtype under NEW.

@case("output-type", "gemm-output-float32", gemm(), gemm(outputs="""
        c: {dtype: float32, shape: "[M, N]"}
        """), GEMM_OP, "signature.outputs.c")
def _(f):
    cex = f.counterexample
    (m, k), b = cex["a.shape"], cex["b.shape"]
    k_b, n = (b[1], b[0]) if cex["trans_b"] else b
    assert k_b == k
    assert cex["a.dtype"] in ("float16", "bfloat16")
    assert cex["c (OLD)"] == tensor(cex["a.dtype"], (m, n))
    assert cex["c (NEW)"] == tensor("float32", (m, n))


@case("output-type", "softmax-dtype-argument-ignored", softmax(), softmax(outputs="""
        output: {dtype: T, shape: "[*S]"}
        """), SOFTMAX_OP, "signature.outputs.output")
def _(f):
    cex = f.counterexample
    shape = cex["input.shape"]
    assert cex["present(dtype)"] is True and cex["dtype"] != cex["input.dtype"]
    assert cex["output (OLD)"] == tensor(cex["dtype"], shape)
    assert cex["output (NEW)"] == tensor(cex["input.dtype"], shape)


@case("output-type", "add-output-not-broadcast", add(), add(outputs="""
        output: {dtype: T, shape: "[*A]"}
        """), ADD_OP, "signature.outputs.output")
def _(f):
    cex = f.counterexample
    a, b = tuple(cex["input.shape"]), tuple(cex["other.shape"])
    out = torch_broadcast(a, b)
    assert out is not None and out != a
    assert cex["output (OLD)"] == tensor(cex["input.dtype"], out)
    assert cex["output (NEW)"] == tensor(cex["input.dtype"], a)


@case("output-type", "norm-output-flattened", norm(), norm(outputs="""
        y: {dtype: T, shape: "[prod(S) * N]"}
        """), NORM_OP, "signature.outputs.y")
def _(f):
    cex = f.counterexample
    shape = cex["x.shape"]
    assert cex["y (OLD)"] == tensor(cex["x.dtype"], shape)
    assert cex["y (NEW)"] == tensor(cex["x.dtype"], (math.prod(shape),))


# broken-spec: NEW does not elaborate; the finding names its first error.

@case("broken-spec", "gemm-undeclared-index", gemm(), gemm(outputs="""
        c: {dtype: T, shape: "[M, P]"}
        """), GEMM_OP, None)
def _(f):
    assert f.counterexample is None
    assert "the NEW spec of `GemmFwdOp` has" in f.message
    assert "signature.outputs.c.shape" in f.message and "`P`" in f.message


@case("broken-spec", "norm-unknown-dtype-name", norm(), norm(outputs="""
        y: {dtype: U, shape: "[*S, N]"}
        """), NORM_OP, None)
def _(f):
    assert f.counterexample is None
    assert "signature.outputs.y.dtype" in f.message and "`U`" in f.message


@case("broken-spec", "softmax-unparsable-rule", softmax(),
      softmax(shape_rules='["1 <= len(S) <= 3", "-len(S) <= dim <"]'), SOFTMAX_OP, None)
def _(f):
    assert f.counterexample is None
    assert "signature.shape_rules.1" in f.message


@case("broken-spec", "add-unknown-family", add(), add(outputs="""
        output: {dtype: T, shape: "Bcast[A, B]"}
        """), ADD_OP, None)
def _(f):
    assert f.counterexample is None
    assert "signature.outputs.output.shape" in f.message and "Bcast" in f.message


# undecided: a nonlinear refinement Z3 cannot decide within the resource limit (the op's
# verdict is `unknown`, the finding an advisory naming the branch).

CUBES = {"forall": '{A: Dim, B: Dim, C: Dim, T: "DType[float16]"}',
         "params": """
             fused: {type: bool, default: false}
             """,
         "inputs": """
             x: {dtype: T, shape: "[A, B, C]"}
             """,
         "outputs": """
             y: {dtype: T, shape: "[A]"}
             """,
         "shape_rules": '["A > 0 and B > 0 and C > 0"]'}
CUBE_OP = "CubeFwdOp"


def cubes(**changes: str | None) -> str:
    return build(CUBE_OP, CUBES, changes)


@case("undecided", "cubes-refinement-on-the-fused-branch", cubes(),
      cubes(shape_rules='["A > 0 and B > 0 and C > 0", '
                        '"not fused or A * A * A + B * B * B != C * C * C"]'),
      CUBE_OP, "signature", verdict=UNKNOWN)
def _(f):
    # No positive cubes add up to a cube: NEW rejects nothing, but Z3 cannot prove it. Only
    # the branch the refinement reads is asked (fused=False folds it away).
    assert f.counterexample == {"fused": True}
    assert "could not decide whether NEW accepts every call OLD accepts on the branch " \
        "fused=true" in f.message


@case("undecided", "cubes-output-shape", cubes(), cubes(outputs="""
        y: {dtype: T, shape: "[A if A * A * A + B * B * B != C * C * C else B]"}
        """), CUBE_OP, "signature.outputs.y", verdict=UNKNOWN)
def _(f):
    # The same output type on every call, which Z3 cannot prove either.
    assert f.counterexample == {"fused": False}
    assert "could not decide whether output `y` keeps its type" in f.message


@case("undecided", "gemm-volume-cap-beyond-a-small-limit",
      gemm(shape_rules='["M <= 4096 and N <= 4096 and K <= 4096"]'),
      gemm(shape_rules='["M <= 4096 and N <= 4096 and K <= 4096", "M * N * K <= 68719476736"]'),
      GEMM_OP, "signature", verdict=UNKNOWN, rlimit=2000, count=4)
def _(f):
    # 4096 ** 3 == 68719476736: implied by OLD's bounds, but not within a small resource
    # limit. One finding per branch (the first shown), each naming it.
    assert f.counterexample == {"trans_b": False, "present(bias)": False}
    assert "on the branch trans_b=false, present(bias)=false (max. resource limit " \
        "exceeded)" in f.message


@case("undecided", "quartic-refinement", cubes(),
      cubes(shape_rules='["A > 0 and B > 0 and C > 0", '
                        '"A * A * A * A + B * B * B * B != C * C"]'),
      CUBE_OP, "signature", verdict=UNKNOWN)
def _(f):
    # Fermat: no positive x**4 + y**4 is a square.
    assert f.counterexample == {"fused": False}


# -- running a case ----------------------------------------------------------------------------

def write_pair(tmp_path: Path, c: Case) -> tuple[Path, Path]:
    for side, text in (("old", c.old), ("new", c.new)):
        (tmp_path / side).mkdir(parents=True, exist_ok=True)
        (tmp_path / side / "toy.yaml").write_text(text)
    return tmp_path / "old", tmp_path / "new"


def run_case(tmp_path: Path, c: Case) -> DiffReport:
    old, new = write_pair(tmp_path, c)
    mo, mn = load_paths([old], strict=True), load_paths([new], strict=True)
    assert not [d.render() for d in mo.diagnostics if d.is_error]
    return diff_manifests(mo, mn, **({} if c.rlimit is None else {"rlimit": c.rlimit}))


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_case(tmp_path, c):
    report = run_case(tmp_path, c)
    by_op = {r.op: r for r in report.specs}
    r = by_op[c.op]
    shown = [f.render() for f in r.diagnostics]
    assert r.verdict == c.verdict, shown
    found = [f for f in r.diagnostics if f.check == c.check and f.path == c.path]
    assert len(found) == c.count, (c.check, c.path, shown)
    f = found[0]
    assert f.op == c.op and f.side == c.side, f.render()
    # An error, but for an undecided question; the op is then `unknown`, not incompatible.
    assert f.is_error is (c.check != "undecided"), f.render()
    assert (r.verdict == INCOMPATIBLE) is f.is_error or r.verdict == REMOVED
    # The position is in the file of the finding's side, on the declaration's line.
    file = tmp_path / c.side / "toy.yaml"
    assert f.pos is not None and f.pos.file == str(file), f.render()
    line = file.read_text().splitlines()[f.pos.line - 1]
    if c.path is None:
        assert line == f"{c.op}:", line                       # the op's key
    else:
        parts = c.path.split(".")
        name = parts[2] if len(parts) > 2 else parts[-1]
        word = parts[1] if name.isdigit() else name          # shape_rules.1: the rules line
        assert f"{word}:" in line, (c.path, line)
    c.expect(f)
    assert report.ok is (c.verdict == UNKNOWN)          # `opspec diff` exits 1 iff not ok


def test_every_check_has_three_cases():
    counts = Counter(c.check for c in CASES)
    assert set(counts) == set(DIFF_CHECK_IDS), set(DIFF_CHECK_IDS) ^ set(counts)


@pytest.mark.parametrize("check", DIFF_CHECK_IDS)
def test_three_distinct_changes_per_check(check):
    cases = [c for c in CASES if c.check == check]
    assert len(cases) >= 3, (check, [c.name for c in cases])
    assert len({c.name for c in cases}) == len(cases)
    assert len({(c.old, c.new, c.rlimit) for c in cases}) == len(cases)   # distinct pairs


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


# -- the command line: exit status and the counterexample as printed ---------------------------

def cli_case(tmp_path: Path, check: str, name: str) -> tuple[str, str]:
    (c,) = [c for c in CASES if c.check == check and c.name == name]
    old, new = write_pair(tmp_path, c)
    return str(old), str(new)


def test_cli_rejected_prints_the_call(tmp_path, capsys):
    old, new = cli_case(tmp_path, "rejected", "gemm-transposed-case-removed")
    assert main(["diff", old, new]) == 1
    out = capsys.readouterr().out
    assert out.startswith("incompatible  GemmFwdOp")
    assert "error[rejected]: GemmFwdOp signature.types.Mat" in out
    assert "trans_b = true" in out or "trans_b = True" in out
    assert f"{new}/toy.yaml:6:" in out


def test_cli_param_moved_json(tmp_path, capsys):
    import json
    old, new = cli_case(tmp_path, "param-moved", "norm-eps-and-affine-swapped")
    assert main(["diff", old, new, "--format", "json"]) == 1
    (op,) = json.loads(capsys.readouterr().out)["ops"]
    assert op["op"] == NORM_OP and op["verdict"] == "incompatible"
    got = {(d["check"], d["path"]): d["counterexample"] for d in op["diagnostics"]}
    assert got == {
        ("param-moved", "signature.params.eps"):
            {"call": "RmsNormFwdOp(<eps>)", "binds <eps> to": "affine"},
        ("param-moved", "signature.params.affine"):
            {"call": "RmsNormFwdOp(..., <affine>)", "binds <affine> to": "eps"},
    }


def test_cli_broken_new_spec_exits_1(tmp_path, capsys):
    old, new = cli_case(tmp_path, "broken-spec", "gemm-undeclared-index")
    assert main(["diff", old, new]) == 1
    out = capsys.readouterr().out
    assert "error[broken-spec]: GemmFwdOp" in out and "unknown name `P`" in out


def test_cli_undecided_exits_0(tmp_path, capsys):
    old, new = cli_case(tmp_path, "undecided", "cubes-output-shape")
    assert main(["diff", old, new]) == 0
    out = capsys.readouterr().out
    assert out.startswith("unknown  CubeFwdOp")
    assert "[undecided]: CubeFwdOp signature.outputs.y" in out
    assert "0 incompatible, 1 unknown" in out


def test_cli_removed_op_exits_1_and_op_filter(tmp_path, capsys):
    old, new = cli_case(tmp_path, "removed-op", "norm-dropped-from-the-family")
    assert main(["diff", old, new, "--op", GEMM_OP]) == 0
    assert main(["diff", old, new, "--op", NORM_OP]) == 1
    out = capsys.readouterr().out
    assert "error[removed-op]: RmsNormFwdOp" in out
    assert main(["diff", old, new, "--op", "RmsNormFwd"]) == 2     # no such op: usage


# -- the fixed misses, compatible counterparts ---------------------------------------------------

def test_absent_maybe_parameter_is_not_asked_once_for_both_branches(tmp_path):
    """`coalesce_dtype(dtype, T)` is `T` where `dtype` is absent and `dtype` where it is
    passed: the two branches ask different questions though the plan's steps are the same.
    Only the branch passing `dtype` types the output differently."""
    c = next(c for c in CASES if c.name == "softmax-dtype-argument-ignored")
    (r,) = run_case(tmp_path, c).specs
    (f,) = r.diagnostics
    assert f.check == "output-type" and f.counterexample["present(dtype)"] is True


def test_unchanged_softmax_and_loosened_specs_are_compatible(tmp_path):
    for i, (old, new) in enumerate([
            (softmax(), softmax()),
            (norm(), norm(params="""
                eps: {type: "float | None", default: 1.0e-6}
                affine: {type: bool, default: true}
                """)),
            (softmax(forall='{S: Shape, T: "DType[float16 | bfloat16]"}'), softmax())]):
        c = Case("compatible", str(i), old, new, "", None, lambda f: None)
        (r,) = run_case(tmp_path / str(i), c).specs
        assert r.verdict == COMPATIBLE, [f.render() for f in r.diagnostics]
