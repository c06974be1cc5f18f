"""The managed bus, cluster-wide: one NATS server whose accounts are the gateway namespaces' bus credentials.

Read every namespace's `mcpg-gateway-bus` Secret (by label, cluster-wide or in each watched namespace) and the
server's objects, decide (pure) which objects to apply or delete, write the difference. Run by a scheduler of its
own, under one key (so never two runs at once, and a burst of requests becomes one run): after a namespace pass
created or removed its bus Secret, when a bus Secret changes, at start and on every resync. A run that finds
everything as decided writes nothing. With no account at all the server is removed, not run open to anyone.

When the operator runs no server (gateway replicas 1, or an external bus: `bus.runs_server`), one it ran before
is left over, its configuration still holding every namespace's password. `remove_leftovers` deletes it once, at
start: only objects carrying the operator's managed-by label, never a user's object of the same name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpg_operator import bus, objects, observed, write
from mcpg_operator import writes as w
from mcpg_operator.kube import Client, Refused, ns_path
from mcpg_operator.reconcile import Outcome
from mcpg_operator.settings import BusSettings

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
    """What a run reads: each gateway namespace's bus password, and the server's objects as they are."""

    passwords: dict[str, str]
    live: dict[w.Ref, observed.Applied | None]


async def reconcile(kube: Client, settings: BusSettings, watch_namespaces: Sequence[str] = ()) -> Outcome:
    """One run; `watch_namespaces`: where bus Secrets may be (empty: every namespace, listed cluster-wide)."""
    found = await read(kube, settings.namespace, watch_namespaces)
    await write.execute(kube, settings.namespace, decide(found, settings))
    return Outcome()


async def read(kube: Client, namespace: str, watch_namespaces: Sequence[str]) -> Found:
    # The operator's RBAC is cluster-wide exactly when it watches every namespace.
    paths = [ns_path(ns, "secrets") for ns in watch_namespaces] or ["/api/v1/secrets"]
    listed = [s for path in paths for s in await kube.list(path, bus.CREDENTIALS_SELECTOR)]
    live = await read_server(kube, namespace)
    return Found(passwords(listed), {ref: observed.Applied(obj) if obj else None for ref, obj in live.items()})


async def read_server(kube: Client, namespace: str) -> dict[w.Ref, dict[str, Any] | None]:
    """The server's objects in `namespace` as they are (None: there is none)."""
    return {ref: await kube.get(ns_path(namespace, ref.plural, ref.name, ref.group)) for ref in REFS}


def passwords(secrets: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Gateway namespace -> its bus password, from the listed credentials Secrets. Pure.

    Only the Secret of the expected name counts, so a tenant's other labelled Secrets add nothing; one whose
    password could not be written into nats.conf safely is left out (its gateways cannot join) and logged by
    namespace, never with the value.
    """
    out: dict[str, str] = {}
    for secret in secrets:
        meta = secret["metadata"]
        if meta.get("name") != bus.CREDENTIALS_SECRET or meta.get("deletionTimestamp"):
            continue
        password = observed.decode(secret).get(bus.PASSWORD_KEY)
        if password is not None and bus.usable_password(password):
            out[meta["namespace"]] = password
        else:
            logger.warning(
                "the bus Secret %s in namespace %s has no usable password (a URL-safe token of 16 or more "
                "characters): that namespace gets no account on the bus",
                bus.CREDENTIALS_SECRET,
                meta["namespace"],
            )
    return out


def decide(found: Found, settings: BusSettings) -> list[w.Write]:
    """The writes that make the server match the accounts. Pure."""
    if not found.passwords:  # no account: a server without users would let anyone in
        return [w.DeleteObject(ref) for ref in reversed(REFS) if found.live[ref] is not None]
    desired = bus.managed_objects(settings.namespace, settings.image, found.passwords)
    out: list[w.Write] = []
    for ref, body in zip(REFS, desired, strict=True):
        live = found.live[ref]
        if live is None or not live.covers(body):
            out.append(w.ApplyObject(w.Stage.GATEWAY, ref, body))
    if out:
        logger.info("managed bus: applying %d object(s) for %d gateway namespace(s)", len(out), len(found.passwords))
    return out


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
