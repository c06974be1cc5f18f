"""The rotation state machine, over event sequences, and a simulation of rollouts that checks throughout the
retirement rule: no available pod refuses a token before the rollout carrying its replacement has completed
(plus the grace period)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from mcpg_operator import rotation
from mcpg_operator.rotation import Retiring, TokenState


def promote(state: TokenState, value: str, now: float = 0.0) -> TokenState:
    return rotation.observe_secret(state, value, now).state


def rolled(state: TokenState, now: float, grace: float = 0.0) -> TokenState:
    return rotation.retire_due(rotation.observe_rollout(state, True, now), grace, now)


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
    assert state == TokenState(current="b", retiring=(Retiring("a", 10),))
    assert state.tokens() == ["b", "a"]


def test_the_old_token_is_not_retired_before_the_rollout_completes() -> None:
    state = promote(TokenState(current="a"), "b")
    assert rotation.observe_rollout(state, complete=False, now=5) == state
    assert rotation.retire_due(state, 0, now=1e9).tokens() == ["b", "a"]


def test_a_completed_rollout_retires_the_old_token_at_once_with_no_grace() -> None:
    state = rolled(promote(TokenState(current="a"), "b"), now=5)
    assert state == TokenState(current="b", current_accepted_at=5)


def test_a_grace_period_keeps_the_old_token_until_it_has_passed() -> None:
    state = rotation.observe_rollout(promote(TokenState(current="a"), "b"), True, now=5)
    assert rotation.retire_due(state, 60, now=64.9).tokens() == ["b", "a"]
    assert rotation.next_retirement(state, 60) == 65
    assert rotation.retire_due(state, 60, now=65).tokens() == ["b"]


# --- the pods a rollout replaced drain before its token counts as accepted ------------------------------------
# `drain_s` is a parameter here (the operator passes objects.DRAIN_S): 7 s makes the arithmetic visible.

DRAIN = 7.0


def rolled_out_at(now: float) -> TokenState:
    """`b` replaced `a`, and the pass at `now` saw the rollout carrying `b` complete."""
    return rotation.observe_rollout(promote(TokenState(current="a"), "b"), True, now)


@pytest.mark.parametrize(
    "state",
    [TokenState(), promote(TokenState(current="a"), "b", 1), rotation.release(rolled_out_at(10), 11)],
    ids=["no current token", "not rolled out yet", "no pod can carry it"],
)
def test_a_token_no_completed_rollout_carries_never_drains_and_asks_for_no_wake_up(state: TokenState) -> None:
    assert state.current_accepted_at is None
    for now in (0.0, 10.0, 1e9):
        assert not rotation.drained(state, DRAIN, now)
        assert rotation.next_drained(state, DRAIN, now) is None


def test_a_rollout_has_drained_once_the_drain_has_passed_since_it_completed() -> None:
    state = rolled_out_at(10)
    assert [rotation.drained(state, DRAIN, now) for now in (10, 16.9, 17, 1e9)] == [False, False, True, True]


def test_the_wake_up_is_when_the_drain_ends_and_none_once_it_has() -> None:
    state = rolled_out_at(10)
    assert [rotation.next_drained(state, DRAIN, now) for now in (10, 16.9, 17, 1e9)] == [17, 17, None, None]


def test_the_drain_counts_from_the_first_pass_that_saw_the_rollout_complete() -> None:
    state = rotation.observe_rollout(rolled_out_at(10), True, now=15)  # a later pass sees it complete again
    assert state.current_accepted_at == 10
    assert rotation.drained(state, DRAIN, now=17)
    assert rotation.next_drained(state, DRAIN, now=15) == 17


def test_no_drain_has_drained_as_soon_as_the_rollout_completed() -> None:
    state = rolled_out_at(10)
    assert rotation.drained(state, 0, now=10)
    assert rotation.next_drained(state, 0, now=10) is None


def test_an_edit_during_a_rollout_keeps_every_unretired_token() -> None:
    state = promote(promote(TokenState(current="a"), "b", 1), "c", 2)
    assert state.tokens() == ["c", "a", "b"]
    assert rolled(state, now=3).tokens() == ["c"]


def test_reverting_to_a_retiring_token_does_not_list_it_twice() -> None:
    state = promote(promote(TokenState(current="a"), "b", 1), "a", 2)
    assert state.tokens() == ["a", "b"]


def test_a_state_without_a_current_token_has_nothing_to_accept() -> None:
    assert rotation.observe_rollout(TokenState(), complete=True, now=5) == TokenState()


def test_a_stuck_rollout_retires_nothing_however_long_it_takes() -> None:
    state = promote(TokenState(current="a"), "b")
    for now in (10, 1000, 1e7):
        state = rotation.retire_due(rotation.observe_rollout(state, False, now), 0, now)
    assert state.tokens() == ["b", "a"]


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
    ],
)
def test_state_survives_an_operator_restart_through_its_json_form(state: TokenState) -> None:
    assert rotation.from_json(rotation.to_json(state)) == state


# --- a simulated Deployment, rolled one pod at a time with maxUnavailable 0 ---------------------------------


@dataclass
class Cluster:
    replicas: int = 3
    template: frozenset[str] = frozenset()
    pods: list[tuple[frozenset[str], bool]] = field(default_factory=list)  # (tokens, available)

    def set_template(self, tokens: frozenset[str]) -> None:
        self.template = tokens

    def step(self, rng: random.Random) -> None:
        """One controller or kubelet action: surge a new pod, make one Ready, or remove an old one."""
        new = [i for i, (t, _) in enumerate(self.pods) if t == self.template]
        old = [i for i, (t, _) in enumerate(self.pods) if t != self.template]
        unready = [i for i in new if not self.pods[i][1]]
        choices = []
        if len(new) < self.replicas and len(self.pods) < self.replicas + 1:
            choices.append("surge")
        if unready:
            choices.append("ready")
        available = sum(a for _, a in self.pods)
        if old and available - 1 >= self.replicas:  # maxUnavailable 0: never drop below the desired count
            choices.append("remove_old")
        if not choices:
            return
        action = rng.choice(choices)
        if action == "surge":
            self.pods.append((self.template, False))
        elif action == "ready":
            i = rng.choice(unready)
            self.pods[i] = (self.pods[i][0], True)
        else:
            del self.pods[rng.choice(old)]

    def complete(self) -> bool:
        return len(self.pods) == self.replicas and all(t == self.template and a for t, a in self.pods)

    def available_tokens(self) -> list[frozenset[str]]:
        return [t for t, a in self.pods if a]


@pytest.mark.parametrize("seed", range(200))
def test_no_available_pod_refuses_a_token_that_is_not_yet_retired(seed: int) -> None:
    """The retirement rule, over random interleavings of edits, rollout steps, reconciles and grace periods."""
    rng = random.Random(seed)
    grace = rng.choice([0.0, 3.0])
    state = promote(TokenState(), "t0")
    cluster = Cluster(replicas=rng.randint(1, 3))
    cluster.set_template(frozenset(state.tokens()))
    cluster.pods = [(cluster.template, True)] * cluster.replicas
    state = rolled(state, now=0, grace=grace)
    accepted_once: set[str] = set(state.tokens())
    edits = 0
    for now in range(1, 400):
        roll = rng.random()
        if roll < 0.08 and edits < 6:
            edits += 1
            state = promote(state, f"t{edits}", now)
        elif roll < 0.6:
            cluster.step(rng)
        # The operator's reconcile: render, observe the rollout, retire what is due.
        desired = frozenset(state.tokens())
        if cluster.template != desired:
            cluster.set_template(desired)
        state = rotation.observe_rollout(state, complete=cluster.complete(), now=now)
        if state.current_accepted_at is not None and state.current:
            accepted_once.add(state.current)
        state = rotation.retire_due(state, grace, now)
        cluster.set_template(frozenset(state.tokens()))
        # Every token still valid, and once accepted everywhere, is accepted by every available pod, except
        # during the rollout that retires it (by then it is no longer in the state).
        for token in set(state.tokens()) & accepted_once:
            for pod_tokens in cluster.available_tokens():
                assert token in pod_tokens, f"seed {seed}, t={now}: a pod refuses {token} before its retirement"
        assert cluster.available_tokens(), "maxUnavailable 0: some pod is always available"
