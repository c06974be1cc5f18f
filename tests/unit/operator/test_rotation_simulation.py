"""The retirement rule, end to end through the reconcile, over random interleavings of what happens in a namespace.

A namespace with a webhook watch and its WebhookToken is reconciled against the in-memory API while its gateway
pods (played by `GatewayPods`) start, turn Ready, are deleted (answering until they are gone) and, each on its own
time, apply the configuration Secret in place; and, at random: the token Secret is edited, the namespace's auth
Secret becomes invalid (and is fixed), a neighbouring watch becomes invalid (and is fixed), the operator's
rotation-state Secret is deleted, and the gateway's image changes (a rollout: new pods start on the newest
configuration). Throughout, per counted pod (Ready, or being deleted and still answering):

- from the moment the operator reports a token accepted, no counted pod refuses it until it is retired;
- when the operator reports a token retired, no counted pod accepts it any more;
- judged from the pods alone: once every counted pod accepts a token, no counted pod refuses it until a token that
  replaced it has been accepted by every counted pod for the grace period.

And the first rule is shown to catch an operator whose acceptance ignores one pod's acknowledgement.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest

from mcpg_operator import observed, render, serving, tokens
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing.fake_controllers import GatewayPods
from mcpg_testing.fake_kube import FakeKube

NS = "sim"
BAD_AUTH = "principals:\n  - {token_sha256: nothex, principal_id: alice}\n"
GOOD_AUTH = "principals: []\n"
TOKEN = f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/webhooktokens/tok"


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


FORCED = {
    50: "bad auth",
    90: "invalid neighbour",
    110: "new image",
    130: "lost state",
    170: "good auth",
    210: "valid neighbour",
}
"""Besides the random ones, every run has each disruption at least once, at these steps."""
IMAGES = ("gw:1", "gw:2")


class Observer:
    """What the operator said (statuses, Events) and what the pods did, checked against the rules after each step."""

    def __init__(self, kube: FakeKube, pods: GatewayPods, grace: int, seed: int) -> None:
        self.kube, self.pods, self.grace, self.seed = kube, pods, grace, seed
        self.by_digest = {render.token_digest(f"t{i}"): f"t{i}" for i in range(10)}
        self.reported: set[str] = set()
        """Tokens the operator reported accepted (`status.accepted`)."""
        self.everywhere: dict[str, float] = {}
        """Each token, from when every counted pod accepted it (judged from the pods alone)."""
        self.retired = 0

    def served(self) -> list[frozenset[str]]:
        return [p.tokens() for p in self.pods.counted()]

    def after_pass(self, posted: Iterable[dict[str, Any]]) -> None:
        accepted = (self.kube.objects[TOKEN].get("status") or {}).get("accepted")
        if accepted:
            self.reported.add(self.by_digest[accepted["digest"]])
        for event in posted:
            if event["reason"] == "TokenRetired":
                self.retired += 1
                token = self.by_digest[event["message"].split()[1]]
                assert all(token not in pod for pod in self.served()), (
                    f"seed {self.seed}: {token} reported retired while a counted pod still accepts it"
                )

    def check(self, now: float) -> None:
        served = self.served()
        state = tokens.parse_state(self.kube_state())
        for token in self.reported & set(state.tokens()):
            assert all(token in pod for pod in served), (
                f"seed {self.seed} at {now}: a counted pod refuses {token}, reported accepted and not yet retired"
            )
        for token in {t for pod in served for t in pod} - set(self.everywhere):
            if all(token in pod for pod in served):
                self.everywhere[token] = now
        for token, since in self.everywhere.items():
            if any(token not in pod for pod in served):
                replaced = [
                    t for t, at in self.everywhere.items() if order(t) > order(token) and at + self.grace <= now
                ]
                assert replaced, (
                    f"seed {self.seed} at {now}: a counted pod refuses {token} (accepted everywhere since {since}) "
                    "before any token that replaced it was accepted everywhere for the grace period"
                )

    def kube_state(self) -> dict[str, str] | None:
        found = self.kube.objects.get(f"/api/v1/namespaces/{NS}/secrets/{tokens.state_secret_name('tok')}")
        return observed.decode(found) if found else None


async def simulate(seed: int, steps: int = 250) -> Observer:
    rng = random.Random(seed)
    grace = rng.choice([0, 5])
    defaults = GatewayDefaults(replicas=rng.randint(1, 3), image=IMAGES[0])
    kube, now = FakeKube(), [1_000.0]
    pods = GatewayPods(kube, NS)
    seen = Observer(kube, pods, grace, seed)
    put(kube, webhook_token(grace))
    kube.set_secret(NS, "tok-secret", token="t0")
    put(kube, hook("hook", "tok"))
    put(kube, neighbour(valid=True))
    edits, happened = 0, set[str]()
    for step in range(steps):
        now[0] += 1
        event = FORCED.get(step) or _random_event(rng, edits < 6)
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
        elif event == "new image":
            defaults = defaults.model_copy(update={"image": IMAGES[defaults.image == IMAGES[0]]})
        elif event == "pod step":
            pods.step(rng, now[0])
        if rng.random() < 0.5:
            before = len(kube.writes)
            await reconcile.reconcile(kube, NS, defaults, lambda: now[0], fetch=kube.acknowledgement)
            pods.sync()
            seen.after_pass(c.body for c in kube.writes[before:] if c.body and "/events/" in c.path)
        seen.check(now[0])
    assert edits, "the run rotated the token"
    assert set(FORCED.values()) <= happened
    return seen


def _random_event(rng: random.Random, may_edit: bool) -> str:
    roll = rng.random()
    if roll < 0.06 and may_edit:
        return "edit"
    if roll < 0.08:
        return rng.choice(["bad auth", "good auth"])
    if roll < 0.10:
        return rng.choice(["invalid neighbour", "valid neighbour"])
    if roll < 0.11:
        return "lost state"
    if roll < 0.12:
        return "new image"
    return "pod step" if roll < 0.75 else "nothing"


@pytest.mark.parametrize("seed", range(25))
async def test_no_counted_pod_refuses_a_token_from_its_acceptance_until_its_retirement(seed: int) -> None:
    seen = await simulate(seed)
    assert len(seen.reported) > 1, "a replacement was reported accepted"
    assert len(seen.everywhere) > 1, "and accepted by every counted pod"
    assert seen.retired, "and a replaced token reported retired"


async def test_the_rule_catches_an_acceptance_that_ignores_one_pods_acknowledgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serve = serving.Pods.serve

    def ignoring_one(self: serving.Pods, entries: Iterable[str]) -> bool:
        """The last counted pod's acknowledgement is left out (a pod missed by a selector, say)."""
        others = self.counted[:-1] or self.counted
        return serve(serving.Pods(others, self.digest, self.written_at), entries)

    monkeypatch.setattr(serving.Pods, "serve", ignoring_one)
    with pytest.raises(AssertionError, match=r"a counted pod refuses t\d+, reported accepted"):  # some run notices
        await simulate_many(range(25))


async def simulate_many(seeds: Iterable[int]) -> None:
    for seed in seeds:
        await simulate(seed)
