"""WebhookToken plumbing: read the user's Secret, generate one if asked, and keep rotation state in a Secret.

Rotation state holds token values, so it lives in an operator-owned Secret per WebhookToken (owned by it, so
deleting the WebhookToken deletes it), never in status or annotations. It survives operator restarts, which is
what lets a rotation resume exactly where it stopped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from mcpg_operator import models, rotation
from mcpg_operator.kube import Kube, ns_path
from mcpg_operator.objects import MANAGED

STATE_KEY = "state.json"
STATE_LABEL = "mcpg.dev/rotation-state"
GENERATED_LABEL = "mcpg.dev/generated-token"


@dataclass(frozen=True, slots=True)
class TokenSource:
    name: str
    uid: str
    generation: int
    spec: models.WebhookTokenSpec | None
    spec_error: str | None
    secret_value: str | None
    state: rotation.TokenState


def state_secret_name(webhook_token: str) -> str:
    return "mcpg-rotation-" + hashlib.sha256(webhook_token.encode()).hexdigest()[:16]


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }


def decode(secret: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            continue  # binary values cannot be tokens or URLs; ignore rather than fail the namespace
    return out


def generated_secret(namespace: str, wt: dict[str, Any], spec: models.WebhookTokenSpec) -> dict[str, Any]:
    token = secrets.token_urlsafe(32)  # 256 random bits
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": spec.secret_ref.name,
            "namespace": namespace,
            "labels": {GENERATED_LABEL: "true"},
            "ownerReferences": [owner(wt)],
        },
        "type": "Opaque",
        "data": {spec.secret_ref.key: base64.b64encode(token.encode()).decode()},
    }


def state_secret(namespace: str, wt: dict[str, Any], state: rotation.TokenState) -> dict[str, Any]:
    body = json.dumps(rotation.to_json(state), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": state_secret_name(wt["metadata"]["name"]),
            "namespace": namespace,
            "labels": {**MANAGED, STATE_LABEL: "true"},
            "annotations": {"mcpg.dev/webhooktoken": wt["metadata"]["name"]},
            "ownerReferences": [owner(wt)],
        },
        "type": "Opaque",
        "data": {STATE_KEY: base64.b64encode(body.encode()).decode()},
    }


async def load(
    kube: Kube, namespace: str, wt: dict[str, Any], secrets_by_name: dict[str, dict[str, str]]
) -> TokenSource:
    """Read one WebhookToken's inputs, creating its generated Secret if it asked for one and none exists."""
    meta = wt["metadata"]
    state_data = secrets_by_name.get(state_secret_name(meta["name"]), {}).get(STATE_KEY)
    state = rotation.from_json(json.loads(state_data)) if state_data else rotation.TokenState()
    try:
        spec = models.WebhookTokenSpec.model_validate(wt.get("spec") or {})
    except ValueError as e:
        return TokenSource(meta["name"], meta["uid"], meta.get("generation", 0), None, str(e), None, state)
    data = secrets_by_name.get(spec.secret_ref.name)
    if data is None and spec.generate:
        created = await kube.create(ns_path(namespace, "secrets"), generated_secret(namespace, wt, spec))
        data = decode(created) if created is not None else None
    value = (data or {}).get(spec.secret_ref.key) or None
    return TokenSource(meta["name"], meta["uid"], meta.get("generation", 0), spec, None, value, state)


async def save_state(kube: Kube, namespace: str, wt: dict[str, Any], state: rotation.TokenState) -> None:
    body = state_secret(namespace, wt, state)
    await kube.apply(ns_path(namespace, "secrets", body["metadata"]["name"]), body)
