"""Safe YAML reading with positions: opspec.schema.yaml_source."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings, strategies as st

from opspec.schema.diagnostics import Pos
from opspec.schema.yaml_source import (MAX_ALIASES, MAX_DEPTH, MAX_SCALAR_CHARS, YamlError,
                                       load_yaml)

F = "f.yaml"


def _plain_types(value):
    """Every type found in a loaded value (to check no ruamel type leaks out)."""
    if isinstance(value, dict):
        out = {type(value)}
        for k, v in value.items():
            out |= _plain_types(k) | _plain_types(v)
        return out
    if isinstance(value, list):
        out = {type(value)}
        for v in value:
            out |= _plain_types(v)
        return out
    return {type(value)}


def _error(text: str) -> str:
    with pytest.raises(YamlError) as info:
        load_yaml(text, F)
    diag = info.value.diagnostic
    assert diag.check == "parse" and diag.pos is not None and diag.pos.file == F
    return diag.message


# --- data and positions -------------------------------------------------------------------

BLOCK = """\
GemmFwdOp:
  signature:
    inputs:
      a: {dtype: T, shape: "[M, K]"}
      b:
        dtype: T
        shape: '[K, N]'
    shape_rules:
    - M > 0
    - "K % 8 == 0"
  workloads:
  - {M: 1, eps: 1.0e-6, flag: false, name: yes, day: 2024-01-01, big: .inf, none: ~}
"""


def test_plain_data_only():
    data, _ = load_yaml(BLOCK, F)
    assert _plain_types(data) <= {dict, list, str, int, float, bool, type(None)}
    assert type(data) is dict and type(data["GemmFwdOp"]["signature"]["shape_rules"]) is list


def test_core_schema_scalars():
    data, _ = load_yaml(BLOCK, F)
    row = data["GemmFwdOp"]["workloads"][0]
    assert row["eps"] == 1.0e-6 and isinstance(row["eps"], float)
    assert row["flag"] is False
    assert row["name"] == "yes"          # YAML 1.2: `yes` is a string
    assert row["day"] == "2024-01-01"    # no timestamps
    assert row["big"] == math.inf and row["none"] is None
    data, _ = load_yaml("a: [0x10, 0o7, -3, +4, 1e3, .5, .NaN, 'true', !!str 5, !!float 2]", F)
    a = data["a"]
    assert a[:6] == [16, 7, -3, 4, 1000.0, 0.5] and math.isnan(a[6])
    assert a[7:] == ["true", "5", 2.0] and isinstance(a[9], float)


def test_positions_of_nested_values_block_and_flow():
    _, smap = load_yaml(BLOCK, F)
    ins = ("GemmFwdOp", "signature", "inputs")
    # Flow style: the value of `shape` starts inside its double quotes.
    assert smap.get(ins + ("a", "shape")) == Pos(F, 4, 29)
    assert smap.key(ins + ("a", "shape")) == Pos(F, 4, 21)
    assert smap.get(ins + ("a", "dtype")) == Pos(F, 4, 18)
    # Block style, single quotes.
    assert smap.get(ins + ("b", "shape")) == Pos(F, 7, 17)
    assert smap.key(ins + ("b",)) == Pos(F, 5, 7)
    # List items: plain and quoted.
    rules = ("GemmFwdOp", "signature", "shape_rules")
    assert smap.get(rules + (0,)) == Pos(F, 9, 7)
    assert smap.get(rules + (1,)) == Pos(F, 10, 8)
    # A container declaration points at its key; a scalar at its value.
    assert smap.decl(ins + ("b",)) == Pos(F, 5, 7)
    assert smap.decl(ins + ("b", "dtype")) == Pos(F, 6, 16)
    assert smap.get(("GemmFwdOp", "workloads", 0, "eps")) == Pos(F, 12, 17)


def test_find_returns_deepest_known_prefix():
    _, smap = load_yaml(BLOCK, F)
    path = ("GemmFwdOp", "signature", "inputs", "a", "nothing", 3)
    assert smap.find(path) == smap.get(path[:4])
    assert smap.find(()) == Pos(F, 1, 1)
    assert smap.find(("NoSuchOp",)) == Pos(F, 1, 1)


def test_anchors_aliases_and_merge_keys():
    text = """\
base: &common
  x: {dtype: T, shape: "[M]"}
  y: {dtype: T, shape: "[N]"}
copy: *common
merged:
  w: {dtype: T, shape: "[K]"}
  <<: *common
  y: {dtype: U, shape: "[N]"}
"""
    data, smap = load_yaml(text, F)
    assert data["copy"] == data["base"] and data["copy"] is not data["base"]
    # Merged keys land where `<<` is; explicit keys win wherever they are written.
    assert list(data["merged"]) == ["w", "x", "y"]
    assert data["merged"]["y"]["dtype"] == "U"
    # Positions inside aliased content point at the anchored text.
    assert smap.find(("copy", "x", "shape")) == smap.get(("base", "x", "shape"))
    assert smap.find(("merged", "x", "shape")) == smap.get(("base", "x", "shape"))
    assert smap.get(("merged", "y", "dtype")) == Pos(F, 8, 14)
    assert smap.get(("copy",)) == Pos(F, 4, 7)


# --- recoverable problems -----------------------------------------------------------------

def test_duplicate_key_names_key_and_both_lines():
    data, smap = load_yaml("op:\n  family: a\n  status: x\n  family: b\n", F)
    assert data == {"op": {"family": "a", "status": "x"}}  # the first is kept
    (path, diag), = smap.issues
    assert path == ("op", "family") and diag.check == "parse" and diag.is_error
    assert "`family`" in diag.message and "line 2" in diag.message and "line 4" in diag.message
    assert diag.pos == Pos(F, 4, 3)


# --- hostile input ------------------------------------------------------------------------

def test_billion_laughs_is_refused_quickly():
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    start = time.perf_counter()
    assert "expand" in _error("\n".join(lines))
    assert time.perf_counter() - start < 5


def test_too_many_aliases():
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]"
    assert "aliases" in _error(text)


def test_recursive_alias():
    assert "inside its own anchor" in _error("a: &a [1, *a]")
    assert "inside its own anchor" in _error("a: &a {b: {c: *a}}")


def test_undefined_alias():
    assert "names no anchor" in _error("a: *nowhere")


def test_ten_megabyte_string_is_refused():
    start = time.perf_counter()
    assert "limit" in _error("a: " + "x" * (10 * 1024 * 1024))
    assert time.perf_counter() - start < 5


def test_long_scalar_is_refused():
    assert "characters" in _error("a: " + "x" * (MAX_SCALAR_CHARS + 1))
    data, _ = load_yaml("a: " + "x" * MAX_SCALAR_CHARS, F)
    assert len(data["a"]) == MAX_SCALAR_CHARS


@pytest.mark.parametrize("tagged", [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/new:os.system ['touch {marker}']",
    "!!python/name:os.system",
    "!custom 1",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
])
def test_python_and_custom_tags_are_refused(tmp_path, tagged):
    marker = tmp_path / "executed"
    message = _error("a: " + tagged.replace("{marker}", str(marker)))
    assert "tag" in message
    assert not marker.exists()


def test_deep_nesting():
    load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, F)
    assert "nesting" in _error("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert "nesting" in _error("[" * 100_000)
    block = "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 1)) + " " * 70 + "v"
    assert "nesting" in _error(block)


def test_deep_nesting_through_aliases():
    deep = "[" * 40 + "]" * 40
    assert "nesting" in _error(f"a: &a {deep}\nb: [[[[[[[[[[[[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]]]]]]]]]]]")


@pytest.mark.parametrize("text, words", [
    ("a: b: c", "invalid YAML"),
    ("a: [1, 2", "invalid YAML"),
    ("a: 1\n---\nb: 2", "one YAML document"),
    ("? [a, b]\n: 1", "key must be a scalar"),
    ("a: '\x00'", "invalid YAML"),
])
def test_malformed_yaml(text, words):
    assert words in _error(text)


def test_syntax_error_position():
    with pytest.raises(YamlError) as info:
        load_yaml("ok: 1\nbad: [1, 2\nnext: 3\n", F)
    assert info.value.diagnostic.pos.line >= 2


def test_empty_document():
    assert load_yaml("", F)[0] is None
    assert load_yaml("# only a comment\n", F)[0] is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!,'\"\n #?|>%@`<1.~")), max_size=80))
def test_fuzz_only_yaml_errors(text):
    try:
        data, smap = load_yaml(text, F)
    except YamlError as exc:
        assert exc.diagnostic.check == "parse"
        return
    assert _plain_types(data) <= {dict, list, str, int, float, bool, type(None)}
    smap.find(("a", 0, "b"))
