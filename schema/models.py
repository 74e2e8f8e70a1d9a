"""Pydantic models of the spec format: one class per YAML mapping, unknown keys rejected.

Expressions, shape terms and dtype expressions are kept as the strings the author wrote;
`opspec.schema.parse` turns them into the closed AST and `opspec.schema.elaborate` checks
them. The JSON Schema that `opspec schema` prints is generated from these classes.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

Scalar = Union[bool, int, float, str, None]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ParamSpec(Model):
    """A construction parameter (`type`, `default`, `kw_only`) or a construction-time
    tensor (`dtype`, `shape`, `optional`, `device`). Whether `default` was written at all
    is `has_default` (a written `null` is a default of None)."""

    type: str | None = Field(None, description="Python-style type, e.g. `int | None`, `'none' | 'tanh'`")
    default: Any = Field(None, description="default value; omitted means the parameter is required")
    kw_only: bool = False
    dtype: str | None = Field(None, description="construction-time tensor: dtype expression")
    shape: str | None = Field(None, description="construction-time tensor: shape term")
    optional: bool | str = False
    device: Literal["cpu"] | None = None
    contiguous: bool = False

    @property
    def has_default(self) -> bool:
        return "default" in self.model_fields_set

    @property
    def is_tensor(self) -> bool:
        return self.dtype is not None or self.shape is not None

    @model_validator(mode="after")
    def _one_form(self) -> "ParamSpec":
        if self.is_tensor:
            if self.type is not None:
                raise ValueError("a parameter is either typed (`type`) or a construction-time "
                                 "tensor (`dtype` and `shape`), not both")
            if self.dtype is None or self.shape is None:
                raise ValueError("a construction-time tensor needs both `dtype` and `shape`")
            if self.has_default or self.kw_only:
                raise ValueError("a construction-time tensor takes no `default` or `kw_only`; "
                                 "use `optional`")
        else:
            if self.type is None:
                raise ValueError("a parameter needs a `type` (or `dtype` and `shape` for a "
                                 "construction-time tensor)")
            if self.optional is not False or self.device is not None or self.contiguous:
                raise ValueError("`optional`, `device` and `contiguous` are for tensors; a "
                                 "parameter expresses optionality with `default`")
        return self


class TensorSpec(Model):
    """An input or output tensor of the signature."""

    dtype: str = Field(description="dtype expression: a DType index, a dtype parameter, a "
                                   "constant or a dtype primitive")
    shape: str = Field(description="shape term, e.g. `[M, 2 * N]`, `[*S]`, `Mat[trans_a, M, K]`")
    optional: bool | str = Field(False, description="inputs: true, or a discriminant expression")
    nullable: bool | str = Field(False, description="outputs: discriminant expression; None when false")
    mutated: bool | str = Field(False, description="inputs: true or a discriminant expression")
    write_only: bool = False
    buffer: Literal["out"] | None = None
    alias: str | None = None
    contiguous: bool = False
    device: Literal["cpu"] | None = None
    values: str | None = Field(None, description="generator of a metadata tensor's contents")
    requires: list[str] = Field(default_factory=list)


class FamilyCase(Model):
    when: Any = Field(description="a value of the match discriminant(s); a list for a tuple match")
    is_: str = Field(alias="is", description="the shape term of this case")


class TypeFamily(Model):
    params: dict[str, str]
    match: str | list[str]
    cases: list[FamilyCase] = Field(min_length=1)


class Signature(Model):
    types: dict[str, TypeFamily] = Field(default_factory=dict)
    forall: dict[str, str] = Field(default_factory=dict)
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    inputs: dict[str, TensorSpec] = Field(default_factory=dict)
    outputs: dict[str, TensorSpec] = Field(default_factory=dict)
    let: dict[str, str] = Field(default_factory=dict)
    shape_rules: list[str] = Field(default_factory=list)
    dtype_combos: list[dict[str, str]] = Field(default_factory=list)


class WorkloadRow(BaseModel):
    """One workload row: parameter and index values, `some`, `dtype_cases`, `label`.

    Keys other than the three reserved ones are parameter or index names; they land in
    `values` in the order written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    values: dict[str, Any] = Field(default_factory=dict)
    some: list[str] = Field(default_factory=list)
    dtype_cases: list[dict[str, str]] | None = None
    label: str

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "values" in data:
            return data
        reserved = {"some", "dtype_cases", "label"}
        out = {k: v for k, v in data.items() if k in reserved}
        out["values"] = {k: v for k, v in data.items() if k not in reserved}
        return out


class Roofline(Model):
    flops: str | None = None
    bytes: str | None = None
    func: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _numbers_as_text(cls, data: Any) -> Any:
        # `flops: 0` is as legal as `flops: "0"`.
        if isinstance(data, dict):
            return {k: (str(v) if isinstance(v, int) and not isinstance(v, bool) else v)
                    for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _one_form(self) -> "Roofline":
        if self.func is not None and (self.flops is not None or self.bytes is not None):
            raise ValueError("roofline is either `func` or inline `flops`/`bytes`, not both")
        if self.func is None and self.flops is None:
            raise ValueError("roofline needs `flops` (and optionally `bytes`) or `func`")
        return self


class Stage(Model):
    name: str
    op: str | None = None
    kernel: str | None = None
    optional: bool = False

    @model_validator(mode="after")
    def _one_target(self) -> "Stage":
        if (self.op is None) == (self.kernel is None):
            raise ValueError(f"stage {self.name!r} names exactly one of `op` or `kernel`")
        return self


class Composition(Model):
    kind: Literal["composite"]
    stages: list[Stage] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct_names(self) -> "Composition":
        # A stage name keys the sub-op a composite holds and its call in the record.
        seen: dict[str, int] = {}
        for i, st in enumerate(self.stages):
            if st.name in seen:
                raise ValueError(f"stages {seen[st.name]} and {i} are both named "
                                 f"`{st.name}`; each stage has its own name")
            seen[st.name] = i
        return self


class OpSpec(Model):
    """One op's spec: the value of a top-level key of a family file."""

    family: str
    status: Literal["implemented", "spec-only"]
    ref_api: str | None = None
    signature: Signature
    workloads: list[WorkloadRow] = Field(min_length=1)
    roofline: Roofline
    composition: Composition | None = None


class ADTField(Model):
    type: str
    python: str | None = None


class Constructor(Model):
    python: str | None = None
    fields: dict[str, Union[str, ADTField]] = Field(default_factory=dict)
    invariant: str | None = None


class ADTDef(Model):
    sum: dict[str, Constructor] = Field(min_length=1)


class TypesFile(Model):
    """`types.yaml`: shared ADTs, the package prefixes whose Python classes specs may name,
    and those under which the `code` check may import a spec's `ref_api` to see it exists."""

    adts: dict[str, ADTDef] = Field(default_factory=dict)
    python_prefixes: list[str] = Field(default_factory=list)
    ref_api_prefixes: list[str] = Field(default_factory=list)
