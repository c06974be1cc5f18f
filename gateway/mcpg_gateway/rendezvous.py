"""Which gateway should hold a pull URI's lease (`ownership.py`): rendezvous hashing over the gateways that want it.

Each gateway ranks every name by a hash of (URI hash, name); of the live gateways contending for a URI, the one
ranked first should read it. Rendezvous (highest random weight) rather than a ring or one lease per shard
(Knative's way): it needs nothing shared but the names, every gateway ranks alike with no coordinator, a gateway
joining or leaving moves only the URIs it wins or held (1/N), and there is no shard count to fix ahead. A lease
only ever moves up a URI's ranking (an owner hands it to a gateway that outranks it), so no two gateways pass it
back and forth; the only way down is a gateway taking a free lease its better left alone (see `Placement`).

A gateway contending for a lease says so with an interest entry in the owners bucket, `<uri-hash>.w.<name-hash>`
(NATS key tokens allow no pod name's every character, so the name is hashed; its value names it), put at every
attempt and withdrawn when it stops; the bucket's max age drops one not renewed for a lease TTL. A gateway counts
as live once the bus has heard it (`peers.py`) without a gap for a liveness interval (`Roster`): a pod that joins
gets its share only once it has stayed. An owner looks up only the interest of live gateways that outrank it, best
first and at most `MAX_PROBES` (none at all once it is the one that should own it), so a client of the bus account
writing interest entries, or reports under made-up names, costs a bounded number of reads. One that says it wants a
URI and never takes it delays its reading by a grace (2/3 of a TTL) now and then (`SNUB_TTLS`), never for good.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcpg_gateway import bus, cancellation

if TYPE_CHECKING:  # nats is imported once a bus is in use, not by every gateway
    from nats.js.kv import KeyValue

logger = logging.getLogger(__name__)

INTEREST_SEGMENT = "w"
NAME_HEX_CHARS = 32
MAX_INTEREST_BYTES = 1024
MAX_PROBES = 8
"""The most interest entries one decision reads: gateways past it (made-up ones, say) are not asked about."""
GRACE_TTLS = 2 / 3
"""How long (in lease TTLs) a free lease is left to a gateway that outranks this one and wants it: it tries every
third of a TTL, so it has tried at least once by then, with a third of a TTL to spare for a slow round trip."""
SNUB_TTLS = 10.0
"""How long (in lease TTLs) a gateway that left a free lease it wanted untaken is passed over for that URI."""
MAX_SNUBS = 16


def weight(key: str, name: str) -> int:
    """`name`'s rank for the URI of hash `key`: the same on every gateway, independent for each URI."""
    return int.from_bytes(hashlib.sha256(f"{key}\n{name}".encode()).digest()[:8], "big")


def ranked(key: str, names: Iterable[str]) -> list[str]:
    """`names`, best first for `key` (ties, which need a hash collision, by name)."""
    return sorted(set(names), key=lambda name: (weight(key, name), name), reverse=True)


def outranking(key: str, me: str, names: Iterable[str]) -> list[str]:
    """The names of `names` ranked above `me` for `key`, best first."""
    mine = (weight(key, me), me)
    return [name for name in ranked(key, names) if (weight(key, name), name) > mine]


def interest_key(key: str, name: str) -> str:
    return f"{key}.{INTEREST_SEGMENT}.{hashlib.sha256(name.encode()).hexdigest()[:NAME_HEX_CHARS]}"


def interest_value(name: str) -> bytes:
    return json.dumps({"wants": name}).encode()


def interest_of(data: bytes | None, name: str) -> bool:
    """Whether an interest entry is `name`'s (never raises: anything else is no interest)."""
    doc = bus.entry_json(data, MAX_INTEREST_BYTES)
    return isinstance(doc, dict) and doc.get("wants") == name


@dataclass
class Roster:
    """The gateways heard on the bus (`peers.Peers.fresh`), and since when each has been heard without a gap as
    sampled here. Pure: times are the injected clock's; bounded by what it is given (`peers.MAX_PEERS`)."""

    steady_after_s: float
    first_seen: dict[str, float] = field(default_factory=dict)

    def steady(self, heard: Collection[str], now: float) -> set[str]:
        """The names of `heard` heard for `steady_after_s` or more; one missing from `heard` starts again."""
        self.first_seen = {name: self.first_seen.get(name, now) for name in heard}
        return {name for name, since in self.first_seen.items() if now - since >= self.steady_after_s}


@dataclass
class Placement:
    """One gateway's view of where one URI's lease should be. Pure: times are the caller's monotonic clock.

    Free, the lease is taken at once by a contender no live interested gateway outranks (it should own it), and by
    any other once it has been free for `GRACE_TTLS`: whoever it was left to has not taken it, and is then passed
    over (`SNUB_TTLS`), so a name that says it wants a URI and never takes it cannot leave it unread."""

    key: str
    me: str
    ttl_s: float
    last_holder: str | None = None
    """The holder last seen (None: none seen, or an entry no gateway wrote): held by it, or left free by it."""
    free_since: float | None = None
    snubs: dict[str, float] = field(default_factory=dict)
    """Names passed over, and until when."""
    declared_at: float | None = None
    """When this gateway's interest entry was last written."""

    @property
    def grace_s(self) -> float:
        return self.ttl_s * GRACE_TTLS

    def candidates(self, steady: Collection[str], now: float) -> list[str]:
        """Whose interest to read, best first: the live gateways outranking this one, less the last holder (gone, or
        it let the lease go) and those passed over; at most `MAX_PROBES`."""
        self.snubs = {name: until for name, until in self.snubs.items() if until > now}
        passed = {self.me, self.last_holder, *self.snubs}
        return [name for name in outranking(self.key, self.me, steady) if name not in passed][:MAX_PROBES]

    def held_by(self, holder: str | None) -> None:
        self.last_holder, self.free_since = holder, None

    def take_free(self, winner: str | None, now: float) -> bool:
        """Whether to take the free lease now; `winner`: the best live gateway outranking this one that wants it."""
        if winner is None:
            return True
        if self.free_since is None:
            self.free_since = now
        if now - self.free_since < self.grace_s:
            return False
        self.snub(winner, now)
        return True

    def snub(self, name: str, now: float) -> None:
        self.snubs[name] = now + self.ttl_s * SNUB_TTLS
        while len(self.snubs) > MAX_SNUBS:
            del self.snubs[min(self.snubs, key=lambda n: self.snubs[n])]

    def wait_s(self, now: float) -> float:
        """Until the next attempt: a third of the TTL, or sooner when a grace ends."""
        due = self.ttl_s / 3
        if self.free_since is not None:
            due = min(due, max(0.0, self.free_since + self.grace_s - now))
        return due

    def withdraw_due(self, now: float) -> bool:
        """Whether this gateway's interest entry may still be there (written within a TTL)."""
        return self.declared_at is not None and now - self.declared_at < self.ttl_s


# --- the interest entries on the bus ------------------------------------------------------------------------------


async def declare(owners: KeyValue, placement: Placement, now: float) -> None:
    """Write (or renew) this gateway's interest in the URI; a failure only delays its share (logged at debug)."""
    try:
        async with cancellation.guarded(bus.KV_TIMEOUT_S):
            await owners.put(interest_key(placement.key, placement.me), interest_value(placement.me))
    except bus.errors() as e:
        logger.debug("declaring interest in %s failed: %s", placement.key, type(e).__name__)
        return
    placement.declared_at = now


async def withdraw(owners: KeyValue, placement: Placement, timeout_s: float) -> None:
    """Delete this gateway's interest entry, so that no owner hands the lease to a gateway that stopped wanting it.
    Not guarded: it runs while a stop is under way; a failure leaves the entry to expire."""
    try:
        async with asyncio.timeout(timeout_s):
            await owners.delete(interest_key(placement.key, placement.me))
    except bus.errors() as e:
        logger.debug("withdrawing interest in %s failed: %s", placement.key, type(e).__name__)
        return
    placement.declared_at = None


async def first_interested(owners: KeyValue, key: str, candidates: list[str]) -> str | None:
    """The first of `candidates` whose interest entry is there, or None (also when the bus fails: nothing moves on
    a bus that cannot be read). The caller bounds the time."""
    import nats.js.errors  # here, not at the top: only a gateway on a bus gets this far

    for name in candidates:
        try:
            entry = await owners.get(interest_key(key, name))
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            cancellation.reraise()
            continue
        except bus.errors():
            cancellation.reraise()
            return None
        if interest_of(entry.value, name):
            return name
    return None
