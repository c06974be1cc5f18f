"""The connection guard: no unauthenticated client can starve the webhook route, the probes or the admin API.

A probe (issue 15) held 1,050 idle connections with no credentials: the process ran out of descriptors, every
accept failed and asyncio logged each failure with a traceback (60 MB in 10 s), and nothing was served. So per
port a `Guard` caps the open connections, closing the one idle longest to make room, and holds each connection
to a deadline for its request headers and body; the caps fit under RLIMIT_NOFILE; accept errors are logged at a
bounded rate. A request in flight (an SSE stream included) is never idle, so never closed for the cap.

Each request's head is held to limits here too, below every ASGI app so no route can forget them: at most
`MAX_REQUEST_LINE_BYTES` of request line (else 414), `MAX_HEAD_BYTES` in all and `MAX_HEADER_FIELDS` fields (else
431), measured as the bytes h11 consumed, so the answer does not depend on how the head was split into packets. A
request with both Content-Length and Transfer-Encoding (the shape of request smuggling) is refused with 400. Each
refusal closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import h11
from prometheus_client import Counter
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

from mcpg_gateway.contract.config import LimitsConfig
from mcpg_gateway.metrics import Metrics

logger = logging.getLogger(__name__)

REASONS = ("cap", "header_timeout", "body_timeout")
OTHER_FDS = 128
"""Descriptors kept for everything but client connections: upstream and bus clients, log files, the selector."""
ACCEPT_SLACK = 64
"""Per port: sockets the guard closed whose descriptors asyncio releases one loop pass later."""
MIN_CAP = 16
ADMIN_WHEN_SHORT = 256
"""The admin port's cap when descriptors are too few for both ports at the configured cap."""
LOG_EVERY_S = 10.0
ACCEPT_ERROR_MESSAGE = "socket.accept() out of system resource"
"""What asyncio's selector loop says when an accept fails with EMFILE, ENFILE, ENOBUFS or ENOMEM."""

MAX_REQUEST_LINE_BYTES = 8 * 1024
"""Method, target and version, without the line end: a longer request line is refused with 414."""
MAX_HEAD_BYTES = 16 * 1024
"""The whole request head, request line and final blank line included (Node.js's default): else 431."""
MAX_HEADER_FIELDS = 100
"""Header fields in one request: more is refused with 431."""
HTTP_LOGGER = "mcpg_gateway.http"
"""uvicorn's per-request lines (a refused request, an app's exception): under our root handler, which bounds them;
uvicorn's own `uvicorn.error` logger has a handler of its own."""

ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]
Refusal = tuple[int, str]
"""A refused request's status and the fixed text answered with it (never the client's bytes)."""
REFUSED_BY_H11: dict[int, str] = {400: "Invalid HTTP request.", 501: "Transfer-Encoding other than chunked."}


class Throttle:
    """At most one log line per `every_s`; counts the lines it held back, for the next one to say."""

    def __init__(self, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self._clock = every_s, clock
        self._next_at: float | None = None
        self._held = 0

    def allow(self) -> int | None:
        """None: hold this line back. Otherwise log it: the number held back since the last line."""
        now = self._clock()
        if self._next_at is not None and now < self._next_at:
            self._held += 1
            return None
        held, self._held, self._next_at = self._held, 0, now + self.every_s
        return held


def raise_open_files_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one (container runtimes often start at 1024); the result."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as e:  # an unlimited hard limit can be above what the kernel allows
            logger.warning("open files limit stays at %d (hard %d): %s", soft, hard, e)
            return soft
        logger.info("open files limit raised from %d to the hard limit, %d", soft, hard)
        return hard
    logger.info("open files limit is %d (already the hard limit)", soft)
    return soft


def fitting_caps(configured: int, soft: int) -> tuple[int, int]:
    """The (public, admin) caps such that both ports full, plus everything else, fit under `soft` descriptors.

    Where both fit at `configured`, both get it. Where they do not, the admin port (probes, scrapes, admin calls:
    a few connections) keeps at most `ADMIN_WHEN_SHORT` and the public port, whose every open SSE stream is a
    connection, gets the rest: an even split would halve the sessions a pod can hold for no one's benefit.
    """
    if soft == resource.RLIM_INFINITY:
        return configured, configured
    budget = soft - OTHER_FDS - 2 * ACCEPT_SLACK
    if 2 * configured <= budget:
        return configured, configured
    admin = max(MIN_CAP, min(configured, ADMIN_WHEN_SHORT, budget // 2))
    return max(MIN_CAP, min(configured, budget - admin)), admin


def port_caps(configured: int) -> tuple[int, int]:
    """Raise the open-files limit, then the (public, admin) caps that fit under it; logged if lower than configured."""
    soft = raise_open_files_limit()
    public, admin = fitting_caps(configured, soft)
    if public < configured or admin < configured:
        logger.warning(
            "connection caps lowered from %d to %d (public port) and %d (admin port) to fit under an open files "
            "limit of %d",
            configured,
            public,
            admin,
            soft,
        )
    return public, admin


class Guard:
    """One port's connections: at most `cap` open (counted from accept), the idle ones in the order they idled."""

    def __init__(self, port: str, cap: int, limits: LimitsConfig, metrics: Metrics) -> None:
        self.port, self.cap = port, cap
        self.header_timeout_s, self.body_timeout_s = limits.header_timeout_s, limits.body_timeout_s
        self.open = 0
        self.closing = 0
        """Closed by the guard, descriptor not yet released."""
        self._idle: dict[GuardedProtocol, None] = {}  # insertion order: the first has been idle longest
        self._gauge = metrics.connections_open.labels(port=port)
        self._closed = {reason: metrics.connections_closed.labels(port=port, reason=reason) for reason in REASONS}
        self._at_cap = Throttle()
        metrics.connections_cap.labels(port=port).set(cap)

    def has_descriptors(self) -> bool:
        return self.open + self.closing < self.cap + ACCEPT_SLACK

    def admit(self) -> bool:
        """At accept: make room for one more connection, by closing the one idle longest if need be."""
        if self.open < self.cap:
            self._count(+1)
            return True
        self._warn_at_cap()
        if not self._idle:
            self._closed["cap"].inc()
            return False
        next(iter(self._idle)).close_for("cap")
        self._count(+1)
        return True

    def idle(self, conn: GuardedProtocol) -> None:
        self._idle.pop(conn, None)
        self._idle[conn] = None

    def busy(self, conn: GuardedProtocol) -> None:
        self._idle.pop(conn, None)

    def closed_by_guard(self, conn: GuardedProtocol, reason: str) -> None:
        self._idle.pop(conn, None)
        self._count(-1)
        self.closing += 1
        self._closed[reason].inc()

    def lost(self, conn: GuardedProtocol, closed_by_guard: bool) -> None:
        self._idle.pop(conn, None)
        if closed_by_guard:
            self.closing -= 1
        else:
            self._count(-1)

    def _count(self, delta: int) -> None:
        self.open += delta
        self._gauge.set(self.open)

    def _warn_at_cap(self) -> None:
        if (held := self._at_cap.allow()) is not None:
            logger.warning(
                "%s port at its cap of %d connections: closing the idlest or the new one (%d more since the last line)",
                self.port,
                self.cap,
                held,
            )


class GuardedSocket(socket.socket):
    """A listening socket that asks its port's guard before it hands asyncio a connection.

    Counting at accept, not when the protocol starts, matters: asyncio accepts up to a whole backlog in one loop
    pass, and a burst would run the process out of descriptors before any protocol saw its connection.
    """

    def __init__(self, guard: Guard, family: int, proto: int) -> None:
        super().__init__(family, socket.SOCK_STREAM, proto)
        self.guard = guard

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            if not self.guard.has_descriptors():
                raise BlockingIOError  # asyncio tries again next pass, once the closed sockets are released
            conn, addr = super().accept()  # BlockingIOError when none is waiting
            if self.guard.admit():
                return conn, addr
            conn.close()  # at the cap with none idle: the new connection is closed at once


class HeadLimits(h11.Connection):
    """h11's server side, holding each request head to the limits however it was split into packets.

    h11 bounds only an incomplete head (`max_incomplete_event_size`); a head that arrives whole in one read is
    parsed at any size. So each parsed head is measured as well, as the bytes its parse took from the buffer.
    """

    def __init__(self) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.refused: Refusal | None = None
        """Why the last event was refused, for the answer; None until then."""

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        heading = self.their_state is h11.IDLE
        # h11 has no public size of its buffer (`trailing_data` copies it, body bytes included, per request).
        before = len(self._receive_buffer)
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            too_long = heading and e.error_status_hint == 431  # h11's bound on an incomplete head
            self.refused = _incomplete_head(bytes(self._receive_buffer)) if too_long else _refused_by_h11(e)
            raise
        if isinstance(event, h11.Request):
            self.refused = head_refusal(event, before - len(self._receive_buffer))
            if self.refused is not None:
                raise h11.RemoteProtocolError(self.refused[1], error_status_hint=self.refused[0])
        return event


def head_refusal(request: h11.Request, size: int) -> Refusal | None:
    """Why a complete request head of `size` bytes is refused, or None."""
    line = len(request.method) + len(request.target) + len(b"HTTP/") + len(request.http_version) + 2
    if line > MAX_REQUEST_LINE_BYTES:
        return 414, f"Request line longer than {MAX_REQUEST_LINE_BYTES} bytes."
    if size > MAX_HEAD_BYTES or len(request.headers) > MAX_HEADER_FIELDS:
        return 431, f"Request head over {MAX_HEAD_BYTES} bytes or {MAX_HEADER_FIELDS} header fields."
    names = {name for name, _ in request.headers}  # h11 gives them lower-cased
    if b"content-length" in names and b"transfer-encoding" in names:
        # RFC 9112 6.3 lets a server refuse it; reading it either way is how a proxy and a server disagree.
        return 400, "Both Content-Length and Transfer-Encoding."
    return None


def _incomplete_head(buffered: bytes) -> Refusal:
    """h11 gave up on a head longer than MAX_HEAD_BYTES before its end: 414 when its request line is too long,
    as the complete head would have been told."""
    end = buffered.find(b"\n")
    line = len(buffered) if end < 0 else len(buffered[:end].removesuffix(b"\r"))
    if line > MAX_REQUEST_LINE_BYTES:
        return 414, f"Request line longer than {MAX_REQUEST_LINE_BYTES} bytes."
    return 431, f"Request head over {MAX_HEAD_BYTES} bytes or {MAX_HEADER_FIELDS} header fields."


def _refused_by_h11(e: h11.RemoteProtocolError) -> Refusal:
    status = e.error_status_hint if e.error_status_hint in REFUSED_BY_H11 else 400
    return status, REFUSED_BY_H11[status]


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol, held to the guard's deadlines and reported to it as idle or busy.

    Idle: before a request's headers are complete, and between requests on a kept-alive connection. Busy: from a
    request's headers to the end of its response, however long (an SSE stream). A new `RequestResponseCycle` is
    how h11_impl says a request's headers are complete; `cycle.more_body` turns false when its body is.
    """

    guard: ClassVar[Guard]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.conn = self._head = HeadLimits()
        self.logger = logging.getLogger(HTTP_LOGGER)
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_reason = ""
        self._closed_by_guard = False

    # As uvicorn's own override: asyncio's Protocol says BaseTransport, a stream server passes a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.guard.idle(self)
        self._arm(self.guard.header_timeout_s, "header_timeout")

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        self._track(before)

    def on_response_complete(self) -> None:
        before = self.cycle
        if not self.transport.is_closing():
            self.guard.idle(self)
            self._arm(self.guard.header_timeout_s, "header_timeout")  # for the next request, on keep-alive
        super().on_response_complete()  # may start a pipelined request at once
        self._track(before)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.lost(self, self._closed_by_guard)
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 or the head limits refused, with the status that says why; then close."""
        status, text = self._head.refused or (400, REFUSED_BY_H11[400])
        body = text.encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        response = h11.Response(status_code=status, headers=headers, reason=STATUS_PHRASES[status])
        for event in (response, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def close_for(self, reason: str) -> None:
        """Abort, not close: a peer that reads nothing must not keep the descriptor through a pending write."""
        self._disarm()
        self._closed_by_guard = True
        self.guard.closed_by_guard(self, reason)
        self.transport.abort()

    def _track(self, before: RequestResponseCycle | None) -> None:
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is None:
            return
        if cycle is not before:  # a request's headers are complete
            self.guard.busy(self)
            if cycle.more_body:
                self._arm(self.guard.body_timeout_s, "body_timeout")
            else:
                self._disarm()
        elif self._deadline_reason == "body_timeout" and not cycle.more_body:
            self._disarm()

    def _arm(self, delay: float, reason: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay, self._expire, reason)
        self._deadline_reason = reason

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline, self._deadline_reason = None, ""

    def _expire(self, reason: str) -> None:
        self._deadline, self._deadline_reason = None, ""
        if not self.transport.is_closing():  # already on its way out: not the guard's doing
            self.close_for(reason)


def protocol_for(guard: Guard) -> type[GuardedProtocol]:
    """The protocol class for one port (uvicorn takes a class and builds each connection's instance itself)."""

    class PortProtocol(GuardedProtocol):
        pass

    PortProtocol.guard = guard
    return PortProtocol


class AcceptErrors:
    """The loop's exception handler: accept errors at most once per `LOG_EVERY_S`; other contexts as before.

    asyncio reports each failed accept through this handler, on every retry and once per waiting connection.
    """

    def __init__(self, previous: ExceptionHandler | None, counter: Counter, throttle: Throttle | None = None) -> None:
        self.previous, self._counter = previous, counter
        self._throttle = throttle or Throttle()

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if context.get("message") != ACCEPT_ERROR_MESSAGE or not isinstance(exc, OSError):
            self._pass_on(loop, context)
            return
        self._counter.inc()
        if (held := self._throttle.allow()) is not None:
            logger.error("accepting a connection failed: %s; %d more since the last such line", exc, held)

    def _pass_on(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if self.previous is None:
            loop.default_exception_handler(context)
        else:
            self.previous(loop, context)


@contextlib.contextmanager
def accept_errors_logged(loop: asyncio.AbstractEventLoop, metrics: Metrics) -> Iterator[AcceptErrors]:
    """Install `AcceptErrors` on `loop`; put the previous handler back after, unless another replaced ours."""
    handler = AcceptErrors(loop.get_exception_handler(), metrics.accept_errors)
    loop.set_exception_handler(handler)
    try:
        yield handler
    finally:
        if loop.get_exception_handler() is handler:
            loop.set_exception_handler(handler.previous)
