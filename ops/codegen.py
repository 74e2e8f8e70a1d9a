"""Code generation: a Plan branch becomes straight-line Python source, compiled once.

For each branch the generator writes three functions, each stamped with the spec, the
branch and the declaration of every line:

- `construct_<k>(op)`: the construction-phase steps (construction-time tensors, lets and
  refinements already evaluable); returns the indices it solved;
- `call_<k>(op, <inputs>, out, ind)`: the call-phase steps in the proven order; returns the
  dict of every index and let;
- `outputs_<k>(ind)`: the output types, a tuple of `(shape, dtype name)`.

Generated code never parses a string, reads only locals it binds and helpers of one fixed
namespace (`NAMESPACE`), and works on ints and SymInts alike: shapes are compared with
`!=`, divided with `//` and `%`, never converted to bool by anything but the check itself.
`opspec explain OP` prints the source.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from opspec.schema import kinds as K
from opspec.schema.elaborate import ElaboratedSpec
from opspec.schema.expr import Const, Expr, ShapeList, Splat, free_names
from opspec.schema.printer import print_expr, print_shape
from opspec.solver import plan as P
from opspec.solver.discriminants import describe_value
from opspec.ops.pyexpr import Lowering, primitive_namespace

_counter = itertools.count()


class Writer:
    """An indentation-aware line writer: the one template of all generated code."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def indent(self) -> "_Indent":
        return _Indent(self)

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, w: Writer):
        self.w = w

    def __enter__(self):
        self.w.depth += 1

    def __exit__(self, *exc):
        self.w.depth -= 1


@dataclass(frozen=True)
class Decl:
    """What a failing line enforces, for the error message."""

    path: str
    what: str          # a human description: "input b, axis 1 of Mat[trans_b, K, N] = [N, K]"
    expected: str = "" # the declared expression, printed
    solved_from: tuple[tuple[str, str], ...] = ()  # index -> "input a"
    #: a refinement's names and the locals holding them: its failure shows their values
    reads: tuple[tuple[str, str], ...] = ()


@dataclass
class BranchCode:
    key: tuple                         # the branch's combination, as (name, value) pairs
    source: str
    construct: Callable
    call: Callable
    outputs: Callable
    finish: Callable
    decls: list[Decl]
    #: call + forward + finish + record in one function, for the plain eager call (every
    #: input passed, no `out`); None on branches without one.
    fast: Callable | None = None


def _lv(name: str) -> str:
    return "i_" + name


def _pv(name: str) -> str:
    return "p_" + name


def _tv(name: str) -> str:
    return "t_" + name


class BranchGenerator:
    def __init__(self, spec: ElaboratedSpec, branch: P.Branch, call_inputs: list[str]):
        self.spec = spec
        self.branch = branch
        self.call_inputs = call_inputs
        self.w = Writer()
        self.decls: list[Decl] = []
        self.solved_from: dict[str, str] = {}
        self.k = next(_counter)

    # names
    def name_of(self, n: str) -> str:
        spec = self.spec
        if n in spec.params:
            return _pv(n)
        if n in spec.forall or n in spec.lets:
            return _lv(n)
        if n in K.DTYPES:
            return repr(n)
        raise KeyError(n)

    def py(self, e: Expr) -> str:
        return Lowering(self.name_of).py(e)

    def decl(self, path: str, what: str, expected: str = "",
             reads: tuple[tuple[str, str], ...] = ()) -> int:
        self.decls.append(Decl(path, what, expected, tuple(self.solved_from.items()), reads))
        return len(self.decls) - 1

    # -- positions of declared axes in the actual shape ------------------------------------

    def axis_pos(self, shape: ShapeList, i: int, sname: str) -> str:
        """The position of declared axis i in the actual shape, as source."""
        axes = shape.axes
        before = axes[:i]
        if all(not isinstance(a, Splat) or self.known_splat(a) for a in before):
            fixed = sum(1 for a in before if not isinstance(a, Splat))
            lens = [f"len({self.py(a.value)})" for a in before if isinstance(a, Splat)]
            return P.length_text(fixed, lens)
        after = axes[i:]
        fixed = sum(1 for a in after if not isinstance(a, Splat))
        lens = [f"len({self.py(a.value)})" for a in after if isinstance(a, Splat)]
        total = P.length_text(fixed, lens)
        return f"len({sname}) - " + (f"({total})" if " " in total else total)

    def known_splat(self, a: Splat) -> bool:
        return all(n in self.bound or self.spec.kind_of(n) is None for n in free_names(a.value))

    # -- generation ------------------------------------------------------------------------

    def generate(self) -> tuple[str, str, str, str, str, str | None]:
        spec, b = self.spec, self.branch
        combo = ", ".join(f"{k}={describe_value(v)}" for k, v in b.combo) or "(no discriminants)"
        tag = f"{spec.name}_{self.k}"
        w = self.w
        w(f"# Generated by opspec from {spec.file} for {spec.name}, branch {combo}.")
        w(f"# Do not edit: `opspec explain {spec.name}` regenerates it.")
        # construction
        self.bound: set[str] = set(spec.params)
        cname = f"construct_{tag}"
        w(f"def {cname}(op):")
        with w.indent():
            self.bind_params(b.construction)
            w("_d = -1")
            w("try:")
            with w.indent():
                for s in b.construction:
                    self.step(s, construction=True)
                w("pass")
            self.handler()
            w("return {" + ", ".join(f"{n!r}: {_lv(n)}" for n in sorted(self.solved_names())) + "}")
        w()
        constructed = set(self.solved_names())
        # call: checks in the proven order, then the call device and the empty-write test
        fname = f"call_{tag}"
        args = ", ".join(_tv(n) for n in self.call_inputs)
        call_start = len(w.lines)
        w(f"def {fname}(op, {args + ', ' if args else ''}t_out, ind):")
        with w.indent():
            w('"""Signature checks of a call; returns (indices, call device, empty write)."""')
            self.bind_params(b.call, outputs=True)
            for n in sorted(constructed):
                w(f"{_lv(n)} = ind[{n!r}]")
            w("_d = -1")
            w("try:")
            with w.indent():
                self.absent_inputs()
                for s in b.call:
                    self.step(s, construction=False)
                self.dtype_combos()
                self.device_checks()
                self.out_buffer()
                empty = self.empty_write()
                # Inside the guarded block: an output shape can fail to evaluate (`broadcast`
                # of shapes that do not broadcast); the error then names that output.
                outs = self.branch.outputs
                if len(outs) == 1:
                    shape = print_shape(outs[0].shape)
                    d = self.decl(spec.outputs[outs[0].name].path + ".shape",
                                  f"output {outs[0].name}, shape {shape}", shape)
                    w(f"_d = {d}")
                elif outs:
                    w(f"_d = {self.decl('signature.outputs', 'the output shapes', 'the output shapes')}")
                w(f"_empty = {empty}")
            self.handler()
            record = "{" + ", ".join(f"{n!r}: {_lv(n)}" for n in sorted(self.solved_names())) + "}"
            call_body = w.lines[call_start + 2:]  # after the header and the docstring
            w(f"return {record}, _dev, _empty")
        w()
        oname = f"outputs_{tag}"
        w(f"def {oname}(op, ind):")
        with w.indent():
            w('"""The output types: (name, shape, dtype name) of each output on this branch."""')
            self.bind_call_state(b.call)
            w("return " + self.output_types())
        w()
        xname = f"finish_{tag}"
        w(f"def {xname}(op, _r, {args + ', ' if args else ''}t_out, ind, _dev):")
        with w.indent():
            w('"""Checks of what forward returned (seed § 1, step 7)."""')
            self.bind_call_state(b.call)
            checks_start = len(w.lines)
            self.output_checks()
            finish_checks = w.lines[checks_start:]
            w("return _r")
        sname = None
        if not b.has_out and all(n in b.present for n in self.call_inputs):
            sname = f"fast_{tag}"
            self.fast(sname, args, call_body, record, finish_checks)
        return w.source(), cname, fname, oname, xname, sname

    def fast(self, sname: str, args: str, call_body: list[str], record: str,
             finish_checks: list[str]) -> None:
        """The plain eager call (every input passed, no `out`) as one function: the lines of
        the call checks, forward, the lines of the output checks and the record, so that
        the hot path makes one call instead of three and keeps the indices in locals.
        Returns _SLOW where the call writes nothing (the general path makes the outputs)."""
        w = self.w
        w()
        w(f"def {sname}(op, br{', ' + args if args else ''}):")
        with w.indent():
            w('"""call, forward, finish and the record of an eager call in one function."""')
            w("t_out = None")
            w("ind = br.ind")
        w.lines.extend(call_body)
        with w.indent():
            w("if _empty:")
            with w.indent():
                w("return _SLOW")
            w(f"_r = op.forward({args})")
        w.lines.extend(finish_checks)
        with w.indent():
            w(f"op._opspec_last = (br, {record}, ({args}{',' if args else ''}), None, _dev, ())")
            w("return _r")

    def absent_inputs(self) -> None:
        """An input that does not exist on this branch (its `optional` expression is false
        for these parameters) must not be passed: a tensor there would reach no check."""
        w, spec = self.w, self.spec
        for n in self.call_inputs:
            t = spec.inputs[n]
            if n in self.branch.present or t.optional is True:
                continue  # `optional: true` inputs select the branch by their presence
            cond = t.optional if t.optional is not False else None
            what = f"input {n}" + (f" (optional: {print_expr(cond)}, false here)" if cond else "")
            d = self.decl(t.path + ".optional", what, "None")
            w(f"_d = {d}")
            w(f"if {_tv(n)} is not None:")
            with w.indent():
                self.fail(d, "None", "'a tensor'")

    def bind_call_state(self, steps) -> None:
        """Bind the parameters and every index and let a finished call check solved."""
        self.bind_params(steps, outputs=True)
        for n in sorted(self.solved_names()):
            self.w(f"{_lv(n)} = ind[{n!r}]")

    def output_types(self) -> str:
        outs = []
        for o in self.branch.outputs:
            outs.append(f"({o.name!r}, {self.shape_tuple(o.shape)}, {self.py(o.dtype)})")
        return "(" + ", ".join(outs) + ("," if len(outs) == 1 else "") + ")"

    def shape_tuple(self, shape: ShapeList) -> str:
        axes = [f"*{self.py(a.value)}" if isinstance(a, Splat) else self.py(a) for a in shape.axes]
        return "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"

    def device_checks(self) -> None:
        """All call-time tensors on one device, except `device: cpu` ones (seed § 4)."""
        w, spec = self.w, self.spec
        first = None
        for n in self.call_inputs:
            if n not in self.branch.present or spec.inputs[n].device == "cpu":
                continue
            if first is None:
                first = n
                w(f"_dev = {_tv(n)}.device")
                continue
            d = self.decl(spec.inputs[n].path, f"input {n}, device (all inputs on one device, "
                          f"as input {first})")
            w(f"_d = {d}")
            w(f"if {_tv(n)}.device != _dev:")
            with w.indent():
                self.fail(d, "str(_dev)", f"str({_tv(n)}.device)")
        if first is None:
            # Seed § 4: with no call-time tensor taking part, a construction-time tensor that
            # does not declare `device: cpu` decides the call device, before the default.
            held = [n for n, t in spec.ctensors.items()
                    if n in self.branch.present and t.device != "cpu"]
            if held:
                w(f"_dev = op._opspec_ctensors[{held[0]!r}].device")
            else:
                w("_dev = _default_device()")

    def out_buffer(self) -> None:
        """A passed `out` has the output's shape, dtype and device (seed § 1, step 5)."""
        if not self.branch.has_out:
            return
        w, spec = self.w, self.spec
        o = next(o for o in self.branch.outputs if o.buffer == "out")
        d = self.decl(spec.outputs[o.name].path + ".buffer",
                      f"out (the buffer of output {o.name}, Tensor[{print_expr(o.dtype)}, "
                      f"{print_shape(o.shape)}])")
        w(f"_d = {d}")
        w("if not isinstance(t_out, _Tensor):")
        with w.indent():
            self.fail(d, "'a torch.Tensor'", "type(t_out).__name__")
        shape = self.shape_tuple(o.shape)
        w(f"if t_out.shape != {shape}:")
        with w.indent():
            self.fail(d, f"'shape ' + str({shape})", "'shape ' + str(tuple(t_out.shape))")
        w(f"if t_out.dtype is not _DTYPES[{self.py(o.dtype)}]:")
        with w.indent():
            self.fail(d, f"'dtype ' + {self.py(o.dtype)}", "'dtype ' + str(t_out.dtype)")
        self.device_check(d, "t_out", spec.outputs[o.name].device)

    def device_check(self, d: str, var: str, declared: str | None) -> None:
        """`var` (an output or `out`) is on the call device, or on the CPU where its output
        declares `device: cpu` (seed § 4: such a tensor is always on the CPU)."""
        w = self.w
        if declared == "cpu":
            w(f"if {var}.device.type != 'cpu':")
            with w.indent():
                self.fail(d, "'device cpu'", f"'device ' + str({var}.device)")
            return
        w(f"if _dev is not None and {var}.device != _dev:")
        with w.indent():
            self.fail(d, "'device ' + str(_dev)", f"'device ' + str({var}.device)")

    def empty_write(self) -> str:
        """Source of the empty-write test: every tensor the call writes has no elements."""
        terms = []
        for o in self.branch.outputs:
            sh = self.shape_tuple(o.shape)
            terms.append(f"0 in {sh}")
        for n in self.branch.written:
            terms.append(f"{_tv(n)}.numel() == 0")
        return "(" + " and ".join(terms) + ")" if terms else "False"

    def output_checks(self) -> None:
        w, spec, b = self.w, self.spec, self.branch
        outs = list(spec.outputs)
        if not outs:
            d = self.decl("signature.outputs", "the result (the spec declares no outputs)", "None")
            w("if _r is not None:")
            with w.indent():
                self.fail(d, "None", "type(_r).__name__")
            return
        if len(outs) == 1:
            w("_o0 = _r")
        else:
            d = self.decl("signature.outputs", f"the result ({len(outs)} outputs: "
                          f"{', '.join(outs)})")
            w(f"if type(_r) is not tuple or len(_r) != {len(outs)}:")
            with w.indent():
                # Name the count received, not only its type: "got tuple" hid a wrong count.
                self.fail(d, f"'a tuple of {len(outs)} tensors'",
                          "('a tuple of ' + str(len(_r)) + ' values' if type(_r) is tuple "
                          "else type(_r).__name__)")
            w(", ".join(f"_o{i}" for i in range(len(outs))) + " = _r")
        types = {o.name: o for o in b.outputs}
        ins = [n for n in self.call_inputs if n in b.present]
        need_storage = False
        for i, n in enumerate(outs):
            decl = spec.outputs[n]
            ov = f"_o{i}"
            if n not in types:
                d = self.decl(decl.path + ".nullable", f"output {n} (absent on this call)", "None")
                w(f"if {ov} is not None:")
                with w.indent():
                    self.fail(d, "None", f"type({ov}).__name__")
                continue
            o = types[n]
            d = self.decl(decl.path, f"output {n} of forward, Tensor[{print_expr(o.dtype)}, "
                          f"{print_shape(o.shape)}]")
            w(f"if not isinstance({ov}, _Tensor):")
            with w.indent():
                self.fail(d, "'a torch.Tensor'", f"type({ov}).__name__")
            sh = self.shape_tuple(o.shape)
            w(f"if {ov}.shape != {sh}:")
            with w.indent():
                self.fail(d, f"'shape ' + str({sh})", f"'shape ' + str(tuple({ov}.shape))")
            w(f"if {ov}.dtype is not _DTYPES[{self.py(o.dtype)}]:")
            with w.indent():
                self.fail(d, f"'dtype ' + {self.py(o.dtype)}", f"'dtype ' + str({ov}.dtype)")
            self.device_check(d, ov, decl.device)
            if decl.contiguous:
                w(f"if not {ov}.is_contiguous():")
                with w.indent():
                    self.fail(d, "'contiguous'", f"'strides ' + str({ov}.stride())")
            if decl.alias is not None and decl.alias in b.written:
                w(f"if {ov} is not {_tv(decl.alias)}:")
                with w.indent():
                    self.fail(d, f"'the input object {decl.alias} (alias)'", "'another tensor'")
                continue
            if decl.buffer == "out" and b.has_out:
                w(f"if {ov} is not t_out:")
                with w.indent():
                    self.fail(d, "'the out tensor'", "'another tensor'")
                continue
            if ins:
                if len(ins) <= 3:  # inline: this runs on every call
                    shares = " or ".join(f"_is_alias_of({ov}, {_tv(t)})" for t in ins)
                else:
                    if not need_storage:
                        need_storage = True
                        w("_ins = (" + ", ".join(_tv(t) for t in ins) + ")")
                    shares = f"_shares_storage({ov}, _ins)"
                w(f"if {ov}.numel() and ({shares}):")
                with w.indent():
                    self.fail(d, "'a tensor that shares no storage with the inputs'",
                              "'a tensor sharing storage with an input'")

    def solved_names(self) -> set[str]:
        return {n for n in self.bound if n in self.spec.forall or n in self.spec.lets}

    def bind_params(self, steps, outputs: bool = False) -> None:
        """Bind the parameters these steps (and, if asked, the output types) read."""
        used: set[str] = set()
        for st in steps:
            for e in (st.expr, st.coeff, st.offset, *st.splats):
                if e is not None:
                    used |= free_names(e)
            if st.target in self.spec.tensors:
                shape = self.resolved_shape(st.target) if st.kind != P.PRESENCE else None
                if shape is not None:
                    for a in shape.axes:
                        used |= free_names(a.value if isinstance(a, Splat) else a)
        if outputs:
            for o in self.branch.outputs:
                used |= free_names(o.dtype)
                for a in o.shape.axes:
                    used |= free_names(a.value if isinstance(a, Splat) else a)
            for _, _, dt in self.branch.tensors:
                used |= free_names(dt)
        used |= {n for n in self.spec.params if any(n in free_names(l.expr) for l in self.spec.lets.values())}
        if self.spec.dtype_combos:
            used |= set(self.spec.dtype_combos[0])
        for n in self.spec.params:
            if n in used:
                self.w(f"{_pv(n)} = op._opspec_params[{n!r}]")

    def handler(self) -> None:
        w = self.w
        # A primitive outside its domain raises EvaluationError (an OpspecError): it is
        # wrapped so that the error names the declaration, like any other evaluation failure.
        w("except _EvaluationError as exc:")
        with w.indent():
            w("raise _evaluation_failed(op, _DECLS, _d, exc, locals()) from exc")
        w("except _OpspecError:")
        with w.indent():
            w("raise")
        w("except Exception as exc:")
        with w.indent():
            w("raise _evaluation_failed(op, _DECLS, _d, exc, locals()) from exc")

    def fail(self, d: int, expected: str, got: str) -> None:
        self.w(f"raise _check_failed(op, _DECLS, {d}, {expected}, {got}, locals())")

    def step(self, s: P.Step, construction: bool) -> None:
        w, spec = self.w, self.spec
        t = spec.tensors.get(s.target)
        shape = None
        if t is not None and s.kind in (P.RANK, P.SOLVE_AXIS, P.SOLVE_SPLAT, P.CHECK_AXIS):
            shape = self.resolved_shape(s.target)
        tv = _tv(s.target)
        sv = f"_s_{s.target}"
        role = {"input": "input", "ctensor": "construction-time tensor", "output": "output"}.get(
            t.role if t is not None else "", "")
        if s.kind == P.PRESENCE:
            if t is not None and t.role == "ctensor":
                w(f"{tv} = op._opspec_ctensors[{s.target!r}]")
            d = self.decl(s.decl, f"{role} {s.target}", "a torch.Tensor")
            w(f"_d = {d}")
            w(f"if not isinstance({tv}, _Tensor):")
            with w.indent():
                self.fail(d, "'a torch.Tensor'", f"type({tv}).__name__")
            if t is not None and t.device == "cpu":
                d = self.decl(s.decl + ".device", f"{role} {s.target} (device: cpu)", "cpu")
                w(f"_d = {d}")
                w(f"if {tv}.device.type != 'cpu':")
                with w.indent():
                    self.fail(d, "'cpu'", f"str({tv}.device)")
            if t is not None and t.contiguous:
                d = self.decl(s.decl + ".contiguous", f"{role} {s.target} (contiguous: true)",
                              "a contiguous tensor")
                w(f"_d = {d}")
                w(f"if not {tv}.is_contiguous():")
                with w.indent():
                    # The same text as the Decl's, so the message does not print it twice.
                    self.fail(d, "'a contiguous tensor'", f"'strides ' + str({tv}.stride())")
            w(f"{sv} = {tv}.shape")
            return
        if s.kind == P.RANK:
            declared = print_shape(spec.tensors[s.target].shape)
            exp = P.length_text(s.rank, [f"len({self.py(x)})" for x in s.splats])
            if s.axis == -1 and exp == "0":
                return  # at least 0 axes: every tensor has them
            d = self.decl(s.decl, f"{role} {s.target}, the rank of {declared}"
                          + (f" = {print_shape(shape)}" if print_shape(shape) != declared else ""))
            w(f"_d = {d}")
            op_ = "<" if s.axis == -1 else "!="
            w(f"if len({sv}) {op_} {exp}:")
            with w.indent():
                self.fail(d, (f"'at least ' + str({exp})" if s.axis == -1 else exp), f"len({sv})")
            return
        if s.kind == P.SOLVE_DTYPE:
            n = s.expr.id
            d = self.decl(s.decl, f"{role} {s.target}, dtype {n}")
            w(f"_d = {d}")
            # `or`, not a .get default: the default would be formatted on every call
            members = spec.forall[n].members
            if members is None:
                w(f"{_lv(n)} = _DTYPE_NAMES.get({tv}.dtype) or str({tv}.dtype)")
            else:
                # bound after its check: a rejected dtype is not reported as bound
                w(f"_v = _DTYPE_NAMES.get({tv}.dtype) or str({tv}.dtype)")
                w(f"if _v not in {tuple(sorted(members))!r}:")
                with w.indent():
                    self.fail(d, repr(" | ".join(sorted(members))), "_v")
                w(f"{_lv(n)} = _v")
            self.bound.add(n)
            self.solved_from[n] = f"{role} {s.target}"
            return
        if s.kind == P.CHECK_DTYPE:
            d = self.decl(s.decl, f"{role} {s.target}, dtype {print_expr(s.expr)}",
                          print_expr(s.expr))
            w(f"_d = {d}")
            w(f"if (_DTYPE_NAMES.get({tv}.dtype) or str({tv}.dtype)) != {self.py(s.expr)}:")
            with w.indent():
                self.fail(d, self.py(s.expr), f"_DTYPE_NAMES.get({tv}.dtype) or str({tv}.dtype)")
            return
        if s.kind in (P.SOLVE_AXIS, P.CHECK_AXIS, P.SOLVE_SPLAT):
            self.axis_step(s, shape, role, tv, sv)
            return
        if s.kind == P.LET:
            d = self.decl(s.decl, f"let {s.target}", print_expr(s.expr))
            w(f"_d = {d}")
            w(f"{_lv(s.target)} = {self.py(s.expr)}")
            self.bound.add(s.target)
            return
        if s.kind in (P.RULE, P.DOMAIN):
            reads = tuple((n, self.name_of(n)) for n in sorted(free_names(s.expr))
                          if n in spec.params or n in spec.forall or n in spec.lets)
            d = self.decl(s.decl, f"refinement `{print_expr(s.expr)}`", print_expr(s.expr),
                          reads=reads)
            w(f"_d = {d}")
            w(f"if not ({self.py(s.expr)}):")
            with w.indent():
                self.fail(d, "True", "False")
            return
        if s.kind == P.NONNEG:
            d = self.decl(s.decl, f"output {s.target}, axis {s.axis} `{print_expr(s.expr)}`",
                          f"{print_expr(s.expr)} >= 0")
            w(f"_d = {d}")
            w(f"if {self.py(s.expr)} < 0:")
            with w.indent():
                self.fail(d, "'>= 0'", self.py(s.expr))
            return
        if s.kind == P.OUT_BUFFER:
            return  # checked after the output types are known, in the runtime (same call)
        raise ValueError(f"unknown plan step {s.kind}")

    def resolved_shape(self, name: str) -> ShapeList:
        for n, shape, _ in self.branch.tensors:
            if n == name:
                return shape
        raise KeyError(name)

    def axis_step(self, s: P.Step, shape: ShapeList, role: str, tv: str, sv: str) -> None:
        w, spec = self.w, self.spec
        declared = print_shape(spec.tensors[s.target].shape)
        resolved = print_shape(shape)
        term = declared + (f" = {resolved}" if resolved != declared else "")
        ax = shape.axes[s.axis]
        if s.kind == P.SOLVE_SPLAT:
            n = s.expr.id
            start = self.axis_pos(shape, s.axis, sv)
            after = shape.axes[s.axis + 1:]
            fixed = sum(1 for a in after if not isinstance(a, Splat))
            lens = [f"len({self.py(a.value)})" for a in after if isinstance(a, Splat)]
            stop = P.length_text(fixed, lens)
            d = self.decl(s.decl, f"{role} {s.target}, *{n} of {term}")
            w(f"_d = {d}")
            lo = "" if start == "0" else start
            hi = "" if stop == "0" else f"len({sv}) - " + (f"({stop})" if " " in stop else stop)
            w(f"{_lv(n)} = tuple({sv}[{lo}:{hi}])")
            self.bound.add(n)
            self.solved_from[n] = f"{role} {s.target}"
            return
        pos = self.axis_pos(shape, s.axis, sv)
        if isinstance(ax, Splat):
            d = self.decl(s.decl, f"{role} {s.target}, *{print_expr(ax.value)} of {term}",
                          print_expr(ax.value))
            w(f"_d = {d}")
            val = self.py(ax.value)
            w(f"if tuple({sv}[{pos}:{pos} + len({val})]) != tuple({val}):")
            with w.indent():
                self.fail(d, f"tuple({val})", f"tuple({sv}[{pos}:{pos} + len({val})])")
            return
        what = f"{role} {s.target}, axis {s.axis} of {term}"
        if s.kind == P.CHECK_AXIS:
            d = self.decl(s.decl, what, print_expr(ax))
            w(f"_d = {d}")
            w(f"if {sv}[{pos}] != {self.py(ax)}:")
            with w.indent():
                self.fail(d, self.py(ax), f"{sv}[{pos}]")
            return
        n = s.expr.id
        d = self.decl(s.decl, what, print_expr(ax))
        w(f"_d = {d}")
        if s.coeff is None:
            w(f"{_lv(n)} = {sv}[{pos}]")
        else:
            c, o = self.py(s.coeff), self.py(s.offset)
            w(f"_v = {sv}[{pos}] - {o}" if o != "0" else f"_v = {sv}[{pos}]")
            if not (isinstance(s.coeff, Const)):
                w(f"if {c} <= 0:")
                with w.indent():
                    self.fail(d, "'a positive coefficient'", c)
            w(f"if _v % {c} != 0 or _v < 0:")
            with w.indent():
                self.fail(d, f"'a non-negative multiple of ' + str({c}) + ' plus ' + str({o})",
                          f"{sv}[{pos}]")
            w(f"{_lv(n)} = _v // {c}")
        self.bound.add(n)
        self.solved_from[n] = f"{role} {s.target}"

    def dtype_combos(self) -> None:
        spec = self.spec
        if not spec.dtype_combos:
            return
        keys = list(spec.dtype_combos[0])
        if not all(k in self.bound or k in spec.params for k in keys):
            return
        rows = tuple(tuple(r[k] for k in keys) for r in spec.dtype_combos)
        d = self.decl("signature.dtype_combos", "the dtype combination " + ", ".join(keys))
        vals = "(" + ", ".join(self.name_of(k) for k in keys) + ",)"
        self.w(f"_d = {d}")
        self.w(f"if {vals} not in {rows!r}:")
        with self.w.indent():
            self.fail(d, repr("one of " + str(list(rows))), vals)


def generate_branch(spec: ElaboratedSpec, branch: P.Branch, call_inputs: list[str],
                    namespace: dict[str, Any]) -> BranchCode:
    g = BranchGenerator(spec, branch, call_inputs)
    source, c, f, o, x, fast = g.generate()
    ns = dict(namespace)
    ns["_DECLS"] = g.decls
    code = compile(source, f"<opspec generated: {spec.name}>", "exec")  # generated code only
    exec(code, ns)  # noqa: S102 -- our own source, built from the parsed AST, never spec text
    return BranchCode(branch.combo, source, ns[c], ns[f], ns[o], ns[x], g.decls,
                      ns[fast] if fast else None)


def base_namespace() -> dict[str, Any]:
    from opspec.schema.values import field_of

    def _kind(v):
        return field_of(v, "kind") if not hasattr(v, "ctor") else v.ctor

    ns = {"_INF": float("inf"), "_field": field_of, "_kind": _kind}
    ns.update(primitive_namespace())
    return ns
