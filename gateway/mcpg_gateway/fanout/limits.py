"""How much one principal, and everyone together, may hold: watches and listen streams (`gateway.limits`).

A watch a principal holds is a distinct URI it is subscribed to, across its sessions and listen streams, so a
second session of the same principal on the same URI costs nothing more. Admission is decided synchronously,
before any upstream read and before anything is evicted, and the registry records the holding in the same step,
so two concurrent requests cannot both take the last slot:

- a request naming more URIs than a principal may hold at all is refused whole (-42900), by its count, before
  any URI is looked at (`check_named`; a listen checks it first of all);
- the server-wide ceiling is checked first and only refuses (-50300, "server-wide", one WARN line), so a refusal
  never costs a subscription already held;
- at the principal's own limit, its watch slowed the longest makes room (`watcher_evicted`); with none slowed,
  the request is refused (-42900) with the principal's count and limit.

Sessions per principal are counted where sessions are made (`sessions.py`), connections in `connections.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mcpg_gateway import errors
from mcpg_gateway.contract import config

logger = logging.getLogger(__name__)


class Refusal(Exception):
    """A request the limits refuse; `code` is the JSON-RPC code the client gets, `message` says which limit."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Admission:
    """What admitting a request takes: the URIs new to the principal, and its watches to evict for them."""

    fresh: tuple[str, ...]
    evict: tuple[str, ...]


SlowedSince = Callable[[str], float | None]
"""For one of the principal's URIs: since when its watch has been slowed (every subscriber idle), or None."""


class Watches:
    """Which URIs each principal holds, with how many of its subscriptions hold each (sessions, streams)."""

    def __init__(self, limits: config.LimitsConfig) -> None:
        self._limits = limits
        self._held: dict[str, dict[str, int]] = {}
        self.total = 0
        """(principal, URI) pairs held: the number the server-wide ceiling bounds."""

    def use(self, limits: config.LimitsConfig) -> None:
        """A new configuration's limits, for every admission from now on (what is held stays held)."""
        self._limits = limits

    def held(self, principal_id: str) -> dict[str, int]:
        return self._held.get(principal_id, {})

    def add(self, principal_id: str, uri: str) -> None:
        mine = self._held.setdefault(principal_id, {})
        if uri not in mine:
            self.total += 1
        mine[uri] = mine.get(uri, 0) + 1

    def remove(self, principal_id: str, uri: str) -> None:
        mine = self._held.get(principal_id)
        if mine is None or uri not in mine:
            return
        mine[uri] -= 1
        if mine[uri] <= 0:
            del mine[uri]
            self.total -= 1
            if not mine:
                del self._held[principal_id]

    def admit(self, principal_id: str, uris: Iterable[str], slowed_since: SlowedSince) -> Admission:
        """Decide a request for `uris` (already deduplicated) by `principal_id`, or raise `Refusal`."""
        wanted = list(uris)
        mine = self.held(principal_id)
        limit = self._limits.watches_per_principal
        check_named(principal_id, len(wanted), self._limits)
        fresh = tuple(uri for uri in wanted if uri not in mine)
        self._check_ceiling(len(fresh))
        room_needed = len(mine) + len(fresh) - limit
        if room_needed <= 0:
            return Admission(fresh, ())
        victims = _longest_slowed([uri for uri in mine if uri not in wanted], slowed_since)[:room_needed]
        if len(victims) < room_needed:
            raise Refusal(
                errors.TOO_MANY_REQUESTS,
                f"principal {principal_id!r} holds {len(mine)} watches (limit {limit}) and none is slowed to make "
                "room; unsubscribe from one and retry",
            )
        return Admission(fresh, tuple(victims))

    def _check_ceiling(self, adding: int) -> None:
        ceiling = self._limits.watches_total
        if adding and self.total + adding > ceiling:
            # A saturated deployment says so in its own log: the operator, not the caller, has to act.
            logger.warning("refused a subscription: the server-wide watch ceiling (%d) is reached", ceiling)
            raise Refusal(
                errors.UNAVAILABLE,
                f"the server-wide watch ceiling ({ceiling}) is reached; retry later",
            )


def check_named(principal_id: str, named: int, limits: config.LimitsConfig) -> None:
    """Refuse (`Refusal`) a request naming more URIs than a principal may hold at all: by its count alone, so a
    listen naming thousands is refused before any one of them is deduplicated, resolved or checked."""
    limit = limits.watches_per_principal
    if named > limit:
        raise Refusal(
            errors.TOO_MANY_REQUESTS,
            f"this request names {named} URIs, and principal {principal_id!r} may hold at most {limit} watches; "
            "name fewer",
        )


def _longest_slowed(uris: list[str], slowed_since: SlowedSince) -> list[str]:
    slowed = [(since, uri) for uri in uris if (since := slowed_since(uri)) is not None]
    return [uri for _, uri in sorted(slowed)]


class Streams:
    """Open subscriptions/listen streams, per principal and in all."""

    def __init__(self, limits: config.LimitsConfig) -> None:
        self._limits = limits
        self._open: dict[str, int] = {}
        self.total = 0

    def use(self, limits: config.LimitsConfig) -> None:
        """A new configuration's limits, for every stream opened from now on (open streams stay open)."""
        self._limits = limits

    def open(self, principal_id: str) -> None:
        """Count one more stream for `principal_id`, or raise `Refusal`."""
        mine = self._open.get(principal_id, 0)
        if mine >= self._limits.listen_streams_per_principal:
            raise Refusal(
                errors.TOO_MANY_REQUESTS,
                f"principal {principal_id!r} has {mine} listen streams open (limit "
                f"{self._limits.listen_streams_per_principal}); close one and retry",
            )
        if self.total >= self._limits.listen_streams_total:
            logger.warning("refused a listen stream: the server-wide ceiling (%d) is reached", self.total)
            raise Refusal(
                errors.UNAVAILABLE,
                f"the server-wide ceiling on listen streams ({self._limits.listen_streams_total}) is reached; "
                "retry later",
            )
        self._open[principal_id] = mine + 1
        self.total += 1

    def close(self, principal_id: str) -> None:
        mine = self._open.get(principal_id, 0)
        if mine <= 0:
            return
        self.total -= 1
        if mine == 1:
            del self._open[principal_id]
        else:
            self._open[principal_id] = mine - 1
