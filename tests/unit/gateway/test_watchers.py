"""Watcher lifecycle and fan-out, driven by the in-memory strategy (no network)."""

from __future__ import annotations

import asyncio

import pytest

from mcpg_gateway import catalog
from mcpg_gateway.contract import config
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.fanout import running, watchers
from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base, memory
from mcpg_testing.clock import ManualClock
from mcpg_testing.outboxes import next_fire


def binding(uri: str) -> catalog.Binding:
    entry = config.ResourceConfig(
        name=uri, uri=uri, backend=config.HttpBackend(kind="http", url="http://u/"), watch=config.WatchConfig()
    )
    return catalog.Binding(uri, entry)


async def never_read(b: catalog.Binding) -> bytes:
    raise AssertionError("the memory strategy never reads")


@pytest.fixture
def hub() -> memory.MemoryHub:
    return memory.MemoryHub()


@pytest.fixture
def registry(hub: memory.MemoryHub) -> watchers.WatchRegistry:
    build = running.build_with(hub.factory, never_read, base.RealClock())
    return watchers.WatchRegistry(build, Metrics())


async def test_first_subscriber_starts_the_watcher_and_the_last_one_leaving_stops_it(
    registry: watchers.WatchRegistry, hub: memory.MemoryHub
) -> None:
    a, b = Subscriber("session"), Subscriber("listen")
    await registry.subscribe_all([binding("x://1")], a)
    await registry.subscribe_all([binding("x://1")], b)
    assert hub.started == ["x://1"]
    registry.unsubscribe("x://1", a)
    assert registry.get("x://1") is not None
    registry.unsubscribe("x://1", b)
    assert registry.get("x://1") is None
    await registry.close()
    assert hub.closed == ["x://1"]


async def test_dropping_a_subscriber_unsubscribes_it_from_everything(registry: watchers.WatchRegistry) -> None:
    sub = Subscriber("session")
    for uri in ("x://1", "x://2"):
        await registry.subscribe_all([binding(uri)], sub)
    registry.drop(sub)
    assert registry.watchers() == []
    assert sub.uris == set()


async def test_a_fire_offers_the_uri_to_every_subscriber_exactly_once(
    registry: watchers.WatchRegistry, hub: memory.MemoryHub
) -> None:
    subs = [Subscriber("session") for _ in range(3)]
    for sub in subs:
        await registry.subscribe_all([binding("x://1")], sub)
    assert await registry.fire("x://1", "poll") == 3
    assert await registry.fire("x://1", "poll") == 3  # still pending: coalesced, not queued twice
    for sub in subs:
        assert sub.outbox.pending == 1
        assert await next_fire(sub.outbox) == ("x://1", "poll")


async def test_a_subscriber_that_never_reads_does_not_delay_the_others(registry: watchers.WatchRegistry) -> None:
    stuck, live = Subscriber("session"), Subscriber("session")
    await registry.subscribe_all([binding("x://1")], stuck)
    await registry.subscribe_all([binding("x://2")], stuck)
    await registry.subscribe_all([binding("x://1")], live)
    for _ in range(1000):
        await registry.fire("x://1", "poll")
        await registry.fire("x://2", "poll")
    assert stuck.outbox.pending == 2  # bounded by the URIs it watches, not by the number of fires
    assert await next_fire(live.outbox) == ("x://1", "poll")


async def test_a_watch_that_cannot_start_refuses_every_waiting_subscriber_and_leaves_nothing_behind(
    registry: watchers.WatchRegistry, hub: memory.MemoryHub
) -> None:
    hub.refuse.add("x://bad")
    a, b = Subscriber("session"), Subscriber("listen")
    results = await asyncio.gather(
        registry.subscribe_all([binding("x://bad")], a),
        registry.subscribe_all([binding("x://bad")], b),
        return_exceptions=True,
    )
    assert all(isinstance(r, StrategyError) for r in results)
    assert registry.watchers() == []
    assert a.uris == b.uris == set()


async def test_strategy_fires_reach_subscribers_through_the_registry(
    registry: watchers.WatchRegistry, hub: memory.MemoryHub
) -> None:
    sub = Subscriber("listen")
    await registry.subscribe_all([binding("x://1")], sub)
    assert hub.trigger("x://1") == 1
    async with asyncio.timeout(5):
        assert await next_fire(sub.outbox) == ("x://1", "poll")


class Crashy:
    """Crashes on its first run, then fires on the second: the supervisor must restart it."""

    def __init__(self, clock: base.Clock) -> None:
        self.runs = 0

    async def start(self) -> None:
        return None

    async def run(self, fire: base.Fire) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("boom")
        await fire()
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None


async def test_a_crashing_strategy_is_restarted_and_counted() -> None:
    metrics = Metrics()
    released = asyncio.Event()

    class Clock(ManualClock):
        async def sleep(self, seconds: float) -> None:
            released.set()

    build = running.build_with(lambda spec, ctx: Crashy(ctx.clock), never_read, Clock())
    registry = watchers.WatchRegistry(build, metrics, Clock())
    sub = Subscriber("session")
    await registry.subscribe_all([binding("x://1")], sub)
    async with asyncio.timeout(5):
        assert await next_fire(sub.outbox) == ("x://1", "poll")
    assert released.is_set()
    assert metrics.strategy_restarts.labels("poll")._value.get() == 1
    await registry.close()


async def test_the_lifetime_schedule_stays_bounded_by_the_live_subscriptions(registry: watchers.WatchRegistry) -> None:
    # Every subscription schedules its end; ended ones leave stale entries, compacted before they pile up. A
    # thousand subscribers of one URI are a thousand live entries, each kept once (not compacted over and over).
    crowd = [Subscriber("session") for _ in range(1000)]
    await registry.subscribe_all([binding("x://shared")], crowd[0])
    schedule = registry._lifetimes._entries
    for sub in crowd[1:]:
        await registry.subscribe_all([binding("x://shared")], sub)
    assert registry._lifetimes._entries is schedule  # live entries only: nothing to compact, so never rebuilt
    assert len(schedule) == 1000
    churner = Subscriber("session")
    for _ in range(5000):
        await registry.subscribe_all([binding("x://churn")], churner)
        registry.unsubscribe("x://churn", churner)
    assert len(registry._lifetimes._entries) <= 2 * 1000 + 64 + 1
    for sub in crowd:
        registry.drop(sub)
    await registry.subscribe_all([binding("x://last")], churner)
    assert len(registry._lifetimes._entries) <= 64 + 2
    await registry.close()
