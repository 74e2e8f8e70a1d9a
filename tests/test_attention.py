"""The attention ops (GroupedQueryAttentionDenseFwdOp, GroupedQueryAttentionVarlenFwdOp):
the Triton flash-attention kernel against the torch references, the references against
torch's SDPA, the ops' checks, dispatch, compile boundary, roofline and workloads.

Without CUDA the Triton kernel runs through Triton's interpreter on the CPU
(tests/conftest.py sets TRITON_INTERPRET=1 first): sizes are tiny, and the kernel is tested
in float16 and float32 (the interpreter's bfloat16 `tl.dot` is wrong; the ops send
bfloat16 to the reference there). With CUDA the same tests run the compiled kernel.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opspec.kernels.attention as A
from opspec.kernels.attention import (
    CONFIGS, DECODE_MAX_Q, INTERPRETER_CONFIG, SHORT_CAUSAL, AttnConfig, DecodePlan, as_config,
    attention_config, attention_dense_reference, attention_dense_triton,
    attention_varlen_reference, attention_varlen_triton, decode_plan,
)
from opspec.kernels.launch import recording
from opspec.kernels.attention_impl import AttentionCall
from opspec.kernels.devices import TRITON_DEVICES, TRITON_INTERPRETED
from opspec.ops import GroupedQueryAttentionDenseFwdOp, GroupedQueryAttentionVarlenFwdOp
from opspec.ops.workloads import cases
from opspec.schema.errors import SignatureError, SignatureTypeError

from runtime_user_ops import expect_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# bfloat16 products only where tl.dot is right (compiled, not interpreted)
KERNEL_DTYPES = [torch.float16, torch.float32] + ([] if TRITON_INTERPRETED else [torch.bfloat16])
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}
DENSE, VARLEN = "GroupedQueryAttentionDenseFwdOp", "GroupedQueryAttentionVarlenFwdOp"

needs_triton = pytest.mark.skipif(DEVICE not in TRITON_DEVICES,
                                  reason="the Triton kernel needs CUDA or TRITON_INTERPRET=1")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=_gen(seed)).to(dtype).to(DEVICE)


def _dense(B, H, H_kv, S_q, S_kv, D, dtype, seed=0):
    return (_randn(B, H, S_q, D, dtype=dtype, seed=seed),
            _randn(B, H_kv, S_kv, D, dtype=dtype, seed=seed + 1),
            _randn(B, H_kv, S_kv, D, dtype=dtype, seed=seed + 2))


def _offsets(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=DEVICE)


def _varlen(q_lens, k_lens, H, H_kv, D, dtype, seed=0):
    q = _randn(sum(q_lens), H, D, dtype=dtype, seed=seed)
    k = _randn(sum(k_lens), H_kv, D, dtype=dtype, seed=seed + 1)
    v = _randn(sum(k_lens), H_kv, D, dtype=dtype, seed=seed + 2)
    return q, k, v, _offsets(q_lens), _offsets(k_lens)


def _close(got, want, dtype):
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def _ref64(fn, *tensors, **kw):
    """The reference on float64 copies, in float64."""
    return fn(*[t.double() if t.is_floating_point() else t for t in tensors], **kw)


# ============================================================================ the references

@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("S_q, S_kv", [(5, 5), (3, 9), (1, 1), (6, 0)])
def test_dense_reference_is_sdpa_with_gqa(is_causal, S_q, S_kv):
    if is_causal and S_q > S_kv:
        return
    q, k, v = (t.cpu().double() for t in _dense(2, 4, 2, S_q, S_kv, 8, torch.float32))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    got = attention_dense_reference(q, k, v, is_causal)
    torch.testing.assert_close(got, want.nan_to_num(0.0))
    # top-left: with S_q < S_kv the first query sees only the first key
    if is_causal and S_q < S_kv:
        torch.testing.assert_close(got[:, :, 0], v.repeat_interleave(2, dim=1)[:, :, 0])
    got = attention_dense_reference(q, k, v, is_causal, scale=0.3)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3,
                                          enable_gqa=True)
    torch.testing.assert_close(got, want.nan_to_num(0.0))


def test_varlen_reference_is_bottom_right_and_zero_where_nothing_is_seen():
    q_lens, k_lens = [3, 4, 2, 0], [5, 2, 0, 3]
    q, k, v, cq, ck = (t.cpu() for t in _varlen(q_lens, k_lens, 4, 2, 8, torch.float64))
    got = attention_varlen_reference(q, k, v, cq, ck, causal=True)
    # sequence 0: 3 queries, 5 keys: query i sees keys 0..i + 2 (the last sees all)
    qs, ks, vs = q[0:3].transpose(0, 1), k[0:5].transpose(0, 1), v[0:5].transpose(0, 1)
    mask = torch.ones(3, 5, dtype=torch.bool).tril(diagonal=2)
    want = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(got[0:3], want.transpose(0, 1))
    # sequence 1: 4 queries, 2 keys: queries 0 and 1 see nothing (zero), 2 sees key 0
    assert got[3:5].abs().max() == 0
    torch.testing.assert_close(got[5], v[5].repeat_interleave(2, dim=0))
    # sequence 2: no keys at all
    assert got[7:9].abs().max() == 0
    # not causal: every query sees its sequence's keys
    got = attention_varlen_reference(q, k, v, cq, ck, softmax_scale=0.5)
    want = F.scaled_dot_product_attention(qs, ks, vs, scale=0.5, enable_gqa=True)
    torch.testing.assert_close(got[0:3], want.transpose(0, 1))


# ============================================================================ Triton, dense

@needs_triton
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("B, H, H_kv, S_q, S_kv, D", [
    (1, 2, 2, 17, 17, 16),      # MHA (ratio 1), one partial block
    (2, 4, 2, 33, 45, 32),      # ratio 2, S_q < S_kv, partial blocks
    (1, 4, 1, 64, 64, 64),      # ratio 4 (MQA), whole blocks
    (1, 2, 1, 1, 3, 24),        # one query; a head size that is no power of two
    (1, 1, 1, 5, 40, 8),        # the smallest head size (padded to 16)
])
def test_dense_triton_matches_reference(B, H, H_kv, S_q, S_kv, D, is_causal, dtype):
    q, k, v = _dense(B, H, H_kv, S_q, S_kv, D, dtype)
    out = torch.empty_like(q)
    assert attention_dense_triton(q, k, v, out, is_causal) is out
    _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=is_causal), dtype)


@needs_triton
def test_dense_triton_strided_views_and_scales():
    # q, k, v as views of one [B, S, H + 2 * H_kv, D] projection, transposed to [B, H, S, D]
    B, S, H, H_kv, D = 2, 19, 4, 2, 32
    qkv = _randn(B, S, H + 2 * H_kv, D, dtype=torch.float16, seed=3)
    q = qkv[:, :, :H].transpose(1, 2)
    k = qkv[:, :, H:H + H_kv].transpose(1, 2)
    v = qkv[:, :, H + H_kv:].transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous()
    for scale in (None, 0.05, -0.2, 0.0):
        out = torch.empty(B, S, H, D, dtype=torch.float16, device=DEVICE).transpose(1, 2)
        attention_dense_triton(q, k, v, out, True, scale)
        _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=True, scale=scale),
               torch.float16)


@needs_triton
def test_dense_triton_large_tiles_and_reversed_causal_order():
    # the CUDA tile (BLOCK_M 128, BLOCK_N 64) on a few blocks, masked and unmasked
    q, k, v = _dense(1, 2, 1, 150, 200, 64, torch.float16, seed=5)
    out = torch.empty_like(q)
    attention_dense_triton(q, k, v, out, True, config=(128, 64, 4, 1))
    _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=True), torch.float16)


@needs_triton
@pytest.mark.parametrize("shape", [(0, 2, 3, 8), (1, 2, 0, 8), (2, 2, 3, 8)])
def test_dense_triton_empty(shape):
    B, H, S_q, D = shape
    S_kv = 0 if shape == (2, 2, 3, 8) else 4
    q, k, v = _dense(B, H, 1, S_q, S_kv, D, torch.float16)
    out = torch.full_like(q, float("nan"))
    attention_dense_triton(q, k, v, out)
    assert torch.equal(out, torch.zeros_like(q))  # no keys: zeros (empty: nothing)


def test_dense_triton_rejects_bad_arguments():
    q, k, v = (t.cpu() for t in _dense(1, 3, 2, 4, 4, 8, torch.float16))
    with pytest.raises(ValueError, match="H_kv dividing H=3"):
        attention_dense_triton(q, k, v, torch.empty_like(q))
    q, k, v = (t.cpu() for t in _dense(1, 2, 1, 4, 4, 8, torch.float16))
    with pytest.raises(TypeError, match="share a dtype"):
        attention_dense_triton(q, k.float(), v, torch.empty_like(q))
    with pytest.raises(ValueError, match="out must have q's shape"):
        attention_dense_triton(q, k, v, torch.empty(1, 2, 4, 4, dtype=torch.float16))


def test_configs():
    assert attention_config(128, "cuda") == (128, 64, 8, 2, "tma+lazy", 128)
    assert attention_config(64, "cuda") == AttnConfig(128, 64, 8, 3)
    assert attention_config(8, "cuda") == CONFIGS[0][1]
    assert attention_config(256, "cuda") == (64, 32, 8, 2, "base", 0)
    assert attention_config(128, "cpu") == INTERPRETER_CONFIG
    with pytest.raises(ValueError, match="over the kernel's limit 256"):
        attention_config(264, "cuda")
    # short causal rows take the smaller tile; long or full ones the default
    (max_q, max_d, short), (max_long, _, long) = SHORT_CAUSAL
    assert attention_config(128, "cuda", True, max_q) == short == AttnConfig(64, 64, 4, 3, "tma")
    assert attention_config(128, "cuda", True, max_q + 1) == long == AttnConfig(128, 64, 8, 3, "gqa")
    assert attention_config(128, "cuda", True, max_long + 1) == CONFIGS[1][1]
    assert attention_config(128, "cuda", False, 16) == CONFIGS[1][1]
    assert attention_config(256, "cuda", True, 16) == CONFIGS[2][1]
    # varlen calls take their own table where it covers the head size, causal or not
    from opspec.kernels.attention import VARLEN_CONFIGS
    (max_vd, vcfg), = VARLEN_CONFIGS
    assert vcfg == AttnConfig(64, 64, 4, 3, "tma+gqa") and max_vd == 128
    for causal, sq in ((False, None), (True, 16), (True, 8192), (True, 100000)):
        assert attention_config(128, "cuda", causal, sq, varlen=True) == vcfg
    assert attention_config(256, "cuda", True, 16, varlen=True) == CONFIGS[2][1]
    assert attention_config(128, "cpu", varlen=True) == INTERPRETER_CONFIG
    # tuples: 4 fields are the base variant
    assert as_config((64, 32, 4, 2)) == AttnConfig(64, 32, 4, 2, "base", 0)
    assert as_config((64, 32, 4, 2, "tma+lazy")).flags() == {"tma", "lazy"}
    assert AttnConfig(64, 32, 4, 2).flags() == frozenset()
    with pytest.raises(ValueError, match=r"unknown attention kernel variant\(s\) \['fast'\]"):
        AttnConfig(64, 32, 4, 2, "tma+fast").flags()


#: the variants through the interpreter: each flag alone, all together, a register cap
VARIANT_CONFIGS = [
    (32, 16, 4, 1, "tma"), (32, 16, 4, 1, "prescale"), (32, 16, 4, 1, "lazy"),
    (32, 16, 4, 1, "gqa"), (32, 16, 4, 2, "ws"), (32, 16, 4, 1, "pipe"),
    (16, 32, 4, 2, "tma+prescale+lazy+gqa+pipe", 128),
]


# float16 for every variant; the other dtypes for all flags together (the interpreter is slow)
_VARIANT_CASES = ([(c, torch.float16) for c in VARIANT_CONFIGS]
                  + [(VARIANT_CONFIGS[-1], d) for d in KERNEL_DTYPES if d != torch.float16])


@needs_triton
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("config, dtype", _VARIANT_CASES,
                         ids=lambda x: f"{x[4]}-{x[0]}x{x[1]}" if isinstance(x, tuple) else str(x))
def test_dense_triton_variants(config, is_causal, dtype):
    # ratio 2 with S_q < S_kv and partial blocks; ratio 4 with a head size padded 24 -> 32;
    # MQA with one unmasked key block (the pipelined loop's prologue and epilogue only)
    for B, H, H_kv, S_q, S_kv, D, seed in [(2, 4, 2, 33, 45, 32, 0), (1, 8, 2, 40, 40, 24, 1),
                                           (1, 2, 1, 3, 20, 16, 2)]:
        q, k, v = _dense(B, H, H_kv, S_q, S_kv, D, dtype, seed=seed)
        out = torch.full_like(q, float("nan"))
        assert attention_dense_triton(q, k, v, out, is_causal, config=config) is out
        _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=is_causal), dtype)


@needs_triton
@pytest.mark.parametrize("config", [(32, 16, 4, 1, "persist"), (16, 32, 4, 2, "tma+persist+lazy")],
                         ids=lambda c: c[4])
def test_persistent_grid_dense_and_varlen(config):
    # four programs under the interpreter, each walking several (query block, head) tiles
    for is_causal in (False, True):
        q, k, v = _dense(2, 4, 2, 33, 45, 32, torch.float16, seed=8)
        out = torch.full_like(q, float("nan"))
        attention_dense_triton(q, k, v, out, is_causal, config=config)
        _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=is_causal),
               torch.float16)
    q, k, v, cq, ck = _varlen([5, 0, 40], [9, 3, 30], 4, 2, 16, torch.float16)
    out = torch.full_like(q, float("nan"))
    attention_varlen_triton(q, k, v, cq, ck, 40, out, None, True, config=config)
    _close(out, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=True), torch.float16)


@needs_triton
@pytest.mark.parametrize("variant", ["lazy", "prescale+lazy", "pipe+lazy", "base"])
def test_dense_triton_lazy_rescale_with_growing_and_shrinking_scores(variant):
    # keys growing along the sequence: the row maximum jumps by far more than 2**8 from
    # block to block (the rescale runs), then shrinking keys (the rescale is skipped)
    q, k, v = _dense(1, 2, 1, 20, 64, 16, torch.float32, seed=4)
    ramp = torch.linspace(0.1, 3.0, 64, device=DEVICE)[:, None]
    for keys in (k * ramp, k * ramp.flip(0)):
        for scale in (None, 2.0, -1.5):
            out = torch.empty_like(q)
            attention_dense_triton(q, keys, v, out, True, scale, config=(16, 16, 4, 1, variant))
            _close(out, _ref64(attention_dense_reference, q, keys, v, is_causal=True,
                               scale=scale), torch.float32)


@needs_triton
def test_as_launched_drops_the_cap_with_the_descriptors():
    from opspec.kernels.attention import AttnConfig, as_launched
    tma = AttnConfig(128, 64, 8, 2, "tma+lazy", 128)
    assert as_launched(tma, True) is tma
    assert as_launched(tma, False) == AttnConfig(128, 64, 8, 2, "lazy", 0)
    assert as_launched(AttnConfig(64, 64, 4, 3, "tma"), False) == AttnConfig(64, 64, 4, 3)
    pointer = AttnConfig(128, 64, 8, 2, "lazy", 96)   # a cap asked for the pointer form stays
    assert as_launched(pointer, False) is pointer


@needs_triton
def test_kv_for_loads_copies_only_rows_no_load_can_take():
    from opspec.kernels.attention import kv_for_loads

    def kv(D, pad, dtype=torch.bfloat16):
        return _randn(1, 2, 32, D + pad, dtype=dtype, seed=5)[..., :D]

    def decide(k, tma, rank=4):
        k2, v2, desc = kv_for_loads(k, k, rank, tma)
        return ("same" if k2 is k and v2 is k else
                "copy" if k2.is_contiguous() and v2.is_contiguous() else "?"), desc

    assert decide(kv(128, 0), True) == ("same", True)
    assert decide(kv(128, 0), False) == ("same", False)
    # 264-byte rows: no descriptor, and no alignment the pointer loads can prove
    assert decide(kv(128, 4), True) == ("copy", True)
    assert decide(kv(128, 4), False) == ("copy", False)
    # 272-byte rows: a descriptor takes them; 136 elements are not a multiple of 16
    assert decide(kv(128, 8), True) == ("same", True)
    assert decide(kv(128, 8), False) == ("copy", False)
    # an expanded head axis (stride 0): no descriptor, but aligned rows: no materialising
    expanded = kv(128, 0)[:, :1].expand(1, 4, 32, 128)
    assert decide(expanded, True) == ("same", False)
    # a head size of 24: a contiguous copy's 48-byte rows suit descriptors, not the pointer
    # loads (24 elements)
    assert decide(kv(24, 4), True) == ("copy", True)
    assert decide(kv(24, 4), False) == ("same", False)
    # varlen's packed [total_k, H_kv, D]
    packed = _randn(40, 2, 132, dtype=torch.bfloat16, seed=6)[..., :128]
    assert decide(packed, True, rank=3) == ("copy", True)
    # one tensor as keys and values: one copy
    k2, v2, _ = kv_for_loads(kv(128, 4), kv(128, 4), 4, True)
    assert k2 is not v2
    same = kv(128, 4)
    k2, v2, _ = kv_for_loads(same, same, 4, True)
    assert k2 is v2 and k2 is not same


@needs_triton
def test_kv_for_loads_reads_in_place_without_memory_for_a_copy(monkeypatch):
    import opspec.kernels.tiling as T
    from opspec.kernels.attention import kv_for_loads

    def clone_without_memory(self, **kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    # the helper turns the allocator's error into None ...
    monkeypatch.setattr(torch.Tensor, "clone", clone_without_memory)
    assert T.contiguous_copy(torch.ones(2, 16)) is None
    monkeypatch.undo()
    # ... and the keys and values are then read where they are
    monkeypatch.setattr("opspec.kernels.attention.contiguous_copy", lambda t: None)
    k = _randn(1, 2, 32, 132, dtype=torch.bfloat16, seed=5)[..., :128]
    k2, v2, desc = kv_for_loads(k, k, 4, True)
    assert k2 is k and v2 is k and not desc


@needs_triton
@pytest.mark.parametrize("layout", ["padded-rows", "expanded-heads"])
def test_dense_triton_keys_in_any_layout(layout):
    # padded rows (40-byte rows: copied, then descriptors) and an expanded key/value head
    # axis (stride 0: the pointer loads, the cap dropped), under a tma configuration
    B, S, H, D = 1, 21, 4, 16
    if layout == "padded-rows":
        kv = _randn(B, 1, S, D + 4, dtype=torch.float16, seed=6)[..., :D]
    else:
        kv = _randn(B, 1, S, D, dtype=torch.float16, seed=6).expand(B, 2, S, D)
    q = _randn(B, H, S, D, dtype=torch.float16, seed=7)
    out = torch.empty_like(q)
    attention_dense_triton(q, kv, kv, out, True, config=(16, 16, 4, 1, "tma", 64))
    _close(out, _ref64(attention_dense_reference, q, kv, kv, is_causal=True), torch.float16)


_SM90_SCRIPT = r"""
import json, re, sys
import opspec.kernels.attention as K
import sm90_build as sm90

fn = K._attn_fwd_kernel
H, S, D = 32, 4096, 128
ints = dict(stride_qb=H*S*D, stride_qh=S*D, stride_qs=D, stride_kb=8*S*D, stride_kh=S*D,
            stride_ks=D, stride_vb=8*S*D, stride_vh=S*D, stride_vs=D, stride_ob=H*S*D,
            stride_oh=S*D, stride_os=D, S_q=S, S_kv=S, H=H, GROUP=4, HEAD_DIM=D,
            BATCH=3, N_M=33)
out = {}
builds = [("dense", False, K.attention_config(D, "cuda")),
          ("varlen", True, K.attention_config(D, "cuda", True, S, varlen=True)),
          ("varlen-tma-lazy", True, K.AttnConfig(128, 64, 8, 3, "tma+lazy")),
          ("dense-short", False, K.attention_config(D, "cuda", True, 1024)),
          ("dense-tma-lazy", False, K.AttnConfig(128, 64, 8, 3, "tma+lazy")),
          ("dense-tma-pipe", False, K.AttnConfig(128, 64, 8, 2, "tma+pipe")),
          ("dense-tma-persist", False, K.AttnConfig(128, 64, 8, 2, "tma+persist")),
          # the default where a descriptor cannot take K or V: pointer loads, no cap ...
          ("dense-pointer", False, K.as_launched(K.attention_config(D, "cuda"), False)),
          # ... and, the control, the same pointer form under the TMA form's cap
          ("control-pointer-capped", False,
           K.as_launched(K.attention_config(D, "cuda"), False)._replace(
               maxnreg=K.attention_config(D, "cuda").maxnreg))]
for label, varlen, cfg in builds:
    bm, bn, warps, stages = cfg[:4]
    fl = cfg.flags()
    tma = "tma" in fl
    consts = dict(VARLEN=varlen, CAUSAL=True, BOTTOM_RIGHT=varlen, EVEN_D=True, NEG_SCALE=False,
                  PRECISION="tf32", BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=D,
                  KV_TMA=tma, PRESCALE="prescale" in fl, LAZY="lazy" in fl, LAZY_TAU=8.0,
                  GQA_ORDER="gqa" in fl, WARP_SPEC="ws" in fl, PIPE="pipe" in fl, PERSIST="persist" in fl,
                  stride_qd=1, stride_kd=1, stride_vd=1, stride_od=1,
                  PDL=False)   # a plain launch (opspec.kernels.pdl), not a pointer below
    # the tensors: K and V as TMA descriptors in the TMA variants, the others pointers
    args = dict(ints, qk_scale="fp32")
    box = f"{bn},1,{D}" if varlen else f"1,1,{bn},{D}"
    for name in fn.arg_names:
        if name not in consts and name not in args:
            args[name] = (f"tensordesc<bf16[{box}]>" if tma and name in ("K", "V")
                          else "*i32" if name.startswith("CU_") else "*bf16")
    # the launcher's register cap too: spills show in the SASS (STL), not the PTX
    c = sm90.build(fn, args, consts, warps, stages,
                   **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))
    ptx = c.ptx
    out[label] = {"wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
                  "tma": ptx.count("cp.async.bulk.tensor"), "want_tma": tma,
                  "local": ptx.count(".local") + c.sass.count("STL"), "shared": c.shared}
json.dump(out, sys.stdout)
"""


def test_kernel_builds_for_sm90():
    """The causal kernel, dense and varlen, compiles for sm_90 with the D = 128 tiles as the
    launcher specialises them (the default, the short-causal one, the TMA + lazy variant),
    under their register caps: the products are wgmma, the TMA variants' loads (varlen's
    default included) are bulk tensor copies, nothing goes to local memory (no spill in
    the SASS), and the shared memory fits the H200's 227 KiB. In a fresh process: under the interpreter,
    triton.language is patched."""
    from sm90_build import run_script

    builds = run_script(_SM90_SCRIPT)
    assert len(builds) == 9
    # the control: the pointer form spills under the descriptor form's register cap, which
    # is why as_launched drops the cap with the descriptors
    control = builds.pop("control-pointer-capped")
    assert control["local"] > 0 and not control["want_tma"], control
    for label, facts in builds.items():
        assert facts["wgmma"] > 0 and facts["local"] == 0, (label, facts)
        assert (facts["tma"] > 0) == facts["want_tma"], (label, facts)
        assert facts["shared"] <= 227 * 1024, (label, facts)


# ============================================================================ Triton, varlen

@needs_triton
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("q_lens, k_lens, H, H_kv, D", [
    ([5, 0, 40, 17], [9, 3, 40, 10], 4, 2, 32),   # an empty sequence; len_q > len_k
    ([33], [64], 4, 1, 64),                        # chunked prefill (bottom-right)
    ([3, 7, 1], [3, 7, 1], 2, 2, 16),              # self-attention, MHA
    ([4, 2], [0, 6], 4, 4, 24),                    # a sequence without keys
])
def test_varlen_triton_matches_reference(q_lens, k_lens, H, H_kv, D, causal, dtype):
    q, k, v, cq, ck = _varlen(q_lens, k_lens, H, H_kv, D, dtype)
    out = torch.full_like(q, float("nan"))
    assert attention_varlen_triton(q, k, v, cq, ck, max(q_lens), out, None, causal) is out
    _close(out, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=causal), dtype)


@needs_triton
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("config", VARIANT_CONFIGS, ids=lambda c: f"{c[4]}-{c[0]}x{c[1]}")
def test_varlen_triton_variants(config, causal):
    # the tma variants load through [total_k, H_kv, D] descriptors; an empty sequence,
    # len_q > len_k
    q, k, v, cq, ck = _varlen([5, 0, 40, 17], [9, 3, 40, 10], 4, 2, 32, torch.float16)
    out = torch.full_like(q, float("nan"))
    attention_varlen_triton(q, k, v, cq, ck, 40, out, None, causal, config=config)
    _close(out, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=causal),
           torch.float16)


@needs_triton
@pytest.mark.parametrize("config", [None, (16, 16, 4, 1, "tma"), (16, 16, 4, 1, "tma+pipe")],
                         ids=["default", "tma", "tma-pipe"])
def test_varlen_triton_keys_past_a_sequence_stay_out(config):
    """A varlen TMA box runs past its sequence into the next one's keys: those rows must not
    reach the output, even where the next sequence's values are NaN or inf (0 * NaN is NaN
    in a product). Sequence 0 has 5 keys, so its last 16-key block holds 11 of sequence 1's;
    sequence 1's values are NaN (its own output is NaN, as the reference's)."""
    from opspec.kernels.attention import _tma_ok
    q, k, v, cq, ck = _varlen([3, 4], [5, 20], 2, 1, 16, torch.float16, seed=3)
    assert _tma_ok(k, 3) and _tma_ok(v, 3)
    v[5:] = float("nan")
    k[5:7] = float("inf")
    for causal in (False, True):
        out = torch.empty_like(q)
        attention_varlen_triton(q, k, v, cq, ck, 4, out, None, causal, config=config)
        want = _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=causal)
        assert torch.isfinite(out[:3]).all(), (config, causal)
        _close(out[:3], want[:3], torch.float16)
        assert torch.isnan(out[3:]).all() and torch.isnan(want[3:]).all()


@needs_triton
def test_launchers_ask_for_their_layout_config(monkeypatch):
    """The tile launcher asks attention_config for the varlen table on varlen calls only."""
    import opspec.kernels.attention as K
    asked = []
    real = K.attention_config

    def spy(*args, **kwargs):
        asked.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(K, "attention_config", spy)
    q, k, v, cq, ck = _varlen([20, 3], [20, 30], 2, 1, 16, torch.float16)
    K.attention_varlen_triton(q, k, v, cq, ck, 20, torch.empty_like(q), None, True)
    qd, kd, vd = _dense(1, 2, 1, 20, 20, 16, torch.float16)
    K.attention_dense_triton(qd, kd, vd, torch.empty_like(qd), True)
    assert [a[0][4] if len(a[0]) > 4 else a[1].get("varlen") for a in asked] == [True, False]


def test_tma_ok_takes_descriptor_layouts_only():
    from opspec.kernels.attention import _tma_ok
    packed = torch.zeros(10, 6, 16, dtype=torch.float16)     # [T, H + 2 H_kv, D]
    assert _tma_ok(packed[:, 2:4], 3)                        # a view of a packed tensor
    assert not _tma_ok(packed[:, 2:4], 4)                    # not the dense rank
    assert not _tma_ok(torch.zeros(10, 2, 4, dtype=torch.float16), 3)  # rows of 8 bytes
    assert not _tma_ok(torch.zeros(10, 2, 16, dtype=torch.float16)[:, :, 1:9], 3)  # base
    assert not _tma_ok(torch.zeros(16, 10, 2, dtype=torch.float16).permute(1, 2, 0), 3)
    assert _tma_ok(torch.zeros(2, 2, 10, 16, dtype=torch.float16), 4)


@needs_triton
def test_varlen_triton_views_of_a_packed_qkv_tensor():
    T, H, H_kv, D = 23, 4, 2, 16
    qkv = _randn(T, H + 2 * H_kv, D, dtype=torch.float16, seed=9)
    q, k, v = qkv[:, :H], qkv[:, H:H + H_kv], qkv[:, H + H_kv:]
    cu = _offsets([10, 13])
    out = torch.empty(T, H, D, dtype=torch.float16, device=DEVICE)
    attention_varlen_triton(q, k, v, cu, cu, 13, out, 0.1, True)
    _close(out, _ref64(attention_varlen_reference, q, k, v, cu, cu, softmax_scale=0.1,
                       causal=True), torch.float16)


@needs_triton
def test_varlen_triton_empty():
    q, k, v, cq, ck = _varlen([0, 0], [3, 0], 2, 1, 8, torch.float16)
    out = torch.empty_like(q)
    assert attention_varlen_triton(q, k, v, cq, ck, 0, out) is out and out.numel() == 0
    q, k, v, cq, ck = _varlen([2, 1], [0, 0], 2, 1, 8, torch.float16)
    out = torch.full_like(q, float("nan"))
    attention_varlen_triton(q, k, v, cq, ck, 2, out)
    assert torch.equal(out, torch.zeros_like(q))


# ============================================================================ decode (split keys)

def test_decode_plan(monkeypatch):
    """Chunks sized from the keys of all sequences to about 2 programs an SM (the nearest
    even split of the longest sequence), whole key blocks each; the tile kernel
    (None) past 16 query rows a sequence or 64 tile rows (32 for head sizes over 128)."""
    monkeypatch.setattr(A, "_num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    # Llama-3-8B decode, one sequence of 1024 keys: 8 key/value heads, 33 chunks wanted,
    # one 64-key block each is the floor
    assert decode_plan(1, 1024, 4, 128, 8, cuda) == DecodePlan(16, 64, 4, 1, 64, 4)
    # 32 sequences of 4k: 3972 keys a program wanted; one chunk (256 programs), not two
    assert decode_plan(1, 4096, 4, 128, 8, cuda, 32 * 4096) == DecodePlan(1, 4096, 4, 1, 64, 4)
    # 16 sequences of mixed lengths (48960 keys, the longest 8192): 1484 keys a program
    # wanted; six chunks of 1408 for the longest, not two of 4096 that would outlast
    # every other program
    assert decode_plan(1, 8192, 4, 128, 8, cuda, 48960) == DecodePlan(6, 1408, 4, 1, 64, 4)
    # four draft tokens, 8 query heads a key/value head: 32 tile rows
    assert decode_plan(4, 4096, 8, 128, 8, cuda, 8 * 4096) == DecodePlan(4, 1024, 8, 4, 64, 4)
    # head size 256: 32-key blocks
    assert decode_plan(4, 1000, 8, 256, 8, cuda) == DecodePlan(32, 32, 8, 4, 32, 4)
    assert decode_plan(DECODE_MAX_Q + 1, 4096, 1, 128, 8, cuda) is None
    assert decode_plan(16, 4096, 8, 128, 8, cuda) is None     # 128 tile rows
    assert decode_plan(8, 4096, 8, 256, 8, cuda) is None      # 64 rows of 256
    assert decode_plan(1, 0, 4, 128, 8, cuda) is None


@needs_triton
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("B, H, H_kv, S_q, S_kv, D", [
    (2, 8, 2, 1, 100, 16),      # GQA 4, one query, keys over several chunks
    (1, 4, 4, 3, 37, 24),       # MHA, a head size that is not a power of two
    (3, 6, 2, 5, 64, 32),       # groups of 3 padded to 4, 5 queries padded to 8
    (1, 8, 1, 8, 50, 16),       # MQA: 64 tile rows
    (2, 2, 1, 16, 9, 16),       # as many queries as the path takes, fewer keys than rows
])
def test_split_path_dense_matches_reference(B, H, H_kv, S_q, S_kv, D, is_causal, dtype):
    """The split-key kernels (top-left causal mask: query i sees keys 0..i) against the
    float64 reference, launched as the split pair."""
    q, k, v = _dense(B, H, H_kv, S_q, S_kv, D, dtype, seed=5)
    out = torch.full_like(q, float("nan"))
    with recording() as launches:
        attention_dense_triton(q, k, v, out, is_causal, config="split")
    assert [kern.__name__ for kern, *_ in launches] == ["_attn_split_kernel",
                                                        "_attn_combine_kernel"]
    _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=is_causal), dtype)


@needs_triton
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("max_k", [None, 20], ids=["max-k-unknown", "max-k-short"])
def test_split_path_varlen_matches_reference(max_k, causal, dtype):
    """Uneven sequences, one without keys, one without queries, queries past their keys
    (bottom-right causal); a max_seqlen_k below the real lengths only sizes the chunks:
    the last chunk of a head runs to its sequence's end, so every key is still seen."""
    q_lens, k_lens = [1, 2, 0, 1, 3, 2], [40, 0, 10, 70, 5, 1]
    q, k, v, cq, ck = _varlen(q_lens, k_lens, 4, 2, 16, dtype, seed=7)
    out = torch.full_like(q, float("nan"))
    with recording() as launches:
        attention_varlen_triton(q, k, v, cq, ck, 3, out, None, causal, max_seqlen_k=max_k)
    assert [kern.__name__ for kern, *_ in launches] == ["_attn_split_kernel",
                                                        "_attn_combine_kernel"]
    _close(out, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=causal), dtype)


@needs_triton
def test_split_kernel_launch_order(monkeypatch):
    """The split kernel is launched heads first, grid (sequences x kv heads, chunks), and
    launched chunks first it writes the same bits (the order only decides which programs
    run together)."""
    assert A.DECODE_HEADS_FIRST is True
    q_lens, k_lens = [1, 2, 1], [40, 70, 5]
    q, k, v, cq, ck = _varlen(q_lens, k_lens, 4, 2, 16, torch.float16, seed=5)
    outs, grids = {}, {}
    for first in (True, False):
        monkeypatch.setattr(A, "DECODE_HEADS_FIRST", first)
        outs[first] = torch.full_like(q, float("nan"))
        with recording() as launches:
            attention_varlen_triton(q, k, v, cq, ck, 2, outs[first], None, True,
                                    max_seqlen_k=70)
        (grids[first], kw), = [(grid, kw) for kern, grid, args, kw in launches
                               if kern.__name__ == "_attn_split_kernel"]
        assert kw["HEADS_FIRST"] is first
    splits = decode_plan(2, 70, 2, 16, 2, q.device, sum(k_lens)).splits
    assert splits > 1
    assert grids[True] == (3 * 2, splits) and grids[False] == (splits, 3 * 2)
    assert torch.equal(outs[True], outs[False])
    _close(outs[True], _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=True),
           torch.float16)


@needs_triton
def test_split_path_routing_and_refusal():
    """Decode shapes take the split pair by default, prefill shapes and a forced tile the
    tile kernel; forcing the split on a call it cannot take names the limits."""
    q, k, v = _dense(1, 4, 2, 1, 40, 16, torch.float16)
    for config, kernels in [(None, ["_attn_split_kernel", "_attn_combine_kernel"]),
                            (INTERPRETER_CONFIG, ["_attn_fwd_kernel"])]:
        out = torch.empty_like(q)
        with recording() as launches:
            attention_dense_triton(q, k, v, out, config=config)
        assert [kern.__name__ for kern, *_ in launches] == kernels
        _close(out, _ref64(attention_dense_reference, q, k, v), torch.float16)
    q, k, v = _dense(1, 2, 1, DECODE_MAX_Q + 1, 40, 16, torch.float16)
    with recording() as launches:
        attention_dense_triton(q, k, v, torch.empty_like(q))
    assert [kern.__name__ for kern, *_ in launches] == ["_attn_fwd_kernel"]
    with pytest.raises(ValueError, match="the split path takes at most 16 query rows and "
                                         "tiles of at most 64 rows; got S_q=17"):
        attention_dense_triton(q, k, v, torch.empty_like(q), config="split")


@needs_triton
def test_varlen_op_decode_passes_max_seqlen_k():
    """The op hands max_seqlen_k to the kernel, which sizes the split by it."""
    q_lens, k_lens = [1, 1, 1], [30, 64, 7]
    q, k, v, cq, ck = _varlen(q_lens, k_lens, 8, 2, 16, torch.float16, seed=11)
    op = GroupedQueryAttentionVarlenFwdOp(1, 64, causal=True)
    with recording() as launches:
        got = op(q, k, v, cq, ck)
    split = [args for kern, grid, args, kw in launches if kern.__name__ == "_attn_split_kernel"]
    assert len(split) == 1
    plan = decode_plan(1, 64, 4, 16, 2, q.device, sum(k_lens))
    assert split[0][-2:] == (plan.splits, plan.chunk)
    _close(got, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=True),
           torch.float16)


@needs_triton
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from([1, 2, 3, 4]),
       st.integers(1, 4), st.lists(st.integers(0, 45), min_size=1, max_size=3),
       st.sampled_from([16, 24]), st.booleans())
def test_split_path_equals_reference_on_random_calls(B, H_kv, group, max_q, k_lens, D, causal):
    """Law: on any decode call it takes, the split pair computes the reference's attention
    (varlen, bottom-right causal), whatever the key lengths, chunking and group padding."""
    k_lens = (k_lens * B)[:B]
    q_lens = [min(max_q, 1 + (i * 7 + n) % max_q) for i, n in enumerate(k_lens)]
    q, k, v, cq, ck = _varlen(q_lens, k_lens, H_kv * group, H_kv, D, torch.float32,
                              seed=sum(k_lens) + D)
    out = torch.full_like(q, float("nan"))
    attention_varlen_triton(q, k, v, cq, ck, max(q_lens), out, None, causal, config="split",
                            max_seqlen_k=max(k_lens))
    _close(out, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=causal),
           torch.float32)


_SM90_SPLIT_SCRIPT = r"""
import json, sys
import opspec.kernels.attention as K
import sm90_build as sm90

out = {}
# Llama-3-8B decode (4 query heads a key/value head, one query, D = 128) and a D = 256
# verify tile (8 heads x 4 queries), as decode_plan sizes them; built dependent (PDL)
for label, (g, bq, bn, D, warps) in {"d128": (4, 1, 64, 128, 4),
                                     "d256": (8, 4, 32, 256, 4)}.items():
    bm = max(16, g * bq)
    fn = K._attn_split_kernel
    consts = dict(VARLEN=True, CAUSAL=True, BOTTOM_RIGHT=True, EVEN_D=True, PRECISION="tf32",
                  BLOCK_G=g, BLOCK_Q=bq, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=D, PDL=True, ALIGN=1,
                  HEADS_FIRST=K.DECODE_HEADS_FIRST,
                  stride_qb=0, stride_kb=0, stride_vb=0, stride_qd=1, stride_kd=1, stride_vd=1)
    args = {n: ("*fp32" if n in ("PART", "STATS") else "*i32" if n.startswith("CU_")
                else "fp32" if n == "qk_scale" else "*bf16" if n in ("Q", "K", "V") else "i32")
            for n in fn.arg_names if n not in consts}
    c = sm90.build(fn, args, consts, warps, 3)
    fn2 = K._attn_combine_kernel
    consts2 = dict(VARLEN=True, EVEN_D=True, BLOCK_Q=bq, BLOCK_M=bm, BLOCK_D=D, PDL=True,
                   stride_ob=0, stride_od=1)
    args2 = {n: ("*fp32" if n in ("PART", "STATS") else "*i32" if n.startswith("CU_")
                 else "*bf16" if n == "O" else "i32")
             for n in fn2.arg_names if n not in consts2}
    c2 = sm90.build(fn2, args2, consts2, 4, 1)
    out[label] = {"local": c.ptx.count(".local") + c2.ptx.count(".local"),
                  "mma": c.ptx.count("mma"), "wait": c.ptx.count("griddepcontrol.wait")
                  + c2.ptx.count("griddepcontrol.wait")}
json.dump(out, sys.stdout)
"""


def test_split_kernels_build_for_sm90():
    """The split pair compiles for sm_90 at the decode tiles, dependent launches: tensor-core
    products, nothing in local memory, each kernel waiting once for the one before."""
    from sm90_build import run_script

    builds = run_script(_SM90_SPLIT_SCRIPT)
    assert set(builds) == {"d128", "d256"}
    for label, facts in builds.items():
        assert facts["mma"] > 0 and facts["local"] == 0 and facts["wait"] == 2, (label, facts)


# ============================================================================ dispatch

def test_dispatch():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    op = GroupedQueryAttentionDenseFwdOp()
    tri = "attention_dense_triton" if "cpu" in TRITON_DEVICES else "attention_dense_reference"
    assert op.key_for("attention_dense", AttentionCall("float16", 64, True, device=cpu)) == tri
    # the interpreter's bfloat16 dot is wrong: bfloat16 goes to the reference there
    want = "attention_dense_reference" if TRITON_INTERPRETED else tri
    assert op.key_for("attention_dense", AttentionCall("bfloat16", 64, True, device=cpu)) == want
    assert op.key_for("attention_dense", AttentionCall("float16", 128, False, device=cuda),
                      arch=90) == "attention_dense_triton"
    assert op.key_for("attention_dense", AttentionCall("float32", 128, False, device=cuda),
                      arch=90) == "attention_dense_reference"
    vop = GroupedQueryAttentionVarlenFwdOp(8, 8)
    assert vop.key_for("attention_varlen", AttentionCall("float16", 128, True, device=cuda),
                       arch=90) == "attention_varlen_triton"


# ============================================================================ the ops

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_dense_op(dtype):
    q, k, v = _dense(2, 4, 2, 9, 12, 16, dtype)
    op = GroupedQueryAttentionDenseFwdOp(is_causal=True)
    out = op(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype
    _close(out, _ref64(attention_dense_reference, q, k, v, is_causal=True), dtype)
    rec = op.last_call
    assert (rec.indices["H"], rec.indices["H_kv"], rec.indices["S_q"], rec.indices["S_kv"]) == \
        (4, 2, 9, 12)
    flops, nbytes = op.eval_roofline()
    assert flops == 4 * 2 * 4 * 16 * (9 * 10 // 2)      # visible pairs: 1 + 2 + ... + 9
    assert nbytes == (2 * 2 * 4 * 9 * 16 + 2 * 2 * 2 * 12 * 16) * 2
    op = GroupedQueryAttentionDenseFwdOp(scale=0.25)
    _close(op(q, k, v), _ref64(attention_dense_reference, q, k, v, scale=0.25), dtype)
    assert op.eval_roofline()[0] == 4 * 2 * 4 * 16 * 9 * 12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_varlen_op(dtype):
    q_lens, k_lens = [3, 0, 6, 2], [5, 2, 6, 1]
    q, k, v, cq, ck = _varlen(q_lens, k_lens, 4, 1, 8, dtype)
    op = GroupedQueryAttentionVarlenFwdOp(6, 6, causal=True)
    out = op(q, k, v, cq, ck)
    _close(out, _ref64(attention_varlen_reference, q, k, v, cq, ck, causal=True), dtype)
    assert op.last_call.indices["B"] == 4
    flops, nbytes = op.eval_roofline()
    # visible pairs: 3 + 4 + 5, 0, 1 + ... + 6, 0 + 1 (query 0 of the last sees nothing)
    assert flops == 4 * 4 * 8 * (12 + 21 + 1)
    assert nbytes == (11 * 4 * 8 + 2 * 14 * 8 + 11 * 4 * 8) * 2 + 2 * 5 * 4
    op = GroupedQueryAttentionVarlenFwdOp(6, 6, softmax_scale=0.5)
    _close(op(q, k, v, cq, ck),
           _ref64(attention_varlen_reference, q, k, v, cq, ck, softmax_scale=0.5), dtype)
    assert op.eval_roofline()[0] == 4 * 4 * 8 * (15 + 0 + 36 + 2)


def test_ops_empty_calls():
    q, k, v = _dense(0, 4, 2, 3, 5, 8, torch.float16)
    assert GroupedQueryAttentionDenseFwdOp()(q, k, v).shape == (0, 4, 3, 8)
    q, k, v = _dense(1, 2, 1, 3, 0, 8, torch.float16)
    assert torch.equal(GroupedQueryAttentionDenseFwdOp()(q, k, v), torch.zeros_like(q))
    q, k, v, cq, ck = _varlen([], [], 2, 1, 8, torch.float16)
    out = GroupedQueryAttentionVarlenFwdOp(0, 0)(q, k, v, cq, ck)
    assert out.shape == (0, 2, 8)


def _call_error(op, *args):
    with pytest.raises((SignatureError, SignatureTypeError)) as ei:
        op(*args)
    return ei


def test_dense_op_rejects_calls_that_break_the_spec():
    q, k, v = (t.cpu() for t in _dense(1, 4, 2, 6, 6, 16, torch.float16))
    op = GroupedQueryAttentionDenseFwdOp()
    ei = _call_error(op, q[:, :3], k, v)
    expect_error(ei, SignatureError, DENSE, "signature.shape_rules.0",
                 "refinement `H_kv >= 1 and H % H_kv == 0`", "H=3", "H_kv=2")
    causal = GroupedQueryAttentionDenseFwdOp(is_causal=True)
    ei = _call_error(causal, q, k[:, :, :4], v[:, :, :4])
    expect_error(ei, SignatureError, DENSE, "signature.shape_rules.1",
                 "refinement `S_q <= S_kv`", "S_q=6", "S_kv=4")
    assert op(q, k[:, :, :4], v[:, :, :4]).shape == q.shape   # without the mask it is fine
    ei = _call_error(op, q[..., :12], k[..., :12], v[..., :12])
    expect_error(ei, SignatureError, DENSE, "signature.shape_rules.2",
                 "refinement `D >= 8 and D <= 256 and D % 8 == 0`", "D=12")
    ei = _call_error(op, q, k, v[:, :, :5])
    expect_error(ei, SignatureError, DENSE, "signature.inputs.v.shape",
                 "expected S_kv = 6 (from input k), got 5")
    ei = _call_error(op, q.float(), k.float(), v.float())
    expect_error(ei, SignatureError, DENSE, "signature.inputs.k.dtype",
                 "expected bfloat16 | float16, got float32")
    ei = _call_error(op, q, k.bfloat16(), v)
    expect_error(ei, SignatureError, DENSE, "signature.inputs.q.dtype",
                 "expected T = bfloat16 (from input k), got float16")
    ei = _call_error(op, q[0], k, v)
    expect_error(ei, SignatureError, DENSE, "signature.inputs.q.shape", "expected 4, got 3")


def test_varlen_op_rejects_calls_that_break_the_spec():
    q, k, v, cq, ck = (t.cpu() for t in _varlen([3, 4], [3, 5], 4, 2, 16, torch.float16))
    op = GroupedQueryAttentionVarlenFwdOp(4, 5)
    # B is solved from the second offsets (checked first: the plan's order), the first
    # disagree
    ei = _call_error(op, q, k, v, cq, ck[:2])
    expect_error(ei, SignatureError, VARLEN, "signature.inputs.cu_seqlens_q.shape",
                 "axis 0 of [B + 1]: expected B + 1 = 2, got 3")
    ei = _call_error(op, q, k, v, cq.long(), ck)
    expect_error(ei, SignatureError, VARLEN, "signature.inputs.cu_seqlens_q.dtype",
                 "expected int32, got int64")
    ei = _call_error(op, q, k[:, :1].expand(8, 3, 16), v[:, :1].expand(8, 3, 16), cq, ck)
    expect_error(ei, SignatureError, VARLEN, "signature.shape_rules.0",
                 "refinement `H_kv >= 1 and H % H_kv == 0`", "H_kv=3")
    ei = _call_error(op, q, k, v[:7], cq, ck)
    expect_error(ei, SignatureError, VARLEN, "signature.inputs.v.shape",
                 "expected total_k = 8 (from input k), got 7")
    ei = _call_error(op, q, k, v, cq.tolist(), ck)
    expect_error(ei, SignatureTypeError, VARLEN, "signature.inputs.cu_seqlens_q",
                 "expected a torch.Tensor, got list")
    with pytest.raises(SignatureError) as ei:
        GroupedQueryAttentionVarlenFwdOp(-1, 5)
    expect_error(ei, SignatureError, VARLEN, "signature.shape_rules.2",
                 "refinement `max_seqlen_q >= 0 and max_seqlen_k >= 0`")
    with pytest.raises(SignatureTypeError) as ei:
        GroupedQueryAttentionVarlenFwdOp(4, 5, causal=1)
    expect_error(ei, SignatureTypeError, VARLEN, "signature.params.causal",
                 "parameter `causal` has type `bool`; got 1")


# ============================================================================ compile boundary

def test_opcheck():
    assert GroupedQueryAttentionDenseFwdOp.compile_op_names == (
        "opspec::attention_grouped_query_attention_dense_fwd_op",)
    assert GroupedQueryAttentionVarlenFwdOp.compile_op_names == (
        "opspec::attention_grouped_query_attention_varlen_fwd_op",)
    q, k, v = (t.cpu() for t in _dense(1, 4, 2, 5, 7, 16, torch.float16))
    op = GroupedQueryAttentionDenseFwdOp(is_causal=True)
    torch.library.opcheck(torch.ops.opspec.attention_grouped_query_attention_dense_fwd_op.default,
                          (q, k, v, op._opspec_key))
    q, k, v, cq, ck = (t.cpu() for t in _varlen([2, 5], [4, 5], 4, 2, 16, torch.float16))
    vop = GroupedQueryAttentionVarlenFwdOp(5, 5, causal=True)
    torch.library.opcheck(
        torch.ops.opspec.attention_grouped_query_attention_varlen_fwd_op.default,
        (q, k, v, cq, ck, vop._opspec_key))


def test_cold_compile_fullgraph():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    op = GroupedQueryAttentionDenseFwdOp(is_causal=True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    def block(x, k, v):
        # a projection's view as [B, H, S, D], attention, and the heads merged back
        q = x.unflatten(-1, (4, 16)).transpose(1, 2)
        return op(q, k, v).transpose(1, 2).flatten(-2) * 2

    fn = torch.compile(block, backend=backend, fullgraph=True)
    x = _randn(1, 6, 64, dtype=torch.float16).cpu()
    k = _randn(1, 2, 6, 16, dtype=torch.float16, seed=1).cpu()
    v = _randn(1, 2, 6, 16, dtype=torch.float16, seed=2).cpu()
    got = fn(x, k, v)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("attention_grouped_query_attention_dense_fwd_op" in t for t in targets)
    torch.testing.assert_close(got, block(x, k, v))


# ============================================================================ workloads

def test_dense_workloads_instantiate_on_meta():
    all_cases = cases(GroupedQueryAttentionDenseFwdOp)
    ids = [c.id for c in all_cases]
    assert len(ids) == len(set(ids)) == 17
    large = []
    for c in all_cases:
        op = c.construct(GroupedQueryAttentionDenseFwdOp)
        q, k, v = c.inputs("meta")
        ind = op.check_call(q, k, v)
        assert ind["H"] % ind["H_kv"] == 0 and ind["D"] in (64, 128)
        nbytes = sum(t.numel() * t.element_size() for t in (q, k, v, q))
        if nbytes >= 256 * 2**20:
            large.append(c.label)
    assert {"llama3-70b-prefill-8k", "llama3-8b-decode-b32-4k"} <= set(large)
    # the decode rows take the split-key kernels (at most DECODE_MAX_Q queries)
    assert {c.label for c in all_cases if c.values["S_q"] <= DECODE_MAX_Q} == {
        "llama3-8b-decode-b32-4k", "llama3-70b-decode-b8-8k", "llama3-8b-verify4-b16-4k"}


def test_varlen_workloads_instantiate():
    all_cases = cases(GroupedQueryAttentionVarlenFwdOp)
    assert len({c.id for c in all_cases}) == len(all_cases) == 9
    for c in all_cases:
        op = c.construct(GroupedQueryAttentionVarlenFwdOp)
        q, k, v, cq, ck = c.inputs("meta")
        ind = op.check_call(q, k, v, cq, ck)
        assert ind["B"] == len(c.values["q_lens"]) and ind["total_q"] == sum(c.values["q_lens"])
        assert max(c.values["q_lens"]) <= op.max_seqlen_q
        assert max(c.values["k_lens"]) <= op.max_seqlen_k
    (c,) = [c for c in all_cases if c.id == "llama3-8b-chunked-bfloat16"]
    q, k, v, cq, ck = c.inputs("meta")
    assert q.shape == (5632, 32, 128) and k.shape == (20992, 8, 128)


def test_varlen_roofline_on_a_workload_row():
    # the offsets of a real row, with stand-in tensors of the same shapes (no 16k-token data)
    (c,) = [c for c in cases(GroupedQueryAttentionVarlenFwdOp) if c.id == "llama3-8b-chunked-bfloat16"]
    from opspec.ops.attention import varlen_roofline

    class _Call:
        tensors = {"q": torch.empty(5632, 32, 128, device="meta")}
        indices = {"causal": True}

        def metadata_values(self, name):
            lens = c.values["q_lens"] if name == "cu_seqlens_q" else c.values["k_lens"]
            return [0] + list(torch.tensor(lens).cumsum(0).tolist())

        def bytes(self, name):
            return 1

    flops, nbytes = varlen_roofline(_Call())
    pairs = sum(lq * lk - lq * (lq - 1) // 2 for lq, lk in zip(c.values["q_lens"],
                                                                c.values["k_lens"]))
    assert flops == 4 * 32 * 128 * pairs and nbytes == 6
    assert math.isclose(flops / 1e12, 4 * 32 * 128 * pairs / 1e12)


# ============================================================================ bench entries

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bench_baselines_match_the_references(causal):
    from opspec.ops.baselines_attention import BENCH
    from opspec.ops.bench_types import BaselineUnavailable

    q, k, v = (t.cpu().double() for t in _dense(2, 4, 2, 5, 7, 8, torch.float32))
    op = GroupedQueryAttentionDenseFwdOp(is_causal=causal)
    entry = BENCH[DENSE]
    want = entry.reference(op, q, k, v)
    torch.testing.assert_close(entry.baselines["eager"](op)(q, k, v), want)
    # len_q < len_k (bottom-right) in the first sequence, an empty one, a self-attention one
    q, k, v, cq, ck = (t.cpu() for t in _varlen([3, 0, 5], [6, 2, 5], 4, 2, 8, torch.float64))
    op = GroupedQueryAttentionVarlenFwdOp(5, 6, causal=causal)
    entry = BENCH[VARLEN]
    want = entry.reference(op, q, k, v, cq, ck)
    for name in ("eager", "sdpa_loop"):
        torch.testing.assert_close(entry.baselines[name](op)(q, k, v, cq, ck), want)
    with pytest.raises(BaselineUnavailable):
        entry.baselines["flash_attn"](op)(q, k, v, cq, ck)
