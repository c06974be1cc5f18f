"""Why a watch ended, said to the client: the closed vocabulary and the `_meta` keys that carry it.

A subscriptions/listen the gateway ends is answered with `_meta[WATCH_END_META_KEY] = {"reason", "detail"}`, plus
`uris` (the URIs the gateway ended for that reason) and `status` on `resource_gone` when the failing read had one.
`detail` is a sentence of advice, so a client that does not know the reason word can still act. The last three
come from a new configuration applied in place (`reconfigure.py`). The list is closed and published in the server
card (`card.py`); a client should treat a word it does not know as "an ending this client does not know", never as
any particular one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

WATCH_META_KEY = "dev.mcpg/watch"
"""In every notifications/resources/updated `_meta`: the state of the watch that sent it (`lease.py`)."""
WATCH_END_META_KEY = "dev.mcpg/watch-end"
"""In a subscriptions/listen result's `_meta`: why the gateway ended it."""
SUBSCRIBABLE_META_KEY = "dev.mcpg/subscribable"
"""On a listed resource or template: true when it has a watch, so a client can filter without this README."""

Reason = Literal[
    "resource_gone",
    "lifetime_reached",
    "watcher_evicted",
    "shutdown",
    "resource_removed",
    "access_revoked",
    "principal_removed",
]

ADVICE: dict[Reason, str] = {
    "resource_gone": (
        "the upstream answered this resource with 401, 403 or 404, so the gateway can no longer read it; check "
        "access, and subscribe again only if it comes back"
    ),
    "lifetime_reached": "the watch reached its maximum lifetime; subscribe again (expected on a long-lived client)",
    "watcher_evicted": (
        "a slowed watch of yours was stopped to make room for a new one at your watch limit; subscribe again, "
        "and keep the session busy"
    ),
    "shutdown": "the gateway is stopping; reconnect and listen again (another replica will take you)",
    "resource_removed": (
        "the gateway's configuration no longer serves this resource (or no longer watches it); list resources to "
        "see what is served now"
    ),
    "access_revoked": (
        "the gateway's configuration no longer lets you read this resource, so you are no longer told of it; "
        "listen again for the rest"
    ),
    "principal_removed": "the gateway's configuration no longer knows your credential: every subscription of it ended",
}
REASONS: tuple[Reason, ...] = tuple(ADVICE)


@dataclass(frozen=True, slots=True)
class Ending:
    reason: Reason
    status: int | None = None
    """The upstream's HTTP status, on `resource_gone` only, relayed and not interpreted."""
    uris: tuple[str, ...] = ()
    """The URIs the gateway ended for this reason (none for a `shutdown`, which ends everything)."""

    def of(self, uri: str) -> Ending:
        """This ending, of `uri` as well."""
        return dataclasses.replace(self, uris=(*self.uris, uri))

    def meta(self) -> dict[str, Any]:
        end: dict[str, Any] = {"reason": self.reason, "detail": ADVICE[self.reason]}
        if self.uris:
            end["uris"] = list(self.uris)
        if self.status is not None:
            end["status"] = self.status
        return {WATCH_END_META_KEY: end}
