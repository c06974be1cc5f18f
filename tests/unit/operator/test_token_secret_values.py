"""A WebhookToken's Secret holding a value the gateway would refuse as a token (not path-segment ASCII).

The value is someone's edit of a Secret, so it is checked with the gateway's own rule before anything is
rendered: the WebhookToken says which Secret key is wrong (never the value), and the token in use keeps working,
neither replaced by the bad value nor revoked, until the Secret is fixed.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from mcpg_gateway.contract import check
from mcpg_operator import decision, observed, render, rotation, tokens
from mcpg_operator import writes as w
from mcpg_operator.rotation import TokenState
from mcpg_operator.settings import GatewayDefaults

NS, NOW = "shop", 5_000.0
DEFAULTS = GatewayDefaults()
IN_USE = TokenState(current="in-use-token", current_accepted_at=1.0)
REFUSED = pytest.mark.parametrize("value", ["s3crét-tøken", "s3cr with space", "s3cr/slash", "s3cr\n", "s3cr😀"])


def never() -> str:
    raise AssertionError("no token should be generated")


def snapshot(state: TokenState, value: str) -> observed.Snapshot:
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
        "spec": {"secretRef": {"name": "tok-secret", "key": "token"}},
    }
    state_data = {tokens.STATE_KEY: json.dumps(rotation.to_json(state))}
    secrets = [_secret(tokens.state_secret_name("tok"), state_data), _secret("tok-secret", {"token": value})]
    return observed.snapshot(NS, watches=[watch], webhook_tokens=[token], secrets=secrets)


def _secret(name: str, values: dict[str, str]) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return {"metadata": {"name": name}, "data": data}


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
    assert ready["message"].startswith("Secret tok-secret key token does not hold a usable token: ")
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
    assert render.rendered_tokens(decided.plan.config) == {"in-use-token"}
    assert decided.plan.verdicts["hook"].served
    assert condition(statuses(decided)["webhooktokens"], "Ready")["reason"] == "InvalidSpec"
    assert not [x for x in decided.writes if isinstance(x, w.ApplyObject) and x.ref.plural == "secrets"]


def test_fixing_the_secret_promotes_its_value_as_any_rotation_would() -> None:
    decided = decision.decide(snapshot(IN_USE, "fixed-token"), DEFAULTS, NOW, never)
    assert decided.states["tok"].current == "fixed-token"
    assert [r.token for r in decided.states["tok"].retiring] == ["in-use-token"]
    assert condition(statuses(decided)["webhooktokens"], "Ready")["reason"] != "InvalidSpec"
