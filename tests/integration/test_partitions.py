"""Event sources that stop without closing, against real servers: the faults a kill cannot make.

A kill closes every connection, and the gateway hears it at once. These close nothing:
- `partition`: a `TcpProxy` between the gateway and the server black-holes every connection, then resumes;
- `sigstop`: the server process (PostgreSQL: with every backend) is frozen, then continued;
- `nat_forgot`: the proxy strands the open connections for good (an idle timeout in a NAT or load balancer) while
  new ones pass, so the gateway recovers only by giving up on the old connection by itself.
Each proves the liveness rule (`mcpg_gateway.liveness`): the watch is seen dead within its bound (the admin API
and the metrics say so), fires once when its connection is back (a change may have been missed, and one made
during the fault is), and a later change notifies again. Liveness is shortened to 1 s so the bound is seconds;
the rule is the one users get, only faster. Detection and recovery times are printed (`-s` shows them).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import nats as nats_py
import pytest

from mcpg_gateway import liveness
from mcpg_gateway.strategies import postgres_listen_notify, sql_polling
from mcpg_testing import BOUND_S, programs
from mcpg_testing.clients import Subscription, subscribed
from mcpg_testing.clock import ManualClock
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import (
    ADMIN_TOKEN,
    SENTINEL_TOKEN,
    SENTINEL_URI,
    GatewayFactory,
    RunningGateway,
    admin_watches,
    assert_only_sentinel_arrives,
    fired,
    sentinel,
)
from mcpg_testing.images import ImageEnv
from mcpg_testing.recording_upstream import serve_reads
from mcpg_testing.scaleout import (
    ORDERS,
    ORDERS_TOKEN,
    PASSWORD_ENV,
    RECONNECT_BOUND_S,
    assert_refused,
    eventually,
    in_thread,
    member_config,
    post,
    running_nats,
    until_ready,
    write_configs,
)
from mcpg_testing.servers import NatsServer, PostgresServer, ServerProcess, backends, connected, start_nats
from mcpg_testing.tcpproxy import TcpProxy

STOCK, REPORTS, INVENTORY = "stock://levels", "reports://latest", "inventory://current"
LIVENESS = {"interval_s": 1.0, "timeout_s": 1.0}
RULES = liveness.Rules(LIVENESS["interval_s"], LIVENESS["timeout_s"])
PROBE_BOUND_S = RULES.interval_s + RULES.timeout_s
"""The documented bound for a LISTEN or NATS connection: one interval, then one round trip's timeout."""
PING_BOUND_S = 2 * RULES.interval_s
"""The documented bound for the bus: nats-py drops a connection whose PING is unanswered at the next."""
SLACK_S = 1.5
"""What the admin API's polling and a busy 2-core machine add to a measured detection."""
FAULTS = pytest.mark.parametrize("fault", ["partition", "sigstop", "nat_forgot"])


ERA = {"partition": "listen", "sigstop": "legacy", "nat_forgot": "listen"}
"""Both protocol eras see the faults (which era is beside the point: the watch below them is the same)."""
Change = Callable[[], Awaitable[None]]

pytest_plugins = ["mcpg_testing.fixtures"]  # gateway_env: the gateway image's install


def fast_liveness(raw: dict[str, Any]) -> dict[str, Any]:
    raw["gateway"]["liveness"] = LIVENESS
    return raw


@contextlib.asynccontextmanager
async def proxied(port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy("127.0.0.1", port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


@contextlib.contextmanager
def fault_on(kind: str, proxy: TcpProxy, server: ServerProcess) -> Iterator[None]:
    """A partition between the gateway and the server, or the server frozen; over on leaving. (A forgotten
    connection is never over: the proxy strands it for good.)"""
    if kind == "sigstop":
        with server.frozen():
            yield
    elif kind == "partition":
        proxy.blackhole()
        try:
            yield
        finally:
            proxy.resume()
    else:
        proxy.strand()
        yield


async def source(gw: RunningGateway, uri: str) -> dict[str, Any]:
    state: dict[str, Any] = (await admin_watches(gw))[uri]["source"]
    return state


async def seen_down(gw: RunningGateway, uri: str, bound: float) -> float:
    """Seconds until the admin API shows the watch's source down (at most `bound`)."""
    began = time.monotonic()

    async def down() -> bool:
        return bool((await source(gw, uri))["state"] == "down")

    await eventually(down, bound, f"the source of {uri} seen down")
    return time.monotonic() - began


def sample(gw: RunningGateway, name: str, **labels: str) -> float:
    return gw.gw.metrics.registry.get_sample_value(name, labels) or 0.0


async def timed(awaitable: Awaitable[str]) -> tuple[str, float]:
    began = time.monotonic()
    value = await awaitable
    return value, time.monotonic() - began


async def survive(
    fault: str, proxy: TcpProxy, server: ServerProcess, gw: RunningGateway, sub: Subscription, uri: str, change: Change
) -> str:
    """Make `fault` while `sub` holds `uri`; `change` the source meanwhile where the server still runs. Returns what
    was measured. The watch must be told `uri` once, when its connection is back."""
    if fault == "nat_forgot":
        with fault_on(fault, proxy, server):
            await change()  # on the server, which the stranded connection no longer hears from
            told, elapsed = await timed(sub.next_update(PROBE_BOUND_S + SLACK_S))
        assert told == uri
        return f"noticed and reopened, told {elapsed:.2f}s after"
    with fault_on(fault, proxy, server):
        detected = await seen_down(gw, uri, PROBE_BOUND_S + SLACK_S)
        assert sample(gw, "mcpg_watch_sources_down") == 1
        if fault == "partition":
            await change()
    told, recovered = await timed(sub.next_update())
    assert told == uri
    return f"detected {detected:.2f}s, told {recovered:.2f}s after the fault ended"


async def assert_recovered(gw: RunningGateway, uri: str, strategy: str, password: str) -> None:
    """Up again after exactly one loss, to an unanswered round trip; no watch counted down; the address shown is
    the server's, without its password."""
    state = await source(gw, uri)
    assert ":***@127.0.0.1:" in state["address"]
    shown = str(await admin_watches(gw))
    assert password not in shown
    assert quote(password, safe="") not in shown
    assert state["state"] == "up"
    assert state["losses"] == 1
    assert state["last_round_trip"] is not None
    assert sample(gw, "mcpg_watch_source_losses_total", strategy=strategy, cause="unresponsive") == 1
    assert sample(gw, "mcpg_watch_sources_down") == 0


def assert_logged_without(caplog: pytest.LogCaptureFixture, expected: str, password: str) -> None:
    """The loss was logged (`expected` is in a line), and no line shows the password, raw or percent-encoded."""
    assert expected in caplog.text
    assert password not in caplog.text
    assert quote(password, safe="") not in caplog.text


# --- postgres_listen_notify ------------------------------------------------------------------------------------


@FAULTS
async def test_a_listen_connection_that_stops_answering_is_seen_dead_in_bound_then_fires_once_when_back(
    fault: str, gateway_factory: GatewayFactory, postgres: PostgresServer, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with proxied(postgres.port) as proxy:
        url = postgres.url.replace(f":{postgres.port}/", f":{proxy.listen_port}/")
        strategy = {"type": "postgres_listen_notify", "url": url, "channel": "stock_changed"}
        raw = fast_liveness(gateway_config(watched("stock", STOCK, strategy), sentinel()))
        gw = await gateway_factory(raw, admin_token=ADMIN_TOKEN)
        async with subscribed(gw.mcp_url, ERA[fault], [STOCK, SENTINEL_URI]) as sub:

            async def notify() -> None:
                await db.execute("NOTIFY stock_changed")

            measured = await survive(fault, proxy, postgres.process, gw, sub, STOCK, notify)
            assert fired(gw, "postgres_listen_notify") == 1
            await assert_only_sentinel_arrives(gw, sub)
            await assert_recovered(gw, STOCK, "postgres_listen_notify", postgres.password)

            async with connected(postgres.url) as fresh:
                await fresh.execute("NOTIFY stock_changed")
                assert await sub.next_update() == STOCK
                await assert_only_sentinel_arrives(gw, sub)
                if fault != "nat_forgot":  # a forgotten flow's backend stays until the server's own keepalive

                    async def one_backend() -> bool:
                        return await backends(fresh, postgres_listen_notify.APPLICATION_NAME) == 1

                    await eventually(one_backend, BOUND_S, "the abandoned LISTEN backend gone")
    assert_logged_without(caplog, "connection lost (", postgres.password)
    print(f"\nMEASURED postgres_listen_notify {fault}: {measured}")


# --- nats_topic -------------------------------------------------------------------------------------------------


async def publish(url: str, subject: str) -> None:
    nc = await nats_py.connect(url, name="mcpg-test", allow_reconnect=False)
    try:
        await nc.publish(subject, b"ignored payload")
        await nc.flush()
    finally:
        await nc.close()


@FAULTS
async def test_a_nats_connection_that_stops_answering_is_seen_dead_in_bound_then_fires_once_when_back(
    fault: str, gateway_factory: GatewayFactory, nats: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with proxied(nats.port) as proxy:
        url = nats.url.replace(f":{nats.port}", f":{proxy.listen_port}")
        strategy = {"type": "nats_topic", "subject": "inventory.updates", "url": url}
        raw = fast_liveness(gateway_config(watched("inventory", INVENTORY, strategy), sentinel()))
        gw = await gateway_factory(raw, admin_token=ADMIN_TOKEN)
        async with subscribed(gw.mcp_url, ERA[fault], [INVENTORY, SENTINEL_URI]) as sub:

            async def publish_change() -> None:
                await publish(nats.url, "inventory.updates")

            measured = await survive(fault, proxy, nats.process, gw, sub, INVENTORY, publish_change)
            assert fired(gw, "nats_topic") == 1
            await assert_only_sentinel_arrives(gw, sub)
            await assert_recovered(gw, INVENTORY, "nats_topic", nats.password)

            await publish(nats.url, "inventory.updates")
            assert await sub.next_update() == INVENTORY
            await assert_only_sentinel_arrives(gw, sub)
    assert_logged_without(caplog, "no answer to a round trip", nats.password)
    print(f"\nMEASURED nats_topic {fault}: {measured}")


# --- sql_polling ------------------------------------------------------------------------------------------------


@FAULTS
async def test_a_tracking_query_that_never_answers_ends_its_connection_and_the_next_poll_sees_the_advance(
    fault: str,
    gateway_factory: GatewayFactory,
    postgres: PostgresServer,
    db: Any,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = f"reports_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE TABLE {table} (id bigint)")
    await db.execute(f"INSERT INTO {table} VALUES (1)")
    async with proxied(postgres.port) as proxy:
        url = postgres.url.replace(f":{postgres.port}/", f":{proxy.listen_port}/")
        strategy = {"type": "sql_polling", "url": url, "query": f"SELECT max(id) FROM {table}", "timeout_ms": 1000}
        raw = fast_liveness(gateway_config(watched("reports", REPORTS, strategy), sentinel()))
        gw = await gateway_factory(raw, clock=clock, admin_token=ADMIN_TOKEN)
        async with subscribed(gw.mcp_url, ERA[fault], [REPORTS, SENTINEL_URI]) as sub:
            await db.execute(f"INSERT INTO {table} VALUES (2)")  # the advance the stuck poll would have seen
            with fault_on(fault, proxy, postgres.process):
                began = time.monotonic()
                await clock.tick()  # one poll, which times out
                detected = time.monotonic() - began
                assert (await source(gw, REPORTS))["state"] == "down"
                assert sample(gw, "mcpg_watch_sources_down") == 1
            await clock.release()  # the next poll opens a new connection and sees 2
            assert await sub.next_update() == REPORTS
            await assert_only_sentinel_arrives(gw, sub)
            await assert_recovered(gw, REPORTS, "sql_polling", postgres.password)

            await clock.tick()  # still 2: no fire
            await db.execute(f"INSERT INTO {table} VALUES (3)")
            await clock.release()
            assert await sub.next_update() == REPORTS
            await assert_only_sentinel_arrives(gw, sub)
            if fault != "nat_forgot":

                async def one_backend() -> bool:
                    return await backends(db, sql_polling.APPLICATION_NAME) == 1

                await eventually(one_backend, BOUND_S, "the abandoned sql_polling backend gone")
    assert detected <= 1.0 + SLACK_S, f"a 1 s query timeout took {detected:.2f}s to end the poll"
    assert_logged_without(caplog, "did not answer within 1 s", postgres.password)
    print(f"\nMEASURED sql_polling {fault}: the stuck poll ended after {detected:.2f}s")


# --- the bus ------------------------------------------------------------------------------------------------------


def bus_member(instance: str, upstream: str, url: str, server: NatsServer) -> dict[str, Any]:
    block = {"url": url, "user": server.user, "password": f"${{env.{PASSWORD_ENV}}}"}
    return fast_liveness(member_config(instance, upstream, block))


@contextlib.asynccontextmanager
async def bus_pair(
    gateway_env: ImageEnv, tmp_path: Path, server: NatsServer, members: dict[str, dict[str, Any]]
) -> AsyncIterator[tuple[programs.GatewayProcess, programs.GatewayProcess]]:
    """`mcpg-gateway` from the gateway image for each of the two configurations, both ready."""
    environ = {PASSWORD_ENV: server.password, "MCPG_ADMIN_TOKEN": ADMIN_TOKEN}
    started = programs.gateways(gateway_env, write_configs(tmp_path, members), environ, cwd=tmp_path)
    async with in_thread(started) as (first, second):
        for gw in (first, second):
            await until_ready(gw, 200)
        yield first, second


async def bus_view(gw: programs.GatewayProcess) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        resp = await http.get(f"{gw.admin}/admin/v1/bus", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert resp.status_code == 200
    bus: dict[str, Any] = resp.json()["bus"]
    return bus


async def test_a_gateway_cut_off_from_its_bus_notices_in_bound_stops_taking_fires_and_catches_up_when_back(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    async with (
        serve_reads() as upstream,
        running_nats(lambda: start_nats(store_dir=tmp_path / "jetstream")) as server,
        proxied(server.port) as proxy,
    ):
        members = {
            "gw-0": bus_member("gw-0", upstream.url, f"nats://127.0.0.1:{proxy.listen_port}", server),
            "gw-1": bus_member("gw-1", upstream.url, server.address, server),
        }
        async with (
            bus_pair(gateway_env, tmp_path, server, members) as (cut, whole),
            subscribed(cut.mcp_url, "listen", [ORDERS, SENTINEL_URI]) as on_cut,
            subscribed(whole.mcp_url, "legacy", [ORDERS, SENTINEL_URI]) as on_whole,
        ):
            proxy.blackhole()
            began = time.monotonic()

            async def disconnected() -> bool:
                return not (await bus_view(cut))["connected"]

            await eventually(disconnected, PING_BOUND_S + SLACK_S, "gw-0 seeing its bus gone")
            detected = time.monotonic() - began
            await until_ready(cut, 503)  # past the bus's grace: new sessions go to a gateway that hears fires
            unready = time.monotonic() - began

            # The rest of the deployment serves on; the cut gateway refuses a webhook rather than tell half.
            assert (await post(whole, ORDERS_TOKEN)).status_code == 200
            assert await on_whole.next_update() == ORDERS
            await assert_refused(cut, ORDERS_TOKEN)

            proxy.resume()
            resumed = time.monotonic()
            # Back on the bus, it tells each URI it holds once: the fire it missed is among them.
            told = [await on_cut.next_update(RECONNECT_BOUND_S) for _ in range(2)]
            recovered = time.monotonic() - resumed
            assert sorted(told) == sorted([ORDERS, SENTINEL_URI])
            await until_ready(cut, 200)
            view = await bus_view(cut)
            assert (view["connected"], view["losses"]) == (True, 1)

            assert (await post(whole, ORDERS_TOKEN)).status_code == 200
            for sub in (on_cut, on_whole):
                assert await sub.next_update() == ORDERS
            assert (await post(cut, SENTINEL_TOKEN)).status_code == 200
            for sub in (on_cut, on_whole):
                assert await sub.next_update() == SENTINEL_URI
                assert sub.drained() == []
    print(
        f"\nMEASURED bus partition: disconnected after {detected:.2f}s, /readyz 503 after {unready:.2f}s, "
        f"caught up {recovered:.2f}s after the partition ended"
    )


async def test_a_frozen_bus_is_noticed_by_every_gateway_in_bound_and_each_catches_up_when_it_thaws(
    gateway_env: ImageEnv, tmp_path: Path
) -> None:
    async with (
        serve_reads() as upstream,
        running_nats(lambda: start_nats(store_dir=tmp_path / "jetstream")) as server,
    ):
        members = {i: bus_member(i, upstream.url, server.address, server) for i in ("gw-0", "gw-1")}
        async with (
            bus_pair(gateway_env, tmp_path, server, members) as gateways,
            subscribed(gateways[0].mcp_url, "listen", [ORDERS, SENTINEL_URI]) as on_0,
            subscribed(gateways[1].mcp_url, "legacy", [ORDERS, SENTINEL_URI]) as on_1,
        ):
            with server.process.frozen():
                began = time.monotonic()
                for gw in gateways:

                    async def disconnected(gw: programs.GatewayProcess = gw) -> bool:
                        return not (await bus_view(gw))["connected"]

                    await eventually(disconnected, PING_BOUND_S + SLACK_S, f"{gw.base} seeing its bus gone")
                detected = time.monotonic() - began
                for gw in gateways:
                    await until_ready(gw, 503)
                    await assert_refused(gw, ORDERS_TOKEN)
            # Thawed: each gateway is back on the bus and tells each URI it holds once.
            for sub in (on_0, on_1):
                told = [await sub.next_update(RECONNECT_BOUND_S) for _ in range(2)]
                assert sorted(told) == sorted([ORDERS, SENTINEL_URI])
            for gw in gateways:
                await until_ready(gw, 200)
                assert ((await bus_view(gw))["losses"]) == 1
            assert (await post(gateways[1], ORDERS_TOKEN)).status_code == 200
            assert (await post(gateways[0], SENTINEL_TOKEN)).status_code == 200
            for sub in (on_0, on_1):
                assert [await sub.next_update(), await sub.next_update()] == [ORDERS, SENTINEL_URI]
                assert sub.drained() == []
    print(f"\nMEASURED bus sigstop: both gateways saw the bus gone within {detected:.2f}s")


# --- readiness: another gateway that can reach the source is preferred -------------------------------------------


async def ready_status(gw: programs.GatewayProcess) -> int:
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        return (await http.get(f"{gw.base}/readyz")).status_code


async def test_a_gateway_that_cannot_reach_a_source_another_reaches_turns_unready_and_one_all_lose_does_not(
    gateway_env: ImageEnv, tmp_path: Path, postgres: PostgresServer
) -> None:
    async with (
        serve_reads() as upstream,
        running_nats(lambda: start_nats(store_dir=tmp_path / "jetstream")) as server,
        proxied(postgres.port) as proxy,
    ):
        urls = {
            "gw-0": postgres.url.replace(f":{postgres.port}/", f":{proxy.listen_port}/"),  # the one that is cut off
            "gw-1": postgres.url,
        }
        members = {}
        for instance, url in urls.items():
            raw = bus_member(instance, upstream.url, server.address, server)
            stock = {"type": "postgres_listen_notify", "url": url, "channel": "stock_changed"}
            raw["mcp"]["capabilities"]["resources"].append(watched("stock", STOCK, stock))
            members[instance] = raw
        async with (
            bus_pair(gateway_env, tmp_path, server, members) as (cut, whole),
            subscribed(cut.mcp_url, "listen", [STOCK]),
            subscribed(whole.mcp_url, "legacy", [STOCK]),
        ):
            # Only gw-0 loses the database: gw-1 says it holds "stock" up, so gw-0 stops taking sessions.
            proxy.blackhole()
            began = time.monotonic()
            await until_ready(cut, 503)
            unready = time.monotonic() - began
            assert (await bus_view(cut))["preferred_elsewhere"] == {"resource": "stock", "gateway": "gw-1"}
            assert await ready_status(whole) == 200
            proxy.resume()
            await until_ready(cut, 200)

            # Everyone loses it: no gateway is better placed, so none stops taking sessions.
            with postgres.process.frozen():

                async def down_long_everywhere() -> bool:
                    view = await bus_view(cut)
                    heard = {p["instance"]: (p["up"], p["down"]) for p in view["peers"]}
                    return view["down_long"] == ["stock"] and heard.get("gw-1") == (0, 1)

                await eventually(down_long_everywhere, BOUND_S, "stock down long on gw-0, and down on gw-1")
                assert [await ready_status(gw) for gw in (cut, whole)] == [200, 200]
                assert (await bus_view(cut))["preferred_elsewhere"] is None
    print(f"\nMEASURED readiness: gw-0 unready {unready:.2f}s after losing a source gw-1 still reached")
