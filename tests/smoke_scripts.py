"""Runs a benchmark script's ``--smoke`` mode (tiny inputs through Triton's interpreter on the
CPU) in a child process, for the tests that check a script still runs and what it prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_smoke(script: str, timeout: float = 600) -> str:
    """Run ``benchmarks/<script> --smoke`` under the interpreter; fail the calling test with
    its stderr unless it exits 0; return its stderr (where the scripts report)."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke"], env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr
    return res.stderr
