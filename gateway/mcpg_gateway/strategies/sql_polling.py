"""sql_polling: run a scalar tracking query on a cadence; fire when its value advances past the last one seen.

"Advances" means strictly greater, never merely different, so a monotonic column (`max(updated_at)`,
`max(id)`, a version counter) is the intended input. The column's PostgreSQL type decides whether a value
can be ordered at all: json, bytea, bool, money, arrays and the like are refused at the first read (asyncpg
hands several of them back as strings, which would compare without meaning). Text compares by code point,
not by the database's collation. NULL (and NaN) is "no value yet": anything after it advances.

Like poll, the first read is the baseline, taken in `start`, so a bad URL or query refuses the subscription.
A later query error or a result that is not exactly one row of one column is skipped and counted. Each
watch holds one connection: its queries run one at a time, so a pool would never hold more; a lost
connection is reopened at the next poll, the interval (10 s floor) being the backoff. Nothing can be missed
while it is down, because the next read compares values, so a reconnect fires only if the value advanced.
The query is this connection's liveness round trip (`liveness.py`): one that takes longer than `timeout_ms`
ends the connection, because a server that stopped answering (a partition, a frozen process) looks exactly
like that and the same socket would never answer again; a dead connection is noticed within one interval and
one timeout.
Connections are read-only (`default_transaction_read_only`): a tracking query never writes. A state (another
gateway's, from the bus) that cannot be read back is refused with `ValueError`, never a crash.

A pull strategy (`base.PullStrategy`): its state is the last value (`sql_values`), tagged with a digest of the
query, so a gateway running another query (a configuration change mid-rollout) never compares against it.
"""

from __future__ import annotations

import decimal
import hashlib
import logging
import math
from collections.abc import Sequence
from typing import Any

from mcpg_gateway import cancellation, liveness, redaction
from mcpg_gateway.contract import config
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base, pg, sql_values

logger = logging.getLogger(__name__)

APPLICATION_NAME = "mcpg-gateway sql_polling"

ORDERABLE_TYPES = frozenset(
    {
        *("int2", "int4", "int8", "oid", "numeric", "float4", "float8"),
        *("text", "varchar", "bpchar", "name"),
        *("date", "time", "timestamp", "timestamptz", "interval"),
        *("uuid", "pg_lsn"),
    }
)
"""PostgreSQL types whose values asyncpg decodes to Python values that order the way the database does."""


def column_type(type_names: Sequence[str]) -> str:
    """The tracking query's one column type, or `StrategyError` if it has more columns or no usable order."""
    if len(type_names) != 1:
        raise StrategyError(f"the tracking query must return exactly one column, not {len(type_names)}")
    type_name = type_names[0]
    if type_name not in ORDERABLE_TYPES:
        raise StrategyError(
            f"the tracking query returns a {type_name} value, which cannot tell whether it advanced; return a "
            f"number, text, date/time, uuid or pg_lsn (for example max(updated_at) or count(*))"
        )
    return type_name


def scalar(rows: Sequence[Sequence[Any]]) -> Any:
    """The single value of a one-row, one-column result, or `StrategyError`."""
    if len(rows) != 1:
        raise StrategyError(f"the tracking query must return exactly one row, not {len(rows)}")
    if len(rows[0]) != 1:
        raise StrategyError(f"the tracking query must return exactly one column, not {len(rows[0])}")
    return rows[0][0]


def is_missing(value: Any) -> bool:
    """NULL and NaN carry no position, so they never advance and anything after them does."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, decimal.Decimal):
        return value.is_nan()
    return value is None


def advanced(previous: Any, current: Any) -> bool:
    """True if `current` is strictly past `previous`. Values of different types (a changed column) never are."""
    if is_missing(current):
        return False
    if is_missing(previous):
        return True
    try:
        return bool(current > previous)
    except TypeError:
        return False


class SqlPollingWatch:
    def __init__(self, spec: config.SqlPollingStrategy, ctx: base.WatchContext) -> None:
        self._url = spec.url.get_secret_value()
        self._query = spec.query
        self._interval_s = spec.effective_interval_ms / 1000
        self._timeout_s = spec.timeout_ms / 1000
        self._ctx = ctx
        self._conn: Any = None
        self._last: Any = None
        ctx.stats.connection.source = redaction.redact_url(self._url)
        self._what = f"watch {ctx.binding.uri} (sql_polling on {ctx.stats.connection.source})"

    async def start(self) -> None:
        try:
            self._last = await self._read()
        except StrategyError:
            self._ctx.stats.failed()
            raise
        self._ctx.stats.succeeded()
        self._ctx.stats.connection.round_trip()

    async def run(self, fire: base.Fire) -> None:
        await base.run_pull(self, self._ctx.clock, fire)

    @property
    def interval_s(self) -> float:
        return self._interval_s

    async def check(self) -> bool:
        try:
            value = await self._read()
        except StrategyError as e:
            self._ctx.stats.failed()
            logger.warning("%s: poll skipped: %s", self._what, e)
            return False
        self._ctx.stats.succeeded()
        moved = advanced(self._last, value)
        self._last = value
        return moved

    def snapshot(self) -> str:
        return f"{self._query_digest()}:{sql_values.encode(self._last)}"

    def resume(self, state: str) -> None:
        digest, sep, value = state.partition(":")
        if not sep or digest != self._query_digest():
            raise ValueError("the state of another tracking query")
        self._last = sql_values.decode(value)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        await pg.discard(conn)

    def _query_digest(self) -> str:
        return hashlib.sha256(self._query.encode()).hexdigest()[:16]

    async def _read(self) -> Any:
        conn = await self._connection()
        try:
            async with cancellation.guarded(self._timeout_s):
                stmt = await conn.prepare(self._query)
                column_type([attr.type.name for attr in stmt.get_attributes()])
                rows = await stmt.fetch()
        except TimeoutError:
            self._lose(conn, "unresponsive")
            raise StrategyError(
                f"the tracking query did not answer within {self._timeout_s:g} s (timeout_ms); the connection "
                "is closed and the next poll opens a new one"
            ) from None
        except pg.connection_errors() as e:
            if conn.is_closed():
                self._lose(conn, "closed")
            else:
                self._ctx.stats.connection.round_trip()  # the server answered, with an error: the connection works
            raise StrategyError(f"the tracking query failed: {pg.describe(e, self._url)}") from None
        self._ctx.stats.connection.round_trip()
        return scalar(rows)

    def _lose(self, conn: Any, cause: liveness.Cause) -> None:
        self._conn = None
        conn.terminate()  # also cancels asyncpg's own attempt to cancel the query, which would wait as long
        self._ctx.stats.connection.lost(cause)

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.is_closed():
            self._conn = await pg.connect(self._url, APPLICATION_NAME, default_transaction_read_only="on")
        return self._conn


STRATEGY = base.StrategyType("sql_polling", SqlPollingWatch)
