"""Offline sm_90 builds of Triton kernels, shared by the tests that check what a launch compiles to.

No GPU is needed: `build` specialises a `JITFunction`'s signature the way Triton's launcher
would for given argument values, compiles it for a CUDA sm_90 target (ptxas included) and
returns a `Build` that reads the PTX, the SASS, the register count and the like. Under the
CPU interpreter (`TRITON_INTERPRET=1`) triton.language is patched, so the builds run in a fresh
process: a test keeps its build code in a script string that does `from sm90_build import ...`
and calls `run_script`, which starts that process without the interpreter, with this directory
on its `sys.path`, and returns the JSON the script prints.

    built = run_script(_COMPILE_SCRIPT)       # the script ends with json.dump(out, sys.stdout)

Importing this module imports neither triton nor torch; `build` imports triton when it runs.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from functools import cached_property
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parent)

# torch dtypes (by name) as Triton pointer element types, for tensors passed as arguments
_ELEMENT_TYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32",
                  "torch.float64": "fp64", "torch.int8": "i8", "torch.uint8": "u8",
                  "torch.int16": "i16", "torch.int32": "i32", "torch.int64": "i64"}

# a SASS instruction line as cuobjdump prints it: `        /*0a80*/   LDG.E.128 R4, ... ;`
_SASS_LINE = re.compile(r"\s+/\*[0-9a-f]{4}\*/")
_SASS_ADDRESS = re.compile(r"/\*([0-9a-f]{4})\*/")
_CACHE_HINT = re.compile(r"\.L1::evict_\w+|\.L2::cache_hint")


def run_script(script: str, timeout: float = 600):
    """Run `script` in a fresh Python process and return the JSON it writes to stdout.

    The process gets this environment without `TRITON_INTERPRET` (so triton compiles for real)
    and this directory at the front of `sys.path` (so the script can import this module). A
    non-zero exit fails the calling test with the last 3000 characters of stderr."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    prelude = f"import sys\nsys.path.insert(0, {TESTS_DIR!r})\n"
    res = subprocess.run([sys.executable, "-c", prelude + script], capture_output=True,
                         text=True, env=env, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def pointers(fn, element_type: str) -> dict:
    """Every argument of `fn` named `*_ptr`, mapped to the pointer type `element_type`
    (`"*bf16"`), for a kernel whose pointers all share one element type."""
    return {name: element_type for name in fn.arg_names if name.endswith("_ptr")}


def specialise(fn, args: dict, constexprs: dict):
    """`(signature, constexprs, attrs)` for `ASTSource`, as Triton's launcher specialises `fn`.

    Each argument named in `constexprs` is a constant; one left out of both takes its
    default (a constant where it is a constexpr or None). Any other takes its value from `args`:
    a string is its Triton type (`"*bf16"`, `"fp32"`, `"tensordesc<...>"`), pointers 16-byte
    aligned; a torch tensor is a 16-byte aligned pointer to its dtype; a float is `fp32`; an
    integer equal to 1 becomes the constant 1, any other is `i32` (`i64` from 2**31 on),
    16-divisible where it is a multiple of 16. The `constexprs` returned are a copy with the
    constants that specialisation added."""
    sig, attrs, cexpr = {}, {}, dict(constexprs)
    defaults = {n: p.default for n, p in inspect.signature(fn.fn).parameters.items()
                if p.default is not inspect.Parameter.empty}
    for i, name in enumerate(fn.arg_names):
        if name not in cexpr and name not in args and name in defaults:
            # an argument with a default, left out as a launch may leave it
            if defaults[name] is None or i in fn.constexprs:
                cexpr[name] = defaults[name]
            else:
                args = dict(args, **{name: defaults[name]})
        if name in cexpr:
            sig[name] = "constexpr"
            continue
        v = args[name]
        if hasattr(v, "dtype") and hasattr(v, "data_ptr"):       # a torch tensor
            v = "*" + _ELEMENT_TYPES[str(v.dtype)]
        if isinstance(v, str):
            sig[name] = v
            if v.startswith("*"):
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[name] = "fp32"
        elif v == 1:
            sig[name], cexpr[name] = "constexpr", 1
        else:
            sig[name] = "i64" if abs(v) >= 2**31 else "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, cexpr, attrs


def build(fn, args: dict, constexprs: dict, num_warps: int, num_stages: int | None = None,
          **options) -> "Build":
    """Compile the `JITFunction` `fn` for sm_90 as a launch with these arguments would be
    (see `specialise`), with `num_warps`, `num_stages` (Triton's default when None) and any
    further compile options (`maxnreg=...`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, cexpr, attrs = specialise(fn, args, constexprs)
    opts = {"num_warps": num_warps, **({} if num_stages is None else {"num_stages": num_stages}),
            **options}
    kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cexpr, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32), options=opts)
    return Build(kernel, cexpr)


class Build:
    """One compiled kernel: its PTX, TTGIR and SASS text and what the tests read from them.

    `constexprs` are the constants it was compiled with, specialisation's included."""

    def __init__(self, kernel, constexprs: dict):
        self.kernel = kernel
        self.constexprs = constexprs

    @property
    def ptx(self) -> str:
        return self.kernel.asm["ptx"]

    @property
    def ttgir(self) -> str:
        return self.kernel.asm["ttgir"]

    @property
    def shared(self) -> int:
        """Bytes of shared memory a program uses."""
        return self.kernel.metadata.shared

    @property
    def local(self) -> int:
        """How often the PTX names local memory: 0 means no spills and no local arrays."""
        return self.ptx.count(".local")

    @property
    def loads(self) -> list:
        """The PTX's global load instructions in order (`ld.global.v4.b32`, hints included)."""
        return re.findall(r"ld\.global[.\w:]*", self.ptx)

    @property
    def stores(self) -> list:
        """The PTX's global store instructions in order."""
        return re.findall(r"st\.global[.\w:]*", self.ptx)

    @cached_property
    def sass(self) -> str:
        """The SASS, as `cuobjdump --dump-sass` prints it."""
        return self._cuobjdump("--dump-sass")

    @cached_property
    def registers(self):
        """Registers a thread (ptxas' allocation, from the cubin's resource usage); None when
        cuobjdump does not say."""
        m = re.search(r"REG:(\d+)", self._cuobjdump("--dump-resource-usage"))
        return int(m.group(1)) if m else None

    def loads_in_flight(self) -> int:
        """`loads_in_flight(self.sass)`."""
        return loads_in_flight(self.sass)

    def loop_lines(self) -> list:
        """`loop_lines(self.sass)`."""
        return loop_lines(self.sass)

    def _cuobjdump(self, flag: str) -> str:
        import triton

        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                            "cuobjdump")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "k.cubin")
            with open(path, "wb") as f:
                f.write(self.kernel.asm["cubin"])
            return subprocess.run([tool, flag, path], capture_output=True, text=True).stdout


def strip_hints(op: str) -> str:
    """A PTX access without its cache hints: `ld.global.L1::evict_first.v4.b32` ->
    `ld.global.v4.b32`."""
    return _CACHE_HINT.sub("", op)


def evict_hints(ops: list) -> list:
    """The L1 eviction hints the accesses `ops` carry, sorted, once each
    (`["L1::evict_first"]`)."""
    return sorted(set(re.findall(r"L1::evict_\w+", " ".join(ops))))


def loads_in_flight(sass: str) -> int:
    """The most 16-byte global loads (`LDG.E.128`) outstanding at once, in program order: a
    load is outstanding from its issue until an instruction reads one of its four destination
    registers."""
    most, pend = 0, []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?);", line)
        if not m:
            continue
        ins = m.group(1)
        regs = [int(r) for r in re.findall(r"\bR(\d+)\b", ins)]
        ld = re.search(r"LDG\.E\S*\.128\s+R(\d+)", ins)
        srcs = set(regs[1:]) if ld or not ins.startswith(("ST", "@")) else set(regs)
        pend = [p for p in pend if not p & srcs]
        if ld:
            b = int(ld.group(1))
            pend.append(set(range(b, b + 4)))
            most = max(most, len(pend))
    return most


def loop_lines(sass: str) -> list:
    """The SASS instruction lines inside loops: from a backward branch's target to the branch."""
    lines = [line for line in sass.splitlines() if _SASS_LINE.match(line)]

    def addr(line):
        return int(_SASS_ADDRESS.search(line).group(1), 16)

    loops = [(int(m.group(1), 16), addr(line)) for line in lines
             for m in [re.search(r"BRA (0x[0-9a-f]+)", line)] if m and int(m.group(1), 16) < addr(line)]
    return [line for line in lines if any(lo <= addr(line) <= hi for lo, hi in loops)]
