"""The operator on a real control plane, under the chart's RBAC: gateways appear, take new configurations, rotate
and go away."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcpg_operator.kube import Kube, NamespaceTerminating, Refused, ns_path
from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.leaks import assert_not_logged
from mcpg_testing.manifests import polled
from mcpg_testing.processes import wait_until
from mcpg_testing.release import OperatorRelease

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "examples" / "manifests"
BOUND = "90s"


def apply(
    plane: ControlPlane, namespace: str, *docs: dict[str, Any] | Path, check: bool = True
) -> subprocess.CompletedProcess[str]:
    text = "\n---\n".join(d.read_text() if isinstance(d, Path) else yaml.safe_dump(d) for d in docs)
    return plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=text, check=check)


def get(plane: ControlPlane, namespace: str, *what: str) -> Any:
    return json.loads(plane.kubectl("-n", namespace, "get", *what, "-o", "json").stdout)


def wait(plane: ControlPlane, namespace: str, *args: str) -> None:
    plane.kubectl("-n", namespace, "wait", *args, f"--timeout={BOUND}")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def rendered_config(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    dep = get(plane, namespace, "deployment", "mcpg-gateway")
    [volume] = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    secret = get(plane, namespace, "secret", volume["secret"]["secretName"])
    config: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["gateway.yaml"]))
    return config


def google_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "google-api"},
        "stringData": {"token": "Bearer e2e-google"},
    }


def test_the_guides_examples_become_a_ready_gateway(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    apply(
        control_plane,
        namespace,
        google_secret(),
        MANIFESTS / "webhooktoken.yaml",
        MANIFESTS / "webhook.yaml",
        MANIFESTS / "poll.yaml",
    )
    wait(
        control_plane,
        namespace,
        "--for=condition=Ready",
        "resourcewatch/reports-folder",
        "resourcewatch/reports-folder-poll",
    )
    wait(control_plane, namespace, "--for=condition=Ready", "webhooktoken/reports-token")
    rw = get(control_plane, namespace, "resourcewatch", "reports-folder")
    assert (rw["status"]["strategy"], rw["status"]["uri"]) == ("webhook", "drive://folder/reports")
    assert condition(rw, "Ready")["observedGeneration"] == rw["metadata"]["generation"]
    config = rendered_config(control_plane, namespace)
    resources = {r["uri"]: r for r in config["mcp"]["capabilities"]["resources"]}
    assert resources["drive://folder/reports-polled"]["backend"]["headers"] == {"Authorization": "Bearer e2e-google"}
    token = base64.b64decode(get(control_plane, namespace, "secret", "reports-webhook")["data"]["token"]).decode()
    assert resources["drive://folder/reports"]["watch"]["strategy"]["token"] == token
    assert len(token) >= 43  # 256 random bits, url-safe base64
    assert_not_logged(operator.log, token, "Bearer e2e-google")
    dep = get(control_plane, namespace, "deployment", "mcpg-gateway")
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert {o["name"] for o in dep["metadata"]["ownerReferences"]} == {"reports-folder", "reports-folder-poll"}
    assert get(control_plane, namespace, "serviceaccount", "mcpg-gateway")["automountServiceAccountToken"] is False
    assert {p["port"] for p in get(control_plane, namespace, "service", "mcpg-gateway")["spec"]["ports"]} == {
        8080,
        9090,
    }


def test_the_namespace_auth_secret_becomes_the_gateways_auth_and_no_token_is_rendered(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    client_token = "e2e-client-" + os.urandom(8).hex()
    digest = hashlib.sha256(client_token.encode()).hexdigest()
    auth = {"principals": [{"token_sha256": digest, "principal_id": "alice", "groups": ["finance"]}]}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "mcpg-gateway-auth"},
        "stringData": {"auth.yaml": yaml.safe_dump(auth)},
    }
    apply(control_plane, namespace, secret, MANIFESTS / "filter-expression.yaml")
    wait(control_plane, namespace, "--for=condition=Ready", "resourcewatch/finance-ledger")
    config = rendered_config(control_plane, namespace)
    assert config["gateway"]["auth"]["principals"][0]["principal_id"] == "alice"
    assert client_token not in yaml.safe_dump(config)
    # A broken expression stalls its own watch and never reaches the gateway.
    bad = yaml.safe_load((MANIFESTS / "filter-expression.yaml").read_text())
    bad["metadata"]["name"], bad["spec"]["uri"] = "typo", "ledger://finance/typo"
    bad["spec"]["watch"]["notificationFilter"]["expression"] = 'subscriber.trust_levl == "verified"'
    apply(control_plane, namespace, bad)
    wait(control_plane, namespace, "--for=condition=Stalled", "resourcewatch/typo")
    stalled = condition(get(control_plane, namespace, "resourcewatch", "typo"), "Stalled")["message"]
    assert stalled.startswith("spec.watch.notificationFilter.expression: ")  # the whole problem is in its Event
    assert "trust_levl" in stalled  # the cause, named, before any detail
    assert [r["name"] for r in rendered_config(control_plane, namespace)["mcp"]["capabilities"]["resources"]] == [
        "finance-ledger"
    ]


def test_deleting_the_last_resourcewatch_removes_the_gateway(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    apply(control_plane, namespace, MANIFESTS / "delete-as-event.yaml", polled("second"))
    wait(control_plane, namespace, "--for=condition=Ready", "resourcewatch/drive-file", "resourcewatch/second")
    control_plane.kubectl("-n", namespace, "delete", "resourcewatch", "drive-file")
    # One owner remains: the gateway stays, serving the other watch only. (The owner reference alone says
    # nothing: the garbage collector drops a deleted owner's reference itself, before or after the operator.)

    def serves_only_second() -> bool:
        resources = rendered_config(control_plane, namespace)["mcp"]["capabilities"]["resources"]
        return [r["name"] for r in resources] == ["second"]

    wait_until(serves_only_second, 90, "the gateway to serve only the remaining watch")
    owners = get(control_plane, namespace, "deployment", "mcpg-gateway")["metadata"]["ownerReferences"]
    assert [o["name"] for o in owners] == ["second"]
    control_plane.kubectl("-n", namespace, "delete", "resourcewatch", "second")
    wait(
        control_plane,
        namespace,
        "--for=delete",
        "deployment/mcpg-gateway",
        "service/mcpg-gateway",
        "serviceaccount/mcpg-gateway",
    )
    # The configuration Secret and the Role that lets the pods read it go too: the garbage collector works through
    # dependents in turn.
    wait(
        control_plane,
        namespace,
        "--for=delete",
        "secret/mcpg-gateway-config",
        "role/mcpg-gateway",
        "rolebinding/mcpg-gateway",
    )


RW, WT = "ResourceWatch", "WebhookToken"
HTTP = {"http": {"url": "http://u"}}


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        (RW, {"uri": "x://a", "uriTemplate": "x://{a}", "backend": HTTP}, "set exactly one of uri"),
        (
            RW,
            {"uri": "x://a", "backend": HTTP, "watch": {"poll": {}, "webhook": {"tokenRef": {"name": "t"}}}},
            "set at most one strategy",
        ),
        (RW, {"uri": "x://a", "backend": HTTP, "watch": {"webhook": {}}}, "a webhook needs tokenRef"),
        (
            RW,
            {"uri": "x://a", "backend": HTTP, "watch": {"sqlPolling": {"urlSecretRef": {"name": "d", "key": "u"}}}},
            "sqlPolling needs a scalar tracking query",
        ),
        (
            RW,
            {
                "uri": "x://a",
                "backend": HTTP,
                "watch": {
                    "sqlPolling": {"urlSecretRef": {"name": "d", "key": "u"}, "query": "select 1", "timeoutMs": 300001}
                },
            },
            "spec.watch.sqlPolling.timeoutMs: Invalid value: 300001",
        ),
        (
            RW,
            {"uri": "x://a", "backend": HTTP, "watch": {"notificationFilter": {"scope": "expression"}}},
            "scope expression needs an expression",
        ),
        (
            RW,
            {"uri": "x://a", "backend": {"http": {"url": "http://u", "method": "fetch"}}},
            "method must be one of get, post, put, patch, delete, head, in any case",
        ),
        *(
            (RW, {"uri": "x://a", "backend": {"http": {"url": url}}}, "url must be http:// or https:// with a host")
            for url in ("api.example.com/x", "ftp://x/y", "http:///path", "https://{host}/x")
        ),
        # Names the API server would refuse for the objects they name: refused here, not at the operator's write.
        (
            WT,
            {"secretRef": {"name": "Bad_Name"}, "generate": True},
            'spec.secretRef.name: Invalid value: "Bad_Name"',
        ),
        (WT, {"secretRef": {"name": "ok", "key": "..token"}}, 'spec.secretRef.key: Invalid value: "..token"'),
        (
            RW,
            {"uri": "x://a", "backend": HTTP, "watch": {"webhook": {"tokenRef": {"name": "Reports"}}}},
            'spec.watch.webhook.tokenRef.name: Invalid value: "Reports"',
        ),
        (
            RW,
            {
                "uri": "x://a",
                "backend": {
                    "http": {"url": "http://u", "headers": [{"name": "A", "secretKeyRef": {"name": "g", "key": "a b"}}]}
                },
            },
            'spec.backend.http.headers[0].secretKeyRef.key: Invalid value: "a b"',
        ),
    ],
)
def test_the_api_server_rejects_what_can_never_work(
    control_plane: ControlPlane, crds: None, namespace: str, kind: str, spec: dict[str, Any], message: str
) -> None:
    doc = {"apiVersion": "mcpg.dev/v1alpha1", "kind": kind, "metadata": {"name": "bad"}, "spec": spec}
    result = apply(control_plane, namespace, doc, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_every_example_manifest_is_accepted_by_the_api_server(
    control_plane: ControlPlane, crds: None, namespace: str
) -> None:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        result = control_plane.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", str(path), check=False)
        assert result.returncode == 0, f"{path.name}: {result.stderr}"


def test_the_api_server_takes_a_method_in_any_case_and_a_variable_in_the_path(
    control_plane: ControlPlane, crds: None, namespace: str
) -> None:
    http = {"url": "https://api.example.com/files/{id}", "method": "GET"}
    doc = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "capitals"},
        "spec": {"uriTemplate": "x://files/{id}", "backend": {"http": http}},
    }
    text = yaml.safe_dump(doc)
    result = control_plane.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=text, check=False)
    assert result.returncode == 0, result.stderr


def test_the_later_of_two_watches_sharing_a_token_is_refused(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    apply(control_plane, namespace, MANIFESTS / "webhooktoken.yaml", MANIFESTS / "webhook.yaml")
    wait(control_plane, namespace, "--for=condition=Ready", "resourcewatch/reports-folder")
    twin = yaml.safe_load((MANIFESTS / "webhook.yaml").read_text())
    twin["metadata"]["name"], twin["spec"]["uri"], twin["spec"]["name"] = "twin", "drive://folder/twin", "twin"
    apply(control_plane, namespace, twin)
    wait(
        control_plane,
        namespace,
        "--for=jsonpath={.status.conditions[?(@.type=='Ready')].reason}=TokenConflict",
        "resourcewatch/twin",
    )
    ready = condition(get(control_plane, namespace, "resourcewatch", "twin"), "Ready")
    assert ready["status"] == "False"
    assert "ResourceWatch reports-folder" in ready["message"]
    assert [r["name"] for r in rendered_config(control_plane, namespace)["mcp"]["capabilities"]["resources"]] == [
        "reports.folder"
    ]


def test_a_missing_secret_is_reported_and_healed_when_it_appears(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    apply(control_plane, namespace, MANIFESTS / "poll.yaml")
    wait(
        control_plane,
        namespace,
        "--for=jsonpath={.status.conditions[?(@.type=='Ready')].reason}=SecretNotFound",
        "resourcewatch/reports-folder-poll",
    )
    apply(control_plane, namespace, google_secret())
    wait(control_plane, namespace, "--for=condition=Ready", "resourcewatch/reports-folder-poll")


def test_watches_the_gateway_would_refuse_are_left_out_and_the_rest_is_served(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    fine = polled("fine")
    repeated = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "repeated"},
        "spec": {
            "uriTemplate": "x://{a}/{a}",
            "readPolicy": "subscriber.principal_id == resource.variables.a",
            "backend": {"http": {"url": "http://upstream/{a}"}},
        },
    }
    # The chart installs no plugin kinds by default, and this operator has no NATS server configured.
    apply(control_plane, namespace, fine, repeated, MANIFESTS / "plugin.yaml", MANIFESTS / "nats-topic.yaml")
    wait(control_plane, namespace, "--for=condition=Ready", "resourcewatch/fine")
    stalled = ("phone-inbound", "inventory-nats", "repeated")
    wait(control_plane, namespace, "--for=condition=Stalled", *(f"resourcewatch/{n}" for n in stalled))
    messages = {n: condition(get(control_plane, namespace, "resourcewatch", n), "Stalled")["message"] for n in stalled}
    assert "no installed watch-strategy plugin has kind 'twilio_inbound'" in messages["phone-inbound"]
    assert "no NATS server for this watch" in messages["inventory-nats"]
    assert messages["repeated"].startswith("spec.uriTemplate: repeats {a}")
    names = [r["name"] for r in rendered_config(control_plane, namespace)["mcp"]["capabilities"]["resources"]]
    assert names == ["fine"]
    assert rendered_config(control_plane, namespace)["mcp"]["capabilities"]["resource_templates"] == []


async def test_the_api_servers_refusals_reach_the_operator_as_refusals_naming_the_cause(
    control_plane: ControlPlane, crds: None, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the operator's client makes of the API server's own refusals: a 422 keeps the API's message, and a
    create in a namespace being deleted is `NamespaceTerminating` (the reconcile then stops quietly)."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    client = await Kube.connect()
    try:
        secrets_path = ns_path(namespace, "secrets")
        bad = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "Bad_Name"}, "data": {}}
        with pytest.raises(Refused) as invalid:
            await client.create(secrets_path, bad)
        assert (invalid.value.status, invalid.type) == (422, Refused)
        assert 'Secret "Bad_Name" is invalid' in invalid.value.message
        # A finalizer on one object keeps the namespace Terminating while the test writes into it.
        held = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["mcpg.dev/e2e"]}}
        await client.create(ns_path(namespace, "configmaps"), held)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")
        fine = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fine"}, "data": {}}
        with pytest.raises(NamespaceTerminating):
            await client.create(secrets_path, fine)
        await client.merge_patch(ns_path(namespace, "configmaps", "held"), {"metadata": {"finalizers": None}})
    finally:
        await client.close()
