"""sql_polling against a real PostgreSQL, with a clock the test advances: the tracked value must advance."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from mcpg_gateway import errors
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
    metrics_text,
    sentinel,
)
from mcpg_testing.servers import PostgresServer, connected

ORDERS = "orders://latest"


def tracking(url: str, query: str, interval_ms: int = 10_000) -> dict[str, Any]:
    return {"type": "sql_polling", "url": url, "query": query, "interval_ms": interval_ms}


async def new_table(db: Any, *ids: int) -> str:
    table = f"orders_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE TABLE {table} (id bigint)")
    await insert(db, table, *ids)
    return table


async def insert(db: Any, table: str, *ids: int) -> None:
    await db.executemany(f"INSERT INTO {table} VALUES ($1)", [(i,) for i in ids])


@ERAS
async def test_a_row_that_advances_the_value_notifies_and_an_unchanged_or_lower_value_does_not(
    mode: str, gateway_factory: GatewayFactory, postgres: PostgresServer, db: Any, clock: ManualClock
) -> None:
    table = await new_table(db, 1, 2)
    raw = gateway_config(watched("orders", ORDERS, tracking(postgres.url, f"SELECT max(id) FROM {table}")), sentinel())
    gw = await gateway_factory(raw, clock=clock)
    async with subscribed(gw.mcp_url, mode, [ORDERS, SENTINEL_URI]) as sub:
        await clock.tick()  # still 2
        await db.execute(f"DELETE FROM {table} WHERE id = 2")
        await clock.tick()  # 1: different, but not an advance
        await assert_only_sentinel_arrives(gw, sub)
        await insert(db, table, 3)
        await clock.tick()
        assert await sub.next_update() == ORDERS


async def test_a_failing_or_non_scalar_query_is_skipped_and_counted(
    gateway_factory: GatewayFactory, postgres: PostgresServer, db: Any, clock: ManualClock
) -> None:
    table = await new_table(db, 1)
    raw = gateway_config(watched("orders", ORDERS, tracking(postgres.url, f"SELECT id FROM {table}")), sentinel())
    gw = await gateway_factory(raw, clock=clock, admin_token=ADMIN_TOKEN)
    async with subscribed(gw.mcp_url, "listen", [ORDERS, SENTINEL_URI]) as sub:
        await insert(db, table, 2)
        await clock.tick()  # two rows
        await db.execute(f"DROP TABLE {table}")
        await clock.tick()  # no such relation
        await assert_only_sentinel_arrives(gw, sub)
        watch = (await admin_watches(gw))[ORDERS]
        assert watch["failed_reads"] == 2
        assert watch["strategy"] == "sql_polling"
        assert 'mcpg_watch_poll_failures_total{strategy="sql_polling"} 2.0' in await metrics_text(gw)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT '{\"v\": 1}'::json", "returns a json value"),
        ("SELECT 1, 2", "exactly one column, not 2"),
        ("SELECT generate_series(1, 3)", "exactly one row, not 3"),
        ("SELEC 1", "syntax error"),
    ],
)
async def test_a_query_that_cannot_track_a_value_refuses_the_subscription(
    query: str, reason: str, gateway_factory: GatewayFactory, postgres: PostgresServer
) -> None:
    gw = await gateway_factory(gateway_config(watched("orders", ORDERS, tracking(postgres.url, query))))
    error = await refusal(gw.mcp_url, "listen", [ORDERS])
    assert error.error.code == errors.INTERNAL_ERROR
    assert reason in error.error.message
    assert postgres.password not in error.error.message


async def test_a_restarted_database_is_reconnected_at_the_next_poll_and_fires_only_when_the_value_advanced(
    gateway_factory: GatewayFactory,
    postgres: PostgresServer,
    db: Any,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    table = await new_table(db, 1)
    await db.close()
    query = f"SELECT max(id) FROM {table}"
    raw = gateway_config(watched("orders", ORDERS, tracking(postgres.url, query, interval_ms=1000)), sentinel())
    gw = await gateway_factory(raw, clock=clock, admin_token=ADMIN_TOKEN)
    async with subscribed(gw.mcp_url, "listen", [ORDERS, SENTINEL_URI]) as sub:
        await asyncio.to_thread(postgres.kill)
        await clock.tick()  # the read fails: counted, skipped
        await asyncio.to_thread(postgres.start)
        await clock.tick()  # reconnected; the value has not moved
        assert fired(gw, "sql_polling") == 0
        await assert_only_sentinel_arrives(gw, sub)

        async with connected(postgres.url) as writer:
            await insert(writer, table, 2)
        await clock.tick()
        assert await sub.next_update() == ORDERS
        watch = (await admin_watches(gw))[ORDERS]
        assert watch["failed_reads"] >= 1
        assert watch["interval_ms"] == 10_000  # the floor
        await assert_reported(gw, {ORDERS: "sql_polling"}, postgres.password)
    assert postgres.password not in caplog.text
    assert "postgres:***@127.0.0.1" in caplog.text
