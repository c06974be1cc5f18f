"""Reconcile one namespace, level-based, in three phases: read everything, decide (pure), write the difference.

`read` writes nothing, `decide.decide` does no I/O, and `write.execute` performs the decided writes in the
order that makes token rotation safe (see `write`). A pass that finds everything as decided writes nothing,
so running it twice in a row changes nothing the second time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from mcpg_gateway.contract import signing
from mcpg_operator import acks, bus, gateway_settings, metrics, tokens
from mcpg_operator.actions import Write
from mcpg_operator.bus_key import BusKey
from mcpg_operator.kube import Client
from mcpg_operator.reconcile import decide, facts, read, write
from mcpg_operator.settings import BusSettings, GatewayDefaults


@dataclass(frozen=True, slots=True)
class Outcome:
    served: int = 0
    config_digest: str | None = None
    """`digests.document` of the configuration decided; None without a gateway."""
    rollout_complete: bool = False
    """The Deployment runs the pod template this configuration needs, on every pod."""
    next_check_s: float | None = None
    """Reconcile again after this long (a grace period ends, a pod is still to acknowledge), even if nothing else
    happens."""
    rerun: bool = False
    """Reconcile again right away: this pass wrote something (a generated Secret) the next one must read."""
    facts: metrics.Facts | None = None
    """What the pass found and did, as the metrics count it (recorded by the scheduler, which times the pass)."""
    bus_account: bool = False
    """The namespace holds managed bus credentials after this pass: when this changes, the bus must follow."""
    read: frozenset[str] = frozenset()
    """What this pass read, each object at its version (`observed.Snapshot.versions`): an event bringing one of
    these exact versions has nothing new to tell the next pass (`scheduler.Scheduler.request`)."""


def new_token() -> str:
    return secrets.token_urlsafe(32)  # 256 random bits


async def reconcile(
    kube: Client,
    namespace: str,
    defaults: GatewayDefaults,
    clock: Callable[[], float] = time.time,
    token: Callable[[], str] = new_token,
    bus_settings: BusSettings | None = None,
    bus_key: BusKey | None = None,
    fetch: acks.Fetch | None = None,
    secret: Callable[[signing.Scheme], str] = tokens.new_signing_secret,
) -> Outcome:
    """One pass over `namespace`. `bus_settings`: where a bus comes from (None: gateway replicas never share one);
    `bus_key`: what a managed bus's passwords are derived from (None: read from the bus namespace on this pass);
    `fetch`: how a gateway pod is asked what it serves (None: over HTTP); `token` and `secret`: how a generated
    token and signing secret are made."""
    snapshot = await read.read(kube, namespace, fetch)
    now = clock()
    shaped = gateway_settings.shape(snapshot.mcp_gateway, defaults, bus_settings)  # the namespace's McpGateway
    wiring = await _with_password(
        kube, bus.wiring(bus_settings, namespace, shaped.defaults.replicas), bus_settings, bus_key, namespace
    )
    decided = decide.decide(snapshot, shaped.defaults, now, token, wiring, shaped, secret)
    try:
        refusals = await write.execute(kube, namespace, decided.writes, describe_failure=True)
    except write.ApplyFailed as e:
        await _report(kube, namespace, decide.failed(snapshot, decided, e.failure, now))
        raise  # the scheduler retries with backoff
    if refusals:  # report each on its object; the rest of the namespace was written as decided
        await write.execute(kube, namespace, decide.report(snapshot, refusals, now))
    return Outcome(
        served=sum(v.served for v in decided.plan.verdicts.values()),
        config_digest=decided.plan.digest if snapshot.watches else None,
        rollout_complete=decided.rollout_complete,
        next_check_s=decided.next_check_s,
        rerun=decided.rerun and not refusals,
        facts=facts.of(snapshot, decided),
        bus_account=decided.bus_account,
        read=snapshot.versions(),
    )


async def _with_password(
    kube: Client, wiring: bus.Wiring | None, settings: BusSettings | None, key: BusKey | None, namespace: str
) -> bus.Wiring | None:
    """A managed bus's wiring with the namespace's derived password; any other as it is."""
    if wiring is None or not wiring.managed or settings is None:
        return wiring
    key = key or BusKey(kube, settings.namespace)
    return dataclasses.replace(wiring, password=await key.password(namespace))


async def _report(kube: Client, namespace: str, todo: tuple[Write, ...]) -> None:
    """Best effort: when the API server cannot take a status either, the retry reports it later."""
    with contextlib.suppress(Exception):
        await write.execute(kube, namespace, todo)
