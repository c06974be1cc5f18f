"""The integration tier: the event-driven strategies against real NATS and PostgreSQL servers started here.

Every test here is marked `integration`. The servers live for the session (see `servers.py`); a test that
kills one restarts it, and the per-test fixtures restart it anyway if a failed test left it down.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest

from ..conftest import BOUND_S, RunningGateway, Subscription, legacy_client, listen_client, resource, subscribe
from .servers import NatsServer, PostgresServer, start_nats, start_postgres

HERE = Path(__file__).parent
UNUSED_BACKEND = "http://127.0.0.1:9/unused"
"""Event-driven watches never read through the binding; the config still needs one."""
ADMIN_TOKEN = "adm-token"
SENTINEL_URI, SENTINEL_TOKEN = "sentinel://tick", "sentinel-token"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


# --- servers ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    server = start_nats()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def nats(nats_server: NatsServer) -> NatsServer:
    if not nats_server.process.running:
        nats_server.start()
    return nats_server


@pytest.fixture
def postgres(postgres_server: PostgresServer) -> PostgresServer:
    if not postgres_server.process.running:
        postgres_server.start()
    return postgres_server


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Any]:
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        if not conn.is_closed():
            await conn.close()


@pytest.fixture
async def db(postgres: PostgresServer) -> AsyncIterator[Any]:
    """A plain connection for the test itself: NOTIFY, inserts, and looking at pg_stat_activity."""
    async with connected(postgres.url) as conn:
        yield conn


# --- a clock for reconnect backoff ---------------------------------------------------------------------------


class BackoffClock:
    """Reconnect backoff sleeps here; the test sees who is asleep and wakes them without waiting for more."""

    def __init__(self) -> None:
        self.requested: list[float] = []
        self._sleeping: list[asyncio.Future[None]] = []
        self._changed = asyncio.Condition()

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.requested.append(seconds)
        self._sleeping.append(fut)
        async with self._changed:
            self._changed.notify_all()
        try:
            await fut
        finally:
            if fut in self._sleeping:
                self._sleeping.remove(fut)

    async def sleepers(self, n: int = 1) -> None:
        async with asyncio.timeout(BOUND_S), self._changed:
            await self._changed.wait_for(lambda: len(self._sleeping) >= n)

    async def release(self, n: int = 1) -> None:
        """Wait until `n` tasks are asleep, then wake every sleeper."""
        await self.sleepers(n)
        woken, self._sleeping = self._sleeping, []
        for fut in woken:
            fut.set_result(None)


@pytest.fixture
def backoff_clock() -> BackoffClock:
    return BackoffClock()


# --- gateway configuration and observation ------------------------------------------------------------------


def watched(name: str, uri: str, strategy: dict[str, Any]) -> dict[str, Any]:
    return resource(name, uri, UNUSED_BACKEND, strategy)


def sentinel() -> dict[str, Any]:
    """A webhook-watched resource: the event after which a missing notification is proven missing."""
    return watched("sentinel", SENTINEL_URI, {"type": "webhook", "token": SENTINEL_TOKEN})


def config_with(*entries: dict[str, Any], nats_url: str | None = None) -> dict[str, Any]:
    # These tests are about watches, not identity: every client is the anonymous principal.
    gateway: dict[str, Any] = {"auth": {"anonymous": {"enabled": True}}}
    if nats_url:
        gateway["nats"] = {"url": nats_url}
    return {"mcp": {"capabilities": {"resources": list(entries)}}, "gateway": gateway}


@contextlib.asynccontextmanager
async def watching(url: str, mode: str, uris: list[str]) -> AsyncIterator[Subscription]:
    """A client of either era subscribed to every URI in `uris`."""
    if mode == "legacy":
        async with legacy_client(url) as sub:
            for uri in uris:
                await subscribe(sub, uri)
            yield sub
    else:
        async with listen_client(url, uris) as sub:
            yield sub


async def assert_only_sentinel_arrives(gw: RunningGateway, sub: Subscription) -> None:
    """Fire the sentinel and prove nothing else was pending before it: no sleep, an event after the fact."""
    async with httpx2.AsyncClient() as http:
        resp = await http.post(f"{gw.base}/webhooks/resource-updated/{SENTINEL_TOKEN}")
    assert resp.status_code == 200
    assert await sub.next_update() == SENTINEL_URI
    assert sub.drained() == []


async def admin_watches(gw: RunningGateway) -> dict[str, dict[str, Any]]:
    async with httpx2.AsyncClient() as http:
        resp = await http.get(f"{gw.admin}/admin/v1/watches", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert resp.status_code == 200
    return {w["uri"]: w for w in resp.json()["watches"]}


async def metrics_text(gw: RunningGateway) -> str:
    async with httpx2.AsyncClient() as http:
        return (await http.get(f"{gw.admin}/metrics")).text


def fired(gw: RunningGateway, strategy: str) -> float:
    value = gw.gw.metrics.registry.get_sample_value("mcpg_watch_fired_total", {"strategy": strategy})
    return value or 0.0


async def assert_reported(gw: RunningGateway, strategies: dict[str, str], *secrets: str) -> None:
    """The admin API lists each URI's watcher with its strategy, /metrics counts by strategy, no secret shows."""
    watches = await admin_watches(gw)
    assert {uri: watches[uri]["strategy"] for uri in strategies} == strategies
    text = await metrics_text(gw)
    for strategy in set(strategies.values()):
        assert f'mcpg_watch_fired_total{{strategy="{strategy}"}}' in text
    for secret in secrets:
        assert secret not in str(watches)
        assert secret not in text
