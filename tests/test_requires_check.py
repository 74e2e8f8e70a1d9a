"""`OPSPEC_CHECK_REQUIRES=1`: a call checks its metadata tensors' `requires` on their contents.

Off by default (the caller guarantees contents, and reading them costs a copy to the host);
the setting is read when an op class is first used, so each test defines its classes after
setting it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from opspec.schema.errors import SignatureError

from runtime_user_ops import expect_error, load_module

SPEC = """\
RqSegFwdOp:
  family: rq
  status: implemented
  signature:
    forall: {M: Dim, G: Dim, I: "DType[int32 | int64]"}
    params:
      longest: {type: int}
    inputs:
      x: {dtype: float32, shape: "[M]"}
      offsets:
        dtype: I
        shape: "[G + 1]"
        values: "as_tensor(prefix_sum(balanced_sizes(M, G)))"
        requires: ["prefix_offsets(M)", "max_segment(longest)"]
      sizes:
        dtype: I
        shape: "[G]"
        optional: true
        values: "as_tensor(balanced_sizes(M, G))"
        requires: ["sums_to(M)", "in_range(0, M + 1)"]
    outputs:
      y: {dtype: float32, shape: "[M]"}
  workloads:
  - {M: 12, G: 3, longest: 4, some: [sizes], dtype_cases: [{I: int64}], label: small}
  - {M: 12, G: 3, longest: 4, dtype_cases: [{I: int32}], label: small-no-sizes}
  roofline: {flops: "M"}
"""

MODULE = '''
    from opspec.ops.op import Op
    class RqSegFwdOp(Op):
        manifest = "rq.yaml"
        def __init__(self, longest):
            self.longest = longest
            super().__init__()
        def forward(self, x, offsets, sizes=None):
            return x * 2
    '''


@pytest.fixture
def seg(tmp_path, monkeypatch):
    def make(on: bool):
        monkeypatch.setenv("OPSPEC_CHECK_REQUIRES", "1" if on else "0")
        (tmp_path / "rq.yaml").write_text(SPEC)
        return load_module(tmp_path, f"rq_ops_{int(on)}", MODULE).RqSegFwdOp
    return make


def _i64(*v):
    return torch.tensor(v, dtype=torch.int64)


@pytest.mark.parametrize("offsets, sizes, path, message", [
    ((0, 4, 8, 11), None, "signature.inputs.offsets.requires.0",
     "input offsets: `requires` `prefix_offsets(M)` does not hold with M=12; it ends at 11"),
    ((1, 4, 8, 12), None, "signature.inputs.offsets.requires.0",
     "input offsets: `requires` `prefix_offsets(M)` does not hold with M=12; it starts at "
     "1, not 0"),
    ((0, 6, 5, 12), None, "signature.inputs.offsets.requires.0",
     "input offsets: `requires` `prefix_offsets(M)` does not hold with M=12; it decreases "
     "from index 1 to 2 (6 to 5)"),
    ((0, 2, 8, 12), None, "signature.inputs.offsets.requires.1",
     "input offsets: `requires` `max_segment(longest)` does not hold with longest=4; its "
     "largest step, 6, is from index 1 to 2 (2 to 8)"),
    ((0, 4, 8, 12), (4, 4, 3), "signature.inputs.sizes.requires.0",
     "input sizes: `requires` `sums_to(M)` does not hold with M=12; its elements sum to 11"),
    ((0, 4, 8, 12), (13, -5, 4), "signature.inputs.sizes.requires.1",
     "input sizes: `requires` `in_range(0, M + 1)` does not hold with M=12; contents "
     "[13, -5, 4]"),
])
def test_contents_that_break_a_requires_are_refused(seg, offsets, sizes, path, message):
    op = seg(True)(longest=4)
    x = torch.ones(12)
    with pytest.raises(SignatureError) as ei:
        op(x, _i64(*offsets), None if sizes is None else _i64(*sizes))
    msg = expect_error(ei, SignatureError, "RqSegFwdOp", path, message)
    assert msg.startswith(f"RqSegFwdOp: {message} [{path} at ")


def test_the_spec_is_proven(tmp_path):
    from opspec.schema.loader import load_paths
    from opspec.solver.run import prove_manifest

    (tmp_path / "rq.yaml").write_text(SPEC)
    (result,) = prove_manifest(load_paths([tmp_path], strict=True)).specs
    assert result.verdict == "proven", [d.render() for d in result.diagnostics]


def test_contents_that_keep_every_requires_run(seg):
    op = seg(True)(longest=4)
    x = torch.ones(12)
    assert torch.equal(op(x, _i64(0, 4, 8, 12)), x * 2)           # sizes omitted
    assert torch.equal(op(x, _i64(0, 4, 8, 12), _i64(4, 4, 4)), x * 2)
    assert op.last_call.indices["G"] == 3


def test_meta_tensors_have_no_contents_to_check(seg):
    op = seg(True)(longest=4)
    y = op(torch.empty(12, device="meta"), torch.empty(4, dtype=torch.int64, device="meta"))
    assert y.device.type == "meta" and y.shape == (12,)


def test_off_by_default_contents_are_not_read(seg):
    op = seg(False)(longest=4)
    x = torch.ones(12)
    # The caller's guarantee is taken: broken offsets reach forward.
    assert torch.equal(op(x, _i64(0, 9, 8, 1)), x * 2)


def test_bundled_varlen_attention_offsets_checked_in_a_fresh_process():
    script = textwrap.dedent("""
        import torch
        from opspec.ops import GroupedQueryAttentionVarlenFwdOp as V
        q = torch.randn(10, 4, 16, dtype=torch.float16)
        k = torch.randn(12, 2, 16, dtype=torch.float16)
        op = V(max_seqlen_q=6, max_seqlen_k=8)
        i32 = lambda *v: torch.tensor(v, dtype=torch.int32)
        op(q, k, k, i32(0, 4, 10), i32(0, 5, 12))
        try:
            op(q, k, k, i32(0, 4, 9), i32(0, 5, 12))
        except ValueError as e:
            print(e)
        """)
    env = {**os.environ, "OPSPEC_CHECK_REQUIRES": "1", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(
        "GroupedQueryAttentionVarlenFwdOp: input cu_seqlens_q: `requires` "
        "`prefix_offsets(total_q)` does not hold with total_q=10; it ends at 9 "
        "[signature.inputs.cu_seqlens_q.requires.0 at "), out.stdout


RELATION = """\
RqRelFwdOp:
  family: rqrel
  status: implemented
  signature:
    forall: {M: Dim, G: Dim}
    inputs:
      x: {dtype: float32, shape: "[M]"}
      sizes: {dtype: int64, shape: "[G]", values: "as_tensor(balanced_sizes(M, G))"}
      starts:
        dtype: int64
        shape: "[G]"
        values: "exclusive_prefix_sum(balanced_sizes(M, G))"
        requires: ["exclusive_prefix_of(sizes)"]
    outputs:
      y: {dtype: float32, shape: "[M]"}
  workloads:
  - {M: 12, G: 3, label: small}
  roofline: {flops: "M"}
"""


def test_a_requires_reads_another_tensors_contents(tmp_path, monkeypatch):
    # `exclusive_prefix_of(sizes)` relates two metadata tensors: both are read back.
    monkeypatch.setenv("OPSPEC_CHECK_REQUIRES", "1")
    (tmp_path / "rqrel.yaml").write_text(RELATION)
    mod = load_module(tmp_path, "rq_rel_ops", '''
        from opspec.ops.op import Op
        class RqRelFwdOp(Op):
            manifest = "rqrel.yaml"
            def forward(self, x, sizes, starts):
                return x + 1
        ''')
    op = mod.RqRelFwdOp()
    x = torch.zeros(12)
    assert torch.equal(op(x, _i64(5, 4, 3), _i64(0, 5, 9)), x + 1)
    with pytest.raises(SignatureError) as ei:
        op(x, _i64(5, 4, 3), _i64(0, 4, 9))
    expect_error(ei, SignatureError, "RqRelFwdOp", "signature.inputs.starts.requires.0",
                 "input starts: `requires` `exclusive_prefix_of(sizes)` does not hold; "
                 "contents [0, 4, 9]")


def test_every_setting_is_read_in_one_place():
    # `opspec.schema.settings` reads the OPSPEC_* environment; no other module does.
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    readers = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith((".", "tests/", "benchmarks/", "build/")) or "/." in rel:
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"environ(\.get)?\s*[\[(]\s*[\"']OPSPEC_", text):
            readers.append(rel)
    assert readers == ["schema/settings.py"], readers
