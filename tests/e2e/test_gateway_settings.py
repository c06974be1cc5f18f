"""Per-namespace gateway settings (`McpGateway`) on the real control plane, with gateways as real pods.

The API server enforces the CRD's rules (CEL included). Under the chart's RBAC, the operator applies one
namespace's settings to that namespace's gateway only: editing them rolls its Deployment while another
namespace's Deployment, ReplicaSet and pods stay exactly as they were; the Service follows the type and node port;
deleting the McpGateway returns the gateway to the operator's defaults (the session's: 3 replicas) and removes
the PodDisruptionBudget and NetworkPolicy it asked for.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import GATEWAY_RESOURCES
from mcpg_testing.manifests import polled
from mcpg_testing.release import OperatorRelease

BOUND_S = 120
"""Bound on one rollout of real gateway pods, or one settings change reaching the objects."""
NODE_PORT = 31000 + secrets.randbelow(1000)
"""A node port exists once per cluster: one nobody else in the session asks for."""


def mcp_gateway(spec: dict[str, Any], name: str = "mcpg-gateway") -> dict[str, Any]:
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": {"name": name}, "spec": spec}


def apply(plane: ControlPlane, namespace: str, *docs: dict[str, Any], check: bool = True) -> str:
    text = "\n---\n".join(yaml.safe_dump(d) for d in docs)
    result = plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=text, check=check)
    return result.stderr if result.returncode else ""


def get(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", namespace, "get", *what, "-o", "json").stdout)


def wait(plane: ControlPlane, namespace: str, *args: str) -> None:
    plane.kubectl("-n", namespace, "wait", *args, f"--timeout={BOUND_S}s")


def rolled_out(plane: ControlPlane, namespace: str) -> None:
    plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={BOUND_S}s")


def applied(plane: ControlPlane, namespace: str) -> None:
    """The McpGateway's current generation is Applied: its settings are in the gateway's objects."""
    generation = get(plane, namespace, "mcpgateway", "mcpg-gateway")["metadata"]["generation"]
    wait(plane, namespace, f"--for=jsonpath={{.status.observedGeneration}}={generation}", "mcpgateway/mcpg-gateway")
    wait(
        plane, namespace, "--for=jsonpath={.status.conditions[?(@.type=='Ready')].reason}=Applied", "mcpgw/mcpg-gateway"
    )


def footprint(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    """What must not move when another namespace's settings change: the Deployment's generation and template,
    its ReplicaSets, and every pod (by uid)."""
    dep = get(plane, namespace, "deployment", "mcpg-gateway")
    pods = get(plane, namespace, "pods", "-l", "app.kubernetes.io/name=mcpg-gateway")["items"]
    sets = get(plane, namespace, "replicasets", "-l", "app.kubernetes.io/name=mcpg-gateway")["items"]
    return {
        "generation": dep["metadata"]["generation"],
        "template": dep["spec"]["template"],
        "replicasets": sorted(rs["metadata"]["uid"] for rs in sets),
        # A replaced pod may still be in its grace period once the rollout is complete: only live ones count.
        "pods": sorted(p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")),
    }


def container(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = get(plane, namespace, "deployment", "mcpg-gateway")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return found


@pytest.fixture
def other_namespace(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-other"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


# --- the API server's rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "message"),
    [
        ("gw", {}, "metadata.name: must be mcpg-gateway"),
        ("mcpg-gateway", {"replicas": 0}, "should be greater than or equal to 1"),
        ("mcpg-gateway", {"service": {"httpNodePort": 30080}}, "httpNodePort: a node port needs type NodePort"),
        (
            "mcpg-gateway",
            {"service": {"type": "ClusterIP", "adminNodePort": 30090}},
            "adminNodePort: a node port needs type NodePort",
        ),
        (
            "mcpg-gateway",
            {"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": "10%"}},
            "minAvailable, maxUnavailable: set at most one of them",
        ),
        ("mcpg-gateway", {"podDisruptionBudget": {"maxUnavailable": "5"}}, "must be a number of pods"),
        ("mcpg-gateway", {"resources": {"limits": {"memory": "lots"}}}, "spec.resources.limits.memory"),
        ("mcpg-gateway", {"service": {"type": "External"}}, "Unsupported value"),
    ],
)
def test_the_api_server_refuses_an_mcpgateway_that_can_never_work(
    control_plane: ControlPlane, crds: None, namespace: str, name: str, spec: dict[str, Any], message: str
) -> None:
    error = apply(control_plane, namespace, mcp_gateway(spec, name), check=False)
    assert message in error, error


def test_the_api_server_accepts_every_field_set(control_plane: ControlPlane, crds: None, namespace: str) -> None:
    spec = {
        "replicas": 2,
        "service": {"type": "NodePort", "httpNodePort": NODE_PORT, "annotations": {"a.example/b": "c"}},
        "resources": {"requests": {"cpu": "250m", "memory": 134217728}, "limits": {"memory": "256Mi"}},
        "podDisruptionBudget": {"enabled": True, "minAvailable": "50%"},
        "networkPolicy": {"enabled": True, "ingressFrom": [{"namespaceSelector": {"matchLabels": {"a": "b"}}}]},
    }
    text = yaml.safe_dump(mcp_gateway(spec))
    result = control_plane.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=text, check=False)
    assert result.returncode == 0, result.stderr


# --- the operator -------------------------------------------------------------------------------------------


def test_one_namespaces_settings_roll_only_its_gateway_and_deleting_them_restores_the_defaults(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, other_namespace: str
) -> None:
    plane, shop, other = control_plane, namespace, other_namespace
    for ns in (shop, other):  # one pod each, so every rollout below is quick
        apply(plane, ns, polled("watched"), mcp_gateway({"replicas": 1}))
    for ns in (shop, other):
        applied(plane, ns)
        wait(plane, ns, "--for=condition=Ready", "resourcewatch/watched")
        rolled_out(plane, ns)
    untouched = footprint(plane, other)
    before = footprint(plane, shop)

    # New resources: shop's gateway rolls to a new ReplicaSet and new pods; the other namespace's does not move.
    resources = {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"memory": "384Mi"}}
    apply(plane, shop, mcp_gateway({"replicas": 1, "resources": resources}))
    applied(plane, shop)
    rolled_out(plane, shop)
    assert container(plane, shop)["resources"] == resources
    after = footprint(plane, shop)
    assert after["generation"] > before["generation"]
    assert set(after["pods"]).isdisjoint(before["pods"])
    assert footprint(plane, other) == untouched

    # The Service follows the type and node port; the budget and the policy appear.
    spec = {
        "replicas": 1,
        "resources": resources,
        "service": {"type": "NodePort", "httpNodePort": NODE_PORT, "annotations": {"lb.example/scheme": "internal"}},
        "podDisruptionBudget": {"enabled": True},
        "networkPolicy": {"enabled": True},
    }
    apply(plane, shop, mcp_gateway(spec))
    applied(plane, shop)
    service = get(plane, shop, "service", "mcpg-gateway")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0]["nodePort"] == NODE_PORT
    assert service["metadata"]["annotations"]["lb.example/scheme"] == "internal"
    assert get(plane, shop, "pdb", "mcpg-gateway")["spec"]["maxUnavailable"] == 1
    policy = get(plane, shop, "networkpolicy", "mcpg-gateway")["spec"]
    # DNS, the backend, and the API server (its Service's port and its own), where each pod follows its configuration
    assert {p["port"] for rule in policy["egress"] for p in rule["ports"]} == {53, 80, 443, 6443}
    status = get(plane, shop, "mcpgateway", "mcpg-gateway")["status"]
    assert (status["replicas"], status["serviceType"]) == (1, "NodePort")
    assert footprint(plane, other) == untouched

    # Deleted: the operator's defaults again, and what the McpGateway asked for is gone.
    plane.kubectl("-n", shop, "delete", "mcpgateway", "mcpg-gateway")
    wait(plane, shop, "--for=jsonpath={.spec.replicas}=3", "deployment/mcpg-gateway")
    wait(plane, shop, "--for=jsonpath={.spec.type}=ClusterIP", "service/mcpg-gateway")
    wait(plane, shop, "--for=delete", "pdb/mcpg-gateway", "networkpolicy/mcpg-gateway")
    assert container(plane, shop)["resources"] == GATEWAY_RESOURCES  # the chart's default
    annotations = get(plane, shop, "service", "mcpg-gateway")["metadata"].get("annotations") or {}
    assert "lb.example/scheme" not in annotations
    assert footprint(plane, other) == untouched
