"""Watch strategies: one module each, behind `base.WatchStrategy`, looked up by the config's `type`.

Besides the factories, this is where the gateway gets the clients strategies share across watches (one
NATS connection per server URL) and the per-strategy start-up checks that need more than the schema.
"""

from __future__ import annotations

from typing import Any

from mcpg_gateway import config
from mcpg_gateway.strategies import (
    base,
    nats_topic,
    plugin,
    poll,
    postgres_listen_notify,
    sql_polling,
    webhook,
)


def _poll(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return poll.PollWatch(spec, ctx)


def _webhook(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return webhook.WebhookWatch(spec, ctx)


def _nats_topic(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return nats_topic.NatsTopicWatch(spec, ctx)


def _postgres_listen_notify(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return postgres_listen_notify.PostgresListenWatch(spec, ctx)


def _sql_polling(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return sql_polling.SqlPollingWatch(spec, ctx)


def builtin_factories() -> dict[str, base.StrategyFactory]:
    """The strategies this build runs, keyed by `watch.strategy.type`. Loads the plugin entry points."""
    return {
        "poll": _poll,
        "webhook": _webhook,
        "nats_topic": _nats_topic,
        "postgres_listen_notify": _postgres_listen_notify,
        "sql_polling": _sql_polling,
        "plugin": plugin.PluginRegistry.load(),
    }


def shared_clients(cfg: config.GatewayConfig) -> dict[str, Any]:
    """The clients watches share for the gateway's lifetime. None connects until a watch needs it."""
    default = cfg.gateway.nats.url
    return {nats_topic.SHARED_KEY: nats_topic.NatsConnections(default.get_secret_value() if default else None)}


async def close_shared(shared: dict[str, Any]) -> None:
    connections = shared.get(nats_topic.SHARED_KEY)
    if isinstance(connections, nats_topic.NatsConnections):
        await connections.close()


def spec_problems(spec: Any, cfg: config.GatewayConfig, factories: dict[str, base.StrategyFactory]) -> list[str]:
    """Problems with a strategy spec the schema cannot see, each as `<field under strategy>: <message>`."""
    if isinstance(spec, config.NatsTopicStrategy) and spec.url is None and cfg.gateway.nats.url is None:
        return ["url: no NATS server for this watch: set url here or gateway.nats.url"]
    registry = factories.get("plugin")
    if isinstance(spec, config.PluginStrategy) and isinstance(registry, plugin.PluginRegistry):
        problem = registry.problem(spec.kind)
        return [f"kind: {problem}"] if problem else []
    return []
