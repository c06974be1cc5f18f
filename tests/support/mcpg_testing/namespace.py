"""One namespace in the in-memory API, for the reconcile's tests: objects as users write them, a pass of the
reconcile (asking the fake's gateway pods what they serve), and what it wrote, read back the way a user would.

The fixtures `kube` (a `FakeKube`) and `clock` (a settable `Clock`) come from tests/unit/operator/conftest.py.
"""

from __future__ import annotations

from typing import Any

from mcpg_operator import observed, tokens
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.rotation import TokenState
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing import fake_kube
from mcpg_testing.fake_kube import Call, FakeKube

NS = "shop"
DEFAULTS = GatewayDefaults(replicas=2)
GENERATED = "generated-token-value"
BAD_AUTH = "principals:\n  - {token_sha256: nothex, principal_id: alice}\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def resourcewatch(name: str = "hook", token: str | None = "tok", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"uri": f"x://{name}", "backend": {"http": {"url": "http://upstream/"}}, **spec}
    if token is not None:
        body["watch"] = {"webhook": {"tokenRef": {"name": token}}}
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": name, "namespace": NS},
        "spec": body,
    }


def webhooktoken(name: str = "tok", generate: bool = False, grace: int = 0) -> dict[str, Any]:
    spec = {"secretRef": {"name": f"{name}-secret"}, "generate": generate, "gracePeriodSeconds": grace}
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "WebhookToken",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


async def run(kube: FakeKube, clock: Clock) -> reconcile.Outcome:
    return await reconcile.reconcile(kube, NS, DEFAULTS, clock, token=lambda: GENERATED, fetch=kube.acknowledgement)


async def settle(kube: FakeKube, clock: Clock) -> None:
    """Reconcile, letting every rollout complete and every pod apply each configuration, until a pass has nothing
    left to write."""
    for _ in range(10):
        before = len(kube.writes)
        outcome = await run(kube, clock)
        caught_up = kube.complete_rollout(NS) if kube.deployment(NS) is not None else False
        if len(kube.writes) == before and not outcome.rerun and not caught_up:
            return
    raise AssertionError("the reconcile did not settle in 10 passes")


def config_tokens(kube: FakeKube) -> set[str]:
    """Every webhook token the configuration Secret (what each gateway pod applies) accepts."""
    return set(fake_kube.config_tokens(kube.template_config(NS)))


def served_tokens(kube: FakeKube) -> list[set[str]]:
    """The webhook tokens each counted gateway pod accepts, as it serves them."""
    return [set(tokens) for tokens in kube.served_tokens(NS)]


def state(kube: FakeKube, name: str = "tok") -> TokenState:
    secret = kube.objects.get(f"/api/v1/namespaces/{NS}/secrets/{tokens.state_secret_name(name)}")
    return tokens.parse_state(observed.decode(secret) if secret else None)


def event_reasons(calls: list[Call]) -> list[str]:
    return [str(c.body["reason"]) for c in calls if c.body and c.path.startswith(f"/api/v1/namespaces/{NS}/events/")]


def index(calls: list[Call], method: str, path_end: str) -> int:
    return next(i for i, c in enumerate(calls) if c.method == method and c.path.endswith(path_end))


def ready(kube: FakeKube, plural: str, name: str) -> tuple[str, str]:
    return condition(kube, plural, name, "Ready")


def condition(kube: FakeKube, plural: str, name: str, type_: str) -> tuple[str, str]:
    obj = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/{plural}/{name}"]
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == type_)
    return cond["status"], cond["reason"]


async def rotated(kube: FakeKube, clock: Clock, grace: int = 0) -> None:
    """A served webhook whose token `old` was accepted everywhere, then edited to `new` (not reconciled yet)."""
    kube.put(webhooktoken(grace=grace))
    kube.set_secret(NS, "tok-secret", token="old")
    kube.put(resourcewatch())
    await settle(kube, clock)
    assert config_tokens(kube) == {"old"}
    kube.set_secret(NS, "tok-secret", token="new")
