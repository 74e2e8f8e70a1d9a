"""Test configuration shared by every test module.

Triton reads `TRITON_INTERPRET` once, when it is first imported: without a GPU, the Triton
kernels run through its interpreter on the CPU, so the variable is set before anything
imports triton. `tests/` is put on `sys.path` for the shared Hypothesis strategies.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")
