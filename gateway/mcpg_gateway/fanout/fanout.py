"""The fan-out: the one object the MCP handlers, the webhook route's gateway and the admin API see of the wing.

It owns the watch registry (`watchers.py`), the subscribers (`subscribers.py`) and the SSE streams of /mcp
(`streams.py`), and gives each subscriber it opens its writer (`delivery.py`): over Streamable HTTP the stream
writer, off HTTP the session writer, so every subscriber's outbox has exactly one reader. Callers open a
subscriber, subscribe it, touch it, fire URIs and close it here; none of them reaches the parts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from starlette.types import ASGIApp

from mcpg_gateway import cancellation, catalog
from mcpg_gateway.contract import config
from mcpg_gateway.fanout import delivery, frames, lease, limits, running, streams, subscribers, watchers
from mcpg_gateway.fanout.delivery import Writer
from mcpg_gateway.fanout.endings import Ending
from mcpg_gateway.fanout.frames import RequestId, subscription_meta
from mcpg_gateway.fanout.limits import Refusal
from mcpg_gateway.fanout.running import Watcher
from mcpg_gateway.fanout.session_writer import Send, SessionWriter
from mcpg_gateway.fanout.stream_writer import StreamWriter
from mcpg_gateway.fanout.subscribers import Kind, Pending, Subscriber
from mcpg_gateway.identity import Principal
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.strategies import base

__all__ = ["Fanout", "Kind", "Refusal", "Send", "Subscriber", "Watcher"]

LIST_CHANGED_LABEL = "list_changed"
"""The `strategy` label of a list change in the notification metrics: it comes from no watch."""


class Fanout:
    """Watches, their subscribers and the writers that reach them, as one."""

    def __init__(
        self,
        build: running.StrategyBuilder,
        metrics: Metrics,
        clock: base.Clock,
        audience: watchers.Audience,
        cfg: config.GatewaySection,
        send_timeout_s: float,
        owned: running.OwnedRunner | None = None,
    ) -> None:
        """`audience`: whether a fired binding's subscriber is told (its notification filter); `owned`: runs a pull
        watch where its lease is, on a bus (`ownership.Owners.run`); `send_timeout_s`: how long one subscriber's
        client may take to accept a notification before it is dropped for it."""
        self._metrics, self._clock, self._limits, self._send_timeout_s = metrics, clock, cfg.limits, send_timeout_s
        terms = lease.Terms.from_config(cfg.subscriptions)
        self._watches = watchers.WatchRegistry(
            build, metrics, clock, audience, owned=owned, terms=terms, limits_cfg=cfg.limits
        )
        self._subscribers = subscribers.Subscribers(metrics.subscribers, self._watches.drop, limits.Streams(cfg.limits))
        self._streams = streams.Streams()

    # --- subscribers ------------------------------------------------------------------------------------------

    def check_named(self, principal_id: str, named: int) -> None:
        """`Refusal` when one request names more URIs than the principal may hold at all (before any is looked at)."""
        limits.check_named(principal_id, named, self._limits)

    def open(
        self, kind: Kind, principal: Principal, request: Any, send: Send, subscription_id: RequestId | None = None
    ) -> Subscriber:
        """A new session subscriber or listen stream (`subscription_id`: its request's id), with its writer: to the
        SSE stream of the HTTP `request` if it has one, else through `send`; `Refusal` at the listen-stream limits."""
        sub = self._subscribers.open(kind, principal, self._clock.now())
        sub.delivery = self._writer(sub, request, send, subscription_id)
        return sub

    def _writer(self, sub: Subscriber, request: Any, send: Send, subscription_id: RequestId | None) -> Writer:
        if subscription_id is not None:
            stream = streams.of_request(request)
            if stream is not None:  # over Streamable HTTP: fires write to the listen's response stream
                return self._stream_writer(sub, lambda: stream, subscription_id)
            return self._session_writer(sub, send, None, subscription_meta(subscription_id))
        session_id = streams.session_id(request)
        if session_id is not None:  # over Streamable HTTP: fires write to the session's GET stream
            return self._stream_writer(sub, lambda: self._streams.of_session(session_id), None)
        return self._session_writer(sub, send, self._send_timeout_s, None)

    def _stream_writer(
        self, sub: Subscriber, stream: Callable[[], streams.Stream | None], subscription_id: RequestId | None
    ) -> StreamWriter:
        member = self._watches.watch_member
        return StreamWriter(sub, stream, self._metrics, self._send_timeout_s, member, subscription_id)

    def _session_writer(
        self, sub: Subscriber, send: Send, timeout_s: float | None, meta: dict[str, Any] | None
    ) -> SessionWriter:
        return SessionWriter(sub, send, self._metrics, timeout_s, self._watches.watch_meta, meta)

    async def carry(self, sub: Subscriber) -> None:
        """Carry an acknowledged listen stream's notifications until the gateway ends it (its outbox closes); what
        is pending goes out before its result. (The client leaving cancels this.)"""
        writer = sub.delivery
        assert writer is not None, "every subscriber opened here has a writer"
        await writer.started()  # no notification may overtake the acknowledgement
        writer.ready()
        await sub.outbox.wait_closed()
        await writer.flush()

    def hand_over(self, sub: Subscriber, request: Any, result: Callable[[], bytes]) -> bool:
        """Carry an acknowledged listen stream on at the HTTP seam once the SDK has answered its `request`
        (`Stream.carry_on`): as `carry`, then closed, then ended with the event `result` gives. False off HTTP,
        where the caller carries it itself."""
        stream = streams.of_request(request)
        if stream is None:
            return False

        async def body() -> bytes:
            try:
                await self.carry(sub)
            finally:
                self.close(sub)
            return result()

        stream.carry_on(body, lambda: self.close(sub))
        # Written to from the moment the acknowledgement is out, as when the handler carried it: not only once the
        # SDK's app has returned (fires meanwhile would wait in the outbox, coalesced).
        writer = sub.delivery
        assert writer is not None, "every subscriber opened here has a writer"
        stream.when_flushed(writer.ready)
        return True

    def close(self, sub: Subscriber) -> None:
        """Implicit unsubscribe from everything, and its writer stopped; safe to call twice."""
        self._subscribers.close(sub)

    async def hang_up(self, sub: Subscriber) -> None:
        """`close`, then wait (in bound) for its writer's task to end: the session is over."""
        self.close(sub)
        if sub.delivery is not None:
            await sub.delivery.stopped()

    # --- subscriptions ----------------------------------------------------------------------------------------

    async def subscribe(self, bindings: list[catalog.Binding], sub: Subscriber) -> None:
        """Hold every binding's watch for `sub`, all or nothing: `Refusal` before any upstream read (at the
        limits), `StrategyError` if a watch cannot take its baseline."""
        self._watches.admit(sub, [b.uri for b in bindings])
        await self._watches.subscribe_all(bindings, sub)

    def unsubscribe(self, uri: str, sub: Subscriber) -> None:
        self._watches.unsubscribe(uri, sub)

    def touch(self, sub: Subscriber) -> None:
        """A request on `sub`'s session renews its lease (`lease.py`)."""
        self._watches.touch(sub)

    def catch_up(self, sub: Subscriber, seen: Mapping[str, str]) -> int:
        """Tell `sub` at once of each URI (it holds) whose state moved from the token it last saw (`states.py`)."""
        return self._watches.catch_up(sub, seen)

    # --- fires ------------------------------------------------------------------------------------------------

    async def fire(self, uri: str, strategy: str) -> int:
        """Tell this process's subscribers of `uri` it changed (each once, as its filter allows); how many."""
        return await self._watches.fire(uri, strategy)

    async def fire_held(self, uri: str) -> None:
        """A fire heard from elsewhere (the bus): told as its own watch's, if this process holds `uri`."""
        watcher = self._watches.get(uri)
        if watcher is not None:
            await self._watches.fire(uri, watcher.strategy_type)

    async def fire_all_held(self) -> None:
        """Every held URI told once (fires published while this process was cut off never reached it)."""
        for watcher in self._watches.watchers():
            await self._watches.fire(watcher.uri, watcher.strategy_type)

    # --- a new configuration (`reconfigure.py`) ----------------------------------------------------------------

    def use(self, cfg: config.GatewaySection) -> None:
        """A new configuration's limits and lease terms, for every decision from now on."""
        self._limits = cfg.limits
        self._watches.use(lease.Terms.from_config(cfg.subscriptions), cfg.limits)
        self._subscribers.use(cfg.limits)

    def rebind(self, resolve: Callable[[str], catalog.Binding | None]) -> watchers.Rebound:
        """Every running watcher kept, restarted or ended for the new catalog (`watchers.WatchRegistry.rebind`)."""
        return self._watches.rebind(resolve)

    def recheck(self, principal_now: watchers.PrincipalNow, may_read: watchers.MayRead) -> set[str]:
        """Every subscription authorised again; every open listen stream of a removed principal answered. Returns
        the ids of the removed principals that held one."""
        removed = self._watches.recheck(principal_now, may_read)
        for sub in self._subscribers.listeners():
            if sub.principal is None:
                continue
            now = principal_now(sub.principal_id)
            if now is None:
                removed.add(sub.principal_id)
                self._subscribers.end_listen(sub, Ending("principal_removed"))
            else:
                sub.principal = now
        return removed

    def listeners(self) -> list[Subscriber]:
        """The open subscriptions/listen streams."""
        return self._subscribers.listeners()

    def tell_list_changed(self, sub: Subscriber) -> bool:
        """Tell one subscriber that what it may list changed (through its writer, after what it is behind by).
        False if it is going away."""
        pending = Pending(frames.LIST_CHANGED_KEY, LIST_CHANGED_LABEL, list_changed=True)
        return delivery.to_each([sub], pending, lambda s: b"", self._metrics) == 1

    def tell_session_list_changed(self, session_id: str) -> bool:
        """Tell a handshake-era session with no subscriber that its list changed, on its GET stream if one is
        open (as the SDK would, a session without one is told nothing). False if it was not written."""
        stream = self._streams.of_session(session_id)
        if stream is None or not stream.writable:
            return False
        writing = stream.write(frames.list_changed())
        if writing is not None:  # the connection is full: finished in bound on its own, or dropped
            asyncio.get_running_loop().create_task(_bounded(writing, self._send_timeout_s), name="mcpg list change")
        self._metrics.notifications_sent.labels(LIST_CHANGED_LABEL).inc()
        return True

    # --- what the admin API and readiness see -----------------------------------------------------------------

    def watcher(self, uri: str) -> Watcher | None:
        return self._watches.get(uri)

    def running_watches(self) -> list[Watcher]:
        """The watchers running now (one per subscribed URI)."""
        return self._watches.watchers()

    def stopping_watches(self) -> list[cancellation.Stop[Watcher]]:
        """The watchers asked to stop that still run (their last subscriber left)."""
        return self._watches.stopping()

    def cadence_s(self, watcher: Watcher) -> float | None:
        """How often `watcher` reads now, its subscribers' leases considered (None for a push watch)."""
        return self._watches.cadence_s(watcher)

    @property
    def closing(self) -> asyncio.Event:
        """Set when the gateway starts to stop: new subscriptions are refused, open listens answered."""
        return self._subscribers.closing

    @property
    def listening(self) -> int:
        """How many subscriptions/listen streams are open."""
        return self._subscribers.listening

    # --- the streams, and stopping ----------------------------------------------------------------------------

    def capture(self, app: ASGIApp) -> ASGIApp:
        """The SDK's /mcp app, with each request's SSE stream kept where the stream writer finds it."""
        return self._streams.capture(app)

    def end_listen_streams(self) -> None:
        """Graceful shutdown, step one: every open listen stream is answered with its result."""
        self._subscribers.end_listen_streams()

    async def wait_listen_streams_ended(self, timeout_s: float) -> bool:
        """Wait (bounded) until every listen stream has sent its final result. False on timeout."""
        return await self._subscribers.wait_listen_streams_ended(timeout_s)

    async def aclose(self) -> None:
        """Answer the listen streams, then stop every watch in bound (releasing the leases of owned ones)."""
        self._subscribers.end_listen_streams()
        await self._watches.close()


async def _bounded(writing: asyncio.Task[None], timeout_s: float) -> None:
    """A write left to finish on its own: dropped past `timeout_s` (the client stopped reading), or when the
    stream ended under it, like any notification to one subscriber."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(timeout_s):
            await writing
