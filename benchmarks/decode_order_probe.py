"""Decode attention's split-key kernel launched split-first (the table) against heads-first,
on a CUDA device.

    python benchmarks/decode_order_probe.py

Split-first (grid ``(splits, sequences x kv heads)``) runs the chunks of one head
together; heads-first (``(sequences x kv heads, splits)``) runs the same chunk of adjacent
heads together, so programs resident at once read neighbouring rows of the same tokens
of a ``[tokens, kv heads, D]`` cache. Cases: 16 sequences of 4096 keys (the layout probe's)
with the cache rows 0, 4 and 8 elements longer than the head, and the bench's varlen
decode row (16 sequences of mixed lengths). Times as ``opspec bench`` does (device time,
L2 flushed), both orders in one process, alternated; outputs compared. Not part of the
package.
"""

from __future__ import annotations

import statistics
import sys

import torch

from opspec.kernels import attention as AK
from opspec.ops import GroupedQueryAttentionVarlenFwdOp
from opspec.ops.bench_harness import Settings, make_timer

H, H_KV, D = 32, 8, 128


def _rand(*shape, pad=0):
    t = torch.randn(*shape[:-1], shape[-1] + pad, device="cuda", dtype=torch.bfloat16)
    return t[..., :shape[-1]]


def _case(lens, pad):
    Q = len(lens)
    cu_q = torch.arange(Q + 1, device="cuda", dtype=torch.int32)
    cu_k = torch.zeros(Q + 1, device="cuda", dtype=torch.int32)
    cu_k[1:] = torch.tensor(lens, device="cuda").cumsum(0)
    T = sum(lens)
    args = [_rand(Q, H, D), _rand(T, H_KV, D, pad=pad), _rand(T, H_KV, D, pad=pad), cu_q,
            cu_k]
    op = GroupedQueryAttentionVarlenFwdOp(1, max(lens), causal=True)
    return op, args


def main() -> int:
    timer = make_timer(Settings.for_device("cuda"))
    mixed = [1024, 3000, 512, 8192, 2048, 4096, 700, 1500, 6000, 2500, 128, 5000, 3300, 900,
             7000, 2200]
    cases = [(f"16x4096 pad{p}", [4096] * 16, p) for p in (0, 4, 8)]
    cases += [("llama3-8b-decode-16", mixed, 0), ("64x2048", [2048] * 64, 0),
              ("4x16384", [16384] * 4, 0)]
    for name, lens, pad in cases:
        op, args = _case(lens, pad)
        res = {}
        outs = {}
        for order in (False, True):
            AK.DECODE_HEADS_FIRST = order
            outs[order] = op(*args).clone()
            for _ in range(3):
                op(*args)
        times = {False: [], True: []}
        for _ in range(3):
            for order in (False, True, True, False):
                AK.DECODE_HEADS_FIRST = order
                times[order] += timer.samples(lambda: op(*args), 20)
        for order in (False, True):
            res[order] = statistics.median(times[order]) * 1e6   # seconds -> us
        diff = (outs[False].float() - outs[True].float()).abs().max().item()
        nbytes = 2 * sum(lens) * H_KV * D * 2
        print(f"{name:22s} split-first {res[False]:7.2f} us  heads-first {res[True]:7.2f} us  "
              f"({res[False] / res[True]:.3f}x)  {nbytes / res[True] / 1e6:.2f} TB/s  "
              f"max diff {diff:.3g}", flush=True)
    AK.DECODE_HEADS_FIRST = False
    return 0


if __name__ == "__main__":
    sys.exit(main())
