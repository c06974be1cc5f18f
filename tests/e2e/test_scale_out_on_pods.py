"""Scaled out on real pods: a 3-replica gateway and the operator's NATS bus, every container run by the real node.

The session operator runs gateways with 3 replicas, so it renders the bus for every namespace: an account on the
managed NATS server (`mcpg-bus` in the operator's namespace), the namespace's credentials Secret, the bus block in
the configuration (by `${env.NAME}`, never the password itself) and `sessionAffinity: ClientIP` on the Service.
Clients hold streams of both eras on each pod directly, at its pod IP (as ClientIP affinity pins a handshake-era
client to one pod) and a listen stream through the Service's ClusterIP; webhooks go through the Service and to
each pod in turn. Every client must be told exactly once per post, whichever pod received it; then a rollout in
the middle (new resources for the pods, through the namespace's McpGateway: what only a new pod template can
change; a new configuration is applied in place, `test_in_place_on_pods.py`): webhooks through the Service keep
being answered 200, and the new pods serve as one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import yaml

from mcpg_testing import installation
from mcpg_testing.clients import Subscription, legacy_client, listen_client, subscribe
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import GATEWAY_RESOURCES
from mcpg_testing.leaks import assert_absent
from mcpg_testing.pods import gateway_pods
from mcpg_testing.processes import wait_until
from mcpg_testing.release import OperatorRelease
from mcpg_testing.watching import WATCH_END, watching

URI, SENTINEL = "scaled://reports", "scaled://sentinel"
CLIENT_TOKEN = "scale-out-client-" + "s" * 24
HEADERS = {"authorization": f"Bearer {CLIENT_TOKEN}"}
ROLLOUT_S = 150.0
"""Bound on one rollout of 3 real pods."""


def manifests() -> list[dict[str, Any]]:
    digest = hashlib.sha256(CLIENT_TOKEN.encode()).hexdigest()
    auth = {"principals": [{"token_sha256": digest, "principal_id": "subscriber"}]}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mcpg-gateway-auth"},
            "stringData": {"auth.yaml": yaml.safe_dump(auth)},
        }
    ]
    for name, uri in (("reports", URI), ("sentinel", SENTINEL)):
        docs.append(
            {
                "apiVersion": "mcpg.dev/v1alpha1",
                "kind": "WebhookToken",
                "metadata": {"name": f"{name}-token"},
                "spec": {"secretRef": {"name": f"{name}-webhook"}, "generate": True},
            }
        )
        docs.append(
            {
                "apiVersion": "mcpg.dev/v1alpha1",
                "kind": "ResourceWatch",
                "metadata": {"name": name},
                "spec": {
                    "uri": uri,
                    "backend": {"http": {"url": "http://127.0.0.1:9/unused.json"}},
                    "watch": {"webhook": {"tokenRef": {"name": f"{name}-token"}}},
                },
            }
        )
    return docs


def get(plane: ControlPlane, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)
    return out


def token(plane: ControlPlane, ns: str, name: str) -> str:
    secret = get(plane, "-n", ns, "secret", f"{name}-webhook")
    return base64.b64decode(secret["data"]["token"]).decode()


async def post(url: str) -> int:
    async with httpx2.AsyncClient(timeout=10) as http:
        return (await http.post(url)).status_code


async def told_once_each(subs: list[Subscription], uri: str) -> None:
    """Every client's next notification is `uri` (bounded); a second one for the same post shows up later, in
    `assert_nothing_else` after the sentinel."""
    got = await asyncio.gather(*(s.next_update() for s in subs))
    assert got == [uri] * len(subs)


async def assert_nothing_else(subs: list[Subscription], sentinel_url: str) -> None:
    assert await post(sentinel_url) == 200
    got = await asyncio.gather(*(s.next_update() for s in subs))
    assert got == [SENTINEL] * len(subs), "a client was told something twice, or late"
    assert [s.drained() for s in subs] == [[] for _ in subs]


@contextlib.asynccontextmanager
async def clients_on(pods: dict[str, str], service: str) -> AsyncIterator[list[Subscription]]:
    """On each pod a handshake-era session and a listen stream, and one listen stream through the Service."""
    async with contextlib.AsyncExitStack() as stack:
        subs = []
        for base in pods.values():
            legacy = await stack.enter_async_context(legacy_client(f"{base}/mcp", HEADERS))
            for uri in (URI, SENTINEL):
                await subscribe(legacy, uri)
            subs.append(legacy)
            subs.append(await stack.enter_async_context(listen_client(f"{base}/mcp", [URI, SENTINEL], HEADERS)))
        subs.append(await stack.enter_async_context(listen_client(f"{service}/mcp", [URI, SENTINEL], HEADERS)))
        yield subs


async def test_three_replicas_serve_as_one_over_the_operators_bus_and_through_a_rollout(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str
) -> None:
    docs = "\n---\n".join(yaml.safe_dump(d) for d in manifests())
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=docs)
    for name in ("reports", "sentinel"):
        control_plane.kubectl(
            "-n", namespace, "wait", "--for=condition=Ready", f"resourcewatch/{name}", "--timeout=150s"
        )
    control_plane.kubectl(
        "-n", installation.OPERATOR_NAMESPACE, "rollout", "status", "deploy/mcpg-bus", f"--timeout={ROLLOUT_S:.0f}s"
    )

    # What the operator rendered: affinity, the credentials by reference, the account's password nowhere else.
    assert get(control_plane, "-n", namespace, "svc", "mcpg-gateway")["spec"]["sessionAffinity"] == "ClientIP"
    creds = get(control_plane, "-n", namespace, "secret", "mcpg-gateway-bus")["data"]
    password = base64.b64decode(creds["password"]).decode()
    deployment = get(control_plane, "-n", namespace, "deploy", "mcpg-gateway")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MCPG_BUS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "mcpg-gateway-bus"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    watches = get(control_plane, "-n", namespace, "resourcewatches")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    config_name = next(v["secret"]["secretName"] for v in volumes if "secret" in v)
    config = get(control_plane, "-n", namespace, "secret", config_name)["data"]
    config_text = "".join(base64.b64decode(v).decode() for v in config.values())
    assert "${env.MCPG_BUS_PASSWORD}" in config_text
    assert_absent(config_text, "the gateway configuration", password)
    assert_absent(json.dumps(deployment) + json.dumps(watches), "the Deployment and the ResourceWatches", password)

    service = control_plane.service_url(namespace, "mcpg-gateway")
    hook = f"/webhooks/resource-updated/{token(control_plane, namespace, 'reports')}"
    sentinel = f"{service}/webhooks/resource-updated/{token(control_plane, namespace, 'sentinel')}"
    # Ready means served by an available pod; the other replicas may still be starting.
    control_plane.kubectl(
        "-n", namespace, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={ROLLOUT_S:.0f}s"
    )
    pods = gateway_pods(control_plane, namespace)
    assert len(pods) == 3, pods

    async with clients_on(pods, service) as subs:
        assert await post(f"{service}{hook}") == 200
        await told_once_each(subs, URI)
        for base in pods.values():  # each pod in turn receives the webhook
            assert await post(f"{base}{hook}") == 200
            await told_once_each(subs, URI)
        await assert_nothing_else(subs, sentinel)

    await rollout_in_the_middle(control_plane, namespace, service, hook, sentinel, set(pods))


ROLLED_RESOURCES = {
    **GATEWAY_RESOURCES,
    "requests": {**GATEWAY_RESOURCES["requests"], "memory": "80Mi"},
}
"""The chart's gateway resources but for the memory request: a new pod template, so every pod is replaced."""


def mcp_gateway(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": {"name": "mcpg-gateway"}, "spec": spec}


async def rollout_in_the_middle(
    plane: ControlPlane, ns: str, service: str, hook: str, sentinel: str, old_pods: set[str]
) -> None:
    """New resources roll all 3 pods while a sender posts through the Service and a listener holds a listen stream
    through it, listening again whenever one ends: every stream the rollout ends is answered (`shutdown`), none
    dropped; afterwards the new pods serve as one."""
    statuses: list[int | str] = []
    ends: list[str] = []
    stop = asyncio.Event()

    async def sender() -> None:
        async with httpx2.AsyncClient(timeout=10) as http:
            while not stop.is_set():
                try:
                    statuses.append((await http.post(f"{service}{hook}", headers={"connection": "close"})).status_code)
                except httpx2.HTTPError as e:
                    statuses.append(type(e).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)  # a paced sender, not a wait for a condition

    tasks = [asyncio.create_task(sender()), asyncio.create_task(hold_listen(f"{service}/mcp", ends))]
    before = int(get(plane, "-n", ns, "deploy", "mcpg-gateway")["metadata"]["generation"])
    spec = {"replicas": 3, "resources": ROLLED_RESOURCES}
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin=yaml.safe_dump(mcp_gateway(spec)))
    started = time.monotonic()

    def new_template() -> bool:
        return int(get(plane, "-n", ns, "deploy", "mcpg-gateway")["metadata"]["generation"]) > before

    await asyncio.to_thread(wait_until, new_template, ROLLOUT_S, "the operator to apply the new resources", 0.2)
    await asyncio.to_thread(
        plane.kubectl, "-n", ns, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={ROLLOUT_S:.0f}s"
    )
    # A complete rollout may still have old pods draining (their preStop pause): their streams end once they go.
    await asyncio.to_thread(
        plane.kubectl, "-n", ns, "wait", "--for=delete", *(f"pod/{name}" for name in old_pods),
        f"--timeout={ROLLOUT_S:.0f}s",
    )  # fmt: skip
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    new_pods = gateway_pods(plane, ns)
    assert len(new_pods) == 3, new_pods
    assert not set(new_pods) & old_pods, "the rollout did not replace every pod"
    assert statuses, "no webhook was sent during the rollout"
    assert set(statuses) == {200}, f"webhooks during the rollout ({time.monotonic() - started:.0f} s): {statuses}"
    assert ends, "the rollout ended no listen stream"
    assert set(ends) == {"shutdown"}, ends
    async with clients_on(new_pods, service) as subs:
        for base in new_pods.values():
            assert await post(f"{base}{hook}") == 200
            await told_once_each(subs, URI)
        await assert_nothing_else(subs, sentinel)


async def hold_listen(url: str, ends: list[str]) -> None:
    """Hold a listen stream on URI; whenever one ends, record why (the reason its answer gave, or `dropped` if the
    connection broke without one) and listen again at once. Until cancelled."""
    while True:
        try:
            async with watching(url, "listen", [URI], HEADERS) as held:
                assert held.result is not None
                try:
                    result = await asyncio.shield(held.result)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    ends.append("dropped")
                else:
                    ends.append(str(((result.meta or {}).get(WATCH_END) or {}).get("reason")))
        except asyncio.CancelledError:
            return
        except Exception:  # not opened: the pod went away meanwhile, and kube-proxy sends the next one elsewhere
            continue


def bus_pod(plane: ControlPlane) -> tuple[str, str, list[int]]:
    """The managed bus's one running pod: name, uid and each container's restart count."""
    listed = get(plane, "-n", installation.OPERATOR_NAMESPACE, "pods", "-l", "app.kubernetes.io/name=mcpg-bus")
    [pod] = [p for p in listed["items"] if p["metadata"].get("deletionTimestamp") is None]
    restarts = [c["restartCount"] for c in pod["status"].get("containerStatuses", [])]
    return pod["metadata"]["name"], pod["metadata"]["uid"], restarts


def pod_log(plane: ControlPlane, ns: str, name: str, container: str = "*") -> str:
    """What a container of a pod printed (any of its containers' by default), over all its restarts."""
    return plane.pod_log(ns, name, container)


def reloads_of(plane: ControlPlane, bus: str) -> int:
    """How many times the bus pod's sidecar has reloaded its server so far."""
    log = pod_log(plane, installation.OPERATOR_NAMESPACE, bus, "config-reloader")
    return log.count("config-reloader: nats-server reloaded")


async def test_a_namespace_joining_the_bus_reloads_the_server_and_no_other_namespace_notices(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str
) -> None:
    """A second namespace gains its account by a reload of the running server (the sidecar), not a new server:
    the first namespace's gateways keep their connections, and the second's can publish through it."""
    docs = "\n---\n".join(yaml.safe_dump(d) for d in manifests())
    first, second = namespace, f"{namespace}-2"
    control_plane.kubectl("-n", first, "apply", "-f", "-", stdin=docs)
    control_plane.kubectl("-n", first, "wait", "--for=condition=Ready", "resourcewatch/reports", "--timeout=150s")
    control_plane.kubectl(
        "-n", installation.OPERATOR_NAMESPACE, "rollout", "status", "deploy/mcpg-bus", f"--timeout={ROLLOUT_S:.0f}s"
    )
    # Ready means served by an available pod; the other replicas may still be starting.
    control_plane.kubectl("-n", first, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={ROLLOUT_S:.0f}s")
    before = bus_pod(control_plane)
    first_pods = gateway_pods(control_plane, first)
    reloads = reloads_of(control_plane, before[0])
    control_plane.kubectl("create", "namespace", second)
    try:
        control_plane.kubectl("-n", second, "apply", "-f", "-", stdin=docs)
        control_plane.kubectl("-n", second, "wait", "--for=condition=Ready", "resourcewatch/reports", "--timeout=150s")
        hook = f"/webhooks/resource-updated/{token(control_plane, second, 'reports')}"
        control_plane.kubectl(
            "-n", second, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={ROLLOUT_S:.0f}s"
        )
        second_pods = gateway_pods(control_plane, second)
        assert len(second_pods) == 3, second_pods
        for base in second_pods.values():  # 200 only once the fire is on the bus: the account exists
            assert await post(f"{base}{hook}") == 200

        assert bus_pod(control_plane) == before, "the bus was replaced or restarted, not reloaded"
        assert reloads_of(control_plane, before[0]) > reloads, "the server joined the account without a reload?"
        for name in first_pods:
            assert "lost the bus" not in pod_log(control_plane, first, name), f"{name} lost its bus connection"
        assert gateway_pods(control_plane, first) == first_pods
    finally:
        control_plane.kubectl("delete", "namespace", second, "--wait=false", "--ignore-not-found")
