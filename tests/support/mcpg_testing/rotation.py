"""Rotating a WebhookToken's value on the session cluster's running gateway pods, watched from outside: what the
e2e rotation tests (`tests/e2e/test_rotation_on_pods.py`, a routing token; `test_signing_rotation_on_pods.py`, a
signing secret) share.

- `Api`: fast reads and merge patches with the admin token, one per thread.
- `Sampler`: on a thread, reads the configuration Secret, one WebhookToken's status, the gateway pods and what
  each Ready pod acknowledges serving, again and again; a test waits on its samples (`wait`, bounded) for the
  moments that divide a rotation into stages (`Moments`, `stage`). Which credentials a configuration carries is
  the test's to say (`Credentials`): the webhook tokens, or the signing secrets.
- `send`/`post`: deliveries POSTed through the ClusterIP Service at a steady rate, each on a fresh connection
  from the next of many source addresses (so conntrack names the pod kube-proxy sent it to), over plain asyncio
  streams; each recorded as a `Sent` in a `Traffic`, with its status and the 401's `check`.
- The checks every rotation ends with: no pod replaced (`assert_pods_untouched`), the WebhookToken's status
  (`assert_rotated`), and no value anywhere it must not be (`assert_leaked_nowhere`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_gateway.contract.acknowledgement import Acknowledgement
from mcpg_testing.conntrack import ServiceConnections
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.leaks import assert_absent, assert_not_logged
from mcpg_testing.pods import ADMIN_PORT, CONFIG_SECRET, DIGEST_ANNOTATION, GATEWAY_SELECTOR, GatewayPod, gateway_pod
from mcpg_testing.release import OperatorRelease

REPLICAS = 3
"""The session's gateway replicas (`fixtures.CHART_VALUES`)."""
BOUND_S = 90.0
"""Bound on each stage of a rotation: seconds in place, more with a leader killed (its Lease runs out first)."""
SENT_BOUND_S = 30.0
"""Bound on the wait for a number of deliveries' answers, and on the senders' ending."""
GATEWAY = "mcpg-gateway"
"""The gateway's Deployment and Service."""
WEBHOOK_PATH = "/webhooks/resource-updated/"
"""Followed by the routing token: where a sender POSTs."""
OBJECT_KINDS = ("resourcewatches", "webhooktokens", "events", "deployments", "replicasets", "pods", "services")
"""The namespace's objects no Secret value may reach (the Secrets themselves hold them)."""

Credentials = Callable[[bytes], frozenset[str]]
"""The rotated credentials a rendered `gateway.yaml` carries: the webhook tokens, or the signing secrets."""


# -- the API -----------------------------------------------------------------------------------------------------


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

    def close(self) -> None:
        self.http.close()

    def secret_value(self, ns: str, name: str, key: str = "token") -> str:
        """One key of a Secret, decoded."""
        return base64.b64decode(self.get(secret_path(ns, name))["data"][key]).decode()


def secret_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/secrets/{name}"


def webhook_token_path(ns: str, name: str) -> str:
    return f"/apis/mcpg.dev/v1alpha1/namespaces/{ns}/webhooktokens/{name}"


def condition(status: dict[str, Any], type_: str) -> str | None:
    return next((c["status"] for c in status.get("conditions", []) if c["type"] == type_), None)


def value_digest(value: str) -> str:
    """What a WebhookToken's status shows of a value (`currentDigest`): 12 hex digits of its SHA-256."""
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def watch_strategy(config_yaml: bytes) -> dict[str, Any]:
    """The watch strategy of the one resource a rendered `gateway.yaml` serves."""
    [res] = yaml.safe_load(config_yaml)["mcp"]["capabilities"]["resources"]
    strategy: dict[str, Any] = res["watch"]["strategy"]
    return strategy


def apply_and_wait(plane: ControlPlane, ns: str, docs: Iterable[dict[str, Any]], tokens: Iterable[str]) -> None:
    """Apply `docs`, then wait for every ResourceWatch among them to be Ready and each WebhookToken of `tokens`
    to have its value accepted."""
    docs = list(docs)
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))
    watches = [f"resourcewatch/{d['metadata']['name']}" for d in docs if d["kind"] == "ResourceWatch"]
    plane.kubectl("-n", ns, "wait", "--for=condition=Ready", *watches, "--timeout=150s")
    accepted = [f"webhooktoken/{name}" for name in tokens]
    plane.kubectl("-n", ns, "wait", "--for=condition=TokenAccepted", *accepted, "--timeout=150s")


# -- the API and the pods, sampled -------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    """When the sample began: before the configuration Secret was read."""
    config_credentials: frozenset[str] = field(repr=False)
    """The rotated credentials the configuration Secret carries (never shown: a failure's message holds samples)."""
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


class Sampler:
    """Samples the API and every Ready pod's acknowledgement on a thread until stopped: the configuration Secret's
    `credentials`, the WebhookToken `webhook_token`'s status, the gateway pods and the Deployment's generation.
    `wait_for(predicate)` blocks until a sample satisfies it (`wait`: the same, awaitable); `arm(predicate,
    action)` runs `action` on the sampler's own thread as soon as the first half of a sample (the configuration
    Secret and the WebhookToken, read first) satisfies it."""

    def __init__(
        self, kubeconfig: Path, ns: str, webhook_token: str, credentials: Credentials, replicas: int = REPLICAS
    ) -> None:
        self.api, self.ns, self.webhook_token, self.credentials = Api(kubeconfig), ns, webhook_token, credentials
        self.replicas = replicas
        self.acks = httpx2.Client(timeout=2)
        self.new_version: str | None = None
        """The credential Secret's resourceVersion after the edit, once made."""
        self.samples: list[Sample] = []
        self.credentials_by_digest: dict[str, frozenset[str]] = {}
        """Every configuration digest seen in the Secret -> the credentials it carries."""
        self.pod_names: dict[str, str] = {}
        """Pod IP -> name of every pod any sample listed."""
        self.last_error = ""
        """The last read that failed (torn by a concurrent change, most likely), for a timeout's message."""
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
        status = self.api.get(webhook_token_path(self.ns, self.webhook_token)).get("status", {})
        read_at = time.monotonic()
        accepted = (
            self.new_version is not None
            and (status.get("accepted") or {}).get("secretResourceVersion") == self.new_version
            and condition(status, "TokenAccepted") == "True"
        )
        digest = config["metadata"]["annotations"][DIGEST_ANNOTATION]
        carried = self.credentials(base64.b64decode(config["data"]["gateway.yaml"]))
        sample = Sample(t, carried, digest, accepted, read_at, status)
        self._fire_trigger(sample)
        listed = self.api.get(f"{ns}/pods?labelSelector={GATEWAY_SELECTOR}")["items"]
        live = [gateway_pod(p) for p in listed if not p["metadata"].get("deletionTimestamp")]
        sample.pods = {p.name: p for p in live}
        sample.serving = {p.name: self._serving(p.ip) for p in sample.pods.values() if p.ready and p.ip}
        sample.acked_at = time.monotonic()
        deployment = self.api.get(f"/apis/apps/v1/namespaces/{self.ns}/deployments/{GATEWAY}")
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
            except (KeyError, TypeError, ValueError, httpx2.HTTPError) as e:
                self.last_error = f"{type(e).__name__} {e}"[:200]
                continue  # torn by a concurrent change: read again
            with self._changed:
                self.samples.append(sample)
                self.credentials_by_digest[sample.config_digest] = sample.config_credentials
                self.pod_names.update({p.ip: p.name for p in sample.pods.values() if p.ip})
                self._changed.notify_all()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.api.close()
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
                    raise AssertionError(
                        f"timed out waiting for {what}; last sample {last}; last failed read: {self.last_error!r}"
                    )
                self._changed.wait(left)

    async def wait(self, what: str, predicate: Callable[[Sample], bool], timeout: float = BOUND_S) -> Sample:
        """`wait_for` on a worker thread, so the event loop's senders keep sending."""
        return await asyncio.get_running_loop().run_in_executor(None, self.wait_for, what, predicate, timeout)

    def settled(self, sample: Sample, credentials: frozenset[str]) -> bool:
        """Every gateway pod Ready, each serving a configuration whose credentials are `credentials`, and the
        configuration Secret's too."""
        ready = [p for p in sample.pods.values() if p.ready]
        return (
            sample.config_credentials == credentials
            and len(ready) == self.replicas
            and all(self.credentials_by_digest.get(d or "") == credentials for d in sample.serving.values())
        )

    def last_carrying(self, credential: str) -> float:
        """The start of the last sample whose configuration Secret carried `credential`: no pod had dropped it."""
        return max(s.t for s in self.samples if credential in s.config_credentials)


# -- deliveries through the Service ---------------------------------------------------------------------------


@dataclass
class Sent:
    t: float
    """When the request began (before its connection)."""
    label: str
    """Which sender: e.g. "old" or "new"."""
    status: int | None
    """None: the request failed (refused, reset, timed out)."""
    client: str
    done: float = 0.0
    """When its answer (or failure) was in."""
    error: str = ""
    check: str | None = None
    """The `check` of a JSON answer that names one (a refused signature's: "bad_signature", "replay", ...)."""

    @property
    def outcome(self) -> str:
        """How it was answered: "failed", or the status, with the check if it names one ("401 bad_signature")."""
        if self.status is None:
            return "failed"
        return f"{self.status} {self.check}" if self.check else str(self.status)


@dataclass(frozen=True)
class Delivery:
    """One POST: its path, body and headers beyond Host, Content-Length and Connection."""

    path: str
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


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
        async with asyncio.timeout(SENT_BOUND_S), self._changed:
            await self._changed.wait_for(lambda: len(self.sent) >= count)


async def send(
    base: str,
    label: str,
    delivery: Callable[[], Delivery],
    traffic: Traffic,
    stop: asyncio.Event,
    sources: Iterable[str],
    rate: float,
) -> None:
    """POST `rate` deliveries a second, each made by `delivery()` as it goes out and each on a new connection from
    the next of `sources`, recording status and client, until `stop` is set; then wait for those under way."""
    host, port = base.removeprefix("http://").split(":")
    pending: set[asyncio.Task[None]] = set()
    next_at = time.monotonic()
    for source in itertools.cycle(sources):
        if stop.is_set():
            break
        task = asyncio.create_task(post(host, int(port), source, delivery(), label, traffic))
        pending.add(task)
        task.add_done_callback(pending.discard)
        next_at += 1 / rate
        # This paces the load; it waits for no outcome, and the stop event ends it at once.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(next_at - time.monotonic(), 0))
    await asyncio.gather(*pending)


async def post(host: str, port: int, source: str, delivery: Delivery, label: str, traffic: Traffic) -> None:
    """One HTTP/1.1 POST on its own connection from `source`, over plain asyncio streams: the client address it
    went from is what conntrack names the answering pod by. Senders cycle through many sources: the Service has
    ClientIP affinity (3 replicas), so kube-proxy would send everything from one source address to one pod."""
    t, client = time.monotonic(), ""
    head = [
        f"POST {delivery.path} HTTP/1.1",
        f"Host: {host}",
        f"Content-Length: {len(delivery.body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in delivery.headers.items()),
    ]
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            client = "{}:{}".format(*writer.get_extra_info("sockname")[:2])
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + delivery.body)
            answer = await reader.read()  # to the end: the server closes after its response
            writer.close()
        status, check = parse_response(answer)
    except (OSError, TimeoutError, IndexError, ValueError) as e:
        await traffic.record(Sent(t, label, None, client, error=repr(e)))
    else:
        await traffic.record(Sent(t, label, status, client, check=check))


def parse_response(raw: bytes) -> tuple[int, str | None]:
    """An HTTP/1.1 response read to its end: its status, and the `check` its JSON body names, if any. Raises
    IndexError or ValueError when there is no status line (nothing answered)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {name.strip().lower(): value.strip().lower() for name, _, value in (x.partition(b":") for x in lines[1:])}
    try:
        if b"chunked" in headers.get(b"transfer-encoding", b""):
            body = _dechunk(body)
        answer = json.loads(body)
    except ValueError:  # no JSON body (UnicodeDecodeError is one too)
        return status, None
    check = answer.get("check") if isinstance(answer, dict) else None
    return status, check if isinstance(check, str) else None


def _dechunk(body: bytes) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(parts)
        parts.append(body[:size])
        body = body[size + 2 :]


# -- the stages of a rotation, and what answered in each ----------------------------------------------------------


@dataclass
class Moments:
    edit: float = 0.0
    accepted: float = 0.0
    """The answer in of the first status read saying the new value is accepted: every pod accepted it before."""
    last_with_old: float = 0.0
    """The start of the last sample whose configuration Secret still held the old value: no pod had dropped it."""
    dropped: float = 0.0
    done: float = 0.0
    """Every Ready pod's acknowledgement read, each serving a configuration without the old value."""
    end: float = 0.0


def stage(t: float, m: Moments) -> str:
    """before: until the Secret edit; accepting: until the WebhookToken says the value of the Secret's new
    resourceVersion is accepted; accepted: until the configuration Secret drops the old value; retiring: until
    every Ready pod acknowledges serving a configuration without it; after: from then on."""
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
    """Stage -> sender -> outcome ("200", "401 bad_signature", "failed", ...) -> count."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for s in sent:
        counts = out.setdefault(stage(s.t, m), {}).setdefault(s.label, {})
        counts[s.outcome] = counts.get(s.outcome, 0) + 1
    return out


def answered_by(connections: ServiceConnections, pod_names: dict[str, str]) -> dict[str, str]:
    """Client address -> the pod kube-proxy sent that connection to (conntrack's reply source, by name)."""
    return {client: pod_names[ip] for client, ip in connections.answered_by().items() if ip in pod_names}


# -- what every rotation ends with ------------------------------------------------------------------------------


def assert_pods_untouched(samples: list[Sample]) -> None:
    """From the first sample to the last: no gateway pod replaced, restarted or unready at any moment, and the
    Deployment's generation unchanged (no new pod template)."""
    first, last = samples[0], samples[-1]
    assert all({p.uid for p in s.pods.values() if p.ready} == {p.uid for p in first.pods.values()} for s in samples), (
        "a gateway pod was replaced, or was not Ready, during the rotation"
    )
    assert {p.name: p.restarts for p in last.pods.values()} == {p.name: p.restarts for p in first.pods.values()}
    assert last.generation == first.generation


def assert_rotated(api: Api, ns: str, webhook_token: str, new: str, new_version: str | None) -> None:
    """The WebhookToken is Ready with nothing retiring, its current value `new`, accepted at the resourceVersion
    of the edit that wrote it (and read at that version)."""
    status = api.get(webhook_token_path(ns, webhook_token))["status"]
    assert (status["phase"], status["retiringCount"], status["currentDigest"]) == ("Ready", 0, value_digest(new))
    assert status["accepted"]["secretResourceVersion"] == new_version == status["secretResourceVersion"]


def assert_leaked_nowhere(
    plane: ControlPlane, operators: OperatorRelease, ns: str, gateway_ips: Iterable[str], *values: str
) -> None:
    """None of `values` (plainly or base64-encoded) is in the namespace's objects (statuses, Events, workloads),
    the operator's log, any operator replica's or gateway pod's /metrics, any pod's log or the kubelet's log."""
    objects_yaml = "".join(plane.kubectl("-n", ns, "get", kind, "-o", "yaml").stdout for kind in OBJECT_KINDS)
    assert_absent(objects_yaml, "the namespace's objects", *values)
    assert_not_logged(operators.log, *values)
    for replica in operators.processes:
        assert_absent(str(replica.metrics()), f"{replica.pod_name}'s /metrics", *values)
    for ip in gateway_ips:
        metrics = httpx2.get(f"http://{ip}:{ADMIN_PORT}/metrics", timeout=5)
        assert metrics.status_code == 200
        assert_absent(metrics.text, f"the gateway pod at {ip}'s /metrics", *values)
    logs = plane.pod_logs(ns)
    assert logs
    for path in logs:
        assert_absent(path.read_text(errors="replace"), str(path), *values)
    assert_not_logged(plane.log("kubelet"), *values)
