"""Subscribers: the parties a fired watch tells, each with its own outbox, and the one owner of their lifecycle.

Fan-out never blocks on a subscriber. Over Streamable HTTP it writes to the subscriber's stream at once when
the stream takes the bytes without waiting (`stream_writer.py`); a subscriber that is behind, or one without
such a stream (stdio, `session_writer.py`), gets the URI in its outbox, and its writer's task does the slow part.
A notification is a level trigger ("re-read this"), so an outbox holds each pending URI once: a subscriber
that stops reading costs one entry per watched URI, never a growing queue.
`Subscribers` opens and closes them: a close is an implicit unsubscribe from everything, exactly once. A listen
stream is counted against the listen limits when it opens (`limits.Streams`), and one the gateway ends carries
its `ending` into the stream's result.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections.abc import Callable, KeysView
from dataclasses import dataclass, field
from typing import Literal, Protocol

from prometheus_client import Gauge

from mcpg_gateway import tracing
from mcpg_gateway.contract import config
from mcpg_gateway.fanout import limits
from mcpg_gateway.fanout.endings import Ending
from mcpg_gateway.identity import Principal

_ids = itertools.count(1)

Kind = Literal["session", "listen"]


class Outcome(enum.Enum):
    """What a fire did for one subscriber."""

    WRITTEN = "written"
    """Written to its stream, there and then."""
    QUEUED = "queued"
    """Left to the subscriber's own task (it is behind, or its connection is full): counted when written."""
    NO_STREAM = "no_stream"
    """A handshake-era session with no GET stream open: there is nowhere to write it (the SDK drops it too)."""
    CLOSED = "closed"
    """The subscriber is going away."""


class Delivering(Protocol):
    """How fires reach a subscriber's client (`delivery.Writer`: over HTTP, or through the SDK's session)."""

    def deliver(self, pending: Pending, watch: bytes) -> Outcome: ...

    async def started(self) -> None: ...

    def ready(self) -> None: ...

    async def flush(self) -> None: ...

    def stop(self) -> None: ...

    async def stopped(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Pending:
    """One fire's notification: the URI, the strategy that fired it, the fire's trace context (its notify spans'
    parent; None when no spans are recorded), and its frame from the `_meta` members on (`frames.after_meta`),
    shared by every subscriber told."""

    uri: str
    strategy: str
    trace: tracing.Parent | None = None
    after_meta: bytes = b""
    list_changed: bool = False
    """A notifications/resources/list_changed rather than an update of `uri` (then `frames.LIST_CHANGED_KEY`)."""
    state: str | None = None
    """The URI's state token after this fire (`states.py`), in `after_meta` and in the SDK's `_meta` off HTTP."""


class Outbox:
    __slots__ = ("_closed", "_pending", "_wake")

    def __init__(self) -> None:
        self._pending: dict[str, Pending] = {}  # insertion-ordered
        self._wake: asyncio.Event | None = None  # made when a task first waits: most outboxes are never waited on
        self._closed = False

    def offer_pending(self, pending: Pending) -> bool:
        """Queue `pending` unless its URI is already pending (then the first fire's keeps it). False once closed."""
        if self._closed:
            return False
        if pending.uri not in self._pending:
            self._pending[pending.uri] = pending
        if self._wake is not None:
            self._wake.set()
        return True

    def pop(self) -> Pending | None:
        """The oldest pending URI, or None: never waits."""
        return self._pending.pop(next(iter(self._pending))) if self._pending else None

    async def wait_closed(self) -> None:
        """Until `close` (what is pending stays, for a last write)."""
        while not self._closed:
            await self._wait()

    async def _wait(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.clear()
        await self._wake.wait()

    def close(self) -> None:
        """Stop accepting; what is pending stays, for its writer's last writes."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        return len(self._pending)


@dataclass(eq=False, slots=True)
class Subscriber:
    """A legacy session (resources/subscribe) or one subscriptions/listen stream."""

    kind: Kind
    principal: Principal | None = None
    """Who subscribed, fixed at subscribe/listen time. None only for subscribers built outside MCP (tests)."""
    outbox: Outbox = field(default_factory=Outbox)
    active: bool = True
    id: int = field(default_factory=lambda: next(_ids))
    last_activity: float = 0.0
    """When the session last made a request that renews the lease (the clock's time; `lease.py`)."""
    since: dict[str, float] = field(default_factory=dict)
    """The URIs it holds, each with when its subscription began (the clock's time): its lifetime counts from there."""
    list_changed: bool = False
    """A listen stream that also carries list changes (acknowledged so); it ends with its URIs all the same."""
    ending: Ending | None = None
    """Why the gateway ended this listen stream, said in its result; None while open or when the client ended it."""
    delivery: Delivering | None = None
    """How fires reach its client, the one reader of its outbox (`delivery.py`); None only outside MCP (tests)."""

    @property
    def principal_id(self) -> str:
        return self.principal.principal_id if self.principal is not None else ""

    @property
    def uris(self) -> KeysView[str]:
        """The URIs it holds (a live view of `since`: a set of its own cost 700 bytes a session, issue 36)."""
        return self.since.keys()


class Subscribers:
    """Every open subscriber. `close` unsubscribes it from everything (through `on_close`), once."""

    def __init__(self, gauge: Gauge, on_close: Callable[[Subscriber], None], streams: limits.Streams) -> None:
        self._gauge, self._on_close, self._streams = gauge, on_close, streams
        self._listeners: set[Subscriber] = set()
        self._listeners_changed = asyncio.Condition()
        self.closing = asyncio.Event()
        """Set when the gateway starts to stop: new listens are refused, open ones answered."""

    def open(self, kind: Kind, principal: Principal, now: float) -> Subscriber:
        """A new subscriber. A listen stream is counted first: `limits.Refusal` at its limits."""
        if kind == "listen":
            self._streams.open(principal.principal_id)
        sub = Subscriber(kind, principal, last_activity=now)
        self._gauge.labels(kind).inc()
        if kind == "listen":
            self._listeners.add(sub)
        return sub

    def close(self, sub: Subscriber) -> None:
        """Implicit unsubscribe from everything; safe to call twice."""
        if sub.kind == "listen" and sub in self._listeners:
            self._listeners.discard(sub)
            self._streams.close(sub.principal_id)
            asyncio.get_running_loop().create_task(self._notify_listeners_changed())
        if sub.active:
            sub.active = False
            self._gauge.labels(sub.kind).dec()
        sub.outbox.close()
        if sub.delivery is not None:
            sub.delivery.stop()
        self._on_close(sub)

    @property
    def listening(self) -> int:
        """How many subscriptions/listen streams are open."""
        return len(self._listeners)

    def listeners(self) -> list[Subscriber]:
        """The open subscriptions/listen streams."""
        return list(self._listeners)

    def use(self, limits_cfg: config.LimitsConfig) -> None:
        """A new configuration's listen limits (`limits.Streams.use`)."""
        self._streams.use(limits_cfg)

    def end_listen(self, sub: Subscriber, ending: Ending) -> None:
        """Answer one open listen stream with `ending` (what it still carries ends with it)."""
        sub.ending = sub.ending or ending
        sub.outbox.close()

    def end_listen_streams(self) -> None:
        """Graceful shutdown, step one: every open subscriptions/listen stream is answered with its result."""
        self.closing.set()
        for sub in list(self._listeners):
            sub.ending = sub.ending or Ending("shutdown")
            sub.outbox.close()

    async def wait_listen_streams_ended(self, timeout_s: float) -> bool:
        """Wait (bounded) until every listen stream has sent its final result. False on timeout."""
        try:
            async with asyncio.timeout(timeout_s), self._listeners_changed:
                await self._listeners_changed.wait_for(lambda: not self._listeners)
        except TimeoutError:
            return False
        return True

    async def _notify_listeners_changed(self) -> None:
        async with self._listeners_changed:
            self._listeners_changed.notify_all()
