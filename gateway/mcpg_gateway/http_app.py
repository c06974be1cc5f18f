"""The two HTTP surfaces. Public (8080): /mcp, the webhook route, health. Admin (9090): /metrics, /admin/v1/*.

/mcp checks the Origin first, then the bearer token (`identity.protect`: the SDK's auth middleware); the webhook
route is gated by its token in the path and health by nothing.

The MCP session manager is not tied to a Starlette lifespan here: `serving.py` enters it around both servers,
so a shutdown can answer listen streams first and close sessions before the HTTP servers stop.
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpg_gateway import identity, webhook_route, webhooks
from mcpg_gateway.service import Gateway


class OriginGuard:
    """Refuse browser requests from origins not in `gateway.server.allowed_origins` (no Origin passes)."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = Request(scope).headers.get("origin")
            if not webhooks.origin_allowed(origin, self.allowed):
                await JSONResponse({"error": "origin not allowed"}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def public_app(gw: Gateway, manager: StreamableHTTPSessionManager) -> ASGIApp:
    """The webhook route (plain ASGI, see webhook_route.py) in front of a Starlette app for the rest."""
    allowed = gw.config.gateway.server.allowed_origins
    mcp_endpoint = OriginGuard(identity.protect(StreamableHTTPASGIApp(manager), gw.identity, gw.metrics), allowed)
    routes = [
        Route("/mcp", endpoint=mcp_endpoint),
        Route("/healthz", endpoint=_healthz),
        Route("/readyz", endpoint=_readyz(gw)),
    ]
    return webhook_route.WebhookRoute(gw, Starlette(routes=routes))


async def _healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _readyz(gw: Gateway) -> Any:
    async def readyz(request: Request) -> Response:
        if gw.closing.is_set():
            return JSONResponse({"ok": False, "reason": "shutting down"}, status_code=503)
        return JSONResponse({"ok": True})

    return readyz


def admin_app(gw: Gateway) -> Starlette:
    return Starlette(
        routes=[
            Route("/metrics", endpoint=_metrics(gw)),
            Route("/admin/v1/watches", endpoint=_admin(gw, _watches)),
            Route("/admin/v1/webhooks", endpoint=_admin(gw, _webhooks)),
        ]
    )


def _metrics(gw: Gateway) -> Any:
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return metrics


def _admin(gw: Gateway, view: Any) -> Any:
    async def endpoint(request: Request) -> Response:
        expected = gw.options.admin_token
        if not expected:
            return JSONResponse(
                {"error": "the admin API is disabled: set MCPG_ADMIN_TOKEN to enable it"}, status_code=403
            )
        presented = request.headers.get("authorization", "")
        if not hmac.compare_digest(presented.encode(), f"Bearer {expected}".encode()):
            return JSONResponse(
                {"error": "missing or wrong admin token"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="mcpg-admin"'},
            )
        return JSONResponse(view(gw))

    return endpoint


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _watches(gw: Gateway) -> dict[str, Any]:
    out = []
    for w in gw.registry.watchers():
        strategy = w.binding.watch.strategy if w.binding.watch else None
        out.append(
            {
                "uri": w.uri,
                "resource": w.binding.entry.name,
                "strategy": w.strategy_type,
                "subscribers": len(w.subscribers),
                "interval_ms": getattr(strategy, "effective_interval_ms", None),
                "started": _iso(w.started_at),
                "last_fired": _iso(w.last_fired),
                "last_successful_read": _iso(w.stats.last_success),
                "last_failed_read": _iso(w.stats.last_failure),
                "failed_reads": w.stats.failures,
            }
        )
    return {"watches": out}


def _webhooks(gw: Gateway) -> dict[str, Any]:
    return {
        "webhooks": [
            {
                "resource": r.name,
                "uri": r.uri,
                "path": "/webhooks/resource-updated/{token}",
                # Only a token the gateway made up itself is shown: the user has no other way to learn it.
                "generated_token": r.generated_token,
            }
            for r in gw.tokens.routes()
        ]
    }
