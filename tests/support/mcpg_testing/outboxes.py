"""What a test reads off a subscriber's outbox when the subscriber has no writer (built outside MCP)."""

from __future__ import annotations

from mcpg_gateway.fanout.subscribers import Outbox


async def next_fire(outbox: Outbox) -> tuple[str, str]:
    """The oldest pending (URI, strategy), waiting for one (bound the wait at the call)."""
    while (pending := outbox.pop()) is None:
        await outbox._wait()
    return pending.uri, pending.strategy
