"""Real MCP clients (the SDK's), in both protocol eras, as the tests use them.

A handshake-era client subscribes with `resources/subscribe` on a stateful session and is told on the session's GET
stream; a 2026-07-28 client (the SDK's default) holds `subscriptions/listen` open. `ERAS` runs a test in both.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from mcpg_testing import BOUND_S

ERAS = pytest.mark.parametrize("mode", ["legacy", "listen"])


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

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await updates.put(str(message.params.uri))

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


@contextlib.asynccontextmanager
async def connected(url: str, mode: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """An SDK client of either era (the modern one is what `mode="auto"` negotiates), for requests other than
    subscribing: read, list."""
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy" if mode == "legacy" else "auto") as client,
    ):
        yield client
