"""The one small interface every watch strategy implements, what a strategy is handed, and how it describes itself.

Each strategy module exports one `StrategyType` (its `type`, how to build a watch, and an optional client its
watches share); the registry in `__init__.py` is a mapping built from those. A strategy instance watches one
concrete URI. `start` runs before the subscribe is answered (a poll takes its
baseline there, so there is no blind window and a URI the backend refuses is refused up front); `run` then
runs until cancelled and awaits `fire()` for every change it decides happened; `close` releases connections.

A strategy that reads its source on a cadence also implements `PullStrategy` (one `check` at a time, and its
last state as text), so that on a bus one gateway can own it for all (`ownership.py`) and another can take over
from the state it left.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mcpg_gateway import cancellation, catalog, liveness
from mcpg_gateway.contract import config

Fire = Callable[[], Awaitable[None]]


class WatchStrategy(Protocol):
    async def start(self) -> None:
        """Take the baseline or connect. Raise `StrategyError` to refuse the subscription."""

    async def run(self, fire: Fire) -> None:
        """Run until cancelled; await `fire()` once per observed change."""

    async def close(self) -> None:
        """Release whatever `start` or `run` acquired. Called exactly once, also after a failed start."""


@runtime_checkable
class PullStrategy(Protocol):
    """A strategy that re-reads its source every `interval_s` and decides by comparing with its last state."""

    @property
    def interval_s(self) -> float: ...

    async def check(self) -> bool:
        """Read once, compare with the last state, keep the new one; True if it changed. A failed read is
        counted and is no change (the last state stays)."""

    def snapshot(self) -> str:
        """The last state, as text that `resume` takes back exactly."""

    def resume(self, state: str) -> None:
        """Continue from `state` (another gateway's `snapshot`). Raise `ValueError` if it is not this watch's."""


def as_pull(strategy: WatchStrategy) -> PullStrategy | None:
    """`strategy` as a pull strategy, if it is one: itself, or what a wrapper says (`as_pull()`, see plugin.py)."""
    if isinstance(strategy, PullStrategy):
        return strategy
    unwrap = getattr(strategy, "as_pull", None)
    inner = unwrap() if callable(unwrap) else None
    return inner if isinstance(inner, PullStrategy) else None


async def run_pull(pull: PullStrategy, clock: Clock, fire: Fire) -> None:
    """A pull strategy run alone: sleep, check, fire on a change; until cancelled."""
    while True:
        await clock.sleep(pull.interval_s)
        if await cancellation.checked(pull.check()):  # a read may swallow the stop (`cancellation.py`)
            await fire()


class Clock(Protocol):
    """Time as the gateway's schedules see it; tests inject one they drive (nothing in a test sleeps)."""

    def now(self) -> float:
        """Monotonic seconds: only differences mean anything."""

    async def sleep(self, seconds: float) -> None:
        """An interval's wait (a poll cadence, a back-off)."""

    async def sleep_until(self, deadline: float) -> None:
        """A deadline's wait (a lifetime, a pause), in `now()` terms."""


WAKE_GRID_S = 0.1
"""Interval sleeps end on this grid of the event loop's clock (`wake_at`)."""


def wake_at(now: float, seconds: float) -> float:
    """When an interval of `seconds` from `now` ends: the first point of the `WAKE_GRID_S` grid at or after
    `now + seconds`. A thousand poll watches started at scattered moments then wake together, ten times a second at
    most, instead of a thousand separate event-loop wake-ups: a poll that wakes alone costs about three times one
    that wakes with others (the poll benchmark). An interval runs at most 100 ms longer than asked."""
    return math.ceil(round((now + seconds) / WAKE_GRID_S, 6)) * WAKE_GRID_S


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        await asyncio.sleep(wake_at(now, seconds) - now)

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))


@dataclass(slots=True)
class ReadStats:
    """What the admin API shows about a watcher's reads; strategies record into it."""

    last_success: float | None = None
    last_failure: float | None = None
    failures: int = 0
    on_failure: Callable[[], None] = field(default=lambda: None)
    connection: liveness.Connection = field(default_factory=liveness.Connection)
    """The watch's long-lived connection to its source, for strategies that hold one (they keep it current)."""

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
    digest: Callable[[], Awaitable[bytes]] | None = None
    """The SHA-256 of what `read` returns, hashed as the body arrives so it is never held whole (a poll of a large
    resource); None where the binding's reads cannot stream (a test's fake): hash what `read` returns then."""
    liveness: liveness.Rules = field(default_factory=liveness.Rules)
    """How often a long-lived connection proves it is alive, and how long a round trip may take
    (`gateway.liveness`). A plugin that holds a connection should follow it too."""


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
