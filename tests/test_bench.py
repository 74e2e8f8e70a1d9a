"""`opspec bench`: the correctness gate, the result format, the renderers and the CLI.

CPU only, on tiny copies of workload cases (the Triton kernels run in the interpreter, see
conftest.py). Nothing here asserts on a measured time: only on what the harness derives
from one, and on what it must not time at all.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from opspec.cli.main import main
from opspec.ops import BmmFwdOp, GemmFwdOp, SiluAndMulFwdOp
from opspec.ops import bench_baselines as BB
from opspec.ops import bench_harness as H
from opspec.ops import bench_report as R
from opspec.ops.workloads import cases

ROOT = Path(__file__).resolve().parents[1]
CEILINGS = {"bandwidth_tbps": 0.5, "compute_tflops": 2.0}


def _settings(**kw):
    base = dict(warmup_ms=0.0, pass_ms=0.0, min_iters=2, max_iters=2, pairs=1)
    base.update(kw)
    return H.Settings.for_device("cpu", quick=True, **base)


def _tiny_silu(dtype="bfloat16"):
    c = next(c for c in cases(SiluAndMulFwdOp) if c.dtypes["T"] == dtype)
    return H.tiny_case(c, M=4, N=32)


def _tiny_gemm():
    # float16: the interpreter's tl.dot is wrong for bfloat16 (see kernels/gemm.py)
    c = next(c for c in cases(GemmFwdOp) if c.dtypes["T"] == "float16" and c.values["trans_b"])
    return H.tiny_case(c, M=8, N=16, K=32)


def _run(ops, case_map, **kw):
    settings = kw.pop("settings", None) or _settings(baselines=kw.pop("baseline_names", ("eager",)))
    return H.run_bench(ops, settings, cases=case_map, ceilings=kw.pop("ceilings", CEILINGS), **kw)


def _row(result, op):
    (row,) = [r for r in result["rows"] if r["op"] == op]
    return row


# -- the registries --------------------------------------------------------------------------------

def test_every_bundled_op_has_a_reference_and_the_two_torch_baselines():
    ops = H.discover_ops()
    assert {"GemmFwdOp", "SiluAndMulFwdOp"} <= set(ops)
    assert "Op" not in ops and "SignatureCall" not in ops
    for name in ops:
        assert name in BB.REFERENCES
        assert {"eager", "compile"} <= set(BB.BASELINES[name])


def test_compile_baseline_is_torch_compile_of_the_eager_function():
    op = GemmFwdOp(trans_a=False, trans_b=True)
    fn = BB.BASELINES["GemmFwdOp"]["compile"](op)
    assert callable(fn) and fn is not BB.BASELINES["GemmFwdOp"]["eager"](op)
    a, b = torch.randn(4, 8), torch.randn(6, 8)
    torch.testing.assert_close(BB.BASELINES["GemmFwdOp"]["eager"](op)(a, b), a @ b.t())


def test_tolerances_per_dtype():
    assert BB.tolerance_for("GemmFwdOp", torch.bfloat16).rel_l2 > \
        BB.tolerance_for("GemmFwdOp", torch.float16).rel_l2 > \
        BB.tolerance_for("GemmFwdOp", torch.float32).rel_l2
    assert BB.tolerance_for("X", torch.int32) == BB.Tolerance(0.0, 0.0, 0.0)


# -- correctness -------------------------------------------------------------------------------------

def test_check_output_catches_nan_one_bad_element_shape_and_dtype():
    ref = torch.randn(64, 64, dtype=torch.float64)
    tol = BB.tolerance_for("", torch.float32)
    good = ref.float()
    assert H.check_output(good, ref, torch.float32, tol)["ok"]
    nan = good.clone()
    nan[3, 5] = float("nan")
    assert "NaN" in H.check_output(nan, ref, torch.float32, tol)["reason"]
    one = good.clone()
    one[7, 7] += 0.05  # tiny in the norm, wrong as an element
    res = H.check_output(one, ref, torch.float32, tol)
    assert not res["ok"] and res["max_error"] == pytest.approx(0.05, rel=1e-3)
    assert not H.check_output(good[:, :10], ref, torch.float32, tol)["ok"]
    assert "dtype" in H.check_output(good.half(), ref, torch.float32, tol)["reason"]


def test_a_wrong_op_is_a_failure_and_is_not_timed(monkeypatch):
    calls = {"eager": 0}

    def counting_eager(op):
        fn = BB.BASELINES["SiluAndMulFwdOp"]["eager"](op)

        def run(x):
            calls["eager"] += 1
            return fn(x)
        return run

    def wrong_forward(self, x):  # right shape and dtype, wrong values
        n = x.shape[1] // 2
        return (x[:, :n] * 1.5).contiguous()

    monkeypatch.setattr(SiluAndMulFwdOp, "forward", wrong_forward)
    res = _run([SiluAndMulFwdOp], {"SiluAndMulFwdOp": [_tiny_silu()]},
               baselines={"SiluAndMulFwdOp": {"eager": counting_eager}})
    row = _row(res, "SiluAndMulFwdOp")
    assert row["status"] == "wrong" and row["verified"] is False
    assert row["impls"]["opspec"]["status"] == "wrong"
    assert "relative error" in row["error"]
    assert row["times_us"] == {} and row["tflops"] is None and row["speedup"] == {}
    assert "median_us" not in row["impls"]["opspec"]
    assert calls["eager"] == 1  # verified, never timed
    assert H.exit_code(res) == 1
    assert res["summary"]["failures"][0]["case"] == row["case"]


def test_an_op_right_only_on_the_workload_inputs_is_caught_on_fresh_ones(monkeypatch):
    case = _tiny_silu("float32")
    memorised = BB.REFERENCES["SiluAndMulFwdOp"](None, case.inputs("cpu")[0])
    monkeypatch.setattr(SiluAndMulFwdOp, "forward", lambda self, x: memorised.clone())
    res = _run([SiluAndMulFwdOp], {"SiluAndMulFwdOp": [case]})
    row = _row(res, "SiluAndMulFwdOp")
    assert row["status"] == "wrong" and "seed" in row["error"] and row["times_us"] == {}
    assert H.exit_code(res) == 1


def test_a_wrong_baseline_is_reported_and_not_timed_while_the_op_is():
    calls = {"bad": 0}

    def bad(op):
        def run(x):
            calls["bad"] += 1
            n = x.shape[1] // 2
            return torch.nn.functional.silu(x[:, n:]) * x[:, :n]  # halves swapped
        return run

    def mutating(op):
        def run(x):
            out = BB.BASELINES["SiluAndMulFwdOp"]["eager"](op)(x)
            x.mul_(1.0).add_(0.0)[0, 0] = 7.0
            return out
        return run

    reg = {"SiluAndMulFwdOp": {"eager": BB.BASELINES["SiluAndMulFwdOp"]["eager"],
                               "bad": bad, "mutating": mutating}}
    res = _run([SiluAndMulFwdOp], {"SiluAndMulFwdOp": [_tiny_silu()]}, baselines=reg,
               settings=_settings())
    row = _row(res, "SiluAndMulFwdOp")
    assert row["verified"] is True
    assert row["impls"]["bad"]["status"] == "wrong" and calls["bad"] == 1
    assert row["impls"]["mutating"]["status"] == "wrong"
    assert row["impls"]["mutating"]["reason"] == "it modified an input it does not write"
    assert set(row["times_us"]) == {"opspec", "eager"}
    assert row["speedup"]["bad"] is None and row["speedup"]["eager"] > 0
    assert row["status"] == "baseline-failed" and H.exit_code(res) == 1


def test_an_unavailable_baseline_is_left_out_without_failing():
    def missing(op):
        raise BB.BaselineUnavailable("library not installed")

    reg = {"SiluAndMulFwdOp": {"eager": BB.BASELINES["SiluAndMulFwdOp"]["eager"],
                               "lib": missing}}
    res = _run([SiluAndMulFwdOp], {"SiluAndMulFwdOp": [_tiny_silu()]}, baselines=reg,
               settings=_settings())
    row = _row(res, "SiluAndMulFwdOp")
    assert row["impls"]["lib"]["status"] == "unavailable"
    assert row["status"] == "ok" and H.exit_code(res) == 0
    assert "lib" not in row["speedup"] and res["meta"]["baselines"] == ["eager"]
    assert res["meta"]["unavailable_baselines"] == {"lib": "library not installed"}
    md = R.results_markdown(res)
    assert "`lib` not run: library not installed" in md and "vs lib" not in md


def test_an_op_without_reference_is_unverified_and_fails():
    res = _run([SiluAndMulFwdOp], {"SiluAndMulFwdOp": [_tiny_silu()]}, references={})
    row = _row(res, "SiluAndMulFwdOp")
    assert row["status"] == "unverified" and row["times_us"] == {}
    assert H.exit_code(res) == 1


# -- the result and its numbers ----------------------------------------------------------------------

def test_json_result_format(tmp_path):
    settings = _settings(baselines=("eager",), copy_bytes=1 << 20, matmul_n=32, ceiling_iters=3)
    res = H.run_bench([GemmFwdOp, SiluAndMulFwdOp], settings,
                      cases={"GemmFwdOp": [_tiny_gemm()],
                             "SiluAndMulFwdOp": [_tiny_silu("float32")]})
    path = tmp_path / "out" / "bench.json"
    R.write_json(res, path)
    data = json.loads(path.read_text())
    assert data["format"] == H.FORMAT
    meta = data["meta"]
    for key in ("gpu", "device", "torch", "triton", "date", "timing", "ceilings", "baselines",
                "l2_flush_bytes", "settings"):
        assert key in meta
    assert meta["timing"] == "cpu-perf-counter" and meta["l2_flush_bytes"] is None
    assert meta["l2_flush_mode"] is None and R.flush_mode(meta) is None
    assert meta["device"] == "cpu" and meta["torch"] == torch.__version__
    c = meta["ceilings"]
    assert c["bandwidth_tbps"] > 0 and c["compute_tflops"] > 0
    assert "copy" in c["bandwidth"]["method"] and "float32" in c["compute"]["method"]
    assert [r["op"] for r in data["rows"]] == ["GemmFwdOp", "SiluAndMulFwdOp"]
    for row in data["rows"]:
        for key in ("op", "case", "verified", "max_error", "rel_error", "times_us", "tflops",
                    "tbps", "efficiency", "speedup", "flops", "bytes", "sol_us", "bound",
                    "impls", "status"):
            assert key in row
        assert row["verified"] is True, row["error"]
        assert set(row["times_us"]) == {"opspec", "eager"}
        assert set(row["speedup"]) == {"eager"}
        assert row["impls"]["opspec"]["samples"] == 4  # 2 iterations x (A B B A)
        assert len(row["impls"]["opspec"]["pass_medians_us"]) == 2
    assert data["summary"] == {"rows": 2, "verified": 2, "failures": []}
    assert H.exit_code(data) == 0


def test_flops_and_bytes_come_from_eval_roofline(monkeypatch):
    case_map = {"GemmFwdOp": [_tiny_gemm()]}
    plain = _row(_run([GemmFwdOp], case_map), "GemmFwdOp")
    seen = []
    original = GemmFwdOp.eval_roofline

    def patched(self):
        flops, nbytes = original(self)
        seen.append((flops, nbytes))
        return flops * 1000, nbytes * 7

    monkeypatch.setattr(GemmFwdOp, "eval_roofline", patched)
    row = _row(_run([GemmFwdOp], case_map), "GemmFwdOp")
    assert seen, "the harness must ask the op for its roofline"
    assert (row["flops"], row["bytes"]) == (plain["flops"] * 1000, plain["bytes"] * 7)
    t = row["times_us"]["opspec"] * 1e-6
    assert row["tflops"] == pytest.approx(row["flops"] / t / 1e12)
    assert row["tbps"] == pytest.approx(row["bytes"] / t / 1e12)
    sol = max(row["bytes"] / (CEILINGS["bandwidth_tbps"] * 1e12),
              row["flops"] / (CEILINGS["compute_tflops"] * 1e12))
    assert row["sol_us"] == pytest.approx(sol * 1e6)
    assert row["efficiency"] == pytest.approx(sol / t)
    assert row["speedup"]["eager"] == pytest.approx(row["times_us"]["eager"] / row["times_us"]["opspec"])


def test_memory_bound_rows_time_a_copy_of_their_bytes(monkeypatch):
    """A memory-bound row times a copy of its roofline bytes beside the op (half read, half
    written) and reports copy_us and vs_copy = copy / op; it is neither an implementation
    nor a baseline. A compute-bound row, or copy_reference=False, times none."""
    sizes = []
    real = H._copy_of
    monkeypatch.setattr(H, "_copy_of", lambda n, d: sizes.append(n) or real(n, d))
    case_map = {"SiluAndMulFwdOp": [_tiny_silu("float32")]}
    row = _row(_run([SiluAndMulFwdOp], case_map), "SiluAndMulFwdOp")
    assert row["bound"] == "memory" and sizes == [row["bytes"]]
    assert row["copy_us"] > 0
    assert row["vs_copy"] == pytest.approx(row["copy_us"] / row["times_us"]["opspec"])
    assert set(row["times_us"]) == {"opspec", "eager"} and set(row["speedup"]) == {"eager"}
    assert H.COPY not in row["impls"]
    # compute-bound (a ceiling that makes the roofline's flops dominate): no copy
    sizes.clear()
    row = _row(_run([SiluAndMulFwdOp], case_map,
                    ceilings={"bandwidth_tbps": 1e6, "compute_tflops": 1e-9}), "SiluAndMulFwdOp")
    assert row["bound"] == "compute" and row["copy_us"] is None and row["vs_copy"] is None
    row = _row(_run([SiluAndMulFwdOp], case_map,
                    settings=_settings(baselines=("eager",), copy_reference=False)),
               "SiluAndMulFwdOp")
    assert row["bound"] == "memory" and row["vs_copy"] is None and sizes == []
    # no memory for the copy's buffers: the row is still timed, and says why it has no copy
    def no_memory(n, d):
        raise torch.OutOfMemoryError("CUDA out of memory (a test)")

    monkeypatch.setattr(H, "_copy_of", no_memory)
    row = _row(_run([SiluAndMulFwdOp], case_map), "SiluAndMulFwdOp")
    assert row["status"] == "ok" and row["vs_copy"] is None and row["times_us"]["opspec"] > 0
    assert row["copy_error"] == (f"the copy of {row['bytes']} bytes was not timed: "
                                 "CUDA out of memory (a test)")


def test_reports_show_vs_copy_where_a_row_has_it():
    fake = _fake_result()
    assert "vs copy" not in R.text_table(fake) and "vs copy" not in R.results_markdown(fake)
    s1 = fake["rows"][3]
    s1.update(bound="memory", copy_us=4.0, vs_copy=0.8)
    text = R.text_table(fake)
    assert "SOL eff  vs copy  vs eager" in text and "0.80×" in text
    md = R.results_markdown(fake)
    silu = md[md.index("## SiluAndMulFwdOp"):]
    gemm = md[md.index("## GemmFwdOp"):md.index("## SiluAndMulFwdOp")]
    assert "| efficiency | vs copy | vs eager | vs compile |" in silu
    assert "| s1 | yes |" in silu and "| 70.0% | 0.80× | 0.50× | 4.00× |" in silu
    assert "| 60.0% | – | 2.00× | 1.00× |" in silu        # s2: not measured
    assert "vs copy" not in gemm
    assert "- vs copy (memory-bound rows)" in md


def test_case_filter_and_max_elems():
    silu = [_tiny_silu(), H.tiny_case(_tiny_silu(), case_id="big", M=64, N=64)]
    assert [c.id for c in H.select_cases(SiluAndMulFwdOp, _settings(max_elems=4 * 64), silu)] \
        == [silu[0].id]
    assert [c.id for c in H.select_cases(SiluAndMulFwdOp, _settings(case_filter="big"), silu)] \
        == ["big"]
    real = H.select_cases(GemmFwdOp, _settings(case_filter="decode"))
    assert real and all("decode" in c.id for c in real)
    # comma-separated: a case matching any of them, in the workload's order
    both = H.select_cases(GemmFwdOp, _settings(case_filter="decode,prefill"))
    assert {c.id for c in both} == {c.id for c in H.select_cases(GemmFwdOp, _settings())
                                    if "decode" in c.id or "prefill" in c.id}
    assert len(both) > len(real)


def test_passes_are_interleaved_a_b_c_c_b_a():
    order = []

    class FakeTimer:
        def samples(self, fn, n, *, flush=True):
            fn()
            return [1e-6] * n

    fns = {k: (lambda k=k: order.append(k)) for k in "ABC"}
    out = H._time_interleaved(FakeTimer(), fns, _settings(pairs=2))
    timed = order[-12:]
    assert timed == list("ABCCBAABCCBA")
    assert out["A"]["median_us"] == pytest.approx(1.0) and out["A"]["spread"] == 0


def test_cuda_settings_flush_more_than_l2_and_measure_large_ceilings():
    s = H.Settings.for_device("cuda")
    assert s.flush_bytes >= 256 << 20 and s.matmul_n == 8192 and s.pairs >= 2
    assert s.flush_mode == "clean"
    assert H.Settings.for_device("cuda", flush_mode="dirty").flush_mode == "dirty"
    assert H.Settings.for_device("cpu").flush_bytes == 0
    with pytest.raises(ValueError, match=r"flush_mode must be one of \('clean', 'dirty'\), "
                                         r"got 'warm'"):
        H.Settings.for_device("cuda", flush_mode="warm")


def test_the_report_says_how_the_l2_was_flushed():
    """RESULTS.md names the flush: a read (clean), a write (dirty; results from before the
    mode was recorded flushed so) or none."""
    fake = _fake_result()
    assert "256 MiB written: the L2 left full of dirty lines" in R.results_markdown(fake)
    assert R.flush_mode(fake["meta"]) == "dirty"
    fake["meta"]["l2_flush_mode"] = "clean"
    assert "256 MiB read: the L2 left holding clean lines" in R.results_markdown(fake)
    fake["meta"]["l2_flush_bytes"] = 0
    assert ", no cache flush" in R.results_markdown(fake) and R.flush_mode(fake["meta"]) is None


# -- make_results ------------------------------------------------------------------------------------

def _fake_result():
    def row(op, case, t_op, eager, compile_, eff, status="ok"):
        ok = status == "ok"
        return {"op": op, "case": case, "status": status, "verified": ok,
                "error": None if ok else "relative error 0.5 > 0.01",
                "max_error": 0.01, "rel_error": 1e-3, "flops": 2 * 10**9, "bytes": 10**6,
                "bound": "compute", "sol_us": t_op * eff,
                "times_us": {"opspec": t_op, "eager": t_op * eager, "compile": t_op * compile_}
                if ok else {},
                "tflops": 1.0, "tbps": 0.5, "efficiency": eff if ok else None,
                "speedup": {"eager": eager, "compile": compile_} if ok else {}, "impls": {}}

    return {"format": H.FORMAT,
            "meta": {"gpu": "NVIDIA H200", "device": "cuda:0", "torch": "2.11.0+cu130",
                     "triton": "3.6.0", "python": "3.12.3", "opspec": "0.1.0",
                     "date": "2026-11-30T00:00:00+00:00", "timing": "cuda-events",
                     "l2_flush_bytes": 256 << 20, "baselines": ["eager", "compile"],
                     "ceilings": {"bandwidth_tbps": 4.3, "compute_tflops": 790.0,
                                  "bandwidth": {"method": "device-to-device copy",
                                                "bytes_copied": 1 << 30},
                                  "compute": {"method": "cuBLAS bfloat16 matmul 8192^3"}}},
            "rows": [row("GemmFwdOp", "g1", 100.0, 2.0, 0.5, 0.9),
                     row("GemmFwdOp", "g2", 50.0, 8.0, 2.0, 0.4),
                     row("GemmFwdOp", "g3", 10.0, 1.0, 1.0, 0.9, status="wrong"),
                     row("SiluAndMulFwdOp", "s1", 5.0, 0.5, 4.0, 0.7),
                     row("SiluAndMulFwdOp", "s2", 6.0, 2.0, 1.0, 0.6)],
            "summary": {"rows": 5, "verified": 4, "failures": []}}


def _make_results():
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "benchmarks" / "make_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_geomean_and_summaries():
    assert R.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert R.geomean([None, 4.0, 0.0]) == pytest.approx(4.0)
    assert R.geomean([]) is None
    s = R.op_summaries(_fake_result())
    assert s["GemmFwdOp"]["geomean_speedup"]["eager"] == pytest.approx(4.0)  # g3 failed: left out
    assert s["GemmFwdOp"]["geomean_speedup"]["compile"] == pytest.approx(1.0)
    assert s["SiluAndMulFwdOp"]["geomean_speedup"]["eager"] == pytest.approx(1.0)
    assert s["SiluAndMulFwdOp"]["geomean_speedup"]["compile"] == pytest.approx(2.0)
    assert s["overall"]["geomean_speedup"]["eager"] == pytest.approx(2.0)  # (2*8*.5*2)^(1/4)
    assert s["overall"]["geomean_speedup"]["compile"] == pytest.approx(math.sqrt(2.0))
    assert s["GemmFwdOp"]["worst"]["case"] == "g2" and s["GemmFwdOp"]["failures"] == 1


def test_make_results_markdown(tmp_path):
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(_fake_result()))
    png = tmp_path / "plots" / "bench.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG\r\n\x1a\n")  # exists: linked, not redrawn
    out = tmp_path / "RESULTS.md"
    assert _make_results().main([str(src), "--plot", str(png), "--output", str(out)]) == 0
    md = out.read_text()
    assert md.startswith("# opspec benchmark results")
    for text in ("NVIDIA H200", "2.11.0+cu130", "3.6.0", "2026-11-30", "4.3 TB/s", "790.0 TFLOP/s",
                 "cuda-events", "![efficiency and speedup per case](plots/bench.png)"):
        assert text in md
    assert "| op | cases | failures | geomean efficiency | geomean vs eager | geomean vs compile |" in md
    assert "| GemmFwdOp | 3 | 1 | 60.0% | 4.00× | 1.00× |" in md
    assert "| SiluAndMulFwdOp | 2 | 0 | 64.8% | 1.00× | 2.00× |" in md
    assert "| **overall** | 5 | 1 |" in md and "| 2.00× | 1.41× |" in md
    assert "## GemmFwdOp" in md and "## SiluAndMulFwdOp" in md
    assert ("| case | verified | max error | rel error | opspec µs | eager µs | compile µs | "
            "TFLOP/s | TB/s | SOL µs | bound | efficiency | vs eager | vs compile |") in md
    assert md.count("| g1 | yes |") == 1 and "| g3 | **WRONG** |" in md
    assert "Worst row (lowest efficiency): `g2`, 40.0% of SOL" in md
    assert "Worst row (lowest efficiency): `s2`" in md
    assert "**WRONG** `g3`: relative error 0.5 > 0.01" in md


def test_efficiency_above_the_ceilings_is_flagged():
    fake = _fake_result()
    fake["rows"][0]["efficiency"] = 1.2
    md = R.results_markdown(fake)
    assert "120.0% (!)" in md and "roofline formula or a ceiling is suspect" in md
    assert "(!)" not in R.results_markdown(_fake_result())


def test_an_op_table_shows_only_the_baselines_timed_for_it():
    fake = _fake_result()
    fake["meta"]["baselines"] = ["eager", "compile", "lib"]
    for r in fake["rows"]:
        if r["op"] == "SiluAndMulFwdOp":
            r["times_us"]["lib"] = r["times_us"]["opspec"] * 2
            r["speedup"]["lib"] = 2.0
    md = R.results_markdown(fake)
    gemm = md[md.index("## GemmFwdOp"):md.index("## SiluAndMulFwdOp")]
    silu = md[md.index("## SiluAndMulFwdOp"):]
    assert "lib µs" not in gemm and "vs lib" not in gemm
    assert "| lib µs |" in silu and "2.00× over lib" in silu
    assert "geomean vs lib" in md  # the summary keeps every baseline


def test_make_results_without_matplotlib_fails_clearly(tmp_path, monkeypatch, capsys):
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(_fake_result()))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code = _make_results().main([str(src), "--plot", str(tmp_path / "missing.png"),
                                 "--output", str(tmp_path / "R.md")])
    assert code == 2 and "matplotlib" in capsys.readouterr().err
    assert _make_results().main([str(tmp_path / "nope.json")]) == 2


def test_plot_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    R.plot_png(_fake_result(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_table_lists_every_row_and_the_failures():
    text = R.text_table(_fake_result())
    assert "vs compile" in text and "g2" in text and "s1" in text
    assert "WRONG: GemmFwdOp g3: relative error" in text


# -- the command -------------------------------------------------------------------------------------

def test_cli_help(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--device", "--baselines", "--json", "--plot", "--cases", "--quick", "OP"):
        assert flag in out
    assert main(["--help"]) == 0 and "bench" in capsys.readouterr().out


def test_cli_usage_errors(capsys):
    assert main(["bench", "Gemm", "--device", "cpu"]) == 2
    assert "did you mean GemmFwdOp" in capsys.readouterr().err
    assert main(["bench", "--device", "cpu", "--baselines", "eager,nope"]) == 2
    assert "unknown baseline" in capsys.readouterr().err
    assert main(["bench", "--device", "cpu", "--cases", "no-such-case"]) == 2
    assert "no case matched" in capsys.readouterr().err


def test_cli_plot_without_matplotlib_is_a_usage_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--device", "cpu", "--plot", str(tmp_path / "p.png")]) == 2
    assert "matplotlib" in capsys.readouterr().err


def test_cli_end_to_end_on_tiny_cases(monkeypatch, tmp_path, capsys):
    from opspec.ops import workloads

    tiny = {"SiluAndMulFwdOp": [_tiny_silu()], "GemmFwdOp": [_tiny_gemm()]}
    monkeypatch.setattr(workloads, "cases", lambda cls: tiny[cls.__name__])
    path = tmp_path / "bench.json"
    code = main(["bench", "SiluAndMulFwdOp", "--device", "cpu", "--baselines", "eager",
                 "--quick", "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "SiluAndMulFwdOp" in out and "cpu-perf-counter" in out
    data = json.loads(path.read_text())
    assert [r["op"] for r in data["rows"]] == ["SiluAndMulFwdOp"]
    assert data["meta"]["settings"]["quick"] is True

    monkeypatch.setattr(SiluAndMulFwdOp, "forward",
                        lambda self, x: torch.zeros_like(x[:, : x.shape[1] // 2]))
    assert main(["bench", "SiluAndMulFwdOp", "--device", "cpu", "--baselines", "none",
                 "--quick"]) == 1
    captured = capsys.readouterr()
    assert "WRONG" in captured.out and "failed" in captured.err


def test_cuda_timer_flushes_before_every_sample_and_reads_events(monkeypatch):
    """The CUDA timer's bookkeeping, with fake events (no GPU here)."""
    log = []

    class FakeEvent:
        clock = 0.0

        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self):
            FakeEvent.clock += 1.0
            self.t = FakeEvent.clock
            log.append("record")

        def elapsed_time(self, end):
            return end.t - self.t  # milliseconds

    class FakeFlush:
        def zero_(self):
            log.append("flush")

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    timer = H.CudaTimer(torch.device("cpu"), 0)
    timer._flush = FakeFlush()
    out = timer.samples(lambda: log.append("call"), 3)
    assert log == ["flush", "record", "call", "record"] * 3 + ["sync"]
    assert out == [pytest.approx(1e-3)] * 3  # event milliseconds to seconds
    log.clear()
    timer.samples(lambda: log.append("call"), 1, flush=False)
    assert "flush" not in log and timer.method == "cuda-events"


def test_compile_baseline_is_verified_and_timed():
    """torch.compile (inductor on the CPU: a C++ compiler is needed) of the eager function."""
    res = _run([SiluAndMulFwdOp], {"SiluAndMulFwdOp": [_tiny_silu()]},
               baseline_names=("eager", "compile"))
    row = _row(res, "SiluAndMulFwdOp")
    assert row["impls"]["compile"]["status"] == "ok", row["impls"]["compile"]
    assert set(row["times_us"]) == {"opspec", "eager", "compile"}
    assert H.exit_code(res) == 0


def test_json_writer_keeps_json_strict(tmp_path):
    path = tmp_path / "r.json"
    R.write_json({"a": float("nan"), "b": [1.0, float("inf")]}, path)
    assert json.loads(path.read_text()) == {"a": None, "b": [1.0, None]}


# -- ops that write their inputs, ops with several outputs --------------------------------------------

@pytest.fixture(scope="module")
def U(tmp_path_factory):
    from runtime_user_ops import user_ops
    return user_ops(tmp_path_factory)


def test_an_op_that_writes_its_input_is_judged_on_the_written_value(U):
    """RtInplaceFwdOp writes x when `inplace` (and returns it): the result compared is x's new
    value, each implementation starting from the same x; with `inplace=False` x must come
    back unchanged."""
    def ref(op, x, a=None, b=None):
        return x + sum(t for t in (a, b) if t is not None)

    def torch_add(op):
        def run(x, a=None, b=None):
            d = sum(t for t in (a, b) if t is not None)
            return x.add_(d) if op.inplace else x + d
        return run

    def forgets_to_write(op):
        def run(x, a=None, b=None):
            return x + sum(t for t in (a, b) if t is not None)  # a new tensor, x untouched
        return run

    op_cases = cases(U.RtInplaceFwdOp)
    reg = {"RtInplaceFwdOp": {"eager": torch_add, "new": forgets_to_write}}
    res = _run([U.RtInplaceFwdOp], {"RtInplaceFwdOp": op_cases}, baselines=reg,
               references={"RtInplaceFwdOp": ref}, settings=_settings())
    rows = {r["case"]: r for r in res["rows"]}
    inplace, copy = rows["with-a-float32"], rows["with-b-float32"]
    assert inplace["written"] == ["x"], inplace
    assert inplace["verified"] is True, inplace
    assert inplace["impls"]["eager"]["status"] == "ok"
    # a correct new tensor, but x left as it was: x is then a second result, not written
    assert inplace["impls"]["new"]["status"] == "wrong"
    assert inplace["impls"]["new"]["reason"] == "2 result(s), the reference has 1"
    assert "written" not in copy and copy["verified"] is True
    assert copy["impls"]["new"]["status"] == "ok"


def test_results_of_orders_outputs_then_written_inputs():
    x, y, z = torch.zeros(2), torch.ones(2), torch.full((2,), 2.0)
    assert H.results_of(x, (x, y), (0,)) == (x,)          # the written input is the output
    got = H.results_of((y, None), (x, z), (0, 1))
    assert len(got) == 3 and got[0] is y and got[1] is x and got[2] is z
    bad = H.check_results((x,), (x, y), (torch.float32,) * 2, (BB.Tolerance(0, 0, 0),) * 2)
    assert bad["ok"] is False and bad["reason"] == "1 result(s), the reference has 2"
    wrong = H.check_results((x, y), (x, x), (torch.float32,) * 2, (BB.Tolerance(0, 0, 0),) * 2)
    assert wrong["ok"] is False and wrong["reason"].startswith("result 1: ")


def test_an_op_with_two_outputs_is_judged_on_both(U):
    def ref(op, x):
        return x * 2, torch.tensor(x.shape[0])

    def wrong_count(op):
        return lambda x: (x * 2, torch.tensor(x.shape[0] + 1))

    reg = {"RtPairFwdOp": {"eager": lambda op: (lambda x: (x * 2, torch.tensor(x.shape[0]))),
                           "off": wrong_count}}
    res = _run([U.RtPairFwdOp], {"RtPairFwdOp": cases(U.RtPairFwdOp)}, baselines=reg,
               references={"RtPairFwdOp": ref}, settings=_settings())
    (row,) = res["rows"]
    assert row["verified"] is True and row["impls"]["eager"]["status"] == "ok"
    assert row["impls"]["off"]["status"] == "wrong"
    assert row["impls"]["off"]["reason"].startswith("result 1: ")


def _merge_bench():
    spec = importlib.util.spec_from_file_location("merge_bench", ROOT / "benchmarks" / "merge_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_merge_bench_keeps_every_row_and_says_which_runs(tmp_path):
    """Per-op runs merge into one result: rows as measured (a later row of the same case
    replaces the earlier one), ceilings the median over the runs, every run listed."""
    a, b = _fake_result(), _fake_result()
    a["meta"]["ops"], b["meta"]["ops"] = ["GemmFwdOp"], ["SiluAndMulFwdOp"]
    a["rows"] = [r for r in a["rows"] if r["op"] == "GemmFwdOp"]
    b["rows"] = [r for r in b["rows"] if r["op"] == "SiluAndMulFwdOp"]
    b["meta"]["date"] = "2026-11-30T01:00:00+00:00"
    b["meta"]["ceilings"] = {**b["meta"]["ceilings"], "bandwidth_tbps": 4.1}
    again = json.loads(json.dumps(b))
    again["rows"] = [dict(b["rows"][0], times_us={"opspec": 1.0})]
    paths = []
    for i, r in enumerate((a, b, again)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(r))
    out = tmp_path / "merged.json"
    assert _merge_bench().main([str(out), *map(str, paths)]) == 0
    m = json.loads(out.read_text())
    assert [(r["op"], r["case"]) for r in m["rows"]] == [
        ("GemmFwdOp", "g1"), ("GemmFwdOp", "g2"), ("GemmFwdOp", "g3"),
        ("SiluAndMulFwdOp", "s1"), ("SiluAndMulFwdOp", "s2")]
    s1 = m["rows"][3]  # the later run's row; the baselines it did not time are carried
    assert s1["times_us"]["opspec"] == 1.0 and s1["carried"] == ["compile", "eager"]
    assert s1["times_us"]["eager"] == b["rows"][0]["times_us"]["eager"]
    assert m["meta"]["ceilings"]["bandwidth_tbps"] == pytest.approx(4.1)  # median of 4.3, 4.1, 4.1
    assert m["meta"]["date"] == "2026-11-30T01:00:00+00:00" and len(m["meta"]["runs"]) == 3
    assert m["meta"]["ops"] == ["GemmFwdOp", "SiluAndMulFwdOp"]
    assert [f["case"] for f in m["summary"]["failures"]] == ["g3"]
    md = R.results_markdown(m)
    assert "median over 3 runs, one per op" in md
    assert _merge_bench().main([str(out)]) == 2  # nothing to merge


def test_merge_bench_of_a_merged_result_keeps_its_runs():
    """A merged result merged again contributes the runs it was merged from: the run list
    and the ceilings' median cover every run, not one entry for the earlier merge."""
    a, b, c = _fake_result(), _fake_result(), _fake_result()
    b["meta"]["ceilings"] = {**b["meta"]["ceilings"], "bandwidth_tbps": 4.1}
    c["meta"]["ceilings"] = {**c["meta"]["ceilings"], "bandwidth_tbps": 4.0}
    for r, day in ((a, "01"), (b, "02"), (c, "03")):
        r["meta"]["date"] = f"2026-11-{day}T00:00:00+00:00"
    first = _merge_bench().merge([a, b])
    m = _merge_bench().merge([first, c])
    assert [run["date"] for run in m["meta"]["runs"]] == [
        "2026-11-01T00:00:00+00:00", "2026-11-02T00:00:00+00:00", "2026-11-03T00:00:00+00:00"]
    assert m["meta"]["ceilings"]["bandwidth_tbps"] == pytest.approx(4.1)  # 4.3, 4.1, 4.0
    assert "median over 3 runs, one per op" in R.results_markdown(m)


def test_merge_bench_refuses_results_of_different_flushes():
    """Rows timed after a clean and after a dirty L2 flush are not merged into one table;
    results that predate the recorded mode count as dirty."""
    a, b = _fake_result(), _fake_result()
    b["meta"]["l2_flush_mode"] = "clean"
    with pytest.raises(ValueError, match=r"results timed after different L2 flushes "
                                         r"\(clean, dirty\): re-run them with one --flush"):
        _merge_bench().merge([a, b])
    a["meta"]["l2_flush_mode"] = "dirty"
    assert len(_merge_bench().merge([a, _fake_result()])["rows"]) == len(a["rows"])


def test_merge_bench_carries_baselines_a_later_run_did_not_time():
    a, b = _fake_result(), _fake_result()
    b["rows"] = [dict(r, times_us={"opspec": r["times_us"]["opspec"] / 2,
                                   "eager": r["times_us"]["eager"]},
                      speedup={"eager": r["speedup"]["eager"] * 2},
                      impls={"opspec": {}, "eager": {}})
                 for r in b["rows"] if r["status"] == "ok"]
    m = _merge_bench().merge([a, b])
    g1 = next(r for r in m["rows"] if r["case"] == "g1")
    assert g1["times_us"] == {"opspec": 50.0, "eager": 200.0, "compile": 50.0}
    assert g1["carried"] == ["compile"] and g1["speedup"]["compile"] == pytest.approx(1.0)
    assert g1["impls"]["compile"]["carried"] is True
    g3 = next(r for r in m["rows"] if r["case"] == "g3")  # only in the first run: as it was
    assert "carried" not in g3


# -- the prover benchmark ------------------------------------------------------------------------

def _fake_prove():
    return {"machine": "x86_64, 2 CPUs", "python": "3.11.7", "z3": "5.4.1", "opspec": "0.1.0",
            "date": "2026-11-30T16:00:00+00:00",
            "runs": [{"label": "bundled", "target": "bundled manifest",
                      "summary": {"specs": 26, "proven": 25, "refuted": 1, "unknown": 0,
                                  "errors": 1, "warnings": 8, "seconds": 0.5},
                      "wall_seconds": 0.5032, "total_seconds": 0.2637,
                      "slowest": [{"op": "MoeGroupedGemmFwdOp", "seconds": 0.0713},
                                  {"op": "RotaryEmbeddingFwdOp", "seconds": 0.0458}]},
                     {"label": "corpus", "target": "tileops", "skipped": "not present"}]}


def test_prover_section_in_results(tmp_path):
    """`make_results.py --prove` adds a row per prover run: its counts, wall and summed
    seconds and slowest specs; a skipped run says why."""
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(_fake_result()))
    prove = tmp_path / "prove.json"
    prove.write_text(json.dumps(_fake_prove()))
    out = tmp_path / "RESULTS.md"
    assert _make_results().main([str(src), "--prove", str(prove), "--output", str(out)]) == 0
    md = out.read_text()
    assert "## Prover" in md and "z3 5.4.1" in md and "from `prove.json`" in md
    assert ("| bundled (bundled manifest) | 26 | 25 | 1 | 0 | 1 | 8 | 0.50 | 0.26 | "
            "MoeGroupedGemmFwdOp 0.07, RotaryEmbeddingFwdOp 0.05 |") in md
    assert "| corpus (tileops) | skipped: not present |" in md
    # the section sits after the summary table, before the first op's table
    assert md.index("## Summary") < md.index("## Prover") < md.index("## GemmFwdOp")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert _make_results().main([str(src), "--prove", str(bad), "--output", str(out)]) == 2


def test_prove_stats_runs_the_bundled_manifest(tmp_path):
    """benchmarks/prove_stats.py: the bundled run proves every bundled spec; a corpus
    directory that is not there is recorded as skipped."""
    spec = importlib.util.spec_from_file_location("prove_stats", ROOT / "benchmarks" / "prove_stats.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "prove.json"
    assert mod.main(["--json", str(out), "--corpus", str(tmp_path / "absent")]) == 0
    doc = json.loads(out.read_text())
    bundled, corpus = doc["runs"]
    s = bundled["summary"]
    assert s["specs"] >= 26 and s["proven"] == s["specs"] and s["errors"] == 0
    assert 1 <= len(bundled["slowest"]) <= 5 and bundled["wall_seconds"] > 0
    assert corpus == {"label": "corpus", "target": "absent", "skipped": "not present"}


# -- the float32 compute ceiling ---------------------------------------------------------------

def test_float32_cases_use_the_float32_compute_ceiling():
    """A case whose floating-point inputs are all float32 takes its compute ceiling from the
    float32 product; one with any 16-bit floating input, or none, keeps the 16-bit one; a
    run without the float32 ceiling (results from before it) keeps the 16-bit one too."""
    c = {"bandwidth_tbps": 4.0, "compute_tflops": 800.0, "compute_fp32_tflops": 50.0}
    f32 = torch.zeros(2, dtype=torch.float32)
    bf16 = torch.zeros(2, dtype=torch.bfloat16)
    idx = torch.zeros(2, dtype=torch.int64)
    got, name = H.row_ceilings(c, (f32, f32, idx, 3))
    assert name == "compute_fp32" and got["compute_tflops"] == 50.0
    assert got["bandwidth_tbps"] == 4.0 and c["compute_tflops"] == 800.0   # not mutated
    for inputs in ((bf16, f32), (idx,), ()):
        got, name = H.row_ceilings(c, inputs)
        assert name == "compute" and got["compute_tflops"] == 800.0, inputs
    got, name = H.row_ceilings({"bandwidth_tbps": 4.0, "compute_tflops": 800.0}, (f32,))
    assert name == "compute" and got["compute_tflops"] == 800.0


def test_a_float32_row_is_bound_and_rated_by_the_float32_ceiling():
    """Through the harness: a float32 batched GEMM case, given a float32 ceiling far below
    the 16-bit one, is compute-bound, its speed of light the flops over that ceiling; a
    float16 GEMM case keeps the 16-bit ceiling and stays memory-bound."""
    c32 = next(c for c in cases(BmmFwdOp) if c.dtypes["T"] == "float32")
    case32 = H.tiny_case(c32, B=2, M=8, N=16, K=32)
    ceilings = {"bandwidth_tbps": 1e-3, "compute_tflops": 1e3, "compute_fp32_tflops": 1e-6}
    res = _run([BmmFwdOp, GemmFwdOp], {"BmmFwdOp": [case32], "GemmFwdOp": [_tiny_gemm()]},
               ceilings=ceilings)
    r32, r16 = _row(res, "BmmFwdOp"), _row(res, "GemmFwdOp")
    assert r32["verified"] and r16["verified"], (r32["error"], r16["error"])
    assert r32["compute_ceiling"] == "compute_fp32" and r32["bound"] == "compute"
    assert r32["sol_us"] == pytest.approx(r32["flops"] / 1e-6 / 1e12 * 1e6)
    assert r16["compute_ceiling"] == "compute" and r16["bound"] == "memory"
    assert r16["sol_us"] == pytest.approx(r16["bytes"] / 1e-3 / 1e12 * 1e6)


def test_the_report_names_the_float32_ceiling_and_merges_keep_it():
    """RESULTS.md names the float32 ceiling and the rows it serves; a merge takes its median
    over the runs that measured it and keeps its description."""
    a, b, c = _fake_result(), _fake_result(), _fake_result()
    desc = {"method": "cuBLAS float32 matmul 4096^3, TF32 off", "dtype": "float32", "n": 4096}
    for r, v in ((b, 50.0), (c, 52.0)):
        r["meta"]["ceilings"] = {**r["meta"]["ceilings"], "compute_fp32_tflops": v,
                                 "compute_fp32": desc}
    md = R.results_markdown(b)
    assert ("float32 compute 50.0 TFLOP/s (cuBLAS float32 matmul 4096^3, TF32 off; the rows "
            "whose floating-point inputs are all float32)") in md
    assert "float32 compute" not in R.results_markdown(a)
    m = _merge_bench().merge([a, b, c])
    assert m["meta"]["ceilings"]["compute_fp32_tflops"] == pytest.approx(51.0)
    assert m["meta"]["ceilings"]["compute_fp32"] == desc
    assert [run["ceilings"]["compute_fp32_tflops"] for run in m["meta"]["runs"]] == [
        None, 50.0, 52.0]
