"""What a model says about its CRD schema beyond what pydantic validates: the markers `openapi.py` reads.

The models are the only hand-written form of the CRDs' shape. Types, enums, defaults and bounds come from the
fields themselves; the few things pydantic has no word for are said next to the field, in `Annotated[...]`:

    replaced_at: Annotated[str, Schema(format="date-time")]      # extra OpenAPI keywords, as written
    token_ref: Annotated[LocalRef, Unlisted()]                   # required, but said by a CEL rule's message
    description: Annotated[str, NoDefault()] = ""                # the API server writes no default
    min_available: Annotated[Budget | None, Rule("...", "...")]  # a CEL rule on this field's node

and a model's own CEL rules (on its object node) in a `crd_rules` class variable. None of these changes what the
model accepts: the model still checks everything itself, so the operator trusts only what it validated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One CEL rule the API server enforces (`x-kubernetes-validations`); the model checks the same in Python."""

    rule: str
    message: str

    def as_schema(self) -> dict[str, str]:
        return {"rule": " ".join(self.rule.split()), "message": self.message}


@dataclass(frozen=True, init=False, eq=False)  # hashed by identity: typing hashes Annotated metadata
class Schema:
    """OpenAPI keywords written into this field's node as given (a format, an `x-kubernetes-*` marker).

    Python names take underscores for dashes: `Schema(x_kubernetes_list_type="map")`."""

    keywords: dict[str, Any]

    def __init__(self, **keywords: Any) -> None:
        # A frozen dataclass is set through object's own __setattr__, once, here.
        object.__setattr__(self, "keywords", {k.replace("_", "-"): v for k, v in keywords.items()})


@dataclass(frozen=True)
class Unlisted:
    """A field the model requires that the CRD does not list in `required`: a CEL rule says why it is needed (in
    words a user reads), or it is a status field the operator always writes and the API server need not insist on
    (a partial status patch, kopf's own included, must not be refused)."""


@dataclass(frozen=True)
class NoDefault:
    """The model's default is not written into the CRD: the API server stores nothing for an unset field, so an
    object reads back as it was written (and an upgrade of the CRD changes no stored object)."""
