"""The gateways' bus, shaped as the operator will render it, runs for real under the local kubelet.

A Deployment `mcpg-bus` of image `nats:2.11-alpine` runs the test venv's nats-server with its config from a
Secret volume and its JetStream store in an emptyDir, goes Ready through its own monitor port, and its Service
reaches it: a test connects through `control_plane.service_url(ns, "mcpg-bus", 4222, "nats")`, and a pod through
`nats://mcpg-bus.<ns>.svc:4222` (the local kubelet's cluster DNS). Written by hand, not by the operator, so the
kubelet's part is tested on its own. Every wait is bounded and ends on a status or an answer, never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from mcpg_testing import runtimes
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.pods import apply, get_pod, is_ready
from mcpg_testing.processes import pid_alive, wait_until

BOUND_S = 60.0
USER = "mcpg"
BUS = "mcpg-bus"
NATS_IMAGE = "nats:2.11-alpine"


def nats_conf(password: str) -> str:
    """One account with JetStream and one user: the least a gateway's bus needs."""
    users = f'[{{user: {USER}, password: "{password}"}}]'
    return f"accounts {{\n  MCPG {{\n    jetstream: enabled\n    users: {users}\n  }}\n}}\n"


def bus_manifests(password: str) -> list[dict[str, Any]]:
    """The Secret, Deployment and Service of the bus, as the operator will render them."""
    labels = {"app.kubernetes.io/name": BUS}
    args = ["--config", "/etc/nats/nats.conf", "--jetstream", "--store_dir", "/data/jetstream"]
    container = {
        "name": "nats",
        "image": NATS_IMAGE,
        "command": ["nats-server"],
        "args": [*args, "--port", "4222", "--http_port", "8222"],
        "ports": [{"name": "client", "containerPort": 4222}, {"name": "monitor", "containerPort": 8222}],
        # periodSeconds is ours: the default 10 s would only slow the test (the first probe meets a server
        # still starting)
        "readinessProbe": {"httpGet": {"path": "/healthz?js-enabled-only=true", "port": 8222}, "periodSeconds": 1},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/nats"}, {"name": "data", "mountPath": "/data"}],
    }
    volumes = [{"name": "config", "secret": {"secretName": BUS}}, {"name": "data", "emptyDir": {}}]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": BUS, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container], "volumes": volumes}},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": BUS, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "client", "port": 4222, "targetPort": "client"}]},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": BUS},
        "stringData": {"nats.conf": nats_conf(password)},
    }
    return [secret, deployment, service]


def bus_client_pod(namespace: str) -> dict[str, Any]:
    """A pod of the NATS image whose env names the bus by its Service, as gateway pods' MCPG_BUS_URL will.

    Its args are flags only, so the image's entrypoint runs them with nats-server (its own server, on a mapped
    port): what matters is the environment its process is given.
    """
    container = {
        "name": "client",
        "image": NATS_IMAGE,
        "args": ["--port", "4222"],
        "ports": [{"name": "client", "containerPort": 4222}],
        "env": [{"name": "MCPG_BUS_URL", "value": f"nats://{BUS}.{namespace}.svc:4222"}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bus-client"}, "spec": {"containers": [container]}}


def never_ready_pod() -> dict[str, Any]:
    """A NATS pod (the repository spelled out in full) whose readiness probe never passes: kwok's pod stages
    would make it Ready at once if the jq of `components.kwok_stages` let it through to them."""
    probe = {"httpGet": {"path": "/nowhere", "port": 8222}, "periodSeconds": 1, "failureThreshold": 1}
    container = {
        "name": "nats",
        "image": "docker.io/library/nats:2.10-alpine",
        "args": ["--port", "4222", "--http_port", "8222"],
        "ports": [{"containerPort": 4222}, {"containerPort": 8222}],
        "readinessProbe": probe,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "never-ready"}, "spec": {"containers": [container]}}


def kwok_pod() -> dict[str, Any]:
    """A pod of another repository with `nats` in its name: kwok's, which makes it Ready without running it."""
    container = {"name": "box", "image": "natsio/nats-box:0.14.5"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nats-box"}, "spec": {"containers": [container]}}


def waiting(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state", {}).get("waiting", {}))


def start_bus(plane: ControlPlane, ns: str, password: str) -> tuple[str, dict[str, Any]]:
    """Apply the bus and wait until its pod is Ready and its Service reaches it; its pod name and kubelet record."""
    apply(plane, ns, *bus_manifests(password))
    plane.kubectl("-n", ns, "rollout", "status", f"deployment/{BUS}", f"--timeout={BOUND_S:.0f}s")
    wait_until(lambda: ready_endpoints(plane, ns) == 1, BOUND_S, "the bus Service's endpoint to be ready")
    port = plane.service_port(ns, BUS, 4222)
    # the API says ready; the stand-in acts on its own watch of the EndpointSlice, a moment later
    wait_until(lambda: nats_answers(port), BOUND_S, "the bus to answer through its Service stand-in")
    [(key, record)] = [(k, r) for k, r in plane.local_pods().items() if k.startswith(f"{ns}/{BUS}-")]
    return key.split("/", 1)[1], record


def ready_endpoints(plane: ControlPlane, ns: str) -> int:
    selector = f"kubernetes.io/service-name={BUS}"
    slices = json.loads(plane.kubectl("-n", ns, "get", "endpointslices", "-l", selector, "-o", "json").stdout)
    return sum(1 for s in slices["items"] for e in s.get("endpoints") or [] if e["conditions"].get("ready"))


def nats_answers(port: int) -> bool:
    """True once a NATS server greets a connection to `port` (the stand-in closes it while nothing is ready)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            return sock.makefile("rb").readline().startswith(b"INFO ")
    except OSError:
        return False


@asynccontextmanager
async def connected(url: str, password: str) -> AsyncIterator[NATS]:
    client = await nats.connect(url, user=USER, password=password, allow_reconnect=False, connect_timeout=10)
    try:
        yield client
    finally:
        await client.close()


async def pub_sub(client: NATS, subject: str) -> bytes:
    sub = await client.subscribe(subject)
    await client.publish(subject, b"hello, gateways")
    msg = await sub.next_msg(timeout=BOUND_S)
    return bytes(msg.data)


async def key_value_round_trip(url: str, password: str) -> tuple[bytes, bytes]:
    """Create a bucket and a key through JetStream, read it back; then a plain publish and subscribe."""
    async with connected(url, password) as client:
        kv = await client.jetstream().create_key_value(bucket="gateways")
        await kv.create("gw-1", b"ready")
        entry = await kv.get("gw-1")
        return bytes(entry.value or b""), await pub_sub(client, "mcpg.bus.test")


def connections_to(plane: ControlPlane, ns: str) -> set[str]:
    """The pods the Service stand-in forwarded the bus's connections to."""
    log = (plane.logs_dir / "service-connections.jsonl").read_text().splitlines()
    # pod None: a connection refused while no endpoint was ready (start_bus's first knocks)
    return {e["pod"] for e in map(json.loads, log) if e["service"] == f"{ns}/{BUS}" and e["pod"]}


def test_the_bus_serves_jetstream_and_pub_sub_through_its_service_and_stops_with_its_deployment(
    control_plane: ControlPlane, namespace: str
) -> None:
    password = secrets.token_hex(12)
    pod, record = start_bus(control_plane, namespace, password)
    url = control_plane.service_url(namespace, BUS, 4222, scheme="nats")

    value, message = asyncio.run(key_value_round_trip(url, password))

    assert (value, message) == (b"ready", b"hello, gateways")
    assert connections_to(control_plane, namespace) == {pod}
    # --store_dir /data/jetstream landed in the emptyDir's directory of this pod (nats-server adds `jetstream/`)
    store = Path(record["dir"]) / "volumes" / "data" / "jetstream"
    assert any(path.name == "KV_gateways" for path in store.rglob("*")), sorted(store.rglob("*"))

    control_plane.kubectl("-n", namespace, "delete", "deployment", BUS)
    control_plane.kubectl("-n", namespace, "wait", "--for=delete", f"pod/{pod}", f"--timeout={BOUND_S:.0f}s")
    # the kubelet removes the pod only once its process has exited and been reaped
    assert not pid_alive(record["pid"], str(runtimes.nats().bin_dir / "nats-server"))
    assert not Path(record["dir"]).exists()


def test_a_pod_naming_the_bus_by_its_service_waits_for_it_then_reaches_it_through_the_stand_in(
    control_plane: ControlPlane, namespace: str
) -> None:
    address = f"{BUS}.{namespace}.svc:4222"
    apply(control_plane, namespace, bus_client_pod(namespace), never_ready_pod(), kwok_pod())

    def config_error() -> bool:
        return waiting(get_pod(control_plane, namespace, "bus-client")).get("reason") == "CreateContainerConfigError"

    wait_until(config_error, BOUND_S, "the client pod to wait for the bus Service")
    message = waiting(get_pod(control_plane, namespace, "bus-client"))["message"]
    unknown = f"no Service '{BUS}' in namespace '{namespace}' (cluster DNS: NXDOMAIN)"
    assert message == f"env MCPG_BUS_URL: {address}: {unknown}"

    password = secrets.token_hex(12)
    bus, _ = start_bus(control_plane, namespace, password)
    control_plane.kubectl(
        "-n", namespace, "wait", "--for=condition=Ready", "pod/bus-client", f"--timeout={BOUND_S:.0f}s"
    )

    stand_in = f"127.0.0.1:{control_plane.service_port(namespace, BUS, 4222)}"
    record = control_plane.local_pods()[f"{namespace}/bus-client"]
    assert record["services"] == {address: stand_in}
    environ = Path(f"/proc/{record['pid']}/environ").read_bytes().split(b"\0")
    assert f"MCPG_BUS_URL=nats://{stand_in}".encode() in environ  # what the process itself was given

    async def through_the_pods_url() -> bytes:
        async with connected(f"nats://{stand_in}", password) as client:
            return await pub_sub(client, "mcpg.bus.dns")

    assert asyncio.run(through_the_pods_url()) == b"hello, gateways"
    assert connections_to(control_plane, namespace) == {bus}

    # kwok kept to its own pods: "never-ready" has been running (and failing its 1 s probe) since before the bus
    # was applied, and kwok makes its pods Ready within a second, as it did "nats-box"
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "pod/nats-box", "--timeout=60s")
    never = get_pod(control_plane, namespace, "never-ready")
    assert not is_ready(never)
    assert never["status"]["containerStatuses"][0]["imageID"] == "local://nats"
    assert "running" in never["status"]["containerStatuses"][0]["state"]
