"""What the SDK's stateful session manager answers to each handshake-era request shape: the table the gateway's
door (`sdk/door.py`: handshake sessions kept by the gateway over the SDK's stateless handling, their GET streams
at the seam) answers byte for byte, but for one difference on purpose. It runs against both: the SDK's stateful
manager as the gateway built it before the door, and the door as the gateway builds it (`sdk/manager.py`).

Each case is one request after a session was opened (initialize, then `notifications/initialized`) by alice.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.types import ASGIApp

from mcpg_gateway import identity
from mcpg_gateway.identity import Principal
from mcpg_gateway.sdk.auth import AuthenticatedUser

from .test_sdk_contract import _ACCEPT, _INITIALIZE, _S, _V, ALICE, Answer, _message_body, ask, open_session, served

BOB = AuthenticatedUser(identity.access_token(Principal("bob")))
Headers = list[tuple[bytes, bytes]]
SSE = (b"accept", b"text/event-stream")


def _error(message: str, code: int = -32600) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, separators=(",", ":")
    ).encode()


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    headers: Callable[[Headers], Headers]
    """The request's headers, given the open session's (its id and protocol version)."""
    body: bytes
    user: AuthenticatedUser
    status: int | None
    """None: the SDK's app returned without answering."""
    answer: bytes
    names_session: bool
    """Whether the answer carries an `mcp-session-id` header (the open session's, or for a refused opening the
    id of the session the SDK admitted and discarded)."""
    door_differs: tuple[int | None, bytes, bool] | None = None
    """What the door answers instead, on purpose (status, body, names the session); None: the same."""


LIST = _message_body("resources/list", 2)
CASES = [
    Case(
        "initialized",
        "POST",
        lambda s: [*_ACCEPT, *s],
        _message_body("notifications/initialized"),
        ALICE,
        202,
        b"",
        True,
    ),
    Case(
        "a request naming no session",
        "POST",
        lambda s: [*_ACCEPT, (_V, b"2025-11-25")],
        LIST,
        ALICE,
        400,
        _error("Bad Request: Missing session ID"),
        True,
    ),
    Case(
        "an unknown session",
        "POST",
        lambda s: [*_ACCEPT, (_S, b"nope"), (_V, b"2025-11-25")],
        LIST,
        ALICE,
        404,
        _error("Session not found"),
        False,
    ),
    Case(
        "another principal's session",
        "POST",
        lambda s: [*_ACCEPT, *s],
        LIST,
        BOB,
        404,
        _error("Session not found"),
        False,
    ),
    Case(
        "a GET stream not accepting SSE",
        "GET",
        lambda s: [(b"accept", b"application/json"), *s],
        b"",
        ALICE,
        406,
        _error("Not Acceptable: Client must accept text/event-stream"),
        True,
    ),
    Case(
        "a GET stream naming an unknown protocol version",
        "GET",
        lambda s: [SSE, s[0], (_V, b"1999-01-01")],
        b"",
        ALICE,
        405,
        b"",
        False,
    ),
    Case(
        "a GET stream asking to resume, without an event store",
        "GET",
        lambda s: [SSE, *s, (b"last-event-id", b"x")],
        b"",
        ALICE,
        None,
        b"",
        False,
        # The SDK gives no answer at all (uvicorn sends a 500); the gateway drops the header before either sees
        # it (`mcp_requests.Front`) and serves a fresh stream, as the spec allows. The door does the same.
        door_differs=(200, b"", True),
    ),
    Case("a GET stream", "GET", lambda s: [SSE, *s], b"", ALICE, 200, b"", True),
    Case("PUT", "PUT", lambda s: [*_ACCEPT, *s], b"", ALICE, 405, _error("Method Not Allowed"), True),
    Case("DELETE", "DELETE", lambda s: [*_ACCEPT, *s], b"", ALICE, 200, b"", True),
    Case(
        "initialize again, naming the session",
        "POST",
        lambda s: [*_ACCEPT, *s],
        _INITIALIZE,
        ALICE,
        200,
        b'{"jsonrpc":"2.0","id":1,"result":{"capabilities":{},"protocolVersion":"2025-11-25",'
        b'"serverInfo":{"name":"contract","version":""}}}',
        True,
    ),
    Case(
        "a request on the session",
        "POST",
        lambda s: [*_ACCEPT, *s],
        LIST,
        ALICE,
        200,
        b'{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found","data":"resources/list"}}',
        True,
    ),
]


@contextlib.asynccontextmanager
async def door() -> AsyncIterator[ASGIApp]:
    """The gateway's manager: the door over the SDK's manager in stateless mode."""
    async with served() as (_, app):
        yield app


@contextlib.asynccontextmanager
async def stateful() -> AsyncIterator[ASGIApp]:
    """The SDK's stateful manager, as the gateway built it before the door (but answering in JSON, as the gateway
    does now: `sdk/manager.py`)."""
    manager = StreamableHTTPSessionManager(
        Server("contract"),
        stateless=False,
        json_response=True,
        session_idle_timeout=60,
        max_sessions=10,
        max_request_body_size=1 << 20,
    )
    async with manager.run():
        yield StreamableHTTPASGIApp(manager)


APPS = {"the SDK's stateful manager": stateful, "the gateway's door": door}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("serving", list(APPS))
async def test_each_request_shape_is_answered_as_the_stateful_manager_answers_it(serving: str, case: Case) -> None:
    async with APPS[serving]() as app:
        session = await open_session(app, ALICE)
        answer: Answer = await ask(app, case.method, case.headers(session), case.body, case.user)
    expected = (case.status, case.answer, case.names_session)
    if serving == "the gateway's door" and case.door_differs is not None:
        expected = case.door_differs
    assert (answer.status, answer.body, _S in answer.headers) == expected
