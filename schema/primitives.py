"""The closed set of built-in primitives, generators and `requires` predicates.

`PRIMITIVES` maps each name as an expression writes it (dotted for namespaced members,
`pool.out`) to a `Primitive`: its parameters with their kinds, its result kind, a pure
concrete implementation and flags. Each implementation's docstring says what it computes
and becomes `Primitive.doc`. Roles:

- `value`: ordinary expression functions (reference §2.14), plus `repeat` and
  `balanced_sizes`, which workload rows and generator arguments use;
- `generator`: `values:` expressions of metadata tensors (§5.2); they return nested lists of
  ints; the `random` ones take a keyword `rng: random.Random` (seed it from
  `WORKLOAD_SEED` and the row, so that the same row gives the same values);
- `requires`: predicates on a metadata tensor's contents (§5.3); the contents are the
  implicit FIRST argument, both of `evaluate` and of `params` (a `Param` named `x`), so the
  written arguments are `params[1:]`; `rank` is the rank the contents are read at (None:
  any rank);
- `roofline`: `bytes(t)`, only in roofline formulas (the evaluator supplies it);
- `special`: `present(x)`, a special form the evaluator handles itself.

Values: ints, bools, strs (enum values and dtype names, e.g. `'bfloat16'`), floats, tuples,
None and `ADTValue`s (runtime objects with the same attributes work too). Value primitives
return tuples for sequences; generators return lists. A domain error raises
`EvaluationError` with the reference wording; hostile sizes are refused before anything is
allocated (`MAX_SEQ_LEN` elements in one sequence, `MAX_GENERATED` in one generated tensor).

SymInt rule (`symint_safe`). Under `torch.compile` the generated checks run with SymInts in
the size positions while every discriminant (Bool, enum, DType, ADT) and every parameter is a
concrete Python value. A primitive is `symint_safe` when, given SymInts in its `Int`/`Dim`/
`Shape` arguments, its implementation computes the result with `+ - * // %` only and never
asks for the truth value of a comparison between sizes (no `if`, `max`, `min`, set or
`bool()` on a SymBool); branching on concrete arguments (the reduction axes, a layout, the
length of a shape, which is static) is fine. Domain checks that would test a size are
performed only when that operand is a concrete int (`_concrete`); on SymInts the
precondition is the prover's and the generated checks' business. By this rule `broadcast`,
`pool.out`, `max`, `min`, `all`, `mhc.expansion`, `balanced_sizes` and `repeat` are unsafe;
generators and `requires` predicates run only at instantiation on concrete values and are
marked unsafe.
"""

from __future__ import annotations

import contextvars
import inspect
import math
import operator
import numbers
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from .errors import EvaluationError
from .kinds import (ADTK, BOOL, DIM, DTYPE, DTYPES, INT, SEQ_INT, SHAPE, TENSOR, VALUE, DTypeK,
                    IntK, Kind, MaybeK, NoneK, SeqK, StrK, UnionK, ValueK, join, unwrap_maybe)
from .values import field_of, is_int

__all__ = ["Param", "Primitive", "PRIMITIVES", "WORKLOAD_SEED", "MAX_INT_BITS", "MAX_SEQ_LEN",
           "MAX_GENERATED", "normalize_axis", "element_budget"]

#: Seed from which every workload's private RNG derives (the reference system's value).
WORKLOAD_SEED = 1235
#: Integers wider than this are refused (hostile sizes would otherwise exhaust memory).
MAX_INT_BITS = 4096
#: The longest sequence an expression may build or iterate.
MAX_SEQ_LEN = 1_000_000
#: The most elements one generator may produce (a DSA decode workload needs 2M).
MAX_GENERATED = 1 << 24

# `Axes` as a parameter kind. kinds.AXES spells the same set as a UnionK with a None member,
# but a parameter typed `int | list[int] | None` parses to Maybe[Int | Seq[Int]], which
# kinds.assignable does not match against that UnionK; the Maybe form accepts both.
AXES_PARAM = MaybeK(UnionK((INT, SEQ_INT)))
CATEGORIES = frozenset({"bool", "int", "float", "complex"})
REDUCE_MODES = frozenset({"full", "noop", "reject"})
MGROUPED = ADTK("MGroupedLayout")


# ----------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Param:
    """A declared argument. `optional` ones may be omitted (they get `default`) and may be
    passed by keyword; `keyword_only` ones only by keyword (`max(s, default=0)`)."""

    name: str
    kind: Kind
    optional: bool = False
    keyword_only: bool = False
    default: Any = None


@dataclass(frozen=True)
class Primitive:
    """One member of the closed set.

    `result_kind` receives the kinds of the arguments bound to `params`, in `params` order
    (omitted optional ones left out; for a variadic one, one kind per argument; a generator
    expression argument as `Seq[<element kind>]`). `evaluate` is the concrete implementation
    (a requires predicate's takes the contents first; a random generator's takes `rng=`).
    `rank` is, for a requires predicate, the rank it reads the contents at, and for a
    generator the rank of its result; None where any rank / where the arguments decide
    (`full`). `shape` gives a generator's result shape from its (non-rng) arguments."""

    name: str
    role: str  # "value" | "generator" | "requires" | "roofline" | "special"
    params: tuple[Param, ...]
    result_kind: Callable[[list[Kind]], Kind] = field(compare=False)
    evaluate: Callable[..., Any] = field(compare=False)
    doc: str = ""
    variadic: bool = False
    symint_safe: bool = False
    random: bool = False
    rank: int | None = None
    shape: Callable[..., tuple[int, ...]] | None = field(default=None, compare=False)

    def arity_error(self, npos: int, keywords: Sequence[str] = ()) -> str | None:
        """The reference's message when `npos` positional arguments and these keywords do
        not fit the parameters, else None."""
        if self.variadic:
            if keywords:
                return f"{self.name} takes no keyword '{keywords[0]}' here"
            return None if npos >= 1 else f"{self.name} misses argument 1 of 1"
        positional = [p for p in self.params if not p.keyword_only]
        if npos > len(positional):
            return f"{self.name} takes {len(positional)} arguments, got {npos}"
        names = {p.name: p for p in self.params}
        for i, k in enumerate(keywords):
            p = names.get(k)
            if p is None or not p.optional or k in keywords[:i]:
                return f"{self.name} takes no keyword '{k}' here"
            if not p.keyword_only and positional.index(p) < npos:
                return f"{self.name} takes no keyword '{k}' here"
        for i, p in enumerate(self.params):
            given = (i < npos and not p.keyword_only) or p.name in keywords
            if not given and not p.optional:
                return f"{self.name} misses argument {i + 1} of {len(self.params)}"
        return None


# ----------------------------------------------------------------------------- helpers


def _concrete(x: Any) -> bool:
    """A plain Python number: domain checks on it may branch (a SymInt is not one)."""
    return isinstance(x, (int, float))


def _show(value: Any) -> str:
    if isinstance(value, list):
        value = tuple(value)
    return str(value)


def _need_int(name: str, **args: Any) -> None:
    for k, v in args.items():
        if not is_int(v):
            raise EvaluationError(f"{name}: {k} must be an int, got {v!r}")


def _need_ints(name: str, values: Sequence[Any]) -> list[int]:
    values = list(values)
    if len(values) > MAX_SEQ_LEN:
        raise EvaluationError(f"{name}: {len(values)} values exceed the limit of {MAX_SEQ_LEN}")
    for v in values:
        if not is_int(v):
            raise EvaluationError(f"{name}: expected a list of ints, got {_show(values)}")
    return values


def _need_lengths(name: str, values: Sequence[Any]) -> list[int]:
    values = _need_ints(name, values)
    if any(v < 0 for v in values):
        raise EvaluationError(f"{name} needs non-negative lengths, got {_show(values)}")
    return values


def _check_len(name: str, n: int) -> None:
    if n > MAX_SEQ_LEN:
        raise EvaluationError(f"{name}: {n} elements exceed the limit of {MAX_SEQ_LEN}")
    _charge(name, n)


def _check_generated(name: str, n: int) -> None:
    if n > MAX_GENERATED:
        raise EvaluationError(f"{name}: {n} elements exceed the limit of {MAX_GENERATED}")
    _charge(name, n)


#: The elements left to the generators and sequence primitives inside `element_budget`
#: (None outside one: the runtime instantiates workloads without it).
_BUDGET: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "opspec_element_budget", default=None)


@contextmanager
def element_budget(n: int) -> Iterator[None]:
    """Within the block, generators and sequence primitives may make `n` elements in all.
    The limits above bound one call; the prover's workload check calls them once per row
    and dtype case, so 5000 rows of `full((N, N), 1)` with N = 4096 were 8e10 elements
    (hours). Past the budget each call raises an EvaluationError, which the caller reports
    as the diagnostic of its row."""
    token = _BUDGET.set([n, n])
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _charge(name: str, n: int) -> None:
    left = _BUDGET.get()
    if left is None:
        return
    left[0] -= n
    if left[0] < 0:
        raise EvaluationError(f"{name}: the workload rows of this spec generate more than "
                              f"{left[1]} elements in all")


def _check_bits(name: str, x: Any) -> None:
    if is_int(x) and x.bit_length() > MAX_INT_BITS:
        raise EvaluationError(f"{name}: an integer wider than {MAX_INT_BITS} bits")


def _dtype(name: str, t: Any) -> str:
    if not isinstance(t, str) or t not in DTYPES:
        raise EvaluationError(f"{name}: {t!r} is not a dtype name")
    return t


def normalize_axis(axis: int, rank: int) -> int:
    """The axis in `[0, rank)`. At rank 0 both `0` and `-1` name the scalar axis; otherwise
    an axis lies in `[-rank, rank)`."""
    lo, hi = (-1, 1) if rank == 0 else (-rank, rank)
    if not is_int(axis) or not lo <= axis < hi:
        raise EvaluationError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _axes(dim: Any) -> tuple:
    return (dim,) if is_int(dim) else tuple(dim)


# ----------------------------------------------------------------------------- value primitives


def broadcast(*shapes):
    """The NumPy/PyTorch broadcast of the shapes: right-aligned, each axis the one size
    other than 1 (or 1); shapes that disagree on an axis raise."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        # Compared, never hashed: under torch.compile the sizes are SymInts, which compare
        # (each comparison a guard) but cannot be put in a set.
        size = 1
        for s in shapes:
            j = len(s) - rank + i
            if j < 0 or s[j] == 1:
                continue
            if size == 1:
                size = s[j]
            elif s[j] != size:
                shown = ", ".join(_show(tuple(x)) for x in shapes)
                raise EvaluationError(f"shapes {shown} are not broadcastable")
        out.append(size)
    return tuple(out)


def reduced(shape, dim, keepdim, mode):
    """The shape after reducing axes `dim` of `shape`: `None` reduces every axis; an empty
    sequence reduces all (`'full'`), none (`'noop'`) or raises (`'reject'`); `keepdim` keeps
    reduced axes as 1; a rank-0 shape gives `()` (its axis is `0` or `-1`)."""
    if mode not in REDUCE_MODES:
        raise EvaluationError(f"reduced: mode must be 'full', 'noop' or 'reject', got {mode!r}")
    shape = tuple(shape)
    rank = len(shape)
    if dim is None:
        axes = set(range(rank))
    else:
        listed = _axes(dim)
        if not listed:
            if mode == "reject":
                raise EvaluationError("an empty dim is rejected")
            axes = set(range(rank)) if mode == "full" else set()
        else:
            axes = {normalize_axis(a, rank) for a in listed}
    if rank == 0:
        return ()
    return tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdim or i not in axes)


def valid_axes(dim, rank):
    """Whether every axis of `dim` is in range for `rank` (`None` is valid)."""
    if dim is None:
        return True
    try:
        for a in _axes(dim):
            normalize_axis(a, rank)
    except EvaluationError:
        return False
    return True


def unique_axes(dim, rank):
    """Whether the normalized axes of `dim` are distinct (`None` and an int are)."""
    if dim is None or is_int(dim):
        return True
    listed = tuple(dim)
    return len({normalize_axis(a, rank) for a in listed}) == len(listed)


def per_axis(value, i, n, fallback=None):
    """Item `i` of `value` when it is a length-`n` sequence (another length raises), the
    scalar `value` itself otherwise; `fallback` where that is None (both None raises)."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise EvaluationError(f"expected {n} values, got {_show(value)}")
        value = value[i]
    if value is None:
        if fallback is None:
            raise EvaluationError("per_axis: the value and its fallback are both None")
        return fallback
    return value


def ceil_div(a, b):
    """`a / b` rounded up, for a positive `b`."""
    if _concrete(b) and b <= 0:
        raise EvaluationError(f"ceil_div needs a positive divisor, got {b}")
    return -(-a // b)


def prod(values):
    """The product of the values (1 for none): `prod(S)` is the element count."""
    out = 1
    for v in values:
        out = out * v
        _check_bits("prod", out)
    return out


def sum_(values):
    """The sum of the values (0 for none); accepts a generator expression."""
    out = 0
    for v in values:
        out = out + v
    return out


def _extreme(name: str, pick: Callable) -> Callable:
    def extreme(values, *, default=None):
        values = list(values)
        if not values:
            if default is None:
                raise EvaluationError(f"{name} of an empty sequence needs a default")
            return default
        return pick(values)

    extreme.__name__ = name
    extreme.__doc__ = (f"The {'largest' if name == 'max' else 'smallest'} of the values; "
                       "`default` (keyword) when there are none, which otherwise raises.")
    return extreme


def all_(values):
    """Whether every value holds (true for none); accepts a generator expression."""
    return all(values)


def len_(values):
    """The length of a sequence."""
    return len(values)


def conv_out(length, kernel, stride, padding, dilation):
    """The convolution output length `(L + 2p - d(k - 1) - 1) // s + 1` (may be negative)."""
    if _concrete(stride) and stride <= 0:
        raise EvaluationError(f"conv.out needs a positive stride, got {stride}")
    return (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def pool_out(length, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's pooling output length: `(L + 2p - d(k - 1) - 1 (+ s - 1 with ceil_mode))
    // s + 1`; with `ceil_mode` a last window that would start beyond `L + p` is dropped;
    never negative."""
    if _concrete(stride) and stride <= 0:
        raise EvaluationError(f"pool.out needs a positive stride, got {stride}")
    extra = stride - 1 if ceil_mode else 0
    out = (length + 2 * padding - dilation * (kernel - 1) - 1 + extra) // stride + 1
    # torch: "ensure that the last pooling starts inside the image".
    if ceil_mode and (out - 1) * stride >= length + padding:
        out = out - 1
    return max(out, 0)


def moe_capacity(layout, rows, experts):
    """Rows an M-grouped layout materializes: `experts * max_m` when masked;
    `ceil_div(rows + experts * (alignment - 1), alignment) * alignment` whenever
    `packing == 'aligned'` (the newer of the two reference semantics); else `rows`."""
    if field_of(layout, "kind") == "masked":
        return experts * field_of(layout, "max_m")
    if field_of(layout, "packing") == "aligned":
        a = field_of(layout, "alignment")
        return ceil_div(rows + experts * (a - 1), a) * a
    return rows


def mhc_expansion(q):
    """The positive `n` with `n * n + 2 * n == q`; raises when there is none."""
    if not isinstance(q, bool):
        try:
            q = operator.index(q)  # a SymInt becomes its value here: torch records a guard
        except TypeError:
            pass
    if is_int(q) and q >= 0:
        n = math.isqrt(q + 1) - 1
        if n > 0 and n * n + 2 * n == q:
            return n
    raise EvaluationError(f"no positive n satisfies n * n + 2 * n == {q}")


def promote_int_to_float(dtype):
    """`float32` for an integer dtype, else the dtype itself (bool stays bool)."""
    return "float32" if DTYPES[_dtype("promote_int_to_float", dtype)][1] == "int" else dtype


def coalesce_dtype(value, dtype):
    """The `Maybe` dtype `value` when present, else `dtype`."""
    return dtype if value is None else value


def balanced_sizes(total, count):
    """`count` sizes summing to `total`: each `total // count`, the first `total % count`
    one larger."""
    _need_int("balanced_sizes", total=total, count=count)
    if count <= 0 or total < 0:
        raise EvaluationError(
            f"balanced_sizes needs total >= 0 and count > 0, got {total}, {count}")
    _check_len("balanced_sizes", count)
    q, r = divmod(total, count)
    return tuple(q + 1 if i < r else q for i in range(count))


def repeat(value, count):
    """`count` copies of the int `value` (workload rows: `seq_lens: "repeat(2048, 4)"`)."""
    _need_int("repeat", value=value, count=count)
    if count < 0:
        raise EvaluationError(f"repeat needs count >= 0, got {count}")
    _check_len("repeat", count)
    return (value,) * count


def category(x):
    """`'bool'`, `'int'`, `'float'` or `'complex'`: the category of a Python number (a bool
    is `'bool'`, not `'int'`) or of a dtype name."""
    if isinstance(x, str):
        return DTYPES[_dtype("category", x)][1]
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, numbers.Integral):
        return "int"
    if isinstance(x, numbers.Real):
        return "float"
    if isinstance(x, numbers.Complex):
        return "complex"
    raise EvaluationError(f"category: {x!r} is neither a number nor a dtype name")


# The largest finite value of each floating dtype (the lowest is its negation), and the
# floating formats without an infinity.
FLOAT_MAX = {
    "float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308, "float8_e4m3fn": 448.0, "float8_e4m3": 240.0,
    "float8_e5m2": 57344.0, "float8_e4m3fnuz": 240.0, "float8_e5m2fnuz": 57344.0,
}
NO_INFINITY = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz"})
_COMPLEX_PART = {"complex64": "float32", "complex128": "float64"}


def _fits_float(v: float, dtype: str) -> bool:
    if math.isnan(v):
        return True  # every floating format has a NaN
    if math.isinf(v):
        return dtype not in NO_INFINITY
    return -FLOAT_MAX[dtype] <= v <= FLOAT_MAX[dtype]


def representable(value, dtype):
    """Whether `value` converts to `dtype` without overflow, by PyTorch's scalar rule: always
    for bool (and for a bool value); a float dtype takes its finite range, NaN, and infinity
    only if the format has one; an integer dtype its range (a float must be finite; an
    unsigned dtype also takes a negative int it can wrap, down to `-max`); a complex value
    with a non-zero imaginary part only a complex dtype. Python ints outside
    `[-2**63, 2**64)` never fit (a torch Scalar cannot hold them)."""
    dtype = _dtype("representable", dtype)
    if dtype == "bool" or isinstance(value, bool):
        return True
    if not isinstance(value, numbers.Number):
        raise EvaluationError(f"representable: {value!r} is not a number")
    if isinstance(value, numbers.Integral) and not -(2 ** 63) <= value < 2 ** 64:
        return False
    if dtype in _COMPLEX_PART:
        c = complex(value)
        part = _COMPLEX_PART[dtype]
        return _fits_float(c.real, part) and _fits_float(c.imag, part)
    if not isinstance(value, numbers.Real):
        if complex(value).imag != 0:
            return False
        value = complex(value).real
    if dtype in FLOAT_MAX:
        return _fits_float(float(value), dtype)
    bits = DTYPES[dtype][0]
    if dtype.startswith("uint"):
        lo, hi = 0, 2 ** bits - 1
    else:
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if isinstance(value, numbers.Integral):
        return (-hi if lo == 0 else lo) <= value <= hi
    return math.isfinite(value) and lo <= value <= hi


def _special(name: str, doc: str) -> Callable:
    def fail(*args, **kwargs):
        raise EvaluationError(f"{name}(...) is a special form; the evaluator computes it")

    fail.__name__ = name
    fail.__doc__ = doc
    return fail


# ----------------------------------------------------------------------------- generators


def as_tensor(values):
    """The list of non-negative ints itself (rank 1, `len(L)`)."""
    return _need_lengths("as_tensor", values)


def prefix_sum(lengths):
    """`[0, L0, L0 + L1, ...]`: offsets of packed segments (cu_seqlens), `len(L) + 1`."""
    out = [0]
    for n in _need_lengths("prefix_sum", lengths):
        out.append(out[-1] + n)
    return out


def exclusive_prefix_sum(lengths):
    """Item `i` is the sum of the lengths before it; `len(L)` items, `L` non-empty."""
    lengths = _need_lengths("exclusive_prefix_sum", lengths)
    if not lengths:
        raise EvaluationError("exclusive_prefix_sum needs a non-empty list")
    return prefix_sum(lengths)[:-1]


def padded_exclusive_prefix_sum(lengths, pad):
    """The exclusive prefix sum of the lengths each padded to `ceil_div(n + 1, pad) * pad`."""
    _need_int("padded_exclusive_prefix_sum", pad=pad)
    if pad <= 0:
        raise EvaluationError(f"padded_exclusive_prefix_sum needs pad > 0, got {pad}")
    lengths = _need_lengths("padded_exclusive_prefix_sum", lengths)
    return exclusive_prefix_sum([ceil_div(n + 1, pad) * pad for n in lengths])


def _chunk_counts(name: str, lengths, chunk) -> list[int]:
    _need_int(name, chunk=chunk)
    if chunk <= 0:
        raise EvaluationError(f"{name} needs a positive chunk size, got {chunk}")
    return [ceil_div(n, chunk) for n in _need_lengths(name, lengths)]


def chunk_indices(lengths, chunk):
    """One `[request, chunk]` row per `chunk`-sized piece of each length:
    shape `(sum(ceil_div(n, chunk)), 2)`."""
    counts = _chunk_counts("chunk_indices", lengths, chunk)
    _check_generated("chunk_indices", 2 * sum(counts))
    return [[i, j] for i, c in enumerate(counts) for j in range(c)]


def token_indices(lengths):
    """One `[sequence, position]` row per token: shape `(sum(L), 2)`."""
    lengths = _need_lengths("token_indices", lengths)
    _check_generated("token_indices", 2 * sum(lengths))
    return [[i, j] for i, n in enumerate(lengths) for j in range(n)]


def packed_positions(lengths):
    """Each token's position within its sequence, sequences concatenated: `(sum(L),)`."""
    lengths = _need_lengths("packed_positions", lengths)
    _check_generated("packed_positions", sum(lengths))
    return [j for n in lengths for j in range(n)]


def chunk_offsets(lengths, chunk):
    """`prefix_sum` of each length's chunk count `ceil_div(n, chunk)`: `(len(L) + 1,)`."""
    return prefix_sum(_chunk_counts("chunk_offsets", lengths, chunk))


def paged_block_table(batch, width, pool, *, rng):
    """A `(batch, width)` page table over `pool` pages: pages disjoint across the whole
    table when the pool holds `batch * width` of them, else distinct within each row;
    needs `0 < width <= pool`."""
    _need_int("paged_block_table", batch=batch, width=width, pool=pool)
    if batch < 0 or not 0 < width <= pool:
        raise EvaluationError(
            f"paged_block_table needs batch >= 0 and 0 < W <= NP, got B={batch}, W={width}, "
            f"NP={pool}")
    _check_generated("paged_block_table", batch * width)
    if pool >= batch * width:
        pages = rng.sample(range(pool), batch * width)
        return [pages[b * width:(b + 1) * width] for b in range(batch)]
    return [rng.sample(range(pool), width) for _ in range(batch)]


def nsa_block_indices(lengths, block_size, selected, heads_kv, *, rng):
    """Per token and KV head, up to `selected` distinct blocks it can see, ascending, padded
    with the sentinel `sum(L)`: shape `(sum(L), heads_kv, selected)`. Position `j` of a
    sequence sees the blocks starting at or before it, `j // block_size + 1` of them."""
    _need_int("nsa_block_indices", block_size=block_size, selected=selected, heads_kv=heads_kv)
    lengths = _need_lengths("nsa_block_indices", lengths)
    if block_size <= 0 or selected <= 0 or heads_kv < 0:
        raise EvaluationError("nsa_block_indices needs block_size > 0, selected > 0 and "
                              f"heads >= 0, got {block_size}, {selected}, {heads_kv}")
    total = sum(lengths)
    _check_generated("nsa_block_indices", total * heads_kv * selected)
    rows = []
    for n in lengths:
        for j in range(n):
            visible = j // block_size + 1
            row = []
            for _ in range(heads_kv):
                picked = sorted(rng.sample(range(visible), min(selected, visible)))
                row.append(picked + [total] * (selected - len(picked)))
            rows.append(row)
    return rows


def nsa_block_counts(tokens, heads_kv, selected, *, rng):
    """A `(tokens, heads_kv)` table of counts, each uniform in `[1, selected]`."""
    _need_int("nsa_block_counts", tokens=tokens, heads_kv=heads_kv, selected=selected)
    if tokens < 0 or heads_kv < 0 or selected <= 0:
        raise EvaluationError("nsa_block_counts needs tokens >= 0, heads >= 0 and "
                              f"selected > 0, got {tokens}, {heads_kv}, {selected}")
    _check_generated("nsa_block_counts", tokens * heads_kv)
    return [[rng.randint(1, selected) for _ in range(heads_kv)] for _ in range(tokens)]


def topk_ids(rows, k, experts, *, rng):
    """`(rows, k)`: each row `k` distinct expert ids in `[0, experts)`; needs
    `0 < k <= experts`."""
    _need_int("topk_ids", rows=rows, k=k, experts=experts)
    if rows < 0 or not 0 < k <= experts:
        raise EvaluationError(
            f"topk_ids needs rows >= 0 and 0 < K <= E, got rows={rows}, K={k}, E={experts}")
    _check_generated("topk_ids", rows * k)
    return [rng.sample(range(experts), k) for _ in range(rows)]


def sample_indices(n, hi, *, rng):
    """`n` distinct values from `range(hi)`, in random order; needs `0 <= n <= hi`."""
    _need_int("sample_indices", n=n, hi=hi)
    if not 0 <= n <= hi:
        raise EvaluationError(f"sample_indices needs 0 <= n <= hi, got n={n}, hi={hi}")
    _check_generated("sample_indices", n)
    return rng.sample(range(hi), n)


def causal_topk_indices(batch, seq, heads_kv, k, keys, start, stride, *, rng):
    """DSA selected keys, shape `(batch, seq, heads_kv, k)`: query `s` sits at position
    `start + s` and sees the `min(keys, max(1, (start + s + 1) // stride))` first keys
    (stride-compressed); per head it picks up to `k` distinct ones in random order and pads
    the row with `keys` (the sentinel)."""
    _need_int("causal_topk_indices", batch=batch, seq=seq, heads_kv=heads_kv, k=k, keys=keys,
              start=start, stride=stride)
    if min(batch, seq, heads_kv, start) < 0 or min(k, keys, stride) <= 0:
        raise EvaluationError(
            "causal_topk_indices needs B, S, H_kv, q_start >= 0 and K, S_kv, stride > 0, got "
            f"{batch}, {seq}, {heads_kv}, {k}, {keys}, {start}, {stride}")
    _check_generated("causal_topk_indices", batch * seq * heads_kv * k)
    out = []
    for _ in range(batch):
        per_query = []
        for s in range(seq):
            visible = min(keys, max(1, (start + s + 1) // stride))
            row = []
            for _ in range(heads_kv):
                picked = rng.sample(range(visible), min(k, visible))
                row.append(picked + [keys] * (k - len(picked)))
            per_query.append(row)
        out.append(per_query)
    return out


def key_windows(lengths, first, count, side):
    """Per query of the packed positions `[first, first + count)`, the bound of its causal
    key window: `'start'` gives the offset where its sequence starts, `'end'` one past the
    query itself. Shape `(count,)`; needs `first + count <= sum(L)`."""
    lengths = _need_lengths("key_windows", lengths)
    _need_int("key_windows", first=first, count=count)
    if side not in ("start", "end"):
        raise EvaluationError(f"key_windows: side must be 'start' or 'end', got {side!r}")
    if first < 0 or count < 0 or first + count > sum(lengths):
        raise EvaluationError(f"key_windows needs 0 <= first and first + count <= "
                              f"{sum(lengths)}, got first={first}, count={count}")
    _check_generated("key_windows", count)
    offsets = prefix_sum(lengths)
    out, seg = [], 0
    for p in range(first, first + count):
        while offsets[seg + 1] <= p:
            seg += 1
        out.append(offsets[seg] if side == "start" else p + 1)
    return out


def full(shape, value):
    """A tensor of `shape` (a tuple of non-negative ints) filled with `value`; rank
    `len(shape)`, e.g. `full((B, S), S_kv)`."""
    shape = _need_lengths("full", shape)
    _check_generated("full", prod(shape))

    def fill(axes: list[int]):
        return value if not axes else [fill(axes[1:]) for _ in range(axes[0])]

    return fill(shape)


def _layout_parts(layout) -> tuple[str, str, int]:
    return (field_of(layout, "packing"), field_of(layout, "metadata_kind"),
            field_of(layout, "alignment"))


def moe_layout_metadata(layout, rows, experts):
    """Valid metadata of an `MGroupedLayout` for `rows` materialized rows over `experts`:
    masked: `(E,)` valid-row counts, about half of each expert's `max_m` (needs
    `rows == E * max_m`); contiguous: rows split into `alignment`-sized tiles as evenly as
    possible (needs `rows % alignment == 0`), expert `e` owning `t_e` tiles and filling them
    but for `alignment - 1` rows of its last one; `per_row` gives `(R,)` the owning expert
    of each physical row, `physical_psum` gives `(E,)` the physical end of each expert's
    rows (an inclusive prefix sum when tight)."""
    _need_int("moe.layout_metadata", rows=rows, experts=experts)
    if experts <= 0 or rows < 0:
        raise EvaluationError(f"moe.layout_metadata needs E > 0 and R >= 0, got R={rows}, "
                              f"E={experts}")
    if field_of(layout, "kind") == "masked":
        max_m = field_of(layout, "max_m")
        if rows != experts * max_m:
            raise EvaluationError(f"masked metadata needs R == E * max_m, got R={rows}, "
                                  f"E={experts}, max_m={max_m}")
        return list(balanced_sizes(rows // 2, experts))
    _, metadata_kind, a = _layout_parts(layout)
    if a <= 0 or rows % a:
        raise EvaluationError(f"contiguous metadata needs R % alignment == 0, got R={rows}, "
                              f"alignment={a}")
    _check_generated("moe.layout_metadata", max(rows, experts))
    tiles = balanced_sizes(rows // a, experts)
    if metadata_kind == "per_row":
        return [e for e, t in enumerate(tiles) for _ in range(a * t)]
    out, start = [], 0
    for t in tiles:
        out.append(a * start + (a * t - (a - 1) if t else 0))
        start += t
    return out


def _layout_shape(layout, rows, experts) -> tuple[int]:
    per_row = (field_of(layout, "kind") == "contiguous"
               and field_of(layout, "metadata_kind") == "per_row")
    return (rows,) if per_row else (experts,)


# ----------------------------------------------------------------------------- requires predicates


def _flat(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    return [x]


def _ordered(x) -> bool:
    return all(a <= b for a, b in zip(x, x[1:]))


def prefix_offsets(x, total):
    """`x` starts at 0, never decreases and ends at `total`."""
    x = list(x)
    return bool(x) and x[0] == 0 and _ordered(x) and x[-1] == total


def max_segment(x, bound):
    """Adjacent differences of `x` are at most `bound`."""
    x = list(x)
    return all(b - a <= bound for a, b in zip(x, x[1:]))


def in_range(x, lo, hi):
    """Every element of `x`, at any rank, lies in `[lo, hi)`."""
    return all(lo <= v < hi for v in _flat(x))


def sums_to(x, total):
    """The elements of `x` sum to `total`."""
    return sum(x) == total


def exclusive_prefix_of(x, t):
    """`x` has one element per element of `t`, element `i` the sum of `t[:i]`."""
    x, t = list(x), list(t)
    if len(x) != len(t):
        return False
    running = 0
    for v, n in zip(x, t):
        if v != running:
            return False
        running += n
    return True


def indices_within(x, offsets):
    """Each row `(i, j)` of `x` names segment `i` of `offsets` and a position `j` inside it."""
    offsets = list(offsets)
    segments = len(offsets) - 1
    for row in x:
        if not isinstance(row, (list, tuple)) or len(row) != 2:
            return False
        i, j = row
        if not (0 <= i < segments and 0 <= j < offsets[i + 1] - offsets[i]):
            return False
    return True


def paged_fits(x, cu, cap):
    """`len(cu) == len(x) + 1` and `x[i]` plus segment `i` of `cu` is at most `cap`
    (a request's cached keys plus its new ones fit its pages)."""
    x, cu = list(x), list(cu)
    return len(cu) == len(x) + 1 and all(
        c + (cu[i + 1] - cu[i]) <= cap for i, c in enumerate(x))


def moe_layout_valid(x, layout, rows, experts):
    """`x` is valid metadata of `layout` (see `moe.layout_metadata`): masked: `E` counts in
    `[0, max_m]`; contiguous `per_row`: `R` expert ids in `[0, E)`, non-decreasing, changing
    only at multiples of `alignment`; contiguous `physical_psum`: `E` non-decreasing ends,
    each at or past the aligned end of the previous one, the last `== R` when tight and
    `<= R` when aligned."""
    x = list(x)
    if field_of(layout, "kind") == "masked":
        max_m = field_of(layout, "max_m")
        return len(x) == experts and all(0 <= v <= max_m for v in x)
    packing, metadata_kind, a = _layout_parts(layout)
    if a <= 0:
        return False
    if metadata_kind == "per_row":
        changes = all(i % a == 0 for i in range(1, len(x)) if x[i] != x[i - 1])
        return (len(x) == rows and _ordered(x) and all(0 <= v < experts for v in x)
                and changes)
    if len(x) != experts:
        return False
    prev = 0
    for end in x:
        if end < ceil_div(prev, a) * a:
            return False
        prev = end
    if not x:
        return True
    return x[-1] == rows if packing == "tight" else x[-1] <= rows


def chunk_offsets_of(x, offsets, block):
    """`x` is `prefix_sum` of `ceil_div(segment, block)` over the segments of `offsets`
    (chunk offsets consistent with the token offsets and the block size)."""
    offsets = list(offsets)
    if block <= 0 or not _ordered(offsets):
        return False
    counts = [ceil_div(b - a, block) for a, b in zip(offsets, offsets[1:])]
    return list(x) == prefix_sum(counts)


# ----------------------------------------------------------------------------- result kinds


def _const(kind: Kind) -> Callable[[list[Kind]], Kind]:
    return lambda kinds: kind


def _ceil_div_kind(kinds: list[Kind]) -> Kind:
    return DIM if all(k == DIM for k in kinds) else INT


def _elem(kinds: list[Kind]) -> Kind | None:
    seq = unwrap_maybe(kinds[0]) if kinds else None
    return seq.elem if isinstance(seq, SeqK) else None


def _fold_kind(kinds: list[Kind]) -> Kind:
    """`prod`/`sum`: Dim over a Shape, Int over Ints, opaque over opaque values."""
    elem = _elem(kinds)
    if isinstance(elem, ValueK):
        return VALUE
    return DIM if elem == DIM else INT


def _extreme_kind(kinds: list[Kind]) -> Kind:
    elem = _elem(kinds)
    if len(kinds) > 1 and elem is not None:
        elem = join(elem, unwrap_maybe(kinds[1]))
    if isinstance(elem, ValueK):
        return VALUE
    return elem if isinstance(elem, IntK) else INT


def _promote_kind(kinds: list[Kind]) -> Kind:
    t = kinds[0] if kinds else DTYPE
    if not isinstance(t, DTypeK) or t.members is None:
        return DTYPE
    return DTypeK(frozenset("float32" if DTYPES[m][1] == "int" else m for m in t.members))


def _coalesce_kind(kinds: list[Kind]) -> Kind:
    v, t = (kinds + [DTYPE, DTYPE])[:2]
    if isinstance(v, NoneK):
        return t
    if isinstance(v, DTypeK):  # narrowed by present(v): the value itself
        return v
    inner = unwrap_maybe(v)
    if isinstance(inner, DTypeK) and isinstance(t, DTypeK):
        return join(inner, t) or DTYPE
    return DTYPE


def _repeat_kind(kinds: list[Kind]) -> Kind:
    return SeqK(kinds[0]) if kinds and isinstance(kinds[0], IntK) else SEQ_INT


# ----------------------------------------------------------------------------- the registry

P = Param
_MAYBE_INT = MaybeK(INT)
_PER_AXIS_VALUE = MaybeK(UnionK((INT, SeqK(_MAYBE_INT))))
_SEQ = SeqK(VALUE)
_CATEGORY = StrK(CATEGORIES)


def _mk(name: str, role: str, params: tuple[Param, ...], result: Callable[[list[Kind]], Kind],
        fn: Callable, **flags: Any) -> Primitive:
    return Primitive(name=name, role=role, params=params, result_kind=result, evaluate=fn,
                     doc=inspect.getdoc(fn) or "", **flags)


def _value(name, params, result, fn, *, safe: bool, **flags) -> Primitive:
    return _mk(name, "value", params, result, fn, symint_safe=safe, **flags)


def _generator(name, params, fn, shape, rank, *, random: bool = False) -> Primitive:
    return _mk(name, "generator", params, _const(VALUE), fn, random=random, rank=rank,
               shape=shape)


def _requires(name, params, fn, rank) -> Primitive:
    contents = Param("x", VALUE if rank is None else SeqK(VALUE))
    return _mk(name, "requires", (contents, *params), _const(BOOL), fn, rank=rank)


def _chunks(L, c) -> int:
    return sum(ceil_div(n, c) for n in L)


_ALL: list[Primitive] = [
    # -- §2.14 value primitives
    _mk("present", "special", (P("x", VALUE),), _const(BOOL), _special("present", "Whether an optional tensor, a `Maybe` parameter or `out` (the "
                                   "caller's buffer) is given; the evaluator computes it."),
        symint_safe=True),
    _value("broadcast", (P("shapes", SHAPE),), _const(SHAPE), broadcast, safe=False,
           variadic=True),
    _value("reduced", (P("S", SHAPE), P("dim", AXES_PARAM), P("keepdim", BOOL),
                       P("mode", StrK(REDUCE_MODES))), _const(SHAPE), reduced, safe=True),
    _value("valid_axes", (P("dim", AXES_PARAM), P("rank", INT)), _const(BOOL), valid_axes,
           safe=True),
    _value("unique_axes", (P("dim", AXES_PARAM), P("rank", INT)), _const(BOOL), unique_axes,
           safe=True),
    _value("per_axis", (P("v", _PER_AXIS_VALUE), P("i", INT), P("n", INT),
                        P("fallback", _MAYBE_INT, optional=True)), _const(INT), per_axis,
           safe=True),
    _value("ceil_div", (P("a", INT), P("b", INT)), _ceil_div_kind, ceil_div, safe=True),
    _value("len", (P("s", _SEQ),), _const(DIM), len_, safe=True),
    _value("prod", (P("s", SEQ_INT),), _fold_kind, prod, safe=True),
    _value("sum", (P("s", SEQ_INT),), _fold_kind, sum_, safe=True),
    _value("max", (P("s", SEQ_INT), P("default", _MAYBE_INT, optional=True, keyword_only=True)),
           _extreme_kind, _extreme("max", max), safe=False),
    _value("min", (P("s", SEQ_INT), P("default", _MAYBE_INT, optional=True, keyword_only=True)),
           _extreme_kind, _extreme("min", min), safe=False),
    _value("all", (P("s", SeqK(BOOL)),), _const(BOOL), all_, safe=False),
    _value("conv.out", (P("L", INT), P("k", INT), P("s", INT), P("p", INT), P("d", INT)),
           _const(INT), conv_out, safe=True),
    _value("pool.out", (P("L", INT), P("k", INT), P("s", INT), P("p", INT), P("d", INT),
                        P("ceil_mode", BOOL)), _const(DIM), pool_out, safe=False),
    _value("moe.capacity", (P("layout", MGROUPED), P("rows", INT), P("experts", INT)),
           _const(DIM), moe_capacity, safe=True),
    _value("mhc.expansion", (P("Q", INT),), _const(DIM), mhc_expansion, safe=False),
    _value("promote_int_to_float", (P("T", DTYPE),), _promote_kind, promote_int_to_float,
           safe=True),
    _value("coalesce_dtype", (P("v", MaybeK(DTYPE)), P("T", DTYPE)), _coalesce_kind,
           coalesce_dtype, safe=True),
    _value("balanced_sizes", (P("total", INT), P("count", INT)), _const(SEQ_INT),
           balanced_sizes, safe=False),
    _value("repeat", (P("x", INT), P("n", INT)), _repeat_kind, repeat, safe=False),
    _value("category", (P("x", VALUE),), _const(_CATEGORY), category, safe=True),
    _value("representable", (P("v", VALUE), P("T", DTYPE)), _const(BOOL), representable,
           safe=True),
    _mk("bytes", "roofline", (P("t", TENSOR),), _const(INT), _special("bytes", "ROOFLINE ONLY: the byte count of tensor `t`, supplied by the "
                                 "roofline scope."),
        symint_safe=True),
    # -- §5.2 generators
    _generator("as_tensor", (P("L", SEQ_INT),), as_tensor, lambda L: (len(L),), 1),
    _generator("prefix_sum", (P("L", SEQ_INT),), prefix_sum, lambda L: (len(L) + 1,), 1),
    _generator("exclusive_prefix_sum", (P("L", SEQ_INT),), exclusive_prefix_sum,
               lambda L: (len(L),), 1),
    _generator("padded_exclusive_prefix_sum", (P("L", SEQ_INT), P("pad", INT)),
               padded_exclusive_prefix_sum, lambda L, pad: (len(L),), 1),
    _generator("chunk_indices", (P("L", SEQ_INT), P("c", INT)), chunk_indices,
               lambda L, c: (_chunks(L, c), 2), 2),
    _generator("token_indices", (P("L", SEQ_INT),), token_indices, lambda L: (sum(L), 2), 2),
    _generator("packed_positions", (P("L", SEQ_INT),), packed_positions, lambda L: (sum(L),),
               1),
    _generator("chunk_offsets", (P("L", SEQ_INT), P("c", INT)), chunk_offsets,
               lambda L, c: (len(L) + 1,), 1),
    _generator("paged_block_table", (P("B", INT), P("W", INT), P("NP", INT)),
               paged_block_table, lambda B, W, NP: (B, W), 2, random=True),
    _generator("nsa_block_indices", (P("L", SEQ_INT), P("block", INT), P("sel", INT),
                                     P("heads", INT)), nsa_block_indices,
               lambda L, block, sel, heads: (sum(L), heads, sel), 3, random=True),
    _generator("nsa_block_counts", (P("tokens", INT), P("heads", INT), P("sel", INT)),
               nsa_block_counts, lambda tokens, heads, sel: (tokens, heads), 2, random=True),
    _generator("topk_ids", (P("rows", INT), P("k", INT), P("experts", INT)), topk_ids,
               lambda rows, k, experts: (rows, k), 2, random=True),
    _generator("sample_indices", (P("n", INT), P("hi", INT)), sample_indices,
               lambda n, hi: (n,), 1, random=True),
    _generator("moe.layout_metadata", (P("layout", MGROUPED), P("R", INT), P("E", INT)),
               moe_layout_metadata, _layout_shape, 1),
    _generator("causal_topk_indices", (P("B", INT), P("S", INT), P("H_kv", INT), P("K", INT),
                                       P("S_kv", INT), P("q_start", INT), P("stride_kv", INT)),
               causal_topk_indices, lambda B, S, H, K, S_kv, q, st: (B, S, H, K), 4,
               random=True),
    _generator("key_windows", (P("seq_lens", SEQ_INT), P("first", INT), P("S", INT),
                               P("side", StrK(frozenset({"start", "end"})))), key_windows,
               lambda L, first, S, side: (S,), 1),
    _generator("full", (P("shape", SEQ_INT), P("value", INT)), full,
               lambda shape, value: tuple(shape), None),
    # -- §5.3 requires predicates (the constrained tensor's contents come first)
    _requires("prefix_offsets", (P("total", INT),), prefix_offsets, 1),
    _requires("max_segment", (P("bound", INT),), max_segment, 1),
    _requires("in_range", (P("lo", INT), P("hi", INT)), in_range, None),
    _requires("sums_to", (P("total", INT),), sums_to, 1),
    _requires("exclusive_prefix_of", (P("t", SEQ_INT),), exclusive_prefix_of, 1),
    _requires("indices_within", (P("offsets", SEQ_INT),), indices_within, 2),
    _requires("attn.paged_fits", (P("cu", SEQ_INT), P("cap", INT)), paged_fits, 1),
    _requires("moe.layout_valid", (P("layout", MGROUPED), P("R", INT), P("E", INT)),
              moe_layout_valid, 1),
    _requires("chunk_offsets_of", (P("offsets", SEQ_INT), P("bs", INT)), chunk_offsets_of, 1),
]

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _ALL}
assert len(PRIMITIVES) == len(_ALL), "duplicate primitive name"
del _ALL, P
