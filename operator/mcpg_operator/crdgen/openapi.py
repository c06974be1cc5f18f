"""A model's structural OpenAPI v3 schema, as a CRD version's `openAPIV3Schema` holds it. Pure.

The models are the only hand-written form of the CRDs' shape: `hack/reference.py` writes crds/ from this. Each
field gives its node's type (through `X | None`, `list`, `dict`, `Literal`, nested models), its bounds and
pattern (pydantic's own constraints, so a number is written once, in the field), its default, its description
(the field's docstring, or the gateway contract's through `mirrored`) and the markers of `schema_markers`.
What comes out is *structural*, as the API server requires of a CRD: every node has a type (but int-or-string
and preserved fields), no `$ref`, and no `additionalProperties` beside `properties`.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from mcpg_operator import schema_markers as sm

# The order a node's keywords are written in: what it is, its bounds, its text, then what is below it.
ORDER = (
    "type", "format", "anyOf", "x-kubernetes-int-or-string", "enum", "minimum", "exclusiveMinimum", "maximum",
    "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
    "pattern", "default", "description", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "required", "properties", "items", "additionalProperties",
    "x-kubernetes-validations",
)  # fmt: skip
_SCALARS: dict[Any, str] = {str: "string", int: "integer", bool: "boolean", float: "number"}
_SIZES = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems")}
_SIZES["object"] = ("minProperties", "maxProperties")


class Undocumented(Exception):
    """Model fields (or models) without a description, or of a type no CRD can hold; each names its path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the models cannot make the CRDs:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems


def object_schema(model: type[BaseModel], path: str, problems: list[str]) -> dict[str, Any]:
    """`model` as an object node: its fields as properties, its required ones, its own CEL rules."""
    properties = {}
    for name, field in model.model_fields.items():
        alias = field.alias or name
        properties[alias] = field_schema(field, f"{path}.{alias}", problems)
    required = [alias for alias, f in _by_alias(model).items() if f.is_required() and not _has(f, sm.Unlisted)]
    node: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        node["required"] = required
    rules: tuple[sm.Rule, ...] = model.__dict__.get("crd_rules", ())
    if rules:
        node["x-kubernetes-validations"] = [r.as_schema() for r in rules]
    return ordered(node)


def description(model: type[BaseModel]) -> str | None:
    """A model's own docstring (not an inherited one), as one line."""
    doc = model.__dict__.get("__doc__")
    return " ".join(inspect.cleandoc(doc).split()) if doc else None


def field_schema(field: FieldInfo, path: str, problems: list[str]) -> dict[str, Any]:
    """One field's node: its type's, with the field's own constraints, markers, default and description."""
    node = _apply(type_schema(field.annotation, path, problems), field.metadata)
    default = _default(field)
    if default is not None:
        node["default"] = default
    if field.description:
        node["description"] = " ".join(field.description.split())
    else:
        problems.append(f"{path}: no description (give the field a docstring)")
    return ordered(node)


def type_schema(annotation: Any, path: str, problems: list[str]) -> dict[str, Any]:
    """The node for a type: through Annotated, `X | None`, Literal, list, dict, int-or-string and models."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _apply(type_schema(args[0], path, problems), args[1:])
    if origin in (typing.Union, types.UnionType):
        return _union([a for a in args if a is not type(None)], path, problems)
    if origin is typing.Literal:
        return {"type": _SCALARS[type(args[0])], "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], f"{path}[]", problems)}
    if origin is dict:
        return _map(args[1], path, problems)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return object_schema(annotation, path, problems)
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    problems.append(f"{path}: no CRD type for {annotation!r}")
    return {}


def _union(members: list[Any], path: str, problems: list[str]) -> dict[str, Any]:
    if len(members) == 1:
        return type_schema(members[0], path, problems)
    if set(members) == {int, str}:  # what Kubernetes calls IntOrString (a count or a percentage, a quantity)
        return {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    problems.append(f"{path}: a union a CRD cannot hold ({members!r})")
    return {}


def _map(value: Any, path: str, problems: list[str]) -> dict[str, Any]:
    if value is Any:  # free-form: the API server keeps what it is given (a plugin's config, a peer)
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"type": "object", "additionalProperties": type_schema(value, f"{path}{{}}", problems)}


def _apply(node: dict[str, Any], metadata: typing.Iterable[Any]) -> dict[str, Any]:
    """`node` with the constraints and markers of an Annotated type or a field laid on it."""
    for item in metadata:
        if isinstance(item, sm.Schema):
            node.update(item.keywords)
        elif isinstance(item, sm.Rule):
            node.setdefault("x-kubernetes-validations", []).append(item.as_schema())
        elif isinstance(item, FieldInfo):  # `Annotated[int, Field(ge=100)]` inside a list
            _apply(node, item.metadata)
        else:
            node.update(_bound(item, node.get("type")))
    return node


def _bound(item: Any, kind: str | None) -> dict[str, Any]:
    """pydantic's constraint `item` as OpenAPI keywords; an integer's exclusive bound as the inclusive one."""
    low, high = _SIZES.get(kind or "", ("", ""))
    whole = kind == "integer"
    if isinstance(item, at.Gt):
        low_value: Any = item.gt  # a number: pydantic types it as anything comparable
        return {"minimum": low_value + 1} if whole else {"minimum": low_value, "exclusiveMinimum": True}
    if isinstance(item, at.Lt):
        high_value: Any = item.lt
        return {"maximum": high_value - 1} if whole else {"maximum": high_value, "exclusiveMaximum": True}
    simple = {at.Ge: ("minimum", "ge"), at.Le: ("maximum", "le"), at.MinLen: (low, "min_length")}
    simple[at.MaxLen] = (high, "max_length")
    for kind_of, (keyword, attribute) in simple.items():
        if isinstance(item, kind_of):
            return {keyword: getattr(item, attribute)} if keyword else {}
    pattern = getattr(item, "pattern", None)  # pydantic's general metadata (`Field(pattern=...)`)
    return {"pattern": pattern} if isinstance(pattern, str) else {}


def _default(field: FieldInfo) -> Any:
    """The default the API server writes for an unset field: a plain value the model declares (not a factory's,
    not None), unless the field says NoDefault."""
    value = field.default
    if value is PydanticUndefined or value is None or _has(field, sm.NoDefault):
        return None
    return value


def _has(field: FieldInfo, marker: type) -> bool:
    return any(isinstance(item, marker) for item in field.metadata)


def _by_alias(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {field.alias or name: field for name, field in model.model_fields.items()}


def ordered(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with its keywords in the order of ORDER (a reader meets the type first, what is below it last)."""
    rank = {key: i for i, key in enumerate(ORDER)}
    return dict(sorted(node.items(), key=lambda kv: rank.get(kv[0], len(ORDER))))
