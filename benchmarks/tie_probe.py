"""Side-by-side timings of bench rows where opspec trails torch.compile by a few percent,
with launch variants of the kernels those rows take, on a CUDA device.

    python benchmarks/tie_probe.py [CASE ...]

Cases: ``softmax-1k-bf16``, ``softmax-1k-fp16``, ``logsoftmax-1k-bf16`` (the [32, 1024,
1024] attention-score rows) and ``logsoftmax-2k-fp32`` ([32, 2048, 2048]): the softmax
``rows`` kernel's rows a program, warps and unmasked ``even`` form; ``amax-tensor-bf16``
(the [32768, 8192] whole-tensor amax), ``amax-dsv3tensor-bf16`` ([8192, 7168]),
``sum-full-bf16`` / ``-fp32`` ([8192, 14336], every axis) and ``mean-logits-bf16`` /
``-fp32`` ([2048, 128256] rows): the row reduction's tile, bytes a thread and split
programs per SM; ``rmsnorm-kva-bf16`` (DeepSeek-V3's [16384, 512] kv-a RMSNorm): the
norms' register kernel's rows a program and warps; ``moe-qwen3gateup-bf16`` (the MoE grouped
GEMM's Qwen3-30B gate-up row, tight packing): the segments tiles by pointer loads or
through TMA descriptors, tiles and stages. Each case runs beside
torch eager and torch.compile of the same call and a device-to-device copy of the same
bytes; every variant's output is compared with torch's. Timing as ``opspec bench``
(sweep_pool.bench: L2 flushed before each sample). Not part of the package.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from opspec.kernels import norm as NK
from opspec.kernels import reduction as RK
from opspec.kernels import softmax as SK

from sweep_pool import time_beside_copy  # beside this script

CASES = ["softmax-1k-bf16", "softmax-1k-fp16", "logsoftmax-1k-bf16", "logsoftmax-2k-fp32",
         "amax-tensor-bf16", "amax-dsv3tensor-bf16", "sum-full-bf16", "sum-full-fp32",
         "mean-logits-bf16", "mean-logits-fp32", "rmsnorm-kva-bf16", "moe-qwen3gateup-bf16"]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _softmax_case(name, dt):
    log = name.startswith("log")
    n = 2048 if "-2k-" in name else 1024
    x = torch.randn(32 * n, n, device="cuda", dtype=dt) * 3
    out = torch.empty_like(x)
    fn = torch.log_softmax if log else torch.softmax
    comp = torch.compile(lambda v: fn(v, -1), fullgraph=True, dynamic=False)
    fns = {"opspec": lambda: SK.softmax_triton(x, -1, out, log=log),
           "eager": lambda: fn(x, -1), "compile": lambda: comp(x)}
    M, N = x.shape
    # (rows a program, warps, even)
    variants = ((8, 8, False), (8, 8, True), (1, 1, True), (2, 2, True), (4, 4, True),
                (2, 1, True), (4, 2, True), (16, 16, True), (1, 1, False))
    if n == 2048:
        variants = ((4, 8, False), (4, 8, True), (1, 2, True), (2, 4, True), (1, 4, True),
                    (2, 2, True), (8, 16, True))
    for rows, warps, even in variants:
        plan = SK.SoftmaxPlan("rows", N, warps, M // rows, rows=rows, even=even)
        fns[f"rows{rows}/{warps}w{'/even' if even else ''}"] = (
            lambda plan=plan: SK.softmax_triton(x, -1, out, log=log, plan=plan))
    ref = fn(x.float(), -1).to(dt)
    return 2 * x.numel() * x.element_size(), fns, ref, out


#: Reduction cases: (reduction, shape, dim (None: every axis)).
_REDUCTIONS = {
    "amax-tensor": ("amax", (32768, 8192), None),
    "amax-dsv3tensor": ("amax", (8192, 7168), None),
    "sum-full": ("sum", (8192, 14336), None),
    "mean-logits": ("mean", (2048, 128256), -1),
}


def _reduction_case(name, dt):
    what, shape, dim = _REDUCTIONS[name.rsplit("-", 1)[0]]
    x = torch.randn(shape, device="cuda", dtype=dt)
    axes = tuple(range(x.dim())) if dim is None else (dim % x.dim(),)
    fn = getattr(torch, what)
    call = (lambda v: fn(v)) if dim is None else (lambda v: fn(v, dim))
    ref = call(x.float()).to(dt)
    out = torch.empty(ref.shape, device="cuda", dtype=dt)
    fns = {"opspec": lambda: RK.reduction_triton(x, out, axes, what), "eager": lambda: call(x)}
    comp = torch.compile(call, fullgraph=True, dynamic=False)
    fns["compile"] = lambda: comp(x)
    W = RK.ROW
    # (tile bytes, bytes a thread, split programs per SM, prefetch)
    for tb, bpt, ps, pf in ((8192, 32, 16, False), (4096, 16, 8, False), (4096, 16, 16, False),
                            (8192, 32, 8, False), (16384, 64, 4, True), (8192, 16, 8, False)):
        tun = RK.Tuning(W._replace(tile_bytes=tb, bytes_per_thread=bpt,
                                   split_programs_per_sm=ps, prefetch=pf), RK.COL)
        fns[f"tile{tb // 1024}K/{bpt}B/{ps}ps{'/pf' if pf else ''}"] = (
            lambda tun=tun: RK.reduction_triton(x, out, axes, what, tuning=tun))
    return x.numel() * x.element_size() + out.numel() * out.element_size(), fns, ref, out


def _rmsnorm_case(name, dt):
    # DeepSeek-V3's kv-a norm: [16384, 512] rows held in registers, rows a program and warps
    x = torch.randn(16384, 512, device="cuda", dtype=dt)
    w = torch.randn(512, device="cuda", dtype=dt)
    out = torch.empty_like(x)
    fns = {"opspec": lambda: NK.norm_fwd_triton(x, out, 512, 1e-6, rms=True, weight=w),
           "eager": lambda: F.rms_norm(x, (512,), w, 1e-6)}
    comp = torch.compile(lambda v: F.rms_norm(v, (512,), w, 1e-6), fullgraph=True,
                         dynamic=False)
    fns["compile"] = lambda: comp(x)
    for rows, warps in ((8, 8), (1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4), (16, 8)):
        cfg = NK.NormConfig(False, rows, 1, 512, warps)
        fns[f"rows{rows}/{warps}w"] = (
            lambda cfg=cfg: NK.norm_fwd_triton(x, out, 512, 1e-6, rms=True, weight=w,
                                               config=cfg))
    ref = F.rms_norm(x.float(), (512,), w.float(), 1e-6).to(dt)
    return 2 * x.numel() * x.element_size() + w.numel() * w.element_size(), fns, ref, out


def _moe_case(name, dt):
    # Qwen3-30B's gate-up GEMM (tight packing with expert ends, silu_and_mul): the segments
    # tiles with pointer loads (the table before) or through TMA descriptors
    from opspec.kernels import moe as MK
    from opspec.ops import MoeGroupedGemmFwdOp
    from opspec.ops.bench_baselines import BASELINES
    from opspec.ops.workloads import cases
    case = next(c for c in cases(MoeGroupedGemmFwdOp) if c.id == "qwen3-30b-gate-up-bfloat16")
    op = case.construct(MoeGroupedGemmFwdOp)
    x, w, meta = case.inputs(torch.device("cuda"))
    eager = BASELINES["MoeGroupedGemmFwdOp"]["eager"](op)
    comp = torch.compile(eager, fullgraph=True, dynamic=False)
    ref = eager(x, w, meta)
    out = torch.empty_like(ref)
    call = lambda **kw: lambda: MK.moe_grouped_gemm_triton(  # noqa: E731
        x, w, meta, out, "contiguous", "physical_psum", 1, "silu_and_mul", **kw)
    fns = {"opspec": call(), "eager": lambda: eager(x, w, meta),
           "compile": lambda: comp(x, w, meta), "segments pointer": call(tma=False)}
    C = MK.MoeConfig
    for cfg in (C(128, 128, 64, 8, 8, 4), C(128, 128, 64, 8, 8, 3), C(64, 256, 64, 8, 8, 3),
                C(128, 128, 64, 8, 8, 2), C(64, 128, 64, 8, 4, 4), C(128, 128, 128, 8, 8, 2)):
        fns[f"segments tma {tuple(cfg[:6])}"] = call(config=cfg, tma=True)
    op(x, w, meta)
    return op.eval_roofline()[1], fns, ref, out


def main(argv):
    names = argv or CASES
    for name in names:
        dt = _DTYPES[name.rsplit("-", 1)[1]]
        case = (_softmax_case if "softmax" in name else _rmsnorm_case if "rmsnorm" in name
                else _moe_case if name.startswith("moe") else _reduction_case)
        nbytes, fns, ref, out = case(name, dt)
        time_beside_copy(name, nbytes, fns, ref, out, returning=("eager", "compile"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
