"""What one read shares with another: no cookies, and no connections beyond its own upstream's.

The gateway reads for many principals with each backend's own credentials, so a cookie one answer sets must never
ride along with another read; and one upstream that stalls may hold all of its own connections
(`limits.upstream_connections`) but none of another upstream's. Real HTTP upstreams on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcpg_gateway import reader
from mcpg_gateway.contract import check
from mcpg_gateway.errors import ReadError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_testing import BOUND_S
from mcpg_testing import upstream as upstreams
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.upstream import Upstream

CONNECTIONS = 32
"""`limits.upstream_connections` by default."""


def make_gateway(*entries: dict[str, Any]) -> Gateway:
    return Gateway(check.load(gateway_config(*entries), environ={}), Options(clock=ManualClock()))


async def read(gw: Gateway, uri: str) -> reader.Content:
    binding = gw.readable(uri, Principal("tester"))
    assert binding is not None
    async with asyncio.timeout(BOUND_S):
        return await gw.reader.read(binding)


async def test_a_cookie_an_upstream_sets_is_never_sent_with_a_later_read(upstream: Upstream) -> None:
    # By name, not by IP address: a cookie jar keeps no cookies for an IP address, so 127.0.0.1 would prove nothing.
    named = upstream.url.replace("127.0.0.1", "localhost")
    upstream.set("/a", "{}", headers={"Set-Cookie": "session=tenant-a; Path=/"})
    upstream.set("/b", "{}")
    gw = make_gateway(
        resource("a", "t://a", f"{named}/a", watch=False, headers={"Authorization": "Bearer tenant-a"}),
        resource("b", "t://b", f"{named}/b", watch=False, headers={"Authorization": "Bearer tenant-b"}),
    )
    for uri in ("t://a", "t://b", "t://a"):
        await read(gw, uri)
    await gw.aclose()
    assert len(upstream.headers_seen) == 3
    assert [h for h in upstream.headers_seen if "Cookie" in h] == []


@contextlib.asynccontextmanager
async def reading(gw: Gateway, uri: str, n: int) -> AsyncIterator[list[asyncio.Task[reader.Content]]]:
    """`n` reads of `uri` in flight for the block, cancelled after it."""
    tasks = [asyncio.create_task(read(gw, uri)) for _ in range(n)]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def healthy() -> AsyncIterator[Upstream]:
    async with upstreams.serve() as served:
        yield served


async def test_a_stalled_upstream_holds_only_its_own_connections_and_a_read_waiting_for_one_says_so(
    upstream: Upstream, healthy: Upstream
) -> None:
    # More stalled reads than the pool of 256 connections the gateway used to share among all upstreams.
    upstream.set("/stall", "{}")
    upstream.docs["/stall"].delay = asyncio.Event()  # set when the upstream stops
    upstream.set("/quick", "{}")
    healthy.set("/ok", '{"ok": true}')
    gw = make_gateway(
        resource("stall", "a://stall", f"{upstream.url}/stall", watch=False, timeout_ms=60_000),
        resource("quick", "a://quick", f"{upstream.url}/quick", watch=False, timeout_ms=300),
        resource("ok", "b://ok", f"{healthy.url}/ok", watch=False, timeout_ms=5_000),
    )
    async with reading(gw, "a://stall", 300):
        async with asyncio.timeout(BOUND_S):
            await upstream.reached("/stall", CONNECTIONS)
        assert (await read(gw, "b://ok")).body == b'{"ok": true}'
        with pytest.raises(ReadError) as waited:
            await read(gw, "a://quick")
        assert upstream.hits["/stall"] == CONNECTIONS
    where = upstream.url.removeprefix("http://")
    assert str(waited.value) == (
        f"a://quick: all {CONNECTIONS} connections to {where} stayed busy for 300 ms, so the read was not sent "
        "(gateway.limits.upstream_connections)"
    )
    assert "/quick" not in upstream.hits
    assert gw.metrics.upstream_connections_busy.labels(where)._value.get() == 1
    assert gw.reader.upstreams_in_use() == []  # nothing kept for an upstream no read is using
    await gw.aclose()


async def test_the_connections_to_one_upstream_are_a_setting(upstream: Upstream) -> None:
    upstream.set("/stall", "{}")
    upstream.docs["/stall"].delay = asyncio.Event()
    raw = gateway_config(resource("stall", "a://stall", f"{upstream.url}/stall", watch=False, timeout_ms=60_000))
    raw["gateway"]["limits"] = {"upstream_connections": 3}
    gw = Gateway(check.load(raw, environ={}), Options(clock=ManualClock()))
    async with reading(gw, "a://stall", 5):
        async with asyncio.timeout(BOUND_S):
            await upstream.reached("/stall", 3)
        assert gw.reader.upstreams_in_use() == [upstream.url.removeprefix("http://")]
    assert upstream.hits["/stall"] == 3  # the other two waited for a connection until cancelled
    await gw.aclose()
