"""The event-driven strategies' loop: bursts collapse into one fire; a lost connection backs off, then fires once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mcpg_gateway import backoff, catalog
from mcpg_gateway.contract import check
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base, reconnect
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, resource


class InstantClock:
    """Backoff sleeps return at once and are recorded."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def now(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    async def sleep_until(self, deadline: float) -> None:
        raise AssertionError("no deadline is waited on here")


def context(clock: base.Clock) -> base.WatchContext:
    raw = gateway_config(resource("r", "x://r", "http://127.0.0.1:9/", {"type": "webhook"}))
    binding = catalog.Catalog(check.load(raw, environ={}).mcp.capabilities).resolve("x://r")
    assert binding is not None

    async def read() -> bytes:
        return b""

    return base.WatchContext(binding, read, base.ReadStats(), clock)


@contextlib.asynccontextmanager
async def running(
    signal: reconnect.Signal, outcomes: list[StrategyError | None], ctx: base.WatchContext
) -> AsyncIterator[asyncio.Queue[None]]:
    fires: asyncio.Queue[None] = asyncio.Queue()

    async def connect() -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    async def fire() -> None:
        fires.put_nowait(None)

    task = asyncio.create_task(reconnect.run(signal, connect, fire, ctx, "watch x://r"))
    try:
        yield fires
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def next_fire(fires: asyncio.Queue[None]) -> None:
    async with asyncio.timeout(BOUND_S):
        await fires.get()


async def test_a_burst_of_changes_fires_once() -> None:
    signal = reconnect.Signal()
    async with running(signal, [], context(InstantClock())) as fires:
        for _ in range(3):
            signal.changed()
        await next_fire(fires)
        signal.changed()  # a later change, after the burst was handled
        await next_fire(fires)
        assert fires.empty()


async def test_a_lost_connection_is_retried_with_backoff_counted_and_then_fires_once() -> None:
    clock = InstantClock()
    ctx = context(clock)
    signal = reconnect.Signal()
    outcomes: list[StrategyError | None] = [StrategyError("refused"), StrategyError("refused"), None]
    async with running(signal, outcomes, ctx) as fires:
        signal.connection_lost()
        await next_fire(fires)
        signal.changed()
        await next_fire(fires)
        assert fires.empty()
    assert clock.slept == [1.0, 2.0]
    assert ctx.stats.failures == 2
    assert ctx.stats.last_success is not None


def test_backoff_grows_then_stays_at_its_ceiling() -> None:
    assert [backoff.delay_s(n) for n in range(7)] == [1.0, 2.0, 5.0, 10.0, 30.0, 30.0, 30.0]
