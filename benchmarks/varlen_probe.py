"""Variants of the varlen attention kernel side by side on the bench's varlen rows, on a CUDA
device: the launcher's own choice, the same tile with pointer loads instead of TMA
descriptors, and a few others. Not part of the package.

    python benchmarks/varlen_probe.py [--rows LABEL,...] [--rounds N] [--json PATH]
    python benchmarks/varlen_probe.py --smoke    # tiny rows through the interpreter (CPU)

The rows are the bfloat16 ``GroupedQueryAttentionVarlenFwdOp`` rows of
``benchmarks/bench.json`` with more than 16 queries a sequence (the tile kernel's rows; the
decode rows take the split path), rebuilt from their recorded sequence lengths with seeded
random inputs. Each variant's output is compared with the launcher's default (largest
absolute difference), then every variant is timed ``--rounds`` times, interleaved, with
CUDA events around one call after an L2 flush; the median is printed in microseconds with
TFLOP/s from the row's roofline flops in ``bench.json`` (the visible query-key pairs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

SMOKE = "--smoke" in sys.argv
if SMOKE:
    import os
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

from opspec.kernels.attention import AttnConfig, attention_config, attention_varlen_triton

BENCH = Path(__file__).resolve().parent / "bench.json"
DEV = "cpu" if SMOKE else "cuda"


#: Tiles timed beside the default (the first runs of this probe, H200, 2026-12-01, had the
#: dense tables' tiles as the default: see VARLEN_CONFIGS in opspec.kernels.attention).
CANDIDATES = (AttnConfig(128, 64, 8, 2, "tma+lazy", 128), AttnConfig(128, 64, 8, 3, "gqa"),
              AttnConfig(64, 64, 4, 3, "tma"), AttnConfig(64, 64, 4, 2, "tma"),
              AttnConfig(64, 64, 4, 4, "tma"), AttnConfig(64, 64, 4, 3, "tma+lazy"),
              AttnConfig(64, 64, 4, 3, "tma+gqa"), AttnConfig(64, 128, 4, 2, "tma"),
              AttnConfig(64, 32, 4, 3, "tma"), AttnConfig(64, 64, 4, 3, "tma+prescale"))


def _variants(default: AttnConfig) -> list[tuple[str, AttnConfig]]:
    """The launcher's choice, that tile with its TMA flag off (the pointer loads) or on, and
    uncapped; the 128 x 64 TMA tiles with and without the cap."""
    flags = [f for f in default.flags() if f != "tma"]
    plain = "+".join(sorted(flags)) or "base"
    # the default by name (on the CPU the launcher itself would pick the interpreter's tile)
    out = [("default", default), ("pointers", default._replace(variant=plain))]
    if "tma" not in default.flags():
        out.append(("tma", default._replace(variant="+".join(sorted(flags + ["tma"])))))
    if default.maxnreg:
        out.append(("uncapped", default._replace(maxnreg=0)))
    for cfg in CANDIDATES:
        if cfg != default:
            out.append((f"{cfg.variant}-{cfg.block_m}x{cfg.block_n}-s{cfg.num_stages}"
                        f"{'-r' + str(cfg.maxnreg) if cfg.maxnreg else ''}", cfg))
    return out


def _rows(labels: set[str] | None) -> list[dict]:
    if SMOKE:
        return [dict(label="smoke-causal", q_lens=[5, 40, 17], k_lens=[9, 40, 10], H=4, H_kv=2,
                     D=32, causal=True),
                dict(label="smoke-full", q_lens=[33, 20], k_lens=[33, 20], H=4, H_kv=1, D=32,
                     causal=False)]
    rows = []
    for r in json.loads(BENCH.read_text())["rows"]:
        p = r["params"]
        if (r["op"] == "GroupedQueryAttentionVarlenFwdOp" and r["dtypes"]["T"] == "bfloat16"
                and p["max_seqlen_q"] > 16 and (labels is None or r["label"] in labels)):
            rows.append(dict(label=r["label"], q_lens=p["q_lens"], k_lens=p["k_lens"], H=p["H"],
                             H_kv=p["H_kv"], D=p["D"], causal=bool(p.get("causal", False)),
                             flops=r["flops"]))
    return rows


def _offsets(lens):
    return torch.tensor([0] + lens, device=DEV).cumsum(0).to(torch.int32)


def _time(fn, flush: torch.Tensor) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.zero_()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", help="comma-separated row labels (default: all)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--smoke", action="store_true", help="tiny rows on the CPU interpreter")
    args = ap.parse_args(argv)
    dt = torch.float16 if SMOKE else torch.bfloat16
    flush = None if SMOKE else torch.empty(256 << 20, dtype=torch.int8, device=DEV)
    results = {}
    for row in _rows(set(args.rows.split(",")) if args.rows else None):
        g = torch.Generator(device="cpu").manual_seed(0)
        tq, tk = sum(row["q_lens"]), sum(row["k_lens"])
        q, k, v = (torch.randn(t, h, row["D"], generator=g).to(dt).to(DEV)
                   for t, h in ((tq, row["H"]), (tk, row["H_kv"]), (tk, row["H_kv"])))
        cq, ck = _offsets(row["q_lens"]), _offsets(row["k_lens"])
        max_q, max_k = max(row["q_lens"]), max(row["k_lens"])
        default = attention_config(row["D"], "cuda", row["causal"], max_q, varlen=True)
        # the op's roofline flops (visible query-key pairs), as the bench recorded them
        flops = row.get("flops")
        outs, calls = {}, {}
        for name, cfg in _variants(default):
            out = torch.empty_like(q)
            call = (lambda out=out, cfg=cfg: attention_varlen_triton(
                q, k, v, cq, ck, max_q, out, None, row["causal"], config=cfg,
                max_seqlen_k=max_k))
            try:
                call()
            except Exception as exc:   # a variant the compiler refuses: reported, skipped
                print(f"{row['label']} {name}: failed: {type(exc).__name__}: {exc}"[:300],
                      file=sys.stderr)
                continue
            outs[name], calls[name] = out, call
        ref = outs["default"].float()
        diffs = {n: float((o.float() - ref).abs().max()) for n, o in outs.items()}
        times = {n: [] for n in calls}
        if not SMOKE:
            for _ in range(args.rounds):
                for name, call in calls.items():
                    times[name].append(_time(call, flush))
        res = {}
        for name in calls:
            us = statistics.median(times[name]) if times[name] else float("nan")
            tflops = flops / us / 1e6 if times[name] and flops else None
            res[name] = {"us": us, "tflops": tflops, "max_diff": diffs[name]}
            print(f"{row['label']:22s} {name:28s} {us:9.1f} us "
                  f"{float('nan') if tflops is None else tflops:6.0f} TFLOP/s "
                  f"diff {diffs[name]:.2e}", file=sys.stderr)
        results[row["label"]] = {"default": default._asdict(), "variants": res}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
