"""Watch strategies: one module each, behind `base.WatchStrategy`, looked up by the config's `type`."""

from __future__ import annotations

from typing import Any

from mcpg_gateway.strategies import base, poll, webhook


def _poll(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return poll.PollWatch(spec, ctx)


def _webhook(spec: Any, ctx: base.WatchContext) -> base.WatchStrategy:
    return webhook.WebhookWatch(spec, ctx)


def builtin_factories() -> dict[str, base.StrategyFactory]:
    """The strategies this build runs, keyed by `watch.strategy.type`."""
    return {"poll": _poll, "webhook": _webhook}
