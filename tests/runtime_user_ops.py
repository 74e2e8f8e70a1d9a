"""User-defined specs and Op subclasses for the runtime tests, written OUTSIDE the repository.

`user_ops(tmp_path_factory)` writes `toy.yaml` and the module `rt_user_ops.py` into a
fresh temporary folder and imports the module from there, the way a user's own package
would: each class names its manifest with the class attribute `manifest = "toy.yaml"`
(a path relative to the defining file) and is matched to its spec by its class name. The
module is imported once per test session: compile-boundary operators are registered per
process under the class name, so every class name here is used by no other test.

`expect_error` pins a failing call down to the exception TYPE, the op name, the declaration
path and the expected/actual values of its message.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from opspec.schema.errors import SignatureError, SignatureTypeError

USER_SPECS = """\
# Specs a user writes for their own ops; nothing here is bundled with opspec.

# Steps 1, 4, 5, 7: an optional input, a let in the output shape, a refinement, `out`.
RtAffineFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16 | float32]"}
    params:
      odt: {type: "float16 | float32", default: float32}
    inputs:
      x: {dtype: T, shape: "[M, N]"}
      bias: {dtype: T, shape: "[N]", optional: true}
    outputs:
      y: {dtype: odt, shape: "[M, W]", buffer: out}
    let: {W: "2 * N"}
    shape_rules:
    - "M % 8 == 0"
  workloads:
  - {M: 8, N: 4, some: [bias], dtype_cases: [{T: float32}], label: small}
  - {M: 16, N: 2, dtype_cases: [{T: float16}], label: small-nobias}
  roofline: {flops: "M * W"}

# Step 7: two outputs (count, storage).
RtPairFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float16 | float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
      n: {dtype: int64, shape: "[]"}
  workloads:
  - {M: 4, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M"}

# Step 2: a domain restriction; an input written when `inplace`, its alias output.
RtInplaceFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float16 | float32]"}
    params:
      inplace: {type: bool, default: true}
    inputs:
      x: {dtype: T, shape: "[M]", mutated: inplace}
      a: {dtype: T, shape: "[M]", optional: true}
      b: {dtype: T, shape: "[M]", optional: true}
    outputs:
      y: {dtype: T, shape: "[M]", alias: x}
    shape_rules:
    - "present(a) or present(b)"
  workloads:
  - {M: 8, some: [a], inplace: true, dtype_cases: [{T: float32}], label: with-a}
  - {M: 8, some: [b], inplace: false, dtype_cases: [{T: float32}], label: with-b}
  roofline: {flops: "M"}

# Device rules: construction-time tensors, `contiguous: true`, `device: cpu`.
RtDeviceFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, N: Dim, T: "DType[float16 | float32]"}
    params:
      w: {dtype: float32, shape: "[N]"}
      s: {dtype: float32, shape: "[N]", optional: true}
    inputs:
      x: {dtype: T, shape: "[M, N]", contiguous: true}
      idx: {dtype: int64, shape: "[M]", device: cpu}
    outputs:
      y: {dtype: T, shape: "[M, N]"}
    shape_rules:
    - "N % 2 == 0"
  workloads:
  - {M: 4, N: 2, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M * N"}

# The construction phase: parameters of every kind, construction-time refinements.
RtParamsFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float16 | float32]"}
    params:
      flag: {type: bool}
      mode: {type: "'fast' | 'exact'", default: fast}
      odt: {type: "float16 | float32", default: float32}
      cap: {type: "int | None", default: null}
      k: {type: int, default: 2}
    inputs:
      x: {dtype: T, shape: "[M, k]"}
    outputs:
      y: {dtype: odt, shape: "[M, k]"}
    shape_rules:
    - "k > 0"
    - "not present(cap) or cap.value >= 1"
    - "not present(cap) or M <= cap.value"
  workloads:
  - {M: 4, flag: true, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M * k"}

# The call device when no call-time tensor takes part: the construction-time tensor's.
RtHeldFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {N: Dim}
    params:
      w: {dtype: float32, shape: "[N]"}
    inputs:
      idx: {dtype: int64, shape: "[N]", device: cpu}
    outputs:
      y: {dtype: float32, shape: "[N]"}
  workloads:
  - {N: 4, label: small}
  roofline: {flops: "N"}

# The compile boundary's fake: its first input is a `device: cpu` one.
RtCpuFirstFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float16 | float32]"}
    inputs:
      idx: {dtype: int64, shape: "[M]", device: cpu}
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
  workloads:
  - {M: 4, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M"}

# An output that declares `device: cpu` (a per-element count kept on the host).
RtCpuOutFwdOp:
  family: toy
  status: implemented
  signature:
    forall: {M: Dim, T: "DType[float16 | float32]"}
    inputs:
      x: {dtype: T, shape: "[M]"}
    outputs:
      y: {dtype: T, shape: "[M]"}
      n: {dtype: int64, shape: "[M]", device: cpu}
  workloads:
  - {M: 4, dtype_cases: [{T: float32}], label: small}
  roofline: {flops: "M"}
"""

USER_MODULE = '''\
"""A user's op classes, outside the opspec repository."""

import torch

from opspec.ops.op import Op


class _Recording(Op):
    """Keeps every forward call; `hook`, when set, replaces forward's body."""

    def _record_call(self, *args):
        self.calls.append(args)
        return self.hook is not None


class RtAffineFwdOp(_Recording):
    manifest = "toy.yaml"

    def __init__(self, odt=torch.float32, *, target=None):
        self.odt = odt
        self.calls = []
        self.hook = None
        super().__init__(target=target)

    def forward(self, x, bias=None, out=None):
        if self._record_call(x, bias, out):
            return self.hook(x, bias, out)
        y = torch.cat([x, x], dim=1)
        if bias is not None:
            y = y + torch.cat([bias, bias])
        y = y.to(self.odt)
        if out is None:
            return y
        out.copy_(y)
        return out


class RtPairFwdOp(_Recording):
    manifest = "toy.yaml"

    def __init__(self, *, target=None):
        self.calls = []
        self.hook = None
        super().__init__(target=target)

    def forward(self, x):
        if self._record_call(x):
            return self.hook(x)
        return x * 2, torch.tensor(x.shape[0], device=x.device)


class RtInplaceFwdOp(_Recording):
    manifest = "toy.yaml"

    def __init__(self, inplace=True, *, target=None):
        self.inplace = inplace
        self.calls = []
        self.hook = None
        super().__init__(target=target)

    def forward(self, x, a=None, b=None):
        if self._record_call(x, a, b):
            return self.hook(x, a, b)
        d = sum(t for t in (a, b) if t is not None)
        if self.inplace:
            return x.add_(d)
        return x + d


class RtDeviceFwdOp(_Recording):
    manifest = "toy.yaml"

    def __init__(self, w=None, s=None, *, target=None):
        self.w = w
        self.s = s
        self.calls = []
        self.hook = None
        super().__init__(target=target)

    def forward(self, x, idx):
        self._record_call(x, idx)
        self.seen_w = self.w
        # The construction-time tensor is on the call device here (seed section 4).
        return x * self.w.to(x.dtype)


class RtParamsFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, flag, mode="fast", odt=torch.float32, cap=None, k=2, *, target=None):
        self.flag, self.mode, self.odt, self.cap, self.k = flag, mode, odt, cap, k
        super().__init__(target=target)

    def forward(self, x):
        return x.to(self.odt) * 2


class RtHeldFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, w=None, *, target=None):
        self.w = w
        self.wrong_device = False
        super().__init__(target=target)

    def forward(self, idx):
        if self.wrong_device:
            return torch.zeros(self.w.shape, dtype=torch.float32)
        return self.w * 2


class RtCpuFirstFwdOp(Op):
    manifest = "toy.yaml"

    def forward(self, idx, x):
        return x * 2


class RtCpuOutFwdOp(Op):
    manifest = "toy.yaml"

    def __init__(self, *, target=None):
        self.n_on = "cpu"       # tests move `n` to break its declared device
        super().__init__(target=target)

    def forward(self, x):
        n = torch.ones(x.shape, dtype=torch.int64, device=self.n_on)
        return x * 2, n


class RtNotInManifestFwdOp(Op):
    """Named like no spec of its manifest."""

    manifest = "toy.yaml"

    def forward(self, x):
        return x
'''

_loaded: dict[str, object] = {}


def load_module(folder: Path, stem: str, source: str):
    """Write `source` to `folder/<stem>.py` and import it under a unique module name, as a
    user's module is imported (registered in `sys.modules` before it runs)."""
    path = folder / f"{stem}.py"
    path.write_text(textwrap.dedent(source))
    name = f"{stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def user_ops(tmp_path_factory):
    """The user's module, written to a temporary folder and imported once per session."""
    mod = _loaded.get("user")
    if mod is None:
        folder = tmp_path_factory.mktemp("user_ops")
        (folder / "toy.yaml").write_text(USER_SPECS)
        mod = load_module(folder, "rt_user_ops", USER_MODULE)
        _loaded["user"] = mod
    return mod


def expect_error(excinfo, exc_type, op: str, path: str, *fragments: str) -> str:
    """The error is exactly `exc_type` (and so a ValueError or TypeError), its message starts
    with the op's name, names the declaration `path`, and carries every fragment."""
    e = excinfo.value
    assert type(e) is exc_type, f"{type(e).__name__}: {e}"
    if exc_type is SignatureError:
        assert isinstance(e, ValueError)
    if exc_type is SignatureTypeError:
        assert isinstance(e, TypeError)
    msg = str(e)
    assert msg.startswith(f"{op}: "), msg
    assert f"[{path} at " in msg or f"[{path}]" in msg, (path, msg)
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


def raises(exc_type=(SignatureError, SignatureTypeError)):
    return pytest.raises(exc_type)
