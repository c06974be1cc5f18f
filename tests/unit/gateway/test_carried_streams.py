"""A listen stream carried on past the SDK (`fanout/streams.py`): once acknowledged, the SDK's handling of its
request ends and the gateway writes the stream: notifications, pings as the SDK sent them, and the result.

Real gateway, real sockets; the clients are raw sockets so that nothing of a client library runs in the loop
whose tasks are counted.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.types import Message

from mcpg_gateway.fanout import streams
from mcpg_gateway.sdk import responses
from mcpg_testing import BOUND_S, stuck
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway
from mcpg_testing.watching import until

HOOK = "drive://folder/reports"
STREAMS = 20


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    return await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": "tok"})))


async def read_until(sock: object, wanted: bytes) -> bytes:
    """What the stream sends, up to and including `wanted`."""
    loop = asyncio.get_running_loop()
    received = b""
    async with asyncio.timeout(BOUND_S):
        while wanted not in received:
            chunk = await loop.sock_recv(sock, 65536)  # type: ignore[arg-type]
            assert chunk, f"the stream closed: {received[-300:]!r}"
            received += chunk
    return received


async def test_an_open_listen_stream_holds_two_tasks_and_nothing_of_the_sdk_s(gw: RunningGateway) -> None:
    before = asyncio.all_tasks()
    socks = [await stuck.listen_stream(gw.port, HOOK) for _ in range(STREAMS)]
    try:
        await until(lambda: gw.gw.fanout.listening == STREAMS)
        # Each stream: its connection's request task, and the one that notices its client leave. The SDK's
        # handler and disconnect tasks (and its task group, memory streams and span) were let go at the ack.
        await until(lambda: len(per_stream(asyncio.all_tasks() - before)) == 2 * STREAMS)
        assert [sdk for sdk in asyncio.all_tasks() if "/mcp/" in source(sdk) or "/anyio/" in source(sdk)] == []
    finally:
        for sock in socks:
            sock.close()
    await until(lambda: gw.gw.fanout.listening == 0)  # a client leaving still ends its stream
    await until(lambda: per_stream(asyncio.all_tasks() - before) == [])


def source(task: asyncio.Task[object]) -> str:
    code = getattr(task.get_coro(), "cr_code", None)
    return code.co_filename if code is not None else ""


def per_stream(tasks: set[asyncio.Task[object]]) -> list[asyncio.Task[object]]:
    """All but the one task that ends subscriptions at their lifetime: one per gateway, begun with the first."""
    return [t for t in tasks if "mcpg_gateway/fanout/lifetimes" not in source(t)]


async def test_a_carried_stream_is_pinged_gets_its_notifications_and_ends_with_its_result(
    gw: RunningGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "PING_INTERVAL_S", 0.05)
    sock = await stuck.listen_stream(gw.port, HOOK)
    try:
        await read_until(sock, responses.PING)
        await read_until(sock, responses.PING)  # and again: the ping is rescheduled
        assert await gw.gw.fanout.fire(HOOK, "webhook") == 1
        updated = await read_until(sock, b"notifications/resources/updated")
        assert HOOK.encode() in updated
        await gw.shutdown()
        ended = await read_until(sock, b"0\r\n\r\n")  # the chunked body's end: the response is complete
    finally:
        sock.close()
    last = ended.rsplit(b"event: message\r\ndata: ", 1)[1].split(b"\r\n", 1)[0]
    result = json.loads(last)
    assert result["id"] == 1
    assert result["result"]["_meta"]["dev.mcpg/watch-end"]["reason"] == "shutdown"
    assert result["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcpg-gateway"


async def test_a_stream_whose_client_reads_nothing_has_one_ping_waiting_not_one_per_interval() -> None:
    stuck_send = asyncio.Event()  # never set: every write waits, as on a connection whose client reads nothing
    writes: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            writes.append(message["body"])
            await stuck_send.wait()

    stream = streams.Stream(send)
    await stream.send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    for _ in range(5):
        stream._ping_now()
    assert writes == [responses.PING]
    assert stream._ping is not None
    stream._ping.cancel()
    assert stream._pinging is not None
    stream._pinging.cancel()
