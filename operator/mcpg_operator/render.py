"""Render one namespace's gateway configuration from its ResourceWatches, WebhookTokens and Secrets. Pure.

Each ResourceWatch gets a verdict: served, or left out with a reason (invalid spec, a missing Secret, a token
or URI another ResourceWatch already holds). Conflicts go to the later ResourceWatch (by creation time, then
name), so the gateway never receives a collision. The configuration is validated against the gateway's own
model before it is accepted: the contract is checked here, not discovered when a pod fails to start.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from mcpg_gateway.contract import check, config
from mcpg_operator import conditions as c
from mcpg_operator import models, observed, rotation
from mcpg_operator.observed import SecretData
from mcpg_operator.settings import GatewayDefaults

TokenStates = Mapping[str, rotation.TokenState]
"""WebhookToken name -> the rotation state to render its webhooks from."""


@dataclass(frozen=True, slots=True)
class Verdict:
    served: bool
    reason: str
    message: str
    stalled: bool = False
    """The spec itself can never work: retrying will not help until it is edited."""
    strategy: str | None = None
    uri: str | None = None


@dataclass
class Plan:
    config: dict[str, Any]
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return config_hash(self.config)


class Unresolved(Exception):
    """A reference (Secret, key, WebhookToken) is missing; the watch waits for it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def token_digest(token: str) -> str:
    """What status may show of a token: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


AUTH_SECRET, AUTH_KEY = "mcpg-gateway-auth", "auth.yaml"
"""Who may use the namespace's gateway: the `gateway.auth` block, from an optional Secret in the namespace."""


def plan(
    watches: Sequence[observed.Watch], tokens: TokenStates, secrets: SecretData, defaults: GatewayDefaults
) -> Plan:
    auth, auth_problem = _auth(secrets)
    out = Plan(config={})
    entries: dict[str, list[dict[str, Any]]] = {"resources": [], "resource_templates": []}
    uri_owner: dict[str, str] = {}
    token_owner: dict[str, str] = {}
    for rw in sorted(watches, key=lambda w: (w.id.created, w.name)):
        verdict, kind, entry = _one(rw, tokens, secrets, defaults, uri_owner, token_owner)
        if entry is not None:
            entries[kind].append(entry)
            if auth_problem:
                verdict = Verdict(False, c.INVALID_AUTH, auth_problem, False, verdict.strategy, verdict.uri)
        out.verdicts[rw.name] = verdict
    out.config = _gateway_config(entries, defaults, auth)
    return out


def rendered_tokens(config: Mapping[str, Any]) -> frozenset[str]:
    """Every webhook token the configuration accepts: what a rollout of it carries to the gateway's pods."""
    capabilities = config["mcp"]["capabilities"]
    return frozenset(t for kind in capabilities.values() for entry in kind for t in _tokens_of(entry))


def _auth(secrets: SecretData) -> tuple[dict[str, Any] | None, str | None]:
    """The namespace's auth block, or None (every MCP client refused) with the reason it could not be used."""
    text = secrets.get(AUTH_SECRET, {}).get(AUTH_KEY)
    if text is None:
        return None, None
    where = f"Secret {AUTH_SECRET} key {AUTH_KEY}"
    try:
        auth = yaml.safe_load(text) or {}
        config.AuthConfig.model_validate(auth)
    except yaml.YAMLError:
        return None, f"{where} is not valid YAML; the gateway refuses every MCP client until it is fixed"
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        path = ".".join(str(x) for x in first["loc"])
        return None, f"{where}: {path}: {first['msg']}; the gateway refuses every MCP client until it is fixed"
    return auth, None


def _one(
    rw: observed.Watch,
    tokens: TokenStates,
    secrets: SecretData,
    defaults: GatewayDefaults,
    uri_owner: dict[str, str],
    token_owner: dict[str, str],
) -> tuple[Verdict, str, dict[str, Any] | None]:
    try:
        spec = models.ResourceWatchSpec.model_validate(rw.spec)
    except ValidationError as e:
        return Verdict(False, c.INVALID_SPEC, _first_errors(e), stalled=True), "", None
    watch = spec.watch or models.WatchSpec()
    kind = "resources" if spec.uri is not None else "resource_templates"
    strategy, uri = watch.strategy_type, spec.address

    def refused(reason: str, message: str, stalled: bool = False) -> tuple[Verdict, str, None]:
        return Verdict(False, reason, message, stalled, strategy, uri), kind, None

    try:
        entry = _entry(rw.name, spec, watch, tokens, secrets)
    except Unresolved as e:
        return refused(e.reason, e.message)
    problems = _contract_problems(kind, entry, defaults)
    if problems:
        return refused(c.INVALID_SPEC, "; ".join(problems), stalled=True)
    if spec.address in uri_owner:
        msg = f"URI {spec.address} is already served by ResourceWatch {uri_owner[spec.address]}"
        return refused(c.URI_CONFLICT, msg)
    entry_tokens = [hashlib.sha256(t.encode()).hexdigest() for t in _tokens_of(entry)]
    clash = next((token_owner[d] for d in entry_tokens if d in token_owner), None)
    if clash is not None:
        msg = f"its webhook token is already used by ResourceWatch {clash}; one token maps to one URI"
        return refused(c.TOKEN_CONFLICT, msg)
    uri_owner[spec.address] = rw.name
    token_owner.update(dict.fromkeys(entry_tokens, rw.name))
    return Verdict(True, c.SERVED, f"served by the gateway as {uri}", False, strategy, uri), kind, entry


def _entry(
    name: str,
    spec: models.ResourceWatchSpec,
    watch: models.WatchSpec,
    tokens: TokenStates,
    secrets: SecretData,
) -> dict[str, Any]:
    http = spec.backend.http
    backend: dict[str, Any] = {
        "kind": "http",
        "url": http.url,
        "method": http.method,
        "headers": {h.name: _secret(secrets, h.secret_key_ref) for h in http.headers},
        "expected_status_codes": http.expected_status_codes,
        "require_json_response": http.require_json_response,
        "timeout_ms": http.timeout_ms,
    }
    if http.body is not None:
        backend["body"] = http.body
    entry: dict[str, Any] = {"name": spec.name or name, "description": spec.description, "backend": backend}
    entry["uri" if spec.uri is not None else "uri_template"] = spec.address
    if spec.mime_type:
        entry["mime_type"] = spec.mime_type
    if spec.read_policy:
        entry["read_policy"] = spec.read_policy
    if spec.subject_id:
        entry["subject_id"] = spec.subject_id
    entry["watch"] = {"strategy": _strategy(watch, tokens, secrets)}
    if watch.notification_filter is not None:
        entry["watch"]["notification_filter"] = watch.notification_filter.model_dump(exclude_none=True)
    return entry


def _strategy(watch: models.WatchSpec, tokens: TokenStates, secrets: SecretData) -> dict[str, Any]:
    if watch.webhook is not None:
        return _webhook(watch.webhook.token_ref.name, tokens)
    if watch.nats_topic is not None:
        out: dict[str, Any] = {"type": "nats_topic", "subject": watch.nats_topic.subject}
        if watch.nats_topic.url_secret_ref is not None:
            out["url"] = _secret(secrets, watch.nats_topic.url_secret_ref)
        return out
    if watch.postgres_listen_notify is not None:
        pg = watch.postgres_listen_notify
        return {"type": "postgres_listen_notify", "url": _secret(secrets, pg.url_secret_ref), "channel": pg.channel}
    if watch.sql_polling is not None:
        sql = watch.sql_polling
        url = _secret(secrets, sql.url_secret_ref)
        return {"type": "sql_polling", "url": url, "query": sql.query, "interval_ms": sql.interval_ms}
    if watch.plugin is not None:
        return {**watch.plugin.config, "type": "plugin", "kind": watch.plugin.kind}
    return {"type": "poll", "interval_ms": (watch.poll or models.PollSpec()).interval_ms}


def _webhook(token_name: str, tokens: TokenStates) -> dict[str, Any]:
    state = tokens.get(token_name)
    if state is None:
        raise Unresolved(c.WEBHOOK_TOKEN_NOT_FOUND, f"WebhookToken {token_name} does not exist in this namespace")
    if state.current is None:
        raise Unresolved(c.TOKEN_PENDING, f"WebhookToken {token_name} has no token yet (see its status)")
    return {"type": "webhook", "token": state.current, "previous_tokens": [r.token for r in state.retiring]}


def _secret(secrets: SecretData, ref: models.SecretKeyRef) -> str:
    data = secrets.get(ref.name)
    if data is None:
        raise Unresolved(c.SECRET_NOT_FOUND, f"Secret {ref.name} does not exist in this namespace")
    if ref.key not in data:
        raise Unresolved(c.SECRET_NOT_FOUND, f"Secret {ref.name} has no key {ref.key}")
    return data[ref.key]


def _tokens_of(entry: Mapping[str, Any]) -> list[str]:
    strategy = entry["watch"]["strategy"]
    if strategy["type"] != "webhook":
        return []
    return [strategy["token"], *strategy["previous_tokens"]]


def _contract_problems(kind: str, entry: dict[str, Any], defaults: GatewayDefaults) -> list[str]:
    # The gateway's own check, on this entry alone (with the gateway section it will get, for the NATS server).
    # No environment: the operator resolves every secret itself, so a ${env.X} left in a field is an error.
    # The CEL is compiled too: a bad expression must never reach a gateway pod. Which plugins are installed is
    # the gateway image's business, so plugin kinds are not checked here.
    raw = _gateway_config({kind: [entry]}, defaults, None)
    prefix = f"mcp.capabilities.{kind}[0]."
    return [str(p).removeprefix(prefix) for p in check.problems(raw, environ={}, plugin_kinds=None)]


def _first_errors(e: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in e.errors(include_url=False)[:limit]:
        path = ".".join(str(x) for x in err["loc"]) or "spec"
        parts.append(f"spec.{path}: {str(err['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def _gateway_config(
    entries: dict[str, list[dict[str, Any]]], defaults: GatewayDefaults, auth: dict[str, Any] | None
) -> dict[str, Any]:
    gateway: dict[str, Any] = {"server": {"allowed_origins": list(defaults.allowed_origins)}}
    if auth is not None:
        gateway["auth"] = auth
    if defaults.nats_url:
        gateway["nats"] = {"url": defaults.nats_url}
    return {"mcp": {"capabilities": entries}, "gateway": gateway}
