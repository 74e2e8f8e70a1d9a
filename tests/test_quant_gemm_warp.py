"""The W4A16 tensor-core decode kernel's asm blocks (kernels/quant_gemm.py: _tc_prep_asm,
_tc_main_asm, _tc_scale_asm) run by a model of one warp executing their straight-line PTX,
for a machine without a GPU: Triton's interpreter runs no PTX (the interpreter tests run the
kernel's portable model of these blocks), so this checks the asm text itself against the
arithmetic it stands for.

Only the instructions those blocks use are modelled: mov (registers, immediates, packing two
16-bit halves), prmt (default mode), lop3, shr.u32, sub/fma on f16x2 and bf16x2, add.f32,
cvt.f32.f16, setp.ne.b32, predicated ld.global from a dict "memory", and
mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} with the fragment layouts of the PTX ISA
(A: a0..a7 = rows g, g+8, cols 2t+{0,1}, +8; B: b0..b3 = rows 2t+{0,1}, +8, col g; C/D:
rows g, g+8, cols 2t+{0,1}; g = lane >> 2, t = lane & 3). Registers hold 32-bit patterns.
The model itself is checked by mutating the asm (a wrong selector, operand order or mask
must fail).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import opspec.kernels.quant_gemm as Q

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32

_F16 = np.float16


def _f32(bits: int) -> float:
    return float(np.array([bits & 0xFFFFFFFF], dtype=np.uint32).view(np.float32)[0])


def _bits32(v: float) -> int:
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


def _halves(bits: int) -> tuple[int, int]:
    return bits & 0xFFFF, (bits >> 16) & 0xFFFF


def _h2f(h: int, bf16: bool) -> float:
    if bf16:
        return _f32(h << 16)
    return float(np.array([h], dtype=np.uint16).view(_F16)[0])


def _f2h(v: float, bf16: bool) -> int:
    if bf16:
        return int(torch.tensor([v], dtype=torch.float64).to(torch.float32)
                   .to(torch.bfloat16).view(torch.int16)[0]) & 0xFFFF
    return int(np.array([v], dtype=np.float64).astype(_F16).view(np.uint16)[0])


def _imm(tok: str) -> int:
    tok = tok.strip()
    if tok.startswith("0f"):
        return int(tok[2:], 16)
    return int(tok, 0) & 0xFFFFFFFF


def _lop3(a: int, b: int, c: int, lut: int) -> int:
    out = 0
    for i in range(8):
        if (lut >> i) & 1:
            ma = a if i & 4 else ~a
            mb = b if i & 2 else ~b
            mc = c if i & 1 else ~c
            out |= ma & mb & mc
    return out & 0xFFFFFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    src = (b << 32) | a
    out = 0
    for i in range(4):
        k = (sel >> (4 * i)) & 0x7
        out |= ((src >> (8 * k)) & 0xFF) << (8 * i)
    return out


class Warp:
    """32 lanes running one asm block: ``run(asm, operands)`` where operands[lane] maps
    each $n to a 32-bit value (inputs); returns the per-lane register files, $n included."""

    def __init__(self, memory: dict[int, int] | None = None):
        self.memory = memory or {}

    def run(self, asm: str, operands: list[dict[str, int]]) -> list[dict[str, int]]:
        regs = [dict(op) for op in operands]
        preds: list[dict[str, bool]] = [{} for _ in range(32)]
        lines = [ln.strip() for ln in asm.replace("{\n", "\n").splitlines()]
        for ln in lines:
            for ins in ln.split(";"):
                ins = ins.strip()
                if not ins or ins in ("{", "}") or ins.startswith(".reg"):
                    continue
                self._step(ins, regs, preds)
        return regs

    def _val(self, r: dict[str, int], tok: str) -> int:
        tok = tok.strip()
        if tok.startswith("$") or tok[0].isalpha():
            return r[tok]
        return _imm(tok)

    def _step(self, ins: str, regs, preds) -> None:
        pred = None
        if ins.startswith("@"):
            pred, ins = ins[1:].split(None, 1)
        op, rest = ins.split(None, 1)
        if op.startswith("mma.sync"):
            self._mma(op, rest, regs)
            return
        args = [a.strip() for a in re.split(r",(?![^{]*})", rest)]
        for lane in range(32):
            r = regs[lane]
            if pred is not None and not preds[lane][pred]:
                continue
            d = args[0]
            if op in ("mov.b32", "mov.f32", "mov.u32", "mov.b16"):
                if args[1].startswith("{"):
                    lo, hi = [x.strip() for x in args[1].strip("{}").split(",")]
                    r[d] = (self._val(r, lo) & 0xFFFF) | ((self._val(r, hi) & 0xFFFF) << 16)
                else:
                    r[d] = self._val(r, args[1])
            elif op == "prmt.b32":
                r[d] = _prmt(self._val(r, args[1]), self._val(r, args[2]), _imm(args[3]))
            elif op == "lop3.b32":
                r[d] = _lop3(self._val(r, args[1]), self._val(r, args[2]),
                             self._val(r, args[3]), _imm(args[4]))
            elif op == "shr.u32":
                r[d] = (self._val(r, args[1]) & 0xFFFFFFFF) >> _imm(args[2])
            elif op in ("sub.f16x2", "fma.rn.f16x2", "fma.rn.bf16x2"):
                bf16 = "bf16" in op
                srcs = [_halves(self._val(r, a)) for a in args[1:]]
                out = 0
                for half in range(2):
                    v = [_h2f(s[half], bf16) for s in srcs]
                    res = v[0] - v[1] if op.startswith("sub") else v[0] * v[1] + v[2]
                    out |= _f2h(res, bf16) << (16 * half)
                r[d] = out
            elif op == "add.f32":
                r[d] = _bits32(_f32(self._val(r, args[1])) + _f32(self._val(r, args[2])))
            elif op == "cvt.f32.f16":
                r[d] = _bits32(_h2f(self._val(r, args[1]) & 0xFFFF, False))
            elif op == "setp.ne.b32":
                preds[lane][d] = self._val(r, args[1]) != self._val(r, args[2])
            elif op in ("ld.global.b16", "ld.global.b32"):
                addr = self._val(r, args[1].strip("[]"))
                r[d] = self.memory[addr]
            else:
                raise NotImplementedError(op)

    def _mma(self, op: str, rest: str, regs) -> None:
        bf16 = ".bf16." in op
        groups = [[x.strip() for x in grp.split(",")] for grp in re.findall(r"\{([^}]*)\}", rest)]
        d, a, b, c = groups
        A = np.zeros((16, 16))
        B = np.zeros((16, 8))
        C = np.zeros((16, 8))
        for lane in range(32):
            r = regs[lane]
            g, t = lane >> 2, lane & 3
            for i in range(8):          # A: 4 registers, 2 halves each
                lo_hi = _halves(self._val(r, a[i // 2]))[i % 2]
                row = g + 8 * ((i // 2) % 2)
                col = 2 * t + (i % 2) + 8 * (i // 4)
                A[row, col] = _h2f(lo_hi, bf16)
            for i in range(4):
                bh = _halves(self._val(r, b[i // 2]))[i % 2]
                B[2 * t + (i % 2) + 8 * (i // 2), g] = _h2f(bh, bf16)
            for i in range(4):
                C[g + 8 * (i // 2), 2 * t + (i % 2)] = _f32(self._val(r, c[i]))
        D = A @ B + C
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for i in range(4):
                regs[lane][d[i]] = _bits32(D[g + 8 * (i // 2), 2 * t + (i % 2)])


@pytest.mark.parametrize("bf16", [False, True], ids=["f16", "bf16"])
@pytest.mark.parametrize("nt,biased", [(1, False), (1, True), (2, False), (2, True)])
def test_tc_asm_on_a_warp_model(bf16, nt, biased):
    """The asm blocks themselves (the interpreter runs their portable model instead), run
    by the model of one warp above executing their PTX (mma.sync fragment layouts of the
    PTX ISA): lane 4 g + t with rows h = 0, 1 and words 4t + j of a
    128-wide step gets, for each element j + 4 h, the step's sum over k of the dequantized
    nibble (q - 8, or b + q biased) times x of token 2t + j (j < 2; 8 + 2t + j - 2 in the
    second token tile), and that token's sum of x; tokens past M are wrapped rows."""
    dtype = BF16 if bf16 else F16
    (prep, _), (main, _) = Q._TC_ASM[(bf16, nt, biased)]
    for M in ((1, 3, 8) if nt == 1 else (9, 16)):
        gen = torch.Generator().manual_seed(M)
        x = torch.randn(M, 128, generator=gen).to(dtype)
        xb = x.view(torch.int16).to(torch.int64) & 0xFFFF
        x32 = (xb[:, 0::2] | (xb[:, 1::2] << 16)).tolist()    # [M, 64] words
        words = torch.randint(0, 2**32, (2, 8, 16), generator=gen, dtype=torch.int64).tolist()
        first_in, xs_out = 32 * nt + 8, 32 * nt
        ops = [{f"${first_in + 8 * (4 * tile + c) + e}": (x32[((lane >> 2) + 8 * tile) % M]
                                                        [16 * (lane & 3) + 4 * c + e] if e < 4 else 0)
                for tile in range(nt) for c in range(4) for e in range(8)} for lane in range(32)]
        prep_regs = Warp().run(prep, ops)
        ops = [{**{f"${8 + e}": words[e // 4][lane >> 2][4 * (lane & 3) + e % 4] for e in range(8)},
                **{f"${16 + i}": prep_regs[lane][f"${i}"] for i in range(32 * nt)}}
               for lane in range(32)]
        main_regs = Warp().run(main, ops)
        w = torch.tensor(words, dtype=torch.int64)
        q = torch.stack([(w >> (4 * i)) & 15 for i in range(8)], dim=-1).reshape(2, 8, 128).double()
        a = q + (128 if bf16 else 1024) if biased else q - 8
        xf = x.double()
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for e in range(8):
                j, h = e % 4, e // 4
                p, xs = _f32(main_regs[lane][f"${e}"]), _f32(prep_regs[lane][f"${xs_out + e}"])
                if j >= 2 * nt:
                    assert p == 0.0 and xs == 0.0
                    continue
                m = (2 * t + j % 2 + 8 * (j // 2)) % M
                np.testing.assert_allclose(p, float(a[h, g] @ xf[m]), rtol=1e-5, atol=1e-2)
                np.testing.assert_allclose(xs, float(xf[m].sum()), rtol=1e-5, atol=1e-4)


def test_tc_scale_asm_on_a_warp_model():
    """The scale and zero-point loads (asm: they take the tile's layout): float32 values of
    float16, bfloat16 and float32 scales; a masked-off lane reads nothing and gets 0."""
    for kind, dt in (("float16", F16), ("bfloat16", BF16), ("float32", F32)):
        v = torch.tensor([1.5, -0.0078125, 3.25], dtype=dt)
        bits = (v.view(torch.int16) if dt != F32 else v.view(torch.int32)).to(torch.int64) & 0xFFFFFFFF
        bits = bits & (0xFFFF if dt != F32 else 0xFFFFFFFF)
        memory = {1000 + 8 * i: int(b) for i, b in enumerate(bits)}
        for masked in (False, True):
            asm, _ = Q._TC_SCALE_ASM[(kind, masked)]
            ops = [{"$4": 1000 + 8 * (lane % 3), "$8": lane % 2} for lane in range(32)]
            regs = Warp(memory).run(asm, ops)
            for lane in range(32):
                want = 0.0 if masked and lane % 2 == 0 else float(v[lane % 3])
                assert all(_f32(regs[lane][f"${i}"]) == want for i in range(4)), (kind, lane)


def test_the_model_catches_mutations():
    """A wrong PRMT selector, A-operand order or LOP3 mask in the asm is caught."""
    (prep, pc), (main, mc) = Q._TC_ASM[(False, 1, False)]
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(1)).to(F16)
    xb = x.view(torch.int16).to(torch.int64) & 0xFFFF
    x32 = (xb[:, 0::2] | (xb[:, 1::2] << 16)).tolist()
    words = torch.randint(0, 2**32, (2, 8, 16), generator=torch.Generator().manual_seed(2),
                          dtype=torch.int64).tolist()

    def lane0_row0(prep_asm, main_asm):
        ops = [{f"${40 + 8 * c + e}": (x32[(lane >> 2) % 3][16 * (lane & 3) + 4 * c + e] if e < 4 else 0)
                for c in range(4) for e in range(8)} for lane in range(32)]
        pr = Warp().run(prep_asm, ops)
        ops = [{**{f"${8 + e}": words[e // 4][lane >> 2][4 * (lane & 3) + e % 4] for e in range(8)},
                **{f"${16 + i}": pr[lane][f"${i}"] for i in range(32)}} for lane in range(32)]
        return _f32(Warp().run(main_asm, ops)[0]["$0"])

    w = torch.tensor(words[0][0], dtype=torch.int64)
    q = torch.stack([(w >> (4 * i)) & 15 for i in range(8)], dim=-1).reshape(128).double()
    want = float((q - 8) @ x[0].double())
    assert abs(lane0_row0(prep, main) - want) < 1e-2
    for bad_prep, bad_main in ((prep.replace("0x5410", "0x7610", 1), main),
                               (prep, main.replace("{a0,b0,a1,b1}", "{a0,a1,b0,b1}", 1)),
                               (prep, main.replace("0x00f000f0", "0x000f000f", 1))):
        assert abs(lane0_row0(bad_prep, bad_main) - want) > 1e-2
