"""Safe YAML reading with a position for every node.

`load_yaml` turns one YAML document into plain Python data (dict, list, str, int, float,
bool, None) and a `SourceMap` that knows the file, line and column of every value and
every mapping key, so each diagnostic can point at the declaration it is about.

It is built on ruamel.yaml's *event* parser, with a small composer of our own on top, not
on a ruamel constructor: events give us every node's position and tag before anything is
built, which is what it takes to refuse hostile input cheaply. Nothing is ever constructed
from a tag (no Python objects), and the limits below bound time and memory:

- files over `MAX_FILE_BYTES`, nesting over `MAX_DEPTH`, scalars over `MAX_SCALAR_CHARS`;
- more than `MAX_ALIASES` aliases, an alias used inside its own anchor, or aliases that
  would expand to more than `MAX_ALIAS_NODES` nodes (a "billion laughs" has only ~80
  aliases, so counting them is not enough).

Those are unrecoverable: `load_yaml` raises `YamlError`. A duplicate mapping key is
recoverable (the first value is kept) and is recorded in `SourceMap.issues`.

Plain scalars are resolved with the YAML 1.2 core schema whatever `%YAML` directive a file
has: `yes`/`on` stay strings, dates stay strings, `.inf` is a float. Merge keys (`<<`) work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from ruamel.yaml import YAML
from ruamel.yaml import events as ev
from ruamel.yaml.error import MarkedYAMLError, YAMLError as RuamelError

from .diagnostics import Diagnostic, Pos
from .errors import SpecError

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 64
MAX_SCALAR_CHARS = 65536
MAX_ALIASES = 100
MAX_ALIAS_NODES = 100_000

#: A path into the loaded data: mapping keys and list indices.
DataPath = tuple


class YamlError(SpecError):
    """A YAML file cannot be read at all; `diagnostic` says where and why."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.render())
        self.diagnostic = diagnostic


@dataclass
class SourceMap:
    """Positions of the values and keys of one YAML document.

    `values[path]` is where the value at `path` starts (for a quoted scalar: its first
    character inside the quotes, so an offset into the string adds to the column);
    `keys[path]` is where the mapping key that holds it starts. A path through an alias
    is redirected by `links` to the anchored node, so positions inside aliased content
    point at the text that defines it. `issues` are recoverable problems found while
    reading, each with the data path it concerns.
    """

    file: str
    values: dict[DataPath, Pos] = field(default_factory=dict)
    keys: dict[DataPath, Pos] = field(default_factory=dict)
    containers: set[DataPath] = field(default_factory=set)
    links: dict[DataPath, DataPath] = field(default_factory=dict)
    issues: list[tuple[DataPath, Diagnostic]] = field(default_factory=list)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(d for _, d in self.issues)

    def get(self, path: DataPath) -> Pos | None:
        """The position of exactly this value, or None."""
        return self.values.get(tuple(path))

    def key(self, path: DataPath) -> Pos | None:
        """The position of the mapping key holding the value at `path`, or None."""
        return self.keys.get(tuple(path))

    def resolve(self, path: DataPath) -> DataPath | None:
        """The deepest known path that `path`, or its closest ancestor, stands for: a
        path through an alias continues inside the anchored node."""
        path = tuple(path)
        for _ in range(MAX_ALIASES + 2):  # each redirect follows one alias; no cycles
            for i in range(len(path), -1, -1):
                prefix = path[:i]
                if i == len(path) and prefix in self.values:
                    return prefix
                if prefix in self.links:
                    path = self.links[prefix] + path[i:]
                    break
                if prefix in self.values:
                    return prefix
            else:
                return None
        return None

    def find(self, path: DataPath) -> Pos | None:
        """The position of the value at `path`, or of its deepest known ancestor."""
        known = self.resolve(path)
        return None if known is None else self.values[known]

    def decl(self, path: DataPath) -> Pos | None:
        """Where the declaration at `path` (or its deepest known ancestor) is written: the
        key that holds a mapping or a list, else the value itself (so a column offset
        into an expression string adds up)."""
        known = self.resolve(path)
        if known is None:
            return None
        if known in self.containers and known in self.keys:
            return self.keys[known]
        return self.values[known]

    def is_container(self, path: DataPath) -> bool:
        return tuple(path) in self.containers


# --- scalar resolution: the YAML 1.2 core schema --------------------------------------------

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT10 = re.compile(r"^[-+]?[0-9]+$")
_INT8 = re.compile(r"^0o[0-7]+$")
_INT16 = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^([-+]?)\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")

_STD = "tag:yaml.org,2002:"
_MERGE = object()  # the pending "key" of a `<<` merge entry
_SKIP = object()   # the pending "key" of a duplicate entry, whose value is dropped


def resolve_plain(text: str) -> Any:
    """The value of the plain (unquoted) scalar `text` under the YAML 1.2 core schema."""
    if _NULL.match(text):
        return None
    if text in _BOOL:
        return _BOOL[text]
    if _INT10.match(text):
        return int(text)
    if _INT8.match(text):
        return int(text[2:], 8)
    if _INT16.match(text):
        return int(text[2:], 16)
    if _FLOAT.match(text):
        return float(text)
    m = _INF.match(text)
    if m:
        return float(m.group(1) + "inf")
    if _NAN.match(text):
        return float("nan")
    return text


def _tag_name(tag: Any) -> str | None:
    if tag is None:
        return None
    tag = getattr(tag, "value", tag)  # ruamel >= 0.18 wraps tags in a Tag object
    return None if tag is None else str(tag)


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_STD):] if tag.startswith(_STD) else tag


# --- the composer -------------------------------------------------------------------------

@dataclass
class _Anchor:
    path: DataPath
    value: Any
    size: int = 1      # nodes the value expands to
    height: int = 0    # nesting levels of the value
    done: bool = False


@dataclass
class _Frame:
    path: DataPath
    value: dict | list
    anchor: str | None
    record: bool  # False inside a dropped duplicate value: positions are not kept
    size: int = 1
    height: int = 1
    key: Any = None          # the pending mapping key, _MERGE or _SKIP
    has_key: bool = False    # a key was read and its value is next
    merges: list = field(default_factory=list)   # (index in dict, [(mapping, source path)])


def _copy(value: Any) -> Any:
    # Aliased content is copied so that no two places of the result share a mutable object.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


class _Composer:
    def __init__(self, file: str):
        self.file = file
        self.smap = SourceMap(file)
        self.stack: list[_Frame] = []
        self.anchors: dict[str, _Anchor] = {}
        self.aliases = 0
        self.alias_nodes = 0
        self.root: Any = None
        self.documents = 0

    # errors -----------------------------------------------------------------------------

    def pos(self, mark: Any, offset: int = 0) -> Pos:
        if mark is None:
            return Pos(self.file, 1, 1)
        return Pos(self.file, mark.line + 1, mark.column + 1 + offset)

    def fail(self, message: str, mark: Any = None, pos: Pos | None = None) -> YamlError:
        return YamlError(Diagnostic("parse", message, pos=pos or self.pos(mark)))

    # driving ----------------------------------------------------------------------------

    def run(self, events: Iterator[Any]) -> Any:
        for e in events:
            if isinstance(e, ev.DocumentStartEvent):
                self.documents += 1
                if self.documents > 1:
                    raise self.fail("a spec file holds one YAML document; found a second "
                                    "`---`", e.start_mark)
            elif isinstance(e, ev.ScalarEvent):
                self.scalar(e)
            elif isinstance(e, (ev.MappingStartEvent, ev.SequenceStartEvent)):
                self.start(e)
            elif isinstance(e, (ev.MappingEndEvent, ev.SequenceEndEvent)):
                self.end()
            elif isinstance(e, ev.AliasEvent):
                self.alias(e)
        return self.root

    # where the next node goes -----------------------------------------------------------

    def slot(self) -> tuple[DataPath, bool, bool]:
        """(path, record, is_key) of the node about to be read."""
        if not self.stack:
            return (), True, False
        top = self.stack[-1]
        if isinstance(top.value, list):
            return top.path + (len(top.value),), top.record, False
        if not top.has_key:
            return top.path, top.record, True
        if top.key is _SKIP:
            return top.path + ("<duplicate>",), False, False
        if top.key is _MERGE:
            return top.path + ("<<",), top.record, False
        return top.path + (top.key,), top.record, False

    def place(self, value: Any, size: int, path: DataPath, link: DataPath | None = None,
              height: int = 0) -> None:
        """Attach a finished value to its parent."""
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        top.size += size
        top.height = max(top.height, height + 1)
        if isinstance(top.value, list):
            top.value.append(value)
            return
        key, top.key, top.has_key = top.key, None, False
        if key is _SKIP:
            return
        if key is _MERGE:
            self.merge(top, value, link or path)
            return
        top.value[key] = value

    def merge(self, top: _Frame, value: Any, source: DataPath) -> None:
        if isinstance(value, dict):
            sources = [(value, source)]
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
            sources = [(v, self.smap.links.get(source + (i,), source + (i,)))
                       for i, v in enumerate(value)]
        else:
            raise self.fail("a merge key `<<` takes a mapping or a list of mappings",
                            pos=self.smap.find(source))
        top.merges.append((len(top.value), sources))

    def check_depth(self, mark: Any) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels", mark)

    # nodes ------------------------------------------------------------------------------

    def scalar(self, e: Any) -> None:
        text = e.value
        if len(text) > MAX_SCALAR_CHARS:
            raise self.fail(f"a scalar of {len(text)} characters; the limit is "
                            f"{MAX_SCALAR_CHARS}", e.start_mark)
        try:
            value = self.scalar_value(e)
        except ValueError as exc:  # an integer past Python's digit limit
            raise self.fail(f"cannot read `{text[:40]}...`: {exc}", e.start_mark) from None
        path, record, is_key = self.slot()
        quoted = e.style in ("'", '"')
        pos = self.pos(e.start_mark, 1 if quoted else 0)
        if is_key:
            self.key(value, pos, plain_merge=(text == "<<" and e.style is None
                                              and _tag_name(e.tag) is None))
            if e.anchor:
                self.anchors[e.anchor] = _Anchor(path, value, 1, 0, True)
            return
        if record:
            self.smap.values[path] = pos
        if e.anchor:
            self.anchors[e.anchor] = _Anchor(path, value, 1, 0, True)
        self.place(value, 1, path)

    def scalar_value(self, e: Any) -> Any:
        tag = _tag_name(e.tag)
        text = e.value
        plain = e.implicit[0] if e.implicit else False
        if tag is None or tag == "!":
            # `!` is the non-specific tag: the scalar is a string.
            return resolve_plain(text) if plain and tag is None else text
        if not tag.startswith(_STD):
            raise self.fail(f"unsupported YAML tag `{_show_tag(tag)}`; spec files use no "
                            "tags", e.start_mark)
        kind = tag[len(_STD):]
        if kind == "str":
            return text
        resolved = resolve_plain(text)
        want = {"null": type(None), "bool": bool, "int": int, "float": (float, int)}.get(kind)
        if want is None:
            raise self.fail(f"unsupported YAML tag `!!{kind}`; spec files use no tags "
                            "(Python objects are never constructed)", e.start_mark)
        if not isinstance(resolved, want) or (kind == "int" and isinstance(resolved, bool)):
            raise self.fail(f"`!!{kind} {text}` is not a valid {kind}", e.start_mark)
        return float(resolved) if kind == "float" else resolved

    def key(self, value: Any, pos: Pos, plain_merge: bool) -> None:
        top = self.stack[-1]
        top.has_key = True
        if plain_merge:
            top.key = _MERGE
            return
        path = top.path + (value,)
        if value in top.value:
            if top.record:
                first = self.smap.keys.get(path)
                where = f"line {first.line}" if first else "earlier"
                self.smap.issues.append((path, Diagnostic(
                    "parse", f"duplicate key `{value}`: first at {where}, again at line "
                    f"{pos.line}; the first is kept", pos=pos)))
            top.key = _SKIP
            return
        top.key = value
        if top.record:
            self.smap.keys[path] = pos

    def start(self, e: Any) -> None:
        path, record, is_key = self.slot()
        if is_key:
            raise self.fail("a mapping key must be a scalar, not a mapping or a list",
                            e.start_mark)
        self.check_depth(e.start_mark)
        is_map = isinstance(e, ev.MappingStartEvent)
        tag = _tag_name(e.tag)
        if tag not in (None, "!", _STD + ("map" if is_map else "seq")):
            raise self.fail(f"unsupported YAML tag `{_show_tag(tag)}`; spec files use no "
                            "tags", e.start_mark)
        frame = _Frame(path, {} if is_map else [], e.anchor, record)
        if record:
            self.smap.values[path] = self.pos(e.start_mark)
            self.smap.containers.add(path)
        if e.anchor:
            self.anchors[e.anchor] = _Anchor(path, frame.value)
        self.stack.append(frame)

    def end(self) -> None:
        frame = self.stack.pop()
        if frame.merges:
            frame.value = self.apply_merges(frame)
        if frame.anchor and frame.anchor in self.anchors:
            a = self.anchors[frame.anchor]
            if a.path == frame.path and not a.done:
                a.value, a.size, a.height, a.done = frame.value, frame.size, frame.height, True
        self.place(frame.value, frame.size, frame.path, height=frame.height)

    def apply_merges(self, frame: _Frame) -> dict:
        # Explicit keys win over merged ones wherever they are written; merged keys land
        # where the `<<` entry was (so `inputs: {<<: *common, c: ...}` keeps order); earlier
        # merge sources win over later ones, as in YAML 1.1's merge type.
        explicit = list(frame.value.items())
        out: dict = {}
        start = 0
        for index, sources in frame.merges:
            out.update(explicit[start:index])
            start = index
            for mapping, source in sources:
                for k, v in mapping.items():
                    if k in frame.value or k in out:
                        continue
                    out[k] = _copy(v)
                    if frame.record:
                        self.smap.links[frame.path + (k,)] = self.smap.links.get(
                            source + (k,), source + (k,))
        out.update(explicit[start:])
        return out

    def alias(self, e: Any) -> None:
        name = e.anchor
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise self.fail(f"more than {MAX_ALIASES} aliases", e.start_mark)
        anchor = self.anchors.get(name)
        if anchor is None:
            raise self.fail(f"alias `*{name}` names no anchor defined before it", e.start_mark)
        if not anchor.done:
            raise self.fail(f"alias `*{name}` is used inside its own anchor `&{name}`",
                            e.start_mark)
        self.alias_nodes += anchor.size
        if self.alias_nodes > MAX_ALIAS_NODES:
            raise self.fail(f"aliases expand to more than {MAX_ALIAS_NODES} nodes",
                            e.start_mark)
        if len(self.stack) + anchor.height > MAX_DEPTH:
            # Aliases nest their content: bound the depth of the result, not of the text.
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels (through `*{name}`)",
                            e.start_mark)
        path, record, is_key = self.slot()
        if is_key:
            if isinstance(anchor.value, (dict, list)):
                raise self.fail("a mapping key must be a scalar, not a mapping or a list",
                                e.start_mark)
            self.key(anchor.value, self.pos(e.start_mark), plain_merge=False)
            return
        if record:
            self.smap.values[path] = self.pos(e.start_mark)
            if isinstance(anchor.value, (dict, list)):
                self.smap.links[path] = self.smap.links.get(anchor.path, anchor.path)
        self.place(_copy(anchor.value), anchor.size, path,
                   link=self.smap.links.get(anchor.path, anchor.path), height=anchor.height)


def load_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    """Read one YAML document into plain data and its `SourceMap`.

    Raises `YamlError` (check `parse`) when the text cannot be read safely; recoverable
    problems (duplicate keys) are in the returned map's `issues`.
    """
    size = len(text) if len(text) * 4 <= MAX_FILE_BYTES else len(text.encode("utf-8", "replace"))
    if size > MAX_FILE_BYTES:
        raise YamlError(Diagnostic("parse", f"file of {size} bytes; the limit is "
                                            f"{MAX_FILE_BYTES} bytes", pos=Pos(file, 1, 1)))
    composer = _Composer(file)
    try:
        root = composer.run(YAML(typ="safe", pure=True).parse(text))
    except YamlError:
        raise
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise composer.fail(f"invalid YAML: {what}", mark) from None
    except RuamelError as exc:
        raise composer.fail(f"invalid YAML: {exc}") from None
    except RecursionError:
        raise composer.fail(f"nesting deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError) as exc:  # e.g. an integer too long to convert
        raise composer.fail(f"invalid YAML: {exc}") from None
    return root, composer.smap
