"""The operator's bounds on McpGateways (issue 31, finding 2), on a real API server with gateways as real pods.

A tenant who may edit only McpGateways gets exactly what the bounds allow: the session's operator runs the chart's
defaults (at most 10 replicas, 2 CPUs and 2Gi requested, a 4Gi memory limit, ClusterIP or NodePort) with node ports
and `lb.example/` annotations allowed (`fixtures.CHART_VALUES`). What only this tier proves, and the in-memory
fake cannot: that an unset request really is its limit on the API server (the bound on requests counts it so), that
server-side apply really removes what the operator stops sending (a node port the API server allocated, the
annotations, a resource), and that a Service the API server refuses, here by an admission policy, does not keep a
deleted McpGateway's replicas, resources or budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.fixtures import CHART_VALUES, GATEWAY_RESOURCES
from mcpg_testing.manifests import polled, refusing_gateway_services
from mcpg_testing.processes import wait_until
from mcpg_testing.release import OperatorRelease

BOUND_S = 120
"""Bound on one rollout of real gateway pods, or one settings change reaching the objects."""
DEFAULT_REPLICAS = int(CHART_VALUES["gateway"]["replicas"])
"""The session release's `gateway.replicas`."""
DEFAULT_RESOURCES = GATEWAY_RESOURCES
"""The session release's `gateway.resources`: what a gateway gets when its McpGateway names none."""
POLICY_MESSAGE = "the platform team froze this namespace's gateway Service"
PROBE = {
    "replicas": 100_000,
    "resources": {"requests": {"cpu": "1000", "memory": "4Ti"}, "limits": {"memory": "4Ti"}},
    "service": {"type": "LoadBalancer", "annotations": {"lb.example/scheme": "internet-facing"}},
    "podDisruptionBudget": {"enabled": True, "minAvailable": "100%"},
}
"""What the issue's probe asked for (less the node port, which another test of the session may hold)."""


def mcp_gateway(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": {"name": "mcpg-gateway"}, "spec": spec}


def apply(plane: ControlPlane, namespace: str, *docs: dict[str, Any]) -> None:
    plane.kubectl("-n", namespace, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))


def get(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", namespace, "get", *what, "-o", "json").stdout)


def wait(plane: ControlPlane, namespace: str, *args: str) -> None:
    plane.kubectl("-n", namespace, "wait", *args, f"--timeout={BOUND_S}s")


def rolled_out(plane: ControlPlane, namespace: str) -> None:
    plane.kubectl("-n", namespace, "rollout", "status", "deployment/mcpg-gateway", f"--timeout={BOUND_S}s")


def ready_reason(plane: ControlPlane, namespace: str, reason: str) -> dict[str, Any]:
    """Wait until the McpGateway's current generation is Ready with `reason`; its Ready condition."""
    generation = get(plane, namespace, "mcpgateway", "mcpg-gateway")["metadata"]["generation"]
    wait(plane, namespace, f"--for=jsonpath={{.status.observedGeneration}}={generation}", "mcpgateway/mcpg-gateway")
    path = "{.status.conditions[?(@.type=='Ready')].reason}"
    wait(plane, namespace, f"--for=jsonpath={path}={reason}", "mcpgateway/mcpg-gateway")
    status = get(plane, namespace, "mcpgateway", "mcpg-gateway")["status"]
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == "Ready")
    return found


def container(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    spec = get(plane, namespace, "deployment", "mcpg-gateway")["spec"]["template"]["spec"]
    found: dict[str, Any] = spec["containers"][0]
    return found


def absent(plane: ControlPlane, namespace: str, *what: str) -> bool:
    result = plane.kubectl("-n", namespace, "get", *what, "--ignore-not-found", "-o", "name", check=False)
    return result.returncode == 0 and not result.stdout.strip()


# --- refused whole, on the API server's objects ---------------------------------------------------------------


def test_an_mcpgateway_outside_the_bounds_makes_nothing_of_what_it_asks_and_names_the_bound(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    plane = control_plane
    apply(plane, namespace, polled("watched"), mcp_gateway(PROBE))
    ready = ready_reason(plane, namespace, "InvalidSpec")
    assert ready["message"] == "spec.replicas: 100000 is above the operator's maximum of 10 (MCPG_GATEWAY_MAX_REPLICAS)"
    rolled_out(plane, namespace)
    deployment = get(plane, namespace, "deployment", "mcpg-gateway")
    assert deployment["spec"]["replicas"] == DEFAULT_REPLICAS
    assert container(plane, namespace)["resources"] == DEFAULT_RESOURCES
    service = get(plane, namespace, "service", "mcpg-gateway")
    assert service["spec"]["type"] == "ClusterIP"
    assert "lb.example/scheme" not in (service["metadata"].get("annotations") or {})
    assert absent(plane, namespace, "pdb", "mcpg-gateway")

    # Each bound in turn: the first one outside is the one named.
    within = {"replicas": 1, "service": {"type": "NodePort"}}
    for change, said in (
        ({"service": {"type": "LoadBalancer"}}, "spec.service.type: LoadBalancer is not among the Service types"),
        (
            {"service": {"annotations": {"external-dns.alpha.kubernetes.io/hostname": "bank.example"}}},
            "spec.service.annotations: 'external-dns.alpha.kubernetes.io/hostname' is not among the annotation keys",
        ),
        ({"resources": {"limits": {"memory": "3Gi"}}}, "spec.resources.requests.memory: unset, so the API server"),
        ({"podDisruptionBudget": {"enabled": True, "maxUnavailable": 0}}, "spec.podDisruptionBudget.maxUnavailable"),
    ):
        apply(plane, namespace, mcp_gateway({**within, **change}))
        assert ready_reason(plane, namespace, "InvalidSpec")["message"].startswith(said)
    assert get(plane, namespace, "deployment", "mcpg-gateway")["spec"]["replicas"] == DEFAULT_REPLICAS
    assert absent(plane, namespace, "pdb", "mcpg-gateway")


def test_the_api_server_makes_an_unset_request_its_limit(control_plane: ControlPlane, namespace: str) -> None:
    # Why the bound on requests counts an unset request as its limit: a 3Gi limit alone reserves 3Gi.
    # A pod needs its ServiceAccount: the controller that makes the default one may not have got to a new namespace.
    control_plane.kubectl("-n", namespace, "create", "serviceaccount", "default", check=False)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "limit-only"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"memory": "3Gi", "cpu": "1"}}}]},
    }
    result = control_plane.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod)
    )
    resources = json.loads(result.stdout)["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"memory": "3Gi", "cpu": "1"}


# --- undone on deletion, even behind a refused Service --------------------------------------------------------


@pytest.fixture
def frozen_service(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """The name of the policy `freeze` puts in force once the Service exists; removed after the test, whatever
    happened in it."""
    name = f"freeze-gateway-{namespace}"
    yield name
    control_plane.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)


def freeze(plane: ControlPlane, namespace: str, name: str) -> None:
    docs = refusing_gateway_services(name, namespace, POLICY_MESSAGE, ("UPDATE",))
    plane.kubectl("apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))

    def in_force() -> bool:  # the API server loads policies asynchronously: ask it until it refuses
        probe = ("-n", namespace, "annotate", "service/mcpg-gateway", "probe=1", "--dry-run=server")
        result = plane.kubectl(*probe, check=False)
        return result.returncode != 0 and POLICY_MESSAGE in result.stderr

    wait_until(in_force, 60, "the admission policy to be in force")


def test_deleting_the_mcpgateway_gives_back_the_replicas_resources_and_budget_while_the_service_is_refused(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str, frozen_service: str
) -> None:
    plane = control_plane
    resources = {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": "384Mi"}}
    spec = {
        "replicas": 1,
        "resources": resources,
        "service": {"type": "NodePort", "annotations": {"lb.example/scheme": "internal"}},  # node ports allocated
        "podDisruptionBudget": {"enabled": True},
    }
    apply(plane, namespace, polled("watched"), mcp_gateway(spec))
    ready_reason(plane, namespace, "Applied")
    rolled_out(plane, namespace)
    assert container(plane, namespace)["resources"] == resources
    allocated = [p["nodePort"] for p in get(plane, namespace, "service", "mcpg-gateway")["spec"]["ports"]]
    assert all(30000 <= p <= 32767 for p in allocated)

    freeze(plane, namespace, frozen_service)
    plane.kubectl("-n", namespace, "delete", "mcpgateway", "mcpg-gateway")
    # The Service cannot go back, and the watch says why; the rest of the gateway does.
    path = '{.status.conditions[?(@.type=="Ready")].reason}'
    wait(plane, namespace, f"--for=jsonpath={path}=ApplyFailed", "resourcewatch/watched")
    wait(plane, namespace, f"--for=jsonpath={{.spec.replicas}}={DEFAULT_REPLICAS}", "deployment/mcpg-gateway")
    wait(plane, namespace, "--for=delete", "pdb/mcpg-gateway")
    assert container(plane, namespace)["resources"] == DEFAULT_RESOURCES  # the cpu limit removed, not kept
    assert get(plane, namespace, "service", "mcpg-gateway")["spec"]["type"] == "NodePort"  # refused, as it was

    plane.kubectl("delete", "validatingadmissionpolicybinding", frozen_service)
    # The operator retries with backoff (30 s at most): the Service follows with no edit.
    wait(plane, namespace, "--for=jsonpath={.spec.type}=ClusterIP", "service/mcpg-gateway")
    service = get(plane, namespace, "service", "mcpg-gateway")
    assert [p.get("nodePort") for p in service["spec"]["ports"]] == [None, None]  # allocated ones released too
    annotations = service["metadata"].get("annotations") or {}
    assert not {"lb.example/scheme", "mcpg.dev/service-annotations"} & set(annotations)
    wait(plane, namespace, f"--for=jsonpath={path}=Served", "resourcewatch/watched")
    rolled_out(plane, namespace)
