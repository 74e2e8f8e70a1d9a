"""The device's streaming rates by direction, on a CUDA device: a pure write (a memset, torch's
``fill_`` kernel and a Triton store-only kernel), a pure read (an int32 amax) and a copy, each
over 1 and 2 GiB, timed as ``opspec bench`` times (sweep_pool.bench: L2 flushed before each
sample).

    python benchmarks/ceiling_probe.py

`opspec bench`'s bandwidth ceiling and its `vs copy` column are a copy (half the bytes read,
half written); a row that mostly writes (attention scores of K = 128) is bound by the write
rate instead, which this shows. Not part of the package.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sweep_pool import bench  # beside this script


@triton.jit
def _store_ones(p, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p + o, tl.full([BLOCK], 1, tl.int32), mask=o < n)


def main() -> None:
    for gib in (1, 2):
        n = gib << 30
        a = torch.empty(n, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        words = a.view(torch.int32)
        rates = {
            "memset": n / bench(lambda: a.zero_(), False),
            "fill_": n / bench(lambda: a.fill_(1), False),
            "triton store": n / bench(lambda: _store_ones[(triton.cdiv(n // 4, 4096),)](
                words, n // 4, BLOCK=4096, num_warps=8), False),
            "read (int32 amax)": n / bench(lambda: words.amax(), False),
            "copy (read + written)": 2 * n / bench(lambda: b.copy_(a), False),
        }
        print(f"{gib} GiB: " + ", ".join(f"{k} {v / 1e9:.2f} TB/s" for k, v in rates.items()),
              flush=True)


if __name__ == "__main__":
    main()
