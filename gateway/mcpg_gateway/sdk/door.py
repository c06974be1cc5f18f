"""Handshake-era sessions kept by the gateway, each request served by the SDK in stateless mode (`sdk/manager.py`
serves /mcp through it).

The SDK's stateful manager keeps, per session, a server task with its task group, four memory streams and a
runner, and serves its GET stream through sse_starlette (five tasks): about 55 KB of the 134 KB a session costs.
This door keeps what a session is (`handshake_sessions.py`: id, owner, scratch, idle countdown) and answers as the
stateful manager does, byte for byte (`test_handshake_answers.py` runs one table of requests against both):

- a request naming no session: at the cap, the manager's 503; an initialize opens a session and is served by the
  SDK, its answer naming the new id; anything else gets the stateful transport's own refusal (a throwaway
  transport with a fresh id answers it: 400 "Missing session ID", or whatever it finds wrong first);
- a request naming a session that is unknown or another principal's: the manager's 404;
- a POST on a session: served by the SDK (stateless), its answer naming the session; the handlers find the
  session's scratch in the scope (`SCOPE_KEY`);
- a GET on a session: the transport's checks (406, 409 while one is open), then the SSE stream is started here
  with the transport's headers and held open until the client leaves or the session ends; the fan-out writes
  to it as to any GET stream (`fanout/streams.py` finds it by the session id);
- DELETE and any other method: a throwaway transport with the session's id answers, exactly; DELETE then ends the
  session.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from http import HTTPStatus
from typing import Any

from mcp.server.streamable_http import StreamableHTTPServerTransport, check_accept_headers
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpg_gateway.handshake_sessions import HandshakeSession, HandshakeSessions
from mcpg_gateway.sdk import auth, requests
from mcpg_gateway.sdk.responses import PING, PING_INTERVAL_S

SCOPE_KEY = "mcpg.handshake_session"
"""Where a request on a session carries it, for the handlers (`sdk/connection.py`)."""
SSE_HEADERS = [
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"content-type", b"text/event-stream"),
    (b"x-accel-buffering", b"no"),
]
"""The stateful transport's GET stream headers (sse_starlette adds `x-accel-buffering`), the session id after."""


class HandshakeDoor:
    def __init__(self, app: ASGIApp, sessions: HandshakeSessions) -> None:
        """`app`: the SDK's session manager in stateless mode."""
        self._app, self._sessions = app, sessions
        self._streams: dict[str, asyncio.Task[Any]] = {}
        """The sessions with a GET stream open, each with the request task holding it (cancelled when the
        session ends)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request = requests.classify(scope)
        if request.era is not requests.Era.HANDSHAKE:
            await self._app(scope, receive, send)
            return
        owner = auth.client_id(scope) or ""  # behind authentication (`identity.protect`): always a caller
        if request.session_id is None:
            await self._open(scope, receive, send, owner)
            return
        session = self._sessions.get(request.session_id, owner)
        if session is None:
            await _manager_error(send, "Session not found", HTTPStatus.NOT_FOUND)
            return
        method = scope["method"]
        if method == "POST":
            await self._post(session, scope, receive, send)
        elif method == "GET":
            await self._get(session, scope, receive, send)
        elif method == "DELETE":
            await self._delete(session, scope, receive, send)
        else:
            await _transport(session.id).handle_request(scope, receive, send)

    async def end(self, session_id: str) -> None:
        """End the session (idle, a principal removed, shutdown): its GET stream too."""
        session = self._forget(session_id)
        if session is not None:
            await self._sessions.close(session)

    async def end_all(self) -> None:
        """Shutdown: every session ends."""
        for session_id in list(self._sessions.owners()):
            await self.end(session_id)

    def _forget(self, session_id: str) -> HandshakeSession | None:
        """The session's id answers 404 from now on, and its GET stream ends."""
        session = self._sessions.forget(session_id)
        if session is not None and (holding := self._streams.pop(session_id, None)) is not None:
            holding.cancel()  # once: its `_get` sees the session gone, ends the stream and returns
        return session

    async def _delete(self, session: HandshakeSession, scope: Scope, receive: Receive, send: Send) -> None:
        """The transport's answer; a DELETE it accepts ends the session before the answer goes out, so a client may
        open its next one at once (its share, `sessions.py`, no longer counts this one)."""
        forgotten: HandshakeSession | None = None

        async def ending(message: Message) -> None:
            nonlocal forgotten
            if message["type"] == "http.response.start" and message["status"] < 400:
                forgotten = self._forget(session.id)
            await send(message)

        await _transport(session.id).handle_request(scope, receive, ending)
        if forgotten is not None:
            await self._sessions.close(forgotten)

    async def _open(self, scope: Scope, receive: Receive, send: Send, owner: str) -> None:
        body = b""
        if len(self._sessions) >= self._sessions.max_sessions:  # before the body is read, as the SDK's manager
            await _manager_error(send, "Too many open sessions", HTTPStatus.SERVICE_UNAVAILABLE, INTERNAL_ERROR)
            return
        if scope["method"] == "POST":
            body = await _body(receive)
            receive = _replay(body, receive)
        if scope["method"] != "POST" or not _is_initialize(body):
            # The stateful manager admits a session for it, and its transport refuses it (and the session goes).
            refusing = _transport(_fresh_id())
            async with refusing.connect():
                await refusing.handle_request(scope, receive, send)
            return
        session = self._sessions.open(owner)
        if session is None:  # others opened the last ones while this body was read
            await _manager_error(send, "Too many open sessions", HTTPStatus.SERVICE_UNAVAILABLE, INTERNAL_ERROR)
            return
        status = await self._serve(session, scope, receive, send)
        if status is None or status >= 400:
            await self._sessions.end(session.id)  # nothing was established, as the manager discards it
        else:
            self._sessions.done(session)

    async def _post(self, session: HandshakeSession, scope: Scope, receive: Receive, send: Send) -> None:
        self._sessions.begin(session)
        try:
            await self._serve(session, scope, receive, send)
        finally:
            self._sessions.done(session)

    async def _serve(self, session: HandshakeSession, scope: Scope, receive: Receive, send: Send) -> int | None:
        """The SDK's (stateless) answer, naming the session; its status (None if it gave none)."""
        scope[SCOPE_KEY] = session
        status: int | None = None
        name = (requests.SESSION_HEADER, session.id.encode())

        async def naming(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), name]}
            await send(message)

        await self._app(scope, receive, naming)
        return status

    async def _get(self, session: HandshakeSession, scope: Scope, receive: Receive, send: Send) -> None:
        _, accepts_sse = check_accept_headers(Request(scope, receive))
        if not accepts_sse:
            message = "Not Acceptable: Client must accept text/event-stream"
            await _refuse(session.id, message, HTTPStatus.NOT_ACCEPTABLE, scope, receive, send)
            return
        if session.id in self._streams:
            message = "Conflict: Only one SSE stream is allowed per session"
            await _refuse(session.id, message, HTTPStatus.CONFLICT, scope, receive, send)
            return
        holding = asyncio.current_task()
        assert holding is not None  # an ASGI app runs in its request's task
        self._streams[session.id] = holding
        self._sessions.begin(session)
        try:
            headers = [*SSE_HEADERS, (requests.SESSION_HEADER, session.id.encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            # Held here, in the request's own task, until the client leaves, pinging every `PING_INTERVAL_S`:
            # nothing else per stream but its timer (no task, no frame more), as each costs its share at 10,000
            # sessions (issue 36).
            while True:
                try:
                    async with asyncio.timeout(PING_INTERVAL_S):
                        while (await receive())["type"] != "http.disconnect":
                            pass
                    return
                except TimeoutError:
                    await send({"type": "http.response.body", "body": PING, "more_body": True})
        except asyncio.CancelledError:
            # `_forget` cancels the stream when the session ends: then the stream ends and the request returns;
            # any other cancellation (the server stopping) is passed on.
            if self._sessions.get(session.id, session.owner) is session or holding.uncancel() > 0:
                raise
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self._streams.get(session.id) is holding:
                del self._streams[session.id]
            if self._sessions.get(session.id, session.owner) is session:
                self._sessions.done(session)


async def _body(receive: Receive) -> bytes:
    """The request's whole body (bounded before it gets here: `mcp_requests.Envelope`)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` once, then the server's own (so a disconnect is still seen)."""
    pending: list[bytes] = [body]

    async def replayed() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replayed


def _is_initialize(body: bytes) -> bool:
    """Whether `body` is one JSON-RPC initialize request."""
    try:
        message: Any = json.loads(body)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


async def _refuse(
    session_id: str, message: str, status: HTTPStatus, scope: Scope, receive: Receive, send: Send
) -> None:
    """The transport's own error answer, naming the session."""
    await _transport(session_id)._create_error_response(message, status)(scope, receive, send)


def _transport(session_id: str) -> StreamableHTTPServerTransport:
    """A transport that only answers: with the session's id, it refuses, ends (DELETE) and names it as the
    stateful manager's transport of that session would; it never serves a message (it is never connected)."""
    return StreamableHTTPServerTransport(mcp_session_id=session_id)


def _fresh_id() -> str:
    return uuid.uuid4().hex  # as the SDK's manager makes a session id


async def _manager_error(send: Send, message: str, status: HTTPStatus, code: int = INVALID_REQUEST) -> None:
    """The manager's own JSON-RPC error answer (no session id header)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, separators=(",", ":")
    ).encode()
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": int(status), "headers": headers})
    await send({"type": "http.response.body", "body": body})
