"""Watch strategies: one module each, behind `base.WatchStrategy`, each describing itself with a `StrategyType`.

The registry is a mapping from `watch.strategy.type` to those entries and knows no strategy in particular:
it builds a watch, and makes (and closes) the clients a strategy type's watches share. The webhook strategy is
passive (`webhook.py`: its watch and the token index; the HTTP route that fires it is `webhook_route.py`);
plugins come from entry points (`plugin.py`). Every rule about a strategy's configuration is the contract's
(`contract/check.py`), so the operator can ask it before rendering.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcpg_gateway.contract import config
from mcpg_gateway.strategies import base, nats_topic, poll, postgres_listen_notify, sql_polling, webhook

BUILTIN = (poll.STRATEGY, nats_topic.STRATEGY, postgres_listen_notify.STRATEGY, sql_polling.STRATEGY, webhook.STRATEGY)
"""The strategies every gateway runs (besides plugin, which the gateway adds from the installed entry points)."""


class Registry:
    """The strategy types a gateway runs, by `type`."""

    def __init__(self, types: Iterable[base.StrategyType]) -> None:
        self._types = {t.type: t for t in types}

    def types(self) -> list[str]:
        return sorted(self._types)

    def build(self, spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
        return self._types[spec.type].build(spec, ctx)

    def open_shared(self, cfg: config.GatewayConfig) -> dict[str, base.SharedClient]:
        """The shared client of each type that has one. None connects until a watch needs it."""
        return {t.type: t.shared(cfg) for t in self._types.values() if t.shared is not None}


async def close_shared(shared: dict[str, base.SharedClient]) -> None:
    for client in shared.values():
        await client.close()
