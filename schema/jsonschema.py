"""JSON Schemas (draft 2020-12) of the spec files, generated from the pydantic models.

Editors use them for completion and early errors; `opspec schema` prints them. They
describe the YAML as written, which differs from the models in two places that the
loader bridges: a workload row's parameter and index values sit at the row's top level
(the model gathers them into `values`), and `let` values and roofline formulas may be
written as bare integers.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from .models import OpSpec, TypesFile

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"

# Descriptions of the models that have no docstring of their own.
_DESCRIPTIONS = {
    "OpSpec": "One op's spec: its polymorphic signature, workload rows and cost model.",
    "Signature": "The op's function type: indices, parameters, tensors, type families, lets, "
                 "refinements and accepted dtype combinations.",
    "TypeFamily": "A type family: a shape term chosen by matching discriminant values.",
    "FamilyCase": "One case of a type family: the discriminant value(s) and the shape term.",
    "Roofline": "The cost model: inline `flops` and `bytes` formulas, or a `func`.",
    "Composition": "A composite op: the ordered stages it delegates to.",
    "Stage": "One stage of a composite op: another op or a kernel.",
    "TypesFile": "Shared ADTs, and the package prefixes whose Python classes specs may name.",
    "ADTDef": "An algebraic data type: a tagged sum of constructors.",
    "Constructor": "One constructor of an ADT: its Python class, fields and invariant.",
    "ADTField": "An enum field of an ADT constructor: its type and Python enum class.",
}


def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s schema with itself moved into `$defs`, automatic field titles dropped and
    descriptions filled in."""
    schema = copy.deepcopy(model.model_json_schema(mode="validation"))
    defs = schema.pop("$defs", {})
    defs[model.__name__] = schema
    for name, d in defs.items():
        d.setdefault("description", _DESCRIPTIONS.get(name, ""))
        if not d["description"]:
            del d["description"]
        for prop in d.get("properties", {}).values():
            prop.pop("title", None)
    return defs


def _allow_integer(prop: dict[str, Any]) -> None:
    options = prop.pop("anyOf", None) or [{"type": prop.pop("type")}]
    prop["anyOf"] = [{"type": "integer"}] + options


def spec_file_json_schema() -> dict[str, Any]:
    """The JSON Schema of a family file: a non-empty mapping of op names to specs."""
    defs = _model_schema(OpSpec)
    row = defs["WorkloadRow"]
    row["properties"].pop("values", None)
    row["additionalProperties"] = {
        "description": "a construction parameter or an index of the spec, and its value"}
    row["propertyNames"] = {"pattern": _IDENT}
    for key in ("flops", "bytes"):
        _allow_integer(defs["Roofline"]["properties"][key])
    _allow_integer(defs["Signature"]["properties"]["let"]["additionalProperties"])
    return {
        "$schema": DRAFT,
        "title": "opspec family file",
        "description": "A family file (`<family>.yaml` or `<family>_<shard>.yaml`) maps each "
                       "op's class name to its spec; every spec's `family` names the file's "
                       "family.",
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": _IDENT},
        "additionalProperties": {"$ref": "#/$defs/OpSpec"},
        "$defs": defs,
    }


def types_file_json_schema() -> dict[str, Any]:
    """The JSON Schema of `types.yaml`."""
    defs = _model_schema(TypesFile)
    root = defs.pop("TypesFile")
    root.pop("title", None)
    root["properties"]["adts"]["propertyNames"] = {"pattern": _IDENT}
    return {"$schema": DRAFT, "title": "opspec types file", **root, "$defs": defs}
