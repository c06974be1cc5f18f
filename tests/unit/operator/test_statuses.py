"""What users read in `kubectl get`: phases, conditions and digests computed from rotation state."""

from __future__ import annotations

from typing import Any

from mcpg_operator import models, observed, render, serving, statuses, tokens
from mcpg_operator.rotation import Retiring, TokenState

NOW = 1_000.0
WT = observed.Token(
    observed.Identity("mcpg.dev/v1alpha1", "WebhookToken", "t", "uid", 4),
    {},
    {"currentAcceptedAt": "2026-01-01T00:00:00Z"},
    TokenState(),
)


def source(spec: models.WebhookTokenSpec | None = None) -> tokens.Source:
    spec = spec or models.WebhookTokenSpec.model_validate({"secretRef": {"name": "s"}, "gracePeriodSeconds": 30})
    return tokens.Source(spec)


def watch(generation: int, status: dict[str, Any] | None = None) -> observed.Watch:
    return observed.Watch(
        observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", "w", "uid-w", generation), {}, status or {}
    )


ROLLING = statuses.TokenView(accepted=False, carried=True)
ACCEPTED = statuses.TokenView(accepted=True, carried=True)
SERVED = statuses.WatchServing(served=True, serving=2, counted=2)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_rolling_token_clears_the_previous_acceptance_time_and_is_not_ready() -> None:
    status = statuses.token_status(
        WT, source(), TokenState(current="new", retiring=(Retiring("old", 10.0),)), ROLLING, NOW
    )
    assert status["phase"] == "Rolling"
    assert status["currentAcceptedAt"] is None  # a merge patch with None removes the old token's timestamp
    assert conditions(status)["TokenAccepted"] == ("False", "Rotating")
    assert status["retiring"] == [{"digest": render.token_digest("old"), "replacedAt": "1970-01-01T00:00:10Z"}]


def test_a_retiring_token_shows_when_it_will_be_dropped_and_only_digests() -> None:
    state = TokenState(current="new", current_accepted_at=100.0, retiring=(Retiring("old", 10.0, 100.0),))
    status = statuses.token_status(WT, source(), state, ACCEPTED, NOW)
    assert status["phase"] == "Retiring"
    assert status["retiring"][0]["retireAfter"] == "1970-01-01T00:02:10Z"  # accepted at 100 s + 30 s grace
    assert conditions(status)["Ready"] == ("True", "RetiringOldTokens")
    assert "new" not in str(status).replace(render.token_digest("new"), "")
    assert status["observedGeneration"] == 4


def test_a_missing_secret_says_how_to_fix_it() -> None:
    status = statuses.token_status(WT, source(), TokenState(), statuses.TokenView(False, False), NOW)
    assert status["phase"] == "Pending"
    assert conditions(status)["Ready"] == ("False", "SecretNotFound")
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["message"] == "Secret s key token is missing: create it, or set spec.generate: true"
    assert "Stalled" not in conditions(status)


def test_a_watch_is_ready_only_once_every_counted_pod_serves_its_entry_and_says_how_many_do_until_then() -> None:
    rw = watch(2)
    verdict = render.Verdict(True, "Served", "served", False, "poll", "x://w")
    waiting = statuses.WatchServing(served=False, serving=2, counted=3)
    rolling = statuses.watch_status(rw, verdict, "a" * 64, waiting, now=NOW)
    done = statuses.watch_status(rw, verdict, "a" * 64, SERVED, now=NOW)
    assert conditions(rolling)["Ready"] == ("False", "RollingOut")
    assert conditions(rolling)["Reconciling"][0] == "True"
    [ready] = [c for c in rolling["conditions"] if c["type"] == "Ready"]
    assert ready["message"] == "2 of 3 gateway pods serve this watch's configuration"
    assert conditions(done)["Ready"] == ("True", "Served")
    assert done["configHash"] == "a" * 16


def test_a_watch_whose_entry_a_pod_refused_is_stalled_naming_the_pod_and_the_problem() -> None:
    verdict = render.Verdict(True, "Served", "served", False, "poll", "x://w")
    refused = statuses.WatchServing(
        served=True, serving=2, counted=2, refused=serving.Refused((("pod-a", "spec.uri: no"),))
    )
    status = statuses.watch_status(watch(1), verdict, "a" * 64, refused, now=NOW)
    assert conditions(status)["Ready"] == ("False", "ConfigRefused")
    assert conditions(status)["Stalled"] == ("True", "ConfigRefused")
    assert conditions(status)["Reconciling"][0] == "False"


def test_an_invalid_watch_is_stalled_and_keeps_no_stale_fields() -> None:
    rw = watch(1, {"configHash": "old"})
    verdict = render.Verdict(False, "InvalidSpec", "spec.uri: bad", True)
    status = statuses.watch_status(rw, verdict, "a" * 64, SERVED, now=NOW)
    assert conditions(status)["Stalled"] == ("True", "InvalidSpec")
    assert status["configHash"] is None


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    verdict = render.Verdict(True, "Served", "served", False, "poll", "x://w")
    first = statuses.watch_status(watch(1), verdict, "a" * 64, SERVED, now=NOW)
    again = statuses.watch_status(watch(1, first), verdict, "a" * 64, SERVED, now=NOW + 60)
    assert conditions(again) == conditions(first)
    assert [c["lastTransitionTime"] for c in again["conditions"]] == [
        c["lastTransitionTime"] for c in first["conditions"]
    ]
    assert not statuses.changed(first, again)


def test_a_null_field_and_an_absent_one_are_the_same_status() -> None:
    assert not statuses.changed({"configHash": None, "conditions": []}, {"conditions": []})
    assert statuses.changed({"configHash": "a"}, {"configHash": None})
