"""The MCP SDK internals the gateway relies on (mcp is pinned exactly). If an SDK upgrade moves one, this fails first.

`mcp_handlers._connection` reaches `ServerSession._connection` for two things the SDK offers no public seam for:
`state` (per-connection scratch, where a handshake-era session keeps its subscriber) and `exit_stack` (unwound
when the session ends: DELETE, idle timeout or shutdown, which is the implicit unsubscribe).
"""

from __future__ import annotations

import inspect
from contextlib import AsyncExitStack
from typing import Any

from mcp.server.connection import Connection
from mcp.server.session import ServerSession

from mcpg_gateway import mcp_handlers


def test_a_server_session_keeps_its_connection_where_the_gateway_looks_for_it() -> None:
    assert "self._connection = connection" in inspect.getsource(ServerSession.__init__)
    assert "_connection" in inspect.getsource(mcp_handlers._connection)


def test_a_connection_has_per_connection_state_and_an_exit_stack() -> None:
    hints = inspect.get_annotations(Connection, eval_str=True)
    assert hints["state"] == dict[str, Any]
    assert hints["exit_stack"] is AsyncExitStack
