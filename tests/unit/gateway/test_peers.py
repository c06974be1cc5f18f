"""How /readyz weighs a dead event source on a bus (`peers.py`): only when another gateway holds it up, whose
word counts once it has been heard holding it for a while, and never so that every gateway sharing an outage
leaves its Service. The decision first, with injected times (each report heard at a time the test names); then
two gateways on a real nats-server (the `bus_server` tests) sharing an outage while a made-up one claims the
source up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import nats as nats_py
import pytest

from mcpg_gateway import liveness, peers
from mcpg_testing import BOUND_S
from mcpg_testing.clients import subscribed
from mcpg_testing.configs import bus_section, gateway_config, watched
from mcpg_testing.gateways import ADMIN_TOKEN, GatewayFactory, RunningGateway
from mcpg_testing.servers import NatsServer, start_nats

RULES = liveness.Rules(interval_s=10.0, timeout_s=5.0)
INTERVAL = RULES.interval_s
NOW = 1_000_000.0
LONG_AGO = NOW - peers.DOWN_FOR_INTERVALS * INTERVAL
"""Down exactly long enough to count."""
TRUSTED_SINCE = NOW - peers.TRUST_INTERVALS * INTERVAL
"""Heard from exactly long enough to count."""
Heard = list[tuple[peers.Report, float]]


def connection(up: bool, down_since: float | None = None) -> liveness.Connection:
    c = liveness.Connection()
    c.round_trip()
    if not up:
        c.lost("unresponsive")
        c.down_since = down_since
    return c


def held(resource: str, up: bool, down_since: float | None = LONG_AGO) -> peers.Held:
    return peers.Held(resource, connection(up, down_since))


def peer(
    instance: str,
    up: frozenset[str] | set[str] = frozenset(),
    down: frozenset[str] | set[str] = frozenset(),
    ready: bool | None = True,
) -> peers.Report:
    return peers.Report(instance, frozenset(map(peers.key, up)), frozenset(map(peers.key, down)), ready)


def steady(report: peers.Report, since: float = TRUSTED_SINCE, until: float = NOW) -> Heard:
    """`report` heard every interval from `since` to `until`, as a gateway publishes it."""
    count = int((until - since) // INTERVAL)
    return [(report, since + i * INTERVAL) for i in range(count + 1)]


def gateway(*heard: Heard, instance: str = "gw-0") -> peers.Peers:
    p = peers.Peers(instance, RULES)
    for report, at in sorted((h for run in heard for h in run), key=lambda h: h[1]):
        p.heard(report, at)
    return p


# --- whose word counts -----------------------------------------------------------------------------------------


def test_a_gateway_heard_holding_a_source_up_and_ready_for_the_trust_time_is_preferred() -> None:
    """The feature's main case survives: one gateway lost a route to the database, another still reaches it."""
    p = gateway(steady(peer("gw-1", up={"stock"})))
    assert p.elsewhere([held("stock", up=False)], NOW) == peers.Elsewhere("stock", "gw-1")


def test_a_made_up_gateway_never_heard_before_makes_nobody_unready() -> None:
    p = gateway([(peer("ghost", up={"stock"}), NOW)])
    assert p.elsewhere([held("stock", up=False)], NOW) is None


def test_a_gateway_heard_for_less_than_the_trust_time_is_not_believed() -> None:
    p = gateway(steady(peer("ghost", up={"stock"}), since=TRUSTED_SINCE + 1))
    assert p.elsewhere([held("stock", up=False)], NOW) is None
    assert p.fresh(NOW)[0].trusted is False


def test_a_gateway_heard_for_long_that_holds_the_source_up_only_lately_is_not_believed() -> None:
    p = gateway(
        steady(peer("gw-1", down={"stock"}), since=TRUSTED_SINCE - 5 * INTERVAL, until=TRUSTED_SINCE),
        steady(peer("gw-1", up={"stock"}), since=TRUSTED_SINCE + INTERVAL),
    )
    assert p.fresh(NOW)[0].trusted is True
    assert p.elsewhere([held("stock", up=False)], NOW) is None


def test_a_gap_in_a_gateway_s_reports_restarts_its_trust() -> None:
    gap = peers.FRESH_FOR_INTERVALS * INTERVAL + 1
    before = steady(peer("gw-1", up={"stock"}), since=NOW - 20 * INTERVAL, until=TRUSTED_SINCE - gap)
    p = gateway(before, steady(peer("gw-1", up={"stock"}), since=TRUSTED_SINCE + 1))
    assert p.elsewhere([held("stock", up=False)], NOW) is None
    assert p.elsewhere([held("stock", up=False)], NOW + INTERVAL) == peers.Elsewhere("stock", "gw-1")


@pytest.mark.parametrize("ready", [False, None], ids=["not ready", "too old to say"])
def test_a_gateway_that_does_not_say_it_is_ready_vouches_for_nothing(ready: bool | None) -> None:
    p = gateway(steady(peer("gw-1", up={"stock"}, ready=ready)))
    assert p.elsewhere([held("stock", up=False)], NOW) is None


@pytest.mark.parametrize(
    ("why", "here", "heard"),
    [
        ("every gateway lost it", held("stock", up=False), [steady(peer("gw-1", down={"stock"}))]),
        ("no other gateway holds it", held("stock", up=False), [steady(peer("gw-1", up={"orders"}))]),
        ("it is up here", held("stock", up=True), [steady(peer("gw-1", up={"stock"}))]),
        ("down only briefly", held("stock", up=False, down_since=NOW - 1), [steady(peer("gw-1", up={"stock"}))]),
        (
            "the peer's report is stale",
            held("stock", up=False),
            [steady(peer("gw-1", up={"stock"}), until=NOW - peers.FRESH_FOR_INTERVALS * INTERVAL - 1)],
        ),
        ("no peer at all", held("stock", up=False), []),
    ],
)
def test_no_other_gateway_is_preferred_when(why: str, here: peers.Held, heard: list[Heard]) -> None:
    assert gateway(*heard).elsewhere([here], NOW) is None, why


def test_a_watch_that_holds_no_connection_never_counts() -> None:
    webhook = peers.Held("orders", liveness.Connection())
    assert gateway(steady(peer("gw-1", up={"orders"}))).elsewhere([webhook], NOW) is None


def test_its_own_report_is_not_a_peer() -> None:
    p = gateway(steady(peer("gw-0", up={"stock"})))
    assert p.fresh(NOW) == []
    assert p.elsewhere([held("stock", up=False)], NOW) is None


def test_the_latest_report_of_a_peer_replaces_its_earlier_one() -> None:
    p = gateway(steady(peer("gw-1", up={"stock"}), until=NOW - 1), [(peer("gw-1", down={"stock"}), NOW)])
    assert p.elsewhere([held("stock", up=False)], NOW) is None


# --- the anchor: one of those sharing an outage stays ---------------------------------------------------------


def test_of_two_gateways_sharing_an_outage_the_first_by_name_stays_whoever_vouches_and_the_other_defers() -> None:
    ghost = steady(peer("ghost", up={"stock"}))  # reported for long enough: it may exist, or not
    first = gateway(ghost, steady(peer("gw-1", down={"stock"})), instance="gw-0")
    second = gateway(ghost, steady(peer("gw-0", down={"stock"})), instance="gw-1")
    here = [held("stock", up=False)]
    assert first.decide(here, NOW) == peers.Decision(None, (peers.Anchored("stock", "ghost", ("gw-1",)),))
    assert second.decide(here, NOW) == peers.Decision(peers.Elsewhere("stock", "ghost"))


def test_a_gateway_sharing_the_outage_makes_the_first_by_name_stay_once_known_for_an_interval_and_ready() -> None:
    """One shutting down is leaving, and one too old to say defers to anyone: neither stays for the others."""
    sharing = {
        "trusted and ready": steady(peer("gw-1", down={"stock"})),
        "just heard": steady(peer("gw-1", down={"stock"}), since=NOW - peers.KNOWN_INTERVALS * INTERVAL + 1),
        "not trusted yet": steady(peer("gw-1", down={"stock"}), since=TRUSTED_SINCE + 1),
        "shutting down": steady(peer("gw-1", down={"stock"}, ready=False)),
        "too old to say": steady(peer("gw-1", down={"stock"}, ready=None)),
    }
    stays = {}
    for why, heard in sharing.items():
        decision = gateway(steady(peer("ghost", up={"stock"})), heard).decide([held("stock", up=False)], NOW)
        stays[why] = decision.elsewhere is None and bool(decision.anchored)
    assert stays == {
        "trusted and ready": True,
        "just heard": False,
        "not trusted yet": True,  # known for long enough: a gateway just started knows its fellows first
        "shutting down": False,
        "too old to say": False,
    }


def test_an_anchor_defers_for_no_resource_since_the_others_count_on_it_staying() -> None:
    ghost = steady(peer("ghost", up={"stock"}))
    p = gateway(ghost, steady(peer("gw-1", up={"orders"}, down={"stock"})))
    here = [held("stock", up=False), held("orders", up=False)]
    assert p.decide(here, NOW) == peers.Decision(None, (peers.Anchored("stock", "ghost", ("gw-1",)),))


@dataclass(frozen=True)
class Member:
    """A gateway in `simulate`: it starts at `start` (its source already down) and reports every interval from
    `start + phase` on."""

    name: str
    start: float
    phase: float


def simulate(members: list[Member], ghost_phase: float, until: float) -> list[tuple[float, list[str]]]:
    """Every gateway hears each report published after its start (its own readiness as `report` says it, and a
    made-up "ghost" claiming the source up every interval from `ghost_phase`); /readyz is asked of each running
    gateway every quarter interval. Which ones answer 200, each time (times counted from `NOW`)."""
    published: list[tuple[float, Member | None]] = [
        (m.start + m.phase + i * INTERVAL, m) for m in members for i in range(int(until // INTERVAL))
    ]
    published += [(ghost_phase + i * INTERVAL, None) for i in range(int(until // INTERVAL))]
    published.sort(key=lambda p: p[0])
    views = {m.name: peers.Peers(m.name, RULES) for m in members}
    answers = []
    for step in range(int(until * 4 // INTERVAL)):
        now = step * INTERVAL / 4
        while published and published[0][0] <= now:
            at, by = published.pop(0)
            said = peer("ghost", up={"stock"}) if by is None else peers.report(by.name, here(by), ready=True)
            for m in members:
                if m.start <= at:
                    views[m.name].heard(said, NOW + at)
        running = [m for m in members if m.start <= now]
        answers.append((now, [m.name for m in running if views[m.name].elsewhere(here(m), NOW + now) is None]))
    return answers


def here(m: Member) -> list[peers.Held]:
    return [held("stock", up=False, down_since=NOW + m.start)]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Member("gw-0", 0.0, 5.0), Member("gw-1", 0.0, 5.0)),  # started together
        (Member("gw-0", 0.0, 6.9), Member("gw-1", 47.0, 0.1)),  # gw-1 joins, hears the ghost before gw-0
        (Member("gw-0", 47.0, 0.1), Member("gw-1", 0.0, 6.9)),  # gw-0, first by name, joins and does the same
    ],
)
def test_gateways_sharing_an_outage_keep_one_in_service_throughout_while_a_made_up_one_claims_the_source_up(
    first: Member, second: Member
) -> None:
    """Once both run, one of them answers 200 at every moment, including while the one that joined learns of
    the other; in the end it is the first by name."""
    answers = simulate([first, second], ghost_phase=0.2, until=20 * INTERVAL)
    both_running = [(now, serving) for now, serving in answers if now >= max(first.start, second.start)]
    assert [now for now, serving in both_running if not serving] == []
    assert both_running[-1][1] == ["gw-0"]


# --- what is remembered ----------------------------------------------------------------------------------------


def test_a_flood_of_made_up_gateways_is_bounded_and_evicts_itself_never_a_gateway_heard_for_long() -> None:
    long_ago = TRUSTED_SINCE - peers.FRESH_FOR_INTERVALS * INTERVAL - 1
    p = gateway([(peer(f"stale-{i}"), long_ago + i * 1e-6) for i in range(peers.MAX_PEERS)])
    for report, at in steady(peer("real", up={"stock"})):
        p.heard(report, at)  # the stale are forgotten to make room
    for i in range(peers.MAX_PEERS * 3):
        p.heard(peer(f"made-up-{i}", up={"stock"}), NOW + i * 1e-6)
    assert len(p._heard) <= peers.MAX_PEERS
    assert p.elsewhere([held("stock", up=False)], NOW + 1) == peers.Elsewhere("stock", "real")


def test_a_report_naming_more_resources_than_the_configuration_has_is_ignored() -> None:
    # Every replica runs the same configuration: a report naming more resources is a client's, kept out (256 such
    # reports of 256 KiB each would otherwise hold some 350 MB of key sets).
    p = peers.Peers("gw-0", RULES, max_keys=2)
    p.heard(peer("flood", up={f"r{i}" for i in range(3)}), NOW)
    p.heard(peer("real", up={"stock"}, down={"orders"}), NOW)
    assert [h.report.instance for h in p.fresh(NOW)] == ["real"]


# --- the report on the wire ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ready", [True, False])
def test_a_report_reads_back_with_its_readiness_and_names_no_resource(ready: bool) -> None:
    here = [
        held("stock", up=True),
        held("stock", up=False),
        held("orders", up=False),
        peers.Held("hook", liveness.Connection()),
    ]
    report = peers.report("gw-0", here, ready)
    assert report == peer("gw-0", up={"stock"}, down={"orders"}, ready=ready)  # up if any of its watches is up
    data = report.encode()
    assert peers.decode(data) == report
    assert b"stock" not in data
    assert b"orders" not in data


def test_a_report_from_a_gateway_too_old_to_say_whether_it_is_ready_reads_as_saying_nothing() -> None:
    got = peers.decode(b'{"instance": "gw-1", "up": [], "down": []}')
    assert got == peers.Report("gw-1", frozenset(), frozenset(), None)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"instance": "", "up": [], "down": []}',
        b'{"instance": 1, "up": [], "down": []}',
        b'{"instance": "gw", "up": ["short"], "down": []}',
        b'{"instance": "gw", "up": [], "down": null}',
        b'{"instance": "' + b"x" * (peers.MAX_INSTANCE_CHARS + 1) + b'", "up": [], "down": []}',
        b" " * (peers.MAX_REPORT_BYTES + 1),
        b'{"instance": "gw\\ud800", "up": [], "down": []}',
        b'{"instance": "gw\\n1", "up": [], "down": []}',
        b"\xff\xfe",
        b'{"instance": "gw", "up": [], "down": [], "ready": 1}',
        b'{"instance": "gw", "up": [], "down": [], "ready": "yes"}',
        b"[" * 100_000,  # nested deeper than json's parser goes (RecursionError)
    ],
)
def test_anything_but_a_report_is_ignored(data: bytes) -> None:
    assert peers.decode(data) is None


# --- on a real bus ---------------------------------------------------------------------------------------------

STOCK = "stock://levels"
PASSWORD_ENV = "BUS_PASSWORD"
FAST = {"interval_s": 1.0, "timeout_s": 1.0}
"""Liveness at 1 s: down long after 2 s, trusted after 3 s; the rule users get, only faster."""


def member(bus_server: NatsServer, prefix: str, instance: str, source: NatsServer) -> dict[str, Any]:
    """A gateway on the bus whose one watched resource is a nats_topic on `source` (the source they all lose)."""
    raw = gateway_config(watched("stock", STOCK, {"type": "nats_topic", "subject": "stock.levels"}))
    raw["gateway"] |= {"nats": {"url": source.url}, "liveness": FAST}
    raw["gateway"]["bus"] = bus_section(bus_server.address, bus_server.user, PASSWORD_ENV, prefix, instance=instance)
    return raw


async def ready_status(gw: RunningGateway) -> int:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        return (await http.get(f"{gw.base}/readyz")).status_code


async def bus_view(gw: RunningGateway) -> dict[str, Any]:
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=BOUND_S) as http:
        view: dict[str, Any] = (await http.get(f"{gw.admin}/admin/v1/bus")).json()["bus"]
    return view


def heard_of(view: dict[str, Any], instance: str) -> dict[str, Any] | None:
    return next((p for p in view["peers"] if p["instance"] == instance), None)


@contextlib.asynccontextmanager
async def forging(bus_server: NatsServer, prefix: str, report: bytes) -> AsyncIterator[None]:
    """Any client of the account publishing `report` on the sources subject, several times an interval."""
    nc = await nats_py.connect(bus_server.url)

    async def publish() -> None:
        while True:
            await nc.publish(f"{prefix}.{peers.SUBJECT}", report)
            await asyncio.sleep(FAST["interval_s"] / 4)  # a cadence, not a wait for anything

    task = asyncio.create_task(publish())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await nc.close()


async def test_on_a_real_bus_a_made_up_gateway_claiming_a_shared_outage_s_source_up_leaves_the_first_in_service(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    """Both gateways lose the source; a client of the account then says, again and again, that a gateway named
    "ghost" holds it up. gw-a (first by name) answers /readyz 200 throughout; gw-b answers 200 until the ghost's
    word counts at gw-b, then 503: the anchor rule's price, one replica in the Service, never none."""
    source, prefix = start_nats(), f"t{uuid.uuid4().hex[:12]}"
    try:
        a, b = [
            await gateway_factory(
                member(bus_server, prefix, name, source), {PASSWORD_ENV: bus_server.password}, admin_token=ADMIN_TOKEN
            )
            for name in ("gw-a", "gw-b")
        ]
        async with subscribed(a.mcp_url, "listen", [STOCK]), subscribed(b.mcp_url, "legacy", [STOCK]):
            source.kill()
            async with asyncio.timeout(BOUND_S):
                while [(await bus_view(gw))["down_long"] for gw in (a, b)] != [["stock"], ["stock"]]:
                    assert [await ready_status(gw) for gw in (a, b)] == [200, 200]
            ghost = {"instance": "ghost", "up": [peers.key("stock")], "down": [], "ready": True}
            async with forging(bus_server, prefix, json.dumps(ghost).encode()):
                untrusted_checks = await ghost_heard_until_trusted(a, b)
                assert untrusted_checks > 0, "the ghost was trusted before gw-b was asked while it was not"
                async with asyncio.timeout(BOUND_S):
                    while await ready_status(b) != 503:
                        assert await ready_status(a) == 200
                assert await ready_status(a) == 200
                assert (await bus_view(a))["anchor_for"] == [
                    {"resource": "stock", "gateway": "ghost", "sharing": ["gw-b"]}
                ]
                assert (await bus_view(b))["preferred_elsewhere"] == {"resource": "stock", "gateway": "ghost"}
    finally:
        source.stop()


async def ghost_heard_until_trusted(a: RunningGateway, b: RunningGateway) -> int:
    """Ask both gateways' /readyz until the ghost's word counts at both: gw-a is ready throughout, and gw-b is
    while the ghost, heard, is not trusted there yet. How many times gw-b was asked in that state."""
    checks = 0
    async with asyncio.timeout(BOUND_S):
        while True:
            assert await ready_status(a) == 200
            status = await ready_status(b)
            seen = [heard_of(await bus_view(gw), "ghost") for gw in (b, a)]
            if seen[0] is not None and not seen[0].get("trusted", False):  # not yet trusted after the answer
                assert status == 200, "gw-b deferred to a gateway whose word does not count yet"
                checks += 1
            if all(h is not None and h.get("trusted", False) for h in seen):
                return checks
