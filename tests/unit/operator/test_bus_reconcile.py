"""Gateway replicas on a bus, against an in-memory API: each namespace's credentials, the managed server's accounts,
and how the cluster-wide step follows the namespace passes. A password shows up nowhere but in its two Secrets."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
from typing import Any

import pytest

from mcpg_operator import bus, bus_reconcile, handlers, objects, observed
from mcpg_operator.bus_key import BusKey, UnusableKey
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.scheduler import Scheduler
from mcpg_operator.settings import BusSettings, GatewayDefaults, OperatorSettings
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import Clock, resourcewatch, webhooktoken

BUS_NS = "mcpg-system"
MANAGED = BusSettings(namespace=BUS_NS)
EXTERNAL = BusSettings("external", url="nats://nats.example:4222", credentials_secret="nats-creds")
THREE, ONE = GatewayDefaults(replicas=3), GatewayDefaults(replicas=1)
CREDENTIALS = "mcpg-gateway-bus"


class Passwords:
    """A token generator that never repeats, and remembers what it gave."""

    def __init__(self) -> None:
        self.given: list[str] = []
        self._n = itertools.count()

    def __call__(self) -> str:
        self.given.append(f"generated-{next(self._n):02d}-" + "x" * 32)
        return self.given[-1]


def in_ns(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}


async def run(
    kube: FakeKube,
    namespace: str = "shop",
    defaults: GatewayDefaults = THREE,
    settings: BusSettings = MANAGED,
    token: Passwords | None = None,
) -> reconcile.Outcome:
    return await reconcile.reconcile(
        kube, namespace, defaults, Clock(), token or Passwords(), bus_settings=settings, fetch=kube.acknowledgement
    )


def password(kube: FakeKube, namespace: str = "shop") -> str | None:
    return kube.secret_value(namespace, CREDENTIALS, "password")


def derived(kube: FakeKube, namespace: str = "shop") -> str:
    """The password the operator's key derives for `namespace` (the key as the bus namespace holds it)."""
    key = kube.objects[f"/api/v1/namespaces/{BUS_NS}/secrets/{bus.KEY_SECRET}"]["data"][bus.KEY_KEY]
    return bus.account_password(base64.b64decode(key), namespace)


def nats_conf(kube: FakeKube) -> str | None:
    return kube.secret_value(BUS_NS, bus.CONFIG_SECRET, bus.CONFIG_KEY)


def writes_to(kube: FakeKube, path_end: str) -> list[str]:
    return [c.method for c in kube.writes if c.path.endswith(path_end)]


# --- a namespace's credentials ---------------------------------------------------------------------------------


async def test_a_namespaces_first_pass_with_three_replicas_creates_its_bus_secret_and_the_next_keeps_it(
    kube: FakeKube,
) -> None:
    kube.put(resourcewatch())
    tokens = Passwords()
    first = await run(kube, token=tokens)
    assert first.bus_account
    assert password(kube) == derived(kube)
    assert tokens.given == []  # derived from the operator's key, not generated per namespace
    assert kube.secret_value("shop", CREDENTIALS, "user") == "mcpg-shop"
    kept = password(kube)
    kube.writes.clear()
    for _ in range(3):
        kube.complete_rollout("shop")
        assert (await run(kube, token=tokens)).bus_account
    assert password(kube) == kept
    assert writes_to(kube, f"/secrets/{CREDENTIALS}") == []


async def test_the_bus_secret_exists_before_the_deployment_that_refers_to_it(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    await run(kube)
    paths = [c.path for c in kube.writes]
    created = paths.index(f"/api/v1/namespaces/shop/secrets/{CREDENTIALS}")
    assert created < paths.index(f"/apis/apps/v1/namespaces/shop/deployments/{objects.NAME}")


async def test_the_gateway_of_three_replicas_gets_the_bus_block_env_and_client_ip_affinity(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    await run(kube)
    assert kube.template_config("shop")["gateway"]["bus"]["password"] == "${env.MCPG_BUS_PASSWORD}"
    deployment = kube.deployment("shop")
    assert deployment is not None
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {e["name"] for e in container["env"]} >= {"MCPG_BUS_URL", "MCPG_BUS_USER", "MCPG_BUS_PASSWORD", "POD_NAME"}
    service = kube.objects[f"/api/v1/namespaces/shop/services/{objects.NAME}"]
    assert service["spec"]["sessionAffinity"] == "ClientIP"


async def test_with_one_replica_no_bus_secret_no_bus_block_and_no_affinity(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    outcome = await run(kube, defaults=ONE)
    assert not outcome.bus_account
    assert password(kube) is None
    assert "bus" not in kube.template_config("shop")["gateway"]
    service = kube.objects[f"/api/v1/namespaces/shop/services/{objects.NAME}"]
    assert service["spec"]["sessionAffinity"] == "None"


async def test_the_bus_secret_is_owned_by_every_watch_so_it_stays_while_one_is_left(kube: FakeKube) -> None:
    kube.put(resourcewatch("a"))
    await run(kube)
    kube.put(resourcewatch("b"))
    await run(kube)
    secret = kube.objects[f"/api/v1/namespaces/shop/secrets/{CREDENTIALS}"]
    assert sorted(o["name"] for o in secret["metadata"]["ownerReferences"]) == ["a", "b"]


@pytest.mark.parametrize(("defaults", "settings"), [(ONE, MANAGED), (THREE, EXTERNAL)], ids=["one replica", "external"])
async def test_back_to_one_replica_or_external_the_bus_secret_goes_once_every_pod_runs_without_it(
    kube: FakeKube, defaults: GatewayDefaults, settings: BusSettings
) -> None:
    kube.put(resourcewatch())
    await run(kube)
    kube.complete_rollout("shop")
    outcome = await run(kube, defaults=defaults, settings=settings)  # the new template is applied; old pods
    assert outcome.bus_account  # may still read the Secret
    assert password(kube) is not None
    kube.complete_rollout("shop")
    assert not (await run(kube, defaults=defaults, settings=settings)).bus_account
    assert password(kube) is None


async def test_after_the_last_watch_the_garbage_collectors_removal_is_reported_as_a_lost_account(
    kube: FakeKube,
) -> None:
    kube.put(resourcewatch())
    await run(kube)
    kube.remove(f"/apis/mcpg.dev/v1alpha1/namespaces/shop/resourcewatches/{resourcewatch()['metadata']['name']}")
    assert (await run(kube)).bus_account  # not collected yet
    kube.remove(f"/api/v1/namespaces/shop/secrets/{CREDENTIALS}")  # the garbage collector's work
    assert not (await run(kube)).bus_account


async def test_a_pass_that_only_generates_a_webhook_token_reports_the_credentials_as_read(kube: FakeKube) -> None:
    kube.put(webhooktoken(generate=True))
    kube.put(resourcewatch())
    first = await run(kube)
    assert first.rerun
    assert not first.bus_account  # created by the next pass, which reports it
    assert (await run(kube)).bus_account


async def test_an_external_bus_needs_no_secret_of_ours(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    outcome = await run(kube, settings=EXTERNAL)
    assert not outcome.bus_account
    assert password(kube) is None
    block = kube.template_config("shop")["gateway"]["bus"]
    assert (block["subject_prefix"], block["bucket"]) == ("mcpg.shop", "mcpg-shop")


@pytest.mark.parametrize(
    "written",
    [{"user": "me", "password": "mine"}, {"user": "mcpg-shop", "password": "p" * 1_048_000}],
    ids=["unlabelled", "labelled, a megabyte"],
)
async def test_a_secret_of_the_credentials_name_that_the_operator_did_not_write_is_replaced(
    kube: FakeKube, written: dict[str, str]
) -> None:
    labels = {bus.CREDENTIALS_LABEL: "true"} if len(written["password"]) > 100 else {}
    kube.set_secret("shop", CREDENTIALS, **written)
    kube.objects[f"/api/v1/namespaces/shop/secrets/{CREDENTIALS}"]["metadata"]["labels"] = labels
    kube.put(resourcewatch())
    await run(kube)
    assert password(kube) == derived(kube)
    assert kube.secret_value("shop", CREDENTIALS, "user") == "mcpg-shop"
    kube.writes.clear()
    await run(kube)
    assert writes_to(kube, f"/secrets/{CREDENTIALS}") == []  # as made: left alone


async def test_an_unlabelled_secret_of_that_name_is_never_deleted_when_the_bus_is_not_used(kube: FakeKube) -> None:
    kube.set_secret("shop", CREDENTIALS, user="me", password="mine")
    kube.put(resourcewatch())
    for _ in range(2):
        await run(kube, defaults=ONE)
        kube.complete_rollout("shop")
    assert password(kube) == "mine"
    assert writes_to(kube, f"/secrets/{CREDENTIALS}") == []


async def test_the_password_is_the_same_for_every_pass_and_process_and_rolls_the_pods_when_it_changes(
    kube: FakeKube,
) -> None:
    kube.put(resourcewatch())
    await run(kube)
    first = derived(kube)
    kube.complete_rollout("shop")
    assert await BusKey(kube, BUS_NS).password("shop") == first  # another process reads the same key
    template = kube.deployment("shop")["spec"]["template"]  # type: ignore[index]
    kube.remove(f"/api/v1/namespaces/{BUS_NS}/secrets/{bus.KEY_SECRET}")  # an administrator's new key
    await run(kube)
    assert password(kube) == derived(kube) != first
    assert kube.deployment("shop")["spec"]["template"] != template  # type: ignore[index]


async def test_a_bus_key_secret_without_a_usable_key_is_refused_naming_it(kube: FakeKube) -> None:
    kube.set_secret(BUS_NS, bus.KEY_SECRET, key="short")
    with pytest.raises(UnusableKey, match=f"the Secret {bus.KEY_SECRET} in namespace {BUS_NS} holds no usable key"):
        await BusKey(kube, BUS_NS).key()


# --- the managed server ----------------------------------------------------------------------------------------


async def test_the_managed_server_lists_the_namespaces_account_and_a_second_run_writes_nothing(
    kube: FakeKube,
) -> None:
    kube.put(resourcewatch())
    await run(kube)
    await bus_reconcile.reconcile(kube, MANAGED)
    conf = nats_conf(kube)
    assert conf is not None
    assert f'{{user: "mcpg-shop", password: "{derived(kube)}"}}' in conf
    kube.writes.clear()
    await bus_reconcile.reconcile(kube, MANAGED)
    assert kube.writes == []


async def test_a_namespace_gaining_an_account_changes_the_config_and_leaves_the_server_running(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    await run(kube)
    await bus_reconcile.reconcile(kube, MANAGED)
    kube.put(in_ns("mail", resourcewatch()))
    await run(kube, "mail")
    kube.writes.clear()
    await bus_reconcile.reconcile(kube, MANAGED)
    assert '"mcpg-mail"' in (nats_conf(kube) or "")
    assert writes_to(kube, f"/deployments/{bus.NAME}") == []  # the sidecar reloads it: no new server


async def test_without_any_account_the_server_is_removed_and_then_nothing_is_written(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    await run(kube)
    await bus_reconcile.reconcile(kube, MANAGED)
    kube.remove(f"/apis/mcpg.dev/v1alpha1/namespaces/shop/resourcewatches/{resourcewatch()['metadata']['name']}")
    await bus_reconcile.reconcile(kube, MANAGED)
    assert not [p for p in kube.objects if f"/namespaces/{BUS_NS}/" in p and bus.KEY_SECRET not in p]
    kube.writes.clear()
    await bus_reconcile.reconcile(kube, MANAGED)
    assert kube.writes == []


async def test_an_account_exists_only_for_a_namespace_the_operator_serves_not_for_a_secret_a_tenant_wrote(
    kube: FakeKube,
) -> None:
    kube.put(resourcewatch())
    await run(kube)
    kube.set_secret("evil", CREDENTIALS, user="mcpg-evil", password="p" * 1_048_000)
    kube.objects[f"/api/v1/namespaces/evil/secrets/{CREDENTIALS}"]["metadata"]["labels"] = {
        bus.CREDENTIALS_LABEL: "true"
    }
    await bus_reconcile.reconcile(kube, MANAGED)
    conf = nats_conf(kube) or ""
    assert f'{{user: "mcpg-shop", password: "{derived(kube)}"}}' in conf
    assert '"mcpg-evil"' not in conf
    assert len(conf) < 1000


async def test_a_namespace_whose_secret_was_tampered_with_keeps_its_derived_account_and_gets_its_secret_back(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    for namespace in ("shop", "mail"):
        kube.put(in_ns(namespace, resourcewatch()))
        await run(kube, namespace)
    evil = 'x" } "mcpg-shop": { users: [{user: "a", password: "b"}] } #'
    secret = kube.objects[f"/api/v1/namespaces/mail/secrets/{CREDENTIALS}"]
    secret["data"]["password"] = base64.b64encode(evil.encode()).decode()
    with caplog.at_level(logging.DEBUG):
        await bus_reconcile.reconcile(kube, MANAGED)
        await run(kube, "mail")
    conf = nats_conf(kube) or ""
    assert f'{{user: "mcpg-mail", password: "{derived(kube, "mail")}"}}' in conf
    assert conf.count('user: "mcpg-shop"') == 1
    assert password(kube, "mail") == derived(kube, "mail")
    assert evil not in caplog.text


async def test_a_deleted_namespaces_account_goes_and_the_others_stay(kube: FakeKube) -> None:
    for namespace in ("shop", "mail"):
        kube.put(in_ns(namespace, resourcewatch()))
        await run(kube, namespace)
    await bus_reconcile.reconcile(kube, MANAGED)
    for path in [p for p in kube.objects if "/namespaces/mail/" in p]:  # the namespace and all in it
        kube.remove(path)
    await bus_reconcile.reconcile(kube, MANAGED)
    conf = nats_conf(kube) or ""
    assert ('"mcpg-shop"' in conf, '"mcpg-mail"' in conf) == (True, False)


async def test_a_namespace_moving_to_one_replica_keeps_its_account_until_its_pods_run_without_the_bus(
    kube: FakeKube,
) -> None:
    kube.put(resourcewatch())
    await run(kube)
    kube.complete_rollout("shop")
    await run(kube, defaults=ONE)  # the new template is applied; the old pods still use the bus
    await bus_reconcile.reconcile(kube, MANAGED, defaults=ONE)
    assert '"mcpg-shop"' in (nats_conf(kube) or "")
    kube.complete_rollout("shop")
    await run(kube, defaults=ONE)
    await bus_reconcile.reconcile(kube, MANAGED, defaults=ONE)
    assert nats_conf(kube) is None


async def test_the_rendered_configuration_stays_within_its_bound_and_keeps_the_namespaces_it_lists() -> None:
    passwords = {f"ns-{i:05d}": "p" * 43 for i in range(3000)}
    first, left_out = bus.fitting(passwords, frozenset())
    assert len(bus.nats_config(first)) <= bus.MAX_CONFIG_BYTES
    assert left_out
    assert len(first) + len(left_out) == 3000
    joined = {"a-new-one": "q" * 43, **passwords}
    again, left_out = bus.fitting(joined, bus.listed_accounts(bus.nats_config(first)))
    assert again == first  # full: the newcomer waits, nobody listed is dropped
    assert "a-new-one" in left_out


def test_an_entry_that_cannot_be_written_safely_leaves_that_namespace_out_and_the_others_in() -> None:
    kept, left_out = bus.fitting({"shop": "p" * 43, "mail": 'x"}', "Bad_NS": "p" * 43}, frozenset())
    assert (list(kept), left_out) == (["shop"], ["Bad_NS", "mail"])


async def test_watching_listed_namespaces_serves_accounts_only_there(kube: FakeKube) -> None:
    for namespace in ("shop", "mail"):
        kube.put(in_ns(namespace, resourcewatch()))
        await run(kube, namespace)
    await bus_reconcile.reconcile(kube, MANAGED, watch_namespaces=("shop",))
    conf = nats_conf(kube) or ""
    assert ('"mcpg-shop"' in conf, '"mcpg-mail"' in conf) == (True, False)


# --- the in-memory API lists as the API server does ----------------------------------------------------------


def labelled(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": labels}}


async def test_the_fake_lists_a_resource_of_every_namespace_in_the_api_servers_order_and_by_label(
    kube: FakeKube,
) -> None:
    for namespace, name in (("shop", "b"), ("mail", "z"), ("shop", "a"), ("mail-2", "a")):
        kube.put(labelled(namespace, name, **{bus.CREDENTIALS_LABEL: "true"}))
    kube.put(labelled("shop", "other", team="x"))
    kube.put(in_ns("shop", resourcewatch()))

    async def listed(path: str, selector: str | None = None) -> list[tuple[str, str]]:
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in await kube.list(path, selector)]

    # The API server's order is its storage keys' (`<namespace>/<name>`, bytewise): "mail-2/" sorts before "mail/".
    every = [("mail-2", "a"), ("mail", "z"), ("shop", "a"), ("shop", "b")]
    assert await listed("/api/v1/secrets", f"{bus.CREDENTIALS_LABEL}=true") == every
    assert await listed("/api/v1/secrets") == [*every, ("shop", "other")]
    assert await listed("/api/v1/namespaces/shop/secrets", "team!=y") == [
        ("shop", "a"),
        ("shop", "b"),
        ("shop", "other"),
    ]
    assert await listed("/api/v1/secrets", f"!{bus.CREDENTIALS_LABEL},team==x") == [("shop", "other")]
    assert await listed("/apis/mcpg.dev/v1alpha1/resourcewatches") == [("shop", "hook")]
    assert await listed("/apis/apps/v1/secrets") == []  # another API group's collection of that name
    with pytest.raises(ValueError, match="not supported"):
        await kube.list("/api/v1/secrets", "team in (x,y)")


# --- no password anywhere else ---------------------------------------------------------------------------------


async def test_a_bus_password_appears_in_no_status_event_annotation_or_log_line(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    kube.put(webhooktoken())
    kube.set_secret("shop", "tok-secret", token="t0")
    kube.put(resourcewatch())
    kube.put(resourcewatch("broken", token="missing"))  # a refused watch: statuses and Events of both kinds
    tokens = Passwords()
    for _ in range(4):
        await run(kube, token=tokens)
        kube.complete_rollout("shop")
        await bus_reconcile.reconcile(kube, MANAGED)
    secret = password(kube)
    assert secret is not None
    assert secret not in caplog.text
    allowed = {f"/api/v1/namespaces/shop/secrets/{CREDENTIALS}", f"/api/v1/namespaces/{BUS_NS}/secrets/mcpg-bus-config"}
    for path, obj in kube.objects.items():
        shown = {k: v for k, v in obj.items() if k != "data"} if path in allowed else obj
        if obj.get("kind") == "Secret" and path not in allowed:
            shown = {**obj, "data": observed.decode(obj)}  # a configuration Secret holds YAML, not base64
        assert secret not in json.dumps(shown), path
    events = [c.body for c in kube.writes if c.body and c.body.get("kind") == "Event"]
    assert events
    assert all(secret not in json.dumps(e) for e in events)


# --- how the bus step follows the namespaces -------------------------------------------------------------------


def operator_settings(replicas: int, bus_settings: BusSettings = MANAGED) -> OperatorSettings:
    return OperatorSettings(gateway=GatewayDefaults(replicas=replicas), bus=bus_settings)


@pytest.mark.parametrize(("replicas", "settings"), [(1, MANAGED), (3, EXTERNAL)])
def test_no_bus_step_runs_without_a_managed_bus(replicas: int, settings: BusSettings) -> None:
    assert handlers.bus_scheduler(FakeKube(), operator_settings(replicas, settings)) is None


async def test_the_bus_step_follows_a_namespace_that_gains_or_loses_its_account_and_its_first_pass() -> None:
    bus_runs: list[str] = []

    async def bus_step(key: str) -> reconcile.Outcome:
        bus_runs.append(key)
        return reconcile.Outcome()

    outcomes = iter([True, True, False, False, True])

    async def namespace_pass(_: str) -> reconcile.Outcome:
        return reconcile.Outcome(bus_account=next(outcomes))

    bus_scheduler = Scheduler(bus_step)
    namespaces = Scheduler(namespace_pass, after=handlers.follow_bus_accounts(bus_scheduler, BUS_NS))
    seen = []
    for _ in range(5):
        namespaces.request("shop")
        async with asyncio.timeout(5):
            await namespaces.idle("shop")
            if bus_scheduler.known():
                await bus_scheduler.idle(BUS_NS)
        seen.append(len(bus_runs))
    assert seen == [1, 1, 2, 2, 3]  # the first pass, then each change
    assert set(bus_runs) == {BUS_NS}
    await namespaces.close()
    await bus_scheduler.close()


async def test_the_bus_scheduler_runs_the_step_for_the_settings(kube: FakeKube) -> None:
    kube.put(resourcewatch())
    await run(kube)
    scheduler = handlers.bus_scheduler(kube, operator_settings(3))
    assert scheduler is not None
    scheduler.request(BUS_NS)
    async with asyncio.timeout(5):
        await scheduler.idle(BUS_NS)
    await scheduler.close()
    assert '"mcpg-shop"' in (nats_conf(kube) or "")


async def test_a_change_of_any_bus_secret_asks_the_bus_step_to_run_and_other_secrets_do_not() -> None:
    asked: list[str] = []

    async def step(key: str) -> reconcile.Outcome:
        asked.append(key)
        return reconcile.Outcome()

    async def namespace_pass(_: str) -> reconcile.Outcome:
        return reconcile.Outcome()

    namespaces, bus_runs = Scheduler(namespace_pass), Scheduler(step)
    bus_runs.request(BUS_NS)  # as at start
    async with asyncio.timeout(5):
        await bus_runs.idle(BUS_NS)
        handlers.secret_changed("mail", {"team": "x"}, namespaces, bus_runs)
        await bus_runs.idle(BUS_NS)
        assert asked == [BUS_NS]
        handlers.secret_changed("mail", {bus.CREDENTIALS_LABEL: "true"}, namespaces, bus_runs)
        await bus_runs.idle(BUS_NS)
    assert asked == [BUS_NS, BUS_NS]
    assert namespaces.known() == []  # a namespace without mcpg objects is not reconciled for it
    handlers.secret_changed("mail", {bus.CREDENTIALS_LABEL: "true"}, namespaces, None)  # no managed bus: no step
    await namespaces.close()
    await bus_runs.close()
