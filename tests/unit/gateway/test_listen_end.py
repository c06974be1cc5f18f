"""A gateway that stops answers every open subscriptions/listen stream, saying why, so the client listens again."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import mcp.types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcpg_gateway.fanout import endings
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory

HOOK = "drive://folder/reports"


async def test_a_listen_stream_ended_by_a_stopping_gateway_carries_the_end_reason(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"})))
    acknowledged = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.SubscriptionsAcknowledgedNotification):
            acknowledged.set()

    request = types.SubscriptionsListenRequest(
        params=types.SubscriptionsListenRequestParams(
            notifications=types.SubscriptionFilter(resource_subscriptions=[HOOK])
        )
    )
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(gw.mcp_url, http_client=http), message_handler=on_message) as client,
    ):
        # The raw request, not `client.listen()`: the SDK's helper does not hand the final result back.
        listen = asyncio.create_task(client.session.send_request(request, types.SubscriptionsListenResult))
        async with asyncio.timeout(BOUND_S):
            await acknowledged.wait()
        await gw.shutdown()
        async with asyncio.timeout(BOUND_S):
            result = await listen
    assert result.meta is not None
    assert result.meta["dev.mcpg/watch-end"] == {"reason": "shutdown", "detail": endings.ADVICE["shutdown"]}
    # Written past the SDK (the stream was carried on at the seam), yet shaped as the SDK shapes every result.
    assert result.meta["io.modelcontextprotocol/serverInfo"]["name"] == "mcpg-gateway"
    assert result.result_type == "complete"
