"""Elaboration (opspec.schema.elaborate, opspec.schema.checker): name resolution, the kind
of every declaration, type families and their patterns, lets, refinements, dtype_combos and
the effect fields.

Every spec below is a small YAML text written to a temporary folder and loaded strictly,
as the prover loads a manifest. Each problem is pinned by its diagnostic's `check` id, its
declaration `path`, its `op`, the YAML line it points at, and the names and kinds that its
message must carry.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from opspec.schema import kinds as K
from opspec.schema.checker import FAMILY, INDEX, LET, PARAM, TENSOR
from opspec.schema.diagnostics import Diagnostic
from opspec.schema.elaborate import (ElaboratedSpec, FamilyDecl, LetDecl, ParamDecl, Pattern,
                                     RuleDecl, TensorDecl, elaborate, elaborate_adts)
from opspec.schema.expr import Call, FamilyApp, Name, ShapeList, Splat
from opspec.schema.loader import load_paths

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"
PACKAGE = Path(__file__).resolve().parents[1]
OP = "ToyFwdOp"

#: A small ADT in the shape of the reference's MGroupedLayout: one constructor with a
#: finitely-valued field (`packing`) and an unbounded one (`alignment`), one with `max_m`.
TYPES = """\
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


# ----------------------------------------------------------------------------- helpers

def load_one(tmp_path: Path, yaml_text: str, *, types: str | None = None,
             load_ok: bool = True) -> tuple[ElaboratedSpec | None, list[Diagnostic]]:
    """Write `yaml_text` to `<family>.yaml` (and `types` to `types.yaml`), load it strictly,
    elaborate its ADTs and its one op; return the elaborated op and the diagnostics of
    elaboration. With `load_ok`, loading itself must report nothing."""
    text = textwrap.dedent(yaml_text)
    family = re.search(r"^\s+family:\s*(\w+)", text, re.M).group(1)
    path = tmp_path / f"{family}.yaml"
    path.write_text(text)
    paths = [path]
    if types is not None:
        (tmp_path / "types.yaml").write_text(textwrap.dedent(types))
        paths.append(tmp_path / "types.yaml")
    manifest = load_paths(paths, strict=True)
    if load_ok:
        assert not manifest.diagnostics, [d.render() for d in manifest.diagnostics]
    adts, adt_diags = elaborate_adts(manifest.adts)
    assert not adt_diags, [d.render() for d in adt_diags]
    (loaded,) = manifest.specs.values()
    return elaborate(loaded, adts)


def toy(signature: str, *, op: str = OP, family: str = "toy") -> str:
    """A minimal valid spec around `signature`, the body of the `signature:` mapping."""
    body = textwrap.indent(textwrap.dedent(signature).strip("\n"), "    ")
    return (f"{op}:\n  family: {family}\n  status: spec-only\n  signature:\n{body}\n"
            "  workloads:\n  - {M: 4, label: small}\n  roofline: {flops: \"1\"}\n")


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the one line of `text` that contains `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]


def col_of(text: str, needle: str) -> int:
    """The 1-based column where `needle` starts on its (one) line."""
    return text.splitlines()[line_of(text, needle) - 1].index(needle) + 1


def errors(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.is_error]


def no_errors(diags: list[Diagnostic]) -> None:
    assert not errors(diags), [d.render() for d in errors(diags)]


def expect(diags: list[Diagnostic], check: str, path: str, line: int, *fragments: str,
           hint: str | None = None, file: Path | None = None) -> Diagnostic:
    """The one error diagnostic at `path`: its check id, op, line, and message fragments."""
    at = [d for d in errors(diags) if d.path == path]
    assert len(at) == 1, (path, [d.render() for d in errors(diags)])
    d = at[0]
    assert d.check == check, d.render()
    assert d.op == OP, d.render()
    assert d.pos is not None and d.pos.line == line, d.render()
    if file is not None:
        assert d.pos.file == str(file)
    for part in fragments:
        assert part in d.message, (part, d.message)
    if hint is not None:
        assert d.hint == hint, d.hint
    return d


def only(diags: list[Diagnostic], check: str, path: str, line: int, *fragments: str,
         hint: str | None = None) -> Diagnostic:
    """Like `expect`, and no other error was reported (no cascade)."""
    d = expect(diags, check, path, line, *fragments, hint=hint)
    assert len(errors(diags)) == 1, [x.render() for x in errors(diags)]
    return d


FORALL = 'forall: {M: Dim, N: Dim, S: Shape, T: "DType[float16 | bfloat16]"}'


def rules_spec(*rules: str, params: str = "") -> str:
    """A spec with Bool, enum, Maybe, dtype-parameter and ADT parameters, an optional input
    and the given refinements (each written double-quoted on its own line)."""
    lines = "\n".join(f'- "{r}"' for r in rules)
    return toy(f"""
{FORALL}
params:
  flag: {{type: bool}}
  mode: {{type: "'a' | 'b'"}}
  cap: {{type: "int | None", default: null}}
  od: {{type: "float16 | float32 | None", default: null}}
  eps: {{type: float, default: 1.0e-6}}
  layout: {{type: Layout}}
  rounding: {{type: "'trunc' | 'floor' | None", default: null}}
  padding: {{type: "int | tuple[int, int] | 'valid' | 'same'", default: 0}}
{textwrap.indent(textwrap.dedent(params).strip(), "  ")}
inputs:
  x: {{dtype: T, shape: "[M, N]"}}
  b: {{dtype: T, shape: "[N]", optional: true}}
outputs:
  y: {{dtype: T, shape: "[M, N]"}}
shape_rules:
{lines}
""")


# ----------------------------------------------------------------------------- a good spec

GEMM = toy("""
types:
  Mat:
    params: {t: Bool, R: Dim, C: Dim}
    match: t
    cases:
    - {when: false, is: "[R, C]"}
    - {when: true, is: "[C, R]"}
forall: {M: Dim, N: Dim, K: Dim, T: "DType[float16 | bfloat16]"}
params:
  trans_a: {type: bool, default: false}
  trans_b: {type: bool, default: false, kw_only: true}
inputs:
  a: {dtype: T, shape: "Mat[trans_a, M, K]"}
  b: {dtype: T, shape: "Mat[trans_b, K, N]"}
  bias: {dtype: T, shape: "[N]", optional: true}
outputs:
  c: {dtype: T, shape: "[M, N]"}
let:
  MN: "M * N"
shape_rules:
- "K % 8 == 0"
- "not trans_a or M > 0"
dtype_combos:
- {T: float16}
- {T: bfloat16}
""")


def test_good_spec_elaborates_completely(tmp_path):
    e, diags = load_one(tmp_path, GEMM)
    assert diags == []
    assert e.name == OP and e.family == "toy" and e.status == "spec-only" and not e.broken
    assert e.file == str(tmp_path / "toy.yaml")
    assert e.forall == {"M": K.DIM, "N": K.DIM, "K": K.DIM,
                        "T": K.DTypeK(frozenset({"float16", "bfloat16"}))}
    assert e.params["trans_a"] == ParamDecl("trans_a", K.BOOL, "bool", True, False, False,
                                            "signature.params.trans_a")
    assert e.params["trans_b"].kw_only
    assert list(e.inputs) == ["a", "b", "bias"] and list(e.outputs) == ["c"]
    a = e.inputs["a"]
    assert isinstance(a, TensorDecl) and a.role == "input" and a.path == "signature.inputs.a"
    assert a.shape == FamilyApp("Mat", (Name("trans_a"), Name("M"), Name("K")))
    assert a.dtype == Name("T")
    assert e.inputs["bias"].optional is True and e.outputs["c"].shape == ShapeList(
        (Name("M"), Name("N")))
    fam = e.families["Mat"]
    assert isinstance(fam, FamilyDecl) and fam.match == ("t",)
    assert fam.params == (("t", K.BOOL), ("R", K.DIM), ("C", K.DIM))
    assert [c.when for c in fam.cases] == [(Pattern(value=False),), (Pattern(value=True),)]
    assert [c.path for c in fam.cases] == ["signature.types.Mat.cases.0",
                                           "signature.types.Mat.cases.1"]
    assert e.lets == {"MN": LetDecl("MN", e.lets["MN"].expr, "M * N", K.DIM, "signature.let.MN")}
    assert [r.path for r in e.rules] == ["signature.shape_rules.0", "signature.shape_rules.1"]
    assert all(isinstance(r, RuleDecl) and not r.is_domain for r in e.rules)
    assert e.dtype_combos == ({"T": "float16"}, {"T": "bfloat16"})
    assert e.roofline is not None and e.roofline.flops is not None
    roles = {n: s.role for n, s in e.symbols.items()}
    assert roles == {"M": INDEX, "N": INDEX, "K": INDEX, "T": INDEX, "trans_a": PARAM,
                     "trans_b": PARAM, "a": TENSOR, "b": TENSOR, "bias": TENSOR, "c": TENSOR,
                     "Mat": FAMILY, "MN": LET}
    assert e.kind_of("MN") == K.DIM and e.kind_of("nothing") is None
    assert not e.has_out and set(e.tensors) == {"a", "b", "bias", "c"}


def test_construction_time_tensor_and_generator(tmp_path):
    e, diags = load_one(tmp_path, toy("""
        forall: {M: Dim, N: Dim, T: "DType[float16 | bfloat16]", seq_lens: "Seq[Int]"}
        params:
          rescale: {dtype: float32, shape: "[M // 2]", optional: true}
        inputs:
          x: {dtype: T, shape: "[M, N]"}
          offsets: {dtype: int32, shape: "[N + 1]", values: "prefix_sum(seq_lens)", requires: ["prefix_offsets(M)"]}
          lens: {dtype: int32, shape: "[N]", values: "as_tensor(seq_lens)", requires: ["exclusive_prefix_of(offsets)"]}
        outputs:
          y: {dtype: T, shape: "[M, N]", buffer: out}
        shape_rules:
        - "not present(out) or M > 0"
        """))
    assert diags == []
    assert e.ctensors["rescale"].role == "ctensor" and e.ctensors["rescale"].optional is True
    assert e.symbols["rescale"].role == TENSOR and "rescale" not in e.params
    assert e.inputs["offsets"].values == Call("prefix_sum", (Name("seq_lens"),))
    assert e.inputs["offsets"].requires == (Call("prefix_offsets", (Name("M"),)),)
    assert e.has_out and e.outputs["y"].buffer == "out"


# ----------------------------------------------------------------------------- names

@pytest.mark.parametrize("signature, second, first, role", [
    ("""
     forall: {M: Dim}
     params:
       M: {type: int}
     """, "signature.params.M", "signature.forall.M", INDEX),
    ("""
     forall: {M: Dim}
     inputs:
       M: {dtype: float32, shape: "[]"}
     """, "signature.inputs.M", "signature.forall.M", INDEX),
    ("""
     forall: {N: Dim}
     params:
       M: {type: int}
     let:
       M: "N + 1"
     """, "signature.let.M", "signature.params.M", PARAM),
    ("""
     forall: {N: Dim}
     inputs:
       M: {dtype: float32, shape: "[N]"}
     outputs:
       M: {dtype: float32, shape: "[N]"}
     """, "signature.outputs.M", "signature.inputs.M", TENSOR),
    ("""
     forall: {N: Dim}
     params:
       M: {dtype: float32, shape: "[N]"}
     inputs:
       M: {dtype: float32, shape: "[N]"}
     """, "signature.inputs.M", "signature.params.M", TENSOR),
    ("""
     types:
       M:
         params: {t: Bool}
         match: t
         cases:
         - {when: false, is: "[]"}
         - {when: true, is: "[]"}
     forall: {M: Dim}
     """, "signature.types.M", "signature.forall.M", INDEX),
], ids=["forall-param", "forall-input", "param-let", "input-output", "ctensor-input",
        "forall-family"])
def test_duplicate_names(tmp_path, signature, second, first, role):
    text = toy(signature)
    e, diags = load_one(tmp_path, text)
    d = only(diags, "name", second, d_line(text, second),
             f"`M` is declared twice: at {first} and here", "distinct names")
    assert d.pos.file == str(tmp_path / "toy.yaml")
    # the first declaration stands; the second is left out
    assert e.symbols["M"].role == role and second in e.broken
    section = second.split(".")[1]
    table = {"let": e.lets, "params": e.params, "inputs": e.inputs, "outputs": e.outputs,
             "types": e.families}[section]
    if first.split(".")[1] != section:
        assert "M" not in table
    else:
        assert "M" in table


def d_line(text: str, path: str) -> int:
    """The line of the key that declares `signature.<section>.<name>` in a `toy` text."""
    section, name = path.split(".")[1:]
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().startswith(f"{section}:"))
    if "{" in lines[start]:  # a flow mapping on the section's own line
        return start + 1
    for i in range(start + 1, len(lines)):
        if lines[i].strip().startswith(f"{name}:"):
            return i + 1
    raise AssertionError(path)


def test_duplicate_let_does_not_replace_the_tensor(tmp_path):
    # Regression: a let named like a tensor used to be kind-checked anyway and to replace
    # the tensor in the scope, so the tensor's later uses saw a Dim.
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]"}}
        outputs:
          y: {{dtype: T, shape: "[M, N]"}}
        let:
          x: "M + 1"
        shape_rules:
        - "present(x)"
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, "name", "signature.let.x", line_of(text, 'x: "M + 1"'),
         "`x` is declared twice: at signature.inputs.x")
    assert e.symbols["x"].role == TENSOR and e.lets == {} and "x" in e.inputs
    assert "signature.let.x" in e.broken


@pytest.mark.parametrize("signature, path, needle", [
    ('forall: {out: Dim, M: Dim}', "signature.forall.out", "forall:"),
    ('params:\n  out: {type: int}', "signature.params.out", "out: {type"),
    ('inputs:\n  out: {dtype: float32, shape: "[]"}', "signature.inputs.out", "out: {dtype"),
    ('outputs:\n  out: {dtype: float32, shape: "[]"}', "signature.outputs.out", "out: {dtype"),
    ('let:\n  out: "1"', "signature.let.out", 'out: "1"'),
])
def test_out_is_reserved(tmp_path, signature, path, needle):
    text = toy(signature)
    e, diags = load_one(tmp_path, text)
    only(diags, "name", path, line_of(text, needle), "`out` is reserved for the output buffer")
    assert "out" not in e.symbols and "out" not in e.tensors and "out" not in e.forall


def test_out_is_only_read_by_present(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, out]"}}
        outputs:
          y: {{dtype: T, shape: "[M, N]"}}
        shape_rules:
        - "present(out)"
        """)
    _, diags = load_one(tmp_path, text)
    expect(diags, "name", "signature.inputs.x.shape", line_of(text, "[M, out]"),
           "`out` names the output buffer; only present(out) reads it")
    expect(diags, "name", "signature.shape_rules.0", line_of(text, '"present(out)"'),
           "`present(out)`", "no output declares `buffer: out`")
    assert len(errors(diags)) == 2


@pytest.mark.parametrize("field, text_with_q", [
    ("signature.inputs.x.shape", 'x: {dtype: T, shape: "[M, Q]"}'),
    ("signature.inputs.x.dtype", 'x: {dtype: Q, shape: "[M, N]"}'),
    ("signature.shape_rules.0", None),
    ("signature.let.L", None),
])
def test_unknown_names(tmp_path, field, text_with_q):
    x = text_with_q or 'x: {dtype: T, shape: "[M, N]"}'
    rules = '- "Q > 0"' if field.startswith("signature.shape_rules") else '- "M > 0"'
    let = 'L: "M + Q"' if field == "signature.let.L" else 'L: "M + 1"'
    text = toy(f"""
        {FORALL}
        inputs:
          {x}
        outputs:
          y: {{dtype: T, shape: "[M, N]"}}
        let:
          {let}
        shape_rules:
        {rules}
        """)
    e, diags = load_one(tmp_path, text)
    needle = {"signature.shape_rules.0": '"Q > 0"', "signature.let.L": "M + Q"}.get(field, x)
    d = only(diags, "name", field, line_of(text, needle), "unknown name `Q`")
    assert field in e.broken
    if field == "signature.let.L":
        assert e.lets == {}
    if field.startswith("signature.inputs"):
        assert "x" not in e.inputs and "y" in e.outputs  # only the broken tensor is left out
    assert d.render().startswith(f"{tmp_path / 'toy.yaml'}:{d.pos.line}:")


def test_unknown_name_in_values_and_requires(tmp_path):
    text = toy("""
        forall: {N: Dim, seq: "Seq[Int]"}
        inputs:
          o: {dtype: int32, shape: "[N]", values: "prefix_sum(lens)", requires: ["prefix_offsets(Z)"]}
        """)
    _, diags = load_one(tmp_path, text)
    line = line_of(text, "prefix_sum(lens)")
    expect(diags, "name", "signature.inputs.o.values", line, "unknown name `lens`")
    expect(diags, "name", "signature.inputs.o.requires.0", line, "unknown name `Z`")
    assert len(errors(diags)) == 2


def test_type_family_is_not_a_value(tmp_path):
    text = toy("""
        types:
          Mat:
            params: {t: Bool, R: Dim}
            match: t
            cases:
            - {when: false, is: "[R]"}
            - {when: true, is: "[R, R]"}
        forall: {M: Dim}
        params:
          ta: {type: bool}
        inputs:
          a: {dtype: float32, shape: "Mat[ta, M]"}
        let:
          F: "Mat + 1"
        shape_rules:
        - "M + Mat > 0"
        """)
    _, diags = load_one(tmp_path, text)
    expect(diags, "kind", "signature.shape_rules.0", line_of(text, "M + Mat > 0"),
           "type family Mat is not a value")
    expect(diags, "kind", "signature.let.F", line_of(text, "Mat + 1"),
           "type family Mat is not a value")
    assert len(errors(diags)) == 2


def test_names_that_shadow_builtins(tmp_path):
    text = toy("""
        forall: {float16: Dim}
        params:
          inf: {type: int}
        """)
    _, diags = load_one(tmp_path, text)
    expect(diags, "name", "signature.forall.float16", line_of(text, "forall:"),
           "`float16` shadows a built-in name")
    expect(diags, "name", "signature.params.inf", line_of(text, "inf: {type"),
           "`inf` shadows a built-in name")


def test_bad_index_kind_is_reported_once(tmp_path):
    # The index stays declared (opaque), so its uses do not add "unknown name" errors.
    text = toy("""
        forall: {M: Dimm}
        inputs:
          x: {dtype: float32, shape: "[M]"}
        shape_rules:
        - "M > 0"
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, "kind", "signature.forall.M", line_of(text, "forall:"), "Dimm")
    assert "M" not in e.forall and "x" in e.inputs


# ----------------------------------------------------------------------------- kinds in refinements

@pytest.mark.parametrize("rule, check, fragments", [
    ("flag + 1 > 0", "kind", ("`flag` has kind Bool, expected Int",)),
    ("-flag < 0", "kind", ("`flag` has kind Bool, expected Int",)),
    ("not M", "kind", ("`M` has kind Dim, expected Bool",)),
    ("M", "kind", ("`M` has kind Dim, expected Bool",)),
    ("(M if flag else flag) > 0", "kind", ("has arms of kinds Dim and Bool",)),
    ("flag < M", "kind", ("`flag < M` compares Bool with Dim",)),
    ("M < S", "kind", ("compares Dim with Shape",)),
    ("mode == 'c'", "kind", ("`mode` compares with 'c'", "['a', 'b']")),
    ("'c' != mode", "kind", ("`mode` compares with 'c'", "['a', 'b']")),
    ("mode in ('a', 'd')", "kind", ("`mode` compares with 'd'", "['a', 'b']")),
    ("M in (N, mode)", "kind", ("compares Dim with 'a' | 'b'",)),
    ("T == 'float32'", "kind", ("`T` compares with 'float32'", "['bfloat16', 'float16']")),
    ("T == 'banana'", "kind", ("'banana' is not a dtype name",)),
    ("od == 'int8'", "kind", ("`od` compares with 'int8'", "['float16', 'float32']")),
    ("M == 'a'", "kind", ("`M` tests a Dim against 'a'",)),
    ("flag == 1", "kind", ("compares Bool with Dim",)),
    ("M.value > 0", "kind", ("`M.value` reads `.value` of `M`", "kind Dim, not a Maybe")),
    ("present(M)", "kind", ("`present(M)` names no tensor, `Maybe` parameter or `out`",)),
    ("present(nothing)", "name", ("unknown name `nothing`",)),
    ("layout.foo > 0", "kind", ("attribute `layout.foo` is not a declared field",)),
    ("layout.kind == 'other'", "kind", ("`layout.kind` compares with 'other'",
                                        "['contiguous', 'masked']")),
    ("M.size > 0", "kind", ("attribute `M.size` is not a declared field", "kind Dim")),
    ("T.bytes > 0", "kind", ("attribute `T.bytes` is not a declared field",
                             "kind DType[bfloat16 | float16]")),
    ("S[flag] > 0", "kind", ("`flag` has kind Bool, expected Int",)),
    ("M[0] > 0", "kind", ("`M` has kind Dim, expected a sequence to subscript",)),
    ("padding == 'full'", "kind", ("`padding` compares with 'full'", "['same', 'valid']")),
    ("rounding == 'ceil'", "kind", ("`rounding` compares with 'ceil'", "['floor', 'trunc']")),
    ("padding == 'valid' or per_axis(padding, 0, 2) > 0", "kind",
     ("`padding` has kind Int | Seq[Int; 2] | 'same', expected",)),
])
def test_kind_errors_in_refinements(tmp_path, rule, check, fragments):
    text = rules_spec(rule)
    e, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, check, "signature.shape_rules.0", line_of(text, f'"{rule}"'), f"`{rule}`", *fragments)
    assert e.rules == () and "signature.shape_rules.0" in e.broken


@pytest.mark.parametrize("param, message, hint", [
    ('tol: {type: float, default: "x"}', "the default of `tol` is not a value of its type "
     "`float`: x is not a number", None),
    ("tol: {type: float, default: true}", "the default of `tol` is not a value of its type "
     "`float`: true is not a number", None),
    ("k: {type: int, default: 1.5}", "the default of `k` is not a value of its type `int`: "
     "1.5 is not an int", None),
    ("k: {type: int, default: null}", "the default of `k` is not a value of its type `int`: "
     "null is not a value of Int", "write a value of the type, or `null` with `| None` in "
     "the type"),
    ("on: {type: bool, default: 1}", "the default of `on` is not a value of its type `bool`: "
     "1 is not a bool", None),
    ("how: {type: \"'x' | 'y'\", default: z}", "the default of `how` is not a value of its "
     "type `'x' | 'y'`: z is not one of x, y", None),
    ("dims: {type: \"tuple[int, int]\", default: [1]}", "the default of `dims` is not a "
     "value of its type `tuple[int, int]`: [1] has 1 items, expected 2", None),
    ("odt: {type: \"float16 | float32 | None\", default: int8}", "the default of `odt` is not "
     "a value of its type `float16 | float32 | None`: int8 is not one of the dtypes float16, "
     "float32", None),
    ("lay: {type: Layout, default: {masked: {}}}", "the default of `lay` is not a value of "
     "its type `Layout`: Layout.masked has the fields max_m; missing max_m", None),
    ("opts: {type: dict, default: 3}", "the default of `opts` is not a value of its type "
     "`dict`: 3 is not a mapping", None),
])
def test_a_default_must_be_a_value_of_its_type(tmp_path, param, message, hint):
    text = rules_spec("M > 0", params=param)
    name = param.split(":")[0]
    _, diags = load_one(tmp_path, text, types=TYPES)
    d = only(diags, "kind", f"signature.params.{name}.default",
             line_of(text, param.split(",")[0]), message, hint=hint)
    assert d.message == message


@pytest.mark.parametrize("param", [
    "tol: {type: float, default: 1e-6}", "tol: {type: float, default: 2}",
    "k: {type: \"int | None\", default: null}", "on: {type: bool, default: false}",
    "how: {type: \"'x' | 'y'\", default: y}", "dims: {type: \"list[int]\", default: []}",
    "lay: {type: Layout, default: {masked: {max_m: 4}}}",
    "odt: {type: \"float16 | float32 | None\", default: float32}",
])
def test_defaults_of_their_types_pass(tmp_path, param):
    _, diags = load_one(tmp_path, rules_spec("M > 0", params=param), types=TYPES)
    no_errors(diags)


@pytest.mark.parametrize("rule, check, message, hint", [
    ("M = 2 * N", "parse", "cannot parse 'M = 2 * N': invalid syntax",
     "compare with `==`; a single `=` assigns, which an expression cannot"),
    ("M <= N", None, None, None),  # `<=` is no lone `=`
    ("flag or yes", "name", "unknown name `yes`", "write true (a boolean)"),
    ("not Off", "name", "unknown name `Off`", "write false (a boolean)"),
    ("Mm > 0", "name", "unknown name `Mm`", "did you mean `M`?"),
    ("pading != 'same'", "name", "unknown name `pading`", "did you mean `padding`?"),
    ("zzz > 0", "name", "unknown name `zzz`", None),
    ("n > 0", "name", "unknown name `n`", "did you mean `N`?"),  # an index, not YAML 1.1's no
    ("prodd(S) > 0", "language", "prodd is not a built-in primitive", "did you mean `prod`?"),
    ("frobnicate(M) > 0", "language", "frobnicate is not a built-in primitive",
     "the primitives are listed in docs/primitives.md"),
])
def test_slips_in_an_expression_get_a_rewrite(tmp_path, rule, check, message, hint):
    text = rules_spec(rule)
    _, diags = load_one(tmp_path, text, types=TYPES)
    if check is None:
        no_errors(diags)
        return
    d = only(diags, check, "signature.shape_rules.0", line_of(text, f'"{rule}"'), message,
             hint=hint)
    assert d.message.endswith(message) and d.hint == hint


def test_a_dtype_attribute_names_bytes_of_a_tensor(tmp_path):
    text = rules_spec("T.bytes > 0")
    _, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.shape_rules.0", line_of(text, '"T.bytes > 0"'),
         hint="a dtype has no fields; the bytes of a tensor `x` are `bytes(x)` (in a roofline)")


@pytest.mark.parametrize("rule, hint", [
    ("cap.value > 0", "guard it: `present(cap) and ...` or `... if present(cap) else ...`"),
    ("present(cap) or cap.value > 0", None),
    ("0 if present(cap) else cap.value", None),
    ("(present(cap) or M > 0) and cap.value > 0", None),
    ("present(b) and cap.value > 0", None),
    ("not present(cap) and cap.value > 0", None),
])
def test_maybe_value_needs_a_present_guard(tmp_path, rule, hint):
    text = rules_spec(rule)
    _, diags = load_one(tmp_path, text, types=TYPES)
    d = only(diags, "kind", "signature.shape_rules.0", line_of(text, f'"{rule}"'),
             "`cap.value` is read where present(cap) is not known to hold")
    if hint:
        assert d.hint == hint


@pytest.mark.parametrize("rule", [
    "present(cap) and cap.value > 0",
    "(cap.value if present(cap) else 0) > 0",
    "not present(cap) or cap.value > 0",
    "not (present(cap) and cap.value < 0)",
    "M > 0 and present(cap) and cap.value > M",
    "not present(od) or od.value == T",
    "mode == 'a'",
    "mode in ('a', 'b')",
    "mode == 'a' or (mode != 'a' and M > 0)",
    "T == 'float16' or T == bfloat16",
    "od == 'float16'",
    "M == N",
    "0 <= M < N + 1",
    "all(n > 0 for n in S)",
    "sum(S) >= len(S)",
    "max(S, default=0) <= M",
    "S == (M, N)",
    "eps * 2 > 0",
    "0.0 <= eps <= inf",
    "representable(eps, T) and category(eps) == 'float'",
    "present(b) == flag",
    "ceil_div(M, 128) * 128 >= M",
    # an enum member of a union meets its literals, and narrowing removes them
    "padding == 'valid' or padding == 'same' or per_axis(padding, 0, 2) > 0",
    "per_axis(padding, 1, 2) >= 0 if padding not in ('valid', 'same') else True",
    "rounding == 'trunc' or not present(rounding)",
    "not present(rounding) or rounding.value in ('trunc', 'floor')",
])
def test_refinements_accepted(tmp_path, rule):
    e, diags = load_one(tmp_path, rules_spec(rule), types=TYPES)
    no_errors(diags)
    assert [r.text for r in e.rules] == [rule]


# ----------------------------------------------------------------------------- ADTs

def test_adt_field_needs_a_known_constructor(tmp_path):
    text = rules_spec("layout.max_m > 0")
    _, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.shape_rules.0", line_of(text, "layout.max_m > 0"),
         "`layout.max_m` reads a field constructor 'contiguous' lacks",
         hint="read it where the constructor is known, e.g. `layout.kind == '...' and ...`")


@pytest.mark.parametrize("rule", [
    "layout.kind == 'masked' and layout.max_m > 0",
    "layout.kind != 'masked' or layout.max_m > 0",
    "layout.max_m > 0 if layout.kind == 'masked' else True",
    "layout.kind in ('masked',) and layout.max_m > 0",
    "layout.kind == 'contiguous' and layout.packing == 'tight'",
    "layout.kind == 'masked' or layout.packing == 'tight' or M % layout.alignment == 0",
    # a branch that narrowing proves dead may read any declared field (it used to crash)
    "layout.kind != 'masked' and layout.kind != 'contiguous' and layout.max_m > 0",
    # a test repeated on a narrowed branch is redundant, not a typo
    "layout.kind == 'masked' or layout.kind == 'masked'",
])
def test_adt_field_reads_accepted(tmp_path, rule):
    e, diags = load_one(tmp_path, rules_spec(rule), types=TYPES)
    no_errors(diags)
    assert len(e.rules) == 1


def test_adt_field_in_family_case_and_guarded_axis(tmp_path):
    text = toy("""
        types:
          Rows:
            params: {l: Layout, P: Dim}
            match: l
            cases:
            - {when: {masked: _}, is: "[l.max_m]"}
            - {when: {contiguous: _}, is: "[l.max_m]"}
        forall: {M: Dim}
        params:
          layout: {type: Layout}
        inputs:
          a: {dtype: float32, shape: "Rows[layout, M]"}
          b: {dtype: float32, shape: "[layout.max_m if layout.kind == 'masked' else M]"}
        """)
    e, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.types.Rows.cases.1.is",
         line_of(text, "{when: {contiguous: _}"),
         "`[l.max_m]`: `l.max_m` reads a field constructor 'contiguous' lacks")
    cases = e.families["Rows"].cases
    assert [c.when for c in cases] == [(Pattern(ctor="masked"),), (Pattern(ctor="contiguous"),)]
    assert cases[0].when[0].describe() == "{masked: _}"
    assert "b" in e.inputs


def test_adt_invariant_is_kind_checked(tmp_path):
    types = TYPES.replace("alignment >= 1", "alignment >= 1 and max_m > 0")
    (tmp_path / "types.yaml").write_text(types)
    manifest = load_paths([tmp_path / "types.yaml"], strict=True)
    adts, diags = elaborate_adts(manifest.adts, manifest.adt_pos)
    (d,) = diags
    assert d.check == "name" and d.path == "adts.Layout.sum.contiguous.invariant"
    assert "unknown name `max_m`" in d.message and "Layout.contiguous" in d.message
    # Placed in the types file, at the invariant.
    assert d.pos.file == str(tmp_path / "types.yaml")
    assert d.pos.line == line_of(types, "invariant:")
    assert adts["Layout"].ctors["contiguous"].invariant is None
    assert adts["Layout"].ctors["masked"].fields == {"max_m": K.DIM}
    assert adts["Layout"].finite_fields("contiguous") == {
        "packing": K.StrK(frozenset({"tight", "aligned"}))}


def test_a_misspelt_field_kind_is_placed_and_named(tmp_path):
    types = TYPES.replace("fields: {max_m: Dim}", "fields: {max_m: Dimm}")
    assert types != TYPES
    (tmp_path / "types.yaml").write_text(types)
    manifest = load_paths([tmp_path / "types.yaml"], strict=True)
    _, diags = elaborate_adts(manifest.adts, manifest.adt_pos)
    (d,) = diags
    assert (d.check, d.path) == ("kind", "adts.Layout.sum.masked.fields.max_m")
    assert d.message == "ADT Layout.masked.max_m: kind 'Dimm': Dimm is not a kind"
    assert d.hint == "write Dim"
    assert d.pos.line == line_of(types, "max_m: Dimm")


# ----------------------------------------------------------------------------- shapes and dtypes

@pytest.mark.parametrize("tensor, path, fragments", [
    ('x: {dtype: T, shape: "[M, flag]"}', "signature.inputs.x.shape",
     ("`[M, flag]`: axis `flag` has kind Bool, expected Int",)),
    ('x: {dtype: T, shape: "[M, *N]"}', "signature.inputs.x.shape",
     ("`[M, *N]`: splat `*N` has kind Dim, expected Seq[Int]",)),
    ('x: {dtype: M, shape: "[M]"}', "signature.inputs.x.dtype",
     ("`M` has kind Dim, expected DType",)),
    ('x: {dtype: flag, shape: "[M]"}', "signature.inputs.x.dtype",
     ("`flag` has kind Bool, expected DType",)),
    ('x: {dtype: T, shape: "[M, mode]"}', "signature.inputs.x.shape",
     ("axis `mode` has kind 'a' | 'b', expected Int",)),
    ('x: {dtype: T, shape: "[*S, *mode]"}', "signature.inputs.x.shape",
     ("splat `*mode` has kind 'a' | 'b'",)),
])
def test_shape_and_dtype_kinds(tmp_path, tensor, path, fragments):
    text = toy(f"""
        {FORALL}
        params:
          flag: {{type: bool}}
          mode: {{type: "'a' | 'b'"}}
        inputs:
          {tensor}
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, "kind", path, line_of(text, tensor), *fragments)
    assert "x" not in e.inputs


def test_shapes_accepted(tmp_path):
    e, diags = load_one(tmp_path, toy("""
        forall: {M: Dim, S: Shape, T: "DType[float16 | bfloat16 | int8]"}
        params:
          normalized_shape: {type: "list[int] | tuple[int, ...]"}
          out_dtype: {type: "float16 | bfloat16 | None", default: null}
          act: {type: "'silu' | None", default: null}
        inputs:
          x: {dtype: T, shape: "[*S, *normalized_shape]"}
          y: {dtype: "coalesce_dtype(out_dtype, T)", shape: "[2 * M if present(act) else M]"}
          z: {dtype: "promote_int_to_float(T)", shape: "[*broadcast(S, (M,)), ceil_div(M, 8)]"}
          w: {dtype: int32, shape: "[]"}
        """))
    no_errors(diags)
    assert e.inputs["x"].shape == ShapeList((Splat(Name("S")), Splat(Name("normalized_shape"))))


def test_shape_must_be_a_list_or_a_family(tmp_path):
    text = toy("""
        forall: {M: Dim}
        inputs:
          x: {dtype: float32, shape: "M"}
        """)
    _, diags = load_one(tmp_path, text)
    only(diags, "language", "signature.inputs.x.shape", line_of(text, 'shape: "M"'),
         "a shape term is `[axis, ...]` or a type family application")


def test_family_applications(tmp_path):
    text = toy("""
        types:
          Mat:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "[R, C]"}
            - {when: true, is: "[C, R]"}
          Outer:
            params: {t: Bool, R: Dim, C: Dim}
            match: t
            cases:
            - {when: false, is: "Mat[t, R]"}
            - {when: true, is: "Mat[t, R, C]"}
        forall: {M: Dim, N: Dim}
        params:
          ta: {type: bool}
        inputs:
          a: {dtype: float32, shape: "Mat[ta, M]"}
          b: {dtype: float32, shape: "Mat[M, M, N]"}
          c: {dtype: float32, shape: "Foo[M]"}
          d: {dtype: float32, shape: "M[M]"}
          e: {dtype: float32, shape: "Outer[ta, M, N]"}
          f: {dtype: float32, shape: "Mat[ta, M - 1, N]"}
        """)
    el, diags = load_one(tmp_path, text)
    expect(diags, "kind", "signature.inputs.a.shape", line_of(text, "Mat[ta, M]"),
           "`Mat[ta, M]`: Mat takes 3 arguments (t, R, C), got 2")
    expect(diags, "kind", "signature.inputs.b.shape", line_of(text, "Mat[M, M, N]"),
           "argument `M` has kind Dim, expected Bool (family Mat param t)")
    expect(diags, "name", "signature.inputs.c.shape", line_of(text, "Foo[M]"),
           "`Foo` is not a type family of this spec")
    expect(diags, "name", "signature.inputs.d.shape", line_of(text, "M[M]"),
           "`M` is not a type family of this spec")
    # A family applied inside another family's case is checked too (it used to be skipped
    # and marked broken without a word).
    expect(diags, "kind", "signature.types.Outer.cases.0.is", line_of(text, '"Mat[t, R]"'),
           "`Mat[t, R]`: Mat takes 3 arguments (t, R, C), got 2")
    assert len(errors(diags)) == 5
    assert "signature.types.Outer.cases.1.is" not in el.broken
    assert {"e", "f"} <= set(el.inputs)  # an Int argument for a Dim param is a runtime check


# ----------------------------------------------------------------------------- primitives

@pytest.mark.parametrize("let, check, fragments", [
    ("ceil_div(M)", "kind", ("ceil_div misses argument 2 of 2",)),
    ("ceil_div(M, N, 3)", "kind", ("ceil_div takes 2 arguments, got 3",)),
    ("max(S, dflt=0)", "kind", ("max takes no keyword 'dflt' here",)),
    ("per_axis(S, 0, 2, fallback=1, fallback=2)", "kind",
     ("per_axis takes no keyword 'fallback' here",)),
    ("ceil_div(M, b=2)", "kind", ("ceil_div takes no keyword 'b' here",)),
    ("broadcast()", "kind", ("broadcast misses argument 1 of 1",)),
    ("ceil_div(M, flag)", "kind", ("`flag` has kind Bool, expected Int (argument 2 of ceil_div)",)),
    ("prefix_sum(S)", "language", ("prefix_sum may only be used in a tensor's `values`",)),
    ("prefix_offsets(M)", "language", ("prefix_offsets may only be used in a tensor's `requires`",)),
    ("bytes(x)", "language", ("bytes may only be used in a roofline formula",)),
    ("foo(M)", "language", ("foo is not a built-in primitive",)),
    ("pool.outt(M, 1, 1, 0, 1, False)", "language", ("pool.outt is not a built-in primitive",)),
    ("len(n for n in S)", "language", ("a comprehension is only an argument of all, sum, max or min",)),
])
def test_primitive_calls(tmp_path, let, check, fragments):
    text = toy(f"""
        {FORALL}
        params:
          flag: {{type: bool}}
        inputs:
          x: {{dtype: T, shape: "[M, N]"}}
        let:
          L: "{let}"
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, check, "signature.let.L", line_of(text, let), f"`{let}`: ", *fragments)
    assert e.lets == {}


def test_generator_and_requires_primitives_in_rules(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]"}}
        shape_rules:
        - "len(prefix_sum(S)) > 0"
        - "prefix_offsets(M)"
        """)
    _, diags = load_one(tmp_path, text)
    expect(diags, "language", "signature.shape_rules.0", line_of(text, "prefix_sum(S)"),
           "prefix_sum may only be used in a tensor's `values`")
    expect(diags, "language", "signature.shape_rules.1", line_of(text, '"prefix_offsets(M)"'),
           "prefix_offsets may only be used in a tensor's `requires`")


def test_roofline_bytes(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]"}}
        """).replace('roofline: {flops: "1"}', 'roofline: {flops: "M * N", bytes: "2 * bytes(x)"}')
    e, diags = load_one(tmp_path, text)
    assert diags == [] and e.roofline.bytes is not None
    text = text.replace('"M * N"', '"flag"')
    _, diags = load_one(tmp_path, text)
    only(diags, "name", "roofline.flops", line_of(text, "roofline:"), "unknown name `flag`")


# ----------------------------------------------------------------------------- discriminants

DISCRIMINANTS = f"""
{FORALL}
params:
  inplace: {{type: bool}}
  training: {{type: bool}}
  mode: {{type: "'rope' | 'none'"}}
  cap: {{type: "int | None", default: null}}
  layout: {{type: Layout}}
inputs:
  x: {{dtype: T, shape: "[M, N]", mutated: inplace}}
  r: {{dtype: T, shape: "[M]", optional: true}}
  s: {{dtype: T, shape: "[M]", optional: "present(r)"}}
  v: {{dtype: T, shape: "[M]", optional: "mode == 'rope' and present(cap)", mutated: "training and present(r)"}}
  u: {{dtype: T, shape: "[M]", optional: "layout.kind == 'contiguous' and layout.packing == 'tight'"}}
  w: {{dtype: T, shape: "[M]", optional: "{{expr}}"}}
outputs:
  y: {{dtype: T, shape: "[M, N]", alias: x}}
  z: {{dtype: T, shape: "[M]", nullable: "present(r)"}}
"""


def test_discriminant_expressions_accepted(tmp_path):
    e, diags = load_one(tmp_path, toy(DISCRIMINANTS.replace("{expr}", "not present(cap)")),
                        types=TYPES)
    no_errors(diags)
    assert e.inputs["x"].mutated == Name("inplace")
    assert e.inputs["s"].optional == Call("present", (Name("r"),))
    assert e.outputs["z"].nullable == Call("present", (Name("r"),))
    assert e.outputs["y"].alias == "x" and e.inputs["r"].optional is True


@pytest.mark.parametrize("expr, check, fragments", [
    ("M > 2", "kind", ("`M > 2` must read only discriminants",)),
    ("present(cap) and cap.value > 2", "kind", ("must read only discriminants",)),
    ("layout.alignment > 1", "kind", ("`layout.alignment` reads a field constructor 'masked' lacks",)),
    ("layout.kind == 'masked' or layout.alignment > 1", "kind", ("must read only discriminants",)),
    ("ceil_div(M, 2) > 0", "kind", ("must read only discriminants",)),
    ("M", "kind", ("`M` has kind Dim, expected Bool",)),
    ("cap.value > 2", "kind", ("`cap.value` is read where present(cap) is not known to hold",)),
    ("present(q)", "name", ("unknown name `q`",)),
])
def test_discriminant_expressions_rejected(tmp_path, expr, check, fragments):
    text = toy(DISCRIMINANTS.replace("{expr}", expr))
    e, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, check, "signature.inputs.w.optional", line_of(text, "w: {dtype"), *fragments)
    assert "signature.inputs.w.optional" in e.broken


def test_nullable_and_mutated_are_discriminants(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]", mutated: "M > 0"}}
        outputs:
          y: {{dtype: T, shape: "[M, N]", nullable: "N"}}
        """)
    _, diags = load_one(tmp_path, text)
    expect(diags, "kind", "signature.inputs.x.mutated", line_of(text, "x: {dtype"),
           "`M > 0` must read only discriminants")
    expect(diags, "kind", "signature.outputs.y.nullable", line_of(text, "y: {dtype"),
           "`N` has kind Dim, expected Bool")
    assert len(errors(diags)) == 2


# ----------------------------------------------------------------------------- rejected forms

REJECT = f"""
{FORALL}
params:
  groups: {{type: int}}
  cap: {{type: "int | None", default: null}}
inputs:
  x: {{dtype: T, shape: "[M, N]"}}
shape_rules:
- "{{rule}}"
"""


@pytest.mark.parametrize("rule, name, hint", [
    ("C_in_g == M // groups", "C_in_g", 'let: {C_in_g: "M // groups"}'),
    ("M // groups == C_in_g", "C_in_g", 'let: {C_in_g: "M // groups"}'),
    # both sides are names: the undeclared one is defined (it used to be "unknown name")
    ("M == C_in_g", "C_in_g", 'let: {C_in_g: "M"}'),
    ("C_in_g == M", "C_in_g", 'let: {C_in_g: "M"}'),
])
def test_defining_equality_is_rejected(tmp_path, rule, name, hint):
    text = toy(REJECT.replace("{rule}", rule))
    e, diags = load_one(tmp_path, text)
    only(diags, "rejected-form", "signature.shape_rules.0", line_of(text, f'"{rule}"'),
         f"defines the new name `{name}` with an equality", "shape_rules holds only refinements",
         hint=hint)
    assert e.rules == ()


@pytest.mark.parametrize("rule", ["M == N", "M == groups * N", "N == inf", "T == float16"])
def test_equality_between_declared_names_is_a_refinement(tmp_path, rule):
    e, diags = load_one(tmp_path, toy(REJECT.replace("{rule}", rule)))
    no_errors(diags)
    (r,) = e.rules
    assert r.text == rule and r.path == "signature.shape_rules.0" and not r.is_domain


@pytest.mark.parametrize("rule, hint", [
    ("x.shape == (M, N)", 'declare the shape on the tensor: x: {shape: "[M, N]"}'),
    ("cap is None", "not present(cap)"),
    ("cap == None or M > 0", "not present(cap)"),
    ("S[0] if isinstance(S, tuple) else M", "per_axis(S, 0, 2): item 0 of a length-2 sequence, "
                                             "or S itself when it is a scalar"),
])
def test_rejected_forms_reach_the_diagnostics(tmp_path, rule, hint):
    text = toy(REJECT.replace("{rule}", rule))
    _, diags = load_one(tmp_path, text)
    only(diags, "rejected-form", "signature.shape_rules.0", line_of(text, f'"{rule}"'),
         f"`{rule}`: ", hint=hint)


# ----------------------------------------------------------------------------- lets

def test_let_cycle(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]"}}
        let:
          d: "e + 1"
          a: "b + 1"
          b: "c * 2"
          c: "a - 1"
          e: "M + 1"
          f: "a + e"
        shape_rules:
        - "e > 0"
        """)
    e, diags = load_one(tmp_path, text)
    d = only(diags, "let-cycle", "signature.let.a", line_of(text, 'a: "b + 1"'),
             "lets depend on each other in a cycle: a -> b -> c -> a")
    # the lets outside the cycle are still elaborated, in dependency order; a let reading
    # a member of the cycle is left out without another diagnostic
    assert list(e.lets) == ["e", "d"]
    assert {"signature.let.a", "signature.let.b", "signature.let.c",
            "signature.let.f"} <= e.broken
    assert "signature.let.e" not in e.broken and len(e.rules) == 1
    assert d.severity.value == "error"


def test_declarations_reading_a_failed_let_are_left_out_quietly(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]"}}
          z: {{dtype: T, shape: "[M, bad]"}}
        let:
          bad: "M + flag"
          good: "M + 1"
        shape_rules:
        - "bad > 0"
        - "good > 0"
        """).replace('flops: "1"', 'flops: "bad * good"')
    e, diags = load_one(tmp_path, text)
    only(diags, "name", "signature.let.bad", line_of(text, 'bad: "M + flag"'),
         "unknown name `flag`")
    assert {"signature.inputs.z.shape", "signature.shape_rules.0", "roofline.flops"} <= e.broken
    assert list(e.inputs) == ["x"] and [r.text for r in e.rules] == ["good > 0"]
    assert e.roofline.flops is None and list(e.lets) == ["good"]


def test_let_reading_itself(tmp_path):
    text = toy(f"""
        {FORALL}
        let:
          a: "a + 1"
        """)
    _, diags = load_one(tmp_path, text)
    only(diags, "let-cycle", "signature.let.a", line_of(text, 'a: "a + 1"'), "a -> a")


def test_lets_in_dependency_order_with_kinds(tmp_path):
    e, diags = load_one(tmp_path, toy("""
        forall: {M: Dim, S: Shape}
        params:
          rotary_dim: {type: "int | None", default: null}
          kernel_size: {type: "int | tuple[int, int]"}
          padding: {type: "int | tuple[int, int] | 'valid' | 'same'"}
        let:
          H: "R + kH"
          R: "rotary_dim.value if present(rotary_dim) else M"
          kH: "per_axis(kernel_size, 0, 2)"
          big: "M > 128"
          pW: "0 if padding == 'valid' or padding == 'same' else per_axis(padding, 0, 1)"
          rank: "len(S)"
        """))
    no_errors(diags)
    order = list(e.lets)
    assert order.index("R") < order.index("H") and order.index("kH") < order.index("H")
    assert e.lets["R"].kind == K.INT and e.lets["big"].kind == K.BOOL
    assert e.lets["rank"].kind == K.DIM and e.kind_of("rank") == K.DIM
    assert e.lets["H"].path == "signature.let.H"


def test_let_reading_a_broken_let_is_left_out_quietly(tmp_path):
    text = toy("""
        forall: {M: Dim}
        let:
          a: "M +"
          b: "a + 1"
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, "parse", "signature.let.a", line_of(text, 'a: "M +"'), "cannot parse")
    assert e.lets == {} and "signature.let.b" in e.broken


# ----------------------------------------------------------------------------- families

def family_spec(types: str, shape: str, params: str = "") -> str:
    return toy(f"""
types:
{textwrap.indent(textwrap.dedent(types).strip(), "  ")}
forall: {{M: Dim}}
params:
  flag: {{type: bool}}
  mode: {{type: "'a' | 'b'"}}
  layout: {{type: Layout}}
{textwrap.indent(textwrap.dedent(params).strip(), "  ")}
inputs:
  x: {{dtype: float32, shape: "{shape}"}}
""")


def test_match_on_a_dim_is_a_kind_error(tmp_path):
    text = family_spec("""
        F:
          params: {R: Dim, C: Dim}
          match: R
          cases:
          - {when: 1, is: "[C]"}
        """, "F[M, M]")
    e, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.types.F.match", line_of(text, "match: R"),
         "family F matches on `R` of kind Dim", "a match needs a Bool, enum or ADT discriminant")
    assert "F" not in e.families and "x" not in e.inputs


def test_match_on_a_name_that_is_not_a_param(tmp_path):
    text = family_spec("""
        F:
          params: {t: Bool}
          match: u
          cases:
          - {when: true, is: "[]"}
        """, "F[flag]")
    _, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "name", "signature.types.F.match", line_of(text, "match: u"),
         "family F matches on `u`, which is not one of its params ['t']")


@pytest.mark.parametrize("when, fragments", [
    ("c", ("`when: 'c'` is not one of ['a', 'b']",)),
    ("true", ("`when: True` is not one of ['a', 'b']",)),
])
def test_when_outside_the_enum(tmp_path, when, fragments):
    text = family_spec(f"""
        F:
          params: {{m: "'a' | 'b'", R: Dim}}
          match: m
          cases:
          - {{when: a, is: "[R]"}}
          - {{when: {when}, is: "[R, R]"}}
        """, "F[mode, M]")
    e, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.types.F.cases.1.when", line_of(text, f"when: {when},"),
         *fragments)
    assert [c.when for c in e.families["F"].cases] == [(Pattern(value="a"),)]


def test_when_of_a_bool_match(tmp_path):
    text = family_spec("""
        F:
          params: {t: Bool}
          match: t
          cases:
          - {when: yes, is: "[]"}
        """, "F[flag]")
    _, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.types.F.cases.0.when", line_of(text, "when: yes"),
         "`when: 'yes'` is not a Bool")


@pytest.mark.parametrize("when, got", [("[true]", "[True]"), ("true", "True"),
                                       ("[true, a, b]", "[True, 'a', 'b']")])
def test_tuple_match_with_wrong_arity(tmp_path, when, got):
    text = family_spec(f"""
        F:
          params: {{f: Bool, m: "'a' | 'b'", R: Dim}}
          match: [f, m]
          cases:
          - {{when: [true, a], is: "[R]"}}
          - {{when: {when}, is: "[R]"}}
        """, "F[flag, mode, M]")
    e, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.types.F.cases.1.when", line_of(text, f"when: {when},"),
         "family F matches on ['f', 'm']; `when` must give 2 value(s)", f"got {got}")
    fam = e.families["F"]
    assert fam.match == ("f", "m") and fam.cases[0].when == (Pattern(value=True),
                                                             Pattern(value="a"))


@pytest.mark.parametrize("when, fragments", [
    ("{strided: _}", ("Layout has no constructor `strided`", "['contiguous', 'masked']")),
    ("{contiguous: {alignment: 4}}", ("`alignment` is not a finitely-valued field of "
                                      "Layout.contiguous", "['packing']")),
    ("{contiguous: {packing: loose}}", ("packing: 'loose' is not one of ['aligned', 'tight']",)),
    ("{contiguous: 3}", ("constructor pattern `contiguous` takes `_` or a mapping of fields",)),
    ("masked", ("`when: 'masked'` is not a pattern of Layout",)),
])
def test_adt_patterns_rejected(tmp_path, when, fragments):
    text = family_spec(f"""
        F:
          params: {{l: Layout, R: Dim}}
          match: l
          cases:
          - {{when: {{masked: _}}, is: "[l.max_m]"}}
          - {{when: {when}, is: "[R]"}}
        """, "F[layout, M]")
    _, diags = load_one(tmp_path, text, types=TYPES)
    only(diags, "kind", "signature.types.F.cases.1.when", line_of(text, f"when: {when},"),
         *fragments)


@pytest.mark.parametrize("when, hint", [("masked", "when: {masked: _}"), ("strided", None)])
def test_a_bare_constructor_name_gets_its_pattern(tmp_path, when, hint):
    text = family_spec(f"""
        F:
          params: {{l: Layout, R: Dim}}
          match: l
          cases:
          - {{when: {{contiguous: _}}, is: "[R]"}}
          - {{when: {when}, is: "[R]"}}
        """, "F[layout, M]")
    _, diags = load_one(tmp_path, text, types=TYPES)
    d = only(diags, "kind", "signature.types.F.cases.1.when", line_of(text, f"when: {when},"),
             f"`when: '{when}'` is not a pattern of Layout")
    assert d.hint == hint


def test_adt_patterns_accepted(tmp_path):
    e, diags = load_one(tmp_path, family_spec("""
        F:
          params: {l: Layout, R: Dim}
          match: l
          cases:
          - {when: {masked: _}, is: "[l.max_m]"}
          - {when: {contiguous: {packing: tight}}, is: "[R]"}
          - {when: {contiguous: {packing: aligned}}, is: "[ceil_div(R, l.alignment)]"}
        """, "F[layout, M]"), types=TYPES)
    no_errors(diags)
    pats = [c.when[0] for c in e.families["F"].cases]
    assert pats == [Pattern(ctor="masked"), Pattern(ctor="contiguous", fields=(("packing", "tight"),)),
                    Pattern(ctor="contiguous", fields=(("packing", "aligned"),))]
    assert pats[1].describe() == "{contiguous: {packing: tight}}"


def test_family_argument_may_be_presence(tmp_path):
    e, diags = load_one(tmp_path, toy("""
        types:
          Out:
            params: {p: Bool, R: Dim}
            match: p
            cases:
            - {when: true, is: "[R]"}
            - {when: false, is: "[R, R]"}
        forall: {M: Dim}
        inputs:
          o: {dtype: int32, shape: "[M]", optional: true}
        outputs:
          y: {dtype: float32, shape: "Out[present(o), M]"}
        """))
    no_errors(diags)
    assert e.outputs["y"].shape.args[0] == Call("present", (Name("o"),))


# ----------------------------------------------------------------------------- effects

EFFECTS = f"""
{FORALL}
params:
  inplace: {{type: bool}}
inputs:
  x: {{dtype: T, shape: "[M, N]", mutated: inplace}}
  r: {{dtype: T, shape: "[M]"}}
  w: {{dtype: T, shape: "[M]", mutated: true, write_only: true}}
outputs:
  y: {{dtype: T, shape: "[M, N]", alias: x}}
{{extra}}
"""


def test_effects_accepted(tmp_path):
    e, diags = load_one(tmp_path, toy(EFFECTS.replace("{extra}", "  o: {dtype: T, shape: \"[M]\", buffer: out}")))
    no_errors(diags)
    assert e.inputs["w"].write_only and e.inputs["w"].mutated is True
    assert e.outputs["o"].buffer == "out" and e.has_out


@pytest.mark.parametrize("extra, path, needle, fragments", [
    ('  o: {dtype: T, shape: "[M]", alias: q}', "signature.outputs.o.alias", "alias: q",
     ("output `o` aliases `q`, which is not an input", "['x', 'r', 'w']")),
    ('  o: {dtype: T, shape: "[M]", alias: r}', "signature.outputs.o.alias", "alias: r",
     ("output `o` aliases input `r`, which is never written",)),
    ('  o: {dtype: T, shape: "[M]", alias: y}', "signature.outputs.o.alias", "alias: y",
     ("output `o` aliases `y`, which is not an input",)),
    ('  o: {dtype: T, shape: "[M]", alias: x, buffer: out}', "signature.outputs.o.alias",
     "buffer: out}", ("output `o` has both `alias` and `buffer`",)),
])
def test_alias_rules(tmp_path, extra, path, needle, fragments):
    text = toy(EFFECTS.replace("{extra}", extra))
    _, diags = load_one(tmp_path, text)
    only(diags, "effect", path, line_of(text, needle), *fragments)


def test_at_most_one_buffer_out(tmp_path):
    text = toy(EFFECTS.replace("{extra}", '  o1: {dtype: T, shape: "[M]", buffer: out}\n'
                                          '  o2: {dtype: T, shape: "[M]", buffer: out}'))
    _, diags = load_one(tmp_path, text)
    only(diags, "effect", "signature.outputs.o2.buffer", line_of(text, "o2:"),
         "at most one output has `buffer: out`; ['o1', 'o2'] all do")


@pytest.mark.parametrize("mutated", ["false", "inplace"])
def test_write_only_needs_mutated_true(tmp_path, mutated):
    text = toy(EFFECTS.replace("{extra}", "").replace(
        "mutated: true, write_only: true", f"mutated: {mutated}, write_only: true"))
    _, diags = load_one(tmp_path, text)
    only(diags, "effect", "signature.inputs.w.write_only", line_of(text, "w: {dtype"),
         "`w` is write_only but not `mutated: true`")


def test_effect_fields_on_the_wrong_side(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, N]", alias: y, nullable: true}}
        outputs:
          y: {{dtype: T, shape: "[M, N]", mutated: true, values: "as_tensor(S)"}}
        """)
    _, diags = load_one(tmp_path, text)
    x, y = line_of(text, "x: {dtype"), line_of(text, "y: {dtype")
    expect(diags, "parse", "signature.inputs.x.alias", x, "`alias` is a field of outputs, not "
           "of input `x`")
    expect(diags, "parse", "signature.inputs.x.nullable", x, "`nullable` is a field of outputs")
    expect(diags, "parse", "signature.outputs.y.mutated", y, "`mutated` is a field of inputs, "
           "not of output `y`")
    expect(diags, "parse", "signature.outputs.y.values", y, "`values` is a field of inputs")


# ----------------------------------------------------------------------------- dtype_combos

COMBOS = f"""
forall: {{M: Dim, T: "DType[float16 | bfloat16]", KV: "DType[float16 | float8_e4m3fn]"}}
params:
  od: {{type: "float16 | float32"}}
inputs:
  x: {{dtype: T, shape: "[M]"}}
  k: {{dtype: KV, shape: "[M]"}}
dtype_combos:
{{rows}}
"""


def test_dtype_combos_accepted(tmp_path):
    rows = "- {T: float16, KV: float16, od: float32}\n- {T: bfloat16, KV: float8_e4m3fn, od: float16}"
    e, diags = load_one(tmp_path, toy(COMBOS.replace("{rows}", rows)))
    assert diags == []
    assert e.dtype_combos == ({"T": "float16", "KV": "float16", "od": "float32"},
                              {"T": "bfloat16", "KV": "float8_e4m3fn", "od": "float16"})


@pytest.mark.parametrize("rows, bad, fragments", [
    ("- {T: float16, Q: float16}", 0, ("`Q` is not a DType index or dtype parameter",)),
    ("- {T: float16, M: float16}", 0, ("`M` is not a DType index or dtype parameter",)),
    ("- {T: float16, KV: float16}\n- {T: float32, KV: float16}", 1,
     ("T: float32 is not one of ['bfloat16', 'float16']",)),
    ("- {T: float16, od: bfloat16}", 0, ("od: bfloat16 is not one of ['float16', 'float32']",)),
    ("- {T: float16, KV: float16}\n- {T: bfloat16, KV: float16}\n- {T: float16, KV: float16}", 2,
     ("dtype_combos row {'T': 'float16', 'KV': 'float16'} is repeated",)),
    ("- {T: float16, KV: float16}\n- {T: float16}", 1,
     ("every dtype_combos row has the keys ['T', 'KV']; this one has ['T']",)),
])
def test_dtype_combos_rejected(tmp_path, rows, bad, fragments):
    text = toy(COMBOS.replace("{rows}", rows))
    e, diags = load_one(tmp_path, text)
    line = line_of(text, "dtype_combos:") + 1 + bad
    only(diags, "kind", f"signature.dtype_combos.{bad}", line, *fragments)


# ----------------------------------------------------------------------------- metadata tensors

def test_requires_needs_values(tmp_path):
    text = toy("""
        forall: {M: Dim, N: Dim}
        inputs:
          o: {dtype: int32, shape: "[N]", requires: ["prefix_offsets(M)"]}
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, "workload", "signature.inputs.o.requires", line_of(text, "o: {dtype"),
         "tensor `o` declares `requires` but no `values` generator")


@pytest.mark.parametrize("req, check, fragments", [
    ("M > 0", "language", ("`M > 0` is not a `requires` predicate call",)),
    ("ceil_div(M, 2)", "language", ("is not a `requires` predicate call",)),
    ("prefix_offsets(M, M)", "kind", ("prefix_offsets takes 1 argument(s) after the implicit "
                                      "tensor, got 2",)),
    ("prefix_offsets(flag)", "kind", ("`flag` has kind Bool, expected Int (argument total of "
                                      "prefix_offsets)",)),
])
def test_requires_predicates(tmp_path, req, check, fragments):
    text = toy(f"""
        forall: {{M: Dim, N: Dim, seq: "Seq[Int]"}}
        params:
          flag: {{type: bool}}
        inputs:
          o: {{dtype: int32, shape: "[N]", values: "prefix_sum(seq)", requires: ["{req}"]}}
        """)
    _, diags = load_one(tmp_path, text)
    only(diags, check, "signature.inputs.o.requires.0", line_of(text, "o: {dtype"), *fragments)


@pytest.mark.parametrize("values", ["M + 1", "seq", "balanced_sizes(M, 2)"])
def test_values_must_be_a_generator_call(tmp_path, values):
    text = toy(f"""
        forall: {{M: Dim, N: Dim, seq: "Seq[Int]"}}
        inputs:
          o: {{dtype: int32, shape: "[N]", values: "{values}"}}
        """)
    e, diags = load_one(tmp_path, text)
    only(diags, "language", "signature.inputs.o.values", line_of(text, "o: {dtype"),
         f"`{values}` is not a generator call")
    assert e.inputs["o"].values is None


# ----------------------------------------------------------------------------- input order

@pytest.mark.parametrize("optional", ["true", "flag", '"present(a)"'])
def test_required_input_after_an_optional_one(tmp_path, optional):
    # An input whose `optional` is a discriminant expression is optional too (it used to
    # be let through).
    text = toy(f"""
        {FORALL}
        params:
          flag: {{type: bool}}
        inputs:
          a: {{dtype: T, shape: "[M]"}}
          b: {{dtype: T, shape: "[M]", optional: {optional}}}
          c: {{dtype: T, shape: "[M]"}}
          d: {{dtype: T, shape: "[M]", optional: true}}
        """)
    _, diags = load_one(tmp_path, text)
    only(diags, "name", "signature.inputs.c", line_of(text, "c: {dtype"),
         "required input `c` comes after optional input `b`", "optional inputs come last")


def test_optional_inputs_last_accepted(tmp_path):
    _, diags = load_one(tmp_path, toy(f"""
        {FORALL}
        inputs:
          a: {{dtype: T, shape: "[M]"}}
          b: {{dtype: T, shape: "[M]", optional: true}}
          c: {{dtype: T, shape: "[M]", optional: "present(b)"}}
        """))
    assert diags == []


# ----------------------------------------------------------------------------- domain restrictions

@pytest.mark.parametrize("rule, is_domain", [
    ("present(cap) or present(b)", True),
    ("layout.kind == 'contiguous'", True),
    ("not flag or mode == 'a'", True),
    ("layout.kind == 'masked' or layout.packing == 'tight'", True),
    ("(mode == 'a') == present(b)", True),
    ("not present(rounding) or rounding.value == 'trunc'", True),
    ("padding == 'valid'", False),
    ("M > 0", False),
    ("not flag or M > 0", False),
    ("layout.alignment >= 1 if layout.kind == 'contiguous' else True", False),
    ("layout.kind == 'masked' or layout.alignment >= 1", False),
    ("layout.kind == 'masked' and layout.max_m > 0", False),
    ("not present(cap) or cap.value > 0", False),
    ("T == 'float16'", False),
    ("eps > 0.0", False),
])
def test_domain_restriction_classification(tmp_path, rule, is_domain):
    e, diags = load_one(tmp_path, rules_spec(rule), types=TYPES)
    no_errors(diags)
    (r,) = e.rules
    assert r.is_domain is is_domain


# ----------------------------------------------------------------------------- robustness

def test_one_bad_field_costs_only_itself(tmp_path):
    text = toy(f"""
        {FORALL}
        inputs:
          x: {{dtype: T, shape: "[M, Q]"}}
          z: {{dtype: T, shape: "[N]"}}
        outputs:
          y: {{dtype: T, shape: "[M, N]"}}
        let:
          L: "M * N"
        shape_rules:
        - "flag"
        - "M > 0"
        """)
    e, diags = load_one(tmp_path, text)
    assert {d.path for d in errors(diags)} == {"signature.inputs.x.shape",
                                               "signature.shape_rules.0"}
    assert list(e.inputs) == ["z"] and list(e.outputs) == ["y"] and list(e.lets) == ["L"]
    assert [r.path for r in e.rules] == ["signature.shape_rules.1"]
    assert e.broken >= {"signature.inputs.x.shape", "signature.shape_rules.0"}


def test_load_failure_gives_no_elaboration(tmp_path):
    text = toy(FORALL).replace("  roofline: {flops: \"1\"}\n", "")
    e, diags = load_one(tmp_path, text, load_ok=False)
    assert e is None and diags == []


def test_positions_point_inside_the_quotes(tmp_path):
    text = rules_spec("Q > 0")
    _, diags = load_one(tmp_path, text, types=TYPES)
    d = only(diags, "name", "signature.shape_rules.0", line_of(text, '"Q > 0"'), "`Q`")
    assert d.pos.column == col_of(text, "Q > 0")


# ----------------------------------------------------------------------------- corpus and bundle

def elaborate_all(manifest) -> list[str]:
    adts, adt_diags = elaborate_adts(manifest.adts)
    problems = [d.render() for d in adt_diags if d.is_error]
    problems += [d.render() for d in manifest.diagnostics if d.is_error]
    for loaded in manifest.specs.values():
        e, diags = elaborate(loaded, adts)
        assert e is not None, loaded.name
        problems += [d.render() for d in diags if d.is_error]
        assert not e.broken, (loaded.name, sorted(e.broken))
    return problems


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not present")
def test_corpus_elaborates_without_errors():
    manifest = load_paths([CORPUS], strict=True)
    assert len(manifest.specs) > 100
    assert elaborate_all(manifest) == []


def test_bundled_manifest_elaborates_without_errors():
    from opspec.manifest import load_bundled

    manifest = load_bundled(strict=True)
    assert manifest.specs
    assert elaborate_all(manifest) == []


# ----------------------------------------------------------------------------- no code execution

#: The only places allowed to run or import code, each reviewed: the runtime's lowering of
#: a proven Plan compiles Python source that it writes itself from the parsed AST
#: (DESIGN.md, "Lower"), so spec text never reaches it as source; a `roofline: {func: ...}`
#: is imported only inside the manifest's `python_prefixes`; `opspec.ops` imports its own
#: op modules lazily from a fixed table. Any other call fails the test.
ALLOWED_DYNAMIC_CODE = {("ops/codegen.py", "generate_branch", "compile"),
                        ("ops/codegen.py", "generate_branch", "exec"),
                        ("ops/roofline.py", "resolve_func", "importlib.import_module"),
                        ("ops/__init__.py", "__getattr__", "importlib.import_module"),
                        # module names from the package's own folder, never from spec text
                        ("ops/bench_baselines.py", "_family_entries",
                         "importlib.import_module"),
                        # `opspec.ops.<family>` (an identifier) of the bundled manifest only
                        ("ops/codecheck.py", "import_family_module", "importlib.import_module")}


def _dynamic_code(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, what, enclosing function) of each call of eval, exec, the builtin compile, or
    `__import__` / `importlib.import_module` with a non-literal argument."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = f"{where}.{node.name}" if where else node.name
        if isinstance(node, ast.Call):
            f = node.func
            literal = bool(node.args) and isinstance(node.args[0], ast.Constant)
            if isinstance(f, ast.Name) and f.id in ("eval", "exec", "compile"):
                found.append((node.lineno, f.id, where))
            elif isinstance(f, ast.Name) and f.id == "__import__" and not literal:
                found.append((node.lineno, "__import__", where))
            elif (isinstance(f, ast.Attribute) and f.attr == "import_module"
                  and isinstance(f.value, ast.Name) and f.value.id == "importlib"
                  and not literal):
                found.append((node.lineno, "importlib.import_module", where))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "")
    return found


def test_scanner_finds_dynamic_code():
    tree = ast.parse("eval(x)\nexec('1')\ncompile(s, 'f', 'eval')\n__import__(name)\n"
                     "importlib.import_module(mod)\n__import__('os')\nre.compile('x')\n"
                     "class A:\n    def f(self):\n        return eval(t)\n")
    assert _dynamic_code(tree) == [(1, "eval", ""), (2, "exec", ""), (3, "compile", ""),
                                   (4, "__import__", ""), (5, "importlib.import_module", ""),
                                   (10, "eval", "A.f")]


def test_no_module_executes_text():
    files = [p for p in PACKAGE.rglob("*.py")
             if "tests" not in p.relative_to(PACKAGE).parts
             and not any(part.startswith(".") or part.endswith(".egg-info")
                         for part in p.relative_to(PACKAGE).parts)]
    assert any(p.name == "elaborate.py" for p in files)
    found = {}
    for p in files:
        rel = p.relative_to(PACKAGE).as_posix()
        hits = [h for h in _dynamic_code(ast.parse(p.read_text(), str(p)))
                if (rel, h[2], h[1]) not in ALLOWED_DYNAMIC_CODE]
        if hits:
            found[rel] = hits
    assert found == {}


# ----------------------------------------------------------------------------- Maybe ADT narrowing

MAYBE_ADT_TYPES = """
adts:
  Layout:
    sum:
      contiguous: {fields: {alignment: Dim}}
      masked: {fields: {max_m: Dim}}
"""


@pytest.mark.parametrize("rule, ok", [
    ("not present(ol) or (ol.value.kind == 'masked' and ol.value.max_m > 0)", True),
    ("present(ol) and ol.value.kind != 'contiguous' and ol.value.max_m > 0", True),
    ("not present(ol) or ol.value.max_m > 0", False),
])
def test_maybe_adt_constructor_narrows_field_reads(tmp_path, rule, ok):
    text = toy(f"""
        forall: {{M: Dim}}
        params:
          ol: {{type: "Layout | None", default: null}}
        inputs:
          x: {{dtype: float32, shape: "[M]"}}
        outputs:
          y: {{dtype: float32, shape: "[M]"}}
        shape_rules:
        - "{rule}"
    """)
    _, diags = load_one(tmp_path, text, types=MAYBE_ADT_TYPES)
    if ok:
        assert diags == []
    else:
        (d,) = diags
        assert d.check == "kind" and d.path == "signature.shape_rules.0"
        assert "max_m" in d.message and "contiguous" in d.message
