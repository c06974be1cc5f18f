"""The read phase of a reconcile: everything one namespace holds that a decision needs, and no writes at all.

Reading everything before deciding anything means a pass decides from one view of the namespace, and a write
can never be the input of a decision in the same pass (a created Secret is read back by the next pass).
"""

from __future__ import annotations

from mcpg_operator import gateway_policy, gateway_settings, objects, observed
from mcpg_operator.kube import Client, ns_path
from mcpg_operator.models import GROUP

GATEWAY_SELECTOR = ",".join(f"{k}={v}" for k, v in objects.SELECTOR.items())


async def read(kube: Client, namespace: str) -> observed.Snapshot:
    return observed.snapshot(
        namespace,
        watches=await kube.list(ns_path(namespace, "resourcewatches", group=GROUP)),
        webhook_tokens=await kube.list(ns_path(namespace, "webhooktokens", group=GROUP)),
        # Every Secret: a watch may reference any of them, and configuration Secrets are collected from here.
        secrets=await kube.list(ns_path(namespace, "secrets")),
        deployment=await kube.get(ns_path(namespace, "deployments", objects.NAME, group="apps")),
        replicasets=await kube.list(ns_path(namespace, "replicasets", group="apps"), GATEWAY_SELECTOR),
        service_account=await kube.get(ns_path(namespace, "serviceaccounts", objects.NAME)),
        service=await kube.get(ns_path(namespace, "services", objects.NAME)),
        mcp_gateway=await kube.get(ns_path(namespace, gateway_settings.PLURAL, gateway_settings.NAME, group=GROUP)),
        disruption_budget=await kube.get(ns_path(namespace, "poddisruptionbudgets", objects.NAME, group="policy")),
        network_policy=await kube.get(
            ns_path(namespace, "networkpolicies", objects.NAME, group=gateway_policy.NETWORKING)
        ),
    )
