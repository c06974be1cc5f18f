"""Decide one pass over a namespace from what was read: token states, configuration, statuses, Events, writes.

Pure: no I/O, and the clock (`now`) and token generator (`new_token`) are arguments, so every decision can be
tested the way rotation.py's state machine is. The steps, in order:

1. What the pods serve. Each ReplicaSet with an available pod runs one configuration; the tokens those accept
   are the ground truth for `TokenAccepted` and are never dropped by the cap on retiring tokens.
2. Tokens. A WebhookToken with `generate: true` whose Secret is missing gets one created, and that is all
   such a pass writes: it asks to be run again at once, because a value is promoted only once a pass has read
   it back, and rolling out a configuration without it (or warning that it is missing) would be wasted. (One
   the API server refused before is tried again with the rest of the pass instead, so it holds up nothing.)
   A lost rotation-state Secret is rebuilt from what the pods accept. Then a Secret that now holds a new value
   has it promoted and the old value starts retiring; a Secret (or key) that is gone revokes the token.
3. Render the configuration from those states (`render.plan`: only what the gateway would start on).
4. Rollout. If the Deployment as read runs exactly that configuration and its rollout is complete, every pod
   accepts every token in it. A watch's status asks less: does every available pod serve its own entry? So
   editing one watch leaves the others' statuses as they are, and a pass patches only what changed. A token
   that is in no rendered configuration needs no rollout at all.
5. Retire what is due (its replacement rolled out, plus the grace period); if anything was, render again. The
   configuration rendered last is the one applied, once.
6. Statuses, Events, and the writes that make the namespace match (only where it does not already; those of
   the gateway's objects are `gateway_objects`'). With a managed bus (`bus.Wiring`), that includes the
   namespace's bus credentials Secret: its derived password, put back if anyone changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mcpg_operator import actions as w
from mcpg_operator import (
    bus,
    events,
    gateway_settings,
    objects,
    observed,
    render,
    rotation,
    statuses,
    tokens,
)
from mcpg_operator import conditions as c
from mcpg_operator.models import GROUP
from mcpg_operator.reconcile import gateway_objects, references
from mcpg_operator.settings import GatewayDefaults

States = dict[str, rotation.TokenState]
"""WebhookToken name -> its rotation state."""


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
    """The Deployment as read already runs `plan`, on every pod."""
    next_check_s: float | None
    """Decide again after this long (a grace period ends), even if nothing else happens."""
    rerun: bool
    """Decide again as soon as the writes are done: a created Secret has to be read back."""
    bus_account: bool = False
    """Once the writes are done, the namespace holds managed bus credentials (so the bus must list its account)."""


def decide(
    snap: observed.Snapshot,
    defaults: GatewayDefaults,
    now: float,
    new_token: Callable[[], str],
    wiring: bus.Wiring | None = None,
    shaped: gateway_settings.Shape | None = None,
) -> Decision:
    """One pass's decision; `wiring`: the namespace's bus, if its gateway replicas share one. `defaults`: as
    `shaped` overlays them with the namespace's McpGateway (`gateway_settings.shape`), which also says what
    PodDisruptionBudget and NetworkPolicy the gateway gets (None: no McpGateway was read)."""
    shaped = shaped or gateway_settings.Shape(defaults)
    secrets = snap.secret_data()
    sources = {t.name: tokens.source(t.spec, secrets) for t in snap.tokens}
    configs = [render.parse_config(text) for text in snap.serving_configs()]
    serving = [render.tokens_by_entry(config) if config is not None else None for config in configs]
    pinned = {t.name: _pinned(snap, t.name, serving) for t in snap.tokens}
    generated, retried = _generated_secrets(snap, sources, new_token)
    if generated:
        return _only_create(snap, generated, defaults, wiring)
    recovered = {t.name: _recovered(t, sources[t.name], pinned[t.name], now) for t in snap.tokens}
    edits = {t.name: tokens.observe(recovered[t.name], sources[t.name], now, pinned[t.name]) for t in snap.tokens}
    promoted = {name: edit.state for name, edit in edits.items()}
    states, plan = _rotate(snap, sources, promoted, defaults, now, wiring)
    rolled_out = _runs(snap.deployment, plan)
    views = {t.name: _view(snap, t.name, states[t.name], plan, serving, now) for t in snap.tokens}
    entries = [render.entry_hashes(config) if config is not None else None for config in configs]
    status_by_ref, status_writes = _statuses(snap, sources, states, views, plan, entries, now)
    evts = _events(snap, edits, recovered, states, status_by_ref)
    posts = [w.PostEvent(events.body(snap.namespace, e, now)) for e in evts]
    gateway = gateway_objects.writes(snap, plan, defaults, wiring, rolled_out, shaped)
    status_writes += _mcp_gateway(snap, shaped, now, status_by_ref)
    todo = [*retried, *_state_writes(snap, states), *gateway, *status_writes, *posts]
    todo += references.writes(snap)  # the label that lets the Secret watch see what this pass needs
    return Decision(
        states=states,
        plan=plan,
        statuses=status_by_ref,
        events=evts,
        writes=w.in_order(todo),
        rollout_complete=rolled_out,
        next_check_s=references.next_check(_next_check(states, sources, now), snap, now),
        rerun=False,
        bus_account=gateway_objects.bus_account(snap, todo),
    )


def _only_create(
    snap: observed.Snapshot, generated: list[w.Write], defaults: GatewayDefaults, wiring: bus.Wiring | None
) -> Decision:
    """Step 1's early end: the generated Secrets are the only writes, and the next pass decides the rest."""
    states = {t.name: t.state for t in snap.tokens}
    plan = render.plan(snap.watches, states, snap.secret_data(), defaults, wiring)
    rolled_out = _runs(snap.deployment, plan)
    has_bus = gateway_objects.bus_account(snap, generated)  # as read: the next pass creates it if it is missing
    return Decision(states, plan, {}, (), w.in_order(generated), rolled_out, None, rerun=True, bus_account=has_bus)


def _rotate(
    snap: observed.Snapshot,
    sources: dict[str, tokens.Source],
    promoted: States,
    defaults: GatewayDefaults,
    now: float,
    wiring: bus.Wiring | None,
) -> tuple[States, render.Plan]:
    """Steps 2 to 4: render, observe the rollout as read, retire what is due, and render again if anything was."""
    plan = render.plan(snap.watches, promoted, snap.secret_data(), defaults, wiring)
    states = _after_rollout(promoted, sources, plan, _runs(snap.deployment, plan), now)
    if any(len(states[name].retiring) < len(promoted[name].retiring) for name in states):
        plan = render.plan(snap.watches, states, snap.secret_data(), defaults, wiring)
    return states, plan


# --- tokens -------------------------------------------------------------------------------------------------


def _generated_secrets(
    snap: observed.Snapshot, sources: dict[str, tokens.Source], new_token: Callable[[], str]
) -> tuple[list[w.Write], list[w.Write]]:
    """Secrets to generate: (new ones, which end the pass early; ones the API server refused before).

    A refused one is tried again with the rest of the pass, not alone, so it cannot hold up the namespace.
    """
    fresh: dict[str, w.Write] = {}
    retried: dict[str, w.Write] = {}
    for t in snap.tokens:
        spec = sources[t.name].spec
        if spec is None or not sources[t.name].wants_generated_secret or spec.secret_ref.name in fresh | retried:
            continue
        body = tokens.generated_secret(snap.namespace, spec, t.id.owner_reference(), new_token())
        create = w.CreateObject(w.Stage.TOKEN_SECRETS, w.Ref("secrets", spec.secret_ref.name), body, about=t.id)
        (retried if statuses.refused_before(t.status) else fresh)[spec.secret_ref.name] = create
    return list(fresh.values()), list(retried.values())


def _pinned(
    snap: observed.Snapshot, webhook_token: str, serving: list[dict[str, frozenset[str]] | None]
) -> frozenset[str]:
    """The tokens some available pod accepts for the watches that use `webhook_token`."""
    names = {_entry_name(rw) for rw in snap.watches if _token_ref(rw) == webhook_token}
    return frozenset(t for by_entry in serving if by_entry for name in names for t in by_entry.get(name, ()))


def _entry_name(rw: observed.Watch) -> str:
    return str(rw.spec.get("name") or rw.name)


def _token_ref(rw: observed.Watch) -> str | None:
    ref = ((rw.spec.get("watch") or {}).get("webhook") or {}).get("tokenRef") or {}
    name = ref.get("name")
    return str(name) if name else None


def _recovered(t: observed.Token, src: tokens.Source, pinned: frozenset[str], now: float) -> rotation.TokenState:
    """The state to rotate from. A lost state Secret (while pods accept this token's values) is rebuilt.

    Whatever an available pod accepts is kept retiring until the rollout carrying the current value completes:
    losing the record of a rotation must not refuse a sender holding the replaced token.
    """
    if t.state_saved or not pinned or not src.secret_value:
        return t.state
    keep = sorted(pinned - {src.secret_value})
    return rotation.TokenState(current=src.secret_value, retiring=tuple(rotation.Retiring(x, now) for x in keep))


def _after_rollout(
    states: States, sources: dict[str, tokens.Source], plan: render.Plan, runs_plan: bool, now: float
) -> States:
    """The rotation step: mark what the observed rollout carried, then retire what is due."""
    carried = render.rendered_tokens(plan.config)
    out = {}
    for name, state in states.items():
        if state.current in carried:
            state = rotation.observe_rollout(state, runs_plan, now)
        else:
            state = rotation.release(state, now)  # no pod can accept it: replaced ones wait for no rollout
        out[name] = rotation.retire_due(state, _retirement_wait(sources[name]), now)
    return out


def _view(
    snap: observed.Snapshot,
    webhook_token: str,
    state: rotation.TokenState,
    plan: render.Plan,
    serving: list[dict[str, frozenset[str]] | None],
    now: float,
) -> statuses.TokenView:
    """What a WebhookToken's status reports besides its own state: is its current token really accepted?

    Accepted once every available pod accepts it and the pods the rollout replaced have drained: until their
    preStop pause ends they still answer what the proxies send them (kube-proxy follows the endpoints within a
    second or so), and a sender told to switch must not meet one of them.
    """
    users = [rw for rw in snap.watches if _token_ref(rw) == webhook_token]
    carried = state.current is not None and state.current in render.rendered_tokens(plan.config)
    everywhere = (
        state.current is not None
        and bool(serving)
        and all(by_entry is not None and any(state.current in ts for ts in by_entry.values()) for by_entry in serving)
    )
    drained = rotation.drained(state, objects.DRAIN_S, now)
    accepted = everywhere and drained
    why = "; ".join(f"ResourceWatch {rw.name}: {plan.verdicts[rw.name].reason}" for rw in users)
    unused = f"no ResourceWatch the gateway serves uses this token ({why or 'none refers to it'})"
    stalled = snap.deployment.stalled if snap.deployment is not None else None
    return statuses.TokenView(
        accepted=accepted,
        carried=carried,
        not_carried_message=unused,
        rollout_stalled=stalled,
        draining=everywhere and not drained,
    )


def _state_writes(snap: observed.Snapshot, states: States) -> list[w.Write]:
    out: list[w.Write] = []
    for t in snap.tokens:
        if states[t.name] != t.state:
            body = tokens.state_secret(snap.namespace, t.name, t.id.owner_reference(), states[t.name])
            out.append(w.ApplyObject(w.Stage.ROTATION_STATE, w.Ref("secrets", body["metadata"]["name"]), body))
    return out


def _retirement_wait(source: tokens.Source) -> float:
    """From the rollout carrying a replacement to the retirement of what it replaced: the replaced pods' drain
    (the replacement is reported accepted only then, `_view`), then the grace period senders have to switch."""
    return objects.DRAIN_S + source.grace_s


def _next_check(states: States, sources: dict[str, tokens.Source], now: float) -> float | None:
    due = [rotation.next_retirement(state, _retirement_wait(sources[name])) for name, state in states.items()]
    due += [rotation.next_drained(state, objects.DRAIN_S, now) for state in states.values()]
    waits = [max(0.0, at - now) for at in due if at is not None]
    return min(waits) if waits else None


# --- the gateway --------------------------------------------------------------------------------------------


def _runs(deployment: observed.Deployment | None, plan: render.Plan) -> bool:
    """The Deployment's template names exactly this configuration and every pod runs it."""
    return deployment is not None and deployment.config_hash == plan.hash and deployment.rollout_complete


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
    serving: list[dict[str, str] | None],
    now: float,
) -> tuple[dict[w.Ref, dict[str, Any]], list[w.Write]]:
    decided: dict[w.Ref, tuple[dict[str, Any], dict[str, Any]]] = {}
    stalled = snap.deployment.stalled if snap.deployment is not None else None
    gateway = statuses.Gateway(snap.namespace, plan.clients_problem)
    desired = render.entry_hashes(plan.config)
    for rw in snap.watches:
        secret = _token_secret(rw, sources)
        verdict = plan.verdicts[rw.name]
        entry = desired.get(_entry_name(rw), "")
        rolled_out = bool(serving) and all(by is not None and by.get(_entry_name(rw)) == entry for by in serving)
        status = statuses.watch_status(rw, verdict, entry, rolled_out, now, stalled, gateway, secret)
        decided[w.Ref("resourcewatches", rw.name, GROUP)] = (rw.status, status)
    for t in snap.tokens:
        status = statuses.token_status(t, sources[t.name], states[t.name], views[t.name], now, gateway)
        decided[w.Ref("webhooktokens", t.name, GROUP)] = (t.status, status)
    patches: list[w.Write] = [
        w.MergePatchStatus(ref, after) for ref, (before, after) in decided.items() if statuses.changed(before, after)
    ]
    return {ref: after for ref, (_, after) in decided.items()}, patches


def _token_secret(rw: observed.Watch, sources: dict[str, tokens.Source]) -> str | None:
    """`name/key` of the Secret holding the token of a webhook watch's WebhookToken, if it names one that exists."""
    source = sources.get(_token_ref(rw) or "")
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
) -> tuple[events.Event, ...]:
    out: list[events.Event] = []
    for t in snap.tokens:
        if recovered[t.name] is not t.state:
            out += events.state_lost(t.id, tokens.state_secret_name(t.name), recovered[t.name])
        out += events.promotion(t.id, recovered[t.name], edits[t.name])
        out += events.token_transitions(t.id, t.status, decided[w.Ref("webhooktokens", t.name, GROUP)])
        out += events.retirements(t.id, edits[t.name].state, states[t.name])
    for rw in snap.watches:
        out += events.watch_transition(rw.id, rw.status, decided[w.Ref("resourcewatches", rw.name, GROUP)])
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
        message = f"the API server refused to create its Secret: {refusal.message}"
        after = statuses.refused(t, message, now)
        if statuses.changed(t.status, {**t.status, **after}):  # reported once, not on every pass that retries
            out.append(w.MergePatchStatus(w.Ref("webhooktokens", t.name, GROUP), after))
            out += [w.PostEvent(events.body(snap.namespace, e, now)) for e in events.refused(t.id, message)]
    return w.in_order(out)
