"""What an open handshake-era GET stream holds while it waits (issue 36).

A stream is held open for as long as its client listens, so everything its request holds is paid once per
session, 10,000 times over at the default cap. Two things dominated what was left of it:
- the frames of every layer the request passed through (about 280 bytes each, with their locals), and
- uvicorn's two asyncio Events (the request's "message arrived", the connection's "writable"), each with a
  528-byte deque allocated up front.
So: the request sits under at most `MAX_FRAMES` coroutines, and both flags are `signals.Signal`s.

Real gateway, real HTTP on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import aiohttp
from uvicorn.protocols.http.h11_impl import RequestResponseCycle

from mcpg_gateway.sdk.door import HandshakeDoor
from mcpg_gateway.signals import Signal
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory

HOOK = "drive://folder/reports"
VERSION = "2025-11-25"
MAX_FRAMES = 15
"""uvicorn's request (2), the connection guard (1), the /mcp router and classifier (2), the Origin check (1), the
SDK's three auth middlewares (3), the session limit, the envelope and the stream capture (3), the door (2), and
the wait for a message (1); the webhook route, uvicorn's proxy headers and a separate hold loop were three more."""


def _chain(coro: Coroutine[Any, Any, Any]) -> list[Any]:
    """The coroutines a task's coroutine awaits, outermost first."""
    chain: list[Any] = []
    current: Any = coro
    while current is not None and hasattr(current, "cr_frame"):
        chain.append(current)
        current = current.cr_await
    return chain


def _held_stream() -> list[Any]:
    """The coroutine chain of the one task holding a GET stream at the door."""
    holding = []
    for task in asyncio.all_tasks():
        chain = _chain(task.get_coro())  # type: ignore[arg-type]
        if any(c.cr_code is HandshakeDoor._get.__code__ for c in chain):
            holding.append(chain)
    assert len(holding) == 1
    return holding[0]


async def test_an_open_get_stream_sits_under_few_frames_and_holds_no_asyncio_event(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"})))
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    accept = {"accept": "application/json, text/event-stream"}
    async with aiohttp.ClientSession(gw.base, timeout=aiohttp.ClientTimeout(total=BOUND_S)) as http:
        async with http.post("/mcp", headers=accept, json=init) as opened:
            assert opened.status == 200
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": VERSION}
        listening = {**session, "accept": "text/event-stream"}
        async with http.get("/mcp", headers=listening) as stream:
            assert stream.status == 200
            chain = _held_stream()
            assert len(chain) <= MAX_FRAMES, [c.__qualname__ for c in chain]
            cycle = chain[0].cr_frame.f_locals["self"]
            assert isinstance(cycle, RequestResponseCycle)
            assert isinstance(cycle.message_event, Signal)
            assert isinstance(cycle.flow._is_writable_event, Signal)
