"""WebhookToken plumbing: a token's inputs, the Secret generated for it, and its rotation-state Secret. Pure, but for
`new_signing_secret` (random bytes, which the reconcile hands the decision as its generator).

A WebhookToken holds one of two kinds of value, its role: a routing token (presented in the webhook path) or, with
`signatureScheme`, a signing secret (in a watch's `signature.secrets`). A Secret's value is used only if the
gateway would take it in that role (`config.WebhookStrategy.token_problem`: it travels in a URL path;
`signing.secret_problem`: the scheme's format); another value is reported and changes nothing, so the value in use
keeps working until it is fixed. Values never cross roles: a signing secret must never travel in a URL path.

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
from dataclasses import dataclass, replace
from secrets import token_bytes
from typing import Any, Literal

from pydantic import ValidationError

from mcpg_gateway.contract import config, signing
from mcpg_operator import conditions as c
from mcpg_operator import models, rotation
from mcpg_operator.objects import MANAGED, WATCHED_LABEL

STATE_KEY = "state.json"
STATE_LABEL = "mcpg.dev/rotation-state"
GENERATED_LABEL = "mcpg.dev/generated-token"

Role = Literal["token", "signature"]
"""What a WebhookToken's value is to a watch's entry: a routing token (`tokenRef`: the entry's `token` and
`previous_tokens`) or a signing secret (`signature.secretRef`: the entry's `signature.secrets`)."""
ROLES: tuple[Role, ...] = ("token", "signature")


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
    def scheme(self) -> signing.Scheme | None:
        """The signing scheme its value is a secret of; None for a routing token (or an invalid spec)."""
        return self.spec.signature_scheme if self.spec else None

    @property
    def role(self) -> Role:
        return "token" if self.scheme is None else "signature"

    @property
    def noun(self) -> str:
        """What its value is called in a message."""
        return "token" if self.scheme is None else "signing secret"

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
        return Source(None, _spec_problem(e))
    data = secrets.get(parsed.secret_ref.name)
    value = (data or {}).get(parsed.secret_ref.key) or None
    version = (versions or {}).get(parsed.secret_ref.name) or None
    found = Source(parsed, None, value, data is not None, None, version)
    if value is not None and (problem := _value_problem(parsed, value)) is not None:
        return _refused(found, problem)
    return found


def _value_problem(spec: models.WebhookTokenSpec, value: str) -> str | None:
    """Why the gateway would refuse `value` in this WebhookToken's role (never which characters)."""
    if spec.signature_scheme is not None:
        return signing.secret_problem(spec.signature_scheme, value)
    return config.WebhookStrategy.token_problem(value)


def _refused(src: Source, problem: str) -> Source:
    """`src` with its value refused: reported naming the Secret and key, and used nowhere."""
    if src.spec is None:
        return replace(src, secret_value=None, secret_error=c.first_of([f"its Secret: {problem}"], "; edit it"))
    ref = src.spec.secret_ref
    where = c.fit("Secret {name} key {key}", 60, name=ref.name, key=ref.key)
    said = c.first_of([f"{where}: {problem}"], "; edit it")  # the problem cut at its end, if at all
    return replace(src, secret_value=None, secret_error=said)


def _spec_problem(e: ValidationError) -> str:
    """A status message for a spec the model refuses: the first problem, `spec.<field>: <what>` (fitted)."""
    err = e.errors(include_url=False)[0]
    path = ".".join(["spec", *(str(x) for x in err["loc"])])
    more = f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return c.fit("{path}: {what}" + more, path=path, what=str(err["msg"]).removeprefix("Value error, "))


def apart(sources: Mapping[str, Source]) -> dict[str, Source]:
    """`sources`, with a value that WebhookTokens hold in both roles refused on each of them: as a routing token it
    would travel in a URL path, where a signing secret must never be (two WebhookTokens naming one Secret key)."""
    roles: dict[str, set[Role]] = {}
    for src in sources.values():
        if src.secret_value:
            roles.setdefault(src.secret_value, set()).add(src.role)
    problem = "another WebhookToken uses this value in the other role"
    both = {value for value, held in roles.items() if len(held) > 1}
    return {
        name: _refused(src, f"{problem}: give each its own value") if src.secret_value in both else src
        for name, src in sources.items()
    }


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


def signing_key_bytes(scheme: signing.Scheme) -> int:
    """How many random bytes a generated signing secret of `scheme` is made from: Slack's own are 16, as hex."""
    return 16 if scheme == "slack" else 32


def signing_secret(scheme: signing.Scheme, key: bytes) -> str:
    """A signing secret of `scheme` made from the random bytes `key`, in the format its senders take."""
    if scheme == "standard-webhooks":
        return signing.WHSEC_PREFIX + base64.b64encode(key).decode()
    return key.hex()


def new_signing_secret(scheme: signing.Scheme) -> str:
    """A random signing secret for `scheme` (the reconcile's default generator; the decision itself is pure)."""
    return signing_secret(scheme, token_bytes(signing_key_bytes(scheme)))
