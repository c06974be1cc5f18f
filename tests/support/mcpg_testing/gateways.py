"""A gateway served in-process on loopback ports, and what the tests observe of it from outside.

`running()` starts any number of gateways (`start(raw_config, env, **options)`) and stops them all at the end.
Each is started as `mcpg-gateway --config FILE` starts one: from a file it follows, so `reconfigure(raw)` writes
a new configuration there, sends the equivalent of SIGHUP, and returns the acknowledgement once the gateway has
applied (or refused) it.
The observation helpers go through the gateway's real ports (the admin API, /metrics, the webhook route), as
a user would; `fired` reads the metric registry directly, for counts a test compares before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_gateway import servers
from mcpg_gateway.contract import acknowledgement, check, digests
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
    config_file: Path
    hangup: asyncio.Event

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

    async def reconfigure(self, raw: dict[str, Any]) -> acknowledgement.Acknowledgement:
        """Write `raw` to the gateway's file and hang it up; the acknowledgement once `raw` is served or refused."""
        self.config_file.write_text(yaml.safe_dump(raw))
        wanted = digests.document(raw)
        self.hangup.set()
        async with asyncio.timeout(BOUND_S):
            while True:
                ack = await self.acknowledgement()
                done = [a.digest for a in (ack.serving, ack.refused) if a is not None]
                if wanted in done:
                    return ack
                await asyncio.sleep(0.02)  # polling the admin port, as the operator does; bounded above

    async def post_webhook(self, token: str) -> int:
        """`POST /webhooks/resource-updated/{token}`, as a sender would; the status code."""
        async with httpx2.AsyncClient() as http:
            return (await http.post(f"{self.base}/webhooks/resource-updated/{token}")).status_code

    async def acknowledgement(self) -> acknowledgement.Acknowledgement:
        """`GET /admin/v1/configuration`, as the operator reads it."""
        async with httpx2.AsyncClient() as http:
            resp = await http.get(f"{self.admin}{acknowledgement.PATH}")
        assert resp.status_code == 200
        return acknowledgement.Acknowledgement.model_validate(resp.json())


GatewayFactory = Callable[..., Awaitable[RunningGateway]]
"""`start(raw: dict, env: dict | None = None, **options)`: options are `gateway.Options` fields."""


@contextlib.asynccontextmanager
async def running() -> AsyncIterator[GatewayFactory]:
    started: list[RunningGateway] = []
    files = tempfile.TemporaryDirectory(prefix="mcpg-gateways-")

    async def start(raw: dict[str, Any], env: dict[str, str] | None = None, **options: Any) -> RunningGateway:
        path = Path(files.name) / f"gateway-{len(started)}.yaml"
        path.write_text(yaml.safe_dump(raw))
        environ = env or {}
        settings = Options(**{"config_file": path, "environ": environ, **options})
        gw = Gateway(check.load(raw, environ=environ), settings, raw)
        ready: asyncio.Future[servers.Addresses] = asyncio.get_running_loop().create_future()
        stop, hangup = asyncio.Event(), asyncio.Event()
        serving = servers.serve(gw, "127.0.0.1", 0, 0, stop, on_ready=ready.set_result, hangup=hangup)
        task = asyncio.create_task(serving)
        async with asyncio.timeout(BOUND_S):
            addrs = await asyncio.shield(ready)
        handle = RunningGateway(gw, addrs, stop, task, path, hangup)
        started.append(handle)
        return handle

    try:
        yield start
    finally:
        for handle in started:
            if not handle.task.done():
                await handle.shutdown()
        files.cleanup()


def sentinel() -> dict[str, Any]:
    """A webhook-watched resource: the event after which a missing notification is proven missing."""
    return configs.watched("sentinel", SENTINEL_URI, {"type": "webhook", "token": SENTINEL_TOKEN})


async def assert_only_sentinel_arrives(gw: RunningGateway, sub: Subscription) -> None:
    """Fire the sentinel and prove nothing else was pending before it: no sleep, an event after the fact."""
    assert await gw.post_webhook(SENTINEL_TOKEN) == 200
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
