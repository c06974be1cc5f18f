"""What the other gateways on the bus say about their event sources: how /readyz weighs a dead source.

A source no gateway can reach (the database is down for everyone) is no reason to stop taking sessions: every
replica would stop at once, and the webhooks and every other resource would go down with them, for nothing
another replica could do better. A source this gateway cannot reach while another can (a route lost from one
node, a NAT in front of one pod) is: a subscriber sent here gets a watch that hears nothing until the connection
is back; sent there, one that works. So, on a bus, each gateway says every liveness interval which watched
resources it holds a connection for and whether each is up, on `<prefix>.sources`; and /readyz answers 503 while
a watch's connection has been down here for `DOWN_FOR_INTERVALS` intervals and a gateway heard from within
`FRESH_FOR_INTERVALS` intervals holds the same resource's connection up. Without a bus there is no other
gateway to prefer, and a dead source never makes the gateway unready.

Resources are named by a hash of their name (the same configuration runs on every replica), so the reports
carry no address. A report is a small JSON object; anything else on the subject is ignored, and at most
`MAX_PEERS` gateways are remembered, so a client of the namespace's account cannot grow this without bound.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeGuard

from mcpg_gateway import liveness

SUBJECT = "sources"
"""After the bus's subject prefix."""
DOWN_FOR_INTERVALS = 2
"""How long (in liveness intervals) a connection is down here before another gateway is preferred: a reconnect
after a blip should not take a pod out of its Service."""
FRESH_FOR_INTERVALS = 3
"""A report older than this many intervals is from a gateway that is gone or cut off: it vouches for nothing."""
MAX_PEERS = 256
MAX_REPORT_BYTES = 256 * 1024
KEY_HEX_CHARS = 16
MAX_INSTANCE_CHARS = 253


def key(resource: str) -> str:
    return hashlib.sha256(resource.encode()).hexdigest()[:KEY_HEX_CHARS]


@dataclass(frozen=True, slots=True)
class Held:
    """One watch's connection as the decision needs it."""

    resource: str
    """The resource (or template) name in the configuration."""
    connection: liveness.Connection


@dataclass(frozen=True, slots=True)
class Report:
    instance: str
    up: frozenset[str]
    """Keys of the resources whose connection is up there."""
    down: frozenset[str]

    def encode(self) -> bytes:
        return json.dumps({"instance": self.instance, "up": sorted(self.up), "down": sorted(self.down)}).encode()


def report(instance: str, held: Iterable[Held]) -> Report:
    """This gateway's report: a resource is up if any of its watches' connections is."""
    up: set[str] = set()
    down: set[str] = set()
    for h in held:
        if h.connection.held:
            (up if h.connection.up else down).add(key(h.resource))
    return Report(instance, frozenset(up), frozenset(down - up))


def decode(data: bytes) -> Report | None:
    """A report, or None for anything that is not one (never raises)."""
    if len(data) > MAX_REPORT_BYTES:
        return None
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    instance, up, down = raw.get("instance"), raw.get("up"), raw.get("down")
    if _instance(instance) and _keys(up) and _keys(down):
        return Report(instance, frozenset(up), frozenset(down))
    return None


def _instance(value: object) -> TypeGuard[str]:
    # Shown on the admin API and in logs: printable, and text that encodes (JSON may escape a lone surrogate).
    return isinstance(value, str) and 0 < len(value) <= MAX_INSTANCE_CHARS and value.isprintable() and _utf8(value)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _keys(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(k, str) and len(k) == KEY_HEX_CHARS for k in value)


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """A resource whose event source this gateway cannot reach and `gateway` can. Shown on the admin API only:
    /readyz answers anyone, and a resource's name is not for anyone."""

    resource: str
    gateway: str


class Peers:
    """The last report of each other gateway, and the readiness decision they inform."""

    def __init__(self, instance: str, rules: liveness.Rules) -> None:
        self.instance = instance
        self.rules = rules
        self._heard: dict[str, tuple[float, Report]] = {}

    def heard(self, got: Report, now: float) -> None:
        """Remember `got`, received at `now` (wall time); the stale, and then the oldest, are forgotten first."""
        if got.instance == self.instance:
            return
        self._heard[got.instance] = (now, got)
        if len(self._heard) > MAX_PEERS:
            self._forget_stale(now)
        while len(self._heard) > MAX_PEERS:
            del self._heard[min(self._heard, key=lambda name: self._heard[name][0])]

    def fresh(self, now: float) -> list[Report]:
        """Reports heard within `FRESH_FOR_INTERVALS` intervals."""
        horizon = now - FRESH_FOR_INTERVALS * self.rules.interval_s
        return [r for at, r in self._heard.values() if at >= horizon]

    def down_long(self, held: Iterable[Held], now: float) -> list[Held]:
        """The connections down here for `DOWN_FOR_INTERVALS` intervals or more."""
        since = now - DOWN_FOR_INTERVALS * self.rules.interval_s
        return [h for h in held if h.connection.down and (h.connection.down_since or now) <= since]

    def elsewhere(self, held: Iterable[Held], now: float) -> Elsewhere | None:
        """A connection down here for long enough that another gateway holds up, if there is one; None otherwise,
        including when every gateway has it down."""
        reports = self.fresh(now)
        for h in self.down_long(held, now):
            k = key(h.resource)
            for r in reports:
                if k in r.up:
                    return Elsewhere(h.resource, r.instance)
        return None

    def _forget_stale(self, now: float) -> None:
        horizon = now - FRESH_FOR_INTERVALS * self.rules.interval_s
        for name in [n for n, (at, _) in self._heard.items() if at < horizon]:
            del self._heard[name]
