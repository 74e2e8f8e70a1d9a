"""Code against spec: an implemented op's class must agree with its spec (check id `code`).

For each spec whose op class is importable — a bundled op in `opspec.ops`, or a class the
caller names — the class's `__init__` must take the spec's parameters in order, with the
same defaults and keyword-only markers (plus `target`, and the class's
`injected_parameters`), its `forward` must take the call-time inputs in order (and `out`
for a `buffer: out` output), `compile_op_names` must be non-empty exactly when the spec
calls for a compile boundary, and the `composition` stages must agree with the class's
`delegate_types` (`op:` stages, in order, each to a class of the named spec) and
`kernel_types` (`kernel:` stages). For the bundled manifest, an implemented spec's
`ref_api` must name an attribute that exists when its module can be imported here (a module
that is not installed skips the check, and the report says so), and the family module
`opspec.ops.<family>` must export in its `__all__` exactly the implemented specs of that
family. Specs without an importable class get a note saying the code checks were skipped,
never a silent pass.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Mapping, Sequence

from opspec.schema.diagnostics import Diagnostic, Pos

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
    out.extend(check_composition(cls, spec, pos_of))
    return out


def _type_name(t: Any) -> str:
    return t.__name__ if isinstance(t, type) else repr(t)


def check_composition(cls: type, spec: Any, pos_of=lambda path: None) -> list[Diagnostic]:
    """`composition` against the class's `delegate_types` and `kernel_types` (check `code`).

    Every `op:` stage names a key of `delegate_types` that maps to the class of the spec the
    stage names, and every key of `delegate_types` is an `op:` stage, in the same order;
    every `kernel:` stage names a key of `kernel_types`, the kernels in `kernel_types` order.
    A class with `delegate_types` whose spec has no composition is an error too."""
    out: list[Diagnostic] = []
    where = cls.__qualname__

    def report(path: str, message: str, values: dict[str, Any]) -> None:
        out.append(Diagnostic("code", f"{where}: {message}", op=spec.name, path=path,
                              pos=pos_of(path), counterexample={"class": where, **values}))

    tables = {}
    for attr in ("delegate_types", "kernel_types"):
        value = getattr(cls, attr, None) or {}
        if not isinstance(value, Mapping):
            report("composition", f"{attr} is a {type(value).__name__}, not a mapping of "
                   "names to classes", {attr: repr(value)})
            value = {}
        tables[attr] = dict(value)
    delegates, kernels = tables["delegate_types"], tables["kernel_types"]
    comp = spec.composition
    if comp is None:
        if delegates:
            report("composition", f"delegate_types declares the stages {list(delegates)}, "
                   "but the spec has no composition: a class holds sub-ops only for the "
                   "`op:` stages of its spec's composition",
                   {"delegate_types": list(delegates), "stages": []})
        return out
    stages = list(enumerate(comp.stages))
    op_stages = [(i, s) for i, s in stages if s.op is not None]
    kernel_stages = [(i, s) for i, s in stages if s.kernel is not None]
    by_name = {s.name: (i, s) for i, s in stages}
    declared = {n: _type_name(t) for n, t in delegates.items()}
    for i, s in op_stages:
        path = f"composition.stages.{i}"
        if s.name not in delegates:
            report(path, f"stage `{s.name}` runs {s.op}, but delegate_types has no key "
                   f"`{s.name}` (it declares {list(delegates)})",
                   {"stage": s.name, "stage op": s.op, "delegate_types": declared})
            continue
        got = declared[s.name]
        if got != s.op:
            report(path, f"stage `{s.name}` runs {s.op}, but delegate_types maps "
                   f"`{s.name}` to {got}",
                   {"stage": s.name, "stage op": s.op, "delegate type": got})
    op_names = [s.name for _, s in op_stages]
    for n, t in delegates.items():
        if n in op_names:
            continue
        if n in by_name:  # a kernel stage
            i, s = by_name[n]
            report(f"composition.stages.{i}", f"delegate_types declares `{n}` "
                   f"({declared[n]}), but stage `{n}` runs the kernel `{s.kernel}`, not an op",
                   {"stage": n, "stage kernel": s.kernel, "delegate type": declared[n]})
        else:
            report("composition.stages", f"delegate_types declares `{n}` ({declared[n]}), "
                   f"which no stage of the composition names (its `op:` stages are "
                   f"{op_names})",
                   {"delegate": n, "delegate type": declared[n], "op stages": op_names})
    in_code = [n for n in delegates if n in op_names]
    in_spec = list(dict.fromkeys(n for n in op_names if n in delegates))
    if in_code != in_spec:
        report("composition.stages", f"delegate_types lists the stages in the order "
               f"{in_code}, but the composition runs them in the order {in_spec} "
               "(delegate_types follows the stage order)",
               {"delegate_types": in_code, "op stages": in_spec})
    used: list[str] = []
    for i, s in kernel_stages:
        if s.kernel not in kernels:
            report(f"composition.stages.{i}", f"stage `{s.name}` runs the kernel "
                   f"`{s.kernel}`, but kernel_types has no key `{s.kernel}` (it declares "
                   f"{list(kernels)})",
                   {"stage": s.name, "stage kernel": s.kernel, "kernel_types": list(kernels)})
        elif s.kernel not in used:
            used.append(s.kernel)
    in_code = [k for k in kernels if k in used]
    if in_code != used:
        report("composition.stages", f"kernel_types lists the kernels of the `kernel:` "
               f"stages in the order {in_code}, but the composition uses them in the order "
               f"{used} (kernel_types follows the stage order)",
               {"kernel_types": in_code, "kernel stages": used})
    return out


def _same_default(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b and type(a) is type(b) if isinstance(a, bool) or isinstance(b, bool) else a == b


def check_ref_api(name: str, ref_api: str | None, pos_of=lambda path: None,
                  import_module=None, *, prefixes: Sequence[str] = ()
                  ) -> tuple[list[Diagnostic], str | None]:
    """`ref_api` against what is installed here (check `code`): (diagnostics, note).

    `ref_api` is a dotted name, `module.attribute...`. Only a name under one of `prefixes`
    (the manifest's `ref_api_prefixes`) is imported and looked up: importing runs a
    module's code, and spec text chooses no module outside what the manifest allows;
    another name is not checked, and the note says so. When its top-level module is not
    installed, or a module on the way cannot be imported here, nothing is checked and the
    note says why; otherwise every part must exist (a submodule is imported when it is not
    yet an attribute), and the first missing one is an error. `"none"` (no reference API)
    is not checked. The name is only looked up, never evaluated."""
    import importlib
    import importlib.util

    imp = import_module or importlib.import_module
    if ref_api is None or ref_api.strip() == "none":
        return [], None
    parts = ref_api.split(".")

    def error(message: str, values: dict[str, Any]) -> tuple[list[Diagnostic], None]:
        return [Diagnostic("code", message, op=name, path="ref_api", pos=pos_of("ref_api"),
                           counterexample={"ref_api": ref_api, **values})], None

    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        return error(f"ref_api `{ref_api}` is not a fully qualified name (`module.attribute`, "
                     "each part a Python identifier)", {})
    if not any(ref_api.startswith(p) for p in prefixes):
        return [], (f"ref_api {ref_api} not checked: it is under none of the manifest's "
                    f"ref_api_prefixes {list(prefixes)}")
    top = parts[0]
    try:
        installed = (importlib.util.find_spec(top) is not None if import_module is None
                     else True)
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return [], f"ref_api {ref_api} not checked: module {top} is not installed here"
    try:
        obj: Any = imp(top)
    except ModuleNotFoundError as exc:
        if exc.name == top:
            return [], f"ref_api {ref_api} not checked: module {top} is not installed here"
        return [], f"ref_api {ref_api} not checked: module {top} cannot be imported here ({exc})"
    except Exception as exc:  # noqa: BLE001 - a module that fails to import is skipped
        return [], (f"ref_api {ref_api} not checked: module {top} cannot be imported here "
                    f"({type(exc).__name__}: {exc})")
    for k in range(1, len(parts)):
        owner, part = ".".join(parts[:k]), parts[k]
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        except Exception as exc:  # noqa: BLE001 - a property that raises: not decidable here
            return [], (f"ref_api {ref_api} not checked: reading {part} of {owner} raised "
                        f"{type(exc).__name__}: {exc}")
        if inspect.ismodule(obj) and hasattr(obj, "__path__"):  # a package: maybe a submodule
            sub = f"{owner}.{part}"
            try:
                obj = imp(sub)
                continue
            except ModuleNotFoundError as exc:
                if exc.name != sub:
                    return [], (f"ref_api {ref_api} not checked: module {sub} cannot be "
                                f"imported here ({exc})")
            except Exception as exc:  # noqa: BLE001
                return [], (f"ref_api {ref_api} not checked: module {sub} cannot be imported "
                            f"here ({type(exc).__name__}: {exc})")
        kind = "module" if inspect.ismodule(obj) else type(obj).__name__
        return error(f"ref_api `{ref_api}` names no attribute: {kind} {owner} has no "
                     f"attribute `{part}`", {"found": owner, "missing": part})
    return [], None


def _class_pos(obj: Any) -> Pos | None:
    try:
        file = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return None
    return Pos(file, max(line, 1), 1) if file else None


def _all_pos(module: Any) -> Pos | None:
    file = getattr(module, "__file__", None)
    if not file:
        return None
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return Pos(file, 1, 1)
    for n, text in enumerate(lines, 1):
        if text.startswith("__all__"):
            return Pos(file, n, 1)
    return Pos(file, 1, 1)


def family_module_name(family: str) -> str:
    """The public module of a family of the bundled manifest."""
    return f"opspec.ops.{family}"


def check_family_exports(manifest: Any, family: str, module: Any | None = None,
                         import_error: str | None = None) -> list[Diagnostic]:
    """The family module's `__all__` against the manifest (check `code`).

    `module` is the family's module (`opspec.ops.<family>`), None when it cannot be
    imported (`import_error` says why). Every implemented spec of the family must be in
    `__all__`; every op class (an `Op` subclass) in `__all__` must have a spec, of this
    family, that is implemented; every name in `__all__` must be defined. A diagnostic about
    one spec names it (`op`); one about a class without a spec names the class and points
    at its definition."""
    from opspec.ops.op import Op

    modname = getattr(module, "__name__", None) or family_module_name(family)
    specs = {n: s for n, s in manifest.specs.items()
             if s.spec is not None and s.spec.family == family}
    implemented = [n for n, s in specs.items() if s.spec.status == "implemented"]
    out: list[Diagnostic] = []
    if module is None:
        for n in implemented:
            out.append(Diagnostic(
                "code", f"the spec is implemented and its family is `{family}`, but the family "
                f"module {modname} cannot be imported ({import_error or 'no such module'}); it "
                f"must export {n} in its __all__", op=n, path="family",
                pos=manifest.specs[n].pos("family"),
                counterexample={"family": family, "module": modname, "missing": n}))
        return out
    exported = getattr(module, "__all__", None)
    if not isinstance(exported, (list, tuple)) or not all(isinstance(x, str) for x in exported):
        for n in implemented:
            out.append(Diagnostic(
                "code", f"the family module {modname} has no __all__ list of names; it must "
                f"export {n} (an implemented spec of family `{family}`)", op=n, path="family",
                pos=manifest.specs[n].pos("family"),
                counterexample={"family": family, "module": modname,
                                "__all__": None if exported is None else repr(exported)}))
        return out
    names = list(exported)
    for n in implemented:
        if n not in names:
            out.append(Diagnostic(
                "code", f"the spec is implemented, but the __all__ of {modname} (family "
                f"`{family}`) does not export {n}; it exports {names}", op=n, path="family",
                pos=manifest.specs[n].pos("family"),
                counterexample={"family": family, "module": modname, "__all__": names,
                                "missing": n}))
    for n in names:
        if not hasattr(module, n):
            loaded = manifest.specs.get(n)
            out.append(Diagnostic(
                "code", f"the __all__ of {modname} (family `{family}`) names {n}, which the "
                "module does not define", op=n if loaded is not None else None,
                path="family" if loaded is not None else None,
                pos=loaded.pos("family") if loaded is not None else _all_pos(module),
                counterexample={"family": family, "module": modname, "name": n}))
            continue
        obj = getattr(module, n)
        if not (isinstance(obj, type) and issubclass(obj, Op)):
            continue  # helpers may be exported too; only op classes need a spec
        loaded = manifest.specs.get(n)
        if loaded is None or loaded.spec is None:
            if loaded is None:
                out.append(Diagnostic(
                    "code", f"{modname} (family `{family}`) exports the op class {n} in its "
                    f"__all__, but the manifest has no spec {n}: an exported op class needs a "
                    "spec of its family", op=None, path=None,
                    pos=_class_pos(obj) or _all_pos(module),
                    counterexample={"family": family, "module": modname, "class": n}))
            continue
        if loaded.spec.family != family:
            out.append(Diagnostic(
                "code", f"{modname} exports {n} in its __all__, but the spec's family is "
                f"`{loaded.spec.family}`, not `{family}` (an op is exported by the module of "
                "its own family)", op=n, path="family", pos=loaded.pos("family"),
                counterexample={"family": family, "module": modname, "class": n,
                                "spec family": loaded.spec.family}))
        elif loaded.spec.status != "implemented":
            out.append(Diagnostic(
                "code", f"{modname} (family `{family}`) exports {n} in its __all__, but the "
                f"spec is {loaded.spec.status}: only implemented ops are exported (mark the "
                "spec implemented once its class conforms, or drop it from __all__)",
                op=n, path="status", pos=loaded.pos("status"),
                counterexample={"family": family, "module": modname, "class": n,
                                "status": loaded.spec.status}))
    return out


def import_family_module(family: str) -> tuple[Any | None, str | None]:
    """(the family's module, None), or (None, why it cannot be imported)."""
    import importlib

    if not family.isidentifier():
        return None, f"`{family}` is not a module name"
    modname = family_module_name(family)
    try:
        return importlib.import_module(modname), None
    except ModuleNotFoundError as exc:
        if exc.name == modname:
            return None, "no such module"
        return None, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a family module that fails to import
        return None, f"{type(exc).__name__}: {exc}"


def apply_code_checks(report: Any, manifest: Any) -> None:
    """Add the `code` diagnostics to each result of a proof report, and record on each
    whether its code was checked or why not. Only specs of the bundled manifest have op
    classes here (`opspec.ops`); every other manifest's specs are skipped, and say so.

    `code_checks` is "checked", "checked; <note>" when a part was not checked (a `ref_api`
    whose module is not installed here), or "skipped: <why>". The family exports are
    checked once per family of the specs in the report; a diagnostic about a spec joins
    that spec's result, one about a class without a spec the report's own diagnostics."""
    from opspec.manifest import MANIFEST_DIR
    from opspec.schema.elaborate import elaborate, elaborate_adts
    from opspec.solver.prove import verdict_of

    root = Path(MANIFEST_DIR).resolve()
    adts = None
    results = {r.op: r for r in report.specs}
    families: list[str] = []
    for r in report.specs:
        loaded = manifest.specs.get(r.op)
        bundled = loaded is not None and Path(loaded.file).resolve().is_relative_to(root)
        if not bundled:
            r.code_checks = "skipped: no op class is bound to this manifest"
            continue
        if loaded.spec is not None and loaded.spec.family not in families:
            families.append(loaded.spec.family)
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
        diags, note = check_ref_api(r.op, loaded.spec.ref_api if loaded.spec else None,
                                    loaded.pos, prefixes=manifest.types.ref_api_prefixes)
        r.diagnostics.extend(diags)
        r.code_checks = "checked" + (f"; {note}" if note else "")
        r.verdict = verdict_of(r.diagnostics)
    for family in families:
        module, why = import_family_module(family)
        for d in check_family_exports(manifest, family, module, why):
            r = results.get(d.op) if d.op is not None else None
            if r is not None:
                r.diagnostics.append(d)
                r.verdict = verdict_of(r.diagnostics)
            elif d.op is None or d.op not in manifest.specs:
                report.diagnostics.append(d)
            # else: about a spec of the manifest that this report leaves out (`--op`)
