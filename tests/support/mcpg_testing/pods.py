"""Pods in the end-to-end tier: apply them, read one back, tell whether it is Ready, find the gateway pods.

Tests drive pods through kubectl, as a user would, and reach a pod at its pod IP: the node's bridge routes the
pod range from the host.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from mcpg_testing.controlplane import ControlPlane


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
    listed = plane.kubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=mcpg-gateway", "-o", "json")
    return {
        p["metadata"]["name"]: f"http://{p['status']['podIP']}:{port}"
        for p in json.loads(listed.stdout)["items"]
        if p["metadata"].get("deletionTimestamp") is None and is_ready(p) and p["status"].get("podIP")
    }


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
