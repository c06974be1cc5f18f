"""The `Gateway`: every moving part wired once from a configuration, behind a narrow API.

Both front doors (the MCP handlers and the webhook route) and the admin API work through this object, so there
is one watch registry, one subscriber set and one place that knows how to read a resource. It verifies the
configuration with the contract's own check (`contract/check.py`) against the plugins this process has, so it
refuses exactly what the operator would have refused before rendering.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcpg_gateway import catalog, identity, policy, reader, strategies, subscribers, watchers, webhooks
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
        self._reader = reader.HttpReader()
        self._shared = registry.open_shared(cfg)
        build = watchers.build_with(registry.build, self._read_bytes, self.options.clock, self._shared)
        self._watches = watchers.WatchRegistry(build, self.metrics, self.options.clock, self._policies.should_tell)
        self.subscribers = subscribers.Subscribers(self.metrics.subscribers, self._watches.drop)

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

    def templates(self) -> list[config.ResourceTemplateConfig]:
        return list(self._catalog.templates)

    async def read(self, binding: catalog.Binding) -> reader.Content:
        return await self._reader.read(binding)

    async def _read_bytes(self, binding: catalog.Binding) -> bytes:
        return (await self._reader.read(binding)).body

    # --- watches ---------------------------------------------------------------------------------------------

    async def subscribe(self, binding: catalog.Binding, sub: subscribers.Subscriber) -> None:
        """Join (or start) the watch of `binding.uri`. Raises `StrategyError` if it cannot start."""
        await self._watches.subscribe(binding, sub)

    def unsubscribe(self, uri: str, sub: subscribers.Subscriber) -> None:
        self._watches.unsubscribe(uri, sub)

    async def fire(self, uri: str, strategy: str) -> int:
        """Tell the subscribers of `uri` it changed (each once, as its filter allows); how many were told."""
        return await self._watches.fire(uri, strategy)

    def running_watches(self) -> list[watchers.Watcher]:
        """The watchers running now (one per subscribed URI), for the admin API."""
        return self._watches.watchers()

    def watcher(self, uri: str) -> watchers.Watcher | None:
        return self._watches.get(uri)

    def shared_client(self, strategy_type: str) -> base.SharedClient | None:
        """The client the watches of `strategy_type` share (the NATS connections of nats_topic), if it has one."""
        return self._shared.get(strategy_type)

    async def aclose(self) -> None:
        self.subscribers.end_listen_streams()
        await self._watches.close()
        await strategies.close_shared(self._shared)
        await self._reader.close()
