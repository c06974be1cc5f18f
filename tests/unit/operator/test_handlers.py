"""The kopf wiring, asked of kopf itself: which Secret events reach `secret_event`, and what an McpGateway's reaches.

The question is put to the same registry call kopf's reactor makes for every watch event
(`registry._watching.get_handlers(cause=...)` in `kopf._core.reactor.processing.process_watching_cause`), with a
cause built the way the reactor builds it (`causes.detect_watching_cause`). kopf has no public API for "would
this handler run for this body?", so two private names are used: the `_watching` registry and
`kopf._core.intents.causes`. Both are pinned by kopf's version in pyproject.toml; if an upgrade moves them, this
test fails loudly at import or attribute access rather than passing silently.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal, cast

import kopf
import pytest
from kopf._core.intents import causes

from mcpg_operator import handlers
from mcpg_operator.reconcile import references

SECRETS = kopf.Resource(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)


def secret(labels: dict[str, str]) -> kopf.RawBody:
    # Only the labels decide (kopf's RawBody type declares no `data` anyway).
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u", "labels": labels},
    }


def handlers_for(
    resource: kopf.Resource, raw: kopf.RawBody, event: Literal["MODIFIED", "DELETED"] = "MODIFIED"
) -> list[object]:
    """The handler functions kopf would invoke for `event` of this object of `resource`."""
    cause = causes.detect_watching_cause(
        raw_event={"type": event, "object": raw},
        resource=resource,
        indices={},
        logger=logging.getLogger(__name__),
        patch=kopf.Patch(),
        body=kopf.Body(raw),
        memo=kopf.Memo(),
    )
    return [h.fn for h in kopf.get_default_registry()._watching.get_handlers(cause=cause)]


def reaches_secret_event(raw: kopf.RawBody) -> bool:
    """Whether kopf would invoke `handlers.secret_event` for a MODIFIED event of this Secret."""
    return handlers.secret_event in handlers_for(SECRETS, raw)


def test_an_mcpgateway_event_requests_its_namespaces_reconcile() -> None:
    resource = kopf.Resource(group="mcpg.dev", version="v1alpha1", plural="mcpgateways", namespaced=True)
    raw: kopf.RawBody = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "McpGateway",
        "metadata": {"name": "mcpg-gateway", "namespace": "ns", "uid": "u"},
    }
    assert handlers_for(resource, raw, "DELETED") == [handlers.mcpgateway_event]


@pytest.mark.parametrize(
    ("labels", "reacts"),
    [
        pytest.param({}, True, id="a user's unlabelled Secret"),
        pytest.param({"app.kubernetes.io/managed-by": "Helm"}, True, id="a user's Secret that Helm manages"),
        pytest.param({"mcpg.dev/generated-token": "true"}, True, id="a token Secret the operator generated"),
        pytest.param(
            {"app.kubernetes.io/managed-by": "mcpg-operator", "mcpg.dev/rotation-state": "true"},
            True,
            id="the operator's rotation state (losing it must be noticed)",
        ),
        pytest.param(
            {"app.kubernetes.io/managed-by": "mcpg-operator", "mcpg.dev/config-hash": "0123456789abcdef"},
            False,
            id="the operator's own configuration Secret",
        ),
        pytest.param(
            {"app.kubernetes.io/managed-by": "mcpg-operator", "mcpg.dev/bus-credentials": "true"},
            True,
            id="a namespace's bus credentials (the managed bus lists an account for each)",
        ),
        pytest.param(
            {"app.kubernetes.io/managed-by": "mcpg-operator", "app.kubernetes.io/name": "mcpg-bus"},
            False,
            id="the managed bus's own configuration Secret",
        ),
    ],
)
def test_secret_events_reach_the_reconcile_unless_the_secret_is_the_operators_output(
    labels: dict[str, str], reacts: bool
) -> None:
    assert reaches_secret_event(secret(labels)) is reacts


# --- what the API server is asked to send (server-side filters) ----------------------------------------------

DEPLOYMENTS = kopf.Resource(group="apps", version="v1", plural="deployments", kind="Deployment", namespaced=True)
RESOURCEWATCHES = kopf.Resource(group="mcpg.dev", version="v1alpha1", plural="resourcewatches", namespaced=True)


async def started_settings(monkeypatch: pytest.MonkeyPatch) -> kopf.OperatorSettings:
    """kopf's settings as the operator's startup handler leaves them (without connecting to any API server)."""

    async def no_start(*_: object) -> None:
        return None

    monkeypatch.setattr(handlers, "_start", no_start)
    monkeypatch.setattr(handlers, "_operator_settings", lambda: None)
    settings = kopf.OperatorSettings()
    # kopf's decorator types it as any activity (sync or async, every kwarg kopf passes); it is our coroutine.
    startup = cast(Callable[..., Awaitable[None]], handlers.startup)
    await startup(settings=settings, memo=kopf.Memo())
    return settings


def label_selector(settings: kopf.OperatorSettings, resource: kopf.Resource) -> str:
    """The labelSelector kopf puts on its list and watch requests of `resource` (as `kopf._cogs.clients` joins it)."""
    return ",".join(sorted(set(settings.watching.label_selectors.collect(resource))))


async def test_the_secret_watch_asks_the_api_server_only_for_secrets_labelled_for_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = await started_settings(monkeypatch)
    assert label_selector(settings, SECRETS) == references.SELECTOR
    # Listed a page at a time: however many labelled Secrets there are, one page is held at once.
    assert settings.watching.chunk_size == handlers.LIST_CHUNK


async def test_the_deployment_watch_asks_the_api_server_only_for_the_operators_deployments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = await started_settings(monkeypatch)
    assert label_selector(settings, DEPLOYMENTS) == "app.kubernetes.io/managed-by=mcpg-operator"
    assert label_selector(settings, RESOURCEWATCHES) == ""  # the operator's own kinds: every one matters


def test_an_event_that_can_only_be_our_own_status_write_landing_starts_no_pass() -> None:
    meta = {"name": "w", "namespace": "ns", "generation": 3}
    echo = {"metadata": meta, "status": {"observedGeneration": 3}}
    assert handlers.status_echo("MODIFIED", echo)
    for event_type in (None, "ADDED", "DELETED"):  # the first listing, a creation, a deletion
        assert not handlers.status_echo(event_type, echo)
    edited = {"metadata": {**meta, "generation": 4}, "status": {"observedGeneration": 3}}
    deleting = {"metadata": {**meta, "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"observedGeneration": 3}}
    for body in (edited, deleting, {"metadata": meta, "status": {}}, {"metadata": meta}):
        assert not handlers.status_echo("MODIFIED", body)
