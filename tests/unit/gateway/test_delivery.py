"""The notification path (`delivery.py`): real SDK clients of both eras, a real gateway, real sockets.

A subscriber that keeps up is written to in the fire's own turn (no task, no queue); one whose connection stops
taking bytes falls behind alone, in a task of its own, and loses only its own notifications; a handshake-era
session with no GET stream open has nowhere to be written to, and that is counted.
"""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from starlette.types import Message

from mcpg_gateway.fanout import streams
from mcpg_gateway.fanout.stream_writer import StreamWriter as Delivery
from mcpg_gateway.fanout.subscribers import Outcome, Pending, Subscriber
from mcpg_gateway.metrics import Metrics
from mcpg_testing import BOUND_S
from mcpg_testing import stuck as stuck_streams
from mcpg_testing.clients import ERAS, subscribed
from mcpg_testing.configs import gateway_config, resource
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.upstream import Upstream

HOOK = "drive://folder/reports"
SENT = "mcpg_watch_notifications_sent_total"
DROPPED = "mcpg_watch_notifications_dropped_total"
TASK_NAMES = ("mcpg delivery", "mcpg session sender")


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: Upstream) -> RunningGateway:
    upstream.set("/r", "{}")
    config = gateway_config(resource("r", HOOK, f"{upstream.url}/r", {"type": "webhook", "token": "t"}))
    return await gateway_factory(config, send_timeout_s=0.5)


def counted(gw: RunningGateway, name: str) -> float:
    return gw.gw.metrics.registry.get_sample_value(name, {"strategy": "webhook"}) or 0.0


def delivery_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(TASK_NAMES)]


@ERAS
async def test_a_subscriber_that_keeps_up_is_written_to_in_the_fires_own_turn(gw: RunningGateway, mode: str) -> None:
    async with subscribed(gw.mcp_url, mode, HOOK) as sub:
        assert await gw.gw.fanout.fire(HOOK, "webhook") == 1
        assert await sub.next_update() == HOOK  # a listen stream is written to once acknowledged; this one is
        sent = counted(gw, SENT)
        assert await gw.gw.fanout.fire(HOOK, "webhook") == 1
        # Counted before anything else ran: the frame went to the socket inside `fire`.
        assert counted(gw, SENT) == sent + 1
        assert delivery_tasks() == []  # and nothing waits on this subscriber's behalf
        assert await sub.next_update() == HOOK


async def test_a_session_with_no_get_stream_open_is_counted_as_not_told(gw: RunningGateway) -> None:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx2.AsyncClient(base_url=gw.base, timeout=BOUND_S) as http:
        sid = await _legacy_session(http, headers)
        h = {**headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        subscribe = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": HOOK}}
        assert (await http.post("/mcp", json=subscribe, headers=h)).status_code == 200
        dropped, sent = counted(gw, DROPPED), counted(gw, SENT)
        assert await gw.gw.fanout.fire(HOOK, "webhook") == 1
        assert (counted(gw, DROPPED), counted(gw, SENT)) == (dropped + 1, sent)


@ERAS
async def test_a_stream_that_stops_reading_falls_behind_alone(gw: RunningGateway, mode: str) -> None:
    """A listen stream, or a session's GET stream, whose socket's receive window is tiny and never read: the
    gateway's buffers for it fill, its notifications go to its own task and are dropped there after
    `send_timeout_s`, while a healthy client beside it gets every one, and no fire ever waits."""
    async with subscribed(gw.mcp_url, "listen", HOOK) as healthy:
        stuck = await (stuck_streams.listen_stream if mode == "listen" else stuck_streams.session_stream)(gw.port, HOOK)
        try:
            fires = 0
            while not delivery_tasks():  # until the stuck stream's connection stops taking bytes
                fires += 1
                assert fires <= 50_000, "the stuck stream never fell behind"
                assert await gw.gw.fanout.fire(HOOK, "webhook") == 2
                if fires % 500 == 0:
                    await asyncio.sleep(0)  # let the loop move the bytes the healthy client reads
            behind = fires
            for _ in range(20):  # more fires while it is behind: queued for it once, written to the other
                fires += 1
                assert await gw.gw.fanout.fire(HOOK, "webhook") == 2
            async with asyncio.timeout(BOUND_S):
                got = 0
                while got < fires:
                    await healthy.next_update()
                    got += 1
                while counted(gw, DROPPED) < 1:
                    await asyncio.sleep(0.05)
            assert behind > 1, behind
            # The healthy client got all; the stuck one lost at most the one write under way and the one queued.
            assert counted(gw, DROPPED) <= 2
        finally:
            stuck.close()


async def _legacy_session(http: httpx2.AsyncClient, headers: dict[str, str]) -> str:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }
    r = await http.post("/mcp", json=init, headers=headers)
    sid = r.headers["mcp-session-id"]
    h = {**headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
    return str(sid)


async def test_a_delivery_stopped_as_its_slow_write_completes_writes_nothing_more() -> None:
    """The subscriber goes away in the same loop pass as the write it waited for completes: its task must stop
    there, not go on to write what its outbox holds (in 3.11 `asyncio.wait_for` lost such a cancel)."""
    sent: list[bytes] = []
    drained = asyncio.Event()

    async def send(message: Message) -> None:
        sent.append(message["body"])
        if len(sent) == 1:
            await drained.wait()  # the connection's buffers are full until the test drains them

    stream = streams.Stream(send)
    stream.started = True
    sub = Subscriber("session")
    delivery = Delivery(sub, lambda: stream, Metrics(), BOUND_S, lambda s, uri: b"")
    assert delivery.deliver(Pending("x://a", "webhook"), b"") is Outcome.QUEUED  # its write waits, in a task
    assert delivery.deliver(Pending("x://b", "webhook"), b"") is Outcome.QUEUED  # behind it, in the outbox
    [task] = delivery_tasks()
    await asyncio.sleep(0)  # one pass: the task now waits for the first write
    drained.set()
    delivery.stop()
    async with asyncio.timeout(BOUND_S):
        await asyncio.wait({task})
    assert task.cancelled()
    assert len(sent) == 1  # x://b was never written
