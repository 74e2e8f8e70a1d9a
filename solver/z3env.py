"""The Z3 environment: the one solver factory, the three verdicts, and the shared sorts.

Every solver opspec uses comes from `make_solver`, so every verdict is reproducible: the
budget is Z3's deterministic resource counter (`rlimit`), never a wall-clock timeout, and the
seeds are fixed. Nothing here touches Z3's global parameters.

`DEFAULT_RLIMIT` = 1M units, measured (z3 5.4; units are Z3's deterministic
`rlimit count`, roughly 3-5M per second here): proving the stored corpus (168 specs) asks
390 checks whose median costs 124 units, 99th percentile 3.1k, maximum 56k (42 ms); the
heaviest encodings in the tests (`reduced` with a sequence of axes, recursive folds) cost up
to 400k (150 ms). An unbounded nonlinear query (`x*x*x + y*y*y == z*z*z`) spends any budget:
1M stops it in about 0.3 s (2M: 0.6 s), with an 18x margin over the corpus's largest query.
The limit applies to each `check` (the `rlimit count` statistic itself is process-wide).

Shared sorts (`shared()`, one set per Z3 context): one enumeration `DType` over every dtype
name, and the uninterpreted sort `Opaque` of values the encoding cannot see into. Strings
(enum literals, `category(...)` results, ADT constructor names) are Int *codes*:
`str_code` maps a string injectively and deterministically to a positive int, so that two
string-valued terms compare with plain integer equality, whatever literal sets their kinds
allow, and so that the code of a literal never depends on the order strings were met.
"""

from __future__ import annotations

import enum
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import z3

from ..schema.kinds import DTYPES

__all__ = ["DEFAULT_RLIMIT", "SEED", "Verdict", "make_solver", "check", "fresh_context",
           "Shared", "shared", "str_code", "str_decode"]

#: The resource budget of one `check` (see the module docstring for the measurement).
DEFAULT_RLIMIT = 1_000_000
#: The one seed of every solver (with `fresh_context`, the same query gets the same model).
SEED = 0


class Verdict(enum.Enum):
    """What a check says: a (confirmed) model, a proof of none, or no decision."""

    SAT = "sat"
    UNSAT = "unsat"
    UNKNOWN = "unknown"


def make_solver(rlimit: int = DEFAULT_RLIMIT) -> z3.Solver:
    """A fresh solver with the resource limit `rlimit` and the fixed seeds; nothing else."""
    solver = z3.Solver()
    solver.set("rlimit", rlimit)
    solver.set("random_seed", SEED)
    solver.set("smt.random_seed", SEED)
    return solver


def check(solver: z3.Solver) -> tuple[Verdict, str | None]:
    """Run `solver.check()`; `unknown` is its own verdict, with Z3's reason."""
    result = solver.check()
    if result == z3.sat:
        return Verdict.SAT, None
    if result == z3.unsat:
        return Verdict.UNSAT, None
    return Verdict.UNKNOWN, solver.reason_unknown() or "unknown"


# ----------------------------------------------------------------------------- contexts


@contextmanager
def fresh_context() -> Iterator[z3.Context]:
    """Encode and solve the enclosed queries in a fresh Z3 context.

    Z3 numbers every term of a context in creation order, and its search (hence the model
    it returns, and where a query near the resource limit stops) depends on those numbers:
    the same query can get another model after other queries ran in the same context. In a
    fresh context the same sequence of queries gets the same models in any process, whatever
    ran before. Creating a context costs a few milliseconds; use one per spec (or per query).

    This swaps z3py's default context (`z3.main_ctx()`), so that the encoder needs no context
    argument; terms made outside the block must not meet terms made inside it.
    """
    saved = z3.z3._main_ctx
    ctx = z3.Context()
    z3.z3._main_ctx = ctx
    try:
        yield ctx
    finally:
        z3.z3._main_ctx = saved


@dataclass
class Shared:
    """The sorts every encoder of one context shares, and its recursive functions."""

    #: one enumeration over every dtype name of `kinds.DTYPES` (a dtype is a dtype, whatever
    #: member set its kind allows; member sets are side conditions)
    dtype_sort: z3.SortRef
    #: the enumeration constant of each dtype name
    dtype_consts: dict[str, z3.ExprRef]
    #: the dtype name of each enumeration constant, keyed by the constant's printed name
    dtype_names: dict[str, str]
    #: the uninterpreted sort of values the encoding cannot see into
    opaque_sort: z3.SortRef
    #: recursive functions (folds over sequences), defined once per context by key
    recfuns: dict[str, z3.FuncDeclRef] = field(default_factory=dict)


def shared() -> Shared:
    """The shared sorts of the current default context (made on first use).

    They are kept on the context object itself: the sorts refer to their context, so a
    table keyed by contexts (even a weak one) would keep every context of every spec alive.
    """
    ctx = z3.main_ctx()
    found = getattr(ctx, "_opspec_shared", None)
    if found is None:
        sort, consts = z3.EnumSort("DType", list(DTYPES))
        by_name = dict(zip(DTYPES, consts))
        found = Shared(sort, by_name, {str(c): n for n, c in by_name.items()},
                       z3.DeclareSort("Opaque"))
        ctx._opspec_shared = found
    return found


def str_code(text: str) -> int:
    """The Int code of a string: its UTF-8 bytes, after a 0x01 byte, read as one integer."""
    return int.from_bytes(b"\x01" + text.encode("utf-8"), "big")


def str_decode(code: int) -> str:
    """The string of a code `str_code` made; any other int decodes to `<str #code>` (an
    unconstrained string in a model, which no literal pins)."""
    if code > 0:
        raw = code.to_bytes((code.bit_length() + 7) // 8, "big")
        if raw[:1] == b"\x01":
            try:
                return raw[1:].decode("utf-8")
            except UnicodeDecodeError:
                pass
    return f"<str #{code}>"
