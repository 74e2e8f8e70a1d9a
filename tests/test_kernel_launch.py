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


# -- prepared launches ---------------------------------------------------------------------

def test_memo_keeps_a_prepared_replay_once_the_specialization_is_compiled(fake):
    k, _ = fake
    memo = L.LaunchMemo()
    memo.launch(("x", 32), 1, k, (4,), "x", 32, BLOCK=128)  # builds the binder only
    assert memo == {}
    memo.launch(("x", 32), 1, k, (4,), "x", 32, BLOCK=128)  # compiled through launch: kept
    prepared = memo[("x", 32)]
    assert (prepared.frozen, prepared.tail, prepared.grid3) == ((32,), (32, 128), (4, 1, 1))
    prepared("y")
    assert len(k.slow_runs) == 2  # the replay bound nothing and compiled nothing
    (run,) = prepared.compiled.fast_runs
    assert run == (4, 1, 1, 1234, prepared.compiled.function, prepared.compiled.packed_metadata,
                   None, None, None, "y", 32, 128)


def test_a_memo_without_key_only_launches(fake):
    k, _ = fake
    memo = L.LaunchMemo()
    for _ in range(3):
        memo.launch(None, 1, k, (4,), "x", 32, BLOCK=128)
    assert memo == {} and len(k.slow_runs) == 2


def test_a_full_memo_starts_over(fake):
    k, _ = fake
    memo = L.LaunchMemo(limit=2)
    for key in ("a", "a", "b", "c"):
        memo.launch(key, 1, k, (4,), "x", 32, BLOCK=128)
    assert list(memo) == ["c"]


def test_prepared_takes_the_launch_path_under_hooks_recording_or_another_device(fake, monkeypatch):
    k, knobs = fake
    memo = L.LaunchMemo()
    for _ in range(2):
        memo.launch("key", 1, k, (4,), "x", 32, BLOCK=128)
    prepared = memo["key"]
    knobs.runtime.launch_enter_hook = lambda *a: None  # a profiler sees every launch
    prepared("y")
    assert k.slow_runs[-1] == ((4,), ("y", 32), {"BLOCK": 128}) and len(k.slow_runs) == 3
    knobs.runtime.launch_enter_hook = None
    with L.recording() as launches:
        prepared("z")
    assert launches == [(k, (4,), ("z", 32), {"BLOCK": 128})]
    monkeypatch.setattr(L._driver, "get_current_device", lambda: 1)
    prepared("w")  # another current device: Triton's path, which builds that device's binder
    assert k.slow_runs[-1] == ((4,), ("w", 32), {"BLOCK": 128})
    assert prepared.compiled.fast_runs[-1][9] == "z"  # the device-0 replay was not used for w


def test_prepare_refuses_what_it_cannot_replay(fake, monkeypatch):
    k, _ = fake
    for _ in range(2):
        L.launch(k, (4,), "x", 32, BLOCK=128)
    assert L.prepare(1, k, (4,), "x", 32, BLOCK=128) is not None
    assert L.prepare(1, k, (4,), "x", 33, BLOCK=128) is None  # a specialization not compiled
    # a binder that reorders the arguments: the replay could not pass them positionally
    def reordering(x, n, *, BLOCK):
        return {"n": n, "x": x, "BLOCK": BLOCK}, [("i32", "D"), ("*fp16", "D"),
                                                   ("constexpr", BLOCK)], {}
    k.device_caches[0] = ({}, {}, None, None, reordering)
    k.binder = reordering
    for _ in range(2):
        L.launch(k, (4,), "x", 32, BLOCK=128)
    assert L.prepare(1, k, (4,), "x", 32, BLOCK=128) is None
    monkeypatch.setattr(L, "_ENABLED", False)
    assert L.prepare(1, k, (4,), "x", 32, BLOCK=128) is None
