"""The operator's settings, read from the environment once, in this module only (the chart sets the variables).

`load()` is called by the entrypoint (to fail fast, before kopf starts) and by the kopf startup handler; the
result is passed down explicitly. A bad value raises `SettingsError` naming every variable that is wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SettingsError(ValueError):
    """The operator's environment cannot be used; the message names each variable and what is wrong."""


class GatewayDefaults(BaseModel):
    """What every rendered gateway gets: `MCPG_GATEWAY_<FIELD>` variables."""

    model_config = ConfigDict(frozen=True)

    image: str = "ghcr.io/mcpg/gateway:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    replicas: int = Field(default=1, ge=1)
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
    )
    allowed_origins: list[str] = Field(default_factory=list)
    admin_token_secret: str | None = None
    """Name of a Secret (key `token`) in each gateway namespace; unset leaves the admin API disabled."""
    nats_url: str | None = None
    plugin_kinds: list[str] = Field(default_factory=list)
    """The watch-strategy plugin kinds the gateway image installs; a watch naming another kind is refused."""
    log_format: str = "json"
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    http_node_port: int | None = Field(default=None, ge=30000, le=32767)
    """A fixed node port for the public port; a cluster has each only once, so set it for one namespace's gateway."""
    admin_node_port: int | None = Field(default=None, ge=30000, le=32767)


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    resync_s: float = 30.0
    """`MCPG_RESYNC_SECONDS`: every known namespace is reconciled this often, covering any missed event."""
    settle_s: float = 0.5
    """`MCPG_SETTLE_SECONDS`: a namespace's reconcile waits this long for more events (a burst becomes one rollout)."""
    watch_namespaces: tuple[str, ...] = ()
    """`MCPG_WATCH_NAMESPACES`, comma-separated; empty means every namespace."""
    gateway: GatewayDefaults = field(default_factory=GatewayDefaults)


_JSON_FIELDS = frozenset(
    {"replicas", "resources", "allowed_origins", "plugin_kinds", "http_node_port", "admin_node_port"}
)


def load(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """Every operator setting from `env` (default: the process environment)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    resync = _seconds(env, "MCPG_RESYNC_SECONDS", 30.0, lambda v: v > 0, "a number of seconds above 0", problems)
    settle = _seconds(env, "MCPG_SETTLE_SECONDS", 0.5, lambda v: v >= 0, "a number of seconds, 0 or more", problems)
    gateway = _gateway_defaults(env, problems)
    if problems or gateway is None:
        raise SettingsError("; ".join(problems))
    namespaces = tuple(ns.strip() for ns in env.get("MCPG_WATCH_NAMESPACES", "").split(",") if ns.strip())
    return OperatorSettings(resync, settle, namespaces, gateway)


def _seconds(
    env: Mapping[str, str], name: str, default: float, ok: Callable[[float], bool], wanted: str, problems: list[str]
) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isnan(value) or math.isinf(value) or not ok(value):
        problems.append(f"{name}: must be {wanted}, got {raw[:80]!r}")
    return value


def _gateway_defaults(env: Mapping[str, str], problems: list[str]) -> GatewayDefaults | None:
    """`MCPG_GATEWAY_<FIELD>` variables; replicas, resources, allowed_origins and the node ports are JSON."""
    values: dict[str, Any] = {}
    for name in GatewayDefaults.model_fields:
        var = f"MCPG_GATEWAY_{name.upper()}"
        raw = env.get(var)
        if not raw:
            continue
        try:
            values[name] = json.loads(raw) if name in _JSON_FIELDS else raw
        except ValueError:
            problems.append(f"{var}: not valid JSON: {raw[:80]!r}")
    try:
        return GatewayDefaults.model_validate(values)
    except ValidationError as e:
        problems += [f"MCPG_GATEWAY_{'_'.join(str(x) for x in err['loc']).upper()}: {err['msg']}" for err in e.errors()]
        return None
