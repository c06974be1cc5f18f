"""hack/reference.py: the CRDs, the chart's CRDs and docs/reference.md are generated from the models, are up to
date, and the generator refuses a model field without a description and a CRD file no kind declares."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from mcpg_gateway.contract import config
from mcpg_operator import models

ROOT = Path(__file__).parents[3]
RW = "resourcewatches.mcpg.dev.yaml"
WT = "webhooktokens.mcpg.dev.yaml"


def _load() -> ModuleType:
    """hack/ is scripts, not a package: load the generator from its path, as `make reference` runs it."""
    name = "mcpg_hack_reference"
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / "reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


reference = _load()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of what the generator reads: crds/, the gateway example and the signed webhook senders."""
    shutil.copytree(ROOT / "crds", tmp_path / "crds")
    (tmp_path / "examples" / "gateway").mkdir(parents=True)
    shutil.copy(ROOT / reference.GATEWAY_EXAMPLE, tmp_path / reference.GATEWAY_EXAMPLE)
    shutil.copytree(ROOT / reference.SENDERS, tmp_path / reference.SENDERS)
    return tmp_path


def edit_crd(root: Path, name: str, change: Any) -> None:
    path = root / "crds" / name
    crd = yaml.safe_load(path.read_text())
    change(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"])
    path.write_text(yaml.safe_dump(crd))


def properties(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        out += [(f"{path}.{name}", sub), *properties(sub, f"{path}.{name}")]
    if isinstance(schema.get("items"), dict):
        out += properties(schema["items"], f"{path}[]")
    return out


def test_the_crds_the_chart_and_the_reference_are_as_generated() -> None:
    stale = reference.drift(ROOT)
    assert not stale, "run `make reference`:\n" + "".join(stale)[:4000]


def test_every_property_of_every_crd_has_a_description() -> None:
    # What `kubectl explain` shows: an empty description there is what users complained about. The root
    # `metadata` is Kubernetes' own ObjectMeta: the API server refuses a CRD that says anything of it but its type.
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        undescribed = [where for where, sub in properties(schema, path.name) if not sub.get("description")]
        assert undescribed == [f"{path.name}.metadata"], path.name
        assert schema["properties"]["metadata"] == {"type": "object"}


def test_a_field_that_is_a_gateway_field_is_described_by_the_contract() -> None:
    crd = yaml.safe_load((ROOT / "crds" / RW).read_text())
    http = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["backend"]
    timeout = http["properties"]["http"]["properties"]["timeoutMs"]["description"]
    contract = config.HttpBackend.model_fields["timeout_ms"].description or ""
    assert timeout == " ".join(contract.split()) + " In milliseconds."
    assert models.HttpBackendSpec.model_fields["timeout_ms"].description == timeout


def test_writing_keeps_the_hand_written_layout_and_comments_and_is_idempotent(root: Path) -> None:
    assert reference.main(["--root", str(root)]) == 0
    written = (root / "crds" / WT).read_text()
    assert "# Shown with -o wide" in written  # a column's comment (mcpg_operator/kinds.py) is written above it
    assert "{name: Ready, type: string, jsonPath:" in written  # and so does a flow mapping it did not touch
    assert (root / "charts" / "mcpg" / "crds" / WT).read_text() == written
    assert reference.drift(root) == []


# The CRDs are generated from the models, so a CRD property without a model field, or a model field missing from
# its CRD, can no longer be written: a hand edit of either kind is a stale file that `--check` names, and a model
# field without a description fails the generator, naming its path.


def test_a_property_added_to_a_crd_by_hand_is_stale_naming_the_file(root: Path) -> None:
    assert reference.main(["--root", str(root)]) == 0

    def add(props: dict[str, Any]) -> None:
        props["spec"]["properties"]["backend"]["properties"]["http"]["properties"]["retries"] = {"type": "integer"}

    edit_crd(root, RW, add)
    [diff] = reference.drift(root)
    assert f"crds/{RW} (on disk)" in diff
    assert "retries" in diff


def test_a_model_field_without_a_description_fails_naming_its_path(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Undescribed(models.WebhookTokenSpec):
        """Where the token is kept."""

        retries: int = 0

    kind = dataclasses.replace(reference.KINDS[1], spec=Undescribed)
    monkeypatch.setattr(reference, "KINDS", (reference.KINDS[0], kind, reference.KINDS[2]))
    with pytest.raises(reference.Undocumented) as error:
        reference.generate(root)
    assert error.value.problems == ["WebhookToken.spec.retries: no description (give the field a docstring)"]


def test_a_property_dropped_from_a_crd_by_hand_is_stale(root: Path) -> None:
    # The API server prunes a status field its CRD lacks: a model field the CRD does not carry is never seen.
    assert reference.main(["--root", str(root)]) == 0
    edit_crd(root, RW, lambda props: props["status"]["properties"].pop("webhookPath"))
    assert [f"crds/{RW} (on disk)" in diff for diff in reference.drift(root)] == [True]


def test_an_enum_is_the_models_literal() -> None:
    crd = yaml.safe_load((ROOT / "crds" / WT).read_text())
    phase = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]
    assert phase["enum"] == ["Pending", "Rolling", "Retiring", "Ready", "Unused", "Error"]


def test_a_crd_without_models_in_the_table_fails_naming_the_file(root: Path) -> None:
    shutil.copy(root / "crds" / WT, root / "crds" / "widgets.mcpg.dev.yaml")
    with pytest.raises(reference.Undocumented, match=r"crds/widgets\.mcpg\.dev\.yaml: no models"):
        reference.generate(root)


def test_check_exits_non_zero_naming_the_stale_file(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert reference.main(["--root", str(root)]) == 0
    chart_copy = root / "charts" / "mcpg" / "crds" / RW
    chart_copy.write_text(chart_copy.read_text().replace("Where a read goes", "Where reads go"))
    assert reference.main(["--root", str(root), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"charts/mcpg/crds/{RW} (on disk)" in err
    assert "Where reads go" in err  # the diff shows the drifted line
    assert "run `make reference`" in err


def test_the_reference_documents_every_gateway_configuration_field() -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    for model in (config.GatewayConfig, config.LimitsConfig, config.HttpBackend, config.BusConfig):
        assert f"### {model.__name__}" in text
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{model.__name__}.{name}"
