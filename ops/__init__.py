"""The opspec runtime: the `Op` base class and the bundled operators."""

from opspec.ops.elementwise import SiluAndMulFwdOp
from opspec.ops.gemm import GemmFwdOp
from opspec.ops.op import Op
from opspec.ops.records import SignatureCall

__all__ = ["GemmFwdOp", "Op", "SignatureCall", "SiluAndMulFwdOp"]
