"""WebhookToken plumbing, pure: a token's inputs, the Secret generated for it, and its rotation-state Secret.

A Secret's value is a token only if the gateway would take it (`config.WebhookStrategy.token_problem`: it travels
in a URL path); another value is reported and changes nothing, so the token in use keeps working until it is fixed.

Rotation state holds token values, so it lives in an operator-owned Secret per WebhookToken (owned by it, so
deleting the WebhookToken deletes it), never in status or annotations. It survives operator restarts, which is
what lets a rotation resume exactly where it stopped. Existing clusters hold state in this format (Secret name and
key; the JSON is `rotation.to_json`'s, which reads back what earlier operators wrote), so those must not change.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from mcpg_gateway.contract import config
from mcpg_operator import models, rotation
from mcpg_operator.objects import MANAGED, WATCHED_LABEL

STATE_KEY = "state.json"
STATE_LABEL = "mcpg.dev/rotation-state"
GENERATED_LABEL = "mcpg.dev/generated-token"


@dataclass(frozen=True, slots=True)
class Source:
    """One WebhookToken's inputs in this pass: its spec (or why it is invalid) and the value its Secret holds."""

    spec: models.WebhookTokenSpec | None
    spec_error: str | None = None
    secret_value: str | None = None
    secret_exists: bool = False
    secret_error: str | None = None
    """Why the Secret's value cannot be a token, naming the Secret and key (never the value); it is then unused."""
    secret_version: str | None = None
    """The Secret's resourceVersion as read: which edit of it the token (and its status) is about."""

    @property
    def grace_s(self) -> int:
        return self.spec.grace_period_seconds if self.spec else 0

    @property
    def wants_generated_secret(self) -> bool:
        """It asked the operator for a token and its Secret does not exist (a present one is never overwritten)."""
        return self.spec is not None and self.spec.generate and not self.secret_exists


def source(
    spec: Mapping[str, Any], secrets: Mapping[str, Mapping[str, str]], versions: Mapping[str, str] | None = None
) -> Source:
    """`versions`: each Secret's resourceVersion as read."""
    try:
        parsed = models.WebhookTokenSpec.model_validate(spec)
    except ValidationError as e:
        return Source(None, str(e))
    data = secrets.get(parsed.secret_ref.name)
    value = (data or {}).get(parsed.secret_ref.key) or None
    version = (versions or {}).get(parsed.secret_ref.name) or None
    if value is not None and (problem := config.WebhookStrategy.token_problem(value)) is not None:
        where = f"Secret {parsed.secret_ref.name} key {parsed.secret_ref.key}"
        return Source(parsed, None, None, True, f"{where} does not hold a usable token: {problem}; edit it", version)
    return Source(parsed, None, value, data is not None, None, version)


def observe(state: rotation.TokenState, src: Source, now: float, pinned: frozenset[str]) -> rotation.Edit:
    """`rotation.observe_secret`, but a value that cannot be a token is neither promoted nor a revocation."""
    if src.secret_error is not None:
        return rotation.Edit(state)
    return rotation.observe_secret(state, src.secret_value, now, pinned)


def state_secret_name(webhook_token: str) -> str:
    return "mcpg-rotation-" + hashlib.sha256(webhook_token.encode()).hexdigest()[:16]


def parse_state(data: Mapping[str, str] | None) -> rotation.TokenState:
    """The state held in a state Secret's decoded data; no Secret (or no key) is the empty state."""
    text = (data or {}).get(STATE_KEY)
    return rotation.from_json(json.loads(text)) if text else rotation.TokenState()


def state_secret(
    namespace: str, webhook_token: str, owner: dict[str, Any], state: rotation.TokenState
) -> dict[str, Any]:
    body = json.dumps(rotation.to_json(state), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": state_secret_name(webhook_token),
            "namespace": namespace,
            # Watched: a lost or edited state must start a pass at once, not at the next resync.
            "labels": {**MANAGED, STATE_LABEL: "true", WATCHED_LABEL: "true"},
            "annotations": {"mcpg.dev/webhooktoken": webhook_token},
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "data": {STATE_KEY: _b64(body)},
    }


def generated_secret(
    namespace: str, spec: models.WebhookTokenSpec, owner: dict[str, Any], token: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": spec.secret_ref.name,
            "namespace": namespace,
            "labels": {GENERATED_LABEL: "true", WATCHED_LABEL: "true"},  # the user may edit it to rotate
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "data": {spec.secret_ref.key: _b64(token)},
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
