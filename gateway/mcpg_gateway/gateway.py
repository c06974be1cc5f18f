"""The `Gateway`: every moving part wired once from a configuration, behind a narrow API.

Both front doors (the MCP handlers and the webhook route) and the admin API work through this object, so there
is one watch registry, one subscriber set and one place that knows how to read a resource. It verifies the
configuration with the contract's own check (`contract/check.py`) against the plugins this process has, so it
refuses exactly what the operator would have refused before rendering.

With `gateway.bus` set it is one of N gateways serving as one (`bus.py`): a change seen here is announced on the
bus and told to this process's subscribers, a change announced elsewhere is told to them too, and pull
watches run where their lease is (`ownership.py`). Without it, everything stays in this process.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway import (
    bus,
    cancellation,
    catalog,
    identity,
    lease,
    limits,
    liveness,
    ownership,
    peers,
    policy,
    reader,
    strategies,
    streams,
    subscribers,
    watchers,
    webhooks,
)
from mcpg_gateway.contract import check, config
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base, plugin


@dataclass
class Options:
    """Process-level knobs the configuration file does not carry."""

    admin_token: str | None = None
    clock: base.Clock = field(default_factory=base.RealClock)
    plugins: plugin.PluginRegistry | None = None
    """The installed watch-strategy plugins; None loads them from the entry points (tests pass their own)."""
    send_timeout_s: float = 5.0
    """How long one subscriber's stream may take to accept a notification before it is dropped for it."""
    bus_grace_s: float = bus.UNREACHABLE_GRACE_S
    """How long the bus may be unreachable before /readyz answers 503."""
    bus_connect_wait_s: float = bus.STARTUP_WAIT_S
    """How long `start` waits for the bus before serving without it (and trying on)."""


class Gateway:
    def __init__(self, cfg: config.GatewayConfig, options: Options | None = None) -> None:
        self.config = cfg
        self.options = options or Options()
        self.metrics = Metrics()
        plugins = self.options.plugins or plugin.PluginRegistry.load()
        expressions = check.verify(cfg, plugin_kinds=plugins.kinds, unusable_plugins=plugins.broken)
        registry = strategies.Registry([*strategies.BUILTIN, webhooks.STRATEGY, plugins.strategy_type()])
        self.identity = identity.Identity(cfg.gateway.auth)
        self.webhooks = webhooks.build_index(cfg.mcp.capabilities.resources)
        self._catalog = catalog.Catalog(cfg.mcp.capabilities)
        self._policies = policy.Policies(expressions, self.metrics.policy_errors)
        self._reader = reader.HttpReader(self.options.clock, self.metrics, cfg.gateway.limits.upstream_connections)
        self._shared = registry.open_shared(cfg)
        self.liveness = liveness.Rules.from_config(cfg.gateway.liveness)
        build = watchers.build_with(
            registry.build,
            self._read_bytes,
            self.options.clock,
            self._shared,
            digest=self._reader.digest,
            rules=self.liveness,
        )
        self.bus = self._bus(cfg.gateway.bus)
        entries = len(cfg.mcp.capabilities.resources) + len(cfg.mcp.capabilities.resource_templates)
        self.peers = peers.Peers(self.bus.instance, self.liveness, entries) if self.bus is not None else None
        """What the other gateways on the bus say about their event sources (`peers.py`), for /readyz."""
        self._reporter: asyncio.Task[None] | None = None
        self.owners = (
            ownership.Owners(self.bus, self.options.clock, self._gateways_heard) if self.bus is not None else None
        )
        """Which pull watches this gateway reads for all (on a bus)."""
        self._watches = watchers.WatchRegistry(
            build,
            self.metrics,
            self.options.clock,
            self._policies.should_tell,
            owned=self.owners.run if self.owners is not None else None,
            terms=lease.Terms.from_config(cfg.gateway.subscriptions),
            limits_cfg=cfg.gateway.limits,
        )
        self.subscribers = subscribers.Subscribers(
            self.metrics.subscribers, self._watches.drop, limits.Streams(cfg.gateway.limits)
        )
        self.streams = streams.Streams()
        """The SSE streams of /mcp that notifications are written to (`streams.py`, `delivery.py`)."""

    def _bus(self, cfg: config.BusConfig | None) -> bus.Bus | None:
        if cfg is None:
            return None
        instance = bus.instance_name(cfg, os.environ)
        return bus.Bus(cfg, instance, self.metrics.registry, self.options.bus_grace_s, self.liveness)

    async def start(self) -> None:
        """Connect to the bus, if there is one: waits a bounded time, then serves anyway (and keeps trying)."""
        if self.bus is not None:
            self.bus.receiver = self._received
            self.bus.on_connect = self._fire_held
            self.bus.on_sources = self._heard
            await self.bus.start(self.options.bus_connect_wait_s)
            self._reporter = asyncio.get_running_loop().create_task(self._report_sources(), name="mcpg sources")

    def unready_reason(self) -> str | None:
        """Why /readyz should answer 503 now, or None when ready."""
        own = self._unready_here()
        if own is not None:
            return own
        if self.preferred_elsewhere() is not None:
            return "an event source is unreachable from here and reachable from another gateway"
        return None

    def _unready_here(self) -> str | None:
        """Why this gateway is unready apart from the peers' word: what its sources report says as `ready`."""
        if self.subscribers.closing.is_set():
            return "shutting down"
        if self.bus is not None and self.bus.unready():
            return "bus unreachable"
        return None

    def preferred_elsewhere(self) -> peers.Elsewhere | None:
        """A resource whose event source another gateway on the bus reaches and this one has not for a while."""
        return self.peers_decision().elsewhere

    def peers_decision(self) -> peers.Decision:
        """What the other gateways' reports do to /readyz now (`peers.py`): whom to defer to, or why not."""
        if self.peers is None:
            return peers.Decision()
        return self.peers.decide(self._held(), time.time())

    def down_long(self) -> list[str]:
        """Resources whose event source this gateway has not reached for a while (what a peer may be preferred for)."""
        if self.peers is None:
            return []
        return sorted({h.resource for h in self.peers.down_long(self._held(), time.time())})

    def _held(self) -> list[peers.Held]:
        return [peers.Held(w.binding.entry.name, w.stats.connection) for w in self._watches.watchers()]

    def _heard(self, data: bytes, at: float) -> None:
        report = peers.decode(data)
        if report is not None and self.peers is not None:
            self.peers.heard(report, at)

    async def _report_sources(self) -> None:
        assert self.bus is not None, "only a gateway on a bus reports its sources"
        while True:
            ready = self._unready_here() is None
            await self.bus.announce_sources(peers.report(self.bus.instance, self._held(), ready).encode())
            await self.liveness.sleep(self.liveness.interval_s)

    # --- what a caller may see --------------------------------------------------------------------------------

    def readable(self, uri: str, principal: identity.Principal) -> catalog.Binding | None:
        """The binding of `uri` if it exists and `principal`'s read policy allows it; None otherwise (alike)."""
        binding = self._catalog.resolve(uri)
        if binding is None or not self._policies.may_read(principal, binding):
            return None
        return binding

    def resources(self, principal: identity.Principal) -> list[config.ResourceConfig]:
        """The resources `principal` may read: listing the rest would reveal that they exist."""
        return [r for r in self._catalog.resources if self._policies.may_read(principal, catalog.Binding(r.uri, r))]

    def templates(self, principal: identity.Principal) -> list[config.ResourceTemplateConfig]:
        """The templates `principal` could read under: one whose read policy is false for them whatever the URI
        is left out, as a resource they may not read is (`policy.Policies.may_list_template`)."""
        return [t for t in self._catalog.templates if self._policies.may_list_template(principal, t)]

    async def read(self, binding: catalog.Binding) -> reader.Content:
        return await self._reader.read(binding)

    async def _read_bytes(self, binding: catalog.Binding) -> bytes:
        return (await self._reader.read(binding)).body

    # --- watches ---------------------------------------------------------------------------------------------

    def open_subscriber(self, kind: subscribers.Kind, principal: identity.Principal) -> subscribers.Subscriber:
        """A new session subscriber or listen stream; `limits.Refusal` at the listen-stream limits."""
        return self.subscribers.open(kind, principal, self.options.clock.now())

    async def subscribe(self, bindings: list[catalog.Binding], sub: subscribers.Subscriber) -> None:
        """Hold every binding's watch for `sub`, all or nothing: `limits.Refusal` before any upstream read (at
        the limits), `StrategyError` if a watch cannot take its baseline."""
        self._watches.admit(sub, [b.uri for b in bindings])
        await self._watches.subscribe_all(bindings, sub)

    def touch(self, sub: subscribers.Subscriber) -> None:
        """A request on `sub`'s session renews its lease (`lease.py`)."""
        self._watches.touch(sub)

    def watch_meta(self, sub: subscribers.Subscriber, uri: str) -> dict[str, Any]:
        """What a notification of `uri` to `sub` carries in `_meta` about its watch."""
        return self._watches.watch_meta(sub, uri)

    def watch_member(self, sub: subscribers.Subscriber, uri: str) -> bytes:
        """The same, as the encoded `_meta` member a notification's frame carries (`frames.py`)."""
        return self._watches.watch_member(sub, uri)

    def cadence_s(self, watcher: watchers.Watcher) -> float | None:
        """How often `watcher` reads now, its subscribers' leases considered (None for a push watch)."""
        return self._watches.cadence_s(watcher)

    def unsubscribe(self, uri: str, sub: subscribers.Subscriber) -> None:
        self._watches.unsubscribe(uri, sub)

    async def fire(self, uri: str, strategy: str) -> int:
        """Tell this process's subscribers of `uri` it changed (each once, as its filter allows); how many."""
        return await self._watches.fire(uri, strategy)

    async def announce(self, uri: str, strategy: str) -> int:
        """A change seen here (a webhook): published on the bus for the other gateways, then told to ours.
        Raises `BusUnavailableError` (and tells nobody) when the bus cannot take it: the sender should retry."""
        if self.bus is not None:
            await self.bus.publish(uri, strategy)
        return await self._watches.fire(uri, strategy)

    def owner_of(self, uri: str) -> bool | None:
        """Whether this gateway reads `uri` for all (its lease); None without a bus or for a watch that is not pull."""
        watcher = self._watches.get(uri)
        if self.owners is None or watcher is None or base.as_pull(watcher.strategy) is None:
            return None
        return self.owners.owns(uri)

    async def _received(self, uri: str) -> None:
        watcher = self._watches.get(uri)
        if watcher is not None:
            await self._watches.fire(uri, watcher.strategy_type)

    async def _fire_held(self) -> None:
        # Fires published while this process was cut off never reached it: each held URI is told once.
        for watcher in self._watches.watchers():
            await self._watches.fire(watcher.uri, watcher.strategy_type)

    def running_watches(self) -> list[watchers.Watcher]:
        """The watchers running now (one per subscribed URI), for the admin API."""
        return self._watches.watchers()

    def stopping_watches(self) -> list[cancellation.Stop[watchers.Watcher]]:
        """The watchers asked to stop that still run (their last subscriber left), for the admin API."""
        return self._watches.stopping()

    def _gateways_heard(self) -> set[str]:
        """The names of the gateways heard on the bus lately: a lease holder by another name is suspect."""
        return {h.report.instance for h in self.peers.fresh(time.time())} if self.peers is not None else set()

    def watcher(self, uri: str) -> watchers.Watcher | None:
        return self._watches.get(uri)

    def shared_client(self, strategy_type: str) -> base.SharedClient | None:
        """The client the watches of `strategy_type` share (the NATS connections of nats_topic), if it has one."""
        return self._shared.get(strategy_type)

    def http_reader(self) -> reader.HttpReader:
        """The one reader: the admin API shows its upstream pauses (host:port, never credentials)."""
        return self._reader

    async def aclose(self) -> None:
        """Stop everything, each step in bound (`cancellation.py`): what does not finish in time is abandoned
        and logged, and the next step runs, so a shutdown always completes."""
        if self._reporter is not None:
            self._reporter.cancel()
            await cancellation.stopped([self._reporter], cancellation.STEP_TIMEOUT_S, "stopping the sources report")
        self.subscribers.end_listen_streams()
        await self._watches.close()  # releases the leases of owned watches (the bus closes after), in bound
        if self.bus is not None:
            await self.bus.close()  # in bound
        step_s = cancellation.STEP_TIMEOUT_S
        await cancellation.within(strategies.close_shared(self._shared), step_s, "closing the shared clients")
        await cancellation.within(self._reader.close(), step_s, "closing the HTTP reader")
