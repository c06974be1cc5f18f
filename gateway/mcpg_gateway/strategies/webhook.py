"""webhook: the upstream calls us. The watcher is passive; the webhook route fires the URI its token selects."""

from __future__ import annotations

import asyncio

from mcpg_gateway import config
from mcpg_gateway.strategies import base


class WebhookWatch:
    def __init__(self, spec: config.WebhookStrategy, ctx: base.WatchContext) -> None:
        self._ctx = ctx

    async def start(self) -> None:
        return None

    async def run(self, fire: base.Fire) -> None:
        # Fires arrive through the webhook route (webhooks.py), not from here.
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None
