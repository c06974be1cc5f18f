"""Operator fields that are a gateway configuration field: one declaration takes the contract's field whole.

A ResourceWatch field such as `backend.http.timeoutMs` is the gateway's `HttpBackend.timeout_ms`, rendered as
is. Its description, default and bounds are the contract's, so `mirrored` builds the operator's pydantic Field
from the contract's: the CRD (`openapi.py`), the reference and the operator's own validation then carry the very
numbers the gateway checks, and changing one there changes all of them. What only the CRD bounds (a length the
API server stores at most) is added by the caller, by name, beside it.
"""

from __future__ import annotations

import inspect
from typing import Any

import annotated_types as at
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

# pydantic keeps a Field's bounds as these objects in `metadata`; each is passed on under its Field keyword.
_BOUNDS: dict[type, str] = {
    at.Gt: "gt",
    at.Ge: "ge",
    at.Lt: "lt",
    at.Le: "le",
    at.MinLen: "min_length",
    at.MaxLen: "max_length",
}


def described_as(model: type[BaseModel], field: str | None = None, *, then: str = "") -> str:
    """The gateway contract's description of `model.field` (of `model` itself without a field), then `then`.

    For a CRD field that is the same thing as a gateway configuration field: the text lives in the contract, once.
    """
    text = model.model_fields[field].description if field else inspect.getdoc(model)
    if not text:  # fails at import: a contract field lost the docstring this model shares
        raise LookupError(f"{model.__name__}.{field or ''} has no description to share")
    return " ".join(f"{text} {then}".split())


def mirrored(model: type[BaseModel], field: str, *, then: str = "", **overrides: Any) -> Any:
    """A Field with the description, default and bounds of the contract's `model.field`, then `overrides`.

    `then` is added to the description; `overrides` are Field keywords that replace or add to the contract's
    (`default=None`: unset here, the gateway's default applies; `max_length=`: a bound only the CRD has).
    """
    source = model.model_fields[field]
    keywords: dict[str, Any] = {"description": described_as(model, field, then=then)}
    keywords |= _default(source) if "default" not in overrides else {}
    keywords |= bounds(source)
    return Field(**keywords | overrides)


def bounds(source: FieldInfo) -> dict[str, Any]:
    """A field's bounds and pattern as Field keywords (`{"gt": 0, "le": 300000}`)."""
    out: dict[str, Any] = {}
    for item in source.metadata:
        keyword = next((k for kind, k in _BOUNDS.items() if isinstance(item, kind)), None)
        if keyword is not None:
            out[keyword] = getattr(item, keyword)
        elif isinstance(getattr(item, "pattern", None), str):  # pydantic's general metadata (`Field(pattern=)`)
            out["pattern"] = item.pattern
    return out


def _default(source: FieldInfo) -> dict[str, Any]:
    if source.default_factory is not None:
        return {"default_factory": source.default_factory}
    return {} if source.is_required() else {"default": source.default}
