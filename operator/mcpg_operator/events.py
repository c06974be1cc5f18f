"""The Kubernetes Events users see in `kubectl describe`, decided from transitions only. Pure.

Each function compares the state as read with the state decided in this pass, so a pass that changes nothing
posts nothing, and a restarted operator does not repeat an Event for a transition it already reported.
Tokens appear only as short digests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcpg_operator import conditions as c
from mcpg_operator import observed, render, rotation

COMPONENT = "mcpg-operator"


@dataclass(frozen=True, slots=True)
class Event:
    about: observed.Identity
    type: str
    """Normal or Warning."""
    reason: str
    message: str


def promotion(about: observed.Identity, before: rotation.TokenState, edit: rotation.Edit) -> list[Event]:
    """A Secret edit promoted a new token (and perhaps dropped replaced ones before their retirement)."""
    out = []
    if edit.state.current != before.current and before.current is not None:
        new, old = render.token_digest(edit.state.current or ""), render.token_digest(before.current)
        msg = f"new token {new} promoted; {old} stays valid until the rollout carrying {new} completes"
        out.append(Event(about, "Normal", "TokenPromoted", msg))
    if edit.dropped:
        msg = (
            f"{edit.dropped} replaced token(s) dropped before retirement: more than "
            f"{rotation.MAX_RETIRING} edits while the gateway was rolling out"
        )
        out.append(Event(about, "Warning", "TooManyRetiringTokens", msg))
    return out


def token_transitions(about: observed.Identity, before: rotation.TokenState, after: rotation.TokenState) -> list[Event]:
    """The current token became accepted everywhere; replaced tokens were retired."""
    out = []
    if after.current_accepted_at is not None and before.current_accepted_at is None and after.current:
        msg = f"every gateway pod accepts token {render.token_digest(after.current)}"
        out.append(Event(about, "Normal", "TokenAccepted", msg))
    gone = {r.token for r in before.retiring} - {r.token for r in after.retiring} - {after.current}
    for token in sorted(gone):
        msg = f"token {render.token_digest(token)} retired; the gateway rolls out without it"
        out.append(Event(about, "Normal", "TokenRetired", msg))
    return out


def watch_transition(rw: observed.Watch, verdict: render.Verdict) -> list[Event]:
    """A watch left out of the gateway, for a reason its Ready condition did not already show."""
    ready: dict[str, Any] = next((x for x in rw.status.get("conditions", []) if x.get("type") == c.READY), {})
    if verdict.served or ready.get("reason") == verdict.reason:
        return []
    return [Event(rw.id, "Warning", verdict.reason, verdict.message)]


def body(namespace: str, event: Event, now: float) -> dict[str, Any]:
    """The core/v1 Event object to create for `event`."""
    about, stamp = event.about, c.now_iso(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{about.name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": about.api_version,
            "kind": about.kind,
            "name": about.name,
            "namespace": namespace,
            "uid": about.uid,
        },
        "reason": event.reason,
        "message": event.message[:1024],
        "type": event.type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
