"""`POST /webhooks/resource-updated/{token}` as a plain ASGI app in front of the public Starlette app.

It is the gateway's hottest route (every upstream change arrives here) and needs nothing a framework adds, so it
skips Starlette's router and middleware stack: that stack cost more than the handler itself (webhook throughput on
one core went from 0.58x to the figure in docs/benchmarks.md of a bare ASGI endpoint). Every other path falls
through to the Starlette app unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mcpg_gateway import webhooks
from mcpg_gateway.service import Gateway

PREFIX = "/webhooks/resource-updated/"


class WebhookRoute:
    def __init__(self, gw: Gateway, fallback: ASGIApp) -> None:
        self.gw, self.fallback = gw, fallback
        self.server = gw.config.gateway.server
        # Label children resolved once: a labels() lookup per request is measurable on this path.
        count = gw.metrics.webhook_requests
        self.ok, self.unknown = count.labels("ok"), count.labels("unknown_token")
        self.forbidden, self.too_large = count.labels("forbidden_origin"), count.labels("too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.fallback(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _respond(send, 405, {"error": "use POST"}, [(b"allow", b"POST")])
            return
        status, body = await self._handle(scope, receive)
        await _respond(send, status, body)

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        headers = {name.lower(): value for name, value in scope["headers"]}
        origin = headers.get(b"origin")
        if not webhooks.origin_allowed(origin.decode("latin-1") if origin else None, self.server.allowed_origins):
            self.forbidden.inc()
            return 403, {"error": "origin not allowed"}
        if not await _body_within(headers.get(b"content-length"), receive, self.server.max_webhook_body_bytes):
            self.too_large.inc()
            return 413, {"error": "request body too large"}
        route = self.gw.tokens.lookup(scope["path"][len(PREFIX) :])
        if route is None:
            self.unknown.inc()
            return 404, {"error": "unknown webhook token"}
        await self.gw.registry.fire(route.uri, "webhook")
        self.ok.inc()
        return 200, {"ok": True, "uri": route.uri}


async def _body_within(declared: bytes | None, receive: Receive, limit: int) -> bool:
    """Consume (and discard) the body, stopping as soon as it exceeds `limit`; never buffers it."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return False
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return True  # the client went away; nothing to answer
        seen += len(message.get("body", b""))
        if seen > limit:
            return False
        if not message.get("more_body", False):
            return True


async def _respond(
    send: Send, status: int, body: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": payload})
