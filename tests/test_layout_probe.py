"""`benchmarks/layout_probe.py --smoke`: every case runs on contiguous inputs and on views of
padded rows through the interpreter, with the same output on both (the timing itself needs
CUDA)."""

from __future__ import annotations

import re

from smoke_scripts import run_smoke

CASES = {"rms_norm", "layer_norm", "softmax", "silu_and_mul", "add", "sum", "gemm", "bmm",
         "max_pool2d", "attention", "decode_attn", "rope", "fused_add_rms"}


def test_smoke_every_case_gives_the_same_output_on_padded_rows():
    stderr = run_smoke("layout_probe.py")
    num = r"\s+(?:[\d.]+|nan)"
    rows = dict(re.findall(rf"^(\w+){num * 5}\s+(\S+)$", stderr, re.M))
    assert set(rows) == CASES, stderr
    assert set(rows.values()) == {"same"}, rows
