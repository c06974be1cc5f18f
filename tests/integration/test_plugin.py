"""plugin strategies through the real entry-point path, with the udp_datagram test plugin installed.

`tests/plugins/mcpg_test_plugin` is its own distribution (`pip install -e tests/plugins/mcpg_test_plugin`,
done by `make venv`): the gateway finds it exactly as it would find any third-party plugin.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from mcpg_gateway import errors
from mcpg_gateway.contract import check
from mcpg_gateway.contract.errors import ConfigError
from mcpg_gateway.gateway import Gateway
from mcpg_testing.clients import ERAS, refusal, subscribed
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import (
    ADMIN_TOKEN,
    SENTINEL_URI,
    GatewayFactory,
    assert_only_sentinel_arrives,
    assert_reported,
    fired,
    sentinel,
)

INBOUND = "phone://inbound"


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def send(port: int, text: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(text.encode(), ("127.0.0.1", port))


def plugin(**fields: Any) -> dict[str, Any]:
    return {"type": "plugin", "kind": "udp_datagram", **fields}


@ERAS
async def test_a_datagram_of_a_listed_kind_notifies_and_other_kinds_do_not(
    mode: str, gateway_factory: GatewayFactory
) -> None:
    port = udp_port()
    raw = gateway_config(watched("inbound", INBOUND, plugin(port=port, kinds=["sms", "voice"])), sentinel())
    gw = await gateway_factory(raw, admin_token=ADMIN_TOKEN)
    async with subscribed(gw.mcp_url, mode, [INBOUND, SENTINEL_URI]) as sub:
        send(port, "fax +15550100")  # `kinds` reached the plugin: this one is filtered out
        await assert_only_sentinel_arrives(gw, sub)
        send(port, "sms +15550100 hello")
        assert await sub.next_update() == INBOUND
        assert fired(gw, "plugin") == 1
        await assert_reported(gw, {INBOUND: "plugin", SENTINEL_URI: "webhook"})


@pytest.mark.parametrize(
    ("occupied", "reason"),
    [
        (False, "udp_datagram needs a port between 1 and 65535, got None"),
        (True, "udp_datagram cannot listen on 127.0.0.1:"),
    ],
)
async def test_a_plugin_that_cannot_start_refuses_the_subscription_with_its_reason(
    occupied: bool, reason: str, gateway_factory: GatewayFactory
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        fields = {"port": taken.getsockname()[1]} if occupied else {}
        gw = await gateway_factory(gateway_config(watched("inbound", INBOUND, plugin(**fields))))
        error = await refusal(gw.mcp_url, "legacy", [INBOUND])
    assert error.error.code == errors.INTERNAL_ERROR
    assert reason in error.error.message


def test_an_unknown_kind_stops_the_gateway_at_start_naming_the_field_and_the_installed_kinds() -> None:
    raw = gateway_config(watched("inbound", INBOUND, {"type": "plugin", "kind": "twilio_inbound", "kinds": ["sms"]}))
    with pytest.raises(ConfigError) as caught:
        Gateway(check.load(raw, environ={}))
    [problem] = map(str, caught.value.problems)
    assert problem.startswith("mcp.capabilities.resources[0].watch.strategy.kind: ")
    assert "'twilio_inbound'" in problem
    assert "installed kinds: udp_datagram" in problem
