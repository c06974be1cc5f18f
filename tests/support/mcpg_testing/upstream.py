"""A real HTTP upstream on loopback whose documents the test sets and changes, and which counts what it is asked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Doc:
    body: bytes = b"{}"
    status: int = 200
    content_type: str = "application/json"
    delay: asyncio.Event | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers besides Content-Type (a Retry-After)."""


@dataclass
class Upstream:
    url: str
    docs: dict[str, Doc] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    headers_seen: list[dict[str, str]] = field(default_factory=list)

    def set(
        self,
        path: str,
        body: bytes | str,
        status: int = 200,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.docs[path] = Doc(data, status, content_type, headers=dict(headers or {}))


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[Upstream]:
    """An upstream on a free loopback port: any path, any method; unknown paths answer 404."""
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
        return web.Response(body=doc.body, status=doc.status, content_type=doc.content_type, headers=doc.headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()
