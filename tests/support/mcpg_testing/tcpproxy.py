"""A loopback TCP proxy in front of one real server, for the network faults a kill cannot make.

A killed server closes every connection at once, between two requests. A connection lost in the middle of a
request (the server never saw it, or saw it and its answer never came back) is what a restart behind a Service
or a dropped route does; `cut_on_next_write` makes exactly that, on demand.

A partition closes nothing: `blackhole` stops forwarding in both directions, for every open connection and every
new one, without closing any, as a dropped route or a NAT that forgot the flow does. Nothing is lost either:
bytes wait, as TCP retransmits them, and a close waits too (a FIN crosses no partition). `resume` lets it all
through, in order; a side that gave up meanwhile is then seen closing. `strand` is the other idle-timeout
story: every connection open now stops for good (the NAT forgot it), while new ones are forwarded at once, so
only a client that gives up on the old connection and opens another gets through.
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
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._serving: set[asyncio.Task[None] | None] = set()
        self._open: set[asyncio.Event] = set()
        """Per open connection: set while it may forward (cleared for good by `strand`)."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in [*self._tasks, *(t for t in self._serving if t is not None)]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def blackhole(self) -> None:
        """Stop forwarding, without closing anything, until `resume`."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again: what waited goes through first."""
        self._flowing.set()

    def strand(self) -> None:
        """Every connection open now stops forwarding for good, without closing; new ones are forwarded."""
        for alive in self._open:
            alive.clear()
        self._open.clear()

    @property
    def partitioned(self) -> bool:
        return not self._flowing.is_set()

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
        current = asyncio.current_task()
        self._serving.add(current)
        try:
            await self._forward(client_r, client_w)
        finally:
            self._serving.discard(current)

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await self._flowing.wait()  # a connection opened during a partition reaches the server only after it
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            client_w.close()
            return
        alive = asyncio.Event()
        alive.set()
        self._open.add(alive)
        pumps = [
            self._pump(client_r, server_w, alive, from_client=True),
            self._pump(server_r, client_w, alive, from_client=False),
        ]
        tasks = [asyncio.create_task(p) for p in pumps]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._open.discard(alive)
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            for writer in (client_w, server_w):
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, alive: asyncio.Event, from_client: bool
    ) -> None:
        while True:
            await self._passable(alive)  # partitioned: not even an end of stream is read (and so passed on)
            data = await reader.read(65536)
            await self._passable(alive)  # what was read as the partition began waits for its end
            if not data:
                return
            if from_client and self._armed:
                self._armed = False
                self.cuts += 1
                self._cut.set()
                return  # the caller closes both sides; these bytes never reach the server
            writer.write(data)
            await writer.drain()

    async def _passable(self, alive: asyncio.Event) -> None:
        """Until this connection may forward: no partition, and not stranded (which is for good)."""
        await self._flowing.wait()
        await alive.wait()
