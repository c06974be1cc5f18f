"""Sessions per principal: one caller cannot hold every stateful session the process can serve.

The session manager caps sessions in all (`limits.sessions_total`, answered 503); without a share per
principal one caller could take them all and every other principal would be refused for as long as its idle
sessions lived (a probe held 9,999 for 30 minutes). This middleware sits behind authentication, in front of the
manager, and refuses a request that would open a session once its principal holds `sessions_per_principal`: HTTP
429 with the JSON-RPC error -42900. Which requests open one is `mcp_requests`' classification, made once per
request the way the SDK reads the headers (a handshake-era request naming no session): a reading of its own once
disagreed with the SDK's and let one principal open every session uncounted. Requests on existing sessions, and
2026-07-28 requests (which open none), pass untouched.

It counts the open sessions each principal opened (`handshake_sessions.py`), plus the opening requests still in
flight, so a burst of concurrent openings cannot overshoot. Of the sessions it counts only those already answered:
a session is recorded before the request that opens it is answered, and in between it was counted twice, once as
a session and once as a request in flight (waves of 32 concurrent openings on a pod were refused four short of
the share).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpg_gateway import errors, mcp_requests
from mcpg_gateway.handshake_sessions import HandshakeSessions
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.sdk import auth
from mcpg_gateway.sdk.requests import SESSION_HEADER

logger = logging.getLogger(__name__)


class SessionLimit:
    def __init__(self, app: ASGIApp, sessions: HandshakeSessions, limit: Callable[[], int], metrics: Metrics) -> None:
        """`limit`: the sessions a principal may hold, asked per opening request (the configuration served)."""
        self._app, self._sessions, self._limit, self._metrics = app, sessions, limit, metrics
        self._opening: Counter[str] = Counter()
        # Ids of the sessions whose opening request was answered: the open sessions among these, plus the requests
        # in `_opening`, count each session once. Ended sessions are dropped from it as it grows (`_forget_ended`).
        self._answered: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal_id = _opener(scope)
        if principal_id is None:
            await self._app(scope, receive, send)
            return
        held, limit = self.held(principal_id), self._limit()
        if held >= limit:
            await self._refuse(principal_id, held, limit, send)
            return
        self._opening[principal_id] += 1
        opening = True

        def opened() -> None:
            nonlocal opening
            if opening:
                opening = False
                self._opening[principal_id] -= 1
                if self._opening[principal_id] <= 0:
                    del self._opening[principal_id]

        async def answering(message: Message) -> None:
            # A session is recorded before its opening request is answered: from the answer on, the session is
            # recorded or was never made, and counting the request too would count it twice (the app returns
            # a while after the client has its answer, so a client opening sessions back to back was refused one
            # short of its share).
            if message["type"] == "http.response.start":
                self._note_answered(message)
                opened()
            await send(message)

        try:
            await self._app(scope, receive, answering)
        finally:
            opened()

    def held(self, principal_id: str) -> int:
        """Sessions `principal_id` holds, counting the ones being opened now."""
        return self._sessions.held(principal_id, among=self._answered) + self._opening[principal_id]

    def _note_answered(self, start: Message) -> None:
        """Remember the session an opening request's answer names (a refusal names none)."""
        if start["status"] >= 400:
            return
        for name, value in start["headers"]:
            if name.lower() == SESSION_HEADER:
                self._forget_ended()
                self._answered.add(value.decode("latin-1"))
                return

    def _forget_ended(self) -> None:
        """Drop the ids of sessions that have ended, once they outnumber the open ones."""
        open_ids = self._sessions.ids()
        if len(self._answered) > 2 * len(open_ids) + 64:
            self._answered &= open_ids

    async def _refuse(self, principal_id: str, held: int, limit: int, send: Send) -> None:
        self._metrics.refusals.labels("session", str(errors.TOO_MANY_REQUESTS)).inc()
        message = (
            f"principal {principal_id!r} holds {held} open sessions (limit {limit}); end one "
            "(DELETE it) or let it expire, and retry"
        )
        await mcp_requests.answer_error(send, 429, errors.TOO_MANY_REQUESTS, message)


def _opener(scope: Scope) -> str | None:
    """The principal of a request that would open a session; None for any other request."""
    if scope["type"] != "http" or not mcp_requests.of(scope).opens_session:
        return None
    return auth.client_id(scope)
