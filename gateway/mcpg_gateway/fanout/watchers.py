"""Watchers: one per subscribed concrete URI, alive exactly while something is subscribed to it.

The first subscriber starts the watcher and waits for its `start` (the baseline); later subscribers join it
and wait on the same start; the last one leaving stops it. A pull strategy is run here, at the cadence its
subscribers' leases entitle it to (`lease.py`); on a bus (`gateway.bus`) it is the owned loop
(`ownership.py`) instead, at its own interval, because the owner cannot see the other gateways' sessions.
A fire offers the URI to the outbox (never blocking) of every subscriber the audience hook (the watch's
notification_filter) admits, so one slow or dead subscriber cannot delay the others, and a subscriber the
filter excludes is never told.

The registry also keeps each principal's holdings (`limits.Watches`) in step with its subscriptions, and ends
subscriptions for the reasons in `endings.py`: the upstream answered 401/403/404 (`resource_gone`), the lifetime
ran out (`lifetime_reached`, scheduled by `lifetimes.py`), or the principal's limit needed the room
(`watcher_evicted`). A listen stream is answered as soon as the gateway ends any URI it carries, naming the URIs:
the client listens again for the rest.

A new configuration applied in place (`reconfigure.py`) reaches the registry in two synchronous steps: `rebind`
resolves every running watcher's URI again and keeps, restarts or ends it (`rebinding.py`), and `recheck` puts each
subscriber's principal as now configured in its place and ends what it may no longer read. A restarted watcher
takes its predecessor's subscribers as they are (their leases, lifetimes and outboxes), starts its own strategy
(retrying with backoff while the source is down, rather than dropping them), and fires once if both baselines are
content digests and they differ: a client reading the URI now gets what the new source serves.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpg_gateway import audit, cancellation, catalog, tracing
from mcpg_gateway.contract import config
from mcpg_gateway.errors import WatchGone
from mcpg_gateway.fanout import delivery, frames, lease, lifetimes, limits, rebinding, running, states
from mcpg_gateway.fanout.endings import Ending
from mcpg_gateway.fanout.running import Watcher
from mcpg_gateway.fanout.subscribers import Pending, Subscriber
from mcpg_gateway.identity import Principal
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)

FIRE_SPAN = "mcpg.watch.fire"
Audience = Callable[[catalog.Binding, Subscriber], bool]
"""Whether one subscriber of a fired binding is told. Must not raise: it decides for that subscriber only."""


def tell_everyone(binding: catalog.Binding, sub: Subscriber) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Rebound:
    """What a new configuration did to the running watchers (`WatchRegistry.rebind`)."""

    kept: int = 0
    restarted: int = 0
    removed: int = 0
    """Watchers whose URI is no longer served (or no longer watched): their subscriptions ended."""


PrincipalNow = Callable[[str], Principal | None]
"""A principal as the configuration now has it, by id; None once it has been removed."""
MayRead = Callable[[Principal, catalog.Binding], bool]


class WatchRegistry:
    def __init__(
        self,
        build: running.StrategyBuilder,
        metrics: Metrics,
        clock: base.Clock | None = None,
        audience: Audience = tell_everyone,
        owned: running.OwnedRunner | None = None,
        terms: lease.Terms | None = None,
        limits_cfg: config.LimitsConfig | None = None,
    ) -> None:
        self._owned = owned
        self._audience = audience
        self._metrics = metrics
        self._clock = clock or base.RealClock()
        terms = terms or lease.Terms.from_config(config.SubscriptionsConfig())
        # On a bus the owner reads for every gateway and cannot see the others' sessions: nothing slows there.
        self.terms = terms if owned is None else dataclasses.replace(terms, slows=False)
        self.holdings = limits.Watches(limits_cfg or config.LimitsConfig())
        self._watchers: dict[str, Watcher] = {}
        metrics.sources_down.set_function(self.sources_down)
        self._stopping: cancellation.Stopping[Watcher] = cancellation.Stopping()
        """Watchers asked to stop (their last subscriber left) that have not yet: shown, and waited for in bound."""
        self._lifetimes = lifetimes.Lifetimes(self._clock, self._expire)
        self.states = states.States()
        """Each URI's last fire (`states.py`)."""
        hooks = running.Hooks(self.fire, self._gone, self._failed_to_start, self._started_anew, lambda: self.terms)
        self._runner = running.Runner(build, metrics, self._clock, hooks, owned)

    def watchers(self) -> list[Watcher]:
        return list(self._watchers.values())

    def get(self, uri: str) -> Watcher | None:
        return self._watchers.get(uri)

    # --- admission and subscription --------------------------------------------------------------------

    def admit(self, sub: Subscriber, uris: Iterable[str]) -> None:
        """Admit `sub`'s principal to hold `uris` (evicting its longest-slowed watches if need be), or raise
        `limits.Refusal`. Synchronous: call `subscribe_all` right after it, with no await between."""
        pid = sub.principal_id
        admission = self.holdings.admit(pid, [u for u in uris if u not in sub.uris], self._slowed_since(pid))
        for uri in admission.evict:
            for victim in self._subscribers_of(pid, uri):
                self.end(victim, uri, Ending("watcher_evicted"))

    async def subscribe_all(self, bindings: Iterable[catalog.Binding], sub: Subscriber) -> None:
        """Join every binding's watcher at once, then wait for all their starts (baselines run concurrently).
        All or nothing: if one cannot start, `sub` leaves them all and the first error is raised."""
        joined = [self._attach(b, sub) for b in bindings if b.uri not in sub.uris]
        try:
            await asyncio.gather(*(asyncio.shield(w.started) for w in joined))
        except BaseException:
            for watcher in joined:
                self._detach(watcher.uri, sub)
            raise

    def unsubscribe(self, uri: str, sub: Subscriber) -> None:
        self._detach(uri, sub)

    def drop(self, sub: Subscriber) -> None:
        """Implicit unsubscribe from everything: the session or stream is gone."""
        for uri in list(sub.uris):
            self._detach(uri, sub)

    def end(self, sub: Subscriber, uri: str, ending: Ending) -> None:
        """The gateway ends `sub`'s subscription to `uri`. A listen stream is answered, saying why and which URIs
        ended (all those ended in the same turn: a listen's lifetimes run out together): whatever else it carried
        (other URIs, list changes) ends with it, so no subscription of a stream the client holds ends unheard."""
        if uri not in sub.uris:
            return
        self._detach(uri, sub)
        self._metrics.watch_ends.labels(ending.reason).inc()
        if sub.kind == "listen":
            if sub.ending is None or sub.ending.reason == ending.reason:  # the result gives one reason
                sub.ending = (sub.ending or ending).of(uri)
            sub.outbox.close()

    def _expire(self, sub: Subscriber, uri: str) -> None:
        self.end(sub, uri, Ending("lifetime_reached"))

    def touch(self, sub: Subscriber) -> None:
        """A request on `sub`'s session: its lease is renewed, and a watch it had slowed returns to full speed."""
        now = self._clock.now()
        was_slow = self.terms.is_slow(sub, now)
        sub.last_activity = now
        if was_slow:
            for uri in sub.uris:
                watcher = self._watchers.get(uri)
                if watcher is not None:
                    watcher.quickened.set()

    # --- a new configuration ----------------------------------------------------------------------------

    def use(self, terms: lease.Terms, limits_cfg: config.LimitsConfig) -> None:
        """A new configuration's lease terms and limits, for every decision from now on (a subscription's end
        already scheduled keeps its time)."""
        self.terms = terms if self._owned is None else dataclasses.replace(terms, slows=False)
        self.holdings.use(limits_cfg)

    def rebind(self, resolve: Callable[[str], catalog.Binding | None]) -> Rebound:
        """Resolve every running watcher's URI in the new catalog: keep, restart or end it (`rebinding.fate`)."""
        kept = restarted = removed = 0
        for watcher in list(self._watchers.values()):
            binding = resolve(watcher.uri)
            fate = rebinding.fate(watcher.binding, binding)
            if fate is rebinding.Fate.KEEP and binding is not None:
                watcher.binding = binding
                kept += 1
            elif fate is rebinding.Fate.RESTART and binding is not None:
                self._restart(watcher, binding)
                restarted += 1
            else:
                for sub in list(watcher.subscribers):
                    self.end(sub, watcher.uri, Ending("resource_removed"))
                removed += 1
        return Rebound(kept, restarted, removed)

    def recheck(self, principal_now: PrincipalNow, may_read: MayRead) -> set[str]:
        """Each subscriber's principal as now configured, and its subscriptions authorised again: a removed
        principal's end (`principal_removed`), and so does each URI the read policy now denies (`access_revoked`).
        Returns the ids of the removed principals met."""
        removed: set[str] = set()
        for watcher in list(self._watchers.values()):
            for sub in list(watcher.subscribers):
                if sub.principal is None:
                    continue  # built outside MCP (tests): nobody to authorise
                now = principal_now(sub.principal_id)
                if now is None:
                    removed.add(sub.principal_id)
                    self.end(sub, watcher.uri, Ending("principal_removed"))
                    continue
                sub.principal = now
                if not may_read(now, watcher.binding):
                    self.end(sub, watcher.uri, Ending("access_revoked"))
        return removed

    def watch_meta(self, sub: Subscriber, uri: str) -> dict[str, Any]:
        """The `_meta` of a notification of `uri` to `sub`: its watch's state (`lease.Terms.watch_meta`)."""
        return self.terms.watch_meta(sub, self._clock.now(), self._poll_interval_s(uri))

    def watch_member(self, sub: Subscriber, uri: str) -> bytes:
        """The same, as the encoded `_meta` member a frame carries (`frames.py`)."""
        return self._watch_members(uri)(sub)

    def _watch_members(self, uri: str) -> lease.WatchMembers:
        return lease.WatchMembers(self.terms, self._clock.now(), self._poll_interval_s(uri))

    def _poll_interval_s(self, uri: str) -> float | None:
        watcher = self._watchers.get(uri)
        pull = watcher.pull if watcher is not None else None
        return pull.interval_s if pull is not None else None

    def cadence_s(self, watcher: Watcher) -> float | None:
        """How often `watcher` reads now (None for a push watch)."""
        pull = watcher.pull
        if pull is None:
            return None
        return self.terms.cadence_s(pull.interval_s, watcher.subscribers, self._clock.now())

    async def fire(self, uri: str, strategy: str) -> int:
        """Tell each subscriber of `uri` the audience admits, once. Returns how many were offered the URI."""
        watcher = self._watchers.get(uri)
        attributes = {tracing.STRATEGY: strategy, tracing.URI: uri}
        if watcher is not None:
            attributes[tracing.WATCH] = watcher.binding.entry.name
        with tracing.span(FIRE_SPAN, attributes) as span:
            subs = list(watcher.subscribers) if watcher is not None else []
            told = subs
            if watcher is not None:
                watcher.last_fired = time.time()
                told = [s for s in subs if self._audience(watcher.binding, s)]
            # Each notify span is this one's child, though one written later by its subscriber's task.
            # No trace context when spans are off: the fan-out then asks nothing per subscriber (OpenTelemetry's
            # provider lookup reads the environment on every call).
            trace = tracing.current() if tracing.enabled() else None
            state = self._fired(uri, watcher)
            pending = Pending(uri, strategy, trace, frames.after_meta(uri, state), state=state) if told else None
            offered = 0 if pending is None else delivery.to_each(told, pending, self._watch_members(uri), self._metrics)
            span.set_attributes({tracing.SUBSCRIBERS: len(subs), tracing.NOTIFIED: offered})
            self._metrics.fired.labels(strategy).inc()
            if len(told) < len(subs):
                self._metrics.notifications_filtered.labels(strategy).inc(len(subs) - len(told))
            audit.watch_fired(uri, strategy, len(subs))
            return offered

    # --- each URI's state (`states.py`) -----------------------------------------------------------------

    def state(self, uri: str) -> str:
        """`uri`'s state token now: the content's, for a pull watch read here; else its last fire's."""
        watcher = self._watchers.get(uri)
        if watcher is not None and self._reads_here(watcher):
            pull = watcher.pull
            assert pull is not None, "a watch read here is a pull watch"
            return states.content_token(pull.snapshot())
        return self.states.now(uri)

    def catch_up(self, sub: Subscriber, seen: Mapping[str, str]) -> int:
        """Tell `sub` (joined to every URI of `seen`) of each URI whose state is not the one it last saw; how many."""
        told = 0
        for uri, token in seen.items():
            watcher = self._watchers.get(uri)
            now = self.state(uri)
            if watcher is None or uri not in sub.uris or token == now:
                continue
            pending = Pending(uri, watcher.strategy_type, None, frames.after_meta(uri, now), state=now)
            told += delivery.to_each([sub], pending, self._watch_members(uri), self._metrics)
        return told

    def _fired(self, uri: str, watcher: Watcher | None) -> str:
        """The state a fire of `uri` says: the content's if this process reads it, else a new fire's id."""
        if watcher is not None and self._reads_here(watcher):
            return self.state(uri)
        return self.states.moved(uri)

    def _reads_here(self, watcher: Watcher) -> bool:
        """A pull watch whose reads this process makes (no bus: on one, the owner reads) and has a baseline of."""
        started = watcher.started.done() and not watcher.started.cancelled() and watcher.started.exception() is None
        return self._owned is None and watcher.pull is not None and started

    def _started_anew(self, watcher: Watcher) -> None:
        """A watch started: what its source did while nobody watched is unknown, so its state moved (a webhook's
        deliveries reach `fire` watched or not, and a content token speaks for itself)."""
        if watcher.strategy_type != "webhook" and not self._reads_here(watcher):
            self.states.moved(watcher.uri)

    def stopping(self) -> list[cancellation.Stop[Watcher]]:
        """Watchers asked to stop that are still running (a strategy slow to close, or one abandoned at shutdown)."""
        return self._stopping.now()

    async def close(self) -> None:
        """Stop every watcher, waiting for them at most `cancellation.STOP_TIMEOUT_S`: one that does not stop
        by then (its strategy ignores the cancel) is abandoned and logged by name, and shutdown goes on."""
        others = []
        reaper = self._lifetimes.reaper
        if reaper is not None:
            reaper.cancel()
            others.append(reaper)
        for watcher in list(self._watchers.values()):
            self._stop(watcher)
        self._watchers.clear()
        await self._wait_stopped(others)

    async def _wait_stopped(self, others: list[asyncio.Task[None]]) -> None:
        tasks = [*self._stopping.tasks(), *others]
        await cancellation.stopped(tasks, cancellation.STOP_TIMEOUT_S, "stopping the watches")

    # --- bookkeeping -----------------------------------------------------------------------------------

    def _attach(self, binding: catalog.Binding, sub: Subscriber) -> Watcher:
        watcher = self._watchers.get(binding.uri) or self._start(binding)
        watcher.subscribers.add(sub)
        now = self._clock.now()
        sub.since[binding.uri] = now
        self._lifetimes.held += 1
        self.holdings.add(sub.principal_id, binding.uri)
        self._lifetimes.add(sub, binding.uri, now, self.terms.lifetime_s)
        return watcher

    def _detach(self, uri: str, sub: Subscriber) -> None:
        if uri not in sub.uris:
            return
        del sub.since[uri]
        self._lifetimes.held -= 1
        self.holdings.remove(sub.principal_id, uri)
        watcher = self._watchers.get(uri)
        if watcher is None or sub not in watcher.subscribers:
            return
        watcher.subscribers.discard(sub)
        if not watcher.subscribers:
            self._forget(watcher)
            self._stop(watcher)

    def _forget(self, watcher: Watcher) -> None:
        if self._watchers.get(watcher.uri) is watcher:
            del self._watchers[watcher.uri]
            self._metrics.active_watchers.set(len(self._watchers))

    def _subscribers_of(self, principal_id: str, uri: str) -> list[Subscriber]:
        watcher = self._watchers.get(uri)
        return [s for s in watcher.subscribers if s.principal_id == principal_id] if watcher is not None else []

    def _slowed_since(self, principal_id: str) -> limits.SlowedSince:
        """Since when a principal's watch of a URI has been slowed: every one of its subscribers idle."""

        def since(uri: str) -> float | None:
            subs = self._subscribers_of(principal_id, uri)
            times = [self.terms.slowed_since(s) for s in subs]
            if not times or any(t is None for t in times):
                return None
            latest = max(t for t in times if t is not None)
            return latest if latest <= self._clock.now() else None

        return since

    def sources_down(self) -> int:
        """Running watches whose event-source connection is down now (the `mcpg_watch_sources_down` gauge)."""
        return sum(1 for w in self._watchers.values() if w.stats.connection.down)

    # --- starting and stopping watchers (how each runs is `running.Runner`'s) ---------------------------

    def _start(self, binding: catalog.Binding) -> Watcher:
        watcher = self._runner.new(binding)
        watcher.task = _detached(self._runner.run(watcher), f"watch {binding.uri}")
        self._watchers[binding.uri] = watcher
        self._metrics.active_watchers.set(len(self._watchers))
        return watcher

    def _restart(self, old: Watcher, binding: catalog.Binding) -> None:
        """`old`'s source changed: a new watcher of `binding` takes its subscribers, and `old` stops."""
        new = self._runner.new(binding)
        new.subscribers, old.subscribers = old.subscribers, set()
        before = old.pull.snapshot() if old.pull is not None and old.started.done() else None
        new.task = _detached(self._runner.run_restarted(new, before), f"watch {binding.uri}")
        self._watchers[binding.uri] = new
        self._stop(old)

    def _stop(self, watcher: Watcher) -> None:
        if watcher.task is not None:
            self._stopping.stop(watcher.task, watcher)  # listed until its task has ended

    def _failed_to_start(self, watcher: Watcher) -> None:
        self._forget(watcher)

    def _gone(self, watcher: Watcher, gone: WatchGone) -> None:
        # Forgotten first, so the last subscriber leaving does not cancel this very task.
        logger.info("watch %s (%s) ended: %s", watcher.uri, watcher.strategy_type, gone)
        self._forget(watcher)
        for sub in list(watcher.subscribers):
            self.end(sub, watcher.uri, Ending("resource_gone", gone.status))
        watcher.subscribers.clear()


def _detached(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A watch's task, in a context of its own rather than a copy of the request's that started it: a watch acts
    for no caller (the first subscriber's access token stays out of its reads), its polls are traces of their own
    rather than children of a long-finished request, and the request's context is not held for as long as the
    watch runs (issue 36: a token, a span context and their maps on every watched URI)."""
    return asyncio.create_task(coro, name=name, context=contextvars.Context())
