"""The gateway-kept handshake sessions: the cap, the owner binding, the idle countdown
that an open request suspends, and an end that unwinds the session's exit stack once."""

from __future__ import annotations

import pytest

from mcpg_gateway.handshake_sessions import ExitCallbacks, HandshakeSessions


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_at_its_cap_no_session_opens_and_an_ended_one_makes_room() -> None:
    sessions = HandshakeSessions(max_sessions=2, idle_timeout_s=60, now=Clock())
    a, b = sessions.open("alice"), sessions.open("bob")
    assert a is not None
    assert b is not None
    assert a.id != b.id
    assert sessions.open("carol") is None
    assert (sessions.held("alice"), sessions.held("bob"), len(sessions)) == (1, 1, 2)


async def test_ending_a_session_forgets_it_and_unwinds_its_exit_stack_once() -> None:
    sessions = HandshakeSessions(max_sessions=2, idle_timeout_s=60, now=Clock())
    a = sessions.open("alice")
    assert a is not None
    ended: list[str] = []
    a.exit_stack.callback(ended.append, a.id)
    assert await sessions.end(a.id)
    assert not await sessions.end(a.id)
    assert ended == [a.id]
    assert sessions.get(a.id, "alice") is None
    assert sessions.open("carol") is not None


def test_a_session_is_found_only_by_the_principal_that_opened_it() -> None:
    sessions = HandshakeSessions(max_sessions=2, idle_timeout_s=60, now=Clock())
    a = sessions.open("alice")
    assert a is not None
    assert sessions.get(a.id, "alice") is a
    assert sessions.get(a.id, "bob") is None
    assert sessions.get("unknown", "alice") is None


def test_a_session_expires_only_once_idle_for_the_timeout_with_nothing_in_flight() -> None:
    clock = Clock()
    sessions = HandshakeSessions(max_sessions=4, idle_timeout_s=60, now=clock)
    a = sessions.open("alice")
    assert a is not None
    clock.t += 3600
    assert sessions.expired() == []  # its opening request is still in flight
    sessions.done(a)
    clock.t += 59
    assert sessions.expired() == []
    sessions.begin(a)  # a GET stream opens: held open however long it lasts
    clock.t += 3600
    assert sessions.expired() == []
    sessions.done(a)
    clock.t += 60
    assert sessions.expired() == [a.id]


async def test_a_session_s_exit_callbacks_run_last_first_and_one_that_raises_stops_none_of_the_rest() -> None:
    callbacks = ExitCallbacks()
    ran: list[str] = []

    async def later(name: str) -> None:
        ran.append(name)

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("first")

    callbacks.callback(ran.append, "pushed first")
    callbacks.push_async_callback(later, "async")
    callbacks.callback(failing)
    callbacks.callback(ran.append, "pushed last")
    with pytest.raises(RuntimeError, match="first"):
        await callbacks.aclose()
    assert ran == ["pushed last", "failing", "async", "pushed first"]
    await callbacks.aclose()  # each runs once
    assert len(ran) == 4
