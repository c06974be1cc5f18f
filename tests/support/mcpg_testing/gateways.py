"""A gateway served in-process on loopback ports, and what the tests observe of it from outside.

`running()` starts any number of gateways (`start(raw_config, env, **options)`) and stops them all at the end.
The observation helpers go through the gateway's real ports (the admin API, /metrics, the webhook route), as
a user would; `fired` reads the metric registry directly, for counts a test compares before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from mcpg_gateway import servers
from mcpg_gateway.contract import check
from mcpg_gateway.gateway import Gateway, Options
from mcpg_testing import BOUND_S, configs
from mcpg_testing.clients import Subscription
from mcpg_testing.loopback import GatewayUrls

ADMIN_TOKEN = "adm-token"
SENTINEL_URI, SENTINEL_TOKEN = "sentinel://tick", "sentinel-token"


@dataclass
class RunningGateway(GatewayUrls):
    gw: Gateway
    addrs: servers.Addresses
    stop: asyncio.Event
    task: asyncio.Task[None]

    @property  # read from the addresses the servers bound, not stored twice
    def port(self) -> int:
        return self.addrs.port

    @property
    def admin_port(self) -> int:
        return self.addrs.admin_port

    async def shutdown(self) -> None:
        self.stop.set()
        async with asyncio.timeout(BOUND_S):
            await self.task


GatewayFactory = Callable[..., Awaitable[RunningGateway]]
"""`start(raw: dict, env: dict | None = None, **options)`: options are `gateway.Options` fields."""


@contextlib.asynccontextmanager
async def running() -> AsyncIterator[GatewayFactory]:
    started: list[RunningGateway] = []

    async def start(raw: dict[str, Any], env: dict[str, str] | None = None, **options: Any) -> RunningGateway:
        gw = Gateway(check.load(raw, environ=env or {}), Options(**options))
        ready: asyncio.Future[servers.Addresses] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        task = asyncio.create_task(servers.serve(gw, "127.0.0.1", 0, 0, stop, on_ready=ready.set_result))
        async with asyncio.timeout(BOUND_S):
            addrs = await asyncio.shield(ready)
        handle = RunningGateway(gw, addrs, stop, task)
        started.append(handle)
        return handle

    try:
        yield start
    finally:
        for handle in started:
            if not handle.task.done():
                await handle.shutdown()


def sentinel() -> dict[str, Any]:
    """A webhook-watched resource: the event after which a missing notification is proven missing."""
    return configs.watched("sentinel", SENTINEL_URI, {"type": "webhook", "token": SENTINEL_TOKEN})


async def assert_only_sentinel_arrives(gw: RunningGateway, sub: Subscription) -> None:
    """Fire the sentinel and prove nothing else was pending before it: no sleep, an event after the fact."""
    async with httpx2.AsyncClient() as http:
        resp = await http.post(f"{gw.base}/webhooks/resource-updated/{SENTINEL_TOKEN}")
    assert resp.status_code == 200
    assert await sub.next_update() == SENTINEL_URI
    assert sub.drained() == []


async def admin_watches(gw: RunningGateway) -> dict[str, dict[str, Any]]:
    """`GET /admin/v1/watches` (with `ADMIN_TOKEN`, which the gateway must have been started with), by URI."""
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
