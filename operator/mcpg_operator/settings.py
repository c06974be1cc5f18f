"""Operator-level defaults for the gateways it renders, read once from the environment (the chart sets them)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class GatewayDefaults(BaseModel):
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
    log_format: str = "json"
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    http_node_port: int | None = Field(default=None, ge=30000, le=32767)
    """A fixed node port for the public port; a cluster has each only once, so set it for one namespace's gateway."""
    admin_node_port: int | None = Field(default=None, ge=30000, le=32767)


_JSON_FIELDS = frozenset({"replicas", "resources", "allowed_origins", "http_node_port", "admin_node_port"})


def from_env(env: Mapping[str, str] | None = None) -> GatewayDefaults:
    """`MCPG_GATEWAY_<FIELD>` variables; replicas, resources and allowed_origins are JSON."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name in GatewayDefaults.model_fields:
        raw = env.get(f"MCPG_GATEWAY_{name.upper()}")
        if raw:
            try:
                values[name] = json.loads(raw) if name in _JSON_FIELDS else raw
            except ValueError:
                raise SettingsError(f"MCPG_GATEWAY_{name.upper()}: not valid JSON: {raw[:80]!r}") from None
    try:
        return GatewayDefaults.model_validate(values)
    except ValidationError as e:
        problems = [f"MCPG_GATEWAY_{'_'.join(str(x) for x in err['loc']).upper()}: {err['msg']}" for err in e.errors()]
        raise SettingsError("; ".join(problems)) from None


class SettingsError(ValueError):
    """The operator's environment cannot be used; the message names each variable and what is wrong."""
