"""openapi.py, kinds.py, mirror.py: the CRDs come from the models, are structural as the API server requires, accept
every example, and carry the contract's own numbers for every mirrored field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, Field

from mcpg_gateway.contract import config
from mcpg_operator import models
from mcpg_operator import schema_markers as sm
from mcpg_operator.crdgen import kinds, openapi
from mcpg_operator.mirror import mirrored

ROOT = Path(__file__).parents[3]
MANIFESTS = sorted((ROOT / "examples" / "manifests").glob("*.yaml"))
BY_KIND = {kind.kind: kind for kind in kinds.KINDS}
# What a structural schema may say (apiextensions' structural-schema rules): no references, no schema logic with
# types in it, no nullable, and no keywords the API server drops.
FORBIDDEN = frozenset({"$ref", "$defs", "definitions", "oneOf", "allOf", "not", "nullable", "title", "const"})


def generated(kind: str) -> dict[str, Any]:
    problems: list[str] = []
    crd = kinds.crd(BY_KIND[kind], problems)
    assert problems == []
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def nodes(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below `schema` (itself included), each with its path."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: dict[str, Any], path: str) -> Iterator[str]:
    for where, node in nodes(schema, path):
        if FORBIDDEN & set(node):
            yield f"{where}: {sorted(FORBIDDEN & set(node))}"
        if "type" not in node and not node.get("x-kubernetes-int-or-string"):
            yield f"{where}: no type"
        if node.get("x-kubernetes-int-or-string") and node.get("anyOf") != [{"type": "integer"}, {"type": "string"}]:
            yield f"{where}: int-or-string with another anyOf"
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            yield f"{where}: anyOf outside int-or-string"
        if "properties" in node and "additionalProperties" in node:
            yield f"{where}: properties and additionalProperties"
        if node.get("type") == "object" and not (
            {"properties", "additionalProperties", "x-kubernetes-preserve-unknown-fields"} & set(node)
        ):
            yield f"{where}: an object with nothing below it would be pruned empty"
        yield from (
            f"{where}: required {r!r} is no property"
            for r in node.get("required", [])
            if r not in node.get("properties", {})
        )
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in node["items"].get("required", []):
                yield f"{where}: list map key {key!r} is not required in its items"


@pytest.mark.parametrize("kind", sorted(BY_KIND))
def test_every_generated_schema_is_structural(kind: str) -> None:
    schema = generated(kind)
    # The root `metadata` is Kubernetes' own ObjectMeta: `type: object` and nothing else, or the CRD is refused.
    assert schema["properties"]["metadata"] == {"type": "object"}
    problems = [p for p in structural_problems(schema, kind) if not p.startswith(f"{kind}.metadata:")]
    assert problems == []


@pytest.mark.parametrize("kind", sorted(BY_KIND))
def test_every_default_in_a_generated_schema_is_valid_there(kind: str) -> None:
    # The API server refuses a CRD whose default its own schema would refuse (and prunes nothing from it).
    for where, node in nodes(generated(kind), kind):
        if "default" in node:
            plain = {k: v for k, v in node.items() if k != "default" and not k.startswith("x-kubernetes")}
            assert jsonschema.Draft4Validator(plain).is_valid(node["default"]), where


def plain(schema: Any) -> Any:
    """The schema without `x-kubernetes-*` (the API server's, which `jsonschema` does not know)."""
    if isinstance(schema, dict):
        return {k: plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    return [plain(v) for v in schema] if isinstance(schema, list) else schema


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_example_manifest_passes_the_generated_schema_and_the_model(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc["apiVersion"].startswith("mcpg.dev/"):
            continue  # a Kubernetes kind the setup needs too (the quickstart's upstream): the API server's to check
        jsonschema.validate(doc, plain(generated(doc["kind"])))
        BY_KIND[doc["kind"]].spec.model_validate(doc["spec"])


def http_timeout(kind_schema: dict[str, Any]) -> dict[str, Any]:
    http = kind_schema["properties"]["spec"]["properties"]["backend"]["properties"]["http"]
    timeout: dict[str, Any] = http["properties"]["timeoutMs"]
    return timeout


def test_a_mirrored_field_carries_the_contracts_default_bounds_and_description() -> None:
    contract = config.HttpBackend.model_fields["timeout_ms"]
    mine = models.HttpBackendSpec.model_fields["timeout_ms"]
    assert (mine.default, mine.metadata) == (contract.default, contract.metadata)
    node = http_timeout(generated("ResourceWatch"))
    assert (node["default"], node["minimum"], node["maximum"]) == (10_000, 1, 300_000)
    assert node["description"] == " ".join(f"{contract.description} In milliseconds.".split())


def test_a_mirrored_field_takes_an_override_and_an_added_bound() -> None:
    class Spec(BaseModel):
        bytes_: int | None = mirrored(config.HttpBackend, "max_response_bytes", default=None, le=99)

    field = Spec.model_fields["bytes_"]
    assert field.default is None
    node = openapi.field_schema(field, "x", [])
    assert (node["minimum"], node["maximum"], "default" in node) == (1, 99, False)


class Marked(BaseModel):
    """A model that uses every marker."""

    crd_rules: ClassVar[tuple[sm.Rule, ...]] = (sm.Rule("has(self.a)", "a is needed"),)
    a: Annotated[str, sm.Unlisted()] = Field(description="Required, by the rule.")
    b: Annotated[str, sm.NoDefault()] = Field(default="", description="No default in the CRD.")
    c: Annotated[int, sm.Schema(format="int64"), sm.Rule("self > 1", "above 1")] = Field(
        default=2, gt=0, description="A count."
    )
    d: int | str = Field(default=1, description="A count or a percentage.")


def test_markers_reach_the_schema_and_change_nothing_the_model_accepts() -> None:
    problems: list[str] = []
    node = openapi.object_schema(Marked, "Marked", problems)
    assert problems == []
    assert "required" not in node
    assert node["x-kubernetes-validations"] == [{"rule": "has(self.a)", "message": "a is needed"}]
    assert "default" not in node["properties"]["b"]
    c = node["properties"]["c"]
    assert (c["format"], c["minimum"], c["default"]) == ("int64", 1, 2)  # an integer's `gt=0` is `minimum: 1`
    assert c["x-kubernetes-validations"] == [{"rule": "self > 1", "message": "above 1"}]
    assert node["properties"]["d"]["x-kubernetes-int-or-string"] is True
    with pytest.raises(ValueError, match="Field required"):
        Marked.model_validate({})


def test_a_type_no_crd_can_hold_fails_naming_its_path() -> None:
    class Odd(BaseModel):
        """Odd."""

        when: int | bool = Field(default=1, description="Neither a count nor a percentage.")

    problems: list[str] = []
    openapi.object_schema(Odd, "Odd", problems)
    assert problems == ["Odd.when: a union a CRD cannot hold ([<class 'int'>, <class 'bool'>])"]
