"""The read phase of a reconcile: everything one namespace holds that a decision needs, and no writes at all.

Reading everything before deciding anything means a pass decides from one view of the namespace, and a write
can never be the input of a decision in the same pass (a created Secret is read back by the next pass). Besides
the API, each gateway pod that may be counted is asked what it serves (`acks`), after everything else is read:
an acknowledgement is never older than the configuration Secret the pass decides from.
Of the namespace's Secrets it reads only what the decision can use (`references`): the operator's own, listed
by label, and each Secret a WebhookToken or ResourceWatch names, by name. However many other Secrets the
namespace holds, and however large, their data never reaches the operator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from mcpg_operator import acks, gateway_policy, gateway_settings, objects, observed
from mcpg_operator.kube import Client, ns_path
from mcpg_operator.models import GROUP
from mcpg_operator.reconcile import references

GATEWAY_SELECTOR = ",".join(f"{k}={v}" for k, v in objects.SELECTOR.items())


async def read(kube: Client, namespace: str, fetch: acks.Fetch | None = None) -> observed.Snapshot:
    """`fetch`: how a pod is asked for its acknowledgement (None: over HTTP, on its admin port).

    In three rounds, each round's reads sent at once (one round trip each, not one per object: at 500 namespaces
    the reads one after the other were a third of each pass's time): the watches and tokens, then the Secrets they
    name, and with them the gateway's objects; the pods' acknowledgements last of all.
    """
    watches, webhook_tokens = await asyncio.gather(
        kube.list(ns_path(namespace, "resourcewatches", group=GROUP)),
        kube.list(ns_path(namespace, "webhooktokens", group=GROUP)),
    )
    named, gateway = await asyncio.gather(secrets(kube, namespace, watches, webhook_tokens), _gateway(kube, namespace))
    return observed.snapshot(
        namespace,
        watches=watches,
        webhook_tokens=webhook_tokens,
        secrets=named,
        **gateway,
        pods=await acks.read(kube, namespace, fetch) if watches else (),
    )


async def _gateway(kube: Client, namespace: str) -> dict[str, Any]:
    """The gateway's objects and settings, as `observed.snapshot` takes them, read at once."""
    reads = {
        "deployment": kube.get(ns_path(namespace, "deployments", objects.NAME, group="apps")),
        # An older operator's configuration Secrets are kept while a ReplicaSet (kept for rollback) mounts one.
        "replicasets": kube.list(ns_path(namespace, "replicasets", group="apps"), GATEWAY_SELECTOR),
        "service_account": kube.get(ns_path(namespace, "serviceaccounts", objects.NAME)),
        "service": kube.get(ns_path(namespace, "services", objects.NAME)),
        "mcp_gateway": kube.get(ns_path(namespace, gateway_settings.PLURAL, gateway_settings.NAME, group=GROUP)),
        "disruption_budget": kube.get(ns_path(namespace, "poddisruptionbudgets", objects.NAME, group="policy")),
        "network_policy": kube.get(
            ns_path(namespace, "networkpolicies", objects.NAME, group=gateway_policy.NETWORKING)
        ),
        "role": kube.get(ns_path(namespace, "roles", objects.NAME, group=objects.RBAC)),
        "role_binding": kube.get(ns_path(namespace, "rolebindings", objects.NAME, group=objects.RBAC)),
    }
    return dict(zip(reads, await asyncio.gather(*reads.values()), strict=True))


async def secrets(
    kube: Client, namespace: str, watches: Sequence[dict[str, Any]], webhook_tokens: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The operator's own Secrets of the namespace, then each Secret its live objects name that is not one of
    them: one GET per name, so the count is that of the references, never that of the namespace's Secrets."""
    own = await kube.list(ns_path(namespace, "secrets"), references.OWN_SELECTOR)
    have = {s["metadata"]["name"] for s in own}
    names = references.referenced(_specs(watches), _specs(webhook_tokens))
    named = await asyncio.gather(*(kube.get(ns_path(namespace, "secrets", name)) for name in names if name not in have))
    return [*own, *(s for s in named if s is not None)]


def _specs(objs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    # An object being deleted is gone as far as the decision cares (`observed.snapshot`), so it names nothing.
    return [o.get("spec") or {} for o in objs if not o["metadata"].get("deletionTimestamp")]
