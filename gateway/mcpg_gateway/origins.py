"""The Origin posture of the public port, one rule for `/mcp` and the webhook route.

A request with no Origin (a server-to-server sender, a non-browser client) passes; a browser's Origin must be
listed exactly in `gateway.server.allowed_origins`. This stops a page on another site from triggering watches
or talking to `/mcp` with a user's browser; it authenticates nobody.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send


def allowed(origin: str | None, allowed_origins: list[str]) -> bool:
    return origin is None or origin in allowed_origins


class OriginGuard:
    """Refuse, with 403, browser requests from origins not in `allowed_origins`."""

    def __init__(self, app: ASGIApp, allowed_origins: list[str]) -> None:
        self.app, self.allowed_origins = app, allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not allowed(Request(scope).headers.get("origin"), self.allowed_origins):
            await JSONResponse({"error": "origin not allowed"}, status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)
