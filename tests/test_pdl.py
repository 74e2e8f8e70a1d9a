"""Overlapped launches (opspec.kernels.pdl): where they are on, the rules that every
launched kernel takes part and that a dependent launch only ever goes to a kernel that
waits first, and ops whose kernels run back to back (the MoE expert MLP's three: grouped
GEMM, SiluAndMul, grouped GEMM; the softmax's two-launch plans) giving the same result
overlapped or not. On the CPU (Triton's interpreter) the overlap is off: the launches there
are plain ones, which the tests check too; the GPU run checks the overlapped ones (sm_90
and later)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap

import pytest
import torch

import opspec.kernels
import opspec.kernels.pdl as pdl
import opspec.kernels.silu_and_mul as SM
from opspec.kernels.devices import TRITON_DEVICES
from opspec.kernels.grouped_gemm import _grouped_gemm_kernel, _grouped_gemm_tma_kernel
from opspec.kernels.launch import launch, recording
from opspec.kernels.quant_gemm import _split_sum_kernel, _w4a16_tc_kernel, _w4a16_tc_tma_kernel
from opspec.kernels.reduction import _col_reduce_kernel
from opspec.kernels.silu_and_mul import _gated_kernel
from opspec.kernels.softmax import (
    _split_finish_kernel, _split_partials_kernel, _strided_split_kernel, softmax_plan,
    softmax_triton,
)
from opspec.ops import MoeExpertMLPFwdOp

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
#: Kernels of the two-launch plans and chains the tests below run overlapped.
KNOWN_DEPENDENT = {_col_reduce_kernel, _grouped_gemm_kernel, _grouped_gemm_tma_kernel,
                   _gated_kernel, _split_sum_kernel, _w4a16_tc_kernel, _w4a16_tc_tma_kernel,
                   _split_partials_kernel, _split_finish_kernel, _strided_split_kernel}


def _pdl_kernels() -> list:
    """Every Triton kernel of opspec.kernels with a PDL parameter (any a launcher may launch
    dependent), found by walking the package's modules."""
    found = {}
    for mod in pkgutil.iter_modules(opspec.kernels.__path__):
        m = importlib.import_module(f"opspec.kernels.{mod.name}")
        for obj in vars(m).values():
            if ("PDL" in getattr(obj, "arg_names", ()) and hasattr(obj, "fn")
                    and obj is not pdl.overlap_start):   # the helper they all call
                found[id(obj)] = obj
    return sorted(found.values(), key=lambda k: k.__name__)


DEPENDENT_KERNELS = _pdl_kernels()


def test_the_kernels_that_overlap_are_found():
    assert KNOWN_DEPENDENT <= set(DEPENDENT_KERNELS), DEPENDENT_KERNELS


def _capable() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def test_overlap_is_on_only_on_sm90_cuda_devices(monkeypatch):
    assert not pdl.overlap_supported(torch.device("cpu"))
    assert pdl.overlap_options(torch.device("cpu")) == {"PDL": False}
    on = pdl.overlap_supported(torch.device(DEVICE))
    assert on == (_capable() and not pdl.TRITON_INTERPRETED and pdl.ENABLED)
    if on:
        assert pdl.overlap_options(torch.device(DEVICE)) == {"PDL": True, "launch_pdl": True}
    monkeypatch.setattr(pdl, "ENABLED", False)   # OPSPEC_PDL=0
    assert not pdl.overlap_supported(torch.device(DEVICE))
    assert pdl.overlap_options(torch.device(DEVICE)) == {"PDL": False}


def test_launch_refuses_a_dependent_launch_to_a_kernel_that_does_not_wait():
    part = torch.zeros(4, device=DEVICE)
    out = torch.zeros(4, device=DEVICE)
    with pytest.raises(ValueError, match="_split_sum_kernel is launched dependent") as ei:
        launch(_split_sum_kernel, (1,), part, out, 4, 4, 1, 4, 1, BLOCK=4, launch_pdl=True)
    assert "without PDL=True" in str(ei.value)
    with pytest.raises(ValueError, match="launched dependent"):
        launch(_split_sum_kernel, (1,), part, out, 4, 4, 1, 4, 1, BLOCK=4, PDL=False,
               launch_pdl=True)


def test_launch_refuses_a_kernel_with_pdl_left_to_its_default():
    """A launch must say whether the kernel overlaps: leaving PDL to its default would
    quietly never overlap. (BLOCK=2: a specialization no launcher makes, so the check runs
    on the GPU too, where it runs at a specialization's first launch.)"""
    part = torch.zeros(4, device=DEVICE)
    out = torch.zeros(4, device=DEVICE)
    with pytest.raises(ValueError, match="_split_sum_kernel takes a PDL parameter but its "
                                         "launch passes none"):
        launch(_split_sum_kernel, (1,), part, out, 4, 4, 1, 4, 1, BLOCK=2)


def _launched_names(tree: ast.AST) -> set[str]:
    """Names passed as the kernel of a ``launch(kernel, grid, ...)``,
    ``memo.launch(key, n, kernel, grid, ...)`` or ``prepare(n, kernel, grid, ...)`` call."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        callee = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        pos = {"launch": 2 if isinstance(f, ast.Attribute) else 0, "prepare": 1}.get(callee)
        if pos is not None and len(node.args) > pos and isinstance(node.args[pos], ast.Name):
            names.add(node.args[pos].id)
    return names


def test_every_launched_kernel_takes_part():
    """Every Triton kernel a module of opspec.kernels launches has the PDL parameter (so it
    can be launched dependent): the kernels, not the jit helpers they call."""
    launched = []
    for mod in pkgutil.iter_modules(opspec.kernels.__path__):
        m = importlib.import_module(f"opspec.kernels.{mod.name}")
        for name in _launched_names(ast.parse(inspect.getsource(m))):
            obj = getattr(m, name, None)
            if hasattr(obj, "arg_names") and hasattr(obj, "fn"):
                launched.append(obj)
                assert "PDL" in obj.arg_names, f"{mod.name}.{name} is launched without PDL"
    assert len(launched) >= 40 and KNOWN_DEPENDENT <= set(launched), len(launched)


@pytest.mark.parametrize("kernel", DEPENDENT_KERNELS, ids=lambda k: k.__name__)
def test_every_dependent_kernel_waits_before_anything_else(kernel):
    """A dependent launch may start before the kernel ahead of it ends: each kernel with a
    PDL constexpr (default off: it only takes part when asked) calls overlap_start(PDL) as
    its first statement, before any load or store."""
    params = inspect.signature(kernel.fn).parameters
    assert "PDL" in params and params["PDL"].default is False
    tree = ast.parse(textwrap.dedent(inspect.getsource(kernel.fn)))
    body = tree.body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]   # the docstring
    first = body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Call), ast.dump(first)
    assert ast.unparse(first.value) == "overlap_start(PDL)"


@pytest.mark.skipif(DEVICE not in TRITON_DEVICES,
                    reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")
def test_expert_mlp_chain_overlapped_or_not(monkeypatch):
    """The MLP's three launches carry the overlap where the device has it (each launched
    dependent on the one before) and not elsewhere; overlapped or plain, eager or from a
    CUDA graph, the result is the same to the bit."""
    g = torch.Generator().manual_seed(3)
    sizes, K, I = [5, 0, 9, 2], 32, 16
    M, G = sum(sizes), len(sizes)
    x = (torch.randn(M, K, generator=g) / 2).to(torch.float16).to(DEVICE)
    w13 = (torch.randn(G, K, 2 * I, generator=g) / 4).to(torch.float16).to(DEVICE)
    w2 = (torch.randn(G, I, K, generator=g) / 3).to(torch.float16).to(DEVICE)
    s = torch.tensor(sizes, device=DEVICE)
    op = MoeExpertMLPFwdOp()
    on = pdl.overlap_supported(x.device)
    with recording() as launches:
        got = op(x, w13, w2, s)
    names = [k.__name__ for k, *_ in launches]
    assert names[1] == "_gated_kernel" and len(names) == 3, names
    assert all(n.startswith("_grouped_gemm") for n in (names[0], names[2])), names
    for *_, kw in launches:
        assert (kw["PDL"], kw.get("launch_pdl", False)) == (on, on)
    # (the gated kernel's prepared replays are kept by shape: dropped when the switch flips)
    monkeypatch.setattr(pdl, "ENABLED", False)
    SM._PREPARED.clear()
    with recording() as plain:
        again = MoeExpertMLPFwdOp()(x, w13, w2, s)
    assert all(kw["PDL"] is False and "launch_pdl" not in kw for *_, kw in plain)
    assert torch.equal(got, again)
    monkeypatch.setattr(pdl, "ENABLED", True)
    SM._PREPARED.clear()
    if x.is_cuda:
        out = op(x, w13, w2, s)   # warm, then captured
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = op(x, w13, w2, s)
        for _ in range(3):
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, got)


@pytest.mark.skipif(DEVICE not in TRITON_DEVICES,
                    reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("dim", [-1, 0], ids=["rows", "columns"])
def test_softmax_two_launch_plans_overlapped_or_not(monkeypatch, dim):
    """The softmax plans of two launches (decode rows cut in chunks; long columns cut in
    chunks, not cooperating): both launches carry the overlap where the device has it, and
    the result is the same to the bit with it off."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 5000, generator=g) * 3).to(DEVICE)
    if dim == 0:
        x = x.t().contiguous()[:, :2]       # [5000, 2]: a long column a strip
        plan = softmax_plan(1, 5000, 2, 4, sm_count=132, max_reg=1024)
        plan = dataclasses.replace(plan, coop=False)   # the two-launch form of long columns
    else:
        plan = softmax_plan(3, 5000, 1, 4, sm_count=1000, max_reg=1024)
    assert plan.kind == ("split" if dim == -1 else "strided") and plan.chunks > 1
    on = pdl.overlap_supported(x.device)
    out = torch.empty_like(x)
    with recording() as launches:
        softmax_triton(x, dim, out, log=True, plan=plan)
    assert len(launches) == 2
    for *_, kw in launches:
        assert (kw["PDL"], kw.get("launch_pdl", False)) == (on, on)
    monkeypatch.setattr(pdl, "ENABLED", False)
    plain = torch.empty_like(x)
    softmax_triton(x, dim, plain, log=True, plan=plan)
    assert torch.equal(out, plain)
    torch.testing.assert_close(out.double(), torch.log_softmax(x.double(), dim),
                               rtol=2e-5, atol=2e-5)
