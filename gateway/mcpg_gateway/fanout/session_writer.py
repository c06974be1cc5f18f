"""The session writer: off HTTP (stdio), the SDK's session writes each notification a subscriber is told.

There is no byte stream of ours to write to there: the SDK encodes and writes every message itself. So every
notification goes through the writer's task (`delivery.py`), which reads the outbox and hands each URI, with its
`_meta` (a listen stream's `subscriptionId` and the watch's state), to `send`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mcpg_gateway.fanout import eager
from mcpg_gateway.fanout.delivery import Writer
from mcpg_gateway.fanout.states import STATE_META_KEY
from mcpg_gateway.fanout.subscribers import Pending, Subscriber
from mcpg_gateway.metrics import Metrics

Send = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Write one notifications/resources/updated of a URI, with its `_meta`, through the SDK's session; given
`frames.LIST_CHANGED_KEY` for the URI, a notifications/resources/list_changed."""
WatchMeta = Callable[[Subscriber, str], dict[str, Any]]
"""The `_meta` saying the state of `uri`'s watch for a subscriber (`lease.py`)."""


class SessionWriter(Writer):
    """One subscriber's way to its client through the SDK's session."""

    __slots__ = ("_meta", "_send", "_watch_meta")
    TASK_NAME = "mcpg session sender"

    def __init__(
        self,
        sub: Subscriber,
        send: Send,
        metrics: Metrics,
        send_timeout_s: float | None,
        watch_meta: WatchMeta,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """`meta`: what every notification's `_meta` carries besides the watch's state (a listen stream's
        `subscriptionId`, which also makes it wait for `ready()`)."""
        super().__init__(sub, metrics, send_timeout_s, ready=not meta)
        self._send, self._watch_meta, self._meta = send, watch_meta, meta or {}

    def _start(self, pending: Pending) -> asyncio.Task[None] | None:
        if pending.list_changed:  # `send` tells a list change by its key (`frames.LIST_CHANGED_KEY`)
            return eager.start(self._send(pending.uri, dict(self._meta)))
        meta = {**self._meta, **self._watch_meta(self.sub, pending.uri)}
        if pending.state is not None:
            meta[STATE_META_KEY] = pending.state
        return eager.start(self._send(pending.uri, meta))
