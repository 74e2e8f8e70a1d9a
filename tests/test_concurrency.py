"""Concurrency: one op instance called from many threads at once.

16 threads call ONE `SiluAndMulFwdOp` (float32 and float16) and ONE `GemmFwdOp` (float16,
decode and tiled shapes) with different small shapes, released together by a barrier. Every
result must match the torch reference; each distinct call spec is selected and built once
(the kernel entry factories are counted); no thread hangs (every join has a timeout);
`last_call`, read meanwhile by another thread, is always a coherent record of one of the
calls made. A class's first use from many threads at once (constructing its first instances:
plan, then code generation) proves its spec once and lowers each branch once.

Triton's interpreter (TRITON_INTERPRET=1, how these kernels run without a GPU) keeps the
launch grid in process-wide state and is not thread-safe: launches are serialized by a lock
here (not on a GPU). Everything of opspec's own (checks, dispatch, records) runs in parallel.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
from collections import Counter

import pytest
import torch

import opspec.ops.codegen as codegen
import opspec.ops.op as op_module
import opspec.ops.specs as specs_module
import opspec.solver.run as run_module
from opspec.kernels import gemm_impl, silu_and_mul_impl
from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.kernels.gemm import GEMV_MAX_M, gemm_reference
from opspec.kernels.silu_and_mul import silu_and_mul_reference
from opspec.ops import GemmFwdOp, SiluAndMulFwdOp

THREADS = 16
TIMEOUT = 60  # seconds for a whole batch of threads; a deadlock fails, it does not hang


@pytest.fixture(autouse=True)
def _serial_interpreter(monkeypatch):
    """Serialize Triton launches under the interpreter (see the module docstring)."""
    if not TRITON_INTERPRETED:
        return
    lock = threading.Lock()

    def locked(fn):
        def run(*args, **kwargs):
            with lock:
                return fn(*args, **kwargs)
        return run

    for module, names in ((silu_and_mul_impl, ("silu_and_mul_triton",)),
                          (gemm_impl, ("gemm_triton", "gemv_launch"))):
        for name in names:
            monkeypatch.setattr(module, name, locked(getattr(module, name)))


def _run_threads(target, n: int = THREADS) -> None:
    """Run `target(i)` in `n` daemon threads released together; re-raise the first error."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i):
        try:
            barrier.wait(TIMEOUT)
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {TIMEOUT} s (a deadlock?): {alive}"
    if errors:
        raise errors[0]


def _count_builds(monkeypatch, op_cls) -> Counter:
    """Count the factory calls of every kernel class of `op_cls`, by (class, identity)."""
    builds: Counter = Counter()
    lock = threading.Lock()
    for cls in op_cls.kernel_types.values():
        real = inspect.getattr_static(cls, "entry_for").__func__

        def entry_for(kcls, call, real=real):
            identity, factory = real(kcls, call)

            def counted():
                with lock:
                    builds[(kcls.__name__, identity)] += 1
                return factory()
            return identity, counted

        monkeypatch.setattr(cls, "entry_for", classmethod(entry_for))
    return builds


def _count_selections(op) -> Counter:
    """Count the misses of `op`'s dispatch table (selection and build), by call spec."""
    table = op._opspec_dispatch
    real = table._select_and_build
    selections: Counter = Counter()

    def select_and_build(interface, call):
        selections[(interface, call)] += 1  # under the table's lock
        return real(interface, call)

    table._select_and_build = select_and_build
    return selections


class _RecordWatcher(threading.Thread):
    """Reads `op.last_call` until stopped; keeps every incoherent record it saw."""

    def __init__(self, op, coherent):
        super().__init__(daemon=True)
        self.op, self.coherent = op, coherent
        self.stop = threading.Event()
        self.reads = 0
        self.bad: list = []

    def run(self):
        while not self.stop.is_set():
            try:
                rec = self.op.last_call
            except RuntimeError:  # no call completed yet
                continue
            self.reads += 1
            problem = self.coherent(rec)
            if problem:
                self.bad.append((problem, rec))


# -- one SiluAndMulFwdOp ------------------------------------------------------------------------

def test_one_silu_and_mul_instance_from_many_threads(monkeypatch):
    builds = _count_builds(monkeypatch, SiluAndMulFwdOp)
    op = SiluAndMulFwdOp()
    selections = _count_selections(op)
    calls_per_thread = 4
    issued: set[tuple[int, int, str]] = set()
    dtypes = (torch.float32, torch.float16)

    def shapes(i):
        rng = random.Random(i)
        return [(rng.randint(0, 6), rng.randint(1, 9), dtypes[(i + k) % 2])
                for k in range(calls_per_thread)]

    for i in range(THREADS):
        issued.update((m, n, str(d).removeprefix("torch.")) for m, n, d in shapes(i))

    def coherent(rec):
        ind = rec.indices
        m, n, t = ind["M"], ind["N"], ind["T"]
        if (m, n, t) not in issued:
            return f"a call never made: {(m, n, t)}"
        if rec.tensors["x"].shape != (m, 2 * n) or rec.tensors["output"].shape != (m, n):
            return f"tensors {rec.tensors} disagree with M={m}, N={n}"
        if {r.dtype for r in rec.tensors.values()} != {t}:
            return f"dtypes {rec.tensors} disagree with T={t}"
        return None

    watcher = _RecordWatcher(op, coherent)
    done = Counter()

    def worker(i):
        g = torch.Generator().manual_seed(i)
        for m, n, dtype in shapes(i):
            x = torch.randn(m, 2 * n, generator=g).to(dtype)
            y = op(x)
            tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.float16 else {}
            torch.testing.assert_close(y, silu_and_mul_reference(x), **tol)
            problem = coherent(op.last_call)
            assert problem is None, problem
            done[i] += 1

    watcher.start()
    try:
        _run_threads(worker)
    finally:
        watcher.stop.set()
        watcher.join(TIMEOUT)
    assert sum(done.values()) == THREADS * calls_per_thread
    assert not watcher.bad, watcher.bad[:3]
    assert watcher.reads > 0
    # One selection per distinct call spec (float32 and float16 on the CPU); one entry per
    # build identity (the Triton kernel's is (dtype, device)).
    assert len(selections) == len(dtypes) and set(selections.values()) == {1}, selections
    assert len(builds) == len(dtypes) and set(builds.values()) == {1}, builds


# -- one GemmFwdOp --------------------------------------------------------------------------------

@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False)])
def test_one_gemm_instance_from_many_threads(monkeypatch, trans_a, trans_b):
    builds = _count_builds(monkeypatch, GemmFwdOp)
    op = GemmFwdOp(trans_a=trans_a, trans_b=trans_b)
    selections = _count_selections(op)
    # A few distinct (M, N, K), decode (M <= 16: gemv) and tiled: each is its own call spec,
    # and the threads share them, so that several threads miss on one call spec at once.
    sizes = [(1, 8, 16), (4, 17, 9), (GEMV_MAX_M, 5, 33), (GEMV_MAX_M + 1, 8, 8),
             (24, 3, 20), (33, 16, 7)]
    calls_per_thread = 3

    def plan(i):
        return [sizes[(i * calls_per_thread + k) % len(sizes)] for k in range(calls_per_thread)]

    def coherent(rec):
        ind = rec.indices
        m, n, k = ind["M"], ind["N"], ind["K"]
        if (m, n, k) not in sizes:
            return f"a call never made: {(m, n, k)}"
        a = (k, m) if trans_a else (m, k)
        b = (n, k) if trans_b else (k, n)
        if (rec.tensors["a"].shape, rec.tensors["b"].shape, rec.tensors["c"].shape) != \
                (a, b, (m, n)):
            return f"tensors {rec.tensors} disagree with M={m}, N={n}, K={k}"
        if rec.branch_key != (("trans_a", trans_a), ("trans_b", trans_b)):
            return f"branch {rec.branch_key}"
        return None

    watcher = _RecordWatcher(op, coherent)

    def worker(i):
        g = torch.Generator().manual_seed(100 + i)
        for m, n, k in plan(i):
            a = torch.randn(*((k, m) if trans_a else (m, k)), generator=g).half()
            b = torch.randn(*((n, k) if trans_b else (k, n)), generator=g).half()
            c = op(a, b)
            torch.testing.assert_close(c, gemm_reference(a, b, trans_a, trans_b),
                                       rtol=1e-2, atol=1e-2)
            problem = coherent(op.last_call)
            assert problem is None, problem

    watcher.start()
    try:
        _run_threads(worker)
    finally:
        watcher.stop.set()
        watcher.join(TIMEOUT)
    assert not watcher.bad, watcher.bad[:3]
    used = {s for i in range(THREADS) for s in plan(i)}
    assert len(used) == len(sizes)
    # Each call spec (one per size here) selected once, and each entry built once.
    assert len(selections) == len(sizes) and set(selections.values()) == {1}, selections
    assert len(builds) == len(sizes) and set(builds.values()) == {1}, builds
    if TRITON_INTERPRETED:
        kinds = Counter(cls for cls, _ in builds)
        assert kinds == {"GemvTritonKernel": 3, "GemmTritonKernel": 3}, kinds


# -- a class's first use ------------------------------------------------------------------------

def test_first_use_of_a_class_from_many_threads(monkeypatch):
    # No proof cache and no plan remembered, so that the first use proves the specs for real.
    monkeypatch.setenv("OPSPEC_NO_CACHE", "1")
    monkeypatch.setattr(specs_module, "_plans", {})

    infos: Counter = Counter()
    lowered: Counter = Counter()
    proofs: Counter = Counter()
    lock = threading.Lock()

    class CountingInfo(op_module._ClassInfo):
        def __init__(self, cls, entry):
            with lock:
                infos[cls] += 1
            time.sleep(0.05)  # as slow as a first use that proves: every thread gets here
            super().__init__(cls, entry)

    real_generate = codegen.generate_branch

    def generate_branch(spec, branch, inputs, ns):
        with lock:
            lowered[(spec.name, branch.combo)] += 1
        return real_generate(spec, branch, inputs, ns)

    real_prove = run_module.prove_manifest

    def prove_manifest(manifest, **kwargs):
        with lock:
            proofs[tuple(manifest.specs)] += 1
        return real_prove(manifest, **kwargs)

    monkeypatch.setattr(op_module, "_ClassInfo", CountingInfo)
    monkeypatch.setattr(codegen, "generate_branch", generate_branch)
    monkeypatch.setattr(run_module, "prove_manifest", prove_manifest)

    # The plans, cold, from every thread at once (defining an op class asks for its plan).
    entries = [GemmFwdOp._opspec_entry, SiluAndMulFwdOp._opspec_entry]
    plans: list = []
    _run_threads(lambda i: plans.append(specs_module.plan_for(entries[i % 2])))
    assert proofs == {("GemmFwdOp",): 1, ("SiluAndMulFwdOp",): 1}, proofs
    assert len({id(p) for p in plans}) == 2  # every thread got the one plan of its spec

    # Fresh classes named like the specs: nothing of theirs is lowered yet.
    fresh_gemm = type("GemmFwdOp", (GemmFwdOp,), {"__module__": __name__})
    fresh_silu = type("SiluAndMulFwdOp", (SiluAndMulFwdOp,), {"__module__": __name__})
    assert fresh_gemm.__dict__["_opspec_info"] is None
    assert fresh_silu.__dict__["_opspec_info"] is None
    assert sum(proofs.values()) == 2  # their plans are those just proven

    layouts = [(False, False), (False, True), (True, False), (True, True)]
    made: list = []

    def worker(i):
        if i >= THREADS - 4:
            made.append(fresh_silu())
        else:
            ta, tb = layouts[i % len(layouts)]
            made.append(fresh_gemm(trans_a=ta, trans_b=tb))

    _run_threads(worker)
    assert len(made) == THREADS
    assert infos == {fresh_gemm: 1, fresh_silu: 1}, infos
    assert sum(proofs.values()) == 2
    assert set(lowered.values()) == {1}, lowered
    gemm_branches = {b.combo for b in fresh_gemm._info().plan.branches if b.excluded_by is None}
    assert {combo for name, combo in lowered if name == "GemmFwdOp"} == gemm_branches
    assert len(gemm_branches) == 4
    # Every instance uses its class's one info and its code.
    info = fresh_gemm.__dict__["_opspec_info"]
    for inst in made:
        cls_info = type(inst).__dict__["_opspec_info"]
        assert all(br.code is cls_info.code.get(br.branch.combo)
                   for br in inst._opspec_branches.values() if br.code is not None)
    # And they work: one call of each instance, from threads again.
    a, b = torch.randn(3, 5).half(), torch.randn(5, 4).half()

    def call(i):
        inst = made[i]
        if type(inst) is fresh_silu:
            x = torch.randn(2, 6)
            torch.testing.assert_close(inst(x), silu_and_mul_reference(x))
        else:
            ta, tb = inst.trans_a, inst.trans_b
            aa, bb = (a.t().contiguous() if ta else a), (b.t().contiguous() if tb else b)
            torch.testing.assert_close(inst(aa, bb), gemm_reference(aa, bb, ta, tb),
                                       rtol=1e-2, atol=1e-2)

    _run_threads(call)
    assert info is fresh_gemm.__dict__["_opspec_info"]


def test_provers_in_threads_do_not_share_a_z3_context(tmp_path):
    # prove_manifest from several threads at once: `fresh_context` swaps z3's process-wide
    # default context, and concurrent proofs used to build terms in each other's contexts
    # (a segfault, or wrong verdicts). Proofs are serialized; the results are the same.
    from opspec.schema.loader import load_paths

    (tmp_path / "toy.yaml").write_text(_TOY)
    m = load_paths([tmp_path], strict=True)

    def key(report):
        return [(s.op, s.verdict, [d.render() for d in s.diagnostics]) for s in report.specs]

    expected = key(run_module.prove_manifest(m))
    got: list = []
    _run_threads(lambda i: got.append(key(run_module.prove_manifest(m))), 8)
    assert got == [expected] * 8


_TOY = """\
AmbiguousFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16]"}
    inputs:
      x: {dtype: T, shape: "[M * N]"}
    outputs:
      y: {dtype: T, shape: "[M, N]"}
  workloads:
  - {label: small}
  roofline: {flops: "1"}
NegativeFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16]"}
    params:
      big: {type: bool}
    inputs:
      x: {dtype: T, shape: "[M, N]"}
    outputs:
      y: {dtype: T, shape: "[M - N]"}
    shape_rules:
    - "not big or M > 4"
  workloads:
  - {label: small}
  roofline: {flops: "1"}
"""
