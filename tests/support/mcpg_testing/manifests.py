"""Manifests the end-to-end tests apply, built once; and the CRDs of `crds/`, as the tests read their schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).parents[3] / "crds"


def crd(kind: str) -> dict[str, Any]:
    """The CRD in `crds/` that defines `kind`."""
    for path in sorted(CRDS.glob("*.yaml")):
        loaded: dict[str, Any] = yaml.safe_load(path.read_text())
        if loaded["spec"]["names"]["kind"] == kind:
            return loaded
    raise LookupError(f"no CRD in {CRDS} defines {kind}")


def crd_schema(kind: str) -> dict[str, Any]:
    """`kind`'s openAPIV3Schema without the x-kubernetes-* extensions, for `jsonschema` (the API server checks
    those: the e2e tier proves them)."""
    schema: dict[str, Any] = _plain(crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    return schema


def _plain(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def polled(name: str) -> dict[str, Any]:
    """The smallest ResourceWatch: polled every 60 s, needing no Secret."""
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": name},
        "spec": {"uri": f"x://{name}", "backend": {"http": {"url": "http://upstream/"}}},
    }


def refusing_gateway_services(
    name: str, namespace: str, message: str, operations: tuple[str, ...] = ("CREATE", "UPDATE")
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding refusing `operations` on the gateway Service in `namespace`
    with `message`: the API server's refusal of one object, for reasons outside the namespace's own spec."""
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations), "resources": ["services"]}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [{"expression": "object.metadata.name != 'mcpg-gateway'", "message": message}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    return [policy, binding]
