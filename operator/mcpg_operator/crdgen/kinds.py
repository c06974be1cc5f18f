"""The three CRDs as declarations: names, scope, printer columns and the object's own text, beside its models.

Everything else of a CRD is the models' (`openapi.py`): `crd(kind)` assembles the whole CustomResourceDefinition
that `hack/reference.py` writes to crds/ and the chart. Adding a kind is one declaration here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from mcpg_operator import gateway_settings, models
from mcpg_operator import schema_markers as sm
from mcpg_operator.crdgen import openapi

_READY = '.status.conditions[?(@.type=="Ready")]'


@dataclass(frozen=True)
class Column:
    """A column `kubectl get` shows; `priority` 1 is shown with `-o wide` only. `comment` goes above it."""

    name: str
    type: str
    json_path: str
    priority: int = 0
    comment: str | None = None

    def as_crd(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        return out | ({"priority": self.priority} if self.priority else {}) | {"jsonPath": self.json_path}


READY = Column("Ready", "string", f"{_READY}.status")
REASON = Column("Reason", "string", f"{_READY}.reason")
MESSAGE = Column("Message", "string", f"{_READY}.message")
AGE = Column("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class Kind:
    """One CRD: its names, what the object is (its description), its models and `kubectl get` columns."""

    kind: str
    plural: str
    short_name: str
    description: str
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[Column, ...]
    rules: tuple[sm.Rule, ...] = ()

    @property
    def file(self) -> str:
        return f"{self.plural}.{models.GROUP}.yaml"


KINDS = (
    Kind(
        "ResourceWatch",
        "resourcewatches",
        "rw",
        "One MCP resource (or resource template) served by the namespace's gateway, with its backend and the watch "
        "that tells subscribers when it changes.",
        models.ResourceWatchSpec,
        models.ResourceWatchStatus,
        (
            READY,
            Column("Strategy", "string", ".status.strategy"),
            Column("URI", "string", ".status.uri"),
            REASON,
            MESSAGE,
            AGE,
        ),
    ),
    Kind(
        "WebhookToken",
        "webhooktokens",
        "wht",
        "A webhook token (or, with signatureScheme, a webhook signing secret) kept in a Secret. Edit the Secret to "
        "rotate: the operator keeps the old token valid until "
        "every gateway pod has acknowledged a configuration carrying the new one (plus any grace period). To wait "
        "for the new token: kubectl wait webhooktoken/NAME --for=jsonpath='{.status.accepted.secretResourceVersion}'"
        "=RV, where RV is the Secret's resourceVersion after your edit.",
        models.WebhookTokenSpec,
        models.WebhookTokenStatus,
        (
            READY,
            Column("Phase", "string", ".status.phase"),
            Column("Current", "string", ".status.currentDigest"),
            Column("Retiring", "integer", ".status.retiringCount"),
            Column(
                "Accepted",
                "date",
                ".status.currentAcceptedAt",
                priority=1,
                comment="Shown with -o wide: with the reason and message, a plain `kubectl get` is wide enough.",
            ),
            REASON,
            MESSAGE,
            AGE,
        ),
    ),
    Kind(
        "McpGateway",
        gateway_settings.PLURAL,
        "mcpgw",
        "How the namespace's gateway runs: replicas, its Service, its container's resources, a PodDisruptionBudget "
        "and a NetworkPolicy. Optional, at most one per namespace, named mcpg-gateway (the gateway Deployment it "
        "shapes). Every field left unset takes the operator's default (its MCPG_GATEWAY_* settings); deleting the "
        "object returns the namespace to those defaults.",
        gateway_settings.McpGatewaySpec,
        gateway_settings.McpGatewayStatus,
        (
            READY,
            Column("Replicas", "integer", ".status.replicas"),
            Column("Service Type", "string", ".status.serviceType"),
            REASON,
            MESSAGE,
            AGE,
        ),
        rules=(
            sm.Rule(
                f"self.metadata.name == '{gateway_settings.NAME}'",
                f"metadata.name: must be {gateway_settings.NAME} (one McpGateway per namespace, named after the "
                "gateway Deployment it shapes)",
            ),
        ),
    ),
)

# Every object has these; their text is Kubernetes' own (what controller-gen writes). The root `metadata` is
# Kubernetes' ObjectMeta: the API server refuses a CRD that says anything of it but its type.
STANDARD: dict[str, dict[str, Any]] = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    },
    "kind": {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents.",
    },
    "metadata": {"type": "object"},
}


def schema(kind: Kind, problems: list[str]) -> dict[str, Any]:
    """The version's openAPIV3Schema: the standard fields, then spec and status from the models."""
    parts = {}
    for part, model in (("spec", kind.spec), ("status", kind.status)):
        node = openapi.object_schema(model, f"{kind.kind}.{part}", problems)
        text = openapi.description(model)
        if not text:
            problems.append(f"{kind.kind}.{part}: {model.__name__} has no docstring to describe it")
        parts[part] = openapi.ordered(node | {"description": text or ""})
    root: dict[str, Any] = {"type": "object", "description": kind.description}
    root["properties"] = STANDARD | parts
    if kind.rules:
        root["x-kubernetes-validations"] = [r.as_schema() for r in kind.rules]
    return openapi.ordered(root)


def crd(kind: Kind, problems: list[str]) -> dict[str, Any]:
    """The whole CustomResourceDefinition of `kind`."""
    version = {
        "name": models.VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [c.as_crd() for c in kind.columns],
        "schema": {"openAPIV3Schema": schema(kind, problems)},
    }
    names = {
        "kind": kind.kind,
        "listKind": f"{kind.kind}List",
        "plural": kind.plural,
        "singular": kind.kind.lower(),
        "shortNames": [kind.short_name],
        "categories": ["mcpg"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{models.GROUP}", "labels": {"app.kubernetes.io/name": "mcpg"}},
        "spec": {"group": models.GROUP, "scope": "Namespaced", "names": names, "versions": [version]},
    }
