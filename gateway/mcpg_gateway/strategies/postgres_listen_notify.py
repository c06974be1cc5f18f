"""postgres_listen_notify: LISTEN on a channel over one dedicated connection per watch; any NOTIFY fires.

The connection is opened and the LISTEN issued in `start`, so a bad URL or an unreachable server refuses the
subscription. The channel is never pasted into SQL: asyncpg's `add_listener` sends it as a quoted identifier
(`LISTEN "Inventory-Changed"`), so case and punctuation survive and nothing can be injected. The payload is
not inspected. A lost connection is reopened with backoff and then fires once (see `reconnect`).

A LISTEN connection is silent by nature, so silence proves nothing: every `liveness.interval_s` it makes a
round trip (`SELECT 1`), and one not answered within `liveness.timeout_s` ends the connection, which is then
lost like a closed one (`liveness.py`). The server is asked to keep TCP keepalives at the same rhythm, so the
backend of a connection cut off from this side is ended by the server too instead of lingering. A stopping
watch waits for its probe in bound, and never takes the probe's end for its own (`cancellation.py`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcpg_gateway import cancellation, liveness, redaction
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
        self._prober: asyncio.Task[None] | None = None
        ctx.stats.connection.source = redaction.redact_url(self._url)
        self._what = f"watch {ctx.binding.uri} (LISTEN {spec.channel!r} on {ctx.stats.connection.source})"

    async def start(self) -> None:
        await self._connect()
        self._ctx.stats.succeeded()
        self._ctx.stats.connection.round_trip()

    async def run(self, fire: base.Fire) -> None:
        await reconnect.run(self._signal, self._connect, fire, self._ctx, self._what)

    async def close(self) -> None:
        await self._stop_probing()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.remove_termination_listener(self._on_terminated)
            await pg.discard(conn)

    async def _connect(self) -> None:
        await self._stop_probing()
        await pg.discard(self._conn)
        self._conn = None
        conn = await pg.connect(self._url, APPLICATION_NAME)
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except pg.connection_errors() as e:
            await pg.discard(conn)
            raise StrategyError(f"LISTEN {self._channel!r} failed: {pg.describe(e, self._url)}") from None
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn
        self._prober = asyncio.get_running_loop().create_task(self._probe(conn), name=f"probe {self._what}")

    async def _probe(self, conn: Any) -> None:
        """Until the connection ends: a round trip every interval; one that fails or is late ends it."""
        rules = self._ctx.liveness
        while not conn.is_closed():
            await rules.sleep(rules.interval_s)
            try:
                async with cancellation.guarded(rules.timeout_s):
                    await conn.fetchval("SELECT 1")
            except TimeoutError:
                self._lost(conn, "unresponsive", f"no answer to a round trip within {rules.timeout_s:g} s")
                conn.terminate()  # also cancels asyncpg's own attempt to cancel the query
                return
            except pg.connection_errors() as e:
                self._lost(conn, "closed", pg.describe(e, self._url))
                conn.terminate()
                return
            self._ctx.stats.connection.round_trip()

    async def _stop_probing(self) -> None:
        prober, self._prober = self._prober, None
        if prober is not None and prober is not asyncio.current_task():
            prober.cancel()
            # Not `suppress(CancelledError)` around `await prober`: that also ate this task's own stop, and the
            # watch reconnected and fired for nobody. `stopped` raises only this task's cancel, and is bounded.
            await cancellation.stopped([prober], cancellation.STEP_TIMEOUT_S, f"stopping the probe of {self._what}")

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self._signal.changed()

    def _on_terminated(self, conn: Any) -> None:
        self._lost(conn, "closed", "the connection closed")

    def _lost(self, conn: Any, cause: liveness.Cause, why: str) -> None:
        # The probe's verdict comes first and terminating then reports the close as well: one loss, once.
        if conn is not self._conn or not self._ctx.stats.connection.up:
            return
        logger.warning("%s: connection lost (%s)", self._what, why)
        self._ctx.stats.connection.lost(cause)
        self._signal.connection_lost()


STRATEGY = base.StrategyType("postgres_listen_notify", PostgresListenWatch)
