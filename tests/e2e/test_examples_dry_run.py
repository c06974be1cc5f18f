"""The generated CRDs on the real API server: it accepts them (they are structural), admits every example
manifest with a server-side dry run (the Kubernetes objects a setup needs besides mcpg's, like the quickstart's
upstream, too), refuses what the models' bounds and CEL rules refuse, and `kubectl explain` shows each field's type
and description."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_testing.controlplane import ControlPlane

ROOT = Path(__file__).parents[2]
MANIFESTS = sorted((ROOT / "examples" / "manifests").glob("*.yaml"))
POLLED: dict[str, Any] = {
    "apiVersion": "mcpg.dev/v1alpha1",
    "kind": "ResourceWatch",
    "metadata": {"name": "polled"},
    "spec": {"uri": "x://polled", "backend": {"http": {"url": "http://upstream/"}}},
}


def dry_run(plane: ControlPlane, namespace: str, manifest: str) -> tuple[int, str]:
    result = plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-o", "yaml", "-f", "-", stdin=manifest, check=False
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_example_manifest_is_admitted_by_the_api_server(
    control_plane: ControlPlane, crds: None, namespace: str, path: Path
) -> None:
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-o", "yaml", "-f", "-", stdin=path.read_text(), check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answer = yaml.safe_load(result.stdout)  # stdout only: a warning on stderr is not part of the objects
    admitted = answer["items"] if answer.get("kind") == "List" else [answer]  # a file may hold several objects
    written = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert [a["kind"] for a in admitted] == [w["kind"] for w in written]
    # Nothing pruned: every field of the example is in the schema, so the object is stored as written. Every
    # top-level field: a ConfigMap has `data`, not `spec`.
    for stored, doc in zip(admitted, written, strict=True):
        for key in doc.keys() - {"apiVersion", "kind", "metadata"}:
            assert _covers(stored[key], doc[key]), (key, stored[key], doc[key])


def _covers(admitted: Any, written: Any) -> bool:
    """`admitted` holds every key and value of `written` (defaults the API server added may be more), list items
    compared one by one (it adds defaults inside them too: a container port's protocol)."""
    if isinstance(written, dict):
        return isinstance(admitted, dict) and all(k in admitted and _covers(admitted[k], v) for k, v in written.items())
    if isinstance(written, list):
        return (
            isinstance(admitted, list)
            and len(admitted) == len(written)
            and all(_covers(a, w) for a, w in zip(admitted, written, strict=True))
        )
    return bool(admitted == written)


def with_http(change: dict[str, Any]) -> str:
    out = copy.deepcopy(POLLED)
    out["spec"]["backend"]["http"] |= change
    return yaml.safe_dump(out)


def test_the_api_server_writes_the_models_defaults(control_plane: ControlPlane, crds: None, namespace: str) -> None:
    code, output = dry_run(control_plane, namespace, yaml.safe_dump(POLLED))
    assert code == 0, output
    http = yaml.safe_load(output)["spec"]["backend"]["http"]
    assert (http["method"], http["timeoutMs"], http["requireJsonResponse"]) == ("get", 10_000, False)
    assert "description" not in yaml.safe_load(output)["spec"]  # NoDefault: nothing stored for an unset field


@pytest.mark.parametrize(
    ("manifest", "refusal"),
    [
        (with_http({"timeoutMs": 300_001}), "spec.backend.http.timeoutMs"),  # the contract's bound
        (with_http({"expectedStatusCodes": [99]}), "spec.backend.http.expectedStatusCodes[0]"),
        (
            yaml.safe_dump(POLLED | {"spec": POLLED["spec"] | {"uriTemplate": "x://{a}"}}),
            "set exactly one of uri",  # a model's CEL rule
        ),
        (
            yaml.safe_dump(
                {"apiVersion": "mcpg.dev/v1alpha1", "kind": "McpGateway", "metadata": {"name": "other"}, "spec": {}}
            ),
            "must be mcpg-gateway",  # the kind's own rule
        ),
    ],
    ids=["bound", "item-bound", "cel-rule", "kind-rule"],
)
def test_the_api_server_refuses_what_the_models_refuse(
    control_plane: ControlPlane, crds: None, namespace: str, manifest: str, refusal: str
) -> None:
    code, output = dry_run(control_plane, namespace, manifest)
    assert code != 0
    assert refusal in output


def test_kubectl_explain_shows_the_type_and_the_contracts_description(control_plane: ControlPlane, crds: None) -> None:
    explained = control_plane.kubectl("explain", "resourcewatches.spec.backend.http.timeoutMs").stdout
    assert "<integer>" in explained
    assert "Bounds the whole read" in " ".join(explained.split())
    for plural in ("resourcewatches", "webhooktokens", "mcpgateways"):
        tree = control_plane.kubectl("explain", plural, "--recursive").stdout
        assert "spec" in tree, plural
        assert "status" in tree, plural


def test_a_webhook_tokens_signature_scheme_cannot_change_once_made(
    control_plane: ControlPlane, crds: None, namespace: str
) -> None:
    # A transition rule, which no model can check: a routing token must never become a signing secret (its
    # retiring values would change role with it), nor one scheme's secret another's.
    def token(**spec: Any) -> dict[str, Any]:
        meta = {"name": "signing"}
        spec = {"secretRef": {"name": "signing"}, **spec}
        return {"apiVersion": "mcpg.dev/v1alpha1", "kind": "WebhookToken", "metadata": meta, "spec": spec}

    control_plane.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(token(signatureScheme="github")))
    for changed in (token(signatureScheme="slack"), token()):
        code, output = dry_run(control_plane, namespace, yaml.safe_dump(changed))
        assert code != 0
        assert "signatureScheme cannot change" in output
    code, output = dry_run(control_plane, namespace, yaml.safe_dump(token(signatureScheme="github", generate=True)))
    assert code == 0, output  # any other edit still goes through
