"""`gateway.limits` over real HTTP with the SDK's clients: what one principal may hold, what all may hold, and the
hostile cases probes found (one principal taking every session, also by a repeated protocol-version header; one
listen naming 10,000 URIs, or 150,000 that held the loop for seconds), which now leave every other principal served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY

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
                assert sorted(w.uri for w in gw.gw.fanout.running_watches()) == [hook(1), hook(2)]
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


@pytest.mark.parametrize(
    ("named", "code", "message"),
    [
        (1_000, errors.TOO_MANY_REQUESTS, "this request names 1000 URIs, and principal 'alice' may hold at most 10"),
        # 149 KB: more than 10 URIs of the longest need (`mcp_requests.listen_body_limit`), refused by its size
        (10_000, -32600, "a subscriptions/listen body is more than 61856 bytes, the gateway's bound for one"),
    ],
)
async def test_a_listen_naming_more_uris_than_a_principal_may_hold_is_refused_whole_before_any_read(
    gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock, named: int, code: int, message: str
) -> None:
    # The probe: one 149 KB listen naming 10,000 URIs made 10,000 upstream reads, then 833 a second.
    gw = await gateway_factory(config(upstream), clock=clock)
    e = await refusal(gw.mcp_url, "listen", [doc(n) for n in range(named)], ALICE)
    assert e.code == code
    assert e.message.startswith(message)
    assert upstream.hits == {}
    assert gw.gw.fanout.running_watches() == []
    upstream.set("/docs/1", "{}")
    async with watching(gw.mcp_url, "listen", [doc(1)], BOB):
        assert upstream.hits == {"/docs/1": 1}


def counting_checks(
    monkeypatch: pytest.MonkeyPatch, gw: RunningGateway, also: Callable[[], None] = lambda: None
) -> list[str]:
    """Every URI the gateway resolves against its catalog and read policy from now on (the per-URI work)."""
    looked_at: list[str] = []
    readable = gw.gw.readable

    def counted(uri: str, principal: Any) -> Any:
        looked_at.append(uri)
        also()
        return readable(uri, principal)

    monkeypatch.setattr(gw.gw, "readable", counted)
    return looked_at


@pytest.mark.parametrize("named", [[doc(n) for n in range(11)], [doc(1)] * 11], ids=["distinct", "repeated"])
async def test_a_listen_naming_more_uris_than_a_principal_may_hold_is_refused_before_any_uri_is_looked_at(
    gateway_factory: GatewayFactory, upstream: Upstream, monkeypatch: pytest.MonkeyPatch, named: list[str]
) -> None:
    # The probe: 150,000 URIs were each resolved and checked against policy (7.9 s) before the count refused them.
    gw = await gateway_factory(config(upstream))
    looked_at = counting_checks(monkeypatch, gw)
    e = await refusal(gw.mcp_url, "listen", named, ALICE)
    assert (e.code, e.message) == (
        errors.TOO_MANY_REQUESTS,
        "this request names 11 URIs, and principal 'alice' may hold at most 10 watches; name fewer",
    )
    assert looked_at == []


async def test_a_listen_naming_many_uris_lets_the_loop_run_between_its_checks(
    gateway_factory: GatewayFactory, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = await gateway_factory(config(upstream, watches_per_principal=200, watches_total=200))
    turns = 0  # how many times the loop ran another task: counted by one that only counts
    turns_at_each_check: list[int] = []
    counting_checks(monkeypatch, gw, also=lambda: turns_at_each_check.append(turns))

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    try:
        e = await refusal(gw.mcp_url, "listen", [*(doc(n) for n in range(199)), "drive://nowhere/1"], ALICE)
    finally:
        counter.cancel()
    assert e.message == "unknown resource: drive://nowhere/1"  # all 200 were checked
    assert len(turns_at_each_check) == 200
    longest_run = max(turns_at_each_check.count(t) for t in set(turns_at_each_check))
    assert longest_run <= 32  # mcp_handlers.CHECKS_PER_YIELD: about a millisecond of checks


def healthz_answered_within_a_second(gw: RunningGateway, done: threading.Event) -> int:
    """From a thread of its own (the gateway's loop may be the one held): GET /healthz until `done`, each answer
    within 1 s (what the issue demands of a healthy client during an attack); how many were answered."""
    answered = 0
    with httpx2.Client(timeout=1.0) as http:
        while not done.is_set() or answered == 0:
            assert http.get(f"{gw.base}/healthz").status_code == 200
            answered += 1
    return answered


async def test_healthz_is_answered_within_a_second_while_a_listen_of_150_000_uris_is_refused(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    # The probe: this listen (2.4 MB) was read, and each URI checked, for 7.9 s; /healthz stalled as long.
    gw = await gateway_factory(config(upstream))
    done = threading.Event()
    probe = asyncio.create_task(asyncio.to_thread(healthz_answered_within_a_second, gw, done))
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {
            "_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}},
            "notifications": {"resourceSubscriptions": [doc(n) for n in range(150_000)]},
        },
    }
    headers = {**ALICE, "accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28"}
    try:
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            resp = await http.post(gw.mcp_url, json=body, headers={**headers, "mcp-method": "subscriptions/listen"})
    finally:
        done.set()
    async with asyncio.timeout(BOUND_S):
        assert await probe >= 1
    assert resp.status_code == 413


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
        with caplog.at_level(logging.WARNING, logger="mcpg_gateway.fanout.limits"):
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
    await until(lambda: gw.gw.fanout.listening == 0)
    async with watching(gw.mcp_url, "listen", [hook(2)], ALICE):  # closed streams gave their slots back
        pass


# --- sessions -------------------------------------------------------------------------------------------------


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


async def open_session(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> httpx2.Response:
    accept = {"accept": "application/json, text/event-stream", **headers}
    return await http.post(url, json=INITIALIZE, headers=accept)


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


async def test_a_principal_opening_sessions_one_after_another_gets_exactly_its_share(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    # Each opening request was counted until the SDK's app returned, a while after the client had its answer:
    # the next one, sent at once, was refused one short of the share.
    gw = await gateway_factory(config(upstream, sessions_per_principal=8, sessions_total=16))
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        statuses = [(await open_session(http, gw.mcp_url, ALICE)).status_code for _ in range(9)]
    assert statuses == [200] * 8 + [429]


async def test_a_principal_opening_sessions_in_concurrent_waves_gets_exactly_its_share(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    # On a real pod, waves of 32 concurrent openings were refused four short of the share: a session the SDK
    # had recorded but not yet answered was counted twice, once as the SDK's and once as a request in flight.
    gw = await gateway_factory(config(upstream, sessions_per_principal=128, sessions_total=256))
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        statuses: list[int] = []
        for _ in range(4):
            wave = await asyncio.gather(*(open_session(http, gw.mcp_url, ALICE) for _ in range(32)))
            statuses += [r.status_code for r in wave]
        statuses.append((await open_session(http, gw.mcp_url, ALICE)).status_code)
    assert statuses == [200] * 128 + [429]


async def raw_post(port: int, headers: list[tuple[str, str]], body: bytes) -> int:
    """One POST /mcp over a plain socket, exactly these header lines (no client library tidies them); its status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [("host", "127.0.0.1"), ("connection", "close"), ("content-length", str(len(body))), *headers]
        head = "POST /mcp HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in lines) + "\r\n"
        writer.write(head.encode() + body)
        async with asyncio.timeout(BOUND_S):
            answer = await reader.read()  # to the end: the opening request's stream ends with its result
        return int(answer.split(b" ", 2)[1])
    finally:
        writer.close()


async def test_a_repeated_protocol_version_header_opens_no_session_past_the_principal_s_limit(
    gateway_factory: GatewayFactory, upstream: Upstream
) -> None:
    # The probe: 2025-11-25 then 2026-07-28 opened a session (the SDK routes on the first) the limit did not count
    # (it read the last): one principal opened 50 past a limit of 8, and took all of sessions_total.
    gw = await gateway_factory(config(upstream, sessions_per_principal=2, sessions_total=4))
    twice = [("mcp-protocol-version", "2025-11-25"), ("mcp-protocol-version", "2026-07-28")]
    headers = [("accept", "application/json, text/event-stream"), ("content-type", "application/json")]
    body = json.dumps(INITIALIZE).encode()
    alice = [("authorization", ALICE["Authorization"]), *headers, *twice]
    statuses = [await raw_post(gw.port, alice, body) for _ in range(8)]
    # Refused at the principal's limit (429), or as a repeated header (400) wherever the HTTP layer refuses one.
    assert statuses.count(200) <= 2
    assert set(statuses) - {200} <= {400, 429}
    bob = [("authorization", BOB["Authorization"]), *headers]
    assert await raw_post(gw.port, bob, body) == 200  # sessions_total is not all alice's


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
    assert gw.gw.fanout.running_watches() == []


@ERAS
async def test_a_gateway_that_is_stopping_refuses_new_subscriptions_with_unavailable(
    gateway_factory: GatewayFactory, upstream: Upstream, mode: str
) -> None:
    gw = await gateway_factory(config(upstream))
    gw.gw.fanout.closing.set()  # what the first step of a graceful stop sets
    e = await refusal(gw.mcp_url, mode, [hook(0)], ALICE)
    assert e.code == errors.UNAVAILABLE
    assert "shutting down" in e.message
