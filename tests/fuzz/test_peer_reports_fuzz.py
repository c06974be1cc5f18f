"""Sources reports (`peers.py`) come from any client of the namespace's bus account: whatever the bytes, decoding
gives a report or None, never an exception, and a report that is accepted encodes back to the same report."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway import peers

KEYS = st.text(alphabet="0123456789abcdef", min_size=peers.KEY_HEX_CHARS, max_size=peers.KEY_HEX_CHARS)
JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text() | KEYS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["instance", "up", "down", "x"]), inner)
    ),
    max_leaves=12,
)


@given(data=st.binary() | JSON.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_decode_to_a_report_or_none(data: bytes) -> None:
    report = peers.decode(data)
    if report is not None:
        assert peers.decode(report.encode()) == report  # encoding it (for the admin API, too) never fails


INSTANCES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", fullmatch=True)
"""Names a gateway has on the bus: a pod's name, or a host name and a process id."""


@given(instance=INSTANCES, up=st.frozensets(KEYS), down=st.frozensets(KEYS))
def test_every_report_reads_back(instance: str, up: frozenset[str], down: frozenset[str]) -> None:
    report = peers.Report(instance, up, down)
    assert peers.decode(report.encode()) == report
