"""The Origin posture of the public port, one rule for `/mcp` and the webhook route.

A request with no Origin header (a server-to-server sender, a non-browser client) passes; otherwise it must carry
exactly one Origin header, whose value is listed exactly in `gateway.server.allowed_origins`. Anything else is
refused with 403: an empty value, `null` (unless listed), two Origin headers even if equal. The two routes used
to read a repeated header differently (one the first, one the last) and an empty one differently (one passed
it), so a request could pass one route's check and fail the other's. This stops a page on another site from
triggering watches or talking to `/mcp` with a user's browser; it authenticates nobody.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

REFUSAL = {"error": "origin not allowed"}


def allowed(headers: Iterable[tuple[bytes, bytes]], allowed_origins: list[str]) -> bool:
    """The rule, over a request's raw ASGI headers (names lower-cased, as ASGI servers give them)."""
    found = [value for name, value in headers if name == b"origin"]
    if not found:
        return True
    # An empty value is refused even if "" were listed: it names no origin.
    return len(found) == 1 and found[0] != b"" and found[0].decode("latin-1") in allowed_origins


class OriginGuard:
    """Refuse, with 403, browser requests from origins not in `allowed_origins` (asked per request: the
    configuration served)."""

    def __init__(self, app: ASGIApp, allowed_origins: Callable[[], list[str]]) -> None:
        self.app, self.allowed_origins = app, allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not allowed(scope["headers"], self.allowed_origins()):
            await JSONResponse(REFUSAL, status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)
