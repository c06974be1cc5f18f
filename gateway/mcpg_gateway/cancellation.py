"""A task's cancellation cannot be lost: re-checked after every await that may swallow it, and waited for in bound.

Python 3.11's `asyncio.wait_for` returns its future's result instead of raising `CancelledError` when the future
completed in the same loop pass as the cancel (fixed in 3.12, which builds it on `asyncio.timeout`). nats-py waits
on every request that way (each key-value get, put, create, update and delete, a JetStream publish) and on every
flush, and its `_flush_pending` drops a `CancelledError` outright; a plugin's code may do anything. A task whose
cancel one of them swallowed runs on as if never asked to stop: a pull watch read and published for nobody, with
no lease. In 3.11 the task still counts the request (`Task.cancelling()` stays above 0), so `reraise` after such an
await (`checked`, or `guarded` around it) raises it again. And every shutdown waits for what it cancelled only so long
(`stopped`, `within`, `Stopping`): a task that does not stop in time is abandoned, by name in the log, and the
shutdown goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 6.0
"""How long shutdown waits for the watches it stopped (each: its reading, its lease's release, its strategy's
close) before abandoning the rest, and saying so."""
STEP_TIMEOUT_S = 2.0
"""How long shutdown waits for one client to close (or one task it cancelled) before going on without it."""

T = TypeVar("T")


def requested() -> bool:
    """True if this task was asked to stop (a cancel not yet undone), whether or not an await swallowed it."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def reraise() -> None:
    """Raise `CancelledError` if this task was asked to stop: call it after an await that may have swallowed it."""
    if requested():
        raise asyncio.CancelledError


async def checked(awaitable: Awaitable[T]) -> T:
    """`await awaitable`, then `reraise`: for an await into a client that may swallow a cancel (its result, or
    its error, gives way to the cancel)."""
    try:
        return await awaitable
    finally:
        reraise()


@asynccontextmanager
async def guarded(timeout_s: float | None) -> AsyncIterator[None]:
    """`asyncio.timeout(timeout_s)` (None: no deadline) around awaits into a client that may swallow a cancel:
    leaving the block, by its end or by an error, raises `CancelledError` instead if this task was asked to stop
    meanwhile."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    finally:
        reraise()


async def stopped(tasks: Iterable[asyncio.Task[Any]], timeout_s: float, what: str) -> set[asyncio.Task[Any]]:
    """Wait up to `timeout_s` for `tasks` (already cancelled) to finish; log each one that did not, by its name,
    and return those (abandoned: they may still run, and nothing waits for them any more)."""
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=timeout_s)
    for task in pending:
        name = task.get_name()
        logger.warning("%s: task %r did not stop within %.1f s of being cancelled; abandoned", what, name, timeout_s)
        task.add_done_callback(_retrieve)
    for task in tasks:
        _retrieve(task)
    return pending


async def within(coro: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T | None:
    """Run `coro` as a task named `what` for at most `timeout_s`; past it, cancel it, log and go on (None): a
    shutdown step that hangs (or swallowed its cancel) must not hold the shutdown."""
    task = asyncio.get_running_loop().create_task(coro, name=what)
    try:
        await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():
            task.cancel()  # also when this task is cancelled while waiting: the step goes with it
            task.add_done_callback(_retrieve)
    if not task.done():
        logger.warning("%s did not finish within %.1f s; abandoned", what, timeout_s)
        return None
    return task.result()


def run(main: Coroutine[Any, Any, None], timeout_s: float = STEP_TIMEOUT_S) -> None:
    """`asyncio.run(main)`, but the end is bounded too: `asyncio.run` cancels the tasks `main` left and waits for
    them without a bound, so one abandoned above (a plugin that ignores its cancel) would hold the process."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(_stop_leftovers(timeout_s))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _stop_leftovers(timeout_s: float) -> None:
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in leftovers:
        task.cancel()
    await stopped(leftovers, timeout_s, "ending the process")


def _retrieve(task: asyncio.Task[Any]) -> None:
    # A stopped task's error was the end it was asked for, or is logged by its owner: never "never retrieved".
    if task.done() and not task.cancelled():
        task.exception()


@dataclass(frozen=True, slots=True)
class Stop(Generic[T]):
    """One task asked to stop: what it ran (`subject`) and since when (wall time)."""

    subject: T
    since: float


class Stopping(Generic[T]):
    """Tasks asked to stop and not yet stopped, each with what it ran: visible (the admin API) until they end,
    and waited for at shutdown in bound."""

    def __init__(self) -> None:
        self._stops: dict[asyncio.Task[Any], Stop[T]] = {}

    def stop(self, task: asyncio.Task[Any], subject: T) -> None:
        """Cancel `task`, and keep it here until it has ended."""
        if task.done():
            return
        task.cancel()
        self._stops.setdefault(task, Stop(subject, time.time()))
        task.add_done_callback(self._ended)

    def now(self) -> list[Stop[T]]:
        """What is stopping now, oldest first; an abandoned task stays listed until it ends, as it may still run."""
        return sorted(self._stops.values(), key=lambda s: s.since)

    def tasks(self) -> list[asyncio.Task[Any]]:
        return list(self._stops)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._stops.pop(task, None)
        _retrieve(task)
