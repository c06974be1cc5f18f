"""What the operator reports is what the gateway's pods do, and one object at fault never silences the others.

Each test drives the reconcile against the in-memory API (`FakeKube`, which refuses what the API server refuses:
a Secret over 1 MiB, and any write a test marks as refused) while the Deployment controller's part and the
gateway pods' (applying each configuration in place, or not yet) are played through the fake's helpers.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from mcpg_operator import conditions as c
from mcpg_operator import events, observed, render, tokens
from mcpg_operator import kube as api
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.rotation import MAX_RETIRING, TokenState
from mcpg_operator.scheduler import Scheduler
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import (
    NS,
    Clock,
    condition,
    config_tokens,
    event_reasons,
    ready,
    resourcewatch,
    rotated,
    run,
    settle,
    state,
    webhooktoken,
)


def served_uris(kube: FakeKube) -> set[str]:
    config = kube.template_config(NS)
    return {e["uri"] for e in config["mcp"]["capabilities"]["resources"]}


def events_about(kube: FakeKube, name: str) -> list[tuple[str, str]]:
    return [
        (str(c.body["reason"]), str(c.body["message"]))
        for c in kube.writes
        if c.body and c.method == "create" and "/events/" in c.path and c.body["involvedObject"]["name"] == name
    ]


# --- 3. one object at fault is isolated; the rest of the namespace is served -----------------------------------


async def test_a_configuration_over_the_secret_limit_leaves_out_the_watches_that_push_it_over(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch("small", token=None))
    await settle(kube, clock)
    for i in range(18):  # 18 watches with 63 KB bodies: about 1.1 MiB of configuration
        kube.put(resourcewatch(f"big{i:02}", token=None, backend={"http": {"url": "http://u/", "body": "x" * 63_000}}))
    await settle(kube, clock)
    left_out = [f"big{i:02}" for i in range(18) if ready(kube, "resourcewatches", f"big{i:02}")[0] == "False"]
    assert left_out == ["big16", "big17"]  # the latest, which push it over
    assert ready(kube, "resourcewatches", "big17") == ("False", "ConfigTooLarge")
    assert condition(kube, "resourcewatches", "big17", "Stalled") == ("True", "ConfigTooLarge")
    assert "over a Secret's 1048576" in str(events_about(kube, "big17"))
    assert served_uris(kube) == {"x://small", *(f"x://big{i:02}" for i in range(16))}
    kube.put(resourcewatch("later", token=None))  # a watch added afterwards is still served
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "later") == ("True", "Served")


async def test_a_generated_secret_the_api_server_refuses_stalls_that_token_alone(kube: FakeKube, clock: Clock) -> None:
    quota = api.Refused(403, "Forbidden", 'secrets "tok-secret" is forbidden: exceeded quota: secrets, used: 10')
    kube.refuse(f"/api/v1/namespaces/{NS}/secrets/tok-secret", quota)
    kube.put(webhooktoken(generate=True))
    kube.put(resourcewatch())
    kube.put(resourcewatch("polled", token=None))
    outcome = await run(kube, clock)
    assert not outcome.rerun  # no busy loop on a write that keeps being refused
    await run(kube, clock)
    kube.complete_rollout(NS)
    await run(kube, clock)
    assert ready(kube, "resourcewatches", "polled") == ("True", "Served")  # the rest of the namespace is served
    assert condition(kube, "webhooktokens", "tok", "Stalled") == ("True", "SecretRefused")
    assert [r for r, _ in events_about(kube, "tok")] == ["SecretRefused"]
    assert quota.message in events_about(kube, "tok")[0][1]
    assert ready(kube, "resourcewatches", "hook") == ("False", "TokenPending")
    kube.writes.clear()
    await run(kube, clock)
    assert events_about(kube, "tok") == []  # reported once, not on every pass


# --- 4. TokenAccepted means every counted pod acknowledged a configuration holding the current token -------------


async def test_a_token_whose_watch_waits_on_a_missing_secret_is_not_accepted(kube: FakeKube, clock: Clock) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="t")
    header = {"name": "Authorization", "secretKeyRef": {"name": "missing", "key": "k"}}
    kube.put(resourcewatch(backend={"http": {"url": "http://u/", "headers": [header]}}))
    kube.put(resourcewatch("polled", token=None))
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "hook") == ("False", "SecretNotFound")
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "NotServed")
    message = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/webhooktokens/tok"]["status"]["conditions"]
    assert "no served ResourceWatch uses this token: hook is SecretNotFound" in str(message)
    assert "ResourceWatch hook: SecretNotFound" in str(events_about(kube, "tok"))  # the Event names every watch


async def test_a_token_is_accepted_only_once_a_pod_serving_it_is_ready(kube: FakeKube, clock: Clock) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="t")
    kube.put(resourcewatch())
    await run(kube, clock)
    kube.stall_rollout(NS)  # no pod is Ready yet: none counts, so nothing is accepted
    await run(kube, clock)
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "Rotating")
    kube.complete_rollout(NS)
    await run(kube, clock)
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("True", "RolledOut")


def token_status(kube: FakeKube) -> dict[str, Any]:
    status: dict[str, Any] = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/webhooktokens/tok"]["status"]
    return status


def accepted_condition(kube: FakeKube) -> tuple[str, str, str]:
    found = next(x for x in token_status(kube)["conditions"] if x["type"] == "TokenAccepted")
    return found["status"], found["reason"], found["message"]


def secret_version(kube: FakeKube) -> str:
    return str(kube.objects[f"/api/v1/namespaces/{NS}/secrets/tok-secret"]["metadata"]["resourceVersion"])


async def test_a_rotated_token_is_accepted_once_every_counted_pod_acknowledged_it_and_the_status_says_which(
    kube: FakeKube, clock: Clock
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": "anonymous: {enabled: true}\n"})  # no recheck sooner
    await rotated(kube, clock, grace=60)
    await run(kube, clock)
    new, version = render.token_digest("new"), secret_version(kube)
    first, second = kube.gateway_pods(NS)
    kube.apply_in_place(first)
    await run(kube, clock)
    waiting = (
        f"token {new} is not accepted yet: 1 of 2 gateway pods have it (Secret tok-secret at resourceVersion {version})"
    )
    assert accepted_condition(kube) == ("False", "Rotating", waiting)
    assert ready(kube, "webhooktokens", "tok") == ("False", "Rotating")
    assert token_status(kube)["phase"] == "Rolling"
    assert "currentAcceptedAt" not in token_status(kube)  # neither `old`'s time nor one not reached yet
    assert "accepted" not in token_status(kube)
    assert token_status(kube)["secretResourceVersion"] == version
    kube.apply_in_place(second)
    outcome = await run(kube, clock)
    accepted = (
        f"token {new} is accepted by all 2 counted gateway pod(s) (Secret tok-secret at resourceVersion {version})"
    )
    assert accepted_condition(kube) == ("True", "RolledOut", accepted)
    assert ready(kube, "webhooktokens", "tok") == ("True", "RetiringOldTokens")
    assert token_status(kube)["phase"] == "Retiring"  # `old` still has its grace period
    at = c.now_iso(clock.now)
    assert token_status(kube)["currentAcceptedAt"] == at
    assert token_status(kube)["accepted"] == {"digest": new, "secretResourceVersion": version, "at": at}
    assert outcome.next_check_s == 60


async def test_token_accepted_turns_false_naming_the_new_token_and_version_in_the_pass_that_reads_the_edit(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="old")
    kube.put(resourcewatch())
    await settle(kube, clock)
    assert token_status(kube)["accepted"]["digest"] == render.token_digest("old")
    version = kube.edit_secret(NS, "tok-secret", token="new")
    await run(kube, clock)  # the first pass that reads the edit: no pod has the new token yet
    status, digest = token_status(kube), render.token_digest("new")
    assert "accepted" not in status
    assert (status["currentDigest"], status["secretResourceVersion"]) == (digest, version)
    found, reason, message = accepted_condition(kube)
    assert (found, reason) == ("False", "Rotating")
    assert message.startswith(f"token {digest} is not accepted yet")
    assert message.endswith(f"(Secret tok-secret at resourceVersion {version})")
    assert render.token_digest("old") not in json.dumps(status["conditions"])  # no condition about `old` accepted
    await settle(kube, clock)
    assert token_status(kube)["accepted"]["secretResourceVersion"] == version  # what `kubectl wait` waits for


# --- 5. deleting the token Secret (or its key) revokes the token -------------------------------------------------


@pytest.mark.parametrize("how", ["delete the Secret", "remove its key"])
async def test_a_deleted_token_secret_revokes_the_token_and_says_so(kube: FakeKube, clock: Clock, how: str) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="leaked")
    kube.put(resourcewatch())
    kube.put(resourcewatch("polled", token=None))
    await settle(kube, clock)
    kube.writes.clear()
    if how == "delete the Secret":
        kube.remove(f"/api/v1/namespaces/{NS}/secrets/tok-secret")
    else:
        kube.set_secret(NS, "tok-secret", other="value")
    await settle(kube, clock)
    assert state(kube) == TokenState()
    assert served_uris(kube) == {"x://polled"}  # no configuration accepts the revoked token
    assert condition(kube, "webhooktokens", "tok", "TokenAccepted") == ("False", "SecretNotFound")
    assert ready(kube, "resourcewatches", "hook") == ("False", "TokenPending")
    assert [r for r, _ in events_about(kube, "tok")] == ["TokenRevoked", "SecretNotFound"]


# --- 6. a rollout the Deployment controller gave up on is reported, and recovers --------------------------------


async def test_a_stuck_rollout_is_reported_stalled_keeps_every_token_and_recovers(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    await run(kube, clock)
    kube.stall_rollout(NS, deadline_exceeded=True)
    await run(kube, clock)
    assert condition(kube, "resourcewatches", "hook", "Stalled") == ("True", "ProgressDeadlineExceeded")
    assert condition(kube, "webhooktokens", "tok", "Stalled") == ("True", "ProgressDeadlineExceeded")
    status = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/webhooktokens/tok"]["status"]
    assert status["phase"] == "Rolling"
    assert "has timed out progressing" in str(status["conditions"])
    assert config_tokens(kube) == {"new", "old"}
    assert "ProgressDeadlineExceeded" in event_reasons(kube.writes)
    kube.complete_rollout(NS)  # someone fixed the cause; the controller finished, and the pods caught up
    await settle(kube, clock)
    assert ready(kube, "resourcewatches", "hook") == ("True", "Served")
    assert ready(kube, "webhooktokens", "tok") == ("True", "RolledOut")
    assert config_tokens(kube) == {"new"}


# --- 7. lost rotation state, the cap, idempotent Events -----------------------------------------------------------


async def test_a_lost_rotation_state_keeps_every_token_the_configuration_carries(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)
    await run(kube, clock)  # promoted: the configuration carries new and old; pods still serve old
    kube.remove(f"/api/v1/namespaces/{NS}/secrets/{tokens.state_secret_name('tok')}")
    kube.writes.clear()
    await run(kube, clock)
    assert state(kube).tokens() == ["new", "old"]
    assert config_tokens(kube) == {"new", "old"}
    assert "RotationStateLost" in [r for r, _ in events_about(kube, "tok")]
    await run(kube, clock)
    assert config_tokens(kube) == {"new", "old"}  # no pod has acknowledged `new` yet
    await settle(kube, clock)
    assert config_tokens(kube) == {"new"}  # retired as usual once every pod acknowledged `new`


async def test_beyond_the_cap_the_token_the_pods_accept_is_never_evicted(kube: FakeKube, clock: Clock) -> None:
    await rotated(kube, clock)  # pods accept `old`; the Secret now holds `new`
    for i in range(MAX_RETIRING + 3):
        await run(kube, clock)  # no pod ever applies a configuration after that
        kube.set_secret(NS, "tok-secret", token=f"edit{i}")
    await run(kube, clock)
    kept = state(kube).tokens()
    assert "old" in kept
    assert "old" in config_tokens(kube)
    assert len(kept) == MAX_RETIRING + 1
    assert "TooManyRetiringTokens" in event_reasons(kube.writes)


async def test_two_operators_deciding_the_same_transition_post_one_event(kube: FakeKube, clock: Clock) -> None:
    kube.put(resourcewatch("polled", token=None, backend={"http": {"url": "http://u/", "headers": [_header()]}}))
    before = copy.deepcopy(kube.objects)
    await run(kube, clock)
    kube.objects = {**before, **{p: o for p, o in kube.objects.items() if "/events/" in p}}  # the same read again
    await run(kube, clock)
    posted = [c for c in kube.writes if c.method == "create" and "/events/" in c.path]
    assert len(posted) == 2  # both tried...
    assert len([p for p in kube.objects if "/events/" in p]) == 1  # ...one Event exists
    assert posted[0].path == posted[1].path


def _header() -> dict[str, Any]:
    return {"name": "Authorization", "secretKeyRef": {"name": "missing", "key": "token"}}


def test_an_event_name_is_a_valid_object_name_whatever_the_object_is_called() -> None:
    about = observed.Identity("v1", "ResourceWatch", "w" * 253, "uid", resource_version="7")
    name = events.name(events.Event(about, "Warning", "InvalidSpec", "m"))
    assert len(name) <= 253


# --- 7. a terminating namespace is handled quietly ----------------------------------------------------------------


async def test_a_namespace_being_deleted_ends_the_reconcile_quietly(
    kube: FakeKube, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    kube.put(resourcewatch("polled", token=None))
    terminating = api.refusal(403, TERMINATING)
    for path in (f"/api/v1/namespaces/{NS}/secrets", f"/apis/apps/v1/namespaces/{NS}/deployments/mcpg-gateway"):
        kube.refuse(path, terminating)
    kube.refuse(f"/api/v1/namespaces/{NS}/serviceaccounts/mcpg-gateway", terminating)
    runs: list[reconcile.Outcome | Exception] = []

    async def once(namespace: str) -> reconcile.Outcome:
        try:
            out = await reconcile.reconcile(kube, namespace, GatewayDefaults(), clock, fetch=kube.acknowledgement)
        except Exception as e:
            runs.append(e)
            raise
        runs.append(out)
        return out

    scheduler = Scheduler(once)
    scheduler.request(NS)
    await scheduler.idle(NS)
    await scheduler.close()
    assert len(runs) == 1  # not retried
    assert isinstance(runs[0], api.NamespaceTerminating)
    assert not [r for r in caplog.records if r.exc_info or r.levelname in ("ERROR", "WARNING")]


TERMINATING = (
    b'{"kind":"Status","reason":"Forbidden","message":"secrets is forbidden: unable to create new content in '
    b'namespace shop because it is being terminated","details":{"causes":[{"reason":"NamespaceTerminating"}]}}'
)


def test_the_api_servers_namespace_terminating_refusal_is_recognised() -> None:
    assert isinstance(api.refusal(403, TERMINATING), api.NamespaceTerminating)
    refused = api.refusal(422, b'{"reason":"Invalid","message":"Secret \\"Bad_Name\\" is invalid"}')
    assert (type(refused), refused.status, refused.message) == (api.Refused, 422, 'Secret "Bad_Name" is invalid')
