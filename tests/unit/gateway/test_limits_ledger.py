"""The limits ledger alone (`limits.Watches`, `limits.Streams`): its promises under any sequence of requests.

Hypothesis drives random requests by a few principals against small limits; whatever the order, no principal
ever holds more than its limit, the process never more than its ceiling, a refusal changes nothing, and an
eviction only ever takes a slowed watch of the same principal.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpg_gateway import errors
from mcpg_gateway.contract import config
from mcpg_gateway.fanout import limits

PER_PRINCIPAL, TOTAL = 3, 7
LIMITS = config.LimitsConfig(
    watches_per_principal=PER_PRINCIPAL,
    watches_total=TOTAL,
    listen_streams_per_principal=2,
    listen_streams_total=3,
    sessions_per_principal=1,
    sessions_total=1,
)
PRINCIPALS = ("alice", "bob", "carol")
URIS = tuple(f"u://{n}" for n in range(6))

requests = st.lists(
    st.tuples(
        st.sampled_from(PRINCIPALS),
        st.lists(st.sampled_from(URIS), min_size=1, max_size=4, unique=True),
        st.frozensets(st.sampled_from(URIS)),  # which of the principal's URIs are slowed right now
        st.booleans(),  # drop one held URI first (an unsubscribe)
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(requests)
def test_no_sequence_of_requests_breaks_a_limit_and_a_refusal_costs_nothing(
    sequence: list[tuple[str, list[str], frozenset[str], bool]],
) -> None:
    ledger = limits.Watches(LIMITS)
    for principal, uris, slowed, unsubscribe in sequence:
        held = ledger.held(principal)
        if unsubscribe and held:
            ledger.remove(principal, next(iter(held)))
        before = {p: dict(ledger.held(p)) for p in PRINCIPALS}
        slowed_since = dict.fromkeys(slowed, 1.0)
        code: int | None = None
        try:
            admission = ledger.admit(principal, uris, slowed_since.get)
        except limits.Refusal as refusal:
            code = refusal.code
        if code is not None:
            assert code in (errors.TOO_MANY_REQUESTS, errors.UNAVAILABLE)
            assert {p: dict(ledger.held(p)) for p in PRINCIPALS} == before
            continue
        assert set(admission.evict) <= slowed & set(before[principal])
        assert not set(admission.evict) & set(uris)
        for uri in admission.evict:
            while uri in ledger.held(principal):
                ledger.remove(principal, uri)
        for uri in admission.fresh:
            ledger.add(principal, uri)
        assert all(len(ledger.held(p)) <= PER_PRINCIPAL for p in PRINCIPALS)
        assert ledger.total == sum(len(ledger.held(p)) for p in PRINCIPALS) <= TOTAL


def test_the_longest_slowed_watch_is_the_one_evicted() -> None:
    ledger = limits.Watches(LIMITS)
    for uri in URIS[:3]:
        ledger.add("alice", uri)
    slowed_since = {URIS[0]: 50.0, URIS[1]: 10.0, URIS[2]: None}
    admission = ledger.admit("alice", [URIS[4]], slowed_since.get)
    assert admission == limits.Admission(fresh=(URIS[4],), evict=(URIS[1],))


def test_a_uri_held_through_several_subscriptions_is_one_watch_until_the_last_lets_go() -> None:
    ledger = limits.Watches(LIMITS)
    ledger.add("alice", URIS[0])
    ledger.add("alice", URIS[0])
    ledger.remove("alice", URIS[0])
    assert ledger.held("alice") == {URIS[0]: 1}
    assert ledger.total == 1
    ledger.remove("alice", URIS[0])
    assert ledger.total == 0


def test_listen_streams_are_counted_per_principal_and_in_all_and_given_back() -> None:
    streams = limits.Streams(LIMITS)
    streams.open("alice")
    streams.open("alice")
    with pytest.raises(limits.Refusal) as mine:
        streams.open("alice")
    assert mine.value.code == errors.TOO_MANY_REQUESTS
    streams.open("bob")
    with pytest.raises(limits.Refusal) as everyone:
        streams.open("carol")
    assert everyone.value.code == errors.UNAVAILABLE
    streams.close("alice")
    streams.open("carol")
    assert streams.total == 3
