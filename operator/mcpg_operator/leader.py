"""Leader election on a `coordination.k8s.io/v1` Lease: one replica reconciles, the others stand by.

client-go's algorithm, which controller-runtime uses:

- Every candidate reads the Lease each retry period. It takes the Lease when nobody holds it, or when the record
  has not changed for the record's leaseDurationSeconds as timed on its own clock since it last saw a change:
  only a change is compared, never a timestamp's value, so clock skew between nodes does not matter.
- Writes are merge patches carrying the resourceVersion read: of two candidates writing at once, one gets 409.
- The leader renews every retry period. If no renewal succeeds for the renew deadline (each attempt bounded by
  what is left of it, so a hung request cannot stretch it), leadership is lost and the caller must stop at once.
  The deadline is shorter than the lease, so the old leader has stopped before anyone can take over.
- A leader that stops cleanly releases the Lease (no holder), so a standby takes it at its next try instead of
  waiting out the lease.

Why not `kubernetes_asyncio.leaderelection` (36.1.0): it cannot release the Lease; a hung request is not bounded
by the renew deadline, so a leader could go on reconciling after its Lease expired; an error other than
`ApiException` escapes `run()` while the leading coroutine goes on running; it writes local times marked UTC and
never counts leaseTransitions.

Two pieces keep a replica that lost the Lease from writing. `candidacy.Candidacy` runs the elector on a thread
of its own, with its own event loop and API client, so no reconcile work (a CPU-bound pass over hundreds of
watches) can hold a renewal back. `Fence` is what the reconciler's client asks before each write: it compares
the time of the last renewal with the renew deadline itself, so it closes on time even when the elector has not
noticed the loss yet.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes_asyncio.client.exceptions import ApiException

from mcpg_operator import metrics
from mcpg_operator.kube import NotLeading
from mcpg_operator.settings import LeaderElection

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class Store(Protocol):
    """The calls the elector makes (`kube.Kube` has them): None from `create` means it exists already."""

    async def get(self, path: str) -> dict[str, Any] | None: ...

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None: ...

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None: ...


class Connection(Store, Protocol):
    """A `Store` of the elector's own (`kube.Kube` without a fence), closed when the elector ends."""

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Record:
    """A Lease's election record, as read: equal records mean nobody renewed or took the Lease in between."""

    holder: str | None
    lease_s: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int


def record(lease: dict[str, Any]) -> Record:
    spec = lease.get("spec") or {}
    return Record(
        holder=spec.get("holderIdentity") or None,
        lease_s=float(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def micro_time(ts: float) -> str:
    """`ts` as a Kubernetes MicroTime (RFC 3339, microseconds, UTC)."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Fence:
    """Whether this replica may write now: it holds the Lease, and its last renewal is younger than the deadline.

    The elector (on its own thread) says when it acquired or renewed the Lease, and when it lost it; the
    reconciler's client asks `admit` before each write. The deadline is checked here, on the clock, not left to
    the elector to notice: a renewal in flight or a thread not yet scheduled must not keep writes open past it.
    The Lease outlives the deadline (`lease_s` > `renew_s`), which is the margin for a write already sent.
    """

    def __init__(
        self, renew_s: float, lease: str, clock: Clock = time.monotonic, recorder: metrics.Metrics = metrics.METRICS
    ) -> None:
        self._renew_s, self._lease, self._clock, self._refused = renew_s, lease, clock, recorder.fenced_writes
        # Written by the elector's thread, read by the reconciler's: one float (or None) per attribute, and in
        # CPython an attribute's read or write is atomic, so a reader sees the old value or the new, never a mix.
        self._renewed: float | None = None
        """When (`clock`) the Lease was last acquired or renewed: the time of the try, which is before the API
        server stored it, so the deadline counted from it errs early. None while it is not held."""
        self._said = False
        """Whether the refusal was logged since the Lease was last held: once, not once per write."""

    def renewed(self, at: float) -> None:
        self._renewed, self._said = at, False

    def close(self) -> None:
        self._renewed = None

    def holds(self) -> bool:
        renewed = self._renewed  # read once: the elector's thread may change it meanwhile
        return renewed is not None and self._clock() < renewed + self._renew_s

    def admit(self, method: str, path: str) -> None:
        """Raise `kube.NotLeading` (counted; logged once) unless the Lease is held within its renew deadline."""
        if self.holds():
            return
        self._refused.inc()
        if not self._said:
            self._said = True
            logger.error(
                "not sending %s %s, nor any write after it: this replica does not hold Lease %s",
                method,
                path,
                self._lease,
            )
        raise NotLeading(f"{method} {path}: this replica does not hold Lease {self._lease}")


class Elector:
    """One candidate for the Lease `config.lease_name` in `config.namespace`, as `config.identity`."""

    def __init__(
        self,
        store: Store,
        config: LeaderElection,
        recorder: metrics.Metrics = metrics.METRICS,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
        fence: Fence | None = None,
    ) -> None:
        """`clock` times the Lease (monotonic), `wall` dates the Lease's record; tests pass their own. `fence`
        (default: one of its own on `clock`) is opened while this candidate holds the Lease."""
        self._store, self._config, self._clock, self._wall, self._sleep = store, config, clock, wall, sleep
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases"
        self._path = f"{self._collection}/{config.lease_name}"
        self._status = recorder.leader.labels(config.lease_name)
        self.fence = fence or Fence(config.renew_s, self._name(), clock, recorder)
        self.leading = False
        self._renewed = -math.inf
        """When (our clock) the try that last acquired or renewed the Lease began."""
        self._lead(False)
        self._observed: Record | None = None
        self._observed_at = 0.0
        """When (our clock) the record last changed, as far as we saw."""
        self._failing = False

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease; try every retry period until then."""
        logger.info("%s is a candidate for Lease %s", self._config.identity, self._name())
        tick = self._clock()
        while not await self._attempt(tick, self._config.renew_s):
            tick = await self._next(tick)
        self._renewal(tick)
        self._lead(True)
        logger.info("%s leads: it holds Lease %s", self._config.identity, self._name())

    async def hold(self) -> None:
        """Renew every retry period; return when leadership is lost.

        Lost: no renewal succeeded for the renew deadline, or another candidate is seen holding the Lease.
        """
        tick = self._clock()
        while True:
            tick = await self._next(tick)
            left = self._renewed + self._config.renew_s - self._clock()
            if left > 0 and await self._attempt(tick, left):
                self._renewal(tick)
                continue
            holder = self._observed.holder if self._observed else None
            if holder not in (None, self._config.identity) or self._clock() >= self._renewed + self._config.renew_s:
                self._lead(False)
                why = f"held by {holder}" if holder not in (None, self._config.identity) else "renew deadline passed"
                logger.error("%s lost Lease %s: %s", self._config.identity, self._name(), why)
                return

    async def release(self) -> None:
        """Give the Lease up if this candidate holds it, so a standby need not wait for it to expire."""
        self._lead(False)
        try:
            async with asyncio.timeout(self._config.renew_s):
                lease = await self._store.get(self._path)
                if lease is None or record(lease).holder != self._config.identity:
                    return
                spec = {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": micro_time(self._wall())}
                await self._store.merge_patch(self._path, _conditional(lease, spec))
        except Exception as e:  # shutdown boundary: the Lease then expires by itself after its duration
            logger.warning("%s could not release Lease %s: %s", self._config.identity, self._name(), _short(e))
            return
        logger.info("%s released Lease %s", self._config.identity, self._name())

    def _lead(self, leading: bool) -> None:
        self.leading = leading
        if not leading:
            self.fence.close()
        self._status.set(1 if leading else 0)

    def _renewal(self, tick: float) -> None:
        """The try at `tick` acquired or renewed the Lease: the renew deadline counts from then."""
        self._renewed = tick
        self.fence.renewed(tick)

    async def _next(self, tick: float) -> float:
        """Sleep until one retry period after `tick`: a fixed cadence, which a try that overran restarts from now
        (rather than trying again at once to catch up)."""
        tick, now = tick + self._config.retry_s, self._clock()
        tick = max(tick, now)
        await self._sleep(tick - now)
        return tick

    async def _attempt(self, tick: float, within_s: float) -> bool:
        """One try to acquire or renew at `tick`, bounded by `within_s`; any failure is a failed try."""
        try:
            async with asyncio.timeout(within_s):
                ok = await self._try_acquire_or_renew(tick)
        except Exception as e:  # isolation boundary: a failed try is retried; the renew deadline decides
            if not self._failing:  # once per streak of failures, not every retry period
                who, lease = self._config.identity, self._name()
                logger.warning("%s cannot acquire or renew Lease %s: %s", who, lease, _short(e))
            self._failing = True
            return False
        self._failing = False
        return ok

    async def _try_acquire_or_renew(self, tick: float) -> bool:
        """Times are this try's `tick`: a record is seen changed, and found expired, on the retry cadence, so
        request latency never pushes a takeover to the next try (it is far below lease - renew deadline)."""
        lease = await self._store.get(self._path)
        now = micro_time(self._wall())
        if lease is None:
            meta = {"name": self._config.lease_name}
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta}
            created = await self._store.create(self._collection, {**body, "spec": self._spec(now)})
            return self._observed_write(created, tick)
        seen = self._observe(lease, tick)
        if seen.holder not in (None, self._config.identity) and not self._expired(seen, tick):
            return False
        ours = seen.holder == self._config.identity
        spec = self._spec(now, seen.acquire_time if ours else now, seen.transitions + (0 if ours else 1))
        try:
            return self._observed_write(await self._store.merge_patch(self._path, _conditional(lease, spec)), tick)
        except ApiException as e:
            if e.status == 409:  # another candidate wrote first: not ours this time
                return False
            raise

    def _observed_write(self, written: dict[str, Any] | None, tick: float) -> bool:
        """Whether the write happened (None: another candidate created the Lease first, or it is gone)."""
        if written is None:
            return False
        self._observe(written, tick)
        return True

    def _observe(self, lease: dict[str, Any], tick: float) -> Record:
        """Note the record read or written, and that it changed at `tick` if it did."""
        seen = record(lease)
        if seen != self._observed:
            self._observed_at = tick
        self._observed = seen
        return seen

    def _expired(self, seen: Record, tick: float) -> bool:
        return tick >= self._observed_at + (seen.lease_s or self._config.lease_s)

    def _spec(self, now: str, acquired: str | None = None, transitions: int = 0) -> dict[str, Any]:
        return {
            "holderIdentity": self._config.identity,
            "leaseDurationSeconds": math.ceil(self._config.lease_s),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _name(self) -> str:
        return f"{self._config.namespace}/{self._config.lease_name}"


def _conditional(lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of `spec` that the API server refuses (409) if anyone wrote the Lease since it was read."""
    return {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": spec}


def _short(error: BaseException) -> str:
    return (str(error) or type(error).__name__)[:300]
