"""The rotation state machine, over event sequences, and a simulation of gateway pods applying configurations in
place that checks throughout the retirement rule: no counted pod refuses a token before every counted pod has
acknowledged a configuration carrying its replacement (plus the grace period)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from mcpg_operator import rotation
from mcpg_operator.rotation import Retiring, TokenState


def promote(state: TokenState, value: str, now: float = 0.0) -> TokenState:
    return rotation.observe_secret(state, value, now).state


def accepted(state: TokenState, now: float, grace: float = 0.0) -> TokenState:
    return rotation.retire_due(rotation.observe_acknowledgement(state, True, now), grace, now)


def test_the_first_value_becomes_current_with_nothing_to_retire() -> None:
    assert promote(TokenState(), "a") == TokenState(current="a")


def test_an_unchanged_secret_changes_nothing() -> None:
    state = TokenState(current="a", current_accepted_at=1.0)
    assert promote(state, "a") is state


@pytest.mark.parametrize("value", [None, ""])
def test_a_secret_that_no_longer_holds_a_token_revokes_every_token_at_once(value: str | None) -> None:
    edit = rotation.observe_secret(TokenState(current="b", retiring=(Retiring("a", 1.0),)), value, 5)
    assert edit.state == TokenState()
    assert edit.revoked == 2
    assert rotation.observe_secret(TokenState(), value, 5) == rotation.Edit(TokenState())


def test_an_edit_promotes_the_new_token_and_keeps_the_old_one_retiring() -> None:
    state = promote(TokenState(current="a", current_accepted_at=1.0), "b", now=10)
    assert state == TokenState(current="b", retiring=(Retiring("a", 10, was_accepted=True),))
    assert state.tokens() == ["b", "a"]


def test_the_old_token_is_not_retired_before_every_pod_acknowledged_the_new_one() -> None:
    state = promote(TokenState(current="a"), "b")
    assert rotation.observe_acknowledgement(state, acknowledged=False, now=5) == state
    assert rotation.retire_due(state, 0, now=1e9).tokens() == ["b", "a"]


def test_an_acknowledged_token_retires_the_old_one_at_once_with_no_grace_and_keeps_it_until_the_pods_drop_it() -> None:
    state = accepted(promote(TokenState(current="a"), "b"), now=5)
    assert state == TokenState(current="b", current_accepted_at=5, retiring=(Retiring("a", 0.0, 5, 5),))
    assert state.tokens() == ["b"]  # left out of the configuration...
    assert rotation.retired(state) == ["a"]  # ...and listed until no pod accepts it
    assert rotation.forget_dropped(state, lambda token: False) is state
    assert rotation.forget_dropped(state, lambda token: token == "a") == TokenState(current="b", current_accepted_at=5)


def test_only_a_retired_token_is_ever_forgotten() -> None:
    state = rotation.observe_acknowledgement(promote(TokenState(current="a"), "b"), True, now=5)
    assert rotation.forget_dropped(state, lambda token: True) is state


def test_a_grace_period_keeps_the_old_token_until_it_has_passed() -> None:
    state = rotation.observe_acknowledgement(promote(TokenState(current="a"), "b"), True, now=5)
    assert rotation.retire_due(state, 60, now=64.9).tokens() == ["b", "a"]
    assert rotation.next_retirement(state, 60) == 65
    assert rotation.retire_due(state, 60, now=65).tokens() == ["b"]
    assert rotation.next_retirement(rotation.retire_due(state, 60, now=65), 60) is None


def test_acceptance_is_recorded_once_and_holds() -> None:
    state = rotation.observe_acknowledgement(promote(TokenState(current="a"), "b"), True, now=10)
    again = rotation.observe_acknowledgement(state, True, now=15)  # a later pass finds it so again
    assert again.current_accepted_at == 10
    assert rotation.observe_acknowledgement(state, False, now=20) is state  # a pod late with a later one


def test_a_token_no_configuration_carries_is_accepted_nowhere_and_its_replaced_ones_wait_only_the_grace() -> None:
    state = rotation.release(rotation.observe_acknowledgement(promote(TokenState(current="a"), "b", 1), True, 5), 9)
    assert state.current_accepted_at is None
    assert [r.accepted_at for r in state.retiring] == [5]  # as recorded when it was accepted
    fresh = rotation.release(promote(TokenState(current="a"), "b", 1), 9)
    assert [r.accepted_at for r in fresh.retiring] == [9]


def test_edits_before_any_acknowledgement_keep_every_unretired_token() -> None:
    state = promote(promote(TokenState(current="a"), "b", 1), "c", 2)
    assert state.tokens() == ["c", "a", "b"]
    assert accepted(state, now=3).tokens() == ["c"]


def test_reverting_to_a_retiring_token_does_not_list_it_twice() -> None:
    state = promote(promote(TokenState(current="a"), "b", 1), "a", 2)
    assert state.tokens() == ["a", "b"]


def test_a_state_without_a_current_token_has_nothing_to_accept() -> None:
    assert rotation.observe_acknowledgement(TokenState(), acknowledged=True, now=5) == TokenState()


def test_a_pod_that_never_acknowledges_retires_nothing_however_long_it_takes() -> None:
    state = promote(TokenState(current="a"), "b")
    for now in (10, 1000, 1e7):
        state = rotation.retire_due(rotation.observe_acknowledgement(state, False, now), 0, now)
    assert state.tokens() == ["b", "a"]


def test_retired_tokens_count_for_no_cap_and_are_kept_through_later_edits() -> None:
    state = accepted(promote(TokenState(current="t0"), "t1"), now=1)  # t0 retired, still being dropped
    for i in range(2, rotation.MAX_RETIRING + 3):
        state = rotation.observe_secret(state, f"t{i}", i).state
    assert rotation.retired(state) == ["t0"]
    assert len(state.tokens()) == rotation.MAX_RETIRING + 1


def test_many_edits_are_bounded_and_report_what_was_dropped() -> None:
    state = TokenState(current="t0")
    dropped = 0
    for i in range(1, rotation.MAX_RETIRING + 3):
        edit = rotation.observe_secret(state, f"t{i}", i)
        state, dropped = edit.state, dropped + edit.dropped
    assert len(state.retiring) == rotation.MAX_RETIRING
    assert dropped == 2
    assert next(r.token for r in state.retiring) == "t2"


@pytest.mark.parametrize(
    "state",
    [
        TokenState(),
        TokenState(current="a"),
        TokenState(current="b", current_accepted_at=3.5, retiring=(Retiring("a", 1.0, 3.5), Retiring("z", 2.0))),
        TokenState(current="c", current_accepted_at=4.0, retiring=(Retiring("b", 3.0, 4.0, 4.0),)),
    ],
)
def test_state_survives_an_operator_restart_through_its_json_form(state: TokenState) -> None:
    assert rotation.from_json(rotation.to_json(state)) == state


def test_a_state_an_older_operator_wrote_still_loads_its_rollout_as_the_acceptance() -> None:
    # Before in-place configuration a rollout completing was the acceptance, and its time was `rolledOutAt`.
    older = {
        "current": "b",
        "currentAcceptedAt": 3.5,
        "retiring": [{"token": "a", "replacedAt": 1.0, "rolledOutAt": 3.5}, {"token": "z", "replacedAt": 2.0}],
    }
    state = rotation.from_json(older)
    assert state == TokenState(
        current="b", current_accepted_at=3.5, retiring=(Retiring("a", 1.0, 3.5), Retiring("z", 2.0))
    )
    assert rotation.next_retirement(state, 10) == 13.5


# --- simulated gateway pods, each applying the configuration in place on its own time -------------------------


@dataclass
class Pod:
    config: tuple[str, ...]
    """The tokens of the configuration it applied, current first."""
    ready: bool = False


@dataclass
class Cluster:
    """A configuration Secret and the pods following it: each applies it when it likes; a replacement pod starts
    on the newest and is Ready only once it has applied the newest."""

    secret: tuple[str, ...] = ()
    pods: list[Pod] = field(default_factory=list)

    def step(self, rng: random.Random) -> None:
        action = rng.choice(["apply", "apply", "replace", "ready"])
        if action == "apply" and self.pods:
            rng.choice(self.pods).config = self.secret
        elif action == "replace" and self.pods:
            self.pods.remove(rng.choice(self.pods))
            self.pods.append(Pod(self.secret))
        elif action == "ready":
            for pod in [p for p in self.pods if not p.ready][:1]:
                pod.config, pod.ready = self.secret, True

    def counted(self) -> list[Pod]:
        return [p for p in self.pods if p.ready]


@pytest.mark.parametrize("seed", range(200))
def test_no_counted_pod_refuses_an_accepted_token_before_its_retirement(seed: int) -> None:
    """The retirement rule, over random interleavings of edits, in-place applies, pods replaced and passes."""
    rng = random.Random(seed)
    grace = rng.choice([0.0, 3.0])
    state = accepted(promote(TokenState(), "t0"), now=0, grace=grace)
    cluster = Cluster(tuple(state.tokens()), [Pod(tuple(state.tokens()), True) for _ in range(rng.randint(1, 3))])
    once_accepted: set[str] = {"t0"}
    edits = 0
    for now in range(1, 400):
        roll = rng.random()
        if roll < 0.08 and edits < 6:
            edits += 1
            state = promote(state, f"t{edits}", now)
        elif roll < 0.6:
            cluster.step(rng)
        # The operator's pass: render, record what every counted pod acknowledges, forget, retire, write.
        desired = tuple(state.tokens())
        counted = cluster.counted()
        state = rotation.observe_acknowledgement(
            state, bool(counted) and all(p.config == desired for p in counted), now
        )
        caught_up = bool(counted) and all(p.config == cluster.secret for p in counted)
        gone = frozenset(t for t in rotation.retired(state) if caught_up and t not in cluster.secret)
        state = rotation.forget_dropped(state, gone.__contains__)
        state = rotation.retire_due(state, grace, now)
        cluster.secret = tuple(state.tokens())
        if state.current_accepted_at is not None and state.current:
            once_accepted.add(state.current)
        # Every token accepted once, and not yet retired, is accepted by every counted pod.
        for token in set(state.tokens()) & once_accepted:
            for pod in cluster.counted():
                assert token in pod.config, f"seed {seed}, t={now}: a counted pod refuses {token} before its retirement"
