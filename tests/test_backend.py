"""The backend registry: kernel types, targets, target selection, entry point loading."""

from __future__ import annotations

import abc
import copy
import importlib.metadata
import pickle
import sys
import textwrap
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch

from opspec.ops import backend
from opspec.ops.backend import (BUILTIN, TensorSpec, default_target, kernel_builder,
                                load_backends, load_failures, register_detector,
                                register_kernel_builder, register_kernel_type,
                                registered_kernel_types, registered_targets, select_target,
                                set_default_target)
from opspec.ops.dispatch import CallSpec, DispatchTable, Kernel, KernelInterface
from opspec.ops.errors import (AmbiguousTargetError, BackendError, DispatchTableError,
                               UnknownTargetError)

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)
OP = "SoftmaxFwdOp"


@pytest.fixture(autouse=True)
def _isolated():
    saved = backend._STATE.snapshot()
    yield
    backend._STATE.restore(saved)


@contextmanager
def raises(exc_type, *parts):
    with pytest.raises(exc_type) as info:
        yield info
    for part in parts:
        assert part in str(info.value), str(info.value)


@dataclass(frozen=True)
class SoftmaxCall(CallSpec):
    rows: int
    cols: int


class SoftmaxFwdInterface(KernelInterface):
    request = SoftmaxCall

    @abc.abstractmethod
    def forward(self, x):
        """x: [rows, cols] -> softmax over cols."""


class InTree(Kernel, SoftmaxFwdInterface):
    devices = frozenset({"cpu"})
    general = True

    def forward(self, x):
        return x.softmax(-1)


class Narrow(Kernel, SoftmaxFwdInterface):
    """A backend's kernel: serves short rows only and beats the in-tree one there."""

    devices = frozenset({"cpu"})
    applies = "cols <= 128"

    def forward(self, x):
        return x.softmax(-1)


def softmax_table() -> DispatchTable:
    return DispatchTable(OP, {"in_tree": InTree}, {"softmax": SoftmaxFwdInterface})


# -- kernel types ----------------------------------------------------------------------------

def test_registered_kernel_type_joins_later_instances_only():
    before = softmax_table()
    register_kernel_type(OP, "narrow", Narrow)
    after = softmax_table()
    assert registered_kernel_types(OP) == {"narrow": Narrow}
    assert "narrow" not in before.kernel_types and after.kernel_types["narrow"] is Narrow
    assert after.key_for("softmax", SoftmaxCall(4, 64, device=CPU)) == "narrow"
    # calls the backend does not serve stay with the in-tree implementation
    assert after.key_for("softmax", SoftmaxCall(4, 4096, device=CPU)) == "in_tree"
    assert before.key_for("softmax", SoftmaxCall(4, 64, device=CPU)) == "in_tree"


def test_duplicate_kernel_type_key():
    register_kernel_type(OP, "narrow", Narrow)
    with raises(BackendError, OP, "'narrow' is already registered", "Narrow"):
        register_kernel_type(OP, "narrow", InTree)
    register_kernel_type("OtherOp", "narrow", Narrow)  # keys are per op


def test_kernel_type_must_be_a_kernel():
    with raises(BackendError, "register_kernel_type('SoftmaxFwdOp', 'x')", "not a Kernel"):
        register_kernel_type(OP, "x", object)
    with raises(BackendError, "takes an op class name and a key"):
        register_kernel_type(OP, "", Narrow)


def test_kernel_type_reusing_an_in_tree_key_is_refused_at_construction():
    register_kernel_type(OP, "in_tree", Narrow)  # accepted now: the op is not known here
    with raises(BackendError, OP, "reuse keys it has", "in_tree", "Narrow"):
        softmax_table()


def test_kernel_type_is_checked_against_the_ops_interfaces():
    class Elsewhere(KernelInterface):
        request = SoftmaxCall

        @abc.abstractmethod
        def forward(self, x):
            """Another op's contract."""

    class Stray(Kernel, Elsewhere):
        devices = frozenset({"cpu"})

        def forward(self, x):
            return x
    register_kernel_type(OP, "stray", Stray)
    with raises(DispatchTableError, OP, "['stray']", "implement none of its kernel interfaces"):
        softmax_table()


# -- targets: registration -------------------------------------------------------------------

def test_tensor_spec_and_builtin():
    spec = TensorSpec.of(torch.zeros(2, 3, dtype=torch.float16))
    assert spec == (CPU, torch.float16, (2, 3)) and spec.shape == (2, 3)
    assert TensorSpec._fields == ("device", "dtype", "shape")
    assert repr(BUILTIN) == "BUILTIN"
    assert copy.deepcopy(BUILTIN) is BUILTIN and pickle.loads(pickle.dumps(BUILTIN)) is BUILTIN


def test_registered_targets_and_builders():
    build = lambda *inputs, **params: (lambda *a, **k: None)  # noqa: E731
    register_detector("acme", lambda d: d.type == "acme")
    register_kernel_builder(OP, "torch_cpu", build)
    register_kernel_builder("RMSNormFwdOp", "acme", build)
    assert registered_targets() == ["acme", "torch_cpu"]
    assert registered_targets(OP) == ["torch_cpu"]
    assert registered_targets("RMSNormFwdOp") == ["acme"]
    assert registered_targets("NoSuchOp") == []
    assert kernel_builder(OP, "torch_cpu") is build and kernel_builder(OP, "acme") is None


def test_duplicate_registrations():
    register_detector("acme", lambda d: False)
    with raises(BackendError, "target 'acme' already has a detector"):
        register_detector("acme", lambda d: False)
    register_kernel_builder(OP, "acme", lambda *a, **k: None)
    with raises(BackendError, "'acme' already registers a kernel builder for SoftmaxFwdOp"):
        register_kernel_builder(OP, "acme", lambda *a, **k: None)


def test_registrations_must_be_callable_and_named():
    with raises(BackendError, "not callable"):
        register_detector("acme", None)
    with raises(BackendError, "not callable"):
        register_kernel_builder(OP, "acme", 3)
    with raises(BackendError, "non-empty name"):
        register_kernel_builder(OP, "", lambda: None)


def test_default_target():
    assert default_target() is None
    assert set_default_target("acme") is None
    assert default_target() == "acme"
    assert set_default_target(BUILTIN) == "acme" and default_target() is BUILTIN
    with raises(BackendError, "set_default_target takes a target name, BUILTIN or None"):
        set_default_target(3)


# -- targets: selection ----------------------------------------------------------------------

def claims(device_type):
    return lambda device: device.type == device_type


def test_no_detector_claims_means_builtin():
    register_detector("acme", claims("acme"))
    assert select_target(OP, None, CPU) is BUILTIN
    assert select_target(OP, None, None) is BUILTIN  # no device: nothing to detect


def test_one_detector_claims():
    register_detector("torch_cpu", claims("cpu"))
    register_detector("acme", claims("acme"))
    assert select_target(OP, None, CPU) == "torch_cpu"


def test_several_detectors_claim():
    register_detector("torch_cpu", claims("cpu"))
    register_detector("also_cpu", claims("cpu"))
    with raises(AmbiguousTargetError, OP, "['also_cpu', 'torch_cpu'] all claim device cpu"):
        select_target(OP, None, CPU)


def test_explicit_then_default_then_detectors():
    register_detector("torch_cpu", claims("cpu"))
    register_kernel_builder(OP, "other", lambda *a, **k: None)
    set_default_target("other")
    assert select_target(OP, None, CPU) == "other"          # the default beats detection
    assert select_target(OP, "torch_cpu", CPU) == "torch_cpu"  # explicit beats the default
    assert select_target(OP, BUILTIN, CPU) is BUILTIN       # BUILTIN bypasses every backend
    set_default_target(BUILTIN)
    assert select_target(OP, None, CPU) is BUILTIN          # substitution disabled globally
    assert select_target(OP, "torch_cpu", CPU) == "torch_cpu"


def test_unknown_target():
    register_detector("torch_cpu", claims("cpu"))
    with raises(UnknownTargetError, OP,
                "no backend registered target 'nope'; known targets: ['torch_cpu']"):
        select_target(OP, "nope", CPU)
    set_default_target("nope")
    with raises(UnknownTargetError, "target 'nope'"):
        select_target(OP, None, CPU)
    assert issubclass(UnknownTargetError, BackendError)


def test_a_detector_that_raises_is_named():
    def broken(device):
        raise RuntimeError("driver missing")
    register_detector("broken", broken)
    with raises(BackendError, "detector of target 'broken' raised on cpu", "driver missing"):
        select_target(OP, None, CPU)


# -- loading entry points --------------------------------------------------------------------

GOOD = """
    import torch
    from opspec.ops import backend
    LOADS = globals().get("LOADS", 0) + 1
    backend.register_detector("good", lambda d: d.type == "good")
    backend.register_kernel_builder("SoftmaxFwdOp", "good", lambda *a, **k: None)
"""

BAD = """
    from opspec.ops import backend
    from tests_backend_support import Narrow
    backend.register_detector("bad", lambda d: True)
    backend.register_kernel_builder("SoftmaxFwdOp", "bad", lambda *a, **k: None)
    backend.register_kernel_type("SoftmaxFwdOp", "bad_key", Narrow)
    raise ImportError("libacme.so not found")
"""

DUPLICATE = """
    from opspec.ops import backend
    backend.register_detector("dup_only", lambda d: False)
    backend.register_detector("good", lambda d: False)  # taken by the good backend
"""


@pytest.fixture
def entry_points(tmp_path, monkeypatch):
    """Write backend modules to `tmp_path` and expose them as `opspec.backends` entry points."""
    support = type(sys)("tests_backend_support")
    support.Narrow = Narrow
    monkeypatch.setitem(sys.modules, "tests_backend_support", support)
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def install(**sources: str) -> None:
        for name, source in sources.items():
            module = f"opspec_test_backend_{name}_{id(tmp_path)}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            monkeypatch.delitem(sys.modules, module, raising=False)
            names.append((name, module))
        eps = [importlib.metadata.EntryPoint(n, m, backend.ENTRY_POINT_GROUP) for n, m in names]
        monkeypatch.setattr(backend, "_entry_points", lambda: sorted(eps, key=lambda e: e.name))
    backend._STATE.loaded = False
    backend._STATE.failures = {}
    yield install
    for _, module in names:
        sys.modules.pop(module, None)


def test_load_backends_imports_once(entry_points):
    entry_points(good=GOOD)
    load_backends()
    load_backends()
    module = next(m for n, m in sys.modules.items() if n.startswith("opspec_test_backend_good"))
    assert module.LOADS == 1
    assert registered_targets(OP) == ["good"] and load_failures() == {}


def test_a_failing_backend_is_rolled_back(entry_points):
    entry_points(bad=BAD, good=GOOD)
    with pytest.warns(RuntimeWarning, match="'bad'.*rolled back.*libacme.so not found"):
        load_backends()
    assert registered_targets() == ["good"]
    assert registered_kernel_types(OP) == {}
    assert kernel_builder(OP, "bad") is None
    assert load_failures() == {"bad": "ImportError: libacme.so not found"}
    assert softmax_table().kernel_types.keys() == {"in_tree"}


def test_a_backend_with_a_duplicate_registration_is_rolled_back(entry_points):
    entry_points(good=GOOD, zdup=DUPLICATE)  # good loads first (entry points load by name)
    with pytest.warns(RuntimeWarning, match="'zdup'"):
        load_backends()
    assert registered_targets() == ["good"]  # dup_only rolled back; good's detector kept
    assert "already has a detector" in load_failures()["zdup"]
    assert select_target(OP, None, torch.device("meta")) is BUILTIN


def test_registrations_from_other_threads_wait_for_a_load(entry_points):
    entry_points(good=GOOD)
    started, release = threading.Event(), threading.Event()
    original = backend._load_one

    def slow_load(entry):
        started.set()
        release.wait(5)
        original(entry)
    backend._load_one = slow_load
    try:
        loader = threading.Thread(target=load_backends)
        loader.start()
        started.wait(5)
        other = threading.Thread(target=register_detector, args=("late", claims("late")))
        other.start()
        other.join(0.05)
        assert other.is_alive()  # blocked on the registry lock while the backend imports
        release.set()
        loader.join()
        other.join()
    finally:
        backend._load_one = original
    assert registered_targets() == ["good", "late"]
