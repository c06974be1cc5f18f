"""What the gateway relies on of the MCP SDK (mcp is pinned exactly), checked by behaviour through the real SDK.

Every reliance lives in `mcpg_gateway.sdk`; each test here drives the SDK itself (its session manager's ASGI app,
called as an HTTP server would, or a whole gateway on loopback with the SDK's client), so an SDK upgrade that
changes one fails here first, and names it:

- a session's scratch is one across its requests, and its exit stack is unwound when the session ends, which
  closes the gateway's subscriber of it (`sdk/connection.py`);
- the sessions kept at the door count a session opened and stop counting it once deleted (`sdk/manager.py`, the
  session limit); ending one answers its id 404 from then on;
- a request opens a session exactly when `sdk.requests.classify` says it does; the SDK refuses a body as JSON
  exactly when `sdk.requests.parsed` does, in each era; and a GET carrying `Last-Event-ID` is served as a fresh
  stream (no event store);
- the notification path (`fanout/frames.py`) writes the bytes the SDK would write for the same message in each
  era (compared with the SDK's own encoders).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp.types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.server import Server
from mcp.server import _streamable_http_modern as modern
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http import EventMessage, StreamableHTTPServerTransport
from mcp_types.jsonrpc import PARSE_ERROR, JSONRPCNotification
from sse_starlette import EventSourceResponse
from sse_starlette.event import ensure_bytes
from starlette.types import ASGIApp, Message

from mcpg_gateway import identity, mcp_requests
from mcpg_gateway.fanout import frames
from mcpg_gateway.fanout.endings import WATCH_META_KEY
from mcpg_gateway.fanout.states import STATE_META_KEY
from mcpg_gateway.identity import Principal
from mcpg_gateway.sdk import connection as connections
from mcpg_gateway.sdk import door, requests, responses
from mcpg_gateway.sdk import manager as managers
from mcpg_gateway.sdk.auth import AuthenticatedUser
from mcpg_gateway.sdk.protocol import SUBSCRIPTION_ID_META_KEY
from mcpg_testing import BOUND_S
from mcpg_testing.asgi import mcp_scope
from mcpg_testing.clients import legacy_client, subscribe
from mcpg_testing.configs import bearer, gateway_config, principal, watched
from mcpg_testing.gateways import GatewayFactory
from mcpg_testing.watching import until

WATCH = {"state": "active", "renewBy": "2026-12-01T04:00:00Z", "pollIntervalMs": 10000, "renewedByActivity": True}


# --- the frames: byte for byte the SDK's ------------------------------------------------------------------------


def _message(uri: str, meta: dict[str, Any]) -> JSONRPCNotification:
    """What the SDK's `ServerSession.send_notification` makes of the notification (its `_notify`)."""
    note = types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta))
    data = note.model_dump(by_alias=True, mode="json", exclude_none=True)
    return JSONRPCNotification(jsonrpc="2.0", method=data["method"], params=data.get("params"))


def sdk_modern_frame(uri: str, meta: dict[str, Any]) -> bytes:
    """The SDK's bytes on a 2026-07-28 response stream (`_SingleExchangeDispatchContext.notify`)."""
    return modern._sse_event(_message(uri, meta))


def sdk_legacy_frame(uri: str, meta: dict[str, Any]) -> bytes:
    """The SDK's bytes on a handshake-era GET stream: its event dict, encoded by sse_starlette's response."""
    event = StreamableHTTPServerTransport._create_event_data(None, EventMessage(_message(uri, meta)))  # type: ignore[arg-type]
    return ensure_bytes(event, EventSourceResponse.DEFAULT_SEPARATOR)


def our_frame(uri: str, *members: bytes) -> bytes:
    return frames.frame(frames.after_meta(uri), *members)


URIS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=60)


@given(uri=URIS)
def test_a_handshake_era_frame_is_byte_for_byte_the_sdks(uri: str) -> None:
    watch = frames.member(WATCH_META_KEY, WATCH)
    assert our_frame(uri, watch) == sdk_legacy_frame(uri, {WATCH_META_KEY: WATCH})


@given(uri=URIS, request_id=st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=20)))
def test_a_listen_frame_is_byte_for_byte_the_sdks(uri: str, request_id: int | str) -> None:
    members = (frames.subscription_member(request_id), frames.member(WATCH_META_KEY, WATCH))
    expected = sdk_modern_frame(uri, {SUBSCRIPTION_ID_META_KEY: request_id, WATCH_META_KEY: WATCH})
    if not _escaped_by_json_dumps(uri + str(request_id)):
        assert our_frame(uri, *members) == expected
    else:  # the SDK's modern encoder escapes DEL and non-ASCII (json.dumps); its pydantic one and ours write them
        assert _same_event(our_frame(uri, *members), expected)


@given(uri=URIS, state=st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=64))
def test_a_frame_with_its_uri_s_state_is_byte_for_byte_the_sdks(uri: str, state: str) -> None:
    members = (frames.subscription_member(7), frames.member(WATCH_META_KEY, WATCH))
    expected = sdk_modern_frame(uri, {SUBSCRIPTION_ID_META_KEY: 7, WATCH_META_KEY: WATCH, STATE_META_KEY: state})
    ours = frames.frame(frames.after_meta(uri, state), *members)
    assert ours == expected if not _escaped_by_json_dumps(uri) else _same_event(ours, expected)
    legacy = frames.frame(frames.after_meta(uri, state), members[1])
    assert legacy == sdk_legacy_frame(uri, {WATCH_META_KEY: WATCH, STATE_META_KEY: state})


def _escaped_by_json_dumps(text: str) -> bool:
    """Whether `text` holds a character json.dumps escapes and a UTF-8 JSON encoder may write as is: past `~`
    (DEL, 0x7f, and every non-ASCII character). Both escape the control characters below the space alike."""
    return any(c > "~" for c in text)


def _same_event(ours: bytes, sdks: bytes) -> bool:
    """The same SSE event carrying the same JSON (the modern encoder escapes non-ASCII; both are one data line)."""
    import json

    def parts(frame: bytes) -> tuple[bytes, Any]:
        head, data = frame.split(b"\r\ndata: ", 1)
        assert data.endswith(b"\r\n\r\n")
        assert b"\n" not in data[:-4]
        assert b"\r" not in data[:-4]
        return head, json.loads(data[:-4])

    return parts(ours) == parts(sdks)


def _list_changed(meta: dict[str, Any] | None) -> JSONRPCNotification:
    params = types.NotificationParams(_meta=meta) if meta is not None else None
    data = types.ResourceListChangedNotification(params=params).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    return JSONRPCNotification(jsonrpc="2.0", method=data["method"], params=data.get("params"))


def test_a_handshake_era_list_change_is_byte_for_byte_the_sdks() -> None:
    event = StreamableHTTPServerTransport._create_event_data(None, EventMessage(_list_changed(None)))  # type: ignore[arg-type]
    assert frames.list_changed() == ensure_bytes(event, EventSourceResponse.DEFAULT_SEPARATOR)


@given(
    request_id=st.one_of(st.integers(-(2**53), 2**53), st.text(alphabet=st.characters(max_codepoint=0x7E), max_size=20))
)
def test_a_listen_s_list_change_is_byte_for_byte_the_sdks(request_id: int | str) -> None:
    expected = modern._sse_event(_list_changed({SUBSCRIPTION_ID_META_KEY: request_id}))
    assert frames.list_changed(frames.subscription_member(request_id)) == expected


@pytest.mark.parametrize("uri", ["drive://doc/1", 'weird://"quoted"\\back\nline', "unicode://é/☃"])
def test_frames_are_one_event_whose_data_is_one_line(uri: str) -> None:
    frame = our_frame(uri, frames.member(WATCH_META_KEY, WATCH))
    assert frame.startswith(b"event: message\r\ndata: {")
    assert frame.endswith(b"}\r\n\r\n")
    assert frame.count(b"\n") == 3  # event line, data line, blank line


# --- the SDK's session manager, called as an HTTP server would ---------------------------------------------------


@dataclass
class Answer:
    status: int | None = None
    """None: the SDK's app returned without answering at all."""
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""

    def error_code(self) -> int | None:
        """The JSON-RPC error code of a JSON (or one-event SSE) answer; None if it carries none."""
        data = self.body.split(b"data: ", 1)[-1]
        error = json.loads(data).get("error") if data.strip() else None
        return error["code"] if isinstance(error, dict) else None


async def ask(
    app: ASGIApp, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"", user: object = None
) -> Answer:
    """One request to `app`, its whole answer; a GET stream is left once it has started (the client disconnects)."""
    scope: dict[str, Any] = mcp_scope(method, headers)
    if user is not None:
        scope["user"] = user  # as the auth middleware leaves it (`sdk/auth.py`)
    incoming: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    done = asyncio.Event()
    answer = Answer()

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status, answer.headers = message["status"], dict(message.get("headers", []))
            if method == "GET":
                done.set()
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")
            if not message.get("more_body", False):
                done.set()

    async with asyncio.timeout(BOUND_S):
        await app(scope, receive, send)
    return answer


_ACCEPT = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]
_V, _S = b"mcp-protocol-version", b"mcp-session-id"
_INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
).encode()
ALICE = AuthenticatedUser(identity.access_token(Principal("alice")))


def _message_body(method: str, request_id: int | None = None, **params: Any) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
    return json.dumps(message if request_id is None else {**message, "id": request_id}).encode()


@contextlib.asynccontextmanager
async def served(
    server: Server[Any] | None = None, idle_timeout_s: float = 60, max_sessions: int = 10
) -> AsyncIterator[tuple[managers.SessionManager, ASGIApp]]:
    """A manager built as the gateway builds it (for `server`, or one with no handlers), running; its ASGI app.
    (Not a fixture: the manager's task group must be left in the task that entered it.)"""
    manager = managers.session_manager(
        server or Server("contract"), idle_timeout_s=idle_timeout_s, max_sessions=max_sessions, max_body_bytes=1 << 20
    )
    async with manager.run():
        yield manager, managers.asgi_app(manager)


async def open_session(app: ASGIApp, user: object = None) -> list[tuple[bytes, bytes]]:
    """Initialize a session (and tell it `initialized`): the headers that name it."""
    opened = await ask(app, "POST", _ACCEPT, _INITIALIZE, user)
    assert opened.status == 200
    session = [(_S, opened.headers[_S]), (_V, b"2025-11-25")]
    assert (
        await ask(app, "POST", [*_ACCEPT, *session], _message_body("notifications/initialized"), user)
    ).status == 202
    return session


# --- a listen's result, written past the SDK (`sdk/responses.py`) ------------------------------------------------


def _modern_listen(request_id: int | str) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    params = {"notifications": {"resourceSubscriptions": ["a://1"]}, "_meta": meta}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}).encode()


@pytest.mark.parametrize("request_id", [7, "listen-é"])
async def test_a_listen_s_result_event_is_byte_for_byte_the_one_the_sdk_ends_its_stream_with(
    request_id: int | str,
) -> None:
    ended = {"reason": "shutdown", "detail": "the gateway is stopping"}
    result = types.SubscriptionsListenResult(_meta={SUBSCRIPTION_ID_META_KEY: request_id, "dev.mcpg/watch-end": ended})

    async def listen(ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams) -> Any:
        # An acknowledgement first, as the gateway sends one, so the SDK answers with an SSE stream.
        note = types.SubscriptionsAcknowledgedNotification(
            params=types.SubscriptionsAcknowledgedNotificationParams(notifications=params.notifications)
        )
        await ctx.session.send_notification(note, related_request_id=ctx.request_id)
        return result

    headers = [*_ACCEPT, (_V, b"2026-07-28"), (b"mcp-method", b"subscriptions/listen")]
    server = Server("contract", version="1.2.3", on_subscriptions_listen=listen)
    async with served(server) as (_, app):
        answer = await ask(app, "POST", headers, _modern_listen(request_id), ALICE)
    assert answer.status == 200
    ours = responses.result_event(server, "2026-07-28", "subscriptions/listen", request_id, result)
    assert b"io.modelcontextprotocol/serverInfo" in ours
    assert answer.body.endswith(b"\r\n\r\n" + ours)


# --- a session's scratch and its end (`sdk/connection.py`) ------------------------------------------------------


class _Scratches:
    """A subscribe handler that keeps what `sdk.connection` hands it, and is told when each session ends."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.ended: list[str] = []

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> Any:
        scratch = connections.of(ctx)
        if not scratch.state:
            scratch.exit_stack.callback(self.ended.append, params.uri)
        scratch.state[params.uri] = True
        self.seen.append(scratch.state)
        return types.EmptyResult()


async def test_a_session_s_scratch_is_one_across_its_requests_and_its_exit_stack_unwinds_when_it_is_deleted() -> None:
    scratches = _Scratches()
    async with served(Server("contract", on_subscribe_resource=scratches.subscribe)) as (_, app):
        first, second = await open_session(app), await open_session(app)
        for n, (session, uri) in enumerate([(first, "a://1"), (first, "a://2"), (second, "b://1")], start=2):
            answer = await ask(app, "POST", [*_ACCEPT, *session], _message_body("resources/subscribe", n, uri=uri))
            assert (answer.status, answer.error_code()) == (200, None)
        assert scratches.seen[0] is scratches.seen[1]  # one session's requests share its scratch...
        assert scratches.seen[2] is not scratches.seen[0]  # ...and no other session's
        assert scratches.ended == []
        assert (await ask(app, "DELETE", first)).status == 200
        await until(lambda: scratches.ended == ["a://1"])  # only the deleted session's stack unwound
    assert scratches.ended == ["a://1", "b://1"]  # and every other one's when the manager stops


async def test_a_session_s_subscriber_is_closed_when_its_session_ends(gateway_factory: GatewayFactory) -> None:
    raw = gateway_config(
        watched("a", "drive://a", {"type": "webhook", "token": "tok-a"}),
        watched("b", "drive://b", {"type": "webhook", "token": "tok-b"}),
    )
    gw = await gateway_factory(raw)

    def session_subscribers() -> float:
        return gw.gw.metrics.registry.get_sample_value("mcpg_subscribers", {"kind": "session"}) or 0.0

    async with legacy_client(gw.mcp_url) as sub:
        await subscribe(sub, "drive://a")
        await subscribe(sub, "drive://b")
        assert session_subscribers() == 1  # the session's one subscriber, kept in its scratch across requests
    # Leaving the client sends DELETE: the SDK unwinds the session's exit stack, which closes the subscriber.
    await until(lambda: session_subscribers() == 0)


# --- the sessions kept at the door (`sdk/manager.py`) ------------------------------------------------------------


IDLE_S = 1.0
"""Long enough that a session's GET stream has started well before the session could expire."""


async def test_ending_a_session_answers_its_id_404_and_unwinds_its_exit_stack() -> None:
    scratches = _Scratches()
    async with served(Server("contract", on_subscribe_resource=scratches.subscribe)) as (manager, app):
        first, second = await open_session(app, ALICE), await open_session(app, ALICE)
        for session, uri in ((first, "a://1"), (second, "b://1")):
            body = _message_body("resources/subscribe", 2, uri=uri)
            assert (await ask(app, "POST", [*_ACCEPT, *session], body, ALICE)).status == 200
        assert sorted(manager.owners().values()) == ["alice", "alice"]
        await manager.end(dict(first)[_S].decode())
        await until(lambda: scratches.ended == ["a://1"])  # as a DELETE would: its stack unwound, the other's not
        answer = await ask(app, "POST", [*_ACCEPT, *first], _message_body("resources/subscribe", 3, uri="a://2"), ALICE)
        assert answer.status == 404
        assert list(manager.owners()) == [dict(second)[_S].decode()]


async def test_a_session_idle_past_its_timeout_ends_but_not_one_with_a_get_stream_open() -> None:
    scratches = _Scratches()
    server = Server("contract", on_subscribe_resource=scratches.subscribe)
    async with served(server, idle_timeout_s=IDLE_S) as (manager, app):
        listening = await open_session(app, ALICE)
        started, leave = asyncio.Event(), asyncio.Event()
        stream = asyncio.create_task(hold_get_stream(app, listening, started, leave))
        await asyncio.wait_for(started.wait(), BOUND_S)
        # The listening session subscribes first, so were its stream not keeping it, it would expire first.
        body = _message_body("resources/subscribe", 2, uri="b://1")
        assert (await ask(app, "POST", [*_ACCEPT, *listening], body, ALICE)).status == 200
        idle = await open_session(app, ALICE)
        body = _message_body("resources/subscribe", 2, uri="a://1")
        assert (await ask(app, "POST", [*_ACCEPT, *idle], body, ALICE)).status == 200
        await until(lambda: scratches.ended == ["a://1"])  # its exit stack unwound: the implicit unsubscribe
        assert list(manager.owners()) == [dict(listening)[_S].decode()]  # an open GET stream is a request in flight
        leave.set()
        assert await stream == 200
        await until(lambda: scratches.ended == ["a://1", "b://1"])  # idle once its stream is left


async def test_every_session_ends_when_the_manager_stops() -> None:
    scratches = _Scratches()
    async with served(Server("contract", on_subscribe_resource=scratches.subscribe)) as (manager, app):
        session = await open_session(app, ALICE)
        body = _message_body("resources/subscribe", 2, uri="a://1")
        assert (await ask(app, "POST", [*_ACCEPT, *session], body, ALICE)).status == 200
    assert scratches.ended == ["a://1"]
    assert manager.owners() == {}


async def test_a_get_stream_is_pinged_while_open_and_ended_with_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(door, "PING_INTERVAL_S", 0.01)
    async with served() as (manager, app):
        session = await open_session(app, ALICE)
        scope = mcp_scope("GET", [(b"accept", b"text/event-stream"), *session])
        scope["user"] = ALICE
        bodies: list[Message] = []
        pinged = asyncio.Event()

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body":
                bodies.append(message)
                pinged.set()

        never = asyncio.Event()

        async def receive() -> Message:
            await never.wait()  # the client stays
            return {"type": "http.disconnect"}

        stream = asyncio.ensure_future(app(scope, receive, send))
        await asyncio.wait_for(pinged.wait(), BOUND_S)
        assert bodies[0] == {"type": "http.response.body", "body": responses.PING, "more_body": True}
        await manager.end(dict(session)[_S].decode())
        await asyncio.wait_for(stream, BOUND_S)
    assert bodies[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_openings_past_the_cap_check_are_refused_once_another_took_the_last_session() -> None:
    # Both openings pass the cap check (made before any body is read); one session is left, so the second to
    # finish reading its body is refused with the cap's 503, and no session over the cap is opened.
    async with served(max_sessions=1) as (manager, app):
        waiting, arrived = [asyncio.Event(), asyncio.Event()], asyncio.Event()
        answers: list[int] = []

        async def opening(reading: asyncio.Event) -> None:
            scope = mcp_scope("POST", _ACCEPT)
            scope["user"] = ALICE
            answered, sent_body = asyncio.Event(), False

            async def receive() -> Message:
                nonlocal sent_body
                if sent_body:  # after the body, only the client leaving, once it has its answer
                    await answered.wait()
                    return {"type": "http.disconnect"}
                reading.set()
                await arrived.wait()
                sent_body = True
                return {"type": "http.request", "body": _INITIALIZE, "more_body": False}

            async def send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    answers.append(message["status"])
                elif message["type"] == "http.response.body" and not message.get("more_body", False):
                    answered.set()

            await app(scope, receive, send)

        both = [asyncio.create_task(opening(reading)) for reading in waiting]
        await asyncio.wait_for(asyncio.gather(*(reading.wait() for reading in waiting)), BOUND_S)
        arrived.set()
        await asyncio.wait_for(asyncio.gather(*both), BOUND_S)
        assert sorted(answers) == [200, 503]
        assert len(manager.sessions) == 1


async def hold_get_stream(
    app: ASGIApp, session: list[tuple[bytes, bytes]], started: asyncio.Event, leave: asyncio.Event
) -> int | None:
    """Open the session's GET stream (`started` set once it has) and hold it until `leave` is set: its status."""
    scope = mcp_scope("GET", [(b"accept", b"text/event-stream"), *session])
    scope["user"] = ALICE
    status: int | None = None

    async def receive() -> Message:
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            started.set()

    await app(scope, receive, send)
    return status


async def test_the_session_record_counts_a_session_opened_and_not_once_it_is_deleted() -> None:
    async with served() as (manager, app):
        held = manager.sessions.held
        assert held("alice") == 0
        session = await open_session(app, ALICE)
        assert (held("alice"), held("bob")) == (1, 0)
        session_id = dict(session)[_S].decode()
        assert list(manager.sessions.ids()) == [session_id]
        assert held("alice", among={session_id}) == 1
        assert held("alice", among=set()) == 0
        assert (await ask(app, "DELETE", session, user=ALICE)).status == 200
        assert held("alice") == 0  # ended before its answer went out
        assert list(manager.sessions.ids()) == []


async def test_the_session_limit_counts_a_session_opened_then_deleted(gateway_factory: GatewayFactory) -> None:
    auth = {"principals": [principal("alice-token", "alice")]}
    raw = gateway_config(watched("a", "drive://a", {"type": "webhook", "token": "tok-a"}), auth=auth)
    raw["gateway"]["limits"] = {"sessions_per_principal": 1}
    gw = await gateway_factory(raw)
    alice = {
        **bearer("alice-token"),
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        opened = await http.post(gw.mcp_url, content=_INITIALIZE, headers=alice)
        assert opened.status_code == 200
        assert (await http.post(gw.mcp_url, content=_INITIALIZE, headers=alice)).status_code == 429  # counted
        session = {**alice, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        assert (await http.delete(gw.mcp_url, headers=session)).status_code == 200
        assert (await http.post(gw.mcp_url, content=_INITIALIZE, headers=alice)).status_code == 200  # no longer


# --- a request read the SDK's way (`sdk/requests.py`) -----------------------------------------------------------


_HEADER_VARIANTS = [
    [],
    [(_V, b"2025-11-25")],
    [(_V, b"2026-07-28")],
    [(_V, b"")],
    [(_V, b"1999-01-01")],
    [(_V, b"2025-11-25"), (_V, b"2026-07-28")],
    [(_V, b"2026-07-28"), (_V, b"2025-11-25")],
    [(b"MCP-Protocol-Version", b"2026-07-28")],
    [(_S, b"")],
    [(_S, b"f" * 32)],
    [(b"Mcp-Session-Id", b"f" * 32)],
    [(_S, b"f" * 32), (_S, b"")],
]


@pytest.mark.parametrize("headers", _HEADER_VARIANTS)
async def test_the_sdk_opens_a_session_exactly_for_the_requests_the_gateway_classifies_as_opening_one(
    headers: list[tuple[bytes, bytes]],
) -> None:
    # The session limit counts what `classify` says opens a session; the SDK must agree, header for header (first
    # field of an exact lower-case name), or a principal opens sessions the limit never counts.
    async with served() as (manager, app):
        await ask(app, "POST", [*_ACCEPT, *headers], _INITIALIZE, ALICE)
        opened = manager.sessions.held("alice") == 1
    assert opened is requests.classify({"type": "http", "headers": headers}).opens_session


_PING = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
_BODIES = {
    "utf-8": json.dumps(_PING).encode(),
    "utf-16": json.dumps(_PING).encode("utf-16"),  # json reads it (it detects the encoding), pydantic_core does not
    "utf-32": json.dumps(_PING).encode("utf-32"),
    "lone surrogate": json.dumps({**_PING, "id": "\ud800"}).encode(),
    "not json": b'{"jsonrpc": "2.0", ',
    "trailing text": json.dumps(_PING).encode() + b" x",
}


@pytest.mark.parametrize("era", list(requests.Era))
@pytest.mark.parametrize("body", list(_BODIES.values()), ids=list(_BODIES))
async def test_the_sdk_refuses_a_body_as_json_exactly_when_the_envelope_check_s_parser_does(
    era: requests.Era, body: bytes
) -> None:
    # `mcp_requests.check` reads a body with the SDK's parser for its era (they differ: json also reads UTF-16 and
    # lone surrogates), so it never passes unchecked what the SDK would read.
    version = b"2025-11-25" if era is requests.Era.HANDSHAKE else b"2026-07-28"
    async with served() as (_, app):
        answer = await ask(app, "POST", [*_ACCEPT, (_V, version)], body)
    assert (answer.error_code() == PARSE_ERROR) is (requests.parsed(body, era) is requests.UNREAD)


async def test_a_get_stream_asked_to_resume_is_served_fresh() -> None:
    # The gateway runs no event store: nothing is replayed, the GET is served as a fresh stream, at the door
    # (the SDK's stateful transport served none, `test_handshake_answers.py`) and through `mcp_requests.Front`,
    # which drops `Last-Event-ID` so the SDK never reads it.
    async with served() as (_, app):
        stream = [(b"accept", b"text/event-stream"), *await open_session(app)]
        resume = [*stream, (requests.LAST_EVENT_ID_HEADER, b"stream-1:7")]
        answers = [await ask(app, "GET", resume), await ask(mcp_requests.Front(app), "GET", resume)]
    for answer in answers:
        assert answer.status == 200
        assert answer.headers[b"content-type"].startswith(b"text/event-stream")
