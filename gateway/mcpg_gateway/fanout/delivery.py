"""Delivery, the one interface between a fire and a subscriber's client: one `Writer` per subscriber.

A subscriber's writer is the only reader of its outbox. A fire hands it one notification (`deliver`); the writer
either writes it there and then or, when it cannot (it is behind, or its client is not ready), leaves the URI in
the outbox and writes what waits there from a task of its own, oldest first, then ends that task. So a
subscriber holds a task only while it is behind, and one slow or dead subscriber never delays the others (the
outbox rule). A write that waits longer than `send_timeout_s` is dropped for that subscriber alone.

Two implementations: over Streamable HTTP the frame bytes go straight to the subscriber's SSE stream
(`stream_writer.py`, in the fire's own turn when the connection takes them at once); off HTTP (stdio) the SDK's
session writes each notification (`session_writer.py`), always from the writer's task. What they share is here,
once: the catch-up task, the bound on a write that waits, the notify span and the sent and dropped metrics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable

from opentelemetry.trace import Span

from mcpg_gateway import cancellation, tracing
from mcpg_gateway.fanout.subscribers import Outcome, Pending, Subscriber
from mcpg_gateway.metrics import Metrics

logger = logging.getLogger(__name__)

NOTIFY_SPAN = "mcpg.notify"
"""One notifications/resources/updated written to one subscriber: a child of the fire that caused it."""


class Writer:
    """One subscriber's way to its client; this base writes only from its task (see `StreamWriter` for more)."""

    __slots__ = ("_metrics", "_ready", "_task", "_timeout_s", "sub")
    TASK_NAME = "mcpg delivery"

    def __init__(self, sub: Subscriber, metrics: Metrics, send_timeout_s: float | None, ready: bool) -> None:
        """`send_timeout_s`: how long one write may wait before it is dropped (None: as long as it takes). A writer
        not `ready` (a listen stream before its acknowledgement) keeps what fires in the outbox until `ready()`."""
        self.sub, self._metrics, self._timeout_s, self._ready = sub, metrics, send_timeout_s, ready
        self._task: asyncio.Task[None] | None = None

    def deliver(self, pending: Pending, watch: bytes) -> Outcome:
        """Write `pending` (one fire's notification; `watch` the subscriber's watch member) or queue it."""
        if self.sub.outbox.closed:
            return Outcome.CLOSED
        self.sub.outbox.offer_pending(pending)  # after what is already waiting, in order
        if self._task is None and self._ready:
            self._catch_up(None)
        return Outcome.QUEUED

    async def started(self) -> None:
        """Until the client may be written to after what the SDK sent first (a listen's acknowledgement)."""

    def ready(self) -> None:
        """A listen stream was acknowledged: from now on it is written to, starting with what waited."""
        self._ready = True
        if self.sub.outbox.pending and self._task is None:
            self._catch_up(None)

    async def flush(self) -> None:
        """Until what the subscriber is behind by has been written (or dropped)."""
        if self._task is None and self._ready and self.sub.outbox.pending:
            self._catch_up(None)
        if self._task is not None:
            await asyncio.shield(self._task)

    def stop(self) -> None:
        """The subscriber is gone: stop writing to it."""
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        """Until a stopped writer's task has ended, in bound: an await that swallowed its cancel is no wait."""
        if self._task is not None:
            await cancellation.stopped([self._task], cancellation.STEP_TIMEOUT_S, f"ending {self.TASK_NAME}")

    def _writable(self) -> bool:
        """Whether there is somewhere to write now; a notification with nowhere to go is dropped (counted)."""
        return True

    def _start(self, pending: Pending) -> asyncio.Task[None] | None:
        """Start writing `pending`: None once written, else the task still writing it."""
        raise NotImplementedError

    def _catch_up(self, writing: asyncio.Task[None] | None, pending: Pending | None = None) -> None:
        name = f"{self.TASK_NAME} {self.sub.id}"
        self._task = asyncio.get_running_loop().create_task(self._write_behind(writing, pending), name=name)

    async def _write_behind(self, writing: asyncio.Task[None] | None, pending: Pending | None) -> None:
        """Finish the write under way, then write what the outbox holds, oldest first, until it is empty."""
        try:
            if writing is not None and pending is not None and await self._bounded(writing, pending):
                self._metrics.notifications_sent.labels(pending.strategy).inc()
            outbox = self.sub.outbox
            while (pending := outbox.pop()) is not None:
                await self._write_one(pending)
        finally:
            self._task = None

    async def _write_one(self, pending: Pending) -> None:
        strategy = pending.strategy
        if not self._writable():
            self._metrics.notifications_dropped.labels(strategy).inc()
            return
        with self._notify_span(pending) as span:
            begun, writing = self._started(pending)
            if not begun or (writing is not None and not await self._bounded(writing, pending)):
                span.set_attribute(tracing.RESULT, "dropped")
                return
        self._metrics.notifications_sent.labels(strategy).inc()

    def _notify_span(self, pending: Pending) -> contextlib.AbstractContextManager[Span]:
        """The span of one notification written to this subscriber, a child of the fire that caused it."""
        return tracing.span(NOTIFY_SPAN, attributes(self.sub, pending), parent=pending.trace)

    def _started(self, pending: Pending) -> tuple[bool, asyncio.Task[None] | None]:
        """`_start`, and whether it began: a write that failed at once is dropped (counted)."""
        try:
            return True, self._start(pending)
        except Exception as e:  # the client's connection is over: only this subscriber misses out
            logger.debug("notification not written, the client is gone: %s", type(e).__name__)
            self._metrics.notifications_dropped.labels(pending.strategy).inc()
            return False, None

    async def _bounded(self, writing: asyncio.Task[None], pending: Pending) -> bool:
        """Wait for a write that had to wait, at most `send_timeout_s`; False (and dropped, counted) past it."""
        try:
            # Not `asyncio.wait_for`: in 3.11 it returns the write's result when this task was cancelled in the same
            # loop pass, and the cancel is lost (`cancellation.py`). Cancelled here, the write is cancelled with it.
            async with asyncio.timeout(self._timeout_s):
                await writing
        except TimeoutError:
            # The connection's buffers stayed full: this client stopped reading. Only it misses out.
            self._metrics.notifications_dropped.labels(pending.strategy).inc()
            return False
        except Exception as e:  # the response completed while the write waited: the stream is over
            logger.debug("notification not written, the stream is over: %s", type(e).__name__)
            self._metrics.notifications_dropped.labels(pending.strategy).inc()
            return False
        return True


def attributes(sub: Subscriber, pending: Pending) -> dict[str, str]:
    """The notify span's attributes."""
    return {tracing.STRATEGY: pending.strategy, tracing.URI: pending.uri, tracing.SUBSCRIBER_KIND: sub.kind}


def to_each(
    told: list[Subscriber], pending: Pending, watch_member: Callable[[Subscriber], bytes], metrics: Metrics
) -> int:
    """One fire's `pending` handed to each of `told`'s writers (or offered to the outbox of a subscriber without
    one: built outside MCP); how many were offered it (all but those going away). What was written in the fire's
    turn, and what had no stream to go to, is counted here, once for the fire; the writers count the rest."""
    outcomes = collections.Counter(
        (sub.delivery.deliver(pending, watch_member(sub)) if sub.delivery is not None else _offered(sub, pending))
        for sub in told
    )
    if written := outcomes[Outcome.WRITTEN]:
        metrics.notifications_sent.labels(pending.strategy).inc(written)
    if missing := outcomes[Outcome.NO_STREAM]:
        metrics.notifications_dropped.labels(pending.strategy).inc(missing)
    return len(told) - outcomes[Outcome.CLOSED]


def _offered(sub: Subscriber, pending: Pending) -> Outcome:
    return Outcome.QUEUED if sub.outbox.offer_pending(pending) else Outcome.CLOSED
