"""The operator's own HTTP endpoints, served from the process's first moment, leader or standby.

kopf serves its liveness endpoint only once its startup handlers have finished, which a standby never reaches:
its probe would fail and the kubelet would restart it forever. So the process answers its probes itself:

- `/healthz`: 200 while the event loop answers (this server runs on it); true for a standby.
- `/readyz`: 200 until the process starts stopping. A standby is ready, as controller-runtime reports it: the
  Service keeps both replicas as endpoints, so each one's /metrics (who leads, included) stays scrapeable.
- `/metrics`: the Prometheus text of a registry.

A bare asyncio server rather than aiohttp, which the operator's layers keep out (.importlinter): a kubelet probe
or a Prometheus scrape is one GET, answered and closed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

logger = logging.getLogger(__name__)

Answer = tuple[int, str, bytes]
"""Status code, content type, body."""
Route = Callable[[], Answer]
READ_S = 10.0
"""A client that has not sent its request head by then is dropped."""
TEXT = "text/plain; charset=utf-8"
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def routes(registry: CollectorRegistry, ready: Callable[[], bool]) -> dict[str, Route]:
    """The three endpoints; `ready` says whether the process is ready (it is not once it is stopping)."""
    return {
        "/healthz": lambda: (200, TEXT, b"ok\n"),
        "/readyz": lambda: (200, TEXT, b"ok\n") if ready() else (503, TEXT, b"stopping\n"),
        "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
    }


async def serve(host: str, port: int, table: Mapping[str, Route]) -> asyncio.Server:
    """Listen on host:port (0: the kernel picks) and answer GET requests from `table`."""
    server = await asyncio.start_server(functools.partial(_connection, table), host, port)
    logger.info("serving /healthz, /readyz and /metrics on %s", ", ".join(bound(server)))
    return server


def bound(server: asyncio.Server) -> list[str]:
    """host:port of each listening socket."""
    return [f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in server.sockets]


def answer(table: Mapping[str, Route], head: bytes) -> Answer:
    """The answer to a request whose head (request line and headers) is `head`."""
    method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
    target = rest.partition(" ")[0]
    if not target.startswith("/"):
        return 400, TEXT, b"bad request\n"
    route = table.get(target.split("?", 1)[0])
    if route is None:
        return 404, TEXT, b"not found\n"
    if method != "GET":
        return 405, TEXT, b"method not allowed\n"
    return route()


async def _connection(table: Mapping[str, Route], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        async with asyncio.timeout(READ_S):
            head = await reader.readuntil(b"\r\n\r\n")
        status, ctype, body = answer(table, head)
        writer.write(_response(status, ctype, body))
        await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass  # a client that went away or never finished asking gets nothing
    finally:
        writer.close()


def _response(status: int, ctype: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
