"""Status of ResourceWatches and WebhookTokens, computed from scratch on every pass. Pure.

A status is written only when it differs from the one read (`changed`), so watching our own status writes
converges instead of looping. Tokens appear only as short SHA-256 digests. What a status claims is what the pods
said: a watch is served once every counted gateway pod acknowledges its entry, `TokenAccepted` is true once every
counted pod acknowledged a configuration carrying the current token, as read at the Secret version the status
names, a configuration a pod refused is reported as Stalled (`ConfigRefused`) on what it concerns, and a rollout
the Deployment controller gave up on is reported as Stalled, with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcpg_operator import actions as w
from mcpg_operator import conditions as c
from mcpg_operator import objects, observed, render, rotation, tokens
from mcpg_operator.serving import Late, Refused

Stalled = tuple[str, str] | None
"""(reason, message) of the gateway Deployment's failed Progressing condition, if it has one."""


@dataclass(frozen=True, slots=True)
class TokenView:
    """What a WebhookToken's status needs beyond its own state: what the gateway's pods really do with it."""

    accepted: bool
    """Every counted gateway pod has acknowledged a configuration holding the current token (`rotation`)."""
    carried: bool
    """The configuration decided holds the current token (some served watch uses it)."""
    not_carried_message: str = ""
    """Why no served watch uses it, when it is not carried (the first watch's reason, fitted)."""
    not_carried_detail: str = ""
    """The same, naming every watch that refers to it: for its Event."""
    rollout_stalled: Stalled = None
    acknowledged: int = 0
    """Counted pods serving every entry that carries the current token, as decided."""
    counted: int = 0
    late: Late | None = None
    """The pods late with it (`serving.Pods.late`); None when none is."""
    refused: Refused | None = None
    """What pods refused of the configuration that concerns this token's watches (`ConfigRefused`)."""


@dataclass(frozen=True, slots=True)
class WatchServing:
    """How far the gateway's pods are with one watch's entry."""

    served: bool
    """At least one pod counts, and every counted pod serves the entry as decided."""
    serving: int = 0
    counted: int = 0
    late: Late | None = None
    """The pods late with it; None when none is."""
    refused: Refused | None = None
    """What pods refused of the configuration that concerns this watch (`ConfigRefused`)."""

    def message(self) -> str:
        if not self.counted:
            return "waiting for a gateway pod to be Ready and serve this watch's configuration"
        said = f"{self.serving} of {self.counted} gateway pods serve this watch's configuration"
        return said + (self.late.brief(c.MESSAGE_MAX - len(said)) if self.late is not None else "")


@dataclass(frozen=True, slots=True)
class Gateway:
    """Where the namespace's gateway is reached, and why no MCP client could use it (None: some principal can)."""

    namespace: str
    clients_problem: str | None = None

    def address(self) -> dict[str, Any]:
        """The Service's in-cluster name, the MCP endpoint, and the ports: what a client or sender is pointed at."""
        service = f"{objects.NAME}.{self.namespace}.svc"
        return {
            "service": service,
            "url": f"http://{service}:{objects.PUBLIC_PORT}/mcp",
            "ports": [{"name": "http", "port": objects.PUBLIC_PORT}, {"name": "admin", "port": objects.ADMIN_PORT}],
        }


WEBHOOK_PATH = "/webhooks/resource-updated/{token}"
"""The path a webhook sender POSTs to on the gateway's http port; `{token}` stays a placeholder in any status."""


def watch_status(
    rw: observed.Watch,
    verdict: render.Verdict,
    entry_digest: str,
    pods: WatchServing,
    now: float,
    rollout_stalled: Stalled = None,
    gateway: Gateway | None = None,
    token_secret: str | None = None,
    signature_secret: str | None = None,
) -> dict[str, Any]:
    """`entry_digest`: of the watch's own entry in the configuration; `pods`: how far the pods are with that entry
    (another watch's change leaves this status as it is, so a pass patches only what changed); `token_secret`:
    `name/key` of the Secret holding a webhook watch's token, where its senders find it; `signature_secret`: the
    same of its signing secret, if it requires a signature."""
    gen = rw.id.generation
    conds = list(rw.status.get("conditions", []))
    refused = pods.refused if verdict.served else None
    ready = verdict.served and pods.served and refused is None
    reason, message, stalled = verdict.reason, verdict.message, verdict.stalled
    if refused is not None:
        reason, message, stalled = c.CONFIG_REFUSED, refused.message(), True
    elif verdict.served and not pods.served:
        reason, message = c.ROLLING_OUT, pods.message()
        if rollout_stalled is not None:
            reason, message, stalled = _stalled_rollout(rollout_stalled)
    clients_problem = gateway.clients_problem if gateway is not None and verdict.served else None
    if ready and clients_problem:  # the whole problem is ClientsAuthorized's message
        message = c.first_of([message], ", but every MCP client gets 401 (see ClientsAuthorized)")
    reconciling = verdict.served and not ready and not stalled
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen, now)
    conds = c.set_condition(conds, c.RECONCILING, reconciling, reason, message, gen, now)
    conds = c.set_stalled(conds, stalled, reason, message, gen, now)
    conds = _clients(conds, gateway if verdict.served else None, gen, now)
    webhook = verdict.served and verdict.strategy == "webhook"
    # Every field is always present: the status is merge-patched, and None is what removes a stale value.
    return {
        "observedGeneration": gen,
        "conditions": conds,
        "strategy": verdict.strategy,
        "uri": verdict.uri,
        "configHash": entry_digest[:16] if verdict.served else None,
        "gateway": gateway.address() if gateway is not None and verdict.served else None,
        "webhookPath": WEBHOOK_PATH if webhook else None,
        "webhookTokenSecret": token_secret if webhook else None,
        "signatureSecret": signature_secret if webhook else None,
    }


def watch_detail(verdict: render.Verdict, pods: WatchServing, rollout_stalled: Stalled = None) -> str:
    """What the Event for a change of this watch's Ready says beyond its message (`watch_status`): every problem,
    every pod; empty when the message says it all."""
    if not verdict.served:
        return verdict.detail
    if pods.refused is not None:
        return pods.refused.detail()
    if not pods.served and rollout_stalled is not None:
        return _stalled_detail(rollout_stalled)
    return pods.late.detail() if not pods.served and pods.late is not None else ""


def token_detail(view: TokenView) -> str:
    """What the Event for a change of a WebhookToken's Ready says beyond its message (`token_status`)."""
    if not view.carried and not view.accepted:
        return view.not_carried_detail
    if view.refused is not None:
        return view.refused.detail()
    if not view.accepted and view.rollout_stalled is not None:
        return _stalled_detail(view.rollout_stalled)
    return view.late.detail() if not view.accepted and view.late is not None else ""


def _clients(conds: list[dict[str, Any]], gateway: Gateway | None, gen: int, now: float) -> list[dict[str, Any]]:
    """`ClientsAuthorized`, on a served watch only: served is not usable if every MCP client gets 401."""
    if gateway is None:
        return [x for x in conds if x.get("type") != c.CLIENTS_AUTHORIZED]
    if gateway.clients_problem:
        return c.set_condition(conds, c.CLIENTS_AUTHORIZED, False, c.NO_PRINCIPALS, gateway.clients_problem, gen, now)
    message = f"Secret {render.AUTH_SECRET} lets MCP clients use this gateway"
    return c.set_condition(conds, c.CLIENTS_AUTHORIZED, True, c.PRINCIPALS_DEFINED, message, gen, now)


def token_status(
    wt: observed.Token,
    src: tokens.Source,
    state: rotation.TokenState,
    view: TokenView,
    now: float,
    gateway: Gateway | None = None,
) -> dict[str, Any]:
    gen = wt.id.generation
    conds = list(wt.status.get("conditions", []))
    refusal = _refusal(wt, src)
    phase, ready, reason, message = ("Error", False, c.SECRET_REFUSED, refusal) if refusal else _phase(src, state, view)
    conds = c.set_condition(conds, c.READY, ready, reason, message, gen, now)
    # A value the gateway would refuse leaves the token in use as it is, but the Secret as read does not hold it:
    # no condition may say that the token of this version of the Secret is accepted.
    accepted = view.accepted and src.secret_error is None and refusal is None and state.current is not None
    accept_reason, accept_msg = (reason, message)
    if accepted:
        accept_reason, accept_msg = c.TOKEN_ROLLED_OUT, _accepted_message(src, state, view)
    conds = c.set_condition(conds, c.TOKEN_ACCEPTED, accepted, accept_reason, accept_msg, gen, now)
    stalled = (c.SECRET_REFUSED, refusal) if refusal else _token_stalled(src, state, view)
    conds = c.set_stalled(conds, stalled is not None, *(stalled or ("", "")), gen, now)
    accepted_at = state.current_accepted_at if accepted else None
    in_use = refusal is None and (view.carried or view.accepted)
    return {
        "observedGeneration": gen,
        "phase": phase,
        "conditions": conds,
        "retiringCount": len(state.retiring),
        "retiring": [_retiring(r, src.grace_s) for r in state.retiring],
        # Always present (None removes a stale value under merge patch): once an edit is read, the previous
        # token's acceptance must not be shown as the new one's.
        "currentDigest": render.token_digest(state.current) if state.current else None,
        "currentAcceptedAt": c.now_iso(accepted_at) if accepted_at is not None else None,
        "secretResourceVersion": src.secret_version,
        "accepted": _accepted(src, state, accepted_at),
        # Where its senders POST, once some served watch uses it (the token itself is in its Secret, never here).
        "gateway": gateway.address() if gateway is not None and in_use else None,
        # A signing secret is no path credential: its senders POST to the path of the token that routes them.
        "webhookPath": WEBHOOK_PATH if in_use and src.role == "token" else None,
    }


def _accepted(src: tokens.Source, state: rotation.TokenState, at: float | None) -> dict[str, Any] | None:
    """Which token is accepted, read at which version of its Secret, since when: what `kubectl wait` waits for."""
    if at is None or state.current is None:
        return None
    return {
        "digest": render.token_digest(state.current),
        "secretResourceVersion": src.secret_version,
        "at": c.now_iso(at),
    }


def _about(src: tokens.Source, state: rotation.TokenState, said: str) -> str:
    """`token <digest> <said> (Secret <name> at resourceVersion <v>)`: which token, read where, a condition is
    about; the Secret's name (the user's, up to 253 characters) elided to fit."""
    digest = render.token_digest(state.current) if state.current else "none"
    name = src.spec.secret_ref.name if src.spec is not None else "?"
    version = src.secret_version or "unknown"
    template = f"{src.noun} {digest} {said} (Secret {{name}} at resourceVersion {{version}})"
    return c.fit(template, name=name, version=version)


def _accepted_message(src: tokens.Source, state: rotation.TokenState, view: TokenView) -> str:
    # With no pod counted now, it stays accepted: configurations only move forward, and a new pod reads the newest.
    pods = f"all {view.counted} counted gateway pod(s)" if view.counted else "every counted gateway pod"
    return _about(src, state, f"is accepted by {pods}")


def refused(wt: observed.Token, why: str, now: float) -> dict[str, Any]:
    """The status of a WebhookToken whose generated Secret the API server refused to create (`why`: its message,
    elided here; the Event has it whole).

    The same conditions `token_status` keeps deciding while the Secret is still missing, so passes agree.
    """
    message = c.fit("the API server refused to create its Secret: {why}", why=why)
    gen, conds = wt.id.generation, list(wt.status.get("conditions", []))
    for type_ in (c.READY, c.TOKEN_ACCEPTED):
        conds = c.set_condition(conds, type_, False, c.SECRET_REFUSED, message, gen, now)
    conds = c.set_stalled(conds, True, c.SECRET_REFUSED, message, gen, now)
    return {"observedGeneration": gen, "phase": "Error", "conditions": conds}


def apply_failed(decided: dict[str, Any], failure: w.Failure, generation: int, now: float) -> dict[str, Any]:
    """`decided`, this pass's status (never written: a write it depends on failed), with the failure as Ready.

    Retried either way; a refusal (`failure.permanent`) is Stalled, since sending the same write again will not
    help until someone changes something (the spec, a quota, another Service holding a node port).
    """
    # The cause first (a policy's own message, the field), then what failed: cut at its end if need be (the
    # Event keeps the API server's message whole).
    message = c.clamp(failure.brief or failure.message, c.MESSAGE_MAX)
    conds, said = list(decided.get("conditions", [])), (c.APPLY_FAILED, message, generation, now)
    conds = c.set_condition(conds, c.READY, False, *said)
    conds = c.set_condition(conds, c.RECONCILING, not failure.permanent, *said)
    conds = c.set_stalled(conds, failure.permanent, *said)
    return {**decided, "conditions": conds}


def depends_on_gateway(status: dict[str, Any]) -> bool:
    """Whether an object with this decided status is only as good as the gateway's objects: a served watch, a
    token in use. One already failing for a reason of its own (an invalid spec, a missing Secret) keeps it."""
    ready: dict[str, Any] = next((x for x in status.get("conditions", []) if x.get("type") == c.READY), {})
    return ready.get("status") == "True" or ready.get("reason") in GATEWAY_BOUND_REASONS


GATEWAY_BOUND_REASONS = frozenset(
    {c.SERVED, c.ROLLING_OUT, c.TOKEN_ROTATING, c.APPLY_FAILED, c.ROLLOUT_STALLED, c.APPLIED, c.CONFIG_REFUSED}
)
"""Ready reasons of an object waiting on the gateway's objects (a stalled rollout's own reason may differ); an
McpGateway's `Applied` among them, since its settings are what failed to be written."""


def refused_before(status: dict[str, Any]) -> bool:
    """The status says the API server refused this WebhookToken's generated Secret."""
    return _refusal_message(status) is not None


def changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Would writing `after` over `before` change anything a reader cares about?"""
    return _comparable(before) != _comparable(after)


def _phase(src: tokens.Source, state: rotation.TokenState, view: TokenView) -> tuple[str, bool, str, str]:
    if src.spec is None:
        return "Error", False, c.INVALID_SPEC, str(src.spec_error)
    if src.secret_error is not None:
        return "Error", False, c.INVALID_SPEC, src.secret_error
    if state.current is None:
        ref = src.spec.secret_ref
        hint = "" if src.spec.generate else ", or set spec.generate: true"
        msg = c.fit(f"Secret {{name}} key {{key}} is missing: create it{hint}", name=ref.name, key=ref.key)
        return "Pending", False, c.SECRET_NOT_FOUND, msg
    if not view.carried and not view.accepted:
        return "Unused", False, c.NOT_SERVED, view.not_carried_message
    if view.refused is not None:  # Ready no more: the rotation cannot go on until the configuration is fixed
        phase = "Rolling" if not view.accepted else "Retiring" if state.retiring else "Ready"
        return phase, False, c.CONFIG_REFUSED, view.refused.message()
    if not view.accepted:
        if view.rollout_stalled is not None:
            return ("Rolling", False, *_stalled_rollout(view.rollout_stalled)[:2])
        return "Rolling", False, c.TOKEN_ROTATING, _waiting_message(src, state, view)
    if state.retiring:
        removing = len(rotation.retired(state))
        gone = f" ({removing} left out of the configuration until every gateway pod drops it)" if removing else ""
        message = f"{len(state.retiring)} replaced {src.noun}(s) still accepted{gone}"
        return "Retiring", True, c.RETIRING_OLD_TOKENS, message
    message = f"every counted gateway pod accepts the current {src.noun}; no old {src.noun} remains"
    return "Ready", True, c.TOKEN_ROLLED_OUT, message


def _waiting_message(src: tokens.Source, state: rotation.TokenState, view: TokenView) -> str:
    if not view.counted:
        return _about(src, state, "is not accepted yet: no gateway pod is Ready")
    if view.late is None:
        return _about(src, state, f"is not accepted yet: {view.acknowledged} of {view.counted} gateway pods have it")
    # Late pods matter more than where the token was read: the Secret's version is in status.accepted once it is.
    digest = render.token_digest(state.current) if state.current else "none"
    said = f"{src.noun} {digest} is not accepted yet: {view.acknowledged} of {view.counted} gateway pods have it"
    return said + view.late.brief(c.MESSAGE_MAX - len(said))


def _refusal(wt: observed.Token, src: tokens.Source) -> str | None:
    """The API server's refusal of the generated Secret, while it is still missing (creating it clears it)."""
    return _refusal_message(wt.status) if src.wants_generated_secret else None


def _refusal_message(status: dict[str, Any]) -> str | None:
    found = next(
        (x for x in status.get("conditions", []) if x.get("type") == c.STALLED and x.get("reason") == c.SECRET_REFUSED),
        None,
    )
    return str(found.get("message", "")) if found is not None else None


def _token_stalled(src: tokens.Source, state: rotation.TokenState, view: TokenView) -> tuple[str, str] | None:
    if src.spec is None:
        return c.INVALID_SPEC, str(src.spec_error)
    if src.secret_error is not None:  # retrying will not help until someone edits the Secret
        return c.INVALID_SPEC, src.secret_error
    if state.current is not None and view.carried and view.refused is not None:
        return c.CONFIG_REFUSED, view.refused.message()
    if state.current is not None and not view.accepted and view.rollout_stalled is not None:
        reason, message, _ = _stalled_rollout(view.rollout_stalled)
        return reason, message
    return None


def _stalled_rollout(stalled: tuple[str, str]) -> tuple[str, str, bool]:
    """The gateway Deployment's failed Progressing condition, its message elided (`_stalled_detail` has it all)."""
    reason, message = stalled
    text = c.first_of([f"the gateway Deployment stopped rolling out: {message}"])
    return reason or c.ROLLOUT_STALLED, text, True


def _stalled_detail(stalled: tuple[str, str]) -> str:
    reason, message = stalled
    return f"the gateway Deployment stopped rolling out ({reason}): {message}; every token not yet retired is kept"


def _retiring(r: rotation.Retiring, grace: int) -> dict[str, Any]:
    out: dict[str, Any] = {"digest": render.token_digest(r.token), "replacedAt": c.now_iso(r.replaced_at)}
    if r.accepted_at is not None:
        out["retireAfter"] = c.now_iso(r.accepted_at + grace)
    if r.retired_at is not None:
        out["removing"] = True
    return out


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    status = {k: v for k, v in status.items() if v is not None}  # an absent field and a null one are the same
    conds = sorted(
        ({k: v for k, v in cond.items() if k != "lastTransitionTime"} for cond in status.get("conditions", [])),
        key=lambda cond: str(cond["type"]),
    )
    return {**status, "conditions": conds}
