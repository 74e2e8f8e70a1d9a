"""The generator driver (`opspec.solver.generators`) that the `workload` check, the `effect`
check and the runtime's `Case.inputs` share: laws of its solving and ordering, checked on a
toy spec where a page table waits for the batch size that a later-declared offsets tensor
gives through `[2 * B + 1]`."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opspec.schema.elaborate import elaborate, elaborate_adts
from opspec.schema.loader import load_paths
from opspec.schema.printer import print_expr
from opspec.solver import generators as G
from opspec.solver.prove import prove_spec

TOY = """\
ToyGenFwdOp:
  family: toy
  status: spec-only
  signature:
    forall: {B: Dim, W: Dim, NP: Dim, lens: "Seq[Int]"}
    inputs:
      pool: {dtype: float32, shape: "[NP]"}
      table: {dtype: int32, shape: "[B, W]", values: "paged_block_table(B, W, NP)", requires: ["in_range(0, NP)"]}
      cu: {dtype: int32, shape: "[2 * B + 1]", values: "prefix_sum(lens)"}
    outputs:
      y: {dtype: int32, shape: "[B, W]"}
  workloads:
    - {W: 2, NP: 64, lens: [3, 5], label: two}
  roofline: {flops: "1"}
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    (root / "toy.yaml").write_text(TOY)
    manifest = load_paths([root], strict=True)
    loaded = manifest.specs["ToyGenFwdOp"]
    el, diags = elaborate(loaded, elaborate_adts(manifest.adts)[0])
    assert not diags
    result = prove_spec(el, loaded)
    assert result.verdict == "proven", [d.render() for d in result.diagnostics]
    (branch,) = [b for b in result.plan.branches if b.excluded_by is None]
    return el, branch


def _run(toy, lens: list[int], *, reverse: bool = False, seed: str = "s"):
    el, branch = toy
    calls, lets = G.branch_program(el, branch)
    if reverse:
        calls = calls[::-1]
    shapes = {n: sh for n, sh, _ in branch.tensors}
    env = {"W": 2, "NP": 64, "lens": tuple(lens)}
    run = G.run_generators(el, calls, shapes, env, random.Random(seed), lets)
    return run, env


def test_the_table_waits_for_the_batch_its_later_neighbour_gives(toy):
    el, branch = toy
    calls, _ = G.branch_program(el, branch)
    assert [n for n, _ in calls] == ["table", "cu"]           # declaration order
    run, env = _run(toy, [3, 5])
    assert list(run.generated) == ["cu", "table"]             # the order they could run
    assert env["B"] == 1 and run.generated["cu"] == [0, 3, 8]
    assert len(run.generated["table"]) == 1 and run.never_known == [] and run.unsolved == []


@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(0, 9), max_size=16))
def test_an_axis_linear_in_one_index_is_solved_exactly_when_it_can_be(toy, lens):
    """`cu` has len(lens) + 1 entries: `[2 * B + 1]` gives B = (n - 1) / 2 when that is a
    non-negative integer, and the table is then made [B, W]; otherwise the driver says the
    axis cannot be met (`divide`, naming B) and makes no table."""
    n = len(lens) + 1
    if (n - 1) % 2 == 0:
        run, env = _run(toy, lens)
        assert env["B"] == (n - 1) // 2
        table = run.generated["table"]
        assert len(table) == env["B"] and all(len(r) == 2 for r in table)
        pages = [p for r in table for p in r]
        assert len(set(pages)) == len(pages) and all(0 <= p < 64 for p in pages)
    else:
        with pytest.raises(G.GeneratedAxisError) as info:
            _run(toy, lens)
        assert info.value.reason == "divide" and info.value.detail == "B"
        assert info.value.item[:2] == ("cu", 0) and info.value.item[3] == n


@settings(max_examples=30, deadline=None)
@given(lens=st.lists(st.integers(0, 9), min_size=1, max_size=12), seed=st.text(max_size=4))
def test_contents_do_not_depend_on_declaration_order(toy, lens, seed):
    """Generators run when their arguments are known, so listing them in the other order
    draws the same contents from the same seed."""
    lens = lens + [1] * (len(lens) % 2)       # an even count: 2 * B + 1 entries in cu
    a, env_a = _run(toy, lens, seed=seed)
    b, env_b = _run(toy, lens, reverse=True, seed=seed)
    assert a.generated == b.generated and env_a["B"] == env_b["B"] == len(lens) // 2


def test_a_generator_whose_arguments_never_come_is_left_to_the_caller(toy):
    el, branch = toy
    calls, lets = G.branch_program(el, branch)
    shapes = {n: sh for n, sh, _ in branch.tensors}
    env = {"W": 2, "NP": 64}                                   # no `lens`: no B either
    run = G.run_generators(el, calls, shapes, env, random.Random(0), lets)
    assert run.generated == {} and run.never_known == ["table", "cu"]


def test_a_generator_that_raises_names_itself(toy):
    el, branch = toy
    calls, lets = G.branch_program(el, branch)
    shapes = {n: sh for n, sh, _ in branch.tensors}
    env = {"W": 80, "NP": 64, "lens": (1, 2)}                  # W > NP
    with pytest.raises(G.GeneratorError) as info:
        G.run_generators(el, calls, shapes, env, random.Random(0), lets)
    err = info.value
    assert (err.name, err.reason, print_expr(err.call)) == (
        "table", "raises", "paged_block_table(B, W, NP)")
    assert "W=80" in str(err.detail) and "NP=64" in str(err.detail)
