"""The gateway's moving parts, wired once from a configuration: catalog, reader, watchers, webhooks, metrics.

Both front doors (MCP handlers and the webhook route) and the admin API work through this object, so
there is one subscription registry and one place that knows how to read a resource.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from mcpg_gateway import backends, catalog, config, identity, policy, strategies, watchers, webhooks
from mcpg_gateway.errors import ConfigError
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base
from mcpg_gateway.subscribers import Subscriber

logger = logging.getLogger(__name__)


@dataclass
class Options:
    """Process-level knobs the configuration file does not carry."""

    admin_token: str | None = None
    clock: base.Clock = field(default_factory=base.RealClock)
    factories: dict[str, base.StrategyFactory] | None = None
    """Override the strategy registry (tests use the in-memory strategy)."""
    send_timeout_s: float = 5.0
    """How long one subscriber's stream may take to accept a notification before it is dropped for it."""


class Gateway:
    def __init__(self, cfg: config.GatewayConfig, options: Options | None = None) -> None:
        self.config = cfg
        self.options = options or Options()
        self.metrics = Metrics()
        self.catalog = catalog.Catalog(cfg.mcp.capabilities)
        self.identity = identity.Identity(cfg.gateway.auth)
        self.policies = policy.Policies(cfg.mcp.capabilities, self.metrics)
        self.reader = backends.HttpReader()
        self.shared: dict[str, Any] = strategies.shared_clients(cfg)
        factories = self.options.factories or strategies.builtin_factories()
        check_strategies(cfg, factories)
        build = watchers.build_with(factories, self._read_bytes, self.options.clock, self.shared)
        self.registry = watchers.WatchRegistry(build, self.metrics, self.options.clock, self.policies.should_tell)
        self.tokens = webhooks.build_index(cfg.mcp.capabilities.resources)
        self.listeners: set[Subscriber] = set()
        self.closing = asyncio.Event()
        self._listeners_changed = asyncio.Condition()

    async def _read_bytes(self, binding: catalog.Binding) -> bytes:
        return (await self.reader.read(binding)).body

    def open_subscriber(self, sub: Subscriber) -> None:
        self.metrics.subscribers.labels(sub.kind).inc()
        if sub.kind == "listen":
            self.listeners.add(sub)

    def close_subscriber(self, sub: Subscriber) -> None:
        """Implicit unsubscribe from everything; safe to call twice."""
        if sub.kind == "listen":
            self.listeners.discard(sub)
            asyncio.get_running_loop().create_task(self._notify_listeners_changed())
        if sub.active:
            sub.active = False
            self.metrics.subscribers.labels(sub.kind).dec()
        sub.outbox.close()
        self.registry.drop(sub)

    def end_listen_streams(self) -> None:
        """Graceful shutdown, step one: every open subscriptions/listen stream is answered with its result."""
        self.closing.set()
        for sub in list(self.listeners):
            sub.outbox.close()

    async def _notify_listeners_changed(self) -> None:
        async with self._listeners_changed:
            self._listeners_changed.notify_all()

    async def wait_listen_streams_ended(self, timeout_s: float) -> bool:
        """Wait (bounded) until every listen stream has sent its final result. False on timeout."""
        try:
            async with asyncio.timeout(timeout_s), self._listeners_changed:
                await self._listeners_changed.wait_for(lambda: not self.listeners)
        except TimeoutError:
            return False
        return True

    async def aclose(self) -> None:
        self.end_listen_streams()
        await self.registry.close()
        await strategies.close_shared(self.shared)
        await self.reader.close()


def check_strategies(cfg: config.GatewayConfig, factories: dict[str, base.StrategyFactory]) -> None:
    problems = []
    caps = cfg.mcp.capabilities
    for kind, entries in config.entries_by_kind(caps):
        for i, entry in enumerate(entries):
            if entry.watch is not None and entry.watch.strategy.type not in factories:
                problems.append(
                    f"mcp.capabilities.{kind}[{i}].watch.strategy.type: strategy "
                    f"{entry.watch.strategy.type!r} is not available in this gateway (available: "
                    f"{', '.join(sorted(factories))})"
                )
            elif entry.watch is not None:
                where = f"mcp.capabilities.{kind}[{i}].watch.strategy"
                problems.extend(f"{where}.{p}" for p in strategies.spec_problems(entry.watch.strategy, cfg, factories))
    if problems:
        raise ConfigError(problems)
