"""How long to wait before the next attempt after `attempt` failures in a row: 1, 2, 5, 10, then every 30 s.

One table for everything in the gateway that retries (a crashed watch restarting, an event source
reconnecting), so an operator learns one rhythm. A client waiting for a gateway that is starting (`mcpg-subscribe`)
waits less and at random instead (`jittered_s`): the gateway is seconds away, and clients started together
would otherwise knock together.
"""

from __future__ import annotations

from collections.abc import Callable

DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0)
JITTER_FIRST_S = 0.1
JITTER_CAP_S = 2.0


def delay_s(attempt: int) -> float:
    """The delay after `attempt` (0-based) consecutive failures."""
    return DELAYS_S[min(attempt, len(DELAYS_S) - 1)]


def jittered_s(attempt: int, rand: Callable[[], float]) -> float:
    """Exponential back-off with full jitter: a draw of `rand` (uniform in [0, 1)) times 0.1 s doubled `attempt`
    times, at most 2 s; so a refused connect is tried again within 2 s of the gateway listening."""
    return rand() * min(JITTER_CAP_S, JITTER_FIRST_S * 2.0 ** min(attempt, 16))
