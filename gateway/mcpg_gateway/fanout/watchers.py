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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway import audit, backoff, cancellation, catalog, liveness, tracing
from mcpg_gateway.contract import config
from mcpg_gateway.errors import StrategyError, WatchGone
from mcpg_gateway.fanout import delivery, frames, lease, lifetimes, limits
from mcpg_gateway.fanout.endings import Ending
from mcpg_gateway.fanout.subscribers import Pending, Subscriber
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)

StrategyBuilder = Callable[[catalog.Binding, base.ReadStats], base.WatchStrategy]
OwnedRunner = Callable[[str, str, base.PullStrategy, base.Fire], Awaitable[None]]
"""Runs a pull strategy for every gateway on a bus, while this one owns it (`ownership.Owners.run`):
`(uri, strategy_type, pull, fire_here)`."""
FIRE_SPAN = "mcpg.watch.fire"
POLL_SPAN = "mcpg.watch.poll"
CLOSE_TIMEOUT_S = 2.0
"""How long a stopping watcher waits for its strategy's `close` (a connection's goodbye) before going on."""
Audience = Callable[[catalog.Binding, Subscriber], bool]
"""Whether one subscriber of a fired binding is told. Must not raise: it decides for that subscriber only."""


def tell_everyone(binding: catalog.Binding, sub: Subscriber) -> bool:
    return True


@dataclass(eq=False)
class Watcher:
    binding: catalog.Binding
    strategy_type: str
    strategy: base.WatchStrategy
    stats: base.ReadStats
    started: asyncio.Future[None]
    subscribers: set[Subscriber] = field(default_factory=set)
    started_at: float = field(default_factory=time.time)
    last_fired: float | None = None
    task: asyncio.Task[None] | None = None
    quickened: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a subscriber's lease is renewed: a slowed poll stops waiting out its slow interval."""

    @property
    def uri(self) -> str:
        return self.binding.uri

    @property
    def pull(self) -> base.PullStrategy | None:
        return base.as_pull(self.strategy)


def strategy_type(binding: catalog.Binding) -> str:
    watch = binding.watch
    return watch.strategy.type if watch is not None else "none"


class WatchRegistry:
    def __init__(
        self,
        build: StrategyBuilder,
        metrics: Metrics,
        clock: base.Clock | None = None,
        audience: Audience = tell_everyone,
        owned: OwnedRunner | None = None,
        terms: lease.Terms | None = None,
        limits_cfg: config.LimitsConfig | None = None,
    ) -> None:
        self._build = build
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
            pending = Pending(uri, strategy, trace, frames.after_meta(uri)) if told else None
            offered = 0 if pending is None else delivery.to_each(told, pending, self._watch_members(uri), self._metrics)
            span.set_attributes({tracing.SUBSCRIBERS: len(subs), tracing.NOTIFIED: offered})
            self._metrics.fired.labels(strategy).inc()
            if len(told) < len(subs):
                self._metrics.notifications_filtered.labels(strategy).inc(len(subs) - len(told))
            audit.watch_fired(uri, strategy, len(subs))
            return offered

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
        sub.uris.add(binding.uri)
        sub.since[binding.uri] = now
        self._lifetimes.held += 1
        self.holdings.add(sub.principal_id, binding.uri)
        self._lifetimes.add(sub, binding.uri, now, self.terms.lifetime_s)
        return watcher

    def _detach(self, uri: str, sub: Subscriber) -> None:
        if uri not in sub.uris:
            return
        sub.uris.discard(uri)
        sub.since.pop(uri, None)
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

    # --- running a watcher -----------------------------------------------------------------------------

    def _start(self, binding: catalog.Binding) -> Watcher:
        kind = strategy_type(binding)
        losses = liveness.Connection(on_loss=lambda cause: self._metrics.source_losses.labels(kind, cause).inc())
        stats = base.ReadStats(on_failure=self._metrics.poll_failures.labels(kind).inc, connection=losses)
        loop = asyncio.get_running_loop()
        watcher = Watcher(binding, kind, self._build(binding, stats), stats, loop.create_future())
        # Every waiter may be cancelled before reading the outcome; never let it be reported as unretrieved.
        watcher.started.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        watcher.task = asyncio.create_task(self._run(watcher), name=f"watch {binding.uri}")
        self._watchers[binding.uri] = watcher
        self._metrics.active_watchers.set(len(self._watchers))
        return watcher

    def _stop(self, watcher: Watcher) -> None:
        if watcher.task is not None:
            self._stopping.stop(watcher.task, watcher)  # listed until its task has ended

    async def _run(self, watcher: Watcher) -> None:
        try:
            # Checked: a baseline read (asyncpg, nats-py, a plugin) may swallow the stop of a watch left at once.
            if await cancellation.checked(self._start_strategy(watcher)):
                await self._supervise(watcher)
        finally:
            with contextlib.suppress(Exception):
                await cancellation.within(watcher.strategy.close(), CLOSE_TIMEOUT_S, f"closing watch {watcher.uri}")

    async def _start_strategy(self, watcher: Watcher) -> bool:
        try:
            await watcher.strategy.start()
        except asyncio.CancelledError:
            watcher.started.cancel()
            raise
        except Exception as e:  # isolation boundary: a strategy that cannot start refuses its subscribers only
            error = e if isinstance(e, StrategyError) else StrategyError(f"{type(e).__name__}")
            logger.warning("watch %s (%s) could not start: %s", watcher.uri, watcher.strategy_type, error)
            watcher.started.set_exception(error)
            self._forget(watcher)
            return False
        watcher.started.set_result(None)
        return True

    async def _supervise(self, watcher: Watcher) -> None:
        async def fire() -> None:
            await self.fire(watcher.uri, watcher.strategy_type)

        for attempt in range(1_000_000):
            try:
                await self._run_strategy(watcher, fire)
                return
            except WatchGone as gone:
                self._gone(watcher, gone)
                return
            except Exception:  # isolation boundary: one crashing watch must not stop the others
                cancellation.reraise()  # an error after a swallowed cancel: the watch was stopping, not crashing
                logger.exception("watch %s (%s) crashed; restarting", watcher.uri, watcher.strategy_type)
                self._metrics.strategy_restarts.labels(watcher.strategy_type).inc()
                await self._clock.sleep(backoff.delay_s(attempt))

    def _gone(self, watcher: Watcher, gone: WatchGone) -> None:
        # Forgotten first, so the last subscriber leaving does not cancel this very task.
        logger.info("watch %s (%s) ended: %s", watcher.uri, watcher.strategy_type, gone)
        self._forget(watcher)
        for sub in list(watcher.subscribers):
            self.end(sub, watcher.uri, Ending("resource_gone", gone.status))
        watcher.subscribers.clear()

    async def _run_strategy(self, watcher: Watcher, fire: base.Fire) -> None:
        # A pull strategy is read here at its subscribers' cadence; on a bus, where its lease is; fires of
        # every other kind are the strategy's own.
        pull = watcher.pull
        if pull is None:
            await watcher.strategy.run(fire)
        elif self._owned is not None:
            await self._owned(watcher.uri, watcher.strategy_type, pull, fire)
        else:
            await self._poll(watcher, pull, fire)

    async def _poll(self, watcher: Watcher, pull: base.PullStrategy, fire: base.Fire) -> None:
        attributes = {
            tracing.STRATEGY: watcher.strategy_type,
            tracing.URI: watcher.uri,
            tracing.WATCH: watcher.binding.entry.name,
        }
        while True:
            await self._wait_cadence(watcher, pull)
            # One trace per poll: its read (the strategy's span), whether it changed, and the fire when it did.
            with tracing.span(POLL_SPAN, attributes) as span:
                changed = await cancellation.checked(pull.check())  # a read may swallow the stop: fire nothing
                span.set_attribute(tracing.CHANGED, changed)
                if changed:
                    await fire()

    async def _wait_cadence(self, watcher: Watcher, pull: base.PullStrategy) -> None:
        """Sleep one interval; a slowed interval is cut short (and restarted at full speed) by a renewal."""
        while True:
            interval = self.terms.cadence_s(pull.interval_s, watcher.subscribers, self._clock.now())
            if interval <= pull.interval_s:
                await self._clock.sleep(interval)
                return
            watcher.quickened.clear()
            if await _first_of(self._clock.sleep(interval), watcher.quickened.wait()):
                return


async def _first_of(wanted: Awaitable[Any], interrupt: Awaitable[Any]) -> bool:
    """Await both until one finishes; cancel the other. True if `wanted` finished first."""
    a, b = asyncio.ensure_future(wanted), asyncio.ensure_future(interrupt)
    try:
        await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (a, b):
            task.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
    return a.done() and not a.cancelled()


def build_with(
    build: base.StrategyFactory,
    read: Callable[[catalog.Binding], Awaitable[bytes]],
    clock: base.Clock,
    shared: Mapping[str, base.SharedClient] | None = None,
    digest: Callable[[catalog.Binding], Awaitable[bytes]] | None = None,
    rules: liveness.Rules | None = None,
) -> StrategyBuilder:
    """A `StrategyBuilder`: each watch gets its binding's reader (and streaming digest, if there is one), the
    clock, its type's shared client and the liveness rules."""
    rules = rules or liveness.Rules()

    def builder(binding: catalog.Binding, stats: base.ReadStats) -> base.WatchStrategy:
        assert binding.watch is not None, "only watched bindings get a watcher"
        spec = binding.watch.strategy
        hashed = None if digest is None else lambda: digest(binding)
        client = (shared or {}).get(spec.type)
        ctx = base.WatchContext(binding, lambda: read(binding), stats, clock, client, hashed, rules)
        return build(spec, ctx)

    return builder
