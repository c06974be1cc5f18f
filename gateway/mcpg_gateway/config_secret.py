"""The gateway's configuration Secret, followed through the Kubernetes API: listed, then watched (issue 34).

The kubelet refreshes a mounted Secret only after 60 to 90 s; a watch hears an edit within a second. A gateway may
read its own configuration Secret and nothing else: its Role allows get, list and watch on that one name, which RBAC
grants a list or a watch only when the request names the object by field selector, so every request here carries
`fieldSelector=metadata.name=<name>`. Nothing here writes to the API, and no log line holds the token, the Secret's
data or the text handed over: only names, keys, resourceVersions and kinds of failure.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

import aiohttp

from mcpg_gateway import backoff as retries
from mcpg_gateway.contract.errors import GatewayError

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_LINE_BYTES = 4 * 1024 * 1024
"""The longest watch event or list answer taken in. The API server refuses a Secret over 1 MiB of data, which is
about 1.4 MiB in base64; the rest is room for the envelope (metadata, managed fields)."""
WATCH_TIMEOUT_S = 300
"""What each watch asks the API server to end it after; it is then resumed from the last resourceVersion."""
READ_MARGIN_S = 30
"""How much longer than the watch's own timeout a silent stream is waited on before it counts as frozen."""
CONNECT_TIMEOUT_S = 10
LIST_TIMEOUT_S = 30
REASON_CHARS = 64

Offer = Callable[[str, str], Awaitable[None]]
"""Hands over a new text of the followed key, with the Secret's resourceVersion."""
Backoff = Callable[[int], float]
"""The delay after a number (0-based) of consecutive failures."""


class NotInClusterError(GatewayError):
    """The process is not in a Kubernetes pod with a service account: no API to follow a Secret through."""


class FollowError(GatewayError):
    """Listing or watching failed. `kind` groups failures for logging (one warning per kind and outage); the message
    never carries a token, a Secret's data or a response body."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ResourceVersionExpired(FollowError):
    """410 Gone: the API server no longer holds the history after the resourceVersion; list again."""

    def __init__(self) -> None:
        super().__init__("expired", "the resourceVersion is too old (410 Gone)")


class KeyUnreadable(GatewayError):
    """The Secret has no text under the followed key (absent, not base64, or not UTF-8)."""


@dataclass(frozen=True, slots=True)
class ApiAccess:
    """Where the API server is and what the gateway presents to it. The token is read from its file on every
    connection: the kubelet rotates projected service-account tokens in place."""

    server: str
    namespace: str
    token_file: Path
    ca_file: Path | None
    """None: the system's trust store (or a plain-HTTP server, in tests)."""

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str], root: Path = SERVICE_ACCOUNT) -> ApiAccess:
        """The pod's own API access: the `kubernetes` Service's address and the mounted service account."""
        host = environ.get("KUBERNETES_SERVICE_HOST", "")
        port = environ.get("KUBERNETES_SERVICE_PORT", "")
        files = {name: root / name for name in ("token", "ca.crt", "namespace")}
        variables = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
        missing = [var for var, value in variables.items() if not value]
        missing += [str(path) for path in files.values() if not path.is_file()]
        if missing:
            raise NotInClusterError(f"not in a Kubernetes pod with a service account: missing {', '.join(missing)}")
        namespace = files["namespace"].read_text().strip()
        if not namespace:
            raise NotInClusterError(f"{files['namespace']} is empty")
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        return cls(f"https://{host}:{port}", namespace, files["token"], files["ca.crt"])


# -- the pure parts: URLs, decoding, decisions ------------------------------------------------------------------


def secrets_url(access: ApiAccess, name: str, **params: str) -> str:
    """The namespace's secrets collection, narrowed to `name` by field selector (what RBAC's resourceNames needs)."""
    query = urlencode({"fieldSelector": f"metadata.name={name}", **params})
    return f"{access.server.rstrip('/')}/api/v1/namespaces/{quote(access.namespace, safe='')}/secrets?{query}"


def list_url(access: ApiAccess, name: str) -> str:
    return secrets_url(access, name)


def watch_url(access: ApiAccess, name: str, version: str, timeout_s: int) -> str:
    return secrets_url(
        access,
        name,
        watch="true",
        resourceVersion=version,
        allowWatchBookmarks="true",
        timeoutSeconds=str(timeout_s),
    )


@dataclass(frozen=True, slots=True)
class Listed:
    """A list's answer: its resourceVersion (where a watch starts) and the Secret, if it exists."""

    version: str
    secret: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    version: str
    """The object's resourceVersion: where the watch resumes after this event."""
    secret: dict[str, Any]


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # never quote the line: it may hold the Secret's data
        raise FollowError("malformed", f"{what} that is not JSON") from None
    if not isinstance(value, dict):
        raise FollowError("malformed", f"{what} that is not a JSON object")
    return value


def _version(obj: Mapping[str, Any], what: str) -> str:
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    if not isinstance(version, str) or not version:
        raise FollowError("malformed", f"{what} without a resourceVersion")
    return version


def decode_list(body: bytes) -> Listed:
    """A list answer narrowed to one name: at most one item."""
    listed = _json_object(body, "a list answer")
    items = listed.get("items") or []
    if not isinstance(items, list) or len(items) > 1 or not all(isinstance(i, dict) for i in items):
        raise FollowError("malformed", "a list answer whose items are not at most one object")
    return Listed(_version(listed, "a list answer"), items[0] if items else None)


def decode_event(line: bytes) -> WatchEvent:
    """One line of a watch stream. An ERROR event raises: 410 as `ResourceVersionExpired`, any other as a failure."""
    event = _json_object(line, "a watch event")
    kind, obj = event.get("type"), event.get("object")
    if not isinstance(obj, dict):
        raise FollowError("malformed", "a watch event without an object")
    if kind == "ERROR":
        raise status_error(obj)
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise FollowError("malformed", "a watch event of an unknown type")
    return WatchEvent(kind, _version(obj, "a watch event"), obj)


def status_error(status: Mapping[str, Any]) -> FollowError:
    """What an ERROR event's Status means: 410 lists again, anything else is retried after a backoff."""
    code = status.get("code")
    if code == 410:
        return ResourceVersionExpired()
    reason = str(status.get("reason", ""))[:REASON_CHARS]
    return FollowError(f"error event {code}", f"the watch ended with an error (code {code}, reason {reason!r})")


def key_text(secret: Mapping[str, Any], key: str) -> str:
    """The text under `key` in the Secret's data (base64, then UTF-8); `KeyUnreadable` says why there is none."""
    data = secret.get("data") or {}
    encoded = data.get(key) if isinstance(data, dict) else None
    if not isinstance(encoded, str):
        raise KeyUnreadable(f"it has no key {key!r}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise KeyUnreadable(f"its key {key!r} is not base64") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # `from None`: the error's text quotes the offending byte
        raise KeyUnreadable(f"its key {key!r} is not UTF-8 text") from None


def is_change(offered: str | None, text: str) -> bool:
    """Whether `text` is worth handing over: the same content is never offered twice in a row (a relist, a
    re-created Secret, an edit of another key all come back with what the gateway already has)."""
    return text != offered


def status_failure(status: int, verb: str, name: str, access: ApiAccess) -> FollowError | None:
    """What an HTTP status answering a list or a watch means; None for 200."""
    if status == 200:
        return None
    if status == 410:
        return ResourceVersionExpired()
    if status == 401:
        return FollowError("401", f"the API server refused the token read from {access.token_file} (401)")
    if status == 403:
        return FollowError(
            "403",
            f"forbidden (403): the gateway may not {verb} secrets named {name!r} in namespace {access.namespace!r};"
            f" its Role must allow get, list and watch on secrets with resourceNames [{name!r}]",
        )
    return FollowError(f"http {status}", f"the API server answered {status} to a {verb}")


class Lines:
    """Newline-delimited lines from the chunks of a stream, refusing a line longer than `limit` before holding it
    whole (aiohttp's own readline would quote the start of such a line in its error)."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self._limit = limit
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes (empty ones skipped); the rest waits for the next chunk."""
        lines: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._take(chunk[start:end])
            if self._pending:
                lines.append(bytes(self._pending))
            self._pending.clear()
            start = end + 1
        self._take(chunk[start:])
        return lines

    def end(self) -> None:
        """The stream ended: a line cut in the middle means the connection was."""
        if self._pending:
            raise FollowError("cut", "the watch stream ended in the middle of an event")

    def _take(self, piece: bytes) -> None:
        if len(self._pending) + len(piece) > self._limit:
            self._pending.clear()
            raise FollowError("too long", f"a line longer than {self._limit} bytes")
        self._pending += piece


@contextlib.contextmanager
def translated(verb: str) -> Iterator[None]:
    """aiohttp's failures as `FollowError`s of a few kinds (the text of each names a host at most, never a token)."""
    try:
        yield
    except aiohttp.ClientSSLError as e:
        raise FollowError("tls", f"TLS failed on a {verb}: {e}") from None
    except aiohttp.ClientConnectorError as e:
        raise FollowError("connect", f"could not connect for a {verb}: {e}") from None
    except TimeoutError:
        raise FollowError("timeout", f"a {verb} timed out") from None
    except aiohttp.ClientError as e:
        raise FollowError(type(e).__name__, f"a {verb} failed: {type(e).__name__}") from None
    except OSError as e:  # what aiohttp lets through unwrapped, rarely: a reset mid-read
        raise FollowError("os", f"a {verb} failed: {e.strerror or type(e).__name__}") from None


# -- the I/O: list, watch, retry ---------------------------------------------------------------------------------


class SecretFollower:
    """Follows the Secret `name` in `access.namespace` and offers each new text of its `key` until cancelled.

    An exception raised by `offer` is not an API failure: it ends `run`, for the caller to see. `synced` is set once
    a first offer has completed (the gateway is not ready before it has a configuration).
    """

    def __init__(
        self,
        name: str,
        key: str,
        offer: Offer,
        access: ApiAccess,
        *,
        backoff: Backoff = retries.delay_s,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
    ) -> None:
        self.name, self.key, self.access = name, key, access
        self._offer, self._backoff, self._watch_timeout_s = offer, backoff, watch_timeout_s
        self.synced = asyncio.Event()
        self._version: str | None = None  # where the next watch starts; None: list first
        self._offered: str | None = None
        self._problem: str | None = None  # what is wrong with the Secret itself (absent, deleted, no text)
        self._logged: set[str] = set()  # kinds of failure warned about in this outage
        self._attempt = 0

    async def run(self) -> None:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            headers={"Accept": "application/json", "User-Agent": "mcpg-gateway"},
        ) as http:
            while True:
                await self._step(http)

    async def _step(self, http: aiohttp.ClientSession) -> None:
        """One list (when there is no resourceVersion to resume from) and one watch, or one failure waited out."""
        listed: str | None = None
        try:
            if self._version is None:
                self._version = listed = await self._list(http)
            await self._watch(http)
        except ResourceVersionExpired as e:
            expired, self._version = self._version, None
            if expired != listed:  # an old one, after a reconnect: list again at once
                logger.info("%s: resourceVersion %s expired; listing again", self._what, expired)
                return
            await self._failed(e)  # the list's own, refused at once: retried, never in a tight loop
        except FollowError as e:
            await self._failed(e)

    async def _list(self, http: aiohttp.ClientSession) -> str:
        url, timeout = list_url(self.access, self.name), aiohttp.ClientTimeout(total=LIST_TIMEOUT_S)
        async with self._get(http, url, "list", timeout) as resp:
            listed = decode_list(await self._body(resp))
        self._recovered()
        if listed.secret is None:
            self._note_problem("it does not exist")
        else:
            await self._seen(listed.secret, _version(listed.secret, "a listed Secret"))
        return listed.version

    async def _watch(self, http: aiohttp.ClientSession) -> None:
        """Watch from `_version` until the API server ends the watch (its timeout), handing over each change."""
        assert self._version is not None
        url = watch_url(self.access, self.name, self._version, self._watch_timeout_s)
        timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_S, sock_read=self._watch_timeout_s + READ_MARGIN_S)
        async with self._get(http, url, "watch", timeout) as resp:
            self._attempt = 0  # connected: a drop from here on is a new failure, retried after the shortest delay
            lines = Lines()
            while chunk := await _read(resp, "watch"):
                for line in lines.feed(chunk):
                    await self._handle(decode_event(line))
            lines.end()
        self._recovered()

    async def _handle(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            self._note_problem("it was deleted")
        elif event.type != "BOOKMARK":
            await self._seen(event.secret, event.version)
        self._version = event.version
        self._recovered()

    async def _seen(self, secret: Mapping[str, Any], version: str) -> None:
        """A version of the Secret: offered if its key's text is new."""
        try:
            text = key_text(secret, self.key)
        except KeyUnreadable as e:
            self._note_problem(str(e))
            return
        self._note_problem(None)
        if is_change(self._offered, text):
            await self._offer(text, version)
            self._offered = text
            self.synced.set()

    @contextlib.asynccontextmanager
    async def _get(
        self, http: aiohttp.ClientSession, url: str, verb: str, bounds: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A GET with the token as it is now, checked for its status; the connection is closed afterwards."""
        headers, tls = {"Authorization": f"Bearer {self._token()}"}, self._tls()
        with translated(verb):
            resp = await http.get(url, headers=headers, ssl=tls, timeout=bounds, allow_redirects=False)
        try:
            failure = status_failure(resp.status, verb, self.name, self.access)
            if failure is not None:
                raise failure
            yield resp
        finally:
            resp.close()

    async def _body(self, resp: aiohttp.ClientResponse) -> bytes:
        body = bytearray()
        while chunk := await _read(resp, "list"):
            body += chunk
            if len(body) > MAX_LINE_BYTES:
                raise FollowError("too long", f"a list answer longer than {MAX_LINE_BYTES} bytes")
        return bytes(body)

    def _token(self) -> str:
        try:
            return self.access.token_file.read_text().strip()
        except OSError as e:
            raise FollowError("token", f"cannot read the token file {self.access.token_file}: {e.strerror}") from None

    def _tls(self) -> ssl.SSLContext | bool:
        """The CA as its file is now (it may be replaced in place, like the token); True: the system's."""
        if self.access.ca_file is None:
            return True
        try:
            return ssl.create_default_context(cafile=str(self.access.ca_file))
        except (OSError, ssl.SSLError) as e:
            raise FollowError("ca", f"cannot load the CA file {self.access.ca_file}: {e}") from None

    async def _failed(self, error: FollowError) -> None:
        """Said once per kind until the next success (then at debug), and waited out with a growing delay."""
        delay = self._backoff(self._attempt)
        self._attempt += 1
        level = logging.DEBUG if error.kind in self._logged else logging.WARNING
        self._logged.add(error.kind)
        logger.log(level, "%s: %s; retrying in %.0f s", self._what, error, delay)
        await asyncio.sleep(delay)

    def _recovered(self) -> None:
        if self._logged:
            logger.info("%s: the API answers again", self._what)
            self._logged.clear()
        self._attempt = 0

    def _note_problem(self, problem: str | None) -> None:
        """Say once what is wrong with the Secret (or that it is right again); the gateway keeps what it serves."""
        if problem == self._problem:
            return
        if problem is not None:
            logger.warning("%s: %s; the gateway keeps serving what it has and waits for it", self._what, problem)
        else:
            logger.info("%s: readable again", self._what)
        self._problem = problem

    @property
    def _what(self) -> str:
        return f"config Secret {self.access.namespace}/{self.name} (key {self.key!r})"


async def _read(resp: aiohttp.ClientResponse, verb: str) -> bytes:
    """The next chunk of a body, b"" at its end."""
    with translated(verb):
        return await resp.content.readany()
