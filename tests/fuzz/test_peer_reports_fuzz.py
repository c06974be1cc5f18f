"""Sources reports (`peers.py`) come from any client of the namespace's bus account: whatever the bytes, decoding
gives a report or None, never an exception, and a report that is accepted encodes back to the same report. And
whatever made-up gateways say, however often, none of their word counts before it has been heard for the trust
time: a gateway whose source is down does not defer to them."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway import liveness, peers

KEYS = st.text(alphabet="0123456789abcdef", min_size=peers.KEY_HEX_CHARS, max_size=peers.KEY_HEX_CHARS)
JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text() | KEYS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["instance", "up", "down", "ready", "x"]), inner)
    ),
    max_leaves=12,
)
READY = st.none() | st.booleans()
"""What a report says of its gateway's readiness; None: it does not say (a gateway from before the field)."""


@given(data=st.binary() | JSON.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_decode_to_a_report_or_none(data: bytes) -> None:
    report = peers.decode(data)
    if report is not None:
        assert peers.decode(report.encode()) == report  # encoding it (for the admin API, too) never fails


INSTANCES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", fullmatch=True)
"""Names a gateway has on the bus: a pod's name, or a host name and a process id."""


@given(instance=INSTANCES, up=st.frozensets(KEYS), down=st.frozensets(KEYS), ready=READY)
def test_every_report_reads_back(instance: str, up: frozenset[str], down: frozenset[str], ready: bool | None) -> None:
    report = peers.Report(instance, up, down, ready)
    assert peers.decode(report.encode()) == report


RULES = liveness.Rules(interval_s=10.0, timeout_s=5.0)
NOW = 1_000_000.0
STOCK = peers.key("stock")
FORGED = st.builds(
    peers.Report,
    instance=st.sampled_from(["ghost", "gw-0", "gw-1", "a", "~"]),
    up=st.frozensets(st.sampled_from([STOCK, "0" * peers.KEY_HEX_CHARS])),
    down=st.frozensets(st.sampled_from([STOCK, "0" * peers.KEY_HEX_CHARS])),
    ready=READY,
)
"""Reports under a few names (this gateway's own among them), saying anything about the one resource."""
TRUST_MS = int(peers.TRUST_INTERVALS * RULES.interval_s * 1000)
WITHIN_TRUST = st.integers(min_value=0, max_value=TRUST_MS - 1).map(lambda ms: ms / 1000)
"""How long before now a report came, to the millisecond (finer, and `NOW - ago` rounds onto the trust time)."""


@given(heard=st.lists(st.tuples(FORGED, WITHIN_TRUST), max_size=20))
def test_no_report_heard_for_less_than_the_trust_time_makes_a_gateway_defer(
    heard: list[tuple[peers.Report, float]],
) -> None:
    p = peers.Peers("gw-0", RULES)
    for report, ago in sorted(heard, key=lambda h: -h[1]):  # heard in time order, the latest at NOW
        p.heard(report, NOW - ago)
    down = liveness.Connection()
    down.lost("closed")
    down.down_since = NOW - peers.DOWN_FOR_INTERVALS * RULES.interval_s
    assert p.elsewhere([peers.Held("stock", down)], NOW) is None
