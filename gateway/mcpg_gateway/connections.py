"""The connection guard: no unauthenticated client can starve the webhook route, the probes or the admin API.

A probe (issue 15) held 1,050 idle connections with no credentials: the process ran out of descriptors, every
accept failed and asyncio logged each failure with a traceback (60 MB in 10 s), and nothing was served. So per
port a `Guard` caps the open connections, closing the one that has waited on its client longest to make room,
and every state of a connection has a deadline: its request headers, its body, a response write the client takes
nothing of, and the bytes a closing connection still holds for its client (issue 30: pipelined requests never
read filled a cap of 256 in 3 s). The caps fit under RLIMIT_NOFILE; accept errors are logged at a bounded rate.
A request in flight whose answer is going out (an SSE stream included) is never closed for the cap; one whose
write is blocked waits on its client as an idle one does.

Each request's head is held to its limits below every ASGI app too (`request_heads.py`: the protocol parses with
`request_heads.HeadLimits`), and at most `MAX_PIPELINED` requests may be sent ahead of their answers.
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
from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

from mcpg_gateway import request_heads
from mcpg_gateway.contract.config import LimitsConfig
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.signals import Signal

logger = logging.getLogger(__name__)

REASONS = ("cap", "header_timeout", "body_timeout", "write_timeout", "pipelining")
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

MAX_PIPELINED = 16
"""Requests in a row sent before the answer to the one before was complete; one more closes the connection.
Browsers, httpx and aiohttp never pipeline: a client that does and reads nothing only piles up answers."""
HTTP_LOGGER = "mcpg_gateway.http"
"""uvicorn's per-request lines (a refused request, an app's exception): under our root handler, which bounds them;
uvicorn's own `uvicorn.error` logger has a handler of its own."""

ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


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
    """One port's connections: at most `cap` open (counted from accept); those waiting on their client (idle, or
    with a response write blocked) in the order they began to wait."""

    def __init__(self, port: str, cap: int, limits: LimitsConfig, metrics: Metrics) -> None:
        self.port, self.cap = port, cap
        self.header_timeout_s, self.body_timeout_s = limits.header_timeout_s, limits.body_timeout_s
        self.write_timeout_s = limits.write_timeout_s
        self.open = 0
        self.closing = 0
        """Closed by the guard, descriptor not yet released."""
        self._idle: dict[GuardedProtocol, None] = {}  # insertion order: the first has waited longest
        self._gauge = metrics.connections_open.labels(port=port)
        self._closed = {reason: metrics.connections_closed.labels(port=port, reason=reason) for reason in REASONS}
        self._at_cap = Throttle()
        metrics.connections_cap.labels(port=port).set(cap)

    def has_descriptors(self) -> bool:
        return self.open + self.closing < self.cap + ACCEPT_SLACK

    def admit(self) -> bool:
        """At accept: make room for one more connection, by closing the one waiting longest if need be."""
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
        """`conn` waits on its client: closable for the cap. One already waiting keeps its place (a blocked write
        that completes a response still waits from when it blocked)."""
        self._idle.setdefault(conn, None)

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


class Deadline:
    """One of a connection's timers: armed for one reason at a time, calling `expire(reason)` if it runs out."""

    __slots__ = ("_expire", "_handle", "_loop", "reason")

    def __init__(self, loop: asyncio.AbstractEventLoop, expire: Callable[[str], None]) -> None:
        self._loop, self._expire = loop, expire
        self._handle: asyncio.TimerHandle | None = None
        self.reason = ""

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self, delay: float, reason: str) -> None:
        self.disarm()
        self._handle, self.reason = self._loop.call_later(delay, self._run), reason

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle, self.reason = None, ""

    def _run(self) -> None:
        reason, self._handle, self.reason = self.reason, None, ""
        self._expire(reason)


class GuardState:
    """What the guard keeps of one connection: its two deadlines, and how it stands."""

    __slots__ = ("closed_by_guard", "lost", "pipelined", "request_deadline", "write_deadline")

    def __init__(self, request_deadline: Deadline, write_deadline: Deadline) -> None:
        self.request_deadline, self.write_deadline = request_deadline, write_deadline
        self.pipelined = 0
        """Requests in a row whose head had arrived before the answer to the one before was complete."""
        self.closed_by_guard = self.lost = False


def _as_signal(owner: object, name: str) -> None:
    """`owner.name`, an asyncio.Event uvicorn only sets, clears and waits on, replaced by a `Signal` in the same state:
    about 600 bytes less each, on every connection and every request (issue 36). Anything else found there (a
    uvicorn that named or built it otherwise) is left as it is: the connection works either way."""
    event = getattr(owner, name, None)
    if type(event) is asyncio.Event:
        setattr(owner, name, Signal(event.is_set()))


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol, held to the guard's deadlines and reported to it as waiting or busy.

    Waiting on its client (closable for the cap): before a request's headers are complete, between requests on a
    kept-alive connection, and while a response write is blocked because the client takes nothing (asyncio has
    paused writing: the kernel's buffers are full and more than its high-water mark is queued). Busy: from a
    request's headers to the end of its response while the answer goes out, however long (an SSE stream). A new
    `RequestResponseCycle` is how h11_impl says a request's headers are complete; `cycle.more_body` turns false
    when its body is. Two deadlines: the request's (headers, then body) and the write's (`write_timeout_s`).
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
        self.conn = request_heads.HeadLimits()
        self.logger = logging.getLogger(HTTP_LOGGER)
        # Two attributes more than uvicorn's 25, not seven: at 30 an instance's attribute dict stops sharing its
        # keys and grows from 296 to 1,584 bytes, on every connection (issue 36).
        self._g = GuardState(Deadline(self.loop, self._request_expired), Deadline(self.loop, self.close_for))
        self._app, self.app = self.app, self._app_then_linger

    @property
    def _head(self) -> request_heads.HeadLimits:
        """`conn`, as the head limits that parse this connection's requests."""
        head = self.conn
        assert isinstance(head, request_heads.HeadLimits)
        return head

    # As uvicorn's own override: asyncio's Protocol says BaseTransport, a stream server passes a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _as_signal(self.flow, "_is_writable_event")  # uvicorn's flow control sets, clears and waits on it
        self.guard.idle(self)
        self._g.request_deadline.arm(self.guard.header_timeout_s, "header_timeout")

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        self._track(before)

    def on_response_complete(self) -> None:
        before = self.cycle
        if self.transport.is_closing():
            self._linger()
        elif self._pipelined_too_deep():
            self.close_for("pipelining")
        else:
            self.guard.idle(self)
            self._g.request_deadline.arm(self.guard.header_timeout_s, "header_timeout")  # the next one, on keep-alive
        super().on_response_complete()  # may start a pipelined request at once
        self._track(before)

    def pause_writing(self) -> None:
        """asyncio: more than its high-water mark is queued, the kernel's buffers full. Until the client takes some,
        the connection waits on it as an idle one does."""
        super().pause_writing()
        self.guard.idle(self)
        self._g.write_deadline.arm(self.guard.write_timeout_s, "write_timeout")

    def resume_writing(self) -> None:
        """asyncio: the client took most of what was queued."""
        super().resume_writing()
        if self.transport.is_closing():  # what is left must still reach it: a fresh deadline, as it made progress
            self._g.write_deadline.arm(self.guard.write_timeout_s, "write_timeout")
            return
        self._g.write_deadline.disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            self.guard.busy(self)  # its answer goes out again

    def eof_received(self) -> None:
        """The client ended its side: asyncio closes the transport once this returns (as uvicorn lets it)."""
        self.loop.call_soon(self._linger)

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._linger()

    def shutdown(self) -> None:
        super().shutdown()
        self._linger()

    def connection_lost(self, exc: Exception | None) -> None:
        self._g.lost = True
        self._g.request_deadline.disarm()
        self._g.write_deadline.disarm()
        self.guard.lost(self, self._g.closed_by_guard)
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 or the head limits refused, with the status that says why; then close."""
        status, text = self._head.refused or (400, request_heads.REFUSED_BY_H11[400])
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
        self._linger()

    def close_for(self, reason: str) -> None:
        """Abort, not close: a peer that reads nothing must not keep the descriptor through a pending write."""
        if self._g.closed_by_guard:
            return
        self._g.request_deadline.disarm()
        self._g.write_deadline.disarm()
        self._g.closed_by_guard = True
        self.guard.closed_by_guard(self, reason)
        self.transport.abort()

    async def _app_then_linger(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        """The app; then, if it raised or left its response unfinished, the linger of what uvicorn closes on."""
        cycle, finished = self.cycle, False
        try:
            await self._app(scope, receive, send)
            finished = cycle.response_complete
        finally:
            if not finished:  # uvicorn's `run_asgi` closes the transport after this returns
                self.loop.call_soon(self._linger)

    def _linger(self) -> None:
        """The transport is closing: asyncio keeps it until the client has taken every byte queued for it. So that
        wait has the write deadline (running since the write blocked, if it did), and may be cut for the cap."""
        if self._g.lost or self._g.closed_by_guard or not self.transport.is_closing():
            return
        self._g.request_deadline.disarm()  # no request is awaited any more
        if not self.transport.get_write_buffer_size():
            return  # nothing queued: asyncio releases it on its next pass
        self.guard.idle(self)
        if not self._g.write_deadline.armed:
            self._g.write_deadline.arm(self.guard.write_timeout_s, "write_timeout")

    def _pipelined_too_deep(self) -> bool:
        """At a response's end: is the next request, already (partly) here, one too many sent ahead of answers?"""
        sent_ahead = self._head.buffered > 0 or self.flow.read_paused
        self._g.pipelined = self._g.pipelined + 1 if sent_ahead else 0
        return self._g.pipelined > MAX_PIPELINED

    def _track(self, before: RequestResponseCycle | None) -> None:
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is None:
            return
        if cycle is not before:  # a request's headers are complete
            # Held by an open GET stream for as long as it is open. Swapped before the request's task first runs,
            # so nobody waits on the old one yet.
            _as_signal(cycle, "message_event")
            if not self.flow.write_paused:  # else it waits on its client still, behind the answers before
                self.guard.busy(self)
            if cycle.more_body:
                self._g.request_deadline.arm(self.guard.body_timeout_s, "body_timeout")
            else:
                self._g.request_deadline.disarm()
        elif self._g.request_deadline.reason == "body_timeout" and not cycle.more_body:
            self._g.request_deadline.disarm()

    def _request_expired(self, reason: str) -> None:
        if not self.transport.is_closing():  # already on its way out: `_linger` holds it to the write deadline
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
