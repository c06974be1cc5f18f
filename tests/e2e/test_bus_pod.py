"""The gateways' bus, shaped as the operator will render it, runs on the real node in its image.

A Deployment `mcpg-bus` of image `nats:2.11-alpine` (the stand-in `mcpg_testing.oci` builds: the release's official
nats-server, upstream's entrypoint) runs with its config from a Secret volume and its JetStream store in an
emptyDir, goes Ready through its own monitor port, and its Service reaches it: a test connects to its ClusterIP
(`control_plane.service_url(ns, "mcpg-bus", 4222, "nats")`, kube-proxy's rules), and a pod names it as
`nats://mcpg-bus.<ns>.svc:4222`, which cluster DNS resolves to that ClusterIP. Which pod each connection reached
is read from the kernel's connection tracking (`mcpg_testing.conntrack`). Written by hand, not by the operator,
so the bus's shape is tested on its own. Every wait is bounded and ends on a status or an answer, never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from mcpg_testing import installation
from mcpg_testing.components import KWOK_NODE
from mcpg_testing.conntrack import ServiceConnections
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.nodeconfig import CLUSTER_DOMAIN, NODE_NAME
from mcpg_testing.oci import NATS_IMAGE
from mcpg_testing.pods import apply, container_pid, containers, get_pod, is_ready
from mcpg_testing.processes import pid_alive, wait_until

BOUND_S = 60.0
USER = "mcpg"
BUS = "mcpg-bus"


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

    Its args are flags only, so the image's entrypoint runs them with nats-server (its own server, in its own
    network namespace): what matters is the environment its process is given, and the pod's DNS.
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
    """A NATS pod whose readiness probe never passes: the real node runs it and keeps it unready; kwok, which
    makes its own pods Ready at once, must leave it alone."""
    probe = {"httpGet": {"path": "/nowhere", "port": 8222}, "periodSeconds": 1, "failureThreshold": 1}
    container = {
        "name": "nats",
        "image": NATS_IMAGE,
        "args": ["--port", "4222", "--http_port", "8222"],
        "ports": [{"containerPort": 4222}, {"containerPort": 8222}],
        "readinessProbe": probe,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "never-ready"}, "spec": {"containers": [container]}}


def kwok_pod() -> dict[str, Any]:
    """A pod of an image the node does not have, put on kwok's fake node (its label, the toleration of its taint):
    kwok makes it Ready without running anything."""
    container = {"name": "box", "image": "natsio/nats-box:0.14.5"}
    spec = {
        "containers": [container],
        "nodeSelector": dict(installation.KWOK_NODE_SELECTOR),
        "tolerations": installation.KWOK_TOLERATIONS,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nats-box"}, "spec": spec}


def start_bus(plane: ControlPlane, ns: str, password: str) -> dict[str, Any]:
    """Apply the bus and wait until its pod is Ready and its Service reaches it; the pod, as the API has it."""
    apply(plane, ns, *bus_manifests(password))
    plane.kubectl("-n", ns, "rollout", "status", f"deployment/{BUS}", f"--timeout={BOUND_S:.0f}s")
    wait_until(lambda: ready_endpoints(plane, ns) == 1, BOUND_S, "the bus Service's endpoint to be ready")
    address = plane.service_address(ns, BUS, 4222)
    # the API says ready; kube-proxy programs the endpoint from its own watch of the EndpointSlice, a moment later
    wait_until(lambda: nats_answers(address), BOUND_S, "the bus to answer through its Service")
    listed = json.loads(
        plane.kubectl("-n", ns, "get", "pods", "-l", f"app.kubernetes.io/name={BUS}", "-o", "json").stdout
    )
    [pod] = [p for p in listed["items"] if p["metadata"].get("deletionTimestamp") is None]
    return dict(pod)


def ready_endpoints(plane: ControlPlane, ns: str) -> int:
    selector = f"kubernetes.io/service-name={BUS}"
    slices = json.loads(plane.kubectl("-n", ns, "get", "endpointslices", "-l", selector, "-o", "json").stdout)
    return sum(1 for s in slices["items"] for e in s.get("endpoints") or [] if e["conditions"].get("ready"))


def nats_answers(address: tuple[str, int]) -> bool:
    """True once a NATS server greets a connection to `address` (kube-proxy rejects it while nothing is ready)."""
    try:
        with socket.create_connection(address, timeout=5) as sock:
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


def reached(plane: ControlPlane, ns: str, through: Callable[[], None]) -> set[str]:
    """Run `through` (connections to the bus's Service); the names of the pods kube-proxy sent them to."""
    with ServiceConnections(*plane.service_address(ns, BUS, 4222)) as connections:
        through()
    names = {p["status"].get("podIP"): p["metadata"]["name"] for p in pods_of(plane, ns)}
    return {names.get(ip, ip) for ip in connections.answered_by().values()}


def pods_of(plane: ControlPlane, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(plane.kubectl("-n", ns, "get", "pods", "-o", "json").stdout)["items"]
    return items


def empty_dir(plane: ControlPlane, pod: dict[str, Any], volume: str) -> Path:
    """Where the kubelet keeps the pod's emptyDir `volume` on the node."""
    return pod_dir(plane, pod) / "volumes" / "kubernetes.io~empty-dir" / volume


def pod_dir(plane: ControlPlane, pod: dict[str, Any]) -> Path:
    return plane.layout.node.kubelet_root / "pods" / str(pod["metadata"]["uid"])


def argv0(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()


def test_the_bus_serves_jetstream_and_pub_sub_through_its_service_and_stops_with_its_deployment(
    control_plane: ControlPlane, namespace: str
) -> None:
    password = secrets.token_hex(12)
    bus = start_bus(control_plane, namespace, password)
    pod = bus["metadata"]["name"]
    url = control_plane.service_url(namespace, BUS, 4222, scheme="nats")
    pid = container_pid(control_plane, namespace, pod, "nats")
    program = argv0(pid)
    results: list[tuple[bytes, bytes]] = []

    answered = reached(
        control_plane, namespace, lambda: results.append(asyncio.run(key_value_round_trip(url, password)))
    )

    assert results == [(b"ready", b"hello, gateways")]
    assert answered == {pod}
    # --store_dir /data/jetstream landed in the emptyDir's directory of this pod (nats-server adds `jetstream/`)
    store = empty_dir(control_plane, bus, "data") / "jetstream"
    assert any(path.name == "KV_gateways" for path in store.rglob("*")), sorted(store.rglob("*"))

    control_plane.kubectl("-n", namespace, "delete", "deployment", BUS)
    control_plane.kubectl("-n", namespace, "wait", "--for=delete", f"pod/{pod}", f"--timeout={BOUND_S:.0f}s")
    # the kubelet removes the pod only once its container's process has exited and been reaped
    assert not pid_alive(pid, program)
    wait_until(lambda: not containers(control_plane, namespace, pod), BOUND_S, "the runtime to remove the containers")
    wait_until(lambda: not pod_dir(control_plane, bus).exists(), BOUND_S, "the kubelet to remove the pod's volumes")


def resolved_in(plane: ControlPlane, ns: str, pod: str, name: str) -> set[str]:
    """The addresses `name` resolves to in the pod, by its own resolver configuration (busybox's nslookup asks the
    nameserver of the pod's resolv.conf, the kubelet's cluster DNS)."""
    out = plane.kubectl("-n", ns, "exec", pod, "--", "nslookup", "-type=a", name, check=False).stdout
    # `Name: <name>` then `Address: <ip>` per answer; the server's own address comes first, before any Name line
    answers = out.partition("Name:")[2]
    return {line.split()[-1] for line in answers.splitlines() if line.strip().startswith("Address")}


def test_a_pod_naming_the_bus_by_its_service_is_given_the_name_and_cluster_dns_resolves_it_to_the_bus(
    control_plane: ControlPlane, namespace: str
) -> None:
    url = f"nats://{BUS}.{namespace}.svc:4222"
    apply(control_plane, namespace, bus_client_pod(namespace), never_ready_pod(), kwok_pod())
    password = secrets.token_hex(12)
    bus = start_bus(control_plane, namespace, password)["metadata"]["name"]
    control_plane.kubectl(
        "-n", namespace, "wait", "--for=condition=Ready", "pod/bus-client", f"--timeout={BOUND_S:.0f}s"
    )

    # What the process itself was given: the URL as written, no address substituted (the pod's DNS resolves it).
    pid = container_pid(control_plane, namespace, "bus-client", "client")
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"MCPG_BUS_URL={url}".encode() in environ
    cluster_ip, port = control_plane.service_address(namespace, BUS, 4222)
    fqdn = f"{BUS}.{namespace}.svc.{CLUSTER_DOMAIN}"
    wait_until(lambda: resolved_in(control_plane, namespace, "bus-client", fqdn) == {cluster_ip}, BOUND_S, f"{fqdn}")

    async def through_the_resolved_url() -> bytes:
        async with connected(f"nats://{cluster_ip}:{port}", password) as client:
            return await pub_sub(client, "mcpg.bus.dns")

    messages: list[bytes] = []
    assert reached(control_plane, namespace, lambda: messages.append(asyncio.run(through_the_resolved_url()))) == {bus}
    assert messages == [b"hello, gateways"]

    # kwok kept to its own node: "never-ready" has been running on the real node (and failing its 1 s probe)
    # since before the bus was applied, and kwok makes its pods Ready within a second, as it did "nats-box"
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "pod/nats-box", "--timeout=60s")
    box = get_pod(control_plane, namespace, "nats-box")
    assert box["spec"]["nodeName"] == KWOK_NODE
    assert containers(control_plane, namespace, "nats-box") == []  # nothing of it runs on the node
    never = get_pod(control_plane, namespace, "never-ready")
    assert never["spec"]["nodeName"] == NODE_NAME
    assert not is_ready(never)
    assert "running" in never["status"]["containerStatuses"][0]["state"]
