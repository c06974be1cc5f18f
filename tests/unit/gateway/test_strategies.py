"""Start-up checks the schema cannot make: a nats_topic watch needs a server from somewhere."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_gateway.contract import check
from mcpg_gateway.contract.errors import ConfigError
from mcpg_gateway.gateway import Gateway
from mcpg_testing.configs import gateway_config, resource


def nats_config(strategy_url: str | None, default_url: str | None) -> dict[str, Any]:
    strategy = {"type": "nats_topic", "subject": "inventory.*"} | ({"url": strategy_url} if strategy_url else {})
    raw = gateway_config(resource("inventory", "inventory://current", "http://127.0.0.1:9/", strategy))
    if default_url:
        raw["gateway"]["nats"] = {"url": default_url}
    return raw


def test_a_nats_watch_without_a_server_anywhere_stops_the_gateway_naming_the_field() -> None:
    with pytest.raises(ConfigError) as caught:
        Gateway(check.load(nats_config(None, None), environ={}))
    assert [str(p) for p in caught.value.problems] == [
        "mcp.capabilities.resources[0].watch.strategy.url: no NATS server for this watch: set url here or "
        "gateway.nats.url"
    ]


@pytest.mark.parametrize(("strategy_url", "default_url"), [("nats://a:4222", None), (None, "nats://b:4222")])
async def test_a_nats_server_on_the_strategy_or_the_gateway_is_enough(
    strategy_url: str | None, default_url: str | None
) -> None:
    gw = Gateway(check.load(nats_config(strategy_url, default_url), environ={}))
    await gw.aclose()  # nothing connected: connections are opened by the first watch that needs one
