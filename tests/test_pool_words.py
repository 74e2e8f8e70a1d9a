"""The pool family's word kernel (opspec.kernels.pool_words): 16-bit 3x3 stride-2 max pools
of rows read as 32-bit words, the CNN stems.

Against torch's F.max_pool2d, on the CPU through Triton's interpreter (the kernel's portable
model of its PTX: the same loads, words and clamped rows), on the GPU where CUDA is available
(the PTX itself): bfloat16 and float16, both paddings it serves (ResNet's 1, GoogLeNet's 0
with ceil_mode), bands of 1, 2 and 4 rows, several planes a program with a
partial last group, NaN and infinities, channel slices (planes not merged), unbatched
inputs and int64 offsets; then which inputs ``words_fit`` accepts, which ``pool2d_triton``
sends to the kernel, and the sm_90 build.
"""

from __future__ import annotations

import pytest
import torch

import opspec.kernels.pool as PK
import opspec.kernels.pool_words as PW
from opspec.kernels.pool import pool2d_geometry, pool2d_out_size, pool2d_triton
from opspec.kernels.pool_words import WordsConfig, max_pool3x3s2_words, words_fit

from test_pool import _on_device, _randn  # noqa: F401  (_on_device: a fixture)
from test_pool_variants import _want_max

DTYPES16 = [torch.bfloat16, torch.float16]
# (padding, ceil_mode) of the windows the kernel serves on [.., 2 H_out, 2 W_out] inputs
PADDINGS = [(1, False), (0, True)]
CONFIGS = [WordsConfig(1, 1, 1), WordsConfig(2, 8, 4), WordsConfig(4, 2, 1)]


def _input(shape, dtype, seed=0):
    """Random values with a NaN, a corner of -inf (a window of -inf only), +inf on the left
    and the right edge, and -inf on the top row (so a clamped row that should not count
    would show)."""
    x = _randn(*shape, dtype=dtype, seed=seed)
    x[..., 3, 5] = float("nan")
    x[..., -3:, -4:] = float("-inf")
    x[..., 4, 0] = float("inf")
    x[..., 6, -1] = float("inf")
    x[..., 0, 8:12] = float("-inf")
    return x


def _words(x, g, cfg):
    x4 = x if x.dim() == 4 else x[None]
    H_out, W_out = pool2d_out_size(x.shape[-2], x.shape[-1], g)
    assert words_fit(x4, g.kernel, g.stride, g.padding, g.dilation, H_out, W_out)
    out = torch.full((*x.shape[:-2], H_out, W_out), 7.0, dtype=x.dtype)
    assert max_pool3x3s2_words(x4, out, g.padding, cfg) is out
    return out


def _pid(p):
    return f"p{p[0]}-c{int(p[1])}"


@pytest.mark.parametrize("dtype", DTYPES16, ids=str)
@pytest.mark.parametrize("pad", PADDINGS, ids=_pid)
def test_words_match_torch(pad, dtype):
    """Exact, NaN kept, an all -inf window -inf, +inf kept, every configuration; 3 planes,
    so 2- and 8-plane programs have a partial last group; 18 rows, so H_out = 9 takes bands
    of 1 or 3 rows."""
    g = pool2d_geometry(3, 2, pad[0], 1, pad[1])
    for shape in ((1, 3, 16, 24), (3, 18, 16)):
        x = _input(shape, dtype)
        want = _want_max(x, g)
        for cfg in CONFIGS:
            torch.testing.assert_close(_words(x, g, cfg), want, rtol=0, atol=0,
                                       equal_nan=True, msg=f"{shape} {cfg}")


@pytest.mark.parametrize("dtype", DTYPES16, ids=str)
def test_words_channel_slice_and_batch(dtype):
    """Planes of a channel slice (batch stride not C x channel stride: planes split into
    image and channel) and of several images."""
    g = pool2d_geometry(3, 2, 1, 1, False)
    full = _input((3, 6, 8, 32), dtype, seed=1)
    x = full[:, 2:5]
    assert x.stride(0) != x.shape[1] * x.stride(1)
    for cfg in CONFIGS:
        torch.testing.assert_close(_words(x, g, cfg), _want_max(x, g), rtol=0, atol=0,
                                   equal_nan=True, msg=str(cfg))


def test_words_int64_offsets(monkeypatch):
    """The int64 path (inputs past 2**31 - 1 words), forced with a lower limit."""
    g = pool2d_geometry(3, 2, 0, 1, True)
    x = _input((2, 3, 8, 16), torch.bfloat16, seed=2)
    monkeypatch.setattr(PW, "_INT32_LIMIT", 64)
    torch.testing.assert_close(_words(x, g, WordsConfig(2, 2, 1)), _want_max(x, g), rtol=0,
                               atol=0, equal_nan=True)


def _fits(x, k=3, s=2, p=1, d=1, c=False):
    g = pool2d_geometry(k, s, p, d, c)
    H_out, W_out = pool2d_out_size(x.shape[-2], x.shape[-1], g)
    return words_fit(x, g.kernel, g.stride, g.padding, g.dilation, H_out, W_out)


def test_words_fit():
    """The stems fit; every condition of the kernel, broken alone, does not."""
    x = torch.zeros(2, 4, 16, 32, dtype=torch.bfloat16)
    assert _fits(x) and _fits(x.half()) and _fits(x, p=0, c=True)
    flat = torch.zeros(x.numel() + 8, dtype=torch.bfloat16)
    cases = {
        "float32": _fits(x.float()),
        "2x2 window": _fits(x, k=2),
        "stride 1": _fits(x, s=1),
        "dilation 2": _fits(x, d=2),
        "padding 0 without ceil_mode (H_out = H / 2 - 1)": _fits(x, p=0),
        "padding 1 with ceil_mode (H_out = H / 2 + 1)": _fits(x, c=True),
        "paddings (0, 1) with ceil_mode (W_out = W / 2 + 1)": _fits(x, p=(0, 1), c=True),
        "W_out = 6, not whole quads": _fits(torch.zeros(2, 4, 16, 12, dtype=torch.bfloat16)),
        "channels_last (column stride C)": _fits(x.to(memory_format=torch.channels_last)),
        "offset of 4 elements (8 bytes)": _fits(flat[4:4 + x.numel()].view(x.shape)),
        "rows of 32 elements in a row stride of 36 (72 bytes)": _fits(
            torch.zeros(2, 4, 16, 36, dtype=torch.bfloat16)[..., :32]),
        "empty": _fits(x[:0]),
    }
    assert not any(cases.values()), {k: v for k, v in cases.items() if v}
    # a row stride of 40 elements (80 bytes) keeps the rows 16-byte aligned
    assert _fits(torch.zeros(2, 4, 16, 40, dtype=torch.bfloat16)[..., :32])


def test_pool2d_triton_sends_stems_to_words(monkeypatch):
    """Max pools words_fit accepts go to the word kernel: with _WORDS_SMALL from
    _BAND_MIN_OUTPUTS outputs, with _WORDS from _WORDS_MIN_OUTPUTS; averages, float32, a
    forced band configuration, fewer outputs and unset configurations do not; ``words=``
    forces a configuration, and is refused where the kernel does not serve. The result is
    torch's either way."""
    calls = []
    real = PK.max_pool3x3s2_words

    def spy(x4, out, padding, cfg):
        calls.append(cfg)
        return real(x4, out, padding, cfg)

    monkeypatch.setattr(PK, "max_pool3x3s2_words", spy)
    g = pool2d_geometry(3, 2, 1, 1, False)
    x = _input((2, 3, 16, 32), torch.bfloat16)
    n_out = 2 * 3 * 8 * 16

    def run(x, mode="max", **kw):
        out = torch.empty((*x.shape[:-2], 8, 16), dtype=x.dtype)
        pool2d_triton(x, out, mode, g, **kw)
        if mode == "max":
            torch.testing.assert_close(out, _want_max(x, g), rtol=0, atol=0, equal_nan=True)

    def limits(band, words):
        monkeypatch.setattr(PK, "_BAND_MIN_OUTPUTS", band)
        monkeypatch.setattr(PK, "_WORDS_MIN_OUTPUTS", words)

    small, large = PK._WORDS_SMALL, PK._WORDS
    assert small is not None and large is not None and small != large
    limits(n_out + 1, n_out + 2)
    run(x)
    assert calls == []
    limits(n_out, n_out + 1)
    run(x)
    assert calls == [small]
    limits(n_out, n_out)
    run(x)
    assert calls == [small, large]
    limits(n_out // 2, n_out)
    run(x[0])                                         # unbatched [C, H, W]
    assert calls == [small, large, small]
    limits(1, 1)
    run(x, "avg")
    run(x.float())
    run(x, config=PK.BandConfig(rows=8, tile=512))
    assert len(calls) == 3
    monkeypatch.setattr(PK, "_WORDS", None)
    monkeypatch.setattr(PK, "_WORDS_SMALL", None)
    run(x)
    assert len(calls) == 3
    forced = WordsConfig(4, 2, 1)
    limits(n_out + 1, n_out + 1)
    run(x, words=forced)
    assert calls[-1] == forced
    refused = [(x, "avg", "a avg pool of torch.bfloat16 input [2, 3, 16, 32]"),
               (x.float(), "max", "a max pool of torch.float32 input [2, 3, 16, 32]"),
               (x[..., :20], "max", "strides [1536, 512, 32, 1]) with kernel (3, 3), "
                                    "stride (2, 2), padding (1, 1), dilation (1, 1) to [8, 10]")]
    for xb, mode, says in refused:
        out = torch.empty((*xb.shape[:-2], 8, xb.shape[-1] // 2), dtype=xb.dtype)
        with pytest.raises(ValueError, match="word kernel does not serve") as err:
            pool2d_triton(xb, out, mode, g, words=forced)
        assert says in str(err.value), (says, str(err.value))
    assert len(calls) == 4


_WORDS_BUILD = r"""
import json, sys
import opspec.kernels.pool_words as K
import sm90_build as sm90


def build(kind, pad, cfg, H_out=56, W_out=56):
    load, load_cons, mx, mx_cons = K._ASM[(kind, pad)]
    nq = W_out // 4
    rows = K.words_rows(H_out, cfg.rows)
    args = dict(x_ptr="*i32", out_ptr="*i32", P=256 * 64, C=64, H=2 * H_out, H_out=H_out,
                NQ=nq, n_row_blocks=H_out // rows, sxn=64 * 2 * H_out * W_out,
                sxc=2 * H_out * W_out, out_plane=H_out * W_out // 2)
    cexpr = dict(SXH=W_out, PH=pad, PW=pad, ROWS=rows, PLANES=cfg.planes, BLOCK_Q=16,
                 MERGE_NC=True, BF16=kind == "bf16", EMULATE=False,
                 NEG=K._NEG_INF_WORD[K.torch.bfloat16] - (1 << 32), LOAD=load,
                 LOAD_CONS=load_cons, MAX=mx, MAX_CONS=mx_cons, STORE=K._STORE_ASM,
                 USE_INT64=False)
    k = sm90.build(K._pool_words_kernel, args, cexpr, cfg.num_warps)
    sass = k.sass
    return {"local": k.local, "shared": k.shared, "regs": k.registers,
            "ldg128": sass.count("LDG.E.128"), "ldg32": len([l for l in sass.splitlines()
                                                             if "LDG.E " in l]),
            "stg64": sass.count("STG.E.64"), "hmnmx": sass.count("HMNMX"),
            "prmt": sass.count("PRMT"), "rows": rows}


table = K.WordsConfig(2, 8, 4)
out = {"resnet-bf16": build("bf16", 1, table), "googlenet-fp16": build("f16", 0, table)}
json.dump(out, sys.stdout)
"""


def test_words_kernel_builds_for_sm90():
    """The table's launch compiles for sm_90 with no spills, no shared memory and few
    registers: per input row of a band one 16-byte and one 4-byte load a quad, per output
    row one 8-byte store, six byte permutes and seven packed NaN maxima (ptxas fuses each
    pair of two-input maxima into one three-input VHMNMX: five over the rows' words, two
    over each output pair's columns)."""
    from sm90_build import run_script

    built = run_script(_WORDS_BUILD)
    for name, k in built.items():
        rows = k["rows"]
        assert k["local"] == 0 and k["shared"] == 0 and k["regs"] <= 48, (name, k)
        assert k["ldg128"] == 2 * rows + 1 and k["ldg32"] == 2 * rows + 1, (name, k)
        assert k["stg64"] == rows, (name, k)
        assert k["hmnmx"] == 7 * rows and k["prmt"] == 6 * rows, (name, k)
