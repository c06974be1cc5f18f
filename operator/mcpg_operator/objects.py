"""Pure builders of the Kubernetes objects behind one namespace's gateway.

Every object is owned by every ResourceWatch of the namespace (non-controller owner references), so the garbage
collector removes them when the last ResourceWatch goes, even while the operator is down. The configuration lives
in an immutable Secret named by its content hash: the pod template names it, so a changed configuration rolls the
gateway, and a ReplicaSet from before keeps exactly the configuration its pods started with.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from mcpg_operator.models import GROUP, VERSION
from mcpg_operator.settings import GatewayDefaults

NAME = "mcpg-gateway"
CONFIG_PREFIX = "mcpg-gateway-config-"
HASH_ANNOTATION = "mcpg.dev/config-hash"
HASH_LABEL = "mcpg.dev/config-hash"
MANAGED = {"app.kubernetes.io/managed-by": "mcpg-operator", "app.kubernetes.io/part-of": "mcpg"}
SELECTOR = {"app.kubernetes.io/name": NAME}
WATCHED_LABEL = "mcpg.dev/watched"
"""On every Secret whose changes the operator must see (`references`): its Secret watch selects this label alone."""
PUBLIC_PORT, ADMIN_PORT = 8080, 9090
DRAIN_S = 5
"""preStop pause before SIGTERM: long enough for the pod's removal from the Service's endpoints to reach every
proxy, so no sender or subscriber is sent to a gateway that has stopped accepting connections."""
GRACE_S = 30
"""The drain, then the gateway's own graceful stop (listen streams answered, sessions closed), with room to spare."""
CONFIG_DIR = "/etc/mcpg"
CONFIG_KEY = "gateway.yaml"
SECRET_SIZE_LIMIT = 1024 * 1024
"""The API server refuses a Secret whose data (decoded) adds up to more than 1 MiB."""


def owner_references(watches: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """(name, uid) of each ResourceWatch; blockOwnerDeletion is off so no finalizer rights are needed."""
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceWatch",
            "name": name,
            "uid": uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }
        for name, uid in sorted(watches)
    ]


def _meta(name: str, namespace: str, owners: list[dict[str, Any]], **labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {**MANAGED, **SELECTOR, **labels},
        "ownerReferences": owners,
    }


def config_secret_name(config_hash: str) -> str:
    return CONFIG_PREFIX + config_hash[:16]


def config_secret(
    namespace: str, config: dict[str, Any], config_hash: str, owners: list[dict[str, Any]]
) -> dict[str, Any]:
    text = config_text(config)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(config_secret_name(config_hash), namespace, owners, **{HASH_LABEL: config_hash[:16]}),
        "type": "Opaque",
        "immutable": True,
        "data": {CONFIG_KEY: base64.b64encode(text.encode()).decode()},
    }


def config_text(config: dict[str, Any]) -> str:
    """The configuration as the gateway reads it (and as its size counts against the Secret limit).

    libyaml's emitter where the wheel has it: every pass renders (and measures) the configuration.
    """
    text: str = yaml.dump(config, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True)
    return text


def service_account(namespace: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    # The gateway needs no Kubernetes API access at all, so no token is mounted.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(NAME, namespace, owners),
        "automountServiceAccountToken": False,
    }


SERVICE_ANNOTATIONS = "mcpg.dev/service-annotations"
"""On the Service: the keys of the annotations an McpGateway put there, so that dropping one changes the desired
object (server-side apply then removes it) even though every remaining key is still present."""


def service(
    namespace: str,
    owners: list[dict[str, Any]],
    defaults: GatewayDefaults | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The gateway Service; `annotations`: the namespace's McpGateway's, if it sets any."""
    d = defaults or GatewayDefaults()
    meta = _meta(NAME, namespace, owners)
    if annotations:
        meta["annotations"] = {**annotations, SERVICE_ANNOTATIONS: ",".join(sorted(annotations))}
    ports: list[dict[str, Any]] = [
        {"name": "http", "port": PUBLIC_PORT, "targetPort": "http", "protocol": "TCP"},
        {"name": "admin", "port": ADMIN_PORT, "targetPort": "admin", "protocol": "TCP"},
    ]
    if d.service_type != "ClusterIP":
        for port, node_port in zip(ports, (d.http_node_port, d.admin_node_port), strict=True):
            if node_port is not None:
                port["nodePort"] = node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": d.service_type,
            "selector": dict(SELECTOR),
            "ports": ports,
            # A handshake-era MCP session lives in the one process that opened it: with several replicas, a
            # client keeps reaching the same pod. Stated even when off, so going back to one replica resets it.
            "sessionAffinity": "ClientIP" if d.replicas > 1 else "None",
        },
    }


def pod_security() -> dict[str, Any]:
    """The restricted Pod Security Standard, for every pod the operator renders (gateways and the bus)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def deployment(
    namespace: str,
    config_hash: str,
    defaults: GatewayDefaults,
    owners: list[dict[str, Any]],
    extra_env: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The gateway Deployment; `extra_env`: more of the container's environment (the bus's, `bus.pod_env`)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME, namespace, owners),
        "spec": {
            "replicas": defaults.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": dict(SELECTOR)},
            # A pod is only replaced once its successor is Ready: webhook senders always reach a pod that
            # knows every token not yet retired.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": _pod_template(config_hash, defaults, extra_env),
        },
    }


def _pod_template(
    config_hash: str, defaults: GatewayDefaults, extra_env: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {**MANAGED, **SELECTOR},
            "annotations": {HASH_ANNOTATION: config_hash},
        },
        "spec": {
            "serviceAccountName": NAME,
            "automountServiceAccountToken": False,
            "securityContext": pod_security(),
            "terminationGracePeriodSeconds": GRACE_S,
            "containers": [_container(defaults, extra_env)],
            "volumes": [
                {"name": "config", "secret": {"secretName": config_secret_name(config_hash), "defaultMode": 0o440}},
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            ],
        },
    }


def _container(defaults: GatewayDefaults, extra_env: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": "MCPG_LOG_FORMAT", "value": defaults.log_format}]
    if defaults.admin_token_secret:
        env.append(
            {
                "name": "MCPG_ADMIN_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": defaults.admin_token_secret, "key": "token", "optional": True}},
            }
        )
    env += [dict(var) for var in extra_env]
    probe = {"periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3}
    # Readiness is probed more often: a new pod takes a second or two to serve, and every rollout (a rotation
    # is two) waits for each new pod's first passing probe. /readyz is a constant-time answer.
    readiness = probe | {"periodSeconds": 2}
    return {
        "name": "gateway",
        "image": defaults.image,
        "imagePullPolicy": defaults.image_pull_policy,
        "args": ["--config", f"{CONFIG_DIR}/{CONFIG_KEY}", "--port", str(PUBLIC_PORT), "--admin-port", str(ADMIN_PORT)],
        "ports": [
            {"name": "http", "containerPort": PUBLIC_PORT, "protocol": "TCP"},
            {"name": "admin", "containerPort": ADMIN_PORT, "protocol": "TCP"},
        ],
        "env": env,
        "resources": defaults.resources,
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, **readiness},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, **probe, "initialDelaySeconds": 5},
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_S}}},
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an in-memory emptyDir, private to the pod
        ],
    }
