"""The webhook route: `POST /webhooks/resource-updated/{token}` fires the one resource its token selects.

The token index and the passive watch are the webhook strategy's (`strategies/webhook.py`); this is the HTTP
side only. The route is a plain ASGI app in front of the public Starlette app, answering all of `/webhooks/` in JSON
(the Origin rule is `origins.py`'s; request framing and head limits are `connections.py`'s). It is the gateway's
hottest path (every upstream change arrives here) and needs nothing a framework adds; Starlette's router and
middleware cost more than the handler itself (see docs/performance-notes.md). The body is consumed up to a
small bound and never used: only the token in the path selects the resource.

On a bus the route announces the fire to every gateway; when the bus cannot take it the route answers 503
(the sender retries) rather than 200 for a change only this process's subscribers would hear of.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.trace import Span, SpanKind
from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpg_gateway import origins, tracing
from mcpg_gateway.contract import config
from mcpg_gateway.errors import BusUnavailableError
from mcpg_gateway.strategies.webhook import TokenIndex

PREFIX = "/webhooks/resource-updated/"
NAMESPACE = "/webhooks/"
"""The route answers every path under it, in JSON: one with no route is a 404 like an unknown token's."""

ROUTE = PREFIX + "{token}"
SPAN = f"POST {ROUTE}"
"""The webhook span's name, as OpenTelemetry's HTTP conventions name a server span: the method and the route."""
SPAN_ATTRIBUTES = {"http.request.method": "POST", "http.route": ROUTE, tracing.STRATEGY: "webhook"}

Fire = Callable[[str], Awaitable[None]]
"""Tell the subscribers of a URI that it changed; raises `BusUnavailableError` when that cannot reach them all."""


class WebhookRoute:
    """The route, in front of `fallback` (the public app), which gets every other request unchanged."""

    def __init__(
        self,
        index: TokenIndex,
        fire: Fire,
        server: Callable[[], config.ServerConfig],
        requests: Counter,
        fallback: ASGIApp,
    ) -> None:
        """`index` is swapped in place by a new configuration; `server`: its `gateway.server`, asked per request."""
        self.index, self.fire, self.server, self.fallback = index, fire, server, fallback
        # Label children resolved once: a labels() lookup per request is measurable on this path.
        self.ok, self.unknown = requests.labels("ok"), requests.labels("unknown_token")
        self.forbidden, self.too_large = requests.labels("forbidden_origin"), requests.labels("too_large")
        self.bus_unavailable = requests.labels("bus_unavailable")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(NAMESPACE):
            await self.fallback(scope, receive, send)
            return
        if not scope["path"].startswith(PREFIX):
            await _respond(send, 404, {"error": "no webhook route here; POST to /webhooks/resource-updated/{token}"})
            return
        if scope["method"] != "POST":
            await _respond(send, 405, {"error": "use POST"}, [(b"allow", b"POST")])
            return
        status, body = await self._handle(scope, receive)
        await _respond(send, status, body)

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        headers = dict(scope["headers"])  # ASGI gives names lower-cased; the framing was checked in connections.py
        # The span names the route's template, never the path: the path holds the token.
        with tracing.span(SPAN, SPAN_ATTRIBUTES, SpanKind.SERVER, tracing.remote_parent(headers)) as span:
            status, body = await self._answer(scope, headers, receive, span)
            span.set_attribute("http.response.status_code", status)
            return status, body

    async def _answer(
        self, scope: Scope, headers: dict[bytes, bytes], receive: Receive, span: Span
    ) -> tuple[int, dict[str, Any]]:
        server = self.server()
        if not origins.allowed(scope["headers"], server.allowed_origins):
            self.forbidden.inc()
            return 403, origins.REFUSAL
        if not await _body_within(headers.get(b"content-length"), receive, server.max_webhook_body_bytes):
            self.too_large.inc()
            return 413, {"error": "request body too large"}
        route = self.index.lookup(scope["path"][len(PREFIX) :])
        if route is None:
            self.unknown.inc()
            return 404, {"error": "unknown webhook token"}
        span.set_attributes({tracing.URI: route.uri, tracing.WATCH: route.name})
        try:
            await self.fire(route.uri)
        except BusUnavailableError as e:
            self.bus_unavailable.inc()
            return 503, {"error": f"{e}; retry later"}
        self.ok.inc()
        return 200, {"ok": True, "uri": route.uri}


async def _body_within(declared: bytes | None, receive: Receive, limit: int) -> bool:
    """Consume (and discard) the body, stopping as soon as it exceeds `limit`; never buffers it."""
    if declared is not None and _declares_over(declared, limit):
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


def _declares_over(declared: bytes, limit: int) -> bool:
    """A Content-Length over `limit`, told without `int()` of every length (Python refuses 4,300 digits and more)."""
    if not declared.isdigit():
        return False  # h11 refuses such a request before any app; in-process callers get the body read instead
    digits = declared.lstrip(b"0")
    return len(digits) > len(str(limit)) or int(digits or b"0") > limit


async def _respond(
    send: Send, status: int, body: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": payload})
