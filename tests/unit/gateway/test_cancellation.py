"""A task's cancellation cannot be lost (`cancellation.py`): the stdlib race it guards against, shown on this
Python, the re-check that recovers from it, and shutdown waits that abandon (and name) what will not stop; at the
gateway, a watch that will not stop is shown as stopping, then abandoned at shutdown, which completes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Any

import httpx2
import pytest

from mcpg_gateway import cancellation
from mcpg_gateway.strategies import base, plugin
from mcpg_testing import BOUND_S
from mcpg_testing.clients import subscribed
from mcpg_testing.configs import UNUSED_BACKEND, bearer, gateway_config, resource
from mcpg_testing.gateways import ADMIN_TOKEN, GatewayFactory


async def cancelled_as_its_reply_arrives(waiting: asyncio.Task[str], reply: asyncio.Future[str]) -> None:
    """Cancel `waiting` in the same loop pass as `reply` completes: what a NATS reply racing a last subscriber's
    departure does to nats-py's `asyncio.wait_for`."""
    await asyncio.sleep(0)  # one pass: `waiting` is now suspended inside its wait
    reply.set_result("reply")
    waiting.cancel()
    async with asyncio.timeout(BOUND_S):
        await asyncio.wait({waiting})


async def test_a_cancel_that_arrives_with_a_wait_for_s_result_is_raised_again_by_the_check() -> None:
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()
    plain = asyncio.create_task(asyncio.wait_for(reply, BOUND_S))
    await cancelled_as_its_reply_arrives(plain, reply)
    if sys.version_info < (3, 12):  # the race this module exists for: the result wins, the cancel is lost
        assert plain.result() == "reply"

    reply = loop.create_future()
    checked = asyncio.create_task(cancellation.checked(asyncio.wait_for(reply, BOUND_S)))
    await cancelled_as_its_reply_arrives(checked, reply)
    assert checked.cancelled()


async def test_a_guarded_block_gives_way_to_a_cancel_its_client_swallowed_and_keeps_its_timeout() -> None:
    async def swallowing_client() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # as nats-py's `_flush_pending` does
            await asyncio.Event().wait()

    async def guarded_call() -> None:
        async with cancellation.guarded(BOUND_S):
            await swallowing_client()

    task = asyncio.create_task(guarded_call())
    await asyncio.sleep(0)
    task.cancel()
    async with asyncio.timeout(BOUND_S):
        await asyncio.wait({task})
    assert task.cancelled()

    with pytest.raises(TimeoutError):  # not cancelled: a timeout stays a timeout
        async with cancellation.guarded(0.01):
            await asyncio.Event().wait()


async def test_a_shutdown_wait_abandons_a_task_that_will_not_stop_and_names_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    let_go = asyncio.Event()

    async def stubborn() -> None:
        while not let_go.is_set():
            try:
                await let_go.wait()
            except asyncio.CancelledError:
                continue  # a plugin that ignores its cancel

    task = asyncio.create_task(stubborn(), name="watch plugin://stubborn")
    quick = asyncio.create_task(asyncio.Event().wait(), name="watch x://quick")
    await asyncio.sleep(0)
    for t in (task, quick):
        t.cancel()
    try:
        with caplog.at_level(logging.WARNING, logger="mcpg_gateway.cancellation"):
            async with asyncio.timeout(BOUND_S):
                abandoned = await cancellation.stopped([task, quick], 0.05, "stopping the watches")
        assert abandoned == {task}
        assert quick.cancelled()
        [line] = [r.getMessage() for r in caplog.records]
        assert "stopping the watches: task 'watch plugin://stubborn' did not stop" in line
    finally:
        let_go.set()
        await task


def test_the_process_s_loop_ends_in_bound_though_a_task_left_behind_ignores_its_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # asyncio.run would cancel the leftover and wait for it for ever; here, at most the bound, naming it.
    stubborn_started = []

    async def stubborn() -> None:
        release = asyncio.Event()
        stubborn_started.append(release)
        while True:
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    async def main() -> None:
        asyncio.get_running_loop().create_task(stubborn(), name="stubborn plugin task")
        await asyncio.sleep(0)

    with caplog.at_level(logging.WARNING, logger="mcpg_gateway.cancellation"):
        cancellation.run(main(), timeout_s=0.2)
    assert stubborn_started, "the leftover task never ran"
    assert "'stubborn plugin task' did not stop" in caplog.text


async def test_a_stopping_task_stays_listed_until_it_has_ended() -> None:
    let_go = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await let_go.wait()  # a strategy's close that takes its time

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    stopping: cancellation.Stopping[str] = cancellation.Stopping()
    stopping.stop(task, "x://1")
    await asyncio.sleep(0)
    assert [s.subject for s in stopping.now()] == ["x://1"]
    let_go.set()
    async with asyncio.timeout(BOUND_S):
        await asyncio.wait({task})
    assert stopping.now() == []


# --- at the gateway: a watch that will not stop is shown, then abandoned at shutdown ------------------------


STUBBORN = "phone://stubborn"


def stubborn_plugins(cancelled: asyncio.Event, let_go: asyncio.Event) -> plugin.PluginRegistry:
    class Stubborn:
        """A push strategy whose run ignores its cancel until the test lets it go: a plugin's bug."""

        @staticmethod
        def kind() -> str:
            return "stubborn"

        def __init__(self, spec: dict[str, Any], ctx: base.WatchContext) -> None:
            return None

        async def start(self) -> None:
            return None

        async def run(self, fire: base.Fire) -> None:
            while not let_go.is_set():
                try:
                    await let_go.wait()
                except asyncio.CancelledError:
                    cancelled.set()

        async def close(self) -> None:
            return None

    return plugin.PluginRegistry({"stubborn": Stubborn}, [])


async def test_a_watch_that_will_not_stop_is_shown_as_stopping_then_abandoned_and_named_at_shutdown(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cancellation, "STOP_TIMEOUT_S", 0.2)  # the shutdown's bound, shortened for the test
    cancelled, let_go = asyncio.Event(), asyncio.Event()
    raw = gateway_config(resource("stubborn", STUBBORN, UNUSED_BACKEND, {"type": "plugin", "kind": "stubborn"}))
    gw = await gateway_factory(raw, plugins=stubborn_plugins(cancelled, let_go), admin_token=ADMIN_TOKEN)
    caplog.set_level(logging.WARNING, logger=cancellation.__name__)
    try:
        async with subscribed(gw.mcp_url, "listen", [STUBBORN]):
            pass
        async with asyncio.timeout(BOUND_S):
            await cancelled.wait()  # its last subscriber left: the watcher was told to stop, and did not
        async with httpx2.AsyncClient() as http:
            listed = (await http.get(f"{gw.admin}/admin/v1/watches", headers=bearer(ADMIN_TOKEN))).json()
        assert listed["watches"] == []
        assert [(s["uri"], s["strategy"]) for s in listed["stopping"]] == [(STUBBORN, "plugin")]
        await gw.shutdown()  # within BOUND_S
    finally:
        let_go.set()
    [line] = [r.getMessage() for r in caplog.records if r.name == cancellation.__name__]
    assert (
        line
        == "stopping the watches: task 'watch phone://stubborn' did not stop within 0.2 s of being cancelled; abandoned"
    )
