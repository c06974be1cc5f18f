"""The poll strategy against a real HTTP upstream, with a clock the test advances (no sleeps)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpg_gateway.contract import check
from mcpg_gateway.errors import ReadError, StrategyError
from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.gateway import Gateway, Options
from mcpg_gateway.identity import Principal
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.outboxes import next_fire
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
    await gw.fanout.subscribe([binding], sub)
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
    assert await next_fire(sub.outbox) == (URI, "poll")
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
    watcher = gw.fanout.watcher(URI)
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
    assert await next_fire(sub.outbox) == (URI, "poll")
    await gw.aclose()


async def test_a_5xx_outside_expected_codes_is_a_failed_read_not_an_event(
    upstream: Upstream, clock: ManualClock
) -> None:
    # (A 401, 403 or 404 ends the watch instead: `resource_gone`, in test_lease.py.)
    upstream.set("/doc", "{}")
    gw = make_gateway(upstream, clock)
    sub = await subscribed(gw)
    upstream.set("/doc", "{}", status=502)
    await clock.tick()
    assert sub.outbox.pending == 0
    assert sub.uris == {URI}
    assert gw.metrics.poll_failures.labels("poll")._value.get() == 1
    await gw.aclose()


async def test_a_uri_the_backend_refuses_is_refused_at_subscribe_time(upstream: Upstream, clock: ManualClock) -> None:
    gw = make_gateway(upstream, clock)  # no document: the upstream answers 404
    with pytest.raises(StrategyError, match="HTTP 404"):
        await subscribed(gw)
    assert gw.fanout.running_watches() == []
    await gw.aclose()


# --- watch.strategy.ignore: fields the upstream recomputes on every read --------------------------------------

DURATIONS = ["/jobs/*/duration", "/jobs/*/queued_duration"]


def pipeline(status: str, duration: float) -> str:
    jobs = [{"id": 1, "status": "success", "duration": 12.5, "queued_duration": 0.4}]
    jobs.append({"id": 2, "status": status, "duration": duration, "queued_duration": duration / 10})
    return json.dumps({"id": 7, "jobs": jobs})


def ignoring_gateway(upstream: Upstream, clock: ManualClock, ignore: list[str]) -> Gateway:
    strategy = {"type": "poll", "interval_ms": 500, "ignore": ignore}
    raw = gateway_config(resource("ci", URI, f"{upstream.url}/doc", strategy))
    return Gateway(check.load(raw, environ={}), Options(clock=clock))


async def test_ignored_durations_moving_never_notify_and_a_status_moving_does(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", pipeline("running", 1.0))
    gw = ignoring_gateway(upstream, clock, DURATIONS)
    sub = await subscribed(gw)
    for seconds in (2.0, 3.5, 5.25):  # the upstream recomputes them on every read while the job runs
        upstream.set("/doc", pipeline("running", seconds))
        await clock.tick()
    assert upstream.hits["/doc"] == 4  # every poll read the body; none of them was a change
    assert sub.outbox.pending == 0
    upstream.set("/doc", pipeline("success", 6.0))
    await clock.tick()
    assert await next_fire(sub.outbox) == (URI, "poll")
    await gw.aclose()


async def test_a_read_still_returns_the_ignored_fields(upstream: Upstream, clock: ManualClock) -> None:
    upstream.set("/doc", pipeline("running", 3.5))
    gw = ignoring_gateway(upstream, clock, DURATIONS)
    await subscribed(gw)
    binding = gw.readable(URI, Principal("tester"))
    assert binding is not None
    content = await gw.reader.read(binding)
    assert json.loads(content.body)["jobs"][1] == {
        "id": 2,
        "status": "running",
        "duration": 3.5,
        "queued_duration": 0.35,
    }
    await gw.aclose()


async def test_with_ignore_only_the_json_counts_not_its_layout(upstream: Upstream, clock: ManualClock) -> None:
    upstream.set("/doc", '{"a": 1, "b": 2}')
    gw = ignoring_gateway(upstream, clock, ["/t"])
    sub = await subscribed(gw)
    upstream.set("/doc", '{\n  "b": 2,\n  "a": 1\n}')
    await clock.tick()
    assert sub.outbox.pending == 0
    await gw.aclose()


async def test_without_ignore_the_raw_bytes_count_as_before(upstream: Upstream, clock: ManualClock) -> None:
    upstream.set("/doc", '{"a": 1, "b": 2}')
    gw = make_gateway(upstream, clock)
    sub = await subscribed(gw)
    upstream.set("/doc", '{\n  "b": 2,\n  "a": 1\n}')
    await clock.tick()
    assert await next_fire(sub.outbox) == (URI, "poll")
    await gw.aclose()


async def test_a_body_that_is_not_json_refuses_the_subscription_saying_why(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", "<html>a job list</html>", content_type="text/html")
    gw = ignoring_gateway(upstream, clock, DURATIONS)
    with pytest.raises(StrategyError) as refused:
        await subscribed(gw)
    message = str(refused.value)
    assert f"{URI}: the body is not JSON: watch.strategy.ignore needs a JSON body" in message
    assert isinstance(refused.value.read, ReadError)
    assert gw.fanout.running_watches() == []
    await gw.aclose()


async def test_a_body_turning_non_json_later_is_a_skipped_and_counted_poll(
    upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/doc", pipeline("running", 1.0))
    gw = ignoring_gateway(upstream, clock, DURATIONS)
    sub = await subscribed(gw)
    upstream.set("/doc", "<html>maintenance</html>", content_type="text/html")
    await clock.tick()
    assert sub.outbox.pending == 0
    assert gw.metrics.poll_failures.labels("poll")._value.get() == 1
    upstream.set("/doc", pipeline("running", 2.0))  # the baseline did not move: still no change
    await clock.tick()
    assert sub.outbox.pending == 0
    await gw.aclose()


def test_a_bad_ignore_pointer_is_a_configuration_error_naming_the_field() -> None:
    strategy = {"type": "poll", "ignore": ["/jobs/*/duration", "/jobs/~2", "jobs", ""]}
    with pytest.raises(check.ConfigError) as refused:
        check.load(gateway_config(resource("ci", URI, "http://u/doc", strategy)), environ={})
    field = "mcp.capabilities.resources[0].watch.strategy.ignore"
    assert {(p.path, p.message.split(":")[0]) for p in refused.value.problems} == {
        (f"{field}[1]", "'/jobs/~2'"),
        (f"{field}[2]", "'jobs' is not a JSON Pointer"),
        (f"{field}[3]", "the empty pointer is the whole document"),
    }
    assert f"{field}[1]: '/jobs/~2': '~2' is not an escape" in str(refused.value)
