"""`benchmarks/varlen_probe.py --smoke`: every variant it times runs on tiny varlen rows
through the interpreter, and the launcher's tile gives the same output with its keys and
values loaded through TMA descriptors as through pointers (the timing itself needs CUDA)."""

from __future__ import annotations

import re

from smoke_scripts import run_smoke


def test_smoke_variants_run_and_descriptors_match_pointers():
    stderr = run_smoke("varlen_probe.py")
    diffs = {(m.group(1), m.group(2)): float(m.group(3)) for m in
             re.finditer(r"^(smoke-\S+)\s+(\S+)\s+nan us .* diff (\S+)$", stderr, re.M)}
    assert "failed" not in stderr
    for row in ("smoke-causal", "smoke-full"):
        names = {name for (r, name) in diffs if r == row}
        assert {"default", "pointers", "tma-64x64-s3", "gqa-128x64-s3"} <= names, names
        # the default's own tile with pointer loads: the same products in the same order
        assert diffs[(row, "pointers")] == 0.0
        # other tiles sum the keys in other blocks: close, not equal (float16 outputs)
        assert max(diffs[(r, n)] for (r, n) in diffs if r == row) < 2e-2
