"""A connection's own scratch and exit stack: where a handshake-era session keeps its subscriber, and how the
gateway learns that the session ended.

The SDK keeps both on the per-connection `Connection` a handler's `ServerSession` wraps, and offers no public way
to it (`ServerSession._connection`, pinned mcp): `state` lives as long as the connection, and `exit_stack` is
unwound when the session ends (DELETE, idle timeout, a crash or the manager's shutdown), which is the gateway's
implicit unsubscribe. This is the one place that reaches it; `test_sdk_contract.py` checks both through the real SDK.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any, Protocol

from mcp.server.context import ServerRequestContext


class Scratch(Protocol):
    """What a handler may keep on its connection, and what to run when it ends."""

    @property
    def state(self) -> dict[str, Any]:
        """Per-connection storage: the same dict for every request of one session (or one stdio connection)."""
        ...

    @property
    def exit_stack(self) -> AsyncExitStack:
        """Unwound, shielded and in bound, when the session ends."""
        ...


def of(ctx: ServerRequestContext[Any, Any]) -> Scratch:
    """The scratch of the connection the request `ctx` arrived on."""
    connection: Scratch = ctx.session._connection
    return connection
