"""`gateway.limits` over real HTTP with the SDK's clients: what one principal may hold, what all may hold, and the
hostile cases a probe found (one principal taking every session; one listen naming 10,000 URIs), which now leave
every other principal served.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx2
import pytest

from mcpg_gateway import errors
from mcpg_testing import BOUND_S
from mcpg_testing.clients import ERAS, refusal
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import bearer, gateway_config, principal, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream
from mcpg_testing.watching import until, watching

ALICE, BOB = bearer("alice-token"), bearer("bob-token")
AUTH = {"principals": [principal("alice-token", "alice"), principal("bob-token", "bob")]}
IDLE_S = 1800


def hook(n: int) -> str:
    return f"drive://hook/{n}"


def doc(n: int | str) -> str:
    return f"drive://doc/{n}"


def config(upstream: Upstream, **limits: int) -> dict[str, Any]:
    raw = gateway_config(
        *(watched(f"hook{n}", hook(n), {"type": "webhook", "token": f"tok{n}"}) for n in range(6)),
        templates=[
            {
                "name": "doc",
                "uri_template": "drive://doc/{id}",
                "backend": {"kind": "http", "url": f"{upstream.url}/docs/{{id}}"},
                "watch": {"strategy": {"type": "poll"}},
            }
        ],
        auth=AUTH,
    )
    raw["gateway"]["limits"] = limits
    return raw


async def fire(gw: RunningGateway, n: int) -> None:
    async with httpx2.AsyncClient() as http:
        assert (await http.post(f"{gw.base}/webhooks/resource-updated/tok{n}")).status_code == 200


# --- watches per principal ------------------------------------------------------------------------------------


async def test_at_its_limit_a_principal_s_longest_slowed_watch_makes_room(
    gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock
) -> None:
    gw = await gateway_factory(config(upstream, watches_per_principal=2), clock=clock)
    async with watching(gw.mcp_url, "legacy", [hook(0)], ALICE) as oldest:
        clock.advance(1)
        async with watching(gw.mcp_url, "legacy", [hook(1)], ALICE) as older:
            clock.advance(IDLE_S)  # both idle now; hook(0)'s session went idle first
            async with watching(gw.mcp_url, "legacy", [hook(2)], ALICE):
                assert sorted(w.uri for w in gw.gw.running_watches()) == [hook(1), hook(2)]
                assert (
                    gw.gw.metrics.registry.get_sample_value("mcpg_watch_ends_total", {"reason": "watcher_evicted"}) == 1
                )
                await fire(gw, 1)
                assert (await older.next()).uri == hook(1)
                assert oldest.notes.empty()


@ERAS
async def test_at_its_limit_with_nothing_slowed_a_principal_is_refused_with_its_count_and_limit(
    gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock, mode: str
) -> None:
    gw = await gateway_factory(config(upstream, watches_per_principal=2), clock=clock)
    async with watching(gw.mcp_url, "legacy", [hook(0), hook(1)], ALICE):
        e = await refusal(gw.mcp_url, mode, [hook(2)], ALICE)
        assert e.code == errors.TOO_MANY_REQUESTS == -42900
        assert e.message == (
            "principal 'alice' holds 2 watches (limit 2) and none is slowed to make room; unsubscribe from one "
            "and retry"
        )
        async with watching(gw.mcp_url, mode, [hook(0), hook(2)], BOB):  # another principal is unaffected
            pass
        async with watching(gw.mcp_url, mode, [hook(0), hook(1)], ALICE):  # what it holds already costs nothing
            pass


async def test_a_listen_naming_more_uris_than_a_principal_may_hold_is_refused_whole_before_any_read(
    gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock
) -> None:
    # The probe: one 149 KB listen naming 10,000 URIs made 10,000 upstream reads, then 833 a second.
    gw = await gateway_factory(config(upstream), clock=clock)
    e = await refusal(gw.mcp_url, "listen", [doc(n) for n in range(10_000)], ALICE)
    assert e.code == errors.TOO_MANY_REQUESTS
    assert e.message == "this request names 10000 URIs, and principal 'alice' may hold at most 10 watches; name fewer"
    assert upstream.hits == {}
    assert gw.gw.running_watches() == []
    upstream.set("/docs/1", "{}")
    async with watching(gw.mcp_url, "listen", [doc(1)], BOB):
        assert upstream.hits == {"/docs/1": 1}


# --- the server-wide ceiling ----------------------------------------------------------------------------------


@ERAS
async def test_the_server_wide_ceiling_refuses_before_any_eviction_and_says_so(
    gateway_factory: GatewayFactory,
    upstream: Upstream,
    clock: ManualClock,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw = await gateway_factory(config(upstream, watches_per_principal=2, watches_total=3), clock=clock)
    async with (
        watching(gw.mcp_url, "legacy", [hook(0), hook(1)], ALICE) as alice,
        watching(gw.mcp_url, "legacy", [hook(0)], BOB),
    ):
        clock.advance(IDLE_S)  # alice's watches are slowed: evictable, were it not for the ceiling
        with caplog.at_level(logging.WARNING, logger="mcpg_gateway.limits"):
            e = await refusal(gw.mcp_url, mode, [hook(2)], ALICE)
        assert e.code == errors.UNAVAILABLE == -50300
        assert e.message == "the server-wide watch ceiling (3) is reached; retry later"
        assert [r.getMessage() for r in caplog.records] == [
            "refused a subscription: the server-wide watch ceiling (3) is reached"
        ]
        await fire(gw, 0)  # the refusal cost alice nothing she held
        assert (await alice.next()).uri == hook(0)


# --- listen streams -------------------------------------------------------------------------------------------


async def test_a_principal_at_its_listen_stream_limit_is_told_to_close_one_and_others_still_listen(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    gw = await gateway_factory(config(upstream, listen_streams_per_principal=2, listen_streams_total=3))
    async with watching(gw.mcp_url, "listen", [hook(0)], ALICE), watching(gw.mcp_url, "listen", [hook(1)], ALICE):
        e = await refusal(gw.mcp_url, "listen", [hook(2)], ALICE)
        assert e.code == errors.TOO_MANY_REQUESTS
        assert e.message == "principal 'alice' has 2 listen streams open (limit 2); close one and retry"
        async with watching(gw.mcp_url, "listen", [hook(2)], BOB) as bob:
            e = await refusal(gw.mcp_url, "listen", [hook(3)], BOB)
            assert e.code == errors.UNAVAILABLE
            assert e.message == "the server-wide ceiling on listen streams (3) is reached; retry later"
            await fire(gw, 2)
            assert (await bob.next()).uri == hook(2)
    await until(lambda: gw.gw.subscribers.listening == 0)
    async with watching(gw.mcp_url, "listen", [hook(2)], ALICE):  # closed streams gave their slots back
        pass


# --- sessions -------------------------------------------------------------------------------------------------


async def open_session(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"accept": "application/json, text/event-stream", **headers}
    return await http.post(url, json=body, headers=accept)


async def test_one_principal_cannot_take_every_session_and_others_are_still_served(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    # The probe: one principal opened 9,999 sessions; every other principal got 503 for 30 minutes.
    gw = await gateway_factory(config(upstream, sessions_per_principal=5, sessions_total=8))
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        answers = await asyncio.gather(*(open_session(http, gw.mcp_url, ALICE) for _ in range(20)))
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200] * 5 + [429] * 15
        refused = next(r for r in answers if r.status_code == 429).json()
        assert refused["error"] == {
            "code": -42900,
            "message": "principal 'alice' holds 5 open sessions (limit 5); end one (DELETE it) or let it expire, "
            "and retry",
        }
    async with watching(gw.mcp_url, "legacy", [hook(0)], BOB) as bob:
        await fire(gw, 0)
        assert (await bob.next()).uri == hook(0)


async def test_a_principal_at_its_session_limit_still_makes_2026_requests_which_open_no_session(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    gw = await gateway_factory(config(upstream, sessions_per_principal=1))
    async with watching(gw.mcp_url, "legacy", [hook(0)], ALICE):
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            assert (await open_session(http, gw.mcp_url, ALICE)).status_code == 429  # the limit holds
        async with (
            watching(gw.mcp_url, "listen", [hook(1)], ALICE) as modern,
            watching(gw.mcp_url, "listen", [hook(2)], ALICE),
        ):
            await fire(gw, 1)
            assert (await modern.next()).uri == hook(1)


# --- codes of the first read ----------------------------------------------------------------------------------


@ERAS
@pytest.mark.parametrize(
    ("status", "code"),
    [(404, errors.INVALID_PARAMS), (403, errors.INVALID_PARAMS), (429, errors.TOO_MANY_REQUESTS), (503, -32603)],
)
async def test_the_first_read_s_failure_gives_the_code_that_says_whether_to_retry(
    gateway_factory: GatewayFactory, upstream: Upstream, mode: str, status: int, code: int
) -> None:
    upstream.set("/docs/x", "{}", status=status)
    gw = await gateway_factory(config(upstream))
    e = await refusal(gw.mcp_url, mode, [doc("x")], ALICE)
    assert e.code == code
    assert f"upstream answered HTTP {status}" in e.message
    assert gw.gw.running_watches() == []


@ERAS
async def test_a_gateway_that_is_stopping_refuses_new_subscriptions_with_unavailable(
    gateway_factory: GatewayFactory, upstream: Upstream, mode: str
) -> None:
    gw = await gateway_factory(config(upstream))
    gw.gw.subscribers.closing.set()  # what the first step of a graceful stop sets
    e = await refusal(gw.mcp_url, mode, [hook(0)], ALICE)
    assert e.code == errors.UNAVAILABLE
    assert "shutting down" in e.message
