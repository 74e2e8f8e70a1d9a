"""One place where opspec's kernels launch Triton kernels: ``launch(kernel, grid, *args, **kw)``
does what ``kernel[grid](*args, **kw)`` does, with less host time per call.

Triton's own launch (``JITFunction.run``) spends most of its host time outside the native
launcher: it rebuilds the option set (``debug``, instrumentation) and formats it as a string
for its cache key on every call, re-checks the module globals the kernel read, and asks for
launch metadata. On the H200 host that is about 6 of the 13 µs of a launch (benchmarks/
profile_call.py splits it: the argument binder 2.1 µs, the native launcher 4.9 µs).

Here the first launch of a kernel with a given specialization goes through Triton
(``kernel[grid](...)``, which compiles it or finds it in Triton's caches) and the compiled
kernel is kept under the specialization Triton's binder computes from the arguments (the
dtype of every tensor, 16-byte alignment of every pointer, divisibility by 16 of every
integer and which are 1, every constexpr) and the launch options given. Later launches with
the same specialization call the binder and the native launcher only. What this skips, by
design: Triton's check that globals read by the kernel have not changed since it was
compiled (opspec's kernels read module constants only) and the re-reading of Triton's
``debug`` and instrumentation knobs (read once, at the first launch of each
specialization).

Triton's own path is taken whenever the fast one could differ from it: under Triton's
interpreter, for objects that are not plain ``JITFunction`` instances (autotuners,
heuristics), while launch hooks (profilers) or pre-run hooks are installed, or when the
environment sets ``OPSPEC_TRITON_LAUNCH=triton``.

A launcher that is called again and again with tensors of one layout can go further:
:func:`prepare` fixes one launch (kernel, grid, every argument but the leading tensors, the
options) to the compiled kernel found for it, and the returned :class:`Prepared` replays it
with new tensors, with no argument binding, specialization or cache key at all. It is only
as right as the caller's key: a launcher keeps its ``Prepared`` objects in a
:class:`LaunchMemo` under a key that fixes everything the kernel is specialised on (the
shapes and strides that give the integer arguments, the dtypes, the 16-byte alignment of
every pointer) and everything the launcher derives the frozen arguments from.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

__all__ = ["LaunchMemo", "Prepared", "fast_launch_enabled", "launch", "prepare", "recording"]

try:  # no Triton, or one without these internals: Triton's own path, always
    import triton
    from triton import knobs as _knobs
    from triton.runtime.jit import JITFunction as _JITFunction
except Exception:  # pragma: no cover - depends on the Triton build
    _JITFunction = None
    _knobs = None

from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.schema.settings import triton_launch_prepared

_ENABLED = (_JITFunction is not None and not TRITON_INTERPRETED
            and triton_launch_prepared())
_driver: Any = None  # Triton's active driver, read once it is needed (it initializes CUDA)
_recorded: list | None = None  # set by `recording`
# (id(kernel), device, specialization, options) -> (kernel, its compiled kernel). Not an
# attribute of the JITFunction: Triton 3.6 did not keep one set there.
_compiled: dict[tuple, tuple[Any, Any]] = {}


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[Any, tuple, tuple, dict]]]:
    """Collect ``(kernel, grid, args, kwargs)`` of every ``launch`` in the block (the
    host-overhead benchmark replays them as bare ``kernel[grid](...)`` calls)."""
    global _recorded
    saved, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = saved


def _hooked(hook: Any) -> bool:
    """Whether a Triton launch hook is set: None or an empty ``HookChain`` (Triton 3.6 keeps
    a chain of hooks, empty by default) is none."""
    return bool(getattr(hook, "calls", hook))


def fast_launch_enabled() -> bool:
    """Whether ``launch`` may bypass ``JITFunction.run`` in this process."""
    return _ENABLED


def lookup(kernel: Any, device: Any, binder: Any, args: tuple, kwargs: dict
           ) -> tuple[Any, tuple | None, tuple[Any, Any] | None]:
    """``(bound arguments, cache key, (kernel, compiled kernel) kept under it or None)`` for
    a launch of ``kernel`` on ``device``, ``binder`` being Triton's argument binder for it;
    the key is None for a specialization that cannot key a dict (a tuple argument)."""
    bound, specialization, options = binder(*args, **kwargs)
    key = (id(kernel), device, tuple(specialization), tuple(options.items()))
    try:
        return bound, key, _compiled.get(key)
    except TypeError:
        return bound, None, None


def _require_overlap_choice(kernel: Any, kwargs: dict) -> None:
    """A kernel with a ``PDL`` parameter must be told whether it overlaps: a launch that
    leaves it to the default would quietly never overlap (checked where a specialization is
    first launched, and on every launch under Triton's interpreter, where the tests run)."""
    if "PDL" not in kwargs and "PDL" in getattr(kernel, "arg_names", ()):
        raise ValueError(f"{getattr(kernel, '__name__', kernel)} takes a PDL parameter but its "
                         f"launch passes none: pass **overlap_options(device) "
                         f"(opspec.kernels.pdl)")


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
    """Launch the Triton ``kernel`` on ``grid`` (a tuple of 1 to 3 ints) with ``args`` and
    the constexpr and launch options ``kwargs`` (``num_warps``, ``num_stages``, ...), as
    ``kernel[grid](*args, **kwargs)`` does; returns what it returns (the compiled kernel)."""
    if _recorded is not None:
        _recorded.append((kernel, grid, args, kwargs))
    if kwargs.get("launch_pdl") and not kwargs.get("PDL"):
        # A dependent launch may start before the kernel ahead of it ends: only a kernel
        # that waits for it first (opspec.kernels.pdl.overlap_start) may take one.
        raise ValueError(f"{getattr(kernel, '__name__', kernel)} is launched dependent "
                         f"(launch_pdl=True) without PDL=True: it would not wait for the "
                         f"kernel before it")
    if not _ENABLED or type(kernel) is not _JITFunction or kernel.pre_run_hooks \
            or _hooked(_knobs.runtime.launch_enter_hook) \
            or _hooked(_knobs.runtime.launch_exit_hook):
        _require_overlap_choice(kernel, kwargs)
        return kernel[grid](*args, **kwargs)
    global _driver
    drv = _driver
    if drv is None:
        drv = _driver = triton.runtime.driver.active
    device = drv.get_current_device()
    caches = kernel.device_caches.get(device)
    if caches is None:  # first launch on this device: Triton builds its binder
        _require_overlap_choice(kernel, kwargs)
        return kernel[grid](*args, **kwargs)
    bound, key, held = lookup(kernel, device, caches[4], args, kwargs)
    if key is None:  # an unhashable specialization (a tuple argument): Triton's path
        return kernel[grid](*args, **kwargs)
    if held is None or held[0] is not kernel:
        _require_overlap_choice(kernel, kwargs)
        compiled = kernel[grid](*args, **kwargs)
        if hasattr(compiled, "result"):  # Triton's asynchronous compile mode
            compiled = compiled.result()
        _compiled[key] = (kernel, compiled)  # the kernel too: its id stays its own
        return compiled
    compiled = held[1]
    n = len(grid)
    compiled.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                 drv.get_current_stream(device), compiled.function, compiled.packed_metadata,
                 None, None, None, *bound.values())
    return compiled


class Prepared:
    """One launch of a compiled specialization, replayed with new leading tensors:
    ``prepared(*tensors)`` runs what ``launch(kernel, grid, *tensors, *frozen, **kwargs)``
    would, calling Triton's native launcher directly. It takes Triton's path (and so stays
    right) while a launch hook or a pre-run hook is installed, inside :func:`recording`, and
    when the current device is not the one it was prepared on."""

    __slots__ = ("kernel", "grid", "frozen", "kwargs", "device", "compiled", "grid3", "tail")

    def __init__(self, kernel: Any, grid: tuple[int, ...], frozen: tuple, kwargs: dict,
                 device: Any, compiled: Any, tail: tuple) -> None:
        self.kernel, self.grid, self.frozen, self.kwargs = kernel, grid, frozen, kwargs
        self.device, self.compiled, self.tail = device, compiled, tail
        self.grid3 = tuple(grid) + (1,) * (3 - len(grid))

    def __call__(self, *tensors: Any) -> None:
        kernel = self.kernel
        if _recorded is not None or kernel.pre_run_hooks \
                or _hooked(_knobs.runtime.launch_enter_hook) \
                or _hooked(_knobs.runtime.launch_exit_hook) \
                or _driver.get_current_device() != self.device:
            launch(kernel, self.grid, *tensors, *self.frozen, **self.kwargs)
            return
        c = self.compiled
        g0, g1, g2 = self.grid3
        c.run(g0, g1, g2, _driver.get_current_stream(self.device), c.function,
              c.packed_metadata, None, None, None, *tensors, *self.tail)


def prepare(n_tensors: int, kernel: Any, grid: tuple[int, ...], *args: Any,
            **kwargs: Any) -> Prepared | None:
    """A :class:`Prepared` replay of ``launch(kernel, grid, *args, **kwargs)``, which must
    have just run, with the first ``n_tensors`` arguments left free; None where the fast
    path does not apply (no fast launch in this process, a kernel object that is not a
    plain ``JITFunction``, a specialization not compiled through :func:`launch` yet, or
    arguments Triton's binder does not keep in the order given)."""
    if not _ENABLED or type(kernel) is not _JITFunction or _driver is None:
        return None
    device = _driver.get_current_device()
    caches = kernel.device_caches.get(device)
    if caches is None:
        return None
    bound, key, held = lookup(kernel, device, caches[4], args, kwargs)
    if held is None or held[0] is not kernel:
        return None
    values = tuple(bound.values())
    # The tensors and frozen arguments must be the binder's leading values, in order: the
    # native launcher takes the bound values positionally.
    if len(values) < len(args) or any(v is not a for v, a in zip(values, args)):
        return None
    return Prepared(kernel, grid, args[n_tensors:], kwargs, device, held[1],
                    values[n_tensors:])


class LaunchMemo(dict):
    """``key -> Prepared`` for one launcher, at most ``limit`` entries (a full memo is
    cleared: the keys are shapes, and a workload has few)."""

    def __init__(self, limit: int = 1024) -> None:
        super().__init__()
        self.limit = limit

    def launch(self, key: Any, n_tensors: int, kernel: Any, grid: tuple[int, ...],
               *args: Any, **kwargs: Any) -> Any:
        """``launch(kernel, grid, *args, **kwargs)``, then keep its :func:`prepare` replay
        under ``key``; the caller's next call with ``key`` calls ``self[key](*tensors)``."""
        compiled = launch(kernel, grid, *args, **kwargs)
        if key is not None:
            prepared = prepare(n_tensors, kernel, grid, *args, **kwargs)
            if prepared is not None:
                self.keep(key, prepared)
        return compiled

    def keep(self, key: Any, replay: Any) -> None:
        """Keep ``replay`` (a :class:`Prepared`, or a callable of the same tensors that
        replays several) under ``key``."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = replay
