"""One watcher and how it runs: its strategy started (or, after a new configuration changed its source, started
again until the source answers), supervised (restarted with backoff after a crash, ended when its resource is
gone), and a pull strategy read at the cadence its subscribers' leases entitle it to (`lease.py`); on a bus
(`gateway.bus`) it is the owned loop instead (`ownership.py`), at its own interval, because the owner cannot see
the other gateways' sessions.

The registry (`watchers.py`) decides which watchers exist and who subscribes; the `Runner` is handed what it needs
of it (its fire, and what to do when a watch is gone, fails to start, or starts anew), so neither reaches into the
other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway import backoff, cancellation, catalog, liveness, tracing
from mcpg_gateway.errors import StrategyError, WatchGone
from mcpg_gateway.fanout import lease
from mcpg_gateway.fanout.subscribers import Subscriber
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)

StrategyBuilder = Callable[[catalog.Binding, base.ReadStats], base.WatchStrategy]
OwnedRunner = Callable[[str, str, base.PullStrategy, base.Fire], Awaitable[None]]
"""Runs a pull strategy for every gateway on a bus, while this one owns it (`ownership.Owners.run`):
`(uri, strategy_type, pull, fire_here)`."""
POLL_SPAN = "mcpg.watch.poll"
CLOSE_TIMEOUT_S = 2.0
"""How long a stopping watcher waits for its strategy's `close` (a connection's goodbye) before going on."""


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


@dataclass(frozen=True, slots=True)
class Hooks:
    """What a running watcher tells its registry."""

    fire: Callable[[str, str], Awaitable[int]]
    """Tell `uri`'s subscribers (`uri`, strategy type)."""
    gone: Callable[[Watcher, WatchGone], None]
    """Its resource is gone: end its subscriptions."""
    failed: Callable[[Watcher], None]
    """It could not take its first baseline: its subscribers were refused, forget it."""
    started_anew: Callable[[Watcher], None]
    """It took a baseline."""
    terms: Callable[[], lease.Terms]
    """The lease terms now (a new configuration may change them)."""


class Runner:
    def __init__(
        self, build: StrategyBuilder, metrics: Metrics, clock: base.Clock, hooks: Hooks, owned: OwnedRunner | None
    ) -> None:
        self._build, self._metrics, self._clock, self._hooks, self._owned = build, metrics, clock, hooks, owned

    def new(self, binding: catalog.Binding) -> Watcher:
        """A watcher of `binding`, not started."""
        kind = strategy_type(binding)
        losses = liveness.Connection(on_loss=lambda cause: self._metrics.source_losses.labels(kind, cause).inc())
        stats = base.ReadStats(on_failure=self._metrics.poll_failures.labels(kind).inc, connection=losses)
        return Watcher(binding, kind, self._build(binding, stats), stats, started_future())

    async def run(self, watcher: Watcher) -> None:
        """Start it (a failed start refuses its subscribers), then supervise it until it is stopped."""
        try:
            # Checked: a baseline read (asyncpg, nats-py, a plugin) may swallow the stop of a watch left at once.
            if await cancellation.checked(self._start(watcher)):
                await self._supervise(watcher)
        finally:
            await self._close(watcher)

    async def run_restarted(self, watcher: Watcher, before: str | None) -> None:
        """A restarted watcher: started until its source answers (its subscribers wait, never dropped), then run
        as any other; told once if its baseline says the content is not what the old source served (`before`).

        On a bus the owner tells that, for every gateway at once: it resumes from the state the old source's owner
        stored and checks at once (`ownership.py`), so a gateway that also told its own subscribers here would tell
        each of them twice."""
        try:
            await self._start_until_up(watcher)
            pull = watcher.pull
            if self._owned is None and before is not None and pull is not None and pull.snapshot() != before:
                await self._hooks.fire(watcher.uri, watcher.strategy_type)
            await self._supervise(watcher)
        finally:
            await self._close(watcher)

    async def _close(self, watcher: Watcher) -> None:
        with contextlib.suppress(Exception):
            await cancellation.within(watcher.strategy.close(), CLOSE_TIMEOUT_S, f"closing watch {watcher.uri}")

    async def _start(self, watcher: Watcher) -> bool:
        try:
            await watcher.strategy.start()
        except asyncio.CancelledError:
            watcher.started.cancel()
            raise
        except Exception as e:  # isolation boundary: a strategy that cannot start refuses its subscribers only
            error = e if isinstance(e, StrategyError) else StrategyError(f"{type(e).__name__}")
            logger.warning("watch %s (%s) could not start: %s", watcher.uri, watcher.strategy_type, error)
            watcher.started.set_exception(error)
            self._hooks.failed(watcher)
            return False
        watcher.started.set_result(None)
        self._hooks.started_anew(watcher)
        return True

    async def _start_until_up(self, watcher: Watcher) -> None:
        """Start `watcher`'s strategy, rebuilt and tried again with backoff for as long as it fails. Its first
        failure fails `started` (a client joining meanwhile is refused, as at any failed start); success
        resolves it, anew if it had failed."""
        for attempt in range(1_000_000):
            try:
                await cancellation.checked(watcher.strategy.start())
            except asyncio.CancelledError:
                raise
            except Exception as e:  # isolation boundary: a source down after a swap delays this watch only
                logger.warning("watch %s (%s) could not restart: %s", watcher.uri, watcher.strategy_type, e)
                self._metrics.strategy_restarts.labels(watcher.strategy_type).inc()
                if not watcher.started.done():
                    watcher.started.set_exception(
                        e if isinstance(e, StrategyError) else StrategyError(type(e).__name__)
                    )
                await self._clock.sleep(backoff.delay_s(attempt))
                watcher.strategy = self._build(watcher.binding, watcher.stats)
                continue
            if watcher.started.done():
                watcher.started = started_future()
            watcher.started.set_result(None)
            self._hooks.started_anew(watcher)
            return

    async def _supervise(self, watcher: Watcher) -> None:
        async def fire() -> None:
            await self._hooks.fire(watcher.uri, watcher.strategy_type)

        for attempt in range(1_000_000):
            try:
                await self._run_strategy(watcher, fire)
                return
            except WatchGone as gone:
                self._hooks.gone(watcher, gone)
                return
            except Exception:  # isolation boundary: one crashing watch must not stop the others
                cancellation.reraise()  # an error after a swallowed cancel: the watch was stopping, not crashing
                logger.exception("watch %s (%s) crashed; restarting", watcher.uri, watcher.strategy_type)
                self._metrics.strategy_restarts.labels(watcher.strategy_type).inc()
                await self._clock.sleep(backoff.delay_s(attempt))

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
            interval = self._hooks.terms().cadence_s(pull.interval_s, watcher.subscribers, self._clock.now())
            if interval <= pull.interval_s:
                await self._clock.sleep(interval)
                return
            watcher.quickened.clear()
            if await _first_of(self._clock.sleep(interval), watcher.quickened.wait()):
                return


def started_future() -> asyncio.Future[None]:
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    # Every waiter may be cancelled before reading the outcome; never let it be reported as unretrieved.
    started.add_done_callback(lambda f: None if f.cancelled() else f.exception())
    return started


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
    digester: Callable[[catalog.Binding], Callable[[], Awaitable[bytes]]] | None = None,
    rules: liveness.Rules | None = None,
) -> StrategyBuilder:
    """A `StrategyBuilder`: each watch gets its binding's reader (and streaming digest, if there is one: built
    once per watch, which sends the same request every interval), the clock, its type's shared client and the
    liveness rules."""
    rules = rules or liveness.Rules()

    def builder(binding: catalog.Binding, stats: base.ReadStats) -> base.WatchStrategy:
        assert binding.watch is not None, "only watched bindings get a watcher"
        spec = binding.watch.strategy
        hashed = None if digester is None else digester(binding)
        client = (shared or {}).get(spec.type)
        ctx = base.WatchContext(binding, lambda: read(binding), stats, clock, client, hashed, rules)
        return build(spec, ctx)

    return builder
