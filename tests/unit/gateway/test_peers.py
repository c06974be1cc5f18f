"""How /readyz weighs a dead event source on a bus (`peers.py`): only when another gateway holds it up."""

from __future__ import annotations

import pytest

from mcpg_gateway import liveness, peers

RULES = liveness.Rules(interval_s=10.0, timeout_s=5.0)
NOW = 1_000_000.0
LONG_AGO = NOW - peers.DOWN_FOR_INTERVALS * RULES.interval_s
"""Down exactly long enough to count."""


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
    instance: str, up: frozenset[str] | set[str] = frozenset(), down: frozenset[str] | set[str] = frozenset()
) -> peers.Report:
    return peers.Report(instance, frozenset(map(peers.key, up)), frozenset(map(peers.key, down)))


def gateway(*reports: tuple[peers.Report, float]) -> peers.Peers:
    p = peers.Peers("gw-0", RULES)
    for report, at in reports:
        p.heard(report, at)
    return p


def test_a_source_down_here_long_enough_and_up_on_a_fresh_peer_prefers_the_peer() -> None:
    p = gateway((peer("gw-1", up={"stock"}), NOW - 1))
    assert p.elsewhere([held("stock", up=False)], NOW) == peers.Elsewhere("stock", "gw-1")


@pytest.mark.parametrize(
    ("why", "here", "reports"),
    [
        ("every gateway lost it", held("stock", up=False), [(peer("gw-1", down={"stock"}), NOW - 1)]),
        ("no other gateway holds it", held("stock", up=False), [(peer("gw-1", up={"orders"}), NOW - 1)]),
        ("it is up here", held("stock", up=True), [(peer("gw-1", up={"stock"}), NOW - 1)]),
        ("down only briefly", held("stock", up=False, down_since=NOW - 1), [(peer("gw-1", up={"stock"}), NOW - 1)]),
        (
            "the peer's report is stale",
            held("stock", up=False),
            [(peer("gw-1", up={"stock"}), NOW - peers.FRESH_FOR_INTERVALS * RULES.interval_s - 1)],
        ),
        ("no peer at all", held("stock", up=False), []),
    ],
)
def test_no_other_gateway_is_preferred_when(
    why: str, here: peers.Held, reports: list[tuple[peers.Report, float]]
) -> None:
    assert gateway(*reports).elsewhere([here], NOW) is None, why


def test_a_watch_that_holds_no_connection_never_counts() -> None:
    webhook = peers.Held("orders", liveness.Connection())
    assert gateway((peer("gw-1", up={"orders"}), NOW)).elsewhere([webhook], NOW) is None


def test_its_own_report_is_not_a_peer() -> None:
    p = gateway((peer("gw-0", up={"stock"}), NOW))
    assert p.fresh(NOW) == []
    assert p.elsewhere([held("stock", up=False)], NOW) is None


def test_the_latest_report_of_a_peer_replaces_its_earlier_one() -> None:
    p = gateway((peer("gw-1", up={"stock"}), NOW - 2), (peer("gw-1", down={"stock"}), NOW - 1))
    assert p.elsewhere([held("stock", up=False)], NOW) is None


def test_a_flood_of_made_up_gateways_is_bounded_and_forgets_the_stale_and_oldest_first() -> None:
    p = gateway((peer("real", up={"stock"}), NOW))
    stale_at = NOW - peers.FRESH_FOR_INTERVALS * RULES.interval_s - 1
    for i in range(peers.MAX_PEERS * 3):
        p.heard(peer(f"made-up-{i}"), stale_at + i * 1e-6)
    assert len(p._heard) <= peers.MAX_PEERS
    assert p.elsewhere([held("stock", up=False)], NOW) == peers.Elsewhere("stock", "real")


def test_a_report_reads_back_and_names_no_resource() -> None:
    here = [
        held("stock", up=True),
        held("stock", up=False),
        held("orders", up=False),
        peers.Held("hook", liveness.Connection()),
    ]
    report = peers.report("gw-0", here)
    assert report == peer("gw-0", up={"stock"}, down={"orders"})  # up if any of its watches is up
    data = report.encode()
    assert peers.decode(data) == report
    assert b"stock" not in data
    assert b"orders" not in data


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
    ],
)
def test_anything_but_a_report_is_ignored(data: bytes) -> None:
    assert peers.decode(data) is None
