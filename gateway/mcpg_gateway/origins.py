"""The Origin posture of the public port, one rule for `/mcp` and the webhook route.

A request with no Origin header (a server-to-server sender, a non-browser client) passes; otherwise it must carry
exactly one Origin header, whose value is listed exactly in `gateway.server.allowed_origins`. Anything else is
refused with 403: an empty value, `null` (unless listed), two Origin headers even if equal. The two routes used
to read a repeated header differently (one the first, one the last) and an empty one differently (one passed
it), so a request could pass one route's check and fail the other's. This stops a page on another site from
triggering watches or talking to `/mcp` with a user's browser; it authenticates nobody.

Loopback means local: a gateway bound to a loopback address also accepts the local origins (`http` or `https`,
host `localhost`, `127.0.0.1` or `[::1]`, any port), as a local MCP server must against DNS rebinding (the
page of a rebound name carries that name's origin, never a local one). The listed origins are added to these,
not replaced by them: only local processes reach a loopback port, and a local page adds nothing they could not
do without a browser, so refusing local origins would protect nothing and adding a listed origin would silently
revoke them. Any other binding (the default 0.0.0.0 included) keeps the listed origins alone.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

REFUSAL = {"error": "origin not allowed"}

# An origin as a browser serializes it (RFC 6454): lower case, no path, no trailing slash, no userinfo.
_LOCAL_ORIGIN = re.compile(r"https?://(?:localhost|127\.0\.0\.1|\[::1\])(?::(?P<port>[0-9]{1,5}))?")


def loopback(bind_host: str | None) -> bool:
    """Whether the public port is bound to a loopback address (`localhost`, 127.0.0.0/8, `::1`); None: unknown."""
    if bind_host is None:
        return False
    host = bind_host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve anywhere
        return False


def local(origin: str) -> bool:
    """Whether `origin` is a local one: http or https, host localhost, 127.0.0.1 or [::1], an optional port."""
    match = _LOCAL_ORIGIN.fullmatch(origin)
    return match is not None and int(match["port"] or 0) <= 65535


def allowed(headers: Iterable[tuple[bytes, bytes]], allowed_origins: list[str], bind_host: str | None) -> bool:
    """The rule, over a request's raw ASGI headers (names lower-cased, as ASGI servers give them), the configured
    origins and the public port's bind address (None: not known, so not loopback)."""
    found = [value for name, value in headers if name == b"origin"]
    if not found:
        return True
    # An empty value is refused even if "" were listed: it names no origin.
    if len(found) != 1 or found[0] == b"":
        return False
    origin = found[0].decode("latin-1")
    return origin in allowed_origins or (loopback(bind_host) and local(origin))


class OriginGuard:
    """Refuse, with 403, browser requests from origins the rule refuses (`allowed_origins` asked per request: the
    configuration served; `bind_host`: the public port's bind address)."""

    def __init__(self, app: ASGIApp, allowed_origins: Callable[[], list[str]], bind_host: str | None) -> None:
        self.app, self.allowed_origins, self.bind_host = app, allowed_origins, bind_host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not allowed(scope["headers"], self.allowed_origins(), self.bind_host):
            await JSONResponse(REFUSAL, status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)
