"""The public HTTP surface (port 8080): /mcp, the webhook route, and health.

/mcp checks the Origin first (`origins.py`), then the bearer token (`identity.protect`: the SDK's auth
middleware); the webhook route is gated by its token in the path, and health by nothing. /readyz answers 503
while the gateway is stopping, and on a bus once the bus has been unreachable for longer than a short grace.

The MCP session manager is not tied to a Starlette lifespan here: `servers.py` enters it around both servers,
so a shutdown can answer listen streams first and close sessions before the HTTP servers stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from mcpg_gateway import identity, origins, webhooks
from mcpg_gateway.gateway import Gateway


def build(gw: Gateway, manager: StreamableHTTPSessionManager) -> ASGIApp:
    """The webhook route (plain ASGI, see webhooks.py) in front of a Starlette app for the rest."""
    server = gw.config.gateway.server
    mcp_endpoint = origins.OriginGuard(
        identity.protect(StreamableHTTPASGIApp(manager), gw.identity, gw.metrics), server.allowed_origins
    )
    routes = [
        Route("/mcp", endpoint=mcp_endpoint),
        Route("/healthz", endpoint=_healthz),
        Route("/readyz", endpoint=_readyz(gw)),
    ]

    async def fire(uri: str) -> None:
        await gw.announce(uri, "webhook")

    return webhooks.WebhookRoute(gw.webhooks, fire, server, gw.metrics.webhook_requests, Starlette(routes=routes))


async def _healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _readyz(gw: Gateway) -> Callable[[Request], Awaitable[Response]]:
    async def readyz(request: Request) -> Response:
        reason = gw.unready_reason()
        if reason is not None:
            return JSONResponse({"ok": False, "reason": reason}, status_code=503)
        return JSONResponse({"ok": True})

    return readyz
