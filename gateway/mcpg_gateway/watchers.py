"""Watchers: one per subscribed concrete URI, alive exactly while something is subscribed to it.

The first subscriber starts the watcher and waits for its `start` (the baseline); later subscribers join it
and wait on the same start; the last one leaving stops it. On a bus (`gateway.bus`), a pull strategy's run is
the owned loop (`ownership.py`) instead of its own. A fire offers the URI to the outbox (never blocking)
of every subscriber the audience hook (the watch's notification_filter) admits, so one slow or dead subscriber
cannot delay the others, and a subscriber the filter excludes is never told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from mcpg_gateway import audit, backoff, catalog
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base
from mcpg_gateway.subscribers import Subscriber

logger = logging.getLogger(__name__)

StrategyBuilder = Callable[[catalog.Binding, base.ReadStats], base.WatchStrategy]
OwnedRunner = Callable[[str, str, base.PullStrategy, base.Fire], Awaitable[None]]
"""Runs a pull strategy for every gateway on a bus, while this one owns it (`ownership.Owners.run`):
`(uri, strategy_type, pull, fire_here)`."""
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

    @property
    def uri(self) -> str:
        return self.binding.uri


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
    ) -> None:
        self._build = build
        self._owned = owned
        self._audience = audience
        self._metrics = metrics
        self._clock = clock or base.RealClock()
        self._watchers: dict[str, Watcher] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def watchers(self) -> list[Watcher]:
        return list(self._watchers.values())

    def get(self, uri: str) -> Watcher | None:
        return self._watchers.get(uri)

    async def subscribe(self, binding: catalog.Binding, sub: Subscriber) -> None:
        """Join (or start) the watcher of `binding.uri`. Raises `StrategyError` if it cannot start."""
        if binding.uri in sub.uris:
            return
        watcher = self._watchers.get(binding.uri) or self._start(binding)
        watcher.subscribers.add(sub)
        sub.uris.add(binding.uri)
        try:
            await asyncio.shield(watcher.started)
        except BaseException:
            self._leave(watcher, sub)
            raise

    def unsubscribe(self, uri: str, sub: Subscriber) -> None:
        watcher = self._watchers.get(uri)
        sub.uris.discard(uri)
        if watcher is not None:
            self._leave(watcher, sub)

    def drop(self, sub: Subscriber) -> None:
        """Implicit unsubscribe from everything: the session or stream is gone."""
        for uri in list(sub.uris):
            self.unsubscribe(uri, sub)

    async def fire(self, uri: str, strategy: str) -> int:
        """Tell each subscriber of `uri` the audience admits, once. Returns how many were offered the URI."""
        watcher = self._watchers.get(uri)
        subs = list(watcher.subscribers) if watcher is not None else []
        told = subs
        if watcher is not None:
            watcher.last_fired = time.time()
            told = [s for s in subs if self._audience(watcher.binding, s)]
        offered = sum(1 for s in told if s.outbox.offer(uri, strategy))
        self._metrics.fired.labels(strategy).inc()
        if len(told) < len(subs):
            self._metrics.notifications_filtered.labels(strategy).inc(len(subs) - len(told))
        audit.watch_fired(uri, strategy, len(subs))
        return offered

    async def close(self) -> None:
        for watcher in list(self._watchers.values()):
            self._stop(watcher)
        self._watchers.clear()
        await self._wait_stopped()

    async def _wait_stopped(self) -> None:
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    def _start(self, binding: catalog.Binding) -> Watcher:
        kind = strategy_type(binding)
        stats = base.ReadStats(on_failure=self._metrics.poll_failures.labels(kind).inc)
        loop = asyncio.get_running_loop()
        watcher = Watcher(binding, kind, self._build(binding, stats), stats, loop.create_future())
        # Every waiter may be cancelled before reading the outcome; never let it be reported as unretrieved.
        watcher.started.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        watcher.task = asyncio.create_task(self._run(watcher), name=f"watch {binding.uri}")
        self._watchers[binding.uri] = watcher
        self._metrics.active_watchers.set(len(self._watchers))
        return watcher

    def _leave(self, watcher: Watcher, sub: Subscriber) -> None:
        watcher.subscribers.discard(sub)
        sub.uris.discard(watcher.uri)
        if not watcher.subscribers and self._watchers.get(watcher.uri) is watcher:
            del self._watchers[watcher.uri]
            self._metrics.active_watchers.set(len(self._watchers))
            self._stop(watcher)

    def _stop(self, watcher: Watcher) -> None:
        if watcher.task is not None and not watcher.task.done():
            watcher.task.cancel()
            self._stopping.add(watcher.task)
            watcher.task.add_done_callback(self._stopping.discard)

    async def _run(self, watcher: Watcher) -> None:
        try:
            if await self._start_strategy(watcher):
                await self._supervise(watcher)
        finally:
            with contextlib.suppress(Exception):
                await watcher.strategy.close()

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
            if self._watchers.get(watcher.uri) is watcher:
                del self._watchers[watcher.uri]
                self._metrics.active_watchers.set(len(self._watchers))
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
            except Exception:  # isolation boundary: one crashing watch must not stop the others
                logger.exception("watch %s (%s) crashed; restarting", watcher.uri, watcher.strategy_type)
                self._metrics.strategy_restarts.labels(watcher.strategy_type).inc()
                await self._clock.sleep(backoff.delay_s(attempt))

    async def _run_strategy(self, watcher: Watcher, fire: base.Fire) -> None:
        # On a bus, a pull strategy runs where its lease is; fires of every other kind are this process's own.
        pull = base.as_pull(watcher.strategy) if self._owned is not None else None
        if self._owned is None or pull is None:
            await watcher.strategy.run(fire)
        else:
            await self._owned(watcher.uri, watcher.strategy_type, pull, fire)


def build_with(
    build: base.StrategyFactory,
    read: Callable[[catalog.Binding], Awaitable[bytes]],
    clock: base.Clock,
    shared: Mapping[str, base.SharedClient] | None = None,
) -> StrategyBuilder:
    """A `StrategyBuilder`: each watch gets its binding's reader, the clock, and its type's shared client."""

    def builder(binding: catalog.Binding, stats: base.ReadStats) -> base.WatchStrategy:
        assert binding.watch is not None, "only watched bindings get a watcher"
        spec = binding.watch.strategy
        ctx = base.WatchContext(binding, lambda: read(binding), stats, clock, (shared or {}).get(spec.type))
        return build(spec, ctx)

    return builder
