"""An /mcp request as the SDK will read it: its era, the session it names or opens, and its body's parse.

The SDK routes a request by the FIRST `mcp-protocol-version` field (a handshake version or none: the stateful
path; anything else: 2026-07-28, no session) and finds its session by the first `mcp-session-id`, each matched by
its exact lower-case name; it parses a handshake-era body with pydantic_core and a 2026-07-28 one with json (which
also reads UTF-16 and lone surrogates). The gateway reads a request before the SDK does (`mcp_requests.py`: the
session limit, the envelope bounds, the stream index), and a reading of its own once disagreed with the SDK's and
let one principal open every session uncounted (issue 30). So every such reading is the SDK's, and lives here.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import pydantic_core
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from starlette.types import Scope

from mcpg_gateway.sdk.protocol import HANDSHAKE_PROTOCOL_VERSIONS

VERSION_HEADER: Final = MCP_PROTOCOL_VERSION_HEADER.encode("ascii")
SESSION_HEADER: Final = MCP_SESSION_ID_HEADER.encode("ascii")
LAST_EVENT_ID_HEADER: Final = b"last-event-id"
"""Asks to resume a GET stream. The SDK resumes only with an event store; without one (the gateway runs none) it
answered a GET carrying it with nothing at all (a 500 and an ERROR line). Only this exact lower-case name is read."""


class Era(enum.Enum):
    HANDSHAKE = "handshake"
    """Up to 2025-11-25: initialize, a session (`Mcp-Session-Id`), its GET stream."""
    MODERN = "modern"
    """2026-07-28 (or any version the handshake era does not know): one self-contained POST, no session."""


@dataclass(frozen=True, slots=True)
class McpRequest:
    """How the SDK will treat a request, as far as its headers decide it."""

    era: Era
    session_id: str | None
    """The first `mcp-session-id` field; None without one."""
    opens_session: bool
    """The SDK's session manager admits a new session for it: a handshake-era request naming none (of any HTTP
    method: one that is not an initialize is then refused, and its session discarded)."""


def first(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first field named exactly `name` (lower case), as latin-1: how the SDK reads the headers it routes by
    (its manager matches the protocol version so; starlette's `Headers.get`, for the session id, likewise)."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def classify(scope: Scope) -> McpRequest:
    """How the SDK will route the request: its era by the protocol version, and the session it names or opens."""
    headers = scope["headers"]
    version = first(headers, VERSION_HEADER)
    session_id = first(headers, SESSION_HEADER)
    era = Era.HANDSHAKE if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS else Era.MODERN
    return McpRequest(era, session_id, opens_session=era is Era.HANDSHAKE and session_id is None)


UNREAD: Final = object()
"""What the SDK's own parser could not read: the SDK answers it itself."""


def parsed(body: bytes, era: Era) -> object:
    """`body` as the SDK's entry for `era` parses it; `UNREAD` where that parser refuses it."""
    try:
        return pydantic_core.from_json(body) if era is Era.HANDSHAKE else json.loads(body)
    except (ValueError, RecursionError):  # what the SDK's entries catch (RecursionError: deep nesting)
        return UNREAD
