"""A ResourceWatch's `backend.http.maxResponseBytes` and `followRedirects` end to end in the operator: the CRD schema
and the model accept them within the gateway's bounds, they are rendered as the gateway's `max_response_bytes` and
`follow_redirects`, and left unset they are not rendered at all, so the gateway's defaults apply and no gateway is
rolled for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mcpg_gateway.contract import check, config
from mcpg_operator import conditions as c
from mcpg_operator import models, observed, render
from mcpg_operator.settings import GatewayDefaults

CRD = Path(__file__).parents[3] / "crds" / "resourcewatches.mcpg.dev.yaml"


def drive_watch(http: dict[str, Any]) -> observed.Watch:
    spec = {"uri": "drive://reports", "backend": {"http": {"url": "http://drive/api/reports", **http}}}
    identity = observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", "reports", "uid-r", 1, "2026-01-01T00:00:00Z")
    return observed.Watch(identity, spec, {})


def crd_schema() -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def manifest(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "ResourceWatch", "metadata": {"name": "r"}, "spec": spec}


def rendered_backend(rw: observed.Watch) -> dict[str, Any]:
    plan = render.plan([rw], {}, {}, GatewayDefaults())
    assert plan.verdicts["reports"].served
    [entry] = plan.config["mcp"]["capabilities"]["resources"]
    backend: dict[str, Any] = entry["backend"]
    return backend


def test_the_crd_and_the_model_accept_both_and_the_gateway_gets_them_as_its_own() -> None:
    rw = drive_watch({"maxResponseBytes": 65_536, "followRedirects": True})
    jsonschema.validate(manifest(rw.spec), crd_schema())
    backend = rendered_backend(rw)
    assert (backend["max_response_bytes"], backend["follow_redirects"]) == (65_536, True)
    [served] = check.load(render.plan([rw], {}, {}, GatewayDefaults()).config, environ={}).mcp.capabilities.resources
    assert (served.backend.max_response_bytes, served.backend.follow_redirects) == (65_536, True)


def test_left_unset_they_render_nothing_and_the_gateway_keeps_its_defaults() -> None:
    rw = drive_watch({})
    backend = rendered_backend(rw)
    assert "max_response_bytes" not in backend
    assert "follow_redirects" not in backend
    [served] = check.load(render.plan([rw], {}, {}, GatewayDefaults()).config, environ={}).mcp.capabilities.resources
    defaults = config.HttpBackend(kind="http", url="http://u/")
    assert served.backend.max_response_bytes == defaults.max_response_bytes == 10_485_760
    assert served.backend.follow_redirects is defaults.follow_redirects is False


def test_a_follow_redirects_set_to_false_is_rendered_as_set() -> None:
    assert rendered_backend(drive_watch({"followRedirects": False}))["follow_redirects"] is False


@pytest.mark.parametrize(
    ("http", "field"), [({"maxResponseBytes": 0}, "maxResponseBytes"), ({"followRedirects": "yes"}, "followRedirects")]
)
def test_the_crd_refuses_what_the_gateway_would_refuse(http: dict[str, Any], field: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate(manifest(drive_watch(http).spec), crd_schema())
    assert list(refused.value.absolute_path) == ["spec", "backend", "http", field]


def test_a_max_response_bytes_below_one_stalls_the_watch_naming_the_field() -> None:
    # The API server refuses it first; the model says the same for an object that got past an older CRD.
    plan = render.plan([drive_watch({"maxResponseBytes": 0})], {}, {}, GatewayDefaults())
    verdict = plan.verdicts["reports"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.INVALID_SPEC, True)
    assert "backend.http.maxResponseBytes" in verdict.message
    assert plan.config["mcp"]["capabilities"]["resources"] == []
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        models.HttpBackendSpec.model_validate({"url": "http://u/", "maxResponseBytes": 0})
