"""The whole-spec passes the prover runs after it has planned every combination.

Each pass is a function `check(spec, loaded, plan) -> list[Diagnostic]` over the elaborated
spec, its loaded form (for positions) and the proven Plan; the prover files the diagnostics
under the spec. Passes are listed here, in the order they run.
"""

from __future__ import annotations

from typing import Callable

SpecCheck = Callable[..., list]

SPEC_CHECKS: list[SpecCheck] = []

from opspec.solver.workload_check import check_workloads  # noqa: E402  (check id `workload`)
SPEC_CHECKS.append(check_workloads)
from opspec.solver.effect_check import check_effects  # noqa: E402  (check id `effect`)
SPEC_CHECKS.append(check_effects)
from opspec.solver.symint_check import check_symint  # noqa: E402  (check id `symint`)
SPEC_CHECKS.append(check_symint)
