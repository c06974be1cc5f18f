"""A gateway pod's memory limit is the kernel's: past it, the container is OOM-killed and restarted.

The gateway admits more MCP sessions (10,000 by default, about 97 KB each) than the memory its pod is given can
hold. Until the gateway refuses at a cap of its own, the limit the operator renders is what stops it, and only
because the pod runs in a cgroup the real node enforces: here an McpGateway gives one replica 128 MiB, callers
of sixteen principals open sessions through the Service, and the container is killed by the kernel
(`OOMKilled`, exit 137), restarted by the kubelet, and serves again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import httpx2
import yaml

from mcpg_testing import manifests
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.pods import apply
from mcpg_testing.processes import wait_until
from mcpg_testing.release import OperatorRelease

MEMORY_LIMIT = "128Mi"
PRINCIPALS = 16
SESSIONS_PER_PRINCIPAL = 128  # the gateway's default cap per principal: 2,048 sessions in all, ~200 MB
BATCH = 32
BOUND_S = 180.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "oom", "version": "1"}},
}


def tokens() -> list[str]:
    return [f"oom-caller-{n:02d}-" + "m" * 24 for n in range(PRINCIPALS)]


def documents() -> list[dict[str, Any]]:
    principals = [
        {"token_sha256": hashlib.sha256(t.encode()).hexdigest(), "principal_id": f"caller-{n}"}
        for n, t in enumerate(tokens())
    ]
    auth = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mcpg-gateway-auth"}}
    auth["stringData"] = {"auth.yaml": yaml.safe_dump({"principals": principals})}
    resources = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": MEMORY_LIMIT}}
    settings = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "McpGateway",
        "metadata": {"name": "mcpg-gateway"},
        "spec": {"replicas": 1, "resources": resources},
    }
    return [auth, settings, manifests.polled("docs")]


def gateway_pods(plane: ControlPlane, ns: str) -> list[dict[str, Any]]:
    """The gateway pods not being deleted."""
    selector = "app.kubernetes.io/name=mcpg-gateway"
    listed = json.loads(plane.kubectl("-n", ns, "get", "pods", "-l", selector, "-o", "json").stdout)
    return [p for p in listed["items"] if p["metadata"].get("deletionTimestamp") is None]


def memory_limit(pod: dict[str, Any]) -> str | None:
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "gateway"]
    limit: str | None = container["resources"].get("limits", {}).get("memory")
    return limit


def status_of(plane: ControlPlane, ns: str, pod: str) -> dict[str, Any]:
    """The gateway container's status in `pod`."""
    found = json.loads(plane.kubectl("-n", ns, "get", "pod", pod, "-o", "json").stdout)
    [status] = [c for c in found["status"].get("containerStatuses", []) if c["name"] == "gateway"]
    return dict(status)


def oom_killed(status: dict[str, Any]) -> bool:
    ended = [status.get("lastState", {}).get("terminated"), status.get("state", {}).get("terminated")]
    return any(e is not None and e.get("reason") == "OOMKilled" for e in ended)


async def open_sessions(url: str, plane: ControlPlane, ns: str, pod: str) -> int:
    """Open sessions, BATCH at a time, until the container has been OOM-killed; how many were accepted."""
    accepted = 0
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(20)) as http:
        for token in tokens():
            headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"}
            for _ in range(SESSIONS_PER_PRINCIPAL // BATCH):
                results = await asyncio.gather(
                    *(http.post(url, json=INITIALIZE, headers=headers) for _ in range(BATCH)), return_exceptions=True
                )
                accepted += sum(1 for r in results if not isinstance(r, BaseException) and r.status_code == 200)
                if oom_killed(status_of(plane, ns, pod)):
                    return accepted
    return accepted


async def test_a_gateway_pod_past_its_memory_limit_is_oom_killed_and_restarted(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    apply(control_plane, namespace, *documents())
    wait_until(
        lambda: [memory_limit(p) for p in gateway_pods(control_plane, namespace)] == [MEMORY_LIMIT],
        BOUND_S,
        "one gateway pod, rendered with the McpGateway's memory limit",
    )
    control_plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", "--timeout=150s")
    [pod] = [p["metadata"]["name"] for p in gateway_pods(control_plane, namespace)]
    url = control_plane.service_url(namespace, "mcpg-gateway") + "/mcp"

    accepted = await open_sessions(url, control_plane, namespace, pod)
    status = status_of(control_plane, namespace, pod)
    print(f"\nsessions accepted before the OOM kill: {accepted}; container status: {json.dumps(status)[:400]}")
    assert oom_killed(status), status
    terminated = status.get("lastState", {}).get("terminated") or status["state"]["terminated"]
    assert terminated["exitCode"] == 137

    # The kubelet restarts it, and it serves again through the Service.
    wait_until(
        lambda: (s := status_of(control_plane, namespace, pod)).get("restartCount", 0) >= 1 and bool(s.get("ready")),
        BOUND_S,
        "the OOM-killed gateway container restarted and Ready",
    )
    url = control_plane.service_url(namespace, "mcpg-gateway")
    assert httpx2.get(f"{url}/.well-known/mcp/server-card.json", timeout=10).status_code == 200
