"""The token rotation state machine: pure functions over one WebhookToken's state.

The invariant it keeps: a replaced token stays in `retiring` (and so in the gateway's `previous_tokens`) until a
rollout of a configuration that carries its replacement has completed on every pod, plus the grace period.
Only then is it dropped, which changes the configuration and rolls the gateway once more. Until that second
rollout, every available pod accepts the old token, so no sender holding it is ever refused mid-rotation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

MAX_RETIRING = 8
"""Edits in a row keep every not-yet-retired token, up to this many. Beyond it the oldest token that no available
pod accepts is dropped (and reported); a token an available pod accepts is never dropped for the cap."""


@dataclass(frozen=True, slots=True)
class Retiring:
    token: str
    replaced_at: float
    rolled_out_at: float | None = None
    """When a rollout carrying the replacement completed; the grace period counts from here."""


@dataclass(frozen=True, slots=True)
class TokenState:
    current: str | None = None
    current_accepted_at: float | None = None
    """When every pod started accepting `current` (the rollout carrying it completed)."""
    retiring: tuple[Retiring, ...] = field(default_factory=tuple)

    def tokens(self) -> list[str]:
        """Every token the gateway must accept now, current first."""
        return ([self.current] if self.current else []) + [r.token for r in self.retiring]


@dataclass(frozen=True, slots=True)
class Edit:
    state: TokenState
    dropped: int = 0
    """Retiring tokens dropped early because more than MAX_RETIRING edits piled up."""
    revoked: int = 0
    """Tokens dropped at once because the Secret no longer holds a token (see `revoke`)."""


def observe_secret(state: TokenState, value: str | None, now: float, pinned: frozenset[str] = frozenset()) -> Edit:
    """The Secret now holds `value`. A new value is promoted; the old current starts retiring.

    `pinned`: the tokens some available pod accepts now. They are never dropped to keep within MAX_RETIRING.
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
    retiring, dropped = _within_cap([*kept, Retiring(state.current, now)], pinned)
    return Edit(TokenState(current=value, retiring=retiring), dropped)


def revoke(state: TokenState) -> Edit:
    """Someone deleted the token's Secret (or its key): no token of it is accepted once the gateway rolls out.

    Deleting a Secret is how a leaked token is revoked, so nothing is kept retiring: rotation (a new value in
    the same Secret) is the way to replace a token without refusing anyone.
    """
    if not state.tokens():
        return Edit(state)
    return Edit(TokenState(), revoked=len(state.tokens()))


def _within_cap(retiring: list[Retiring], pinned: frozenset[str]) -> tuple[tuple[Retiring, ...], int]:
    """Drop the oldest retiring tokens no available pod accepts until at most MAX_RETIRING remain."""
    excess = len(retiring) - MAX_RETIRING
    out = []
    for r in retiring:  # oldest first
        if excess > 0 and r.token not in pinned:
            excess -= 1
            continue
        out.append(r)
    return tuple(out), len(retiring) - len(out)


def observe_rollout(state: TokenState, complete: bool, now: float) -> TokenState:
    """`complete`: every pod runs a configuration rendered from `state` (or no configuration needs it at all).

    Without a current token there is nothing to accept (and nothing retiring), so nothing changes.
    """
    if not complete or state.current is None:
        return state
    return replace(
        state,
        current_accepted_at=state.current_accepted_at or now,
        retiring=tuple(r if r.rolled_out_at is not None else replace(r, rolled_out_at=now) for r in state.retiring),
    )


def release(state: TokenState, now: float) -> TokenState:
    """No rendered configuration carries the current token (no served watch uses it), so no rollout can.

    Its replaced tokens wait for no rollout (just the grace period), and the current one is accepted nowhere.
    """
    return replace(
        state,
        current_accepted_at=None,
        retiring=tuple(r if r.rolled_out_at is not None else replace(r, rolled_out_at=now) for r in state.retiring),
    )


def retire_due(state: TokenState, grace_s: float, now: float) -> TokenState:
    """Drop retiring tokens whose replacement has been rolled out for at least the grace period."""
    kept = tuple(r for r in state.retiring if r.rolled_out_at is None or r.rolled_out_at + grace_s > now)
    return state if kept == state.retiring else replace(state, retiring=kept)


def next_retirement(state: TokenState, grace_s: float) -> float | None:
    """When the next retiring token becomes due, if any is waiting on its grace period."""
    due = [r.rolled_out_at + grace_s for r in state.retiring if r.rolled_out_at is not None]
    return min(due) if due else None


def drained(state: TokenState, drain_s: float, now: float) -> bool:
    """The rollout that made every available pod accept `current` completed at least `drain_s` ago.

    A pod the rollout replaced stops counting as available when it starts terminating, but it still answers what
    the proxies send it until its preStop pause ends: only after that are senders of `current` sure to reach a pod
    that accepts it.
    """
    return state.current_accepted_at is not None and now >= state.current_accepted_at + drain_s


def next_drained(state: TokenState, drain_s: float, now: float) -> float | None:
    """When `drained` turns true, if it is still to come."""
    if state.current_accepted_at is None or now >= state.current_accepted_at + drain_s:
        return None
    return state.current_accepted_at + drain_s


def to_json(state: TokenState) -> dict[str, Any]:
    return {
        "current": state.current,
        "currentAcceptedAt": state.current_accepted_at,
        "retiring": [
            {"token": r.token, "replacedAt": r.replaced_at, "rolledOutAt": r.rolled_out_at} for r in state.retiring
        ],
    }


def from_json(data: dict[str, Any]) -> TokenState:
    return TokenState(
        current=data.get("current"),
        current_accepted_at=data.get("currentAcceptedAt"),
        retiring=tuple(
            Retiring(r["token"], float(r["replacedAt"]), r.get("rolledOutAt")) for r in data.get("retiring", [])
        ),
    )
