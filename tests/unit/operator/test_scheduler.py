"""Per-namespace coalescing: bursts become one run, the last event is never lost, failures stay local."""

from __future__ import annotations

import asyncio

from mcpg_operator.reconcile import Outcome
from mcpg_operator.scheduler import Scheduler


class Recorder:
    def __init__(self) -> None:
        self.runs: list[str] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail: set[str] = set()

    async def __call__(self, namespace: str) -> Outcome:
        self.runs.append(namespace)
        await self.release.wait()
        if namespace in self.fail:
            self.fail.discard(namespace)
            raise RuntimeError("the API server said no")
        return Outcome(served=len(self.runs))


async def test_a_burst_of_requests_settles_into_one_run() -> None:
    rec = Recorder()
    scheduler = Scheduler(rec, settle_s=0.01)
    for _ in range(50):
        scheduler.request("shop")
    async with asyncio.timeout(5):
        await scheduler.idle("shop")
    assert rec.runs == ["shop"]
    await scheduler.close()


async def test_a_request_during_a_run_causes_exactly_one_more_run() -> None:
    rec = Recorder()
    rec.release.clear()
    scheduler = Scheduler(rec)
    scheduler.request("shop")
    async with asyncio.timeout(5):
        while not rec.runs:
            await asyncio.sleep(0)
    for _ in range(10):
        scheduler.request("shop")  # arrives while the first run is blocked
    rec.release.set()
    async with asyncio.timeout(5):
        await scheduler.idle("shop")
    assert rec.runs == ["shop", "shop"]
    await scheduler.close()


async def test_namespaces_run_independently_and_a_failure_stays_in_its_namespace() -> None:
    rec = Recorder()
    rec.fail.add("broken")
    scheduler = Scheduler(rec)
    scheduler.request("broken")
    scheduler.request("fine")
    async with asyncio.timeout(5):
        outcome = await scheduler.idle("fine")
    assert outcome is not None
    assert "broken" in rec.runs
    assert scheduler.known() == ["broken", "fine"]
    await scheduler.close()


async def test_a_run_that_asks_for_a_rerun_runs_again_at_once() -> None:
    runs: list[str] = []

    async def run(namespace: str) -> Outcome:
        runs.append(namespace)
        return Outcome(rerun=len(runs) == 1)

    scheduler = Scheduler(run)
    scheduler.request("shop")
    async with asyncio.timeout(5):
        await scheduler.idle("shop")
    assert runs == ["shop", "shop"]
    await scheduler.close()
