"""Kernel dispatch: call specs, kernel interfaces, implementations, and an op's table.

An op picks a kernel *interface* by semantics and hands `kernel_for(interface, call)` a call
spec; dispatch picks exactly one *implementation* of that interface (reference §9.7):

1. availability: the implementation's `devices` and `supported_archs`;
2. applicability: its `applies` expression and its `refusal(call)`;
3. precedence: a `general` implementation ranks below all others; among the rest,
   `preferred_over` (transitively) must leave exactly one. Declaration order never counts.

The winner's `entry_for(call)` gives `(identity, factory)`; the entry (a `Kernel`) is built once
per `(implementation class, identity)` and remembered per call spec, so a repeated call spec
costs one dict lookup.

Device facts (`arch`, `sm_count`, `smem_budget`, `calibration`) are not call spec fields: the
`CallSpec` base derives them from `device` when first read, which happens only on a dispatch
miss. Tests that need a device this machine lacks state them with `call.with_facts(arch=90)`
and ask `key_for`, which selects without building; `kernel_for` refuses stated facts.
"""

from __future__ import annotations

import abc
import enum
import functools
import inspect
import re
import threading
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Collection, Hashable, Iterator, Mapping, Self

import torch

from opspec.schema.errors import EvaluationError, ExpressionError
from opspec.schema.evaluate import evaluate
from opspec.schema.expr import Expr, Name, free_names, walk
from opspec.schema.parse import parse_expr

from . import backend
from .errors import (BackendError, DispatchError, DispatchTableError, KernelContractError,
                     OpNotAvailableError)

__all__ = ["CallSpec", "DeviceFacts", "DispatchTable", "Kernel", "KernelInterface"]

#: The device facts `CallSpec` derives from `device`; no call spec declares them as fields.
FACT_NAMES = ("arch", "sm_count", "smem_budget", "calibration")

_KEY = re.compile(r"[a-z][a-z0-9_]*\Z")


# -- device facts ----------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceFacts:
    """What an implementation may know of the call device beyond its type.

    `arch` is `major * 10 + minor` (90 for sm_90), `smem_budget` the opt-in shared memory per
    block in bytes. All are None off CUDA. `calibration` is reserved for measured device
    ceilings; nothing derives it yet, so it is None unless stated.
    """

    arch: int | None = None
    sm_count: int | None = None
    smem_budget: int | None = None
    calibration: Hashable | None = None

    @staticmethod
    def of(device: torch.device | None) -> "DeviceFacts":
        """The facts of `device`, read from the driver once per device."""
        if device is None or device.type != "cuda":
            return _NO_FACTS
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _cuda_facts(index)


_NO_FACTS = DeviceFacts()


@functools.cache
def _cuda_facts(index: int) -> DeviceFacts:
    props = torch.cuda.get_device_properties(index)
    return DeviceFacts(arch=props.major * 10 + props.minor,
                       sm_count=props.multi_processor_count,
                       smem_budget=getattr(props, "shared_memory_per_block_optin", None))


@functools.cache
def _cuda_available() -> bool:
    # Cached: the hit path asks this for every call spec without a device.
    return torch.cuda.is_available()


def _current_cuda_index() -> int:
    return torch.cuda.current_device()


def _device_context(device: torch.device | None):
    """Where entries are built and tuned: on the call's CUDA device, so allocations land there."""
    if device is not None and device.type == "cuda":
        return torch.cuda.device(device)
    return nullcontext()


# -- call specs and interfaces ---------------------------------------------------------------

@dataclass(frozen=True)
class CallSpec:
    """Immutable facts of one call that implementations read: base of frozen dataclasses.

    Subclasses declare shapes (tuples), dtypes (`torch.dtype`) and semantic parameters as
    fields; `device` is inherited (keyword-only, default None). Every field must be hashable:
    the whole call spec keys the dispatch cache. Device facts are properties, derived from
    `device` on first read (or stated with `with_facts`, for `key_for` only).
    """

    device: torch.device | None = field(default=None, kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = sorted(set(FACT_NAMES) & set(inspect.get_annotations(cls)))
        if declared:
            raise KernelContractError(f"call spec {cls.__qualname__} declares device facts "
                                      f"{declared} as fields; CallSpec derives them from device")

    @property
    def facts(self) -> DeviceFacts:
        """The stated facts, else those of `device` (a driver read, cached per device)."""
        stated = self.__dict__.get("_stated_facts")
        return stated if stated is not None else DeviceFacts.of(self.device)

    arch = property(lambda self: self.facts.arch, doc="Compute capability, e.g. 90; None off CUDA.")
    sm_count = property(lambda self: self.facts.sm_count, doc="Streaming multiprocessors.")
    smem_budget = property(lambda self: self.facts.smem_budget, doc="Shared memory per block.")
    calibration = property(lambda self: self.facts.calibration, doc="Measured ceilings.")

    def with_facts(self, facts: DeviceFacts | None = None, /, **values: Any) -> Self:
        """A copy stating device facts instead of deriving them (for `key_for` in tests).

        `values` update `facts` (or facts this call spec already states). Stated facts are
        not fields: the copy compares and hashes equal to `self`.
        """
        unknown = sorted(set(values) - set(FACT_NAMES))
        if unknown:
            raise KernelContractError(f"{unknown} are not device facts; they are {FACT_NAMES}")
        base = facts or self.__dict__.get("_stated_facts") or _NO_FACTS
        return _clone(self, _stated_facts=replace(base, **values))

    def stated_facts(self) -> list[str]:
        """Names of the device facts stated with `with_facts` (empty when derived)."""
        stated = self.__dict__.get("_stated_facts")
        if stated is None:
            return []
        return [n for n in FACT_NAMES if getattr(stated, n) is not None] or list(FACT_NAMES)


class KernelInterface(abc.ABC):
    """A place where an op calls a kernel: the contract every implementation follows.

    Subclasses set `request` (the call spec type `kernel_for` takes for this interface) and
    declare an abstract `forward` whose docstring states each tensor's shape, dtype, layout,
    device, in-place-ness and the return. Values all implementations agree on are ordinary
    class methods here.
    """

    request: ClassVar[type[CallSpec]]

    @abc.abstractmethod
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel; an interface redeclares this with its own arguments."""


class Kernel(abc.ABC):
    """An implementation: subclass `Kernel` and exactly one kernel interface.

    Its own restrictions live here, not in the op's spec: `devices`, `supported_archs`,
    `applies` (an expression over the request's fields and device facts, e.g.
    `"M <= 16 and K % 8 == 0"`; dtypes read as names like 'bfloat16'), `refusal(call)`,
    `general`, `preferred_over`. The constructor takes only compile-time constants, from
    the call spec; tensors and varying sizes go to `forward`.
    """

    devices: ClassVar[frozenset[str]] = frozenset({"cuda"})
    supported_archs: ClassVar[Collection[int] | None] = None
    applies: ClassVar[str | None] = None
    general: ClassVar[bool] = False
    preferred_over: ClassVar[frozenset[str]] = frozenset()
    autotune_configs: ClassVar[Any] = None

    # `applies` parsed at class definition (names in order of first use): calls never parse.
    _applies_expr: ClassVar[Expr | None] = None
    _applies_names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "applies" in cls.__dict__:
            cls._applies_expr, cls._applies_names = _parse_applies(cls)

    @classmethod
    def refusal(cls, call: CallSpec) -> str | None:
        """Why this implementation does not serve `call`, or None. Overrides end with
        `super().refusal(call)`; never exclude another implementation's range here."""
        return None

    @classmethod
    def entry_for(cls, call: CallSpec) -> tuple[Hashable, Callable[[], "Kernel"]]:
        """`(identity, factory)`: call specs of one identity share one built entry."""
        return call, lambda: cls(call)

    def __init__(self, call: CallSpec) -> None:
        self.call = call

    @abc.abstractmethod
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Accepts every argument of its interface's `forward`, positionally."""

    def request_tune(self) -> None:
        """Tune now if built, else at build; no `autotune_configs` means nothing to tune."""


def _parse_applies(cls: type[Kernel]) -> tuple[Expr | None, tuple[str, ...]]:
    text = cls.__dict__["applies"]
    if text is None:
        return None, ()
    if not isinstance(text, str):
        raise KernelContractError(f"{cls.__qualname__}.applies must be an expression string "
                                  f"or None, got {text!r}")
    try:
        expr = parse_expr(text)
    except ExpressionError as exc:
        raise ExpressionError(f"{cls.__qualname__}.applies `{text}`: {exc.message}",
                              check=exc.check, hint=exc.hint, col=exc.col) from exc
    free = free_names(expr) - {"inf"}
    ordered = dict.fromkeys(n.id for n in walk(expr) if isinstance(n, Name) and n.id in free)
    return expr, tuple(ordered)


def _expr_value(value: Any) -> Any:
    """A call spec value as the expression language sees it."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return tuple(_expr_value(v) for v in value)
    return value


def _refusal(cls: type[Kernel], call: CallSpec) -> str | None:
    """Why `cls` does not serve `call`: its `applies` is false, or its `refusal` says so."""
    if cls._applies_expr is not None:
        env = {name: _expr_value(getattr(call, name)) for name in cls._applies_names}
        try:
            ok = evaluate(cls._applies_expr, env)
        except EvaluationError as exc:
            raise EvaluationError(f"{_qualname(cls)}.applies `{cls.applies}`: {exc}") from exc
        if not isinstance(ok, bool):
            raise EvaluationError(f"{_qualname(cls)}.applies `{cls.applies}` gives {ok!r}, "
                                  f"not a bool")
        if not ok:
            bound = ", ".join(f"{n}={v!r}" for n, v in env.items())
            return f"does not satisfy `applies: {cls.applies}` ({bound})"
    return cls.refusal(call)


# -- the table -------------------------------------------------------------------------------

class DispatchTable:
    """One op instance's implementation table and its entries.

    Construction installs and checks the table (in-tree `kernel_types` plus backend-registered
    kernel types for `op_name`) and builds nothing. `kernel_for` selects and builds on a miss,
    under a lock, and returns the remembered entry on a hit with one dict lookup and no lock.
    """

    def __init__(self, op_name: str, kernel_types: Mapping[str, type[Kernel]],
                 interfaces: Mapping[str, type[KernelInterface]]) -> None:
        self.op_name = op_name
        self.interfaces: Mapping[str, type[KernelInterface]] = MappingProxyType(dict(interfaces))
        installed, keys_by_interface = _install(op_name, kernel_types, self.interfaces)
        self.kernel_types: Mapping[str, type[Kernel]] = MappingProxyType(installed)
        self.keys_by_interface: Mapping[str, tuple[str, ...]] = MappingProxyType(keys_by_interface)
        self.preferred_over: Mapping[str, frozenset[str]] = MappingProxyType(
            {key: frozenset(cls.preferred_over) for key, cls in installed.items()})
        self._beats = _preferences(op_name, installed, keys_by_interface)
        self.tune_requested = False  # kept by reset(): tuning is running state, not binding
        self._lock = threading.RLock()
        self.reset()

    # The hit path: keep it to one dict lookup.
    def kernel_for(self, interface: str, call: CallSpec) -> Kernel:
        """The entry serving `call` at `interface`, selected and built on first sight."""
        if call.device is None and _cuda_available():
            return self._on_current_device(interface, call)
        try:
            return self._entries_by_call[(interface, call)]
        except (KeyError, TypeError):  # TypeError: an unhashable field; the miss path names it
            return self._miss(interface, call)

    def kernel_for_values(self, interface: str, device: torch.device, *values: Any) -> Kernel:
        """`kernel_for(interface, request(*values, device=device))`, with `request` the
        interface's call spec class, whose fields `values` are in declaration order. A hit
        is one dict lookup on the values themselves: no call spec is built (building and
        hashing one was about a third of an eager call's dispatch time on tiny inputs).
        `device` must be a device, not None (None means the current CUDA device, which a
        key of values could not follow: use `kernel_for`)."""
        key = (interface, device, values)
        try:
            return self._entries_by_values[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value: kernel_for's miss path names it
            return self.kernel_for(interface, self._request(interface)(*values, device=device))
        if device is None:
            raise KernelContractError(f"{self.op_name}: kernel_for_values({interface!r}) needs "
                                      "a device; use kernel_for for a call spec without one")
        kernel = self.kernel_for(interface, self._request(interface)(*values, device=device))
        self._entries_by_values[key] = kernel
        return kernel

    def _on_current_device(self, interface: str, call: CallSpec) -> Kernel:
        """`kernel_for` of a call spec without device, on the current CUDA device.

        Its entry is also kept under `(interface, call, device index)`, so a hit costs one
        device query and one lookup instead of a copy of the call spec with its device filled.
        """
        index = _current_cuda_index()
        try:
            return self._entries_by_call[(interface, call, index)]
        except (KeyError, TypeError):
            filled = _on_device(call, torch.device("cuda", index))
            return self._miss(interface, filled, alias=(interface, call, index))

    def key_for(self, interface: str, call: CallSpec, facts: DeviceFacts | None = None,
                **values: Any) -> str:
        """The key `kernel_for` would select for `call`, building nothing.

        Takes device facts, so selection can be tested for devices this machine lacks:
        stated on the call (`call.with_facts(arch=90)`), or here, as a `DeviceFacts` and/or
        by name (`key_for("gemm", call, arch=90, sm_count=132)`, same as `with_facts`).
        """
        if facts is not None or values:
            call = call.with_facts(facts, **values)
        if call.device is None and _cuda_available():
            call = _on_device(call, torch.device("cuda", _current_cuda_index()))
        self._check_call(interface, call, facts_stated_ok=True)
        return self._select(interface, call)

    def reset(self) -> None:
        """Drop every entry (a selecting call failed); the next call selects and builds again."""
        with self._lock:
            # New dicts, not clear(): a concurrent hit may still read the old one.
            # Keys: (interface, call); and (interface, call, index) for a call spec without
            # device on CUDA device `index` (see _on_current_device).
            self._entries_by_call: dict[tuple, Kernel] = {}
            self._entries_by_values: dict[tuple, Kernel] = {}  # see kernel_for_values
            self._built_entries: dict[str, dict[tuple[type, Hashable], Kernel]] = {
                name: {} for name in self.interfaces}
            self._build_devices: dict[int, torch.device | None] = {}

    def built_entries(self, interface: str) -> Mapping[tuple[type, Hashable], Kernel]:
        """The entries built for `interface`, by `(implementation class, identity)`."""
        self._request(interface)
        return MappingProxyType(dict(self._built_entries[interface]))

    def iter_kernels(self) -> Iterator[Kernel]:
        """Every built entry, each once: interfaces in declaration order, then build order."""
        seen: set[int] = set()
        for entries in list(self._built_entries.values()):
            for kernel in list(entries.values()):
                if id(kernel) not in seen:
                    seen.add(id(kernel))
                    yield kernel

    def request_tune(self) -> None:
        """Ask every built entry to tune, and every entry built later right after its build."""
        with self._lock:
            self.tune_requested = True
            kernels = [(k, self._build_devices.get(id(k))) for k in self.iter_kernels()]
        for kernel, device in kernels:
            with _device_context(device):
                kernel.request_tune()

    # -- the miss path ---------------------------------------------------------------------

    def _miss(self, interface: str, call: CallSpec, alias: tuple | None = None) -> Kernel:
        self._check_call(interface, call, facts_stated_ok=False)
        with self._lock:
            # Another thread may have built it while this one waited for the lock.
            kernel = self._entries_by_call.get((interface, call))
            if kernel is None:
                kernel = self._select_and_build(interface, call)
                self._entries_by_call[(interface, call)] = kernel
            if alias is not None:
                self._entries_by_call[alias] = kernel
            return kernel

    def _select_and_build(self, interface: str, call: CallSpec) -> Kernel:
        """The entry of the implementation selected for `call`, shared by build identity."""
        cls = self.kernel_types[self._select(interface, call)]
        identity, factory = cls.entry_for(call)
        slot = (cls, identity)
        try:
            kernel = self._built_entries[interface].get(slot)
        except TypeError as exc:
            raise KernelContractError(f"{self.op_name}: {_qualname(cls)}.entry_for gives an "
                                      f"unhashable identity: {exc}") from exc
        if kernel is None:
            kernel = self._build(cls, factory, call.device)
            self._built_entries[interface][slot] = kernel
        return kernel

    def _build(self, cls: type[Kernel], factory: Callable[[], Kernel],
               device: torch.device | None) -> Kernel:
        with _device_context(device):
            kernel = factory()
            if not inherits(type(kernel), Kernel):
                raise KernelContractError(f"{self.op_name}: the factory of {_qualname(cls)}"
                                          f".entry_for built {kernel!r}, not a Kernel")
            if self.tune_requested:
                kernel.request_tune()
        self._build_devices[id(kernel)] = device
        return kernel

    def _request(self, interface: str) -> type[CallSpec]:
        kernel_interface = self.interfaces.get(interface)
        if kernel_interface is None:
            raise OpNotAvailableError(f"{self.op_name} has no kernel interface {interface!r}; "
                                      f"its interfaces: {sorted(self.interfaces)}")
        return kernel_interface.request

    def _check_call(self, interface: str, call: CallSpec, *, facts_stated_ok: bool) -> None:
        request = self._request(interface)
        where = f"{self.op_name}: kernel_for({interface!r})"
        if type(call) is not request:
            raise KernelContractError(f"{where} takes a {request.__name__} call spec, "
                                      f"got {type(call).__name__}")
        for f in fields(call):
            value = getattr(call, f.name)
            try:
                hash(value)
            except TypeError as exc:
                raise KernelContractError(
                    f"{where}: {request.__name__} cannot key a dispatch cache: field "
                    f"{f.name} is a {type(value).__qualname__} ({exc}); use a tuple") from exc
        if call.device is not None and not isinstance(call.device, torch.device):
            raise KernelContractError(f"{where}: device must be a torch.device or None, got "
                                      f"{call.device!r}")
        if not facts_stated_ok and call.stated_facts():
            raise KernelContractError(f"{where}: this call spec states {call.stated_facts()}; "
                                      f"device facts derive from device (key_for takes them)")

    def _select(self, interface: str, call: CallSpec) -> str:
        """The one implementation serving `call`: availability, applicability, precedence."""
        keys = self.keys_by_interface[interface]
        # No device means no accelerator (kernel_for fills CUDA's): the host runs the call.
        device_type = call.device.type if call.device is not None else "cpu"
        if not any(device_type in self.kernel_types[k].devices for k in keys):
            raise OpNotAvailableError(
                f"{self.op_name}'s in-tree kernels do not run on {device_type}; known targets "
                f"for this op: {backend.registered_targets(self.op_name)}")
        reasons: dict[str, str] = {}
        serving = []
        for key in keys:
            reason = _unavailable(self.kernel_types[key], device_type, call) or \
                _refusal(self.kernel_types[key], call)
            if reason:
                reasons[key] = reason
            else:
                serving.append(key)
        if not serving:
            detail = "; ".join(f"{k}: {r}" for k, r in reasons.items())
            raise DispatchError(f"{self.op_name}: no implementation serves this call: {detail} "
                                f"[interface {interface!r}, {call!r}]")
        return self._winner(interface, call, serving)

    def _winner(self, interface: str, call: CallSpec, serving: list[str]) -> str:
        ranked = [k for k in serving if not self.kernel_types[k].general] or serving
        best = [k for k in ranked if not any(k in self._beats[o] for o in ranked)]
        if len(best) == 1:
            return best[0]
        raise DispatchError(
            f"{self.op_name}: dispatch is ambiguous: keys {_and(best)} "
            f"{'both' if len(best) == 2 else 'all'} serve this call; declare preferred_over "
            f"[interface {interface!r}, {call!r}]")


def _on_device(call: CallSpec, device: torch.device) -> CallSpec:
    # Keeps stated facts: replace() would drop them and let kernel_for accept them.
    return _clone(call, device=device)


def _clone(call: CallSpec, **changes: Any) -> Any:
    """A copy of `call` with `changes` (fields or `_stated_facts`), keeping stated facts.

    Not copy.copy: the state of a `slots=True` dataclass holds only its fields.
    """
    new = object.__new__(type(call))
    for f in fields(call):
        object.__setattr__(new, f.name, changes.pop(f.name, getattr(call, f.name)))
    stated = changes.pop("_stated_facts", call.__dict__.get("_stated_facts"))
    if stated is not None:
        object.__setattr__(new, "_stated_facts", stated)
    return new


def _unavailable(cls: type[Kernel], device_type: str, call: CallSpec) -> str | None:
    if device_type not in cls.devices:
        return f"runs on {sorted(cls.devices)}, not {device_type}"
    if cls.supported_archs is not None and call.arch not in cls.supported_archs:
        return f"supported_archs {sorted(cls.supported_archs)} exclude arch {call.arch}"
    return None


# -- installing a table: the construction-time contract (§9.2) -------------------------------

def _install(op: str, kernel_types: Mapping[str, type[Kernel]],
             interfaces: Mapping[str, type[KernelInterface]]
             ) -> tuple[dict[str, type[Kernel]], dict[str, tuple[str, ...]]]:
    """Merge backend kernel types into `kernel_types`, check, and group keys by interface."""
    for name, kernel_interface in interfaces.items():
        _check_interface(op, name, kernel_interface)
    if len(set(interfaces.values())) < len(interfaces):
        raise DispatchTableError(f"{op}: interfaces name one kernel interface twice")
    extra = backend.registered_kernel_types(op)
    reused = sorted(set(extra) & set(kernel_types))
    if reused:
        raise BackendError(
            f"{op}: backend kernel types cannot reuse keys it has: "
            + ", ".join(f"{k} ({_qualname(extra[k])})" for k in reused))
    installed = {**kernel_types, **extra}
    keys: dict[str, list[str]] = {name: [] for name in interfaces}
    orphans = []
    for key, cls in installed.items():
        if not (isinstance(key, str) and _KEY.match(key)):
            raise DispatchTableError(f"{op}: kernel type key {key!r} is not snake_case")
        if not inherits(cls, Kernel):
            raise KernelContractError(f"{op}: key {key!r}: {cls!r} does not inherit Kernel")
        owned = [name for name, i in interfaces.items() if inherits(cls, i)]
        if not owned and interfaces and not inherits(cls, KernelInterface):
            raise KernelContractError(f"{op}: key {key!r}: {_qualname(cls)} does not implement "
                                      f"{' or '.join(i.__name__ for i in interfaces.values())}")
        if not owned:
            orphans.append(key)
            continue
        if len(owned) > 1:
            raise KernelContractError(f"{op}: key {key!r}: {_qualname(cls)} implements more "
                                      f"than one of its kernel interfaces: {owned}")
        _check_kernel(op, key, cls, interfaces[owned[0]])
        keys[owned[0]].append(key)
    if orphans:
        hint = "; declare interfaces" if not interfaces else ""
        raise DispatchTableError(f"{op}: keys {orphans} implement none of its kernel interfaces "
                                 f"{sorted(interfaces)}{hint}")
    # Sorted: messages and selection never depend on declaration order.
    return installed, {name: tuple(sorted(ks)) for name, ks in keys.items()}


def _check_interface(op: str, name: str, kernel_interface: Any) -> None:
    where = f"{op}: interfaces[{name!r}]"
    if not inherits(kernel_interface, KernelInterface):
        raise KernelContractError(f"{where} = {kernel_interface!r} is not a KernelInterface")
    request = getattr(kernel_interface, "request", None)
    if not (isinstance(request, type) and issubclass(request, CallSpec)):
        raise KernelContractError(f"{where}: {kernel_interface.__name__}.request must be a "
                                  f"CallSpec subclass, got {request!r}")
    if kernel_interface.forward is KernelInterface.forward:
        raise KernelContractError(f"{where}: {kernel_interface.__name__} declares no forward")


def _check_kernel(op: str, key: str, cls: type[Kernel],
                  kernel_interface: type[KernelInterface]) -> None:
    where = f"{op}: key {key!r}: {_qualname(cls)}"
    if cls.__abstractmethods__:
        raise KernelContractError(f"{where} leaves {sorted(cls.__abstractmethods__)} abstract")
    # An interface whose forward is not marked abstract would otherwise lend it silently.
    if any(cls.forward is base.__dict__.get("forward") for base in cls.__mro__
           if inherits(base, KernelInterface) and not inherits(base, Kernel)):
        raise KernelContractError(f"{where} does not define forward; it inherits "
                                  f"{kernel_interface.__name__}'s contract")
    for name in ("entry_for", "refusal"):
        if not isinstance(inspect.getattr_static(cls, name), classmethod):
            raise KernelContractError(f"{where}: {name} must be a classmethod")
    if isinstance(cls.devices, str) or not all(isinstance(d, str) for d in cls.devices):
        raise KernelContractError(f"{where}: devices must be a set of device type names, "
                                  f"got {cls.devices!r}")
    archs = cls.supported_archs
    if archs is not None and (isinstance(archs, (str, int))
                              or not all(isinstance(a, int) for a in archs)):
        raise KernelContractError(f"{where}: supported_archs must be None or a collection of "
                                  f"ints such as [80, 90], got {archs!r}")
    if isinstance(cls.preferred_over, str) or not all(isinstance(k, str)
                                                       for k in cls.preferred_over):
        raise KernelContractError(f"{where}: preferred_over must be a set of keys, got "
                                  f"{cls.preferred_over!r}")
    if not _takes(cls.forward, kernel_interface.forward):
        raise KernelContractError(
            f"{where}: forward does not take {kernel_interface.__name__}'s arguments: it "
            f"takes {inspect.signature(cls.forward)}, the interface "
            f"{inspect.signature(kernel_interface.forward)}")
    request = kernel_interface.request
    known = {f.name for f in fields(request)} | set(FACT_NAMES) | {
        n for n in dir(request) if isinstance(inspect.getattr_static(request, n), property)}
    unknown = [n for n in cls._applies_names if n not in known]
    if unknown:
        raise DispatchTableError(f"{where}: applies `{cls.applies}` names {unknown}, which "
                                 f"{request.__name__} lacks; it has {sorted(known)}")


def _takes(impl: Callable[..., Any], contract: Callable[..., Any]) -> bool:
    """Whether `impl` accepts every argument of `contract` as `contract` passes it.

    Positional parameters by name and position, keyword-only ones by name (or `**kwargs`);
    any extra parameter of `impl` has a default. The first parameter (self) is skipped.
    """
    kinds = inspect.Parameter
    want = list(inspect.signature(contract).parameters.values())[1:]
    have = list(inspect.signature(impl).parameters.values())[1:]
    positional = (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    have_pos = [p for p in have if p.kind in positional]
    has_var = {p.kind for p in have} & {kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD}
    want_pos = [p for p in want if p.kind in positional]
    for i, p in enumerate(want_pos):
        if i < len(have_pos) and have_pos[i].name != p.name:
            return False
        if i >= len(have_pos) and kinds.VAR_POSITIONAL not in has_var:
            return False
    if any(p.default is p.empty for p in have_pos[len(want_pos):]):
        return False
    by_name = {p.name: p for p in have if p.kind in (kinds.POSITIONAL_OR_KEYWORD,
                                                     kinds.KEYWORD_ONLY)}
    want_kw = {p.name for p in want if p.kind == kinds.KEYWORD_ONLY}
    if any(n not in by_name for n in want_kw) and kinds.VAR_KEYWORD not in has_var:
        return False
    if any(p.kind == kinds.KEYWORD_ONLY and p.default is p.empty and p.name not in want_kw
           for p in have):
        return False
    # A contract taking *args or **kwargs passes anything: the implementation must too.
    want_var = {p.kind for p in want} & {kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD}
    return want_var <= has_var


def _preferences(op: str, installed: Mapping[str, type[Kernel]],
                 keys_by_interface: Mapping[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
    """Check `general` and `preferred_over`; give each key the keys it beats, transitively."""
    beats: dict[str, frozenset[str]] = {}
    for interface, keys in keys_by_interface.items():
        general = [k for k in keys if installed[k].general]
        if len(general) > 1:
            raise DispatchTableError(
                f"{op}: interface {interface!r} has more than one general implementation: "
                + ", ".join(f"{k} ({_qualname(installed[k])})" for k in general))
        for key in keys:
            cls, prefers = installed[key], frozenset(installed[key].preferred_over)
            if cls.general and prefers:
                raise DispatchTableError(
                    f"{op}: key {key!r}: {_qualname(cls)} is general and declares "
                    f"preferred_over {sorted(prefers)}; a general implementation declares none")
            strangers = sorted((prefers - set(keys)) | (prefers & {key}))
            if strangers:
                raise DispatchTableError(
                    f"{op}: key {key!r}: {_qualname(cls)} prefers {strangers}, which are not "
                    f"other implementations of interface {interface!r}: {list(keys)}")
        graph = {k: sorted(installed[k].preferred_over) for k in keys}
        cycle = _find_cycle(graph)
        if cycle:
            raise DispatchTableError(f"{op}: preferences of interface {interface!r} form a "
                                     f"cycle through {' -> '.join(cycle)}")
        for key in keys:
            beats[key] = frozenset(_reachable(graph, key))
    return beats


def _find_cycle(graph: Mapping[str, list[str]]) -> list[str] | None:
    """One cycle of `graph` as `[a, b, ..., a]`, or None (depth first, keys in sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in graph[node]:
            if state.get(succ) == 1:
                return path[path.index(succ):] + [succ]
            if succ not in state and (found := visit(succ)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _reachable(graph: Mapping[str, list[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = list(graph[start])
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(graph[node])
    return seen


def inherits(cls: object, base: type) -> bool:
    """Whether class `cls` really inherits `base`.

    Read off the MRO, not `issubclass`: kernels must inherit, never register as virtual
    subclasses, and ABCMeta's subclass cache was seen (CPython 3.11) to answer True for a
    class created at the address of a collected one, when tests make many classes.
    """
    return isinstance(cls, type) and base in cls.__mro__


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)
