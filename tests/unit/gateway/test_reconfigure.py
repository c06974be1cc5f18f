"""A new configuration applied in place: checked whole first, never applied twice, and followed through watcher by
watcher without touching a session or a stream.

Each gateway runs as `mcpg-gateway --config FILE` runs one; `RunningGateway.reconfigure` writes the file and hangs
the process up, then reads its acknowledgement as the operator does. Subscribers are real SDK clients of both eras
that stay connected across every change: whatever they are told afterwards arrives on the same session or stream.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from mcpg_gateway.contract import digests
from mcpg_testing.clients import ERAS
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource, watched
from mcpg_testing.gateways import (
    SENTINEL_TOKEN,
    SENTINEL_URI,
    GatewayFactory,
    RunningGateway,
    sentinel,
)
from mcpg_testing.upstream import Upstream
from mcpg_testing.watching import Watching, watching

HOOK = "drive://folder/reports"
POLLED = "drive://file/notes"
OTHER = "drive://file/other"


def config(upstream: Upstream, notes: str = "/notes", token: str = "tok-1", **gateway: Any) -> dict[str, Any]:
    """The test's configuration: a webhook watch, a polled one (whose backend path is `notes`), the sentinel."""
    raw = gateway_config(
        watched("reports", HOOK, {"type": "webhook", "token": token, **gateway.pop("hook", {})}),
        resource("notes", POLLED, f"{upstream.url}{notes}", {"type": "poll", "interval_ms": 10000}),
        sentinel(),
    )
    raw["gateway"].update(gateway)
    return raw


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    upstream.set("/notes", '{"v": 1}')
    return await gateway_factory(config(upstream), clock=clock)


async def nothing_else_pending(gw: RunningGateway, sub: Watching) -> None:
    """Fire the sentinel and prove that nothing was told before it (no sleep: an event after the fact)."""
    assert await gw.post_webhook(SENTINEL_TOKEN) == 200
    assert (await sub.next()).uri == SENTINEL_URI
    assert sub.notes.empty()


def offers(gw: RunningGateway, result: str) -> float:
    value = gw.gw.metrics.registry.get_sample_value("mcpg_config_offers_total", {"result": result})
    return value or 0.0


# --- checked whole, applied once -------------------------------------------------------------------------------


@ERAS
async def test_a_refused_configuration_leaves_the_one_served_in_place_and_is_acknowledged_with_its_problems(
    running: RunningGateway, upstream: Upstream, mode: str
) -> None:
    before = config(upstream)
    bad = config(upstream, token="tok-2")
    bad["mcp"]["capabilities"]["resources"][1]["name"] = "reports"  # two entries of one name
    async with watching(running.mcp_url, mode, [HOOK, SENTINEL_URI]) as sub:
        ack = await running.reconfigure(bad)
        assert ack.serving is not None
        assert ack.serving.digest == digests.document(before)
        assert ack.refused is not None
        assert ack.refused.digest == digests.document(bad)
        assert [p.path for p in ack.refused.problems] == ["mcp.capabilities.resources[1].name"]
        assert await running.post_webhook("tok-2") == 404  # nothing of it was applied
        assert await running.post_webhook("tok-1") == 200
        assert (await sub.next()).uri == HOOK  # on the same session or stream
        assert offers(running, "refused") == 1


async def test_a_configuration_whose_digest_is_served_is_not_applied_again(
    running: RunningGateway, upstream: Upstream
) -> None:
    first = await running.acknowledgement()
    assert first.serving is not None
    again = await running.reconfigure(config(upstream))
    assert again.serving == first.serving  # the same application, not a new one at the same digest
    assert (offers(running, "unchanged"), offers(running, "applied")) == (1, 0)


async def test_the_acknowledgement_names_digests_and_never_a_secret(
    running: RunningGateway, upstream: Upstream
) -> None:
    later = config(upstream, token="tok-secret-2")
    ack = await running.reconfigure(later)
    assert ack.serving is not None
    assert ack.serving.digest == digests.document(later)
    assert ack.serving.entries == sorted(digests.entries(later).values())
    assert (ack.serving.source, ack.refused, ack.restart_pending, ack.synced) == ("file", None, [], True)
    async with httpx2.AsyncClient() as http:
        text = (await http.get(f"{running.admin}/admin/v1/configuration")).text  # no admin token asked
    assert "tok-secret-2" not in text
    assert "tok-1" not in text


async def test_a_restart_only_field_is_acknowledged_as_pending_and_the_rest_applied(
    running: RunningGateway, upstream: Upstream
) -> None:
    later = config(upstream, token="tok-2", limits={"connections": 512})
    ack = await running.reconfigure(later)
    assert ack.serving is not None
    assert ack.serving.digest == digests.document(later)
    assert ack.restart_pending == ["gateway.limits.connections"]
    assert await running.post_webhook("tok-2") == 200


# --- watchers: kept, restarted, ended ----------------------------------------------------------------------------


@ERAS
async def test_an_unchanged_resource_keeps_its_watcher_and_its_baseline(
    running: RunningGateway, upstream: Upstream, mode: str
) -> None:
    async with watching(running.mcp_url, mode, [POLLED, SENTINEL_URI]) as sub:
        watcher = running.gw.fanout.watcher(POLLED)
        reads = upstream.hits["/notes"]
        later = config(upstream)
        later["mcp"]["capabilities"]["resources"].append(watched("other", OTHER, {"type": "webhook", "token": "o"}))
        await running.reconfigure(later)
        assert running.gw.fanout.watcher(POLLED) is watcher
        assert upstream.hits["/notes"] == reads  # no new baseline was read
        await nothing_else_pending(running, sub)


@ERAS
async def test_a_changed_backend_restarts_the_watcher_and_tells_once_that_the_content_is_another(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    upstream.set("/notes-v2", '{"v": 2}')
    async with watching(running.mcp_url, mode, [POLLED, SENTINEL_URI]) as sub:
        old = running.gw.fanout.watcher(POLLED)
        await running.reconfigure(config(upstream, notes="/notes-v2"))
        assert running.gw.fanout.watcher(POLLED) is not old
        assert (await sub.next()).uri == POLLED  # what a read returns now is the new source's
        await nothing_else_pending(running, sub)
        upstream.set("/notes-v2", '{"v": 3}')
        await clock.tick()
        assert (await sub.next()).uri == POLLED  # the new watcher tells the same session or stream


@ERAS
async def test_a_backend_moved_to_the_same_content_restarts_the_watcher_and_tells_nothing(
    running: RunningGateway, upstream: Upstream, mode: str
) -> None:
    upstream.set("/notes-copy", '{"v": 1}')
    async with watching(running.mcp_url, mode, [POLLED, SENTINEL_URI]) as sub:
        old = running.gw.fanout.watcher(POLLED)
        await running.reconfigure(config(upstream, notes="/notes-copy"))
        assert running.gw.fanout.watcher(POLLED) is not old
        await nothing_else_pending(running, sub)


@ERAS
async def test_a_restarted_watcher_whose_source_is_down_keeps_its_subscribers_until_it_answers(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    upstream.set("/moved", "{}", status=503)
    async with watching(running.mcp_url, mode, [POLLED, SENTINEL_URI]) as sub:
        await running.reconfigure(config(upstream, notes="/moved"))
        await clock.sleepers()  # the restart backs off: its source refused the baseline
        watcher = running.gw.fanout.watcher(POLLED)
        assert watcher is not None
        assert len(watcher.subscribers) == 1
        upstream.set("/moved", '{"v": 9}')
        await clock.release()  # the next attempt takes its baseline
        assert (await sub.next()).uri == POLLED  # another content than the old source's
        upstream.set("/moved", '{"v": 10}')
        await clock.tick()
        assert (await sub.next()).uri == POLLED


async def test_a_resource_left_out_ends_its_subscriptions_on_listen_with_resource_removed(
    running: RunningGateway, upstream: Upstream
) -> None:
    async with watching(running.mcp_url, "listen", [HOOK, POLLED]) as sub:
        later = config(upstream)
        del later["mcp"]["capabilities"]["resources"][0]
        await running.reconfigure(later)
        end = (await sub.ended())["dev.mcpg/watch-end"]
        assert (end["reason"], end["uris"]) == ("resource_removed", [HOOK])
    assert running.gw.fanout.watcher(HOOK) is None


@ERAS
async def test_a_rotated_webhook_token_routes_at_once_and_the_replaced_one_until_it_is_dropped(
    running: RunningGateway, upstream: Upstream, mode: str
) -> None:
    async with watching(running.mcp_url, mode, [HOOK, SENTINEL_URI]) as sub:
        watcher = running.gw.fanout.watcher(HOOK)
        await running.reconfigure(config(upstream, token="tok-2", hook={"previous_tokens": ["tok-1"]}))
        assert (await running.post_webhook("tok-2"), await running.post_webhook("tok-1")) == (200, 200)
        assert [(await sub.next()).uri, (await sub.next()).uri] == [HOOK, HOOK]
        await running.reconfigure(config(upstream, token="tok-2"))
        assert (await running.post_webhook("tok-1"), await running.post_webhook("tok-2")) == (404, 200)
        assert (await sub.next()).uri == HOOK
        assert running.gw.fanout.watcher(HOOK) is watcher  # tokens route to a watcher; they are not its source
        await nothing_else_pending(running, sub)


async def test_a_raised_watch_limit_lets_the_same_session_hold_more(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    upstream.set("/notes", "{}")
    running = await gateway_factory(config(upstream, limits={"watches_per_principal": 1}))
    async with watching(running.mcp_url, "legacy", [HOOK]) as sub:
        with pytest.raises(Exception, match="watch"):
            await sub.subscribe(SENTINEL_URI)
        await running.reconfigure(config(upstream, limits={"watches_per_principal": 2}))
        await sub.subscribe(SENTINEL_URI)
        await nothing_else_pending(running, sub)
