"""Fixtures shared by every tier: a real HTTP upstream, a gateway on loopback ports, SDK clients in both eras.

Nothing here sleeps to wait: every wait is on an event or a queue, inside a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp.types as types
import pytest
from aiohttp import web
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from mcpg_gateway import loading, serving
from mcpg_gateway.service import Gateway, Options

BOUND_S = 10.0


# --- a real upstream whose content the test changes --------------------------------------------------------


@dataclass
class Doc:
    body: bytes = b"{}"
    status: int = 200
    content_type: str = "application/json"
    delay: asyncio.Event | None = None


@dataclass
class Upstream:
    url: str
    docs: dict[str, Doc] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    headers_seen: list[dict[str, str]] = field(default_factory=list)

    def set(self, path: str, body: bytes | str, status: int = 200, content_type: str = "application/json") -> None:
        self.docs[path] = Doc(body.encode() if isinstance(body, str) else body, status, content_type)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    state = Upstream(url="")

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        state.hits[path] = state.hits.get(path, 0) + 1
        state.headers_seen.append(dict(request.headers))
        doc = state.docs.get(path)
        if doc is None:
            return web.json_response({"error": "not found"}, status=404)
        if doc.delay is not None:
            await doc.delay.wait()
        return web.Response(body=doc.body, status=doc.status, content_type=doc.content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}"
    yield state
    await runner.cleanup()


# --- a clock the test advances --------------------------------------------------------------------------


class ManualClock:
    """Strategies sleep on this; the test releases them. `requested` records every interval asked for."""

    def __init__(self) -> None:
        self.requested: list[float] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._changed = asyncio.Condition()

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.requested.append(seconds)
        self._waiters.append(fut)
        async with self._changed:
            self._changed.notify_all()
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    async def sleepers(self, n: int = 1) -> None:
        """Wait until at least `n` tasks are asleep on this clock."""
        async with asyncio.timeout(BOUND_S), self._changed:
            await self._changed.wait_for(lambda: len(self._waiters) >= n)

    async def tick(self, n: int = 1) -> None:
        """Wake the `n` sleepers, then wait until they are all asleep again (their iteration has finished)."""
        await self.sleepers(n)
        woken = list(self._waiters)
        self._waiters.clear()
        for fut in woken:
            fut.set_result(None)
        await self.sleepers(n)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


# --- a gateway on loopback ports ---------------------------------------------------------------------------


@dataclass
class RunningGateway:
    gw: Gateway
    addrs: serving.Addresses
    stop: asyncio.Event
    task: asyncio.Task[None]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.addrs.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.addrs.admin_port}"

    async def shutdown(self) -> None:
        self.stop.set()
        async with asyncio.timeout(BOUND_S):
            await self.task


GatewayFactory = Callable[..., Awaitable[RunningGateway]]


@pytest.fixture
async def gateway_factory() -> AsyncIterator[GatewayFactory]:
    running: list[RunningGateway] = []

    async def start(raw: dict[str, Any], env: dict[str, str] | None = None, **options: Any) -> RunningGateway:
        cfg = loading.load_dict(raw, env or {})
        gw = Gateway(cfg, Options(**options))
        ready: asyncio.Future[serving.Addresses] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        task = asyncio.create_task(serving.serve(gw, "127.0.0.1", 0, 0, stop, on_ready=ready.set_result))
        async with asyncio.timeout(BOUND_S):
            addrs = await asyncio.shield(ready)
        handle = RunningGateway(gw, addrs, stop, task)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        if not handle.task.done():
            await handle.shutdown()


def resource(
    name: str,
    uri: str,
    url: str,
    strategy: dict[str, Any] | None = None,
    watch: bool = True,
    **backend: Any,
) -> dict[str, Any]:
    """One `mcp.capabilities.resources[]` entry in the guide's shape."""
    entry: dict[str, Any] = {"name": name, "uri": uri, "backend": {"kind": "http", "url": url, **backend}}
    if watch:
        entry["watch"] = {"strategy": strategy} if strategy is not None else {}
    return entry


ANONYMOUS_AUTH: dict[str, Any] = {"anonymous": {"enabled": True}}
"""Anonymous access, said explicitly as the gateway requires: for the tests that are not about identity."""


def gateway_config(
    *resources: dict[str, Any],
    templates: list[dict[str, Any]] | None = None,
    auth: dict[str, Any] | None = None,
    **server: Any,
) -> dict[str, Any]:
    caps: dict[str, Any] = {"resources": list(resources)}
    if templates:
        caps["resource_templates"] = templates
    return {
        "mcp": {"capabilities": caps},
        "gateway": {"server": server, "auth": ANONYMOUS_AUTH if auth is None else auth},
    }


def principal(token: str, principal_id: str, **fields: Any) -> dict[str, Any]:
    """One `gateway.auth.principals[]` entry: the configuration holds the token's SHA-256, never the token."""
    return {"token_sha256": hashlib.sha256(token.encode()).hexdigest(), "principal_id": principal_id, **fields}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- MCP clients, both protocol eras --------------------------------------------------------------------------


@dataclass
class Subscription:
    """A connected SDK client and the URIs it was told about, in arrival order."""

    client: Client
    http: httpx2.AsyncClient
    updates: asyncio.Queue[str]
    mode: str

    async def next_update(self, timeout: float = BOUND_S) -> str:
        async with asyncio.timeout(timeout):
            return await self.updates.get()

    def drained(self) -> list[str]:
        out = []
        while not self.updates.empty():
            out.append(self.updates.get_nowait())
        return out


@contextlib.asynccontextmanager
async def legacy_client(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Subscription]:
    """A handshake-era client: resources/subscribe, notifications on the session's GET stream."""
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(msg: Any) -> None:
        if isinstance(msg, types.ResourceUpdatedNotification):
            await updates.put(str(msg.params.uri))

    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy", message_handler=on_message) as client,
    ):
        yield Subscription(client, http, updates, "legacy")


async def subscribe(sub: Subscription, uri: str) -> None:
    with warnings.catch_warnings():
        # The SDK marks the handshake-era pair deprecated; serving it is the point of these tests.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await sub.client.session.subscribe_resource(uri)


async def unsubscribe(sub: Subscription, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await sub.client.session.unsubscribe_resource(uri)


@contextlib.asynccontextmanager
async def listen_client(
    url: str, uris: list[str], headers: dict[str, str] | None = None
) -> AsyncIterator[Subscription]:
    """A 2026-07-28 client (the SDK's default mode) holding one subscriptions/listen open on `uris`."""
    updates: asyncio.Queue[str] = asyncio.Queue()
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
        client.listen(resource_subscriptions=uris) as stream,
    ):

        async def pump() -> None:
            async for event in stream:
                uri = getattr(event, "uri", None)
                if uri is not None:
                    await updates.put(str(uri))

        task = asyncio.create_task(pump())
        try:
            yield Subscription(client, http, updates, "listen")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@contextlib.asynccontextmanager
async def subscribed(
    url: str, mode: str, uri: str | list[str], headers: dict[str, str] | None = None
) -> AsyncIterator[Subscription]:
    """A client of either era, already subscribed to `uri` (or to each of a list, in order)."""
    uris = [uri] if isinstance(uri, str) else uri
    if mode == "legacy":
        async with legacy_client(url, headers) as sub:
            for one in uris:
                await subscribe(sub, one)
            yield sub
    else:
        async with listen_client(url, uris, headers) as sub:
            yield sub


async def refusal(url: str, mode: str, uris: list[str], headers: dict[str, str] | None = None) -> MCPError:
    """Subscribe (legacy) or listen (modern) and return the JSON-RPC error the gateway answered with."""
    async with httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=300)) as http:
        client_mode = "legacy" if mode == "legacy" else "auto"
        async with Client(streamable_http_client(url, http_client=http), mode=client_mode) as client:
            try:
                if mode == "legacy":
                    sub = Subscription(client, http, asyncio.Queue(), mode)
                    for uri in uris:
                        await subscribe(sub, uri)
                else:
                    async with client.listen(resource_subscriptions=uris):
                        pass
            except MCPError as e:
                return e
    raise AssertionError(f"{uris} was not refused")


ERAS = pytest.mark.parametrize("mode", ["legacy", "listen"])
