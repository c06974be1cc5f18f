"""The operator's settings: read once from the environment, every bad variable named."""

from __future__ import annotations

import copy

import pytest

from mcpg_operator import settings


def test_operator_defaults_come_from_the_environment() -> None:
    loaded = settings.load(
        {"MCPG_GATEWAY_REPLICAS": "3", "MCPG_GATEWAY_ALLOWED_ORIGINS": '["https://a"]', "MCPG_GATEWAY_IMAGE": "r/g:2"}
    )
    d = loaded.gateway
    assert (d.replicas, d.allowed_origins, d.image) == (3, ["https://a"], "r/g:2")
    assert copy.deepcopy(d) == d


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    loaded = settings.load({})
    assert (loaded.resync_s, loaded.settle_s, loaded.watch_namespaces) == (30.0, 0.5, ())
    assert loaded.gateway == settings.GatewayDefaults()


def test_timings_and_namespaces_come_from_the_environment() -> None:
    loaded = settings.load(
        {"MCPG_RESYNC_SECONDS": "5", "MCPG_SETTLE_SECONDS": "0", "MCPG_WATCH_NAMESPACES": " shop, ,mail "}
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
    ],
)
def test_a_bad_operator_setting_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        settings.load(env)


def test_every_bad_variable_is_named_at_once() -> None:
    env = {"MCPG_RESYNC_SECONDS": "x", "MCPG_GATEWAY_REPLICAS": "three", "MCPG_GATEWAY_SERVICE_TYPE": "Ingress"}
    with pytest.raises(settings.SettingsError) as caught:
        settings.load(env)
    for name in env:
        assert f"{name}:" in str(caught.value)
