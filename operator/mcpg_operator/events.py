"""The Kubernetes Events users see in `kubectl describe`, decided from transitions only. Pure.

Each function compares what was read with what this pass decided, so a pass that changes nothing posts
nothing, and a restarted operator does not repeat an Event for a transition it already reported. An Event's
name is derived from the object's resourceVersion as read and what the Event says, so two passes (or two
operators) deciding the same transition from the same read create one Event: the second create is refused
as a duplicate. Tokens appear only as short digests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from mcpg_operator import conditions as c
from mcpg_operator import observed, render, rotation

COMPONENT = "mcpg-operator"
NORMAL_REASONS = frozenset({c.SERVED, c.ROLLING_OUT, c.TOKEN_ROLLED_OUT, c.TOKEN_ROTATING, c.RETIRING_OLD_TOKENS})
"""Ready reasons on the way to working: reaching one is not worth a Warning."""


@dataclass(frozen=True, slots=True)
class Event:
    about: observed.Identity
    type: str
    """Normal or Warning."""
    reason: str
    message: str


def promotion(about: observed.Identity, before: rotation.TokenState, edit: rotation.Edit) -> list[Event]:
    """A Secret edit promoted a new token, dropped replaced ones before their retirement, or revoked them all."""
    out = []
    if edit.state.current != before.current and before.current is not None and edit.state.current is not None:
        new, old = render.token_digest(edit.state.current), render.token_digest(before.current)
        msg = f"new token {new} promoted; {old} stays valid until every gateway pod has acknowledged {new}"
        out.append(Event(about, "Normal", "TokenPromoted", msg))
    if edit.dropped:
        msg = (
            f"{edit.dropped} replaced token(s) dropped before retirement: more than "
            f"{rotation.MAX_RETIRING} edits before the gateway pods acknowledged them (one a pod may accept is kept)"
        )
        out.append(Event(about, "Warning", "TooManyRetiringTokens", msg))
    if edit.revoked:
        digests = ", ".join(render.token_digest(t) for t in before.tokens())
        msg = f"its Secret no longer holds a token: {digests} revoked; each gateway pod refuses them once it knows"
        out.append(Event(about, "Warning", c.TOKEN_REVOKED, msg))
    return out


def state_lost(about: observed.Identity, secret: str, recovered: rotation.TokenState) -> list[Event]:
    kept = ", ".join(render.token_digest(r.token) for r in recovered.retiring) or "none"
    msg = (
        f"rotation state Secret {secret} was missing while the gateway configuration carries this token; rebuilt it "
        f"from that configuration: replaced token(s) kept until every gateway pod acknowledges the current one: {kept}"
    )
    return [Event(about, "Warning", "RotationStateLost", msg)]


def token_transitions(
    about: observed.Identity, before: dict[str, Any], after: dict[str, Any], detail: str = ""
) -> list[Event]:
    """The current token became accepted by every counted pod, or the token went wrong (`detail`: what the Event
    says beyond the Ready message, `statuses.token_detail`)."""
    accepted = _condition(after, c.TOKEN_ACCEPTED)
    out = []
    if accepted.get("status") == "True" and _condition(before, c.TOKEN_ACCEPTED).get("status") != "True":
        out.append(Event(about, "Normal", "TokenAccepted", str(accepted.get("message", ""))))
    return out + _warning(about, before, after, detail)


def retirements(about: observed.Identity, before: rotation.TokenState, after: rotation.TokenState) -> list[Event]:
    """Replaced tokens retired this pass: their replacement was accepted, the grace period passed, and every counted
    gateway pod serves a configuration without them."""
    gone = {r.token for r in before.retiring} - {r.token for r in after.retiring} - {after.current}
    message = "token {} retired: every gateway pod serves a configuration without it"
    return [Event(about, "Normal", "TokenRetired", message.format(render.token_digest(t))) for t in sorted(gone)]


def watch_transition(
    about: observed.Identity, before: dict[str, Any], after: dict[str, Any], detail: str = ""
) -> list[Event]:
    """A watch became served (every counted pod serves its entry), or was left out of the gateway or stuck for a
    reason its Ready condition did not already show; or MCP clients lost (or gained) a principal to use it with.
    `detail`: what the Event says beyond the Ready message (every problem, every pod: `statuses.watch_detail`)."""
    out = []
    ready = _condition(after, c.READY)
    if ready.get("status") == "True" and _condition(before, c.READY).get("status") != "True":
        where = (after.get("gateway") or {}).get("url", "the gateway")
        message = f"served at {where} as {after.get('uri')}: every gateway pod serves it"
        out.append(Event(about, "Normal", c.SERVED, message))
    clients, clients_before = _condition(after, c.CLIENTS_AUTHORIZED), _condition(before, c.CLIENTS_AUTHORIZED)
    if clients.get("status") == "False" and clients_before.get("status") != "False":
        out.append(Event(about, "Warning", c.NO_PRINCIPALS, str(clients.get("message", ""))))
    return out + _warning(about, before, after, detail)


def apply_failed(about: observed.Identity, message: str) -> list[Event]:
    return [Event(about, "Warning", c.APPLY_FAILED, message)]


def refused(about: observed.Identity, why: str) -> list[Event]:
    """The API server refused to create a WebhookToken's generated Secret: `why`, its whole message."""
    return [Event(about, "Warning", c.SECRET_REFUSED, f"the API server refused to create its Secret: {why}")]


def _warning(about: observed.Identity, before: dict[str, Any], after: dict[str, Any], detail: str) -> list[Event]:
    """A Warning when Ready turns to a new failing reason: `detail` when there is one (the condition's message
    names the first problem; the Event, every one), else the condition's message."""
    ready = _condition(after, c.READY)
    reason = ready.get("reason")
    if ready.get("status") == "True" or reason in NORMAL_REASONS or reason == _condition(before, c.READY).get("reason"):
        return []
    return [Event(about, "Warning", str(reason), detail or str(ready.get("message", "")))]


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next((x for x in status.get("conditions", []) if x.get("type") == type_), {})
    return found


def body(namespace: str, event: Event, now: float) -> dict[str, Any]:
    """The core/v1 Event object to create for `event`."""
    about, stamp = event.about, c.now_iso(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name(event), "namespace": namespace},
        "involvedObject": {
            "apiVersion": about.api_version,
            "kind": about.kind,
            "name": about.name,
            "namespace": namespace,
            "uid": about.uid,
        },
        "reason": event.reason,
        "message": c.clamp_event(event.message),
        "type": event.type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def name(event: Event) -> str:
    """`<object>.<digest>`: the same transition decided from the same read has the same name."""
    about = event.about
    key = "\n".join((about.uid, about.resource_version, event.reason, event.message))
    return f"{about.name[:200]}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"
