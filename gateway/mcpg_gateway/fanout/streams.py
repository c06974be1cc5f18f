"""The SSE streams of /mcp that notifications are written to: found beside the SDK, which owns them.

The SDK opens every stream, pings it and ends it; the gateway only adds `notifications/resources/updated`
frames to it (`delivery.py`), straight to the ASGI `send` the response goes out through, instead of through the
SDK's per-message objects, queues and tasks. `Streams.capture` is the ASGI middleware in front of the SDK's app
that makes this possible: per /mcp request it keeps that `send` and how far the response has got in a `Stream`.
A POST's is reachable from the request's scope (the MCP handlers get it from their request context: a listen
stream is its request's response); every handshake-era GET stream the SDK accepted is indexed by its session
id, for as long as it is open.

A frame is written whole or not at all (each `send` is one HTTP chunk), so frames written here and messages
the SDK writes on the same stream never interleave within a frame. A write comes after the response has
started (and, for a listen stream, after its acknowledgement went out), and none after its end.

A listen stream, once acknowledged, is carried on past the SDK (`Stream.carry_on`): the SDK answers its request
at once, that answer is not written, and the SDK's per-request machinery (its task group and tasks, memory
streams, cancel scopes, span and parsed models, about two thirds of what an open listen stream held) is let go.
From then on the stream is this module's: it pings the stream as the SDK did, notices the client leave, and
writes the stream's last event, the listen's result in the SDK's bytes (`sdk/responses.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpg_gateway import mcp_requests
from mcpg_gateway.fanout import eager
from mcpg_gateway.sdk.responses import PING, PING_INTERVAL_S

logger = logging.getLogger(__name__)

SCOPE_KEY = "mcpg.stream"
EVENT_STREAM = b"text/event-stream"

Body = Callable[[], Awaitable[bytes]]
"""What carries a stream on past the SDK: writes to it until it should end, then gives its last event."""


class Stream:
    """One /mcp response: the `send` it goes out through, and whether notifications may be written to it now."""

    __slots__ = (
        "_carried",
        "_flushed_waiter",
        "_on_started",
        "_ping",
        "_pinging",
        "_send",
        "ended",
        "flushed",
        "started",
    )

    def __init__(self, send: Send, on_started: Callable[[Stream], None] | None = None) -> None:
        """`on_started`: told once the SDK has started the response as an SSE stream (a session's GET stream)."""
        self._send, self._on_started = send, on_started
        self.started = False
        """The SDK sent the response's status and headers: an SSE stream (200, `text/event-stream`)."""
        self.flushed = False
        """And at least one body chunk after them (a listen stream's acknowledgement)."""
        self.ended = False
        """The response is complete, or its request is over: nothing more may be written."""
        self._flushed_waiter: asyncio.Future[None] | None = None
        self._carried: tuple[Body, Callable[[], None]] | None = None
        self._ping: asyncio.TimerHandle | None = None
        self._pinging: asyncio.Task[None] | None = None

    async def send(self, message: Message) -> None:
        """The `send` the SDK's app is given: passes each message on, and notes what it changed. (A bound method
        rather than a closure: one per open stream, so its size counts at 10,000 sessions.)"""
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            if self._carried is not None:
                return  # the SDK's answer to a stream carried on past it: `_carry_on` writes the stream's end
            self.ended = True  # its last chunk: no frame may follow it
        await self._send(message)
        self._observe(message)

    def when_flushed(self, then: Callable[[], None]) -> None:
        """Call `then` once the first body chunk has gone out (or the stream ended first), at once if it has."""
        if self.flushed or self.ended:
            then()
            return
        if self._flushed_waiter is None:
            self._flushed_waiter = asyncio.get_running_loop().create_future()
        self._flushed_waiter.add_done_callback(lambda _: then())

    def carry_on(self, body: Body, on_leave: Callable[[], None]) -> None:
        """Once the SDK's app returns, carry this stream on with `body` instead of ending it with the SDK's answer
        (which is not written). `on_leave` is told if the client goes away meanwhile; `body` should then end."""
        self._carried = (body, on_leave)

    async def _carry_on(self, receive: Receive) -> None:
        """Run the stream's `body`, pinging it and watching for the client to leave, then write its last event."""
        assert self._carried is not None
        body, on_leave = self._carried
        leaving = asyncio.get_running_loop().create_task(_until_disconnect(receive, on_leave))
        self._schedule_ping()
        try:
            last = await body()
        finally:
            leaving.cancel()
            if self._ping is not None:
                self._ping.cancel()
        if self.started and not self.ended:  # (not started: the client left before the SDK could start it)
            self.ended = True
            await self._send({"type": "http.response.body", "body": last, "more_body": False})

    def _schedule_ping(self) -> None:
        self._ping = asyncio.get_running_loop().call_later(PING_INTERVAL_S, self._ping_now)

    def _ping_now(self) -> None:
        """Ping, unless the last ping is still waiting for a client that reads nothing: one such write at a time,
        not one more every interval for as long as it stays stuck."""
        if not self.writable:
            return
        if self._pinging is None or self._pinging.done():
            self._pinging = self.write(PING)
        self._schedule_ping()

    @property
    def writable(self) -> bool:
        return self.started and not self.ended

    def write(self, frame: bytes) -> asyncio.Task[None] | None:
        """Write one SSE frame: at once if the connection takes it without waiting (None), else the task still
        writing it. A stream found to be over is marked ended and the frame is not written (None)."""
        message = {"type": "http.response.body", "body": frame, "more_body": True}
        try:
            return eager.start(self._send(message))
        except Exception as e:  # the response completed under us (RuntimeError from the server): it is over
            logger.debug("notification not written, the stream is over: %s", type(e).__name__)
            self.ended = True
            return None

    async def wait_flushed(self) -> None:
        """Until the first body chunk after the headers has gone out (bounded by the request's own life)."""
        if self.flushed or self.ended:
            return
        if self._flushed_waiter is None:
            self._flushed_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._flushed_waiter)

    def _observe(self, message: Message) -> None:
        """After `message` went out: what it changed."""
        if message["type"] == "http.response.start":
            self.started = message["status"] == 200 and _is_event_stream(message.get("headers", ()))
            if self.started and self._on_started is not None:
                self._on_started(self)
        elif message["type"] == "http.response.body" and self.started:
            self.flushed = True
            if self._flushed_waiter is not None and not self._flushed_waiter.done():
                self._flushed_waiter.set_result(None)

    def _end(self) -> None:
        self.ended = True
        if self._flushed_waiter is not None and not self._flushed_waiter.done():
            self._flushed_waiter.set_result(None)


class Streams:
    """The open handshake-era GET streams by session id, and the middleware that keeps them."""

    def __init__(self) -> None:
        self._by_session: dict[str, Stream] = {}

    def of_session(self, session_id: str) -> Stream | None:
        """The session's open GET stream, if it has one now."""
        return self._by_session.get(session_id)

    def _session_stream(self, session_id: str) -> Callable[[Stream], None]:
        def started(stream: Stream) -> None:
            self._by_session[session_id] = stream  # the SDK accepted it as the session's GET stream

        return started

    def capture(self, app: ASGIApp) -> ASGIApp:
        """`app` (the SDK's /mcp app), each request's `Stream` kept in its scope under `SCOPE_KEY`."""

        async def captured(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            # The session id as the SDK reads it, from the request's one classification (`mcp_requests`).
            session_id = mcp_requests.of(scope).session_id if scope["method"] == "GET" else None
            stream = Stream(send, on_started=None if session_id is None else self._session_stream(session_id))
            if session_id is None:  # a GET stream is found by its session id; a key more costs the scope a resize
                scope[SCOPE_KEY] = stream
            try:
                await app(scope, receive, stream.send)
                if stream._carried is not None:
                    await stream._carry_on(receive)
            finally:
                stream._end()
                # The scope holds the stream, the stream uvicorn's `send`, whose request cycle the scope: a
                # reference cycle per request, freed only by the cyclic collector (issue 36: churn that a session's
                # twelve opening requests left in the heap). Cut it.
                scope.pop(SCOPE_KEY, None)
                if session_id is not None and self._by_session.get(session_id) is stream:
                    del self._by_session[session_id]

        return captured


async def _until_disconnect(receive: Receive, on_leave: Callable[[], None]) -> None:
    """Wait for the client to go away (the request's body was read whole by the SDK), then say so."""
    while (await receive())["type"] != "http.disconnect":
        pass
    on_leave()


def of_request(request: Any) -> Stream | None:
    """The `Stream` of the HTTP request an MCP handler serves (its context's `request`); None off HTTP (stdio)."""
    scope = getattr(request, "scope", None)
    stream = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return stream if isinstance(stream, Stream) else None


def session_id(request: Any) -> str | None:
    """The `Mcp-Session-Id` of the HTTP request an MCP handler serves; None off HTTP or without one."""
    scope = getattr(request, "scope", None)
    return mcp_requests.of(scope).session_id if isinstance(scope, dict) else None


def _is_event_stream(headers: Any) -> bool:
    return any(k.lower() == b"content-type" and v.split(b";")[0].strip() == EVENT_STREAM for k, v in headers)
