"""Condition types and reasons (CamelCase constants), the one function that sets a condition, and message length.

A condition's message fits one row of `kubectl get` beside the name, reason and age columns: under 120
characters, cause first, then the user's next step. Every builder keeps its own text under that (`fit` elides a
name the user chose, which may be 253 characters); `set_condition` clamps once more only as a last resort. What
does not fit (each pod, each watch, a whole refusal) goes into the Event posted for the change, whose message is
bounded by `EVENT_MESSAGE_MAX`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

MESSAGE_MAX = 119
"""Characters a condition's message holds at most (under 120): one terminal row beside `kubectl get`'s columns."""
EVENT_MESSAGE_MAX = 1024
"""Bytes (UTF-8) an Event's message holds at most: the `note` limit of events.k8s.io/v1 (1 KiB). core/v1 documents
none, but the same Event is what `kubectl events` shows through events.k8s.io, so it is kept within it."""
ELLIPSIS = "…"

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
TOKEN_ACCEPTED = "TokenAccepted"
CLIENTS_AUTHORIZED = "ClientsAuthorized"
"""Some principal (a bearer token or anonymous access) may use the namespace's gateway."""

SERVED = "Served"
ROLLING_OUT = "RollingOut"
INVALID_SPEC = "InvalidSpec"
SECRET_NOT_FOUND = "SecretNotFound"
WEBHOOK_TOKEN_NOT_FOUND = "WebhookTokenNotFound"
TOKEN_PENDING = "TokenPending"
TOKEN_CONFLICT = "TokenConflict"
URI_CONFLICT = "UriConflict"
NAME_CONFLICT = "NameConflict"
CONFIG_TOO_LARGE = "ConfigTooLarge"
NOT_SERVED = "NotServed"
TOKEN_REVOKED = "TokenRevoked"
SECRET_REFUSED = "SecretRefused"
ROLLOUT_STALLED = "RolloutStalled"
CONFIG_REFUSED = "ConfigRefused"
"""A gateway pod refused the configuration (it keeps serving the one before): the problems name the fields."""
INVALID_AUTH = "InvalidAuthConfig"
TOKEN_ROLLED_OUT = "RolledOut"
TOKEN_ROTATING = "Rotating"
RETIRING_OLD_TOKENS = "RetiringOldTokens"
APPLY_FAILED = "ApplyFailed"
"""Writing one of the namespace's gateway objects failed: the API server's message says why."""
APPLIED = "Applied"
"""An McpGateway's settings are in the namespace's gateway objects."""
NO_PRINCIPALS = "NoPrincipals"
PRINCIPALS_DEFINED = "PrincipalsDefined"


def now_iso(ts: float) -> str:
    """`ts` (seconds since the epoch) as an RFC 3339 UTC timestamp, the form Kubernetes uses."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def set_condition(
    existing: list[dict[str, Any]], type_: str, status: bool, reason: str, message: str, generation: int, now: float
) -> list[dict[str, Any]]:
    """Return `existing` with `type_` set; lastTransitionTime moves (to `now`) only when the status does."""
    value = "True" if status else "False"
    old = next((cond for cond in existing if cond.get("type") == type_), None)
    changed = old is None or old.get("status") != value
    cond = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": clamp(message),
        "observedGeneration": generation,
        "lastTransitionTime": now_iso(now) if changed or old is None else old.get("lastTransitionTime", now_iso(now)),
    }
    return [*(x for x in existing if x.get("type") != type_), cond]


def set_stalled(
    existing: list[dict[str, Any]], stalled: bool, reason: str, message: str, generation: int, now: float
) -> list[dict[str, Any]]:
    """Stalled is present only while true (the kstatus convention): retrying will not help until the spec changes."""
    if stalled:
        return set_condition(existing, STALLED, True, reason, message, generation, now)
    return [x for x in existing if x.get("type") != STALLED]


def clamp(message: str, limit: int = MESSAGE_MAX) -> str:
    """`message` cut to `limit` characters, with an ellipsis when cut: a last resort, as builders fit their own."""
    return message if len(message) <= limit else message[: limit - len(ELLIPSIS)] + ELLIPSIS


def clamp_event(message: str) -> str:
    """`message` cut to `EVENT_MESSAGE_MAX` bytes of UTF-8, on a character boundary, with an ellipsis when cut."""
    raw = message.encode()
    if len(raw) <= EVENT_MESSAGE_MAX:
        return message
    kept = raw[: EVENT_MESSAGE_MAX - len(ELLIPSIS.encode())].decode(errors="ignore")
    return kept + ELLIPSIS


def short(name: str, limit: int) -> str:
    """`name` in at most `limit` characters: elided in the middle, where generated names differ least."""
    if len(name) <= limit:
        return name
    if limit <= len(ELLIPSIS):
        return ELLIPSIS[:limit]
    head = (limit - len(ELLIPSIS) + 1) // 2
    tail = limit - len(ELLIPSIS) - head
    return name[:head] + ELLIPSIS + (name[-tail:] if tail else "")


def fit(template: str, limit: int = MESSAGE_MAX, **names: str) -> str:
    """`template.format(**names)`, the names shortened (`short`) so that the message holds `limit` characters.

    The names are the unbounded part (a user's object names, URIs, a server's text); the fixed text is the
    builder's, kept short by it. The room left is shared: a name shorter than its share leaves the rest to others.
    """
    room = limit - len(template.format(**dict.fromkeys(names, "")))
    shortened, left = {}, dict(sorted(names.items(), key=lambda kv: len(kv[1])))
    while left:
        key, value = next(iter(left.items()))
        share = max(room // len(left), 0)
        shortened[key] = short(value, share)
        room -= len(shortened[key])
        del left[key]
    return template.format(**shortened)


def first_of(found: Sequence[str], after: str = "") -> str:
    """A message from several problems: the first, how many more its Event lists, then `after` (fixed text).

    The first problem is cut at its end, not elided in the middle: a problem says where, then what (a field, then
    what is wrong with it), and the start is what a reader needs to find it.
    """
    more = f" (+{len(found) - 1} more, see Events)" if len(found) > 1 else ""
    return clamp(found[0], MESSAGE_MAX - len(more) - len(after)) + more + after
