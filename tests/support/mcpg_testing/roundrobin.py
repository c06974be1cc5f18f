"""A round-robin TCP proxy on loopback: what a Kubernetes Service without session affinity does to connections.

Each accepted connection goes to the next backend in turn, bytes copied both ways until either side closes;
`chosen` records which backend each connection got, in accept order. Closing stops accepting and cuts every
connection still open, as a Service losing its endpoints would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from types import TracebackType

Backend = tuple[str, int]
CHUNK = 65_536


class RoundRobin:
    """`async with RoundRobin([("127.0.0.1", port), ...]) as proxy:` then connect to `proxy.port`."""

    def __init__(self, backends: Sequence[Backend]) -> None:
        if not backends:
            raise ValueError("a round-robin proxy needs at least one backend")
        self.backends = list(backends)
        self.chosen: list[int] = []
        """The index in `backends` of the backend each accepted connection went to, in accept order."""
        self._next = itertools.cycle(range(len(self.backends)))
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy is not started"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def close(self) -> None:
        """Stop accepting, then cut every connection still open; returns once all are closed."""
        if self._server is not None:
            self._server.close()
        # Closing the sockets (not cancelling the handlers, which asyncio's stream server would log as errors)
        # ends both copies of each link with an end of stream.
        for writer in list(self._writers):
            writer.close()
        await asyncio.gather(*self._links, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> RoundRobin:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        index = next(self._next)
        self.chosen.append(index)
        link = asyncio.current_task()
        assert link is not None
        self._links.add(link)
        try:
            async with self._closing(client_w):
                host, port = self.backends[index]
                try:
                    backend_r, backend_w = await asyncio.open_connection(host, port)
                except OSError:
                    return  # the backend is gone: the client sees its connection closed, as with a dead endpoint
                async with self._closing(backend_w):
                    try:
                        # A reset on either side cuts both: the TaskGroup cancels the other direction.
                        async with asyncio.TaskGroup() as pipes:
                            pipes.create_task(_copy(client_r, backend_w))
                            pipes.create_task(_copy(backend_r, client_w))
                    except* ConnectionError:
                        pass
        finally:
            self._links.discard(link)

    @contextlib.asynccontextmanager
    async def _closing(self, writer: asyncio.StreamWriter) -> AsyncIterator[None]:
        """Track `writer` while the block runs (so `close` can cut it), then close it."""
        self._writers.add(writer)
        try:
            yield
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until `source` ends, then half-close `sink`, so each direction ends on its own (HTTP keeps working)."""
    while data := await source.read(CHUNK):
        sink.write(data)
        await sink.drain()
    if sink.can_write_eof():
        sink.write_eof()
