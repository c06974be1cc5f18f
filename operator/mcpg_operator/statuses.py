"""Status of ResourceWatches and WebhookTokens, computed from scratch on every pass. Pure.

A status is written only when it differs from the one read (`changed`), so watching our own status writes
converges instead of looping. Tokens appear only as short SHA-256 digests.
"""

from __future__ import annotations

from typing import Any

from mcpg_operator import conditions as c
from mcpg_operator import observed, render, rotation, tokens


def watch_status(
    rw: observed.Watch, verdict: render.Verdict, config_hash: str, rolled_out: bool, now: float
) -> dict[str, Any]:
    gen = rw.id.generation
    conds = list(rw.status.get("conditions", []))
    ready = verdict.served and rolled_out
    reason, message = verdict.reason, verdict.message
    if verdict.served and not rolled_out:
        reason, message = c.ROLLING_OUT, "waiting for the gateway rollout that carries this watch to complete"
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen, now)
    conds = c.set_condition(conds, c.RECONCILING, verdict.served and not rolled_out, reason, message, gen, now)
    conds = c.set_stalled(conds, verdict.stalled, reason, message, gen, now)
    # Every field is always present: the status is merge-patched, and None is what removes a stale value.
    return {
        "observedGeneration": gen,
        "conditions": conds,
        "strategy": verdict.strategy,
        "uri": verdict.uri,
        "configHash": config_hash[:16] if verdict.served else None,
    }


def token_status(wt: observed.Token, src: tokens.Source, state: rotation.TokenState, now: float) -> dict[str, Any]:
    gen = wt.id.generation
    conds = list(wt.status.get("conditions", []))
    phase, ready, reason, message = _token_phase(src, state)
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen, now)
    accepted = state.current_accepted_at is not None
    accept_msg = "every gateway pod accepts the current token" if accepted else message
    accept_reason = c.TOKEN_ROLLED_OUT if accepted else reason
    conds = c.set_condition(conds, c.TOKEN_ACCEPTED, accepted, accept_reason, accept_msg, gen, now)
    conds = c.set_stalled(conds, src.spec is None, c.INVALID_SPEC, str(src.spec_error), gen, now)
    return {
        "observedGeneration": gen,
        "phase": phase,
        "conditions": conds,
        "retiringCount": len(state.retiring),
        "retiring": [_retiring(r, src.grace_s) for r in state.retiring],
        # Always present (None removes a stale value under merge patch): during a rollout the previous
        # token's acceptance time must not be shown as the new one's.
        "currentDigest": render.token_digest(state.current) if state.current else None,
        "currentAcceptedAt": c.now_iso(state.current_accepted_at) if state.current_accepted_at is not None else None,
    }


def changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Would writing `after` over `before` change anything a reader cares about?"""
    return _comparable(before) != _comparable(after)


def _token_phase(src: tokens.Source, state: rotation.TokenState) -> tuple[str, bool, str, str]:
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
