"""Generated specs for fuzzing: valid specs drawn from the language, and mutations of them.

`gen_case(src)` builds one spec (and sometimes a `types.yaml` with an ADT) as YAML text from
a *source* of choices, and `mutate(src, case)` breaks it in one to three ways. A source is
either a Hypothesis `draw` (`HypothesisSource`, so that tests shrink) or a `random.Random`
(`RandomSource`, for `benchmarks/fuzz.py`, where Hypothesis's overhead would dominate): the
same generator serves both.

What a valid spec holds (each part drawn or not):

- `forall`: 1-4 `Dim` indices, maybe a `Shape` index `S`, a DType index `T` and maybe `U`;
- `params`: Bool flags (with or without a default), an enum, an `int`, an `int | None`
  (read through `present`/`.value`), a dtype `Maybe`, a `float`, an ADT from `types.yaml`;
- a type family over a Bool flag (the transposable operand), over the enum (one layout per
  literal) or over the ADT (per-constructor scale shapes);
- inputs whose shapes hold every Dim index as a bare axis or an affine axis `c * N + d`,
  a splat `*S`, a family application, an optional input (`optional: true` or a flag),
  `mutated` inputs; outputs over indices, lets, `ceil_div`, splats, with `alias`, `buffer:
  out`, `nullable`;
- lets, refinements that hold on every workload row, `dtype_combos`;
- workload rows consistent with the signature (every index, required parameter, `some`,
  `dtype_cases` within the combos), and an inline roofline.

`run_case(case, folder)` is the property's pipeline: write the files, load strictly,
elaborate and prove (`prove_manifest`, as `opspec prove` does), render every diagnostic. It
raises when anything crashes (a crash that `prove_manifest` caught and filed as a
diagnostic counts too).
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from hypothesis import strategies as st

OP = "FuzzFwdOp"
FAMILY = "fuzz"

# --------------------------------------------------------------------------------- sources


class RandomSource:
    """Choices from a `random.Random` (fast; reproducible from its seed)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, items: Sequence[Any]) -> Any:
        return items[self.rng.randrange(len(items))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class HypothesisSource:
    """Choices from a Hypothesis `draw` (shrinkable)."""

    def __init__(self, draw: Callable[[Any], Any]):
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, items: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(items)))

    def chance(self, p: float) -> bool:
        # Shrinks towards False (the smaller spec).
        return self.draw(st.integers(0, 99)) >= 100 - round(p * 100)


def sample(src, items: Sequence[Any], k: int) -> list[Any]:
    pool = list(items)
    out = []
    for _ in range(min(k, len(pool))):
        out.append(pool.pop(src.integer(0, len(pool) - 1)))
    return out


# ---------------------------------------------------------------------------------- a case


@dataclass
class Case:
    """One generated manifest: the spec as data (before it becomes text), the text of each
    file, and what was applied to it."""

    spec: dict[str, Any]
    types: dict[str, Any] | None = None
    mutations: list[str] = field(default_factory=list)
    #: text overrides (a text-level mutation); else the text is emitted from the data
    texts: dict[str, str] = field(default_factory=dict)

    def files(self) -> dict[str, str]:
        out = {f"{FAMILY}.yaml": self.texts.get(f"{FAMILY}.yaml", to_yaml(self.spec))}
        if self.types is not None or "types.yaml" in self.texts:
            out["types.yaml"] = self.texts.get("types.yaml", to_yaml(self.types))
        return out


# ------------------------------------------------------------------------------- YAML text

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "inf", "nan"}


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v) if v == v and v not in (float("inf"), float("-inf")) else \
            (".nan" if v != v else (".inf" if v > 0 else "-.inf"))
    s = str(v)
    if _PLAIN.match(s) and s.lower() not in _RESERVED:
        return s
    return json.dumps(s)  # a JSON string is a YAML double-quoted scalar


def _flow(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return _scalar(v)


def to_yaml(data: Any, indent: int = 0) -> str:
    """Block YAML, with flow style for any value short enough (as specs are written)."""
    pad = " " * indent
    if isinstance(data, dict):
        if not data:
            return pad + "{}\n"
        out = []
        for k, v in data.items():
            key = _scalar(k)
            if isinstance(v, (dict, list)) and v and len(_flow(v)) > 100:
                out.append(f"{pad}{key}:\n{to_yaml(v, indent + 2)}")
            else:
                out.append(f"{pad}{key}: {_flow(v)}\n")
        return "".join(out)
    if isinstance(data, list):
        if not data:
            return pad + "[]\n"
        out = []
        for v in data:
            if isinstance(v, dict) and v and len(_flow(v)) > 100:
                body = to_yaml(v, indent + 2)
                out.append(f"{pad}- {body[indent + 2:]}")
            else:
                out.append(f"{pad}- {_flow(v)}\n")
        return "".join(out)
    return pad + _scalar(data) + "\n"


# --------------------------------------------------------------------------- valid specs

_DIMS = ["M", "N", "K", "B", "H", "D", "L", "C"]
_DTYPES = ["float16", "bfloat16", "float32"]
_ENUM = ["sum", "mean", "max", "none"]
_LAYOUTS = ["[R, C]", "[C, R]", "[R, C, 1]", "[1, R, C]", "[R, 1, C]"]

TYPES_ADT = {
    "adts": {
        "Quant": {"sum": {
            "per_tensor": {"python": "opspec.fuzz.PerTensor"},
            "per_group": {"python": "opspec.fuzz.PerGroup",
                          "fields": {"group": "Dim",
                                     "rounding": {"type": "'nearest' | 'floor'"}},
                          "invariant": "group >= 1"},
        }},
    },
    "python_prefixes": ["opspec."],
}


def gen_case(src) -> Case:
    """A spec that loads, elaborates and proves without errors (warnings may remain)."""
    g = _Gen(src)
    return g.build()


class _Gen:
    def __init__(self, src):
        self.src = src

    # Each dim gets a value in every row; rules are then drawn so that they hold on them.
    def build(self) -> Case:
        src = self.src
        dims = sample(src, _DIMS, src.integer(1, 4))
        shape_idx = src.chance(0.3)
        forall: dict[str, str] = {d: "Dim" for d in dims}
        if shape_idx:
            forall["S"] = "Shape"
        t_members = sample(src, _DTYPES, src.integer(1, 3))
        forall["T"] = "DType[" + " | ".join(t_members) + "]"
        u_members = None
        if src.chance(0.2):
            u_members = sample(src, ["float32", "int32", "bfloat16"], src.integer(1, 2))
            forall["U"] = "DType[" + " | ".join(u_members) + "]"

        params: dict[str, Any] = {}
        flags = [f"flag{i}" for i in range(src.integer(0, 2))]
        for f in flags:
            params[f] = {"type": "bool"} if src.chance(0.2) else \
                {"type": "bool", "default": src.chance(0.5)}
        enum = sample(src, _ENUM, src.integer(2, 3)) if src.chance(0.35) else None
        if enum:
            params["mode"] = {"type": " | ".join(f"'{x}'" for x in enum)}
            if src.chance(0.7):
                params["mode"]["default"] = src.choice(enum)
        groups = src.chance(0.25)
        if groups:
            params["groups"] = {"type": "int", "default": src.integer(1, 4)}
        limit = src.chance(0.25)
        if limit:
            params["limit"] = {"type": "int | None", "default": None}
        out_dtype = src.chance(0.15)
        if out_dtype:
            params["out_dtype"] = {"type": "float16 | float32 | None", "default": None}
        if src.chance(0.2):
            params["scale"] = {"type": "float", "default": 1.0}
        adt = src.chance(0.12) and len(dims) >= 2
        if adt:
            params["quant"] = {"type": "Quant"}

        # -- rows: values first, so that rules can be drawn true on them
        n_rows = src.integer(1, 3)
        mods = {d: src.choice([1, 1, 2, 4, 8]) for d in dims}
        rows: list[dict[str, Any]] = []
        for r in range(n_rows):
            row: dict[str, Any] = {}
            for d in dims:
                row[d] = mods[d] * src.integer(1, 16)
            if shape_idx:
                row["S"] = [src.integer(1, 6) for _ in range(src.integer(0, 3))]
            rows.append(row)

        types: dict[str, Any] = {}
        inputs: dict[str, Any] = {}
        placed: set[str] = set()
        if flags and len(dims) >= 2 and src.chance(0.35):
            fam_flag = src.choice(flags)
            types["Mat"] = {"params": {"t": "Bool", "R": "Dim", "C": "Dim"}, "match": "t",
                            "cases": [{"when": False, "is": "[R, C]"},
                                      {"when": True, "is": "[C, R]"}]}
            r, c = sample(src, dims, 2)
            inputs["a"] = {"dtype": "T", "shape": f"Mat[{fam_flag}, {r}, {c}]"}
            placed |= {r, c}
        elif enum and len(dims) >= 2 and src.chance(0.4):
            types["Lay"] = {"params": {"m": params["mode"]["type"], "R": "Dim", "C": "Dim"},
                            "match": "m",
                            "cases": [{"when": lit, "is": src.choice(_LAYOUTS)} for lit in enum]}
            r, c = sample(src, dims, 2)
            inputs["a"] = {"dtype": "T", "shape": f"Lay[mode, {r}, {c}]"}
            placed |= {r, c}

        # Every other dim goes into a required input, bare or affine.
        n_plain = 2 if u_members else src.integer(1, 2)  # T and U each need an input
        plain = [f"x{i}" for i in range(n_plain)]
        axes: dict[str, list[str]] = {n: [] for n in plain}
        for d in dims:
            if d in placed and src.chance(0.6):
                continue
            form = src.integer(0, 9)
            if form < 7 or d in placed:
                ax = d
            else:
                c, e = src.integer(2, 4), src.integer(0, 3)
                ax = f"{c} * {d}" + (f" + {e}" if e else "")
            axes[src.choice(plain)].append(ax)
            placed.add(d)
        if shape_idx:
            name = src.choice(plain)
            axes[name].insert(src.integer(0, len(axes[name])), "*S")
        for n in plain:
            dt = "T"
            if u_members and n == plain[-1]:
                dt = "U"
            inputs[n] = {"dtype": dt, "shape": "[" + ", ".join(axes[n]) + "]"}
            if src.chance(0.1):
                inputs[n]["contiguous"] = True
        if u_members and not any(i.get("dtype") == "U" for i in inputs.values()):
            inputs[plain[0]]["dtype"] = "U"
        if adt:
            r, c = sample(src, dims, 2)
            types["Scales"] = {"params": {"q": "Quant", "R": "Dim", "C": "Dim"}, "match": "q",
                               "cases": [{"when": {"per_tensor": "_"}, "is": "[1]"},
                                         {"when": {"per_group": "_"},
                                          "is": "[R, ceil_div(C, q.group)]"}]}
            inputs["qs"] = {"dtype": "float32", "shape": f"Scales[quant, {r}, {c}]"}
        mutated = None
        if src.chance(0.15):
            mutated = src.choice(plain)
            inputs[mutated]["mutated"] = src.choice([True] + flags) if flags else True
        optional = []
        if src.chance(0.3):
            how = src.choice([True] + flags) if flags else True
            inputs["bias"] = {"dtype": inputs[plain[0]]["dtype"],
                              "shape": "[" + src.choice(dims) + "]", "optional": how}
            if how is True:
                optional.append("bias")

        # -- lets
        let: dict[str, str] = {}
        if src.chance(0.5):
            a, b = src.choice(dims), src.choice(dims)
            let["P"] = src.choice([f"{a} * {b}", f"{a} + {b}", f"ceil_div({a}, 4)",
                                   f"{a} // 2", f"{a} % 3 + {b}"])
            if src.chance(0.4):
                let["Q"] = src.choice(["P + 1", f"P * {a}", "2 * P"])
        if limit:
            let["lim"] = f"limit.value if present(limit) else {src.choice(dims)}"

        # -- outputs
        outputs: dict[str, Any] = {}
        for i in range(src.integer(0 if mutated else 1, 2)):
            choices = [f"[{src.choice(dims)}]", "[" + ", ".join(sample(src, dims, 2)) + "]",
                       f"[{src.choice(dims)} + 1]", f"[ceil_div({src.choice(dims)}, 2)]"]
            choices += [f"[{n}]" for n in let]
            if shape_idx:
                choices.append(f"[*S, {src.choice(dims)}]")
            if groups:
                choices.append(f"[{src.choice(dims)} * groups]")
            dtype = "T"
            if out_dtype and src.chance(0.5):
                dtype = "coalesce_dtype(out_dtype, float32)"
            elif src.chance(0.1):
                dtype = "float32"
            outputs[f"y{i}"] = {"dtype": dtype, "shape": src.choice(choices)}
            if flags and src.chance(0.1):
                outputs[f"y{i}"]["nullable"] = src.choice(flags)
        if mutated is not None and src.chance(0.5):
            outputs["y_alias"] = {"dtype": inputs[mutated]["dtype"],
                                  "shape": inputs[mutated]["shape"], "alias": mutated}
        elif outputs and src.chance(0.1):
            first = next(iter(outputs))
            if "nullable" not in outputs[first]:
                outputs[first]["buffer"] = "out"

        # -- refinements, true on every row
        rules: list[str] = []
        for d in dims:
            if mods[d] > 1 and src.chance(0.5):
                rules.append(f"{d} % {mods[d]} == 0")
            elif src.chance(0.2):
                rules.append(f"{d} >= 1")
        if flags and src.chance(0.3):
            rules.append(f"not {src.choice(flags)} or {src.choice(dims)} >= 1")
        if groups and src.chance(0.5):
            rules.append("groups >= 1")
        if limit and src.chance(0.5):
            rules.append("not present(limit) or limit.value >= 1")
        if shape_idx and src.chance(0.3):
            rules.append("len(S) <= 3")
        if len(dims) >= 2 and src.chance(0.2):
            a, b = sample(src, dims, 2)
            bound = max(r[a] for r in rows) + max(r[b] for r in rows)
            rules.append(f"{a} + {b} <= {bound}")

        # -- dtypes of the rows
        combos = None
        if u_members and src.chance(0.4):
            allc = [{"T": t, "U": u} for t in t_members for u in u_members]
            combos = sample(src, allc, src.integer(1, len(allc)))

        def dtype_cases() -> list[dict[str, str]]:
            if combos is not None:
                return sample(src, combos, src.integer(1, len(combos)))
            cases = []
            for t in sample(src, t_members, src.integer(1, len(t_members))):
                c = {"T": t}
                if u_members:
                    c["U"] = src.choice(u_members)
                cases.append(c)
            # distinct cases only (a repeated one repeats a case id)
            seen, out = set(), []
            for c in cases:
                k = tuple(sorted(c.items()))
                if k not in seen:
                    seen.add(k)
                    out.append(c)
            return out

        workloads = []
        for r, values in enumerate(rows):
            row: dict[str, Any] = dict(values)
            for f in flags:
                if "default" not in params[f] or src.chance(0.5):
                    row[f] = src.chance(0.5)
            if enum and ("default" not in params["mode"] or src.chance(0.5)):
                row["mode"] = src.choice(enum)
            if groups and src.chance(0.4):
                row["groups"] = src.integer(1, 4)
            if limit and src.chance(0.5):
                row["limit"] = src.integer(1, 9)
            if out_dtype and src.chance(0.4):
                row["out_dtype"] = src.choice(["float16", "float32"])
            if adt:
                if src.chance(0.5):
                    row["quant"] = {"per_tensor": {}}
                else:
                    row["quant"] = {"per_group": {"group": src.choice([1, 2, 4]),
                                                  "rounding": src.choice(["nearest", "floor"])}}
            some = [o for o in optional if src.chance(0.5)]
            if some:
                row["some"] = some
            row["dtype_cases"] = dtype_cases()
            row["label"] = f"r{r}"
            workloads.append(row)

        # -- roofline
        flops = src.choice([" * ".join(dims), "2 * " + " * ".join(dims), dims[0], "0"])
        if shape_idx and src.chance(0.3):
            flops = f"prod(S) * {flops}"
        if flags and src.chance(0.2):
            flops = f"({flops}) * (2 if {src.choice(flags)} else 1)"
        roofline: dict[str, Any] = {"flops": flops}
        if src.chance(0.2):
            roofline["bytes"] = f"bytes({plain[0]})"

        signature: dict[str, Any] = {}
        if types:
            signature["types"] = types
        signature["forall"] = forall
        if params:
            signature["params"] = params
        # Required inputs first, as the language demands.
        signature["inputs"] = {k: v for k, v in inputs.items() if not v.get("optional")}
        signature["inputs"].update({k: v for k, v in inputs.items() if v.get("optional")})
        signature["outputs"] = outputs
        if let:
            signature["let"] = let
        if rules:
            signature["shape_rules"] = rules
        if combos is not None:
            signature["dtype_combos"] = combos
        spec = {OP: {"family": FAMILY, "status": "spec-only", "signature": signature,
                     "workloads": workloads, "roofline": roofline}}
        return Case(spec, json.loads(json.dumps(TYPES_ADT)) if adt else None)


# ------------------------------------------------------------------------------ mutations

_FIELDS = ["family", "status", "signature", "workloads", "roofline", "types", "forall", "params",
           "inputs", "outputs", "let", "shape_rules", "dtype_combos", "dtype", "shape",
           "optional", "nullable", "mutated", "write_only", "buffer", "alias", "contiguous",
           "device", "values", "requires", "label", "some", "dtype_cases", "flops", "bytes",
           "func", "match", "cases", "when", "is", "type", "default", "kw_only", "adts", "sum",
           "fields", "invariant", "python", "python_prefixes", "composition", "stages"]
_NAMES = ["M", "N", "K", "S", "T", "U", "x0", "x1", "a", "y0", "bias", "flag0", "mode", "P",
          "groups", "limit", "out", "quant", "Mat", "inf", "float32", "present", "__class__",
          "value", "kind", "_", "len"]
_KINDS = ["Dim", "Int", "Bool", "Shape", "Str", "DType", "None", "Value", "Seq", "Seq[Int]",
          "Seq[Dim; 2]", "Maybe[Dim]", "DType[float16]", "DType[float16 | nope]", "'a' | 'b'",
          "Quant", "Axes", "int", "bool", "float", "list[int]", "tuple[int, int]", "int | None",
          "Optional[int]", "torch.dtype", "Dim | Bool", "Seq[Seq[Int]]", "", "Dim[", "Tensor"]
_TOKENS = ["M", "N", "S", "T", "flag0", "mode", "P", "x0", "1", "0", "-1", "2", "9" * 19,
           "9" * 40, "'sum'", "'x'", "None", "True", "inf", "+", "-", "*", "//", "%", "/", "**",
           "==", "<", ">=", " and ", " or ", "not ", " if ", " else ", " for ", " in ", "(",
           ")", "[", "]", ",", ":", ".", "*", ".value", ".kind", ".group", "present(",
           "ceil_div(", "len(", "prod(", "max(", "all(", "broadcast(", "bytes(", "__import__(",
           "lambda: ", "x0.shape", "__class__", "q.", " ", "\\", "'", '"', "{", "}", "#", "é"]
_VALUES: list[Any] = [None, True, False, 0, -1, 1, 2 ** 63, 2 ** 100, -(2 ** 70), 1.5,
                      float("nan"), float("inf"), "", "x", "M", "[M]", "[*S]", [], {}, [1, 2],
                      {"a": 1}, [[[]]], "T", "float16", "implemented", "Dim"]


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside `data` (dict keys and list indices)."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append(prefix + (i,))
            out.extend(_paths(v, prefix + (i,)))
    return out


def _get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


def _tokens(src, n: int) -> str:
    return "".join(src.choice(_TOKENS) for _ in range(n))


def _random_value(src) -> Any:
    roll = src.integer(0, 3)
    if roll == 0:
        return src.choice(_VALUES)
    if roll == 1:
        return _tokens(src, src.integer(1, 8))
    if roll == 2:
        return src.choice(_KINDS)
    return src.choice(_NAMES)


def _swap_names(text: str, a: str, b: str) -> str:
    pat = re.compile(rf"\b({re.escape(a)}|{re.escape(b)})\b")
    return pat.sub(lambda m: b if m.group(1) == a else a, text)


def _map_strings(data: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(data, dict):
        return {(fn(k) if isinstance(k, str) else k): _map_strings(v, fn) for k, v in data.items()}
    if isinstance(data, list):
        return [_map_strings(v, fn) for v in data]
    return fn(data) if isinstance(data, str) else data


_PRIMS = ["ceil_div", "prod", "len", "max", "min", "sum", "all", "broadcast", "reduced",
          "per_axis", "category", "present", "promote_int_to_float", "coalesce_dtype",
          "representable", "conv.out", "pool.out", "bytes", "full", "prefix_sum", "unique_axes",
          "balanced_sizes", "repeat", "moe.capacity", "nothing"]


def _names_of(spec: Any) -> list[str]:
    """The names a spec declares (indices, parameters, tensors, lets, families)."""
    out: list[str] = []
    for entry in (spec.values() if isinstance(spec, dict) else ()):
        sig = entry.get("signature") if isinstance(entry, dict) else None
        if isinstance(sig, dict):
            for f in ("forall", "params", "inputs", "outputs", "let", "types"):
                if isinstance(sig.get(f), dict):
                    out.extend(k for k in sig[f] if isinstance(k, str))
    return out or ["M"]


def random_expr(src, names: Sequence[str], depth: int = 0) -> str:
    """A parseable expression over `names`: well formed, but of any kind and arity, so that
    it gets past the parser into the kind checker, the folder and the encoder."""
    if depth >= 3 or src.chance(0.25):
        return src.choice([src.choice(names), src.choice(names), str(src.integer(0, 9)),
                           str(src.choice([2 ** 62, 2 ** 31, -1])), "'sum'", "'float16'",
                           "True", "None", "inf", "0.5"])
    sub = lambda: random_expr(src, names, depth + 1)  # noqa: E731
    form = src.integer(0, 11)
    if form == 0:
        return f"({sub()} {src.choice(['+', '-', '*', '//', '%'])} {sub()})"
    if form == 1:
        return f"({sub()} {src.choice(['==', '!=', '<', '<=', '>', '>=', 'in', 'not in'])} {sub()})"
    if form == 2:
        return f"({sub()} {src.choice(['and', 'or'])} {sub()})"
    if form == 3:
        return f"({src.choice(['not ', '-'])}{sub()})"
    if form == 4:
        return f"({sub()} if {sub()} else {sub()})"
    if form == 5:
        args = ", ".join(sub() for _ in range(src.integer(0, 3)))
        return f"{src.choice(_PRIMS)}({args})"
    if form == 6:
        return f"{sub()}.{src.choice(['value', 'kind', 'group', 'rounding', 'x'])}"
    if form == 7:
        return f"{sub()}[{src.choice(['0', '-1', '1:', ':2', '::2', sub()])}]"
    if form == 8:
        return "(" + ", ".join(sub() for _ in range(src.integer(0, 3))) + ",)"
    if form == 9:
        return f"{src.choice(['all', 'sum', 'max', 'min'])}({sub()} for n in {sub()})"
    if form == 10:
        return f"max({sub()}, default={sub()})"
    return f"present({src.choice(names)})"


def int_expr(src, dims: Sequence[str], flags: Sequence[str], depth: int = 0) -> str:
    """A well-kinded Int expression over Dim indices and Bool flags (nonlinear products,
    divisions by expressions, conditionals), so that the spec still elaborates and the
    question reaches Z3."""
    if depth >= 3 or src.chance(0.3):
        return src.choice([src.choice(dims), src.choice(dims), str(src.integer(0, 8)),
                           str(src.choice([2 ** 40, 2 ** 62, 4096]))])
    sub = lambda: int_expr(src, dims, flags, depth + 1)  # noqa: E731
    form = src.integer(0, 5)
    if form == 0:
        return f"({sub()} {src.choice(['+', '-', '*', '*'])} {sub()})"
    if form == 1:
        return f"({sub()} {src.choice(['//', '%'])} {sub()})"
    if form == 2:
        return f"ceil_div({sub()}, {sub()})"
    if form == 3 and flags:
        return f"({sub()} if {src.choice(flags)} else {sub()})"
    if form == 4:
        return f"({sub()} if {bool_expr(src, dims, flags, depth + 1)} else {sub()})"
    return f"max(({sub()}, {sub()}))" if src.chance(0.5) else f"prod(({sub()}, {sub()}))"


def bool_expr(src, dims: Sequence[str], flags: Sequence[str], depth: int = 0) -> str:
    """A well-kinded Bool expression: comparisons of `int_expr`s, flags, and/or/not."""
    if flags and src.chance(0.2):
        return src.choice(flags)
    left = int_expr(src, dims, flags, depth + 1)
    cmp = f"{left} {src.choice(['==', '!=', '<', '<=', '>', '>='])} {int_expr(src, dims, flags, depth + 1)}"
    if depth < 2 and src.chance(0.3):
        return f"({cmp}) {src.choice(['and', 'or'])} ({bool_expr(src, dims, flags, depth + 1)})"
    return f"not ({cmp})" if src.chance(0.1) else cmp


def _typed_mutation(src, case: Case) -> str | None:
    """Replace an output axis, a let, a refinement or the flops with a well-kinded random
    expression; the path changed, or None when the spec has no such place."""
    entry = case.spec.get(OP)
    sig = entry.get("signature") if isinstance(entry, dict) else None
    if not isinstance(sig, dict) or not isinstance(sig.get("forall"), dict):
        return None
    dims = [k for k, v in sig["forall"].items() if v == "Dim"]
    params = sig.get("params") if isinstance(sig.get("params"), dict) else {}
    flags = [k for k, v in params.items() if isinstance(v, dict) and v.get("type") == "bool"]
    if not dims:
        return None
    places = []
    outs = sig.get("outputs") if isinstance(sig.get("outputs"), dict) else {}
    places += [("outputs", n) for n, t in outs.items() if isinstance(t, dict)]
    lets = sig.get("let") if isinstance(sig.get("let"), dict) else {}
    places += [("let", n) for n in lets]
    places += [("shape_rules", None), ("flops", None)]
    where, name = src.choice(places)
    if where == "outputs":
        axes = [int_expr(src, dims, flags) for _ in range(src.integer(1, 3))]
        outs[name]["shape"] = "[" + ", ".join(axes) + "]"
        return f"signature.outputs.{name}.shape"
    if where == "let":
        lets[name] = int_expr(src, dims, flags)
        return f"signature.let.{name}"
    if where == "shape_rules":
        sig.setdefault("shape_rules", [])
        if isinstance(sig["shape_rules"], list):
            sig["shape_rules"].append(bool_expr(src, dims, flags))
        return "signature.shape_rules"
    if isinstance(entry.get("roofline"), dict):
        entry["roofline"] = {"flops": int_expr(src, dims, flags)}
    return "roofline.flops"


MUTATIONS = ["drop", "rename", "duplicate-key", "swap-names", "replace-expr", "change-kind",
             "change-value", "copy-subtree", "truncate", "splice", "delete-lines",
             "duplicate-spec", "types-garbage", "random-expr", "random-expr", "typed-expr",
             "typed-expr", "typed-expr"]


def mutate(src, case: Case, n: int | None = None) -> Case:
    """`case` with 1-3 mutations (data-level ones first; a text-level one ends the list)."""
    spec = json.loads(json.dumps(case.spec, allow_nan=True))
    types = json.loads(json.dumps(case.types, allow_nan=True)) if case.types else None
    out = Case(spec, types, list(case.mutations), dict(case.texts))
    for _ in range(n if n is not None else src.integer(1, 3)):
        _mutate_once(src, out)
    return out


def _mutate_once(src, case: Case) -> None:
    kind = src.choice(MUTATIONS)
    fam = f"{FAMILY}.yaml"
    target = case.spec
    if kind == "types-garbage":
        if case.types is None:
            case.types = json.loads(json.dumps(TYPES_ADT))
        target = case.types
        kind = src.choice(["drop", "rename", "change-value", "replace-expr", "change-kind"])
    if case.texts and kind not in ("truncate", "splice", "delete-lines", "duplicate-key"):
        kind = src.choice(["truncate", "splice", "delete-lines", "duplicate-key"])
    if kind in ("truncate", "splice", "delete-lines", "duplicate-key"):
        text = case.texts.get(fam) or to_yaml(case.spec)
        if kind == "truncate":
            text = text[:src.integer(0, len(text))]
        elif kind == "splice":
            at = src.integer(0, len(text))
            cut = src.integer(0, 12)
            text = text[:at] + _tokens(src, src.integer(0, 4)) + text[at + cut:]
        elif kind == "delete-lines":
            lines = text.splitlines(keepends=True)
            if lines:
                at = src.integer(0, len(lines) - 1)
                del lines[at:at + src.integer(1, 3)]
            text = "".join(lines)
        else:  # duplicate a line: in a block mapping, a duplicate key
            lines = text.splitlines(keepends=True)
            if lines:
                at = src.integer(0, len(lines) - 1)
                lines.insert(at, lines[at])
            text = "".join(lines)
        case.texts[fam] = text
        case.mutations.append(kind)
        return
    if kind == "typed-expr":
        where = _typed_mutation(src, case) if target is case.spec else None
        case.mutations.append(f"typed-expr@{where}")
        return
    paths = _paths(target)
    if not paths:
        case.mutations.append(kind + "(nothing)")
        return
    path = src.choice(paths)
    parent = _get(target, path[:-1])
    last = path[-1]
    if kind == "drop":
        del parent[last]
    elif kind == "rename" and isinstance(parent, dict):
        new = src.choice(_FIELDS + _NAMES + [_tokens(src, 2)])
        items = list(parent.items())
        parent.clear()
        for k, v in items:
            parent[new if k == last else k] = v
    elif kind == "swap-names":
        a, b = src.choice(_NAMES), src.choice(_NAMES)
        swapped = _map_strings(target, lambda s: _swap_names(s, a, b))
        target.clear()
        target.update(swapped)
    elif kind == "random-expr":
        strings = [p for p in paths if isinstance(_get(target, p), str)]
        if strings:
            p = src.choice(strings)
            names = _names_of(case.spec)
            e = random_expr(src, names)
            if _get(target, p).startswith("["):
                axes = [random_expr(src, names) for _ in range(src.integer(0, 3))]
                if src.chance(0.3):
                    axes.append("*" + random_expr(src, names, 2))
                e = "[" + ", ".join(axes) + "]"
            _get(target, p[:-1])[p[-1]] = e
            path = p
    elif kind == "duplicate-spec" and isinstance(target.get(OP), dict):
        # A second op, a copy of the first with one field changed: two specs per file.
        twin = json.loads(json.dumps(target[OP], allow_nan=True))
        target[src.choice(["Fuzz2FwdOp", "FuzzBwdOp", OP + "x", "fuzz", "1"])] = twin
    elif kind == "replace-expr":
        strings = [p for p in paths if isinstance(_get(target, p), str)]
        if strings:
            p = src.choice(strings)
            _get(target, p[:-1])[p[-1]] = _tokens(src, src.integer(1, 10))
    elif kind == "change-kind":
        strings = [p for p in paths if isinstance(_get(target, p), str)
                   and len(p) >= 2 and p[-2] in ("forall", "params", "type", "fields")
                   or (len(p) >= 1 and p[-1] == "type")]
        if strings:
            p = src.choice(strings)
            _get(target, p[:-1])[p[-1]] = src.choice(_KINDS)
    elif kind == "copy-subtree":
        other = src.choice(paths)
        value = json.loads(json.dumps(_get(target, other), allow_nan=True))
        parent[last] = value
    else:  # change-value (and a rename inside a list)
        parent[last] = _random_value(src)
    case.mutations.append(f"{kind}@{'.'.join(map(str, path))}")


# ----------------------------------------------------------------------------- strategies


@st.composite
def valid_cases(draw) -> Case:
    return gen_case(HypothesisSource(draw))


@st.composite
def mutated_cases(draw) -> Case:
    src = HypothesisSource(draw)
    return mutate(src, gen_case(src))


def random_case(seed: int, mutate_p: float = 0.8) -> Case:
    """The case of one seed (what `benchmarks/fuzz.py` runs): generated, then mutated with
    probability `mutate_p`."""
    src = RandomSource(random.Random(seed))
    case = gen_case(src)
    if src.chance(mutate_p):
        case = mutate(src, case)
    return case


# ------------------------------------------------------------------------------- pipeline


class Crash(Exception):
    """The pipeline crashed on a case: anything but diagnostics came out."""


@dataclass
class Outcome:
    verdicts: dict[str, str]
    diagnostics: list[str]
    seconds: float

    @property
    def errors(self) -> list[str]:
        return [d for d in self.diagnostics if "error[" in d]


def write_case(case: Case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    for name, text in case.files().items():
        (folder / name).write_text(text, encoding="utf-8", errors="surrogatepass")


def run_case(case: Case, folder: Path) -> Outcome:
    """Load (strictly) → elaborate → prove → render, as `opspec prove` does. Raises `Crash`
    for a diagnostic that reports a crash; any other exception escapes as itself."""
    from opspec.schema.loader import load_paths
    from opspec.solver.run import prove_manifest

    write_case(case, folder)
    start = time.perf_counter()
    manifest = load_paths([folder], strict=True)
    report = prove_manifest(manifest)
    rendered = []
    for d in report.all_diagnostics:
        rendered.append(d.render())
        json.dumps(d.to_json())
        if "crashed" in d.message:
            raise Crash(d.render())
    for s in report.specs:
        json.dumps(s.to_json())
    return Outcome({s.op: s.verdict for s in report.specs}, rendered,
                   time.perf_counter() - start)
