"""GPU check of the SiluAndMul and GEMM/GEMV Triton kernels (run on the H200).

    python -m opspec.kernels.gpu_check            # with opspec installed
    python3 kernels/gpu_check.py                  # from the repository root, no install
    python3 kernels/gpu_check.py --sweep          # also time every gemm_configs() entry

For each kernel, in bf16 and fp16, on CUDA: the maximum error against an fp32
reference (a failure is an error above tolerance, or a NaN), and the median time of
``triton.testing.do_bench`` (L2 flushed between calls) as TB/s (SiluAndMul:
``3*M*N*elem`` bytes; GEMV: operand and output bytes) or TFLOP/s (GEMM: ``2*M*N*K``)
next to torch's: eager ``F.silu(x[:, :N]) * x[:, N:]``, ``torch.compile`` of it,
``torch.matmul``.  A small correctness sweep covers every (trans_a, trans_b) layout,
ragged sizes and bf16 (which the CPU interpreter cannot check for ``tl.dot``).
Exits 1 when any correctness check fails, 2 when CUDA is absent.
Do not run with TRITON_INTERPRET set.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

if __package__ in (None, ""):
    # Run as a file: import the sibling modules directly (they need only torch/triton).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemm import (  # type: ignore[no-redef]
        _is_aligned,
        gemm_config_for,
        gemm_configs,
        gemm_reference,
        gemm_triton,
        gemv_config_for,
        gemv_triton,
    )
    from silu_and_mul import (  # type: ignore[no-redef]
        silu_and_mul_block,
        silu_and_mul_reference,
        silu_and_mul_triton,
    )
else:
    from .gemm import (
        _is_aligned,
        gemm_config_for,
        gemm_configs,
        gemm_reference,
        gemm_triton,
        gemv_config_for,
        gemv_triton,
    )
    from .silu_and_mul import silu_and_mul_block, silu_and_mul_reference, silu_and_mul_triton

import torch
import torch.nn.functional as F
import triton
import triton.testing

DTYPES = (torch.bfloat16, torch.float16)
# (rtol, atol) against an fp32 reference; one bf16 ulp is 2**-8 relative.
TOL = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2)}

SILU_SHAPES = [(4096, 14336), (16, 14336), (1, 14336)]
# (M, N, K, trans_a, trans_b)
GEMM_SHAPES = [
    (4096, 4096, 4096, False, False),
    (4096, 4096, 4096, False, True),
    (4096, 14336, 4096, False, True),
]
DECODE_SHAPES = [(1, 14336, 4096, False, True), (16, 14336, 4096, False, True)]
# Small ragged problems for the correctness sweep (all four layouts).
SWEEP_SHAPES = [(1, 7, 5), (17, 33, 65), (3, 130, 257), (200, 300, 129), (129, 257, 512), (512, 384, 320)]

FAILURES: list[str] = []
DEVICE = "cuda"


def _bench(fn) -> float:
    """Median milliseconds of fn over do_bench's repetitions."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _check(name: str, got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> str:
    """Compare got with an fp32 reference; record a failure; return an error summary."""
    rtol, atol = TOL[dtype]
    g = got.float()
    r = ref.float()
    diff = (g - r).abs()
    max_err = diff.max().item() if diff.numel() else 0.0
    ratio = (diff / (atol + rtol * r.abs())).max().item() if diff.numel() else 0.0
    ok = bool(torch.isfinite(g).all().item()) and ratio <= 1.0
    if not ok:
        FAILURES.append(f"{name}: max_err={max_err:.3g} (tolerance ratio {ratio:.3g})")
    return f"max_err={max_err:9.3g} {'ok ' if ok else 'FAIL'}"


def _operands(m, n, k, trans_a, trans_b, dtype, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    a = torch.randn(*((k, m) if trans_a else (m, k)), device=DEVICE, generator=g)
    b = torch.randn(*((n, k) if trans_b else (k, n)), device=DEVICE, generator=g) / k**0.5
    return a.to(dtype), b.to(dtype)


def check_silu() -> None:
    print("== SiluAndMul (bytes = 3*M*N*elem) ==")
    for dtype in DTYPES:
        for M, N in SILU_SHAPES:
            name = f"silu {str(dtype)[6:]} M={M} N={N}"
            try:
                x = torch.randn(M, 2 * N, device=DEVICE).to(dtype)
                out = torch.empty(M, N, device=DEVICE, dtype=dtype)
                silu_and_mul_triton(x, out)
                ref = silu_and_mul_reference(x.float())
                err = _check(name, out, ref, dtype)
                # Non-contiguous rows: a slice of a wider tensor.
                xs = torch.randn(M, 2 * N + 64, device=DEVICE).to(dtype)[:, 32 : 32 + 2 * N]
                silu_and_mul_triton(xs, out)
                _check(name + " (strided x)", out, silu_and_mul_reference(xs.float()), dtype)

                nbytes = 3 * M * N * x.element_size()
                t_tri = _bench(lambda: silu_and_mul_triton(x, out))
                t_eager = _bench(lambda: F.silu(x[:, :N]) * x[:, N:])
                try:
                    compiled = torch.compile(lambda y: F.silu(y[:, :N]) * y[:, N:])
                    compiled(x)
                    t_comp = _bench(lambda: compiled(x))
                    comp = f"{t_comp * 1e3:8.1f} us {nbytes / t_comp / 1e9:5.2f} TB/s"
                except Exception as e:  # noqa: BLE001 - report and go on
                    comp = f"failed ({type(e).__name__})"
                block, warps = silu_and_mul_block(M, N)
                print(
                    f"{name:32s} {err} | triton {t_tri * 1e3:8.1f} us {nbytes / t_tri / 1e9:5.2f} TB/s"
                    f" (BLOCK={block}, warps={warps}) | eager {t_eager * 1e3:8.1f} us"
                    f" {nbytes / t_eager / 1e9:5.2f} TB/s | compile {comp}"
                )
            except Exception:  # noqa: BLE001
                FAILURES.append(f"{name}: exception")
                traceback.print_exc()


def _gemm_line(fn, label, M, N, K, trans_a, trans_b, dtype, config_for, decode=False) -> None:
    layout = ("T" if trans_a else "N") + ("T" if trans_b else "N")
    name = f"{label} {str(dtype)[6:]} {M}x{N}x{K} {layout}"
    try:
        a, b = _operands(M, N, K, trans_a, trans_b, dtype)
        out = torch.empty(M, N, device=DEVICE, dtype=dtype)
        cfg = config_for(M, N, K, dtype, _is_aligned(a) and _is_aligned(b))
        fn(a, b, trans_a, trans_b, out)
        ref = gemm_reference(a.float(), b.float(), trans_a, trans_b)
        err = _check(name, out, ref, dtype)
        torch_err = (gemm_reference(a, b, trans_a, trans_b).float() - ref).abs().max().item()
        A = a.t() if trans_a else a
        B = b.t() if trans_b else b
        t_tri = _bench(lambda: fn(a, b, trans_a, trans_b, out))
        t_torch = _bench(lambda: torch.matmul(A, B))
        flops = 2 * M * N * K
        if decode:
            nbytes = (M * K + K * N + M * N) * a.element_size()
            rate = lambda t: f"{nbytes / t / 1e9:5.2f} TB/s"  # noqa: E731
        else:
            rate = lambda t: f"{flops / t / 1e9:6.1f} TFLOP/s"  # noqa: E731
        print(
            f"{name:36s} {err} (torch.matmul {torch_err:.3g}) | triton {t_tri * 1e3:8.1f} us"
            f" {rate(t_tri)} {tuple(cfg)} | torch {t_torch * 1e3:8.1f} us {rate(t_torch)}"
        )
    except Exception:  # noqa: BLE001
        FAILURES.append(f"{name}: exception")
        traceback.print_exc()


def check_gemm() -> None:
    print("== GEMM (TFLOP/s = 2*M*N*K / t) ==")
    for dtype in DTYPES:
        for M, N, K, ta, tb in GEMM_SHAPES:
            _gemm_line(gemm_triton, "gemm", M, N, K, ta, tb, dtype, gemm_config_for)
    print("== decode (TB/s = operand + output bytes / t) ==")
    for dtype in DTYPES:
        for M, N, K, ta, tb in DECODE_SHAPES:
            _gemm_line(gemv_triton, "gemv", M, N, K, ta, tb, dtype, gemv_config_for, True)
            _gemm_line(gemm_triton, "gemm", M, N, K, ta, tb, dtype, gemm_config_for, True)


def check_sweep() -> None:
    print("== correctness sweep: all layouts, ragged sizes ==")
    n_ok = 0
    for dtype in DTYPES:
        for M, N, K in SWEEP_SHAPES:
            for ta in (False, True):
                for tb in (False, True):
                    fns = [("gemm", gemm_triton)] + ([("gemv", gemv_triton)] if M <= 16 else [])
                    for label, fn in fns:
                        name = f"sweep {label} {str(dtype)[6:]} {M}x{N}x{K} ta={ta} tb={tb}"
                        try:
                            a, b = _operands(M, N, K, ta, tb, dtype, seed=1)
                            out = torch.empty(M, N, device=DEVICE, dtype=dtype)
                            fn(a, b, ta, tb, out)
                            before = len(FAILURES)
                            _check(name, out, gemm_reference(a.float(), b.float(), ta, tb), dtype)
                            n_ok += len(FAILURES) == before
                        except Exception:  # noqa: BLE001
                            FAILURES.append(f"{name}: exception")
                            traceback.print_exc()
        for M, N in [(3, 7), (17, 33), (5, 1000)]:
            x = torch.randn(M, 2 * N, device=DEVICE).to(dtype)
            out = torch.empty(M, N, device=DEVICE, dtype=dtype)
            before = len(FAILURES)
            _check(f"sweep silu {dtype} {M}x{N}", silu_and_mul_triton(x, out),
                   silu_and_mul_reference(x.float()), dtype)
            n_ok += len(FAILURES) == before
    print(f"sweep: {n_ok} checks passed")


def sweep_configs() -> None:
    """Time every gemm_configs() entry on the large shapes (offline autotuning aid)."""
    print("== config sweep (bf16) ==")
    dtype = torch.bfloat16
    for M, N, K, ta, tb in GEMM_SHAPES + [(s[0], s[1], s[2], s[3], s[4]) for s in DECODE_SHAPES]:
        a, b = _operands(M, N, K, ta, tb, dtype)
        out = torch.empty(M, N, device=DEVICE, dtype=dtype)
        results = []
        for cfg in gemm_configs():
            try:
                gemm_triton(a, b, ta, tb, out, config=cfg)
                t = _bench(lambda: gemm_triton(a, b, ta, tb, out, config=cfg))
                results.append((t, cfg))
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory
                print(f"  {tuple(cfg)}: {type(e).__name__}")
        results.sort()
        print(f"{M}x{N}x{K} ta={ta} tb={tb}: table picks {tuple(gemm_config_for(M, N, K, dtype))}")
        for t, cfg in results[:5]:
            print(f"  {tuple(cfg)}: {t * 1e3:8.1f} us {2 * M * N * K / t / 1e9:6.1f} TFLOP/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time every gemm_configs() entry")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("TRITON_INTERPRET=1 is set: unset it to run on the GPU", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("CUDA is not available", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, triton {triton.__version__}")
    check_sweep()
    check_silu()
    check_gemm()
    if args.sweep:
        sweep_configs()
    if FAILURES:
        print(f"\n{len(FAILURES)} correctness failure(s):")
        for f in FAILURES:
            print("  " + f)
        return 1
    print("\nall correctness checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
