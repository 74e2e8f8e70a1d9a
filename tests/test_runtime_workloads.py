"""Workloads: rows become cases (ids of reference §5.1), cases become tensors; every case of
every bundled op instantiates on the META device and passes the op's own signature checks.
No kernel runs on meta: `check_call` runs the checks only."""

from __future__ import annotations

import re

import pytest
import torch

import opspec.ops as ops
from opspec.ops import GemmFwdOp, SiluAndMulFwdOp
from opspec.ops.specs import manifest_at
from opspec.ops.workloads import Case, WorkloadError, cases

from runtime_user_ops import user_ops


def _bundled_op_classes():
    names = sorted(n for n, s in manifest_at(None).specs.items() if s.spec is not None)
    return [getattr(ops, n) for n in names]


def _all_cases():
    return [pytest.param(cls, c, id=c.id) for cls in _bundled_op_classes() for c in cases(cls)]


def test_every_bundled_op_is_exported():
    """Every spec of the bundled manifest has its class in `opspec.ops`, and every op class
    `opspec.ops` exports has a spec."""
    exported = {n for n in ops.__all__ if n.endswith("Op") and n != "Op"}
    assert {c.__name__ for c in _bundled_op_classes()} == exported
    assert {"GemmFwdOp", "SiluAndMulFwdOp", "SoftmaxFwdOp", "RotaryEmbeddingFwdOp"} <= exported


@pytest.mark.parametrize("cls, case", _all_cases())
def test_every_case_instantiates_on_meta_and_passes_check_call(cls, case: Case):
    op = case.construct(cls)
    inputs = case.inputs("meta")
    spec = cls._info().spec
    assert len(inputs) == len(spec.inputs)
    for name, t in zip(spec.inputs, inputs):
        if t is None:  # an optional input the row omits
            assert spec.inputs[name].optional is not False and name not in case.some, name
            continue
        assert t.device.type == "meta" and t.is_contiguous()
    ind = op.check_call(*inputs)
    # the call re-inferred from the tensors agrees with the row (an index only a generator
    # reads, like RoPE's `seq_lens`, is not seen by the call)
    for name, v in case.values.items():
        if name in spec.forall and name in ind:
            assert ind[name] == v, (name, ind)
    for name, dt in case.dtypes.items():
        assert ind[name] == dt
    for name, v in case.params.items():
        assert getattr(op, name) == v


def test_case_ids_follow_the_reference():
    ids = [c.id for c in cases(GemmFwdOp)]
    assert ids[:2] == ["llama3-8b-mlp-up-bfloat16", "llama3-8b-mlp-up-float16"]
    assert "wgrad-tn-bfloat16" in ids and "square-4k-nn-float16" in ids
    assert len(ids) == len(set(ids)) == 11
    silu = [c.id for c in cases(SiluAndMulFwdOp)]
    assert silu[:3] == ["llama3-8b-prefill-bfloat16", "llama3-8b-prefill-float16",
                        "llama3-8b-decode-bfloat16"]
    assert "qwen2.5-7b-prefill-float32" in silu and len(silu) == len(set(silu)) == 7
    for c in cases(GemmFwdOp) + cases(SiluAndMulFwdOp):
        assert re.fullmatch(r"[A-Za-z0-9._-]{1,24}", c.label), c.label
        assert c.id == "-".join([c.label] + list(c.dtypes.values()))


def test_case_parameters_and_shapes():
    (c,) = [c for c in cases(GemmFwdOp) if c.id == "wgrad-tn-bfloat16"]
    assert c.params == {"trans_a": True, "trans_b": False}
    a, b = c.inputs("meta")
    assert a.shape == (8192, 4096) and b.shape == (8192, 4096) and a.dtype == torch.bfloat16
    (s,) = [c for c in cases(SiluAndMulFwdOp) if c.id == "llama3-8b-decode-bfloat16"]
    (x,) = s.inputs("meta")
    assert x.shape == (32, 2 * 14336)


def test_cases_instantiate_with_data_on_cpu_deterministically():
    (c,) = [c for c in cases(SiluAndMulFwdOp) if c.id == "llama3-8b-decode-bfloat16"]
    small = Case(c.op, c.id, c.label, c.params, {"M": 2, "N": 3}, c.dtypes, c.some, c.row,
                 c._spec, c._plan)
    (x1,), (x2,) = small.inputs("cpu"), small.inputs("cpu")
    assert x1.shape == (2, 6) and x1.dtype == torch.bfloat16 and torch.equal(x1, x2)
    assert SiluAndMulFwdOp().check_call(x1) == {"M": 2, "N": 3, "T": "bfloat16"}


def test_user_workloads_place_tensors_by_the_device_rules(tmp_path_factory):
    U = user_ops(tmp_path_factory)
    aff = cases(U.RtAffineFwdOp)
    assert [c.id for c in aff] == ["small-float32", "small-nobias-float16"]
    x, bias = aff[0].inputs("meta")
    assert x.shape == (8, 4) and bias.shape == (4,)
    x, bias = aff[1].inputs("meta")
    assert bias is None and x.dtype == torch.float16
    assert aff[1].construct(U.RtAffineFwdOp).check_call(x, bias)["W"] == 4
    # a `device: cpu` input stays on the CPU when the case is placed on meta
    (c,) = cases(U.RtCpuFirstFwdOp)
    idx, x = c.inputs("meta")
    assert idx.device.type == "cpu" and x.device.type == "meta"
    assert U.RtCpuFirstFwdOp().check_call(idx, x) == {"M": 4, "T": "float32"}
    # each row picks its branch: `some` and the `inplace` parameter
    inp = cases(U.RtInplaceFwdOp)
    x, a, b = inp[0].inputs("meta")
    assert a is not None and b is None
    x, a, b = inp[1].inputs("meta")
    assert a is None and b is not None and inp[1].params == {"inplace": False}


def test_a_row_on_an_excluded_combination_is_a_workload_error(tmp_path_factory):
    U = user_ops(tmp_path_factory)
    (c, _) = cases(U.RtInplaceFwdOp)
    bad = Case(c.op, "neither", "neither", c.params, c.values, c.dtypes, (), c.row, c._spec,
               c._plan)
    with pytest.raises(WorkloadError, match="excluded by signature.shape_rules.0"):
        bad.inputs("meta")
