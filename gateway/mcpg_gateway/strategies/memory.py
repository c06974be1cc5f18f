"""memory: the test double. A `MemoryHub` fires watches by URI and records their lifecycle."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base


class MemoryHub:
    def __init__(self) -> None:
        self.queues: dict[str, list[asyncio.Queue[None]]] = defaultdict(list)
        self.started: list[str] = []
        self.closed: list[str] = []
        self.refuse: set[str] = set()

    def trigger(self, uri: str) -> int:
        """Fire every running watch of `uri`; returns how many there were."""
        for q in self.queues[uri]:
            q.put_nowait(None)
        return len(self.queues[uri])

    def factory(self, spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
        return MemoryWatch(self, ctx)


class MemoryWatch:
    def __init__(self, hub: MemoryHub, ctx: base.WatchContext) -> None:
        self._hub, self._uri = hub, ctx.binding.uri
        self._queue: asyncio.Queue[None] = asyncio.Queue()

    async def start(self) -> None:
        if self._uri in self._hub.refuse:
            raise StrategyError(f"{self._uri}: refused by the memory hub")
        self._hub.started.append(self._uri)
        self._hub.queues[self._uri].append(self._queue)

    async def run(self, fire: base.Fire) -> None:
        while True:
            await self._queue.get()
            await fire()

    async def close(self) -> None:
        if self._queue in self._hub.queues[self._uri]:
            self._hub.queues[self._uri].remove(self._queue)
        self._hub.closed.append(self._uri)
