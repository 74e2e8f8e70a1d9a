"""The `opspec bench` harness: verify, then time, an op against its baselines on every case.

For each workload case (`opspec.ops.workloads.cases`) of each op:

1. The inputs come from the spec (`Case.inputs(device)`).
2. Correctness first: the op and every baseline run once and are compared with the op's
   reference (`bench_baselines.REFERENCES`, on inputs upcast to float64) under the output
   dtype's `Tolerance`; an implementation that also changed its inputs fails, and the op is
   checked again on fresh inputs (`check_seeds`). A wrong or raising implementation is
   recorded as such and never timed; when the op itself fails, nothing in its row is timed.
3. `op.eval_roofline()` after that call gives the (flops, bytes) of the case; this module
   has no formula of its own for any op.
4. Timing, in one process: each implementation is warmed up, then timed in passes ordered
   A B C C B A (repeated `pairs` times), every sample one call. On CUDA a 256 MiB buffer
   (more than 4 times an H200's L2) is read before every sample (`flush_mode` "clean": the
   L2 then holds clean lines only; "dirty" writes the buffer instead, which leaves the L2
   full of dirty lines whose write-back the timed call pays), then the device spins
   for `lead_us` (1 ms) while the host enqueues the call, and each sample is the
   CUDA-event time around the call: the device's time, not the host's launch path (which
   `benchmarks/overhead.py` measures); on the CPU a `time.perf_counter` interval, no flush.
   The median of all samples is reported, with the spread of the per-pass medians.
5. Ceilings measured in the same run: a device-to-device copy for bandwidth (bytes read plus
   written over time) and a large matrix product for compute (8192^3 bfloat16 through
   cuBLAS on CUDA; a float32 `torch.matmul` on the CPU), and on CUDA a float32 product
   (4096^3, TF32 off) for the cases whose floating-point inputs are all float32
   (`row_ceilings`). The speed of light of a case is max(bytes / bandwidth, flops /
   compute) and its efficiency SOL / measured time.

`run_bench` returns a JSON-ready dict (see `bench_report` for its shape and renderers).
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from opspec.ops import bench_baselines as BB
from opspec.schema.primitives import WORKLOAD_SEED

__all__ = [
    "FORMAT",
    "IMPL",
    "Settings",
    "CpuTimer",
    "CudaTimer",
    "check_output",
    "check_results",
    "results_of",
    "discover_ops",
    "exit_code",
    "measure_ceilings",
    "row_ceilings",
    "run_bench",
    "select_cases",
    "tiny_case",
]

FORMAT = "opspec-bench/1"
#: The name of the op's own implementation in the results.
IMPL = "opspec"
#: The timing name of a memory-bound row's copy of its bytes (never an implementation).
COPY = "copy of the row's bytes"
_MIB = 1 << 20
#: How the L2 can be flushed before a sample (`Settings.flush_mode`).
FLUSH_MODES = ("clean", "dirty")


def _check_flush_mode(mode: str) -> None:
    if mode not in FLUSH_MODES:
        raise ValueError(f"flush_mode must be one of {FLUSH_MODES}, got {mode!r}")

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Settings:
    """How a bench run chooses cases and spends time. `for_device` gives the defaults."""

    device: str = "cpu"
    baselines: tuple[str, ...] | None = None  # None: every registered baseline available here
    case_filter: str | None = None            # keep cases whose id contains one of these
                                              # comma-separated substrings
    max_elems: int | None = None              # skip cases with more input elements than this
    quick: bool = False
    pairs: int = 2             # A B C C B A pairs of passes
    warmup_ms: float = 25.0    # per implementation and case, before the first pass
    pass_ms: float = 25.0      # per pass: iterations = pass_ms / (estimated time per sample)
    min_iters: int = 10
    max_iters: int = 200
    flush_bytes: int = 256 * _MIB  # CUDA only
    # CUDA only: how the L2 is flushed before each sample. "clean" reads the flush buffer,
    # so the L2 holds none of the call's data and nothing dirty; "dirty" writes it, leaving
    # the L2 full of modified lines that the timed call then writes back to HBM (on an H200
    # 8-9 us on a read-only 134 MB reduction, 3 us on a copy: benchmarks/flush_probe.py).
    flush_mode: str = "clean"
    lead_us: float = 1000.0    # CUDA only: the device is kept busy this long before each sample
    copy_bytes: int = 1024 * _MIB  # bandwidth ceiling: bytes copied (read + written = twice)
    matmul_n: int = 8192           # compute ceiling: an n x n x n matrix product
    ceiling_iters: int = 20
    ceiling_warmup_s: float = 0.3  # the matrix product runs this long before the ceilings
    check_seeds: tuple[int, ...] = (WORKLOAD_SEED + 1,)  # the op is also checked on these inputs
    # Memory-bound rows also time a device-to-device copy of their roofline bytes (half read,
    # half written) beside the op: the rate a copy reaches at that size, the row's own
    # bandwidth ceiling (a small copy does not reach the large one's).
    copy_reference: bool = True

    def __post_init__(self) -> None:
        _check_flush_mode(self.flush_mode)

    @classmethod
    def for_device(cls, device: str, *, quick: bool = False, **overrides: Any) -> "Settings":
        kind = torch.device(device).type
        kw: dict[str, Any] = {"device": device, "quick": quick}
        if kind != "cuda":
            kw.update(copy_bytes=64 * _MIB, matmul_n=1024, ceiling_iters=10, flush_bytes=0,
                      ceiling_warmup_s=0.0)
        if quick:
            kw.update(pairs=1, warmup_ms=5.0, pass_ms=10.0, min_iters=5, max_iters=50,
                      ceiling_iters=5)
            if kind == "cuda":
                kw.update(copy_bytes=512 * _MIB)
            else:
                kw.update(copy_bytes=16 * _MIB, matmul_n=256, min_iters=3)
        kw.update(overrides)
        return cls(**kw)


# -- timers -------------------------------------------------------------------------------------

class CudaTimer:
    """CUDA events around each call, the L2 flushed before each: a large buffer read
    (`flush_mode` "clean") or written ("dirty"; see `Settings.flush_mode`).

    Between the flush and the start event the device spins for `lead_us` (a sleep kernel):
    the host enqueues the call meanwhile, so the events time the device's work for it and
    not the host's launch path. Without the lead, a call whose host side outlasts the flush
    (a Triton launch through Python, a compiled function's guards: tens of microseconds on
    a slow host) was timed with the device idle waiting for it. The host side is measured
    on its own by `benchmarks/overhead.py`."""

    method = "cuda-events"

    def __init__(self, device: torch.device, flush_bytes: int, lead_us: float = 0.0,
                 flush_mode: str = "clean"):
        _check_flush_mode(flush_mode)
        self.device = device
        self.flush_bytes = flush_bytes
        self.flush_mode = flush_mode if flush_bytes else None
        self._flush = torch.zeros(flush_bytes // 4, dtype=torch.float32, device=device) \
            if flush_bytes else None
        self._sink = torch.empty((), dtype=torch.float32, device=device)
        self.lead_cycles = int(lead_us * 1e-6 * _clock_hz(device)) if lead_us > 0 else 0

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def samples(self, fn: Callable[[], Any], n: int, *, flush: bool = True) -> list[float]:
        """`n` timed calls of `fn`, in seconds."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            if flush and self._flush is not None:
                if self.flush_mode == "clean":
                    torch.sum(self._flush, dim=0, out=self._sink)
                else:
                    self._flush.zero_()
            if self.lead_cycles:
                torch.cuda._sleep(self.lead_cycles)
            starts[i].record()
            fn()
            ends[i].record()
        self.sync()
        return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends)]

    def close(self) -> None:
        self._flush = None


class CpuTimer:
    """`time.perf_counter` around each call; no cache flush."""

    method = "cpu-perf-counter"
    flush_bytes = None
    flush_mode = None

    def __init__(self, device: torch.device):
        self.device = device

    def sync(self) -> None:
        pass

    def samples(self, fn: Callable[[], Any], n: int, *, flush: bool = True) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    def close(self) -> None:
        pass


def _clock_hz(device: torch.device) -> float:
    """The SM clock of `device` in Hz (the sleep kernel counts cycles); 2 GHz where torch
    does not say (an H200 boosts to 1.98 GHz)."""
    khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", None)
    return float(khz) * 1e3 if khz else 2.0e9


def make_timer(settings: Settings):
    device = torch.device(settings.device)
    if device.type == "cuda":
        return CudaTimer(device, settings.flush_bytes, settings.lead_us, settings.flush_mode)
    return CpuTimer(device)


# -- ceilings -----------------------------------------------------------------------------------

def measure_ceilings(timer, settings: Settings) -> dict[str, Any]:
    """Copy bandwidth (bytes read + written / time) and matrix-product rate, measured here."""
    device = torch.device(settings.device)
    iters = max(3, settings.ceiling_iters)
    on_cuda = device.type == "cuda"
    n = settings.matmul_n
    dtype = torch.bfloat16 if on_cuda else torch.float32
    # Random data, never zeros: zeros can run faster than real data.
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn(n, n, generator=gen, device=device, dtype=torch.float32).to(dtype)
    c = torch.empty(n, n, dtype=dtype, device=device)
    mm = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    # Warm up with the matrix product: an idle GPU's clocks take a moment to rise.
    t0 = time.perf_counter()
    while True:
        timer.samples(mm, 3, flush=False)
        if time.perf_counter() - t0 >= settings.ceiling_warmup_s:
            break

    nbytes = settings.copy_bytes
    copy = _copy_of(2 * nbytes, device)   # nbytes read, nbytes written
    timer.samples(copy, 3, flush=False)
    t_copy = statistics.median(timer.samples(copy, iters, flush=False))
    copy = None  # frees its buffers

    t_mm = statistics.median(timer.samples(mm, iters, flush=False))
    a = b = c = None
    compute = {"method": (f"cuBLAS bfloat16 matmul {n}^3" if on_cuda
                          else f"float32 torch.matmul {n}^3"),
               "dtype": str(dtype).removeprefix("torch."), "n": n, "median_us": t_mm * 1e6}
    compute_tflops = 2 * n ** 3 / t_mm / 1e12
    if on_cuda:
        # The float32 ceiling: IEEE float32 products (TF32 off, torch's default for
        # matmul), the math of the float32 GEMM rows and of their baselines. Half the
        # size: 8192^3 in float32 would take ~20 ms a sample.
        n32 = max(1, n // 2)
        a = torch.randn(n32, n32, generator=gen, device=device, dtype=torch.float32)
        b = torch.randn(n32, n32, generator=gen, device=device, dtype=torch.float32)
        c = torch.empty(n32, n32, dtype=torch.float32, device=device)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            timer.samples(mm, 2, flush=False)
            t_mm32 = statistics.median(timer.samples(mm, iters, flush=False))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        a = b = c = None
        compute_fp32 = {"method": f"cuBLAS float32 matmul {n32}^3, TF32 off",
                        "dtype": "float32", "n": n32, "median_us": t_mm32 * 1e6}
        compute_fp32_tflops = 2 * n32 ** 3 / t_mm32 / 1e12
    else:   # the compute ceiling is a float32 product already
        compute_fp32, compute_fp32_tflops = compute, compute_tflops
    return {
        "bandwidth_tbps": 2 * nbytes / t_copy / 1e12,
        "compute_tflops": compute_tflops,
        "compute_fp32_tflops": compute_fp32_tflops,
        "bandwidth": {"method": ("device-to-device copy" if on_cuda else "memcpy (Tensor.copy_)"),
                      "bytes_copied": nbytes, "median_us": t_copy * 1e6},
        "compute": compute,
        "compute_fp32": compute_fp32,
    }


def row_ceilings(ceilings: Mapping[str, Any], inputs: Sequence[Any]) -> tuple[dict, str]:
    """The ceilings a case's speed of light uses, and the name of its compute ceiling: a
    case whose floating-point tensor inputs are all float32 computes in float32 (the op and
    its baselines: IEEE products, no TF32), so its compute ceiling is the float32 product's
    (`compute_fp32_tflops`, where the run measured it); any other case's is the 16-bit one
    (`compute_tflops`)."""
    floats = [t.dtype for t in inputs
              if isinstance(t, torch.Tensor) and t.dtype.is_floating_point]
    fp32 = ceilings.get("compute_fp32_tflops")
    if floats and fp32 and all(d == torch.float32 for d in floats):
        return {**ceilings, "compute_tflops": fp32}, "compute_fp32"
    return dict(ceilings), "compute"


# -- ops and cases --------------------------------------------------------------------------------

def discover_ops() -> dict[str, type]:
    """Every bundled op class: `opspec.ops.__all__` less the base classes."""
    import opspec.ops as O
    from opspec.ops.op import Op

    out = {}
    for name in O.__all__:
        if name in ("Op", "SignatureCall"):
            continue
        cls = getattr(O, name)
        if isinstance(cls, type) and issubclass(cls, Op):
            out[name] = cls
    return out


def _input_elems(case) -> int:
    return sum(t.numel() for t in case.inputs("meta") if isinstance(t, torch.Tensor))


def select_cases(op_cls: type, settings: Settings, cases: Sequence | None = None) -> list:
    """The op's workload cases (or `cases`), filtered by `case_filter` (a case whose id
    contains one of its comma-separated substrings) and `max_elems`."""
    if cases is None:
        from opspec.ops.workloads import cases as workload_cases
        cases = workload_cases(op_cls)
    wanted = [w for w in (settings.case_filter or "").split(",") if w]
    out = []
    for c in cases:
        if wanted and not any(w in c.id for w in wanted):
            continue
        if settings.max_elems is not None and _input_elems(c) > settings.max_elems:
            continue
        out.append(c)
    return out


# -- correctness ----------------------------------------------------------------------------------

def check_output(out: Any, ref: torch.Tensor, dtype: torch.dtype, tol: BB.Tolerance
                 ) -> dict[str, Any]:
    """Compare one output with the (float64) reference: `ok`, `reason`, `max_error`
    (max |out − ref|) and `rel_error` (‖out − ref‖ / ‖ref‖)."""
    if not isinstance(out, torch.Tensor):
        return {"ok": False, "reason": f"returned {type(out).__name__}, not a tensor",
                "max_error": None, "rel_error": None}
    if tuple(out.shape) != tuple(ref.shape):
        return {"ok": False, "reason": f"shape {list(out.shape)}, expected {list(ref.shape)}",
                "max_error": None, "rel_error": None}
    if out.dtype != dtype:
        return {"ok": False, "reason": f"dtype {out.dtype}, expected {dtype}",
                "max_error": None, "rel_error": None}
    o = out.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach().to(torch.float64)
    ref_nan = torch.isnan(r)
    bad_special = (~torch.isfinite(o) & torch.isfinite(r)) | (torch.isnan(o) & ~ref_nan)
    inf_mismatch = torch.isinf(r) & (o != r)
    n_special = int(bad_special.sum()) + int(inf_mismatch.sum())
    finite = torch.isfinite(r) & torch.isfinite(o)
    diff = torch.where(finite, (o - r).abs(), torch.zeros_like(r))
    rf = torch.where(torch.isfinite(r), r, torch.zeros_like(r))
    max_err = float(diff.max()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.vector_norm(rf)) if rf.numel() else 0.0
    diff_norm = float(torch.linalg.vector_norm(diff)) if diff.numel() else 0.0
    rel = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    rms = ref_norm / math.sqrt(rf.numel()) if rf.numel() else 0.0
    n_bad = int((diff > tol.atol * rms + tol.rtol * rf.abs()).sum())
    reason = None
    if n_special:
        reason = f"{n_special} NaN/inf element(s) where the reference has none"
    elif rel > tol.rel_l2:
        reason = f"relative error {rel:.3g} > {tol.rel_l2:g}"
    elif n_bad:
        reason = (f"{n_bad} element(s) beyond {tol.atol:g}*rms(ref) + {tol.rtol:g}*|ref| "
                  f"(max error {max_err:.3g})")
    return {"ok": reason is None, "reason": reason, "max_error": max_err, "rel_error": rel}


def results_of(out: Any, inputs: Sequence[Any], written: Sequence[int]) -> tuple:
    """What a call is judged on: its outputs in order (a tuple's members; None skipped), then
    each input it writes (`written`: positions) that is not itself one of the outputs."""
    outs = tuple(o for o in (out if isinstance(out, (tuple, list)) else (out,)) if o is not None)
    extra = tuple(inputs[i] for i in written if not any(inputs[i] is o for o in outs))
    return outs + extra


def _as_tuple(ref: Any) -> tuple:
    return tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)


def check_results(got: Sequence[Any], refs: Sequence[torch.Tensor],
                  dtypes: Sequence[torch.dtype], tols: Sequence[BB.Tolerance]) -> dict[str, Any]:
    """`check_output` on each result; the first failure names its position, and the errors
    reported are the largest over all results."""
    if len(got) != len(refs):
        return {"ok": False, "reason": f"{len(got)} result(s), the reference has {len(refs)}",
                "max_error": None, "rel_error": None}
    worst: dict[str, Any] = {"ok": True, "reason": None, "max_error": 0.0, "rel_error": 0.0}
    for k, (o, r, d, t) in enumerate(zip(got, refs, dtypes, tols)):
        res = check_output(o, r, d, t)
        if not res["ok"]:
            where = f"result {k}: " if len(refs) > 1 else ""
            return {**res, "reason": where + res["reason"]}
        worst["max_error"] = max(worst["max_error"], res["max_error"])
        worst["rel_error"] = max(worst["rel_error"], res["rel_error"])
    return worst


def _verify(fn: Callable[..., Any], inputs: tuple, refs: tuple, dtypes: tuple, tols: tuple,
            written: Sequence[int] = ()) -> dict[str, Any]:
    """Run `fn` once and judge it. The inputs it may write are cloned first (every
    implementation starts from the same values); the others must come back unchanged."""
    call_inputs = tuple(t.clone() if i in written else t for i, t in enumerate(inputs))
    before = [t.clone() if isinstance(t, torch.Tensor) and i not in written else None
              for i, t in enumerate(inputs)]
    try:
        out = fn(*call_inputs)
    except Exception as exc:  # a raising implementation is a result, not a crash
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                "max_error": None, "rel_error": None}
    res = check_results(results_of(out, call_inputs, written), refs, dtypes, tols)
    if res["ok"]:
        for x, y in zip(call_inputs, before):
            if y is not None and not torch.equal(x, y):
                res = {**res, "ok": False, "reason": "it modified an input it does not write"}
                break
    del out, call_inputs
    return {"status": "ok" if res["ok"] else "wrong", "reason": res["reason"],
            "max_error": res["max_error"], "rel_error": res["rel_error"]}


# -- timing ---------------------------------------------------------------------------------------

def _warm_up(timer, fn: Callable[[], Any], settings: Settings) -> float:
    """Run `fn` for about `warmup_ms` (at least 3 calls); return the wall time of one
    flushed sample, to size the passes."""
    budget = settings.warmup_ms * 1e-3
    timer.samples(fn, 1)  # the first call compiles / autotunes: not counted in the estimate
    n, t0 = 0, time.perf_counter()
    while True:
        timer.samples(fn, 1)
        n += 1
        spent = time.perf_counter() - t0
        if n >= 3 and spent >= budget:
            break
        if n >= 1000:
            break
    return spent / n


def _time_interleaved(timer, fns: Mapping[str, Callable[[], Any]], settings: Settings
                      ) -> dict[str, dict[str, Any]]:
    names = list(fns)
    iters = {}
    for name in names:
        per = _warm_up(timer, fns[name], settings)
        want = settings.pass_ms * 1e-3 / per if per > 0 else settings.max_iters
        iters[name] = int(min(settings.max_iters, max(settings.min_iters, want)))
    samples: dict[str, list[float]] = {n: [] for n in names}
    passes: dict[str, list[float]] = {n: [] for n in names}
    order = (names + names[::-1]) * max(1, settings.pairs)
    for name in order:
        s = timer.samples(fns[name], iters[name])
        samples[name].extend(s)
        passes[name].append(statistics.median(s))
    out = {}
    for name in names:
        med = statistics.median(samples[name])
        out[name] = {"median_us": med * 1e6,
                     "pass_medians_us": [p * 1e6 for p in passes[name]],
                     "spread": (max(passes[name]) - min(passes[name])) / med if med > 0 else 0.0,
                     "iters": iters[name], "samples": len(samples[name])}
    return out


# -- the run --------------------------------------------------------------------------------------

def _meta(settings: Settings, timer, ceilings: Mapping[str, Any]) -> dict[str, Any]:
    import opspec

    device = torch.device(settings.device)
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        gpu = torch.cuda.get_device_name(idx)
        props = torch.cuda.get_device_properties(idx)
        device_info = {"sm_count": props.multi_processor_count,
                       "memory_bytes": props.total_memory,
                       "l2_bytes": getattr(props, "L2_cache_size", None),
                       "cuda": torch.version.cuda}
    else:
        gpu = None
        device_info = {"cpu": platform.processor() or platform.machine(),
                       "threads": torch.get_num_threads()}
    from opspec.kernels.devices import TRITON_INTERPRETED

    return {
        "gpu": gpu,
        "device": str(device),
        "device_info": device_info,
        "torch": torch.__version__,
        "triton": triton_version,
        "triton_interpret": TRITON_INTERPRETED,
        "python": platform.python_version(),
        "opspec": opspec.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "timing": timer.method,
        "l2_flush_bytes": timer.flush_bytes,
        "l2_flush_mode": getattr(timer, "flush_mode", None),
        "lead_cycles": getattr(timer, "lead_cycles", 0),
        "ceilings": dict(ceilings),
        "settings": {k: v for k, v in asdict(settings).items()},
    }


def _resolve_baselines(op_name: str, settings: Settings,
                       registry: Mapping[str, Mapping[str, BB.Factory]]) -> dict[str, BB.Factory]:
    known = dict(registry.get(op_name, {}))
    if settings.baselines is None:
        return known
    return {n: known[n] for n in settings.baselines if n in known}


def _empty_row(op_name: str, case) -> dict[str, Any]:
    return {"op": op_name, "case": case.id, "label": case.label,
            "params": {k: _jsonable(v) for k, v in case.values.items()},
            "dtypes": dict(case.dtypes), "status": "error", "verified": False, "error": None,
            "max_error": None, "rel_error": None, "flops": None, "bytes": None,
            "bound": None, "sol_us": None, "times_us": {}, "tflops": None, "tbps": None,
            "efficiency": None, "speedup": {}, "copy_us": None, "vs_copy": None, "impls": {}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _rates(flops: int, nbytes: int, t_us: float | None, ceilings: Mapping[str, Any]
           ) -> dict[str, Any]:
    if t_us is None or t_us <= 0:
        return {"tflops": None, "tbps": None, "efficiency": None}
    t = t_us * 1e-6
    sol = _sol_seconds(flops, nbytes, ceilings)
    return {"tflops": flops / t / 1e12, "tbps": nbytes / t / 1e12,
            "efficiency": sol / t if sol is not None else None}


def _copy_of(nbytes: int, device: torch.device) -> Callable[[], Any]:
    """A copy on ``device`` of ``nbytes // 2`` bytes (read, then written: ``nbytes`` of
    traffic), random data."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _sol_seconds(flops: int, nbytes: int, ceilings: Mapping[str, Any]) -> float | None:
    bw = ceilings.get("bandwidth_tbps")
    peak = ceilings.get("compute_tflops")
    if not bw or not peak:
        return None
    return max(nbytes / (bw * 1e12), flops / (peak * 1e12))


def bench_case(op_cls: type, case, settings: Settings, timer, ceilings: Mapping[str, Any], *,
               baselines: Mapping[str, BB.Factory],
               reference: BB.Reference | None,
               tolerances: Mapping[str, Mapping[torch.dtype, BB.Tolerance]] | None = None
               ) -> dict[str, Any]:
    """One row: verify the op and each baseline on the case, then time those that passed."""
    op_name = op_cls.__name__
    row = _empty_row(op_name, case)
    device = torch.device(settings.device)
    try:
        inputs = case.inputs(device)
        op = case.construct(op_cls)
    except Exception as exc:
        row["error"] = f"cannot build the case: {type(exc).__name__}: {exc}"
        return row
    if reference is None:
        row["status"] = "unverified"
        row["error"] = f"no reference registered for {op_name} (bench_baselines.REFERENCES)"
        return row

    # The op first, on copies (it may write its inputs): its results fix the dtypes every
    # baseline must return, and its record says which inputs the call writes.
    try:
        first = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)
        out = op(*first)
        names = op._info().inputs
        written = tuple(sorted(names.index(n) for n in op.last_call.written))
        dtypes = tuple(r.dtype for r in results_of(out, first, written)
                       if isinstance(r, torch.Tensor))
        del first
    except Exception as exc:
        row["impls"][IMPL] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        row["error"] = row["impls"][IMPL]["reason"]
        return row
    try:
        flops, nbytes = op.eval_roofline()  # the only source of flops and bytes
    except Exception as exc:
        row["error"] = f"eval_roofline() raises {type(exc).__name__}: {exc}"
        return row
    row["flops"], row["bytes"] = int(flops), int(nbytes)
    del out
    ceilings, row["compute_ceiling"] = row_ceilings(ceilings, inputs)

    def reference_for(xs: tuple) -> tuple[tuple, tuple, tuple]:
        refs = _as_tuple(reference(op, *[BB.upcast(t) for t in xs]))
        ds = dtypes if len(dtypes) == len(refs) else tuple(r.dtype for r in refs)
        return refs, ds, tuple(BB.tolerance_for(op_name, d, tolerances) for d in ds)

    try:
        refs, ds, tols = reference_for(inputs)
    except Exception as exc:
        row["error"] = f"the reference raises {type(exc).__name__}: {exc}"
        return row
    row["tolerance"] = asdict(tols[0])
    if written:
        row["written"] = [names[i] for i in written]

    fns: dict[str, Callable[..., Any]] = {IMPL: op}
    for name, factory in baselines.items():
        try:
            fns[name] = factory(op)
        except BB.BaselineUnavailable as exc:
            row["impls"][name] = {"status": "unavailable", "reason": str(exc)}
        except Exception as exc:
            row["impls"][name] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    for name, fn in fns.items():
        row["impls"][name] = _verify(fn, inputs, refs, ds, tols, written)
    del refs
    mine = row["impls"][IMPL]
    # Fresh inputs for the op alone: it must compute the same function on any valid input.
    for seed in settings.check_seeds if mine["status"] == "ok" else ():
        try:
            other = case.inputs(device, seed=seed)
            refs2, ds2, tols2 = reference_for(other)
        except Exception as exc:
            row["error"] = f"cannot check seed {seed}: {type(exc).__name__}: {exc}"
            return row
        again = _verify(op, other, refs2, ds2, tols2, written)
        del other, refs2
        if again["status"] != "ok":
            mine.update(again)
            mine["reason"] = f"on inputs of seed {seed}: {again['reason']}"
            break
    row["checked_seeds"] = [WORKLOAD_SEED, *settings.check_seeds]
    row["max_error"], row["rel_error"] = mine["max_error"], mine["rel_error"]
    row["verified"] = mine["status"] == "ok"
    if not row["verified"]:
        row["status"] = mine["status"]
        row["error"] = mine["reason"]
        return row

    # An op that writes its inputs is timed writing them again and again (the values drift,
    # the memory traffic does not), as a model calls it.
    timed = {n: (lambda f=f: f(*inputs)) for n, f in fns.items() if row["impls"][n]["status"] == "ok"}
    sol = _sol_seconds(flops, nbytes, ceilings)
    bw, peak = ceilings.get("bandwidth_tbps"), ceilings.get("compute_tflops")
    if sol is not None:
        row["sol_us"] = sol * 1e6
        row["bound"] = "memory" if nbytes / (bw * 1e12) >= flops / (peak * 1e12) else "compute"
    if settings.copy_reference and row.get("bound") == "memory" and nbytes >= 2:
        try:
            timed[COPY] = _copy_of(nbytes, device)
        except RuntimeError as exc:   # out of memory for two more buffers of the row's size
            row["copy_error"] = f"the copy of {nbytes} bytes was not timed: {exc}"
    try:
        times = _time_interleaved(timer, timed, settings)
    except Exception as exc:
        row["error"] = f"timing failed: {type(exc).__name__}: {exc}"
        return row
    timed.pop(COPY, None)   # frees the copy's buffers
    copy_t = times.pop(COPY, None)
    for name, t in times.items():
        row["impls"][name].update(t)
        row["impls"][name].update(_rates(flops, nbytes, t["median_us"], ceilings))
        row["times_us"][name] = t["median_us"]
    t_op = row["times_us"][IMPL]
    row.update(_rates(flops, nbytes, t_op, ceilings))
    if copy_t is not None:
        row["copy_us"] = copy_t["median_us"]
        row["vs_copy"] = copy_t["median_us"] / t_op if t_op > 0 else None
    for name in fns:  # the baselines built here (an unavailable one has no column)
        if name == IMPL:
            continue
        t = row["times_us"].get(name)
        row["speedup"][name] = t / t_op if t is not None and t_op > 0 else None
    failed = [n for n, r in row["impls"].items() if r["status"] in ("wrong", "error")]
    row["status"] = "ok" if not failed else "baseline-failed"
    if failed:
        row["error"] = "; ".join(f"{n}: {row['impls'][n]['reason']}" for n in failed)
    return row


def run_bench(ops: Iterable[type] | Mapping[str, type] | None = None,
              settings: Settings | None = None, *,
              cases: Mapping[str, Sequence] | None = None,
              baselines: Mapping[str, Mapping[str, BB.Factory]] | None = None,
              references: Mapping[str, BB.Reference] | None = None,
              tolerances: Mapping[str, Mapping[torch.dtype, BB.Tolerance]] | None = None,
              ceilings: Mapping[str, Any] | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """Bench `ops` (default: every bundled op) and return the JSON-ready result.

    `cases` maps an op name to the cases to run instead of its workloads (tests pass tiny
    ones); `baselines`, `references` and `tolerances` replace the `bench_baselines`
    registries; `ceilings` skips measuring them (keys `bandwidth_tbps`, `compute_tflops`).
    """
    settings = settings or Settings.for_device("cuda" if torch.cuda.is_available() else "cpu")
    if ops is None:
        op_classes = list(discover_ops().values())
    elif isinstance(ops, Mapping):
        op_classes = list(ops.values())
    else:
        op_classes = list(ops)
    registry = BB.BASELINES if baselines is None else baselines
    refs = BB.REFERENCES if references is None else references
    plan = [(cls, c) for cls in op_classes
            for c in select_cases(cls, settings, (cases or {}).get(cls.__name__))]
    timer = make_timer(settings)
    try:
        if ceilings is None:
            ceilings = measure_ceilings(timer, settings)
        else:
            ceilings = {**ceilings, "given": True}
        meta = _meta(settings, timer, ceilings)
        rows = []
        for i, (cls, case) in enumerate(plan):
            if progress is not None:
                progress(i, len(plan), f"{cls.__name__} {case.id}")
            rows.append(bench_case(cls, case, settings, timer, ceilings,
                                   baselines=_resolve_baselines(cls.__name__, settings, registry),
                                   reference=refs.get(cls.__name__), tolerances=tolerances))
            if torch.device(settings.device).type == "cuda":
                torch.cuda.empty_cache()
        if progress is not None:
            progress(len(plan), len(plan), "done")
    finally:
        timer.close()
    names = sorted({n for r in rows for n, v in r["impls"].items()
                    if n != IMPL and v.get("status") != "unavailable"})
    meta["baselines"] = names
    meta["unavailable_baselines"] = {
        n: v.get("reason") for r in rows for n, v in r["impls"].items()
        if v.get("status") == "unavailable" and n not in names}
    meta["baseline_descriptions"] = {
        c.__name__: {n: d for n, d in BB.DESCRIPTIONS.get(c.__name__, {}).items() if n in names}
        for c in op_classes}
    meta["ops"] = [c.__name__ for c in op_classes]
    failures = [{"op": r["op"], "case": r["case"], "status": r["status"], "error": r["error"]}
                for r in rows if r["status"] != "ok"]
    return {"format": FORMAT, "meta": meta, "rows": rows,
            "summary": {"rows": len(rows), "verified": sum(r["verified"] for r in rows),
                        "failures": failures}}


def exit_code(result: Mapping[str, Any]) -> int:
    """0 when every row verified and every baseline that ran was right, else 1."""
    return 1 if result["summary"]["failures"] else 0


def tiny_case(case, case_id: str | None = None, **values: Any):
    """A copy of a workload case with some indices replaced (tests shrink shapes with it)."""
    return replace(case, values={**case.values, **values},
                   id=case_id or f"{case.id}-tiny")
