"""`opspec explain`: one spec in mathematical form, then its proven plan.

    GemmFwdOp(trans_a, trans_b : Bool) : ∀ (M N K : Dim) (T : DType[bfloat16 | float16]).
        Tensor[T, Mat[trans_a, M, K]] → Tensor[T, Mat[trans_b, K, N]] → Tensor[T, [M, N]]
    Mat[t: Bool, R: Dim, C: Dim] = match t { false → [R, C]; true → [C, R] }
"""

from __future__ import annotations

from typing import Any, Iterable

from opspec.schema.elaborate import ElaboratedSpec, FamilyDecl, TensorDecl
from opspec.schema.expr import Expr
from opspec.schema.printer import print_expr, print_shape


def explain_extras(op_name: str) -> list[str]:
    """The generated code of a bundled op class, when the runtime can be imported."""
    try:
        import opspec.ops as ops
    except ImportError:  # the prover alone runs without torch
        return []
    cls = getattr(ops, op_name, None)
    if cls is None or not hasattr(cls, "generated_source"):
        return []
    lines = ["", "generated code:"]
    lines += ["    " + line if line else "" for line in cls.generated_source().splitlines()]
    if cls.compile_op_names:
        lines += ["", "compile boundary: " + ", ".join(cls.compile_op_names)]
    return lines


def _groups(items: Iterable[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """Consecutive names of the same kind, grouped: [(["M", "N"], "Dim"), (["T"], ...)]."""
    out: list[tuple[list[str], str]] = []
    for name, kind in items:
        if out and out[-1][1] == kind:
            out[-1][0].append(name)
        else:
            out.append(([name], kind))
    return out


def _flag(v: Expr | bool) -> str | None:
    """None when the flag is off, "" when always on, else the condition's text."""
    if v is False:
        return None
    return "" if v is True else print_expr(v)


def tensor_type(t: TensorDecl) -> str:
    ty = f"Tensor[{print_expr(t.dtype)}, {print_shape(t.shape)}]"
    return ty if _flag(t.optional) is None else f"Maybe[{ty}]"


def signature(spec: ElaboratedSpec) -> str:
    params = [(n, str(p.kind)) for n, p in spec.params.items()]
    params += [(n, tensor_type(t)) for n, t in spec.ctensors.items()]
    head = spec.name
    if params:
        head += "(" + "; ".join(f"{', '.join(ns)} : {k}" for ns, k in _groups(params)) + ")"
    binders = " ".join(f"({' '.join(ns)} : {k})"
                       for ns, k in _groups((n, str(k)) for n, k in spec.forall.items()))
    outs = [tensor_type(t) for t in spec.outputs.values()]
    result = outs[0] if len(outs) == 1 else "(" + " × ".join(outs) + ")"
    arrows = " → ".join([tensor_type(t) for t in spec.inputs.values()] + [result])
    return f"{head} : " + (f"∀ {binders}. " if binders else "") + arrows


def family(fam: FamilyDecl) -> str:
    params = ", ".join(f"{n}: {k}" for n, k in fam.params)
    many = len(fam.match) > 1
    scrutinee = "(" + ", ".join(fam.match) + ")" if many else fam.match[0]
    cases = []
    for c in fam.cases:
        pats = [p.describe() for p in c.when]
        pat = "(" + ", ".join(pats) + ")" if many else pats[0]
        cases.append(f"{pat} → {print_shape(c.shape)}")
    return f"{fam.name}[{params}] = match {scrutinee} {{ {'; '.join(cases)} }}"


def effects(spec: ElaboratedSpec) -> list[str]:
    out = []
    for n, t in spec.tensors.items():
        if (cond := _flag(t.optional)) is not None:
            out.append(f"{n} optional" + (f" when {cond}" if cond else ""))
        if (cond := _flag(t.nullable)) is not None:
            out.append(f"{n} may be None" + (f" when {cond}" if cond else ""))
        if (cond := _flag(t.mutated)) is not None:
            out.append(f"{n} mutated" + (f" when {cond}" if cond else "")
                       + (" (write-only)" if t.write_only else ""))
        if t.alias:
            out.append(f"{n} aliases {t.alias}")
        if t.buffer:
            out.append(f"{n} may be passed as `{t.buffer}`")
        if t.device:
            out.append(f"{n} on {t.device}")
        if t.contiguous:
            out.append(f"{n} contiguous")
    return out


def describe_spec(spec: ElaboratedSpec) -> list[str]:
    lines = [signature(spec)]
    lines.extend("  " + family(f) for f in spec.families.values())
    lines.extend(f"  let {n} : {d.kind} = {print_expr(d.expr)}" for n, d in spec.lets.items())
    lines.extend(f"  where {print_expr(r.expr)}" + ("    [domain]" if r.is_domain else "")
                 for r in spec.rules)
    if spec.dtype_combos:
        lines.append("  dtype combos: " + "; ".join(
            ", ".join(f"{k}={v}" for k, v in row.items()) for row in spec.dtype_combos))
    lines.extend(f"  effect: {e}" for e in effects(spec))
    return lines


def explain_lines(op: str, spec: ElaboratedSpec | None, result: Any,
                  diagnostic_text: list[str]) -> list[str]:
    """The whole `explain` output: signature, diagnostics, plan, extras."""
    from opspec.solver.plan import format_plan

    lines: list[str] = []
    if spec is not None:
        lines += describe_spec(spec) + [""]
    if diagnostic_text:
        lines += diagnostic_text + [""]
    plan = getattr(result, "plan", None)
    lines.append(format_plan(plan) if plan is not None else "no plan (the spec did not elaborate)")
    extras = explain_extras(op)
    if extras:
        lines += [""] + extras
    return lines
