"""The cluster-wide bus step reads every namespace's McpGateway: one tenant's, however absurd, never stops it.

The step decides which namespaces get an account on the managed bus from each McpGateway's replicas
(`gateway_settings.shape`), all in one pass; a spec that raised there would fail the step for every namespace.
"""

from __future__ import annotations

from typing import Any

from mcpg_operator import bus_reconcile
from mcpg_operator.settings import BusSettings, GatewayDefaults
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import resourcewatch

BUS = BusSettings("managed", "mcpg-system")


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}


def mcp_gateway(namespace: str, **spec: Any) -> dict[str, Any]:
    meta = {"name": "mcpg-gateway", "namespace": namespace}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": meta, "spec": spec}


async def test_an_mcpgateway_with_a_quantity_beyond_any_range_leaves_every_namespace_its_bus_account(
    kube: FakeKube,
) -> None:
    for namespace in ("shop", "tenant"):
        kube.put(in_namespace(resourcewatch(token=None), namespace))
    huge = {"requests": {"cpu": "1e999999999"}, "limits": {"memory": "1Gi"}}
    kube.put(mcp_gateway("tenant", replicas=100_000, resources=huge))
    # Refused, the tenant's McpGateway leaves its namespace on the operator's 3 replicas: on the bus, as is `shop`.
    assert await bus_reconcile.accounts(kube, BUS, (), GatewayDefaults(replicas=3)) == ["shop", "tenant"]
