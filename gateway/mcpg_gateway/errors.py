"""The gateway's errors, under one base, and the JSON-RPC codes it answers with on purpose."""

from __future__ import annotations

from collections.abc import Sequence

# JSON-RPC codes in the implementation-defined range (-32000..-32019 in the 2026-07-28 allocation policy).
NOT_SUBSCRIBABLE = -32010
"""The resource exists but has no watch block, so nothing could ever notify about it."""
WATCH_START_FAILED = -32011
"""The watch could not take its baseline (the backend refused the first read)."""
UPSTREAM_READ_FAILED = -32012
"""resources/read: the backend answered outside its contract (status, JSON, timeout)."""


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """The configuration cannot be served. Carries one message per problem, each naming its field."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ReadError(GatewayError):
    """A read through a backend binding failed. The message never carries header values or secrets."""


class StrategyError(GatewayError):
    """A watch strategy could not start or keep running."""
