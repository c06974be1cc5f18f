"""A managed bus left over: the operator that no longer runs one (gateway replicas 1, or an external bus) removes
the server it ran before, once at start, and only what it made, against an in-memory API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import kopf
import pytest

from mcpg_operator import actions as w
from mcpg_operator import bus, bus_reconcile, handlers
from mcpg_operator import kube as api
from mcpg_operator.reconcile import run as reconcile
from mcpg_operator.reconcile import write
from mcpg_operator.settings import BusSettings, GatewayDefaults, OperatorSettings
from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import Clock, resourcewatch

BUS_NS_SECRETS = "/api/v1/namespaces/mcpg-system/secrets"
BUS_NS = "mcpg-system"
MANAGED = BusSettings(namespace=BUS_NS)
EXTERNAL = BusSettings("external", BUS_NS, url="nats://nats.example:4222", credentials_secret="nats-creds")
SERVER = {
    "secrets": f"/api/v1/namespaces/{BUS_NS}/secrets/{bus.CONFIG_SECRET}",
    "services": f"/api/v1/namespaces/{BUS_NS}/services/{bus.NAME}",
    "deployments": f"/apis/apps/v1/namespaces/{BUS_NS}/deployments/{bus.NAME}",
}
THREE = GatewayDefaults(replicas=3)
NO_SERVER = [(1, MANAGED), (3, EXTERNAL)]
"""The operator runs no server: one gateway replica (managed mode), or an external bus."""
FORBIDDEN = (
    b'{"kind":"Status","reason":"Forbidden","message":"services \\"mcpg-bus\\" is forbidden: User '
    b'\\"system:serviceaccount:mcpg-system:mcpg-operator\\" cannot delete resource \\"services\\" in API group '
    b'\\"\\" in the namespace \\"mcpg-system\\""}'
)
"""The API server's answer to a request RBAC does not allow."""
BY_HAND = (
    "kubectl -n mcpg-system delete deployment,service,secret "
    "-l app.kubernetes.io/managed-by=mcpg-operator,app.kubernetes.io/name=mcpg-bus"
)


def config(replicas: int, bus_settings: BusSettings) -> OperatorSettings:
    return OperatorSettings(gateway=GatewayDefaults(replicas=replicas), bus=bus_settings)


def constant(value: str) -> Callable[[], str]:
    return lambda: value


def password(n: int) -> str:
    return f"password-{n:02d}-" + "p" * 32


async def left_over_server(kube: FakeKube, namespaces: tuple[str, ...] = ("shop", "mail")) -> list[str]:
    """What an operator with three gateway replicas and a managed bus left: a server holding these passwords."""
    for namespace in namespaces:
        kube.put({**resourcewatch(), "metadata": {"name": "hook", "namespace": namespace}})
        await reconcile.reconcile(kube, namespace, THREE, Clock(), bus_settings=MANAGED, fetch=kube.acknowledgement)
    await bus_reconcile.reconcile(kube, MANAGED)
    assert all(path in kube.objects for path in SERVER.values())
    return [kube.secret_value(ns, bus.CREDENTIALS_SECRET, bus.PASSWORD_KEY) or "" for ns in namespaces]


async def start(kube: FakeKube, settings: OperatorSettings) -> kopf.Memo:
    """The operator's start, as its startup handler does it, until the removal of a server left over is done."""
    memo = kopf.Memo()
    handlers.start(memo, kube, settings)
    if memo.leftovers:
        async with asyncio.timeout(5):
            await memo.leftovers.idle(settings.bus.namespace)
    return memo


KINDS = {"secrets": ("v1", "Secret", bus.CONFIG_SECRET), "services": ("v1", "Service", bus.NAME)}


def look_alike(plural: str) -> dict[str, Any]:
    """A user's object of a server object's name, without the operator's managed-by label."""
    api_version, kind, name = KINDS.get(plural, ("apps/v1", "Deployment", bus.NAME))
    meta = {"name": name, "namespace": BUS_NS, "labels": {"app.kubernetes.io/managed-by": "Helm"}}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


# --- the decision ----------------------------------------------------------------------------------------------


def ours(ref: w.Ref) -> dict[str, Any]:
    return {"metadata": {"name": ref.name, "labels": dict(bus.LABELS)}}


def test_every_object_of_the_server_the_operator_made_is_deleted_the_secret_with_the_passwords_first() -> None:
    live = {ref: ours(ref) for ref in reversed(bus_reconcile.REFS)}
    decided = bus_reconcile.leftovers(live)
    assert [x.ref.plural for x in decided] == ["secrets", "services", "deployments"]
    assert all(isinstance(x, w.DeleteObject) for x in decided)


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({}, id="no labels"),
        pytest.param({"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/name": "mcpg-bus"}, id="Helm's"),
    ],
)
def test_an_object_of_the_same_name_without_the_operators_managed_by_label_is_left_alone(
    labels: dict[str, str],
) -> None:
    [secret, *rest] = bus_reconcile.REFS
    live = {secret: {"metadata": {"name": secret.name, "labels": labels}}, **{ref: ours(ref) for ref in rest}}
    assert [x.ref for x in bus_reconcile.leftovers(live)] == rest


def test_nothing_there_or_already_being_deleted_is_nothing_to_do() -> None:
    going = {"metadata": {"labels": dict(bus.LABELS), "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert bus_reconcile.leftovers(dict.fromkeys(bus_reconcile.REFS)) == []
    assert bus_reconcile.leftovers(dict.fromkeys(bus_reconcile.REFS, going)) == []


@pytest.mark.parametrize(
    ("replicas", "settings", "runs_server"), [*[(*x, False) for x in NO_SERVER], (3, MANAGED, True)]
)
def test_the_removal_is_wired_exactly_when_the_operator_runs_no_server(
    replicas: int, settings: BusSettings, runs_server: bool
) -> None:
    wired = handlers.leftover_bus_removal(FakeKube(), config(replicas, settings))
    assert (wired is None) == runs_server
    assert (handlers.bus_scheduler(FakeKube(), config(replicas, settings)) is None) != runs_server


def test_without_a_known_bus_namespace_nothing_is_looked_for() -> None:
    assert handlers.leftover_bus_removal(FakeKube(), config(1, BusSettings())) is None


# --- the flow, from the operator's start -----------------------------------------------------------------------


@pytest.mark.parametrize(("replicas", "settings"), NO_SERVER)
async def test_a_start_without_a_server_in_use_removes_the_one_left_over_and_the_next_start_finds_nothing(
    kube: FakeKube, replicas: int, settings: BusSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    given = await left_over_server(kube)
    kube.writes.clear()
    memo = await start(kube, config(replicas, settings))
    assert [(c.method, c.path) for c in kube.writes] == [("delete", path) for path in SERVER.values()]
    # The key stays: if the bus is used again, every namespace gets the password its Secret still holds.
    assert [p for p in kube.objects if f"/namespaces/{BUS_NS}/" in p] == [f"{BUS_NS_SECRETS}/{bus.KEY_SECRET}"]
    # Each namespace's own credentials are its passes' to remove, once its gateway runs without them.
    assert kube.secret_value("shop", bus.CREDENTIALS_SECRET, bus.PASSWORD_KEY) == given[0]
    assert f"removed the managed bus left over in namespace {BUS_NS}" in caplog.text
    await handlers.stop(memo)
    kube.writes.clear()
    await handlers.stop(await start(kube, config(replicas, settings)))
    assert kube.writes == []
    assert all(value not in caplog.text for value in given)


async def test_a_users_objects_of_the_same_names_are_never_touched(kube: FakeKube) -> None:
    for plural in SERVER:
        kube.put(look_alike(plural))
    before = {path: dict(kube.objects[path]) for path in SERVER.values()}
    await handlers.stop(await start(kube, config(1, MANAGED)))
    assert kube.writes == []
    assert {path: kube.objects[path] for path in SERVER.values()} == before


async def test_a_delete_forbidden_by_rbac_is_one_warning_with_the_way_out_and_no_retry(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    given = await left_over_server(kube)
    kube.refuse(SERVER["services"], api.refusal(403, FORBIDDEN))
    kube.writes.clear()
    caplog.clear()
    memo = await start(kube, config(1, MANAGED))
    assert [c.path for c in kube.writes] == [SERVER["secrets"], SERVER["services"]]  # the passwords went first
    # One line, no traceback, and no error: a failed run would be logged by the scheduler, and retried. (Beside
    # the write phase's line for the Secret it did delete.)
    assert [r.getMessage() for r in caplog.records if r.name == write.__name__] == [
        "namespace mcpg-system: deleted Secret mcpg-bus-config"
    ]
    [line] = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != write.__name__]
    assert (line.name, line.levelname, line.exc_info) == (bus_reconcile.__name__, "WARNING", None)
    assert 'services "mcpg-bus" is forbidden' in line.getMessage()
    assert BY_HAND in line.getMessage()
    assert all(value not in caplog.text for value in given)
    await handlers.stop(memo)


async def test_a_read_forbidden_by_rbac_is_one_note_and_nothing_else(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    kube.refuse(SERVER["secrets"], api.refusal(403, FORBIDDEN), reads=True)
    memo = await start(kube, config(3, EXTERNAL))
    [line] = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert (line.name, line.levelname) == (bus_reconcile.__name__, "INFO")
    assert "not looking for a managed bus left over in namespace mcpg-system" in line.getMessage()
    assert BY_HAND in line.getMessage()
    assert kube.writes == []
    await handlers.stop(memo)
