"""The open handshake-era sessions, by who opened them, and ending one: what a new configuration needs of them.

A configuration that removes a principal ends that principal's sessions (`reconfigure.py`), and one that changes
what a principal may list tells each of its sessions. The SDK offers neither a list of its sessions nor a way to
end one from the server: both are its session manager's private records (`_session_owners`, `_server_instances`,
and `_discard_session`, which forgets a session so its id answers 404 and terminates its transport, after which
the session's serve loop ends and its exit stack unwinds: the gateway's own implicit unsubscribe). This is the one
place that reaches them (pinned mcp); `test_sdk_contract.py` checks both through the real SDK.
"""

from __future__ import annotations

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from mcpg_gateway.sdk import owners


class OpenSessions:
    """The stateful sessions of one session manager."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._manager = manager

    def owners(self) -> dict[str, str]:
        """Each open session's id -> the principal (the credential's client_id) that opened it."""
        return owners.by_session(self._manager)

    async def end(self, session_id: str) -> None:
        """End the session as a DELETE would: its id answers 404 from now on, its streams close."""
        transport = self._manager._server_instances.get(session_id)
        if transport is not None:
            await self._manager._discard_session(session_id, transport)
