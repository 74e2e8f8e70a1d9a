"""Chains of opspec ops run back to back, as a decode step runs them, timed with overlapped
launches (opspec.kernels.pdl) off and on, on a CUDA device.

    python benchmarks/chain_probe.py [CHAIN ...] [--rounds N] [--layers L] [--json PATH]
    python benchmarks/chain_probe.py --smoke     # tiny chains through the interpreter (CPU)

The switch (``OPSPEC_PDL``) is read when opspec is imported, so the probe runs itself in
child processes, alternating off and on ``--rounds`` times. Each child builds every chain
from seeded inputs and runs it once eagerly (the parent checks that both settings give the
same output to the bit), captures ``L`` repetitions of it into one CUDA graph (as a serving
stack replays its decode step) and times replays with CUDA events. It reports the median
time a chain over the children of each setting and, beside it, the sum of the chain's ops
each captured and timed alone (plain launches), the time there is to save from. The
weights are larger than the L2 (Llama-3-8B's projections), so each layer streams them from
HBM as a decode step does.

Chains (bfloat16):

- ``llama3-8b-layer-T``: a Llama-3-8B decoder layer at T tokens of decode (one query each,
  1024 cached keys a sequence): FusedAddRMSNorm, the qkv GEMM, RoPE, varlen GQA attention,
  the o GEMM, FusedAddRMSNorm, the gate-up GEMM, SiluAndMul, the down GEMM.
- ``llama3-8b-w4a16-mlp-T``: RMSNorm, the int4 gate-up GEMM, SiluAndMul, the int4 down GEMM,
  the residual add.
Not part of the package.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

DEV = "cpu" if SMOKE else "cuda"
DT = torch.bfloat16
CTX = 16 if SMOKE else 1024
# Llama-3-8B: hidden, heads, kv heads, head size, intermediate
DIMS = (64, 4, 2, 16, 96) if SMOKE else (4096, 32, 8, 128, 14336)
CHAINS = ("llama3-8b-layer-1", "llama3-8b-layer-16", "llama3-8b-w4a16-mlp-1",
          "llama3-8b-w4a16-mlp-16")


def _rand(*shape, scale=1.0, dtype=DT):
    return (torch.randn(*shape, device=DEV) * scale).to(dtype)


def _layer(T: int):
    """(inputs, [(name, step)]) of a decoder layer; each step reads and writes ``s``."""
    from opspec.ops import (FusedAddRMSNormFwdOp, GemmFwdOp, GroupedQueryAttentionVarlenFwdOp,
                            RotaryEmbeddingFwdOp, SiluAndMulFwdOp)
    D, H, H_kv, hd, I = DIMS
    w = {"qkv": _rand((H + 2 * H_kv) * hd, D, scale=D ** -0.5),
         "o": _rand(D, H * hd, scale=D ** -0.5),
         "gu": _rand(2 * I, D, scale=D ** -0.5), "down": _rand(D, I, scale=I ** -0.5),
         "n1": _rand(D).abs() + 0.5, "n2": _rand(D).abs() + 0.5}
    k_cache = _rand(T * CTX, H_kv, hd)
    v_cache = _rand(T * CTX, H_kv, hd)
    cu_q = torch.arange(T + 1, device=DEV, dtype=torch.int32)
    cu_k = cu_q * CTX
    cache = _rand(2 * CTX, hd)
    pos = torch.full((T,), CTX - 1, device=DEV, dtype=torch.int64)
    norm, gemm = FusedAddRMSNormFwdOp(1e-5), GemmFwdOp(trans_b=True)
    rope = RotaryEmbeddingFwdOp(hd, True)
    attn = GroupedQueryAttentionVarlenFwdOp(1, CTX)
    act = SiluAndMulFwdOp()
    s = {"x": _rand(T, D), "res": _rand(T, D)}

    def qkv(s):
        s["qkv"] = gemm(s["x"], w["qkv"])
        s["q"] = s["qkv"][:, :H * hd].contiguous()
        s["k"] = s["qkv"][:, H * hd:(H + H_kv) * hd].contiguous()

    def attention(s):
        s["a"] = attn(s["q"].view(T, H, hd), k_cache, v_cache, cu_q, cu_k).view(T, H * hd)

    steps = [("norm", lambda s: norm(s["x"], s["res"], w["n1"])),
             ("qkv", qkv),
             ("rope", lambda s: rope(pos, s["q"], s["k"], cache)),
             ("attention", attention),
             ("o", lambda s: s.__setitem__("x", gemm(s["a"], w["o"]))),
             ("norm2", lambda s: norm(s["x"], s["res"], w["n2"])),
             ("gate_up", lambda s: s.__setitem__("gu", gemm(s["x"], w["gu"]))),
             ("silu_and_mul", lambda s: s.__setitem__("h", act(s["gu"]))),
             ("down", lambda s: s.__setitem__("x", gemm(s["h"], w["down"])))]
    return s, steps


def _w4a16_mlp(T: int):
    from opspec.kernels.quant_gemm import quantize_int4
    from opspec.ops import AddFwdOp, GemmW4A16FwdOp, RMSNormFwdOp, SiluAndMulFwdOp
    D, _, _, _, I = DIMS
    gs = 16 if SMOKE else 128
    gu = quantize_int4(_rand(2 * I, D, scale=D ** -0.5), gs)
    down = quantize_int4(_rand(D, I, scale=I ** -0.5), gs)
    norm, q, act, add = RMSNormFwdOp([D], 1e-5), GemmW4A16FwdOp(gs), SiluAndMulFwdOp(), AddFwdOp()
    wn = _rand(D).abs() + 0.5
    s = {"x": _rand(T, D), "res": _rand(T, D)}
    steps = [("norm", lambda s: s.__setitem__("n", norm(s["x"], wn))),
             ("gate_up", lambda s: s.__setitem__("gu", q(s["n"], *gu))),
             ("silu_and_mul", lambda s: s.__setitem__("h", act(s["gu"]))),
             ("down", lambda s: s.__setitem__("d", q(s["h"], *down))),
             ("add", lambda s: s.__setitem__("x", add(s["d"], s["res"])))]
    return s, steps


def build(name: str):
    kind, T = name.rsplit("-", 1)
    T = int(T) if not SMOKE else min(int(T), 2)
    return (_layer if kind == "llama3-8b-layer" else _w4a16_mlp)(T)


def _graph_time(fn, layers: int, replays: int = 20) -> float:
    """Device time of one ``fn()`` in microseconds: ``layers`` calls captured into one CUDA
    graph, the median over ``replays`` timed replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(layers):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / layers)
    return statistics.median(times)


def child(names, layers: int) -> dict:
    from opspec.kernels import pdl
    out = {"pdl": pdl.overlap_supported(torch.device(DEV)), "chains": {}}
    for name in names:
        torch.manual_seed(0)
        s, steps = build(name)
        start = dict(s)

        def run(s=s, steps=steps):
            for _, step in steps:
                step(s)
        run()
        result = s["x"].float().cpu()
        out["chains"][name] = {"steps": [n for n, _ in steps], "out": result.tolist()}
        if SMOKE:
            continue
        s.update(start)
        chain_us = _graph_time(run, layers)
        alone = {}
        for n, step in steps:
            alone[n] = _graph_time(lambda step=step: step(s), layers)
        out["chains"][name].update(chain_us=chain_us, alone_us=alone,
                                   sum_alone_us=sum(alone.values()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chains", nargs="*", default=list(CHAINS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.chains, args.layers)))
        return
    runs = {"0": [], "1": []}
    for r in range(1 if SMOKE else args.rounds):
        for setting in ("0", "1"):
            env = dict(os.environ, OPSPEC_PDL=setting)
            cmd = [sys.executable, __file__, *args.chains, "--layers", str(args.layers), "--child"]
            if SMOKE:
                cmd.append("--smoke")
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if res.returncode:
                sys.exit(f"child OPSPEC_PDL={setting} failed:\n{res.stderr}")
            runs[setting].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} OPSPEC_PDL={setting} done", file=sys.stderr)
    off, on = runs["0"][0]["chains"], runs["1"][0]["chains"]
    for name in off:
        a, b = torch.tensor(off[name].pop("out")), torch.tensor(on[name].pop("out"))
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        print(f"{name}: {' -> '.join(off[name]['steps'])}; output {tuple(a.shape)}, largest "
              f"difference overlap on / off {diff:.3g}", file=sys.stderr)
        if not torch.isfinite(a).all() or diff > 0:
            sys.exit(f"{name}: the chain's output differs with the overlap on (or is not "
                     f"finite): largest difference {diff}")
    for v in runs.values():
        for r in v[1:]:
            for c in r["chains"].values():
                c.pop("out")
    if SMOKE:
        return
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "layers": args.layers, "rounds": args.rounds, "chains": {}}
    print(f"{'chain':28s} {'ops alone':>10s} {'plain':>9s} {'overlap':>9s} {'saved':>7s}")
    for name in args.chains:
        med = {k: statistics.median(r["chains"][name]["chain_us"] for r in v)
               for k, v in runs.items()}
        alone = statistics.median(r["chains"][name]["sum_alone_us"] for r in runs["0"])
        report["chains"][name] = {"plain_us": med["0"], "overlap_us": med["1"],
                                  "sum_alone_plain_us": alone,
                                  "runs": {k: [r["chains"][name] for r in v]
                                           for k, v in runs.items()}}
        print(f"{name:28s} {alone:10.1f} {med['0']:9.1f} {med['1']:9.1f} "
              f"{1 - med['1'] / med['0']:7.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
