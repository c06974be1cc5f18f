"""A request's answer as the SDK's 2026-07-28 transport writes it as the last event of an SSE response, and the
ping that keeps a quiet SSE stream open, as the SDK writes it.

A listen stream outlives the SDK's handling of its request: once the stream is acknowledged the gateway carries
it at the ASGI seam (`fanout/streams.py`) and the SDK's per-request machinery is let go. The stream still ends
with the listen's result in the SDK's bytes: shaped by the SDK's own result pipeline (`ServerRunner._serialize`:
the per-version sieve, `resultType`, the `serverInfo` stamp), wrapped in the JSON-RPC response the SDK builds,
encoded by the SDK's SSE encoder. Both are private to the pinned mcp; `test_sdk_contract.py` compares the event
with the one the SDK ends a listen with itself.
"""

from __future__ import annotations

from typing import Any

from mcp.server import Server
from mcp.server._streamable_http_modern import _sse_event
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner
from mcp.types import JSONRPCResponse, RequestId
from pydantic import BaseModel

PING = b": ping\r\n\r\n"
"""An SSE comment, as the SDK keeps a quiet stream alive so a proxy's idle-read timeout does not close it."""
PING_INTERVAL_S = 15.0
"""As often as the SDK pings a stream (sse_starlette's default)."""


def result_event(server: Server[Any], version: str, method: str, request_id: RequestId, result: BaseModel) -> bytes:
    """The SSE event that answers request `request_id` (of `method`, at protocol `version`) with `result`, as
    `server` would have answered it. (Built once per answer, at a stream's end: the runner is a small object.)"""
    runner = ServerRunner(server, Connection.from_envelope(version, None, None), None)
    shaped = runner._serialize(method, version, result)
    return _sse_event(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=shaped))
