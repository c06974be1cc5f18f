"""The chart's `gateway.bounds`: what a namespace's McpGateway may ask for, passed to the operator as its settings.

The chart must reach every bound (a setting `helm install` cannot set protects no cluster), its defaults must be the
operator's own, and its schema must refuse what the operator would refuse at start.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mcpg_operator import settings

CHART = Path(__file__).parents[3] / "charts" / "mcpg"
VARIABLES = {
    "maxReplicas": "MCPG_GATEWAY_MAX_REPLICAS",
    "maxCpuRequest": "MCPG_GATEWAY_MAX_CPU_REQUEST",
    "maxCpuLimit": "MCPG_GATEWAY_MAX_CPU_LIMIT",
    "maxMemoryRequest": "MCPG_GATEWAY_MAX_MEMORY_REQUEST",
    "maxMemoryLimit": "MCPG_GATEWAY_MAX_MEMORY_LIMIT",
    "serviceTypes": "MCPG_GATEWAY_ALLOWED_SERVICE_TYPES",
    "serviceAnnotations": "MCPG_GATEWAY_ALLOWED_SERVICE_ANNOTATIONS",
    "nodePorts": "MCPG_GATEWAY_ALLOW_NODE_PORTS",
}
"""Each value under `gateway.bounds`, and the operator's variable the chart sets from it."""


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def as_rendered(value: Any) -> str:
    """A value as templates/deployment.yaml renders it into the variable: lists joined by commas."""
    if isinstance(value, list):
        return ",".join(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_charts_deployment_sets_every_bound_from_its_value() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    missing = [
        key for key, var in VARIABLES.items() if not re.search(rf"name: {var}, value: {{{{ [^}}]*\.{key}\b", template)
    ]
    assert missing == []
    assert set(values()["gateway"]["bounds"]) == set(VARIABLES)


def test_the_charts_default_bounds_are_the_operators_own() -> None:
    bounds = values()["gateway"]["bounds"]
    env = {VARIABLES[key]: as_rendered(value) for key, value in bounds.items()}
    assert settings.load({"POD_NAMESPACE": "ops", **env}).gateway.bounds == settings.GatewayBounds()


def schema_errors(change: dict[str, Any]) -> list[str]:
    doc = copy.deepcopy(values())
    doc["gateway"]["bounds"].update(change)
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]


def test_the_charts_schema_takes_its_own_defaults_and_every_kind_of_bound() -> None:
    assert schema_errors({}) == []
    good = {
        "maxReplicas": 1,
        "maxCpuRequest": 2,
        "maxCpuLimit": "1500m",
        "maxMemoryLimit": "none",
        "serviceTypes": ["LoadBalancer"],
        "serviceAnnotations": ["lb.example/", "external-dns.alpha.kubernetes.io/ttl", "*"],
        "nodePorts": True,
    }
    assert schema_errors(good) == []


@pytest.mark.parametrize(
    "change",
    [
        {"maxReplicas": 0},
        {"maxCpuRequest": "lots"},
        {"maxMemoryLimit": "-1Gi"},
        {"maxMemoryLimit": None},
        {"serviceTypes": []},
        {"serviceTypes": ["Ingress"]},
        {"serviceAnnotations": ["lb.example/*"]},
        {"nodePorts": "yes"},
        {"maxPods": 3},
    ],
)
def test_the_charts_schema_refuses_a_bound_the_operator_would_refuse(change: dict[str, Any]) -> None:
    assert schema_errors(change) != []
