"""Decide one pass over a namespace from what was read: token states, configuration, statuses, Events, writes.

Pure: no I/O, and the clock (`now`) and token generator (`new_token`) are arguments, so every decision can be
tested the way rotation.py's state machine is. The steps, in order:

1. Tokens. A WebhookToken with `generate: true` whose Secret is missing gets one created, and that is all
   such a pass writes: it asks to be run again at once, because a value is promoted only once a pass has read
   it back, and rolling out a configuration without it (or warning that it is missing) would be wasted.
   Otherwise a Secret that now holds a new value has it promoted; the old value starts retiring.
2. Render the configuration from those states.
3. Rollout. If the Deployment as read runs exactly that configuration and its rollout is complete, every pod
   accepts every token in it. A token that is in no rendered configuration needs no rollout at all.
4. Retire what is due (its replacement rolled out, plus the grace period); if anything was, render again. The
   configuration rendered last is the one applied, once.
5. Statuses, Events, and the writes that make the namespace match (only where it does not already).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcpg_operator import events, objects, observed, render, rotation, statuses, tokens
from mcpg_operator import writes as w
from mcpg_operator.models import GROUP
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
    """Every ResourceWatch's and WebhookToken's status; only those that changed are among `writes`."""
    events: tuple[events.Event, ...]
    writes: tuple[w.Write, ...]
    """What the write phase does, stage by stage."""
    rollout_complete: bool
    """The Deployment as read already runs `plan`, on every pod."""
    next_check_s: float | None
    """Decide again after this long (a grace period ends), even if nothing else happens."""
    rerun: bool
    """Decide again as soon as the writes are done: a created Secret has to be read back."""


def decide(snap: observed.Snapshot, defaults: GatewayDefaults, now: float, new_token: Callable[[], str]) -> Decision:
    secrets = snap.secret_data()
    sources = {t.name: tokens.source(t.spec, secrets) for t in snap.tokens}
    generated = _generated_secrets(snap, sources, new_token)
    if generated:
        return _only_create(snap, generated, defaults)
    edits = {t.name: rotation.observe_secret(t.state, sources[t.name].secret_value, now) for t in snap.tokens}
    states, plan = _rotate(snap, sources, {name: edit.state for name, edit in edits.items()}, defaults, now)
    rolled_out = _runs(snap.deployment, plan)
    status_by_ref, status_writes = _statuses(snap, sources, states, plan, rolled_out, now)
    evts = _events(snap, edits, states, plan)
    posts = [w.PostEvent(events.body(snap.namespace, e, now)) for e in evts]
    todo = [*_state_writes(snap, states), *_gateway(snap, plan, defaults), *status_writes, *posts]
    return Decision(
        states=states,
        plan=plan,
        statuses=status_by_ref,
        events=evts,
        writes=w.in_order(todo),
        rollout_complete=rolled_out,
        next_check_s=_next_check(states, sources, now),
        rerun=False,
    )


def _only_create(snap: observed.Snapshot, generated: list[w.Write], defaults: GatewayDefaults) -> Decision:
    """Step 1's early end: the generated Secrets are the only writes, and the next pass decides the rest."""
    states = {t.name: t.state for t in snap.tokens}
    plan = render.plan(snap.watches, states, snap.secret_data(), defaults)
    return Decision(states, plan, {}, (), w.in_order(generated), _runs(snap.deployment, plan), None, rerun=True)


def _rotate(
    snap: observed.Snapshot, sources: dict[str, tokens.Source], promoted: States, defaults: GatewayDefaults, now: float
) -> tuple[States, render.Plan]:
    """Steps 2 to 4: render, observe the rollout as read, retire what is due, and render again if anything was."""
    plan = render.plan(snap.watches, promoted, snap.secret_data(), defaults)
    states = _after_rollout(promoted, sources, plan, _runs(snap.deployment, plan), now)
    if any(len(states[name].retiring) < len(promoted[name].retiring) for name in states):
        plan = render.plan(snap.watches, states, snap.secret_data(), defaults)
    return states, plan


# --- tokens -------------------------------------------------------------------------------------------------


def _generated_secrets(
    snap: observed.Snapshot, sources: dict[str, tokens.Source], new_token: Callable[[], str]
) -> list[w.Write]:
    out: dict[str, w.Write] = {}
    for t in snap.tokens:
        spec = sources[t.name].spec
        if spec is not None and sources[t.name].wants_generated_secret and spec.secret_ref.name not in out:
            body = tokens.generated_secret(snap.namespace, spec, t.id.owner_reference(), new_token())
            out[spec.secret_ref.name] = w.CreateObject(
                w.Stage.TOKEN_SECRETS, w.Ref("secrets", spec.secret_ref.name), body
            )
    return list(out.values())


def _after_rollout(
    states: States, sources: dict[str, tokens.Source], plan: render.Plan, runs_plan: bool, now: float
) -> States:
    """The rotation step: mark what the observed rollout carried, then retire what is due."""
    carried = render.rendered_tokens(plan.config)
    out = {}
    for name, state in states.items():
        complete = runs_plan or state.current not in carried  # a token no pod needs waits for no rollout
        out[name] = rotation.retire_due(rotation.observe_rollout(state, complete, now), sources[name].grace_s, now)
    return out


def _state_writes(snap: observed.Snapshot, states: States) -> list[w.Write]:
    out: list[w.Write] = []
    for t in snap.tokens:
        if states[t.name] != t.state:
            body = tokens.state_secret(snap.namespace, t.name, t.id.owner_reference(), states[t.name])
            out.append(w.ApplyObject(w.Stage.ROTATION_STATE, w.Ref("secrets", body["metadata"]["name"]), body))
    return out


def _next_check(states: States, sources: dict[str, tokens.Source], now: float) -> float | None:
    due = [rotation.next_retirement(state, sources[name].grace_s) for name, state in states.items()]
    waits = [max(0.0, at - now) for at in due if at is not None]
    return min(waits) if waits else None


# --- the gateway --------------------------------------------------------------------------------------------


def _runs(deployment: observed.Deployment | None, plan: render.Plan) -> bool:
    """The Deployment's template names exactly this configuration and every pod runs it."""
    return deployment is not None and deployment.config_hash == plan.hash and deployment.rollout_complete


def _gateway(snap: observed.Snapshot, plan: render.Plan, defaults: GatewayDefaults) -> list[w.Write]:
    if not snap.watches:
        return []  # without a ResourceWatch there is no gateway: garbage collection removes its objects
    return [*_gateway_writes(snap, plan, defaults), *_collectable(snap, plan)]


def _gateway_writes(snap: observed.Snapshot, plan: render.Plan, defaults: GatewayDefaults) -> list[w.Write]:
    ns, owners = snap.namespace, objects.owner_references([(rw.name, rw.id.uid) for rw in snap.watches])
    out: list[w.Write] = [*_config_secret(snap, plan, owners)]
    deployment = snap.deployment.applied if snap.deployment else None
    for live, ref, body in (
        (snap.service_account, w.Ref("serviceaccounts", objects.NAME), objects.service_account(ns, owners)),
        (snap.service, w.Ref("services", objects.NAME), objects.service(ns, owners, defaults)),
        (deployment, w.Ref("deployments", objects.NAME, "apps"), objects.deployment(ns, plan.hash, defaults, owners)),
    ):
        if live is None or not live.covers(body):
            out.append(w.ApplyObject(w.Stage.GATEWAY, ref, body))
    return out


def _config_secret(snap: observed.Snapshot, plan: render.Plan, owners: list[dict[str, Any]]) -> list[w.Write]:
    """Immutable and named by content: an existing one is already right; only its owners may need updating."""
    body = objects.config_secret(snap.namespace, plan.config, plan.hash, owners)
    ref = w.Ref("secrets", body["metadata"]["name"])
    existing = snap.secret(ref.name)
    if existing is None:
        return [w.CreateObject(w.Stage.GATEWAY, ref, body)]
    if existing.owner_uids != {o["uid"] for o in owners}:
        return [w.MergePatch(w.Stage.GATEWAY, ref, {"metadata": {"ownerReferences": owners}})]
    return []


def _collectable(snap: observed.Snapshot, plan: render.Plan) -> list[w.Write]:
    """Configuration Secrets that no ReplicaSet (current, starting, or kept for rollback) mounts any more."""
    needed = {objects.config_secret_name(plan.hash)}
    if snap.deployment is not None and snap.deployment.config_secret:
        needed.add(snap.deployment.config_secret)  # its ReplicaSet may not exist yet
    for rs in snap.replicasets:
        needed |= rs.secrets
    return [w.DeleteObject(w.Ref("secrets", s.name)) for s in snap.secrets if _is_config(s) and s.name not in needed]


def _is_config(secret: observed.Secret) -> bool:
    ours = objects.HASH_LABEL in secret.labels and objects.SELECTOR.items() <= secret.labels.items()
    return ours and secret.name.startswith(objects.CONFIG_PREFIX)


# --- what users see -----------------------------------------------------------------------------------------


def _statuses(
    snap: observed.Snapshot,
    sources: dict[str, tokens.Source],
    states: States,
    plan: render.Plan,
    rolled_out: bool,
    now: float,
) -> tuple[dict[w.Ref, dict[str, Any]], list[w.Write]]:
    decided: dict[w.Ref, tuple[dict[str, Any], dict[str, Any]]] = {}
    for rw in snap.watches:
        status = statuses.watch_status(rw, plan.verdicts[rw.name], plan.hash, rolled_out, now)
        decided[w.Ref("resourcewatches", rw.name, GROUP)] = (rw.status, status)
    for t in snap.tokens:
        status = statuses.token_status(t, sources[t.name], states[t.name], now)
        decided[w.Ref("webhooktokens", t.name, GROUP)] = (t.status, status)
    patches: list[w.Write] = [
        w.MergePatchStatus(ref, after) for ref, (before, after) in decided.items() if statuses.changed(before, after)
    ]
    return {ref: after for ref, (_, after) in decided.items()}, patches


def _events(
    snap: observed.Snapshot, edits: dict[str, rotation.Edit], states: States, plan: render.Plan
) -> tuple[events.Event, ...]:
    out = [e for t in snap.tokens for e in events.promotion(t.id, t.state, edits[t.name])]
    out += [e for rw in snap.watches for e in events.watch_transition(rw, plan.verdicts[rw.name])]
    out += [e for t in snap.tokens for e in events.token_transitions(t.id, t.state, states[t.name])]
    return tuple(out)
