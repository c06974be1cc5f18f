"""Leader election on a Lease, against an in-memory Lease API with the API server's optimistic concurrency, on a
clock the test moves: who leads, when a standby takes over, and when a leader must stop.

The same elector runs against the real API server in tests/e2e/test_operator_ha.py.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from mcpg_operator import leader, metrics
from mcpg_operator.settings import LeaderElection

NS, NAME = "ops", "mcpg-operator"
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
CONFIG = LeaderElection(namespace=NS, identity="a")  # 15 s lease, 10 s renew deadline, 2 s retry period
YIELDS = 10
"""Loop turns that let every woken task run to its next sleep (the fake API never suspends)."""


class Leases:
    """Lease objects by path: 409 for a create of an existing one or a patch naming a stale resourceVersion."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.down = False
        self._versions = itertools.count(1)

    def _reachable(self) -> None:
        if self.down:
            raise ConnectionError("connection refused")

    async def get(self, path: str) -> dict[str, Any] | None:
        self._reachable()
        return copy.deepcopy(self.objects.get(path))

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self._reachable()
        target = f"{path}/{body['metadata']['name']}"
        if target in self.objects:
            return None
        return self.store(target, body)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self._reachable()
        old = self.objects.get(path)
        if old is None:
            return None
        if body["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        spec = {k: v for k, v in {**old["spec"], **body["spec"]}.items() if v is not None}  # null removes a field
        return self.store(path, {**old, "spec": spec})

    def store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(body)
        stored["metadata"] = {**stored["metadata"], "resourceVersion": str(next(self._versions))}
        self.objects[path] = stored
        return copy.deepcopy(stored)

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.objects[PATH]["spec"]
        return spec


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


async def test_a_leader_that_sees_another_holder_has_lost_at_once(
    leases: Leases, clock: Time, recorder: metrics.Metrics
) -> None:
    a = candidate(leases, clock, recorder, "a")
    await a.acquire()
    renewing = await start(a.hold())
    leases.store(PATH, {**leases.objects[PATH], "spec": {**leases.spec(), "holderIdentity": "intruder"}})
    await clock.advance(CONFIG.retry_s)
    assert renewing.done()
    assert not a.leading


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
