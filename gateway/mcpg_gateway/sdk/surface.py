"""What the MCP server tells a client about itself when it connects, in each protocol era, as the SDK sends it.

The server card (`card.py`) publishes these capabilities, so it must say what a client reads, not what a model
holds: each era's answer is built the way the SDK builds it (an `initialize` result, a `server/discover`
result), then passed through the SDK's own per-version serializer, which keeps only what that version's schema has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp.types as types
from mcp_types import methods

from mcpg_gateway.sdk import manager as managers
from mcpg_gateway.sdk.protocol import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS


@dataclass(frozen=True, slots=True)
class Surface:
    """What the MCP server tells a client about itself when it connects, in each protocol era, as sent."""

    name: str
    version: str
    instructions: str | None
    handshake: dict[str, Any]
    """The capabilities of the `initialize` result at `LATEST_HANDSHAKE_VERSION`, as on the wire."""
    modern: dict[str, Any]
    """The capabilities of the `server/discover` result at `LATEST_MODERN_VERSION`, as on the wire."""
    stateful: bool
    """Sessions are kept: the only way a `resources/subscribe` can be told anything (on the session's GET stream)."""


def of(manager: managers.SessionManager) -> Surface:
    """The surface of the server `manager` serves."""
    server = manager.app
    init = server.create_initialization_options()
    handshake = types.InitializeResult(
        protocol_version=LATEST_HANDSHAKE_VERSION,
        capabilities=init.capabilities,
        server_info=types.Implementation(name=init.server_name, version=init.server_version),
        instructions=init.instructions,
    )
    modern = types.DiscoverResult(
        supported_versions=list(MODERN_PROTOCOL_VERSIONS),
        capabilities=server.get_capabilities(protocol_version=LATEST_MODERN_VERSION),
    )
    return Surface(
        name=init.server_name,
        version=init.server_version,
        instructions=init.instructions,
        handshake=_sent_capabilities("initialize", LATEST_HANDSHAKE_VERSION, handshake),
        modern=_sent_capabilities("server/discover", LATEST_MODERN_VERSION, modern),
        stateful=True,  # the manager keeps handshake-era sessions (`sdk/door.py`)
    )


def _sent_capabilities(method: str, version: str, result: types.Result) -> dict[str, Any]:
    # The serializer keeps only what `version`'s schema has (a 2025-11-25 initialize carries no `extensions`).
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    capabilities: dict[str, Any] = methods.serialize_server_result(method, version, dumped)["capabilities"]
    return capabilities
