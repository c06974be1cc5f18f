"""A subscriber who comes back misses nothing: each notification carries its URI's state token (`dev.mcpg/state`),
and a client that hands back the last token it saw is told at once of each URI whose state moved meanwhile, and of
no other.

Real SDK clients of both eras against gateways on loopback; "not told" is proven by the sentinel's notification
arriving first on the same stream.
"""

from __future__ import annotations

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcpg_testing.clients import ERAS, connected
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource, watched
from mcpg_testing.gateways import SENTINEL_TOKEN, SENTINEL_URI, GatewayFactory, RunningGateway, sentinel
from mcpg_testing.upstream import Upstream
from mcpg_testing.watching import Watching, watching

HOOK, POLLED = "drive://folder/reports", "drive://file/notes"


def config(upstream: Upstream) -> dict[str, object]:
    return gateway_config(
        watched("reports", HOOK, {"type": "webhook", "token": "tok"}),
        resource("notes", POLLED, f"{upstream.url}/notes", {"type": "poll", "interval_ms": 10000}),
        sentinel(),
    )


@pytest.fixture
async def running(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    upstream.set("/notes", '{"v": 1}')
    return await gateway_factory(config(upstream), clock=clock)


async def told_first(gw: RunningGateway, sub: Watching) -> list[str]:
    """What the subscriber was told before the sentinel fired now (each URI in arrival order)."""
    assert await gw.post_webhook(SENTINEL_TOKEN) == 200
    told = []
    while (note := await sub.next()).uri != SENTINEL_URI:
        told.append(note.uri)
    return told


async def last_states(gw: RunningGateway, mode: str, clock: ManualClock, upstream: Upstream) -> dict[str, str]:
    """Subscribe, be told of each URI once, and leave: the last token seen of each."""
    async with watching(gw.mcp_url, mode, [HOOK, POLLED]) as sub:
        assert await gw.post_webhook("tok") == 200
        upstream.set("/notes", '{"v": 2}')
        await clock.tick()
        notes = {n.uri: n.state for n in [await sub.next(), await sub.next()]}
    assert set(notes) == {HOOK, POLLED}
    return notes


@ERAS
async def test_every_notification_carries_its_uri_s_state_and_a_new_fire_a_new_one(
    running: RunningGateway, mode: str
) -> None:
    async with watching(running.mcp_url, mode, [HOOK]) as sub:
        assert await running.post_webhook("tok") == 200
        first = (await sub.next()).state
        assert await running.post_webhook("tok") == 200
        assert first != (await sub.next()).state


@ERAS
async def test_coming_back_with_the_states_seen_is_told_only_of_what_moved_meanwhile(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    seen = await last_states(running, mode, clock, upstream)
    assert await running.post_webhook("tok") == 200  # while nobody listens
    async with watching(running.mcp_url, mode, [HOOK, POLLED, SENTINEL_URI], states=seen) as sub:
        assert await told_first(running, sub) == [HOOK]  # the content of the polled one is what was seen


@ERAS
async def test_a_content_changed_while_away_is_told_at_once_on_coming_back(
    running: RunningGateway, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    seen = await last_states(running, mode, clock, upstream)
    upstream.set("/notes", '{"v": 3}')  # no watcher reads it while nobody subscribes
    async with watching(running.mcp_url, mode, [HOOK, POLLED, SENTINEL_URI], states=seen) as sub:
        assert await told_first(running, sub) == [POLLED]


@ERAS
async def test_a_state_token_the_gateway_never_gave_is_a_state_that_moved(running: RunningGateway, mode: str) -> None:
    async with watching(running.mcp_url, mode, [HOOK, SENTINEL_URI], states={HOOK: "f:elsewhere.1"}) as sub:
        assert await told_first(running, sub) == [HOOK]


async def test_another_gateway_with_the_same_content_gives_the_same_content_token(
    running: RunningGateway, gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock
) -> None:
    seen = await last_states(running, "listen", clock, upstream)
    other = await gateway_factory(config(upstream), clock=clock)
    async with watching(other.mcp_url, "listen", [POLLED, SENTINEL_URI], states={POLLED: seen[POLLED]}) as sub:
        assert await told_first(other, sub) == []


async def test_a_listen_handing_back_a_state_for_a_uri_it_does_not_name_is_refused_naming_the_field(
    running: RunningGateway,
) -> None:
    params = types.SubscriptionsListenRequestParams(
        notifications=types.SubscriptionFilter(resource_subscriptions=[HOOK]),
        _meta={"dev.mcpg/states": {"drive://other": "x"}},
    )
    async with connected(running.mcp_url, "listen", {}) as client:
        with pytest.raises(MCPError, match=r'_meta\["dev.mcpg/states"\] names .*drive://other.*'):
            await client.session.send_request(
                types.SubscriptionsListenRequest(params=params), types.SubscriptionsListenResult
            )


async def test_a_subscribe_handing_back_a_token_that_is_no_string_is_refused_naming_the_field(
    running: RunningGateway,
) -> None:
    async with watching(running.mcp_url, "legacy", []) as sub:
        with pytest.raises(MCPError, match=r'_meta\["dev.mcpg/state"\]'):
            await sub.subscribe(HOOK, state="x" * 65)
