"""The reconcile, read -> decide -> write, against an in-memory API whose gateway pods apply each configuration in
place when the test says so: retirement waits for every pod's acknowledgement, and the order of the writes keeps
rotation safe."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_operator import objects, serving, tokens
from mcpg_operator.reconcile import read
from mcpg_operator.rotation import TokenState
from mcpg_testing.fake_kube import Call, FakeKube
from mcpg_testing.namespace import (
    BAD_AUTH,
    GENERATED,
    NS,
    Clock,
    condition,
    config_tokens,
    event_reasons,
    index,
    ready,
    resourcewatch,
    rotated,
    run,
    served_tokens,
    settle,
    state,
    webhooktoken,
)

# --- retirement waits for every pod's acknowledgement --------------------------------------------------------


async def test_a_replaced_token_is_retired_only_after_every_pod_acknowledged_its_replacement(
    kube: FakeKube, clock: Clock
) -> None:
    await rotated(kube, clock)
    await run(kube, clock)
    assert config_tokens(kube) == {"new", "old"}
    for _ in range(5):  # however many passes run, and however long it takes
        clock.now += 3600
        await run(kube, clock)
        assert config_tokens(kube) == {"new", "old"}
        assert state(kube).tokens() == ["new", "old"]
    kube.acknowledge(NS)
    await run(kube, clock)
    accepted = clock.now
    assert state(kube).current_accepted_at == accepted
    assert config_tokens(kube) == {"new"}  # no grace period: retired in the pass that saw it accepted...
    assert [r.retired_at for r in state(kube).retiring] == [accepted]  # ...and kept until the pods drop it
    assert all("old" in tokens for tokens in served_tokens(kube))
    kube.acknowledge(NS)
    await run(kube, clock)
    assert state(kube) == TokenState(current="new", current_accepted_at=accepted)
    assert all(tokens == {"new"} for tokens in served_tokens(kube))


async def test_a_grace_period_keeps_the_old_token_after_acceptance_and_asks_to_be_woken_when_it_ends(
    kube: FakeKube, clock: Clock
) -> None:
    # Every Secret the namespace names exists, so no missing one asks to be looked for sooner (`references`).
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "anonymous: {enabled: true}\n"})
    await rotated(kube, clock, grace=60)
    outcome = await run(kube, clock)
    assert outcome.next_check_s == serving.ACK_POLL_S  # the pods are still to acknowledge it
    kube.acknowledge(NS)
    outcome = await run(kube, clock)
    assert config_tokens(kube) == {"new", "old"}
    assert outcome.next_check_s == 60  # the grace period, counted from the acceptance
    clock.now += 59
    assert (await run(kube, clock)).next_check_s == 1
    assert config_tokens(kube) == {"new", "old"}
    clock.now += 1
    await run(kube, clock)
    assert config_tokens(kube) == {"new"}


@pytest.mark.parametrize("grace", [0, 30])
async def test_the_old_token_is_carried_until_the_grace_period_after_acceptance_has_passed(
    kube: FakeKube, clock: Clock, grace: int
) -> None:
    await rotated(kube, clock, grace=grace)
    await run(kube, clock)
    kube.acknowledge(NS)
    clock.now += 7  # however long the pods took, the grace period counts from the pass that saw them all
    await run(kube, clock)
    accepted = clock.now
    if grace:
        clock.now = accepted + grace - 0.5
        await run(kube, clock)
        assert config_tokens(kube) == {"new", "old"}
        assert state(kube).tokens() == ["new", "old"]
    clock.now = accepted + grace
    await run(kube, clock)
    assert config_tokens(kube) == {"new"}
    assert state(kube).tokens() == ["new"]


@pytest.mark.parametrize("grace", [0, 30])
async def test_a_rotation_posts_promoted_accepted_then_retired_whatever_the_grace_period(
    kube: FakeKube, clock: Clock, grace: int
) -> None:
    await rotated(kube, clock, grace=grace)
    kube.writes.clear()
    await run(kube, clock)
    assert token_events(kube.writes) == ["TokenPromoted"]  # not accepted before the pods acknowledge it
    kube.acknowledge(NS)
    await run(kube, clock)
    accepted = clock.now
    assert token_events(kube.writes) == ["TokenPromoted", "TokenAccepted"]
    clock.now = accepted + grace
    await run(kube, clock)  # retired: left out of the configuration, not yet dropped by the pods
    assert token_events(kube.writes) == ["TokenPromoted", "TokenAccepted"]
    kube.acknowledge(NS)
    await run(kube, clock)
    assert token_events(kube.writes) == ["TokenPromoted", "TokenAccepted", "TokenRetired"]


def token_events(calls: list[Call]) -> list[str]:
    return [r for r in event_reasons(calls) if r.startswith("Token")]


async def test_one_pod_still_serving_an_older_configuration_holds_acceptance_back(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    await run(kube, clock)  # promotes: the configuration Secret now carries new and old
    late, *others = kube.gateway_pods(NS)
    for pod in others:
        kube.apply_in_place(pod)
    for _ in range(3):
        await run(kube, clock)
        assert state(kube).current_accepted_at is None
        assert config_tokens(kube) == {"new", "old"}
    kube.apply_in_place(late)
    await run(kube, clock)
    assert state(kube).current_accepted_at == clock.now


async def test_a_pod_that_does_not_answer_holds_acceptance_back_until_it_is_gone(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    await run(kube, clock)
    kube.acknowledge(NS)
    silent = kube.gateway_pods(NS)[0]
    silent.answers = False  # Ready, so counted: what it serves is unknown
    await run(kube, clock)
    assert state(kube).current_accepted_at is None
    silent.deleting = True  # being deleted and silent: it is not counted
    kube.sync_pod(silent)
    await run(kube, clock)
    assert state(kube).current_accepted_at == clock.now


async def test_a_token_rendered_for_a_watch_refused_for_its_auth_config_still_waits_for_the_pods(
    kube: FakeKube, clock: Clock
) -> None:
    # The watch is rendered (the gateway serves it, refusing every MCP client) though its verdict is not served.
    await rotated(kube, clock)
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": BAD_AUTH})
    await run(kube, clock)
    assert ready(kube, "resourcewatches", "hook") == ("False", "InvalidAuthConfig")
    assert config_tokens(kube) == {"new", "old"}
    clock.now += 3600
    await run(kube, clock)
    assert state(kube).tokens() == ["new", "old"]
    assert config_tokens(kube) == {"new", "old"}


async def test_a_token_no_rendered_watch_uses_is_retired_without_waiting_for_a_pod(
    kube: FakeKube, clock: Clock
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "anonymous: {enabled: true}\n"})  # no recheck sooner
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="old")
    kube.put(resourcewatch(token=None))  # a poll watch: no gateway pod needs the token
    await settle(kube, clock)
    kube.set_secret(NS, "tok-secret", token="new")
    kube.writes.clear()
    outcome = await run(kube, clock)
    # No pod can accept it, so it waits for none: retired (grace 0) in the pass that promoted `new`...
    assert state(kube).tokens() == ["new"]
    assert state(kube).current_accepted_at is None
    assert outcome.next_check_s is None
    await run(kube, clock)  # ...and forgotten once it is plain that no pod serves it
    assert state(kube) == TokenState(current="new")
    # No pod can accept a token no served watch uses, so it is never reported accepted.
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "NotServed")
    assert event_reasons(kube.writes) == ["TokenPromoted", "TokenRetired"]
    assert [c for c in kube.writes if c.path.endswith(f"/deployments/{objects.NAME}")] == []
    assert [c for c in kube.writes if c.path.endswith(f"/secrets/{objects.CONFIG_SECRET}")] == []


# --- the order of writes -------------------------------------------------------------------------------------


async def test_rotation_state_is_written_before_the_configuration_that_carries_it(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    state_secret = f"/secrets/{tokens.state_secret_name('tok')}"
    for step in ("promote", "retire"):
        kube.writes.clear()
        await run(kube, clock)
        configuration = index(kube.writes, "apply", f"/secrets/{objects.CONFIG_SECRET}")
        assert index(kube.writes, "apply", state_secret) < configuration, step
        kube.acknowledge(NS)


# --- upgrading a namespace an older operator rendered ------------------------------------------------------------

LEGACY = "mcpg-gateway-config-0123456789abcdef"


def older_operators_namespace(kube: FakeKube) -> None:
    """What an operator before in-place configuration left: an immutable configuration Secret named by its hash,
    a template naming it, and that template's ReplicaSet, its pods running."""
    kube.put(resourcewatch(token=None))
    labels = {**objects.MANAGED, **objects.SELECTOR, objects.LEGACY_HASH_LABEL: "0123456789abcdef"}
    kube.set_secret(NS, LEGACY, **{"gateway.yaml": "mcp: {capabilities: {resources: [], resource_templates: []}}\n"})
    kube.objects[f"/api/v1/namespaces/{NS}/secrets/{LEGACY}"]["metadata"]["labels"] = labels
    template = {
        "metadata": {"labels": {**objects.MANAGED, **objects.SELECTOR}, "annotations": {"mcpg.dev/config-hash": "0"}},
        "spec": {"volumes": [{"name": "config", "secret": {"secretName": LEGACY}}], "containers": []},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": objects.NAME, "namespace": NS, "labels": {**objects.MANAGED, **objects.SELECTOR}},
        "spec": {"replicas": 2, "selector": {"matchLabels": objects.SELECTOR}, "template": template},
    }
    kube.put(deployment)
    kube.complete_rollout(NS)


async def test_an_older_operators_configuration_secret_is_collected_once_no_replicaset_mounts_it(
    kube: FakeKube, clock: Clock
) -> None:
    older_operators_namespace(kube)
    await run(kube, clock)  # the template now names the one configuration Secret; the old ReplicaSet runs
    assert _config_volume(kube) == objects.CONFIG_SECRET
    assert _exists(kube, LEGACY)
    kube.stall_rollout(NS)  # the new ReplicaSet starts; the old one still runs pods
    await run(kube, clock)
    kube.complete_rollout(NS)  # the old ReplicaSet is scaled to 0 but kept for rollback
    await run(kube, clock)
    assert _exists(kube, LEGACY)
    kube.prune_replicasets(NS)
    kube.writes.clear()
    await run(kube, clock)
    assert [c for c in kube.writes if c.method == "delete"] == [
        Call("delete", f"/api/v1/namespaces/{NS}/secrets/{LEGACY}")
    ]
    assert _exists(kube, objects.CONFIG_SECRET)  # never collected
    await settle(kube, clock)
    assert _exists(kube, objects.CONFIG_SECRET)


async def test_the_configuration_a_template_as_read_names_is_kept_while_its_replicaset_may_still_be_starting(
    kube: FakeKube, clock: Clock
) -> None:
    older_operators_namespace(kube)
    kube.prune_replicasets(NS)
    for rs in kube.replicasets(NS):  # the controller has not made the ReplicaSet of that template yet
        kube.remove(f"/apis/apps/v1/namespaces/{NS}/replicasets/{rs['metadata']['name']}")
    await run(kube, clock)
    assert _exists(kube, LEGACY)
    await run(kube, clock)  # the template no longer names it, and no ReplicaSet mounts it
    assert not _exists(kube, LEGACY)


def _config_volume(kube: FakeKube) -> str:
    deployment = kube.deployment(NS)
    assert deployment is not None
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    return str(volume["secret"]["secretName"])


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
    # The watch's entry carries the new token: not served until the pods serve it.
    assert event_reasons(kube.writes) == ["TokenPromoted"]
    for _ in range(3):
        kube.acknowledge(NS)
        await run(kube, clock)
    # `new` is accepted, and (grace 0) `old` retired in the same pass, which changes the entry again: once every
    # pod serves that one, the token is retired everywhere and the watch served again, each said once.
    assert event_reasons(kube.writes) == ["TokenPromoted", "TokenAccepted", "TokenRetired", "Served"]


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


@pytest.mark.parametrize("pods", ["none", "stalled", "acknowledged", "complete"])
async def test_running_the_reconcile_twice_in_a_row_writes_nothing_the_second_time(
    kube: FakeKube, clock: Clock, pods: str
) -> None:
    await rotated(kube, clock, grace=30)  # mid-rotation, with every kind of object in play
    kube.put(webhooktoken("gen", generate=True))
    kube.put(resourcewatch("generated", token="gen"))
    outcome = await run(kube, clock)
    while outcome.rerun:
        outcome = await run(kube, clock)
    if pods == "stalled":
        kube.stall_rollout(NS)
    elif pods == "acknowledged":
        kube.acknowledge(NS)
    elif pods == "complete":
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
    assert config_tokens(kube) == {GENERATED}
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
    assert outcome.config_digest is None
    assert state(kube) == TokenState(current="old")
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "NotServed")
