"""Reconcile one namespace, level-based: read everything, compute what should be, write the difference.

Order is what makes rotation safe: rotation state is saved before the Deployment changes, a token is only
retired after the Deployment reports a completed rollout of the configuration rendered from that same state,
and the Deployment never rolls with maxUnavailable > 0. Running this twice in a row changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcpg_operator import objects as o
from mcpg_operator import render, rotation, statuses, tokens
from mcpg_operator.kube import Kube, ns_path
from mcpg_operator.rollout import rollout_complete
from mcpg_operator.settings import GatewayDefaults

logger = logging.getLogger(__name__)


@dataclass
class Outcome:
    served: int = 0
    config_hash: str | None = None
    rollout_complete: bool = False
    next_check_s: float | None = None
    """Reconcile again after this long (a grace period ends), even if nothing else happens."""


@dataclass
class Inputs:
    watches: list[dict[str, Any]]
    webhook_tokens: list[dict[str, Any]]
    secrets: dict[str, dict[str, str]]
    sources: dict[str, tokens.TokenSource] = field(default_factory=dict)
    initial: dict[str, rotation.TokenState] = field(default_factory=dict)
    """Each token's state as read, before this run changed it (what Events compare against)."""


async def reconcile(
    kube: Kube, namespace: str, defaults: GatewayDefaults, clock: Callable[[], float] = time.time
) -> Outcome:
    inputs = await _read(kube, namespace)
    now = clock()
    states = await _promote_edited_tokens(kube, namespace, inputs, now)
    outcome = Outcome()
    plan = render.plan(_watch_objects(inputs), _token_objects(states), inputs.secrets, defaults)
    deployment = None
    if inputs.watches:
        deployment = await _apply_gateway(kube, namespace, inputs, plan, defaults)
        outcome.rollout_complete = rollout_complete(deployment) and _runs(deployment, plan.hash)
        retired = _observe_rollout(inputs, plan, states, outcome.rollout_complete, now)
        if retired:
            await _save_states(kube, namespace, inputs, states)
            plan = render.plan(_watch_objects(inputs), _token_objects(states), inputs.secrets, defaults)
            deployment = await _apply_gateway(kube, namespace, inputs, plan, defaults)
            outcome.rollout_complete = False
        await _collect_old_configs(kube, namespace, plan.hash)
    else:
        _retire_unused(inputs, plan, states, now)
    await _save_states(kube, namespace, inputs, states)
    await statuses.write(kube, namespace, inputs, plan, states, outcome.rollout_complete)
    outcome.served = sum(v.served for v in plan.verdicts.values())
    outcome.config_hash = plan.hash if inputs.watches else None
    outcome.next_check_s = _next_check(inputs, states, now)
    return outcome


async def _read(kube: Kube, namespace: str) -> Inputs:
    watches = [
        w
        for w in await kube.list(ns_path(namespace, "resourcewatches", group="mcpg.dev"))
        if not w["metadata"].get("deletionTimestamp")
    ]
    wts = [
        w
        for w in await kube.list(ns_path(namespace, "webhooktokens", group="mcpg.dev"))
        if not w["metadata"].get("deletionTimestamp")
    ]
    secrets = {s["metadata"]["name"]: tokens.decode(s) for s in await kube.list(ns_path(namespace, "secrets"))}
    inputs = Inputs(watches, wts, secrets)
    for wt in wts:
        src = await tokens.load(kube, namespace, wt, secrets)
        inputs.sources[src.name] = src
        inputs.initial[src.name] = src.state
    return inputs


async def _promote_edited_tokens(
    kube: Kube, namespace: str, inputs: Inputs, now: float
) -> dict[str, rotation.TokenState]:
    states: dict[str, rotation.TokenState] = {}
    for name, src in inputs.sources.items():
        edit = rotation.observe_secret(src.state, src.secret_value, now)
        states[name] = edit.state
        wt = _wt(inputs, name)
        if edit.state.current != src.state.current and src.state.current is not None:
            new, old = render.token_digest(edit.state.current or ""), render.token_digest(src.state.current)
            msg = f"new token {new} promoted; {old} stays valid until the rollout carrying {new} completes"
            await statuses.event(kube, namespace, wt, "Normal", "TokenPromoted", msg)
        if edit.dropped:
            msg = (
                f"{edit.dropped} replaced token(s) dropped before retirement: more than "
                f"{rotation.MAX_RETIRING} edits while the gateway was rolling out"
            )
            await statuses.event(kube, namespace, wt, "Warning", "TooManyRetiringTokens", msg)
    # Saved before the Deployment changes: after a restart the promotion is not repeated or lost.
    await _save_states(kube, namespace, inputs, states)
    return states


def _observe_rollout(
    inputs: Inputs, plan: render.Plan, states: dict[str, rotation.TokenState], complete: bool, now: float
) -> bool:
    """Mark rollouts that carried each token state; retire what is due. True if a token was retired."""
    used = _used_tokens(inputs, plan)
    retired = False
    for name, state in states.items():
        src = inputs.sources[name]
        grace = src.spec.grace_period_seconds if src.spec else 0
        observed = rotation.observe_rollout(state, carries_state=True, complete=complete or name not in used, now=now)
        after = rotation.retire_due(observed, grace, now)
        retired |= len(after.retiring) < len(observed.retiring)
        states[name] = after
    return retired


def _retire_unused(inputs: Inputs, plan: render.Plan, states: dict[str, rotation.TokenState], now: float) -> None:
    """No gateway runs in this namespace, so no token needs to stay valid for anyone."""
    _observe_rollout(inputs, plan, states, True, now)


def _used_tokens(inputs: Inputs, plan: render.Plan) -> set[str]:
    used = set()
    for rw in inputs.watches:
        verdict = plan.verdicts.get(rw["metadata"]["name"])
        webhook = ((rw.get("spec") or {}).get("watch") or {}).get("webhook") or {}
        if verdict is not None and verdict.served and "tokenRef" in webhook:
            used.add(webhook["tokenRef"]["name"])
    return used


async def _apply_gateway(
    kube: Kube, namespace: str, inputs: Inputs, plan: render.Plan, defaults: GatewayDefaults
) -> dict[str, Any]:
    owners = o.owner_references([(w["metadata"]["name"], w["metadata"]["uid"]) for w in inputs.watches])
    secret = o.config_secret(namespace, plan.config, plan.hash, owners)
    if await kube.create(ns_path(namespace, "secrets"), secret) is None:
        # Immutable and named by content: an existing one is already right; only its owners may need updating.
        await kube.merge_patch(
            ns_path(namespace, "secrets", secret["metadata"]["name"]), {"metadata": {"ownerReferences": owners}}
        )
    await kube.apply(ns_path(namespace, "serviceaccounts", o.NAME), o.service_account(namespace, owners))
    await kube.apply(ns_path(namespace, "services", o.NAME), o.service(namespace, owners, defaults))
    body = o.deployment(namespace, plan.hash, defaults, owners)
    return await kube.apply(ns_path(namespace, "deployments", o.NAME, group="apps"), body)


def _runs(deployment: dict[str, Any], config_hash: str) -> bool:
    annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    return bool(annotations.get(o.HASH_ANNOTATION) == config_hash)


async def _collect_old_configs(kube: Kube, namespace: str, current_hash: str) -> None:
    """Delete configuration Secrets that no ReplicaSet (current or kept for rollback) references any more."""
    selector = ",".join(f"{k}={v}" for k, v in o.SELECTOR.items())
    needed = {o.config_secret_name(current_hash)}
    for rs in await kube.list(ns_path(namespace, "replicasets", group="apps"), selector):
        for volume in rs["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in volume:
                needed.add(volume["secret"]["secretName"])
    for secret in await kube.list(ns_path(namespace, "secrets"), f"{o.HASH_LABEL},{selector}"):
        name = secret["metadata"]["name"]
        if name.startswith(o.CONFIG_PREFIX) and name not in needed:
            await kube.delete(ns_path(namespace, "secrets", name))


async def _save_states(kube: Kube, namespace: str, inputs: Inputs, states: dict[str, rotation.TokenState]) -> None:
    for name, state in states.items():
        src = inputs.sources[name]
        if state != src.state:
            await tokens.save_state(kube, namespace, _wt(inputs, name), state)
            inputs.sources[name] = _with_state(src, state)


def _with_state(src: tokens.TokenSource, state: rotation.TokenState) -> tokens.TokenSource:
    return tokens.TokenSource(src.name, src.uid, src.generation, src.spec, src.spec_error, src.secret_value, state)


def _next_check(inputs: Inputs, states: dict[str, rotation.TokenState], now: float) -> float | None:
    due = []
    for name, state in states.items():
        spec = inputs.sources[name].spec
        at = rotation.next_retirement(state, spec.grace_period_seconds if spec else 0)
        if at is not None:
            due.append(max(0.0, at - now))
    return min(due) if due else None


def _wt(inputs: Inputs, name: str) -> dict[str, Any]:
    return next(w for w in inputs.webhook_tokens if w["metadata"]["name"] == name)


def _watch_objects(inputs: Inputs) -> list[render.WatchObject]:
    return [
        render.WatchObject(
            w["metadata"]["name"],
            w["metadata"]["uid"],
            w["metadata"].get("generation", 0),
            w["metadata"].get("creationTimestamp", ""),
            w.get("spec") or {},
        )
        for w in inputs.watches
    ]


def _token_objects(states: dict[str, rotation.TokenState]) -> dict[str, render.TokenObject]:
    return {name: render.TokenObject(name, state) for name, state in states.items()}
