"""A stand-in for the Kubernetes API's secrets collection, on loopback, for `mcpg_gateway.config_secret`'s unit tests.

A stand-in, not the real API server: the paths a follower must survive (a watch answered by an ERROR 410, an HTTP
410, a 401, 403 or 500 on demand, a malformed or endless line, a stream cut in the middle of an event) cannot be
made to happen on demand on a real one. The end-to-end test (`tests/e2e/test_config_secret_follower.py`) runs the
same follower against the local cluster's API server and RBAC. This one answers a list with what the test put in
`items`, and hands each watch request to the test (`next_watch`), which writes its events and ends it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from mcpg_testing import BOUND_S

NAMESPACE = "shop"
PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets"


def secret(name: str, version: str, data: dict[str, bytes] | None) -> dict[str, Any]:
    """A Secret as the API server serializes it: its data base64-encoded."""
    obj: dict[str, Any] = {"kind": "Secret", "metadata": {"name": name, "resourceVersion": version}}
    if data is not None:
        obj["data"] = {key: base64.b64encode(value).decode() for key, value in data.items()}
    return obj


def event(kind: str, obj: dict[str, Any]) -> bytes:
    """One line of a watch stream."""
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def bookmark(version: str) -> bytes:
    return event("BOOKMARK", {"kind": "Secret", "metadata": {"resourceVersion": version}})


def error(code: int, reason: str) -> bytes:
    return event("ERROR", {"kind": "Status", "status": "Failure", "code": code, "reason": reason})


@dataclass
class Request:
    """What the stand-in was asked: a list or a watch, its query, and the bearer token it carried."""

    kind: str
    query: dict[str, str]
    raw_query: str
    token: str


@dataclass
class Watch:
    """One watch being served: the test puts lines into `lines` (bytes written as given; None ends the stream
    normally), and `closed` is set once the connection is gone."""

    query: dict[str, str]
    lines: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, *lines: bytes) -> None:
        for line in lines:
            self.lines.put_nowait(line)

    def end(self) -> None:
        self.lines.put_nowait(None)


@dataclass
class SecretApi:
    url: str
    items: list[dict[str, Any]] = field(default_factory=list)
    version: str = "1"
    """The list's own resourceVersion (where a watch starts)."""
    refusals: list[int] = field(default_factory=list)
    """HTTP statuses answered, in order, to the next requests (list or watch) instead of serving them."""
    requests: list[Request] = field(default_factory=list)
    watches: list[Watch] = field(default_factory=list)
    """Every watch served, in the order they arrived."""
    _arrived: asyncio.Queue[Watch] = field(default_factory=asyncio.Queue)

    async def next_watch(self) -> Watch:
        """The next watch request, once it arrived (within the tests' bound)."""
        async with asyncio.timeout(BOUND_S):
            return await self._arrived.get()

    def kinds(self) -> list[str]:
        return [r.kind for r in self.requests]

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        kind = "watch" if request.query.get("watch") == "true" else "list"
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.requests.append(Request(kind, dict(request.query), request.query_string, token))
        if self.refusals:
            code = self.refusals.pop(0)
            return web.json_response({"kind": "Status", "code": code}, status=code)
        if kind == "list":
            return web.json_response(
                {"kind": "SecretList", "metadata": {"resourceVersion": self.version}, "items": self.items}
            )
        return await self._stream(request)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        watch = Watch(dict(request.query))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        self.watches.append(watch)
        self._arrived.put_nowait(watch)
        try:
            while (line := await watch.lines.get()) is not None:
                await response.write(line)
            await response.write_eof()
        finally:  # ended, or cancelled when the client went away (handler_cancellation)
            watch.closed.set()
        return response


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[SecretApi]:
    """The stand-in on a free loopback port, for the block's duration."""
    app = web.Application()
    api = SecretApi("")
    app.router.add_get(PATH, api._serve)
    runner = web.AppRunner(app, handler_cancellation=True)  # a handler learns that its client went away
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    _, port = runner.addresses[0][:2]
    api.url = f"http://127.0.0.1:{port}"
    try:
        yield api
    finally:
        for watch in api.watches:  # a test that failed may have left some open: the server waits for them
            watch.end()
        await runner.cleanup()
