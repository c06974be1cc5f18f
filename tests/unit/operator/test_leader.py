"""Leader election on a Lease, against an in-memory Lease API with the API server's optimistic concurrency, on a
clock the test moves: who leads, when a standby takes over, and when a leader must stop. Then the elector on its
own thread (`Candidacy`), on real time with short timings: renewals go on whatever the caller's loop does, and
the caller's fence closes on time.

The same elector runs against the real API server in tests/e2e/test_operator_ha.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mcpg_operator import leader, metrics
from mcpg_operator.candidacy import Candidacy
from mcpg_operator.kube import NotLeading
from mcpg_operator.settings import LeaderElection
from mcpg_testing import BOUND_S
from mcpg_testing.leases import Leases

NS, NAME = "ops", "mcpg-operator"
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
CONFIG = LeaderElection(namespace=NS, identity="a")  # 15 s lease, 10 s renew deadline, 2 s retry period
FAST = replace(CONFIG, lease_s=1.5, renew_s=1.0, retry_s=0.1)
"""For the elector on its own thread, on real time."""
YIELDS = 10
"""Loop turns that let every woken task run to its next sleep (the fake API never suspends)."""


class Time:
    """A monotonic clock that moves only when the test says, and a sleep that waits for it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        woken = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, woken))
        await woken

    async def advance(self, seconds: float, step: float = 0.5) -> None:
        """Move on by `seconds`, waking each sleeper when its time comes and letting it run."""
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + step)
            due = [s for s in self._sleepers if s[0] <= self.now]
            self._sleepers = [s for s in self._sleepers if s[0] > self.now]
            for _, woken in due:
                if not woken.done():  # a cancelled task's sleep is cancelled with it
                    woken.set_result(None)
            for _ in range(YIELDS):
                await asyncio.sleep(0)


@pytest.fixture
def leases() -> Leases:
    return Leases()


@pytest.fixture
def clock() -> Time:
    return Time()


@pytest.fixture
def recorder() -> metrics.Metrics:
    return metrics.Metrics(CollectorRegistry())


def candidate(leases: Leases, clock: Time, recorder: metrics.Metrics, identity: str) -> leader.Elector:
    config = replace(CONFIG, identity=identity)
    return leader.Elector(leases, config, recorder, clock=clock, wall=clock.wall, sleep=clock.sleep)


async def start(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """Run `coro` as a task up to its first sleep, at the current time."""
    task = asyncio.create_task(coro)
    for _ in range(YIELDS):
        await asyncio.sleep(0)
    return task


def status(recorder: metrics.Metrics) -> float | None:
    return recorder.registry.get_sample_value("leader_election_master_status", {"name": NAME})


async def test_the_first_candidate_creates_the_lease_and_leads_at_once(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    assert status(recorder) == 0
    async with asyncio.timeout(5):
        await a.acquire()
    assert a.leading
    assert status(recorder) == 1
    spec = leases.spec()
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("a", 15, 0)
    assert spec["acquireTime"] == spec["renewTime"] == leader.micro_time(clock.wall())


async def test_a_standby_waits_while_the_leader_renews_and_takes_over_a_lease_left_unrenewed(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a, b = candidate(leases, clock, recorder, "a"), candidate(leases, clock, metrics.Metrics(CollectorRegistry()), "b")
    await a.acquire()
    renewing = await start(a.hold())
    standby = await start(b.acquire())
    await clock.advance(60)
    assert not standby.done()
    assert leases.spec()["holderIdentity"] == "a"
    renewing.cancel()  # the leader dies: nobody renews from now on (its last renewal was at 60 s or just before)
    await clock.advance(14)
    assert not standby.done(), "taken over before the lease duration passed on the standby's clock"
    await clock.advance(4)  # 15 s since the standby last saw the record change, plus at most one retry period
    assert standby.done()
    spec = leases.spec()
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert spec["acquireTime"] == spec["renewTime"]


async def test_a_released_lease_is_taken_at_the_standbys_next_try(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a, b = candidate(leases, clock, recorder, "a"), candidate(leases, clock, metrics.Metrics(CollectorRegistry()), "b")
    await a.acquire()
    standby = await start(b.acquire())
    await clock.advance(5)
    await a.release()
    assert "holderIdentity" not in leases.spec()
    assert status(recorder) == 0
    await clock.advance(CONFIG.retry_s)
    assert standby.done()
    assert leases.spec()["holderIdentity"] == "b"


async def test_renewals_keep_the_acquire_time_and_move_the_renew_time(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    await a.acquire()
    acquired = leases.spec()["acquireTime"]
    renewing = await start(a.hold())
    await clock.advance(10)
    spec = leases.spec()
    assert spec["acquireTime"] == acquired
    assert spec["renewTime"] == leader.micro_time(clock.wall())
    assert spec["leaseTransitions"] == 0
    renewing.cancel()


async def test_a_leader_that_cannot_renew_for_the_renew_deadline_has_lost(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    await a.acquire()
    renewing = await start(a.hold())
    await clock.advance(4)
    leases.down = True  # last successful renewal: at 4 s
    await clock.advance(9.5)
    assert not renewing.done()
    await clock.advance(CONFIG.retry_s)
    assert renewing.done()
    assert not a.leading
    assert status(recorder) == 0


async def test_a_leader_that_sees_another_holder_has_lost_at_once_and_its_fence_closes(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    await a.acquire()
    renewing = await start(a.hold())
    leases.take("intruder")
    await clock.advance(CONFIG.retry_s)
    assert renewing.done()
    assert not a.leading
    assert not a.fence.holds()  # well before the renew deadline


async def test_of_two_candidates_racing_for_a_free_lease_one_wins(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a, b = candidate(leases, clock, recorder, "a"), candidate(leases, clock, metrics.Metrics(CollectorRegistry()), "b")
    tries = [asyncio.create_task(a.acquire()), asyncio.create_task(b.acquire())]
    await clock.advance(10)  # nobody renews: within the lease duration, the loser must still be waiting
    assert [t.done() for t in tries].count(True) == 1
    assert a.leading != b.leading
    for t in tries:
        t.cancel()


async def test_release_leaves_a_lease_someone_else_holds_alone(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a, b = candidate(leases, clock, recorder, "a"), candidate(leases, clock, metrics.Metrics(CollectorRegistry()), "b")
    await a.acquire()
    await b.release()
    assert leases.spec()["holderIdentity"] == "a"


# --- the fence: the deadline is the clock's, not the elector's to notice ---------------------------------------


async def test_the_fence_closes_once_the_renew_deadline_passes_without_a_renewal_before_the_elector_notices(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    await a.acquire()
    renewing = await start(a.hold())
    leases.down = True  # no renewal from now on: the last one was the acquisition, at 0 s
    clock.now = CONFIG.renew_s - 0.01  # time passes, and the elector does not run (it sleeps until its next try)
    a.fence.admit("PATCH", "/some/object")
    clock.now = CONFIG.renew_s
    assert a.leading, "the elector has noticed nothing yet"
    with pytest.raises(NotLeading):
        a.fence.admit("PATCH", "/some/object")
    assert recorder.registry.get_sample_value("mcpg_operator_fenced_writes_total") == 1
    renewing.cancel()


async def test_the_fence_is_closed_before_the_lease_is_acquired_and_after_it_is_released(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    assert not a.fence.holds()
    await a.acquire()
    assert a.fence.holds()
    await a.release()
    assert not a.fence.holds()


# --- the elector on its own thread ------------------------------------------------------------------------------


def connected(store: Leases) -> Callable[[], Awaitable[Leases]]:
    async def connect() -> Leases:
        assert threading.current_thread() is not threading.main_thread(), "connected in the caller's loop"
        return store

    return connect


def busy(seconds: float) -> None:
    """A CPU-bound pass: the calling loop runs nothing else for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_a_renewal_succeeds_on_time_while_the_main_loop_is_blocked_by_a_cpu_bound_pass(
    leases: Leases, recorder: metrics.Metrics
) -> None:
    candidacy = Candidacy(FAST, connected(leases), recorder=recorder)
    candidacy.start()
    try:
        async with asyncio.timeout(BOUND_S):
            await candidacy.leading()
        before = leases.writes
        busy(2 * FAST.renew_s)  # twice the renew deadline, without one await
        assert candidacy.fence.holds(), "no renewal within the renew deadline while the loop was blocked"
        assert leases.writes >= before + 2
        assert leases.spec()["holderIdentity"] == "a"
        assert status(recorder) == 1
    finally:
        await candidacy.stop()


async def test_a_lost_lease_is_told_on_the_callers_loop_and_left_to_its_new_holder(
    leases: Leases, recorder: metrics.Metrics
) -> None:
    told: list[threading.Thread] = []
    candidacy = Candidacy(FAST, connected(leases), lambda: told.append(threading.current_thread()), recorder)
    candidacy.start()
    async with asyncio.timeout(BOUND_S):
        await candidacy.leading()
        leases.take("intruder")
        await candidacy.lost()
    assert told == [threading.current_thread()]
    assert not candidacy.fence.holds()
    await candidacy.stop()
    assert leases.spec()["holderIdentity"] == "intruder"  # not released: not its own any more
    assert leases.closed
    assert told == [threading.current_thread()], "told once"


async def test_stopping_a_leading_candidacy_releases_the_lease_and_closes_the_fence(
    leases: Leases, recorder: metrics.Metrics
) -> None:
    told: list[threading.Thread] = []
    candidacy = Candidacy(FAST, connected(leases), lambda: told.append(threading.current_thread()), recorder)
    candidacy.start()
    async with asyncio.timeout(BOUND_S):
        await candidacy.leading()
        await candidacy.stop()
    assert "holderIdentity" not in leases.spec()
    assert not candidacy.fence.holds()
    assert status(recorder) == 0
    assert (leases.closed, told) == (True, []), "a stop asked for is not a loss"


async def test_a_standby_stopped_while_it_waits_leaves_the_lease_to_its_holder(
    leases: Leases, recorder: metrics.Metrics
) -> None:
    other = leader.Elector(leases, replace(FAST, identity="b", lease_s=3600), metrics.Metrics(CollectorRegistry()))
    await other.acquire()
    leases.read.clear()
    candidacy = Candidacy(FAST, connected(leases), recorder=recorder)
    candidacy.start()
    async with asyncio.timeout(BOUND_S):
        assert await asyncio.to_thread(leases.read.wait, BOUND_S), "the standby never read the Lease"
        await candidacy.stop()
    assert leases.spec()["holderIdentity"] == "b"
    assert not candidacy.fence.holds()


async def test_an_elector_that_cannot_connect_ends_the_candidacy_with_its_error(recorder: metrics.Metrics) -> None:
    async def unreachable() -> Leases:
        raise ConnectionError("no API server")

    told: list[str] = []
    candidacy = Candidacy(FAST, unreachable, lambda: told.append("lost"), recorder)
    candidacy.start()
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(ConnectionError, match="no API server"):
            await candidacy.leading()
        await candidacy.stop()
    assert told == ["lost"]
