"""The event-driven strategies' shared loop: wait for a change or a lost connection; reconnect with backoff.

A connection that dropped may have dropped events with it, and nothing can tell which. So a watch that
reconnects fires exactly once afterwards: subscribers re-read once instead of silently missing a change.
Backoff sleeps go through the watch's clock (real in production, driven by the test in tests). A client may
swallow the watch's stop while connecting (`cancellation.py`): each attempt re-checks it, or this loop would
reconnect and fire for a watch nobody holds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

from mcpg_gateway import backoff, cancellation
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)


class Signal:
    """What happened since the watch last looked. A burst of events collapses into one fire."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._lost = False

    def changed(self) -> None:
        self._event.set()

    def connection_lost(self) -> None:
        self._lost = True
        self._event.set()

    async def wait(self) -> bool:
        """Wait for the next change; True if the connection was lost meanwhile."""
        await self._event.wait()
        self._event.clear()
        lost, self._lost = self._lost, False
        return lost


async def run(
    signal: Signal,
    connect: Callable[[], Awaitable[None]],
    fire: base.Fire,
    ctx: base.WatchContext,
    what: str,
) -> None:
    """Fire on every change; after a lost connection, reconnect (with backoff) and fire once."""
    while True:
        if await signal.wait():
            await reconnect(connect, ctx, what)
        await fire()


async def reconnect(connect: Callable[[], Awaitable[None]], ctx: base.WatchContext, what: str) -> None:
    """Call `connect` until it succeeds. Each failure counts as a failed read, so the admin API shows it."""
    for attempt in itertools.count():
        try:
            await cancellation.checked(connect())
        except StrategyError as e:
            ctx.stats.failed()
            delay = backoff.delay_s(attempt)
            logger.warning("%s: reconnect failed (%s); next attempt in %.0f s", what, e, delay)
            await ctx.clock.sleep(delay)
            continue
        ctx.stats.succeeded()
        ctx.stats.connection.round_trip()
        logger.info("%s: reconnected; firing once, as changes may have been missed", what)
        return
