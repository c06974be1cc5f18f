"""The gateway's run-time errors, and the JSON-RPC codes it answers with on purpose.

Configuration errors belong to the contract (`contract/errors.py`), which the operator shares.
"""

from __future__ import annotations

from mcpg_gateway.contract.errors import GatewayError

# JSON-RPC codes in the implementation-defined range (-32000..-32019 in the 2026-07-28 allocation policy).
NOT_SUBSCRIBABLE = -32010
"""The resource exists but has no watch block, so nothing could ever notify about it."""
WATCH_START_FAILED = -32011
"""The watch could not take its baseline (the backend refused the first read)."""
UPSTREAM_READ_FAILED = -32012
"""resources/read: the backend answered outside its contract (status, JSON, timeout)."""


class ReadError(GatewayError):
    """A read through a backend binding failed. The message never carries header values or secrets."""


class StrategyError(GatewayError):
    """A watch strategy could not start or keep running."""


class BusUnavailableError(GatewayError):
    """A fire could not be published on the bus (not connected, or not confirmed in time)."""
