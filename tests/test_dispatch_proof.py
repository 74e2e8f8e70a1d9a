"""`dispatch`: the offline proof of an op's dispatch regions (ops/dispatch_proof.py).

Broken tables are plain classes holding `kernel_types` and `interfaces` (what
`prove_dispatch` reads), checked against the bundled GemmFwdOp spec; every counterexample is
replayed through the runtime's own selection (`DispatchTable.key_for`, `_refusal`), so the
proof and dispatch cannot drift apart unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from opspec.kernels.gemm_impl import (GemmCall, GemmFwdInterface, GemmReferenceKernel,
                                      GemmTritonKernel, GemvTritonKernel)
from opspec.ops.dispatch import (CallSpec, DispatchTable, Kernel, KernelInterface, _refusal,
                                 _unavailable)
from opspec.ops.dispatch_proof import call_of, field_domains, prove_dispatch
from opspec.ops.errors import DispatchError
from opspec.schema import kinds as K
from opspec.schema.diagnostics import Severity

CUDA = frozenset({"cuda"})


@pytest.fixture(scope="module")
def gemm_spec():
    from opspec.ops import GemmFwdOp

    spec = GemmFwdOp._opspec_entry.spec
    assert spec is not None and spec.name == "GemmFwdOp"
    return spec


def _op(kernel_types, interfaces=None, name="GemmFwdOp"):
    return type(name, (), {"kernel_types": kernel_types,
                           "interfaces": interfaces or {"gemm": GemmFwdInterface}})


def _serves(cls, call) -> bool:
    """Whether `cls` serves `call` by the runtime's own rules (availability, applicability)."""
    return _unavailable(cls, call.device.type, call) is None and _refusal(cls, call) is None


def _key_for(op, call):
    return DispatchTable(op.__name__, op.kernel_types, op.interfaces).key_for("gemm", call)


# -- the bundled tables ----------------------------------------------------------------------

def test_the_bundled_gemm_table_proves(gemm_spec):
    from opspec.ops import GemmFwdOp

    # gemv_triton and gemm_triton overlap (M <= 16, half precision), gemv is preferred over
    # gemm; gemm_reference is the general fallback of every device.
    assert GemvTritonKernel.preferred_over == {"gemm_triton"} and GemmReferenceKernel.general
    assert prove_dispatch(GemmFwdOp) == []
    assert prove_dispatch(GemmFwdOp, gemm_spec) == []


def test_the_bundled_silu_and_mul_table_proves():
    from opspec.ops import SiluAndMulFwdOp

    assert prove_dispatch(SiluAndMulFwdOp) == []


def test_gemm_call_fields_take_the_spec_domains(gemm_spec):
    domains, problems = field_domains(GemmCall, gemm_spec)
    assert problems == []
    assert {n: (d.spec_name, d.kind) for n, d in domains.items()} == {
        "M": ("M", K.DIM), "N": ("N", K.DIM), "K": ("K", K.DIM),
        "dtype": ("T", K.DTypeK(frozenset({"float16", "bfloat16"}))),
        "trans_a": ("trans_a", K.BOOL), "trans_b": ("trans_b", K.BOOL)}


def test_prove_runs_the_dispatch_proof_on_the_bundled_manifest(capsys):
    import json

    from opspec.cli.main import main

    assert main(["prove", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    checked = {s["op"]: s["code_checks"] for s in doc["specs"]}
    assert {"GemmFwdOp", "SiluAndMulFwdOp", "RMSNormFwdOp", "AddFwdOp"} <= set(checked)
    # every bundled spec is implemented and checked (a ref_api in an absent module says so)
    assert all(c.startswith("checked") for c in checked.values()), checked
    assert checked["GemmFwdOp"] == "checked"
    assert not [d for s in doc["specs"] for d in s.get("diagnostics", [])
                if d["check"] == "dispatch"]


def test_the_code_checks_report_dispatch_findings(monkeypatch):
    """`apply_code_checks` adds the proof's diagnostics, placed at the op's spec."""
    from types import SimpleNamespace

    from opspec.manifest import load_bundled
    from opspec.ops import codecheck

    broken = _op({"gemm_triton": GemmTritonKernel, "gemv_triton": _GemvNoPreference,
                  "gemm_reference": GemmReferenceKernel})
    monkeypatch.setattr(codecheck, "bundled_class",
                        lambda name: broken if name == "GemmFwdOp" else None)
    monkeypatch.setattr(codecheck, "check_class", lambda cls, spec, pos: [])
    result = SimpleNamespace(op="GemmFwdOp", status="implemented", diagnostics=[],
                             code_checks=None, verdict=None)
    codecheck.apply_code_checks(SimpleNamespace(specs=[result]), load_bundled(strict=True))
    (d,) = [d for d in result.diagnostics if d.check == "dispatch"]
    assert d.pos is not None and d.pos.file.endswith("gemm.yaml")
    assert result.code_checks == "checked" and result.verdict == "refuted"


# -- broken table 1: an overlap without precedence -------------------------------------------

class _GemvNoPreference(Kernel, GemmFwdInterface):
    """gemv_triton without its `preferred_over`: overlaps gemm_triton for M <= 16."""

    devices = CUDA
    applies = "M <= 16 and (dtype == 'float16' or dtype == 'bfloat16')"

    def forward(self, a, b, out):
        return out


class _GemmTriton(Kernel, GemmFwdInterface):
    devices = CUDA
    applies = "dtype == 'float16' or dtype == 'bfloat16'"

    def forward(self, a, b, out):
        return out


def test_overlap_without_precedence_is_ambiguous(gemm_spec):
    op = _op({"gemm_triton": _GemmTriton, "gemv_triton": _GemvNoPreference,
              "gemm_reference": GemmReferenceKernel})
    (d,) = prove_dispatch(op, gemm_spec)
    assert d.check == "dispatch" and d.severity is Severity.ERROR and d.op == "GemmFwdOp"
    assert "dispatch is ambiguous" in d.message and "on cuda" in d.message
    assert "gemm_triton" in d.message and "gemv_triton" in d.message
    assert "preferred_over" in d.hint
    cex = d.counterexample
    assert cex["device"] == "cuda" and cex["M"] <= 16
    assert cex["dtype"] in ("float16", "bfloat16")
    call = call_of(GemmCall, cex)
    # The counterexample is a call both `applies` claim, and dispatch refuses it.
    assert _serves(_GemmTriton, call) and _serves(_GemvNoPreference, call)
    with pytest.raises(DispatchError, match="dispatch is ambiguous"):
        _key_for(op, call)


def test_a_transitive_preference_orders_an_overlap(gemm_spec):
    class Mid(Kernel, GemmFwdInterface):
        devices = CUDA
        applies = "M <= 64"
        preferred_over = frozenset({"gemm_triton"})

        def forward(self, a, b, out):
            return out

    class Top(Kernel, GemmFwdInterface):
        devices = CUDA
        applies = "M <= 16"
        preferred_over = frozenset({"mid"})

        def forward(self, a, b, out):
            return out

    op = _op({"gemm_triton": _GemmTriton, "mid": Mid, "top": Top,
              "gemm_reference": GemmReferenceKernel})
    # top and gemm_triton overlap: top beats mid beats gemm_triton.
    assert prove_dispatch(op, gemm_spec) == []


def test_disjoint_applies_need_no_precedence(gemm_spec):
    class Small(Kernel, GemmFwdInterface):
        devices = CUDA
        applies = "M <= 16"

        def forward(self, a, b, out):
            return out

    class Large(Kernel, GemmFwdInterface):
        devices = CUDA
        applies = "M > 16"

        def forward(self, a, b, out):
            return out

    # Disjoint and covering: proven without a general implementation on cuda.
    assert prove_dispatch(_op({"small": Small, "large": Large}), gemm_spec) == []


# -- broken table 2: a coverage gap -----------------------------------------------------------

class _Decode(Kernel, GemmFwdInterface):
    devices = CUDA
    applies = "M <= 16"

    def forward(self, a, b, out):
        return out


class _Bf16(Kernel, GemmFwdInterface):
    devices = CUDA
    applies = "dtype == 'bfloat16'"
    preferred_over = frozenset({"decode"})

    def forward(self, a, b, out):
        return out


class _CpuReference(Kernel, GemmFwdInterface):
    """A general implementation, but only for the CPU: it does not cover cuda."""

    devices = frozenset({"cpu"})
    general = True

    def forward(self, a, b, out):
        return out


def test_a_coverage_gap_is_found(gemm_spec):
    op = _op({"decode": _Decode, "bf16": _Bf16, "reference": _CpuReference})
    (d,) = prove_dispatch(op, gemm_spec)
    assert d.check == "dispatch" and d.severity is Severity.ERROR
    assert "no implementation serves" in d.message and "on cuda" in d.message
    cex = d.counterexample
    # The only calls the spec accepts and the table misses: M > 16 in float16.
    assert cex["device"] == "cuda" and cex["M"] > 16 and cex["dtype"] == "float16"
    call = call_of(GemmCall, cex)
    assert not any(_serves(cls, call) for cls in op.kernel_types.values())
    with pytest.raises(DispatchError, match="no implementation serves this call"):
        _key_for(op, call)


def test_the_spec_domain_bounds_coverage(gemm_spec):
    """`dtype == 'float16' or dtype == 'bfloat16'` covers every dtype the spec allows
    (T: DType[float16 | bfloat16]), though not every dtype name."""
    op = _op({"gemm_triton": _GemmTriton})
    assert prove_dispatch(op, gemm_spec) == []
    # Without the spec the field is any dtype name: float32 is a gap.
    (d,) = prove_dispatch(_op({"gemm_triton": _GemmTriton}, name="UnboundOp"))
    assert d.check == "dispatch" and d.op == "UnboundOp"
    assert d.counterexample["dtype"] not in ("float16", "bfloat16")


def test_supported_archs_restrict_the_region(gemm_spec):
    class Hopper(Kernel, GemmFwdInterface):
        devices = CUDA
        supported_archs = [90]

        def forward(self, a, b, out):
            return out

    (d,) = prove_dispatch(_op({"hopper": Hopper}), gemm_spec)
    assert d.check == "dispatch" and d.counterexample["arch"] != 90
    call = call_of(GemmCall, d.counterexample)
    assert call.arch == d.counterexample["arch"] and not _serves(Hopper, call)
    with pytest.raises(DispatchError, match="no implementation serves this call"):
        _key_for(_op({"hopper": Hopper}), call)


# -- broken table 3: undecided (an imperative refusal) ---------------------------------------

class _SplitK(Kernel, GemmFwdInterface):
    """Restricts itself in code only: the proof cannot read where it serves."""

    devices = CUDA

    @classmethod
    def refusal(cls, call):
        if call.K < 4096:
            return "K < 4096"
        return super().refusal(call)

    def forward(self, a, b, out):
        return out


def test_a_refusal_override_leaves_the_proof_undecided(gemm_spec):
    op = _op({"gemm_triton": _GemmTriton, "split_k": _SplitK,
              "gemm_reference": GemmReferenceKernel})
    diags = prove_dispatch(op, gemm_spec)
    assert diags and all(d.check == "unknown" and d.severity is Severity.ADVISORY
                         for d in diags)
    (d,) = diags
    assert "_SplitK" in d.message and "refusal" in d.message and "undecided" in d.message
    assert not [d for d in diags if d.is_error]


def test_a_refusal_override_undecides_coverage_too(gemm_spec):
    # No general implementation on cuda: what gemm_triton leaves out is up to split_k's code
    # (the spec's dtypes are all half precision, so restrict gemm_triton further).
    class Narrow(Kernel, GemmFwdInterface):
        devices = CUDA
        applies = "M <= 16"
        preferred_over = frozenset({"split_k"})

        def forward(self, a, b, out):
            return out

    diags = prove_dispatch(_op({"narrow": Narrow, "split_k": _SplitK}), gemm_spec)
    (d,) = diags
    assert d.check == "unknown" and d.severity is Severity.ADVISORY
    assert "split_k" in d.message and "served" in d.message


def test_a_refusal_that_cannot_change_the_answer_is_proven_around(gemm_spec):
    """Preferred over its only neighbour, backed by an unrestricted general one: whatever
    its refusal says, every call has exactly one winner."""

    class SplitKFirst(_SplitK):
        preferred_over = frozenset({"gemm_triton"})

    op = _op({"gemm_triton": _GemmTriton, "split_k": SplitKFirst,
              "gemm_reference": GemmReferenceKernel})
    assert prove_dispatch(op, gemm_spec) == []


def test_applies_reading_a_property_is_undecided(gemm_spec):
    @dataclass(frozen=True)
    class PropCall(CallSpec):
        M: int
        field_kinds: ClassVar = {"M": "Dim"}   # else `M >= 0` leaves the negative ints out

        @property
        def decode(self) -> bool:
            return self.M <= 16

    class PropInterface(KernelInterface):
        request: ClassVar[type[CallSpec]] = PropCall

        def forward(self, x):
            """x."""

    class Fast(Kernel, PropInterface):
        applies = "decode"

        def forward(self, x):
            return x

    class Slow(Kernel, PropInterface):
        applies = "M >= 0"

        def forward(self, x):
            return x

    op = _op({"fast": Fast, "slow": Slow}, {"prop": PropInterface}, name="PropOp")
    (d,) = prove_dispatch(op)
    assert d.check == "unknown" and "`decode`, a call spec property" in d.message


# -- declaring the mapping --------------------------------------------------------------------

def test_spec_names_and_field_kinds_are_explicit(gemm_spec):
    @dataclass(frozen=True)
    class RenamedCall(CallSpec):
        rows: int
        elem: str
        block: int
        spec_names: ClassVar = {"rows": "M", "elem": "T"}
        field_kinds: ClassVar = {"block": "Dim"}

    domains, problems = field_domains(RenamedCall, gemm_spec)
    assert problems == []
    assert domains["rows"].spec_name == "M" and domains["rows"].kind == K.DIM
    assert domains["elem"].spec_name == "T" and isinstance(domains["elem"].kind, K.DTypeK)
    assert domains["block"].spec_name is None and domains["block"].kind == K.DIM

    class RenamedInterface(KernelInterface):
        request: ClassVar[type[CallSpec]] = RenamedCall

        def forward(self, x):
            """x."""

    class Small(Kernel, RenamedInterface):
        devices = CUDA
        applies = "rows <= 16 or block < 0"   # block is a size: `block < 0` never holds

        def forward(self, x):
            return x

    class Big(Kernel, RenamedInterface):
        devices = CUDA
        applies = "rows > 16 and elem == 'bfloat16'"

        def forward(self, x):
            return x

    op = _op({"small": Small, "big": Big}, {"r": RenamedInterface})
    (d,) = prove_dispatch(op, gemm_spec)
    cex = d.counterexample
    assert cex["rows"] > 16 and cex["elem"] == "float16" and cex["block"] >= 0


def test_a_spec_name_the_spec_lacks_is_reported(gemm_spec):
    @dataclass(frozen=True)
    class BadCall(CallSpec):
        rows: int
        spec_names: ClassVar = {"rows": "Q"}

    class BadInterface(KernelInterface):
        request: ClassVar[type[CallSpec]] = BadCall

        def forward(self, x):
            """x."""

    class Any_(Kernel, BadInterface):
        def forward(self, x):
            return x

    (d,) = prove_dispatch(_op({"any": Any_}, {"bad": BadInterface}), gemm_spec)
    assert d.check == "dispatch" and "'Q'" in d.message


def test_an_unordered_overlap_on_one_arch_only(gemm_spec):
    class Sm90(Kernel, GemmFwdInterface):
        devices = CUDA
        supported_archs = [90]

        def forward(self, a, b, out):
            return out

    class Sm80(Kernel, GemmFwdInterface):
        devices = CUDA
        supported_archs = [80, 90]

        def forward(self, a, b, out):
            return out

    op = _op({"sm90": Sm90, "sm80": Sm80, "gemm_reference": GemmReferenceKernel})
    (d,) = prove_dispatch(op, gemm_spec)
    assert d.check == "dispatch" and d.counterexample["arch"] == 90
    with pytest.raises(DispatchError, match="dispatch is ambiguous"):
        _key_for(op, call_of(GemmCall, d.counterexample))
