"""Run a coroutine at once, in the caller's turn of the loop; give it a task only if it has to wait.

The fan-out writes one frame to each of many streams. Writing to a connection whose buffers have room never
waits, so a task per write (created, scheduled, woken, finished) would cost more than the write itself. `start`
runs the coroutine up to its first suspension right where it is called: a write that needs no waiting is done
when `start` returns, and only one that must wait (its connection's buffers are full) becomes a task, which
carries on from where it stopped. Python 3.12 has this as `asyncio.eager_task_factory`; the gateway runs 3.11.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")

_FIRST_STEP_TAKEN: Any = object()


def start(awaitable: Awaitable[T], name: str | None = None) -> asyncio.Task[T] | None:
    """Run `awaitable` until it finishes or first waits. None if it finished (its result is dropped; its exception
    is raised here); otherwise the task that finishes it."""
    coro = awaitable if isinstance(awaitable, Coroutine) else _awaiting(awaitable)
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_rest(_Resumed(coro, waiting_on)), name=name)


async def _awaiting(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _rest(resumed: _Resumed[T]) -> T:
    return await resumed


class _Resumed(Generator[Any, Any, T]):
    """The rest of a coroutine already started: hands the task what the coroutine waits on, then steps it on.

    A task drives whatever it awaits by `send` and `throw`; this passes both through to the started coroutine,
    so its waits, results, exceptions and cancellation behave as if the task had run it from the start.
    """

    def __init__(self, coro: Coroutine[Any, Any, T], waiting_on: Any) -> None:
        self._coro, self._waiting_on = coro, waiting_on

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def __iter__(self) -> Generator[Any, Any, T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        if self._waiting_on is not _FIRST_STEP_TAKEN:  # the task's first step: what the coroutine already waits on
            waiting_on, self._waiting_on = self._waiting_on, _FIRST_STEP_TAKEN
            return waiting_on
        return self._coro.send(value)  # StopIteration carries its result out, as a generator's return does

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._waiting_on = _FIRST_STEP_TAKEN
        if val is None:
            return self._coro.throw(typ)
        return self._coro.throw(val.with_traceback(tb) if tb is not None else val)

    def close(self) -> None:
        self._coro.close()
