"""Checks across the specs of one manifest, which no spec's own proof can make.

They run on every `opspec prove`, after the per-spec proofs (and the proof cache: a spec's
cached result does not know whether the specs it names still exist).

* A composition's `op:` stage names a spec of the manifest or of the bundled one (reference
  §7; a user's composite may run bundled ops): a misspelt stage used to prove, and failed
  only when the op class was checked against its code. Ops of another manifest are seen
  when the manifests are proven together (`opspec prove mine/ theirs/`).
"""

from __future__ import annotations

from typing import Iterable

from opspec.schema.diagnostics import Diagnostic
from opspec.manifest import load_bundled
from opspec.schema.loader import LoadedSpec, Manifest
from opspec.schema.suggest import closest


def stage_op_diagnostics(manifest: Manifest, specs: Iterable[LoadedSpec]) -> list[Diagnostic]:
    """A `name` error for each `op:` stage of `specs` that names no spec of `manifest` or
    of the bundled manifest."""
    out = []
    known: list[str] | None = None
    for s in specs:
        comp = s.spec.composition if s.spec is not None else None
        if comp is None:
            continue
        for i, st in enumerate(comp.stages):
            if st.op is None or st.op in manifest.specs:
                continue
            if known is None:  # loaded only when a stage is not in the manifest itself
                known = sorted({*manifest.specs, *load_bundled().specs})
            if st.op in known:
                continue
            path = f"composition.stages.{i}.op"
            close = closest(st.op, known)
            out.append(Diagnostic(
                "name", f"stage `{st.name}` runs `{st.op}`, which no spec of the manifest "
                        "defines", op=s.name, path=s.file_decl(path), pos=s.pos(path),
                hint=f"did you mean `{close}`?" if close else
                "name an op of the manifest, or run a kernel of the op's own with `kernel:`"))
    return out
