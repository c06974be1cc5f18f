"""The status models in models.py describe exactly what statuses.py writes, and the CRDs' status schemas accept it.

statuses.py builds statuses as dicts (merge patches: None removes a stale field); the models give those fields their
descriptions and the CRD its schema. Every status built here goes through both, so neither can drift from the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from mcpg_operator import metrics, models, observed, render, serving, statuses, tokens
from mcpg_operator.rotation import Retiring, TokenState
from mcpg_testing.manifests import crd

ROOT = Path(__file__).parents[3]
NOW = 1_000.0
GATEWAY = statuses.Gateway("shop")
NO_CLIENTS = statuses.Gateway("shop", clients_problem="no principal may use the gateway")


def status_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def as_written(status: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores from a merge patch: a None removes the field."""
    return {k: v for k, v in status.items() if v is not None}


def watch(status: dict[str, Any] | None = None) -> observed.Watch:
    return observed.Watch(observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", "w", "uid-w", 3), {}, status or {})


def verdict(served: bool, strategy: str = "poll") -> render.Verdict:
    if served:
        return render.Verdict(True, "Served", "served", False, strategy, "drive://folder/reports")
    return render.Verdict(False, "InvalidSpec", "spec.uri: bad", True, strategy, "drive://folder/reports")


SERVED = statuses.WatchServing(served=True, serving=2, counted=2)
WAITING = statuses.WatchServing(
    served=False, serving=1, counted=2, late=serving.Late(31, (("mcpg-gateway-x", "serves 0123456789ab"),))
)
REFUSED = statuses.WatchServing(
    served=False, serving=0, counted=2, refused=serving.Refused((("mcpg-gateway-x", "spec.uri: no"),))
)

WATCH_STATUSES = {
    "served, every pod serving it, with its gateway": lambda: statuses.watch_status(
        watch(), verdict(True), "a" * 64, SERVED, now=NOW, gateway=GATEWAY
    ),
    "served webhook with its token Secret": lambda: statuses.watch_status(
        watch(), verdict(True, "webhook"), "a" * 64, SERVED, NOW, gateway=GATEWAY, token_secret="reports-webhook/token"
    ),
    "served signed webhook with both Secrets": lambda: statuses.watch_status(
        watch(),
        verdict(True, "webhook"),
        "a" * 64,
        SERVED,
        NOW,
        gateway=GATEWAY,
        token_secret="reports-route/token",
        signature_secret="reports-signing/secret",
    ),
    "served, but no client may use the gateway": lambda: statuses.watch_status(
        watch(), verdict(True), "a" * 64, SERVED, now=NOW, gateway=NO_CLIENTS
    ),
    "pods late with it": lambda: statuses.watch_status(watch(), verdict(True), "a" * 64, WAITING, now=NOW),
    "refused by a pod": lambda: statuses.watch_status(watch(), verdict(True), "a" * 64, REFUSED, now=NOW),
    "rollout stalled": lambda: statuses.watch_status(
        watch(), verdict(True), "a" * 64, WAITING, NOW, rollout_stalled=("ProgressDeadlineExceeded", "too slow")
    ),
    "invalid spec": lambda: statuses.watch_status(watch(), verdict(False), "", WAITING, now=NOW),
}

WT = observed.Token(observed.Identity("mcpg.dev/v1alpha1", "WebhookToken", "t", "uid", 4), {}, {}, TokenState())
SPEC = models.WebhookTokenSpec.model_validate({"secretRef": {"name": "s"}, "gracePeriodSeconds": 30})
READ = tokens.Source(SPEC, secret_value="t", secret_exists=True, secret_version="4711")
ACCEPTED = statuses.TokenView(accepted=True, carried=True, acknowledged=2, counted=2)
SIGNING = models.WebhookTokenSpec.model_validate({"secretRef": {"name": "s"}, "signatureScheme": "github"})
RETIRING = TokenState(current="new", current_accepted_at=900.0, retiring=(Retiring("old", 800.0, 900.0),))
REMOVING = TokenState(current="new", current_accepted_at=900.0, retiring=(Retiring("old", 800.0, 900.0, 950.0),))

TOKEN_STATUSES = {
    "ready": lambda: statuses.token_status(
        WT, READ, TokenState(current="t", current_accepted_at=900.0), ACCEPTED, NOW, gateway=GATEWAY
    ),
    "retiring": lambda: statuses.token_status(WT, READ, RETIRING, ACCEPTED, NOW, gateway=GATEWAY),
    "retiring signing secret": lambda: statuses.token_status(
        WT,
        tokens.Source(SIGNING, secret_value="new", secret_exists=True, secret_version="4712"),
        RETIRING,
        ACCEPTED,
        NOW,
        gateway=GATEWAY,
    ),
    "removing": lambda: statuses.token_status(WT, READ, REMOVING, ACCEPTED, NOW, gateway=GATEWAY),
    "refused by a pod": lambda: statuses.token_status(
        WT,
        READ,
        TokenState(current="new", retiring=(Retiring("old", 800.0),)),
        statuses.TokenView(
            accepted=False, carried=True, counted=2, refused=serving.Refused((("pod-a", "spec.uri: no"),))
        ),
        NOW,
    ),
    "rolling": lambda: statuses.token_status(
        WT,
        tokens.Source(SPEC),
        TokenState(current="new", retiring=(Retiring("old", 800.0),)),
        statuses.TokenView(accepted=False, carried=True),
        NOW,
    ),
    "unused": lambda: statuses.token_status(
        WT,
        tokens.Source(SPEC),
        TokenState(current="t"),
        statuses.TokenView(accepted=False, carried=False, not_carried_message="no served watch uses it"),
        NOW,
    ),
    "pending: no Secret": lambda: statuses.token_status(
        WT, tokens.Source(SPEC), TokenState(), statuses.TokenView(accepted=False, carried=False), NOW
    ),
    "error: invalid spec": lambda: statuses.token_status(
        WT, tokens.Source(None, spec_error="secretRef: required"), TokenState(), ACCEPTED, NOW
    ),
    "refused Secret": lambda: statuses.refused(WT, "forbidden by quota", NOW),
}


@pytest.mark.parametrize("build", WATCH_STATUSES.values(), ids=WATCH_STATUSES.keys())
def test_every_resource_watch_status_fits_its_model_and_the_crd(build: Any) -> None:
    status = build()
    models.ResourceWatchStatus.model_validate(status)
    jsonschema.validate(as_written(status), status_schema("ResourceWatch"))


@pytest.mark.parametrize("build", TOKEN_STATUSES.values(), ids=TOKEN_STATUSES.keys())
def test_every_webhook_token_status_fits_its_model_and_the_crd(build: Any) -> None:
    status = build()
    models.WebhookTokenStatus.model_validate(status)
    jsonschema.validate(as_written(status), status_schema("WebhookToken"))


def test_the_statuses_cover_the_new_fields() -> None:
    """The cases above exercise the gateway address, the webhook path and its Secret, and retiring tokens."""
    webhook = WATCH_STATUSES["served webhook with its token Secret"]()
    assert webhook["gateway"]["url"] == "http://mcpg-gateway.shop.svc:8080/mcp"
    assert webhook["webhookPath"] == "/webhooks/resource-updated/{token}"
    assert webhook["webhookTokenSecret"] == "reports-webhook/token"
    assert webhook["signatureSecret"] is None  # no signature: its field removes a stale value
    signed = WATCH_STATUSES["served signed webhook with both Secrets"]()
    assert (signed["webhookTokenSecret"], signed["signatureSecret"]) == (
        "reports-route/token",
        "reports-signing/secret",
    )
    retiring = TOKEN_STATUSES["retiring"]()
    assert retiring["retiring"][0]["retireAfter"]
    assert retiring["webhookPath"] == "/webhooks/resource-updated/{token}"
    assert retiring["accepted"] == {
        "digest": render.token_digest("new"),
        "secretResourceVersion": "4711",
        "at": "1970-01-01T00:15:00Z",
    }
    assert TOKEN_STATUSES["removing"]()["retiring"][0]["removing"] is True
    signing = TOKEN_STATUSES["retiring signing secret"]()
    assert (signing["webhookPath"], signing["currentDigest"]) == (None, render.token_digest("new"))
    assert signing["retiring"][0]["digest"] == render.token_digest("old")
    assert TOKEN_STATUSES["refused by a pod"]()["accepted"] is None


@pytest.mark.parametrize(
    ("model", "build"),
    [
        (models.ResourceWatchStatus, WATCH_STATUSES["served, every pod serving it, with its gateway"]),
        (models.WebhookTokenStatus, TOKEN_STATUSES["ready"]),
    ],
)
def test_a_status_field_the_model_does_not_know_is_refused_by_name(model: type[BaseModel], build: Any) -> None:
    # A field statuses.py starts writing without a model field (and so without a CRD schema entry, where the API
    # server would silently prune it) fails here.
    with pytest.raises(ValidationError, match="newField"):
        model.model_validate({**build(), "newField": 1})


def test_every_token_phase_the_operator_counts_is_a_phase_of_the_model_and_the_crd() -> None:
    annotation = models.WebhookTokenStatus.model_fields["phase"].annotation
    [phases, _none] = get_args(annotation)
    assert set(get_args(phases)) == set(metrics.TOKEN_PHASES)
    assert set(status_schema("WebhookToken")["properties"]["phase"]["enum"]) == set(metrics.TOKEN_PHASES)
