"""Offline sweep of the norm launch table (``TUNING`` in opspec.kernels.norm) on an H200: per
LayerNorm row short of the 3.8 TB/s bar (and two RMSNorm rows as controls), time the table's
choice (the launcher with no override), torch eager, torch.compile of the eager function and
candidate variants, each a change of a few ``NormTuning`` fields: LayerNorm's statistics in
one reduction (``ln_stats`` "shifted" or "chan"), a register cap (``ln_maxnreg``), fewer
elements a thread, and the coop kernel (rows cut into chunks that exchange partial
statistics: ``coop_min_block``, ``coop_block``, ``coop_warps``). Every variant's output (the
table's too) is checked once against the float32 torch reference before it is timed; a
wrong one is reported and never "best".

    python benchmarks/norm_sweep.py [--budget-s 150] [--json PATH] [--rows SUBSTR ...]

Prints per row and variant: us (median device time, L2 flushed: sweep_pool.bench),
TB/s (bytes read + written, as the ops' rooflines count them: the rows in and out, the weight
and bias once) and the speedup against eager and against compile; then the best variant of
each row and the table fields it changes. The JSON holds every timing. The budget bounds the
whole run, Triton and Inductor compiles included: the compiles are made first in ``--jobs``
processes (up to 45 % of the budget), then the rows are timed in order (the failing rows
first), each given an equal share of what is left; in a row the table, eager and compile
come first, then the variants, most promising first, until the row's share is spent. Not
part of the package.

``--smoke`` runs tiny rows through Triton's interpreter on the CPU (a check of this script;
compile there is torch.compile with the "eager" backend; the coop variants are scaled down).
"""

from __future__ import annotations

import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F

import opspec.kernels.norm as NK

from sweep_pool import compile_fn, run_ahead, sweep_parser, sweep_rows  # beside this script

TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 1.5e-2}
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}

# -- rows -------------------------------------------------------------------------------------
# (op, label, M rows, N, dtype, eps, weight, bias). op: layer | rms. The workload rows of
# LayerNormFwdOp / RMSNormFwdOp (opspec.ops.workloads.cases): B flattened into M, the
# normalised shape into N, the optional inputs as the case passes them.
# Order: the LayerNorm rows below 3.8 TB/s on the H200 first, worst first; then the controls.
ROWS = [
    ("layer", "long-row-32k-bfloat16", 2048, 32768, "bf16", 1e-5, True, True),
    ("layer", "qwen2.5-7b-prefill-bfloat16", 8192, 3584, "bf16", 1e-5, True, True),
    ("layer", "command-r-prefill-float16", 4096, 8192, "fp16", 1e-5, True, False),
    ("layer", "long-row-32k-float32", 2048, 32768, "f32", 1e-5, True, True),
    ("layer", "dsv3-prefill-bfloat16", 8192, 7168, "bf16", 1e-5, True, True),
    ("layer", "qwen2.5-7b-prefill-float32", 8192, 3584, "f32", 1e-5, True, True),
    ("layer", "dit-xl-adaln-bfloat16", 32 * 1024, 1152, "bf16", 1e-6, False, False),
    ("layer", "falcon-7b-prefill-bfloat16", 4096, 4544, "bf16", 1e-5, True, True),
    ("layer", "llama3-70b-prefill-16k-bfloat16", 16384, 8192, "bf16", 1e-5, True, True),
    # controls: RMSNorm must not regress (its kernel is unchanged by the LayerNorm variants)
    ("rms", "rms-dsv3-prefill-bfloat16", 8192, 7168, "bf16", 1e-6, True, False),
    ("rms", "rms-qwen2.5-7b-prefill-float32", 8192, 3584, "f32", 1e-6, True, False),
    # RMSNorm rows torch.compile ran faster (bench, 2026-12-01)
    ("rms", "rms-llama3-70b-prefill-16k-bfloat16", 16384, 8192, "bf16", 1e-5, True, False),
    ("rms", "rms-no-weight-4096-float32", 8192, 4096, "f32", 1e-6, False, False),
    ("rms", "rms-dsv3-kv-a-norm-bfloat16", 16384, 512, "bf16", 1e-6, True, False),
    ("rms", "rms-llama3-8b-prefill-bfloat16", 4096, 4096, "bf16", 1e-5, True, False),
    ("rms", "rms-qwen2.5-7b-prefill-bfloat16", 8192, 3584, "bf16", 1e-6, True, False),
    ("rms", "rms-qwen3-8b-q-norm-bfloat16", 4096 * 32, 128, "bf16", 1e-6, True, False),
]
SMOKE_ROWS = [
    ("layer", "smoke-layer-rows", 40, 100, "bf16", 1e-5, True, True),
    ("layer", "smoke-layer-long", 6, 700, "f32", 1e-5, True, True),
    ("rms", "smoke-rms", 12, 300, "bf16", 1e-6, True, False),
]


# -- variants: (name, NormTuning fields changed), most promising first ------------------------

def _coop(block, warps, smoke, **more):
    """Coop on this row: rows of next_pow2(N) >= block * 2 cut into chunks of `block`."""
    if smoke:   # the interpreter: chunks of 128 (the smoke rows are short)
        block, warps = max(32, block // 64), 1
    return dict(coop_min_block=2 * block, coop_block=block, coop_warps=warps,
                coop_min_programs=1 if smoke else NK.TUNING.coop_min_programs, **more)


def norm_variants(op: str, M: int, N: int, dtype: str, smoke: bool = False
                  ) -> list[tuple[str, dict]]:
    block = NK._next_pow2(N)
    long_row = block >= (512 if smoke else 32768)
    out = []
    if op == "layer" and long_row:
        out += [
            ("coop 8192 x 8 warps", _coop(8192, 8, smoke)),
            ("coop 8192 x 8, shifted stats", _coop(8192, 8, smoke, ln_stats="shifted")),
            ("coop 16384 x 16 warps", _coop(16384, 16, smoke)),
            ("coop 4096 x 4 warps", _coop(4096, 4, smoke)),
            ("coop 8192 x 8, chan stats", _coop(8192, 8, smoke, ln_stats="chan")),
            ("shifted stats (32 warps)", dict(ln_stats="shifted")),
            ("chan stats (32 warps)", dict(ln_stats="chan")),
            ("coop 8192 x 8, no register cap", _coop(8192, 8, smoke, coop_maxnreg=0)),
            ("coop 2048 x 2 warps", _coop(2048, 2, smoke)),
        ]
    elif op == "layer":
        out += [
            ("shifted stats, 64 registers", dict(ln_stats="shifted", ln_maxnreg=64)),
            ("chan stats, 64 registers", dict(ln_stats="chan", ln_maxnreg=64)),
            ("two-pass, 64 registers", dict(ln_maxnreg=64)),
            ("shifted stats", dict(ln_stats="shifted")),
            ("shifted, 16 a thread", dict(ln_stats="shifted", per_thread_large=16)),
            ("chan stats", dict(ln_stats="chan")),
            ("two-pass, 16 a thread", dict(per_thread_large=16)),
        ]
        if block >= 8192:
            out += [("coop 4096 x 4, shifted", _coop(4096, 4, smoke, ln_stats="shifted")),
                    ("coop 4096 x 4", _coop(4096, 4, smoke))]
        if block <= 2048:
            out += [("shifted, tiles of 8192", dict(ln_stats="shifted", min_tile=8192)),
                    ("shifted, tiles of 2048", dict(ln_stats="shifted", min_tile=2048))]
    else:   # RMSNorm controls: the table; coop and fewer elements a thread for comparison
        out += [("16 a thread", dict(per_thread_large=16))]
        if block >= 8192:
            out += [("coop 4096 x 4", _coop(4096, 4, smoke))]
    if not long_row:
        # the looped kernel on large grids, the row re-read from L2 (as Inductor's kernels);
        # and the rows kernel with its former evict_first row loads
        out = [("re-read 2048 x 16 warps", dict(reread_block=2048)),
               ("re-read 8192 x 16 warps", dict(reread_block=8192)),
               ("re-read 8192 x 8 warps", dict(reread_block=8192, reread_warps=8)),
               ("re-read 2048 x 8 warps", dict(reread_block=2048, reread_warps=8)),
               ("re-read 4096 x 16 warps", dict(reread_block=4096)),
               ("re-read 4096 x 8 warps", dict(reread_block=4096, reread_warps=8)),
               ("rows, evict_first row loads", dict(row_load_policy="evict_first"))] + out
    if N != block and NK._next_pow2(N - block // 2) < block // 2:
        # a row as two tiles, a power of two and the remainder (NormTuning.split_rows)
        out += [("two tiles (split rows)", dict(split_rows=True))]
    if dtype == "bf16" and block >= (64 if smoke else 4096):
        # bfloat16 rows held as 32-bit words (two elements a register), a persistent grid
        # whose programs load their next row ahead: n a thread, k programs an SM
        packed = dict(packed_min_block=block, packed_min_rows=1 if smoke else 132)
        found = []
        shapes = (((64, 2), (64, 1), (32, 1), (32, 2)) if block >= 32768 else
                  ((32, None), (64, None), (32, "half"), (16, None)))
        for pt, per_sm in shapes:
            warps = max(1, min(32, block // (32 * pt)))
            k = (per_sm if isinstance(per_sm, int) else
                 max(1, 32 // warps) if per_sm is None else max(1, 16 // warps))
            if block // (32 * warps) == pt and (pt, k) not in [f[:2] for f in found]:
                found.append((pt, k, f"packed, {pt} a thread, {k}/SM"))
        out = [(name, dict(packed, packed_per_thread=pt, packed_programs_per_sm=k))
               for pt, k, name in found] + out
    return out


# -- one row ----------------------------------------------------------------------------------

class Row:
    """Inputs, reference, the callables (table, eager, variants) of one row."""

    def __init__(self, row, device, smoke, seed=0):
        self.op, self.label, self.M, self.N, self.dt, self.eps, has_w, has_b = row
        self.dtype = DT[self.dt]
        self.smoke = smoke
        M, N = self.M, self.N
        g = torch.Generator(device=device).manual_seed(seed)
        # a mean away from zero (as activations have): the statistics must handle it
        self.x = (torch.randn(M, N, generator=g, device=device) * 2 + 0.5).to(self.dtype)
        self.w = (torch.randn(N, generator=g, device=device).to(self.dtype) if has_w else None)
        self.b = (torch.randn(N, generator=g, device=device).to(self.dtype)
                  if has_b and self.op == "layer" else None)
        self.out = torch.empty_like(self.x)
        es = self.x.element_size()
        self.bytes = (2 * M * N + N * ((self.w is not None) + (self.b is not None))) * es

    def reference(self):
        if self.op == "layer":
            return (NK.layer_norm_reference(self.x, (self.N,), self.w, self.b, self.eps),)
        return (NK.rms_norm_reference(self.x, (self.N,), self.w, self.eps),)

    def tuning(self, fields):
        return NK.TUNING._replace(**(fields or {}))

    def kernel(self, fields=None):
        """The launcher: with no fields the table's choice (the launcher's own), else the
        table with `fields` changed. Returns (fn() -> the written results, a description of
        the launch it makes)."""
        x, w, b, out, N, eps = self.x, self.w, self.b, self.out, self.N, self.eps
        rms = self.op == "rms"
        tun = None if fields is None else self.tuning(fields)

        def fn():
            NK.norm_fwd_triton(x, out, N, eps, rms=rms, weight=w, bias=b, tuning=tun)
            return (out,)
        return fn, self.describe(tun or NK.TUNING)

    def describe(self, tun):
        rms = self.op == "rms"
        cfg = NK.norm_config(self.M, self.N, tuning=tun, in_bytes=self.x.element_size(),
                             rms=rms,
                             packed=self.dtype == torch.bfloat16)
        d = dict(zip(("looped", "rows", "tiles", "block", "num_warps", "chunks", "stream",
                      "packed"), cfg))
        if self.op == "layer":
            d["ln_stats"] = tun.ln_stats
        if cfg.chunks:
            d["maxnreg"] = tun.coop_maxnreg
        elif self.op == "layer" and not cfg.looped:
            d["maxnreg"] = tun.ln_maxnreg   # (applied on large grids only)
        return d

    def eager_fn(self):
        N, eps = self.N, self.eps
        if self.op == "layer":
            def f(x, w, b):
                return F.layer_norm(x, (N,), w, b, eps)
        else:
            def f(x, w, b):
                return F.rms_norm(x, (N,), w, eps)
        return f, (self.x, self.w, self.b)

    def results_of(self, fn, args, name):
        return (fn(*args),)

    def check(self, got, ref):
        """Largest relative error (norm of the difference over the norm of the reference) of
        the results, and whether every result is within the dtype's tolerance."""
        worst = 0.0
        for g, w in zip(got, ref):
            g, w = g.float(), w.float()
            if not torch.equal(torch.isfinite(g), torch.isfinite(w)):
                return float("inf"), False
            err = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
            worst = max(worst, err)
        return worst, worst <= TOL[got[0].dtype]


def variants_of(row):
    return norm_variants(row.op, row.M, row.N, row.dt, row.smoke)


# -- precompile (Triton's and Inductor's on-disk caches) ---------------------------------------

def _precompile(task):
    """Worker: build the row's inputs, run each named launch once and, if asked,
    torch.compile the eager function, so that the timing process finds the binaries in the
    on-disk caches."""
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
            row.results_of(compile_fn(f, smoke), args, "compile")
            done += 1
        except Exception:
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def precompile(rows_idx, smoke, jobs, timeout_s):
    rows = SMOKE_ROWS if smoke else ROWS
    tasks = []
    for i in rows_idx:
        op, label, M, N, dt = rows[i][:5]
        names = [n for n, _ in norm_variants(op, M, N, dt, smoke)]
        tasks.append((i, ["table"] + names[:3], smoke, True))
        tasks += [(i, names[k:k + 3], smoke, False) for k in range(3, len(names), 3)]
    # workers still compiling would share the GPU with the timings: stopped
    run_ahead(_precompile, tasks, jobs, timeout_s, what="launches and compiles",
              stop_running=True)


# -- main -------------------------------------------------------------------------------------

def main() -> None:
    args = sweep_parser(__doc__, jobs=14,
                        rows_help="only rows whose label (or op) contains one of these"
                        ).parse_args()
    sweep_rows(args, SMOKE_ROWS if args.smoke else ROWS, make_row=Row,
               variants_of=variants_of, precompile=precompile,
               table_of=lambda row, cfg: row.describe(NK.TUNING),
               tuning_note="TUNING in opspec/kernels/norm.py",
               json_extra=dict(tuning=NK.TUNING._asdict()), widths=(40, 5, 34))


if __name__ == "__main__":
    main()
