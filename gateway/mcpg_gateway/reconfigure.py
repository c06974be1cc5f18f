"""A new configuration applied in place: checked whole, swapped at once, and followed through, with no restart.

An offer (a reload of the file, a new version of the configuration Secret) is parsed and checked whole with the
contract's own check (`Gateway.verify`) before anything changes: a configuration the process refuses leaves the
one it serves in place and is recorded as refused, with every problem (`served.py`, the acknowledgement). One
whose digest is the one served is not applied again, so an equivalent update touches nothing.

Then, in one synchronous step (no await, so every request and every fire sees the old configuration or the new
one): the parts are swapped (`Gateway.swap`); every running watcher is kept, restarted or ended
(`fanout.rebind`); every subscription is authorised again for its principal as now configured (`fanout.recheck`:
a removed principal's subscriptions and listen streams end, and so does each URI a read policy now denies); each
subscriber whose list changed is told (`notifications/resources/list_changed`: every handshake-era session, and
each listen stream that asked for list changes, only when what that principal may list changed); and the record
is written. Open streams and sessions are never touched by the swap itself. Last, the sessions of a removed
principal are ended (as a DELETE would), which is the one step that awaits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Coroutine, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from mcpg_gateway import config_file, config_secret, served
from mcpg_gateway.contract import acknowledgement, config, digests, documents, loading
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_gateway.fanout.watchers import Rebound
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.identity import Principal

logger = logging.getLogger(__name__)

Result = Literal["applied", "unchanged", "refused"]


class Sessions(Protocol):
    """The open handshake-era sessions (`sdk/manager.SessionManager`); none off HTTP."""

    def owners(self) -> dict[str, str]:
        """Session id -> the id of the principal that opened it."""
        ...

    async def end(self, session_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    result: Result
    digest: str
    problems: tuple[Problem, ...] = ()
    rebound: Rebound = field(default_factory=Rebound)
    removed_principals: frozenset[str] = frozenset()
    told_list_changed: int = 0
    """Subscribers told that their list changed: sessions and listen streams."""
    sessions_ended: int = 0
    restart_pending: tuple[str, ...] = ()
    seconds: float = 0.0
    """From the offer to the swap done (the event loop was held that long)."""


class Reconfigurer:
    """Applies the configurations offered to one gateway."""

    def __init__(self, gw: Gateway, sessions: Sessions | None = None) -> None:
        self._gw, self._sessions = gw, sessions
        self._environ = os.environ if gw.options.environ is None else gw.options.environ

    async def offer_text(self, text: str, source: str, resource_version: str | None = None) -> Outcome:
        """A configuration as YAML text; see `offer`."""
        try:
            document = documents.load(text, "configuration")
        except ConfigError as e:
            return self._refused({}, e.problems, resource_version, time.perf_counter())
        return await self.offer(document if isinstance(document, Mapping) else {}, source, resource_version)

    async def offer(self, document: Mapping[str, Any], source: str, resource_version: str | None = None) -> Outcome:
        """Apply `document` unless it is refused or already served; then end a removed principal's sessions."""
        outcome, ending = self.apply(document, source, resource_version)
        if not ending or self._sessions is None:
            return outcome
        for session_id in ending:
            await self._sessions.end(session_id)
        logger.info("configuration %s: %d session(s) of removed principals ended", outcome.digest[:12], len(ending))
        return dataclasses.replace(outcome, sessions_ended=len(ending))

    def apply(
        self, document: Mapping[str, Any], source: str, resource_version: str | None = None
    ) -> tuple[Outcome, list[str]]:
        """The synchronous part: check, swap and follow through; the sessions to end come back to the caller."""
        started = time.perf_counter()
        digest = digests.document(document)
        serving = self._gw.served.serving
        if serving is not None and serving.digest == digest:
            self._gw.served.synced = True
            self._gw.metrics.configurations.labels("unchanged").inc()
            return Outcome("unchanged", digest), []
        try:
            cfg = loading.parse(document, self._environ)
            expressions = self._gw.verify(cfg)
        except ConfigError as e:
            return self._refused(document, e.problems, resource_version, started), []
        return self._swap(document, cfg, expressions, source, resource_version, started)

    def _swap(
        self,
        document: Mapping[str, Any],
        cfg: config.GatewayConfig,
        expressions: Any,
        source: str,
        resource_version: str | None,
        started: float,
    ) -> tuple[Outcome, list[str]]:
        gw = self._gw
        audience = self._audience()
        before = {pid: gw.listing(p) for pid, p in audience.principals(gw).items()}
        gw.swap(cfg, expressions)
        rebound = gw.fanout.rebind(gw.binding)
        removed = gw.fanout.recheck(gw.identity.by_id, gw.may_read)
        removed |= {pid for pid in audience.principal_ids() if gw.identity.by_id(pid) is None}
        told = self._tell_list_changed(audience, before, removed)
        applied = served.Applied.of(document, source, resource_version)
        gw.served.applied(applied)
        gw.served.synced = True
        seconds = time.perf_counter() - started
        self._count(applied, seconds)
        pending = tuple(gw.served.restart_pending)
        outcome = Outcome("applied", applied.digest, (), rebound, frozenset(removed), told, 0, pending, seconds)
        _log_applied(outcome)
        return outcome, [sid for sid, pid in audience.sessions.items() if pid in removed]

    def _refused(
        self, document: Mapping[str, Any], problems: list[Problem], resource_version: str | None, started: float
    ) -> Outcome:
        self._gw.served.refuse(document, problems, resource_version)
        self._gw.served.synced = True  # read, and judged: what it serves is said in the acknowledgement
        self._gw.metrics.configurations.labels("refused").inc()
        digest = digests.document(document)
        logger.warning(
            "configuration %s refused; still serving %s: %s",
            digest[:12],
            _short(self._gw.served.serving),
            "; ".join(str(p) for p in problems[:5]),
        )
        return Outcome("refused", digest, tuple(problems), seconds=time.perf_counter() - started)

    def _audience(self) -> _Audience:
        sessions = self._sessions.owners() if self._sessions is not None else {}
        listens = [s for s in self._gw.fanout.listeners() if s.list_changed and s.principal is not None]
        return _Audience(sessions, {s.id: s.principal_id for s in listens})

    def _tell_list_changed(self, audience: _Audience, before: dict[str, Hashable], removed: set[str]) -> int:
        gw = self._gw
        after: dict[str, Hashable] = {}
        for pid in before:
            principal = gw.identity.by_id(pid)
            if principal is not None and pid not in removed:
                after[pid] = gw.listing(principal)
        changed = {pid for pid, listing in after.items() if listing != before[pid]}
        told = sum(
            1 for sid, pid in audience.sessions.items() if pid in changed and gw.fanout.tell_session_list_changed(sid)
        )
        for sub in gw.fanout.listeners():
            if sub.id in audience.listens and sub.principal_id in changed and gw.fanout.tell_list_changed(sub):
                told += 1
        return told

    def _count(self, applied: served.Applied, seconds: float) -> None:
        metrics = self._gw.metrics
        metrics.configurations.labels("applied").inc()
        metrics.config_applied_at.set(applied.at)
        metrics.config_apply_seconds.set(seconds)
        metrics.config_restart_pending.set(1 if self._gw.served.restart_pending else 0)


def followers(gw: Gateway, reconfigurer: Reconfigurer, hangup: asyncio.Event | None) -> list[Coroutine[Any, Any, None]]:
    """What offers this gateway its new configurations: its Secret through the API (`Options.config_secret`: in a
    cluster, where a mounted file would be a minute late and a newer version must never be overtaken by an older
    file), else its file (`Options.config_file`), read again on SIGHUP and when it changes."""
    options = gw.options
    if options.config_secret is not None:
        follower = config_secret.SecretFollower(
            options.config_secret,
            acknowledgement.CONFIG_KEY,
            lambda text, version: _offered(reconfigurer.offer_text(text, served.SOURCE_SECRET, version)),
            config_secret.ApiAccess.in_cluster(os.environ),
        )
        return [follower.run()]
    if options.config_file is not None:
        path = options.config_file
        return [config_file.FileFollower(path, lambda t: reconfigurer.offer_text(t, served.SOURCE_FILE), hangup).run()]
    return []


async def _offered(offer: Coroutine[Any, Any, Outcome]) -> None:
    try:
        await offer
    except Exception:  # isolation boundary: a fault in applying one version must not stop following the Secret
        logger.exception("applying a configuration failed; the one served stays, and the Secret is still followed")


@dataclass(frozen=True, slots=True)
class _Audience:
    """Who may be told that their list changed: each handshake-era session (by id, with its principal's id) and
    each listen stream that asked for list changes (by subscriber id)."""

    sessions: dict[str, str]
    listens: dict[int, str]

    def principal_ids(self) -> set[str]:
        return set(self.sessions.values()) | set(self.listens.values())

    def principals(self, gw: Gateway) -> dict[str, Principal]:
        """Each of their principals as configured before the swap (one listing each, however many sessions)."""
        out = {}
        for pid in self.principal_ids():
            principal = gw.identity.by_id(pid)
            if principal is not None:
                out[pid] = principal
        return out


def _short(applied: served.Applied | None) -> str:
    return applied.digest[:12] if applied is not None else "nothing"


def _log_applied(outcome: Outcome) -> None:
    r = outcome.rebound
    logger.info(
        "configuration %s applied in %.0f ms: %d watcher(s) kept, %d restarted, %d ended; %d subscriber(s) told "
        "their list changed%s",
        outcome.digest[:12],
        outcome.seconds * 1000,
        r.kept,
        r.restarted,
        r.removed,
        outcome.told_list_changed,
        f"; restart-only fields changed (applied by the next start): {', '.join(outcome.restart_pending)}"
        if outcome.restart_pending
        else "",
    )
