"""The write phase of a reconcile: perform a decision's writes, stage by stage, and nothing else.

The order, and why:

1. `TOKEN_SECRETS`: Secrets generated for WebhookTokens (`generate: true`). A pass that creates one writes
   nothing else; the next pass (at once) reads it back and promotes it like any edited Secret.
2. `ROTATION_STATE`: each changed rotation-state Secret, always before the Deployment changes. The state is what
   a configuration is rendered from, so after a restart a promotion is neither repeated nor lost, and a
   retirement is never rolled out without being recorded.
3. `GATEWAY`: the bus credentials Secret (managed bus) and the configuration Secret (immutable, named by its
   content hash), so both exist before any pod template names them, then the ServiceAccount, the Service and the
   Deployment (server-side apply).
4. `COLLECT`: configuration Secrets that neither the applied template, the template as read, nor any
   ReplicaSet mounts, and bus credentials no longer used. After the Deployment, so a Secret is never deleted
   before the template stops naming it.
5. `STATUS`: status merge-patches of ResourceWatches and WebhookTokens, once what they report has been written.
6. `EVENTS`: Events last, so an Event never announces a change that a failed write did not make.

A write that fails raises: the pass stops there, and the next pass (with backoff) reads again and redoes
whatever is still needed, since every write is idempotent. The exception is a write made for one object
(`about`) that the API server refuses: that object alone is at fault, so the refusal is returned to be
reported on it, and the other writes go on.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcpg_operator import writes as w
from mcpg_operator.kube import Client, NamespaceTerminating, Refused, ns_path


async def execute(kube: Client, namespace: str, todo: Iterable[w.Write]) -> list[w.Refusal]:
    refusals = []
    for write in w.in_order(list(todo)):
        about = write.about if isinstance(write, w.CreateObject) else None
        try:
            await _one(kube, namespace, write)
        except NamespaceTerminating:
            raise
        except Refused as e:
            if about is None:
                raise
            refusals.append(w.Refusal(about, e.message))
    return refusals


async def _one(kube: Client, namespace: str, write: w.Write) -> None:
    match write:
        case w.CreateObject(ref=ref, body=body):
            await kube.create(_path(namespace, ref, named=False), body)  # None if it exists: then it stays
        case w.ApplyObject(ref=ref, body=body):
            await kube.apply(_path(namespace, ref), body)
        case w.MergePatch(ref=ref, patch=patch):
            await kube.merge_patch(_path(namespace, ref), patch)
        case w.DeleteObject(ref=ref):
            await kube.delete(_path(namespace, ref))
        case w.MergePatchStatus(ref=ref, status=status):
            await kube.merge_patch(_path(namespace, ref) + "/status", {"status": status})
        case w.PostEvent(body=body):
            await kube.create(ns_path(namespace, "events"), body)


def _path(namespace: str, ref: w.Ref, named: bool = True) -> str:
    return ns_path(namespace, ref.plural, ref.name if named else None, group=ref.group)
