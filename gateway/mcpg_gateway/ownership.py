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
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

import nats.js.errors

from mcpg_gateway import bus
from mcpg_gateway.errors import BusUnavailableError
from mcpg_gateway.strategies import base

logger = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 2.0
STATE_VERSION = 1

End = Literal["lost", "fenced"]


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


def state_value(snapshot: str) -> bytes:
    return json.dumps({"v": STATE_VERSION, "state": snapshot}).encode()


def stored_state(data: bytes | None) -> str | None:
    """The snapshot in a state entry, or None if it holds none this version can read."""
    try:
        doc = json.loads(data or b"")
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != STATE_VERSION or not isinstance(doc.get("state"), str):
        return None
    return str(doc["state"])


@dataclass(frozen=True, slots=True)
class _Watch:
    uri: str
    key: str
    strategy_type: str
    pull: base.PullStrategy
    deliver: base.Fire
    """Tell this process's subscribers (the registry's local fire)."""


class Owners:
    """Runs this process's pull watches under their leases, and knows which it owns now."""

    def __init__(self, the_bus: bus.Bus, clock: base.Clock) -> None:
        self._bus, self._clock = the_bus, clock
        self._owned: set[str] = set()
        self._lease_value = lease_value(the_bus.instance)
        self._changed = asyncio.Event()

    def owns(self, uri: str) -> bool:
        return uri in self._owned

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; it is checked at every lease event (acquired, released, lost, fenced)."""
        while not predicate():
            await self._changed.wait()

    async def run(self, uri: str, strategy_type: str, pull: base.PullStrategy, deliver: base.Fire) -> None:
        """Contend for `uri`'s lease; while held, read for every gateway. Until cancelled (then release)."""
        watch = _Watch(uri, bus.uri_hash(uri), strategy_type, pull, deliver)
        while True:
            lease = await self._acquire(watch)
            self._set_owned(watch.uri, True)
            try:
                await _first_done(self._keep(watch, lease), self._work(watch))
            finally:
                try:
                    await self._release(watch, lease)
                finally:
                    self._set_owned(watch.uri, False)

    # --- the lease -------------------------------------------------------------------------------------------

    async def _acquire(self, watch: _Watch) -> Lease:
        while True:
            buckets = self._bus.buckets
            if buckets is not None and self._bus.connected:
                sent = time.monotonic()
                try:
                    async with asyncio.timeout(bus.KV_TIMEOUT_S):
                        revision = await buckets.owners.create(watch.key, self._lease_value)
                except bus.ERRORS:  # held by another gateway (or the bus failed): try again in a while
                    pass
                else:
                    self._event("acquired", watch)
                    return Lease(buckets.lease_ttl_s, revision, sent)
            await asyncio.sleep(self._ttl_s() / 3)

    async def _keep(self, watch: _Watch, lease: Lease) -> None:
        """Renew until the lease is lost or this owner must fence itself; then return."""
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
                async with asyncio.timeout(lease.ttl_s / 6):
                    revision = await buckets.owners.update(watch.key, self._lease_value, last=lease.revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                self._end(watch, lease, "lost")
                return
            except bus.ERRORS as e:
                logger.debug("renewing the lease of %s failed: %s", watch.uri, type(e).__name__)
                continue
            lease.renewed(revision, now)

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
        except bus.ERRORS as e:  # expired or taken meanwhile, or the bus is down: the TTL frees it
            logger.debug("releasing the lease of %s failed: %s", watch.uri, type(e).__name__)
            return
        self._event("released", watch)

    def _set_owned(self, uri: str, owned: bool) -> None:
        if owned:
            self._owned.add(uri)
        else:
            self._owned.discard(uri)
        self._bus.metrics.owned_watches.set(len(self._owned))
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

    async def _work(self, watch: _Watch) -> None:
        if await self._resumed(watch):
            if await watch.pull.check():
                await self._announce(watch)
        else:
            await self._store(watch)  # the first owner: its own baseline, and nothing to tell
        while True:
            await self._clock.sleep(watch.pull.interval_s)
            if await watch.pull.check():
                await self._announce(watch)

    async def _resumed(self, watch: _Watch) -> bool:
        """Resume from the stored state; False if there is none this watch can use."""
        while True:
            buckets = self._bus.buckets
            try:
                if buckets is None:
                    raise BusUnavailableError("the buckets are not open")
                async with asyncio.timeout(bus.KV_TIMEOUT_S):
                    entry = await buckets.state.get(watch.key)
            except nats.js.errors.KeyNotFoundError:
                return False
            except (*bus.ERRORS, BusUnavailableError):  # the lease fences this owner if it lasts
                await asyncio.sleep(self._ttl_s() / 12)
                continue
            return self._resume(watch, stored_state(entry.value))

    def _resume(self, watch: _Watch, state: str | None) -> bool:
        if state is None:
            return False
        try:
            watch.pull.resume(state)
        except ValueError as e:
            logger.info("the stored state of %s is not this watch's (%s); taking its own baseline", watch.uri, e)
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
            async with asyncio.timeout(bus.KV_TIMEOUT_S):
                await buckets.state.put(watch.key, value)
        except (TypeError, ValueError) as e:
            logger.warning("the state of %s cannot be stored (%s)", watch.uri, e)
        except (*bus.ERRORS, BusUnavailableError) as e:
            logger.warning("storing the state of %s failed (%s); the next owner may tell it once more", watch.uri, e)


async def _first_done(*coros: Coroutine[Any, Any, None]) -> None:
    """Run `coros` until the first ends; cancel the rest; raise what the first raised."""
    tasks = [asyncio.create_task(coro) for coro in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
