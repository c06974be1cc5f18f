"""Sessions per principal: one caller cannot hold every stateful session the process can serve.

The SDK's session manager caps sessions in all (`limits.sessions_total`, answered 503); without a share per
principal one caller could take them all and every other principal would be refused for as long as its idle
sessions lived (a probe held 9,999 for 30 minutes). This middleware sits behind authentication, in front of the
manager, and refuses a request that would open a session once its principal holds `sessions_per_principal`: HTTP
429 with the JSON-RPC error -42900. Which requests open one is `mcp_requests`' classification, made once per
request the way the SDK reads the headers (a handshake-era request naming no session): a reading of its own once
disagreed with the SDK's and let one principal open every session uncounted. Requests on existing sessions, and
2026-07-28 requests (which open none), pass untouched.

It counts the manager's own record of who opened each session (`sdk/owners.py`: the SDK keeps it to bind a session
to its creator), plus the opening requests still in flight, so a burst of concurrent openings cannot overshoot.
Of the SDK's record it counts only the sessions already answered: the SDK records a session before it answers the
request that opens it, and in between the session was counted twice, once as the SDK's and once as a request in
flight (waves of 32 concurrent openings on a pod were refused four short of the share).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpg_gateway import errors, mcp_requests
from mcpg_gateway.metrics import Metrics
from mcpg_gateway.sdk import owners
from mcpg_gateway.sdk.manager import SessionManager
from mcpg_gateway.sdk.requests import SESSION_HEADER

logger = logging.getLogger(__name__)


class SessionLimit:
    def __init__(self, app: ASGIApp, manager: SessionManager, limit: Callable[[], int], metrics: Metrics) -> None:
        """`limit`: the sessions a principal may hold, asked per opening request (the configuration served)."""
        self._app, self._manager, self._limit, self._metrics = app, manager, limit, metrics
        self._opening: Counter[str] = Counter()
        # Ids of the sessions whose opening request was answered: the SDK's record of these, plus the requests in
        # `_opening`, counts each session once. Ended sessions are dropped from it as it grows (`_forget_ended`).
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
            # The SDK records a session it opens before it answers: from the answer on, the session is in its
            # record or was never made, and counting the request too would count it twice (the SDK's app returns
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
        return owners.held(self._manager, principal_id, among=self._answered) + self._opening[principal_id]

    def _note_answered(self, start: Message) -> None:
        """Remember the session an opening request's answer names (the SDK names none when it refuses)."""
        if start["status"] >= 400:
            return
        for name, value in start["headers"]:
            if name.lower() == SESSION_HEADER:
                self._forget_ended()
                self._answered.add(value.decode("latin-1"))
                return

    def _forget_ended(self) -> None:
        """Drop the ids of sessions that have ended, once they outnumber the open ones (the SDK tells of no end)."""
        open_ids = owners.open_ids(self._manager)
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
    user = scope.get("user")
    token = getattr(user, "access_token", None)
    client_id = getattr(token, "client_id", None)
    return client_id if isinstance(client_id, str) else None
