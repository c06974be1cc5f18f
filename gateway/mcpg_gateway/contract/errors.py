"""The errors both programs share: a configuration problem names its field, and carries no secret."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a configuration cannot be served: the dotted path of the field, and what is wrong with it."""

    path: str
    """`mcp.capabilities.resources[3].watch.strategy.interval_ms`, or `(top level)`."""
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """The configuration cannot be served. Carries every problem found, each naming its field."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
