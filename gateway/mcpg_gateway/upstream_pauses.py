"""Upstream rate limits: after a `429`, every read of that upstream with the same credentials waits.

An upstream limits a client by its credentials, not by the resource read: when one watch is told `429`, the other
watches reading the same upstream with the same headers would be told the same, and hammering it would only
lengthen the limit. So a pause belongs to a key, (the upstream's origin, a digest of the request's headers), and
every read under that key is held back while it lasts, without a request.

The pause is 30 s for the first `429`, doubling for each `429` in a row (30, 60, 120, 240, then every 300 s), or the
upstream's `Retry-After` when that is longer, but never more than an hour: an upstream that lies (or is broken) must
not silence a watch forever. A successful read ends the streak. An answer that arrives while the key is already
paused was sent before the pause began and says nothing new: a `429` then does not double the pause (its
Retry-After may still lengthen it), and a success does not end the streak.

The digest is keyed with a per-process random secret and never leaves this module's keys: the admin API shows an
upstream as host:port, never its credentials nor anything derived from them. A backend URL with a `{variable}` in
its host names as many origins as callers choose values, so the table keeps at most `MAX_KEYS` of them (the one
whose pause ends first makes room), and metrics name an upstream as configured (`origin_of` the unrendered URL),
never as a caller rendered it. Pure: time is what `now` says.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from urllib.parse import urlsplit

FIRST_PAUSE_S = 30.0
LONGEST_SCHEDULED_S = 300.0
RETRY_AFTER_CAP_S = 3600.0
"""The longest pause any Retry-After gets: beyond it the upstream is not believed."""
FORGET_AFTER_S = 3600.0
"""How long after its pause ended, with no 429 since, an upstream stays listed (recently limited)."""
MAX_KEYS = 1024
"""Keys remembered at once: a 429 under a new key past this forgets the key whose pause ends first."""
DEFAULT_PORTS = {"http": 80, "https": 443}

_DIGEST_KEY = os.urandom(32)
_MAX_DELTA_DIGITS = 12
"""Longer delta-seconds are capped, not converted (and `int()` refuses over 4,300 digits)."""


@dataclass(frozen=True, slots=True)
class Key:
    """Which pause a read is under: the upstream's origin (scheme://host:port) and its credentials' digest."""

    origin: str
    credentials: str = field(repr=False)

    @property
    def upstream(self) -> str:
        """host:port as requested, what the admin API shows (metrics show the configured one: `origin_of`)."""
        return host_port(self.origin)


def key_for(url: str, headers: Mapping[str, str]) -> Key:
    """The key of a request to `url` (rendered) with `headers`; the URL's userinfo counts as credentials too."""
    parts = urlsplit(url)
    digest = hashlib.blake2b(key=_DIGEST_KEY, digest_size=16)
    for name, value in sorted((k.lower(), v) for k, v in headers.items()):
        _feed(digest, name)
        _feed(digest, value)
    _feed(digest, parts.username or "")
    _feed(digest, parts.password or "")
    return Key(origin_of(url), digest.hexdigest())


def origin_of(url: str) -> str:
    """`scheme://host:port` of `url`, never its userinfo. Of a backend's url as configured, a template's `{name}`
    in the host (or port) stays as written: one origin however many values callers give it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port: int | str | None = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:  # `{port}`, or not a port (such a request fails on its own): as written, so it is stable
        port = parts.netloc.rpartition(":")[2]
    where = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{where}:{port}"


def host_port(origin: str) -> str:
    """host:port of an `origin_of` result: what metrics and the admin API may show."""
    return origin.split("://", 1)[1]


def _feed(digest: hashlib.blake2b, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    digest.update(len(data).to_bytes(8, "big"))  # length-prefixed: ("ab", "c") and ("a", "bc") differ
    digest.update(data)


def parse_retry_after(value: str | None, wall_now: float) -> float | None:
    """A Retry-After header in seconds from `wall_now` (epoch seconds): delta-seconds or an HTTP-date.

    Anything else (garbage, a negative number, a fraction) is None: the schedule alone decides. A date in the
    past is 0. Never more than `RETRY_AFTER_CAP_S`, never negative, never raises.
    """
    text = (value or "").strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        digits = text.lstrip("0")
        if len(digits) > _MAX_DELTA_DIGITS:
            return RETRY_AFTER_CAP_S
        return min(float(int(digits or "0")), RETRY_AFTER_CAP_S)
    return _http_date_in(text, wall_now)


def _http_date_in(text: str, wall_now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:  # "-0000": UTC by RFC 5322
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - wall_now
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


def scheduled_pause_s(consecutive: int) -> float:
    """The pause after `consecutive` (1-based) 429s in a row: 30, 60, 120, 240, then 300 s."""
    if consecutive >= 5:  # 30 * 2**4 is already past the ceiling; no need to compute huge powers
        return LONGEST_SCHEDULED_S
    return min(FIRST_PAUSE_S * (1 << max(consecutive - 1, 0)), LONGEST_SCHEDULED_S)


def pause_s(consecutive: int, retry_after_s: float | None) -> float:
    """The schedule's pause, or Retry-After when it is longer (capped at an hour)."""
    scheduled = scheduled_pause_s(consecutive)
    if retry_after_s is None or retry_after_s <= scheduled:
        return scheduled
    return min(retry_after_s, RETRY_AFTER_CAP_S)


@dataclass(slots=True)
class _State:
    paused_until: float
    consecutive: int = 0
    total: int = 0
    resources: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Upstream:
    """One rate-limited key as the admin API shows it: no credentials, nothing derived from them."""

    upstream: str
    """host:port."""
    paused_for_s: float | None
    """Seconds left in the pause; None once it ended."""
    consecutive: int
    """429s in a row (the streak the schedule doubles on); 0 after a successful read."""
    total: int
    """429s since this gateway started tracking the key (it forgets it `FORGET_AFTER_S` after its pause)."""
    resources: tuple[str, ...]
    """The names of the resources read under the key since its first 429."""


class UpstreamPauses:
    """The pauses of every key that was told 429; `now` is monotonic seconds (the gateway's clock)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._states: dict[Key, _State] = {}

    def record(self, key: Key, retry_after_s: float | None, resource: str | None = None) -> float:
        """A 429 answered under `key`: pause it (or lengthen its pause); the pause's seconds from now."""
        now = self._now()
        self._forget_old(now)
        if key not in self._states:
            self._make_room()
        state = self._states.setdefault(key, _State(paused_until=now))
        state.total += 1
        if resource is not None:
            state.resources.add(resource)
        if state.paused_until > now:  # sent before the pause began: only a longer Retry-After counts
            if retry_after_s is not None:
                state.paused_until = max(state.paused_until, now + min(retry_after_s, RETRY_AFTER_CAP_S))
            return state.paused_until - now
        state.consecutive += 1
        state.paused_until = now + pause_s(state.consecutive, retry_after_s)
        return state.paused_until - now

    def succeeded(self, key: Key) -> None:
        """A successful read under `key`: the next 429 starts the schedule again at 30 s (unless it is paused)."""
        state = self._states.get(key)
        if state is not None and state.paused_until <= self._now():
            state.consecutive = 0

    def note(self, key: Key, resource: str) -> None:
        """`resource` reads under `key` (remembered only for a key that was told 429, for the admin API)."""
        state = self._states.get(key)
        if state is not None:
            state.resources.add(resource)

    def paused_for(self, key: Key) -> float | None:
        """Seconds left in `key`'s pause, or None when its reads may go."""
        state = self._states.get(key)
        if state is None:
            return None
        left = state.paused_until - self._now()
        return left if left > 0 else None

    def snapshot(self) -> list[Upstream]:
        """Every key paused now or limited recently, by host:port."""
        now = self._now()
        self._forget_old(now)
        views = [
            Upstream(
                key.upstream,
                self.paused_for(key),
                state.consecutive,
                state.total,
                tuple(sorted(state.resources)),
            )
            for key, state in self._states.items()
        ]
        return sorted(views, key=lambda v: (v.upstream, v.resources))

    def _make_room(self) -> None:
        # At the bound, the key whose pause ends first goes: forgetting it costs at most one request that is
        # answered 429 again, where an unbounded table grows with every host a caller names.
        if len(self._states) >= MAX_KEYS:
            del self._states[min(self._states, key=lambda k: self._states[k].paused_until)]

    def _forget_old(self, now: float) -> None:
        # Keys can come from templated URLs (a `{var}` in the host): the table must not grow without end.
        old = [k for k, s in self._states.items() if s.paused_until + FORGET_AFTER_S <= now]
        for key in old:
            del self._states[key]
