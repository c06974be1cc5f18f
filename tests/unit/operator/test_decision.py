"""The pure decision: same snapshot, same decision; the rollout counts only when it runs exactly what was rendered."""

from __future__ import annotations

import base64
import json
from typing import Any

from mcpg_operator import decision, objects, observed, render, rotation, tokens
from mcpg_operator import writes as w
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
    return observed.Snapshot(snap.namespace, snap.watches, snap.tokens, snap.secrets, deployment)


def _secret(name: str, values: dict[str, str]) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return {"metadata": {"name": name}, "data": data}


def running(config_hash: str, complete: bool = True) -> observed.Deployment:
    return observed.Deployment(config_hash, objects.config_secret_name(config_hash), complete, observed.Applied({}))


MID_ROTATION = TokenState(current="new", retiring=(Retiring("old", 1.0),))


def test_one_snapshot_always_gives_the_same_decision() -> None:
    snap = snapshot(TokenState(current="old", current_accepted_at=1.0))
    assert decision.decide(snap, DEFAULTS, NOW, never) == decision.decide(snap, DEFAULTS, NOW, never)


def test_the_rollout_counts_only_when_the_deployment_runs_exactly_the_rendered_configuration() -> None:
    rendered = decision.decide(snapshot(MID_ROTATION), DEFAULTS, NOW, never).plan.hash
    other = decision.decide(snapshot(TokenState(current="new")), DEFAULTS, NOW, never).plan.hash
    for deployment in (None, running(other), running(rendered, complete=False)):
        decided = decision.decide(snapshot(MID_ROTATION, deployment=deployment), DEFAULTS, NOW, never)
        assert decided.states["tok"] == MID_ROTATION
    decided = decision.decide(snapshot(MID_ROTATION, deployment=running(rendered)), DEFAULTS, NOW, never)
    assert decided.states["tok"] == TokenState(current="new", current_accepted_at=NOW)


def test_a_retirement_renders_again_and_only_the_final_configuration_is_applied() -> None:
    rendered = decision.decide(snapshot(MID_ROTATION), DEFAULTS, NOW, never).plan.hash
    decided = decision.decide(snapshot(MID_ROTATION, deployment=running(rendered)), DEFAULTS, NOW, never)
    assert render.rendered_tokens(decided.plan.config) == {"new"}
    [deployment] = [x for x in decided.writes if isinstance(x, w.ApplyObject) and x.ref.plural == "deployments"]
    assert deployment.body["spec"]["template"]["metadata"]["annotations"][objects.HASH_ANNOTATION] == decided.plan.hash
    assert not decided.rollout_complete  # the final configuration has not rolled out yet


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
