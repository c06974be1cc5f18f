"""Changes applied in place on real gateway pods: the sessions and streams open before a change are the ones that
carry its notifications after it, and only what a change takes away is ended.

The operator writes each namespace's configuration into one Secret that every gateway pod follows and applies
without a restart (issue 34). A client of each protocol era holds, through the gateway's Service, a webhook-watched
resource and a polled one (an HTTP upstream on the node's address, which the pods reach over the bridge): a
handshake-era session (resources/subscribe, told of list changes on its GET stream) and a `subscriptions/listen`
stream that asked for `resourcesListChanged`. With 3 replicas each client is pinned (ClientIP affinity) to a pod
of its own. Then, in turn, with 1 and with 3 replicas: a token rotation to its retirement, a ResourceWatch added,
a ResourceWatch's backend moved to another upstream path, a principal added. After each, both clients are still
told on the same session and stream; at the end no pod was replaced or restarted and the Deployment's generation
never moved, the listen stream never ended and every request of the session carried the one session id.

A change that takes something away ends exactly that: a principal removed from the auth Secret ends its listen
(`principal_removed`) and its handshake-era sessions (its next request is refused; the pods count one session
fewer), and a read policy edited to deny a URI someone holds ends that subscription (`access_revoked`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
import yaml
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing import upstream as upstreams
from mcpg_testing.conntrack import client_addresses, pinned_sources
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.nodeconfig import NODE_IP
from mcpg_testing.pods import ADMIN_PORT, GatewayPod, config_digest, gateway_pods_now, serving_everywhere
from mcpg_testing.processes import wait_until
from mcpg_testing.release import OperatorRelease
from mcpg_testing.upstream import Upstream
from mcpg_testing.watching import Watching, watching

HOOK, POLLED, ADDED, SECRET = "inplace://hook", "inplace://polled", "inplace://added", "inplace://secret"
ALICE, BOB = "inplace-alice-" + "a" * 24, "inplace-bob-" + "b" * 24
POLL_MS = 10_000
"""The poll floor (`POLL_FLOOR_MS`): a change on a polled backend is seen within this, plus a read."""
BOUND_S = 120.0
"""Bound on the operator's objects of a new namespace being served by every pod (3 real pods start)."""
APPLY_S = 60.0
"""Bound on a change reaching every pod's acknowledgement: seconds in place, on 2 busy cores."""
POLL_BOUND_S = 3 * POLL_MS / 1000
"""Bound on a polled change being told: an interval, the poll owner's lease on the bus, and slack."""
SOURCES = 80
"""Spare source addresses to find, four at a time, one that the Service's affinity sends to each pod."""


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def auth_secret(*principals: tuple[str, str]) -> dict[str, Any]:
    listed = [{"token_sha256": hashlib.sha256(t.encode()).hexdigest(), "principal_id": n} for n, t in principals]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "mcpg-gateway-auth"},
        "stringData": {"auth.yaml": yaml.safe_dump({"principals": listed})},
    }


def webhook_watch(name: str, uri: str, read_policy: str | None = None) -> list[dict[str, Any]]:
    """A ResourceWatch told by webhook, and the WebhookToken (generated, no grace period) it uses."""
    spec: dict[str, Any] = {
        "uri": uri,
        "backend": {"http": {"url": "http://127.0.0.1:9/unused"}},  # never read: only webhooks tell it
        "watch": {"webhook": {"tokenRef": {"name": f"{name}-token"}}},
    }
    if read_policy is not None:
        spec["readPolicy"] = read_policy
    return [
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "WebhookToken",
            "metadata": {"name": f"{name}-token"},
            "spec": {"secretRef": {"name": f"{name}-webhook"}, "generate": True},
        },
        {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": name}, "spec": spec},
    ]


def polled_watch(name: str, uri: str, url: str) -> dict[str, Any]:
    spec = {"uri": uri, "backend": {"http": {"url": url}}, "watch": {"poll": {"intervalMs": POLL_MS}}}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": name}, "spec": spec}


def mcp_gateway(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "McpGateway",
        "metadata": {"name": "mcpg-gateway"},
        "spec": {"replicas": replicas},
    }


# -- the cluster, as a user sees it ------------------------------------------------------------------------------


def apply(plane: ControlPlane, ns: str, *docs: dict[str, Any]) -> None:
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))


def get(plane: ControlPlane, ns: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", ns, "get", *what, "-o", "json").stdout)


def token_of(plane: ControlPlane, ns: str, name: str) -> str:
    return base64.b64decode(get(plane, ns, "secret", f"{name}-webhook")["data"]["token"]).decode()


def generation(plane: ControlPlane, ns: str) -> int:
    return int(get(plane, ns, "deployment", "mcpg-gateway")["metadata"]["generation"])


async def served_everywhere(plane: ControlPlane, ns: str, replicas: int, *names: str) -> str:
    """Once each ResourceWatch named is Ready and every pod serves the configuration Secret as it is: its digest."""
    await asyncio.to_thread(
        plane.kubectl, "-n", ns, "wait", "--for=condition=Ready", *(f"resourcewatch/{n}" for n in names),
        f"--timeout={BOUND_S:.0f}s",
    )  # fmt: skip
    return await applied(plane, ns, replicas, None)


async def applied(plane: ControlPlane, ns: str, replicas: int, before: str | None) -> str:
    """The digest of a configuration other than `before`, once the Secret holds it and every pod serves it."""
    found: list[str] = []

    def everywhere() -> bool:
        digest = serving_everywhere(plane, ns, replicas)
        found[:] = [digest] if digest is not None and digest != before else []
        return bool(found)

    await asyncio.to_thread(wait_until, everywhere, APPLY_S, "every pod to serve the new configuration", 0.2)
    return found[0]


async def post(url: str) -> int:
    async with httpx2.AsyncClient(timeout=10) as http:
        return (await http.post(url)).status_code


async def told(clients: list[Watching], uri: str) -> None:
    """Each client's next notification is about `uri` (bounded)."""
    assert [(await c.next()).uri for c in clients] == [uri] * len(clients)


async def not_told_a_list_change(clients: list[Watching], hook_url: str) -> None:
    """A fire of the hook after the change reaches each client with no list change before it: the gateway writes
    a list change on the same stream as the notifications, at the swap, so it would have come first."""
    assert await post(hook_url) == 200
    await told(clients, HOOK)
    assert [c.list_changes.qsize() for c in clients] == [0] * len(clients)


def pods_as_they_are(plane: ControlPlane, ns: str) -> dict[str, tuple[str, int]]:
    """Each gateway pod's uid and restarts: a replacement has another uid, a restart a higher count."""
    return {p.name: (p.uid, p.restarts) for p in gateway_pods_now(plane, ns).values()}


def sessions_on_pods(pods: list[GatewayPod]) -> float:
    """`mcpg_subscribers{kind="session"}` summed over the pods' /metrics (admin port, no token)."""
    total = 0.0
    for pod in pods:
        text = httpx2.get(f"http://{pod.ip}:{ADMIN_PORT}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            total += sum(
                s.value for s in family.samples if s.name == "mcpg_subscribers" and s.labels == {"kind": "session"}
            )
    return total


@contextlib.contextmanager
def pinned_addresses(plane: ControlPlane, ns: str, replicas: int) -> Iterator[list[str]]:
    """One source address per gateway pod, each sent by the Service's ClientIP affinity to a pod of its own; with
    one replica, the node's own address twice (every connection goes to the one pod)."""
    if replicas == 1:
        yield [NODE_IP, NODE_IP]
        return
    ip, port = plane.service_address(ns, "mcpg-gateway")
    with client_addresses(SOURCES) as sources:
        by_pod: dict[str, str] = {}
        unused = iter(sources)

        def every_pod_reached() -> bool:
            # New sources each round: a source stays with the pod it first reached, and a pod that just became
            # Ready may not be in kube-proxy's rules yet.
            batch = [next(unused) for _ in range(4)]
            for pod, found in pinned_sources(ip, port, batch).items():
                by_pod.setdefault(pod, found[0])
            return len(by_pod) == replicas

        wait_until(every_pod_reached, 8.0, f"sources reaching each of the {replicas} pods", 0.5)
        yield list(by_pod.values())


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    """An upstream on the node's address: a pod's loopback is its own."""
    async with upstreams.serve(NODE_IP) as served:
        yield served


# -- changes that take nothing away -----------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 3])
async def test_changes_applied_in_place_keep_every_session_and_stream_and_restart_no_pod(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, upstream: Upstream, replicas: int
) -> None:
    plane, ns = control_plane, namespace
    upstream.set("/a.json", '{"from": "a"}')
    upstream.set("/b.json", '{"from": "b", "different": true}')
    apply(
        plane,
        ns,
        mcp_gateway(replicas),
        auth_secret(("alice", ALICE)),
        *webhook_watch("hook", HOOK),
        polled_watch("polled", POLLED, f"{upstream.url}/a.json"),
    )
    digest = await served_everywhere(plane, ns, replicas, "hook", "polled")
    service = plane.service_url(ns, "mcpg-gateway")
    hook_url = f"{service}/webhooks/resource-updated/{token_of(plane, ns, 'hook')}"
    pods_before, generation_before = pods_as_they_are(plane, ns), generation(plane, ns)
    assert len(pods_before) == replicas
    session_ids: list[str | None] = []
    took: dict[str, float] = {}
    """Seconds from each change to every pod serving it."""
    with pinned_addresses(plane, ns, replicas) as (legacy_from, listen_from, *_):
        async with (
            watching(
                f"{service}/mcp", "legacy", [HOOK, POLLED], bearer(ALICE), list_changed=True,
                local_address=legacy_from, session_ids=session_ids,
            ) as legacy,
            watching(
                f"{service}/mcp", "listen", [HOOK, POLLED], bearer(ALICE), list_changed=True, local_address=listen_from
            ) as listen,
        ):  # fmt: skip
            clients = [legacy, listen]
            assert await post(hook_url) == 200
            await told(clients, HOOK)

            # (a) The webhook token rotated, to its retirement: the new token tells them, the old one is refused.
            old = token_of(plane, ns, "hook")
            started = time.monotonic()
            new = "rotated-" + os.urandom(20).hex()
            edited = plane.set_secret_token(ns, "hook-webhook", new)
            path = "{.status.accepted.secretResourceVersion}"
            await asyncio.to_thread(
                plane.kubectl, "-n", ns, "wait", f"--for=jsonpath={path}={edited}", "webhooktoken/hook-token",
                f"--timeout={APPLY_S:.0f}s",
            )  # fmt: skip
            await asyncio.to_thread(
                plane.kubectl, "-n", ns, "wait", "--for=jsonpath={.status.retiringCount}=0", "webhooktoken/hook-token",
                f"--timeout={APPLY_S:.0f}s",
            )  # fmt: skip
            digest = await applied(plane, ns, replicas, digest)
            took["rotation"] = time.monotonic() - started
            hook_url = f"{service}/webhooks/resource-updated/{new}"
            assert await post(f"{service}/webhooks/resource-updated/{old}") == 404
            await not_told_a_list_change(clients, hook_url)  # the same resources, to the same principal

            # (b) A ResourceWatch added: both are told their list changed; the session may subscribe to it.
            started = time.monotonic()
            apply(plane, ns, *webhook_watch("added", ADDED))
            digest = await served_everywhere(plane, ns, replicas, "added")
            took["watch added"] = time.monotonic() - started
            for client in clients:
                async with asyncio.timeout(10):
                    await client.list_changes.get()
            listed = await legacy.client.session.list_resources()
            assert ADDED in {str(r.uri) for r in listed.resources}
            await legacy.subscribe(ADDED)
            assert await post(f"{service}/webhooks/resource-updated/{token_of(plane, ns, 'added')}") == 200
            assert (await legacy.next()).uri == ADDED
            await not_told_a_list_change(clients, hook_url)  # told once

            # (c) The polled watch's backend moved to another path with other content: told once, then a change
            #     on the new path is told.
            started = time.monotonic()
            apply(plane, ns, polled_watch("polled", POLLED, f"{upstream.url}/b.json"))
            digest = await applied(plane, ns, replicas, digest)
            took["backend moved"] = time.monotonic() - started
            async with asyncio.timeout(POLL_BOUND_S):
                await told(clients, POLLED)
            await not_told_a_list_change(clients, hook_url)  # and not a second time
            upstream.set("/b.json", '{"from": "b", "changed": true}')
            async with asyncio.timeout(POLL_BOUND_S):
                assert [(await c.notes.get()).uri for c in clients] == [POLLED, POLLED]
            assert upstream.hits.get("/b.json", 0) >= 2

            # (d) A principal added: the others' lists did not change; the new one may listen at once.
            started = time.monotonic()
            apply(plane, ns, auth_secret(("alice", ALICE), ("bob", BOB)))
            digest = await applied(plane, ns, replicas, digest)
            took["principal added"] = time.monotonic() - started
            async with watching(f"{service}/mcp", "listen", [HOOK], bearer(BOB)) as bob:
                assert await post(hook_url) == 200
                await told([*clients, bob], HOOK)
            await not_told_a_list_change(clients, hook_url)

            # The same pods, never restarted, and no new template; the same stream and the same session throughout.
            assert pods_as_they_are(plane, ns) == pods_before
            assert generation(plane, ns) == generation_before
            assert listen.open
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # ping is the handshake era's
                await legacy.client.send_ping()  # a request the session answers: its id is still valid
    first, *later = session_ids
    assert first is None  # the initialize request opens the session
    assert later
    assert set(later) == {later[0]}, session_ids
    print(
        f"\nin place ({replicas} replicas): seconds from each change to every pod serving it "
        f"{ {k: round(v, 2) for k, v in took.items()} }; {len(later)} requests on one session"
    )
    assert (legacy.notes.qsize(), listen.notes.qsize()) == (0, 0)
    assert config_digest(plane, ns) == digest


# -- changes that take something away ---------------------------------------------------------------------------


async def test_a_removed_principal_and_a_revoked_read_end_exactly_what_they_take_away(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    plane, ns, replicas = control_plane, namespace, 3
    everyone = 'subscriber.principal_id in ["alice", "bob"]'
    apply(
        plane,
        ns,
        auth_secret(("alice", ALICE), ("bob", BOB)),
        *webhook_watch("hook", HOOK),
        *webhook_watch("secret", SECRET, read_policy=everyone),
    )
    digest = await served_everywhere(plane, ns, replicas, "hook", "secret")
    service = plane.service_url(ns, "mcpg-gateway")
    hook_url = f"{service}/webhooks/resource-updated/{token_of(plane, ns, 'hook')}"
    pods = [p for p in gateway_pods_now(plane, ns).values() if p.ready]
    async with (
        watching(f"{service}/mcp", "listen", [SECRET, HOOK], bearer(ALICE)) as alice,
        watching(f"{service}/mcp", "listen", [HOOK], bearer(BOB)) as bob,
        watching(f"{service}/mcp", "legacy", [HOOK], bearer(BOB)) as bob_session,
    ):
        assert await post(hook_url) == 200
        await told([alice, bob, bob_session], HOOK)
        sessions = await asyncio.to_thread(sessions_on_pods, pods)
        assert sessions == 1  # bob's, which subscribed

        # Bob is removed: his listen is answered, saying why, and his session ends; alice's stream stays.
        apply(plane, ns, auth_secret(("alice", ALICE)))
        digest = await applied(plane, ns, replicas, digest)
        end = (await bob.ended())["dev.mcpg/watch-end"]
        assert (end["reason"], end["uris"]) == ("principal_removed", [HOOK])
        with pytest.raises(MCPError):
            await bob_session.client.session.list_resources()
        await asyncio.to_thread(
            wait_until, lambda: sessions_on_pods(pods) == sessions - 1, APPLY_S, "the session to be ended", 0.2
        )
        assert await post(hook_url) == 200
        await told([alice], HOOK)
        assert alice.open

        # The secret resource's read policy now denies alice: that subscription ends, saying why.
        apply(plane, ns, *webhook_watch("secret", SECRET, read_policy='subscriber.principal_id == "bob"'))
        await applied(plane, ns, replicas, digest)
        end = (await alice.ended())["dev.mcpg/watch-end"]
        assert (end["reason"], end["uris"]) == ("access_revoked", [SECRET])
