"""Sessions per principal: one caller cannot hold every stateful session the process can serve.

The SDK's session manager caps sessions in all (`limits.sessions_total`, answered 503); without a share per
principal one caller could take them all and every other principal would be refused for as long as its idle
sessions lived (a probe held 9,999 for 30 minutes). This middleware sits behind authentication, in front of the
manager, and refuses a request that would open a session (a POST with no `Mcp-Session-Id`) once its principal
holds `sessions_per_principal`: HTTP 429 with the JSON-RPC error -42900. Requests on existing sessions, and
2026-07-28 requests (which open none), pass untouched.

It counts the manager's own record of who opened each session (the SDK keeps it to bind a session to its
creator; `test_sdk_contract.py` fails loudly if it moves), plus the opening requests still in flight, so a burst
of concurrent openings cannot overshoot.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpg_gateway import errors
from mcpg_gateway.metrics import Metrics

logger = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"
VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("ascii")


class SessionLimit:
    def __init__(self, app: ASGIApp, manager: StreamableHTTPSessionManager, limit: int, metrics: Metrics) -> None:
        self._app, self._manager, self._limit, self._metrics = app, manager, limit, metrics
        self._opening: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal_id = _opener(scope)
        if principal_id is None:
            await self._app(scope, receive, send)
            return
        held = self.held(principal_id)
        if held >= self._limit:
            await self._refuse(principal_id, held, send)
            return
        self._opening[principal_id] += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._opening[principal_id] -= 1
            if self._opening[principal_id] <= 0:
                del self._opening[principal_id]

    def held(self, principal_id: str) -> int:
        """Sessions `principal_id` holds, counting the ones being opened now."""
        owners: dict[str, Any] = self._manager._session_owners  # pinned SDK; see test_sdk_contract.py
        return (
            sum(1 for owner in owners.values() if owner.get("client_id") == principal_id) + self._opening[principal_id]
        )

    async def _refuse(self, principal_id: str, held: int, send: Send) -> None:
        self._metrics.refusals.labels("session", str(errors.TOO_MANY_REQUESTS)).inc()
        message = (
            f"principal {principal_id!r} holds {held} open sessions (limit {self._limit}); end one "
            "(DELETE it) or let it expire, and retry"
        )
        body = json.dumps(
            {"jsonrpc": "2.0", "id": None, "error": {"code": errors.TOO_MANY_REQUESTS, "message": message}}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _opener(scope: Scope) -> str | None:
    """The principal of a request that would open a session; None for any other request.

    The SDK routes by the protocol-version header: one naming a version past the handshake era (2026-07-28) is
    served without a session, so only a handshake-era POST with no session id opens one.
    """
    if scope["type"] != "http" or scope.get("method") != "POST":
        return None
    headers = {name.lower(): value for name, value in scope.get("headers", ())}
    if SESSION_HEADER in headers:
        return None
    version = headers.get(VERSION_HEADER)
    if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    user = scope.get("user")
    token = getattr(user, "access_token", None)
    client_id = getattr(token, "client_id", None)
    return client_id if isinstance(client_id, str) else None
