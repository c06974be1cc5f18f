"""asyncpg connections for the PostgreSQL strategies, with every failure turned into a credential-free error.

Network and server errors keep their text (scrubbed of the URL's secrets); a URL asyncpg cannot parse is
reported by type only, because parse errors quote fragments of the URL, password included.
"""

from __future__ import annotations

from typing import Any

from mcpg_gateway import redaction
from mcpg_gateway.errors import StrategyError

CONNECT_TIMEOUT_S = 10.0


def connection_errors() -> tuple[type[BaseException], ...]:
    """What a query or LISTEN on a live connection raises when the server or the network fails.

    asyncpg is imported on a gateway's first PostgreSQL connection, not at start-up: it is about 3 MB of memory
    that a gateway with no PostgreSQL watch would hold for nothing. Called in an `except` clause, this runs only
    when something was raised, by then on a connection asyncpg made."""
    import asyncpg

    return (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def connect(url: str, application_name: str, **settings: str) -> Any:
    """A new connection to `url`, or `StrategyError` naming the redacted URL and why."""
    import asyncpg  # see `connection_errors`

    where = redaction.redact_url(url)
    server_settings = {"application_name": application_name, **settings}
    # `from None` throughout: a cause may quote the URL, and the message already says what failed.
    try:
        return await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_S, server_settings=server_settings)
    except (OSError, TimeoutError, asyncpg.PostgresError) as e:
        raise StrategyError(f"cannot connect to {where}: {describe(e, url)}") from None
    except (ValueError, asyncpg.InterfaceError) as e:
        raise StrategyError(f"{where} is not a usable PostgreSQL URL ({type(e).__name__})") from None


def describe(error: BaseException, url: str) -> str:
    """A one-line, credential-free description of a connection or query error."""
    if isinstance(error, TimeoutError):
        return "timed out"
    text = str(error) or type(error).__name__
    return redaction.scrub(text.splitlines()[0], url)


async def discard(conn: Any) -> None:
    """Close `conn` politely if it is still open; never raises."""
    if conn is None or conn.is_closed():
        return
    try:
        await conn.close(timeout=2)
    except connection_errors():
        conn.terminate()
