"""Offline tile sweep of the flash-attention kernel on a CUDA GPU, beside torch SDPA under
each of its backends (GQA, bf16, D = 128): `python benchmarks/attention_sweep.py`.
Prints TFLOP/s (visible query-key pairs only) per configuration; not part of the package."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel

from opspec.kernels.attention import attention_dense_triton

CONFIGS = [None, (128, 64, 8, 2), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3),
           (64, 64, 4, 3), (128, 32, 8, 3), (64, 128, 4, 3)]
ROWS = [(1, 32, 8, 8192, 128, True), (4, 32, 8, 4096, 128, False), (8, 32, 8, 1024, 128, True)]


def main() -> None:
    for B, H, Hkv, S, D, causal in ROWS:
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        o = torch.empty_like(q)
        pairs = S * (S + 1) / 2 if causal else S * S
        flops = 4 * B * H * D * pairs
        print(f"B={B} H={H}/{Hkv} S={S} D={D} causal={causal}", flush=True)
        for backend in (None, SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                        SDPBackend.EFFICIENT_ATTENTION):
            try:
                def run():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                if backend is None:
                    t = tt.do_bench(run)
                else:
                    with sdpa_kernel([backend]):
                        t = tt.do_bench(run)
                print(f"   sdpa {backend}: {t * 1e3:.1f} us {flops / t / 1e9:.0f} TFLOP/s", flush=True)
            except Exception as exc:
                print(f"   sdpa {backend}: unavailable ({str(exc)[:80]})", flush=True)
        for cfg in CONFIGS:
            try:
                t = tt.do_bench(lambda: attention_dense_triton(q, k, v, o, causal, config=cfg))
                print(f"   opspec {cfg}: {t * 1e3:.1f} us {flops / t / 1e9:.0f} TFLOP/s", flush=True)
            except Exception as exc:
                print(f"   opspec {cfg}: error {type(exc).__name__} {str(exc)[:100]}", flush=True)


if __name__ == "__main__":
    main()
