"""Pull-watch ownership: of the gateways with subscribers for a pull URI, one reads its source for all.

The owner holds the URI's lease in the `<bucket>-owners` key-value bucket (key: `bus.uri_hash(uri)`, value
`{"owner": instance}`): it takes it with `create` (put-if-absent; contenders retry every ttl/3), renews it with
`update(last=revision)` every ttl/3 and releases it with a revision-guarded delete when its watcher stops (its
last subscriber left). The bucket's max age drops a lease nobody renewed for a ttl; an owner that could not
renew for 2/3 of it stops reading first (it fences itself), so two owners at once is at worst brief, and
the duplicate notification that could cause is absorbed by the level-triggered outboxes.

The owner keeps its last state (`PullStrategy.snapshot`) in `<bucket>-state`, written after each fire it
published (publish first: a fire is never lost, at worst told twice). A new owner resumes from it and checks
at once, so a change during the handover fires exactly once and a handover without one fires nothing; with
no state stored it stores its own baseline and fires nothing. A URI nobody watched for a while resumes from
what its last owner left: a change made meanwhile is told once to the new subscribers (a re-read too many,
never one too few).

Leases spread over the gateways that want them (`rendezvous.py`): a contender writes its interest at every attempt,
and takes a free lease at once only if no live gateway that outranks it wants it (else after a grace). At each
renewal the owner reads the interest of the live gateways that outrank it (none, once it is the one that should
own the URI); if one wants it, the owner hands over: it lets its reading finish the check under way (the state of
a fire is stored before the lease goes), releases the lease and contends again. The successor resumes from the
stored state and checks at once, as after any other handover. A single gateway, or one that hears no other, keeps
what it has.

Everything read from the buckets is another client's word (any client of the namespace's bus account may write
there): an entry is parsed only within a size bound, never raises, and one that is not ours is discarded and
logged, the watch then taking its own baseline. A lease held for long by a name no gateway on the bus reports as
(`Contention`) is said once per episode, with a count (`mcpg_bus_leases_held_by_unknown_total`): nothing here can
stop such a client, but its silencing of a watch is not silent. Every await into the NATS client may swallow a
cancel (`cancellation.py`): each is guarded, so a watch whose last subscriber left stops and releases its lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mcpg_gateway import bus, cancellation, rendezvous
from mcpg_gateway.errors import BusUnavailableError
from mcpg_gateway.strategies import base

if TYPE_CHECKING:  # nats is imported once a bus is in use, not by every gateway
    from nats.js.kv import KeyValue

logger = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 2.0
WORK_STOP_TIMEOUT_S = 1.0
"""How long a stopping owner waits for its reading and renewing tasks (cancelled) before releasing the lease."""
STATE_VERSION = 1
MAX_STATE_BYTES = 64 * 1024
"""A state entry's bound: a digest or a tracking value is far smaller; anything larger is not ours."""
MAX_LEASE_BYTES = 1024
MAX_HOLDER_CHARS = 253
"""A holder named in a lease, as logs and the admin API show it: a pod's name at most."""

End = Literal["lost", "fenced", "handed_over"]


@dataclass
class Lease:
    """A held lease's timing. Pure: every time is the caller's monotonic clock."""

    ttl_s: float
    revision: int
    renewed_at: float
    """When the last successful write was sent: the server started its TTL no earlier than that."""
    ended: End | None = None

    @property
    def fence_at(self) -> float:
        return self.renewed_at + self.ttl_s * 2 / 3

    def renewed(self, revision: int, sent_at: float) -> None:
        self.revision, self.renewed_at = revision, sent_at

    def fenced(self, now: float) -> bool:
        """True once the owner must stop: it has not renewed for 2/3 of the TTL."""
        return now >= self.fence_at

    def wait_s(self, now: float) -> float:
        """How long until the next renewal attempt: a third of the TTL after the last success, then (overdue,
        the last attempt failed) every twelfth; never past the fence, so the fence is noticed on time."""
        due = self.renewed_at + self.ttl_s / 3 - now
        if due <= 0:
            due = self.ttl_s / 12
        return max(0.0, min(due, self.fence_at - now))


def lease_value(instance: str) -> bytes:
    return json.dumps({"owner": instance}).encode()


def lease_holder(data: bytes | None) -> str | None:
    """The owner a lease entry names, if it is one a log line can show (printable, bounded); None otherwise."""
    doc = bus.entry_json(data, MAX_LEASE_BYTES)
    owner = doc.get("owner") if isinstance(doc, dict) else None
    if not isinstance(owner, str) or not 0 < len(owner) <= MAX_HOLDER_CHARS or not owner.isprintable():
        return None
    return owner


def state_value(snapshot: str) -> bytes:
    """A state entry; `ValueError` if it would exceed `MAX_STATE_BYTES` (no gateway would read it back)."""
    value = json.dumps({"v": STATE_VERSION, "state": snapshot}).encode()
    if len(value) > MAX_STATE_BYTES:
        raise ValueError(f"the state is {len(value)} bytes; at most {MAX_STATE_BYTES} are stored")
    return value


def stored_state(data: bytes | None) -> str | None:
    """The snapshot in a state entry, or None if it holds none this version can read (never raises)."""
    doc = bus.entry_json(data, MAX_STATE_BYTES)
    if not isinstance(doc, dict) or type(doc.get("v")) is not int or doc["v"] != STATE_VERSION:
        return None
    state = doc.get("state")
    return state if isinstance(state, str) and bus.encodable(state) else None


@dataclass
class Contention:
    """One episode of contending for a lease another holds (until this gateway takes it). Pure: times are the
    injected clock's.

    The holder (read at every attempt) is weighed when the episode starts and every `suspect_after_s` after. A
    holder that no gateway on the bus reports as (`peers.py`), still holding it `suspect_after_s` into the episode,
    is a suspect: said once per episode. Long enough that a real gateway has been heard from (it reports every
    liveness interval)."""

    since: float
    suspect_after_s: float
    read_at: float | None = None
    said: bool = False

    def read_due(self, now: float) -> bool:
        return self.read_at is None or now - self.read_at >= self.suspect_after_s

    def suspect(self, now: float, holder: str | None, gateways: Collection[str]) -> bool:
        """True once, when `holder` (None: an entry no gateway wrote) is to be said."""
        if self.said or now - self.since < self.suspect_after_s or (holder is not None and holder in gateways):
            return False
        self.said = True
        return True


@dataclass(frozen=True, slots=True)
class _Watch:
    uri: str
    key: str
    strategy_type: str
    pull: base.PullStrategy
    deliver: base.Fire
    """Tell this process's subscribers (the registry's local fire)."""


Gateways = Callable[[], Collection[str]]
"""The names of the gateways heard on the bus lately (`peers.Peers.fresh`)."""


class Owners:
    """Runs this process's pull watches under their leases, and knows which it owns now."""

    def __init__(self, the_bus: bus.Bus, clock: base.Clock, gateways: Gateways | None = None) -> None:
        self._bus, self._clock = the_bus, clock
        self._gateways = gateways
        self._owned: set[str] = set()
        self._holders: dict[str, str | None] = {}
        """The holder each contended lease names (None: an entry no gateway wrote), as last read."""
        self._lease_value = lease_value(the_bus.instance)
        self._changed = asyncio.Event()
        self._roster = rendezvous.Roster(the_bus.rules.interval_s)
        """Which gateways heard on the bus have stayed a liveness interval: those a lease may be handed to."""

    def owns(self, uri: str) -> bool:
        return uri in self._owned

    def holder(self, uri: str) -> str | None:
        """Who holds `uri`'s lease as this gateway knows: itself when it owns it, else the name the lease gave
        when last read while contending for it (None if unknown or not a name a gateway would write)."""
        return self._bus.instance if uri in self._owned else self._holders.get(uri)

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; it is checked at every lease event (acquired, released, lost, fenced,
        a holder read)."""
        while not predicate():
            await self._changed.wait()

    async def run(self, uri: str, strategy_type: str, pull: base.PullStrategy, deliver: base.Fire) -> None:
        """Contend for `uri`'s lease; while held, read for every gateway. Until cancelled (then release)."""
        watch = _Watch(uri, bus.uri_hash(uri), strategy_type, pull, deliver)
        placement = rendezvous.Placement(watch.key, self._bus.instance, self._ttl_s())
        try:
            while True:
                cancellation.reraise()  # a cancel the last release swallowed: no new contention
                await self._hold(watch, placement, await self._acquire(watch, placement))
        finally:
            await self._withdraw(placement)  # not guarded either: a cancel is under way

    async def _hold(self, watch: _Watch, placement: rendezvous.Placement, lease: Lease) -> None:
        """Read for every gateway until the lease is lost, fenced or handed over (or this is cancelled); release."""
        placement.held_by(self._bus.instance)
        self._set_owned(watch.uri, True)
        reading = asyncio.Lock()
        """Held by the reading from a check until its fire's state is stored: a handover waits for it to be free."""
        try:
            cancellation.reraise()  # the stop came with the lease (the create swallowed it): released at once
            keep = self._keep(watch, lease, placement, reading)
            await _first_done(f"watch {watch.uri}", lease=keep, reading=self._work(watch, reading))
        finally:
            try:
                await self._release(watch, lease)  # not guarded: it must finish, and a cancel is under way
            finally:
                self._set_owned(watch.uri, False)

    # --- the lease -------------------------------------------------------------------------------------------

    async def _acquire(self, watch: _Watch, placement: rendezvous.Placement) -> Lease:
        contention = Contention(self._clock.now(), self._suspect_after_s())
        placement.ttl_s = self._ttl_s()  # the bucket's actual TTL, once it is open
        try:
            while True:
                lease = await self._try_acquire(watch, contention, placement)
                if lease is not None:
                    return lease
                await asyncio.sleep(placement.wait_s(time.monotonic()))
        finally:
            self._holders.pop(watch.uri, None)

    async def _try_acquire(
        self, watch: _Watch, contention: Contention, placement: rendezvous.Placement
    ) -> Lease | None:
        """One attempt: say this gateway wants the URI; read the lease; if it is free and this gateway should take
        it (`rendezvous.Placement.take_free`), create it (put-if-absent)."""
        import nats.js.errors  # here, not at the top: only a gateway on a bus gets this far

        buckets = self._bus.buckets
        if buckets is None or not self._bus.connected:
            return None
        await rendezvous.declare(buckets.owners, placement, time.monotonic())
        try:
            async with cancellation.guarded(bus.KV_TIMEOUT_S):
                entry = await buckets.owners.get(watch.key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            pass  # free: released, expired or never held
        except bus.errors():  # the bus failed: try again in a while
            return None
        else:
            self._contended(watch, contention, placement, lease_holder(entry.value))
            return None
        self._set_holder(watch.uri, None)
        winner = await self._winner(buckets.owners, placement)
        if not placement.take_free(winner, time.monotonic()):
            return None
        lease = await self._create(watch, buckets.owners, buckets.lease_ttl_s)
        if lease is not None and winner is not None:
            self._event("unclaimed", watch)  # left free for the grace by `winner`, which wants it: taken here
        return lease

    async def _create(self, watch: _Watch, owners: KeyValue, ttl_s: float) -> Lease | None:
        sent = time.monotonic()
        try:
            async with asyncio.timeout(bus.KV_TIMEOUT_S):
                revision = await owners.create(watch.key, self._lease_value)
        except bus.errors():  # taken meanwhile (the next attempt reads by whom), or the bus failed
            cancellation.reraise()  # each await into nats-py may have swallowed the stop (`cancellation.py`)
            return None
        self._event("acquired", watch)
        return Lease(ttl_s, revision, sent)  # `run` sees a stop that came with it, and releases

    async def _winner(self, owners: KeyValue, placement: rendezvous.Placement) -> str | None:
        """The best live gateway outranking this one that wants the URI, if any (the bus's word, read in bound)."""
        candidates = placement.candidates(self._steady(), time.monotonic())
        if not candidates:
            return None
        try:
            async with cancellation.guarded(bus.KV_TIMEOUT_S):
                return await rendezvous.first_interested(owners, placement.key, candidates)
        except TimeoutError:
            return None

    def _steady(self) -> set[str]:
        heard = self._gateways() if self._gateways is not None else ()
        return self._roster.steady(heard, self._clock.now())

    def _contended(
        self, watch: _Watch, contention: Contention, placement: rendezvous.Placement, holder: str | None
    ) -> None:
        """The lease is held by `holder`: noted, and said once if no gateway on the bus goes by that name."""
        placement.held_by(holder)
        self._steady()  # the roster sampled at every attempt: a gateway's stay is counted from when it began
        self._set_holder(watch.uri, holder)
        now = self._clock.now()
        if self._gateways is None or not contention.read_due(now):
            return
        contention.read_at = now
        if contention.suspect(now, holder, self._gateways()):
            self._suspected(watch, holder, now - contention.since)
            self._wake()

    def _set_holder(self, uri: str, holder: str | None) -> None:
        if uri not in self._holders or self._holders[uri] != holder:
            self._holders[uri] = holder
            self._wake()

    def _suspected(self, watch: _Watch, holder: str | None, for_s: float) -> None:
        self._bus.metrics.leases_held_by_unknown.inc()
        named = repr(holder) if holder is not None else "an entry no gateway wrote"
        logger.warning(
            "the lease of %s has been held by %s for %.0f s, and no gateway on the bus goes by that name: no gateway "
            "reads it for its subscribers while it lasts; another client of the bus account may be holding it "
            "(counted in mcpg_bus_leases_held_by_unknown_total)",
            watch.uri,
            named,
            for_s,
        )

    def _suspect_after_s(self) -> float:
        # By then a dead holder's lease has expired (a TTL), and a live gateway has reported (every interval).
        return 2 * max(self._ttl_s(), self._bus.rules.interval_s)

    async def _keep(self, watch: _Watch, lease: Lease, placement: rendezvous.Placement, reading: asyncio.Lock) -> None:
        """Renew until the lease is lost, this owner must fence itself, or (at a renewal) a live gateway that
        outranks it wants the URI; then return."""
        import nats.js.errors  # here, not at the top: only a gateway on a bus gets this far

        while True:
            await asyncio.sleep(lease.wait_s(time.monotonic()))
            now = time.monotonic()
            if lease.fenced(now):
                self._end(watch, lease, "fenced")
                return
            buckets = self._bus.buckets
            if buckets is None or not self._bus.connected:
                continue
            try:
                async with cancellation.guarded(lease.ttl_s / 6):
                    revision = await buckets.owners.update(watch.key, self._lease_value, last=lease.revision)
                    # Kept before the block re-raises a swallowed stop: the release must name this revision.
                    lease.renewed(revision, now)
            except nats.js.errors.KeyWrongLastSequenceError:
                self._end(watch, lease, "lost")
                return
            except bus.errors() as e:
                logger.debug("renewing the lease of %s failed: %s", watch.uri, type(e).__name__)
                continue
            if await self._handing_over(watch, lease, placement, reading):
                return

    async def _handing_over(
        self, watch: _Watch, lease: Lease, placement: rendezvous.Placement, reading: asyncio.Lock
    ) -> bool:
        """True (the reading then stopped between checks) if the lease goes to a gateway that should own it."""
        buckets = self._bus.buckets
        if buckets is None or reading.locked():  # a check under way: its fire and state first, next renewal
            return False
        candidates = placement.candidates(self._steady(), time.monotonic())
        if not candidates:
            return False
        try:
            # Within a sixth of the TTL, as the renewal: the next one comes due with the fence still far off.
            async with cancellation.guarded(lease.ttl_s / 6):
                successor = await rendezvous.first_interested(buckets.owners, watch.key, candidates)
        except TimeoutError:
            return False
        if successor is None or reading.locked():
            return False
        await reading.acquire()  # free: taken at once; the reading waits on it until it is cancelled
        lease.ended = "handed_over"
        self._set_owned(watch.uri, False)
        logger.debug("handing the lease of %s to %s (this gateway: %s)", watch.uri, successor, self._bus.instance)
        return True

    async def _withdraw(self, placement: rendezvous.Placement) -> None:
        buckets = self._bus.buckets
        if buckets is not None and self._bus.connected and placement.withdraw_due(time.monotonic()):
            await rendezvous.withdraw(buckets.owners, placement, RELEASE_TIMEOUT_S)

    def _end(self, watch: _Watch, lease: Lease, how: End) -> None:
        lease.ended = how
        self._set_owned(watch.uri, False)
        self._event(how, watch)

    async def _release(self, watch: _Watch, lease: Lease) -> None:
        buckets = self._bus.buckets
        if lease.ended == "lost" or buckets is None or not self._bus.connected:
            return  # taken by another, or unreachable (then the TTL frees it; no need to wait for a timeout)
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT_S):
                await buckets.owners.delete(watch.key, last=lease.revision)
        except bus.errors() as e:  # expired or taken meanwhile, or the bus is down: the TTL frees it
            logger.debug("releasing the lease of %s failed: %s", watch.uri, type(e).__name__)
            return
        self._event("handed_over" if lease.ended == "handed_over" else "released", watch)

    def _set_owned(self, uri: str, owned: bool) -> None:
        if owned:
            self._owned.add(uri)
        else:
            self._owned.discard(uri)
        self._bus.metrics.owned_watches.set(len(self._owned))
        self._wake()

    def _wake(self) -> None:
        self._changed.set()  # wakes every `until`; each waits on the fresh event next
        self._changed = asyncio.Event()

    def _event(self, event: str, watch: _Watch) -> None:
        self._bus.metrics.lease_changes.labels(event).inc()
        # Per-URI lines at debug: a bus outage fences every owner at once, and a storm of lines helps nobody.
        level = logging.INFO if event in ("lost", "fenced") else logging.DEBUG
        logger.log(level, "lease of %s %s (this gateway: %s)", watch.uri, event, self._bus.instance)

    def _ttl_s(self) -> float:
        buckets = self._bus.buckets
        return buckets.lease_ttl_s if buckets is not None else self._bus.cfg.lease_ttl_s

    # --- the reading, while owned ------------------------------------------------------------------------

    async def _work(self, watch: _Watch, reading: asyncio.Lock) -> None:
        async with reading:
            if await self._resumed(watch):
                await self._check(watch)
            else:
                await self._store(watch)  # the first owner: its own baseline, and nothing to tell
        while True:
            await self._clock.sleep(watch.pull.interval_s)
            async with reading:
                await self._check(watch)

    async def _check(self, watch: _Watch) -> None:
        # A read (asyncpg, a plugin) may swallow the stop: then it tells nobody, as the lease is being let go.
        if await cancellation.checked(watch.pull.check()):
            await self._announce(watch)

    async def _resumed(self, watch: _Watch) -> bool:
        """Resume from the stored state; False if there is none this watch can use."""
        import nats.js.errors  # here, not at the top: only a gateway on a bus gets this far

        while True:
            buckets = self._bus.buckets
            try:
                if buckets is None:
                    raise BusUnavailableError("the buckets are not open")
                async with cancellation.guarded(bus.KV_TIMEOUT_S):
                    entry = await buckets.state.get(watch.key)
            except nats.js.errors.KeyNotFoundError:
                return False
            except bus.errors(BusUnavailableError):  # the lease fences this owner if it lasts
                await asyncio.sleep(self._ttl_s() / 12)
                continue
            return self._resume(watch, entry.value)

    def _resume(self, watch: _Watch, data: bytes | None) -> bool:
        state = stored_state(data)
        if state is None:
            # Not ours (another client of the account wrote it, or another version): discarded, and overwritten
            # by this owner's baseline, so it is said once.
            logger.warning("the stored state of %s is not one this gateway wrote; taking its own baseline", watch.uri)
            return False
        try:
            watch.pull.resume(state)
        except Exception as e:  # isolation boundary: a strategy's (or plugin's) reading of a hostile state
            logger.warning(
                "the stored state of %s is not this watch's (%s); taking its own baseline", watch.uri, _why(e)
            )
            return False
        return True

    async def _announce(self, watch: _Watch) -> None:
        try:
            await self._bus.publish(watch.uri, watch.strategy_type)
        except BusUnavailableError:
            # Ours are told now; the others when they reconnect, and again by the next owner (state not stored).
            await watch.deliver()
            return
        await watch.deliver()
        await self._store(watch)

    async def _store(self, watch: _Watch) -> None:
        buckets = self._bus.buckets
        try:
            value = state_value(watch.pull.snapshot())
            if buckets is None:
                raise BusUnavailableError("the buckets are not open")
            async with cancellation.guarded(bus.KV_TIMEOUT_S):
                await buckets.state.put(watch.key, value)
        except (TypeError, ValueError) as e:
            logger.warning("the state of %s cannot be stored (%s)", watch.uri, e)
        except bus.errors(BusUnavailableError) as e:
            logger.warning("storing the state of %s failed (%s); the next owner may tell it once more", watch.uri, e)


def _why(error: Exception) -> str:
    """A strategy's refusal of a state, for a log line: its type, and its text bounded (it may quote the state)."""
    text = str(error)
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__


async def _first_done(name: str, **coros: Coroutine[Any, Any, None]) -> None:
    """Run `coros` as tasks (`<name> <keyword>`) until the first ends; cancel the rest; raise what the first raised.
    Cancelled itself, or once one ended, it waits for the rest in bound (`WORK_STOP_TIMEOUT_S`): one that will
    not stop is abandoned and logged, and the lease is released anyway."""
    tasks = [asyncio.create_task(coro, name=f"{name} {part}") for part, coro in coros.items()]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await cancellation.stopped(tasks, WORK_STOP_TIMEOUT_S, "a pull watch stopping")
    for task in done:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
