"""Reading a resource through its backend binding. One pooled aiohttp session serves every read.

A read either returns the exact bytes the upstream sent (the poll strategy hashes them) or raises `ReadError`
with a message that names the resource and what was wrong, never a header value.

An upstream's `429` pauses every read of that upstream with the same credentials (`upstream_pauses.py`): a read
under a paused key raises at once, without a request, so a rate-limited upstream is left alone for a while instead
of being asked again by every watch that reads it. Both are counted by upstream (host:port, never a credential).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import quote

import aiohttp

from mcpg_gateway import catalog, upstream_pauses
from mcpg_gateway.contract import config
from mcpg_gateway.errors import RATE_LIMITED_STATUS, ReadError
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Content:
    body: bytes
    mime_type: str | None
    status: int


def render_url(url: str, variables: dict[str, str]) -> str:
    """Substitute template variables into a backend URL, each percent-encoded as one segment."""
    for name, value in variables.items():
        url = url.replace("{" + name + "}", quote(value, safe=""))
    return url


class HttpReader:
    """Reads bindings over HTTP with one shared, pooled session (created lazily on the running loop)."""

    def __init__(self, clock: base.Clock, metrics: Metrics) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._metrics = metrics
        self.pauses = upstream_pauses.UpstreamPauses(clock.now)
        """The upstreams that answered 429, for the admin API (host:port; no credentials)."""

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def paused_for(self, binding: catalog.Binding) -> float | None:
        """Seconds left before `binding` may be read again (its upstream rate-limits it), or None."""
        return self.pauses.paused_for(upstream_pauses.key_for(*_target(binding)))

    async def read(self, binding: catalog.Binding) -> Content:
        backend = binding.entry.backend
        url, headers = _target(binding)
        key = upstream_pauses.key_for(url, headers)
        self._hold_if_paused(binding, key)
        timeout = aiohttp.ClientTimeout(total=backend.timeout_ms / 1000)
        try:
            async with self._client().request(
                backend.method.upper(), url, headers=headers, data=backend.body, timeout=timeout
            ) as resp:
                body = await resp.read()
                status, mime = resp.status, resp.content_type
                retry_after = resp.headers.get("Retry-After")
        except TimeoutError as e:
            raise ReadError(f"{binding.uri}: upstream did not answer within {backend.timeout_ms} ms") from e
        except aiohttp.ClientError as e:
            # The exception text can carry the URL (and its query); name only the failure's kind.
            raise ReadError(f"{binding.uri}: upstream request failed ({type(e).__name__})") from e
        if status == RATE_LIMITED_STATUS and status not in backend.expected_status_codes:
            self._rate_limited(binding, key, retry_after)
        check_response(binding.uri, backend, status, body)
        self.pauses.succeeded(key)
        return Content(body, binding.entry.mime_type or mime, status)

    def _hold_if_paused(self, binding: catalog.Binding, key: upstream_pauses.Key) -> None:
        self.pauses.note(key, binding.entry.name)
        left = self.pauses.paused_for(key)
        if left is None:
            return
        self._metrics.upstream_paused_reads.labels(key.upstream).inc()
        raise ReadError(
            f"{binding.uri}: the upstream is rate-limiting this gateway; reads paused for {_seconds(left)} more",
            status=RATE_LIMITED_STATUS,
            retry_after_s=left,
        )

    def _rate_limited(self, binding: catalog.Binding, key: upstream_pauses.Key, retry_after: str | None) -> NoReturn:
        pause = self.pauses.record(key, upstream_pauses.parse_retry_after(retry_after, time.time()), binding.entry.name)
        self._metrics.upstream_rate_limited.labels(key.upstream).inc()
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


def _target(binding: catalog.Binding) -> tuple[str, dict[str, str]]:
    """The URL (rendered) and the headers (the credentials, in clear: never to be logged) a read sends."""
    backend = binding.entry.backend
    return render_url(backend.url, binding.variables), {k: v.get_secret_value() for k, v in backend.headers.items()}


def _seconds(s: float) -> str:
    return f"{math.ceil(s)} s"


def check_response(uri: str, backend: config.HttpBackend, status: int, body: bytes) -> None:
    if status not in backend.expected_status_codes:
        expected = ", ".join(str(s) for s in backend.expected_status_codes)
        raise ReadError(f"{uri}: upstream answered HTTP {status}, expected one of {expected}", status=status)
    if backend.require_json_response:
        try:
            json.loads(body)
        except ValueError as e:
            raise ReadError(f"{uri}: upstream answered a body that is not JSON (require_json_response)") from e
