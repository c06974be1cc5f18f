"""Gateway configurations in the documented shape (`mcp.capabilities.resources[]`), built the same way by every tier."""

from __future__ import annotations

import hashlib
from typing import Any

ANONYMOUS_AUTH: dict[str, Any] = {"anonymous": {"enabled": True}}
"""Anonymous access, said explicitly as the gateway requires: for the tests that are not about identity."""
UNUSED_BACKEND = "http://127.0.0.1:9/unused"
"""Event-driven watches never read through the binding; the configuration still needs one."""


def resource(
    name: str,
    uri: str,
    url: str,
    strategy: dict[str, Any] | None = None,
    watch: bool = True,
    **backend: Any,
) -> dict[str, Any]:
    """One `mcp.capabilities.resources[]` entry. `strategy=None` with `watch=True`: the default (poll)."""
    entry: dict[str, Any] = {"name": name, "uri": uri, "backend": {"kind": "http", "url": url, **backend}}
    if watch:
        entry["watch"] = {"strategy": strategy} if strategy is not None else {}
    return entry


def watched(name: str, uri: str, strategy: dict[str, Any]) -> dict[str, Any]:
    """A resource watched by an event-driven strategy, which never reads its backend."""
    return resource(name, uri, UNUSED_BACKEND, strategy)


def gateway_config(
    *resources: dict[str, Any],
    templates: list[dict[str, Any]] | None = None,
    auth: dict[str, Any] | None = None,
    nats_url: str | None = None,
    **server: Any,
) -> dict[str, Any]:
    """A whole configuration; anonymous access unless `auth` says otherwise; `server` goes to gateway.server."""
    caps: dict[str, Any] = {"resources": list(resources)}
    if templates:
        caps["resource_templates"] = templates
    gateway: dict[str, Any] = {"server": server, "auth": ANONYMOUS_AUTH if auth is None else auth}
    if nats_url:
        gateway["nats"] = {"url": nats_url}
    return {"mcp": {"capabilities": caps}, "gateway": gateway}


def principal(token: str, principal_id: str, **fields: Any) -> dict[str, Any]:
    """One `gateway.auth.principals[]` entry: the configuration holds the token's SHA-256, never the token."""
    return {"token_sha256": hashlib.sha256(token.encode()).hexdigest(), "principal_id": principal_id, **fields}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def bus_section(url: str, user: str, password_env: str, name: str, **fields: Any) -> dict[str, Any]:
    """A `gateway.bus` section as the operator renders one: the password by `${env.NAME}`, never in the file;
    `name` is the subject prefix and the bucket (one per test keeps tests on one server apart)."""
    return {
        "url": url,
        "user": user,
        "password": f"${{env.{password_env}}}",
        "subject_prefix": name,
        "bucket": name,
        **fields,
    }


EXAMPLE_ENV = {
    "GOOGLE_TOKEN": "g-secret",
    "REPORTS_WEBHOOK_TOKEN": "new-token",
    "REPORTS_WEBHOOK_TOKEN_OLD": "old-token",
    "QUICKSTART_WEBHOOK_TOKEN": "quick-token",
    "HOOK_TOKEN": "hook-token",
    "STANDARD_WEBHOOKS_SECRET": "whsec_" + "A" * 44,  # 33 bytes of base64: within the specification's bounds
    "STANDARD_WEBHOOKS_SECRET_OLD": "",
    **{f"{scheme}_SECRET": f"{scheme.lower()}-secret" for scheme in ("GITHUB", "STRIPE", "SLACK", "GITLAB", "HMAC")},
}
"""What every example under examples/gateway/ reads from the environment, for tests that load them all."""
