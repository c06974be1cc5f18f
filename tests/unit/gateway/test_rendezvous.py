"""Where a pull URI's lease should be (`rendezvous.py`): the ranking, the interest entries, the roster of live
gateways and one gateway's placement decisions, all pure."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpg_gateway import bus, rendezvous

KEYS = [bus.uri_hash(f"bench://item/{n}") for n in range(3000)]
NAMES = ["gw-1", "gw-2", "gw-3"]
KV_KEY = re.compile(r"^[-/_=.a-zA-Z0-9]+$")
"""What a NATS key-value key may hold (nats-py `_is_key_valid`), with no empty token."""


def winner(key: str, names: list[str]) -> str:
    return rendezvous.ranked(key, names)[0]


# --- the ranking ------------------------------------------------------------------------------------------------


def test_every_gateway_ranks_a_uri_alike_whatever_order_it_heard_the_names_in() -> None:
    for key in KEYS[:50]:
        assert rendezvous.ranked(key, NAMES) == rendezvous.ranked(key, list(reversed(NAMES)))
        assert rendezvous.ranked(key, [*NAMES, "gw-1"]) == rendezvous.ranked(key, NAMES)


def test_three_gateways_each_win_about_a_third_of_the_uris() -> None:
    wins = {name: sum(1 for key in KEYS if winner(key, NAMES) == name) for name in NAMES}
    assert all(0.3 < n / len(KEYS) < 0.37 for n in wins.values()), wins


def test_a_gateway_joining_takes_only_uris_it_wins_and_leaving_moves_only_its_own() -> None:
    joined = [*NAMES, "gw-4"]
    moved = [key for key in KEYS if winner(key, NAMES) != winner(key, joined)]
    assert all(winner(key, joined) == "gw-4" for key in moved)
    assert 0.2 < len(moved) / len(KEYS) < 0.3  # about 1/4
    left = ["gw-1", "gw-3"]
    assert all(winner(key, left) == winner(key, NAMES) for key in KEYS if winner(key, NAMES) != "gw-2")


def test_only_the_names_ranked_above_a_gateway_outrank_it_best_first() -> None:
    for key in KEYS[:50]:
        order = rendezvous.ranked(key, NAMES)
        for i, me in enumerate(order):
            assert rendezvous.outranking(key, me, NAMES) == order[:i]


# --- interest entries -------------------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=253))
def test_an_interest_key_is_a_valid_nats_key_whatever_the_gateway_s_name(name: str) -> None:
    key = rendezvous.interest_key(KEYS[0], name)
    assert KV_KEY.match(key) is not None
    assert "" not in key.split(".")
    assert key.startswith(f"{KEYS[0]}.w.")


def test_an_interest_entry_counts_only_for_the_name_it_gives() -> None:
    assert rendezvous.interest_of(rendezvous.interest_value("gw-1"), "gw-1")
    deep = b"[" * 30_000 + b"]" * 30_000
    oversized = b'{"wants": "' + b"x" * rendezvous.MAX_INTEREST_BYTES + b'"}'
    for data in (None, b"", b"\xff", b"[]", b'{"wants": 7}', rendezvous.interest_value("gw-2"), deep, oversized):
        assert not rendezvous.interest_of(data, "gw-1")


# --- the roster of live gateways ----------------------------------------------------------------------------------


def test_a_gateway_is_steady_once_heard_for_an_interval_and_one_that_drops_out_starts_again() -> None:
    roster = rendezvous.Roster(steady_after_s=10.0)
    assert roster.steady({"a", "b"}, 100.0) == set()
    assert roster.steady({"a", "b"}, 109.9) == set()
    assert roster.steady({"a", "b"}, 110.0) == {"a", "b"}
    assert roster.steady({"a"}, 111.0) == {"a"}  # b unheard: forgotten
    assert roster.steady({"a", "b"}, 115.0) == {"a"}  # b back: a new stay
    assert roster.steady({"a", "b"}, 125.0) == {"a", "b"}


# --- one gateway's placement of one URI ---------------------------------------------------------------------------


def placement_of(key: str, me: str) -> rendezvous.Placement:
    return rendezvous.Placement(key, me, ttl_s=3.0)


def test_a_free_lease_is_taken_at_once_when_no_live_gateway_outranking_this_one_wants_it() -> None:
    assert placement_of(KEYS[0], "gw-1").take_free(None, 100.0)


def test_a_free_lease_is_left_for_a_grace_to_the_one_that_should_own_it_then_taken_and_that_one_passed_over() -> None:
    key = KEYS[0]
    best, *_, me = rendezvous.ranked(key, NAMES)
    placement = placement_of(key, me)
    assert best in placement.candidates(NAMES, 100.0)
    assert not placement.take_free(best, 100.0)
    assert placement.wait_s(100.0) == pytest.approx(1.0)  # a third of the TTL ...
    assert placement.wait_s(101.5) == pytest.approx(0.5)  # ... or less, when the grace (2/3 of it) ends sooner
    assert not placement.take_free(best, 101.99)
    assert placement.take_free(best, 102.0)
    assert best not in placement.candidates(NAMES, 102.0)  # passed over ...
    assert best in placement.candidates(NAMES, 102.0 + 10 * 3.0)  # ... for ten TTLs


def test_seeing_the_lease_held_ends_the_grace_and_its_holder_is_not_waited_for_once_it_lets_go() -> None:
    key = KEYS[1]
    best, middle, me = rendezvous.ranked(key, NAMES)
    placement = placement_of(key, me)
    assert not placement.take_free(best, 100.0)
    placement.held_by(best)
    assert placement.wait_s(100.0) == pytest.approx(1.0)  # a third of the TTL again
    assert placement.candidates(NAMES, 100.0) == [middle]  # the holder left it free: gone, or it let it go
    assert not placement.take_free(middle, 200.0)  # a new grace from the first sighting
    assert placement.take_free(middle, 202.0)


def test_an_owner_asks_about_no_gateway_below_itself_and_never_about_more_than_a_bound() -> None:
    names = [f"gw-{i}" for i in range(100)]
    for key in KEYS[:20]:
        order = rendezvous.ranked(key, names)
        top = placement_of(key, order[0])
        assert top.candidates(names, 0.0) == []  # the one that should own it stays, asking nobody
        low = placement_of(key, order[-1])
        assert low.candidates(names, 0.0) == order[: rendezvous.MAX_PROBES]


def test_passing_over_remembers_a_bounded_number_of_names() -> None:
    placement = placement_of(KEYS[0], "me")
    for i in range(100):
        placement.snub(f"forged-{i}", float(i))
    assert len(placement.snubs) == rendezvous.MAX_SNUBS
    assert "forged-99" in placement.snubs


def test_an_interest_entry_is_withdrawn_only_while_it_may_still_be_there() -> None:
    placement = placement_of(KEYS[0], "me")
    assert not placement.withdraw_due(100.0)
    placement.declared_at = 100.0
    assert placement.withdraw_due(102.9)
    assert not placement.withdraw_due(103.0)  # expired with the bucket's max age


# --- no flapping: a simulation of owners deciding at their renewals -------------------------------------------------


def settle(holders: dict[str, str], live: list[str], wanting: dict[str, set[str]]) -> int:
    """Renewals until nothing moves: each owner hands its URI to the first live gateway outranking it that wants
    it, as `Owners._handing_over` does. Returns the handovers."""
    moves = 0
    for _ in range(10):
        moved = 0
        for key, owner in holders.items():
            candidates = rendezvous.Placement(key, owner, 3.0).candidates(live, 0.0)
            successor = next((name for name in candidates if name in wanting[key]), None)
            if successor is not None:
                holders[key], moved = successor, moved + 1
        moves += moved
        if not moved:
            return moves
    raise AssertionError("still moving after ten renewals")


def test_leases_all_taken_by_the_first_gateway_spread_in_one_move_each_and_then_stay_put() -> None:
    keys = KEYS[:300]
    wanting = {key: set(NAMES) for key in keys}
    holders = dict.fromkeys(keys, "gw-1")
    moves = settle(holders, NAMES, wanting)
    assert moves == sum(1 for key in keys if winner(key, NAMES) != "gw-1")  # each moved once, straight to its winner
    assert holders == {key: winner(key, NAMES) for key in keys}
    assert settle(holders, NAMES, wanting) == 0  # and nothing moves again
    # a fourth gateway joins: only the URIs it wins move, each once
    joined = [*NAMES, "gw-4"]
    wanting = {key: set(joined) for key in keys}
    assert settle(holders, joined, wanting) == sum(1 for key in keys if winner(key, joined) == "gw-4")


def test_an_owner_hands_only_to_a_gateway_that_wants_the_uri() -> None:
    keys = KEYS[:300]
    wanting = {key: {"gw-1", "gw-2"} for key in keys}  # gw-3 runs none of them
    holders = dict.fromkeys(keys, "gw-1")
    settle(holders, NAMES, wanting)
    assert set(holders.values()) <= {"gw-1", "gw-2"}
    assert holders == {key: winner(key, ["gw-1", "gw-2"]) for key in keys}
