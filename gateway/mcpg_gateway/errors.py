"""The gateway's run-time errors, and the JSON-RPC codes it answers with on purpose.

Configuration errors belong to the contract (`contract/errors.py`), which the operator shares. The codes follow
the subscription design the gateway meets (README, "Error codes"): the code says which kind of refusal it is and
mirrors the HTTP status a gateway would give the same thing, so a client knows whether to retry.
"""

from __future__ import annotations

from mcpg_gateway.contract.errors import GatewayError

INVALID_PARAMS = -32602
"""Not subscribable (unknown, no watch), or unreadable on the first read (401/403/404). Do not retry as is."""
TOO_MANY_REQUESTS = -42900
"""The caller's own limits, or the upstream rate-limited the first read. Retry once one is freed, or later."""
UNAVAILABLE = -50300
"""The server's ceiling (server-wide), or it is shutting down. Retry later, or on another replica."""
INTERNAL_ERROR = -32603
"""A transient upstream failure on the first read (timeout, 5xx, not JSON). Retry."""

GONE_STATUSES = frozenset({401, 403, 404})
"""What an upstream answers for a resource this gateway may no longer read: it ends a watch (`resource_gone`)."""
RATE_LIMITED_STATUS = 429


class ReadError(GatewayError):
    """A read through a backend binding failed. The message never carries header values or secrets.

    `status` is the upstream's HTTP status when it answered one outside the resource's expected codes (None for a
    timeout, a connection failure or a body that is not what was required); `retry_after_s` is its Retry-After.
    """

    def __init__(self, message: str, status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s

    @property
    def gone(self) -> bool:
        return self.status in GONE_STATUSES

    @property
    def rate_limited(self) -> bool:
        return self.status == RATE_LIMITED_STATUS


class StrategyError(GatewayError):
    """A watch strategy could not start or keep running. `read` is the failed read behind it, if one was."""

    def __init__(self, message: str, read: ReadError | None = None) -> None:
        super().__init__(message)
        self.read = read


class WatchGone(GatewayError):
    """A running watch's upstream answered 401, 403 or 404 (and that status is not expected): the watch ends."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class BusUnavailableError(GatewayError):
    """A fire could not be published on the bus (not connected, or not confirmed in time)."""
