"""Request heads held to fixed limits on both ports (`request_heads.py`), over raw sockets a client library would
tidy up.

A probe found two holes below every route: a head arriving in one packet was parsed at any size while the same
head in small packets was refused (h11 bounds only an incomplete head), and a request with both Content-Length
and Transfer-Encoding was served. A later one (issue 30) sent MCP-Protocol-Version twice: the SDK routed on the
first copy, the session limit read the last, and the cap was bypassed. Each test sends the same bytes in one
write and in many small ones, and reads what the gateway answers until it closes the connection. Small writes may
still reach the gateway as one read, so a head that never ends is what proves the answer to an incomplete head:
the gateway must decide without it.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from mcpg_gateway import request_heads
from mcpg_testing import BOUND_S
from mcpg_testing.configs import gateway_config, watched
from mcpg_testing.gateways import GatewayFactory, RunningGateway, fired

HOOK, TOKEN = "drive://folder/reports", "tok"
PIECE = 100
"""Bytes per write when a head is sent in many writes (with Nagle off, so each leaves as its own segment)."""
WRITES = pytest.mark.parametrize("piece", [None, PIECE], ids=["one write", "many writes"])
PORTS = pytest.mark.parametrize("port", ["public", "admin"])
PATHS = {"public": "/healthz", "admin": "/metrics"}


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    return await gateway_factory(gateway_config(watched("reports", HOOK, {"type": "webhook", "token": TOKEN})))


def number(gw: RunningGateway, port: str) -> int:
    return gw.port if port == "public" else gw.admin_port


def get_head(target: str, size: int | None = None, fields: int = 0) -> bytes:
    """`GET target` with `fields` extra header fields; padded with one more field to exactly `size` bytes."""
    head = f"GET {target} HTTP/1.1\r\nhost: gw\r\n" + "".join(f"x-f{i}: v\r\n" for i in range(fields))
    if size is not None:
        pad = size - len(head) - len("x-pad: \r\n\r\n")
        assert pad >= 0
        head += f"x-pad: {'a' * pad}\r\n"
    out = (head + "\r\n").encode()
    assert size is None or len(out) == size
    return out


async def answer(port: int, request: bytes, piece: int | None = None) -> tuple[bytes, bool]:
    """Send `request` (in one write, or `piece` bytes at a time); what the gateway answered, and whether it then
    closed the connection. Read with recv, which returns what arrived before a reset, as a stream reader would not."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    received, closed = b"", False
    try:
        async with asyncio.timeout(BOUND_S):
            await loop.sock_connect(sock, ("127.0.0.1", port))
            step = piece or len(request)
            for start in range(0, len(request), step):
                try:
                    await loop.sock_sendall(sock, request[start : start + step])
                except (BrokenPipeError, ConnectionResetError):
                    break  # the gateway answered and closed before the rest: read what it said
            received, closed = await _until_closed(loop, sock)
    finally:
        sock.close()
    return received, closed


async def _until_closed(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> tuple[bytes, bool]:
    """Everything received until the gateway closed the connection, or until one whole response was."""
    received = b""
    while True:
        try:
            data = await loop.sock_recv(sock, 65536)
        except ConnectionResetError:
            return received, True
        if not data:
            return received, True
        received += data
        head, _, body = received.lower().partition(b"\r\n\r\n")
        lengths = [int(line[15:]) for line in head.split(b"\r\n") if line.startswith(b"content-length:")]
        if lengths and len(body) >= lengths[0] and b"connection: close" not in head:
            return received, False  # a whole response, and the gateway keeps the connection open


def status(received: bytes) -> int:
    assert received.startswith(b"HTTP/1.1 "), received[:80]
    return int(received[9:12])


# --- Content-Length with Transfer-Encoding ----------------------------------------------------------------------


async def test_a_webhook_with_both_content_length_and_chunked_is_refused_with_400_closed_and_not_fired(
    gw: RunningGateway,
) -> None:
    request = (
        f"POST /webhooks/resource-updated/{TOKEN} HTTP/1.1\r\nhost: gw\r\n"
        "content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
    ).encode()
    received, closed = await answer(gw.port, request)
    assert (status(received), closed) == (400, True)
    assert b"Content-Length and Transfer-Encoding" in received
    assert fired(gw, "webhook") == 0
    # The same request without Content-Length is served: the refusal is about the pair.
    received, _ = await answer(gw.port, request.replace(b"content-length: 5\r\n", b""))
    assert status(received) == 200


@PORTS
async def test_both_framing_headers_are_refused_on_either_port_in_any_order_and_case(
    gw: RunningGateway, port: str
) -> None:
    request = (
        f"POST {PATHS[port]} HTTP/1.1\r\nhost: gw\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n"
    ).encode()
    received, closed = await answer(number(gw, port), request)
    assert (status(received), closed) == (400, True)


# --- head limits, independent of packets -------------------------------------------------------------------------


@PORTS
@WRITES
async def test_a_head_of_exactly_the_byte_limit_is_served_in_one_write_or_many(
    gw: RunningGateway, port: str, piece: int | None
) -> None:
    received, closed = await answer(number(gw, port), get_head(PATHS[port], size=request_heads.MAX_HEAD_BYTES), piece)
    assert (status(received), closed) == (200, False)


@PORTS
@WRITES
@pytest.mark.parametrize("size", [request_heads.MAX_HEAD_BYTES + 1, 2 * request_heads.MAX_HEAD_BYTES])
async def test_a_head_over_the_byte_limit_gets_431_in_one_write_or_many(
    gw: RunningGateway, port: str, piece: int | None, size: int
) -> None:
    received, closed = await answer(number(gw, port), get_head(PATHS[port], size=size), piece)
    assert (status(received), closed) == (431, True)


@PORTS
async def test_an_oversized_head_that_never_ends_gets_the_same_431(gw: RunningGateway, port: str) -> None:
    unfinished = get_head(PATHS[port], size=2 * request_heads.MAX_HEAD_BYTES)[:-2]  # no blank line: never complete
    received, closed = await answer(number(gw, port), unfinished, PIECE)
    assert (status(received), closed) == (431, True)


@WRITES
async def test_header_fields_beyond_the_count_limit_get_431_in_one_write_or_many(
    gw: RunningGateway, piece: int | None
) -> None:
    at_limit = get_head("/healthz", fields=request_heads.MAX_HEADER_FIELDS - 1)  # and `host`
    over = get_head("/healthz", fields=request_heads.MAX_HEADER_FIELDS)
    assert status((await answer(gw.port, at_limit, piece))[0]) == 200
    received, closed = await answer(gw.port, over, piece)
    assert (status(received), closed) == (431, True)


@WRITES
@pytest.mark.parametrize("extra", [1, 2 * request_heads.MAX_HEAD_BYTES])
async def test_a_request_line_over_its_limit_gets_414_in_one_write_or_many(
    gw: RunningGateway, piece: int | None, extra: int
) -> None:
    # `GET /healthz?q=… HTTP/1.1`: the request line is the target plus 13 bytes.
    at_limit = "/healthz?q=" + "a" * (request_heads.MAX_REQUEST_LINE_BYTES - 13 - len("/healthz?q="))
    assert status((await answer(gw.port, get_head(at_limit), piece))[0]) == 200
    received, closed = await answer(gw.port, get_head(at_limit + "a" * extra), piece)
    assert (status(received), closed) == (414, True)


async def test_a_request_line_that_never_ends_gets_the_same_414(gw: RunningGateway) -> None:
    received, closed = await answer(gw.port, b"GET /" + b"a" * 2 * request_heads.MAX_HEAD_BYTES, PIECE)
    assert (status(received), closed) == (414, True)


# --- headers read as one value -----------------------------------------------------------------------------------

FIRST, SECOND = "first-value-7f3a", "second-value-91c2"
"""Two values of one header: neither may show in the answer."""


def repeated(target: str, name: str) -> bytes:
    """A request whose `name` header is given twice, in two cases."""
    lines = [f"GET {target} HTTP/1.1", "host: gw", f"{name}: {FIRST}", f"{name.upper()}: {SECOND}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@PORTS
@WRITES
@pytest.mark.parametrize("name", sorted(n.decode() for n in request_heads.SINGLETON_HEADERS))
async def test_a_header_read_as_one_value_is_refused_with_400_when_repeated(
    gw: RunningGateway, port: str, piece: int | None, name: str
) -> None:
    received, closed = await answer(number(gw, port), repeated(PATHS[port], name), piece)
    assert (status(received), closed) == (400, True)
    assert received.endswith(f"Header {name} given more than once.".encode())  # its name, never its values
    assert FIRST.encode() not in received
    assert SECOND.encode() not in received


async def test_an_initialize_with_two_protocol_versions_is_refused_before_any_session_opens(
    gw: RunningGateway,
) -> None:
    """The issue's case: the SDK routed on the first value, the session limit read the last."""
    initialize = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
        '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
    )
    request = (
        "POST /mcp HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        "accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        f"MCP-Protocol-Version: 2026-07-28\r\ncontent-length: {len(initialize)}\r\n\r\n{initialize}"
    ).encode()
    received, closed = await answer(gw.port, request)
    assert (status(received), closed) == (400, True)
    assert b"mcp-session-id" not in received.lower()


@PORTS
async def test_headers_read_as_lists_may_repeat_beside_each_singleton_given_once(gw: RunningGateway, port: str) -> None:
    once = "".join(f"{n.decode()}: v\r\n" for n in sorted(request_heads.SINGLETON_HEADERS))
    request = (
        f"GET {PATHS[port]} HTTP/1.1\r\nhost: gw\r\n{once}accept: */*\r\naccept: text/plain\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
    )
    received, _ = await answer(number(gw, port), request.encode())
    assert status(received) == 200, received[:300]


async def test_h11_refuses_a_second_host_and_content_lengths_that_differ_and_merges_equal_ones(
    gw: RunningGateway,
) -> None:
    """h11's own rules (RFC 9112 3.2, RFC 9110 8.6), which `SINGLETON_HEADERS` therefore leaves out."""
    received, closed = await answer(gw.port, b"GET /healthz HTTP/1.1\r\nhost: gw\r\nHost: other\r\n\r\n")
    assert (status(received), closed) == (400, True)
    head = f"POST /webhooks/resource-updated/{TOKEN} HTTP/1.1\r\nhost: gw\r\n"
    same, _ = await answer(gw.port, f"{head}content-length: 2\r\ncontent-length: 2\r\n\r\n{{}}".encode())
    assert status(same) == 200
    different, closed = await answer(gw.port, f"{head}content-length: 2\r\ncontent-length: 3\r\n\r\n{{}}".encode())
    assert (status(different), closed) == (400, True)
