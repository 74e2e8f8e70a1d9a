"""Offline sweep of the last-axis softmax launch table on an H200: per softmax or
log-softmax workload row, time the table's choice (the launcher with no override), torch
eager, torch.compile of the eager function and candidate variants of the table
(``ROW_TUNING`` in opspec.kernels.softmax), each variant a change of one or two fields.
Every variant's output (the table's too) is checked once against the float32 torch
reference before it is timed; a wrong one is reported and never "best".

    python benchmarks/softmax_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]

Prints per row and variant: us (median device time, L2 flushed: sweep_pool.bench),
TB/s (bytes read + written, as the ops' rooflines count them) and the speedup against
eager and against compile; then the best variant of each row and the table fields it
changes. The JSON holds every timing. The budget bounds the whole run, Triton and Inductor
compiles included: the compiles are made first in ``--jobs`` processes (up to 45 % of the
budget), then the rows are timed in order (the failing rows first), each given an equal
share of what is left; in a row the table, eager and compile come first, then the
variants, most promising first, until the row's share is spent. Not part of the package.

``--smoke`` runs tiny rows through Triton's interpreter on the CPU (a check of this
script; compile there is torch.compile with the "eager" backend).
"""

from __future__ import annotations

import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

import opspec.kernels.softmax as SK

from sweep_pool import compile_fn, run_ahead, sweep_parser, sweep_rows  # beside this script

TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 1.5e-2}
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}

# -- rows -------------------------------------------------------------------------------------
# (op, label, M rows, N, input dtype, extra). op: softmax | log (log-softmax).
# extra: the output dtype name (None: the input's).
# Order: the rows that fail on the H200 first (below 3.8 TB/s or slower than eager and
# compile), then rows that check the table does not regress elsewhere.
ROWS = [
    ("softmax", "llama3-vocab-prefill-bfloat16", 4096, 128256, "bf16", None),
    ("softmax", "qwen2.5-vocab-prefill-float32", 1024, 151936, "f32", None),
    ("softmax", "llama3-8b-attn-1k-bfloat16", 32 * 1024, 1024, "bf16", None),
    ("softmax", "llama3-8b-attn-2k-bfloat16", 32 * 2048, 2048, "bf16", None),
    ("log", "llama3-vocab-train-bfloat16", 4096, 128256, "bf16", None),
    ("log", "llama3-vocab-prefill-bfloat16-float32", 2048, 128256, "bf16", "f32"),
    ("log", "llama3-8b-attn-1k-bfloat16", 32 * 1024, 1024, "bf16", None),
    # rows that pass: the table must not make them worse
    ("softmax", "llama3-8b-attn-8k-bfloat16", 4 * 8192, 8192, "bf16", None),
    ("log", "llama3-8b-attn-2k-float32", 32 * 2048, 2048, "f32", None),
]
SMOKE_ROWS = [
    ("softmax", "smoke-softmax-rows", 40, 45, "bf16", None),
    ("log", "smoke-log-coop", 6, 700, "bf16", "f32"),
]
#: smoke shrinks the register budget and the SM count so that tiny rows reach coop and looped
SMOKE_SOFTMAX = dict(max_reg=64, sm_count=1)


# -- variants: (name, table fields changed), most promising first ------------------------------

def softmax_variants(M: int, N: int, in_bytes: int, smoke: bool = False
                     ) -> list[tuple[str, dict]]:
    plan = SK.softmax_plan(M, N, 1, in_bytes, **(SMOKE_SOFTMAX if smoke else {}))
    if plan.kind == "rows":
        return [
            ("2 tiles a program", dict(row_tiles=2)),
            ("tiles of 4096", dict(row_tile=4096)),
            ("former table: tiles of 1024", dict(row_tile=1024)),
            ("tiles of 16384", dict(row_tile=16384)),
            ("2 tiles of 4096", dict(row_tile=4096, row_tiles=2)),
            ("32 a thread", dict(row_per_thread=32)),
            ("4 tiles a program", dict(row_tiles=4)),
        ]
    if plan.kind in ("coop", "looped"):
        # coop_min_in_bytes=1: coop for 16-bit inputs too (the table keeps them on looped)
        return [
            ("coop chunks 16384, 16 warps, any dtype",
             dict(coop_block=16384, coop_warps=16, coop_min_in_bytes=1)),
            ("looped, 1 program per SM", dict(coop_max_chunks=0)),
            ("coop chunks 8192, 8 warps, any dtype",
             dict(coop_block=8192, coop_warps=8, coop_min_in_bytes=1)),
            ("coop chunks 4096, 4 warps, any dtype",
             dict(coop_block=4096, coop_warps=4, coop_min_in_bytes=1)),
            ("coop chunks 8192, 16 warps, any dtype",
             dict(coop_block=8192, coop_warps=16, coop_min_in_bytes=1)),
            ("looped, 2 programs per SM", dict(coop_max_chunks=0, loop_programs_per_sm=2.0)),
        ]
    return []


# -- one row ----------------------------------------------------------------------------------

def nbytes_of(op, M, N, dt, extra):
    b = torch.tensor([], dtype=DT[dt]).element_size()
    ob = torch.tensor([], dtype=DT[extra]).element_size() if extra else b
    return M * N * (b + ob)


class Row:
    """Inputs, reference, the callables (table, eager, variants) of one row."""

    def __init__(self, row, device, smoke, seed=0):
        self.op, self.label, self.M, self.N, dt, self.extra = row
        self.dt, self.dtype = dt, DT[dt]
        self.smoke = smoke
        self.device = device
        M, N = self.M, self.N
        g = torch.Generator(device=device).manual_seed(seed)
        self.x = (torch.randn(M, N, generator=g, device=device) * 2 + 0.5).to(self.dtype)
        self.out_dtype = DT[self.extra] if self.extra else self.dtype
        self.out = torch.empty(M, N, dtype=self.out_dtype, device=device)
        self.bytes = nbytes_of(self.op, M, N, dt, self.extra)

    # the op's result(s), as a tuple
    def reference(self):
        return (SK.softmax_reference(self.x, -1, self.out_dtype, self.op == "log"),)

    def kernel(self, fields=None):
        """The launcher: with no fields the table's choice (the launcher's own, except
        under --smoke, where the table's blocks are shrunk), else the table with `fields`
        changed. Returns (fn() -> the written results, the launch it makes)."""
        op, M, N = self.op, self.M, self.N
        own = fields is None and not self.smoke   # the launcher plans for itself
        kw = SMOKE_SOFTMAX if self.smoke else {}
        plan = SK.softmax_plan(M, N, 1, self.x.element_size(),
                               tuning=SK.ROW_TUNING._replace(**(fields or {})), **kw)
        use = None if own else plan
        x, out, log = self.x, self.out, op == "log"

        def fn():
            SK.softmax_triton(x, -1, out, log, plan=use)
            return (out,)
        return fn, plan

    def eager_fn(self):
        dtype = self.out_dtype if self.extra else None
        if self.op == "log":
            def f(x):
                return torch.log_softmax(x, -1, dtype=dtype)
        else:
            def f(x):
                return torch.softmax(x, -1, dtype=dtype)
        return f, (self.x,)

    def results_of(self, fn, args, name):
        """Run `fn(*args)`; the op's results."""
        got = fn(*args)
        return (got,)

    def check(self, got, ref):
        """Largest relative error (norm of the difference over the norm of the reference)
        of the results, and whether every result is within the dtype's tolerance."""
        worst = 0.0
        for g, w in zip(got, ref):
            g, w = g.float(), w.float()
            if not torch.equal(torch.isfinite(g), torch.isfinite(w)):
                return float("inf"), False
            fin = torch.isfinite(w)
            err = ((g - w)[fin].norm() / w[fin].norm().clamp_min(1e-30)).item()
            worst = max(worst, err)
        return worst, worst <= TOL[got[0].dtype]


# -- precompile (Triton's and Inductor's on-disk caches) ---------------------------------------

def _precompile(task):
    """Worker: build the row's inputs, run each named launch once (values do not matter)
    and, if asked, torch.compile the eager function, so that the timing process finds the
    binaries in the on-disk caches."""
    i_row, names, smoke, with_compile = task
    rows = SMOKE_ROWS if smoke else ROWS
    device = "cpu" if smoke else "cuda"
    row = Row(rows[i_row], device, smoke)
    variants = dict(variants_of(row))
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1     # the workers are the parallelism
    done = 0
    for name in names:
        try:
            fn, _ = row.kernel(variants.get(name))
            fn()
            done += 1
        except Exception:  # reported by the timing process
            pass
    if with_compile:
        try:
            f, args = row.eager_fn()
            cf = compile_fn(f, smoke)
            row.results_of(cf, args, "compile")
            done += 1
        except Exception:
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def variants_of(row):
    return softmax_variants(row.M, row.N, row.x.element_size(), row.smoke)


def precompile(rows_idx, smoke, jobs, timeout_s):
    rows = SMOKE_ROWS if smoke else ROWS
    tasks = []
    for i in rows_idx:
        op, label, M, N, dt, extra = rows[i]
        names = [n for n, _ in softmax_variants(M, N, DT[dt].itemsize, smoke)]
        tasks.append((i, ["table"] + names[:4], smoke, True))
        tasks += [(i, names[k:k + 3], smoke, False) for k in range(4, len(names), 3)]
    # workers still compiling would share the GPU with the timings: stopped
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches and compiles",
              stop_running=True)


# -- main -------------------------------------------------------------------------------------

def describe(cfg):
    if cfg is None:
        return None
    keep = ("kind", "block", "num_warps", "grid", "rows", "tiles", "chunks", "vec")
    return {k: getattr(cfg, k) for k in keep}


def main() -> None:
    args = sweep_parser(__doc__, jobs=14,
                        rows_help="only rows whose label (or op) contains one of these"
                        ).parse_args()
    sweep_rows(args, SMOKE_ROWS if args.smoke else ROWS, make_row=Row,
               variants_of=variants_of, precompile=precompile, describe=describe,
               tuning_note="ROW_TUNING", json_extra=dict(rows_tuning=SK.ROW_TUNING._asdict()))


if __name__ == "__main__":
    main()
