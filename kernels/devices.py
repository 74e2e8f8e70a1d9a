"""Where the Triton kernels can run.

Triton kernels run on CUDA devices. Under Triton's interpreter (`TRITON_INTERPRET=1`, read
once by Triton at import) they also run on the CPU, which is how CI tests them; the torch
reference implementations serve every other device as the `general` fallback.
"""

from __future__ import annotations

import os

TRITON_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

#: The device types a Triton kernel class declares.
TRITON_DEVICES = frozenset({"cuda", "cpu"} if TRITON_INTERPRETED else {"cuda"})

#: The device types a torch reference implementation declares.
REFERENCE_DEVICES = frozenset({"cpu", "cuda", "xpu", "mps", "hpu"})
