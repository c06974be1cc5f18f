"""Which Secrets a namespace's pass needs, and the one label that lets the operator watch only those. Pure.

Secret data is the most sensitive thing a namespace holds, and most of it is none of the operator's business, so
the operator neither streams nor lists a namespace's Secrets wholesale. The read phase lists the operator's own
(`OWN_SELECTOR`) and GETs by name those the namespace's objects name (`referenced`). The Secret watch selects,
on the API server, the label `LABEL` (a selector cannot OR): the operator's inputs carry it from their creation,
and a Secret a WebhookToken or ResourceWatch names gets it from the first pass that reads it (`writes`: a merge
patch of the label alone, never of the data). A named Secret that does not exist yet cannot be labelled, so its
creation is unseen: the pass asks to look again (`recheck_s`) after 1, 2, 4, 8, 16 s, then leaves it to the resync.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from mcpg_operator import actions as w
from mcpg_operator import bus, models, objects, observed, render, tokens

LABEL = objects.WATCHED_LABEL
SELECTOR = f"{LABEL}=true"
"""The operator's Secret watch: every Secret whose change must start a pass carries it, and nothing else needs to."""
_MANAGED_BY = "app.kubernetes.io/managed-by"
OWN_SELECTOR = f"{_MANAGED_BY}={objects.MANAGED[_MANAGED_BY]},app.kubernetes.io/name!={bus.NAME}"
"""The operator's own Secrets of a gateway namespace: configurations, rotation states, bus credentials (not the
managed bus's, which only the bus step reads). Selected by what they carried before `LABEL` existed."""
GATEWAY_SECRETS = (render.AUTH_SECRET, bus.CREDENTIALS_SECRET)
"""Named by the gateway itself, in any namespace with a ResourceWatch: the clients' auth, the bus credentials."""
MIN_RECHECK_S, MAX_WAITING_S = 1.0, 30.0
"""A missing Secret is looked for again after as long as its object has waited (at least 1 s), for 30 s; then
the resync (`MCPG_RESYNC_SECONDS`, 30 s by default) takes over, so a Secret that never comes costs five passes."""


def referenced(watch_specs: Iterable[Mapping[str, Any]], token_specs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every Secret the namespace's ResourceWatches and WebhookTokens name (specs as written), sorted.

    An invalid spec names nothing: it is refused before any Secret would be resolved for it.
    """
    watches = list(watch_specs)
    names = {name for spec in token_specs if (name := _token_secret(spec)) is not None}
    names.update(name for spec in watches for name in _watch_secrets(spec))
    if watches:
        names.update(GATEWAY_SECRETS)
    return sorted(names)


def writes(snap: observed.Snapshot) -> list[w.Write]:
    """The label patches that let the watch see every Secret this namespace's pass needs, where it is missing.

    The configuration Secret is not watched: it is the operator's output, and read on every pass. Nor
    is `mcpg-gateway-bus` labelled here: the bus decides what that name holds (`bus.credentials_secret`), and a
    tenant's Secret of that name is left alone while no bus uses it.
    With the gateway's writes, after those decided before them: behind none of the collection (the Service is
    applied there, and one the API server refuses must not keep the namespace's Secrets unwatched).
    """
    needed = set(referenced((rw.spec for rw in snap.watches), (t.spec for t in snap.tokens)))
    needed.update(tokens.state_secret_name(t.name) for t in snap.tokens)
    needed.discard(bus.CREDENTIALS_SECRET)
    patch = {"metadata": {"labels": {LABEL: "true"}}}
    return [
        w.MergePatch(w.Stage.GATEWAY, w.Ref("secrets", s.name), patch)
        for s in snap.secrets
        if s.name in needed and s.labels.get(LABEL) != "true"
    ]


def recheck_s(snap: observed.Snapshot, now: float) -> float | None:
    """How soon to look again for a named Secret that does not exist yet; None when none is awaited (or the
    objects awaiting one have waited 30 s). As long as the youngest of them has waited, so the checks double."""
    waits = [now - _since(status, now) for status in _waiting(snap)]
    young = [wait for wait in waits if 0 <= wait < MAX_WAITING_S]
    return max(MIN_RECHECK_S, min(young)) if young else None


def _waiting(snap: observed.Snapshot) -> list[dict[str, Any]]:
    """The statuses of the objects waiting for a Secret that does not exist (a generated one is the operator's)."""
    out = [t.status for t in snap.tokens if _awaits_token_secret(snap, t.spec)]
    for rw in snap.watches:
        names = [*_watch_secrets(rw.spec), render.AUTH_SECRET]
        if any(snap.secret(name) is None for name in names):
            out.append(rw.status)
    return out


def _awaits_token_secret(snap: observed.Snapshot, spec: Mapping[str, Any]) -> bool:
    parsed = _token_spec(spec)
    return parsed is not None and not parsed.generate and snap.secret(parsed.secret_ref.name) is None


def _since(status: Mapping[str, Any], now: float) -> float:
    """When the object's conditions last moved (the operator writes them, by its clock); `now` if it has none
    yet. An unreadable time counts as long ago: no recheck rather than one every second."""
    times = [c.get("lastTransitionTime") for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    if not times:
        return now
    return max(_parsed(t) for t in times)


def _parsed(text: object) -> float:
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return 0.0


def _token_secret(spec: Mapping[str, Any]) -> str | None:
    parsed = _token_spec(spec)
    return parsed.secret_ref.name if parsed is not None else None


def _token_spec(spec: Mapping[str, Any]) -> models.WebhookTokenSpec | None:
    try:
        return models.WebhookTokenSpec.model_validate(spec)
    except ValidationError:
        return None


def _watch_secrets(spec: Mapping[str, Any]) -> list[str]:
    """The Secrets a ResourceWatch's spec names: its headers' values and its strategy's server URL."""
    try:
        parsed = models.ResourceWatchSpec.model_validate(spec)
    except ValidationError:
        return []
    refs = [h.secret_key_ref for h in parsed.backend.http.headers]
    watch = parsed.watch or models.WatchSpec()
    if watch.nats_topic is not None and watch.nats_topic.url_secret_ref is not None:
        refs.append(watch.nats_topic.url_secret_ref)
    if watch.postgres_listen_notify is not None:
        refs.append(watch.postgres_listen_notify.url_secret_ref)
    if watch.sql_polling is not None:
        refs.append(watch.sql_polling.url_secret_ref)
    return [ref.name for ref in refs]


def next_check(decided: float | None, snap: observed.Snapshot, now: float) -> float | None:
    """The sooner of the decision's own next check (a grace period ending) and `recheck_s`."""
    waits = [s for s in (decided, recheck_s(snap, now)) if s is not None]
    return min(waits) if waits else None
