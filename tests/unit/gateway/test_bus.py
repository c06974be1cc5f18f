"""The bus: N gateways serve as one. Pure parts first (subjects, names, health), then real gateways in this
process sharing a real nats-server (the `bus_server` tests): fan-out exactly once, an outage and the recovery."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import nats as nats_py
import pytest

from mcpg_gateway import bus
from mcpg_gateway.contract import config
from mcpg_testing import BOUND_S, processes
from mcpg_testing.clients import Subscription, subscribed
from mcpg_testing.configs import bus_section, gateway_config, watched
from mcpg_testing.gateways import ADMIN_TOKEN, SENTINEL_TOKEN, SENTINEL_URI, GatewayFactory, RunningGateway, sentinel
from mcpg_testing.servers import NatsServer, ServerProcess, start_nats
from mcpg_testing.tcpproxy import TcpProxy

HOOK, TOKEN = "drive://folder/reports", "tok"
STOCK = "stock://items"
PASSWORD_ENV = "BUS_PASSWORD"


# --- pure parts ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("uri", ["drive://a.b/c", "x://*", "x://>", "x:// spaced", "y://" + "é" * 300])
def test_a_fire_subject_carries_a_fixed_length_hash_of_the_uri_never_the_uri(uri: str) -> None:
    subject = bus.fire_subject("mcpg.prod", uri)
    prefix, _, token = subject.rpartition(".")
    assert prefix == "mcpg.prod.fire"
    assert len(token) == 32
    assert set(token) <= set("0123456789abcdef")
    assert bus.fire_subject("mcpg.prod", uri) == subject
    assert bus.fire_subject("mcpg.prod", uri + "x") != subject


def test_the_instance_is_the_configured_name_else_the_pod_name_else_host_and_process() -> None:
    named = config.BusConfig(url="nats://h:4222", instance="gw-1")
    unnamed = config.BusConfig(url="nats://h:4222")
    assert bus.instance_name(named, {"POD_NAME": "pod-a"}) == "gw-1"
    assert bus.instance_name(unnamed, {"POD_NAME": "pod-a"}) == "pod-a"
    assert bus.instance_name(unnamed, {}).endswith(f"-{os.getpid()}")


@pytest.mark.parametrize(("url", "where"), [("nats://h:4222", "h:4222"), ("tls://u:p@h:4443", "h:4443")])
def test_the_bus_is_shown_as_host_and_port_only(url: str, where: str) -> None:
    assert bus.address(url) == where


def test_health_turns_unready_only_after_the_grace_and_ready_again_on_reconnect() -> None:
    health = bus.Health(grace_s=5.0, down_since=None)
    assert not health.unready(100.0)
    health.down(100.0)
    health.down(103.0)  # still down since the first loss
    assert not health.unready(104.9)
    assert health.unready(105.0)
    health.up()
    assert not health.unready(1000.0)


# --- gateways on a real bus ------------------------------------------------------------------------------------


@dataclass
class Setup:
    """`gateway.bus` for one test: its own subject prefix and buckets, so tests sharing a server never meet."""

    server: NatsServer
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"t{uuid.uuid4().hex[:12]}"

    @property
    def env(self) -> dict[str, str]:
        return {PASSWORD_ENV: self.server.password}

    def config(self, instance: str, *resources: dict[str, Any]) -> dict[str, Any]:
        raw = gateway_config(*resources)
        raw["gateway"]["bus"] = bus_section(
            self.server.address, self.server.user, PASSWORD_ENV, self.name, instance=instance
        )
        return raw


def webhook_resources() -> list[dict[str, Any]]:
    return [watched("reports", HOOK, {"type": "webhook", "token": TOKEN}), sentinel()]


async def start(factory: GatewayFactory, setup: Setup, names: list[str], **options: Any) -> list[RunningGateway]:
    return [await factory(setup.config(name, *webhook_resources()), setup.env, **options) for name in names]


async def post(gw: RunningGateway, token: str) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(f"{gw.base}/webhooks/resource-updated/{token}")


async def readyz(gw: RunningGateway) -> tuple[int, Any]:
    async with httpx2.AsyncClient() as http:
        resp = await http.get(f"{gw.base}/readyz")
    return resp.status_code, resp.json()


async def only_sentinel_follows(gw: RunningGateway, subs: list[Subscription]) -> None:
    """Post the sentinel once (every gateway's subscribers hear it) and prove nothing else was pending before it."""
    assert (await post(gw, SENTINEL_TOKEN)).status_code == 200
    for sub in subs:
        assert await sub.next_update() == SENTINEL_URI
        assert sub.drained() == []


@contextlib.asynccontextmanager
async def subscribers(
    gws: list[RunningGateway], modes: list[str], uris: list[str]
) -> AsyncIterator[list[Subscription]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(subscribed(g.mcp_url, m, uris)) for g, m in zip(gws, modes, strict=True)]


def sample(gw: RunningGateway, name: str, **labels: str) -> float:
    return gw.gw.metrics.registry.get_sample_value(name, labels) or 0.0


async def until_connected(gw: RunningGateway, connected: bool = True) -> None:
    the_bus = gw.gw.bus
    assert the_bus is not None
    async with asyncio.timeout(BOUND_S):
        await the_bus.until(lambda: the_bus.connected is connected)


async def test_a_webhook_to_one_gateway_tells_every_subscriber_on_every_gateway_exactly_once(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    gws = await start(gateway_factory, Setup(bus_server), ["a", "b", "c"])
    async with subscribers(gws, ["legacy", "listen", "listen"], [HOOK, SENTINEL_URI]) as subs:
        resp = await post(gws[1], TOKEN)
        assert (resp.status_code, resp.json()) == (200, {"ok": True, "uri": HOOK})
        for sub in subs:
            assert await sub.next_update() == HOOK
        await only_sentinel_follows(gws[1], subs)
    assert sample(gws[1], "mcpg_bus_fires_published_total", result="ok") == 2  # the hook, then the sentinel
    assert [sample(g, "mcpg_bus_fires_received_total") for g in gws] == [2, 0, 2]  # never its own back


async def test_every_subscriber_of_the_receiving_gateway_is_told_once_too(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    a, b = await start(gateway_factory, Setup(bus_server), ["a", "b"])
    async with subscribers([a, a, b], ["legacy", "listen", "legacy"], [HOOK, SENTINEL_URI]) as subs:
        assert (await post(a, TOKEN)).status_code == 200
        for sub in subs:
            assert await sub.next_update() == HOOK
        await only_sentinel_follows(b, subs)


async def test_a_push_strategy_tells_its_own_subscribers_and_puts_nothing_on_the_bus(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    setup, subject = Setup(bus_server), f"stock.{uuid.uuid4().hex}"
    gws = []
    for name in ("a", "b"):
        raw = setup.config(name, watched("stock", STOCK, {"type": "nats_topic", "subject": subject}), sentinel())
        raw["gateway"]["nats"] = {"url": bus_server.url}
        gws.append(await gateway_factory(raw, setup.env))
    async with subscribers(gws, ["listen", "legacy"], [STOCK, SENTINEL_URI]) as subs:
        nc = await nats_py.connect(bus_server.url)
        await nc.publish(subject, b"anything")
        await nc.close()
        for sub in subs:
            assert await sub.next_update() == STOCK
        await only_sentinel_follows(gws[0], subs)
    assert [sample(g, "mcpg_bus_fires_received_total") for g in gws] == [0, 1]  # only the sentinel crossed


async def test_while_the_bus_is_down_a_webhook_gets_503_and_readyz_turns_unready_after_the_grace(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    setup = Setup(bus_server)
    [strict] = await start(gateway_factory, setup, ["strict"], bus_grace_s=0.0)
    [lenient] = await start(gateway_factory, setup, ["lenient"], bus_grace_s=3600.0)
    assert await readyz(strict) == (200, {"ok": True})
    bus_server.kill()
    try:
        for gw in (strict, lenient):
            await until_connected(gw, False)
        resp = await post(strict, TOKEN)
        assert (resp.status_code, resp.json()) == (503, {"error": "the gateway cannot reach its bus; retry later"})
        assert await readyz(strict) == (503, {"ok": False, "reason": "bus unreachable"})
        assert (await readyz(lenient))[0] == 200  # unreachable, but not for longer than its grace
        assert sample(strict, "mcpg_webhook_requests_total", result="bus_unavailable") == 1
        assert sample(strict, "mcpg_bus_fires_published_total", result="failed") == 1
        assert sample(strict, "mcpg_bus_connected") == 0
    finally:
        await asyncio.to_thread(bus_server.start)
    await until_connected(strict)
    assert await readyz(strict) == (200, {"ok": True})
    assert (await post(strict, TOKEN)).status_code == 200


async def test_a_webhook_arriving_while_the_gateway_reconnects_waits_for_it_instead_of_being_refused(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    """A server restart (a new image, a node drained) costs each gateway one reconnect, within its
    reconnect wait (1 s), and a webhook in that second is published, not answered 503."""
    [gw] = await start(gateway_factory, Setup(bus_server), ["a"])
    bus_server.kill()
    try:
        await until_connected(gw, False)
    finally:
        await asyncio.to_thread(bus_server.start)
    assert gw.gw.bus is not None
    assert not gw.gw.bus.connected, "reconnected before the webhook: nothing to wait for"
    resp = await post(gw, TOKEN)
    assert (resp.status_code, resp.json()) == (200, {"ok": True, "uri": HOOK})
    assert sample(gw, "mcpg_bus_fires_published_total", result="ok") == 1
    assert sample(gw, "mcpg_bus_fires_published_total", result="failed") == 0


async def test_a_connection_lost_before_the_server_confirmed_a_fire_is_published_again_on_the_next(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    """A server restarting behind its Service drops connections mid-request: the fire never reached it, and
    nats-py forgets the confirmation it awaited. The webhook is published on the next connection (200), and
    the other gateway's subscriber is told, rather than the sender getting 503 after a 2 s timeout."""
    proxy = TcpProxy("127.0.0.1", bus_server.port)
    await proxy.start()
    setup = Setup(bus_server)
    try:
        raw = setup.config("cut", *webhook_resources())
        raw["gateway"]["bus"]["url"] = f"nats://{proxy.address}"
        cut = await gateway_factory(raw, setup.env)
        [told] = await start(gateway_factory, setup, ["told"])
        async with subscribers([told], ["listen"], [HOOK, SENTINEL_URI]) as subs:
            proxy.cut_on_next_write()
            resp = await post(cut, TOKEN)
            assert proxy.cuts == 1, "the fire was not the next thing the gateway wrote"
            assert (resp.status_code, resp.json()) == (200, {"ok": True, "uri": HOOK})
            assert await subs[0].next_update() == HOOK
            await only_sentinel_follows(told, subs)
        assert sample(cut, "mcpg_bus_fires_published_total", result="ok") == 1
        assert sample(cut, "mcpg_bus_fires_published_total", result="failed") == 0
    finally:
        await proxy.close()


async def test_after_a_bus_outage_every_gateway_fires_each_uri_it_holds_once(
    gateway_factory: GatewayFactory, bus_server: NatsServer
) -> None:
    gws = await start(gateway_factory, Setup(bus_server), ["a", "b"])
    async with subscribers(gws, ["legacy", "listen"], [HOOK, SENTINEL_URI]) as subs:
        bus_server.kill()
        try:
            for gw in gws:
                await until_connected(gw, False)
        finally:
            await asyncio.to_thread(bus_server.start)
        for gw in gws:
            await until_connected(gw)
        for sub in subs:  # a change during the outage would have been missed: each held URI is told once
            assert {await sub.next_update(), await sub.next_update()} == {HOOK, SENTINEL_URI}
        await only_sentinel_follows(gws[0], subs)
    assert [sample(g, "mcpg_bus_reconnects_total") for g in gws] == [1, 1]


async def test_a_gateway_whose_bus_is_unreachable_at_start_serves_and_connects_when_the_bus_comes(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    [port] = processes.free_ports(1)
    process = ServerProcess("nats-server", [], "Server is ready")
    server = NatsServer(process, "mcpg", secrets.token_urlsafe(12), port=port, store_dir=tmp_path)
    [gw] = await start(gateway_factory, Setup(server), ["late"], bus_connect_wait_s=0.2, bus_grace_s=0.0)
    assert (await post(gw, TOKEN)).status_code == 503
    assert await readyz(gw) == (503, {"ok": False, "reason": "bus unreachable"})
    await asyncio.to_thread(server.start)
    try:
        await until_connected(gw)
        assert (await post(gw, TOKEN)).status_code == 200
        assert await readyz(gw) == (200, {"ok": True})
    finally:
        await gw.shutdown()
        server.stop()


async def test_the_bus_is_shown_as_host_and_port_and_its_password_never_shows(
    gateway_factory: GatewayFactory, bus_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    setup = Setup(bus_server)
    [gw] = await start(gateway_factory, setup, ["a"], admin_token=ADMIN_TOKEN)
    the_bus = gw.gw.bus
    assert the_bus is not None
    async with asyncio.timeout(BOUND_S):
        await the_bus.until(lambda: the_bus.buckets is not None)
    # The wrong password contains the right one: if either reached a log line, the check below would see it.
    wrong = Setup(NatsServer(bus_server.process, bus_server.user, "wrong-" + bus_server.password, bus_server.port))
    [refused] = await start(gateway_factory, wrong, ["refused"], bus_connect_wait_s=0.5)
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as http:
        view = (await http.get(f"{gw.admin}/admin/v1/bus")).json()
        metrics = (await http.get(f"{gw.admin}/metrics")).text
    where = f"127.0.0.1:{bus_server.port}"
    assert view == {
        "bus": {
            "address": where,
            "instance": "a",
            "connected": True,
            "losses": 0,
            "buckets_ready": True,
            "buckets_error": None,
            "ready": True,
            "peers": [],
            "down_long": [],
            "preferred_elsewhere": None,
            "anchor_for": [],
        }
    }
    assert "mcpg_bus_connected 1.0" in metrics
    assert f"connected to the bus at {where}" in caplog.text
    assert f"bus at {where}: " in caplog.text  # the refused one's error, with the address only
    assert refused.gw.bus is not None
    assert not refused.gw.bus.connected
    for text in (caplog.text, metrics, str(view)):
        assert bus_server.password not in text


async def test_without_jetstream_the_buckets_are_reported_once_clearly_and_webhooks_still_reach_every_gateway(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_nats()  # no store directory: JetStream is off
    try:
        setup = Setup(server)
        gws = await start(gateway_factory, setup, ["a", "b"])
        the_bus = gws[0].gw.bus
        assert the_bus is not None
        async with asyncio.timeout(BOUND_S):
            await the_bus.until(lambda: the_bus.buckets_error is not None)
        assert f"{setup.name}-owners, {setup.name}-state and {setup.name}-deliveries" in (the_bus.buckets_error or "")
        assert [r.levelname for r in caplog.records if "key-value buckets" in r.getMessage()].count("ERROR") >= 1
        assert sample(gws[0], "mcpg_bus_buckets_ready") == 0
        async with subscribers(gws, ["legacy", "listen"], [HOOK, SENTINEL_URI]) as subs:
            assert (await post(gws[0], TOKEN)).status_code == 200
            for sub in subs:
                assert await sub.next_update() == HOOK
            await only_sentinel_follows(gws[1], subs)
        for gw in gws:
            await gw.shutdown()
    finally:
        server.stop()


async def publish_then_a_fire(bus_server: NatsServer, setup: Setup, messages: list[tuple[str, bytes]]) -> None:
    """As another client of the account: each `(uri, data)` on `uri`'s fire subject, then one well-formed fire of
    `SENTINEL_URI` on the same connection, which arrives after all of them were handled."""
    nc = await nats_py.connect(bus_server.url)
    try:
        for uri, data in messages:
            await nc.publish(bus.fire_subject(setup.name, uri), data)
        fire = {"uri": SENTINEL_URI, "strategy": "webhook", "origin": "other"}
        await nc.publish(bus.fire_subject(setup.name, SENTINEL_URI), json.dumps(fire).encode())
        await nc.flush()
    finally:
        await nc.close()


async def test_junk_on_the_fire_subjects_tells_nobody_is_counted_and_logged_once_not_per_message(
    gateway_factory: GatewayFactory, bus_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Another client of the account floods the fire subjects: not JSON, no `uri`, and a real URI on a subject
    that is not its hash (a forged fire for the hook, sent where a fire of another URI would go)."""
    setup = Setup(bus_server)
    [gw] = await start(gateway_factory, setup, ["a"])
    junk = [b"not json", b"{}", b'{"uri": 42}', f'{{"uri": "{HOOK}"}}'.encode()]
    async with subscribers([gw], ["listen"], [HOOK, SENTINEL_URI]) as subs:
        caplog.set_level(logging.WARNING, logger="mcpg_gateway.bus")
        forged = [(STOCK if n % 4 == 3 else HOOK, junk[n % 4]) for n in range(400)]
        await publish_then_a_fire(bus_server, setup, forged)
        [sub] = subs
        assert await sub.next_update() == SENTINEL_URI
        assert sub.drained() == []
    assert sample(gw, "mcpg_bus_fires_malformed_total") == 400
    assert sample(gw, "mcpg_bus_fires_received_total") == 1
    warnings = [r for r in caplog.records if "not a fire" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_fire_nested_too_deep_oversized_or_with_a_uri_utf8_cannot_carry_is_junk_like_any_other(
    gateway_factory: GatewayFactory, bus_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """What the JSON parser cannot take (nesting past its depth), what no fire is (larger than any URI makes),
    and a `uri` with a lone surrogate (JSON carries it, UTF-8 cannot, so it hashes to no subject): each is
    counted as junk, and the one warning is the junk's, not a parser's or the client's error callback."""
    setup = Setup(bus_server)
    [gw] = await start(gateway_factory, setup, ["a"])
    surrogate = '{"uri": "\\ud800"}'
    junk = [
        (HOOK, b"[" * 30_000 + b"]" * 30_000),
        (HOOK, json.dumps({"uri": HOOK, "pad": "x" * 64 * 1024}).encode()),
        (HOOK, surrogate.encode()),
    ]
    async with subscribers([gw], ["listen"], [HOOK, SENTINEL_URI]) as subs:
        caplog.set_level(logging.WARNING, logger="mcpg_gateway.bus")
        await publish_then_a_fire(bus_server, setup, junk)
        [sub] = subs
        assert await sub.next_update() == SENTINEL_URI
        assert sub.drained() == []
    assert sample(gw, "mcpg_bus_fires_malformed_total") == len(junk)
    warned = [r.getMessage() for r in caplog.records if r.name == bus.__name__ and r.levelno >= logging.WARNING]
    assert warned == [f"ignored a message on the fire subjects that is not a fire (counted in {bus.MALFORMED})"]
