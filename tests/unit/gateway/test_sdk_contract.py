"""The MCP SDK internals the gateway relies on (mcp is pinned exactly). If an SDK upgrade moves one, this fails first.

`mcp_handlers._connection` reaches `ServerSession._connection` for two things the SDK offers no public seam for:
`state` (per-connection scratch, where a handshake-era session keeps its subscriber) and `exit_stack` (unwound
when the session ends: DELETE, idle timeout or shutdown, which is the implicit unsubscribe).
`sessions.SessionLimit` reads the session manager's record of who opened each session.
"""

from __future__ import annotations

import inspect
from contextlib import AsyncExitStack
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from mcpg_gateway import mcp_handlers


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
