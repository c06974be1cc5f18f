"""The writes that keep a namespace's gateway objects as decided: step 6 of `decide`, for the objects. Pure.

Given the configuration rendered for the pass, this says what the namespace's gateway needs written, and only
where the namespace does not already hold it: the configuration Secret (one, written in place only when its text
changes, so each digest is written once: every write costs every pod an event), the ServiceAccount, the Role and
RoleBinding that let its pods read that Secret, the Service and Deployment (server-side apply), the optional budget
and policy (`gateway_policy`), the managed bus's credentials Secret, and an older operator's configuration Secrets
once no ReplicaSet mounts them. Every object is owned by every ResourceWatch of the namespace, so the last one
deleted takes the gateway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcpg_gateway.contract import digests
from mcpg_operator import actions as w
from mcpg_operator import bus, gateway_policy, gateway_settings, objects, observed, render
from mcpg_operator import conditions as c
from mcpg_operator.settings import GatewayDefaults


def writes(
    snap: observed.Snapshot,
    plan: render.Plan,
    defaults: GatewayDefaults,
    wiring: bus.Wiring | None,
    rolled_out: bool,
    shaped: gateway_settings.Shape,
    now: float,
) -> list[w.Write]:
    """`rolled_out`: every pod runs the template this configuration needs; `now`: when a new digest is written."""
    if not snap.watches:
        return []  # without a ResourceWatch there is no gateway: garbage collection removes its objects
    owners = objects.owner_references([(rw.name, rw.id.uid) for rw in snap.watches])
    return _service_last(
        [
            *_bus_credentials(snap, wiring, owners, rolled_out),
            *_config_secret(snap, plan, owners, now),
            *_gateway_writes(snap, plan, defaults, wiring, owners, shaped.service_annotations),
            *gateway_policy.writes(snap, shaped, owners, plan.config, wiring),
            *_collectable(snap),
        ]
    )


def restart_digest(plan: render.Plan) -> str:
    """What the pod template carries of the configuration: the digest of its restart-only fields."""
    return digests.restart(plan.config)


def _service_last(todo: list[w.Write]) -> list[w.Write]:
    """`todo` with the gateway Service's apply after every other write of the gateway's objects, deletions included.

    A refused write ends the pass, and the Service is the object the API server refuses for reasons outside the
    namespace (a fixed node port another namespace holds, a quota on node ports): behind it, a deleted McpGateway's
    replicas, resources and budget would stay as it left them. No other write needs the Service first.
    """
    service = w.Ref("services", objects.NAME)
    last = [x for x in todo if isinstance(x, w.ApplyObject) and x.ref == service]
    rest = [x for x in todo if not (isinstance(x, w.ApplyObject) and x.ref == service)]
    return [*rest, *(w.ApplyObject(w.Stage.COLLECT, x.ref, x.body) for x in last)]


def _gateway_writes(
    snap: observed.Snapshot,
    plan: render.Plan,
    defaults: GatewayDefaults,
    wiring: bus.Wiring | None,
    owners: list[dict[str, Any]],
    service_annotations: dict[str, str],
) -> list[w.Write]:
    ns = snap.namespace
    out: list[w.Write] = []
    deployment = snap.deployment.applied if snap.deployment else None
    desired = objects.deployment(ns, restart_digest(plan), defaults, owners, bus.pod_env(wiring))
    # The Role and its binding before the Deployment: a new pod reads its configuration Secret as it starts.
    for live, ref, body in (
        (snap.service_account, w.Ref("serviceaccounts", objects.NAME), objects.service_account(ns, owners)),
        (snap.role, w.Ref("roles", objects.NAME, objects.RBAC), objects.role(ns, owners)),
        (snap.role_binding, w.Ref("rolebindings", objects.NAME, objects.RBAC), objects.role_binding(ns, owners)),
        (snap.service, w.Ref("services", objects.NAME), objects.service(ns, owners, defaults, service_annotations)),
        (deployment, w.Ref("deployments", objects.NAME, "apps"), desired),
    ):
        if live is None or not live.covers(body) or gateway_settings.differs_exactly(live, body):
            out.append(w.ApplyObject(w.Stage.GATEWAY, ref, body))
    return out


def _config_secret(
    snap: observed.Snapshot, plan: render.Plan, owners: list[dict[str, Any]], now: float
) -> list[w.Write]:
    """Written (server-side apply) only when what it holds differs from what was rendered, so never twice for one
    digest (each write is an event for every pod); its `updated-at` says when the write that set this digest was
    made, and is kept by a write that restores an edited text. Otherwise only its owners (or a removed `updated-at`)
    may need a merge patch, which changes no digest: no pod applies anything."""
    existing = snap.config
    body = objects.config_secret(snap.namespace, plan.config, owners, c.now_iso(now))
    ref = w.Ref("secrets", objects.CONFIG_SECRET)
    if existing is None or existing.text != objects.config_text(plan.config) or existing.digest != plan.digest:
        if existing is not None and existing.digest == plan.digest and existing.updated_at is not None:
            body["metadata"]["annotations"][objects.UPDATED_ANNOTATION] = c.now_iso(existing.updated_at)
        return [w.ApplyObject(w.Stage.GATEWAY, ref, body)]
    if existing.updated_at is None:  # someone removed it: without it no pod is ever late
        return [w.MergePatch(w.Stage.GATEWAY, ref, {"metadata": {"annotations": _updated(now)}})]
    if existing.secret.owner_uids != {o["uid"] for o in owners}:
        return [w.MergePatch(w.Stage.GATEWAY, ref, {"metadata": {"ownerReferences": owners}})]
    return []


def _updated(now: float) -> dict[str, str]:
    return {objects.UPDATED_ANNOTATION: c.now_iso(now)}


def _bus_credentials(
    snap: observed.Snapshot,
    wiring: bus.Wiring | None,
    owners: list[dict[str, Any]],
    rolled_out: bool,
) -> list[w.Write]:
    """The namespace's managed bus credentials: the pods' copy of its derived password, kept owned by every watch.

    Decided before the Deployment in the same stage, so the Secret exists before a pod template refers to it.
    The name is the operator's: a Secret of that name holding anything else (a tenant's edit, or one written
    before the operator made it) is replaced, so that the pods get the password the server has. One the
    namespace no longer uses (one replica, or an external bus) is deleted once every pod runs the configuration
    without it: until then a restarting container of an older pod still reads it.
    """
    ref = w.Ref("secrets", bus.CREDENTIALS_SECRET)
    existing = snap.secret(ref.name)
    if not _managed(wiring) or wiring is None or wiring.password is None:
        return [w.DeleteObject(ref)] if _has_bus_secret(snap) and rolled_out else []
    body = bus.credentials_secret(snap.namespace, wiring.password, owners)
    if existing is None:
        return [w.CreateObject(w.Stage.GATEWAY, ref, body)]
    if not _holds(existing, snap.namespace, wiring.password):
        return [w.ApplyObject(w.Stage.GATEWAY, ref, body)]
    if existing.owner_uids != {o["uid"] for o in owners}:
        # As for the configuration Secret: owned by one watch only, it would go with that watch.
        return [w.MergePatch(w.Stage.GATEWAY, ref, {"metadata": {"ownerReferences": owners}})]
    return []


def _holds(secret: observed.Secret, namespace: str, password: str) -> bool:
    """The credentials Secret is the operator's, as made: its label, the account's user and the password."""
    wanted = {bus.USER_KEY: bus.account_user(namespace), bus.PASSWORD_KEY: password}
    labelled = all(secret.labels.get(k) == "true" for k in (bus.CREDENTIALS_LABEL, objects.WATCHED_LABEL))
    return labelled and secret.data == wanted


def bus_account(snap: observed.Snapshot, todo: Sequence[w.Write]) -> bool:
    """Whether the namespace holds managed bus credentials once the writes `todo` are done.

    Without a watch it keeps them until the garbage collector removes them; that deletion is an event, and the
    pass it starts reports the change.
    """
    ref = w.Ref("secrets", bus.CREDENTIALS_SECRET)
    for write in todo:
        if isinstance(write, w.CreateObject | w.DeleteObject) and write.ref == ref:
            return isinstance(write, w.CreateObject)
    return _has_bus_secret(snap)


def _managed(wiring: bus.Wiring | None) -> bool:
    return wiring is not None and wiring.managed


def _has_bus_secret(snap: observed.Snapshot) -> bool:
    """The namespace holds the operator's bus credentials (a user's Secret of that name is never touched)."""
    found = snap.secret(bus.CREDENTIALS_SECRET)
    return found is not None and found.labels.get(bus.CREDENTIALS_LABEL) == "true"


def _collectable(snap: observed.Snapshot) -> list[w.Write]:
    """An older operator's configuration Secrets (one per content hash) that no ReplicaSet (current, starting, or
    kept for rollback) mounts any more. The one configuration Secret of today is never collected."""
    needed = {objects.CONFIG_SECRET}
    if snap.deployment is not None and snap.deployment.config_secret:
        needed.add(snap.deployment.config_secret)  # its ReplicaSet may not exist yet
    for rs in snap.replicasets:
        needed |= rs.secrets
    return [w.DeleteObject(w.Ref("secrets", s.name)) for s in snap.secrets if _is_legacy(s) and s.name not in needed]


def _is_legacy(secret: observed.Secret) -> bool:
    ours = objects.LEGACY_HASH_LABEL in secret.labels and objects.SELECTOR.items() <= secret.labels.items()
    return ours and secret.name.startswith(objects.LEGACY_CONFIG_PREFIX)
