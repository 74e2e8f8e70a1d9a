"""Offline configuration sweep for the streaming elementwise kernels on an H200: the
activations (kernels/activation.py), Add / Mul (kernels/binary.py) and the gated
activations SiluAndMul / GeluAndMul (kernels/silu_and_mul.py). Per row (a bench workload
of ReluFwdOp ... GeluAndMulFwdOp, the rows that missed eager or torch.compile first) it
times the table's choice, torch eager, torch.compile of the eager function (one compile
per row), a plain copy of the same number of bytes, and candidate layouts
(``StreamConfig``: elements a program, warps, a persistent grid, cache hints). Every
candidate's output is checked once against the torch reference; a wrong one is reported
and never "best".

    python3 benchmarks/elementwise_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]

Timing follows `opspec bench` (ops/bench_harness.py): per sample the L2 is flushed (a
256 MiB buffer written), the device sleeps a little so that the host has queued the call,
and CUDA events time the call; medians over two passes (forward, then backward over the
row's entries). TB/s counts the bytes the op's roofline counts (every input read once,
the output written once). Prints per row us, TB/s and the speedups against eager and
compile, then the best candidate; at the end, per table row, the candidate with the best
geometric mean over the sweep rows that fall under it (what to write into the table).
The JSON holds every timing. The budget covers everything, Triton and Inductor compiles
included (compiled beforehand in --jobs processes, then shared among the rows; the
candidates are listed most promising first, and a row stops adding them when its share
is spent). Not part of the package.

``--smoke`` runs tiny rows through Triton's interpreter on the CPU (a check of this script).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Inductor compiles in this process (one kernel a row) and in the precompiling workers,
# which are the parallelism: one compile thread each, the same setting everywhere so
# that the workers' cached graphs are this process's too.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch
import torch.nn.functional as F
import triton

import opspec.kernels.activation as KA
import opspec.kernels.binary as KB
import opspec.kernels.silu_and_mul as KS
from opspec.kernels.activation import StreamConfig, activation_reference, activation_triton
from opspec.kernels.binary import binary_reference, binary_triton
from opspec.kernels.gelu_and_mul import gelu_and_mul_reference
from opspec.kernels.silu_and_mul import gated_triton, silu_and_mul_reference

from sweep_pool import run_ahead, sweep_parser  # beside this script

FLUSH_BYTES = 256 << 20
LEAD_US = 200.0


@dataclass(frozen=True)
class Row:
    label: str
    family: str             # 'act', 'binary' or 'gated'
    op: str                 # act: relu silu gelu gelu_tanh; binary: add mul; gated: silu gelu gelu_tanh
    shapes: tuple           # act: (S,); binary: (A, B); gated: ([M, 2N],)
    dtypes: tuple           # act, gated: (T,); binary: (TA, TB)
    alpha: float = 1
    inplace: bool = False
    failing: bool = False   # missed eager or compile in the H200 bench (these go first)


BF, HF, F32 = "bfloat16", "float16", "float32"
ROWS = [
    # -- rows that missed eager or compile (bench.json), most informative first
    Row("add llama3-8b-resid-prefill", "binary", "add", ((4096, 4096), (4096, 4096)), (BF, BF), failing=True),
    Row("mul llama3-8b-gate-prefill", "binary", "mul", ((4096, 14336), (4096, 14336)), (BF, BF), failing=True),
    Row("silu_and_mul dsv3-expert", "gated", "silu", ((8192, 4096),), (BF,), failing=True),
    Row("gelu_and_mul dsv3-expert", "gated", "gelu", ((8192, 4096),), (BF,), failing=True),
    Row("relu opt-6.7b-prefill-f32", "act", "relu", ((2048, 16384),), (F32,), failing=True),
    Row("silu qwen2.5-7b-prefill-f32", "act", "silu", ((4096, 18944),), (F32,), failing=True),
    Row("gelu bert-large-mlp-f32", "act", "gelu", ((16384, 4096),), (F32,), failing=True),
    Row("relu opt-13b-prefill", "act", "relu", ((4096, 20480),), (BF,), failing=True),
    Row("gelu gpt2-xl-decode", "act", "gelu", ((32, 6400),), (HF,), failing=True),
    Row("mul llama3-70b-gate-prefill", "binary", "mul", ((2048, 28672), (2048, 28672)), (BF, BF), failing=True),
    # -- slower than compile but not eager, and rows that a table change must not break
    Row("add attn-mask", "binary", "add", ((4, 32, 1024, 1024), (4, 1, 1024, 1024)), (BF, BF)),
    Row("mul rms-scale-f32", "binary", "mul", ((8192, 4096), (8192, 1)), (F32, F32)),
    Row("add qkv-bias", "binary", "add", ((4096, 4608), (4608,)), (BF, BF)),
    Row("mul norm-weight", "binary", "mul", ((4096,), (4096, 4096)), (BF, BF)),
    Row("add sgd-llama3-8b-mlp-f32", "binary", "add", ((14336, 4096), (14336, 4096)), (F32, F32), alpha=-1e-4),
    Row("add llama3-70b-resid-fp32-bf16", "binary", "add", ((4096, 8192), (4096, 8192)), (F32, BF)),
    Row("add qkv-bias-decode", "binary", "add", ((32, 4608), (4608,)), (BF, BF)),
    Row("silu_and_mul llama3-8b-prefill", "gated", "silu", ((4096, 28672),), (BF,)),
    Row("gelu_and_mul qwen2.5-7b-prefill", "gated", "gelu", ((4096, 37888),), (BF,)),
    Row("silu_and_mul qwen2.5-7b-prefill-f32", "gated", "silu", ((4096, 37888),), (F32,)),
    Row("silu_and_mul llama3-8b-decode", "gated", "silu", ((32, 28672),), (BF,)),
    Row("silu llama3-8b-prefill", "act", "silu", ((8192, 14336),), (BF,)),
    Row("silu dsv3-expert", "act", "silu", ((8192, 2048),), (BF,)),
    Row("relu opt-6.7b-prefill-inpl", "act", "relu", ((4096, 16384),), (HF,), inplace=True),
    Row("gelu gemma2-9b-decode-tanh", "act", "gelu_tanh", ((32, 14336),), (BF,)),
    Row("silu dsv3-expert-decode-inpl", "act", "silu", ((128, 2048),), (BF,), inplace=True),
]

# -- candidates ------------------------------------------------------------------------------
# (vectors of 16 bytes per operand and thread, warps, programs per SM of a persistent grid
# (0: one program per tile), evict_first, evict_last); the block is vectors * warps * 32
# * (16 / element bytes), so a candidate means the same per-thread work in every dtype.
# Most promising first: a row stops taking them when its share of the budget is spent.
# Each list holds the layout the kernels had before the tables (16-bit: activations
# (2, 4), binary (2, 8), SiluAndMul (1, 8), GeluAndMul (1, 4); decode (1, 1) / (1, 2)),
# so that a regression against them shows. Persistent grids: 2048 threads an SM (full
# occupancy) but one at half.
ACT_LARGE = [(2, 4, 0, 0, 0), (1, 4, 0, 0, 0), (4, 4, 0, 0, 0), (1, 8, 0, 0, 0), (2, 8, 0, 0, 0),
             (2, 4, 0, 1, 0), (1, 4, 0, 1, 0), (2, 4, 8, 0, 0), (1, 4, 16, 0, 0), (4, 8, 8, 0, 0),
             (2, 4, 16, 1, 0), (1, 2, 0, 0, 0), (4, 8, 0, 0, 0), (8, 4, 0, 0, 0)]
ACT_SMALL = [(1, 4, 0, 0, 0), (2, 4, 0, 0, 0), (1, 2, 0, 0, 0), (1, 1, 0, 0, 0), (2, 2, 0, 0, 0),
             (1, 8, 0, 0, 0), (4, 4, 0, 0, 0), (2, 8, 0, 0, 0), (1, 4, 0, 1, 0)]
BIN_LARGE = [(1, 4, 0, 0, 1), (2, 4, 0, 0, 1), (1, 8, 0, 0, 1), (2, 8, 0, 0, 1), (4, 4, 0, 0, 1),
             (1, 4, 0, 0, 0), (1, 4, 0, 1, 1), (2, 4, 0, 1, 1), (1, 4, 16, 0, 1), (2, 4, 8, 0, 1),
             (2, 8, 8, 0, 1), (1, 2, 0, 0, 1), (4, 8, 0, 0, 1)]
BIN_SMALL = [(1, 4, 0, 0, 1), (2, 4, 0, 0, 1), (1, 2, 0, 0, 1), (1, 1, 0, 0, 1), (2, 2, 0, 0, 1),
             (1, 8, 0, 0, 1), (4, 4, 0, 0, 1), (1, 4, 0, 0, 0)]
GATED_LARGE = [(1, 4, 0, 0, 0), (2, 4, 0, 0, 0), (1, 8, 0, 0, 0), (2, 8, 0, 0, 0), (4, 4, 0, 0, 0),
               (1, 4, 0, 1, 0), (2, 4, 0, 1, 0), (1, 4, 16, 0, 0), (2, 4, 8, 0, 0), (1, 4, 8, 0, 0),
               (2, 8, 8, 0, 0), (1, 2, 0, 0, 0), (4, 8, 0, 0, 0)]
GATED_SMALL = [(1, 2, 0, 0, 0), (1, 4, 0, 0, 0), (2, 4, 0, 0, 0), (1, 1, 0, 0, 0), (2, 2, 0, 0, 0),
               (1, 8, 0, 0, 0), (2, 8, 0, 0, 0), (1, 4, 0, 1, 0)]
SMALL_ELEMENTS = 1 << 21   # below this many outputs a row takes the *_SMALL candidates


def config_of(spec, elem_bytes: int) -> StreamConfig:
    vec, warps, persist, ef, el = spec
    return StreamConfig(vec * warps * 32 * (16 // elem_bytes), warps, persist, bool(ef), bool(el))


def describe(cfg: StreamConfig | None) -> str:
    if cfg is None:
        return "-"
    hints = "".join((" ef" if cfg.evict_first else "", " el" if cfg.evict_last else ""))
    return f"b{cfg.block} w{cfg.num_warps}{f' p{cfg.persist}' if cfg.persist else ''}{hints}"


# -- the rows' operands, functions and references -------------------------------------------

def shrink(shape, smoke: bool) -> tuple:
    """The smoke size of a shape: the last axis at most 67 (odd: masked tails), the others
    at most 5; size-1 axes stay (a broadcast stays a broadcast)."""
    if not smoke:
        return tuple(shape)
    return tuple(min(d, 67) if i == len(shape) - 1 else min(d, 5) for i, d in enumerate(shape))


def make_row(row: Row, device: str, smoke: bool, seed: int = 0):
    """Operands, the launcher `run(config)`, the eager function `eager()`, the reference
    (float32 math, the output dtype), the bytes of the roofline, the output element count
    and the largest element size (the table's key)."""
    gen = torch.Generator(device=device).manual_seed(seed)   # on the device: rows of 10**8
    dt = [getattr(torch, d) for d in row.dtypes]

    def rand(shape, dtype):
        return (torch.randn(shape, generator=gen, device=device) * 2).to(dtype)

    if row.family == "act":
        (shape,) = [shrink(s, smoke) for s in row.shapes]
        x = rand(shape, dt[0])
        ref = activation_reference(x, row.op)
        out = x if row.inplace else torch.empty_like(x)
        fn = {"relu": lambda t: F.relu(t, inplace=row.inplace),
              "silu": lambda t: F.silu(t, inplace=row.inplace),
              "gelu": lambda t: F.gelu(t),
              "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[row.op]
        # in place, the timed calls keep rewriting x: the checks run on copies of the original
        x0 = x.clone() if row.inplace else x

        def run(cfg):
            return activation_triton(x, out, row.op, cfg)

        def check_run(cfg):
            if not row.inplace:
                return run(cfg)
            y = x0.clone()
            return activation_triton(y, y, row.op, cfg)

        return dict(run=run, check_run=check_run, eager=lambda: fn(x), compile_fn=fn,
                    compile_args=(x,), ref=ref, bytes=2 * x.numel() * x.element_size(),
                    numel=x.numel(), elem_bytes=x.element_size())
    if row.family == "binary":
        sa, sb = (shrink(s, smoke) for s in row.shapes)
        a, b = rand(sa, dt[0]), rand(sb, dt[1])
        out_dtype = torch.result_type(a, b)
        out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), dtype=out_dtype, device=device)
        ref = binary_reference(row.op, a, b, row.alpha, out_dtype)
        alpha = row.alpha
        if row.op == "add":
            fn = (lambda p, q: torch.add(p, q)) if alpha == 1 else (lambda p, q: torch.add(p, q, alpha=alpha))
        else:
            def fn(p, q):
                return torch.mul(p, q)

        def run(cfg):
            return binary_triton(row.op, a, b, out, alpha, cfg)

        nbytes = a.numel() * a.element_size() + b.numel() * b.element_size() + out.numel() * out.element_size()
        return dict(run=run, check_run=run, eager=lambda: fn(a, b), compile_fn=fn, compile_args=(a, b),
                    ref=ref, bytes=nbytes, numel=out.numel(),
                    elem_bytes=max(a.element_size(), b.element_size(), out.element_size()))
    (shape,) = [shrink(s, smoke) for s in row.shapes]
    M, two_n = shape
    two_n -= two_n % 2
    x = rand((M, two_n), dt[0])
    n = two_n // 2
    out = torch.empty(M, n, dtype=x.dtype, device=device)
    if row.op == "silu":
        ref = silu_and_mul_reference(x)

        def fn(t):
            return F.silu(t[..., :n]) * t[..., n:]
    else:
        approximate = "tanh" if row.op == "gelu_tanh" else "none"
        ref = gelu_and_mul_reference(x, approximate)

        def fn(t):
            return F.gelu(t[..., :n], approximate=approximate) * t[..., n:]

    def run(cfg):
        return gated_triton(x, out, row.op, cfg)

    return dict(run=run, check_run=run, eager=lambda: fn(x), compile_fn=fn, compile_args=(x,),
                ref=ref, bytes=3 * M * n * x.element_size(), numel=M * n, elem_bytes=x.element_size())


def table_of(row: Row, numel: int, elem_bytes: int) -> tuple[str, int, StreamConfig]:
    """(table name, index of the row used, its configuration) for this sweep row."""
    name, table = {"act": ("ACTIVATION_TABLE", KA.ACTIVATION_TABLE),
                   "binary": ("BINARY_TABLE", KB.BINARY_TABLE),
                   "gated": ("GATED_TABLE", KS.GATED_TABLE)}[row.family]
    for i, (eb, max_n, cfg) in enumerate(table):
        if (eb == 0 or eb == elem_bytes) and (max_n is None or numel <= max_n):
            return name, i, cfg
    raise LookupError(f"{name} has no row for {numel} elements of {elem_bytes} bytes")


def candidates(row: Row, numel: int, elem_bytes: int) -> list[StreamConfig]:
    small = numel < SMALL_ELEMENTS
    specs = {"act": ACT_SMALL if small else ACT_LARGE,
             "binary": BIN_SMALL if small else BIN_LARGE,
             "gated": GATED_SMALL if small else GATED_LARGE}[row.family]
    out: list[StreamConfig] = []
    for spec in specs:
        cfg = config_of(spec, elem_bytes)
        if row.family != "binary":
            cfg = cfg._replace(evict_last=False)
        if cfg not in out:
            out.append(cfg)
    return out


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3),
            torch.bfloat16: (1e-2, 1e-2)}.get(dtype, (1e-6, 1e-6))


def check(got: torch.Tensor, ref: torch.Tensor) -> tuple[bool, float]:
    """(within tolerance, the worst error in units of the tolerance)."""
    rtol, atol = tolerance(ref.dtype)
    g, r = got.double(), ref.double()
    bad = (g - r).abs() / (atol + rtol * r.abs())
    both_nan = torch.isnan(g) & torch.isnan(r)
    bad = torch.where(both_nan, torch.zeros_like(bad), bad)
    worst = float(bad.nan_to_num(nan=float("inf")).max()) if bad.numel() else 0.0
    return worst <= 1.0, worst


# -- timing ----------------------------------------------------------------------------------

class Timer:
    """CUDA events around each call; before each, the L2 flushed (a 256 MiB buffer
    written) and the device kept busy LEAD_US so that the host has queued the call (the
    launch path, Python included, is not timed). On the CPU (smoke): perf_counter."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        if self.cuda:
            self.flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device)
            khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", None)
            self.lead_cycles = int(LEAD_US * 1e-6 * (khz * 1e3 if khz else 2.0e9))

    def samples(self, fn, n: int) -> list[float]:
        """`n` timed calls, in microseconds."""
        if not self.cuda:
            out = []
            for _ in range(n):
                t = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t) * 1e6)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends):
            self.flush.zero_()
            torch.cuda._sleep(self.lead_cycles)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def count(self, fn, smoke: bool) -> int:
        """Samples for one pass: about 25 ms of device time, 10 to 100 samples."""
        if smoke:
            return 1
        fn()
        est = statistics.median(self.samples(fn, 3))
        return max(10, min(100, int(25e3 / (est + LEAD_US + 80.0))))


# -- precompile in parallel ------------------------------------------------------------------

def _precompile(task) -> int:
    """Worker: build one row's operands, launch each configuration once (values do not
    matter) and compile the eager function, so that Triton's and Inductor's on-disk caches
    hold the binaries when the timing process asks for them."""
    i_row, cfgs, with_compile, device, smoke = task
    row = ROWS_BY_INDEX[i_row]
    R = make_row(row, device, smoke)
    done = 0
    for cfg in cfgs:
        try:
            R["run"](cfg)
            done += 1
        except Exception:  # reported by the timing process
            pass
    if with_compile:
        try:
            torch._dynamo.reset()
            torch.compile(R["compile_fn"], fullgraph=True, dynamic=False)(*R["compile_args"])
            done += 1
        except Exception:
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


ROWS_BY_INDEX = dict(enumerate(ROWS))


def precompile(rows, device: str, smoke: bool, jobs: int, timeout_s: float) -> None:
    tasks = []
    for i_row, row in rows:
        numel, eb = _numel_and_bytes(row, smoke)
        cfgs = [None] + candidates(row, numel, eb)
        if smoke:
            cfgs = cfgs[:2]
        tasks.append((i_row, [], True, device, smoke))                 # Inductor: its own task
        tasks += [(i_row, cfgs[k:k + 4], False, device, smoke) for k in range(0, len(cfgs), 4)]
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches and compiles")


def _numel_and_bytes(row: Row, smoke: bool) -> tuple[int, int]:
    """Output elements and the largest element size of a row, without building it."""
    sizes = [getattr(torch, d).itemsize for d in row.dtypes]
    if row.family == "binary":
        sa, sb = (shrink(s, smoke) for s in row.shapes)
        out = torch.broadcast_shapes(sa, sb)
        eb = max(sizes + [torch.promote_types(*[getattr(torch, d) for d in row.dtypes]).itemsize])
        return math.prod(out), eb
    (shape,) = [shrink(s, smoke) for s in row.shapes]
    if row.family == "gated":
        return shape[0] * (shape[1] // 2), sizes[0]
    return math.prod(shape), sizes[0]


# -- the sweep -------------------------------------------------------------------------------

def main() -> None:
    ap = sweep_parser(__doc__, jobs=12,
                      rows_help="only rows whose 'family:op:label' contains one of these")
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    rows = list(enumerate(ROWS))
    if args.rows:
        rows = [(i, r) for i, r in rows if any(s in f"{r.family}:{r.op}:{r.label}" for s in args.rows)]
    if smoke:   # one row of each family, a decode row, the in-place row
        keep, seen = [], set()
        for i, r in rows:
            key = (r.family, r.inplace)
            if key not in seen:
                seen.add(key)
                keep.append((i, r))
        rows = keep
    t_start = time.perf_counter()
    if args.jobs > 0:
        jobs = 1 if smoke else args.jobs
        try:
            precompile(rows[:1] if smoke else rows, device, smoke, jobs, 0.35 * args.budget_s)
        except Exception as exc:   # the timings compile what is missing
            print(f"precompile failed ({type(exc).__name__}: {exc}); compiling inline", flush=True)
    timer = Timer(device)
    results = []
    for k, (i_row, row) in enumerate(rows):
        left = args.budget_s - (time.perf_counter() - t_start)
        if left <= 0:
            print(f"\n== {row.label}: skipped (the budget is spent)", flush=True)
            results.append(dict(label=row.label, skipped=True))
            continue
        R = make_row(row, device, smoke)
        table_name, table_index, table_cfg = table_of(row, R["numel"], R["elem_bytes"])
        nbytes = R["bytes"]
        shapes = " ".join(str(list(s)) for s in (shrink(s, smoke) for s in row.shapes))
        print(f"\n== {row.label}: {row.family} {row.op} {shapes} {'/'.join(row.dtypes)}"
              f"{' in place' if row.inplace else ''}  ({nbytes / 2**20:.1f} MiB)  "
              f"{table_name}[{table_index}] = {describe(table_cfg)}", flush=True)
        entries: list[dict] = []
        timed: list[tuple[dict, object]] = []   # (entry, fn) for the second pass

        def record(name, fn, cfg, check_fn=None):
            e = dict(name=name, config=list(cfg) if cfg is not None else None)
            try:
                if check_fn is not None:
                    ok, err = check(check_fn(), R["ref"])
                    e.update(ok=ok, err=err)
                n = timer.count(fn, smoke)
                e["samples"] = timer.samples(fn, n)
            except Exception as exc:  # a variant that does not build or launch
                e["error"] = f"{type(exc).__name__}: {exc}"[:400]
                print(f"  {name:34s} ERROR {e['error'][:150]}", flush=True)
                entries.append(e)
                return
            entries.append(e)
            timed.append((e, fn))

        record("table", lambda: R["run"](None), table_cfg, lambda: R["check_run"](None))
        record("eager", R["eager"], None)
        compile_error, compile_s = None, 0.0
        try:
            t0 = time.perf_counter()
            torch._dynamo.reset()
            compiled = torch.compile(R["compile_fn"], fullgraph=True, dynamic=False)
            compiled(*R["compile_args"])
            compile_s = time.perf_counter() - t0
            record("compile", lambda: compiled(*R["compile_args"]), None)
        except Exception as exc:
            compile_error = f"{type(exc).__name__}: {exc}"[:400]
            print(f"  torch.compile FAILED: {compile_error[:200]}", flush=True)
        # The row's share of what is left of the budget (rows that missed weigh 1.5): the
        # candidates stop at 60 % of it, the rest is for the second pass.
        weight = lambda r: 1.5 if r[1].failing else 1.0  # noqa: E731
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = max(0.0, left) * weight(rows[k]) / sum(weight(r) for r in rows[k:])
        row_start = time.perf_counter()
        if not smoke:
            half = max(1, nbytes // 2 // 16)       # a copy of the same bytes (read + written)
            src = torch.empty(half, 16, dtype=torch.uint8, device=device).random_()
            dst = torch.empty_like(src)
            record("copy (same bytes)", lambda: dst.copy_(src), None)
        skipped = 0
        cands = candidates(row, R["numel"], R["elem_bytes"])
        if smoke:
            cands = cands[:2]
        for cfg in cands:
            if cfg == table_cfg:
                continue
            if time.perf_counter() - row_start > 0.6 * allot:
                skipped += 1
                continue
            record(describe(cfg), lambda cfg=cfg: R["run"](cfg), cfg, lambda cfg=cfg: R["check_run"](cfg))
        # second pass, backward: every entry gets as many samples again (drift averages out)
        if time.perf_counter() - row_start < allot or smoke:
            for e, fn in reversed(timed):
                try:
                    e["samples"] += timer.samples(fn, len(e["samples"]))
                except Exception:
                    pass
        for e in entries:
            if "samples" in e:
                e["samples"] = [round(v, 3) for v in e["samples"]]
                e["us"] = statistics.median(e["samples"])
                e["tbps"] = nbytes / e["us"] / 1e6
        by = {e["name"]: e for e in entries}
        eager_us = by.get("eager", {}).get("us")
        compile_us = by.get("compile", {}).get("us")
        for e in entries:
            if "us" not in e:
                continue
            e["vs_eager"] = eager_us / e["us"] if eager_us else None
            e["vs_compile"] = compile_us / e["us"] if compile_us else None
            flag = "" if e.get("ok", True) else f"  WRONG (error {e['err']:.2g} x tolerance)"
            ve = f"{e['vs_eager']:5.2f}x" if e["vs_eager"] else "  -  "
            vc = f"{e['vs_compile']:5.2f}x" if e["vs_compile"] else "  -  "
            label = e["name"] if e["name"] != "table" else f"table ({describe(table_cfg)})"
            print(f"  {label:34s} {e['us']:9.2f} us {e['tbps']:6.2f} TB/s  vs eager {ve}  "
                  f"vs compile {vc}{flag}", flush=True)
        kernels = [e for e in entries if "us" in e and e.get("ok") and e["config"] is not None]
        best = min(kernels, key=lambda e: e["us"]) if kernels else None
        if skipped:
            print(f"  ({skipped} candidates skipped: the row's share of the budget, {allot:.1f} s, "
                  f"was spent)", flush=True)
        if best:
            tab = by.get("table", {})
            print(f"  BEST {best['name'] if best['name'] != 'table' else describe(table_cfg)}: "
                  f"{best['us']:.2f} us, {best['tbps']:.2f} TB/s, "
                  f"x{tab['us'] / best['us'] if 'us' in tab else float('nan'):.3f} vs table, "
                  f"x{best['vs_eager'] or float('nan'):.3f} vs eager, "
                  f"x{best['vs_compile'] or float('nan'):.3f} vs compile  "
                  f"-> {table_name}[{table_index}] = {StreamConfig(*best['config'])!r}", flush=True)
        results.append(dict(label=row.label, row=asdict(row), bytes=nbytes, numel=R["numel"],
                            elem_bytes=R["elem_bytes"], table=table_name, table_index=table_index,
                            table_config=list(table_cfg), compile_error=compile_error,
                            compile_s=compile_s, entries=entries,
                            best=best and best["name"], best_config=best and best["config"],
                            skipped_candidates=skipped))
        R = None  # frees the row's tensors (closures above read R)
        if not smoke:
            torch.cuda.empty_cache()
        if args.json:
            _write(args.json, results, smoke)
    summary(results)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s", flush=True)
    if args.json:
        _write(args.json, results, smoke)
        print(f"wrote {args.json}")


def summary(results) -> None:
    """Per table row, the candidate with the best geometric mean of (time / the row's best)
    over the sweep rows that fall under it and timed it; beside it the table's own."""
    print("\nsummary per table row (geometric mean of time / best of each sweep row; lower is "
          "better, 1.000 = best on every row):")
    groups: dict = {}
    for r in results:
        if r.get("skipped") or not r.get("best"):
            continue
        groups.setdefault((r["table"], r["table_index"]), []).append(r)
    for (table, index), rs in sorted(groups.items()):
        scores: dict = {}
        for r in rs:
            best = min(e["us"] for e in r["entries"] if "us" in e and e.get("ok") and e["config"])
            for e in r["entries"]:
                if "us" in e and e.get("ok") and e["config"]:
                    scores.setdefault(tuple(e["config"]), []).append(e["us"] / best)
        full = {c: v for c, v in scores.items() if len(v) == len(rs)}
        pool = full or scores
        gm = {c: math.exp(sum(map(math.log, v)) / len(v)) for c, v in pool.items()}
        pick = min(gm, key=gm.get)
        cur = tuple(rs[0]["table_config"])
        cur_s = f"{gm[cur]:.3f}" if cur in gm else "n/a"
        print(f"  {table}[{index}] ({len(rs)} rows: {', '.join(r['label'] for r in rs)})")
        print(f"      now {StreamConfig(*cur)!r}: {cur_s}")
        print(f"      best {StreamConfig(*pick)!r}: {gm[pick]:.3f}"
              f"{'' if full else '  (not every row timed every candidate)'}")
        for r in rs:
            by = {e["name"]: e for e in r["entries"]}
            t = by.get("table", {}).get("us")
            b = next((e["us"] for e in r["entries"] if e["config"] and tuple(e["config"]) == pick
                      and "us" in e), None)
            ee, cc = by.get("eager", {}).get("us"), by.get("compile", {}).get("us")
            cp = by.get("copy (same bytes)", {}).get("us")
            fmt = lambda v: f"{v:8.2f}" if v else "       -"  # noqa: E731
            print(f"        {r['label']:38s} us: table {fmt(t)}  pick {fmt(b)}  eager {fmt(ee)}  "
                  f"compile {fmt(cc)}  copy {fmt(cp)}")


def _write(path: str, results, smoke: bool) -> None:
    with open(path, "w") as f:
        json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                       torch=torch.__version__, triton=triton.__version__,
                       flush_bytes=FLUSH_BYTES, lead_us=LEAD_US, rows=results), f, indent=1)


if __name__ == "__main__":
    main()
