"""A session's own scratch and exit stack: where a handshake-era session keeps its subscriber, and how the
gateway learns that the session ended.

Over HTTP the session is the gateway's (`handshake_sessions.py`), put in the request's scope by the door
(`sdk/door.py`): `state` lives as long as the session, and `exit_stack` is unwound when it ends (DELETE, idle
timeout, a configuration removing its principal, shutdown), which is the gateway's implicit unsubscribe. Over
stdio the connection is the SDK's: it keeps both on the per-connection `Connection` a handler's `ServerSession`
wraps, and offers no public way to it (`ServerSession._connection`, pinned mcp); `test_sdk_contract.py` checks
that one through the real SDK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from mcp.server.context import ServerRequestContext

from mcpg_gateway.sdk import door


class Unwound(Protocol):
    """What runs when the session or connection ends: an `AsyncExitStack` (stdio's, the SDK's) or the session's
    own `ExitCallbacks` (HTTP, `handshake_sessions.py`)."""

    def callback(self, callback: Callable[..., Any], /, *args: Any) -> object: ...

    def push_async_callback(self, callback: Callable[..., Awaitable[Any]], /, *args: Any) -> object: ...


class Scratch(Protocol):
    """What a handler may keep on its connection, and what to run when it ends."""

    @property
    def state(self) -> dict[str, Any]:
        """Per-connection storage: the same dict for every request of one session (or one stdio connection)."""
        ...

    @property
    def exit_stack(self) -> Unwound:
        """Unwound, shielded and in bound, when the session ends."""
        ...


def of(ctx: ServerRequestContext[Any, Any]) -> Scratch:
    """The scratch of the session (HTTP) or connection (stdio) the request `ctx` arrived on."""
    scope = getattr(ctx.request, "scope", None)
    session = scope.get(door.SCOPE_KEY) if isinstance(scope, dict) else None
    if session is not None:
        scratch: Scratch = session
        return scratch
    connection: Scratch = ctx.session._connection
    return connection
