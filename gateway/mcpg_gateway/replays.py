"""Replay protection for signed webhooks: a delivery id fires once, on this process and, on a bus, on every replica.

Only a scheme that signs its delivery id (Standard Webhooks' `webhook-id`) can be protected this way: an id the
signature does not cover could be changed by whoever replays. Within the timestamp tolerance a captured delivery
verifies again, so its id is remembered for twice the tolerance (a delivery signed at `t` verifies from
`t - tolerance` to `t + tolerance`; remembered from when it was first seen, that covers the rest of its window).

Each process remembers the ids it let through, bounded; on a bus the claim is also a put-if-absent in the
`<bucket>-deliveries` key-value bucket (`buckets.py`), atomic on the server, so two replicas handed the same
delivery at once let exactly one through. Keys are a hash of the resource's URI and the id: an id is the
sender's, so only the pair is unique, and neither may appear in a key as is.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from mcpg_gateway import bus as bus_module
from mcpg_gateway import cancellation
from mcpg_gateway.errors import BusUnavailableError

if TYPE_CHECKING:  # nats is imported once a bus is in use, not by every gateway
    from nats.js.kv import KeyValue

logger = logging.getLogger(__name__)

MAX_REMEMBERED = 100_000
"""Ids one process keeps at most (about 10 MB); past it the oldest is forgotten first and counted as evicted."""
KEY_HEX_CHARS = 32


def key(uri: str, delivery_id: str) -> str:
    return hashlib.sha256(f"{uri}\n{delivery_id}".encode()).hexdigest()[:KEY_HEX_CHARS]


class Deliveries:
    """The delivery ids let through lately; `bus`: the replicas' shared record, when there is one."""

    def __init__(self, bus: bus_module.Bus | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._bus, self._clock = bus, clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        """Key -> when it may be forgotten (clock time), oldest first."""
        self.evicted = 0
        """Ids forgotten early to stay within `MAX_REMEMBERED`: a replay of one of them would verify again."""

    async def first(self, uri: str, delivery_id: str, remember_s: float) -> bool:
        """Whether this is the first time the delivery is seen (and record it): False for a replay. Raises
        `BusUnavailableError` when the replicas' record cannot be asked, so the sender retries."""
        k = key(uri, delivery_id)
        now = self._clock()
        self._expire(now)
        if k in self._seen:
            return False
        if not await self._claim(k, remember_s):
            return False
        self._remember(k, now + remember_s)
        return True

    async def forget(self, uri: str, delivery_id: str) -> None:
        """Undo `first`: the delivery could not be fired, and its sender's retry must be let through."""
        k = key(uri, delivery_id)
        self._seen.pop(k, None)
        kv = self._bucket()
        if kv is None:
            return
        try:
            async with cancellation.guarded(bus_module.KV_TIMEOUT_S):
                await kv.delete(k)
        except bus_module.errors() as e:
            # The retry will be refused as a replay until the record expires: said, since the sender sees a 401.
            logger.warning("could not release a webhook delivery id after a failed fire: %s", type(e).__name__)

    async def _claim(self, k: str, remember_s: float) -> bool:
        import nats.js.errors  # here, not at the top: only a gateway on a bus gets this far

        if self._bus is None:
            return True
        kv = self._bucket()
        if kv is None:
            raise BusUnavailableError("replay protection needs the bus's key-value buckets, which are not open")
        try:
            async with cancellation.guarded(bus_module.KV_TIMEOUT_S):
                await kv.create(k, b"", msg_ttl=max(1.0, remember_s))  # the server forgets it on its own
        except nats.js.errors.KeyWrongLastSequenceError:
            return False  # another replica let it through first
        except bus_module.errors():
            raise BusUnavailableError("the gateway could not record the delivery id on its bus") from None
        return True

    def _bucket(self) -> KeyValue | None:
        buckets = self._bus.buckets if self._bus is not None else None
        return buckets.deliveries if buckets is not None else None

    def _remember(self, k: str, until: float) -> None:
        self._seen[k] = until
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)
            self.evicted += 1

    def _expire(self, now: float) -> None:
        # Insertion order is nearly expiry order (tolerances differ per watch): stop at the first still due.
        while self._seen:
            oldest, until = next(iter(self._seen.items()))
            if until > now:
                return
            del self._seen[oldest]

    def __len__(self) -> int:
        return len(self._seen)
