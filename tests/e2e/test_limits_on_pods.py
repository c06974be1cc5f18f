"""The limits and lease the operator is given reach every gateway pod it renders, and hold there.

`gateway.limits` / `gateway.subscriptions` (the chart's values, `MCPG_GATEWAY_LIMITS` / `MCPG_GATEWAY_SUBSCRIPTIONS`
on the operator: `fixtures.OPERATOR_SETTINGS` sets non-default ones) are rendered into each namespace's gateway
configuration. Each of the three pods publishes them in its server card, and one enforces them for a caller
that reaches it through the Service, before any upstream read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_gateway import errors
from mcpg_testing.clients import refusal
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import OPERATOR_SETTINGS
from mcpg_testing.pods import apply, gateway_pods

CLIENT_TOKEN = "limits-client-" + "l" * 24
HEADERS = {"authorization": f"Bearer {CLIENT_TOKEN}"}
TEMPLATE = "doc://{id}"
REPLICAS = int(OPERATOR_SETTINGS["MCPG_GATEWAY_REPLICAS"])
LIMITS = json.loads(OPERATOR_SETTINGS["MCPG_GATEWAY_LIMITS"])
SUBSCRIPTIONS = json.loads(OPERATOR_SETTINGS["MCPG_GATEWAY_SUBSCRIPTIONS"])


def manifests() -> list[dict[str, Any]]:
    digest = hashlib.sha256(CLIENT_TOKEN.encode()).hexdigest()
    auth = {"principals": [{"token_sha256": digest, "principal_id": "caller"}]}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mcpg-gateway-auth"},
            "stringData": {"auth.yaml": yaml.safe_dump(auth)},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": "docs"},
            # Nothing listens there: a read would fail, so a refusal that names the limit proves none was made.
            "spec": {"uriTemplate": TEMPLATE, "backend": {"http": {"url": "http://127.0.0.1:9/{id}"}}},
        },
    ]


async def test_every_gateway_pod_publishes_and_enforces_the_limits_the_operator_was_given(
    control_plane: ControlPlane, operator: Path, namespace: str
) -> None:
    apply(control_plane, namespace, *manifests())
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/docs", "--timeout=150s")
    control_plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", "--timeout=150s")
    pods = gateway_pods(control_plane, namespace)
    assert len(pods) == REPLICAS
    async with httpx2.AsyncClient(timeout=10) as http:
        for base in pods.values():
            card = (await http.get(f"{base}/.well-known/mcp/server-card.json")).json()["subscriptions"]
            assert card["subscribable_uri_templates"] == [TEMPLATE]
            assert LIMITS.items() <= card["limits"].items()
            assert SUBSCRIPTIONS.items() <= card["lease"].items()
    service = control_plane.service_url(namespace, "mcpg-gateway")
    too_many = [f"doc://{n}" for n in range(LIMITS["watches_per_principal"] + 1)]
    e = await refusal(f"{service}/mcp", "listen", too_many, HEADERS)
    assert e.code == errors.TOO_MANY_REQUESTS
    assert e.message == (
        f"this request names {len(too_many)} URIs, and principal 'caller' may hold at most "
        f"{LIMITS['watches_per_principal']} watches; name fewer"
    )
