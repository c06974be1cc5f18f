"""What one namespace holds, as typed read-only views built from the API's dicts. Pure.

The read phase builds one `Snapshot` of these and the decision works on nothing else: raw API objects stop
here. Each view keeps only what a decision needs: identity (for owner references and Events), the spec the
models validate, the status as last written, a token's persisted rotation state, the configuration Secret as
written, the gateway's Deployment and ReplicaSets, and each gateway pod with what it said it serves (its
acknowledgement, or why it gave none). Views are frozen and built from copies, so no phase can change another's
input.
"""

from __future__ import annotations

import base64
import calendar
import copy
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway.contract.acknowledgement import Acknowledgement
from mcpg_operator import objects, rotation, tokens
from mcpg_operator.rollout import rollout_complete

SecretData = dict[str, dict[str, str]]
"""Secret name -> key -> decoded value, for the Secrets of one namespace."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an object is: enough to name it in an owner reference or an Event."""

    api_version: str
    kind: str
    name: str
    uid: str
    generation: int = 0
    created: str = ""
    """creationTimestamp (RFC 3339, so it sorts in time order)."""
    resource_version: str = ""
    """The version read: Events are named from it, so two passes deciding from the same read post one Event."""

    def owner_reference(self) -> dict[str, Any]:
        """This object as the controller owner of another; blockOwnerDeletion is off (no finalizer rights needed)."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }


@dataclass(frozen=True, slots=True)
class Watch:
    """A ResourceWatch."""

    id: Identity
    spec: dict[str, Any]
    status: dict[str, Any]

    @property
    def name(self) -> str:
        return self.id.name


@dataclass(frozen=True, slots=True)
class Token:
    """A WebhookToken and the rotation state persisted for it (the empty state if none was saved yet)."""

    id: Identity
    spec: dict[str, Any]
    status: dict[str, Any]
    state: rotation.TokenState
    state_saved: bool = True
    """Its rotation-state Secret exists. Missing while pods carry its tokens means the state was lost."""

    @property
    def name(self) -> str:
        return self.id.name


@dataclass(frozen=True, slots=True)
class Secret:
    name: str
    labels: dict[str, str]
    data: dict[str, str]
    """Decoded values; binary ones are left out (they cannot be tokens or URLs)."""
    owner_uids: frozenset[str]
    annotations: dict[str, str] = field(default_factory=dict)
    resource_version: str = ""
    """The version read: a WebhookToken's status says at which version of its Secret its token was read."""


@dataclass(frozen=True, slots=True)
class ConfigSecret:
    """The gateway's configuration Secret as read (`objects.CONFIG_SECRET`): what its pods can have read."""

    text: str | None
    digest: str | None
    """Its `mcpg.dev/config-digest` annotation: the digest the operator wrote with this text."""
    updated_at: float | None
    """Its `mcpg.dev/updated-at` annotation (seconds since the epoch): when that digest was written."""
    secret: Secret


@dataclass(frozen=True, slots=True)
class Pod:
    """A gateway pod: whether it counts, and what it said it serves.

    Counted once it is Ready and has an IP. One being deleted still serves what reaches it until its preStop pause
    ends (it stays Ready until then), so it is counted while it answers; one that no longer answers is not. A pod
    that is not Ready serves no traffic, being deleted or not, so it never counts; but one that is not being
    deleted is asked all the same: a pod that refused the configuration it started on stays unready, and its
    acknowledgement (what it refused, the plugins it has) is the only place that says why.
    """

    name: str
    ready: bool
    deleting: bool
    ip: str | None
    acknowledgement: Acknowledgement | None = None
    missing: str | None = None
    """Why it gave no acknowledgement when asked: the error's kind (never a body); None if it gave one."""

    @property
    def asked(self) -> bool:
        """Whether the read phase asks it what it serves: it may be counted, or it may say why it is not Ready."""
        return self.ip is not None and (self.ready or not self.deleting)

    @property
    def counted(self) -> bool:
        return self.ip is not None and self.ready and (not self.deleting or self.acknowledgement is not None)

    @property
    def serving_digest(self) -> str | None:
        serving = self.acknowledgement.serving if self.acknowledgement is not None else None
        return serving.digest if serving is not None else None

    @property
    def entries(self) -> frozenset[str]:
        """The entry digests it serves (none without an acknowledgement)."""
        serving = self.acknowledgement.serving if self.acknowledgement is not None else None
        return frozenset(serving.entries) if serving is not None else frozenset()


@dataclass(frozen=True, slots=True)
class Applied:
    """An object the operator server-side applies, as read."""

    _live: dict[str, Any]

    def covers(self, desired: Mapping[str, Any]) -> bool:
        """Every field of `desired` already has that value, so applying it would change nothing.

        The API server may normalise a value (a CPU quantity "0.5" reads back as "500m"); such a field compares
        unequal and costs one redundant, harmless apply per pass.
        """
        return _covers(self._live, desired)

    def at(self, *path: str | int) -> Any:
        """A copy of the value at `path` (keys and list indexes); None if there is none. For a field whose keys
        must match exactly, not just cover (a key the desired object dropped is still in the live one)."""
        value: Any = self._live
        for step in path:
            try:
                value = value[step]
            except (KeyError, IndexError, TypeError):
                return None
        return copy.deepcopy(value)


@dataclass(frozen=True, slots=True)
class McpGateway:
    """The namespace's McpGateway (`gateway_settings`): how its gateway runs, where not the operator's default."""

    id: Identity
    spec: dict[str, Any]
    status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Deployment:
    """The gateway Deployment: the restart digest and configuration Secret its template names, and whether its
    rollout completed."""

    restart_digest: str | None
    config_secret: str | None
    rollout_complete: bool
    applied: Applied
    stalled: tuple[str, str] | None = None
    """(reason, message) of a Progressing=False condition: the controller gave up on the rollout."""


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    name: str
    secrets: frozenset[str]
    """Every Secret its pod template mounts: an older operator's configuration Secret is kept while one does."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one reconcile pass of a namespace reads, read before anything is written."""

    namespace: str
    watches: tuple[Watch, ...]
    tokens: tuple[Token, ...]
    secrets: tuple[Secret, ...]
    deployment: Deployment | None = None
    replicasets: tuple[ReplicaSet, ...] = ()
    service_account: Applied | None = None
    service: Applied | None = None
    role: Applied | None = None
    role_binding: Applied | None = None
    mcp_gateway: McpGateway | None = None
    disruption_budget: Applied | None = None
    """The gateway's PodDisruptionBudget, if the operator made one (by its managed-by label); others are ignored."""
    network_policy: Applied | None = None
    """The gateway's NetworkPolicy, if the operator made one (by its managed-by label); others are ignored."""
    pods: tuple[Pod, ...] = ()
    """The gateway's pods, each asked what it serves if it may be counted."""

    def secret(self, name: str) -> Secret | None:
        return next((s for s in self.secrets if s.name == name), None)

    def versions(self) -> frozenset[str]:
        """`version_key` of every object read that an operator watch delivers: the ResourceWatches, WebhookTokens,
        McpGateway, Secrets and the gateway Deployment."""
        ids = [*(x.id for x in self.watches), *(t.id for t in self.tokens)]
        ids += [self.mcp_gateway.id] if self.mcp_gateway is not None else []
        keys = {version_key(i.kind, i.name, i.resource_version) for i in ids}
        keys |= {version_key("Secret", s.name, s.resource_version) for s in self.secrets}
        if self.deployment is not None:
            rv = self.deployment.applied.at("metadata", "resourceVersion")
            keys.add(version_key("Deployment", objects.NAME, str(rv or "")))
        return frozenset(keys)

    def secret_data(self) -> SecretData:
        return {s.name: dict(s.data) for s in self.secrets}

    def secret_versions(self) -> dict[str, str]:
        """Secret name -> its resourceVersion as read."""
        return {s.name: s.resource_version for s in self.secrets}

    @property
    def config(self) -> ConfigSecret | None:
        """The configuration Secret as read; None before the operator first wrote it."""
        found = self.secret(objects.CONFIG_SECRET)
        if found is None:
            return None
        digest = found.annotations.get(objects.DIGEST_ANNOTATION)
        return ConfigSecret(found.data.get(objects.CONFIG_KEY), digest, _time(found), found)

    def counted(self) -> tuple[Pod, ...]:
        return tuple(p for p in self.pods if p.counted)

    def heard(self) -> tuple[Pod, ...]:
        """Every pod that answered with an acknowledgement, counted or not."""
        return tuple(p for p in self.pods if p.acknowledgement is not None)

    def heard_uncounted(self) -> tuple[Pod, ...]:
        """The pods that answered but are not counted (not Ready): only what they refused is taken from them."""
        return tuple(p for p in self.heard() if not p.counted)


def version_key(kind: str, name: str, resource_version: str) -> str:
    """One version of one object of a namespace, as `Snapshot.versions` and the watch handlers name it."""
    return f"{kind}/{name}@{resource_version}"


def snapshot(
    namespace: str,
    *,
    watches: Iterable[dict[str, Any]],
    webhook_tokens: Iterable[dict[str, Any]],
    secrets: Iterable[dict[str, Any]],
    deployment: dict[str, Any] | None = None,
    replicasets: Iterable[dict[str, Any]] = (),
    service_account: dict[str, Any] | None = None,
    service: dict[str, Any] | None = None,
    mcp_gateway: dict[str, Any] | None = None,
    disruption_budget: dict[str, Any] | None = None,
    network_policy: dict[str, Any] | None = None,
    role: dict[str, Any] | None = None,
    role_binding: dict[str, Any] | None = None,
    pods: Iterable[Pod] = (),
) -> Snapshot:
    """Build the views from the API's objects; objects being deleted are already gone as far as we care."""
    secret_views = tuple(secret(s) for s in secrets)
    data = {s.name: s.data for s in secret_views}
    return Snapshot(
        namespace,
        tuple(watch(w) for w in _live(watches)),
        tuple(token(t, data) for t in _live(webhook_tokens)),
        secret_views,
        deployment=gateway_deployment(deployment) if deployment else None,
        replicasets=tuple(replicaset(rs) for rs in replicasets),
        service_account=_applied(service_account),
        service=_applied(service),
        role=_applied(role),
        role_binding=_applied(role_binding),
        mcp_gateway=mcp_gateway_view(mcp_gateway) if mcp_gateway and not _being_deleted(mcp_gateway) else None,
        disruption_budget=_ours(disruption_budget),
        network_policy=_ours(network_policy),
        pods=tuple(pods),
    )


def _applied(obj: Mapping[str, Any] | None) -> Applied | None:
    return Applied(copy.deepcopy(dict(obj))) if obj else None


def mcp_gateway_view(obj: Mapping[str, Any]) -> McpGateway:
    return McpGateway(identity(obj), copy.deepcopy(obj.get("spec") or {}), copy.deepcopy(obj.get("status") or {}))


def _ours(obj: Mapping[str, Any] | None) -> Applied | None:
    """`obj` if the operator made it: a user's object of the same name is neither compared nor deleted."""
    labels = (obj or {}).get("metadata", {}).get("labels") or {}
    if obj is None or not objects.MANAGED.items() <= labels.items():
        return None
    return Applied(copy.deepcopy(dict(obj)))


def identity(obj: Mapping[str, Any]) -> Identity:
    meta = obj["metadata"]
    return Identity(
        obj["apiVersion"],
        obj["kind"],
        meta["name"],
        meta["uid"],
        meta.get("generation", 0),
        meta.get("creationTimestamp", ""),
        meta.get("resourceVersion", ""),
    )


def watch(obj: Mapping[str, Any]) -> Watch:
    return Watch(identity(obj), copy.deepcopy(obj.get("spec") or {}), copy.deepcopy(obj.get("status") or {}))


def token(obj: Mapping[str, Any], secrets: Mapping[str, Mapping[str, str]]) -> Token:
    saved = secrets.get(tokens.state_secret_name(obj["metadata"]["name"]))
    spec, status = copy.deepcopy(obj.get("spec") or {}), copy.deepcopy(obj.get("status") or {})
    return Token(identity(obj), spec, status, tokens.parse_state(saved), saved is not None)


def secret(obj: Mapping[str, Any]) -> Secret:
    meta = obj["metadata"]
    owners = frozenset(o["uid"] for o in meta.get("ownerReferences") or [])
    annotations = dict(meta.get("annotations") or {})
    return Secret(meta["name"], dict(meta.get("labels") or {}), decode(obj), owners, annotations, _version(meta))


def _version(meta: Mapping[str, Any]) -> str:
    return str(meta.get("resourceVersion") or "")


def _time(found: Secret) -> float | None:
    """The configuration Secret's `updated-at`; None if absent or unreadable (nothing is then late)."""
    text = found.annotations.get(objects.UPDATED_ANNOTATION)
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))) if text else None
    except ValueError:
        return None


def pod(obj: Mapping[str, Any], answer: Acknowledgement | str | None = None) -> Pod:
    """A gateway pod's view; `answer`: its acknowledgement, or why it gave none (None: it was not asked)."""
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    ack = answer if isinstance(answer, Acknowledgement) else None
    missing = answer if isinstance(answer, str) else None
    return Pod(obj["metadata"]["name"], ready, _being_deleted(obj), status.get("podIP") or None, ack, missing)


def decode(obj: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            continue  # binary values cannot be tokens or URLs; ignore rather than fail the namespace
    return out


def gateway_deployment(obj: Mapping[str, Any]) -> Deployment:
    template = obj.get("spec", {}).get("template", {})
    annotations = template.get("metadata", {}).get("annotations") or {}
    return Deployment(
        annotations.get(objects.RESTART_ANNOTATION),
        _config_volume(template),
        rollout_complete(dict(obj)),
        Applied(copy.deepcopy(dict(obj))),
        _stalled(obj),
    )


def _stalled(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    progressing = next((x for x in conditions if x.get("type") == "Progressing"), None)
    if progressing is None or progressing.get("status") != "False":
        return None
    return str(progressing.get("reason", "")), str(progressing.get("message", ""))


def replicaset(obj: Mapping[str, Any]) -> ReplicaSet:
    template = obj.get("spec", {}).get("template", {})
    return ReplicaSet(obj["metadata"]["name"], frozenset(v["secret"]["secretName"] for v in _volumes(template)))


def _config_volume(template: Mapping[str, Any]) -> str | None:
    return next((v["secret"]["secretName"] for v in _volumes(template) if v.get("name") == "config"), None)


def _volumes(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [v for v in (template.get("spec") or {}).get("volumes") or [] if "secret" in v]


def _live(objs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if not _being_deleted(o)]


def _being_deleted(obj: Mapping[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _covers(live: Any, desired: Any) -> bool:
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and _covers(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(_covers, live, desired))
    return bool(live == desired)
