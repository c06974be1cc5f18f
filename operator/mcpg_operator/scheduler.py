"""Coalesce reconcile requests per namespace: many events become one run, and one run at a time per namespace.

A request during a run marks the namespace dirty and the run loops once more, so the last event is never lost.
Each run an event asked for waits a short settle time first, so a burst (a `kubectl apply` of many watches)
becomes one rendered configuration, written once, instead of one per object; a wake-up a run asked for does not
wait it. Failed runs are retried with backoff; a run that asks to be woken later (a grace period, an
acknowledgement awaited) is scheduled, and one that asks for a rerun (it created something the next run must read
back) runs again at once. Each run is counted and timed here, as controller-runtime counts a reconcile
(`metrics`), and what the run found is handed to the metrics. An `after` callback sees each run's outcome beside
the one before, so one controller can ask another to follow (the managed bus follows the namespaces that gained
or lost bus credentials).

Passes are bounded across every namespace and controller by one `Turns` (MCPG_RECONCILE_CONCURRENCY), served
first come, first served: a namespace dirty again after its pass queues behind those already waiting, so one
namespace edited many times a second still gets one pass in turn, never every turn. A pass that meets the
leader's fence (`kube.NotLeading`) ends its namespace's loop: nothing to retry or report, this replica is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mcpg_operator import metrics, settings
from mcpg_operator.kube import NamespaceTerminating, NotLeading, Refused
from mcpg_operator.reconcile.run import Outcome
from mcpg_operator.reconcile.write import ApplyFailed

logger = logging.getLogger(__name__)

Run = Callable[[str], Awaitable[Outcome]]
After = Callable[[str, Outcome | None, Outcome], None]
"""(key, the outcome of its previous successful run or None, the outcome of the run that just succeeded)."""
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


class Turns:
    """At most `slots` passes at once, across every scheduler sharing it; waiters are served in arrival order.

    A freed slot is handed straight to the first waiter, so a pass that ends and asks again at once cannot take
    its own slot back ahead of those waiting (an `asyncio.Semaphore` promises no such order).
    """

    def __init__(self, slots: int = settings.RECONCILE_CONCURRENCY) -> None:
        if slots < 1:
            raise ValueError(f"slots: must be 1 or more, got {slots}")
        self._free = slots
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def take(self) -> None:
        """Wait for a slot; `give` it back when done."""
        if self._free and not self._waiting:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot as it was cancelled: it goes to the next waiter
            elif waiter in self._waiting:  # (`give` may have dropped it already)
                self._waiting.remove(waiter)
            raise

    def give(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # a cancelled waiter is skipped (and removes itself: see `take`)
                waiter.set_result(None)
                return
        self._free += 1


@dataclass
class _Namespace:
    dirty: bool = False
    settle: bool = False
    """An event asked for the next run: it waits the settle time first, so a burst becomes one run."""
    task: asyncio.Task[None] | None = None
    wakeup: asyncio.TimerHandle | None = None
    failures: int = 0
    last: Outcome | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Scheduler:
    def __init__(
        self,
        run: Run,
        settle_s: float = 0.0,
        recorder: metrics.Metrics = metrics.METRICS,
        controller: str = metrics.CONTROLLER,
        after: After | None = None,
        turns: Turns | None = None,
    ) -> None:
        """`turns`: the bound this scheduler's passes share with others' (None: one of its own)."""
        self._run = run
        self._settle_s = settle_s
        self._metrics = recorder
        self._controller = controller
        self._after = after
        self._turns = turns or Turns()
        recorder.controller(controller)
        self._namespaces: dict[str, _Namespace] = {}
        self._halted = False

    def known(self) -> list[str]:
        return list(self._namespaces)

    async def idle(self, namespace: str) -> Outcome | None:
        """Wait until `namespace` has no pending or running reconcile; its last outcome."""
        ns = self._namespaces[namespace]
        await ns.done.wait()
        return ns.last

    def request(self, namespace: str, *, settle: bool = True, version: str | None = None) -> None:
        """Run a pass of `namespace` soon; `settle=False`: a wake-up the last pass asked for (a grace period's end,
        an acknowledgement awaited), which no burst of events is behind, so it does not wait the settle time.
        `version`: the object version (`observed.version_key`) the event asking brings; none is run for one the
        last pass read already. At a restart kopf lists each kind of object in turn, and the later listings
        brought a second pass to most namespaces already passed (905 passes for 501 namespaces in bench 5b)."""
        if self._halted:
            return  # this replica lost the Lease: whatever asks now is not ours to do
        known = self._namespaces.get(namespace)
        if version is not None and known is not None and known.last is not None and version in known.last.read:
            return  # the last pass decided from this very version
        ns = self._namespaces.setdefault(namespace, _Namespace())
        ns.dirty = True
        ns.settle = ns.settle or settle
        ns.done.clear()
        if ns.task is None or ns.task.done():
            ns.task = asyncio.create_task(self._loop(namespace, ns), name=f"reconcile {namespace}")

    def _later(self, namespace: str, ns: _Namespace, delay: float) -> None:
        if ns.wakeup is not None:
            ns.wakeup.cancel()
        ns.wakeup = asyncio.get_running_loop().call_later(delay, lambda: self.request(namespace, settle=False))

    async def _loop(self, namespace: str, ns: _Namespace) -> None:
        while ns.dirty:
            if self._settle_s and ns.settle:
                await asyncio.sleep(self._settle_s)  # events arriving meanwhile join this run
            ns.settle = False
            previous = ns.last
            try:
                ns.last = await self._in_turn(namespace, ns)
            except asyncio.CancelledError:
                raise
            except NotLeading:
                break  # not a failure: the fence said why, once (`leader.Fence`); the process is stopping
            except NamespaceTerminating:
                # Everything in it is being deleted, the operator's objects included: nothing left to do.
                logger.info("namespace %s is being deleted; not reconciling it", namespace)
                break
            except Exception as e:  # isolation boundary: one namespace's failure must not stop the others
                self._failed(namespace, ns, e)
                return
            ns.failures = 0
            if self._after is not None:
                self._after(namespace, previous, ns.last)
            ns.dirty = ns.dirty or ns.last.rerun
            if ns.last.next_check_s is not None:
                self._later(namespace, ns, ns.last.next_check_s + 0.05)
        ns.done.set()

    async def _in_turn(self, namespace: str, ns: _Namespace) -> Outcome:
        """Wait for a turn (counted as queued meanwhile), then run."""
        queued = self._metrics.workqueue_depth.labels(self._controller)
        queued.inc()
        try:
            await self._turns.take()
        finally:
            queued.dec()
        try:
            ns.dirty = False  # requests made while it waited join this pass
            return await self._measured(namespace)
        finally:
            self._turns.give()

    async def _measured(self, namespace: str) -> Outcome:
        """One run, counted, timed and shown as work in flight; what it found goes to the metrics."""
        gauge, started = self._metrics.active_workers.labels(self._controller), time.monotonic()
        gauge.inc()
        result: str | None = "error"
        try:
            outcome = await self._run(namespace)
            result = _result(outcome)
            if outcome.facts is not None:
                self._metrics.namespace_pass(namespace, outcome.facts, time.monotonic())
            return outcome
        except NamespaceTerminating:
            result = "success"  # nothing left to do there, and nothing to count for it any more
            self._metrics.forget(namespace)
            raise
        except (asyncio.CancelledError, NotLeading):
            result = None  # the operator is stopping: not a reconcile that ended
            raise
        finally:
            gauge.dec()
            if result is not None:
                self._metrics.reconciled(result, time.monotonic() - started, self._controller)

    def _failed(self, namespace: str, ns: _Namespace, error: Exception) -> None:
        delay = BACKOFF_S[min(ns.failures, len(BACKOFF_S) - 1)]
        ns.failures += 1
        expected = isinstance(error, Refused) or (isinstance(error, ApplyFailed) and error.expected)
        if expected:  # the API server's message (or the network's failure) says what is wrong; a traceback would not
            logger.error("reconcile of namespace %s failed: %s; retrying in %.0fs", namespace, error, delay)
        else:
            logger.error("reconcile of namespace %s failed; retrying in %.0fs", namespace, delay, exc_info=error)
        self._later(namespace, ns, delay)

    def halt(self) -> None:
        """Cancel every pass now, and take no more requests: this replica lost the Lease, and another may be
        reconciling already. A cancelled pass sends nothing more: its task stops at the await it is in."""
        self._halted = True
        self._cancel()

    async def close(self) -> None:
        self._cancel()
        await asyncio.gather(*(ns.task for ns in self._namespaces.values() if ns.task), return_exceptions=True)

    def _cancel(self) -> None:
        for ns in self._namespaces.values():
            if ns.wakeup is not None:
                ns.wakeup.cancel()
            if ns.task is not None:
                ns.task.cancel()


def _result(outcome: Outcome) -> str:
    """controller-runtime's result label: run again at once, run again later, or done."""
    if outcome.rerun:
        return "requeue"
    return "requeue_after" if outcome.next_check_s is not None else "success"
