"""nats_topic: any message on a subject (wildcards allowed) fires the watch; the payload is never inspected.

The gateway holds one NATS connection per distinct server URL (in practice one: `gateway.nats.url`), opened
by the first watch that needs it and closed by `Gateway.aclose`; each watch adds one subscription to it and
removes it when the watcher stops. nats-py's own reconnect is off, because it sleeps on the real clock and
would replay subscriptions behind our back: when the server goes away, every watch on that connection
reconnects through `reconnect` (the first to get there opens the new connection) and fires once.

Each connection proves it is alive every `liveness.interval_s` with a flush (a PING the server must answer
within `liveness.timeout_s`); one that does not answer is closed, which every watch on it sees as a lost
connection (`liveness.py`). The same round trips are each watch's `last_round_trip` in the admin API.
nats-py may swallow a cancel (`cancellation.py`): each await into it is re-checked, and closing waits in bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from mcpg_gateway import cancellation, liveness, redaction
from mcpg_gateway.contract import config
from mcpg_gateway.errors import StrategyError
from mcpg_gateway.strategies import base, reconnect

if TYPE_CHECKING:  # nats is imported when the first nats_topic watch connects, not by every gateway
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
FLUSH_TIMEOUT_S = 5
CLIENT_NAME = "mcpg-gateway"


@functools.cache
def _nats_errors() -> tuple[type[BaseException], ...]:
    """What a NATS call raises when the server or the network fails (a function: nats is imported on first use;
    an `except` clause evaluates it only when an exception reaches it)."""
    import nats.errors

    return (nats.errors.Error, OSError, TimeoutError)


@functools.cache
def _quiet_errors() -> tuple[type[BaseException], ...]:
    """Connection failures nats-py also reports through `error_cb`; the watch logs those itself."""
    import nats.errors

    return (OSError, TimeoutError, nats.errors.StaleConnectionError, nats.errors.NoServersError)


class LinkListener(Protocol):
    """A watch on a link, told what becomes of the link's connection."""

    def connection_lost(self, nc: NatsClient, cause: liveness.Cause) -> None:
        """`nc` closed on its own, or stopped answering and was closed."""

    def round_trip(self, nc: NatsClient) -> None:
        """`nc` answered a liveness round trip."""


class NatsConnections:
    """The gateway's NATS clients: one per distinct server URL, connected on first use, closed with the gateway."""

    def __init__(self, default_url: str | None, rules: liveness.Rules | None = None) -> None:
        self.default_url = default_url
        self.rules = rules or liveness.Rules()
        self._links: dict[str, NatsLink] = {}

    @classmethod
    def for_gateway(cls, cfg: config.GatewayConfig) -> NatsConnections:
        default = cfg.gateway.nats.url
        rules = liveness.Rules.from_config(cfg.gateway.liveness)
        return cls(default.get_secret_value() if default is not None else None, rules)

    def link(self, url: str) -> NatsLink:
        if url not in self._links:
            self._links[url] = NatsLink(url, self.rules)
        return self._links[url]

    async def close(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()


class NatsLink:
    """One server URL's connection. Reconnecting is driven by the watches, so it happens on their clock."""

    def __init__(self, url: str, rules: liveness.Rules | None = None) -> None:
        self.url = url
        self.where = redaction.redact_url(url)
        self.rules = rules or liveness.Rules()
        self.listeners: set[LinkListener] = set()
        """Told (with the dead client) whenever a connection closes on its own, and of every round trip."""
        self._nc: NatsClient | None = None
        self._unresponsive: NatsClient | None = None
        """The client the probe gave up on: its close is reported as `unresponsive`, not `closed`."""
        self._prober: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def client(self) -> NatsClient | None:
        """The live client, if any (tests round-trip through it to see the server's view settle)."""
        return self._nc

    async def subscribe(
        self, subject: str, on_message: Callable[[Msg], Awaitable[None]]
    ) -> tuple[NatsClient, Subscription]:
        """Subscribe on the live connection (opening one if needed), confirmed by the server before returning."""
        nc = await self._client()
        failed = f"subscribing to {subject!r} on {self.where} failed"
        try:
            sub = await nc.subscribe(subject, cb=on_message)
        except _nats_errors() as e:
            raise StrategyError(f"{failed}: {self._describe(e)}") from None
        try:
            await nc.flush(timeout=FLUSH_TIMEOUT_S)
        except _nats_errors() as e:
            await unsubscribe(sub)
            raise StrategyError(f"{failed}: {self._describe(e)}") from None
        if cancellation.requested():  # the watch stopped while the server confirmed: leave nothing subscribed
            await unsubscribe(sub)
            raise asyncio.CancelledError
        if not nc.is_connected:
            raise StrategyError(f"{failed}: the connection closed meanwhile")
        return nc, sub

    async def close(self) -> None:
        self._closed = True
        if self._prober is not None:
            self._prober.cancel()
            await cancellation.stopped([self._prober], cancellation.STEP_TIMEOUT_S, f"closing NATS {self.where}")
        nc, self._nc = self._nc, None
        if nc is not None:
            await cancellation.within(close_quietly(nc), cancellation.STEP_TIMEOUT_S, f"closing NATS {self.where}")

    async def _client(self) -> NatsClient:
        async with self._lock:
            if self._closed:
                raise StrategyError("the gateway is shutting down")
            if self._nc is None or not self._nc.is_connected:
                if self._nc is not None:
                    await close_quietly(self._nc)
                self._nc = await self._connect()
                self._prober = asyncio.get_running_loop().create_task(
                    self._probe(self._nc), name=f"probe NATS {self.where}"
                )
            return self._nc

    async def _probe(self, nc: NatsClient) -> None:
        """While `nc` is this link's connection: a flush (PING, PONG) every interval; one that is late or fails
        closes it, so every watch on it reconnects."""
        rules = self.rules
        while True:
            await rules.sleep(rules.interval_s)
            if nc is not self._nc or nc.is_closed:
                return
            try:
                # Annotated int; a float works. Checked: its wait may swallow the probe's stop.
                await cancellation.checked(nc.flush(timeout=rules.timeout_s))  # type: ignore[arg-type]
            except _nats_errors() as e:
                if nc is self._nc:
                    logger.warning(
                        "NATS %s: no answer to a round trip within %g s (%s); closing the connection",
                        self.where,
                        rules.timeout_s,
                        self._describe(e),
                    )
                    self._unresponsive = nc
                    await close_quietly(nc)
                return
            for listener in list(self.listeners):
                listener.round_trip(nc)

    async def _connect(self) -> NatsClient:
        from nats.aio.client import Client as NatsClient

        nc = NatsClient()

        async def on_error(error: Exception) -> None:
            level = logging.DEBUG if isinstance(error, _quiet_errors()) else logging.WARNING
            logger.log(level, "NATS %s: %s", self.where, self._describe(error))

        async def on_closed() -> None:
            self._on_closed(nc)

        try:
            await nc.connect(
                servers=[self.url],
                name=CLIENT_NAME,
                allow_reconnect=False,
                # With reconnects off these only bound the initial attempt: two immediate tries, then give up.
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=CONNECT_TIMEOUT_S,
                error_cb=on_error,
                closed_cb=on_closed,
            )
        except _nats_errors() as e:
            await close_quietly(nc)  # a refused handshake leaves the socket open
            raise StrategyError(f"cannot connect to NATS at {self.where}: {self._describe(e)}") from None
        except asyncio.CancelledError:
            await close_quietly(nc)  # the gateway is stopping mid-connect: leave nothing half-open
            raise
        if cancellation.requested():  # the same, when nats-py's connect swallowed the stop
            await close_quietly(nc)
            raise asyncio.CancelledError
        logger.info("connected to NATS at %s", self.where)
        return nc

    def _on_closed(self, nc: NatsClient) -> None:
        if self._nc is nc:
            self._nc = None
        cause: liveness.Cause = "unresponsive" if self._unresponsive is nc else "closed"
        if not self._closed:
            if cause == "closed":
                logger.warning("the connection to NATS at %s closed", self.where)
            for listener in list(self.listeners):
                listener.connection_lost(nc, cause)

    def _describe(self, error: BaseException) -> str:
        # Errors are re-raised `from None` with this text: a chained cause could quote the URL unscrubbed.
        text = str(error) or type(error).__name__
        return redaction.scrub(text, self.url)


async def close_quietly(nc: NatsClient) -> None:
    if not nc.is_closed:
        with contextlib.suppress(*_nats_errors()):
            await nc.close()


async def unsubscribe(sub: Subscription) -> None:
    # Raises when the connection is already gone, and then there is nothing left to remove.
    with contextlib.suppress(*_nats_errors()):
        await sub.unsubscribe()


class NatsTopicWatch:
    def __init__(self, spec: config.NatsTopicStrategy, ctx: base.WatchContext) -> None:
        self._subject = spec.subject
        self._url = spec.url.get_secret_value() if spec.url is not None else None
        self._ctx = ctx
        self._signal = reconnect.Signal()
        self._link: NatsLink | None = None
        self._nc: NatsClient | None = None
        self._sub: Subscription | None = None
        self._what = f"watch {ctx.binding.uri} (nats_topic {spec.subject!r})"

    async def start(self) -> None:
        self._link = self._resolve_link()
        self._ctx.stats.connection.source = self._link.where
        self._what = f"watch {self._ctx.binding.uri} (nats_topic {self._subject!r} on {self._link.where})"
        self._link.listeners.add(self)
        await self._subscribe()
        self._ctx.stats.succeeded()
        self._ctx.stats.connection.round_trip()

    async def run(self, fire: base.Fire) -> None:
        await reconnect.run(self._signal, self._subscribe, fire, self._ctx, self._what)

    async def close(self) -> None:
        if self._link is not None:
            self._link.listeners.discard(self)
        sub, self._sub = self._sub, None
        if sub is not None:
            await unsubscribe(sub)

    def _resolve_link(self) -> NatsLink:
        connections = self._ctx.shared
        if not isinstance(connections, NatsConnections):
            raise StrategyError("this gateway has no NATS connections to share")
        url = self._url or connections.default_url
        if url is None:
            raise StrategyError("no NATS server: set the strategy's url or gateway.nats.url")
        return connections.link(url)

    async def _subscribe(self) -> None:
        assert self._link is not None, "start() resolves the link first"
        self._nc, self._sub = await self._link.subscribe(self._subject, self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        self._signal.changed()

    def connection_lost(self, nc: NatsClient, cause: liveness.Cause) -> None:
        if nc is self._nc:
            self._ctx.stats.connection.lost(cause)
            self._signal.connection_lost()

    def round_trip(self, nc: NatsClient) -> None:
        if nc is self._nc:
            self._ctx.stats.connection.round_trip()


STRATEGY = base.StrategyType("nats_topic", NatsTopicWatch, shared=NatsConnections.for_gateway)
