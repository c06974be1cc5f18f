"""The one small interface every watch strategy implements, what a strategy is handed, and how it describes itself.

Each strategy module exports one `StrategyType` (its `type`, how to build a watch, and an optional client its
watches share); the registry in `__init__.py` is a mapping built from those. A strategy instance watches one
concrete URI. `start` runs before the subscribe is answered (a poll takes its
baseline there, so there is no blind window and a URI the backend refuses is refused up front); `run` then
runs until cancelled and awaits `fire()` for every change it decides happened; `close` releases connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpg_gateway import catalog
from mcpg_gateway.contract import config

Fire = Callable[[], Awaitable[None]]


class WatchStrategy(Protocol):
    async def start(self) -> None:
        """Take the baseline or connect. Raise `StrategyError` to refuse the subscription."""

    async def run(self, fire: Fire) -> None:
        """Run until cancelled; await `fire()` once per observed change."""

    async def close(self) -> None:
        """Release whatever `start` or `run` acquired. Called exactly once, also after a failed start."""


class Clock(Protocol):
    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(slots=True)
class ReadStats:
    """What the admin API shows about a watcher's reads; strategies record into it."""

    last_success: float | None = None
    last_failure: float | None = None
    failures: int = 0
    on_failure: Callable[[], None] = field(default=lambda: None)

    def succeeded(self) -> None:
        self.last_success = time.time()

    def failed(self) -> None:
        self.last_failure = time.time()
        self.failures += 1
        self.on_failure()


@dataclass(frozen=True, slots=True)
class WatchContext:
    """Everything a strategy may use. `read` goes through the resource's own binding."""

    binding: catalog.Binding
    read: Callable[[], Awaitable[bytes]]
    stats: ReadStats
    clock: Clock
    shared: Any = None
    """The client every watch of this strategy type shares (`StrategyType.shared`), if it has one."""


StrategyFactory = Callable[[Any, WatchContext], WatchStrategy]
"""Builds the watch of one URI from its strategy spec (the `watch.strategy` model) and its context."""


class SharedClient(Protocol):
    """A client the watches of one strategy type share for the gateway's lifetime."""

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StrategyType:
    """What a strategy module tells the registry about itself."""

    type: str
    """The `watch.strategy.type` it serves."""
    build: StrategyFactory
    shared: Callable[[config.GatewayConfig], SharedClient] | None = None
    """Makes the client its watches share (one NATS connection per server URL), once per gateway."""
