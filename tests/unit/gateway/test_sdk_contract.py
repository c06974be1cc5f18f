"""The MCP SDK internals the gateway relies on (mcp is pinned exactly). If an SDK upgrade moves one, this fails first.

`mcp_handlers._connection` reaches `ServerSession._connection` for two things the SDK offers no public seam for:
`state` (per-connection scratch, where a handshake-era session keeps its subscriber) and `exit_stack` (unwound
when the session ends: DELETE, idle timeout or shutdown, which is the implicit unsubscribe).
`sessions.SessionLimit` reads the session manager's record of who opened each session.

The notification path (`frames.py`, `streams.py`, `delivery.py`) writes `notifications/resources/updated` to the
SDK's SSE streams itself. It relies on the bytes the SDK would write for the same message in each era (compared
here with the SDK's own encoders), on the SDK handing a handler the HTTP request whose scope the gateway's
middleware saw (`test_delivery.py` serves real clients of both eras through it), and on the SDK serving a
handshake-era session's standalone stream as a GET carrying the session id.
"""

from __future__ import annotations

import inspect
from contextlib import AsyncExitStack
from typing import Any

import mcp.types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
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

from mcpg_gateway import frames, mcp_handlers
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
