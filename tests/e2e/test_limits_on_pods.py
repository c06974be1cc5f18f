"""The limits and lease the operator is given reach every gateway pod it renders, and hold there.

`gateway.limits` / `gateway.subscriptions` (the chart's values, `MCPG_GATEWAY_LIMITS` / `MCPG_GATEWAY_SUBSCRIPTIONS`
on the operator: the session's release, `fixtures.CHART_VALUES`, sets non-default ones) are rendered into each
namespace's gateway configuration. Each of the three pods publishes them in its server card (reached at its pod
IP), as fitted to the memory limit the pod was rendered with (`memory_fit.py`), and one enforces them for a caller
that reaches it through the Service's ClusterIP, before any upstream read.
The connection deadlines hold on a pod too: a listen stream whose client stops reading is closed at the
operator's `write_timeout_s`, and a client that pipelines past the bound is cut off.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx2
import yaml

from mcpg_gateway import connections, errors, memory_fit
from mcpg_gateway.contract import config
from mcpg_testing import stuck
from mcpg_testing.clients import refusal
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import CHART_VALUES
from mcpg_testing.pods import apply, gateway_pods
from mcpg_testing.release import OperatorRelease

CLIENT_TOKEN = "limits-client-" + "l" * 24
HEADERS = {"authorization": f"Bearer {CLIENT_TOKEN}"}
TEMPLATE = "doc://{id}"
REPLICAS = int(CHART_VALUES["gateway"]["replicas"])
LIMITS: dict[str, int] = CHART_VALUES["gateway"]["limits"]
SUBSCRIPTIONS: dict[str, int] = CHART_VALUES["gateway"]["subscriptions"]


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


MIB = 1024 * 1024
UNITS = {"Mi": MIB, "Gi": 1024 * MIB}


def pod_memory_limit(plane: ControlPlane, ns: str) -> int:
    """The memory limit (bytes) the operator rendered into the gateway Deployment's container."""
    deployment = json.loads(plane.kubectl("-n", ns, "get", "deployment", "mcpg-gateway", "-o", "json").stdout)
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "gateway"]
    quantity: str = container["resources"]["limits"]["memory"]
    return int(quantity[:-2]) * UNITS[quantity[-2:]]


def published(memory_limit: int) -> dict[str, int]:
    """The limits the operator was given (a client has no use for `write_timeout_s`), as a pod with `memory_limit`
    serves them: its caps fitted to it."""
    fitted = memory_fit.fit(config.LimitsConfig.model_validate(LIMITS), memory_limit).limits
    return {k: getattr(fitted, k) for k in LIMITS if k != "write_timeout_s"}


async def test_every_gateway_pod_publishes_and_enforces_the_limits_the_operator_was_given(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
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
            assert published(pod_memory_limit(control_plane, namespace)).items() <= card["limits"].items()
            assert SUBSCRIPTIONS.items() <= card["lease"].items()
    service = control_plane.service_url(namespace, "mcpg-gateway")
    too_many = [f"doc://{n}" for n in range(LIMITS["watches_per_principal"] + 1)]
    e = await refusal(f"{service}/mcp", "listen", too_many, HEADERS)
    assert e.code == errors.TOO_MANY_REQUESTS
    assert e.message == (
        f"this request names {len(too_many)} URIs, and principal 'caller' may hold at most "
        f"{LIMITS['watches_per_principal']} watches; name fewer"
    )


HOOK = "stalled://reports"
DEADLINE_BOUND_S = 20.0
"""Bound on a pod's buffers for a stream nobody reads filling (a few hundred notifications: 3.6 s measured), then
the operator's 5 s deadline running out. Under the gateway's default of 30 s it could not pass: passing shows the
operator's `write_timeout_s` reached the pod and holds there."""


def webhook_manifests() -> list[dict[str, Any]]:
    token = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "WebhookToken",
        "metadata": {"name": "stalled-token"},
        "spec": {"secretRef": {"name": "stalled-webhook"}, "generate": True},
    }
    watch = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "stalled"},
        "spec": {
            "uri": HOOK,
            "backend": {"http": {"url": "http://127.0.0.1:9/unused.json"}},
            "watch": {"webhook": {"tokenRef": {"name": "stalled-token"}}},
        },
    }
    return [manifests()[0], token, watch]


def closed_for(metrics_text: str, reason: str) -> float:
    key = f'mcpg_connections_closed_total{{port="public",reason="{reason}"}}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines() if line.startswith(key))


async def pipelined_until_closed(host: str, port: int, requests: int) -> bytes:
    """`requests` GET /healthz sent at once on one connection; every byte answered until the pod closes it."""
    loop, sock = asyncio.get_running_loop(), socket.socket()
    sock.setblocking(False)
    received = b""
    try:
        async with asyncio.timeout(10):
            await loop.sock_connect(sock, (host, port))
            await loop.sock_sendall(sock, b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n" * requests)
            while data := await loop.sock_recv(sock, 65536):
                received += data
    finally:
        sock.close()
    return received


async def test_a_pod_closes_a_stream_nobody_reads_at_the_operators_write_deadline_and_cuts_off_pipelining(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    apply(control_plane, namespace, *webhook_manifests())
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/stalled", "--timeout=150s")
    control_plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", "--timeout=150s")
    name, base = sorted(gateway_pods(control_plane, namespace).items())[0]
    admin = gateway_pods(control_plane, namespace, port="9090")[name]
    secret = json.loads(control_plane.kubectl("-n", namespace, "get", "secret", "stalled-webhook", "-o", "json").stdout)
    hook = f"{base}/webhooks/resource-updated/{base64.b64decode(secret['data']['token']).decode()}"
    pod = urlsplit(base)
    host, port = str(pod.hostname), int(pod.port or 80)
    sock = await stuck.listen_stream(port, HOOK, stuck.small_window(small_segments=True), HEADERS, host=host)
    try:
        async with httpx2.AsyncClient(timeout=10) as http, asyncio.timeout(DEADLINE_BOUND_S):
            # Written to until its buffers are full; then nothing the pod writes moves, and the deadline runs out.
            while closed_for((await http.get(f"{admin}/metrics")).text, "write_timeout") < 1:
                for status in await asyncio.gather(*(http.post(hook) for _ in range(50))):
                    assert status.status_code == 200
    finally:
        sock.close()
    answers = (await pipelined_until_closed(host, port, connections.MAX_PIPELINED + 10)).count(b'{"ok":true}')
    assert answers == connections.MAX_PIPELINED + 1  # then the connection was closed: `pipelining`
    async with httpx2.AsyncClient(timeout=10) as http:
        assert closed_for((await http.get(f"{admin}/metrics")).text, "pipelining") >= 1
