"""`Op`: the base class of every operator, its two phases and the seven steps of a call.

A subclass is named like its spec. Its constructor assigns the spec's parameters to
attributes of the same names and then calls `super().__init__(target=target)`; its
`forward(<inputs>, [out=None])` launches kernels through `self.kernel_for(...)`. Everything
else — the construction checks, the call checks in the proven order, the output checks,
records, `eval_roofline()` and the `torch.compile` boundary — is generated from the spec.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import weakref
from typing import Any, ClassVar, Mapping

import torch

from opspec.schema import kinds as K
from opspec.schema.errors import (
    EvaluationError, NoCallError, OpspecError, SignatureError, SignatureTypeError, SpecError,
)
from opspec.schema.settings import check_requires as check_requires_setting
from opspec.schema.values import ADTValue
from opspec.ops import codegen
from opspec.ops.backend import (
    BUILTIN, TensorSpec, kernel_builder, load_backends, registered_kernel_types,
    registered_targets, select_target,
)
from opspec.ops.errors import BackendError
from opspec.ops.records import SignatureCall, TensorRecord
from opspec.ops.requires_check import check_requires, requires_checks
from opspec.ops.specs import SpecEntry, find_spec, plan_for

#: torch.dtype -> dtype name, and back.
DTYPE_NAMES: dict[torch.dtype, str] = {}
DTYPES_BY_NAME: dict[str, torch.dtype] = {}
for _n in K.DTYPES:
    _d = getattr(torch, _n, None)
    if isinstance(_d, torch.dtype):
        DTYPE_NAMES[_d] = _n
        DTYPES_BY_NAME[_n] = _d

_INSTANCES: "weakref.WeakValueDictionary[str, Op]" = weakref.WeakValueDictionary()
_instance_counter = itertools.count()
class _CallStack(threading.local):
    # A class default, so that the per-call read on a thread that runs no composite finds
    # None without raising (and catching) an AttributeError.
    stack: list | None = None


_local = _CallStack()
#: Held while a class's `_ClassInfo` is made (its first use): threads that construct the
#: first instances at once used to each make one, lowering (and proving) it once per thread.
_info_lock = threading.RLock()


_is_compiling = torch.compiler.is_compiling
_UNRESOLVED = object()


# -- errors raised by generated code ----------------------------------------------------------

def _bound(loc: Mapping[str, Any]) -> str:
    items = [f"{k[2:]}={_show(v)}" for k, v in loc.items() if k.startswith("i_")]
    return "; bound so far: " + ", ".join(items) if items else ""


def _show(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_show(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def _where(op: "Op", path: str) -> str:
    entry = type(op)._opspec_entry
    pos = entry.loaded.pos(path) if entry is not None else None
    return f" [{path}" + (f" at {pos.file}:{pos.line}]" if pos else "]")


def _check_failed(op: "Op", decls, d: int, expected: Any, got: Any, loc) -> OpspecError:
    decl = decls[d]
    name = type(op).__name__
    if expected is True and got is False:
        # A refinement (the only check generated as True against False): what it read
        # says why it is false (`groups >= 1` with groups=0).
        values = ", ".join(f"{n}={_show(loc[v])}" for n, v in decl.reads if v in loc)
        return SignatureError(f"{name}: {decl.what} does not hold"
                              + (f" with {values}" if values else "")
                              + f"{_bound(loc)}{_where(op, decl.path)}")
    exp = _show(expected)
    if decl.expected and decl.expected != exp:
        src = dict(decl.solved_from).get(decl.expected)
        exp = f"{decl.expected} = {exp}" + (f" (from {src})" if src else "")
    msg = f"{name}: {decl.what}: expected {exp}, got {_show(got)}{_bound(loc)}{_where(op, decl.path)}"
    # The generated code passes the value of the literal 'a torch.Tensor' (no quotes): a
    # non-tensor `out` or output is a type error like a non-tensor input.
    if expected == "a torch.Tensor" or decl.expected == "a torch.Tensor":
        return SignatureTypeError(msg)
    return SignatureError(msg)


def _evaluation_failed(op: "Op", decls, d: int, exc: BaseException, loc) -> OpspecError:
    name = type(op).__name__
    if d < 0:
        return SignatureError(f"{name}: the signature check failed: {exc}")
    decl = decls[d]
    return SignatureError(f"{name}: {decl.what}: `{decl.expected}` raises {type(exc).__name__}: "
                          f"{exc}{_bound(loc)}{_where(op, decl.path)}")


def _namespace() -> dict[str, Any]:
    ns = codegen.base_namespace()
    ns.update({"_Tensor": torch.Tensor, "_DTYPE_NAMES": DTYPE_NAMES, "_OpspecError": OpspecError,
               "_EvaluationError": EvaluationError,
               "_check_failed": _check_failed, "_evaluation_failed": _evaluation_failed,
               "_DTYPES": DTYPES_BY_NAME, "_numel": _numel, "_default_device": _default_device,
               "_shares_storage": _shares_storage, "_is_alias_of": _is_alias_of,
               "_SLOW": _SLOW})
    return ns


#: What a generated fast_ function returns when the call writes nothing (the general path
#: then makes the empty outputs).
_SLOW = object()


# -- per-class state ----------------------------------------------------------------------------

class _ClassInfo:
    """What a class knows once its plan is lowered: inputs, branches, generated code."""

    def __init__(self, cls: type["Op"], entry: SpecEntry):
        self.entry = entry
        spec = entry.spec
        self.spec = spec
        self.plan = plan_for(entry)
        self.inputs = list(spec.inputs)
        self.optional = [i for i, n in enumerate(self.inputs) if spec.inputs[n].optional is True]
        self.has_out = spec.has_out
        self.outputs = list(spec.outputs)
        self.n_inputs = len(self.inputs)
        self.lock = threading.Lock()
        self.code: dict[tuple, codegen.BranchCode] = {}
        self.ns = _namespace()
        #: `requires` checked on each call's contents (OPSPEC_CHECK_REQUIRES): none by default
        self.requires = requires_checks(spec) if check_requires_setting() else ()

    def code_for(self, branch) -> codegen.BranchCode:
        c = self.code.get(branch.combo)
        if c is None:
            with self.lock:
                c = self.code.get(branch.combo)
                if c is None:
                    c = codegen.generate_branch(self.spec, branch, self.inputs, self.ns)
                    self.code[branch.combo] = c
        return c


class _Branch:
    """One call-time branch of one instance: its generated code and construction indices."""

    __slots__ = ("branch", "code", "ind", "error", "written", "present")

    def __init__(self, branch, code, ind, error):
        self.branch = branch
        self.code = code
        self.ind = ind
        self.error = error
        self.written = branch.written
        self.present = frozenset(branch.present)


class Op:
    """Base class of opspec operators. See the module docstring for the contract."""

    manifest: ClassVar[Any] = None
    kernel_types: ClassVar[Mapping[str, type]] = {}
    interfaces: ClassVar[Mapping[str, type]] = {}
    injected_parameters: ClassVar[tuple[str, ...]] = ()
    delegate_types: ClassVar[Mapping[str, type]] = {}
    compile_op_names: ClassVar[tuple[str, ...]] = ()
    dtype: Any = None

    _opspec_entry: ClassVar[SpecEntry | None] = None
    _opspec_info: ClassVar[_ClassInfo | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._opspec_entry = find_spec(cls)
        cls._opspec_info = None
        if cls._opspec_entry is not None:
            spec = cls._opspec_entry.spec
            cls._opspec_param_names = tuple(spec.params)
            if spec.inputs and spec.composition is None and "compile_op_names" not in cls.__dict__:
                from opspec.ops.boundary import install_boundary
                try:
                    install_boundary(cls)
                except SpecError:
                    pass  # a refuted spec: the class still imports; constructing it raises
        else:
            cls._opspec_param_names = ()

    @classmethod
    def _info(cls) -> _ClassInfo:
        info = cls.__dict__.get("_opspec_info")
        if info is not None:
            return info
        with _info_lock:
            info = cls.__dict__.get("_opspec_info")  # another thread may have made it
            if info is not None:
                return info
            if cls._opspec_entry is None:
                from opspec.ops.specs import resolve_manifest_path, spec_problems
                problems = spec_problems(cls)
                if problems:  # the spec is there but has errors: say which, not "no spec"
                    raise SpecError(f"{cls.__name__}: its spec in "
                                      f"{resolve_manifest_path(cls) or 'the bundled manifest'} "
                                      "has errors:\n  " + "\n  ".join(problems))
                raise SpecError(f"{cls.__name__} has no spec in its manifest; an op class is "
                                  "named like its spec (see `Op.manifest`)")
            info = _ClassInfo(cls, cls._opspec_entry)
            cls._opspec_info = info
        return info

    # -- construction ------------------------------------------------------------------------

    def __init__(self, *, target: Any = None) -> None:
        self.target = target
        info = type(self)._info()
        spec = info.spec
        self._opspec_params = {n: self._check_param(n, p) for n, p in spec.params.items()
                               if n not in spec.ctensors}
        self._opspec_ctensors = {n: getattr(self, n, None) for n in spec.ctensors}
        for n, t in spec.ctensors.items():
            if self._opspec_ctensors[n] is None and t.optional is False:
                raise SignatureError(f"{type(self).__name__}: construction-time tensor `{n}` is "
                                     f"required{_where(self, t.path)}")
        self._opspec_branches = self._select_branches(info)
        plain = self._opspec_branches.get(())
        # The branch of every call without optional inputs or `out`, when it has no error.
        self._opspec_plain = plain if plain is not None and plain.error is None else None
        # __call__'s fast path: the input count where it applies, else 0.
        self._opspec_fast = (info.n_inputs if self._opspec_plain is not None
                             and self._opspec_plain.code.fast is not None and not info.optional
                             and not info.has_out and not self.delegate_types
                             and not info.requires
                             and not any(t is not None for t in self._opspec_ctensors.values())
                             else 0)
        self._opspec_key = f"{type(self).__name__}#{next(_instance_counter)}"
        _INSTANCES[self._opspec_key] = self
        self._opspec_last: tuple | None = None
        load_backends()  # entry-point backends join before any table or target is built
        self._opspec_dispatch = None
        if self.kernel_types or self.interfaces or registered_kernel_types(type(self).__name__):
            from opspec.ops.dispatch import DispatchTable
            self._opspec_dispatch = DispatchTable(type(self).__name__, self.kernel_types,
                                                  self.interfaces)
        self._reset_binding()

    # -- binding: the target serving this instance (reference §9.5, §9.9) ---------------------

    def _reset_binding(self) -> None:
        """Back to unselected: the next call that runs an implementation selects again."""
        self._opspec_serving = _UNRESOLVED
        self._opspec_builder = None
        self._opspec_target_kernels: dict[tuple, Any] = {}
        if self._opspec_dispatch is not None:
            self._opspec_dispatch.reset()

    @property
    def serving_target(self) -> Any:
        """None before selection; `BUILTIN` for the in-tree kernels; else the target's name."""
        return None if self._opspec_serving is _UNRESOLVED else self._opspec_serving

    def _select_target(self, device) -> None:
        name = type(self).__name__
        target = select_target(name, self.target, device)
        if target is BUILTIN:
            self._opspec_serving = BUILTIN
            return
        builder = kernel_builder(name, target)
        if builder is None:
            from opspec.ops.errors import OpNotAvailableError
            raise OpNotAvailableError(
                f"target {target!r} registers no kernel builder for {name}; targets that do: "
                f"{registered_targets(name)}. There is no fall back to the in-tree "
                "implementation: those kernels do not run on this target's devices.")
        self._opspec_serving = target
        self._opspec_builder = builder

    def _target_kernel(self, inputs: tuple, device) -> Any:
        key = (device,) + tuple(None if t is None else (t.dtype, tuple(t.shape)) for t in inputs)
        k = self._opspec_target_kernels.get(key)
        if k is None:
            specs = [None if t is None else TensorSpec(t.device, t.dtype, tuple(t.shape))
                     for t in inputs]
            k = self._opspec_builder(*specs, **{n: getattr(self, n) for n in
                                                type(self)._opspec_param_names})
            if not callable(k):
                raise BackendError(f"{type(self).__name__}: the kernel built by target "
                                   f"{self._opspec_serving!r} is not callable")
            self._opspec_target_kernels[key] = k
        return k

    def _check_param(self, name: str, p) -> Any:
        if not hasattr(self, name):
            if p.has_default:
                setattr(self, name, p.default)
            else:
                raise SignatureTypeError(f"{type(self).__name__}: parameter `{name}` was not "
                                         "assigned before Op.__init__")
        v = getattr(self, name)
        ok, norm = _conforms(v, p.kind, type(self)._opspec_entry.spec)
        if not ok:
            raise (SignatureTypeError if norm == "type" else SignatureError)(
                f"{type(self).__name__}: parameter `{name}` has type `{p.type_text}`; got "
                f"{v!r}{_broken(norm)}{_where(self, p.path)}")
        return norm

    def _construction_combo(self, info: _ClassInfo) -> dict[str, Any]:
        out = {}
        for key in info.plan.discriminants:
            if key.startswith("present("):
                n = key[len("present("):-1]
                if n in self._opspec_params:
                    out[key] = self._opspec_params[n] is not None
                elif n in self._opspec_ctensors:
                    out[key] = self._opspec_ctensors[n] is not None
            elif key in self._opspec_params:
                out[key] = self._opspec_params[key]
        return out

    def _select_branches(self, info: _ClassInfo) -> dict[tuple, _Branch]:
        fixed = self._construction_combo(info)
        branches: dict[tuple, _Branch] = {}
        for b in info.plan.branches:
            combo = dict(b.combo)
            if any(not _same(combo.get(k), v) for k, v in fixed.items()):
                continue
            key = tuple(bool(combo.get(f"present({info.inputs[i]})", True)) for i in info.optional)
            if info.has_out:
                key += (bool(combo.get("present(out)")),)
            if b.excluded_by is not None:
                branches[key] = _Branch(b, None, None, SignatureError(
                    f"{type(self).__name__}: this combination of arguments is excluded by "
                    f"`{_decl_text(info, b.excluded_by)}`{_where(self, b.excluded_by)}"))
                continue
            code = info.code_for(b)
            try:
                ind = code.construct(self)
                err = None
            except OpspecError as exc:
                ind, err = None, exc
            branches[key] = _Branch(b, code, ind, err)
        live = [br for br in branches.values() if br.error is None]
        if not live:
            errs = [br.error for br in branches.values() if br.error is not None]
            if errs:
                # Name the reason most branches share: a rule that excludes these parameters
                # on every branch, not one that only some call-time presence would break.
                counts: dict[str, int] = {}
                for e in errs:
                    counts[str(e)] = counts.get(str(e), 0) + 1
                raise max(errs, key=lambda e: counts[str(e)])
            raise SignatureError(f"{type(self).__name__}: no branch of the signature accepts these "
                                 f"parameters ({fixed})")
        return branches

    # -- the call ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compile_op_names and _is_compiling():
            return self._call_boundary(*args, **kwargs)
        if (self._opspec_fast and not kwargs and len(args) == self._opspec_fast
                and self._opspec_serving is BUILTIN and _local.stack is None):
            # The common eager call, the same steps as _run_call without the cases it
            # cannot have: no binding, its one branch, no construction-time tensor, no
            # composite on this thread, the in-tree kernels already selected.
            br = self._opspec_plain
            result = br.code.fast(self, br, *args)  # checks, forward, output checks, record
            if result is not _SLOW:
                return result
        return self._run_call(args, kwargs)

    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, Any]:
        info = type(self)._opspec_info
        n = len(info.inputs)
        if not kwargs and len(args) == n:
            return args, None
        out = kwargs.pop("out", None) if info.has_out else None
        if kwargs or len(args) != n:
            sig = inspect.signature(self.forward)
            try:
                bound = sig.bind(*args, **kwargs, **({"out": out} if info.has_out and out is not None else {}))
            except TypeError as exc:
                raise SignatureTypeError(f"{type(self).__name__}: {exc}") from None
            bound.apply_defaults()
            vals = [bound.arguments.get(name) for name in info.inputs]
            if info.has_out:
                # `out` follows the inputs in forward's parameter list, so a caller may pass it
                # positionally; reading it only from the keywords silently dropped it.
                out = bound.arguments.get("out")
            return tuple(vals), out
        return args, out

    def _branch_for(self, inputs: tuple, out: Any) -> _Branch:
        info = type(self)._opspec_info
        key = tuple(inputs[i] is not None for i in info.optional)
        if info.has_out:
            key += (out is not None,)
        br = self._opspec_branches.get(key)
        if br is None:
            missing = [info.inputs[i] for i, p in zip(info.optional, key) if not p]
            raise SignatureError(f"{type(self).__name__}: no branch of the signature takes this "
                                 f"call (optional inputs omitted: {missing})")
        if br.error is not None:
            raise br.error
        return br

    def check_call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Run only the signature checks of a call; return the solved indices."""
        inputs, out = self._bind(args, dict(kwargs))
        br = self._branch_for(inputs, out)
        return br.code.call(self, *inputs, out, br.ind)[0]

    def _run_call(self, args: tuple, kwargs: dict) -> Any:
        info = type(self)._opspec_info
        if kwargs or info.optional or len(args) != info.n_inputs:
            inputs, out = self._bind(args, kwargs)
            br = self._branch_for(inputs, out)
        else:
            # No optional input and no `out`: the branch key is () (see _branch_for).
            inputs, out = args, None
            br = self._opspec_plain or self._branch_for(inputs, out)
        code = br.code
        ind, device, empty = code.call(self, *inputs, out, br.ind)
        if info.requires:
            check_requires(self, info.requires, dict(zip(info.inputs, inputs)), ind,
                           self._opspec_params, lambda path: _where(self, path))
        for n, t in (self._opspec_ctensors.items() if self._opspec_ctensors else ()):
            if t is not None and device is not None and t.device != device and \
                    info.spec.ctensors[n].device != "cpu":
                # Seed § 4: copied to the call device and written back to the instance, so
                # that forward, which reads its attribute, sees the copy (reference §8.4).
                self._opspec_ctensors[n] = t.to(device)
                setattr(self, n, self._opspec_ctensors[n])
        # Sub-op calls are filed only under a composite (an op with delegate_types) running on
        # this thread; other calls touch no call stack.
        stack = _local.stack
        if stack is None and self.delegate_types:
            stack = _local.stack = []
        if stack is not None:
            stack.append([])
        selecting = False
        try:
            if empty:  # no implementation runs, and the call does not fix the target
                result = self._empty_result(inputs, out, code.outputs(self, ind), device, br, info)
            else:
                if self._opspec_serving is _UNRESOLVED:
                    selecting = True
                    self._select_target(device)
                if self._opspec_serving is not BUILTIN:
                    kernel = self._target_kernel(inputs, device)
                    # unwritten inputs reach a target contiguous (reference §9.9)
                    args = [t if t is None or t.is_contiguous() or n in br.written
                            else t.contiguous() for n, t in zip(info.inputs, inputs)]
                    result = kernel(*args, **({"out": out} if out is not None else {}))
                elif info.has_out:
                    result = self.forward(*inputs, out=out)
                else:
                    result = self.forward(*inputs)
            code.finish(self, result, *inputs, out, ind, device)
        except Exception:
            if selecting:
                self._reset_binding()  # a failed selecting call leaves nothing selected
            raise
        finally:
            subcalls = stack.pop() if stack is not None else ()
        if subcalls and self.delegate_types:
            held = {id(d) for d in self.__dict__.get("_opspec_delegates", {}).values()}
            stray = [type(sub).__name__ for sub, _ in subcalls if id(sub) not in held]
            if stray:
                # Stages are complete or the call fails: rooflines that read stages are never
                # silently wrong (reference §7).
                raise SignatureError(f"{type(self).__name__}: sub-op calls of {stray} are not held "
                                     "through delegate_for; hold every sub-op with delegate_for")
        # Not the result: an op must not keep its last output alive (the record's output
        # entries come from the spec's output types, which the finish checks just matched).
        self._opspec_last = (br, ind, inputs, out, device, subcalls)
        if stack:
            stack[-1].append((self, self._opspec_last))
        return result

    def _empty_result(self, inputs, out, types, device, br, info):
        """Seed § 1: when every written tensor is empty, no implementation runs."""
        spec = info.spec
        res = []
        for name in info.outputs:
            o = spec.outputs[name]
            t = next((t for t in types if t[0] == name), None)
            if t is None:
                res.append(None)
            elif o.alias is not None and o.alias in br.written:
                res.append(inputs[info.inputs.index(o.alias)])
            elif o.buffer == "out" and out is not None:
                res.append(out)
            else:
                res.append(new_output(t, o, device))
        if not info.outputs:
            return None
        return res[0] if len(info.outputs) == 1 else tuple(res)

    # -- records ------------------------------------------------------------------------------

    @property
    def last_call(self) -> SignatureCall:
        if self._opspec_last is None:
            raise NoCallError(f"{type(self).__name__} has completed no call yet")
        return self._record(*self._opspec_last)

    def _record(self, br, ind, inputs, out, device, subcalls) -> SignatureCall:
        info = type(self)._opspec_info
        spec = info.spec
        tensors: dict[str, TensorRecord] = {}
        traffic: dict[str, tuple[int, int]] = {}
        for name, t in zip(info.inputs, inputs):
            if t is not None:
                tensors[name] = TensorRecord(tuple(int(d) for d in t.shape), DTYPE_NAMES[t.dtype])
                decl = spec.inputs[name]
                if name in br.written:
                    traffic[name] = (0 if decl.write_only else 1, 1)
                else:
                    traffic[name] = (1, 0)
        for name, t in self._opspec_ctensors.items():
            if t is not None:
                tensors[name] = TensorRecord(tuple(int(d) for d in t.shape), DTYPE_NAMES[t.dtype])
                traffic[name] = (1, 0)
        for name, shape, dtype in br.code.outputs(self, ind):
            decl = spec.outputs[name]
            tensors[name] = TensorRecord(tuple(int(d) for d in shape), dtype)
            if decl.alias is not None and decl.alias in br.written:
                continue  # the aliased input's write is already counted
            traffic[name] = (0, 1)
        indices = {k: (int(v) if isinstance(v, torch.SymInt) else v) for k, v in ind.items()}
        indices.update({k: v for k, v in self._opspec_params.items()})
        metadata = {n: t for n, t in zip(info.inputs, inputs)
                    if t is not None and spec.inputs[n].values is not None}
        stages: dict[str, list[SignatureCall]] = {}
        for sub, rec in subcalls:
            stage = getattr(sub, "_opspec_stage", None) or type(sub).__name__
            stages.setdefault(stage, []).append(sub._record(*rec))
        return SignatureCall(type(self).__name__, indices, br.branch.combo, device, tensors,
                             traffic, tuple(br.written), out is not None, metadata,
                             {k: tuple(v) for k, v in stages.items()})

    # -- composites: sub-ops held by stage (reference §7) ---------------------------------------

    def delegate_for(self, stage: str, identity: Any, given: "Op | None" = None, /,
                     **params: Any) -> "Op":
        """The sub-op of `stage` built as `identity` — the only way a composite holds one.

        One `(stage, identity)` is built once (`delegate_types[stage](**params)`, inheriting
        this op's `target`) or injected (`given`, which keeps its own target); asking again
        returns the held instance. A sub-op's completed calls are filed under its stage in
        this op's `last_call.stages`."""
        if stage not in self.delegate_types:
            raise SignatureError(f"{type(self).__name__}: no stage {stage!r} in delegate_types "
                                 f"{list(self.delegate_types)}")
        held = self.__dict__.setdefault("_opspec_delegates", {})
        key = (stage, identity)
        sub = held.get(key)
        if sub is not None:
            return sub
        if given is not None:
            for k, other in held.items():
                if other is given:
                    raise SignatureError(f"{type(self).__name__}: this {type(given).__name__} is "
                                         f"already held as {k}; hold each sub-op once")
            sub = given
        else:
            sub = self.delegate_types[stage](**params, target=self.target)
        sub._opspec_stage = stage
        held[key] = sub
        return sub

    def held_delegates(self) -> list["Op"]:
        """The sub-ops held, in stage order."""
        held = self.__dict__.get("_opspec_delegates", {})
        order = list(self.delegate_types)
        return [sub for (stage, _), sub in sorted(held.items(), key=lambda kv: order.index(kv[0][0]))]

    def eval_roofline(self) -> tuple[int, int]:
        from opspec.ops.roofline import eval_roofline
        return eval_roofline(self)

    # -- dispatch -----------------------------------------------------------------------------

    def kernel_for(self, interface: str, call: Any) -> Any:
        if self._opspec_dispatch is None:
            from opspec.ops.errors import OpNotAvailableError
            raise OpNotAvailableError(f"{type(self).__name__} declares no kernel interfaces")
        return self._opspec_dispatch.kernel_for(interface, call)

    def kernel_for_values(self, interface: str, device: Any, *values: Any) -> Any:
        """`kernel_for(interface, Call(*values, device=device))` for the interface's call
        spec class `Call`, without building the call spec when the entry is known (the
        eager hot path; see DispatchTable.kernel_for_values)."""
        table = self._opspec_dispatch
        if table is None:
            from opspec.ops.errors import OpNotAvailableError
            raise OpNotAvailableError(f"{type(self).__name__} declares no kernel interfaces")
        try:  # the table's hit path, inlined: one call less on every eager call
            return table._entries_by_values[(interface, device, values)]
        except (KeyError, TypeError):
            return table.kernel_for_values(interface, device, *values)

    def key_for(self, interface: str, call: Any, **facts: Any) -> str:
        return self._opspec_dispatch.key_for(interface, call, **facts)

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - subclasses define it
        raise NotImplementedError(f"{type(self).__name__} defines no forward")

    def _call_boundary(self, *args: Any, **kwargs: Any) -> Any:
        from opspec.ops.boundary import call_boundary
        return call_boundary(self, args, kwargs)

    @classmethod
    def generated_source(cls) -> str:
        """The generated checks of every branch lowered so far (all branches are lowered)."""
        info = cls._info()
        return "\n".join(info.code_for(b).source for b in info.plan.branches
                         if b.excluded_by is None)


# -- helpers ---------------------------------------------------------------------------------

def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _shares_storage(o: torch.Tensor, inputs: tuple) -> bool:
    """Whether `o` shares storage with one of `inputs`. Storages are compared, not data
    pointers: every meta tensor's data pointer is 0, so pointer equality called a new meta
    output "sharing storage" with any meta input (a check-only call on meta tensors)."""
    for t in inputs:  # a loop, not any(<generator>): this runs on every call
        if _is_alias_of(o, t):
            return True
    return False


_is_alias_of = torch._C._is_alias_of


def _same(a: Any, b: Any) -> bool:
    # `a` is a branch's value: an ADT there fixes the constructor and its finite fields
    # only, so `b` (an ADTValue or a runtime object) matches on those, not on all fields.
    if isinstance(a, ADTValue):
        try:
            from opspec.schema.values import field_of
            return field_of(b, "kind") == a.ctor and all(field_of(b, f) == v for f, v in a.fields)
        except Exception:
            return False
    return a == b and type(a) is type(b) if isinstance(a, bool) or isinstance(b, bool) else a == b


def _decl_text(info: _ClassInfo, path: str) -> str:
    for r in info.spec.rules:
        if r.path == path:
            return r.text
    return path


def new_output(t: tuple, decl: Any, device: torch.device | None) -> torch.Tensor:
    """An uninitialised output of the branch's `(name, shape, dtype)` entry `t`, on the call
    `device`, or on the CPU where its declaration `decl` says `device: cpu` (seed § 4)."""
    return torch.empty(tuple(t[1]), dtype=DTYPES_BY_NAME[t[2]],
                       device="cpu" if decl.device == "cpu" else device)


def _default_device() -> torch.device | None:
    """The call device when no tensor decides it (seed § 4): the current device of the
    process's accelerator, the device type `torch.accelerator` reports (CUDA, or another
    backend's), or None without one. torch before 2.6 has no `torch.accelerator`: CUDA's
    current device then."""
    acc = getattr(torch, "accelerator", None)
    if acc is None or not hasattr(acc, "current_accelerator"):
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return None
    if not acc.is_available():
        return None
    kind = acc.current_accelerator()
    if kind is None:
        return None
    # current_device_index since torch 2.7; current_device_idx in 2.6
    index = getattr(acc, "current_device_index", None) or acc.current_device_idx
    return torch.device(kind.type, index())


def _broken(norm: Any) -> str:
    """The rule a rejected parameter value breaks, when `_conforms` names one."""
    return f", which breaks the {norm}" if str(norm).startswith("invariant") else ""


def _conforms(v: Any, kind: K.Kind, spec) -> tuple[bool, Any]:
    """Whether a parameter value has the kind its `type` names, and its normalised form
    (dtype parameters become dtype names, lists stay lists). (False, "type") for a wrong
    Python type, (False, "value") for a value outside the allowed set."""
    if isinstance(kind, K.MaybeK):
        if v is None:
            return True, None
        return _conforms(v, kind.inner, spec)
    if isinstance(kind, K.UnionK):
        for m in kind.members:
            ok, norm = _conforms(v, m, spec)
            if ok:
                return ok, norm
        return False, "type"
    if isinstance(kind, K.BoolK):
        return (isinstance(v, bool), v if isinstance(v, bool) else "type")
    if isinstance(kind, K.IntK):
        if isinstance(v, bool) or not isinstance(v, int):
            return False, "type"
        if kind.nonneg and v < 0:
            return False, "value"
        return True, v
    if isinstance(kind, K.StrK):
        if not isinstance(v, str):
            return False, "type"
        if kind.literals is not None and v not in kind.literals:
            return False, "value"
        return True, v
    if isinstance(kind, K.DTypeK):
        name = DTYPE_NAMES.get(v) if isinstance(v, torch.dtype) else (v if v in K.DTYPES else None)
        if name is None:
            return False, "type"
        if kind.members is not None and name not in kind.members:
            return False, "value"
        return True, name
    if isinstance(kind, K.SeqK):
        if not isinstance(v, (list, tuple)):
            return False, "type"
        if kind.length is not None and len(v) != kind.length:
            return False, "value"
        for x in v:
            ok, _ = _conforms(x, kind.elem, spec)
            if not ok:
                return False, "type"
        return True, v
    if isinstance(kind, K.NoneK):
        return (v is None, None if v is None else "type")
    if isinstance(kind, K.ADTK):
        return _conforms_adt(v, kind, spec)
    if isinstance(kind, K.ValueK):
        if kind.tag == "float":
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            return (ok, float(v) if ok else "type")
        return True, v
    return True, v


def _conforms_adt(v: Any, kind: K.ADTK, spec) -> tuple[bool, Any]:
    from opspec.schema.evaluate import evaluate
    from opspec.schema.values import field_of

    info = spec.adts.get(kind.name)
    if info is None:
        return False, "type"
    if isinstance(v, dict) and len(v) == 1:
        (ctor, fields), = v.items()
        v = ADTValue.of(kind.name, ctor, fields if isinstance(fields, dict) else {})
    try:
        ctor = field_of(v, "kind")
    except Exception:
        return False, "type"
    c = info.ctors.get(ctor)
    if c is None:
        return False, "value"
    env = {}
    for f, fk in c.fields.items():
        try:
            env[f] = field_of(v, f)
        except Exception:
            return False, "value"
        ok, _ = _conforms(env[f], fk, spec)
        if not ok:
            return False, "value"
    if c.invariant is not None and evaluate(c.invariant, env) is not True:
        # Say which rule the fields break: the parameter's type alone does not tell.
        return False, f"invariant `{c.invariant_text}` of constructor `{ctor}`"
    return True, v
