"""The `effect` check (seed § 6, check 9): operator schemas per effect branch, aliasing,
`buffer: out`, and the roofline's read/write counts.

Broken specs are written to a temporary folder as `toy.yaml` and proven with
`prove_manifest(load_paths([dir], strict=True))`; each test pins the check id, the op, the
declaration path and the values of the diagnostic. The derivation of the effect branches
from the Plan (solver side, no torch) is compared with what the runtime's compile boundary
registers (`opspec.ops.boundary.effect_branches`) for the bundled ops and user ops, and the
derived traffic with the runtime's call records.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from opspec.schema.diagnostics import Severity
from opspec.schema.loader import load_paths
from opspec.solver.effect_check import (
    base_name, derived_traffic, effect_branches, schema_arg, schema_mutated,
)
from opspec.solver.run import prove_manifest

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"


def prove(tmp_path: Path, text: str, family: str = "toy"):
    (tmp_path / f"{family}.yaml").write_text(textwrap.dedent(text))
    manifest = load_paths([tmp_path], strict=True)
    assert not manifest.diagnostics, [d.render() for d in manifest.diagnostics]
    return prove_manifest(manifest, plans=True)


def diags(report, check: str = "effect", op: str | None = None):
    return [d for d in report.all_diagnostics if d.check == check and (op is None or d.op == op)]


def only(report, op: str, path: str, check: str = "effect"):
    found = [d for d in diags(report, check, op) if d.path == path]
    assert len(found) == 1, [d.render() for d in diags(report, check)]
    return found[0]


def spec_and_plan(report, op: str):
    (r,) = [s for s in report.specs if s.op == op]
    return r.plan.spec, r.plan


# ============================================================================ broken specs

def test_alias_of_an_input_no_live_branch_writes(tmp_path):
    # `mutated: inplace`, but the domain restriction `not inplace` excludes every branch
    # that would write x: the output is never x (elaboration sees only `mutated`, not false).
    rep = prove(tmp_path, """\
        NeverWrittenFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            params:
              inplace: {type: bool, default: false}
            inputs:
              x: {dtype: T, shape: "[M]", mutated: inplace}
            outputs:
              y: {dtype: T, shape: "[M]", alias: x}
            shape_rules:
            - "not inplace"
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "NeverWrittenFwdOp", "signature.outputs.y.alias")
    assert d.severity is Severity.ERROR and d.op == "NeverWrittenFwdOp"
    assert "output `y` aliases input `x`, but no branch writes `x`" in d.message
    assert "`mutated: \"inplace\"`" in d.message


def test_alias_output_whose_dtype_differs_from_the_written_input(tmp_path):
    # y IS x where x is written, but y is declared float32 while x may be float16: Z3 finds
    # the call (T = float16) that passes every check with a y that cannot be x.
    rep = prove(tmp_path, """\
        AliasDtypeFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float16 | float32]"}
            params:
              inplace: {type: bool, default: true}
            inputs:
              x: {dtype: T, shape: "[M]", mutated: inplace}
            outputs:
              y: {dtype: float32, shape: "[M]", alias: x}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "AliasDtypeFwdOp", "signature.outputs.y.alias")
    assert d.severity is Severity.ERROR
    assert "Tensor[float32, [M]] can differ from the input's Tensor[T, [M]]" in d.message
    assert d.counterexample["inplace"] == "true"
    assert d.counterexample["T"] == "float16"
    assert d.counterexample["x.dtype"] == "float16"
    # Only where x is written: the inplace=false branch makes a new y (no finding there).
    assert len(diags(rep, op="AliasDtypeFwdOp")) == 1


def test_alias_output_whose_shape_differs_from_the_written_input(tmp_path):
    rep = prove(tmp_path, """\
        AliasShapeFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, N: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M, N]", mutated: true}
            outputs:
              y: {dtype: T, shape: "[N, M]", alias: x}
          workloads:
          - {M: 8, N: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "AliasShapeFwdOp", "signature.outputs.y.alias")
    assert "Tensor[T, [N, M]] can differ from the input's Tensor[T, [M, N]]" in d.message
    m, n = d.counterexample["M"], d.counterexample["N"]
    assert m != n and d.counterexample["x.shape"] == (m, n)


def test_contiguous_alias_of_an_input_that_need_not_be_contiguous(tmp_path):
    rep = prove(tmp_path, """\
        AliasContigFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M]", mutated: true}
            outputs:
              y: {dtype: T, shape: "[M]", alias: x, contiguous: true}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "AliasContigFwdOp", "signature.outputs.y.contiguous")
    assert d.severity is Severity.ERROR
    assert ("output `y` declares `contiguous: true` but is input `x` itself where it is "
            "written, and `x` does not declare `contiguous: true`") in d.message
    assert d.hint == "declare `contiguous: true` on input `x` too"


def test_alias_of_a_cpu_input(tmp_path):
    rep = prove(tmp_path, """\
        AliasCpuFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              w: {dtype: T, shape: "[M]"}
              x: {dtype: T, shape: "[M]", mutated: true, device: cpu}
            outputs:
              y: {dtype: T, shape: "[M]", alias: x}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "AliasCpuFwdOp", "signature.outputs.y.alias")
    assert "`x` is `device: cpu` while outputs are checked on the call device" in d.message


def test_out_passed_where_its_output_does_not_exist(tmp_path):
    # y exists only when `keep`; with keep=false and `out` passed, the buffer has no output.
    rep = prove(tmp_path, """\
        OutAbsentFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            params:
              keep: {type: bool, default: true}
            inputs:
              x: {dtype: T, shape: "[M]"}
            outputs:
              y: {dtype: T, shape: "[M]", buffer: out, nullable: keep}
              z: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "OutAbsentFwdOp", "signature.outputs.y.nullable")
    assert d.severity is Severity.ERROR
    assert "`out` may be passed where output `y` (its `buffer: out`) does not exist" in d.message
    assert d.counterexample == {"keep": "false", "present(out)": "true"}


def test_two_effect_branches_with_one_operator_name(tmp_path):
    # writes `a` with `out` passed  -> ..._writes_a_out
    # writes `a_out`, no `out`      -> ..._writes_a_out
    rep = prove(tmp_path, """\
        ClashFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            params:
              wa: {type: bool, default: false}
              wb: {type: bool, default: false}
            inputs:
              a: {dtype: T, shape: "[M]", mutated: wa}
              a_out: {dtype: T, shape: "[M]", mutated: wb}
            outputs:
              y: {dtype: T, shape: "[M]", buffer: out}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    found = [d for d in diags(rep, op="ClashFwdOp") if "operator name" in d.message]
    assert len(found) == 1, [d.render() for d in diags(rep)]
    d = found[0]
    assert d.severity is Severity.ERROR and d.op == "ClashFwdOp"
    assert "`opspec::toy_clash_fwd_op_writes_a_out`" in d.message
    assert "(writes a; out passed; returns y)" in d.message
    assert "(writes a_out; out not passed; returns y)" in d.message
    assert d.path in ("signature.inputs.a.mutated", "signature.inputs.a_out.mutated")


def test_input_named_like_a_schema_keyword(tmp_path):
    rep = prove(tmp_path, """\
        KeywordFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M]"}
              class: {dtype: T, shape: "[M]"}
            outputs:
              y: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "KeywordFwdOp", "signature.inputs.class")
    assert "input `class` is a keyword of torch's operator-schema language" in d.message
    assert "`opspec::toy_keyword_fwd_op`" in d.message


def test_inputs_the_runtime_renames_onto_one_schema_argument(tmp_path):
    rep = prove(tmp_path, """\
        KeyClashFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              key: {dtype: T, shape: "[M]"}
              key_: {dtype: T, shape: "[M]"}
            outputs:
              y: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "KeyClashFwdOp", "signature.inputs.key_")
    assert "inputs `key` and `key_` both become the compile-boundary schema argument `key_`" \
        in d.message


def test_a_branch_that_writes_and_returns_nothing(tmp_path):
    rep = prove(tmp_path, """\
        IdleFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            params:
              inplace: {type: bool, default: true}
            inputs:
              x: {dtype: T, shape: "[M]", mutated: inplace}
            outputs: {}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M"}
        """)
    d = only(rep, "IdleFwdOp", "signature.inputs.x.mutated")
    assert d.severity is Severity.WARNING
    assert "writes no input and returns no tensor" in d.message
    assert d.counterexample == {"inplace": "false"}


def test_bytes_formula_below_the_bytes_written(tmp_path):
    # x and y float32 [8]: 32 bytes each; the call writes y (32) and the mutated s (4 * 4);
    # the formula counts only half of x.
    rep = prove(tmp_path, """\
        CheapFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, K: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M]"}
              s: {dtype: float32, shape: "[K]", mutated: true}
            outputs:
              y: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 8, K: 4, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M", bytes: "bytes(x) // 2"}
        """)
    d = only(rep, "CheapFwdOp", "roofline.bytes")
    assert d.severity is Severity.WARNING and d.op == "CheapFwdOp"
    assert "gives 16 on workload row `small`" in d.message
    assert "less than the 48 bytes the call writes (s: 16, y: 32)" in d.message
    cex = d.counterexample
    assert cex["row"] == "small" and cex["M"] == 8 and cex["K"] == 4
    assert cex["bytes"] == 16 and cex["bytes written"] == 48
    assert cex["bytes(s) written"] == 16 and cex["bytes(y) written"] == 32


def test_bytes_formula_that_reads_an_absent_tensor(tmp_path):
    rep = prove(tmp_path, """\
        AbsentBytesFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              x: {dtype: T, shape: "[M]"}
              b: {dtype: T, shape: "[M]", optional: true}
            outputs:
              y: {dtype: T, shape: "[M]"}
          workloads:
          - {M: 8, some: [b], dtype_cases: [{T: float32}], label: with-b}
          - {M: 8, dtype_cases: [{T: float32}], label: without-b}
          roofline: {flops: "M", bytes: "bytes(x) + bytes(b) + bytes(y)"}
        """)
    d = only(rep, "AbsentBytesFwdOp", "roofline.bytes")
    assert d.severity is Severity.WARNING
    assert "cannot be evaluated on workload row `without-b`" in d.message
    assert d.counterexample["present(b)"] == "false"


# ============================================================================ sound specs

def test_sound_effects_prove_without_effect_diagnostics(tmp_path):
    rep = prove(tmp_path, """\
        InplaceFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {S: Shape, T: "DType[float16 | float32]"}
            params:
              inplace: {type: bool, default: false}
            inputs:
              x: {dtype: T, shape: "[*S]", mutated: inplace}
            outputs:
              y: {dtype: T, shape: "[*S]", alias: x}
          workloads:
          - {S: [4, 8], dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "prod(S)", bytes: "bytes(x) + (0 if inplace else bytes(y))"}
        ScatterFwdOp:
          family: toy
          status: spec-only
          signature:
            forall: {M: Dim, T: "DType[float32]"}
            inputs:
              dst: {dtype: T, shape: "[M]", mutated: true, write_only: true}
              src: {dtype: T, shape: "[M]"}
            outputs: {}
          workloads:
          - {M: 8, dtype_cases: [{T: float32}], label: small}
          roofline: {flops: "M", bytes: "bytes(src) + bytes(dst)"}
        """)
    assert diags(rep) == [], [d.render() for d in diags(rep)]
    spec, plan = spec_and_plan(rep, "InplaceFwdOp")
    ebs = effect_branches(spec, plan)
    # inplace: y is x (no new tensor, `mutates_args` x); not inplace: y is a new tensor.
    assert {k: (eb.name, eb.new, eb.mutates) for k, eb in ebs.items()} == {
        ((), False, ("y",)): ("toy_inplace_fwd_op", ("y",), ()),
        (("x",), False, ("y",)): ("toy_inplace_fwd_op_writes_x", (), ("x",)),
    }
    for b in plan.branches:
        t = derived_traffic(spec, b)
        if dict(b.combo)["inplace"]:
            assert t == {"x": (1, 1)}
        else:
            assert t == {"x": (1, 0), "y": (0, 1)}
    spec, plan = spec_and_plan(rep, "ScatterFwdOp")
    (b,) = plan.branches
    assert derived_traffic(spec, b) == {"dst": (0, 1), "src": (1, 0)}


# ============================================================================ the runtime

def _compare_with_runtime(cls) -> None:
    from opspec.ops import boundary

    info = cls._info()
    ours = effect_branches(info.spec, info.plan)
    theirs = boundary.effect_branches(cls)
    assert list(ours) == list(theirs)
    for key, eb in ours.items():
        rt = theirs[key]
        assert (eb.written, eb.has_out, eb.returned, eb.new, eb.name, eb.schema) == \
            (rt.written, rt.has_out, rt.returned, rt.new, rt.name, rt.schema)
        # `mutates_args` as the runtime registers it, and the schema's written arguments.
        assert eb.mutates == tuple(boundary._arg(w) for w in rt.written) + \
            (("out",) if rt.has_out else ())
        assert set(schema_mutated(rt.schema)) == set(eb.mutates)
    if "compile_op_names" in cls.__dict__:
        assert cls.compile_op_names == tuple(f"opspec::{eb.name}" for eb in ours.values())


def test_effect_branches_agree_with_the_runtime_for_the_bundled_ops():
    from opspec.ops import GemmFwdOp, SiluAndMulFwdOp

    for cls in (GemmFwdOp, SiluAndMulFwdOp):
        _compare_with_runtime(cls)
    assert base_name("SiluAndMulFwdOp", "elementwise") == "elementwise_silu_and_mul_fwd_op"
    assert base_name("GemmFwdOp", "gemm") == "gemm_fwd_op"


@pytest.fixture(scope="module")
def U(tmp_path_factory):
    from runtime_user_ops import user_ops
    return user_ops(tmp_path_factory)


def test_effect_branches_agree_with_the_runtime_for_user_ops(U):
    for name in ("RtAffineFwdOp", "RtPairFwdOp", "RtInplaceFwdOp", "RtDeviceFwdOp",
                 "RtParamsFwdOp", "RtHeldFwdOp", "RtCpuFirstFwdOp", "RtCpuOutFwdOp"):
        _compare_with_runtime(getattr(U, name))


EFFECT_SPECS = """\
# Effects of every kind, for comparing the solver's derivation with the runtime's.
EcWriteOnlyFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    inputs:
      dst: {dtype: T, shape: "[M]", mutated: true, write_only: true}
      src: {dtype: T, shape: "[M]"}
      acc: {dtype: T, shape: "[M]", optional: true, mutated: "present(acc)"}
    outputs: {}
  workloads:
  - {M: 8, dtype_cases: [{T: float32}], label: small}
  - {M: 8, some: [acc], dtype_cases: [{T: float32}], label: with-acc}
  roofline: {flops: "M"}
EcAliasOutFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    params:
      inplace: {type: bool, default: false}
      stats: {type: bool, default: false}
    inputs:
      x: {dtype: T, shape: "[M]", mutated: inplace}
    outputs:
      y: {dtype: T, shape: "[M]", alias: x}
      s: {dtype: T, shape: "[M]", buffer: out, nullable: stats}
    shape_rules:
    # `out` is the buffer of s, which exists only with `stats` (test_out_passed_where_...)
    - "stats or not present(out)"
  workloads:
  - {M: 8, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M"}
"""

#: The spec of test_out_passed_where_its_output_does_not_exist, as a user op: the runtime
#: cannot build the generated `out` check of the branch the finding names.
BROKEN_SPECS = """\
EcOutAbsentFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float32]"}
    params:
      keep: {type: bool, default: true}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]", buffer: out, nullable: keep}
      z: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 8, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M"}
"""

BROKEN_MODULE = '''\
from opspec.ops.op import Op


class EcOutAbsentFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, keep=True, *, target=None):
        self.keep = keep
        super().__init__(target=target)

    def forward(self, x, out=None):
        return (x * 2 if self.keep else None), x * 3
'''

EFFECT_MODULE = '''\
import torch

from opspec.ops.op import Op


class EcWriteOnlyFwdOp(Op):
    manifest = "toy.yaml"

    def forward(self, dst, src, acc=None):
        dst.copy_(src * 2)
        if acc is not None:
            acc.add_(src)
        return None


class EcAliasOutFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, inplace=False, stats=False, *, target=None):
        self.inplace, self.stats = inplace, stats
        super().__init__(target=target)

    def forward(self, x, out=None):
        y = x.mul_(2) if self.inplace else x * 2
        if not self.stats:
            return y, None
        s = out if out is not None else torch.empty_like(x)
        s.copy_(x)
        return y, s
'''


@pytest.fixture(scope="module")
def E(tmp_path_factory):
    from runtime_user_ops import load_module

    folder = tmp_path_factory.mktemp("effect_ops")
    (folder / "toy.yaml").write_text(EFFECT_SPECS)
    return load_module(folder, "effect_check_ops", EFFECT_MODULE)


def test_effect_branches_agree_with_the_runtime_for_every_kind_of_effect(E):
    _compare_with_runtime(E.EcWriteOnlyFwdOp)
    _compare_with_runtime(E.EcAliasOutFwdOp)
    info = E.EcAliasOutFwdOp._info()
    ebs = effect_branches(info.spec, info.plan)
    names = {eb.name: (eb.new, eb.schema) for eb in ebs.values()}
    # y aliases x where x is written (never returned by the operator), else it is new;
    # s is the caller's `out` when passed, else new; without `stats` it is absent.
    assert names["toy_ec_alias_out_fwd_op_writes_x_out"] == (
        (), "(Tensor(a!) x, Tensor(b!) out, str key) -> ()")
    assert names["toy_ec_alias_out_fwd_op_without_s"] == (
        ("y",), "(Tensor x, str key) -> Tensor")
    assert names["toy_ec_alias_out_fwd_op"] == (
        ("y", "s"), "(Tensor x, str key) -> (Tensor, Tensor)")


def test_derived_traffic_is_the_runtimes_call_record(E):
    import torch

    def check(op, *args, **kwargs):
        op(*args, **kwargs)
        br = op._opspec_last[0]
        call = op.last_call
        assert dict(call.traffic) == derived_traffic(type(op)._info().spec, br.branch)
        return call

    src = torch.arange(8.0)
    call = check(E.EcWriteOnlyFwdOp(), torch.zeros(8), src)
    assert call.traffic == {"dst": (0, 1), "src": (1, 0)}
    call = check(E.EcWriteOnlyFwdOp(), torch.zeros(8), src, torch.zeros(8))
    assert call.traffic == {"dst": (0, 1), "src": (1, 0), "acc": (1, 1)}
    call = check(E.EcAliasOutFwdOp(inplace=True, stats=True), torch.ones(8), out=torch.empty(8))
    assert call.traffic == {"x": (1, 1), "s": (0, 1)}     # y is x; s is `out`
    call = check(E.EcAliasOutFwdOp(inplace=False), torch.ones(8))
    assert call.traffic == {"x": (1, 0), "y": (0, 1)}     # y is new; s absent


def test_the_out_finding_is_a_runtime_failure(tmp_path_factory):
    """The branch `keep=false, out passed` that the `effect` check refutes: the runtime cannot
    generate its `out` check (there is no output to check `out` against)."""
    from runtime_user_ops import load_module

    folder = tmp_path_factory.mktemp("effect_broken")
    (folder / "toy.yaml").write_text(BROKEN_SPECS)
    mod = load_module(folder, "effect_check_broken", BROKEN_MODULE)
    with pytest.raises(StopIteration):
        mod.EcOutAbsentFwdOp(keep=False)


def test_schema_argument_names():
    assert [schema_arg(n) for n in ("x", "key", "self", "out")] == ["x", "key_", "self_", "out_"]


# ============================================================================ the corpus

@pytest.fixture(scope="module")
def corpus():
    if not CORPUS.is_dir():
        pytest.skip("the shared corpus is not present")
    return prove_manifest(load_paths([CORPUS], strict=True), jobs=4, plans=True)


def test_corpus_has_no_effect_findings(corpus):
    # Activations alias `input` where `inplace`; MoE experts take a write_only output; BatchNorm
    # writes its running stats under an expression; the KV-cache append mutates its pages: all
    # consistent, and no corpus spec gives an inline `bytes` below what it writes.
    assert diags(corpus) == [], [d.render() for d in diags(corpus)]


def test_corpus_effect_branches_per_spec(corpus):
    multi = {}
    for s in corpus.specs:
        spec, plan = s.plan.spec, s.plan
        ebs = effect_branches(spec, plan)
        names = [eb.name for eb in ebs.values()]
        assert len(names) == len(set(names)), s.op
        if any(eb.written or eb.has_out for eb in ebs.values()):
            multi[s.op] = sorted(eb.name.removeprefix(base_name(spec.name, spec.family))
                                 for eb in ebs.values())
    # Suffixes only: which effect branches exist, by the rules of reference §10.
    assert multi["ReluFwdOp"] == ["", "_writes_input"]
    assert multi["BatchNormFwdOp"] == ["", "_writes_running_mean_writes_running_var"]
    assert multi["MoeGroupedGemmFwdOp"] == ["", "_out"]
    assert multi["FusedMoEExpertsFwdOp"] == ["_writes_output"]
