"""The backend registry: extra kernel implementations, targets, and target selection.

A backend joins opspec in one of two ways (reference §9.8, §9.9):

- `register_kernel_type(op, key, kernel_type)` adds one implementation under a new key of an
  op's kernel interface. It follows that interface's contract and affects op instances
  constructed afterwards; calls it does not serve stay with the in-tree implementations.
- A *target* replaces a whole op: `register_detector(target, detect)` claims devices and
  `register_kernel_builder(op, target, build_kernel)` builds a callable per op that follows the
  op's manifest signature (inputs as `TensorSpec`s, params by name).

Backends are Python distributions exposing an entry point of group `opspec.backends`;
`load_backends()` imports them once, at the first op construction. A backend whose import
fails has every registration it made rolled back, a `RuntimeWarning` issued, and its reason
kept in `load_failures()`.

All registries live in one `_State` object guarded by one re-entrant lock (re-entrant so that
a backend's import, which runs under the lock, can register).
"""

from __future__ import annotations

import copy
import importlib.metadata
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import torch

from .errors import AmbiguousTargetError, BackendError, UnknownTargetError

__all__ = [
    "BUILTIN", "ENTRY_POINT_GROUP", "TensorSpec", "default_target", "kernel_builder",
    "load_backends", "load_failures", "register_detector", "register_kernel_builder",
    "register_kernel_type", "registered_kernel_types", "registered_targets", "select_target",
    "set_default_target",
]

ENTRY_POINT_GROUP = "opspec.backends"


class TensorSpec(NamedTuple):
    """What a target's `build_kernel` learns of one input: no data, only its description."""

    device: torch.device
    dtype: torch.dtype
    shape: tuple[int, ...]

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "TensorSpec":
        return cls(tensor.device, tensor.dtype, tuple(tensor.shape))


class _Builtin:
    """The in-tree implementation as a target: `target=BUILTIN` bypasses every backend."""

    _instance: "_Builtin | None" = None

    def __new__(cls) -> "_Builtin":
        # One object, so `is BUILTIN` holds even after copy or pickling.
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "BUILTIN"

    def __reduce__(self) -> str:
        return "BUILTIN"


BUILTIN = _Builtin()


@dataclass
class _State:
    """Every registry of this module; read and written only under `lock`."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    kernel_types: dict[str, dict[str, type]] = field(default_factory=dict)  # op -> key -> class
    detectors: dict[str, Callable[[torch.device], bool]] = field(default_factory=dict)
    builders: dict[tuple[str, str], Callable[..., Any]] = field(default_factory=dict)
    default: "str | _Builtin | None" = None
    loaded: bool = False
    failures: dict[str, str] = field(default_factory=dict)  # entry point name -> reason
    # While a backend is imported: the undo actions of its registrations, newest last.
    undo: list[Callable[[], None]] | None = None

    def record(self, action: Callable[[], None]) -> None:
        if self.undo is not None:
            self.undo.append(action)

    def snapshot(self) -> dict[str, Any]:
        """A copy of every registry (tests restore it with `restore`)."""
        with self.lock:
            return {name: copy.deepcopy(getattr(self, name)) if name == "kernel_types"
                    else copy.copy(getattr(self, name))
                    for name in ("kernel_types", "detectors", "builders", "default", "loaded",
                                 "failures")}

    def restore(self, saved: dict[str, Any]) -> None:
        with self.lock:
            for name, value in saved.items():
                setattr(self, name, value)
            self.undo = None


_STATE = _State()


# -- implementations -------------------------------------------------------------------------

def register_kernel_type(op: str, key: str, kernel_type: type) -> None:
    """Add `kernel_type` as implementation `key` of op class `op` (its manifest class name).

    The key must be new for the op; a key equal to one of the op's in-tree keys is refused when
    an instance of the op is constructed ("reuse keys it has"), together with the rest of the
    contract (the class implements one of the op's kernel interfaces, and so on).
    """
    from .dispatch import Kernel, inherits  # dispatch imports this module; import on use

    if not (isinstance(op, str) and op and isinstance(key, str) and key):
        raise BackendError(f"register_kernel_type takes an op class name and a key, "
                           f"got {op!r} and {key!r}")
    if not inherits(kernel_type, Kernel):
        raise BackendError(f"register_kernel_type({op!r}, {key!r}): {kernel_type!r} is not a "
                           f"Kernel subclass")
    with _STATE.lock:
        keys = _STATE.kernel_types.setdefault(op, {})
        if key in keys:
            raise BackendError(f"{op}: kernel type key {key!r} is already registered "
                               f"({_qualname(keys[key])}); a backend adds new keys only")
        keys[key] = kernel_type
        _STATE.record(lambda: _STATE.kernel_types[op].pop(key, None))


def registered_kernel_types(op: str) -> dict[str, type]:
    """The implementations backends registered for op class `op`, by key."""
    with _STATE.lock:
        return dict(_STATE.kernel_types.get(op, {}))


# -- targets ---------------------------------------------------------------------------------

def register_detector(target: str, detect: Callable[[torch.device], bool]) -> None:
    """Let `target` claim devices: `detect(device) -> bool`, False (never raising) when foreign."""
    _check_name("register_detector", target)
    if not callable(detect):
        raise BackendError(f"register_detector({target!r}): {detect!r} is not callable")
    with _STATE.lock:
        if target in _STATE.detectors:
            raise BackendError(f"target {target!r} already has a detector; two backends cannot "
                               f"share one target")
        _STATE.detectors[target] = detect
        _STATE.record(lambda: _STATE.detectors.pop(target, None))


def register_kernel_builder(op: str, target: str, build_kernel: Callable[..., Any]) -> None:
    """Register how `target` builds op `op`: `build_kernel(*TensorSpec|None, **params)`."""
    _check_name("register_kernel_builder", op)
    _check_name("register_kernel_builder", target)
    if not callable(build_kernel):
        raise BackendError(f"register_kernel_builder({op!r}, {target!r}): {build_kernel!r} "
                           f"is not callable")
    with _STATE.lock:
        if (op, target) in _STATE.builders:
            raise BackendError(f"target {target!r} already registers a kernel builder for {op}")
        _STATE.builders[(op, target)] = build_kernel
        _STATE.record(lambda: _STATE.builders.pop((op, target), None))


def kernel_builder(op: str, target: str) -> Callable[..., Any] | None:
    """`target`'s builder for op class `op`, or None."""
    with _STATE.lock:
        return _STATE.builders.get((op, target))


def registered_targets(op: str | None = None) -> list[str]:
    """Every registered target, sorted; with `op`, those that register a builder for it."""
    with _STATE.lock:
        if op is not None:
            return sorted(t for (o, t) in _STATE.builders if o == op)
        return sorted(set(_STATE.detectors) | {t for (_, t) in _STATE.builders})


def set_default_target(target: "str | _Builtin | None") -> "str | _Builtin | None":
    """Set the process default target (None: detect per device); return the previous one.

    `BUILTIN` disables substitution globally. A name is checked when a target is selected,
    not here: backends may not be loaded yet.
    """
    if not (target is None or target is BUILTIN or (isinstance(target, str) and target)):
        raise BackendError(f"set_default_target takes a target name, BUILTIN or None, "
                           f"got {target!r}")
    with _STATE.lock:
        previous, _STATE.default = _STATE.default, target
        return previous


def default_target() -> "str | _Builtin | None":
    """The process default target set by `set_default_target`, or None."""
    return _STATE.default


def select_target(op_name: str, explicit: "str | _Builtin | None",
                  device: torch.device | None) -> "str | _Builtin":
    """The target serving an instance of `op_name` on `device`: a registered name or BUILTIN.

    Order: the constructor's `target=` (`explicit`), then the process default, then the
    detectors on `device` (none claims: BUILTIN; several: `AmbiguousTargetError`). A name no
    backend registered is an `UnknownTargetError`. Whether the target builds this op is the
    caller's question (`kernel_builder`), not part of selection.
    """
    for chosen in (explicit, _STATE.default):
        if chosen is None:
            continue
        if chosen is BUILTIN:
            return BUILTIN
        known = registered_targets()
        if chosen not in known:
            raise UnknownTargetError(f"{op_name}: no backend registered target {chosen!r}; "
                                     f"known targets: {known}")
        return chosen
    if device is None:
        return BUILTIN
    with _STATE.lock:
        detectors = sorted(_STATE.detectors.items())
    claims = [target for target, detect in detectors if _claims(target, detect, device)]
    if len(claims) > 1:
        raise AmbiguousTargetError(f"{op_name}: targets {claims} all claim device {device}; "
                                   f"pass target= or call set_default_target")
    return claims[0] if claims else BUILTIN


def _claims(target: str, detect: Callable[[torch.device], bool], device: torch.device) -> bool:
    # The protocol says detectors return False for foreign devices and never raise; one that
    # raises is a broken backend, and naming it beats silently ignoring it.
    try:
        return bool(detect(device))
    except Exception as exc:
        raise BackendError(f"the detector of target {target!r} raised on {device}: {exc!r}; "
                           f"detectors return False for devices they do not serve") from exc


# -- loading ---------------------------------------------------------------------------------

def load_backends() -> None:
    """Import every `opspec.backends` entry point, once per process.

    A failing import (any `Exception`, including a `BackendError` from a duplicate
    registration) rolls back every registration that backend made, warns, and records why.
    """
    if _STATE.loaded:  # the common case: no lock, one attribute read
        return
    with _STATE.lock:
        if _STATE.loaded:
            return
        # Set first, so a backend that constructs an op while importing does not recurse.
        _STATE.loaded = True
        for entry in _entry_points():
            _load_one(entry)


def load_failures() -> dict[str, str]:
    """Backends whose import failed: entry point name -> reason."""
    with _STATE.lock:
        return dict(_STATE.failures)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    # Sorted so that backends load in the same order on every machine.
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def _load_one(entry: importlib.metadata.EntryPoint) -> None:
    _STATE.undo = []
    try:
        entry.load()
    except Exception as exc:
        for action in reversed(_STATE.undo):
            action()
        reason = f"{type(exc).__name__}: {exc}"
        _STATE.failures[entry.name] = reason
        warnings.warn(f"opspec backend {entry.name!r} ({entry.value}) failed to import and its "
                      f"registrations were rolled back: {reason}", RuntimeWarning, stacklevel=3)
    finally:
        _STATE.undo = None


def _check_name(where: str, name: object) -> None:
    if not (isinstance(name, str) and name):
        raise BackendError(f"{where}: expected a non-empty name, got {name!r}")


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
