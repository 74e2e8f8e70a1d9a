"""Offline sweep of the reduction kernels (opspec.kernels.reduction: Sum, Mean, Amax) and of
the strided softmax path (opspec.kernels.softmax, ``dim`` not the last axis) on an H200.

    python3 benchmarks/reduction_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]

Per row: every variant's output is checked once against a float64 torch reference (a wrong
one is reported and never "best"); then the table's choice (the module's defaults), torch
eager, torch.compile of the eager function (one compile per row) and the candidate variants
(most promising first) are timed as ``opspec bench`` times them: CUDA events around each
call, a 256 MiB buffer written before each sample (L2 flushed), the device sleeping while
the host enqueues the call, the median of the samples. Prints us, TB/s (bytes read + bytes
written, as the ops' rooflines count them) and the speedup against eager and compile per
variant, the best per row, and at the end which constant of which table each best variant
means. ``--json`` gets every timing.

The budget covers everything, Triton and Inductor compiles included: first a pool of
processes compiles every candidate (and warms Inductor's cache for each row's compile) for
at most 45 % of it, then the rest is shared out over the rows; a row stops adding
candidates when its share is spent. ``--smoke`` runs tiny rows through Triton's
interpreter on the CPU (a check of this script; compile then uses the eager backend).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton

import opspec.kernels.reduction as R
import opspec.kernels.softmax as S
from opspec.kernels.launch import launch

from sweep_pool import run_ahead, sweep_parser  # beside this script

# -- rows ---------------------------------------------------------------------------------------
# (label, family, shape, params, dtype name, weight). family: "sum" | "mean" | "amax" with
# params {dim, keepdim, dtype}, or "softmax" | "log_softmax" with params {dim}. The rows the
# H200 bench found slow (benchmarks/bench.json) first, then controls that must not regress.
ROWS = [
    ("sum llama3-70b-colsum bf16", "sum", (16384, 8192), dict(dim=0), "bfloat16", 1.0),
    ("amax llama3-8b-channel bf16", "amax", (16384, 4096), dict(dim=0), "bfloat16", 1.0),
    ("sum llama3-8b-colsum-3d bf16->f32", "sum", (4, 2048, 4096),
     dict(dim=(0, 1), dtype="float32"), "bfloat16", 1.0),
    ("mean llama3-8b-colmean bf16", "mean", (16384, 4096), dict(dim=0), "bfloat16", 1.0),
    ("amax llama3-8b-channel f32", "amax", (16384, 4096), dict(dim=0), "float32", 1.0),
    ("sum llama3-70b-colsum f32", "sum", (16384, 8192), dict(dim=0), "float32", 1.0),
    ("log_softmax batch-axis-dim0 bf16", "log_softmax", (64, 32, 4096), dict(dim=0),
     "bfloat16", 1.0),
    ("softmax ade20k-seg-classes bf16", "softmax", (16, 150, 128, 128), dict(dim=1),
     "bfloat16", 1.0),
    ("softmax ade20k-seg-classes f32", "softmax", (16, 150, 128, 128), dict(dim=1),
     "float32", 1.0),
    ("softmax loftr-dual-dim1 f32", "softmax", (1, 4800, 4800), dict(dim=1), "float32", 1.0),
    ("amax dsv3-fp8-tensor bf16", "amax", (8192, 7168), dict(dim=None), "bfloat16", 0.8),
    ("amax dsv3-fp8-token bf16", "amax", (8192, 7168), dict(dim=-1, keepdim=True),
     "bfloat16", 0.8),
    ("mean dsv3-prefill-row bf16->f32", "mean", (8192, 7168), dict(dim=-1, dtype="float32"),
     "bfloat16", 0.8),
    ("sum llama3-8b-full bf16", "sum", (8192, 14336), dict(dim=None), "bfloat16", 0.8),
    ("sum dsv3-prefill-row bf16", "sum", (4096, 7168), dict(dim=-1, keepdim=True),
     "bfloat16", 0.8),
    ("sum qwen2.5-row 3584 bf16", "sum", (8192, 3584), dict(dim=-1), "bfloat16", 0.5),
    ("log_softmax ade20k-seg-classes f32", "log_softmax", (16, 150, 128, 128), dict(dim=1),
     "float32", 0.6),
    ("sum llama3-8b-prefill-row bf16 (control)", "sum", (4096, 4096), dict(dim=-1),
     "bfloat16", 0.5),
    ("amax llama3-70b-fp8-tensor bf16 (control)", "amax", (32768, 8192), dict(dim=None),
     "bfloat16", 0.5),
    ("amax llama3-8b-decode-tensor bf16", "amax", (16, 4096), dict(dim=None), "bfloat16", 0.3),
    ("mean llama3-logits-decode bf16", "mean", (32, 1, 128256), dict(dim=-1), "bfloat16", 0.3),
    ("mean llama3-logits-row f32", "mean", (2048, 128256), dict(dim=-1), "float32", 1.0),
    ("mean llama3-logits-row bf16", "mean", (2048, 128256), dict(dim=-1), "bfloat16", 1.0),
    ("sum llama3-8b-decode-full f32", "sum", (128, 4096), dict(dim=None), "float32", 0.3),
]

SMOKE_SHAPES = {  # tiny stand-ins, same layouts (the interpreter runs every program in numpy)
    (16384, 8192): (70, 300), (16384, 4096): (70, 300), (4, 2048, 4096): (2, 40, 136),
    (64, 32, 4096): (8, 3, 40), (16, 150, 128, 128): (2, 11, 4, 6), (1, 4800, 4800): (1, 1200, 36),
    (8192, 7168): (5, 700), (4096, 7168): (3, 7 * 256), (8192, 3584): (4, 3 * 256),
    (8192, 14336): (9, 1200), (4096, 4096): (6, 300),
    (32768, 8192): (7, 900), (16, 4096): (4, 300), (32, 1, 128256): (3, 1, 900),
    (128, 4096): (8, 300), (2048, 128256): (5, 5000),
}

# -- variants -----------------------------------------------------------------------------------
# Each: (name, tuning). Most promising first: a row stops adding them when its share of the
# budget is spent. The first entry of each list differs from the table in one field or two.
C = R.COL
COL_VARIANTS = [
    ("col rows8 prefetch", C._replace(rows_per_step=8, prefetch=True)),
    ("col 8 programs/SM", C._replace(programs_per_sm=8, min_steps=4)),
    ("col 2 warps (1 KiB strip) 8/SM", C._replace(warps=2, programs_per_sm=8)),
    ("col 8 warps (4 KiB strip) 2/SM", C._replace(warps=8, programs_per_sm=2)),
    ("col rows8 8/SM", C._replace(rows_per_step=8, programs_per_sm=8)),
    ("col min 16 steps", C._replace(min_steps=16)),
    ("col rows32 2/SM", C._replace(rows_per_step=32, programs_per_sm=2, min_steps=4)),
    ("col 1 warp (512 B strip) 16/SM", C._replace(warps=1, programs_per_sm=16)),
    ("col rows4 prefetch 8/SM", C._replace(rows_per_step=4, prefetch=True, programs_per_sm=8)),
    # whole rows of up to 8 KiB a program (4096 bf16 columns): each chunk one contiguous run
    ("col 16 warps (8 KiB strip) 2/SM", C._replace(warps=16, programs_per_sm=2)),
    ("col 16 warps (8 KiB strip) 1/SM", C._replace(warps=16, programs_per_sm=1)),
    ("col 8 warps (4 KiB strip) 4/SM", C._replace(warps=8, programs_per_sm=4)),
]
W = R.ROW
ROW_VARIANTS = [
    ("row 128 B/thread", W._replace(bytes_per_thread=128, tile_bytes=32768,
                                    split_programs_per_sm=2)),
    ("row looped 4 KiB blocks prefetch", W._replace(one_block_max_bytes=8192, tile_bytes=4096,
                                                    prefetch=True, split_programs_per_sm=8)),
    ("row split: a second launch", W._replace(finish_in_place=False)),
    ("row prefetch 3/SM", W._replace(prefetch=True, split_programs_per_sm=3)),
    ("row prefetch 4/SM", W._replace(prefetch=True)),
    ("row 8 KiB tiles 8/SM", W._replace(tile_bytes=8192, split_programs_per_sm=8)),
    ("row 32 B/thread", W._replace(bytes_per_thread=32)),
    ("row 2/SM", W._replace(split_programs_per_sm=2)),
    ("row split >= 8 steps", W._replace(split_min_steps=8)),
]
T = S.STRIDED
STRIDED_VARIANTS = [
    ("strided 64 el/thread", T._replace(elems_per_thread=64)),
    # 16-bit columns of 150 rows: with 8192-element tiles their strips narrow to 64 bytes
    ("strided 16K tiles", T._replace(tile_elems=16384)),
    ("strided 32 el/thread", T._replace(elems_per_thread=32)),
    ("strided 32 B strips (1 warp)", T._replace(col_bytes=32)),
    ("strided 256 B strips", T._replace(col_bytes=256, tile_elems=16384)),
    ("strided 16 el/thread", T._replace(elems_per_thread=16)),
    ("strided 64 B strips", T._replace(col_bytes=64)),
    ("strided 512 B strips", T._replace(col_bytes=512, tile_elems=32768)),
    ("strided one padded tile", T._replace(split_remainder=False, tile_elems=16384)),
    ("strided 2 programs/SM", T._replace(min_programs_per_sm=2)),
]
LONG_VARIANTS = [  # columns too long for registers
    ("strided two launches (no coop)", T._replace(long_coop=False)),
    ("strided coop 4K-element chunks", T._replace(tile_elems=4096)),
    ("strided coop 64 B strips", T._replace(col_bytes=64)),
    ("strided coop 64 el/thread", T._replace(coop_elems_per_thread=64)),
    ("strided coop 32 el/thread", T._replace(coop_elems_per_thread=32)),
    ("strided coop 32 B strips", T._replace(col_bytes=32)),
    ("strided coop 16K-element chunks", T._replace(tile_elems=16384, coop_elems_per_thread=64)),
    ("strided split 64 el/thread", T._replace(long_coop=False, elems_per_thread=64)),
    ("strided two passes (former)", T._replace(split_long=False)),
]


def _label_dtype(name):
    return getattr(torch, name)


# -- timing -------------------------------------------------------------------------------------

class Timer:
    """As `opspec bench` times a call (ops/bench_harness.CudaTimer): a 256 MiB flush, a
    sleep while the host enqueues, CUDA events around the call; the median, in ms."""

    def __init__(self, smoke: bool, samples: int):
        self.smoke, self.samples = smoke, samples
        if not smoke:
            from opspec.ops.bench_harness import CudaTimer
            self.t = CudaTimer(torch.device("cuda"), 256 * 2**20, lead_us=300.0)

    def __call__(self, fn) -> float:
        if self.smoke:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        fn()
        self.t.sync()
        return statistics.median(self.t.samples(fn, self.samples)) * 1e3


# -- one row ------------------------------------------------------------------------------------

class Row:
    def __init__(self, spec, device, smoke):
        self.label, self.family, shape, self.params, dt, self.weight = spec
        self.shape = SMOKE_SHAPES.get(shape, shape) if smoke else shape
        self.dtype = _label_dtype(dt)
        self.device = device
        self.is_softmax = self.family in ("softmax", "log_softmax")

    def inputs(self, seed=0):
        g = torch.Generator(device=self.device).manual_seed(seed)
        x = torch.randn(self.shape, generator=g, device=self.device, dtype=torch.float32)
        return (x * 3 if self.is_softmax else x).to(self.dtype)

    # torch
    def eager_fn(self):
        p = self.params
        if self.is_softmax:
            fn = torch.log_softmax if self.family == "log_softmax" else torch.softmax
            dim = p["dim"]
            return lambda x: fn(x, dim)
        dim, keepdim = p.get("dim"), p.get("keepdim", False)
        dt = getattr(torch, p["dtype"]) if p.get("dtype") else None
        dims = list(dim) if isinstance(dim, tuple) else dim
        if self.family == "amax":
            return lambda x: torch.amax(x, dim=() if dims is None else dims, keepdim=keepdim)
        fn = torch.sum if self.family == "sum" else torch.mean
        if dims is None:
            return lambda x: fn(x, dtype=dt)
        return lambda x: fn(x, dim=dims, keepdim=keepdim, dtype=dt)

    def reference(self, x):
        p = self.params
        if self.is_softmax:
            fn = torch.log_softmax if self.family == "log_softmax" else torch.softmax
            return fn(x.double(), p["dim"])
        dim = p.get("dim")
        axes = R.normalize_axes(list(dim) if isinstance(dim, tuple) else dim, x.dim())
        xd = x
        if p.get("dtype") and self.family != "amax":
            xd = x.to(getattr(torch, p["dtype"]))
        xd = xd.double()
        if self.family == "amax":
            return torch.amax(xd, dim=axes) if axes else xd
        return (torch.sum if self.family == "sum" else torch.mean)(xd, dim=axes)

    def out_dtype(self):
        if self.is_softmax or self.family == "amax" or not self.params.get("dtype"):
            return self.dtype
        return getattr(torch, self.params["dtype"])

    def nbytes(self, x):
        if self.is_softmax:
            return 2 * x.numel() * x.element_size()
        n_out = math.prod(R.reduced_shape(x.shape, self.axes(x), False))
        return x.numel() * x.element_size() + n_out * self.out_dtype().itemsize

    def axes(self, x):
        dim = self.params.get("dim")
        return R.normalize_axes(list(dim) if isinstance(dim, tuple) else dim, x.dim())

    # ours
    def runner(self, x, variant):
        """A callable running `variant` (None: the table) on x, writing a preallocated out."""
        if self.is_softmax:
            out = torch.empty_like(x)
            dim, log = self.params["dim"] % x.dim(), self.family == "log_softmax"
            if variant is None:
                return lambda: S.softmax_triton(x, dim, out, log)
            if variant == "former tile kernel":
                return lambda: former_strided(x, dim, out, log)
            plan = self.plan(x, variant)
            return lambda: S.softmax_triton(x, dim, out, log, plan=plan)
        axes = self.axes(x)
        out = torch.empty(R.reduced_shape(x.shape, axes, False), dtype=self.out_dtype(),
                          device=x.device)
        tuning = None if variant is None else variant
        return lambda: R.reduction_triton(x, out, axes, self.family, tuning=tuning)

    def table_plan(self, x) -> str:
        """The table's launch for x, in short."""
        if self.is_softmax:
            outer, n, inner = self.view3(x)
            p = S.softmax_plan(outer, n, inner, x.element_size(),
                               sm_count=S._sm_count_of(x.device))
            return (f"{p.kind} block={p.block} inner={p.block_inner} warps={p.num_warps} "
                    f"grid={p.grid}" + (f" chunks={p.chunks}" if p.looped else ""))
        lay = R.collapse(x.shape, x.stride(), self.axes(x))
        if lay is None:
            return "copied first"
        lp = R.plan_launch(lay, x.element_size(), R._sm_count(x.device.index if x.is_cuda else None))
        return (f"{lp.kind} r{lp.block_r}" + (f" i{lp.block_i}" if lp.kind == "col" else "")
                + f" w{lp.num_warps} split{lp.n_split}" + (" one-block" if lp.one_block else ""))

    def table_kind(self, x) -> str:
        """Which table the row's variants tune: COL, ROW or STRIDED (long columns apart)."""
        if self.is_softmax:
            outer, n, inner = self.view3(x)
            p = S.softmax_plan(outer, n, inner, x.element_size(),
                               sm_count=S._sm_count_of(x.device))
            return "STRIDED (long columns)" if p.looped else "STRIDED"
        lay = R.collapse(x.shape, x.stride(), self.axes(x))
        lp = R.plan_launch(lay, x.element_size(), R._sm_count(x.device.index if x.is_cuda else None))
        return "COL" if lp.kind == "col" else "ROW"

    def view3(self, x):
        d = self.params["dim"] % x.dim()
        return (math.prod(x.shape[:d]), x.shape[d], math.prod(x.shape[d + 1:]))

    def plan(self, x, variant):
        outer, n, inner = self.view3(x)
        if isinstance(variant, S.SoftmaxPlan):
            return variant
        sms = S._sm_count_of(x.device)
        return S._strided_plan(outer, n, inner, x.element_size(), sms, S.MAX_REG_ELEMS, variant)

    def variants(self, x):
        """[(name, variant, table-field hint)], most promising first."""
        if self.is_softmax:
            outer, n, inner = self.view3(x)
            table = S.softmax_plan(outer, n, inner, x.element_size(),
                                   sm_count=S._sm_count_of(x.device))
            out = []
            if table.looped:
                out += [(nm, t, f"STRIDED = {t!r}") for nm, t in LONG_VARIANTS]
            else:
                out += [(nm, t, f"STRIDED = {t!r}") for nm, t in STRIDED_VARIANTS]
                out.append(("former tile kernel", "former tile kernel",
                            "revert the strided tile path to _strided_kernel"))
                # the column cut in chunks of N (two launches), wide strips
                for bi_bytes, bn in ((256, 16), (512, 8), (128, 32)):
                    if bn >= n:
                        continue
                    bi = min(triton.next_power_of_2(inner), bi_bytes // x.element_size())
                    chunks = triton.cdiv(n, bn)
                    warps = max(1, min(16, bn * bi // (32 * 16)))
                    p = S.SoftmaxPlan("strided", bn, warps, outer * triton.cdiv(inner, bi) * chunks,
                                      block_inner=bi, chunks=chunks, looped=True)
                    out.append((f"split N in {chunks} chunks, {bi_bytes} B strips", p,
                                "a split plan for short columns (not in the table: report)"))
            # a candidate whose plan is the table's is not timed twice
            return [(a, b, c) for a, b, c in out if isinstance(b, str) or self.plan(x, b) != table]
        lay = R.collapse(x.shape, x.stride(), self.axes(x))
        sms = R._sm_count(x.device.index if x.is_cuda else None)
        lp = R.plan_launch(lay, x.element_size(), sms)
        if lp.kind == "col":
            out = [(nm, R.Tuning(R.ROW, t), f"COL = {t!r}") for nm, t in COL_VARIANTS]
        else:
            out = [(nm, R.Tuning(t, R.COL), f"ROW = {t!r}") for nm, t in ROW_VARIANTS]
        return [(a, b, c) for a, b, c in out
                if R.plan_launch(lay, x.element_size(), sms, tuning=b) != lp
                or (lp.kind == "row" and lp.n_split > 1
                    and b.row.finish_in_place != R.ROW.finish_in_place)]

    def check(self, got, ref):
        """(ok, error): amax exact; otherwise relative L2 error under the dtype's bound."""
        got, ref = got.double().reshape(-1), ref.reshape(-1)
        if self.family == "amax":
            err = float((got - ref).abs().max()) if got.numel() else 0.0
            return err == 0.0, err
        err = float((got - ref).norm() / max(float(ref.norm()), 1e-30))
        bound = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[
            self.out_dtype()]
        return err <= bound, err


def former_strided(x, dim, out, log):
    """The strided tile path as it was before this sweep's kernels (the plan of one
    next_pow2(N) x 64/32-column tile, 16 warps for ade20k, _strided_kernel LOOPED=False)."""
    rank = x.dim()
    outer = math.prod(x.shape[:dim])
    n = x.shape[dim]
    inner = math.prod(x.shape[dim + 1:])
    sm = S._sm_count_of(x.device)
    budget = min(S.MAX_REG_ELEMS, S._STRIDED_TILE)
    min_bi = min(16, triton.next_power_of_2(inner))
    bi = min(64, triton.next_power_of_2(inner))
    bn = triton.next_power_of_2(max(n, 1))
    while bi > min_bi and (bn * bi > budget or outer * triton.cdiv(inner, bi) < 2 * sm):
        bi //= 2
    assert bn * bi <= budget and rank >= 1
    x3, o3 = x.reshape(outer, n, inner), out.view(outer, n, inner)
    n_iblk = triton.cdiv(inner, bi)
    launch(S._strided_kernel, (outer * n_iblk,), x3, o3, outer, n, inner, n_iblk, *x3.stride(),
           *o3.stride(), BLOCK_N=bn, BLOCK_I=bi, LOOPED=False, LOG=log, USE_INT64=False,
           num_warps=S._warps(bn * bi), PDL=False)   # a plain launch, as it was measured
    return out


# -- precompile ---------------------------------------------------------------------------------

def _precompile(task):
    """Worker: run a row's candidates (or its torch.compile) once, so that Triton's and
    Inductor's on-disk caches hold them when the timing process asks."""
    idx, what, names, smoke = task
    device = "cpu" if smoke else "cuda"
    row = Row(ROWS[idx], device, smoke)
    x = row.inputs()
    done = 0
    if what == "compile":
        try:
            torch.compile(row.eager_fn(), backend="eager" if smoke else "inductor")(x)
            done = 1
        except Exception:
            pass
    else:
        for name, v, _ in row.variants(x):
            if name in names:
                try:
                    row.runner(x, v)()
                    done += 1
                except Exception:  # reported by the timing process
                    pass
        try:
            row.runner(x, None)()
        except Exception:
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def precompile(rows_idx, smoke, jobs, timeout_s):
    device = "cpu" if smoke else "cuda"
    tasks = []
    for i in rows_idx:
        row = Row(ROWS[i], device, smoke)
        x = torch.empty(row.shape, dtype=row.dtype, device=device)  # plans read shapes only
        names = [n for n, _, _ in row.variants(x)]
        x = None  # frees the input (closures above read x)
        tasks.append((i, "compile", [], smoke))
        tasks += [(i, "variants", names[k:k + 3], smoke) for k in range(0, len(names), 3)]
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches/compiles")


# -- main ---------------------------------------------------------------------------------------

def main() -> None:
    ap = sweep_parser(__doc__, jobs=12,
                      rows_help="only rows whose label contains one of these substrings")
    ap.add_argument("--samples", type=int, default=25, help="timed calls per variant")
    args = ap.parse_args()
    smoke = args.smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU, or --smoke for a CPU check of this script")
    idx = [i for i, r in enumerate(ROWS) if not args.rows or any(s in r[0] for s in args.rows)]
    t_start = time.perf_counter()
    # Inductor compiles in its own worker pool per process: one thread each here, the
    # precompile pool being the parallelism.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if args.jobs > 0:
        precompile(idx, smoke, args.jobs, 0.45 * args.budget_s)
    timer = Timer(smoke, args.samples)
    results = []
    for k, i in enumerate(idx):
        row = Row(ROWS[i], device, smoke)
        left = args.budget_s - (time.perf_counter() - t_start)
        allot = left * row.weight / sum(ROWS[j][5] for j in idx[k:])
        row_start = time.perf_counter()
        x = row.inputs()
        ref = row.reference(x)
        nbytes = row.nbytes(x)
        print(f"\n== {row.label}: {list(row.shape)} {row.params} "
              f"({nbytes / 1e6:.1f} MB read + written; share {allot:.0f} s)", flush=True)
        entries = []

        def record(name, fn, kind, hint=None, config=None, check=True):
            try:
                got = fn()
                ok, err = row.check(got, ref) if check else (True, 0.0)
                ms = timer(fn)
            except Exception as e:  # a variant that does not build, launch or compile
                msg = f"{type(e).__name__}: {e}"
                print(f"  {name:40s} ERROR {msg[:200]}", flush=True)
                entries.append(dict(name=name, kind=kind, error=msg[:800], hint=hint,
                                    config=config))
                return None
            e = dict(name=name, kind=kind, ms=ms, us=ms * 1e3, tbps=nbytes / ms / 1e9,
                     ok=ok, err=err, hint=hint, config=config)
            entries.append(e)
            return e

        eager = row.eager_fn()
        record("torch eager", lambda: eager(x), "eager")
        kind = row.table_kind(x)
        table_cfg = repr(S.STRIDED if kind.startswith("STRIDED") else
                         R.COL if kind == "COL" else R.ROW)
        tab = record(f"table (defaults): {row.table_plan(x)}", row.runner(x, None), "table",
                     config=table_cfg)
        # The candidates, while the row's share lasts (a few seconds kept for the compile,
        # which comes last: a cold Inductor compile must not starve the candidates).
        skipped = 0
        variants = row.variants(x)
        if smoke:
            variants = variants[::3][:3]
        reserve = 0.0 if smoke else min(3.0, 0.3 * allot)
        for name, v, hint in variants:
            if time.perf_counter() - row_start > allot - reserve:
                skipped += 1
                continue
            record(name, row.runner(x, v), "variant", hint, repr(v))
        try:
            t_c = time.perf_counter()
            compiled = torch.compile(eager, backend="eager" if smoke else "inductor")
            compiled(x)
            record(f"torch.compile (compiled in {time.perf_counter() - t_c:.1f} s)",
                   lambda: compiled(x), "compile")
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            print(f"  torch.compile FAILED: {msg[:300]}", flush=True)
            entries.append(dict(name="torch.compile", kind="compile", error=msg[:800]))

        base = {k: next((e["ms"] for e in entries if e.get("kind") == k and "ms" in e), None)
                for k in ("eager", "compile")}
        for e in entries:
            if "ms" not in e:
                continue
            e["vs_eager"] = base["eager"] / e["ms"] if base["eager"] else None
            e["vs_compile"] = base["compile"] / e["ms"] if base["compile"] else None
            sp = "  ".join(f"x{e[f'vs_{k}']:.2f} vs {k}" if e[f"vs_{k}"] else f"- vs {k}"
                           for k in ("eager", "compile"))
            print(f"  {e['name']:44s} {e['us']:9.1f} us {e['tbps']:6.2f} TB/s  {sp}"
                  f"  err {e['err']:.1e}{'' if e['ok'] else '  WRONG'}", flush=True)
        if skipped:
            print(f"  ({skipped} candidates skipped: the row's share of the budget, "
                  f"{allot:.0f} s, was spent)", flush=True)
        ours = [e for e in entries if "ms" in e and e["ok"] and e["kind"] in ("table", "variant")]
        wrong = [e["name"] for e in entries if "ms" in e and not e["ok"]]
        best = min(ours, key=lambda e: e["ms"]) if ours else None
        if best:
            gain = tab["ms"] / best["ms"] if tab and "ms" in tab else float("nan")
            print(f"  BEST {best['name']}: {best['us']:.1f} us, {best['tbps']:.2f} TB/s, "
                  f"x{gain:.2f} vs table; {best.get('hint') or 'keep the table'}", flush=True)
        if wrong:
            print(f"  WRONG (never best): {wrong}", flush=True)
        results.append(dict(label=row.label, table_kind=kind, table=table_cfg,
                            family=row.family, shape=list(row.shape),
                            params={k: str(v) for k, v in row.params.items()},
                            dtype=str(row.dtype), bytes=nbytes, entries=entries,
                            best=best and best["name"], best_hint=best and best.get("hint"),
                            wrong=wrong))
        x = ref = None  # frees the tensors (closures above read them)
        if not smoke:
            torch.cuda.empty_cache()

    print(f"\nsummary ({time.perf_counter() - t_start:.0f} s):")
    for r in results:
        es = {e["kind"]: e for e in r["entries"] if "ms" in e and e["kind"] != "variant"}
        b = next((e for e in r["entries"] if e["name"] == r["best"]), None)
        ref = min((es[k]["ms"] for k in ("eager", "compile") if k in es), default=None)
        line = f"  {r['label']:44s}"
        for k in ("table", "eager", "compile"):
            line += f" {k} {es[k]['us']:7.1f}" if k in es else f" {k}       -"
        if b:
            line += f" | best {b['us']:7.1f} us {b['tbps']:5.2f} TB/s"
            if ref:
                line += f" x{ref / b['ms']:.2f} vs the faster torch"
            line += f"  <- {r['best']}"
        print(line)
    print("\nwhere the best variants go (one table per kind; a variant that wins on most rows"
          " of its kind, and loses none by more than a few %, is the new default):")
    for r in results:
        if r["best_hint"]:
            print(f"  {r['label']}: {r['best_hint']}")
    print("\nper table: each candidate's time against the table's on the rows of that table "
          "(geometric mean; 'worse' counts rows where it is over 3 % slower; wrong ones excluded):")
    for kind in sorted({r["table_kind"] for r in results}):
        rows = [r for r in results if r["table_kind"] == kind]
        ratios: dict[str, list[float]] = {}
        hints: dict[str, str] = {}
        for r in rows:
            tab = next((e for e in r["entries"] if e["kind"] == "table" and "ms" in e), None)
            if not tab:
                continue
            for e in r["entries"]:
                if e["kind"] == "variant" and "ms" in e and e["ok"]:
                    ratios.setdefault(e["name"], []).append(tab["ms"] / e["ms"])
                    hints[e["name"]] = e.get("hint") or ""
        print(f"  {kind} ({len(rows)} rows):")
        ranked = sorted(ratios.items(), key=lambda kv: -math.prod(kv[1]) ** (1 / len(kv[1])))
        for name, rs in ranked:
            gm = math.prod(rs) ** (1 / len(rs))
            worse = sum(q < 0.97 for q in rs)
            print(f"    x{gm:.3f} over {len(rs)} rows, worse on {worse}: {name}  [{hints[name]}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=None if smoke else torch.cuda.get_device_name(),
                           triton=triton.__version__, torch=torch.__version__,
                           budget_s=args.budget_s, rows=results), f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
