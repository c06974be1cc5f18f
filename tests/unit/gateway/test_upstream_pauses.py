"""An upstream 429 pauses every read of that upstream with the same credentials (issue 15).

Pure tests pin the schedule (30 s doubling to 5 minutes, a longer Retry-After, capped at an hour) and the key; a
property test feeds the Retry-After parser hostile text. The rest run a real gateway against a real HTTP upstream
with a clock the test drives: one `clock.tick(n)` is one poll of each of the n watches, `clock.advance(s)` is time.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpg_gateway import upstream_pauses
from mcpg_gateway.errors import ReadError
from mcpg_gateway.identity import Principal
from mcpg_gateway.upstream_pauses import RETRY_AFTER_CAP_S, UpstreamPauses, key_for, parse_retry_after, pause_s
from mcpg_testing.clients import refusal, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import ADMIN_TOKEN, GatewayFactory, RunningGateway, admin_watches, metrics_text
from mcpg_testing.upstream import Upstream

A, B, C = "drive://a", "drive://b", "drive://c"
SHARED, OTHER = "Bearer shared-secret-7f3a", "Bearer other-secret-91c2"
POLL = {"type": "poll", "interval_ms": 10000}
WALL = 1_700_000_000.0


# --- the schedule, pure ---------------------------------------------------------------------------------------


class FakeNow:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


KEY = key_for("https://api.example/a", {"Authorization": SHARED})


def test_the_pause_is_30_s_doubling_per_429_in_a_row_up_to_5_minutes() -> None:
    assert [pause_s(n, None) for n in range(1, 8)] == [30, 60, 120, 240, 300, 300, 300]


def test_a_longer_retry_after_wins_a_shorter_one_does_not_and_an_hour_is_the_most() -> None:
    assert pause_s(1, 120) == 120
    assert pause_s(3, 60) == 120
    assert pause_s(1, 10**9) == RETRY_AFTER_CAP_S


def test_429s_in_a_row_double_and_a_success_after_the_pause_starts_again_at_30_s() -> None:
    now = FakeNow()
    pauses = UpstreamPauses(now)
    assert pauses.record(KEY, None) == 30
    assert pauses.paused_for(KEY) == 30
    now.t += 30
    assert pauses.paused_for(KEY) is None
    assert pauses.record(KEY, None) == 60
    now.t += 60
    pauses.succeeded(KEY)
    assert pauses.record(KEY, None) == 30


def test_answers_to_reads_sent_before_the_pause_neither_double_it_nor_end_the_streak() -> None:
    now = FakeNow()
    pauses = UpstreamPauses(now)
    pauses.record(KEY, None)
    now.t += 10
    assert pauses.record(KEY, None) == 20  # in flight when the pause began: not a second 429 in a row
    assert pauses.record(KEY, 100) == 100  # but its longer Retry-After is believed
    pauses.succeeded(KEY)  # also sent before the pause
    now.t += 100
    assert pauses.record(KEY, None) == 60
    [view] = pauses.snapshot()
    assert (view.consecutive, view.total) == (2, 4)


def test_an_upstream_is_forgotten_an_hour_after_its_pause_ended() -> None:
    now = FakeNow()
    pauses = UpstreamPauses(now)
    pauses.record(KEY, None, "a")
    now.t += 30 + upstream_pauses.FORGET_AFTER_S - 1
    assert [v.resources for v in pauses.snapshot()] == [("a",)]
    now.t += 1
    assert pauses.snapshot() == []


def test_the_key_is_the_origin_and_every_header_and_never_shows_the_digest() -> None:
    assert key_for("https://api.example:443/b?x=1", {"authorization": SHARED}) == KEY  # name case, default port
    assert key_for("https://api.example/a", {"Authorization": OTHER}) != KEY
    assert key_for("https://api.example/a", {"Authorization": SHARED, "X-Tenant": "t"}) != KEY
    assert key_for("http://api.example/a", {"Authorization": SHARED}) != KEY
    assert key_for("https://u:p@api.example/a", {"Authorization": SHARED}) != KEY  # userinfo is a credential
    assert KEY.upstream == "api.example:443"
    assert KEY.credentials not in repr(KEY)


def test_retry_after_takes_delta_seconds_or_an_http_date_and_ignores_the_rest() -> None:
    in_90_s = email.utils.formatdate(WALL + 90, usegmt=True)
    assert parse_retry_after("120", WALL) == 120
    assert parse_retry_after(" 7 ", WALL) == 7
    assert parse_retry_after(in_90_s, WALL) == 90
    assert parse_retry_after(email.utils.formatdate(WALL - 90, usegmt=True), WALL) == 0
    assert parse_retry_after("9" * 5000, WALL) == RETRY_AFTER_CAP_S
    for junk in (None, "", "-5", "1.5", "soon", "\u0663", "Fri, 99 Foo 2024 25:61:61 GMT"):
        assert parse_retry_after(junk, WALL) is None, junk


DATES = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))
HOSTILE = st.one_of(
    st.text(),
    st.from_regex(r"\s*-?[0-9]{1,30}(\.[0-9]+)?\s*", fullmatch=True),
    DATES.map(lambda d: email.utils.format_datetime(d, usegmt=True)),
    st.builds(lambda d, junk: email.utils.format_datetime(d, usegmt=True)[: len(junk) + 5] + junk, DATES, st.text()),
)


@settings(max_examples=300, deadline=None)
@given(HOSTILE, st.floats(min_value=0, max_value=4e9))
def test_retry_after_never_raises_is_never_negative_and_never_above_the_cap(text: str, wall: float) -> None:
    seconds = parse_retry_after(text, wall)
    assert seconds is None or 0 <= seconds <= RETRY_AFTER_CAP_S


# --- over real HTTP ----------------------------------------------------------------------------------------------


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: Upstream, clock: ManualClock) -> RunningGateway:
    """a and b read one upstream with the same credentials, c with others; all answer 200 to begin with."""
    for path in ("/a", "/b", "/c"):
        upstream.set(path, "{}")
    raw = gateway_config(
        resource("a", A, f"{upstream.url}/a", POLL, headers={"authorization": SHARED}),
        resource("b", B, f"{upstream.url}/b", POLL, headers={"authorization": SHARED}),
        resource("c", C, f"{upstream.url}/c", POLL, headers={"authorization": OTHER}),
    )
    return await gateway_factory(raw, clock=clock, admin_token=ADMIN_TOKEN)


@contextlib.asynccontextmanager
async def watching(gw: RunningGateway, clock: ManualClock) -> AsyncIterator[None]:
    """One client subscribed to a, b and c: three poll watches asleep on the clock (entered in the test's own task:
    the SDK client's cancel scopes must be left in the task that entered them, which a fixture's teardown is not)."""
    async with subscribed(gw.mcp_url, "legacy", [A, B, C]):
        await clock.sleepers(3)
        yield


def hits(upstream: Upstream) -> dict[str, int]:
    return {path: upstream.hits.get(path, 0) for path in ("/a", "/b", "/c")}


def paused_for(gw: RunningGateway, uri: str) -> float | None:
    binding = gw.gw.readable(uri, Principal("tester"))
    assert binding is not None
    return gw.gw.reader.paused_for(binding)


async def admin_upstreams(gw: RunningGateway) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        resp = await http.get(f"{gw.admin}/admin/v1/upstreams", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert resp.status_code == 200
    return resp


async def test_a_429_pauses_the_other_reader_with_the_same_credentials_until_the_pause_ends(
    gw: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(gw, clock):
        upstream.set("/a", "{}", status=429)
        await clock.tick(3)
        before = hits(upstream)
        await clock.tick(3)
        after = hits(upstream)
        assert (after["/a"], after["/b"]) == (before["/a"], before["/b"])  # neither was asked
        assert after["/c"] == before["/c"] + 1  # other credentials: not paused
        clock.advance(29)
        await clock.tick(3)
        assert (hits(upstream)["/a"], hits(upstream)["/b"]) == (before["/a"], before["/b"])
        upstream.set("/a", "{}")
        clock.advance(1)
        await clock.tick(3)
        assert hits(upstream) == {"/a": after["/a"] + 1, "/b": after["/b"] + 1, "/c": after["/c"] + 2}


async def test_a_second_429_in_a_row_pauses_60_s_and_a_success_starts_again_at_30(
    gw: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(gw, clock):
        upstream.set("/a", "{}", status=429)
        upstream.set("/b", "{}", status=429)  # so no success of b's can end the streak between a's 429s
        await clock.tick(3)
        assert paused_for(gw, A) == 30
        clock.advance(30)
        await clock.tick(3)
        assert paused_for(gw, A) == paused_for(gw, B) == 60
        upstream.set("/a", "{}")
        upstream.set("/b", "{}")
        clock.advance(60)
        await clock.tick(3)
        upstream.set("/a", "{}", status=429)
        await clock.tick(3)
        assert paused_for(gw, A) == 30


async def test_a_retry_after_longer_than_the_schedule_pauses_that_long(
    gw: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    async with watching(gw, clock):
        upstream.set("/a", "{}", status=429, headers={"Retry-After": "120"})
        await clock.tick(3)
        assert paused_for(gw, A) == 120
        upstream.set("/a", "{}")
        clock.advance(119)
        before = hits(upstream)["/a"]
        await clock.tick(3)
        assert hits(upstream)["/a"] == before
        clock.advance(1)
        await clock.tick(3)
        assert hits(upstream)["/a"] == before + 1


async def test_a_paused_read_raises_without_a_request_and_refuses_a_subscription(
    gw: RunningGateway, upstream: Upstream, clock: ManualClock
) -> None:
    upstream.set("/a", "{}", status=429)
    a, b = gw.gw.readable(A, Principal("tester")), gw.gw.readable(B, Principal("tester"))
    assert a is not None
    assert b is not None
    with pytest.raises(ReadError) as first:
        await gw.gw.reader.read(a)
    assert (first.value.rate_limited, first.value.retry_after_s) == (True, 30)
    clock.advance(10)
    with pytest.raises(ReadError, match="rate-limiting this gateway") as held:
        await gw.gw.reader.read(b)
    assert (held.value.status, held.value.retry_after_s) == (429, 20)
    refused = await refusal(gw.mcp_url, "legacy", [B])  # its baseline read is held too: the subscribe is refused
    assert "/b" not in upstream.hits
    for shown in (str(first.value), str(held.value), str(refused)):
        assert SHARED.split()[1] not in shown


async def test_the_admin_api_metrics_and_logs_show_the_pause_and_never_the_credentials(
    gw: RunningGateway, upstream: Upstream, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with watching(gw, clock):
        where = upstream.url.removeprefix("http://")
        with caplog.at_level(logging.DEBUG):
            upstream.set("/a", "{}", status=429)
            await clock.tick(3)
            await clock.tick(3)  # b is held now, whichever read went first in the last tick
            body = (await admin_upstreams(gw)).text
            watches = await admin_watches(gw)
            text = await metrics_text(gw)
        [row] = (await admin_upstreams(gw)).json()["upstreams"]
        paused_until = datetime.fromisoformat(row.pop("paused_until")).timestamp()
        assert row == {"upstream": where, "consecutive_429s": 1, "total_429s": 1, "resources": ["a", "b"]}
        assert 0 < paused_until - datetime.now(UTC).timestamp() <= 31
        assert watches[A]["rate_limited_until"] is not None
        assert watches[B]["rate_limited_until"] is not None
        assert watches[C]["rate_limited_until"] is None
        assert f'mcpg_upstream_rate_limited_total{{upstream="{where}"}} 1.0' in text
        held = gw.gw.metrics.registry.get_sample_value("mcpg_upstream_paused_reads_total", {"upstream": where})
        assert (held or 0) >= 2  # a's and b's reads of the second tick, at least
        assert any("answered 429" in r.getMessage() for r in caplog.records)
        digest = key_for(f"{upstream.url}/a", {"authorization": SHARED}).credentials
        for shown in (body, str(watches), text, *(r.getMessage() for r in caplog.records)):
            for secret in (SHARED, OTHER, SHARED.split()[1], digest):
                assert secret not in shown
