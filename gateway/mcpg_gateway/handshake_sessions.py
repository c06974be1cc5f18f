"""Handshake-era sessions kept by the gateway: what the SDK's stateful session manager keeps per session, without
its per-session server task, task group and memory streams (issue 36 part 1).

A session is an id, the principal that opened it, a scratch (`state` and an `exit_stack`, as a handler sees its
connection's), the requests in flight on it and when it expires. Each POST on it is served by the SDK in
stateless mode and its GET stream at the door (`sdk/door.py`); this registry answers what the SDK's manager
answered: whether a session may open (`sessions_total`), whose it is, and when it ends: a DELETE, its idle
timeout with no request in flight (an open GET stream counts as one, as in the SDK), a configuration removing its
principal, or shutdown. Ending unwinds its exit stack: the gateway's implicit unsubscribe.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Container, KeysView
from typing import Any

logger = logging.getLogger(__name__)

END_TIMEOUT_S = 5.0
"""How long one session's exit stack may take to unwind before the rest is abandoned (as the SDK bounds it)."""


class ExitCallbacks:
    """What runs when a session ends, the last pushed first: an `AsyncExitStack`'s callbacks (what a handler's
    scratch offers, `sdk/connection.py`) without its deque, which is allocated up front at 528 bytes, on every
    session (issue 36)."""

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def callback(self, callback: Callable[..., Any], /, *args: Any) -> None:
        self._callbacks.append((callback, args))

    def push_async_callback(self, callback: Callable[..., Awaitable[Any]], /, *args: Any) -> None:
        self._callbacks.append((callback, args))

    async def aclose(self) -> None:
        """Run each once, the last pushed first. One that raises does not keep the rest from running; the first
        error is raised once they all have."""
        callbacks, self._callbacks = self._callbacks, []
        error: Exception | None = None
        for callback, args in reversed(callbacks):
            try:
                result = callback(*args)
                if inspect.isawaitable(result):
                    await result
            except Exception as e:
                error = error or e
        if error is not None:
            raise error


class HandshakeSession:
    """One open session: its id, owner, scratch, and what keeps it alive."""

    __slots__ = ("exit_stack", "id", "idle_deadline", "in_flight", "owner", "state")

    def __init__(self, session_id: str, owner: str) -> None:
        self.id, self.owner = session_id, owner
        self.state: dict[str, Any] = {}
        self.exit_stack = ExitCallbacks()
        self.in_flight = 0
        """Requests being served on it now, an open GET stream included: while any is, it does not expire."""
        self.idle_deadline = math.inf


class HandshakeSessions:
    """The open sessions, by id. `now` is the clock idle deadlines are read on (the loop's, in the gateway)."""

    def __init__(self, max_sessions: int, idle_timeout_s: float, now: Callable[[], float]) -> None:
        self.max_sessions, self.idle_timeout_s, self._now = max_sessions, idle_timeout_s, now
        self._by_id: dict[str, HandshakeSession] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, owner: str) -> HandshakeSession | None:
        """A new session for `owner`, or None at `max_sessions`. Its idle countdown starts when its opening
        request (counted here as in flight) completes."""
        if len(self._by_id) >= self.max_sessions:
            return None
        session = HandshakeSession(secrets.token_hex(16), owner)
        session.in_flight = 1
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str, owner: str) -> HandshakeSession | None:
        """The open session `session_id` if `owner` opened it; None otherwise, alike for both (as the SDK answers
        another credential's session exactly as an unknown one)."""
        session = self._by_id.get(session_id)
        return session if session is not None and session.owner == owner else None

    def begin(self, session: HandshakeSession) -> None:
        """A request on `session` is being served: it does not expire meanwhile."""
        session.in_flight += 1
        session.idle_deadline = math.inf

    def done(self, session: HandshakeSession) -> None:
        """A request on `session` completed; with none left, its idle countdown starts."""
        session.in_flight -= 1
        if session.in_flight <= 0:
            session.in_flight = 0
            session.idle_deadline = self._now() + self.idle_timeout_s

    def held(self, owner: str, among: Container[str] | None = None) -> int:
        """How many open sessions `owner` opened; with `among`, only those whose id is in it."""
        return sum(1 for s in self._by_id.values() if s.owner == owner and (among is None or s.id in among))

    def ids(self) -> KeysView[str]:
        """The open sessions' ids (a live view, not a copy)."""
        return self._by_id.keys()

    def owners(self) -> dict[str, str]:
        """Each open session's id -> its owner."""
        return {sid: s.owner for sid, s in self._by_id.items()}

    def expired(self) -> list[str]:
        """The sessions whose idle countdown has run out."""
        now = self._now()
        return [sid for sid, s in self._by_id.items() if s.idle_deadline <= now]

    async def end(self, session_id: str) -> bool:
        """End the session: forgotten first (its id answers 404 from now on), then its exit stack unwound, in bound.
        False if it was not open."""
        session = self.forget(session_id)
        if session is None:
            return False
        await self.close(session)
        return True

    def forget(self, session_id: str) -> HandshakeSession | None:
        """The first half of `end`, at once: the session's id answers 404 from now on. The session, if it was open."""
        return self._by_id.pop(session_id, None)

    async def close(self, session: HandshakeSession) -> None:
        """The second half of `end`: the forgotten session's exit stack unwound, in bound."""
        try:
            async with asyncio.timeout(END_TIMEOUT_S):
                await asyncio.shield(session.exit_stack.aclose())
        except TimeoutError:
            logger.warning("session %s: ending it took over %.0f s; abandoned the rest", session.id[:8], END_TIMEOUT_S)
        except Exception:
            logger.exception("session %s: ending it raised", session.id[:8])
