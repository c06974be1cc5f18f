"""A subscription's lease: an unrenewed watch slows down rather than silently dying (`gateway.subscriptions`).

After `idle_after_s` with no request on the subscribing session, a pull watch of that subscriber polls at
`slow_interval_ms`; any request the gateway serves on the session restores full speed (a ping, `initialize` and
notifications do not count: a ping proves a socket is open, not that anyone is waiting). An open
subscriptions/listen renews its own watches for as long as it stays open, so the lease governs the handshake-era
`resources/subscribe`. A watcher shared by several subscribers polls at the fastest cadence any of them is
entitled to. Every subscription also ends `lifetime_s` after it began, renewals included (`watchers.py`).

MCP has no lease, so every notification carries its watch's state under `_meta["dev.mcpg/watch"]`; a subscriber
has no other way to learn that its watch slowed. Everything here is pure: times are the injected clock's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mcpg_gateway.contract import config
from mcpg_gateway.fanout import frames
from mcpg_gateway.fanout.endings import WATCH_META_KEY
from mcpg_gateway.fanout.subscribers import Subscriber


@dataclass(frozen=True, slots=True)
class Terms:
    idle_after_s: float
    slow_interval_s: float
    lifetime_s: float
    slows: bool = True
    """False on a bus: the owner of a pull watch reads for every gateway and cannot see their sessions' leases."""

    @classmethod
    def from_config(cls, cfg: config.SubscriptionsConfig) -> Terms:
        return cls(cfg.idle_after_s, cfg.slow_interval_ms / 1000, cfg.lifetime_s)

    def slowed_since(self, sub: Subscriber) -> float | None:
        """When `sub`'s lease ran out, or None while it holds (a listen stream always does)."""
        if sub.kind == "listen" or not self.slows:
            return None
        return sub.last_activity + self.idle_after_s

    def is_slow(self, sub: Subscriber, now: float) -> bool:
        since = self.slowed_since(sub)
        return since is not None and now >= since

    def interval_s(self, base_s: float, slow: bool) -> float:
        """A pull watch's cadence for one subscriber: never faster than its own interval when slowed."""
        return max(base_s, self.slow_interval_s) if slow else base_s

    def cadence_s(self, base_s: float, subs: Iterable[Subscriber], now: float) -> float:
        """A shared watcher's cadence: the fastest any of its subscribers is entitled to."""
        return min((self.interval_s(base_s, self.is_slow(s, now)) for s in subs), default=base_s)

    def watch_meta(self, sub: Subscriber, now: float, poll_interval_s: float | None) -> dict[str, Any]:
        """`_meta["dev.mcpg/watch"]` for a notification to `sub`. `poll_interval_s` is None for a push watch."""
        slow, renew_by = self._lease(sub, now, time.time())
        return {WATCH_META_KEY: self._state(slow, renew_by, poll_interval_s)}

    def _lease(self, sub: Subscriber, now: float, wall: float) -> tuple[bool, int]:
        """Whether `sub` is slowed, and when it must renew to stay (or become again) active, in whole wall seconds."""
        since = self.slowed_since(sub)
        renew_by = since if since is not None else now + self.idle_after_s
        return since is not None and now >= since, int(wall + renew_by - now)  # the schedule's clock is monotonic

    def _state(self, slow: bool, renew_by: int, poll_interval_s: float | None) -> dict[str, Any]:
        state: dict[str, Any] = {"state": "slow" if slow else "active", "renewBy": _iso(renew_by)}
        if poll_interval_s is not None:
            state["pollIntervalMs"] = round(self.interval_s(poll_interval_s, slow) * 1000)
        state["renewedByActivity"] = True
        return state


class WatchMembers:
    """One fire's `_meta["dev.mcpg/watch"]` members as JSON bytes (`frames.py`), each encoded once: subscribers
    whose leases read alike (every listen stream; sessions last active in the same second) share the bytes."""

    __slots__ = ("_encoded", "_now", "_poll_interval_s", "_terms", "_wall")

    def __init__(self, terms: Terms, now: float, poll_interval_s: float | None) -> None:
        self._terms, self._now, self._wall, self._poll_interval_s = terms, now, time.time(), poll_interval_s
        self._encoded: dict[tuple[bool, int], bytes] = {}

    def __call__(self, sub: Subscriber) -> bytes:
        lease = self._terms._lease(sub, self._now, self._wall)
        encoded = self._encoded.get(lease)
        if encoded is None:
            state = self._terms._state(*lease, self._poll_interval_s)
            encoded = self._encoded[lease] = frames.member(WATCH_META_KEY, state)
        return encoded


def _iso(wall_s: int) -> str:
    """A wall-clock instant as RFC 3339 UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_s))
