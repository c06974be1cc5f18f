"""kopf handlers: thin wiring only. Every change that can matter asks for a reconcile of its namespace.

All handlers are `on.event` handlers on purpose: they store nothing on the objects (no diffbase annotation, so
Secret data can never be copied into an annotation) and add no finalizers; the reconcile they request is
level-based and idempotent, and a periodic resync covers any event that was missed. They also keep Secret data out
of kopf's own log: its change handlers (`on.create`/`on.update`/...) log the whole body and diff at DEBUG.
The Secret and Deployment watches are filtered by the API server (`watch_only_what_is_needed`): only Secrets
labelled for the operator (`references`) and its own Deployments reach the process at all. An event asks for
nothing when the namespace's last pass read the very version it brings (`version_of`: kopf's listing of each kind
at a restart), or when it can only be the operator's own status write landing (`status_echo`).

With a managed bus (gateway replicas above 1), a second scheduler runs the cluster-wide bus step
(`bus_reconcile`) under one key: at start, on every resync, when a bus credentials Secret changes, and after a
namespace pass that gained or lost its bus credentials. Without one, a scheduler of its own removes a managed
server left over from an earlier run: once, at start (retried only after a transient failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Mapping
from typing import Any

import kopf

from mcpg_operator import bus, bus_reconcile, metrics, objects, observed, settings, tokens
from mcpg_operator.bus_key import BusKey
from mcpg_operator.kube import Client, Kube
from mcpg_operator.reconcile import references
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.scheduler import After, Scheduler, Turns

logger = logging.getLogger(__name__)

MANAGED_BY = "app.kubernetes.io/managed-by"
OPERATOR = objects.MANAGED[MANAGED_BY]
"""The `managed-by` value on what the operator creates; no other tool sets it."""
GATEWAY_DEPLOYMENTS = f"{MANAGED_BY}={OPERATOR}"
"""The Deployment watch's server-side selector: the operator's own (a pod template can hold inline values too)."""
LIST_CHUNK = 100
"""Objects per page of a watch's initial list: at most one page of (labelled) Secrets is held at a time."""
BODY_LOGGERS = ("kubernetes_asyncio.client.rest",)
"""Loggers that write whole API response bodies (Secret data included, base64 being no protection) at DEBUG."""


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # In a pod, the mounted ServiceAccount; elsewhere (tests, a laptop) the kubeconfig in $KUBECONFIG.
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    return info


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf's own per-handler chatter stays in the log; the reconciler posts the Events users should see.
    settings.posting.enabled = False
    # Watches that go quiet (a dropped connection behind a load balancer) are re-established.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # CRDs are installed with the chart before the operator starts, so there is nothing to discover at run time,
    # and the operator needs no permission to list CRDs or namespaces.
    settings.scanning.disabled = True
    # No handler here stores state on objects, but keep kopf's markers under our prefix if it ever does.
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="mcpg.dev", ignored_fields=["data"])
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="mcpg.dev")
    watch_only_what_is_needed(settings)
    quiet_body_loggers()
    await _start(memo, _operator_settings())


def watch_only_what_is_needed(settings: kopf.OperatorSettings) -> None:
    """Filter the Secret and Deployment watches on the API server, so nothing else ever reaches the process.

    A `when=`/`labels=` filter is applied by kopf after the event arrived: every Secret of the cluster, data and
    all, would still stream through. The Secret watch selects `references.SELECTOR`, which every Secret whose
    change matters carries (`references` puts it there); the Deployment watch, the operator's own Deployments.
    """
    settings.watching.label_selectors["", "v1", "secrets"] = references.SELECTOR
    settings.watching.label_selectors["apps", "v1", "deployments"] = GATEWAY_DEPLOYMENTS
    settings.watching.chunk_size = LIST_CHUNK


def quiet_body_loggers() -> None:
    """Keep Secret data out of the log at every level, `kopf run --verbose/--debug` included.

    kopf's --verbose sets the root logger to DEBUG, and kubernetes_asyncio's REST client then logs every response
    body: each list of Secrets the reconcile reads, each rotation-state Secret it applies. Raising just those
    loggers to INFO keeps everything else kopf and the client say at DEBUG. Called before the first request.
    """
    for name in BODY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)


def _operator_settings() -> settings.OperatorSettings:
    # Named apart from kopf's `settings` argument above, which shadows our module inside `startup`.
    return settings.load()


async def _start(memo: kopf.Memo, config: settings.OperatorSettings) -> None:
    # `mcpg-operator` puts the leader's fence on the memo it gives kopf: every write of the reconciler asks it.
    start(memo, await Kube.connect(fence=memo.get("fence")), config)


def start(memo: kopf.Memo, kube: Client, config: settings.OperatorSettings) -> None:
    """The schedulers and the resync, kept on `memo` for the handlers; `stop` stops them."""
    memo.kube = kube
    key = BusKey(kube, config.bus.namespace)  # one per process: every pass derives the same passwords
    turns = Turns(config.reconcile_concurrency)  # one bound over every namespace's pass and the bus step's
    memo.bus = bus_scheduler(kube, config, key, turns)
    after = follow_bus_accounts(memo.bus, config.bus.namespace) if memo.bus else None

    def run(namespace: str) -> Awaitable[reconcile.Outcome]:
        return reconcile.reconcile(kube, namespace, config.gateway, bus_settings=config.bus, bus_key=key)

    memo.scheduler = Scheduler(run, settle_s=config.settle_s, after=after, turns=turns)
    memo.leftovers = leftover_bus_removal(kube, config, turns)
    for at_start in filter(None, (memo.bus, memo.leftovers)):  # at most one of them: `bus.runs_server` decides
        at_start.request(config.bus.namespace)
    memo.resync = asyncio.create_task(_resync([memo.scheduler, *([memo.bus] if memo.bus else [])], config.resync_s))


def bus_scheduler(
    kube: Client, config: settings.OperatorSettings, key: BusKey | None = None, turns: Turns | None = None
) -> Scheduler | None:
    """The scheduler of the cluster-wide bus step, keyed by the bus namespace; None unless a managed bus is used."""
    if not bus.runs_server(config.bus, config.gateway.replicas):
        return None

    def run(_: str) -> Awaitable[reconcile.Outcome]:
        return bus_reconcile.reconcile(kube, config.bus, config.watch_namespaces, config.gateway, key)

    return Scheduler(run, settle_s=config.settle_s, controller=metrics.BUS_CONTROLLER, turns=turns)


def leftover_bus_removal(
    kube: Client, config: settings.OperatorSettings, turns: Turns | None = None
) -> Scheduler | None:
    """The scheduler that removes a managed server left over: requested once, at start (so only by the replica
    holding the Lease: kopf starts after it), never on resync. None while the server is in use, or when no bus
    namespace is known (run by hand without POD_NAMESPACE)."""
    if bus.runs_server(config.bus, config.gateway.replicas) or not config.bus.namespace:
        return None

    def run(namespace: str) -> Awaitable[reconcile.Outcome]:
        return bus_reconcile.remove_leftovers(kube, namespace)

    return Scheduler(run, controller=metrics.BUS_CONTROLLER, turns=turns)


def follow_bus_accounts(bus_runs: Scheduler, key: str) -> After:
    """After a namespace pass: run the bus step if the namespace gained or lost its bus credentials.

    A namespace's first pass counts as a change: the operator may have restarted since the last bus step.
    """

    def after(_: str, previous: reconcile.Outcome | None, outcome: reconcile.Outcome) -> None:
        if previous is None or previous.bus_account != outcome.bus_account:
            bus_runs.request(key)

    return after


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    await stop(memo)


async def stop(memo: kopf.Memo) -> None:
    """Undo `start`: the resync and the schedulers stop, then the client closes."""
    memo.resync.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await memo.resync
    await memo.scheduler.close()
    for other in filter(None, (memo.bus, memo.leftovers)):
        await other.close()
    await memo.kube.close()


def halt(memo: kopf.Memo) -> None:
    """Cancel the resync and every pass now, waiting for nothing (this replica lost the Lease: another may be
    reconciling already); a no-op before `start`. `stop` (kopf's cleanup) still closes what `start` opened."""
    if "resync" in memo:
        memo.resync.cancel()
    for scheduler in filter(None, (memo.get("scheduler"), memo.get("bus"), memo.get("leftovers"))):
        scheduler.halt()


async def _resync(schedulers: list[Scheduler], every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        for scheduler in schedulers:
            for key in scheduler.known():
                scheduler.request(key)


def version_of(kind: str, body: Mapping[str, Any]) -> str:
    """The version an event brings (`observed.version_key`): a pass skips one the namespace's last pass read."""
    meta = body.get("metadata") or {}
    return observed.version_key(kind, str(meta.get("name", "")), str(meta.get("resourceVersion", "")))


def status_echo(event_type: str | None, body: Mapping[str, Any]) -> bool:
    """Whether this event of a ResourceWatch or WebhookToken can only be one of our own status writes landing.

    Modified, not being deleted, and its status already describes its generation: its spec did not change since a
    pass last decided about it, so a pass would find what the last one wrote. Starting none matters at scale: each
    status a pass writes came back as an event that queued one more pass of the namespace (at 500 namespaces of
    10 watches, about one pass in three). The first listing (no type), a creation, a deletion, a spec edit
    (generation moved) and a status that lost its observedGeneration each still start a pass; the resync covers
    anything else.
    """
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    return (
        event_type == "MODIFIED"
        and not meta.get("deletionTimestamp")
        and meta.get("generation") is not None
        and status.get("observedGeneration") == meta.get("generation")
    )


@kopf.on.event("mcpg.dev", "v1alpha1", "resourcewatches")
async def resourcewatch_event(
    namespace: str | None, type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    if namespace and not status_echo(type, body):
        memo.scheduler.request(namespace, version=version_of("ResourceWatch", body))


@kopf.on.event("mcpg.dev", "v1alpha1", "webhooktokens")
async def webhooktoken_event(
    namespace: str | None, type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    if namespace and not status_echo(type, body):
        memo.scheduler.request(namespace, version=version_of("WebhookToken", body))


@kopf.on.event("mcpg.dev", "v1alpha1", "mcpgateways")
async def mcpgateway_event(namespace: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # Created, edited or deleted: the namespace's gateway takes its settings, or goes back to the defaults.
    if namespace:
        memo.scheduler.request(namespace, version=version_of("McpGateway", body))


def reacts_to_secret(labels: Mapping[str, str]) -> bool:
    """Whether a Secret with these labels can change a reconcile's outcome.

    The API server sends only Secrets labelled `references.SELECTOR` (`watch_only_what_is_needed`); a tenant may
    put that label on anything of theirs, so this stays the filter of what starts a pass. Only the operator's
    own output is skipped, and only by a label value nobody else sets: a user's Secret may well
    carry `app.kubernetes.io/managed-by` (Helm sets it), and must still be reacted to. Of the operator's own
    Secrets, the configuration Secret is pure output, but a rotation-state Secret is an input: if one is lost or
    edited, the next reconcile must see it at once, not at the next resync. So are bus credentials: the managed
    bus lists an account for each.
    """
    ours = labels.get(MANAGED_BY) == OPERATOR
    return not ours or tokens.STATE_LABEL in labels or bus.CREDENTIALS_LABEL in labels


def _secret_may_matter(labels: Mapping[str, str], **_: Any) -> bool:
    # kopf's `when=` filter, evaluated before the handler is invoked (so before any kopf log line about it).
    return reacts_to_secret(labels)


@kopf.on.event("", "v1", "secrets", when=_secret_may_matter)
async def secret_event(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    secret_changed(namespace, labels, memo.scheduler, memo.bus, version_of("Secret", body))


def secret_changed(
    namespace: str | None,
    labels: Mapping[str, str],
    namespaces: Scheduler,
    bus_runs: Scheduler | None,
    version: str | None = None,
) -> None:
    """What a Secret event asks for (a Secret that may matter: `reacts_to_secret`)."""
    # A user's Secret (a webhook token, a header value, a database URL), a rotation state or bus credentials
    # changed. Only namespaces that already have mcpg objects are reconciled; the others are not ours to touch.
    if namespace and namespace in namespaces.known():
        namespaces.request(namespace, version=version)
    # Bus credentials came, went or were edited: the managed server's accounts follow.
    if bus_runs is not None and bus.CREDENTIALS_LABEL in labels:
        for key in bus_runs.known():
            bus_runs.request(key)


@kopf.on.event("apps", "v1", "deployments", labels={MANAGED_BY: OPERATOR})
async def gateway_deployment_event(
    namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    # Its status moves as gateway pods become Ready or go: which pods are counted, and asked what they serve.
    if namespace and name == objects.NAME:
        memo.scheduler.request(namespace, version=version_of("Deployment", body))
