"""The MCP SDK internals the gateway relies on (mcp is pinned exactly). If an SDK upgrade moves one, this fails first.

`mcp_handlers._connection` reaches `ServerSession._connection` for two things the SDK offers no public seam for:
`state` (per-connection scratch, where a handshake-era session keeps its subscriber) and `exit_stack` (unwound
when the session ends: DELETE, idle timeout or shutdown, which is the implicit unsubscribe).
`sessions.SessionLimit` reads the session manager's record of who opened each session.

`mcp_requests` reads an /mcp request as the SDK will, before it does: the session it opens (or names) by the SDK's
reading of the headers (checked here by asking the SDK itself), the body with the parser the SDK uses for the
request's era, and why `Last-Event-ID` is dropped (the SDK resumes only with an event store).

The notification path (`frames.py`, `streams.py`, `delivery.py`) writes `notifications/resources/updated` to the
SDK's SSE streams itself. It relies on the bytes the SDK would write for the same message in each era (compared
here with the SDK's own encoders), on the SDK handing a handler the HTTP request whose scope the gateway's
middleware saw (`test_delivery.py` serves real clients of both eras through it), and on the SDK serving a
handshake-era session's standalone stream as a GET carrying the session id.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from contextlib import AsyncExitStack
from typing import Any

import mcp.types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.server import Server
from mcp.server import _streamable_http_modern as modern
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.streamable_http import EventMessage, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.jsonrpc import JSONRPCNotification
from sse_starlette import EventSourceResponse
from sse_starlette.event import ensure_bytes
from starlette.types import Message

from mcpg_gateway import frames, mcp_handlers, mcp_requests
from mcpg_gateway.endings import WATCH_META_KEY

WATCH = {"state": "active", "renewBy": "2026-12-01T04:00:00Z", "pollIntervalMs": 10000, "renewedByActivity": True}


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
    if uri.isascii() and str(request_id).isascii():
        assert our_frame(uri, *members) == expected
    else:  # the SDK's modern encoder escapes non-ASCII (json.dumps), its pydantic one and ours write UTF-8
        assert _same_event(our_frame(uri, *members), expected)


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


@pytest.mark.parametrize("uri", ["drive://doc/1", 'weird://"quoted"\\back\nline', "unicode://é/☃"])
def test_frames_are_one_event_whose_data_is_one_line(uri: str) -> None:
    frame = our_frame(uri, frames.member(WATCH_META_KEY, WATCH))
    assert frame.startswith(b"event: message\r\ndata: {")
    assert frame.endswith(b"}\r\n\r\n")
    assert frame.count(b"\n") == 3  # event line, data line, blank line


def test_a_server_session_keeps_its_connection_where_the_gateway_looks_for_it() -> None:
    assert "self._connection = connection" in inspect.getsource(ServerSession.__init__)
    assert "_connection" in inspect.getsource(mcp_handlers._connection)


def test_a_connection_has_per_connection_state_and_an_exit_stack() -> None:
    hints = inspect.get_annotations(Connection, eval_str=True)
    assert hints["state"] == dict[str, Any]
    assert hints["exit_stack"] is AsyncExitStack


def test_the_session_manager_records_who_opened_each_session_where_the_session_limit_counts() -> None:
    # sessions.SessionLimit counts a principal's sessions from this record (session id -> AuthorizationContext).
    source = inspect.getsource(StreamableHTTPSessionManager)
    assert "self._session_owners: dict[str, AuthorizationContext] = {}" in source
    assert "self._session_owners[session_id] = requestor" in source
    assert "self._session_owners.pop(session_id, None)" in source
    assert AuthorizationContext.__annotations__["client_id"] in (str, "str")
    # ...and that only a handshake-era request without a session id can open one (the modern era opens none).
    assert "if pv is not None and pv not in HANDSHAKE_PROTOCOL_VERSIONS:" in source


_INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
).encode()
_V, _S = b"mcp-protocol-version", b"mcp-session-id"
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


async def _opened_a_session(manager: StreamableHTTPSessionManager, headers: list[tuple[bytes, bytes]]) -> bool:
    """POST initialize straight to the SDK's app with `headers`: whether its manager opened a session for it."""
    before = len(manager._server_instances)
    base = [
        (b"host", b"gw"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
    ]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [*base, *headers], "query_string": b""}
    incoming: list[Message] = [{"type": "http.request", "body": _INITIALIZE, "more_body": False}]
    done = asyncio.Event()

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    async with asyncio.timeout(10):
        await manager.handle_request(scope, receive, send)
    return len(manager._server_instances) > before


@pytest.mark.parametrize("headers", _HEADER_VARIANTS)
async def test_the_sdk_opens_a_session_exactly_for_the_requests_the_gateway_classifies_as_opening_one(
    headers: list[tuple[bytes, bytes]],
) -> None:
    # The session limit counts what `mcp_requests.classify` says opens a session; the SDK must agree, header for
    # header (first field of an exact lower-case name), or a principal opens sessions the limit never counts.
    manager = StreamableHTTPSessionManager(Server("contract"), stateless=False)
    async with manager.run():
        opened = await _opened_a_session(manager, headers)
    assert opened is mcp_requests.classify({"type": "http", "headers": headers}).opens_session


def test_the_sdk_parses_each_era_s_body_with_the_parser_the_envelope_check_uses() -> None:
    # `mcp_requests.check` reads a body with the same parser as the SDK for its era (they differ: json also reads
    # UTF-16 and lone surrogates), so it never passes unchecked what the SDK would read.
    assert "raw_message = pydantic_core.from_json(body)" in inspect.getsource(
        StreamableHTTPServerTransport._handle_post_request
    )
    assert "decoded = json.loads(body)" in inspect.getsource(modern.handle_modern_request)


def test_the_sdk_resumes_a_get_stream_only_with_an_event_store() -> None:
    # Without one it answers a GET carrying Last-Event-ID with nothing at all, which is why `mcp_requests.Front`
    # drops the header (the gateway runs no event store).
    assert "if last_event_id := request.headers.get(LAST_EVENT_ID_HEADER):" in inspect.getsource(
        StreamableHTTPServerTransport._handle_get_request
    )
    assert "if not event_store:\n            return" in inspect.getsource(StreamableHTTPServerTransport._replay_events)
