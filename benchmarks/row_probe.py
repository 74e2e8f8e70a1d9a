"""Probes behind the long-row tables of the softmax and norm kernels, on a CUDA device.

    python benchmarks/row_probe.py time [CASE ...]   # device time and TB/s of each variant
    python benchmarks/row_probe.py launch CASE [VARIANT]   # three launches, for ncu:
        ncu --clock-control none -k regex:looped -s 1 -c 1 \
            python benchmarks/row_probe.py launch softmax-vocab-bf16

The cases are the vocabulary softmax rows and the LayerNorm rows of RESULTS.md that sit
under 3.8 TB/s. `time` runs each beside a device-to-device copy of the same bytes, the
table's launch (`opspec`) first, then launch variants of the same kernels: the looped
softmax kernel's chunk, warps, programs per SM and register cap, and its staggered start
(``stagger{steps}x{fraction}``: program p starts ``p % steps`` times that fraction of a row
late; ``stagger0x0.0`` all at once), and the table's looped plan on a grid of a
quarter to all of the SMs (``looped/{per SM}ps/{programs}p``); the coop kernel's chunk,
warps and register cap (float32 logits; chunk and warps also for 16-bit logits to float32); the norm stream kernel's chunk, warps and programs per SM, and
the norm table with its rows kernel's first wave started in steps (``rows-stagger...``; the
rows kernel only where it takes the row, so on float32 rows of 32768).
Every variant's output is compared with torch. Case names: `softmax-vocab-bf16`,
`logsoftmax-vocab-bf16`, `logsoftmax-vocab-bf16fp32` (float32 results), `softmax-vocab-fp32`,
`softmax-ade20k-DTYPE` / `logsoftmax-ade20k-DTYPE` (the strided tile kernel over ADE20K's
150 classes: the table's strips and narrower ones, at 1 or 2 warps),
`softmax-decode-RxN-DTYPE` / `logsoftmax-decode-RxN-DTYPE` (decode logits: the split plan
against split and coop with other chunks; DTYPE bf16, fp16, fp32 or bf16fp32),
`layernorm-32k-bf16` or
`layernorm-RxN-DTYPE` (bf16, fp16, fp32). Not part of the package.
"""

from __future__ import annotations

import dataclasses
import sys

import torch
import triton

from opspec.kernels import norm as NK
from opspec.kernels import softmax as SK

from sweep_pool import time_beside_copy  # beside this script

CASES = ["softmax-vocab-bf16", "logsoftmax-vocab-bf16", "softmax-vocab-fp32",
         "layernorm-32k-bf16", "layernorm-32k-fp32", "layernorm-8192x7168-bf16",
         "layernorm-8192x3584-bf16", "layernorm-8192x3584-fp32"]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def looped_softmax(x, out, log, block, warps, per_sm, maxnreg=0):
    """The looped kernel on [M, N] with a chosen chunk, warps, grid and register cap."""
    M, N = x.shape
    vec = 16 // x.element_size()
    kw = {"maxnreg": maxnreg} if maxnreg else {}
    SK._looped_kernel[(min(M, per_sm * _sms()),)](
        x, out, M, N, N, 1, N, 1, BLOCK_R=block // vec, VEC=vec, LOG=log, USE_INT64=False,
        FFMA_LIMIT=SK.FFMA_LIMIT[out.dtype], num_warps=warps, **kw)
    return out


def coop_softmax(x, out, log, block, warps, maxnreg):
    """The coop kernel on [M, N] with a chosen chunk, warps and register cap."""
    M, N = x.shape
    G = triton.cdiv(N, block)
    cnt = torch.zeros(1 + M, dtype=torch.int32, device=x.device)
    ws = torch.empty(2 * M * G, dtype=torch.float32, device=x.device)
    SK._coop_kernel[(M * G,)](x, out, ws, cnt, M, N, G, 1 << 16, N, 1, N, 1, BLOCK=block,
                              FB=min(block, 1024), G_POW2=triton.next_power_of_2(G), LOG=log,
                              USE_INT64=False, num_warps=warps, maxnreg=maxnreg)
    return out


def _softmax_case(name, dt):
    # "-bf16fp32": bf16 logits, float32 results (torch's dtype=), 2048 rows
    out_dt = torch.float32 if name.endswith("fp32") else dt
    if dt == torch.float32:
        shape = (1024, 151936)
    else:
        shape = (4096, 128256) if out_dt == dt else (2048, 128256)
    x = torch.randn(shape, device="cuda", dtype=dt) * 3
    out = torch.empty(shape, device="cuda", dtype=out_dt)
    log = name.startswith("log")
    fns = {"opspec": lambda: SK.softmax_triton(x, -1, out, log=log)}
    M, N = shape
    if x.dtype != torch.float32:
        # (chunk bytes, warps, programs per SM, register cap): the table before 64 KiB
        # chunks at 32 warps, and its neighbours
        for kb, wp, ps, cap in ((32, 16, 2, 0), (32, 32, 1, 0), (16, 32, 1, 0), (16, 16, 1, 0),
                                (16, 16, 2, 0), (32, 16, 2, 64), (64, 32, 1, 0)):
            blk = kb * 1024 // x.element_size()
            fns[f"looped{kb}K/{wp}w/{ps}ps/r{cap}"] = (
                lambda blk=blk, wp=wp, ps=ps, cap=cap:
                looped_softmax(x, out, log, blk, wp, ps, cap))
        table = SK.softmax_plan(M, N, 1, x.element_size(), sm_count=_sms())
        for steps, frac in ((0, 0.0), (2, 0.25), (4, 0.125), (8, 0.0625)):
            plan = dataclasses.replace(table, stagger_steps=steps, stagger=frac)
            fns[f"stagger{steps}x{frac}"] = (
                lambda plan=plan: SK.softmax_triton(x, -1, out, log=log, plan=plan))
    if x.dtype == torch.float32 or out_dt != dt:
        # coop by chunk and warps (16-bit logits to float32 results too)
        for blk, wp in ((16384, 16), (16384, 32), (8192, 16), (8192, 8), (4096, 8), (4096, 4)):
            ch = triton.cdiv(N, blk)
            plan = SK.SoftmaxPlan("coop", blk, wp, M * ch, chunks=ch)
            fns[f"coop{blk}/{wp}w"] = (
                lambda plan=plan: SK.softmax_triton(x, -1, out, log=log, plan=plan))
    # looped on part of the SMs (the table's plan otherwise, its staggered start included),
    # so that the rows in flight stay in L2 for the second pass: programs per SM
    looped = SK.ROW_TUNING._replace(coop_min_in_bytes=8)
    for ps in (0.25, 0.375, 0.5, 0.625, 0.75, 1.0):
        plan = SK.softmax_plan(M, N, 1, x.element_size(), sm_count=_sms(),
                               tuning=looped._replace(loop_programs_per_sm=ps))
        fns[f"looped/{ps}ps/{plan.grid}p"] = (
            lambda plan=plan: SK.softmax_triton(x, -1, out, log=log, plan=plan))
    if x.dtype == torch.float32:
        fns["looped64K/32w/1ps"] = lambda: looped_softmax(x, out, log, 16384, 32, 1)
        # coop under a register cap (more programs an SM): (chunk, warps, maxnreg)
        for blk, wp, cap in ((16384, 16, 64), (8192, 8, 64), (8192, 16, 64), (4096, 4, 64),
                             (4096, 8, 64), (2048, 2, 64), (2048, 4, 64), (4096, 4, 48)):
            fns[f"coop{blk}/{wp}w/r{cap}"] = (
                lambda blk=blk, wp=wp, cap=cap: coop_softmax(x, out, log, blk, wp, cap))
    ref = (torch.log_softmax if log else torch.softmax)(x.float(), -1).to(out_dt)
    return x.numel() * (x.element_size() + out.element_size()), fns, ref, out


def _decode_case(name, dt):
    # "softmax-decode-RxN-bf16[fp32]": a decode step's logits, too few rows for the
    # persistent kernels: the table's split plan against split and coop with other chunks
    out_dt = torch.float32 if name.endswith("fp32") else dt
    M, N = map(int, name.split("-")[2].split("x"))
    x = torch.randn(M, N, device="cuda", dtype=dt) * 3
    out = torch.empty(M, N, device="cuda", dtype=out_dt)
    log = name.startswith("log")
    fns = {"opspec": lambda: SK.softmax_triton(x, -1, out, log=log)}
    table = SK.softmax_plan(M, N, 1, x.element_size(), sm_count=_sms())
    print(f"{name}: table {table}")
    for kind, blk, wp in (("split", 4096, 8), ("split", 8192, 16), ("split", 16384, 16),
                          ("coop", 2048, 4), ("coop", 4096, 4), ("coop", 4096, 8),
                          ("coop", 8192, 8), ("coop", 8192, 16), ("coop", 16384, 16)):
        ch = triton.cdiv(N, blk)
        plan = SK.SoftmaxPlan(kind, blk, wp, M * ch, chunks=ch)
        fns[f"{kind}{blk}/{wp}w"] = (
            lambda plan=plan: SK.softmax_triton(x, -1, out, log=log, plan=plan))
    ref = (torch.log_softmax if log else torch.softmax)(x.float(), -1).to(out_dt)
    return x.numel() * (x.element_size() + out.element_size()), fns, ref, out


def _layernorm_case(name, dt):
    size = name.split("-")[1]
    M, N = (2048, 32768) if size == "32k" else map(int, size.split("x"))
    x = torch.randn(M, N, device="cuda", dtype=dt)
    w = torch.randn(N, device="cuda", dtype=dt)
    b = torch.randn(N, device="cuda", dtype=dt)
    out = torch.empty_like(x)
    fns = {"opspec": lambda: NK.layer_norm_triton(x, (N,), w, b, 1e-5, out)}
    # the stream kernel: (chunk bytes, warps, programs per SM)
    for kb, wp, ps in ((32, 32, 1), (16, 32, 1), (16, 16, 2), (32, 16, 2), (64, 32, 1),
                       (8, 8, 4)):
        blk = min(kb * 1024 // x.element_size(), triton.next_power_of_2(N))
        cfg = NK.NormConfig(True, 1, 1, blk, wp, 0, min(M, ps * _sms()))
        fns[f"stream{kb}K/{wp}w/{ps}ps"] = (
            lambda cfg=cfg: NK.norm_fwd_triton(x, out, N, 1e-5, rms=False, weight=w, bias=b,
                                               config=cfg))
    # the rows kernel's first wave started in steps (NormTuning.rows_stagger*)
    for steps, frac in ((0, 0.0), (2, 0.25), (4, 0.125), (4, 0.25), (8, 0.125)):
        tun = NK.TUNING._replace(rows_stagger_steps=steps, rows_stagger=frac)
        fns[f"rows-stagger{steps}x{frac}"] = (
            lambda tun=tun: NK.norm_fwd_triton(x, out, N, 1e-5, rms=False, weight=w, bias=b,
                                               tuning=tun))
    ref = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5).to(dt)
    return 2 * x.numel() * x.element_size(), fns, ref, out


def _strided_case(name, dt):
    # [16, 150, 128, 128] over dim 1 (ADE20K's classes): the strided tile kernel's plan, and
    # the same with narrower strips (32 or 64 bytes of each row a program) at 1 or 2 warps
    x = torch.randn((16, 150, 128, 128), device="cuda", dtype=dt) * 3
    out = torch.empty_like(x)
    log = name.startswith("log")
    inner = 128 * 128
    table = SK.softmax_plan(16, 150, inner, x.element_size(), sm_count=_sms())
    fns = {"opspec": lambda: SK.softmax_triton(x, 1, out, log=log)}
    for nbytes in (32, 64, 128):
        bi = nbytes // x.element_size()
        if (table.block + 32) * bi > 2 * 8192:
            continue
        for warps in (1, 2):
            plan = dataclasses.replace(table, block_inner=bi, num_warps=warps,
                                       grid=16 * triton.cdiv(inner, bi))
            fns[f"strided/{nbytes}B/{warps}w"] = (
                lambda plan=plan: SK.softmax_triton(x, 1, out, log=log, plan=plan))
    ref = (torch.log_softmax if log else torch.softmax)(x.float(), 1).to(dt)
    return 2 * x.numel() * x.element_size(), fns, ref, out


def _case(name):
    """(bytes moved, {variant: callable}, reference output, the output the callables write)"""
    dt = _DTYPES.get(name.rsplit("-", 1)[1].replace("bf16fp32", "bf16"))
    if dt is None:
        raise SystemExit(f"unknown dtype in case {name!r}")
    if name.startswith(("softmax-decode", "logsoftmax-decode")):
        return _decode_case(name, dt)
    if name.startswith(("softmax-ade20k", "logsoftmax-ade20k")):
        return _strided_case(name, dt)
    if name.startswith(("softmax-vocab", "logsoftmax-vocab")):
        return _softmax_case(name, dt)
    if name.startswith("layernorm-"):
        return _layernorm_case(name, dt)
    raise SystemExit(f"unknown case {name!r}")


def main(argv):
    cmd = argv[0] if argv else "time"
    names = argv[1:] or CASES
    if cmd == "launch":
        _, fns, ref, out = _case(names[0])
        fn = fns[names[1]] if len(names) > 1 else fns["opspec"]
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        print(f"{names[0]}: max error {(out.float() - ref.float()).abs().max().item():.3g}")
        return 0
    for name in names:
        nbytes, fns, ref, out = _case(name)
        time_beside_copy(name, nbytes, fns, ref, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
