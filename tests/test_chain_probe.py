"""`benchmarks/chain_probe.py --smoke`: the decode chains it times build, run through every
op (Triton's interpreter on the CPU) and give finite outputs, equal to the bit in the child
with the overlap switched off and the one with it on (the timing itself needs CUDA)."""

from __future__ import annotations

import re

from smoke_scripts import run_smoke


def test_smoke_chains_run_and_agree_with_the_overlap_off_and_on():
    stderr = run_smoke("chain_probe.py")
    lines = {m.group(1): m.group(2) for m in
             re.finditer(r"^(\S+): (.+); output .* on / off (\S+)$", stderr, re.M)}
    assert set(lines) == {"llama3-8b-layer-1", "llama3-8b-layer-16",
                          "llama3-8b-w4a16-mlp-1", "llama3-8b-w4a16-mlp-16"}
    assert lines["llama3-8b-layer-1"].split(" -> ") == [
        "norm", "qkv", "rope", "attention", "o", "norm2", "gate_up", "silu_and_mul", "down"]
    assert all(re.search(r"on / off 0$", line) for line in stderr.splitlines()
               if "largest difference" in line)
