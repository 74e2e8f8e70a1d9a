"""Where an op class finds its spec and its proven Plan.

An op class is looked up by its class name in a manifest: the bundled one, or the one its
class attribute `manifest` names (a folder or a YAML file; a relative path is taken from the
file that defines the class). Manifests are loaded in lenient mode, once per path, so an
incomplete manifest never breaks an import; the prover's Plan comes through the proof
cache, so an unchanged spec costs one file read.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from opspec.schema.elaborate import ElaboratedSpec, elaborate, elaborate_adts
from opspec.schema.loader import LoadedSpec, Manifest, load_paths
from opspec.schema.settings import caching_enabled
from opspec.solver.plan import Plan

_lock = threading.Lock()
_manifests: dict[str, Manifest] = {}


@dataclass(frozen=True)
class SpecEntry:
    loaded: LoadedSpec
    spec: ElaboratedSpec
    manifest: Manifest


def manifest_at(path: str | Path | None) -> Manifest:
    from opspec.manifest import MANIFEST_DIR

    key = str(Path(path).resolve()) if path is not None else str(MANIFEST_DIR)
    with _lock:
        m = _manifests.get(key)
        if m is None:
            m = load_paths([key], strict=False)
            _manifests[key] = m
        return m


def resolve_manifest_path(cls: type) -> Path | None:
    declared = getattr(cls, "manifest", None)
    if declared is None:
        return None
    p = Path(declared)
    if not p.is_absolute():
        import sys
        mod = sys.modules.get(cls.__module__)
        base = Path(getattr(mod, "__file__", None) or os.getcwd()).resolve().parent
        p = base / p
    return p


def find_spec(cls: type) -> SpecEntry | None:
    """The spec named like the class, elaborated; None if the manifest has no such entry."""
    m = manifest_at(resolve_manifest_path(cls))
    loaded = m.specs.get(cls.__name__)
    if loaded is not None:
        _warn_lenient(cls, loaded)
    if loaded is None or loaded.spec is None or loaded.broken:
        # A declaration that failed to load (a workload row, the roofline, an input) is
        # missing from `loaded.spec`: the class imports; construction reports the errors.
        return None
    adts, _ = elaborate_adts(m.adts)
    spec, diags = elaborate(loaded, adts)
    if spec is None or any(d.is_error for d in diags):
        # Elaboration drops a declaration it cannot read (an input with an unknown name in
        # its shape vanished from `inputs`): running such a spec failed later with a
        # NameError in generated code. The class imports; construction reports the errors.
        return None
    return SpecEntry(loaded, spec, m)


def _warn_lenient(cls: type, loaded: LoadedSpec) -> None:
    """Warn about what lenient loading ignored in the class's spec (an unknown key): a
    misspelt `contiguos: true` would otherwise drop the check without a word. Errors are
    not warned about: construction raises them."""
    notes = [d.render() for d in loaded.diagnostics if not d.is_error]
    if notes:
        import warnings

        from opspec.schema.errors import SpecWarning
        warnings.warn(f"{cls.__name__}: its spec loaded with warnings (an unknown key is "
                      "ignored here; `opspec prove` refuses it):\n  " + "\n  ".join(notes),
                      SpecWarning, stacklevel=4)


def spec_problems(cls: type) -> list[str]:
    """The errors that keep the spec named like `cls` from being used, rendered; empty
    when its manifest has no such spec."""
    m = manifest_at(resolve_manifest_path(cls))
    name = cls.__name__
    out = [d.render() for d in m.diagnostics if d.op == name and d.is_error]
    loaded = m.specs.get(name)
    if loaded is not None and loaded.spec is not None:
        adts, _ = elaborate_adts(m.adts)
        _, diags = elaborate(loaded, adts)
        out += [d.render() for d in diags if d.is_error]
    return out


_plans: dict[tuple[str, str], Plan] = {}
#: Held while a plan is proven: threads that first use one class at once used to prove its
#: spec once each, and proofs must not run side by side in one process (`fresh_context`
#: swaps z3's process-wide default context). Not `_lock`: loading a manifest needs that one.
_plan_lock = threading.RLock()


def plan_for(entry: SpecEntry) -> Plan:
    """The proven Plan of a spec, through the proof cache."""
    key = (entry.loaded.file, entry.loaded.name)
    with _lock:
        p = _plans.get(key)
    if p is not None:
        return p
    with _plan_lock:
        with _lock:
            p = _plans.get(key)  # proven by another thread while this one waited
        if p is not None:
            return p
        return _prove_plan(entry, key)


#: Errors that leave no sound plan to lower; the others (workload rows, effects, SymInt
#: safety, code) are reported by `opspec prove` but do not stop the runtime.
_UNSOUND = frozenset({"parse", "name", "kind", "language", "rejected-form", "family-gap",
                      "family-overlap", "family-cycle", "unsolvable", "ambiguous", "let-cycle"})


def _prove_plan(entry: SpecEntry, key: tuple[str, str]) -> Plan:
    from opspec.solver.run import ProofCache, default_cache_dir, prove_manifest

    report = prove_manifest(_single(entry.manifest, entry.loaded),
                            cache=ProofCache(default_cache_dir()) if caching_enabled() else None,
                            plans=True, across_specs=False)
    result = report.specs[0]
    errors = [d.render() for d in result.diagnostics if d.is_error and d.check in _UNSOUND]
    if errors:
        # A refuted spec has no sound plan to lower (an unsolvable index has no code that
        # computes it): constructing its op is refused, naming the prover's errors.
        from opspec.schema.errors import SpecError
        raise SpecError(f"{entry.loaded.name}: its spec is refuted by the prover; fix it (see "
                        "`opspec prove`):\n  " + "\n  ".join(errors))
    plan = result.plan
    if plan is None:
        from opspec.solver.prove import prove_spec
        plan = prove_spec(entry.spec, entry.loaded).plan
    if plan.spec is None:  # a plan from an older cache entry: attach the spec
        plan = Plan(plan.op, plan.file, plan.spec_hash, plan.discriminants, plan.branches,
                    entry.spec)
    with _lock:
        _plans[key] = plan
    return plan


def _single(m: Manifest, loaded: LoadedSpec) -> Manifest:
    from dataclasses import replace
    return replace(m, specs={loaded.name: loaded}, diagnostics=())
