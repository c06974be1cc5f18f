"""Token rotation on running gateway pods, judged from what senders and subscribers saw through the Service.

A 3-replica gateway runs as real pods on the node, behind its ClusterIP Service (kube-proxy's rules). While the
operator rotates the webhook token, senders POST the webhook through the Service with the old and with the new
token (a fresh connection per request, from many source addresses, so the kernel's connection tracking names the
pod kube-proxy sent each one to), and subscribers hold `subscriptions/listen` streams through the Service,
listening again as soon as one ends. A sampler reads the API meanwhile, for the moments that divide the rotation
into stages (and each pod's address, to name the pods that answered):

    before    until the Secret edit
    rolling   from the edit until the WebhookToken reports the new token accepted
    accepted  from then until the retirement rollout begins (the template drops the old token)
    retiring  from then until every available pod accepts only the new token

The promise, asserted from the recorded responses: no refusal (nor any failed request) for the old token before
the retirement rollout begins; a 200 for the new token from every pod that answered from acceptance on, and from
each pod of the both-tokens ReplicaSet; every listen stream a rollout ends is answered (not dropped) and listened
to again at once. The operator is also SIGKILLed at the worst moment (after the edit, before the first rollout
completes) and at the second worst (after acceptance, before retirement); the rotation must still complete.
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

from mcpg_testing.conntrack import ServiceConnections, client_addresses
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.leaks import assert_absent, assert_not_logged
from mcpg_testing.release import OperatorRelease

URI = "rotation://reports"
RATE_PER_TOKEN = 12.0
"""Requests per second with each token: 24 in total, over the issue's floor of 20."""
LISTENERS = 3
BOUND_S = 150.0
"""Bound on the whole rotation: two rollouts of 3 real pods, each pod Ready after its first passing probe."""
CLIENT_TOKEN = "rotation-client-" + "c" * 24
SOURCES = 64
"""Senders' addresses: many senders from many addresses, as upstreams are (`conntrack.client_addresses`)."""


@dataclass
class Sent:
    t: float
    token: str
    """"old" or "new"."""
    status: int | None
    """None: the request failed (refused, reset, timed out)."""
    client: str
    error: str = ""


@dataclass
class ListenEnd:
    opened: float
    ended: float
    how: str
    """"answered": the gateway ended the stream; "dropped": the connection broke; "refused": never opened."""
    events: int
    detail: str = ""


@dataclass
class Sample:
    t: float
    template: frozenset[str]
    accepted: bool
    available_pods: dict[str, frozenset[str]]
    """Available pod -> the tokens its ReplicaSet's configuration accepts."""
    names: dict[str, str] = field(default_factory=dict)
    """Pod IP -> pod name, of every pod listed that had an address."""


@dataclass
class Moments:
    edit: float = 0.0
    accepted: float = 0.0
    retiring: float = 0.0
    done: float = 0.0
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


# -- the API, sampled --------------------------------------------------------------------------------------------


class Api:
    """Fast reads with the admin token, so the sampler sees many states of a rotation."""

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


def webhook_tokens(config_yaml: bytes) -> frozenset[str]:
    [res] = yaml.safe_load(config_yaml)["mcp"]["capabilities"]["resources"]
    strategy = res["watch"]["strategy"]
    return frozenset([strategy["token"], *strategy.get("previous_tokens", [])])


def config_secret(workload: dict[str, Any]) -> str:
    [vol] = [v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    return str(vol["secret"]["secretName"])


def available(pod: dict[str, Any]) -> bool:
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))
    return ready and not pod["metadata"].get("deletionTimestamp")


def read_sample(api: Api, ns: str, new_digest: str) -> Sample:
    """One view of the rotation; a view torn by a concurrent change (a Secret collected mid-read) raises KeyError."""
    t = time.monotonic()
    dep = api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/mcpg-gateway")
    wt = api.get(f"/apis/mcpg.dev/v1alpha1/namespaces/{ns}/webhooktokens/reports-token").get("status", {})
    rs_secret = {
        rs["metadata"]["name"]: config_secret(rs)
        for rs in api.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
    }
    listed_pods = api.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    pods = [p for p in listed_pods if available(p)]
    names = {p["status"]["podIP"]: p["metadata"]["name"] for p in listed_pods if p.get("status", {}).get("podIP")}
    listed = api.get(f"/api/v1/namespaces/{ns}/secrets?labelSelector=mcpg.dev/config-hash")["items"]
    configs = {s["metadata"]["name"]: webhook_tokens(base64.b64decode(s["data"]["gateway.yaml"])) for s in listed}
    accepted = wt.get("currentDigest") == new_digest and any(
        c["type"] == "TokenAccepted" and c["status"] == "True" for c in wt.get("conditions", [])
    )
    by_pod = {p["metadata"]["name"]: configs[rs_secret[p["metadata"]["ownerReferences"][0]["name"]]] for p in pods}
    return Sample(t, configs[config_secret(dep)], accepted, by_pod, names)


class Sampler:
    """Samples the API on a thread until stopped; `wait_for(predicate)` blocks until a sample satisfies it."""

    def __init__(self, api: Api, ns: str, new_digest: str) -> None:
        self.api, self.ns, self.new_digest = api, ns, new_digest
        self.samples: list[Sample] = []
        self.pod_names: dict[str, str] = {}
        """Pod IP -> name of every pod any sample listed: the pods that answered may be gone by the end."""
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="api sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample = read_sample(self.api, self.ns, self.new_digest)
            except (KeyError, httpx2.HTTPError):
                continue  # torn by a concurrent change: read again
            with self._changed:
                self.samples.append(sample)
                self.pod_names.update(sample.names)
                self._changed.notify_all()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

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


class PodLogs:
    """The namespace's container logs, copied on a thread every half second until stopped: a pod's logs go with
    the pod, and the rollouts delete the very pods that saw the old token."""

    def __init__(self, plane: ControlPlane, ns: str) -> None:
        self.plane, self.ns = plane, ns
        self.texts: dict[Path, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod log keeper", daemon=True)

    def copy(self) -> None:
        for path in self.plane.pod_logs(self.ns):
            with contextlib.suppress(OSError):  # removed with its pod since the listing
                self.texts[path] = path.read_text(errors="replace")

    def _run(self) -> None:
        while not self._stop.wait(0.5):  # paced copying, not a wait for a condition
            self.copy()

    def __enter__(self) -> PodLogs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.copy()


# -- traffic through the Service -------------------------------------------------------------------------------


class Traffic:
    """What the senders and listeners recorded; `wait_sent(n)` returns once n responses are in, bounded."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.ends: list[ListenEnd] = []
        self.reopen_gaps: list[float] = []
        """Seconds from a listen stream's end to the same listener's next stream being open."""
        self.received = 0
        self._changed = asyncio.Condition()

    async def record(self, sent: Sent) -> None:
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
        await traffic.record(Sent(t, label, None, client, repr(e)))
    else:
        await traffic.record(Sent(t, label, status, client))


async def listen(url: str, traffic: Traffic) -> None:
    """Hold a subscriptions/listen stream on URI through the Service; when it ends, listen again at once. Runs
    until cancelled."""
    headers = {"authorization": f"Bearer {CLIENT_TOKEN}"}
    ended: float | None = None
    while True:
        opened, events, how, detail = time.monotonic(), 0, "answered", ""
        try:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=None)) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
                client.listen(resource_subscriptions=[URI]) as stream,
            ):
                opened = time.monotonic()
                if ended is not None:
                    traffic.reopen_gaps.append(opened - ended)
                async for _ in stream:
                    events += 1
                    traffic.received += 1
        except asyncio.CancelledError:
            return
        except Exception as e:
            how, detail = "dropped", repr(e)[:300]
        ended = time.monotonic()
        traffic.ends.append(ListenEnd(opened, ended, how, events, detail))


# -- the pods that answered ------------------------------------------------------------------------------------


def answered_by(connections: ServiceConnections, pod_names: dict[str, str]) -> dict[str, str]:
    """Client address -> the pod kube-proxy sent that connection to (conntrack's reply source, by name)."""
    return {client: pod_names[ip] for client, ip in connections.answered_by().items() if ip in pod_names}


def stage(t: float, m: Moments) -> str:
    if t < m.edit:
        return "before"
    if t < m.accepted:
        return "rolling"
    if t < m.retiring:
        return "accepted"
    return "retiring"


def figures(sent: list[Sent], m: Moments) -> dict[str, dict[str, dict[str, int]]]:
    """Stage -> token -> status (or "failed") -> count."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for s in sent:
        counts = out.setdefault(stage(s.t, m), {}).setdefault(s.token, {})
        key = str(s.status) if s.status is not None else "failed"
        counts[key] = counts.get(key, 0) + 1
    return out


# -- the test ----------------------------------------------------------------------------------------------------


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[Api]:
    api = Api(control_plane.kubeconfig)
    yield api
    api.http.close()


@pytest.mark.parametrize("kill", ["none", "after-edit", "after-acceptance"])
async def test_rotation_on_running_pods_refuses_no_sender_and_drops_no_listener(
    control_plane: ControlPlane, operators: OperatorRelease, namespace: str, api: Api, kill: str
) -> None:
    grace_s = 15 if kill == "after-acceptance" else 0  # a window between acceptance and retirement to kill in
    docs = "\n---\n".join(yaml.safe_dump(d) for d in manifests(grace_s))
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=docs)
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/reports", "--timeout=150s")
    control_plane.kubectl(
        "-n", namespace, "wait", "--for=condition=TokenAccepted", "webhooktoken/reports-token", "--timeout=150s"
    )
    secret = api.get(f"/api/v1/namespaces/{namespace}/secrets/reports-webhook")
    old = base64.b64decode(secret["data"]["token"]).decode()
    new = "rotated-" + os.urandom(20).hex()
    new_digest = hashlib.sha256(new.encode()).hexdigest()[:12]
    cluster_ip, port = control_plane.service_address(namespace, "mcpg-gateway")
    base = f"http://{cluster_ip}:{port}"
    moments, traffic, stop = Moments(), Traffic(), asyncio.Event()
    loop = asyncio.get_running_loop()

    async def until(what: str, predicate: Callable[[Sample], bool]) -> Sample:
        return await loop.run_in_executor(None, sampler.wait_for, what, predicate)

    killed: list[str] = []

    async def kill_leader(when: str) -> None:
        killed.append((await loop.run_in_executor(None, operators.leader)).pod_name)
        moments.killed.append((when, await loop.run_in_executor(None, operators.kill_leader)))

    with (
        client_addresses(SOURCES) as sources,
        ServiceConnections(cluster_ip, port) as connections,
        PodLogs(control_plane, namespace) as pod_logs,
        Sampler(api, namespace, new_digest) as sampler,
    ):
        senders = [
            asyncio.create_task(send(base, label, t, traffic, stop, sources))
            for label, t in (("old", old), ("new", new))
        ]
        listeners = [asyncio.create_task(listen(f"{base}/mcp", traffic)) for _ in range(LISTENERS)]
        await until("a first sample", lambda s: s.template == {old})
        await traffic.wait_sent(2 * RATE_PER_TOKEN)  # a second of traffic before the edit
        moments.edit = time.monotonic()
        patch = json.dumps({"stringData": {"token": new}})
        await loop.run_in_executor(
            None, control_plane.kubectl, "-n", namespace, "patch", "secret", "reports-webhook", "-p", patch
        )
        if kill == "after-edit":
            rolling = await until("the both-tokens rollout to start", lambda s: s.template == {old, new})
            assert not all(p == {old, new} for p in rolling.available_pods.values()), "the rollout had completed"
            await kill_leader(kill)
        moments.accepted = (await until("TokenAccepted", lambda s: s.accepted)).t
        if kill == "after-acceptance":
            assert old in sampler.samples[-1].template, "the retirement rollout began before the kill"
            await kill_leader(kill)
        moments.retiring = (await until("the retirement rollout", lambda s: s.template == {new})).t
        done = await until(
            "every pod to accept only the new token",
            lambda s: len(s.available_pods) == 3 and all(p == {new} for p in s.available_pods.values()),
        )
        moments.done = done.t
        await traffic.wait_sent(len(traffic.sent) + 2 * RATE_PER_TOKEN)  # a second of traffic after
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), 30)
        for task in listeners:  # a stream still open now is not one a rollout ended
            task.cancel()
        await asyncio.gather(*listeners)
        samples = list(sampler.samples)
    pods = answered_by(connections, sampler.pod_names)
    sent = traffic.sent
    print(
        f"\nrotation (kill: {kill}): {len(sent)} requests in {moments.done - moments.edit:.1f}s after the edit; "
        f"kills {[(w, round(t - moments.edit, 1)) for w, t in moments.killed]} s after the edit; "
        f"per stage, token and status: {json.dumps(figures(sent, moments))}; "
        f"listen streams ended {dict(collections.Counter(e.how for e in traffic.ends))}, "
        f"longest reopen {max(traffic.reopen_gaps, default=0):.2f}s, notifications {traffic.received}"
    )

    # 1. No refusal, and no failed request, for the old token before the retirement rollout began.
    early_old = [s for s in sent if s.token == "old" and s.t < moments.retiring]
    assert early_old
    assert [s for s in early_old if s.status != 200] == []
    # 2. From acceptance on, every request with the new token got a 200, and every pod of the both-tokens
    #    ReplicaSet answered some of them.
    late_new = [s for s in sent if s.token == "new" and s.t > moments.accepted]
    assert late_new
    assert [s for s in late_new if s.status != 200] == []
    answering = {pods[s.client] for s in late_new if s.client in pods}
    both = {
        n for s in samples if s.t > moments.accepted for n, tokens in s.available_pods.items() if tokens == {old, new}
    }
    assert len(both) == 3
    assert both <= answering, (both, answering)
    # No request with either token failed outright at any stage (refused, reset or timed out).
    assert [s for s in sent if s.status is None] == []
    # 3. Every listen stream a rollout ended was answered by its gateway, and listened to again at once.
    assert traffic.ends, "no rollout ended a listen stream"
    assert [e for e in traffic.ends if e.how != "answered"] == []
    assert max(traffic.reopen_gaps) < 5.0
    # 4. Neither token reached a status, an Event, a workload, a log, or any replica's /metrics.
    objects_yaml = "".join(
        control_plane.kubectl("-n", namespace, "get", kind, "-o", "yaml").stdout
        for kind in ("resourcewatches", "webhooktokens", "events", "deployments", "replicasets", "pods", "services")
    )
    assert_absent(objects_yaml, "the namespace's objects", old, new)
    assert_not_logged(operators.log, old, new)
    for replica in operators.processes:
        assert_absent(str(replica.metrics()), f"{replica.pod_name}'s /metrics", old, new)
    assert pod_logs.texts
    for path, text in pod_logs.texts.items():
        assert_absent(text, str(path), old, new)
    assert_not_logged(control_plane.log("kubelet"), old, new)
    # 5. The rotation finished, and the status says so; after a kill, under another replica's lead.
    assert operators.leader().pod_name not in killed
    status = api.get(f"/apis/mcpg.dev/v1alpha1/namespaces/{namespace}/webhooktokens/reports-token")["status"]
    assert (status["phase"], status["retiringCount"], status["currentDigest"]) == ("Ready", 0, new_digest)
