"""A subscriber process: holds many MCP sessions of one era and reports when each notification reached all of them.

    python bench/subscribers.py URL --mode legacy|listen --sessions N [--pool P --per-session K --offset O]

Session i subscribes the URIs `pattern.format(n=(offset + i*K + j) % P)` for j < K. Prints `READY <n>` once every
session is subscribed, then `DONE <k> <t>` when every session has received its k-th notification, t being the
time.monotonic() of the last of them (CLOCK_MONOTONIC is one clock for every process on a Linux machine).

`--impl raw` (the default) speaks the wire directly with httpx2 streaming: legacy = initialize, initialized, a GET
stream, resources/subscribe; listen = one POST subscriptions/listen (2026-07-28, `_meta` envelope) whose response
is the stream. `--impl sdk` uses the MCP SDK's `Client` instead (heavier: see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any

import httpx2

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
UPDATED = "notifications/resources/updated"
SETUP_CONCURRENCY = 32


class Tally:
    """Per-round count of sessions still waiting, and the latest receive time seen for that round."""

    def __init__(self, sessions: int) -> None:
        self.sessions = sessions
        self.counts: dict[int, int] = {}
        self.rounds: dict[int, list[float]] = {}

    def received(self, session: int) -> None:
        now = time.monotonic()
        k = self.counts[session] = self.counts.get(session, 0) + 1
        r = self.rounds.setdefault(k, [float(self.sessions), 0.0])
        r[0] -= 1
        r[1] = max(r[1], now)
        if r[0] == 0:
            del self.rounds[k]
            print(f"DONE {k} {r[1]:.6f}", flush=True)


def headers(version: str, method: str | None = None, session: str | None = None) -> dict[str, str]:
    h = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    h["mcp-protocol-version"] = version
    if method is not None:
        h["mcp-method"] = method
    if session is not None:
        h["mcp-session-id"] = session
    return h


async def sse_messages(resp: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """JSON-RPC messages of a response, whether it is SSE or a plain JSON body."""
    if not resp.headers.get("content-type", "").startswith("text/event-stream"):
        body = await resp.aread()
        if body:
            yield json.loads(body)
        return
    async for line in resp.aiter_lines():
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


async def rpc(http: httpx2.AsyncClient, url: str, h: dict[str, str], body: dict[str, Any]) -> httpx2.Response:
    """POST one request and read its answer; raise on an HTTP or JSON-RPC error."""
    async with http.stream("POST", url, headers=h, json=body) as resp:
        if resp.status_code >= 400:
            raise RuntimeError(f"{body['method']}: HTTP {resp.status_code} {(await resp.aread())[:200]!r}")
        async for msg in sse_messages(resp):
            if msg.get("id") == body.get("id"):
                if "error" in msg:
                    raise RuntimeError(f"{body['method']}: {msg['error']}")
                break
        return resp


async def legacy_session(
    http: httpx2.AsyncClient, url: str, uris: list[str], idx: int, tally: Tally, ready: asyncio.Event
) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}},
    }
    resp = await rpc(http, url, headers(LEGACY_VERSION), init)
    sid = resp.headers["mcp-session-id"]
    h = headers(LEGACY_VERSION, session=sid)
    await http.post(url, headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    opened = asyncio.Event()

    async def stream() -> None:
        async with http.stream("GET", url, headers={**h, "accept": "text/event-stream"}) as r:
            opened.set()
            async for msg in sse_messages(r):
                if msg.get("method") == UPDATED:
                    tally.received(idx)

    task = asyncio.create_task(stream())
    await opened.wait()
    for n, uri in enumerate(uris):
        await rpc(
            http, url, h, {"jsonrpc": "2.0", "id": 2 + n, "method": "resources/subscribe", "params": {"uri": uri}}
        )
    ready.set()
    await task


async def listen_session(
    http: httpx2.AsyncClient, url: str, uris: list[str], idx: int, tally: Tally, ready: asyncio.Event
) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "b", "version": "0"},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": uris}, "_meta": meta},
    }
    async with http.stream("POST", url, headers=headers(MODERN_VERSION, "subscriptions/listen"), json=body) as r:
        if r.status_code >= 400:
            raise RuntimeError(f"listen: HTTP {r.status_code} {(await r.aread())[:200]!r}")
        async for msg in sse_messages(r):
            if "error" in msg:
                raise RuntimeError(f"listen: {msg['error']}")
            if msg.get("method") == UPDATED:
                tally.received(idx)
            elif "acknowledged" in str(msg.get("method")):
                ready.set()


async def sdk_session(
    http: httpx2.AsyncClient, url: str, uris: list[str], idx: int, tally: Tally, ready: asyncio.Event, mode: str
) -> None:
    import mcp.types as types
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async def on_message(message: Any) -> None:  # named as the SDK's MessageHandlerFnT protocol names it
        if isinstance(message, types.ResourceUpdatedNotification):
            tally.received(idx)

    if mode == "legacy":
        async with Client(
            streamable_http_client(url, http_client=http), mode="legacy", message_handler=on_message
        ) as c:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for uri in uris:
                    await c.session.subscribe_resource(uri)
            ready.set()
            await asyncio.Event().wait()
    else:
        async with (
            Client(streamable_http_client(url, http_client=http)) as c,
            c.listen(resource_subscriptions=uris) as s,
        ):
            ready.set()
            async for event in s:
                if getattr(event, "uri", None) is not None:
                    tally.received(idx)


def session_uris(args: argparse.Namespace, i: int) -> list[str]:
    return [
        args.pattern.format(n=(args.offset + i * args.per_session + j) % args.pool) for j in range(args.per_session)
    ]


async def main(args: argparse.Namespace) -> None:
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    tally = Tally(args.sessions)
    gate = asyncio.Semaphore(SETUP_CONCURRENCY)
    subscribed = [0]
    everyone = asyncio.Event()
    async with httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(60, read=None)) as http:

        async def one(i: int) -> None:
            ready = asyncio.Event()
            uris = session_uris(args, i)
            if args.impl == "sdk":
                coro = sdk_session(http, args.url, uris, i, tally, ready, args.mode)
            elif args.mode == "legacy":
                coro = legacy_session(http, args.url, uris, i, tally, ready)
            else:
                coro = listen_session(http, args.url, uris, i, tally, ready)
            async with gate:  # bounded set-up concurrency; the held streams are not bounded by it
                task = asyncio.create_task(coro)
                await asyncio.wait([task, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    task.result()
                    raise RuntimeError(f"session {i} ended before it was subscribed")
            subscribed[0] += 1
            if subscribed[0] == args.sessions:
                everyone.set()
            await task

        started = time.monotonic()
        tasks = [asyncio.create_task(one(i)) for i in range(args.sessions)]
        await asyncio.wait([asyncio.create_task(everyone.wait()), *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            if t.done():
                t.result()
        print(f"READY {args.sessions} {time.monotonic() - started:.3f}", flush=True)
        await asyncio.gather(*tasks)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--mode", choices=["legacy", "listen"], required=True)
    p.add_argument("--impl", choices=["raw", "sdk"], default="raw")
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--pattern", default="bench://doc/{n}")
    p.add_argument("--pool", type=int, default=1)
    p.add_argument("--per-session", type=int, default=1)
    p.add_argument("--offset", type=int, default=0)
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
