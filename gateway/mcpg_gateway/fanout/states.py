"""Each URI's state token: what a subscriber who comes back hands over, so it is told of what it missed, and only that.

The 2026-07-28 protocol has no resumability: a listen stream that drops loses what happened while it was down. So
every notification of a URI carries that URI's state under `_meta["dev.mcpg/state"]`, an opaque token, and a
subscriber that listens again (or subscribes again) may hand back the last token it saw per URI
(`_meta["dev.mcpg/states"]` on subscriptions/listen, `_meta["dev.mcpg/state"]` on resources/subscribe): the gateway
tells it at once about each URI whose token differs from the one it would send now, and about no other.

A token is one of two kinds:
- `c:` and a digest of the content, for a pull watch this process reads itself (no bus): two processes, or one
  before and after a restart, give the same token for the same content, so a client that missed nothing is told
  nothing, wherever it reconnects.
- `f:` and a fire's id (this process's random epoch and a counter), for every other watch. Every fire of a URI this
  process serves is recorded here, watched or not (a webhook delivered while nobody listened moves it too), and a
  watch that starts anew (an event source connected again: what happened meanwhile is unknown) moves it as well.
  A token this process did not give, or one it has forgotten (at most `REMEMBERED` URIs are kept), is a state
  that moved: being told once too often costs a read, never missing a change.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
from collections import OrderedDict
from collections.abc import Collection

STATE_META_KEY = "dev.mcpg/state"
"""In every notifications/resources/updated `_meta`: the state of the URI told of."""
STATES_META_KEY = "dev.mcpg/states"
"""In a subscriptions/listen request's `_meta`: URI -> the last state token the client saw."""
TOKEN_MAX = 64
"""The longest token a client may hand back (the gateway's own are shorter)."""
REMEMBERED = 10_000
"""URIs whose last fire is remembered; the least recently fired is forgotten first."""


def seen(value: object, named: Collection[str]) -> dict[str, str]:
    """A listen's `_meta["dev.mcpg/states"]` (None: absent), as URI -> token; `ValueError` saying what is wrong.
    Each URI must be one the listen names, and each token a string of at most `TOKEN_MAX` characters."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"must be an object of URI to state token, got {type(value).__name__}")
    out: dict[str, str] = {}
    for uri, token in value.items():
        if uri not in named:
            raise ValueError(f"names {uri!r}, which the listen does not subscribe to")
        out[uri] = one_token(token)
    return out


def one_token(token: object) -> str:
    """A state token handed back (`_meta["dev.mcpg/state"]` of resources/subscribe, or one of a listen's)."""
    if not isinstance(token, str) or not 0 < len(token) <= TOKEN_MAX:
        raise ValueError(f"a state token is a string of 1 to {TOKEN_MAX} characters, as the gateway gave it")
    return token


def content_token(snapshot: str) -> str:
    """The token of a pull watch's last state (`PullStrategy.snapshot`): the same content, the same token."""
    return "c:" + hashlib.sha256(snapshot.encode()).hexdigest()[:24]


class States:
    """The fire-id tokens of the URIs this process has fired or started watching anew."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._epoch = secrets.token_hex(6)
        self._ids = itertools.count(1)
        self._last: OrderedDict[str, str] = OrderedDict()
        self._remembered = remembered

    def moved(self, uri: str) -> str:
        """`uri` fired (or its watch started anew): its new token."""
        token = f"f:{self._epoch}.{next(self._ids)}"
        self._last[uri] = token
        self._last.move_to_end(uri)
        while len(self._last) > self._remembered:
            self._last.popitem(last=False)
        return token

    def now(self, uri: str) -> str:
        """`uri`'s token now (one is made if it has none: a state nobody was told of yet)."""
        token = self._last.get(uri)
        return token if token is not None else self.moved(uri)
