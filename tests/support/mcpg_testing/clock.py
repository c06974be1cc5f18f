"""A clock the test drives: strategies, reconnect backoff and restarts sleep on it; the test decides when they wake.

Nothing waits on real time. `requested` records every interval asked for, so a test can assert the cadence
(the poll floor, the backoff table) without waiting it out.
"""

from __future__ import annotations

import asyncio

from mcpg_testing import BOUND_S


class ManualClock:
    def __init__(self) -> None:
        self.requested: list[float] = []
        self._sleeping: list[asyncio.Future[None]] = []
        self._changed = asyncio.Condition()

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

    async def sleepers(self, n: int = 1) -> None:
        """Wait until at least `n` tasks are asleep on this clock."""
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
