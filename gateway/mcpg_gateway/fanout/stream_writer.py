"""The HTTP writer: a fired notification written to one subscriber's SSE stream at close to the cost of its bytes.

A fire encodes its notification once (`frames.py`). For each subscriber over Streamable HTTP, the fan-out then
writes the frame, with that subscriber's `_meta` joined in, straight to its SSE stream (`streams.py`), in the
fan-out's own turn: no message object, no queue, no task, no wake-up. That is the path of every subscriber that
keeps up.

A write that cannot go out at once (its connection's buffers are full) carries on in the writer's task
(`delivery.py`); while that subscriber is behind, further fires wait in its outbox and the same task writes
them in order, then ends. A listen stream not yet acknowledged is behind by definition: what fires between its
join and its acknowledgement waits in its outbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mcpg_gateway.fanout import frames
from mcpg_gateway.fanout.delivery import Writer
from mcpg_gateway.fanout.streams import Stream
from mcpg_gateway.fanout.subscribers import Outcome, Pending, Subscriber
from mcpg_gateway.metrics import Metrics

WatchMember = Callable[[Subscriber, str], bytes]
"""The `_meta` member saying the state of `uri`'s watch for a subscriber, as JSON bytes (`lease.py`)."""


class StreamWriter(Writer):
    """One subscriber's way to its SSE stream over Streamable HTTP."""

    __slots__ = ("_meta", "_stream", "_watch_member")

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
        super().__init__(sub, metrics, send_timeout_s, ready=subscription_id is None)
        self._stream, self._watch_member = stream, watch_member
        self._meta = frames.subscription_member(subscription_id) if subscription_id is not None else b""

    def deliver(self, pending: Pending, watch: bytes) -> Outcome:
        if self.sub.outbox.closed or self._task is not None or not self._ready:
            return super().deliver(pending, watch)  # closed, or behind: after what is already waiting
        stream = self._stream()
        if stream is None or not stream.writable:
            return Outcome.NO_STREAM
        frame = self._frame(pending, watch)
        if pending.trace is not None:  # spans are recorded (`watchers.fire`)
            with self._notify_span(pending):
                writing = stream.write(frame)
        else:
            writing = stream.write(frame)
        if writing is not None:  # the connection is full: its own task finishes the write, or drops it
            self._catch_up(writing, pending)
            return Outcome.QUEUED
        return Outcome.WRITTEN

    async def started(self) -> None:
        stream = self._stream()
        if stream is not None:
            await stream.wait_flushed()  # no notification may overtake the acknowledgement

    def _writable(self) -> bool:
        stream = self._stream()
        return stream is not None and stream.writable

    def _start(self, pending: Pending) -> asyncio.Task[None] | None:
        stream = self._stream()
        assert stream is not None, "written only after `_writable`"
        return stream.write(self._frame(pending, self._watch_member(self.sub, pending.uri)))

    def _frame(self, pending: Pending, watch: bytes) -> bytes:
        if pending.list_changed:
            return frames.list_changed(self._meta) if self._meta else frames.list_changed()
        if self._meta:
            return frames.frame(pending.after_meta, self._meta, watch)
        return frames.frame(pending.after_meta, watch)
