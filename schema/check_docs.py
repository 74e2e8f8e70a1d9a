"""What each check id means, with a tiny broken example: the one table behind
`opspec prove --help`, `opspec diff --help` and the rule descriptions of the SARIF reports.
It covers every id of `opspec.schema.diagnostics.CHECK_IDS`: the ids of `opspec prove`
(`PROVE_CHECK_IDS`) and the finding ids of `opspec diff` (`DIFF_CHECK_IDS`, whose broken
examples show an OLD fragment and the NEW one that breaks it)."""

from __future__ import annotations

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
    "code": ("an implemented op's class disagrees with its spec (__init__, forward, "
             "compile_op_names, composition stages, ref_api, the family module's __all__)",
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
    # -- `opspec diff` findings: OLD -> NEW ----------------------------------------------
    "removed-op": ("an op of OLD is not in NEW",
                   'OLD: {GemmFwdOp: ..., RmsNormFwdOp: ...}  NEW: {GemmFwdOp: ...}'),
    "param-removed": ("a construction parameter of OLD is not in NEW (a call passing it by "
                      "keyword breaks)",
                      'OLD params: {eps: {type: float, default: 1e-6}}  NEW params: {}'),
    "param-renamed": ("a construction parameter was renamed (a call passing it by keyword "
                      "breaks)",
                      'OLD params: {eps: {type: float}}  NEW params: {epsilon: {type: float}}'),
    "param-moved": ("a positional construction parameter moved or became keyword-only (a "
                    "call by position binds another parameter)",
                    'OLD params: {a: ..., b: ...}  NEW params: {b: ..., a: ...}'),
    "param-required": ("a construction parameter is new without a default, or lost its "
                       "default (a call that omits it breaks)",
                       'OLD params: {}  NEW params: {groups: {type: int}}'),
    "param-default": ("a parameter's default changed (a call that omits it gets another "
                      "value)",
                      'OLD trans_b: {type: bool, default: false}  NEW ... default: true}'),
    "param-type": ("a parameter's type accepts fewer values (an enum literal, a dtype, a "
                   "constructor or None removed)",
                   'OLD mode: {type: "\'a\' | \'b\'"}  NEW mode: {type: "\'a\'"}'),
    "input-removed": ("a call-time input of OLD is not in NEW",
                      'OLD inputs: {x: ..., bias: ...}  NEW inputs: {x: ...}'),
    "input-renamed": ("a call-time input was renamed (a call passing it by keyword breaks)",
                      'OLD inputs: {x: ...}  NEW inputs: {input: ...}'),
    "input-moved": ("a call-time input moved (a call by position binds another input), or "
                    "moved between the construction and the forward call",
                    'OLD inputs: {a: ..., b: ...}  NEW inputs: {b: ..., a: ...}'),
    "input-required": ("NEW requires a tensor that OLD's call does not pass (a new required "
                       "input, an optional input made required)",
                       'OLD bias: {..., optional: true}  NEW bias: {...}'),
    "input-rejected": ("NEW refuses a tensor that OLD's call passes",
                       'OLD bias: {..., optional: true}  NEW bias: {..., optional: fused}'),
    "input-placement": ("a tensor's placement was tightened (`device: cpu`, `contiguous: "
                        "true`)",
                        'OLD x: {dtype: T, shape: "[N]"}  NEW x: {..., contiguous: true}'),
    "output-changed": ("the outputs were renamed, added, removed, reordered or made None on "
                       "a call, or `out=` was removed",
                       'OLD outputs: {y: ...}  NEW outputs: {out: ...}'),
    "rejected": ("a NEW declaration rejects a call that OLD accepts",
                 'OLD shape_rules: ["N > 0"]  NEW shape_rules: ["N % 8 == 0"]'),
    "output-type": ("for the same call, an output has another shape or dtype under NEW",
                    'OLD y: {dtype: T, shape: "[M, N]"}  NEW y: {dtype: float32, ...}'),
    "broken-spec": ("a spec does not load or elaborate, so the op cannot be compared",
                    'NEW inputs: {x: {dtype: T, shape: "[M]"}}   # M undeclared'),
    "undecided": ("the solver could not decide a question within its resource limit, or "
                  "the encoding does not cover a declaration",
                  'NEW shape_rules: ["A * A * A + B * B * B != C * C * C"]'),
}


def meaning(check: str) -> str:
    return CHECK_DOCS.get(check, ("", ""))[0]


def example(check: str) -> str:
    return CHECK_DOCS.get(check, ("", ""))[1]
