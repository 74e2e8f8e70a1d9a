"""Probe behind the RoPE kernel's launch table (kernels/rope.py), on a CUDA device.

    python benchmarks/rope_probe.py [CASE ...]      # device time and TB/s of each variant
    python benchmarks/rope_probe.py --smoke         # tiny rows through the interpreter (CPU)

The cases are the RotaryEmbeddingFwdOp bench rows (RESULTS.md) of at least 4096 tokens. Each
runs beside a device-to-device copy of the same bytes: the library's launch (`opspec`)
first, then layouts of `kernels.rope._rope_rows_kernel` (a program takes BR rows of the
[T, H + H_kv] head rows, query and key heads alike) at several row counts and warps. Every
variant's output is compared with the torch reference. Not part of the package.
"""

from __future__ import annotations

import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

from opspec.kernels import rope as RK

from sweep_pool import bench  # beside this script

SMOKE = "--smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# name: (T, H, H_kv, head_size, rotary_dim, max_position, is_neox, layout, A, C)
CASES = {
    "llama3-8b-16k-bf16": (16384, 32, 8, 128, 128, 8192, True, "flat", "bf16", "bf16"),
    "llama3-8b-16k-fp16-c32": (16384, 32, 8, 128, 128, 8192, True, "flat", "fp16", "fp32"),
    "llama3-8b-4k-bf16-c32": (4096, 32, 8, 128, 128, 8192, True, "flat", "bf16", "fp32"),
    "llama3-8b-4k-fp32": (4096, 32, 8, 128, 128, 8192, True, "flat", "fp32", "fp32"),
    "llama3-70b-16k-bf16": (16384, 64, 8, 128, 128, 8192, True, "flat", "bf16", "bf16"),
    "qwen2.5-7b-8k-bf16": (8192, 28, 4, 128, 128, 32768, True, "flat", "bf16", "bf16"),
    "dsv3-mla-16k-bf16": (16384, 128, 1, 64, 64, 163840, False, "heads", "bf16", "bf16"),
    "dsv3-mla-16k-bf16-c32": (16384, 128, 1, 64, 64, 163840, False, "heads", "bf16", "fp32"),
    "gptj-6b-4k-fp16-c32": (4096, 16, 16, 256, 64, 2048, False, "flat", "fp16", "fp32"),
    "phi-2-4k-fp16": (4096, 32, 32, 80, 32, 2048, True, "flat", "fp16", "fp16"),
}
SMOKE_CASES = {
    "tiny-neox": (37, 6, 2, 16, 16, 64, True, "flat", "fp32", "fp32"),
    "tiny-gptj": (19, 5, 1, 12, 8, 32, False, "heads", "fp16", "fp32"),
}
# (rows a program, warps); None: the library's own choice
VARIANTS = [(8, 4), (16, 4), (32, 4), (64, 4), (128, 4), (32, 8), (64, 8)]


def _inputs(case):
    T, H, H_kv, hs, R, P, neox, layout, A, C = case
    g = torch.Generator(device="cpu").manual_seed(0)
    seqs = [T // 4] * 4 if T >= 16 else [T]
    pos = torch.cat([torch.arange(s) for s in seqs])
    pos = torch.cat([pos, torch.arange(T - pos.numel())]).to(DEV)
    shape_q = (T, H * hs) if layout == "flat" else (T, H, hs)
    shape_k = (T, H_kv * hs) if layout == "flat" else (T, H_kv, hs)
    q = torch.randn(shape_q, generator=g).to(DEV, _DT[A])
    k = torch.randn(shape_k, generator=g).to(DEV, _DT[A])
    ang = torch.rand(P, R // 2, generator=g) * 6.28
    cache = torch.cat([ang.cos(), ang.sin()], dim=1).to(DEV, _DT[C])
    return pos, q, k, cache


def _rows(pos, q, k, cache, hs, neox, br, warps, aligned=None) -> None:
    T, H, sq = RK._heads_layout(q, hs)
    _, H_kv, sk = RK._heads_layout(k, hs)
    RK._launch(pos, q, k, cache, neox, br, warps, T, (H, sq), (H_kv, sk), aligned)


def _bytes(case) -> int:
    T, H, H_kv, hs, R, P, neox, layout, A, C = case
    a, c = _DT[A].itemsize, _DT[C].itemsize
    return 2 * T * (H + H_kv) * R * a + T * R * c + T * 8


def run(names) -> None:
    cases = SMOKE_CASES if SMOKE else CASES
    for name in names or list(cases):
        case = cases[name]
        T, H, H_kv, hs, R, P, neox, layout, A, C = case
        pos, q0, k0, cache = _inputs(case)
        rq, rk = RK.rotary_embedding_reference(pos, q0, k0, cache, hs, neox)
        nbytes = _bytes(case)
        src = torch.empty(nbytes // 2, dtype=torch.int8, device=DEV)
        dst = torch.empty_like(src)
        copy_ms = bench(lambda: dst.copy_(src), SMOKE)
        print(f"{name}: {nbytes / 1e6:.1f} MB, copy {copy_ms * 1e3:.1f} us "
              f"({nbytes / copy_ms / 1e9:.2f} TB/s)", flush=True)
        plan = RK.rope_plan(T * (H + H_kv), R, q0.element_size())
        for var in [None, "unaligned"] + VARIANTS:
            q, k = q0.clone(), k0.clone()
            if var is None:
                fn = lambda: RK.rotary_embedding_triton(pos, q, k, cache, hs, neox)  # noqa: E731
                label = f"opspec {plan}"
            elif var == "unaligned":  # the same plan without the 16-byte row hint
                fn = lambda: _rows(pos, q, k, cache, hs, neox, *plan, aligned=1)  # noqa: E731
                label = f"opspec {plan} unaligned"
            else:
                br, warps = var
                fn = lambda: _rows(pos, q, k, cache, hs, neox, br, warps)  # noqa: E731
                label = f"rows BR={br} warps={warps}"
            try:
                fn()
            except Exception as e:  # a layout a kernel refuses
                print(f"  {label:34s} failed: {type(e).__name__}: {e}", flush=True)
                continue
            ok = (torch.allclose(q.float(), rq.float(), atol=2e-2, rtol=2e-2)
                  and torch.allclose(k.float(), rk.float(), atol=2e-2, rtol=2e-2))
            ms = bench(fn, SMOKE)
            print(f"  {label:34s} {ms * 1e3:8.1f} us {nbytes / ms / 1e9:6.2f} TB/s "
                  f"{'ok' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    run([a for a in sys.argv[1:] if not a.startswith("--")])
