"""A loopback TCP proxy in front of one real server, for the network faults a kill cannot make.

A killed server closes every connection at once, between two requests. A connection lost in the middle of a
request (the server never saw it, or saw it and its answer never came back) is what a restart behind a Service
or a dropped route does; `cut_on_next_write` makes exactly that, on demand.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forwards every connection to `host:port`; one cut can be armed at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.listen_port = 0
        self.cuts = 0
        """Connections cut so far."""
        self._armed = False
        self._cut = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    def cut_on_next_write(self) -> asyncio.Event:
        """The next bytes any client sends are dropped, not forwarded, and that connection is closed both ways.
        Returns an event set once the cut is made."""
        self._armed = True
        self._cut = asyncio.Event()
        return self._cut

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            client_w.close()
            return
        pumps = [self._pump(client_r, server_w, from_client=True), self._pump(server_r, client_w, from_client=False)]
        tasks = [asyncio.create_task(p) for p in pumps]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            for writer in (client_w, server_w):
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, from_client: bool) -> None:
        while data := await reader.read(65536):
            if from_client and self._armed:
                self._armed = False
                self.cuts += 1
                self._cut.set()
                return  # the caller closes both sides; these bytes never reach the server
            writer.write(data)
            await writer.drain()
