"""The retirement rule, end to end through the reconcile, over random interleavings of what happens in a namespace.

A namespace with a webhook watch and its WebhookToken is reconciled against the in-memory API while the gateway's
Deployment rolls one pod at a time (maxSurge 1, maxUnavailable 0, played by `GatewayPods`), and, at random:
the token Secret is edited, the namespace's auth Secret becomes invalid (and is fixed), a neighbouring watch
becomes invalid (and is fixed), and the operator's rotation-state Secret is deleted. Throughout, the rule holds,
judged from the pods alone (not from what the operator says): once every available pod accepts a token, no
available pod refuses it until a token that replaced it has been accepted by every available pod for the
grace period.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from mcpg_operator import tokens
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing.fake_controllers import GatewayPods
from mcpg_testing.fake_kube import FakeKube

NS = "sim"
BAD_AUTH = "principals:\n  - {token_sha256: nothex, principal_id: alice}\n"
GOOD_AUTH = "principals: []\n"


def hook(name: str, token: str) -> dict[str, Any]:
    spec = {
        "uri": f"x://{name}",
        "backend": {"http": {"url": "http://upstream/"}},
        "watch": {"webhook": {"tokenRef": {"name": token}}},
    }
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": name}, "spec": spec}


def neighbour(valid: bool) -> dict[str, Any]:
    """A poll watch that is fine, or one naming a plugin kind the gateway image does not install."""
    watch: dict[str, Any] = {"poll": {"intervalMs": 60_000}} if valid else {"plugin": {"kind": "not-installed"}}
    spec = {"uri": "x://neighbour", "backend": {"http": {"url": "http://upstream/"}}, "watch": watch}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": "neighbour"}, "spec": spec}


def webhook_token(grace: int) -> dict[str, Any]:
    spec = {"secretRef": {"name": "tok-secret"}, "gracePeriodSeconds": grace}
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "WebhookToken", "metadata": {"name": "tok"}, "spec": spec}


def put(kube: FakeKube, obj: dict[str, Any]) -> None:
    kube.put({**obj, "metadata": {**obj["metadata"], "namespace": NS}})


def order(token: str) -> int:
    """Tokens are t0, t1, ...: in the order the Secret held them."""
    return int(token.removeprefix("t"))


FORCED = {50: "bad auth", 90: "invalid neighbour", 130: "lost state", 170: "good auth", 210: "valid neighbour"}
"""Besides the random ones, every run has each disruption at least once, at these steps."""


@pytest.mark.parametrize("seed", range(25))
async def test_no_available_pod_refuses_a_token_before_a_replacement_is_accepted_everywhere(seed: int) -> None:
    rng = random.Random(seed)
    grace = rng.choice([0, 5])
    defaults = GatewayDefaults(replicas=rng.randint(1, 3))
    kube, now = FakeKube(), [1_000.0]
    pods = GatewayPods(kube, NS)
    put(kube, webhook_token(grace))
    kube.set_secret(NS, "tok-secret", token="t0")
    put(kube, hook("hook", "tok"))
    put(kube, neighbour(valid=True))
    edits, happened = 0, set[str]()
    accepted_at: dict[str, float] = {}
    """Each token, from when every available pod accepted it: from then on it is refused only once replaced."""
    for step in range(250):
        now[0] += 1
        roll = rng.random()
        event = FORCED.get(step) or _random_event(rng, roll, edits < 6)
        happened.add(event)
        if event == "edit":
            edits += 1
            kube.set_secret(NS, "tok-secret", token=f"t{edits}")
        elif event.endswith("auth"):
            kube.set_secret(NS, "mcpg-gateway-auth", **{"auth.yaml": BAD_AUTH if event == "bad auth" else GOOD_AUTH})
        elif event.endswith("neighbour"):
            put(kube, neighbour(valid=event == "valid neighbour"))
        elif event == "lost state":
            kube.remove(f"/api/v1/namespaces/{NS}/secrets/{tokens.state_secret_name('tok')}")
        elif event == "rollout step":
            pods.step(rng)
        if rng.random() < 0.5:
            await reconcile.reconcile(kube, NS, defaults, lambda: now[0])
            pods.sync()
        serving = pods.available_tokens()
        for token in {t for pod in serving for t in pod} - set(accepted_at):
            if all(token in pod for pod in serving):
                accepted_at[token] = now[0]
        for token, since in accepted_at.items():
            refused = [pod for pod in serving if token not in pod]
            if refused:
                replaced = [t for t, at in accepted_at.items() if order(t) > order(token) and at + grace <= now[0]]
                assert replaced, (
                    f"seed {seed} at {now[0]}: an available pod refuses {token} (accepted everywhere since {since}) "
                    "before any token that replaced it was accepted everywhere for the grace period"
                )
        assert serving or not accepted_at, "maxUnavailable 0: once a pod was available, one always is"
    assert edits, "the run rotated the token"
    assert len(accepted_at) > 1, "and a replacement was accepted everywhere"
    assert set(FORCED.values()) <= happened


def _random_event(rng: random.Random, roll: float, may_edit: bool) -> str:
    if roll < 0.06 and may_edit:
        return "edit"
    if roll < 0.08:
        return rng.choice(["bad auth", "good auth"])
    if roll < 0.10:
        return rng.choice(["invalid neighbour", "valid neighbour"])
    if roll < 0.11:
        return "lost state"
    return "rollout step" if roll < 0.65 else "nothing"
