"""The token rotation state machine: pure functions over one WebhookToken's state.

The invariant it keeps: a replaced token stays in `retiring` (and so in the gateway's `previous_tokens`) until
every counted gateway pod has acknowledged a configuration carrying its replacement, plus the grace period. Only
then is it retired: left out of the configuration, which every pod applies in place, and kept here (`retired_at`)
until every counted pod serves a configuration without it, when it is forgotten. Acceptance is recorded once
(`current_accepted_at`) and holds: configurations only move forward, each one after it carries the current token
until that is replaced, and a new pod is Ready only once it has read the newest. So until its retirement every
counted pod accepts the old token, and from the acceptance of its replacement on, every counted pod accepts that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

MAX_RETIRING = 8
"""Edits in a row keep every not-yet-retired token, up to this many. Beyond it the oldest token that no counted
pod is known to accept is dropped (and reported): one a counted pod serves (`pinned`), or one every pod accepted
before it was replaced (`Retiring.was_accepted`), is never dropped for the cap."""


@dataclass(frozen=True, slots=True)
class Retiring:
    token: str
    replaced_at: float
    accepted_at: float | None = None
    """When every counted pod acknowledged a configuration carrying the replacement; the grace period counts from
    here."""
    retired_at: float | None = None
    """When it was left out of the configuration; set, it is only waiting for every pod to drop it too."""
    was_accepted: bool = False
    """It was accepted by every counted pod before it was replaced: a pod may serve nothing newer yet."""


@dataclass(frozen=True, slots=True)
class TokenState:
    current: str | None = None
    current_accepted_at: float | None = None
    """When every counted pod first served a configuration carrying `current` (held until `current` changes)."""
    retiring: tuple[Retiring, ...] = field(default_factory=tuple)

    def tokens(self) -> list[str]:
        """Every token the gateway must accept now, current first."""
        return ([self.current] if self.current else []) + [r.token for r in self.retiring if r.retired_at is None]


@dataclass(frozen=True, slots=True)
class Edit:
    state: TokenState
    dropped: int = 0
    """Retiring tokens dropped early because more than MAX_RETIRING edits piled up."""
    revoked: int = 0
    """Tokens dropped at once because the Secret no longer holds a token (see `revoke`)."""


def observe_secret(state: TokenState, value: str | None, now: float, pinned: frozenset[str] = frozenset()) -> Edit:
    """The Secret now holds `value`. A new value is promoted; the old current starts retiring.

    `pinned`: the tokens some counted pod serves now. They are never dropped to keep within MAX_RETIRING.
    No value (the Secret or its key is gone) is a revocation: see `revoke`.
    """
    if not value:
        return revoke(state)
    if value == state.current:
        return Edit(state)
    if state.current is None:
        return Edit(TokenState(current=value))
    # Reverting to a token that is still retiring promotes it again rather than listing it twice.
    kept = [r for r in state.retiring if r.token != value]
    replaced = Retiring(state.current, now, was_accepted=state.current_accepted_at is not None)
    retiring, dropped = _within_cap([*kept, replaced], pinned)
    return Edit(TokenState(current=value, retiring=retiring), dropped)


def revoke(state: TokenState) -> Edit:
    """Someone deleted the token's Secret (or its key): no token of it is accepted once the pods apply that.

    Deleting a Secret is how a leaked token is revoked, so nothing is kept retiring: rotation (a new value in
    the same Secret) is the way to replace a token without refusing anyone.
    """
    if not state.current and not state.retiring:
        return Edit(state)
    return Edit(TokenState(), revoked=len(state.tokens()))


def _within_cap(retiring: list[Retiring], pinned: frozenset[str]) -> tuple[tuple[Retiring, ...], int]:
    """Drop the oldest retiring tokens no counted pod is known to accept until at most MAX_RETIRING remain in the
    configuration (retired ones are in it no more, and are kept until the pods have dropped them)."""
    excess = sum(r.retired_at is None for r in retiring) - MAX_RETIRING
    out = []
    for r in retiring:  # oldest first
        if excess > 0 and r.retired_at is None and not r.was_accepted and r.token not in pinned:
            excess -= 1
            continue
        out.append(r)
    return tuple(out), len(retiring) - len(out)


def observe_acknowledgement(state: TokenState, acknowledged: bool, now: float) -> TokenState:
    """`acknowledged`: every counted pod (at least one) serves a configuration carrying `current` for every watch
    that uses it. Recorded once: a later pass that finds it so again changes nothing.

    Without a current token there is nothing to accept (and nothing retiring), so nothing changes.
    """
    if not acknowledged or state.current is None:
        return state
    return replace(state, current_accepted_at=state.current_accepted_at or now, retiring=_accepted(state, now))


def release(state: TokenState, now: float) -> TokenState:
    """No rendered configuration carries the current token (no served watch uses it), so no pod can accept it.

    Its replaced tokens wait for no acknowledgement (just the grace period), and the current one is accepted
    nowhere.
    """
    return replace(state, current_accepted_at=None, retiring=_accepted(state, now))


def _accepted(state: TokenState, now: float) -> tuple[Retiring, ...]:
    return tuple(r if r.accepted_at is not None else replace(r, accepted_at=now) for r in state.retiring)


def retire_due(state: TokenState, grace_s: float, now: float) -> TokenState:
    """Retire the tokens whose replacement has been accepted for at least the grace period: leave them out of
    the configuration, and keep them until the pods have dropped them (`forget_dropped`)."""
    out = tuple(replace(r, retired_at=now) if _due(r, grace_s, now) else r for r in state.retiring)
    return state if out == state.retiring else replace(state, retiring=out)


def _due(r: Retiring, grace_s: float, now: float) -> bool:
    return r.retired_at is None and r.accepted_at is not None and r.accepted_at + grace_s <= now


def forget_dropped(state: TokenState, dropped: Callable[[str], bool]) -> TokenState:
    """Forget the retired tokens no counted pod accepts any more (`dropped`): they are retired everywhere."""
    kept = tuple(r for r in state.retiring if r.retired_at is None or not dropped(r.token))
    return state if kept == state.retiring else replace(state, retiring=kept)


def retired(state: TokenState) -> list[str]:
    """The tokens left out of the configuration that some pod may still accept."""
    return [r.token for r in state.retiring if r.retired_at is not None]


def next_retirement(state: TokenState, grace_s: float) -> float | None:
    """When the next retiring token becomes due, if any is waiting on its grace period."""
    due = [r.accepted_at + grace_s for r in state.retiring if r.accepted_at is not None and r.retired_at is None]
    return min(due) if due else None


def to_json(state: TokenState) -> dict[str, Any]:
    return {
        "current": state.current,
        "currentAcceptedAt": state.current_accepted_at,
        "retiring": [
            {
                "token": r.token,
                "replacedAt": r.replaced_at,
                "acceptedAt": r.accepted_at,
                "retiredAt": r.retired_at,
                "wasAccepted": r.was_accepted,
            }
            for r in state.retiring
        ],
    }


def from_json(data: dict[str, Any]) -> TokenState:
    """A state as `to_json` wrote it, or as an operator before in-place configuration did (`rolledOutAt`: when the
    rollout carrying the replacement completed, which is when every pod accepted it)."""
    return TokenState(
        current=data.get("current"),
        current_accepted_at=data.get("currentAcceptedAt"),
        retiring=tuple(
            Retiring(
                r["token"], float(r["replacedAt"]), _accepted_at(r), r.get("retiredAt"), bool(r.get("wasAccepted"))
            )
            for r in data.get("retiring", [])
        ),
    )


def _accepted_at(r: dict[str, Any]) -> float | None:
    found = r.get("acceptedAt", r.get("rolledOutAt"))
    return None if found is None else float(found)
