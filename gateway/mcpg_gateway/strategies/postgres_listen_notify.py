"""postgres_listen_notify: LISTEN on a channel over one dedicated connection per watch; any NOTIFY fires.

The connection is opened and the LISTEN issued in `start`, so a bad URL or an unreachable server refuses the
subscription. The channel is never pasted into SQL: asyncpg's `add_listener` sends it as a quoted identifier
(`LISTEN "Inventory-Changed"`), so case and punctuation survive and nothing can be injected. The payload is
not inspected. A lost connection is reopened with backoff and then fires once (see `reconnect`).
"""

from __future__ import annotations

import logging
from typing import Any

from mcpg_gateway import redaction
from mcpg_gateway.contract import config
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base, pg, reconnect

logger = logging.getLogger(__name__)

APPLICATION_NAME = "mcpg-gateway postgres_listen_notify"


class PostgresListenWatch:
    def __init__(self, spec: config.PostgresListenNotifyStrategy, ctx: base.WatchContext) -> None:
        self._url = spec.url.get_secret_value()
        self._channel = spec.channel
        self._ctx = ctx
        self._signal = reconnect.Signal()
        self._conn: Any = None
        self._what = f"watch {ctx.binding.uri} (LISTEN {spec.channel!r} on {redaction.redact_url(self._url)})"

    async def start(self) -> None:
        await self._connect()
        self._ctx.stats.succeeded()

    async def run(self, fire: base.Fire) -> None:
        await reconnect.run(self._signal, self._connect, fire, self._ctx, self._what)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.remove_termination_listener(self._on_terminated)
            await pg.discard(conn)

    async def _connect(self) -> None:
        await pg.discard(self._conn)
        self._conn = None
        conn = await pg.connect(self._url, APPLICATION_NAME)
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except pg.CONNECTION_ERRORS as e:
            await pg.discard(conn)
            raise StrategyError(f"LISTEN {self._channel!r} failed: {pg.describe(e, self._url)}") from None
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self._signal.changed()

    def _on_terminated(self, conn: Any) -> None:
        if conn is self._conn:
            logger.warning("%s: connection lost", self._what)
            self._signal.connection_lost()


STRATEGY = base.StrategyType("postgres_listen_notify", PostgresListenWatch)
