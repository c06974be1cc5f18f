"""`eager.start`: a coroutine runs in the caller's turn; only one that waits becomes a task, and behaves as one."""

from __future__ import annotations

import asyncio

import pytest

from mcpg_gateway.fanout import eager


async def test_a_coroutine_that_never_waits_is_done_when_start_returns() -> None:
    done: list[str] = []

    async def write() -> None:
        done.append("written")

    assert eager.start(write()) is None
    assert done == ["written"]  # no turn of the loop was needed


async def test_an_exception_before_any_wait_is_raised_by_start() -> None:
    async def refuse() -> None:
        raise RuntimeError("response already completed")

    with pytest.raises(RuntimeError, match="already completed"):
        eager.start(refuse())


async def test_a_coroutine_that_waits_goes_on_in_a_task_from_where_it_stopped() -> None:
    steps: list[object] = []
    room = asyncio.get_running_loop().create_future()

    async def write() -> str:
        steps.append("started")
        steps.append(await room)
        return "written"

    task = eager.start(write(), name="writer")
    assert task is not None
    assert task.get_name() == "writer"
    assert steps == ["started"]  # ran up to its wait, once
    room.set_result("room")
    assert await task == "written"
    assert steps == ["started", "room"]


async def test_the_task_raises_what_the_coroutine_raises_after_its_wait() -> None:
    room = asyncio.get_running_loop().create_future()

    async def write() -> None:
        await room
        raise ConnectionResetError("gone")

    task = eager.start(write())
    assert task is not None
    room.set_result(None)
    with pytest.raises(ConnectionResetError):
        await task


async def test_cancelling_the_task_cancels_the_wait_inside_the_coroutine() -> None:
    room = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def write() -> None:
        try:
            await room
        finally:
            cleaned.append("finally")

    task = eager.start(write())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert room.cancelled()
    assert cleaned == ["finally"]


async def test_several_waits_and_a_bare_yield_are_all_honoured() -> None:
    async def write() -> int:
        await asyncio.sleep(0)  # a bare yield: the first thing the task is handed
        await asyncio.sleep(0.001)
        return 3

    task = eager.start(write())
    assert task is not None
    assert await task == 3


async def test_an_awaitable_that_is_not_a_coroutine_is_run_too() -> None:
    future = asyncio.get_running_loop().create_future()
    future.set_result(5)
    assert eager.start(future) is None  # already done: no wait

    pending = asyncio.get_running_loop().create_future()
    task = eager.start(pending)
    assert task is not None
    pending.set_result(6)
    assert await task == 6
