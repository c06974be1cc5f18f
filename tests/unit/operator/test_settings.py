"""The operator's settings: read once from the environment, every bad variable named."""

from __future__ import annotations

import copy

import pytest

from mcpg_operator import settings


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


def test_the_pods_environment_alone_gives_the_documented_defaults() -> None:
    loaded = settings.load(POD)
    assert (loaded.resync_s, loaded.settle_s, loaded.watch_namespaces) == (30.0, 0.5, ())
    assert loaded.gateway == settings.GatewayDefaults()
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
