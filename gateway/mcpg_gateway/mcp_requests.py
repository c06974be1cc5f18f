"""An /mcp request as the gateway reads it, once, before the SDK reads any of it.

How the SDK routes a request (its era, the session it names or opens) is the SDK's knowledge (`sdk/requests.py`).
The session limit once read the headers its own way, and a request carrying two versions opened sessions it never
counted (issue 30). So `Front`, outermost on /mcp, classifies each request once, the SDK's way, into an
`McpRequest` kept in the scope, and every later reader (the session limit, the stream index) takes it (`of`).

What a client chooses it may not make costly: ids, `_meta` and initialize's parameters live as long as their
stream or session, and a listen's id is copied into every notification. `Envelope`, behind authentication (an
unknown caller costs no read), reads a POST body within `body_limit` (413; a listen, whose body the SDK keeps for
the stream's life, within its own smaller `listen_body_limit`), refuses an id, `_meta` or initialize parameters
over its bound (400, naming it), and hands the SDK the very bytes it read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpg_gateway.contract import config, uris
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.sdk.protocol import INVALID_PARAMS, INVALID_REQUEST

# The SDK's reading of a request's headers, which the gateway's readers take from here (with `of`).
from mcpg_gateway.sdk.requests import LAST_EVENT_ID_HEADER, Era, McpRequest, classify, first, parsed

SCOPE_KEY = "mcpg.request"
CONTENT_LENGTH_HEADER = b"content-length"

ID_MAX_BYTES = 256
"""A request id's compact JSON at most. Clients use counters and UUIDs (under 40 bytes); a listen's id is copied
into every notification its stream carries."""
META_MAX_BYTES = 16 * 1024
"""A request's `params._meta` at most. In the 2026-07-28 era it carries the protocol version, client info and
capabilities in every request (well under 2 KiB from real clients); a listen keeps it for the stream's life."""
INITIALIZE_PARAMS_MAX_BYTES = 64 * 1024
"""initialize's `params` at most (version, client info with its icons, capabilities): kept for the session's life."""
BODY_FLOOR_BYTES = 256 * 1024
"""The least body bound. Parsing is not interruptible and the SDK parses the body again after the check: a
256 KiB body holds the loop a few milliseconds per parse, 1 MiB ones were measured at 10 to 30 ms."""
PER_URI_BYTES = 2 * uris.MAX_URI_CHARS + 16
"""One URI of a listen in JSON: a served URI is ASCII without `"` or `\\`, so its characters, twice at most (for
an encoder that writes `/` as `\\/`), plus quotes, a comma and some whitespace."""
ENVELOPE_BYTES = ID_MAX_BYTES + META_MAX_BYTES + 4 * 1024
"""The rest of a listen: its id, `_meta`, method and member names."""
BODY_CEILING_BYTES = 4 * 1024 * 1024
"""The most any bound derived from the configuration may be (the SDK's own default): a `watches_per_principal` in
the millions must not make the gateway read gigabytes. A listen of that many of the longest URIs then does not fit,
and is refused by its size."""
YIELD_AFTER_BYTES = 16 * 1024
"""Past this size, the loop runs other work between the check's parse and the SDK's."""


def listen_body_limit(limits: config.LimitsConfig) -> int:
    """The most a subscriptions/listen body may be: as many URIs as a principal may hold, each as long as a served
    URI may be, always fit (up to `BODY_CEILING_BYTES`). The SDK keeps a listen's body (and what it parsed of it)
    for the stream's whole life, so the bound is the listen's need, not the floor of other requests."""
    return min(BODY_CEILING_BYTES, limits.watches_per_principal * PER_URI_BYTES + ENVELOPE_BYTES)


def bounds_of(limits: config.LimitsConfig) -> tuple[int, int]:
    """(`body_limit`, `listen_body_limit`) of `limits`: what `Envelope` reads."""
    return body_limit(limits), listen_body_limit(limits)


def body_limit(limits: config.LimitsConfig) -> int:
    """The most of an /mcp request body the gateway reads: a listen's bound, never less than `BODY_FLOOR_BYTES`."""
    return max(BODY_FLOOR_BYTES, listen_body_limit(limits))


# --- classification ---------------------------------------------------------------------------------------------


def of(scope: Scope) -> McpRequest:
    """The request's classification, made by `Front` (or made now, for a caller that did not come through it)."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, McpRequest) else classify(scope)


class Front:
    """Outermost on /mcp: each request classified once, into the scope; `Last-Event-ID` dropped.

    The gateway keeps no event store, and the SDK cannot resume a GET stream without one (`LAST_EVENT_ID_HEADER`).
    The spec lets a server that does not resume ignore the header: the GET is served as a fresh stream."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            if any(name == LAST_EVENT_ID_HEADER for name, _ in headers):
                scope["headers"] = [(name, value) for name, value in headers if name != LAST_EVENT_ID_HEADER]
            scope[SCOPE_KEY] = classify(scope)
        await self._app(scope, receive, send)


# --- the body and its envelope ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is answered here instead of by the SDK: the HTTP status, the JSON-RPC code, the words."""

    status: int
    code: int
    message: str


def check(body: bytes, era: Era, listen_limit: int) -> Refusal | None:
    """Why `body` is refused, or None: the SDK gets it as it is. Only a JSON object read by the SDK's own parser
    for `era` is checked; anything else (not JSON, a batch, a scalar) the SDK refuses in its own words."""
    decoded = parsed(body, era)
    if not isinstance(decoded, dict):
        return None
    if decoded.get("method") == "subscriptions/listen" and len(body) > listen_limit:
        return Refusal(
            413,
            INVALID_REQUEST,
            f"a subscriptions/listen body is more than {listen_limit} bytes, the gateway's bound for one (as many of "
            "the longest URIs as a principal may hold)",
        )
    if "id" in decoded and (refusal := _id_refusal(decoded["id"])) is not None:
        return refusal
    params = decoded.get("params")
    if not isinstance(params, dict):
        return None
    if "_meta" in params and _over(params["_meta"], META_MAX_BYTES):
        return Refusal(
            400, INVALID_PARAMS, f"params._meta is more than {META_MAX_BYTES} bytes of JSON, the gateway's bound"
        )
    if decoded.get("method") == "initialize" and _over(params, INITIALIZE_PARAMS_MAX_BYTES):
        return Refusal(
            400,
            INVALID_PARAMS,
            f"initialize's params are more than {INITIALIZE_PARAMS_MAX_BYTES} bytes of JSON, the gateway's bound",
        )
    return None


def _id_refusal(request_id: object) -> Refusal | None:
    if _over(request_id, ID_MAX_BYTES):
        return Refusal(
            400, INVALID_REQUEST, f"the request's id is more than {ID_MAX_BYTES} bytes of JSON, the gateway's bound"
        )
    if isinstance(request_id, str) and not _is_unicode(request_id):
        # json reads "\ud800" as a lone surrogate, which no notification carrying the id could be encoded with.
        return Refusal(400, INVALID_REQUEST, "the request's id is not valid Unicode text (it holds a lone surrogate)")
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _over(value: object, limit: int) -> bool:
    """Whether `value` as compact JSON in UTF-8 (how the gateway writes an id into a frame; lone surrogates
    counted as 3 bytes) takes more than `limit` bytes. By json's C encoder (a read body is bounded, so is this);
    a value nested too deep for it is measured by `_over_walked` instead."""
    try:
        encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:  # json read deeper than it writes: close to the interpreter's recursion limit
        return _over_walked(value, limit)
    return len(encoded) > limit or len(encoded.encode("utf-8", "surrogatepass")) > limit  # bytes >= characters


def _over_walked(value: object, limit: int) -> bool:
    """`_over`, iteratively, stopping at the limit: no nesting is too deep, and the cost is bounded by `limit`."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            total += 1 + 2 * len(item) if item else 2  # braces, a colon per member, commas between
            if total <= limit:
                for key, member in item.items():
                    stack.extend((key, member))
        elif isinstance(item, list):
            total += 1 + len(item) if item else 2  # brackets, commas between
            if total <= limit:
                stack.extend(item)
        else:
            total += _scalar_size(item, limit - total)
        if total > limit:
            return True
    return False


def _scalar_size(item: object, room: int) -> int:
    if isinstance(item, str):
        if len(item) + 2 > room:  # each character is a byte at least: no need to encode it to know
            return len(item) + 2
        return len(json.dumps(item, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if item is None or item is True:
        return 4
    if item is False:
        return 5
    if isinstance(item, int):
        return len(str(item))  # both parsers refuse integers of more than 4,300 digits, as str() does
    return len(json.dumps(item))  # a float, as json writes it (`Infinity`, `NaN` included)


class Envelope:
    """Behind authentication on /mcp: a POST's body read within its bound and checked, then handed to the SDK.

    `bounds` says (body, listen body) per request, from the configuration served (`bounds_of`): a new one applied
    in place (`reconfigure.py`) bounds the next request."""

    def __init__(self, app: ASGIApp, bounds: Callable[[], tuple[int, int]], metrics: Metrics) -> None:
        self._app, self._bounds, self._refusals = app, bounds, metrics.refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)  # the SDK reads no other request's body
            return
        limit, listen_limit = self._bounds()
        if _declares_over(first(scope["headers"], CONTENT_LENGTH_HEADER), limit):
            await self._refuse(send, _too_large(limit))  # told by its head: not a byte of it is read
            return
        body = await _read(receive, limit)
        if body is None:
            return  # the client left before its body was in: there is no one to answer
        refusal = _too_large(limit) if len(body) > limit else check(body, of(scope).era, listen_limit)
        if refusal is not None:
            await self._refuse(send, refusal)
            return
        if len(body) > YIELD_AFTER_BYTES:
            await asyncio.sleep(0)  # the check's parse and the SDK's do not hold the loop back to back
        replay = _Replay(body, receive)
        del body  # not held here for as long as the request lasts (a listen: the stream's life)
        await self._app(scope, replay, send)

    async def _refuse(self, send: Send, refusal: Refusal) -> None:
        # A fixed label: the JSON-RPC method is the client's text, never a label value.
        self._refusals.labels("request", str(refusal.code)).inc()
        await answer_error(send, refusal.status, refusal.code, refusal.message)


def _too_large(limit: int) -> Refusal:
    return Refusal(413, INVALID_REQUEST, f"the request body is more than {limit} bytes, the gateway's bound for /mcp")


def _declares_over(declared: str | None, limit: int) -> bool:
    """A Content-Length over `limit`, told without `int()` of every length (Python refuses 4,300 digits and more).
    Anything but digits is left to the read, which is bounded anyway."""
    if declared is None or not (declared.isascii() and declared.isdigit()):
        return False
    digits = declared.lstrip("0")
    return len(digits) > len(str(limit)) or int(digits or "0") > limit


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or as soon as it is over `limit` what came so far; None if the client left first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit or not message.get("more_body", False):
            return b"".join(chunks)


class _Replay:
    """The `receive` the SDK gets: the body already read, whole, once; then the server's own (so a disconnect is
    still seen)."""

    __slots__ = ("_body", "_receive")

    def __init__(self, body: bytes, receive: Receive) -> None:
        self._body: bytes | None = body
        self._receive = receive

    async def __call__(self) -> Message:
        body, self._body = self._body, None
        if body is None:
            return await self._receive()
        return {"type": "http.request", "body": body, "more_body": False}


async def answer_error(send: Send, status: int, code: int, message: str) -> None:
    """A JSON-RPC error as the whole HTTP response, with `id: null`: the id may be what is refused."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
