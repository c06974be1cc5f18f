"""The API's two sources of truth agree: the CRD schemas and the pydantic models accept the same manifests."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from mcpg_operator import api_types, models
from mcpg_testing.manifests import crd_schema

ROOT = Path(__file__).parents[3]
MANIFESTS = sorted((ROOT / "examples" / "manifests").glob("*.yaml"))
MODELS: dict[str, type[BaseModel]] = {
    "ResourceWatch": models.ResourceWatchSpec,
    "WebhookToken": models.WebhookTokenSpec,
}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_example_manifest_passes_the_crd_schema_and_the_model(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):  # a file may hold the objects a setup needs together
        if not doc["apiVersion"].startswith("mcpg.dev/"):
            continue  # a Kubernetes kind the setup needs too (the quickstart's upstream): the API server's to check
        jsonschema.validate(doc, crd_schema(doc["kind"]))
        MODELS[doc["kind"]].model_validate(doc["spec"])


# That the chart's crds/ are the copy of crds/, and that each CRD and its models name the same fields, is
# `hack/reference.py --check` (make lint; tests/unit/operator/test_reference.py), for every CRD.


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"uri": "x://a", "uriTemplate": "x://{b}", "backend": {"http": {"url": "http://u"}}}, "exactly one of uri"),
        (
            {
                "uri": "x://a",
                "backend": {"http": {"url": "http://u"}},
                "watch": {"poll": {}, "webhook": {"tokenRef": {"name": "t"}}},
            },
            "at most one strategy",
        ),
        (
            {
                "uriTemplate": "x://{a}",
                "backend": {"http": {"url": "http://u"}},
                "watch": {"webhook": {"tokenRef": {"name": "t"}}},
            },
            "cannot use the webhook",
        ),
    ],
)
def test_the_model_refuses_what_the_crd_rules_refuse(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        models.ResourceWatchSpec.model_validate(spec)


# --- references to other objects: a name the API server would refuse must be refused here first ---------------
# The operator creates the Secret a WebhookToken names (`generate: true`); a name the API server refuses would fail
# that write, and with it every reconcile of the namespace. Both sources of truth refuse such a name up front.

WEBHOOK_TOKEN = {"secretRef": {"name": "reports-webhook", "key": "token"}, "generate": True}
HEADERS = {
    "uri": "x://a",
    "backend": {"http": {"url": "http://u", "headers": [{"name": "A", "secretKeyRef": {"name": "s", "key": "k"}}]}},
}
SIGNED = {"tokenRef": {"name": "t"}, "signature": {"scheme": "github", "secretRef": {"name": "s"}}}
STRATEGIES = {
    "webhook": {"tokenRef": {"name": "t"}},
    "natsTopic": {"subject": "s", "urlSecretRef": {"name": "s", "key": "k"}},
    "postgresListenNotify": {"channel": "c", "urlSecretRef": {"name": "s", "key": "k"}},
    "sqlPolling": {"query": "select 1", "urlSecretRef": {"name": "s", "key": "k"}},
}
REFERENCES: list[tuple[str, dict[str, Any], tuple[str | int, ...]]] = [
    ("WebhookToken", WEBHOOK_TOKEN, ("secretRef", "name")),
    ("WebhookToken", WEBHOOK_TOKEN, ("secretRef", "key")),
    ("ResourceWatch", HEADERS, ("backend", "http", "headers", 0, "secretKeyRef", "name")),
    ("ResourceWatch", HEADERS, ("backend", "http", "headers", 0, "secretKeyRef", "key")),
    *(
        ("ResourceWatch", {"uri": "x://a", "backend": {"http": {"url": "http://u"}}, "watch": {strategy: spec}}, path)
        for strategy, spec in STRATEGIES.items()
        for path in (
            [("watch", strategy, "tokenRef", "name")]
            if strategy == "webhook"
            else [("watch", strategy, "urlSecretRef", "name"), ("watch", strategy, "urlSecretRef", "key")]
        )
    ),
    (
        "ResourceWatch",
        {"uri": "x://a", "backend": {"http": {"url": "http://u"}}, "watch": {"webhook": SIGNED}},
        ("watch", "webhook", "signature", "secretRef", "name"),
    ),
]
BAD_NAMES = ["Bad_Name", "Reports", "-x", "x-", "x.", ".x", "a..b", "a/b", "a b", "x" * 254, ""]
GOOD_NAMES = ["a", "0", "a-b", "a.b", "reports-webhook.v2", "x" * 253]
BAD_KEYS = ["a b", "a/b", "a:b", ".", "..", "..env", "", "x" * 254]
GOOD_KEYS = ["token", "A_b-9.c", ".env", "a..b", "x" * 253]


def with_value(spec: dict[str, Any], path: tuple[str | int, ...], value: str) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    node: Any = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


def spec_schema(kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = crd_schema(kind)["properties"]["spec"]
    return spec


def cases(good: bool) -> list[Any]:
    """One case per reference and value; names for `name` fields, Secret keys for `key` fields."""
    names, keys = (GOOD_NAMES, GOOD_KEYS) if good else (BAD_NAMES, BAD_KEYS)
    return [
        pytest.param(kind, spec, path, value, id=f"{kind}.{'.'.join(str(p) for p in path)}={value[:12]!r}")
        for kind, spec, path in REFERENCES
        for value in (names if path[-1] == "name" else keys)
    ]


@pytest.mark.parametrize(("kind", "spec", "path", "value"), cases(good=False))
def test_a_reference_the_api_server_would_refuse_is_refused_by_both_naming_the_field(
    kind: str, spec: dict[str, Any], path: tuple[str | int, ...], value: str
) -> None:
    bad = with_value(spec, path, value)
    with pytest.raises(jsonschema.ValidationError) as schema_error:
        jsonschema.validate(bad, spec_schema(kind))
    assert tuple(schema_error.value.absolute_path) == path
    with pytest.raises(ValidationError) as model_error:
        MODELS[kind].model_validate(bad)
    [error] = model_error.value.errors()
    assert error["loc"] == path
    assert ".".join(str(p) for p in path) in str(model_error.value)


@pytest.mark.parametrize(("kind", "spec", "path", "value"), cases(good=True))
def test_a_valid_reference_is_accepted_by_both(
    kind: str, spec: dict[str, Any], path: tuple[str | int, ...], value: str
) -> None:
    good = with_value(spec, path, value)
    jsonschema.validate(good, spec_schema(kind))
    MODELS[kind].model_validate(good)


def test_every_reference_in_the_crds_is_validated_as_a_kubernetes_name() -> None:
    """No `*Ref` in the CRDs escapes the rule, including one added later without a case above."""

    def refs(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, sub in schema.get("properties", {}).items():
            if name.endswith("Ref"):
                yield f"{path}.{name}", sub
            yield from refs(sub, f"{path}.{name}")
        if "items" in schema:
            yield from refs(schema["items"], f"{path}[]")

    found: set[str] = set()
    for kind in MODELS:
        for path, ref in refs(spec_schema(kind), kind):
            found.add(path)
            props = ref["properties"]
            assert (props["name"]["pattern"], props["name"]["maxLength"]) == (api_types.OBJECT_NAME_PATTERN, 253), path
            if "key" in props:
                assert (props["key"]["pattern"], props["key"]["maxLength"]) == (api_types.DATA_KEY_PATTERN, 253), path
    covered = {
        f"{kind}." + ".".join(str(p) for p in path[:-1] if not isinstance(p, int)) for kind, _, path in REFERENCES
    }
    assert {p.replace("[]", "") for p in found} == covered


def test_the_model_refuses_a_trailing_newline() -> None:
    # Python's `$` matches before a final newline, so jsonschema lets "x\n" through where the API server's RE2
    # does not; the model matches whole strings, as the API server does.
    for path in (("secretRef", "name"), ("secretRef", "key")):
        with pytest.raises(ValidationError):
            models.WebhookTokenSpec.model_validate(with_value(WEBHOOK_TOKEN, path, "x\n"))
