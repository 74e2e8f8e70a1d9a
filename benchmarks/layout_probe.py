"""What a non-contiguous input costs each op: the same values as contiguous tensors and as
views of rows a few elements longer (a padded cache, a slice of a wider buffer), timed side
by side on a CUDA device, with torch eager on the views beside them.

    python benchmarks/layout_probe.py [--pad N] [--cases NAME,...] [--json PATH]
    python benchmarks/layout_probe.py --smoke      # tiny cases through the interpreter (CPU)

A view's rows are ``--pad`` elements longer than its logical width (default 4: in 16-bit
types 8 bytes more a row, so no row past the first is 16-byte aligned and no stride is a
multiple of 16 elements, the divisibility Triton specialises integer arguments on). For
each case it checks that the op gives the same output on the views as on the contiguous
tensors (to the bit where the loads have one width on both layouts; where they do not --
rows padded by 4 take 8-byte vectors, contiguous ones 16-byte -- a row reduction adds its
partial sums in another order and its last bits may differ: the largest difference is
printed, not hidden), then prints the op's time on each layout, their ratio, and the
op's speedup over eager on the views. A ratio well above 1 is a layout the op's kernels
read poorly (element by element, or a slower kernel); attention's keys and values were one
(opspec.kernels.attention.kv_for_loads), and so were the norms', softmax's, SiluAndMul's,
the row reductions' and decode attention's rows before their kernels took a hint of what
divides the strides (opspec.kernels.tiling.row_multiple). Not part of the package.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEV = "cpu" if SMOKE else "cuda"
DT = torch.float16 if SMOKE else torch.bfloat16


def _padded(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t``'s values in a view whose last axis lies in rows ``pad`` elements longer."""
    buf = torch.zeros(*t.shape[:-1], t.shape[-1] + pad, dtype=t.dtype, device=t.device)
    buf[..., :t.shape[-1]] = t
    return buf[..., :t.shape[-1]]


def _rand(*shape, scale=1.0):
    return (torch.randn(*shape, device=DEV) * scale).to(DT)


def _cases(smoke: bool):
    """(name, make) pairs; make() returns (inputs, the padded positions, op, eager): op and
    eager take the inputs (eager None: no eager column); positions name the inputs given
    padded rows."""
    from opspec.ops import (AddFwdOp, BmmFwdOp, FusedAddRMSNormFwdOp, GemmFwdOp,
                            GroupedQueryAttentionDenseFwdOp, GroupedQueryAttentionVarlenFwdOp,
                            LayerNormFwdOp, MaxPool2dFwdOp, RMSNormFwdOp, RotaryEmbeddingFwdOp,
                            SiluAndMulFwdOp, SoftmaxFwdOp, SumFwdOp)
    R, D = (48, 40) if smoke else (16384, 4096)
    I = 48 if smoke else 14336
    M = 32 if smoke else 4096
    B, S, hd = (2, 32, 16) if smoke else (32, 1024, 128)
    P = (2, 3, 12, 12) if smoke else (32, 64, 112, 112)
    A = (1, 4, 2, 24, 16) if smoke else (4, 32, 8, 2048, 128)   # B, H, H_kv, S, D
    # decode: sequences, keys a sequence (one query each); RoPE: tokens, positions
    Q, L = (3, 20) if smoke else (16, 4096)
    T, npos = (10, 32) if smoke else (8192, 8192)

    def decode():
        B, H, H_kv, _, hd = A
        cu_q = torch.arange(Q + 1, device=DEV, dtype=torch.int32)
        op = GroupedQueryAttentionVarlenFwdOp(1, L)
        return ([_rand(Q, H, hd), _rand(Q * L, H_kv, hd), _rand(Q * L, H_kv, hd), cu_q,
                 cu_q * L], [1, 2], op, None)

    def rope():
        H, H_kv, hd = A[1], A[2], A[4]
        pos = torch.randint(0, npos, (T,), device=DEV)
        return ([pos, _rand(T, H * hd), _rand(T, H_kv * hd), _rand(npos, hd)], [1, 2],
                RotaryEmbeddingFwdOp(hd, True), None)

    def fused_add_rms_norm():
        return ([_rand(R, D), _rand(R, D), _rand(D) + 1.0], [0, 1], FusedAddRMSNormFwdOp(1e-5),
                None)

    def norm(cls, ref):
        def make():
            x, w = _rand(R, D), _rand(D) + 1.0
            return [x, w], [0], cls([D]), ref
        return make

    return [
        ("rms_norm", norm(RMSNormFwdOp, lambda x, w: F.rms_norm(x, (x.shape[-1],), w))),
        ("layer_norm", norm(LayerNormFwdOp, lambda x, w: F.layer_norm(x, (x.shape[-1],), w))),
        ("softmax", lambda: ([_rand(R, D)], [0], SoftmaxFwdOp(-1),
                             lambda x: torch.softmax(x, -1))),
        ("silu_and_mul", lambda: ([_rand(R // 8, 2 * I)], [0], SiluAndMulFwdOp(),
                                  lambda x: F.silu(x[:, :I]) * x[:, I:])),
        ("add", lambda: ([_rand(R, D), _rand(R, D)], [0, 1], AddFwdOp(), torch.add)),
        ("sum", lambda: ([_rand(R, D)], [0], SumFwdOp(-1), lambda x: x.sum(-1))),
        ("gemm", lambda: ([_rand(M, M, scale=M ** -0.5), _rand(M, M)], [0, 1], GemmFwdOp(),
                          torch.matmul)),
        ("bmm", lambda: ([_rand(B, S, hd), _rand(B, hd, S)], [0, 1], BmmFwdOp(), torch.bmm)),
        ("max_pool2d", lambda: ([_rand(*P)], [0], MaxPool2dFwdOp(3, 2, 1),
                                lambda x: F.max_pool2d(x, 3, 2, 1))),
        # keys and values padded (a cache with longer rows); eager SDPA's output on such
        # rows is timed, not checked
        ("attention", lambda: ([_rand(A[0], A[1], A[3], A[4]), _rand(A[0], A[2], A[3], A[4]),
                                _rand(A[0], A[2], A[3], A[4])], [1, 2],
                               GroupedQueryAttentionDenseFwdOp(True),
                               lambda q, k, v: F.scaled_dot_product_attention(
                                   q, k, v, is_causal=True, enable_gqa=True))),
        # in place on their inputs, or with no single eager function: no eager column
        ("decode_attn", decode),
        ("rope", rope),
        ("fused_add_rms", fused_add_rms_norm),
    ]


def _tensors(result) -> list:
    """The tensors an op returned (none for an in-place op)."""
    if result is None:
        return []
    return list(result) if isinstance(result, tuple) else [result]


def _time_ms(fn) -> float:
    """Median device time of ``fn`` in ms, timed as ``opspec bench`` times (CUDA events, the L2
    flushed and the device kept busy ahead of each call, so that a host-bound call such as
    a decode is timed by its kernels, not its launch path)."""
    if DEV != "cuda":        # --smoke: one timed call
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    global _TIMER
    if _TIMER is None:
        from opspec.ops.bench_harness import Settings, make_timer
        _TIMER = make_timer(Settings.for_device("cuda"))
    for _ in range(3):
        fn()
    return statistics.median(_TIMER.samples(fn, 50)) * 1e3


_TIMER = None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pad", type=int, default=4, help="elements a view's rows are longer")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--json", metavar="PATH", help="write the figures to PATH")
    ap.add_argument("--smoke", action="store_true", help="tiny cases on the CPU (interpreter)")
    args = ap.parse_args(argv)
    if not SMOKE and not torch.cuda.is_available():
        print("layout_probe needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    names = set(args.cases.split(",")) if args.cases else None
    print(f"{torch.cuda.get_device_name() if DEV == 'cuda' else 'cpu (interpreter)'}; "
          f"rows padded by {args.pad}", file=sys.stderr)
    print(f"{'case':<14} {'contig us':>10} {'padded us':>10} {'ratio':>7} {'eager us':>10} "
          f"{'x eager':>8}  output", file=sys.stderr)
    report = []
    for name, make in _cases(SMOKE):
        if names and name not in names:
            continue
        inputs, padded_at, op, eager = make()
        views = [_padded(t, args.pad) if i in padded_at else t for i, t in enumerate(inputs)]
        assert all(not views[i].is_contiguous() for i in padded_at)
        # the outputs and the inputs after the call (the in-place ops write theirs)
        want, got = _tensors(op(*inputs)) + inputs, _tensors(op(*views)) + views
        same = len(want) == len(got) and all(torch.equal(a, b) for a, b in zip(want, got))
        diff = max(((a.float() - b.float()).abs().max().item() for a, b in zip(want, got)
                    if a.numel()), default=0.0)
        t_c = _time_ms(lambda: op(*inputs))
        t_p = _time_ms(lambda: op(*views))
        t_e = _time_ms(lambda: eager(*views)) if eager is not None else float("nan")
        row = {"case": name, "contig_us": t_c * 1e3, "padded_us": t_p * 1e3,
               "ratio": t_p / t_c, "eager_padded_us": t_e * 1e3, "speedup_eager": t_e / t_p,
               "same_output": same, "max_abs_diff": diff}
        report.append(row)
        print(f"{name:<14} {row['contig_us']:10.1f} {row['padded_us']:10.1f} {row['ratio']:7.2f} "
              f"{row['eager_padded_us']:10.1f} {row['speedup_eager']:8.2f}  "
              f"{'same' if same else f'differs by up to {diff:.3g}'}", file=sys.stderr,
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pad": args.pad, "device": DEV, "rows": report}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
