"""Liveness: how a connection that stopped without closing is noticed, within a bound, and counted.

A connection that closes says so at once. One that stops without closing (a network partition, a NAT or load
balancer that forgot it after an idle timeout, a server frozen by SIGSTOP) says nothing: a LISTEN on it hears
no NOTIFY again, which looks exactly like a quiet channel. So each long-lived connection has a rule:

| connection                | rule                                                     | noticed within (defaults) |
|---------------------------|----------------------------------------------------------|---------------------------|
| postgres_listen_notify    | `SELECT 1` every `interval_s`, answered in `timeout_s`   | interval + timeout: 15 s  |
| sql_polling               | the tracking query itself, answered in its `timeout_ms`  | its interval + timeout_ms |
| nats_topic, the bus       | a NATS PING every `interval_s`; one unanswered at the next | 2 x interval: 20 s      |

A dead connection is then handled exactly as a closed one: closed, reopened with back-off, and (for the event
strategies) fired once when back, since changes may have been missed.

TCP keepalive is not the rule, because it cannot see two of the three cases: a frozen server's kernel still
answers keepalive probes, and so does a proxy in between whose far side has gone. Only a round trip through the
server process itself proves the connection works.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpg_gateway.contract import config

Cause = Literal["closed", "unresponsive"]
"""Why a connection was lost: it closed (the server or the network said so), or it stopped answering."""

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Rules:
    """The liveness settings (`gateway.liveness`), and what they mean to each kind of connection."""

    interval_s: float = 10.0
    timeout_s: float = 5.0
    sleep: Sleep = asyncio.sleep
    """The wait between round trips. Real time, as nats-py's own PING timer is: a test shortens the interval
    rather than driving a clock, so the bound it proves is the one users get."""

    @classmethod
    def from_config(cls, cfg: config.LivenessConfig) -> Rules:
        return cls(cfg.interval_s, cfg.timeout_s)

    def nats_options(self) -> dict[str, Any]:
        """nats-py's `connect` keywords for this rule (its defaults, 120 s and two outstanding, take up to 6 min)."""
        return {"ping_interval": self.interval_s, "max_outstanding_pings": 1}


@dataclass(slots=True)
class Connection:
    """One watch's connection to its event source, as the admin API and the metrics show it."""

    on_loss: Callable[[Cause], None] = field(default=lambda cause: None)
    """Counts a loss (the `mcpg_watch_source_losses_total` metric)."""
    source: str = ""
    """Where the connection goes, credential-free (`postgresql://app:***@db:5432/app`): the same text for every
    watch, and every gateway, that uses the same server."""
    held: bool = False
    """Whether the watch holds a long-lived connection at all (poll and webhook watches do not)."""
    up: bool = False
    last_round_trip: float | None = None
    """Wall time of the last exchange that proved the connection works (connecting counts)."""
    down_since: float | None = None
    losses: int = 0

    def round_trip(self) -> None:
        """An exchange with the server succeeded: the connection is up."""
        self.held, self.up = True, True
        self.last_round_trip, self.down_since = time.time(), None

    def lost(self, cause: Cause) -> None:
        """The connection closed or stopped answering. Counted once per outage: reconnect attempts that fail
        meanwhile are failed reads, not further losses."""
        self.held = True
        if self.up or self.down_since is None:
            self.losses += 1
            self.on_loss(cause)
            self.down_since = time.time()
        self.up = False

    @property
    def down(self) -> bool:
        return self.held and not self.up
