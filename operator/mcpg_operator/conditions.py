"""Condition types and reasons (CamelCase constants), and the one function that sets a condition."""

from __future__ import annotations

import time
from typing import Any

MESSAGE_MAX = 1024
"""Characters of a condition's or an Event's message kept: the rest is cut (the reason says what happened)."""

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
        "message": message[:MESSAGE_MAX],
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
