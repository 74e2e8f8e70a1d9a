"""Kernel dispatch: the table's construction contract, selection, entries and thread safety."""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import abc

import pytest
import torch

from opspec.ops import backend, dispatch
from opspec.ops.dispatch import CallSpec, DeviceFacts, DispatchTable, Kernel, KernelInterface
from opspec.ops.errors import (BackendError, DispatchError, DispatchTableError,
                               KernelContractError, OpNotAvailableError)
from opspec.schema.errors import EvaluationError, ExpressionError, OpspecError

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)
OP = "GemmFwdOp"


@pytest.fixture(autouse=True)
def _isolated_backends():
    saved = backend._STATE.snapshot()
    yield
    backend._STATE.restore(saved)


# -- a small family: one call spec, two interfaces -------------------------------------------

@dataclass(frozen=True)
class GemmCall(CallSpec):
    M: int
    N: int
    K: int
    dtype: torch.dtype = torch.float16


@dataclass(frozen=True)
class ShapeCall(CallSpec):
    shape: tuple


class GemmFwdInterface(KernelInterface):
    request = GemmCall

    @abc.abstractmethod
    def forward(self, a, b):
        """a: [M, K], b: [K, N] -> [M, N]."""


class GemmBwdInterface(KernelInterface):
    request = GemmCall

    @abc.abstractmethod
    def forward(self, grad, a, b):
        """grad: [M, N] -> (grad_a, grad_b)."""


class ShapeFwdInterface(KernelInterface):
    request = ShapeCall

    @abc.abstractmethod
    def forward(self, x):
        """x: [*shape]."""


def kernel(name: str, interface: type = GemmFwdInterface, **attrs) -> type[Kernel]:
    """A CPU implementation of `interface` with class attributes `attrs`."""
    attrs.setdefault("devices", frozenset({"cpu"}))
    attrs.setdefault("forward", _forward_like(interface.forward))
    return type(name, (Kernel, interface), attrs)


def _forward_like(contract):
    """A concrete forward taking exactly the parameters of `contract`."""
    def forward(*args, **kwargs):
        return None
    forward.__signature__ = inspect.signature(contract)
    return forward


def table(kernel_types, interfaces=None, op=OP) -> DispatchTable:
    return DispatchTable(op, kernel_types, interfaces or {"gemm": GemmFwdInterface})


@contextmanager
def raises(exc_type, *parts):
    """pytest.raises that also checks that every part is in the message."""
    with pytest.raises(exc_type) as info:
        yield info
    for part in parts:
        assert part in str(info.value), str(info.value)


def call(M=8, N=8, K=8, dtype=torch.float16, device=CPU) -> GemmCall:
    return GemmCall(M, N, K, dtype, device=device)


# -- errors ----------------------------------------------------------------------------------

def test_error_types_are_opspec_errors_and_builtin_errors():
    assert issubclass(OpNotAvailableError, (OpspecError, RuntimeError))
    assert issubclass(DispatchError, RuntimeError) and issubclass(DispatchError, OpspecError)
    assert issubclass(KernelContractError, TypeError)
    assert issubclass(DispatchTableError, ValueError)
    assert issubclass(BackendError, ValueError)


# -- call specs and device facts -------------------------------------------------------------

def test_device_facts_are_none_on_cpu_and_derived_lazily():
    c = call()
    assert (c.arch, c.sm_count, c.smem_budget, c.calibration) == (None, None, None, None)
    assert GemmCall(1, 2, 3).device is None and GemmCall(1, 2, 3).arch is None
    assert c.stated_facts() == []


def test_with_facts_states_facts_without_changing_identity():
    c = call()
    s = c.with_facts(arch=90, sm_count=132)
    assert (s.arch, s.sm_count, s.smem_budget) == (90, 132, None)
    assert s == c and hash(s) == hash(c) and c.arch is None
    assert s.stated_facts() == ["arch", "sm_count"]
    t = c.with_facts(DeviceFacts(arch=80, smem_budget=1 << 16), sm_count=108)
    assert (t.arch, t.sm_count, t.smem_budget) == (80, 108, 1 << 16)
    assert s.with_facts(arch=80).sm_count == 132  # updates what is already stated
    with raises(KernelContractError, "['arc']", "not device facts"):
        c.with_facts(arc=90)


def test_call_spec_may_not_declare_device_facts():
    with raises(KernelContractError, "BadCall", "['arch', 'sm_count']", "derives them"):
        @dataclass(frozen=True)
        class BadCall(CallSpec):
            arch: int
            sm_count: int


# -- construction: the contract of §9.2 ------------------------------------------------------

def test_empty_table_is_allowed():
    t = table({}, {})
    assert dict(t.kernel_types) == {} and list(t.iter_kernels()) == []


def test_key_must_hold_a_kernel():
    class NotAKernel(GemmFwdInterface):
        def forward(self, a, b):
            pass
    with raises(KernelContractError, OP, "'plain'", "does not inherit Kernel"):
        table({"plain": NotAKernel})


def test_kernel_must_implement_an_interface():
    class Bare(Kernel):
        devices = frozenset({"cpu"})

        def forward(self, a, b):
            pass
    with raises(KernelContractError, OP, "'bare'", "Bare", "does not implement GemmFwdInterface"):
        table({"bare": Bare})


def test_keys_of_foreign_interfaces_are_refused():
    foreign = kernel("Foreign", ShapeFwdInterface)
    with raises(DispatchTableError, OP, "['foreign']", "implement none of its kernel interfaces"):
        table({"foreign": foreign, "ok": kernel("Ok")})


def test_kernels_without_interfaces_are_refused():
    with raises(DispatchTableError, OP, "['a']", "implement none of its kernel interfaces",
                "declare interfaces"):
        DispatchTable(OP, {"a": kernel("A")}, {})


def test_kernel_implementing_two_interfaces_is_refused():
    class Both(Kernel, GemmFwdInterface, ShapeFwdInterface):
        devices = frozenset({"cpu"})

        def forward(self, a, b):
            pass
    with raises(KernelContractError, OP, "'both'", "more than one"):
        table({"both": Both}, {"gemm": GemmFwdInterface, "shape": ShapeFwdInterface})


def test_entry_for_must_be_a_classmethod():
    def entry_for(self, call):
        return call, lambda: None
    with raises(KernelContractError, OP, "'a'", "NoClass", "entry_for must be a classmethod"):
        table({"a": kernel("NoClass", entry_for=entry_for)})
    with raises(KernelContractError, "entry_for must be a classmethod"):
        table({"a": kernel("Static", entry_for=staticmethod(lambda call: (call, None)))})


def test_refusal_must_be_a_classmethod():
    with raises(KernelContractError, "'a'", "refusal must be a classmethod"):
        table({"a": kernel("A", refusal=lambda self, call: None)})


@pytest.mark.parametrize("forward", [
    lambda self, x, y: None,            # other names
    lambda self, a: None,               # too few
    lambda self, b, a: None,            # other order
    lambda self, a, b, c: None,         # an extra argument without default
    lambda self, a, b, *, scale: None,  # an extra required keyword
])
def test_forward_must_take_the_interfaces_arguments(forward):
    with raises(KernelContractError, OP, "'a'", "forward does not take GemmFwdInterface's "
                                                "arguments"):
        table({"a": kernel("A", forward=forward)})


@pytest.mark.parametrize("forward", [
    lambda self, a, b: None,
    lambda self, a, b, c=1: None,
    lambda self, a, b, *, scale=1.0: None,
    lambda self, *args: None,
    lambda self, a, *args, **kwargs: None,
])
def test_forward_may_accept_more(forward):
    table({"a": kernel("A", forward=forward)})


def test_forward_keyword_only_arguments_of_the_interface():
    class OutInterface(KernelInterface):
        request = GemmCall

        @abc.abstractmethod
        def forward(self, a, *, out=None):
            """out: optional buffer."""
    table({"a": kernel("A", OutInterface, forward=lambda self, a, *, out=None: None)},
          {"o": OutInterface})
    table({"a": kernel("A", OutInterface, forward=lambda self, a, out=None: None)},
          {"o": OutInterface})
    with raises(KernelContractError, "forward does not take OutInterface's arguments"):
        table({"a": kernel("A", OutInterface, forward=lambda self, a: None)}, {"o": OutInterface})


def test_forward_must_be_defined():
    class NoForward(Kernel, GemmFwdInterface):
        devices = frozenset({"cpu"})
    with raises(KernelContractError, OP, "'a'", "NoForward", "['forward'] abstract"):
        table({"a": NoForward})


def test_at_most_one_general_per_interface():
    a, b = kernel("A", general=True), kernel("B", general=True)
    with raises(DispatchTableError, OP, "'gemm'", "has more than one general implementation",
                "a (", "b ("):
        table({"a": a, "b": b})
    # one general in each of two interfaces is fine
    table({"a": a, "g": kernel("G", GemmBwdInterface, general=True)},
          {"gemm": GemmFwdInterface, "bwd": GemmBwdInterface})


@pytest.mark.parametrize("prefers,interfaces", [
    ({"zzz"}, None),                                                    # no such key
    ({"bwd_key"}, {"gemm": GemmFwdInterface, "bwd": GemmBwdInterface}),  # another interface
    ({"a"}, None),                                                      # itself
])
def test_preferred_over_names_other_implementations_of_the_interface(prefers, interfaces):
    kinds = {"a": kernel("A", preferred_over=frozenset(prefers)), "b": kernel("B"),
             "bwd_key": kernel("Bwd", GemmBwdInterface)}
    if interfaces is None:
        del kinds["bwd_key"]
    with raises(DispatchTableError, OP, "'a'", f"prefers {sorted(prefers)}",
                "not other implementations of interface 'gemm'"):
        table(kinds, interfaces)


def test_general_declares_no_preference():
    with raises(DispatchTableError, OP, "'g'", "is general and declares preferred_over"):
        table({"g": kernel("G", general=True, preferred_over=frozenset({"b"})),
               "b": kernel("B")})


@pytest.mark.parametrize("edges,cycle", [
    ({"a": {"b"}, "b": {"a"}}, "a -> b -> a"),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a -> b -> c -> a"),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, "b -> c -> b"),
])
def test_preferences_may_not_form_a_cycle(edges, cycle):
    kinds = {k: kernel(k.upper(), preferred_over=frozenset(v)) for k, v in edges.items()}
    with raises(DispatchTableError, OP, "preferences of interface 'gemm' form a cycle through",
                cycle):
        table(kinds)


def test_member_types_are_checked():
    with raises(KernelContractError, "'a'", "preferred_over must be a set of keys"):
        table({"a": kernel("A", preferred_over="b"), "b": kernel("B")})
    with raises(KernelContractError, "'a'", "devices must be a set"):
        table({"a": kernel("A", devices="cpu")})
    with raises(KernelContractError, "'a'", "supported_archs"):
        table({"a": kernel("A", supported_archs=90)})


def test_keys_are_snake_case():
    with raises(DispatchTableError, OP, "'GemmTMA'", "snake_case"):
        table({"GemmTMA": kernel("A")})


def test_interfaces_are_checked():
    with raises(KernelContractError, OP, "interfaces['x']", "is not a KernelInterface"):
        table({}, {"x": object})

    class NoRequest(KernelInterface):
        def forward(self, a):
            pass
    with raises(KernelContractError, "NoRequest.request must be a CallSpec subclass"):
        table({}, {"x": NoRequest})

    class NoForward(KernelInterface):
        request = GemmCall
    with raises(KernelContractError, "NoForward declares no forward"):
        table({}, {"x": NoForward})
    with raises(DispatchTableError, "one kernel interface twice"):
        table({}, {"x": GemmFwdInterface, "y": GemmFwdInterface})


def test_applies_is_parsed_at_class_definition():
    with raises(ExpressionError, "Bad.applies", "M / 2"):
        kernel("Bad", applies="M / 2 > 1")
    with raises(KernelContractError, "Bad.applies must be an expression string"):
        kernel("Bad", applies=3)


def test_applies_names_are_checked_at_construction():
    with raises(DispatchTableError, OP, "'a'", "applies `Q > 1` names ['Q']", "GemmCall lacks"):
        table({"a": kernel("A", applies="Q > 1")})
    # fields, device facts and the request's properties are known
    table({"a": kernel("A", applies="M > 1 and arch == 90 and dtype == 'float16'")})


def test_construction_reads_no_device(monkeypatch):
    monkeypatch.setattr(DeviceFacts, "of", staticmethod(lambda d: pytest.fail("device read")))
    table({"a": kernel("A", supported_archs=[90], applies="arch >= 90")})


# -- call time errors ------------------------------------------------------------------------

def test_unknown_interface():
    with raises(OpNotAvailableError, OP, "no kernel interface 'nope'", "['gemm']"):
        table({"a": kernel("A")}).kernel_for("nope", call())


def test_call_spec_of_the_wrong_type():
    with raises(KernelContractError, OP, "kernel_for('gemm')", "takes a GemmCall call spec",
                "ShapeCall"):
        table({"a": kernel("A")}).kernel_for("gemm", ShapeCall((1, 2), device=CPU))


def test_unhashable_call_spec():
    t = table({"s": kernel("S", ShapeFwdInterface)}, {"shape": ShapeFwdInterface})
    with raises(KernelContractError, OP, "ShapeCall cannot key a dispatch cache: field shape is "
                                         "a list"):
        t.kernel_for("shape", ShapeCall([1, 2], device=CPU))
    assert t.key_for("shape", ShapeCall((1, 2), device=CPU)) == "s"


def test_kernel_for_refuses_stated_device_facts():
    t = table({"a": kernel("A")})
    with raises(KernelContractError, OP, "this call spec states ['arch']"):
        t.kernel_for("gemm", call().with_facts(arch=90))
    assert t.key_for("gemm", call().with_facts(arch=90)) == "a"


def test_no_kernel_runs_on_the_device_type():
    t = table({"a": kernel("A", devices=frozenset({"cuda"}))})
    with raises(OpNotAvailableError,
                "GemmFwdOp's in-tree kernels do not run on cpu; known targets for this op: []"):
        t.kernel_for("gemm", call())
    backend.register_kernel_builder(OP, "torch_cpu", lambda *a, **k: None)
    with raises(OpNotAvailableError, "known targets for this op: ['torch_cpu']"):
        t.kernel_for("gemm", call())


def test_an_interface_without_implementations_is_not_available():
    t = table({}, {"gemm": GemmFwdInterface})
    with raises(OpNotAvailableError, "in-tree kernels do not run on cpu"):
        t.kernel_for("gemm", call())


def test_no_implementation_serves_lists_each_reason():
    class Refuses(Kernel, GemmFwdInterface):
        devices = frozenset({"cpu"})

        @classmethod
        def refusal(cls, call):
            return "K must be a multiple of 64" if call.K % 64 else super().refusal(call)

        def forward(self, a, b):
            pass
    t = table({"cuda_only": kernel("C", devices=frozenset({"cuda"})),
               "small": kernel("S", applies="M <= 16"), "refuses": Refuses})
    with raises(DispatchError, OP, "no implementation serves this call",
                "cuda_only: runs on ['cuda'], not cpu",
                "small: does not satisfy `applies: M <= 16` (M=32)",
                "refuses: K must be a multiple of 64", "interface 'gemm'"):
        t.kernel_for("gemm", call(M=32, K=8))


def test_ambiguous_dispatch():
    t = table({"a": kernel("A"), "b": kernel("B"), "g": kernel("G", general=True)})
    with raises(DispatchError, OP, "dispatch is ambiguous: keys a and b both serve this call; "
                                   "declare preferred_over"):
        t.kernel_for("gemm", call())
    t3 = table({"a": kernel("A"), "b": kernel("B"), "c": kernel("C")})
    with raises(DispatchError, "keys a, b and c all serve this call"):
        t3.key_for("gemm", call())


def test_applies_evaluation_errors_name_the_class():
    t = table({"a": kernel("A", applies="M // (K - 8) > 1")})
    with raises(EvaluationError, "A.applies `M // (K - 8) > 1`"):
        t.key_for("gemm", call(K=8))
    with raises(EvaluationError, "not a bool"):
        table({"a": kernel("A", applies="M + 1")}).key_for("gemm", call())


# -- selection -------------------------------------------------------------------------------

def test_availability_by_device_type(monkeypatch):
    monkeypatch.setattr(dispatch, "_cuda_available", lambda: False)  # also on a CUDA machine
    t = table({"on_cpu": kernel("OnCpu"), "on_cuda": kernel("OnCuda", devices=frozenset({"cuda"}))})
    assert t.key_for("gemm", call()) == "on_cpu"
    assert t.key_for("gemm", call(device=CUDA0), arch=90) == "on_cuda"
    # no device and no accelerator: the host runs the call
    assert t.key_for("gemm", GemmCall(8, 8, 8)) == "on_cpu"


def test_availability_by_arch():
    cuda = frozenset({"cuda"})
    t = table({"hopper": kernel("Hopper", devices=cuda, supported_archs=[90]),
               "any": kernel("Any", devices=cuda, general=True)})
    assert t.key_for("gemm", call(device=CUDA0).with_facts(arch=90, sm_count=132)) == "hopper"
    assert t.key_for("gemm", call(device=CUDA0), DeviceFacts(arch=80)) == "any"
    only = table({"hopper": kernel("Hopper", devices=cuda, supported_archs=[90])})
    with raises(DispatchError, "hopper: supported_archs [90] exclude arch 80"):
        only.key_for("gemm", call(device=CUDA0), arch=80)


def test_refusal_and_applies_combine():
    class Aligned(Kernel, GemmFwdInterface):
        devices = frozenset({"cpu"})
        applies = "M <= 16"

        @classmethod
        def refusal(cls, call):
            return "K % 8 != 0" if call.K % 8 else super().refusal(call)

        def forward(self, a, b):
            pass
    t = table({"aligned": Aligned, "ref": kernel("Ref", general=True)})
    assert t.key_for("gemm", call(M=16, K=16)) == "aligned"
    assert t.key_for("gemm", call(M=32, K=16)) == "ref"  # applies refuses
    assert t.key_for("gemm", call(M=16, K=12)) == "ref"  # refusal refuses


def test_applies_reads_dtype_names_and_device_facts():
    t = table({"half": kernel("Half", applies="dtype in ('float16', 'bfloat16')"),
               "ref": kernel("Ref", general=True)})
    assert t.key_for("gemm", call(dtype=torch.bfloat16)) == "half"
    assert t.key_for("gemm", call(dtype=torch.float32)) == "ref"
    cuda = frozenset({"cuda"})
    t = table({"big_smem": kernel("BigSmem", devices=cuda, applies="arch >= 90 and M >= 64"),
               "ref": kernel("Ref", devices=cuda, general=True)})
    assert t.key_for("gemm", call(M=64, device=CUDA0), arch=90) == "big_smem"
    assert t.key_for("gemm", call(M=64, device=CUDA0), arch=80) == "ref"


def test_applies_is_inherited_and_can_be_cleared():
    base = kernel("Base", applies="M <= 16")
    child = type("Child", (base,), {})
    cleared = type("Cleared", (base,), {"applies": None})
    assert child._applies_names == ("M",) and cleared._applies_expr is None
    t = table({"child": child, "cleared": cleared})
    assert t.key_for("gemm", call(M=32)) == "cleared"


def test_general_is_the_fallback():
    t = table({"fast": kernel("Fast", applies="M <= 16"), "ref": kernel("Ref", general=True)})
    assert t.key_for("gemm", call(M=8)) == "fast"  # the general one ranks below
    assert t.key_for("gemm", call(M=64)) == "ref"


def test_preferred_over_chains_are_transitive():
    t = table({"a": kernel("A", applies="M != 1", preferred_over=frozenset({"b"})),
               "b": kernel("B", applies="M != 2", preferred_over=frozenset({"c"})),
               "c": kernel("C")})
    assert t.key_for("gemm", call(M=8)) == "a"   # all three serve
    assert t.key_for("gemm", call(M=1)) == "b"   # a refuses
    assert t.key_for("gemm", call(M=2)) == "a"   # b refuses: a beats c through b
    assert dict(t.preferred_over) == {"a": {"b"}, "b": {"c"}, "c": frozenset()}


def test_worked_table_gqa_decode_batch_1():
    """Reference §9.7's worked table: SM90/KV4096 -> long-context; SM90/512 -> bs1;
    SM80/4096 -> long-context; SM80/512 -> decode (general)."""
    @dataclass(frozen=True)
    class DecodeCall(CallSpec):
        batch: int
        kv_len: int

    class DecodeInterface(KernelInterface):
        request = DecodeCall

        @abc.abstractmethod
        def forward(self, q, k, v):
            """Decode attention."""
    cuda = frozenset({"cuda"})
    kinds = {
        "decode": kernel("Decode", DecodeInterface, devices=cuda, general=True),
        "bs1": kernel("Bs1", DecodeInterface, devices=cuda, supported_archs=[90],
                      applies="batch == 1"),
        "long_context": kernel("LongContext", DecodeInterface, devices=cuda,
                               applies="kv_len >= 2048", preferred_over=frozenset({"bs1"})),
    }
    t = DispatchTable("GQADecodeFwdOp", kinds, {"decode": DecodeInterface})
    cases = {(90, 4096): "long_context", (90, 512): "bs1", (80, 4096): "long_context",
             (80, 512): "decode"}
    for (arch, kv), key in cases.items():
        assert t.key_for("decode", DecodeCall(1, kv, device=CUDA0), arch=arch) == key


def test_no_dependence_on_declaration_order():
    kinds = {"a": kernel("A", applies="M <= 64", preferred_over=frozenset({"b"})),
             "b": kernel("B", applies="K % 8 == 0"), "c": kernel("C", applies="M == 3"),
             "ref": kernel("Ref", general=True)}
    calls = [call(M=m, K=k) for m in (3, 8, 128) for k in (8, 12)]
    expected = [table(kinds).key_for("gemm", c) if not _ambiguous(kinds, c) else "ambiguous"
                for c in calls]
    for order in itertools.permutations(kinds):
        t = table({k: kinds[k] for k in order})
        got = [t.key_for("gemm", c) if not _ambiguous(kinds, c) else "ambiguous" for c in calls]
        assert got == expected, order
        assert t.keys_by_interface["gemm"] == ("a", "b", "c", "ref")


def _ambiguous(kinds, c) -> bool:
    try:
        table(kinds).key_for("gemm", c)
    except DispatchError as exc:
        return "ambiguous" in str(exc)
    return False


# -- entries ---------------------------------------------------------------------------------

class Counted(Kernel, GemmFwdInterface):
    """Counts `entry_for` and factory calls; identity drops M (the kernel takes it in forward)."""

    devices = frozenset({"cpu"})
    entry_calls = 0
    built: list = []
    lock = threading.Lock()
    delay = 0.0

    @classmethod
    def entry_for(cls, call):
        with cls.lock:
            cls.entry_calls += 1
        identity = (call.N, call.K, call.dtype, call.device)

        def factory():
            time.sleep(cls.delay)  # widen the window for a race
            with cls.lock:
                cls.built.append(identity)
            return cls(call)
        return identity, factory

    def forward(self, a, b):
        return a @ b

    @classmethod
    def fresh(cls, delay=0.0):
        return type("Counted", (cls,), {"entry_calls": 0, "built": [], "delay": delay})


def test_each_distinct_call_spec_is_looked_up_once():
    impl = Counted.fresh()
    t = table({"k": impl})
    first = t.kernel_for("gemm", call(M=8))
    for _ in range(5):
        assert t.kernel_for("gemm", call(M=8)) is first  # equal, not identical, call specs
    assert impl.entry_calls == 1 and len(impl.built) == 1


def test_entries_are_shared_by_identity():
    impl = Counted.fresh()
    t = table({"k": impl})
    a, b = t.kernel_for("gemm", call(M=8)), t.kernel_for("gemm", call(M=16))
    c = t.kernel_for("gemm", call(M=8, N=16))
    assert a is b and c is not a
    assert impl.entry_calls == 3 and len(impl.built) == 2
    entries = t.built_entries("gemm")
    assert set(entries) == {(impl, (8, 8, torch.float16, CPU)), (impl, (16, 8, torch.float16, CPU))}
    assert list(t.iter_kernels()) == [a, c]
    assert len(t._entries_by_call) == 3


def test_default_entry_for_is_the_whole_call_spec():
    t = table({"a": kernel("A")})
    k = t.kernel_for("gemm", call())
    assert isinstance(k, Kernel) and k.call == call()
    assert list(t.built_entries("gemm")) == [(t.kernel_types["a"], call())]
    assert t.kernel_for("gemm", call(M=9)) is not k


def test_reset_drops_entries():
    impl = Counted.fresh()
    t = table({"k": impl})
    first = t.kernel_for("gemm", call())
    t.reset()
    assert list(t.iter_kernels()) == [] and t.built_entries("gemm") == {}
    assert t.kernel_for("gemm", call()) is not first and len(impl.built) == 2


def test_iter_kernels_over_interfaces():
    t = table({"f": kernel("F"), "b": kernel("B", GemmBwdInterface)},
              {"gemm": GemmFwdInterface, "bwd": GemmBwdInterface})
    f, b = t.kernel_for("gemm", call()), t.kernel_for("bwd", call())
    assert f is not b and list(t.iter_kernels()) == [f, b]


def test_request_tune_reaches_built_and_later_entries():
    tuned = []
    impl = kernel("Tunable", request_tune=lambda self: tuned.append(self))
    t = table({"a": impl})
    early = t.kernel_for("gemm", call(M=1))
    t.request_tune()
    assert tuned == [early]
    late = t.kernel_for("gemm", call(M=2))
    assert tuned == [early, late] and t.tune_requested
    t.reset()
    assert t.tune_requested  # tuning is running state: a failed call does not undo it


def test_factory_must_build_a_kernel_and_identity_must_hash():
    bad = kernel("Bad", entry_for=classmethod(lambda cls, call: (call, lambda: "nope")))
    with raises(KernelContractError, OP, "Bad.entry_for built 'nope', not a Kernel"):
        table({"a": bad}).kernel_for("gemm", call())
    unhashable = kernel("Unhashable", entry_for=classmethod(lambda cls, c: ([1], lambda: cls(c))))
    with raises(KernelContractError, "Unhashable.entry_for gives an unhashable identity"):
        table({"a": unhashable}).kernel_for("gemm", call())


def test_a_failed_selection_leaves_no_entry():
    t = table({"a": kernel("A", applies="M <= 16")})
    with pytest.raises(DispatchError):
        t.kernel_for("gemm", call(M=32))
    assert t._entries_by_call == {}
    assert t.kernel_for("gemm", call(M=8)) is t.kernel_for("gemm", call(M=8))


def test_hits_read_no_device_facts(monkeypatch):
    reads = []
    original = DeviceFacts.of
    monkeypatch.setattr(DeviceFacts, "of", staticmethod(lambda d: reads.append(d) or original(d)))
    t = table({"h": kernel("H", applies="arch == 90"), "ref": kernel("Ref", general=True)})
    t.kernel_for("gemm", call())
    assert reads == [CPU]
    for _ in range(3):
        t.kernel_for("gemm", call())
    assert reads == [CPU]


def test_kernel_for_values_is_kernel_for_without_a_call_spec_on_hits(monkeypatch):
    t = table({"small": kernel("Small", applies="M <= 16", preferred_over=frozenset({"ref"})),
               "ref": kernel("Ref", general=True)})
    k = t.kernel_for_values("gemm", CPU, 8, 8, 8, torch.float16)
    assert k is t.kernel_for("gemm", call()) and type(k).__name__ == "Small"
    big = t.kernel_for_values("gemm", CPU, 32, 8, 8, torch.float16)
    assert type(big).__name__ == "Ref" and big.call == call(M=32)
    built = []
    monkeypatch.setattr(GemmCall, "__init__", lambda *a, **kw: built.append(a))
    assert t.kernel_for_values("gemm", CPU, 8, 8, 8, torch.float16) is k  # a hit builds nothing
    assert built == []
    monkeypatch.undo()
    with raises(KernelContractError, "kernel_for_values('gemm') needs a device"):
        t.kernel_for_values("gemm", None, 8, 8, 8, torch.float16)
    t.reset()  # a failed selecting call: value keys go with the entries
    assert t._entries_by_values == {}
    assert t.kernel_for_values("gemm", CPU, 8, 8, 8, torch.float16) is not k


def test_kernel_for_values_with_an_unhashable_value_names_it():
    t = table({"s": kernel("S", ShapeFwdInterface)}, {"shape": ShapeFwdInterface})
    with raises(KernelContractError, "shape"):
        t.kernel_for_values("shape", CPU, [2, 3])


def test_missing_device_is_filled_with_the_current_cuda_device(monkeypatch):
    monkeypatch.setattr(dispatch, "_cuda_available", lambda: True)
    monkeypatch.setattr(dispatch, "_current_cuda_index", lambda: 0)
    monkeypatch.setattr(dispatch, "_device_context", lambda device: nullcontext())  # no GPU here
    impl = Counted.fresh()
    impl.devices = frozenset({"cuda"})
    t = table({"on_cpu": kernel("OnCpu"), "on_cuda": impl})
    assert t.key_for("gemm", GemmCall(8, 8, 8), arch=90) == "on_cuda"
    k = t.kernel_for("gemm", GemmCall(8, 8, 8))
    assert k.call.device == CUDA0
    # later calls hit: without device (kept under the device index) and with it
    assert t.kernel_for("gemm", GemmCall(8, 8, 8)) is k
    assert t.kernel_for("gemm", GemmCall(8, 8, 8, device=CUDA0)) is k
    assert impl.entry_calls == 1 and len(t._entries_by_call) == 2
    # filling the device keeps stated facts, so kernel_for still refuses them
    with raises(KernelContractError, "this call spec states ['arch']"):
        t.kernel_for("gemm", GemmCall(8, 8, 9).with_facts(arch=90))


# -- threads ---------------------------------------------------------------------------------

def _race(t: DispatchTable, calls: list[GemmCall], repeat: int = 20) -> list[list]:
    barrier = threading.Barrier(len(calls))
    results: list[list] = [[] for _ in calls]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(repeat):
                results[i].append(t.kernel_for("gemm", calls[i]))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return results


def test_concurrent_first_calls_build_each_entry_once():
    impl = Counted.fresh(delay=0.002)
    t = table({"k": impl})
    calls = [call(N=8 * (i + 1)) for i in range(16)]  # 16 distinct identities
    results = _race(t, calls)
    assert sorted(impl.built) == sorted((c.N, c.K, c.dtype, c.device) for c in calls)
    assert impl.entry_calls == 16
    for i, got in enumerate(results):
        assert all(k is got[0] for k in got) and got[0].call == calls[i]


def test_concurrent_calls_with_one_identity_share_one_entry():
    impl = Counted.fresh(delay=0.002)
    t = table({"k": impl})
    results = _race(t, [call(M=i + 1) for i in range(16)])  # distinct specs, one identity
    assert len(impl.built) == 1
    assert len({id(k) for got in results for k in got}) == 1
    assert len(t._entries_by_call) == 16


def test_slotted_call_specs_keep_stated_facts():
    @dataclass(frozen=True, slots=True)
    class SlotCall(CallSpec):
        M: int

    stated = SlotCall(3).with_facts(arch=80)
    assert stated.arch == 80 and stated.stated_facts() == ["arch"] and stated == SlotCall(3)
    on_cuda = dispatch._on_device(stated, CUDA0)
    assert on_cuda.device == CUDA0 and on_cuda.arch == 80
