"""Pods in the end-to-end tier: apply them, read one back, tell whether it is Ready, find the gateway pods, and
read what each gateway pod says it serves (its acknowledgement), whether every one serves the configuration
Secret as it is now, and how each has run (uid, restarts).

Tests drive pods through kubectl, as a user would, and reach a pod at its pod IP: the node's bridge routes the
pod range from the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx2
import yaml

from mcpg_gateway.contract import acknowledgement
from mcpg_gateway.contract.acknowledgement import Acknowledgement
from mcpg_testing.controlplane import ControlPlane

GATEWAY_SELECTOR = "app.kubernetes.io/name=mcpg-gateway"
ADMIN_PORT = 9090
CONFIG_SECRET = "mcpg-gateway-config"
"""The one configuration Secret of a namespace's gateway, which every gateway pod follows."""
DIGEST_ANNOTATION = "mcpg.dev/config-digest"
"""On it: the digest of what it holds, the one each pod acknowledges serving once it has applied it."""


def apply(plane: ControlPlane, ns: str, *docs: dict[str, Any]) -> None:
    plane.kubectl("-n", ns, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))


def get_pod(plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The pod as the API has it, or {} once it is gone (or not yet there)."""
    result = plane.kubectl("-n", ns, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def gateway_pods(plane: ControlPlane, ns: str, port: str = "8080") -> dict[str, str]:
    """Pod name -> `http://<pod IP>:<port>` (the public port by default), for the Ready gateway pods of `ns` that
    the operator rendered and that are not being deleted."""
    listed = plane.kubectl("-n", ns, "get", "pods", "-l", GATEWAY_SELECTOR, "-o", "json")
    return {
        p["metadata"]["name"]: f"http://{p['status']['podIP']}:{port}"
        for p in json.loads(listed.stdout)["items"]
        if p["metadata"].get("deletionTimestamp") is None and is_ready(p) and p["status"].get("podIP")
    }


@dataclass(frozen=True, slots=True)
class GatewayPod:
    """One gateway pod as the API has it: what identifies this very pod (a replacement has another uid), its
    address, whether it is Ready, and how often its container restarted."""

    name: str
    uid: str
    ip: str | None
    ready: bool
    restarts: int


def gateway_pod(pod: dict[str, Any]) -> GatewayPod:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return GatewayPod(
        pod["metadata"]["name"],
        pod["metadata"]["uid"],
        pod.get("status", {}).get("podIP"),
        is_ready(pod),
        sum(int(c.get("restartCount", 0)) for c in statuses),
    )


def gateway_pods_now(plane: ControlPlane, ns: str) -> dict[str, GatewayPod]:
    """Every gateway pod of `ns` not being deleted, by name, Ready or not."""
    listed = plane.kubectl("-n", ns, "get", "pods", "-l", GATEWAY_SELECTOR, "-o", "json")
    pods = [p for p in json.loads(listed.stdout)["items"] if p["metadata"].get("deletionTimestamp") is None]
    return {p["metadata"]["name"]: gateway_pod(p) for p in pods}


def acknowledgement_of(ip: str, http: httpx2.Client | None = None) -> Acknowledgement:
    """What the gateway pod at `ip` says it serves: its acknowledgement, on its admin port, read as the operator
    reads it (no token)."""
    url = f"http://{ip}:{ADMIN_PORT}{acknowledgement.PATH}"
    response = http.get(url) if http is not None else httpx2.get(url, timeout=5)
    response.raise_for_status()
    return Acknowledgement.model_validate_json(response.content)


def _labels(ns: str, pod: str) -> list[str]:
    """crictl's selection of one pod's containers: the kubelet labels each with its pod's namespace and name."""
    return ["--label", f"io.kubernetes.pod.namespace={ns}", "--label", f"io.kubernetes.pod.name={pod}"]


def container_pid(plane: ControlPlane, ns: str, pod: str, container: str) -> int:
    """The host PID of pod `ns/pod`'s running container `container`, as the node's runtime reports it."""
    listed = plane.crictl("ps", "-q", *_labels(ns, pod), "--name", f"^{container}$")
    [found] = listed.stdout.split()
    return int(json.loads(plane.crictl("inspect", found).stdout)["info"]["pid"])


def containers(plane: ControlPlane, ns: str, pod: str) -> list[str]:
    """The IDs of every container of pod `ns/pod` the node's runtime still has, exited ones included."""
    return plane.crictl("ps", "-a", "-q", *_labels(ns, pod)).stdout.split()


def config_digest(plane: ControlPlane, ns: str) -> str | None:
    """The digest of what the namespace's configuration Secret holds (its annotation); None before it exists."""
    result = plane.kubectl("-n", ns, "get", "secret", CONFIG_SECRET, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    annotations = json.loads(result.stdout)["metadata"].get("annotations") or {}
    found = annotations.get(DIGEST_ANNOTATION)
    return str(found) if found else None


def serving_everywhere(plane: ControlPlane, ns: str, replicas: int) -> str | None:
    """The configuration Secret's digest, if exactly `replicas` gateway pods are Ready and every one of them
    acknowledges serving it; else None."""
    digest = config_digest(plane, ns)
    pods = [p for p in gateway_pods_now(plane, ns).values() if p.ready and p.ip]
    if digest is None or len(pods) != replicas:
        return None
    try:
        said = [acknowledgement_of(p.ip).serving for p in pods if p.ip]
    except (httpx2.HTTPError, ValueError):
        return None
    return digest if {s.digest if s is not None else None for s in said} == {digest} else None
