"""The operator's settings: read once from the environment, every bad variable named."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from mcpg_gateway.contract import config
from mcpg_operator import settings

CHART = Path(__file__).parents[3] / "charts" / "mcpg"


def test_operator_defaults_come_from_the_environment() -> None:
    loaded = settings.load(
        {
            **POD,
            "MCPG_GATEWAY_REPLICAS": "3",
            "MCPG_GATEWAY_ALLOWED_ORIGINS": '["https://a"]',
            "MCPG_GATEWAY_IMAGE": "r/g:2",
        }
    )
    d = loaded.gateway
    assert (d.replicas, d.allowed_origins, d.image) == (3, ["https://a"], "r/g:2")
    assert copy.deepcopy(d) == d


POD = {"POD_NAMESPACE": "ops", "POD_NAME": "mcpg-operator-7d9f-x2x4k"}
"""What the chart's downward API gives every replica."""


def test_the_gateways_limits_subscriptions_liveness_and_server_card_come_from_the_environment() -> None:
    d = settings.load(
        {
            **POD,
            "MCPG_GATEWAY_LIMITS": '{"watches_per_principal": 20, "watches_total": 40, "body_timeout_s": 5}',
            "MCPG_GATEWAY_SUBSCRIPTIONS": '{"lifetime_s": 3600}',
            "MCPG_GATEWAY_LIVENESS": '{"interval_s": 30}',
            "MCPG_GATEWAY_SERVER_CARD": "false",
        }
    ).gateway
    assert (d.limits.watches_per_principal, d.limits.watches_total, d.limits.body_timeout_s) == (20, 40, 5.0)
    assert d.limits.sessions_total == config.LimitsConfig().sessions_total  # a key not given: the gateway's
    assert (d.subscriptions.lifetime_s, d.server_card) == (3600.0, False)
    assert (d.liveness.interval_s, d.liveness.timeout_s) == (30.0, config.LivenessConfig().timeout_s)


def test_what_the_chart_sets_by_default_leaves_every_gateway_setting_to_the_gateway() -> None:
    d = settings.load({**POD, "MCPG_GATEWAY_LIMITS": "{}", "MCPG_GATEWAY_SUBSCRIPTIONS": "{}"}).gateway
    assert (d.limits, d.subscriptions, d.server_card) == (config.LimitsConfig(), config.SubscriptionsConfig(), None)


def test_the_pods_environment_alone_gives_the_documented_defaults() -> None:
    loaded = settings.load(POD)
    assert (loaded.resync_s, loaded.settle_s, loaded.watch_namespaces) == (30.0, 0.5, ())
    assert loaded.gateway == settings.GatewayDefaults(operator_namespace="ops")  # where a policy lets it in
    expected = settings.LeaderElection(namespace="ops", identity="mcpg-operator-7d9f-x2x4k")
    assert loaded.leader_election == expected
    election = loaded.leader_election
    assert (election.enabled, election.lease_name) == (True, "mcpg-operator")
    assert (election.lease_s, election.renew_s, election.retry_s) == (15.0, 10.0, 2.0)  # controller-runtime's


def test_leader_election_comes_from_the_environment() -> None:
    env = {
        **POD,
        "MCPG_LEADER_ELECTION_LEASE_NAME": "shop-operator",
        "MCPG_LEADER_ELECTION_NAMESPACE": "leases",
        "MCPG_LEADER_ELECTION_LEASE_DURATION_SECONDS": "4",
        "MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "3",
        "MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "0.5",
    }
    election = settings.load(env).leader_election
    assert (election.lease_name, election.namespace) == ("shop-operator", "leases")  # the variable wins
    assert (election.lease_s, election.renew_s, election.retry_s) == (4.0, 3.0, 0.5)


def test_without_a_pod_name_the_identity_is_the_host_name_and_a_random_suffix() -> None:
    first = settings.load({"POD_NAMESPACE": "ops"}).leader_election.identity
    second = settings.load({"POD_NAMESPACE": "ops"}).leader_election.identity
    assert first != second
    assert first.rpartition("_")[0] == second.rpartition("_")[0] != ""


def test_a_single_replica_run_by_hand_needs_no_lease_namespace() -> None:
    election = settings.load({"MCPG_LEADER_ELECTION_ENABLED": "false"}).leader_election
    assert (election.enabled, election.namespace) == (False, "")


def test_timings_and_namespaces_come_from_the_environment() -> None:
    loaded = settings.load(
        {**POD, "MCPG_RESYNC_SECONDS": "5", "MCPG_SETTLE_SECONDS": "0", "MCPG_WATCH_NAMESPACES": " shop, ,mail "}
    )
    assert (loaded.resync_s, loaded.settle_s, loaded.watch_namespaces) == (5.0, 0.0, ("shop", "mail"))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MCPG_GATEWAY_REPLICAS": "three"}, "MCPG_GATEWAY_REPLICAS: not valid JSON"),
        ({"MCPG_GATEWAY_REPLICAS": "0"}, "MCPG_GATEWAY_REPLICAS: Input should be greater than or equal to 1"),
        ({"MCPG_GATEWAY_SERVICE_TYPE": "Ingress"}, "MCPG_GATEWAY_SERVICE_TYPE: Input should be"),
        (  # the variable is named as it is spelled, and the item inside its JSON apart from it
            {"MCPG_GATEWAY_ALLOWED_ORIGINS": '["https://a", 3]'},
            r"^MCPG_GATEWAY_ALLOWED_ORIGINS: \[1\]: Input should be a valid string",
        ),
        (
            {"MCPG_GATEWAY_LIMITS": '{"watches_total": 0}'},
            "^MCPG_GATEWAY_LIMITS: watches_total: Input should be greater than or equal to 1",
        ),
        (
            {"MCPG_GATEWAY_LIMITS": '{"connections": 8}'},
            "^MCPG_GATEWAY_LIMITS: connections: Input should be greater than or equal to 16",
        ),
        (
            {"MCPG_GATEWAY_LIMITS": '{"header_timeout_s": "soon"}'},
            "^MCPG_GATEWAY_LIMITS: header_timeout_s: Input should be a valid number",
        ),
        (  # the contract's cross-field rule, against the gateway's default for the key not given
            {"MCPG_GATEWAY_LIMITS": '{"watches_per_principal": 600}'},
            r"^MCPG_GATEWAY_LIMITS: watches_per_principal \(600\) is more than watches_total \(512\)",
        ),
        (  # a typo: the message lists the keys spelled right
            {"MCPG_GATEWAY_LIMITS": '{"watches": 3}'},
            "^MCPG_GATEWAY_LIMITS: watches: Extra inputs are not permitted; the keys are watches_per_principal, ",
        ),
        ({"MCPG_GATEWAY_LIMITS": "[]"}, r"^MCPG_GATEWAY_LIMITS: must be a JSON object, got \[\]"),
        ({"MCPG_GATEWAY_LIMITS": "{"}, "^MCPG_GATEWAY_LIMITS: not valid JSON"),
        (
            {"MCPG_GATEWAY_SUBSCRIPTIONS": '{"slow_interval_ms": 1000}'},
            "^MCPG_GATEWAY_SUBSCRIPTIONS: slow_interval_ms: Input should be greater than or equal to 10000",
        ),
        (
            {"MCPG_GATEWAY_SUBSCRIPTIONS": '{"lifetime": 60}'},
            "^MCPG_GATEWAY_SUBSCRIPTIONS: lifetime: Extra inputs are not permitted; the keys are idle_after_s, ",
        ),
        ({"MCPG_GATEWAY_SERVER_CARD": "sometimes"}, "^MCPG_GATEWAY_SERVER_CARD: Input should be a valid boolean"),
        ({"MCPG_RESYNC_SECONDS": "soon"}, "MCPG_RESYNC_SECONDS: must be a number of seconds above 0, got 'soon'"),
        ({"MCPG_RESYNC_SECONDS": "0"}, "MCPG_RESYNC_SECONDS: must be a number of seconds above 0"),
        ({"MCPG_SETTLE_SECONDS": "-1"}, "MCPG_SETTLE_SECONDS: must be a number of seconds, 0 or more"),
        ({"MCPG_SETTLE_SECONDS": "nan"}, "MCPG_SETTLE_SECONDS: must be"),
        ({"MCPG_LEADER_ELECTION_ENABLED": "sometimes"}, "MCPG_LEADER_ELECTION_ENABLED: must be true or false"),
        ({"POD_NAMESPACE": ""}, "MCPG_LEADER_ELECTION_NAMESPACE: where the Lease lives is unknown"),
        ({"POD_NAMESPACE": "Ops_1"}, "POD_NAMESPACE: must be a namespace name"),
        ({"MCPG_LEADER_ELECTION_LEASE_NAME": "My Lease"}, "MCPG_LEADER_ELECTION_LEASE_NAME: must be a lowercase"),
        (
            {"MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "0"},
            "MCPG_LEADER_ELECTION_RETRY_PERIOD_SECONDS: must be a number of seconds above 0",
        ),
        (
            {"MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "20"},
            r"must be lease > renew deadline > retry period, got 15 > 20 > 2",
        ),
        (
            {"MCPG_LEADER_ELECTION_LEASE_DURATION_SECONDS": "4", "MCPG_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "2"},
            r"got 4 > 2 > 2",  # the leader would give up as the others try: no margin
        ),
    ],
)
def test_a_bad_operator_setting_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        settings.load({**POD, **env})


def test_a_bad_gateway_limit_stops_the_start_with_one_line_naming_the_variable_and_the_key() -> None:
    with pytest.raises(settings.SettingsError) as caught:
        settings.load({**POD, "MCPG_GATEWAY_LIMITS": '{"watches_per_principal": 0}'})
    assert str(caught.value) == "MCPG_GATEWAY_LIMITS: watches_per_principal: Input should be greater than or equal to 1"


def test_a_bad_liveness_setting_names_the_variable_and_the_key() -> None:
    with pytest.raises(settings.SettingsError) as caught:
        settings.load({**POD, "MCPG_GATEWAY_LIVENESS": '{"timeout_s": 0}'})
    assert str(caught.value) == "MCPG_GATEWAY_LIVENESS: timeout_s: Input should be greater than 0"


def test_every_bad_variable_is_named_at_once() -> None:
    env = {"MCPG_RESYNC_SECONDS": "x", "MCPG_GATEWAY_REPLICAS": "three", "MCPG_GATEWAY_SERVICE_TYPE": "Ingress"}
    with pytest.raises(settings.SettingsError) as caught:
        settings.load(env)
    for name in env:
        assert f"{name}:" in str(caught.value)


# --- the bus of gateway replicas ------------------------------------------------------------------------------


def test_by_default_the_bus_is_managed_beside_the_operator() -> None:
    assert settings.load(POD).bus == settings.BusSettings("managed", "ops", "nats:2.11-alpine")
    assert settings.load({**POD, "MCPG_BUS_NAMESPACE": "bus", "MCPG_BUS_IMAGE": "r/nats:2"}).bus == (
        settings.BusSettings("managed", "bus", "r/nats:2")  # the variable named for the purpose wins
    )


def test_one_replica_run_by_hand_needs_no_bus_namespace() -> None:
    loaded = settings.load({"MCPG_LEADER_ELECTION_ENABLED": "false"})
    assert (loaded.bus.mode, loaded.bus.namespace) == ("managed", "")


def test_an_external_bus_comes_from_the_environment() -> None:
    env = {
        **POD,
        "MCPG_BUS_MODE": "external",
        "MCPG_BUS_URL": "tls://nats.example:4222",
        "MCPG_BUS_CREDENTIALS_SECRET": "nats-creds",
    }
    assert settings.load(env).bus == settings.BusSettings(
        "external", "ops", "nats:2.11-alpine", "tls://nats.example:4222", "nats-creds"
    )  # the namespace: where a managed server left from before would be


EXTERNAL = {"MCPG_BUS_MODE": "external", "MCPG_BUS_CREDENTIALS_SECRET": "nats-creds"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MCPG_BUS_MODE": "embedded"}, "MCPG_BUS_MODE: must be one of managed, external, got 'embedded'"),
        ({"MCPG_BUS_MODE": "external"}, "MCPG_BUS_URL: required with MCPG_BUS_MODE=external"),
        (
            {"MCPG_BUS_MODE": "external", "MCPG_BUS_URL": "nats://h:4222"},
            "MCPG_BUS_CREDENTIALS_SECRET: required with MCPG_BUS_MODE=external",
        ),
        ({**EXTERNAL, "MCPG_BUS_URL": "nats://h:4222", "MCPG_BUS_CREDENTIALS_SECRET": "Creds!"}, "must be a Secret"),
        ({"MCPG_BUS_URL": "nats://h:4222"}, "MCPG_BUS_URL: only used with MCPG_BUS_MODE=external"),
        ({"MCPG_BUS_CREDENTIALS_SECRET": "c"}, "MCPG_BUS_CREDENTIALS_SECRET: only used with MCPG_BUS_MODE=external"),
        (
            {"POD_NAMESPACE": "", "MCPG_LEADER_ELECTION_NAMESPACE": "leases", "MCPG_GATEWAY_REPLICAS": "3"},
            "MCPG_BUS_NAMESPACE: gateway replicas above 1 share a managed NATS server, and where it runs is unknown",
        ),
        ({"MCPG_BUS_NAMESPACE": "Bus_1"}, "MCPG_BUS_NAMESPACE: must be a namespace name"),
    ],
)
def test_a_bad_bus_setting_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        settings.load({**POD, **env})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://gateway:hunter2-secret@nats.example:4222", "must not carry credentials"),
        ("nats://hunter2-secret@nats.example:4222", "must not carry credentials"),
        ("http://nats.example/hunter2-secret", "expected nats://host:port or tls://host:port"),
        ("nats://nats.example:hunter2-secret", "not a URL"),
    ],
)
def test_a_bad_bus_url_is_refused_without_echoing_it(url: str, message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message) as caught:
        settings.load({**POD, **EXTERNAL, "MCPG_BUS_URL": url})
    assert str(caught.value).startswith("MCPG_BUS_URL: ")
    assert "hunter2" not in str(caught.value)


# --- the chart that sets these variables ----------------------------------------------------------------------


def test_the_charts_deployment_sets_a_variable_for_every_gateway_default() -> None:
    # A setting the chart never sets is one a platform engineer cannot reach with `helm install`.
    template = (CHART / "templates" / "deployment.yaml").read_text()
    fields = [
        f for f in settings.GatewayDefaults.model_fields if f not in ("bounds", "operator_namespace")
    ]  # their own
    assert [f for f in fields if not re.search(rf"name: MCPG_GATEWAY_{f.upper()}\b", template)] == []


GATEWAY_SECTIONS = [
    ("limits", config.LimitsConfig),
    ("subscriptions", config.SubscriptionsConfig),
    ("liveness", config.LivenessConfig),
]

_BOUNDS = ("type", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")


@pytest.mark.parametrize(("value", "model"), GATEWAY_SECTIONS)
def test_the_charts_schema_refuses_what_the_gateway_refuses(value: str, model: type[BaseModel]) -> None:
    # helm install refuses a typo or an out-of-range value at once; drift from the contract fails here.
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["gateway"]["properties"][value]
    assert schema["additionalProperties"] is False
    wanted = {
        key: {k: v for k, v in field.items() if k in _BOUNDS}
        for key, field in model.model_json_schema()["properties"].items()
    }
    got = {key: {k: v for k, v in field.items() if k in _BOUNDS} for key, field in schema["properties"].items()}
    assert got == wanted


@pytest.mark.parametrize(("value", "model"), GATEWAY_SECTIONS)
def test_the_charts_values_document_the_gateways_defaults(value: str, model: type[BaseModel]) -> None:
    assert _documented_defaults(value) == model().model_dump()


def _documented_defaults(value: str) -> Any:
    """The commented-out keys under `gateway.<value>: {}` in values.yaml, read as the YAML they show."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    start = lines.index(f"  {value}: {{}}") + 1
    block: list[str] = []
    for line in lines[start:]:
        if not line.startswith("  #   "):
            break
        block.append(line.removeprefix("  #   "))
    return yaml.safe_load("\n".join(block))


def test_the_charts_server_card_default_is_the_gateways() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["gateway"]
    assert (values["limits"], values["subscriptions"], values["liveness"]) == (
        {},
        {},
        {},
    )  # nothing set: nothing rendered
    assert values["serverCard"] is config.ServerConfig().server_card


@pytest.mark.parametrize("port_var", ["MCPG_GATEWAY_HTTP_NODE_PORT", "MCPG_GATEWAY_ADMIN_NODE_PORT"])
def test_a_node_port_on_a_cluster_ip_service_is_refused_naming_the_variable(port_var: str) -> None:
    with pytest.raises(settings.SettingsError) as raised:
        settings.load({**POD, port_var: "30080"})
    assert str(raised.value) == (
        f"{port_var}: a node port needs MCPG_GATEWAY_SERVICE_TYPE NodePort or LoadBalancer; the Service is a ClusterIP"
    )
    loaded = settings.load({**POD, port_var: "30080", "MCPG_GATEWAY_SERVICE_TYPE": "NodePort"})
    assert 30080 in (loaded.gateway.http_node_port, loaded.gateway.admin_node_port)


# --- the bounds on what an McpGateway may ask for ---------------------------------------------------------------


def test_the_bounds_on_mcpgateways_default_to_a_safe_share_for_a_tenant() -> None:
    bounds = settings.load(POD).gateway.bounds
    assert bounds == settings.GatewayBounds()
    assert (bounds.max_replicas, bounds.max_cpu_request, bounds.max_cpu_limit) == (10, "2", None)
    assert (bounds.max_memory_request, bounds.max_memory_limit) == ("2Gi", "4Gi")
    assert bounds.service_types == ("ClusterIP", "NodePort")  # no LoadBalancer
    assert (bounds.service_annotations, bounds.node_ports) == ((), False)


def test_the_bounds_on_mcpgateways_come_from_the_environment() -> None:
    bounds = settings.load(
        {
            **POD,
            "MCPG_GATEWAY_MAX_REPLICAS": "4",
            "MCPG_GATEWAY_MAX_CPU_REQUEST": "500m",
            "MCPG_GATEWAY_MAX_CPU_LIMIT": "1",
            "MCPG_GATEWAY_MAX_MEMORY_REQUEST": "none",
            "MCPG_GATEWAY_MAX_MEMORY_LIMIT": "1e9",
            "MCPG_GATEWAY_ALLOWED_SERVICE_TYPES": "LoadBalancer, ClusterIP",
            "MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS": "lb.example/, external-dns.alpha.kubernetes.io/ttl",
            "MCPG_GATEWAY_ALLOW_NODE_PORTS": "true",
        }
    ).gateway.bounds
    assert bounds == settings.GatewayBounds(
        4,
        "500m",
        "1",
        None,
        "1e9",
        ("ClusterIP", "LoadBalancer"),
        ("lb.example/", "external-dns.alpha.kubernetes.io/ttl"),
        True,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MCPG_GATEWAY_MAX_REPLICAS": "0"}, "MCPG_GATEWAY_MAX_REPLICAS: must be a whole number of gateway pods, 1 or"),
        ({"MCPG_GATEWAY_MAX_REPLICAS": "ten"}, "MCPG_GATEWAY_MAX_REPLICAS: must be a whole number"),
        ({"MCPG_GATEWAY_MAX_REPLICAS": "9" * 5000}, "MCPG_GATEWAY_MAX_REPLICAS: must be a whole number"),
        (
            {"MCPG_GATEWAY_REPLICAS": "3", "MCPG_GATEWAY_MAX_REPLICAS": "2"},
            r"MCPG_GATEWAY_MAX_REPLICAS: 2 is below MCPG_GATEWAY_REPLICAS \(3\): the operator's own default must be",
        ),
        ({"MCPG_GATEWAY_MAX_CPU_REQUEST": "lots"}, "MCPG_GATEWAY_MAX_CPU_REQUEST: must be a resource quantity such as"),
        ({"MCPG_GATEWAY_MAX_MEMORY_LIMIT": "-1Gi"}, "MCPG_GATEWAY_MAX_MEMORY_LIMIT: must be a resource quantity"),
        ({"MCPG_GATEWAY_MAX_CPU_LIMIT": "1e999999999"}, "MCPG_GATEWAY_MAX_CPU_LIMIT: must be a resource quantity"),
        (
            {"MCPG_GATEWAY_MAX_MEMORY_REQUEST": "8Gi"},
            r"MCPG_GATEWAY_MAX_MEMORY_REQUEST: 8Gi is above MCPG_GATEWAY_MAX_MEMORY_LIMIT \(4Gi\); a request is at",
        ),
        (
            {"MCPG_GATEWAY_ALLOWED_SERVICE_TYPES": "ClusterIP,Ingress"},
            "MCPG_GATEWAY_ALLOWED_SERVICE_TYPES: each must be one of ClusterIP, NodePort, LoadBalancer, got 'Ingress'",
        ),
        (
            {"MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS": "lb.example/*"},
            "MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS: each must be an annotation key, a prefix ending in /",
        ),
        ({"MCPG_GATEWAY_ALLOW_NODE_PORTS": "sometimes"}, "MCPG_GATEWAY_ALLOW_NODE_PORTS: must be true or false"),
    ],
)
def test_a_bad_bound_is_refused_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=f"^{message}"):
        settings.load({**POD, **env})


def test_every_bad_bound_is_named_at_once_with_the_other_settings() -> None:
    env = {"MCPG_GATEWAY_MAX_REPLICAS": "x", "MCPG_GATEWAY_MAX_CPU_REQUEST": "y", "MCPG_GATEWAY_SERVICE_TYPE": "z"}
    with pytest.raises(settings.SettingsError) as caught:
        settings.load({**POD, **env})
    for name in env:
        assert f"{name}:" in str(caught.value)
