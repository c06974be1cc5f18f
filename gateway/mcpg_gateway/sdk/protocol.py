"""The protocol's names and numbers as the pinned SDK spells them, for modules that are not themselves MCP.

The versions of each era, the JSON-RPC codes the gateway answers with in the SDK's words, and the `_meta` key a
listen stream stamps on its notifications: taken from the SDK here, once, so a module that only needs a constant
does not import the SDK (and an SDK that renames one is fixed in this file).
"""

from __future__ import annotations

from typing import Final

from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY as _SUBSCRIPTION_ID_META_KEY
from mcp_types import jsonrpc, version

SUBSCRIPTION_ID_META_KEY: Final = _SUBSCRIPTION_ID_META_KEY
"""`_meta` key of a listen stream's notifications: the id of its subscriptions/listen request."""

HANDSHAKE_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = tuple(version.HANDSHAKE_PROTOCOL_VERSIONS)
"""Protocols with initialize and sessions, oldest first (up to 2025-11-25)."""
MODERN_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = tuple(version.MODERN_PROTOCOL_VERSIONS)
"""Protocols of self-contained requests (2026-07-28 on): no session, subscriptions/listen."""
LATEST_HANDSHAKE_VERSION: Final[str] = version.LATEST_HANDSHAKE_VERSION
LATEST_MODERN_VERSION: Final[str] = version.LATEST_MODERN_VERSION

INVALID_REQUEST: Final[int] = jsonrpc.INVALID_REQUEST
INVALID_PARAMS: Final[int] = jsonrpc.INVALID_PARAMS
