"""The connection guard (issue 15) over real TCP on loopback, against a real in-process gateway.

A caller with no credentials held 1,050 idle connections and starved the webhook route, /healthz and the admin
API. These tests replay that at a small cap, hold idle and slow connections to their deadlines (waiting on the
socket's end, never sleeping), prove an SSE stream outlives those deadlines, and drive the accept-error handler
with the contexts asyncio passes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import re
import resource
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest

from mcpg_gateway import connections
from mcpg_gateway.metrics import Metrics
from mcpg_testing import BOUND_S
from mcpg_testing.clients import ERAS, subscribed
from mcpg_testing.configs import bearer, gateway_config, principal, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway

HOOK, TOKEN = "drive://folder/reports", "tok"
CAP = 64
DEADLINE_S = 0.3
TRICKLE_S = 0.05
"""A trickling client sends its next byte after the gateway has said nothing for this long."""
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nhost: gw\r\n"
"""A request's head without its blank line: the headers are never complete."""

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def raw_config(**limits: Any) -> dict[str, Any]:
    raw = gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN}))
    raw["gateway"]["limits"] = limits
    return raw


@pytest.fixture
async def strict(gateway_factory: GatewayFactory) -> RunningGateway:
    """Deadlines of 0.3 s for headers and bodies."""
    return await gateway_factory(raw_config(header_timeout_s=DEADLINE_S, body_timeout_s=DEADLINE_S))


def sample(gw: RunningGateway, name: str, **labels: str) -> float:
    return gw.gw.metrics.registry.get_sample_value(name, labels) or 0.0


def guard_closed(gw: RunningGateway, port: str, reason: str) -> float:
    return sample(gw, "mcpg_connections_closed_total", port=port, reason=reason)


async def connect(port: int) -> Conn:
    async with asyncio.timeout(BOUND_S):
        return await asyncio.open_connection("127.0.0.1", port)


async def closed_by_gateway(conn: Conn) -> bytes:
    """Everything the gateway sent until it closed the connection, waited for within the bound."""
    async with asyncio.timeout(BOUND_S):
        try:
            return await conn[0].read()
        except ConnectionResetError:
            return b""


async def exchange(conn: Conn, request: bytes) -> bytes:
    """Send one request; its response's head and body (by content-length)."""
    reader, writer = conn
    writer.write(request)
    async with asyncio.timeout(BOUND_S):
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
        return head + await reader.readexactly(int(length[1]) if length else 0)


async def trickle_until_closed(conn: Conn, byte: bytes) -> None:
    """Send `byte` each time the gateway has said nothing for `TRICKLE_S`, until it closes the connection."""
    reader, writer = conn
    async with asyncio.timeout(BOUND_S):
        while True:
            try:
                async with asyncio.timeout(TRICKLE_S):
                    said = await reader.read(1)
            except TimeoutError:
                writer.write(byte)
                continue
            except ConnectionResetError:
                return
            assert said == b"", f"the gateway answered instead of closing: {said!r}"
            return


def post_head(length: int) -> bytes:
    """A webhook POST's head, but for its blank line, announcing a body of `length` bytes."""
    return f"POST /webhooks/resource-updated/{TOKEN} HTTP/1.1\r\nhost: gw\r\ncontent-length: {length}\r\n".encode()


async def fresh_get(port: int, path: str) -> bytes:
    """GET on a new connection. Served means every connection made before it was accepted (the queue is FIFO)."""
    conn = await connect(port)
    try:
        return await exchange(conn, f"GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n".encode())
    finally:
        close_all([conn])


def close_all(conns: list[Conn]) -> None:
    for _, writer in conns:
        writer.close()


@dataclass
class Flood:
    """Idle connections a hostile caller holds, and the most the gateway counted open while they arrived."""

    conns: list[Conn] = field(default_factory=list)
    peak: dict[str, float] = field(default_factory=dict)

    async def add(self, gw: RunningGateway, port: str, count: int) -> None:
        number = gw.port if port == "public" else gw.admin_port
        for _ in range(count):
            self.conns.append(await connect(number))
            self.peak[port] = max(self.peak.get(port, 0.0), sample(gw, "mcpg_connections_open", port=port))


@contextlib.asynccontextmanager
async def flood() -> AsyncIterator[Flood]:
    held = Flood()
    try:
        yield held
    finally:
        close_all(held.conns)


# --- the hostile case ------------------------------------------------------------------------------------------


async def test_idle_connections_far_beyond_the_cap_leave_the_webhook_health_admin_and_mcp_served(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await gateway_factory(raw_config(connections=CAP))
    async with flood() as hostile, httpx2.AsyncClient(timeout=BOUND_S) as http:
        await hostile.add(gw, "public", 200)
        await hostile.add(gw, "admin", 100)

        assert (await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}")).status_code == 200
        assert (await fresh_get(gw.port, "/healthz")).startswith(b"HTTP/1.1 200")
        assert (await fresh_get(gw.admin_port, "/metrics")).startswith(b"HTTP/1.1 200")
        async with subscribed(gw.mcp_url, "listen", HOOK) as sub:
            await hostile.add(gw, "public", 200)  # a second wave, while the listen stream is open
            assert (await http.post(f"{gw.base}/webhooks/resource-updated/{TOKEN}")).status_code == 200
            assert await sub.next_update() == HOOK
            assert (await fresh_get(gw.port, "/healthz")).startswith(b"HTTP/1.1 200")

    assert hostile.peak["public"] <= CAP
    assert hostile.peak["admin"] <= CAP
    # The fresh GETs came after each wave, so the gateway had accepted all of it: all but CAP were closed.
    assert guard_closed(gw, "public", "cap") >= 400 - CAP
    assert guard_closed(gw, "admin", "cap") >= 100 - CAP


async def test_at_the_cap_the_connection_idle_longest_is_closed_to_make_room(gateway_factory: GatewayFactory) -> None:
    gw = await gateway_factory(raw_config(connections=16))
    idle: list[Conn] = []
    try:
        for _ in range(16):
            idle.append(conn := await connect(gw.port))
            # Served once (so surely counted), then idle with a head that never ends: uvicorn's keep-alive timer
            # stops at the first byte, so only the guard can close these.
            assert (await exchange(conn, PARTIAL_HEAD + b"\r\n")).startswith(b"HTTP/1.1 200")
            conn[1].write(PARTIAL_HEAD)
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            assert (await http.get(f"{gw.base}/healthz")).status_code == 200
            assert await closed_by_gateway(idle[0]) == b""
            assert sample(gw, "mcpg_connections_open", port="public") == 16
        assert guard_closed(gw, "public", "cap") == 1
    finally:
        close_all(idle)


async def test_at_the_cap_with_every_connection_busy_the_new_one_is_closed_at_once(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await gateway_factory(raw_config(connections=16))
    busy: list[Conn] = []
    try:
        for _ in range(16):
            busy.append(conn := await connect(gw.port))
            # The 100 Continue says the route is reading the body: headers complete, request in flight.
            conn[1].write(post_head(2) + b"expect: 100-continue\r\n\r\n")
            async with asyncio.timeout(BOUND_S):
                assert (await conn[0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")

        busy.append(rejected := await connect(gw.port))
        assert await closed_by_gateway(rejected) == b""

        assert guard_closed(gw, "public", "cap") == 1
        assert (await exchange(busy[0], b"{}")).startswith(b"HTTP/1.1 200")  # the busy ones were left alone
    finally:
        close_all(busy)


# --- deadlines -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", PARTIAL_HEAD], ids=["nothing", "a partial head"])
async def test_a_connection_whose_headers_do_not_complete_is_closed_at_the_header_deadline(
    strict: RunningGateway, sent: bytes
) -> None:
    conn = await connect(strict.port)
    conn[1].write(sent)
    try:
        assert await closed_by_gateway(conn) == b""
    finally:
        close_all([conn])
    assert guard_closed(strict, "public", "header_timeout") == 1


async def test_trickling_a_head_byte_by_byte_does_not_move_the_header_deadline(strict: RunningGateway) -> None:
    conn = await connect(strict.admin_port)
    conn[1].write(b"GET /metrics HTTP/1.1\r\nx-pad: ")
    try:
        await trickle_until_closed(conn, b"a")
    finally:
        close_all([conn])
    assert guard_closed(strict, "admin", "header_timeout") == 1


async def test_a_request_trickling_its_body_is_closed_at_the_body_deadline(strict: RunningGateway) -> None:
    conn = await connect(strict.port)
    conn[1].write(post_head(60_000) + b"\r\n")
    try:
        await trickle_until_closed(conn, b"x")
    finally:
        close_all([conn])
    assert guard_closed(strict, "public", "body_timeout") == 1
    assert guard_closed(strict, "public", "header_timeout") == 0


async def test_a_kept_alive_connection_is_held_to_the_header_deadline_again_after_each_response(
    strict: RunningGateway,
) -> None:
    conn = await connect(strict.port)
    try:
        assert (await exchange(conn, PARTIAL_HEAD + b"\r\n")).startswith(b"HTTP/1.1 200")
        assert (await exchange(conn, PARTIAL_HEAD + b"\r\n")).startswith(b"HTTP/1.1 200")
        # The next head never completes; its first byte stops uvicorn's own keep-alive timer.
        conn[1].write(PARTIAL_HEAD)
        assert await closed_by_gateway(conn) == b""
    finally:
        close_all([conn])
    assert guard_closed(strict, "public", "header_timeout") == 1


@ERAS
async def test_an_open_sse_stream_outlives_several_deadlines_and_still_receives_its_notification(
    strict: RunningGateway, mode: str
) -> None:
    async with subscribed(strict.mcp_url, mode, HOOK) as sub, httpx2.AsyncClient(timeout=BOUND_S) as http:
        for _ in range(3):
            # A silent connection closed by its deadline: the evidence that a deadline's worth of time passed.
            silent = await connect(strict.port)
            try:
                assert await closed_by_gateway(silent) == b""
            finally:
                close_all([silent])
        assert (await http.post(f"{strict.base}/webhooks/resource-updated/{TOKEN}")).status_code == 200
        assert await sub.next_update() == HOOK
    assert guard_closed(strict, "public", "header_timeout") >= 3
    assert guard_closed(strict, "public", "body_timeout") == 0


# --- sessions, descriptors, accept errors ----------------------------------------------------------------------


async def test_a_session_beyond_sessions_total_is_refused_with_503(gateway_factory: GatewayFactory) -> None:
    raw = raw_config(sessions_total=1, sessions_per_principal=1)
    raw["gateway"]["auth"] = {"principals": [principal("a-token", "a"), principal("b-token", "b")]}
    gw = await gateway_factory(raw)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        # Two principals, one session each: the second is within its own share, beyond the total.
        first = await http.post(gw.mcp_url, json=initialize, headers=headers | bearer("a-token"))
        second = await http.post(gw.mcp_url, json=initialize, headers=headers | bearer("b-token"))
    assert (first.status_code, second.status_code) == (200, 503)


def test_the_port_caps_fit_both_ports_under_the_open_files_limit() -> None:
    assert connections.fitting_caps(4096, 1_048_576) == (4096, 4096)
    assert connections.fitting_caps(4096, resource.RLIM_INFINITY) == (4096, 4096)
    fits = 2 * (4096 + connections.ACCEPT_SLACK) + connections.OTHER_FDS
    assert connections.fitting_caps(4096, fits) == (4096, 4096)
    assert connections.fitting_caps(4096, 200) == (connections.MIN_CAP, connections.MIN_CAP)


@pytest.mark.parametrize("soft", [1024, 20_000, 8_000])
def test_short_of_descriptors_the_public_port_gets_all_but_what_the_admin_port_needs(soft: int) -> None:
    """Every open SSE stream is a public connection; probes and scrapes need a few."""
    public, admin = connections.fitting_caps(65_536, soft)
    assert admin == connections.ADMIN_WHEN_SHORT
    assert public + admin + 2 * connections.ACCEPT_SLACK + connections.OTHER_FDS == soft


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[Capture]:
    capture = Capture()
    loggers = [logging.getLogger(name) for name in ("asyncio", connections.__name__)]
    for one in loggers:
        one.addHandler(capture)
    yield capture
    for one in loggers:
        one.removeHandler(capture)


FIRST = "0 more since the last such line"


def accept_error() -> dict[str, Any]:
    """The context asyncio's selector loop passes when accept() fails for want of descriptors."""
    return {"message": connections.ACCEPT_ERROR_MESSAGE, "exception": OSError(errno.EMFILE, "Too many open files")}


async def test_accept_errors_are_logged_once_per_ten_seconds_with_the_count_held_back(captured: Capture) -> None:
    loop, clock, metrics = asyncio.get_running_loop(), Clock(), Metrics()
    handler = connections.AcceptErrors(None, metrics.accept_errors, connections.Throttle(10.0, clock))

    for i in range(1000):
        clock.now = i * 0.009  # all within the first ten seconds
        handler(loop, accept_error())
    clock.now = 10.0
    handler(loop, accept_error())

    lines = [r.getMessage() for r in captured.records]
    assert len(lines) == 2, lines
    assert lines[0].endswith(f"Too many open files; {FIRST}")
    assert lines[1].endswith("Too many open files; 999 more since the last such line")
    assert metrics.registry.get_sample_value("mcpg_connections_accept_errors_total") == 1001


async def test_other_loop_errors_reach_the_previous_handler_and_it_is_put_back_after(captured: Capture) -> None:
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()
    with connections.accept_errors_logged(loop, Metrics()):
        loop.call_exception_handler({"message": "something else failed", "exception": RuntimeError("boom")})
        loop.call_exception_handler(accept_error())
        loop.call_exception_handler(accept_error())
    assert loop.get_exception_handler() is before

    by_logger = [(r.name, r.getMessage().splitlines()[0]) for r in captured.records]
    assert by_logger == [
        ("asyncio", "something else failed"),  # the default handler's own line
        (connections.__name__, f"accepting a connection failed: {accept_error()['exception']}; {FIRST}"),
    ]
