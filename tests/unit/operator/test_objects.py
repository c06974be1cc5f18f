"""The gateway's Kubernetes objects: hardened, owned by every ResourceWatch, its configuration in one Secret its pods
follow through the API (and nothing else of it), rolled only by what a running gateway cannot swap."""

from __future__ import annotations

import base64
from typing import Any

import yaml

from mcpg_gateway.contract import digests
from mcpg_operator import objects
from mcpg_operator.settings import GatewayDefaults

OWNERS = objects.owner_references([("b", "uid-b"), ("a", "uid-a")])
HASH = "f" * 64
NOW = "2026-01-01T00:00:00Z"


def test_every_resourcewatch_owns_the_objects_without_blocking_deletion() -> None:
    assert [o["name"] for o in OWNERS] == ["a", "b"]
    assert all(o["controller"] is False and o["blockOwnerDeletion"] is False for o in OWNERS)
    for obj in (
        objects.service_account("ns", OWNERS),
        objects.service("ns", OWNERS),
        objects.deployment("ns", HASH, GatewayDefaults(), OWNERS),
        objects.config_secret("ns", {}, OWNERS, NOW),
        objects.role("ns", OWNERS),
        objects.role_binding("ns", OWNERS),
    ):
        assert obj["metadata"]["ownerReferences"] == OWNERS
        assert obj["metadata"]["namespace"] == "ns"


def test_the_configuration_lives_in_one_mutable_secret_annotated_with_its_digest_and_when_it_was_written() -> None:
    config: dict[str, Any] = {"mcp": {"capabilities": {"resources": []}}}
    secret = objects.config_secret("ns", config, OWNERS, NOW)
    assert "immutable" not in secret
    assert secret["metadata"]["name"] == "mcpg-gateway-config"
    assert secret["metadata"]["annotations"] == {
        "mcpg.dev/config-digest": digests.document(config),  # the gateway's own digest, in full
        "mcpg.dev/updated-at": NOW,
    }
    assert objects.MANAGED.items() <= secret["metadata"]["labels"].items()
    assert yaml.safe_load(base64.b64decode(secret["data"]["gateway.yaml"])) == config


def test_the_pod_template_mounts_the_one_configuration_secret_and_carries_only_the_restart_digest() -> None:
    template = objects.deployment("ns", HASH, GatewayDefaults(), OWNERS)["spec"]["template"]
    assert template["metadata"]["annotations"] == {"mcpg.dev/restart-digest": HASH}
    [config_volume] = [v for v in template["spec"]["volumes"] if v["name"] == "config"]
    assert config_volume["secret"]["secretName"] == "mcpg-gateway-config"
    [container] = template["spec"]["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert "subPath" not in mount  # a subPath mount is never refreshed
    env = {e["name"]: e for e in container["env"]}
    assert env["MCPG_CONFIG_SECRET"] == {"name": "MCPG_CONFIG_SECRET", "value": "mcpg-gateway-config"}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert [p["path"] for p in (container["readinessProbe"]["httpGet"], container["livenessProbe"]["httpGet"])] == [
        "/readyz",
        "/healthz",
    ]


def test_the_gateways_role_grants_get_list_and_watch_of_its_one_configuration_secret_and_nothing_else() -> None:
    role = objects.role("ns", OWNERS)
    assert (role["apiVersion"], role["kind"], role["metadata"]["name"]) == (
        "rbac.authorization.k8s.io/v1",
        "Role",
        "mcpg-gateway",
    )
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["mcpg-gateway-config"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = objects.role_binding("ns", OWNERS)
    assert (binding["kind"], binding["metadata"]["name"]) == ("RoleBinding", "mcpg-gateway")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "mcpg-gateway"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mcpg-gateway", "namespace": "ns"}]


def test_the_deployment_rolls_without_ever_dropping_below_its_replicas() -> None:
    spec = objects.deployment("ns", HASH, GatewayDefaults(replicas=3), OWNERS)["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def test_the_gateway_pod_is_hardened_and_only_it_gets_an_api_token() -> None:
    pod = objects.deployment("ns", HASH, GatewayDefaults(), OWNERS)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True  # it follows its configuration Secret through the API
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert objects.service_account("ns", OWNERS)["automountServiceAccountToken"] is False


def test_operator_defaults_reach_the_gateway() -> None:
    d = GatewayDefaults(image="reg/gw:1", replicas=2, admin_token_secret="adm", log_format="json")
    [container] = objects.deployment("ns", HASH, d, OWNERS)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "reg/gw:1"
    env = {e["name"]: e for e in container["env"]}
    assert env["MCPG_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "adm", "key": "token", "optional": True}
    assert env["MCPG_LOG_FORMAT"]["value"] == "json"


def test_the_service_exposes_the_public_and_admin_ports() -> None:
    ports = {p["name"]: p["port"] for p in objects.service("ns", OWNERS)["spec"]["ports"]}
    assert ports == {"http": 8080, "admin": 9090}


def test_a_nodeport_service_takes_the_fixed_ports_kind_maps_to_the_host() -> None:
    d = GatewayDefaults(service_type="NodePort", http_node_port=30080, admin_node_port=30090)
    spec = objects.service("ns", OWNERS, d)["spec"]
    assert spec["type"] == "NodePort"
    assert {p["name"]: p["nodePort"] for p in spec["ports"]} == {"http": 30080, "admin": 30090}
    assert "nodePort" not in str(objects.service("ns", OWNERS)["spec"])


def test_a_gateway_pod_drains_before_it_stops_within_its_grace_period() -> None:
    """Endpoint removal must reach the proxies before the gateway stops accepting: preStop sleeps first."""
    dep = objects.deployment("ns", "a" * 64, GatewayDefaults(), [])
    pod = dep["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": objects.DRAIN_S}}
    assert pod["terminationGracePeriodSeconds"] > objects.DRAIN_S + 5  # drain, then the gateway's own stop
