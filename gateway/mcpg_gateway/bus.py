"""The bus: how the N gateway processes of one deployment serve as one, over one NATS connection each.

A change one process sees (a webhook POST, a pull watch it owns) is published once on
`<prefix>.fire.<sha256(uri)[:32]>`; every other process tells its own subscribers of that URI. The publisher
tells its own itself, and its connection is `no_echo` (the server never hands a process its own fire back),
so each subscriber is told once. The bus also opens the key-value buckets (`buckets.py`) of pull-watch
ownership (`ownership.py`). nats-py reconnects it, forever, about once a second; a process that was cut off may have
missed fires, so on every connect it fires each URI it holds once, locally (`on_connect`): at worst a
subscriber is told twice, never not at all. The bus is logged as host:port only; its credentials are
separate settings, never in the URL.

A bus connection that stops answering without closing is dropped when a PING is still unanswered at the next
(`gateway.liveness`, `liveness.py`), then reconnected like a closed one. The bus also carries each gateway's
report of its event sources (`<prefix>.sources`, `peers.py`), which /readyz weighs.

Whatever arrives from the bus was written by some client of the namespace's account: it is parsed within a size
bound and never raises (`entry_json`, `fire_uri`). Every await into nats-py may swallow a cancel
(`cancellation.py`), so each is re-checked, and closing waits for its tasks and its connection in bound.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from mcpg_gateway import backoff, buckets, cancellation, liveness, metrics, peers, redaction
from mcpg_gateway.contract import config
from mcpg_gateway.errors import BusUnavailableError

if TYPE_CHECKING:  # nats is imported when a bus is configured and connects, not by every gateway (1.7 MB)
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

logger = logging.getLogger(__name__)

STARTUP_WAIT_S = 5.0
"""How long start-up waits for the first connection before serving anyway (webhooks answer 503 meanwhile)."""
UNREACHABLE_GRACE_S = 5.0
"""How long the bus may be unreachable before /readyz says so: a server restart costs a reconnect or two."""
PUBLISH_TIMEOUT_S = 2.0
"""A webhook waits this long for a reconnect, and then for the server to confirm its fire, before answering 503."""
RECONNECT_WAIT_S = 1
CONNECT_TIMEOUT_S = 2
KV_TIMEOUT_S = 2.0
MALFORMED_LOG_EVERY_S = 60.0
MALFORMED = "mcpg_bus_fires_malformed_total"
HASH_HEX_CHARS = 32
"""128 bits of SHA-256: a URI never appears in a subject or a key (it may hold `.`, `*`, `>`), its hash does."""
MAX_FIRE_BYTES = 32 * 1024
"""A fire's bound: a URI of `uris.MAX_URI_CHARS` characters, each escaped as JSON at worst, fits with room."""
CLOSE_TIMEOUT_S = 2.0
"""How long closing waits for the bus's tasks (cancelled), and then for the connection to close."""


def errors(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """What a NATS or JetStream call raises when the server or the network fails (nats.js errors included), and
    `more`. A function, so that nats is imported by the first gateway to use a bus: an `except` clause evaluates
    it only when an exception reaches it."""
    return (*_nats_errors(), *more)


@functools.cache
def _nats_errors() -> tuple[type[BaseException], ...]:
    import nats.errors

    return (nats.errors.Error, OSError, TimeoutError)


Receiver = Callable[[str], Awaitable[None]]
"""Tell this process's subscribers of a URI another process published a fire for."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """What the bus tells the gateway, given when the bus is built."""

    receiver: Receiver | None = None
    on_connect: Callable[[], Coroutine[Any, Any, None]] | None = None
    """Called on every connection (the first and each reconnect): the gateway fires what it holds."""
    on_sources: Callable[[bytes, float], None] | None = None
    """Given each report another gateway published on `<prefix>.sources` (`peers.py`), and when it came."""


def uri_hash(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:HASH_HEX_CHARS]


def fire_subject(prefix: str, uri: str) -> str:
    return f"{prefix}.fire.{uri_hash(uri)}"


def entry_json(data: bytes | None, max_bytes: int) -> Any:
    """What a client of the bus account wrote (a message, a key-value entry), parsed if it is JSON of at most
    `max_bytes`; None otherwise. Never raises: nesting deeper than the parser goes is no JSON either."""
    if data is None or len(data) > max_bytes:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # ValueError includes bytes that are not UTF-8
        return None


def encodable(text: str) -> bool:
    """False for text JSON can carry and UTF-8 cannot (a lone surrogate): it cannot be hashed, logged or shown."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def fire_uri(data: bytes, subject: str, prefix: str) -> str | None:
    """The URI of a fire message received on `subject`, or None if it is no fire (its subject must be its URI's)."""
    doc = entry_json(data, MAX_FIRE_BYTES)
    uri = doc.get("uri") if isinstance(doc, dict) else None
    if not isinstance(uri, str) or not encodable(uri) or fire_subject(prefix, uri) != subject:
        return None
    return uri


def instance_name(cfg: config.BusConfig, environ: Mapping[str, str]) -> str:
    """This process's name on the bus: `bus.instance`, else `POD_NAME`, else host and process id."""
    return cfg.instance or environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def address(url: str) -> str:
    """`host:port` of a bus URL, for logs (the configuration refuses credentials in it; this drops them anyway)."""
    return urlsplit(url).netloc.rpartition("@")[2]


@dataclass
class Health:
    """Since when the bus has been unreachable (monotonic time), and whether that is longer than the grace."""

    grace_s: float
    down_since: float | None

    def up(self) -> None:
        self.down_since = None

    def down(self, now: float) -> None:
        if self.down_since is None:
            self.down_since = now

    def unready(self, now: float) -> bool:
        return self.down_since is not None and now - self.down_since >= self.grace_s


class Bus:
    """This process's connection to the bus: publish fires, receive the others', know whether it is reachable."""

    def __init__(
        self,
        cfg: config.BusConfig,
        instance: str,
        registry: CollectorRegistry,
        grace_s: float,
        rules: liveness.Rules | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.cfg, self.instance = cfg, instance
        self._hooks = hooks or Hooks()
        self.rules = rules or liveness.Rules()
        self.where = address(cfg.url)
        self.metrics = metrics.BusMetrics(registry)
        self.health = Health(grace_s, time.monotonic())
        self.buckets: buckets.Buckets | None = None
        self.buckets_error: str | None = None
        """Why the buckets could not be opened last time (credential-free), until they are."""
        self._nc: NatsClient | None = None
        self._up = False
        self._losses = 0
        """Connections lost so far: a publish awaiting its confirmation notices its connection went."""
        self.outages = 0
        """Connections lost while up (the `mcpg_bus_connection_losses_total` metric), for the admin API."""
        self._quiet = False  # connection errors are logged once per outage, then at debug (no log storms)
        self._malformed_logged_at = -MALFORMED_LOG_EVERY_S
        self._closed = False
        self._changed = asyncio.Condition()
        self._opener: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def connected(self) -> bool:
        return self._up and self._nc is not None and self._nc.is_connected

    def unready(self) -> bool:
        """True once the bus has been unreachable for longer than the grace."""
        return self.health.unready(time.monotonic())

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; it is checked at every change of the connection or the buckets."""
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def start(self, wait_s: float = STARTUP_WAIT_S) -> None:
        """Start connecting; wait up to `wait_s` for it, then return either way (nats-py keeps trying)."""
        self._spawn(self._connect(), "mcpg bus connect")
        try:
            async with asyncio.timeout(wait_s):
                await self.until(lambda: self.connected)
        except TimeoutError:
            logger.warning("the bus at %s is unreachable; serving anyway, webhooks answer 503 until it is", self.where)

    async def close(self) -> None:
        """Stop the bus's tasks and close the connection, each waited for at most `CLOSE_TIMEOUT_S`."""
        self._closed, self._up = True, False
        self.metrics.connected.set(0)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await cancellation.stopped(tasks, CLOSE_TIMEOUT_S, "closing the bus")
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            await cancellation.within(self._close(nc), CLOSE_TIMEOUT_S, "closing the bus connection")

    async def _close(self, nc: NatsClient) -> None:
        try:
            await nc.close()
        except errors() as e:
            logger.debug("closing the bus connection: %s", self._describe(e))

    async def publish(self, uri: str, strategy: str) -> None:
        """Publish one fire of `uri`, confirmed by the server, or raise `BusUnavailableError` (within ~2 s).

        A connection lost before the server confirmed the fire is waited for, and the fire published again on
        the new one: the first may or may not have gone out, and told twice is the bus's rule, never not told.
        (nats-py drops the confirmation of a flush on a lost connection; it would only time out.)"""
        subject = fire_subject(self.cfg.subject_prefix, uri)
        payload = json.dumps({"uri": uri, "strategy": strategy, "origin": self.instance}).encode()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PUBLISH_TIMEOUT_S
        confirmed = False
        while not confirmed:
            nc = self._nc if self.connected else await self._reconnected(deadline - loop.time())
            if nc is None:
                self.metrics.fires_published.labels("failed").inc()
                raise BusUnavailableError("the gateway cannot reach its bus")
            try:
                confirmed = await self._confirmed(nc, subject, payload, deadline)
            except errors() as e:
                self.metrics.fires_published.labels("failed").inc()
                logger.warning("publishing a fire on the bus at %s failed: %s", self.where, self._describe(e))
                raise BusUnavailableError("the gateway could not publish on its bus") from None
        self.metrics.fires_published.labels("ok").inc()

    async def _confirmed(self, nc: NatsClient, subject: str, payload: bytes, deadline: float) -> bool:
        """Publish and wait for the server's confirmation: True, or False if the connection was lost first.
        Raises `TimeoutError` at `deadline` (loop time), or what publishing raised."""
        losses = self._losses
        lost = asyncio.ensure_future(self.until(lambda: self._losses != losses))
        sent = asyncio.ensure_future(self._send(nc, subject, payload))
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.wait({lost, sent}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (lost, sent):
                task.cancel()
            await asyncio.gather(lost, sent, return_exceptions=True)
        if lost.done() and not lost.cancelled():
            return False
        sent.result()  # its error, if it failed on a connection that is still up
        return True

    async def _send(self, nc: NatsClient, subject: str, payload: bytes) -> None:
        await nc.publish(subject, payload)
        await nc.flush(timeout=PUBLISH_TIMEOUT_S)  # type: ignore[arg-type]  # nats-py annotates int; a float works

    async def _reconnected(self, wait_s: float) -> NatsClient | None:
        """The client once connected again, waiting up to `wait_s`; None at once if the bus is past its grace.

        A server restart (a new image, a node drained) costs each gateway one reconnect: a webhook arriving in
        that second waits for it instead of being refused."""
        if self.unready():
            return None
        try:
            async with asyncio.timeout(wait_s):
                await self.until(lambda: self.connected)
        except TimeoutError:
            return None
        return self._nc

    async def announce_sources(self, report: bytes) -> None:
        """Publish this gateway's sources report (`peers.py`), unconfirmed: the next one follows in an interval."""
        nc = self._nc
        if nc is None or not self.connected:
            return
        try:
            await nc.publish(self._sources_subject, report)
        except errors() as e:
            logger.debug("publishing the sources report on the bus at %s: %s", self.where, self._describe(e))
        cancellation.reraise()  # nats-py's flush of a full buffer drops a cancel: the reporter must still stop

    @property
    def _sources_subject(self) -> str:
        return f"{self.cfg.subject_prefix}.{peers.SUBJECT}"

    async def _on_sources(self, msg: Msg) -> None:
        if self._hooks.on_sources is not None:
            self._hooks.on_sources(msg.data, time.time())

    def jetstream(self) -> JetStreamContext | None:
        return self._nc.jetstream(timeout=KV_TIMEOUT_S) if self._nc is not None else None

    # --- the connection ------------------------------------------------------------------------------------

    async def _connect(self) -> None:
        from nats.aio.client import Client as NatsClient

        nc = NatsClient()
        self._nc = nc
        # With endless reconnects nats-py's connect returns only once connected; it never gives up.
        await nc.connect(**self._options())
        cancellation.reraise()  # closing meanwhile: nothing more is started (`close` closes the client)
        await nc.subscribe(f"{self.cfg.subject_prefix}.fire.*", cb=self._on_message)
        await nc.subscribe(self._sources_subject, cb=self._on_sources)
        try:
            await nc.flush(timeout=CONNECT_TIMEOUT_S)
        except errors() as e:  # the connection dropped at once; the reconnect callback takes over
            logger.debug("confirming the fire subscription: %s", self._describe(e))
            return
        finally:
            cancellation.reraise()
        logger.info("connected to the bus at %s as %r", self.where, self.instance)
        await self._reachable()

    def _options(self) -> dict[str, Any]:
        password = self.cfg.password.get_secret_value() if self.cfg.password is not None else None
        return {
            "servers": [self.cfg.url],
            "name": f"mcpg-gateway {self.instance}",
            "user": self.cfg.user,
            "password": password,
            "no_echo": True,  # a process delivers its own fires itself: never told twice
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": RECONNECT_WAIT_S,
            "connect_timeout": CONNECT_TIMEOUT_S,
            **self.rules.nats_options(),  # a connection that stops answering is dropped and reopened in bound
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
        }

    async def _reachable(self) -> None:
        self._up, self._quiet = True, False
        self.health.up()
        self.metrics.connected.set(1)
        await self._notify()
        if self._opener is None or self._opener.done():  # also on a reconnect: JetStream may have lost them
            self._opener = self._spawn(self._open_buckets(), "mcpg bus buckets")
        if self._hooks.on_connect is not None:
            self._spawn(self._hooks.on_connect(), "mcpg bus fire held")

    async def _on_disconnected(self) -> None:
        self._losses += 1
        if self._closed or not self._up:
            await self._notify()
            return
        self._up, self._quiet = False, True
        self.health.down(time.monotonic())
        self.metrics.connected.set(0)
        self.outages += 1
        self.metrics.losses.inc()
        logger.warning("lost the bus at %s; reconnecting (webhooks answer 503 meanwhile)", self.where)
        await self._notify()

    async def _on_reconnected(self) -> None:
        self.metrics.reconnects.inc()
        logger.info("reconnected to the bus at %s; firing every held URI once", self.where)
        await self._reachable()

    async def _on_error(self, error: Exception) -> None:
        # The loss itself is logged once by `_on_disconnected`; the end of the stream it reports first is not news.
        import nats.errors

        expected = isinstance(error, nats.errors.StaleConnectionError)
        level = logging.DEBUG if self._quiet or self._closed or expected else logging.WARNING
        logger.log(level, "bus at %s: %s", self.where, self._describe(error))
        self._quiet = True

    async def _on_message(self, msg: Msg) -> None:
        uri = fire_uri(msg.data, msg.subject, self.cfg.subject_prefix)
        if uri is None:
            self._malformed()
            return
        self.metrics.fires_received.inc()
        if self._hooks.receiver is not None:
            await self._hooks.receiver(uri)

    def _malformed(self) -> None:
        # Only a client of this namespace's account can publish here; a flood of junk must not become a log
        # storm, so it is counted always and logged at most once a minute.
        self.metrics.fires_malformed.inc()
        now = time.monotonic()
        if now - self._malformed_logged_at >= MALFORMED_LOG_EVERY_S:
            self._malformed_logged_at = now
            logger.warning("ignored a message on the fire subjects that is not a fire (counted in %s)", MALFORMED)

    # --- the key-value buckets ---------------------------------------------------------------------------

    async def _open_buckets(self) -> None:
        import nats.errors

        for attempt in itertools.count():
            js = self.jetstream()
            try:
                if js is None:
                    raise nats.errors.ConnectionClosedError
                async with cancellation.guarded(None):  # each request is bounded by JetStream's timeout
                    self.buckets = await buckets.open_buckets(js, self.cfg)
            except errors() as e:
                self.buckets_error = f"{buckets.unavailable(self.cfg)} (bus at {self.where}: {self._describe(e)})"
                logger.log(logging.ERROR if attempt == 0 else logging.DEBUG, "%s", self.buckets_error)  # once, clearly
                await self._notify()
                await asyncio.sleep(backoff.delay_s(attempt))
                continue
            self.buckets_error = None
            self.metrics.buckets_ready.set(1)
            await self._notify()
            return

    # --- small parts --------------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _describe(self, error: BaseException) -> str:
        text = redaction.scrub(str(error) or type(error).__name__, self.cfg.url)
        password = self.cfg.password.get_secret_value() if self.cfg.password is not None else ""
        return text.replace(password, redaction.MASK) if password else text
