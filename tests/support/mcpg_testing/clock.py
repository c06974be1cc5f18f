"""A clock the test drives: strategies, reconnect backoff and restarts sleep on it; the test decides when they wake.

Nothing waits on real time. Two kinds of wait, as `base.Clock` has them:
- `sleep(seconds)`, an interval (a poll's cadence, a back-off): woken by `tick`/`release`, whatever its length.
  `requested` records every interval asked for, so a test can assert the cadence without waiting it out.
- `sleep_until(deadline)`, a deadline (a watch's lifetime): woken only when `advance` moves `now()` past it.
`now()` starts at 1,000 and moves only by `advance`, so a lease or a lifetime is a test's explicit step.
"""

from __future__ import annotations

import asyncio

from mcpg_testing import BOUND_S

START = 1_000.0


class ManualClock:
    def __init__(self) -> None:
        self.requested: list[float] = []
        self._now = START
        self._sleeping: list[asyncio.Future[None]] = []
        self._deadlines: list[tuple[float, asyncio.Future[None]]] = []
        self._changed = asyncio.Condition()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.requested.append(seconds)
        self._sleeping.append(fut)
        async with self._changed:
            self._changed.notify_all()
        try:
            await fut
        finally:
            if fut in self._sleeping:
                self._sleeping.remove(fut)

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        entry = (deadline, asyncio.get_running_loop().create_future())
        self._deadlines.append(entry)
        async with self._changed:
            self._changed.notify_all()
        try:
            await entry[1]
        finally:
            if entry in self._deadlines:
                self._deadlines.remove(entry)

    def advance(self, seconds: float) -> None:
        """Move `now()` forward and wake every `sleep_until` whose deadline has come (interval sleepers stay)."""
        self._now += seconds
        due = [e for e in self._deadlines if e[0] <= self._now]
        for entry in due:
            self._deadlines.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)

    async def waiting_until(self, n: int = 1) -> None:
        """Wait until at least `n` tasks wait on a deadline (`sleep_until`)."""
        async with asyncio.timeout(BOUND_S), self._changed:
            await self._changed.wait_for(lambda: len(self._deadlines) >= n)

    async def sleepers(self, n: int = 1) -> None:
        """Wait until at least `n` tasks are asleep on an interval."""
        async with asyncio.timeout(BOUND_S), self._changed:
            await self._changed.wait_for(lambda: len(self._sleeping) >= n)

    async def release(self, n: int = 1) -> None:
        """Wait until `n` tasks are asleep, then wake every sleeper (and do not wait for them to sleep again)."""
        await self.sleepers(n)
        woken, self._sleeping = self._sleeping, []
        for fut in woken:
            fut.set_result(None)

    async def tick(self, n: int = 1) -> None:
        """Wake the `n` sleepers, then wait until they are all asleep again (their iteration has finished)."""
        await self.release(n)
        await self.sleepers(n)
