"""Asking each gateway pod what it serves: the pods that may count, and those not Ready that are not being deleted
(only such a pod can say why it is not Ready), are asked, over HTTP on the admin port, and a pod that does not
answer (or answers something else) is one whose acknowledgement is missing, with the kind of failure kept and never
what it said."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from mcpg_gateway.contract import acknowledgement
from mcpg_gateway.contract.acknowledgement import Acknowledgement, Serving
from mcpg_operator import acks, objects
from mcpg_testing.fake_kube import FakeKube

NS = "shop"
ACK = Acknowledgement(instance="p", serving=Serving(digest="d" * 64, entries=["e" * 16], since=1.0, source="secret"))
LEAK = "password=hunter2"


async def test_pods_with_an_ip_are_asked_unless_unready_and_going_and_each_answer_or_failure_lands_on_its_pod(
    kube: FakeKube,
) -> None:
    ready = kube.start_pod(NS, "mcpg-gateway-abc")
    silent = kube.start_pod(NS, "mcpg-gateway-abc")
    starting = kube.start_pod(NS, "mcpg-gateway-abc")
    going = kube.start_pod(NS, "mcpg-gateway-abc")
    for pod in (ready, silent):
        pod.ready = True
        kube.sync_pod(pod)
    going.deleting = True
    kube.sync_pod(going)
    silent.answers = False
    asked: list[str] = []

    async def fetch(ip: str) -> Acknowledgement:
        asked.append(ip)
        return await kube.acknowledgement(ip)

    pods = {p.name: p for p in await acks.read(kube, NS, fetch)}
    assert sorted(asked) == sorted([ready.ip, silent.ip, starting.ip])  # not the unready one being deleted
    assert (pods[ready.name].counted, pods[ready.name].acknowledgement) == (True, ready.acknowledgement())
    assert (pods[silent.name].counted, pods[silent.name].missing) == (True, "ConnectionRefusedError")
    # Not Ready: heard, and never counted.
    assert (pods[starting.name].counted, pods[starting.name].acknowledgement) == (False, starting.acknowledgement())
    assert (pods[going.name].asked, pods[going.name].acknowledgement) == (False, None)
    [listed] = [r for r in kube.reads if r.path.endswith("/pods")]
    assert listed.label_selector == "app.kubernetes.io/name=mcpg-gateway"


async def test_a_fetch_that_hangs_is_a_missing_acknowledgement_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(acks, "TIMEOUT_S", 0.01)
    never = asyncio.Event()

    async def hangs(ip: str) -> Acknowledgement:
        await never.wait()
        raise AssertionError("unreachable")

    assert await acks.answers_of(["10.0.0.9"], hangs) == ["TimeoutError"]


def test_an_answer_that_is_not_an_acknowledgement_is_refused_without_quoting_it() -> None:
    with pytest.raises(acks.Unacknowledged) as raised:
        acks.parse(f'{{"secret": "{LEAK}"}}'.encode())
    assert str(raised.value) == "not an acknowledgement"
    assert acks.parse(ACK.model_dump_json().encode()) == ACK


# --- over HTTP, on loopback ----------------------------------------------------------------------------------


@pytest.fixture
async def admin_ports(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """127.0.0.1 answers an acknowledgement, .2 a body that is none, .3 a 500; nothing listens on .4."""

    async def answer(request: web.Request) -> web.Response:
        host = request.url.host
        if host == "127.0.0.1":
            return web.Response(text=ACK.model_dump_json(), content_type="application/json")
        if host == "127.0.0.2":
            return web.Response(text=LEAK)
        return web.Response(status=500, text=LEAK)

    app = web.Application()
    app.router.add_get(acknowledgement.PATH, answer)
    runner = web.AppRunner(app)
    await runner.setup()
    first = web.TCPSite(runner, "127.0.0.1", 0)
    await first.start()
    port = runner.addresses[0][1]
    for host in ("127.0.0.2", "127.0.0.3"):
        await web.TCPSite(runner, host, port).start()
    monkeypatch.setattr(objects, "ADMIN_PORT", port)
    try:
        yield
    finally:
        await runner.cleanup()


@pytest.mark.usefixtures("admin_ports")
async def test_each_pod_is_asked_on_its_admin_port_and_a_failure_keeps_only_its_kind() -> None:
    answers = await acks.answers_of(["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"], None)
    assert answers == [ACK, "not an acknowledgement", "HTTP 500", "ClientConnectorError"]
    assert LEAK not in str(answers)
