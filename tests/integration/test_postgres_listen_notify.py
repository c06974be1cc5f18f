"""postgres_listen_notify against a real PostgreSQL: quoted channels, one connection per watch, restarts."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from mcpg_gateway.strategies import postgres_listen_notify
from mcpg_testing.clients import ERAS, refusal, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import (
    ADMIN_TOKEN,
    SENTINEL_URI,
    GatewayFactory,
    admin_watches,
    assert_only_sentinel_arrives,
    assert_reported,
    fired,
    sentinel,
)
from mcpg_testing.servers import PostgresServer, backends, connected

STOCK, PLAIN = "stock://levels", "stock://plain"
# Capitals, a dash, a quote and a statement break: only a correctly quoted identifier survives this.
AWKWARD_CHANNEL = 'Stock-Changed"; DROP TABLE canary; --'
PLAIN_CHANNEL = "stock_changed"


def listen(channel: str, url: str) -> dict[str, Any]:
    return {"type": "postgres_listen_notify", "url": url, "channel": channel}


async def notify(db: Any, channel: str) -> None:
    await db.execute("SELECT pg_notify($1, 'ignored payload')", channel)


async def gateway_connections(db: Any) -> int:
    return await backends(db, postgres_listen_notify.APPLICATION_NAME)


@ERAS
async def test_a_notify_on_the_quoted_channel_notifies_and_a_similar_channel_does_not(
    mode: str, gateway_factory: GatewayFactory, postgres: PostgresServer, db: Any
) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS canary (id int)")
    raw = gateway_config(
        watched("stock", STOCK, listen(AWKWARD_CHANNEL, postgres.url)),
        watched("plain", PLAIN, listen(PLAIN_CHANNEL, postgres.url)),
    )
    gw = await gateway_factory(raw)
    async with subscribed(gw.mcp_url, mode, [STOCK, PLAIN]) as sub:
        await notify(db, "stock-changed")  # what an unquoted identifier would have been folded to
        await notify(db, PLAIN_CHANNEL)
        assert await sub.next_update() == PLAIN
        assert sub.drained() == []
        await notify(db, AWKWARD_CHANNEL)
        assert await sub.next_update() == STOCK
    assert await db.fetchval("SELECT to_regclass('canary') IS NOT NULL")


async def test_each_watch_holds_one_connection_and_shutdown_closes_them_all(
    gateway_factory: GatewayFactory, postgres: PostgresServer, db: Any
) -> None:
    raw = gateway_config(
        watched("stock", STOCK, listen(AWKWARD_CHANNEL, postgres.url)),
        watched("plain", PLAIN, listen(PLAIN_CHANNEL, postgres.url)),
    )
    gw = await gateway_factory(raw)
    async with subscribed(gw.mcp_url, "listen", [STOCK, PLAIN]), subscribed(gw.mcp_url, "legacy", [STOCK]):
        assert await gateway_connections(db) == 2
    await gw.shutdown()
    assert await gateway_connections(db) == 0


async def test_an_unreachable_database_refuses_the_subscription_without_showing_the_password(
    gateway_factory: GatewayFactory, postgres: PostgresServer
) -> None:
    wrong = postgres.url.rsplit("/", 1)[0] + "/no_such_database"
    gw = await gateway_factory(gateway_config(watched("stock", STOCK, listen(PLAIN_CHANNEL, wrong))))
    error = await refusal(gw.mcp_url, "listen", [STOCK])
    assert "no_such_database" in str(error)
    assert "postgres:***@127.0.0.1" in str(error)
    assert postgres.password not in str(error)
    assert postgres.url not in str(error)


async def test_a_restarted_database_is_reconnected_and_the_watch_fires_once_then_keeps_working(
    gateway_factory: GatewayFactory,
    postgres: PostgresServer,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    raw = gateway_config(watched("stock", STOCK, listen(AWKWARD_CHANNEL, postgres.url)), sentinel())
    gw = await gateway_factory(raw, clock=clock, admin_token=ADMIN_TOKEN)
    async with subscribed(gw.mcp_url, "listen", [STOCK, SENTINEL_URI]) as sub:
        await asyncio.to_thread(postgres.kill)
        await clock.sleepers()  # the immediate reconnect failed: the server is down
        await asyncio.to_thread(postgres.start)
        await clock.release()
        assert await sub.next_update() == STOCK
        assert fired(gw, "postgres_listen_notify") == 1
        await assert_only_sentinel_arrives(gw, sub)

        async with connected(postgres.url) as db:
            await notify(db, AWKWARD_CHANNEL)
        assert await sub.next_update() == STOCK
        assert fired(gw, "postgres_listen_notify") == 2
        assert (await admin_watches(gw))[STOCK]["failed_reads"] >= 1
        await assert_reported(gw, {STOCK: "postgres_listen_notify"}, postgres.password)
    assert postgres.password not in caplog.text
    assert "s3cr%40t" not in caplog.text
    assert "postgres:***@127.0.0.1" in caplog.text
