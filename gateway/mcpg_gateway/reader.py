"""Reading a resource through its backend binding. One pooled aiohttp session serves every read.

A read either returns the exact bytes the upstream sent (the poll strategy hashes them) or raises `ReadError`
with a message that names the resource and what was wrong, never a header value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

from mcpg_gateway import catalog
from mcpg_gateway.contract import config
from mcpg_gateway.errors import ReadError


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

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def read(self, binding: catalog.Binding) -> Content:
        backend = binding.entry.backend
        url = render_url(backend.url, binding.variables)
        headers = {k: v.get_secret_value() for k, v in backend.headers.items()}
        timeout = aiohttp.ClientTimeout(total=backend.timeout_ms / 1000)
        try:
            async with self._client().request(
                backend.method.upper(), url, headers=headers, data=backend.body, timeout=timeout
            ) as resp:
                body = await resp.read()
                status, mime = resp.status, resp.content_type
        except TimeoutError as e:
            raise ReadError(f"{binding.uri}: upstream did not answer within {backend.timeout_ms} ms") from e
        except aiohttp.ClientError as e:
            # The exception text can carry the URL (and its query); name only the failure's kind.
            raise ReadError(f"{binding.uri}: upstream request failed ({type(e).__name__})") from e
        check_response(binding.uri, backend, status, body)
        return Content(body, binding.entry.mime_type or mime, status)


def check_response(uri: str, backend: config.HttpBackend, status: int, body: bytes) -> None:
    if status not in backend.expected_status_codes:
        expected = ", ".join(str(s) for s in backend.expected_status_codes)
        raise ReadError(f"{uri}: upstream answered HTTP {status}, expected one of {expected}")
    if backend.require_json_response:
        try:
            json.loads(body)
        except ValueError as e:
            raise ReadError(f"{uri}: upstream answered a body that is not JSON (require_json_response)") from e
