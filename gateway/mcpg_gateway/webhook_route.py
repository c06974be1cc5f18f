"""The webhook route: `POST /webhooks/resource-updated/{token}` fires the one resource its token selects.

The token index and the passive watch are the webhook strategy's (`strategies/webhook.py`); this is the HTTP
side only. The route is a plain ASGI app in front of the public Starlette app, answering all of `/webhooks/` in JSON
(the Origin rule is `origins.py`'s; request framing and head limits are `connections.py`'s). It is the gateway's
hottest path (every upstream change arrives here) and needs nothing a framework adds; Starlette's router and
middleware cost more than the handler itself (see docs/performance-notes.md). Only the token in the path selects
the resource. Without a `signature` block the body is consumed up to a small bound and never used; with one it
is read up to that block's bound, verified (`signatures.py`), and dropped: a notification carries only the URI.
A delivery that fails verification is answered 401 naming the check that failed, never which secret; a signed
delivery id seen before is refused as a replay (`replays.py`), and forgotten again if the fire cannot go out,
so the sender's retry is let through.

On a bus the route announces the fire to every gateway; when the bus cannot take it the route answers 503
(the sender retries) rather than 200 for a change only this process's subscribers would hear of.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span, SpanKind
from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpg_gateway import origins, replays, signatures, tracing
from mcpg_gateway.contract import config
from mcpg_gateway.errors import BusUnavailableError
from mcpg_gateway.strategies.webhook import Route, TokenIndex

PREFIX = "/webhooks/resource-updated/"
NAMESPACE = "/webhooks/"
"""The route answers every path under it, in JSON: one with no route is a 404 like an unknown token's."""

ROUTE = PREFIX + "{token}"
SPAN = f"POST {ROUTE}"
"""The webhook span's name, as OpenTelemetry's HTTP conventions name a server span: the method and the route."""
SPAN_ATTRIBUTES = {"http.request.method": "POST", "http.route": ROUTE, tracing.STRATEGY: "webhook"}


@dataclass(frozen=True, slots=True)
class Counters:
    """The route's metrics: every request by result, and every signed delivery by scheme and check."""

    requests: Counter
    signatures: Counter


Fire = Callable[[str], Awaitable[None]]
"""Tell the subscribers of a URI that it changed; raises `BusUnavailableError` when that cannot reach them all."""


class WebhookRoute:
    """The route, in front of `fallback` (the public app), which gets every other request unchanged."""

    def __init__(
        self,
        index: TokenIndex,
        fire: Fire,
        server: Callable[[], config.ServerConfig],
        counters: Counters,
        fallback: ASGIApp,
        deliveries: replays.Deliveries | None = None,
        bind_host: str | None = None,
    ) -> None:
        """`index` is swapped in place by a new configuration; `server`: its `gateway.server`, asked per request;
        `deliveries`: the signed delivery ids seen (a process of its own without a bus when not given);
        `bind_host`: the public port's bind address, for the Origin rule (not known when not given)."""
        self.index, self.fire, self.server, self.fallback = index, fire, server, fallback
        self.bind_host = bind_host
        self.deliveries = deliveries if deliveries is not None else replays.Deliveries(None)  # it has a len()
        requests = counters.requests
        # Label children resolved once: a labels() lookup per request is measurable on this path.
        self.ok, self.unknown = requests.labels("ok"), requests.labels("unknown_token")
        self.forbidden, self.too_large = requests.labels("forbidden_origin"), requests.labels("too_large")
        self.bus_unavailable, self.unsigned = requests.labels("bus_unavailable"), requests.labels("signature_refused")
        self._signatures = counters.signatures
        self._checked: dict[tuple[str, str], Counter] = {}
        """Label children of the signature counter by (scheme, check), resolved on first use (see above)."""

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
        if not origins.allowed(scope["headers"], server.allowed_origins, self.bind_host):
            self.forbidden.inc()
            return 403, origins.REFUSAL
        route = self.index.lookup(scope["path"][len(PREFIX) :])
        verifier = route.verifier if route is not None else None
        if verifier is not None and (early := _refused_by_headers(verifier, headers)) is not None:
            return self._refused(verifier.scheme, early)
        limit = verifier.max_body_bytes if verifier is not None else server.max_webhook_body_bytes
        body = await _body_within(headers.get(b"content-length"), receive, limit, keep=verifier is not None)
        if body is None:
            self.too_large.inc()
            return 413, {"error": f"request body too large (at most {limit} bytes)"}
        if route is None:
            self.unknown.inc()
            return 404, {"error": "unknown webhook token"}
        span.set_attributes({tracing.URI: route.uri, tracing.WATCH: route.name})
        if verifier is None:
            return await self._fire(route.uri)
        return await self._signed(route, verifier, headers, body)

    async def _signed(
        self, route: Route, verifier: signatures.Verifier, headers: dict[bytes, bytes], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """Fire a signed delivery once its signature verifies and its id (if the scheme signs one) is new."""
        verdict = verifier.verify(headers, body, time.time())
        if verdict.ok and verdict.delivery_id is not None:
            try:
                fresh = await self.deliveries.first(route.uri, verdict.delivery_id, 2.0 * verifier.tolerance_s)
            except BusUnavailableError as e:
                return self._unavailable(e)
            if not fresh:
                verdict = signatures.Verdict("replay", "this delivery id was let through before; it fires once")
        if not verdict.ok:
            return self._refused(verifier.scheme, verdict)
        self._counted(verifier.scheme, verdict.check).inc()
        status, answer = await self._fire(route.uri)
        if status != 200 and verdict.delivery_id is not None:
            await self.deliveries.forget(route.uri, verdict.delivery_id)
        return status, answer

    def _unavailable(self, error: BusUnavailableError) -> tuple[int, dict[str, Any]]:
        """503: the bus could not take the fire (or record its id), so the sender should retry."""
        self.bus_unavailable.inc()
        return 503, {"error": f"{error}; retry later"}

    def _refused(self, scheme: str, verdict: signatures.Verdict) -> tuple[int, dict[str, Any]]:
        self._counted(scheme, verdict.check).inc()
        self.unsigned.inc()
        return 401, {"error": f"signature check failed: {verdict.detail}", "check": verdict.check}

    def _counted(self, scheme: str, check: str) -> Counter:
        child = self._checked.get((scheme, check))
        if child is None:
            child = self._checked[scheme, check] = self._signatures.labels(scheme, check)
        return child

    async def _fire(self, uri: str) -> tuple[int, dict[str, Any]]:
        try:
            await self.fire(uri)
        except BusUnavailableError as e:
            return self._unavailable(e)
        self.ok.inc()
        return 200, {"ok": True, "uri": uri}


HEADER_CHECKS = frozenset({"missing_header", "malformed_header", "stale_timestamp"})
"""The checks a delivery's headers decide alone: one failing them is refused before its body is read."""


def _refused_by_headers(verifier: signatures.Verifier, headers: dict[bytes, bytes]) -> signatures.Verdict | None:
    """The verdict on a delivery whose headers are missing, malformed or stale, or None. Asked of the headers with
    an empty body, so a sender that cannot pass them never has up to `max_body_bytes` read and hashed; every
    scheme checks its headers before its signature, so an empty body only makes the signature fail."""
    verdict = verifier.verify(headers, b"", time.time())
    return verdict if verdict.check in HEADER_CHECKS else None


async def _body_within(declared: bytes | None, receive: Receive, limit: int, keep: bool) -> bytes | None:
    """The body (empty unless `keep`), or None as soon as it exceeds `limit`; a discarded body is never buffered."""
    if declared is not None and _declares_over(declared, limit):
        return None
    seen, parts = 0, list[bytes]()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts)  # the client went away; nothing to answer
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            return None
        if keep:
            parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


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
