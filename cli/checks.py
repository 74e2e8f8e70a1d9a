"""What each check id means, with a tiny broken example: the one table behind
`opspec prove --help` and the rule descriptions of the SARIF report."""

from __future__ import annotations

import textwrap

#: check id -> (one-line meaning, a tiny spec fragment that breaks it)
CHECK_DOCS: dict[str, tuple[str, str]] = {
    "parse": ("a file or field is not valid YAML or not the expected structure "
              "(unknown key, wrong type)",
              'inputs: {x: {dtpye: T, shape: "[N]"}}   # unknown key `dtpye`'),
    "name": ("a name is undefined, declared twice or reserved, or an op name is malformed",
             'forall: {N: Dim}  inputs: {x: {dtype: T, shape: "[M]"}}   # M undeclared'),
    "kind": ("an expression's kind does not fit its place (a Bool as an axis, ...)",
             'params: {t: {type: bool}}  inputs: {x: {shape: "[t]"}}'),
    "language": ("an expression is outside the expression language, or calls a primitive "
                 "that is not built in",
                 'shape_rules: ["frobnicate(N) > 0"]'),
    "rejected-form": ("shape_rules holds a form with its own field: a shape read, a name "
                      "definition, an `is None` test",
                      'shape_rules: ["C_g == C // groups"]   # write let: {C_g: "C // groups"}'),
    "family-gap": ("no case of a type family covers some discriminant value",
                   'Mat: {params: {t: Bool, R: Dim, C: Dim}, match: t, '
                   'cases: [{when: false, is: "[R, C]"}]}'),
    "family-overlap": ("two cases of a type family cover the same discriminant value",
                       'cases: [{when: true, is: "[R, C]"}, {when: true, is: "[C, R]"}]'),
    "family-cycle": ("type families refer to each other in a cycle",
                     'A: {..., cases: [{when: true, is: "B[t]"}]}  '
                     'B: {..., cases: [{when: true, is: "A[t]"}]}'),
    "unsolvable": ("an index cannot be solved from the tensors passed (e.g. it appears "
                   "only in outputs)",
                   'inputs: {x: {shape: "[M]"}}  outputs: {y: {shape: "[N]"}}'),
    "ambiguous": ("the inputs admit more than one value of an index",
                  'inputs: {x: {shape: "[M + N]"}}   # M and N appear nowhere else'),
    "let-cycle": ("let entries depend on each other in a cycle",
                  'let: {A: "B + 1", B: "A - 1"}'),
    "workload": ("a workload row does not fit the signature or cannot be instantiated",
                 'workloads: [{M: 128, Q: 4}]   # Q is no index or parameter'),
    "symint": ("an expression of a compile-boundary op cannot be evaluated on SymInt",
               'let: {P: "max(N, 64)"}   # max() branches on a concrete int'),
    "effect": ("side-effect declarations disagree (mutated, write_only, buffer, alias)",
               'inputs: {x: {...}}  outputs: {y: {alias: x}}   # x is not mutated'),
    "dead-branch": ("no call can pass on some combination of discriminant values",
                    'shape_rules: ["N > 4", "N < 2"]'),
    "code": ("an implemented op's class disagrees with its spec",
             'status: implemented   # but __init__ does not take the spec\'s params'),
    "unknown": ("the solver could not decide a check within its resource limit, or the "
                "prover crashed on the spec",
                'shape_rules: ["A * A * A + B * B * B == C * C * C"]'),
    "combos-limit": ("more combinations of discriminant values than the limit (256); "
                     "advisory, every one is still checked",
                     'params: {f1: {type: bool}, ..., f9: {type: bool}}   # 512 combinations'),
    "negative-axis": ("an output axis can be negative for a call that passes every check",
                      'outputs: {y: {shape: "[N - 4]"}}   # no rule N >= 4'),
    "divisor": ("a divisor can be <= 0 for a call that passes every other check",
                'params: {g: {type: int}}  let: {C_g: "C // g"}   # no rule g > 0'),
    "dispatch": ("two implementations of a kernel interface serve one call without "
                 "preferred_over, or none serves a call the spec accepts",
                 'gemv: applies "M <= 16", gemm: applies "M >= 8", no preferred_over   '
                 '# M = 8: ambiguous'),
}


def meaning(check: str) -> str:
    return CHECK_DOCS.get(check, ("", ""))[0]


def example(check: str) -> str:
    return CHECK_DOCS.get(check, ("", ""))[1]


def checks_epilog(width: int = 100) -> str:
    """The table of check ids for `--help`: id, meaning, and the broken example below it."""
    pad = 2 + max(len(c) for c in CHECK_DOCS) + 2
    lines = ["checks (every diagnostic names one):"]
    for check, (text, broken) in CHECK_DOCS.items():
        wrapped = textwrap.wrap(text, width - pad) or [""]
        lines.append(f"  {check:<{pad - 4}}  {wrapped[0]}")
        lines.extend(" " * pad + w for w in wrapped[1:])
        lines.append(" " * pad + "e.g. " + broken)
    return "\n".join(lines)
