"""Staggered starts of persistent grids (opspec.kernels.stagger) and how the looped softmax
launcher asks for them: the delay from a row's bytes, none off CUDA or under the
interpreter, and the launch arguments the plan's steps turn into."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

from opspec.kernels import softmax as K
from opspec.kernels.stagger import SM_BYTES_PER_CYCLE, stagger_cycles, stagger_supported


@given(st.integers(0, 1 << 30), st.floats(0.0, 4.0), st.floats(0.0, 4.0))
def test_delay_grows_with_the_row_and_the_fraction(row_bytes, f1, f2):
    lo, hi = sorted((f1, f2))
    assert 0 <= stagger_cycles(row_bytes, lo) <= stagger_cycles(row_bytes, hi)
    assert stagger_cycles(row_bytes, lo) <= stagger_cycles(row_bytes + 4096, lo) + 1
    assert stagger_cycles(row_bytes, 0.0) == 0


def test_delay_is_a_fraction_of_a_row_at_an_sms_rate():
    # bf16 Llama-3 logits: 128256 elements read and written, an eighth of a row
    row = 128256 * 4
    assert stagger_cycles(row, 0.125) == round(row / 8 / SM_BYTES_PER_CYCLE) == 4008


def test_no_spin_off_cuda():
    assert not stagger_supported(torch.device("cpu"))
    assert not stagger_supported(torch.device("meta"))


@pytest.mark.parametrize("supported", [False, True])
def test_looped_launch_passes_the_plans_steps(monkeypatch, supported):
    """The looped softmax launch gets ``STAGGER_STEPS`` and a delay in cycles from the plan
    where the device spins, and neither elsewhere (the launch itself is captured)."""
    seen = {}

    def capture(kernel, grid, *args, **kw):
        seen.update(kernel=kernel, grid=grid, **kw)

    monkeypatch.setattr(K, "launch", capture)
    monkeypatch.setattr(K, "stagger_supported", lambda device: supported)
    x = torch.zeros(40, 300, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    plan = K.SoftmaxPlan("looped", 64, 1, 4, vec=8, stagger_steps=4, stagger=0.125)
    K.softmax_triton(x, -1, out, plan=plan)
    assert seen["kernel"] is K._looped_kernel and seen["grid"] == (4,)
    if supported:
        assert seen["STAGGER_STEPS"] == 4
        assert seen["delay"] == stagger_cycles(300 * (2 + 2), 0.125) > 0
    else:
        assert (seen["STAGGER_STEPS"], seen["delay"]) == (0, 0)
    # a plan without steps never spins, wherever it runs
    K.softmax_triton(x, -1, out, plan=K.SoftmaxPlan("looped", 64, 1, 4, vec=8))
    assert (seen["STAGGER_STEPS"], seen["delay"]) == (0, 0)


@pytest.mark.parametrize("n, rows, supported, staggered", [
    (32768, 264, True, True),       # a row a program, one program an SM, two waves
    (32768, 264, False, False),     # off CUDA or under the interpreter
    (16384, 264, True, False),      # shorter rows: several programs an SM
    (32768, 131, True, False),      # under the waves asked for
])
def test_norm_rows_launch_staggers_its_first_wave(monkeypatch, n, rows, supported, staggered):
    """The norm rows kernel takes the tuning's steps for the programs of its first wave, on
    rows of at least ``rows_stagger_min_block`` elements and grids of at least
    ``rows_stagger_min_waves`` programs an SM (the launch itself is captured)."""
    from opspec.kernels import norm as N

    seen = {}

    def capture(kernel, grid, *args, **kw):
        seen.update(kernel=kernel, grid=grid, **kw)

    monkeypatch.setattr(N, "launch", capture)
    monkeypatch.setattr(N, "stagger_supported", lambda device: supported)
    tun = N.TUNING._replace(rows_stagger_steps=4, rows_stagger=0.125, rows_stagger_min_waves=2)
    x = torch.empty(rows, n, dtype=torch.float32)
    w = torch.empty(n, dtype=torch.float32)
    N.norm_fwd_triton(x, torch.empty_like(x), n, 1e-5, rms=False, weight=w, bias=w, tuning=tun)
    assert seen["kernel"] is N._norm_fwd_rows_kernel and seen["grid"] == (rows,)
    if staggered:
        assert (seen["STAGGER_STEPS"], seen["first"]) == (4, 132)
        assert seen["delay"] == stagger_cycles(2 * n * 4, 0.125) > 0
    else:
        assert (seen["STAGGER_STEPS"], seen["delay"]) == (0, 0)
