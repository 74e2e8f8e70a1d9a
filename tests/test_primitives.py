"""The primitive registry: every member's semantics, domain errors, kinds and flags."""

from __future__ import annotations

import math
import random
import operator
import re

import pytest

from opspec.schema.errors import EvaluationError
from opspec.schema.kinds import (ADTK, AXES, BOOL, DIM, DTYPE, INT, SEQ_INT, SHAPE, VALUE, DTypeK,
                                 MaybeK, NONE, SeqK, StrK, assignable)
from opspec.schema.primitives import (MAX_GENERATED, MAX_INT_BITS, MAX_SEQ_LEN, PRIMITIVES,
                                      WORKLOAD_SEED, normalize_axis)
from opspec.schema.types import parse_type
from opspec.schema.values import ADTValue


def ev(name: str, *args, **kwargs):
    return PRIMITIVES[name].evaluate(*args, **kwargs)


def fails(message: str):
    """Expect exactly this EvaluationError message."""
    return pytest.raises(EvaluationError, match="^" + re.escape(message) + "$")


def layout(ctor: str, **fields) -> ADTValue:
    return ADTValue.of("MGroupedLayout", ctor, fields)


MASKED = layout("masked", max_m=128)
TIGHT_PSUM = layout("contiguous", packing="tight", metadata_kind="physical_psum", alignment=1)
TIGHT_ROW = layout("contiguous", packing="tight", metadata_kind="per_row", alignment=1)
ALIGNED_PSUM = layout("contiguous", packing="aligned", metadata_kind="physical_psum",
                      alignment=8)
ALIGNED_ROW = layout("contiguous", packing="aligned", metadata_kind="per_row", alignment=8)


# ----------------------------------------------------------------------------- the registry

VALUE_NAMES = {"broadcast", "reduced", "valid_axes", "unique_axes", "per_axis", "ceil_div", "len",
               "prod", "sum", "max", "min", "all", "conv.out", "pool.out", "moe.capacity",
               "mhc.expansion", "promote_int_to_float", "coalesce_dtype", "balanced_sizes",
               "category", "representable", "repeat"}
GENERATOR_NAMES = {"as_tensor", "prefix_sum", "exclusive_prefix_sum",
                   "padded_exclusive_prefix_sum", "chunk_indices", "token_indices",
                   "packed_positions", "chunk_offsets", "paged_block_table", "nsa_block_indices",
                   "nsa_block_counts", "topk_ids", "sample_indices", "moe.layout_metadata",
                   "causal_topk_indices", "key_windows", "full"}
REQUIRES_NAMES = {"prefix_offsets", "max_segment", "in_range", "sums_to", "exclusive_prefix_of",
                  "indices_within", "attn.paged_fits", "moe.layout_valid", "chunk_offsets_of"}
RANDOM_NAMES = {"paged_block_table", "nsa_block_indices", "nsa_block_counts", "topk_ids",
                "sample_indices", "causal_topk_indices"}


def test_registry_is_the_reference_set() -> None:
    expected = VALUE_NAMES | GENERATOR_NAMES | REQUIRES_NAMES | {"present", "bytes"}
    assert set(PRIMITIVES) == expected
    roles = {n: p.role for n, p in PRIMITIVES.items()}
    assert {n for n, r in roles.items() if r == "value"} == VALUE_NAMES
    assert {n for n, r in roles.items() if r == "generator"} == GENERATOR_NAMES
    assert {n for n, r in roles.items() if r == "requires"} == REQUIRES_NAMES
    assert roles["present"] == "special" and roles["bytes"] == "roofline"
    assert {n for n, p in PRIMITIVES.items() if p.random} == RANDOM_NAMES


def test_every_member_is_documented_and_named_by_its_key() -> None:
    for name, prim in PRIMITIVES.items():
        assert prim.name == name
        assert prim.doc, name


def test_requires_take_the_contents_first_and_declare_a_rank() -> None:
    for name in REQUIRES_NAMES:
        prim = PRIMITIVES[name]
        assert prim.params[0].name == "x"
        assert prim.rank == (None if name == "in_range" else 2 if name == "indices_within" else 1)


def test_generator_ranks_match_their_shapes() -> None:
    for name in GENERATOR_NAMES:
        assert PRIMITIVES[name].shape is not None
    assert PRIMITIVES["full"].rank is None
    assert PRIMITIVES["causal_topk_indices"].rank == 4


def test_keyword_arguments() -> None:
    mx = PRIMITIVES["max"]
    assert mx.params[1].name == "default" and mx.params[1].keyword_only
    pa = PRIMITIVES["per_axis"]
    assert pa.params[3].name == "fallback" and pa.params[3].optional
    assert not pa.params[3].keyword_only
    assert PRIMITIVES["broadcast"].variadic


@pytest.mark.parametrize("name,npos,kw,message", [
    ("ceil_div", 2, (), None),
    ("ceil_div", 3, (), "ceil_div takes 2 arguments, got 3"),
    ("ceil_div", 1, (), "ceil_div misses argument 2 of 2"),
    ("ceil_div", 2, ("b",), "ceil_div takes no keyword 'b' here"),
    ("max", 1, ("default",), None),
    ("max", 2, (), "max takes 1 arguments, got 2"),
    ("max", 1, ("fallback",), "max takes no keyword 'fallback' here"),
    ("per_axis", 3, ("fallback",), None),
    ("per_axis", 4, (), None),
    ("per_axis", 4, ("fallback",), "per_axis takes no keyword 'fallback' here"),
    ("per_axis", 2, (), "per_axis misses argument 3 of 4"),
    ("broadcast", 3, (), None),
    ("broadcast", 0, (), "broadcast misses argument 1 of 1"),
    ("in_range", 3, (), None),
    ("in_range", 2, (), "in_range misses argument 3 of 3"),
])
def test_arity_messages(name, npos, kw, message) -> None:
    assert PRIMITIVES[name].arity_error(npos, kw) == message


# ----------------------------------------------------------------------------- shapes and axes


@pytest.mark.parametrize("shapes,out", [
    ([(2, 3), (3,)], (2, 3)),
    ([(4, 1, 5), (3, 1)], (4, 3, 5)),
    ([(1,), (0,)], (0,)),
    ([(), (2, 2)], (2, 2)),
    ([(7,)], (7,)),
    ([(1, 1), (1,)], (1, 1)),
    ([(5, 1, 2), (1, 4, 1), (2,)], (5, 4, 2)),
])
def test_broadcast(shapes, out) -> None:
    assert ev("broadcast", *shapes) == out


def test_broadcast_error() -> None:
    with fails("shapes (2, 3), (4,) are not broadcastable"):
        ev("broadcast", (2, 3), (4,))
    with fails("shapes (0,), (3,) are not broadcastable"):
        ev("broadcast", (0,), (3,))


@pytest.mark.parametrize("shape,dim,keepdim,mode,out", [
    ((2, 3, 4), 1, False, "full", (2, 4)),
    ((2, 3, 4), -1, True, "full", (2, 3, 1)),
    ((2, 3, 4), (0, 2), False, "full", (3,)),
    ((2, 3, 4), [0, -1], True, "reject", (1, 3, 1)),
    ((2, 3, 4), None, False, "full", ()),
    ((2, 3, 4), None, True, "noop", (1, 1, 1)),
    ((2, 3, 4), (), False, "full", ()),
    ((2, 3, 4), (), True, "full", (1, 1, 1)),
    ((2, 3, 4), (), False, "noop", (2, 3, 4)),
    ((2, 3, 4), (), True, "noop", (2, 3, 4)),
    ((), 0, True, "full", ()),
    ((), -1, False, "full", ()),
    ((), None, True, "full", ()),
    ((), (), True, "noop", ()),
    ((5,), 0, False, "reject", ()),
])
def test_reduced(shape, dim, keepdim, mode, out) -> None:
    assert ev("reduced", shape, dim, keepdim, mode) == out


def test_reduced_errors() -> None:
    with fails("an empty dim is rejected"):
        ev("reduced", (2, 3), (), False, "reject")
    with fails("axis 2 is out of range for rank 2"):
        ev("reduced", (2, 3), 2, False, "full")
    with fails("axis -3 is out of range for rank 2"):
        ev("reduced", (2, 3), (0, -3), False, "full")
    with fails("axis 1 is out of range for rank 0"):
        ev("reduced", (), 1, False, "full")
    with pytest.raises(EvaluationError, match="mode must be"):
        ev("reduced", (2,), 0, False, "all")


def test_normalize_axis() -> None:
    assert normalize_axis(-1, 3) == 2
    assert normalize_axis(0, 0) == 0 and normalize_axis(-1, 0) == 0
    with fails("axis -2 is out of range for rank 0"):
        normalize_axis(-2, 0)


@pytest.mark.parametrize("dim,rank,valid,unique", [
    (None, 3, True, True),
    (0, 3, True, True),
    (-3, 3, True, True),
    ((0, 1, 2), 3, True, True),
    ((0, -3), 3, True, False),
    ((1, 1), 3, True, False),
    ((), 3, True, True),
    ((0,), 0, True, True),
    ((-1, 0), 0, True, False),
])
def test_valid_and_unique_axes(dim, rank, valid, unique) -> None:
    assert ev("valid_axes", dim, rank) is valid
    assert ev("unique_axes", dim, rank) is unique


@pytest.mark.parametrize("dim,rank", [(3, 3), ((0, 3), 3), (-4, 3), (1, 0), ((-2,), 0)])
def test_invalid_axes(dim, rank) -> None:
    assert ev("valid_axes", dim, rank) is False


def test_unique_axes_raises_on_an_axis_out_of_range() -> None:
    with fails("axis 5 is out of range for rank 2"):
        ev("unique_axes", (0, 5), 2)


def test_per_axis() -> None:
    assert ev("per_axis", 3, 0, 2) == 3
    assert ev("per_axis", (3, 5), 1, 2) == 5
    assert ev("per_axis", [3, 5], 0, 2) == 3
    assert ev("per_axis", None, 0, 2, 7) == 7
    assert ev("per_axis", (None, 4), 0, 2, fallback=1) == 1
    assert ev("per_axis", (None, 4), 1, 2) == 4
    with fails("expected 2 values, got (1, 2, 3)"):
        ev("per_axis", (1, 2, 3), 0, 2)
    with fails("per_axis: the value and its fallback are both None"):
        ev("per_axis", None, 0, 2)
    with fails("per_axis: the value and its fallback are both None"):
        ev("per_axis", (None, 1), 0, 2)


# ----------------------------------------------------------------------------- integers


@pytest.mark.parametrize("a,b,out", [(7, 2, 4), (8, 2, 4), (0, 5, 0), (1, 128, 1),
                                     (-7, 2, -3), (129, 128, 2)])
def test_ceil_div(a, b, out) -> None:
    assert ev("ceil_div", a, b) == out


@pytest.mark.parametrize("b", [0, -3])
def test_ceil_div_error(b) -> None:
    with fails(f"ceil_div needs a positive divisor, got {b}"):
        ev("ceil_div", 5, b)


def test_folds() -> None:
    assert ev("len", (1, 2, 3)) == 3 and ev("len", ()) == 0
    assert ev("prod", (2, 3, 4)) == 24 and ev("prod", ()) == 1
    assert ev("sum", (2, 3, 4)) == 9 and ev("sum", ()) == 0
    assert ev("sum", (x for x in (1, 2))) == 3
    assert ev("max", (2, 9, 4)) == 9 and ev("min", (2, 9, 4)) == 2
    assert ev("max", (), default=1) == 1 and ev("min", (), default=-1) == -1
    assert ev("max", (5,), default=9) == 5
    assert ev("all", (True, True)) is True and ev("all", ()) is True
    assert ev("all", (True, False)) is False
    with fails("max of an empty sequence needs a default"):
        ev("max", ())
    with fails("min of an empty sequence needs a default"):
        ev("min", [])


def test_prod_refuses_hostile_sizes() -> None:
    with pytest.raises(EvaluationError, match=f"wider than {MAX_INT_BITS} bits"):
        ev("prod", (2 ** 100,) * 50)


@pytest.mark.parametrize("args,out", [
    ((32, 3, 1, 1, 1), 32), ((32, 3, 2, 1, 1), 16), ((10, 3, 1, 0, 2), 6),
    ((7, 5, 2, 0, 1), 2), ((2, 5, 1, 0, 1), -2), ((0, 1, 1, 0, 1), 0),
])
def test_conv_out(args, out) -> None:
    assert ev("conv.out", *args) == out


def test_conv_out_error() -> None:
    with fails("conv.out needs a positive stride, got 0"):
        ev("conv.out", 5, 1, 0, 0, 1)


# (L, k, s, p, d, ceil_mode) → torch's output length, computed by hand from
# out = (L + 2p - d(k-1) - 1 (+ s-1)) // s + 1, minus one when ceil_mode's last window would
# start at or beyond L + p, clamped at 0.
POOL_TABLE = [
    ((7, 3, 2, 0, 1, False), 3),
    ((7, 3, 2, 0, 1, True), 3),
    ((8, 3, 2, 0, 1, False), 3),
    ((8, 3, 2, 0, 1, True), 4),    # ceil_mode adds a partial last window
    ((5, 2, 2, 1, 1, False), 3),
    ((5, 2, 2, 1, 1, True), 3),    # 4 windows, but the last would start at 6 >= L + p
    ((6, 2, 2, 1, 1, True), 4),
    ((2, 1, 2, 0, 1, True), 1),    # last-window rule again: (2 - 1) * 2 >= 2
    ((3, 1, 2, 0, 1, True), 2),
    ((4, 2, 3, 0, 1, False), 1),
    ((4, 2, 3, 0, 1, True), 2),
    ((2, 3, 2, 1, 1, False), 1),
    ((2, 3, 2, 1, 1, True), 2),
    ((10, 3, 1, 0, 2, False), 6),  # dilation 2: span 5
    ((112, 3, 2, 1, 1, False), 56),
    ((112, 3, 2, 1, 1, True), 57),
    ((1, 3, 1, 0, 1, False), 0),   # negative, clamped
    ((1, 4, 1, 0, 1, True), 0),
    ((0, 1, 1, 0, 1, False), 0),
]


@pytest.mark.parametrize("args,out", POOL_TABLE)
def test_pool_out(args, out) -> None:
    assert ev("pool.out", *args) == out


def test_pool_out_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    n = 0
    for L in range(0, 12):
        for k in range(1, 5):
            for s in range(1, 4):
                for p in range(0, k // 2 + 1):
                    for d in (1, 2):
                        for c in (False, True):
                            try:
                                x = torch.nn.functional.max_pool1d(torch.zeros(1, 1, L), k, s, p,
                                                                   d, ceil_mode=c)
                            except RuntimeError:
                                continue  # torch rejects the size; our clamp gives 0
                            assert ev("pool.out", L, k, s, p, d, c) == x.shape[-1]
                            n += 1
    assert n > 500


def test_moe_capacity_newer_semantics() -> None:
    assert ev("moe.capacity", MASKED, 1000, 32) == 32 * 128
    assert ev("moe.capacity", TIGHT_PSUM, 1000, 32) == 1000
    assert ev("moe.capacity", TIGHT_ROW, 1000, 32) == 1000
    # aligned: whenever packing == 'aligned', whatever the metadata kind
    assert ev("moe.capacity", ALIGNED_PSUM, 1000, 32) == 1224  # ceil_div(1000 + 224, 8) * 8
    assert ev("moe.capacity", ALIGNED_ROW, 1001, 32) == 1232


@pytest.mark.parametrize("q,n", [(3, 1), (8, 2), (15, 3), (24, 4), (9999, 99)])
def test_mhc_expansion(q, n) -> None:
    assert ev("mhc.expansion", q) == n


@pytest.mark.parametrize("q", [0, 4, -1, -5, 10])
def test_mhc_expansion_error(q) -> None:
    with fails(f"no positive n satisfies n * n + 2 * n == {q}"):
        ev("mhc.expansion", q)


def test_balanced_sizes_and_repeat() -> None:
    assert ev("balanced_sizes", 10, 3) == (4, 3, 3)
    assert ev("balanced_sizes", 2, 4) == (1, 1, 0, 0)
    assert ev("balanced_sizes", 0, 2) == (0, 0)
    assert ev("repeat", 1024, 4) == (1024,) * 4
    assert ev("repeat", 5, 0) == ()
    with pytest.raises(EvaluationError, match="count > 0"):
        ev("balanced_sizes", 10, 0)
    with pytest.raises(EvaluationError, match="total >= 0"):
        ev("balanced_sizes", -1, 2)
    with pytest.raises(EvaluationError, match="count >= 0"):
        ev("repeat", 1, -1)
    with pytest.raises(EvaluationError, match="limit"):
        ev("repeat", 1, MAX_SEQ_LEN + 1)
    with pytest.raises(EvaluationError, match="limit"):
        ev("balanced_sizes", 1, 10 ** 9)


# ----------------------------------------------------------------------------- dtypes


def test_dtype_primitives() -> None:
    for t in ("uint8", "int8", "int16", "int32", "int64"):
        assert ev("promote_int_to_float", t) == "float32"
    for t in ("float16", "bfloat16", "float64", "bool", "complex64"):
        assert ev("promote_int_to_float", t) == t
    assert ev("coalesce_dtype", None, "float16") == "float16"
    assert ev("coalesce_dtype", "float32", "float16") == "float32"
    with pytest.raises(EvaluationError, match="is not a dtype name"):
        ev("promote_int_to_float", "half")


@pytest.mark.parametrize("x,cat", [
    (True, "bool"), (False, "bool"), (0, "int"), (-3, "int"), (1.5, "float"), (math.inf, "float"),
    (1j, "complex"), ("bool", "bool"), ("uint8", "int"), ("int64", "int"),
    ("bfloat16", "float"), ("float8_e4m3fn", "float"), ("complex64", "complex"),
])
def test_category(x, cat) -> None:
    assert ev("category", x) == cat


def test_category_error() -> None:
    with pytest.raises(EvaluationError, match="not a dtype name"):
        ev("category", "half")
    with pytest.raises(EvaluationError, match="neither a number"):
        ev("category", None)


@pytest.mark.parametrize("v,dtype,ok", [
    (10 ** 30, "bool", True), (-1.5, "bool", True), (True, "int8", True),
    (127, "int8", True), (128, "int8", False), (-128, "int8", True), (-129, "int8", False),
    (255, "uint8", True), (256, "uint8", False), (-255, "uint8", True), (-256, "uint8", False),
    (127.5, "int8", False), (-0.5, "uint8", False), (math.inf, "int32", False),
    (math.nan, "int32", False), (2 ** 63 - 1, "int64", True), (2 ** 63, "int64", False),
    (65504, "float16", True), (65505, "float16", False), (65504.5, "float16", False),
    (math.inf, "float16", True), (-math.inf, "bfloat16", True), (math.nan, "float16", True),
    (3.3e38, "bfloat16", True), (3.4e38, "bfloat16", False), (1e39, "float32", False),
    (1e300, "float64", True), (448, "float8_e4m3fn", True), (449, "float8_e4m3fn", False),
    (math.inf, "float8_e4m3fn", False), (57344, "float8_e5m2", True),
    (57345.0, "float8_e5m2", False), (math.inf, "float8_e5m2", True),
    (math.inf, "float8_e5m2fnuz", False), (240.0, "float8_e4m3fnuz", True),
    (1 + 1j, "float32", False), (2 + 0j, "float32", True), (1 + 1j, "complex64", True),
    (complex(1e39, 0), "complex64", False), (1e39, "complex128", True),
    (2 ** 64, "float32", False),
])
def test_representable(v, dtype, ok) -> None:
    assert ev("representable", v, dtype) is ok


def test_representable_matches_torch_alpha_check() -> None:
    """torch checks `alpha` with its scalar conversion rule: the rule representable follows."""
    torch = pytest.importorskip("torch")
    values = [0, 1, -1, 127, 128, -129, 255, 256, -255, -256, 65504, 65505, 2 ** 31, -2 ** 31 - 1,
              2 ** 63 - 1, -2 ** 63, 448, 449.0, 57345.0, 3.4e38, 3.5e38, 1e300, math.inf,
              -math.inf, math.nan, 0.5, 127.5, -0.5, True, 1 + 0j, 1 + 1j, 70000 + 0j]
    checked = 0
    for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                 "float32", "float64", "complex64", "complex128"):
        for v in values:
            t = torch.zeros(1, dtype=getattr(torch, name))
            try:
                torch.add(t, t, alpha=v)
                ok = True
            except RuntimeError as exc:
                if "overflow" not in str(exc) and "converted" not in str(exc):
                    continue  # alpha of the wrong category, not a range question
                ok = False
            assert ev("representable", v, name) is ok, (v, name)
            checked += 1
    assert checked > 200


# ----------------------------------------------------------------------------- result kinds


def kind_of(name: str, *kinds):
    return PRIMITIVES[name].result_kind(list(kinds))


def test_result_kinds() -> None:
    assert kind_of("ceil_div", DIM, DIM) == DIM
    assert kind_of("ceil_div", DIM, INT) == INT
    assert kind_of("broadcast", SHAPE, SHAPE, SHAPE) == SHAPE
    assert kind_of("reduced", SHAPE, INT, BOOL, StrK(frozenset({"full"}))) == SHAPE
    assert kind_of("pool.out", *[INT] * 5, BOOL) == DIM
    assert kind_of("conv.out", *[INT] * 5) == INT
    assert kind_of("len", SEQ_INT) == DIM
    assert kind_of("prod", SHAPE) == DIM and kind_of("prod", SEQ_INT) == INT
    assert kind_of("sum", SHAPE) == DIM and kind_of("sum", SEQ_INT) == INT
    assert kind_of("sum", SeqK(VALUE)) == VALUE
    assert kind_of("max", SHAPE) == DIM and kind_of("max", SHAPE, MaybeK(INT)) == INT
    assert kind_of("min", SEQ_INT) == INT
    assert kind_of("category", VALUE) == StrK(frozenset({"bool", "int", "float", "complex"}))
    assert kind_of("representable", VALUE, DTYPE) == BOOL
    assert kind_of("moe.capacity", ADTK("MGroupedLayout"), INT, INT) == DIM
    assert kind_of("mhc.expansion", INT) == DIM
    assert kind_of("balanced_sizes", INT, INT) == SEQ_INT
    assert kind_of("repeat", DIM, INT) == SHAPE
    assert kind_of("in_range", VALUE, INT, INT) == BOOL
    assert kind_of("present", VALUE) == BOOL


def test_dtype_result_kinds_follow_members() -> None:
    d = lambda *xs: DTypeK(frozenset(xs))  # noqa: E731
    assert kind_of("promote_int_to_float", d("int8", "float16")) == d("float32", "float16")
    assert kind_of("promote_int_to_float", d("bool")) == d("bool")
    assert kind_of("promote_int_to_float", DTYPE) == DTYPE
    assert kind_of("coalesce_dtype", MaybeK(d("float32")), d("float16", "bfloat16")) == \
        d("float32", "float16", "bfloat16")
    assert kind_of("coalesce_dtype", NONE, d("float16")) == d("float16")
    assert kind_of("coalesce_dtype", d("float32"), d("float16")) == d("float32")
    assert kind_of("coalesce_dtype", MaybeK(DTYPE), d("float16")) == DTYPE


def test_real_parameter_types_fit_axis_parameters() -> None:
    dim = PRIMITIVES["reduced"].params[1].kind
    for text in ("int", "int | None", "list[int]", "int | list[int] | tuple[int, ...] | None"):
        assert assignable(parse_type(text), dim), text
    v = PRIMITIVES["per_axis"].params[0].kind
    for text in ("int", "int | tuple[int, int]", "tuple[int | None, int | None]"):
        assert assignable(parse_type(text), v), text


def test_optional_union_parameters_fit_per_axis() -> None:
    v = PRIMITIVES["per_axis"].params[0].kind
    for text in ("int | tuple[int, int] | None",
                 "int | None | tuple[int | None, int | None] | list[int | None]"):
        assert assignable(parse_type(text), v), text


def test_axes_kind_fits_axis_parameters() -> None:
    assert assignable(AXES, PRIMITIVES["reduced"].params[1].kind)


# ----------------------------------------------------------------------------- generators


def rng() -> random.Random:
    return random.Random(WORKLOAD_SEED)


def gen(name: str, *args):
    prim = PRIMITIVES[name]
    out = prim.evaluate(*args, rng=rng()) if prim.random else prim.evaluate(*args)
    assert _shape(out) == prim.shape(*args), name
    return out


def _shape(x) -> tuple[int, ...]:
    if not isinstance(x, list):
        return ()
    if not x:
        return (0,)
    inner = {_shape(v) for v in x}
    assert len(inner) == 1, "ragged"
    return (len(x), *inner.pop())


def holds(name: str, contents, *args) -> bool:
    return PRIMITIVES[name].evaluate(contents, *args)


def test_deterministic_generators() -> None:
    assert gen("as_tensor", (3, 0, 2)) == [3, 0, 2]
    assert gen("prefix_sum", (3, 0, 2)) == [0, 3, 3, 5]
    assert gen("prefix_sum", ()) == [0]
    assert gen("exclusive_prefix_sum", (3, 0, 2)) == [0, 3, 3]
    assert gen("padded_exclusive_prefix_sum", (3, 4, 1), 4) == [0, 4, 12]
    assert gen("chunk_indices", (5, 0, 2), 2) == [[0, 0], [0, 1], [0, 2], [2, 0]]
    assert gen("token_indices", (2, 1)) == [[0, 0], [0, 1], [1, 0]]
    assert gen("packed_positions", (2, 3)) == [0, 1, 0, 1, 2]
    assert gen("chunk_offsets", (5, 0, 2), 2) == [0, 3, 3, 4]
    assert gen("key_windows", (2, 3), 0, 5, "start") == [0, 0, 2, 2, 2]
    assert gen("key_windows", (2, 3), 1, 3, "end") == [2, 3, 4]
    assert gen("full", (2, 3), 7) == [[7, 7, 7], [7, 7, 7]]
    assert gen("full", (), 7) == 7
    assert ev("full", (0, 3), 7) == []  # nested lists cannot show the trailing 3


@pytest.mark.parametrize("name,args,message", [
    ("as_tensor", ((1, -1),), "as_tensor needs non-negative lengths, got (1, -1)"),
    ("exclusive_prefix_sum", ((),), "exclusive_prefix_sum needs a non-empty list"),
    ("padded_exclusive_prefix_sum", ((1,), 0), "padded_exclusive_prefix_sum needs pad > 0, got 0"),
    ("chunk_indices", ((1,), 0), "chunk_indices needs a positive chunk size, got 0"),
    ("chunk_offsets", ((1,), -1), "chunk_offsets needs a positive chunk size, got -1"),
    ("key_windows", ((2,), 1, 2, "start"), "key_windows needs 0 <= first and first + count <= 2, "
                                           "got first=1, count=2"),
    ("key_windows", ((2,), 0, 1, "middle"), "key_windows: side must be 'start' or 'end', got "
                                            "'middle'"),
    ("full", ((2, -1), 0), "full needs non-negative lengths, got (2, -1)"),
    ("moe.layout_metadata", (MASKED, 100, 2), "masked metadata needs R == E * max_m, got R=100, "
                                              "E=2, max_m=128"),
    ("moe.layout_metadata", (ALIGNED_PSUM, 100, 2), "contiguous metadata needs R % alignment == "
                                                    "0, got R=100, alignment=8"),
    ("moe.layout_metadata", (TIGHT_PSUM, 100, 0), "moe.layout_metadata needs E > 0 and R >= 0, "
                                                  "got R=100, E=0"),
])
def test_generator_domain_errors(name, args, message) -> None:
    with fails(message):
        PRIMITIVES[name].evaluate(*args)


@pytest.mark.parametrize("name,args,message", [
    ("paged_block_table", (2, 0, 4), "paged_block_table needs batch >= 0 and 0 < W <= NP, got "
                                     "B=2, W=0, NP=4"),
    ("paged_block_table", (2, 5, 4), "paged_block_table needs batch >= 0 and 0 < W <= NP, got "
                                     "B=2, W=5, NP=4"),
    ("topk_ids", (3, 5, 4), "topk_ids needs rows >= 0 and 0 < K <= E, got rows=3, K=5, E=4"),
    ("sample_indices", (5, 4), "sample_indices needs 0 <= n <= hi, got n=5, hi=4"),
    ("nsa_block_counts", (3, 2, 0), "nsa_block_counts needs tokens >= 0, heads >= 0 and "
                                    "selected > 0, got 3, 2, 0"),
])
def test_random_generator_domain_errors(name, args, message) -> None:
    with fails(message):
        PRIMITIVES[name].evaluate(*args, rng=rng())


def test_generators_refuse_hostile_sizes() -> None:
    with pytest.raises(EvaluationError, match="exceed the limit"):
        PRIMITIVES["full"].evaluate((10 ** 5, 10 ** 5), 0)
    with pytest.raises(EvaluationError, match="exceed the limit"):
        PRIMITIVES["topk_ids"].evaluate(10 ** 9, 4, 8, rng=rng())
    with pytest.raises(EvaluationError, match="exceed the limit"):
        PRIMITIVES["causal_topk_indices"].evaluate(10 ** 4, 10 ** 4, 1, 8, 8, 0, 1, rng=rng())
    with pytest.raises(EvaluationError, match="exceed the limit"):
        PRIMITIVES["token_indices"].evaluate((MAX_GENERATED,))


RANDOM_CASES = [
    ("paged_block_table", (3, 4, 12)),     # pool holds every page: disjoint
    ("paged_block_table", (5, 4, 6)),      # too small a pool: distinct per row
    ("nsa_block_indices", ((3, 5), 2, 3, 2)),
    ("nsa_block_counts", (4, 2, 3)),
    ("topk_ids", (6, 2, 8)),
    ("sample_indices", (5, 9)),
    ("causal_topk_indices", (2, 5, 2, 3, 6, 2, 1)),
    ("causal_topk_indices", (1, 4, 1, 2, 8, 4, 2)),
]


@pytest.mark.parametrize("name,args", RANDOM_CASES,
                         ids=lambda x: x if isinstance(x, str) else "")
def test_random_generators_are_deterministic_per_seed(name, args) -> None:
    prim = PRIMITIVES[name]
    a = prim.evaluate(*args, rng=random.Random(7))
    b = prim.evaluate(*args, rng=random.Random(7))
    assert a == b
    assert _shape(a) == prim.shape(*args)
    with pytest.raises(TypeError):
        prim.evaluate(*args)  # the rng is required


def test_paged_block_table_pages() -> None:
    table = gen("paged_block_table", 3, 4, 12)
    flat = [p for row in table for p in row]
    assert sorted(flat) == list(range(12))  # disjoint across the table
    table = gen("paged_block_table", 5, 4, 6)
    assert all(len(set(row)) == 4 and all(0 <= p < 6 for p in row) for row in table)
    assert holds("in_range", table, 0, 6)


def test_topk_and_sample_indices() -> None:
    ids = gen("topk_ids", 6, 2, 8)
    assert all(len(set(r)) == 2 for r in ids) and holds("in_range", ids, 0, 8)
    s = gen("sample_indices", 5, 9)
    assert len(set(s)) == 5 and holds("in_range", s, 0, 9)
    counts = gen("nsa_block_counts", 4, 2, 3)
    assert holds("in_range", counts, 1, 4)


def test_nsa_block_indices() -> None:
    lengths, block, sel, heads = (3, 5), 2, 3, 2
    out = gen("nsa_block_indices", lengths, block, sel, heads)
    total = sum(lengths)
    assert holds("in_range", out, 0, total + 1)
    positions = gen("packed_positions", lengths)
    for j, row in zip(positions, out):
        for picks in row:
            real = [b for b in picks if b != total]
            assert real == sorted(set(real)) and all(b <= j // block for b in real)
            assert len(real) == min(sel, j // block + 1)


def test_causal_topk_indices() -> None:
    B, S, H, K, S_kv, start, stride = 2, 5, 2, 3, 6, 2, 1
    out = gen("causal_topk_indices", B, S, H, K, S_kv, start, stride)
    assert holds("in_range", out, 0, S_kv + 1)
    for per_query in out:
        for s, heads in enumerate(per_query):
            visible = min(S_kv, max(1, (start + s + 1) // stride))
            for row in heads:
                real = [k for k in row if k != S_kv]
                assert len(set(real)) == len(real) == min(K, visible)
                assert all(k < visible for k in real)
                assert row[len(real):] == [S_kv] * (K - len(real))


@pytest.mark.parametrize("lay,rows,experts", [
    (MASKED, 128 * 4, 4), (layout("masked", max_m=1), 3, 3), (layout("masked", max_m=0), 0, 2),
    (TIGHT_PSUM, 10, 3), (TIGHT_PSUM, 0, 2), (TIGHT_ROW, 10, 3), (TIGHT_ROW, 2, 4),
    (ALIGNED_PSUM, 64, 3), (ALIGNED_PSUM, 8, 4), (ALIGNED_ROW, 64, 3), (ALIGNED_ROW, 0, 2),
])
def test_layout_metadata_is_valid(lay, rows, experts) -> None:
    meta = gen("moe.layout_metadata", lay, rows, experts)
    assert holds("moe.layout_valid", meta, lay, rows, experts)


def test_layout_metadata_values() -> None:
    assert gen("moe.layout_metadata", TIGHT_PSUM, 10, 3) == [4, 7, 10]
    assert gen("moe.layout_metadata", TIGHT_ROW, 5, 2) == [0, 0, 0, 1, 1]
    # 8 tiles of 8 rows over 3 experts: 3, 3, 2 tiles, each 7 rows short of full in its last
    assert gen("moe.layout_metadata", ALIGNED_PSUM, 64, 3) == [17, 41, 57]
    assert gen("moe.layout_metadata", ALIGNED_ROW, 16, 2) == [0] * 8 + [1] * 8
    assert gen("moe.layout_metadata", MASKED, 512, 4) == [64, 64, 64, 64]


@pytest.mark.parametrize("meta,lay,rows,experts", [
    ([129, 0], MASKED, 256, 2),              # more than max_m
    ([1, 2, 3], MASKED, 256, 2),             # one count per expert
    ([4, 3, 10], TIGHT_PSUM, 10, 3),         # decreasing
    ([4, 7, 9], TIGHT_PSUM, 10, 3),          # does not end at R
    ([0, 1, 0], TIGHT_ROW, 3, 2),            # ids decrease
    ([0, 2, 2], TIGHT_ROW, 3, 2),            # id out of range
    ([0, 0], TIGHT_ROW, 3, 2),               # one id per row
    ([0] * 4 + [1] * 12, ALIGNED_ROW, 16, 2),  # expert change inside a tile
    ([17, 20, 57], ALIGNED_PSUM, 64, 3),     # expert 1 starts inside expert 0's last tile
    ([17, 41, 65], ALIGNED_PSUM, 64, 3),     # past R
])
def test_layout_valid_rejects(meta, lay, rows, experts) -> None:
    assert not holds("moe.layout_valid", meta, lay, rows, experts)


# ----------------------------------------------------------------------------- requires


@pytest.mark.parametrize("name,contents,args,ok", [
    ("prefix_offsets", [0, 3, 3, 5], (5,), True),
    ("prefix_offsets", [0, 3, 2, 5], (5,), False),
    ("prefix_offsets", [1, 3, 5], (5,), False),
    ("prefix_offsets", [0, 3, 4], (5,), False),
    ("prefix_offsets", [], (0,), False),
    ("max_segment", [0, 3, 3, 5], (3,), True),
    ("max_segment", [0, 4, 5], (3,), False),
    ("in_range", [[0, 5], [2, 4]], (0, 6), True),
    ("in_range", [[0, 6]], (0, 6), False),
    ("in_range", [-1], (0, 6), False),
    ("in_range", 3, (0, 6), True),
    ("sums_to", [4, 3, 3], (10,), True),
    ("sums_to", [4, 3], (10,), False),
    ("exclusive_prefix_of", [0, 4, 7], ([4, 3, 3],), True),
    ("exclusive_prefix_of", [0, 4, 8], ([4, 3, 3],), False),
    ("exclusive_prefix_of", [0, 4], ([4, 3, 3],), False),
    ("indices_within", [[0, 0], [0, 1], [1, 0]], ([0, 2, 3],), True),
    ("indices_within", [[0, 2]], ([0, 2, 3],), False),
    ("indices_within", [[2, 0]], ([0, 2, 3],), False),
    ("indices_within", [[0, 0, 0]], ([0, 2, 3],), False),
    ("attn.paged_fits", [10, 20], ([0, 5, 9], 24), True),
    ("attn.paged_fits", [10, 21], ([0, 5, 9], 24), False),
    ("attn.paged_fits", [10], ([0, 5, 9], 24), False),
    ("chunk_offsets_of", [0, 3, 3, 4], ([0, 5, 5, 7], 2), True),
    ("chunk_offsets_of", [0, 3, 4, 4], ([0, 5, 5, 7], 2), False),
    ("chunk_offsets_of", [0, 3, 3, 4], ([0, 5, 5, 7], 0), False),
    ("chunk_offsets_of", [0, 0], ([3, 0], 2), False),
])
def test_requires_predicates(name, contents, args, ok) -> None:
    assert holds(name, contents, *args) is ok


def test_generated_values_satisfy_their_requires() -> None:
    lens = (5, 0, 7, 3)
    offsets = gen("prefix_sum", lens)
    assert holds("prefix_offsets", offsets, sum(lens))
    assert holds("max_segment", offsets, max(lens))
    assert holds("indices_within", gen("token_indices", lens), offsets)
    chunks = gen("chunk_offsets", lens, 4)
    assert holds("chunk_offsets_of", chunks, offsets, 4)
    assert holds("prefix_offsets", chunks, sum(-(-n // 4) for n in lens))
    sizes = ev("balanced_sizes", 10, 4)
    assert holds("sums_to", gen("as_tensor", sizes), 10)
    assert holds("exclusive_prefix_of", gen("exclusive_prefix_sum", sizes), list(sizes))
    assert holds("in_range", gen("packed_positions", lens), 0, max(lens))


# ----------------------------------------------------------------------------- SymInt safety


class SymBool:
    """Stands in for torch's SymBool: asking for its truth value is a data-dependent guard."""

    def __init__(self, v: bool):
        self.v = v

    def __bool__(self):
        raise RuntimeError("data-dependent bool")


class Sym:
    """Stands in for torch's SymInt: arithmetic stays symbolic, comparisons give SymBools,
    and it is neither hashable nor convertible to a Python int."""

    def __init__(self, v: int):
        self.v = v

    @staticmethod
    def _v(o):
        return o.v if isinstance(o, Sym) else o

    def _op(fn):  # noqa: N805
        return lambda self, o: Sym(fn(self.v, Sym._v(o)))

    def _rop(fn):  # noqa: N805
        return lambda self, o: Sym(fn(Sym._v(o), self.v))

    def _cmp(fn):  # noqa: N805
        return lambda self, o: SymBool(fn(self.v, Sym._v(o)))

    _o = operator
    __add__, __radd__ = _op(_o.add), _rop(_o.add)
    __sub__, __rsub__ = _op(_o.sub), _rop(_o.sub)
    __mul__, __rmul__ = _op(_o.mul), _rop(_o.mul)
    __floordiv__, __rfloordiv__ = _op(_o.floordiv), _rop(_o.floordiv)
    __mod__, __rmod__ = _op(_o.mod), _rop(_o.mod)
    __eq__, __ne__, __lt__ = _cmp(_o.eq), _cmp(_o.ne), _cmp(_o.lt)
    __le__, __gt__, __ge__ = _cmp(_o.le), _cmp(_o.gt), _cmp(_o.ge)
    __hash__ = None

    def __neg__(self):
        return Sym(-self.v)

    def __index__(self):
        raise RuntimeError("specialization")


def _unsym(x):
    if isinstance(x, Sym):
        return x.v
    if isinstance(x, tuple):
        return tuple(_unsym(v) for v in x)
    return x


SAFE_CALLS = [
    ("reduced", ((Sym(2), Sym(3), Sym(4)), (0, -1), True, "full")),
    ("reduced", ((Sym(2), Sym(3)), None, False, "full")),
    ("per_axis", ((Sym(3), Sym(5)), 1, 2)),
    ("per_axis", (None, 0, 2, Sym(4))),
    ("ceil_div", (Sym(1000), 128)),
    ("ceil_div", (Sym(1000), Sym(7))),
    ("len", ((Sym(2), Sym(3)),)),
    ("prod", ((Sym(2), Sym(3), 4),)),
    ("sum", ((Sym(2), Sym(3)),)),
    ("conv.out", (Sym(32), 3, 2, 1, 1)),
    ("moe.capacity", (MASKED, Sym(100), Sym(4))),
    ("moe.capacity", (ALIGNED_PSUM, Sym(1000), Sym(32))),
    ("moe.capacity", (TIGHT_ROW, Sym(1000), Sym(32))),
    ("valid_axes", ((0, -1), 2)),
    ("unique_axes", ((0, -1), 2)),
    ("coalesce_dtype", (None, "float16")),
    ("promote_int_to_float", ("int8",)),
    ("category", (1.5,)),
    ("representable", (2.0, "float16")),
]
UNSAFE_CALLS = [
    ("broadcast", ((Sym(2), Sym(3)), (Sym(3),))),
    ("pool.out", (Sym(8), 3, 2, 0, 1, True)),
    ("max", ((Sym(2), Sym(3)),)),
    ("min", ((Sym(2), Sym(3)),)),
    ("all", ((SymBool(True),),)),
    ("mhc.expansion", (Sym(8),)),
    ("balanced_sizes", (Sym(10), 3)),
    ("repeat", (1, Sym(3))),
]


@pytest.mark.parametrize("name,args", SAFE_CALLS, ids=lambda x: x if isinstance(x, str) else "")
def test_symint_safe_primitives_compute_on_symbolic_sizes(name, args) -> None:
    prim = PRIMITIVES[name]
    assert prim.symint_safe
    concrete = prim.evaluate(*[_unsym(a) for a in args])
    assert _unsym(prim.evaluate(*args)) == concrete


@pytest.mark.parametrize("name,args", UNSAFE_CALLS, ids=lambda x: x if isinstance(x, str) else "")
def test_symint_unsafe_primitives_need_a_concrete_bool(name, args) -> None:
    prim = PRIMITIVES[name]
    assert not prim.symint_safe
    with pytest.raises(Exception):
        prim.evaluate(*args)


def test_generators_and_predicates_are_not_symint_safe() -> None:
    for prim in PRIMITIVES.values():
        if prim.role in ("generator", "requires"):
            assert not prim.symint_safe, prim.name
