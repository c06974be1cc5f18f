"""How long to wait before the next attempt after `attempt` failures in a row: 1, 2, 5, 10, then every 30 s.

One table for everything in the gateway that retries (a crashed watch restarting, an event source
reconnecting), so an operator learns one rhythm.
"""

from __future__ import annotations

DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0)


def delay_s(attempt: int) -> float:
    """The delay after `attempt` (0-based) consecutive failures."""
    return DELAYS_S[min(attempt, len(DELAYS_S) - 1)]
