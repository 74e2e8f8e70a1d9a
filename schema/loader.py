"""Loading spec files and manifest folders into the models, field by field.

`load_paths` reads family files (`<family>.yaml`, `<family>_<shard>.yaml`) and types files
(`types.yaml`), and returns a `Manifest`: one `LoadedSpec` per op, with the positions of
every node and the diagnostics found while loading.

Each spec is validated one sub-mapping at a time (each tensor, parameter, type family,
let, refinement, dtype combo, workload row, the roofline, each composition stage), so a
malformed entry costs only itself: it is dropped, named in `LoadedSpec.broken` and
reported once per bad field, and the rest of the spec still loads (a roofline or every
workload row that failed included: the op then loads without them, so its signature is
still proven). An unknown key is reported with the closest known key; a missing required
field with a key of the same mapping that looks like it.

Strict mode (the prover) treats an unknown key as an error that drops its entry. Lenient
mode (import time) warns about it, ignores the key and keeps the entry; it never raises,
not even on an unreadable path. Strict mode raises `SpecError` only when a path given to
it does not exist. Both modes return every diagnostic.
"""

from __future__ import annotations

import keyword
import types as _types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from .diagnostics import Diagnostic, Pos, Severity
from .errors import SpecError
from .models import (ADTDef, Composition, OpSpec, ParamSpec, Roofline, Signature, Stage,
                     TensorSpec, TypeFamily, TypesFile, WorkloadRow)
from .suggest import closest
from .yaml_source import MAX_FILE_BYTES, SourceMap, YamlError, load_yaml

__all__ = ["LoadedSpec", "Manifest", "load_paths"]

TYPES_FILE = "types.yaml"
_DIRECTIONS = ("FwdOp", "BwdOp")


# --- data types ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadedSpec:
    """One op as loaded: its spec (None when a required field is missing or broken), where
    it came from, and what went wrong.

    Declaration paths (`signature.inputs.b.shape`, `workloads.2`) are dotted paths inside
    the op. `broken` holds those of entries dropped because they failed to parse; list
    indices in them are indices in the file. `index_map` maps the declaration path of a
    list that lost items to the file indices of the items kept, so that index `i` of
    `spec.signature.shape_rules` can be traced back to its line.
    """

    name: str
    file: str
    spec: OpSpec | None
    source: SourceMap = field(repr=False, compare=False)
    path_prefix: tuple = ()
    broken: frozenset[str] = frozenset()
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    diagnostics: tuple[Diagnostic, ...] = ()
    index_map: Mapping[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """The spec loaded completely: nothing dropped, no error."""
        return self.spec is not None and not self.broken and not any(
            d.is_error for d in self.diagnostics)

    def source_path(self, path: str | Sequence[Any] = ()) -> tuple:
        """The data path in the file of a declaration path of the loaded spec."""
        parts = _split_path(path)
        out: list[Any] = []
        for i, part in enumerate(parts):
            if isinstance(part, int):
                kept = self.index_map.get(_dotted(parts[:i]))
                if kept is not None and 0 <= part < len(kept):
                    part = kept[part]
            elif isinstance(part, str) and part.isdigit() and \
                    self.path_prefix + tuple(out) + (part,) not in self.source.values:
                part = int(part)
            out.append(part)
        return self.path_prefix + tuple(out)

    def file_decl(self, path: str) -> str:
        """`path` with its list indices as in the file: `workloads.1` for the second row
        kept when the first failed to load (the prover's passes see only the rows kept)."""
        if not self.index_map or not path:
            return path
        return _dotted(self.source_path(path)[len(self.path_prefix):])

    def pos(self, path: str | Sequence[Any] = ()) -> Pos | None:
        """Where a declaration is written: the key of a mapping or list entry, the first
        character of a scalar (inside quotes), else the closest enclosing declaration."""
        return self.source.decl(self.source_path(path))

    def key_pos(self, path: str | Sequence[Any] = ()) -> Pos | None:
        """The position of the key that declares `path` (its value's when it has none)."""
        sp = self.source_path(path)
        return self.source.key(sp) or self.source.find(sp)


@dataclass(frozen=True, repr=False)
class Manifest:
    """Every spec of a set of files, in load order, the merged types file, and every
    diagnostic found while loading."""

    specs: dict[str, LoadedSpec]
    types: TypesFile = field(default_factory=TypesFile)
    files: tuple[str, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    root: str | None = None
    adt_sources: Mapping[str, tuple[SourceMap, tuple]] = field(
        default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"Manifest({len(self.specs)} specs, {len(self.adts)} ADTs, {len(self.files)} "
                f"files, {len(self.errors)} errors, root={self.root!r})")

    @property
    def adts(self) -> dict[str, ADTDef]:
        return self.types.adts

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.is_error)

    @property
    def ops(self) -> dict[str, OpSpec]:
        """The specs that loaded, by op name."""
        return {n: s.spec for n, s in self.specs.items() if s.spec is not None}

    def adt_pos(self, name: str, path: str | Sequence[Any] = ()) -> Pos | None:
        """Where ADT `name` (or a declaration inside it, e.g. `sum.masked`) is written."""
        if name not in self.adt_sources:
            return None
        smap, prefix = self.adt_sources[name]
        return smap.decl(prefix + _split_path(path))


def _split_path(path: str | Sequence[Any]) -> tuple:
    if isinstance(path, str):
        return tuple(int(p) if p.isdigit() else p for p in path.split(".") if p != "")
    return tuple(path)


def _dotted(path: Iterable[Any]) -> str:
    return ".".join(str(p) for p in path)


def path_under(path: str, head: str) -> bool:
    """Whether the dotted declaration path `path` is `head` or lies inside it."""
    return path == head or path.startswith(head + ".")


# --- turning pydantic errors into sentences -----------------------------------------------

_KINDS = {
    "string_type": "a string", "str": "a string", "bool_type": "true or false",
    "bool": "true or false", "int_type": "an integer", "int": "an integer",
    "float_type": "a number", "float": "a number", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
    "none_required": "null", "none": "null",
}


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value is None:
        return "`null`"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return f"`{text[:60]}{'...' if len(text) > 60 else ''}`"


def _model_of(t: Any) -> type[BaseModel] | None:
    if isinstance(t, type) and issubclass(t, BaseModel):
        return t
    if get_origin(t) in (Union, _types.UnionType):
        for arg in get_args(t):
            m = _model_of(arg)
            if m is not None:
                return m
    return None


def _item_type(t: Any) -> Any:
    origin = get_origin(t)
    if origin is dict:
        return get_args(t)[1]
    if origin is list:
        return get_args(t)[0]
    if origin in (Union, _types.UnionType):
        for arg in get_args(t):
            if get_origin(arg) in (dict, list):
                return _item_type(arg)
    return None


def _field_names(model: Any, loc: tuple) -> list[str]:
    """Known keys of the mapping at `loc` inside `model` (for "did you mean")."""
    t = model
    for part in loc:
        m = _model_of(t)
        if m is not None:
            t = next((f.annotation for n, f in m.model_fields.items()
                      if part in (n, f.alias)), None)
        else:
            t = _item_type(t)
        if t is None:
            return []
    m = _model_of(t)
    return [f.alias or n for n, f in m.model_fields.items()] if m else []


def _closest(name: Any, known: Iterable[str]) -> str:
    close = closest(name, known)
    return f"; did you mean `{close}`?" if close else ""


def _misspelt(field: Any, mapping: Any) -> str:
    """`; is `labl` a misspelling of it?` when `mapping`, which misses `field`, has a key
    close to it: in a workload row any other key reads as an index value, so a misspelt
    `label` is not an unknown field there, only a missing one."""
    if not isinstance(mapping, dict):
        return ""
    close = closest(field, [str(k) for k in mapping if k != field])
    return f"; is `{close}` a misspelling of it?" if close else ""


@dataclass
class _Problem:
    loc: tuple          # data path inside the validated entry
    message: str
    key: bool = False   # the problem is a key: point at the key, not the value
    parent: bool = False  # point at the enclosing mapping (a missing field)
    extra: bool = False


def _problems(model: Any, data: Any, errors: list[dict], place: tuple) -> list[_Problem]:
    """One readable problem per bad field of `data`."""
    walked = []
    for err in errors:
        loc = tuple(err["loc"])
        if model is WorkloadRow and loc[:1] == ("values",):
            loc = loc[1:]  # row values are written at the row's top level
        is_key = "[key]" in loc
        loc = tuple(p for p in loc if p != "[key]")
        cur, out, tags = data, [], []
        for i, part in enumerate(loc):
            last = i == len(loc) - 1
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
                cur = cur[part]
            elif last and err["type"] == "missing":
                pass
            else:
                tags.append(str(part))  # a union member's label, e.g. `bool` or `ADTField`
                continue
            out.append(part)
        # `cur`: the node at `out`; for a missing field, the mapping that misses it
        walked.append((tuple(out), tags, err, is_key, cur))

    deepest = [w[0] for w in walked]
    problems: list[_Problem] = []
    grouped: dict[tuple, list] = {}
    for out, tags, err, is_key, node in walked:
        # A union member that failed on the node's type is noise when another member got
        # further into the same node: report the deeper problem only.
        if tags and err["type"].endswith("_type") and any(
                len(d) > len(out) and d[:len(out)] == out for d in deepest):
            continue
        if tags and not is_key and err["type"] not in ("missing", "extra_forbidden"):
            grouped.setdefault(out, []).append((tags, err))
            continue
        problems.append(_problem(model, out, err, is_key, place, node))
    for out, members in grouped.items():
        kinds = []
        for tags, err in members:
            if err["type"] == "literal_error":
                kinds.append("one of " + str(err["ctx"]["expected"]))
            else:
                kinds.append(_KINDS.get(err["type"], _KINDS.get(tags[-1], tags[-1])))
        kinds = list(dict.fromkeys(kinds))
        where = _dotted(place + out) or "the value"
        problems.append(_Problem(out, f"`{where}` must be {' or '.join(kinds)}, got "
                                      f"{_show(members[0][1]['input'])}"))
    return problems


def _problem(model: Any, out: tuple, err: dict, is_key: bool, place: tuple,
             node: Any = None) -> _Problem:
    kind = err["type"]
    where = _dotted(place + out) or "the value"
    parent = _dotted(place + out[:-1]) or "the spec"
    if is_key:
        return _Problem(out, f"key {_show(out[-1] if out else err['input'])} in {parent} "
                             "must be a string", key=True)
    if kind == "extra_forbidden":
        known = _field_names(model, out[:-1])
        return _Problem(out, f"unknown field `{out[-1]}` in {parent}{_closest(out[-1], known)}",
                        key=True, extra=True)
    if kind == "missing":
        return _Problem(out, f"missing required field `{out[-1]}` in {parent}"
                             f"{_misspelt(out[-1], node) if out else ''}", parent=True)
    if kind in ("value_error", "assertion_error"):
        text = str(err.get("ctx", {}).get("error", err["msg"]))
        return _Problem(out, f"{where}: {text}" if out else text)
    if kind == "too_short":
        return _Problem(out, f"`{where}` must not be empty")
    if kind == "literal_error":
        return _Problem(out, f"`{where}` must be {err['ctx']['expected']}, got "
                             f"{_show(err['input'])}")
    if kind in _KINDS:
        return _Problem(out, f"`{where}` must be {_KINDS[kind]}, got {_show(err['input'])}")
    msg = err["msg"].replace("Input should be", "must be")
    return _Problem(out, f"`{where}` {msg[0].lower()}{msg[1:]}, got {_show(err['input'])}")


# --- one spec, field by field -------------------------------------------------------------

_STR = TypeAdapter(str)
_STR_LIST = TypeAdapter(list[str])
_COMBO = TypeAdapter(dict[str, str])
_OP_FIELDS = tuple(OpSpec.model_fields)
_SIG_FIELDS = tuple(Signature.model_fields)


class _Builder:
    """Validates one op's (or one types file's) sub-mappings one at a time."""

    def __init__(self, op: str | None, smap: SourceMap, prefix: tuple, strict: bool):
        self.op, self.smap, self.prefix, self.strict = op, smap, prefix, strict
        self.diags: list[Diagnostic] = []
        self.broken: set[str] = set()
        self.index_map: dict[str, tuple[int, ...]] = {}

    def report(self, decl: tuple, message: str, *, at: str = "decl",
               severity: Severity = Severity.ERROR, check: str = "parse") -> None:
        full = self.prefix + decl
        if at == "key":
            pos = self.smap.key(full) or self.smap.find(full)
        elif at == "parent":
            pos = self.smap.decl(full[:-1])
        else:
            pos = self.smap.decl(full)
        self.diags.append(Diagnostic(check, message, op=self.op, path=_dotted(decl) or None,
                                     pos=pos, severity=severity))

    def unknown(self, key: Any, decl: tuple, known: Iterable[str]) -> None:
        place = _dotted(decl) or "the spec"
        self.report(decl + (key,), f"unknown field `{key}` in {place}{_closest(key, known)}",
                    at="key", severity=Severity.ERROR if self.strict else Severity.WARNING)

    def validate(self, model: Any, data: Any, decl: tuple) -> Any:
        """`model` validated from `data`, or None after reporting why (and marking `decl`
        broken). Lenient mode drops unknown keys and tries again."""
        adapter = model if isinstance(model, TypeAdapter) else None
        try:
            if adapter is not None:
                return adapter.validate_python(data, strict=True)
            return model.model_validate(data, strict=True)
        except ValidationError as exc:
            problems = _problems(model, data, exc.errors(), decl)
        if not self.strict and problems and all(p.extra for p in problems):
            for p in problems:
                self.report(decl + p.loc, p.message, at="key", severity=Severity.WARNING)
            return self.validate(model, _without(data, [p.loc for p in problems]), decl)
        for p in problems:
            self.report(decl + p.loc, p.message,
                        at="key" if p.key else "parent" if p.parent else "decl")
        self.broken.add(_dotted(decl))
        return None

    def mapping(self, data: Any, decl: tuple) -> dict | None:
        if isinstance(data, dict):
            return data
        self.report(decl, f"`{_dotted(decl)}` must be a mapping, got {_show(data)}")
        self.broken.add(_dotted(decl))
        return None

    def entries(self, data: Any, decl: tuple, model: Any, coerce: Any = None) -> dict | None:
        """A mapping name -> entry, each entry validated on its own."""
        data = self.mapping(data, decl)
        if data is None:
            return None
        out = {}
        for name, value in data.items():
            if not isinstance(name, str):
                self.report(decl + (name,), f"key {_show(name)} in `{_dotted(decl)}` must be "
                                            "a name (a string)", at="key")
                self.broken.add(_dotted(decl + (name,)))
                continue
            if coerce is not None:
                value = coerce(value)
            item = self.validate(model, value, decl + (name,))
            if item is not None:
                out[name] = item
        return out

    def items(self, data: Any, decl: tuple, model: Any, what: str = "") -> list | None:
        """A list, each item validated on its own; `index_map` records what was kept."""
        if not isinstance(data, list):
            self.report(decl, f"`{_dotted(decl)}` must be a list, got {_show(data)}")
            self.broken.add(_dotted(decl))
            return None
        out, kept = [], []
        for i, value in enumerate(data):
            if what and not isinstance(value, str):
                self.report(decl + (i,), f"`{_dotted(decl + (i,))}` must be a string ({what}),"
                                         f" got {_show(value)}; quote it")
                self.broken.add(_dotted(decl + (i,)))
                continue
            item = self.validate(model, value, decl + (i,))
            if item is not None:
                out.append(item)
                kept.append(i)
        if len(kept) != len(data):
            self.index_map[_dotted(decl)] = tuple(kept)
        return out

    # the spec ---------------------------------------------------------------------------

    def spec(self, raw: Any) -> OpSpec | None:
        raw = self.mapping(raw, ())
        if raw is None:
            return None
        fields: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in _OP_FIELDS:
                self.unknown(key, (), _OP_FIELDS)
            elif key == "signature":
                fields[key] = self.signature(value)
            elif key == "workloads":
                fields[key] = self.items(value, (key,), WorkloadRow)
            elif key == "roofline":
                fields[key] = self.validate(Roofline, value, (key,))
            elif key == "composition":
                fields[key] = self.composition(value)
            else:
                fields[key] = value
        spec = self.assemble(OpSpec, fields, ())
        return spec if spec is not None else self.without_broken_parts(fields)

    def without_broken_parts(self, fields: dict) -> OpSpec | None:
        """The op without its roofline or its workload rows, when those failed to load and
        everything else is valid: the signature is still there to prove, and the prover
        reports its problems in the same run instead of hiding them behind the parse error.
        The parts stay broken (`LoadedSpec.ok` is False; the runtime refuses the spec)."""
        gone = {}
        if fields.get("roofline") is None and "roofline" in self.broken:
            gone["roofline"] = None
        if not fields.get("workloads") and any(path_under(b, "workloads") for b in self.broken):
            gone["workloads"] = []
        if not gone:
            return None
        # Valid stand-ins check the rest; the broken parts are then left out unvalidated.
        stand_ins = {"roofline": Roofline(flops="0"), "workloads": [WorkloadRow(label="_")]}
        try:
            spec = OpSpec.model_validate({**fields, **{k: stand_ins[k] for k in gone}},
                                         strict=True)
        except ValidationError:
            return None
        return spec.model_copy(update=gone)

    def signature(self, raw: Any) -> Signature | None:
        decl = ("signature",)
        raw = self.mapping(raw, decl)
        if raw is None:
            return None
        fields: dict[str, Any] = {}
        for key, value in raw.items():
            here = decl + (key,)
            if key not in _SIG_FIELDS:
                self.unknown(key, decl, _SIG_FIELDS)
            elif key == "types":
                fields[key] = self.entries(value, here, TypeFamily)
            elif key == "params":
                fields[key] = self.entries(value, here, ParamSpec)
            elif key in ("inputs", "outputs"):
                fields[key] = self.entries(value, here, TensorSpec)
            elif key == "forall":
                fields[key] = self.entries(value, here, _STR)
            elif key == "let":
                # `let: {G: 8}` is as legal as `let: {G: "8"}`.
                fields[key] = self.entries(value, here, _STR, coerce=_int_as_text)
            elif key == "shape_rules":
                fields[key] = self.items(value, here, _STR, what="a refinement")
            elif key == "dtype_combos":
                fields[key] = self.items(value, here, _COMBO)
        return self.assemble(Signature, fields, decl)

    def composition(self, raw: Any) -> Composition | None:
        decl = ("composition",)
        raw = self.mapping(raw, decl)
        if raw is None:
            return None
        known = tuple(Composition.model_fields)
        fields: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                self.unknown(key, decl, known)
            elif key == "stages":
                fields[key] = self.items(value, decl + (key,), Stage)
            else:
                fields[key] = value
        return self.assemble(Composition, fields, decl)

    def assemble(self, model: type[BaseModel], fields: dict, decl: tuple) -> Any:
        """Validate a mapping whose parts were validated already; a part that is broken
        is left out, and the errors that its absence causes are not reported again."""
        fields = {k: v for k, v in fields.items() if v is not None}
        try:
            return model.model_validate(fields, strict=True)
        except ValidationError as exc:
            errors = [e for e in exc.errors() if not self._from_broken(decl, e["loc"])]
        for p in _problems(model, fields, errors, decl):
            self.report(decl + p.loc, p.message,
                        at="key" if p.key else "parent" if p.parent else "decl")
            if p.loc and not p.parent:
                self.broken.add(_dotted(decl + p.loc[:1]))
        if decl:
            self.broken.add(_dotted(decl))
        return None

    def _from_broken(self, decl: tuple, loc: tuple) -> bool:
        head = _dotted(decl + tuple(loc[:1]))
        return any(path_under(b, head) for b in self.broken)

    # the types file ---------------------------------------------------------------------

    def types_file(self, raw: Any) -> TypesFile:
        if raw is None:
            return TypesFile()
        raw = self.mapping(raw, ())
        if raw is None:
            return TypesFile()
        known = tuple(TypesFile.model_fields)
        fields: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                self.unknown(key, (), known)
            elif key == "adts":
                fields[key] = self.entries(value, (key,), ADTDef)
            else:
                fields[key] = self.validate(_STR_LIST, value, (key,))
        return self.assemble(TypesFile, fields, ()) or TypesFile()


def _int_as_text(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _without(data: Any, locs: list[tuple]) -> Any:
    """A copy of `data` without the keys at `locs`."""
    def copy(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: copy(x) for k, x in v.items()}
        if isinstance(v, list):
            return [copy(x) for x in v]
        return v
    data = copy(data)
    for loc in locs:
        cur = data
        for part in loc[:-1]:
            cur = cur[part]
        if isinstance(cur, dict):
            cur.pop(loc[-1], None)
    return data


# --- files and folders --------------------------------------------------------------------

class _Load:
    def __init__(self, strict: bool):
        self.strict = strict
        self.diags: list[Diagnostic] = []
        self.specs: dict[str, LoadedSpec] = {}
        self.files: list[str] = []
        self.adts: dict[str, ADTDef] = {}
        self.prefixes: list[str] = []
        self.ref_prefixes: list[str] = []
        self.adt_sources: dict[str, tuple[SourceMap, tuple]] = {}
        self.parse_cache: ParseCache | None = None

    def file_diag(self, file: str, message: str, check: str = "parse",
                  pos: Pos | None = None, severity: Severity = Severity.ERROR) -> None:
        self.diags.append(Diagnostic(check, message, pos=pos or Pos(file, 1, 1),
                                     severity=severity))

    def read(self, path: Path) -> tuple[Any, SourceMap] | None:
        file = str(path)
        self.files.append(file)
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                self.file_diag(file, f"file of {size} bytes; the limit is {MAX_FILE_BYTES} bytes")
                return None
            text = path.read_bytes().decode("utf-8-sig")
        except OSError as exc:
            self.file_diag(file, f"cannot read the file: {exc.strerror or exc}")
            return None
        except UnicodeDecodeError as exc:
            self.file_diag(file, f"the file is not UTF-8: {exc.reason} at byte {exc.start}")
            return None
        if self.parse_cache is not None:
            hit = self.parse_cache.get(text, file)
            if hit is not None:
                return hit
        try:
            got = load_yaml(text, file)
        except YamlError as exc:
            self.diags.append(exc.diagnostic)
            return None
        if self.parse_cache is not None:
            self.parse_cache.put(text, file, got)
        return got

    def family_file(self, path: Path) -> None:
        got = self.read(path)
        if got is None:
            return
        data, smap = got
        file = str(path)
        if not isinstance(data, dict) or not data:
            what = "empty" if data is None or data == {} else f"{_show(data)}, not a mapping"
            self.file_diag(file, f"a family file maps op names to specs; this one is {what}",
                           pos=smap.find(()))
            return
        issues: dict[Any, list[tuple]] = {}
        for ipath, diag in smap.issues:
            if len(ipath) <= 1:
                self.diags.append(diag)
            else:
                issues.setdefault(ipath[0], []).append((ipath, diag))
        for key, raw in data.items():
            self.spec(path, smap, key, raw, issues.get(key, []))

    def spec(self, path: Path, smap: SourceMap, key: Any, raw: Any, issues: list) -> None:
        file, name, stem = str(path), str(key), path.stem
        builder = _Builder(name, smap, (key,), self.strict)
        name_pos = smap.key((key,))
        for ipath, diag in issues:
            builder.diags.append(Diagnostic(diag.check, diag.message, op=name,
                                            path=_dotted(ipath[1:]), pos=diag.pos))
        if not (isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key)):
            builder.diags.append(Diagnostic(
                "name", f"op name {_show(key)} is not a Python identifier (it names the "
                        "op's class)", op=name, pos=name_pos))
        elif not key.endswith(_DIRECTIONS):
            builder.diags.append(Diagnostic(
                "name", f"op name `{name}` should end in `FwdOp` or `BwdOp` (variant words "
                        "go before the direction)", op=name, pos=name_pos,
                severity=Severity.WARNING))
        spec = builder.spec(raw)
        family = raw.get("family") if isinstance(raw, dict) else None
        if isinstance(family, str) and not (stem == family or stem.startswith(family + "_")):
            builder.report(("family",), f"op `{name}` has family `{family}` but is in "
                           f"`{path.name}`; a family file is named `<family>.yaml` or "
                           f"`<family>_<shard>.yaml`", check="name")
        if name in self.specs:
            first = self.specs[name]
            where = first.key_pos()
            builder.diags.append(Diagnostic(
                "name", f"op `{name}` is defined twice: at {where or first.file} and at "
                        f"{name_pos or file}; the second is ignored", op=name, pos=name_pos))
            self.diags.extend(builder.diags)
            return
        loaded = LoadedSpec(name=name, file=file, spec=spec, source=smap, path_prefix=(key,),
                            broken=frozenset(builder.broken),
                            raw=raw if isinstance(raw, dict) else {},
                            diagnostics=tuple(builder.diags), index_map=builder.index_map)
        self.specs[name] = loaded
        self.diags.extend(builder.diags)

    def types_file(self, path: Path) -> None:
        got = self.read(path)
        if got is None:
            return
        data, smap = got
        builder = _Builder(None, smap, (), self.strict)
        for _, diag in smap.issues:
            builder.diags.append(diag)
        types = builder.types_file(data)
        self.diags.extend(builder.diags)
        for name, adt in types.adts.items():
            if name in self.adts:
                first = self.adt_sources[name][0].key(("adts", name))
                self.diags.append(Diagnostic(
                    "name", f"ADT `{name}` is defined twice: at {first} and at "
                            f"{smap.key(('adts', name))}; the second is ignored",
                    pos=smap.key(("adts", name))))
                continue
            self.adts[name] = adt
            self.adt_sources[name] = (smap, ("adts", name))
        self.prefixes.extend(p for p in types.python_prefixes if p not in self.prefixes)
        self.ref_prefixes.extend(p for p in types.ref_api_prefixes if p not in self.ref_prefixes)

    def manifest(self, root: str | None) -> Manifest:
        types = TypesFile.model_construct(adts=self.adts, python_prefixes=self.prefixes,
                                          ref_api_prefixes=self.ref_prefixes)
        return Manifest(specs=self.specs, types=types, files=tuple(self.files),
                        diagnostics=tuple(self.diags), root=root,
                        adt_sources=self.adt_sources)


def _expand(path: Path) -> tuple[list[Path], list[Path]]:
    """(family files, types files) of a file or a manifest folder, in load order."""
    if path.is_file():
        return ([], [path]) if path.name == TYPES_FILE else ([path], [])
    spec_dir = path / "spec"
    folder = spec_dir if spec_dir.is_dir() else path
    found = sorted(p for p in folder.glob("*.yaml") if p.is_file())
    families = [p for p in found if p.name != TYPES_FILE]
    types = [p for p in found if p.name == TYPES_FILE]
    if folder is spec_dir and (path / TYPES_FILE).is_file():
        types.insert(0, path / TYPES_FILE)
    return families, types


class ParseCache:
    """Parsed YAML (plain data and positions) on disk, keyed by the file's text, its name
    and the reader's own source; writes go to a temporary file and are renamed. The YAML
    reader is the slowest step of an unchanged re-run, so the CLI keeps one."""

    def __init__(self, root: str | Path):
        import hashlib

        self.root = Path(root)
        reader = Path(__file__).with_name("yaml_source.py").read_bytes()
        self._salt = hashlib.sha256(reader).hexdigest()[:16]

    def _path(self, text: str, file: str) -> Path:
        import hashlib

        key = hashlib.sha256(f"{self._salt}\0{file}\0{text}".encode()).hexdigest()
        return self.root / f"{key}.pickle"

    def get(self, text: str, file: str) -> tuple[Any, SourceMap] | None:
        import pickle

        try:
            with open(self._path(text, file), "rb") as f:
                return pickle.load(f)
        except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError):
            return None

    def put(self, text: str, file: str, value: tuple[Any, SourceMap]) -> None:
        import os
        import pickle
        import tempfile

        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f)
            os.replace(tmp, self._path(text, file))
        except OSError:
            pass  # a cache that cannot be written only costs time


def load_paths(paths: Sequence[str | Path], *, strict: bool = True,
               parse_cache: ParseCache | None = None) -> Manifest:
    """Load family files, types files and manifest folders into one `Manifest`.

    A folder is a manifest folder: either it has a `spec/` subfolder of family files (and
    maybe a `types.yaml` beside `spec/`), or it holds the family files itself. Types files
    load first, then family files in the order given (a folder's files sorted by name).
    Strict mode raises `SpecError` for a path that does not exist; lenient mode never
    raises and reports everything as diagnostics.
    """
    state = _Load(strict)
    state.parse_cache = parse_cache
    root = None
    try:
        if isinstance(paths, (str, Path)):
            paths = [paths]
        families: list[Path] = []
        types: list[Path] = []
        for given in paths:
            p = Path(given)
            if not p.exists():
                if strict:
                    raise SpecError(f"no such file or folder: {p}")
                state.file_diag(str(p), f"no such file or folder: {p}")
                continue
            f, t = _expand(p)
            families += f
            types += t
        for p in types:
            state.types_file(p)
        for p in families:
            state.family_file(p)
        if len(paths) == 1 and Path(paths[0]).is_dir():
            root = str(paths[0])
    except Exception as exc:  # noqa: BLE001 - lenient loading must never break an import
        if strict:
            raise
        state.diags.append(Diagnostic("parse", f"cannot load {paths!r}: {exc!r}"))
    return state.manifest(root)
