"""Pods in the end-to-end tier: apply them, read one back, tell whether it is Ready, find the gateway pods.

The kubelet's own tests and the bus pod's tests both drive pods through kubectl, as a user would.
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
    """Pod name -> the base URL of its container `port` (the public one by default), for the Ready gateway pods
    of `ns` that the operator rendered (the local kubelet's records)."""
    listed = plane.kubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=mcpg-gateway", "-o", "json")
    ready = {
        p["metadata"]["name"]
        for p in json.loads(listed.stdout)["items"]
        if p["metadata"].get("deletionTimestamp") is None and is_ready(p)
    }
    out = {}
    for key, record in plane.local_pods().items():
        pod_ns, name = key.split("/", 1)
        if pod_ns == ns and name in ready:
            out[name] = f"http://127.0.0.1:{record['ports'][port]}"
    return out
