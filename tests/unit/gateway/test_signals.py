"""`Signal` keeps asyncio.Event's promises for set, clear and wait, which uvicorn relies on (`connections.py`)."""

from __future__ import annotations

import asyncio

from mcpg_gateway.signals import Signal
from mcpg_testing import BOUND_S


async def test_set_wakes_every_waiter_even_if_cleared_again_at_once() -> None:
    signal = Signal()
    waiters = [asyncio.create_task(signal.wait()) for _ in range(3)]
    await asyncio.sleep(0)  # each is waiting now
    assert not any(w.done() for w in waiters)
    signal.set()
    signal.clear()
    async with asyncio.timeout(BOUND_S):
        assert await asyncio.gather(*waiters) == [True, True, True]
    assert not signal.is_set()


async def test_a_set_signal_is_passed_at_once_until_cleared() -> None:
    signal = Signal(is_set=True)
    assert signal.is_set()
    async with asyncio.timeout(BOUND_S):
        assert await signal.wait()
    signal.clear()
    waiting = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    signal.set()
    async with asyncio.timeout(BOUND_S):
        assert await waiting


async def test_a_cancelled_waiter_is_forgotten_and_the_others_still_woken() -> None:
    signal = Signal()
    gone, staying = asyncio.create_task(signal.wait()), asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert signal._waiters is not None
    assert len(signal._waiters) == 1  # only the one still waiting
    signal.set()
    async with asyncio.timeout(BOUND_S):
        assert await staying
    assert gone.cancelled()
