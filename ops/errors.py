"""Errors of the op runtime: kernel dispatch and backends.

Every class derives from `opspec.schema.errors.OpspecError` and from the builtin error a
PyTorch user expects: a call that nothing can run is a `RuntimeError`, a bad declaration or
registration a `TypeError` or `ValueError`.
"""

from __future__ import annotations

from opspec.schema.errors import OpspecError

__all__ = [
    "AmbiguousTargetError", "BackendError", "DispatchError", "DispatchTableError",
    "KernelContractError", "OpNotAvailableError", "OpspecError", "UnknownTargetError",
]


class OpNotAvailableError(OpspecError, RuntimeError):
    """No implementation of the op can run on the call's device (in-tree or through a target)."""


class DispatchError(OpspecError, RuntimeError):
    """Kernels run on the device, but none serves this call, or several do with no precedence."""


class KernelContractError(OpspecError, TypeError):
    """A kernel class, interface or call spec breaks the typed contract of dispatch.

    Raised when an op's implementation table is installed (not a `Kernel`, no interface,
    `entry_for` not a classmethod, `forward` not taking the interface's arguments) and when
    `kernel_for` receives a call spec it cannot key (wrong type, unhashable, device facts stated).
    """


class DispatchTableError(OpspecError, ValueError):
    """An op's implementation table is inconsistent: keys without an interface, two general
    implementations, `preferred_over` naming a stranger, a preference cycle."""


class BackendError(OpspecError, ValueError):
    """A backend registration is invalid (duplicate key, duplicate builder, bad detector)."""


class UnknownTargetError(BackendError):
    """A target was named (`target=` or the process default) that no backend registered."""


class AmbiguousTargetError(BackendError):
    """Several targets' detectors claim the call device."""
