"""The `Gateway`: every moving part wired once from a configuration, each collaborator given what it needs when built.

Both front doors (the MCP handlers and the webhook route) and the admin API start from this object, so there is
one fan-out (`fanout/`: watches, subscribers, their writers), one reader and one catalog; they call those owners
directly, and what is left here is what belongs to no one part: what a principal may see and read, a change
announced on the bus and told here, which gateway reads a pull watch, readiness, start and stop. It verifies the
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

from mcpg_gateway import bus, cancellation, catalog, identity, liveness, ownership, peers, policy, reader, strategies
from mcpg_gateway.contract import check, config
from mcpg_gateway.fanout import fanout, watchers
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base, plugin, webhook


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
        registry = strategies.Registry([*strategies.BUILTIN, plugins.strategy_type()])
        self.identity = identity.Identity(cfg.gateway.auth)
        self.webhooks = webhook.build_index(cfg.mcp.capabilities.resources)
        """The webhook tokens, for the route (`webhook_route.py`) and the admin API."""
        self._catalog = catalog.Catalog(cfg.mcp.capabilities)
        self._policies = policy.Policies(expressions, self.metrics.policy_errors)
        self.reader = reader.HttpReader(self.options.clock, self.metrics, cfg.gateway.limits.upstream_connections)
        """The one reader: resources/read, every watch's reads, and the upstream pauses the admin API shows."""
        self.shared = registry.open_shared(cfg)
        """The clients the watches of one strategy type share (the NATS connections of nats_topic), by type."""
        self.liveness = liveness.Rules.from_config(cfg.gateway.liveness)
        self.bus = self._bus(cfg.gateway.bus)
        entries = len(cfg.mcp.capabilities.resources) + len(cfg.mcp.capabilities.resource_templates)
        self.peers = peers.Peers(self.bus.instance, self.liveness, entries) if self.bus is not None else None
        """What the other gateways on the bus say about their event sources (`peers.py`), for /readyz."""
        self._reporter: asyncio.Task[None] | None = None
        self.owners = (
            ownership.Owners(self.bus, self.options.clock, self._gateways_heard) if self.bus is not None else None
        )
        """Which pull watches this gateway reads for all (on a bus)."""
        self.fanout = self._fanout(registry, cfg.gateway)
        """Watches, subscribers and their writers (`fanout/`): what the handlers and the admin API talk to."""

    def _fanout(self, registry: strategies.Registry, cfg: config.GatewaySection) -> fanout.Fanout:
        clock = self.options.clock
        build = watchers.build_with(
            registry.build, self._read_bytes, clock, self.shared, digest=self.reader.digest, rules=self.liveness
        )
        owned = self.owners.run if self.owners is not None else None
        timeout_s = self.options.send_timeout_s
        return fanout.Fanout(build, self.metrics, clock, self._policies.should_tell, cfg, timeout_s, owned)

    def _bus(self, cfg: config.BusConfig | None) -> bus.Bus | None:
        if cfg is None:
            return None
        instance = bus.instance_name(cfg, os.environ)
        hooks = bus.Hooks(receiver=self._received, on_connect=self._fire_held, on_sources=self._heard)
        return bus.Bus(cfg, instance, self.metrics.registry, self.options.bus_grace_s, self.liveness, hooks)

    async def start(self) -> None:
        """Connect to the bus, if there is one: waits a bounded time, then serves anyway (and keeps trying)."""
        if self.bus is not None:
            await self.bus.start(self.options.bus_connect_wait_s)
            self._reporter = asyncio.get_running_loop().create_task(self._report_sources(), name="mcpg sources")

    def unready_reason(self) -> str | None:
        """Why /readyz should answer 503 now, or None when ready."""
        own = self._unready_here()
        if own is not None:
            return own
        if self.peers_decision().elsewhere is not None:  # a resource another gateway reaches and this one has not
            return "an event source is unreachable from here and reachable from another gateway"
        return None

    def _unready_here(self) -> str | None:
        """Why this gateway is unready apart from the peers' word: what its sources report says as `ready`."""
        if self.fanout.closing.is_set():
            return "shutting down"
        if self.bus is not None and self.bus.unready():
            return "bus unreachable"
        return None

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
        return [peers.Held(w.binding.entry.name, w.stats.connection) for w in self.fanout.running_watches()]

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

    async def _read_bytes(self, binding: catalog.Binding) -> bytes:
        return (await self.reader.read(binding)).body

    # --- changes and owners ---------------------------------------------------------------------------------

    async def announce(self, uri: str, strategy: str) -> int:
        """A change seen here (a webhook): published on the bus for the other gateways, then told to ours.
        Raises `BusUnavailableError` (and tells nobody) when the bus cannot take it: the sender should retry."""
        if self.bus is not None:
            await self.bus.publish(uri, strategy)
        return await self.fanout.fire(uri, strategy)

    def owner_of(self, uri: str) -> bool | None:
        """Whether this gateway reads `uri` for all (its lease); None without a bus or for a watch that is not pull."""
        watcher = self.fanout.watcher(uri)
        if self.owners is None or watcher is None or base.as_pull(watcher.strategy) is None:
            return None
        return self.owners.owns(uri)

    async def _received(self, uri: str) -> None:
        # Called only once the bus has started, after `fanout` exists (the bus is built before it).
        await self.fanout.fire_held(uri)

    async def _fire_held(self) -> None:
        await self.fanout.fire_all_held()

    def _gateways_heard(self) -> set[str]:
        """The names of the gateways heard on the bus lately: a lease holder by another name is suspect."""
        return {h.report.instance for h in self.peers.fresh(time.time())} if self.peers is not None else set()

    async def aclose(self) -> None:
        """Stop everything, each step in bound (`cancellation.py`): what does not finish in time is abandoned
        and logged, and the next step runs, so a shutdown always completes."""
        if self._reporter is not None:
            self._reporter.cancel()
            await cancellation.stopped([self._reporter], cancellation.STEP_TIMEOUT_S, "stopping the sources report")
        await self.fanout.aclose()  # releases the leases of owned watches (the bus closes after), in bound
        if self.bus is not None:
            await self.bus.close()  # in bound
        step_s = cancellation.STEP_TIMEOUT_S
        await cancellation.within(strategies.close_shared(self.shared), step_s, "closing the shared clients")
        await cancellation.within(self.reader.close(), step_s, "closing the HTTP reader")
