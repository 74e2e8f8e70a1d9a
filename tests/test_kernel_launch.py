"""opspec.kernels.launch: the fast path's caching, checked against a stand-in for Triton's
JITFunction (the real fast path needs a GPU; the bench verifies every kernel through it)."""

from __future__ import annotations

import types

import pytest

import opspec.kernels.launch as L


class FakeCompiled:
    def __init__(self, spec):
        self.spec = spec
        self.function = object()
        self.packed_metadata = object()
        self.fast_runs: list[tuple] = []

    def run(self, *args):
        self.fast_runs.append(args)


class FakeJIT:
    """Triton's launch protocol as opspec's launch uses it: `kernel[grid](...)` compiles
    (or finds) and launches; `device_caches[device][4]` is the argument binder."""

    def __init__(self):
        self.pre_run_hooks: list = []
        self.device_caches: dict = {}
        self.slow_runs: list[tuple] = []
        self.compiled: dict = {}

    @staticmethod
    def binder(x, n, *, BLOCK, num_warps=4):
        spec = [("*fp16", "D"), ("i32", "D" if n % 16 == 0 else ""), ("constexpr", BLOCK)]
        return {"x": x, "n": n, "BLOCK": BLOCK}, spec, {"num_warps": num_warps}

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.device_caches.setdefault(0, ({}, {}, None, None, self.binder))
            _, spec, opts = self.binder(*args, **kwargs)
            key = str(spec) + str(opts)  # as Triton: a string key
            self.slow_runs.append((grid, args, kwargs))
            return self.compiled.setdefault(key, FakeCompiled(spec))
        return run


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(L, "_ENABLED", True)
    monkeypatch.setattr(L, "_JITFunction", FakeJIT)
    knobs = types.SimpleNamespace(runtime=types.SimpleNamespace(launch_enter_hook=None,
                                                                launch_exit_hook=None))
    monkeypatch.setattr(L, "_knobs", knobs)
    driver = types.SimpleNamespace(get_current_device=lambda: 0,
                                   get_current_stream=lambda device: 1234)
    monkeypatch.setattr(L, "_driver", driver)
    return FakeJIT(), knobs


def test_later_launches_of_one_specialization_skip_triton_run(fake):
    k, _ = fake
    first = L.launch(k, (8,), "x", 32, BLOCK=128)      # builds the binder
    second = L.launch(k, (8,), "x", 32, BLOCK=128)     # keeps the compiled kernel
    third = L.launch(k, (5, 2), "y", 48, BLOCK=128)    # same specialization: native launch
    assert first is second is third
    assert len(k.slow_runs) == 2
    (run,) = third.fast_runs
    # grid padded to three dimensions, the stream, the handles, no metadata or hooks, then
    # every bound argument in signature order
    assert run == (5, 2, 1, 1234, third.function, third.packed_metadata, None, None, None,
                   "y", 48, 128)


def test_a_new_specialization_goes_through_triton_once(fake):
    k, _ = fake
    for _ in range(2):
        L.launch(k, (1,), "x", 32, BLOCK=128)
    L.launch(k, (1,), "x", 33, BLOCK=128)              # n % 16 != 0: another kernel
    L.launch(k, (1,), "x", 33, BLOCK=128, num_warps=8)  # other options: another again
    assert len(k.slow_runs) == 4
    fast = L.launch(k, (1,), "x", 17, BLOCK=128)
    assert fast.spec[1] == ("i32", "") and len(fast.fast_runs) == 1 and len(k.slow_runs) == 4


def test_hooks_and_other_kernel_objects_take_triton_path(fake):
    k, knobs = fake
    for _ in range(3):
        L.launch(k, (1,), "x", 32, BLOCK=128)
    assert len(k.slow_runs) == 2
    knobs.runtime.launch_enter_hook = lambda *a: None  # a profiler
    L.launch(k, (1,), "x", 32, BLOCK=128)
    chain = types.SimpleNamespace(calls=[])  # Triton 3.6's HookChain, empty: no hook
    knobs.runtime.launch_enter_hook = chain
    L.launch(k, (1,), "x", 32, BLOCK=128)
    assert len(k.slow_runs) == 3
    chain.calls.append(lambda *a: None)  # the chain holds a hook
    L.launch(k, (1,), "x", 32, BLOCK=128)
    knobs.runtime.launch_enter_hook = None
    k.pre_run_hooks.append(lambda *a, **kw: None)
    L.launch(k, (1,), "x", 32, BLOCK=128)
    assert len(k.slow_runs) == 5

    class Autotuned(FakeJIT):  # not a plain JITFunction
        pass
    a = Autotuned()
    for _ in range(3):
        L.launch(a, (1,), "x", 32, BLOCK=128)
    assert len(a.slow_runs) == 3


def test_unhashable_specialization_takes_triton_path(fake):
    k, _ = fake
    k.binder = lambda x, n, *, BLOCK: ({"x": x}, [("tuple", [1, 2])], {})
    for _ in range(3):
        L.launch(k, (1,), "x", 32, BLOCK=128)
    assert len(k.slow_runs) == 3


def test_recording_collects_launches(fake):
    k, _ = fake
    with L.recording() as launches:
        L.launch(k, (3,), "x", 32, BLOCK=64, num_warps=2)
    L.launch(k, (3,), "x", 32, BLOCK=64)
    assert launches == [(k, (3,), ("x", 32), {"BLOCK": 64, "num_warps": 2})]


def test_interpreter_disables_the_fast_path():
    import os
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert not L.fast_launch_enabled()
