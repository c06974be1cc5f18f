"""Decide one pass over a namespace from what was read: token states, configuration, statuses, Events, writes.

Pure: no I/O, and the clock (`now`) and the generators of tokens and signing secrets (`new_token`, `new_secret`)
are arguments, so every decision can be tested the way rotation.py's state machine is. The steps, in order:

1. What the pods serve. Each counted gateway pod said which configuration and entries it serves (its
   acknowledgement, `serving`); what they may still accept comes from the configuration Secret as read, which no
   pod is ahead of. The plugin kinds every answering pod (Ready or not) has installed are the ones a watch may
   name (the settings' until one answers).
2. Tokens. A WebhookToken with `generate: true` whose Secret is missing gets one created, and that is all
   such a pass writes: it asks to be run again at once, because a value is promoted only once a pass has read
   it back, and writing a configuration without it (or warning that it is missing) would be wasted. (One
   the API server refused before is tried again with the rest of the pass instead, so it holds up nothing.)
   A lost rotation-state Secret is rebuilt from the configuration Secret. Then a Secret that now holds a new
   value has it promoted and the old value starts retiring; a Secret (or key) that is gone revokes the token.
3. Render the configuration from those states (`render.plan`: only what the gateway would start on).
4. Acknowledgements (`acceptance`). A token is accepted once every counted pod serves the entries carrying it,
   as rendered; a watch is served once every counted pod serves its own entry. So editing one watch leaves the
   others' statuses as they are, and a pass patches only what changed.
5. Retire what is due (its replacement accepted, plus the grace period); if anything was, render again. The
   configuration rendered last is the one written, once per digest.
6. Statuses, Events, and the writes that make the namespace match (only where it does not already; those of
   the gateway's objects are `gateway_objects`'). With a managed bus (`bus.Wiring`), that includes the
   namespace's bus credentials Secret: its derived password, put back if anyone changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway.contract import signing
from mcpg_operator import actions as w
from mcpg_operator import (
    bus,
    events,
    gateway_settings,
    observed,
    render,
    rotation,
    serving,
    statuses,
    tokens,
)
from mcpg_operator import conditions as c
from mcpg_operator.models import GROUP
from mcpg_operator.reconcile import acceptance, gateway_objects, references
from mcpg_operator.settings import GatewayDefaults

States = acceptance.States


@dataclass(frozen=True, slots=True)
class Decision:
    states: States
    """Every WebhookToken's rotation state at the end of this pass."""
    plan: render.Plan
    """The configuration to apply (rendered from `states`; none is applied when `rerun`) and every verdict."""
    statuses: dict[w.Ref, dict[str, Any]]
    """Every ResourceWatch's and WebhookToken's status, and the McpGateway's; only those that changed are among
    `writes`."""
    events: tuple[events.Event, ...]
    writes: tuple[w.Write, ...]
    """What the write phase does, stage by stage."""
    rollout_complete: bool
    """The Deployment as read runs the pod template `plan` needs, on every pod."""
    next_check_s: float | None
    """Decide again after this long (a grace period ends, a pod is still to acknowledge), even if nothing else
    happens."""
    rerun: bool
    """Decide again as soon as the writes are done: a created Secret has to be read back."""
    bus_account: bool = False
    """Once the writes are done, the namespace holds managed bus credentials (so the bus must list its account)."""
    pods: serving.Pods = field(default_factory=lambda: serving.Pods((), ""))
    """The counted gateway pods, against `plan`'s digest."""


def decide(
    snap: observed.Snapshot,
    defaults: GatewayDefaults,
    now: float,
    new_token: Callable[[], str],
    wiring: bus.Wiring | None = None,
    shaped: gateway_settings.Shape | None = None,
    new_secret: Callable[[signing.Scheme], str] = tokens.new_signing_secret,
) -> Decision:
    """One pass's decision; `wiring`: the namespace's bus, if its gateway replicas share one. `defaults`: as
    `shaped` overlays them with the namespace's McpGateway (`gateway_settings.shape`), which also says what
    PodDisruptionBudget and NetworkPolicy the gateway gets (None: no McpGateway was read)."""
    shaped = shaped or gateway_settings.Shape(defaults)
    defaults = _installed(defaults, snap.heard())
    secrets = snap.secret_data()
    sources = tokens.apart({t.name: tokens.source(t.spec, secrets, snap.secret_versions()) for t in snap.tokens})
    config = acceptance.read_config(snap)
    may_accept, pinned = _held_by_pods(snap, sources, config)
    generated, retried = _generated_secrets(snap, sources, new_token, new_secret)
    if generated:
        return _only_create(snap, sources, generated, defaults, wiring)
    recovered = {t.name: acceptance.recovered(t, sources[t.name], may_accept[t.name], now) for t in snap.tokens}
    edits = {t.name: tokens.observe(recovered[t.name], sources[t.name], now, pinned[t.name]) for t in snap.tokens}
    promoted = {name: edit.state for name, edit in edits.items()}
    states, plan = acceptance.rotate(snap, sources, promoted, defaults, now, wiring, config)
    pods = serving.Pods(snap.counted(), plan.digest, _written_at(snap, plan), snap.heard_uncounted())
    refused = acceptance.refusals(plan, pods)
    refused_by = {t.name: acceptance.users_refused(snap, t.name, sources[t.name].role, refused) for t in snap.tokens}
    views = {
        t.name: acceptance.view(snap, t.name, sources[t.name], states[t.name], plan, pods, refused_by[t.name], now)
        for t in snap.tokens
    }
    status_by_ref, status_writes, details = _statuses(snap, sources, states, views, plan, pods, refused, now)
    evts = _events(snap, edits, recovered, states, status_by_ref, details)
    posts = [w.PostEvent(events.body(snap.namespace, e, now)) for e in evts]
    rolled_out = _rolled_out(snap.deployment, plan)
    gateway = gateway_objects.writes(snap, plan, defaults, wiring, rolled_out, shaped, now)
    status_writes += _mcp_gateway(snap, shaped, now, status_by_ref)
    todo = [*retried, *_state_writes(snap, states), *gateway, *status_writes, *posts]
    todo += references.writes(snap)  # the label that lets the Secret watch see what this pass needs
    waits = [acceptance.next_check(states, sources, now), pods.next_check(now) if snap.watches else None]
    return Decision(
        states=states,
        plan=plan,
        statuses=status_by_ref,
        events=evts,
        writes=w.in_order(todo),
        rollout_complete=rolled_out,
        next_check_s=references.next_check(_soonest(waits), snap, now),
        rerun=False,
        bus_account=gateway_objects.bus_account(snap, todo),
        pods=pods,
    )


def _installed(defaults: GatewayDefaults, heard: Sequence[observed.Pod]) -> GatewayDefaults:
    """`defaults` with the plugin kinds every pod that answered has installed (`serving.plugin_kinds`)."""
    kinds = serving.plugin_kinds(heard, defaults.plugin_kinds)
    return defaults if kinds == defaults.plugin_kinds else defaults.model_copy(update={"plugin_kinds": kinds})


def _written_at(snap: observed.Snapshot, plan: render.Plan) -> float | None:
    """When the configuration Secret as read got `plan`'s digest; None when this pass writes it."""
    found = snap.config
    return found.updated_at if found is not None and found.digest == plan.digest else None


def _soonest(waits: Sequence[float | None]) -> float | None:
    found = [x for x in waits if x is not None]
    return min(found) if found else None


def _only_create(
    snap: observed.Snapshot,
    sources: dict[str, tokens.Source],
    generated: list[w.Write],
    defaults: GatewayDefaults,
    wiring: bus.Wiring | None,
) -> Decision:
    """Step 2's early end: the generated Secrets are the only writes, and the next pass decides the rest."""
    states = {t.name: t.state for t in snap.tokens}
    schemes = {name: src.scheme for name, src in sources.items() if src.scheme is not None}
    plan = render.plan(snap.watches, states, snap.secret_data(), defaults, wiring, schemes)
    rolled_out = _rolled_out(snap.deployment, plan)
    has_bus = gateway_objects.bus_account(snap, generated)  # as read: the next pass creates it if it is missing
    pods = serving.Pods(snap.counted(), plan.digest, _written_at(snap, plan), snap.heard_uncounted())
    todo = w.in_order(generated)
    return Decision(states, plan, {}, (), todo, rolled_out, None, rerun=True, bus_account=has_bus, pods=pods)


# --- tokens -------------------------------------------------------------------------------------------------


def _held_by_pods(
    snap: observed.Snapshot, sources: Mapping[str, tokens.Source], config: acceptance.Config
) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """Per WebhookToken, of the values of its own role: those the pods may accept (what a lost state is rebuilt
    from), and those some counted pod serves now (`pinned`)."""
    by_role = acceptance.pods_may_accept(snap, config)
    roles = {t.name: sources[t.name].role for t in snap.tokens}
    may_accept = {name: acceptance.may_accept(snap, name, role, by_role) for name, role in roles.items()}
    pinned = {name: acceptance.pinned(snap, name, role, config) for name, role in roles.items()}
    return may_accept, pinned


def _generated_secrets(
    snap: observed.Snapshot,
    sources: dict[str, tokens.Source],
    new_token: Callable[[], str],
    new_secret: Callable[[signing.Scheme], str],
) -> tuple[list[w.Write], list[w.Write]]:
    """Secrets to generate: (new ones, which end the pass early; ones the API server refused before).

    A refused one is tried again with the rest of the pass, not alone, so it cannot hold up the namespace. A
    signing secret is generated in its scheme's format (`new_secret`), a token by `new_token`.
    """
    fresh: dict[str, w.Write] = {}
    retried: dict[str, w.Write] = {}
    for t in snap.tokens:
        spec = sources[t.name].spec
        if spec is None or not sources[t.name].wants_generated_secret or spec.secret_ref.name in fresh | retried:
            continue
        scheme = spec.signature_scheme
        value = new_token() if scheme is None else new_secret(scheme)
        body = tokens.generated_secret(snap.namespace, spec, t.id.owner_reference(), value)
        create = w.CreateObject(w.Stage.TOKEN_SECRETS, w.Ref("secrets", spec.secret_ref.name), body, about=t.id)
        (retried if statuses.refused_before(t.status) else fresh)[spec.secret_ref.name] = create
    return list(fresh.values()), list(retried.values())


def _state_writes(snap: observed.Snapshot, states: States) -> list[w.Write]:
    out: list[w.Write] = []
    for t in snap.tokens:
        if states[t.name] != t.state:
            body = tokens.state_secret(snap.namespace, t.name, t.id.owner_reference(), states[t.name])
            out.append(w.ApplyObject(w.Stage.ROTATION_STATE, w.Ref("secrets", body["metadata"]["name"]), body))
    return out


# --- the gateway --------------------------------------------------------------------------------------------


def _rolled_out(deployment: observed.Deployment | None, plan: render.Plan) -> bool:
    """The Deployment's template carries this configuration's restart digest, and every pod runs that template."""
    wanted = gateway_objects.restart_digest(plan)
    return deployment is not None and deployment.restart_digest == wanted and deployment.rollout_complete


def _mcp_gateway(
    snap: observed.Snapshot, shaped: gateway_settings.Shape, now: float, decided: dict[w.Ref, dict[str, Any]]
) -> list[w.Write]:
    """The McpGateway's status, if the namespace has one (added to `decided`), and its write if it changed."""
    if snap.mcp_gateway is None:
        return []
    ref = w.Ref(gateway_settings.PLURAL, gateway_settings.NAME, GROUP)
    decided[ref] = after = gateway_settings.status(snap.mcp_gateway, shaped, bool(snap.watches), now)
    return [w.MergePatchStatus(ref, after)] if statuses.changed(snap.mcp_gateway.status, after) else []


# --- what users see -----------------------------------------------------------------------------------------


def _statuses(
    snap: observed.Snapshot,
    sources: dict[str, tokens.Source],
    states: States,
    views: dict[str, statuses.TokenView],
    plan: render.Plan,
    pods: serving.Pods,
    refused: Mapping[str | None, list[tuple[str, str]]],
    now: float,
) -> tuple[dict[w.Ref, dict[str, Any]], list[w.Write], dict[w.Ref, str]]:
    """Every status decided, the writes of those that changed, and what each one's Event may say beyond its
    Ready message (`statuses.watch_detail`)."""
    decided: dict[w.Ref, tuple[dict[str, Any], dict[str, Any]]] = {}
    details: dict[w.Ref, str] = {}
    stalled = snap.deployment.stalled if snap.deployment is not None else None
    gateway = statuses.Gateway(snap.namespace, plan.clients_problem)
    desired = render.entry_digests(plan.config)
    for rw in snap.watches:
        verdict = plan.verdicts[rw.name]
        entry = desired.get(acceptance.entry_name(rw), "")
        at = _watch_serving(rw, entry, pods, refused, now)
        held = (_secret_of(rw, sources, "token"), _secret_of(rw, sources, "signature"))
        status = statuses.watch_status(rw, verdict, entry, at, now, stalled, gateway, *held)
        decided[ref := w.Ref("resourcewatches", rw.name, GROUP)] = (rw.status, status)
        details[ref] = statuses.watch_detail(verdict, at, stalled)
    for t in snap.tokens:
        status = statuses.token_status(t, sources[t.name], states[t.name], views[t.name], now, gateway)
        decided[ref := w.Ref("webhooktokens", t.name, GROUP)] = (t.status, status)
        details[ref] = statuses.token_detail(views[t.name])
    patches: list[w.Write] = [
        w.MergePatchStatus(ref, after) for ref, (before, after) in decided.items() if statuses.changed(before, after)
    ]
    return {ref: after for ref, (_, after) in decided.items()}, patches, details


def _watch_serving(
    rw: observed.Watch,
    entry: str,
    pods: serving.Pods,
    refused: Mapping[str | None, list[tuple[str, str]]],
    now: float,
) -> statuses.WatchServing:
    """How far the counted pods are with a watch's entry, who is late with it, and what they refused of it."""
    found = acceptance.refused_message([*refused.get(None, []), *refused.get(rw.name, [])])
    return statuses.WatchServing(
        served=bool(entry) and pods.serve([entry]),
        serving=pods.serving([entry]) if entry else 0,
        counted=len(pods.counted),
        late=pods.late(pods.without([entry]), now) if entry else None,
        refused=found,
    )


def _secret_of(rw: observed.Watch, sources: dict[str, tokens.Source], role: tokens.Role) -> str | None:
    """`name/key` of the Secret holding the token (or signing secret) of the WebhookToken a webhook watch uses in
    `role`, if it names one that exists."""
    source = sources.get(acceptance.ref(rw, role) or "")
    if source is None or source.spec is None:
        return None
    ref = source.spec.secret_ref
    return f"{ref.name}/{ref.key}"


def _events(
    snap: observed.Snapshot,
    edits: dict[str, rotation.Edit],
    recovered: States,
    states: States,
    decided: dict[w.Ref, dict[str, Any]],
    details: Mapping[w.Ref, str],
) -> tuple[events.Event, ...]:
    out: list[events.Event] = []
    for t in snap.tokens:
        ref = w.Ref("webhooktokens", t.name, GROUP)
        if recovered[t.name] is not t.state:
            out += events.state_lost(t.id, tokens.state_secret_name(t.name), recovered[t.name])
        out += events.promotion(t.id, recovered[t.name], edits[t.name])
        out += events.token_transitions(t.id, t.status, decided[ref], details.get(ref, ""))
        out += events.retirements(t.id, edits[t.name].state, states[t.name])
    for rw in snap.watches:
        ref = w.Ref("resourcewatches", rw.name, GROUP)
        out += events.watch_transition(rw.id, rw.status, decided[ref], details.get(ref, ""))
    return tuple(out)


def failed(snap: observed.Snapshot, decided: Decision, failure: w.Failure, now: float) -> tuple[w.Write, ...]:
    """What the statuses say when a write of the namespace's gateway objects failed, instead of this pass's.

    Each ResourceWatch, WebhookToken and McpGateway that depends on those objects (`statuses.depends_on_gateway`)
    reports the failure, with a Warning Event; the others are failing for reasons of their own, which this pass
    decided without the failed write, so their statuses and Events go out as decided. Written and posted once: a retry
    that fails the same way finds the same statuses and writes nothing.
    """
    out: list[w.Write] = []
    objs = [*((rw.id, rw.status, "resourcewatches") for rw in snap.watches)]
    objs += [(t.id, t.status, "webhooktokens") for t in snap.tokens]
    if snap.mcp_gateway is not None:  # its settings are among what failed to be written
        objs.append((snap.mcp_gateway.id, snap.mcp_gateway.status, gateway_settings.PLURAL))
    for about, before, plural in objs:
        ref = w.Ref(plural, about.name, GROUP)
        status = decided.statuses.get(ref, before)
        posts = [e for e in decided.events if e.about == about]
        if statuses.depends_on_gateway(status):
            status = statuses.apply_failed(status, failure, about.generation, now)
            # Of this pass's Events, only what no failed write can undo still holds: no principal can use the
            # gateway (its condition is in the status written now, so a later pass would not post it again).
            kept = [e for e in posts if e.reason == c.NO_PRINCIPALS]
            posts = [*kept, *events.apply_failed(about, failure.message)]
        if statuses.changed(before, status):
            out.append(w.MergePatchStatus(ref, status))
            out += [w.PostEvent(events.body(snap.namespace, e, now)) for e in posts]
    return w.in_order(out)


def report(snap: observed.Snapshot, refusals: Sequence[w.Refusal], now: float) -> tuple[w.Write, ...]:
    """The status and Event for each WebhookToken whose generated Secret the API server refused."""
    out: list[w.Write] = []
    for refusal in refusals:
        t = next((t for t in snap.tokens if t.id.uid == refusal.about.uid), None)
        if t is None:
            continue
        after = statuses.refused(t, refusal.message, now)
        if statuses.changed(t.status, {**t.status, **after}):  # reported once, not on every pass that retries
            out.append(w.MergePatchStatus(w.Ref("webhooktokens", t.name, GROUP), after))
            out += [w.PostEvent(events.body(snap.namespace, e, now)) for e in events.refused(t.id, refusal.message)]
    return w.in_order(out)
