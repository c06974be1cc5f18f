"""The writes a decision asks for, as values: what to create, apply, patch, delete or post, and at which stage.

The decision only describes writes; `reconcile.write.execute` performs them, stage by stage, in the order its
docstring explains. Each write names its target by collection and name in the reconciled namespace, never by a URL.
These values sit beside `observed`, below `reconcile/`, because the builders a decision asks (`statuses`,
`gateway_policy`) and the bus step (`bus_reconcile`) describe writes too: inside the package they would make a cycle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from mcpg_operator.observed import Identity


class Stage(enum.IntEnum):
    """When a write happens within a pass (see `write` for why in this order)."""

    TOKEN_SECRETS = 1
    ROTATION_STATE = 2
    GATEWAY = 3
    COLLECT = 4
    STATUS = 5
    EVENTS = 6


@dataclass(frozen=True, slots=True)
class Ref:
    """An object of the reconciled namespace: its collection (plural and API group; None is core) and name."""

    plural: str
    name: str
    group: str | None = None


@dataclass(frozen=True, slots=True)
class CreateObject:
    """Create `body`; if it already exists, leave it as it is."""

    stage: Stage
    ref: Ref
    body: dict[str, Any]
    about: Identity | None = None
    """The object this write is for: if the API server refuses the write, that object alone is reported."""


@dataclass(frozen=True, slots=True)
class ApplyObject:
    """Server-side apply `body` (the operator's field manager owns exactly the fields it sets)."""

    stage: Stage
    ref: Ref
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MergePatch:
    """JSON merge patch of the object (not its status)."""

    stage: Stage
    ref: Ref
    patch: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeleteObject:
    ref: Ref
    stage: ClassVar[Stage] = Stage.COLLECT


@dataclass(frozen=True, slots=True)
class MergePatchStatus:
    """Replace the fields of the status subresource that `status` names (a None value removes one)."""

    ref: Ref
    status: dict[str, Any]
    stage: ClassVar[Stage] = Stage.STATUS


@dataclass(frozen=True, slots=True)
class PostEvent:
    """Create a core/v1 Event (the body is complete, timestamps included)."""

    body: dict[str, Any]
    stage: ClassVar[Stage] = Stage.EVENTS


@dataclass(frozen=True, slots=True)
class Refusal:
    """The API server refused a write made for one object (`CreateObject.about`)."""

    about: Identity
    message: str
    """The API server's message."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A write for the namespace as a whole (its gateway's objects, a rotation state) failed: every ResourceWatch
    and WebhookToken of the namespace reports it, since none of them is served as decided until it succeeds."""

    message: str
    """What failed and the API server's own message (which names the object and the field), never a value."""
    permanent: bool
    """The API server refused the write (400, 403, 422): sending it again will not help until something changes."""
    brief: str = ""
    """The same for a status line, cause first ("" : `message` is brief enough as it is)."""


Write = CreateObject | ApplyObject | MergePatch | DeleteObject | MergePatchStatus | PostEvent


def in_order(writes: list[Write]) -> tuple[Write, ...]:
    """`writes` stage by stage; within a stage, in the order they were decided (a stable sort)."""
    return tuple(sorted(writes, key=lambda w: w.stage))
