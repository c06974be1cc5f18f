"""The API's two sources of truth agree: the CRD schemas and the pydantic models accept the same manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from mcpg_operator import models

ROOT = Path(__file__).parents[3]
MANIFESTS = sorted((ROOT / "examples" / "manifests").glob("*.yaml"))
MODELS: dict[str, type[BaseModel]] = {
    "ResourceWatch": models.ResourceWatchSpec,
    "WebhookToken": models.WebhookTokenSpec,
}


def crd_schema(kind: str) -> dict[str, Any]:
    for path in (ROOT / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            schema: dict[str, Any] = _plain(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
            return schema
    raise AssertionError(kind)


def _plain(schema: Any) -> Any:
    """Drop the x-kubernetes-* extensions (the API server checks those; the e2e tier proves them)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def test_the_charts_crds_are_identical_to_crds() -> None:
    chart = {p.name: p.read_text() for p in (ROOT / "charts" / "mcpg" / "crds").glob("*.yaml")}
    source = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    assert chart == source


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_example_manifest_passes_the_crd_schema_and_the_model(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    jsonschema.validate(doc, crd_schema(doc["kind"]))
    MODELS[doc["kind"]].model_validate(doc["spec"])


def test_every_spec_field_of_the_models_exists_in_the_crd() -> None:
    def fields(schema: dict[str, Any], prefix: str = "") -> set[str]:
        out = set()
        for name, sub in schema.get("properties", {}).items():
            out.add(prefix + name)
            if sub.get("type") == "object" and "properties" in sub:
                out |= fields(sub, prefix + name + ".")
            if sub.get("type") == "array" and "properties" in sub.get("items", {}):
                out |= fields(sub["items"], prefix + name + "[].")
        return out

    def model_fields(model: type[Any], prefix: str = "") -> set[str]:
        out = set()
        for name, field in model.model_fields.items():
            alias = field.alias or name
            out.add(prefix + alias)
            for sub in _models_in(field.annotation):
                out |= model_fields(sub, prefix + alias + ("[]." if _is_list(field.annotation) else "."))
        return out

    for kind, model in MODELS.items():
        crd = fields(crd_schema(kind)["properties"]["spec"])
        assert model_fields(model) == crd, kind


def _is_list(annotation: Any) -> bool:
    return getattr(annotation, "__origin__", None) is list


def _models_in(annotation: Any) -> list[type[Any]]:
    args = getattr(annotation, "__args__", ()) or (annotation,)
    out = []
    for arg in args:
        inner = getattr(arg, "__args__", None)
        for candidate in inner or (arg,):
            if isinstance(candidate, type) and issubclass(candidate, models._Spec):
                out.append(candidate)
    return out


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"uri": "x://a", "uriTemplate": "x://{b}", "backend": {"http": {"url": "u"}}}, "exactly one of uri"),
        (
            {
                "uri": "x://a",
                "backend": {"http": {"url": "u"}},
                "watch": {"poll": {}, "webhook": {"tokenRef": {"name": "t"}}},
            },
            "at most one strategy",
        ),
        (
            {
                "uriTemplate": "x://{a}",
                "backend": {"http": {"url": "u"}},
                "watch": {"webhook": {"tokenRef": {"name": "t"}}},
            },
            "cannot use the webhook",
        ),
    ],
)
def test_the_model_refuses_what_the_crd_rules_refuse(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        models.ResourceWatchSpec.model_validate(spec)
