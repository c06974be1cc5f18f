"""The operator's metrics: controller-runtime's reconcile families from the scheduler, and the rotation, configuration
and watch figures derived from reconcile passes over an in-memory API. No label may carry a name, URI or token.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mcpg_operator import conditions, metrics, render
from mcpg_operator.reconcile.run import Outcome
from mcpg_operator.scheduler import Scheduler
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, resourcewatch, run, webhooktoken

OLD = "old-token-value-5f1d2c9e7a"
NEW = "new-token-value-0b8e4d6a31"


@pytest.fixture
def recorder() -> metrics.Metrics:
    return metrics.Metrics(CollectorRegistry())


def value(recorder: metrics.Metrics, name: str, **labels: str) -> float:
    found = recorder.registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


async def counted(kube: FakeKube, clock: Clock, recorder: metrics.Metrics) -> Outcome:
    """One reconcile pass of NS, recorded as the scheduler records it (at the test's clock)."""
    outcome = await run(kube, clock)
    if outcome.facts is not None:
        recorder.namespace_pass(NS, outcome.facts, clock.now)
    return outcome


async def settled(kube: FakeKube, clock: Clock, recorder: metrics.Metrics) -> None:
    """Passes, every rollout completing and every pod catching up between them, until one writes nothing."""
    for _ in range(10):
        before = len(kube.writes)
        outcome = await counted(kube, clock, recorder)
        caught_up = kube.complete_rollout(NS)
        if len(kube.writes) == before and not outcome.rerun and not caught_up:
            return
    raise AssertionError("did not settle")


async def served_webhook(kube: FakeKube, clock: Clock, recorder: metrics.Metrics) -> None:
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token=OLD)
    kube.put(resourcewatch())
    await settled(kube, clock, recorder)


# --- the rotation, the rollouts and the watches, from reconcile passes ---------------------------------------


async def test_a_rotation_shows_as_promoted_retiring_then_retired(
    kube: FakeKube, clock: Clock, recorder: metrics.Metrics
) -> None:
    await served_webhook(kube, clock, recorder)
    assert value(recorder, "mcpg_operator_webhooktokens", phase="Ready") == 1
    assert value(recorder, "mcpg_operator_tokens_retiring") == 0
    kube.set_secret(NS, "tok-secret", token=NEW)
    await counted(kube, clock, recorder)
    assert value(recorder, "mcpg_operator_token_transitions_total", transition="promoted") == 1
    assert value(recorder, "mcpg_operator_tokens_retiring") == 1
    assert value(recorder, "mcpg_operator_webhooktokens", phase="Rolling") == 1
    assert value(recorder, "mcpg_operator_webhooktokens", phase="Ready") == 0
    kube.acknowledge(NS)
    await counted(kube, clock, recorder)  # accepted, and (grace 0) left out of the configuration
    assert value(recorder, "mcpg_operator_token_transitions_total", transition="retired") == 0
    assert value(recorder, "mcpg_operator_tokens_retiring") == 1  # until every pod has dropped it
    assert value(recorder, "mcpg_operator_webhooktokens", phase="Retiring") == 1
    kube.acknowledge(NS)
    await counted(kube, clock, recorder)
    assert value(recorder, "mcpg_operator_token_transitions_total", transition="retired") == 1
    assert value(recorder, "mcpg_operator_tokens_retiring") == 0


async def test_a_configuration_is_counted_when_written_and_timed_to_the_pass_that_finds_every_pod_serving_it(
    kube: FakeKube, clock: Clock, recorder: metrics.Metrics
) -> None:
    kube.put(resourcewatch(token=None, watch={"poll": {"intervalMs": 60000}}))
    await settled(kube, clock, recorder)
    written = value(recorder, "mcpg_operator_gateway_configurations_written_total")
    assert value(recorder, "mcpg_operator_gateway_configurations_acknowledged_total") == written
    assert (
        value(recorder, "mcpg_operator_gateway_pods"),
        value(recorder, "mcpg_operator_gateway_pods_acknowledged"),
    ) == (2, 2)
    kube.put(resourcewatch(token=None, watch={"poll": {"intervalMs": 30000}}))
    await counted(kube, clock, recorder)
    assert value(recorder, "mcpg_operator_gateway_configurations_written_total") == written + 1
    first, _ = kube.gateway_pods(NS)
    kube.apply_in_place(first)
    clock.now += 3
    await counted(kube, clock, recorder)  # one pod of two: neither a new configuration nor its acknowledgement
    assert value(recorder, "mcpg_operator_gateway_configurations_written_total") == written + 1
    assert value(recorder, "mcpg_operator_gateway_configurations_acknowledged_total") == written
    assert value(recorder, "mcpg_operator_gateway_pods_acknowledged") == 1
    kube.acknowledge(NS)
    clock.now += 1.5
    await counted(kube, clock, recorder)
    assert value(recorder, "mcpg_operator_gateway_configurations_acknowledged_total") == written + 1
    assert value(recorder, "mcpg_operator_gateway_pods_acknowledged") == 2
    assert value(recorder, "mcpg_operator_gateway_acknowledgement_duration_seconds_sum") == 4.5
    assert value(recorder, "mcpg_operator_gateway_acknowledgement_duration_seconds_bucket", le="5.0") == written + 1
    assert value(recorder, "mcpg_operator_gateway_acknowledgement_duration_seconds_bucket", le="2.0") == written


async def test_watches_are_counted_by_ready_status_and_reason(
    kube: FakeKube, clock: Clock, recorder: metrics.Metrics
) -> None:
    kube.put(resourcewatch("served", token=None, watch={"poll": {"intervalMs": 60000}}))
    kube.put(resourcewatch("orphan", token="missing"))  # its WebhookToken does not exist
    await settled(kube, clock, recorder)
    assert value(recorder, "mcpg_operator_resourcewatches", ready="True", reason=conditions.SERVED) == 1
    reasons = {
        s.labels["reason"]
        for family in recorder.registry.collect()
        if family.name == "mcpg_operator_resourcewatches"
        for s in family.samples
        if s.labels["ready"] == "False"
    }
    assert reasons == {conditions.WEBHOOK_TOKEN_NOT_FOUND}


def test_namespace_figures_are_summed_and_a_namespace_without_mcpg_objects_leaves_the_sums(
    recorder: metrics.Metrics,
) -> None:
    served = {("True", conditions.SERVED): 2}
    recorder.namespace_pass("a", metrics.Facts(True, {"Retiring": 1}, 2, served), 0.0)
    recorder.namespace_pass("b", metrics.Facts(True, {"Retiring": 1, "Ready": 1}, 1, served), 0.0)
    assert value(recorder, "mcpg_operator_tokens_retiring") == 3
    assert value(recorder, "mcpg_operator_webhooktokens", phase="Retiring") == 2
    assert value(recorder, "mcpg_operator_resourcewatches", ready="True", reason=conditions.SERVED) == 4
    assert value(recorder, "mcpg_operator_namespaces") == 2
    recorder.namespace_pass("b", metrics.Facts(False), 0.0)  # its last watch and token were deleted
    assert value(recorder, "mcpg_operator_tokens_retiring") == 2
    assert value(recorder, "mcpg_operator_webhooktokens", phase="Ready") == 0
    assert value(recorder, "mcpg_operator_namespaces") == 1
    recorder.forget("a")  # a namespace being deleted
    assert value(recorder, "mcpg_operator_tokens_retiring") == 0


def test_an_unknown_phase_is_counted_as_other() -> None:
    assert set(metrics.TOKEN_PHASES) >= {"Pending", "Rolling", "Retiring", "Ready", "Unused", "Error"}
    registry = CollectorRegistry()
    recorder = metrics.Metrics(registry)
    recorder.namespace_pass("a", metrics.Facts(True, {metrics.OTHER: 1}), 0.0)
    assert registry.get_sample_value("mcpg_operator_webhooktokens", {"phase": metrics.OTHER}) == 1


# --- controller-runtime's reconcile families, from the scheduler ---------------------------------------------


async def test_each_reconcile_is_counted_by_result_and_timed(recorder: metrics.Metrics) -> None:
    outcomes: list[Outcome | Exception] = [
        Outcome(rerun=True),  # requeue: run again at once
        Outcome(),  # success
        RuntimeError("the API server said no"),  # error
        Outcome(next_check_s=3600),  # requeue_after
    ]

    async def run_next(namespace: str) -> Outcome:
        result = outcomes.pop(0) if outcomes else Outcome()
        if isinstance(result, Exception):
            raise result
        return result

    scheduler = Scheduler(run_next, recorder=recorder)
    for ended in (2, 3, 4):  # a run and its rerun; the failure; the run after it
        scheduler.request("shop")
        await _until(functools.partial(_ended, recorder, ended))
    by_result = {
        r: value(recorder, "controller_runtime_reconcile_total", controller="gateway", result=r)
        for r in metrics.RESULTS
    }
    assert by_result == {"success": 1, "error": 1, "requeue": 1, "requeue_after": 1}
    assert value(recorder, "controller_runtime_reconcile_errors_total", controller="gateway") == 1
    assert value(recorder, "controller_runtime_reconcile_time_seconds_count", controller="gateway") == 4
    await scheduler.close()


def _ended(recorder: metrics.Metrics, count: int) -> bool:
    """`count` reconciles have ended (the histogram counts every one, whatever its result)."""
    return value(recorder, "controller_runtime_reconcile_time_seconds_count", controller="gateway") == count


async def test_a_running_reconcile_is_an_active_worker(recorder: metrics.Metrics) -> None:
    release = asyncio.Event()

    async def blocked(namespace: str) -> Outcome:
        await release.wait()
        return Outcome()

    scheduler = Scheduler(blocked, recorder=recorder)
    assert value(recorder, "controller_runtime_active_workers", controller="gateway") == 0
    scheduler.request("shop")
    await _until(lambda: value(recorder, "controller_runtime_active_workers", controller="gateway") == 1)
    release.set()
    async with asyncio.timeout(5):
        await scheduler.idle("shop")
    assert value(recorder, "controller_runtime_active_workers", controller="gateway") == 0
    await scheduler.close()


async def test_the_bus_step_is_counted_as_its_own_controller_whose_series_exist_only_when_it_runs(
    recorder: metrics.Metrics,
) -> None:
    assert recorder.registry.get_sample_value("controller_runtime_active_workers", {"controller": "bus"}) is None

    async def bus_step(key: str) -> Outcome:
        return Outcome()

    scheduler = Scheduler(bus_step, recorder=recorder, controller=metrics.BUS_CONTROLLER)
    assert value(recorder, "controller_runtime_reconcile_total", controller="bus", result="success") == 0
    scheduler.request("mcpg-system")
    async with asyncio.timeout(5):
        await scheduler.idle("mcpg-system")
    assert value(recorder, "controller_runtime_reconcile_total", controller="bus", result="success") == 1
    assert value(recorder, "controller_runtime_reconcile_total", controller="gateway", result="success") == 0
    await scheduler.close()


async def _until(check: Callable[[], object]) -> None:
    """Yield to the scheduler's tasks until `check` holds (bounded)."""
    async with asyncio.timeout(5):
        while not check():
            await asyncio.sleep(0)


# --- what the labels may carry ---------------------------------------------------------------------------------


async def test_no_label_value_carries_a_token_uri_secret_or_object_name(
    kube: FakeKube, clock: Clock, recorder: metrics.Metrics
) -> None:
    await served_webhook(kube, clock, recorder)
    kube.set_secret(NS, "tok-secret", token=NEW)
    scheduler = Scheduler(lambda ns: run(kube, clock), recorder=recorder)
    scheduler.request(NS)
    async with asyncio.timeout(5):
        await scheduler.idle(NS)
    kube.put(resourcewatch("broken", token="missing"))
    scheduler.request(NS)
    async with asyncio.timeout(5):
        await scheduler.idle(NS)
    await scheduler.close()
    recorder.leader.labels("mcpg-operator").set(1)

    vocabulary = {
        metrics.CONTROLLER,
        *metrics.RESULTS,
        *metrics.TOKEN_PHASES,
        metrics.OTHER,
        *metrics.KNOWN_REASONS,
        *metrics.TRANSITIONS.values(),
        "True",
        "False",
        "mcpg-operator",  # the Lease's name, from the settings
    }
    labels = {
        (name, v)
        for family in recorder.registry.collect()
        for s in family.samples
        for name, v in s.labels.items()
        if name != "le"  # histogram bucket bounds
    }
    assert {v for _, v in labels} <= vocabulary, labels
    text = generate_latest(recorder.registry).decode()
    secrets = [OLD, NEW, render.token_digest(OLD), render.token_digest(NEW), "tok-secret", "x://hook", "x://broken"]
    names = [f'"{name}"' for name in (NS, "hook", "broken", "missing", "tok")]  # as label values are written
    for forbidden in [*secrets, *names]:
        assert forbidden not in text
