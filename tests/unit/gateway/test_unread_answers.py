"""Clients that send requests and never read the answers (issue 30), over raw sockets against a real gateway.

Pipelined requests never read filled a cap of 256 connections in 3 s: each connection's response write blocked
once the socket buffers were full, so it counted as busy, never idle, and no deadline covered it. Here each
such client has small socket buffers and asks for a large answer (a server card of 256 KiB, a /metrics as large)
a few times over; it learns that the gateway closed the connection when its own sends, which the gateway has
stopped reading, fail. A blocked write is closed at `write_timeout_s` and waits as an idle connection does (so
a healthy client at a full cap gets in at once); pipelining is bounded; an SSE stream is held to the same rule.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import httpx2
import pytest
from prometheus_client import Counter
from uvicorn.config import Config
from uvicorn.server import ServerState

from mcpg_gateway import connections
from mcpg_gateway.contract.config import LimitsConfig
from mcpg_gateway.metrics import Metrics
from mcpg_testing import BOUND_S, stuck
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway

HOOK, TOKEN = "drive://folder/reports", "tok"
CAP = 16
WRITE_S = 1.0
"""The write deadline where a test waits for it; elsewhere 300 s, so that only the cap can make room."""
LARGE = 256 * 1024
"""About the size of the large answers: each more than the socket buffers between gateway and client take."""
ASKED = 8
"""Requests for a large answer a client sends at once: within `MAX_PIPELINED`, so only the write deadline
can close it."""
FILLER = 2 << 20
"""Bytes of further requests a client sends: more than the gateway reads before it stops reading."""
HEALTHY_S = 1.0
"""A healthy client's bound while the attack runs (the issue's)."""
HEALTHY = b'{"ok":true}'
"""The body of /healthz's answer."""
PATHS = {"public": "/.well-known/mcp/server-card.json", "admin": "/metrics"}
PORTS = pytest.mark.parametrize("port", ["public", "admin"])


async def large_answers(gateway_factory: GatewayFactory, **limits: Any) -> RunningGateway:
    """A gateway whose server card (listing long URIs) and /metrics each answer about `LARGE` bytes."""
    long_uris = [watched(f"r{i}", f"drive://{i}/{'x' * 2000}", {"type": "poll"}) for i in range(LARGE // 2000)]
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}), *long_uris)
    raw["gateway"]["limits"] = limits
    gw = await gateway_factory(raw)
    # As many bytes of series as a gateway with many upstream origins might show.
    padding = Counter("test_padding", "Padding", ["pad"], registry=gw.gw.metrics.registry)
    for i in range(LARGE // 4096):
        padding.labels(pad=f"{i}{'x' * 4096}").inc()
    return gw


def number(gw: RunningGateway, port: str) -> int:
    return gw.port if port == "public" else gw.admin_port


def guard_closed(gw: RunningGateway, port: str, reason: str) -> float:
    labels = {"port": port, "reason": reason}
    return gw.gw.metrics.registry.get_sample_value("mcpg_connections_closed_total", labels) or 0.0


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n".encode()


def small_buffers() -> socket.socket:
    """A client socket whose buffers fill fast: small ones of its own, and a small segment size, which keeps the
    gateway's side of the connection from growing its send buffer to megabytes (about 100 KB on loopback)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)
    sock.setblocking(False)
    return sock


async def reading_nothing(port: int, request: bytes) -> socket.socket:
    """A connection with small buffers that sends `request` and reads nothing; returned once the answer has begun
    to arrive (so the gateway parsed the request: it is in flight)."""
    loop, sock = asyncio.get_running_loop(), small_buffers()
    async with asyncio.timeout(BOUND_S):
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, request)
        await readable(sock)
    return sock


async def readable(sock: socket.socket) -> None:
    """Until bytes wait in `sock`'s receive buffer; they are left there."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def sends_until_closed(sock: socket.socket) -> None:
    """Send more requests, reading nothing, until the gateway closes the connection (a send fails), in the bound."""
    filler = get("/healthz") * (FILLER // len(get("/healthz")))
    async with asyncio.timeout(BOUND_S):
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            await asyncio.get_running_loop().sock_sendall(sock, filler)


async def read_until_closed(sock: socket.socket) -> bytes:
    loop, received = asyncio.get_running_loop(), b""
    async with asyncio.timeout(BOUND_S):
        while data := await loop.sock_recv(sock, 65536):
            received += data
    return received


# --- a write that makes no progress ----------------------------------------------------------------------------


@PORTS
async def test_a_connection_that_pipelines_and_reads_nothing_is_closed_at_the_write_deadline(
    gateway_factory: GatewayFactory, port: str
) -> None:
    gw = await large_answers(gateway_factory, write_timeout_s=WRITE_S)
    sock = await reading_nothing(number(gw, port), get(PATHS[port]) * ASKED)
    try:
        await sends_until_closed(sock)
    finally:
        sock.close()
    assert guard_closed(gw, port, "write_timeout") == 1
    assert guard_closed(gw, port, "pipelining") == 0


@PORTS
async def test_with_the_cap_held_by_clients_that_read_nothing_a_healthy_client_is_served_at_once(
    gateway_factory: GatewayFactory, port: str
) -> None:
    gw = await large_answers(gateway_factory, connections=CAP, write_timeout_s=300)
    held = [await reading_nothing(number(gw, port), get(PATHS[port]) * ASKED) for _ in range(CAP)]
    try:
        async with asyncio.timeout(HEALTHY_S):
            if port == "public":
                # Two clients, both kept: two connections to make room for.
                async with httpx2.AsyncClient() as probe, httpx2.AsyncClient() as sender:
                    assert (await probe.get(f"{gw.base}/healthz")).status_code == 200
                    assert (await sender.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}")).status_code == 200
            else:
                async with httpx2.AsyncClient() as http:
                    assert (await http.get(f"{gw.admin}/metrics")).status_code == 200
    finally:
        for sock in held:
            sock.close()
    # Room was made by closing blocked connections, those that had waited longest: no deadline had passed.
    assert guard_closed(gw, port, "cap") == (2 if port == "public" else 1)
    assert guard_closed(gw, port, "write_timeout") == guard_closed(gw, port, "pipelining") == 0


# --- pipelining ------------------------------------------------------------------------------------------------


async def test_pipelining_past_the_depth_limit_closes_the_connection(gateway_factory: GatewayFactory) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN})))
    loop, sock = asyncio.get_running_loop(), small_buffers()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", gw.port))
        await loop.sock_sendall(sock, get("/healthz") * (connections.MAX_PIPELINED + 10))
        received = await read_until_closed(sock)
    finally:
        sock.close()
    # The first request, then MAX_PIPELINED sent ahead of their answers: the next one is one too many.
    assert received.count(HEALTHY) == connections.MAX_PIPELINED + 1
    assert guard_closed(gw, "public", "pipelining") == 1


async def test_pipelining_up_to_the_depth_limit_is_served_and_the_count_starts_again(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN})))
    loop, sock = asyncio.get_running_loop(), small_buffers()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", gw.port))
        for _ in range(2):  # the second round is served too: the count started again when nothing was ahead
            await loop.sock_sendall(sock, get("/healthz") * (connections.MAX_PIPELINED + 1))
            received = b""
            async with asyncio.timeout(BOUND_S):
                while received.count(HEALTHY) < connections.MAX_PIPELINED + 1:
                    data = await loop.sock_recv(sock, 65536)
                    assert data, "the gateway closed the connection"
                    received += data
    finally:
        sock.close()
    assert guard_closed(gw, "public", "pipelining") == 0


# --- an SSE stream whose client stops reading ------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["listen", "session GET"])
async def test_a_stream_whose_client_stops_reading_is_closed_at_the_write_deadline(
    gateway_factory: GatewayFactory, stream: str
) -> None:
    """The fan-out drops what it cannot write within `send_timeout_s` (`test_delivery.py`); the connection itself,
    which would otherwise stay open and count against the cap, is closed at `write_timeout_s`."""
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}))
    raw["gateway"]["limits"] = {"write_timeout_s": WRITE_S}
    gw = await gateway_factory(raw, send_timeout_s=0.5)
    opened = stuck.listen_stream if stream == "listen" else stuck.session_stream
    sock = await opened(gw.port, HOOK, small_buffers())
    try:
        async with asyncio.timeout(BOUND_S):
            while guard_closed(gw, "public", "write_timeout") == 0:  # written to until a write stays blocked
                for _ in range(100):
                    await gw.gw.fanout.fire(HOOK, "webhook")
                await asyncio.sleep(0)  # let the loop move the bytes and run the deadline
        await sends_until_closed(sock)
    finally:
        sock.close()
    if stream == "listen":  # a session (and its subscription) outlives its GET stream, as after any closed one
        async with asyncio.timeout(BOUND_S):
            while await gw.gw.fanout.fire(HOOK, "webhook") != 0:  # the subscription ends as its stream's end is noticed
                await asyncio.sleep(0.05)


# --- a closing connection whose client never takes its last bytes ----------------------------------------------
# Real sockets cannot put that state on order: whether the last bytes of an answer sit in asyncio's buffer (under
# its high-water mark, so writing never paused) or in the kernel's depends on how far the kernel grew its send
# buffer. So these drive the protocol itself, with a transport that holds what it was given.


class HeldTransport(asyncio.Transport):
    """A transport whose client takes nothing: what is written stays queued; `close` leaves it closing."""

    def __init__(self) -> None:
        super().__init__()
        self.queued, self.closing = 0, False
        self.aborted = asyncio.Event()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.queued += len(data)

    def get_write_buffer_size(self) -> int:
        return self.queued

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True
        self.aborted.set()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def held_connection(guard: connections.Guard) -> tuple[connections.GuardedProtocol, HeldTransport]:
    """A connection as the guarded socket hands it over: counted at accept, then its protocol started."""
    assert guard.admit()
    config = Config(app=lambda scope, receive, send: None, lifespan="off", log_config=None)
    config.load()
    protocol = connections.protocol_for(guard)(config, ServerState(), {})
    transport = HeldTransport()
    protocol.connection_made(transport)
    return protocol, transport


def guard_of(cap: int, write_timeout_s: float) -> tuple[connections.Guard, Metrics]:
    metrics = Metrics()
    limits = LimitsConfig(write_timeout_s=write_timeout_s)
    return connections.Guard("public", cap, limits, metrics), metrics


async def test_a_closing_connection_whose_client_never_takes_its_last_bytes_is_aborted_at_the_write_deadline() -> None:
    guard, metrics = guard_of(CAP, WRITE_S / 10)
    protocol, transport = held_connection(guard)
    transport.write(b"x" * 1000)  # an answer's tail, under the high-water mark: writing never paused
    protocol.shutdown()  # the server stops: uvicorn closes the idle connection, and asyncio waits for the bytes
    async with asyncio.timeout(BOUND_S):
        await transport.aborted.wait()
    closed = metrics.registry.get_sample_value(
        "mcpg_connections_closed_total", {"port": "public", "reason": "write_timeout"}
    )
    assert closed == 1


async def test_a_closing_connection_with_bytes_left_waits_on_its_client_and_is_closed_first_at_the_cap() -> None:
    guard, _ = guard_of(connections.MIN_CAP, 300)
    held = [held_connection(guard) for _ in range(connections.MIN_CAP)]
    for protocol, _ in held:
        guard.busy(protocol)  # as if each had a request in flight
    closing, transport = held[3]
    transport.write(b"x" * 1000)
    closing.shutdown()
    assert guard.admit()  # a new connection at the cap: room is made by closing the one left waiting on its client
    assert transport.aborted.is_set()
    assert not any(t.aborted.is_set() for _, t in held if t is not transport)


async def test_a_closing_connection_with_nothing_left_to_send_gets_no_write_deadline() -> None:
    guard, _ = guard_of(CAP, WRITE_S / 10)
    protocol, transport = held_connection(guard)
    protocol.shutdown()
    assert transport.closing
    assert not protocol._g.write_deadline.armed  # asyncio releases it at once: nothing to wait for


async def test_a_connection_s_attributes_still_share_their_keys() -> None:
    """At 30 attributes an instance's dict stops sharing its keys with its class and grows from about 300 bytes to
    1,584, on every open connection (issue 36): the guard keeps its state in one slotted object instead."""
    guard, _ = guard_of(CAP, WRITE_S)
    protocol, _ = held_connection(guard)
    assert len(vars(protocol)) < 30
    assert sys.getsizeof(vars(protocol)) < 400
    protocol.connection_lost(None)
