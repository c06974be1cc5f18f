"""plugin: watch strategies from other distributions, found through the `mcpg.watch_strategies` entry points.

The plugin API. An entry point in group `mcpg.watch_strategies` names a class (any callable works) with:

- `kind() -> str`, a staticmethod or classmethod: the discriminator a watch selects with `kind: <that>`;
- a constructor `(spec: dict[str, Any], ctx: WatchContext)` returning a `WatchStrategy` (`start`, `run`,
  `close`; see `strategies/base.py`). `spec` is the whole strategy block as a fresh dict: `type`, `kind` and
  every other field the manifest gave (`kinds: [sms, voice]`, ...). `ctx.clock` is the clock to sleep on,
  `ctx.stats` records failed reads, `ctx.binding.uri` is the watched URI.

A strategy that reads its source on a cadence should also implement `base.PullStrategy` (`interval_s`,
`async check() -> bool`, `snapshot() -> str`, `resume(state: str)`; `run` can be `base.run_pull`). Then, when
gateways share a bus (`gateway.bus`), one of them runs it for all, and another takes it over from its snapshot;
a strategy that does not is run by every gateway with subscribers, each telling its own, like the push
strategies (nats_topic, postgres_listen_notify).

A strategy that holds a long-lived connection should prove it alive the gateway's way (`liveness.py`): a round
trip every `ctx.liveness.interval_s`, answered within `ctx.liveness.timeout_s`, else treat the connection as
lost. It records what the admin API and the metrics show in `ctx.stats.connection`: `source` (where it
connects, credential-free), `round_trip()` after each exchange that worked, `lost("closed" | "unresponsive")`.

Raise `mcpg_gateway.errors.StrategyError` from the constructor or `start` to refuse a subscription with a
message the client sees; any other exception refuses it with the exception's type name only. Entry points
are loaded once when the gateway starts (never at import), and a watch naming a kind no installed plugin
provides is a refused configuration, with the installed kinds listed: at start-up from a file it stops the
gateway; from its configuration Secret, or offered later, the process keeps serving what it served before.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from mcpg_gateway.contract import config
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "mcpg.watch_strategies"


class WatchStrategyPlugin(Protocol):
    """What an entry point must load: a class with a `kind()` discriminator that builds a `WatchStrategy`."""

    def kind(self) -> str: ...

    def __call__(self, spec: dict[str, Any], ctx: base.WatchContext) -> base.WatchStrategy: ...


class EntryPoint(Protocol):
    """The part of `importlib.metadata.EntryPoint` used here (tests pass stand-ins)."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    def load(self) -> Any: ...


class PluginRegistry:
    """The installed plugins by kind; as a strategy factory it builds the watch a `plugin` spec asks for."""

    def __init__(self, plugins: dict[str, WatchStrategyPlugin], broken: list[str]) -> None:
        self._plugins = plugins
        self.broken = broken
        """One line per entry point that could not be used, shown when a watch needs a missing kind."""

    @classmethod
    def load(cls, entry_points: Iterable[EntryPoint] | None = None) -> PluginRegistry:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
        plugins: dict[str, WatchStrategyPlugin] = {}
        providers: dict[str, str] = {}
        broken: list[str] = []
        for ep in eps:
            try:
                plugin = ep.load()
                kind = _kind_of(plugin)
            except Exception as e:  # isolation boundary: one broken plugin must not hide the others
                broken.append(f"entry point {ep.name!r} ({ep.value}): {type(e).__name__}: {e}")
                logger.warning("watch-strategy plugin %s (%s) is unusable: %s", ep.name, ep.value, e)
                continue
            if kind in providers:
                broken.append(f"kind {kind!r} is provided by both {providers[kind]!r} and {ep.name!r}")
                plugins.pop(kind, None)
                continue
            providers[kind] = ep.name
            plugins[kind] = plugin
        return cls(plugins, broken)

    @property
    def kinds(self) -> list[str]:
        return sorted(self._plugins)

    def build(self, spec: config.PluginStrategy, ctx: base.WatchContext) -> base.WatchStrategy:
        return PluginWatch(self._plugins[spec.kind], spec, ctx)

    def strategy_type(self) -> base.StrategyType:
        """The `plugin` strategy, served by these plugins."""
        return base.StrategyType("plugin", self.build)


def _kind_of(plugin: Any) -> str:
    kind_fn = getattr(plugin, "kind", None)
    if not callable(kind_fn) or not callable(plugin):
        raise TypeError("expected a class with kind() and a (spec, ctx) constructor")
    kind = kind_fn()
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"kind() returned {kind!r}, not a non-empty string")
    return kind


class PluginWatch:
    """Builds the plugin's strategy in `start`, so a plugin that cannot be built refuses the subscription."""

    def __init__(self, plugin: WatchStrategyPlugin, spec: config.PluginStrategy, ctx: base.WatchContext) -> None:
        self._plugin, self._spec, self._ctx = plugin, spec, ctx
        self._inner: base.WatchStrategy | None = None

    async def start(self) -> None:
        try:
            self._inner = self._plugin(self._spec.model_dump(), self._ctx)
        except StrategyError:
            raise
        except Exception as e:  # isolation boundary: a plugin's bug refuses its own subscribers only
            raise StrategyError(f"plugin {self._spec.kind!r} could not be set up ({type(e).__name__})") from e
        await self._inner.start()

    async def run(self, fire: base.Fire) -> None:
        assert self._inner is not None, "run() only follows a successful start()"
        await self._inner.run(fire)

    def as_pull(self) -> base.PullStrategy | None:
        """The plugin's strategy, if it is a pull strategy (known once `start` built it)."""
        return base.as_pull(self._inner) if self._inner is not None else None

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()
