"""Token rotation on running gateway pods, applied in place, judged from what senders and subscribers saw through
the Service.

A 3-replica gateway runs as real pods on the node, behind its ClusterIP Service (kube-proxy's rules). While the
operator rotates the webhook token, senders POST the webhook through the Service with the old and with the new
token (a fresh connection per request, from many source addresses, so the kernel's connection tracking names the
pod kube-proxy sent each one to), and one listener per pod holds a `subscriptions/listen` stream through the
Service (from a source address kube-proxy's ClientIP affinity sends to that pod). A sampler reads the API and each
Ready pod's acknowledgement (at its pod IP) meanwhile, for the moments that divide the rotation into stages:

    before     until the Secret edit
    accepting  from the edit until the WebhookToken says the token of the Secret's new resourceVersion is accepted
    accepted   from then until the configuration Secret drops the old token
    retiring   from then until every Ready pod acknowledges serving a configuration without it
    after      a few seconds more

The promise, asserted from the recorded responses: no refusal (nor any failed request) of the old token before the
configuration drops it, and a 404 for it once every pod has dropped it; a 200 for the new token from acceptance
on, from every pod; no listen stream ended and none opened again, each told of the webhook's fires throughout;
and no pod replaced or restarted, the Deployment's generation unchanged: a rotation now touches no pod template.
The leading operator is also SIGKILLed at the worst moments (after the new token is carried, before it is
accepted; after acceptance, before retirement); the rotation must still complete, under the next leader.

The sampler, the senders and the closing checks are `mcpg_testing.rotation`'s, shared with the rotation of a
signing secret (`test_signing_rotation_on_pods.py`).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
import yaml
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcpg_testing import rotation
from mcpg_testing.conntrack import ServiceConnections, client_addresses
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.release import ArmedKill, OperatorRelease
from mcpg_testing.rotation import (
    REPLICAS,
    WEBHOOK_PATH,
    Api,
    Delivery,
    Sampler,
    Traffic,
    answered_by,
    figures,
    send,
    stage,
)

URI = "rotation://reports"
RATE_PER_TOKEN = 12.0
"""Requests per second with each token: 24 in total, over the issue's floor of 20."""
CLIENT_TOKEN = "rotation-client-" + "c" * 24
SOURCES = 64
"""Senders' addresses: many senders from many addresses, as upstreams are (`conntrack.client_addresses`)."""
GAP_S = 2.0
"""The longest a listener may go without a notification while 12 to 24 fires a second reach its URI."""
TOKEN = "reports-token"


@dataclass
class Listener:
    """One listen stream held through the Service from `source`, and everything it saw."""

    source: str
    opened: list[float] = field(default_factory=list)
    """When each stream opened: one, if no stream ever ended."""
    ends: list[str] = field(default_factory=list)
    """How each stream ended: "answered" (the gateway ended it) or "dropped" (the connection broke)."""
    told: list[float] = field(default_factory=list)
    """When each notification arrived."""


@dataclass
class Moments(rotation.Moments):
    killed: list[tuple[str, float]] = field(default_factory=list)
    """Which kill, when."""


# -- manifests -----------------------------------------------------------------------------------------------


def manifests(grace_s: int) -> list[dict[str, Any]]:
    digest = hashlib.sha256(CLIENT_TOKEN.encode()).hexdigest()
    auth = {"principals": [{"token_sha256": digest, "principal_id": "subscriber", "trust_level": "verified"}]}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mcpg-gateway-auth"},
            "stringData": {"auth.yaml": yaml.safe_dump(auth)},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "WebhookToken",
            "metadata": {"name": TOKEN},
            "spec": {"secretRef": {"name": "reports-webhook"}, "generate": True, "gracePeriodSeconds": grace_s},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": "reports"},
            "spec": {
                "uri": URI,
                "backend": {"http": {"url": "http://127.0.0.1:9/reports.json"}},
                "watch": {"webhook": {"tokenRef": {"name": TOKEN}}},
            },
        },
    ]


def webhook_tokens(config_yaml: bytes) -> frozenset[str]:
    """The credentials this rotation moves: the watch's token and those still retiring."""
    strategy = rotation.watch_strategy(config_yaml)
    return frozenset([strategy["token"], *strategy.get("previous_tokens", [])])


# -- senders and listeners through the Service ---------------------------------------------------------------------


def unsigned(token: str) -> Callable[[], Delivery]:
    """Every delivery the same: an empty POST to the token's path."""
    return functools.partial(Delivery, WEBHOOK_PATH + token)


async def listen(url: str, listener: Listener, opened: asyncio.Event) -> None:
    """Hold a subscriptions/listen stream on URI through the Service from `listener.source`; should it end, listen
    again at once (and record it). Runs until cancelled."""
    headers = {"authorization": f"Bearer {CLIENT_TOKEN}"}
    while True:
        how = "answered"
        try:
            async with (
                httpx2.AsyncClient(
                    headers=headers,
                    timeout=httpx2.Timeout(10, read=None),
                    transport=httpx2.AsyncHTTPTransport(local_address=listener.source),
                ) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
                client.listen(resource_subscriptions=[URI]) as stream,
            ):
                listener.opened.append(time.monotonic())
                opened.set()
                async for _ in stream:
                    listener.told.append(time.monotonic())
        except asyncio.CancelledError:
            return
        except Exception:
            how = "dropped"
        listener.ends.append(how)


def one_source_per_pod(connections: ServiceConnections, sources: list[str]) -> dict[str, str]:
    """Pod IP -> a source address kube-proxy's ClientIP affinity sends to it, from the senders' connections so
    far (conntrack); every Ready pod must have one."""
    by_source = {client.rsplit(":", 1)[0]: pod for client, pod in connections.answered_by().items()}
    chosen: dict[str, str] = {}
    for source in sources:
        if source in by_source:
            chosen.setdefault(by_source[source], source)
    return chosen


def longest_gap(told: list[float], start: float, end: float) -> float:
    """The longest time in [start, end] without a notification."""
    points = [start, *(t for t in told if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(points))


# -- the test ----------------------------------------------------------------------------------------------------


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[Api]:
    api = Api(control_plane.kubeconfig)
    yield api
    api.close()


@pytest.mark.parametrize("kill", ["none", "after-edit", "after-acceptance"])
async def test_rotation_in_place_refuses_no_sender_ends_no_stream_and_replaces_no_pod(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str, api: Api, kill: str
) -> None:
    grace_s = 15 if kill == "after-acceptance" else 0  # a window between acceptance and retirement to kill in
    rotation.apply_and_wait(control_plane, namespace, manifests(grace_s), [TOKEN])
    secret_path = rotation.secret_path(namespace, "reports-webhook")
    old = api.secret_value(namespace, "reports-webhook")
    new = "rotated-" + os.urandom(20).hex()
    cluster_ip, port = control_plane.service_address(namespace, rotation.GATEWAY)
    base = f"http://{cluster_ip}:{port}"
    moments, traffic, stop = Moments(), Traffic(), asyncio.Event()
    loop = asyncio.get_running_loop()

    with (
        client_addresses(SOURCES) as sources,
        ServiceConnections(cluster_ip, port) as connections,
        Sampler(control_plane.kubeconfig, namespace, TOKEN, webhook_tokens) as sampler,
    ):
        until = sampler.wait
        first = await until("every pod serving the first token", lambda s: sampler.settled(s, frozenset({old})))
        senders = [
            asyncio.create_task(send(base, label, unsigned(t), traffic, stop, sources, RATE_PER_TOKEN))
            for label, t in (("old", old), ("new", new))
        ]
        await traffic.wait_sent(4 * RATE_PER_TOKEN)  # two seconds of traffic: sources to every pod
        await loop.run_in_executor(None, connections.poll)
        chosen = one_source_per_pod(connections, sources)
        assert set(chosen) == {p.ip for p in first.pods.values()}, "some pod got no sender's connection"
        listeners = [Listener(source) for source in chosen.values()]
        opened = [asyncio.Event() for _ in listeners]
        listening = [
            asyncio.create_task(listen(f"{base}/mcp", one, event)) for one, event in zip(listeners, opened, strict=True)
        ]
        async with asyncio.timeout(30):
            await asyncio.gather(*(event.wait() for event in opened))
        await traffic.wait_sent(len(traffic.sent) + 2 * RATE_PER_TOKEN)  # a second of traffic with the listeners

        armed: ArmedKill | None = None
        if kill != "none":
            armed = await loop.run_in_executor(None, operators.arm_kill)
            # Killed from the sampler's thread the moment a sample shows it: after the edit, the new token carried
            # by the configuration and not yet accepted; after acceptance, the old token still carried.
            window = {
                "after-edit": lambda s: new in s.config_credentials and not s.accepted,
                "after-acceptance": lambda s: s.accepted and old in s.config_credentials,
            }[kill]
            sampler.arm(window, armed.fire)
        moments.edit = time.monotonic()
        edited = await loop.run_in_executor(None, api.merge_patch, secret_path, {"stringData": {"token": new}})
        sampler.new_version = edited["metadata"]["resourceVersion"]

        if kill == "after-edit":
            await until("the new token carried", lambda s: new in s.config_credentials)
            await killed(loop, armed, moments, kill, sampler)
            seen = api.get(rotation.webhook_token_path(namespace, TOKEN))
            assert (seen["status"].get("accepted") or {}).get("secretResourceVersion") != sampler.new_version, (
                "the token was accepted before the kill"
            )
        accepted = await until("the new token accepted", lambda s: s.accepted)
        moments.accepted = accepted.read_at
        if kill == "after-acceptance":
            await killed(loop, armed, moments, kill, sampler)
        dropped = await until("the configuration to drop the old token", lambda s: old not in s.config_credentials)
        moments.dropped = dropped.t
        moments.last_with_old = sampler.last_carrying(old)
        assert all(at < moments.dropped for _, at in moments.killed), "the kill came after the old token's drop"
        done = await until(
            "every pod to serve it without the old token", lambda s: sampler.settled(s, frozenset({new}))
        )
        moments.done = done.acked_at
        await until("the status to say so", lambda s: s.status.get("phase") == "Ready" and not s.status["retiring"])
        await traffic.wait_sent(len(traffic.sent) + 4 * RATE_PER_TOKEN)  # two seconds of traffic after
        moments.end = time.monotonic()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), rotation.SENT_BOUND_S)
        for task in listening:  # a stream still open now is one the rotation did not end
            task.cancel()
        await asyncio.gather(*listening)
        samples = [s for s in sampler.samples if s.t >= first.t]
        last = samples[-1]
    pods = answered_by(connections, sampler.pod_names)
    sent = traffic.sent
    ends = collections.Counter(how for one in listeners for how in one.ends)
    gaps = [longest_gap(one.told, moments.edit, moments.end) for one in listeners]
    print(
        f"\nrotation in place (kill: {kill}): after the edit, accepted in {moments.accepted - moments.edit:.2f}s, "
        f"dropped from the configuration in {moments.dropped - moments.edit:.2f}s, retired by every pod in "
        f"{moments.done - moments.edit:.2f}s; kills {[(w, round(t - moments.edit, 2)) for w, t in moments.killed]} "
        f"s after the edit; {len(sent)} requests, per stage, token and status: {json.dumps(figures(sent, moments))}; "
        f"listen streams ended {dict(ends)}, notifications {[len(one.told) for one in listeners]}, longest gap "
        f"{max(gaps):.2f}s"
    )

    # 1. No refusal, and no failed request, of the old token answered before the configuration dropped it; once
    #    every pod had dropped it, a 404 from every pod.
    early_old = [s for s in sent if s.label == "old" and s.done < moments.last_with_old]
    assert {stage(s.t, moments) for s in early_old} >= {"before", "accepting"}
    assert [s for s in early_old if s.status != 200] == []
    late_old = [s for s in sent if s.label == "old" and s.t > moments.done]
    assert late_old
    assert [s for s in late_old if s.status != 404] == []
    # 2. From acceptance on, every request with the new token got a 200, and every pod answered some of them.
    late_new = [s for s in sent if s.label == "new" and s.t > moments.accepted]
    assert late_new
    assert [s for s in late_new if s.status != 200] == []
    assert {pods[s.client] for s in late_new if s.client in pods} == set(last.pods), "a pod answered no new token"
    # No request with either token failed outright at any stage (refused, reset or timed out).
    assert [s for s in sent if s.status is None] == []
    # 3. No listen stream ended, and none was opened again: one per pod, the same from before the edit to the end,
    #    told of the fires throughout.
    assert ends == {}
    assert [len(one.opened) for one in listeners] == [1] * REPLICAS
    assert all(one.opened[0] < moments.edit for one in listeners)
    assert max(gaps) < GAP_S, gaps
    # 4. No pod replaced, restarted or unready at any moment, and no new pod template.
    rotation.assert_pods_untouched(samples)
    # 5. Neither token reached a status, an Event, a workload, a log, or any replica's /metrics.
    gateway_ips = [p.ip for p in last.pods.values() if p.ip]
    rotation.assert_leaked_nowhere(control_plane, operators, namespace, gateway_ips, old, new)
    # 6. The rotation finished, and the status says so; after a kill, under another replica's lead.
    if armed is not None:
        assert operators.leader().pod_name != armed.pod.pod_name
    rotation.assert_rotated(api, namespace, TOKEN, new, sampler.new_version)
    retired = control_plane.kubectl(
        "-n", namespace, "get", "events", "--field-selector", "reason=TokenRetired", "-o", "json"
    ).stdout
    assert [e["involvedObject"]["name"] for e in json.loads(retired)["items"]] == [TOKEN]


async def killed(
    loop: asyncio.AbstractEventLoop,
    armed: ArmedKill | None,
    moments: Moments,
    when: str,
    sampler: Sampler,
) -> None:
    """Once the sampler has fired the armed kill: record it, keep the replica's log and delete its pod."""
    assert armed is not None
    await sampler.wait("the kill", lambda _: armed.killed_at is not None)
    assert armed.killed_at is not None
    moments.killed.append((when, armed.killed_at))
    await loop.run_in_executor(None, armed.finish)
