"""Lifetimes: every subscription ends `lifetime_s` after it began, renewals included (`gateway.subscriptions`).

Every lifetime is the same length, so deadlines arrive in the order subscriptions began and a deque is the whole
schedule: one task sleeps until the oldest deadline, ends what is due and sleeps again. An ended subscription
leaves its entry behind (stale: the subscriber no longer holds that URI since that time); stale entries are
compacted away before they outnumber the live ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Callable
from dataclasses import dataclass

from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.strategies import base

Expire = Callable[[Subscriber, str], None]
"""End one subscription whose lifetime ran out (`WatchRegistry.end` with `lifetime_reached`)."""


@dataclass(frozen=True, slots=True)
class _Lifetime:
    deadline: float
    sub: Subscriber
    uri: str
    since: float

    @property
    def live(self) -> bool:
        return self.sub.since.get(self.uri) == self.since


class Lifetimes:
    """The schedule of the subscriptions' ends, and the one task that keeps it."""

    def __init__(self, clock: base.Clock, expire: Expire) -> None:
        self._clock, self._expire = clock, expire
        self._entries: collections.deque[_Lifetime] = collections.deque()
        self.held = 0
        """(subscriber, URI) pairs held now (the registry counts them): the live entries."""
        self._added = asyncio.Event()
        self.reaper: asyncio.Task[None] | None = None

    def add(self, sub: Subscriber, uri: str, since: float, lifetime_s: float) -> None:
        """`sub`'s subscription to `uri`, begun at `since`, ends `lifetime_s` later."""
        self._entries.append(_Lifetime(since + lifetime_s, sub, uri, since))
        if len(self._entries) > 2 * self.held + 64:
            self._entries = collections.deque(e for e in self._entries if e.live)
        self._added.set()
        if self.reaper is None or self.reaper.done():
            # In a context of its own, not the subscribing request's (held as long as the reaper runs).
            self.reaper = asyncio.create_task(self._reap(), name="watch lifetimes", context=contextvars.Context())

    async def _reap(self) -> None:
        while True:
            if not self._entries:
                self._added.clear()
                await self._added.wait()
                continue
            await self._clock.sleep_until(self._entries[0].deadline)
            now = self._clock.now()
            while self._entries and self._entries[0].deadline <= now:
                entry = self._entries.popleft()
                if entry.live:
                    self._expire(entry.sub, entry.uri)
