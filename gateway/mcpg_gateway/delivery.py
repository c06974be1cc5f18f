"""Delivery: a fired notification written to one subscriber's stream at close to the cost of its bytes.

A fire encodes its notification once (`frames.py`). For each subscriber over Streamable HTTP, the fan-out then
writes the frame, with that subscriber's `_meta` joined in, straight to its SSE stream (`streams.py`), in the
fan-out's own turn: no message object, no queue, no task, no wake-up. That is the path of every subscriber that
keeps up.

The outbox rule still holds: one slow or dead subscriber never delays the others. A write that cannot go out at
once (its connection's buffers are full) carries on in a task of its own, bounded by `send_timeout_s` (then it
is dropped for that subscriber alone); while that subscriber is behind, further fires offer its outbox the URI,
once per URI however often it fires, and the same task writes them in order, then ends. So a subscriber holds a
task only while it is behind. A listen stream not yet acknowledged is behind by definition: what fires between
its join and its acknowledgement waits in its outbox.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from mcpg_gateway import frames, tracing
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.streams import Stream
from mcpg_gateway.subscribers import Outcome, Pending, Subscriber

logger = logging.getLogger(__name__)

NOTIFY_SPAN = "mcpg.notify"
"""One notifications/resources/updated written to one subscriber: a child of the fire that caused it."""

WatchMember = Callable[[Subscriber, str], bytes]
"""The `_meta` member saying the state of `uri`'s watch for a subscriber, as JSON bytes (`lease.py`)."""


class Delivery:
    """One subscriber's way to its stream over Streamable HTTP."""

    __slots__ = ("_meta", "_metrics", "_ready", "_stream", "_task", "_timeout_s", "_watch_member", "sub")

    def __init__(
        self,
        sub: Subscriber,
        stream: Callable[[], Stream | None],
        metrics: Metrics,
        send_timeout_s: float,
        watch_member: WatchMember,
        subscription_id: frames.RequestId | None = None,
    ) -> None:
        """`stream`: the subscriber's stream now (a session's GET stream can close and reopen). A listen stream's
        `subscription_id` goes into every frame's `_meta`; a listen stream is not ready until `ready()`."""
        self.sub, self._stream, self._metrics, self._timeout_s = sub, stream, metrics, send_timeout_s
        self._watch_member = watch_member
        self._meta = frames.subscription_member(subscription_id) if subscription_id is not None else b""
        self._ready = subscription_id is None
        self._task: asyncio.Task[None] | None = None

    def deliver(self, pending: Pending, watch: bytes) -> Outcome:
        """Write `pending` (one fire's notification; `watch` the subscriber's watch member) or queue it."""
        sub = self.sub
        if sub.outbox.closed:
            return Outcome.CLOSED
        if self._task is not None or not self._ready:  # behind: after what is already waiting, in order
            sub.outbox.offer_pending(pending)
            if self._task is None and self._ready:
                self._catch_up(None)
            return Outcome.QUEUED
        stream = self._stream()
        if stream is None or not stream.writable:
            return Outcome.NO_STREAM
        frame = self._frame(pending, watch)
        if pending.trace is not None:  # spans are recorded (`watchers.fire`)
            with tracing.span(NOTIFY_SPAN, _attributes(sub, pending), parent=pending.trace):
                writing = stream.write(frame)
        else:
            writing = stream.write(frame)
        if writing is not None:  # the connection is full: its own task finishes the write, or drops it
            self._catch_up(writing, pending)
            return Outcome.QUEUED
        return Outcome.WRITTEN

    def _frame(self, pending: Pending, watch: bytes) -> bytes:
        if self._meta:
            return frames.frame(pending.after_meta, self._meta, watch)
        return frames.frame(pending.after_meta, watch)

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

    def _catch_up(self, writing: asyncio.Task[None] | None, pending: Pending | None = None) -> None:
        name = f"mcpg delivery {self.sub.id}"
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
        stream = self._stream()
        strategy = pending.strategy
        if stream is None or not stream.writable:
            self._metrics.notifications_dropped.labels(strategy).inc()
            return
        watch = self._watch_member(self.sub, pending.uri)
        frame = self._frame(pending, watch)
        with tracing.span(NOTIFY_SPAN, _attributes(self.sub, pending), parent=pending.trace) as span:
            writing = stream.write(frame)
            if writing is not None and not await self._bounded(writing, pending):
                span.set_attribute(tracing.RESULT, "dropped")
                return
        self._metrics.notifications_sent.labels(strategy).inc()

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


def _attributes(sub: Subscriber, pending: Pending) -> dict[str, str]:
    return {tracing.STRATEGY: pending.strategy, tracing.URI: pending.uri, tracing.SUBSCRIBER_KIND: sub.kind}
