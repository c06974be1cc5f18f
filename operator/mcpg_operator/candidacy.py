"""The elector on a thread of its own: renewals never wait behind the reconciler's event loop.

kopf and every reconcile pass share the main event loop; a CPU-bound pass (300 ResourceWatches rendered) held it
past the renew deadline, and the leader lost its Lease to work it was doing (issue 31). `Candidacy` runs
`leader.Elector` in a second thread with its own loop and its own API client, and tells the main loop what
happened through `call_soon_threadsafe`; the reconciler's writes ask `leader.Fence`, which the elector keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from mcpg_operator import metrics
from mcpg_operator.leader import Connection, Elector, Fence
from mcpg_operator.settings import LeaderElection

Connect = Callable[[], Awaitable[Connection]]


class Candidacy:
    """The elector on a thread of its own, with its own event loop and its own API client (`connect` is awaited in
    that loop: an HTTP session belongs to the loop it was made in), so that renewals never wait behind the
    caller's loop, whatever runs there. Made, started and stopped from the caller's loop; what the elector has to
    say comes back to that loop through `call_soon_threadsafe`, and `on_lost` is called there at once.
    """

    def __init__(
        self,
        config: LeaderElection,
        connect: Connect,
        on_lost: Callable[[], None] = lambda: None,
        recorder: metrics.Metrics = metrics.METRICS,
    ) -> None:
        self._config, self._connect, self._on_lost, self._recorder = config, connect, on_lost, recorder
        self.fence = Fence(config.renew_s, f"{config.namespace}/{config.lease_name}", recorder=recorder)
        """For the caller's client: open while the Lease is held within its renew deadline."""
        # The caller's loop waits on these; only that loop sets them (`_tell`).
        self._acquired, self._gone, self._ended = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._error: BaseException | None = None
        self._stop_asked = False
        self._stopping = asyncio.Event()  # the elector's loop waits on it
        self._caller: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # A daemon: a thread stuck in a request must not keep the process alive once the caller has returned.
        self._thread = threading.Thread(target=self._main, name=f"Lease {config.lease_name}", daemon=True)

    def start(self) -> None:
        self._caller, self._loop = asyncio.get_running_loop(), asyncio.new_event_loop()
        self._thread.start()

    async def leading(self) -> None:
        """Return once this replica holds the Lease; raise what stopped the elector, if it stopped first."""
        await first(self._acquired.wait(), self._gone.wait())
        if not self._acquired.is_set():
            raise self._error or RuntimeError("the elector stopped before it held the Lease")

    async def lost(self) -> None:
        """Return when this replica no longer holds the Lease (the elector stopped by itself); raise its error."""
        await self._gone.wait()
        if self._error is not None:
            raise self._error

    async def stop(self) -> None:
        """Release the Lease unless it was lost, and end the thread (the caller's loop goes on meanwhile)."""
        self._stop_asked = True
        if self._loop is None:
            return  # never started
        with contextlib.suppress(RuntimeError):  # its loop is closed: the thread has ended already
            self._loop.call_soon_threadsafe(self._stopping.set)
        await self._ended.wait()
        self._thread.join()  # it has nothing left to do but return

    # --- on the elector's thread --------------------------------------------------------------------------------

    def _main(self) -> None:
        loop, error = self._loop, None
        assert loop is not None  # set by `start`, before the thread runs
        try:
            loop.run_until_complete(self._run())
        except Exception as e:  # thread boundary: what stopped the elector is for the caller to know
            error = e
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._tell(self._finished, error)

    async def _run(self) -> None:
        store = await self._connect()
        try:
            await self._elect(Elector(store, self._config, self._recorder, fence=self.fence))
        finally:
            await store.close()

    async def _elect(self, elector: Elector) -> None:
        lost = False
        try:
            if not await first(elector.acquire(), self._stopping.wait()):
                return
            self._tell(self._acquired.set)
            lost = await first(elector.hold(), self._stopping.wait())  # `hold` returns only when it is lost
            if lost:
                self._tell(self._lose)  # now, not after this thread has closed its client
        finally:
            if not lost:  # a standby may have won a race it was stopped in: `release` checks the holder
                await elector.release()

    def _tell(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._caller is not None  # set by `start`, before the thread runs
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody is listening any more
            self._caller.call_soon_threadsafe(callback, *args)

    # --- on the caller's loop -----------------------------------------------------------------------------------

    def _lose(self) -> None:
        if not self._gone.is_set():
            self._gone.set()
            if not self._stop_asked:
                self._on_lost()

    def _finished(self, error: BaseException | None) -> None:
        self._error = error
        self._lose()  # if it had not been lost: the elector stopped (on a stop, or an error), so nothing is held
        self._ended.set()


async def first(wanted: Awaitable[Any], other: Awaitable[Any]) -> bool:
    """Whether `wanted` finished before `other`; the loser is cancelled (both are, if this is)."""
    tasks = asyncio.ensure_future(wanted), asyncio.ensure_future(other)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if tasks[0] in done:
        tasks[0].result()  # its error, if it failed
        return True
    return False
