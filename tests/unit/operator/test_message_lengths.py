"""Every status condition message a builder writes is under 120 characters before `set_condition` would clamp it.

Each builder is driven with the worst inputs Kubernetes allows: names of 253 characters (63 for labels), many pods,
many watches, long texts from the API server and the gateway. `set_condition` is wrapped to record what each builder
hands it, so the clamp (a last resort) cannot hide a builder that says too much.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpg_operator import actions as w
from mcpg_operator import conditions as c
from mcpg_operator import gateway_settings, models, observed, render, serving, statuses, tokens
from mcpg_operator.reconcile import acceptance
from mcpg_operator.rotation import Retiring, TokenState
from mcpg_operator.settings import GatewayDefaults

LONG = "n" * 253
"""The longest name of most objects (a DNS subdomain)."""
LABEL = "p" * 63
LONG_URI = "x://" + "u" * 2000
SERVER_TEXT = 'Service "mcpg-gateway" is invalid: ' + "spec.ports[0].nodePort: Invalid value: 30080; " * 40
NOW = 10_000.0
DEFAULTS = GatewayDefaults(allowed_origins=["https://app.example"], nats_url="nats://nats:4222")

names = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,251}[a-z0-9])?", fullmatch=True)
"""Object names Kubernetes allows, up to the longest."""


@contextlib.contextmanager
def recorded() -> Iterator[list[str]]:
    """Every message handed to `set_condition` inside the block, before its clamp."""
    found: list[str] = []
    real = c.set_condition

    def recording(
        existing: list[dict[str, Any]], type_: str, status: bool, reason: str, message: str, *rest: Any
    ) -> list[dict[str, Any]]:
        found.append(message)
        return real(existing, type_, status, reason, message, *rest)

    c.set_condition = recording  # type: ignore[assignment]
    try:
        yield found
    finally:
        c.set_condition = real


@pytest.fixture
def said() -> Iterator[list[str]]:
    with recorded() as found:
        yield found


def assert_short(messages: list[str]) -> None:
    assert messages, "no builder ran"
    for message in messages:
        assert len(message) < 120, message


def watch(name: str, status: dict[str, Any] | None = None, spec: dict[str, Any] | None = None) -> observed.Watch:
    identity = observed.Identity(
        "mcpg.dev/v1alpha1", "ResourceWatch", name, f"uid-{name[:40]}", 1, "2026-01-01T00:00:00Z"
    )
    return observed.Watch(identity, spec or {}, status or {})


def token(name: str) -> observed.Token:
    identity = observed.Identity("mcpg.dev/v1alpha1", "WebhookToken", name, "uid", 4)
    return observed.Token(identity, {}, {}, TokenState())


def late_pods(count: int, name: str) -> serving.Late:
    return serving.Late(10**9, tuple((f"{name}-{i}", f"no acknowledgement: {SERVER_TEXT}") for i in range(count)))


def refused(count: int, name: str) -> serving.Refused:
    return serving.Refused(tuple((f"{name}-{i}", f"spec.backend.http.url: {SERVER_TEXT}{i}") for i in range(count)))


def watch_cases(name: str) -> dict[str, Callable[[], object]]:
    served = render.Verdict(
        True, c.SERVED, c.fit("served by the gateway as {uri}", uri=LONG_URI), False, "poll", LONG_URI
    )
    many = statuses.WatchServing(served=False, serving=999, counted=1000, late=late_pods(1000, name))
    stalled = ("ProgressDeadlineExceeded", f'ReplicaSet "{name}" has timed out progressing. {SERVER_TEXT}')
    no_clients = statuses.Gateway("ns", render.no_principal(None))
    rw = watch(name)
    return {
        "late pods": lambda: statuses.watch_status(rw, served, "a" * 64, many, NOW),
        "refused": lambda: statuses.watch_status(
            rw, served, "a" * 64, statuses.WatchServing(True, 2, 2, refused=refused(50, name)), NOW
        ),
        "rollout stalled": lambda: statuses.watch_status(rw, served, "a" * 64, many, NOW, stalled),
        "no clients": lambda: statuses.watch_status(
            rw, served, "a" * 64, statuses.WatchServing(True, 2, 2), NOW, None, no_clients
        ),
        "waiting": lambda: statuses.watch_status(rw, served, "a" * 64, statuses.WatchServing(False), NOW),
    }


def source(name: str, version: str = "9" * 20) -> tokens.Source:
    spec = models.WebhookTokenSpec.model_validate({"secretRef": {"name": name, "key": LONG}})
    return tokens.Source(spec, secret_value="t", secret_exists=True, secret_version=version)


def token_cases(name: str) -> dict[str, Callable[[], object]]:
    wt, src = token(name), source(name)
    rolling = TokenState(current="new", retiring=tuple(Retiring(f"old{i}", 800.0) for i in range(64)))
    retiring = TokenState(current="new", current_accepted_at=900.0, retiring=rolling.retiring)
    late = statuses.TokenView(False, True, acknowledged=999, counted=1000, late=late_pods(1000, name))
    why = [(f"{name}{i}", c.SECRET_NOT_FOUND) for i in range(500)]
    missing = tokens.Source(src.spec, secret_exists=False, secret_version=None)
    return {
        "accepted": lambda: statuses.token_status(wt, src, retiring, statuses.TokenView(True, True, counted=1000), NOW),
        "rolling, late": lambda: statuses.token_status(wt, src, rolling, late, NOW),
        "rolling, no pod": lambda: statuses.token_status(wt, src, rolling, statuses.TokenView(False, True), NOW),
        "missing": lambda: statuses.token_status(wt, missing, TokenState(), statuses.TokenView(False, False), NOW),
        "unused": lambda: statuses.token_status(
            wt, src, rolling, statuses.TokenView(False, False, acceptance._unused("signing secret", why)), NOW
        ),
        "refused by pods": lambda: statuses.token_status(
            wt, src, rolling, statuses.TokenView(False, True, counted=3, refused=refused(9, name)), NOW
        ),
        "rollout stalled": lambda: statuses.token_status(
            wt, src, rolling, statuses.TokenView(False, True, rollout_stalled=("X", SERVER_TEXT)), NOW
        ),
        "secret refused": lambda: statuses.refused(wt, SERVER_TEXT, NOW),
        "apply failed": lambda: statuses.apply_failed({}, w.Failure(SERVER_TEXT, permanent=True), 1, NOW),
        "value refused": lambda: statuses.token_status(
            wt,
            tokens._refused(src, f"does not hold a usable token: {SERVER_TEXT}"),
            rolling,
            statuses.TokenView(False, True),
            NOW,
        ),
        "invalid spec": lambda: statuses.token_status(
            wt, tokens.source({"secretRef": {"name": LONG * 4}}, {}), rolling, statuses.TokenView(False, False), NOW
        ),
    }


@pytest.mark.parametrize("case", sorted(watch_cases(LONG)))
def test_each_resourcewatch_message_is_short_with_the_longest_names(case: str, said: list[str]) -> None:
    watch_cases(LONG)[case]()
    assert_short(said)


@pytest.mark.parametrize("case", sorted(token_cases(LONG)))
def test_each_webhooktoken_message_is_short_with_the_longest_names(case: str, said: list[str]) -> None:
    token_cases(LONG)[case]()
    assert_short(said)


@settings(max_examples=30, deadline=None)
@given(name=names, case=st.sampled_from(sorted(watch_cases("x")) + sorted(token_cases("x"))))
def test_every_status_message_is_short_whatever_the_names(name: str, case: str) -> None:
    with recorded() as found:
        {**watch_cases(name), **token_cases(name)}[case]()
    assert_short(found)


def hook(name: str, token_ref: str, uri: str, created: str = "2026-01-01T00:00:00Z") -> observed.Watch:
    spec = {
        "uri": uri,
        "backend": {"http": {"url": "http://u/"}},
        "watch": {"webhook": {"tokenRef": {"name": token_ref}}},
    }
    identity = observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", name, f"uid-{name}", 1, created)
    return observed.Watch(identity, spec, {})


def polled(
    name: str, uri: str, secret: str, key: str, created: str = "2026-01-01T00:00:00Z", **extra: Any
) -> observed.Watch:
    header = {"name": "Authorization", "secretKeyRef": {"name": secret, "key": key}}
    spec = {"uri": uri, "backend": {"http": {"url": "http://u/", "headers": [header]}}, **extra}
    identity = observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", name, f"uid-{name}", 1, created)
    return observed.Watch(identity, spec, {})


def test_every_verdict_message_is_short_with_the_longest_names() -> None:
    """Conflicts, missing references, refused values, invalid specs, a refused auth Secret: render's verdicts."""
    uri = "x://" + "u" * 1000
    secrets = {LONG: {LONG: "Bearer g"}, render.AUTH_SECRET: {render.AUTH_KEY: "principals: [{" + "x" * 5000}}
    held = {LONG: TokenState(current="same"), "b" + LONG[1:]: TokenState(current="same")}
    watches = [
        polled("a" + LONG[1:], uri, LONG, LONG),
        polled("b" + LONG[1:], uri, LONG, LONG, "2026-01-02T00:00:00Z"),  # the same URI
        polled("c" + LONG[1:], uri + "c", LONG, "k" + LONG[1:]),  # no such key
        polled("d" + LONG[1:], uri + "d", "s" + LONG[1:], LONG),  # no such Secret
        hook("e" + LONG[1:], LONG, uri + "e"),
        hook("f" + LONG[1:], "b" + LONG[1:], uri + "f", "2026-01-03T00:00:00Z"),  # the same token
        hook("g" + LONG[1:], "t" + LONG[1:], uri + "g"),  # no such WebhookToken
        polled("h" + LONG[1:], uri + "h", LONG, LONG, watch={"poll": {"ignore": ["bad" * 300] * 64, "intervalMs": 1}}),
        observed.Watch(observed.Identity("v", "ResourceWatch", LONG[:-1] + "i", "u", 1), {"uri": 1, "backend": {}}, {}),
    ]
    plan = render.plan(watches, held, secrets, DEFAULTS, schemes={"b" + LONG[1:]: "github"})
    messages = [v.message for v in plan.verdicts.values()]
    assert {v.reason for v in plan.verdicts.values()} >= {c.URI_CONFLICT, c.SECRET_NOT_FOUND, c.WEBHOOK_TOKEN_NOT_FOUND}
    assert_short(messages)
    assert_short([render._too_large(10**12, 10**12)])
    assert_short([x for x in (render.no_principal(None), render.no_principal({"principals": []})) if x])


def test_an_mcp_gateways_messages_are_short(said: list[str]) -> None:
    found = observed.McpGateway(
        observed.Identity("v", "McpGateway", "mcpg-gateway", "u", 1), {"replicas": "x" * 5000}, {}
    )
    shaped = gateway_settings.shape(found, DEFAULTS, None)
    gateway_settings.status(found, shaped, True, NOW)
    gateway_settings.status(found, gateway_settings.Shape(DEFAULTS), False, NOW)
    gateway_settings.status(found, gateway_settings.Shape(DEFAULTS), True, NOW)
    assert_short(said)


def test_the_clamp_is_a_last_resort_and_events_keep_the_detail() -> None:
    """The clamp cuts what a builder let through, and an Event's message keeps every problem within 1 KiB."""
    assert len(c.set_condition([], "Ready", False, "X", "y" * 5000, 1, NOW)[0]["message"]) == c.MESSAGE_MAX
    detail = refused(3, "pod").detail()
    assert "pod-2" in detail
    assert len(c.clamp_event("é" * 5000).encode()) <= c.EVENT_MESSAGE_MAX
