"""Steps 2 to 5 of `decide`, for the tokens: each WebhookToken's state from its Secret and the pods' acknowledgements.

Pure. A token is accepted once at least one gateway pod counts and every counted pod serves, for every watch that
uses it, the entry the operator rendered for it (which carries it): `rotation.observe_acknowledgement` records
that moment, once. A replaced token retires once its replacement has been accepted for the grace period, and is
forgotten once every counted pod serves a configuration without it. What pods may still accept is read from the
configuration Secret, which every pod applies and none serves anything newer than: all of its tokens are what a
lost rotation-state Secret is rebuilt from, and those of its entries some counted pod serves are never dropped
for the cap on retiring tokens (`pinned`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcpg_operator import bus, objects, observed, render, rotation, serving, statuses, tokens
from mcpg_operator.settings import GatewayDefaults

States = dict[str, rotation.TokenState]
"""WebhookToken name -> its rotation state."""
ByEntry = Mapping[str, frozenset[str]]
"""Resource name -> the webhook tokens a configuration accepts for it."""


Config = dict[str, Any] | None
"""The configuration Secret as read, parsed (`read_config`); None before the operator first wrote it."""


def read_config(snap: observed.Snapshot) -> Config:
    """The configuration Secret's text as read, parsed once for the pass."""
    found = snap.config
    return render.parse_config(found.text) if found is not None else None


def pods_may_accept(snap: observed.Snapshot, config: Config) -> ByEntry:
    """The tokens of the configuration Secret as read: nothing a pod serves is newer. Before the operator first
    wrote it (a namespace an older operator rendered), those of the configuration its Deployment's template names."""
    config = config if snap.config is not None else render.parse_config(_legacy_text(snap))
    return render.tokens_by_entry(config) if config is not None else {}


def _legacy_text(snap: observed.Snapshot) -> str | None:
    name = snap.deployment.config_secret if snap.deployment is not None else None
    legacy = snap.secret(name) if name and name != objects.CONFIG_SECRET else None
    return legacy.data.get(objects.CONFIG_KEY) if legacy is not None else None


def may_accept(snap: observed.Snapshot, webhook_token: str, by_entry: ByEntry) -> frozenset[str]:
    """The tokens the configuration Secret as read accepts for the watches that use `webhook_token`."""
    names = {entry_name(rw) for rw in snap.watches if token_ref(rw) == webhook_token}
    return frozenset(t for name in names for t in by_entry.get(name, ()))


def pinned(snap: observed.Snapshot, webhook_token: str, config: Config) -> frozenset[str]:
    """The tokens of the configuration Secret as read whose entry some counted pod serves (by its digest), for
    the watches that use `webhook_token`: a pod accepts those now."""
    if config is None:
        return frozenset()
    served = frozenset(e for p in snap.counted() for e in p.entries)
    digests = render.entry_digests(config)
    by_entry = {name: tokens for name, tokens in render.tokens_by_entry(config).items() if digests[name] in served}
    return may_accept(snap, webhook_token, by_entry)


def entry_name(rw: observed.Watch) -> str:
    return str(rw.spec.get("name") or rw.name)


def token_ref(rw: observed.Watch) -> str | None:
    ref = ((rw.spec.get("watch") or {}).get("webhook") or {}).get("tokenRef") or {}
    name = ref.get("name")
    return str(name) if name else None


def recovered(t: observed.Token, src: tokens.Source, accepted: frozenset[str], now: float) -> rotation.TokenState:
    """The state to rotate from. A lost state Secret (while the configuration carries this token's values,
    `accepted`) is rebuilt: whatever a pod may accept is kept retiring until every pod acknowledges the current
    value. Losing the record of a rotation must not refuse a sender holding the replaced token."""
    if t.state_saved or not accepted or not src.secret_value:
        return t.state
    keep = sorted(accepted - {src.secret_value})
    return rotation.TokenState(current=src.secret_value, retiring=tuple(rotation.Retiring(x, now) for x in keep))


def rotate(
    snap: observed.Snapshot,
    sources: Mapping[str, tokens.Source],
    promoted: States,
    defaults: GatewayDefaults,
    now: float,
    wiring: bus.Wiring | None,
    config: Config,
) -> tuple[States, render.Plan]:
    """Render, record what the pods acknowledge, forget what they all dropped, retire what is due, and render again
    if anything was retired: the configuration rendered last is the one written. `config`: as read."""
    plan = render.plan(snap.watches, promoted, snap.secret_data(), defaults, wiring)
    pods = serving.Pods(snap.counted(), plan.digest)
    dropped = _dropped(snap, pods, config)
    states = {}
    for name, state in promoted.items():
        carrying = entries_carrying(plan, state.current)
        if carrying:
            state = rotation.observe_acknowledgement(state, pods.serve(carrying), now)
        else:
            state = rotation.release(state, now)  # no pod can accept it: replaced ones wait for no pod
        state = rotation.forget_dropped(state, dropped)
        states[name] = rotation.retire_due(state, sources[name].grace_s, now)
    if any(states[name].tokens() != promoted[name].tokens() for name in states):
        plan = render.plan(snap.watches, states, snap.secret_data(), defaults, wiring)
    return states, plan


def entries_carrying(plan: render.Plan, token: str | None) -> list[str]:
    """The entry digests of the rendered entries that accept `token`: what every pod must serve to accept it."""
    if token is None:
        return []
    digests = render.entry_digests(plan.config)
    return [digests[name] for name, accepted in render.tokens_by_entry(plan.config).items() if token in accepted]


def _dropped(snap: observed.Snapshot, pods: serving.Pods, config: Config) -> Callable[[str], bool]:
    """Whether no pod accepts a token any more: the configuration Secret as read is without it, and every counted
    pod serves only entries of that configuration (or no pod runs at all)."""
    if config is None or (snap.pods and not pods.only(render.entry_digests(config).values())):
        return lambda _: False
    kept = render.rendered_tokens(config)
    return lambda token: token not in kept


def view(
    snap: observed.Snapshot,
    webhook_token: str,
    state: rotation.TokenState,
    plan: render.Plan,
    pods: serving.Pods,
    refused: str | None,
    now: float,
) -> statuses.TokenView:
    """What a WebhookToken's status reports besides its own state: is its current token accepted, by how many
    pods, and who is late or refused the configuration carrying it."""
    users = [rw for rw in snap.watches if token_ref(rw) == webhook_token]
    carrying = entries_carrying(plan, state.current)
    why = "; ".join(f"ResourceWatch {rw.name}: {plan.verdicts[rw.name].reason}" for rw in users)
    unused = f"no ResourceWatch the gateway serves uses this token ({why or 'none refers to it'})"
    return statuses.TokenView(
        accepted=bool(carrying) and state.current_accepted_at is not None,
        carried=bool(carrying),
        not_carried_message=unused,
        rollout_stalled=snap.deployment.stalled if snap.deployment is not None else None,
        acknowledged=pods.serving(carrying) if carrying else 0,
        counted=len(pods.counted),
        late=pods.late(pods.without(carrying), now) if carrying else "",
        refused=refused,
    )


def next_check(states: States, sources: Mapping[str, tokens.Source], now: float) -> float | None:
    """How soon a grace period ends, if one is running."""
    due = [rotation.next_retirement(state, sources[name].grace_s) for name, state in states.items()]
    waits = [max(0.0, at - now) for at in due if at is not None]
    return min(waits) if waits else None


def refusals(plan: render.Plan, pods: serving.Pods) -> dict[str | None, list[str]]:
    """What counted pods refused of this pass's configuration, by the watch whose entry each problem is in (None:
    a problem in no entry, which concerns every object of the namespace)."""
    out: dict[str | None, list[str]] = {}
    for pod, refusal in pods.refusals():
        for problem in refusal.problems:
            out.setdefault(plan.watch_at(problem.path), []).append(f"{pod}: {problem.path}: {problem.message}")
    return out


def refused_message(found: Sequence[str]) -> str | None:
    """A ConfigRefused condition's message from the problems that concern one object; None if none does."""
    if not found:
        return None
    return "a gateway pod refused the configuration (it keeps serving the one before): " + "; ".join(found)


def users_refused(snap: observed.Snapshot, webhook_token: str, found: Mapping[str | None, list[str]]) -> str | None:
    """The refusal that concerns a WebhookToken: of every object, or of a watch that uses it."""
    names = [rw.name for rw in snap.watches if token_ref(rw) == webhook_token]
    return refused_message([*found.get(None, []), *(x for name in names for x in found.get(name, []))])
