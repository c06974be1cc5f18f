"""The /mcp endpoint's session manager: handshake-era sessions kept by the gateway, every request served by the SDK.

Sessions are kept, because handshake-era clients are told of changes only on their session's GET stream. They are
kept here (`handshake_sessions.py`, at the door `sdk/door.py`) rather than by the SDK's stateful manager, whose
per-session server task, task group, memory streams and GET stream tasks were most of what a session cost (issue
36: 134 KB a session); each request is served by the SDK in stateless mode, which owns the protocol as before.

Requests are answered as one JSON object (`json_response`), not as an SSE stream carrying it: the spec lets a
server answer either way and requires clients to take both, and the gateway sends nothing in a request's course
(no progress, no log messages, no requests to the client) that needs a stream. An SSE answer cost a handshake-era
session a fifth of its RSS after the door (issue 36: sse_starlette's five tasks and their reference cycles, on each
of the twelve requests that open and subscribe it; 47.3 -> 39.6 KB a session). A listen is a stream anyway: the
SDK answers `subscriptions/listen` over SSE whatever the setting.

The manager is entered around both HTTP servers (`servers.py`), not tied to a Starlette lifespan, so a shutdown can
end listen streams before it closes the sessions. While it runs, sessions idle past their timeout end
(`REAP_INTERVAL_S`); when it stops, every session ends (each unwinds its exit stack: the implicit unsubscribe).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.types import ASGIApp

from mcpg_gateway.handshake_sessions import HandshakeSessions
from mcpg_gateway.sdk.door import HandshakeDoor

logger = logging.getLogger(__name__)

REAP_INTERVAL_S = 5.0
"""How often idle sessions are looked for, at most: a session ends at most this long after its timeout (the
interval is shorter for a shorter timeout)."""


class SessionManager:
    """The MCP server `app`, its handshake-era sessions (`sessions`) and its ASGI endpoint (`endpoint`)."""

    def __init__(self, server: Server[Any], *, idle_timeout_s: float, max_sessions: int, max_body_bytes: int) -> None:
        """Sessions idle for `idle_timeout_s` end, at most `max_sessions` are open (a new one is answered 503 past
        it), and the SDK reads no request body over `max_body_bytes`."""
        self._sdk = StreamableHTTPSessionManager(
            server, stateless=True, json_response=True, max_request_body_size=max_body_bytes
        )
        self.sessions = HandshakeSessions(max_sessions, idle_timeout_s, time.monotonic)
        self._door = HandshakeDoor(StreamableHTTPASGIApp(self._sdk), self.sessions)
        self._reap_every_s = min(REAP_INTERVAL_S, max(idle_timeout_s / 10, 0.01))

    @property
    def app(self) -> Server[Any]:
        """The MCP server it serves."""
        return self._sdk.app

    @property
    def endpoint(self) -> ASGIApp:
        """/mcp, as a plain ASGI app."""
        return self._door

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve: the SDK's task group runs, idle sessions end; on the way out every session ends."""
        async with self._sdk.run():
            reaper = asyncio.create_task(self._reap(), name="mcpg idle sessions")
            try:
                yield
            finally:
                reaper.cancel()
                await asyncio.gather(reaper, return_exceptions=True)
                await self._door.end_all()

    def owners(self) -> dict[str, str]:
        """Each open session's id -> the principal (the credential's client_id) that opened it."""
        return self.sessions.owners()

    async def end(self, session_id: str) -> None:
        """End the session as a DELETE would: its id answers 404 from now on, its GET stream ends."""
        await self._door.end(session_id)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(self._reap_every_s)
            for session_id in self.sessions.expired():
                logger.debug("session %s: idle past its timeout, ended", session_id[:8])
                await self._door.end(session_id)


def session_manager(
    server: Server[Any], *, idle_timeout_s: float, max_sessions: int, max_body_bytes: int
) -> SessionManager:
    """The manager for `server` (see `SessionManager`)."""
    return SessionManager(
        server, idle_timeout_s=idle_timeout_s, max_sessions=max_sessions, max_body_bytes=max_body_bytes
    )


def asgi_app(manager: SessionManager) -> ASGIApp:
    """The manager's /mcp endpoint as a plain ASGI app."""
    return manager.endpoint
