"""Subscribers: the parties a fired watch tells, each with its own outbox.

Fan-out only ever offers a URI to an outbox, which never blocks; each subscriber's own task does the slow
part (writing to its stream). A notification is a level trigger ("re-read this"), so an outbox holds each
pending URI once: a subscriber that stops reading costs one entry per watched URI, never a growing queue.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Literal

from mcpg_gateway.identity import Principal

_ids = itertools.count(1)


class OutboxClosed(Exception):
    """The subscriber is going away; its drain loop should end."""


class Outbox:
    def __init__(self) -> None:
        self._pending: dict[str, str] = {}  # uri -> strategy that fired it (insertion-ordered)
        self._wake = asyncio.Event()
        self._closed = False

    def offer(self, uri: str, strategy: str) -> bool:
        """Queue `uri` unless already pending. False once closed."""
        if self._closed:
            return False
        self._pending.setdefault(uri, strategy)
        self._wake.set()
        return True

    async def get(self) -> tuple[str, str]:
        while not self._pending:
            if self._closed:
                raise OutboxClosed
            self._wake.clear()
            await self._wake.wait()
        uri = next(iter(self._pending))
        return uri, self._pending.pop(uri)

    def close(self) -> None:
        """Stop accepting; `get` drains what is pending, then raises `OutboxClosed`."""
        self._closed = True
        self._wake.set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        return len(self._pending)


@dataclass(eq=False)
class Subscriber:
    """A legacy session (resources/subscribe) or one subscriptions/listen stream."""

    kind: Literal["session", "listen"]
    principal: Principal | None = None
    """Who subscribed, fixed at subscribe/listen time. None only for subscribers built outside MCP (tests)."""
    outbox: Outbox = field(default_factory=Outbox)
    uris: set[str] = field(default_factory=set)
    active: bool = True
    id: int = field(default_factory=lambda: next(_ids))
