"""The pure decision: same snapshot, same decision; an acknowledgement counts only when it is of exactly what was
rendered, by every counted pod."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from mcpg_gateway.contract import check, digests
from mcpg_gateway.contract.acknowledgement import Acknowledgement, Serving
from mcpg_operator import actions as w
from mcpg_operator import objects, observed, render, rotation, tokens
from mcpg_operator import serving as serving_module
from mcpg_operator.reconcile import decide as decision
from mcpg_operator.rotation import Retiring, TokenState
from mcpg_operator.settings import GatewayDefaults

NS = "shop"
NOW = 5_000.0
DEFAULTS = GatewayDefaults()


def never() -> str:
    raise AssertionError("no token should be generated")


EMPTY = TokenState()


def snapshot(
    state: TokenState = EMPTY,
    value: str | None = "new",
    deployment: observed.Deployment | None = None,
    generate: bool = False,
    pods: tuple[observed.Pod, ...] = (),
) -> observed.Snapshot:
    watch = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "hook", "uid": "uid-hook"},
        "spec": {
            "uri": "x://hook",
            "backend": {"http": {"url": "http://u/"}},
            "watch": {"webhook": {"tokenRef": {"name": "tok"}}},
        },
    }
    token = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "WebhookToken",
        "metadata": {"name": "tok", "uid": "uid-tok"},
        "spec": {"secretRef": {"name": "tok-secret"}, "generate": generate},
    }
    secrets = [_secret(tokens.state_secret_name("tok"), {tokens.STATE_KEY: json.dumps(rotation.to_json(state))})]
    if value is not None:
        secrets.append(_secret("tok-secret", {"token": value}))
    snap = observed.snapshot(NS, watches=[watch], webhook_tokens=[token], secrets=secrets)
    return observed.Snapshot(snap.namespace, snap.watches, snap.tokens, snap.secrets, deployment, pods=pods)


def _secret(name: str, values: dict[str, str]) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return {"metadata": {"name": name}, "data": data}


def serving(config: dict[str, Any], name: str = "p", **pod: Any) -> observed.Pod:
    """A Ready pod that acknowledges serving `config`."""
    entries = list(digests.entries(config).values())
    served = Serving(digest=digests.document(config), entries=entries, since=1.0, source="secret")
    return observed.Pod(
        name,
        pod.get("ready", True),
        pod.get("deleting", False),
        "10.0.0.1",
        Acknowledgement(instance=name, serving=served),
    )


MID_ROTATION = TokenState(current="new", retiring=(Retiring("old", 1.0),))
ACCEPTED = TokenState(current="new", current_accepted_at=NOW, retiring=(Retiring("old", 1.0, NOW),))
"""MID_ROTATION once every counted pod acknowledged `new`, at NOW."""


def test_one_snapshot_always_gives_the_same_decision() -> None:
    snap = snapshot(TokenState(current="old", current_accepted_at=1.0))
    assert decision.decide(snap, DEFAULTS, NOW, never) == decision.decide(snap, DEFAULTS, NOW, never)
    with_pods = snapshot(ACCEPTED, pods=(serving({"mcp": {"capabilities": {}}}),))
    assert decision.decide(with_pods, DEFAULTS, NOW, never) == decision.decide(with_pods, DEFAULTS, NOW, never)


def test_acceptance_counts_only_when_every_counted_pod_serves_exactly_the_rendered_entries() -> None:
    rendered = decision.decide(snapshot(MID_ROTATION), DEFAULTS, NOW, never).plan.config
    other = decision.decide(snapshot(TokenState(current="new")), DEFAULTS, NOW, never).plan.config
    silent = observed.Pod("q", True, False, "10.0.0.2", missing="TimeoutError")
    for pods in [(), (serving(other),), (serving(rendered), serving(other, "q")), (serving(rendered), silent)]:
        decided = decision.decide(snapshot(MID_ROTATION, pods=pods), DEFAULTS, NOW, never)
        assert decided.states["tok"] == MID_ROTATION, pods
    # Not counted: a pod not Ready yet, and one being deleted that no longer answers.
    leaving = observed.Pod("r", True, True, "10.0.0.3", missing="ClientConnectorError")
    pods = (serving(rendered), serving(other, "q", ready=False), leaving)
    decided = decision.decide(snapshot(MID_ROTATION, pods=pods), DEFAULTS, NOW, never)
    assert decided.states["tok"].current_accepted_at == NOW


def test_a_retirement_renders_again_and_only_the_final_configuration_is_written() -> None:
    rendered = decision.decide(snapshot(MID_ROTATION), DEFAULTS, NOW, never).plan
    assert render.rendered_values(rendered.config, "token") == {"new", "old"}
    pods = (serving(rendered.config),)
    decided = decision.decide(snapshot(MID_ROTATION, pods=pods), DEFAULTS, NOW, never)  # grace 0
    assert decided.states["tok"] == TokenState(
        current="new", current_accepted_at=NOW, retiring=(Retiring("old", 1.0, NOW, NOW),)
    )
    assert render.rendered_values(decided.plan.config, "token") == {"new"}
    [config] = [x for x in decided.writes if isinstance(x, w.ApplyObject) and x.ref.name == objects.CONFIG_SECRET]
    assert config.body["metadata"]["annotations"][objects.DIGEST_ANNOTATION] == decided.plan.digest
    assert decided.next_check_s == serving_module.ACK_POLL_S  # the pods are to acknowledge it


def test_writes_come_stage_by_stage() -> None:
    decided = decision.decide(snapshot(TokenState(current="old", current_accepted_at=1.0)), DEFAULTS, NOW, never)
    stages = [x.stage for x in decided.writes]
    assert stages == sorted(stages)
    assert {w.Stage.ROTATION_STATE, w.Stage.GATEWAY, w.Stage.STATUS, w.Stage.EVENTS} <= set(stages)


def test_a_missing_generated_secret_is_the_only_write_of_its_pass_and_no_token_is_promoted_yet() -> None:
    decided = decision.decide(snapshot(value=None, generate=True), DEFAULTS, NOW, lambda: "fresh")
    [create] = decided.writes  # nothing else: the rest depends on a value not read back yet
    assert isinstance(create, w.CreateObject)
    assert create.stage == w.Stage.TOKEN_SECRETS
    assert base64.b64decode(create.body["data"]["token"]).decode() == "fresh"
    assert create.body["metadata"]["ownerReferences"][0]["uid"] == "uid-tok"
    assert decided.states["tok"] == TokenState()
    assert decided.rerun
    assert decided.plan.verdicts["hook"].reason == "TokenPending"


def test_statuses_are_decided_for_every_object_but_written_only_when_changed() -> None:
    snap = snapshot(TokenState(current="old", current_accepted_at=1.0), value="old")
    first = decision.decide(snap, DEFAULTS, NOW, never)
    assert len(first.statuses) == 2
    assert len([x for x in first.writes if isinstance(x, w.MergePatchStatus)]) == 2
    watch, token = snap.watches[0], snap.tokens[0]
    refs = {r.plural: r for r in first.statuses}
    again = observed.Snapshot(
        NS,
        (observed.Watch(watch.id, watch.spec, first.statuses[refs["resourcewatches"]]),),
        (observed.Token(token.id, token.spec, first.statuses[refs["webhooktokens"]], token.state),),
        snap.secrets,
    )
    assert [
        x for x in decision.decide(again, DEFAULTS, NOW + 1, never).writes if isinstance(x, w.MergePatchStatus)
    ] == []


# --- a Secret value the gateway would refuse as a token ----------------------------------------------------------
# The value is someone's edit of a Secret, so it is checked with the gateway's own rule before anything is
# rendered: the WebhookToken says which Secret key is wrong (never the value), and the token in use keeps working,
# neither replaced by the bad value nor revoked, until the Secret is fixed.

IN_USE = TokenState(current="in-use-token", current_accepted_at=1.0)
REFUSED = pytest.mark.parametrize("value", ["s3crét-tøken", "s3cr with space", "s3cr/slash", "s3cr\n", "s3cr😀"])


def statuses(decided: decision.Decision) -> dict[str, dict[str, Any]]:
    return {ref.plural: status for ref, status in decided.statuses.items()}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [x for x in status["conditions"] if x["type"] == type_]
    [one] = found
    return one


@REFUSED
def test_a_refused_secret_value_is_reported_on_the_webhook_token_naming_the_key_never_the_value(value: str) -> None:
    decided = decision.decide(snapshot(TokenState(), value), DEFAULTS, NOW, never)
    token = statuses(decided)["webhooktokens"]
    ready = condition(token, "Ready")
    assert (token["phase"], ready["status"], ready["reason"]) == ("Error", "False", "InvalidSpec")
    assert ready["message"].startswith("Secret tok-secret key token: a webhook token must ")
    assert "ASCII characters a URL path segment holds" in ready["message"]
    assert condition(token, "Stalled")["status"] == "True"
    posted = [x.body for x in decided.writes if isinstance(x, w.PostEvent)]
    assert "s3cr" not in json.dumps([*decided.statuses.values(), *posted], ensure_ascii=False)
    # Nothing the gateway would refuse is rendered: the watch waits for a token, and the configuration loads.
    assert decided.plan.verdicts["hook"].reason == "TokenPending"
    assert decided.states["tok"] == TokenState()
    check.load(decided.plan.config, environ={})


@REFUSED
def test_a_refused_secret_value_neither_replaces_nor_revokes_the_token_in_use(value: str) -> None:
    decided = decision.decide(snapshot(IN_USE, value), DEFAULTS, NOW, never)
    assert decided.states["tok"] == IN_USE
    assert render.rendered_values(decided.plan.config, "token") == {"in-use-token"}
    assert decided.plan.verdicts["hook"].served
    assert condition(statuses(decided)["webhooktokens"], "Ready")["reason"] == "InvalidSpec"
    state = tokens.state_secret_name("tok")
    assert not [x for x in decided.writes if isinstance(x, w.ApplyObject) and x.ref.name == state]


def test_fixing_the_secret_promotes_its_value_as_any_rotation_would() -> None:
    decided = decision.decide(snapshot(IN_USE, "fixed-token"), DEFAULTS, NOW, never)
    assert decided.states["tok"].current == "fixed-token"
    assert [r.token for r in decided.states["tok"].retiring] == ["in-use-token"]
    assert condition(statuses(decided)["webhooktokens"], "Ready")["reason"] != "InvalidSpec"
