"""A namespace's McpGateway through whole reconcile passes against the in-memory API: its settings reach the
gateway's objects, its status says so, and deleting it returns the namespace to the operator's defaults."""

from __future__ import annotations

from typing import Any

from mcpg_operator import reconcile
from mcpg_operator.settings import BusSettings, GatewayDefaults
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, resourcewatch

DEFAULTS = GatewayDefaults(replicas=3)
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
        outcome = await reconcile.reconcile(kube, NS, defaults, clock, token=lambda: "t" * 43, bus_settings=BUS)
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
    assert {p["port"] for rule in egress for p in rule["ports"]} == {53, 80, 4222}  # DNS, the backend, the bus
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
    await reconcile.reconcile(kube, NS, DEFAULTS, clock, bus_settings=BUS)
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
