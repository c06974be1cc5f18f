"""A real HTTP upstream on loopback whose documents the test sets and changes, and which counts what it is asked.

Besides plain documents it can play a hostile upstream: a body written piece by piece (so a test can serve far more
than it holds), one that stalls halfway, one whose Content-Length promises more than it sends. Whatever a test left
stalled is let go when the upstream stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Stream:
    """A body written `piece` by `piece`, `count` times: the upstream never holds more than one piece of it."""

    piece: bytes
    count: int
    stall_after: int | None = None
    """Pieces written before the body stalls, until `release` is set (or the upstream stops)."""
    content_length: int | None = None
    """The Content-Length sent instead of the true one: one that promises more is followed by a closed connection."""
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def size(self) -> int:
        return len(self.piece) * self.count


@dataclass
class Doc:
    body: bytes = b"{}"
    status: int = 200
    content_type: str = "application/json"
    delay: asyncio.Event | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers besides Content-Type (a Retry-After)."""
    stream: Stream | None = None
    """Written piece by piece instead of `body`."""


@dataclass
class Upstream:
    url: str
    docs: dict[str, Doc] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)
    """Every request's method and path, in the order they arrived."""
    targets: list[str] = field(default_factory=list)
    """Every request's path and query as sent (not decoded), in the order they arrived."""
    _asked: asyncio.Condition = field(default_factory=asyncio.Condition, repr=False)

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

    def stream(self, path: str, stream: Stream, content_type: str = "application/octet-stream") -> None:
        """Serve `path` as `stream` (written piece by piece)."""
        self.docs[path] = Doc(b"", content_type=content_type, stream=stream)

    async def reached(self, path: str, hits: int) -> None:
        """Until `path` has been asked `hits` times (counted when a request arrives); the caller bounds the wait."""
        async with self._asked:
            await self._asked.wait_for(lambda: self.hits.get(path, 0) >= hits)

    def release(self) -> None:
        """Let every stalled answer go on."""
        for doc in self.docs.values():
            if doc.delay is not None:
                doc.delay.set()
            if doc.stream is not None:
                doc.stream.release.set()


@contextlib.asynccontextmanager
async def serve(host: str = "127.0.0.1") -> AsyncIterator[Upstream]:
    """An upstream on a free port of `host` (loopback, or the node's address where pods reach it): any path, any
    method; unknown paths answer 404."""
    state = Upstream(url="")

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        state.hits[path] = state.hits.get(path, 0) + 1
        state.headers_seen.append(dict(request.headers))
        state.asked.append((request.method, path))
        state.targets.append(request.raw_path)
        async with state._asked:
            state._asked.notify_all()
        doc = state.docs.get(path)
        if doc is None:
            return web.json_response({"error": "not found"}, status=404)
        if doc.delay is not None:
            await doc.delay.wait()
        if doc.stream is not None:
            return await _write(request, doc, doc.stream)
        return web.Response(body=doc.body, status=doc.status, content_type=doc.content_type, headers=doc.headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://{host}:{port}"
    try:
        yield state
    finally:
        state.release()  # a handler still stalled would hold the shutdown for its whole grace period
        await runner.cleanup()


async def _write(request: web.Request, doc: Doc, stream: Stream) -> web.StreamResponse:
    response = web.StreamResponse(status=doc.status, headers=doc.headers)
    response.content_type = doc.content_type
    response.content_length = stream.size if stream.content_length is None else stream.content_length
    if stream.content_length is not None:
        response.force_close()  # a length that lies: the connection ends after what was really sent
    await response.prepare(request)
    for i in range(stream.count):
        if i == stream.stall_after:
            await stream.release.wait()
        await response.write(stream.piece)  # waits for the client to take it: one piece in memory at a time
    await response.write_eof()
    return response
