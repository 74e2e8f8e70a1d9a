"""`benchmarks/hint_probe.py`: the copy of a kernel module it times carries no evict_first
hint in its code and computes what the module computes (the timing itself needs CUDA)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _hint_probe():
    sys.path.insert(0, str(BENCH))   # the script imports sweep_pool from beside it
    try:
        spec = importlib.util.spec_from_file_location("hint_probe", BENCH / "hint_probe.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


def _code_hints(path: str) -> list[str]:
    """The lines of a module's code (comments and docstring lines left out) that name
    evict_first."""
    return [line for line in Path(path).read_text().splitlines()
            if "evict_first" in line and not line.lstrip().startswith(("#", "*", '"'))
            and "``" not in line]


def test_the_copy_has_no_hint_and_computes_the_same():
    H = _hint_probe()
    for name in ("softmax", "norm", "quant_gemm"):
        original = H.MODULES[name][0]
        assert _code_hints(original.__file__), name   # the module has hints to take out
        copy = H.without_hints(name)
        assert copy is not original and not _code_hints(copy.__file__), name
    # the looped softmax kernel, whose hints keep a long bf16 row in L2 for its second pass
    S, copy = H.MODULES["softmax"][0], H.without_hints("softmax")
    x = torch.randn(3, 700).to(torch.bfloat16)
    want, got = torch.empty_like(x), torch.empty_like(x)
    # chunks of 64 elements (vectors of 8), 3 rows on 2 persistent programs
    S.softmax_triton(x, -1, want, plan=S.SoftmaxPlan("looped", 64, 1, 2, vec=8))
    copy.softmax_triton(x, -1, got, plan=copy.SoftmaxPlan("looped", 64, 1, 2, vec=8))
    assert torch.equal(got, want)
    torch.testing.assert_close(got.float(), torch.softmax(x.float(), -1), rtol=1.6e-2,
                               atol=1e-3)


def test_an_unknown_module_is_a_usage_error(capsys):
    H = _hint_probe()
    assert H.main(["gemm_typo"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"unknown module \['gemm_typo'\]; known: \['norm', 'quant_gemm', "
                     r"'softmax'\]", err), err
