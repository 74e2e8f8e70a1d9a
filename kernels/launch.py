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
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

__all__ = ["launch", "fast_launch_enabled", "recording"]

try:  # no Triton, or one without these internals: Triton's own path, always
    import triton
    from triton import knobs as _knobs
    from triton.runtime.jit import JITFunction as _JITFunction
except Exception:  # pragma: no cover - depends on the Triton build
    _JITFunction = None
    _knobs = None

from opspec.kernels.devices import TRITON_INTERPRETED

_ENABLED = (_JITFunction is not None and not TRITON_INTERPRETED
            and os.environ.get("OPSPEC_TRITON_LAUNCH", "fast") != "triton")
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


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
    """Launch the Triton ``kernel`` on ``grid`` (a tuple of 1 to 3 ints) with ``args`` and
    the constexpr and launch options ``kwargs`` (``num_warps``, ``num_stages``, ...), as
    ``kernel[grid](*args, **kwargs)`` does; returns what it returns (the compiled kernel)."""
    if _recorded is not None:
        _recorded.append((kernel, grid, args, kwargs))
    if not _ENABLED or type(kernel) is not _JITFunction or kernel.pre_run_hooks \
            or _hooked(_knobs.runtime.launch_enter_hook) \
            or _hooked(_knobs.runtime.launch_exit_hook):
        return kernel[grid](*args, **kwargs)
    global _driver
    drv = _driver
    if drv is None:
        drv = _driver = triton.runtime.driver.active
    device = drv.get_current_device()
    caches = kernel.device_caches.get(device)
    if caches is None:  # first launch on this device: Triton builds its binder
        return kernel[grid](*args, **kwargs)
    bound, specialization, options = caches[4](*args, **kwargs)
    key = (id(kernel), device, tuple(specialization), tuple(options.items()))
    try:
        held = _compiled.get(key)
    except TypeError:  # an unhashable specialization (a tuple argument): Triton's path
        return kernel[grid](*args, **kwargs)
    if held is None or held[0] is not kernel:
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
