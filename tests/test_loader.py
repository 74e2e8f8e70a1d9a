"""Loading family files, types files and manifest folders: opspec.schema.loader."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from opspec.schema import (Diagnostic, LoadedSpec, Manifest, Severity, SpecError, load_paths)
from opspec.schema.diagnostics import Pos
from opspec.schema.jsonschema import spec_file_json_schema, types_file_json_schema

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tileops"

SPEC = """\
ToyFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, T: "DType[float16 | bfloat16]"}
    params:
      eps: {type: float, default: 1.0e-6}
    inputs:
      x: {dtype: T, shape: "[M]"}
      y:
        dtype: T
        shape: "[M]"
    outputs:
      z: {dtype: T, shape: "[M]"}
    shape_rules:
    - M > 0
    - M % 2 == 0
  workloads:
  - {M: 128, dtype_cases: [{T: float16}], label: small}
  - {M: 256, dtype_cases: [{T: float16}], label: big}
  roofline: {flops: M, bytes: "3 * M * 2"}
"""


LABEL_COL = SPEC.splitlines()[19].index("big") + 1


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def errors(m: Manifest | LoadedSpec) -> list[Diagnostic]:
    return [d for d in m.diagnostics if d.is_error]


def load_one(tmp_path: Path, text: str, *, strict: bool = True,
             name: str = "toy.yaml") -> Manifest:
    return load_paths([write(tmp_path, name, text)], strict=strict)


# --- a good spec --------------------------------------------------------------------------

def test_good_spec_loads(tmp_path):
    m = load_one(tmp_path, SPEC)
    assert not m.diagnostics
    s = m.specs["ToyFwdOp"]
    assert s.ok and s.spec.family == "toy" and list(s.spec.signature.inputs) == ["x", "y"]
    assert s.spec.signature.params["eps"].default == 1.0e-6
    assert isinstance(s.spec.signature.params["eps"].default, float)
    assert s.file == str(tmp_path / "toy.yaml") and s.path_prefix == ("ToyFwdOp",)
    assert s.raw["family"] == "toy"
    assert m.files == (str(tmp_path / "toy.yaml"),) and m.root is None


def test_declaration_positions(tmp_path):
    s = load_one(tmp_path, SPEC).specs["ToyFwdOp"]
    f = s.file
    assert s.pos() == Pos(f, 1, 1)
    assert s.pos("signature.inputs.x.shape") == Pos(f, 9, 29)   # inside the quotes
    assert s.pos("signature.inputs.y") == Pos(f, 10, 7)         # the key of a mapping
    assert s.pos(("signature", "inputs", "y", "dtype")) == Pos(f, 11, 16)
    assert s.pos("signature.shape_rules.1") == Pos(f, 17, 7)
    assert s.pos("workloads.1.label") == Pos(f, 20, LABEL_COL)
    assert s.pos("signature.inputs.x.nosuch") == s.pos("signature.inputs.x")
    assert s.key_pos("signature.inputs.x.shape") == Pos(f, 9, 21)


def test_yaml_values_keep_their_types(tmp_path):
    text = SPEC.replace("    shape_rules:", "    let: {G: 8, H: \"M // 2\"}\n    shape_rules:")
    text = text.replace("  workloads:", "    types:\n      F:\n        params: {t: Bool}\n"
                        "        match: t\n        cases:\n        - {when: false, is: \"[M]\"}\n"
                        "        - {when: true, is: \"[2 * M]\"}\n  workloads:")
    s = load_one(tmp_path, text).specs["ToyFwdOp"]
    assert s.ok, s.diagnostics
    assert s.spec.signature.let == {"G": "8", "H": "M // 2"}
    assert s.spec.signature.types["F"].cases[0].when is False
    assert s.spec.roofline.flops == "M"


# --- strict mode, field by field ----------------------------------------------------------

def test_one_bad_tensor_field(tmp_path):
    m = load_one(tmp_path, SPEC.replace("x: {dtype: T, shape: \"[M]\"}",
                                        "x: {dtype: T, shape: \"[M]\", mutatd: true}"))
    (d,) = m.diagnostics
    assert d.check == "parse" and d.severity is Severity.ERROR and d.op == "ToyFwdOp"
    assert d.path == "signature.inputs.x.mutatd"
    assert d.pos == Pos(str(tmp_path / "toy.yaml"), 9, 35)
    assert d.message == ("unknown field `mutatd` in signature.inputs.x; "
                         "did you mean `mutated`?")
    s = m.specs["ToyFwdOp"]
    assert s.spec is not None and list(s.spec.signature.inputs) == ["y"]
    assert s.broken == {"signature.inputs.x"}
    assert list(s.spec.signature.outputs) == ["z"] and len(s.spec.workloads) == 2


def test_lenient_mode_ignores_unknown_keys_with_a_warning(tmp_path):
    m = load_one(tmp_path, SPEC.replace("x: {dtype: T, shape: \"[M]\"}",
                                        "x: {dtype: T, shape: \"[M]\", mutatd: true}"),
                 strict=False)
    (d,) = m.diagnostics
    assert d.severity is Severity.WARNING and d.path == "signature.inputs.x.mutatd"
    s = m.specs["ToyFwdOp"]
    assert list(s.spec.signature.inputs) == ["x", "y"] and not s.broken


def test_wrong_type_is_one_readable_diagnostic(tmp_path):
    m = load_one(tmp_path, SPEC.replace("y:\n        dtype: T", "y:\n        optional: 3\n"
                                                               "        dtype: T"))
    (d,) = m.diagnostics
    assert d.path == "signature.inputs.y.optional" and d.pos.line == 11
    assert d.message == ("`signature.inputs.y.optional` must be true or false or a string, "
                         "got `3`")
    assert m.specs["ToyFwdOp"].broken == {"signature.inputs.y"}


def test_model_rule_violation_is_reported_on_the_entry(tmp_path):
    m = load_one(tmp_path, SPEC.replace("eps: {type: float, default: 1.0e-6}",
                                        "eps: {type: float, dtype: T}"))
    (d,) = m.diagnostics
    assert d.path == "signature.params.eps" and "not both" in d.message
    assert d.pos.line == 7
    assert m.specs["ToyFwdOp"].spec.signature.params == {}


def test_missing_field(tmp_path):
    m = load_one(tmp_path, SPEC.replace("      x: {dtype: T, shape: \"[M]\"}",
                                        "      x: {dtype: T}"))
    (d,) = m.diagnostics
    assert d.path == "signature.inputs.x.shape"
    assert d.message == "missing required field `shape` in signature.inputs.x"
    assert d.pos.line == 9


def test_non_string_refinement_and_index_map(tmp_path):
    m = load_one(tmp_path, SPEC.replace("    - M > 0\n", "    - M > 0\n    - true\n"))
    (d,) = m.diagnostics
    assert d.path == "signature.shape_rules.1" and d.pos.line == 17 and "quote" in d.message
    s = m.specs["ToyFwdOp"]
    assert s.spec.signature.shape_rules == ["M > 0", "M % 2 == 0"]
    assert s.broken == {"signature.shape_rules.1"}
    # Index 1 of the loaded list is item 2 of the file.
    assert s.source_path("signature.shape_rules.1") == ("ToyFwdOp", "signature", "shape_rules", 2)
    assert s.pos("signature.shape_rules.1").line == 18


def test_bad_workload_row_is_dropped(tmp_path):
    m = load_one(tmp_path, SPEC.replace("label: small}", "labl: small}"))
    (d,) = [d for d in m.diagnostics]
    # `labl` is taken for an index name; what is missing is the label, and the key that
    # looks like it is named.
    assert d.path == "workloads.0.label"
    assert d.message == ("missing required field `label` in workloads.0; is `labl` a "
                         "misspelling of it?")
    s = m.specs["ToyFwdOp"]
    assert [r.label for r in s.spec.workloads] == ["big"] and s.broken == {"workloads.0"}
    # Index 0 of the rows kept is row 1 of the file.
    assert s.file_decl("workloads.0") == "workloads.1" and s.file_decl("roofline") == "roofline"
    assert not s.ok


def test_missing_field_names_no_misspelling_without_a_close_key(tmp_path):
    m = load_one(tmp_path, SPEC.replace("label: small}", "tag: small}"))
    (d,) = m.diagnostics
    assert d.message == "missing required field `label` in workloads.0"


def test_all_rows_broken_keep_the_signature_and_no_echo(tmp_path):
    text = SPEC.replace("label: small}", "label: 1}").replace("label: big}", "label: 2}")
    s = load_one(tmp_path, text).specs["ToyFwdOp"]
    # The signature is still there to prove; the rows are left out, broken, and the empty
    # list is not reported again (no "must not be empty").
    assert s.spec is not None and s.spec.workloads == [] and not s.ok
    assert s.spec.signature.inputs.keys() == {"x", "y"}
    assert s.broken == {"workloads.0", "workloads.1"}
    assert [d.path for d in s.diagnostics] == ["workloads.0.label", "workloads.1.label"]


def test_broken_roofline_keeps_the_signature(tmp_path):
    text = SPEC.replace('roofline: {flops: M, bytes: "3 * M * 2"}', 'roofline: {bytes: "3 * M"}')
    s = load_one(tmp_path, text).specs["ToyFwdOp"]
    (d,) = s.diagnostics
    assert (d.check, d.path) == ("parse", "roofline")
    assert d.message == "roofline needs `flops` (and optionally `bytes`) or `func`"
    assert s.spec is not None and s.spec.roofline is None and s.broken == {"roofline"}
    assert [r.label for r in s.spec.workloads] == ["small", "big"]


def test_broken_roofline_and_another_bad_field_leave_no_spec(tmp_path):
    # Only a roofline or rows that failed are left out; any other bad field of the op
    # still drops it (there is no valid op without it).
    text = SPEC.replace('roofline: {flops: M, bytes: "3 * M * 2"}', 'roofline: {bytes: "3 * M"}')
    s = load_one(tmp_path, text.replace("status: spec-only", "status: done")).specs["ToyFwdOp"]
    assert s.spec is None
    assert [d.path for d in s.diagnostics] == ["roofline", "status"]


def test_missing_top_level_field(tmp_path):
    text = SPEC.replace("  roofline: {flops: M, bytes: \"3 * M * 2\"}\n", "")
    m = load_one(tmp_path, text)
    (d,) = m.diagnostics
    assert d.message == "missing required field `roofline` in the spec" and d.pos.line == 1
    s = m.specs["ToyFwdOp"]
    assert s.spec is None and s.raw["family"] == "toy"


def test_bad_top_level_value(tmp_path):
    m = load_one(tmp_path, SPEC.replace("status: spec-only", "status: done"))
    (d,) = m.diagnostics
    assert d.path == "status" and "'implemented' or 'spec-only'" in d.message
    s = m.specs["ToyFwdOp"]
    assert s.spec is None and s.broken == {"status"}


def test_unknown_keys_at_every_level(tmp_path):
    text = SPEC.replace("  status: spec-only", "  status: spec-only\n  famly: toy")
    text = text.replace("    outputs:", "    output:\n      q: {dtype: T, shape: \"[M]\"}\n"
                                       "    outputs:")
    m = load_one(tmp_path, text)
    msgs = sorted(d.message for d in m.diagnostics)
    assert msgs == [
        "unknown field `famly` in the spec; did you mean `family`?",
        "unknown field `output` in signature; did you mean `outputs`?",
    ]
    assert m.specs["ToyFwdOp"].spec is not None  # unknown keys at these levels drop nothing


def test_duplicate_key_in_a_spec(tmp_path):
    m = load_one(tmp_path, SPEC.replace("  status: spec-only", "  status: spec-only\n"
                                                               "  status: implemented"))
    (d,) = m.diagnostics
    assert d.op == "ToyFwdOp" and d.path == "status" and "line 3" in d.message
    assert m.specs["ToyFwdOp"].spec.status == "spec-only"


def test_bad_composition_stage(tmp_path):
    text = SPEC + "  composition:\n    kind: composite\n    stages:\n" \
                  "    - {name: a, op: ToyFwdOp}\n    - {name: b}\n"
    m = load_one(tmp_path, text)
    (d,) = m.diagnostics
    assert d.path == "composition.stages.1" and "exactly one of" in d.message
    assert len(m.specs["ToyFwdOp"].spec.composition.stages) == 1


def test_composition_stage_names_are_distinct(tmp_path):
    text = SPEC + "  composition:\n    kind: composite\n    stages:\n" \
                  "    - {name: a, op: ToyFwdOp}\n    - {name: b, op: ToyFwdOp}\n" \
                  "    - {name: a, kernel: k}\n"
    m = load_one(tmp_path, text)
    (d,) = m.diagnostics
    assert (d.check, d.path) == ("parse", "composition")
    assert d.message == "stages 0 and 2 are both named `a`; each stage has its own name"
    assert d.pos.line == text.splitlines().index("  composition:") + 1


# --- files, names and families ------------------------------------------------------------

def test_duplicate_op_names_across_files(tmp_path):
    write(tmp_path, "toy.yaml", SPEC)
    write(tmp_path, "toy_more.yaml", "# another shard\n" + SPEC)
    m = load_paths([tmp_path])
    (d,) = m.diagnostics
    assert d.check == "name" and d.is_error
    assert f"{tmp_path / 'toy.yaml'}:1:1" in d.message
    assert f"{tmp_path / 'toy_more.yaml'}:2:1" in d.message
    assert m.specs["ToyFwdOp"].file == str(tmp_path / "toy.yaml")


def test_family_must_match_the_file_name(tmp_path):
    m = load_one(tmp_path, SPEC, name="norm.yaml")
    (d,) = m.diagnostics
    assert d.check == "name" and d.op == "ToyFwdOp" and d.path == "family"
    assert "`toy`" in d.message and "`norm.yaml`" in d.message and d.pos.line == 2


@pytest.mark.parametrize("name, ok", [
    ("toy.yaml", True), ("toy_bmm.yaml", True), ("toy_unary_math.yaml", True),
    ("toys.yaml", False), ("to.yaml", False), ("toy-bmm.yaml", False),
])
def test_shards(tmp_path, name, ok):
    m = load_one(tmp_path, SPEC, name=name)
    assert (not m.diagnostics) == ok


def test_op_names(tmp_path):
    text = SPEC.replace("ToyFwdOp:", "ToyOp:") + SPEC.replace("ToyFwdOp:", "'not a name':")
    m = load_one(tmp_path, text)
    warn, err = sorted(m.diagnostics, key=lambda d: d.is_error)
    assert warn.check == "name" and warn.severity is Severity.WARNING and "FwdOp" in warn.message
    assert err.check == "name" and err.is_error and "identifier" in err.message
    assert set(m.specs) == {"ToyOp", "not a name"}


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("{}", "empty"), ("[1, 2]", "not a mapping"), ("ToyFwdOp: 3", "mapping"),
])
def test_file_shape(tmp_path, text, words):
    m = load_one(tmp_path, text)
    (d,) = m.diagnostics
    assert d.check == "parse" and words in d.message


def test_yaml_error_becomes_a_diagnostic(tmp_path):
    m = load_one(tmp_path, "ToyFwdOp: !!python/object/apply:os.system ['true']\n")
    (d,) = m.diagnostics
    assert d.check == "parse" and "tag" in d.message and not m.specs


# --- folders and types files --------------------------------------------------------------

TYPES = """\
python_prefixes: [toy.]
adts:
  Layout:
    sum:
      dense: {python: toy.Dense}
      sparse:
        python: toy.Sparse
        fields: {nnz: Dim, kind: {type: "'csr' | 'coo'", python: toy.Kind}}
"""


def test_manifest_folder_with_spec_subfolder(tmp_path):
    write(tmp_path, "types.yaml", TYPES)
    write(tmp_path, "spec/toy.yaml", SPEC)
    write(tmp_path, "spec/toy_b.yaml", SPEC.replace("ToyFwdOp", "ToyBwdOp"))
    write(tmp_path, "notes.txt", "not yaml")
    m = load_paths([tmp_path])
    assert not m.diagnostics and list(m.specs) == ["ToyFwdOp", "ToyBwdOp"]
    assert list(m.adts) == ["Layout"] and m.types.python_prefixes == ["toy."]
    assert m.root == str(tmp_path)
    assert m.files[0] == str(tmp_path / "types.yaml")
    assert m.adt_pos("Layout", "sum.sparse.fields.nnz") == Pos(str(tmp_path / "types.yaml"), 8, 23)


def test_flat_folder_and_types_problems(tmp_path):
    write(tmp_path, "a/types.yaml", TYPES)
    write(tmp_path, "b/types.yaml", TYPES + "  Broken:\n    sum:\n      dense: {pyton: x}\n"
                                            "  Other: {sum: {}}\n")
    write(tmp_path, "a/toy.yaml", SPEC)
    m = load_paths([tmp_path / "a", tmp_path / "b"])
    msgs = sorted(d.message for d in m.diagnostics)
    assert any("defined twice" in s for s in msgs)
    assert any("`pyton`" in s and "did you mean `python`" in s for s in msgs)
    assert any("adts.Other.sum" in s and "must not be empty" in s for s in msgs)
    assert list(m.adts) == ["Layout"] and list(m.specs) == ["ToyFwdOp"]


def test_missing_path(tmp_path):
    with pytest.raises(SpecError):
        load_paths([tmp_path / "nope"])
    m = load_paths([tmp_path / "nope"], strict=False)
    (d,) = m.diagnostics
    assert "no such file" in d.message


@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00garbage", b"\x00\x01\x02", b"[[[[[[", b"a: &a [*a]", b"- - - -\n  x: [",
    b"%YAML 9.9\n---\n", b"ToyFwdOp:\n  signature: 3\n  workloads: {}\n  roofline: []\n",
    b"ToyFwdOp: {signature: {inputs: [1], params: {3: 4}, shape_rules: 5}}",
    b"ToyFwdOp: {workloads: [[], 1, {label: x, some: 3}], composition: 5, family: [toy]}",
    b"1: 2\nnull: 3\ntrue: {family: toy}",
])
def test_lenient_never_raises(tmp_path, content):
    (tmp_path / "toy.yaml").write_bytes(content)
    m = load_paths([tmp_path / "toy.yaml", tmp_path / "missing.yaml", tmp_path], strict=False)
    assert isinstance(m, Manifest) and m.diagnostics
    strict = load_paths([tmp_path / "toy.yaml"], strict=True)  # content problems never raise
    assert strict.diagnostics


def test_lenient_survives_nonsense_arguments():
    m = load_paths([None], strict=False)  # type: ignore[list-item]
    assert isinstance(m, Manifest) and m.diagnostics


def test_load_bundled_with_an_empty_folder(tmp_path, monkeypatch):
    import opspec.manifest as bundled

    monkeypatch.setattr(bundled, "MANIFEST_DIR", tmp_path)
    (tmp_path / "spec").mkdir()
    m = bundled.load_bundled()
    assert not m.specs and not m.diagnostics and not m.adts
    write(tmp_path, "spec/toy.yaml", SPEC)
    assert list(bundled.load_bundled(strict=True).specs) == ["ToyFwdOp"]


def test_load_bundled_real_folder():
    from opspec.manifest import MANIFEST_DIR, load_bundled

    assert (MANIFEST_DIR / "__init__.py").is_file()
    assert isinstance(load_bundled(), Manifest)


def test_schema_imports_neither_torch_nor_z3():
    code = ("import sys, opspec.schema, opspec.schema.jsonschema, opspec.manifest; "
            "bad = {'torch', 'z3', 'triton'} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- JSON Schema --------------------------------------------------------------------------

def test_json_schemas(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from ruamel.yaml import YAML

    spec_schema, types_schema = spec_file_json_schema(), types_file_json_schema()
    assert spec_schema["$schema"].endswith("2020-12/schema") and spec_schema["title"]
    jsonschema.Draft202012Validator.check_schema(spec_schema)
    jsonschema.Draft202012Validator.check_schema(types_schema)
    yaml = YAML(typ="safe", pure=True)
    spec_v = jsonschema.Draft202012Validator(spec_schema)
    assert not list(spec_v.iter_errors(yaml.load(SPEC)))
    assert list(spec_v.iter_errors(yaml.load(SPEC.replace("x: {dtype", "x: {mutatd: 1, dtype"))))
    assert not list(jsonschema.Draft202012Validator(types_schema).iter_errors(yaml.load(TYPES)))


# --- the corpus ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus() -> Manifest:
    if not CORPUS.is_dir():
        pytest.skip("corpus not present")
    start = time.perf_counter()
    m = load_paths([CORPUS], strict=True)
    print(f"corpus loaded in {time.perf_counter() - start:.2f}s")
    return m


def test_corpus_loads_without_errors(corpus):
    assert not corpus.errors, "\n".join(d.render() for d in corpus.errors)
    assert len(corpus.specs) == 168
    assert all(s.ok for s in corpus.specs.values())
    assert len(corpus.files) == len(list((CORPUS / "spec").glob("*.yaml"))) + 1


def test_corpus_types(corpus):
    layout = corpus.adts["MGroupedLayout"]
    assert set(layout.sum) == {"contiguous", "masked"}
    assert corpus.adt_pos("MGroupedLayout").file.endswith("types.yaml")


def test_corpus_each_file_strict():
    if not CORPUS.is_dir():
        pytest.skip("corpus not present")
    for path in sorted((CORPUS / "spec").glob("*.yaml")):
        m = load_paths([path], strict=True)
        assert m.specs and not m.errors, path


def test_corpus_positions(corpus):
    for s in corpus.specs.values():
        assert s.pos() is not None and s.pos().file == s.file
        for name in s.spec.signature.inputs:
            pos = s.pos(f"signature.inputs.{name}.shape")
            assert pos is not None and pos.line > s.pos().line


def test_corpus_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    if not CORPUS.is_dir():
        pytest.skip("corpus not present")
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    v = jsonschema.Draft202012Validator(spec_file_json_schema())
    for path in sorted((CORPUS / "spec").glob("*.yaml")):
        assert not list(v.iter_errors(yaml.load(path.read_text()))), path
    tv = jsonschema.Draft202012Validator(types_file_json_schema())
    assert not list(tv.iter_errors(yaml.load((CORPUS / "types.yaml").read_text())))


# --- fuzzing the field-by-field builder ---------------------------------------------------

_WORDS = ["family", "status", "signature", "workloads", "roofline", "composition", "inputs",
          "outputs", "params", "forall", "let", "types", "shape_rules", "dtype_combos", "dtype",
          "shape", "optional", "label", "some", "flops", "cases", "when", "is", "stages",
          "name", "op", "x", "toy", "sum", "adts", "fields"]


def _fuzz_values():
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(_WORDS))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(_WORDS), st.integers(0, 2)), inner,
                        max_size=4)), max_leaves=25)


def test_fuzz_builder_never_raises(tmp_path_factory):
    import json

    from hypothesis import given, settings, strategies as st

    folder = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=150, deadline=None)
    @given(st.dictionaries(st.sampled_from(["ToyFwdOp", "BarBwdOp"]), _fuzz_values(),
                           min_size=1, max_size=2),
           st.booleans())
    def run(doc, strict):
        # JSON is YAML: a quick way to write any nested structure.
        path = folder / "toy.yaml"
        path.write_text(json.dumps({str(k): v for k, v in doc.items()}))
        types = folder / "types.yaml"
        types.write_text(json.dumps(doc.get("ToyFwdOp")))
        m = load_paths([path, types], strict=strict)
        for s in m.specs.values():
            s.pos("signature.inputs.x.shape")
            s.pos("workloads.0")

    run()


def test_the_layers_import_one_way():
    """`schema` → `solver` → `ops` → `kernels`, `cli` on top: importing every solver module
    loads neither torch nor the runtime nor the command line."""
    code = ("import sys, pkgutil, importlib, opspec.solver as S\n"
            "for m in pkgutil.iter_modules(S.__path__): importlib.import_module('opspec.solver.' + m.name)\n"
            "bad = {'torch', 'triton'} & set(sys.modules)\n"
            "bad |= {m for m in sys.modules if m.startswith(('opspec.ops', 'opspec.cli', 'opspec.kernels'))}\n"
            "assert not bad, sorted(bad)")
    subprocess.run([sys.executable, "-c", code], check=True)
