"""Steps 2 to 5 of `decide`, for the tokens: each WebhookToken's state from its Secret and the pods' acknowledgements.

Pure. A token is accepted once at least one gateway pod counts and every counted pod serves, for every watch that
uses it, the entry the operator rendered for it (which carries it): `rotation.observe_acknowledgement` records
that moment, once. A replaced token retires once its replacement has been accepted for the grace period, and is
forgotten once every counted pod serves a configuration without it. What pods may still accept is read from the
configuration Secret, which every pod applies and none serves anything newer than: all of its tokens are what a
lost rotation-state Secret is rebuilt from, and those of its entries some counted pod serves are never dropped
for the cap on retiring tokens (`pinned`).

A signing secret is a token in all of this, in its own role (`tokens.Role`): a watch uses a WebhookToken through
`tokenRef` (the entry's tokens) or `signature.secretRef` (the entry's signing secrets), and each WebhookToken is
judged only by the values of its own role, so a lost state is never rebuilt from the other role's values.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcpg_operator import bus, objects, observed, render, rotation, serving, spec_paths, statuses, tokens
from mcpg_operator import conditions as c
from mcpg_operator.settings import GatewayDefaults
from mcpg_operator.tokens import Role

States = dict[str, rotation.TokenState]
"""WebhookToken name -> its rotation state."""
ByEntry = Mapping[str, frozenset[str]]
"""Resource name -> the webhook tokens (or, in role signature, the signing secrets) a configuration accepts for it."""
ByRole = Mapping[Role, ByEntry]


Config = dict[str, Any] | None
"""The configuration Secret as read, parsed (`read_config`); None before the operator first wrote it."""


def read_config(snap: observed.Snapshot) -> Config:
    """The configuration Secret's text as read, parsed once for the pass."""
    found = snap.config
    return render.parse_config(found.text) if found is not None else None


def pods_may_accept(snap: observed.Snapshot, config: Config) -> ByRole:
    """The tokens and signing secrets of the configuration Secret as read: nothing a pod serves is newer. Before the
    operator first wrote it (a namespace an older operator rendered), those of the configuration its Deployment's
    template names."""
    config = config if snap.config is not None else render.parse_config(_legacy_text(snap))
    return {role: render.values_by_entry(config, role) for role in tokens.ROLES} if config is not None else {}


def _legacy_text(snap: observed.Snapshot) -> str | None:
    name = snap.deployment.config_secret if snap.deployment is not None else None
    legacy = snap.secret(name) if name and name != objects.CONFIG_SECRET else None
    return legacy.data.get(objects.CONFIG_KEY) if legacy is not None else None


def may_accept(snap: observed.Snapshot, webhook_token: str, role: Role, by_role: ByRole) -> frozenset[str]:
    """The values of `role` the configuration Secret as read accepts for the watches that use `webhook_token` in
    that role."""
    names = {entry_name(rw) for rw in users(snap, webhook_token, role)}
    by_entry = by_role.get(role, {})
    return frozenset(t for name in names for t in by_entry.get(name, ()))


def pinned(snap: observed.Snapshot, webhook_token: str, role: Role, config: Config) -> frozenset[str]:
    """The values of `role` of the configuration Secret as read whose entry some counted pod serves (by its
    digest), for the watches that use `webhook_token` in that role: a pod accepts those now."""
    if config is None:
        return frozenset()
    served = frozenset(e for p in snap.counted() for e in p.entries)
    digests = render.entry_digests(config)
    by_entry = {name: vs for name, vs in render.values_by_entry(config, role).items() if digests[name] in served}
    return may_accept(snap, webhook_token, role, {role: by_entry})


def entry_name(rw: observed.Watch) -> str:
    return str(rw.spec.get("name") or rw.name)


def ref(rw: observed.Watch, role: Role) -> str | None:
    """The WebhookToken a watch uses in `role`: its webhook's `tokenRef`, or its `signature.secretRef`."""
    webhook = (rw.spec.get("watch") or {}).get("webhook") or {}
    named = webhook.get("tokenRef") if role == "token" else (webhook.get("signature") or {}).get("secretRef")
    name = (named or {}).get("name")
    return str(name) if name else None


def users(snap: observed.Snapshot, webhook_token: str, role: Role) -> list[observed.Watch]:
    """The watches that use `webhook_token` in `role`."""
    return [rw for rw in snap.watches if ref(rw, role) == webhook_token]


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
    schemes = {name: src.scheme for name, src in sources.items() if src.scheme is not None}
    plan = render.plan(snap.watches, promoted, snap.secret_data(), defaults, wiring, schemes)
    pods = serving.Pods(snap.counted(), plan.digest)
    dropped = _dropped(snap, pods, config)
    states = {}
    for name, state in promoted.items():
        role = sources[name].role
        carrying = entries_carrying(plan, state.current, role)
        if carrying:
            state = rotation.observe_acknowledgement(state, pods.serve(carrying), now)
        else:
            state = rotation.release(state, now)  # no pod can accept it: replaced ones wait for no pod
        state = rotation.forget_dropped(state, functools.partial(dropped, role))
        states[name] = rotation.retire_due(state, sources[name].grace_s, now)
    if any(states[name].tokens() != promoted[name].tokens() for name in states):
        plan = render.plan(snap.watches, states, snap.secret_data(), defaults, wiring, schemes)
    return states, plan


def entries_carrying(plan: render.Plan, value: str | None, role: Role) -> list[str]:
    """The entry digests of the rendered entries that accept `value` in `role`: what every pod must serve to
    accept it."""
    if value is None:
        return []
    digests = render.entry_digests(plan.config)
    by_entry = render.values_by_entry(plan.config, role)
    return [digests[name] for name, accepted in by_entry.items() if value in accepted]


def _dropped(snap: observed.Snapshot, pods: serving.Pods, config: Config) -> Callable[[Role, str], bool]:
    """Whether no pod accepts a value in a role any more: the configuration Secret as read is without it there, and
    every counted pod serves only entries of that configuration (or no pod runs at all)."""
    if config is None or (snap.pods and not pods.only(render.entry_digests(config).values())):
        return lambda _role, _value: False
    kept = {role: render.rendered_values(config, role) for role in tokens.ROLES}
    return lambda role, value: value not in kept[role]


def view(
    snap: observed.Snapshot,
    webhook_token: str,
    src: tokens.Source,
    state: rotation.TokenState,
    plan: render.Plan,
    pods: serving.Pods,
    refused: serving.Refused | None,
    now: float,
) -> statuses.TokenView:
    """What a WebhookToken's status reports besides its own state: is its current token accepted, by how many
    pods, and who is late or refused the configuration carrying it."""
    carrying = entries_carrying(plan, state.current, src.role)
    why = [(rw.name, plan.verdicts[rw.name].reason) for rw in users(snap, webhook_token, src.role)]
    return statuses.TokenView(
        accepted=bool(carrying) and state.current_accepted_at is not None,
        carried=bool(carrying),
        not_carried_message=_unused(src.noun, why),
        not_carried_detail=_unused_detail(src.noun, why),
        rollout_stalled=snap.deployment.stalled if snap.deployment is not None else None,
        acknowledged=pods.serving(carrying) if carrying else 0,
        counted=len(pods.counted),
        late=pods.late(pods.without(carrying), now) if carrying else None,
        refused=refused,
    )


def _unused(noun: str, why: Sequence[tuple[str, str]]) -> str:
    """Why no served watch uses a token: the first watch that refers to it, and its Ready reason."""
    if not why:
        return f"no ResourceWatch refers to this {noun}: name it in a webhook watch's tokenRef or signature"
    (name, reason), more = why[0], f" (+{len(why) - 1} more, see Events)" if len(why) > 1 else ""
    return c.fit(f"no served ResourceWatch uses this {noun}: {{name}} is {reason}{more}", name=name)


def _unused_detail(noun: str, why: Sequence[tuple[str, str]]) -> str:
    named = "; ".join(f"ResourceWatch {name}: {reason}" for name, reason in why)
    return f"no ResourceWatch the gateway serves uses this {noun} ({named or 'none refers to it'})"


def next_check(states: States, sources: Mapping[str, tokens.Source], now: float) -> float | None:
    """How soon a grace period ends, if one is running."""
    due = [rotation.next_retirement(state, sources[name].grace_s) for name, state in states.items()]
    waits = [max(0.0, at - now) for at in due if at is not None]
    return min(waits) if waits else None


def refusals(plan: render.Plan, pods: serving.Pods) -> dict[str | None, list[tuple[str, str]]]:
    """What counted pods refused of this pass's configuration, by the watch whose entry each problem is in (None:
    a problem in no entry, which concerns every object of the namespace): (pod, the problem in the user's words)."""
    out: dict[str | None, list[tuple[str, str]]] = {}
    for pod, refusal in pods.refusals():
        for problem in refusal.problems:
            watch = plan.watch_at(problem.path)
            said = spec_paths.in_user_words(problem.path, problem.message, _strategy(plan, watch))
            out.setdefault(watch, []).append((pod, said))
    return out


def _strategy(plan: render.Plan, watch: str | None) -> str | None:
    """The strategy of the watch that owns an entry (as `render.Verdict` says it), None when no watch does."""
    if watch is None:
        return None
    verdict = plan.verdicts.get(watch)
    return (verdict.strategy if verdict is not None else None) or "poll"


def refused_message(found: Sequence[tuple[str, str]]) -> serving.Refused | None:
    """A ConfigRefused condition's problems, of those that concern one object; None if none does."""
    return serving.Refused(tuple(found)) if found else None


def users_refused(
    snap: observed.Snapshot, webhook_token: str, role: Role, found: Mapping[str | None, list[tuple[str, str]]]
) -> serving.Refused | None:
    """The refusal that concerns a WebhookToken: of every object, or of a watch that uses it (in `role`)."""
    names = [rw.name for rw in users(snap, webhook_token, role)]
    return refused_message([*found.get(None, []), *(x for name in names for x in found.get(name, []))])
