"""The `Gateway`: every moving part wired once from a configuration, each collaborator given what it needs when built.

Both front doors (the MCP handlers and the webhook route) and the admin API start from this object, so there is
one fan-out (`fanout/`: watches, subscribers, their writers), one reader and one catalog; they call those owners
directly, and what is left here is what belongs to no one part: what a principal may see and read, a change
announced on the bus and told here, which gateway reads a pull watch, readiness, start and stop. It verifies the
configuration with the contract's own check (`contract/check.py`) against the plugins this process has, so it
refuses exactly what the operator would have refused before rendering.

A new configuration is swapped in whole (`swap`, called by `reconfigure.py` with the configuration already
checked): identity, catalog, read policies and notification filters, webhook tokens, limits and lease terms, in one
synchronous step, so every request and every fire sees the old configuration or the new one. What the process
started on it keeps for the restart-only fields (`contract/digests.RESTART_ONLY`): the bus, the shared NATS
clients, the liveness rules, the sockets' caps and the session manager. `served` records what it serves.

With `gateway.bus` set it is one of N gateways serving as one (`bus.py`): a change seen here is announced on the
bus and told to this process's subscribers, a change announced elsewhere is told to them too, and pull
watches run where their lease is (`ownership.py`). Without it, everything stays in this process.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpg_gateway import (
    bus,
    cancellation,
    card,
    catalog,
    identity,
    liveness,
    memory_fit,
    ownership,
    peers,
    policy,
    reader,
    replays,
    served,
    strategies,
)
from mcpg_gateway.contract import cel, check, config
from mcpg_gateway.fanout import fanout, running
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
    config_file: Path | None = None
    """The file the configuration was read from: read again on SIGHUP and when it changes (`reconfigure.py`)."""
    config_secret: str | None = None
    """The Secret of this pod's namespace holding the configuration, followed through the API instead of the file
    (`config_secret.py`); the process is unready until it has read it once."""
    instance: str | None = None
    """This process's name in its acknowledgement; None: `POD_NAME`, else the host name."""
    environ: Mapping[str, str] | None = None
    """Where a new configuration's `${env.NAME}` are resolved; None: the process's environment."""
    memory_limit_bytes: int | None = None
    """The container's memory limit, which every configuration's caps are fitted to (`memory_fit.py`); None fits
    nothing (the entrypoint reads the cgroup's; `--check` and tests leave it out)."""


class Gateway:
    def __init__(
        self,
        cfg: config.GatewayConfig,
        options: Options | None = None,
        document: Mapping[str, Any] | None = None,
        source: str = served.SOURCE_FILE,
    ) -> None:
        """`document`: the configuration as written (its digests are what the process acknowledges serving); None
        when it was built otherwise (tests): the first configuration offered is then applied whatever it is."""
        self.options = options or Options()
        self.metrics = Metrics()
        cfg, self.memory_fit = memory_fit.fitted(cfg, self.options.memory_limit_bytes)
        """The caps as configured, lowered to fit the container's memory: what every part is given (`memory_fit`)."""
        memory_fit.log(self.memory_fit)
        self._show_limits(cfg)
        self.config = cfg
        plugins = self.options.plugins or plugin.PluginRegistry.load()
        self.plugins = plugins
        expressions = self.verify(cfg)
        self.served = served.Record(
            self.options.instance or os.environ.get("POD_NAME") or socket.gethostname(),
            started=document or {},
            serving=served.Applied.of(document, source) if document is not None else None,
            plugins=tuple(sorted(plugins.kinds)),
            synced=self.options.config_secret is None,
        )
        """What this process serves and refused (`served.py`): its acknowledgement."""
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
        self.deliveries = replays.Deliveries(self.bus)
        """The signed webhook deliveries let through lately, so a replay fires nothing (`replays.py`)."""
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

    def verify(self, cfg: config.GatewayConfig) -> cel.Expressions:
        """The contract's whole check against the plugins this process has; `ConfigError` naming each problem."""
        return check.verify(cfg, plugin_kinds=self.plugins.kinds, unusable_plugins=self.plugins.broken)

    def swap(self, cfg: config.GatewayConfig, expressions: cel.Expressions) -> None:
        """Serve `cfg` (checked: `verify`) from now on, in one synchronous step: nothing awaits between the parts,
        so no request or fire sees half of it. Watchers and subscribers are `reconfigure.py`'s to follow. Its caps
        are fitted to the container's memory as the first configuration's were (said again only when that changes)."""
        cfg, fit = memory_fit.fitted(cfg, self.options.memory_limit_bytes)
        if fit.lowered != self.memory_fit.lowered:
            memory_fit.log(fit)
        self.memory_fit = fit
        self._show_limits(cfg)
        self.config = cfg
        self.identity.replace(cfg.gateway.auth)
        self._catalog.replace(cfg.mcp.capabilities)
        self._policies.replace(expressions)
        resources = cfg.mcp.capabilities.resources
        self.webhooks.replace(webhook.build_index(resources, self.webhooks.generated()))
        self.fanout.use(cfg.gateway)

    def _show_limits(self, cfg: config.GatewayConfig) -> None:
        """The fitted caps as a gauge, so what the process admits is visible (the card shows them too)."""
        for name in memory_fit.SHOWN:
            self.metrics.limit_fitted.labels(name).set(getattr(cfg.gateway.limits, name))

    def _fanout(self, registry: strategies.Registry, cfg: config.GatewaySection) -> fanout.Fanout:
        clock = self.options.clock
        build = running.build_with(
            registry.build, self._read_bytes, clock, self.shared, digester=self.reader.digester, rules=self.liveness
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
        if not self.served.synced:
            return "the configuration Secret has not been read through the API yet"
        if self.served.serving is None and self.served.refused is not None:
            return "the configuration was refused and no earlier one is served (see /admin/v1/configuration)"
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

    def binding(self, uri: str) -> catalog.Binding | None:
        """The binding of `uri` in the catalog served now, whoever asks."""
        return self._catalog.resolve(uri)

    def may_read(self, principal: identity.Principal, binding: catalog.Binding) -> bool:
        return self._policies.may_read(principal, binding)

    def listing(self, principal: identity.Principal) -> Hashable:
        """What resources/list and resources/templates/list show `principal`, as one comparable value: a new
        configuration tells a subscriber its list changed only when this changed for it."""
        resources = tuple(_listed(r.uri, r) for r in self.resources(principal))
        return resources, tuple(_listed(t.uri_template, t) for t in self.templates(principal))

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


def _listed(uri: str, entry: config.Entry) -> Hashable:
    """An entry as a list shows it (`mcp_handlers`): name, URI or template, description, MIME type, `_meta`."""
    meta = card.meta(entry)
    return entry.name, uri, card.description(entry), entry.mime_type, tuple(sorted((meta or {}).items()))
