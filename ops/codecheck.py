"""Code against spec: an implemented op's class must agree with its spec (check id `code`).

For each spec whose op class is importable — a bundled op in `opspec.ops`, or a class the
caller names — the class's `__init__` must take the spec's parameters in order, with the
same defaults and keyword-only markers (plus `target`, and the class's
`injected_parameters`), its `forward` must take the call-time inputs in order (and `out`
for a `buffer: out` output), and `compile_op_names` must be non-empty exactly when the spec
calls for a compile boundary. Specs without an importable class get a note saying the code
checks were skipped, never a silent pass.
"""

from __future__ import annotations

import inspect
from typing import Any

from opspec.schema.diagnostics import Diagnostic, Severity

_MISSING = inspect.Parameter.empty


def bundled_class(name: str) -> type | None:
    import opspec.ops as ops

    if name not in getattr(ops, "__all__", ()):
        return None
    cls = getattr(ops, name, None)
    return cls if isinstance(cls, type) else None


def check_class(cls: type, spec: Any, pos_of=lambda path: None) -> list[Diagnostic]:
    """Diagnostics (check `code`) for every disagreement between `cls` and `spec`."""
    out: list[Diagnostic] = []
    name = spec.name

    def report(path: str, message: str) -> None:
        out.append(Diagnostic("code", f"{cls.__qualname__}: {message}", op=name, path=path,
                              pos=pos_of(path)))

    if cls.__name__ != name:
        report("", f"the class is named {cls.__name__}, the spec {name}")
    init = inspect.signature(cls.__init__)
    params = [p for p in list(init.parameters.values())[1:]
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    allowed_extra = {"target", *getattr(cls, "injected_parameters", ())}
    code_names = [p.name for p in params if p.name not in allowed_extra]
    spec_names = list(spec.params)
    if code_names != spec_names:
        report("signature.params", f"__init__ takes {code_names}, the spec's params are "
               f"{spec_names} (same names, same order)")
    if "target" not in {p.name for p in params}:
        report("signature.params", "__init__ must take the keyword-only `target=None`")
    by_name = {p.name: p for p in params}
    for n, decl in spec.params.items():
        p = by_name.get(n)
        if p is None:
            continue
        if decl.has_default:
            if p.default is _MISSING:
                report(decl.path, f"`{n}` has no default in __init__; the spec's default is "
                       f"{decl.default!r}")
            elif not _same_default(p.default, decl.default):
                report(decl.path, f"`{n}` defaults to {p.default!r} in __init__, to "
                       f"{decl.default!r} in the spec")
        elif p.default is not _MISSING and n not in spec.ctensors:
            report(decl.path, f"`{n}` has the default {p.default!r} in __init__; the spec "
                   "gives none (the parameter is required)")
        if decl.kw_only != (p.kind is p.KEYWORD_ONLY):
            report(decl.path, f"`{n}` is {'keyword-only' if p.kind is p.KEYWORD_ONLY else 'positional'}"
                   f" in __init__ but {'keyword-only' if decl.kw_only else 'positional'} in the spec")
    fwd = inspect.signature(cls.forward)
    fparams = [p for p in list(fwd.parameters.values())[1:]
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    want = list(spec.inputs) + (["out"] if spec.has_out else [])
    got = [p.name for p in fparams][:len(want)]
    if got != want:
        report("signature.inputs", f"forward takes {[p.name for p in fparams]}; its leading "
               f"parameters must be the call-time inputs{' and out' if spec.has_out else ''} "
               f"{want}")
    for n, t in spec.inputs.items():
        p = next((q for q in fparams if q.name == n), None)
        if p is not None and t.optional is not False and p.default is not None:
            report(t.path, f"optional input `{n}` must default to None in forward")
    wants_boundary = bool(spec.inputs) and spec.composition is None
    has_boundary = bool(getattr(cls, "compile_op_names", ()))
    if wants_boundary != has_boundary:
        report("signature.inputs", "compile_op_names is " + ("empty" if not has_boundary else
               f"{list(cls.compile_op_names)}") + "; the spec " +
               ("calls for a compile boundary (a call-time tensor input, no composition)"
                if wants_boundary else "calls for none"))
    return out


def _same_default(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b and type(a) is type(b) if isinstance(a, bool) or isinstance(b, bool) else a == b


def apply_code_checks(report: Any, manifest: Any) -> None:
    """Add the `code` diagnostics to each result of a proof report, and record on each
    whether its code was checked or why not. Only specs of the bundled manifest have op
    classes here (`opspec.ops`); every other manifest's specs are skipped, and say so."""
    from pathlib import Path

    from opspec.manifest import MANIFEST_DIR
    from opspec.schema.elaborate import elaborate, elaborate_adts
    from opspec.solver.prove import verdict_of

    adts = None
    for r in report.specs:
        loaded = manifest.specs.get(r.op)
        bundled = loaded is not None and Path(loaded.file).resolve().is_relative_to(
            Path(MANIFEST_DIR).resolve())
        if not bundled:
            r.code_checks = "skipped: no op class is bound to this manifest"
            continue
        if r.status != "implemented":
            r.code_checks = "skipped: spec-only"
            continue
        cls = bundled_class(r.op)
        if cls is None:
            r.diagnostics.append(Diagnostic("code", f"the spec is implemented but opspec.ops "
                                            f"exports no class {r.op}", op=r.op,
                                            pos=loaded.pos(())))
        else:
            if adts is None:
                adts, _ = elaborate_adts(manifest.adts)
            spec, _ = elaborate(loaded, adts)
            if spec is not None:
                r.diagnostics.extend(check_class(cls, spec, loaded.pos))
                from opspec.ops.dispatch_proof import dispatch_checks
                r.diagnostics.extend(dispatch_checks(cls, spec, loaded.pos(())))
        r.code_checks = "checked"
        r.verdict = verdict_of(r.diagnostics)
