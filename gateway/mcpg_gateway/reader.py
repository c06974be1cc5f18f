"""Reading a resource through its backend binding. One pooled aiohttp session serves every read.

A read returns the bytes the upstream sent (`read`), or their SHA-256 hashed as they arrive (`digest`, for a poll),
or raises `ReadError` with a message that names the resource and what was wrong, never a header value.

The gateway reads with a backend's credentials on behalf of any principal, so it trusts an upstream with nothing.
A body is counted as it is decompressed and refused past the backend's `max_response_bytes`. A redirect is followed
only if the backend opts in, and never to another origin, where it would carry the credentials. No cookie jar
carries one read's cookies into another's. Each upstream origin has its own `limits.upstream_connections`, so a
slow upstream fills only its own. `timeout_ms` bounds the whole read: the wait for a connection, the request, the body.

An upstream's `429` pauses every read of that upstream with the same credentials (`upstream_pauses.py`): a read
under a paused key raises at once, without a request, so a rate-limited upstream is left alone for a while instead
of being asked again by every watch that reads it. Both are counted by upstream (host:port, never a credential).

An upstream here is the backend's url as configured (`upstream_pauses.origin_of`): a resource template whose url
has a `{variable}` in its host reaches as many hosts as callers choose values, but it is one upstream to the
connection slots and to every metric label, so neither grows with what callers ask for. Only a pause, which an
upstream decides host by host, is kept per host actually requested.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn
from urllib.parse import quote

import aiohttp
import yarl

from mcpg_gateway import catalog, upstream_pauses
from mcpg_gateway.contract import config
from mcpg_gateway.errors import RATE_LIMITED_STATUS, ReadError
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1 << 16
"""The most one step of a body read takes. aiohttp inflates a compressed body as it is read, about this much per
step (`http_parser.DeflateBuffer` decompresses with a `max_length` taken from the reader's chunk size), so a count
of what arrived is never more than a step behind what is in memory. `ClientResponse.read()` lifts that bound."""
MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
NOT_FOLLOWED = (
    "redirects are not followed unless the backend sets follow_redirects, and then only within the upstream's origin"
)
TO_ANOTHER_ORIGIN = "to another origin, which is never followed: the request carries the backend's credentials"

Sink = Callable[[bytes], None]
"""Where a read pours its body, chunk by chunk."""


@dataclass(frozen=True, slots=True)
class Content:
    body: bytes
    mime_type: str | None
    status: int


@dataclass(frozen=True, slots=True)
class Request:
    """What a read of one binding sends, and what it is counted under: the same on every read of the binding."""

    url: yarl.URL | str
    """Rendered: the template's variables substituted; parsed here once rather than by aiohttp on every read
    (a URL that does not parse stays text, for the read to fail on as it would have)."""
    headers: dict[str, str]
    """The backend's headers, credentials in clear: never to be logged."""
    key: upstream_pauses.Key
    """What a 429 pauses (the upstream and these credentials)."""
    origin: str
    """The backend's origin as configured, whose connection slots the read takes."""


@dataclass(frozen=True, slots=True)
class _Hop:
    """One request of a read: the backend's own, or one a redirect asked for."""

    method: str
    url: str | yarl.URL
    body: str | None


def render_url(url: str, variables: dict[str, str]) -> str:
    """Substitute template variables into a backend URL, each percent-encoded as one segment."""
    for name, value in variables.items():
        url = url.replace("{" + name + "}", quote(value, safe=""))
    return url


class HttpReader:
    """Reads bindings over HTTP with one shared, pooled session (created lazily on the running loop)."""

    def __init__(self, clock: base.Clock, metrics: Metrics, upstream_connections: int) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._metrics = metrics
        self._slots = OriginSlots(upstream_connections)
        self.pauses = upstream_pauses.UpstreamPauses(clock.now)
        """The upstreams that answered 429, for the admin API (host:port; no credentials)."""

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No total limit: one pool for all upstreams is what a single slow upstream used to drain for everyone.
            # `OriginSlots` bounds each origin; aiohttp's per-host limit matches it, as a backstop.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._slots.size)
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # one jar for every principal would pass one's cookies to all
                timeout=aiohttp.ClientTimeout(),  # none of aiohttp's own: `_fetch` bounds the whole read
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def paused_for(self, binding: catalog.Binding) -> float | None:
        """Seconds left before `binding` may be read again (its upstream rate-limits it), or None."""
        return self.pauses.paused_for(upstream_pauses.key_for(*_target(binding)))

    def upstreams_in_use(self) -> list[str]:
        """The upstreams (host:port) a read is using or waiting for now; an idle one keeps no state."""
        return self._slots.in_use()

    def request(self, binding: catalog.Binding) -> Request:
        """What every read of `binding` sends: worked out once for a watch, which sends it every interval."""
        url, headers = _target(binding)
        return Request(
            _parsed(url),
            headers,
            upstream_pauses.key_for(url, headers),
            upstream_pauses.origin_of(binding.entry.backend.url),  # as configured: one per template
        )

    def digester(self, binding: catalog.Binding) -> Callable[[], Awaitable[bytes]]:
        """`digest` of `binding`, its request worked out once: what a poll calls every interval."""
        request = self.request(binding)
        return lambda: self.digest(binding, request)

    async def read(self, binding: catalog.Binding) -> Content:
        """The whole body (at most the backend's `max_response_bytes`)."""
        chunks: list[bytes] = []
        status, mime = await self._fetch(binding, self.request(binding), chunks.append)
        body = b"".join(chunks)
        if binding.entry.backend.require_json_response:
            check_json(binding.uri, body)
        return Content(body, binding.entry.mime_type or mime, status)

    async def digest(self, binding: catalog.Binding, request: Request | None = None) -> bytes:
        """The SHA-256 of the body `read` returns, hashed as it arrives so that it is never held whole; except with
        `require_json_response`, which needs the whole (capped) body to parse it. `request`: `binding`'s, if the
        caller kept it (`digester`)."""
        if binding.entry.backend.require_json_response:
            return hashlib.sha256((await self.read(binding)).body).digest()
        hasher = hashlib.sha256()
        await self._fetch(binding, request if request is not None else self.request(binding), hasher.update)
        return hasher.digest()

    async def _fetch(self, binding: catalog.Binding, request: Request, sink: Sink) -> tuple[int, str | None]:
        """Read on one of the origin's connections within `timeout_ms`, the body into `sink`: (status, mime type)."""
        backend = binding.entry.backend
        key, headers = request.key, request.headers
        self._hold_if_paused(binding, key)
        slot = self._slots.slot(request.origin)
        try:
            async with asyncio.timeout(backend.timeout_ms / 1000), slot:
                answer = await self._exchange(
                    binding, key, headers, _Hop(backend.method.upper(), request.url, backend.body), sink
                )
        except TimeoutError as e:
            if not slot.entered:
                raise self._busy(binding) from None
            raise ReadError(f"{binding.uri}: upstream did not answer within {backend.timeout_ms} ms") from e
        except aiohttp.ClientPayloadError as e:  # a Content-Length that lies, a broken gzip or chunked encoding
            raise ReadError(f"{binding.uri}: upstream's response body was cut short or malformed ({_kind(e)})") from e
        except aiohttp.ClientError as e:
            raise ReadError(f"{binding.uri}: upstream request failed ({_kind(e)})") from e
        self.pauses.succeeded(key)
        return answer

    async def _exchange(
        self, binding: catalog.Binding, key: upstream_pauses.Key, headers: dict[str, str], hop: _Hop, sink: Sink
    ) -> tuple[int, str | None]:
        """Send `hop`, and the ones redirects ask for as the backend allows; receive the last answer."""
        backend = binding.entry.backend
        for _ in range(MAX_REDIRECTS + 1):
            async with self._client().request(
                hop.method, hop.url, headers=headers, data=hop.body, allow_redirects=False
            ) as resp:
                if not _redirects(resp, backend):
                    return await self._receive(binding, key, resp, sink)
                hop = self._follow(binding, hop, resp)
        raise self._refused_redirect(binding, f"upstream redirected more than {MAX_REDIRECTS} times in a row", None)

    def _follow(self, binding: catalog.Binding, hop: _Hop, resp: aiohttp.ClientResponse) -> _Hop:
        """The request a redirect asks for, if the backend may follow it; `ReadError` saying why not otherwise."""
        redirected = f"upstream redirected (HTTP {resp.status})"
        if not binding.entry.backend.follow_redirects:
            raise self._refused_redirect(binding, f"{redirected}; {NOT_FOLLOWED}", resp.status)
        try:
            target = resp.url.join(yarl.URL(resp.headers[aiohttp.hdrs.LOCATION]))
        except ValueError:
            raise self._refused_redirect(
                binding, f"{redirected} to a Location that is not a URL", resp.status
            ) from None
        if _origin(target) != _origin(resp.url):
            raise self._refused_redirect(binding, f"{redirected} {TO_ANOTHER_ORIGIN}", resp.status)
        # As browsers and aiohttp do: 303 asks for a GET; so do 301 and 302 after a POST, by long practice.
        if (resp.status == 303 and hop.method != "HEAD") or (resp.status in (301, 302) and hop.method == "POST"):
            return _Hop("GET", target, None)
        return _Hop(hop.method, target, hop.body)

    def _refused_redirect(self, binding: catalog.Binding, why: str, status: int | None) -> ReadError:
        self._metrics.upstream_redirects_refused.labels(_upstream(binding)).inc()
        return ReadError(f"{binding.uri}: {why}", status=status)

    async def _receive(
        self, binding: catalog.Binding, key: upstream_pauses.Key, resp: aiohttp.ClientResponse, sink: Sink
    ) -> tuple[int, str | None]:
        """Judge the answer's status, then pour its body into `sink`, counting it against the backend's cap."""
        backend = binding.entry.backend
        if resp.status == RATE_LIMITED_STATUS and resp.status not in backend.expected_status_codes:
            self._rate_limited(binding, key, resp.headers.get("Retry-After"))
        check_status(binding.uri, backend, resp.status)
        cap = backend.max_response_bytes
        announced = resp.content_length if resp.method != "HEAD" else None  # HEAD: the size of a GET's body
        if announced is not None and announced > cap:
            raise self._too_large(binding, resp)
        if announced is not None and announced <= READ_CHUNK_BYTES and _identity(resp):
            # No more than one step's worth, and nothing will inflate it (the parser holds the body to its
            # Content-Length): one read instead of the loop of chunks, the common polled body.
            sink(await resp.read())
            return resp.status, resp.content_type
        received = 0
        async for chunk in resp.content.iter_chunked(READ_CHUNK_BYTES):
            received += len(chunk)
            if received > cap:
                raise self._too_large(binding, resp)
            sink(chunk)
        return resp.status, resp.content_type

    def _too_large(self, binding: catalog.Binding, resp: aiohttp.ClientResponse) -> ReadError:
        resp.close()  # the rest is never read, so the connection cannot serve another request
        self._metrics.upstream_too_large.labels(_upstream(binding)).inc()
        cap = binding.entry.backend.max_response_bytes
        return ReadError(f"{binding.uri}: upstream response is larger than max_response_bytes ({cap})")

    def _busy(self, binding: catalog.Binding) -> ReadError:
        upstream = _upstream(binding)
        self._metrics.upstream_connections_busy.labels(upstream).inc()
        return ReadError(
            f"{binding.uri}: all {self._slots.size} connections to {upstream} stayed busy for "
            f"{binding.entry.backend.timeout_ms} ms, so the read was not sent (gateway.limits.upstream_connections)"
        )

    def _hold_if_paused(self, binding: catalog.Binding, key: upstream_pauses.Key) -> None:
        self.pauses.note(key, binding.entry.name)
        left = self.pauses.paused_for(key)
        if left is None:
            return
        self._metrics.upstream_paused_reads.labels(_upstream(binding)).inc()
        raise ReadError(
            f"{binding.uri}: the upstream is rate-limiting this gateway; reads paused for {_seconds(left)} more",
            status=RATE_LIMITED_STATUS,
            retry_after_s=left,
        )

    def _rate_limited(self, binding: catalog.Binding, key: upstream_pauses.Key, retry_after: str | None) -> NoReturn:
        pause = self.pauses.record(key, upstream_pauses.parse_retry_after(retry_after, time.time()), binding.entry.name)
        self._metrics.upstream_rate_limited.labels(_upstream(binding)).inc()
        logger.warning(
            "upstream %s answered 429 to a read of %s: its reads with the same credentials pause for %s",
            key.upstream,
            binding.uri,
            _seconds(pause),
        )
        raise ReadError(
            f"{binding.uri}: upstream answered HTTP 429, it is rate-limiting this gateway; "
            f"reads paused for {_seconds(pause)}",
            status=RATE_LIMITED_STATUS,
            retry_after_s=pause,
        )


class OriginSlots:
    """At most `size` reads at a time on one upstream origin's connections; the others wait for a slot.

    So one slow upstream can hold only its own connections. The origin is the backend's as configured, so a
    template whose host is a `{variable}` shares one origin's slots however many hosts callers name: the total of
    connections stays bounded by the configuration. An origin's state lives while a read holds or awaits one of its
    slots, so an idle one keeps nothing.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._origins: dict[str, _Origin] = {}

    def slot(self, origin: str) -> Slot:
        """One slot of `origin` (scheme://host:port), to take with `async with`."""
        return Slot(self, origin)

    def in_use(self) -> list[str]:
        return sorted(origin.split("://", 1)[1] for origin in self._origins)

    def _join(self, origin: str) -> _Origin:
        state = self._origins.get(origin)
        if state is None:
            state = self._origins[origin] = _Origin(asyncio.Semaphore(self.size))
        state.users += 1
        return state

    def _leave(self, origin: str, state: _Origin) -> None:
        state.users -= 1
        if not state.users:
            del self._origins[origin]


@dataclass(slots=True)
class _Origin:
    free: asyncio.Semaphore
    users: int = 0
    """Reads holding or awaiting one of its slots."""


class Slot:
    """One read's turn on an origin: `entered` once it has a slot (before that, it waits)."""

    def __init__(self, slots: OriginSlots, origin: str) -> None:
        self._slots, self._origin = slots, origin
        self._state: _Origin | None = None
        self.entered = False

    async def __aenter__(self) -> None:
        state = self._state = self._slots._join(self._origin)
        try:
            await state.free.acquire()
        except BaseException:  # cancelled or timed out while waiting: it holds nothing, but it was counted
            self._slots._leave(self._origin, state)
            raise
        self.entered = True

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._state is not None
        self._state.free.release()
        self._slots._leave(self._origin, self._state)


def _target(binding: catalog.Binding) -> tuple[str, dict[str, str]]:
    """The URL (rendered) and the headers (the credentials, in clear: never to be logged) a read sends."""
    backend = binding.entry.backend
    return render_url(backend.url, binding.variables), {k: v.get_secret_value() for k, v in backend.headers.items()}


def _parsed(url: str) -> yarl.URL | str:
    try:
        return yarl.URL(url)
    except ValueError:  # aiohttp raises it again as `InvalidURL` in the read, which says so
        return url


def _upstream(binding: catalog.Binding) -> str:
    """The metric label of `binding`'s upstream: host:port as configured (a `{variable}` in it unexpanded), so
    the configuration bounds the label's values, never the URIs callers ask for."""
    return upstream_pauses.host_port(upstream_pauses.origin_of(binding.entry.backend.url))


def _redirects(resp: aiohttp.ClientResponse, backend: config.HttpBackend) -> bool:
    """Whether `resp` sends the read elsewhere: a redirect status the backend does not take as its answer."""
    return (
        resp.status in REDIRECTS
        and resp.status not in backend.expected_status_codes
        and aiohttp.hdrs.LOCATION in resp.headers
    )


def _identity(resp: aiohttp.ClientResponse) -> bool:
    """Whether the body arrives as sent: a compressed one may inflate past the length it announced."""
    return resp.headers.get(aiohttp.hdrs.CONTENT_ENCODING, "identity").strip().lower() == "identity"


def _origin(url: yarl.URL) -> tuple[str, str | None, int | None]:
    return url.scheme, url.host, url.port  # `port` is the scheme's default when the URL names none


def _kind(e: Exception) -> str:
    # The exception text can carry the URL (and its query); name only the failure's kind.
    return type(e).__name__


def _seconds(s: float) -> str:
    return f"{math.ceil(s)} s"


def check_status(uri: str, backend: config.HttpBackend, status: int) -> None:
    if status not in backend.expected_status_codes:
        expected = ", ".join(str(s) for s in backend.expected_status_codes)
        raise ReadError(f"{uri}: upstream answered HTTP {status}, expected one of {expected}", status=status)


def check_json(uri: str, body: bytes) -> None:
    try:
        json.loads(body)
    except ValueError as e:
        raise ReadError(f"{uri}: upstream answered a body that is not JSON (require_json_response)") from e
