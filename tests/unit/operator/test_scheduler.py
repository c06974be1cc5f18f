"""Per-namespace coalescing: bursts become one run, the last event is never lost, failures stay local; a bound on
passes at once over every namespace, served in turn; a pass the leader's fence refuses, and the loss of the Lease."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from mcpg_operator import metrics
from mcpg_operator.kube import NotLeading
from mcpg_operator.reconcile.run import Outcome
from mcpg_operator.scheduler import Scheduler, Turns
from mcpg_testing import BOUND_S

YIELDS = 10
"""Loop turns after which every task that could run has run (the runs here never wait on I/O)."""


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


async def test_a_wake_up_a_pass_asked_for_runs_without_the_settle_time() -> None:
    runs: list[str] = []

    async def run(namespace: str) -> Outcome:
        runs.append(namespace)
        return Outcome(next_check_s=0.0 if len(runs) == 1 else None)  # the first asks to be woken at once

    scheduler = Scheduler(run, settle_s=3600)  # an hour: a wake-up that waited it would never come in bound
    scheduler.request("shop", settle=False)
    async with asyncio.timeout(BOUND_S):
        while len(runs) < 2:
            await asyncio.sleep(0.01)  # the wake-up is a timer: polled, bounded above
    assert runs == ["shop", "shop"]
    await scheduler.close()


# --- a bound over every namespace, served in turn; the fence; the loss of the Lease -----------------------------


def sample(recorder: metrics.Metrics, metric: str, **labels: str) -> float | None:
    return recorder.registry.get_sample_value(metric, labels)


class Gate:
    """A run that blocks until released, and says how many runs are in at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.inside = 0
        self.most = 0
        self.entered = asyncio.Condition()
        self.runs: list[str] = []

    async def __call__(self, namespace: str) -> Outcome:
        self.runs.append(namespace)
        self.inside += 1
        self.most = max(self.most, self.inside)
        async with self.entered:
            self.entered.notify_all()
        try:
            await self.release.wait()
        finally:
            self.inside -= 1
        return Outcome()

    async def until(self, inside: int) -> None:
        async with asyncio.timeout(BOUND_S), self.entered:
            await self.entered.wait_for(lambda: self.inside == inside)


async def test_no_more_passes_run_at_once_than_the_bound_over_every_namespace_and_scheduler() -> None:
    gate, recorder, turns = Gate(), metrics.Metrics(CollectorRegistry()), Turns(2)
    namespaces = Scheduler(gate, recorder=recorder, turns=turns)
    bus_step = Scheduler(gate, recorder=recorder, controller=metrics.BUS_CONTROLLER, turns=turns)
    for name in ("a", "b", "c", "d", "e"):
        namespaces.request(name)
    bus_step.request("mcpg-system")
    await gate.until(inside=2)
    for _ in range(YIELDS):
        await asyncio.sleep(0)  # any other run would have started by now
    assert gate.inside == 2
    active = sum(sample(recorder, "controller_runtime_active_workers", controller=c) or 0 for c in ("gateway", "bus"))
    queued = sum(sample(recorder, "workqueue_depth", name=c) or 0 for c in ("gateway", "bus"))
    assert (active, queued) == (2, 4)
    gate.release.set()
    async with asyncio.timeout(BOUND_S):
        for name in ("a", "b", "c", "d", "e"):
            await namespaces.idle(name)
        await bus_step.idle("mcpg-system")
    assert (gate.most, sorted(gate.runs)) == (2, ["a", "b", "c", "d", "e", "mcpg-system"])
    assert sample(recorder, "workqueue_depth", name="gateway") == 0
    assert sample(recorder, "controller_runtime_active_workers", controller="gateway") == 0
    await namespaces.close()
    await bus_step.close()


async def test_a_busy_namespace_requested_continuously_delays_another_namespace_by_one_of_its_passes_at_most() -> None:
    events: list[str] = []
    busy_runs, go = asyncio.Event(), asyncio.Event()

    async def run(namespace: str) -> Outcome:
        events.append(namespace)
        if namespace == "busy":
            for _ in range(6):
                scheduler.request("busy")  # edited again and again, during every one of its passes
            busy_runs.set()
            await go.wait()
        await asyncio.sleep(0)  # a pass awaits its requests: it never runs without yielding
        events.append(f"/{namespace}")
        return Outcome()

    scheduler = Scheduler(run, turns=Turns(1))
    scheduler.request("busy")
    async with asyncio.timeout(BOUND_S):
        await busy_runs.wait()
        scheduler.request("quiet")  # asks while the busy namespace holds the only turn
        go.set()
        await scheduler.idle("quiet")
    # One pass at a time; the quiet namespace's comes right after the busy one's, ahead of the busy one's next.
    assert events[:5] == ["busy", "/busy", "quiet", "/quiet", "busy"]
    await scheduler.close()


async def test_requests_made_while_a_namespace_waits_for_its_turn_join_its_one_pass() -> None:
    gate = Gate()
    scheduler = Scheduler(gate, turns=Turns(1))
    scheduler.request("first")
    await gate.until(inside=1)
    for _ in range(20):
        scheduler.request("waiting")
    for _ in range(YIELDS):
        await asyncio.sleep(0)
    assert gate.runs == ["first"], "it did not wait for its turn"
    gate.release.set()
    async with asyncio.timeout(BOUND_S):
        await scheduler.idle("waiting")
    assert gate.runs == ["first", "waiting"]
    await scheduler.close()


async def test_a_pass_refused_by_the_fence_is_neither_retried_nor_counted_as_a_failure() -> None:
    recorder, runs = metrics.Metrics(CollectorRegistry()), []

    async def run(namespace: str) -> Outcome:
        runs.append(namespace)
        raise NotLeading("PATCH /x: this replica does not hold Lease ops/mcpg-operator")

    scheduler = Scheduler(run, recorder=recorder)
    scheduler.request("shop")
    async with asyncio.timeout(BOUND_S):
        await scheduler.idle("shop")
    assert runs == ["shop"]
    assert sample(recorder, "controller_runtime_reconcile_errors_total", controller="gateway") == 0
    assert sample(recorder, "controller_runtime_reconcile_time_seconds_count", controller="gateway") == 0
    assert sample(recorder, "controller_runtime_active_workers", controller="gateway") == 0
    assert scheduler._namespaces["shop"].wakeup is None, "a retry was scheduled"
    await scheduler.close()


async def test_halting_cancels_the_running_passes_before_they_send_anything_more_and_takes_no_more_requests() -> None:
    sent: list[str] = []
    proceed = asyncio.Event()
    cancelled: list[str] = []

    async def run(namespace: str) -> Outcome:
        try:
            await proceed.wait()  # a request in flight
        except asyncio.CancelledError:
            cancelled.append(namespace)
            raise
        sent.append(namespace)  # the next write
        return Outcome()

    scheduler = Scheduler(run, turns=Turns(1))
    scheduler.request("running")
    scheduler.request("waiting")
    for _ in range(YIELDS):
        await asyncio.sleep(0)
    scheduler.halt()
    proceed.set()  # the request in flight answers just after the loss
    scheduler.request("later")
    for _ in range(YIELDS):
        await asyncio.sleep(0)
    assert (sent, cancelled) == ([], ["running"])
    assert scheduler.known() == ["running", "waiting"]
    await scheduler.close()


async def test_an_event_bringing_a_version_the_last_pass_read_runs_no_pass_and_a_newer_one_does() -> None:
    runs: list[str] = []

    async def run(namespace: str) -> Outcome:
        runs.append(namespace)
        return Outcome(read=frozenset({"ResourceWatch/w@7"}))

    scheduler = Scheduler(run)
    scheduler.request("shop", version="ResourceWatch/w@7")  # nothing read yet: a pass
    async with asyncio.timeout(BOUND_S):
        await scheduler.idle("shop")
    scheduler.request("shop", version="ResourceWatch/w@7")  # a later listing of what that pass read
    async with asyncio.timeout(BOUND_S):
        await scheduler.idle("shop")
    assert runs == ["shop"]
    scheduler.request("shop", version="ResourceWatch/w@8")
    async with asyncio.timeout(BOUND_S):
        await scheduler.idle("shop")
    assert runs == ["shop", "shop"]
    await scheduler.close()
