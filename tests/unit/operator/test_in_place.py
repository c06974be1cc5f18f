"""Configurations applied in place: written once per digest to the one configuration Secret, counted pod by pod from
each pod's acknowledgement, with a pod that refuses one or lags behind named where it matters; the pod template
changes only for what a running gateway cannot swap.

Each test drives the reconcile against the in-memory API, whose gateway pods apply the configuration Secret when
the test says so (`FakeKube.apply_in_place`, `acknowledge`), refuse it (`refusing`) or do not answer at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_gateway.contract import digests
from mcpg_operator import bus, objects, observed, render, serving
from mcpg_operator import conditions as c
from mcpg_operator.reconcile import gateway_objects
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.settings import BusSettings, GatewayDefaults
from mcpg_testing.fake_kube import FakeKube, FakePod, replicaset_name
from mcpg_testing.namespace import (
    NS,
    Clock,
    condition,
    ready,
    resourcewatch,
    rotated,
    run,
    settle,
    state,
    webhooktoken,
)

CONFIG = f"/api/v1/namespaces/{NS}/secrets/{objects.CONFIG_SECRET}"
AUTH = {"auth.yaml": "anonymous: {enabled: true}\n"}


def message(kube: FakeKube, plural: str, name: str, type_: str = "Ready") -> str:
    obj = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/{plural}/{name}"]
    return str(next(x for x in obj["status"]["conditions"] if x["type"] == type_)["message"])


def conditions(kube: FakeKube, plural: str, name: str) -> dict[str, tuple[str, str]]:
    obj = kube.objects[f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/{plural}/{name}"]
    return {x["type"]: (x["status"], x["reason"]) for x in obj["status"]["conditions"]}


def config_writes(kube: FakeKube) -> list[dict[str, Any]]:
    return [call.body for call in kube.writes if call.path == CONFIG and call.body is not None]


async def three_watches(kube: FakeKube, clock: Clock) -> None:
    """Two polled watches and a webhook one with its token, every pod serving them."""
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(webhooktoken())
    kube.set_secret(NS, "tok-secret", token="t0ken")
    kube.put(resourcewatch("hook"))
    kube.put(resourcewatch("a", token=None))
    kube.put(resourcewatch("b", token=None))
    await settle(kube, clock)
    for name in ("hook", "a", "b"):
        assert ready(kube, "resourcewatches", name) == ("True", "Served")


# --- served, one pod at a time ---------------------------------------------------------------------------------


async def test_a_watch_is_served_only_once_every_counted_pod_serves_its_entry(kube: FakeKube, clock: Clock) -> None:
    await three_watches(kube, clock)
    kube.put(resourcewatch("b", token=None, description="edited"))
    await run(kube, clock)
    assert ready(kube, "resourcewatches", "b") == ("False", "RollingOut")
    assert condition(kube, "resourcewatches", "b", "Reconciling") == ("True", "RollingOut")
    assert message(kube, "resourcewatches", "b") == "0 of 2 gateway pods serve this watch's configuration"
    first, second = kube.gateway_pods(NS)
    kube.apply_in_place(first)
    await run(kube, clock)
    assert message(kube, "resourcewatches", "b") == "1 of 2 gateway pods serve this watch's configuration"
    kube.apply_in_place(second)
    await run(kube, clock)
    assert ready(kube, "resourcewatches", "b") == ("True", "Served")
    # The others' entries never changed: they stayed served throughout, their statuses untouched.
    assert ready(kube, "resourcewatches", "a") == ("True", "Served")
    assert ready(kube, "webhooktokens", "tok") == ("True", "RolledOut")


async def test_a_pass_that_finds_every_pod_serving_what_it_decides_writes_nothing(kube: FakeKube, clock: Clock) -> None:
    await three_watches(kube, clock)
    kube.writes.clear()
    outcome = await run(kube, clock)
    assert kube.writes == []
    assert outcome.next_check_s is None  # nothing to wait for


# --- the configuration Secret -------------------------------------------------------------------------------


async def test_the_configuration_secret_is_written_once_per_digest_however_long_the_pods_take(
    kube: FakeKube, clock: Clock
) -> None:
    await three_watches(kube, clock)
    kube.writes.clear()
    kube.put(resourcewatch("b", token=None, description="edited"))
    written_at = clock.now
    for _ in range(4):
        await run(kube, clock)
        clock.now += 10
    [body] = config_writes(kube)
    annotations = body["metadata"]["annotations"]
    assert annotations[objects.UPDATED_ANNOTATION] == c.now_iso(written_at)
    assert annotations[objects.DIGEST_ANNOTATION] == digests.document(kube.template_config(NS))
    assert objects.MANAGED.items() <= body["metadata"]["labels"].items()
    assert {o["name"] for o in body["metadata"]["ownerReferences"]} == {"hook", "a", "b"}
    # Nothing of the Deployment changed: the pods apply it in place, their streams untouched.
    assert [call for call in kube.writes if "/deployments/" in call.path] == []


def plan_of(*watches: dict[str, Any], wiring: bus.Wiring | None = None) -> render.Plan:
    views = [observed.watch({**w, "metadata": {**w["metadata"], "uid": "u", "generation": 1}}) for w in watches]
    return render.plan(views, {}, {}, GatewayDefaults(replicas=3), wiring)


def template(plan: render.Plan) -> dict[str, Any]:
    body = objects.deployment(NS, gateway_objects.restart_digest(plan), GatewayDefaults(replicas=3), [])
    template: dict[str, Any] = body["spec"]["template"]
    return template


def test_an_entry_change_leaves_the_pod_template_and_a_bus_change_rolls_it() -> None:
    before = plan_of(resourcewatch("a", token=None))
    edited = plan_of(resourcewatch("a", token=None, description="edited"), resourcewatch("b", token=None))
    assert edited.digest != before.digest
    assert template(edited) == template(before)
    wired = plan_of(resourcewatch("a", token=None), wiring=bus.wiring(BusSettings("managed", "mcpg-system"), NS, 3))
    assert "bus" in wired.config["gateway"]
    assert template(wired) != template(before)
    annotations = template(wired)["metadata"]["annotations"]
    assert annotations == {objects.RESTART_ANNOTATION: digests.restart(wired.config)}


# --- refused ------------------------------------------------------------------------------------------------


def entry_path(kube: FakeKube, name: str) -> str:
    names = [e["name"] for e in kube.template_config(NS)["mcp"]["capabilities"]["resources"]]
    return f"mcp.capabilities.resources[{names.index(name)}]"


async def test_a_refused_configuration_is_stalled_on_the_watch_its_problem_names_and_on_nothing_else(
    kube: FakeKube, clock: Clock
) -> None:
    await three_watches(kube, clock)
    kube.put(resourcewatch("b", token=None, description="edited"))
    await run(kube, clock)
    path = f"{entry_path(kube, 'b')}.watch.strategy.kind"
    kube.refusing[NS] = [(path, "no installed watch-strategy plugin has this kind")]
    kube.acknowledge(NS)  # every pod refuses it, and keeps serving the configuration before
    await run(kube, clock)
    assert conditions(kube, "resourcewatches", "b")["Ready"] == ("False", "ConfigRefused")
    assert conditions(kube, "resourcewatches", "b")["Stalled"] == ("True", "ConfigRefused")
    said = message(kube, "resourcewatches", "b", "Stalled")  # the ResourceWatch's field, not the file's path
    problem = "spec.watch.poll.kind: no installed watch-strategy plugin has this kind"
    assert said == f"{problem}; the gateway keeps its last configuration"
    events = str([x for x in kube.writes if "ConfigRefused" in str(x)])
    for pod in kube.gateway_pods(NS):  # the Event names each pod
        assert f"{pod.name}: spec.watch.poll.kind: no installed watch-strategy plugin has this kind" in events
    for plural, name in (("resourcewatches", "a"), ("resourcewatches", "hook"), ("webhooktokens", "tok")):
        assert "Stalled" not in conditions(kube, plural, name), name
        assert conditions(kube, plural, name)["Ready"][0] == "True", name


async def test_a_refusal_in_no_entry_concerns_every_object_and_nothing_is_served_or_accepted_on_it(
    kube: FakeKube, clock: Clock
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    await rotated(kube, clock)
    await run(kube, clock)  # writes the configuration carrying `new`
    kube.refusing[NS] = [("gateway.limits", "sessions_total: above what this process can hold")]
    kube.acknowledge(NS)
    for _ in range(2):
        await run(kube, clock)
        assert state(kube).current_accepted_at is None  # `new` is in no configuration a pod serves
        for plural, name in (("resourcewatches", "hook"), ("webhooktokens", "tok")):
            assert conditions(kube, plural, name)["Stalled"] == ("True", "ConfigRefused"), name
            assert conditions(kube, plural, name)["Ready"][0] == "False", name
        assert condition(kube, "webhooktokens", "tok", "TokenAccepted")[0] == "False"
        assert "gateway.limits: sessions_total" in message(kube, "webhooktokens", "tok", "Stalled")
    del kube.refusing[NS]
    kube.put(resourcewatch(description="the fix is a new configuration"))
    await settle(kube, clock)
    assert state(kube).tokens() == ["new"]
    assert ready(kube, "resourcewatches", "hook") == ("True", "Served")
    assert "Stalled" not in conditions(kube, "webhooktokens", "tok")


def config_names(kube: FakeKube) -> list[str]:
    return [e["name"] for e in kube.template_config(NS)["mcp"]["capabilities"]["resources"]]


def start_pod(kube: FakeKube) -> FakePod:
    """A pod of the Deployment's template as it is now, started on the configuration Secret (not Ready yet)."""
    deployment = kube.deployment(NS)
    assert deployment is not None
    return kube.start_pod(NS, replicaset_name(deployment["spec"]["template"]))


async def test_a_pod_that_refused_the_plugin_kind_it_started_on_is_heard_though_unready_and_the_watch_left_out(
    kube: FakeKube, clock: Clock
) -> None:
    """The settings claim a plugin kind the image lacks; the pod that starts on a configuration naming it refuses it
    and is never Ready, so only its acknowledgement can say which kinds it has."""
    claims = GatewayDefaults(replicas=1, plugin_kinds=["ghost"])
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(resourcewatch("a", token=None))
    kube.put(resourcewatch("ghostly", token=None, watch={"plugin": {"kind": "ghost"}}))
    await reconcile.reconcile(kube, NS, claims, clock, fetch=kube.acknowledgement)
    assert config_names(kube) == ["a", "ghostly"]  # no pod has answered: the settings stand in
    path = f"{entry_path(kube, 'ghostly')}.watch.strategy.kind"
    kube.refusing[NS] = [(path, "no installed watch-strategy plugin has kind 'ghost' (installed kinds: none)")]
    pod = start_pod(kube)
    assert pod.refused is not None
    await reconcile.reconcile(kube, NS, claims, clock, fetch=kube.acknowledgement)
    assert config_names(kube) == ["a"]
    assert conditions(kube, "resourcewatches", "ghostly")["Stalled"] == ("True", "InvalidSpec")
    assert "ghost" in message(kube, "resourcewatches", "ghostly", "Stalled")
    del kube.refusing[NS]
    kube.apply_in_place(pod)  # it accepts the configuration without the ghost, and is Ready
    pod.ready = True
    kube.sync_pod(pod)
    await reconcile.reconcile(kube, NS, claims, clock, fetch=kube.acknowledgement)
    assert ready(kube, "resourcewatches", "a") == ("True", "Served")


async def test_a_refusal_by_pods_not_ready_is_shown_on_what_it_concerns_and_nothing_is_served(
    kube: FakeKube, clock: Clock
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(resourcewatch("a", token=None))
    kube.put(resourcewatch("b", token=None))
    await run(kube, clock)
    path = f"{entry_path(kube, 'b')}.backend.url"
    kube.refusing[NS] = [(path, "something only the gateway process can tell")]
    pods = [start_pod(kube), start_pod(kube)]  # each refuses the configuration it starts on: never Ready
    await run(kube, clock)
    assert conditions(kube, "resourcewatches", "b")["Stalled"] == ("True", "ConfigRefused")
    said = message(kube, "resourcewatches", "b", "Stalled")
    assert said.startswith("spec.backend.http.url: something only the gateway process can tell")
    events = str([x for x in kube.writes if "ConfigRefused" in str(x)])
    for pod in pods:
        assert f"{pod.name}: spec.backend.http.url: something only the gateway process can tell" in events
    # No pod counts: nothing is served, and the other watch waits for a Ready pod.
    assert ready(kube, "resourcewatches", "a") == ("False", "RollingOut")
    assert "Stalled" not in conditions(kube, "resourcewatches", "a")
    # And the pass looks again while no pod counts: no Deployment event would say that one turned Ready.
    assert (await run(kube, clock)).next_check_s == serving.LATE_POLL_S


# --- late ---------------------------------------------------------------------------------------------------


async def test_a_pod_late_past_the_bound_is_named_with_the_digest_it_serves_or_why_it_gave_none(
    kube: FakeKube, clock: Clock
) -> None:
    await three_watches(kube, clock)
    served = digests.document(kube.template_config(NS))
    kube.put(resourcewatch("b", token=None, description="edited"))
    await run(kube, clock)
    late, silent = kube.gateway_pods(NS)
    silent.answers = False
    clock.now += serving.ACK_BOUND_S - 1
    await run(kube, clock)
    assert "late" not in message(kube, "resourcewatches", "b")  # within the bound: just counted
    clock.now += 1
    await run(kube, clock)
    said = message(kube, "resourcewatches", "b")
    assert said.startswith("0 of 2 gateway pods serve this watch's configuration; late 30 s: ")
    assert said.endswith(" and 1 more")
    assert f"(serves {served[:12]})" in said or "(no acknowledgement)" in said
    # Every pod, and what it does instead, is in the watch's status detail (`serving.Late.detail`).
    # `a`'s entry is unchanged: the late pod serves it, while the silent one serves nothing anyone can tell.
    assert late.name not in message(kube, "resourcewatches", "a")
    assert f"{silent.name} (no acknowledgement)" in message(kube, "resourcewatches", "a")


async def test_while_a_pod_has_not_acknowledged_the_pass_looks_again_soon_then_every_five_seconds(
    kube: FakeKube, clock: Clock
) -> None:
    await three_watches(kube, clock)
    kube.put(resourcewatch("b", token=None, description="edited"))
    assert (await run(kube, clock)).next_check_s == serving.ACK_POLL_S
    clock.now += serving.ACK_BOUND_S - 1
    assert (await run(kube, clock)).next_check_s == serving.ACK_POLL_S
    clock.now += 1
    assert (await run(kube, clock)).next_check_s == serving.LATE_POLL_S
    kube.acknowledge(NS)
    assert (await run(kube, clock)).next_check_s is None


# --- what the pods have installed ---------------------------------------------------------------------------


@pytest.mark.parametrize(("installed", "served"), [(("twilio",), True), ((), False)])
async def test_a_plugin_watch_is_checked_against_the_kinds_every_answering_pod_reports(
    kube: FakeKube, clock: Clock, installed: tuple[str, ...], served: bool
) -> None:
    kube.set_secret(NS, "mcpg-gateway-auth", **AUTH)
    kube.put(resourcewatch("polled", token=None))
    await settle(kube, clock)  # the settings name no plugin kind; the pods report theirs from now on
    kube.plugins = installed
    kube.acknowledge(NS)
    kube.put(resourcewatch("sms", token=None, watch={"plugin": {"kind": "twilio"}}))
    await settle(kube, clock)
    assert (ready(kube, "resourcewatches", "sms")[0] == "True") is served
    if not served:
        assert "no installed watch-strategy plugin has kind 'twilio'" in message(kube, "resourcewatches", "sms")


async def test_before_any_pod_answers_the_settings_say_which_plugin_kinds_are_installed(
    kube: FakeKube, clock: Clock
) -> None:
    kube.put(resourcewatch("sms", token=None, watch={"plugin": {"kind": "twilio"}}))
    defaults = GatewayDefaults(plugin_kinds=["twilio"])
    await reconcile.reconcile(kube, NS, defaults, clock, fetch=kube.acknowledgement)
    assert kube.gateway_pods(NS) == []
    assert "twilio" in str(kube.template_config(NS))
