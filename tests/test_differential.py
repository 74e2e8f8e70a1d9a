"""Differential test: the generated runtime checks against Z3 models of the spec itself.

For the bundled ops (GemmFwdOp, SiluAndMulFwdOp) and two user specs written to a temporary
folder (type families, lets, refinements, an optional input, an `out` buffer, a splat, a
Maybe parameter, a domain restriction, `contiguous: true`), `opspec.ops.testing` draws

- valid calls (a Z3 model of "every declaration of a branch holds"): the runtime must accept
  each, `check_call` must solve the model's indices, and the output must agree with a torch
  reference (on CPU; the bundled kernels through Triton's interpreter: GEMM in float16,
  whose `tl.dot` the interpreter gets wrong in bfloat16, so bfloat16 GEMM calls are only
  checked, not run);
- violating calls, for every declaration a call can break (a Z3 model of "every
  declaration holds except that one, which is false", confirmed invalid for every choice
  of indices, and broken where the solving order checks, not where it solves): the runtime
  must reject each with an error naming that declaration, and write no tensor.

A violating call the runtime accepts is a silent pass: a bug. The figures (calls per kind,
silent passes) are printed by the last test of the module.
"""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings

from opspec.ops import GemmFwdOp, SiluAndMulFwdOp
from opspec.ops.testing import (
    SilentPass, assert_rejected, declarations, valid_calls, violating_calls,
)
from runtime_user_ops import load_module

DIFF_SPECS = """\
# A type family, a let, refinements (one on a parameter, checked at construction), an
# optional input, an `out` buffer, an enum parameter and `contiguous: true`.
DiffGroupSumFwdOp:
  family: toy
  status: implemented
  signature:
    types:
      Layout:
        params: {t: Bool, R: Dim, C: Dim}
        match: t
        cases:
        - {when: false, is: "[R, C]"}
        - {when: true, is: "[C, R]"}
    forall: {M: Dim, N: Dim, T: "DType[float16 | float32]"}
    params:
      transposed: {type: bool, default: false}
      mode: {type: "'sum' | 'mean'", default: sum}
      groups: {type: int, default: 2}
    inputs:
      x: {dtype: T, shape: "Layout[transposed, M, N]", contiguous: true}
      scale: {dtype: float32, shape: "[groups]", optional: true}
    outputs:
      y: {dtype: T, shape: "[M, Q]", buffer: out}
    let: {Q: "N // groups"}
    shape_rules:
    - "groups >= 1"
    - "N % groups == 0"
  workloads:
  - {M: 4, N: 6, groups: 3, some: [scale], dtype_cases: [{T: float32}], label: small}
  - {M: 2, N: 8, transposed: true, mode: mean, dtype_cases: [{T: float16}], label: small-t}
  roofline: {flops: "M * N"}

# A splat, an exact division, a let, a dtype parameter, a Maybe parameter read by a
# refinement, and a domain restriction (a `limit` needs a `gate`).
DiffPairGluFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {S: Shape, D: Dim, T: "DType[float16 | bfloat16 | float32]"}
    params:
      odt: {type: "float16 | float32", default: float32}
      limit: {type: "int | None", default: null}
      with_residual: {type: bool, default: false}
    inputs:
      x: {dtype: T, shape: "[*S, 2 * D]"}
      gate: {dtype: T, shape: "[*S, D]", optional: true}
      residual: {dtype: odt, shape: "[*S, H]", optional: with_residual}
    outputs:
      y: {dtype: odt, shape: "[*S, H]"}
    let: {H: "D // 2"}
    shape_rules:
    - "D % 2 == 0"
    - "len(S) >= 1"
    - "not present(limit) or D <= limit.value"
    - "present(gate) or not present(limit)"
  workloads:
  - {S: [2, 3], D: 4, dtype_cases: [{T: float32}], label: small}
  - {S: [5], D: 2, limit: 4, some: [gate], dtype_cases: [{T: bfloat16}], label: gated}
  - {S: [3], D: 6, with_residual: true, dtype_cases: [{T: float16}], label: residual}
  roofline: {flops: "S[0] * D"}
"""

DIFF_MODULE = '''\
"""A user's op classes for the differential test, outside the opspec repository."""

import torch

from opspec.ops.op import Op


class DiffGroupSumFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, transposed=False, mode="sum", groups=2, *, target=None):
        self.transposed, self.mode, self.groups = transposed, mode, groups
        super().__init__(target=target)

    def forward(self, x, scale=None, out=None):
        x2 = x.t() if self.transposed else x
        m, n = x2.shape
        parts = x2.reshape(m, self.groups, n // self.groups).float()
        if scale is not None:
            parts = parts * scale.view(1, -1, 1)
        y = parts.sum(1)
        if self.mode == "mean":
            y = y / self.groups
        y = y.to(x.dtype)
        if out is None:
            return y
        out.copy_(y)
        return out


class DiffPairGluFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, odt=torch.float32, limit=None, with_residual=False, *, target=None):
        self.odt, self.limit, self.with_residual = odt, limit, with_residual
        super().__init__(target=target)

    def forward(self, x, gate=None, residual=None):
        d = x.shape[-1] // 2
        a = x[..., :d].float() * x[..., d:].float()
        if gate is not None:
            a = a * gate.float()
        y = a[..., 0::2] + a[..., 1::2]
        if residual is not None:
            y = y + residual.float()
        return y.to(self.odt)
'''

#: Hypothesis examples per strategy (each violating strategy is one declaration).
VALID_EXAMPLES = 25
VIOLATING_EXAMPLES = 6

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])

TALLY: collections.Counter = collections.Counter()
SILENT: list[str] = []


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    folder = tmp_path_factory.mktemp("diff_ops")
    (folder / "toy.yaml").write_text(DIFF_SPECS)
    return load_module(folder, "diff_user_ops", DIFF_MODULE)


def _ops(user) -> dict[str, type]:
    return {"GemmFwdOp": GemmFwdOp, "SiluAndMulFwdOp": SiluAndMulFwdOp,
            "DiffGroupSumFwdOp": user.DiffGroupSumFwdOp, "DiffPairGluFwdOp": user.DiffPairGluFwdOp}


OPS = ["GemmFwdOp", "SiluAndMulFwdOp", "DiffGroupSumFwdOp", "DiffPairGluFwdOp"]


def _hypothesis(strategy, body, max_examples: int) -> None:
    @settings(max_examples=max_examples, **SETTINGS)
    @given(strategy)
    def inner(call):
        body(call)

    inner()


# -- references ----------------------------------------------------------------------------------

def _tol(dtype: torch.dtype) -> dict:
    return {torch.float32: dict(rtol=1e-4, atol=1e-4)}.get(dtype, dict(rtol=1e-2, atol=1e-2))


def _reference(call):
    """The expected output of a valid call, from a torch formula of each spec (float32)."""
    name, p = call.op.__name__, call.params
    if name == "GemmFwdOp":
        a, b = call.inputs
        a = a.t() if p["trans_a"] else a
        b = b.t() if p["trans_b"] else b
        return a.float() @ b.float()
    if name == "SiluAndMulFwdOp":
        (x,) = call.inputs
        n = x.shape[1] // 2
        return F.silu(x[:, :n].float()) * x[:, n:].float()
    if name == "DiffGroupSumFwdOp":
        x, scale = call.inputs
        x = (x.t() if p["transposed"] else x).float()
        g = p["groups"]
        q = x.shape[1] // g
        y = torch.zeros(x.shape[0], q)
        for i in range(g):
            y += x[:, i * q:(i + 1) * q] * (1.0 if scale is None else float(scale[i]))
        return y / g if p["mode"] == "mean" else y
    if name == "DiffPairGluFwdOp":
        x, gate, residual = call.inputs
        d = x.shape[-1] // 2
        a = x[..., :d].float() * x[..., d:].float()
        if gate is not None:
            a = a * gate.float()
        y = torch.stack([a[..., 2 * i] + a[..., 2 * i + 1] for i in range(d // 2)], -1) \
            if d else a[..., :0]
        return y if residual is None else y + residual.float()
    raise AssertionError(name)


def _accepts(call, *, run: bool) -> None:
    op = call.construct()
    got = call.check(op)
    for k, v in got.items():
        assert k in call.indices, (k, got, call)
        assert v == call.indices[k], (k, v, call.indices[k], call)
    TALLY["valid checked"] += 1
    if not run:
        return
    snap = call.snapshot()
    result = call.run(op)
    written = [n for n in call.changed(snap) if n != "out"]
    assert not written, f"a valid call wrote its inputs {written}: {call!r}"
    if call.out is not None:
        assert result is call.out
    expected = _reference(call)
    assert tuple(result.shape) == tuple(expected.shape), (result.shape, expected.shape, call)
    torch.testing.assert_close(result.float(), expected.to(result.dtype).float(),
                               **_tol(result.dtype))
    TALLY["valid run"] += 1


# -- the tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", OPS)
def test_valid_calls_are_accepted(user, name):
    op = _ops(user)[name]
    if name == "GemmFwdOp":
        # Run in float16 (the interpreter's bfloat16 `tl.dot` is wrong); check bfloat16.
        _hypothesis(valid_calls(op, T="float16"), lambda c: _accepts(c, run=True), VALID_EXAMPLES)
        _hypothesis(valid_calls(op, T="bfloat16"), lambda c: _accepts(c, run=False), 10)
    else:
        _hypothesis(valid_calls(op), lambda c: _accepts(c, run=True), VALID_EXAMPLES)


def _rejects(call) -> None:
    try:
        assert_rejected(call)  # names call.violates, writes nothing
    except SilentPass:
        SILENT.append(repr(call))
        TALLY["silent passes"] += 1
        raise
    TALLY["violating"] += 1
    TALLY[f"violating: {call.kind}"] += 1


@pytest.mark.parametrize("name", OPS)
def test_violating_calls_are_rejected(user, name):
    op = _ops(user)[name]
    decls = declarations(op)
    assert decls, name
    TALLY["declarations"] += len(decls)
    for path in decls:
        _hypothesis(violating_calls(op, path), _rejects, VIOLATING_EXAMPLES)


def test_declarations_cover_the_specs(user):
    """Every kind of violation the brief names is drawn for some spec."""
    kinds = set()
    paths = {}
    for name, op in _ops(user).items():
        d = declarations(op)
        paths[name] = set(d)
        for ks in d.values():
            kinds |= set(ks)
    assert {"rank", "axis", "dtype", "dtype-set", "refinement", "domain", "param",
            "out-shape", "out-dtype", "contiguous", "missing", "absent"} <= kinds, kinds
    assert paths["SiluAndMulFwdOp"] == {"signature.inputs.x", "signature.inputs.x.shape",
                                        "signature.inputs.x.dtype"}
    assert {"signature.shape_rules.0", "signature.shape_rules.1", "signature.outputs.y.buffer",
            "signature.inputs.x.contiguous", "signature.params.mode",
            "signature.inputs.scale.shape", "signature.inputs.scale.dtype"} <= \
        paths["DiffGroupSumFwdOp"]
    assert {"signature.shape_rules.0", "signature.shape_rules.1", "signature.shape_rules.2",
            "signature.shape_rules.3", "signature.params.odt", "signature.inputs.residual",
            "signature.inputs.residual.optional"} <= paths["DiffPairGluFwdOp"]


def test_a_violating_call_names_its_declaration(user):
    """The strategy's own contract, on one fixed declaration: an exact-division axis."""
    seen = []

    def body(call):
        assert call.violates == "signature.inputs.x.shape"
        assert call.kind in ("rank", "axis", "divisibility")
        assert call.unique
        seen.append(call.kind)
        _rejects(call)

    _hypothesis(violating_calls(SiluAndMulFwdOp, "signature.inputs.x.shape"), body, 15)
    assert "divisibility" in seen and "rank" in seen


def test_fixed_parameters_and_where(user):
    op = user.DiffGroupSumFwdOp

    def body(call):
        assert call.params["groups"] == 3 and call.params["transposed"] is True
        assert call.inputs[1] is not None and call.out is None
        _accepts(call, run=True)

    _hypothesis(valid_calls(op, groups=3, transposed=True,
                            where={"present(scale)": True, "present(out)": False}), body, 8)
    with pytest.raises(ValueError, match="neither parameters nor indices"):
        valid_calls(op, bogus=1)
    with pytest.raises(ValueError, match="no call breaks"):
        _hypothesis(violating_calls(op, "signature.inputs.nope.shape"), lambda c: None, 1)


def test_zz_summary(capsys):
    """The figures of the differential test (printed even under -q)."""
    with capsys.disabled():
        print("\n[differential] " + ", ".join(f"{k}: {v}" for k, v in sorted(TALLY.items())))
    assert not SILENT, SILENT
    assert TALLY["violating"] > 0 and TALLY["valid run"] > 0
