"""The managed bus, cluster-wide: one NATS server with an account for each gateway namespace the operator serves.

Which namespaces: those with a ResourceWatch (so a gateway) whose replicas share the managed bus, as their
McpGateway shapes them (`gateway_settings.shape`), plus those whose operator-made credentials Secret is still
there after they stopped (a rollout to one replica has not finished: the old pods still use the bus). Nothing a
tenant writes adds an account or chooses its password: passwords are derived from the operator's key
(`bus_key`), and a Secret alone, without a served namespace, counts for nothing. The configuration is bounded
(`bus.fitting`): past its bound, a namespace that joins waits and is logged, and none already listed is dropped.

Read, decide (pure) which objects to apply or delete, write the difference. Run by a scheduler of its own, under
one key (so never two runs at once, and a burst of requests becomes one run): after a namespace pass created or
removed its bus Secret, when a bus Secret changes, at start and on every resync. A run that finds everything as
decided writes nothing. With no account at all the server is removed, not run open to anyone.

When the operator runs no server (gateway replicas 1, or an external bus: `bus.runs_server`), one it ran before
is left over, its configuration still holding every namespace's password. `remove_leftovers` deletes it once, at
start: only objects carrying the operator's managed-by label, never a user's object of the same name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpg_operator import actions as w
from mcpg_operator import bus, gateway_settings, objects, observed
from mcpg_operator.bus_key import BusKey
from mcpg_operator.kube import Client, Refused, ns_path
from mcpg_operator.models import GROUP
from mcpg_operator.reconcile import write
from mcpg_operator.reconcile.run import Outcome
from mcpg_operator.settings import BusSettings, GatewayDefaults

logger = logging.getLogger(__name__)

REFS = (
    w.Ref("secrets", bus.CONFIG_SECRET),
    w.Ref("services", bus.NAME),
    w.Ref("deployments", bus.NAME, "apps"),
)
"""The server's objects, in the order `bus.managed_objects` builds them (and they are applied)."""
MANAGED_BY = "app.kubernetes.io/managed-by"
BY_HAND = (
    "kubectl -n {ns} delete deployment,service,secret "
    f"-l {MANAGED_BY}={objects.MANAGED[MANAGED_BY]},{','.join(f'{k}={v}' for k, v in bus.SELECTOR.items())}"
)
"""How an administrator removes a server left over, and only the operator's objects (all three carry both labels)."""


@dataclass(frozen=True, slots=True)
class Found:
    """What a run reads: each served gateway namespace's password, and the server's objects as they are."""

    passwords: dict[str, str]
    live: dict[w.Ref, observed.Applied | None]


async def reconcile(
    kube: Client,
    settings: BusSettings,
    watch_namespaces: Sequence[str] = (),
    defaults: GatewayDefaults | None = None,
    key: BusKey | None = None,
) -> Outcome:
    """One run; `watch_namespaces`: where gateways may be (empty: every namespace, listed cluster-wide);
    `defaults`: the gateways' settings before a namespace's McpGateway (None: the operator's defaults)."""
    key = key or BusKey(kube, settings.namespace)
    served = await accounts(kube, settings, watch_namespaces, defaults or GatewayDefaults())
    live = await read_server(kube, settings.namespace)
    found = Found(
        {ns: await key.password(ns) for ns in served},
        {ref: observed.Applied(obj) if obj else None for ref, obj in live.items()},
    )
    await write.execute(kube, settings.namespace, decide(found, settings))
    return Outcome()


async def accounts(
    kube: Client, settings: BusSettings, watch_namespaces: Sequence[str], defaults: GatewayDefaults
) -> list[str]:
    """The gateway namespaces that get an account: served, and on the managed bus (or still leaving it)."""
    watched = _namespaces(await _list(kube, "resourcewatches", watch_namespaces))
    gateways = {g["metadata"]["namespace"]: g for g in await _list(kube, gateway_settings.PLURAL, watch_namespaces)}
    out = []
    for namespace in sorted(watched):
        if _on_bus(namespace, gateways.get(namespace), defaults, settings) or await _leaving(kube, namespace):
            out.append(namespace)
    return out


async def _list(kube: Client, plural: str, watch_namespaces: Sequence[str]) -> list[dict[str, Any]]:
    # The operator's RBAC is cluster-wide exactly when it watches every namespace.
    paths = [ns_path(ns, plural, group=GROUP) for ns in watch_namespaces] or [f"/apis/{GROUP}/v1alpha1/{plural}"]
    return [item for path in paths for item in await kube.list(path)]


def _namespaces(items: Iterable[Mapping[str, Any]]) -> set[str]:
    return {i["metadata"]["namespace"] for i in items if not i["metadata"].get("deletionTimestamp")}


def _on_bus(namespace: str, found: Mapping[str, Any] | None, defaults: GatewayDefaults, settings: BusSettings) -> bool:
    """Whether the namespace's gateway replicas share the managed bus, as its McpGateway shapes them."""
    view = observed.mcp_gateway_view(found) if found and not found["metadata"].get("deletionTimestamp") else None
    wiring = bus.wiring(settings, namespace, gateway_settings.shape(view, defaults, settings).defaults.replicas)
    return wiring is not None and wiring.managed


async def _leaving(kube: Client, namespace: str) -> bool:
    """The namespace still holds the credentials Secret the operator made: its pass removes it once no pod
    uses the bus any more, and until then the old pods keep their account."""
    secret = await kube.get(ns_path(namespace, "secrets", bus.CREDENTIALS_SECRET))
    labels = (secret or {}).get("metadata", {}).get("labels") or {}
    return secret is not None and labels.get(bus.CREDENTIALS_LABEL) == "true"


async def read_server(kube: Client, namespace: str) -> dict[w.Ref, dict[str, Any] | None]:
    """The server's objects in `namespace` as they are (None: there is none)."""
    return {ref: await kube.get(ns_path(namespace, ref.plural, ref.name, ref.group)) for ref in REFS}


def decide(found: Found, settings: BusSettings) -> list[w.Write]:
    """The writes that make the server match the accounts, within the configuration's bound. Pure."""
    passwords, left_out = bus.fitting(found.passwords, _listed(found.live[REFS[0]]))
    if left_out:
        logger.error(
            "managed bus: %d gateway namespace(s) get no account, the configuration being full (%d bytes at "
            "most): %s. Their gateway replicas run without sharing events until some namespace leaves the bus",
            len(left_out),
            bus.MAX_CONFIG_BYTES,
            ", ".join(left_out[:20]),
        )
    if not passwords:  # no account: a server without users would let anyone in
        return [w.DeleteObject(ref) for ref in reversed(REFS) if found.live[ref] is not None]
    desired = bus.managed_objects(settings.namespace, settings.image, passwords)
    out: list[w.Write] = []
    for ref, body in zip(REFS, desired, strict=True):
        live = found.live[ref]
        if live is None or not live.covers(body):
            out.append(w.ApplyObject(w.Stage.GATEWAY, ref, body))
    if out:
        logger.info("managed bus: applying %d object(s) for %d gateway namespace(s)", len(out), len(passwords))
    return out


def _listed(config: observed.Applied | None) -> frozenset[str]:
    """The namespaces the live configuration lists, so they keep their place when it is full."""
    encoded = config.at("data", bus.CONFIG_KEY) if config is not None else None
    text = observed.decode({"data": {bus.CONFIG_KEY: encoded}}).get(bus.CONFIG_KEY) if encoded else None
    return bus.listed_accounts(text) if text else frozenset()


# --- a server left over ----------------------------------------------------------------------------------------


async def remove_leftovers(kube: Client, namespace: str) -> Outcome:
    """Delete the managed server left over in `namespace` (`leftovers`); a second run finds nothing to do.

    Refused by RBAC (the chart's bus Role exists in managed mode only), it says so in one log line, with how to
    remove the objects by hand, and is not retried: asking again cannot grant the permission. Any other failure
    propagates, for the scheduler to retry.
    """
    by_hand = BY_HAND.format(ns=namespace)
    try:
        todo = leftovers(await read_server(kube, namespace))
    except Refused as e:  # nothing is known to be left over: worth a note, not a warning
        logger.info(
            "not looking for a managed bus left over in namespace %s: %s. If one ran there, remove it with `%s`",
            namespace,
            e.message,
            by_hand,
        )
        return Outcome()
    names = ", ".join(f"{x.ref.plural}/{x.ref.name}" for x in todo)
    try:
        await write.execute(kube, namespace, todo)
    except Refused as e:
        logger.warning(
            "could not remove all of the managed bus left over in namespace %s (deleting %s, in this order): %s. "
            "The chart's bus Role allows it in managed mode; or remove it with `%s`",
            namespace,
            names,
            e.message,
            by_hand,
        )
        return Outcome()
    if todo:
        logger.info("removed the managed bus left over in namespace %s (no server is run now): %s", namespace, names)
    return Outcome()


def leftovers(live: Mapping[w.Ref, Mapping[str, Any] | None]) -> list[w.DeleteObject]:
    """The deletes that remove a server left over: each of its objects the operator made. Pure.

    The configuration Secret first: it holds every namespace's password, so it goes even where RBAC lets the
    operator delete Secrets but not Deployments (its cluster-wide role, without the bus Role).
    """
    return [w.DeleteObject(ref) for ref in REFS if _made_here(live.get(ref))]


def _made_here(obj: Mapping[str, Any] | None) -> bool:
    """An object the operator made, not already being deleted: a user's object of the same name lacks the label."""
    if obj is None:
        return False
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return not meta.get("deletionTimestamp") and labels.get(MANAGED_BY) == objects.MANAGED[MANAGED_BY]
