"""The reconcile, read -> decide -> write, against an in-memory API: the order of its writes keeps rotation safe."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_operator import objects, tokens
from mcpg_operator.reconcile import read
from mcpg_operator.rotation import TokenState
from mcpg_testing.fake_kube import Call, FakeKube
from mcpg_testing.namespace import (
    BAD_AUTH,
    GENERATED,
    NS,
    Clock,
    condition,
    event_reasons,
    index,
    ready,
    resourcewatch,
    rotated,
    run,
    settle,
    state,
    template_tokens,
    webhooktoken,
)

# --- retirement waits for the rollout ------------------------------------------------------------------------


async def test_a_replaced_token_is_retired_only_after_the_rollout_carrying_its_replacement_completed(
    kube: FakeKube, clock: Clock
) -> None:
    await rotated(kube, clock)
    await run(kube, clock)
    assert template_tokens(kube) == {"new", "old"}
    for _ in range(5):  # however many passes run, and however long it takes
        kube.stall_rollout(NS)
        clock.now += 3600
        await run(kube, clock)
        assert template_tokens(kube) == {"new", "old"}
        assert state(kube).tokens() == ["new", "old"]
    kube.complete_rollout(NS)
    await run(kube, clock)
    completed = clock.now
    assert state(kube).current_accepted_at == completed
    assert state(kube).tokens() == ["new", "old"]  # the pods that rollout replaced still drain
    assert template_tokens(kube) == {"new", "old"}
    clock.now += objects.DRAIN_S
    await run(kube, clock)
    assert template_tokens(kube) == {"new"}
    assert state(kube) == TokenState(current="new", current_accepted_at=completed)


async def test_a_grace_period_keeps_the_old_token_after_the_rollout_and_asks_to_be_woken_when_it_ends(
    kube: FakeKube, clock: Clock
) -> None:
    # Every Secret the namespace names exists, so no missing one asks to be looked for sooner (`references`).
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "anonymous: {enabled: true}\n"})
    await rotated(kube, clock, grace=60)
    await run(kube, clock)
    kube.complete_rollout(NS)
    outcome = await run(kube, clock)
    assert template_tokens(kube) == {"new", "old"}
    assert outcome.next_check_s == objects.DRAIN_S  # first the replaced pods drain, and `new` is accepted...
    clock.now += objects.DRAIN_S
    outcome = await run(kube, clock)
    assert template_tokens(kube) == {"new", "old"}
    assert outcome.next_check_s == 60  # ...then the grace period, counted from that acceptance
    clock.now += 59
    assert (await run(kube, clock)).next_check_s == 1
    assert template_tokens(kube) == {"new", "old"}
    clock.now += 1
    await run(kube, clock)
    assert template_tokens(kube) == {"new"}


@pytest.mark.parametrize("grace", [0, 30])
async def test_the_old_token_is_carried_until_the_drain_and_the_grace_period_after_the_rollout_have_passed(
    kube: FakeKube, clock: Clock, grace: int
) -> None:
    await rotated(kube, clock, grace=grace)
    await run(kube, clock)
    kube.complete_rollout(NS)
    await run(kube, clock)
    completed = clock.now
    clock.now = completed + objects.DRAIN_S + grace - 0.5
    await run(kube, clock)
    assert template_tokens(kube) == {"new", "old"}
    assert state(kube).tokens() == ["new", "old"]
    clock.now = completed + objects.DRAIN_S + grace
    await run(kube, clock)
    assert template_tokens(kube) == {"new"}
    assert state(kube).tokens() == ["new"]


@pytest.mark.parametrize("grace", [0, 30])
async def test_a_rotation_posts_promoted_accepted_then_retired_whatever_the_grace_period(
    kube: FakeKube, clock: Clock, grace: int
) -> None:
    await rotated(kube, clock, grace=grace)
    kube.writes.clear()
    await run(kube, clock)
    kube.complete_rollout(NS)
    await run(kube, clock)
    assert token_events(kube.writes) == ["TokenPromoted"]  # not accepted while the replaced pods drain
    completed = clock.now
    clock.now = completed + objects.DRAIN_S
    await run(kube, clock)
    # With no grace period, the pass that reports `new` accepted also retires `old`: still in that order.
    assert token_events(kube.writes) == ["TokenPromoted", "TokenAccepted", *(["TokenRetired"] if grace == 0 else [])]
    clock.now = completed + objects.DRAIN_S + grace
    await run(kube, clock)
    kube.complete_rollout(NS)
    await run(kube, clock)
    assert token_events(kube.writes) == ["TokenPromoted", "TokenAccepted", "TokenRetired"]


def token_events(calls: list[Call]) -> list[str]:
    return [r for r in event_reasons(calls) if r.startswith("Token")]


async def test_a_rollout_of_an_older_configuration_accepts_nothing(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    deployment = kube.deployment(NS)
    assert deployment is not None
    await run(kube, clock)  # promotes: the template now names the configuration with both tokens
    # The controller reports a complete rollout, but of the template as it was before (generation not observed).
    deployment = kube.deployment(NS)
    assert deployment is not None
    deployment["status"]["observedGeneration"] = deployment["metadata"]["generation"] - 1
    await run(kube, clock)
    assert state(kube).current_accepted_at is None
    assert template_tokens(kube) == {"new", "old"}


async def test_a_token_rendered_for_a_watch_refused_for_its_auth_config_still_waits_for_the_rollout(
    kube: FakeKube, clock: Clock
) -> None:
    # The watch is rendered (the gateway serves it, refusing every MCP client) though its verdict is not served.
    await rotated(kube, clock)
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": BAD_AUTH})
    await run(kube, clock)
    assert ready(kube, "resourcewatches", "hook") == ("False", "InvalidAuthConfig")
    assert template_tokens(kube) == {"new", "old"}
    kube.stall_rollout(NS)
    await run(kube, clock)
    assert state(kube).tokens() == ["new", "old"]
    assert template_tokens(kube) == {"new", "old"}


async def test_a_token_no_rendered_watch_uses_is_retired_without_a_rollout(kube: FakeKube, clock: Clock) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "anonymous: {enabled: true}\n"})  # no recheck sooner
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="old")
    kube.put(resourcewatch(token=None))  # a poll watch: no gateway pod needs the token
    await settle(kube, clock)
    kube.set_secret(NS, "tok-secret", token="new")
    kube.writes.clear()
    await run(kube, clock)
    assert state(kube).tokens() == ["new", "old"]
    assert state(kube).current_accepted_at is None
    # No rollout to wait for: the replaced token waits only the drain and the grace period (0) from now on.
    assert (await run(kube, clock)).next_check_s == objects.DRAIN_S
    clock.now += objects.DRAIN_S
    await run(kube, clock)
    assert state(kube) == TokenState(current="new")
    # No pod can accept a token no served watch uses, so it is never reported accepted.
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "NotServed")
    assert event_reasons(kube.writes) == ["TokenPromoted", "TokenRetired"]
    assert [c for c in kube.writes if c.path.endswith(f"/deployments/{objects.NAME}")] == []


# --- the order of writes -------------------------------------------------------------------------------------


async def test_rotation_state_is_written_before_the_deployment_changes(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    state_secret = f"/secrets/{tokens.state_secret_name('tok')}"
    for step in ("promote", "retire"):
        kube.writes.clear()
        await run(kube, clock)
        deployment = index(kube.writes, "apply", f"/deployments/{objects.NAME}")
        assert index(kube.writes, "apply", state_secret) < deployment, step
        kube.complete_rollout(NS)
        await run(kube, clock)  # sees the rollout complete: the replaced pods drain before anything is retired
        clock.now += objects.DRAIN_S


async def test_a_configuration_secret_is_collected_only_once_no_replicaset_needs_it(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch(token=None))
    await settle(kube, clock)
    deployment = kube.deployment(NS)
    assert deployment is not None
    first = _config_secret(deployment)
    kube.put(resourcewatch(token=None, description="changed"))
    await run(kube, clock)  # the template names a new configuration; no ReplicaSet runs it yet
    assert _exists(kube, first)
    kube.stall_rollout(NS)  # the new ReplicaSet starts; the old one still runs pods
    await run(kube, clock)
    kube.complete_rollout(NS)  # the old ReplicaSet is scaled to 0 but kept for rollback
    await run(kube, clock)
    assert _exists(kube, first)
    kube.prune_replicasets(NS)
    kube.writes.clear()
    await run(kube, clock)
    assert [c for c in kube.writes if c.method == "delete"] == [
        Call("delete", f"/api/v1/namespaces/{NS}/secrets/{first}")
    ]
    assert _exists(kube, _config_secret(kube.deployment(NS) or {}))


async def test_the_configuration_a_template_names_is_kept_while_its_replicaset_may_still_be_starting(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch(token=None))
    await settle(kube, clock)
    kube.put(resourcewatch(token=None, description="second"))
    await run(kube, clock)
    second = _config_secret(kube.deployment(NS) or {})
    kube.put(resourcewatch(token=None, description="third"))  # before the controller made a ReplicaSet for it
    await run(kube, clock)
    assert _exists(kube, second)
    await run(kube, clock)  # the template no longer names it, and no ReplicaSet mounts it
    assert not _exists(kube, second)


def _config_secret(deployment: dict[str, Any]) -> str:
    return objects.config_secret_name(
        deployment["spec"]["template"]["metadata"]["annotations"][objects.HASH_ANNOTATION]
    )


def _exists(kube: FakeKube, secret: str) -> bool:
    return f"/api/v1/namespaces/{NS}/secrets/{secret}" in kube.objects


# --- Events and idempotence ----------------------------------------------------------------------------------


async def test_events_are_posted_once_per_transition_however_many_passes_run(kube: FakeKube, clock: Clock) -> None:
    kube.put(resourcewatch("polled", token=None, backend={"http": {"url": "http://u/", "headers": [_header()]}}))
    await run(kube, clock)
    await run(kube, clock)
    assert event_reasons(kube.writes) == ["SecretNotFound"]
    await rotated(kube, clock)
    kube.writes.clear()
    for _ in range(3):
        await run(kube, clock)
        kube.stall_rollout(NS)
    for _ in range(3):
        kube.complete_rollout(NS)
        await run(kube, clock)
    # The watch is served again once per completed rollout; `new` waits for the replaced pods to drain.
    assert event_reasons(kube.writes) == ["TokenPromoted", "Served"]
    # They have: `new` is accepted and (grace 0) `old` retired, which rolls the gateway again.
    clock.now += objects.DRAIN_S
    for _ in range(3):
        kube.complete_rollout(NS)
        await run(kube, clock)
    assert event_reasons(kube.writes) == ["TokenPromoted", "Served", "TokenAccepted", "TokenRetired", "Served"]


def _header() -> dict[str, Any]:
    return {"name": "Authorization", "secretKeyRef": {"name": "missing", "key": "token"}}


async def test_a_second_pass_with_nothing_changed_writes_nothing_at_all(kube: FakeKube, clock: Clock) -> None:
    kube.put(webhooktoken(grace=60))
    kube.set_secret(NS, "tok-secret", token="old")
    kube.put(resourcewatch())
    kube.put(resourcewatch("polled", token=None))
    await settle(kube, clock)
    kube.writes.clear()
    await run(kube, clock)
    assert kube.writes == []


@pytest.mark.parametrize("rollout", ["none", "stalled", "complete"])
async def test_running_the_reconcile_twice_in_a_row_writes_nothing_the_second_time(
    kube: FakeKube, clock: Clock, rollout: str
) -> None:
    await rotated(kube, clock, grace=30)  # mid-rotation, with every kind of object in play
    kube.put(webhooktoken("gen", generate=True))
    kube.put(resourcewatch("generated", token="gen"))
    outcome = await run(kube, clock)
    while outcome.rerun:
        outcome = await run(kube, clock)
    if rollout == "stalled":
        kube.stall_rollout(NS)
    elif rollout == "complete":
        kube.complete_rollout(NS)
    await run(kube, clock)
    kube.writes.clear()
    await run(kube, clock)
    assert kube.writes == []


# --- generated tokens ----------------------------------------------------------------------------------------


async def test_a_generated_token_secret_is_created_by_the_write_phase_and_promoted_on_the_next_pass(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(webhooktoken(generate=True))
    kube.put(resourcewatch())
    await read.read(kube, NS)
    assert kube.writes == []  # reading never writes
    outcome = await run(kube, clock)
    assert outcome.rerun
    # Only the Secret: no state (nothing promoted before it is read back), no gateway without it, no Warning.
    assert [(c.method, c.path) for c in kube.writes] == [("create", f"/api/v1/namespaces/{NS}/secrets/tok-secret")]
    assert kube.secret_value(NS, "tok-secret", "token") == GENERATED
    outcome = await run(kube, clock)
    assert not outcome.rerun
    assert state(kube).current == GENERATED
    assert template_tokens(kube) == {GENERATED}
    assert "TokenPending" not in event_reasons(kube.writes)


async def test_a_present_secret_is_never_overwritten_by_a_generated_one(kube: FakeKube, clock: Clock) -> None:
    kube.put(webhooktoken(generate=True))
    kube.set_secret(NS, "tok-secret", token="mine")
    kube.put(resourcewatch())
    outcome = await run(kube, clock)
    assert not outcome.rerun
    assert kube.secret_value(NS, "tok-secret", "token") == "mine"
    assert state(kube).current == "mine"


async def test_without_a_resourcewatch_no_gateway_is_applied_and_the_token_is_not_said_to_be_accepted(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="old")
    outcome = await run(kube, clock)
    assert kube.deployment(NS) is None
    assert outcome.config_hash is None
    assert state(kube) == TokenState(current="old")
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "NotServed")
