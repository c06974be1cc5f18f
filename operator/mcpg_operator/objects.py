"""Pure builders of the Kubernetes objects behind one namespace's gateway.

Every object is owned by every ResourceWatch of the namespace (non-controller owner references), so the garbage
collector removes them when the last ResourceWatch goes, even while the operator is down. The configuration lives
in one mutable Secret (`CONFIG_SECRET`) that each gateway pod follows through the API and applies in place, so a
new configuration ends no stream. The pod template carries only the digest of the fields a running gateway cannot
swap (`digests.restart`): a change to one of those, or to the image, resources, replicas or environment, rolls the
pods, and nothing else does. The gateway's Role lets its pods read that one Secret and nothing more.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from mcpg_gateway.contract import digests
from mcpg_operator.models import GROUP, VERSION
from mcpg_operator.settings import GatewayDefaults

NAME = "mcpg-gateway"
CONFIG_SECRET = "mcpg-gateway-config"  # noqa: S105 - a Secret name, not a password
"""The one configuration Secret of a namespace's gateway: written in place, read by its pods through the API."""
DIGEST_ANNOTATION = "mcpg.dev/config-digest"
"""On the configuration Secret: `digests.document` of what it holds, what each pod acknowledges serving."""
UPDATED_ANNOTATION = "mcpg.dev/updated-at"
"""On the configuration Secret: when the write that set its digest was made (RFC 3339); pods late past
`serving.ACK_BOUND_S` from then are named in the statuses waiting on them."""
RESTART_ANNOTATION = "mcpg.dev/restart-digest"
"""On the pod template: `digests.restart` of the configuration, so only a restart-only field rolls the pods."""
CONFIG_ENV = "MCPG_CONFIG_SECRET"
"""The gateway container's variable naming the Secret it follows through the API."""
POD_NAME_ENV = "POD_NAME"
"""The pod's own name (the downward API): the `instance` of its acknowledgement, its name on the bus."""
LEGACY_CONFIG_PREFIX = "mcpg-gateway-config-"
LEGACY_HASH_LABEL = "mcpg.dev/config-hash"
"""An older operator's immutable configuration Secrets, one per content hash: collected once no ReplicaSet mounts
one (`gateway_objects`); `CONFIG_SECRET` itself is never collected."""
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


def config_secret(
    namespace: str, config: dict[str, Any], owners: list[dict[str, Any]], updated_at: str
) -> dict[str, Any]:
    """The configuration Secret; `updated_at`: when the write that set this digest is made (RFC 3339)."""
    meta = _meta(CONFIG_SECRET, namespace, owners)
    meta["annotations"] = {DIGEST_ANNOTATION: digests.document(config), UPDATED_ANNOTATION: updated_at}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {CONFIG_KEY: base64.b64encode(config_text(config).encode()).decode()},
    }


def config_text(config: dict[str, Any]) -> str:
    """The configuration as the gateway reads it (and as its size counts against the Secret limit).

    libyaml's emitter where the wheel has it: every pass renders (and measures) the configuration.
    """
    text: str = yaml.dump(config, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True)
    return text


def service_account(namespace: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    # No token by default: only the gateway pod, which follows its configuration Secret, asks for one (`_pod_template`).
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(NAME, namespace, owners),
        "automountServiceAccountToken": False,
    }


RBAC = "rbac.authorization.k8s.io"
READ_VERBS = ["get", "list", "watch"]


def role(namespace: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    """What a gateway pod may do with the API: read and watch its one configuration Secret, and nothing else.

    `list` and `watch` with a resource name need a field selector on `metadata.name`, which is how the gateway
    watches it. The operator can grant this because it holds get, list and watch on Secrets itself.
    """
    rule = {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [CONFIG_SECRET], "verbs": list(READ_VERBS)}
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": _meta(NAME, namespace, owners), "rules": [rule]}


def role_binding(namespace: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    """`role` granted to the gateway's ServiceAccount."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": _meta(NAME, namespace, owners),
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
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
    restart_digest: str,
    defaults: GatewayDefaults,
    owners: list[dict[str, Any]],
    extra_env: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The gateway Deployment; `restart_digest`: `digests.restart` of its configuration; `extra_env`: more of the
    container's environment (the bus's, `bus.pod_env`)."""
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
            "template": _pod_template(restart_digest, defaults, extra_env),
        },
    }


def _pod_template(
    restart_digest: str, defaults: GatewayDefaults, extra_env: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {**MANAGED, **SELECTOR},
            "annotations": {RESTART_ANNOTATION: restart_digest},
        },
        "spec": {
            "serviceAccountName": NAME,
            # The gateway follows its configuration Secret through the API (`role`): a Secret the kubelet mounts
            # is refreshed only after 60 to 90 s, and the mount below is what a pod starts from.
            "automountServiceAccountToken": True,
            "securityContext": pod_security(),
            "terminationGracePeriodSeconds": GRACE_S,
            "containers": [_container(defaults, extra_env)],
            "volumes": [
                {"name": "config", "secret": {"secretName": CONFIG_SECRET, "defaultMode": 0o440}},
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            ],
        },
    }


def _container(defaults: GatewayDefaults, extra_env: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": "MCPG_LOG_FORMAT", "value": defaults.log_format},
        {"name": CONFIG_ENV, "value": CONFIG_SECRET},
        {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if defaults.admin_token_secret:
        env.append(
            {
                "name": "MCPG_ADMIN_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": defaults.admin_token_secret, "key": "token", "optional": True}},
            }
        )
    env += [dict(var) for var in extra_env]
    probe = {"periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3}
    # Readiness is probed more often: a new pod takes a second or two to serve (it has read its configuration
    # Secret through the API first), and a rollout waits for each new pod's first passing probe. /readyz is a
    # constant-time answer.
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
