"""The subscription lifecycle over real HTTP with the SDK's clients in both eras, on a clock the test drives.

The lease (an idle session's pull watch slows, any request restores it, an open listen renews itself), the
lifetime, the endings a listen is answered with (`dev.mcpg/watch-end`), and the watch state every notification
carries (`dev.mcpg/watch`). Nothing sleeps: `clock.advance` moves the lease's time, `clock.tick` lets a poll run.
"""

from __future__ import annotations

import datetime

import httpx2
import pytest

from mcpg_gateway.fanout import endings
from mcpg_testing.clients import ERAS
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream
from mcpg_testing.watching import until, watching

POLLED, OTHER, HOOK = "drive://file/notes", "drive://file/other", "drive://folder/reports"
IDLE_S, SLOW_S, LIFETIME_S, BASE_S = 1800, 600, 86_400, 10


def config(upstream: Upstream, **subscriptions: float) -> dict[str, object]:
    raw = gateway_config(
        resource("notes", POLLED, f"{upstream.url}/notes", {"type": "poll", "interval_ms": BASE_S * 1000}),
        resource("other", OTHER, f"{upstream.url}/other", {"type": "poll", "interval_ms": BASE_S * 1000}),
        watched("reports", HOOK, {"type": "webhook", "token": "tok"}),
    )
    raw["gateway"]["subscriptions"] = subscriptions
    return raw


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    upstream.set("/notes", '{"v": 1}')
    upstream.set("/other", '{"v": 1}')
    return await gateway_factory(config(upstream), clock=clock)


def cadence(running: RunningGateway, uri: str = POLLED) -> float | None:
    watcher = running.gw.fanout.watcher(uri)
    assert watcher is not None
    return running.gw.fanout.cadence_s(watcher)


async def change(upstream: Upstream, clock: ManualClock, body: str, path: str = "/notes") -> None:
    upstream.set(path, body)
    await clock.release()


async def post_hook(running: RunningGateway) -> None:
    async with httpx2.AsyncClient() as http:
        assert (await http.post(f"{running.base}/webhooks/resource-updated/tok")).status_code == 200


def seconds_until(stamp: str) -> float:
    when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return (when - datetime.datetime.now(datetime.UTC)).total_seconds()


# --- the lease -----------------------------------------------------------------------------------------------


async def test_an_idle_session_slows_its_pull_watch_and_the_notification_says_so(
    running: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "legacy", [POLLED]) as sub:
        await clock.tick()
        assert clock.requested[-1] == BASE_S
        clock.advance(IDLE_S)  # no request on the session for idle_after_s
        await clock.tick()  # the poll after the lease ran out waits the slow interval
        assert clock.requested[-1] == SLOW_S
        assert cadence(running) == SLOW_S
        await change(upstream, clock, '{"v": 2}')
        note = await sub.next()
    assert note.uri == POLLED
    assert note.watch["state"] == "slow"
    assert note.watch["pollIntervalMs"] == SLOW_S * 1000
    assert note.watch["renewedByActivity"] is True
    assert seconds_until(note.watch["renewBy"]) <= 1  # when it ran out: now (the clock moved exactly that much)


async def test_any_request_on_the_session_restores_full_speed_at_once_and_a_ping_does_not(
    running: RunningGateway, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "legacy", [POLLED]) as sub:
        clock.advance(IDLE_S)
        await clock.tick()
        assert clock.requested[-1] == SLOW_S
        await sub.ping()
        assert cadence(running) == SLOW_S
        await sub.renew()
        assert cadence(running) == BASE_S
        # The slow wait already begun is cut short: the poller sleeps the full-speed interval again.
        await clock.sleepers()
        assert clock.requested[-1] == BASE_S


async def test_an_active_session_notification_carries_the_full_speed_state_and_when_the_lease_runs_out(
    running: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "legacy", [POLLED]) as sub:
        await change(upstream, clock, '{"v": 2}')
        note = await sub.next()
    assert note.watch["state"] == "active"
    assert note.watch["pollIntervalMs"] == BASE_S * 1000
    assert IDLE_S - 5 <= seconds_until(note.watch["renewBy"]) <= IDLE_S + 1


async def test_an_open_listen_renews_its_own_watches(
    running: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "listen", [POLLED]) as sub:
        clock.advance(IDLE_S * 3)
        await clock.tick()
        assert clock.requested[-1] == BASE_S
        await change(upstream, clock, '{"v": 2}')
        note = await sub.next()
    assert note.watch["state"] == "active"
    assert note.watch["pollIntervalMs"] == BASE_S * 1000


async def test_a_shared_watcher_polls_at_the_fastest_cadence_any_subscriber_is_entitled_to(
    running: RunningGateway, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "legacy", [POLLED]) as idle:
        clock.advance(IDLE_S)
        async with watching(running.mcp_url, "legacy", [POLLED]) as busy:
            await clock.tick()
            assert clock.requested[-1] == BASE_S  # `busy` subscribed just now: its lease holds
            clock.advance(IDLE_S)
            await clock.tick()
            assert clock.requested[-1] == SLOW_S  # both idle
            await idle.renew()
            assert cadence(running) == BASE_S
            assert busy.mode == "legacy"


async def test_a_push_watch_notification_carries_its_state_without_a_poll_interval(running: RunningGateway) -> None:
    for mode in ("legacy", "listen"):
        async with watching(running.mcp_url, mode, [HOOK]) as sub:
            await post_hook(running)
            note = await sub.next()
        assert note.watch["state"] == "active"
        assert "pollIntervalMs" not in note.watch


# --- lifetime and endings ------------------------------------------------------------------------------------


async def test_a_listen_is_answered_lifetime_reached_after_its_lifetime_renewals_included(
    running: RunningGateway, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "listen", [HOOK]) as sub:
        await clock.waiting_until()
        clock.advance(LIFETIME_S - 1)
        await post_hook(running)
        assert (await sub.next()).uri == HOOK  # still watching a second before the end
        clock.advance(1)
        meta = await sub.ended()
    assert meta[endings.WATCH_END_META_KEY] == {
        "reason": "lifetime_reached",
        "detail": endings.ADVICE["lifetime_reached"],
        "uris": [HOOK],
    }
    assert running.gw.fanout.running_watches() == []


async def test_a_legacy_subscription_ends_silently_at_its_lifetime(running: RunningGateway, clock: ManualClock) -> None:
    async with watching(running.mcp_url, "legacy", [HOOK]) as sub:
        await clock.waiting_until()
        await sub.renew()  # renewals do not extend the lifetime
        clock.advance(LIFETIME_S)
        await until(lambda: not running.gw.fanout.running_watches())
        async with watching(running.mcp_url, "legacy", [OTHER]) as witness:
            await post_hook(running)  # nobody holds HOOK any more; the session itself is still usable
            await sub.renew()
            assert witness.notes.empty()
            assert sub.notes.empty()


async def test_a_watch_whose_upstream_answers_404_ends_with_resource_gone_and_the_status(
    running: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "listen", [POLLED]) as sub:
        upstream.set("/notes", '{"error": "gone"}', status=404)
        await clock.release()
        meta = await sub.ended()
    assert meta[endings.WATCH_END_META_KEY] == {
        "reason": "resource_gone",
        "detail": endings.ADVICE["resource_gone"],
        "uris": [POLLED],
        "status": 404,
    }
    assert running.gw.fanout.running_watches() == []


async def test_a_status_the_resource_expects_stays_a_change_and_ends_nothing(
    gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/notes", '{"v": 1}')
    raw = gateway_config(
        resource("notes", POLLED, f"{upstream.url}/notes", {"type": "poll"}, expected_status_codes=[200, 404])
    )
    gw = await gateway_factory(raw, clock=clock)
    async with watching(gw.mcp_url, "listen", [POLLED]) as sub:
        upstream.set("/notes", '{"error": "gone"}', status=404)
        await clock.release()
        assert (await sub.next()).uri == POLLED
        assert sub.open


async def test_a_listen_is_answered_as_soon_as_the_gateway_ends_any_uri_it_carries_naming_that_uri(
    running: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "listen", [POLLED, HOOK]) as sub:
        await clock.waiting_until()
        upstream.set("/notes", "{}", status=403)
        await clock.release()
        meta = await sub.ended()  # not left open for HOOK while POLLED went unheard
    assert meta[endings.WATCH_END_META_KEY]["reason"] == "resource_gone"
    assert meta[endings.WATCH_END_META_KEY]["uris"] == [POLLED]  # HOOK ended only with the stream: listen again
    await until(lambda: running.gw.fanout.running_watches() == [])


async def test_a_listen_that_also_asks_for_list_changes_is_answered_when_the_gateway_ends_its_uris(
    running: RunningGateway, clock: ManualClock
) -> None:
    async with watching(running.mcp_url, "listen", [HOOK, OTHER], list_changed=True) as sub:
        await clock.waiting_until()
        clock.advance(LIFETIME_S)
        meta = await sub.ended()
    assert meta[endings.WATCH_END_META_KEY]["reason"] == "lifetime_reached"
    assert sorted(meta[endings.WATCH_END_META_KEY]["uris"]) == sorted([HOOK, OTHER])  # ended in one turn, told once


@ERAS
async def test_every_notification_carries_the_watch_state_in_both_eras(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    async with watching(running.mcp_url, mode, [POLLED]) as sub:
        await change(upstream, clock, '{"v": 2}')
        note = await sub.next()
    assert set(note.watch) == {"state", "renewBy", "pollIntervalMs", "renewedByActivity"}


async def test_one_request_restores_every_watch_the_session_holds(running: RunningGateway, clock: ManualClock) -> None:
    async with watching(running.mcp_url, "legacy", [POLLED, OTHER]) as sub:
        clock.advance(IDLE_S)
        assert cadence(running, POLLED) == cadence(running, OTHER) == SLOW_S
        await sub.renew()
        assert cadence(running, POLLED) == cadence(running, OTHER) == BASE_S
