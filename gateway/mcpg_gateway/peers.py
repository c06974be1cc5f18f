"""What the other gateways on the bus say about their event sources: how /readyz weighs a dead source.

A source no gateway can reach (the database is down for everyone) is no reason to stop taking sessions: every
replica would stop at once, and the webhooks and every other resource would go down with them, for nothing
another replica could do better. A source this gateway cannot reach while another can (a route lost from one
node, a NAT in front of one pod) is: a subscriber sent here gets a watch that hears nothing until the connection
is back; sent there, one that works. So, on a bus, each gateway says every liveness interval which watched
resources it holds a connection for, whether each is up, and whether it is ready, on `<prefix>.sources`.

Any client of the namespace's bus account can publish there too, so a report is a claim, never proof. A gateway's
word that a resource is up counts only once it has been heard without a gap for `TRUST_INTERVALS` intervals,
holding that resource up in every report and saying it is ready (one message from a gateway that does not
exist counts for nothing). And among this gateway and the gateways heard for `KNOWN_INTERVALS` that have lost
the same source, the one whose name sorts first stays ready, and defers for nothing: so a shared outage leaves
one replica in its Service whatever the bus says. What remains: a client that keeps up two made-up gateways
for that long (one holding the source up, one sorting first that lost it), or speaks under a real gateway's
name, can still take replicas out, and so can one made-up gateway where only one replica is left; the bus
account is the trust boundary.

Resources are named by a hash of their name (the same configuration runs on every replica), so the reports
carry no address. A report is a small JSON object; anything else on the subject is ignored, a report naming
more resources than the configuration has is ignored, and at most `MAX_PEERS` gateways are remembered, so a
client of the namespace's account cannot grow this past a few megabytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from mcpg_gateway import liveness

SUBJECT = "sources"
"""After the bus's subject prefix."""
DOWN_FOR_INTERVALS = 2
"""How long (in liveness intervals) a connection is down here before another gateway is preferred: a reconnect
after a blip should not take a pod out of its Service."""
FRESH_FOR_INTERVALS = 3
"""A report older than this many intervals is from a gateway that is gone or cut off: it vouches for nothing.
Two reports further apart than this break a gateway's run: its trust starts again."""
TRUST_INTERVALS = 3
"""How long (in liveness intervals) a gateway must have been heard without a gap, and have held a resource up in
every report, before its word that the resource is up counts (it reports every interval: four reports)."""
KNOWN_INTERVALS = 1
"""How long (in liveness intervals) a gateway must have been heard without a gap before it counts among those
sharing an outage. Shorter than the trust time on purpose: a gateway that has just started then knows the others
that lost the source (each reports every interval) before it believes any gateway that holds it up, and never
finds itself alone, and deferring, for the interval between."""
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
    ready: bool | None = None
    """Whether that gateway is ready apart from the peers' word (not shutting down, its bus reachable). None from a
    gateway too old to say: its word vouches for nothing."""

    def encode(self) -> bytes:
        body: dict[str, Any] = {"instance": self.instance, "up": sorted(self.up), "down": sorted(self.down)}
        if self.ready is not None:
            body["ready"] = self.ready
        return json.dumps(body).encode()


def report(instance: str, held: Iterable[Held], ready: bool) -> Report:
    """This gateway's report: a resource is up if any of its watches' connections is. `ready` must not weigh the
    peers' word (a gateway deferring to another would stop vouching, then stop deferring, and so on)."""
    up: set[str] = set()
    down: set[str] = set()
    for h in held:
        if h.connection.held:
            (up if h.connection.up else down).add(key(h.resource))
    return Report(instance, frozenset(up), frozenset(down - up), ready)


def decode(data: bytes) -> Report | None:
    """A report, or None for anything that is not one (never raises)."""
    if len(data) > MAX_REPORT_BYTES:
        return None
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    if not isinstance(raw, dict):
        return None
    instance, up, down, ready = raw.get("instance"), raw.get("up"), raw.get("down"), raw.get("ready")
    if _instance(instance) and _keys(up) and _keys(down) and (ready is None or isinstance(ready, bool)):
        return Report(instance, frozenset(up), frozenset(down), ready)
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


@dataclass(slots=True)
class Run:
    """One gateway's unbroken run of reports as heard here: no two consecutive ones further apart than
    `FRESH_FOR_INTERVALS` intervals."""

    last: Report
    at: float
    """When the last report came (wall time)."""
    since: float
    """When the first report of the run came."""
    up_since: dict[str, float] = field(default_factory=dict)
    """For each key in `last.up`: since when it has been up in every report of the run."""

    def follow(self, got: Report, now: float, gap_s: float) -> None:
        if now - self.at > gap_s:  # silent too long: gone, cut off, or not a gateway at all
            self.since, self.up_since = now, {}
        self.up_since = {k: self.up_since.get(k, now) for k in got.up}
        self.last, self.at = got, now


@dataclass(frozen=True, slots=True)
class Heard:
    """A gateway heard from lately, as the admin API shows it."""

    report: Report
    trusted: bool
    """Heard without a gap for `TRUST_INTERVALS` intervals: its word that it holds a resource up may count."""


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """A resource whose event source this gateway cannot reach and `gateway` can. Shown on the admin API only:
    /readyz answers anyone, and a resource's name is not for anyone."""

    resource: str
    gateway: str


@dataclass(frozen=True, slots=True)
class Anchored:
    """A resource this gateway has lost, that a trusted `gateway` holds up, and that it stays ready for anyway:
    the gateways in `sharing` (known for `KNOWN_INTERVALS`, ready) have lost it too and sort after it, so they
    defer and it stays. One of those that lost it must stay: the gateway holding it up may not exist."""

    resource: str
    gateway: str
    sharing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the peers' word does to /readyz: defer to `elsewhere`, or nothing (an anchor defers for nothing)."""

    elsewhere: Elsewhere | None = None
    anchored: tuple[Anchored, ...] = ()


class Peers:
    """The run of reports of each other gateway, and the readiness decision they inform."""

    def __init__(self, instance: str, rules: liveness.Rules, max_keys: int | None = None) -> None:
        """`max_keys`: the most resources a report may name, the configuration's count (every replica runs the same
        configuration, so a gateway's report never names more); None: no bound beyond `MAX_REPORT_BYTES`."""
        self.instance = instance
        self.rules = rules
        self.max_keys = max_keys
        self._heard: dict[str, Run] = {}

    @property
    def _fresh_s(self) -> float:
        return FRESH_FOR_INTERVALS * self.rules.interval_s

    @property
    def _trust_s(self) -> float:
        return TRUST_INTERVALS * self.rules.interval_s

    def heard(self, got: Report, now: float) -> None:
        """Remember `got`, received at `now` (wall time); the stale, and then the newest runs, are forgotten first."""
        if got.instance == self.instance:
            return
        if self.max_keys is not None and len(got.up) + len(got.down) > self.max_keys:
            return  # no gateway of this configuration says that much: a client's flood is kept to a bounded size
        run = self._heard.get(got.instance)
        if run is None:
            self._heard[got.instance] = Run(got, now, now, dict.fromkeys(got.up, now))
        else:
            run.follow(got, now, self._fresh_s)
        if len(self._heard) > MAX_PEERS:
            self._forget_stale(now)
        # A flood of made-up names evicts itself, not a gateway heard for long: the runs that began last go first.
        while len(self._heard) > MAX_PEERS:
            del self._heard[max(self._heard, key=lambda name: (self._heard[name].since, name))]

    def fresh(self, now: float) -> list[Heard]:
        """The gateways heard within `FRESH_FOR_INTERVALS` intervals, by name, and whether each is trusted."""
        return [Heard(run.last, self._trusted(run, now)) for _, run in self._live(now)]

    def down_long(self, held: Iterable[Held], now: float) -> list[Held]:
        """The connections down here for `DOWN_FOR_INTERVALS` intervals or more."""
        since = now - DOWN_FOR_INTERVALS * self.rules.interval_s
        return [h for h in held if h.connection.down and (h.connection.down_since or now) <= since]

    def decide(self, held: Iterable[Held], now: float) -> Decision:
        """Whether to defer to another gateway for a connection down here long enough that a trusted, ready gateway
        holds up; never while this gateway is the anchor for any resource (the others count on it staying)."""
        deferrals: list[Elsewhere] = []
        anchored: dict[str, Anchored] = {}
        for h in self.down_long(held, now):
            k = key(h.resource)
            voucher = self._voucher(k, now)
            if voucher is None:
                continue
            sharing = self._sharing(k, now)
            if sharing and self.instance < sharing[0]:
                anchored[h.resource] = Anchored(h.resource, voucher, sharing)
            else:
                deferrals.append(Elsewhere(h.resource, voucher))
        if anchored or not deferrals:
            return Decision(None, tuple(anchored.values()))
        return Decision(deferrals[0])

    def elsewhere(self, held: Iterable[Held], now: float) -> Elsewhere | None:
        """The gateway to defer to, if any: see `decide`."""
        return self.decide(held, now).elsewhere

    def _voucher(self, k: str, now: float) -> str | None:
        """The first trusted gateway, by name, that says it is ready and has held `k` up for the trust time."""
        for name, run in self._heard_for(self._trust_s, now):
            since = run.up_since.get(k)
            if run.last.ready is True and since is not None and now - since >= self._trust_s:
                return name
        return None

    def _sharing(self, k: str, now: float) -> tuple[str, ...]:
        # Only those that will stay if they sort first: ready apart from the peers' word (so one deferring says
        # it too: were deferral counted, each of two sharing an outage would see itself alone, and both would
        # defer), not shutting down, and new enough to follow this rule (an older gateway omits `ready`).
        known = self._heard_for(KNOWN_INTERVALS * self.rules.interval_s, now)
        return tuple(name for name, run in known if k in run.last.down and run.last.ready is True)

    def _heard_for(self, seconds: float, now: float) -> list[tuple[str, Run]]:
        return [(name, run) for name, run in self._live(now) if now - run.since >= seconds]

    def _trusted(self, run: Run, now: float) -> bool:
        return now - run.at <= self._fresh_s and now - run.since >= self._trust_s

    def _live(self, now: float) -> list[tuple[str, Run]]:
        """The runs heard within `FRESH_FOR_INTERVALS` intervals, by name (every gateway then picks alike)."""
        horizon = now - self._fresh_s
        return sorted(((n, run) for n, run in self._heard.items() if run.at >= horizon), key=lambda item: item[0])

    def _forget_stale(self, now: float) -> None:
        horizon = now - self._fresh_s
        for name in [n for n, run in self._heard.items() if run.at < horizon]:
            del self._heard[name]
