"""The gateway's PodDisruptionBudget and NetworkPolicy as built, and the writes that keep them as wanted."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_operator import actions as w
from mcpg_operator import bus, gateway_policy, objects, observed
from mcpg_operator.gateway_settings import DisruptionBudgetSpec, NetworkPolicySpec, Shape
from mcpg_operator.settings import BusSettings, GatewayDefaults

OWNERS = objects.owner_references([("hook", "uid-1")])
MANAGED = bus.wiring(BusSettings("managed", "mcpg-system"), "shop", 3)
EXTERNAL = bus.wiring(BusSettings("external", "", url="tls://nats.example:7422", credentials_secret="c"), "shop", 3)


def config(*urls: str, nats: str | None = None) -> dict[str, Any]:
    resources = [{"name": f"r{i}", "backend": {"kind": "http", "url": u}} for i, u in enumerate(urls)]
    strategies = [{"name": "db", "watch": {"strategy": {"type": "sql_polling", "url": "postgresql://db.example/x"}}}]
    gateway: dict[str, Any] = {"bus": {"url": "${env.MCPG_BUS_URL}"}}
    if nats:
        gateway["nats"] = {"url": nats}
    return {"mcp": {"capabilities": {"resources": resources, "resource_templates": strategies}}, "gateway": gateway}


# --- the PodDisruptionBudget --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "budget"),
    [
        (DisruptionBudgetSpec(enabled=True), {"maxUnavailable": 1}),
        (DisruptionBudgetSpec(enabled=True, min_available="50%"), {"minAvailable": "50%"}),
        (DisruptionBudgetSpec(enabled=True, max_unavailable=0), {"maxUnavailable": 0}),
    ],
)
def test_the_budget_selects_the_gateway_pods_with_the_one_bound_asked_for(
    spec: DisruptionBudgetSpec, budget: dict[str, Any]
) -> None:
    body = gateway_policy.disruption_budget("shop", OWNERS, spec)
    assert (body["apiVersion"], body["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert body["spec"] == {"selector": {"matchLabels": objects.SELECTOR}, **budget}
    assert body["metadata"]["name"] == objects.NAME
    assert body["metadata"]["ownerReferences"] == OWNERS
    assert objects.MANAGED.items() <= body["metadata"]["labels"].items()


# --- the NetworkPolicy --------------------------------------------------------------------------------------


def test_ingress_reaches_only_the_gateways_ports_from_anywhere_unless_peers_are_named() -> None:
    anywhere = gateway_policy.network_policy("shop", OWNERS, NetworkPolicySpec(enabled=True), config(), None)
    ports = [{"port": 8080, "protocol": "TCP"}, {"port": 9090, "protocol": "TCP"}]
    assert anywhere["spec"]["ingress"] == [{"ports": ports}]
    assert anywhere["spec"]["podSelector"] == {"matchLabels": objects.SELECTOR}
    assert anywhere["spec"]["policyTypes"] == ["Ingress", "Egress"]
    peer = {"namespaceSelector": {"matchLabels": {"team": "web"}}}
    named = gateway_policy.network_policy(
        "shop", OWNERS, NetworkPolicySpec(enabled=True, ingress_from=[peer]), {}, None
    )
    assert named["spec"]["ingress"] == [{"ports": ports, "from": [peer]}]


def test_named_peers_still_let_the_operators_namespace_reach_the_admin_port_where_it_asks_what_pods_serve() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"team": "web"}}}
    spec = NetworkPolicySpec(enabled=True, ingress_from=[peer])
    body = gateway_policy.network_policy("shop", OWNERS, spec, {}, None, operator_namespace="mcpg-system")
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mcpg-system"}}}
    assert body["spec"]["ingress"][1] == {"ports": [{"port": 9090, "protocol": "TCP"}], "from": [operator]}
    anywhere = gateway_policy.network_policy("shop", OWNERS, NetworkPolicySpec(enabled=True), {}, None, "mcpg-system")
    assert len(anywhere["spec"]["ingress"]) == 1  # from anywhere already includes the operator


def test_egress_is_dns_and_the_port_of_every_url_the_configuration_names() -> None:
    rendered = config("https://api.example/v1", "http://upstream:8081/x", nats="nats://events.example")
    body = gateway_policy.network_policy("shop", OWNERS, NetworkPolicySpec(enabled=True), rendered, None)
    dns, api_server, others = body["spec"]["egress"]
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert api_server == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    assert [p["port"] for p in others["ports"]] == [443, 4222, 5432, 8081]
    assert all(p["protocol"] == "TCP" for p in others["ports"])


def test_the_api_servers_ports_are_a_setting_because_no_policy_can_name_the_api_server() -> None:
    spec = NetworkPolicySpec.model_validate({"enabled": True, "apiServerPorts": [16443]})
    body = gateway_policy.network_policy("shop", OWNERS, spec, {}, None)
    assert body["spec"]["egress"][1] == {"ports": [{"port": 16443, "protocol": "TCP"}]}


@pytest.mark.parametrize(
    ("wiring", "port"), [pytest.param(MANAGED, 4222, id="managed"), pytest.param(EXTERNAL, 7422, id="external")]
)
def test_the_bus_port_is_allowed_when_the_replicas_share_one(wiring: bus.Wiring | None, port: int) -> None:
    assert gateway_policy.egress_ports(config(), wiring) == sorted({5432, port})


def test_without_any_url_only_dns_and_the_api_server_are_reached() -> None:
    body = gateway_policy.network_policy("shop", OWNERS, NetworkPolicySpec(enabled=True), {}, None)
    assert len(body["spec"]["egress"]) == 2


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("https://h/x", 443),
        ("http://h:8000/", 8000),
        ("postgresql+asyncpg://u@db/x", 5432),
        ("mysql://db", 3306),
        ("https://h:{port}/x", None),
        ("https://{host}/x/{id}", 443),
        ("sqlite:///data.db", None),
    ],
)
def test_a_urls_port_is_the_stated_one_else_its_schemes_usual_one(url: str, port: int | None) -> None:
    assert gateway_policy.url_port(url) == port


# --- the writes ---------------------------------------------------------------------------------------------


def snapshot(
    disruption_budget: dict[str, Any] | None = None, network_policy: dict[str, Any] | None = None
) -> observed.Snapshot:
    return observed.snapshot(
        "shop",
        watches=[],
        webhook_tokens=[],
        secrets=[],
        disruption_budget=disruption_budget,
        network_policy=network_policy,
    )


def applied(writes: list[w.Write]) -> dict[str, dict[str, Any]]:
    return {x.ref.plural: x.body for x in writes if isinstance(x, w.ApplyObject)}


ENABLED = Shape(
    GatewayDefaults(),
    disruption_budget=DisruptionBudgetSpec(enabled=True),
    network_policy=NetworkPolicySpec(enabled=True),
)
PDB = w.Ref("poddisruptionbudgets", objects.NAME, "policy")
NETPOL = w.Ref("networkpolicies", objects.NAME, "networking.k8s.io")


def test_wanted_objects_are_applied_once_and_then_left_alone() -> None:
    first = gateway_policy.writes(snapshot(), ENABLED, OWNERS, config(), None)
    assert [(type(x), getattr(x, "ref", None)) for x in first] == [(w.ApplyObject, PDB), (w.ApplyObject, NETPOL)]
    bodies = applied(first)
    live = snapshot(disruption_budget=bodies["poddisruptionbudgets"], network_policy=bodies["networkpolicies"])
    assert gateway_policy.writes(live, ENABLED, OWNERS, config(), None) == []
    # A new backend port changes the policy: it is applied again.
    again = gateway_policy.writes(live, ENABLED, OWNERS, config("http://other:8443/"), None)
    assert list(applied(again)) == ["networkpolicies"]


def test_the_operators_own_are_deleted_when_no_longer_wanted_and_a_users_are_never_touched() -> None:
    bodies = applied(gateway_policy.writes(snapshot(), ENABLED, OWNERS, config(), None))
    ours = snapshot(disruption_budget=bodies["poddisruptionbudgets"], network_policy=bodies["networkpolicies"])
    assert gateway_policy.writes(ours, Shape(GatewayDefaults()), OWNERS, config(), None) == [
        w.DeleteObject(PDB),
        w.DeleteObject(NETPOL),
    ]
    users = {**bodies["networkpolicies"], "metadata": {"name": objects.NAME, "labels": {"team": "web"}}}
    theirs = snapshot(network_policy=users)
    assert theirs.network_policy is None  # read as absent: neither compared nor deleted
    assert gateway_policy.writes(theirs, Shape(GatewayDefaults()), OWNERS, config(), None) == []
