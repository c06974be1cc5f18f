"""The public HTTP surface (port 8080): /mcp, the webhook route, health, and the server card.

/mcp classifies each request first, once, as the SDK will read it (`mcp_requests.Front`), then checks the Origin
(`origins.py`), the bearer token (`identity.protect`: the SDK's auth middleware), the principal's share of sessions
(`sessions.py`), and last the body: read within its bound and its envelope checked (`mcp_requests.Envelope`),
before the SDK reads it. The webhook route is gated by its token in the path, and health by nothing. /readyz
answers 503 while the gateway is stopping, and on a bus once the bus has been unreachable for longer than a short
grace, or while an event source another gateway reaches has been unreachable from here for a while (`peers.py`).
The server card (`card.py`) is gated by nothing either, because it holds no secret: it is served at
`/mcp/server-card` (which never reaches the MCP endpoint: only `/mcp` itself does) and at its first home, with the
AI Catalog pointing at it; each is encoded once per configuration served, and with `server.server_card` off all
three answer 404 like any unknown path. The Origin rule knows the public port's bind address: loopback means local.

The MCP session manager is not tied to a Starlette lifespan here: `servers.py` enters it around both servers,
so a shutdown can answer listen streams first and close sessions before the HTTP servers stop.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpg_gateway import card, identity, mcp_requests, origins, sessions, webhook_route
from mcpg_gateway.contract import config
from mcpg_gateway.gateway import Gateway
from mcpg_gateway.sdk import manager as managers
from mcpg_gateway.sdk import surface

CARD_CACHE_CONTROL = "public, max-age=300"
"""A directory may keep the card a few minutes: it changes only with a new configuration."""
PUBLISHED_HEADERS = {"Cache-Control": CARD_CACHE_CONTROL, "Access-Control-Allow-Origin": "*"}
"""Any page may read the card and the catalog (the Server Card extension asks it of card hosts): they are public,
read-only and hold nothing a caller could not learn by connecting."""


def build(gw: Gateway, manager: managers.SessionManager, bind_host: str | None = None) -> ASGIApp:
    """The webhook route (plain ASGI, see webhook_route.py) in front of a Starlette app for the rest. Every bound
    and rule here is read from the configuration served when a request needs it, so one applied in place
    (`reconfigure.py`) governs the next request. `bind_host`: the public port's bind address, for the Origin
    rule (`origins.py`; not known when not given)."""
    # Innermost, so each request's stream is the SDK's own response (`streams.py`).
    sdk_app = gw.fanout.capture(managers.asgi_app(manager))
    # Behind authentication, so no unknown caller has a body read, and the session limit knows whose session a
    # request would open (`sessions.py`); the limit first, as it needs no body.
    bounded = mcp_requests.Envelope(sdk_app, lambda: mcp_requests.bounds_of(gw.config.gateway.limits), gw.metrics)
    per_principal = sessions.SessionLimit(
        bounded, manager.sessions, lambda: gw.config.gateway.limits.sessions_per_principal, gw.metrics
    )
    origins_now = lambda: gw.config.gateway.server.allowed_origins  # noqa: E731  # a getter, named for the line
    guarded = origins.OriginGuard(identity.protect(per_principal, gw.identity, gw.metrics), origins_now, bind_host)
    mcp_endpoint = mcp_requests.Front(guarded)
    routes = [
        Route("/mcp", endpoint=mcp_endpoint),
        Route("/healthz", endpoint=_healthz),
        Route("/readyz", endpoint=_readyz(gw)),
        *_card_routes(gw, surface.of(manager)),
    ]

    async def fire(uri: str) -> None:
        await gw.announce(uri, "webhook")

    server = lambda: gw.config.gateway.server  # noqa: E731
    counters = webhook_route.Counters(gw.metrics.webhook_requests, gw.metrics.webhook_signatures)
    rest = webhook_route.WebhookRoute(
        gw.webhooks, fire, server, counters, Starlette(routes=routes), gw.deliveries, bind_host=bind_host
    )
    return _mcp_first(mcp_endpoint, rest)


def _mcp_first(mcp_endpoint: ASGIApp, app: ASGIApp) -> ASGIApp:
    """/mcp straight to its endpoint, everything else through `app` (the webhook route, then Starlette): each
    router's frame stays on a request's stack for as long as it runs, and an SSE stream runs as long as it is open
    (Starlette's about 2 KB a stream, the webhook route's 300 bytes). `app` routes /mcp the same way, for anything
    that reaches it there."""

    async def routed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await mcp_endpoint(scope, receive, send)
        else:
            await app(scope, receive, send)

    return routed


async def _healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _card_routes(gw: Gateway, served: surface.Surface) -> list[Route]:
    """The card where the Server Card extension reserves it, at its first home (as plain JSON, as it always was
    served there), and the AI Catalog that points at it."""

    def card_of(cfg: config.GatewayConfig) -> dict[str, Any]:
        return card.server_card(cfg, served)

    def catalog_of(cfg: config.GatewayConfig) -> dict[str, Any]:
        return card.ai_catalog(served)

    return [
        Route(card.CARD_PATH, endpoint=_published(gw, card.CARD_MEDIA_TYPE, card_of), methods=["GET"]),
        Route(card.PATH, endpoint=_published(gw, "application/json", card_of), methods=["GET"]),
        Route(card.CATALOG_PATH, endpoint=_published(gw, card.CATALOG_MEDIA_TYPE, catalog_of), methods=["GET"]),
    ]


def _published(
    gw: Gateway, media_type: str, document: Callable[[config.GatewayConfig], dict[str, Any]]
) -> Callable[[Request], Awaitable[Response]]:
    """A public document of the configuration served, encoded once per configuration; with `server.server_card`
    off it answers 404 like any unknown path."""
    encoded: dict[int, bytes] = {}

    async def published(request: Request) -> Response:
        cfg = gw.config
        if not cfg.gateway.server.server_card:
            return PlainTextResponse("Not Found", status_code=404)  # as Starlette answers a path it does not route
        body = encoded.get(id(cfg))
        if body is None:
            encoded.clear()  # one configuration's document at a time
            body = encoded[id(cfg)] = json.dumps(document(cfg)).encode()
        return Response(body, media_type=media_type, headers=PUBLISHED_HEADERS)

    return published


def _readyz(gw: Gateway) -> Callable[[Request], Awaitable[Response]]:
    async def readyz(request: Request) -> Response:
        reason = gw.unready_reason()
        if reason is not None:
            return JSONResponse({"ok": False, "reason": reason}, status_code=503)
        return JSONResponse({"ok": True})

    return readyz
