"""nats_topic against a real nats-server: wildcard subjects, one shared connection, and surviving a restart."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import nats
import pytest
from nats.aio.client import Client as NatsClient

from mcpg_gateway import errors
from mcpg_gateway.strategies import nats_topic
from mcpg_testing import BOUND_S
from mcpg_testing.clients import ERAS, refusal, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import (
    ADMIN_TOKEN,
    SENTINEL_URI,
    GatewayFactory,
    RunningGateway,
    admin_watches,
    assert_only_sentinel_arrives,
    assert_reported,
    fired,
    sentinel,
)
from mcpg_testing.servers import NatsServer

INVENTORY, ORDERS = "inventory://current", "orders://new"


@pytest.fixture
async def publisher(nats: NatsServer) -> AsyncIterator[NatsClient]:
    nc = await nats_connect(nats.url)
    yield nc
    await nc.close()


async def nats_connect(url: str) -> NatsClient:
    return await nats.connect(url, name="mcpg-test", allow_reconnect=False)


async def publish(nc: NatsClient, subject: str) -> None:
    await nc.publish(subject, b"ignored payload")
    await nc.flush()


def two_watches(nats_url: str) -> dict[str, Any]:
    return gateway_config(
        watched("inventory", INVENTORY, {"type": "nats_topic", "subject": "inventory.*"}),
        watched("orders", ORDERS, {"type": "nats_topic", "subject": "orders.created"}),
        nats_url=nats_url,
    )


async def gateway_connections(nats: NatsServer) -> list[dict[str, Any]]:
    async with httpx2.AsyncClient() as http:
        connz = (await http.get(f"{nats.monitor}/connz", params={"subs": "1"})).json()
    return [c for c in connz.get("connections") or [] if c.get("name") == nats_topic.CLIENT_NAME]


def shared_link(gw: RunningGateway, nats: NatsServer) -> nats_topic.NatsLink:
    connections = gw.gw.shared.get("nats_topic")
    assert isinstance(connections, nats_topic.NatsConnections)
    return connections.link(nats.url)


@ERAS
async def test_a_message_on_a_matching_subject_notifies_and_other_subjects_do_not(
    mode: str, gateway_factory: GatewayFactory, nats: NatsServer, publisher: NatsClient
) -> None:
    gw = await gateway_factory(two_watches(nats.url))
    async with subscribed(gw.mcp_url, mode, [INVENTORY, ORDERS]) as sub:
        await publish(publisher, "audit.log")  # matches neither subject
        await publish(publisher, "orders.created")
        assert await sub.next_update() == ORDERS
        assert sub.drained() == []
        await publish(publisher, "inventory.updates")  # through the wildcard
        assert await sub.next_update() == INVENTORY


async def test_watches_share_one_connection_and_each_subscription_ends_with_its_watcher(
    gateway_factory: GatewayFactory, nats: NatsServer
) -> None:
    gw = await gateway_factory(two_watches(nats.url))
    async with subscribed(gw.mcp_url, "listen", [INVENTORY, ORDERS]), subscribed(gw.mcp_url, "legacy", [ORDERS]):
        client = shared_link(gw, nats).client
        assert client is not None
        [conn] = await gateway_connections(nats)
        assert conn["cid"] == client.client_id
        assert sorted(conn["subscriptions_list"]) == ["inventory.*", "orders.created"]
        tasks = [w.task for w in gw.gw.fanout.running_watches() if w.task is not None]
    async with asyncio.timeout(BOUND_S):
        await asyncio.wait(tasks)  # the watchers stop once their last subscriber is gone
    await client.flush()  # the server has seen every UNSUB
    [conn] = await gateway_connections(nats)
    assert conn.get("subscriptions_list", []) == []
    await gw.shutdown()
    assert client.is_closed


async def test_a_restarted_server_is_reconnected_and_the_watch_fires_once_then_keeps_working(
    gateway_factory: GatewayFactory,
    nats: NatsServer,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    raw = gateway_config(
        watched("inventory", INVENTORY, {"type": "nats_topic", "subject": "inventory.updates"}),
        sentinel(),
        nats_url=nats.url,
    )
    gw = await gateway_factory(raw, clock=clock, admin_token=ADMIN_TOKEN)
    async with subscribed(gw.mcp_url, "listen", [INVENTORY, SENTINEL_URI]) as sub:
        await asyncio.to_thread(nats.kill)
        await clock.sleepers()  # the immediate reconnect failed: the server is down
        await asyncio.to_thread(nats.start)
        await clock.release()
        assert await sub.next_update() == INVENTORY
        assert fired(gw, "nats_topic") == 1
        await assert_only_sentinel_arrives(gw, sub)

        publisher = await nats_connect(nats.url)
        await publish(publisher, "inventory.updates")
        await publisher.close()
        assert await sub.next_update() == INVENTORY
        assert fired(gw, "nats_topic") == 2
        assert (await admin_watches(gw))[INVENTORY]["failed_reads"] >= 1
        await assert_reported(gw, {INVENTORY: "nats_topic", SENTINEL_URI: "webhook"}, nats.password)
    assert nats.password not in caplog.text
    assert "mcpg:***@127.0.0.1" in caplog.text


async def test_wrong_credentials_refuse_the_subscription_without_showing_them(
    gateway_factory: GatewayFactory, nats: NatsServer
) -> None:
    wrong = nats.url.replace(nats.password, "not-the-password")
    gw = await gateway_factory(two_watches(wrong))
    error = await refusal(gw.mcp_url, "legacy", [INVENTORY])
    assert error.error.code == errors.INTERNAL_ERROR
    assert f"cannot connect to NATS at nats://mcpg:***@127.0.0.1:{nats.port}" in error.error.message
    assert "not-the-password" not in error.error.message
