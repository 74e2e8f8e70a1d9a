"""The `workload` check (seed § 6, checks 6 and 7; reference § 5): workload rows.

Every kind of violation is broken by at least three small specs, written to a temporary
folder, loaded strictly and proven as `opspec prove` does. Each test pins the diagnostic's
check id, op, declaration path (`workloads.3`, `workloads.3.M`, ...), the values in its
message and its counterexample (the row's values). Then the real corpus and the bundled
manifest: every row of both instantiates, and no `workload` diagnostic is reported.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from opspec.schema.diagnostics import Severity
from opspec.schema.elaborate import elaborate, elaborate_adts
from opspec.schema.loader import load_paths
from opspec.schema.printer import print_expr
from opspec.solver import generators as G
from opspec.solver import workload_check as W
from opspec.solver.prove import prove_spec
from opspec.solver.run import prove_manifest

OP = "ToyFwdOp"
ERROR, WARNING = Severity.ERROR, Severity.WARNING
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"

LAYOUT = """\
adts:
  Layout:
    sum:
      contiguous:
        fields:
          packing: {type: "'tight' | 'aligned'"}
          alignment: Dim
        invariant: "(packing == 'tight') == (alignment == 1) and alignment >= 1"
      masked:
        fields: {max_m: Dim}
"""


def spec(signature: str, rows: str, *, op: str = OP, status: str = "spec-only",
         roofline: str = '{flops: "1"}') -> str:
    sig = textwrap.indent(textwrap.dedent(signature).strip("\n"), "    ")
    body = textwrap.indent(textwrap.dedent(rows).strip("\n"), "  ")
    return (f"{op}:\n  family: toy\n  status: {status}\n  signature:\n{sig}\n"
            f"  workloads:\n{body}\n  roofline: {roofline}\n")


class Proof:
    def __init__(self, tmp_path: Path, text: str, types: str | None = None):
        self.text = text
        self.file = tmp_path / "toy.yaml"
        self.file.write_text(text)
        if types is not None:
            (tmp_path / "types.yaml").write_text(types)
        manifest = load_paths([tmp_path], strict=True)
        assert not manifest.diagnostics, [d.render() for d in manifest.diagnostics]
        self.report = prove_manifest(manifest)

    def diags(self, op: str = OP):
        (s,) = [s for s in self.report.specs if s.op == op]
        return [d for d in s.diagnostics if d.check == "workload"]

    def verdict(self, op: str = OP) -> str:
        (s,) = [s for s in self.report.specs if s.op == op]
        return s.verdict

    def line(self, needle: str) -> int:
        hits = [i for i, ln in enumerate(self.text.splitlines(), 1) if needle in ln]
        assert len(hits) == 1, (needle, hits)
        return hits[0]


def prove(tmp_path: Path, text: str, types: str | None = None) -> Proof:
    return Proof(tmp_path, text, types)


def expect(p: Proof, path: str, *, contains: tuple[str, ...] = (), severity=ERROR,
           op: str = OP, alone: bool = True, line: int | None = None):
    """The one `workload` diagnostic of `op` at `path` whose message holds every `contains`;
    with `alone`, the op has no other `workload` diagnostic."""
    found = [d for d in p.diags(op) if d.path == path and all(c in d.message for c in contains)]
    assert len(found) == 1, (path, contains, [d.render() for d in p.diags(op)])
    d = found[0]
    assert d.check == "workload" and d.op == op and d.severity is severity, d.render()
    assert d.pos is not None and d.pos.file == str(p.file), d.render()
    if line is not None:
        assert d.pos.line == line, (line, d.render())
    if alone:
        others = [x.render() for x in p.diags(op) if x is not d]
        assert not others, others
    if severity is ERROR:
        assert p.verdict(op) == "refuted"
    return d


def clean(p: Proof, op: str = OP) -> None:
    assert not p.diags(op), [d.render() for d in p.diags(op)]


# A matrix op with a DType index and a varlen one with a generator: bases of many tests.
MAT = """
forall: {M: Dim, N: Dim, T: "DType[float16 | bfloat16]"}
inputs:
  x: {dtype: T, shape: "[M, N]"}
outputs:
  y: {dtype: T, shape: "[M, N]"}
"""

VARLEN = """
forall: {B: Dim, S: Dim, D: Dim, T: "DType[float16]", seq_lens: "Seq[Int]"}
inputs:
  x: {dtype: T, shape: "[S, D]"}
  cu: {dtype: int32, shape: "[B + 1]", values: "prefix_sum(seq_lens)", requires: ["prefix_offsets(S)"]}
outputs:
  y: {dtype: T, shape: "[S, D]"}
"""


# ----------------------------------------------------------------------------- missing index

def test_missing_dim_index(tmp_path):
    p = prove(tmp_path, spec(MAT, "- {M: 8, dtype_cases: [{T: float16}], label: rows}"))
    d = expect(p, "workloads.0", contains=("`rows`", "index `N`", "shape of `x`"),
               line=p.line("label: rows"))
    assert d.counterexample == {"M": 8}


def test_missing_index_of_an_optional_tensor_the_row_passes(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, N: Dim}
        inputs:
          x: {dtype: float32, shape: "[M]"}
          bias: {dtype: float32, shape: "[N]", optional: true}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, """
        - {M: 4, label: plain}
        - {M: 4, some: [bias], label: biased}
        """))
    d = expect(p, "workloads.1", contains=("`biased`", "index `N`", "shape of `bias`"))
    assert d.counterexample == {"M": 4, "some": ["bias"]}


def test_missing_seq_index_of_a_generator(tmp_path):
    p = prove(tmp_path, spec(VARLEN, "- {S: 64, D: 8, dtype_cases: [{T: float16}], label: v}"))
    d = expect(p, "workloads.0", contains=("index `seq_lens`", "generator of `cu`"))
    assert d.counterexample == {"S": 64, "D": 8}


def test_missing_shape_index(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {S: Shape}
        inputs:
          x: {dtype: float32, shape: "[*S]"}
        outputs:
          y: {dtype: float32, shape: "[*S]"}
        """, "- {label: flat}"))
    d = expect(p, "workloads.0", contains=("index `S` (Shape)",))
    assert d.counterexample is None or d.counterexample == {}


# ----------------------------------------------------------------------------- no other key

def test_unknown_key(tmp_path):
    p = prove(tmp_path, spec(MAT, "- {M: 8, N: 4, Q: 7, dtype_cases: [{T: float16}], label: r}"))
    d = expect(p, "workloads.0.Q", contains=("key `Q` (7)", "no parameter or index",
                                             "no other key"))
    assert d.counterexample["Q"] == 7 and d.counterexample["M"] == 8


def test_generator_solved_index_given(tmp_path):
    p = prove(tmp_path, spec(VARLEN, """
        - {B: 4, S: 64, D: 8, seq_lens: [16, 16, 16, 16], dtype_cases: [{T: float16}], label: v}
        """))
    d = expect(p, "workloads.0.B", contains=("index `B` = 4", "generator of `cu` solves it"))
    assert d.counterexample["B"] == 4 and d.counterexample["seq_lens"] == [16, 16, 16, 16]


def test_index_not_used_on_the_branch(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, N: Dim}
        inputs:
          x: {dtype: float32, shape: "[M]"}
          bias: {dtype: float32, shape: "[N]", optional: true}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, """
        - {M: 4, N: 3, label: plain}
        - {M: 4, N: 4, some: [bias], label: biased}
        """))
    d = expect(p, "workloads.0.N", contains=("`plain`", "index `N` = 3",
                                             "not used on this row's branch",
                                             "present(bias)=false"))
    assert d.counterexample == {"M": 4, "N": 3}


def test_let_given_as_a_key(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[L]"}
        let: {L: "2 * M"}
        """, "- {M: 4, L: 8, label: twice}"))
    d = expect(p, "workloads.0.L", contains=("key `L` (8)", "is a let", "2 * M"))
    assert d.counterexample == {"M": 4, "L": 8}


def test_dtype_index_given_as_a_key(tmp_path):
    p = prove(tmp_path, spec(MAT, """
        - {M: 8, N: 4, T: float16, dtype_cases: [{T: float16}], label: r}
        """))
    d = expect(p, "workloads.0.T", contains=("DType index `T`", "dtype_cases"))
    assert d.counterexample["T"] == "float16"


# ----------------------------------------------------------------------------- parameters

def test_parameter_without_default_not_given(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          eps: {type: float}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, "- {M: 16, label: norm}"))
    d = expect(p, "workloads.0", contains=("`norm`", "parameter `eps` (float)", "no default"))
    assert d.counterexample == {"M": 16}


def test_enum_parameter_without_default_not_given(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          mode: {type: "'sum' | 'mean'"}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[]"}
        """, """
        - {M: 16, mode: sum, label: a}
        - {M: 32, label: b}
        """))
    d = expect(p, "workloads.1", contains=("`b`", "parameter `mode`", "no default"))
    assert d.counterexample == {"M": 32}


def test_adt_parameter_without_default_not_given(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          layout: {type: Layout}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, "- {M: 16, label: a}"), types=LAYOUT)
    expect(p, "workloads.0", contains=("parameter `layout` (Layout)", "no default"))


def test_parameter_values_of_the_wrong_kind(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          mode: {type: "'sum' | 'mean'", default: sum}
          flag: {type: bool, default: false}
          k: {type: int, default: 1}
          eps: {type: float, default: 1.0e-6}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, """
        - {M: 16, mode: max, label: a}
        - {M: 16, flag: 1, label: b}
        - {M: 16, k: two, label: c}
        - {M: -3, label: d}
        - {M: 16, eps: small, label: e}
        - {M: 16, eps: 3, label: f}
        """))
    d = expect(p, "workloads.0.mode", contains=("`mode`", "max is not one of mean, sum"),
               alone=False)
    assert d.counterexample == {"M": 16, "mode": "max"}
    expect(p, "workloads.1.flag", contains=("`flag`", "1 is not a bool"), alone=False)
    expect(p, "workloads.2.k", contains=("`k`", "two is not an int"), alone=False)
    expect(p, "workloads.3.M", contains=("index `M` (Dim) = -3", "negative"), alone=False)
    # A float is opaque to the prover, but a row's value of it is still a number (an int
    # is one, as in Python).
    expect(p, "workloads.4.eps", contains=("`eps`", "small is not a number"), alone=False)
    assert len(p.diags()) == 5


def test_a_quoted_number_is_shown_quoted(tmp_path):
    # `M: '4'` is the string 4: shown bare, the message read "= 4: 4 is not an int".
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          flag: {type: bool, default: false}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, """
        - {M: '4', label: a}
        - {M: 4, flag: 'true', label: b}
        - {M: abc, label: c}
        """))
    expect(p, "workloads.0.M", contains=("index `M` (Dim) = '4'", "'4' is not an int"),
           alone=False)
    expect(p, "workloads.1.flag", contains=("'true' is not a bool",), alone=False)
    expect(p, "workloads.2.M", contains=("= abc: abc is not an int",), alone=False)


# ----------------------------------------------------------------------------- some

OPTIONAL = """
forall: {M: Dim}
params:
  gated: {type: bool, default: false}
inputs:
  x: {dtype: float32, shape: "[M]"}
  bias: {dtype: float32, shape: "[M]", optional: true}
  gate: {dtype: float32, shape: "[M]", optional: gated}
outputs:
  y: {dtype: float32, shape: "[M]"}
"""


def test_some_lists_a_required_tensor(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, "- {M: 4, some: [x], label: a}"))
    d = expect(p, "workloads.0.some", contains=("`x`", "is required", "optional: true"))
    assert d.counterexample == {"M": 4, "some": ["x"]}


def test_some_lists_a_tensor_with_an_optional_expression(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, "- {M: 4, gated: true, some: [gate], label: a}"))
    d = expect(p, "workloads.0.some", contains=("`gate`", "`optional` expression holds"))
    assert d.counterexample == {"M": 4, "gated": True, "some": ["gate"]}


def test_some_lists_an_output_or_unknown_name(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, """
        - {M: 4, some: [y], label: a}
        - {M: 4, some: [bais], label: b}
        """))
    expect(p, "workloads.0.some", contains=("`y`", "no input or construction-time tensor",
                                            "optional ones: bias"), alone=False)
    expect(p, "workloads.1.some", contains=("`bais`",), alone=False)
    assert len(p.diags()) == 2


# ----------------------------------------------------------------------------- dtype_cases

def test_dtype_cases_missing(tmp_path):
    p = prove(tmp_path, spec(MAT, "- {M: 8, N: 4, label: r}"))
    d = expect(p, "workloads.0", contains=("no `dtype_cases`", "DType index T is used"))
    assert d.hint == "dtype_cases: [{T: bfloat16}]"
    assert d.counterexample == {"M": 8, "N": 4}


def test_dtype_cases_without_a_dtype_index(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, "- {M: 8, dtype_cases: [{T: float32}], label: r}"))
    d = expect(p, "workloads.0.dtype_cases", contains=("gives `dtype_cases`", "no DType index"))
    assert d.counterexample == {"M": 8}


def test_dtype_case_with_wrong_keys(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, T: "DType[float16 | bfloat16]", U: "DType[float32 | float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
          s: {dtype: U, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        """, "- {M: 8, dtype_cases: [{T: float16, U: float32}, {T: float16, V: float32}], label: r}"))
    d = expect(p, "workloads.0.dtype_cases.1", contains=("misses U", "has V",
                                                         "exactly T, U"))
    assert d.counterexample["V"] == "float32" and d.counterexample["M"] == 8


def test_dtype_case_value_outside_the_set(tmp_path):
    p = prove(tmp_path, spec(MAT, "- {M: 8, N: 4, dtype_cases: [{T: float32}], label: r}"))
    d = expect(p, "workloads.0.dtype_cases.0", contains=("T = float32",
                                                         "not one of the dtypes bfloat16, float16"))
    assert d.counterexample == {"M": 8, "N": 4, "T": "float32"}


def test_dtype_case_outside_dtype_combos(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, T: "DType[float16 | bfloat16]", KV: "DType[float16 | float8_e4m3fn]"}
        inputs:
          q: {dtype: T, shape: "[M]"}
          kv: {dtype: KV, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        dtype_combos:
        - {T: float16, KV: float16}
        - {T: bfloat16, KV: float8_e4m3fn}
        """, "- {M: 8, dtype_cases: [{T: float16, KV: float16}, {T: bfloat16, KV: float16}], label: r}"))
    d = expect(p, "workloads.0.dtype_cases.1", contains=("T=bfloat16, KV=float16",
                                                         "not one of `dtype_combos`"))
    assert d.counterexample["T"] == "bfloat16" and d.counterexample["KV"] == "float16"


def test_dtype_combos_with_a_dtype_parameter_column(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, T: "DType[float16 | float32]"}
        params:
          out_dtype: {type: "float16 | float32", default: float32}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: out_dtype, shape: "[M]"}
        dtype_combos:
        - {T: float16, out_dtype: float32}
        - {T: float32, out_dtype: float16}
        """, """
        - {M: 8, dtype_cases: [{T: float16}], label: up}
        - {M: 8, out_dtype: float16, dtype_cases: [{T: float16}], label: same}
        """))
    d = expect(p, "workloads.1.dtype_cases.0", contains=("`same`", "T=float16, out_dtype=float16"))
    assert d.counterexample["out_dtype"] == "float16"


# ----------------------------------------------------------------------------- labels

ONE = """
forall: {M: Dim}
inputs:
  x: {dtype: float32, shape: "[M]"}
outputs:
  y: {dtype: float32, shape: "[M]"}
"""


@pytest.mark.parametrize("label", ["llama-3-70b-prefill-long-ctx", "a" * 25,
                                   "video-stage-downsample-k3-s2-bias"])
def test_long_label_is_a_warning(tmp_path, label):
    p = prove(tmp_path, spec(ONE, f"- {{M: 8, label: {label}}}"))
    d = expect(p, "workloads.0.label", contains=(f"`{label}`", f"{len(label)} characters",
                                                 "more than 24"), severity=WARNING)
    assert d.counterexample == {"M": 8}
    assert p.verdict() == "proven"


def test_label_of_24_characters_is_fine(tmp_path):
    clean(prove(tmp_path, spec(ONE, f"- {{M: 8, label: {'b' * 24}}}")))


@pytest.mark.parametrize("label,bad", [("'llama 8b'", "' '"), ("'fp8/decode'", "'/'"),
                                       ("'a:b+c'", "'+', ':'")])
def test_label_with_other_characters(tmp_path, label, bad):
    p = prove(tmp_path, spec(ONE, f"- {{M: 8, label: {label}}}"))
    d = expect(p, "workloads.0.label", contains=(f"contains {bad}", "letters, digits"))
    assert d.counterexample == {"M": 8}


@pytest.mark.parametrize("rows,row,m", [('- {M: 8, label: ""}', 0, 8),
                                        ("- {M: 8, label: ok}\n- {M: 4, label: ''}", 1, 4),
                                        ("- {M: 8, label: a}\n- {M: 4, label: b}\n"
                                         "- {label: '', M: 2}", 2, 2)])
def test_empty_label(tmp_path, rows, row, m):
    p = prove(tmp_path, spec(ONE, rows))
    d = expect(p, f"workloads.{row}.label", contains=(f"row {row} has an empty label",))
    assert d.counterexample == {"M": m}


# ----------------------------------------------------------------------------- shared labels

def test_rows_sharing_a_label_differ_in_an_index(tmp_path):
    p = prove(tmp_path, spec(MAT, """
        - {M: 8, N: 4, dtype_cases: [{T: float16}], label: r}
        - {M: 16, N: 4, dtype_cases: [{T: bfloat16}], label: r}
        """))
    d = expect(p, "workloads.1", contains=("rows 0 and 1 share the label `r`", "differ in M",
                                           "M: 8 vs 16"))
    assert d.counterexample == {"M": 16, "N": 4}


def test_rows_sharing_a_label_differ_in_some(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, """
        - {M: 4, label: r}
        - {M: 4, some: [bias], label: r}
        """))
    expect(p, "workloads.1", contains=("share the label `r`", "differ in some",
                                       "some: [] vs [bias]"))


def test_rows_sharing_a_label_differ_in_a_parameter(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, """
        - {M: 4, label: r}
        - {M: 4, gated: true, label: r}
        """))
    expect(p, "workloads.1", contains=("share the label `r`", "differ in gated",
                                       "gated: (not given) vs true"))


def test_rows_sharing_a_label_may_differ_in_dtypes(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, T: "DType[float16 | bfloat16]"}
        params:
          out_dtype: {type: "float32 | None", default: null}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: "coalesce_dtype(out_dtype, T)", shape: "[M]"}
        """, """
        - {M: 4, dtype_cases: [{T: float16}], label: r}
        - {M: 4, dtype_cases: [{T: bfloat16}], label: r}
        - {M: 4, out_dtype: float32, dtype_cases: [{T: bfloat16}], label: r}
        """))
    clean(p)


# ----------------------------------------------------------------------------- case ids

def test_case_id_repeated_within_a_row(tmp_path):
    p = prove(tmp_path, spec(MAT, "- {M: 8, N: 4, dtype_cases: [{T: float16}, {T: float16}], label: r}"))
    d = expect(p, "workloads.0", contains=("case id `r-float16` of row 0 repeats",))
    assert d.counterexample == {"M": 8, "N": 4, "T": "float16"}


def test_case_id_repeated_by_identical_rows(tmp_path):
    p = prove(tmp_path, spec(ONE, """
        - {M: 8, label: twin}
        - {M: 8, label: twin}
        """))
    expect(p, "workloads.1", contains=("case id `twin` of row 1 repeats the one of row 0",))


def test_case_id_repeated_across_labels_by_a_dtype_parameter(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          out_dtype: {type: "float16 | float32 | None", default: null}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: "coalesce_dtype(out_dtype, float32)", shape: "[M]"}
        """, """
        - {M: 8, out_dtype: float16, label: cast}
        - {M: 16, label: cast-float16}
        """))
    d = expect(p, "workloads.1", contains=("case id `cast-float16` of row 1 repeats the one "
                                           "of row 0",))
    assert d.counterexample == {"M": 16}


def test_case_id_repeated_across_labels_by_a_dtype_index(tmp_path):
    # The DType index is used only where `bias` is passed.
    p = prove(tmp_path, spec("""
        forall: {M: Dim, T: "DType[float16 | bfloat16]"}
        inputs:
          x: {dtype: float32, shape: "[M]"}
          bias: {dtype: T, shape: "[M]", optional: true}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, """
        - {M: 8, some: [bias], dtype_cases: [{T: float16}], label: a}
        - {M: 16, label: a-float16}
        """))
    expect(p, "workloads.1", contains=("case id `a-float16` of row 1 repeats the one of "
                                       "row 0",))


def test_case_id_matches_the_runtime(tmp_path):
    from opspec.ops.workloads import cases

    text = spec("""
        forall: {M: Dim, T: "DType[float16 | bfloat16]", U: "DType[float32]"}
        params:
          out_dtype: {type: "float16 | float32 | None", default: null}
        inputs:
          x: {dtype: T, shape: "[M]"}
          s: {dtype: U, shape: "[M]"}
        outputs:
          y: {dtype: "coalesce_dtype(out_dtype, T)", shape: "[M]"}
        """, """
        - {M: 8, out_dtype: float32, dtype_cases: [{T: float16, U: float32}], label: a}
        - {M: 8, dtype_cases: [{U: float32, T: bfloat16}], label: b}
        """)
    p = prove(tmp_path, text)
    clean(p)
    manifest = load_paths([tmp_path], strict=True)
    adts, _ = elaborate_adts(manifest.adts)
    el, _ = elaborate(manifest.specs[OP], adts)
    ids = [c.id for c in cases(el)]
    assert ids == ["a-float16-float32-float32", "b-bfloat16-float32"]
    assert ids == [W.case_id(el, r.label, r.values, dc) for r in el.workloads
                   for dc in r.dtype_cases]


# ----------------------------------------------------------------------------- generators

def test_generator_raises(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {B: Dim, W: Dim, N: Dim, D: Dim}
        inputs:
          pool: {dtype: float32, shape: "[N, D]"}
          table: {dtype: int32, shape: "[B, W]", values: "paged_block_table(B, W, N)", requires: ["in_range(0, N)"]}
        outputs:
          y: {dtype: float32, shape: "[B, D]"}
        """, "- {B: 2, W: 8, N: 4, D: 16, label: tight}"))
    d = expect(p, "workloads.0", contains=("`tight`", "generator of `table`",
                                           "paged_block_table(B, W, N)", "B=2, W=8, NP=4"))
    assert d.counterexample == {"B": 2, "W": 8, "N": 4, "D": 16}


def test_generators_run_in_the_order_their_arguments_allow(tmp_path):
    """A generator declared before the one whose shape gives its argument runs after it, in
    the check and at run time alike, and an empty generated table keeps its declared width
    (the primitive's shape, not the nesting of an empty list)."""
    from opspec.ops.workloads import cases

    p = prove(tmp_path, spec("""
        forall: {B: Dim, W: Dim, NP: Dim, lens: "Seq[Int]"}
        inputs:
          table: {dtype: int32, shape: "[B, W]", values: "paged_block_table(B, W, NP)", requires: ["in_range(0, NP)"]}
          seqlens: {dtype: int32, shape: "[B]", values: "as_tensor(lens)"}
        outputs:
          y: {dtype: int32, shape: "[B, W]"}
        """, """
        - {W: 4, NP: 8, lens: [3, 5], label: two}
        - {W: 4, NP: 8, lens: [], label: none}
        """))
    clean(p)
    (result,) = p.report.specs
    manifest = load_paths([tmp_path], strict=True)
    el, _ = elaborate(manifest.specs[OP], elaborate_adts(manifest.adts)[0])
    two, none = cases(el, result.plan)
    table, seqlens = two.inputs("cpu")
    assert seqlens.tolist() == [3, 5] and table.shape == (2, 4)
    assert sorted(table.flatten().tolist()) == list(range(8))     # 8 distinct pages of 8
    table, seqlens = none.inputs("cpu")
    assert table.shape == (0, 4) and seqlens.shape == (0,)


def test_generator_raises_on_too_many_experts(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {T: Dim, K: Dim, E: Dim}
        inputs:
          w: {dtype: float32, shape: "[E]"}
          ids: {dtype: int32, shape: "[T, K]", values: "topk_ids(T, K, E)"}
        outputs:
          y: {dtype: float32, shape: "[E]"}
        """, "- {T: 4, K: 9, E: 8, label: topk}"))
    d = expect(p, "workloads.0", contains=("generator of `ids`", "0 < K <= E", "K=9, E=8"))
    assert d.counterexample == {"T": 4, "K": 9, "E": 8}


def test_generator_raises_on_an_empty_list(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {G: Dim, L: "Seq[Int]"}
        inputs:
          starts: {dtype: int32, shape: "[G]", values: "exclusive_prefix_sum(L)"}
        outputs:
          y: {dtype: float32, shape: "[G]"}
        """, "- {L: [], label: none}"))
    d = expect(p, "workloads.0", contains=("generator of `starts`", "non-empty"))
    assert d.counterexample == {"L": []}


def test_generated_length_that_no_index_can_give(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {H: Dim, D: Dim, lens: "Seq[Int]"}
        inputs:
          x: {dtype: float32, shape: "[D]"}
          cu: {dtype: int32, shape: "[2 * H]", values: "prefix_sum(lens)"}
        outputs:
          y: {dtype: float32, shape: "[H, D]"}
        """, "- {D: 4, lens: [1, 2], label: odd}"))
    d = expect(p, "workloads.0", contains=("generated `cu` has length 3 at axis 0",
                                           "`2 * H` cannot equal"))
    assert d.counterexample == {"D": 4, "lens": [1, 2]}


def test_generated_rank_differs_from_the_declared_one(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {N: Dim, lens: "Seq[Int]"}
        inputs:
          idx: {dtype: int32, shape: "[N]", values: "token_indices(lens)"}
        outputs:
          y: {dtype: float32, shape: "[N]"}
        """, "- {lens: [2, 3], label: ranks}"))
    expect(p, "workloads.0", contains=("gives shape [5, 2]", "does not unify",
                                       "rank 2, where the declared shape has rank 1"))


def test_generated_axis_differs_from_a_known_one(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {B: Dim, W: Dim, N: Dim}
        inputs:
          pool: {dtype: float32, shape: "[N]"}
          table: {dtype: int32, shape: "[B, W + 1]", values: "paged_block_table(B, W, N)"}
        outputs:
          y: {dtype: float32, shape: "[B]"}
        """, "- {B: 2, W: 4, N: 16, label: off}"))
    d = expect(p, "workloads.0", contains=("generated `table` has length 4 at axis 1",
                                           "`W + 1` = 5"))
    assert d.counterexample == {"B": 2, "W": 4, "N": 16}


def test_generators_solve_each_others_arguments(tmp_path):
    # B is solved by `lens` ([B]) and then is an argument of `table`; NP is a let.
    p = prove(tmp_path, spec("""
        forall: {B: Dim, W: Dim, P: Dim, kv: "Seq[Int]"}
        params:
          page: {type: int}
        inputs:
          pages: {dtype: float32, shape: "[P]"}
          lens: {dtype: int32, shape: "[B]", values: "as_tensor(kv)", requires: ["in_range(0, W * page + 1)"]}
          table: {dtype: int32, shape: "[B, W]", values: "paged_block_table(B, W, NP)", requires: ["in_range(0, NP)"]}
        outputs:
          y: {dtype: float32, shape: "[B]"}
        let: {NP: "P // page"}
        shape_rules: ["page > 0"]
        """, """
        - {W: 2, P: 1024, page: 128, kv: [256, 200], label: ok}
        - {B: 2, W: 2, P: 1024, page: 128, kv: [256, 200], label: given}
        - {W: 2, P: 1024, page: 128, kv: [256, 300], label: long}
        """))
    expect(p, "workloads.1.B", contains=("`given`", "generator of `lens` solves it"),
           alone=False)
    d = expect(p, "workloads.2", contains=("`long`", "generated `lens` = [256, 300]",
                                           "in_range(0, W * page + 1)", "W * page + 1=257"),
               alone=False)
    assert d.counterexample == {"W": 2, "P": 1024, "page": 128, "kv": [256, 300]}
    assert len(p.diags()) == 2


# ----------------------------------------------------------------------------- axes

def test_negative_output_axis(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, N: Dim}
        inputs:
          a: {dtype: float32, shape: "[M]"}
          b: {dtype: float32, shape: "[N]"}
        outputs:
          y: {dtype: float32, shape: "[M - N]"}
        """, "- {M: 2, N: 5, label: neg}"))
    d = expect(p, "workloads.0", contains=("axis 0 of `y`", "`M - N`", "is -3"))
    assert d.counterexample == {"M": 2, "N": 5}


def test_negative_axis_through_a_let(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {L: Dim}
        params:
          k: {type: int}
        inputs:
          x: {dtype: float32, shape: "[L]"}
        outputs:
          y: {dtype: float32, shape: "[L_out]"}
        let: {L_out: "conv.out(L, k, 1, 0, 1)"}
        """, "- {L: 3, k: 7, label: wide}"))
    expect(p, "workloads.0", contains=("axis 0 of `y`", "`L_out`", "is -3"))


def test_negative_axis_of_an_input_checked_axis(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, C: Dim}
        params:
          pad: {type: int, default: 0}
        inputs:
          x: {dtype: float32, shape: "[M, C]"}
          w: {dtype: float32, shape: "[C + pad]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, "- {M: 4, C: 2, pad: -5, label: crop}"))
    d = expect(p, "workloads.0", contains=("axis 0 of `w`", "`C + pad`", "is -3"))
    assert d.counterexample == {"M": 4, "C": 2, "pad": -5}


# ----------------------------------------------------------------------------- refinements

def test_refinement_broken(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        shape_rules: ["M % 8 == 0"]
        """, "- {M: 12, label: odd}"))
    d = expect(p, "workloads.0", contains=("breaks the refinement `M % 8 == 0`",
                                           "signature.shape_rules.0", "M=12"))
    assert d.counterexample == {"M": 12}


def test_refinement_broken_on_a_parameter_branch(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, N: Dim}
        params:
          causal: {type: bool, default: false}
        inputs:
          q: {dtype: float32, shape: "[M]"}
          k: {dtype: float32, shape: "[N]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        shape_rules: ["not causal or M <= N"]
        """, """
        - {M: 8, N: 4, label: full}
        - {M: 8, N: 4, causal: true, label: causal}
        """))
    d = expect(p, "workloads.1", contains=("`causal`", "`not causal or M <= N`", "M=8, N=4"))
    assert d.counterexample == {"M": 8, "N": 4, "causal": True}


def test_refinement_broken_by_one_dtype_case(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, T: "DType[float16 | float32]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M]"}
        shape_rules: ["T == 'float32' or M <= 64"]
        """, "- {M: 128, dtype_cases: [{T: float32}, {T: float16}], label: big}"))
    d = expect(p, "workloads.0", contains=("case `big-float16`", "T == 'float32' or M <= 64",
                                           "M=128, T=float16"))
    assert d.counterexample == {"M": 128, "T": "float16"}


def test_row_outside_a_domain_restriction(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          mode: {type: "'a' | 'b' | 'c'", default: a}
        inputs:
          x: {dtype: float32, shape: "[M]"}
          lo: {dtype: float32, shape: "[M]", optional: true}
          hi: {dtype: float32, shape: "[M]", optional: true}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        shape_rules: ["present(lo) or present(hi)", "mode != 'c'"]
        """, """
        - {M: 4, some: [lo], label: ok}
        - {M: 4, label: none}
        - {M: 4, some: [hi], mode: c, label: c}
        """))
    d = expect(p, "workloads.1", contains=("`none`", "domain restriction "
                                           "`present(lo) or present(hi)`"), alone=False)
    assert d.counterexample == {"M": 4}
    d = expect(p, "workloads.2", contains=("`c`", "`mode != 'c'`"), alone=False)
    assert d.counterexample == {"M": 4, "some": ["hi"], "mode": "c"}
    assert len(p.diags()) == 2


# ----------------------------------------------------------------------------- lets

def test_let_that_does_not_evaluate(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {Q: Dim}
        inputs:
          b: {dtype: float32, shape: "[Q]"}
        outputs:
          y: {dtype: float32, shape: "[n, n]"}
        let: {n: "mhc.expansion(Q)"}
        """, """
        - {Q: 24, label: ok}
        - {Q: 25, label: bad}
        """))
    d = expect(p, "workloads.1", contains=("`bad`", "let `n` = `mhc.expansion(Q)`",
                                           "does not evaluate", "25"))
    assert d.counterexample == {"Q": 25}


def test_let_dividing_by_a_zero_parameter(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim}
        params:
          c: {type: int}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[C]"}
        let: {C: "ceil_div(M, c)"}
        """, "- {M: 8, c: 0, label: zero}"))
    expect(p, "workloads.0", contains=("let `C` = `ceil_div(M, c)`", "does not evaluate"))


def test_let_with_an_axis_of_the_wrong_length(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {L: Dim}
        params:
          k: {type: "int | list[int]"}
        inputs:
          x: {dtype: float32, shape: "[L]"}
        outputs:
          y: {dtype: float32, shape: "[kw]"}
        let: {kw: "per_axis(k, 0, 2)"}
        """, "- {L: 8, k: [1, 2, 3], label: three}"))
    d = expect(p, "workloads.0", contains=("let `kw` = `per_axis(k, 0, 2)`",))
    assert d.counterexample == {"L": 8, "k": [1, 2, 3]}


# ----------------------------------------------------------------------------- ADT invariants

LAYOUT_OP = """
forall: {P: Dim, E: Dim}
params:
  layout: {type: Layout}
inputs:
  x: {dtype: float32, shape: "[P]"}
  m: {dtype: int32, shape: "[E]"}
outputs:
  y: {dtype: float32, shape: "[P]"}
"""


@pytest.mark.parametrize("packing,alignment", [("tight", 2), ("aligned", 1), ("aligned", 0)])
def test_adt_invariant_broken(tmp_path, packing, alignment):
    p = prove(tmp_path, spec(LAYOUT_OP, f"""
        - {{P: 64, E: 4, layout: {{contiguous: {{packing: {packing}, alignment: {alignment}}}}}, label: lay}}
        """), types=LAYOUT)
    d = expect(p, "workloads.0.layout", contains=("breaks the invariant",
                                                  f"packing: {packing}, alignment: {alignment}",
                                                  "Layout.contiguous"))
    assert d.counterexample["layout"] == {"contiguous": {"packing": packing,
                                                         "alignment": alignment}}


def test_adt_value_with_a_missing_field(tmp_path):
    p = prove(tmp_path, spec(LAYOUT_OP, """
        - {P: 64, E: 4, layout: {contiguous: {packing: tight}}, label: lay}
        - {P: 64, E: 4, layout: {masked: {max_m: 16}}, label: masked}
        """), types=LAYOUT)
    expect(p, "workloads.0.layout", contains=("missing alignment",))


# ----------------------------------------------------------------------------- requires

def test_requires_broken_by_the_generated_offsets(tmp_path):
    p = prove(tmp_path, spec(VARLEN, """
        - {S: 64, D: 8, seq_lens: [16, 16, 16, 16], dtype_cases: [{T: float16}], label: ok}
        - {S: 60, D: 8, seq_lens: [16, 16, 16, 16], dtype_cases: [{T: float16}], label: short}
        """))
    d = expect(p, "workloads.1", contains=("`short`", "generated `cu` = [0, 16, 32, 48, 64]",
                                           "prefix_offsets(S)", "S=60"))
    assert d.counterexample == {"S": 60, "D": 8, "seq_lens": [16, 16, 16, 16], "T": "float16"}


def test_requires_sums_to_broken(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, G: Dim, sizes: "Seq[Int]"}
        inputs:
          x: {dtype: float32, shape: "[M]"}
          counts: {dtype: int32, shape: "[G]", values: "as_tensor(sizes)", requires: ["sums_to(M)"]}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, "- {M: 10, sizes: 'repeat(3, 3)', label: nine}"))
    d = expect(p, "workloads.0", contains=("generated `counts` = [3, 3, 3]", "sums_to(M)",
                                           "M=10"))
    assert d.counterexample == {"M": 10, "sizes": "repeat(3, 3)"}


def test_requires_in_range_broken(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {T: Dim, K: Dim, E: Dim, R: Dim}
        inputs:
          w: {dtype: float32, shape: "[R, E]"}
          ids: {dtype: int32, shape: "[T, K]", values: "topk_ids(T, K, E)", requires: ["in_range(0, R)"]}
        outputs:
          y: {dtype: float32, shape: "[T]"}
        """, "- {T: 64, K: 2, E: 64, R: 4, label: few}"))
    d = expect(p, "workloads.0", contains=("generated `ids`", "in_range(0, R)", "R=4"))
    assert d.counterexample == {"T": 64, "K": 2, "E": 64, "R": 4}


def test_requires_reading_a_tensor_absent_on_a_branch(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {N: Dim, T: Dim, lens: "Seq[Int]"}
        inputs:
          x: {dtype: float32, shape: "[T]"}
          idx: {dtype: int32, shape: "[T, 2]", values: "token_indices(lens)", requires: ["indices_within(offsets)"]}
          offsets: {dtype: int32, shape: "[N + 1]", optional: true, values: "prefix_sum(lens)"}
        outputs:
          y: {dtype: float32, shape: "[T]"}
        """, """
        - {lens: [2, 3], some: [offsets], label: both}
        - {lens: [2, 3], label: alone}
        """))
    d = expect(p, "signature.inputs.idx.requires.0",
               contains=("`indices_within(offsets)` of `idx`", "tensor `offsets`",
                         "present(offsets)=false"), alone=False,
               line=p.line("idx: {"))
    assert d.counterexample == {"present(offsets)": False}
    assert d.hint == 'make `idx` exist only where `offsets` does, e.g. optional: "present(offsets)"'


def test_requires_reading_a_tensor_without_values(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {N: Dim, T: Dim, lens: "Seq[Int]"}
        inputs:
          x: {dtype: float32, shape: "[T]"}
          offsets: {dtype: int32, shape: "[N + 1]"}
          idx: {dtype: int32, shape: "[T, 2]", values: "token_indices(lens)", requires: ["indices_within(offsets)"]}
        outputs:
          y: {dtype: float32, shape: "[T]"}
        """, "- {N: 2, lens: [2, 3], label: r}"))
    expect(p, "signature.inputs.idx.requires.0", contains=("contents of `offsets`",
                                                           "no `values` generator"), alone=False)


def test_requires_at_the_wrong_rank(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {T: Dim, K: Dim, E: Dim}
        inputs:
          w: {dtype: float32, shape: "[E]"}
          ids: {dtype: int32, shape: "[T, K]", values: "topk_ids(T, K, E)", requires: ["sums_to(E)"]}
        outputs:
          y: {dtype: float32, shape: "[E]"}
        """, "- {T: 4, K: 1, E: 8, label: r}"))
    expect(p, "signature.inputs.ids.requires.0", contains=("`sums_to(E)` reads `ids` at rank 1",
                                                           "has rank 2"), alone=False)


# ----------------------------------------------------------------------------- optional coverage

def test_implemented_op_never_passes_an_optional_tensor(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, "- {M: 4, label: a}\n- {M: 8, label: b}",
                             status="implemented"))
    d = expect(p, "signature.inputs.bias.optional", contains=("no workload row passes",
                                                              "`bias`"))
    assert d.counterexample == {"rows": 2}


def test_implemented_op_always_passes_an_optional_tensor(tmp_path):
    p = prove(tmp_path, spec(OPTIONAL, "- {M: 4, some: [bias], label: a}", status="implemented"))
    expect(p, "signature.inputs.bias.optional", contains=("every workload row passes", "`bias`"))


def test_implemented_op_with_an_optional_construction_tensor(tmp_path):
    p = prove(tmp_path, spec("""
        forall: {M: Dim, D: Dim}
        params:
          table: {dtype: float32, shape: "[D]", optional: true}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        outputs:
          y: {dtype: float32, shape: "[M]"}
        """, "- {M: 4, label: a}", status="implemented"))
    expect(p, "signature.params.table.optional", contains=("no workload row passes", "`table`"))


def test_optional_coverage_is_not_asked_of_a_spec_only_op(tmp_path):
    clean(prove(tmp_path, spec(OPTIONAL, "- {M: 4, label: a}")))


def test_optional_tensor_passed_and_omitted(tmp_path):
    clean(prove(tmp_path, spec(OPTIONAL, "- {M: 4, label: a}\n- {M: 4, some: [bias], label: b}",
                               status="implemented")))


# ----------------------------------------------------------------------------- robustness

def test_a_row_that_raises_is_a_diagnostic(tmp_path, monkeypatch):
    def boom(self, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(W._Checker, "instantiate", boom)
    p = prove(tmp_path, spec(ONE, "- {M: 8, label: r}"))
    d = expect(p, "workloads.0", contains=("row `r` cannot be checked: RuntimeError: boom",))
    assert d.counterexample == {"M": 8}


def test_a_seq_value_that_is_not_a_value_primitive_call(tmp_path):
    p = prove(tmp_path, spec(VARLEN, """
        - {S: 64, D: 8, seq_lens: "prefix_sum(repeat(1, 2))", dtype_cases: [{T: float16}], label: v}
        - {S: 64, D: 8, seq_lens: "repeat(16, 4)", dtype_cases: [{T: float16}], label: w}
        """))
    d = expect(p, "workloads.0.seq_lens", contains=("`seq_lens`", "not a call of a value "
                                                    "primitive"))
    assert d.counterexample["seq_lens"] == "prefix_sum(repeat(1, 2))"


# The ADT the `moe.*` primitives read: a contiguous layout with its packing, metadata kind
# and alignment, or a masked one with a row capacity per expert.
GROUPED = """\
adts:
  MGroupedLayout:
    sum:
      contiguous:
        fields:
          packing: {type: "'tight' | 'aligned'"}
          metadata_kind: {type: "'physical_psum' | 'per_row'"}
          alignment: Dim
        invariant: "alignment >= 1 and (packing == 'tight') == (alignment == 1)"
      masked:
        fields: {max_m: Dim}
"""


def test_valid_rows_of_every_form(tmp_path):
    """A spec exercising generators, ADT values, Maybe parameters, `some` and dtype params:
    every row is accepted."""
    p = prove(tmp_path, spec("""
        types:
          Meta:
            params: {layout: MGroupedLayout, E: Dim, P: Dim}
            match: layout
            cases:
            - {when: {masked: _}, is: "[E]"}
            - {when: {contiguous: _}, is: "[E]"}
          Rows:
            params: {layout: MGroupedLayout, E: Dim, P: Dim, C: Dim}
            match: layout
            cases:
            - {when: {masked: _}, is: "[E, layout.max_m, C]"}
            - {when: {contiguous: _}, is: "[P, C]"}
        forall: {P: Dim, E: Dim, K: Dim, D: "DType[float16 | bfloat16]", S: Shape}
        params:
          layout: {type: MGroupedLayout}
          scale: {type: "float | None", default: null}
          out_dtype: {type: "float32 | None", default: null}
        inputs:
          a: {dtype: D, shape: "Rows[layout, E, P, K]"}
          meta: {dtype: int32, shape: "Meta[layout, E, P]", values: "moe.layout_metadata(layout, R, E)", requires: ["moe.layout_valid(layout, R, E)"]}
          extra: {dtype: float32, shape: "[*S]", optional: true}
        outputs:
          y: {dtype: "coalesce_dtype(out_dtype, D)", shape: "Rows[layout, E, P, K]"}
        let: {R: "E * layout.max_m if layout.kind == 'masked' else P"}
        shape_rules: ["E > 0", "layout.kind == 'masked' or P % layout.alignment == 0"]
        """, """
        - {P: 64, E: 4, K: 8, layout: {contiguous: {packing: tight, metadata_kind: physical_psum, alignment: 1}}, dtype_cases: [{D: float16}, {D: bfloat16}], label: tight}
        - {P: 64, E: 4, K: 8, layout: {contiguous: {packing: aligned, metadata_kind: physical_psum, alignment: 16}}, scale: 0.5, out_dtype: float32, dtype_cases: [{D: bfloat16}], label: aligned}
        - {E: 4, K: 8, S: [2, 3], some: [extra], layout: {masked: {max_m: 16}}, dtype_cases: [{D: bfloat16}], label: masked}
        - {E: 4, K: 8, S: [], some: [extra], layout: {masked: {max_m: 16}}, dtype_cases: [{D: bfloat16}], label: masked-0d}
        """), types=GROUPED)
    clean(p)
    assert p.verdict() == "proven"


# ----------------------------------------------------------------------------- the corpus

@pytest.fixture(scope="module")
def corpus_specs():
    if not CORPUS.is_dir():
        pytest.skip("the reference corpus is not present")
    manifest = load_paths([CORPUS], strict=True)
    adts, _ = elaborate_adts(manifest.adts)
    out = {}
    for s in manifest.specs.values():
        el, _ = elaborate(s, adts)
        out[s.name] = (el, s, prove_spec(el, s))
    return out


def test_corpus_every_row_instantiates(corpus_specs, monkeypatch):
    """The real corpus: 803 rows, 1322 cases; every one instantiates (generators, requires,
    refinements, axes) and no `workload` diagnostic is reported. Every row there gives
    exactly the indices its branch uses."""
    count = {"rows": 0, "cases": 0}
    orig = W._Checker.instantiate

    def counting(self, *args, **kwargs):
        count["cases"] += 1
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(W._Checker, "instantiate", counting)
    found = []
    for el, loaded, result in corpus_specs.values():
        count["rows"] += len(el.workloads)
        found += [d.render() for d in W.check_workloads(el, loaded, result.plan)]
    assert not found, found
    assert count == {"rows": 803, "cases": 1322}
    # The same through the prover.
    assert not [d for _, _, r in corpus_specs.values() for d in r.diagnostics
                if d.check == "workload"]


def _generated_by_case(monkeypatch) -> dict:
    """Record, by the seeded rng's case id, each value a generator call returns
    (``evaluate(..., rng=...)`` in the generator driver that the check and the runtime
    share), in call order."""
    seen: dict[str, list] = {}
    orig = G.evaluate

    def recording(e, env, *args, rng=None, **kw):
        out = orig(e, env, *args, rng=rng, **kw)
        if rng is not None:
            seen.setdefault(rng.key, []).append((print_expr(e), out))
        return out

    class Keyed(random.Random):
        def __init__(self, key):
            super().__init__(key)
            self.key = key.split(":", 1)[1]      # "{seed}:{op}:{case id}" -> op:id

    monkeypatch.setattr(G, "evaluate", recording)
    monkeypatch.setattr(random, "Random", Keyed)
    return seen


def test_corpus_every_case_instantiates_at_run_time(corpus_specs, monkeypatch):
    """`Case.inputs` builds every case of the corpus (meta tensors), generators run in the
    order the `workload` check runs them, and both draw the same contents from the same
    seed: `GroupedQueryAttentionPagedFwdOp`'s page table, declared before the
    `cache_seqlens` whose shape gives its B, runs after it."""
    from opspec.ops.workloads import cases

    seen = _generated_by_case(monkeypatch)
    for el, loaded, result in corpus_specs.values():
        assert not W.check_workloads(el, loaded, result.plan)
    prover = dict(seen)
    seen.clear()
    runtime = seen
    built = 0
    for el, _, result in corpus_specs.values():
        for c in cases(el, result.plan):
            inputs = c.inputs("meta")
            # meta, but an input declared `device: cpu` stays on the CPU
            assert all(t is None or t.device.type == ("cpu" if el.inputs[n].device == "cpu"
                                                      else "meta")
                       for n, t in zip(el.inputs, inputs, strict=True)), c.id
            built += 1
    assert built == 1322
    assert runtime.keys() == prover.keys() and len(runtime) > 40
    for k in runtime:
        assert [c for c, _ in runtime[k]] == [c for c, _ in prover[k]], k
    assert runtime == prover
    # the page table waits for B, which cache_seqlens' shape [B] gives; the row's
    # `q_lens: "repeat(512, 8)"` is evaluated
    el, _, result = corpus_specs["GroupedQueryAttentionPagedFwdOp"]
    (row,) = [c for c in cases(el, result.plan) if c.id == "llama-8b-float16-float16"]
    assert row.values["q_lens"] == (512,) * 8
    paged = runtime["GroupedQueryAttentionPagedFwdOp:llama-8b-float16-float16"]
    assert [call for call, _ in paged] == ["as_tensor(cache_lens)", "prefix_sum(q_lens)",
                                           "paged_block_table(B, W, NP)"]
    table = paged[2][1]
    assert len(table) == 8 and {len(r) for r in table} == {72}
    # block_indices' shape gives T_q; nsa_block_counts(T_q, ...) runs in the next pass
    nsa = runtime["NSAVarlenFwdOp:prefill-4x2k-float16"]
    assert [call for call, _ in nsa][-1] == "nsa_block_counts(T_q, H_kv, SEL)"


def test_bundled_cases_draw_the_checks_contents(monkeypatch):
    """The bundled manifest: each case's generators give at run time what they gave the
    `workload` check (MoE's routing and offsets, attention's sequence offsets)."""
    import opspec.ops as ops
    from opspec.manifest import MANIFEST_DIR
    from opspec.ops.workloads import cases

    manifest = load_paths([MANIFEST_DIR], strict=True)
    adts, _ = elaborate_adts(manifest.adts)
    specs = [(el, s, prove_spec(el, s)) for s in manifest.specs.values()
             for el in [elaborate(s, adts)[0]]]
    for name in manifest.specs:
        getattr(ops, name)._info()   # the op classes' plans first: proving runs generators too
    seen = _generated_by_case(monkeypatch)
    for el, loaded, result in specs:
        assert result.verdict == "proven" and not W.check_workloads(el, loaded, result.plan)
    prover = dict(seen)
    seen.clear()
    runtime = seen
    for name in manifest.specs:
        for c in cases(getattr(ops, name)):
            c.inputs("meta")
    assert runtime == prover
    assert {k.split(":")[0] for k in runtime} >= {"MoeGroupedGemmFwdOp",
                                                  "GroupedQueryAttentionVarlenFwdOp"}


def _solved(corpus_specs, op: str, row: int) -> dict[str, str]:
    el, loaded, result = corpus_specs[op]
    c = W._Checker(el, loaded, result.plan)
    r = el.workloads[row]
    env = {n: W._to_value(r.values.get(n, p.default), p.kind) for n, p in el.params.items()}
    b = c.branch_of(env, set(r.some))
    from opspec.solver.fold import Folder
    folder = Folder(el, dict(b.combo))
    shapes = {n: sh for n, sh, _ in b.tensors}
    lets = {n: folder.expr(d.expr) for n, d in el.lets.items()}
    return c.generator_solved(b, folder, shapes, lets)


def test_corpus_generator_solved_indices(corpus_specs):
    # Rows of these specs leave out exactly these indices: a generator's shape gives them.
    assert _solved(corpus_specs, "GroupedQueryAttentionVarlenFwdOp", 0) == {"B": "cu_seqlens_q"}
    # B comes from `cu_seqlens_q: [B + 1]` (its generator's arguments are in the row) and
    # is then an argument of `paged_block_table(B, W, NP)`.
    assert _solved(corpus_specs, "GroupedQueryAttentionPagedFwdOp", 0) == {"B": "cache_seqlens"}
    assert _solved(corpus_specs, "MultiHeadAttentionDecodePagedWithKVCacheFwdOp", 0) == {
        "B": "real_seqlen_kv"}
    # T_q from `block_indices: [T_q, H_kv, SEL]`, then an argument of nsa_block_counts.
    assert _solved(corpus_specs, "NSAVarlenFwdOp", 0) == {"T_q": "block_indices",
                                                          "N": "offsets"}
    # Every generator argument is in the row: the generated shape is only checked.
    assert _solved(corpus_specs, "DeepSeekSparseAttentionDecodeWithKVCacheFwdOp", 0) == {}


# ----------------------------------------------------------------------------- bundled manifest

def test_bundled_manifest_rows_instantiate(monkeypatch):
    from opspec.manifest import MANIFEST_DIR
    from opspec.ops.workloads import cases

    count = {"cases": 0}
    orig = W._Checker.instantiate

    def counting(self, *args, **kwargs):
        count["cases"] += 1
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(W._Checker, "instantiate", counting)
    manifest = load_paths([MANIFEST_DIR], strict=True)
    report = prove_manifest(manifest)
    assert not [d.render() for d in report.all_diagnostics if d.check == "workload"]
    assert {s.op for s in report.specs} == set(manifest.specs)
    assert {"SiluAndMulFwdOp", "GemmFwdOp", "RMSNormFwdOp", "SumFwdOp"} <= set(manifest.specs)
    # every case of every row is instantiated once
    adts, _ = elaborate_adts(manifest.adts)
    total = sum(len(r.dtype_cases or [{}]) for s in manifest.specs.values()
                for r in elaborate(s, adts)[0].workloads)
    assert count["cases"] == total
    # The case ids the check keys its RNG by are the runtime's.
    adts, _ = elaborate_adts(manifest.adts)
    for s in manifest.specs.values():
        el, _ = elaborate(s, adts)
        assert [c.id for c in cases(el)] == [
            W.case_id(el, r.label, r.values, dc) for r in el.workloads
            for dc in (r.dtype_cases or [{}])]
