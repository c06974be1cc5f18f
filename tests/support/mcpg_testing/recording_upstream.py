"""A real HTTP upstream on loopback that logs every read in order, with the reader's name, and can be awaited.

`upstream.py` serves documents and counts hits per path; this one answers the question a shared-ownership test
asks: *who* read *what*, in which order. A reader names itself in the `READER` header (a gateway sends it as a
backend header), and `until` waits on the reads themselves, never by polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

READER = "x-mcpg-reader"
"""The request header that names the reader; a read without it is logged as read by "(none)"."""


@dataclass(frozen=True, slots=True)
class Read:
    path: str
    reader: str


class ReadLog:
    """A real HTTP upstream whose documents the test changes; it logs each read with the reader's name."""

    def __init__(self) -> None:
        self.url = ""
        self.docs: dict[str, bytes] = {}
        self.reads: list[Read] = []
        self._changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        self.reads.append(Read(request.path, request.headers.get(READER, "(none)")))
        async with self._changed:
            self._changed.notify_all()
        body = self.docs.get(request.path)
        if body is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.Response(body=body, content_type="application/json")

    def readers(self, path: str, since: int) -> list[str]:
        """Who read `path`, in order, among the reads after the first `since`."""
        return [r.reader for r in self.reads[since:] if r.path == path]

    async def until(self, what: str, check: Callable[[], bool], bound: float) -> None:
        """Wait, at most `bound` s, until a read makes `check` hold; `what` names it in the failure."""
        try:
            async with asyncio.timeout(bound), self._changed:
                await self._changed.wait_for(check)
        except TimeoutError:
            raise AssertionError(f"the upstream did not see {what} within {bound:.0f}s: {self.reads}") from None


@contextlib.asynccontextmanager
async def serve_reads() -> AsyncIterator[ReadLog]:
    """A `ReadLog` serving GET on any path of a free loopback port (`url`); unknown paths answer 404."""
    log = ReadLog()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", log.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    log.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield log
    finally:
        await runner.cleanup()
