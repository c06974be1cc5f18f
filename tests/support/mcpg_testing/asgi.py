"""An /mcp request's ASGI scope, as a server hands one to the app: for tests that call the SDK's app directly."""

from __future__ import annotations

from typing import Any


def mcp_scope(method: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The scope of `method /mcp` from a loopback client, with `headers` after its Host."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"gw"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
