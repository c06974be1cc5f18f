"""Status and Events for ResourceWatches and WebhookTokens.

Statuses are computed from scratch on every reconcile and written only when they differ, so watching our own
status writes converges instead of looping. Tokens appear only as short SHA-256 digests.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

from mcpg_operator import conditions as c
from mcpg_operator import render, rotation
from mcpg_operator.kube import Kube, ns_path

if TYPE_CHECKING:
    from mcpg_operator.reconcile import Inputs

logger = logging.getLogger(__name__)
_event_seq = itertools.count()


async def write(
    kube: Kube,
    namespace: str,
    inputs: Inputs,
    plan: render.Plan,
    states: dict[str, rotation.TokenState],
    rolled_out: bool,
) -> None:
    for rw in inputs.watches:
        verdict = plan.verdicts.get(rw["metadata"]["name"])
        if verdict is not None:
            await _patch_if_changed(
                kube, namespace, "resourcewatches", rw, watch_status(rw, verdict, plan.hash, rolled_out)
            )
            await _event_on_change(kube, namespace, rw, verdict)
    for wt in inputs.webhook_tokens:
        name = wt["metadata"]["name"]
        src = inputs.sources[name]
        await _patch_if_changed(kube, namespace, "webhooktokens", wt, token_status(wt, src, states[name]))
        await _token_events(kube, namespace, wt, inputs.initial[name], states[name])


def watch_status(rw: dict[str, Any], verdict: render.Verdict, config_hash: str, rolled_out: bool) -> dict[str, Any]:
    gen = rw["metadata"].get("generation", 0)
    conds = list((rw.get("status") or {}).get("conditions", []))
    ready = verdict.served and rolled_out
    reason, message = verdict.reason, verdict.message
    if verdict.served and not rolled_out:
        reason, message = c.ROLLING_OUT, "waiting for the gateway rollout that carries this watch to complete"
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen)
    conds = c.set_condition(conds, c.RECONCILING, verdict.served and not rolled_out, reason, message, gen)
    conds = c.set_stalled(conds, verdict.stalled, reason, message, gen)
    # Every field is always present: the status is merge-patched, and None is what removes a stale value.
    return {
        "observedGeneration": gen,
        "conditions": conds,
        "strategy": verdict.strategy,
        "uri": verdict.uri,
        "configHash": config_hash[:16] if verdict.served else None,
    }


def token_status(wt: dict[str, Any], src: Any, state: rotation.TokenState) -> dict[str, Any]:
    gen = wt["metadata"].get("generation", 0)
    conds = list((wt.get("status") or {}).get("conditions", []))
    grace = src.spec.grace_period_seconds if src.spec else 0
    phase, ready, reason, message = _token_phase(src, state)
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen)
    accepted = state.current_accepted_at is not None
    accept_msg = "every gateway pod accepts the current token" if accepted else message
    conds = c.set_condition(
        conds, c.TOKEN_ACCEPTED, accepted, c.TOKEN_ROLLED_OUT if accepted else reason, accept_msg, gen
    )
    conds = c.set_stalled(conds, src.spec is None, c.INVALID_SPEC, str(src.spec_error), gen)
    status: dict[str, Any] = {
        "observedGeneration": gen,
        "phase": phase,
        "conditions": conds,
        "retiringCount": len(state.retiring),
        "retiring": [_retiring(r, grace) for r in state.retiring],
        # Always present (None removes a stale value under merge patch): during a rollout the previous
        # token's acceptance time must not be shown as the new one's.
        "currentDigest": render.token_digest(state.current) if state.current else None,
        "currentAcceptedAt": c.now_iso(state.current_accepted_at) if state.current_accepted_at is not None else None,
    }
    return status


def _token_phase(src: Any, state: rotation.TokenState) -> tuple[str, bool, str, str]:
    if src.spec is None:
        return "Error", False, c.INVALID_SPEC, str(src.spec_error)
    if state.current is None:
        ref = src.spec.secret_ref
        hint = "" if src.spec.generate else ", or set generate: true"
        return "Pending", False, c.SECRET_NOT_FOUND, f"Secret {ref.name} with key {ref.key} is missing; create it{hint}"
    if state.current_accepted_at is None:
        return "Rolling", False, c.TOKEN_ROTATING, "the gateway is rolling out the new token"
    if state.retiring:
        return "Retiring", True, c.RETIRING_OLD_TOKENS, f"{len(state.retiring)} replaced token(s) still accepted"
    return "Ready", True, c.TOKEN_ROLLED_OUT, "every gateway pod accepts the current token; no old token remains"


def _retiring(r: rotation.Retiring, grace: int) -> dict[str, Any]:
    out = {"digest": render.token_digest(r.token), "replacedAt": c.now_iso(r.replaced_at)}
    if r.rolled_out_at is not None:
        out["retireAfter"] = c.now_iso(r.rolled_out_at + grace)
    return out


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    status = {k: v for k, v in status.items() if v is not None}  # an absent field and a null one are the same
    conds = sorted(
        ({k: v for k, v in cond.items() if k != "lastTransitionTime"} for cond in status.get("conditions", [])),
        key=lambda cond: str(cond["type"]),
    )
    return {**status, "conditions": conds}


async def _patch_if_changed(
    kube: Kube, namespace: str, plural: str, obj: dict[str, Any], status: dict[str, Any]
) -> None:
    if _comparable(obj.get("status") or {}) == _comparable(status):
        return
    path = ns_path(namespace, plural, obj["metadata"]["name"], group="mcpg.dev") + "/status"
    await kube.merge_patch(path, {"status": status})


async def _event_on_change(kube: Kube, namespace: str, rw: dict[str, Any], verdict: render.Verdict) -> None:
    before = next(
        (x for x in (rw.get("status") or {}).get("conditions", []) if x.get("type") == c.READY), {"reason": None}
    )
    if verdict.served or before.get("reason") == verdict.reason:
        return
    await event(kube, namespace, rw, "Warning", verdict.reason, verdict.message)


async def _token_events(
    kube: Kube, namespace: str, wt: dict[str, Any], before: rotation.TokenState, after: rotation.TokenState
) -> None:
    if after.current_accepted_at is not None and before.current_accepted_at is None and after.current:
        msg = f"every gateway pod accepts token {render.token_digest(after.current)}"
        await event(kube, namespace, wt, "Normal", "TokenAccepted", msg)
    gone = {r.token for r in before.retiring} - {r.token for r in after.retiring} - {after.current}
    for token in sorted(gone):
        msg = f"token {render.token_digest(token)} retired; the gateway rolls out without it"
        await event(kube, namespace, wt, "Normal", "TokenRetired", msg)


async def event(kube: Kube, namespace: str, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
    """Post a core/v1 Event about `obj` (what a user sees in `kubectl describe`)."""
    meta = obj["metadata"]
    now = c.now_iso()
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": namespace,
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": "mcpg-operator"},
        "reportingComponent": "mcpg-operator",
        "reportingInstance": "mcpg-operator",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    await kube.create(ns_path(namespace, "events"), body)
