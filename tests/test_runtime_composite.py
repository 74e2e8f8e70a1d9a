"""Composites: sub-ops held with delegate_for, their calls filed under stages."""

from __future__ import annotations

import textwrap

import pytest
import torch

from opspec.schema.errors import SignatureError

SPEC = """
TwoSiluFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float32]"}
    inputs:
      x: {dtype: T, shape: "[M, 4 * N]"}
    outputs:
      y: {dtype: T, shape: "[M, N]"}
  composition:
    kind: composite
    stages:
    - {name: first, op: SiluAndMulFwdOp}
    - {name: second, op: SiluAndMulFwdOp}
  workloads:
  - {M: 2, N: 2, dtype_cases: [{T: float32}], label: tiny}
  roofline: {flops: "M * N"}
"""


@pytest.fixture
def composite(tmp_path):
    from opspec.ops import Op, SiluAndMulFwdOp

    (tmp_path / "toy.yaml").write_text(textwrap.dedent(SPEC))

    class TwoSiluFwdOp(Op):
        manifest = str(tmp_path / "toy.yaml")
        delegate_types = {"first": SiluAndMulFwdOp, "second": SiluAndMulFwdOp}

        def __init__(self, *, target=None, stray=False):
            self.stray = stray
            super().__init__(target=target)
            self.first = self.delegate_for("first", None)
            self.second = self.delegate_for("second", None)

        def forward(self, x):
            h = self.first(x)
            if self.stray:
                return SiluAndMulFwdOp()(h)
            return self.second(h)

    return TwoSiluFwdOp


def test_stages_are_filed_in_completion_order(composite):
    op = composite()
    x = torch.randn(2, 8)
    y = op(x)
    assert y.shape == (2, 2)
    call = op.last_call
    assert list(call.stages) == ["first", "second"]
    assert call.stages["first"][0].indices["N"] == 4 and call.stages["second"][0].indices["N"] == 2
    assert [type(d).__name__ for d in op.held_delegates()] == ["SiluAndMulFwdOp"] * 2
    assert op.delegate_for("first", None) is op.first  # held once


def test_a_sub_op_not_held_fails_the_call(composite):
    op = composite(stray=True)
    with pytest.raises(SignatureError, match=r"not held through delegate_for"):
        op(torch.randn(2, 8))
    with pytest.raises(RuntimeError):
        op.last_call  # the failed call left no record


def test_unknown_stage(composite):
    op = composite()
    with pytest.raises(SignatureError, match="no stage 'third'"):
        op.delegate_for("third", None)
