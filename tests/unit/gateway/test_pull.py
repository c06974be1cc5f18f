"""The pull-strategy protocol: poll and sql_polling check once, and hand their last state over as text."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

import pytest

from mcpg_gateway import catalog
from mcpg_gateway.contract import config
from mcpg_gateway.errors import ReadError
from mcpg_gateway.strategies import base, plugin, poll, sql_polling
from mcpg_testing import BOUND_S
from mcpg_testing.clock import ManualClock

URI = "drive://file/notes"


class Source:
    """What a poll reads: the test sets the body, or makes the read fail."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.reads = 0

    async def read(self) -> bytes:
        self.reads += 1
        if self.body is None:
            raise ReadError("HTTP 500")
        return self.body


def context(source: Source, clock: base.Clock) -> base.WatchContext:
    entry = config.ResourceConfig(
        name="notes", uri=URI, backend=config.HttpBackend(kind="http", url="http://u/"), watch=config.WatchConfig()
    )
    return base.WatchContext(catalog.Binding(URI, entry), source.read, base.ReadStats(), clock)


async def started_poll(source: Source, clock: base.Clock | None = None) -> poll.PollWatch:
    watch = poll.PollWatch(config.PollStrategy(interval_ms=20_000), context(source, clock or ManualClock()))
    await watch.start()
    return watch


async def test_poll_is_a_pull_strategy_whose_check_reads_once_and_says_whether_it_changed() -> None:
    source = Source(b"v1")
    watch = await started_poll(source)
    assert base.as_pull(watch) is watch
    assert watch.interval_s == 20.0
    assert not await watch.check()
    source.body = b"v2"
    assert await watch.check()
    assert not await watch.check()
    assert source.reads == 4  # the baseline and three checks


async def test_a_failed_check_is_no_change_and_keeps_the_last_state() -> None:
    source = Source(b"v1")
    watch = await started_poll(source)
    source.body = None
    assert not await watch.check()
    assert watch.snapshot() == hashlib.sha256(b"v1").hexdigest()


async def test_a_poll_resumed_from_another_poll_s_snapshot_compares_with_that_state() -> None:
    owner, heir = await started_poll(Source(b"v1")), await started_poll(Source(b"v2"))
    heir.resume(owner.snapshot())
    assert await heir.check()  # v1 (the owner's state) -> v2
    assert heir.snapshot() == hashlib.sha256(b"v2").hexdigest()


@pytest.mark.parametrize("state", ["not hex", "abcd", ""])
async def test_a_poll_refuses_a_state_that_is_not_a_digest(state: str) -> None:
    watch = await started_poll(Source(b"v1"))
    with pytest.raises(ValueError, match=r"digest|hex|non-hexadecimal"):
        watch.resume(state)


async def test_run_alone_sleeps_checks_and_fires_on_a_change() -> None:
    clock, source, fired = ManualClock(), Source(b"v1"), asyncio.Queue[None]()
    watch = await started_poll(source, clock)

    async def fire() -> None:
        fired.put_nowait(None)

    task = asyncio.create_task(watch.run(fire))
    await clock.tick()
    assert fired.empty()
    source.body = b"v2"
    await clock.release()
    async with asyncio.timeout(BOUND_S):
        await fired.get()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def sql_watch(query: str) -> sql_polling.SqlPollingWatch:
    spec = config.SqlPollingStrategy(type="sql_polling", url="postgresql://u:pw@db/x", query=query)
    return sql_polling.SqlPollingWatch(spec, context(Source(b""), ManualClock()))


@pytest.mark.parametrize("value", [None, 41, "2026-01-01", 1.5])
def test_sql_polling_hands_its_last_value_to_a_watch_of_the_same_query(value: Any) -> None:
    owner, heir = sql_watch("select max(id) from t"), sql_watch("select max(id) from t")
    owner._last = value
    heir.resume(owner.snapshot())
    assert heir._last == value
    assert heir.snapshot() == owner.snapshot()


def test_sql_polling_refuses_the_state_of_another_query() -> None:
    owner, heir = sql_watch("select max(id) from t"), sql_watch("select count(*) from t")
    owner._last = 41
    with pytest.raises(ValueError, match="another tracking query"):
        heir.resume(owner.snapshot())
    assert base.as_pull(heir) is heir


class PushOnly:
    def __init__(self, spec: dict[str, Any], ctx: base.WatchContext) -> None:
        pass

    @staticmethod
    def kind() -> str:
        return "push"

    async def start(self) -> None:
        return None

    async def run(self, fire: base.Fire) -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None


class Pulling(PushOnly):
    interval_s = 10.0

    @staticmethod
    def kind() -> str:
        return "pull"

    async def check(self) -> bool:
        return False

    def snapshot(self) -> str:
        return ""

    def resume(self, state: str) -> None:
        return None


@pytest.mark.parametrize(("cls", "pulls"), [(Pulling, True), (PushOnly, False)])
async def test_a_plugin_is_pull_exactly_when_the_strategy_it_builds_implements_the_protocol(
    cls: type[PushOnly], pulls: bool
) -> None:
    spec = config.PluginStrategy(type="plugin", kind=cls.kind())
    watch = plugin.PluginWatch(cls, spec, context(Source(b""), ManualClock()))
    assert base.as_pull(watch) is None  # not built until start()
    await watch.start()
    assert (base.as_pull(watch) is not None) is pulls
