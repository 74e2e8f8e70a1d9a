"""Probe on an H200: the 3x3 stride-2 max pooling of 16-bit rows read as words
(opspec.kernels.pool_words) against the table's choice (``pool2d_triton``) on the CNN stem
rows of MaxPool2dFwdOp, beside a device-to-device copy of the same bytes (input + output).

    python benchmarks/pool_words_probe.py [--configs R:P:W,...] [--smoke]

Prints per row and candidate: us, TB/s, time over the copy's and max error against torch.
--configs names the WordsConfig candidates (rows:planes:warps); the default set spans rows
4/7/8/14, planes 1/2/4/8 and 1 or 2 warps. --smoke runs small rows through Triton's
interpreter on the CPU (a check of this script). Not part of the package.
"""

from __future__ import annotations

import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F

import opspec.kernels.pool as PK
from opspec.kernels.pool_words import WordsConfig, max_pool3x3s2_words, words_fit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_pool import time_beside_copy  # noqa: E402  (beside this script)

# (label, N, C, H, W, padding, ceil_mode, dtype)
ROWS = [
    ("resnet50-stem-b32-bf16", 32, 64, 112, 112, 1, False, torch.bfloat16),
    ("resnet50-stem-b32-fp16", 32, 64, 112, 112, 1, False, torch.float16),
    ("resnet50-stem-b128-bf16", 128, 64, 112, 112, 1, False, torch.bfloat16),
    ("resnet50-stem-b256-bf16", 256, 64, 112, 112, 1, False, torch.bfloat16),
    ("googlenet-stem-b64-bf16", 64, 64, 112, 112, 0, True, torch.bfloat16),
    ("resnet50-stem-b1-bf16", 1, 64, 112, 112, 1, False, torch.bfloat16),
]
CONFIGS = [WordsConfig(r, p, w) for r in (4, 7, 8, 14) for p in (1, 2, 4, 8) for w in (1, 2)
           if not (w == 2 and p == 1)]


def main() -> None:
    smoke = "--smoke" in sys.argv
    dev = "cpu" if smoke else "cuda"
    rows = [(l, 2, 3, 16, 24, p, c, dt) for (l, _, _, _, _, p, c, dt) in ROWS[:5:2]] \
        if smoke else ROWS
    configs = CONFIGS[:3] if smoke else CONFIGS
    if "--configs" in sys.argv:
        spec = sys.argv[sys.argv.index("--configs") + 1]
        configs = [WordsConfig(*map(int, c.split(":"))) for c in spec.split(",")]
    for label, N, C, H, W, pad, ceil, dt in rows:
        x = torch.randn(N, C, H, W, device=dev).to(dt)
        g = PK.pool2d_geometry(3, 2, pad, 1, ceil)
        ref = F.max_pool2d(x, 3, 2, pad, 1, ceil)
        out = torch.empty_like(ref)
        H_out, W_out = ref.shape[-2:]
        assert words_fit(x, g.kernel, g.stride, g.padding, g.dilation, H_out, W_out), label
        fns = {"table": lambda: PK.pool2d_triton(x, out, "max", g)}
        for cfg in configs:
            fns[f"words r{cfg.rows} p{cfg.planes} w{cfg.num_warps}"] = \
                (lambda cfg=cfg: max_pool3x3s2_words(x, out, g.padding, cfg))
        if smoke:
            for name, fn in fns.items():
                out.zero_()
                fn()
                err = (out.float() - ref.float()).abs().max().item()
                print(f"{label} {name}: max error {err}")
                assert err == 0, name
            continue
        time_beside_copy(label, x.numel() * x.element_size() + out.numel() * out.element_size(),
                         fns, ref, out)


if __name__ == "__main__":
    main()
