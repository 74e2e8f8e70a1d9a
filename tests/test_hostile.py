"""Hostile spec text through the whole pipeline: load → elaborate → prove.

Specs come from pull requests, so every input here must end in diagnostics: never an
exception, a hang or code execution. Payloads that would run code write a marker file; the
tests assert it never appears. The unit-level limits (the YAML reader's, the parser's) are
tested in tests/test_yaml_source.py and tests/test_parse.py; here they are reached through
`load_paths` and `prove_manifest`, as `opspec prove` reaches them, together with what only
the elaborator and the prover can get wrong (opaque axes, growing families, combination
counts, nonlinear refinements, Z3 budgets, imports).
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from opspec.schema.errors import EvaluationError, SpecError
from opspec.schema.evaluate import evaluate
from opspec.schema.loader import load_paths
from opspec.schema.parse import parse_expr
from opspec.solver.prove import COMBOS_HARD_LIMIT, UNKNOWN, Z3_BUDGET_FACTOR
from opspec.solver.run import ProofReport, prove_manifest

OP = "ToyFwdOp"
#: Language-level refusals: the checks a hostile expression must end in.
REFUSALS = {"parse", "language", "kind", "name", "rejected-form"}


def spec(*signature: str, workloads: str = "- {N: 4, dtype_cases: [{T: float16}], label: w}",
         roofline: str = 'flops: "N"', op: str = OP) -> str:
    body = textwrap.indent("\n".join(textwrap.dedent(p).strip("\n") for p in signature), "    ")
    rows = textwrap.indent(textwrap.dedent(workloads).strip("\n"), "  ")
    return (f"{op}:\n  family: toy\n  status: spec-only\n  signature:\n{body}\n"
            f"  workloads:\n{rows}\n  roofline: {{{roofline}}}\n")


BASE = """\
forall: {N: Dim, T: "DType[float16]"}
params:
  flag: {type: bool, default: false}
inputs:
  x: {dtype: T, shape: "[N]"}
outputs:
  y: {dtype: T, shape: "[N]"}
"""


def prove_text(tmp_path: Path, text: str, types: str | None = None,
               bound: float = 30.0) -> ProofReport:
    """Load the family file `text` (and `types`) strictly and prove it; no crash, no
    diagnostic saying the prover crashed, within `bound` seconds (a hang guard)."""
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "toy.yaml").write_text(text, encoding="utf-8")
    if types is not None:
        (folder / "types.yaml").write_text(types, encoding="utf-8")
    start = time.perf_counter()
    report = prove_manifest(load_paths([folder], strict=True))
    seconds = time.perf_counter() - start
    rendered = [d.render() for d in report.all_diagnostics]  # rendering must not fail either
    assert not [r for r in rendered if "crashed" in r], rendered
    assert seconds < bound, f"{seconds:.1f} s"
    return report


def checks(report: ProofReport) -> set[str]:
    return {d.check for d in report.all_diagnostics if d.is_error}


def refused(report: ProofReport) -> None:
    """An error the language or the kinds raise, and a refuted (or absent) spec."""
    assert checks(report) & REFUSALS, [d.render() for d in report.all_diagnostics]
    assert all(s.verdict == "refuted" for s in report.specs)


# ----------------------------------------------------------------------- code in expressions

#: Each payload tries to reach Python objects or run code; `{m}` is the marker's path.
PAYLOADS = [
    "x.__class__",
    "N.__class__.__mro__",
    "().__class__.__bases__",
    "().__class__.__bases__[0].__subclasses__()",
    "[c for c in ().__class__.__base__.__subclasses__()]",
    "__import__('os').system('touch {m}')",
    "__import__('os')",
    "os.system('touch {m}')",
    "open('{m}', 'w')",
    "open('/etc/passwd')",
    "getattr(x, 'y')",
    "eval('1')",
    "exec('open(\"{m}\", \"w\")')",
    "compile('1', 'f', 'eval')",
    "globals()",
    "vars()",
    "breakpoint()",
    "type(N)",
    "lambda: 1",
    "(lambda: open('{m}', 'w'))()",
    "f'{{open(\"{m}\", \"w\")}}'",
    "(y := open('{m}', 'w'))",
    "N.real",
    "N.__add__(1)",
    "ceil_div.__globals__",
    "present.__code__",
    "bytes.fromhex('00')",
    "__builtins__",
    "sys.modules",
    "'%s' % N",
]

#: Where an expression can stand in a spec: (name, function of the payload → spec text).
PLACES = {
    "rule": lambda p: spec(BASE, f"shape_rules: [{_q(p)}]"),
    "let": lambda p: spec(BASE, f"let: {{L: {_q(p)}}}"),
    "axis": lambda p: spec(BASE.replace('shape: "[N]"}\n', f"shape: {_q('[N, ' + p + ']')}}}\n", 1)),
    "dtype": lambda p: spec(BASE.replace("dtype: T, shape", f"dtype: {_q(p)}, shape", 1)),
    "flops": lambda p: spec(BASE, roofline=f"flops: {_q(p)}"),
}


def _q(text: str) -> str:
    """`text` as a YAML double-quoted scalar."""
    import json

    return json.dumps(text)


def _place_optional(p: str) -> str:
    text = BASE.replace('outputs:', f'  z: {{dtype: T, shape: "[N]", optional: {_q(p)}}}\noutputs:')
    return spec(text)


PLACES["optional"] = _place_optional


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("payload", PAYLOADS)
def test_code_in_expressions_is_refused(tmp_path, payload, place):
    marker = tmp_path / "pwned"
    text = PLACES[place](payload.replace("{m}", str(marker)))
    report = prove_text(tmp_path, text)
    refused(report)
    assert not marker.exists()


def test_places_are_valid_with_a_harmless_expression(tmp_path):
    # The places themselves are well formed: with a plain expression, nothing is refused.
    harmless = {"rule": "N >= 0", "let": "N + 1", "axis": "N", "dtype": "T",
                "optional": "flag", "flops": "N"}
    for place, make in PLACES.items():
        report = prove_text(tmp_path, make(harmless[place]))
        assert not checks(report), (place, [d.render() for d in report.all_diagnostics])


# ------------------------------------------------------------------------------- big integers

def test_huge_literals_are_refused(tmp_path):
    for rule in ["N < " + "1" + "0" * 100, "N < 10 ** 100", "N < 2 ** 64", "N < 1e400"]:
        refused(prove_text(tmp_path, spec(BASE, f"shape_rules: [{_q(rule)}]")))


def test_overflowing_products_stay_bounded(tmp_path):
    # A shape `[M * M * M * M * M]` with M = 10**15 is 10**75: the workload check evaluates
    # it, Z3 reasons about it, nothing overflows or crashes.
    text = spec("""
        forall: {M: Dim, T: "DType[float16]"}
        inputs:
          x: {dtype: T, shape: "[M]"}
        outputs:
          y: {dtype: T, shape: "[M * M * M * M * M]"}
        let:
          H: "M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M"
        shape_rules: ["H * H * H * H * H * H * H * H * H * H * H * H * H * H * H > 5"]
        """, workloads="""
        - {M: 1000000000000000, dtype_cases: [{T: float16}], label: big}
        - {M: 9223372036854775807, dtype_cases: [{T: float16}], label: max}
        """, roofline='flops: "M * M * M * M * M * M * M * M"')
    prove_text(tmp_path, text)


def test_evaluation_caps_big_integers():
    # 20 factors of 2**62 are 1240 bits; 80 are 4960, past the evaluator's 4096-bit cap.
    assert evaluate(parse_expr(" * ".join(["M"] * 20)), {"M": 2 ** 62}) == 2 ** (62 * 20)
    forty = "(" + " * ".join(["M"] * 40) + ")"
    with pytest.raises(EvaluationError, match="bits"):
        evaluate(parse_expr(f"{forty} * {forty}"), {"M": 2 ** 62})


def test_huge_numbers_in_rows_defaults_and_cases(tmp_path):
    big = "1" + "0" * 300
    text = spec(BASE.replace("default: false", f"default: {big}"), f"""
        types:
          F: {{params: {{t: Bool, R: Dim}}, match: t, cases: [{{when: {big}, is: "[R]"}}]}}
        dtype_combos: [{{T: {big}}}]
        """, workloads=f"- {{N: {big}, flag: {big}, dtype_cases: [{{T: {big}}}], label: w}}")
    report = prove_text(tmp_path, text)
    assert checks(report)  # each is refused somewhere, as a diagnostic


def test_constants_squared_through_families_are_not_folded_forever(tmp_path):
    # Each family squares its argument: folding the constant 2 through 30 levels would build
    # 2**(2**30); the fold stops at the evaluator's 4096 bits and the size cap ends it.
    families = "".join(
        f'  F{i}: {{params: {{t: Bool, R: Int}}, match: t, cases: [{{when: false, is: "F{i + 1}[t, R * R]"}}, {{when: true, is: "[R]"}}]}}\n'
        for i in range(30))
    families += '  F30: {params: {t: Bool, R: Int}, match: t, cases: [{when: false, is: "[R]"}, {when: true, is: "[R]"}]}\n'
    text = spec("types:\n" + families, BASE.replace('shape: "[N]"}\n', 'shape: "[N]"}\n  z: {dtype: T, shape: "F0[flag, 2]"}\n', 1))
    report = prove_text(tmp_path, text)
    assert any("nodes" in d.message for d in report.all_diagnostics if d.check == "language")


def test_arguments_doubled_through_families_are_refused(tmp_path):
    # `F_i` applies `F_{i+1}[t, R + R]`: 30 levels would make a 2**30-node shape.
    families = "".join(
        f'  F{i}: {{params: {{t: Bool, R: Dim}}, match: t, cases: [{{when: false, is: "F{i + 1}[t, R + R]"}}, {{when: true, is: "[R]"}}]}}\n'
        for i in range(30))
    families += '  F30: {params: {t: Bool, R: Dim}, match: t, cases: [{when: false, is: "[R]"}, {when: true, is: "[R]"}]}\n'
    text = spec("types:\n" + families, BASE.replace('"[N]"}\noutputs', '"[N]"}\n  z: {dtype: T, shape: "F0[flag, N]"}\noutputs'))
    report = prove_text(tmp_path, text)
    (d,) = [d for d in report.all_diagnostics if d.check == "language"]
    assert "more than 10000 nodes" in d.message and d.pos is not None


# -------------------------------------------------------------------- opaque values as axes

@pytest.mark.parametrize("signature, fragment", [
    # a float parameter, a `Value` index, `inf`, a `Seq` of values, an opaque discriminant
    ('forall: {N: Dim, T: "DType[float16]"}\nparams: {scale: {type: float, default: 1.0}}\n'
     'inputs: {x: {dtype: T, shape: "[N]"}}\noutputs: {y: {dtype: T, shape: "[N, scale]"}}',
     "axis `scale` has kind float"),
    ('forall: {N: Dim, D: Value, T: "DType[float16]"}\n'
     'inputs: {x: {dtype: T, shape: "[N, 3 * D + 3]"}}\noutputs: {y: {dtype: T, shape: "[N]"}}',
     "has kind Value, expected Int"),
    ('forall: {N: Dim, T: "DType[float16]"}\n'
     'inputs: {x: {dtype: T, shape: "[N, inf + 3]"}}\noutputs: {y: {dtype: T, shape: "[N]"}}',
     "axis `inf + 3` has kind float"),
    ('forall: {N: Dim, S: Seq, T: "DType[float16]"}\n'
     'inputs: {x: {dtype: T, shape: "[*S, N]"}}\noutputs: {y: {dtype: T, shape: "[N]"}}',
     "splat `*S` has kind Seq[Value]"),
    ('forall: {N: Dim, T: "DType[float16]"}\n'
     'inputs: {x: {dtype: T, shape: "[N]"}, z: {dtype: T, shape: "[N]", optional: inf}}\n'
     'outputs: {y: {dtype: T, shape: "[N]"}}',
     "cannot be a discriminant"),
    ('forall: {N: Dim, T: "DType[float16]"}\n'
     'inputs: {x: {dtype: T, shape: "[N]"}}\noutputs: {y: {dtype: T, shape: "[N]"}}\n'
     'shape_rules: ["N %.0"]',
     "cannot be a refinement"),
    ('forall: {N: Dim, T: "DType[float16]"}\n'
     'inputs: {x: {dtype: T, shape: "[N]"}}\noutputs: {y: {dtype: T, shape: "[N]"}}\n'
     'let: {L: "(not 0.5)"}',
     "`0.5` has kind float, expected Bool"),
])
def test_opaque_values_are_not_axes(tmp_path, signature, fragment):
    # These passed the kind checks (an opaque value passes any) and crashed the prover.
    report = prove_text(tmp_path, spec(signature))
    assert "kind" in checks(report)
    assert any(fragment in d.message for d in report.all_diagnostics), \
        [d.render() for d in report.all_diagnostics]


def test_presence_read_in_a_cycle(tmp_path):
    # `optional: present(bias)` on bias itself made the fold of presence recurse until
    # RecursionError; so did two tensors reading each other's presence.
    text = spec("""
        forall: {N: Dim, T: "DType[float16]"}
        params: {flag: {type: bool, default: false}}
        inputs:
          x: {dtype: T, shape: "[N]"}
          a: {dtype: T, shape: "[N]", optional: "present(b) and flag"}
          b: {dtype: T, shape: "[N]", optional: "not present(a)"}
          c: {dtype: T, shape: "[N]", optional: "present(c)"}
        outputs:
          y: {dtype: T, shape: "[N]", nullable: "present(y)"}
          z: {dtype: T, shape: "[N]", nullable: "present(c) or flag"}
        """)
    report = prove_text(tmp_path, text)
    cyclic = {d.path for d in report.all_diagnostics if d.check == "kind" and "cycle" in d.message}
    assert cyclic == {"signature.inputs.a.optional", "signature.inputs.b.optional",
                      "signature.inputs.c.optional", "signature.outputs.y.nullable"}


def test_an_opaque_adt_invariant_is_refused(tmp_path):
    types = "adts:\n  Q:\n    sum:\n      g: {fields: {group: Dim}, invariant: \"group % .0\"}\n"
    text = spec("""
        forall: {N: Dim, T: "DType[float16]"}
        params: {q: {type: Q}}
        inputs: {x: {dtype: T, shape: "[N]"}}
        outputs: {y: {dtype: T, shape: "[N]"}}
        """, workloads="- {N: 4, q: {g: {group: 2}}, dtype_cases: [{T: float16}], label: w}")
    report = prove_text(tmp_path, text, types)
    assert any(d.check == "kind" and "invariant" in d.message for d in report.diagnostics)


def test_an_opaque_adt_field_leaves_a_question_undecided(tmp_path):
    types = "adts:\n  Q:\n    sum:\n      g: {fields: {group: Value}}\npython_prefixes: [opspec.]\n"
    text = spec("""
        forall: {N: Dim, T: "DType[float16]"}
        params: {q: {type: Q}}
        inputs: {x: {dtype: T, shape: "[N]"}}
        outputs: {y: {dtype: T, shape: "[ceil_div(N, q.group)]"}}
        """, workloads="- {N: 4, q: {g: {group: 2}}, dtype_cases: [{T: float16}], label: w}")
    report = prove_text(tmp_path, text, types)
    # The encoder cannot express it: an `unknown`, not a crash.
    assert any(d.check == "unknown" and "cannot encode" in d.message
               for d in report.all_diagnostics)


# ------------------------------------------------------------------------------ deep nesting

def test_nesting_at_and_past_the_limit(tmp_path):
    at = "(" * 64 + "N" + ")" * 64
    report = prove_text(tmp_path, spec(BASE, f'shape_rules: ["{at} >= 0"]'))
    assert not checks(report)
    refused(prove_text(tmp_path, spec(BASE, f'shape_rules: ["{"(" + at + ")"} >= 0"]')))
    neg = "-" * 62 + "N"
    prove_text(tmp_path, spec(BASE.replace('"[N]"}\n', f'"[N, {neg} + N]"}}\n', 1)))
    flag = "not " * 60 + "flag"
    prove_text(tmp_path, spec(BASE, f'shape_rules: ["{flag} or N >= 0"]'))


def test_deep_families_and_long_let_chains_are_bounded(tmp_path):
    families = "".join(
        f'  F{i}: {{params: {{t: Bool, R: Dim}}, match: t, cases: [{{when: false, is: "F{i + 1}[t, R]"}}, {{when: true, is: "[R]"}}]}}\n'
        for i in range(60))
    families += '  F60: {params: {t: Bool, R: Dim}, match: t, cases: [{when: false, is: "[R]"}, {when: true, is: "[R]"}]}\n'
    text = spec("types:\n" + families, BASE.replace('"[N]"}\noutputs', '"[N]"}\n  z: {dtype: T, shape: "F0[flag, N]"}\noutputs'))
    assert not checks(prove_text(tmp_path, text))
    lets = "".join(f'  L{i}: "L{i - 1} + L{i - 1}"\n' for i in range(1, 400))
    text = spec(BASE.replace('y: {dtype: T, shape: "[N]"}', 'y: {dtype: T, shape: "[L399]"}'),
                "let:\n  L0: N\n" + lets)
    prove_text(tmp_path, text)


# ------------------------------------------------------------------------------------- YAML

def test_billion_laughs_through_the_loader(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    report = prove_text(tmp_path, "\n".join(lines) + "\n" + spec(BASE), bound=10)
    assert "parse" in checks(report) and not report.specs
    # The same bomb inside one spec's field.
    text = spec(BASE).replace("  status: spec-only", "  status: spec-only\n  ref_api:\n"
                              + textwrap.indent("\n".join(lines), "    "))
    assert "parse" in checks(prove_text(tmp_path, text, bound=10))


def test_ten_megabytes_through_the_loader(tmp_path):
    report = prove_text(tmp_path, spec(BASE) + "# " + "x" * (10 * 1024 * 1024) + "\n", bound=10)
    assert "parse" in checks(report) and not report.specs
    long = "N >= 0" + " + N" * 15_000  # 60 kB: under the YAML scalar limit, over 4096 characters
    report = prove_text(tmp_path, spec(BASE, f'shape_rules: ["{long}"]'), bound=10)
    assert "language" in checks(report)


def test_cyclic_anchor_through_the_loader(tmp_path):
    text = spec(BASE).replace("  status: spec-only", "  status: spec-only\n  extra: &c [1, *c]")
    assert "parse" in checks(prove_text(tmp_path, text))


@pytest.mark.parametrize("tag", [
    "!!python/object/apply:os.system ['touch {m}']",
    "!!python/object/new:os.system ['touch {m}']",
    "!!python/name:os.system",
    "!!python/module:os",
    "!!python/object:opspec.schema.models.OpSpec {}",
])
@pytest.mark.parametrize("where", ["family file", "types file"])
def test_python_tags_are_refused(tmp_path, tag, where):
    marker = tmp_path / "pwned"
    payload = tag.replace("{m}", str(marker))
    if where == "family file":
        report = prove_text(tmp_path, spec(BASE).replace("spec-only", "spec-only\n  ref_api: " + payload))
    else:
        report = prove_text(tmp_path, spec(BASE), types=f"adts: {{}}\npython_prefixes: {payload}\n")
    assert "parse" in checks(report)
    assert not marker.exists()


# --------------------------------------------------------------------------------- imports

EVIL = """\
from pathlib import Path
Path({marker!r}).write_text("imported")
def f(call):
    Path({marker!r}).write_text("called")
    return 0, 0
class Cls:
    pass
"""


def test_prover_imports_nothing_a_spec_names(tmp_path, monkeypatch):
    """ADT `python:` classes and roofline `func:` paths are names only to the prover, even
    when they sit inside `python_prefixes`."""
    marker = tmp_path / "pwned"
    pkg = tmp_path / "lib" / "opspec_evil"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    types = textwrap.dedent("""\
        adts:
          Q:
            sum:
              a: {python: opspec_evil.Cls}
              b: {python: os.system, fields: {k: {type: "'u' | 'v'", python: opspec_evil.f}}}
        python_prefixes: [opspec_evil., os.]
        """)
    text = spec(BASE.replace("flag: {type: bool, default: false}", "q: {type: Q}"),
                workloads="- {N: 4, q: {a: {}}, dtype_cases: [{T: float16}], label: w}",
                roofline="func: opspec_evil.f")
    other = spec(BASE, op="OtherFwdOp", roofline="func: os.system")
    report = prove_text(tmp_path, text + other, types)
    assert {s.verdict for s in report.specs} <= {"proven"}, [d.render() for d in report.all_diagnostics]
    assert not marker.exists() and "opspec_evil" not in sys.modules


@pytest.mark.parametrize("path, prefixes, words", [
    ("os.system", ["opspec."], "outside the manifest's python_prefixes"),
    ("opspec_evil.x", ["opspec."], "outside the manifest's python_prefixes"),
    ("opspec_evil.x", ["opspec"], "outside the manifest's python_prefixes"),
    ("opspec..x", ["opspec."], "public identifiers"),
    ("opspec.", ["opspec."], "public identifiers"),
    ("opspec", ["opspec."], "public identifiers"),
    ("opspec.__init__.x", ["opspec."], "public identifiers"),
    ("opspec.cli.__main__.main", ["opspec."], "public identifiers"),
    ("opspec.ops.roofline.__builtins__", ["opspec."], "public identifiers"),
    ("opspec.x.__class__", ["opspec."], "public identifiers"),
    ("opspec._private.f", ["opspec."], "public identifiers"),
    ("opspec. ops.f", ["opspec."], "public identifiers"),
    ("opspec.class.f", ["opspec."], "public identifiers"),
    ("opspec.nowhere.f", ["opspec."], "cannot import"),
    ("opspec.ops.roofline.nothing", ["opspec."], "is not a function"),
    ("os.system", [], "outside the manifest's python_prefixes"),
    ("os.system", [""], "outside the manifest's python_prefixes"),
])
def test_resolve_func_refuses_without_importing(path, prefixes, words):
    from opspec.ops.roofline import resolve_func

    before = set(sys.modules)
    with pytest.raises(SpecError, match=words):
        resolve_func(path, prefixes)
    new = set(sys.modules) - before
    assert not {m for m in new if "evil" in m or "__main__" in m or m == "opspec.cli.__main__"}


def test_resolve_func_inside_the_prefixes():
    from opspec.ops.roofline import derived_bytes, resolve_func

    assert resolve_func("opspec.ops.roofline.derived_bytes", ["opspec."]) is derived_bytes


# ------------------------------------------------------------------------ sizes and counts

def test_five_thousand_ops_in_one_file(tmp_path):
    # Loading and elaborating is per file and per spec; proving is per spec (independent,
    # each in a fresh Z3 context), so 100 of them stand for the rest. (All 5000 prove in
    # about 35 s on one core: 7 ms each.)
    from opspec.schema.elaborate import elaborate

    one = ('{name}: {{family: toy, status: spec-only, signature: {{forall: {{N: Dim}}, inputs: '
           '{{x: {{dtype: float32, shape: "[N]"}}}}, outputs: {{y: {{dtype: float32, shape: '
           '"[N]"}}}}}}, workloads: [{{N: 1, label: a}}], roofline: {{flops: N}}}}\n')
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "toy.yaml").write_text("".join(one.format(name=f"Op{i}FwdOp") for i in range(5000)))
    start = time.perf_counter()
    manifest = load_paths([folder], strict=True)
    assert len(manifest.specs) == 5000 and not manifest.diagnostics
    for loaded in manifest.specs.values():
        spec_, diags = elaborate(loaded, {})
        assert spec_ is not None and not diags
    report = prove_manifest(manifest, ops=[f"Op{i}FwdOp" for i in range(0, 5000, 50)])
    assert len(report.specs) == 100 and report.ok
    assert time.perf_counter() - start < 120


def test_too_many_declarations_are_refused_before_elaboration(tmp_path):
    # Some passes compare declarations pairwise: 6000 inputs took over two minutes, and a
    # 2 MiB file holds 20,000. Past 1000 entries a field is refused as a whole.
    n = 20_000
    text = spec("forall: {" + ", ".join(f"N{i}: Dim" for i in range(n)) + "}\ninputs:\n"
                + "".join(f'  x{i}: {{dtype: float32, shape: "[N{i}]"}}\n' for i in range(n)),
                workloads="- {label: w}", roofline='flops: "0"')
    report = prove_text(tmp_path, text, bound=60)
    (d,) = [d for d in report.all_diagnostics if d.is_error]
    assert d.check == "language" and "20000 entries" in d.message and d.pos is not None


@pytest.mark.parametrize("what", ["inputs", "lets", "rules", "rows", "enum", "rank"])
def test_many_fields_are_bounded(tmp_path, what):
    n = 1000  # the most a field may hold
    if what == "inputs":
        text = spec("forall: {" + ", ".join(f"N{i}: Dim" for i in range(n)) + "}\ninputs:\n"
                    + "".join(f'  x{i}: {{dtype: float32, shape: "[N{i}]"}}\n' for i in range(n)),
                    workloads="- {label: w}", roofline='flops: "0"')
    elif what == "lets":
        text = spec(BASE, "let:\n  L0: N\n" + "".join(f'  L{i}: "L{i - 1} + 1"\n' for i in range(1, n)))
    elif what == "rules":
        text = spec(BASE, "shape_rules:\n" + "".join(f'- "N * N >= {i} - {n}"\n' for i in range(n)))
    elif what == "rows":
        text = spec(BASE, workloads="".join(f"- {{N: {i}, dtype_cases: [{{T: float16}}], label: r{i}}}\n"
                                            for i in range(5000)))
    elif what == "enum":
        lits = " | ".join(f"'v{i}'" for i in range(3000))
        text = spec(BASE.replace("flag: {type: bool, default: false}",
                                 f'mode: {{type: "{lits}", default: v0}}'))
    else:
        text = spec("forall: {" + ", ".join(f"A{i}: Dim" for i in range(n)) + "}\ninputs:\n"
                    '  x: {dtype: float32, shape: "[' + ", ".join(f"A{i}" for i in range(n)) + ']"}\n',
                    workloads="- {label: w}", roofline='flops: "0"')
    prove_text(tmp_path, text, bound=60)


def test_combinations_past_the_hard_cap(tmp_path):
    # 40 optional inputs are 2**40 combinations: only the first COMBOS_HARD_LIMIT are checked,
    # and the spec says so (it is never `proven`).
    optional = "".join(f'  o{i}: {{dtype: T, shape: "[N]", optional: true}}\n' for i in range(40))
    text = spec(BASE.replace('outputs:', optional.rstrip("\n") + "\noutputs:"))
    report = prove_text(tmp_path, text, bound=120)
    (s,) = report.specs
    assert s.combinations == COMBOS_HARD_LIMIT and s.verdict != "proven"
    assert any(d.check == "unknown" and "hard cap" in d.message for d in s.diagnostics)


def test_maybe_enums_do_not_spin_on_absent_payloads(tmp_path):
    # Absent Maybe payloads were enumerated and dropped one by one (500 * 500 * 124**2 tuples
    # before the cap could act): now an absent payload is one value.
    lits = lambda k: " | ".join(f"'v{i}'" for i in range(k))  # noqa: E731
    params = "".join(f'  {n}: {{type: "{lits(k)} | None", default: null}}\n'
                     for n, k in [("a", 500), ("b", 500), ("c", 62), ("d", 62)])
    text = spec(BASE.replace("  flag: {type: bool, default: false}\n", params))
    report = prove_text(tmp_path, text, bound=60)
    assert report.specs[0].combinations == COMBOS_HARD_LIMIT


def test_adt_with_too_many_field_values(tmp_path):
    fields = ", ".join(f"f{i}: Bool" for i in range(26))
    types = f"adts:\n  Big:\n    sum:\n      a: {{fields: {{{fields}}}}}\n      b: {{}}\n"
    text = spec(BASE.replace("flag: {type: bool, default: false}", "big: {type: Big}"),
                workloads="- {N: 4, big: {b: {}}, dtype_cases: [{T: float16}], label: w}")
    report = prove_text(tmp_path, text, types, bound=60)
    assert any("67108864 combinations" in d.message for d in report.diagnostics)


def test_twelve_flags_enumerate_every_combination(tmp_path):
    # 2**12 combinations that fold to the same declarations: each is planned, and Z3 is
    # asked once (the questions are cached by what they depend on).
    flags = "".join(f"  f{i}: {{type: bool, default: false}}\n" for i in range(12))
    text = spec(BASE.replace("  flag: {type: bool, default: false}\n", flags))
    report = prove_text(tmp_path, text, bound=120)
    (s,) = report.specs
    assert s.combinations == 4096 and s.verdict == "proven"


def test_nonlinear_refinement_is_unknown_in_bounded_time(tmp_path):
    text = spec("""
        forall: {A: Dim, B: Dim, C: Dim, T: "DType[float16]"}
        inputs: {x: {dtype: T, shape: "[A, B, C]"}}
        outputs: {y: {dtype: T, shape: "[A * B - C * C * C]"}}
        shape_rules: ["A * A * A + B * B * B == C * C * C", "A >= 1", "B >= 1"]
        """, workloads="- {A: 1, B: 1, C: 1, dtype_cases: [{T: float16}], label: w}",
        roofline='flops: "A"')
    (s,) = prove_text(tmp_path, text).specs
    assert s.verdict in (UNKNOWN, "refuted")
    assert any(d.check == "unknown" for d in s.diagnostics)


def test_nonlinear_questions_on_4096_combinations_spend_the_budget(tmp_path):
    # Every combination asks Z3 a new nonlinear question (each spends a whole rlimit): the
    # spec's Z3 budget ends them after about Z3_BUDGET_FACTOR questions, with an advisory.
    flags = "".join(f"  b{i}: {{type: bool, default: false}}\n" for i in range(12))
    offset = " + ".join(f"({1 << i} if b{i} else 0)" for i in range(12))
    signature = ('forall: {A: Dim, B: Dim, C: Dim, T: "DType[float16]"}\n'
                 f"params:\n{flags}"
                 'inputs: {x: {dtype: T, shape: "[A, B, C]"}}\n'
                 'outputs: {y: {dtype: T, shape: "[A]"}}\n'
                 f'shape_rules: ["A >= 1 and B >= 1", "A * A * A + B * B * B == C * C * C + {offset}"]')
    text = spec(signature, workloads="- {A: 1, B: 1, C: 1, dtype_cases: [{T: float16}], label: w}",
                roofline='flops: "A"')
    (s,) = prove_text(tmp_path, text, bound=180).specs
    (d,) = [d for d in s.diagnostics if "Z3 budget" in d.message and "questions" in d.message]
    assert d.check == "unknown" and f"{Z3_BUDGET_FACTOR} x rlimit" in d.message
    assert s.verdict != "proven"


def test_whole_spec_passes_share_the_z3_budget(tmp_path, monkeypatch):
    # An output that aliases a written input with a different (nonlinear) shape makes the
    # effect check ask Z3 on every branch: those questions draw on the spec's budget too
    # (4096 branches of them took over 20 minutes). A small budget shows it quickly.
    import opspec.solver.queries as queries

    monkeypatch.setattr(queries, "BUDGET_FACTOR", 4)
    flags = "".join(f"  b{i}: {{type: bool, default: false}}\n" for i in range(6))
    offset = " + ".join(f"({1 << i} if b{i} else 0)" for i in range(6))
    signature = ('forall: {N: Dim, A: Dim, B: Dim, C: Dim, T: "DType[float16]"}\n'
                 f"params:\n{flags}"
                 'inputs: {x: {dtype: T, shape: "[N]", mutated: true}, z: {dtype: T, shape: "[A, B, C]"}}\n'
                 f'outputs: {{y: {{dtype: T, shape: "[N + A * A * A + B * B * B - C * C * C - ({offset})]", alias: x}}}}\n'
                 f'shape_rules: ["A >= 1 and B >= 1", "A * A * A + B * B * B >= C * C * C + ({offset})"]')
    text = spec(signature, workloads="- {N: 3, A: 3, B: 4, C: 1, dtype_cases: [{T: float16}], label: w}")
    (s,) = prove_text(tmp_path, text, bound=60).specs
    assert any(d.path == "signature.outputs.y.alias" and queries.BUDGET_SPENT in d.message
               for d in s.diagnostics), [d.render() for d in s.diagnostics]
    assert s.verdict != "proven"


def test_generated_workload_elements_are_budgeted(tmp_path, monkeypatch):
    # Each generator call has its own limit (2**24 elements), but rows are unbounded in number:
    # 5000 rows of `full((N, N), 1)` with N = 4096 were hours of list building. Rows past the
    # spec's budget end in diagnostics (a small budget shows it quickly).
    import opspec.solver.prove as prove

    monkeypatch.setattr(prove, "WORKLOAD_ELEMENTS", 1 << 20)
    rows = "".join(f"- {{N: 512, dtype_cases: [{{T: float16}}], label: r{i}}}\n" for i in range(40))
    text = spec(BASE.replace('outputs:', '  m: {dtype: int32, shape: "[N, N]", values: "full((N, N), 1)"}\noutputs:'),
                workloads=rows)
    (s,) = prove_text(tmp_path, text, bound=60).specs
    spent = [d for d in s.diagnostics if "generate more than" in d.message]
    assert len(spent) == 40 - 4 and all(d.check == "workload" for d in spent)


def test_mixed_key_types_do_not_break_hashing(tmp_path):
    # `1:` beside `x:` (and a `null` key) made the proof cache's key and spec_hash raise.
    text = spec(BASE).replace("  status: spec-only", "  status: spec-only\n  1: one\n  null: two")
    report = prove_text(tmp_path, text)
    assert "parse" in checks(report)
    text = spec(BASE.replace("inputs:\n", "inputs:\n  7: {dtype: T, shape: \"[N]\"}\n", 1))
    assert "parse" in checks(prove_text(tmp_path, text))


# ------------------------------------------------------------------ found by benchmarks/fuzz.py

@pytest.mark.parametrize("let", ["0.5 // inf", "N % 1.5", "ceil_div(N, 0.5)"])
def test_a_float_divisor_is_not_asked_about_its_sign(tmp_path, let):
    """Seed 22069 of the 10^5 fuzz run: the let `Q: "(0.5 // inf)"` reached the divisor
    check, whose `divisor <= 0` needs a number (TypeError on the opaque value): the prover
    crashed. A divisor that may be a float is now left to the evaluator."""
    report = prove_text(tmp_path, spec(BASE + f'let: {{Q: "{let}"}}\n'))
    assert not [d for d in report.all_diagnostics if d.check == "divisor"]
    assert checks(report) <= REFUSALS


@pytest.mark.parametrize("rule", ["(present(x) not in 0.5)", "flag in 2.5", "N in 1.5"])
def test_membership_in_a_float_is_refused(tmp_path, rule):
    """Seed 11012779 of a 3 x 10^4 fuzz run: the rule `(present(y_alias) not in 0.5)` passed
    the kind check (a float is an opaque value, which let any membership through) and the
    constant folder's `a not in 0.5` raised TypeError: the prover crashed. A float after
    `in` / `not in` is now a kind error naming the rule."""
    report = prove_text(tmp_path, spec(BASE + f'shape_rules: ["{rule}"]\n'))
    (d,) = [d for d in report.all_diagnostics if d.is_error]
    assert d.check == "kind" and d.path == "signature.shape_rules.0", d.render()
    assert "has kind float, expected a sequence after" in d.message
    assert not [d for d in report.all_diagnostics if "crashed" in d.message]


@pytest.mark.parametrize("rule, kinds", [
    ("0.5 < (1, 2)", "float with Seq[Dim; 2]"), ("(N, N) >= 2.5", "Seq[Dim; 2] with float"),
    ("'a' < 0.5", "'a' with float"), ("T < 0.5", "DType[float16] with float")])
def test_ordering_a_float_against_a_non_number_is_refused(tmp_path, rule, kinds):
    # Found beside the seed above: such a rule passed the kind check (a float is opaque)
    # and ended as a workload row that "does not evaluate", or, for a string, crashed the
    # constant folder (`'a' < 0.5`: TypeError); it is a kind error.
    report = prove_text(tmp_path, spec(BASE + f'shape_rules: ["{rule}"]\n'))
    (d,) = [d for d in report.all_diagnostics if d.is_error]
    assert d.check == "kind" and d.path == "signature.shape_rules.0", d.render()
    assert d.message.endswith(f"compares {kinds}"), d.message


@pytest.mark.parametrize("rule, where", [
    ("len(0.5) == 1", "argument 1 of len"), ("sum(0.5) == 1", "argument 1 of sum"),
    ("min(0.5) == 1", "argument 1 of min"), ("all(x > 0 for x in 0.5)", "expected a sequence"),
    ("(0.5)[0] == 1", "expected a sequence to subscript"),
    ("(N, N)[0.5] == 1", "expected Int (an index)"),
    ("(N, N)[0:0.5] == (N,)", "expected Int (an index)")])
def test_a_float_where_a_sequence_is_needed_is_refused(tmp_path, rule, where):
    # A float is opaque to the kinds, but never a sequence: these ended as workload rows
    # that "do not evaluate"; now each is a kind error naming the rule and the argument.
    report = prove_text(tmp_path, spec(BASE + f'shape_rules: ["{rule}"]\n'))
    (d,) = [d for d in report.all_diagnostics if d.is_error]
    assert d.check == "kind" and d.path == "signature.shape_rules.0", d.render()
    assert "`0.5` has kind float" in d.message and where in d.message


def test_the_folder_leaves_membership_in_a_non_sequence_to_the_encoder():
    # Behind the kind check: constants fold where the right side is a sequence, and a
    # membership in anything else stays a comparison (the encoder says it cannot decide it).
    from opspec.schema.expr import Compare, Const
    from opspec.schema.parse import parse_expr
    from opspec.solver.fold import Folder

    fold = Folder(spec=None, combo={}).expr
    assert fold(parse_expr("1 in (1, 2)")) == Const(True, fold(parse_expr("1 in (1, 2)")).col)
    assert fold(parse_expr("3 not in (1, 2)")).value is True
    kept = fold(parse_expr("1 not in 0.5"))
    assert isinstance(kept, Compare) and kept.ops == ("not in",)
    kept = fold(parse_expr("'a' < 0.5"))          # constants that do not compare
    assert isinstance(kept, Compare) and kept.ops == ("<",)


def test_a_literal_dtype_beside_an_unsolvable_index_is_refuted(tmp_path):
    """A literal dtype (`dtype: int64`) reached the encoder as a bare name it did not know:
    the question whether `H` in `[T, H * d]` is determined was left undecided (`unknown`,
    "int64 is not a known name") instead of refuted with two solutions."""
    report = prove_text(tmp_path, spec('''
        forall: {T: Dim, H: Dim}
        params:
          d: {type: int}
        inputs:
          ids: {dtype: int64, shape: "[T]"}
          x: {dtype: float32, shape: "[T, H * d]"}
        outputs:
          y: {dtype: float32, shape: "[T, H]"}
        ''', workloads="- {T: 4, H: 2, d: 3, label: w}", roofline='flops: "T"'))
    (d,) = [d for d in report.all_diagnostics if d.is_error]
    assert d.check == "ambiguous" and d.path == "signature.inputs.x.shape"
    assert d.counterexample["H (solution 1)"] != d.counterexample["H (solution 2)"]
    assert not [d for d in report.all_diagnostics if "not a known name" in d.message]
