"""A namespace's McpGateway through whole reconcile passes against the in-memory API: its settings reach the
gateway's objects, its status says so, and deleting it returns the namespace to the operator's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_operator.kube import Refused
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.reconcile import write
from mcpg_operator.settings import BusSettings, GatewayBounds, GatewayDefaults
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, resourcewatch

DEFAULTS = GatewayDefaults(replicas=3, bounds=GatewayBounds(node_ports=True, service_annotations=("lb.example/",)))
"""The admin lets McpGateways choose node ports and set `lb.example/` annotations (`SHAPED` does both)."""
BUS = BusSettings("managed", "mcpg-system")
MCPGW = f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/mcpgateways/mcpg-gateway"
SERVICE = f"/api/v1/namespaces/{NS}/services/mcpg-gateway"
PDB = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/mcpg-gateway"
NETPOL = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/mcpg-gateway"
BUS_SECRET = f"/api/v1/namespaces/{NS}/secrets/mcpg-gateway-bus"


def mcp_gateway(**spec: Any) -> dict[str, Any]:
    meta = {"name": "mcpg-gateway", "namespace": NS}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": meta, "spec": spec}


SHAPED = mcp_gateway(
    replicas=2,
    service={"type": "NodePort", "httpNodePort": 30081, "annotations": {"lb.example/scheme": "internal"}},
    resources={"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "512Mi"}},
    podDisruptionBudget={"enabled": True},
    networkPolicy={"enabled": True},
)


async def settle(kube: FakeKube, clock: Clock, defaults: GatewayDefaults = DEFAULTS) -> None:
    """Reconcile, letting every rollout complete, until a pass has nothing left to write."""
    for _ in range(10):
        before = len(kube.writes)
        outcome = await reconcile.reconcile(
            kube, NS, defaults, clock, token=lambda: "t" * 43, bus_settings=BUS, fetch=kube.acknowledgement
        )
        if kube.deployment(NS) is not None:
            kube.complete_rollout(NS)
        if len(kube.writes) == before and not outcome.rerun:
            return
    raise AssertionError("the reconcile did not settle in 10 passes")


def container(kube: FakeKube) -> dict[str, Any]:
    deployment = kube.deployment(NS)
    assert deployment is not None
    found: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return found


def ready(kube: FakeKube) -> tuple[str, str, str]:
    status = kube.objects[MCPGW]["status"]
    cond = next(c for c in status["conditions"] if c["type"] == "Ready")
    return cond["status"], cond["reason"], cond["message"]


async def test_the_settings_reach_the_deployment_service_budget_and_policy_and_are_reported_applied(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(SHAPED)
    await settle(kube, clock)
    deployment = kube.deployment(NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    assert container(kube)["resources"] == {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "512Mi"}}
    service = kube.objects[SERVICE]
    assert service["spec"]["type"] == "NodePort"
    assert [p.get("nodePort") for p in service["spec"]["ports"]] == [30081, None]
    assert service["spec"]["sessionAffinity"] == "ClientIP"  # two replicas: a session stays on its pod
    assert service["metadata"]["annotations"]["lb.example/scheme"] == "internal"
    assert kube.objects[PDB]["spec"]["maxUnavailable"] == 1
    egress = kube.objects[NETPOL]["spec"]["egress"]
    # DNS, the API server (the pods read their configuration through it), the backend, the bus
    assert {p["port"] for rule in egress for p in rule["ports"]} == {53, 443, 6443, 80, 4222}
    assert BUS_SECRET in kube.objects  # two replicas share the managed bus
    assert ready(kube)[:2] == ("True", "Applied")
    status = kube.objects[MCPGW]["status"]
    assert (status["replicas"], status["serviceType"], status["observedGeneration"]) == (2, "NodePort", 1)


async def test_deleting_the_mcpgateway_returns_to_the_defaults_and_removes_the_budget_and_policy(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(SHAPED)
    await settle(kube, clock)
    kube.remove(MCPGW)
    await settle(kube, clock)
    deployment = kube.deployment(NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 3
    assert container(kube)["resources"] == DEFAULTS.resources
    service = kube.objects[SERVICE]
    assert service["spec"]["type"] == "ClusterIP"
    assert "annotations" not in service["metadata"]
    assert PDB not in kube.objects
    assert NETPOL not in kube.objects
    deletes = [c.path for c in kube.writes if c.method == "delete"]
    assert PDB in deletes
    assert NETPOL in deletes


async def test_dropping_one_resource_limit_rolls_the_deployment_without_it(kube: FakeKube, clock: Clock) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(mcp_gateway(resources={"limits": {"cpu": "1", "memory": "512Mi"}}))
    await settle(kube, clock)
    kube.put(mcp_gateway(resources={"limits": {"memory": "512Mi"}}))
    await settle(kube, clock)
    assert container(kube)["resources"] == {"limits": {"memory": "512Mi"}}


async def test_a_settled_namespace_with_an_mcpgateway_writes_nothing_more(kube: FakeKube, clock: Clock) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(SHAPED)
    await settle(kube, clock)
    before = len(kube.writes)
    await reconcile.reconcile(kube, NS, DEFAULTS, clock, bus_settings=BUS, fetch=kube.acknowledgement)
    assert kube.writes[before:] == []


async def test_replicas_without_a_bus_are_refused_and_the_operators_count_stays(kube: FakeKube, clock: Clock) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(mcp_gateway(replicas=3, podDisruptionBudget={"enabled": True}))
    await settle(kube, clock, GatewayDefaults(replicas=1))
    deployment = kube.deployment(NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1
    assert BUS_SECRET not in kube.objects
    assert PDB not in kube.objects
    status, reason, message = ready(kube)
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith("spec.replicas: 3 gateway replicas share a NATS bus, and the operator has none")
    stalled = next(c for c in kube.objects[MCPGW]["status"]["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True"


async def test_without_a_resourcewatch_the_mcpgateway_says_no_gateway_runs(kube: FakeKube, clock: Clock) -> None:
    kube.put(SHAPED)
    await settle(kube, clock)
    assert ready(kube)[:2] == ("False", "NoGateway")
    assert kube.deployment(NS) is None
    assert PDB not in kube.objects


# --- the operator's bounds (issue 31: a tenant gets exactly what the cluster admin's bounds allow) --------------

PROBE = mcp_gateway(
    replicas=100_000,
    resources={"requests": {"cpu": "1000", "memory": "4Ti"}, "limits": {"memory": "4Ti"}},
    service={"type": "LoadBalancer", "httpNodePort": 30080, "annotations": {"lb.example/scheme": "internet-facing"}},
    podDisruptionBudget={"enabled": True, "minAvailable": "100%"},
)
"""What the issue's probe asked for as a tenant with no rights on Deployments, Services or budgets."""
DEFAULT_BOUNDS = GatewayDefaults(replicas=3)
"""The operator's defaults with the bounds a chart install gets."""


def assert_defaults(kube: FakeKube, defaults: GatewayDefaults) -> None:
    """The gateway's objects are exactly the operator's defaults: nothing an McpGateway asked for is left."""
    deployment = kube.deployment(NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == defaults.replicas
    assert container(kube)["resources"] == defaults.resources
    service = kube.objects[SERVICE]
    assert service["spec"]["type"] == defaults.service_type
    assert [p.get("nodePort") for p in service["spec"]["ports"]] == [defaults.http_node_port, defaults.admin_node_port]
    assert "annotations" not in service["metadata"]
    assert PDB not in kube.objects


async def test_an_mcpgateway_outside_the_bounds_is_refused_whole_and_the_namespace_runs_the_defaults(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(PROBE)
    await settle(kube, clock, DEFAULT_BOUNDS)
    assert_defaults(kube, DEFAULT_BOUNDS)
    status, reason, message = ready(kube)
    assert (status, reason) == ("False", "InvalidSpec")
    assert message == "spec.replicas: 100000 is above the operator's maximum of 10 (MCPG_GATEWAY_MAX_REPLICAS)"
    assert kube.objects[MCPGW]["status"]["replicas"] == 3  # what is in effect: the operator's count


async def test_an_applied_mcpgateway_edited_outside_the_bounds_returns_the_gateway_to_the_defaults(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch(token=None))
    kube.put(mcp_gateway(replicas=5, service={"type": "NodePort"}, podDisruptionBudget={"enabled": True}))
    await settle(kube, clock, DEFAULT_BOUNDS)
    assert ready(kube)[:2] == ("True", "Applied")
    kube.put(mcp_gateway(replicas=5, service={"type": "LoadBalancer"}, podDisruptionBudget={"enabled": True}))
    await settle(kube, clock, DEFAULT_BOUNDS)
    assert_defaults(kube, DEFAULT_BOUNDS)
    assert ready(kube)[2].startswith("spec.service.type: LoadBalancer is not among the Service types the operator")


QUICKSTART = GatewayDefaults(replicas=3, service_type="NodePort", http_node_port=30080, admin_node_port=30090)
"""The quickstart's operator: every namespace's Service asks for the node ports 30080 and 30090, which only one
namespace of the cluster can hold."""
PORT_TAKEN = Refused(
    422,
    "Invalid",
    'Service "mcpg-gateway" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already '
    "allocated",
)


async def test_deleting_the_mcpgateway_returns_the_deployment_and_budget_to_the_defaults_when_the_service_is_refused(
    kube: FakeKube, clock: Clock
) -> None:
    # The namespace runs 5 replicas and a budget on a NodePort Service with node ports the API server allocated,
    # while another namespace holds the quickstart's 30080. Deleted, its McpGateway must give back the replicas,
    # the resources and the budget even though the Service cannot go back to 30080.
    kube.put(resourcewatch(token=None))
    resources = {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
    kube.put(
        mcp_gateway(
            replicas=5, resources=resources, service={"type": "NodePort"}, podDisruptionBudget={"enabled": True}
        )
    )
    await settle(kube, clock, QUICKSTART)
    assert ready(kube)[:2] == ("True", "Applied")
    kube.remove(MCPGW)
    kube.refuse(SERVICE, PORT_TAKEN)
    with pytest.raises(write.ApplyFailed) as raised:  # the namespace's watches report the Service's refusal
        await reconcile.reconcile(kube, NS, QUICKSTART, clock, bus_settings=BUS, fetch=kube.acknowledgement)
    assert "provided port is already allocated" in raised.value.failure.message
    deployment = kube.deployment(NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 3
    assert container(kube)["resources"] == QUICKSTART.resources
    assert PDB not in kube.objects
    kube.allow(SERVICE)  # the other namespace let go of the port: the Service follows at the next pass
    await settle(kube, clock, QUICKSTART)
    assert_defaults(kube, QUICKSTART)
