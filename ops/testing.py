"""Property testing from the spec alone: Hypothesis strategies of valid and of violating calls.

    from hypothesis import given
    from opspec.ops.testing import valid_calls, violating_calls, assert_rejected

    @given(valid_calls(MyOp))
    def test_matches_reference(call):
        torch.testing.assert_close(call.run(), my_reference(*call.inputs, **call.params))

    @given(violating_calls(MyOp))
    def test_rejects(call):
        assert_rejected(call)

`valid_calls(op_cls)` draws the construction parameters (their kinds, defaults and enum
sets), a branch of the proven Plan, and a Z3 model of "every declaration of the branch
holds" under small bounds (every axis of a tensor at most `max_dim`), then builds the
tensors: contiguous, random, on `device`. `violating_calls(op_cls)` draws calls that break
exactly one declaration: a Z3 model of "every declaration holds except that one, which is
false" (a rank, an axis, an exact division, a dtype, a dtype outside its set, a refinement,
the `out` buffer, ...), or, for parameters, domain restrictions and `contiguous: true`, a
valid call changed in one place. Every drawn call is confirmed with Z3 on its concrete
tensors: no choice of indices makes a violating call valid. A violating call breaks its
declaration only where the proven solving order *checks* (never where it *solves* an index:
changing `a`'s K in a GEMM would make the runtime read another K and blame `b`), so under
the indices the runtime solves, that declaration is the only false one and the error must
name it; `Call.blame` adds, for information, every declaration whose failure alone would
explain the rejection.

Hypothesis stays in charge of the randomness: the branch, the targets Z3 is steered towards
(each index and parameter gets a drawn value it takes when the declarations allow it) and
the seed of the tensor data are all drawn, so examples replay and shrink towards the first
branch, default parameters and small axes. Z3 runs in a fresh context per example, so the
same draws give the same call in any process.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
import z3
from hypothesis import assume
from hypothesis import strategies as st

from opspec.schema import kinds as K
from opspec.schema.errors import OpspecError, SignatureError, SignatureTypeError
from opspec.schema.expr import Call as CallExpr, Const, Expr, Name, ShapeList, Splat
from opspec.schema.printer import print_expr
from opspec.schema.values import ADTValue
from opspec.solver import plan as P
from opspec.solver.discriminants import describe_value
from opspec.solver.encode import EncodeError, Encoder, solve
from opspec.solver.fold import Folder, adt_invariants
from opspec.solver.order import BranchResult, linear, obviously_dim, plan_branch
from opspec.solver.queries import _adt_fields, _kinds
from opspec.solver.z3env import DEFAULT_RLIMIT, Verdict, make_solver, shared

__all__ = [
    "Call", "MAX_DIM", "SilentPass", "assert_rejected", "declarations", "valid_calls",
    "violating_calls",
]

#: The default bound of every axis of a drawn tensor.
MAX_DIM = 8
#: Splats (`*S`) and wrong ranks add at most this many axes to a tensor's fixed axes.
EXTRA_RANK = 2
#: The dtypes a drawn tensor may have: those every CPU build of torch makes and compares.
MAKEABLE_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8",
                   "uint8", "bool")
#: Attempts at a call that no choice of indices repairs, before the example is dropped.
_RETRIES = 6

# Kinds of violation.
RANK, AXIS, DIVISIBILITY, DTYPE, DTYPE_SET = "rank", "axis", "divisibility", "dtype", "dtype-set"
REFINEMENT, INVARIANT, DOMAIN, PARAM = "refinement", "invariant", "domain", "param"
OUT_SHAPE, OUT_DTYPE, OUTPUT_AXIS, DTYPE_COMBO = "out-shape", "out-dtype", "output-axis", "dtype-combo"
CONTIGUOUS, MISSING, ABSENT = "contiguous", "missing", "absent"
VIOLATION_KINDS = (RANK, AXIS, DIVISIBILITY, DTYPE, DTYPE_SET, REFINEMENT, INVARIANT, DOMAIN,
                   PARAM, OUT_SHAPE, OUT_DTYPE, OUTPUT_AXIS, DTYPE_COMBO, CONTIGUOUS, MISSING,
                   ABSENT)


class SilentPass(AssertionError):
    """A call that breaks a declaration was accepted by the generated checks."""


# -- the drawn call -----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Call:
    """One call of an op class: what to construct it with and what to call it with.

    `params`: the constructor's keyword arguments (every parameter, construction-time
    tensors included); `inputs`: forward's positional inputs, in the spec's order (None
    for an optional input not passed); `out`: the `out` buffer, or None; `indices`: the
    values of the indices and lets (for a valid call, what `check_call` returns).

    A violating call also has `violates` (the declaration path it breaks, which the
    runtime's error must name), `kind` (one of `VIOLATION_KINDS`), `detail` (what was
    changed, in words) and `blame`: every declaration whose failure alone explains the
    rejection. `blame` always holds `violates`; it holds more where the spec itself cannot
    say which declaration is wrong (`a: [M, K]` and `b: [K, N]` that disagree on K break
    `a.shape` or `b.shape`; the solving order reads K from `a`, so the runtime names `b`,
    and the strategy broke `b`).
    """

    op: type
    params: Mapping[str, Any]
    inputs: tuple
    out: torch.Tensor | None = None
    indices: Mapping[str, Any] = field(default_factory=dict)
    combo: tuple = ()
    violates: str | None = None
    kind: str = "valid"
    detail: str = ""
    #: a frozenset, or a function computing it on first use (Z3 queries: one per declaration)
    _blame: Any = field(default=frozenset(), init=False, repr=False, compare=False)

    @property
    def valid(self) -> bool:
        return self.violates is None

    @property
    def blame(self) -> frozenset:
        """Every declaration whose failure alone explains the rejection (see the class)."""
        if callable(self._blame):
            object.__setattr__(self, "_blame", frozenset(self._blame()))
        return self._blame

    def _with_blame(self, blame: Any) -> "Call":
        object.__setattr__(self, "_blame", blame)
        return self

    @property
    def unique(self) -> bool:
        """Whether the broken declaration is the only one that explains the rejection."""
        return self.blame == frozenset({self.violates})

    def construct(self) -> Any:
        return self.op(**self.params)

    def run(self, op: Any = None) -> Any:
        """Construct the op (unless given) and call it."""
        op = self.construct() if op is None else op
        return op(*self.inputs, **({"out": self.out} if self.out is not None else {}))

    def check(self, op: Any = None) -> dict[str, Any]:
        """Only the signature checks (`Op.check_call`): the solved indices."""
        op = self.construct() if op is None else op
        return op.check_call(*self.inputs, **({"out": self.out} if self.out is not None else {}))

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the call: construction-time tensors, inputs and `out`."""
        out = {n: v for n, v in self.params.items() if isinstance(v, torch.Tensor)}
        names = self.op._info().inputs
        out.update({n: t for n, t in zip(names, self.inputs) if isinstance(t, torch.Tensor)})
        if self.out is not None:
            out["out"] = self.out
        return out

    def snapshot(self) -> dict[str, tuple]:
        """Copies of every tensor (with torch's version counter), for `changed`."""
        return {n: (t._version, tuple(t.shape), t.stride(), t.detach().clone())
                for n, t in self.tensors().items() if t.device.type != "meta"}

    def changed(self, snapshot: Mapping[str, tuple]) -> list[str]:
        """The tensors written since `snapshot` (contents, shape, strides or an in-place op)."""
        now = self.tensors()
        bad = []
        for n, (version, shape, stride, data) in snapshot.items():
            t = now[n]
            if t._version != version or tuple(t.shape) != shape or t.stride() != stride \
                    or not _same_data(t, data):
                bad.append(n)
        return bad

    def __repr__(self) -> str:
        names = self.op._info().inputs
        parts = [f"{self.op.__name__}("
                 + ", ".join(f"{k}={_show(v)}" for k, v in self.params.items()) + ")"]
        parts.append("(" + ", ".join(f"{n}={_show(t)}" for n, t in zip(names, self.inputs))
                     + (f", out={_show(self.out)}" if self.out is not None else "") + ")")
        if self.violates is not None:
            parts.append(f"violates {self.violates} [{self.kind}]"
                         + (f": {self.detail}" if self.detail else "")
                         + ("" if self.unique else f"; blame {sorted(self.blame)}"))
        return "Call<" + " ".join(parts) + ">"


def _show(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        dt = str(v.dtype).replace("torch.", "")
        return f"{dt}{list(v.shape)}" + ("" if v.is_contiguous() else "(strided)") + \
            ("" if v.device.type == "cpu" else f"@{v.device}")
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    return repr(v)


def _same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def names_declaration(message: str, path: str) -> bool:
    """Whether an error message names the declaration `path` (`[path at file:line]`)."""
    return f"[{path} at " in message or f"[{path}]" in message


def assert_rejected(call: Call) -> OpspecError:
    """Construct and call; assert a signature error that names `call.violates` and that no
    tensor of the call was written. Returns the error; raises `SilentPass` when the
    signature checks let the call through (it is accepted, or fails past them)."""
    snap = call.snapshot()
    try:
        call.run()
    except (SignatureError, SignatureTypeError) as exc:
        err = exc
    except Exception as exc:  # noqa: BLE001 - not a check of the signature: it let it through
        raise SilentPass(f"the signature checks let through a call that breaks "
                         f"{call.violates}; then {type(exc).__name__}: {exc}\n{call!r}") from exc
    else:
        raise SilentPass(f"accepted a call that breaks {call.violates}: {call!r}")
    msg = str(err)
    assert names_declaration(msg, call.violates), \
        f"the error does not name {call.violates}: {msg}\n{call!r}"
    written = call.changed(snap)
    assert not written, f"a rejected call wrote {written}: {call!r}"
    return err


# -- per-class preparation (pure data, cached) -----------------------------------------------------

@dataclass
class _BranchInfo:
    combo: dict[str, Any]
    res: BranchResult
    invariants: list[tuple[str, Expr]]
    excluded_by: tuple[str, ...]        # domain restrictions false on this combination
    tensors: list[str]                   # inputs and construction-time tensors that exist
    out: str | None                      # the output `out` is the buffer of, when passed
    key: tuple                           # what its Z3 questions depend on


class _Setup:
    """What the strategies of one op class need: its spec, plan and branches."""

    def __init__(self, op_cls: type, fixed: Mapping[str, Any], where: Mapping[str, Any],
                 max_dim: int, device: str | torch.device):
        self.op = op_cls
        info = op_cls._info()
        self.info = info
        self.spec = spec = info.spec
        self.plan = info.plan
        self.max_dim = max_dim
        self.device = torch.device(device)
        self.fixed = dict(fixed)
        unknown = [k for k in self.fixed if k not in spec.params and k not in spec.forall]
        if unknown:
            raise ValueError(f"{op_cls.__name__}: {unknown} are neither parameters nor indices "
                             f"of its spec (parameters: {list(spec.params)}, indices: "
                             f"{list(spec.forall)})")
        self.where = dict(where)
        bad = [k for k in self.where if k not in self.plan.discriminants]
        if bad:
            raise ValueError(f"{op_cls.__name__}: {bad} are not discriminants; these are: "
                             f"{list(self.plan.discriminants)}")
        self.kinds = _kinds(spec)
        self.adt_fields = _adt_fields(spec)
        self.branches: list[_BranchInfo] = []
        self.excluded: list[_BranchInfo] = []
        for b in self.plan.branches:
            combo = dict(b.combo)
            if not self._matches(combo):
                continue
            bi = self._branch_info(combo)
            if bi is None:
                continue
            (self.excluded if bi.excluded_by else self.branches).append(bi)
        self.lock = threading.Lock()
        self.live: dict[tuple, bool] = {}
        self.viable: dict[tuple, list[tuple]] = {}

    def _matches(self, combo: dict[str, Any]) -> bool:
        for k, v in self.where.items():
            if not _eq(combo.get(k), v):
                return False
        for k, v in self.fixed.items():
            p = self.spec.params.get(k)
            if p is None:
                continue
            v = _norm_param(v)
            if isinstance(K.unwrap_maybe(p.kind), K.ADTK) and isinstance(combo.get(k), ADTValue):
                if not isinstance(v, ADTValue) or not _eq(combo[k], v):
                    return False
                continue
            if f"present({k})" in combo and combo[f"present({k})"] != (v is not None):
                return False
            if k in combo and combo[k] is not None and not _eq(combo[k], v):
                return False
        return True

    def _branch_info(self, combo: dict[str, Any]) -> _BranchInfo | None:
        spec = self.spec
        folder = Folder(spec, combo)
        false = tuple(r.path for r in spec.rules
                      if isinstance(folder.expr(r.expr), Const) and folder.expr(r.expr).value is False)
        try:
            res = plan_branch(spec, combo)
        except Exception:  # noqa: BLE001 - a branch that does not plan is no branch to draw
            return None
        if res.unsolved or res.family_misses or res.not_discriminant:
            return None
        invariants = adt_invariants(spec, combo, folder)
        tensors = [n for n in res.branch.present
                   if spec.tensors[n].role in ("input", "ctensor") and n in res.shapes]
        out = None
        if combo.get("present(out)"):
            out = next(n for n, t in spec.outputs.items() if t.buffer == "out")
        key = (tuple(sorted((p, print_expr(e)) for p, e in res.rules)),
               tuple(sorted((n, print_expr(e)) for n, e in res.lets.items())),
               tuple(sorted((p, print_expr(e)) for p, e in invariants)),
               tuple(sorted((n, _shape_text(res.shapes[n]), print_expr(res.dtypes[n]))
                            for n in res.shapes)),
               tuple(tensors), out, false,
               tuple(sorted((k, str(v)) for k, v in combo.items() if k.startswith("present("))))
        return _BranchInfo(combo, res, invariants, false, tensors, out, key)


_setups: dict[tuple, _Setup] = {}
_setups_lock = threading.Lock()


def _setup(op_cls: type, fixed: Mapping[str, Any], where: Mapping[str, Any], max_dim: int,
           device: Any) -> _Setup:
    key = (op_cls, _freeze(fixed), _freeze(where), max_dim, str(device))
    with _setups_lock:
        s = _setups.get(key)
        if s is None:
            s = _setups[key] = _Setup(op_cls, fixed, where, max_dim, device)
        return s


def _freeze(m: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in m.items()))


def _shape_text(sh: ShapeList) -> tuple:
    return tuple(("*" if isinstance(a, Splat) else "") + print_expr(a.value if isinstance(a, Splat) else a)
                 for a in sh.axes)




def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, ADTValue) and isinstance(b, ADTValue):
        return a.adt == b.adt and a.ctor == b.ctor and all(b.has(f) and b.field(f) == v
                                                           for f, v in a.fields)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _norm_param(v: Any) -> Any:
    from opspec.ops.op import DTYPE_NAMES
    if isinstance(v, torch.dtype):
        return DTYPE_NAMES.get(v, str(v))
    return v


# -- Z3: the declarations of one branch, grouped by declaration path --------------------------------

@contextmanager
def _context() -> Iterator[None]:
    """A fresh Z3 context as z3py's default one: the same draws give the same model."""
    saved = z3.z3._main_ctx
    z3.z3._main_ctx = z3.Context()
    try:
        yield
    finally:
        z3.z3._main_ctx = saved


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@dataclass
class _Group:
    path: str
    kind: str                     # shape | dtype | rule | invariant | out | output-shape | combos
    cons: list
    dom: list
    tensor: str | None = None
    actual: Any = None            # the actual shape (a Seq) or dtype of `tensor`
    declared: Any = None          # the declared one
    members: frozenset | None = None

    def holds(self) -> z3.BoolRef:
        return z3.And(*self.cons) if self.cons else z3.BoolVal(True)


def _shape_var(n: str) -> str:
    return f"shape({n})"


def _dtype_var(n: str) -> str:
    return f"dtype({n})"


class _Encoding:
    """The declarations of one branch over one copy of the unknowns, with the actual shapes
    and dtypes of the call's tensors as unknowns of their own (`shape(x)`, `dtype(x)`)."""

    def __init__(self, setup: _Setup, bi: _BranchInfo, drop: Iterable[str] = ()):
        spec, res = setup.spec, bi.res
        self.setup, self.bi = setup, bi
        kinds = dict(setup.kinds)
        tensors = list(bi.tensors) + ([bi.out] if bi.out else [])
        for n in tensors:
            kinds[_shape_var(n)] = K.SHAPE
            kinds[_dtype_var(n)] = K.DTYPE
        self.enc = enc = Encoder(kinds, adt_fields=setup.adt_fields)
        self.tensors = tensors
        self.always: list = []
        self.always_dom: list = []
        self.groups: list[_Group] = []
        dtypes = {d: Const(d) for d in K.DTYPES if d not in spec.symbols}
        folder = Folder(spec, bi.combo)

        def recorded(fn: Callable[[], list]) -> tuple[list, list]:
            mark = len(enc.domain)
            cons = fn()
            return cons, [c for _, c in enc.domain[mark:]]

        # lets are definitions, not declarations a call can break
        for name, e in res.lets.items():
            if name in setup.kinds:
                c, d = recorded(lambda name=name, e=e: [enc.define(name, e)])
                self.always += c
                self.always_dom += d
        # discriminant values of this branch
        for key, v in bi.combo.items():
            if key.startswith("present("):
                name = key[len("present("):-1]
                if name in spec.params and name not in spec.ctensors and name in setup.kinds:
                    self.always.append(_truth(enc.expr(CallExpr("present", (Name(name),)))) == v)
            elif key in setup.kinds and v is not None and not isinstance(v, ADTValue):
                self.always.append(enc.assign(key, v))
        drop = set(drop)
        # each tensor's shape and dtype
        for n in bi.tensors:
            t = spec.tensors[n]
            shape = res.shapes[n]
            declared = _seq(enc, shape)
            actual = enc.expr(Name(_shape_var(n)))
            c, d = recorded(lambda: [actual == declared] + [
                enc.expr(ax) >= 0 for ax in shape.axes
                if not isinstance(ax, Splat) and not obviously_dim(spec, ax)])
            self.groups.append(_Group(t.path + ".shape", "shape", c, d, n, actual, declared))
            dt = folder.expr(res.dtypes[n], dtypes)
            dact = enc.expr(Name(_dtype_var(n)))
            c, d = recorded(lambda: [enc.equal(Name(_dtype_var(n)), dt)])
            members = None
            if isinstance(dt, Name) and isinstance(spec.kind_of(dt.id), K.DTypeK):
                members = spec.kind_of(dt.id).members
            self.groups.append(_Group(t.path + ".dtype", "dtype", c, d, n, dact, dt, members))
        # refinements and ADT invariants (a domain restriction false here is left out: it is
        # what excludes the combination)
        by_path: dict[str, list] = {}
        for path, e in list(bi.invariants) + list(res.rules):
            if path in bi.excluded_by:
                continue
            by_path.setdefault(path, []).append(e)
        inv_paths = {p for p, _ in bi.invariants}
        for path, es in by_path.items():
            c, d = recorded(lambda es=es: [_truth(enc.expr(e)) for e in es])
            self.groups.append(_Group(path, "invariant" if path in inv_paths else "rule", c, d))
        # outputs: axes that are not obviously Dims are >= 0; the `out` buffer's type
        for n, t in spec.outputs.items():
            if n not in res.shapes or n not in res.branch.present:
                continue
            axes = [ax for ax in res.shapes[n].axes
                    if not isinstance(ax, Splat) and not obviously_dim(spec, ax)]
            # A splat's primitive has a domain too (`*broadcast(A, B)` of shapes that do not
            # broadcast raises): encoded for its domain alone, so that a valid call is one
            # whose output shape evaluates.
            splats = [ax.value for ax in res.shapes[n].axes if isinstance(ax, Splat)]
            if axes or splats:
                c, d = recorded(lambda axes=axes, splats=splats: [enc.expr(ax) >= 0 for ax in axes]
                                + [_encoded(enc, e) for e in splats])
                self.groups.append(_Group(t.path + ".shape", "output-shape", c, d, n))
        if bi.out:
            t = spec.outputs[bi.out]
            declared = _seq(enc, res.shapes[bi.out])
            actual = enc.expr(Name(_shape_var(bi.out)))
            dt = folder.expr(res.dtypes[bi.out], dtypes)
            c, d = recorded(lambda: [actual == declared, enc.equal(Name(_dtype_var(bi.out)), dt)])
            self.groups.append(_Group(t.path + ".buffer", "out", c, d, bi.out, actual, declared))
        if spec.dtype_combos:
            keys = list(spec.dtype_combos[0])
            if all(k in setup.kinds for k in keys):
                c, d = recorded(lambda: [z3.Or(*[z3.And(*[enc.equal(Name(k), Const(row[k]))
                                                          for k in keys])
                                                 for row in spec.dtype_combos])])
                self.groups.append(_Group("signature.dtype_combos", "combos", c, d))
        self.groups = [g for g in self.groups if g.path not in drop]
        # every parameter and index is an unknown of the model, used or not
        for n in list(setup.kinds):
            if n in spec.params or n in spec.forall:
                try:
                    enc.var(n)
                except EncodeError:
                    pass

    def group(self, path: str) -> _Group:
        return next(g for g in self.groups if g.path == path)

    def solver(self, groups: Iterable[_Group], *, extra: Iterable = ()) -> z3.Solver:
        s = make_solver(DEFAULT_RLIMIT)
        s.add(*self.always, *self.always_dom)
        for g in groups:
            s.add(*g.cons, *g.dom)
        s.add(*extra)
        s.add(*self.enc.side)
        return s

    def bounds(self) -> list:
        """The generation bounds: small tensors of makeable dtypes, small integers."""
        setup, spec, enc = self.setup, self.setup.spec, self.enc
        m = setup.max_dim
        out = []
        for n in self.tensors:
            seq = enc.expr(Name(_shape_var(n)))
            shape = self.bi.res.shapes[n]
            fixed = sum(1 for a in shape.axes if not isinstance(a, Splat))
            top = min(fixed + EXTRA_RANK, 8)
            out.append(z3.Length(seq) <= top)
            for i in range(top):
                out.append(z3.Implies(i < z3.Length(seq), seq[i] <= m))
            dt = enc.expr(Name(_dtype_var(n)))
            out.append(z3.Or(*[dt == shared().dtype_consts[d] for d in MAKEABLE_DTYPES]))
        for n, k in setup.kinds.items():
            if n not in spec.params and n not in spec.forall:
                continue
            inner = K.unwrap_maybe(k)
            try:
                v = enc.var(n)
            except EncodeError:
                continue
            if isinstance(inner, K.IntK):
                t = v[1] if isinstance(v, tuple) else v
                if z3.is_int(t):
                    out += [t >= -m, t <= 4 * m]
            elif isinstance(inner, K.SeqK) and inner.elem == K.DIM and z3.is_seq(v):
                out.append(z3.Length(v) <= EXTRA_RANK)
        return out


def _truth(v: Any) -> z3.BoolRef:
    if z3.is_bool(v):
        return v
    raise EncodeError(f"not a boolean: {v}")


def _seq(enc: Encoder, shape: ShapeList) -> z3.SeqRef:
    parts = []
    for ax in shape.axes:
        if isinstance(ax, Splat):
            parts.append(enc.expr(ax.value))
        else:
            parts.append(z3.Unit(enc.expr(ax)))
    if not parts:
        return z3.Empty(z3.SeqSort(z3.IntSort()))
    return parts[0] if len(parts) == 1 else z3.Concat(*parts)


def _check(s: z3.Solver, enc: Encoder) -> tuple[Verdict, z3.ModelRef | None]:
    verdict, model, _ = solve(s, [enc])
    return verdict, model


# -- targets: what a draw steers Z3 towards --------------------------------------------------------

def _soft_targets(data, e: _Encoding, extra: Iterable[tuple[str, Any]] = ()) -> list:
    """Constraints drawn from Hypothesis, tried in order and kept when satisfiable: default
    values first (a draw that shrinks keeps them), then a value for every index and
    parameter, then `extra` (the broken tensor's own axes and dtype)."""
    setup, spec, enc = e.setup, e.setup.spec, e.enc
    m = setup.max_dim
    out = []
    discs = set(e.bi.combo)
    for n, p in spec.params.items():
        if n in spec.ctensors or n in discs or n in setup.fixed or n not in setup.kinds:
            continue
        if p.has_default and not data.draw(st.booleans(), label=f"vary {n}"):
            try:
                out.append(enc.assign(n, _norm_param(p.default)))
            except EncodeError:
                pass
    names = [n for n in spec.forall] + [n for n in spec.params if n not in spec.ctensors]
    drawn: dict[str, list[int]] = {}
    lists: list = []        # the Seq[Int] draws, tried before the other indices
    start = len(out)
    for n in names:
        if n in discs or n in setup.fixed or n not in setup.kinds:
            continue
        k = K.unwrap_maybe(setup.kinds[n])
        try:
            if isinstance(k, K.IntK):
                out.append(enc.assign(n, data.draw(_sizes(m), label=n)))
            elif isinstance(k, K.DTypeK):
                choices = sorted(k.members) if k.members else list(MAKEABLE_DTYPES)
                out.append(enc.assign(n, data.draw(st.sampled_from(choices), label=n)))
            elif isinstance(k, K.SeqK) and k.elem in (K.DIM, K.INT) and k.length is None:
                # a Seq[Int] index is a generator argument (lengths) or a splat (axes):
                # its elements are drawn non-negative
                v = data.draw(st.lists(st.integers(1 if k.elem == K.DIM else 0, m),
                                       max_size=EXTRA_RANK), label=n)
                s = enc.expr(Name(n))
                lists += [z3.Length(s) == len(v), enc.assign(n, tuple(v))]
                drawn[n] = list(v)
            elif isinstance(k, K.BoolK):
                out.append(enc.assign(n, data.draw(st.booleans(), label=n)))
        except EncodeError:
            continue
    # the lists first, then what they fix in the metadata, then the other indices
    out[start:start] = lists + _metadata_hints(e, drawn)
    for kind, target in extra:
        if kind == "length":
            seq, ranks = target
            if ranks:
                out.append(z3.Length(seq) == data.draw(st.sampled_from(ranks)))
        elif kind == "axes":
            seq, length = target
            for i in range(length):
                out.append(z3.Implies(i < z3.Length(seq), seq[i] == data.draw(_sizes(m))))
        elif kind == "dtype":
            out.append(target == shared().dtype_consts[
                data.draw(st.sampled_from(MAKEABLE_DTYPES))])
        elif kind == "bool":
            out.append(target)
    return out


def _metadata_hints(e: _Encoding, drawn: Mapping[str, list[int]]) -> list:
    """Soft targets that make a metadata tensor fit the drawn `Seq[Int]` lists: the shape
    its generator gives them, and the bare indices its `requires` name, where the predicate
    fixes them (`prefix_offsets(N)`, `sums_to(N)`: the total; `max_segment(N)`: the largest
    step). Z3 knows neither; without them, offsets such as `prefix_sum(q_lens)` with
    `prefix_offsets(total_q)` almost never agree with the drawn shapes. They only steer
    the draw: `_generated` still checks every `requires` on the values."""
    import random
    from opspec.schema.evaluate import evaluate
    spec, enc = e.setup.spec, e.enc
    out = []
    for n in e.tensors:
        t = spec.tensors[n]
        if t.values is None or not isinstance(t.values, CallExpr):
            continue
        if not all(isinstance(a, Name) and a.id in drawn for a in t.values.args):
            continue
        try:
            data = evaluate(t.values, dict(drawn), rng=random.Random(0))
        except Exception:  # noqa: BLE001 - a generator that does not take these lists
            continue
        shape = torch.tensor(data).shape
        out.append(enc.expr(Name(_shape_var(n)))
                   == _seq_of(tuple(int(x) for x in shape)))
        if len(shape) != 1:
            continue
        flat = [int(x) for x in data]
        for r in t.requires:
            if not (isinstance(r, CallExpr) and len(r.args) == 1
                    and isinstance(r.args[0], Name)):
                continue
            target = r.args[0].id
            if r.func == "prefix_offsets" and flat:
                value = flat[-1]
            elif r.func == "sums_to":
                value = sum(flat)
            elif r.func == "max_segment" and len(flat) > 1:
                value = max(b - a for a, b in zip(flat, flat[1:]))
            else:
                continue
            try:
                out.append(enc.assign(target, value))
            except EncodeError:
                continue
    return out


def _seq_of(values: tuple[int, ...]) -> z3.SeqRef:
    if not values:
        return z3.Empty(z3.SeqSort(z3.IntSort()))
    units = [z3.Unit(z3.IntVal(v)) for v in values]
    return units[0] if len(units) == 1 else z3.Concat(*units)


def _sizes(m: int) -> st.SearchStrategy[int]:
    """An axis length or integer to aim at: 1..m uniformly, shrinking to 1, and 0 (an empty
    tensor) as often as any other value."""
    return st.sampled_from([*range(1, m + 1), 0])


def _greedy(s: z3.Solver, enc: Encoder, targets: list) -> z3.ModelRef | None:
    verdict, model = _check(s, enc)
    if verdict is not Verdict.SAT:
        return None
    for c in targets:
        s.push()
        s.add(c)
        v, m = _check(s, enc)
        if v is Verdict.SAT:
            model = m
        else:
            s.pop()
    return model


def _fixed_constraints(e: _Encoding) -> list:
    out = []
    setup = e.setup
    for n, v in setup.fixed.items():
        if n not in setup.kinds:
            continue
        v = _norm_param(v)
        if isinstance(v, (set, frozenset)):
            out.append(z3.Or(*[e.enc.assign(n, _norm_param(x)) for x in v]))
        else:
            out.append(e.enc.assign(n, tuple(v) if isinstance(v, list) else v))
    return out


# -- from a model to a call ------------------------------------------------------------------------

def _values(e: _Encoding, model: z3.ModelRef) -> dict[str, Any]:
    return e.enc.values(model)


def _pins(e: _Encoding, vals: Mapping[str, Any]) -> list:
    """The call as constraints: parameters, actual shapes and dtypes (not the indices)."""
    spec = e.setup.spec
    out = []
    for n, v in vals.items():
        base = n.split(".")[0]
        if n.startswith(("shape(", "dtype(")) or (base in spec.params and base not in spec.ctensors):
            try:
                out.append(e.enc.assign(n, v))
            except EncodeError:
                pass
    return out


def _valid_given(e: _Encoding, pins: list, groups: Iterable[_Group]) -> Verdict:
    s = e.solver(groups, extra=pins)
    return _check(s, e.enc)[0]


def _blame(e: _Encoding, pins: list) -> frozenset[str]:
    """Each declaration whose failure alone explains a call rejected with `pins`."""
    out = set()
    for g in e.groups:
        others = [h for h in e.groups if h is not g]
        if _valid_given(e, pins, others) is not Verdict.UNSAT:
            out.add(g.path)
    return frozenset(out)


def _lazy_blame(setup: _Setup, bi: _BranchInfo, vals: Mapping[str, Any], path: str) -> Callable:
    def blame() -> frozenset[str]:
        with _context():
            e = _Encoding(setup, bi)
            out = _blame(e, _pins(e, vals))
        if path not in out:  # the model of the violation says otherwise: a bug here
            raise AssertionError(f"{path} does not explain its own violation: {vals}")
        return out
    return blame


def _build(setup: _Setup, bi: _BranchInfo, vals: Mapping[str, Any], seed: int, *,
           violates: str | None = None, kind: str = "valid", blame: Any = frozenset(),
           detail: str = "") -> Call:
    from opspec.ops.op import DTYPES_BY_NAME
    spec = setup.spec
    gen = torch.Generator().manual_seed(seed)
    params: dict[str, Any] = {}
    for n, p in spec.params.items():
        if n not in spec.ctensors:
            params[n] = _param_value(setup, bi, n, p, vals)
    made: dict[str, torch.Tensor] = {}
    for n in list(bi.tensors) + ([bi.out] if bi.out else []):
        shape = tuple(int(x) for x in vals[_shape_var(n)])
        dtype = DTYPES_BY_NAME[vals[_dtype_var(n)]]
        t = spec.tensors[n]
        dev = torch.device("cpu") if t.device == "cpu" else setup.device
        if t.values is not None:
            made[n] = _generated(spec, t, shape, dtype, dev, vals, seed, params,
                                 strict=kind == "valid")
        else:
            made[n] = _random(shape, dtype, dev, gen)
    for n in spec.ctensors:  # construction-time tensors are constructor arguments too
        params[n] = made.get(n)
    inputs = tuple(made.get(n) for n in spec.inputs)
    out = made.get(bi.out) if bi.out else None
    indices = {k: vals[k] for k in list(spec.forall) + list(spec.lets)
               if k in vals and (k in bi.res.branch.used or k in spec.lets)}
    return Call(setup.op, params, inputs, out, indices, tuple(sorted(bi.combo.items())),
                violates, kind, detail)._with_blame(blame)


def _param_value(setup: _Setup, bi: _BranchInfo, n: str, p, vals: Mapping[str, Any]) -> Any:
    from opspec.ops.op import DTYPES_BY_NAME
    spec = setup.spec
    combo = bi.combo
    inner = K.unwrap_maybe(p.kind)
    if n in setup.fixed:
        v = setup.fixed[n]
        if not isinstance(v, (set, frozenset)):
            return v
    if combo.get(f"present({n})") is False:
        return None
    if isinstance(combo.get(n), ADTValue):
        v = combo[n]
        base = f"{n}.value" if isinstance(p.kind, K.MaybeK) else n
        fields = dict(v.fields)
        for f, fk in spec.adts[v.adt].ctors[v.ctor].fields.items():
            if f not in fields:
                fields[f] = vals.get(f"{base}.{f}", _kind_default(fk))
        return ADTValue.of(v.adt, v.ctor, fields)
    if n in combo and combo[n] is not None:
        return combo[n]
    if n in vals and _encodable(p.kind):
        v = vals[n]
    elif p.has_default:
        v = p.default
    else:
        v = _kind_default(p.kind)
    if v is None:
        return None
    if isinstance(inner, K.DTypeK) and isinstance(v, str):
        return DTYPES_BY_NAME[v]
    if isinstance(inner, K.SeqK) and isinstance(v, tuple):
        return list(v)
    return v


def _encoded(enc: Any, e: Expr) -> z3.BoolRef:
    """Encode `e` for the domain facts it records; the constraint itself is true."""
    enc.expr(e)
    return z3.BoolVal(True)


def _encodable(k: K.Kind) -> bool:
    inner = K.unwrap_maybe(k)
    if isinstance(inner, K.UnionK):
        # `dim: int | list[int] | None`: the model says which member, and its value
        return all(isinstance(m, K.NoneK) or _encodable(m) for m in inner.members)
    if isinstance(inner, K.SeqK):
        return isinstance(inner.elem, (K.IntK, K.BoolK))
    return isinstance(inner, (K.IntK, K.BoolK, K.StrK, K.DTypeK)) or (
        isinstance(inner, K.ValueK) and inner.tag == "float")


def _kind_default(k: K.Kind) -> Any:
    inner = K.unwrap_maybe(k)
    if isinstance(k, K.MaybeK):
        return None
    if isinstance(inner, K.BoolK):
        return False
    if isinstance(inner, K.IntK):
        return 1
    if isinstance(inner, K.StrK):
        return sorted(inner.literals)[0] if inner.literals else ""
    if isinstance(inner, K.DTypeK):
        return sorted(inner.members)[0] if inner.members else "float32"
    if isinstance(inner, K.SeqK):
        return [] if inner.length is None else [_kind_default(inner.elem)] * inner.length
    if isinstance(inner, K.ValueK) and inner.tag == "float":
        return 1.0
    return None


def _random(shape: tuple, dtype: torch.dtype, device: torch.device, gen) -> torch.Tensor:
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=gen).bool()
    elif dtype.is_complex:
        t = torch.randn(shape, generator=gen, dtype=dtype)
    else:
        t = torch.randint(0, 8, shape, generator=gen).to(dtype)
    return t.to(device)


def _generated(spec, t, shape, dtype, device, vals, seed, params=None, *,
               strict: bool = True) -> torch.Tensor:
    """A metadata tensor: its generator's values, when they have the drawn shape.

    Not `strict` (a violating call, rejected before any contents are read): where the
    generator does not fit the draw (its domain excludes the violating sizes, as
    `moe.layout_metadata` excludes E = 0), random contents of the drawn shape."""
    import random
    from opspec.schema.evaluate import evaluate
    from opspec.schema.evaluate import evaluate_requires
    env = {k: v for k, v in vals.items() if "(" not in k}
    # The parameters as the call passes them: an ADT parameter is one value there
    # (`moe.layout_metadata(layout, R, E)`), where the draw has one entry per field.
    env.update(params or {})
    try:
        data = evaluate(t.values, env, rng=random.Random(seed))
        out = torch.tensor(data, dtype=dtype).reshape(shape)
        # the values must satisfy the tensor's `requires` (positions below the cache's
        # rows): a draw whose generated values do not is not a valid call
        ok = all(evaluate_requires(r, data, env) is True for r in t.requires)
    except Exception:  # noqa: BLE001 - a generator that does not fit this draw
        ok = False
    if not ok and not strict:
        return _random(shape, dtype, device, torch.Generator().manual_seed(seed))
    assume(ok)
    return out.to(device)


# -- the strategies ----------------------------------------------------------------------------------

def valid_calls(op_cls: type, /, *, fixed: Mapping[str, Any] | None = None,
                where: Mapping[str, Any] | None = None, max_dim: int = MAX_DIM,
                device: str | torch.device = "cpu", **fixed_params: Any) -> st.SearchStrategy[Call]:
    """A strategy of calls that pass every declaration of `op_cls`'s spec.

    `fixed_params` (or `fixed`, for names that clash with these options) fix parameters or
    indices: `trans_a=True`, `T="float16"`, or a set of allowed values, `T={"float16",
    "float32"}`. `where` fixes discriminants by key: `{"present(bias)": True}`,
    `{"present(out)": False}`. Every axis of every tensor is at most `max_dim`.
    """
    setup = _setup(op_cls, {**(fixed or {}), **fixed_params}, where or {}, max_dim, device)
    if not setup.branches:
        raise ValueError(f"{op_cls.__name__}: no branch of its plan matches {setup.fixed} "
                         f"{setup.where}")

    @st.composite
    def draw(draw_) -> Call:
        data = _Data(draw_)
        live = _live_branches(setup)
        if not live:
            raise ValueError(f"{op_cls.__name__}: no branch admits a call with axes <= "
                             f"{max_dim} and {setup.fixed}")
        bi = data.draw(st.sampled_from(live), label="branch")
        with _context():
            e = _Encoding(setup, bi)
            s = e.solver(e.groups, extra=e.bounds() + _fixed_constraints(e))
            model = _greedy(s, e.enc, _soft_targets(data, e))
            assume(model is not None)
            vals = _values(e, model)
        seed = data.draw(st.integers(0, 2 ** 31 - 1), label="seed")
        return _build(setup, bi, vals, seed)

    return draw()


class _Data:
    """`draw(strategy, label)` over the draw function of `st.composite`."""

    def __init__(self, draw: Callable):
        self._draw = draw

    def draw(self, strategy: st.SearchStrategy, label: str | None = None) -> Any:
        return self._draw(strategy)


def _live_branches(setup: _Setup) -> list[_BranchInfo]:
    with setup.lock:
        out = []
        for bi in setup.branches:
            ok = setup.live.get(bi.key)
            if ok is None:
                with _context():
                    e = _Encoding(setup, bi)
                    s = e.solver(e.groups, extra=e.bounds() + _fixed_constraints(e))
                    ok = setup.live[bi.key] = _check(s, e.enc)[0] is Verdict.SAT
            if ok:
                out.append(bi)
        return out


# Targets of violation: (kind, path, detail) per branch.

def _targets(e: _Encoding) -> list[tuple[str, str]]:
    out = []
    for g in e.groups:
        if g.kind == "shape":
            out += [(RANK, g.path), (AXIS, g.path)]
            if _affine_axes(e, g.tensor):
                out.append((DIVISIBILITY, g.path))
        elif g.kind == "dtype":
            if g.members is not None:
                out.append((DTYPE_SET, g.path))
                if len(g.members) > 1:
                    out.append((DTYPE, g.path))
            else:
                out.append((DTYPE, g.path))
        elif g.kind == "rule":
            out.append((REFINEMENT, g.path))
        elif g.kind == "invariant":
            out.append((INVARIANT, g.path))
        elif g.kind == "out":
            out += [(OUT_SHAPE, g.path), (OUT_DTYPE, g.path)]
        elif g.kind == "output-shape":
            out.append((OUTPUT_AXIS, g.path))
        elif g.kind == "combos":
            out.append((DTYPE_COMBO, g.path))
    return out


def _broken(e: _Encoding, kind: str, path: str) -> tuple[list, list]:
    """(hard constraints, soft extras) that make the declaration `path` false."""
    g = e.group(path)
    others = [h for h in e.groups if h is not g]
    hard = [c for h in others for c in h.cons + h.dom] + list(g.dom)
    extras: list = []
    if kind in (RANK, AXIS, DIVISIBILITY, OUT_SHAPE):
        shape = e.bi.res.shapes[g.tensor]
        splats = any(isinstance(a, Splat) for a in shape.axes)
        fixed = sum(1 for a in shape.axes if not isinstance(a, Splat))
        la, ld = z3.Length(g.actual), z3.Length(g.declared)
        if kind == RANK:
            # With a splat, a rank below the fixed axes breaks the shape whatever the splat.
            hard.append(la < fixed if splats else la != ld)
            top = fixed - 1 if splats else fixed + EXTRA_RANK
            ranks = sorted((r for r in range(top + 1) if splats or r != fixed),
                           key=lambda r: (abs(r - fixed), r))
            extras.append(("length", (g.actual, ranks)))
        else:
            hard += [la == ld, g.actual != g.declared]
            extras.append(("axes", (g.actual, fixed + (EXTRA_RANK if splats else 0))))
            if kind == DIVISIBILITY:  # an axis `a * X + e` gets a length no X gives
                hard.append(z3.Or(*[z3.Or((g.actual[i] - e.enc.expr(off)) % a != 0,
                                          g.actual[i] < e.enc.expr(off))
                                    for i, a, off in _affine_axes(e, g.tensor)]))
            # An axis `a * X + e` gets a length it cannot have, where one exists.
            if not splats:
                for i, ax in enumerate(shape.axes):
                    coeff = _affine_coeff(e.setup.spec, ax)
                    if coeff:
                        a, off = coeff
                        extras.append(("bool", z3.Or(
                            (g.actual[i] - e.enc.expr(off)) % a != 0,
                            g.actual[i] < e.enc.expr(off))))
        if kind == OUT_SHAPE:
            hard.append(g.cons[1])  # the dtype is right
        else:
            hard += _solved_as_modelled(e, g.tensor, shape, dtype=False)
    elif kind == OUT_DTYPE:
        hard += [g.cons[0], z3.Not(g.cons[1])]
        extras.append(("dtype", e.enc.expr(Name(_dtype_var(g.tensor)))))
    elif kind == DTYPE_SET:
        consts = shared().dtype_consts
        hard += _solved_as_modelled(e, g.tensor, None, dtype=True)
        hard.append(z3.And(*[g.actual != consts[m] for m in sorted(g.members)]))
        extras.append(("dtype", g.actual))
    elif kind == DTYPE:
        hard.append(z3.Not(g.holds()))
        hard += _solved_as_modelled(e, g.tensor, None, dtype=True)
        if g.members is not None:
            consts = shared().dtype_consts
            hard.append(z3.Or(*[g.actual == consts[m] for m in sorted(g.members)]))
        extras.append(("dtype", g.actual))
    else:  # refinement, invariant, output axis, dtype combination
        hard.append(z3.Not(g.holds()))
    return hard, extras


def _solved_as_modelled(e: _Encoding, n: str, shape: ShapeList | None, *, dtype: bool) -> list:
    """The indices that the proven solving order reads from tensor `n` read the model's
    values there (or the reading itself fails: an inexact division, a dtype outside its
    set). A call broken where an index is *solved* would make the runtime solve another
    value and then fail elsewhere, or several declarations at once; broken only where the
    declarations are *checked*, the runtime's indices are the model's, only the drawn
    declaration is false under them, and the error must name it."""
    enc, out = e.enc, []
    steps = [x for x in e.bi.res.branch.construction + e.bi.res.branch.call if x.target == n]
    actual = enc.expr(Name(_shape_var(n)))
    for step in steps:
        if dtype and step.kind == P.SOLVE_DTYPE:
            t, dt = enc.expr(step.expr), enc.expr(Name(_dtype_var(n)))
            members = e.setup.spec.forall[step.expr.id].members
            ok = dt == t
            if members:
                consts = shared().dtype_consts
                ok = z3.Or(ok, z3.And(*[dt != consts[m] for m in sorted(members)]))
            out.append(ok)
        if dtype or shape is None or step.kind not in (P.SOLVE_AXIS, P.SOLVE_SPLAT):
            continue
        axes = shape.axes
        pos = z3.IntVal(sum(1 for a in axes[:step.axis] if not isinstance(a, Splat)))
        for a in axes[:step.axis]:
            if isinstance(a, Splat):
                pos = pos + z3.Length(enc.expr(a.value))
        if step.kind == P.SOLVE_SPLAT:
            after = axes[step.axis + 1:]
            stop = z3.IntVal(sum(1 for a in after if not isinstance(a, Splat)))
            for a in after:
                if isinstance(a, Splat):
                    stop = stop + z3.Length(enc.expr(a.value))
            out.append(z3.SubSeq(actual, pos, z3.Length(actual) - pos - stop)
                       == enc.expr(step.expr))
            continue
        value = actual[pos]
        if step.coeff is None:
            out.append(value == enc.expr(step.expr))
        else:
            c, o = enc.expr(step.coeff), enc.expr(step.offset)
            out.append(z3.Or(value == c * enc.expr(step.expr) + o, (value - o) % c != 0,
                             value - o < 0))
    return out


def _affine_axes(e: _Encoding, n: str) -> list[tuple[int, int, Expr]]:
    """(position, a, e) of each axis `a * X + e` (a >= 2) of a shape without splats."""
    shape = e.bi.res.shapes[n]
    if any(isinstance(a, Splat) for a in shape.axes):
        return []
    out = []
    for i, ax in enumerate(shape.axes):
        coeff = _affine_coeff(e.setup.spec, ax)
        if coeff:
            out.append((i, *coeff))
    return out


def _affine_coeff(spec, ax: Expr) -> tuple[int, Expr] | None:
    from opspec.schema.expr import free_names
    names = [n for n in free_names(ax) if isinstance(spec.forall.get(n), K.IntK)]
    if len(names) != 1 or isinstance(ax, Name):
        return None
    lin = linear(ax, names[0])
    if lin is None or not isinstance(lin[0], Const) or not isinstance(lin[0].value, int) \
            or lin[0].value < 2:
        return None
    return lin[0].value, lin[1]


def _violation(setup: _Setup, bi: _BranchInfo, kind: str, path: str, data,
               fresh: bool = True) -> tuple | None:
    """(values, blame, detail) of a call breaking `path`, or None when none was found.
    `fresh`: in a fresh Z3 context (else in the current one)."""
    with (_context() if fresh else _nothing()):
        e = _Encoding(setup, bi)
        hard, extras = _broken(e, kind, path)
        s = e.solver([], extra=hard + e.bounds() + _fixed_constraints(e))
        targets = _soft_targets(data, e, extras) if data is not None else \
            [c for k, c in extras if k == "bool"]
        for _ in range(_RETRIES):
            model = _greedy(s, e.enc, targets)
            if model is None:
                return None
            vals = _values(e, model)
            pins = _pins(e, vals)
            verdict = _valid_given(e, pins, e.groups)
            if verdict is Verdict.UNSAT:
                return vals, _lazy_blame(setup, bi, vals, path), \
                    _describe(e, kind, path, vals, model)
            s.add(z3.Not(z3.And(*pins)))  # a call that other indices make valid
        return None


def _describe(e: _Encoding, kind: str, path: str, vals: Mapping[str, Any], model) -> str:
    g = e.group(path)
    name = "out" if g.kind == "out" else g.tensor
    if g.tensor is not None and kind in (RANK, AXIS, DIVISIBILITY, OUT_SHAPE):
        actual = tuple(vals[_shape_var(g.tensor)])
        declared = _shape_str(e.bi.res.shapes[g.tensor])
        if kind == RANK:
            return f"{name} has rank {len(actual)}, declared {declared}"
        dec = model.eval(g.declared, model_completion=True)
        n = model.eval(z3.Length(dec), model_completion=True).as_long()
        values = tuple(model.eval(dec[i], model_completion=True).as_long() for i in range(n))
        return f"{name}.shape = {actual}, declared {declared} = {values}"
    if g.tensor is not None and kind in (DTYPE, DTYPE_SET, OUT_DTYPE):
        got = f"{name}.dtype = {vals[_dtype_var(g.tensor)]}"
        if kind == OUT_DTYPE:
            return got
        declared = g.declared.value if isinstance(g.declared, Const) else print_expr(g.declared)
        if isinstance(g.declared, Name) and g.declared.id in vals:
            declared += f" = {vals[g.declared.id]}"
        if kind == DTYPE_SET:
            declared += f" in {{{', '.join(sorted(g.members))}}}"
        return f"{got}, declared {declared}"
    rules = [r.text for r in e.setup.spec.rules if r.path == path]
    return f"`{rules[0]}` is false" if rules else f"{path} is false"


def _shape_str(sh: ShapeList) -> str:
    return "[" + ", ".join(_shape_text(sh)) + "]"


def _viable(setup: _Setup, bi: _BranchInfo) -> list[tuple[str, str]]:
    """The violation targets of a branch for which a rejected call exists (cached)."""
    with setup.lock:
        got = setup.viable.get(bi.key)
        if got is not None:
            return got
    with _context():
        targets = _targets(_Encoding(setup, bi))
        ok = [t for t in targets if _violation(setup, bi, t[0], t[1], None, fresh=False)]
    with setup.lock:
        setup.viable[bi.key] = ok
    return ok


def _param_targets(setup: _Setup) -> list[tuple[str, str, Any]]:
    """Parameters given a value outside their kind: (kind, path, value)."""
    from opspec.ops.op import DTYPES_BY_NAME
    out = []
    for n, p in setup.spec.params.items():
        if n in setup.spec.ctensors or n in setup.fixed:
            continue
        k = p.kind
        inner = K.unwrap_maybe(k)
        if isinstance(inner, K.StrK) and inner.literals:
            out.append((PARAM, p.path, "not-" + sorted(inner.literals)[0]))
        elif isinstance(inner, K.DTypeK) and inner.members:
            bad = [d for d in MAKEABLE_DTYPES if d not in inner.members]
            if bad:
                out.append((PARAM, p.path, DTYPES_BY_NAME[bad[0]]))
        elif isinstance(inner, K.IntK) and inner.nonneg:
            out.append((PARAM, p.path, -1))
    return out


def _direct_targets(setup: _Setup, bi: _BranchInfo) -> list[tuple[str, str]]:
    """Violations made from a valid call of the branch by changing one tensor: a strided
    tensor where `contiguous: true`; None for a tensor that must be passed; a tensor for an
    input whose `optional` expression is false on the branch."""
    spec = setup.spec
    out = [(CONTIGUOUS, spec.tensors[n].path + ".contiguous") for n in bi.tensors
           if spec.tensors[n].contiguous]
    out += [(MISSING, spec.tensors[n].path) for n in bi.tensors
            if spec.tensors[n].optional is not True and n not in setup.fixed]
    out += [(ABSENT, t.path + ".optional") for n, t in spec.inputs.items()
            if n not in bi.res.branch.present and t.optional not in (True, False)]
    return out


def violating_calls(op_cls: type, declaration: str | Iterable[str] | None = None, /, *,
                    kinds: Iterable[str] | None = None, fixed: Mapping[str, Any] | None = None,
                    where: Mapping[str, Any] | None = None, max_dim: int = MAX_DIM,
                    device: str | torch.device = "cpu",
                    **fixed_params: Any) -> st.SearchStrategy[Call]:
    """A strategy of calls that break exactly one declaration of `op_cls`'s spec.

    `declaration`: a declaration path (`"signature.inputs.x.shape"`,
    `"signature.shape_rules.0"`), or several; None draws from all of them (`declarations`
    lists them). `kinds`: only these kinds of violation (`VIOLATION_KINDS`). The other
    options are those of `valid_calls`. Each call has `violates`, `kind` and `blame`.
    """
    setup = _setup(op_cls, {**(fixed or {}), **fixed_params}, where or {}, max_dim, device)
    wanted = None if declaration is None else (
        {declaration} if isinstance(declaration, str) else set(declaration))
    kinds_ = None if kinds is None else set(kinds)
    if kinds_ is not None and kinds_ - set(VIOLATION_KINDS):
        raise ValueError(f"unknown kinds of violation {sorted(kinds_ - set(VIOLATION_KINDS))}; "
                         f"these are: {VIOLATION_KINDS}")

    def keep(kind: str, path: str) -> bool:
        return (wanted is None or path in wanted) and (kinds_ is None or kind in kinds_)

    menu_cache: list = []

    def menu() -> list[tuple]:
        """(kind, path, branch or value) of every viable violation, computed once."""
        if menu_cache:
            return menu_cache[0]
        items: list[tuple] = []
        live = _live_branches(setup)
        for bi in live:
            for kind, path in _viable(setup, bi) + _direct_targets(setup, bi):
                if keep(kind, path):
                    items.append((kind, path, bi))
        for bi in setup.excluded:
            if len(bi.excluded_by) == 1 and keep(DOMAIN, bi.excluded_by[0]) and \
                    _excluded_live(setup, bi):
                items.append((DOMAIN, bi.excluded_by[0], bi))
        if live:
            for kind, path, value in _param_targets(setup):
                if keep(kind, path):
                    items.append((kind, path, value))
        if not items:
            avail = sorted(declarations(op_cls, fixed=setup.fixed, where=setup.where,
                                        max_dim=max_dim))
            raise ValueError(f"{op_cls.__name__}: no call breaks {sorted(wanted or [])} "
                             f"{sorted(kinds_ or [])}; the declarations a call can break: "
                             f"{avail}")
        menu_cache.append(items)
        return items

    @st.composite
    def draw(draw_) -> Call:
        data = _Data(draw_)
        items = menu()
        kind, path, what = data.draw(st.sampled_from(items), label="violation")
        if kind == PARAM:
            live = _live_branches(setup)
            call = _valid_draw(setup, data.draw(st.sampled_from(live), label="branch"), data)
            name = path.rsplit(".", 1)[-1]
            params = {**call.params, name: what}
            return Call(setup.op, params, call.inputs, call.out, call.indices, call.combo,
                        path, PARAM, f"{name} = {_show(what)}")._with_blame(frozenset({path}))
        if kind == CONTIGUOUS:
            call = _valid_draw(setup, what, data, nonempty=path)
            return _noncontiguous(setup, call, path)
        if kind in (MISSING, ABSENT):
            return _presence(setup, _valid_draw(setup, what, data), kind, path)
        bi = what
        if kind == DOMAIN:
            call = _valid_draw(setup, bi, data)
            rule = next(r.text for r in setup.spec.rules if r.path == path)
            return Call(setup.op, call.params, call.inputs, call.out, call.indices, call.combo,
                        path, DOMAIN, f"`{rule}` excludes {_combo_text(bi.combo)}"
                        )._with_blame(frozenset({path}))
        found = _violation(setup, bi, kind, path, data)
        assume(found is not None)
        vals, blame, detail = found
        seed = data.draw(st.integers(0, 2 ** 31 - 1), label="seed")
        return _build(setup, bi, vals, seed, violates=path,
                      kind=kind, blame=blame, detail=detail)

    return draw()


def _combo_text(combo: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={describe_value(v)}" for k, v in combo.items()) or "this call"


def _excluded_live(setup: _Setup, bi: _BranchInfo) -> bool:
    key = ("excluded",) + bi.key
    with setup.lock:
        ok = setup.live.get(key)
    if ok is None:
        with _context():
            e = _Encoding(setup, bi)
            s = e.solver(e.groups, extra=e.bounds() + _fixed_constraints(e))
            ok = _check(s, e.enc)[0] is Verdict.SAT
        with setup.lock:
            setup.live[key] = ok
    return ok


def _valid_draw(setup: _Setup, bi: _BranchInfo, data, nonempty: str | None = None) -> Call:
    with _context():
        e = _Encoding(setup, bi)
        extra = e.bounds() + _fixed_constraints(e)
        if nonempty is not None:  # a tensor with two elements or more (it can be strided)
            n = next(n for n in bi.tensors
                     if setup.spec.tensors[n].path + ".contiguous" == nonempty)
            seq = e.enc.expr(Name(_shape_var(n)))
            extra.append(z3.Length(seq) >= 1)
            extra.append(seq[z3.Length(seq) - 1] >= 2)
            extra += [z3.Implies(i < z3.Length(seq), seq[i] >= 1) for i in range(8)]
        s = e.solver(e.groups, extra=extra)
        model = _greedy(s, e.enc, _soft_targets(data, e))
        assume(model is not None)
        vals = _values(e, model)
    seed = data.draw(st.integers(0, 2 ** 31 - 1), label="seed")
    return _build(setup, bi, vals, seed)


def _noncontiguous(setup: _Setup, call: Call, path: str) -> Call:
    name = path[:-len(".contiguous")].rsplit(".", 1)[-1]
    t = call.tensors()[name]
    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    strided = wide[..., ::2]
    strided.copy_(t)
    params = dict(call.params)
    inputs = list(call.inputs)
    if name in params:
        params[name] = strided
    else:
        inputs[list(setup.spec.inputs).index(name)] = strided
    return Call(setup.op, params, tuple(inputs), call.out, call.indices, call.combo, path,
                CONTIGUOUS, f"{name} strided {strided.stride()}")._with_blame(frozenset({path}))


def _presence(setup: _Setup, call: Call, kind: str, path: str) -> Call:
    spec = setup.spec
    name = (path[:-len(".optional")] if kind == ABSENT else path).rsplit(".", 1)[-1]
    value = torch.zeros(2, dtype=torch.float32) if kind == ABSENT else None
    params, inputs = dict(call.params), list(call.inputs)
    if name in params:
        params[name] = value
    else:
        inputs[list(spec.inputs).index(name)] = value
    t = spec.tensors[name]
    detail = (f"{name} passed, but its `optional: {print_expr(t.optional)}` is false"
              if kind == ABSENT else f"{name} = None, but it must be passed")
    return Call(setup.op, params, tuple(inputs), call.out, call.indices, call.combo, path, kind,
                detail)._with_blame(frozenset({path}))


def declarations(op_cls: type, /, *, fixed: Mapping[str, Any] | None = None,
                 where: Mapping[str, Any] | None = None, max_dim: int = MAX_DIM,
                 device: str | torch.device = "cpu", **fixed_params: Any) -> dict[str, tuple[str, ...]]:
    """Every declaration a drawn call can break, with the kinds of violation of each:
    `{"signature.inputs.x.shape": ("axis", "rank"), ...}` (decided with Z3, under the
    same bounds as the strategies)."""
    setup = _setup(op_cls, {**(fixed or {}), **fixed_params}, where or {}, max_dim, device)
    out: dict[str, set[str]] = {}
    live = _live_branches(setup)
    for bi in live:
        for kind, path in _viable(setup, bi) + _direct_targets(setup, bi):
            out.setdefault(path, set()).add(kind)
    for bi in setup.excluded:
        if len(bi.excluded_by) == 1 and _excluded_live(setup, bi):
            out.setdefault(bi.excluded_by[0], set()).add(DOMAIN)
    if live:
        for kind, path, _ in _param_targets(setup):
            out.setdefault(path, set()).add(kind)
    return {p: tuple(sorted(k)) for p, k in sorted(out.items())}
