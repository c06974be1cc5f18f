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
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcpg_gateway.contract.acknowledgement import Acknowledgement
from mcpg_testing.conntrack import ServiceConnections, client_addresses
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.leaks import assert_absent, assert_not_logged
from mcpg_testing.pods import ADMIN_PORT, GATEWAY_SELECTOR, GatewayPod, gateway_pod
from mcpg_testing.release import ArmedKill, OperatorRelease

URI = "rotation://reports"
RATE_PER_TOKEN = 12.0
"""Requests per second with each token: 24 in total, over the issue's floor of 20."""
REPLICAS = 3
"""The session's gateway replicas (`fixtures.CHART_VALUES`)."""
BOUND_S = 90.0
"""Bound on each stage of the rotation: seconds in place, more with a leader killed (its Lease runs out first)."""
CLIENT_TOKEN = "rotation-client-" + "c" * 24
SOURCES = 64
"""Senders' addresses: many senders from many addresses, as upstreams are (`conntrack.client_addresses`)."""
GAP_S = 2.0
"""The longest a listener may go without a notification while 12 to 24 fires a second reach its URI."""
CONFIG_SECRET = "mcpg-gateway-config"


@dataclass
class Sent:
    t: float
    """When the request began (before its connection)."""
    token: str
    """"old" or "new"."""
    status: int | None
    """None: the request failed (refused, reset, timed out)."""
    client: str
    done: float = 0.0
    """When its answer (or failure) was in."""
    error: str = ""


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
class Sample:
    t: float
    """When the sample began: before the configuration Secret was read."""
    config_tokens: frozenset[str]
    config_digest: str
    accepted: bool
    """status.accepted names the Secret's resourceVersion after the edit, and TokenAccepted is True."""
    read_at: float
    """When the WebhookToken's status had been read (its answer in)."""
    status: dict[str, Any]
    pods: dict[str, GatewayPod] = field(default_factory=dict)
    """Every gateway pod not being deleted, by name."""
    serving: dict[str, str | None] = field(default_factory=dict)
    """Ready pod -> the digest its acknowledgement serves (None: no answer)."""
    acked_at: float = 0.0
    """When every Ready pod's acknowledgement had been read."""
    generation: int = 0
    """The gateway Deployment's metadata.generation."""


@dataclass
class Moments:
    edit: float = 0.0
    accepted: float = 0.0
    """The answer in of the first status read saying the new token is accepted: every pod accepted it before."""
    last_with_old: float = 0.0
    """The start of the last sample whose configuration Secret still held the old token: no pod had dropped it."""
    dropped: float = 0.0
    done: float = 0.0
    """Every Ready pod's acknowledgement read, each serving a configuration without the old token."""
    end: float = 0.0
    killed: list[tuple[str, float]] = field(default_factory=list)


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
            "metadata": {"name": "reports-token"},
            "spec": {"secretRef": {"name": "reports-webhook"}, "generate": True, "gracePeriodSeconds": grace_s},
        },
        {
            "apiVersion": "mcpg.dev/v1alpha1",
            "kind": "ResourceWatch",
            "metadata": {"name": "reports"},
            "spec": {
                "uri": URI,
                "backend": {"http": {"url": "http://127.0.0.1:9/reports.json"}},
                "watch": {"webhook": {"tokenRef": {"name": "reports-token"}}},
            },
        },
    ]


# -- the API and the pods, sampled -------------------------------------------------------------------------------


class Api:
    """Fast reads with the admin token, so the sampler sees many states of a rotation; one per thread."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        self.http = httpx2.Client(
            base_url=cfg["clusters"][0]["cluster"]["server"],
            headers={"authorization": f"Bearer {cfg['users'][0]['user']['token']}"},
            verify=False,
            timeout=10,
        )

    def get(self, path: str) -> Any:
        resp = self.http.get(path)
        resp.raise_for_status()
        return resp.json()

    def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        resp = self.http.patch(path, json=body, headers={"content-type": "application/merge-patch+json"})
        resp.raise_for_status()
        return resp.json()


def webhook_tokens(config_yaml: bytes) -> frozenset[str]:
    [res] = yaml.safe_load(config_yaml)["mcp"]["capabilities"]["resources"]
    strategy = res["watch"]["strategy"]
    return frozenset([strategy["token"], *strategy.get("previous_tokens", [])])


def condition(status: dict[str, Any], type_: str) -> str | None:
    return next((c["status"] for c in status.get("conditions", []) if c["type"] == type_), None)


class Sampler:
    """Samples the API and every Ready pod's acknowledgement on a thread until stopped. `wait_for(predicate)`
    blocks until a sample satisfies it; `arm(predicate, action)` runs `action` on the sampler's own thread as soon
    as the first half of a sample (the configuration Secret and the WebhookToken, read first) satisfies it."""

    def __init__(self, kubeconfig: Path, ns: str) -> None:
        self.api, self.ns = Api(kubeconfig), ns
        self.acks = httpx2.Client(timeout=2)
        self.new_version: str | None = None
        """The token Secret's resourceVersion after the edit, once made."""
        self.samples: list[Sample] = []
        self.tokens_by_digest: dict[str, frozenset[str]] = {}
        """Every configuration digest seen in the Secret -> the webhook tokens it carries."""
        self.pod_names: dict[str, str] = {}
        """Pod IP -> name of every pod any sample listed."""
        self._trigger: tuple[Callable[[Sample], bool], Callable[[], object]] | None = None
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="api sampler", daemon=True)

    def arm(self, predicate: Callable[[Sample], bool], action: Callable[[], object]) -> None:
        with self._changed:
            self._trigger = (predicate, action)

    def _read(self) -> Sample:
        ns = f"/api/v1/namespaces/{self.ns}"
        t = time.monotonic()
        config = self.api.get(f"{ns}/secrets/{CONFIG_SECRET}")
        status = self.api.get(f"/apis/mcpg.dev/v1alpha1/namespaces/{self.ns}/webhooktokens/reports-token")
        status = status.get("status", {})
        read_at = time.monotonic()
        accepted = (
            self.new_version is not None
            and (status.get("accepted") or {}).get("secretResourceVersion") == self.new_version
            and condition(status, "TokenAccepted") == "True"
        )
        digest = config["metadata"]["annotations"]["mcpg.dev/config-digest"]
        tokens = webhook_tokens(base64.b64decode(config["data"]["gateway.yaml"]))
        sample = Sample(t, tokens, digest, accepted, read_at, status)
        self._fire_trigger(sample)
        listed = self.api.get(f"{ns}/pods?labelSelector={GATEWAY_SELECTOR}")["items"]
        live = [gateway_pod(p) for p in listed if not p["metadata"].get("deletionTimestamp")]
        sample.pods = {p.name: p for p in live}
        sample.serving = {p.name: self._serving(p.ip) for p in sample.pods.values() if p.ready and p.ip}
        sample.acked_at = time.monotonic()
        deployment = self.api.get(f"/apis/apps/v1/namespaces/{self.ns}/deployments/mcpg-gateway")
        sample.generation = int(deployment["metadata"]["generation"])
        return sample

    def _serving(self, ip: str | None) -> str | None:
        try:
            resp = self.acks.get(f"http://{ip}:{ADMIN_PORT}/admin/v1/configuration")
            serving = Acknowledgement.model_validate_json(resp.content).serving
        except (httpx2.HTTPError, ValueError):
            return None
        return serving.digest if serving is not None else None

    def _fire_trigger(self, sample: Sample) -> None:
        with self._changed:
            trigger = self._trigger
            if trigger is not None and trigger[0](sample):
                self._trigger = None
                trigger[1]()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample = self._read()
            except (KeyError, httpx2.HTTPError):
                continue  # torn by a concurrent change: read again
            with self._changed:
                self.samples.append(sample)
                self.tokens_by_digest[sample.config_digest] = sample.config_tokens
                self.pod_names.update({p.ip: p.name for p in sample.pods.values() if p.ip})
                self._changed.notify_all()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.api.http.close()
        self.acks.close()

    def wait_for(self, what: str, predicate: Callable[[Sample], bool], timeout: float = BOUND_S) -> Sample:
        deadline = time.monotonic() + timeout
        seen = len(self.samples)
        with self._changed:
            while True:
                for sample in self.samples[seen:]:
                    if predicate(sample):
                        return sample
                seen = len(self.samples)
                left = deadline - time.monotonic()
                if left <= 0:
                    last = self.samples[-1] if self.samples else None
                    raise AssertionError(f"timed out waiting for {what}; last sample {last}")
                self._changed.wait(left)

    def settled(self, sample: Sample, tokens: frozenset[str]) -> bool:
        """Every gateway pod Ready, each serving a configuration whose tokens are `tokens`, and the Secret's too."""
        ready = [p for p in sample.pods.values() if p.ready]
        return (
            sample.config_tokens == tokens
            and len(ready) == REPLICAS
            and all(self.tokens_by_digest.get(d or "") == tokens for d in sample.serving.values())
        )


# -- traffic through the Service -------------------------------------------------------------------------------


class Traffic:
    """What the senders recorded; `wait_sent(n)` returns once n responses are in, bounded."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._changed = asyncio.Condition()

    async def record(self, sent: Sent) -> None:
        sent.done = time.monotonic()
        self.sent.append(sent)
        async with self._changed:
            self._changed.notify_all()

    async def wait_sent(self, count: float) -> None:
        async with asyncio.timeout(30), self._changed:
            await self._changed.wait_for(lambda: len(self.sent) >= count)


async def send(
    base: str, label: str, token: str, traffic: Traffic, stop: asyncio.Event, sources: Iterable[str]
) -> None:
    """POST the webhook RATE_PER_TOKEN times a second, each on a new connection from the next of `sources`,
    recording status and client."""
    host, port = base.removeprefix("http://").split(":")
    pending: set[asyncio.Task[None]] = set()
    next_at = time.monotonic()
    path = f"/webhooks/resource-updated/{token}"
    for source in itertools.cycle(sources):
        if stop.is_set():
            break
        task = asyncio.create_task(_post(host, int(port), source, path, label, traffic))
        pending.add(task)
        task.add_done_callback(pending.discard)
        next_at += 1 / RATE_PER_TOKEN
        # This paces the load; it waits for no outcome, and the stop event ends it at once.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(next_at - time.monotonic(), 0))
    await asyncio.gather(*pending)


async def _post(host: str, port: int, source: str, path: str, label: str, traffic: Traffic) -> None:
    """One HTTP/1.1 POST on its own connection from `source`, over plain asyncio streams: the client address it
    went from is what conntrack names the answering pod by. Senders cycle through many sources: the Service has
    ClientIP affinity (3 replicas), so kube-proxy would send everything from one source address to one pod."""
    t, client = time.monotonic(), ""
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            client = "{}:{}".format(*writer.get_extra_info("sockname")[:2])
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            status_line = await reader.readline()
            await reader.read()  # to the end: the server closes after its response
            writer.close()
        status = int(status_line.split()[1])
    except (OSError, TimeoutError, IndexError, ValueError) as e:
        await traffic.record(Sent(t, label, None, client, error=repr(e)))
    else:
        await traffic.record(Sent(t, label, status, client))


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


# -- the pods that answered ------------------------------------------------------------------------------------


def answered_by(connections: ServiceConnections, pod_names: dict[str, str]) -> dict[str, str]:
    """Client address -> the pod kube-proxy sent that connection to (conntrack's reply source, by name)."""
    return {client: pod_names[ip] for client, ip in connections.answered_by().items() if ip in pod_names}


def stage(t: float, m: Moments) -> str:
    if t < m.edit:
        return "before"
    if t < m.accepted:
        return "accepting"
    if t < m.dropped:
        return "accepted"
    if t < m.done:
        return "retiring"
    return "after"


def figures(sent: list[Sent], m: Moments) -> dict[str, dict[str, dict[str, int]]]:
    """Stage -> token -> status (or "failed") -> count."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for s in sent:
        counts = out.setdefault(stage(s.t, m), {}).setdefault(s.token, {})
        key = str(s.status) if s.status is not None else "failed"
        counts[key] = counts.get(key, 0) + 1
    return out


def longest_gap(told: list[float], start: float, end: float) -> float:
    """The longest time in [start, end] without a notification."""
    points = [start, *(t for t in told if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(points))


# -- the test ----------------------------------------------------------------------------------------------------


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[Api]:
    api = Api(control_plane.kubeconfig)
    yield api
    api.http.close()


@pytest.mark.parametrize("kill", ["none", "after-edit", "after-acceptance"])
async def test_rotation_in_place_refuses_no_sender_ends_no_stream_and_replaces_no_pod(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str, api: Api, kill: str
) -> None:
    grace_s = 15 if kill == "after-acceptance" else 0  # a window between acceptance and retirement to kill in
    docs = "\n---\n".join(yaml.safe_dump(d) for d in manifests(grace_s))
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=docs)
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/reports", "--timeout=150s")
    control_plane.kubectl(
        "-n", namespace, "wait", "--for=condition=TokenAccepted", "webhooktoken/reports-token", "--timeout=150s"
    )
    secret_path = f"/api/v1/namespaces/{namespace}/secrets/reports-webhook"
    old = base64.b64decode(api.get(secret_path)["data"]["token"]).decode()
    new = "rotated-" + os.urandom(20).hex()
    new_digest = hashlib.sha256(new.encode()).hexdigest()[:12]
    cluster_ip, port = control_plane.service_address(namespace, "mcpg-gateway")
    base = f"http://{cluster_ip}:{port}"
    moments, traffic, stop = Moments(), Traffic(), asyncio.Event()
    loop = asyncio.get_running_loop()

    async def until(what: str, predicate: Callable[[Sample], bool]) -> Sample:
        return await loop.run_in_executor(None, sampler.wait_for, what, predicate)

    with (
        client_addresses(SOURCES) as sources,
        ServiceConnections(cluster_ip, port) as connections,
        Sampler(control_plane.kubeconfig, namespace) as sampler,
    ):
        first = await until("every pod serving the first token", lambda s: sampler.settled(s, frozenset({old})))
        senders = [
            asyncio.create_task(send(base, label, t, traffic, stop, sources))
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
                "after-edit": lambda s: new in s.config_tokens and not s.accepted,
                "after-acceptance": lambda s: s.accepted and old in s.config_tokens,
            }[kill]
            sampler.arm(window, armed.fire)
        moments.edit = time.monotonic()
        edited = await loop.run_in_executor(None, api.merge_patch, secret_path, {"stringData": {"token": new}})
        sampler.new_version = edited["metadata"]["resourceVersion"]

        if kill == "after-edit":
            await until("the new token carried", lambda s: new in s.config_tokens)
            await killed(loop, armed, moments, kill, sampler)
            seen = api.get(f"/apis/mcpg.dev/v1alpha1/namespaces/{namespace}/webhooktokens/reports-token")
            assert (seen["status"].get("accepted") or {}).get("secretResourceVersion") != sampler.new_version, (
                "the token was accepted before the kill"
            )
        accepted = await until("the new token accepted", lambda s: s.accepted)
        moments.accepted = accepted.read_at
        if kill == "after-acceptance":
            await killed(loop, armed, moments, kill, sampler)
        dropped = await until("the configuration to drop the old token", lambda s: old not in s.config_tokens)
        moments.dropped = dropped.t
        moments.last_with_old = max(s.t for s in sampler.samples if old in s.config_tokens)
        assert all(at < moments.dropped for _, at in moments.killed), "the kill came after the old token's drop"
        done = await until(
            "every pod to serve it without the old token", lambda s: sampler.settled(s, frozenset({new}))
        )
        moments.done = done.acked_at
        await until("the status to say so", lambda s: s.status.get("phase") == "Ready" and not s.status["retiring"])
        await traffic.wait_sent(len(traffic.sent) + 4 * RATE_PER_TOKEN)  # two seconds of traffic after
        moments.end = time.monotonic()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), 30)
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
    early_old = [s for s in sent if s.token == "old" and s.done < moments.last_with_old]
    assert {stage(s.t, moments) for s in early_old} >= {"before", "accepting"}
    assert [s for s in early_old if s.status != 200] == []
    late_old = [s for s in sent if s.token == "old" and s.t > moments.done]
    assert late_old
    assert [s for s in late_old if s.status != 404] == []
    # 2. From acceptance on, every request with the new token got a 200, and every pod answered some of them.
    late_new = [s for s in sent if s.token == "new" and s.t > moments.accepted]
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
    assert all({p.uid for p in s.pods.values() if p.ready} == {p.uid for p in first.pods.values()} for s in samples), (
        "a gateway pod was replaced, or was not Ready, during the rotation"
    )
    assert {p.name: p.restarts for p in last.pods.values()} == {p.name: p.restarts for p in first.pods.values()}
    assert last.generation == first.generation
    # 5. Neither token reached a status, an Event, a workload, a log, or any replica's /metrics.
    objects_yaml = "".join(
        control_plane.kubectl("-n", namespace, "get", kind, "-o", "yaml").stdout
        for kind in ("resourcewatches", "webhooktokens", "events", "deployments", "replicasets", "pods", "services")
    )
    assert_absent(objects_yaml, "the namespace's objects", old, new)
    assert_not_logged(operators.log, old, new)
    for replica in operators.processes:
        assert_absent(str(replica.metrics()), f"{replica.pod_name}'s /metrics", old, new)
    logs = control_plane.pod_logs(namespace)
    assert logs
    for path in logs:
        assert_absent(path.read_text(errors="replace"), str(path), old, new)
    assert_not_logged(control_plane.log("kubelet"), old, new)
    # 6. The rotation finished, and the status says so; after a kill, under another replica's lead.
    if armed is not None:
        assert operators.leader().pod_name != armed.pod.pod_name
    status = api.get(f"/apis/mcpg.dev/v1alpha1/namespaces/{namespace}/webhooktokens/reports-token")["status"]
    assert (status["phase"], status["retiringCount"], status["currentDigest"]) == ("Ready", 0, new_digest)
    assert status["accepted"]["secretResourceVersion"] == sampler.new_version == status["secretResourceVersion"]
    retired = control_plane.kubectl(
        "-n", namespace, "get", "events", "--field-selector", "reason=TokenRetired", "-o", "json"
    ).stdout
    assert [e["involvedObject"]["name"] for e in json.loads(retired)["items"]] == ["reports-token"]


async def killed(
    loop: asyncio.AbstractEventLoop,
    armed: ArmedKill | None,
    moments: Moments,
    when: str,
    sampler: Sampler,
) -> None:
    """Once the sampler has fired the armed kill: record it, keep the replica's log and delete its pod."""
    assert armed is not None
    await loop.run_in_executor(None, sampler.wait_for, "the kill", lambda _: armed.killed_at is not None)
    assert armed.killed_at is not None
    moments.killed.append((when, armed.killed_at))
    await loop.run_in_executor(None, armed.finish)
