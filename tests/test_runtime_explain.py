"""`opspec explain OP`: the spec in mathematical form, the proven solving order per branch
and the code generated from it."""

from __future__ import annotations

from opspec.cli.main import main


def test_explain_gemm(capsys):
    rc = main(["explain", "GemmFwdOp"])
    out = capsys.readouterr().out
    assert rc in (0, None)
    # both cases of the family
    assert "Mat[t: Bool, R: Dim, C: Dim] = match t { false → [R, C]; true → [C, R] }" in out
    # the solving order, per branch
    assert "branch trans_a=false, trans_b=false:" in out
    assert "branch trans_a=true, trans_b=true:" in out
    assert "M := a axis 0" in out and "K := a axis 1" in out
    assert "K := a axis 0" in out and "M := a axis 1" in out     # trans_a
    assert "b axis 0 == K" in out and "N := b axis 1" in out
    assert "T := a.dtype" in out and "b.dtype == T" in out
    # the generated code of every branch
    assert "def call_GemmFwdOp" in out and "def finish_GemmFwdOp" in out
    assert out.count("def call_GemmFwdOp") == 4
    assert "compile boundary: opspec::gemm_fwd_op" in out


def test_explain_silu_and_mul(capsys):
    rc = main(["explain", "SiluAndMulFwdOp"])
    out = capsys.readouterr().out
    assert rc in (0, None)
    assert "N := x axis 1 / 2   [exact, >= 0]" in out
    assert "def call_SiluAndMulFwdOp" in out


def test_explain_places_the_axes_after_a_splat(capsys):
    # `[*B, *normalized_shape]`: B is every axis the normalized shape leaves, and the
    # normalized shape is checked where it is, not at "axis 1".
    assert main(["explain", "RMSNormFwdOp"]) in (0, None)
    out = capsys.readouterr().out
    assert "[rank] input.dim() >= len(normalized_shape)" in out
    assert "[solve-splat] B := input.shape[:input.dim() - len(normalized_shape)]" in out
    assert ("[check-axis] input.shape[len(B):len(B) + len(normalized_shape)] == "
            "normalized_shape") in out
    assert "[rank] weight.dim() == len(normalized_shape)" in out
    assert "[check-axis] weight.shape[:len(normalized_shape)] == normalized_shape" in out
    # `[*B, D]`: D is the axis after B; `[*S]`: S is the whole shape.
    assert main(["explain", "FusedAddRMSNormFwdOp"]) in (0, None)
    out = capsys.readouterr().out
    assert "[solve-splat] B := input.shape[:input.dim() - 1]" in out
    assert "[solve-axis] D := input.shape[len(B)]" in out
    assert "[check-axis] residual.shape[:len(B)] == B" in out
    assert main(["explain", "SoftmaxFwdOp"]) in (0, None)
    out = capsys.readouterr().out
    assert "[solve-splat] S := input.shape    " in out and "dim() >= 0 +" not in out
