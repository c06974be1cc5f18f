"""Listen streams held open on gateway pods while a scenario changes their configuration: how many ended.

One `subscriptions/listen` per URL (each a pod's own address, so every pod holds one), through the MCP SDK's own
client, on an event loop in a thread of its own (the scenarios around it are synchronous). A stream counts as
opened once acknowledged; as ended when it ends for any reason before the block does: answered by the gateway
(a rollout's shutdown, say) or dropped. Leaving the block closes them, and that is not counted.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

OPEN_BOUND_S = 60.0


class Held:
    def __init__(self, urls: list[str], uri: str, token: str) -> None:
        self._urls, self._uri, self._token = urls, uri, token
        self._opened = self._ended = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bench listeners", daemon=True)
        self._tasks: list[asyncio.Task[None]] = []
        self._all_open = threading.Event()

    def counts(self) -> dict[str, int]:
        return {"opened": self._opened, "ended": self._ended}

    def __enter__(self) -> Held:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(OPEN_BOUND_S)
        if not self._all_open.wait(OPEN_BOUND_S):
            self.__exit__(None, None, None)
            missing = len(self._urls) - self._opened
            raise TimeoutError(f"{missing} listen stream(s) not acknowledged within {OPEN_BOUND_S} s")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(OPEN_BOUND_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=15)

    async def _start(self) -> None:
        self._tasks = [asyncio.create_task(self._hold(url)) for url in self._urls]

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _hold(self, url: str) -> None:
        headers = {"authorization": f"Bearer {self._token}"}
        try:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=None)) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
                client.listen(resource_subscriptions=[self._uri]) as stream,
            ):
                self._opened += 1
                if self._opened == len(self._urls):
                    self._all_open.set()
                async for _ in stream:
                    pass
        except asyncio.CancelledError:
            return
        except Exception:  # a dropped stream: counted below like an answered one
            pass
        self._ended += 1
        self._all_open.set()  # an end before every stream opened: the caller finds out from the counts
