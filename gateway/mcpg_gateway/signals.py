"""`Signal`: asyncio.Event's set, clear and wait, in a twelfth of its memory.

An `asyncio.Event` allocates its deque of waiters up front: 528 bytes before anyone waits, past pymalloc's
small-object limit, so from the C heap. uvicorn keeps two on every connection (its flow control's "writable" and
each request's "message arrived"), most of which nobody ever waits on, and an open GET stream holds both for as
long as it is open: about 1,300 bytes of every handshake-era session's 30 KB (issue 36). A `Signal` is 48 bytes
and makes its list of waiters on the first wait.
"""

from __future__ import annotations

import asyncio
from typing import Literal


class Signal:
    """A flag tasks can wait to be set; `set` wakes every waiter (each returns True, even if cleared again at once)."""

    __slots__ = ("_set", "_waiters")

    def __init__(self, is_set: bool = False) -> None:
        self._set = is_set
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> Literal[True]:
        if self._set:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:  # cancelled before it was set
                self._waiters.remove(waiter)
        return True
