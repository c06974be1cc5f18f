"""The SDK's Streamable HTTP session manager, built as the gateway serves it, and its ASGI app.

Stateful, because handshake-era clients are told of changes only on their session's GET stream (stateless
sessions have none). The manager is entered around both HTTP servers (`servers.py`), not tied to a Starlette
lifespan, so a shutdown can end listen streams before it closes the sessions. Its constructor's knobs are the
SDK's names; the gateway passes its own configuration's values here, once.
"""

from __future__ import annotations

from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.types import ASGIApp

SessionManager = StreamableHTTPSessionManager
"""The SDK's session manager: `async with manager.run():` serves its sessions; `.app` is the MCP server."""


def session_manager(
    server: Server[Any], *, idle_timeout_s: float, max_sessions: int, max_body_bytes: int
) -> SessionManager:
    """A stateful manager for `server`: sessions idle for `idle_timeout_s` end, at most `max_sessions` are open
    (the SDK answers 503 past it), and no request body over `max_body_bytes` is read."""
    return StreamableHTTPSessionManager(
        server,
        stateless=False,
        session_idle_timeout=idle_timeout_s,
        max_sessions=max_sessions,
        max_request_body_size=max_body_bytes,
    )


def asgi_app(manager: SessionManager) -> ASGIApp:
    """The manager's /mcp endpoint as a plain ASGI app."""
    return StreamableHTTPASGIApp(manager)


def stateful(manager: SessionManager) -> bool:
    """Whether `manager` keeps sessions: the only way a resources/subscribe can be told anything."""
    return not manager.stateless
