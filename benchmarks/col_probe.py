"""Probe of the column reductions' split on a CUDA device: how much of a column sum's time
is its second stage, side by side with a copy of the input's bytes.

    python benchmarks/col_probe.py [CASE ...]   # cases: the keys of CASES

Each case times the table's launches (`opspec`: the second stage launched dependent on the
first where the device allows it), the first stage alone (the partials, no result: the
floor any finish can reach), and variants of ColTuning: the second stage as a plain launch
after the first, and wider strips. Every variant but the first stage alone is compared with
torch. Not part of the package.
"""

from __future__ import annotations

import sys

import torch

from opspec.kernels import reduction as R

from sweep_pool import time_beside_copy  # beside this script

CASES = {"colmean-bf16": ("mean", (16384, 4096), torch.bfloat16),
         "amax-bf16": ("amax", (16384, 4096), torch.bfloat16),
         "colsum-bf16": ("sum", (16384, 8192), torch.bfloat16),
         "amax-fp32": ("amax", (16384, 4096), torch.float32),
         "colsum-fp32": ("sum", (16384, 8192), torch.float32),
         "colsum3d-bf16fp32": ("sum", (8192, 4096), torch.bfloat16)}
C = R.COL
VARIANTS = {
    "second stage not overlapped": C._replace(overlap_stages=False),
    "8 warps (4 KiB strips) 2/SM": C._replace(warps=8, programs_per_sm=2),
}


def stage1(x, red, out):
    """The table's first launch alone: the partials of every chunk, no second stage."""
    lay = R.collapse(x.shape, x.stride(), (0,))
    lp = R.plan_launch(lay, x.element_size(), torch.cuda.get_device_properties(0)
                       .multi_processor_count)
    dims = R._col_dims(lay)
    (O, s_o, _), (I, s_i, _) = dims
    ws = torch.empty(lp.n_split * lay.n_out, dtype=torch.float32, device=x.device)
    code = 2 if red == "amax" else 0
    return lambda: R._col(x, ws, lay, lp, reduce_code=code, final=False, cast_ty=None,
                          acc_ty=R._TL_DTYPES[torch.float32], dims=((O, s_o, I), (I, s_i, 1)),
                          os_s=lay.n_out, n_div=lay.R, use_int64=False)


def main(names):
    for name in names or CASES:
        red, shape, dt = CASES[name]
        # "-bf16fp32": bf16 input, float32 sums (torch's dtype=)
        out_dt = torch.float32 if name.endswith("fp32") else dt
        x = torch.randn(shape, device="cuda", dtype=dt)
        out = torch.empty(shape[1], device="cuda", dtype=out_dt)
        ref = R.reduction_reference(red, x, (0,), out_dt)
        fns = {"opspec": lambda: R.reduction_triton(x, out, (0,), red),
               "first stage alone": stage1(x, red, out)}
        for v, t in VARIANTS.items():
            tun = R.TUNING._replace(col=t)
            fns[v] = (lambda tun: lambda: R.reduction_triton(x, out, (0,), red, tuning=tun))(tun)
        time_beside_copy(f"{name} {list(shape)}", x.numel() * x.element_size(), fns, ref, out)


if __name__ == "__main__":
    main(sys.argv[1:])
