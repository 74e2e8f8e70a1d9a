"""Targets replace a whole op (reference §9.9): selection, building, the failure undo."""

from __future__ import annotations

import pytest
import torch

from opspec.ops import backend
from opspec.ops.backend import BUILTIN, TensorSpec
from opspec.ops.errors import OpNotAvailableError, UnknownTargetError


@pytest.fixture
def registry():
    state = backend._STATE.snapshot()
    try:
        yield backend
    finally:
        backend._STATE.restore(state)


def test_default_path_is_builtin():
    from opspec.ops import SiluAndMulFwdOp

    op = SiluAndMulFwdOp()
    assert op.serving_target is None
    op(torch.randn(3, 4))
    assert op.serving_target is BUILTIN


def test_a_target_builds_once_per_input_specs_and_serves_every_call(registry):
    from opspec.ops import SiluAndMulFwdOp

    built: list[tuple] = []

    def build(*specs, **params):
        built.append((specs, params))
        assert all(isinstance(s, TensorSpec) for s in specs)
        return lambda x: torch.nn.functional.silu(x[:, : x.shape[1] // 2]) * x[:, x.shape[1] // 2:]

    registry.register_detector("toy_cpu", lambda d: d.type == "cpu")
    registry.register_kernel_builder("SiluAndMulFwdOp", "toy_cpu", build)
    op = SiluAndMulFwdOp()
    x = torch.randn(3, 8)
    y = op(x)
    op(torch.randn(3, 8))
    op(torch.randn(5, 8))
    assert op.serving_target == "toy_cpu"
    assert len(built) == 2  # one per distinct (device, dtype, shape) of the inputs
    assert built[0][0][0].shape == (3, 8) and built[0][1] == {}
    torch.testing.assert_close(y, torch.nn.functional.silu(x[:, :4]) * x[:, 4:])
    # the target's result is still checked against the signature
    registry.register_kernel_builder("GemmFwdOp", "toy_cpu", lambda *s, **p: lambda a, b: a)
    from opspec.ops import GemmFwdOp
    g = GemmFwdOp()
    with pytest.raises(ValueError, match=r"output c of forward.*shape \(2, 5\)"):
        g(torch.randn(2, 3, dtype=torch.float16), torch.randn(3, 5, dtype=torch.float16))


def test_explicit_builtin_bypasses_detectors(registry):
    from opspec.ops import SiluAndMulFwdOp

    registry.register_detector("toy_cpu", lambda d: d.type == "cpu")
    registry.register_kernel_builder("SiluAndMulFwdOp", "toy_cpu",
                                     lambda *s, **p: pytest.fail("must not build"))
    op = SiluAndMulFwdOp(target=BUILTIN)
    op(torch.randn(2, 4))
    assert op.serving_target is BUILTIN


def test_a_target_without_a_builder_is_not_available_and_the_binding_resets(registry):
    from opspec.ops import SiluAndMulFwdOp

    registry.register_detector("toy_cpu", lambda d: d.type == "cpu")
    op = SiluAndMulFwdOp()
    with pytest.raises(OpNotAvailableError, match="registers no kernel builder for SiluAndMulFwdOp"):
        op(torch.randn(2, 4))
    assert op.serving_target is None  # the failed selecting call selected nothing


def test_unknown_target_name(registry):
    from opspec.ops import SiluAndMulFwdOp

    op = SiluAndMulFwdOp(target="nope")
    with pytest.raises(UnknownTargetError, match="no backend registered target 'nope'"):
        op(torch.randn(2, 4))


def test_empty_write_does_not_select(registry):
    from opspec.ops import SiluAndMulFwdOp

    registry.register_detector("toy_cpu", lambda d: d.type == "cpu")
    op = SiluAndMulFwdOp()
    y = op(torch.randn(0, 4))
    assert y.shape == (0, 2) and op.serving_target is None
