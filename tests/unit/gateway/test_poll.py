"""The poll strategy against a real HTTP upstream, with a clock the test advances (no sleeps)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_gateway.contract import check
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_gateway.subscribers import Subscriber
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.upstream import Upstream

URI = "drive://folder/reports"


def make_gateway(upstream: Upstream, clock: ManualClock, **backend: Any) -> Gateway:
    raw = gateway_config(
        resource("reports", URI, f"{upstream.url}/doc", {"type": "poll", "interval_ms": 500}, **backend)
    )
    return Gateway(check.load(raw, environ={}), Options(clock=clock))


async def subscribed(gw: Gateway) -> Subscriber:
    sub = Subscriber("session")
    binding = gw.readable(URI, Principal("tester"))
    assert binding is not None
    await gw.subscribe(binding, sub)
    return sub


async def test_the_first_read_is_the_baseline_taken_at_subscribe_time_and_never_notifies(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", '{"v": 1}')
    gw = make_gateway(upstream, clock)
    sub = await subscribed(gw)
    assert upstream.hits["/doc"] == 1  # read before the subscribe returned
    await clock.tick()
    assert upstream.hits["/doc"] == 2
    assert sub.outbox.pending == 0
    await gw.aclose()


async def test_an_identical_hash_sends_nothing_and_a_changed_one_notifies_once(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", '{"v": 1}')
    gw = make_gateway(upstream, clock)
    sub = await subscribed(gw)
    await clock.tick()
    assert sub.outbox.pending == 0
    upstream.set("/doc", '{"v": 2}')
    await clock.tick()
    assert await sub.outbox.get() == (URI, "poll")
    await clock.tick()
    assert sub.outbox.pending == 0
    assert gw.metrics.fired.labels("poll")._value.get() == 1
    await gw.aclose()


async def test_the_poll_interval_is_floored_at_ten_seconds(upstream: Upstream, clock: ManualClock) -> None:
    upstream.set("/doc", "{}")
    gw = make_gateway(upstream, clock)
    await subscribed(gw)
    await clock.sleepers()
    assert clock.requested == [10.0]
    await gw.aclose()


async def test_a_failed_fetch_is_skipped_without_moving_the_baseline_and_is_counted(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", '{"v": 1}')
    gw = make_gateway(upstream, clock)
    sub = await subscribed(gw)
    upstream.set("/doc", "boom", status=500)
    await clock.tick()
    assert sub.outbox.pending == 0
    assert gw.metrics.poll_failures.labels("poll")._value.get() == 1
    upstream.set("/doc", '{"v": 1}')  # back to what the baseline saw: still no change
    await clock.tick()
    assert sub.outbox.pending == 0
    watcher = gw.watcher(URI)
    assert watcher is not None
    assert watcher.stats.failures == 1
    assert watcher.stats.last_success is not None
    await gw.aclose()


async def test_accepting_404_turns_a_delete_into_a_change(upstream: Upstream, clock: ManualClock) -> None:
    upstream.set("/doc", '{"id": "f", "trashed": false}')
    gw = make_gateway(upstream, clock, expected_status_codes=[200, 404], require_json_response=True)
    sub = await subscribed(gw)
    del upstream.docs["/doc"]  # the upstream now answers 404 with an error document
    await clock.tick()
    assert await sub.outbox.get() == (URI, "poll")
    await gw.aclose()


async def test_a_404_outside_expected_codes_is_a_failed_read_not_an_event(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", "{}")
    gw = make_gateway(upstream, clock)
    sub = await subscribed(gw)
    del upstream.docs["/doc"]
    await clock.tick()
    assert sub.outbox.pending == 0
    assert gw.metrics.poll_failures.labels("poll")._value.get() == 1
    await gw.aclose()


async def test_a_uri_the_backend_refuses_is_refused_at_subscribe_time(upstream: Upstream, clock: ManualClock) -> None:
    gw = make_gateway(upstream, clock)  # no document: the upstream answers 404
    with pytest.raises(StrategyError, match="HTTP 404"):
        await subscribed(gw)
    assert gw.running_watches() == []
    await gw.aclose()
